/* Common helpers shared by every Zipline module. */
#ifndef ZL_COMMON_H
#define ZL_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <time.h>

#include "zl_err.h"
#include "log.h"

#define ZL_VERSION_STRING "0.1.0"
#define ZL_BLOCK_SIZE 4096u
#define ZL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ZL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ZL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define ZL_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))
#define ZL_ALIGN_DOWN(x, a) ((x) & ~((uint64_t)(a) - 1))
#define ZL_CONTAINER_OF(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* CRC32C (Castagnoli), standard init/final xor: zl_crc32c("123456789") = 0xe3069283.
 * zl_crc32c_update(0, ...) == zl_crc32c(...); chains over pieces. ISA-L backed;
 * up to 256 bytes (headers) the CPU's CRC32C instruction on x86-64. */
uint32_t zl_crc32c(const void *buf, size_t len);
uint32_t zl_crc32c_update(uint32_t crc, const void *buf, size_t len);
/* zl_crc32c(buf, 76), unrolled for the 76 bytes a wire header's CRC covers. */
uint32_t zl_crc32c_76(const void *buf);
/* CRC once per byte (DAOS-style): n 4 KiB pieces of buf, crcs[i] = the CRC32C
 * of piece i; returns the CRC32C of all n * 4096 bytes, joined from the
 * pieces' CRCs without a second pass. */
uint32_t zl_crc32c_4k_pieces(const void *buf, size_t n, uint32_t *crcs);
/* The CRC32C of n 4 KiB pieces whose CRCs are crcs[0..n) (0 for n = 0): a
 * message's CRC from the block CRCs a store already holds. */
uint32_t zl_crc32c_4k_join(const uint32_t *crcs, size_t n);

/* Monotonic and wall clocks. zl_now_ns is inline: several reads per I/O
 * (submit and completion latencies, loop passes). */
static inline uint64_t zl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
uint64_t zl_now_ms(void);
int64_t zl_wall_sec(void);

/* Parses "10G", "4M", "512", "1.5T"? (integers only), K/M/G/T/P with optional
 * "i"/"iB"/"B" suffix, powers of 1024. Returns 0 or ZL_ERR_INVAL (also on
 * overflow, empty, negative, trailing junk). */
int zl_parse_size(const char *s, uint64_t *out);
/* Formats bytes as "10.0 GiB" into buf. Returns buf. */
char *zl_format_size(uint64_t bytes, char *buf, size_t len);

/* Volume ids: "vol-" + 16 lowercase hex digits; the 64-bit number is what the
 * wire protocol carries. */
#define ZL_VOL_ID_LEN 20 /* without NUL */
void zl_vol_id_format(uint64_t num, char out[ZL_VOL_ID_LEN + 1]);
int zl_vol_id_parse(const char *s, uint64_t *num); /* 0 or ZL_ERR_INVAL */
/* 64 random bits from getrandom(); never 0. */
uint64_t zl_random_u64(void);
/* Appends x to the growable array *a of *n entries (*cap allocated; it
 * doubles, from 16). 0 or -ENOMEM (the array stays as it was). */
int zl_u64_push(uint64_t **a, size_t *n, size_t *cap, uint64_t x);

/* fsync of a directory (after creating, renaming or removing an entry in
 * it). 0 or -errno. */
int zl_fsync_dir(const char *path);
/* Writes all len bytes at off (short writes and EINTR retried). 0, -errno,
 * or -EIO when the file stopped taking bytes. */
int zl_pwrite_all(int fd, const void *p, size_t len, uint64_t off);
/* Waits until every direct write into fd's file that is still in flight
 * has landed, including those of a process that died (kill -9): its
 * io_uring writes are not waited for at exit, a write into a hole completes
 * (its extent converted) from a kernel workqueue well after waitpid()
 * returned. fallocate() waits for them (inode_dio_wait, ext4 and xfs); it
 * is given the file's first 4 KiB (a header, allocated: nothing changes).
 * 0 or -errno (-EOPNOTSUPP: the file system cannot tell). */
int zl_dio_settle(int fd);

/* 64-bit mixing hash (deterministic, for placement and hash tables):
 * the splitmix64 finalizer. Inline: the I/O path hashes volume and chunk
 * numbers several times per request. */
static inline uint64_t zl_hash64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}
uint64_t zl_hash_str(const char *s, uint64_t seed);

/* Node and volume name rules: 1..63 chars of [A-Za-z0-9._-] for node ids;
 * volume names 1..253 chars of [A-Za-z0-9._-]. Return 0 or ZL_ERR_INVAL. */
int zl_node_id_check(const char *s);
int zl_volume_name_check(const char *s);

#endif
