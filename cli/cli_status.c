/* zl status (opening with the health line, cli_health.c), zl node ls. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_health.h"
#include "lib/client/client.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"

/* Parses a command without flags of its own (just --help). 0, -1 (help
 * printed) or an exit code. */
static int cli_no_flags(const char *cmd, const char *usage, int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: %s\n", usage);
			return -1;
		}
		return zl_cli_opt_error(cmd, c, optopt, argv, optind);
	}
	if (optind < argc) {
		zl_cli_err("unexpected argument '%s' for '%s' (usage: %s)", argv[optind], cmd,
			   usage);
		return ZL_CLI_EXIT_USAGE;
	}
	return 0;
}

/* SNAPSHOTS: what the node's clone chunk files allocate (its status
 * record; "-" without one). Its FREE already excludes it. */
static void cli_node_row(const struct zl_node_info *n, const struct zl_node_status *ns,
			 const char *ping, const char *via)
{
	char cap[32], fr[32], up[32], addr[96], sn[32] = "-";

	zl_format_size(n->capacity, cap, sizeof(cap));
	zl_format_size(n->free, fr, sizeof(fr));
	if (ns)
		zl_format_size(ns->snap_bytes, sn, sizeof(sn));
	zl_cli_fmt_duration(n->start_time ? zl_wall_sec() - n->start_time : -1, up, sizeof(up));
	snprintf(addr, sizeof(addr), "%s:%u", n->addr, n->port);
	printf("  %-16s %-22s %-10s %12s %12s %12s %9s %10s %s\n", n->id, addr, n->transports, cap,
	       fr, sn, up, ping, via);
}

/* One line per storage daemon on the journal write path: its use and how
 * many chunks the next checkpoint syncs, from the status records. */
static void cli_journal_print(const struct zl_node_status *st, size_t n)
{
	bool head = false;

	for (size_t i = 0; i < n; i++) {
		char sz[32], used[32];

		if (!st[i].journal_size)
			continue;
		if (!head)
			printf("journals  (write path journal)\n  %-16s %12s %12s %8s %12s %8s "
			       "%s\n",
			       "NODE", "SIZE", "USED", "DIRTY", "CHECKPOINTS", "WAITS",
			       "DURABLE I/O PER WRITE");
		head = true;
		zl_format_size(st[i].journal_size, sz, sizeof(sz));
		zl_format_size(st[i].journal_used, used, sizeof(used));
		printf("  %-16s %12s %12s %8u %12llu %8llu %.2f\n", st[i].node, sz, used,
		       st[i].journal_dirty_chunks, (unsigned long long)st[i].journal_checkpoints,
		       (unsigned long long)st[i].journal_waits,
		       st[i].chunk_writes ? (double)st[i].durable_ios / (double)st[i].chunk_writes
					  : 0.0);
	}
}

/* One line per storage daemon whose disk failed (its status record's
 * disk_error, storage/storage_ddir.c): it acknowledges no write; one per
 * daemon whose data dir is full (disk_full, storage_chunk.c op_room), or
 * near full (disk_near_full, docs/REPLICATION.md §9). */
static void cli_disk_print(const struct zl_node_status *st, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (st[i].disk_error[0])
			printf("disk failed  node=%s: %s (acknowledging no writes; restart it with a "
			       "data directory)\n",
			       st[i].node, st[i].disk_error);
		else if (st[i].disk_full)
			printf("disk full    node=%s: writes that need new space fail NOSPC and "
			       "recovery to it waits for room (free space in its data dir or add "
			       "capacity)\n",
			       st[i].node);
		else if (st[i].disk_near_full)
			printf("disk near full node=%s: slices with too few members with room "
			       "refuse writes that need new space (NOSPC) (free space in its data "
			       "dir or add capacity)\n",
			       st[i].node);
	}
}

/* The health line (cli_health.h) of nodes and vols, plus the recovery
 * progress and slices peering the daemons publish in st (none readable: no
 * rate shown, no slice peering). */
static void cli_health_print(const struct zl_node_info *nodes, size_t n_nodes,
			     const struct zl_volume *vols, size_t n_vols,
			     const struct zl_node_status *st, size_t n_st)
{
	struct zl_cli_health h = {0};
	char line[512];

	for (size_t i = 0; i < n_vols; i++)
		zl_cli_health_add_volume(&h, &vols[i], nodes, n_nodes, st, n_st);
	zl_cli_health_add_status(&h, st, n_st, nodes, n_nodes);
	zl_cli_health_line(&h, line, sizeof(line));
	printf("%s\n", line);
	cli_disk_print(st, n_st);
	cli_journal_print(st, n_st);
}

int zl_cli_status(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_node_info *nodes = NULL;
	struct zl_volume *vols = NULL;
	struct zl_node_status *st = NULL;
	size_t n_nodes = 0, n_vols = 0, n_st = 0, i;
	uint64_t t0, t1, total = 0, snap_total = 0;
	char sz[32], ping[32];
	int rc, vrc, exit_code = 0, down = 0;
	bool have_client;

	rc = cli_no_flags("status", "zl status", argc, argv);
	if (rc)
		return rc < 0 ? 0 : rc;
	t0 = zl_now_ns();
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	t1 = zl_now_ns();
	rc = zl_meta_node_list(cli->etcd, cli->prefix, &nodes, &n_nodes);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot list storage nodes", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	vrc = zl_meta_volume_list(cli->etcd, cli->prefix, &vols, &n_vols);
	if (zl_meta_status_list(cli->etcd, cli->prefix, &st, &n_st)) {
		st = NULL;
		n_st = 0;
	}
	if (!vrc)
		cli_health_print(nodes, n_nodes, vols, n_vols, st, n_st);
	else
		printf("HEALTH_ERR cannot read the volume records\n");
	printf("etcd      %s  OK (%.1f ms)\n", zl_etcd_endpoint(cli->etcd),
	       (double)(t1 - t0) / 1e6);
	/* Pings go through the volume client (the data path's transport). */
	have_client = zl_cli_client(cli) == 0;
	printf("nodes     %zu registered\n", n_nodes);
	if (n_nodes)
		printf("  %-16s %-22s %-10s %12s %12s %12s %9s %10s %s\n", "ID", "ADDRESS",
		       "TRANSPORTS", "CAPACITY", "FREE", "SNAPSHOTS", "UPTIME", "PING", "VIA");
	for (i = 0; i < n_nodes; i++) {
		enum zl_xport_kind via = 0;
		uint64_t rtt = 0;

		if (!have_client) {
			snprintf(ping, sizeof(ping), "-");
		} else if ((rc = zl_client_ping_node_kind(cli->client, &nodes[i], &rtt, &via)) ==
			   0) {
			snprintf(ping, sizeof(ping), "%llu us", (unsigned long long)rtt);
		} else {
			snprintf(ping, sizeof(ping), "FAIL");
			down++;
			zl_cli_err("storage node '%s' at %s:%u does not answer: %s (check that its "
				   "zipline-storage runs and the port is reachable)",
				   nodes[i].id, nodes[i].addr, nodes[i].port, zl_strerror(rc));
		}
		cli_node_row(&nodes[i], zl_meta_status_find(st, n_st, nodes[i].id), ping,
			     via ? zl_xport_kind_name(via) : "-");
	}
	if (vrc) {
		zl_cli_etcd_err(cli, "cannot list volumes", vrc);
		exit_code = ZL_CLI_EXIT_RUNTIME;
	} else {
		for (i = 0; i < n_vols; i++)
			total += vols[i].size;
		printf("volumes   %zu, %s provisioned\n", n_vols,
		       zl_format_size(total, sz, sizeof(sz)));
		zl_meta_volume_list_free(vols, n_vols);
	}
	/* Clone chunk files of snapshots on every node (every replica), part
	 * of what each node's FREE no longer has (docs/SNAPSHOTS.md §6). */
	for (i = 0; i < n_st; i++)
		snap_total += st[i].snap_bytes;
	printf("snapshots %s on disk, all nodes (status records of %zu)\n",
	       zl_format_size(snap_total, sz, sizeof(sz)), n_st);
	free(st);
	free(nodes);
	if (down)
		exit_code = ZL_CLI_EXIT_RUNTIME;
	return exit_code;
}

int zl_cli_node(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_node_info *nodes = NULL;
	size_t n = 0, i;
	int rc;

	if (argc < 2 || (strcmp(argv[1], "ls") && strcmp(argv[1], "list"))) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			printf("usage: zl node ls\n");
			return 0;
		}
		zl_cli_err("%s (usage: zl node ls)",
			   argc < 2 ? "missing node subcommand" : "unknown node subcommand");
		return ZL_CLI_EXIT_USAGE;
	}
	rc = cli_no_flags("node ls", "zl node ls", argc - 1, argv + 1);
	if (rc)
		return rc < 0 ? 0 : rc;
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_node_list(cli->etcd, cli->prefix, &nodes, &n);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot list storage nodes", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	printf("%-16s %-22s %-10s %-20s %12s %12s %9s %s\n", "ID", "ADDRESS", "TRANSPORTS",
	       "DOMAIN", "CAPACITY", "FREE", "UPTIME", "VERSION");
	for (i = 0; i < n; i++) {
		char cap[32], fr[32], up[32], addr[96];
		const struct zl_node_info *ni = &nodes[i];

		zl_format_size(ni->capacity, cap, sizeof(cap));
		zl_format_size(ni->free, fr, sizeof(fr));
		zl_cli_fmt_duration(ni->start_time ? zl_wall_sec() - ni->start_time : -1, up,
				    sizeof(up));
		snprintf(addr, sizeof(addr), "%s:%u", ni->addr, ni->port);
		printf("%-16s %-22s %-10s %-20s %12s %12s %9s %s\n", ni->id, addr, ni->transports,
		       ni->domain[0] ? ni->domain : "-", cap, fr, up, ni->version);
	}
	if (!n)
		fprintf(stderr,
			"zl: no storage nodes registered under %s (start zipline-storage "
			"daemons, or 'make run' for a local cluster)\n",
			cli->prefix);
	free(nodes);
	return 0;
}
