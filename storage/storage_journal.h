/* The storage daemon's write-ahead journal writer (issue 22, step 2): one
 * journal file per daemon (<data_dir>/journal-0, format in docs/JOURNAL.md,
 * encode/decode/replay in lib/journal), written with O_DIRECT + RWF_DSYNC
 * through its own io_uring, one record (one write) per group commit.
 *
 * Group commit: items appended while a record write is in flight join the
 * next record; items appended while none is in flight go out at the end of
 * the current loop pass (every request that arrived in that pass shares the
 * record). An item's callback runs once its record is durable (or failed).
 *
 * Space: the ring holds the records between the checkpoint and the head. An
 * item that does not fit (the record is full, or the ring has no room before
 * the checkpoint) waits, in arrival order, never failing: the owner is asked
 * for a checkpoint (need_ckpt callback), and waiting items join as soon as
 * space is back. The owner tells the writer when an item's changes reached
 * the chunk files (zl_jw_applied); a checkpoint may move past a record only
 * when all of its items were applied and the files synced.
 *
 * Loop thread only; nothing is allocated per item or record. */
#ifndef ZL_STORAGE_JOURNAL_H
#define ZL_STORAGE_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/common/loop.h"
#include "lib/journal/journal.h"
#include "storage_uring.h"

struct zl_jw;
struct zl_jw_item;

/* err: 0 (the record holding the item is durable, it->seq says which) or a
 * negative error (the journal cannot be written: the item is not durable). */
typedef void (*zl_jw_done_fn)(struct zl_jw_item *it, int err);

/* Caller-owned; lives until done runs. ents[0..n) and the memory they point
 * to (CRCs, inline data) must stay valid until then. */
struct zl_jw_item {
	struct zl_jw_item *next;
	const struct zl_journal_entry *ents;
	uint32_t n;
	uint64_t seq; /* set before done: the record's sequence number */
	zl_jw_done_fn done;
};

struct zl_jw_opts {
	const char *data_dir; /* the journal is <data_dir>/journal-0 */
	uint64_t size;	      /* bytes, for a new journal (a multiple of 4096) */
	bool create;	      /* format one when there is none */
	struct zl_loop *loop;
	/* Called (on the loop) when items wait for space or the journal is
	 * over half full: the owner should start a checkpoint. */
	void (*need_ckpt)(void *arg);
	void *arg;
};

struct zl_jw_stats {
	uint64_t size;	     /* journal file size */
	uint64_t used;	     /* ring bytes between the checkpoint and the head */
	uint64_t ring;	     /* ring bytes */
	uint64_t records;    /* BATCH records written */
	uint64_t entries;    /* entries in them */
	uint64_t items;	     /* items made durable */
	uint64_t pads;	     /* PAD records written */
	uint64_t rec_bytes;  /* bytes of records and pads written */
	uint64_t sb_writes;  /* superblock writes (checkpoints, openings) */
	uint64_t waits;	     /* items that had to wait for space */
	uint32_t waiting;    /* items waiting now */
	uint64_t next_seq;   /* sequence of the next record */
	uint64_t ckpt_seq;   /* first record not checkpointed */
	uint64_t replay_records, replay_entries, replay_ms;
	int broken; /* != 0: a journal write failed; every item fails with it */
	struct zl_storage_uring_use uring; /* the journal's io_uring */
};

/* Opens <data_dir>/journal-0 (creating and formatting it when absent and
 * o->create: preallocated and zero-filled, so record writes never allocate).
 * *out is NULL (and 0 returned) when there is no journal and !create.
 * Returns 0 or a negative error with the reason logged. Blocking: start-up
 * only. */
int zl_jw_open(const struct zl_jw_opts *o, struct zl_jw **out);

/* Replays the records after the checkpoint through apply (see
 * zl_journal_replay), logs what it did and how long it took. The owner makes
 * everything apply changed durable before calling zl_jw_start. Blocking. */
int zl_jw_replay(struct zl_jw *j, zl_journal_apply_fn apply, void *arg);

/* Reads len bytes at file offset off of the journal (any alignment; len at
 * most 4 MiB). Blocking: replay only. 0 or a negative error. */
int zl_jw_read(struct zl_jw *j, void *buf, size_t len, uint64_t off);

/* After a replay: writes the superblock (durably) with the checkpoint at the
 * replay's end and the generation bumped, then accepts items (writing is
 * enabled only when `writing`). Blocking: start-up only. */
int zl_jw_start(struct zl_jw *j, bool writing);

/* Appends an item (never fails here: an error reaches it->done). */
void zl_jw_append(struct zl_jw *j, struct zl_jw_item *it);

/* Sequence of the next record: a chunk created now only ever gets entries in
 * records from this one on. */
uint64_t zl_jw_next_seq(const struct zl_jw *j);
uint64_t zl_jw_nonce(const struct zl_jw *j);

/* The item of record seq reached the chunk files (not yet synced). */
void zl_jw_applied(struct zl_jw *j, uint64_t seq);

/* Checkpoint, in two steps: zl_jw_ckpt_target says up to which record
 * (exclusive) every item was applied; the owner syncs the chunk files, then
 * zl_jw_ckpt_commit writes the superblock with that checkpoint and calls
 * done(arg, err) when it is durable. Returns false (nothing to do) when the
 * target is the current checkpoint. One checkpoint at a time. */
bool zl_jw_ckpt_target(struct zl_jw *j, uint64_t *seq);
void zl_jw_ckpt_commit(struct zl_jw *j, uint64_t seq, void (*done)(void *arg, int err),
		       void *arg);

/* Fences the journal (its file is gone or read-only, storage_ddir.c):
 * every item appended, waiting or in a record not yet durable fails with
 * err (< 0), now or when its record ends; nothing more is written. Calls
 * item callbacks from inside. No-op when already broken. */
void zl_jw_fence(struct zl_jw *j, int err);

/* Records written or in flight, items waiting (for draining at close). */
bool zl_jw_busy(const struct zl_jw *j);
void zl_jw_stats(const struct zl_jw *j, struct zl_jw_stats *st);
/* Closes the file and the ring. Accepts NULL. */
void zl_jw_close(struct zl_jw *j);

#endif
