/* The manager's thread: watches that wake it, a 1 s tick (or the next
 * grace or down-out expiry, when sooner), and its lifetime. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "manager_internal.h"

static void manager_wake(struct zl_manager *m)
{
	pthread_mutex_lock(&m->lock);
	m->dirty = true;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static void manager_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	(void)type;
	(void)kv;
	manager_wake(arg);
}

void zl_manager_kick(struct zl_manager *m)
{
	if (m)
		manager_wake(m);
}

static bool manager_leads(struct zl_manager *m)
{
	return m->cfg.leader_is(m->cfg.leader_arg);
}

bool manager_may_write(struct zl_manager *m)
{
	return m->cfg.leader_may_write(m->cfg.leader_arg);
}

void zl_manager_stats(struct zl_manager *m, struct zl_manager_stats *out)
{
	pthread_mutex_lock(&m->lock);
	*out = m->stats;
	pthread_mutex_unlock(&m->lock);
}

int manager_tick(struct zl_manager *m)
{
	bool leader, led;
	int rc;

	m->next_deadline_ms = 0;
	/* Whether this tick began as the leader's: an etcd that stopped
	 * answering fails the node read and, meanwhile, the lease. */
	led = manager_leads(m);
	rc = manager_nodes_refresh(m);
	leader = manager_leads(m);
	if (leader != m->was_leader)
		ZL_LOG_INFO(MGR_LOG, "manager: %s (grace=%u s down_out_interval=%u s)",
			    leader ? "deciding membership" : "stopped: not the leader", m->grace_s,
			    m->down_out_s);
	m->was_leader = leader;
	pthread_mutex_lock(&m->lock);
	m->stats.leading = leader;
	pthread_mutex_unlock(&m->lock);
	if (!rc && leader) {
		rc = manager_pass(m);
	} else if (rc && (leader || led)) {
		/* The pass could not start (the node table was not read): a
		 * failed pass all the same (manager_pass counts its own). */
		pthread_mutex_lock(&m->lock);
		m->stats.passes++;
		m->stats.pass_errors++;
		pthread_mutex_unlock(&m->lock);
	}
	if (rc == -ECANCELED) {
		ZL_LOG_WARN(MGR_LOG, "manager: stopped mid-pass: leadership lost");
		m->was_leader = false;
	} else if (rc) {
		static struct zl_ratelimit rl;

		if (zl_ratelimit_ok(&rl, 1))
			ZL_LOG_WARN(MGR_LOG, "manager: pass failed err=%s detail=\"%s\"",
				    zl_errname(rc), zl_etcd_last_error());
	}
	return rc;
}

static void *manager_main(void *arg)
{
	struct zl_manager *m = arg;

	for (;;) {
		uint64_t now = zl_now_ms(), wake = now + MGR_TICK_MS;
		struct timespec ts;

		if (m->next_deadline_ms > now && m->next_deadline_ms < wake)
			wake = m->next_deadline_ms;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)((wake - now) / 1000);
		ts.tv_nsec += (long)((wake - now) % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&m->lock);
		while (!m->stop && !m->dirty &&
		       pthread_cond_timedwait(&m->cond, &m->lock, &ts) != ETIMEDOUT)
			;
		m->dirty = false;
		if (m->stop) {
			pthread_mutex_unlock(&m->lock);
			break;
		}
		pthread_mutex_unlock(&m->lock);
		manager_tick(m);
	}
	return NULL;
}

int manager_init(struct zl_manager *m, const struct zl_manager_cfg *cfg)
{
	pthread_condattr_t ca;

	memset(m, 0, sizeof(*m));
	if (!cfg->etcd || !cfg->prefix || !cfg->leader_is || !cfg->leader_may_write)
		return -ZL_ERR_INVAL;
	if (snprintf(m->prefix, sizeof(m->prefix), "%s", cfg->prefix) >= (int)sizeof(m->prefix))
		return -ZL_ERR_INVAL;
	m->cfg = *cfg;
	m->cfg.prefix = m->prefix;
	m->etcd = cfg->etcd;
	m->grace_s = cfg->grace_s;
	m->down_out_s = cfg->down_out_s;
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	m->inited = true;
	return 0;
}

void manager_fini(struct zl_manager *m)
{
	if (!m->inited)
		return;
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m->nodes);
	m->nodes = NULL;
	m->n_nodes = m->cap_nodes = 0;
	m->inited = false;
}

int zl_manager_create(const struct zl_manager_cfg *cfg, struct zl_manager **out)
{
	static const char *const kinds[4] = {"nodes", "volumes", "reports", "rebalance"};
	struct zl_manager *m;
	char key[256];
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	rc = manager_init(m, cfg);
	if (rc)
		goto out_destroy;
	for (int i = 0; i < 4; i++) {
		rc = zl_meta_key(key, sizeof(key), m->prefix, kinds[i], NULL);
		if (!rc)
			rc = zl_etcd_watch_prefix(m->etcd, key, 0, manager_watch_cb, m,
						  &m->watch[i]);
		if (rc) {
			ZL_LOG_ERR(MGR_LOG, "manager: cannot watch %s: %s", key, zl_strerror(rc));
			goto out_destroy;
		}
	}
	rc = pthread_create(&m->thread, NULL, manager_main, m);
	if (rc) {
		ZL_LOG_ERR(MGR_LOG, "manager: cannot start its thread: %s", strerror(rc));
		rc = -rc;
		goto out_destroy;
	}
	m->started = true;
	ZL_LOG_INFO(MGR_LOG, "manager on: grace=%u s down_out_interval=%u s (acts while leader)",
		    m->grace_s, m->down_out_s);
	*out = m;
	return 0;

out_destroy:
	zl_manager_destroy(m);
	return rc;
}

void zl_manager_destroy(struct zl_manager *m)
{
	if (!m)
		return;
	if (m->started) {
		pthread_mutex_lock(&m->lock);
		m->stop = true;
		pthread_cond_signal(&m->cond);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->thread, NULL);
	}
	for (int i = 0; i < 4; i++)
		zl_etcd_watch_cancel(m->watch[i]);
	manager_fini(m);
	free(m);
}
