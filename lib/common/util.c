#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>
#include <pthread.h>

#include "common.h"

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Small buffers (message headers, records): the CPU's CRC32C instruction
 * 8 bytes at a time costs far less than ISA-L's set-up for a few dozen
 * bytes. crc is the raw register, as crc32_iscsi takes and returns it. */
__attribute__((target("sse4.2"))) static uint32_t crc_small_hw(uint32_t crc, const uint8_t *p,
								 size_t len)
{
	uint64_t c = crc;

	for (; len >= 32; p += 32, len -= 32) {
		uint64_t v0, v1, v2, v3;

		memcpy(&v0, p, 8);
		memcpy(&v1, p + 8, 8);
		memcpy(&v2, p + 16, 8);
		memcpy(&v3, p + 24, 8);
		c = _mm_crc32_u64(c, v0);
		c = _mm_crc32_u64(c, v1);
		c = _mm_crc32_u64(c, v2);
		c = _mm_crc32_u64(c, v3);
	}
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	crc = (uint32_t)c;
	if (len >= 4) {
		uint32_t v;

		memcpy(&v, p, sizeof(v));
		crc = _mm_crc32_u32(crc, v);
		p += 4;
		len -= 4;
	}
	while (len--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}

/* A message header's 76 covered bytes, unrolled: nine 8-byte steps and one
 * 4-byte step, no loop (two per I/O on each side of a connection). */
__attribute__((target("sse4.2"))) static uint32_t crc_76_hw(const uint8_t *p)
{
	uint64_t c = ~0u;
	uint32_t t;

#pragma GCC unroll 9
	for (int i = 0; i < 9; i++) {
		uint64_t v;

		memcpy(&v, p + 8 * i, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	memcpy(&t, p + 72, sizeof(t));
	return ~_mm_crc32_u32((uint32_t)c, t);
}
#define CRC_SMALL_MAX 256
#define CRC_SMALL_HW() __builtin_cpu_supports("sse4.2")
#else
#define CRC_SMALL_MAX 0
#define CRC_SMALL_HW() 0
#define crc_small_hw(crc, p, len) (crc)
#define crc_76_hw(p) 0u
#endif

/* crc is the standard (finalised) CRC. One call to ISA-L for anything up to
 * 1 GiB (its length is an int). */
static __attribute__((noinline)) uint32_t crc_isal(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	if (len <= (1u << 30))
		return ~crc32_iscsi((unsigned char *)p, (int)len, crc);
	while (len > 0) {
		int n = len > (1u << 30) ? (1 << 30) : (int)len;

		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= (size_t)n;
	}
	return ~crc;
}

uint32_t zl_crc32c_76(const void *buf)
{
	if (CRC_SMALL_HW())
		return crc_76_hw(buf);
	return crc_isal(0, buf, 76);
}

uint32_t zl_crc32c_update(uint32_t crc, const void *buf, size_t len)
{
	if (len <= CRC_SMALL_MAX && CRC_SMALL_HW())
		return ~crc_small_hw(~crc, buf, len);
	return crc_isal(crc, buf, len);
}

uint32_t zl_crc32c(const void *buf, size_t len)
{
	if (len <= CRC_SMALL_MAX && CRC_SMALL_HW())
		return ~crc_small_hw(~0u, buf, len);
	return crc_isal(0, buf, len);
}

/* Joining: crc(A || B) = M(crc(A)) ^ crc(B) for the standard CRC32C (the
 * init and final xor cancel), M the linear map "append 4096 zero bytes to
 * the raw register", which is crc -> update(crc, zeros) ^ crc(zeros). It is
 * kept as four 256-entry tables, one per byte of the CRC, built from M of
 * the 32 single bits. */
static uint32_t crc_4k_shift[4][256];
static pthread_once_t crc_4k_once = PTHREAD_ONCE_INIT;

static void crc_4k_init(void)
{
	static const uint8_t zeros[4096];
	uint32_t z = zl_crc32c(zeros, sizeof(zeros)), bit[32];

	for (int i = 0; i < 32; i++)
		bit[i] = zl_crc32c_update(1u << i, zeros, sizeof(zeros)) ^ z;
	for (int k = 0; k < 4; k++)
		for (int v = 0; v < 256; v++) {
			uint32_t m = 0;

			for (int i = 0; i < 8; i++)
				if (v & (1 << i))
					m ^= bit[8 * k + i];
			crc_4k_shift[k][v] = m;
		}
}

static inline uint32_t crc_4k_shift_of(uint32_t c)
{
	return crc_4k_shift[0][c & 0xff] ^ crc_4k_shift[1][(c >> 8) & 0xff] ^
	       crc_4k_shift[2][(c >> 16) & 0xff] ^ crc_4k_shift[3][c >> 24];
}

uint32_t zl_crc32c_4k_join(const uint32_t *crcs, size_t n)
{
	uint32_t c;

	if (!n)
		return 0;
	pthread_once(&crc_4k_once, crc_4k_init);
	c = crcs[0];
	for (size_t i = 1; i < n; i++)
		c = crc_4k_shift_of(c) ^ crcs[i];
	return c;
}

uint32_t zl_crc32c_4k_pieces(const void *buf, size_t n, uint32_t *crcs)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < n; i++)
		crcs[i] = zl_crc32c(p + i * 4096, 4096);
	return zl_crc32c_4k_join(crcs, n);
}

uint64_t zl_now_ms(void)
{
	return zl_now_ns() / 1000000ull;
}

int64_t zl_wall_sec(void)
{
	return (int64_t)time(NULL);
}

int zl_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0, mul = 1;
	const char *p = s;

	if (!s || !*s)
		return -ZL_ERR_INVAL;
	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p))
		return -ZL_ERR_INVAL;
	while (isdigit((unsigned char)*p)) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ZL_ERR_INVAL;
		v = v * 10 + d;
		p++;
	}
	switch (toupper((unsigned char)*p)) {
	case 'K': mul = 1ull << 10; p++; break;
	case 'M': mul = 1ull << 20; p++; break;
	case 'G': mul = 1ull << 30; p++; break;
	case 'T': mul = 1ull << 40; p++; break;
	case 'P': mul = 1ull << 50; p++; break;
	default: break;
	}
	if (mul > 1) {
		if (*p == 'i')
			p++;
		if (*p == 'B' || *p == 'b')
			p++;
	} else if (*p == 'B' || *p == 'b') {
		p++;
	}
	if (*p)
		return -ZL_ERR_INVAL;
	if (v && mul > UINT64_MAX / v)
		return -ZL_ERR_INVAL;
	*out = v * mul;
	return 0;
}

char *zl_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < ZL_ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

void zl_vol_id_format(uint64_t num, char out[ZL_VOL_ID_LEN + 1])
{
	snprintf(out, ZL_VOL_ID_LEN + 1, "vol-%016" PRIx64, num);
}

int zl_vol_id_parse(const char *s, uint64_t *num)
{
	uint64_t v = 0;

	if (!s || strncmp(s, "vol-", 4) || strlen(s) != ZL_VOL_ID_LEN)
		return -ZL_ERR_INVAL;
	for (const char *p = s + 4; *p; p++) {
		int d;

		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else
			return -ZL_ERR_INVAL;
		v = (v << 4) | (uint64_t)d;
	}
	if (v == 0)
		return -ZL_ERR_INVAL;
	*num = v;
	return 0;
}

uint64_t zl_random_u64(void)
{
	uint64_t v = 0;

	while (v == 0) {
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = zl_hash64(zl_now_ns() ^ (uint64_t)(uintptr_t)&v);
	}
	return v;
}

uint64_t zl_hash_str(const char *s, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return zl_hash64(h);
}

static int name_check(const char *s, size_t max)
{
	size_t n;

	if (!s)
		return -ZL_ERR_INVAL;
	n = strlen(s);
	if (n == 0 || n > max)
		return -ZL_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!isalnum(c) && c != '.' && c != '_' && c != '-')
			return -ZL_ERR_INVAL;
	}
	return 0;
}

int zl_node_id_check(const char *s)
{
	return name_check(s, 63);
}

int zl_volume_name_check(const char *s)
{
	return name_check(s, 253);
}

int zl_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int zl_dio_settle(int fd)
{
	return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4096) < 0 ? -errno : 0;
}

int zl_pwrite_all(int fd, const void *p, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const uint8_t *)p + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

int zl_u64_push(uint64_t **a, size_t *n, size_t *cap, uint64_t x)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		uint64_t *p = realloc(*a, c * sizeof(*p));

		if (!p)
			return -ENOMEM;
		*a = p;
		*cap = c;
	}
	(*a)[(*n)++] = x;
	return 0;
}
