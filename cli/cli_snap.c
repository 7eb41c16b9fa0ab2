/* zl snapshot create|ls|rm|export (docs/SNAPSHOTS.md). A snapshot of a
 * volume some client serves (its snapwriters/ key is live) is asked of that
 * client, which alone knows which writes it acknowledged (§3); otherwise zl
 * takes it itself, one etcd transaction (lib/meta/meta_snap.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"

#define SNAP_WAIT_DEFAULT_S 30u
#define SNAP_WAIT_MAX_S	    3600u
/* The help texts and messages name these numbers. */
_Static_assert(SNAP_WAIT_DEFAULT_S == 30, "the help of create and create-group says 30 s");
_Static_assert(ZL_SNAPGROUP_VOLS_MAX == 16, "create-group's help and errors say 16 volumes");

static const char cli_snap_usage[] =
    "usage: zl snapshot create VOLUME NAME [--timeout SEC]\n"
    "       zl snapshot ls [VOLUME]\n"
    "       zl snapshot rm NAME\n"
    "       zl snapshot export NAME FILE [--piece 1M] [--depth 8] [--progress]\n"
    "       zl snapshot create-group GROUP VOLUME VOLUME... [--timeout SEC]\n"
    "       zl snapshot rm-group GROUP\n";

/* The options of create and create-group: --timeout SEC (into
 * *timeout_s) and --help (prints help, whose %u is the default timeout).
 * Returns -1 to go on, or the exit code. */
static int cli_snap_wait_opts(int argc, char **argv, const char *cmd, const char *help,
			      uint32_t *timeout_s)
{
	static const struct option opts[] = {
	    {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":t:h", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			if (zl_cli_parse_u32(optarg, 1, SNAP_WAIT_MAX_S, timeout_s)) {
				zl_cli_err("bad --timeout '%s': use 1 to %u seconds", optarg,
					   SNAP_WAIT_MAX_S);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			return zl_cli_opt_error(cmd, c, optopt, argv, optind);
		}
	}
	return -1;
}

/* Prints what a failed create means and what to do; returns the exit code. */
static int cli_snap_create_err(struct zl_cli *cli, const char *vol, const char *name, int rc)
{
	struct zl_snapshot other;

	switch (-rc) {
	case ZL_ERR_NOT_FOUND:
		zl_cli_err("volume '%s' not found: no snapshot taken (see 'zl volume ls')", vol);
		break;
	case ZL_ERR_EXISTS:
		if (!zl_meta_snap_lookup(cli->etcd, cli->prefix, name, &other))
			zl_cli_err("snapshot name '%s' is taken by a snapshot of volume %s: pick "
				   "another name (or 'zl snapshot rm %s')",
				   name, other.vol, name);
		else
			zl_cli_err("snapshot name '%s' is taken: pick another name", name);
		break;
	case ZL_ERR_INVAL:
		zl_cli_err("bad snapshot name '%s': use 1 to 253 characters of [A-Za-z0-9._-]",
			   name);
		return ZL_CLI_EXIT_USAGE;
	case ZL_ERR_BUSY:
		zl_cli_err("volume '%s' is being deleted: no snapshot taken", vol);
		break;
	case ZL_ERR_RANGE:
		zl_cli_err("volume '%s' holds the most snapshots it can (%u): delete some with "
			   "'zl snapshot rm'",
			   vol, ZL_META_SNAPS_MAX);
		break;
	case ZL_ERR_CONFLICT:
		zl_cli_err("volume '%s' kept changing while the snapshot was taken: run the same "
			   "command again",
			   vol);
		break;
	default:
		zl_cli_etcd_err(cli, "cannot take the snapshot", rc);
	}
	return ZL_CLI_EXIT_RUNTIME;
}

static int cli_snap_create(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_volume v = {0};
	struct zl_snapshot s = {0};
	char writer[128] = "", ts[32];
	uint32_t timeout_s = SNAP_WAIT_DEFAULT_S;
	const char *vol, *name;
	bool created = true;
	int rc;

	rc = cli_snap_wait_opts(argc, argv, "snapshot create",
				"usage: zl snapshot create VOLUME NAME [--timeout SEC]\n"
				"  a volume served by a client (zl volume serve, an attach "
				"process) is snapshotted\n"
				"  through it; --timeout bounds the wait for its answer "
				"(default 30 s)\n",
				&timeout_s);
	if (rc >= 0)
		return rc;
	if (argc - optind != 2) {
		zl_cli_err("%s (usage: zl snapshot create VOLUME NAME)",
			   argc - optind < 2 ? "missing volume or snapshot name"
					     : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	vol = argv[optind];
	name = argv[optind + 1];
	if (zl_volume_name_check(name))
		return cli_snap_create_err(cli, vol, name, -ZL_ERR_INVAL);
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, vol, &v);
	if (rc)
		return cli_snap_create_err(cli, vol, name, rc);
	rc = zl_meta_snap_take(cli->etcd, cli->prefix, &v, name, timeout_s * 1000u, &s, &created,
			       writer, sizeof(writer));
	if (rc == -ZL_ERR_TIMEOUT) {
		zl_cli_err("client %s serving volume '%s' did not take snapshot '%s' within %u s: "
			   "check that it runs (its log), then run the same command again",
			   writer, vol, name, timeout_s);
		rc = ZL_CLI_EXIT_RUNTIME;
		goto out_vol;
	}
	if (rc) {
		rc = cli_snap_create_err(cli, vol, name, rc);
		goto out_vol;
	}
	zl_cli_fmt_time(s.created, ts, sizeof(ts));
	printf("%s snapshot '%s' (%s) of volume '%s' at sequence %u%s%s\n",
	       created ? "created" : "exists:", s.name, s.id, v.name, s.seq,
	       writer[0] && created ? ", taken by client " : "", writer[0] && created ? writer : "");
	rc = 0;
out_vol:
	zl_volume_fini(&v);
	return rc;
}

/* The space snapshots hold on disk (docs/SNAPSHOTS.md §6), from the storage
 * daemons' status records: per snapshot, the bytes its clone chunk files
 * allocate summed over every node (so over every replica), and on how many
 * nodes. */
struct cli_snap_space {
	uint64_t bytes;
	uint32_t clones, nodes;
	size_t seen; /* 1 + the last status record counted in nodes */
};

/* Sums the status records' entries into out[0 .. n) (list sorted by volume
 * and sequence, as zl_meta_snap_list gives it). An entry counts for the
 * newest snapshot of its volume at or below its sequence: the daemon's own
 * rule, for a clone whose snapshot was deleted and that its collection has
 * not looked at yet; one below every snapshot of a volume of list is
 * awaiting collection (*pending). *partial: some node lists only part of
 * its entries (ZL_STATUS_SNAP_MAX) and may hold more of these volumes.
 * Returns how many status records were read, -1 when they cannot be. */
static int cli_snap_space_sum(struct zl_cli *cli, const struct zl_snapshot *list, size_t n,
			      struct cli_snap_space *out, uint64_t *pending, bool *partial)
{
	struct zl_node_status *st = NULL;
	size_t n_st = 0;

	memset(out, 0, n * sizeof(*out));
	*pending = 0;
	*partial = false;
	if (zl_meta_status_list(cli->etcd, cli->prefix, &st, &n_st))
		return -1;
	for (size_t i = 0; i < n_st; i++) {
		*partial |= st[i].n_snap < st[i].snap_entries;
		for (uint32_t j = 0; j < st[i].n_snap; j++) {
			const struct zl_status_snap *e = &st[i].snap[j];
			size_t best = n;
			bool vol_known = false;

			for (size_t k = 0; k < n; k++) {
				uint64_t vol;

				if (zl_vol_id_parse(list[k].vol, &vol) || vol != e->vol)
					continue;
				vol_known = true;
				if (list[k].seq <= e->seq)
					best = k;
			}
			if (best == n) {
				*pending += vol_known ? e->bytes : 0;
				continue;
			}
			if (out[best].seen != i + 1) {
				out[best].seen = i + 1;
				out[best].nodes++;
			}
			out[best].bytes += e->bytes;
			out[best].clones += e->clones;
		}
	}
	free(st);
	return (int)n_st;
}

static void cli_snap_table(const struct zl_snapshot *list, size_t n, const struct zl_volume *vols,
			   size_t n_vols, const struct cli_snap_space *space)
{
	printf("%-24s %-22s %-24s %6s %10s %-9s %-16s %-20s %s\n", "NAME", "ID", "VOLUME", "SEQ",
	       "SIZE", "STATE", "GROUP", "CREATED", "SPACE (ALL REPLICAS)");
	for (size_t i = 0; i < n; i++) {
		const char *vname = list[i].vol;
		char sz[32], ts[32], sp[32];

		for (size_t k = 0; k < n_vols; k++)
			if (!strcmp(vols[k].id, list[i].vol))
				vname = vols[k].name;
		zl_cli_fmt_time(list[i].created, ts, sizeof(ts));
		printf("%-24s %-22s %-24s %6u %10s %-9s %-16s %-20s %s\n", list[i].name, list[i].id,
		       vname, list[i].seq, zl_format_size(list[i].size, sz, sizeof(sz)),
		       list[i].state, list[i].group[0] ? list[i].group : "-", ts,
		       space ? zl_format_size(space[i].bytes, sp, sizeof(sp)) : "-");
	}
}

static int cli_snap_ls(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	struct zl_snapshot *list = NULL;
	struct zl_volume *vols = NULL, v = {0};
	struct cli_snap_space *space = NULL;
	size_t n = 0, n_vols = 0;
	uint64_t pending;
	bool partial;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: zl snapshot ls [VOLUME]\n");
			return 0;
		}
		return zl_cli_opt_error("snapshot ls", c, optopt, argv, optind);
	}
	if (argc - optind > 1) {
		zl_cli_err("too many arguments (usage: zl snapshot ls [VOLUME])");
		return ZL_CLI_EXIT_USAGE;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	if (optind < argc) {
		rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, argv[optind], &v);
		if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) {
			zl_cli_err("volume '%s' not found (see 'zl volume ls')", argv[optind]);
			return ZL_CLI_EXIT_RUNTIME;
		}
		if (rc) {
			zl_cli_etcd_err(cli, "cannot read the volume record", rc);
			return ZL_CLI_EXIT_RUNTIME;
		}
	}
	rc = zl_meta_snap_list(cli->etcd, cli->prefix, v.id[0] ? v.id : NULL, &list, &n);
	if (!rc)
		rc = zl_meta_volume_list(cli->etcd, cli->prefix, &vols, &n_vols);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot list snapshots", rc);
		rc = ZL_CLI_EXIT_RUNTIME;
		goto out;
	}
	space = n ? calloc(n, sizeof(*space)) : NULL;
	if (space && cli_snap_space_sum(cli, list, n, space, &pending, &partial) < 0) {
		zl_cli_err("cannot read the storage nodes' status records: no space shown");
		free(space);
		space = NULL;
	}
	cli_snap_table(list, n, vols, n_vols, space);
	free(space);
out:
	zl_meta_volume_list_free(vols, n_vols);
	free(list);
	zl_volume_fini(&v);
	return rc;
}

void zl_cli_snapshot_print_vol(struct zl_cli *cli, const char *vol_id)
{
	struct zl_snapshot *list = NULL;
	struct cli_snap_space *space = NULL;
	uint64_t total = 0, pending = 0;
	bool partial = false;
	size_t n = 0;
	char sz[32], ts[32], sp[32];
	int nodes = -1;

	if (zl_meta_snap_list(cli->etcd, cli->prefix, vol_id, &list, &n)) {
		printf("snapshots   (cannot be listed: %s)\n", zl_etcd_last_error());
		return;
	}
	space = calloc(n ? n : 1, sizeof(*space));
	if (space)
		nodes = cli_snap_space_sum(cli, list, n, space, &pending, &partial);
	printf("snapshots   %zu\n", n);
	for (size_t i = 0; i < n; i++) {
		zl_cli_fmt_time(list[i].created, ts, sizeof(ts));
		printf("  %-24s %-22s seq %-6u %10s %-9s %s", list[i].name, list[i].id, list[i].seq,
		       zl_format_size(list[i].size, sz, sizeof(sz)), list[i].state, ts);
		if (nodes >= 0)
			printf("  space %s (%u clone chunks on %u nodes)",
			       zl_format_size(space[i].bytes, sp, sizeof(sp)), space[i].clones,
			       space[i].nodes);
		printf("\n");
		total += nodes >= 0 ? space[i].bytes : 0;
	}
	/* Space: clone chunk files on every replica, summed (a replica's share
	 * is about total / replicas); a clone read by several snapshots counts
	 * for the newest. */
	if (nodes < 0)
		printf("snap space  unknown (the storage nodes' status records cannot be read)\n");
	else
		printf("snap space  %s on disk, all replicas summed (status records of %d "
		       "nodes)%s\n",
		       zl_format_size(total, sp, sizeof(sp)), nodes,
		       partial ? "; some node lists only part of its snapshot space" : "");
	if (nodes >= 0 && pending)
		printf("            and %s of deleted snapshots awaiting collection\n",
		       zl_format_size(pending, sp, sizeof(sp)));
	free(space);
	free(list);
}

static int cli_snap_rm(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	struct zl_snapshot s;
	const char *name;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: zl snapshot rm NAME\n");
			return 0;
		}
		return zl_cli_opt_error("snapshot rm", c, optopt, argv, optind);
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl snapshot rm NAME)",
			   argc - optind < 1 ? "missing snapshot name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_snap_delete(cli->etcd, cli->prefix, name, &s);
	if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) {
		zl_cli_err("snapshot '%s' not found (see 'zl snapshot ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_CONFLICT) {
		zl_cli_err("volume of snapshot '%s' kept changing: run the same command again",
			   name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY) {
		char what[300], msg[1024] = "";

		snprintf(what, sizeof(what), "snapshot %s", name);
		if (!zl_meta_snap_lookup(cli->etcd, cli->prefix, name, &s))
			zl_meta_clone_refusal(cli->etcd, cli->prefix, s.vol, s.seq, what, msg,
					      sizeof(msg));
		zl_cli_err("cannot delete snapshot '%s': %s", name,
			   msg[0] ? msg : "clones read through it; flatten them first (zl volume "
					  "flatten NAME)");
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot delete the snapshot", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("deleted snapshot '%s' (%s) of volume %s, sequence %u\n", s.name, s.id, s.vol,
	       s.seq);
	return 0;
}

/* zl snapshot create-group GROUP VOL... (§5): one consistent point across
 * the volumes, through every client that serves one of them. */
static int cli_snap_create_group(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_snapgroup_member *m = NULL;
	uint32_t timeout_s = SNAP_WAIT_DEFAULT_S;
	char why[512] = "";
	const char *group;
	bool created = false;
	size_t n;
	int rc;

	rc = cli_snap_wait_opts(argc, argv, "snapshot create-group",
				"usage: zl snapshot create-group GROUP VOLUME VOLUME... [--timeout "
				"SEC]\n"
				"  one crash-consistent point across up to 16 volumes: a snapshot\n"
				"  'GROUP.VOLUME' of each, all or none; every client serving one of\n"
				"  them holds new writes until all hold (at most 5 s), then all\n"
				"  switch together; --timeout bounds the whole wait (default 30 s)\n",
				&timeout_s);
	if (rc >= 0)
		return rc;
	if (argc - optind < 2 || argc - optind > ZL_SNAPGROUP_VOLS_MAX + 1) {
		zl_cli_err("%s (usage: zl snapshot create-group GROUP VOLUME VOLUME...)",
			   argc - optind < 2 ? "missing group name or volumes"
					     : "too many volumes (at most 16)");
		return ZL_CLI_EXIT_USAGE;
	}
	group = argv[optind];
	if (zl_meta_snapgroup_name_check(group)) {
		zl_cli_err("bad group name '%s': use 1 to 63 characters of [A-Za-z0-9._-]", group);
		return ZL_CLI_EXIT_USAGE;
	}
	n = (size_t)(argc - optind - 1);
	m = calloc(n, sizeof(*m));
	if (!m)
		return ZL_CLI_EXIT_RUNTIME;
	for (size_t i = 0; i < n; i++)
		snprintf(m[i].vol, sizeof(m[i].vol), "%s", argv[optind + 1 + (int)i]);
	rc = zl_cli_etcd(cli);
	if (rc)
		goto out;
	rc = zl_meta_snapgroup_take(cli->etcd, cli->prefix, group, m, n, timeout_s * 1000u,
				    &created, why, sizeof(why));
	if (rc) {
		switch (-rc) {
		case ZL_ERR_TIMEOUT:
		case ZL_ERR_BUSY:
			zl_cli_err("group snapshot '%s' not taken: %s; every held client was "
				   "released; check that client (its log), then run the same command "
				   "again",
				   group, why[0] ? why : zl_strerror(rc));
			break;
		case ZL_ERR_STALE:
		case ZL_ERR_CONFLICT:
			zl_cli_err("group snapshot '%s' not taken: %s: run the same command again",
				   group, why[0] ? why : "the volumes kept changing");
			break;
		case ZL_ERR_EXISTS:
			zl_cli_err("group snapshot '%s' not taken: %s: pick another group name (or "
				   "'zl snapshot rm-group %s')",
				   group,
				   why[0] ? why : "the group or a member's snapshot name exists",
				   group);
			break;
		case ZL_ERR_RANGE:
			zl_cli_err("group snapshot '%s' not taken: a volume holds the most "
				   "snapshots it can (%u): delete some with 'zl snapshot rm'",
				   group, ZL_META_SNAPS_MAX);
			break;
		case ZL_ERR_INVAL:
		case ZL_ERR_NOT_FOUND:
			zl_cli_err("group snapshot '%s' not taken: %s (see 'zl volume ls')", group,
				   why[0] ? why : "a volume name is invalid or too long");
			break;
		default:
			if (why[0])
				zl_cli_err("group snapshot '%s' not taken: %s", group, why);
			zl_cli_etcd_err(cli, "cannot take the group snapshot", rc);
		}
		rc = ZL_CLI_EXIT_RUNTIME;
		goto out;
	}
	printf("%s group snapshot '%s' of %zu volumes\n", created ? "created" : "exists:", group,
	       n);
	for (size_t i = 0; i < n; i++)
		printf("  %-24s %-22s seq %-6u %s%s\n", m[i].snap.name, m[i].snap.id, m[i].snap.seq,
		       m[i].writer[0] && created ? "held and switched by client " : "",
		       m[i].writer[0] && created ? m[i].writer : "");
	rc = 0;
out:
	free(m);
	return rc;
}

static int cli_snap_rm_group(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	const char *group;
	size_t gone = 0;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: zl snapshot rm-group GROUP\n"
			       "  deletes every snapshot of the group, then the group\n");
			return 0;
		}
		return zl_cli_opt_error("snapshot rm-group", c, optopt, argv, optind);
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl snapshot rm-group GROUP)",
			   argc - optind < 1 ? "missing group name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	group = argv[optind];
	if (zl_meta_snapgroup_name_check(group)) {
		zl_cli_err("group '%s' not found (see 'zl snapshot ls')", group);
		return ZL_CLI_EXIT_RUNTIME;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_snapgroup_delete(cli->etcd, cli->prefix, group, &gone);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("group '%s' not found (see 'zl snapshot ls')", group);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_BUSY) {
		zl_cli_err("a snapshot of group '%s' has clones reading from it (%zu snapshots "
			   "deleted): flatten them ('zl volume flatten'), then run the same command "
			   "again",
			   group, gone);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_CONFLICT) {
		zl_cli_err("a volume of group '%s' kept changing (%zu snapshots deleted): run the "
			   "same command again",
			   group, gone);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot delete the group (run the same command again)", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("deleted group '%s' and its %zu snapshots\n", group, gone);
	return 0;
}

int zl_cli_snapshot(struct zl_cli *cli, int argc, char **argv)
{
	const char *sub = argc >= 2 ? argv[1] : NULL;

	if (!sub) {
		fputs(cli_snap_usage, stderr);
		zl_cli_err("missing snapshot subcommand (see 'zl snapshot --help')");
		return ZL_CLI_EXIT_USAGE;
	}
	if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
		fputs(cli_snap_usage, stdout);
		return 0;
	}
	argc--;
	argv++;
	if (!strcmp(sub, "create"))
		return cli_snap_create(cli, argc, argv);
	if (!strcmp(sub, "ls") || !strcmp(sub, "list"))
		return cli_snap_ls(cli, argc, argv);
	if (!strcmp(sub, "rm") || !strcmp(sub, "delete"))
		return cli_snap_rm(cli, argc, argv);
	if (!strcmp(sub, "export"))
		return zl_cli_snapshot_export(cli, argc, argv);
	if (!strcmp(sub, "create-group"))
		return cli_snap_create_group(cli, argc, argv);
	if (!strcmp(sub, "rm-group"))
		return cli_snap_rm_group(cli, argc, argv);
	zl_cli_err("unknown snapshot subcommand '%s' (see 'zl snapshot --help')", sub);
	return ZL_CLI_EXIT_USAGE;
}
