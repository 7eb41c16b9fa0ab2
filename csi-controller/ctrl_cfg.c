/* Command line of zipline-controller. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"

static const char ctrl_usage[] =
    "usage: zipline-controller [flags]\n"
    "CSI Identity + Controller service of Zipline (driver " CTRL_DRIVER_NAME ").\n";

int ctrl_cfg_parse(int argc, char **argv, struct ctrl_cfg *cfg)
{
	const struct zl_cfg_flag head[] = {
	    {.name = "endpoint",
	     .arg = "URL",
	     .type = ZL_CFG_STR,
	     .target = &cfg->endpoint,
	     .help = "CSI endpoint, unix:///path/csi.sock (env CSI_ENDPOINT)"},
	    {0},
	};
	const struct zl_cfg_flag tail[] = {
	    {.name = "cluster-key-file",
	     .arg = "FILE",
	     .type = ZL_CFG_STR,
	     .target = &cfg->cluster_key_file,
	     .help = "the cluster key (64 hex digits, e.g. a mounted\nSecret; the storage "
		     "daemons' --cluster-key-file);\ndefault: <prefix>keys/cluster in etcd"},
	    {.name = "leader-election",
	     .arg = "[=on|off]",
	     .type = ZL_CFG_BOOL,
	     .optional = true,
	     .target = &cfg->leader_election,
	     .help = "elect, through etcd, the replica that runs the jobs\nthat must run once "
		     "(default on; every replica serves\nevery CSI call either way; off = this "
		     "one runs them)"},
	    {.name = "no-leader-election",
	     .type = ZL_CFG_CLEAR,
	     .target = &cfg->leader_election,
	     .help = "same as --leader-election=off"},
	    {.name = "leader-id",
	     .arg = "ID",
	     .type = ZL_CFG_STR,
	     .target = &cfg->leader_id,
	     .help = "replica identity (default hostname-pid)"},
	    {.name = "gc-interval",
	     .arg = "SECONDS",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->gc_interval_s,
	     .min = 1,
	     .max = 86400,
	     .unit = "seconds",
	     .help = "period of the leader's garbage collection (default 60)"},
	    {.name = "manager",
	     .arg = "=on|off",
	     .type = ZL_CFG_BOOL,
	     .optional = true,
	     .target = &cfg->manager,
	     .help = "decide slice membership (rules M1-M7 of\ndocs/REPLICATION.md) while this "
		     "replica is the\nleader (default on; off = membership as in 0.1)"},
	    {.name = "manager-grace",
	     .arg = "SECS",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->manager_grace_s,
	     .max = 86400,
	     .unit = "seconds",
	     .help = "a node record gone this long: its members go out\n(default 2)"},
	    {.name = "down-out-interval",
	     .arg = "SECS",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->down_out_s,
	     .min = 1,
	     .max = 30 * 86400,
	     .unit = "seconds",
	     .help = "a node record gone this long: its members are\nreplaced on other nodes "
		     "(default 600)"},
	    {.name = "flatten",
	     .arg = "[=on|off]",
	     .type = ZL_CFG_BOOL,
	     .optional = true,
	     .target = &cfg->flatten,
	     .help = "the leader copies clones' chunks from their\nsources in the background and "
		     "then detaches them,\nso the sources can be deleted (default on; a\n"
		     "StorageClass's flatten=false keeps its clones)"},
	    {.name = "flatten-rate",
	     .arg = "MIB",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->flatten_rate_mib,
	     .max = 1 << 20,
	     .unit = "MiB/s",
	     .help = "MiB per second the background flatten copies\n(default 64; 0 = no limit)"},
	    {.name = "workers",
	     .arg = "N",
	     .type = ZL_CFG_UINT,
	     .target = &cfg->workers,
	     .min = 1,
	     .max = 64,
	     .unit = "threads",
	     .help = "gRPC worker threads (default 4)"},
	    ZL_CFG_FLAG_METRICS(&cfg->metrics),
	    {.name = "log-level",
	     .arg = "L",
	     .type = ZL_CFG_CALL,
	     .parse = zl_cfg_log_level,
	     .help = "err|warn|info|debug (env ZL_LOG_LEVEL)"},
	    {0},
	};
	const struct zl_cfg_flag *tables[] = {head, cfg->etcd.flags, tail, NULL};
	const struct zl_cfg cli = {
	    .prog = "zipline-controller", .usage = ctrl_usage, .col = 27, .tables = tables};
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	zl_cfg_etcd_init(&cfg->etcd, true);
	cfg->endpoint = getenv("CSI_ENDPOINT");
	cfg->leader_election = true;
	cfg->manager = true;
	cfg->flatten = true;
	cfg->flatten_rate_mib = CTRL_FLATTEN_RATE_MIB;
	cfg->gc_interval_s = CTRL_GC_INTERVAL_S;
	cfg->manager_grace_s = CTRL_MANAGER_GRACE_S;
	cfg->down_out_s = CTRL_DOWN_OUT_INTERVAL_S;
	rc = zl_cfg_parse(&cli, argc, argv);
	if (rc)
		return rc;
	rc = zl_cfg_csi_endpoint_check(&cli, cfg->endpoint);
	if (rc)
		return rc;
	rc = zl_cfg_etcd_check(&cli, &cfg->etcd);
	if (rc)
		return rc;
	if (cfg->cluster_key_file && !*cfg->cluster_key_file)
		return zl_cfg_err(&cli, "--cluster-key-file", "",
				  "empty; pass the file that holds "
				  "the cluster key");
	if (cfg->leader_id && (!*cfg->leader_id || strlen(cfg->leader_id) >= CTRL_ID_MAX))
		return zl_cfg_err(&cli, "--leader-id", cfg->leader_id,
				  "must be 1..%d bytes; pass "
				  "a shorter id",
				  CTRL_ID_MAX - 1);
	return 0;
}
