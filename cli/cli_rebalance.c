/* zl volume rebalance NAME: puts the request rebalance/<vol-id> and follows
 * the manager's moves until every live node holds about as many members of
 * the volume as the others (docs/REPLICATION.md §5). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lib/meta/meta.h"

#define CLI_REBAL_DEFAULT_TIMEOUT 3600

/* What the CLI sees of a volume's balance. */
struct cli_rebal_view {
	uint32_t moving;   /* rows with a member not in sync or on a node that is gone */
	uint32_t min, max; /* members per live node */
	char line[1024];   /* "node-1=48 node-2=48 ..." */
};

static bool cli_rebal_live(const struct zl_node_info *nodes, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(nodes[i].id, id))
			return true;
	}
	return false;
}

static void cli_rebal_view(const struct zl_volume *v, const struct zl_node_info *nodes, size_t n,
			   struct cli_rebal_view *out)
{
	size_t len = 0;

	memset(out, 0, sizeof(*out));
	out->min = UINT32_MAX;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *row = &v->slices[s];
		bool settled = true;

		for (int i = 0; i < row->n; i++)
			settled = settled && zl_slice_member_state(row, i) == ZL_MEMBER_IN_SYNC &&
				  cli_rebal_live(nodes, n, row->nodes[i]);
		out->moving += !settled;
	}
	for (size_t k = 0; k < n; k++) {
		uint32_t c = 0;
		int w;

		for (uint32_t s = 0; s < v->n_slices; s++)
			c += zl_slice_index_of(&v->slices[s], nodes[k].id) >= 0;
		if (c < out->min)
			out->min = c;
		if (c > out->max)
			out->max = c;
		w = snprintf(out->line + len, sizeof(out->line) - len, "%s%s=%u", k ? " " : "",
			     nodes[k].id, c);
		if (w > 0 && (size_t)w < sizeof(out->line) - len)
			len += (size_t)w;
	}
	if (!n)
		out->min = 0;
}

static bool cli_rebal_done(const struct cli_rebal_view *vw)
{
	return !vw->moving && vw->max <= vw->min + 1;
}

static int cli_rebal_put(struct zl_cli *cli, const struct zl_volume *v)
{
	struct zl_rebalance_req req = {0};
	int rc;

	snprintf(req.vol_id, sizeof(req.vol_id), "%s", v->id);
	snprintf(req.by, sizeof(req.by), "zl-cli");
	req.requested = (int64_t)time(NULL);
	rc = zl_meta_rebalance_put(cli->etcd, cli->prefix, &req);
	if (rc)
		zl_cli_etcd_err(cli, "cannot put the rebalance request", rc);
	return rc;
}

/* One look: the volume, the live nodes and whether the request is still
 * there. 0 or an error (printed). */
static int cli_rebal_look(struct zl_cli *cli, const char *name, struct cli_rebal_view *vw,
			  bool *pending, struct zl_volume *v)
{
	struct zl_node_info *nodes = NULL;
	struct zl_rebalance_req req;
	size_t n = 0;
	int rc;

	rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, name, v);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot read the volume record", rc);
		return rc;
	}
	/* The request before the rows: a request the manager deleted as done
	 * is then seen with rows at least as new as that decision. */
	rc = zl_meta_rebalance_get(cli->etcd, cli->prefix, v->id, &req);
	*pending = !rc;
	if (rc == -ZL_ERR_NOT_FOUND)
		rc = 0;
	if (!rc) {
		char id[sizeof(v->id)];

		snprintf(id, sizeof(id), "%s", v->id);
		zl_volume_fini(v);
		memset(v, 0, sizeof(*v));
		rc = zl_meta_volume_get(cli->etcd, cli->prefix, id, v);
		if (rc) {
			zl_cli_etcd_err(cli, "cannot read the volume record", rc);
			return rc;
		}
		rc = zl_meta_node_list(cli->etcd, cli->prefix, &nodes, &n);
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot read the node records or the request", rc);
		zl_volume_fini(v);
	} else {
		cli_rebal_view(v, nodes, n, vw);
	}
	free(nodes);
	return rc;
}

static int cli_rebal_wait(struct zl_cli *cli, const char *name, uint32_t timeout_s)
{
	time_t start = time(NULL);
	char last[1100] = "";

	for (;;) {
		struct cli_rebal_view vw;
		struct zl_volume v = {0};
		char now[1100];
		bool pending = false;

		if (cli_rebal_look(cli, name, &vw, &pending, &v))
			return ZL_CLI_EXIT_RUNTIME;
		snprintf(now, sizeof(now), "moving=%u %s", vw.moving, vw.line);
		if (strcmp(now, last)) {
			printf("rebalance %s: %s\n", name, now);
			fflush(stdout);
			snprintf(last, sizeof(last), "%s", now);
		}
		if (cli_rebal_done(&vw) && !pending) {
			printf("rebalance %s: balanced (%u to %u members per live node)\n", name,
			       vw.min, vw.max);
			zl_volume_fini(&v);
			return 0;
		}
		/* The manager found it balanced, then the nodes changed: ask again. */
		if (!pending && !cli_rebal_done(&vw) && cli_rebal_put(cli, &v)) {
			zl_volume_fini(&v);
			return ZL_CLI_EXIT_RUNTIME;
		}
		zl_volume_fini(&v);
		if (time(NULL) - start >= (time_t)timeout_s) {
			zl_cli_err("rebalance of volume '%s' not done after %u s (%s); is a "
				   "zipline-controller with --manager=on running? The request "
				   "stays: run the command again to keep waiting",
				   name, timeout_s, now);
			return ZL_CLI_EXIT_RUNTIME;
		}
		sleep(1);
	}
}

int zl_cli_volume_rebalance(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"no-wait", no_argument, NULL, 'n'},
	    {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	uint32_t timeout_s = CLI_REBAL_DEFAULT_TIMEOUT;
	struct zl_volume v = {0};
	bool wait = true;
	const char *name;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":nt:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			wait = false;
			break;
		case 't':
			if (zl_cli_parse_u32(optarg, 1, 7 * 86400, &timeout_s)) {
				zl_cli_err("bad --timeout '%s': seconds, 1..604800", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'h':
			printf("usage: zl volume rebalance NAME [--no-wait] [--timeout SEC]\n"
			       "  asks the manager to move members of the volume's slices onto\n"
			       "  the live nodes that hold fewer (e.g. a node that joined), one\n"
			       "  member of a row at a time, and prints progress until every\n"
			       "  live node holds as many as the others, give or take one\n"
			       "  --no-wait      put the request and return\n"
			       "  --timeout SEC  give up waiting after SEC seconds (default %u)\n",
			       CLI_REBAL_DEFAULT_TIMEOUT);
			return 0;
		default:
			return zl_cli_opt_error("volume rebalance", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl volume rebalance NAME [--no-wait] [--timeout SEC])",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
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
	if (v.replicas <= zl_volume_min_size(&v)) {
		zl_cli_err("volume '%s' cannot be rebalanced: it has %u replica%s and min_size %u, "
			   "and a move takes one member out of sync while it is copied",
			   name, v.replicas, v.replicas == 1 ? "" : "s", zl_volume_min_size(&v));
		zl_volume_fini(&v);
		return ZL_CLI_EXIT_RUNTIME;
	}
	rc = cli_rebal_put(cli, &v);
	zl_volume_fini(&v);
	if (rc)
		return ZL_CLI_EXIT_RUNTIME;
	if (!wait) {
		printf("rebalance of volume '%s' requested\n", name);
		return 0;
	}
	return cli_rebal_wait(cli, name, timeout_s);
}
