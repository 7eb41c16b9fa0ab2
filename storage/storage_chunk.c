/* Chunk store: chunk replica files, their metadata pages and the io_uring
 * that moves their data. See storage_chunk.h for the file layout.
 *
 * Operation state machine (struct chunk_op.stage):
 *   OP_ST_WAIT    queued behind an overlapping operation of the same chunk,
 *                 or on the open of its chunk (struct chunk_open)
 *   OP_ST_EDGE    reading the partial edge blocks of an unaligned write/zero
 *   OP_ST_COMMIT  new CRCs set in memory, waiting for a metadata round that
 *                 started after that (group commit); then the data goes out
 *   OP_ST_DATA    data write / read / punch / fsync in flight
 *   OP_ST_SYNC    zeroing: fdatasync after the hole punch (a punch is not
 *                 covered by RWF_DSYNC)
 *   OP_ST_ORDER   journal mode: its blocks are ready, but a write/zero of
 *                 the chunk submitted before it with a lower version is not
 *                 in the journal yet (chunk_order_kick journals it after)
 *   OP_ST_JOURNAL journal mode: in a record being made durable
 *   OP_ST_DONE    finished, callback pending
 * An operation keeps its block range in the chunk's active list from start to
 * finish, so an overlapping operation (at least one of them modifying) waits
 * until the earlier one is durable.
 *
 * Crash safety: the {crc, prev_crc} pair of a block is made durable *before*
 * its new data, in a metadata page written to the slot that is not current
 * (A/B, the newer valid sequence wins on open). A torn or lost metadata
 * write leaves the other slot current, which matches the data that was not
 * yet overwritten; a crash during the data write leaves blocks that match
 * crc or prev_crc. Both are valid, so an acknowledged block never becomes
 * unreadable.
 */
#include "storage_chunk.h"
#include "storage_chunk_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/common/slab.h"
#include "lib/common/worker.h"
#include "lib/wire/wire.h"
#include "storage_journal.h"
#include "storage_uring.h"

#define BLK		  ZL_BLOCK_SIZE
#define CHUNK_MAGIC	  "ZLCHUNK2"
#define CHUNK_MAGIC_V1	  "ZLCHUNK1"
#define CHUNK_HDR_SIZE	  BLK
#define CHUNK_HDR_CRC_OFF 60 /* v2: CRC32C of bytes [0, 60) */
#define CHUNK_HDR_V1_CRC  28 /* v1: CRC32C of bytes [0, 28) */
#define MP_MAGIC	  "ZLMP"
#define MP_HDR		  32 /* metadata page header; entries follow */
#define MP_CRC_OFF	  28
#define MP_MAX_PAGES	  64 /* dirty masks are u64: 64 MiB chunks need 33 */
/* The u32 at 4 of a metadata page: page index in the low 8 bits (at most
 * MP_MAX_PAGES), the chunk's wseq above (0 in files written before). */
#define MP_PAGE_MASK	  0xffu
#define MP_WSEQ_SHIFT	  8
#define STORE_FORMAT_FILE "FORMAT"
#define STORE_FORMAT_TEXT "zipline chunk format 2\n"
#define STORE_CLEAN_FILE  "CLEAN" /* written at a clean close, removed at open */
#define STORE_CLEAN_TEXT  "zipline chunk store closed cleanly\n"
#define SCAN_BUF	  (1u << 20) /* unclean-start verification read size */
#define STORE_BUCKETS	  4096u
#define STORE_OP_SLAB	  256u
#define STORE_FSYNC_SLAB  1024u /* flush fsyncs: a slab of 16 KiB */
#define STORE_OPEN_SLAB	  64u	  /* chunk opens in flight (grown beyond) */
#define STORE_OPEN_WORKERS 4u	  /* threads opening and creating chunk files */
#define STORE_DRAIN_MS	  30000u
#define STORE_GONE_CHECK_MS 1000u /* reads notice a chunk file unlinked under them */
#define TAG_META	  1ull
#define TAG_CKPT	  2ull /* checkpoint fdatasync of a chunk file (journal mode) */
#define TAG_MASK	  3ull
#define OP_JENT_MAX	  (2 + ZL_WIRE_MAX_CHUNK / ZL_JOURNAL_IO_MAX) /* edges + zero pieces */
#define OP_JCRC_SMALL	  16u	  /* CRCs kept in the op: writes up to 64 KiB */
/* Journal mode: a write of at least this many bytes goes to the chunk file
 * in place (durably) after a record with its CRCs only; smaller ones travel
 * in the record (docs/JOURNAL.md). */
#define STORE_INPLACE_MIN (64u << 10)
/* Free bytes the chunk store keeps (op_room), beyond the journal's ring in
 * journal mode: chunk headers and metadata pages of new chunks, filesystem
 * metadata, what other writers take between two free-space samples. */
#define STORE_FREE_SLACK   (8ull << 20)
/* Near full (zl_chunk_store_tight) and full (zl_chunk_store_full): free
 * within this of the reserve. */
#define STORE_TIGHT_MARGIN (64ull << 20)
#define STORE_FULL_MARGIN  (4ull << 20)
/* store_submit's opf. */
#define OPF_TRUST	   1u	 /* READ: as chunk_op.trust */
#define OPF_NO_NEW	   2u	 /* WRITE/ZERO: zl_chunk_overwrite */
#define STORE_CKPT_MS	  5000u /* journal mode: a checkpoint at least this often */
#define STORE_IDLE_CKPT_MS 200u /* ... and this long after the last operation ended */

_Static_assert((ZL_WIRE_MAX_CHUNK / BLK + ZL_CHUNK_META_ENTRIES - 1) / ZL_CHUNK_META_ENTRIES <=
		   MP_MAX_PAGES,
	       "metadata pages of the largest chunk must fit the u64 dirty masks");
_Static_assert(MP_HDR + ZL_CHUNK_META_ENTRIES * 8 <= BLK, "metadata entries fit one page");

enum op_kind {
	OP_READ,
	OP_WRITE,
	OP_ZERO,
	OP_FLUSH,
	OP_WARM /* zl_chunk_warm: only waits on an open */
};
enum op_stage {
	OP_ST_WAIT,
	OP_ST_EDGE,
	OP_ST_DATA,
	OP_ST_SYNC,
	OP_ST_COMMIT,
	OP_ST_ORDER,
	OP_ST_JOURNAL,
	OP_ST_DONE
};

struct chunk;

struct chunk_op {
	struct chunk_op *next, *prev; /* free list, or the chunk's active/waiting list */
	struct flush_sync *syncs; /* FLUSH: its fdatasyncs, one chunk reference each */
	struct zl_chunk_store *s;
	enum op_stage stage;
	uint8_t *buf;	      /* READ: caller's; WRITE/ZERO: what goes to disk */
	bool own_buf;	      /* buf is a bounce buffer of ours */
	uint32_t pending;     /* SQEs in flight */
	uint64_t expect, got; /* bytes requested / transferred by those SQEs */
	int err;
	uint64_t sub;	     /* submission number (store-wide, ascending) */
	uint64_t need_round; /* metadata round that makes this op durable */
	struct zl_defer defer;
	/* Journal mode: the op's record entries and new block CRCs. */
	struct zl_jw_item jitem;
	uint32_t *jcrc; /* WRITE: b1 - b0 CRCs; ZERO: head, tail */
	/* WRITE: the CRCs its blocks get (jcrc, or crcs_in) */
	const uint32_t *jset;
	bool jcrc_own;	/* jcrc is a pool buffer */
	bool jinplace;	/* WRITE: in place after its record (RWF_DSYNC) */
	uint64_t jseq;	/* the record that holds it (0: none) */
	/* Journal mode: answered when its record was durable; the chunk-file
	 * write behind it still holds its blocks (later ops on them wait). */
	bool acked;
	/* From here to jent: set by store_submit on each of its ops before
	 * anything reads them, cleared by op_alloc for the others. */
	struct chunk *ch; /* NULL for FLUSH and missing-chunk reads */
	uint64_t vol, idx; /* the chunk (READ/WRITE/ZERO) */
	uint32_t cs, wseq; /* its chunk size; WRITE/ZERO: snapshot sequence */
	enum op_kind kind;
	uint32_t off, len;
	uint32_t b0, b1;      /* blocks [b0, b1) touched */
	const void *data;     /* WRITE source */
	uint64_t version;    /* WRITE/ZERO: data version given by the caller */
	uint32_t *bad;	     /* scrub READ: count bad blocks here instead of failing */
	zl_chunk_cb cb;
	void *arg;
	/* zl_chunk_write_crcs: the CRC32Cs of the data's whole blocks, as the
	 * caller verified them (used when the data is block-aligned: no second
	 * pass). zl_chunk_read_crcs: where the read blocks' CRCs go. */
	const uint32_t *crcs_in;
	uint32_t *crcs_out;
	bool trust; /* READ: blocks checked before get their stored CRC, unchecked */
	bool no_new; /* WRITE/ZERO: fail NOSPC if it needs new blocks (OPF_NO_NEW) */
	/* Last, not cleared per op (each is written before it is read): */
	struct zl_journal_entry jent[OP_JENT_MAX];
	uint32_t jcrc_small[OP_JCRC_SMALL];
};

/* The chunk of one fdatasync of a flush, referenced until the flush ends.
 * From a slab grown at store creation. */
struct flush_sync {
	struct flush_sync *next; /* the flush's others */
	struct chunk *c;
};

struct op_list {
	struct chunk_op *first, *last;
	uint32_t n_wr; /* of them, not OP_READ: the only ones a read conflicts with */
};

struct chunk {
	struct chunk *hnext; /* hash chain */
	struct chunk *lru_prev, *lru_next;
	uint64_t vol, idx;
	uint32_t chunk_size, n_blocks, meta_pages;
	uint64_t data_off;
	int fd;
	uint32_t refs; /* ops holding it + metadata round in flight */
	bool in_lru, deleted;
	uint64_t gone_checked_ms; /* last check that the file is still linked */
	uint32_t *crc;	    /* n_blocks: the CRC each block must match */
	uint32_t *prev;	    /* n_blocks: its CRC before the last change */
	/* A bit per block: its data on disk was checked against crc[b] and
	 * neither has changed since (cleared wherever crc[b] changes). A client
	 * read of such a block returns crc[b] without computing it again: the
	 * reader verifies the data against it (zl_chunk_read_crcs). */
	uint64_t *vok;
	uint64_t *page_ver; /* meta_pages: version recorded in each page */
	uint8_t *page_slot; /* meta_pages: current slot (0 = A, 1 = B) */
	uint8_t *img;	    /* meta_pages * BLK: page images of the round in flight */
	uint64_t seq;	    /* highest metadata sequence written or found */
	uint64_t version;   /* highest data version applied (durable) */
	uint64_t disk_ver;  /* version the metadata on disk claims (<= durable) */
	uint32_t meta_sqes; /* SQEs of the metadata round in flight */
	int meta_err;
	uint64_t dirty_mask; /* pages changed since the last round started */
	uint64_t round_mask; /* pages of the round in flight */
	bool meta_inflight;
	uint64_t round_started, round_done;
	struct op_list active, waiting;
	/* Journal mode: on the store's dirty list (one reference) from its first
	 * journaled change until a checkpoint covers the last one. */
	struct chunk *jnext;
	bool jlisted;
	uint8_t ckpt_stage; /* 0, 1 metadata round, 2 fdatasync */
	uint64_t jseq_max;  /* newest record with a change of it */
	/* Header: the journal record this file was created before, and the
	 * journal's nonce (low 32 bits); replay skips older entries (an earlier
	 * replica of the same chunk, deleted since). 0: accept every entry. */
	uint64_t birth_seq;
	uint32_t birth_nonce;
	/* Highest snapshot sequence of the writes applied to it (SNAPSHOTS.md
	 * §1): kept in every metadata page this store writes, the maximum over
	 * the pages when opened. */
	uint32_t wseq;
};

/* What opening a chunk file needs and finds: filled by the loop, used by
 * chunk_build (which touches no store state, so it runs on an open worker
 * as well as on the loop). */
struct chunk_args {
	uint64_t vol, idx;
	uint32_t cs;
	bool create;	 /* create the file when absent */
	bool direct;	 /* in: open with O_DIRECT; out: false when refused */
	uint64_t birth_seq; /* header of a created file (journal mode) */
	uint32_t birth_nonce;
	bool created;	/* out: the file is new */
	bool converted; /* out: a v1 file was converted */
};

/* An open of a chunk file in flight on an open worker (chunk_open_run):
 * the table entry of a chunk that is OPENING. Operations submitted
 * meanwhile wait in ops, in submission order; chunk_open_done inserts the
 * chunk and starts them, or fails them with the open's error. */
struct chunk_open {
	struct zl_work w;
	struct zl_chunk_store *s;
	struct chunk_open *hnext; /* the store's opening table */
	/* Opened after this one's done ran: a delete came between (deleted). */
	struct chunk_open *after;
	bool deleted; /* CHUNK_DELETE, VOLUME_DELETE or forget while in flight */
	uint32_t wk;  /* index of its worker */
	struct chunk_args a;
	struct op_list ops;
	/* Worker's result: */
	struct chunk *c;
	int rc;
};

/* A chunk this daemon has seen a file of (listed at start, opened or
 * created since): while it is recorded, a missing file is an error, never
 * zeros. Only CHUNK_DELETE / VOLUME_DELETE forget it. */
struct known {
	struct known *next;
	uint64_t vol, idx;
	uint64_t version; /* last version known (0 until opened) */
	/* Lost: its file went missing. Reads fail and the version reads 0 until
	 * every block was written again in full (a whole-chunk copy), bit b of
	 * rewritten = block b; or until CHUNK_DELETE forgets it. */
	uint64_t *rewritten;
	uint32_t n_blocks, n_rewritten;
};

struct zl_chunk_store {
	char *dir; /* <data_dir>/chunks */
	struct known *known[STORE_BUCKETS];
	uint64_t n_known;
	uint64_t n_lost; /* known entries with rewritten != NULL */
	struct zl_ratelimit rl_missing;
	struct zl_loop *loop;
	struct io_uring ring;
	bool ring_ok;
	int efd;
	uint32_t zero_crc; /* CRC32C of a zero block */
	struct zl_loop_handle efd_h;
	bool efd_added;
	struct zl_poller poller;
	uint32_t to_submit;
	struct chunk *buckets[STORE_BUCKETS];
	struct chunk *lru_head, *lru_tail;
	uint32_t n_open, max_open;
	struct zl_slab ops; /* operation contexts; in_use = operations in flight */
	struct zl_slab fsyncs; /* struct flush_sync of the flushes in flight */
	/* Opens in flight (struct chunk_open), by chunk_bucket; their workers
	 * and how many jobs each has queued. */
	struct chunk_open *opening[STORE_BUCKETS];
	struct zl_slab opens;
	struct zl_worker *open_wk[STORE_OPEN_WORKERS];
	uint32_t open_wk_jobs[STORE_OPEN_WORKERS];
	uint32_t n_vol_dels; /* volume deletes whose files are being removed */
	struct vol_del *vol_dels; /* those on an open worker, one per volume */
	/* A chunk's delete renames its file into TRASH_DIR (microseconds) and
	 * a sweep on an open worker unlinks what is there (milliseconds per
	 * file: its extents). trash_ok: the directory exists. */
	bool trash_ok, trash_sweeping, trash_again;
	uint32_t trash_wk;
	uint64_t trash_seq;
	struct zl_work trash_w;
	bool closing; /* destroy: open results are dropped */
	uint64_t n_sub;	    /* operations submitted (chunk_op.sub) */
	zl_chunk_buf_alloc_fn buf_alloc;
	zl_chunk_buf_free_fn buf_free;
	void *buf_arg;
	bool direct;
	struct zl_ratelimit rl_nospc, rl_io;
	struct zl_chunk_store_stats st;
	/* Journal (storage_journal.h): opened when the file exists or the write
	 * path is the journal; jmode: writes go through it. */
	struct zl_jw *jw;
	bool jmode;
	struct chunk *jdirty; /* chunks changed since the last checkpoint */
	uint32_t n_jdirty;
	bool ckpt_running, ckpt_wanted;
	uint64_t ckpt_seq;
	uint32_t ckpt_pending;
	int ckpt_err;
	struct zl_timer ckpt_t, idle_t;
	struct zl_defer ckpt_d;
	uint8_t *replay_buf; /* start-up only */
	/* zl_chunk_store_fence: < 0 once the data dir can no longer be
	 * trusted; every operation fails with it from then on. */
	int fence_err;
	struct zl_chunk_snap *snap; /* clone chunks (storage_snap.c) */
	/* Volumes zl_chunk_volume_delete removed, a ring (0: empty slot). */
	uint64_t gone_vols[ZL_CHUNK_GONE_VOLS];
	uint32_t gone_next;
	/* The data dir's free bytes, an estimate (the last
	 * zl_chunk_store_set_free, less the new blocks writes took since;
	 * UINT64_MAX: not known), and what stays free (STORE_FREE_SLACK, plus
	 * the ring in journal mode, for the writes answered before their
	 * chunk-file write): op_room. */
	uint64_t free_est, free_reserve;
	struct zl_ratelimit rl_full;
};

static void op_start(struct chunk_op *op);
static void op_finish(struct chunk_op *op);
static void chunk_order_kick(struct chunk *c);
static void store_ckpt_want(struct zl_chunk_store *s);
static void store_ckpt_timer_cb(void *arg);
static void op_write_data(struct chunk_op *op);
static void op_zero_data(struct chunk_op *op);

/* ---- small helpers ---- */

static bool chunk_size_ok(uint32_t cs)
{
	return cs >= ZL_WIRE_MIN_CHUNK && cs <= ZL_WIRE_MAX_CHUNK && !(cs & (cs - 1));
}

static bool block_is_zero(const uint8_t *p)
{
	const uint64_t *q = (const uint64_t *)p;

	for (size_t i = 0; i < BLK / 8; i++)
		if (q[i])
			return false;
	return true;
}

static void list_add_tail(struct op_list *l, struct chunk_op *op)
{
	l->n_wr += op->kind != OP_READ;
	op->next = NULL;
	op->prev = l->last;
	if (l->last)
		l->last->next = op;
	else
		l->first = op;
	l->last = op;
}

static void list_del(struct op_list *l, struct chunk_op *op)
{
	l->n_wr -= op->kind != OP_READ;
	if (op->prev)
		op->prev->next = op->next;
	else
		l->first = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		l->last = op->prev;
	op->next = op->prev = NULL;
}

static int store_path(const struct zl_chunk_store *s, uint64_t vol, uint64_t idx, char *out,
		      size_t len)
{
	char vid[ZL_VOL_ID_LEN + 1];
	int n;

	zl_vol_id_format(vol, vid);
	if (idx == UINT64_MAX)
		n = snprintf(out, len, "%s/%s", s->dir, vid);
	else
		n = snprintf(out, len, "%s/%s/%016" PRIx64 ".zlc", s->dir, vid, idx);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Maps an I/O error to the project code the client sees, logging it. */
static int store_map_err(struct zl_chunk_store *s, struct chunk_op *op, int err)
{
	char vid[ZL_VOL_ID_LEN + 1];

	if (err <= -4096)
		return err;
	zl_vol_id_format(op->ch ? op->ch->vol : op->vol, vid);
	if (err == -ENOSPC || err == -EDQUOT) {
		if (zl_ratelimit_ok(&s->rl_nospc, 1))
			ZL_LOG_ERR("storage",
				   "disk full writing chunk replica: vol=%s chunk=%" PRIu64
				   " dir=%s (free space on the data directory's filesystem)",
				   vid, op->ch ? op->ch->idx : op->idx, s->dir);
		return -ZL_ERR_NOSPC;
	}
	if (zl_ratelimit_ok(&s->rl_io, 5))
		ZL_LOG_ERR("storage", "disk I/O failed: vol=%s chunk=%" PRIu64 " op=%d err=%s", vid,
			   op->ch ? op->ch->idx : 0, (int)op->kind, zl_errname(err));
	return -ZL_ERR_IO;
}

/* ---- operation contexts (preallocated slabs, free list) ---- */

/* set: the caller sets every field from ch to jent itself (store_submit). */
static struct chunk_op *op_alloc(struct zl_chunk_store *s, bool set)
{
	struct chunk_op *op = zl_slab_alloc(&s->ops);

	if (!op)
		return NULL;
	memset(op, 0, set ? offsetof(struct chunk_op, ch) : offsetof(struct chunk_op, jent));
	op->s = s;
	return op;
}

static void op_free(struct chunk_op *op)
{
	zl_slab_free(&op->s->ops, op);
}

/* ---- io_uring ---- */

static struct io_uring_sqe *store_sqe(struct zl_chunk_store *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		s->to_submit = 0;
		sqe = io_uring_get_sqe(&s->ring);
	}
	if (sqe)
		s->to_submit++;
	return sqe;
}

/* Submits everything prepared during the last loop iteration in one call. */
static int store_poll(void *arg)
{
	struct zl_chunk_store *s = arg;

	if (s->to_submit) {
		int rc = io_uring_submit(&s->ring);

		if (rc < 0 && zl_ratelimit_ok(&s->rl_io, 1))
			ZL_LOG_ERR("storage", "io_uring submit failed: err=%s", zl_errname(rc));
		else
			s->to_submit = 0;
	}
	return 0;
}

static int op_prep_rw(struct chunk_op *op, bool write, void *buf, uint32_t len, uint64_t file_off)
{
	struct io_uring_sqe *sqe = store_sqe(op->s);

	if (!sqe)
		return -ZL_ERR_BUSY;
	if (write) {
		/* Journal mode: the record made it durable; the checkpoint syncs
		 * the file. */
		bool dsync = !op->s->jmode || op->jinplace;

		io_uring_prep_write(sqe, op->ch->fd, buf, len, file_off);
		sqe->rw_flags = dsync ? RWF_DSYNC : 0;
		op->s->st.durable_ios += dsync;
	} else {
		io_uring_prep_read(sqe, op->ch->fd, buf, len, file_off);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
	op->pending++;
	op->expect += len;
	return 0;
}

/* ---- chunks: table, LRU, open/create ---- */

static uint32_t chunk_bucket(uint64_t vol, uint64_t idx)
{
	return (uint32_t)(zl_hash64(vol ^ zl_hash64(idx)) % STORE_BUCKETS);
}

static struct chunk *chunk_lookup(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	for (struct chunk *c = s->buckets[chunk_bucket(vol, idx)]; c; c = c->hnext)
		if (c->vol == vol && c->idx == idx)
			return c;
	return NULL;
}

static struct known *known_find(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	for (struct known *k = s->known[chunk_bucket(vol, idx)]; k; k = k->next)
		if (k->vol == vol && k->idx == idx)
			return k;
	return NULL;
}

/* Records (vol, idx) with its version; a failed allocation only loses the
 * missing-file check for that chunk. */
static void known_note(struct zl_chunk_store *s, uint64_t vol, uint64_t idx, uint64_t version)
{
	struct known *k = known_find(s, vol, idx);
	uint32_t b = chunk_bucket(vol, idx);

	if (k) {
		k->version = ZL_MAX(k->version, version); /* recreated files restart at 0 */
		return;
	}
	k = calloc(1, sizeof(*k));
	if (!k)
		return;
	k->vol = vol;
	k->idx = idx;
	k->version = version;
	k->next = s->known[b];
	s->known[b] = k;
	s->n_known++;
}

static void known_free(struct zl_chunk_store *s, struct known *k)
{
	if (k->rewritten)
		s->n_lost--;
	free(k->rewritten);
	free(k);
}

/* Marks a recorded chunk lost (its file is gone). */
static void known_lose(struct zl_chunk_store *s, struct known *k, uint32_t n_blocks)
{
	if (!k || k->rewritten)
		return;
	k->rewritten = calloc((n_blocks + 63) / 64, sizeof(uint64_t));
	if (!k->rewritten)
		return; /* reads see the recreated file: logged at the loss */
	k->n_blocks = n_blocks;
	k->n_rewritten = 0;
	s->n_lost++;
}

static struct known *known_lost(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	struct known *k;

	if (!s->n_lost)
		return NULL;
	k = known_find(s, vol, idx);
	return k && k->rewritten ? k : NULL;
}

/* Full blocks [b0, b1) of a lost chunk were written again. */
static void known_rewrote(struct zl_chunk_store *s, uint64_t vol, uint64_t idx, uint32_t b0,
			  uint32_t b1)
{
	struct known *k = known_lost(s, vol, idx);

	if (!k)
		return;
	for (uint32_t b = b0; b < b1 && b < k->n_blocks; b++) {
		if (k->rewritten[b / 64] >> (b % 64) & 1)
			continue;
		k->rewritten[b / 64] |= 1ull << (b % 64);
		k->n_rewritten++;
	}
	if (k->n_rewritten < k->n_blocks)
		return;
	free(k->rewritten);
	k->rewritten = NULL;
	s->n_lost--;
	ZL_LOG_INFO("storage",
		    "lost chunk rebuilt: vol=%016" PRIx64 " chunk=%" PRIu64 " (every block written "
		    "again)",
		    vol, idx);
}

static void known_drop(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	for (struct known **pp = &s->known[chunk_bucket(vol, idx)]; *pp; pp = &(*pp)->next) {
		struct known *k = *pp;

		if (k->vol == vol && k->idx == idx) {
			*pp = k->next;
			known_free(s, k);
			s->n_known--;
			return;
		}
	}
}

static void known_drop_vol(struct zl_chunk_store *s, uint64_t vol)
{
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct known **pp = &s->known[i]; *pp;) {
			struct known *k = *pp;

			if (k->vol != vol) {
				pp = &k->next;
				continue;
			}
			*pp = k->next;
			known_free(s, k);
			s->n_known--;
		}
	}
}

static void lru_del(struct zl_chunk_store *s, struct chunk *c)
{
	if (!c->in_lru)
		return;
	if (c->lru_prev)
		c->lru_prev->lru_next = c->lru_next;
	else
		s->lru_head = c->lru_next;
	if (c->lru_next)
		c->lru_next->lru_prev = c->lru_prev;
	else
		s->lru_tail = c->lru_prev;
	c->lru_prev = c->lru_next = NULL;
	c->in_lru = false;
}

static void lru_add(struct zl_chunk_store *s, struct chunk *c)
{
	c->lru_next = NULL;
	c->lru_prev = s->lru_tail;
	if (s->lru_tail)
		s->lru_tail->lru_next = c;
	else
		s->lru_head = c;
	s->lru_tail = c;
	c->in_lru = true;
}

static bool chunk_vok(const struct chunk *c, uint32_t b)
{
	return c->vok[b / 64] >> (b % 64) & 1;
}

static void chunk_vok_set(struct chunk *c, uint32_t b)
{
	c->vok[b / 64] |= 1ull << (b % 64);
}

static void chunk_vok_clear(struct chunk *c, uint32_t b)
{
	c->vok[b / 64] &= ~(1ull << (b % 64));
}

static void chunk_free(struct zl_chunk_store *s, struct chunk *c)
{
	(void)s;
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->crc);
	free(c->prev);
	free(c->vok);
	free(c->page_ver);
	free(c->page_slot);
	free(c->img);
	free(c);
}

/* Removes c from the table; it is closed now or when its last user leaves. */
static void chunk_detach(struct zl_chunk_store *s, struct chunk *c)
{
	struct chunk **pp = &s->buckets[chunk_bucket(c->vol, c->idx)];

	while (*pp && *pp != c)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = c->hnext;
	c->hnext = NULL;
	c->deleted = true;
	if (known_find(s, c->vol, c->idx))
		known_note(s, c->vol, c->idx, c->version);
	lru_del(s, c);
	s->n_open--;
	if (c->jlisted) {
		/* Journal mode: a removed replica needs no checkpoint (replay
		 * skips a chunk whose file is gone or newer than the record). */
		struct chunk **pp2 = &s->jdirty;

		while (*pp2 && *pp2 != c)
			pp2 = &(*pp2)->jnext;
		if (*pp2)
			*pp2 = c->jnext;
		c->jnext = NULL;
		c->jlisted = false;
		s->n_jdirty--;
		c->refs--;
	}
	if (!c->refs)
		chunk_free(s, c);
	else
		s->st.deferred_closes++; /* closed by the last chunk_put */
}

static void store_evict(struct zl_chunk_store *s)
{
	while (s->n_open > s->max_open && s->lru_head)
		chunk_detach(s, s->lru_head);
}

static void chunk_put(struct zl_chunk_store *s, struct chunk *c)
{
	if (--c->refs)
		return;
	if (c->deleted) {
		chunk_free(s, c);
		return;
	}
	lru_add(s, c);
	store_evict(s);
}

/* Opens path, with O_DIRECT while *direct (cleared when the filesystem
 * refuses it; chunk_args_apply tells the store). Blocking. */
static int chunk_open_fd(const char *dir, bool *direct, const char *path, int flags)
{
	int fd;

	if (*direct) {
		fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EINVAL)
			return fd < 0 ? -errno : fd;
		ZL_LOG_WARN("storage",
			    "O_DIRECT not supported under %s: falling back to buffered I/O "
			    "(RWF_DSYNC keeps writes durable; put the data dir on ext4/xfs for "
			    "direct I/O)",
			    dir);
		*direct = false;
	}
	fd = open(path, flags | O_CLOEXEC, 0644);
	return fd < 0 ? -errno : fd;
}

static void *blk_alloc(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, BLK, ZL_ALIGN_UP(len, BLK)) ? NULL : p;
}

static void chunk_hdr_encode(uint8_t *p, uint64_t vol, uint64_t idx, uint32_t cs,
			     uint64_t birth_seq, uint32_t birth_nonce)
{
	memset(p, 0, CHUNK_HDR_SIZE);
	memcpy(p, CHUNK_MAGIC, 8);
	zl_put_le64(p + 8, vol);
	zl_put_le64(p + 16, idx);
	zl_put_le32(p + 24, cs);
	zl_put_le32(p + 28, zl_chunk_meta_pages(cs));
	zl_put_le32(p + 32, ZL_CHUNK_META_ENTRIES);
	zl_put_le64(p + 40, zl_chunk_data_off(cs));
	zl_put_le64(p + 48, birth_seq);
	zl_put_le32(p + 56, birth_nonce);
	zl_put_le32(p + CHUNK_HDR_CRC_OFF, zl_crc32c(p, CHUNK_HDR_CRC_OFF));
}

static uint32_t meta_page_crc(const uint8_t *p)
{
	return zl_crc32c_update(zl_crc32c(p, MP_CRC_OFF), p + MP_HDR, BLK - MP_HDR);
}

/* Page image of metadata page pg as the in-memory tables say now. */
static void meta_page_encode(const struct chunk *c, uint32_t pg, uint64_t seq, uint64_t ver,
			     uint8_t *p)
{
	uint32_t b0 = pg * ZL_CHUNK_META_ENTRIES;
	uint32_t n = ZL_MIN(ZL_CHUNK_META_ENTRIES, c->n_blocks - b0);

	memset(p, 0, BLK);
	memcpy(p, MP_MAGIC, 4);
	zl_put_le32(p + 4, pg | c->wseq << MP_WSEQ_SHIFT);
	zl_put_le64(p + 8, seq);
	zl_put_le64(p + 16, ver);
	zl_put_le32(p + 24, n);
	for (uint32_t i = 0; i < n; i++) {
		zl_put_le32(p + MP_HDR + 8 * i, c->crc[b0 + i]);
		zl_put_le32(p + MP_HDR + 8 * i + 4, c->prev[b0 + i]);
	}
	zl_put_le32(p + MP_CRC_OFF, meta_page_crc(p));
}

/* A slot is valid when it names page pg, covers the right number of blocks
 * and its page CRC matches (a torn or lost write never does). */
static bool meta_slot_valid(const struct chunk *c, uint32_t pg, const uint8_t *p)
{
	uint32_t n = ZL_MIN(ZL_CHUNK_META_ENTRIES, c->n_blocks - pg * ZL_CHUNK_META_ENTRIES);

	return !memcmp(p, MP_MAGIC, 4) && (zl_get_le32(p + 4) & MP_PAGE_MASK) == pg &&
	       zl_get_le32(p + 24) == n &&
	       zl_get_le32(p + MP_CRC_OFF) == meta_page_crc(p);
}

/* Creates the file of a new chunk replica: header and metadata pages
 * allocated, data sparse, made durable (file and directory entry) before
 * the first write.
 * Blocking (an open worker); s: its constant dir only. */
static int chunk_create_file(const struct zl_chunk_store *s, struct chunk_args *a, struct chunk *c,
			     const char *path)
{
	char dir[PATH_MAX], tmp[PATH_MAX + 8];
	uint8_t *hdr = NULL;
	int fd = -1, rc;

	rc = store_path(s, c->vol, UINT64_MAX, dir, sizeof(dir));
	if (rc)
		return rc;
	if (mkdir(dir, 0755) < 0) {
		if (errno != EEXIST)
			return -errno;
	} else {
		rc = zl_fsync_dir(s->dir);
		if (rc)
			return rc;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = chunk_open_fd(s->dir, &a->direct, tmp, O_RDWR | O_CREAT | O_TRUNC);
	if (fd < 0)
		return fd;
	hdr = blk_alloc(CHUNK_HDR_SIZE);
	if (!hdr) {
		rc = -ENOMEM;
		goto out_close;
	}
	/* Journal mode: taken on the loop before the job (chunk_open_submit). */
	c->birth_seq = a->birth_seq;
	c->birth_nonce = a->birth_nonce;
	chunk_hdr_encode(hdr, c->vol, c->idx, c->chunk_size, c->birth_seq, c->birth_nonce);
	if (ftruncate(fd, (off_t)(c->data_off + c->chunk_size)) < 0) {
		rc = -errno;
		goto out_free;
	}
	/* The header and metadata pages get their blocks now (a full disk
	 * fails this write, before its answer): the checkpoint's page writes
	 * never need new space. The data stays sparse (op_room). A filesystem
	 * that cannot (EOPNOTSUPP, EINVAL: 9p, some FUSE) keeps them sparse. */
	if (fallocate(fd, 0, 0, (off_t)c->data_off) < 0 && (errno == ENOSPC || errno == EDQUOT)) {
		rc = -errno;
		goto out_free;
	}
	rc = zl_pwrite_all(fd, hdr, CHUNK_HDR_SIZE, 0);
	if (rc)
		goto out_free;
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = zl_fsync_dir(dir);
	if (rc)
		goto out_free;
	free(hdr);
	return fd;

out_free:
	free(hdr);
out_close:
	close(fd);
	unlink(tmp);
	return rc;
}

/* ---- v1 files ("ZLCHUNK1", written by 0.1): converted to v2 ----
 * v1: header | CRC table (u32 per block, padded to 4 KiB) | data |
 * previous-CRC table. Its validity rule (crc, prev or zero) is the v2 rule,
 * so the pairs are copied as they are and a block damaged before the
 * conversion is still reported. The v2 file is built next to the old one,
 * made durable, then renamed over it: a crash leaves either file whole. */

struct v1_geo {
	uint32_t cs, n_blocks, tbl_pages;
	uint64_t data_off, prev_off;
};

static int v1_geo_read(int fd, uint8_t *hdr, struct v1_geo *g, const char **why)
{
	struct stat stb;

	if (pread(fd, hdr, CHUNK_HDR_SIZE, 0) != (ssize_t)CHUNK_HDR_SIZE || fstat(fd, &stb) < 0)
		return errno ? -errno : -EIO;
	*why = NULL;
	if (memcmp(hdr, CHUNK_MAGIC_V1, 8))
		return 1; /* not a v1 file */
	g->cs = zl_get_le32(hdr + 24);
	if (zl_get_le32(hdr + CHUNK_HDR_V1_CRC) != zl_crc32c(hdr, CHUNK_HDR_V1_CRC))
		*why = "v1 header CRC mismatch";
	else if (!chunk_size_ok(g->cs))
		*why = "v1 header has an invalid chunk size";
	if (*why)
		return -ZL_ERR_CORRUPT;
	g->n_blocks = g->cs / BLK;
	g->tbl_pages = (uint32_t)(ZL_ALIGN_UP((uint64_t)g->n_blocks * 4, BLK) / BLK);
	g->data_off = CHUNK_HDR_SIZE + (uint64_t)g->tbl_pages * BLK;
	g->prev_off = g->data_off + g->cs;
	if ((uint64_t)stb.st_size < g->prev_off + (uint64_t)g->tbl_pages * BLK) {
		*why = "v1 file shorter than its chunk";
		return -ZL_ERR_CORRUPT;
	}
	return 0;
}

/* Converts the v1 file at path in place (crash-safely). Returns 0, 1 when
 * the file is not v1 (nothing done), -ZL_ERR_CORRUPT (damaged v1 header,
 * file left alone and logged) or -errno. Blocking (start-up, or an open
 * worker). */
static int chunk_convert_v1(const char *path)
{
	char tmp[PATH_MAX + 16], dir[PATH_MAX];
	uint8_t *hdr = NULL, *tbl = NULL, *pg = NULL, *buf = NULL;
	struct chunk geo = {0};
	const char *why = NULL, *slash;
	struct v1_geo g;
	int fd, out = -1, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	hdr = blk_alloc(CHUNK_HDR_SIZE);
	buf = blk_alloc(1u << 20);
	pg = blk_alloc(BLK);
	if (!hdr || !buf || !pg) {
		rc = -ENOMEM;
		goto out;
	}
	rc = v1_geo_read(fd, hdr, &g, &why);
	if (rc) {
		if (why)
			ZL_LOG_ERR("storage",
				   "cannot convert v1 chunk file %s: %s (remove the replica file "
				   "so repair rebuilds it)",
				   path, why);
		goto out;
	}
	/* Both v1 tables, little-endian u32 per block. */
	tbl = malloc((size_t)g.tbl_pages * BLK * 2);
	geo.n_blocks = g.n_blocks;
	geo.crc = calloc(g.n_blocks, sizeof(uint32_t));
	geo.prev = calloc(g.n_blocks, sizeof(uint32_t));
	geo.page_ver = calloc(zl_chunk_meta_pages(g.cs), sizeof(uint64_t));
	if (!tbl || !geo.crc || !geo.prev || !geo.page_ver) {
		rc = -ENOMEM;
		goto out;
	}
	if (pread(fd, tbl, (size_t)g.tbl_pages * BLK, CHUNK_HDR_SIZE) !=
		(ssize_t)g.tbl_pages * BLK ||
	    pread(fd, tbl + (size_t)g.tbl_pages * BLK, (size_t)g.tbl_pages * BLK,
		  (off_t)g.prev_off) != (ssize_t)g.tbl_pages * BLK) {
		rc = errno ? -errno : -EIO;
		goto out;
	}
	for (uint32_t b = 0; b < g.n_blocks; b++) {
		geo.crc[b] = zl_get_le32(tbl + 4 * b);
		geo.prev[b] = zl_get_le32(tbl + (size_t)g.tbl_pages * BLK + 4 * b);
	}
	snprintf(tmp, sizeof(tmp), "%s.v2.tmp", path);
	out = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		rc = -errno;
		goto out;
	}
	if (ftruncate(out, (off_t)(zl_chunk_data_off(g.cs) + g.cs)) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	chunk_hdr_encode(hdr, zl_get_le64(hdr + 8), zl_get_le64(hdr + 16), g.cs, 0, 0);
	rc = zl_pwrite_all(out, hdr, CHUNK_HDR_SIZE, 0);
	for (uint32_t p = 0; !rc && p < zl_chunk_meta_pages(g.cs); p++) {
		meta_page_encode(&geo, p, 1, geo.page_ver[p], pg);
		rc = zl_pwrite_all(out, pg, BLK, zl_chunk_slot_off(p, 0));
	}
	/* Data: copy what is not zero, so the new file stays as sparse. */
	for (uint32_t at = 0; !rc && at < g.cs; at += 1u << 20) {
		uint32_t len = ZL_MIN(1u << 20, g.cs - at);

		if (pread(fd, buf, len, (off_t)(g.data_off + at)) != (ssize_t)len) {
			rc = errno ? -errno : -EIO;
			break;
		}
		for (uint32_t o = 0; !rc && o < len; o += BLK)
			if (!block_is_zero(buf + o))
				rc =
				    zl_pwrite_all(out, buf + o, BLK, zl_chunk_data_off(g.cs) + at + o);
	}
	if (rc)
		goto out_unlink;
	if (fsync(out) < 0 || rename(tmp, path) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	slash = strrchr(path, '/');
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	rc = zl_fsync_dir(dir);
	if (!rc)
		ZL_LOG_INFO("storage", "converted chunk file to format v2: %s", path);
	goto out;

out_unlink:
	unlink(tmp);
out:
	if (out >= 0)
		close(out);
	close(fd);
	free(geo.crc);
	free(geo.prev);
	free(geo.page_ver);
	free(tbl);
	free(pg);
	free(buf);
	free(hdr);
	return rc;
}

/* Converts every v1 file under chunks/ once (start-up), then writes the
 * FORMAT marker so later starts skip the scan. A damaged v1 file is left
 * (and logged); its reads fail as corrupt. Returns 0 or -errno. */
static int store_convert_all(struct zl_chunk_store *s)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	struct dirent *de, *fe;
	DIR *d, *vd;
	int rc = 0, fd;

	snprintf(path, sizeof(path), "%s/" STORE_FORMAT_FILE, s->dir);
	if (access(path, F_OK) == 0)
		return 0;
	d = opendir(s->dir);
	if (!d)
		return -errno;
	while (!rc && (de = readdir(d))) {
		uint64_t vol;

		if (zl_vol_id_parse(de->d_name, &vol))
			continue;
		snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
		vd = opendir(path);
		if (!vd)
			continue;
		while (!rc && (fe = readdir(vd))) {
			size_t n = strlen(fe->d_name);
			int r;

			if (n < 5 || strcmp(fe->d_name + n - 4, ".zlc"))
				continue;
			snprintf(path, sizeof(path), "%s/%s/%s", s->dir, de->d_name, fe->d_name);
			r = chunk_convert_v1(path);
			if (!r)
				s->st.converted++;
			if (r < 0 && r != -ZL_ERR_CORRUPT)
				rc = r;
		}
		closedir(vd);
	}
	closedir(d);
	if (rc) {
		ZL_LOG_ERR("storage",
			   "converting v1 chunk files under %s failed: %s (free space or fix the "
			   "disk; unconverted files are converted when first opened)",
			   s->dir, zl_errname(rc));
		return rc;
	}
	snprintf(path, sizeof(path), "%s/" STORE_FORMAT_FILE, s->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	rc = zl_pwrite_all(fd, STORE_FORMAT_TEXT, strlen(STORE_FORMAT_TEXT), 0);
	if (!rc && (fsync(fd) < 0 || rename(tmp, path) < 0))
		rc = -errno;
	close(fd);
	if (!rc)
		rc = zl_fsync_dir(s->dir);
	return rc;
}

/* Reads and checks the header and loads the metadata pages of an existing
 * file: per page the valid slot with the higher sequence is current; a page
 * with no valid slot was never written (or both copies are damaged: then the
 * blocks it covers fail verification). Returns 0, 1 for a v1 file,
 * -ZL_ERR_CORRUPT or -errno. */
static int chunk_load(struct chunk *c)
{
	char vid[ZL_VOL_ID_LEN + 1];
	size_t meta = (size_t)c->meta_pages * 2 * BLK;
	uint8_t *hdr = blk_alloc(CHUNK_HDR_SIZE), *mp = blk_alloc(meta);
	struct stat stb;
	const char *why = NULL;
	int rc = 0;

	if (!hdr || !mp) {
		rc = -ENOMEM;
		goto out;
	}
	zl_vol_id_format(c->vol, vid);
	if (fstat(c->fd, &stb) < 0) {
		rc = -errno;
		goto out;
	}
	if (pread(c->fd, hdr, CHUNK_HDR_SIZE, 0) != (ssize_t)CHUNK_HDR_SIZE) {
		rc = errno ? -errno : -EIO;
		goto out;
	}
	if (!memcmp(hdr, CHUNK_MAGIC_V1, 8)) {
		rc = 1;
		goto out;
	}
	if (memcmp(hdr, CHUNK_MAGIC, 8))
		why = "bad magic";
	else if (zl_get_le32(hdr + CHUNK_HDR_CRC_OFF) != zl_crc32c(hdr, CHUNK_HDR_CRC_OFF))
		why = "header CRC mismatch";
	else if (zl_get_le64(hdr + 8) != c->vol || zl_get_le64(hdr + 16) != c->idx)
		why = "header names another chunk";
	else if (zl_get_le32(hdr + 24) != c->chunk_size)
		why = "chunk size differs from the volume's";
	else if (zl_get_le32(hdr + 28) != c->meta_pages ||
		 zl_get_le32(hdr + 32) != ZL_CHUNK_META_ENTRIES ||
		 zl_get_le64(hdr + 40) != c->data_off)
		why = "header layout differs from format v2";
	else if ((uint64_t)stb.st_size < c->data_off + c->chunk_size)
		why = "file shorter than the chunk";
	c->birth_seq = zl_get_le64(hdr + 48);
	c->birth_nonce = zl_get_le32(hdr + 56);
	if (!why && pread(c->fd, mp, meta, CHUNK_HDR_SIZE) != (ssize_t)meta) {
		rc = errno ? -errno : -EIO;
		goto out;
	}
	for (uint32_t p = 0; !why && p < c->meta_pages; p++) {
		const uint8_t *a = mp + (size_t)p * 2 * BLK, *b = a + BLK, *cur = NULL;
		bool va = meta_slot_valid(c, p, a), vb = meta_slot_valid(c, p, b);
		uint32_t b0 = p * ZL_CHUNK_META_ENTRIES;
		uint32_t n = ZL_MIN(ZL_CHUNK_META_ENTRIES, c->n_blocks - b0);

		if (va && (!vb || zl_get_le64(a + 8) >= zl_get_le64(b + 8)))
			cur = a;
		else if (vb)
			cur = b;
		if ((!va && !block_is_zero(a)) || (!vb && !block_is_zero(b)))
			ZL_LOG_WARN("storage",
				    "vol=%s chunk=%" PRIu64 " metadata page=%u: slot %c is torn "
				    "or damaged, slot %c is current",
				    vid, c->idx, p, !va && !block_is_zero(a) ? 'A' : 'B',
				    cur == a   ? 'A'
				    : cur == b ? 'B'
					       : '-');
		/* Next write goes to the other slot; never-written pages use A. */
		c->page_slot[p] = cur == a ? 0 : 1;
		if (!cur)
			continue;
		c->seq = ZL_MAX(c->seq, zl_get_le64(cur + 8));
		c->wseq = ZL_MAX(c->wseq, zl_get_le32(cur + 4) >> MP_WSEQ_SHIFT);
		c->page_ver[p] = zl_get_le64(cur + 16);
		c->version = ZL_MAX(c->version, c->page_ver[p]);
		c->disk_ver = c->version;
		for (uint32_t i = 0; i < n; i++) {
			c->crc[b0 + i] = zl_get_le32(cur + MP_HDR + 8 * i);
			c->prev[b0 + i] = zl_get_le32(cur + MP_HDR + 8 * i + 4);
			chunk_vok_clear(c, b0 + i);
		}
	}
	if (why) {
		ZL_LOG_ERR("storage",
			   "corruption vol=%s chunk=%" PRIu64 " block=header: %s (remove the "
			   "replica file so repair rebuilds it)",
			   vid, c->idx, why);
		rc = -ZL_ERR_CORRUPT;
	}
out:
	free(mp);
	free(hdr);
	return rc;
}

/* chunk_get of a chunk found in the table: a reference in *out. */
static int chunk_ref(struct zl_chunk_store *s, struct chunk *c, uint32_t cs, struct chunk **out)
{
	if (c->chunk_size != cs)
		return -ZL_ERR_INVAL;
	lru_del(s, c);
	c->refs++;
	*out = c;
	return 0;
}

/* Opens (or, a->create, creates) the file of chunk a->vol/a->idx and loads
 * its tables into a new struct chunk, not in the table yet (chunk_insert).
 * Blocking; reads no store state but the constant s->dir, so it runs on an
 * open worker (chunk_open_run) as well as on the loop (chunk_get). Returns
 * 0, -ENOENT (absent, !create) or an error. */
static int chunk_build(const struct zl_chunk_store *s, struct chunk_args *a, struct chunk **out)
{
	char path[PATH_MAX];
	struct chunk *c;
	int rc, fd;

	*out = NULL;
	rc = store_path(s, a->vol, a->idx, path, sizeof(path));
	if (rc)
		return rc;
	fd = chunk_open_fd(s->dir, &a->direct, path, O_RDWR);
	if (fd < 0 && (fd != -ENOENT || !a->create))
		return fd;
	c = calloc(1, sizeof(*c));
	if (!c) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->vol = a->vol;
	c->idx = a->idx;
	c->chunk_size = a->cs;
	c->n_blocks = a->cs / BLK;
	c->meta_pages = zl_chunk_meta_pages(a->cs);
	c->data_off = zl_chunk_data_off(a->cs);
	c->crc = calloc(c->n_blocks, sizeof(uint32_t));
	c->prev = calloc(c->n_blocks, sizeof(uint32_t));
	c->vok = calloc((c->n_blocks + 63) / 64, sizeof(uint64_t));
	c->page_ver = calloc(c->meta_pages, sizeof(uint64_t));
	c->page_slot = calloc(c->meta_pages, 1);
	c->img = blk_alloc((size_t)c->meta_pages * BLK);
	if (!c->crc || !c->prev || !c->vok || !c->page_ver || !c->page_slot || !c->img) {
		rc = -ENOMEM;
		goto out_free;
	}
	if (c->fd >= 0) {
		rc = chunk_load(c);
		if (rc == 1) {
			/* A v1 file the start-up conversion did not see. */
			ZL_LOG_WARN("storage", "converting v1 chunk file on open: %s", path);
			close(c->fd);
			c->fd = -1;
			rc = chunk_convert_v1(path);
			if (!rc) {
				a->converted = true;
				c->fd = chunk_open_fd(s->dir, &a->direct, path, O_RDWR);
				rc = c->fd < 0 ? c->fd : chunk_load(c);
			}
			if (rc == 1)
				rc = -ZL_ERR_CORRUPT;
		}
		if (rc)
			goto out_free;
	} else {
		for (uint32_t p = 0; p < c->meta_pages; p++)
			c->page_slot[p] = 1; /* first write goes to slot A */
		c->fd = chunk_create_file(s, a, c, path);
		if (c->fd < 0) {
			rc = c->fd;
			goto out_free;
		}
		a->created = true;
	}
	*out = c;
	return 0;

out_free:
	if (c->fd < 0)
		c->fd = -1;
	chunk_free(NULL, c);
	return rc;
}

/* The arguments of opening (vol, idx), taken on the loop. */
static void chunk_args_init(struct zl_chunk_store *s, struct chunk_args *a, uint64_t vol,
			    uint64_t idx, uint32_t cs, bool create)
{
	memset(a, 0, sizeof(*a));
	a->direct = s->direct;
	a->vol = vol;
	a->idx = idx;
	a->cs = cs;
	a->create = create;
}

/* What an open found that the store keeps (loop thread). */
static void chunk_args_apply(struct zl_chunk_store *s, const struct chunk_args *a)
{
	if (!a->direct && s->direct) {
		s->direct = false;
		s->st.direct_io = false;
	}
	s->st.converted += a->converted;
}

/* Enters a chunk chunk_build made into the table, with one reference (the
 * caller's). */
static void chunk_insert(struct zl_chunk_store *s, struct chunk *c, const struct chunk_args *a)
{
	uint32_t b = chunk_bucket(c->vol, c->idx);

	if (a->created) {
		struct known *k = known_find(s, c->vol, c->idx);

		if (k && !k->rewritten) {
			/* Recorded, file gone: the new file is lost until rebuilt. */
			char vid[ZL_VOL_ID_LEN + 1];

			zl_vol_id_format(c->vol, vid);
			ZL_LOG_ERR("storage",
				   "chunk file missing, recreated by a write: vol=%s chunk=%" PRIu64
				   " (reads fail until every block is written again or scrub "
				   "repairs it)",
				   vid, c->idx);
			known_lose(s, k, c->n_blocks);
		}
	}
	c->hnext = s->buckets[b];
	s->buckets[b] = c;
	s->n_open++;
	c->refs = 1;
	c->gone_checked_ms = zl_now_ms();
	known_note(s, c->vol, c->idx, c->version);
	store_evict(s);
}

static struct chunk_open *open_find(struct zl_chunk_store *s, uint64_t vol, uint64_t idx);

/* Finds or opens chunk (vol, idx) on the loop, never creating it: start-up
 * and the synchronous callers (chunk_state). Returns 0 with a reference in
 * *out, -ENOENT (absent), or an error. */
static int chunk_get(struct zl_chunk_store *s, uint64_t vol, uint64_t idx, uint32_t cs,
		     struct chunk **out)
{
	struct chunk *c = chunk_lookup(s, vol, idx);
	struct chunk_args a;
	int rc;

	if (c)
		return chunk_ref(s, c, cs, out);
	if (zl_chunk_vol_gone(s, vol))
		return -ENOENT; /* its files may still be on their way out */
	chunk_args_init(s, &a, vol, idx, cs, false);
	rc = chunk_build(s, &a, &c);
	chunk_args_apply(s, &a);
	if (rc)
		return rc;
	if (open_find(s, vol, idx)) {
		/* Its open in flight enters it in the table (and may still be
		 * creating it): this caller gets a private copy. */
		c->deleted = true;
		c->refs = 1;
	} else {
		chunk_insert(s, c, &a);
	}
	*out = c;
	return 0;
}

/* ---- metadata: verification and group commit ---- */

static int chunk_verify_crc(struct zl_chunk_store *s, struct chunk *c, uint32_t b, const uint8_t *p,
			    uint32_t *crc_out);

static int chunk_verify(struct zl_chunk_store *s, struct chunk *c, uint32_t b, const uint8_t *p)
{
	return chunk_verify_crc(s, c, b, p, NULL);
}

/* Verifies block b's data p against its CRC (or the previous one, see
 * below); *crc_out (optional) gets the data's CRC32C. */
static int chunk_verify_crc(struct zl_chunk_store *s, struct chunk *c, uint32_t b, const uint8_t *p,
			    uint32_t *crc_out)
{
	char vid[ZL_VOL_ID_LEN + 1];
	uint32_t want = c->crc[b], prev = c->prev[b], got = zl_crc32c(p, BLK);

	if (crc_out)
		*crc_out = got;
	if ((got == want && want) || (!want && block_is_zero(p))) {
		chunk_vok_set(c, b);
		return 0;
	}
	if (got == want)
		return 0;
	if (got == prev || (prev == 0 && block_is_zero(p))) {
		/* The previous CRC: the last write's data never reached the
		 * disk. Adopt it, so the next write of the block records the
		 * CRC the disk really holds as its prev (a second crash between
		 * that write's metadata and data then still verifies). */
		c->crc[b] = prev;
		return 0;
	}
	zl_vol_id_format(c->vol, vid);
	ZL_LOG_ERR("storage",
		   "corruption vol=%s chunk=%" PRIu64 " block=%u crc=%08x expected=%08x "
		   "(the client reads another replica)",
		   vid, c->idx, b, got, want);
	s->st.corruptions++;
	s->st.last_corrupt_vol = c->vol;
	s->st.last_corrupt_chunk = c->idx;
	s->st.last_corrupt_block = b;
	return -ZL_ERR_CORRUPT;
}

static void chunk_set_crc(struct chunk *c, uint32_t b, uint32_t crc, uint64_t version)
{
	uint32_t pg = b / ZL_CHUNK_META_ENTRIES;

	c->prev[b] = c->crc[b];
	c->crc[b] = crc;
	chunk_vok_clear(c, b);
	c->page_ver[pg] = ZL_MAX(c->page_ver[pg], version);
	c->dirty_mask |= 1ull << pg;
}

/* The op's data did not reach the disk: its blocks hold their previous
 * contents again. */
static void chunk_crc_rollback(struct chunk *c, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++) {
		c->crc[b] = c->prev[b];
		chunk_vok_clear(c, b);
		c->dirty_mask |= 1ull << (b / ZL_CHUNK_META_ENTRIES);
	}
}

/* The version a metadata round may claim: the highest version applied,
 * below every write or zero still on its way. The metadata goes to disk
 * before the data it describes, so claiming such a write would let a crash
 * (kill -9 between the two) leave a copy whose version says it holds a write
 * whose data never landed: recovery compares versions and would never copy
 * it again. Versions of writes finished out of order are held back likewise.
 * A lower claim is always safe (the chunk only looks older). */
static uint64_t chunk_durable_ver(const struct chunk *c)
{
	const struct op_list *lists[2] = {&c->active, &c->waiting};
	uint64_t v = c->version;

	/* n_wr counts every write and zero: none, nothing to walk (reads). */
	if (!c->active.n_wr && !c->waiting.n_wr)
		return v;
	for (int l = 0; l < 2; l++)
		for (const struct chunk_op *op = lists[l]->first; op; op = op->next)
			if ((op->kind == OP_WRITE || op->kind == OP_ZERO) && op->version)
				v = ZL_MIN(v, op->version - 1);
	return v;
}

/* Starts a metadata round: every dirty page, each into its slot that is not
 * current, all with the next sequence, unless a round is in flight. Each
 * page carries chunk_durable_ver (the chunk's version on open is the
 * highest of them). */
static bool chunk_meta_kick(struct zl_chunk_store *s, struct chunk *c)
{
	uint32_t n = (uint32_t)__builtin_popcountll(c->dirty_mask);
	uint64_t seq = c->seq + 1, ver = chunk_durable_ver(c);

	if (c->meta_inflight || !c->dirty_mask)
		return false;
	if (io_uring_sq_space_left(&s->ring) < n) {
		io_uring_submit(&s->ring);
		s->to_submit = 0;
		if (io_uring_sq_space_left(&s->ring) < n)
			return false; /* retried on the next completion of this chunk */
	}
	for (uint64_t m = c->dirty_mask; m; m &= m - 1) {
		uint32_t p = (uint32_t)__builtin_ctzll(m);
		struct io_uring_sqe *sqe = store_sqe(s);
		uint8_t *img = c->img + (size_t)p * BLK;

		meta_page_encode(c, p, seq, ver, img);
		io_uring_prep_write(sqe, c->fd, img, BLK,
				    zl_chunk_slot_off(p, c->page_slot[p] ^ 1));
		/* Journal mode: a checkpoint's round, synced by its fdatasync. */
		sqe->rw_flags = s->jmode ? 0 : RWF_DSYNC;
		s->st.durable_ios += !s->jmode;
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | TAG_META);
	}
	c->seq = seq;
	c->disk_ver = ZL_MAX(c->disk_ver, ver);
	c->meta_sqes = n;
	c->meta_err = 0;
	c->round_mask = c->dirty_mask;
	c->dirty_mask = 0;
	c->meta_inflight = true;
	c->round_started++;
	c->refs++;
	s->st.meta_rounds++;
	s->st.meta_page_writes += n;
	return true;
}

static void store_ckpt_chunk_step(struct zl_chunk_store *s, struct chunk *c, int res);

static void chunk_meta_done(struct zl_chunk_store *s, struct chunk *c, int res)
{
	uint64_t round = c->round_started;
	struct chunk_op *op, *next;
	int err;

	if (res != (int)BLK && !c->meta_err)
		c->meta_err = res < 0 ? res : -EIO;
	if (--c->meta_sqes)
		return;
	err = c->meta_err;
	c->meta_inflight = false;
	s->st.meta_rounds_done++;
	if (err) {
		/* The tables in memory stay authoritative: rewrite those pages
		 * (into the same slots: the current ones stay untouched). */
		c->dirty_mask |= c->round_mask;
	} else {
		for (uint64_t m = c->round_mask; m; m &= m - 1)
			c->page_slot[__builtin_ctzll(m)] ^= 1;
	}
	c->round_done = round;
	if (s->jmode) {
		/* Rounds run only for checkpoints in journal mode. */
		if (c->ckpt_stage == 1)
			store_ckpt_chunk_step(s, c, err);
		chunk_put(s, c); /* the round's */
		return;
	}
	c->refs++; /* finishing ops below may drop the last other reference */
	for (op = c->active.first; op; op = next) {
		next = op->next;
		if (op->stage != OP_ST_COMMIT || op->need_round > round)
			continue;
		if (err) {
			chunk_crc_rollback(c, op->b0, op->b1);
			op->err = store_map_err(s, op, err);
			op_finish(op);
		} else if (op->kind == OP_WRITE) {
			op_write_data(op);
		} else {
			op_zero_data(op);
		}
	}
	/* After a failed round retry only for writers still waiting, so a dead
	 * disk does not spin. */
	for (op = c->active.first; op && err; op = op->next)
		if (op->stage == OP_ST_COMMIT)
			err = 0;
	if (!err)
		chunk_meta_kick(s, c);
	chunk_put(s, c); /* the extra one */
	chunk_put(s, c); /* the round's */
}

/* ---- operations ---- */

static bool op_conflict(const struct chunk_op *a, const struct chunk_op *b)
{
	if (a->kind == OP_READ && b->kind == OP_READ)
		return false;
	return a->b0 < b->b1 && b->b0 < a->b1;
}

static void op_defer_finish(void *arg)
{
	op_finish(arg);
}

/* Finishes op from the loop (never inside the call that started it). */
static void op_fail_later(struct chunk_op *op, int err)
{
	op->err = err;
	op->stage = OP_ST_DONE;
	zl_loop_defer(op->s->loop, &op->defer, op_defer_finish, op);
}

/* A write/zero is what the chunk says from now on: its version, and the
 * blocks of a lost chunk it rewrote. */
static void op_visible(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;

	c->version = ZL_MAX(c->version, op->version);
	if (s->n_lost)
		known_rewrote(s, c->vol, c->idx, (op->off + BLK - 1) / BLK,
			      (op->off + op->len) / BLK);
}

static void op_finish(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	zl_chunk_cb cb = op->cb;
	void *arg = op->arg;
	bool acked = op->acked;
	/* Fenced (zl_chunk_store_fence): nothing more is acknowledged; one
	 * answered already (early ack) stays answered. */
	int err = op->err ? op->err : acked ? 0 : s->fence_err;

	if (acked && err && zl_ratelimit_ok(&s->rl_io, 1))
		ZL_LOG_ERR("storage",
			   "chunk file write failed after its journal record was durable: vol=%016" PRIx64
			   " chunk=%" PRIu64 " err=%s; its blocks read as corrupt here until "
			   "scrub or recovery repairs them from a replica (check the disk)",
			   c->vol, c->idx, zl_errname(err));
	if (c) {
		if (!err && !acked && (op->kind == OP_WRITE || op->kind == OP_ZERO))
			op_visible(op);
		list_del(&c->active, op);
		/* Start waiting ops that no longer overlap anything ahead of them. */
		for (struct chunk_op *w = c->waiting.first, *wn; w; w = wn) {
			bool blocked = false;

			wn = w->next;
			for (struct chunk_op *a = c->active.first; a && !blocked; a = a->next)
				blocked = op_conflict(w, a);
			for (struct chunk_op *e = c->waiting.first; e != w && !blocked; e = e->next)
				blocked = op_conflict(w, e);
			if (blocked)
				continue;
			list_del(&c->waiting, w);
			list_add_tail(&c->active, w);
			op_start(w);
		}
		if (s->jmode)
			chunk_order_kick(c);
	}
	/* Its data is durable now: a round claims its version (page 0 is as
	 * good as any, the highest page version counts). Journal mode: the
	 * next checkpoint's round does. */
	if (c && !c->deleted && chunk_durable_ver(c) > c->disk_ver) {
		c->dirty_mask |= 1;
		if (!s->jmode)
			chunk_meta_kick(s, c);
	}
	if (op->jseq) {
		zl_jw_applied(s->jw, op->jseq);
		if (s->ckpt_wanted)
			store_ckpt_want(s);
	}
	/* Idle: the metadata reaches the chunk files soon (replay stays short
	 * and the files on disk say what memory says). */
	if (s->jmode && s->ops.in_use == 1 && s->n_jdirty)
		zl_timer_start(s->loop, &s->idle_t, STORE_IDLE_CKPT_MS, 0, store_ckpt_timer_cb, s);
	if (op->jcrc_own)
		s->buf_free(s->buf_arg, op->jcrc);
	if (op->own_buf)
		s->buf_free(s->buf_arg, op->buf);
	if (c)
		chunk_put(s, c);
	while (op->syncs) {
		struct flush_sync *fs = op->syncs;

		op->syncs = fs->next;
		chunk_put(s, fs->c);
		zl_slab_free(&s->fsyncs, fs);
	}
	op_free(op);
	if (!acked)
		cb(arg, err);
}

/* Data stage of a write: the payload (merged with edge blocks) to disk. */
static void op_write_data(struct chunk_op *op)
{
	struct chunk *c = op->ch;
	uint32_t span = (op->b1 - op->b0) * BLK;
	int rc;

	op->stage = OP_ST_DATA;
	rc = op_prep_rw(op, true, op->buf, span, c->data_off + (uint64_t)op->b0 * BLK);
	if (rc) {
		if (!op->acked)
			chunk_crc_rollback(c, op->b0, op->b1);
		op_fail_later(op, rc);
	}
}

/* Geometry of a zeroing op: partial head block hb, partial tail block tb
 * (when distinct from hb), whole blocks [fb0, fb1). */
struct zero_geo {
	bool head, tail;
	uint32_t hb, tb, fb0, fb1;
};

static void op_zero_geo(const struct chunk_op *op, struct zero_geo *g)
{
	uint32_t e0 = op->off, e1 = op->off + op->len;

	g->hb = e0 / BLK;
	g->tb = e1 / BLK;
	g->fb0 = (e0 + BLK - 1) / BLK;
	g->fb1 = e1 / BLK;
	g->head = e0 % BLK;
	g->tail = e1 % BLK && !(g->head && g->tb == g->hb);
}

/* Data stage of a zeroing op: the rewritten edge blocks and the punch. */
static void op_zero_data(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	struct io_uring_sqe *sqe;
	struct zero_geo g;
	int rc = 0;

	op_zero_geo(op, &g);
	op->stage = OP_ST_DATA;
	if (g.head)
		rc = op_prep_rw(op, true, op->buf, BLK, c->data_off + (uint64_t)g.hb * BLK);
	if (!rc && g.tail)
		rc = op_prep_rw(op, true, op->buf + BLK, BLK, c->data_off + (uint64_t)g.tb * BLK);
	if (!rc && g.fb1 > g.fb0) {
		sqe = store_sqe(s);
		if (!sqe) {
			rc = -ZL_ERR_BUSY;
		} else {
			io_uring_prep_fallocate(
			    sqe, c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			    c->data_off + (uint64_t)g.fb0 * BLK, (uint64_t)(g.fb1 - g.fb0) * BLK);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
			op->pending++;
		}
	}
	if (rc && !op->pending) {
		if (!op->acked)
			chunk_crc_rollback(c, op->b0, op->b1);
		op_fail_later(op, rc);
	} else if (rc) {
		op->err = rc; /* finishes (and rolls back) once the others complete */
	}
}

/* ---- journal mode: a write/zero is durable when its record is ---- */

static void chunk_jdirty(struct zl_chunk_store *s, struct chunk *c, uint64_t seq);

/* CRCs of whole zeroed blocks in ZERO entries: 0, the store's "zeroed" mark. */
static const uint32_t jzero_crcs[ZL_JOURNAL_IO_MAX / BLK];

/* The record holding op (its data inline, or a zeroing) is durable: the
 * write is answered now, and its chunk-file write goes on behind the answer.
 * The op keeps its blocks until that write is done, so a later read or write
 * of them waits for it (reads never see the file's older data). The
 * caller's buffer is released by the answer: the data is copied to one of
 * ours first (below STORE_INPLACE_MIN; without a buffer the op answers
 * after the file write, as before). */
static void op_ack_early(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;

	if (op->kind == OP_WRITE && !op->own_buf) {
		uint32_t span = (op->b1 - op->b0) * BLK;
		uint8_t *b = s->buf_alloc(s->buf_arg, span);

		if (!b)
			return;
		memcpy(b, op->buf, span);
		op->buf = b;
		op->own_buf = true;
	}
	op_visible(op);
	op->acked = true;
	s->st.early_acks++;
	op->cb(op->arg, 0);
}

/* The record holding op is durable (or the journal failed): its new CRCs
 * take effect, then its data goes to the chunk file (no DSYNC). */
static void op_journal_done(struct zl_jw_item *it, int err)
{
	struct chunk_op *op = (struct chunk_op *)((char *)it - offsetof(struct chunk_op, jitem));
	struct chunk *c = op->ch;

	if (err) {
		/* Later: a journal found broken answers inside zl_jw_append,
		 * which may run inside the call that submitted op. */
		op_fail_later(op, store_map_err(op->s, op, err));
		return;
	}
	op->jseq = it->seq;
	if (op->kind == OP_WRITE) {
		for (uint32_t b = op->b0; b < op->b1; b++)
			chunk_set_crc(c, b, op->jset[b - op->b0], op->version);
	} else {
		struct zero_geo g;

		op_zero_geo(op, &g);
		if (g.head)
			chunk_set_crc(c, g.hb, op->jcrc[0], op->version);
		if (g.tail)
			chunk_set_crc(c, g.tb, op->jcrc[1], op->version);
		for (uint32_t b = g.fb0; b < g.fb1; b++)
			chunk_set_crc(c, b, 0, op->version);
	}
	chunk_jdirty(op->s, c, it->seq);
	if (!op->jinplace)
		op_ack_early(op);
	if (op->kind == OP_WRITE)
		op_write_data(op);
	else
		op_zero_data(op);
}

/* What op's entries let the chunk claim once durable (claim_gap): its
 * version, unless a write of the chunk with a lower version is not in the
 * journal yet (waiting for blocks it overlaps, or reading its edge blocks):
 * after a crash that one may be missing, and equal versions must mean equal
 * data. */
static uint32_t op_claim_gap(const struct chunk_op *op)
{
	const struct op_list *lists[2] = {&op->ch->active, &op->ch->waiting};
	uint64_t claim = op->version;

	for (int l = 0; l < 2; l++)
		for (const struct chunk_op *u = lists[l]->first; u; u = u->next)
			if ((u->kind == OP_WRITE || u->kind == OP_ZERO) && u->version &&
			    u->version <= claim && u != op &&
			    (u->stage == OP_ST_WAIT || u->stage == OP_ST_EDGE ||
			     u->stage == OP_ST_ORDER))
				claim = u->version - 1;
	return op->version - claim > ZL_JOURNAL_CLAIM_NONE - 1 ? ZL_JOURNAL_CLAIM_NONE
								 : (uint32_t)(op->version - claim);
}

static void op_jent(struct chunk_op *op, uint32_t *n, uint32_t flags, uint32_t b0, uint32_t nb,
		    const uint32_t *crcs, const void *data)
{
	op->jent[(*n)++] = (struct zl_journal_entry){.vol = op->ch->vol,
						     .chunk = op->ch->idx,
						     .version = op->version,
						     .claim_gap = op_claim_gap(op),
						     .offset = b0 * BLK,
						     .length = nb * BLK,
						     .flags = flags,
						     .crcs = crcs,
						     .data = data};
}

/* Journal mode's commit: whole blocks go into the record (INLINE: the
 * merged blocks of a write below STORE_INPLACE_MIN, the rewritten edge
 * blocks of a zeroing; ZERO: its whole blocks; INPLACE: only the CRCs of a
 * larger write, whose data then goes to the chunk file with RWF_DSYNC), the
 * CRCs are kept in the op until the record is durable. */
/* Bytes of file system blocks op's chunk-file write may allocate: the
 * blocks it writes that hold no data now (CRC 0: never written, or zeroed,
 * whose whole blocks are punched). */
static uint64_t op_new_bytes(const struct chunk_op *op)
{
	const struct chunk *c = op->ch;
	uint64_t n = 0;

	if (op->kind == OP_WRITE) {
		for (uint32_t b = op->b0; b < op->b1; b++)
			n += !c->crc[b];
	} else {
		struct zero_geo g;

		op_zero_geo(op, &g);
		n = (g.head && !c->crc[g.hb]) + (g.tail && !c->crc[g.tb]);
	}
	return n * BLK;
}

/* Whether op's new blocks fit. Journal mode: a write is answered once its
 * record is durable and its chunk-file write goes on behind the answer: a
 * full disk there would lose an acknowledged write on every replica (all
 * fill alike). So a write that needs new blocks is refused NOSPC while the
 * free space left after it would fall below the journal's ring (at most
 * that much data is answered and not in its chunk file yet) plus
 * STORE_FREE_SLACK. Direct path: the data write fails before the answer,
 * but one that lands in part (a short write) leaves blocks whose CRCs were
 * rolled back to the old data (chunk_crc_rollback), unreadable with the
 * acknowledged sectors they share; so it keeps STORE_FREE_SLACK free and
 * the disk never gets there. Overwrites of blocks that hold data always
 * fit. */
static bool op_room(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	uint64_t need;

	if (s->free_est == UINT64_MAX && !op->no_new)
		return true;
	need = op_new_bytes(op);
	if (!need)
		return true;
	if (op->no_new) { /* zl_chunk_overwrite: its caller says why */
		s->st.full_refused++;
		return false;
	}
	if (s->free_est >= need && s->free_est - need >= s->free_reserve) {
		s->free_est -= need;
		return true;
	}
	s->st.full_refused++;
	if (zl_ratelimit_ok(&s->rl_full, 1))
		ZL_LOG_ERR(
		    "storage",
		    "disk full: about %" PRIu64 " MiB free in %s, %" PRIu64
		    " MiB of it kept%s; writes that need new space fail NOSPC (free space "
		    "on that filesystem or add capacity; overwrites go on)",
		    s->free_est >> 20, s->dir, s->free_reserve >> 20,
		    s->jmode ? " for the writes the journal answered before their chunk-file write"
			     : "");
	return false;
}

void zl_chunk_store_set_free(struct zl_chunk_store *s, uint64_t bytes)
{
	struct zl_jw_stats js;

	if (!s->free_reserve) {
		s->free_reserve = STORE_FREE_SLACK;
		if (s->jmode && s->jw) {
			zl_jw_stats(s->jw, &js);
			s->free_reserve += js.ring;
		}
	}
	s->free_est = bytes;
}

bool zl_chunk_store_tight(const struct zl_chunk_store *s)
{
	return s->free_est != UINT64_MAX && s->free_est < s->free_reserve + STORE_TIGHT_MARGIN;
}

bool zl_chunk_store_full(const struct zl_chunk_store *s)
{
	return s->free_est != UINT64_MAX && s->free_est < s->free_reserve + STORE_FULL_MARGIN;
}

static void op_journal(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	uint32_t n = 0;

	if (!op_room(op)) {
		op_fail_later(op, -ZL_ERR_NOSPC);
		return;
	}

	if (op->kind == OP_WRITE) {
		uint32_t nb = op->b1 - op->b0;

		if (op->own_buf)
			memcpy(op->buf + (op->off - op->b0 * BLK), op->data, op->len);
		op->jset = op->own_buf ? NULL : op->crcs_in;
		if (!op->jset) {
			op->jcrc = op->jcrc_small;
			if (nb > OP_JCRC_SMALL) {
				op->jcrc = s->buf_alloc(s->buf_arg,
							ZL_ALIGN_UP(nb * sizeof(uint32_t), BLK));
				if (!op->jcrc) {
					op_fail_later(op, -ZL_ERR_BUSY);
					return;
				}
				op->jcrc_own = true;
			}
			for (uint32_t i = 0; i < nb; i++)
				op->jcrc[i] = zl_crc32c(op->buf + (size_t)i * BLK, BLK);
			op->jset = op->jcrc;
		}
		op->jinplace = nb * BLK >= STORE_INPLACE_MIN;
		op_jent(op, &n, op->jinplace ? ZL_JOURNAL_ENT_INPLACE : ZL_JOURNAL_ENT_INLINE, op->b0,
			nb, op->jset, op->jinplace ? NULL : op->buf);
	} else {
		uint32_t e0 = op->off, e1 = op->off + op->len, per = ZL_JOURNAL_IO_MAX / BLK;
		struct zero_geo g;

		op_zero_geo(op, &g);
		op->jcrc = op->jcrc_small;
		if (g.head) {
			memset(op->buf + (e0 - g.hb * BLK), 0, ZL_MIN(e1, (g.hb + 1) * BLK) - e0);
			op->jcrc[0] = zl_crc32c(op->buf, BLK);
			op_jent(op, &n, ZL_JOURNAL_ENT_INLINE, g.hb, 1, &op->jcrc[0], op->buf);
		}
		if (g.tail) {
			memset(op->buf + BLK, 0, e1 - g.tb * BLK);
			op->jcrc[1] = zl_crc32c(op->buf + BLK, BLK);
			op_jent(op, &n, ZL_JOURNAL_ENT_INLINE, g.tb, 1, &op->jcrc[1], op->buf + BLK);
		}
		for (uint32_t b = g.fb0; b < g.fb1; b += per)
			op_jent(op, &n, ZL_JOURNAL_ENT_ZERO, b, ZL_MIN(per, g.fb1 - b), jzero_crcs,
				NULL);
	}
	op->jitem.ents = op->jent;
	op->jitem.n = n;
	op->jitem.done = op_journal_done;
	op->stage = OP_ST_JOURNAL;
	zl_jw_append(s->jw, &op->jitem);
}

/* Journal mode: whether op must wait (OP_ST_ORDER) before its record: a
 * write/zero of its chunk submitted before it with a lower version is not
 * in the journal yet (waiting for blocks, reading edge blocks, or itself
 * waiting here). Journaling a chunk's writes in version order means a
 * crash leaves each chunk a prefix of its versions, so its version names
 * exactly the data it holds: a copy holding a newer write but claiming a
 * lower version (because an older one had not reached the journal) would
 * tie with a copy that really is at that version, and recovery and peering
 * trust equal versions (REPLICATION.md §7). Only earlier submissions count,
 * so an op never waits for one that waits for its blocks. */
static bool op_order_blocked(const struct chunk_op *op)
{
	const struct op_list *lists[2] = {&op->ch->active, &op->ch->waiting};

	if (!op->version)
		return false;
	for (int l = 0; l < 2; l++)
		for (const struct chunk_op *u = lists[l]->first; u; u = u->next)
			if (u != op && (u->kind == OP_WRITE || u->kind == OP_ZERO) && u->version &&
			    u->version < op->version && u->sub < op->sub &&
			    (u->stage == OP_ST_WAIT || u->stage == OP_ST_EDGE ||
			     u->stage == OP_ST_ORDER))
				return true;
	return false;
}

/* Journals the chunk's OP_ST_ORDER operations that may go now, lowest
 * submission first. */
static void chunk_order_kick(struct chunk *c)
{
	/* Only writes and zeroes wait in OP_ST_ORDER (op_commit_prepare). */
	bool again = c->active.n_wr > 0;

	while (again) {
		struct chunk_op *best = NULL;

		for (struct chunk_op *op = c->active.first; op; op = op->next)
			if (op->stage == OP_ST_ORDER && !op_order_blocked(op) &&
			    (!best || op->sub < best->sub))
				best = op;
		again = best != NULL;
		if (best)
			op_journal(best);
	}
}

/* Builds the blocks a write/zero will put on disk, sets their new CRCs
 * (keeping the old ones as previous) and waits for them to be durable. */
static void op_commit_prepare(struct chunk_op *op)
{
	struct chunk *c = op->ch;

	if (op->s->jmode) {
		if (op_order_blocked(op)) {
			op->stage = OP_ST_ORDER;
			return;
		}
		op_journal(op);
		chunk_order_kick(c);
		return;
	}
	if (!op_room(op)) {
		op_fail_later(op, -ZL_ERR_NOSPC);
		return;
	}
	if (op->kind == OP_WRITE) {
		if (op->own_buf)
			memcpy(op->buf + (op->off - op->b0 * BLK), op->data, op->len);
		for (uint32_t b = op->b0; b < op->b1; b++)
			chunk_set_crc(c, b,
				      op->crcs_in && !op->own_buf
					  ? op->crcs_in[b - op->b0]
					  : zl_crc32c(op->buf + (size_t)(b - op->b0) * BLK, BLK),
				      op->version);
	} else {
		uint32_t e0 = op->off, e1 = op->off + op->len;
		struct zero_geo g;

		op_zero_geo(op, &g);
		if (g.head) {
			uint32_t end = ZL_MIN(e1, (g.hb + 1) * BLK);

			memset(op->buf + (e0 - g.hb * BLK), 0, end - e0);
			chunk_set_crc(c, g.hb, zl_crc32c(op->buf, BLK), op->version);
		}
		if (g.tail) {
			memset(op->buf + BLK, 0, e1 - g.tb * BLK);
			chunk_set_crc(c, g.tb, zl_crc32c(op->buf + BLK, BLK), op->version);
		}
		for (uint32_t b = g.fb0; b < g.fb1; b++)
			chunk_set_crc(c, b, 0, op->version);
	}
	op->stage = OP_ST_COMMIT;
	op->need_round = c->round_started + 1;
	chunk_meta_kick(op->s, c);
}

/* Starts (or restarts after waiting) an operation on its chunk. */
static void op_start(struct chunk_op *op)
{
	struct chunk *c = op->ch;
	struct zero_geo g;
	bool head, tail;
	int rc = 0;

	switch (op->kind) {
	case OP_READ:
		op->stage = OP_ST_DATA;
		rc = op_prep_rw(op, false, op->buf, (op->b1 - op->b0) * BLK,
				c->data_off + (uint64_t)op->b0 * BLK);
		break;
	case OP_WRITE:
		op->stage = OP_ST_EDGE;
		head = op->own_buf && op->off % BLK;
		tail = op->own_buf && (op->off + op->len) % BLK && !(head && op->b1 - 1 == op->b0);
		if (head)
			rc = op_prep_rw(op, false, op->buf, BLK,
					c->data_off + (uint64_t)op->b0 * BLK);
		if (!rc && tail)
			rc = op_prep_rw(op, false, op->buf + (size_t)(op->b1 - 1 - op->b0) * BLK,
					BLK, c->data_off + (uint64_t)(op->b1 - 1) * BLK);
		if (!rc && !op->pending) {
			op_commit_prepare(op);
			return;
		}
		break;
	case OP_ZERO:
		op_zero_geo(op, &g);
		op->stage = OP_ST_EDGE;
		if (g.head)
			rc =
			    op_prep_rw(op, false, op->buf, BLK, c->data_off + (uint64_t)g.hb * BLK);
		if (!rc && g.tail)
			rc = op_prep_rw(op, false, op->buf + BLK, BLK,
					c->data_off + (uint64_t)g.tb * BLK);
		if (!rc && !op->pending) {
			op_commit_prepare(op);
			return;
		}
		break;
	case OP_FLUSH:
	case OP_WARM: /* never attached (open_op_resume ends it) */
		break;
	}
	if (rc && !op->pending)
		op_fail_later(op, rc);
	else if (rc)
		op->err = rc;
}

/* All SQEs of the current stage completed. */
static void op_stage_done(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	int rc = 0;

	if (!op->err && op->got != op->expect)
		op->err = -EIO; /* short transfer */
	op->expect = op->got = 0;
	if (op->err) {
		if (op->stage == OP_ST_DATA && !op->acked &&
		    (op->kind == OP_WRITE || op->kind == OP_ZERO))
			chunk_crc_rollback(c, op->b0, op->b1);
		op->err = store_map_err(s, op, op->err);
		op_finish(op);
		return;
	}
	if (op->stage == OP_ST_EDGE) {
		/* Verify the edge blocks before merging: never launder corruption
		 * into a fresh CRC. */
		if (op->kind == OP_WRITE) {
			bool head = op->off % BLK;

			if (head)
				rc = chunk_verify(s, c, op->b0, op->buf);
			if (!rc && (op->off + op->len) % BLK && !(head && op->b1 - 1 == op->b0))
				rc = chunk_verify(s, c, op->b1 - 1,
						  op->buf + (size_t)(op->b1 - 1 - op->b0) * BLK);
		} else {
			struct zero_geo g;

			op_zero_geo(op, &g);
			if (g.head)
				rc = chunk_verify(s, c, g.hb, op->buf);
			if (!rc && g.tail)
				rc = chunk_verify(s, c, g.tb, op->buf + BLK);
		}
		if (rc) {
			op->err = rc;
			op_finish(op);
			return;
		}
		op_commit_prepare(op);
		return;
	}
	if (op->kind == OP_READ && op->bad) {
		for (uint32_t b = op->b0; b < op->b1; b++)
			if (chunk_verify(s, c, b, op->buf + (size_t)(b - op->b0) * BLK))
				(*op->bad)++;
	} else if (op->kind == OP_READ) {
		for (uint32_t b = op->b0; b < op->b1 && !op->err; b++) {
			uint32_t *co = op->crcs_out ? &op->crcs_out[b - op->b0] : NULL;

			if (op->trust && chunk_vok(c, b))
				*co = c->crc[b] ? c->crc[b] : s->zero_crc; /* the reader checks */
			else
				op->err = chunk_verify_crc(s, c, b,
							   op->buf + (size_t)(b - op->b0) * BLK, co);
		}
	} else if (op->kind == OP_ZERO && op->stage == OP_ST_SYNC) {
		s->st.zero_syncs++;
	} else if (op->kind == OP_ZERO) {
		struct zero_geo g;

		op_zero_geo(op, &g);
		if (g.fb1 > g.fb0 && !s->jmode) {
			/* The punch is durable only after an fdatasync; done
			 * before the zeroing is acknowledged (journal mode: the
			 * record is, and the checkpoint syncs the punch). */
			struct io_uring_sqe *sqe = store_sqe(s);

			op->stage = OP_ST_SYNC;
			if (sqe) {
				io_uring_prep_fsync(sqe, c->fd, IORING_FSYNC_DATASYNC);
				io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
				op->pending++;
				s->st.durable_ios++;
				return;
			}
			op->err = store_map_err(s, op, -ZL_ERR_BUSY);
		}
	}
	op_finish(op);
}

static void store_cqe(struct zl_chunk_store *s, uint64_t ud, int res)
{
	struct chunk_op *op;

	if (!ud)
		return; /* no-op filler */
	if ((ud & TAG_MASK) == TAG_META) {
		chunk_meta_done(s, (struct chunk *)(uintptr_t)(ud & ~TAG_MASK), res);
		return;
	}
	if ((ud & TAG_MASK) == TAG_CKPT) {
		store_ckpt_chunk_step(s, (struct chunk *)(uintptr_t)(ud & ~TAG_MASK),
				      res < 0 ? res : 0);
		return;
	}
	op = (struct chunk_op *)(uintptr_t)ud;
	if (res < 0) {
		if (!op->err)
			op->err = res;
	} else {
		op->got += (uint64_t)res;
	}
	if (--op->pending == 0)
		op_stage_done(op);
}

static void store_efd_cb(void *arg, uint32_t events)
{
	struct zl_chunk_store *s = arg;
	struct io_uring_cqe *cqe;

	(void)events;
	while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&s->ring, cqe);
		store_cqe(s, ud, res);
	}
}

/* Common part of read/write/zero: checks, chunk lookup, context, queueing. */
/* A chunk file unlinked while we hold it open (an operator removed it):
 * checked at most once a second per chunk by reads, so the next open sees
 * the file missing. c: the cached chunk of the read (NULL: none). Returns c,
 * or NULL once it is detached. */
static struct chunk *store_check_gone(struct zl_chunk_store *s, struct chunk *c)
{
	uint64_t vol, idx;
	uint64_t now;
	struct stat stb;

	if (!c)
		return NULL;
	now = zl_loop_now_ns(s->loop) / 1000000;
	if (now - c->gone_checked_ms < STORE_GONE_CHECK_MS)
		return c;
	vol = c->vol;
	idx = c->idx;
	c->gone_checked_ms = now;
	if (fstat(c->fd, &stb) == 0 && stb.st_nlink == 0) {
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(vol, vid);
		ZL_LOG_ERR("storage",
			   "chunk file removed while open: vol=%s chunk=%" PRIu64 " version=%" PRIx64
			   " (the replica is lost; scrub repairs it from another member)",
			   vid, idx, c->version);
		known_lose(s, known_find(s, vol, idx), c->n_blocks);
		chunk_detach(s, c);
		return NULL;
	}
	return c;
}

/* A read of a chunk this daemon recorded whose file is gone (absent: no
 * file now), or that is lost and not rebuilt yet. */
static int store_missing(struct zl_chunk_store *s, uint64_t vol, uint64_t idx, uint32_t cs,
			 bool absent)
{
	struct known *k = absent ? known_find(s, vol, idx) : known_lost(s, vol, idx);
	char vid[ZL_VOL_ID_LEN + 1];

	if (!k)
		return 0;
	known_lose(s, k, cs / BLK);
	s->st.corruptions++;
	s->st.last_corrupt_vol = vol;
	s->st.last_corrupt_chunk = idx;
	s->st.last_corrupt_block = 0;
	if (zl_ratelimit_ok(&s->rl_missing, 5)) {
		zl_vol_id_format(vol, vid);
		ZL_LOG_ERR("storage",
			   "corruption vol=%s chunk=%" PRIu64 " block=all: chunk file missing "
			   "(version %" PRIx64 " recorded; read fails, the client reads another "
			   "replica; `zl volume scrub` repairs it)",
			   vid, idx, k->version);
	}
	return -ZL_ERR_CORRUPT;
}

/* The rest of a submission once its chunk is known: c (referenced for op)
 * or NULL when it has no file. Returns 0 (op started, waiting or answered
 * later) or an error: op not started, c's reference dropped. */
static int op_attach(struct zl_chunk_store *s, struct chunk_op *op, struct chunk *c)
{
	enum op_kind kind = op->kind;
	uint32_t span = zl_chunk_read_span(op->off, op->len);
	int rc;

	if (!c && op->bad)
		return -ZL_ERR_NOT_FOUND;
	/* Before any metadata page of this op is built, so they carry it. */
	if (c && kind != OP_READ)
		c->wseq = ZL_MAX(c->wseq, op->wseq);
	if (kind == OP_READ && !op->bad && (!c || s->n_lost)) {
		rc = store_missing(s, op->vol, op->idx, op->cs, !c);
		if (rc) {
			if (c)
				chunk_put(s, c);
			return rc;
		}
	}
	if (!c && kind == OP_ZERO && s->n_lost)
		known_rewrote(s, op->vol, op->idx, (op->off + BLK - 1) / BLK,
			      (uint32_t)(((uint64_t)op->off + op->len) / BLK));
	if (!c) {
		/* Absent replica: reads see zeros, zeroing has nothing to do. */
		if (kind == OP_READ)
			memset(op->buf, 0, span);
		if (kind == OP_READ && op->crcs_out) {
			uint32_t zc = zl_crc32c(op->buf, BLK);

			for (uint32_t i = 0; i < span / BLK; i++)
				op->crcs_out[i] = zc;
		}
		op_fail_later(op, 0);
		return 0;
	}
	if (kind == OP_READ) {
		/* op->buf: the caller's */
	} else if (kind == OP_WRITE && !(op->off % BLK) && !(op->len % BLK) &&
		   !((uintptr_t)op->data % BLK)) {
		op->buf = (uint8_t *)op->data;
	} else if (kind == OP_WRITE || op->off % BLK || (op->off + op->len) % BLK) {
		op->buf = s->buf_alloc(s->buf_arg, kind == OP_WRITE ? span : 2 * BLK);
		if (!op->buf) {
			chunk_put(s, c);
			return -ENOMEM;
		}
		op->own_buf = true;
	}
	op->ch = c;
	if (kind == OP_READ)
		s->st.reads++;
	else if (kind == OP_WRITE)
		s->st.writes++;
	else
		s->st.zeroes++;
	/* A read conflicts with no read (op_conflict): without writes, zeroes
	 * or flushes queued on c there is nothing to scan. */
	if (kind == OP_READ && !c->active.n_wr && !c->waiting.n_wr)
		goto start;
	for (struct chunk_op *o = c->active.first; o; o = o->next)
		if (op_conflict(op, o))
			goto wait;
	for (struct chunk_op *o = c->waiting.first; o; o = o->next)
		if (op_conflict(op, o))
			goto wait;
start:
	list_add_tail(&c->active, op);
	op_start(op);
	return 0;
wait:
	op->stage = OP_ST_WAIT;
	list_add_tail(&c->waiting, op);
	return 0;
}

/* ---- opening chunks off the loop ----
 * A submission to a chunk that is not in the table queues its op on the
 * chunk's open (struct chunk_open, the OPENING state) and returns; an open
 * worker opens the file (or creates it for a write: mkdir, .tmp file,
 * header, fsync, rename, directory fsync), loads its metadata pages and
 * allocates its tables; the loop then enters the chunk in the table and
 * starts the queued ops in their order, or fails them with the open's error.
 * Operations of other chunks go on meanwhile. */

/* The first open of (vol, idx) in flight, the head of its chain; NULL:
 * none. */
static struct chunk_open *open_head(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	for (struct chunk_open *o = s->opening[chunk_bucket(vol, idx)]; o; o = o->hnext)
		if (o->a.vol == vol && o->a.idx == idx)
			return o;
	return NULL;
}

/* The open of (vol, idx) that new operations join: the last of its chain
 * (an open that a delete overtook is followed by the next one); NULL: none. */
static struct chunk_open *open_find(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	struct chunk_open *o = open_head(s, vol, idx);

	while (o && o->after)
		o = o->after;
	return o;
}

/* A delete of chunk idx of vol (UINT64_MAX: every chunk of vol): opens in
 * flight answer their ops NOT_FOUND and remove a file they created. */
static void open_mark_deleted(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	uint32_t b0 = idx == UINT64_MAX ? 0 : chunk_bucket(vol, idx);
	uint32_t b1 = idx == UINT64_MAX ? STORE_BUCKETS : b0 + 1;

	for (uint32_t b = b0; b < b1; b++)
		for (struct chunk_open *o = s->opening[b]; o; o = o->hnext)
			if (o->a.vol == vol && (idx == UINT64_MAX || o->a.idx == idx))
				for (struct chunk_open *x = o; x; x = x->after)
					x->deleted = true;
}

/* Removes o (the head of its chain) from the opening table; the next open
 * of its chain takes its place. */
static void open_remove(struct zl_chunk_store *s, struct chunk_open *o)
{
	struct chunk_open **pp = &s->opening[chunk_bucket(o->a.vol, o->a.idx)];

	while (*pp && *pp != o)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = o->hnext;
	o->hnext = NULL;
	if (o->after) {
		o->after->hnext = *pp;
		*pp = o->after;
	}
}

/* A queued op once its chunk's open ended: c (not referenced for op yet)
 * or NULL, rc the open's result. */
static void open_op_resume(struct zl_chunk_store *s, struct chunk_op *op, struct chunk *c, int rc)
{
	if (op->kind == OP_WARM) {
		/* The chunk is in the table now (or has no file): done. */
		op_fail_later(op, rc == -ENOENT ? 0 : rc);
		return;
	}
	/* ENOENT: no file, fine to read (zeros) or zero; a write that could
	 * not create its file (chunks/ gone) is an error, never a success. */
	if (rc && (rc != -ENOENT || op->kind == OP_WRITE)) {
		/* Disk full creating the file: said and mapped as for a write. */
		op_fail_later(op, rc == -ENOSPC || rc == -EDQUOT ? store_map_err(s, op, rc) : rc);
		return;
	}
	if (s->fence_err) {
		op_fail_later(op, s->fence_err);
		return;
	}
	if (c) {
		lru_del(s, c);
		c->refs++;
	}
	rc = op_attach(s, op, c);
	if (rc)
		op_fail_later(op, rc);
}

/* The highest wseq of the writes and zeroings waiting on the opens of
 * (vol, idx). */
static uint32_t open_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	uint32_t w = 0;

	for (struct chunk_open *x = open_head(s, vol, idx); x; x = x->after)
		for (struct chunk_op *op = x->ops.first; op && !x->deleted; op = op->next)
			if (op->kind != OP_READ)
				w = ZL_MAX(w, op->wseq);
	return w;
}

/* A write or zeroing in l not yet visible: one answered early (journal
 * mode) made its version visible when it was (op_visible) and no longer
 * counts, so a writer's own earlier piece, answered, does not either. */
static bool op_list_changing(const struct op_list *l)
{
	for (const struct chunk_op *op = l->first; op; op = op->next)
		if ((op->kind == OP_WRITE || op->kind == OP_ZERO) && !op->acked)
			return true;
	return false;
}

bool zl_chunk_changing(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk)
{
	struct chunk *c = chunk_lookup(s, vol, chunk);

	if (c && (op_list_changing(&c->active) || op_list_changing(&c->waiting)))
		return true;
	for (struct chunk_open *x = open_head(s, vol, chunk); x; x = x->after)
		if (!x->deleted && op_list_changing(&x->ops))
			return true;
	return false;
}

/* Submits w to the open worker with the fewest jobs (counted in
 * open_wk_jobs until its done callback takes it off); returns its index. */
static uint32_t open_wk_submit(struct zl_chunk_store *s, struct zl_work *w, zl_work_fn run,
			       zl_work_fn done)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < STORE_OPEN_WORKERS; i++)
		if (s->open_wk_jobs[i] < s->open_wk_jobs[best])
			best = i;
	s->open_wk_jobs[best]++;
	(void)zl_worker_submit(s->open_wk[best], w, run, done);
	return best;
}

static void chunk_open_submit(struct zl_chunk_store *s, struct chunk_open *o);

/* A file an open created for a chunk deleted meanwhile: removed again
 * (blocking, rare), with its volume's directory when the volume is gone. */
static void open_unlink_created(struct zl_chunk_store *s, const struct chunk_args *a)
{
	char path[PATH_MAX];

	if (!store_path(s, a->vol, a->idx, path, sizeof(path)) && unlink(path) < 0 &&
	    errno != ENOENT)
		ZL_LOG_WARN("storage", "cannot remove %s (created while its chunk was deleted): %s",
			    path, strerror(errno));
	if (zl_chunk_vol_gone(s, a->vol) && !store_path(s, a->vol, UINT64_MAX, path, sizeof(path)))
		(void)rmdir(path);
}

/* The loop part of an open: applies the worker's result (o->c, o->rc). */
static void chunk_open_finish(struct zl_chunk_store *s, struct chunk_open *o)
{
	struct chunk *c = o->c, *t;
	struct chunk_open *next;
	struct chunk_op *op;
	int rc = o->rc;

	o->c = NULL;
	chunk_args_apply(s, &o->a);
	if (o->deleted) {
		if (c && o->a.created)
			open_unlink_created(s, &o->a);
		chunk_free(s, c);
		c = NULL;
		rc = -ZL_ERR_NOT_FOUND;
	}
	if (rc == -ENOENT && !o->a.create) {
		/* No file. Ops before the first write see that; a write creates
		 * it for itself and the ops after it. */
		for (op = o->ops.first; op && op->kind != OP_WRITE; op = o->ops.first) {
			list_del(&o->ops, op);
			open_op_resume(s, op, NULL, rc);
		}
		if (op) {
			o->a.create = true;
			chunk_open_submit(s, o);
			return;
		}
	}
	t = rc ? NULL : chunk_lookup(s, o->a.vol, o->a.idx);
	if (t) {
		/* Entered meanwhile (not expected: chunk_get reads a private
		 * copy while an open is in flight): the table's copy wins. */
		chunk_free(s, c);
		c = t;
		rc = c->chunk_size == o->a.cs ? 0 : -ZL_ERR_INVAL;
		c->refs++;
		lru_del(s, c);
	} else if (!rc) {
		chunk_insert(s, c, &o->a);
	}
	open_remove(s, o);
	while ((op = o->ops.first)) {
		list_del(&o->ops, op);
		open_op_resume(s, op, rc ? NULL : c, rc);
	}
	if (t || !rc)
		chunk_put(s, c); /* chunk_insert's (or the one taken above) */
	next = o->after;
	zl_slab_free(&s->opens, o);
	if (next)
		chunk_open_submit(s, next);
}

/* Open worker: the blocking part. */
static void chunk_open_run(struct zl_work *w)
{
	struct chunk_open *o = ZL_CONTAINER_OF(w, struct chunk_open, w);

	o->rc = chunk_build(o->s, &o->a, &o->c);
}

/* Frees o and the opens after it with their ops, unanswered (the store
 * closes). */
static void chunk_open_drop(struct zl_chunk_store *s, struct chunk_open *o)
{
	struct chunk_open *rest = o->after;
	struct chunk_op *op;

	o->after = NULL; /* none takes its place in the table */
	open_remove(s, o);
	o->after = rest;
	while (o) {
		struct chunk_open *next = o->after;

		while ((op = o->ops.first)) {
			list_del(&o->ops, op);
			op_free(op);
		}
		chunk_free(s, o->c);
		zl_slab_free(&s->opens, o);
		o = next;
	}
}

static void chunk_open_done(struct zl_work *w)
{
	struct chunk_open *o = ZL_CONTAINER_OF(w, struct chunk_open, w);
	struct zl_chunk_store *s = o->s;

	s->open_wk_jobs[o->wk]--;
	if (s->closing || w->cancelled)
		chunk_open_drop(s, o);
	else
		chunk_open_finish(s, o);
}

/* Hands o to the open worker with the fewest jobs. A creation takes the
 * journal's next sequence and nonce here, on the loop (replay skips older
 * entries of the chunk: docs/JOURNAL.md). */
static void chunk_open_submit(struct zl_chunk_store *s, struct chunk_open *o)
{
	o->a.direct = s->direct;
	o->a.created = o->a.converted = false;
	if (o->a.create && s->jmode) {
		o->a.birth_seq = zl_jw_next_seq(s->jw);
		o->a.birth_nonce = (uint32_t)zl_jw_nonce(s->jw);
	}
	/* A write that outlived its volume's delete creates nothing. */
	if (o->a.create && zl_chunk_vol_gone(s, o->a.vol))
		o->deleted = true;
	o->c = NULL;
	o->rc = 0;
	if (o->deleted) {
		chunk_open_finish(s, o);
		return;
	}
	o->wk = open_wk_submit(s, &o->w, chunk_open_run, chunk_open_done);
}

/* Queues op (its chunk not in the table) on the open of its chunk, starting
 * one when none is in flight. 0, or an error (op not queued). */
static int chunk_open_queue(struct zl_chunk_store *s, struct chunk_op *op)
{
	struct chunk_open *o = open_find(s, op->vol, op->idx), *n;

	if (zl_chunk_vol_gone(s, op->vol)) {
		/* Deleted: its files may still be on their way out (an open
		 * worker removes them); it has none. */
		if (op->kind == OP_WRITE)
			return -ZL_ERR_NOT_FOUND; /* a write that outlived the delete */
		open_op_resume(s, op, NULL, -ENOENT);
		return 0;
	}
	if (o && !o->deleted) {
		if (o->a.cs != op->cs)
			return -ZL_ERR_INVAL;
		op->stage = OP_ST_WAIT;
		list_add_tail(&o->ops, op);
		return 0;
	}
	n = zl_slab_alloc(&s->opens);
	if (!n)
		return -ENOMEM;
	memset(n, 0, sizeof(*n));
	n->s = s;
	chunk_args_init(s, &n->a, op->vol, op->idx, op->cs, op->kind == OP_WRITE);
	op->stage = OP_ST_WAIT;
	list_add_tail(&n->ops, op);
	if (o) {
		/* After the open a delete overtook (its done submits this one):
		 * it may still be creating the file the delete removes. */
		o->after = n;
		return 0;
	}
	n->hnext = s->opening[chunk_bucket(op->vol, op->idx)];
	s->opening[chunk_bucket(op->vol, op->idx)] = n;
	chunk_open_submit(s, n);
	return 0;
}

/* What every operation on a chunk names: its kind, chunk and callback. */
static void op_target(struct chunk_op *op, enum op_kind kind, uint64_t vol, uint64_t idx,
		      uint32_t cs, zl_chunk_cb cb, void *arg)
{
	op->kind = kind;
	op->vol = vol;
	op->idx = idx;
	op->cs = cs;
	op->cb = cb;
	op->arg = arg;
}

static int store_submit(struct zl_chunk_store *s, enum op_kind kind, uint64_t vol, uint64_t idx,
			uint32_t cs, uint32_t off, uint32_t len, const void *data, void *buf,
			uint32_t *bad, const uint32_t *crcs_in, uint32_t *crcs_out, unsigned opf,
			uint64_t version, uint32_t wseq, zl_chunk_cb cb, void *arg)
{
	struct chunk_op *op;
	struct chunk *c;
	int rc;

	if (s->fence_err)
		return s->fence_err;
	if (!cb || !vol || !chunk_size_ok(cs) || (kind == OP_READ && !buf) ||
	    (kind == OP_WRITE && !data))
		return -ZL_ERR_INVAL;
	if (!len || (uint64_t)off + len > cs || (kind != OP_ZERO && len > ZL_WIRE_MAX_IO))
		return -ZL_ERR_RANGE;
	/* A read looks the chunk up once: checked, then referenced. */
	c = chunk_lookup(s, vol, idx);
	if (kind == OP_READ)
		c = store_check_gone(s, c);
	if (c && c->chunk_size != cs)
		return -ZL_ERR_INVAL;
	op = op_alloc(s, true);
	if (!op)
		return -ENOMEM;
	op_target(op, kind, vol, idx, cs, cb, arg);
	op->wseq = wseq;
	op->off = off;
	op->len = len;
	op->b0 = off / BLK;
	op->b1 = (uint32_t)(((uint64_t)off + len + BLK - 1) / BLK);
	op->data = data;
	op->version = version;
	op->bad = bad;
	op->crcs_in = crcs_in;
	op->crcs_out = crcs_out;
	op->trust = (opf & OPF_TRUST) && crcs_out;
	op->no_new = opf & OPF_NO_NEW;
	op->ch = NULL;
	if (kind == OP_READ)
		op->buf = buf;
	op->sub = ++s->n_sub;
	if (c) {
		lru_del(s, c);
		c->refs++;
		rc = op_attach(s, op, c);
	} else {
		rc = chunk_open_queue(s, op);
	}
	if (rc)
		op_free(op); /* open errors reach cb (open_op_resume) */
	return rc;
}

int zl_chunk_write(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		   uint32_t off, uint32_t len, const void *data, uint64_t version, zl_chunk_cb cb,
		   void *arg)
{
	return zl_chunk_write_crcs(s, vol, chunk, chunk_size, off, len, data, NULL, version, cb,
				   arg);
}

int zl_chunk_write_crcs(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
			uint64_t version, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_WRITE, vol, chunk, chunk_size, off, len, data, NULL, NULL,
			    off % BLK || len % BLK ? NULL : crcs, NULL, 0, version, 0, cb, arg);
}

int zl_chunk_zero(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, uint64_t version, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_ZERO, vol, chunk, chunk_size, off, len, NULL, NULL, NULL, NULL,
			    NULL, 0, version, 0, cb, arg);
}

int zl_chunk_overwrite(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
		       uint64_t version, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, data ? OP_WRITE : OP_ZERO, vol, chunk, chunk_size, off, len, data,
			    NULL, NULL, !data || off % BLK || len % BLK ? NULL : crcs, NULL,
			    OPF_NO_NEW, version, 0, cb, arg);
}

int zl_chunk_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, void *buf, zl_chunk_cb cb, void *arg)
{
	return zl_chunk_read_crcs(s, vol, chunk, chunk_size, off, len, buf, NULL, true, cb, arg);
}

int zl_chunk_read_crcs(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, void *buf, uint32_t *crcs, bool recheck,
		       zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_READ, vol, chunk, chunk_size, off, len, NULL, buf, NULL, NULL,
			    off % BLK || len % BLK ? NULL : crcs, recheck ? 0 : OPF_TRUST, 0, 0, cb,
			    arg);
}

int zl_chunk_scrub_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, void *buf, uint32_t *bad, zl_chunk_cb cb,
			void *arg)
{
	if (!bad)
		return -ZL_ERR_INVAL;
	return store_submit(s, OP_READ, vol, chunk, chunk_size, off, len, NULL, buf, bad, NULL,
			    NULL, 0, 0, 0, cb, arg);
}

/* The open chunk's file is not the one at its path any more (unlinked or
 * replaced by someone else): forget the open copy. */
static void scrub_check_open(struct zl_chunk_store *s, struct chunk *c, const struct stat *path_st)
{
	char vid[ZL_VOL_ID_LEN + 1];
	struct stat stb;

	if (fstat(c->fd, &stb) == 0 && stb.st_nlink && path_st && stb.st_ino == path_st->st_ino &&
	    stb.st_dev == path_st->st_dev)
		return;
	zl_vol_id_format(c->vol, vid);
	ZL_LOG_ERR("storage",
		   "chunk file %s while open: vol=%s chunk=%" PRIu64 " version=%" PRIx64,
		   path_st ? "replaced" : "removed", vid, c->idx, c->version);
	if (!path_st)
		known_lose(s, known_find(s, c->vol, c->idx), c->n_blocks);
	chunk_detach(s, c);
}

bool zl_chunk_held(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk)
{
	struct chunk_open *o;

	if (chunk_lookup(s, vol, chunk) || known_find(s, vol, chunk))
		return true;
	/* Being created: a write waits on its open. */
	o = open_find(s, vol, chunk);
	if (!o || o->deleted)
		return false;
	for (struct chunk_op *op = o->ops.first; op; op = op->next)
		if (op->kind == OP_WRITE)
			return true;
	return false;
}

int zl_chunk_scrub_stat(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			uint32_t chunk_size, uint64_t *version)
{
	char path[PATH_MAX];
	struct chunk *c = chunk_lookup(s, vol, chunk);
	struct known *k;
	struct stat stb;
	int rc = store_path(s, vol, chunk, path, sizeof(path));

	*version = 0;
	if (rc)
		return rc;
	if (stat(path, &stb) < 0) {
		if (errno != ENOENT)
			return -errno;
		if (c)
			scrub_check_open(s, c, NULL);
		k = known_find(s, vol, chunk);
		if (!k)
			return ZL_CHUNK_ABSENT;
		known_lose(s, k, chunk_size / BLK);
		*version = k->version;
		return ZL_CHUNK_MISSING;
	}
	if (c)
		scrub_check_open(s, c, &stb);
	k = known_lost(s, vol, chunk);
	if (k) {
		*version = k->version;
		return ZL_CHUNK_MISSING; /* recreated, not rebuilt yet */
	}
	rc = zl_chunk_version(s, vol, chunk, chunk_size, version);
	return rc ? rc : ZL_CHUNK_PRESENT;
}

/* zl_chunk_version and zl_chunk_wseq: both 0 for a missing chunk. */
static int chunk_state(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t *wseq, uint64_t *version)
{
	struct chunk *c = NULL;
	int rc;

	*wseq = 0;
	*version = 0;
	if (!vol || !chunk_size_ok(chunk_size))
		return -ZL_ERR_INVAL;
	/* Writes waiting on an open in flight count as submitted (their wseq
	 * joins the chunk's as they are submitted to an open one). */
	if (!chunk_lookup(s, vol, chunk))
		*wseq = open_wseq(s, vol, chunk);
	rc = chunk_get(s, vol, chunk, chunk_size, &c);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	*wseq = ZL_MAX(*wseq, c->wseq);
	*version = known_lost(s, vol, chunk) ? 0 : c->version; /* lost: behind */
	chunk_put(s, c);
	return 0;
}

int zl_chunk_version(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		     uint64_t *version)
{
	uint32_t wseq;

	return chunk_state(s, vol, chunk, chunk_size, &wseq, version);
}

int zl_chunk_warm(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  zl_chunk_cb cb, void *arg)
{
	struct chunk_op *op;
	int rc;

	if (s->fence_err)
		return s->fence_err;
	if (!cb || !vol || !chunk_size_ok(chunk_size))
		return -ZL_ERR_INVAL;
	if (chunk_lookup(s, vol, chunk))
		return 1;
	op = op_alloc(s, false); /* all cleared: op_finish reads ch */
	if (!op)
		return -ENOMEM;
	op_target(op, OP_WARM, vol, chunk, chunk_size, cb, arg);
	rc = chunk_open_queue(s, op);
	if (rc)
		op_free(op);
	return rc;
}

int zl_chunk_flush(struct zl_chunk_store *s, uint64_t vol, zl_chunk_cb cb, void *arg)
{
	struct chunk_op *op;

	if (!cb)
		return -ZL_ERR_INVAL;
	op = op_alloc(s, false);
	if (!op)
		return -ENOMEM;
	op->kind = OP_FLUSH;
	op->stage = OP_ST_DATA;
	op->cb = cb;
	op->arg = arg;
	if (s->jmode) {
		/* Every acknowledged write is in a durable record already. */
		op_fail_later(op, 0);
		return 0;
	}
	/* Each fsync holds a reference on its chunk until the flush ends (its
	 * struct flush_sync): a delete (or eviction) meanwhile closes the
	 * descriptor only then, never under an fsync in flight or prepared and
	 * not yet submitted. */
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct chunk *c = s->buckets[i]; c; c = c->hnext) {
			struct io_uring_sqe *sqe;
			struct flush_sync *fs;

			if (c->vol != vol)
				continue;
			fs = zl_slab_alloc(&s->fsyncs);
			sqe = fs ? store_sqe(s) : NULL;
			if (!sqe) {
				zl_slab_free(&s->fsyncs, fs);
				op->err = fs ? -ZL_ERR_BUSY : -ENOMEM;
				continue;
			}
			fs->c = c;
			fs->next = op->syncs;
			op->syncs = fs;
			io_uring_prep_fsync(sqe, c->fd, IORING_FSYNC_DATASYNC);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
			op->pending++;
			lru_del(s, c);
			c->refs++;
		}
	}
	if (!op->pending)
		op_fail_later(op, op->err);
	return 0;
}

/* ---- replica management (blocking, rare) ---- */

int zl_chunk_info(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint64_t *allocated)
{
	char path[PATH_MAX];
	struct stat stb;
	int rc = store_path(s, vol, chunk, path, sizeof(path));

	if (rc)
		return rc;
	*allocated = 0;
	if (stat(path, &stb) < 0)
		return errno == ENOENT ? 0 : -errno;
	*allocated = (uint64_t)stb.st_blocks * 512;
	return 0;
}

/* ---- trash: chunk files deleted on the loop are unlinked off it ---- */

#define TRASH_DIR ".trash" /* under chunks/: no scan takes it for a volume */

static void trash_sweep_run(struct zl_work *w)
{
	struct zl_chunk_store *s = ZL_CONTAINER_OF(w, struct zl_chunk_store, trash_w);
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/" TRASH_DIR, s->dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path) < 0 && errno != ENOENT)
			ZL_LOG_WARN("storage",
				    "cannot remove deleted chunk file %s: %s (it stays there until "
				    "the next delete's sweep or start-up; check the data dir's "
				    "filesystem)",
				    path, strerror(errno));
	}
	closedir(d);
}

static void trash_sweep_start(struct zl_chunk_store *s);

static void trash_sweep_done(struct zl_work *w)
{
	struct zl_chunk_store *s = ZL_CONTAINER_OF(w, struct zl_chunk_store, trash_w);

	s->open_wk_jobs[s->trash_wk]--;
	s->trash_sweeping = false;
	if (s->trash_again && !w->cancelled && !s->closing)
		trash_sweep_start(s);
}

/* A sweep of the trash, or one more after the running one (files moved
 * there since it listed the directory). */
static void trash_sweep_start(struct zl_chunk_store *s)
{
	if (s->trash_sweeping) {
		s->trash_again = true;
		return;
	}
	s->trash_again = false;
	s->trash_sweeping = true;
	s->trash_wk = open_wk_submit(s, &s->trash_w, trash_sweep_run, trash_sweep_done);
}

/* Start-up: the trash, and what a crash left in it swept off the loop. */
static void trash_open(struct zl_chunk_store *s)
{
	char trash[PATH_MAX];

	snprintf(trash, sizeof(trash), "%s/" TRASH_DIR, s->dir);
	s->trash_ok = mkdir(trash, 0755) == 0 || errno == EEXIST;
	if (s->trash_ok)
		trash_sweep_start(s);
	else
		ZL_LOG_WARN("storage",
			    "cannot make %s: %s (deleted chunk files are unlinked on the I/O "
			    "thread)",
			    trash, strerror(errno));
}

/* Removes the chunk file path: moved into the trash (a rename, no extent
 * freed on the loop) for the next sweep, else unlinked here. 0 (also when
 * absent) or -errno. */
static int chunk_file_remove(struct zl_chunk_store *s, const char *path, uint64_t vol,
			     uint64_t chunk)
{
	char trash[PATH_MAX];

	if (s->trash_ok && s->open_wk[0] &&
	    snprintf(trash, sizeof(trash), "%s/" TRASH_DIR "/%016" PRIx64 "-%" PRIx64 "-%" PRIu64,
		     s->dir, vol, chunk, ++s->trash_seq) < (int)sizeof(trash)) {
		if (rename(path, trash) == 0) {
			trash_sweep_start(s);
			return 0;
		}
		if (errno == ENOENT)
			return 0;
	}
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int zl_chunk_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk)
{
	char path[PATH_MAX];
	struct chunk *c = chunk_lookup(s, vol, chunk);
	int rc = store_path(s, vol, chunk, path, sizeof(path));

	if (rc)
		return rc;
	if (c)
		chunk_detach(s, c);
	open_mark_deleted(s, vol, chunk);
	known_drop(s, vol, chunk);
	if (chunk >> ZL_CHUNK_IDX_BITS)
		zl_chunk_snap_forget(s->snap, vol, chunk);
	return chunk_file_remove(s, path, vol, chunk);
}

/* The memory part of a volume's delete: its chunks detached, its opens
 * failed, creations of it refused from now on. */
static void vol_forget(struct zl_chunk_store *s, uint64_t vol)
{
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct chunk *c = s->buckets[i], *next; c; c = next) {
			next = c->hnext;
			if (c->vol == vol)
				chunk_detach(s, c);
		}
	}
	open_mark_deleted(s, vol, UINT64_MAX);
	known_drop_vol(s, vol);
	zl_chunk_snap_forget(s->snap, vol, UINT64_MAX);
	if (!zl_chunk_vol_gone(s, vol)) {
		s->gone_vols[s->gone_next] = vol;
		s->gone_next = (s->gone_next + 1) % ZL_CHUNK_GONE_VOLS;
	}
}

/* The files of a deleted volume's directory dir, then dir (blocking: an
 * open worker, or start-up). A creation of the volume that was already on
 * an open worker may add a file meanwhile (its open then removes it, and
 * the directory): the pass runs again, three times at most. *n: chunk
 * files removed. 0 or -errno. */
static int vol_files_remove(const char *sdir, const char *dir, uint64_t *n)
{
	char path[PATH_MAX + 300];
	struct dirent *de;
	int rc = 0;
	DIR *d;

	*n = 0;
	for (int pass = 0; pass < 3; pass++) {
		d = opendir(dir);
		if (!d)
			return errno == ENOENT ? 0 : -errno;
		while (!rc && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (unlink(path) < 0 && errno != ENOENT)
				rc = -errno;
			else if (strstr(de->d_name, ".zlc") && !strstr(de->d_name, ".tmp"))
				(*n)++;
		}
		closedir(d);
		if (rc)
			return rc;
		if (rmdir(dir) == 0 || errno == ENOENT)
			break;
		rc = errno == ENOTEMPTY ? 0 : -errno;
		if (rc || pass == 2)
			return rc ? rc : -ENOTEMPTY;
	}
	zl_fsync_dir(sdir);
	return 0;
}

int zl_chunk_volume_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t *removed)
{
	char dir[PATH_MAX];
	uint64_t n = 0;
	int rc = store_path(s, vol, UINT64_MAX, dir, sizeof(dir));

	if (removed)
		*removed = 0;
	if (rc)
		return rc;
	vol_forget(s, vol);
	rc = vol_files_remove(s->dir, dir, &n);
	if (removed)
		*removed = n;
	return rc;
}

/* A volume's files being removed on an open worker (a leader, in
 * s->vol_dels), or a delete of the same volume that came meanwhile and
 * waits for the leader's removal instead of removing the same files again
 * (a follower: VOLUME_DELETE and the tombstone round it causes). */
struct vol_del {
	struct zl_work w;
	struct zl_chunk_store *s;
	uint64_t vol;
	uint32_t wk;
	char dir[PATH_MAX];
	int rc;
	uint64_t n;
	zl_chunk_vol_cb cb;
	void *arg;
	struct vol_del *next;	/* leaders: the next in s->vol_dels */
	struct vol_del *follow; /* the deletes waiting for this one */
};

static void vol_del_run(struct zl_work *w)
{
	struct vol_del *d = ZL_CONTAINER_OF(w, struct vol_del, w);

	d->rc = vol_files_remove(d->s->dir, d->dir, &d->n);
}

static void vol_del_done(struct zl_work *w)
{
	struct vol_del *d = ZL_CONTAINER_OF(w, struct vol_del, w);
	struct zl_chunk_store *s = d->s;
	bool tell = !w->cancelled && !s->closing;
	uint64_t n = d->n;
	int rc = d->rc;

	s->open_wk_jobs[d->wk]--;
	for (struct vol_del **pp = &s->vol_dels; *pp; pp = &(*pp)->next) {
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	}
	/* Dropped at destroy: the files stay (a tombstone names the volume
	 * until a later round removes them). Followers hear the leader's
	 * status; the files it removed count once, for it. */
	for (struct vol_del *f = d, *next; f; f = next, n = 0) {
		next = f->follow;
		s->n_vol_dels--;
		if (tell && f->cb)
			f->cb(f->arg, rc, n);
		free(f); /* d first: neither w nor d is read after */
	}
}

int zl_chunk_volume_delete_start(struct zl_chunk_store *s, uint64_t vol, zl_chunk_vol_cb cb,
				 void *arg)
{
	struct vol_del *d = calloc(1, sizeof(*d)); /* per volume delete, not per I/O */
	int rc;

	if (!d)
		return -ENOMEM;
	rc = store_path(s, vol, UINT64_MAX, d->dir, sizeof(d->dir));
	if (rc) {
		free(d);
		return rc;
	}
	vol_forget(s, vol);
	d->s = s;
	d->vol = vol;
	d->cb = cb;
	d->arg = arg;
	s->n_vol_dels++;
	for (struct vol_del *l = s->vol_dels; l; l = l->next) {
		if (l->vol == vol) {
			d->follow = l->follow;
			l->follow = d;
			return 0;
		}
	}
	d->next = s->vol_dels;
	s->vol_dels = d;
	d->wk = open_wk_submit(s, &d->w, vol_del_run, vol_del_done);
	return 0;
}

bool zl_chunk_vol_gone(const struct zl_chunk_store *s, uint64_t vol)
{
	for (uint32_t i = 0; i < ZL_CHUNK_GONE_VOLS; i++)
		if (s->gone_vols[i] == vol)
			return true;
	return false;
}

int zl_chunk_volume_foreach(struct zl_chunk_store *s, int (*fn)(void *arg, uint64_t vol), void *arg)
{
	struct dirent *de;
	DIR *d = opendir(s->dir);
	int rc = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		uint64_t vol;

		if (zl_vol_id_parse(de->d_name, &vol))
			continue;
		rc = fn(arg, vol);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

/* ---- store lifecycle ---- */

/* Records every chunk file under chunks/ (names only: no file is opened). */
static void store_known_scan(struct zl_chunk_store *s)
{
	char dir[PATH_MAX];
	struct dirent *de, *fe;
	DIR *d = opendir(s->dir), *vd;

	if (!d)
		return;
	while ((de = readdir(d))) {
		uint64_t vol;

		if (zl_vol_id_parse(de->d_name, &vol))
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", s->dir, de->d_name);
		vd = opendir(dir);
		if (!vd)
			continue;
		while ((fe = readdir(vd))) {
			unsigned long long idx;
			char tail[8];

			if (strlen(fe->d_name) != 20 ||
			    sscanf(fe->d_name, "%16llx%7s", &idx, tail) != 2 || strcmp(tail, ".zlc"))
				continue;
			known_note(s, vol, idx, 0);
		}
		closedir(vd);
	}
	closedir(d);
	ZL_LOG_INFO("storage", "chunk files recorded: %" PRIu64 " (a missing one reads as an error)",
		    s->n_known);
}

/* ---- unclean start: roll back writes that did not land ---- */

/* Writes the pages of mask (version ver, the tables in memory) into their
 * slots that are not current, then fdatasync. Blocking (start-up only). */
static int chunk_meta_write_sync(struct chunk *c, uint64_t mask, uint64_t ver)
{
	uint64_t seq = c->seq + 1;
	int rc;

	if (!mask)
		return 0;
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t p = (uint32_t)__builtin_ctzll(m);
		uint8_t *img = c->img + (size_t)p * BLK;

		meta_page_encode(c, p, seq, ver, img);
		rc = zl_pwrite_all(c->fd, img, BLK, zl_chunk_slot_off(p, c->page_slot[p] ^ 1));
		if (rc)
			return rc;
	}
	if (fdatasync(c->fd) < 0)
		return -errno;
	for (uint64_t m = mask; m; m &= m - 1)
		c->page_slot[__builtin_ctzll(m)] ^= 1;
	c->seq = seq;
	return 0;
}

/* Verifies blocks [b0, b0 + n) read into buf: a block whose data matches
 * prev but not crc holds a write that did not land; its entry becomes
 * {prev, prev} (what the disk holds). Returns the blocks rolled back and
 * sets their pages in *mask. */
static uint32_t chunk_scan_blocks(struct chunk *c, uint32_t b0, uint32_t n, const uint8_t *buf,
				  uint64_t *mask)
{
	uint32_t rolled = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = b0 + i, want = c->crc[b], prev = c->prev[b], got;
		const uint8_t *p = buf + (size_t)i * BLK;

		if (want == prev)
			continue; /* one valid content only: reads judge it */
		got = zl_crc32c(p, BLK);
		if (got == want || (want == 0 && block_is_zero(p)))
			continue;
		if (got != prev && !(prev == 0 && block_is_zero(p)))
			continue; /* neither: damaged, reads report it */
		c->crc[b] = prev;
		chunk_vok_clear(c, b);
		*mask |= 1ull << (b / ZL_CHUNK_META_ENTRIES);
		rolled++;
	}
	return rolled;
}

/* Reads every block of c that has an entry which could differ from its data
 * (crc != prev) in SCAN_BUF pieces. Returns the blocks rolled back or
 * -errno; *mask gets the pages they are in. */
static int64_t chunk_scan_data(struct chunk *c, uint8_t *buf, uint64_t *mask)
{
	uint32_t per = SCAN_BUF / BLK;
	int64_t rolled = 0;

	for (uint32_t b0 = 0; b0 < c->n_blocks; b0 += per) {
		uint32_t n = ZL_MIN(per, c->n_blocks - b0);
		bool any = false;
		ssize_t got;

		for (uint32_t b = b0; b < b0 + n && !any; b++)
			any = c->crc[b] != c->prev[b];
		if (!any)
			continue;
		got = pread(c->fd, buf, (size_t)n * BLK, (off_t)(c->data_off + (uint64_t)b0 * BLK));
		if (got != (ssize_t)n * BLK)
			return got < 0 ? -errno : -EIO;
		rolled += chunk_scan_blocks(c, b0, n, buf, mask);
	}
	return rolled;
}

/* Chunk size from the header of a chunk file (0 when not a valid v2 file:
 * its first open reports it). */
static uint32_t chunk_file_size(const char *path)
{
	uint8_t hdr[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = pread(fd, hdr, sizeof(hdr), 0);
	close(fd);
	if (n != (ssize_t)sizeof(hdr) || memcmp(hdr, CHUNK_MAGIC, 8) ||
	    zl_get_le32(hdr + CHUNK_HDR_CRC_OFF) != zl_crc32c(hdr, CHUNK_HDR_CRC_OFF) ||
	    !chunk_size_ok(zl_get_le32(hdr + 24)))
		return 0;
	return zl_get_le32(hdr + 24);
}

/* Rolls back a chunk whose writes did not all land. Pages carrying only a
 * version go to disk first, the pages of the rolled-back blocks last, so a
 * crash in between leaves blocks the next scan rolls back again (never a
 * version claiming data the disk lacks). */
static int chunk_roll_back(struct zl_chunk_store *s, struct chunk *c, uint64_t mask)
{
	uint64_t ver_only = 0;
	struct known *k;
	int rc;

	for (uint32_t p = 0; p < c->meta_pages; p++) {
		if (c->page_ver[p] && !(mask & (1ull << p)))
			ver_only |= 1ull << p;
		c->page_ver[p] = 0;
	}
	c->version = 0;
	c->disk_ver = 0;
	rc = chunk_meta_write_sync(c, ver_only, 0);
	if (!rc)
		rc = chunk_meta_write_sync(c, mask, 0);
	k = known_find(s, c->vol, c->idx);
	if (k)
		k->version = 0;
	return rc;
}

/* Verifies one chunk file. Returns the blocks rolled back or a negative
 * error. */
static int64_t store_scan_chunk(struct zl_chunk_store *s, uint64_t vol, uint64_t idx,
				uint8_t *buf)
{
	char path[PATH_MAX], vid[ZL_VOL_ID_LEN + 1];
	struct chunk *c;
	uint64_t mask = 0;
	uint32_t cs;
	int64_t rolled;
	int rc;

	if (store_path(s, vol, idx, path, sizeof(path)))
		return 0;
	cs = chunk_file_size(path);
	if (!cs)
		return 0;
	rc = chunk_get(s, vol, idx, cs, &c);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	rolled = chunk_scan_data(c, buf, &mask);
	if (rolled > 0) {
		rc = chunk_roll_back(s, c, mask);
		zl_vol_id_format(vol, vid);
		ZL_LOG_WARN("storage",
			    "unclean start: vol=%s chunk=%" PRIu64 " blocks_rolled_back=%" PRId64
			    " (version dropped to 0: a peer's copy wins)%s",
			    vid, idx, rolled, rc ? " (metadata rewrite failed)" : "");
		if (rc)
			rolled = rc;
	}
	chunk_put(s, c);
	return rolled;
}

/* Without the clean marker (kill -9, power loss) every chunk file is
 * verified before the store serves: see storage_chunk.h "Crash safety". */
static void store_unclean_scan(struct zl_chunk_store *s)
{
	uint64_t t0 = zl_now_ms(), chunks = 0, rolled_chunks = 0, blocks = 0, failed = 0;
	uint8_t *buf = blk_alloc(SCAN_BUF);

	s->st.unclean_start = true;
	if (!buf) {
		ZL_LOG_ERR("storage", "unclean start: no memory for the verification scan");
		return;
	}
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct known *k = s->known[i]; k; k = k->next) {
			int64_t r = store_scan_chunk(s, k->vol, k->idx, buf);

			chunks++;
			if (r < 0) {
				failed++;
				ZL_LOG_ERR("storage",
					   "unclean start: vol=%016" PRIx64 " chunk=%" PRIu64
					   " not verified: %s (reads of it report what is wrong)",
					   k->vol, k->idx, zl_strerror((int)r));
			} else if (r > 0) {
				rolled_chunks++;
				blocks += (uint64_t)r;
			}
		}
	}
	free(buf);
	s->st.rolled_back_chunks = rolled_chunks;
	s->st.rolled_back_blocks = blocks;
	ZL_LOG_INFO("storage",
		    "unclean start: verified %" PRIu64 " chunk files in %" PRIu64
		    " ms: %" PRIu64 " rolled back (%" PRIu64 " blocks), %" PRIu64 " not verified",
		    chunks, zl_now_ms() - t0, rolled_chunks, blocks, failed);
}

/* Without the clean marker, waits for the direct writes of the process that
 * ran the store before (killed -9) which are still in flight to land, in
 * every chunk file, before the journal replay and the verification read any
 * of them: a write into a hole (a block zeroed before) lands from a kernel
 * workqueue after the process was reaped, and a block verified before that
 * would be rolled back to old data the write then replaces (ZL_ERR_CORRUPT:
 * matches neither CRC). */
static void store_dio_settle_all(struct zl_chunk_store *s)
{
	char path[PATH_MAX];
	uint64_t t0 = zl_now_ms(), failed = 0;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/" STORE_CLEAN_FILE, s->dir);
	if (!access(path, F_OK))
		return; /* a clean close left nothing in flight */
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct known *k = s->known[i]; k; k = k->next) {
			if (store_path(s, k->vol, k->idx, path, sizeof(path)))
				continue;
			fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				continue; /* missing: its first open reports it */
			rc = zl_dio_settle(fd);
			close(fd);
			if (rc && !failed++)
				ZL_LOG_WARN(
				    "storage",
				    "unclean start: cannot wait for writes in flight into "
				    "%s: %s (a write of the killed process landing after the "
				    "verification may read as corrupt; scrub repairs it)",
				    path, strerror(-rc));
		}
	}
	ZL_LOG_INFO("storage",
		    "unclean start: waited for writes in flight into %" PRIu64
		    " chunk files in %" PRIu64 " ms (%" PRIu64 " could not be waited for)",
		    s->n_known, zl_now_ms() - t0, failed);
}

/* Removes the clean marker (durably, before anything is served). Returns
 * true when it was there: the last close was clean. */
static bool store_clean_take(struct zl_chunk_store *s)
{
	char path[PATH_MAX];
	int rc;

	snprintf(path, sizeof(path), "%s/" STORE_CLEAN_FILE, s->dir);
	if (unlink(path) < 0) {
		if (errno != ENOENT)
			ZL_LOG_WARN("storage", "cannot remove %s: %s (treated as an unclean start)",
				    path, strerror(errno));
		return false;
	}
	rc = zl_fsync_dir(s->dir);
	if (rc) {
		ZL_LOG_WARN("storage", "fsync of %s failed: %s (treated as an unclean start)",
			    s->dir, strerror(-rc));
		return false;
	}
	return true;
}

/* Writes the clean marker: every write, zeroing and metadata round is on
 * stable storage, nothing is in flight. */
static void store_clean_put(struct zl_chunk_store *s)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/" STORE_CLEAN_FILE, s->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
	} else {
		rc = zl_pwrite_all(fd, STORE_CLEAN_TEXT, strlen(STORE_CLEAN_TEXT), 0);
		if (!rc && fsync(fd) < 0)
			rc = -errno;
		close(fd);
	}
	if (!rc)
		rc = zl_fsync_dir(s->dir);
	if (rc)
		ZL_LOG_WARN("storage",
			    "cannot write %s: %s (the next start verifies every chunk file)", path,
			    strerror(-rc));
}

/* ---- journal mode: dirty chunks, checkpoints, replay ---- */

/* c changed in record seq: it stays open (one reference) until a checkpoint
 * covers seq. */
static void chunk_jdirty(struct zl_chunk_store *s, struct chunk *c, uint64_t seq)
{
	c->jseq_max = ZL_MAX(c->jseq_max, seq);
	if (c->jlisted || c->deleted)
		return; /* a removed replica is never synced (see chunk_detach) */
	c->jlisted = true;
	c->refs++;
	lru_del(s, c);
	c->jnext = s->jdirty;
	s->jdirty = c;
	s->n_jdirty++;
	if (s->n_jdirty > s->max_open / 2)
		store_ckpt_want(s); /* bounds the files held open */
}

static void store_ckpt_start(struct zl_chunk_store *s);

static void store_ckpt_defer_cb(void *arg)
{
	store_ckpt_start(arg);
}

/* Asks for a checkpoint (from the journal when it fills up, or when too many
 * chunk files are held): runs from the loop, once the applied records allow
 * progress. */
static void store_ckpt_want(struct zl_chunk_store *s)
{
	s->ckpt_wanted = true;
	zl_loop_defer(s->loop, &s->ckpt_d, store_ckpt_defer_cb, s);
}

static void store_jw_need_ckpt(void *arg)
{
	store_ckpt_want(arg);
}

static void store_ckpt_timer_cb(void *arg)
{
	struct zl_chunk_store *s = arg;

	if (s->n_jdirty)
		store_ckpt_start(s);
}

static void store_ckpt_end(struct zl_chunk_store *s, int err)
{
	s->ckpt_running = false;
	if (err) {
		if (zl_ratelimit_ok(&s->rl_io, 5))
			ZL_LOG_ERR("storage",
				   "journal checkpoint failed: %s (retried; the journal keeps "
				   "every write meanwhile)",
				   zl_strerror(err));
		return;
	}
	s->st.checkpoints++;
	if (s->ckpt_wanted)
		store_ckpt_want(s);
	else if (!s->ops.in_use && s->n_jdirty)
		zl_timer_start(s->loop, &s->idle_t, STORE_IDLE_CKPT_MS, 0, store_ckpt_timer_cb, s);
}

static void store_ckpt_committed(void *arg, int err)
{
	struct zl_chunk_store *s = arg;

	if (!err) {
		/* Chunks whose every change the checkpoint covers leave the list. */
		for (struct chunk **pp = &s->jdirty; *pp;) {
			struct chunk *c = *pp;

			if (c->jseq_max >= s->ckpt_seq) {
				pp = &c->jnext;
				continue;
			}
			*pp = c->jnext;
			c->jnext = NULL;
			c->jlisted = false;
			s->n_jdirty--;
			chunk_put(s, c);
		}
	}
	store_ckpt_end(s, err);
}

/* Drops one of the checkpoint's pending steps; after the last, the
 * superblock write (or the end of a failed checkpoint). */
static void store_ckpt_put(struct zl_chunk_store *s)
{
	if (--s->ckpt_pending)
		return;
	if (s->ckpt_err) {
		store_ckpt_end(s, s->ckpt_err);
		return;
	}
	zl_jw_ckpt_commit(s->jw, s->ckpt_seq, store_ckpt_committed, s);
}

/* One chunk of a checkpoint: its metadata round (stage 1), then the
 * fdatasync that makes the round and every data write before it durable
 * (stage 2); then the chunk is done. */
static void store_ckpt_chunk_step(struct zl_chunk_store *s, struct chunk *c, int res)
{
	struct io_uring_sqe *sqe;

	if (res && !s->ckpt_err)
		s->ckpt_err = res;
	if (c->ckpt_stage == 1 && !res) {
		sqe = store_sqe(s);
		if (sqe) {
			c->ckpt_stage = 2;
			io_uring_prep_fsync(sqe, c->fd, IORING_FSYNC_DATASYNC);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | TAG_CKPT);
			s->st.durable_ios++;
			return;
		}
		if (!s->ckpt_err)
			s->ckpt_err = -ZL_ERR_BUSY;
	}
	c->ckpt_stage = 0;
	chunk_put(s, c); /* the checkpoint's */
	store_ckpt_put(s);
}

/* Moves the journal's checkpoint to the first record not yet applied: every
 * chunk changed since the last checkpoint gets its metadata round and an
 * fdatasync, then the superblock names the new checkpoint. */
static void store_ckpt_start(struct zl_chunk_store *s)
{
	uint64_t target;

	/* Fenced: the data dir is gone or read-only; checkpoints would only
	 * fail again (the daemon stops acknowledging and waits to be
	 * restarted with a data directory). */
	if (!s->jmode || s->ckpt_running || s->fence_err)
		return;
	if (!zl_jw_ckpt_target(s->jw, &target))
		return; /* ckpt_wanted stays: finishing ops try again */
	s->ckpt_wanted = false;
	s->ckpt_running = true;
	s->ckpt_seq = target;
	s->ckpt_err = 0;
	s->ckpt_pending = 1; /* this function's, dropped below */
	for (struct chunk *c = s->jdirty; c; c = c->jnext) {
		if (c->ckpt_stage)
			continue;
		c->refs++;
		s->ckpt_pending++;
		c->ckpt_stage = 1;
		if (!c->dirty_mask || !chunk_meta_kick(s, c)) {
			if (c->dirty_mask && !c->meta_inflight)
				s->ckpt_err = -ZL_ERR_BUSY;
			store_ckpt_chunk_step(s, c, 0);
		}
	}
	store_ckpt_put(s); /* this function's */
}

/* ---- replay (start-up, blocking) ----
 * The scan collects every entry after the checkpoint (where its CRCs and
 * inline data sit in the journal file); then, chunk by chunk, every block
 * gets the newest entry that really holds it: an INLINE entry's data (written
 * into the chunk file), a ZERO entry (punched), or an INPLACE entry whose
 * data the chunk file holds (its write was acknowledged after landing). An
 * INPLACE entry whose block does not hold its data was not acknowledged: the
 * entry before it decides the block. So an older INLINE entry never
 * overwrites a newer INPLACE block. */

struct rentry {
	uint64_t vol, chunk, seq, version;
	uint64_t crc_off, data_off; /* journal file offsets of its CRCs, inline data */
	uint64_t claim;		    /* the version its chunk may claim (claim_gap) */
	uint32_t off, len, flags, order;
	bool torn; /* INPLACE: a block it decided not to hold its data */
};

struct replay {
	struct zl_chunk_store *s;
	struct rentry *v;
	size_t n, cap;
};

static int replay_collect(void *arg, const struct zl_journal_rec *rec)
{
	struct replay *r = arg;
	struct zl_journal_entry e;
	size_t cur = 0;

	while (zl_journal_rec_next(rec, &cur, &e)) {
		struct rentry *x;

		if (r->n == r->cap) {
			size_t cap = r->cap ? 2 * r->cap : 1024;
			struct rentry *v = realloc(r->v, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			r->v = v;
			r->cap = cap;
		}
		x = &r->v[r->n];
		*x = (struct rentry){.vol = e.vol,
				     .chunk = e.chunk,
				     .seq = rec->seq,
				     .version = e.version,
				     .claim = e.claim_gap == ZL_JOURNAL_CLAIM_NONE
						  ? 0
						  : e.version - e.claim_gap,
				     .crc_off = rec->off + (uint64_t)(e.crc_le - rec->buf),
				     .data_off = e.data ? rec->off + (uint64_t)((const uint8_t *)e.data -
										rec->buf)
							: 0,
				     .off = e.offset,
				     .len = e.length,
				     .flags = e.flags,
				     .order = (uint32_t)r->n};
		r->n++;
	}
	return 0;
}

static int rentry_cmp(const void *a, const void *b)
{
	const struct rentry *x = a, *y = b;

	if (x->vol != y->vol)
		return x->vol < y->vol ? -1 : 1;
	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Applies entry x's undecided blocks to chunk c (see above). A torn
 * INPLACE entry (a block without its data: never acknowledged) caps the
 * chunk's version below its own in *cap, as chunk_durable_ver does at run
 * time: equal versions must mean equal data for recovery. *dec_ver: the
 * highest version of an entry that decided a block. */
static int replay_entry(struct zl_chunk_store *s, struct chunk *c, struct rentry *x,
			uint8_t *decided, uint32_t *crcs, uint64_t *cap, uint64_t *dec_ver)
{
	uint32_t b0 = x->off / BLK, nb = x->len / BLK;
	int rc = zl_jw_read(s->jw, crcs, (size_t)nb * 4, x->crc_off);

	for (uint32_t i = 0; !rc && i < nb;) {
		uint32_t j = i;

		if (decided[b0 + i]) {
			i++;
			continue;
		}
		if (x->flags & ZL_JOURNAL_ENT_INPLACE) {
			uint32_t want = zl_get_le32((const uint8_t *)&crcs[i]);

			if (pread(c->fd, s->replay_buf, BLK,
				  (off_t)(c->data_off + (uint64_t)(b0 + i) * BLK)) != (ssize_t)BLK) {
				rc = -EIO;
			} else if (zl_crc32c(s->replay_buf, BLK) == want) {
				chunk_set_crc(c, b0 + i, want, x->version);
				decided[b0 + i] = 1;
				*dec_ver = ZL_MAX(*dec_ver, x->version);
			} else {
				x->torn = true;
			}
			i++;
			continue;
		}
		while (j < nb && !decided[b0 + j])
			j++;
		if (x->flags & ZL_JOURNAL_ENT_INLINE) {
			rc = zl_jw_read(s->jw, s->replay_buf, (size_t)(j - i) * BLK,
					x->data_off + (uint64_t)i * BLK);
			if (!rc)
				rc = zl_pwrite_all(c->fd, s->replay_buf, (size_t)(j - i) * BLK,
						   c->data_off + (uint64_t)(b0 + i) * BLK);
		} else if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				     (off_t)(c->data_off + (uint64_t)(b0 + i) * BLK),
				     (off_t)(j - i) * BLK) < 0) {
			rc = -errno;
		}
		for (uint32_t k = i; !rc && k < j; k++) {
			chunk_set_crc(c, b0 + k,
				      x->flags & ZL_JOURNAL_ENT_ZERO
					  ? 0
					  : zl_get_le32((const uint8_t *)&crcs[k]),
				      x->version);
			decided[b0 + k] = 1;
			*dec_ver = ZL_MAX(*dec_ver, x->version);
		}
		i = j;
	}
	if (!rc && !x->torn)
		c->version = ZL_MAX(c->version, x->claim);
	else if (!rc && x->version)
		*cap = ZL_MIN(*cap, x->version - 1);
	return rc;
}

/* After replay chunk c holds the data of a write newer than the version it
 * may claim (a torn INPLACE write partly landed, or an entry journaled
 * ahead of an older write of the chunk that never was): no version names
 * that content, and a copy that really is at the lower version would tie
 * with it. Like an unclean start's roll-back, its version drops to 0 (a
 * peer's copy wins; every page is rewritten by the checkpoint's round). */
static void replay_inexact(struct zl_chunk_store *s, struct chunk *c, const char *vid,
			   uint64_t dec_ver)
{
	struct known *k = known_find(s, c->vol, c->idx);

	ZL_LOG_WARN("storage",
		    "journal replay: vol=%s chunk=%" PRIu64 " holds data of version %" PRIu64
		    " but may claim only %" PRIu64 " (a write ahead of one that did not land): "
		    "version dropped to 0, a peer's copy wins",
		    vid, c->idx, dec_ver, c->version);
	for (uint32_t p = 0; p < c->meta_pages; p++)
		c->page_ver[p] = 0;
	c->dirty_mask |= c->meta_pages >= 64 ? ~0ull : (1ull << c->meta_pages) - 1;
	c->version = 0;
	c->disk_ver = 0;
	if (k)
		k->version = 0;
	s->st.replay_inexact_chunks++;
}

/* The entries v[0..n) of one chunk, in journal order. A chunk whose file is
 * gone (removed since) or was created after an entry's record (birth) does
 * not get it. */
static int replay_chunk(struct zl_chunk_store *s, struct rentry *v, size_t n, uint32_t *crcs)
{
	char path[PATH_MAX], vid[ZL_VOL_ID_LEN + 1];
	uint8_t *decided = NULL;
	uint64_t cap = UINT64_MAX, dec_ver = 0;
	struct chunk *c;
	uint32_t cs;
	int rc = 0;

	if (store_path(s, v[0].vol, v[0].chunk, path, sizeof(path)))
		return 0;
	cs = chunk_file_size(path);
	if (!cs || chunk_get(s, v[0].vol, v[0].chunk, cs, &c))
		return 0; /* removed since (or unreadable: its reads say so) */
	zl_vol_id_format(v[0].vol, vid);
	decided = calloc(c->n_blocks, 1);
	if (!decided) {
		chunk_put(s, c);
		return -ENOMEM;
	}
	for (size_t i = n; i-- > 0 && !rc;) {
		struct rentry *x = &v[i];

		if (c->birth_nonce == (uint32_t)zl_jw_nonce(s->jw) && x->seq < c->birth_seq)
			continue;
		if (x->off % BLK || x->len % BLK || (uint64_t)x->off + x->len > cs) {
			ZL_LOG_ERR("storage",
				   "journal replay: vol=%s chunk=%" PRIu64 " entry offset=%u length=%u "
				   "does not fit the chunk (%u bytes) in whole blocks: skipped",
				   vid, x->chunk, x->off, x->len, cs);
			continue;
		}
		rc = replay_entry(s, c, x, decided, crcs, &cap, &dec_ver);
		if (!rc)
			chunk_jdirty(s, c, x->seq);
	}
	c->version = ZL_MIN(c->version, cap);
	if (!rc && dec_ver > c->version)
		replay_inexact(s, c, vid, dec_ver);
	if (rc)
		ZL_LOG_ERR("storage", "journal replay: vol=%s chunk=%" PRIu64 " cannot be written: %s",
			   vid, v[0].chunk, zl_strerror(rc));
	free(decided);
	chunk_put(s, c);
	return rc;
}

static int store_replay(struct zl_chunk_store *s)
{
	struct replay r = {.s = s};
	uint32_t *crcs = malloc(ZL_JOURNAL_IO_MAX / BLK * sizeof(uint32_t));
	int rc = crcs ? zl_jw_replay(s->jw, replay_collect, &r) : -ENOMEM;

	if (!rc && r.n)
		qsort(r.v, r.n, sizeof(*r.v), rentry_cmp);
	for (size_t i = 0, j; !rc && i < r.n; i = j) {
		for (j = i + 1; j < r.n && r.v[j].vol == r.v[i].vol && r.v[j].chunk == r.v[i].chunk;)
			j++;
		rc = replay_chunk(s, r.v + i, j - i, crcs);
	}
	free(crcs);
	free(r.v);
	return rc;
}

/* Opens the journal (a file left by an earlier run is replayed whatever the
 * write path is), replays it, makes what it applied durable (data, then the
 * metadata pages with the chunks' versions), and moves the checkpoint to its
 * end. Blocking: start-up. */
static int store_journal_open(struct zl_chunk_store *s, const struct zl_chunk_store_opts *o)
{
	struct zl_jw_opts jo = {.data_dir = o->data_dir,
				.size = o->journal_size ? o->journal_size : ZL_CHUNK_JOURNAL_DEFAULT,
				.create = o->journal,
				.loop = s->loop,
				.need_ckpt = store_jw_need_ckpt,
				.arg = s};
	int rc = zl_jw_open(&jo, &s->jw);

	if (rc || !s->jw)
		return rc;
	s->replay_buf = blk_alloc(ZL_JOURNAL_IO_MAX);
	if (!s->replay_buf)
		return -ENOMEM;
	rc = store_replay(s);
	while (!rc && s->jdirty) {
		struct chunk *c = s->jdirty;

		if (fdatasync(c->fd) < 0)
			rc = -errno;
		if (!rc)
			rc = chunk_meta_write_sync(c, c->dirty_mask, c->version);
		if (rc) {
			ZL_LOG_ERR("storage", "journal replay: cannot sync chunk %" PRIu64 ": %s",
				   c->idx, zl_strerror(rc));
			break;
		}
		c->dirty_mask = 0;
		c->disk_ver = c->version;
		s->jdirty = c->jnext;
		c->jnext = NULL;
		c->jlisted = false;
		c->jseq_max = 0;
		s->n_jdirty--;
		chunk_put(s, c);
	}
	free(s->replay_buf);
	s->replay_buf = NULL;
	if (!rc)
		rc = zl_jw_start(s->jw, o->journal);
	if (rc)
		return rc;
	s->jmode = o->journal;
	s->st.journal = s->jmode;
	return 0;
}

/* Journal mode, at close: checkpoints until the journal holds nothing the
 * chunk files lack (the next start replays nothing). */
static void store_journal_drain(struct zl_chunk_store *s, uint64_t deadline)
{
	while (s->jmode && zl_now_ms() < deadline) {
		uint64_t target;

		if (!s->ckpt_running && !zl_jw_busy(s->jw) && !s->n_jdirty &&
		    !zl_jw_ckpt_target(s->jw, &target))
			return;
		if (!s->ckpt_running)
			store_ckpt_start(s);
		zl_loop_run_once(s->loop, 100);
	}
	if (s->jmode)
		ZL_LOG_WARN("storage", "closing with journal records not checkpointed: the next "
				       "start replays them");
}

/* True when nothing of the store's state is still on its way to the disk. */
static bool store_quiet(const struct zl_chunk_store *s)
{
	if (!s->efd_added || s->ops.in_use)
		return false;
	for (uint32_t i = 0; i < STORE_BUCKETS; i++)
		for (const struct chunk *c = s->buckets[i]; c; c = c->hnext)
			if (c->meta_inflight || c->dirty_mask)
				return false;
	return true;
}

int zl_chunk_store_create(const struct zl_chunk_store_opts *opts, struct zl_chunk_store **out)
{
	struct zl_chunk_store *s;
	size_t n;
	int rc;

	if (!opts || !opts->data_dir || !opts->loop || !opts->buf_alloc || !opts->buf_free)
		return -ZL_ERR_INVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->free_est = UINT64_MAX;
	s->efd = -1;
	s->loop = opts->loop;
	{
		static const uint8_t zero[BLK];

		s->zero_crc = zl_crc32c(zero, BLK);
	}
	zl_slab_init(&s->ops, sizeof(struct chunk_op), STORE_OP_SLAB);
	/* Grown here: a flush takes its records without allocating. */
	zl_slab_init(&s->fsyncs, sizeof(struct flush_sync), STORE_FSYNC_SLAB);
	zl_slab_free(&s->fsyncs, zl_slab_alloc(&s->fsyncs));
	zl_slab_init(&s->opens, sizeof(struct chunk_open), STORE_OPEN_SLAB);
	zl_slab_free(&s->opens, zl_slab_alloc(&s->opens));
	s->max_open = opts->max_open ? opts->max_open : 1024;
	s->buf_alloc = opts->buf_alloc;
	s->buf_free = opts->buf_free;
	s->buf_arg = opts->buf_arg;
	s->direct = true;
	s->st.direct_io = true;
	n = strlen(opts->data_dir) + sizeof("/chunks");
	s->dir = malloc(n);
	if (!s->dir) {
		rc = -ENOMEM;
		goto out_free;
	}
	snprintf(s->dir, n, "%s/chunks", opts->data_dir);
	if (mkdir(s->dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		ZL_LOG_ERR("storage", "cannot create %s: %s (check the data dir's permissions)",
			   s->dir, strerror(-rc));
		goto out_free;
	}
	rc = zl_storage_uring_init(&s->ring, opts->ring_entries ? opts->ring_entries : 512,
				   8 * (opts->ring_entries ? opts->ring_entries : 512));
	if (rc < 0) {
		ZL_LOG_ERR("storage",
			   "io_uring setup failed: %s (kernel >= 5.6 with io_uring "
			   "enabled is required; check memlock limits)",
			   strerror(-rc));
		goto out_free;
	}
	s->ring_ok = true;
	/* Logged; files left over are converted when first opened. */
	(void)store_convert_all(s);
	store_known_scan(s);
	store_dio_settle_all(s);
	rc = store_journal_open(s, opts);
	if (rc)
		goto out_free;
	if (!store_clean_take(s))
		store_unclean_scan(s);
	rc = zl_storage_uring_efd(&s->ring, s->loop, &s->efd_h, &s->efd, store_efd_cb, s);
	if (rc)
		goto out_free;
	s->efd_added = true;
	zl_loop_add_poller(s->loop, &s->poller, store_poll, s);
	for (uint32_t i = 0; i < STORE_OPEN_WORKERS; i++) {
		rc = zl_worker_create(s->loop, &s->open_wk[i]);
		if (rc) {
			ZL_LOG_ERR("storage", "cannot start the chunk open threads: %s",
				   zl_errname(rc));
			goto out_free;
		}
	}
	rc = zl_chunk_snap_create(s, &s->snap);
	if (rc)
		goto out_free;
	trash_open(s);
	if (s->jmode)
		zl_timer_start(s->loop, &s->ckpt_t, STORE_CKPT_MS, STORE_CKPT_MS,
			       store_ckpt_timer_cb, s);
	*out = s;
	return 0;

out_free:
	zl_chunk_store_destroy(s);
	return rc;
}

uint32_t zl_chunk_store_inflight(const struct zl_chunk_store *s)
{
	return s->ops.in_use + s->n_vol_dels;
}

void zl_chunk_store_stats(const struct zl_chunk_store *s, struct zl_chunk_store_stats *st)
{
	*st = s->st;
	st->open_chunks = s->n_open;
	st->inflight = s->ops.in_use;
	st->open_jobs = 0;
	for (uint32_t i = 0; i < STORE_OPEN_WORKERS; i++)
		st->open_jobs += s->open_wk_jobs[i];
	st->vol_removals = s->n_vol_dels;
	if (s->jw) {
		zl_jw_stats(s->jw, &st->jw);
		st->durable_ios += st->jw.records + st->jw.pads + st->jw.sb_writes;
	}
	st->journal_dirty_chunks = s->n_jdirty;
	zl_storage_uring_use(&s->ring, &st->uring);
}

void zl_chunk_store_drain(struct zl_chunk_store *s)
{
	uint64_t deadline;

	if (!s || !s->efd_added)
		return;
	deadline = zl_now_ms() + STORE_DRAIN_MS;
	/* Clones end in writes (the ones that waited for them): first. */
	zl_chunk_snap_drain(s->snap, deadline);
	while ((s->ops.in_use || s->n_vol_dels) && zl_now_ms() < deadline)
		zl_loop_run_once(s->loop, 100);
	/* Metadata rounds may still be in flight without an op waiting, also
	 * on chunks already deleted (detached, freed by the round's end): wait
	 * for every one. */
	while (s->st.meta_rounds != s->st.meta_rounds_done && zl_now_ms() < deadline)
		zl_loop_run_once(s->loop, 100);
	/* Fenced: its checkpoints would write to a dir that is gone or
	 * read-only, retried until the deadline; nothing there is kept. */
	if (!s->ops.in_use && !s->fence_err)
		store_journal_drain(s, deadline);
}

void zl_chunk_store_destroy(struct zl_chunk_store *s)
{
	uint64_t deadline;
	bool quiet = false;

	if (!s)
		return;
	zl_chunk_store_drain(s);
	if (s->efd_added) {
		deadline = zl_now_ms() + STORE_DRAIN_MS;
		while (s->ops.in_use && zl_now_ms() < deadline)
			zl_loop_run_once(s->loop, 100);
		if (s->ops.in_use)
			ZL_LOG_WARN("storage",
				    "closing the chunk store with %u operations in flight",
				    s->ops.in_use);
		/* Metadata rounds may still be in flight without an op waiting,
		 * also on chunks already deleted (detached, freed by the
		 * round's end): wait for every one. */
		while (s->st.meta_rounds != s->st.meta_rounds_done && zl_now_ms() < deadline)
			zl_loop_run_once(s->loop, 100);
		if (s->st.meta_rounds != s->st.meta_rounds_done)
			ZL_LOG_WARN("storage",
				    "closing the chunk store with %" PRIu64 " metadata rounds in flight",
				    s->st.meta_rounds - s->st.meta_rounds_done);
		if (!s->ops.in_use && !s->fence_err)
			store_journal_drain(s, deadline);
		if (s->jmode) {
			zl_timer_stop(s->loop, &s->ckpt_t);
			zl_timer_stop(s->loop, &s->idle_t);
		}
		zl_loop_defer_cancel(s->loop, &s->ckpt_d);
		/* Opens still in flight (a stuck disk) are dropped when their
		 * worker stops (waits for the one running). */
		s->closing = true;
		for (uint32_t i = 0; i < STORE_OPEN_WORKERS; i++)
			zl_worker_destroy(s->open_wk[i]);
		zl_chunk_snap_destroy(s->snap);
		s->snap = NULL;
		zl_loop_del_poller(s->loop, &s->poller);
		zl_loop_del(s->loop, &s->efd_h);
		quiet = store_quiet(s);
	}
	/* Deleted chunks kept only by the dirty list are not in the table. */
	for (struct chunk *c = s->jdirty, *next; c; c = next) {
		next = c->jnext;
		if (c->deleted)
			chunk_free(s, c);
	}
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		while (s->buckets[i]) {
			struct chunk *c = s->buckets[i];

			s->buckets[i] = c->hnext;
			chunk_free(s, c);
		}
	}
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		while (s->known[i]) {
			struct known *k = s->known[i];

			s->known[i] = k->next;
			known_free(s, k);
		}
	}
	/* Dirty chunks hold a reference; the table above freed them. */
	quiet = quiet && !s->fence_err && (!s->jw || (!s->n_jdirty && !zl_jw_busy(s->jw)));
	zl_jw_close(s->jw);
	if (quiet)
		store_clean_put(s); /* after the files are closed */
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	if (s->efd >= 0)
		close(s->efd);
	zl_slab_fini(&s->ops);
	zl_slab_fini(&s->fsyncs);
	zl_slab_fini(&s->opens);
	free(s->dir);
	free(s);
}

void zl_chunk_store_fence(struct zl_chunk_store *s, const char *why)
{
	if (!s || s->fence_err)
		return;
	s->fence_err = -ZL_ERR_IO;
	ZL_LOG_ERR("storage",
		   "%s: no longer acknowledging writes (every read, write and zeroing fails "
		   "from now on; its replicas are moved out and rebuilt elsewhere); restart "
		   "the daemon with a data directory (a new one is refilled by the cluster)",
		   why);
	if (s->jw)
		zl_jw_fence(s->jw, s->fence_err);
}

bool zl_chunk_store_fenced(const struct zl_chunk_store *s)
{
	return s && s->fence_err;
}

/* ---- for storage_snap.c (storage_chunk_internal.h) ---- */

int zl_chunk_write_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			uint32_t off, uint32_t len, const void *data, const uint32_t *crcs,
			uint64_t version, uint32_t wseq, bool no_new, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_WRITE, vol, chunk, chunk_size, off, len, data, NULL, NULL,
			    off % BLK || len % BLK ? NULL : crcs, NULL, no_new ? OPF_NO_NEW : 0,
			    version, wseq, cb, arg);
}

int zl_chunk_zero_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t off, uint32_t len, uint64_t version, uint32_t wseq, bool no_new,
		       zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_ZERO, vol, chunk, chunk_size, off, len, NULL, NULL, NULL, NULL,
			    NULL, no_new ? OPF_NO_NEW : 0, version, wseq, cb, arg);
}

void zl_chunk_store_refused_room(struct zl_chunk_store *s)
{
	s->st.full_refused++;
}

int zl_chunk_wseq(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t *wseq, uint64_t *version)
{
	return chunk_state(s, vol, chunk, chunk_size, wseq, version);
}

const char *zl_chunk_store_dir(const struct zl_chunk_store *s)
{
	return s->dir;
}

struct zl_loop *zl_chunk_store_loop(const struct zl_chunk_store *s)
{
	return s->loop;
}

struct zl_chunk_snap *zl_chunk_store_snap(const struct zl_chunk_store *s)
{
	return s->snap;
}

void zl_chunk_store_birth(const struct zl_chunk_store *s, uint64_t *seq, uint32_t *nonce)
{
	*seq = s->jmode ? zl_jw_next_seq(s->jw) : 0;
	*nonce = s->jmode ? (uint32_t)zl_jw_nonce(s->jw) : 0;
}

int zl_chunk_clone_file_write(const char *chunks_dir, uint64_t vol, uint64_t id,
			      uint32_t chunk_size, uint32_t lo, uint32_t hi, uint64_t version,
			      uint64_t birth_seq, uint32_t birth_nonce, const uint8_t *data)
{
	char vid[ZL_VOL_ID_LEN + 1], dir[PATH_MAX], path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	struct chunk geo = {.n_blocks = chunk_size / BLK};
	uint32_t pages = zl_chunk_meta_pages(chunk_size);
	uint64_t data_off = zl_chunk_data_off(chunk_size);
	uint8_t *pg = blk_alloc(BLK);
	int fd = -1, rc = 0;

	geo.crc = calloc(geo.n_blocks, sizeof(uint32_t));
	geo.prev = calloc(geo.n_blocks, sizeof(uint32_t));
	if (!pg || !geo.crc || !geo.prev) {
		rc = -ENOMEM;
		goto out_free;
	}
	zl_vol_id_format(vol, vid);
	snprintf(dir, sizeof(dir), "%s/%s", chunks_dir, vid);
	snprintf(path, sizeof(path), "%s/%016" PRIx64 ".zlc", dir, id);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (mkdir(dir, 0755) == 0) {
		rc = zl_fsync_dir(chunks_dir);
		if (rc)
			goto out_free;
	} else if (errno != EEXIST) {
		rc = -errno;
		goto out_free;
	}
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out_free;
	}
	if (ftruncate(fd, (off_t)(data_off + chunk_size)) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	chunk_hdr_encode(pg, vol, id, chunk_size, birth_seq, birth_nonce);
	memcpy(pg + ZL_CHUNK_CLONE_EXT_OFF, "ZLCL", 4);
	zl_put_le32(pg + ZL_CHUNK_CLONE_EXT_OFF + 4, lo);
	zl_put_le32(pg + ZL_CHUNK_CLONE_EXT_OFF + 8, hi);
	zl_put_le32(pg + ZL_CHUNK_CLONE_EXT_OFF + 12, zl_crc32c(pg + ZL_CHUNK_CLONE_EXT_OFF, 12));
	rc = zl_pwrite_all(fd, pg, BLK, 0);
	/* Data first (holes stay holes), then the pages that describe it:
	 * nothing is visible before the rename anyway. */
	for (uint32_t b = 0; !rc && b < geo.n_blocks; b++) {
		const uint8_t *p = data + (size_t)b * BLK;
		uint32_t n = 0;

		if (block_is_zero(p))
			continue;
		while (b + n < geo.n_blocks && !block_is_zero(p + (size_t)n * BLK)) {
			geo.crc[b + n] = zl_crc32c(p + (size_t)n * BLK, BLK);
			n++;
		}
		rc = zl_pwrite_all(fd, p, (size_t)n * BLK, data_off + (uint64_t)b * BLK);
		b += n - 1;
	}
	for (uint32_t p = 0; !rc && p < pages; p++) {
		meta_page_encode(&geo, p, 1, version, pg);
		rc = zl_pwrite_all(fd, pg, BLK, zl_chunk_slot_off(p, 0));
	}
	if (rc)
		goto out_unlink;
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	close(fd);
	fd = -1;
	rc = zl_fsync_dir(dir);
	goto out_free;

out_unlink:
	unlink(tmp);
out_free:
	if (fd >= 0)
		close(fd);
	free(geo.prev);
	free(geo.crc);
	free(pg);
	return rc;
}

int zl_chunk_clone_file_range(const char *path, uint32_t *lo, uint32_t *hi)
{
	uint8_t hdr[ZL_CHUNK_CLONE_EXT_OFF + 16];
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	const uint8_t *x = hdr + ZL_CHUNK_CLONE_EXT_OFF;

	if (fd < 0)
		return -errno;
	if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
		rc = -ZL_ERR_CORRUPT;
	else if (memcmp(hdr, CHUNK_MAGIC, 8) || memcmp(x, "ZLCL", 4) ||
		 zl_get_le32(x + 12) != zl_crc32c(x, 12))
		rc = -ZL_ERR_CORRUPT;
	close(fd);
	if (rc)
		return rc;
	*lo = zl_get_le32(x + 4);
	*hi = zl_get_le32(x + 8);
	return *lo < *hi ? 0 : -ZL_ERR_CORRUPT;
}

int zl_chunk_clone_file_mark(const char *path, uint32_t lo, uint32_t hi)
{
	uint8_t x[16];
	int fd = open(path, O_WRONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -errno;
	memcpy(x, "ZLCL", 4);
	zl_put_le32(x + 4, lo);
	zl_put_le32(x + 8, hi);
	zl_put_le32(x + 12, zl_crc32c(x, 12));
	rc = zl_pwrite_all(fd, x, sizeof(x), ZL_CHUNK_CLONE_EXT_OFF);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

void zl_chunk_clone_adopt(struct zl_chunk_store *s, uint64_t vol, uint64_t id)
{
	known_note(s, vol, id, 0);
}

void zl_chunk_forget(struct zl_chunk_store *s, uint64_t vol, uint64_t id)
{
	struct chunk *c = chunk_lookup(s, vol, id);

	if (c)
		chunk_detach(s, c);
	open_mark_deleted(s, vol, id);
	known_drop(s, vol, id);
}
