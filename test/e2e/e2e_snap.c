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
 *            [--client-id ID] (default e2e_snap)
 *            [--volume2 NAME] (ordered pairs, below)
 *            [--follow]       (writes through a follower handle, below)
 *
 * With --follow (the ublk frontend's queue threads, csi-node/attach_ublk.c)
 * the handle that serves the snapshots writes nothing: its loop runs on a
 * thread of its own, and every write goes through a second handle of the
 * volume, on a client of its own (id ID-f) on the main thread, that follows
 * it (zl_vol_snap_follow). snap_check.py holds it to the same rule.
 *
 * With --volume2 B (snap_group_e2e.sh, docs/SNAPSHOTS.md §5) it is one
 * ordered writer over two volumes, each opened and served by its own client
 * (ids ID-a and ID-b): pair gen writes block a of the first volume with
 * fill(a, gen), and only once that write was acknowledged, block b of B with
 * fill(b, gen). The log then holds "P gen a b" at the first submission and
 * "B gen" when the second is submitted (after the first's ack). A group
 * snapshot that holds B's write of a pair must hold A's.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
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
	/* ordered pairs: phase 1 = A's write in flight, 2 = A acknowledged
	 * (B's to submit), 3 = B's in flight */
	int phase;
	uint64_t block_b;
};

struct snapw {
	struct zl_vol *vol;
	struct zl_vol *vol_b; /* --volume2 */
	uint8_t *inflight_b;
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

/* ---- ordered pairs (--volume2) ---- */

static void pair_done(void *arg, int status)
{
	struct slot *s = arg;
	struct snapw *w = s->w;

	if (status) {
		fprintf(stderr, "e2e_snap: %s write block=%" PRIu64 " gen=%" PRIu64 " failed: %s\n",
			s->phase == 1 ? "first" : "second", s->phase == 1 ? s->block : s->block_b,
			s->gen, zl_strerror(status));
		w->failed++;
	}
	if (s->phase == 1 && !status) {
		s->phase = 2; /* the main loop submits B's write */
		return;
	}
	w->acked++;
	w->inflight[s->block] = 0;
	w->inflight_b[s->block_b] = 0;
	s->phase = 0;
	s->busy = false;
	w->busy--;
}

static void pair_submit_a(struct snapw *w, struct slot *s)
{
	uint64_t a, b;
	int rc;

	do
		a = rnd(w) % w->blocks;
	while (w->inflight[a]);
	do
		b = rnd(w) % w->blocks;
	while (w->inflight_b[b]);
	s->block = a;
	s->block_b = b;
	s->gen = ++w->gen;
	e2e_snap_fill(s->buf, a, s->gen);
	fprintf(w->log, "P %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", s->gen, a, b);
	s->phase = 1;
	rc = zl_vol_aio_write(w->vol, s->buf, a * BLK, BLK, 0, pair_done, s);
	if (rc) {
		fprintf(stderr, "e2e_snap: submit failed: %s\n", zl_strerror(rc));
		w->failed++;
		s->phase = 0;
		return;
	}
	w->inflight[a] = 1;
	w->inflight_b[b] = 1;
	s->busy = true;
	w->busy++;
}

static void pair_submit_b(struct snapw *w, struct slot *s)
{
	int rc;

	e2e_snap_fill(s->buf, s->block_b, s->gen);
	fprintf(w->log, "B %" PRIu64 "\n", s->gen);
	s->phase = 3;
	rc = zl_vol_aio_write(w->vol_b, s->buf, s->block_b * BLK, BLK, 0, pair_done, s);
	if (rc) {
		fprintf(stderr, "e2e_snap: submit failed: %s\n", zl_strerror(rc));
		pair_done(s, rc);
	}
}

/* --follow: the lead's loop, on its own thread until zl_loop_stop. */
static void *lead_main(void *arg)
{
	zl_loop_run(arg);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: e2e_snap --etcd URL --volume NAME --log FILE --seconds S "
			"[--qd 16] [--ready FILE] [--stop FILE] [--client-id ID] "
			"[--volume2 NAME] [--follow]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"etcd", required_argument, NULL, 'e'}, {"volume", required_argument, NULL, 'v'},
	    {"log", required_argument, NULL, 'l'},  {"seconds", required_argument, NULL, 's'},
	    {"qd", required_argument, NULL, 'q'},   {"ready", required_argument, NULL, 'r'},
	    {"stop", required_argument, NULL, 'x'}, {"client-id", required_argument, NULL, 'i'},
	    {"volume2", required_argument, NULL, 'b'}, {"follow", no_argument, NULL, 'f'}, {0},
	};
	bool follow = false;
	char id_f[64];
	struct zl_loop *loop_f = NULL;
	struct zl_client *cli_f = NULL;
	struct zl_vol *lead = NULL;
	struct zl_loop *loop_lead = NULL;
	pthread_t lead_tid;
	const char *volname_b = NULL, *client_id = "e2e_snap";
	char id_a[64], id_b[64];
	struct zl_client *cli_b = NULL;
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
		case 'i':
			client_id = optarg;
			break;
		case 'b':
			volname_b = optarg;
			break;
		case 'f':
			follow = true;
			break;
		default:
			usage();
		}
	}
	if (!etcd_url || !volname || !log_path || !seconds || w.qd < 1 || w.qd > MAX_QD ||
	    (follow && volname_b))
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
	snprintf(id_a, sizeof(id_a), "%s%s", client_id, volname_b ? "-a" : "");
	co.client_id = id_a;
	rc = zl_client_create(loop, etcd, &co, &cli);
	if (!rc)
		rc = zl_vol_open(cli, volname, &w.vol);
	if (!rc)
		rc = zl_vol_snap_serve(w.vol);
	if (rc) {
		fprintf(stderr, "e2e_snap: open/serve %s: %s\n", volname, zl_strerror(rc));
		return 1;
	}
	if (volname_b) {
		/* The second volume's own client: a hold and a switch each. */
		snprintf(id_b, sizeof(id_b), "%s-b", client_id);
		co.client_id = id_b;
		rc = zl_client_create(loop, etcd, &co, &cli_b);
		if (!rc)
			rc = zl_vol_open(cli_b, volname_b, &w.vol_b);
		if (!rc)
			rc = zl_vol_snap_serve(w.vol_b);
		if (!rc && zl_vol_size(w.vol_b) != zl_vol_size(w.vol))
			rc = -ZL_ERR_INVAL;
		if (rc) {
			fprintf(stderr, "e2e_snap: open/serve %s (the same size as %s): %s\n",
				volname_b, volname, zl_strerror(rc));
			return 1;
		}
	}
	if (follow) {
		/* The lead serves the snapshots on its own thread; we write
		 * through a follower on a loop and client of our own. */
		lead = w.vol;
		loop_lead = loop;
		snprintf(id_f, sizeof(id_f), "%s-f", client_id);
		co.client_id = id_f;
		rc = zl_loop_create(&loop_f);
		if (!rc)
			rc = zl_client_create(loop_f, etcd, &co, &cli_f);
		if (!rc)
			rc = zl_vol_open(cli_f, volname, &w.vol);
		if (!rc)
			rc = zl_vol_snap_follow(w.vol, lead);
		if (!rc)
			rc = -pthread_create(&lead_tid, NULL, lead_main, loop_lead);
		if (rc) {
			fprintf(stderr, "e2e_snap: follower of %s: %s\n", volname, zl_strerror(rc));
			return 1;
		}
		loop = loop_f;
	}
	w.blocks = zl_vol_size(w.vol) / BLK;
	w.inflight = calloc(w.blocks, 1);
	w.inflight_b = calloc(w.blocks, 1);
	w.log = fopen(log_path, "w");
	if (!w.inflight || !w.inflight_b || !w.log || (uint64_t)w.qd * 4 > w.blocks) {
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
			if (volname_b)
				fflush(w.log); /* the test watches the pairs go on */
		}
		for (int i = 0; i < w.qd; i++) {
			struct slot *s = &w.slots[i];

			if (!volname_b && !s->busy)
				submit(&w, s);
			else if (volname_b && !s->busy)
				pair_submit_a(&w, s);
			else if (volname_b && s->phase == 2)
				pair_submit_b(&w, s);
		}
		zl_loop_run_once(loop, 10);
	}
	while (w.busy) {
		for (int i = 0; volname_b && i < w.qd; i++)
			if (w.slots[i].phase == 2)
				pair_submit_b(&w, &w.slots[i]);
		zl_loop_run_once(loop, 100);
	}
	fclose(w.log);
	printf("e2e_snap: writes=%" PRIu64 " acked=%" PRIu64 " failed=%d seq=%u\n", w.gen, w.acked,
	       w.failed, zl_vol_snap_seq(w.vol));
	for (int i = 0; i < w.qd; i++)
		zl_vol_buf_free(w.vol, w.slots[i].buf);
	if (w.vol_b)
		printf("e2e_snap: pairs, second volume seq=%u\n", zl_vol_snap_seq(w.vol_b));
	zl_vol_close(w.vol);
	if (follow) {
		/* The follower is closed: the lead's loop comes back here. */
		zl_client_destroy(cli_f);
		zl_loop_destroy(loop_f);
		zl_loop_stop(loop_lead);
		pthread_join(lead_tid, NULL);
		loop = loop_lead;
	}
	zl_vol_close(lead);
	zl_vol_close(w.vol_b);
	zl_client_destroy(cli_b);
	zl_client_destroy(cli);
	zl_etcd_destroy(etcd);
	zl_loop_destroy(loop);
	free(w.inflight);
	free(w.inflight_b);
	return w.failed ? 1 : 0;
}
