/* Tombstones of deleted volumes (lib/meta, meta_delete.c): `zl volume rm`
 * removes the record and leaves <prefix>deletes/<node-id>/<vol-id> for every
 * node of the placement. This daemon removes its replicas of each volume
 * its tombstones name, then clears them: at start-up, and whenever the watch
 * on its own tombstone prefix reports a change (a delete while this node was
 * up but its VOLUME_DELETE failed). It only ever deletes what a tombstone
 * names, and never a volume whose record still exists. The watch thread
 * only wakes the loop thread; a round's etcd reads and writes then run on a
 * helper thread of this module (own etcd handle), the removal of the
 * replicas on the chunk store's open workers (zl_chunk_volume_delete_start:
 * the loop only forgets them; at start-up, before the loop serves, the
 * removal is blocking). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/notify.h"
#include "storage_ctl.h"
#include "storage_io.h"

struct zl_storage_tombs {
	struct zl_storage *st;
	struct zl_etcd_watch *watch;
	struct zl_notify wake; /* watch thread -> loop thread */
	/* A round after a watch event: the etcd reads (scan) and the clearing
	 * of the tombstones run on the helper thread with its own etcd handle,
	 * the removal of the replicas on the loop thread. vols[0..n) are the
	 * helper's while job is busy. again: an event came during a round. */
	struct zl_worker *worker;
	struct zl_etcd *etcd;
	struct zl_work job;
	uint64_t *vols;
	size_t n;
	int rc;
	bool again;
	/* A round's removals on the chunk store's open workers: dels[i] is
	 * vols[i]'s, pending of them still due (t lives on past stop until
	 * they ended: stopped). */
	struct tomb_del *dels;
	size_t pending;
	bool stopped;
};

struct tomb_del {
	struct zl_storage_tombs *t;
	bool ok;
};

/* The volumes whose tombstone of ours names them and whose record is gone
 * (blocking: the start-up or the helper thread). 0 with them in
 * vols[0..*n) (malloc'd), or the listing's etcd error; *rev (optional) gets
 * the revision of the listing. */
static int tombs_scan(struct zl_storage *st, struct zl_etcd *e, uint64_t **vols, size_t *n,
		      int64_t *rev)
{
	size_t kept = 0;
	int rc;

	*vols = NULL;
	*n = 0;
	rc = zl_meta_tombstone_list(e, st->cfg.prefix, st->cfg.node_id, vols, n, rev);
	if (rc) {
		ZL_LOG_WARN("storage", "cannot read the tombstones of deleted volumes: err=%s (%s)",
			    zl_errname(rc), zl_etcd_last_error());
		return rc;
	}
	if (*n && (rc = zl_storage_ident_cluster_ok(st, e))) {
		ZL_LOG_ERR("storage",
			   "%zu tombstones of deleted volumes ignored: etcd %s prefix %s is not "
			   "(or no longer) cluster %s of this data dir (err=%s): nothing deleted; "
			   "check --etcd and --etcd-prefix",
			   *n, st->cfg.eo.endpoints, st->cfg.prefix, st->cfg.cluster_id, zl_errname(rc));
		*n = 0;
		return rc;
	}
	for (size_t i = 0; i < *n; i++) {
		char vid[ZL_VOL_ID_LEN + 1];
		struct zl_volume v;

		zl_vol_id_format((*vols)[i], vid);
		memset(&v, 0, sizeof(v));
		rc = zl_meta_volume_get(e, st->cfg.prefix, vid, &v);
		zl_volume_fini(&v);
		if (rc != -ZL_ERR_NOT_FOUND) {
			/* A record exists (or etcd failed): keep the data. */
			ZL_LOG_WARN("storage",
				    "tombstone of vol=%s kept: %s; its replicas stay until the "
				    "record is gone",
				    vid, rc ? zl_errname(rc) : "the volume record still exists");
			continue;
		}
		(*vols)[kept++] = (*vols)[i];
	}
	*n = kept;
	return 0;
}

/* Says how the removal of vol's replicas ended; true when they are gone. */
static bool tombs_removed_log(uint64_t vol, int rc, uint64_t removed)
{
	char vid[ZL_VOL_ID_LEN + 1];

	zl_vol_id_format(vol, vid);
	if (rc) {
		ZL_LOG_WARN(
		    "storage",
		    "removing replicas of deleted vol=%s failed: %s (its tombstone stays: "
		    "retried by the next tombstone round and at start-up; check the data dir)",
		    vid, zl_strerror(rc));
		return false;
	}
	ZL_LOG_INFO("storage", "removed replicas of deleted volume: vol=%s files=%" PRIu64, vid,
		    removed);
	return true;
}

/* Start-up (loop not serving yet): removes the replicas of vols[0..*n),
 * blocking; keeps in vols those removed (their tombstones may go). */
static void tombs_remove(struct zl_storage *st, uint64_t *vols, size_t *n)
{
	size_t done = 0;

	for (size_t i = 0; i < *n; i++) {
		uint64_t removed = 0;
		int rc;

		zl_storage_vol_forget(st->vols, vols[i]);
		rc = zl_chunk_volume_delete(st->chunks, vols[i], &removed);
		if (tombs_removed_log(vols[i], rc, removed))
			vols[done++] = vols[i];
	}
	*n = done;
}

/* Clears the tombstones of vols[0..n) (blocking). */
static void tombs_clear(struct zl_storage *st, struct zl_etcd *e, const uint64_t *vols, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char vid[ZL_VOL_ID_LEN + 1];
		int rc;

		zl_vol_id_format(vols[i], vid);
		rc = zl_meta_tombstone_clear(e, st->cfg.prefix, st->cfg.node_id, vid);
		if (rc)
			ZL_LOG_WARN("storage", "cannot clear the tombstone of vol=%s: %s (%s)", vid,
				    zl_errname(rc), zl_etcd_last_error());
	}
}

/* Start-up (before the loop serves): the whole round, blocking. */
static int tombs_process(struct zl_storage *st, int64_t *rev)
{
	uint64_t *vols;
	size_t n;
	int rc;

	rc = tombs_scan(st, st->etcd, &vols, &n, rev);
	if (!rc) {
		tombs_remove(st, vols, &n);
		tombs_clear(st, st->etcd, vols, n);
	}
	free(vols);
	return rc;
}

static void tombs_scan_run(struct zl_work *w);
static void tombs_scan_done(struct zl_work *w);

static void tombs_round_start(struct zl_storage_tombs *t)
{
	t->again = false;
	if (zl_worker_submit(t->worker, &t->job, tombs_scan_run, tombs_scan_done))
		t->again = true; /* a round is on its way: one more after it */
}

static void tombs_clear_run(struct zl_work *w)
{
	struct zl_storage_tombs *t = ZL_CONTAINER_OF(w, struct zl_storage_tombs, job);

	tombs_clear(t->st, t->etcd, t->vols, t->n);
}

static void tombs_clear_done(struct zl_work *w)
{
	struct zl_storage_tombs *t = ZL_CONTAINER_OF(w, struct zl_storage_tombs, job);

	free(t->vols);
	t->vols = NULL;
	t->n = 0;
	if (t->again && !w->cancelled && !t->st->draining)
		tombs_round_start(t);
}

static void tombs_scan_run(struct zl_work *w)
{
	struct zl_storage_tombs *t = ZL_CONTAINER_OF(w, struct zl_storage_tombs, job);

	t->rc = tombs_scan(t->st, t->etcd, &t->vols, &t->n, NULL);
}

static void tombs_free(struct zl_storage_tombs *t)
{
	free(t->dels);
	free(t->vols);
	free(t);
}

/* Every removal of the round ended: the tombstones of the volumes whose
 * replicas are gone are cleared on the helper thread. */
static void tombs_removed(struct zl_storage_tombs *t)
{
	size_t done = 0;

	for (size_t i = 0; i < t->n; i++)
		if (t->dels[i].ok)
			t->vols[done++] = t->vols[i];
	t->n = done;
	free(t->dels);
	t->dels = NULL;
	if (t->st->draining ||
	    zl_worker_submit(t->worker, &t->job, tombs_clear_run, tombs_clear_done))
		tombs_clear_done(&t->job);
}

static void tombs_vol_removed(void *arg, int status, uint64_t removed)
{
	struct tomb_del *d = arg;
	struct zl_storage_tombs *t = d->t;

	d->ok = tombs_removed_log(t->vols[d - t->dels], status, removed);
	if (--t->pending)
		return;
	if (t->stopped)
		tombs_free(t);
	else
		tombs_removed(t);
}

static void tombs_scan_done(struct zl_work *w)
{
	struct zl_storage_tombs *t = ZL_CONTAINER_OF(w, struct zl_storage_tombs, job);

	if (w->cancelled || t->rc || !t->n || t->st->draining) {
		tombs_clear_done(w);
		return;
	}
	/* The files go on the chunk store's open workers (thousands of
	 * unlinks per volume): the loop serves meanwhile. */
	t->dels = calloc(t->n, sizeof(*t->dels));
	if (!t->dels) {
		tombs_clear_done(w); /* the next round tries again */
		return;
	}
	t->pending = 1; /* until every removal started */
	for (size_t i = 0; i < t->n; i++) {
		t->dels[i].t = t;
		zl_storage_vol_forget(t->st->vols, t->vols[i]);
		if (!zl_chunk_volume_delete_start(t->st->chunks, t->vols[i], tombs_vol_removed,
						  &t->dels[i]))
			t->pending++;
		else
			t->dels[i].ok = false;
	}
	if (!--t->pending)
		tombs_removed(t);
}

static void tombs_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_tombs *t = arg;

	(void)kv;
	/* A new tombstone, or the end of a listing after a compaction (one
	 * may have come while the watch was away): a round reads them all. */
	if (type == ZL_ETCD_EV_PUT || type == ZL_ETCD_EV_RESYNC_END)
		zl_notify_post(&t->wake);
}

static void tombs_wake_cb(void *arg)
{
	struct zl_storage_tombs *t = arg;

	if (t->st->draining)
		return;
	if (t->job.busy || t->dels) /* a round is on its way */
		t->again = true;
	else
		tombs_round_start(t);
}

int zl_storage_tombs_start(struct zl_storage *st, struct zl_storage_tombs **out)
{
	struct zl_storage_tombs *t = calloc(1, sizeof(*t));
	char key[512];
	int64_t rev = 0;
	int rc;

	if (!t)
		return -ENOMEM;
	t->st = st;
	rc = zl_notify_init(&t->wake, st->loop, tombs_wake_cb, t);
	if (rc)
		goto out_free;
	rc = zl_etcd_create(&st->cfg.eo, &t->etcd);
	if (rc)
		goto out_free;
	rc = zl_worker_create(st->loop, &t->worker);
	if (rc)
		goto out_free;
	rc = zl_meta_tombstone_key(key, sizeof(key), st->cfg.prefix, st->cfg.node_id);
	if (rc)
		goto out_free;
	/* Watch from just after the listing, so no tombstone falls between. */
	if (tombs_process(st, &rev) == 0)
		rev++;
	else
		rev = 0;
	rc = zl_etcd_watch_prefix(st->etcd, key, rev, tombs_watch_cb, t, &t->watch);
	if (rc) {
		ZL_LOG_WARN("storage",
			    "cannot watch %s: %s (tombstones of deleted volumes are processed at "
			    "start-up only)",
			    key, zl_errname(rc));
		t->watch = NULL;
	}
	*out = t;
	return 0;

out_free:
	zl_storage_tombs_stop(t);
	return rc;
}

void zl_storage_tombs_stop(struct zl_storage_tombs *t)
{
	if (!t)
		return;
	zl_etcd_watch_cancel(t->watch);
	/* Waits for the etcd call it runs; a round's replicas are not removed
	 * once draining. */
	zl_worker_destroy(t->worker);
	zl_etcd_destroy(t->etcd);
	zl_notify_fini(&t->wake);
	if (t->pending) {
		/* Removals on their way: the last one frees t. */
		t->stopped = true;
		return;
	}
	tombs_free(t);
}
