/* The command line of zipline-node: its flags (lib/cfg tables) and the
 * checks across them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/cfg/cfg.h"
#include "node.h"

static int node_flag_frontend(const char *value, void *target, const char **why)
{
	struct node_cfg *c = ZL_CONTAINER_OF((enum node_frontend *)target, struct node_cfg,
					     frontend);

	int rc = node_frontend_parse(value, &c->frontend);

	if (rc < 0) {
		*why = "not a frontend; pass auto, ublk, nbd or fuse";
		return rc;
	}
	c->frontend_auto = rc == 1;
	if (c->frontend_auto)
		c->frontend = NODE_FRONTEND_FUSE;
	return 0;
}

static int node_flag_transport(const char *value, void *target, const char **why)
{
	if (strcmp(value, "auto") && strcmp(value, "tcp") && strcmp(value, "rdma")) {
		*why = "not a transport; pass auto, rdma or tcp";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

static int node_flag_io_timeout(const char *value, void *target, const char **why)
{
	if (node_io_timeout_parse(value, NULL)) {
		*why = "not a number of seconds in 1..86400; pass one in that range";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

static int node_flag_attach_timeout(const char *value, void *target, const char **why)
{
	if (node_start_timeout_parse(value, NULL)) {
		*why = "not a number of seconds in 1..600; pass one in that range";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

static int node_flag_ublk_threads(const char *value, void *target, const char **why)
{
	if (node_ublk_threads_parse(value, NULL)) {
		*why = "not a number of threads in 1..16; pass one in that range";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

/* --tls-ca and --tls-server-name go to attach processes through the
 * environment, where lib/client reads both (docs/SECURITY.md). */
static int node_flag_tls(const char *value, void *target, const char **why)
{
	const char *env = target;

	if (!strcmp(env, "ZIPLINE_TLS_CA") && access(value, R_OK)) {
		*why = "cannot read it; check the path and its permissions";
		return -ZL_ERR_INVAL;
	}
	setenv(env, value, 1);
	return 0;
}

int node_flags_parse(int argc, char **argv, struct node_cfg *c, struct zl_cfg_etcd *e)
{
	const struct zl_cfg_flag head[] = {
	    {.name = "endpoint",
	     .arg = "EP",
	     .type = ZL_CFG_STR,
	     .target = &c->endpoint,
	     .help = "CSI endpoint, unix:///path (env CSI_ENDPOINT)"},
	    {.name = "node-id",
	     .arg = "ID",
	     .type = ZL_CFG_STR,
	     .target = &c->node_id,
	     .help = "this node's id (env NODE_NAME; required)"},
	    {0},
	};
	const struct zl_cfg_flag tail[] = {
	    {.name = "state-dir",
	     .arg = "DIR",
	     .type = ZL_CFG_STR,
	     .target = &c->state_dir,
	     .help = "attachment state (default /var/lib/zipline/node)"},
	    {.name = "kubelet-dir",
	     .arg = "DIR",
	     .type = ZL_CFG_STR,
	     .target = &c->kubelet_dir,
	     .help = "kubelet root (default /var/lib/kubelet)"},
	    ZL_CFG_FLAG_METRICS(&c->metrics),
	    {.name = "frontend",
	     .arg = "F",
	     .type = ZL_CFG_CALL,
	     .target = &c->frontend,
	     .parse = node_flag_frontend,
	     .help = "auto|ublk|nbd|fuse (default auto: ublk where the\nkernel has ublk_drv, else "
		     "nbd where it has nbd,\nelse fuse)"},
	    {.name = "transport",
	     .arg = "T",
	     .type = ZL_CFG_CALL,
	     .target = &c->transport,
	     .parse = node_flag_transport,
	     .help = "auto|rdma|tcp (default auto)"},
	    {.name = "workers",
	     .arg = "N",
	     .type = ZL_CFG_UINT,
	     .target = &c->workers,
	     .max = 64,
	     .unit = "threads",
	     .help = "gRPC worker threads (default 4)"},
	    {.name = "log-level",
	     .arg = "L",
	     .type = ZL_CFG_CALL,
	     .parse = zl_cfg_log_level,
	     .help = "err|warn|info|debug"},
	    {.name = "io-timeout",
	     .arg = "SEC",
	     .type = ZL_CFG_CALL,
	     .target = &c->io_timeout,
	     .parse = node_flag_io_timeout,
	     .help = "how long volume I/O waits for an in-sync primary while\nthe cluster heals "
		     "before it fails (default 600)"},
	    {.name = "attach-timeout",
	     .arg = "SEC",
	     .type = ZL_CFG_CALL,
	     .target = &c->attach_timeout,
	     .parse = node_flag_attach_timeout,
	     .help = "how long an attach process may take to prove it can\nread its volume "
		     "before NodeStage fails (default 20)"},
	    {.name = "ublk-threads",
	     .arg = "N",
	     .type = ZL_CFG_CALL,
	     .target = &c->ublk_threads,
	     .parse = node_flag_ublk_threads,
	     .help =
		 "threads serving a ublk device's queues, queue q on\nthread q % N "
		 "(1..16, default: one per queue; 1: all on\nthe attach process's loop thread)"},
	    {.name = "spawner",
	     .arg = "PATH",
	     .type = ZL_CFG_STR,
	     .target = &c->spawner,
	     .help = "start attach processes through `zipline-node spawner\n--socket PATH` "
		     "(another container of the pod: a restart of\nthis one does not stop them)"},
	    {.name = "legacy-drop",
	     .type = ZL_CFG_SET,
	     .target = &c->legacy_drop,
	     .help = "0.1 client for clusters without a manager: promote\nthe next replica "
		     "itself, give up after 30 s"},
	    {.name = "tls-ca",
	     .arg = "FILE",
	     .type = ZL_CFG_CALL,
	     .target = "ZIPLINE_TLS_CA",
	     .parse = node_flag_tls,
	     .help = "the cluster's CA (PEM; env ZIPLINE_TLS_CA): attach\nprocesses reach "
		     "storage nodes that serve TLS with it"},
	    {.name = "tls-server-name",
	     .arg = "N",
	     .type = ZL_CFG_CALL,
	     .target = "ZIPLINE_TLS_SERVER_NAME",
	     .parse = node_flag_tls,
	     .help = "name their certificates carry (env\nZIPLINE_TLS_SERVER_NAME; default: "
		     "their address)"},
	    {0},
	};
	const struct zl_cfg_flag *tables[] = {head, e->flags, tail, NULL};
	const struct zl_cfg cli = {
	    .prog = "zipline-node",
	    .usage = "usage: zipline-node --node-id ID --etcd URLS [options]\n",
	    .col = 23,
	    .tables = tables,
	};
	int rc;

	zl_cfg_etcd_init(e, true);
	node_etcd_import(e);
	c->endpoint = getenv("CSI_ENDPOINT");
	c->node_id = getenv("NODE_NAME");
	c->state_dir = "/var/lib/zipline/node";
	c->kubelet_dir = "/var/lib/kubelet";
	c->frontend = NODE_FRONTEND_FUSE;
	c->frontend_auto = true;
	c->transport = "auto";
	c->workers = 4;
	rc = zl_cfg_parse(&cli, argc, argv);
	if (rc)
		return rc;
	rc = zl_cfg_csi_endpoint_check(&cli, c->endpoint);
	if (rc)
		return rc;
	if (!c->node_id || !*c->node_id || strlen(c->node_id) > 128)
		return zl_cfg_err(&cli, "--node-id", c->node_id,
				  "%s; pass this node's name "
				  "(or set NODE_NAME), up to 128 characters",
				  c->node_id && *c->node_id ? "too long" : "not given");
	if (c->state_dir[0] != '/')
		return zl_cfg_err(&cli, "--state-dir", c->state_dir,
				  "a relative path; pass an "
				  "absolute one");
	rc = zl_cfg_etcd_check(&cli, e);
	if (rc)
		return rc;
	c->etcd_urls = e->endpoints;
	c->etcd_prefix = e->prefix;
	node_etcd_export(e);
	return 0;
}
