/* e2e_snap: the writing client of snap_e2e.sh. Opens a volume through
 * lib/client, takes its snapshots (zl_vol_snap_serve: the switch of
 * docs/SNAPSHOTS.md §3) and writes 4 KiB blocks at random until --stop FILE
 * exists (the test's snapshots are done) or --seconds passed (a bound),
 * logging every write with CLOCK_REALTIME nanoseconds:
 *
 *   "S gen block t"  just before the write is submitted
 *   "A gen t"        when its acknowledgement arrived
 *
 * A block written with generation gen holds the pattern of
 * e2e_snap_fill(block, gen) (snap_check.py computes the same). Never two
 * writes to one block in flight at once, so each block's writes are ordered
 * by generation. Any failed write: exit 1.
 *
 *   e2e_snap --etcd URL --volume NAME --log FILE --seconds S [--qd 16]
 *            [--ready FILE]   (created once snapshots are served)
 *            [--stop FILE]    (writing ends once it exists)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/zl_auth.h"

#define BLK    4096u
#define MAX_QD 64

struct slot {
	struct snapw *w;
	uint8_t *buf;
	uint64_t block, gen;
	bool busy;
};

struct snapw {
	struct zl_vol *vol;
	FILE *log;
	uint64_t blocks, gen, acked;
	uint8_t *inflight; /* per block */
	struct slot slots[MAX_QD];
	int qd, busy, failed;
	uint64_t rng;
};

static uint64_t now_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Words of (block, gen): word i = block * 2^32 + gen * 65537 + i * 0x9E3779B1,
 * little endian; word 0 = block, word 1 = gen. */
static void e2e_snap_fill(uint8_t *b, uint64_t block, uint64_t gen)
{
	for (uint32_t i = 0; i < BLK / 8; i++) {
		uint64_t v = i == 0 ? block : i == 1 ? gen
					     : (block << 32) + gen * 65537u + i * 0x9E3779B1ull;

		for (int k = 0; k < 8; k++)
			b[i * 8 + k] = (uint8_t)(v >> (8 * k));
	}
}

static uint64_t rnd(struct snapw *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static void submit(struct snapw *w, struct slot *s);

static void write_done(void *arg, int status)
{
	struct slot *s = arg;
	struct snapw *w = s->w;

	fprintf(w->log, "A %" PRIu64 " %" PRIu64 "\n", s->gen, now_real_ns());
	if (status) {
		fprintf(stderr, "e2e_snap: write block=%" PRIu64 " gen=%" PRIu64 " failed: %s\n",
			s->block, s->gen, zl_strerror(status));
		w->failed++;
	}
	w->acked++;
	w->inflight[s->block] = 0;
	s->busy = false;
	w->busy--;
}

static void submit(struct snapw *w, struct slot *s)
{
	uint64_t b;
	int rc;

	do
		b = rnd(w) % w->blocks;
	while (w->inflight[b]);
	s->block = b;
	s->gen = ++w->gen;
	e2e_snap_fill(s->buf, b, s->gen);
	fprintf(w->log, "S %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", s->gen, b, now_real_ns());
	rc = zl_vol_aio_write(w->vol, s->buf, b * BLK, BLK, 0, write_done, s);
	if (rc) {
		fprintf(stderr, "e2e_snap: submit failed: %s\n", zl_strerror(rc));
		fprintf(w->log, "A %" PRIu64 " %" PRIu64 "\n", s->gen, now_real_ns());
		w->failed++;
		return;
	}
	w->inflight[b] = 1;
	s->busy = true;
	w->busy++;
}

static void usage(void)
{
	fprintf(stderr, "usage: e2e_snap --etcd URL --volume NAME --log FILE --seconds S "
			"[--qd 16] [--ready FILE] [--stop FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"etcd", required_argument, NULL, 'e'}, {"volume", required_argument, NULL, 'v'},
	    {"log", required_argument, NULL, 'l'},  {"seconds", required_argument, NULL, 's'},
	    {"qd", required_argument, NULL, 'q'},   {"ready", required_argument, NULL, 'r'},
	    {"stop", required_argument, NULL, 'x'}, {0},
	};
	const char *etcd_url = NULL, *volname = NULL, *log_path = NULL, *ready = NULL;
	const char *stop = NULL;
	struct zl_etcd_opts eo = {0};
	struct zl_client_opts co = {.client_id = "e2e_snap", .transport = ZL_XPORT_SEL_TCP};
	static char key[ZL_AUTH_KEY_HEX + 1];
	struct snapw w = {.qd = 16, .rng = 0x9E3779B97F4A7C15ull};
	struct zl_loop *loop = NULL;
	struct zl_etcd *etcd = NULL;
	struct zl_client *cli = NULL;
	uint64_t seconds = 0, end, next_stop_check = 0;
	int c, rc;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			etcd_url = optarg;
			break;
		case 'v':
			volname = optarg;
			break;
		case 'l':
			log_path = optarg;
			break;
		case 's':
			seconds = strtoull(optarg, NULL, 10);
			break;
		case 'q':
			w.qd = atoi(optarg);
			break;
		case 'r':
			ready = optarg;
			break;
		case 'x':
			stop = optarg;
			break;
		default:
			usage();
		}
	}
	if (!etcd_url || !volname || !log_path || !seconds || w.qd < 1 || w.qd > MAX_QD)
		usage();
	zl_log_init("e2e_snap");
	signal(SIGPIPE, SIG_IGN);
	eo.endpoints = etcd_url;
	if (zl_loop_create(&loop) || zl_etcd_create(&eo, &etcd) ||
	    zl_auth_cluster_key_load(etcd, ZL_META_DEFAULT_PREFIX,
				     getenv("ZIPLINE_CLUSTER_KEY_FILE"), true, key)) {
		fprintf(stderr, "e2e_snap: setup failed\n");
		return 1;
	}
	co.cluster_key = key;
	rc = zl_client_create(loop, etcd, &co, &cli);
	if (!rc)
		rc = zl_vol_open(cli, volname, &w.vol);
	if (!rc)
		rc = zl_vol_snap_serve(w.vol);
	if (rc) {
		fprintf(stderr, "e2e_snap: open/serve %s: %s\n", volname, zl_strerror(rc));
		return 1;
	}
	w.blocks = zl_vol_size(w.vol) / BLK;
	w.inflight = calloc(w.blocks, 1);
	w.log = fopen(log_path, "w");
	if (!w.inflight || !w.log || (uint64_t)w.qd * 4 > w.blocks) {
		fprintf(stderr, "e2e_snap: cannot set up the log or the block table\n");
		return 1;
	}
	setvbuf(w.log, NULL, _IOFBF, 1 << 20);
	for (int i = 0; i < w.qd; i++) {
		w.slots[i].w = &w;
		w.slots[i].buf = zl_vol_buf_alloc(w.vol, BLK);
		if (!w.slots[i].buf)
			return 1;
	}
	if (ready) {
		FILE *f = fopen(ready, "w");

		if (f)
			fclose(f);
	}
	end = zl_now_ms() + seconds * 1000u;
	while (zl_now_ms() < end && !w.failed) {
		if (stop && zl_now_ms() >= next_stop_check) {
			if (!access(stop, F_OK))
				break;
			next_stop_check = zl_now_ms() + 50;
		}
		for (int i = 0; i < w.qd; i++)
			if (!w.slots[i].busy)
				submit(&w, &w.slots[i]);
		zl_loop_run_once(loop, 10);
	}
	while (w.busy)
		zl_loop_run_once(loop, 100);
	fclose(w.log);
	printf("e2e_snap: writes=%" PRIu64 " acked=%" PRIu64 " failed=%d seq=%u\n", w.gen, w.acked,
	       w.failed, zl_vol_snap_seq(w.vol));
	for (int i = 0; i < w.qd; i++)
		zl_vol_buf_free(w.vol, w.slots[i].buf);
	zl_vol_close(w.vol);
	zl_client_destroy(cli);
	zl_etcd_destroy(etcd);
	zl_loop_destroy(loop);
	free(w.inflight);
	return w.failed ? 1 : 0;
}
