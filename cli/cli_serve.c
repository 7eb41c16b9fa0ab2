/* zl volume serve NAME --nbd unix:PATH|HOST:PORT: the volume as an NBD
 * export (lib/nbd) on the client's loop, until SIGINT/SIGTERM. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "lib/client/client.h"
#include "lib/nbd/nbd.h"

#define SERVE_DRAIN_MS 30000

struct cli_serve {
	struct zl_loop *loop;
	struct zl_loop_handle sig_h;
	int sfd;
	int signo;
};

static void cli_serve_signal(void *arg, uint32_t events)
{
	struct cli_serve *s = arg;
	struct signalfd_siginfo si;

	(void)events;
	if (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		s->signo = (int)si.ssi_signo;
	zl_loop_stop(s->loop);
}

int zl_cli_volume_serve(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"nbd", required_argument, NULL, 'n'},
	    {"export-name", required_argument, NULL, 'e'},
	    {"max-inflight", required_argument, NULL, 'q'},
	    {"max-conns", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct zl_nbd_server_opts no = {0};
	struct zl_nbd_backend be;
	struct zl_nbd_server *srv = NULL;
	struct zl_vol *v = NULL;
	struct cli_serve s = {.sfd = -1};
	sigset_t mask, old;
	const char *name;
	char sz[32];
	uint64_t t;
	int c, rc, exit_code = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:e:q:c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			no.listen = optarg;
			break;
		case 'e':
			no.export_name = optarg;
			break;
		case 'q':
			if (zl_cli_parse_u32(optarg, 1, 1024, &no.max_inflight)) {
				zl_cli_err("bad --max-inflight '%s': use 1 to 1024", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'c':
			if (zl_cli_parse_u32(optarg, 1, 4096, &no.max_conns)) {
				zl_cli_err("bad --max-conns '%s': use 1 to 4096", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'h':
			printf("usage: zl volume serve NAME --nbd unix:PATH|HOST:PORT "
			       "[--export-name N] [--max-inflight 32] [--max-conns 64]\n"
			       "  (clients choose their number of connections; the export allows "
			       "multi-conn)\n");
			return 0;
		default:
			return zl_cli_opt_error("volume serve", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl volume serve NAME --nbd unix:PATH|HOST:PORT)",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	if (!no.listen) {
		zl_cli_err("missing --nbd unix:PATH|HOST:PORT for 'volume serve'");
		return ZL_CLI_EXIT_USAGE;
	}
	if (zl_cli_nbd_spec_check(no.listen)) {
		zl_cli_err("bad --nbd '%s': use unix:PATH or HOST:PORT (e.g. 127.0.0.1:10809)",
			   no.listen);
		return ZL_CLI_EXIT_USAGE;
	}
	/* Signals arrive through the loop, so shutdown runs on the loop's thread. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	s.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s.sfd < 0) {
		zl_cli_err("cannot create a signalfd: %s", strerror(errno));
		exit_code = ZL_CLI_EXIT_RUNTIME;
		goto out_mask;
	}
	rc = zl_cli_vol_open(cli, name, &v);
	if (rc) {
		exit_code = rc;
		goto out_sfd;
	}
	/* This process acknowledges the volume's writes: its snapshots are
	 * taken here (docs/SNAPSHOTS.md §3). */
	rc = zl_vol_snap_serve(v);
	if (rc) {
		zl_cli_err("cannot take the snapshots of volume '%s' (%s): not serving it, as a "
			   "snapshot taken without this process would not be crash-consistent; "
			   "check etcd and retry",
			   name, zl_strerror(rc));
		exit_code = ZL_CLI_EXIT_RUNTIME;
		goto out_vol;
	}
	s.loop = cli->loop;
	rc = zl_loop_add(s.loop, &s.sig_h, s.sfd, EPOLLIN, cli_serve_signal, &s);
	if (rc) {
		zl_cli_err("cannot watch signals: %s", zl_strerror(rc));
		exit_code = ZL_CLI_EXIT_RUNTIME;
		goto out_vol;
	}
	zl_nbd_backend_vol(v, &be);
	rc = zl_nbd_server_create(s.loop, &be, &no, &srv);
	if (rc) {
		if (rc == -EADDRINUSE)
			zl_cli_err("cannot listen on --nbd %s: address in use (another server runs "
				   "there; pick another socket or port)",
				   no.listen);
		else if (rc == -EEXIST)
			zl_cli_err("cannot listen on --nbd %s: the path exists and is not a socket "
				   "(remove it or pick another path)",
				   no.listen);
		else if (rc == -ZL_ERR_INVAL)
			zl_cli_err("bad --nbd '%s': use unix:PATH or HOST:PORT", no.listen);
		else
			zl_cli_err("cannot listen on --nbd %s: %s", no.listen, zl_strerror(rc));
		exit_code = ZL_CLI_EXIT_RUNTIME;
		goto out_sig;
	}
	fprintf(stderr, "zl: serving volume '%s' (%s) over NBD at %s; stop with Ctrl-C\n", name,
		zl_format_size(zl_vol_size(v), sz, sizeof(sz)), zl_nbd_server_address(srv));
	if (strncmp(no.listen, "unix:", 5) == 0)
		fprintf(stderr, "zl: try: nbdinfo 'nbd+unix:///?socket=%s'\n", no.listen + 5);
	else
		fprintf(stderr, "zl: try: nbdinfo 'nbd://%s'\n", zl_nbd_server_address(srv));
	rc = zl_loop_run(s.loop);
	if (rc) {
		zl_cli_err("event loop failed: %s", zl_strerror(rc));
		exit_code = ZL_CLI_EXIT_RUNTIME;
	}
	fprintf(stderr, "zl: %s: closing connections\n", s.signo ? strsignal(s.signo) : "stopping");
	/* Let in-flight I/O finish (bounded) so no completion outlives the server. */
	zl_nbd_server_shutdown(srv);
	t = zl_now_ms();
	while (!zl_nbd_server_idle(srv) && zl_now_ms() - t < SERVE_DRAIN_MS)
		zl_loop_run_once(s.loop, 100);
	if (!zl_nbd_server_idle(srv)) {
		/* Completions would land in freed slots whichever is torn down
		 * first: leave everything to the process exit. */
		zl_cli_err("I/O still in flight after %d s; exiting without waiting (check 'zl "
			   "status')",
			   SERVE_DRAIN_MS / 1000);
		fflush(NULL);
		_exit(ZL_CLI_EXIT_RUNTIME);
	}
	zl_nbd_server_destroy(srv);
out_sig:
	zl_loop_del(s.loop, &s.sig_h);
out_vol:
	zl_vol_close(v);
out_sfd:
	close(s.sfd);
out_mask:
	sigprocmask(SIG_SETMASK, &old, NULL);
	return exit_code;
}
