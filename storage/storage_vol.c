/* Volume record cache of the storage daemon: volume number -> record from
 * etcd plus the highest attach epoch seen. Loop thread only.
 *
 * The request path never waits for etcd (docs/SECURITY.md, "No cheap denial
 * of service"): zl_storage_vol_lookup answers from the cache, from a negative
 * cache of volumes etcd said are absent (VOLS_NEG_MS), or starts a load on
 * the loader thread (its own etcd handle) and says so; loads draw from one
 * token bucket (VOLS_LOAD_PER_SEC, burst VOLS_LOAD_BURST) and at most
 * VOLS_LOAD_QUEUE of them wait at once. A request that shows a newer slice
 * version than the cached one asks for a refresh (zl_storage_vol_refresh): at
 * most one in flight per volume and one per VOLS_REFRESH_MS. The loader is
 * a worker (lib/common/worker.h): results come back to the loop thread.
 *
 * The daemon's own jobs (peering, scrub, recovery) use the same lookup and
 * come back when a load answered; gc reads etcd on its worker thread.
 * Nothing here calls etcd on the loop thread.
 *
 * An etcd watch on volumes/ keeps cached records fresh between requests: the
 * watch thread parses the record and queues it; the loop thread applies the
 * queue when woken (lib/common/notify.h). A watched record of a volume in
 * the negative cache replaces the negative entry (no etcd call). When etcd
 * compacted the revision the watch needed (it was away), the watch lists
 * volumes/ again (RESYNC_BEGIN, a PUT per record, RESYNC_END): a cached
 * volume that listing did not name was deleted meanwhile and is forgotten. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/notify.h"
#include "storage_io.h"

#define VOLS_BUCKETS 256u
#define MISS_BUCKETS 256u

/* A watch event handed from the watch thread to the loop thread. */
struct vols_event {
	struct vols_event *next;
	uint64_t num;
	bool deleted;
	uint8_t resync;	    /* VOLS_RESYNC_BEGIN / _END (no record), else 0 */
	struct zl_volume v; /* PUT: the parsed record */
};

enum { VOLS_RESYNC_BEGIN = 1, VOLS_RESYNC_END = 2 };

/* A load of the loader thread: queued by the loop, answered in rc / v. */
struct vols_job {
	struct zl_work w;
	struct zl_storage_vols *vc;
	uint64_t num;
	bool refresh; /* of a cached volume; else a miss */
	int rc;
	struct zl_volume v;
};

/* A volume the request path asked for that is not cached: loading, or known
 * absent (err) until expires_ms. */
struct vols_miss {
	struct vols_miss *next;
	uint64_t num;
	uint64_t expires_ms;
	int err;
	bool loading;
	bool deleted; /* loading, and the watch saw the record go meanwhile */
};

static struct zl_storage_vol **vols_slot(struct zl_storage_vols *vc, uint64_t num);

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
	/* Loop thread: the negative cache and loads in flight. */
	struct vols_miss *miss[MISS_BUCKETS];
	uint32_t n_miss;
	struct zl_storage_vols_limits lim;
	double tokens; /* load bucket */
	uint64_t tokens_ms;
	uint32_t n_jobs; /* queued or running loads */
	struct zl_storage_vols_stats stats;
	/* The loader thread with its own etcd handle. */
	struct zl_etcd *letcd;
	struct zl_worker *loader;
	bool stopping; /* zl_storage_vols_destroy: answers are dropped */
	/* Called when a record enters the cache or loses snapshots. */
	zl_storage_vols_snaps_fn snaps_fn;
	void *snaps_arg;
	/* Called for every watched record (zl_storage_vols_on_watch). */
	zl_storage_vols_snaps_fn watch_fn;
	void *watch_arg;
	char self[ZL_NODE_ID_MAX]; /* this node's id (zl_storage_vol_me), "" unset */
	char self_inc[ZL_META_ID_SIZE];    /* ... its incarnation */
	uint32_t resync_gen;		   /* resyncs of the watch begun (loop thread) */
	struct zl_ratelimit warn_rl; /* loader thread */
};

static void vols_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_storage_vols *vc = arg;
	const char *id = strrchr(kv->key, '/');
	bool resync = type == ZL_ETCD_EV_RESYNC_BEGIN || type == ZL_ETCD_EV_RESYNC_END;
	struct vols_event *ev;
	uint64_t num = 0;

	if (!resync && (!id || zl_vol_id_parse(id + 1, &num)))
		return;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return; /* a lost END: the cache keeps a deleted record, as before */
	ev->num = num;
	if (resync) {
		ev->resync = type == ZL_ETCD_EV_RESYNC_BEGIN ? VOLS_RESYNC_BEGIN : VOLS_RESYNC_END;
		goto queue;
	}
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
queue:
	pthread_mutex_lock(&vc->mu);
	*vc->ev_tail = ev;
	vc->ev_tail = &ev->next;
	pthread_mutex_unlock(&vc->mu);
	zl_notify_post(&vc->wake);
}

/* ---- negative cache (loop thread) ---- */

static struct vols_miss **miss_slot(struct zl_storage_vols *vc, uint64_t num)
{
	struct vols_miss **pp = &vc->miss[zl_hash64(num) % MISS_BUCKETS];

	while (*pp && (*pp)->num != num)
		pp = &(*pp)->next;
	return pp;
}

static void miss_drop(struct zl_storage_vols *vc, struct vols_miss **pp)
{
	struct vols_miss *m = *pp;

	*pp = m->next;
	free(m);
	vc->n_miss--;
}

/* Drops the expired entries (not the loading ones); on a full table only. */
static void miss_sweep(struct zl_storage_vols *vc, uint64_t now)
{
	for (uint32_t b = 0; b < MISS_BUCKETS; b++) {
		struct vols_miss **pp = &vc->miss[b];

		while (*pp) {
			if (!(*pp)->loading && (*pp)->expires_ms <= now)
				miss_drop(vc, pp);
			else
				pp = &(*pp)->next;
		}
	}
}

/* The entry of num, created when absent and there is room; NULL when full. */
static struct vols_miss *miss_get(struct zl_storage_vols *vc, uint64_t num, uint64_t now)
{
	struct vols_miss **pp = miss_slot(vc, num), *m;

	if (*pp)
		return *pp;
	if (vc->n_miss >= vc->lim.miss_max) {
		miss_sweep(vc, now);
		if (vc->n_miss >= vc->lim.miss_max)
			return NULL;
		pp = miss_slot(vc, num);
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->num = num;
	*pp = m;
	vc->n_miss++;
	return m;
}

/* Takes one token of the load bucket: true when a load may start now. */
static bool vols_take_token(struct zl_storage_vols *vc, uint64_t now)
{
	double per_ms = vc->lim.load_per_sec / 1000.0;

	if (now > vc->tokens_ms) {
		vc->tokens += (double)(now - vc->tokens_ms) * per_ms;
		if (vc->tokens > vc->lim.load_burst)
			vc->tokens = vc->lim.load_burst;
		vc->tokens_ms = now;
	}
	if (vc->tokens < 1.0 || vc->n_jobs >= vc->lim.load_queue)
		return false;
	vc->tokens -= 1.0;
	return true;
}

/* ---- loader thread ---- */

/* Loads volume num from etcd into a new record (e: the caller's handle). */
static int vols_load(struct zl_storage_vols *vc, struct zl_etcd *e, uint64_t num,
		     struct zl_volume *v, struct zl_ratelimit *rl)
{
	char id[ZL_VOL_ID_LEN + 1], why[256] = "";
	int rc;

	zl_vol_id_format(num, id);
	rc = zl_meta_volume_get(e, vc->prefix, id, v);
	if (rc && rc != -ZL_ERR_NOT_FOUND && (!rl || zl_ratelimit_ok(rl, 1))) {
		ZL_LOG_WARN("storage", "loading volume record failed: vol=%s err=%s (%s)%s", id,
			    zl_errname(rc), zl_etcd_last_error(),
			    rl ? " (one line per second at most)" : "");
	}
	if (!rc && (v->num != num || zl_meta_volume_check(v, why, sizeof(why)))) {
		ZL_LOG_ERR("storage", "volume record in etcd is inconsistent: vol=%s %s", id, why);
		zl_volume_fini(v);
		rc = -ZL_ERR_NOT_FOUND;
	}
	return rc;
}

static void vols_job_run(struct zl_work *w)
{
	struct vols_job *j = ZL_CONTAINER_OF(w, struct vols_job, w);
	struct zl_storage_vols *vc = j->vc;

	memset(&j->v, 0, sizeof(j->v));
	j->rc = vols_load(vc, vc->letcd, j->num, &j->v, &vc->warn_rl);
}

static void vols_job_done(struct zl_work *w);

/* Queues a load of num (loop thread). 0 or -ENOMEM. */
static int vols_job_queue(struct zl_storage_vols *vc, uint64_t num, bool refresh)
{
	struct vols_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->vc = vc;
	j->num = num;
	j->refresh = refresh;
	vc->n_jobs++;
	vc->stats.loads++;
	return zl_worker_submit(vc->loader, &j->w, vols_job_run, vols_job_done);
}

/* sv->me for the record just set in sv->v (the old one is freed). */
static void vols_me_fill(struct zl_storage_vols *vc, struct zl_storage_vol *sv)
{
	free(sv->me);
	sv->me = NULL;
	if (!vc->self[0] || !sv->v.n_slices)
		return;
	sv->me = malloc(sv->v.n_slices * sizeof(*sv->me));
	if (!sv->me)
		return; /* looked up per request (zl_storage_vol_me) */
	for (uint32_t i = 0; i < sv->v.n_slices; i++) {
		const struct zl_slice *s = &sv->v.slices[i];
		int idx = zl_slice_index_of(s, vc->self);

		sv->me[i].idx = (int8_t)idx;
		sv->me[i].ident_ok = zl_storage_ident_inc_ok(s, idx, vc->self_inc);
	}
}

int zl_storage_vol_me(const struct zl_storage_vol *sv, uint32_t slice, const char *node_id)
{
	return sv->me ? sv->me[slice].idx : zl_slice_index_of(&sv->v.slices[slice], node_id);
}

bool zl_storage_vol_ident_ok(const struct zl_storage_vol *sv, uint32_t slice, int idx,
			     const char *incarnation)
{
	return sv->me ? sv->me[slice].ident_ok
		      : zl_storage_ident_inc_ok(&sv->v.slices[slice], idx, incarnation);
}

void zl_storage_vols_set_self(struct zl_storage_vols *vc, const char *node_id,
			      const char *incarnation)
{
	snprintf(vc->self, sizeof(vc->self), "%s", node_id);
	snprintf(vc->self_inc, sizeof(vc->self_inc), "%s", incarnation);
}

static void vols_insert(struct zl_storage_vols *vc, struct zl_volume *v)
{
	struct zl_storage_vol **pp = vols_slot(vc, v->num);
	struct zl_storage_vol *sv;

	if (*pp) {
		zl_storage_vol_update(vc, v);
		return;
	}
	sv = calloc(1, sizeof(*sv));
	if (!sv) {
		zl_volume_fini(v);
		return;
	}
	sv->num = v->num;
	sv->seen_gen = vc->resync_gen;
	sv->v = *v;
	memset(v, 0, sizeof(*v));
	vols_me_fill(vc, sv);
	*pp = sv;
	if (vc->snaps_fn)
		vc->snaps_fn(vc->snaps_arg, &sv->v);
}

/* Marks num absent (err) for the negative cache's time. */
static void vols_negative(struct zl_storage_vols *vc, uint64_t num, int err, uint64_t now)
{
	struct vols_miss *m = miss_get(vc, num, now);

	if (!m)
		return;
	m->loading = false;
	m->err = err;
	m->expires_ms = now + (err == -ZL_ERR_NOT_FOUND ? vc->lim.neg_ms : vc->lim.err_ms);
}

/* Loop thread: applies what the loader answered. */
static void vols_job_done(struct zl_work *w)
{
	struct vols_job *j = ZL_CONTAINER_OF(w, struct vols_job, w);
	struct zl_storage_vols *vc = j->vc;
	uint64_t now = zl_now_ms();
	struct zl_storage_vol **pp;
	struct vols_miss **mp;
	bool deleted;

	vc->n_jobs--;
	if (w->cancelled || vc->stopping)
		goto out;
	pp = vols_slot(vc, j->num);
	mp = miss_slot(vc, j->num);
	deleted = *mp && (*mp)->deleted;
	if (*pp)
		(*pp)->refreshing = false;
	if (*mp)
		miss_drop(vc, mp);
	if (!j->rc && deleted) {
		/* Read before the watch saw it deleted. */
		vols_negative(vc, j->num, -ZL_ERR_NOT_FOUND, now);
	} else if (!j->rc) {
		vols_insert(vc, &j->v);
	} else if (!j->refresh && *pp) {
		/* A miss the watch answered first (a volume created after the
		 * load read): the watched record stands. */
	} else if (j->rc == -ZL_ERR_NOT_FOUND || !*pp) {
		/* Absent (a cached one was deleted), or unreachable for a
		 * volume we do not hold: remember it. */
		zl_storage_vol_forget(vc, j->num);
		vols_negative(vc, j->num, j->rc, now);
	}
out:
	zl_volume_fini(&j->v);
	free(j);
}

/* ---- watch events (loop thread) ---- */

/* The end of a resync: cached volumes its listing did not name are gone. */
static void vols_resync_sweep(struct zl_storage_vols *vc)
{
	uint32_t n = 0;

	for (uint32_t b = 0; b < VOLS_BUCKETS; b++) {
		struct zl_storage_vol *sv = vc->buckets[b];

		while (sv) {
			struct zl_storage_vol *next = sv->next;

			if (sv->seen_gen != vc->resync_gen) {
				ZL_LOG_INFO("storage",
					    "volume %016" PRIx64 " was deleted while the watch "
					    "was away: forgotten",
					    sv->num);
				zl_storage_vol_forget(vc, sv->num);
				n++;
			}
			sv = next;
		}
	}
	ZL_LOG_INFO("storage", "volume records listed again after an etcd compaction: %u gone", n);
}

static void vols_wake_cb(void *arg)
{
	struct zl_storage_vols *vc = arg;
	uint64_t now = zl_now_ms();
	struct vols_event *ev;

	pthread_mutex_lock(&vc->mu);
	ev = vc->ev_head;
	vc->ev_head = NULL;
	vc->ev_tail = &vc->ev_head;
	pthread_mutex_unlock(&vc->mu);
	while (ev) {
		struct vols_event *next = ev->next;
		struct vols_miss **mp = miss_slot(vc, ev->num);

		vc->stats.events++;
		if (ev->resync == VOLS_RESYNC_BEGIN) {
			vc->resync_gen++;
		} else if (ev->resync == VOLS_RESYNC_END) {
			vols_resync_sweep(vc);
		} else if (ev->deleted) {
			zl_storage_vol_forget(vc, ev->num);
			if (*mp && (*mp)->loading)
				(*mp)->deleted = true;
			else if (*mp)
				vols_negative(vc, ev->num, -ZL_ERR_NOT_FOUND, now);
		} else {
			if (vc->watch_fn)
				vc->watch_fn(vc->watch_arg, &ev->v);
			if (*mp) {
				/* Asked for (absent, or a load on its way): here
				 * it is. A load answering later keeps the newer
				 * record. */
				if (!(*mp)->loading)
					miss_drop(vc, mp);
				vols_insert(vc, &ev->v);
			} else {
				zl_storage_vol_update(vc, &ev->v);
			}
			if (*vols_slot(vc, ev->num))
				(*vols_slot(vc, ev->num))->seen_gen = vc->resync_gen;
		}
		zl_volume_fini(&ev->v);
		free(ev);
		ev = next;
	}
}

/* ---- create / destroy ---- */

void zl_storage_vols_limits_default(struct zl_storage_vols_limits *l)
{
	*l = (struct zl_storage_vols_limits){
	    .neg_ms = 5000,
	    .err_ms = 1000,
	    .load_per_sec = 100,
	    .load_burst = 200,
	    .load_queue = 64,
	    .refresh_ms = 250,
	    .miss_max = 8192,
	};
}

int zl_storage_vols_create(struct zl_loop *loop, struct zl_etcd *etcd,
			   const struct zl_etcd_opts *eo, const char *prefix,
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
	zl_storage_vols_limits_default(&vc->lim);
	vc->tokens = vc->lim.load_burst;
	vc->tokens_ms = zl_now_ms();
	rc = zl_notify_init(&vc->wake, loop, vols_wake_cb, vc);
	if (rc)
		goto out_free;
	/* Without options (tests) the loader shares the loop's handle. */
	rc = eo ? zl_etcd_create(eo, &vc->letcd) : 0;
	if (rc)
		goto out_free;
	rc = zl_worker_create(loop, &vc->loader);
	if (rc)
		goto out_free;
	snprintf(key, sizeof(key), "%svolumes/", prefix);
	rc = etcd ? zl_etcd_watch_prefix(etcd, key, 0, vols_watch_cb, vc, &vc->watch) : 0;
	if (rc) {
		ZL_LOG_WARN("storage",
			    "cannot watch %s: %s (volume records refresh on demand only)", key,
			    zl_errname(rc));
		rc = 0;
	}
	if (!vc->letcd)
		vc->letcd = etcd;
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
	vc->stopping = true;
	zl_worker_destroy(vc->loader); /* frees the loads still queued */
	if (vc->letcd && vc->letcd != vc->etcd)
		zl_etcd_destroy(vc->letcd);
	zl_notify_fini(&vc->wake);
	while (vc->ev_head) {
		struct vols_event *ev = vc->ev_head;

		vc->ev_head = ev->next;
		zl_volume_fini(&ev->v);
		free(ev);
	}
	pthread_mutex_destroy(&vc->mu);
	for (uint32_t i = 0; i < MISS_BUCKETS; i++)
		while (vc->miss[i])
			miss_drop(vc, &vc->miss[i]);
	for (uint32_t i = 0; i < VOLS_BUCKETS; i++) {
		while (vc->buckets[i]) {
			struct zl_storage_vol *sv = vc->buckets[i];

			vc->buckets[i] = sv->next;
			zl_volume_fini(&sv->v);
			free(sv->me);
			free(sv);
		}
	}
	free(vc);
}

void zl_storage_vols_set_limits(struct zl_storage_vols *vc, const struct zl_storage_vols_limits *l)
{
	vc->lim = *l;
	vc->tokens = l->load_burst;
}

void zl_storage_vols_stats(const struct zl_storage_vols *vc, struct zl_storage_vols_stats *out)
{
	*out = vc->stats;
	out->negative = vc->n_miss;
}

/* ---- lookups ---- */

static struct zl_storage_vol **vols_slot_h(struct zl_storage_vols *vc, uint64_t num, uint64_t hash)
{
	struct zl_storage_vol **pp = &vc->buckets[hash % VOLS_BUCKETS];

	while (*pp && (*pp)->num != num)
		pp = &(*pp)->next;
	return pp;
}

static struct zl_storage_vol **vols_slot(struct zl_storage_vols *vc, uint64_t num)
{
	return vols_slot_h(vc, num, zl_hash64(num));
}

struct zl_storage_vol *zl_storage_vol_peek(struct zl_storage_vols *vc, uint64_t num)
{
	return *vols_slot(vc, num);
}

struct zl_storage_vol *zl_storage_vol_peek_h(struct zl_storage_vols *vc, uint64_t num,
					     uint64_t hash)
{
	return *vols_slot_h(vc, num, hash);
}

void zl_storage_vols_foreach(struct zl_storage_vols *vc,
			     void (*fn)(void *arg, const struct zl_storage_vol *sv), void *arg)
{
	for (uint32_t i = 0; i < VOLS_BUCKETS; i++)
		for (const struct zl_storage_vol *sv = vc->buckets[i]; sv; sv = sv->next)
			fn(arg, sv);
}

int zl_storage_vol_lookup(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out)
{
	return zl_storage_vol_lookup_h(vc, num, zl_hash64(num), out);
}

int zl_storage_vol_lookup_h(struct zl_storage_vols *vc, uint64_t num, uint64_t hash,
			    struct zl_storage_vol **out)
{
	struct zl_storage_vol **pp = vols_slot_h(vc, num, hash);
	uint64_t now;
	struct vols_miss *m;

	if (*pp) {
		*out = *pp;
		return 0;
	}
	now = zl_now_ms();
	m = *miss_slot(vc, num);
	if (m && m->loading)
		return -EINPROGRESS;
	if (m && m->expires_ms > now) {
		vc->stats.neg_hits++;
		return m->err;
	}
	if (!vols_take_token(vc, now)) {
		vc->stats.throttled++;
		return -ZL_ERR_BUSY;
	}
	m = miss_get(vc, num, now);
	if (!m || vols_job_queue(vc, num, false)) {
		vc->stats.throttled++;
		return -ZL_ERR_BUSY;
	}
	m->loading = true;
	m->deleted = false;
	return -EINPROGRESS;
}

struct zl_storage_vol *zl_storage_vol_cached(struct zl_storage_vols *vc, uint64_t num)
{
	return *vols_slot(vc, num);
}

int zl_storage_vol_refresh(struct zl_storage_vols *vc, struct zl_storage_vol *sv)
{
	uint64_t now;

	if (sv->refreshing)
		return -EINPROGRESS;
	now = zl_now_ms();
	if (now - sv->refresh_ms < vc->lim.refresh_ms || !vols_take_token(vc, now) ||
	    vols_job_queue(vc, sv->num, true)) {
		vc->stats.throttled++;
		return -ZL_ERR_STALE;
	}
	sv->refresh_ms = now;
	sv->refreshing = true;
	vc->stats.refreshes++;
	return -EINPROGRESS;
}

/* Whether a snapshot of old is not in fresh (both ascending). */
static bool vols_snaps_lost(const struct zl_volume *old, const struct zl_volume *fresh)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < old->n_snaps; i++) {
		while (j < fresh->n_snaps && fresh->snaps[j] < old->snaps[i])
			j++;
		if (j == fresh->n_snaps || fresh->snaps[j] != old->snaps[i])
			return true;
	}
	return false;
}

void zl_storage_vol_update(struct zl_storage_vols *vc, struct zl_volume *fresh)
{
	struct zl_storage_vol **pp = vols_slot(vc, fresh->num);
	bool lost;

	if (!*pp || (*pp)->v.mod_rev >= fresh->mod_rev || !fresh->slices) {
		zl_volume_fini(fresh);
		memset(fresh, 0, sizeof(*fresh));
		return;
	}
	lost = vols_snaps_lost(&(*pp)->v, fresh);
	zl_volume_fini(&(*pp)->v);
	(*pp)->v = *fresh;
	memset(fresh, 0, sizeof(*fresh));
	vols_me_fill(vc, *pp);
	if (lost && vc->snaps_fn)
		vc->snaps_fn(vc->snaps_arg, &(*pp)->v);
}

void zl_storage_vols_on_snaps(struct zl_storage_vols *vc, zl_storage_vols_snaps_fn fn, void *arg)
{
	vc->snaps_fn = fn;
	vc->snaps_arg = arg;
}

void zl_storage_vols_on_watch(struct zl_storage_vols *vc, zl_storage_vols_snaps_fn fn, void *arg)
{
	vc->watch_fn = fn;
	vc->watch_arg = arg;
}

void zl_storage_vol_forget(struct zl_storage_vols *vc, uint64_t num)
{
	struct zl_storage_vol **pp = vols_slot(vc, num);
	struct zl_storage_vol *sv = *pp;

	if (!sv)
		return;
	*pp = sv->next;
	zl_volume_fini(&sv->v);
	free(sv->me);
	free(sv);
}
