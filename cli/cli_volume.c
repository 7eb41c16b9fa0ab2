/* zl volume create|ls|inspect|set|resize|rm (+ dispatch of import/export/serve). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_health.h"
#include "lib/client/client.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"

static const char cli_volume_usage[] =
    "usage: zl volume create NAME --size SIZE [--replicas N] [--chunk-size SIZE] [--min-size N]\n"
    "                        [LIMITS] [--io-timeout SEC]\n"
    "       zl volume set NAME [--min-size N] [LIMITS] [--io-timeout SEC]\n"
    "         LIMITS: --read-iops N --write-iops N --read-bps B --write-bps B (0 = unlimited),\n"
    "         --iops N --bps B (read and write), --burst-read-iops N ... --burst-iops N\n"
    "         --burst-bps B (0 = a tenth of a second of the rate)\n"
    "       zl volume resize NAME SIZE   (grows it; never shrinks)\n"
    "       zl volume ls\n"
    "       zl volume inspect NAME\n"
    "       zl volume rm NAME [--force]\n"
    "       zl volume clone SRC NEW [--from-snapshot SNAPSHOT] [--size SIZE]\n"
    "       zl volume flatten NAME\n"
    "       zl volume import NAME FILE\n"
    "       zl volume export NAME FILE [--snapshot SNAPSHOT]\n"
    "       zl volume serve NAME --nbd unix:PATH|HOST:PORT\n"
    "       zl volume scrub NAME [--json]\n"
    "       zl volume verify NAME [--json] [--snapshot SNAPSHOT]\n"
    "       zl volume rebalance NAME [--no-wait] [--timeout SEC]\n";

/* The knob options of zl volume create and set (long only, lib/meta's
 * zl_knob names): the limits and their read+write forms. --min-size has its
 * own case; --io-timeout is a global flag (cli->g.io_timeout). */
#define CLI_KNOB_OPT 0x100
#define CLI_KNOB_QOS_OPT(e, j, p, f, b) {f, required_argument, NULL, CLI_KNOB_OPT + ZL_QOS_##e},
#define CLI_KNOB_OPTS                                                                              \
	ZL_QOS_KEYS(CLI_KNOB_QOS_OPT){"iops", required_argument, NULL,                             \
				      CLI_KNOB_OPT + ZL_KNOB_IOPS},                                \
	    {"bps", required_argument, NULL, CLI_KNOB_OPT + ZL_KNOB_BPS},                          \
	    {"burst-iops", required_argument, NULL, CLI_KNOB_OPT + ZL_KNOB_IOPS_BURST},            \
	    {"burst-bps", required_argument, NULL, CLI_KNOB_OPT + ZL_KNOB_BPS_BURST},

static const char cli_knob_help[] =
    "  --read-iops N, --write-iops N    I/Os per second the volume's clients may issue\n"
    "  --read-bps B, --write-bps B      bytes per second (K/M/G suffixes, e.g. 100M)\n"
    "  --iops N, --bps B                the same for reads and writes\n"
    "                                   (0 = unlimited, the default)\n"
    "  --burst-read-iops N ... --burst-write-bps B, --burst-iops N, --burst-bps B\n"
    "                                   what may go at once after an idle time\n"
    "                                   (0 = a tenth of a second of the rate)\n"
    "  --io-timeout SEC                 how long a client I/O waits for an in-sync\n"
    "                                   primary (0 = the client's own, 600 s)\n";

/* A knob option c (or the global --io-timeout: c = CLI_KNOB_OPT +
 * ZL_KNOB_IO_TIMEOUT) into mod: 0, or the usage exit code (printed). */
static int cli_knob_opt(int c, const char *arg, struct zl_volume_mod *mod)
{
	int k = c - CLI_KNOB_OPT;

	if (zl_volume_mod_parse(mod, k, arg)) {
		zl_cli_err("bad --%s '%s': use %s", zl_knob_flag(k), arg, zl_knob_syntax(k));
		return ZL_CLI_EXIT_USAGE;
	}
	return 0;
}

static bool cli_is_knob_opt(int c)
{
	return c >= CLI_KNOB_OPT && c < CLI_KNOB_OPT + ZL_KNOB_N;
}

/* A limit for people: "unlimited", "2000", "100.0 MiB" (bytes). */
static const char *cli_qos_fmt(int k, uint64_t x, char *buf, size_t len)
{
	if (!x)
		snprintf(buf, len, "%s", k < ZL_QOS_RATES ? "unlimited" : "default");
	else if (zl_qos_keys[k].bytes)
		zl_format_size(x, buf, len);
	else
		snprintf(buf, len, "%llu", (unsigned long long)x);
	return buf;
}

/* Parses "CMD ARG..." with only --help: the n arguments what[] names
 * ("volume name", "size") into out[]. usage: "zl CMD NAME ...", printed
 * with --help (or help, when not NULL) and with a wrong count. Returns 0,
 * -1 (help printed) or the exit code. */
static int cli_vol_args(const char *cmd, const char *usage, const char *help, int argc, char **argv,
			const char *const *what, int n, const char **out)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			if (help)
				fputs(help, stdout);
			else
				printf("usage: %s\n", usage);
			return -1;
		}
		return zl_cli_opt_error(cmd, c, optopt, argv, optind);
	}
	if (argc - optind != n) {
		char missing[64];

		snprintf(missing, sizeof(missing), "missing %s",
			 argc - optind < n ? what[argc - optind] : "");
		zl_cli_err("%s (usage: %s)", argc - optind < n ? missing : "too many arguments",
			   usage);
		return ZL_CLI_EXIT_USAGE;
	}
	for (int i = 0; i < n; i++)
		out[i] = argv[optind + i];
	return 0;
}

static int cli_volume_create(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"size", required_argument, NULL, 's'},
	    {"replicas", required_argument, NULL, 'r'},
	    {"chunk-size", required_argument, NULL, 'c'},
	    {"min-size", required_argument, NULL, 'm'},
	    {"help", no_argument, NULL, 'h'},
	    CLI_KNOB_OPTS{0},
	};
	struct zl_volume_spec spec = {0};
	struct zl_volume_mod mod = {0};
	struct zl_volume vol = {0};
	const char *size_s = NULL;
	char params[64];
	char sz[32], csz[32];
	uint64_t v;
	bool created = false;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:r:c:m:h", opts, NULL)) != -1) {
		if (cli_is_knob_opt(c)) {
			if (cli_knob_opt(c, optarg, &mod))
				return ZL_CLI_EXIT_USAGE;
			continue;
		}
		switch (c) {
		case 's':
			size_s = optarg;
			break;
		case 'm':
			if (zl_cli_parse_u32(optarg, 1, ZL_MAX_REPLICAS, &spec.min_size)) {
				zl_cli_err("bad --min-size '%s': use 1 to %d (in-sync copies a "
					   "write needs)",
					   optarg, ZL_MAX_REPLICAS);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'r':
			if (zl_cli_parse_u32(optarg, 1, ZL_MAX_REPLICAS, &spec.replicas)) {
				zl_cli_err("bad --replicas '%s': use 1, 2 or 3", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'c':
			if (zl_cli_parse_size(optarg, false, &v) || v < (64u << 10) ||
			    v > (64u << 20) || (v & (v - 1))) {
				zl_cli_err(
				    "bad --chunk-size '%s': use a power of two from 64K to 64M "
				    "(default 4M)",
				    optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			spec.chunk_size = (uint32_t)v;
			break;
		case 'h':
			printf("usage: zl volume create NAME --size SIZE [--replicas N] "
			       "[--chunk-size SIZE] [--min-size N] [--transport auto|tcp|rdma]\n"
			       "  --min-size: in-sync copies a write needs (default 2 of 3, 1 of "
			       "1 or 2)\n"
			       "  --transport is stored as the volume's transport parameter:\n"
			       "  clients with transport auto use it for this volume\n"
			       "%s",
			       cli_knob_help);
			return 0;
		default:
			return zl_cli_opt_error("volume create", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl volume create NAME --size SIZE)",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	spec.name = argv[optind];
	if (cli->g.io_timeout &&
	    cli_knob_opt(CLI_KNOB_OPT + ZL_KNOB_IO_TIMEOUT, cli->g.io_timeout, &mod))
		return ZL_CLI_EXIT_USAGE;
	memcpy(spec.qos, mod.qos, sizeof(spec.qos));
	spec.io_timeout_s = mod.io_timeout_s;
	if (spec.min_size > (spec.replicas ? spec.replicas : 3)) {
		zl_cli_err("bad --min-size %u: above the volume's %u replicas, no write could be "
			   "acknowledged",
			   spec.min_size, spec.replicas ? spec.replicas : 3);
		return ZL_CLI_EXIT_USAGE;
	}
	if (zl_volume_name_check(spec.name)) {
		zl_cli_err("bad volume name '%s': use 1-253 characters of A-Z a-z 0-9 . _ -",
			   spec.name);
		return ZL_CLI_EXIT_USAGE;
	}
	if (!size_s) {
		zl_cli_err("missing --size for volume '%s' (e.g. --size 10G)", spec.name);
		return ZL_CLI_EXIT_USAGE;
	}
	if (zl_cli_parse_size(size_s, false, &spec.size)) {
		zl_cli_err("bad --size '%s': use a number above 0 with K/M/G/T", size_s);
		return ZL_CLI_EXIT_USAGE;
	}
	/* The global --transport (main checked the value) names the volume's
	 * transport parameter here: this command does no I/O of its own. */
	if (cli->g.transport) {
		enum zl_xport_select sel;

		if (zl_xport_select_parse(cli->g.transport, &sel)) {
			zl_cli_err("bad --transport '%s': use auto, tcp or rdma", cli->g.transport);
			return ZL_CLI_EXIT_USAGE;
		}
		snprintf(params, sizeof(params), "{\"transport\":\"%s\"}",
			 sel == ZL_XPORT_SEL_TCP    ? "tcp"
			 : sel == ZL_XPORT_SEL_RDMA ? "rdma"
						    : "auto");
		spec.params = params;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_create(cli->etcd, cli->prefix, &spec, &vol, &created);
	if (rc == -ZL_ERR_NODES) {
		struct zl_node_info *nodes = NULL;
		size_t n = 0;

		zl_meta_node_list(cli->etcd, cli->prefix, &nodes, &n);
		free(nodes);
		zl_cli_err("cannot create volume '%s': %u replicas need %u storage nodes, %zu live "
			   "(start more zipline-storage daemons or lower --replicas)",
			   spec.name, spec.replicas ? spec.replicas : 3,
			   spec.replicas ? spec.replicas : 3, n);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_EXISTS) {
		zl_cli_err("volume '%s' already exists with different parameters (see 'zl volume "
			   "inspect %s')",
			   spec.name, spec.name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_INVAL) {
		zl_cli_err("cannot create volume '%s': invalid size, chunk size or replicas",
			   spec.name);
		return ZL_CLI_EXIT_USAGE;
	}
	if (rc) {
		char what[300];

		snprintf(what, sizeof(what), "cannot create volume '%s'", spec.name);
		zl_cli_etcd_err(cli, what, rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("%s volume '%s' %s: %s, %u replicas, chunk %s, %u slices\n",
	       created ? "created" : "already have", vol.name, vol.id,
	       zl_format_size(vol.size, sz, sizeof(sz)), vol.replicas,
	       zl_format_size(vol.chunk_size, csz, sizeof(csz)), vol.n_slices);
	zl_volume_fini(&vol);
	return 0;
}

static int cli_volume_ls(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	struct zl_volume *vols = NULL;
	size_t n = 0, i;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: zl volume ls\n");
			return 0;
		}
		return zl_cli_opt_error("volume ls", c, optopt, argv, optind);
	}
	if (optind < argc) {
		zl_cli_err("unexpected argument '%s' (usage: zl volume ls)", argv[optind]);
		return ZL_CLI_EXIT_USAGE;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_list(cli->etcd, cli->prefix, &vols, &n);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot list volumes", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("%-24s %-20s %12s %8s %10s %-9s %s\n", "NAME", "ID", "SIZE", "REPLICAS", "CHUNK",
	       "STATE", "CREATED");
	for (i = 0; i < n; i++) {
		char sz[32], csz[32], ts[32];

		zl_cli_fmt_time(vols[i].created, ts, sizeof(ts));
		printf("%-24s %-20s %12s %8u %10s %-9s %s\n", vols[i].name, vols[i].id,
		       zl_format_size(vols[i].size, sz, sizeof(sz)), vols[i].replicas,
		       zl_format_size(vols[i].chunk_size, csz, sizeof(csz)), vols[i].state, ts);
	}
	zl_meta_volume_list_free(vols, n);
	return 0;
}

/* The placement table of inspect: per slice its state (cli_health.h) and
 * every member with its state; "(down)" marks a member whose node record
 * is gone. "peering" comes from the primaries' status records. */
static void cli_volume_placement(struct zl_cli *cli, const struct zl_volume *v)
{
	uint32_t min_size = zl_volume_min_size(v), counts[ZL_CLI_SLICE_STATES] = {0};
	struct zl_node_info *nodes = NULL;
	struct zl_node_status *st = NULL;
	size_t n_nodes = 0, n_st = 0;

	if (zl_meta_node_list(cli->etcd, cli->prefix, &nodes, &n_nodes))
		zl_cli_err("cannot list storage nodes: every node shows as down");
	if (zl_meta_status_list(cli->etcd, cli->prefix, &st, &n_st)) {
		zl_cli_err("cannot read the storage nodes' status records: no slice shows as "
			   "peering");
		st = NULL;
		n_st = 0;
	}
	for (size_t i = 0; i < n_st; i++)
		if (st[i].peering_slices > st[i].n_peering)
			zl_cli_err("%s peers %u slices and lists %u: the others show the state "
				   "of their members",
				   st[i].node, st[i].peering_slices, st[i].n_peering);
	printf("min_size    %u\n", min_size);
	printf("\nplacement (* primary; member states in_sync, recovering, out; (down): no node "
	       "record)\n");
	printf("  %5s %8s %5s  %-10s  %s\n", "SLICE", "VERSION", "TERM", "STATE", "MEMBERS");
	for (uint32_t i = 0; i < v->n_slices; i++) {
		const struct zl_slice *s = &v->slices[i];
		char row[ZL_MAX_REPLICAS * (ZL_NODE_ID_MAX + 24)] = "";
		struct zl_cli_slice_eval e;
		int prim = zl_slice_primary(s);
		size_t off = 0;

		zl_cli_slice_eval(s, min_size, nodes, n_nodes,
				  zl_cli_slice_peering(s, v->num, i, st, n_st), &e);
		counts[e.state]++;
		for (int k = 0; k < s->n && k < ZL_MAX_REPLICAS && off < sizeof(row); k++) {
			int n = snprintf(
			    row + off, sizeof(row) - off, "%s%s%s:%s%s", k ? "  " : "", s->nodes[k],
			    k == prim ? "*" : "", zl_member_state_name(zl_slice_member_state(s, k)),
			    zl_cli_node_alive(nodes, n_nodes, s->nodes[k]) ? "" : "(down)");
			off = n < 0 ? sizeof(row) : off + (size_t)n;
		}
		printf("  %5u %8llu %5u  %-10s  %s%s\n", i, (unsigned long long)s->version,
		       s->term ? s->term : 1, zl_cli_slice_state_name(e.state), row,
		       e.no_in_sync	? "  (no in-sync member)"
		       : e.primary_down ? "  (primary down)"
		       : e.below_min	? "  (below min_size: writes wait)"
					: "");
	}
	printf("\n%u slices: %u active, %u peering, %u recovering, %u degraded, %u down\n",
	       v->n_slices, counts[ZL_CLI_SLICE_ACTIVE], counts[ZL_CLI_SLICE_PEERING],
	       counts[ZL_CLI_SLICE_RECOVERING], counts[ZL_CLI_SLICE_DEGRADED],
	       counts[ZL_CLI_SLICE_DOWN]);
	free(st);
	free(nodes);
}

/* "limits      write_iops 2000, read_bps 100.0 MiB" or "none". */
static void cli_volume_limits(const struct zl_volume *v)
{
	char buf[32];
	bool any = false;

	printf("limits      ");
	for (int k = 0; k < ZL_QOS_N; k++) {
		if (!v->qos[k])
			continue;
		printf("%s%s %s", any ? ", " : "", zl_qos_keys[k].json,
		       cli_qos_fmt(k, v->qos[k], buf, sizeof(buf)));
		any = true;
	}
	printf("%s\n", any ? " (per second)" : "none");
}

static int cli_volume_inspect(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_volume v = {0};
	const char *name = NULL;
	char sz[32], csz[32], ts[32];
	int rc;

	rc = cli_vol_args("volume inspect", "zl volume inspect NAME", NULL, argc, argv,
			  (const char *const[]){"volume name"}, 1, &name);
	if (rc)
		return rc < 0 ? 0 : rc;
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, name, &v);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot read the volume record", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	zl_cli_fmt_time(v.created, ts, sizeof(ts));
	printf("name        %s\n", v.name);
	printf("id          %s\n", v.id);
	printf("size        %s (%llu bytes)\n", zl_format_size(v.size, sz, sizeof(sz)),
	       (unsigned long long)v.size);
	printf("chunk size  %s\n", zl_format_size(v.chunk_size, csz, sizeof(csz)));
	printf("replicas    %u\n", v.replicas);
	printf("min size    %u\n", zl_volume_min_size(&v));
	if (v.io_timeout_s)
		printf("io timeout  %u s\n", v.io_timeout_s);
	else
		printf("io timeout  the client's (600 s unless --io-timeout)\n");
	cli_volume_limits(&v);
	printf("slices      %u\n", v.n_slices);
	printf("state       %s\n", v.state);
	printf("created     %s\n", ts);
	printf("params      %s\n", v.params[0] ? v.params : "{}");
	printf("snap seq    %u\n", v.snap_seq);
	zl_cli_snapshot_print_vol(cli, v.id);
	zl_cli_clone_print_vol(cli, &v);
	cli_volume_placement(cli, &v);
	zl_volume_fini(&v);
	return 0;
}

static int cli_volume_rm(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"force", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {0}};
	struct zl_client_delete_info info;
	const char *name = NULL;
	bool force = false;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":fh", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			force = true;
			break;
		case 'h':
			printf("usage: zl volume rm NAME [--force]\n"
			       "  removes the volume and its data; storage nodes that are down\n"
			       "  remove their replicas when they are back\n"
			       "  --force  also when the volume is attached (its attachment is\n"
			       "           removed; the node using it gets I/O errors)\n");
			return 0;
		default:
			return zl_cli_opt_error("volume rm", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl volume rm NAME [--force])",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	rc = zl_cli_client(cli);
	if (rc)
		return rc;
	rc = zl_client_volume_remove(cli->client, name, force, &info);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY && info.dependants[0]) {
		zl_cli_err("cannot delete volume '%s': %s", name, info.dependants);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY && info.snapshots) {
		zl_cli_err("volume '%s' has %u snapshot%s, which live in its chunks: delete them "
			   "first ('zl snapshot ls %s', 'zl snapshot rm NAME'), or pass --force to "
			   "remove the volume and its snapshots' data anyway",
			   name, info.snapshots, info.snapshots == 1 ? "" : "s", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY) {
		zl_cli_err("volume '%s' is attached to node %s: detach it first (delete the pod "
			   "using it), or pass --force to remove it anyway",
			   name, info.attached_node);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		char what[300];

		snprintf(what, sizeof(what), "cannot delete volume '%s'", name);
		zl_cli_etcd_err(cli, what, rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (info.nodes_pending)
		printf("deleted volume '%s' (%u storage node%s down or failing, e.g. %s: %s its "
		       "replicas when back)\n",
		       name, info.nodes_pending, info.nodes_pending == 1 ? "" : "s",
		       info.pending_node, info.nodes_pending == 1 ? "it removes" : "they remove");
	else
		printf("deleted volume '%s'\n", name);
	return 0;
}

/* Prints what zl volume set changed, one line per knob. */
static void cli_volume_set_print(const char *name, const struct zl_volume_mod *mod,
				 const struct zl_volume *was)
{
	char a[32], b[32];

	if (mod->mask & ZL_VMOD_MIN_SIZE)
		printf("volume '%s': min_size %u -> %u\n", name, zl_volume_min_size(was),
		       mod->min_size);
	if (mod->mask & ZL_VMOD_IO_TIMEOUT) {
		snprintf(a, sizeof(a), was->io_timeout_s ? "%u s" : "default", was->io_timeout_s);
		snprintf(b, sizeof(b), mod->io_timeout_s ? "%u s" : "default", mod->io_timeout_s);
		printf("volume '%s': io_timeout %s -> %s\n", name, a, b);
	}
	for (int k = 0; k < ZL_QOS_N; k++)
		if (mod->mask & ZL_VMOD_QOS(k))
			printf("volume '%s': %s %s -> %s\n", name, zl_qos_keys[k].json,
			       cli_qos_fmt(k, was->qos[k], a, sizeof(a)),
			       cli_qos_fmt(k, mod->qos[k], b, sizeof(b)));
}

/* zl volume set NAME [--min-size N] [LIMITS] [--io-timeout SEC]: changes a
 * running volume's record (zl_meta_volume_modify: compare-and-swap, retried
 * on a concurrent change); the storage daemons apply min_size from their
 * volume watch, the volume's clients the limits and io_timeout from theirs. */
static int cli_volume_set(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"min-size", required_argument, NULL, 'm'},
					     {"help", no_argument, NULL, 'h'},
					     CLI_KNOB_OPTS{0}};
	static const char usage[] = "usage: zl volume set NAME [--min-size N] [--read-iops N] "
				    "[--write-iops N] [--read-bps B] [--write-bps B] [--iops N] "
				    "[--bps B] [--burst-...] [--io-timeout SEC]";
	struct zl_volume_mod mod = {0};
	struct zl_volume was = {0};
	const char *name;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
		if (cli_is_knob_opt(c) || c == 'm') {
			if (cli_knob_opt(c == 'm' ? CLI_KNOB_OPT + ZL_KNOB_MIN_SIZE : c, optarg,
					 &mod))
				return ZL_CLI_EXIT_USAGE;
			continue;
		}
		switch (c) {
		case 'h':
			printf("%s\n"
			       "  --min-size  in-sync copies a write needs before it is acknowledged\n"
			       "              (1..replicas); the daemons apply it at once\n"
			       "%s"
			       "  Open clients (attach processes, zl bench) apply the limits and the\n"
			       "  io timeout at once, without a restart.\n",
			       usage, cli_knob_help);
			return 0;
		default:
			return zl_cli_opt_error("volume set", c, optopt, argv, optind);
		}
	}
	if (cli->g.io_timeout &&
	    cli_knob_opt(CLI_KNOB_OPT + ZL_KNOB_IO_TIMEOUT, cli->g.io_timeout, &mod))
		return ZL_CLI_EXIT_USAGE;
	if (argc - optind != 1 || !mod.mask) {
		zl_cli_err("%s (%s)",
			   argc - optind < 1  ? "missing volume name"
			   : argc - optind > 1 ? "too many arguments"
					       : "nothing to set",
			   usage);
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_modify(cli->etcd, cli->prefix, name, &mod, &was, NULL);
	if (!rc) {
		cli_volume_set_print(name, &mod, &was);
		return 0;
	}
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_INVAL) {
		zl_cli_err("bad --min-size %u for volume '%s': it has %u replica%s, no write "
			   "could be acknowledged",
			   mod.min_size, name, was.replicas, was.replicas == 1 ? "" : "s");
		return ZL_CLI_EXIT_USAGE;
	}
	{
		char what[300];

		snprintf(what, sizeof(what), "cannot change volume '%s'%s", name,
			 rc == -ZL_ERR_CONFLICT ? " (it kept changing under us)" : "");
		zl_cli_etcd_err(cli, what, rc);
	}
	return ZL_CLI_EXIT_RUNTIME;
}

static const char cli_resize_help[] =
    "usage: zl volume resize NAME|ID SIZE\n"
    "  grows the volume to SIZE (K/M/G/T, powers of 1024; rounded up to 4 KiB,\n"
    "  at most 1 PiB): its record's size, a compare-and-swap retried when the\n"
    "  record changes meanwhile (the edit ControllerExpandVolume makes).\n"
    "  Volumes never shrink: a SIZE below the volume's is refused; its own\n"
    "  size changes nothing. The storage daemons and the volume's clients\n"
    "  (zl, attach processes) see the new size at once, but the device of an\n"
    "  attached volume (/dev/ublkbN, /dev/nbdN, the loop device on the FUSE\n"
    "  file) and its filesystem keep the old size until NodeExpandVolume or\n"
    "  the next stage: in Kubernetes grow the PVC instead\n"
    "  (spec.resources.requests.storage), which also updates the PV; a PVC\n"
    "  grown later to less than the size given here gets the size given here.\n";

/* Prints why zl_meta_volume_modify refused to grow name to size (was: the
 * record as read); returns the exit code. */
static int cli_volume_resize_err(struct zl_cli *cli, const char *name, uint64_t size,
				 const struct zl_volume *was, int rc)
{
	struct zl_snapshot snap;
	char a[32], b[32], what[300];

	if ((rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) && !was->id[0]) {
		if (!zl_meta_snap_lookup(cli->etcd, cli->prefix, name, &snap))
			zl_cli_err("'%s' is a snapshot of volume %s, not a volume: snapshots keep "
				   "their size (clone it larger: 'zl volume clone %s NEW "
				   "--from-snapshot %s --size SIZE')",
				   name, snap.vol, snap.vol, name);
		else
			zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_RANGE && size > ZL_META_SIZE_MAX) {
		zl_cli_err("cannot resize volume '%s' to %s: the largest volume is %s", name,
			   zl_format_size(size, a, sizeof(a)),
			   zl_format_size(ZL_META_SIZE_MAX, b, sizeof(b)));
		return ZL_CLI_EXIT_USAGE;
	}
	if (rc == -ZL_ERR_RANGE) {
		zl_cli_err("volume '%s' is %s (%llu bytes); shrinking is not supported: give a "
			   "size >= %s",
			   name, zl_format_size(was->size, a, sizeof(a)),
			   (unsigned long long)was->size, a);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY) {
		if (!strcmp(was->state, "deleting"))
			zl_cli_err("cannot resize volume '%s': it is deleting, not ready (an "
				   "interrupted delete: 'zl volume rm %s' finishes it)",
				   name, name);
		else
			zl_cli_err("cannot resize volume '%s': it is %s, not ready (wait until "
				   "'zl volume inspect %s' shows it ready, then run this again)",
				   name, was->state, name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	snprintf(what, sizeof(what), "cannot resize volume '%s'%s", name,
		 rc == -ZL_ERR_CONFLICT ? " (its record kept changing under us: run the same "
					  "command again)"
					: "");
	zl_cli_etcd_err(cli, what, rc);
	return ZL_CLI_EXIT_RUNTIME;
}

/* zl volume resize NAME|ID SIZE: grows the volume's record
 * (zl_meta_volume_modify with ZL_VMOD_SIZE, the edit of
 * ControllerExpandVolume). Attached devices are not grown: cli_resize_help. */
static int cli_volume_resize(struct zl_cli *cli, int argc, char **argv)
{
	static const char *const what[] = {"volume name", "size"};
	struct zl_volume_mod mod = {.mask = ZL_VMOD_SIZE};
	struct zl_volume was = {0}, now = {0};
	char a[32], b[32], node[256];
	const char *args[2], *name;
	int rc;

	rc = cli_vol_args("volume resize", "zl volume resize NAME SIZE", cli_resize_help, argc,
			  argv, what, 2, args);
	if (rc)
		return rc < 0 ? 0 : rc;
	name = args[0];
	if (zl_cli_parse_size(args[1], false, &mod.size)) {
		zl_cli_err("bad size '%s': use a number above 0 with K/M/G/T (e.g. 20G)", args[1]);
		return ZL_CLI_EXIT_USAGE;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_modify(cli->etcd, cli->prefix, name, &mod, &was, &now);
	if (rc)
		return cli_volume_resize_err(cli, name, mod.size, &was, rc);
	if (now.size == was.size) {
		printf("volume '%s' (%s) is %s already: nothing to do\n", name, now.id,
		       zl_format_size(now.size, a, sizeof(a)));
		return 0;
	}
	printf("volume '%s' (%s): size %s -> %s (%llu bytes)\n", name, now.id,
	       zl_format_size(was.size, a, sizeof(a)), zl_format_size(now.size, b, sizeof(b)),
	       (unsigned long long)now.size);
	if (!zl_meta_attachment_get(cli->etcd, cli->prefix, now.id, node, sizeof(node)))
		printf("volume '%s' is attached to node %s: its device keeps %s until "
		       "NodeExpandVolume (grow the PVC) or the next stage\n",
		       name, node, a);
	return 0;
}

int zl_cli_volume(struct zl_cli *cli, int argc, char **argv)
{
	const char *sub = argc >= 2 ? argv[1] : NULL;

	if (!sub) {
		fputs(cli_volume_usage, stderr);
		zl_cli_err("missing volume subcommand (see 'zl volume --help')");
		return ZL_CLI_EXIT_USAGE;
	}
	if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
		fputs(cli_volume_usage, stdout);
		return 0;
	}
	argc--;
	argv++;
	if (!strcmp(sub, "create"))
		return cli_volume_create(cli, argc, argv);
	if (!strcmp(sub, "ls") || !strcmp(sub, "list"))
		return cli_volume_ls(cli, argc, argv);
	if (!strcmp(sub, "inspect") || !strcmp(sub, "show"))
		return cli_volume_inspect(cli, argc, argv);
	if (!strcmp(sub, "set"))
		return cli_volume_set(cli, argc, argv);
	if (!strcmp(sub, "resize"))
		return cli_volume_resize(cli, argc, argv);
	if (!strcmp(sub, "rm") || !strcmp(sub, "delete"))
		return cli_volume_rm(cli, argc, argv);
	if (!strcmp(sub, "import"))
		return zl_cli_volume_import(cli, argc, argv);
	if (!strcmp(sub, "export"))
		return zl_cli_volume_export(cli, argc, argv);
	if (!strcmp(sub, "serve"))
		return zl_cli_volume_serve(cli, argc, argv);
	if (!strcmp(sub, "clone"))
		return zl_cli_volume_clone(cli, argc, argv);
	if (!strcmp(sub, "flatten"))
		return zl_cli_volume_flatten(cli, argc, argv);
	if (!strcmp(sub, "rebalance"))
		return zl_cli_volume_rebalance(cli, argc, argv);
	if (!strcmp(sub, "scrub") || !strcmp(sub, "verify"))
		return zl_cli_volume_scrub_cmd(cli, argc, argv, !strcmp(sub, "verify"));
	zl_cli_err("unknown volume subcommand '%s' (see 'zl volume --help')", sub);
	return ZL_CLI_EXIT_USAGE;
}
