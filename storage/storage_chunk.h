/* Chunk store: one sparse file per (volume, chunk) replica under
 * <data-dir>/chunks/<vol-id>/<chunk as %016llx>.zlc, format v2:
 *
 *   page 0           header: "ZLCHUNK2", vol u64 @8, chunk u64 @16,
 *                    chunk_size u32 @24, metadata pages u32 @28, entries
 *                    per page u32 @32, data offset u64 @40, birth: the
 *                    journal sequence u64 @48 and nonce (low 32 bits) u32
 *                    @56 at creation (0: accept every journal entry), CRC32C
 *                    of bytes [0,60) u32 @60 (all little-endian)
 *   pages 1..2M      metadata page p in two slots: A at 1+2p, B at 2+2p
 *   data             chunk_size bytes at zl_chunk_data_off(), sparse
 *
 * A metadata page covers ZL_CHUNK_META_ENTRIES (508) consecutive blocks:
 * "ZLMP" @0, u32 @4: page index (low 8 bits) | the chunk's wseq << 8 (see
 * "snapshots" below; 0 in files written before it), sequence u64 @8, chunk version u64 @16 (the
 * highest data version applied to its blocks), entries u32 @24, page CRC32C
 * u32 @28 (over [0,28) and [32,4096)), then per block {crc u32, prev_crc u32}.
 * A clone chunk (snapshots) also has "ZLCL" @64, lo u32 @68, hi u32 @72 and
 * the CRC32C of [64, 76) @76 in its header page.
 * The current slot of a page is its valid slot (magic, index, entries and
 * page CRC right) with the higher sequence; a page with no valid slot was
 * never written. A block is valid when its data matches crc, or prev_crc (a
 * crash hit between a metadata write and its data), or is all zeros with a
 * zero entry (never written / discarded). Reads verify every block.
 *
 * A write makes its new {crc, prev = the old crc} pairs and version durable
 * first: each touched page is rebuilt into the slot that is NOT current with
 * the chunk's next sequence (O_DIRECT + RWF_DSYNC through io_uring; a write
 * spanning several pages has all of them durable before any data; group
 * commit: one round serves every write that updated a page before it
 * started), then its data (RWF_DSYNC), and completes when the data is on
 * stable storage. A torn or lost metadata write leaves the old slot current;
 * it matches the old data, which was not yet overwritten. A zeroing writes
 * its pages (entries 0, prev = old crc), punches the whole blocks out
 * (PUNCH_HOLE|KEEP_SIZE), rewrites partial edge blocks, and completes only
 * after an fdatasync of the file (a punch is not covered by RWF_DSYNC).
 * A data block torn below 4 KiB by a crash of an unacknowledged write reads
 * as ZL_ERR_CORRUPT on that replica (detected, never silently wrong).
 *
 * Journal write path (opts.journal, `--write-path journal`): the above is
 * replaced by one record in the daemon's journal per group commit
 * (storage_journal.h); metadata pages are written by checkpoints, and a
 * journal left by an earlier run is replayed at creation whatever the path
 * (docs/JOURNAL.md, "The writer in zipline-storage").
 *
 * Format v1 files ("ZLCHUNK1" of 0.1: header | CRC table | data |
 * previous-CRC table) are converted at store creation (once: a FORMAT marker
 * file under chunks/ records it) or, if one appears later, when first opened:
 * the v2 file is written next to it, fsynced, renamed over it and the
 * directory fsynced, so a crash leaves either whole file.
 *
 * Threading: everything (calls and callbacks) on the loop's thread. Callbacks
 * never run inside the call that started the operation. Operation contexts
 * are preallocated in slabs and recycled; data bounce buffers come from the
 * caller's allocator (the transport pool in the daemon); the metadata tables
 * of an open chunk are allocated at open, outside that pool. */
#ifndef ZL_STORAGE_CHUNK_H
#define ZL_STORAGE_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/common/loop.h"
#include "lib/wire/wire.h"
#include "storage_journal.h"

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
	/* Write path (zipline-storage --write-path, journal by default):
	 * false = direct (each write
	 * makes its metadata and data durable in the chunk file), true =
	 * journal (a write is durable when its record in <data_dir>/journal-0
	 * is; chunk files are written behind it and synced by checkpoints).
	 * A journal file left by an earlier run is replayed either way. */
	bool journal;
	uint64_t journal_size; /* bytes of a new journal; 0: the default */
};

#define ZL_CHUNK_JOURNAL_DEFAULT (128ull << 20)
/* A journal must hold two of the largest records (a 4 MiB write each). */
#define ZL_CHUNK_JOURNAL_MIN (ZL_JOURNAL_RING_OFF + 2ull * ZL_JOURNAL_REC_MAX)

struct zl_chunk_store_stats {
	uint64_t reads, writes, zeroes;
	uint64_t meta_rounds;	   /* metadata write rounds (group commits) */
	uint64_t meta_rounds_done; /* of those, the ones that ended */
	uint64_t meta_page_writes; /* metadata pages written by those rounds */
	uint64_t zero_syncs;	   /* fdatasyncs completed after hole punches */
	uint64_t converted;	   /* v1 files converted to v2 */
	uint64_t corruptions;	   /* blocks that failed verification */
	uint64_t last_corrupt_vol;
	uint64_t last_corrupt_chunk;
	uint32_t last_corrupt_block;
	uint32_t open_chunks;
	uint32_t inflight; /* operations not yet completed */
	uint32_t open_jobs;    /* chunk opens and volume removals on the open workers */
	uint32_t vol_removals; /* deleted volumes whose files are still being removed */
	bool direct_io;	   /* false after an O_DIRECT fallback */
	bool unclean_start;	     /* opened without the clean marker: verified */
	uint64_t rolled_back_chunks; /* chunks of that scan dropped to version 0 */
	/* Journal replay: chunks holding a write newer than the version they
	 * may claim, dropped to version 0 (replay_inexact). */
	uint64_t replay_inexact_chunks;
	uint64_t rolled_back_blocks; /* blocks whose write had not landed */
	uint64_t deferred_closes;    /* files dropped with I/O in flight: closed by its end */
	/* Durable disk I/Os: writes with RWF_DSYNC, fdatasyncs, journal record
	 * and superblock writes (what a disk must flush for). */
	uint64_t durable_ios;
	bool journal;			/* journal write path */
	uint64_t checkpoints;		/* journal checkpoints completed */
	uint64_t early_acks; /* writes answered when their record was durable */
	uint64_t full_refused;		/* writes refused NOSPC: no room for new blocks (op_room) */
	uint32_t journal_dirty_chunks;	/* chunks changed since the last one */
	struct zl_jw_stats jw;		/* the journal's (zero without one) */
	struct zl_storage_uring_use uring; /* the chunk store's io_uring */
};

/* Completion: 0 or a negative error (-ZL_ERR_CORRUPT, -ZL_ERR_NOSPC,
 * -ZL_ERR_IO, -ZL_ERR_INVAL for a chunk whose header does not match). */
typedef void (*zl_chunk_cb)(void *arg, int status);

/* Creates <data_dir>/chunks, the io_uring and registers its eventfd on the
 * loop. Returns 0, -ZL_ERR_INVAL (missing options), or -errno (ring setup,
 * mkdir). */
int zl_chunk_store_create(const struct zl_chunk_store_opts *opts, struct zl_chunk_store **out);
/* Runs the loop until the operations in flight ended, their metadata
 * rounds too, and (journal) a checkpoint left the journal empty: bounded by
 * 30 s. Callbacks of every module on the loop run meanwhile, so call it while
 * they all still exist (zipline-storage: before tearing any down).
 * zl_chunk_store_destroy does it too. */
void zl_chunk_store_drain(struct zl_chunk_store *s);
/* Closes every chunk file and the ring. Operations still in flight are
 * waited for (bounded by the disk) before the ring goes away; their callbacks
 * run. Accepts NULL. */
void zl_chunk_store_destroy(struct zl_chunk_store *s);
/* Operations not yet completed (for draining at shutdown). */
uint32_t zl_chunk_store_inflight(const struct zl_chunk_store *s);
void zl_chunk_store_stats(const struct zl_chunk_store *s, struct zl_chunk_store_stats *st);
/* The data directory's filesystem has `bytes` free (sampled off the loop,
 * storage_ddir.c, every second). From then on a write or zeroing that needs
 * new blocks is refused NOSPC when it would leave less free than a slack
 * (8 MiB) plus, in journal mode, the journal's ring: a write answered from
 * the journal always has room in its chunk file, and the direct path's data
 * writes never meet a full disk. Loop thread. */
void zl_chunk_store_set_free(struct zl_chunk_store *s, uint64_t bytes);
/* Whether the data dir is near full: its free space estimate (above) within
 * 64 MiB of what the store keeps free. A primary then forwards a write
 * only once its own copy took it (storage_server.c srv_write_disk). */
bool zl_chunk_store_tight(const struct zl_chunk_store *s);
/* Whether the data dir is full: free space within 4 MiB of what the store
 * keeps free, so writes that need new blocks fail NOSPC (status record's
 * disk_full). */
bool zl_chunk_store_full(const struct zl_chunk_store *s);

/* The data directory can no longer be trusted (removed, replaced, read-only
 * or failing: storage_ddir.c): from now on every read, write, zeroing and
 * flush fails with -ZL_ERR_IO, at submission or, for those in flight, at
 * completion (none is acknowledged), and the journal takes nothing more.
 * Logs one error naming why (e.g. "data directory /x was removed while
 * running"). Final: only a restart undoes it; drain and destroy then leave
 * the journal as it is (no checkpoint, no CLEAN marker). Accepts NULL; a second call
 * does nothing. */
void zl_chunk_store_fence(struct zl_chunk_store *s, const char *why);
bool zl_chunk_store_fenced(const struct zl_chunk_store *s);

/* Blocks described by one metadata page. */
#define ZL_CHUNK_META_ENTRIES 508u

/* Metadata pages of a chunk of chunk_size bytes. */
static inline uint32_t zl_chunk_meta_pages(uint32_t chunk_size)
{
	return (chunk_size / 4096 + ZL_CHUNK_META_ENTRIES - 1) / ZL_CHUNK_META_ENTRIES;
}

/* File offset of slot (0 = A, 1 = B) of metadata page `page`. */
static inline uint64_t zl_chunk_slot_off(uint32_t page, unsigned slot)
{
	return 4096ull * (1 + 2ull * page + slot);
}

/* File offset of the data area (block b is at data_off + b * 4096). */
static inline uint64_t zl_chunk_data_off(uint32_t chunk_size)
{
	return zl_chunk_slot_off(zl_chunk_meta_pages(chunk_size), 0);
}

/* Size of the aligned read buffer zl_chunk_read needs for (off, len). */
static inline uint32_t zl_chunk_read_span(uint32_t off, uint32_t len)
{
	uint64_t a = off & ~4095ull, b = ((uint64_t)off + len + 4095) & ~4095ull;

	return (uint32_t)(b - a);
}

/* Writes len bytes of data at off of chunk `chunk` of volume vol (chunk size
 * chunk_size: a power of two >= 64 KiB). Creates the chunk file on first
 * write. A chunk not open is opened (created) on an open worker while the
 * operation waits: errors of that open reach cb. data must stay valid
 * until cb; a 4 KiB aligned data buffer with an
 * aligned range is written without a copy. version (the data version the
 * slice's primary assigned; 0 when none) is stored with the blocks'
 * metadata; the chunk's version becomes the highest seen once cb reports
 * success. Returns 0 (cb runs once) or -ZL_ERR_RANGE / -ZL_ERR_INVAL /
 * -ZL_ERR_NOSPC / -errno (cb does not run). */
int zl_chunk_write(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		   uint32_t off, uint32_t len, const void *data, uint64_t version, zl_chunk_cb cb,
		   void *arg);
/* zl_chunk_write of data whose whole blocks' CRC32Cs the caller verified
 * (crcs[0 .. len / 4096), e.g. from zl_xport_fetch_crcs): the store keeps
 * them instead of computing them again, when off and len are whole blocks
 * (crcs is ignored otherwise). crcs stays valid until cb. */
int zl_chunk_write_crcs(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
			uint64_t version, zl_chunk_cb cb, void *arg);

/* zl_chunk_write_crcs (data) or zl_chunk_zero (data NULL) that takes no
 * new space: one that would write a block holding no data now fails
 * -ZL_ERR_NOSPC through cb, nothing applied, counted as refused for room
 * (a primary whose row is short of room, docs/REPLICATION.md §9). */
int zl_chunk_overwrite(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
		       uint64_t version, zl_chunk_cb cb, void *arg);

/* Zeroes [off, off+len): whole blocks are punched out (sparse again, CRC
 * entries 0), partial edge blocks rewritten with zeros; cb runs after the
 * file's fdatasync, so acknowledged zeroes survive power loss. DISCARD and
 * WRITE_ZEROES both read back as zeros. A missing chunk stays missing (its
 * version is not recorded). version as zl_chunk_write. Returns as
 * zl_chunk_write. */
int zl_chunk_zero(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, uint64_t version, zl_chunk_cb cb, void *arg);

/* The chunk's version: the highest data version of its successful writes
 * and zeroings (the maximum over its metadata pages when opened). From
 * memory for an open chunk; a closed one is opened (reads its metadata
 * pages, blocking: call it at start-up or off the I/O path for many chunks).
 * 0 for a missing chunk. Returns 0, -ZL_ERR_INVAL (bad size or size differs
 * from the open chunk's), -ZL_ERR_CORRUPT (damaged header) or -errno. */
int zl_chunk_version(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		     uint64_t *version);

/* Whether a write or zeroing of (vol, chunk) was submitted and is not yet
 * visible in zl_chunk_version (running, queued behind another operation,
 * or waiting for the chunk's open; one answered early, journal mode, has
 * made its version visible). With zl_chunk_version, what a writer that
 * must not overwrite a newer write checks right before it submits (scrub's
 * repair of its own copy): a write submitted after that is ordered after
 * it. */
bool zl_chunk_changing(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk);

/* Makes the next zl_chunk_version / zl_chunk_wseq of (vol, chunk) answer
 * from memory without opening the chunk on the loop: 1 when the chunk is
 * open now (no callback); 0 when its open was queued on the store's open
 * workers: cb(arg, status) then runs on the loop once the open ended
 * (status 0: open, or no file; else the open's error; the chunk may be
 * evicted again later, the synchronous call then opens it itself). Scans
 * over many chunks (peering, recovery, CHUNK_VERSIONS, scrub) warm a batch
 * (with the chunks' clones: zl_chunk_snap_warm), then look it up. Returns
 * -ZL_ERR_INVAL, the fence error or -ENOMEM (no callback). */
int zl_chunk_warm(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  zl_chunk_cb cb, void *arg);

/* Reads [off, off+len) into buf, a 4 KiB aligned buffer of at least
 * zl_chunk_read_span(off, len) bytes; on success the data starts at
 * buf + (off % 4096). Every covered block is verified. A chunk that was
 * never written reads as zeros; one whose file went missing (see "scrub"
 * below) fails with -ZL_ERR_CORRUPT (returned, or given to cb when the
 * chunk was not open). Returns as zl_chunk_write. */
int zl_chunk_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, void *buf, zl_chunk_cb cb, void *arg);
/* zl_chunk_read that also leaves the CRC32C of every block read in
 * crcs[0 .. len / 4096) when off and len are whole blocks; crcs is ignored
 * otherwise. A block read for the first time since its CRC last changed is
 * checked against the stored CRC on the way (no second pass); a block
 * checked before gets its stored CRC without being checked again: its
 * reader verifies the data against the CRC the reply carries, joined from
 * these (zl_xport_reply_crcs), and reads around a copy that fails (CRC once
 * per byte read, by the reader; scrub still checks every block on disk).
 * recheck: check every block all the same (a read around a bad copy, zl
 * volume verify: READ + ZL_WF_ANY; a client's read sent again after its data
 * failed its CRCs: READ with ZL_READ_RECHECK). For client reads only: the caller must
 * send crcs with the data. */
int zl_chunk_read_crcs(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, void *buf, uint32_t *crcs, bool recheck,
		       zl_chunk_cb cb, void *arg);

/* ---- scrub (storage_scrub.c) ----
 *
 * The store records every chunk it has seen a file of (listed at start,
 * opened or created since; forgotten only by zl_chunk_delete and
 * zl_chunk_volume_delete). A recorded chunk whose file is gone is missing:
 * zl_chunk_read fails with -ZL_ERR_CORRUPT (logged), never zeros. A file
 * unlinked while the store holds it open is noticed by reads within a
 * second and by zl_chunk_scrub_stat at once. Such a chunk is lost: reads
 * fail, zl_chunk_version answers 0 (behind) and zl_chunk_scrub_stat MISSING
 * even after a write recreated the file, until every block was written
 * again in full (zeroings count) or zl_chunk_delete forgets it. Memory
 * only: a restart records the files present then. */

enum zl_chunk_scrub_state {
	ZL_CHUNK_ABSENT = 0,  /* no file, never recorded: nothing held */
	ZL_CHUNK_PRESENT = 1, /* the file is there */
	ZL_CHUNK_MISSING = 2, /* recorded, file gone: every block lost */
};

/* Whether the store holds, or held, chunk id `chunk` of vol: open, or a
 * file recorded (a missing one too: it reads as an error, never as never
 * written). False for a chunk never written here, or deleted
 * (zl_chunk_delete, zl_chunk_volume_delete). Memory only: what a clone's
 * READ and WRITE with ZL_WF_ABSENT and a copy-up's ZL_WF_CREATE ask
 * (docs/SNAPSHOTS.md §4). */
bool zl_chunk_held(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk);

/* What the store holds of a chunk: a zl_chunk_scrub_state, *version its
 * version (PRESENT) or the last one recorded (MISSING, 0 if never opened).
 * Blocking (stat, and opens the chunk like zl_chunk_version). Returns the
 * state or a negative error. */
int zl_chunk_scrub_stat(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			uint32_t chunk_size, uint64_t *version);

/* zl_chunk_read for scrub: every block is verified, and *bad grows by the
 * number of blocks matching neither crc nor prev_crc (each logged) instead
 * of failing the read; buf then holds what the disk holds. Returns 0 (cb
 * runs once), -ZL_ERR_NOT_FOUND when there is no file (returned for an open
 * chunk found unlinked, else given to cb by the chunk's open), or as
 * zl_chunk_read. */
int zl_chunk_scrub_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, void *buf, uint32_t *bad, zl_chunk_cb cb,
			void *arg);

/* fdatasync of every open chunk of vol (async); holds a reference on each
 * of them until cb. Returns as zl_chunk_write. */
int zl_chunk_flush(struct zl_chunk_store *s, uint64_t vol, zl_chunk_cb cb, void *arg);

/* Allocated bytes of the replica file (0 when absent). 0 or -errno. */
int zl_chunk_info(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint64_t *allocated);
/* Removes one replica. The file is unlinked and the chunk forgotten at
 * once: a later operation on (vol, chunk) is a new replica (a write creates a
 * new file, a read sees none). Operations accepted before the delete (reads,
 * writes and zeroings in flight or queued behind another, metadata rounds,
 * and every zl_chunk_flush in flight on the chunk) keep a reference on the
 * open file: they finish on the unlinked file (ordered before the delete)
 * and their callbacks run as usual; the descriptor is closed only when the
 * last of them ended, never under I/O in flight or prepared. Operations
 * waiting on the chunk's open (not open yet) fail with -ZL_ERR_NOT_FOUND,
 * and a file the open creates is removed. 0 (also when absent) or -errno. */
int zl_chunk_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk);
/* Removes every replica of vol and its directory. *removed (optional) gets
 * the number of chunk files removed. 0 or -errno. The store then refuses
 * to create a chunk or clone file of vol (-ZL_ERR_NOT_FOUND): a write
 * checked before the delete but started after it (waiting for its payload,
 * its fair share, a clone) would otherwise leave a file no tombstone names.
 * The last ZL_CHUNK_GONE_VOLS deleted volumes are remembered (volume ids
 * are never reused; a write waits seconds at most). */
#define ZL_CHUNK_GONE_VOLS 256u
int zl_chunk_volume_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t *removed);
/* zl_chunk_volume_delete with the files removed on one of the store's open
 * workers (a volume's thousands of unlinks never stall the loop): the
 * replicas are gone for every caller at once, cb(arg, status, removed)
 * (optional) runs on the loop once the files are (status 0 or -errno); not
 * at all when the store is destroyed first (the files stay: the volume's
 * tombstone still names them). A delete of a volume whose files are
 * being removed waits for that removal (cb then gets its status, removed
 * 0: the files count once). Counted by zl_chunk_store_inflight and
 * waited for by zl_chunk_store_drain. 0, or -ENOMEM / -ENAMETOOLONG
 * (nothing done). */
typedef void (*zl_chunk_vol_cb)(void *arg, int status, uint64_t removed);
int zl_chunk_volume_delete_start(struct zl_chunk_store *s, uint64_t vol, zl_chunk_vol_cb cb,
				 void *arg);
/* Whether vol was deleted by zl_chunk_volume_delete (above). Loop thread. */
bool zl_chunk_vol_gone(const struct zl_chunk_store *s, uint64_t vol);

/* Calls fn for every volume that has a directory under chunks/ (what this
 * node holds; removal goes through tombstones, never by this list). Stops
 * and returns fn's value when nonzero. */
int zl_chunk_volume_foreach(struct zl_chunk_store *s, int (*fn)(void *arg, uint64_t vol),
			    void *arg);

/* ---- snapshots: clone chunks (storage_snap.c, docs/SNAPSHOTS.md §2) ----
 *
 * A chunk's wseq is the highest snapshot sequence of the writes applied to
 * it. A write carrying sequence N to a chunk whose wseq is w < N first
 * preserves the chunk when one of the volume's snapshots s has w < s <= N:
 * a clone chunk (lo = w, hi = N], id zl_chunk_clone_id(chunk, N), a chunk
 * file like any other holding the chunk's data and version at that moment.
 * The copy is read through the store (ordered after every operation on
 * the chunk submitted before) and written by a helper thread into
 * <id>.zlc.tmp, fsynced, renamed and the directory fsynced; the write, and
 * every later one of that chunk, waits for it. A crash before the rename
 * leaves the .tmp file, which the next start-up removes; the write was never
 * acknowledged. wseq is kept in the chunk's metadata pages (the direct write
 * path writes it with the write's own metadata, the journal path with the
 * next checkpoint); after a crash it is at least the highest hi of the
 * chunk's clones, which is all copy-on-write relies on. */

/* Sequences are below 2^24 and chunk indexes below 2^40 (SNAPSHOTS.md §2). */
#define ZL_CHUNK_SEQ_MAX   ((1u << 24) - 1)
#define ZL_CHUNK_IDX_BITS  ZL_WIRE_CHUNK_IDX_BITS
#define ZL_CHUNK_IDX_MASK  ((1ull << ZL_CHUNK_IDX_BITS) - 1)

static inline uint64_t zl_chunk_clone_id(uint64_t chunk, uint32_t hi)
{
	return ((uint64_t)hi << ZL_CHUNK_IDX_BITS) | chunk;
}

/* The volume chunk an id names (itself for a live chunk). */
static inline uint64_t zl_chunk_id_base(uint64_t id)
{
	return id & ZL_CHUNK_IDX_MASK;
}

/* A copy-on-write write or zeroing, owned by the caller until cb runs
 * (nothing is allocated per request). snaps[0 .. n_snaps) are the volume's
 * existing snapshot sequences, ascending; they (and data, crcs) stay valid
 * until cb. */
struct zl_chunk_cow {
	uint64_t vol, chunk;
	uint32_t chunk_size, off, len;
	bool zero;		/* zl_chunk_zero instead of a write */
	const void *data;	/* write: as zl_chunk_write_crcs */
	const uint32_t *crcs;	/* write: optional, as zl_chunk_write_crcs */
	uint64_t version;
	uint32_t seq;		/* the snapshot sequence the client believes current */
	const uint32_t *snaps;
	uint32_t n_snaps;
	/* Take no new space (zl_chunk_overwrite): a write that needs a copy
	 * for a snapshot or new blocks fails -ZL_ERR_NOSPC. */
	bool no_new;
	zl_chunk_cb cb;
	void *arg;
	/* private */
	struct zl_chunk_cow *next;
};

/* Applies w after preserving the chunk for the snapshots it would change
 * (above). Writes of one chunk are applied in submission order. Returns 0
 * (cb runs once, never inside this call: 0, -ZL_ERR_STALE when w->seq is
 * below the chunk's wseq — the client missed a snapshot and must resend
 * with the current sequence —, or as zl_chunk_write), -ZL_ERR_STALE or
 * -ZL_ERR_INVAL / -ZL_ERR_RANGE / -errno (cb does not run). */
int zl_chunk_cow_submit(struct zl_chunk_store *s, struct zl_chunk_cow *w);

/* The chunk id holding chunk as snapshot seq (>= 1) holds it: the clone with
 * the smallest hi such that lo < seq <= hi, else chunk itself (the live
 * chunk). Memory only. */
uint64_t zl_chunk_snap_id(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t seq);

/* zl_chunk_read of the chunk as snapshot seq holds it (zl_chunk_snap_id).
 * Returns as zl_chunk_read. */
int zl_chunk_snap_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
		       uint32_t chunk_size, uint32_t seq, uint32_t off, uint32_t len, void *buf,
		       zl_chunk_cb cb, void *arg);

/* Removes vol's clone chunks that none of snaps[0 .. n) (the snapshots that
 * remain, ascending) falls into: forgotten at once, their files unlinked by
 * the helper thread; cb(arg, 0 or the first unlink error) when all are
 * gone. *removed (optional) gets how many. Returns 0 (cb runs once) or
 * -ENOMEM. */
int zl_chunk_snap_gc(struct zl_chunk_store *s, uint64_t vol, const uint32_t *snaps, uint32_t n,
		     uint32_t *removed, zl_chunk_cb cb, void *arg);

/* Whether this store holds a clone chunk of vol (memory only). */
bool zl_chunk_snap_vol_has(struct zl_chunk_store *s, uint64_t vol);
/* Makes chunk id (a clone id, hi = id >> 40) of vol, written whole through
 * zl_chunk_write (recovery's copy of another replica's clone), the clone
 * (lo, hi]: its helper thread writes the clone extension into the file's
 * header and fsyncs it, then the index takes it (reads at a sequence,
 * copy-on-write's wseq). A crash before leaves a chunk file without the
 * extension, not used for snapshots (recovery copies it again). Returns 0
 * (cb runs once, never inside this call, with 0 or -errno), -ZL_ERR_INVAL
 * (not a clone id, lo >= hi) or -ENOMEM. */
int zl_chunk_snap_install(struct zl_chunk_store *s, uint64_t vol, uint64_t id, uint32_t lo,
			  zl_chunk_cb cb, void *arg);

/* The volumes this store holds clone chunks of, ascending, in *out
 * (malloc'd, NULL when none; the caller frees it). 0 or -ENOMEM. */
int zl_chunk_snap_vols(struct zl_chunk_store *s, uint64_t **out, uint32_t *n);

/* A clone chunk of a volume chunk: (lo, hi]. */
struct zl_chunk_clone {
	uint32_t lo, hi;
};

/* The clones of (vol, chunk) this store holds, ascending hi, at most max
 * into out. Returns how many there are (may exceed max). */
uint32_t zl_chunk_snap_clones(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			      struct zl_chunk_clone *out, uint32_t max);

/* zl_chunk_warm of (vol, chunk) and of each of its clone chunks (their
 * versions are looked up with the chunk's: CHUNK_VERSIONS, peering's and
 * recovery's clone plans, scrub's digest). Returns the number of opens
 * queued: cb(arg, status) runs once for each. */
unsigned zl_chunk_snap_warm(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			    uint32_t chunk_size, zl_chunk_cb cb, void *arg);

/* The space clone chunks hold for one snapshot of a volume: the clones
 * whose newest existing reader is snapshot seq, and what their files
 * allocate on disk (st_blocks * 512: sparse clones count their blocks). */
struct zl_chunk_snap_space {
	uint64_t vol;
	uint32_t seq;
	uint32_t clones;
	uint64_t bytes;
};

/* This store's clone chunk space: *total (optional) gets the bytes of every
 * clone, out[0 .. min(n, max)) the entries by ascending (vol, seq). A clone
 * counts for the newest snapshot in its (lo, hi] that exists, as of its
 * volume's last collection (zl_chunk_snap_gc; a clone taken since, or
 * indexed at start-up or installed by recovery, counts for the snapshot
 * its write was taken for, or its hi). Memory only (the sizes are measured
 * off the loop). Returns n, how many entries there are. */
uint32_t zl_chunk_snap_space(struct zl_chunk_store *s, struct zl_chunk_snap_space *out,
			     uint32_t max, uint64_t *total);

#endif
