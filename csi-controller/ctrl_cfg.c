/* Command line of zipline-controller. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"

static const char ctrl_usage[] =
    "usage: zipline-controller [flags]\n"
    "CSI Identity + Controller service of Zipline (driver " CTRL_DRIVER_NAME ").\n"
    "  --endpoint URL           CSI endpoint, unix:///path/csi.sock (env CSI_ENDPOINT)\n"
    "  --etcd URLS              etcd endpoints, comma-separated (env ZIPLINE_ETCD)\n"
    "  --etcd-prefix P          key prefix (default " ZL_META_DEFAULT_PREFIX ")\n"
    "  --etcd-cacert FILE       TLS CA bundle for etcd\n"
    "  --etcd-cert FILE         TLS client certificate for etcd\n"
    "  --etcd-key FILE          TLS client key for etcd\n"
    "  --etcd-user USER         etcd user (with --etcd-password-file)\n"
    "  --etcd-password-file F   file holding the etcd password\n"
    "  --cluster-key-file FILE  the cluster key (64 hex digits, e.g. a mounted\n"
    "                           Secret; the storage daemons' --cluster-key-file);\n"
    "                           default: <prefix>keys/cluster in etcd\n"
    "  --leader-election[=on|off]  elect, through etcd, the replica that runs the jobs\n"
    "                           that must run once (default on; every replica serves\n"
    "                           every CSI call either way; off = this one runs them)\n"
    "  --no-leader-election     same as --leader-election=off\n"
    "  --leader-id ID           replica identity (default hostname-pid)\n"
    "  --gc-interval SECONDS    period of the leader's garbage collection (default 60)\n"
    "  --manager=on|off         decide slice membership (rules M1-M7 of\n"
    "                           docs/REPLICATION.md) while this replica is the\n"
    "                           leader (default on; off = membership as in 0.1)\n"
    "  --manager-grace SECS     a node record gone this long: its members go out\n"
    "                           (default 2)\n"
    "  --down-out-interval SECS a node record gone this long: its members are\n"
    "                           replaced on other nodes (default 600)\n"
    "  --workers N              gRPC worker threads (default 4)\n"
    "  --log-level L            err|warn|info|debug (env ZL_LOG_LEVEL)\n"
    "  --version                print the version and exit\n"
    "  --help                   print this help and exit\n";

enum {
	OPT_ENDPOINT = 1000,
	OPT_ETCD,
	OPT_PREFIX,
	OPT_CACERT,
	OPT_CERT,
	OPT_KEY,
	OPT_USER,
	OPT_PWFILE,
	OPT_CKEY,
	OPT_LEADER,
	OPT_NO_LEADER,
	OPT_LEADER_ID,
	OPT_GC_INTERVAL,
	OPT_MANAGER,
	OPT_MANAGER_GRACE,
	OPT_DOWN_OUT,
	OPT_WORKERS,
	OPT_LOG_LEVEL,
	OPT_VERSION,
	OPT_HELP,
};

static const struct option ctrl_opts[] = {
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"etcd", required_argument, NULL, OPT_ETCD},
    {"etcd-prefix", required_argument, NULL, OPT_PREFIX},
    {"etcd-cacert", required_argument, NULL, OPT_CACERT},
    {"etcd-cert", required_argument, NULL, OPT_CERT},
    {"etcd-key", required_argument, NULL, OPT_KEY},
    {"etcd-user", required_argument, NULL, OPT_USER},
    {"etcd-password-file", required_argument, NULL, OPT_PWFILE},
    {"cluster-key-file", required_argument, NULL, OPT_CKEY},
    {"leader-election", optional_argument, NULL, OPT_LEADER},
    {"no-leader-election", no_argument, NULL, OPT_NO_LEADER},
    {"leader-id", required_argument, NULL, OPT_LEADER_ID},
    {"gc-interval", required_argument, NULL, OPT_GC_INTERVAL},
    {"manager", optional_argument, NULL, OPT_MANAGER},
    {"manager-grace", required_argument, NULL, OPT_MANAGER_GRACE},
    {"down-out-interval", required_argument, NULL, OPT_DOWN_OUT},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static __attribute__((format(printf, 1, 2))) int cfg_bad(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "zipline-controller: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	return 2;
}

static int cfg_bool(const char *s, bool *out)
{
	if (!s || !strcmp(s, "on") || !strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "yes"))
		*out = true;
	else if (!strcmp(s, "off") || !strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "no"))
		*out = false;
	else
		return -1;
	return 0;
}

int ctrl_cfg_parse(int argc, char **argv, struct ctrl_cfg *cfg)
{
	char *end;
	long n;
	int o;

	memset(cfg, 0, sizeof(*cfg));
	cfg->endpoint = getenv("CSI_ENDPOINT");
	cfg->etcd_urls = getenv("ZIPLINE_ETCD");
	cfg->prefix = ZL_META_DEFAULT_PREFIX;
	cfg->leader_election = true;
	cfg->manager = true;
	cfg->gc_interval_s = CTRL_GC_INTERVAL_S;
	cfg->manager_grace_s = CTRL_MANAGER_GRACE_S;
	cfg->down_out_s = CTRL_DOWN_OUT_INTERVAL_S;
	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, ":", ctrl_opts, NULL)) != -1) {
		switch (o) {
		case OPT_ENDPOINT: cfg->endpoint = optarg; break;
		case OPT_ETCD: cfg->etcd_urls = optarg; break;
		case OPT_PREFIX: cfg->prefix = optarg; break;
		case OPT_CACERT: cfg->cacert = optarg; break;
		case OPT_CERT: cfg->cert = optarg; break;
		case OPT_KEY: cfg->key = optarg; break;
		case OPT_USER: cfg->user = optarg; break;
		case OPT_PWFILE: cfg->password_file = optarg; break;
		case OPT_CKEY: cfg->cluster_key_file = optarg; break;
		case OPT_LEADER:
			if (cfg_bool(optarg, &cfg->leader_election))
				return cfg_bad("--leader-election takes on or off, not '%s'", optarg);
			break;
		case OPT_NO_LEADER: cfg->leader_election = false; break;
		case OPT_LEADER_ID: cfg->leader_id = optarg; break;
		case OPT_GC_INTERVAL:
			n = strtol(optarg, &end, 10);
			if (!*optarg || *end || n < 1 || n > 86400)
				return cfg_bad("--gc-interval takes seconds 1..86400, not '%s'",
					       optarg);
			cfg->gc_interval_s = (unsigned int)n;
			break;
		case OPT_MANAGER:
			if (cfg_bool(optarg, &cfg->manager))
				return cfg_bad("--manager takes on or off, not '%s'", optarg);
			break;
		case OPT_MANAGER_GRACE:
			n = strtol(optarg, &end, 10);
			if (!*optarg || *end || n < 0 || n > 86400)
				return cfg_bad("--manager-grace takes seconds 0..86400, not '%s'",
					       optarg);
			cfg->manager_grace_s = (unsigned int)n;
			break;
		case OPT_DOWN_OUT:
			n = strtol(optarg, &end, 10);
			if (!*optarg || *end || n < 1 || n > 30 * 86400)
				return cfg_bad("--down-out-interval takes seconds 1..2592000, not "
					       "'%s'", optarg);
			cfg->down_out_s = (unsigned int)n;
			break;
		case OPT_WORKERS:
			n = strtol(optarg, &end, 10);
			if (!*optarg || *end || n < 1 || n > 64)
				return cfg_bad("--workers takes a number 1..64, not '%s'", optarg);
			cfg->workers = (unsigned int)n;
			break;
		case OPT_LOG_LEVEL: cfg->log_level = optarg; break;
		case OPT_VERSION:
			printf("zipline-controller %s\n", ZL_VERSION_STRING);
			return 1;
		case OPT_HELP:
			fputs(ctrl_usage, stdout);
			return 1;
		case ':':
			return cfg_bad("flag %s needs a value", argv[optind - 1]);
		default:
			return cfg_bad("unknown flag %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cfg_bad("unexpected argument '%s'", argv[optind]);
	if (cfg->log_level && zl_log_set_level(cfg->log_level))
		return cfg_bad("--log-level takes err|warn|info|debug, not '%s'", cfg->log_level);
	if (!cfg->endpoint || !*cfg->endpoint)
		return cfg_bad("%s", "no endpoint: pass --endpoint unix:///path/csi.sock or set CSI_ENDPOINT");
	if (strncmp(cfg->endpoint, "unix:", 5))
		return cfg_bad("endpoint '%s' is not unix:///path (CSI allows UNIX sockets only)",
			       cfg->endpoint);
	if (!cfg->etcd_urls || !*cfg->etcd_urls)
		return cfg_bad("%s", "no etcd: pass --etcd http://host:2379 or set ZIPLINE_ETCD");
	if (!*cfg->prefix || cfg->prefix[strlen(cfg->prefix) - 1] != '/' ||
	    strlen(cfg->prefix) >= 100)
		return cfg_bad("--etcd-prefix '%s' must end with '/' and be shorter than 100 bytes",
			       cfg->prefix);
	if (cfg->cluster_key_file && !*cfg->cluster_key_file)
		return cfg_bad("%s", "--cluster-key-file needs a file name");
	if (!!cfg->user != !!cfg->password_file)
		return cfg_bad("%s", "--etcd-user and --etcd-password-file go together");
	if (cfg->leader_id && (!*cfg->leader_id || strlen(cfg->leader_id) >= CTRL_ID_MAX))
		return cfg_bad("--leader-id '%s' must be 1..127 bytes", cfg->leader_id);
	return 0;
}
