/* Clone chunks: copy-on-write for snapshots (docs/SNAPSHOTS.md §2, the
 * contract in storage_chunk.h "snapshots").
 *
 * The loop thread decides, orders and answers; a helper thread (zl_worker)
 * does the blocking file work (writing a clone file through tmp + fsync +
 * rename + directory fsync, unlinking collected clones) and hands each job
 * back to the loop. A clone is taken in one of SNAP_SLOTS
 * slots: the chunk is read through the store (whole-chunk reads, ordered
 * after every operation of the chunk submitted before), the helper writes
 * it, then the writes that waited for it are applied in order. A slot's
 * buffer is allocated at its first clone and kept (grown for a larger
 * chunk size): nothing is allocated per write.
 *
 * The index (vol, chunk) -> its clones (lo, hi], ascending hi, is built at
 * start-up from the clone files' headers and kept in memory.
 *
 * Space (docs/SNAPSHOTS.md §6): each clone carries the bytes its file
 * allocates (st_blocks * 512, measured by the helper thread once the file
 * is written or installed, and at start-up) and the snapshot it counts for,
 * its owner: the newest existing snapshot in (lo, hi]. A sorted table
 * (vol, owner) -> clones, bytes is kept with the index, so the status
 * record reads it without touching a file. Owners change only when a
 * snapshot is deleted: collection re-evaluates them. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/common.h"
#include "lib/common/log.h"
#include "lib/common/worker.h"
#include "storage_chunk_internal.h"

#define SNAP_SLOTS    4u
#define SNAP_BUCKETS  1024u
#define SNAP_READ_MAX (4u << 20) /* one store read (ZL_WIRE_MAX_IO) */

/* One clone of a chunk. */
struct snap_clone {
	uint32_t lo, hi;
	uint32_t owner; /* the snapshot it counts for (hi until collection says) */
	uint64_t bytes; /* allocated by its file */
};

/* One chunk's clones. */
struct snap_node {
	struct snap_node *next;
	uint64_t vol, chunk;
	uint32_t n, cap;
	struct snap_clone *v; /* ascending hi */
};

/* States of a slot: free (!busy); reading (reads_left > 0); writing (job
 * with the helper); then it applies its queue and is free again. */
struct snap_slot {
	struct zl_work work; /* the helper's part: write the clone file */
	int work_err;
	struct zl_chunk_snap *sn;
	bool busy;
	uint64_t vol, chunk;
	uint32_t cs, lo, hi, owner;
	uint64_t bytes; /* the written file's allocation (helper thread) */
	uint8_t *buf;
	uint32_t buf_len;
	uint32_t reads_left;
	int err;
	uint64_t version, birth_seq;
	uint32_t birth_nonce;
	struct zl_defer defer;
	/* The write that started the clone, then the chunk's later ones. */
	struct zl_chunk_cow *q_first, *q_last;
};

struct snap_gc {
	struct zl_work work; /* the helper's part: unlink the files */
	int err;
	struct zl_chunk_snap *sn;
	uint64_t vol;
	uint32_t n;
	uint64_t *ids;
	zl_chunk_cb cb;
	void *arg;
};

/* A clone chunk copied by recovery, being marked as one. */
struct snap_inst {
	struct zl_work work; /* the helper's part: write the clone extension */
	int err;
	struct zl_chunk_snap *sn;
	uint64_t vol, id;
	uint32_t lo;
	uint64_t bytes; /* the file's allocation (helper thread) */
	zl_chunk_cb cb;
	void *arg;
};

struct zl_chunk_snap {
	struct zl_chunk_store *s;
	struct zl_loop *loop;
	const char *dir;
	struct snap_node *b[SNAP_BUCKETS];
	struct snap_slot slots[SNAP_SLOTS];
	/* Writes that need a clone while every slot is busy, and writes of
	 * their chunks behind them: in arrival order. */
	struct zl_chunk_cow *wait_first, *wait_last;
	uint32_t busy; /* slots busy + collections with the helper */
	/* Space: (vol, seq = owner) ascending, an entry per pair with clones. */
	struct zl_chunk_snap_space *sp;
	uint32_t n_sp, cap_sp;
	uint64_t sp_total;
	bool closing;  /* destroy: what is still queued fails */
	struct zl_worker *wk;
};

static void snap_cow_queue_drain(struct zl_chunk_snap *sn, struct zl_chunk_cow *first);
static void snap_wait_kick(struct zl_chunk_snap *sn);
static void snap_clone_written(struct zl_work *w);

/* ---- index ---- */

static uint32_t snap_bucket(uint64_t vol, uint64_t chunk)
{
	return (uint32_t)((vol * 0x9e3779b97f4a7c15ull) ^ (chunk * 0xc2b2ae3d27d4eb4full)) %
	       SNAP_BUCKETS;
}

static struct snap_node *snap_node_find(struct zl_chunk_snap *sn, uint64_t vol, uint64_t chunk)
{
	for (struct snap_node *x = sn->b[snap_bucket(vol, chunk)]; x; x = x->next)
		if (x->vol == vol && x->chunk == chunk)
			return x;
	return NULL;
}

/* ---- space ---- */

/* The index of (vol, seq) in the space table, or where it goes. */
static uint32_t snap_space_find(const struct zl_chunk_snap *sn, uint64_t vol, uint32_t seq)
{
	uint32_t a = 0, b = sn->n_sp;

	while (a < b) {
		uint32_t m = a + (b - a) / 2;
		const struct zl_chunk_snap_space *e = &sn->sp[m];

		if (e->vol < vol || (e->vol == vol && e->seq < seq))
			a = m + 1;
		else
			b = m;
	}
	return a;
}

/* One clone of bytes more for (vol, seq). 0 or -ENOMEM (nothing changed). */
static int snap_space_add(struct zl_chunk_snap *sn, uint64_t vol, uint32_t seq, uint64_t bytes)
{
	uint32_t i = snap_space_find(sn, vol, seq);
	struct zl_chunk_snap_space *e = i < sn->n_sp ? &sn->sp[i] : NULL;

	if (!e || e->vol != vol || e->seq != seq) {
		if (sn->n_sp == sn->cap_sp) {
			uint32_t cap = sn->cap_sp ? 2 * sn->cap_sp : 16;
			void *p = realloc(sn->sp, cap * sizeof(*sn->sp));

			if (!p)
				return -ENOMEM;
			sn->sp = p;
			sn->cap_sp = cap;
		}
		e = &sn->sp[i];
		memmove(e + 1, e, (sn->n_sp - i) * sizeof(*e));
		*e = (struct zl_chunk_snap_space){.vol = vol, .seq = seq};
		sn->n_sp++;
	}
	e->clones++;
	e->bytes += bytes;
	sn->sp_total += bytes;
	return 0;
}

/* One clone of bytes less for (vol, seq): the entry goes with its last. */
static void snap_space_sub(struct zl_chunk_snap *sn, uint64_t vol, uint32_t seq, uint64_t bytes)
{
	uint32_t i = snap_space_find(sn, vol, seq);
	struct zl_chunk_snap_space *e = i < sn->n_sp ? &sn->sp[i] : NULL;

	if (!e || e->vol != vol || e->seq != seq)
		return;
	e->bytes -= ZL_MIN(bytes, e->bytes);
	sn->sp_total -= ZL_MIN(bytes, sn->sp_total);
	if (--e->clones)
		return;
	memmove(e, e + 1, (sn->n_sp - i - 1) * sizeof(*e));
	sn->n_sp--;
}

/* What a clone file allocates on disk (0 when it cannot be read). Helper
 * thread or start-up only: a stat. */
static uint64_t snap_file_bytes(const char *path)
{
	struct stat stb;

	return stat(path, &stb) ? 0 : (uint64_t)stb.st_blocks * 512;
}

static void snap_clone_path(const struct zl_chunk_snap *sn, uint64_t vol, uint64_t id, char *path,
			    size_t len)
{
	char vid[ZL_VOL_ID_LEN + 1];

	zl_vol_id_format(vol, vid);
	snprintf(path, len, "%s/%s/%016" PRIx64 ".zlc", sn->dir, vid, id);
}

/* ---- index ---- */

static int snap_index_add(struct zl_chunk_snap *sn, uint64_t vol, uint64_t chunk, uint32_t lo,
			  uint32_t hi, uint32_t owner, uint64_t bytes)
{
	struct snap_node *x = snap_node_find(sn, vol, chunk);
	uint32_t i;
	int rc;

	if (!x) {
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM;
		x->vol = vol;
		x->chunk = chunk;
		x->next = sn->b[snap_bucket(vol, chunk)];
		sn->b[snap_bucket(vol, chunk)] = x;
	}
	for (i = 0; i < x->n && x->v[i].hi < hi; i++)
		;
	if (i < x->n && x->v[i].hi == hi)
		return 0;
	if (x->n == x->cap) {
		uint32_t cap = x->cap ? 2 * x->cap : 4;
		struct snap_clone *v = realloc(x->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		x->v = v;
		x->cap = cap;
	}
	rc = snap_space_add(sn, vol, owner, bytes);
	if (rc)
		return rc;
	if (i < x->n)
		memmove(x->v + i + 1, x->v + i, (x->n - i) * sizeof(*x->v));
	x->v[i] = (struct snap_clone){.lo = lo, .hi = hi, .owner = owner, .bytes = bytes};
	x->n++;
	return 0;
}

static void snap_node_unlink(struct zl_chunk_snap *sn, struct snap_node *x)
{
	struct snap_node **pp = &sn->b[snap_bucket(x->vol, x->chunk)];

	while (*pp != x)
		pp = &(*pp)->next;
	*pp = x->next;
	free(x->v);
	free(x);
}

/* The newest snapshot of snaps[0 .. n) (ascending) in (lo, hi], 0 if none. */
static uint32_t snap_newest_in(const uint32_t *snaps, uint32_t n, uint32_t lo, uint32_t hi)
{
	uint32_t s = 0;

	for (uint32_t i = 0; i < n; i++)
		if (snaps[i] > lo && snaps[i] <= hi)
			s = snaps[i];
	return s;
}

/* ---- helper thread parts (zl_worker) ---- */

static void snap_clone_write_run(struct zl_work *w)
{
	struct snap_slot *sl = ZL_CONTAINER_OF(w, struct snap_slot, work);

	uint64_t id = zl_chunk_clone_id(sl->chunk, sl->hi);
	char path[PATH_MAX];

	sl->work_err =
	    zl_chunk_clone_file_write(sl->sn->dir, sl->vol, id, sl->cs, sl->lo, sl->hi, sl->version,
				      sl->birth_seq, sl->birth_nonce, sl->buf);
	snap_clone_path(sl->sn, sl->vol, id, path, sizeof(path));
	sl->bytes = sl->work_err ? 0 : snap_file_bytes(path);
}

static void snap_gc_run(struct zl_work *w)
{
	struct snap_gc *g = ZL_CONTAINER_OF(w, struct snap_gc, work);
	char path[PATH_MAX];

	for (uint32_t i = 0; i < g->n; i++) {
		snap_clone_path(g->sn, g->vol, g->ids[i], path, sizeof(path));
		if (unlink(path) < 0 && errno != ENOENT && !g->err)
			g->err = -errno;
	}
}

static void snap_gc_done(struct zl_work *w)
{
	struct snap_gc *g = ZL_CONTAINER_OF(w, struct snap_gc, work);

	g->sn->busy--;
	g->cb(g->arg, w->cancelled ? -ECANCELED : g->err);
	free(g->ids);
	free(g);
}

static void snap_inst_run(struct zl_work *w)
{
	struct snap_inst *in = ZL_CONTAINER_OF(w, struct snap_inst, work);
	char path[PATH_MAX];

	snap_clone_path(in->sn, in->vol, in->id, path, sizeof(path));
	in->err = zl_chunk_clone_file_mark(path, in->lo, (uint32_t)(in->id >> ZL_CHUNK_IDX_BITS));
	in->bytes = in->err ? 0 : snap_file_bytes(path);
}

static void snap_inst_done(struct zl_work *w)
{
	struct snap_inst *in = ZL_CONTAINER_OF(w, struct snap_inst, work);
	struct zl_chunk_snap *sn = in->sn;
	int err = w->cancelled ? -ECANCELED : in->err;

	/* Its owner is hi until the volume's next collection says. */
	if (!err)
		err = snap_index_add(sn, in->vol, zl_chunk_id_base(in->id), in->lo,
				     (uint32_t)(in->id >> ZL_CHUNK_IDX_BITS),
				     (uint32_t)(in->id >> ZL_CHUNK_IDX_BITS), in->bytes);
	sn->busy--;
	in->cb(in->arg, err);
	free(in);
}

/* ---- clones ---- */

static void snap_q_add(struct zl_chunk_cow **first, struct zl_chunk_cow **last,
		       struct zl_chunk_cow *w)
{
	w->next = NULL;
	if (*last)
		(*last)->next = w;
	else
		*first = w;
	*last = w;
}

static struct snap_slot *snap_slot_of(struct zl_chunk_snap *sn, uint64_t vol, uint64_t chunk)
{
	for (uint32_t i = 0; i < SNAP_SLOTS; i++)
		if (sn->slots[i].busy && sn->slots[i].vol == vol && sn->slots[i].chunk == chunk)
			return &sn->slots[i];
	return NULL;
}

/* The slot's clone ended (err says how): its writes go on, or fail. */
static void snap_slot_end(struct snap_slot *sl)
{
	struct zl_chunk_snap *sn = sl->sn;
	struct zl_chunk_cow *q = sl->q_first;
	int err = sl->err;

	sl->q_first = sl->q_last = NULL;
	sl->busy = false;
	sn->busy--;
	if (err) {
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(sl->vol, vid);
		ZL_LOG_ERR("storage",
			   "snapshot copy failed: vol=%s chunk=%" PRIu64 " seq=(%u,%u] err=%s; "
			   "the writes that needed it fail (check the data disk)",
			   vid, sl->chunk, sl->lo, sl->hi, zl_errname(err));
		while (q) {
			struct zl_chunk_cow *n = q->next;

			q->cb(q->arg, err);
			q = n;
		}
	} else {
		snap_cow_queue_drain(sn, q);
	}
	snap_wait_kick(sn);
}

static void snap_slot_fail_cb(void *arg)
{
	snap_slot_end(arg);
}

static void snap_clone_read_done(void *arg, int status)
{
	struct snap_slot *sl = arg;
	struct zl_chunk_snap *sn = sl->sn;
	uint32_t wseq;
	int rc;

	if (status && !sl->err)
		sl->err = status;
	if (--sl->reads_left)
		return;
	if (sl->err) {
		snap_slot_end(sl);
		return;
	}
	rc = zl_chunk_vol_gone(sn->s, sl->vol) ? -ZL_ERR_NOT_FOUND
					       : zl_chunk_wseq(sn->s, sl->vol, sl->chunk, sl->cs, &wseq,
							       &sl->version);
	if (rc) {
		sl->err = rc;
		snap_slot_end(sl);
		return;
	}
	zl_chunk_store_birth(sn->s, &sl->birth_seq, &sl->birth_nonce);
	rc = zl_worker_submit(sn->wk, &sl->work, snap_clone_write_run, snap_clone_written);
	if (rc) {
		sl->err = rc;
		snap_slot_end(sl);
	}
}

/* Starts the clone (lo, w->seq] of w's chunk in sl, w first in its queue. */
static void snap_clone_start(struct zl_chunk_snap *sn, struct snap_slot *sl, struct zl_chunk_cow *w,
			     uint32_t lo, uint32_t owner)
{
	sl->busy = true;
	sn->busy++;
	sl->vol = w->vol;
	sl->chunk = w->chunk;
	sl->cs = w->chunk_size;
	sl->lo = lo;
	sl->hi = w->seq;
	sl->owner = owner;
	sl->bytes = 0;
	sl->err = 0;
	sl->q_first = sl->q_last = NULL;
	snap_q_add(&sl->q_first, &sl->q_last, w);
	if (sl->buf_len < sl->cs) {
		void *p = NULL;

		free(sl->buf);
		sl->buf = NULL;
		sl->buf_len = 0;
		if (posix_memalign(&p, 4096, sl->cs)) {
			sl->err = -ENOMEM;
			zl_loop_defer(sn->loop, &sl->defer, snap_slot_fail_cb, sl);
			return;
		}
		sl->buf = p;
		sl->buf_len = sl->cs;
	}
	/* Every piece is submitted before any completes (callbacks never run
	 * inside the call), so reads_left cannot reach 0 early. */
	sl->reads_left = 1;
	for (uint32_t off = 0; off < sl->cs; off += SNAP_READ_MAX) {
		uint32_t len = ZL_MIN(SNAP_READ_MAX, sl->cs - off);
		int rc = zl_chunk_read(sn->s, sl->vol, sl->chunk, sl->cs, off, len, sl->buf + off,
				       snap_clone_read_done, sl);

		if (rc) {
			sl->err = rc;
			break;
		}
		sl->reads_left++;
	}
	if (--sl->reads_left == 0)
		zl_loop_defer(sn->loop, &sl->defer, snap_slot_fail_cb, sl);
}

static bool snap_waiting_for(const struct zl_chunk_snap *sn, uint64_t vol, uint64_t chunk)
{
	for (const struct zl_chunk_cow *w = sn->wait_first; w; w = w->next)
		if (w->vol == vol && w->chunk == chunk)
			return true;
	return false;
}

/* Decides what w needs and starts it. queued: w comes from a queue (a
 * slot's or the wait list), so it is answered through cb, and a wait for a
 * slot puts it back at the head of the wait list. Returns 0 or (only when
 * !queued) the error for the caller. */
static int snap_cow_process(struct zl_chunk_snap *sn, struct zl_chunk_cow *w, bool queued)
{
	struct snap_slot *sl = snap_slot_of(sn, w->vol, w->chunk);
	struct snap_node *x;
	uint32_t wseq, owner;
	uint64_t ver;
	int rc;

	if (sn->closing) {
		rc = -ECANCELED;
		goto fail;
	}
	if (sl) {
		snap_q_add(&sl->q_first, &sl->q_last, w);
		return 0;
	}
	if (!queued && snap_waiting_for(sn, w->vol, w->chunk)) {
		snap_q_add(&sn->wait_first, &sn->wait_last, w);
		return 0;
	}
	rc = zl_chunk_wseq(sn->s, w->vol, w->chunk, w->chunk_size, &wseq, &ver);
	if (rc)
		goto fail;
	/* After a crash the pages may be behind the clones taken. */
	x = snap_node_find(sn, w->vol, w->chunk);
	if (x && x->n)
		wseq = ZL_MAX(wseq, x->v[x->n - 1].hi);
	if (w->seq < wseq) {
		rc = -ZL_ERR_STALE;
		goto fail;
	}
	owner = snap_newest_in(w->snaps, w->n_snaps, wseq, w->seq);
	/* The copy takes new space. */
	if (owner && w->no_new) {
		zl_chunk_store_refused_room(sn->s);
		rc = -ZL_ERR_NOSPC;
		goto fail;
	}
	if (owner) {
		for (uint32_t i = 0; i < SNAP_SLOTS && !sl; i++)
			if (!sn->slots[i].busy)
				sl = &sn->slots[i];
		if (!sl) {
			if (queued) {
				w->next = sn->wait_first;
				sn->wait_first = w;
				if (!sn->wait_last)
					sn->wait_last = w;
			} else {
				snap_q_add(&sn->wait_first, &sn->wait_last, w);
			}
			return 0;
		}
		snap_clone_start(sn, sl, w, wseq, owner);
		return 0;
	}
	if (w->zero)
		rc = zl_chunk_zero_wseq(sn->s, w->vol, w->chunk, w->chunk_size, w->off, w->len,
					w->version, w->seq, w->no_new, w->cb, w->arg);
	else
		rc = zl_chunk_write_wseq(sn->s, w->vol, w->chunk, w->chunk_size, w->off, w->len,
					 w->data, w->crcs, w->version, w->seq, w->no_new, w->cb,
					 w->arg);
	if (rc)
		goto fail;
	return 0;
fail:
	if (!queued)
		return rc;
	w->cb(w->arg, rc);
	return 0;
}

/* Applies a slot's queue in order (a write may start another clone: the
 * rest then queue behind it). */
static void snap_cow_queue_drain(struct zl_chunk_snap *sn, struct zl_chunk_cow *first)
{
	while (first) {
		struct zl_chunk_cow *n = first->next;

		snap_cow_process(sn, first, true);
		first = n;
	}
}

/* Slots freed: the writes waiting for one go on, in order, until one has
 * to wait again. */
static void snap_wait_kick(struct zl_chunk_snap *sn)
{
	while (sn->wait_first) {
		struct zl_chunk_cow *w = sn->wait_first;
		bool free_slot = false;

		for (uint32_t i = 0; i < SNAP_SLOTS; i++)
			free_slot |= !sn->slots[i].busy;
		if (!free_slot)
			return;
		sn->wait_first = w->next;
		if (!sn->wait_first)
			sn->wait_last = NULL;
		snap_cow_process(sn, w, true);
		if (sn->wait_first == w)
			return; /* no slot after all */
	}
}

static void snap_clone_written(struct zl_work *w)
{
	struct snap_slot *sl = ZL_CONTAINER_OF(w, struct snap_slot, work);
	struct zl_chunk_snap *sn = sl->sn;

	sl->err = w->cancelled ? -ECANCELED : sl->work_err;
	if (!sl->err && zl_chunk_vol_gone(sn->s, sl->vol)) {
		/* The volume was deleted while the helper wrote: the file it
		 * made (and the directory) go the same way. */
		(void)zl_chunk_volume_delete_start(sn->s, sl->vol, NULL, NULL);
		sl->err = -ZL_ERR_NOT_FOUND;
	}
	if (!sl->err) {
		zl_chunk_clone_adopt(sn->s, sl->vol, zl_chunk_clone_id(sl->chunk, sl->hi));
		/* Without the entry a later write would copy again, over data
		 * already changed: fail the writes rather than that. */
		sl->err =
		    snap_index_add(sn, sl->vol, sl->chunk, sl->lo, sl->hi, sl->owner, sl->bytes);
	}
	snap_slot_end(sl);
}

/* ---- API ---- */

int zl_chunk_cow_submit(struct zl_chunk_store *s, struct zl_chunk_cow *w)
{
	if (!s || !w || !w->cb || !w->vol || w->seq > ZL_CHUNK_SEQ_MAX ||
	    w->chunk > ZL_CHUNK_IDX_MASK || (w->n_snaps && !w->snaps) || (!w->zero && !w->data))
		return -ZL_ERR_INVAL;
	if (!w->len || (uint64_t)w->off + w->len > w->chunk_size)
		return -ZL_ERR_RANGE;
	return snap_cow_process(zl_chunk_store_snap(s), w, false);
}

int zl_chunk_snap_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		       uint32_t seq, uint32_t off, uint32_t len, void *buf, zl_chunk_cb cb,
		       void *arg)
{
	if (!seq || seq > ZL_CHUNK_SEQ_MAX || chunk > ZL_CHUNK_IDX_MASK)
		return -ZL_ERR_INVAL;
	return zl_chunk_read(s, vol, zl_chunk_snap_id(s, vol, chunk, seq), chunk_size, off, len,
			     buf, cb, arg);
}

int zl_chunk_snap_install(struct zl_chunk_store *s, uint64_t vol, uint64_t id, uint32_t lo,
			  zl_chunk_cb cb, void *arg)
{
	struct zl_chunk_snap *sn = zl_chunk_store_snap(s);
	struct snap_inst *in;

	if (!cb || !(id >> ZL_CHUNK_IDX_BITS) || lo >= id >> ZL_CHUNK_IDX_BITS)
		return -ZL_ERR_INVAL;
	in = calloc(1, sizeof(*in));
	if (!in)
		return -ENOMEM;
	*in = (struct snap_inst){.sn = sn, .vol = vol, .id = id, .lo = lo, .cb = cb, .arg = arg};
	sn->busy++;
	/* A fresh job is never busy: submit cannot fail. */
	(void)zl_worker_submit(sn->wk, &in->work, snap_inst_run, snap_inst_done);
	return 0;
}

uint64_t zl_chunk_snap_id(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t seq)
{
	struct snap_node *x = snap_node_find(zl_chunk_store_snap(s), vol, chunk);

	for (uint32_t i = 0; x && i < x->n; i++)
		if (x->v[i].lo < seq && seq <= x->v[i].hi)
			return zl_chunk_clone_id(chunk, x->v[i].hi);
	return chunk;
}

int zl_chunk_snap_gc(struct zl_chunk_store *s, uint64_t vol, const uint32_t *snaps, uint32_t n,
		     uint32_t *removed, zl_chunk_cb cb, void *arg)
{
	struct zl_chunk_snap *sn = zl_chunk_store_snap(s);
	struct snap_gc *g;
	uint32_t cap = 0;

	if (!cb || (n && !snaps))
		return -ZL_ERR_INVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		for (struct snap_node *x = sn->b[b]; x; x = x->next)
			if (x->vol == vol)
				cap += x->n;
	if (cap && !(g->ids = calloc(cap, sizeof(*g->ids)))) {
		free(g);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++) {
		for (struct snap_node *x = sn->b[b], *xn; x; x = xn) {
			uint32_t keep = 0;

			xn = x->next;
			if (x->vol != vol)
				continue;
			for (uint32_t i = 0; i < x->n; i++) {
				struct snap_clone *c = &x->v[i];
				uint32_t owner = snap_newest_in(snaps, n, c->lo, c->hi);

				/* Its owner was deleted: it counts for the next
				 * older snapshot reading it (kept as it was if the
				 * table cannot grow: the total stays right). */
				if (owner && owner != c->owner &&
				    !snap_space_add(sn, vol, owner, c->bytes)) {
					snap_space_sub(sn, vol, c->owner, c->bytes);
					c->owner = owner;
				}
				if (owner) {
					x->v[keep++] = *c;
					continue;
				}
				snap_space_sub(sn, vol, c->owner, c->bytes);
				g->ids[g->n] = zl_chunk_clone_id(x->chunk, c->hi);
				zl_chunk_forget(s, vol, g->ids[g->n]);
				g->n++;
			}
			x->n = keep;
			if (!keep)
				snap_node_unlink(sn, x);
		}
	}
	if (removed)
		*removed = g->n;
	g->sn = sn;
	g->vol = vol;
	g->cb = cb;
	g->arg = arg;
	sn->busy++;
	/* A fresh job is never busy: submit cannot fail. */
	(void)zl_worker_submit(sn->wk, &g->work, snap_gc_run, snap_gc_done);
	return 0;
}

void zl_chunk_snap_forget(struct zl_chunk_snap *sn, uint64_t vol, uint64_t id)
{
	if (!sn)
		return;
	if (id != UINT64_MAX) {
		struct snap_node *x = snap_node_find(sn, vol, zl_chunk_id_base(id));
		uint32_t hi = (uint32_t)(id >> ZL_CHUNK_IDX_BITS), keep = 0;

		for (uint32_t i = 0; x && i < x->n; i++) {
			if (x->v[i].hi != hi)
				x->v[keep++] = x->v[i];
			else
				snap_space_sub(sn, vol, x->v[i].owner, x->v[i].bytes);
		}
		if (x && !(x->n = keep))
			snap_node_unlink(sn, x);
		return;
	}
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		for (struct snap_node *x = sn->b[b], *xn; x; x = xn) {
			xn = x->next;
			if (x->vol != vol)
				continue;
			for (uint32_t i = 0; i < x->n; i++)
				snap_space_sub(sn, vol, x->v[i].owner, x->v[i].bytes);
			snap_node_unlink(sn, x);
		}
}

uint32_t zl_chunk_snap_clones(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			      struct zl_chunk_clone *out, uint32_t max)
{
	struct snap_node *x = snap_node_find(zl_chunk_store_snap(s), vol, chunk);

	if (!x)
		return 0;
	for (uint32_t i = 0; i < x->n && i < max; i++)
		out[i] = (struct zl_chunk_clone){x->v[i].lo, x->v[i].hi};
	return x->n;
}

unsigned zl_chunk_snap_warm(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk,
			    uint32_t chunk_size, zl_chunk_cb cb, void *arg)
{
	struct snap_node *x = snap_node_find(zl_chunk_store_snap(s), vol, chunk);
	unsigned queued = zl_chunk_warm(s, vol, chunk, chunk_size, cb, arg) == 0;

	for (uint32_t i = 0; x && i < x->n; i++)
		queued += zl_chunk_warm(s, vol, zl_chunk_clone_id(chunk, x->v[i].hi), chunk_size,
					cb, arg) == 0;
	return queued;
}

uint32_t zl_chunk_snap_space(struct zl_chunk_store *s, struct zl_chunk_snap_space *out,
			     uint32_t max, uint64_t *total)
{
	struct zl_chunk_snap *sn = zl_chunk_store_snap(s);

	if (total)
		*total = sn ? sn->sp_total : 0;
	if (!sn)
		return 0;
	if (sn->n_sp && max)
		memcpy(out, sn->sp, ZL_MIN(max, sn->n_sp) * sizeof(*out));
	return sn->n_sp;
}

bool zl_chunk_snap_vol_has(struct zl_chunk_store *s, uint64_t vol)
{
	struct zl_chunk_snap *sn = zl_chunk_store_snap(s);

	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		for (struct snap_node *x = sn->b[b]; x; x = x->next)
			if (x->vol == vol)
				return true;
	return false;
}

static int snap_vol_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int zl_chunk_snap_vols(struct zl_chunk_store *s, uint64_t **out, uint32_t *n)
{
	struct zl_chunk_snap *sn = zl_chunk_store_snap(s);
	uint32_t cap = 0, k = 0;
	uint64_t *v;

	*out = NULL;
	*n = 0;
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		for (struct snap_node *x = sn->b[b]; x; x = x->next)
			cap++;
	if (!cap)
		return 0;
	v = calloc(cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		for (struct snap_node *x = sn->b[b]; x; x = x->next)
			v[k++] = x->vol;
	qsort(v, cap, sizeof(*v), snap_vol_cmp);
	k = 0;
	for (uint32_t i = 0; i < cap; i++)
		if (!k || v[k - 1] != v[i])
			v[k++] = v[i];
	*out = v;
	*n = k;
	return 0;
}

/* ---- lifecycle ---- */

/* One volume directory at start-up: leftover temporary files go, clone
 * files enter the index. */
static void snap_scan_vol(struct zl_chunk_snap *sn, uint64_t vol, const char *dir)
{
	char path[PATH_MAX + 288];
	struct dirent *de;
	DIR *d = opendir(dir);
	uint32_t removed = 0;

	if (!d)
		return;
	while ((de = readdir(d))) {
		unsigned long long id;
		char tail[9];
		uint32_t lo, hi;
		size_t len = strlen(de->d_name);
		int rc;

		if ((len != 20 && len != 24) || sscanf(de->d_name, "%16llx%8s", &id, tail) != 2)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (len == 24 && !strcmp(tail, ".zlc.tmp")) {
			/* A crash before the rename: its write never completed. */
			if (unlink(path) == 0)
				removed++;
			continue;
		}
		if (strcmp(tail, ".zlc") || !(id >> ZL_CHUNK_IDX_BITS))
			continue;
		rc = zl_chunk_clone_file_range(path, &lo, &hi);
		if (rc || hi != id >> ZL_CHUNK_IDX_BITS) {
			ZL_LOG_WARN("storage",
				    "clone chunk file %s has no valid clone header (%s): not used "
				    "for snapshot reads; remove it if no snapshot needs it",
				    path, rc ? zl_errname(rc) : "hi differs from its name");
			continue;
		}
		/* Owned by hi until the start-up collection of the volume. */
		if (snap_index_add(sn, vol, id & ZL_CHUNK_IDX_MASK, lo, hi, hi,
				   snap_file_bytes(path)))
			ZL_LOG_WARN("storage", "out of memory indexing clone chunk file %s", path);
	}
	closedir(d);
	if (removed) {
		ZL_LOG_INFO("storage", "removed %u temporary chunk files left by a crash in %s",
			    removed, dir);
		(void)zl_fsync_dir(dir);
	}
}

int zl_chunk_snap_create(struct zl_chunk_store *s, struct zl_chunk_snap **out)
{
	struct zl_chunk_snap *sn = calloc(1, sizeof(*sn));
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int rc;

	if (!sn)
		return -ENOMEM;
	sn->s = s;
	sn->loop = zl_chunk_store_loop(s);
	sn->dir = zl_chunk_store_dir(s);
	for (uint32_t i = 0; i < SNAP_SLOTS; i++)
		sn->slots[i].sn = sn;
	d = opendir(sn->dir);
	while (d && (de = readdir(d))) {
		uint64_t vol;

		if (zl_vol_id_parse(de->d_name, &vol))
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", sn->dir, de->d_name);
		snap_scan_vol(sn, vol, dir);
	}
	if (d)
		closedir(d);
	rc = zl_worker_create(sn->loop, &sn->wk);
	if (rc)
		goto out_free;
	*out = sn;
	return 0;

out_free:
	zl_chunk_snap_destroy(sn);
	return rc;
}

void zl_chunk_snap_drain(struct zl_chunk_snap *sn, uint64_t deadline_ms)
{
	while (sn && sn->busy && zl_now_ms() < deadline_ms)
		zl_loop_run_once(sn->loop, 100);
	if (sn && sn->busy)
		ZL_LOG_WARN("storage", "closing with %u snapshot copies or collections in flight",
			    sn->busy);
}

void zl_chunk_snap_destroy(struct zl_chunk_snap *sn)
{
	if (!sn)
		return;
	/* Jobs the drain did not see end (bounded) end here, cancelled. */
	sn->closing = true;
	zl_worker_destroy(sn->wk);
	for (uint32_t i = 0; i < SNAP_SLOTS; i++) {
		zl_loop_defer_cancel(sn->loop, &sn->slots[i].defer);
		free(sn->slots[i].buf);
	}
	for (uint32_t b = 0; b < SNAP_BUCKETS; b++)
		while (sn->b[b])
			snap_node_unlink(sn, sn->b[b]);
	free(sn->sp);
	free(sn);
}
