/* Chunk store: one sparse file per (volume, chunk) replica under
 * <data-dir>/chunks/<vol-id>/<chunk as %016llx>.zlc, laid out as
 *   4 KiB header page | CRC32C table (one u32 per 4 KiB block, padded to
 *   4 KiB) | data (chunk_size bytes, sparse) | previous-CRC table (same size
 *   as the CRC table: the CRC each block had before its last write).
 * Data and CRC pages are written with O_DIRECT + RWF_DSYNC through one
 * io_uring whose eventfd is registered on a struct zl_loop. A write first
 * makes its blocks' new CRCs durable (group commit: one CRC page write serves
 * every write that updated the page before it started), then its data, and
 * completes when the data is on stable storage. A block is valid when it
 * matches its CRC, or its previous CRC (a crash hit between the two writes),
 * or is all zeros with a zero entry (never written / discarded). Reads verify
 * every block.
 *
 * Threading: everything (calls and callbacks) on the loop's thread. Callbacks
 * never run inside the call that started the operation. Operation contexts
 * are preallocated in slabs and recycled; disk buffers come from the caller's
 * allocator (the transport pool in the daemon). */
#ifndef ZL_STORAGE_CHUNK_H
#define ZL_STORAGE_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/common/loop.h"

struct zl_chunk_store;

/* Allocator for 4 KiB aligned buffers (e.g. zl_xport_buf_alloc). */
typedef void *(*zl_chunk_buf_alloc_fn)(void *arg, size_t len);
typedef void (*zl_chunk_buf_free_fn)(void *arg, void *buf);

struct zl_chunk_store_opts {
	const char *data_dir; /* chunk files live in <data_dir>/chunks */
	struct zl_loop *loop;
	uint32_t max_open;		 /* open chunk files kept (LRU), default 1024 */
	uint32_t ring_entries;		 /* io_uring SQ size, default 512 */
	zl_chunk_buf_alloc_fn buf_alloc; /* required */
	zl_chunk_buf_free_fn buf_free;	 /* required */
	void *buf_arg;
};

struct zl_chunk_store_stats {
	uint64_t reads, writes, zeroes;
	uint64_t crc_page_writes; /* CRC write rounds (group commits) */
	uint64_t corruptions;	  /* blocks that failed verification */
	uint64_t last_corrupt_vol;
	uint64_t last_corrupt_chunk;
	uint32_t last_corrupt_block;
	uint32_t open_chunks;
	uint32_t inflight; /* operations not yet completed */
	bool direct_io;	   /* false after an O_DIRECT fallback */
};

/* Completion: 0 or a negative error (-ZL_ERR_CORRUPT, -ZL_ERR_NOSPC,
 * -ZL_ERR_IO, -ZL_ERR_INVAL for a chunk whose header does not match). */
typedef void (*zl_chunk_cb)(void *arg, int status);

/* Creates <data_dir>/chunks, the io_uring and registers its eventfd on the
 * loop. Returns 0, -ZL_ERR_INVAL (missing options), or -errno (ring setup,
 * mkdir). */
int zl_chunk_store_create(const struct zl_chunk_store_opts *opts, struct zl_chunk_store **out);
/* Closes every chunk file and the ring. Operations still in flight are
 * waited for (bounded by the disk) before the ring goes away; their callbacks
 * run. Accepts NULL. */
void zl_chunk_store_destroy(struct zl_chunk_store *s);
/* Operations not yet completed (for draining at shutdown). */
uint32_t zl_chunk_store_inflight(const struct zl_chunk_store *s);
void zl_chunk_store_stats(const struct zl_chunk_store *s, struct zl_chunk_store_stats *st);

/* Size of the aligned read buffer zl_chunk_read needs for (off, len). */
static inline uint32_t zl_chunk_read_span(uint32_t off, uint32_t len)
{
	uint64_t a = off & ~4095ull, b = ((uint64_t)off + len + 4095) & ~4095ull;

	return (uint32_t)(b - a);
}

/* Writes len bytes of data at off of chunk `chunk` of volume vol (chunk size
 * chunk_size: a power of two >= 64 KiB). Creates the chunk file on first
 * write. data must stay valid until cb; a 4 KiB aligned data buffer with an
 * aligned range is written without a copy. Returns 0 (cb runs once) or
 * -ZL_ERR_RANGE / -ZL_ERR_INVAL / -ZL_ERR_NOSPC / -errno (cb does not run). */
int zl_chunk_write(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		   uint32_t off, uint32_t len, const void *data, zl_chunk_cb cb, void *arg);

/* Zeroes [off, off+len): whole blocks are punched out (sparse again, CRC
 * entries 0), partial edge blocks rewritten with zeros. DISCARD and
 * WRITE_ZEROES both read back as zeros. Returns as zl_chunk_write. */
int zl_chunk_zero(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, zl_chunk_cb cb, void *arg);

/* Reads [off, off+len) into buf, a 4 KiB aligned buffer of at least
 * zl_chunk_read_span(off, len) bytes; on success the data starts at
 * buf + (off % 4096). Every covered block is verified. A missing chunk reads
 * as zeros. Returns as zl_chunk_write. */
int zl_chunk_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, void *buf, zl_chunk_cb cb, void *arg);

/* fdatasync of every open chunk of vol (async). Returns as zl_chunk_write. */
int zl_chunk_flush(struct zl_chunk_store *s, uint64_t vol, zl_chunk_cb cb, void *arg);

/* Allocated bytes of the replica file (0 when absent). 0 or -errno. */
int zl_chunk_info(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint64_t *allocated);
/* Removes one replica (in-flight operations finish on the unlinked file).
 * 0 (also when absent) or -errno. */
int zl_chunk_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk);
/* Removes every replica of vol and its directory. *removed (optional) gets
 * the number of chunk files removed. 0 or -errno. */
int zl_chunk_volume_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t *removed);

/* Calls fn for every volume that has a directory under chunks/ (what this
 * node holds; removal goes through tombstones, never by this list). Stops
 * and returns fn's value when nonzero. */
int zl_chunk_volume_foreach(struct zl_chunk_store *s, int (*fn)(void *arg, uint64_t vol),
			    void *arg);

#endif
