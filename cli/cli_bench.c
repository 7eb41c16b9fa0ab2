/* zl bench: asynchronous I/O through the client library with a fixed
 * queue depth, a preallocated log-linear latency histogram, a live progress
 * line, and IOPS / MiB/s / latency percentiles at the end. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lib/client/client.h"

#define BENCH_MAX_QD 1024

enum bench_rw { BENCH_RANDREAD, BENCH_RANDWRITE, BENCH_READ, BENCH_WRITE };
static const char *const bench_rw_names[] = {"randread", "randwrite", "read", "write"};

struct bench;

struct bench_slot {
	struct bench *b;
	void *buf;
	uint64_t off;
	uint64_t t_submit;
	bool busy;
};

struct bench {
	struct zl_vol *v;
	struct zl_loop *loop;
	enum bench_rw rw;
	uint32_t bs, qd;
	uint64_t ws, blocks, seq_next, rng;
	uint64_t deadline_ns, t0;
	uint64_t ios, bytes, last_ios, last_bytes, last_ns;
	uint64_t count, submitted; /* --count: I/Os to submit in all (0: no limit) */
	int inflight, err;
	uint64_t err_off;
	bool stop, progress, tty;
	struct zl_hist hist, win; /* whole run, current second */
	struct zl_timer tick;
	struct bench_slot *slots;
};

static volatile sig_atomic_t bench_interrupted;

static void bench_sig(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

static uint64_t bench_rand(struct bench *b)
{
	/* xorshift64*: cheap and good enough to spread offsets. */
	b->rng ^= b->rng >> 12;
	b->rng ^= b->rng << 25;
	b->rng ^= b->rng >> 27;
	return b->rng * 0x2545f4914f6cdd1dull;
}

static uint64_t bench_next_off(struct bench *b)
{
	uint64_t blk;

	if (b->rw == BENCH_RANDREAD || b->rw == BENCH_RANDWRITE)
		return (bench_rand(b) % b->blocks) * b->bs;
	blk = b->seq_next++;
	if (b->seq_next >= b->blocks)
		b->seq_next = 0;
	return blk * b->bs;
}

/* Submits slot s at now (the submit time its latency counts from).
 * Returns 0, or -ZL_ERR_BUSY when the volume takes no more I/O for now (s
 * stays free), or stops the job on any other error. */
static int bench_submit(struct bench *b, struct bench_slot *s, uint64_t now);

static void bench_done(void *arg, int status)
{
	struct bench_slot *s = arg;
	struct bench *b = s->b;
	uint64_t now = zl_now_ns(); /* this one's end, and the next one's start */
	uint64_t lat = now - s->t_submit;

	s->busy = false;
	b->inflight--;
	if (status) {
		if (!b->err) {
			b->err = status;
			b->err_off = s->off;
		}
		b->stop = true;
		return;
	}
	zl_hist_add(&b->hist, lat);
	zl_hist_add(&b->win, lat);
	b->ios++;
	b->bytes += b->bs;
	/* The slot just freed goes again; bench_run fills any other free one
	 * (after -ZL_ERR_BUSY). The deadline is checked against the loop's
	 * time here, against the clock after every loop iteration there. */
	if (!b->stop && !bench_interrupted && zl_loop_now_ns(b->loop) < b->deadline_ns)
		bench_submit(b, s, now);
}

static int bench_submit(struct bench *b, struct bench_slot *s, uint64_t now)
{
	int rc;

	if (b->count && b->submitted >= b->count) {
		b->stop = true; /* the loop waits for those in flight */
		return -ZL_ERR_BUSY;
	}
	s->off = bench_next_off(b);
	s->t_submit = now;
	if (b->rw == BENCH_RANDREAD || b->rw == BENCH_READ)
		rc = zl_vol_aio_read(b->v, s->buf, s->off, b->bs, bench_done, s);
	else
		rc = zl_vol_aio_write(b->v, s->buf, s->off, b->bs, 0, bench_done, s);
	if (rc == -ZL_ERR_BUSY)
		return rc;
	if (rc) {
		b->err = rc;
		b->err_off = s->off;
		b->stop = true;
		return rc;
	}
	s->busy = true;
	b->inflight++;
	b->submitted++;
	return 0;
}

/* Fills every free slot. */
static void bench_pump(struct bench *b)
{
	if (b->stop || bench_interrupted || zl_now_ns() >= b->deadline_ns) {
		b->stop = true;
		return;
	}
	for (uint32_t i = 0; i < b->qd; i++) {
		struct bench_slot *s = &b->slots[i];

		if (!s->busy && bench_submit(b, s, zl_now_ns()))
			return;
	}
}

/* The job itself, from its first I/O to its last completion: a function of
 * its own so that bench/auth_instr.sh counts instructions per I/O in it
 * alone (callgrind --toggle-collect=bench_run), without start-up. */
static __attribute__((noinline)) void bench_run(struct bench *b)
{
	bench_pump(b);
	while (b->inflight > 0 || !b->stop) {
		zl_loop_run_once(b->loop, 100);
		if (bench_interrupted || zl_now_ns() >= b->deadline_ns)
			b->stop = true;
		else if (b->inflight < (int)b->qd)
			bench_pump(b); /* after -ZL_ERR_BUSY */
	}
}

static void bench_tick(void *arg)
{
	struct bench *b = arg;
	uint64_t now = zl_now_ns();
	double dt = (double)(now - b->last_ns) / 1e9;

	if (b->progress && dt > 0) {
		fprintf(stderr, "%s[%3.0fs] %9.0f IOPS %9.1f MiB/s  avg %7.0f us  p99 %7.0f us%s",
			b->tty ? "\r" : "", (double)(now - b->t0) / 1e9,
			(double)(b->ios - b->last_ios) / dt,
			(double)(b->bytes - b->last_bytes) / (1 << 20) / dt,
			b->win.count ? (double)b->win.sum / (double)b->win.count / 1e3 : 0.0,
			(double)zl_hist_quantile(&b->win, 0.99) / 1e3, b->tty ? "  " : "\n");
	}
	b->last_ns = now;
	b->last_ios = b->ios;
	b->last_bytes = b->bytes;
	zl_hist_init(&b->win);
}

static int bench_parse_rw(const char *s, enum bench_rw *out)
{
	for (unsigned i = 0; i < ZL_ARRAY_SIZE(bench_rw_names); i++) {
		if (!strcmp(s, bench_rw_names[i])) {
			*out = (enum bench_rw)i;
			return 0;
		}
	}
	return -ZL_ERR_INVAL;
}

int zl_cli_bench(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"rw", required_argument, NULL, 'r'},
	    {"bs", required_argument, NULL, 'b'},
	    {"qd", required_argument, NULL, 'q'},
	    {"seconds", required_argument, NULL, 's'},
	    {"count", required_argument, NULL, 'n'},
	    {"size", required_argument, NULL, 'S'},
	    {"json", no_argument, NULL, 'j'},
	    {"progress", no_argument, NULL, 'p'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct bench *b;
	struct sigaction sa = {.sa_handler = bench_sig};
	const char *name;
	uint64_t bs = 4096, ws = 0, vsize, count = 0;
	uint32_t qd = 32, seconds = 10, i;
	enum bench_rw rw = BENCH_RANDREAD;
	bool json = false, progress = false;
	char a[32], c2[32];
	double sec, iops, mibs;
	struct zl_vol_stats st;
	struct zl_xport_stats xs = {0};
	int c, rc, exit_code = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:b:q:s:n:S:jph", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (bench_parse_rw(optarg, &rw)) {
				zl_cli_err("bad --rw '%s': use randread, randwrite, read or write",
					   optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'b':
			if (zl_cli_parse_size(optarg, false, &bs) || bs > (4u << 20)) {
				zl_cli_err("bad --bs '%s': use a block size from 1 to 4M (e.g. 4k)",
					   optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'q':
			if (zl_cli_parse_u32(optarg, 1, BENCH_MAX_QD, &qd)) {
				zl_cli_err("bad --qd '%s': use 1 to %d", optarg, BENCH_MAX_QD);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 's':
			if (zl_cli_parse_u32(optarg, 1, 86400, &seconds)) {
				zl_cli_err("bad --seconds '%s': use 1 to 86400", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'n':
			if (zl_cli_parse_size(optarg, false, &count) || !count) {
				zl_cli_err("bad --count '%s': use a number of I/Os above 0 (K/M "
					   "suffixes count 1024s)",
					   optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'S':
			if (zl_cli_parse_size(optarg, false, &ws)) {
				zl_cli_err("bad --size '%s': use a number with K/M/G/T", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'j':
			json = true;
			break;
		case 'p':
			progress = true;
			break;
		case 'h':
			printf(
			    "usage: zl bench NAME [--rw randread|randwrite|read|write] [--bs 4k] "
			    "[--qd 32] [--seconds 10] [--count N] [--size SIZE] [--json] "
			    "[--progress]\n"
			    "  --count N  stop after N I/Os (or --seconds, whichever comes "
			    "first)\n");
			return 0;
		default:
			return zl_cli_opt_error("bench", c, optopt, argv, optind);
		}
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl bench NAME [--rw ...])",
			   argc - optind < 1 ? "missing volume name" : "too many arguments");
		return ZL_CLI_EXIT_USAGE;
	}
	name = argv[optind];
	b = calloc(1, sizeof(*b));
	if (!b) {
		zl_cli_err("out of memory");
		return ZL_CLI_EXIT_RUNTIME;
	}
	cli->client_max_io = qd > 256 ? qd : 0;
	rc = zl_cli_vol_open(cli, name, &b->v);
	if (rc) {
		exit_code = rc;
		goto out_free;
	}
	vsize = zl_vol_size(b->v);
	if (!ws)
		ws = ZL_MIN(vsize, 1ull << 30);
	if (ws > vsize) {
		zl_cli_err("bad --size %s: larger than volume '%s' (%s)",
			   zl_format_size(ws, a, sizeof(a)), name,
			   zl_format_size(vsize, c2, sizeof(c2)));
		exit_code = ZL_CLI_EXIT_USAGE;
		goto out_vol;
	}
	if (bs > ws) {
		zl_cli_err("bad --bs %llu: larger than the working set (%s)",
			   (unsigned long long)bs, zl_format_size(ws, a, sizeof(a)));
		exit_code = ZL_CLI_EXIT_USAGE;
		goto out_vol;
	}
	b->loop = cli->loop;
	b->rw = rw;
	b->bs = (uint32_t)bs;
	b->qd = qd;
	b->ws = ws;
	b->blocks = ws / bs;
	b->rng = zl_random_u64() | 1;
	b->tty = isatty(STDERR_FILENO);
	b->progress = (progress || b->tty) && !json;
	zl_hist_init(&b->hist);
	zl_hist_init(&b->win);
	b->slots = calloc(qd, sizeof(*b->slots));
	if (!b->slots) {
		zl_cli_err("out of memory");
		exit_code = ZL_CLI_EXIT_RUNTIME;
		goto out_vol;
	}
	for (i = 0; i < qd; i++) {
		uint64_t *w;

		b->slots[i].b = b;
		b->slots[i].buf = zl_vol_buf_alloc(b->v, b->bs);
		if (!b->slots[i].buf) {
			zl_cli_err("cannot allocate %u I/O buffers of %u bytes", qd, b->bs);
			exit_code = ZL_CLI_EXIT_RUNTIME;
			goto out_slots;
		}
		/* Incompressible data for writes. */
		w = b->slots[i].buf;
		for (uint32_t k = 0; k < b->bs / 8; k++)
			w[k] = bench_rand(b);
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	b->t0 = b->last_ns = zl_now_ns();
	b->deadline_ns = b->t0 + (uint64_t)seconds * 1000000000ull;
	b->count = count;
	zl_timer_start(b->loop, &b->tick, 1000, 1000, bench_tick, b);
	bench_run(b);
	zl_timer_stop(b->loop, &b->tick);
	if (b->progress && b->tty)
		fputc('\n', stderr);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	sec = (double)(zl_now_ns() - b->t0) / 1e9;
	iops = sec > 0 ? (double)b->ios / sec : 0;
	mibs = sec > 0 ? (double)b->bytes / (1 << 20) / sec : 0;
	if (b->err) {
		zl_cli_err("bench I/O on volume '%s' failed at offset %llu: %s (check 'zl status')",
			   name, (unsigned long long)b->err_off, zl_strerror(b->err));
		exit_code = ZL_CLI_EXIT_RUNTIME;
	}
	zl_vol_get_stats(b->v, &st);
	zl_xport_stats_add(zl_client_xport(cli->client), &xs);
	if (json) {
		printf("{\"volume\":\"%s\",\"rw\":\"%s\",\"bs\":%u,\"qd\":%u,\"size\":%llu,"
		       "\"seconds\":%.3f,\"ios\":%llu,\"errors\":%d,\"iops\":%.1f,\"mib_s\":%.2f,"
		       "\"throttled\":%llu,\"rdma_copied_bytes\":%llu,"
		       "\"lat_us\":{\"avg\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,"
		       "\"max\":%.1f}}\n",
		       name, bench_rw_names[rw], b->bs, qd, (unsigned long long)ws, sec,
		       (unsigned long long)b->ios, b->err ? 1 : 0, iops, mibs,
		       (unsigned long long)st.throttled, (unsigned long long)xs.rdma_copied_bytes,
		       b->hist.count ? (double)b->hist.sum / (double)b->hist.count / 1e3 : 0.0,
		       (double)zl_hist_quantile(&b->hist, 0.5) / 1e3,
		       (double)zl_hist_quantile(&b->hist, 0.99) / 1e3,
		       (double)zl_hist_quantile(&b->hist, 0.999) / 1e3, (double)b->hist.max / 1e3);
	} else {
		printf("bench '%s': %s bs=%s qd=%u working set %s, %.2f s%s\n", name,
		       bench_rw_names[rw], zl_format_size(b->bs, a, sizeof(a)), qd,
		       zl_format_size(ws, c2, sizeof(c2)), sec,
		       bench_interrupted ? " (interrupted)" : "");
		printf("  IOPS       %.0f\n", iops);
		printf("  bandwidth  %.1f MiB/s\n", mibs);
		printf("  latency    avg %.0f us  p50 %.0f us  p99 %.0f us  p99.9 %.0f us  "
		       "max %.0f us\n",
		       b->hist.count ? (double)b->hist.sum / (double)b->hist.count / 1e3 : 0.0,
		       (double)zl_hist_quantile(&b->hist, 0.5) / 1e3,
		       (double)zl_hist_quantile(&b->hist, 0.99) / 1e3,
		       (double)zl_hist_quantile(&b->hist, 0.999) / 1e3, (double)b->hist.max / 1e3);
		printf("  ios        %llu\n", (unsigned long long)b->ios);
		if (st.throttled)
			printf("  throttled  %llu I/Os waited for the volume's limits\n",
			       (unsigned long long)st.throttled);
	}
out_slots:
	for (i = 0; i < qd; i++)
		if (b->slots[i].buf)
			zl_vol_buf_free(b->v, b->slots[i].buf);
	free(b->slots);
out_vol:
	zl_vol_close(b->v);
out_free:
	free(b);
	return exit_code;
}
