/* zl: the Zipline admin CLI. Flags, dispatch; one file per topic. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lib/meta/meta.h"
#include "lib/transport/transport.h"

static const char cli_usage[] =
    "usage: zl [global flags] COMMAND [args]\n"
    "\n"
    "commands:\n"
    "  status                          etcd, storage nodes (with ping), volume totals\n"
    "  node ls                         registered storage nodes\n"
    "  volume create NAME --size SIZE [--replicas N] [--chunk-size SIZE] [--min-size N]\n"
    "  volume set NAME --min-size N    in-sync copies a write needs (applied at once)\n"
    "  volume set NAME --iops N --bps B  client I/O limits (--read-iops, --write-bps,\n"
    "                                  --burst-..., --io-timeout; applied at once)\n"
    "  volume resize NAME SIZE         grow the volume (never shrinks; an attached\n"
    "                                  device grows with NodeExpandVolume)\n"
    "  volume ls                       all volumes\n"
    "  volume inspect NAME             record and placement table\n"
    "  volume rm NAME [--force]        delete the volume and its data (daemons that are\n"
    "                                  down remove theirs when they return); an attached\n"
    "                                  volume is refused unless --force\n"
    "  volume import NAME FILE         copy FILE into the volume\n"
    "  volume export NAME FILE [--snapshot SNAP]  copy the volume (or its snapshot\n"
    "                                  SNAP) into FILE\n"
    "  volume serve NAME --nbd unix:PATH|HOST:PORT   serve over NBD until SIGINT/SIGTERM\n"
    "  volume scrub NAME [--json]      verify every copy of every chunk on the slices'\n"
    "                                  primaries and repair bad or missing ones\n"
    "  volume verify NAME [--json] [--snapshot SNAP]   read every chunk, live and of\n"
    "                                  every snapshot (or only SNAP), from every in-sync\n"
    "                                  member and print any difference (exit 1 when\n"
    "                                  there is one)\n"
    "  volume rebalance NAME [--no-wait] [--timeout SEC]   move members onto less\n"
    "                                  loaded nodes (a new one) until balanced\n"
    "  snapshot create VOLUME NAME     crash-consistent snapshot (through the client\n"
    "                                  serving the volume when one does)\n"
    "  snapshot ls [VOLUME]            snapshots: name, id, volume, sequence, state, group\n"
    "  snapshot rm NAME                delete a snapshot\n"
    "  snapshot export NAME FILE       copy the snapshot into FILE\n"
    "  snapshot create-group GROUP VOLUME VOLUME...  one crash-consistent point across\n"
    "                                  the volumes (snapshots GROUP.VOLUME, all or none)\n"
    "  snapshot rm-group GROUP         delete every snapshot of the group\n"
    "  bench NAME [--rw randread|randwrite|read|write] [--bs 4k] [--qd 32]\n"
    "             [--seconds 10] [--count N] [--size SIZE] [--json] [--progress]\n"
    "  top [--interval 2] [--count N] [--volumes 20]   live IOPS, MiB/s and latency\n"
    "                                  per node and per volume (the nodes' /metrics)\n"
    "\n"
    "global flags:\n"
    "  --etcd URLS         etcd endpoints (else $ZIPLINE_ETCD, else the local cluster's\n"
    "                      $ZIPLINE_LOCAL_DIR/etcd.endpoints (default dir\n"
    "                      /var/lib/zipline-local; used only when root or you own it and\n"
    "                      nobody else can write it), else http://127.0.0.1:2379)\n"
    "  --etcd-prefix P     key prefix (default /zipline/)\n"
    "  --transport T       auto|tcp|rdma (else $ZIPLINE_TRANSPORT, else auto); for\n"
    "                      volume create: the volume's transport parameter\n"
    "  --log-level L       err|warn|info|debug (default: quiet; warn for volume serve)\n"
    "  --io-timeout SEC    how long volume I/O waits for an in-sync primary while the\n"
    "                      cluster heals before it fails (default 600)\n"
    "  --tls-ca FILE       the cluster's CA (PEM), else $ZIPLINE_TLS_CA: needed to reach\n"
    "                      storage nodes that serve TLS (docs/SECURITY.md)\n"
    "  --tls-server-name N name their certificates carry, else\n"
    "                      $ZIPLINE_TLS_SERVER_NAME, else their address\n"
    "  --busy-poll US      the volume client polls for US microseconds after work\n"
    "                      instead of sleeping (lower latency where it has a core of\n"
    "                      its own; an idle client still sleeps; default 0, off)\n"
    "  --legacy-drop       0.1 client for clusters without a manager: promote the\n"
    "                      next replica itself, read from backups, give up after 30 s\n"
    "  --help, --version\n"
    "\n"
    "sizes take K/M/G/T suffixes (powers of 1024).\n";

int main(int argc, char **argv)
{
	struct zl_cli cli = {0};
	char err[256];
	const char *cmd;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	zl_log_set_level("warn");
	zl_log_init("zl");
	if (zl_cli_globals_parse(&argc, argv, &cli.g, err, sizeof(err))) {
		zl_cli_err("%s (see 'zl --help')", err);
		return ZL_CLI_EXIT_USAGE;
	}
	if (cli.g.version) {
		printf("zl %s\n", ZL_VERSION_STRING);
		return 0;
	}
	if (cli.g.help) {
		fputs(cli_usage, stdout);
		return 0;
	}
	if (cli.g.log_level && zl_log_set_level(cli.g.log_level)) {
		zl_cli_err("bad --log-level '%s': use err, warn, info or debug", cli.g.log_level);
		return ZL_CLI_EXIT_USAGE;
	}
	if (cli.g.transport && strcmp(cli.g.transport, "auto") && strcmp(cli.g.transport, "tcp") &&
	    strcmp(cli.g.transport, "rdma")) {
		zl_cli_err("bad --transport '%s': use auto, tcp or rdma", cli.g.transport);
		return ZL_CLI_EXIT_USAGE;
	}
	/* Library logs would repeat what the one-line error says; a server
	 * (volume serve) keeps warnings. ZL_LOG_LEVEL or --log-level override. */
	if (!cli.g.log_level && !getenv("ZL_LOG_LEVEL") &&
	    !(argc >= 3 && !strcmp(argv[1], "volume") && !strcmp(argv[2], "serve")))
		zl_log_level = ZL_LOG_LVL_ERR - 1;
	cli.prefix = cli.g.prefix && *cli.g.prefix ? cli.g.prefix : ZL_META_DEFAULT_PREFIX;
	if (argc < 2) {
		fputs(cli_usage, stderr);
		zl_cli_err("missing command (see 'zl --help')");
		return ZL_CLI_EXIT_USAGE;
	}
	cmd = argv[1];
	if (strcmp(cmd, "status") == 0)
		rc = zl_cli_status(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "node") == 0 || strcmp(cmd, "nodes") == 0)
		rc = zl_cli_node(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "volume") == 0 || strcmp(cmd, "vol") == 0)
		rc = zl_cli_volume(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "snapshot") == 0 || strcmp(cmd, "snap") == 0)
		rc = zl_cli_snapshot(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "bench") == 0)
		rc = zl_cli_bench(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "top") == 0)
		rc = zl_cli_top(&cli, argc - 1, argv + 1);
	else if (strcmp(cmd, "help") == 0) {
		fputs(cli_usage, stdout);
		rc = 0;
	} else {
		zl_cli_err("unknown command '%s' (see 'zl --help')", cmd);
		rc = ZL_CLI_EXIT_USAGE;
	}
	/* The one-line error cannot name the node or the certificate problem;
	 * the transport kept the TLS failure that explains it. */
	if (rc && *zl_xport_tls_last_error() && zl_log_level < ZL_LOG_LVL_ERR)
		zl_cli_err("%s", zl_xport_tls_last_error());
	zl_cli_fini(&cli);
	return rc;
}
