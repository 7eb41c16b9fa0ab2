/* powercut_io: load and oracle of the storage power-cut test
 * (test/vm/powercut-storage.sh), on a volume through lib/client.
 *
 *   powercut_io write --etcd URL --volume NAME --seed N --log FILE
 *                     --ready FILE --ready-after N [--qd N] [--max-ops N]
 *                     [--first FILE] [--before CMD] [--nospc N]
 *   powercut_io check --etcd URL --volume NAME --seed N --log FILE
 *                     [--base FILE] --out FILE [--qd N] [--first FILE]
 *                     [--taint FILE] [--min-acked N (1)]
 *   powercut_io scan  --data-dir DIR [--taint FILE]
 *
 * The operations are a pure function of (SEED, sequence number, volume
 * size): op k is a WRITE (4 KiB..64 KiB at 4 KiB-aligned, 512-aligned or any
 * byte offset and length; its bytes a function of (SEED, k)), a WRITE_ZEROES
 * or a DISCARD (4 KiB..128 KiB, aligned or not; both read back as zeros), a
 * third of them in a hot first 512 KiB so blocks are overwritten often.
 *
 * write submits ops 0, 1, 2, ... in order, at most QD in flight, and never
 * one that overlaps an op still in flight (it waits instead). After each
 * acknowledgement it appends "k KIND OFF LEN\n" to LOG and fdatasyncs it
 * before anything else is submitted (LOG lies in a host-shared directory:
 * what reached the host survives a SIGKILL of qemu). READY is created after
 * READY_AFTER acknowledgements; the host cuts the power at a random later
 * moment. Without a cut it stops after MAX_OPS and exits 3 (not a pass).
 * CMD (--before) runs once the volume is open, before the first op.
 *
 * A full disk (--nospc N, powercut-storage.sh with ZL_POWERCUT_FULL=on): an
 * op that fails ZL_ERR_NOSPC was not acknowledged; it is logged as
 * "k KIND OFF LEN NOSPC" (fdatasync'ed as well) and the load goes on; READY
 * waits for N such failures too. Any other failure ends the load (exit 1).
 * check treats such an op like one in flight at the cut: each replica
 * applied it or not, so each 4 KiB piece of it reads old or new.
 *
 * check rebuilds what the volume must hold: BASE (the volume at the start of
 * this round, i.e. the previous check's OUT; zeros without --base) with every
 * logged op applied in sequence order (the latest acknowledged op wins). Ops
 * not logged and below (highest logged + 1 + QD) may have been in flight at
 * the cut (submission is in order, at most QD in flight): within each 4 KiB
 * block, the piece of such an op must read either entirely as before it or
 * entirely as its own bytes; every other byte must be exactly the expected
 * one. The whole volume is read (every block must be readable; a
 * ZL_ERR_CORRUPT is a failure) and what it holds is written to OUT, the base
 * of the next round. It prints one "powercut_io: check:" summary line.
 *
 * The trap of a second cut (powercut-storage.sh with ZL_POWERCUT_TRAP=on):
 * scan --taint FILE (or check --taint FILE: blocks where a piece of an op in
 * flight read old) lists blocks whose metadata names data that never landed.
 * write --first FILE makes those runs ops 0..n-1 (WRITEs, submitted
 * together; with --ready-after 0 READY is created once they are submitted),
 * so the next cut can hit the first write to such a block after the
 * previous cut. check needs the same --first.
 *
 * scan reads every chunk file under DIR/chunks itself (format v2 of
 * storage/storage_chunk.h, without the daemon): each block must match its
 * current metadata slot's crc or prev_crc, or be zeros with a zero entry.
 * It counts the blocks matching prev_crc (a write whose metadata landed and
 * whose data did not); --taint FILE lists them (volume offsets, up to 8
 * runs of at most 64 KiB) as --first input for the trap. Reads are
 * O_DIRECT: while the daemon runs, the scan sees what a cut would leave.
 *
 * Exit status: 0 pass, 1 a check or an I/O failed, 2 usage or set-up,
 * 3 write finished MAX_OPS without a power cut. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/client/client.h"
#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/zl_auth.h"

#define PC_BLK	    4096u
#define PC_MAX_QD   16
#define PC_MAX_WR   (64u << 10)
#define PC_MAX_ZERO (128u << 10)
#define PC_HOT	    (512u << 10)
#define PC_READ_LEN (64u << 10)

enum pc_kind { PC_WRITE = 'W', PC_ZEROES = 'Z', PC_DISCARD = 'D' };

struct pc_op {
	uint64_t seq, off, len;
	int kind;
};

struct pc_args {
	const char *etcd, *volume, *log, *ready, *base, *out, *first, *taint, *before;
	uint64_t seed, ready_after, max_ops, min_acked;
	uint64_t nospc; /* --nospc: NOSPC failures are logged, READY waits for this many */
	bool nospc_ok;
	uint32_t qd;
};

struct pc_rng {
	uint64_t s;
};

static uint64_t pc_next(struct pc_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return zl_hash64(r->s);
}

static uint64_t pc_range(struct pc_rng *r, uint64_t lo, uint64_t hi)
{
	return lo + pc_next(r) % (hi - lo + 1);
}

/* Offset and length inside [0, region): 4 KiB aligned, 512 aligned or any. */
static void pc_place(struct pc_rng *r, uint64_t region, uint64_t max_len, struct pc_op *op)
{
	uint64_t how = pc_next(r) % 4, len;

	if (how < 2) {
		len = pc_range(r, 1, max_len / PC_BLK) * PC_BLK;
		op->off = ZL_ALIGN_DOWN(pc_range(r, 0, region - len), PC_BLK);
	} else if (how == 2) {
		len = pc_range(r, 8, max_len / 512) * 512;
		op->off = ZL_ALIGN_DOWN(pc_range(r, 0, region - len), 512);
	} else {
		len = pc_range(r, PC_BLK, max_len);
		op->off = pc_range(r, 0, region - len);
	}
	op->len = len;
}

/* --first: ops 0..pc_n_first-1 are these WRITEs (the trap of a second cut). */
static struct pc_op pc_first[PC_MAX_QD];
static uint32_t pc_n_first;

/* Op number seq of the random sequence of seed on a volume of size bytes. */
static void pc_op_rand(uint64_t seed, uint64_t seq, uint64_t size, struct pc_op *op)
{
	struct pc_rng r = {zl_hash64(seed) ^ zl_hash64(seq * 0xff51afd7ed558ccdull + 1)};
	uint64_t region = (pc_next(&r) % 3 == 0) ? ZL_MIN(size, PC_HOT) : size;
	uint64_t p = pc_next(&r) % 100;

	op->seq = seq;
	op->kind = p < 8 ? PC_ZEROES : p < 14 ? PC_DISCARD : PC_WRITE;
	pc_place(&r, region, op->kind == PC_WRITE ? PC_MAX_WR : PC_MAX_ZERO, op);
}

/* Op number seq: one of --first, else of the random sequence. */
static void pc_op_gen(uint64_t seed, uint64_t seq, uint64_t size, struct pc_op *op)
{
	if (seq < pc_n_first)
		*op = pc_first[seq];
	else
		pc_op_rand(seed, seq, size, op);
}

/* Bytes [from, from+len) of what op leaves in [off, off+len): zeros, or a
 * function of (seed, seq): 8-byte word w of the op is the hash of the
 * op's stream at step w + 1. */
static void pc_op_bytes(uint64_t seed, const struct pc_op *op, uint64_t from, uint64_t len,
			uint8_t *out)
{
	uint64_t s0 = zl_hash64(seed ^ 0x5a4c504f57455243ull) ^ zl_hash64(op->seq + 7);

	if (op->kind != PC_WRITE) {
		memset(out, 0, len);
		return;
	}
	for (uint64_t pos = from; pos < from + len;) {
		uint64_t x = zl_hash64(s0 + (pos / 8 + 1) * 0x9e3779b97f4a7c15ull);
		uint64_t n = ZL_MIN(8 - pos % 8, from + len - pos);

		memcpy(out + (pos - from), (const uint8_t *)&x + pos % 8, n);
		pos += n;
	}
}

/* The bytes op leaves in [off, off+len). */
static void pc_op_fill(uint64_t seed, const struct pc_op *op, uint8_t *buf)
{
	pc_op_bytes(seed, op, 0, op->len, buf);
}

/* Reads --first FILE: "OFF LEN" lines (WRITEs of at most 64 KiB, disjoint,
 * inside the volume), at most PC_MAX_QD. */
static int pc_first_read(const char *path, uint64_t size)
{
	FILE *f = fopen(path, "r");
	uint64_t off, len;

	if (!f) {
		fprintf(stderr, "powercut_io: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (pc_n_first < PC_MAX_QD && fscanf(f, "%" SCNu64 " %" SCNu64, &off, &len) == 2) {
		struct pc_op *op = &pc_first[pc_n_first];

		if (!len || len > PC_MAX_WR || off + len > size) {
			fprintf(stderr, "powercut_io: %s: bad op %" PRIu64 " %" PRIu64 "\n", path,
				off, len);
			fclose(f);
			return -1;
		}
		*op = (struct pc_op){.seq = pc_n_first++, .off = off, .len = len, .kind = PC_WRITE};
	}
	fclose(f);
	return 0;
}

static bool pc_overlap(const struct pc_op *a, const struct pc_op *b)
{
	return a->off < b->off + b->len && b->off < a->off + a->len;
}

/* ------------------------------------------------------------ client ---- */

struct pc_conn {
	struct zl_loop *loop;
	struct zl_etcd *etcd;
	struct zl_client *cli;
	struct zl_vol *vol;
	uint64_t size;
};

static int pc_connect(const struct pc_args *a, struct pc_conn *c)
{
	struct zl_etcd_opts eo = {.endpoints = a->etcd};
	struct zl_client_opts co = {.client_id = "powercut_io",
				    .transport = ZL_XPORT_SEL_TCP,
				    /* writes held seconds by the trap's dm-delay */
				    .timeout_ms = 120000};
	int rc;

	rc = zl_loop_create(&c->loop);
	if (!rc)
		rc = zl_etcd_create(&eo, &c->etcd);
	/* The cluster token (storage --auth on, docs/SECURITY.md). */
	static char key[ZL_AUTH_KEY_HEX + 1];

	if (!rc)
		rc = zl_auth_cluster_key_load(c->etcd, ZL_META_DEFAULT_PREFIX,
					      getenv("ZIPLINE_CLUSTER_KEY_FILE"), true, key);
	co.cluster_key = key;
	if (!rc)
		rc = zl_client_create(c->loop, c->etcd, &co, &c->cli);
	if (rc) {
		fprintf(stderr, "powercut_io: client set-up (etcd %s) failed: %s\n", a->etcd,
			zl_strerror(rc));
		return rc;
	}
	rc = zl_vol_open(c->cli, a->volume, &c->vol);
	if (rc) {
		fprintf(stderr, "powercut_io: open volume %s: %s\n", a->volume, zl_strerror(rc));
		return rc;
	}
	c->size = zl_vol_size(c->vol);
	if (c->size < PC_HOT || c->size % PC_BLK) {
		fprintf(stderr,
			"powercut_io: volume %s has %" PRIu64 " bytes, want a multiple "
			"of 4 KiB, at least 512 KiB\n",
			a->volume, c->size);
		return -ZL_ERR_INVAL;
	}
	if (a->first && pc_first_read(a->first, c->size))
		return -ZL_ERR_INVAL;
	return 0;
}

static void pc_disconnect(struct pc_conn *c)
{
	zl_vol_close(c->vol);
	zl_client_destroy(c->cli);
	zl_etcd_destroy(c->etcd);
	zl_loop_destroy(c->loop);
}

/* ------------------------------------------------------------- write ---- */

struct pc_writer;

struct pc_slot {
	struct pc_writer *w;
	bool busy;
	struct pc_op op;
	uint8_t *buf;
};

struct pc_writer {
	const struct pc_args *a;
	struct pc_conn c;
	struct pc_slot slots[PC_MAX_QD];
	int lfd;
	uint32_t inflight;
	uint64_t acked, failed;
	bool ready_done;
	int err;
};

static int pc_ready(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0644);

	if (fd < 0 || fsync(fd) || close(fd)) {
		fprintf(stderr, "powercut_io: ready file %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

static void pc_write_done(void *arg, int status)
{
	struct pc_slot *s = arg;
	struct pc_writer *w = s->w;
	char line[96];
	int n;

	bool nospc = status == -ZL_ERR_NOSPC && w->a->nospc_ok;

	s->busy = false;
	w->inflight--;
	if (status && !nospc) {
		fprintf(stderr,
			"powercut_io: op %" PRIu64 " %c off=%" PRIu64 " len=%" PRIu64
			" failed: %s\n",
			s->op.seq, s->op.kind, s->op.off, s->op.len, zl_strerror(status));
		w->err = 1;
		return;
	}
	n = snprintf(line, sizeof(line), "%" PRIu64 " %c %" PRIu64 " %" PRIu64 "%s\n", s->op.seq,
		     s->op.kind, s->op.off, s->op.len, nospc ? " NOSPC" : "");
	if (write(w->lfd, line, (size_t)n) != n || fdatasync(w->lfd)) {
		fprintf(stderr, "powercut_io: log %s: %s\n", w->a->log, strerror(errno));
		w->err = 1;
		return;
	}
	if (nospc) {
		if (w->failed++ == 0)
			fprintf(stderr,
				"powercut_io: op %" PRIu64 " failed NOSPC (after %" PRIu64
				" acknowledged)\n",
				s->op.seq, w->acked);
	} else if (++w->acked % 1000 == 0) {
		fprintf(stderr, "powercut_io: %" PRIu64 " ops acknowledged\n", w->acked);
	}
	if (!w->ready_done && w->a->ready_after && w->acked >= w->a->ready_after &&
	    w->failed >= w->a->nospc) {
		w->ready_done = true;
		if (pc_ready(w->a->ready))
			w->err = 1;
	}
}

/* A free slot for op, or NULL while one is busy with an overlapping op. */
static struct pc_slot *pc_slot_for(struct pc_writer *w, const struct pc_op *op)
{
	struct pc_slot *free_slot = NULL;

	for (uint32_t i = 0; i < w->a->qd; i++) {
		struct pc_slot *s = &w->slots[i];

		if (s->busy && pc_overlap(&s->op, op))
			return NULL;
		if (!s->busy && !free_slot)
			free_slot = s;
	}
	return free_slot;
}

static int pc_submit(struct pc_writer *w, struct pc_slot *s, const struct pc_op *op)
{
	struct zl_vol *v = w->c.vol;
	int rc;

	s->op = *op;
	s->w = w;
	switch (op->kind) {
	case PC_WRITE:
		pc_op_fill(w->a->seed, op, s->buf);
		rc = zl_vol_aio_write(v, s->buf, op->off, op->len, 0, pc_write_done, s);
		break;
	case PC_ZEROES:
		rc = zl_vol_aio_write_zeroes(v, op->off, op->len, pc_write_done, s);
		break;
	default:
		rc = zl_vol_aio_discard(v, op->off, op->len, pc_write_done, s);
		break;
	}
	if (rc) {
		fprintf(stderr, "powercut_io: submit of op %" PRIu64 " failed: %s\n", op->seq,
			zl_strerror(rc));
		return rc;
	}
	s->busy = true;
	w->inflight++;
	return 0;
}

static int pc_write(const struct pc_args *a)
{
	struct pc_writer w = {.a = a, .lfd = -1};
	struct pc_op op;
	uint64_t seq = 0, t0;
	int rc = 2;

	if (pc_connect(a, &w.c))
		goto out;
	for (uint32_t i = 0; i < a->qd; i++) {
		w.slots[i].buf = zl_vol_buf_alloc(w.c.vol, PC_MAX_WR);
		if (!w.slots[i].buf) {
			fprintf(stderr, "powercut_io: no I/O buffer\n");
			goto out;
		}
	}
	w.lfd = open(a->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (w.lfd < 0) {
		fprintf(stderr, "powercut_io: open %s: %s\n", a->log, strerror(errno));
		goto out;
	}
	fprintf(stderr, "powercut_io: writing to %s (%" PRIu64 " MiB), seed %" PRIu64 ", QD %u\n",
		a->volume, w.c.size >> 20, a->seed, a->qd);
	if (a->before && system(a->before) != 0) {
		fprintf(stderr, "powercut_io: --before '%s' failed\n", a->before);
		goto out;
	}
	t0 = zl_now_ms();
	rc = 1;
	pc_op_gen(a->seed, seq, w.c.size, &op);
	while (!w.err && seq < a->max_ops) {
		struct pc_slot *s = pc_slot_for(&w, &op);

		if (s) {
			if (pc_submit(&w, s, &op))
				goto out;
			pc_op_gen(a->seed, ++seq, w.c.size, &op);
			if (!a->ready_after && seq == pc_n_first && pc_ready(a->ready))
				goto out;
			continue;
		}
		zl_loop_run_once(w.c.loop, 100);
	}
	while (!w.err && w.inflight)
		zl_loop_run_once(w.c.loop, 100);
	if (w.err)
		goto out;
	fprintf(stderr,
		"powercut_io: all %" PRIu64 " ops acknowledged in %.1f s and no power "
		"cut came\n",
		w.acked, (double)(zl_now_ms() - t0) / 1000.0);
	rc = 3;
out:
	for (uint32_t i = 0; i < a->qd; i++)
		if (w.slots[i].buf)
			zl_vol_buf_free(w.c.vol, w.slots[i].buf);
	if (w.lfd >= 0)
		close(w.lfd);
	pc_disconnect(&w.c);
	return rc;
}

/* ------------------------------------------------------------- check ---- */

struct pc_check {
	const struct pc_args *a;
	uint64_t size;
	uint8_t *want; /* base + every logged op */
	uint8_t *got;  /* what the volume holds */
	uint8_t *acked;
	uint64_t n_logged, end; /* end = highest logged + 1 */
	struct pc_op cand[PC_MAX_QD * 2];
	uint8_t *cand_buf[PC_MAX_QD * 2];
	uint32_t n_cand;
	uint8_t *old_block; /* a piece of an op in flight reads old here */
	/* NOSPC: ops that failed (logged "NOSPC"), the blocks they touch, the
	 * volume at the start of the round, every op below end + QD */
	uint8_t *failed, *fail_block, *base;
	struct pc_op *ops;
	uint64_t n_failed;
	/* results */
	uint64_t blocks, wrong, pieces_old, pieces_new, read_errs, corrupt;
	uint64_t fail_blocks, fail_new, fail_old, states_max, lenient;
};

/* Reads LOG: marks every logged op, checks that each line names the op the
 * generator makes for that number (same seed and volume). */
static int pc_log_read(struct pc_check *k, uint64_t max_seq)
{
	FILE *f = fopen(k->a->log, "r");
	char line[128], kind, tag[16];
	uint64_t seq, off, len, lineno = 0;
	struct pc_op op;
	bool failed;
	int n;

	if (!f) {
		fprintf(stderr, "powercut_io: open %s: %s\n", k->a->log, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[strlen(line) - 1] != '\n')
			break; /* cut in the middle of the last record */
		n = sscanf(line, "%" SCNu64 " %c %" SCNu64 " %" SCNu64 " %15s", &seq, &kind, &off,
			   &len, tag);
		failed = n == 5 && !strcmp(tag, "NOSPC");
		if ((n != 4 && !failed) || seq >= max_seq)
			goto bad;
		pc_op_gen(k->a->seed, seq, k->size, &op);
		if (op.kind != kind || op.off != off || op.len != len || k->acked[seq] ||
		    k->failed[seq])
			goto bad;
		if (failed) {
			k->failed[seq] = 1;
			k->n_failed++;
		} else {
			k->acked[seq] = 1;
			k->n_logged++;
		}
		k->end = ZL_MAX(k->end, seq + 1);
	}
	fclose(f);
	return 0;
bad:
	fprintf(stderr,
		"powercut_io: %s line %" PRIu64 " '%.*s' is not an op of seed %" PRIu64
		" (or repeats one)\n",
		k->a->log, lineno, (int)strcspn(line, "\n"), line, k->a->seed);
	fclose(f);
	return -1;
}

static int pc_base_read(struct pc_check *k)
{
	int fd;
	ssize_t n;

	if (!k->a->base)
		return 0; /* a new volume reads as zeros */
	fd = open(k->a->base, O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "powercut_io: open %s: %s\n", k->a->base, strerror(errno));
		return -1;
	}
	n = pread(fd, k->want, k->size, 0);
	close(fd);
	if (n != (ssize_t)k->size) {
		fprintf(stderr, "powercut_io: %s: %zd bytes read, want %" PRIu64 "\n", k->a->base,
			n, k->size);
		return -1;
	}
	return 0;
}

/* want = base + logged ops in order; the candidates for "in flight at the
 * cut": not logged, number below end + QD. */
static int pc_expect(struct pc_check *k)
{
	uint8_t *buf = malloc(PC_MAX_ZERO);
	struct pc_op op;

	if (!buf)
		return -1;
	if (k->n_failed) {
		k->ops = calloc(k->end + k->a->qd, sizeof(*k->ops));
		k->base = malloc(k->size);
		k->fail_block = calloc(1, k->size / PC_BLK);
		if (!k->ops || !k->base || !k->fail_block) {
			free(buf);
			return -1;
		}
		memcpy(k->base, k->want, k->size);
	}
	for (uint64_t s = 0; s < k->end + k->a->qd; s++) {
		pc_op_gen(k->a->seed, s, k->size, &op);
		if (k->ops)
			k->ops[s] = op;
		if (s < k->end && k->acked[s]) {
			pc_op_fill(k->a->seed, &op, buf);
			memcpy(k->want + op.off, buf, op.len);
			continue;
		}
		if (s < k->end && k->failed[s]) {
			for (uint64_t b = op.off / PC_BLK; b * PC_BLK < op.off + op.len; b++)
				k->fail_block[b] = 1;
			continue;
		}
		if (k->n_cand == ZL_ARRAY_SIZE(k->cand)) {
			fprintf(stderr,
				"powercut_io: more than %zu ops missing from %s below op %" PRIu64
				": not a log of QD %u\n",
				ZL_ARRAY_SIZE(k->cand), k->a->log, k->end + k->a->qd, k->a->qd);
			free(buf);
			return -1;
		}
		k->cand[k->n_cand] = op;
		k->cand_buf[k->n_cand] = malloc(op.len);
		if (!k->cand_buf[k->n_cand]) {
			free(buf);
			return -1;
		}
		pc_op_fill(k->a->seed, &op, k->cand_buf[k->n_cand++]);
	}
	free(buf);
	return 0;
}

/* Reads the whole volume into got; a piece that fails is counted (and left
 * as the expected content so the comparison does not report it twice). */
static int pc_read_all(struct pc_check *k, struct pc_conn *c)
{
	for (uint64_t off = 0; off < k->size; off += PC_READ_LEN) {
		uint64_t len = ZL_MIN(PC_READ_LEN, k->size - off);
		int rc = zl_vol_read(c->vol, k->got + off, off, len);

		if (!rc)
			continue;
		if (k->read_errs++ < 10)
			fprintf(stderr,
				"powercut_io: READ off=%" PRIu64 " len=%" PRIu64 " failed: %s\n",
				off, len, zl_strerror(rc));
		if (rc == -ZL_ERR_CORRUPT)
			k->corrupt++;
		memcpy(k->got + off, k->want + off, len);
	}
	return 0;
}

static void pc_report(struct pc_check *k, uint64_t off, const char *what)
{
	if (k->wrong++ < 10)
		fprintf(stderr,
			"powercut_io: WRONG block at byte %" PRIu64 " (block %" PRIu64 "): %s\n",
			off, off / PC_BLK, what);
}

/* Block b: bytes outside every candidate must be the expected ones; the
 * piece of a candidate (bytes of no other candidate) all before or all its
 * own; bytes of two candidates any of those values. */
static void pc_check_block(struct pc_check *k, uint64_t b)
{
	uint64_t bo = b * PC_BLK, be = bo + PC_BLK;
	uint32_t cover[PC_BLK] = {0}; /* bit i: candidate i covers the byte */
	uint32_t touch = 0, i;
	const uint8_t *g = k->got + bo, *w = k->want + bo;
	bool bad = false;

	for (i = 0; i < k->n_cand; i++) {
		const struct pc_op *op = &k->cand[i];
		uint64_t lo = ZL_MAX(op->off, bo), hi = ZL_MIN(op->off + op->len, be);

		for (uint64_t x = lo; x < hi; x++)
			cover[x - bo] |= 1u << i;
		if (lo < hi)
			touch |= 1u << i;
	}
	k->blocks++;
	if (!touch) {
		if (memcmp(g, w, PC_BLK))
			pc_report(k, bo, "not the last acknowledged content");
		return;
	}
	for (uint32_t x = 0; x < PC_BLK && !bad; x++) {
		if (!cover[x])
			bad = g[x] != w[x];
		else if (cover[x] & (cover[x] - 1)) {
			bool ok = g[x] == w[x];

			for (i = 0; i < k->n_cand && !ok; i++)
				if (cover[x] & (1u << i))
					ok = g[x] == k->cand_buf[i][bo + x - k->cand[i].off];
			bad = !ok;
		}
	}
	if (bad) {
		pc_report(k, bo, "not the last acknowledged content (outside the ops in flight)");
		return;
	}
	for (i = 0; i < k->n_cand; i++) {
		const struct pc_op *op = &k->cand[i];
		bool is_old = true, is_new = true;

		if (!(touch & (1u << i)))
			continue;
		for (uint32_t x = 0; x < PC_BLK; x++) {
			if (cover[x] != (1u << i))
				continue;
			is_old = is_old && g[x] == w[x];
			is_new = is_new && g[x] == k->cand_buf[i][bo + x - op->off];
		}
		if (!is_old && !is_new) {
			char why[160];

			snprintf(why, sizeof(why),
				 "piece of op %" PRIu64 " %c off=%" PRIu64 " len=%" PRIu64
				 " (in flight at the cut) is neither old nor new",
				 op->seq, op->kind, op->off, op->len);
			pc_report(k, bo, why);
			return;
		}
		if (is_new && !is_old) {
			k->pieces_new++;
		} else if (is_old && !is_new) {
			k->pieces_old++;
			k->old_block[b] = 1;
		}
	}
}

/* A block that an op that failed NOSPC touches: every replica applied each
 * op in sequence order (overlapping ops never run together), the
 * acknowledged ones always, a failed one or one in flight at the cut maybe
 * (each 4 KiB piece whole or not at all). So the block must read as the
 * base with the acknowledged ops and some subset of the others applied in
 * order: the set of those contents is built op by op, dropping each one
 * whose bytes no later op touches differ from what was read. */
#ifndef PC_MAX_STATES
#define PC_MAX_STATES 1024
#endif

struct pc_states {
	uint8_t (*st)[PC_BLK];
	uint32_t n;
	int16_t last[PC_BLK]; /* per byte: the last op (index in the list) covering it */
	uint8_t bytes[PC_BLK];
};

/* Drops the contents whose bytes that op j covers last differ from got. */
static void pc_states_prune(struct pc_states *ps, const uint8_t *g, int j)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < ps->n; i++) {
		bool ok = true;

		for (uint32_t x = 0; x < PC_BLK && ok; x++)
			ok = ps->last[x] != j || ps->st[i][x] == g[x];
		if (ok && keep != i)
			memcpy(ps->st[keep], ps->st[i], PC_BLK);
		keep += ok;
	}
	ps->n = keep;
}

static bool pc_states_has(const struct pc_states *ps, uint32_t n, const uint8_t *p)
{
	for (uint32_t i = 0; i < n; i++)
		if (!memcmp(ps->st[i], p, PC_BLK))
			return true;
	return false;
}

/* An acknowledged op may make two contents alike: keep one. */
static void pc_states_dedup(struct pc_states *ps)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < ps->n; i++) {
		if (pc_states_has(ps, keep, ps->st[i]))
			continue;
		if (keep != i)
			memcpy(ps->st[keep], ps->st[i], PC_BLK);
		keep++;
	}
	ps->n = keep;
}

/* Too many possible contents of block b (many failed ops overlap there,
 * more than PC_MAX_STATES): a check per byte instead, without the "whole
 * piece" rule: each byte must hold the value the last acknowledged op covering it (or
 * the base) left, or that of a later failed or in-flight op covering it. */
static void pc_check_bytes(struct pc_check *k, const uint64_t *list, uint32_t nl, uint64_t b)
{
	uint64_t bo = b * PC_BLK, be = bo + PC_BLK;
	static int16_t last_sure[PC_BLK];
	static uint8_t ok[PC_BLK], bytes[PC_BLK];
	const uint8_t *g = k->got + bo;

	k->lenient++;
	for (uint32_t x = 0; x < PC_BLK; x++) {
		last_sure[x] = -1;
		ok[x] = g[x] == k->want[bo + x]; /* the last acknowledged value (or the base's) */
	}
	for (uint32_t j = 0; j < nl; j++) {
		const struct pc_op *op = &k->ops[list[j]];

		if (list[j] < k->end && k->acked[list[j]])
			for (uint64_t x = ZL_MAX(op->off, bo); x < ZL_MIN(op->off + op->len, be);
			     x++)
				last_sure[x - bo] = (int16_t)j;
	}
	for (uint32_t j = 0; j < nl; j++) {
		const struct pc_op *op = &k->ops[list[j]];
		uint64_t lo = ZL_MAX(op->off, bo), hi = ZL_MIN(op->off + op->len, be);

		if (list[j] < k->end && k->acked[list[j]])
			continue;
		pc_op_bytes(k->a->seed, op, lo - op->off, hi - lo, bytes);
		for (uint64_t x = lo; x < hi; x++)
			ok[x - bo] |= (int)j > last_sure[x - bo] && g[x - bo] == bytes[x - lo];
	}
	for (uint32_t x = 0; x < PC_BLK; x++)
		if (!ok[x]) {
			pc_report(k, bo + x,
				  "neither the acknowledged content nor that of a later op that "
				  "failed NOSPC or was in flight");
			return;
		}
}

static void pc_check_block_nospc(struct pc_check *k, struct pc_states *ps, uint64_t b)
{
	uint64_t bo = b * PC_BLK, be = bo + PC_BLK, nops = k->end + k->a->qd;
	const uint8_t *g = k->got + bo;
	uint64_t list[1024];
	uint32_t nl = 0;

	k->blocks++;
	k->fail_blocks++;
	for (uint64_t s = 0; s < nops; s++) {
		const struct pc_op *op = &k->ops[s];

		if (op->off >= be || op->off + op->len <= bo)
			continue;
		if (nl == ZL_ARRAY_SIZE(list)) {
			pc_report(k, bo, "more than 1024 ops touch the block (raise the limit)");
			return;
		}
		list[nl++] = s;
	}
	for (uint32_t x = 0; x < PC_BLK; x++)
		ps->last[x] = -1;
	for (uint32_t j = 0; j < nl; j++) {
		const struct pc_op *op = &k->ops[list[j]];

		for (uint64_t x = ZL_MAX(op->off, bo); x < ZL_MIN(op->off + op->len, be); x++)
			ps->last[x - bo] = (int16_t)j;
	}
	memcpy(ps->st[0], k->base + bo, PC_BLK);
	ps->n = 1;
	pc_states_prune(ps, g, -1);
	for (uint32_t j = 0; j < nl && ps->n; j++) {
		const struct pc_op *op = &k->ops[list[j]];
		uint64_t s = list[j], lo = ZL_MAX(op->off, bo), hi = ZL_MIN(op->off + op->len, be);
		bool sure = s < k->end && k->acked[s];
		uint32_t n0 = ps->n;

		pc_op_bytes(k->a->seed, op, lo - op->off, hi - lo, ps->bytes);
		if (k->failed[s]) {
			/* the figure: the bytes it left (none later) read new or old */
			bool is_new = true, is_old = true, any = false;

			for (uint64_t x = lo; x < hi; x++) {
				if (ps->last[x - bo] != (int16_t)j)
					continue;
				any = true;
				is_new = is_new && g[x - bo] == ps->bytes[x - lo];
				is_old = is_old && g[x - bo] == k->want[x];
			}
			k->fail_new += any && is_new && !is_old;
			k->fail_old += any && is_old && !is_new;
		}
		for (uint32_t i = 0; i < n0; i++) {
			uint8_t *d = ps->st[i];

			if (!sure) {
				if (ps->n == PC_MAX_STATES) {
					pc_check_bytes(k, list, nl, b);
					return;
				}
				d = ps->st[ps->n];
				memcpy(d, ps->st[i], PC_BLK);
			}
			memcpy(d + (lo - bo), ps->bytes, hi - lo);
			if (!sure && !pc_states_has(ps, ps->n, d))
				ps->n++;
		}
		if (sure)
			pc_states_dedup(ps);
		pc_states_prune(ps, g, (int)j);
		k->states_max = ZL_MAX(k->states_max, ps->n);
	}
	if (!ps->n)
		pc_report(k, bo,
			  "not the acknowledged content with some of the ops that failed NOSPC "
			  "or were in flight at the cut");
}

static int pc_out_write(struct pc_check *k)
{
	int fd = open(k->a->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ssize_t n;

	if (fd < 0) {
		fprintf(stderr, "powercut_io: open %s: %s\n", k->a->out, strerror(errno));
		return -1;
	}
	n = pwrite(fd, k->got, k->size, 0);
	if (n != (ssize_t)k->size || fsync(fd)) {
		fprintf(stderr, "powercut_io: write %s: %s\n", k->a->out,
			n < 0 ? strerror(errno) : "short write");
		close(fd);
		return -1;
	}
	return close(fd);
}

/* --taint FILE: runs of blocks where an op in flight at the cut read old
 * (their metadata may name the data that never landed), as --first input. */
static int pc_taint_write(struct pc_check *k)
{
	FILE *f = fopen(k->a->taint, "w");
	uint64_t nb = k->size / PC_BLK, b = 0, runs = 0;

	if (!f) {
		fprintf(stderr, "powercut_io: open %s: %s\n", k->a->taint, strerror(errno));
		return -1;
	}
	while (b < nb && runs < k->a->qd) {
		uint64_t e = b;

		if (!k->old_block[b]) {
			b++;
			continue;
		}
		while (e < nb && k->old_block[e] && (e - b + 1) * PC_BLK <= PC_MAX_WR)
			e++;
		fprintf(f, "%" PRIu64 " %" PRIu64 "\n", b * PC_BLK, (e - b) * PC_BLK);
		runs++;
		b = e + 1; /* keep runs disjoint and apart */
	}
	if (fclose(f)) {
		fprintf(stderr, "powercut_io: write %s: %s\n", k->a->taint, strerror(errno));
		return -1;
	}
	return 0;
}

static int pc_check(const struct pc_args *a)
{
	struct pc_check k = {.a = a};
	static struct pc_states ps;
	struct pc_conn c = {0};
	uint64_t t0 = zl_now_ms(), max_seq = 100000000;
	int rc = 2;

	if (pc_connect(a, &c))
		goto out;
	k.size = c.size;
	k.want = calloc(1, k.size);
	k.got = calloc(1, k.size);
	k.acked = calloc(1, max_seq);
	k.old_block = calloc(1, k.size / PC_BLK);
	k.failed = calloc(1, max_seq);
	if (!k.want || !k.got || !k.acked || !k.old_block || !k.failed) {
		fprintf(stderr, "powercut_io: out of memory\n");
		goto out;
	}
	rc = 1;
	if (pc_log_read(&k, max_seq) || pc_base_read(&k) || pc_expect(&k))
		goto out;
	if (k.n_logged < a->min_acked) {
		fprintf(stderr,
			"powercut_io: %s records %" PRIu64 " acknowledged ops, want %" PRIu64 "\n",
			a->log, k.n_logged, a->min_acked);
		goto out;
	}
	pc_read_all(&k, &c);
	if (k.n_failed) {
		ps.st = malloc((size_t)PC_MAX_STATES * PC_BLK);
		if (!ps.st) {
			fprintf(stderr, "powercut_io: out of memory\n");
			goto out;
		}
	}
	for (uint64_t b = 0; b < k.size / PC_BLK; b++) {
		if (k.fail_block && k.fail_block[b])
			pc_check_block_nospc(&k, &ps, b);
		else
			pc_check_block(&k, b);
	}
	if (pc_out_write(&k) || (a->taint && pc_taint_write(&k)))
		goto out;
	printf("powercut_io: check: %" PRIu64 " acknowledged ops (highest %" PRIu64 "), %u "
	       "possibly in flight at the cut; %" PRIu64 " blocks checked in %.1f s: %" PRIu64
	       " wrong, %" PRIu64 " read errors (%" PRIu64 " ZL_ERR_CORRUPT); in-flight pieces: "
	       "%" PRIu64 " new, %" PRIu64 " old\n",
	       k.n_logged, k.end - 1, k.n_cand, k.blocks, (double)(zl_now_ms() - t0) / 1000.0,
	       k.wrong, k.read_errs, k.corrupt, k.pieces_new, k.pieces_old);
	if (k.n_failed)
		printf("powercut_io: check: NOSPC: %" PRIu64 " ops failed NOSPC, %" PRIu64
		       " blocks they touch checked: of their pieces %" PRIu64 " read new, %" PRIu64
		       " old; at most %" PRIu64 " possible contents of a block (%" PRIu64
		       " blocks with more checked byte by byte)\n",
		       k.n_failed, k.fail_blocks, k.fail_new, k.fail_old, k.states_max, k.lenient);
	fflush(stdout);
	rc = (k.wrong || k.read_errs) ? 1 : 0;
out:
	free(ps.st);
	free(k.failed);
	free(k.fail_block);
	free(k.base);
	free(k.ops);
	for (uint32_t i = 0; i < k.n_cand; i++)
		free(k.cand_buf[i]);
	free(k.want);
	free(k.got);
	free(k.acked);
	free(k.old_block);
	pc_disconnect(&c);
	return rc;
}

/* -------------------------------------------------------------- scan ---- */

/* The chunk files themselves, read without the daemon (format v2 as
 * storage/storage_chunk.h describes it): per block, does its data match the
 * current metadata slot's crc, its prev_crc (the last write's data never
 * landed), or is it zeros with a zero entry; anything else is corruption. */
#define PC_TAINT_RUNS 8 /* the default QD: the next round's --first */

struct pc_scan {
	uint64_t files, blocks, match_crc, match_prev, zero, bad;
	uint64_t run_off[PC_TAINT_RUNS], run_len[PC_TAINT_RUNS];
	uint32_t runs;
};

/* Block at volume offset off matches prev_crc: into the runs for --taint. */
static void pc_scan_taint(struct pc_scan *st, uint64_t off)
{
	uint32_t r = st->runs;

	if (r && st->run_off[r - 1] + st->run_len[r - 1] == off && st->run_len[r - 1] < PC_MAX_WR) {
		st->run_len[r - 1] += PC_BLK;
	} else if (r < PC_TAINT_RUNS) {
		st->run_off[r] = off;
		st->run_len[r] = PC_BLK;
		st->runs++;
	}
}

/* O_DIRECT reads (what the disk holds, not the page cache) into aligned
 * pages: header, slot A, slot B, data block. */
static uint8_t pc_sbuf[4][PC_BLK] __attribute__((aligned(PC_BLK)));

static bool pc_slot_ok(const uint8_t *p, uint32_t pg, uint32_t n)
{
	uint32_t crc = zl_crc32c_update(zl_crc32c(p, 28), p + 32, PC_BLK - 32);

	return !memcmp(p, "ZLMP", 4) && zl_get_le32(p + 4) == pg && zl_get_le32(p + 24) == n &&
	       zl_get_le32(p + 28) == crc;
}

static bool pc_zero(const uint8_t *p)
{
	for (uint32_t i = 0; i < PC_BLK; i++)
		if (p[i])
			return false;
	return true;
}

static int pc_scan_file(const char *path, struct pc_scan *st)
{
	uint8_t *hdr = pc_sbuf[0], *a = pc_sbuf[1], *b = pc_sbuf[2], *blk = pc_sbuf[3];
	int fd = open(path, O_RDONLY | O_DIRECT);
	uint32_t cs, pages, per;
	uint64_t doff, chunk;

	if (fd < 0 && errno == EINVAL)
		fd = open(path, O_RDONLY);
	memset(hdr, 0, PC_BLK);
	if (fd < 0 || pread(fd, hdr, PC_BLK, 0) < 64 || memcmp(hdr, "ZLCHUNK2", 8) ||
	    zl_get_le32(hdr + 60) != zl_crc32c(hdr, 60)) {
		fprintf(stderr, "powercut_io: scan: %s: no valid format v2 header\n", path);
		if (fd >= 0)
			close(fd);
		st->bad++;
		return 0;
	}
	chunk = zl_get_le64(hdr + 16);
	cs = zl_get_le32(hdr + 24);
	pages = zl_get_le32(hdr + 28);
	per = zl_get_le32(hdr + 32);
	doff = zl_get_le64(hdr + 40);
	st->files++;
	for (uint32_t pg = 0; pg < pages; pg++) {
		uint32_t n = ZL_MIN(per, cs / PC_BLK - pg * per);
		bool va, vb;
		const uint8_t *cur = NULL;

		memset(a, 0, PC_BLK);
		memset(b, 0, PC_BLK);
		if (pread(fd, a, PC_BLK, (off_t)PC_BLK * (1 + 2 * pg)) < 0 ||
		    pread(fd, b, PC_BLK, (off_t)PC_BLK * (2 + 2 * pg)) < 0)
			goto io_err;
		va = pc_slot_ok(a, pg, n);
		vb = pc_slot_ok(b, pg, n);
		if (va && (!vb || zl_get_le64(a + 8) >= zl_get_le64(b + 8)))
			cur = a;
		else if (vb)
			cur = b;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t blkno = (uint64_t)pg * per + i;
			uint32_t crc = cur ? zl_get_le32(cur + 32 + 8 * i) : 0;
			uint32_t prev = cur ? zl_get_le32(cur + 32 + 8 * i + 4) : 0;
			uint32_t got;

			memset(blk, 0, PC_BLK);
			if (pread(fd, blk, PC_BLK, (off_t)(doff + blkno * PC_BLK)) < 0)
				goto io_err;
			st->blocks++;
			got = zl_crc32c(blk, PC_BLK);
			if ((crc == 0 || prev == 0) && pc_zero(blk)) {
				st->zero++;
			} else if (got == crc) {
				st->match_crc++;
			} else if (got == prev) {
				st->match_prev++;
				pc_scan_taint(st, chunk * cs + blkno * PC_BLK);
			} else {
				if (st->bad++ < 10)
					fprintf(stderr,
						"powercut_io: scan: %s block %" PRIu64
						": crc %08x matches neither %08x nor prev %08x\n",
						path, blkno, got, crc, prev);
			}
		}
	}
	close(fd);
	return 0;
io_err:
	fprintf(stderr, "powercut_io: scan: read %s: %s\n", path, strerror(errno));
	close(fd);
	return -1;
}

static int pc_scan(const char *data_dir, const char *taint)
{
	struct pc_scan st = {0};
	char path[4096];
	struct dirent *v, *f;
	DIR *d, *vd;

	snprintf(path, sizeof(path), "%s/chunks", data_dir);
	d = opendir(path);
	if (!d) {
		fprintf(stderr, "powercut_io: scan: open %s: %s\n", path, strerror(errno));
		return 1;
	}
	while ((v = readdir(d))) {
		if (strncmp(v->d_name, "vol-", 4))
			continue;
		snprintf(path, sizeof(path), "%s/chunks/%s", data_dir, v->d_name);
		vd = opendir(path);
		if (!vd)
			continue;
		while ((f = readdir(vd))) {
			size_t l = strlen(f->d_name);

			if (l < 4 || strcmp(f->d_name + l - 4, ".zlc"))
				continue;
			snprintf(path, sizeof(path), "%s/chunks/%s/%s", data_dir, v->d_name,
				 f->d_name);
			if (pc_scan_file(path, &st)) {
				closedir(vd);
				closedir(d);
				return 1;
			}
		}
		closedir(vd);
	}
	closedir(d);
	printf("powercut_io: scan: %" PRIu64 " chunk files, %" PRIu64 " blocks: %" PRIu64
	       " match crc, %" PRIu64 " match prev_crc (last write did not land), %" PRIu64
	       " zero, %" PRIu64 " match neither\n",
	       st.files, st.blocks, st.match_crc, st.match_prev, st.zero, st.bad);
	fflush(stdout);
	if (taint) {
		FILE *t = fopen(taint, "w");

		for (uint32_t r = 0; t && r < st.runs; r++)
			fprintf(t, "%" PRIu64 " %" PRIu64 "\n", st.run_off[r], st.run_len[r]);
		if (!t || fclose(t)) {
			fprintf(stderr, "powercut_io: scan: write %s: %s\n", taint,
				strerror(errno));
			return 1;
		}
	}
	return st.bad || !st.files ? 1 : 0;
}

/* -------------------------------------------------------------- main ---- */

static void pc_usage(void)
{
	fprintf(stderr,
		"usage: powercut_io write --etcd URL --volume NAME --seed N --log FILE\n"
		"                         --ready FILE --ready-after N [--qd N] [--max-ops N]\n"
		"                         [--first FILE] [--before CMD] [--nospc N]\n"
		"       powercut_io check --etcd URL --volume NAME --seed N --log FILE\n"
		"                         [--base FILE] --out FILE [--qd N] [--first FILE]\n"
		"                         [--taint FILE] [--min-acked N]\n"
		"       powercut_io scan --data-dir DIR [--taint FILE]\n");
	exit(2);
}

static uint64_t pc_u64(const char *s)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		pc_usage();
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"etcd", required_argument, NULL, 'e'},
	    {"volume", required_argument, NULL, 'v'},
	    {"seed", required_argument, NULL, 's'},
	    {"log", required_argument, NULL, 'l'},
	    {"ready", required_argument, NULL, 'r'},
	    {"ready-after", required_argument, NULL, 'n'},
	    {"qd", required_argument, NULL, 'q'},
	    {"max-ops", required_argument, NULL, 'm'},
	    {"base", required_argument, NULL, 'b'},
	    {"out", required_argument, NULL, 'o'},
	    {"first", required_argument, NULL, 'f'},
	    {"taint", required_argument, NULL, 't'},
	    {"min-acked", required_argument, NULL, 'a'},
	    {"before", required_argument, NULL, 'B'},
	    {"nospc", required_argument, NULL, 'N'},
	    {NULL, 0, NULL, 0},
	};
	struct pc_args a = {.qd = 8, .max_ops = 1000000, .seed = 1, .min_acked = 1};
	bool seed_set = false;
	const char *mode;
	int c;

	if (argc < 2)
		pc_usage();
	mode = argv[1];
	if (!strcmp(mode, "scan")) {
		if ((argc != 4 && argc != 6) || strcmp(argv[2], "--data-dir") ||
		    (argc == 6 && strcmp(argv[4], "--taint")))
			pc_usage();
		return pc_scan(argv[3], argc == 6 ? argv[5] : NULL);
	}
	optind = 2;
	zl_log_init("powercut_io");
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			a.etcd = optarg;
			break;
		case 'v':
			a.volume = optarg;
			break;
		case 's':
			a.seed = pc_u64(optarg);
			seed_set = true;
			break;
		case 'l':
			a.log = optarg;
			break;
		case 'r':
			a.ready = optarg;
			break;
		case 'n':
			a.ready_after = pc_u64(optarg);
			break;
		case 'q':
			a.qd = (uint32_t)pc_u64(optarg);
			break;
		case 'm':
			a.max_ops = pc_u64(optarg);
			break;
		case 'b':
			a.base = optarg;
			break;
		case 'o':
			a.out = optarg;
			break;
		case 'f':
			a.first = optarg;
			break;
		case 't':
			a.taint = optarg;
			break;
		case 'a':
			a.min_acked = pc_u64(optarg);
			break;
		case 'B':
			a.before = optarg;
			break;
		case 'N':
			a.nospc = pc_u64(optarg);
			a.nospc_ok = true;
			break;
		default:
			pc_usage();
		}
	}
	if (!a.etcd || !a.volume || !a.log || !seed_set || a.qd < 1 || a.qd > PC_MAX_QD)
		pc_usage();
	if (!strcmp(mode, "write")) {
		if (!a.ready || (!a.ready_after && !a.first))
			pc_usage();
		return pc_write(&a);
	}
	if (!strcmp(mode, "check")) {
		if (!a.out)
			pc_usage();
		return pc_check(&a);
	}
	pc_usage();
	return 2;
}
