/* The command line of zipline-storage: its flags (lib/cfg tables) and the
 * checks across them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cfg/cfg.h"
#include "storage_ctl.h"

static const char storage_usage[] = "usage: zipline-storage --data-dir DIR [options]\n";

static const struct zl_cfg storage_cli_base = {
    .prog = "zipline-storage",
    .usage = storage_usage,
    .col = 23,
};

static int flag_listen(const char *value, void *target, const char **why)
{
	struct zl_storage_cfg *cfg = target;
	const char *colon = strrchr(value, ':');
	char *end;
	long v;

	if (!colon || colon == value || (size_t)(colon - value) >= sizeof(cfg->listen_host)) {
		*why = "not HOST:PORT; pass e.g. 0.0.0.0:7100";
		return -ZL_ERR_INVAL;
	}
	v = strtol(colon + 1, &end, 10);
	if (*end || !colon[1] || v < 0 || v > 65535) {
		*why = "port not in 0..65535; pass HOST:PORT";
		return -ZL_ERR_INVAL;
	}
	memset(cfg->listen_host, 0, sizeof(cfg->listen_host));
	memcpy(cfg->listen_host, value, (size_t)(colon - value));
	cfg->listen_port = (uint16_t)v;
	return 0;
}

static int flag_label(const char *value, void *target, const char **why)
{
	struct zl_storage_cfg *cfg = target;

	if (!strchr(value, '=') || value[0] == '=' || strchr(value, ',')) {
		*why = "not K=V; pass one label per --label, without commas";
		return -ZL_ERR_INVAL;
	}
	if (strlen(cfg->domain) + strlen(value) + 2 > sizeof(cfg->domain)) {
		*why = "labels too long together; pass shorter ones (127 bytes in all)";
		return -ZL_ERR_INVAL;
	}
	if (cfg->domain[0])
		strcat(cfg->domain, ",");
	strcat(cfg->domain, value);
	return 0;
}

static int flag_capacity(const char *value, void *target, const char **why)
{
	if (zl_parse_size(value, target) || !*(uint64_t *)target) {
		*why = "not a size; pass one like 100G";
		return -ZL_ERR_INVAL;
	}
	return 0;
}

static int flag_fair_bytes(const char *value, void *target, const char **why)
{
	uint64_t *v = target;

	if (zl_parse_size(value, v) || *v < 4096 || *v > (1ull << 30)) {
		*why = "not a share; pass a size from 4K to 1G, like 1M";
		return -ZL_ERR_INVAL;
	}
	return 0;
}

static int flag_write_path(const char *value, void *target, const char **why)
{
	if (!strcmp(value, "journal") || !strcmp(value, "direct")) {
		*(bool *)target = !strcmp(value, "journal");
		return 0;
	}
	*why = "not a write path; pass journal or direct";
	return -ZL_ERR_INVAL;
}

static int flag_journal_size(const char *value, void *target, const char **why)
{
	uint64_t *v = target;

	if (zl_parse_size(value, v) || *v % 4096 || *v < ZL_CHUNK_JOURNAL_MIN ||
	    *v > ZL_JOURNAL_MAX_SIZE) {
		*why = "not a journal size; pass a multiple of 4K from 17M to 1T, like 256M";
		return -ZL_ERR_INVAL;
	}
	return 0;
}

static int flag_transport(const char *value, void *target, const char **why)
{
	enum zl_xport_select sel;

	if (zl_xport_select_parse(value, &sel)) {
		*why = "not a transport mode; pass auto, tcp or rdma";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

int zl_storage_cfg_parse(struct zl_storage_cfg *cfg, struct zl_cfg_etcd *etcd,
			 const char **node_flag, int argc, char **argv)
{
	const char *adv = NULL;
	const struct zl_cfg_flag head[] = {
	    {.name = "data-dir",
	     .arg = "DIR",
	     .type = ZL_CFG_STR,
	     .target = &cfg->data_dir,
	     .help = "chunk replicas, node-id, identity and LOCK live\nhere (required)"},
	    {.name = "listen",
	     .arg = "HOST:PORT",
	     .type = ZL_CFG_CALL,
	     .target = cfg,
	     .parse = flag_listen,
	     .help = "address to serve on (default 0.0.0.0:7100)"},
	    {.name = "advertise",
	     .arg = "ADDR",
	     .type = ZL_CFG_STR,
	     .target = &adv,
	     .help = "address registered in etcd (default: the listen host;\nfor 0.0.0.0 or ::, "
		     "the address of the interface of the\ndefault route; no default route: "
		     "start-up fails)"},
	    {.name = "node-id",
	     .arg = "ID",
	     .type = ZL_CFG_STR,
	     .target = node_flag,
	     .help = "node id (default: DATA/node-id, else the hostname)"},
	    {.name = "label",
	     .arg = "K=V",
	     .type = ZL_CFG_CALL,
	     .target = cfg,
	     .parse = flag_label,
	     .help = "failure-domain label, repeatable (zone=a --label rack=r1)"},
	    {0},
	};
	const struct zl_cfg_flag tail[] = {
	    {.name = "etcd-wait",
	     .arg = "SEC",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->etcd_wait_sec,
	     .max = 86400,
	     .unit = "seconds",
	     .help = "how long to wait for etcd at start (default 60)"},
	    {.name = "transport",
	     .arg = "MODE",
	     .type = ZL_CFG_CALL,
	     .target = &cfg->transport,
	     .parse = flag_transport,
	     .help = "auto|tcp|rdma: transports to serve (default auto)"},
	    {.name = "capacity",
	     .arg = "SIZE",
	     .type = ZL_CFG_CALL,
	     .target = &cfg->capacity,
	     .parse = flag_capacity,
	     .help = "capacity to advertise (default: the filesystem size)"},
	    {.name = "write-path",
	     .arg = "PATH",
	     .type = ZL_CFG_CALL,
	     .target = &cfg->journal,
	     .parse = flag_write_path,
	     .help = "journal|direct: journal = a write is durable when its\nrecord in "
		     "DIR/journal-0 is (group commit), direct =\nmetadata and data durable in "
		     "the chunk file\n(default journal)"},
	    {.name = "journal-size",
	     .arg = "SIZE",
	     .type = ZL_CFG_CALL,
	     .target = &cfg->journal_size,
	     .parse = flag_journal_size,
	     .help = "size of a new journal (default 128M; full = writes wait\nfor a checkpoint)"},
	    {.name = "busy-poll",
	     .arg = "US",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->busy_poll_us,
	     .min = 0,
	     .max = 10000,
	     .unit = "microseconds",
	     .help = "poll instead of sleeping for US microseconds after\nwork (a core per daemon: "
		     "lower latency; fewer cores\nthan busy processes: slower; default 0, off)"},
	    ZL_CFG_FLAG_METRICS(&cfg->metrics),
	    {.name = "log-level",
	     .arg = "LEVEL",
	     .type = ZL_CFG_CALL,
	     .parse = zl_cfg_log_level,
	     .help = "err|warn|info|debug (default info)"},
	    {.name = "heal",
	     .arg = "on|off",
	     .type = ZL_CFG_BOOL,
	     .target = &cfg->heal,
	     .help = "data versions, failure reports instead of dropping\nbackups, recovery of "
		     "RECOVERING members (default on,\nwith zipline-controller --manager=on; "
		     "off = 0.1)"},
	    {.name = "repl-wait",
	     .arg = "SEC",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->repl_wait_ms,
	     .min = 1,
	     .max = 86400,
	     .scale = 1000,
	     .unit = "seconds",
	     .help = "heal: how long a write whose backup failed waits for\nthe manager to take "
		     "it out of the in-sync set (default 8)"},
	    {.name = "recovery-mbps",
	     .arg = "N",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->recovery_mbps,
	     .min = 1,
	     .max = 1000000,
	     .unit = "megabits/s",
	     .help = "heal: recovery copy rate, megabits/s (default 200)"},
	    {.name = "scrub-mbps",
	     .arg = "N",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->scrub_mbps,
	     .min = 1,
	     .max = 1000000,
	     .unit = "megabits/s",
	     .help = "scrub read rate, megabits/s (default 100)"},
	    {.name = "fair-share",
	     .arg = "on|off",
	     .type = ZL_CFG_BOOL,
	     .target = &cfg->fair.on,
	     .help =
		 "share the disk per volume while several volumes\nsend I/O: each has at most "
		 "--fair-share-bytes\nin flight, the rest waits in its own queue\n(default on)"},
	    {.name = "fair-share-bytes",
	     .arg = "SIZE",
	     .type = ZL_CFG_CALL,
	     .target = &cfg->fair.share_bytes,
	     .parse = flag_fair_bytes,
	     .help = "a volume's bytes in flight to the disk under\ncontention (at least one "
		     "operation; default 256K)"},
	    {.name = "scrub-interval",
	     .arg = "SEC",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->scrub_interval_s,
	     .max = 31536000,
	     .unit = "seconds (0 = off)",
	     .help = "background scrub of the slices this node is primary\nof, every SEC seconds "
		     "(default 86400, 0 = off)"},
	    {.name = "gc-interval",
	     .arg = "SEC",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->gc_interval_s,
	     .max = 31536000,
	     .unit = "seconds (0 = off)",
	     .help = "heal: look for old copies of slices moved off this node\nevery SEC seconds "
		     "(default 60, 0 = keep them)"},
	    {.name = "gc-grace",
	     .arg = "SEC",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->gc_grace_s,
	     .max = 31536000,
	     .unit = "seconds",
	     .help = "heal: remove them once their row has not listed this node,\nall in sync, "
		     "and no write of them came, for SEC seconds\n(default 600)"},
	    {.name = "auth",
	     .arg = "on|off",
	     .type = ZL_CFG_BOOL,
	     .target = &cfg->auth,
	     .help = "check HELLO credentials: attach tokens of clients, the\ncluster token of "
		     "peers and operators (default on;\noff only for a cluster of pre-auth "
		     "callers,\ndocs/SECURITY.md)"},
	    {.name = "cluster-key-file",
	     .arg = "FILE",
	     .type = ZL_CFG_STR,
	     .target = &cfg->cluster_key_file,
	     .help = "the cluster key (64 hex digits, e.g. a mounted\nSecret); default: "
		     "<prefix>keys/cluster in etcd"},
	    {.name = "tls-cert",
	     .arg = "FILE",
	     .type = ZL_CFG_FILE,
	     .target = &cfg->tls_cert,
	     .help = "TLS certificate (PEM) of the TCP listener, with\n--tls-key and --tls-ca: "
		     "then the listener speaks TLS\nonly and the node record says so "
		     "(docs/SECURITY.md)"},
	    {.name = "tls-key",
	     .arg = "FILE",
	     .type = ZL_CFG_FILE,
	     .target = &cfg->tls_key,
	     .help = "its private key (PEM)"},
	    {.name = "tls-ca",
	     .arg = "FILE",
	     .type = ZL_CFG_FILE,
	     .target = &cfg->tls_ca,
	     .help = "the cluster's CA: verifies peers that serve TLS"},
	    {.name = "tls-server-name",
	     .arg = "N",
	     .type = ZL_CFG_STR,
	     .target = &cfg->tls_server_name,
	     .help = "name peer certificates carry (SAN DNS); default: the\npeer's advertised "
		     "address must be in its SAN"},
	    {0},
	};
	const struct zl_cfg_flag *tables[] = {head, etcd->flags, tail, NULL};
	struct zl_cfg cli = storage_cli_base;
	const char *why;
	int rc;

	cli.tables = tables;
	zl_cfg_etcd_init(etcd, false);
	flag_listen("0.0.0.0:7100", cfg, &why);
	cfg->transport = "auto";
	cfg->etcd_wait_sec = 60;
	cfg->repl_wait_ms = 8000; /* below the client's 10 s request timeout */
	cfg->recovery_mbps = 200;
	cfg->scrub_mbps = 100;
	cfg->scrub_interval_s = 86400;
	cfg->gc_interval_s = 60;
	cfg->gc_grace_s = 600;
	cfg->heal = true;
	zl_storage_fair_opts_default(&cfg->fair);
	cfg->journal = true;
	cfg->auth = true; /* every caller sends credentials (docs/SECURITY.md) */
	rc = zl_cfg_parse(&cli, argc, argv);
	if (rc)
		return rc;
	if (!cfg->data_dir)
		return zl_cfg_err(&cli, "--data-dir", NULL,
				  "not given; pass the directory of "
				  "this node's chunk replicas");
	rc = zl_cfg_etcd_check(&cli, etcd);
	if (rc)
		return rc;
	zl_cfg_etcd_opts(etcd, &cfg->eo);
	cfg->prefix = etcd->prefix;
	/* A TLS node reaches its TLS peers (replication) with the same CA. */
	if ((cfg->tls_cert || cfg->tls_key) && !(cfg->tls_cert && cfg->tls_key && cfg->tls_ca))
		return zl_cfg_err(&cli, cfg->tls_cert ? "--tls-cert" : "--tls-key", NULL,
				  "needs --tls-cert, --tls-key and --tls-ca together; pass all "
				  "three or none");
	if (!adv)
		return zl_storage_advertise_pick(cfg->listen_host, "/proc/net/route",
						 "/proc/net/ipv6_route", cfg->advertise,
						 sizeof(cfg->advertise))
			   ? -ZL_ERR_INVAL
			   : 0;
	if (strlen(adv) >= sizeof(cfg->advertise))
		return zl_cfg_err(&cli, "--advertise", adv,
				  "too long; pass an address of at "
				  "most %zu bytes",
				  sizeof(cfg->advertise) - 1);
	snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", adv);
	return 0;
}

int zl_storage_cfg_bad_etcd(const struct zl_storage_cfg *cfg, int err)
{
	return zl_cfg_err(&storage_cli_base, "--etcd", cfg->eo.endpoints,
			  "%s; pass http://HOST:PORT[,...]", zl_strerror(err));
}
