/* The snapshot switch of the client that writes a volume (docs/SNAPSHOTS.md
 * §3). Only this client knows which writes it acknowledged, so a snapshot of
 * a served volume is taken here:
 *
 *   notify (watch of snapreqs/<vol>/) -> take (worker: list the pending
 *   requests, zl_meta_snap_create each) -> switch (loop: vol->snap_seq =
 *   the new sequence; every write sent from now on carries it) -> answer
 *   (worker: the requests become "done" with their sequence, or "failed")
 *
 * A write acknowledged before the requester asked carried a sequence below
 * the snapshot's and is in it; a write issued after the requester saw
 * "done" carries the snapshot's sequence or more and is not.
 *
 * A group's request (§5, lib/meta/meta_snap_group.c) goes in two phases:
 *
 *   IDLE -> hold request seen: the loop holds new writes (HOLDING), the
 *   worker answers "held" (HELD) -> the group's transaction turned it into
 *   "switch": the worker answers "done", the loop takes the sequence and
 *   releases (IDLE). The request deleted (the group failed or is over):
 *   the worker reads the volume record and the loop releases with its
 *   sequence. Held for SNAP_HOLD_MAX_MS: the worker marks the request
 *   "failed" (compare-and-swap at its revision, so the transaction, which
 *   compares that revision, can no longer happen) and only then releases.
 *
 * The state
 * (struct client_snapserve) outlives its volume while a job is on the
 * worker: a closed volume is only forgotten (ss->v NULL), and the last
 * job's done frees the state. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define SNAP_BATCH	 8     /* requests taken per worker job */
#define SNAP_LEASE_S	 10    /* TTL of the snapwriters/ key's lease */
#define SNAP_RENEW_MS	 3000u /* keep-alive period */
#define SNAP_RANGE_LIMIT 256   /* request keys read per take */
#define SNAP_HOLD_MAX_MS 10000u /* a group's hold ends by itself after this */

/* The group hold's states (loop). */
enum snap_grp_state {
	SNAP_GRP_IDLE,	  /* no hold */
	SNAP_GRP_HOLDING, /* writes held, "held" not answered yet */
	SNAP_GRP_HELD,	  /* "held" answered: waiting for switch or deletion */
};

/* What a group job does (worker) and what it found. */
enum snap_grp_op {
	SNAP_GRP_OP_HOLD,    /* answer "held" */
	SNAP_GRP_OP_RESOLVE, /* the request changed: switch, gone, or give up */
};
enum snap_grp_result {
	SNAP_GRP_STAY,	  /* still held */
	SNAP_GRP_RELEASE, /* release with grp_seq */
};

struct snap_item {
	char id[ZL_SNAP_ID_LEN + 3];
	char name[256];
	uint32_t seq; /* rc 0: the snapshot's sequence */
	int rc;
};

struct client_snapserve {
	struct zl_client *c;
	struct zl_vol *v; /* NULL once the volume closed */
	char vol_id[24];
	struct zl_etcd_watch *watch;
	struct zl_notify notify;
	bool again; /* requests came while a take or answer ran */
	struct zl_work take_w, answer_w, renew_w, bye_w;
	struct zl_timer renew_timer;
	bool renew_on;
	int64_t lease; /* the worker's while a job runs */
	/* take -> answer: the requests of one round */
	struct snap_item items[SNAP_BATCH];
	size_t n_items;
	bool more; /* take left pending requests for another round */
	/* The group hold (loop), and what the take saw of it (worker) */
	enum snap_grp_state grp;
	char grp_id[ZL_SNAP_ID_LEN + 3]; /* the held request */
	char grp_name[64];		 /* its group, for log lines */
	struct zl_timer grp_timer;
	bool grp_timer_on, grp_giveup;
	struct zl_work grp_w;
	enum snap_grp_op grp_op; /* in: the job */
	bool grp_op_giveup;
	enum snap_grp_result grp_res; /* out */
	uint32_t grp_seq;
	char take_grp_id[ZL_SNAP_ID_LEN + 3]; /* in: the held request, "" if idle */
	char take_hold_id[ZL_SNAP_ID_LEN + 3]; /* out: a hold request to take */
	char take_hold_group[64];
	bool take_grp_changed; /* out: the held request is gone or not "held" */
};

static bool snap_busy(const struct client_snapserve *ss)
{
	return ss->take_w.busy || ss->answer_w.busy || ss->renew_w.busy || ss->bye_w.busy ||
	       ss->grp_w.busy;
}

/* Loop thread: frees ss once its volume closed and no job holds it. */
static void snap_maybe_free(struct client_snapserve *ss)
{
	if (!ss->v && !snap_busy(ss))
		free(ss);
}

static void snap_kick(struct client_snapserve *ss);

/* Worker: the pending requests (up to SNAP_BATCH), each taken. */
static void snap_take_run(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, take_w);
	struct zl_client *c = ss->c;
	struct zl_etcd_range r = {0};
	char pfx[512];
	int rc;

	ss->n_items = 0;
	ss->more = false;
	ss->take_hold_id[0] = '\0';
	ss->take_grp_changed = ss->take_grp_id[0] != '\0';
	if (zl_meta_snapreq_prefix(pfx, sizeof(pfx), c->prefix, ss->vol_id))
		return;
	rc = zl_etcd_range_prefix(c->etcd, pfx, NULL, SNAP_RANGE_LIMIT, &r);
	if (rc) {
		ZL_LOG_WARN(CLIENT_LOG,
			    "cannot list snapshot requests: vol=%s err=%s detail=%s; retried on the "
			    "next request",
			    ss->vol_id, zl_errname(rc), zl_etcd_last_error());
		ss->take_grp_changed = false;
		return;
	}
	for (size_t i = 0; i < r.n; i++) {
		struct zl_snapreq q;
		struct zl_snapshot s;
		struct snap_item *it;

		if (zl_meta_snapreq_from_kv(&r.kvs[i], &q))
			continue;
		if (ss->take_grp_id[0] && !strcmp(q.id, ss->take_grp_id)) {
			ss->take_grp_changed = strcmp(q.state, ZL_SNAPREQ_HELD) != 0 &&
					       strcmp(q.state, ZL_SNAPREQ_HOLD) != 0;
			continue;
		}
		if (!ss->take_grp_id[0] && !ss->take_hold_id[0] &&
		    !strcmp(q.state, ZL_SNAPREQ_HOLD)) {
			snprintf(ss->take_hold_id, sizeof(ss->take_hold_id), "%s", q.id);
			snprintf(ss->take_hold_group, sizeof(ss->take_hold_group), "%s", q.group);
			continue;
		}
		if (strcmp(q.state, ZL_SNAPREQ_PENDING))
			continue;
		if (ss->n_items == SNAP_BATCH) {
			ss->more = true;
			break;
		}
		it = &ss->items[ss->n_items++];
		snprintf(it->id, sizeof(it->id), "%s", q.id);
		snprintf(it->name, sizeof(it->name), "%s", q.name);
		it->seq = 0;
		it->rc = zl_meta_snap_create(c->etcd, c->prefix, ss->vol_id, q.name, q.id, &s, NULL,
					     NULL);
		if (!it->rc)
			it->seq = s.seq;
	}
	zl_etcd_range_fini(&r);
}

/* Worker: "done" or "failed" for each request of the round, unless the
 * requester gave up and deleted it meanwhile. */
static void snap_answer_run(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, answer_w);
	struct zl_client *c = ss->c;

	for (size_t i = 0; i < ss->n_items; i++) {
		const struct snap_item *it = &ss->items[i];
		struct zl_snapreq q;
		int rc;

		if (zl_meta_snapreq_get(c->etcd, c->prefix, ss->vol_id, it->id, &q))
			continue;
		snprintf(q.state, sizeof(q.state), "%s",
			 it->rc ? ZL_SNAPREQ_FAILED : ZL_SNAPREQ_DONE);
		q.seq = it->rc ? 0 : it->seq;
		snprintf(q.error, sizeof(q.error), "%s", it->rc ? zl_errname(it->rc) : "");
		rc = zl_meta_snapreq_put(c->etcd, c->prefix, &q); /* at q.mod_rev */
		if (rc && rc != -ZL_ERR_CONFLICT) /* CONFLICT: the requester gave up */
			ZL_LOG_ERR(CLIENT_LOG,
				   "cannot answer snapshot request: vol=%s snap=%s err=%s; the "
				   "requester times out and retries",
				   ss->vol_id, it->id, zl_errname(rc));
	}
}

static void snap_answer_done(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, answer_w);

	if (!ss->v || w->cancelled) {
		snap_maybe_free(ss);
		return;
	}
	if (ss->again || ss->more) {
		ss->again = false;
		snap_kick(ss);
	}
}

/* ---- the group hold (§5) ---- */

/* Worker: the volume record's sequence (the release of a request that is
 * gone: if the group was taken, its sequence is there), 0 when unreadable
 * (the storage's SNAPSEQ answer then brings it). */
static uint32_t snap_grp_record_seq(struct client_snapserve *ss)
{
	struct zl_volume v = {0};
	uint32_t seq = 0;

	if (!zl_meta_volume_get(ss->c->etcd, ss->c->prefix, ss->vol_id, &v))
		seq = v.snap_seq;
	zl_volume_fini(&v);
	return seq;
}

/* Worker: answer "held", or settle a request that changed (switch: answer
 * "done"; gone: the record's sequence; give up: "failed" first). */
static void snap_grp_run(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, grp_w);
	struct zl_client *c = ss->c;
	struct zl_snapreq q;
	int rc;

	ss->grp_res = SNAP_GRP_STAY;
	ss->grp_seq = 0;
	for (int tries = 0; tries < 4; tries++) {
		rc = zl_meta_snapreq_get(c->etcd, c->prefix, ss->vol_id, ss->grp_id, &q);
		if (rc == -ZL_ERR_NOT_FOUND) {
			ss->grp_res = SNAP_GRP_RELEASE;
			ss->grp_seq = snap_grp_record_seq(ss);
			return;
		}
		if (rc) {
			if (ss->grp_op_giveup)
				continue; /* etcd away: the next try, then the timer again */
			return;
		}
		if (!strcmp(q.state, ZL_SNAPREQ_SWITCH)) {
			ss->grp_res = SNAP_GRP_RELEASE;
			ss->grp_seq = q.seq;
			snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_DONE);
			zl_meta_snapreq_put(c->etcd, c->prefix, &q); /* CONFLICT: it is over */
			return;
		}
		if (!strcmp(q.state, ZL_SNAPREQ_HOLD) && ss->grp_op == SNAP_GRP_OP_HOLD) {
			snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_HELD);
			rc = zl_meta_snapreq_put(c->etcd, c->prefix, &q); /* at q.mod_rev */
			if (!rc)
				return; /* held */
			continue;
		}
		if ((!strcmp(q.state, ZL_SNAPREQ_HOLD) || !strcmp(q.state, ZL_SNAPREQ_HELD)) &&
		    !ss->grp_op_giveup)
			return; /* still held */
		if (!strcmp(q.state, ZL_SNAPREQ_HOLD) || !strcmp(q.state, ZL_SNAPREQ_HELD)) {
			/* Give up: at the held revision, so the group's
			 * transaction (which compares it) cannot follow. */
			snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_FAILED);
			snprintf(q.error, sizeof(q.error), "%s", zl_errname(-ZL_ERR_TIMEOUT));
			rc = zl_meta_snapreq_put(c->etcd, c->prefix, &q);
			if (rc)
				continue; /* it changed: switch or gone, see again */
		}
		/* failed (by us) or done: release with the record's sequence */
		ss->grp_res = SNAP_GRP_RELEASE;
		ss->grp_seq = snap_grp_record_seq(ss);
		return;
	}
}

static void snap_grp_submit(struct client_snapserve *ss, enum snap_grp_op op, bool giveup);
static void snap_grp_start_timer(struct client_snapserve *ss, uint32_t ms);

static void snap_grp_done(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, grp_w);

	if (!ss->v || w->cancelled) {
		snap_maybe_free(ss);
		return;
	}
	if (ss->grp_res == SNAP_GRP_RELEASE) {
		if (ss->grp_timer_on)
			zl_timer_stop(ss->c->loop, &ss->grp_timer);
		ss->grp_timer_on = false;
		ss->grp = SNAP_GRP_IDLE;
		ss->grp_giveup = false;
		ZL_LOG_INFO(CLIENT_LOG, "group snapshot hold released: vol=%s group=%s snap=%s seq=%u",
			    ss->vol_id, ss->grp_name, ss->grp_id, ss->grp_seq);
		ss->grp_id[0] = '\0';
		client_vol_snap_release(ss->v, ss->grp_seq);
	} else if (ss->grp == SNAP_GRP_HOLDING) {
		ss->grp = SNAP_GRP_HELD;
	}
	if (ss->grp != SNAP_GRP_IDLE && ss->grp_giveup) {
		snap_grp_submit(ss, SNAP_GRP_OP_RESOLVE, true);
		return;
	}
	if (ss->again) { /* requests changed while the job ran */
		ss->again = false;
		snap_kick(ss);
	}
}

static void snap_grp_submit(struct client_snapserve *ss, enum snap_grp_op op, bool giveup)
{
	if (ss->grp_w.busy) {
		ss->grp_giveup |= giveup;
		ss->again = true;
		return;
	}
	ss->grp_op = op;
	ss->grp_op_giveup = giveup;
	if (zl_worker_submit(ss->c->worker, &ss->grp_w, snap_grp_run, snap_grp_done))
		ss->grp_giveup |= giveup; /* the timer tries again */
}

/* Loop: held too long (the requester is gone or slow): give up. */
static void snap_grp_timer_cb(void *arg)
{
	struct client_snapserve *ss = arg;

	ss->grp_timer_on = false;
	if (ss->grp == SNAP_GRP_IDLE)
		return;
	ZL_LOG_WARN(CLIENT_LOG,
		    "group snapshot hold of vol=%s group=%s not switched within %u ms: giving up, "
		    "writes released with the old sequence (the group fails)",
		    ss->vol_id, ss->grp_name, SNAP_HOLD_MAX_MS);
	ss->grp_giveup = true;
	snap_grp_submit(ss, SNAP_GRP_OP_RESOLVE, true);
	if (!ss->grp_w.busy) /* the worker refused: again later */
		snap_grp_start_timer(ss, 100);
}

static void snap_grp_start_timer(struct client_snapserve *ss, uint32_t ms)
{
	if (ss->grp_timer_on)
		zl_timer_stop(ss->c->loop, &ss->grp_timer);
	zl_timer_start(ss->c->loop, &ss->grp_timer, ms, 0, snap_grp_timer_cb, ss);
	ss->grp_timer_on = true;
}

/* Loop, after a take: start holding for a new group request, or settle the
 * held one that changed. */
static void snap_grp_after_take(struct client_snapserve *ss)
{
	if (ss->grp == SNAP_GRP_IDLE && ss->take_hold_id[0]) {
		snprintf(ss->grp_id, sizeof(ss->grp_id), "%s", ss->take_hold_id);
		snprintf(ss->grp_name, sizeof(ss->grp_name), "%s", ss->take_hold_group);
		client_vol_snap_hold(ss->v);
		ss->grp = SNAP_GRP_HOLDING;
		ZL_LOG_INFO(CLIENT_LOG, "group snapshot hold: vol=%s group=%s snap=%s: new writes wait",
			    ss->vol_id, ss->grp_name, ss->grp_id);
		snap_grp_start_timer(ss, SNAP_HOLD_MAX_MS);
		snap_grp_submit(ss, SNAP_GRP_OP_HOLD, false);
		return;
	}
	if (ss->grp == SNAP_GRP_HELD && ss->take_grp_changed)
		snap_grp_submit(ss, SNAP_GRP_OP_RESOLVE, false);
}

/* Loop: the switch, then the answers. */
static void snap_take_done(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, take_w);

	if (!ss->v || w->cancelled) {
		snap_maybe_free(ss);
		return;
	}
	snap_grp_after_take(ss);
	for (size_t i = 0; i < ss->n_items; i++) {
		const struct snap_item *it = &ss->items[i];

		if (it->rc) {
			ZL_LOG_ERR(CLIENT_LOG,
				   "snapshot request failed: vol=%s snap=%s name=%s err=%s (%s)",
				   ss->vol_id, it->id, it->name, zl_errname(it->rc),
				   zl_strerror(it->rc));
			continue;
		}
		client_vol_snap_switch(ss->v, it->seq);
		ZL_LOG_INFO(CLIENT_LOG, "snapshot taken: vol=%s snap=%s name=%s seq=%u", ss->vol_id,
			    it->id, it->name, it->seq);
	}
	if (ss->n_items) {
		zl_worker_submit(ss->c->worker, &ss->answer_w, snap_answer_run, snap_answer_done);
		return;
	}
	if (ss->again || ss->more) {
		ss->again = false;
		snap_kick(ss);
	}
}

static void snap_kick(struct client_snapserve *ss)
{
	if (!ss->v)
		return;
	if (ss->take_w.busy || ss->answer_w.busy || ss->grp_w.busy) {
		ss->again = true;
		return;
	}
	snprintf(ss->take_grp_id, sizeof(ss->take_grp_id), "%s",
		 ss->grp == SNAP_GRP_HELD ? ss->grp_id : "");
	if (zl_worker_submit(ss->c->worker, &ss->take_w, snap_take_run, snap_take_done))
		ss->again = true;
}

static void snap_notify_cb(void *arg)
{
	snap_kick(arg);
}

/* Watch thread: any change under snapreqs/<vol>/ makes the loop look. */
static void snap_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct client_snapserve *ss = arg;

	(void)kv;
	(void)type; /* a put (a request, an answer) or a delete (a group's end) */
	zl_notify_post(&ss->notify);
}

/* Worker: one keep-alive; an expired lease is granted again and the key put
 * on it. */
static void snap_renew_run(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, renew_w);
	struct zl_client *c = ss->c;
	int64_t left = 0;
	int rc;

	rc = zl_etcd_lease_keepalive(c->etcd, ss->lease, &left);
	if (!rc && left > 0)
		return;
	if (rc && rc != -ZL_ERR_NOT_FOUND)
		return; /* etcd is away: the next round tries again */
	rc = zl_etcd_lease_grant(c->etcd, SNAP_LEASE_S, &ss->lease);
	if (!rc)
		rc = zl_meta_snapwriter_put(c->etcd, c->prefix, ss->vol_id, c->id, ss->lease);
	if (rc)
		ZL_LOG_WARN(CLIENT_LOG,
			    "cannot renew snapwriters key: vol=%s err=%s; until it is back, zl "
			    "snapshot create takes snapshots without this client's switch",
			    ss->vol_id, zl_errname(rc));
	else
		ZL_LOG_INFO(CLIENT_LOG, "snapwriters key put again: vol=%s lease=%" PRId64,
			    ss->vol_id, ss->lease);
}

static void snap_renew_done(struct zl_work *w)
{
	snap_maybe_free(ZL_CONTAINER_OF(w, struct client_snapserve, renew_w));
}

static void snap_renew_timer_cb(void *arg)
{
	struct client_snapserve *ss = arg;

	/* A keep-alive still on its way (etcd slow): this round is skipped. */
	zl_worker_submit(ss->c->worker, &ss->renew_w, snap_renew_run, snap_renew_done);
}

int zl_vol_snap_serve(struct zl_vol *v)
{
	struct zl_client *c;
	struct client_snapserve *ss;
	struct zl_etcd_range look = {0};
	char pfx[512];
	int rc;

	if (!v || v->closing)
		return -ZL_ERR_INVAL;
	if (v->snap)
		return -ZL_ERR_BUSY;
	c = v->c;
	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->c = c;
	ss->v = v;
	snprintf(ss->vol_id, sizeof(ss->vol_id), "%s", v->meta.id);
	rc = zl_meta_snapreq_prefix(pfx, sizeof(pfx), c->prefix, ss->vol_id);
	if (rc)
		goto out_free;
	rc = zl_notify_init(&ss->notify, c->loop, snap_notify_cb, ss);
	if (rc)
		goto out_free;
	rc = zl_etcd_lease_grant(c->etcd, SNAP_LEASE_S, &ss->lease);
	if (rc)
		goto out_notify;
	rc = zl_meta_snapwriter_put(c->etcd, c->prefix, ss->vol_id, c->id, ss->lease);
	if (rc)
		goto out_lease;
	/* The watch starts at the revision after a look at the prefix (not
	 * "now": it connects on its own thread, later): a request put after
	 * the look is an event of the watch, one put before it is in the
	 * listing of the first round (snap_kick below), never in neither. */
	rc = zl_etcd_range_prefix(c->etcd, pfx, NULL, 1, &look);
	if (!rc)
		rc = zl_etcd_watch_prefix(c->etcd, pfx, look.revision + 1, snap_watch_cb, ss,
					  &ss->watch);
	zl_etcd_range_fini(&look);
	if (rc)
		goto out_lease;
	v->snap = ss;
	zl_timer_start(c->loop, &ss->renew_timer, SNAP_RENEW_MS, SNAP_RENEW_MS, snap_renew_timer_cb,
		       ss);
	ss->renew_on = true;
	snap_kick(ss);
	ZL_LOG_INFO(CLIENT_LOG, "taking snapshots of vol=%s: watching %s, client=%s", ss->vol_id,
		    pfx, c->id);
	return 0;

out_lease:
	zl_etcd_lease_revoke(c->etcd, ss->lease);
out_notify:
	zl_notify_fini(&ss->notify);
out_free:
	ZL_LOG_ERR(CLIENT_LOG,
		   "cannot take snapshots of vol=%s: err=%s detail=%s; is etcd reachable?",
		   ss->vol_id, zl_errname(rc), zl_etcd_last_error());
	free(ss);
	return rc;
}

/* Worker: the snapwriters key goes with its lease, so a requester takes the
 * next snapshot itself at once. */
static void snap_bye_run(struct zl_work *w)
{
	struct client_snapserve *ss = ZL_CONTAINER_OF(w, struct client_snapserve, bye_w);

	zl_etcd_lease_revoke(ss->c->etcd, ss->lease);
}

static void snap_bye_done(struct zl_work *w)
{
	snap_maybe_free(ZL_CONTAINER_OF(w, struct client_snapserve, bye_w));
}

void client_snap_stop(struct zl_vol *v)
{
	struct client_snapserve *ss = v->snap;

	if (!ss)
		return;
	v->snap = NULL;
	ss->v = NULL;
	zl_etcd_watch_cancel(ss->watch);
	ss->watch = NULL;
	zl_notify_fini(&ss->notify);
	if (ss->renew_on)
		zl_timer_stop(ss->c->loop, &ss->renew_timer);
	ss->renew_on = false;
	if (ss->grp_timer_on)
		zl_timer_stop(ss->c->loop, &ss->grp_timer);
	ss->grp_timer_on = false;
	/* A hold ends with the volume: its held I/O fails with the close. */
	v->snap_hold = false;
	client_list_init(&v->hold_wait);
	client_snap_publish(v, true);
	/* A keep-alive on its way may grant a new lease after this revoke;
	 * that one expires by itself. */
	if (zl_worker_submit(ss->c->worker, &ss->bye_w, snap_bye_run, snap_bye_done))
		snap_maybe_free(ss);
}

/* ---- followers (zl_vol_snap_follow) ---- */

/* Guards every lead's list of followers: taken to join or leave one and at
 * a release of a hold, never per I/O. */
static pthread_mutex_t follow_lock = PTHREAD_MUTEX_INITIALIZER;

uint32_t client_vol_seq(const struct zl_vol *v)
{
	uint32_t lead;

	if (!v->lead)
		return v->snap_seq;
	lead = atomic_load_explicit(&v->lead->pub_seq, memory_order_acquire);
	return lead > v->snap_seq ? lead : v->snap_seq;
}

bool client_vol_held(const struct zl_vol *v)
{
	return v->snap_hold ||
	       (v->lead && atomic_load_explicit(&v->lead->pub_hold, memory_order_acquire));
}

void client_snap_publish(struct zl_vol *v, bool released)
{
	/* The sequence before the hold's end: a follower that sees the hold
	 * gone sees the sequence it ended with. */
	atomic_store_explicit(&v->pub_seq, v->snap_seq, memory_order_release);
	atomic_store_explicit(&v->pub_hold, v->snap_hold, memory_order_release);
	if (!released)
		return;
	pthread_mutex_lock(&follow_lock);
	for (struct zl_vol *f = v->followers; f; f = f->follow_next)
		zl_notify_post(&f->follow_notify);
	pthread_mutex_unlock(&follow_lock);
}

/* Follower's loop: the lead released its hold; our held I/O starts, in
 * order, unless the lead holds again (its next release posts again). */
static void snap_follow_cb(void *arg)
{
	struct zl_vol *v = arg;

	if (!v->closing && !client_vol_held(v))
		client_vol_snap_release(v, 0);
}

int zl_vol_snap_follow(struct zl_vol *v, struct zl_vol *lead)
{
	int rc;

	if (!v || !lead || v == lead || v->lead || lead->lead || v->snap)
		return -ZL_ERR_INVAL;
	rc = zl_notify_init(&v->follow_notify, v->c->loop, snap_follow_cb, v);
	if (rc)
		return rc;
	pthread_mutex_lock(&follow_lock);
	v->lead = lead;
	v->follow_next = lead->followers;
	lead->followers = v;
	pthread_mutex_unlock(&follow_lock);
	return 0;
}

void client_snap_unfollow(struct zl_vol *v)
{
	if (!v->lead)
		return;
	pthread_mutex_lock(&follow_lock);
	for (struct zl_vol **p = &v->lead->followers; *p; p = &(*p)->follow_next) {
		if (*p == v) {
			*p = v->follow_next;
			break;
		}
	}
	pthread_mutex_unlock(&follow_lock);
	zl_notify_fini(&v->follow_notify);
	/* v->lead stays: a write still being sent reads it until the close
	 * ends (the lead outlives its followers). */
}
