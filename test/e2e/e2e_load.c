/* e2e_load: a verifying load generator and checker for the heal tests
 * (thrash_e2e.sh, divergence_e2e.sh, delta_e2e.sh), through lib/client.
 *
 *   e2e_load write --etcd URL --volume NAME --log FILE [--qd 8] [--seed N]
 *                  [--seconds S] [--stop-file F] [--bytes SIZE] [--read-pct P]
 *                  [--min-len SIZE] [--max-len SIZE] [--fill STRIDE:LEN]
 *                  [--overlap [OFF:]SPAN] [--final-check]
 *   e2e_load check --log FILE (--etcd URL --volume NAME | --chunk-dir DIR
 *                  --size SIZE --chunk-size SIZE) [--exact]
 * (the cluster token of e2e_load, or the attach token in $ZL_E2E_TOKEN of
 * volume $ZL_E2E_VOL (hex) at $ZL_E2E_EPOCH for node $ZL_E2E_NODE)
 *
 * Every 512-byte sector a write puts down encodes (sector offset,
 * generation): bytes [0,8) offset, [8,16) generation, [16,24) a magic, the
 * rest words of zl_hash64 of the three; so any sector read back names the
 * write it came from, or is zeros (never written), or is garbage. Writes are
 * 512-byte aligned, generation +1 each, never two overlapping in flight
 * unless --overlap: then every write falls in [OFF, OFF+SPAN) (default OFF
 * 0; one chunk when the range is inside one) and may overlap writes in
 * flight (never a read).
 *
 * The log (text, appended, fsynced) is the record of the run:
 *   "S gen off len"  written and fsynced BEFORE the write is submitted
 *   "A gen"          after its acknowledgement (fsynced before the next
 *                    batch of submissions)
 *   "F gen err"      a failed write (content of its range undetermined)
 * A new `write` replays the log first, so runs continue each other.
 *
 * For each sector the allowed content is a write W covering it that no
 * acknowledged write covering it follows, i.e. none was submitted after W
 * ended (its "A" or "F" record, the end of its run for a write with
 * neither; never for one still in flight): the last acknowledged write,
 * or one submitted after it (an unacknowledged write may or may not have
 * landed), or one in flight with it (overlapping writes in flight at once
 * land in an order the client does not know); or zeros when no
 * acknowledged write covers it. Record order in the log is the order of
 * these events. --exact allows acknowledged writes only.
 *
 * write: QD writes (and --read-pct reads of ranges not in flight, each
 * sector checked against the log's state) until --seconds, --bytes or the
 * stop file appears; --fill writes LEN at every STRIDE from 0 instead of
 * random ranges; --final-check reads the whole volume back after.
 * check: reads the whole volume (through the client) or one replica's chunk
 * files (<DIR>/<chunk %016x>.zlc, data at the header's data offset) and
 * checks every sector. Exit 0 only when nothing failed and every sector is
 * allowed. Prints "LOAD:" / "CHECK:" summary lines and TOUCHED_CHUNKS; write also
 * "CLONE: copyups=N copyup_races=M" (the client's counters of a clone's
 * chunks copied up from its parent, and of copy-ups another won). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/zl_auth.h"

#define SECTOR	 512u
#define MAX_QD	 64
#define MAGIC	 0x5a4c4c4f41443031ull /* "ZLLOAD01" */
#define MAX_SECS 600

struct wrec {
	uint64_t off, len;
	uint64_t sub_pos;  /* log position of its "S" record */
	uint64_t done_pos; /* of its "A" / "F" record; UINT64_MAX in flight */
	uint8_t state;	   /* 0 unknown gen, 1 submitted, 2 acked, 3 failed */
};

struct load;

struct slot {
	struct load *t;
	bool busy, is_read;
	uint64_t gen, off, len;
	uint64_t t_submit_ms; /* for the latency figures */
	uint8_t *buf;
};

struct load {
	/* log state */
	struct wrec *w; /* by generation */
	uint64_t n_gen, cap_gen;
	uint32_t *ack;	/* per sector: last acked gen covering it (0 none) */
	uint32_t *last; /* per sector: last submitted gen covering it */
	uint64_t *ack_sub; /* per sector: latest "S" position of an acked write covering it */
	uint64_t pos;	   /* log records (S, A, F) so far: the next one's position */
	uint64_t overlap;  /* 0, or --overlap SPAN */
	uint64_t ov_off;   /* --overlap OFF */
	uint64_t size, chunk_size, n_sectors;
	uint8_t *touched; /* per chunk, written in this run */
	FILE *log;

	struct zl_loop *loop;
	struct zl_etcd *etcd;
	struct zl_client *cli;
	struct zl_vol *vol;
	struct slot slots[MAX_QD];
	uint64_t rng;
	int inflight;
	uint64_t writes, acked, failed, reads, read_errs, mism, acked_bytes, pending_acks;
	uint64_t overlapped; /* writes submitted over a write in flight */
	uint64_t lat_max_ms, lat_sum_ms, lat_n; /* submit to completion, reads and writes */
};

static uint64_t rnd(struct load *t)
{
	t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
	return zl_hash64(t->rng);
}

static void pattern(uint8_t *p, uint64_t off, uint64_t gen)
{
	uint64_t w[SECTOR / 8];

	w[0] = off;
	w[1] = gen;
	w[2] = MAGIC;
	for (unsigned int i = 3; i < SECTOR / 8; i++)
		w[i] = zl_hash64(off * 0x9e3779b97f4a7c15ull ^ gen * 0xc2b2ae3d27d4eb4full ^ i);
	memcpy(p, w, SECTOR);
}

static void die(const char *msg)
{
	fprintf(stderr, "e2e_load: %s\n", msg);
	exit(2);
}

static struct wrec *wrec_get(struct load *t, uint64_t gen)
{
	if (gen >= t->cap_gen) {
		uint64_t n = ZL_MAX(gen + 1, t->cap_gen * 2 + 1024);

		t->w = realloc(t->w, n * sizeof(*t->w));
		if (!t->w)
			die("out of memory");
		memset(t->w + t->cap_gen, 0, (n - t->cap_gen) * sizeof(*t->w));
		t->cap_gen = n;
	}
	if (gen >= t->n_gen)
		t->n_gen = gen + 1;
	return &t->w[gen];
}

static void state_alloc(struct load *t)
{
	t->n_sectors = t->size / SECTOR;
	t->ack = calloc(t->n_sectors, sizeof(*t->ack));
	t->last = calloc(t->n_sectors, sizeof(*t->last));
	t->ack_sub = calloc(t->n_sectors, sizeof(*t->ack_sub));
	t->touched = calloc(t->size / t->chunk_size + 1, 1);
	if (!t->ack || !t->last || !t->ack_sub || !t->touched)
		die("out of memory");
}

static void note_submit(struct load *t, uint64_t gen, uint64_t off, uint64_t len)
{
	struct wrec *r = wrec_get(t, gen);

	r->off = off;
	r->len = len;
	r->state = 1;
	r->sub_pos = ++t->pos;
	r->done_pos = UINT64_MAX;
	for (uint64_t s = off / SECTOR; s < (off + len) / SECTOR; s++)
		t->last[s] = (uint32_t)gen;
}

static void note_ack(struct load *t, uint64_t gen)
{
	struct wrec *r = wrec_get(t, gen);

	r->state = 2;
	r->done_pos = ++t->pos;
	for (uint64_t s = r->off / SECTOR; s < (r->off + r->len) / SECTOR; s++) {
		if (gen > t->ack[s])
			t->ack[s] = (uint32_t)gen;
		t->ack_sub[s] = ZL_MAX(t->ack_sub[s], r->sub_pos);
	}
}

static void note_fail(struct load *t, uint64_t gen)
{
	struct wrec *r = wrec_get(t, gen);

	r->state = 3;
	r->done_pos = ++t->pos;
}

static void log_replay(struct load *t, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[256];
	uint64_t n = 0;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		uint64_t g, o, l;

		if (!strchr(line, '\n'))
			break; /* torn last line: the writer was killed while logging */
		if (sscanf(line, "S %" SCNu64 " %" SCNu64 " %" SCNu64, &g, &o, &l) == 3) {
			if (o % SECTOR || l % SECTOR || o + l > t->size || !l)
				die("log: write record out of the volume (another volume's log?)");
			note_submit(t, g, o, l);
		} else if (sscanf(line, "A %" SCNu64, &g) == 1) {
			note_ack(t, g);
		} else if (sscanf(line, "F %" SCNu64, &g) == 1) {
			note_fail(t, g);
		}
		n++;
	}
	fclose(f);
	/* A write its run left without an outcome ended with that run. */
	for (uint64_t g = 1; g < t->n_gen; g++)
		if (t->w[g].state == 1 && t->w[g].done_pos == UINT64_MAX)
			t->w[g].done_pos = t->pos;
	fprintf(stderr, "e2e_load: log %s: %" PRIu64 " records, %" PRIu64 " writes\n", path, n,
		t->n_gen ? t->n_gen - 1 : 0);
}

static void log_sync(struct load *t)
{
	if (fflush(t->log) || fsync(fileno(t->log)))
		die("cannot write/fsync the log");
}

/* Checks one sector read back at sector index s. exact: no unacked write
 * may be a candidate. Returns true when allowed. */
static bool sector_ok(struct load *t, uint64_t s, const uint8_t *p, bool exact, uint64_t *got_gen)
{
	static const uint8_t zero[SECTOR];
	uint8_t want[SECTOR];
	const struct wrec *r;
	uint64_t off, gen;

	*got_gen = UINT64_MAX;
	if (!memcmp(p, zero, SECTOR)) {
		*got_gen = 0;
		return t->ack_sub[s] == 0 && (!exact || t->last[s] == 0);
	}
	memcpy(&off, p, 8);
	memcpy(&gen, p + 8, 8);
	if (off != s * SECTOR || gen == 0 || gen >= t->n_gen)
		return false;
	pattern(want, off, gen);
	if (memcmp(want, p, SECTOR))
		return false;
	*got_gen = gen;
	r = &t->w[gen];
	if (r->state == 0 || (exact && r->state != 2) || s * SECTOR < r->off ||
	    s * SECTOR >= r->off + r->len)
		return false;
	/* No acknowledged write covering s was submitted after gen ended. */
	return t->ack_sub[s] < r->done_pos;
}

static void report_bad(struct load *t, const char *what, uint64_t s, uint64_t got)
{
	if (t->mism++ < 8)
		fprintf(stderr,
			"e2e_load: %s: BAD sector at byte %" PRIu64 ": holds gen %s%" PRIu64
			", last acked gen %u, last submitted gen %u\n",
			what, s * SECTOR, got == UINT64_MAX ? "(garbage) " : "",
			got == UINT64_MAX ? 0 : got, t->ack[s], t->last[s]);
}

static void check_buf(struct load *t, const char *what, uint64_t off, const uint8_t *buf,
		      uint64_t len, bool exact)
{
	for (uint64_t s = off / SECTOR; s < (off + len) / SECTOR; s++) {
		uint64_t g;

		if (!sector_ok(t, s, buf + (s * SECTOR - off), exact, &g))
			report_bad(t, what, s, g);
	}
}

/* ---- write ---- */

/* Whether [off, off+len) overlaps an I/O in flight: a read only, when
 * reads_only. */
static bool overlaps(struct load *t, uint64_t off, uint64_t len, bool reads_only)
{
	for (int i = 0; i < MAX_QD; i++) {
		struct slot *w = &t->slots[i];

		if (w->busy && (!reads_only || w->is_read) && off < w->off + w->len &&
		    w->off < off + len)
			return true;
	}
	return false;
}

static void io_done(void *arg, int status)
{
	struct slot *w = arg;
	struct load *t = w->t;

	uint64_t lat = zl_now_ms() - w->t_submit_ms;

	w->busy = false;
	t->inflight--;
	t->lat_max_ms = ZL_MAX(t->lat_max_ms, lat);
	t->lat_sum_ms += lat;
	t->lat_n++;
	if (w->is_read) {
		if (status) {
			fprintf(stderr,
				"e2e_load: read off=%" PRIu64 " len=%" PRIu64 " failed: %s\n",
				w->off, w->len, zl_strerror(status));
			t->read_errs++;
			return;
		}
		t->reads++;
		check_buf(t, "read during load", w->off, w->buf, w->len, false);
		return;
	}
	if (status) {
		fprintf(stderr,
			"e2e_load: write gen=%" PRIu64 " off=%" PRIu64 " len=%" PRIu64
			" failed: %s\n",
			w->gen, w->off, w->len, zl_strerror(status));
		fprintf(t->log, "F %" PRIu64 " %d\n", w->gen, status);
		note_fail(t, w->gen);
		t->failed++;
		return;
	}
	fprintf(t->log, "A %" PRIu64 "\n", w->gen);
	note_ack(t, w->gen);
	t->acked++;
	t->acked_bytes += w->len;
	t->pending_acks++;
}

struct wcfg {
	int qd;
	uint64_t seconds, bytes, min_len, max_len, fill_stride, fill_len;
	int read_pct;
	const char *stop_file;
	bool final_check;
};

static bool pick_range(struct load *t, const struct wcfg *c, bool is_read, uint64_t *fill_next,
		       uint64_t *off, uint64_t *len)
{
	uint64_t span = t->overlap ? t->overlap : t->size, base = t->overlap ? t->ov_off : 0;

	if (c->fill_stride) {
		if (*fill_next >= t->size)
			return false;
		*off = *fill_next;
		*len = ZL_MIN(c->fill_len, t->size - *off);
		*fill_next += c->fill_stride;
		return true;
	}
	for (int tries = 0; tries < 1000; tries++) {
		uint64_t l = c->min_len + rnd(t) % (c->max_len - c->min_len + 1);
		uint64_t o;

		l = ZL_ALIGN_UP(l, SECTOR);
		if (rnd(t) % 2)
			l = ZL_ALIGN_UP(l, 4096);
		o = base + ZL_ALIGN_DOWN(rnd(t) % (span - l + 1), SECTOR);
		/* --overlap: a write may overlap writes in flight, never a read. */
		if (!overlaps(t, o, l, t->overlap && !is_read)) {
			*off = o;
			*len = l;
			return true;
		}
	}
	return false;
}

static bool should_stop(struct load *t, const struct wcfg *c, uint64_t t0, uint64_t start_bytes,
			bool fill_done)
{
	if (fill_done)
		return true;
	if (c->seconds && zl_now_ms() - t0 >= c->seconds * 1000)
		return true;
	if (c->bytes && t->acked_bytes - start_bytes >= c->bytes)
		return true;
	if (c->stop_file && access(c->stop_file, F_OK) == 0)
		return true;
	return zl_now_ms() - t0 >= MAX_SECS * 1000ull;
}

static int submit_batch(struct load *t, const struct wcfg *c, uint64_t *fill_next, bool *fill_done)
{
	struct slot *batch[MAX_QD];
	int n = 0;

	while (t->inflight + n < c->qd) {
		struct slot *w = NULL;

		for (int i = 0; i < c->qd; i++)
			if (!t->slots[i].busy) {
				w = &t->slots[i];
				break;
			}
		if (!w)
			break;
		w->is_read = !c->fill_stride && (int)(rnd(t) % 100) < c->read_pct;
		if (!pick_range(t, c, w->is_read, fill_next, &w->off, &w->len)) {
			*fill_done = c->fill_stride != 0;
			break;
		}
		w->t = t;
		if (!w->is_read)
			t->overlapped += overlaps(t, w->off, w->len, false);
		w->busy = true; /* reserve the range for the next picks */
		if (!w->is_read) {
			w->gen = t->n_gen ? t->n_gen : 1;
			note_submit(t, w->gen, w->off, w->len);
			for (uint64_t ch = w->off / t->chunk_size;
			     ch <= (w->off + w->len - 1) / t->chunk_size; ch++)
				t->touched[ch] = 1;
			fprintf(t->log, "S %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", w->gen, w->off,
				w->len);
			for (uint64_t s = 0; s < w->len / SECTOR; s++)
				pattern(w->buf + s * SECTOR, w->off + s * SECTOR, w->gen);
		}
		batch[n++] = w;
	}
	if (!n)
		return 0;
	/* Submissions and the acks seen so far are durable before any write goes out. */
	log_sync(t);
	t->pending_acks = 0;
	for (int i = 0; i < n; i++) {
		struct slot *w = batch[i];
		int rc;

		w->t_submit_ms = zl_now_ms();
		rc = w->is_read
			     ? zl_vol_aio_read(t->vol, w->buf, w->off, w->len, io_done, w)
			     : zl_vol_aio_write(t->vol, w->buf, w->off, w->len, 0, io_done, w);

		if (rc) {
			fprintf(stderr, "e2e_load: submit failed: %s\n", zl_strerror(rc));
			return rc;
		}
		t->inflight++;
		if (!w->is_read)
			t->writes++;
	}
	return 0;
}

static int read_all(struct load *t, const char *what, bool exact)
{
	const uint64_t piece = 1u << 20;
	uint8_t *buf = zl_vol_buf_alloc(t->vol, piece);
	int rc = 0;

	for (uint64_t off = 0; off < t->size && !rc; off += piece) {
		uint64_t len = ZL_MIN(piece, t->size - off);

		rc = zl_vol_read(t->vol, buf, off, len);
		if (rc)
			fprintf(stderr, "e2e_load: %s: read off=%" PRIu64 " failed: %s\n", what,
				off, zl_strerror(rc));
		else
			check_buf(t, what, off, buf, len, exact);
	}
	zl_vol_buf_free(t->vol, buf);
	return rc;
}

static void print_touched(struct load *t)
{
	uint64_t n = 0;

	for (uint64_t c = 0; c <= t->size / t->chunk_size; c++)
		n += t->touched[c];
	printf("TOUCHED_CHUNKS %" PRIu64 "\n", n);
}

static int do_write(struct load *t, const struct wcfg *c)
{
	uint64_t t0 = zl_now_ms(), start_bytes = t->acked_bytes, fill_next = 0, last_print = t0;
	bool fill_done = false;
	int rc = 0;

	for (int i = 0; i < c->qd; i++)
		t->slots[i].buf =
		    zl_vol_buf_alloc(t->vol, c->max_len > c->fill_len ? c->max_len : c->fill_len);
	while (!rc) {
		if (!should_stop(t, c, t0, start_bytes, fill_done))
			rc = submit_batch(t, c, &fill_next, &fill_done);
		else if (!t->inflight)
			break;
		zl_loop_run_once(t->loop, 50);
		if (zl_now_ms() - last_print >= 5000) {
			last_print = zl_now_ms();
			fprintf(stderr,
				"e2e_load: %.0f s: %" PRIu64 " writes acked (%" PRIu64
				" MiB), %" PRIu64 " failed, %" PRIu64 " reads, %d in flight\n",
				(double)(last_print - t0) / 1000.0, t->acked, t->acked_bytes >> 20,
				t->failed, t->reads, t->inflight);
		}
		if (zl_now_ms() - t0 > (MAX_SECS + 60) * 1000ull) {
			fprintf(stderr, "e2e_load: %d I/Os never completed\n", t->inflight);
			rc = -ETIMEDOUT;
		}
	}
	log_sync(t);
	printf("LOAD: writes=%" PRIu64 " acked=%" PRIu64 " failed=%" PRIu64 " acked_mib=%" PRIu64
	       " reads=%" PRIu64 " read_errors=%" PRIu64 " bad_sectors=%" PRIu64
	       " seconds=%.1f lat_max_ms=%" PRIu64 " lat_avg_ms=%.1f overlapping=%" PRIu64 "\n",
	       t->writes, t->acked, t->failed, t->acked_bytes >> 20, t->reads, t->read_errs,
	       t->mism, (double)(zl_now_ms() - t0) / 1000.0, t->lat_max_ms,
	       t->lat_n ? (double)t->lat_sum_ms / (double)t->lat_n : 0.0, t->overlapped);
	print_touched(t);
	fflush(stdout);
	if (!rc && c->final_check) {
		uint64_t m0 = t->mism;

		rc = read_all(t, "final read-back", false);
		printf("CHECK: source=volume bad_sectors=%" PRIu64 " read_error=%s\n", t->mism - m0,
		       rc ? zl_strerror(rc) : "none");
	}
	for (int i = 0; i < c->qd; i++)
		zl_vol_buf_free(t->vol, t->slots[i].buf);
	if (rc || t->failed || t->read_errs || t->mism)
		return 1;
	return 0;
}

/* ---- check of one replica's chunk files ---- */

static int read_chunk_dir(struct load *t, const char *dir, bool exact)
{
	uint8_t *buf = malloc(t->chunk_size);
	uint64_t n_chunks = (t->size + t->chunk_size - 1) / t->chunk_size, missing = 0;
	int rc = 0;

	if (!buf)
		die("out of memory");
	for (uint64_t ch = 0; ch < n_chunks; ch++) {
		char path[4096], hdr[64];
		uint64_t data_off;
		int fd;
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%016" PRIx64 ".zlc", dir, ch);
		memset(buf, 0, t->chunk_size);
		fd = open(path, O_RDONLY);
		if (fd < 0) {
			missing++; /* reads as zeros: the sectors check says if that is wrong */
		} else {
			if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
			    memcmp(hdr, "ZLCHUNK2", 8)) {
				fprintf(stderr, "e2e_load: %s: not a format v2 chunk file\n", path);
				close(fd);
				rc = -EINVAL;
				break;
			}
			memcpy(&data_off, hdr + 40, 8);
			n = pread(fd, buf, t->chunk_size, (off_t)data_off);
			close(fd);
			if (n < 0) {
				rc = -errno;
				break;
			}
		}
		check_buf(t, dir, ch * t->chunk_size, buf,
			  ZL_MIN(t->chunk_size, t->size - ch * t->chunk_size), exact);
	}
	free(buf);
	fprintf(stderr, "e2e_load: %s: %" PRIu64 " of %" PRIu64 " chunk files missing\n", dir,
		missing, n_chunks);
	return rc;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: e2e_load write --etcd URL --volume NAME --log FILE [--qd N] [--seed N]\n"
		"                [--seconds S] [--stop-file F] [--bytes SIZE] [--read-pct P]\n"
		"                [--min-len SIZE] [--max-len SIZE] [--fill STRIDE:LEN] "
		"[--overlap [OFF:]SPAN]\n"
		"                [--final-check]\n"
		"       e2e_load check --log FILE (--etcd URL --volume NAME | --chunk-dir DIR\n"
		"                --size SIZE --chunk-size SIZE) [--exact]\n");
	exit(2);
}

static uint64_t size_arg(const char *s)
{
	uint64_t v;

	if (zl_parse_size(s, &v))
		usage();
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"etcd", required_argument, NULL, 'e'},
	    {"volume", required_argument, NULL, 'v'},
	    {"log", required_argument, NULL, 'l'},
	    {"qd", required_argument, NULL, 'q'},
	    {"seed", required_argument, NULL, 's'},
	    {"seconds", required_argument, NULL, 'T'},
	    {"stop-file", required_argument, NULL, 'x'},
	    {"bytes", required_argument, NULL, 'b'},
	    {"read-pct", required_argument, NULL, 'r'},
	    {"min-len", required_argument, NULL, 'm'},
	    {"max-len", required_argument, NULL, 'M'},
	    {"fill", required_argument, NULL, 'f'},
	    {"final-check", no_argument, NULL, 'F'},
	    {"chunk-dir", required_argument, NULL, 'd'},
	    {"size", required_argument, NULL, 'S'},
	    {"chunk-size", required_argument, NULL, 'C'},
	    {"exact", no_argument, NULL, 'X'},
	    {"overlap", required_argument, NULL, 'O'},
	    {NULL, 0, NULL, 0},
	};
	struct wcfg wc = {.qd = 8, .min_len = 4096, .max_len = 256 << 10};
	const char *etcd_url = NULL, *volname = NULL, *log_path = NULL, *chunk_dir = NULL;
	struct load t = {.rng = 42};
	bool exact = false, is_write;
	int c, rc;

	if (argc < 2 || (strcmp(argv[1], "write") && strcmp(argv[1], "check")))
		usage();
	is_write = !strcmp(argv[1], "write");
	optind = 2;
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
		case 'q':
			wc.qd = atoi(optarg);
			break;
		case 's':
			t.rng = strtoull(optarg, NULL, 0);
			break;
		case 'T':
			wc.seconds = strtoull(optarg, NULL, 0);
			break;
		case 'x':
			wc.stop_file = optarg;
			break;
		case 'b':
			wc.bytes = size_arg(optarg);
			break;
		case 'r':
			wc.read_pct = atoi(optarg);
			break;
		case 'm':
			wc.min_len = size_arg(optarg);
			break;
		case 'M':
			wc.max_len = size_arg(optarg);
			break;
		case 'f': {
			char *colon = strchr(optarg, ':');

			if (!colon)
				usage();
			*colon = 0;
			wc.fill_stride = size_arg(optarg);
			wc.fill_len = size_arg(colon + 1);
			if (!wc.fill_len || wc.fill_len > wc.fill_stride || wc.fill_len % SECTOR)
				usage();
			break;
		}
		case 'F':
			wc.final_check = true;
			break;
		case 'd':
			chunk_dir = optarg;
			break;
		case 'S':
			t.size = size_arg(optarg);
			break;
		case 'C':
			t.chunk_size = size_arg(optarg);
			break;
		case 'X':
			exact = true;
			break;
		case 'O': {
			char *colon = strchr(optarg, ':');

			if (colon) {
				*colon = 0;
				t.ov_off = size_arg(optarg);
			}
			t.overlap = size_arg(colon ? colon + 1 : optarg);
			break;
		}
		default:
			usage();
		}
	}
	if (!log_path || wc.qd < 1 || wc.qd > MAX_QD || wc.min_len < SECTOR ||
	    wc.max_len < wc.min_len || (is_write && chunk_dir))
		usage();
	zl_log_init("e2e_load");
	signal(SIGPIPE, SIG_IGN);
	if (!chunk_dir) {
		struct zl_etcd_opts eo = {.endpoints = etcd_url};
		struct zl_client_opts co = {.client_id = "e2e_load", .transport = ZL_XPORT_SEL_TCP};

		if (!etcd_url || !volname)
			usage();
		static char key[ZL_AUTH_KEY_HEX + 1];

		const char *atok = getenv("ZL_E2E_TOKEN");

		/* ZL_E2E_TOKEN (with ZL_E2E_EPOCH, ZL_E2E_VOL in hex and
		 * ZL_E2E_NODE): the attach token of one volume, as an attach
		 * process holds, instead of the cluster token. */
		if (atok && *atok) {
			const char *ep = getenv("ZL_E2E_EPOCH"), *vol = getenv("ZL_E2E_VOL");
			const char *node = getenv("ZL_E2E_NODE");

			co.token = atok;
			co.epoch = ep ? strtoull(ep, NULL, 0) : 0;
			co.token_vol = vol ? strtoull(vol, NULL, 16) : 0;
			if (node && *node)
				co.client_id = node;
		}
		if (zl_loop_create(&t.loop) || zl_etcd_create(&eo, &t.etcd) ||
		    (!co.token && zl_auth_cluster_key_load(t.etcd, ZL_META_DEFAULT_PREFIX,
							   getenv("ZIPLINE_CLUSTER_KEY_FILE"), true,
							   key)) ||
		    (co.cluster_key = co.token ? NULL : key,
		     zl_client_create(t.loop, t.etcd, &co, &t.cli)))
			die("client setup failed");
		rc = zl_vol_open(t.cli, volname, &t.vol);
		if (rc) {
			fprintf(stderr, "e2e_load: open %s: %s\n", volname, zl_strerror(rc));
			return 2;
		}
		t.size = zl_vol_size(t.vol);
		t.chunk_size = zl_vol_meta(t.vol)->chunk_size;
	} else if (!t.size || !t.chunk_size) {
		usage();
	}
	if (t.size % SECTOR || wc.max_len > t.size)
		die("volume size must be a multiple of 512 and larger than --max-len");
	if (t.overlap && (t.overlap % SECTOR || t.ov_off % SECTOR || t.ov_off > t.size ||
			  t.overlap > t.size - t.ov_off || wc.max_len > t.overlap ||
			  wc.fill_stride))
		die("--overlap OFF:SPAN: multiples of 512 within the volume, SPAN at least --max-len, "
		    "without --fill");
	state_alloc(&t);
	log_replay(&t, log_path);
	if (is_write) {
		t.log = fopen(log_path, "a");
		if (!t.log)
			die("cannot open the log for appending");
		rc = do_write(&t, &wc);
		fclose(t.log);
		if (t.vol) {
			struct zl_vol_stats vs;

			zl_vol_get_stats(t.vol, &vs);
			printf("CLONE: copyups=%" PRIu64 " copyup_races=%" PRIu64 "\n", vs.copyups,
			       vs.copyup_races);
		}
	} else if (chunk_dir) {
		rc = read_chunk_dir(&t, chunk_dir, exact);
		printf("CHECK: source=%s bad_sectors=%" PRIu64 " error=%s\n", chunk_dir, t.mism,
		       rc ? zl_strerror(rc) : "none");
		rc = rc || t.mism;
	} else {
		rc = read_all(&t, "read-back", exact);
		printf("CHECK: source=volume bad_sectors=%" PRIu64 " read_error=%s\n", t.mism,
		       rc ? zl_strerror(rc) : "none");
		rc = rc || t.mism;
	}
	if (t.vol)
		zl_vol_close(t.vol);
	zl_client_destroy(t.cli);
	if (t.etcd)
		zl_etcd_destroy(t.etcd);
	if (t.loop)
		zl_loop_destroy(t.loop);
	return rc ? 1 : 0;
}
