/* zipline-controller lifetime: etcd handles, the background thread, the
 * method table and the gRPC server. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctrl.h"
#include "lib/client/client.h"
#include "lib/meta/zl_auth.h"

/* msg: the snake-case stem of the request and response messages. */
#define M(svc, name, msg, fn, flags)                                                   \
	{"/csi.v1." svc "/" name, &csi__v1__##msg##_request__descriptor,                \
	 &csi__v1__##msg##_response__descriptor, fn, flags}

/* Identity answers on the completion-queue thread (never blocks: Probe reads
 * the background thread's last etcd check); everything else on workers.
 * The Node service is not registered, so gRPC answers UNIMPLEMENTED for
 * it. */
static const struct zl_grpc_method ctrl_methods[] = {
    M("Identity", "GetPluginInfo", get_plugin_info, ctrl_plugin_info, ZL_GRPC_METHOD_INLINE),
    M("Identity", "GetPluginCapabilities", get_plugin_capabilities, ctrl_plugin_caps,
      ZL_GRPC_METHOD_INLINE),
    M("Identity", "Probe", probe, ctrl_probe, ZL_GRPC_METHOD_INLINE),
    M("Controller", "CreateVolume", create_volume, ctrl_create_volume, 0),
    M("Controller", "DeleteVolume", delete_volume, ctrl_delete_volume, 0),
    M("Controller", "ControllerPublishVolume", controller_publish_volume, ctrl_publish, 0),
    M("Controller", "ControllerUnpublishVolume", controller_unpublish_volume, ctrl_unpublish,
      0),
    M("Controller", "ValidateVolumeCapabilities", validate_volume_capabilities,
      ctrl_validate_caps, 0),
    M("Controller", "ListVolumes", list_volumes, ctrl_list_volumes, 0),
    M("Controller", "GetCapacity", get_capacity, ctrl_get_capacity, 0),
    M("Controller", "ControllerGetCapabilities", controller_get_capabilities, ctrl_get_caps,
      0),
    M("Controller", "ControllerExpandVolume", controller_expand_volume, ctrl_expand_volume, 0),
    M("Controller", "ControllerGetVolume", controller_get_volume, ctrl_get_volume, 0),
    M("Controller", "ControllerModifyVolume", controller_modify_volume, ctrl_modify_volume, 0),
    M("Controller", "CreateSnapshot", create_snapshot, ctrl_create_snapshot, 0),
    M("Controller", "DeleteSnapshot", delete_snapshot, ctrl_delete_snapshot, 0),
    M("Controller", "ListSnapshots", list_snapshots, ctrl_list_snapshots, 0),
};

static int ctrl_etcd_open(const struct ctrl_cfg *cfg, struct zl_etcd **out)
{
	struct zl_etcd_opts o = {.timeout_ms = CTRL_ETCD_TIMEOUT_MS};

	zl_cfg_etcd_opts(&cfg->etcd, &o);
	return zl_etcd_create(&o, out);
}

/* The manager's view of leadership (its zl_manager_cfg callbacks). */
static bool ctrl_mgr_leader_is(void *arg)
{
	return ctrl_leader_is(arg);
}

static bool ctrl_mgr_may_write(void *arg)
{
	return ctrl_leader_may_write(arg);
}

int ctrl_start(struct ctrl *c, const struct ctrl_cfg *cfg)
{
	struct zl_grpc_server_cfg gc = {0};
	char host[64] = "controller";
	int rc;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->bg_lock, NULL);
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->bg_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->leader_lock, NULL);
	snprintf(c->prefix, sizeof(c->prefix), "%s", cfg->etcd.prefix);
	c->cluster_key_file = cfg->cluster_key_file;
	if (c->cluster_key_file) {
		/* A bad Secret mount shows at start, not at the first DeleteVolume. */
		char key[ZL_AUTH_KEY_HEX + 1];

		rc = zl_auth_cluster_key_file(c->cluster_key_file, key);
		explicit_bzero(key, sizeof(key));
		if (rc) {
			ZL_LOG_ERR(CTRL_LOG, "cannot use --cluster-key-file %s: %s (it must hold "
					     "the cluster key, 64 hex digits)",
				   c->cluster_key_file, zl_strerror(rc));
			return rc;
		}
	}
	c->election = cfg->leader_election;
	c->gc_interval_s = cfg->gc_interval_s ? cfg->gc_interval_s : CTRL_GC_INTERVAL_S;
	if (cfg->leader_id) {
		snprintf(c->leader_id, sizeof(c->leader_id), "%s", cfg->leader_id);
	} else {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "controller");
		host[sizeof(host) - 1] = '\0';
		snprintf(c->leader_id, sizeof(c->leader_id), "%s-%ld", host, (long)getpid());
	}
	if (!c->election)
		c->is_leader = true;

	rc = ctrl_etcd_open(cfg, &c->etcd);
	if (!rc)
		rc = ctrl_etcd_open(cfg, &c->etcd_bg);
	if (!rc && cfg->manager)
		rc = ctrl_etcd_open(cfg, &c->etcd_mgr);
	if (rc) {
		ZL_LOG_ERR(CTRL_LOG, "bad etcd configuration endpoints=%s: %s", cfg->etcd.endpoints,
			   zl_strerror(rc));
		return rc;
	}
	if (zl_etcd_ping(c->etcd_bg))
		ZL_LOG_WARN(CTRL_LOG,
			    "etcd not reachable yet endpoints=%s detail=\"%s\": Probe answers "
			    "not ready until it is",
			    cfg->etcd.endpoints, zl_etcd_last_error());
	else
		atomic_store(&c->etcd_ok_ms, zl_now_ms());

	rc = pthread_create(&c->bg_thread, NULL, ctrl_bg_main, c);
	if (rc) {
		ZL_LOG_ERR(CTRL_LOG, "cannot start the background thread: %s", strerror(rc));
		return -rc;
	}
	c->bg_started = true;
	if (cfg->manager) {
		struct zl_manager_cfg mc = {
			.etcd = c->etcd_mgr,
			.prefix = c->prefix,
			.grace_s = cfg->manager_grace_s,
			.down_out_s = cfg->down_out_s,
			.leader_is = ctrl_mgr_leader_is,
			.leader_may_write = ctrl_mgr_may_write,
			.leader_arg = c,
		};

		rc = zl_manager_create(&mc, &c->mgr);
		if (rc)
			return rc;
	}

	rc = ctrl_flatten_start(c, cfg);
	if (rc)
		return rc;

	gc.endpoint = cfg->endpoint;
	gc.methods = ctrl_methods;
	gc.n_methods = ZL_ARRAY_SIZE(ctrl_methods);
	gc.workers = cfg->workers;
	gc.ctx = c;
	gc.name = "zipline-controller";
	rc = zl_grpc_server_create(&gc, &c->srv);
	if (rc) {
		ZL_LOG_ERR(CTRL_LOG, "cannot serve CSI on endpoint=%s: %s", cfg->endpoint,
			   zl_strerror(rc));
		return rc;
	}
	rc = ctrl_metrics_start(c, cfg);
	if (rc)
		return rc;
	ZL_LOG_INFO(CTRL_LOG,
		    "serving every CSI call endpoint=%s etcd=%s prefix=%s leader_election=%s "
		    "replica_id=%s gc_interval_s=%u manager=%s flatten=%s flatten_rate_mib_s=%u "
		    "version=%s",
		    cfg->endpoint, cfg->etcd.endpoints, c->prefix, c->election ? "on" : "off",
		    c->leader_id, c->gc_interval_s, cfg->manager ? "on" : "off",
		    cfg->flatten ? "on" : "off", cfg->flatten_rate_mib, ZL_VERSION_STRING);
	return 0;
}

void ctrl_stop(struct ctrl *c, unsigned int grace_ms)
{
	ctrl_metrics_stop(c); /* no scrape reads the server or the manager after this */
	if (c->srv) {
		zl_grpc_server_shutdown(c->srv, grace_ms);
		zl_grpc_server_destroy(c->srv);
		c->srv = NULL;
	}
	/* Before the lease goes: the manager must not outlive leadership. */
	zl_manager_destroy(c->mgr);
	c->mgr = NULL;
	if (c->bg_started) {
		pthread_mutex_lock(&c->bg_lock);
		c->stop = true;
		pthread_cond_broadcast(&c->bg_cond);
		pthread_mutex_unlock(&c->bg_lock);
		pthread_join(c->bg_thread, NULL);
		c->bg_started = false;
	}
	ctrl_flatten_join(c); /* c->stop is set when it started */
	/* After the server: no RPC holds an operation lock any more. */
	if (c->etcd_bg)
		ctrl_leader_release(c);
	zl_etcd_destroy(c->etcd_mgr);
	zl_etcd_destroy(c->etcd_bg);
	zl_etcd_destroy(c->etcd);
	c->etcd_mgr = c->etcd_bg = c->etcd = NULL;
}

int ctrl_record_get(struct ctrl *c, const char *kind, const char *id, struct zl_etcd_kv *kv)
{
	char key[256];
	int rc;

	rc = zl_meta_key(key, sizeof(key), c->prefix, kind, id);
	if (rc)
		return rc;
	return zl_etcd_get(c->etcd, key, kv);
}

int ctrl_client_create(struct ctrl *c, struct zl_etcd *etcd, uint64_t epoch,
		       struct zl_loop **loop, struct zl_client **cl, const char **what)
{
	struct zl_client_opts o = {
	    .prefix = c->prefix, .client_id = "zipline-controller", .epoch = epoch};
	char key[ZL_AUTH_KEY_HEX + 1];
	int rc;

	*loop = NULL;
	*cl = NULL;
	*what = "key";
	rc = zl_auth_cluster_key_load(etcd, c->prefix, c->cluster_key_file, true, key);
	if (rc)
		return rc;
	o.cluster_key = key;
	*what = "loop";
	rc = zl_loop_create(loop);
	if (!rc) {
		*what = "client";
		rc = zl_client_create(*loop, etcd, &o, cl);
	}
	explicit_bzero(key, sizeof(key));
	if (rc) {
		zl_loop_destroy(*loop);
		*loop = NULL;
	}
	return rc;
}

void ctrl_client_destroy(struct zl_loop *loop, struct zl_client *cl)
{
	zl_client_destroy(cl);
	zl_loop_destroy(loop);
}
