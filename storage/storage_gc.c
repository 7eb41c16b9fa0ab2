/* Old copies after a move (docs/REPLICATION.md §5): when the manager moves a
 * member of a row to another node (rebalance, or M7 after a node was gone),
 * the node that left still holds the slice's chunk files. Every
 * STORAGE_GC_PERIOD_MS this daemon removes the chunk files of every
 * (volume, slice) whose current row
 *   - does not list this node (by node id, whatever the incarnation), and
 *   - has every member IN_SYNC (the new member holds its full copy),
 * of volumes whose record exists and is "ready", and only while etcd's
 * cluster record is this data dir's cluster (zl_storage_ident_cluster_ok).
 * Rows are read from etcd (a linearizable read) in the same loop callback
 * that unlinks, so nothing this node serves can interleave: a row that
 * lists this node again (the manager put it back as RECOVERING) is seen by
 * that read, and a push that comes after the unlink writes a new file. The
 * reads and the directory scan are blocking and run on the loop thread, like
 * the tombstones' (storage_tomb.c); at most STORAGE_GC_MAX_FILES files are
 * removed per round. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

#define STORAGE_GC_PERIOD_MS 10000
#define STORAGE_GC_MAX_FILES 4096

struct zl_storage_gc {
	struct zl_storage *st;
	struct zl_timer t;
	uint64_t *vols;
	size_t n_vols, cap_vols;
};

static int gc_collect(void *arg, uint64_t vol)
{
	struct zl_storage_gc *g = arg;

	if (g->n_vols == g->cap_vols) {
		size_t cap = g->cap_vols ? g->cap_vols * 2 : 16;
		uint64_t *p = realloc(g->vols, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		g->vols = p;
		g->cap_vols = cap;
	}
	g->vols[g->n_vols++] = vol;
	return 0;
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

/* Removes this node's chunk files of v's foreign slices, at most *budget
 * (decremented). Returns the number removed. */
static uint64_t gc_volume(struct zl_storage *st, const struct zl_volume *v, uint32_t *budget)
{
	char dir[PATH_MAX];
	uint64_t removed = 0;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/chunks/%s", st->cfg.data_dir, v->id);
	d = opendir(dir);
	if (!d)
		return 0;
	while (*budget && (de = readdir(d))) {
		char *end;
		uint64_t idx;
		int rc;

		if (strlen(de->d_name) != 20 || strcmp(de->d_name + 16, ".zlc"))
			continue;
		errno = 0;
		idx = strtoull(de->d_name, &end, 16);
		if (errno || end != de->d_name + 16)
			continue;
		if (!gc_slice_foreign(st, &v->slices[zl_volume_slice_of(v, idx)]))
			continue;
		rc = zl_chunk_delete(st->chunks, v->num, idx);
		if (rc) {
			ZL_LOG_WARN("storage", "removing old copy vol=%s chunk=%" PRIu64 " failed: %s",
				    v->id, idx, zl_strerror(rc));
			continue;
		}
		removed++;
		(*budget)--;
	}
	closedir(d);
	return removed;
}

static void gc_tick(void *arg)
{
	struct zl_storage_gc *g = arg;
	struct zl_storage *st = g->st;
	uint32_t budget = STORAGE_GC_MAX_FILES;
	int rc;

	g->n_vols = 0;
	if (st->draining || zl_chunk_volume_foreach(st->chunks, gc_collect, g) || !g->n_vols)
		return;
	rc = zl_storage_ident_cluster_ok(st);
	if (rc) {
		static struct zl_ratelimit rl;

		if (zl_ratelimit_ok(&rl, 1))
			ZL_LOG_WARN("storage",
				    "old copies of moved slices kept: etcd is not (or not "
				    "reachably) cluster %s of this data dir (err=%s)",
				    st->cfg.cluster_id, zl_errname(rc));
		return;
	}
	for (size_t i = 0; i < g->n_vols && budget; i++) {
		char vid[ZL_VOL_ID_LEN + 1];
		struct zl_volume v = {0};
		uint64_t n;

		zl_vol_id_format(g->vols[i], vid);
		/* Missing volumes are the tombstones' business, not ours. */
		if (zl_meta_volume_get(st->etcd, st->cfg.prefix, vid, &v))
			continue;
		if (!strcmp(v.state, "ready")) {
			n = gc_volume(st, &v, &budget);
			if (n)
				ZL_LOG_INFO("storage",
					    "removed %" PRIu64 " old chunk files of vol=%s: slices "
					    "this node is no longer a member of, every member of "
					    "their row in sync",
					    n, vid);
		}
		zl_volume_fini(&v);
	}
}

int zl_storage_gc_start(struct zl_storage *st)
{
	struct zl_storage_gc *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->st = st;
	st->gc = g;
	zl_timer_start(st->loop, &g->t, STORAGE_GC_PERIOD_MS, STORAGE_GC_PERIOD_MS, gc_tick, g);
	return 0;
}

void zl_storage_gc_stop(struct zl_storage *st)
{
	struct zl_storage_gc *g = st->gc;

	if (!g)
		return;
	zl_timer_stop(st->loop, &g->t);
	free(g->vols);
	free(g);
	st->gc = NULL;
}
