/* What storage_snap.c (clone chunks, docs/SNAPSHOTS.md §2) needs of the
 * chunk store's insides. Not for other folders: they use storage_chunk.h. */
#ifndef ZL_STORAGE_CHUNK_INTERNAL_H
#define ZL_STORAGE_CHUNK_INTERNAL_H

#include "storage_chunk.h"

struct zl_chunk_snap;

/* zl_chunk_write_crcs / zl_chunk_zero that also raise the chunk's wseq to
 * wseq before its metadata is built (a zeroing of a missing chunk records
 * nothing, as its version); with no_new, as zl_chunk_overwrite. Returns as
 * those. */
int zl_chunk_write_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
			uint64_t version, uint32_t wseq, bool no_new, zl_chunk_cb cb, void *arg);
int zl_chunk_zero_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, uint64_t version, uint32_t wseq, bool no_new,
		       zl_chunk_cb cb, void *arg);
/* Counts a write refused for room (zl_chunk_store_stats full_refused): a
 * copy-on-write's copy that would take new space under no_new. */
void zl_chunk_store_refused_room(struct zl_chunk_store *s);

/* The chunk's wseq and version (as zl_chunk_version: 0 when lost; 0, 0 for
 * a missing chunk); opens a closed one like it. Returns as it does. */
int zl_chunk_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t *wseq, uint64_t *version);

/* <data_dir>/chunks, the loop, and the birth stamp a chunk file created now
 * gets (storage_chunk.h, header). Loop thread. */
const char *zl_chunk_store_dir(const struct zl_chunk_store *s);
struct zl_loop *zl_chunk_store_loop(const struct zl_chunk_store *s);
void zl_chunk_store_birth(const struct zl_chunk_store *s, uint64_t *seq, uint32_t *nonce);
struct zl_chunk_snap *zl_chunk_store_snap(const struct zl_chunk_store *s);

/* Clone chunk file header extension (page 0, after the v2 fields):
 * "ZLCL" @64, lo u32 @68, hi u32 @72, CRC32C of [64, 76) u32 @76. */
#define ZL_CHUNK_CLONE_EXT_OFF 64u

/* Writes clone chunk `id` of vol: a v2 chunk file holding data (chunk_size
 * bytes; zero blocks stay holes) with version, birth stamp and the clone
 * extension (lo, hi], through <path>.tmp: written, fsynced, renamed,
 * directory fsynced (the volume directory is created when absent). Blocking,
 * touches no store state: any thread. Returns 0 or -errno. */
int zl_chunk_clone_file_write(const char *chunks_dir, uint64_t vol, uint64_t id,
			      uint32_t chunk_size, uint32_t lo, uint32_t hi, uint64_t version,
			      uint64_t birth_seq, uint32_t birth_nonce, const uint8_t *data);

/* Reads the clone extension of the file at path: 0 with *lo, *hi, or
 * -ZL_ERR_CORRUPT / -errno. Blocking, any thread. */
int zl_chunk_clone_file_range(const char *path, uint32_t *lo, uint32_t *hi);

/* Writes the clone extension (lo, hi] into the header page of the chunk
 * file at path (a clone chunk copied by recovery: its data and metadata
 * came as writes) and fsyncs it. Blocking, any thread. 0 or -errno. */
int zl_chunk_clone_file_mark(const char *path, uint32_t lo, uint32_t hi);

/* A clone file renamed into place by the helper: recorded like any chunk
 * seen (a missing file is an error from now on). Loop thread. */
void zl_chunk_clone_adopt(struct zl_chunk_store *s, uint64_t vol, uint64_t id);
/* Forgets chunk id (like zl_chunk_delete) but leaves the unlink of its file
 * to the caller (off the loop). Operations in flight on it finish as for
 * zl_chunk_delete. Loop thread. */
void zl_chunk_forget(struct zl_chunk_store *s, uint64_t vol, uint64_t id);

/* storage_snap.c, called by the store's create and destroy: the clone
 * index from the files present (a leftover <id>.zlc.tmp of a crash is
 * removed first), the helper thread; drain waits (bounded, running the
 * loop) for clones and collections in flight; destroy joins the helper. */
int zl_chunk_snap_create(struct zl_chunk_store *s, struct zl_chunk_snap **out);
/* zl_chunk_delete of a clone chunk id, or zl_chunk_volume_delete (id
 * UINT64_MAX): the index forgets it. Accepts NULL. */
void zl_chunk_snap_forget(struct zl_chunk_snap *sn, uint64_t vol, uint64_t id);
void zl_chunk_snap_drain(struct zl_chunk_snap *sn, uint64_t deadline_ms);
void zl_chunk_snap_destroy(struct zl_chunk_snap *sn);

#endif
