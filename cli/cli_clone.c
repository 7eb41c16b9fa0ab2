/* zl volume clone / flatten, and the clone lines of zl volume inspect
 * (docs/SNAPSHOTS.md §4). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/meta/meta.h"

/* How long a clone of a served volume waits for its client's snapshot. */
#define CLI_CLONE_TIMEOUT_S 30u

int zl_cli_volume_clone(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"from-snapshot", required_argument, NULL, 'f'},
	    {"size", required_argument, NULL, 's'},
	    {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct zl_volume_spec spec = {0};
	struct zl_volume vol = {0}, src = {0};
	struct zl_snapshot snap;
	const char *from = NULL, *size_s = NULL, *src_name;
	uint32_t timeout_s = CLI_CLONE_TIMEOUT_S;
	char sz[32], what[300];
	bool created = false;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":f:s:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			from = optarg;
			break;
		case 's':
			size_s = optarg;
			break;
		case 't':
			if (zl_cli_parse_u32(optarg, 1, 3600, &timeout_s)) {
				zl_cli_err("bad --timeout '%s': use 1 to 3600 seconds", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'h':
			printf("usage: zl volume clone SRC NEW [--from-snapshot SNAPSHOT] [--size "
			       "SIZE] [--timeout SEC]\n"
			       "  a new volume NEW reading what it has not written from volume SRC\n"
			       "  (a snapshot taken now, named clone-<NEW's id>, through the client\n"
			       "  serving SRC if one does) or from SRC's snapshot SNAPSHOT; usable at\n"
			       "  once. --size: at least the source's (default: the source's).\n"
			       "  'zl volume flatten NEW' makes it independent of SRC.\n");
			return 0;
		default:
			return zl_cli_opt_error("volume clone", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 2) {
		zl_cli_err("%s (usage: zl volume clone SRC NEW [--from-snapshot SNAPSHOT])",
			   argc - optind < 2 ? "missing source or new volume name"
					     : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	src_name = argv[optind];
	spec.name = argv[optind + 1];
	if (zl_volume_name_check(spec.name)) {
		zl_cli_err("bad volume name '%s': use 1-253 characters of A-Z a-z 0-9 . _ -",
			   spec.name);
		return ZL_CLI_EXIT_USAGE;
	}
	if (size_s && zl_cli_parse_size(size_s, false, &spec.size)) {
		zl_cli_err("bad --size '%s': use a number above 0 with K/M/G/T", size_s);
		return ZL_CLI_EXIT_USAGE;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, src_name, &src);
	if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", src_name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot read the source volume", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (from) {
		rc = zl_meta_snap_lookup(cli->etcd, cli->prefix, from, &snap);
		if (!rc && strcmp(snap.vol, src.id))
			rc = -ZL_ERR_NOT_FOUND;
		if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) {
			zl_cli_err("volume '%s' has no snapshot '%s' (see 'zl snapshot ls %s')",
				   src_name, from, src_name);
			zl_volume_fini(&src);
			return ZL_CLI_EXIT_RUNTIME;
		}
	}
	rc = rc ? rc
		: zl_meta_clone_create(cli->etcd, cli->prefix, &spec, from ? NULL : src.id,
				       from ? snap.id : NULL, timeout_s * 1000u, &vol, &created);
	snprintf(what, sizeof(what), "cannot clone '%s' into '%s'", src_name, spec.name);
	switch (rc) {
	case 0:
		break;
	case -ZL_ERR_EXISTS:
		zl_cli_err("%s: volume '%s' exists and is no clone of that source (see 'zl volume "
			   "inspect %s')",
			   what, spec.name, spec.name);
		break;
	case -ZL_ERR_RANGE:
		zl_cli_err("%s: --size is below the source's %s", what,
			   zl_format_size(from ? snap.size : src.size, sz, sizeof(sz)));
		break;
	case -ZL_ERR_INVAL:
		zl_cli_err("%s: the source's chunk size is above 4M (a clone copies a chunk up in "
			   "one write), or an argument is invalid",
			   what);
		break;
	case -ZL_ERR_BUSY:
		zl_cli_err("%s: the source volume is being deleted", what);
		break;
	case -ZL_ERR_TIMEOUT:
		zl_cli_err("%s: the client serving '%s' did not take its snapshot within %u s; "
			   "check it and run the same command again",
			   what, src_name, timeout_s);
		break;
	case -ZL_ERR_NODES:
		zl_cli_err("%s: not enough live storage nodes for its replicas", what);
		break;
	default:
		zl_cli_etcd_err(cli, what, rc);
		break;
	}
	zl_volume_fini(&src);
	if (rc)
		return ZL_CLI_EXIT_RUNTIME;
	printf("%s volume '%s' %s: %s, a clone of %s at snapshot sequence %u\n",
	       created ? "created" : "already have", vol.name, vol.id,
	       zl_format_size(vol.size, sz, sizeof(sz)), vol.parent_vol, vol.parent_seq);
	zl_volume_fini(&vol);
	return 0;
}

static int cli_flatten_progress(void *arg, uint64_t done, uint64_t total, uint64_t copied)
{
	const char *name = arg;

	printf("flatten %s: %" PRIu64 "/%" PRIu64 " chunks (%" PRIu64 "%%), %" PRIu64
	       " copied from the parent\n",
	       name, done, total, total ? done * 100 / total : 100, copied);
	fflush(stdout);
	return 0;
}

int zl_cli_volume_flatten(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	struct zl_flatten_opts fo = {.progress = cli_flatten_progress};
	struct zl_vol *v = NULL;
	const char *name;
	char parent[24];
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: zl volume flatten NAME\n"
			       "  copies every chunk clone NAME still reads from its parent, then\n"
			       "  drops the parent: the source can be deleted after. Safe while the\n"
			       "  clone is in use; run it again after an interruption. A clone\n"
			       "  attached through CSI refuses its writes (the attach epoch fences\n"
			       "  them): the CSI controller flattens such clones itself.\n");
			return 0;
		}
		return zl_cli_opt_error("volume flatten", c, optopt, argv, optind);
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl volume flatten NAME)",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	rc = zl_cli_vol_open(cli, name, &v);
	if (rc)
		return rc;
	snprintf(parent, sizeof(parent), "%s", zl_vol_meta(v)->parent_vol);
	if (!parent[0]) {
		printf("volume '%s' has no parent: nothing to flatten\n", name);
		zl_vol_close(v);
		return 0;
	}
	fo.arg = (void *)name;
	rc = zl_vol_flatten(v, &fo);
	zl_vol_close(v);
	if (rc) {
		char what[512];

		snprintf(what, sizeof(what), "flatten of '%s' stopped (%s)", name,
			 rc == -ZL_ERR_STALE ? "the clone is attached through CSI, whose attach "
					       "epoch fences this command: the CSI controller "
					       "flattens it (docs/SNAPSHOTS.md §4)"
					     : "run it again");
		zl_cli_etcd_err(cli, what, rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("flattened volume '%s': it no longer reads from %s\n", name, parent);
	return 0;
}

void zl_cli_clone_print_vol(struct zl_cli *cli, const struct zl_volume *v)
{
	struct zl_clone_dep *deps = NULL;
	struct zl_volume p = {0};
	size_t n = 0;

	if (v->parent_vol[0]) {
		bool named = !zl_meta_volume_get(cli->etcd, cli->prefix, v->parent_vol, &p);

		printf("parent      %s (%s) at snapshot sequence %u\n", named ? p.name : "?",
		       v->parent_vol, v->parent_seq);
		zl_volume_fini(&p);
	} else {
		printf("parent      none\n");
	}
	if (zl_meta_clone_dependants(cli->etcd, cli->prefix, v->id, 0, &deps, &n)) {
		printf("dependants  (cannot be listed: %s)\n", zl_etcd_last_error());
		return;
	}
	printf("dependants  %zu\n", n);
	for (size_t i = 0; i < n; i++)
		printf("  %-24s %-22s reads snapshot sequence %u\n", deps[i].name, deps[i].clone,
		       deps[i].seq);
	free(deps);
}
