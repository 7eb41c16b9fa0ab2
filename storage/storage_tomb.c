/* Tombstones of deleted volumes (lib/meta, meta_delete.c): `zl volume rm`
 * removes the record and leaves <prefix>deletes/<node-id>/<vol-id> for every
 * node of the placement. This daemon removes its replicas of each volume
 * its tombstones name, then clears them: at start-up, and whenever the watch
 * on its own tombstone prefix reports a change (a delete while this node was
 * up but its VOLUME_DELETE failed). It only ever deletes what a tombstone
 * names, and never a volume whose record still exists. The watch thread
 * only wakes the loop thread, which does the work (the chunk store is loop
 * thread only). */
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
};

/* Removes the replicas of every volume a tombstone of ours names. 0 or the
 * listing's etcd error; *rev (optional) gets the revision of the listing. */
static int tombs_process(struct zl_storage *st, int64_t *rev)
{
	uint64_t *vols = NULL;
	size_t n = 0;
	int rc;

	rc = zl_meta_tombstone_list(st->etcd, st->cfg.prefix, st->cfg.node_id, &vols, &n, rev);
	if (rc) {
		ZL_LOG_WARN("storage", "cannot read the tombstones of deleted volumes: err=%s (%s)",
			    zl_errname(rc), zl_etcd_last_error());
		return rc;
	}
	if (n && (rc = zl_storage_ident_cluster_ok(st, st->etcd))) {
		ZL_LOG_ERR("storage",
			   "%zu tombstones of deleted volumes ignored: etcd %s prefix %s is not "
			   "(or no longer) cluster %s of this data dir (err=%s): nothing deleted; "
			   "check --etcd and --etcd-prefix",
			   n, st->cfg.eo.endpoints, st->cfg.prefix, st->cfg.cluster_id, zl_errname(rc));
		free(vols);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		char vid[ZL_VOL_ID_LEN + 1];
		struct zl_volume v;
		uint64_t removed = 0;

		zl_vol_id_format(vols[i], vid);
		memset(&v, 0, sizeof(v));
		rc = zl_meta_volume_get(st->etcd, st->cfg.prefix, vid, &v);
		zl_volume_fini(&v);
		if (rc != -ZL_ERR_NOT_FOUND) {
			/* A record exists (or etcd failed): keep the data. */
			ZL_LOG_WARN("storage",
				    "tombstone of vol=%s kept: %s; its replicas stay until the "
				    "record is gone",
				    vid, rc ? zl_errname(rc) : "the volume record still exists");
			continue;
		}
		zl_storage_vol_forget(st->vols, vols[i]);
		rc = zl_chunk_volume_delete(st->chunks, vols[i], &removed);
		if (rc) {
			ZL_LOG_WARN("storage", "removing replicas of deleted vol=%s failed: %s",
				    vid, zl_strerror(rc));
			continue;
		}
		ZL_LOG_INFO("storage", "removed replicas of deleted volume: vol=%s files=%" PRIu64,
			    vid, removed);
		rc = zl_meta_tombstone_clear(st->etcd, st->cfg.prefix, st->cfg.node_id, vid);
		if (rc)
			ZL_LOG_WARN("storage", "cannot clear the tombstone of vol=%s: %s (%s)", vid,
				    zl_errname(rc), zl_etcd_last_error());
	}
	free(vols);
	return 0;
}

static void tombs_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_tombs *t = arg;

	(void)kv;
	if (type == ZL_ETCD_EV_PUT)
		zl_notify_post(&t->wake);
}

static void tombs_wake_cb(void *arg)
{
	struct zl_storage_tombs *t = arg;

	if (!t->st->draining)
		tombs_process(t->st, NULL);
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
	zl_notify_fini(&t->wake);
	free(t);
}
