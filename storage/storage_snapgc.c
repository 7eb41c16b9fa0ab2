/* Collection of clone chunks no snapshot needs any more (docs/SNAPSHOTS.md
 * §2, "Deleting a snapshot"). The volume cache calls us when a record enters
 * it and when a cached record lost a snapshot (the volumes/ watch): the
 * chunk store forgets the clones none of the remaining snapshots falls into
 * and its helper thread unlinks their files (zl_chunk_snap_gc), never the
 * loop. At start-up every volume this node holds clones of is looked up
 * (through the cache's loader thread, throttled like any load) so that the
 * clones of snapshots deleted while the daemon was down go too. Loop thread
 * only. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "storage_ctl.h"
#include "storage_io.h"

/* The start-up look-ups: retried once a second (etcd down, loads
 * throttled), given up after SNAPGC_TRIES. */
#define SNAPGC_TICK_MS 1000
#define SNAPGC_TRIES   600

struct zl_storage_snapgc {
	struct zl_storage *st;
	uint64_t *pend; /* volumes with clones not looked up yet */
	uint32_t n_pend;
	uint32_t tries;
	struct zl_timer t;
};

static void snapgc_done(void *arg, int status)
{
	uint64_t vol = (uint64_t)(uintptr_t)arg;
	char vid[ZL_VOL_ID_LEN + 1];

	if (!status || status == -ECANCELED)
		return;
	zl_vol_id_format(vol, vid);
	ZL_LOG_WARN("storage",
		    "removing clone chunks of deleted snapshots failed: vol=%s err=%s (the files "
		    "stay on disk; they are retried at the next start)",
		    vid, zl_errname(status));
}

/* The volume cache's hook: v entered the cache or lost a snapshot. */
static void snapgc_on_snaps(void *arg, const struct zl_volume *v)
{
	struct zl_storage *st = arg;
	char vid[ZL_VOL_ID_LEN + 1];
	uint32_t removed = 0;
	int rc;

	if (!zl_chunk_snap_vol_has(st->chunks, v->num))
		return;
	rc = zl_chunk_snap_gc(st->chunks, v->num, v->snaps, v->n_snaps, &removed, snapgc_done,
			      (void *)(uintptr_t)v->num);
	zl_vol_id_format(v->num, vid);
	if (rc)
		ZL_LOG_WARN("storage",
			    "cannot collect clone chunks of deleted snapshots: vol=%s err=%s "
			    "(retried at the next snapshot deletion or start)",
			    vid, zl_errname(rc));
	else if (removed)
		ZL_LOG_INFO("storage",
			    "clone chunks no snapshot needs removed: vol=%s clones=%u snapshots=%u",
			    vid, removed, v->n_snaps);
}

static void snapgc_tick(void *arg)
{
	struct zl_storage_snapgc *g = arg;
	struct zl_storage_vol *sv;
	uint32_t keep = 0;

	for (uint32_t i = 0; i < g->n_pend; i++) {
		int rc = zl_storage_vol_lookup(g->st->vols, g->pend[i], &sv);

		/* 0: cached, the hook ran at its insert; NOT_FOUND: deleted,
		 * tombstones remove it all. */
		if (rc && rc != -ZL_ERR_NOT_FOUND)
			g->pend[keep++] = g->pend[i];
	}
	g->n_pend = keep;
	if (keep && ++g->tries < SNAPGC_TRIES)
		return;
	if (keep)
		ZL_LOG_WARN("storage",
			    "%u volumes with clone chunks could not be looked up since the start; "
			    "their clones of deleted snapshots stay until the next start",
			    keep);
	zl_timer_stop(g->st->loop, &g->t);
}

int zl_storage_snapgc_start(struct zl_storage *st, struct zl_storage_snapgc **out)
{
	struct zl_storage_snapgc *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return -ENOMEM;
	g->st = st;
	rc = zl_chunk_snap_vols(st->chunks, &g->pend, &g->n_pend);
	if (rc) {
		free(g);
		return rc;
	}
	zl_storage_vols_on_snaps(st->vols, snapgc_on_snaps, st);
	if (g->n_pend)
		zl_timer_start(st->loop, &g->t, 0, SNAPGC_TICK_MS, snapgc_tick, g);
	*out = g;
	return 0;
}

void zl_storage_snapgc_stop(struct zl_storage *st, struct zl_storage_snapgc *g)
{
	if (!g)
		return;
	zl_storage_vols_on_snaps(st->vols, NULL, NULL);
	zl_timer_stop(st->loop, &g->t);
	free(g->pend);
	free(g);
}
