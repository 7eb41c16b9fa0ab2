/* Old copies after a move (docs/REPLICATION.md §5): when the manager moves a
 * member of a row to another node (rebalance, or M7 after a node was gone),
 * the node that left still holds the slice's chunk files. Every
 * --gc-interval seconds this daemon removes the chunk files of every
 * (volume, slice) whose current row
 *   - does not list this node (by node id, whatever the incarnation or
 *     state: a member that is RECOVERING, OUT or the primary recovering
 *     others is a member and keeps its files), and
 *   - has every member IN_SYNC (the new member holds its full copy),
 * and has been so, at every round, for --gc-grace seconds, during which this
 * node applied no write, zeroing or push of the slice (a node that is being
 * recovered, or still serves the slice from a row it has not yet seen
 * change, keeps it). Only volumes whose record exists and is "ready", and
 * only while etcd's cluster record is this data dir's cluster
 * (zl_storage_ident_cluster_ok): a wrong or unreachable etcd deletes
 * nothing. The scan of the chunk directory and the etcd reads (linearizable)
 * run on the daemon's worker thread (st->worker, lib/common/worker.h); the
 * loop thread then judges and unlinks. A row the loop acted on meanwhile
 * came through the volume cache, so the newer of the read record and the
 * cached one (mod_rev) is the one judged: a row that lists this node again
 * is seen by the read or by the cache, a write or push of the slice since
 * restarts its clock (zl_storage_gc_note_write), and a push that comes after
 * the unlink writes a new file. Operations accepted before the unlink finish
 * on the unlinked file; the chunk store closes it after the last one
 * (zl_chunk_delete). At most STORAGE_GC_MAX_FILES files are removed per
 * round (the per-volume directory reads and unlinks run on the loop). The
 * grace clocks are memory only: a restart starts them again. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_ctl.h"
#include "storage_io.h"

#define STORAGE_GC_MAX_FILES 4096

/* One volume's record as the worker read it. */
struct gc_look {
	int rc;
	struct zl_volume v;
};

/* Grace clocks of one volume's slices. */
struct gc_vol {
	struct gc_vol *next;
	uint64_t num;
	uint32_t n;	 /* slices covered by the arrays */
	uint64_t *since; /* ms the slice was first seen foreign (0: not foreign) */
	uint64_t *wrote; /* ms of this node's last write/zero/push of the slice */
	uint64_t last_write, round;
};

struct zl_storage_gc {
	struct zl_storage *st;
	struct zl_timer t;
	uint64_t grace_ms, round;
	/* The round's scan and etcd reads on the worker: vols, looks and the
	 * results are the worker's while job is busy, then the loop's. */
	struct zl_work job;
	int scan_rc, cluster_rc;
	uint64_t *vols;
	size_t n_vols, cap_vols;
	struct gc_look *looks; /* [n_looks], one per vols[i] */
	size_t n_looks, cap_looks;
	struct gc_vol *gv;
	uint64_t files, bytes; /* removed since start */
	uint64_t hold_until;   /* ms: nothing removed before (a write not clocked) */
};

static int gc_collect(void *arg, uint64_t vol)
{
	struct zl_storage_gc *g = arg;

	return zl_u64_push(&g->vols, &g->n_vols, &g->cap_vols, vol);
}

static void gv_free(struct gc_vol *gv)
{
	free(gv->since);
	free(gv->wrote);
	free(gv);
}

/* The clocks of volume num covering at least n slices (created or grown).
 * NULL on allocation failure: the caller deletes nothing. */
static struct gc_vol *gv_get(struct zl_storage_gc *g, uint64_t num, uint32_t n)
{
	struct gc_vol *gv;

	for (gv = g->gv; gv && gv->num != num; gv = gv->next)
		;
	if (!gv) {
		gv = calloc(1, sizeof(*gv));
		if (!gv)
			return NULL;
		gv->num = num;
		gv->next = g->gv;
		g->gv = gv;
	}
	if (n > gv->n) {
		uint64_t *since = realloc(gv->since, n * sizeof(*since));
		uint64_t *wrote = since ? realloc(gv->wrote, n * sizeof(*wrote)) : NULL;

		if (since)
			gv->since = since;
		if (!wrote)
			return NULL;
		gv->wrote = wrote;
		memset(gv->since + gv->n, 0, (n - gv->n) * sizeof(*since));
		memset(gv->wrote + gv->n, 0, (n - gv->n) * sizeof(*wrote));
		gv->n = n;
	}
	return gv;
}

void zl_storage_gc_note_write(struct zl_storage *st, uint64_t vol, uint32_t slice)
{
	struct gc_vol *gv;

	if (!st->gc)
		return;
	gv = gv_get(st->gc, vol, slice + 1);
	if (!gv) {
		/* No clock for it: hold every removal for a grace period. */
		st->gc->hold_until = zl_now_ms() + st->gc->grace_ms;
		return;
	}
	gv->wrote[slice] = gv->last_write = zl_now_ms();
}

/* Every member of the row is in sync and none of them is this node. */
static bool gc_slice_foreign(const struct zl_storage *st, const struct zl_slice *row)
{
	if (zl_slice_index_of(row, st->cfg.node_id) >= 0)
		return false;
	for (int i = 0; i < row->n; i++) {
		if (zl_slice_member_state(row, i) != ZL_MEMBER_IN_SYNC)
			return false;
	}
	return row->n > 0;
}

/* Advances the grace clocks of v's slices; true when one is due. */
static bool gc_clocks(struct zl_storage_gc *g, const struct zl_volume *v, struct gc_vol *gv,
		      uint64_t now)
{
	bool due = false;

	for (uint32_t s = 0; s < v->n_slices; s++) {
		if (!gc_slice_foreign(g->st, &v->slices[s])) {
			gv->since[s] = 0;
			continue;
		}
		if (!gv->since[s])
			gv->since[s] = now;
		due |= now - gv->since[s] >= g->grace_ms &&
		       (!gv->wrote[s] || now - gv->wrote[s] >= g->grace_ms);
	}
	return due;
}

/* Removes this node's chunk files of v's slices that are due, at most
 * *budget (decremented). Returns the number removed, their bytes in *bytes. */
static uint64_t gc_volume(struct zl_storage_gc *g, const struct zl_volume *v,
			  const struct gc_vol *gv, uint64_t now, uint32_t *budget, uint64_t *bytes)
{
	struct zl_storage *st = g->st;
	char dir[PATH_MAX];
	uint64_t removed = 0;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/chunks/%s", st->cfg.data_dir, v->id);
	d = opendir(dir);
	if (!d)
		return 0;
	while (*budget && (de = readdir(d))) {
		uint64_t idx, alloc = 0;
		uint32_t s;
		char *end;
		int rc;

		if (strlen(de->d_name) != 20 || strcmp(de->d_name + 16, ".zlc"))
			continue;
		errno = 0;
		idx = strtoull(de->d_name, &end, 16);
		if (errno || end != de->d_name + 16)
			continue;
		s = zl_volume_slice_of(v, idx);
		if (s >= gv->n || !gv->since[s] || now - gv->since[s] < g->grace_ms ||
		    (gv->wrote[s] && now - gv->wrote[s] < g->grace_ms))
			continue;
		(void)zl_chunk_info(st->chunks, v->num, idx, &alloc);
		rc = zl_chunk_delete(st->chunks, v->num, idx);
		if (rc) {
			ZL_LOG_WARN("storage",
				    "removing old copy vol=%s chunk=%" PRIu64 " failed: %s (kept; "
				    "retried next round)",
				    v->id, idx, zl_strerror(rc));
			continue;
		}
		removed++;
		*bytes += alloc;
		(*budget)--;
	}
	closedir(d);
	return removed;
}

/* Forgets the clocks of volumes this node no longer holds and did not
 * write lately. */
static void gc_prune(struct zl_storage_gc *g, uint64_t now)
{
	for (struct gc_vol **pp = &g->gv; *pp;) {
		struct gc_vol *gv = *pp;

		if (gv->round == g->round || now - gv->last_write < g->grace_ms) {
			pp = &gv->next;
			continue;
		}
		*pp = gv->next;
		gv_free(gv);
	}
}

/* Worker thread: the volumes with chunk files here, whether etcd is still
 * our cluster, and their records. */
static void gc_run(struct zl_work *w)
{
	struct zl_storage_gc *g = ZL_CONTAINER_OF(w, struct zl_storage_gc, job);
	struct zl_storage *st = g->st;

	g->n_vols = g->n_looks = 0;
	g->cluster_rc = 0;
	g->scan_rc = zl_chunk_volume_foreach(st->chunks, gc_collect, g);
	if (g->scan_rc || !g->n_vols)
		return;
	g->cluster_rc = zl_storage_ident_cluster_ok(st, st->wetcd);
	if (g->cluster_rc)
		return;
	if (g->n_vols > g->cap_looks) {
		struct gc_look *p = realloc(g->looks, g->n_vols * sizeof(*p));

		if (!p)
			return;
		g->looks = p;
		g->cap_looks = g->n_vols;
	}
	for (size_t i = 0; i < g->n_vols; i++) {
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(g->vols[i], vid);
		memset(&g->looks[i].v, 0, sizeof(g->looks[i].v));
		g->looks[i].rc = zl_meta_volume_get(st->wetcd, st->cfg.prefix, vid, &g->looks[i].v);
	}
	g->n_looks = g->n_vols;
}

/* Loop thread: what the worker found, judged and removed. */
static void gc_done(struct zl_work *w)
{
	struct zl_storage_gc *g = ZL_CONTAINER_OF(w, struct zl_storage_gc, job);
	struct zl_storage *st = g->st;
	uint32_t budget = STORAGE_GC_MAX_FILES;
	uint64_t now = zl_now_ms();

	g->round++;
	if (w->cancelled || g->scan_rc || zl_loop_stopping(st->loop) || st->draining ||
	    now < g->hold_until)
		goto out;
	if (!g->n_vols) {
		gc_prune(g, now);
		goto out;
	}
	if (g->cluster_rc) {
		static struct zl_ratelimit rl;

		/* Clocks start again once the cluster is confirmed. */
		for (struct gc_vol *gv = g->gv; gv; gv = gv->next)
			memset(gv->since, 0, gv->n * sizeof(*gv->since));
		if (zl_ratelimit_ok(&rl, 1))
			ZL_LOG_WARN("storage",
				    "old copies of moved slices kept: etcd is not (or not "
				    "reachably) cluster %s of this data dir (err=%s)",
				    st->cfg.cluster_id, zl_errname(g->cluster_rc));
		goto out;
	}
	for (size_t i = 0; i < g->n_looks && budget; i++) {
		const struct zl_volume *v = &g->looks[i].v;
		struct zl_storage_vol *sv;
		struct gc_vol *gv;
		uint64_t n, bytes = 0;

		/* Missing volumes are the tombstones' business, not ours. */
		if (g->looks[i].rc)
			continue;
		sv = zl_storage_vol_cached(st->vols, v->num);
		if (sv && sv->v.mod_rev > v->mod_rev && sv->v.n_slices)
			v = &sv->v; /* newer than the read: what the loop acts on */
		gv = gv_get(g, v->num, v->n_slices);
		if (gv && strcmp(v->state, "ready")) {
			/* Not ready (being resized, removed...): clocks restart. */
			memset(gv->since, 0, gv->n * sizeof(*gv->since));
			gv->round = g->round;
		} else if (gv) {
			gv->round = g->round;
			if (gc_clocks(g, v, gv, now) &&
			    (n = gc_volume(g, v, gv, now, &budget, &bytes))) {
				g->files += n;
				g->bytes += bytes;
				ZL_LOG_INFO("storage",
					    "removed %" PRIu64 " old chunk files (%" PRIu64
					    " bytes) of vol=%s: slices this node is no longer a "
					    "member of, every member of their row in sync for "
					    "%" PRIu64 " s (total %" PRIu64 " files, %" PRIu64
					    " bytes)",
					    n, bytes, v->id, g->grace_ms / 1000, g->files, g->bytes);
			}
		}
	}
	gc_prune(g, now);
out:
	for (size_t i = 0; i < g->n_looks; i++)
		zl_volume_fini(&g->looks[i].v);
	g->n_looks = 0;
}

static void gc_tick(void *arg)
{
	struct zl_storage_gc *g = arg;
	struct zl_storage *st = g->st;

	/* A round still on the worker (etcd slow): this tick is skipped. */
	if (!st->draining && zl_now_ms() >= g->hold_until)
		zl_worker_submit(st->worker, &g->job, gc_run, gc_done);
}

int zl_storage_gc_start(struct zl_storage *st)
{
	uint64_t ms = (uint64_t)st->cfg.gc_interval_s * 1000;
	struct zl_storage_gc *g;

	if (!ms) {
		ZL_LOG_INFO("storage",
			    "removal of old copies of moved slices off (--gc-interval 0)");
		return 0;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->st = st;
	g->grace_ms = (uint64_t)st->cfg.gc_grace_s * 1000;
	st->gc = g;
	zl_timer_start(st->loop, &g->t, ms, ms, gc_tick, g);
	ZL_LOG_INFO("storage",
		    "old copies of moved slices: checked every %u s, removed %u s after their row "
		    "left this node",
		    st->cfg.gc_interval_s, st->cfg.gc_grace_s);
	return 0;
}

void zl_storage_gc_stop(struct zl_storage *st)
{
	struct zl_storage_gc *g = st->gc;

	if (!g)
		return;
	zl_timer_stop(st->loop, &g->t);
	while (g->gv) {
		struct gc_vol *gv = g->gv;

		g->gv = gv->next;
		gv_free(gv);
	}
	free(g->vols);
	free(g->looks);
	free(g);
	st->gc = NULL;
}
