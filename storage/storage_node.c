/* Registration of this storage daemon in etcd (nodes/<id> on a lease) and
 * the heartbeat thread that keeps it alive: keep-alive every 3 s, free space
 * refreshed every ~10 s, lease re-granted and record re-put when it expired
 * (etcd was away longer than the TTL). Uses its own etcd handle so a slow
 * metadata call on the loop thread never delays the heartbeat. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "storage_ctl.h"

#define NODE_LEASE_TTL	  10
#define NODE_KEEPALIVE_MS 3000
#define NODE_REFRESH_MS	  10000
#define NODE_TICK_MS	  1000
#define NODE_STATUS_MS	  2000

struct zl_storage_node {
	struct zl_storage_cfg cfg;
	struct zl_etcd *etcd;
	struct zl_node_info info;
	struct zl_storage_status *status; /* NULL: publish none */
	bool status_force;		  /* the lease changed: put it again */
	int64_t lease;
	pthread_t thread;
	bool thread_started;
	/* stop is set under mu; the thread sleeps on cv between heartbeats. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

int zl_storage_fs_space(const char *dir, uint64_t *capacity, uint64_t *free_bytes)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) < 0)
		return -errno;
	if (capacity)
		*capacity = (uint64_t)sv.f_blocks * sv.f_frsize;
	if (free_bytes)
		*free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

static void node_refresh_free(struct zl_storage_node *n)
{
	uint64_t fr = 0;

	if (zl_storage_fs_space(n->cfg.data_dir, NULL, &fr) == 0)
		n->info.free = ZL_MIN(fr, n->info.capacity);
}

/* Grants a fresh lease and puts the record on it. */
static int node_register(struct zl_storage_node *n)
{
	int64_t lease = 0;
	int rc = zl_etcd_lease_grant(n->etcd, NODE_LEASE_TTL, &lease);

	if (rc)
		return rc;
	node_refresh_free(n);
	rc = zl_meta_node_put(n->etcd, n->cfg.prefix, &n->info, lease);
	if (rc) {
		zl_etcd_lease_revoke(n->etcd, lease);
		return rc;
	}
	n->lease = lease;
	n->status_force = true;
	return 0;
}

/* Puts status/<id> on the node's lease when the snapshot changed. */
static void node_status_put(struct zl_storage_node *n)
{
	struct zl_node_status ns;
	int rc;

	if (!n->status || !n->lease ||
	    !zl_storage_status_take(n->status, n->cfg.node_id, n->status_force, &ns))
		return;
	rc = zl_meta_status_put(n->etcd, n->cfg.prefix, &ns, n->lease);
	n->status_force = rc != 0;
	if (rc)
		ZL_LOG_DEBUG("storage", "putting recovery status failed: err=%s", zl_errname(rc));
}

static void *node_thread(void *arg)
{
	struct zl_storage_node *n = arg;
	uint64_t last_refresh = zl_now_ms(), last_alive = last_refresh, last_status = 0;
	bool ok = true;

	pthread_mutex_lock(&n->mu);
	while (!n->stop) {
		struct timespec ts;
		int64_t ttl = 0;
		int rc;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += NODE_TICK_MS / 1000;
		pthread_cond_timedwait(&n->cv, &n->mu, &ts);
		if (n->stop)
			break;
		pthread_mutex_unlock(&n->mu);
		if (zl_now_ms() - last_status >= NODE_STATUS_MS) {
			node_status_put(n);
			last_status = zl_now_ms();
		}
		if (zl_now_ms() - last_alive < NODE_KEEPALIVE_MS) {
			pthread_mutex_lock(&n->mu);
			continue;
		}
		last_alive = zl_now_ms();

		rc =
		    n->lease ? zl_etcd_lease_keepalive(n->etcd, n->lease, &ttl) : -ZL_ERR_NOT_FOUND;
		if (rc == 0 && ttl <= 0)
			rc = -ZL_ERR_NOT_FOUND;
		if (rc == -ZL_ERR_NOT_FOUND) {
			ZL_LOG_WARN("storage", "node lease expired: re-registering node=%s",
				    n->cfg.node_id);
			n->lease = 0;
			rc = node_register(n);
			if (!rc) {
				ZL_LOG_INFO("storage", "node re-registered: node=%s lease=%" PRIx64,
					    n->cfg.node_id, (uint64_t)n->lease);
				last_refresh = zl_now_ms();
			}
		} else if (rc == 0 && zl_now_ms() - last_refresh >= NODE_REFRESH_MS) {
			node_refresh_free(n);
			rc = zl_meta_node_put(n->etcd, n->cfg.prefix, &n->info, n->lease);
			if (!rc)
				last_refresh = zl_now_ms();
		}
		if (rc && ok)
			ZL_LOG_WARN("storage",
				    "heartbeat to etcd failed: err=%s detail=\"%s\" "
				    "(retrying every %u s; the node drops out after %d s)",
				    zl_errname(rc), zl_etcd_last_error(), NODE_KEEPALIVE_MS / 1000,
				    NODE_LEASE_TTL);
		else if (!rc && !ok)
			ZL_LOG_INFO("storage", "heartbeat to etcd recovered");
		ok = rc == 0;
		pthread_mutex_lock(&n->mu);
	}
	pthread_mutex_unlock(&n->mu);
	return NULL;
}

int zl_storage_node_start(const struct zl_storage_cfg *cfg, uint16_t port, uint16_t rdma_port,
			  struct zl_storage_status *status, struct zl_storage_node **out)
{
	struct zl_etcd_opts eo;
	struct zl_storage_node *n = calloc(1, sizeof(*n));
	pthread_condattr_t ca;
	uint64_t cap = 0;
	int rc;

	if (!n)
		return -ENOMEM;
	n->cfg = *cfg;
	n->status = status;
	pthread_mutex_init(&n->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->cv, &ca);
	pthread_condattr_destroy(&ca);
	eo = cfg->eo;
	rc = zl_etcd_create(&eo, &n->etcd);
	if (rc)
		goto out_free;
	snprintf(n->info.id, sizeof(n->info.id), "%s", cfg->node_id);
	snprintf(n->info.addr, sizeof(n->info.addr), "%s", cfg->advertise);
	n->info.port = port;
	n->info.rdma_port = rdma_port;
	snprintf(n->info.transports, sizeof(n->info.transports), "%s",
		 rdma_port ? "tcp,rdma" : "tcp");
	snprintf(n->info.domain, sizeof(n->info.domain), "%s", cfg->domain);
	zl_storage_fs_space(cfg->data_dir, &cap, NULL);
	n->info.capacity = cfg->capacity ? cfg->capacity : cap;
	n->info.start_time = zl_wall_sec();
	snprintf(n->info.version, sizeof(n->info.version), "%s", ZL_VERSION_STRING);
	memcpy(n->info.cluster_id, cfg->cluster_id, sizeof(n->info.cluster_id));
	memcpy(n->info.incarnation, cfg->incarnation, sizeof(n->info.incarnation));
	/* The TCP listener accepts TLS only: clients and peers read it here. */
	n->info.tls = cfg->tls_cert != NULL;
	n->info.metrics_port = cfg->metrics_port;
	rc = node_register(n);
	if (rc)
		goto out_free;
	rc = pthread_create(&n->thread, NULL, node_thread, n);
	if (rc) {
		rc = -rc;
		goto out_free;
	}
	n->thread_started = true;
	ZL_LOG_INFO("storage",
		    "registered node=%s addr=%s:%u rdma_port=%u transports=%s tls=%s domain=\"%s\" "
		    "capacity=%" PRIu64 " lease=%" PRIx64 " incarnation=%s",
		    cfg->node_id, cfg->advertise, port, rdma_port, n->info.transports,
		    n->info.tls ? "on" : "off", cfg->domain,
		    n->info.capacity, (uint64_t)n->lease, n->info.incarnation);
	*out = n;
	return 0;

out_free:
	zl_storage_node_stop(n);
	return rc;
}

void zl_storage_node_stop(struct zl_storage_node *n)
{
	if (!n)
		return;
	if (n->thread_started) {
		pthread_mutex_lock(&n->mu);
		n->stop = true;
		pthread_cond_signal(&n->cv);
		pthread_mutex_unlock(&n->mu);
		pthread_join(n->thread, NULL);
	}
	if (n->lease) {
		int rc = zl_etcd_lease_revoke(n->etcd, n->lease);

		if (rc)
			ZL_LOG_WARN("storage",
				    "revoking the node lease failed: %s (the record "
				    "expires within %d s)",
				    zl_errname(rc), NODE_LEASE_TTL);
		else
			ZL_LOG_INFO("storage", "node lease revoked: node=%s", n->cfg.node_id);
	}
	if (n->etcd)
		zl_etcd_destroy(n->etcd);
	pthread_cond_destroy(&n->cv);
	pthread_mutex_destroy(&n->mu);
	free(n);
}
