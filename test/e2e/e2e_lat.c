/* e2e_lat: per-operation latency of an open volume while the test holds
 * etcd (noblock_e2e.sh, issue 23 "Nothing blocks an I/O thread").
 *
 *   e2e_lat --etcd URL --volume NAME --chunk C --max-ms M --stop FILE
 *           [--trigger-chunk T --trigger FILE]
 *
 * Opens the volume (etcd must answer then), then writes and reads 4 KiB at
 * QD 1 in chunk C, one after the other, each read checked against what was
 * written, until FILE --stop exists. Every operation's latency (submit to
 * callback) and every gap between two completions is measured. With
 * --trigger: once that file exists, writes of 4 KiB to chunk T go on one at
 * a time beside the measured ones (not measured: the test makes them need a
 * placement reload while the client's etcd is held).
 *
 * Prints "ready" once 20 operations completed, a line "ops=N max_ms=X" every
 * second, and at the end "ops=N max_op_ms=X max_gap_ms=Y triggers=Z".
 * Exit 0 only when every operation succeeded, read back what was written,
 * and neither the slowest operation nor the longest gap exceeded M ms. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/meta/zl_auth.h"
#include "lib/transport/transport.h"

#define LAT_IO 4096u
#define LAT_SPAN (1u << 20) /* bytes of chunk C the measured I/O covers */

struct lat {
	struct zl_loop *loop;
	struct zl_vol *vol;
	uint64_t base, tbase; /* byte offsets of chunk C and chunk T */
	uint8_t *wbuf, *rbuf, *tbuf;
	uint64_t rng, off, ops, triggers;
	uint64_t t_op, t_last, max_op, max_gap, max_sec; /* ns */
	bool reading, failed, trig_busy;
	const char *trig_file;
	struct zl_timer tick;
};

static uint64_t lat_rand(struct lat *l)
{
	l->rng ^= l->rng << 13;
	l->rng ^= l->rng >> 7;
	l->rng ^= l->rng << 17;
	return l->rng;
}

static void lat_next(struct lat *l);

static void lat_done(void *arg, int status)
{
	struct lat *l = arg;
	uint64_t now = zl_now_ns(), op = now - l->t_op;

	if (status) {
		fprintf(stderr, "e2e_lat: %s at %" PRIu64 " failed: %s\n",
			l->reading ? "read" : "write", l->off, zl_strerror(status));
		l->failed = true;
	} else if (l->reading && memcmp(l->rbuf, l->wbuf, LAT_IO)) {
		fprintf(stderr, "e2e_lat: read at %" PRIu64 " differs from what was written\n",
			l->off);
		l->failed = true;
	}
	l->ops++;
	l->max_op = ZL_MAX(l->max_op, op);
	l->max_sec = ZL_MAX(l->max_sec, op);
	if (l->t_last)
		l->max_gap = ZL_MAX(l->max_gap, now - l->t_last);
	l->t_last = now;
	if (l->ops == 20)
		printf("ready\n"), fflush(stdout);
	l->reading = !l->reading;
	lat_next(l);
}

static void lat_next(struct lat *l)
{
	int rc;

	if (!l->reading) {
		l->off = l->base + (lat_rand(l) % (LAT_SPAN / LAT_IO)) * LAT_IO;
		for (unsigned i = 0; i < LAT_IO; i += 8)
			memcpy(l->wbuf + i, &(uint64_t){ lat_rand(l) }, 8);
	}
	l->t_op = zl_now_ns();
	rc = l->reading ? zl_vol_aio_read(l->vol, l->rbuf, l->off, LAT_IO, lat_done, l)
			: zl_vol_aio_write(l->vol, l->wbuf, l->off, LAT_IO, 0, lat_done, l);
	if (rc) {
		fprintf(stderr, "e2e_lat: submit failed: %s\n", zl_strerror(rc));
		l->failed = true;
	}
}

static void lat_trig_done(void *arg, int status)
{
	struct lat *l = arg;

	l->trig_busy = false;
	l->triggers++;
	if (status) {
		fprintf(stderr, "e2e_lat: trigger write failed: %s\n", zl_strerror(status));
		l->failed = true;
	}
}

static void lat_tick(void *arg)
{
	struct lat *l = arg;

	printf("ops=%" PRIu64 " max_ms=%.1f\n", l->ops, (double)l->max_sec / 1e6);
	fflush(stdout);
	l->max_sec = 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: e2e_lat --etcd URL --volume NAME --chunk C --max-ms M --stop FILE "
			"[--trigger-chunk T --trigger FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "etcd", required_argument, NULL, 'e' },
		{ "volume", required_argument, NULL, 'v' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "max-ms", required_argument, NULL, 'm' },
		{ "stop", required_argument, NULL, 's' },
		{ "trigger-chunk", required_argument, NULL, 't' },
		{ "trigger", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 },
	};
	const char *etcd_url = NULL, *volname = NULL, *stop = NULL;
	uint64_t chunk = 0, tchunk = 0, max_ms = 0;
	struct lat l = { .rng = 88172645463325252ull, .reading = false };
	struct zl_etcd_opts eo = { 0 };
	struct zl_client_opts co = { .client_id = "e2e_lat", .transport = ZL_XPORT_SEL_TCP };
	char key[ZL_AUTH_KEY_HEX + 1];
	struct zl_etcd *etcd;
	struct zl_client *cli;
	const struct zl_volume *m;
	int c;

	zl_log_init("e2e_lat");
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e': etcd_url = optarg; break;
		case 'v': volname = optarg; break;
		case 'c': chunk = strtoull(optarg, NULL, 10); break;
		case 'm': max_ms = strtoull(optarg, NULL, 10); break;
		case 's': stop = optarg; break;
		case 't': tchunk = strtoull(optarg, NULL, 10); break;
		case 'T': l.trig_file = optarg; break;
		default: usage();
		}
	}
	if (!etcd_url || !volname || !stop || !max_ms)
		usage();
	eo.endpoints = etcd_url;
	if (zl_loop_create(&l.loop) || zl_etcd_create(&eo, &etcd) ||
	    zl_auth_cluster_key_load(etcd, ZL_META_DEFAULT_PREFIX,
				     getenv("ZIPLINE_CLUSTER_KEY_FILE"), true, key) ||
	    (co.cluster_key = key, zl_client_create(l.loop, etcd, &co, &cli))) {
		fprintf(stderr, "e2e_lat: setup failed\n");
		return 1;
	}
	if (zl_vol_open(cli, volname, &l.vol)) {
		fprintf(stderr, "e2e_lat: cannot open %s\n", volname);
		return 1;
	}
	m = zl_vol_meta(l.vol);
	if ((chunk + 1) * m->chunk_size > m->size || (tchunk + 1) * m->chunk_size > m->size ||
	    m->chunk_size < LAT_SPAN) {
		fprintf(stderr, "e2e_lat: chunk %" PRIu64 " or %" PRIu64 " outside %s\n", chunk,
			tchunk, volname);
		return 1;
	}
	l.base = chunk * m->chunk_size;
	l.tbase = tchunk * m->chunk_size;
	l.wbuf = zl_vol_buf_alloc(l.vol, LAT_IO);
	l.rbuf = zl_vol_buf_alloc(l.vol, LAT_IO);
	l.tbuf = zl_vol_buf_alloc(l.vol, LAT_IO);
	if (!l.wbuf || !l.rbuf || !l.tbuf)
		return 1;
	memset(l.tbuf, 0x5a, LAT_IO);
	zl_timer_start(l.loop, &l.tick, 1000, 1000, lat_tick, &l);
	lat_next(&l);
	while (!l.failed && access(stop, F_OK) != 0) {
		zl_loop_run_once(l.loop, 10);
		if (l.trig_file && !l.trig_busy && access(l.trig_file, F_OK) == 0) {
			l.trig_busy = true;
			if (zl_vol_aio_write(l.vol, l.tbuf, l.tbase, LAT_IO, 0, lat_trig_done,
					     &l)) {
				fprintf(stderr, "e2e_lat: trigger submit failed\n");
				l.failed = true;
			}
		}
	}
	/* The operations in flight end (the trigger too: etcd answers again). */
	for (uint64_t t0 = zl_now_ms(); (l.trig_busy || !l.ops) && !l.failed &&
					zl_now_ms() - t0 < 30000;)
		zl_loop_run_once(l.loop, 10);
	printf("ops=%" PRIu64 " max_op_ms=%.1f max_gap_ms=%.1f triggers=%" PRIu64 "\n", l.ops,
	       (double)l.max_op / 1e6, (double)l.max_gap / 1e6, l.triggers);
	fflush(stdout);
	if (l.failed || l.trig_busy)
		return 1;
	if (l.max_op > max_ms * 1000000ull || l.max_gap > max_ms * 1000000ull) {
		fprintf(stderr, "e2e_lat: an operation or a gap took longer than %" PRIu64 " ms\n",
			max_ms);
		return 1;
	}
	return 0;
}
