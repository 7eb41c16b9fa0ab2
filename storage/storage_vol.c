/* Volume record cache of the storage daemon: volume number -> record from
 * etcd plus the highest attach epoch seen. Loop thread only; misses and
 * reloads block on etcd (rare: on first use and when a client shows a newer
 * slice version). An etcd watch on volumes/ keeps cached records fresh
 * between requests: the watch thread parses the record and queues it; the
 * loop thread applies the queue when woken (lib/common/notify.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/notify.h"
#include "storage.h"

#define VOLS_BUCKETS 256u

/* A watch event handed from the watch thread to the loop thread. */
struct vols_event {
	struct vols_event *next;
	uint64_t num;
	bool deleted;
	struct zl_volume v; /* PUT: the parsed record */
};

struct zl_storage_vols {
	struct zl_etcd *etcd;
	const char *prefix;
	struct zl_loop *loop;
	struct zl_storage_vol *buckets[VOLS_BUCKETS];
	struct zl_etcd_watch *watch;
	struct zl_notify wake; /* watch thread -> loop thread */
	/* mu protects the event queue, filled by the watch thread. */
	pthread_mutex_t mu;
	struct vols_event *ev_head, **ev_tail;
};

static void vols_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_vols *vc = arg;
	const char *id = strrchr(kv->key, '/');
	struct vols_event *ev;
	uint64_t num;

	if (!id || zl_vol_id_parse(id + 1, &num))
		return;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return;
	ev->num = num;
	ev->deleted = type == ZL_ETCD_EV_DELETE;
	if (!ev->deleted) {
		if (zl_meta_volume_from_json(kv->value, kv->value_len, &ev->v) ||
		    ev->v.num != num) {
			zl_volume_fini(&ev->v);
			free(ev);
			return;
		}
		ev->v.mod_rev = kv->mod_rev;
	}
	pthread_mutex_lock(&vc->mu);
	*vc->ev_tail = ev;
	vc->ev_tail = &ev->next;
	pthread_mutex_unlock(&vc->mu);
	zl_notify_post(&vc->wake);
}

static void vols_wake_cb(void *arg)
{
	struct zl_storage_vols *vc = arg;
	struct vols_event *ev;

	pthread_mutex_lock(&vc->mu);
	ev = vc->ev_head;
	vc->ev_head = NULL;
	vc->ev_tail = &vc->ev_head;
	pthread_mutex_unlock(&vc->mu);
	while (ev) {
		struct vols_event *next = ev->next;

		if (ev->deleted)
			zl_storage_vol_forget(vc, ev->num);
		else
			zl_storage_vol_update(vc, &ev->v);
		zl_volume_fini(&ev->v);
		free(ev);
		ev = next;
	}
}

int zl_storage_vols_create(struct zl_loop *loop, struct zl_etcd *etcd, const char *prefix,
			   struct zl_storage_vols **out)
{
	struct zl_storage_vols *vc = calloc(1, sizeof(*vc));
	char key[512];
	int rc;

	if (!vc)
		return -ENOMEM;
	vc->etcd = etcd;
	vc->prefix = prefix;
	vc->loop = loop;
	pthread_mutex_init(&vc->mu, NULL);
	vc->ev_tail = &vc->ev_head;
	rc = zl_notify_init(&vc->wake, loop, vols_wake_cb, vc);
	if (rc)
		goto out_free;
	snprintf(key, sizeof(key), "%svolumes/", prefix);
	rc = zl_etcd_watch_prefix(etcd, key, 0, vols_watch_cb, vc, &vc->watch);
	if (rc) {
		ZL_LOG_WARN("storage",
			    "cannot watch %s: %s (volume records refresh on demand only)", key,
			    zl_errname(rc));
		rc = 0;
	}
	*out = vc;
	return 0;

out_free:
	zl_storage_vols_destroy(vc);
	return rc;
}

void zl_storage_vols_destroy(struct zl_storage_vols *vc)
{
	if (!vc)
		return;
	zl_etcd_watch_cancel(vc->watch);
	zl_notify_fini(&vc->wake);
	while (vc->ev_head) {
		struct vols_event *ev = vc->ev_head;

		vc->ev_head = ev->next;
		zl_volume_fini(&ev->v);
		free(ev);
	}
	pthread_mutex_destroy(&vc->mu);
	for (uint32_t i = 0; i < VOLS_BUCKETS; i++) {
		while (vc->buckets[i]) {
			struct zl_storage_vol *sv = vc->buckets[i];

			vc->buckets[i] = sv->next;
			zl_volume_fini(&sv->v);
			free(sv);
		}
	}
	free(vc);
}

static struct zl_storage_vol **vols_slot(struct zl_storage_vols *vc, uint64_t num)
{
	struct zl_storage_vol **pp = &vc->buckets[zl_hash64(num) % VOLS_BUCKETS];

	while (*pp && (*pp)->num != num)
		pp = &(*pp)->next;
	return pp;
}

/* Loads volume num from etcd into a new record. */
static int vols_load(struct zl_storage_vols *vc, uint64_t num, struct zl_volume *v)
{
	char id[ZL_VOL_ID_LEN + 1], why[256] = "";
	int rc;

	zl_vol_id_format(num, id);
	rc = zl_meta_volume_get(vc->etcd, vc->prefix, id, v);
	if (rc && rc != -ZL_ERR_NOT_FOUND)
		ZL_LOG_WARN("storage", "loading volume record failed: vol=%s err=%s (%s)", id,
			    zl_errname(rc), zl_etcd_last_error());
	if (!rc && (v->num != num || zl_meta_volume_check(v, why, sizeof(why)))) {
		ZL_LOG_ERR("storage", "volume record in etcd is inconsistent: vol=%s %s", id, why);
		zl_volume_fini(v);
		rc = -ZL_ERR_NOT_FOUND;
	}
	return rc;
}

int zl_storage_vol_get(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out)
{
	struct zl_storage_vol **pp = vols_slot(vc, num);
	struct zl_storage_vol *sv;
	int rc;

	if (*pp) {
		*out = *pp;
		return 0;
	}
	sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	rc = vols_load(vc, num, &sv->v);
	if (rc) {
		free(sv);
		return rc;
	}
	sv->num = num;
	*pp = sv;
	*out = sv;
	return 0;
}

int zl_storage_vol_reload(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out)
{
	struct zl_storage_vol **pp = vols_slot(vc, num);
	struct zl_volume v;
	int rc;

	if (!*pp)
		return zl_storage_vol_get(vc, num, out);
	memset(&v, 0, sizeof(v));
	rc = vols_load(vc, num, &v);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_storage_vol_forget(vc, num);
		return rc;
	}
	if (rc)
		return rc;
	zl_volume_fini(&(*pp)->v);
	(*pp)->v = v;
	if (out)
		*out = *pp;
	return 0;
}

void zl_storage_vol_update(struct zl_storage_vols *vc, struct zl_volume *fresh)
{
	struct zl_storage_vol **pp = vols_slot(vc, fresh->num);

	if (!*pp || (*pp)->v.mod_rev >= fresh->mod_rev || !fresh->slices) {
		zl_volume_fini(fresh);
		memset(fresh, 0, sizeof(*fresh));
		return;
	}
	zl_volume_fini(&(*pp)->v);
	(*pp)->v = *fresh;
	memset(fresh, 0, sizeof(*fresh));
}

void zl_storage_vol_forget(struct zl_storage_vols *vc, uint64_t num)
{
	struct zl_storage_vol **pp = vols_slot(vc, num);
	struct zl_storage_vol *sv = *pp;

	if (!sv)
		return;
	*pp = sv->next;
	zl_volume_fini(&sv->v);
	free(sv);
}
