/* zl volume import / export: a file streamed to or from a volume with
 * several asynchronous I/Os in flight, in pieces of 1 MiB by default.
 * Export also reads a snapshot (zl volume export --snapshot, zl snapshot
 * export): the volume's chunks as the snapshot's sequence holds them. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lib/client/client.h"
#include "lib/meta/meta.h"

#define XFER_MAX_DEPTH 32

struct cli_xfer;

struct cli_xfer_slot {
	struct cli_xfer *x;
	void *buf;
	uint64_t off;
	uint32_t len;
	bool busy;
};

struct cli_xfer {
	struct zl_vol *v;
	int fd;
	bool import;
	uint32_t snap_seq; /* export of a snapshot: its sequence, else 0 */
	const char *file, *name;
	uint64_t total, next_off, done;
	uint32_t piece, depth;
	int inflight;
	int err; /* first error (negative) */
	uint64_t err_off;
	bool err_local; /* the error is on the file, not the volume */
	struct cli_xfer_slot slots[XFER_MAX_DEPTH];
};

static volatile sig_atomic_t cli_xfer_interrupted;

static void cli_xfer_sig(int sig)
{
	(void)sig;
	cli_xfer_interrupted = 1;
}

static int cli_full_pread(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA; /* the file shrank under us */
		got += (size_t)n;
	}
	return 0;
}

static int cli_full_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = pwrite(fd, (const char *)buf + put, len - put, (off_t)(off + put));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		put += (size_t)n;
	}
	return 0;
}

static void cli_xfer_fail(struct cli_xfer *x, int err, uint64_t off, bool local)
{
	if (x->err)
		return;
	x->err = err;
	x->err_off = off;
	x->err_local = local;
}

static void cli_xfer_pump(struct cli_xfer *x);

static void cli_xfer_done(void *arg, int status)
{
	struct cli_xfer_slot *s = arg;
	struct cli_xfer *x = s->x;
	int rc;

	x->inflight--;
	s->busy = false;
	if (status) {
		cli_xfer_fail(x, status, s->off, false);
	} else if (!x->import) {
		rc = cli_full_pwrite(x->fd, s->buf, s->len, s->off);
		if (rc)
			cli_xfer_fail(x, rc, s->off, true);
	}
	if (!status)
		x->done += s->len;
	cli_xfer_pump(x);
}

/* Keeps every idle slot busy with the next piece. */
static void cli_xfer_pump(struct cli_xfer *x)
{
	for (uint32_t i = 0; i < x->depth; i++) {
		struct cli_xfer_slot *s = &x->slots[i];
		int rc;

		if (s->busy || x->err || cli_xfer_interrupted || x->next_off >= x->total)
			continue;
		s->off = x->next_off;
		s->len = (uint32_t)ZL_MIN((uint64_t)x->piece, x->total - s->off);
		if (x->import) {
			rc = cli_full_pread(x->fd, s->buf, s->len, s->off);
			if (rc) {
				cli_xfer_fail(x, rc, s->off, true);
				return;
			}
			rc = zl_vol_aio_write(x->v, s->buf, s->off, s->len, 0, cli_xfer_done, s);
		} else if (x->snap_seq) {
			rc = zl_vol_aio_read_snap(x->v, x->snap_seq, s->buf, s->off, s->len,
						  cli_xfer_done, s);
		} else {
			rc = zl_vol_aio_read(x->v, s->buf, s->off, s->len, cli_xfer_done, s);
		}
		if (rc == -ZL_ERR_BUSY)
			return; /* retried after the next completion */
		if (rc) {
			cli_xfer_fail(x, rc, s->off, false);
			return;
		}
		s->busy = true;
		x->inflight++;
		x->next_off += s->len;
	}
}

static void cli_xfer_progress(const struct cli_xfer *x, uint64_t t0, bool final)
{
	double sec = (double)(zl_now_ns() - t0) / 1e9;
	char a[32], b[32];

	fprintf(stderr, "\r%s %s / %s  %.1f MiB/s   %s", x->import ? "import" : "export",
		zl_format_size(x->done, a, sizeof(a)), zl_format_size(x->total, b, sizeof(b)),
		sec > 0 ? (double)x->done / (1 << 20) / sec : 0.0, final ? "\n" : "");
}

/* Finds snapshot snap_name for an export; vol_name (optional) must be its
 * volume. 0 (*out filled) or an exit code after printing. */
static int cli_xfer_snap(struct zl_cli *cli, const char *snap_name, const char *vol_name,
			 struct zl_snapshot *out)
{
	struct zl_volume v = {0};
	int rc;

	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_meta_snap_lookup(cli->etcd, cli->prefix, snap_name, out);
	if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL) {
		zl_cli_err("snapshot '%s' not found (see 'zl snapshot ls')", snap_name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(cli, "cannot read the snapshot record", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (strcmp(out->state, ZL_SNAP_STATE_READY)) {
		zl_cli_err("snapshot '%s' is %s, not ready: nothing to export", snap_name,
			   out->state);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (!vol_name)
		return 0;
	rc = zl_meta_volume_lookup(cli->etcd, cli->prefix, vol_name, &v);
	if (rc == 0 && strcmp(v.id, out->vol))
		rc = -ZL_ERR_NOT_FOUND;
	zl_volume_fini(&v);
	if (rc) {
		zl_cli_err("snapshot '%s' is not a snapshot of volume '%s' (it is of %s; see 'zl "
			   "snapshot ls')",
			   snap_name, vol_name, out->vol);
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}

/* snap: import/export of snapshot `snap` (by name or id); snap_cmd: zl
 * snapshot export SNAP FILE (the volume is the snapshot's). */
static int cli_xfer(struct zl_cli *cli, int argc, char **argv, bool import, bool snap_cmd)
{
	static const struct option opts[] = {
	    {"snapshot", required_argument, NULL, 's'},
	    {"piece", required_argument, NULL, 'p'},
	    {"depth", required_argument, NULL, 'd'},
	    {"progress", no_argument, NULL, 'P'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	const char *cmd = import ? "volume import" : snap_cmd ? "snapshot export" : "volume export";
	const char *snap = NULL;
	struct zl_snapshot sn = {0};
	struct cli_xfer *x;
	struct sigaction sa = {.sa_handler = cli_xfer_sig};
	struct stat st;
	uint64_t piece = 1u << 20, t0, last = 0;
	uint32_t depth = 8, i;
	bool progress = isatty(STDERR_FILENO);
	char a[32], b[32];
	int c, rc, exit_code = 0;
	off_t end;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:p:d:Ph", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (import || snap_cmd) {
				zl_cli_err("--snapshot is a flag of 'zl volume export' only");
				return ZL_CLI_EXIT_USAGE;
			}
			snap = optarg;
			break;
		case 'p':
			if (zl_cli_parse_size(optarg, false, &piece) || piece < 4096 ||
			    piece > (4u << 20)) {
				zl_cli_err("bad --piece '%s': use a size from 4K to 4M", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'd':
			if (zl_cli_parse_u32(optarg, 1, XFER_MAX_DEPTH, &depth)) {
				zl_cli_err("bad --depth '%s': use 1 to %d", optarg, XFER_MAX_DEPTH);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'P':
			progress = true;
			break;
		case 'h':
			printf("usage: zl %s %s FILE%s [--piece 1M] [--depth 8] [--progress]\n", cmd,
			       snap_cmd ? "SNAPSHOT" : "NAME",
			       import || snap_cmd ? "" : " [--snapshot SNAPSHOT]");
			return 0;
		default:
			return zl_cli_opt_error(cmd, c, optopt, argv, optind);
		}
	}
	if (argc - optind != 2) {
		zl_cli_err("%s (usage: zl %s %s FILE)",
			   argc - optind < 2 ? (snap_cmd ? "missing snapshot name or file"
						     : "missing volume name or file")
					     : "too many arguments",
			   cmd, snap_cmd ? "SNAPSHOT" : "NAME");
		return ZL_CLI_EXIT_USAGE;
	}
	if (snap_cmd)
		snap = argv[optind];
	if (snap) {
		rc = cli_xfer_snap(cli, snap, snap_cmd ? NULL : argv[optind], &sn);
		if (rc)
			return rc;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		zl_cli_err("out of memory");
		return ZL_CLI_EXIT_RUNTIME;
	}
	x->name = argv[optind];
	x->file = argv[optind + 1];
	x->import = import;
	x->piece = (uint32_t)piece;
	x->depth = depth;
	x->fd = -1;
	if (import) {
		/* Check the file first: a missing file needs no cluster. */
		x->fd = open(x->file, O_RDONLY | O_CLOEXEC);
		if (x->fd < 0) {
			zl_cli_err("cannot open '%s': %s", x->file, strerror(errno));
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_free;
		}
	}
	if (snap) {
		x->snap_seq = sn.seq;
		x->name = snap;
	}
	rc = zl_cli_vol_open(cli, snap ? sn.vol : x->name, &x->v);
	if (rc) {
		exit_code = rc;
		goto out_close;
	}
	if (import) {
		end = fstat(x->fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size
								    : lseek(x->fd, 0, SEEK_END);
		if (end < 0) {
			zl_cli_err("cannot size '%s': %s", x->file, strerror(errno));
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_vol;
		}
		x->total = (uint64_t)end;
		if (x->total > zl_vol_size(x->v)) {
			zl_cli_err("'%s' (%s) is larger than volume '%s' (%s): nothing written "
				   "(create a bigger volume)",
				   x->file, zl_format_size(x->total, a, sizeof(a)), x->name,
				   zl_format_size(zl_vol_size(x->v), b, sizeof(b)));
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_vol;
		}
	} else {
		x->total = snap ? sn.size : zl_vol_size(x->v);
		x->fd = open(x->file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (x->fd < 0) {
			zl_cli_err("cannot open '%s' for writing: %s", x->file, strerror(errno));
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_vol;
		}
		if (fstat(x->fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    ftruncate(x->fd, (off_t)x->total)) {
			zl_cli_err("cannot size '%s' to %llu bytes: %s", x->file,
				   (unsigned long long)x->total, strerror(errno));
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_vol;
		}
	}
	for (i = 0; i < depth; i++) {
		x->slots[i].x = x;
		x->slots[i].buf = zl_vol_buf_alloc(x->v, x->piece);
		if (!x->slots[i].buf) {
			zl_cli_err("cannot allocate %u I/O buffers of %u bytes", depth, x->piece);
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_bufs;
		}
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	t0 = zl_now_ns();
	cli_xfer_pump(x);
	while (x->inflight > 0 || (!x->err && !cli_xfer_interrupted && x->next_off < x->total)) {
		zl_loop_run_once(cli->loop, 100);
		cli_xfer_pump(x);
		if (progress && zl_now_ns() - last > 1000000000ull) {
			last = zl_now_ns();
			cli_xfer_progress(x, t0, false);
		}
	}
	if (!x->err && !cli_xfer_interrupted && import) {
		rc = zl_vol_flush(x->v);
		if (rc)
			cli_xfer_fail(x, rc, 0, false);
	}
	if (progress)
		cli_xfer_progress(x, t0, true);
	if (cli_xfer_interrupted) {
		zl_cli_err("%s of '%s' interrupted after %llu of %llu bytes", cmd, x->name,
			   (unsigned long long)x->done, (unsigned long long)x->total);
		exit_code = ZL_CLI_EXIT_RUNTIME;
	} else if (x->err && x->err_local) {
		zl_cli_err("%s '%s' at offset %llu: %s", import ? "cannot read" : "cannot write",
			   x->file, (unsigned long long)x->err_off,
			   x->err == -ENODATA ? "file shrank while reading" : strerror(-x->err));
		exit_code = ZL_CLI_EXIT_RUNTIME;
	} else if (x->err) {
		zl_cli_err("%s of %s '%s' failed at offset %llu: %s (check 'zl status'%s)",
			   import ? "write" : "read", snap ? "snapshot" : "volume", x->name,
			   (unsigned long long)x->err_off, zl_strerror(x->err),
			   x->err == -ZL_ERR_VERSION ? "; the storage daemons must be upgraded "
						       "to serve snapshots"
						     : "");
		exit_code = ZL_CLI_EXIT_RUNTIME;
	} else {
		double sec = (double)(zl_now_ns() - t0) / 1e9;

		printf("%s %s %s %s'%s' in %.2f s (%.1f MiB/s)\n",
		       import ? "imported" : "exported", zl_format_size(x->total, a, sizeof(a)),
		       import ? "into" : "from", snap ? "snapshot " : "", x->name,
		       sec, sec > 0 ? (double)x->total / (1 << 20) / sec : 0.0);
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
out_bufs:
	for (i = 0; i < depth; i++)
		if (x->slots[i].buf)
			zl_vol_buf_free(x->v, x->slots[i].buf);
out_vol:
	zl_vol_close(x->v);
out_close:
	if (x->fd >= 0 && close(x->fd) && !exit_code) {
		zl_cli_err("cannot close '%s': %s", x->file, strerror(errno));
		exit_code = ZL_CLI_EXIT_RUNTIME;
	}
out_free:
	free(x);
	return exit_code;
}

int zl_cli_volume_import(struct zl_cli *cli, int argc, char **argv)
{
	return cli_xfer(cli, argc, argv, true, false);
}

int zl_cli_volume_export(struct zl_cli *cli, int argc, char **argv)
{
	return cli_xfer(cli, argc, argv, false, false);
}

int zl_cli_snapshot_export(struct zl_cli *cli, int argc, char **argv)
{
	return cli_xfer(cli, argc, argv, false, true);
}
