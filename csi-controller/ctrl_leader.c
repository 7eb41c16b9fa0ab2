/* Background thread: etcd health for Probe, the replica lease, leader
 * election and the leader's jobs.
 *
 * Every replica serves every CSI call; the election decides only which one
 * runs the jobs that must run once: garbage collection, and the membership
 * manager (lib/manager, its own thread, which asks ctrl_leader_is before
 * every pass and ctrl_leader_may_write before every write). It never gates a
 * CSI call: the CSI sidecars elect their own leaders on Kubernetes leases,
 * independently, and may land on any replica.
 *
 * Each replica holds one etcd lease (TTL CTRL_LEADER_TTL_S), renewed every
 * few seconds; its operation locks live on it. Election: the replica that
 * creates <prefix>leader/controller (transaction "create_revision == 0") on
 * its lease is the leader. Others retry every second, so they take over
 * within a second of the key disappearing (lease revoked on shutdown, or
 * expired after a crash). A leader that could not renew for
 * CTRL_LEADER_TTL_S - 2 seconds steps down on its own before the lease can
 * expire, so two replicas never both believe they lead. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctrl.h"

#define BG_PERIOD_MS	 1000
#define LEASE_RENEW_MS	 3000
#define LEASE_STEPDOWN_MS ((CTRL_LEADER_TTL_S - 2) * 1000)

static void leader_key(const struct ctrl *c, char *out, size_t len)
{
	snprintf(out, len, "%sleader/controller", c->prefix);
}

static void leader_set(struct ctrl *c, bool leader, const char *holder, const char *why)
{
	bool changed;

	pthread_mutex_lock(&c->leader_lock);
	changed = leader != c->is_leader;
	if (changed) {
		if (leader)
			ZL_LOG_INFO(CTRL_LOG, "became leader id=%s lease=%" PRId64, c->leader_id,
				    c->lease);
		else
			ZL_LOG_WARN(CTRL_LOG, "lost leadership id=%s reason=\"%s\"", c->leader_id,
				    why);
	}
	if (!leader && holder && strcmp(holder, c->holder) && strcmp(holder, c->leader_id))
		ZL_LOG_INFO(CTRL_LOG, "leader is id=%s", holder[0] ? holder : "(none)");
	c->is_leader = leader;
	if (holder)
		snprintf(c->holder, sizeof(c->holder), "%s", holder);
	if (leader)
		c->lease_ok_ms = zl_now_ms();
	pthread_mutex_unlock(&c->leader_lock);
	/* The manager (a job of the leader on its own thread) acts at once. */
	if (changed)
		zl_manager_kick(c->mgr);
}

/* The replica lease: granted at start, renewed every LEASE_RENEW_MS, granted
 * anew once it expired. Holds the operation locks (every replica) and the
 * leader key (the leader). 0 or an etcd error. */
static int lease_keep(struct ctrl *c)
{
	int64_t ttl = 0, lease;
	uint64_t ok_ms;
	int rc;

	pthread_mutex_lock(&c->leader_lock);
	lease = c->lease;
	ok_ms = c->lease_ok_ms;
	pthread_mutex_unlock(&c->leader_lock);
	if (lease && zl_now_ms() - ok_ms < LEASE_RENEW_MS)
		return 0;
	if (lease) {
		rc = zl_etcd_lease_keepalive(c->etcd_bg, lease, &ttl);
		if (rc == 0 && ttl > 0) {
			pthread_mutex_lock(&c->leader_lock);
			c->lease_ok_ms = zl_now_ms();
			pthread_mutex_unlock(&c->leader_lock);
			return 0;
		}
		if (rc && rc != -ZL_ERR_NOT_FOUND) {
			if (c->election && zl_now_ms() - ok_ms > LEASE_STEPDOWN_MS)
				leader_set(c, false, "", "cannot renew the lease");
			return rc;
		}
		/* Expired: the locks and the leader key on it are gone. */
		ZL_LOG_WARN(CTRL_LOG, "lease expired id=%s lease=%" PRId64 ": taking a new one",
			    c->leader_id, lease);
		if (c->election)
			leader_set(c, false, "", "the lease expired");
		pthread_mutex_lock(&c->leader_lock);
		c->lease = 0;
		pthread_mutex_unlock(&c->leader_lock);
	}
	rc = zl_etcd_lease_grant(c->etcd_bg, CTRL_LEADER_TTL_S, &lease);
	if (rc)
		return rc;
	pthread_mutex_lock(&c->leader_lock);
	c->lease = lease;
	c->lease_ok_ms = zl_now_ms();
	pthread_mutex_unlock(&c->leader_lock);
	return 0;
}

int64_t ctrl_lease(struct ctrl *c)
{
	int64_t lease;

	pthread_mutex_lock(&c->leader_lock);
	/* Renewal overdue: it may expire any moment, do not lock on it. */
	lease = zl_now_ms() - c->lease_ok_ms <= LEASE_STEPDOWN_MS ? c->lease : 0;
	pthread_mutex_unlock(&c->leader_lock);
	return lease;
}

/* One campaign round of a follower. */
static int leader_campaign(struct ctrl *c)
{
	struct zl_etcd_txn_result res = {0};
	char key[160], holder[CTRL_ID_MAX] = "";
	const struct zl_etcd_kv *kv = NULL;
	bool ok = false;
	int rc;

	leader_key(c, key, sizeof(key));
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	const struct zl_etcd_op put = {.kind = ZL_ETCD_OP_PUT,
				       .key = key,
				       .value = c->leader_id,
				       .value_len = strlen(c->leader_id),
				       .lease = c->lease};
	const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = key};
	rc = zl_etcd_txn(c->etcd_bg, &cmp, 1, &put, 1, &get, 1, &ok, &res);
	if (rc)
		return rc;
	if (ok) {
		zl_etcd_txn_result_fini(&res);
		leader_set(c, true, c->leader_id, NULL);
		return 0;
	}
	if (res.n_gets && res.gets[0].n)
		kv = &res.gets[0].kvs[0];
	if (kv) {
		snprintf(holder, sizeof(holder), "%.*s", (int)ZL_MIN(kv->value_len, sizeof(holder) - 1),
			 kv->value);
		/* The key is ours on our live lease: we stepped down while
		 * etcd did not answer (LEASE_STEPDOWN_MS) but the lease
		 * outlived the outage. No other replica can hold the key while
		 * that lease lives: lead again (without this the manager
		 * stayed stopped for good after an etcd pause). */
		if (!strcmp(holder, c->leader_id) && kv->lease == c->lease) {
			zl_etcd_txn_result_fini(&res);
			leader_set(c, true, c->leader_id, NULL);
			return 0;
		}
		/* Our own identity on an older lease (restarted with the same
		 * --leader-id): move the key onto our lease at once. */
		if (!strcmp(holder, c->leader_id) && kv->lease != c->lease) {
			const struct zl_etcd_cmp same = {.key = key,
							 .target = ZL_ETCD_CMP_MOD,
							 .result = ZL_ETCD_EQUAL,
							 .rev = kv->mod_rev};
			ok = false;
			rc = zl_etcd_txn(c->etcd_bg, &same, 1, &put, 1, NULL, 0, &ok, NULL);
			if (!rc && ok) {
				zl_etcd_txn_result_fini(&res);
				leader_set(c, true, c->leader_id, NULL);
				return 0;
			}
		}
	}
	zl_etcd_txn_result_fini(&res);
	leader_set(c, false, holder, "another replica holds the key");
	return 0;
}

/* One round of the leader: check that the key is still ours. */
static int leader_hold(struct ctrl *c)
{
	struct zl_etcd_kv kv;
	char key[160];
	int rc;

	leader_key(c, key, sizeof(key));
	rc = zl_etcd_get(c->etcd_bg, key, &kv);
	if (rc == -ZL_ERR_NOT_FOUND) {
		leader_set(c, false, "", "the leader key disappeared");
		return 0;
	}
	if (rc)
		return rc;
	if (kv.lease != c->lease || kv.value_len != strlen(c->leader_id) ||
	    memcmp(kv.value, c->leader_id, kv.value_len))
		leader_set(c, false, "", "the leader key belongs to someone else");
	zl_etcd_kv_fini(&kv);
	return 0;
}

/* The jobs that must run on one replica only. */
static void leader_jobs(struct ctrl *c)
{
	uint64_t now = zl_now_ms();
	int rc;

	if (c->gc_last_ms && now - c->gc_last_ms < (uint64_t)c->gc_interval_s * 1000)
		return;
	c->gc_last_ms = now;
	rc = ctrl_gc_run(c);
	if (rc)
		ZL_LOG_WARN(CTRL_LOG, "garbage collection failed err=%s detail=\"%s\": next try in "
			    "%u s", zl_errname(rc), zl_etcd_last_error(), c->gc_interval_s);
}

static void bg_round(struct ctrl *c)
{
	bool leader;
	int rc;

	rc = lease_keep(c);
	if (!rc && c->election) {
		pthread_mutex_lock(&c->leader_lock);
		leader = c->is_leader;
		pthread_mutex_unlock(&c->leader_lock);
		rc = leader ? leader_hold(c) : leader_campaign(c);
	} else if (!rc) {
		rc = zl_etcd_ping(c->etcd_bg);
	}
	if (rc) {
		static struct zl_ratelimit rl;

		if (zl_ratelimit_ok(&rl, 1))
			ZL_LOG_WARN(CTRL_LOG, "etcd unreachable err=%s detail=\"%s\"",
				    zl_errname(rc), zl_etcd_last_error());
		return;
	}
	atomic_store(&c->etcd_ok_ms, zl_now_ms());
	if (ctrl_leader_is(c))
		leader_jobs(c);
}

void *ctrl_bg_main(void *arg)
{
	struct ctrl *c = arg;
	struct timespec ts;

	for (;;) {
		bg_round(c);
		atomic_store(&c->bg_round_ms, zl_now_ms());
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += BG_PERIOD_MS / 1000;
		pthread_mutex_lock(&c->bg_lock);
		while (!c->stop && pthread_cond_timedwait(&c->bg_cond, &c->bg_lock, &ts) != ETIMEDOUT)
			;
		if (c->stop) {
			pthread_mutex_unlock(&c->bg_lock);
			break;
		}
		pthread_mutex_unlock(&c->bg_lock);
	}
	return NULL;
}

bool ctrl_leader_is(struct ctrl *c)
{
	bool leader;

	pthread_mutex_lock(&c->leader_lock);
	/* Renewal overdue: the lease may expire any moment, act as a follower. */
	leader = c->is_leader && zl_now_ms() - c->lease_ok_ms <= LEASE_STEPDOWN_MS;
	pthread_mutex_unlock(&c->leader_lock);
	return leader;
}

/* Lease age up to which a write sent now lands before the lease can expire
 * (one second of margin for the keepalive's own round trip). */
#define LEASE_WRITE_MS (CTRL_LEADER_TTL_S * 1000 - CTRL_ETCD_TIMEOUT_MS - 1000)
_Static_assert(LEASE_WRITE_MS > LEASE_RENEW_MS, "renewals must keep the leader writing");

bool ctrl_leader_may_write(struct ctrl *c)
{
	bool ok;

	pthread_mutex_lock(&c->leader_lock);
	ok = c->is_leader && zl_now_ms() - c->lease_ok_ms <= LEASE_WRITE_MS;
	pthread_mutex_unlock(&c->leader_lock);
	return ok;
}

void ctrl_leader_release(struct ctrl *c)
{
	int64_t lease;

	pthread_mutex_lock(&c->leader_lock);
	lease = c->lease;
	c->lease = 0;
	c->is_leader = false;
	pthread_mutex_unlock(&c->leader_lock);
	if (lease && zl_etcd_lease_revoke(c->etcd_bg, lease) == 0)
		ZL_LOG_INFO(CTRL_LOG, "released leadership id=%s", c->leader_id);
}
