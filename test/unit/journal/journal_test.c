/* Journal format and replay: round trips, torn and damaged records, wrap
 * around the ring, sequence gaps, superblock checks. The "disk" is an
 * in-memory image of the journal file read through a zl_journal_read_fn;
 * one test goes through a real file with zl_journal_format. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/journal/journal.h"

#define BLK	 ZL_JOURNAL_BLOCK
#define NONCE	 0x1122334455667788ull
#define MAX_RECS 512
/* A record stamp of journal `jid` in generation 1 (compound literal). */
#define STAMP(s, jid)                                                                              \
	(&(struct zl_journal_stamp){                                                               \
	    .seq = (s), .nonce = NONCE, .journal_id = (jid), .generation = 1})

/* A journal image plus the records the test wrote into it, by sequence. */
struct img {
	uint8_t *b;
	struct zl_journal_sb sb;
	uint64_t head; /* next append offset */
	uint64_t seq;  /* next sequence */
	struct {
		uint64_t seq, off;
		uint32_t len;
		uint8_t *bytes; /* copy of the encoded record */
	} recs[MAX_RECS];
	unsigned nrecs;
	/* filled by the apply callback */
	uint64_t applied[MAX_RECS];
	unsigned napplied;
	bool damaged_applied; /* a record differing from what was written */
	int fail_at;	      /* apply returns -EIO at this applied index (or -1) */
};

static uint8_t scratch[ZL_JOURNAL_REC_MAX];
static uint8_t recbuf[ZL_JOURNAL_REC_MAX];

static void img_init(struct img *m, uint64_t size, uint8_t fill)
{
	memset(m, 0, sizeof(*m));
	m->b = malloc(size);
	assert_non_null(m->b);
	memset(m->b, fill, size);
	m->sb.size = size;
	m->sb.ring_off = ZL_JOURNAL_RING_OFF;
	m->sb.journal_id = 0;
	m->sb.journal_count = 1;
	m->sb.nonce = NONCE;
	m->sb.sb_seq = 1;
	m->sb.ckpt_seq = 1;
	m->sb.ckpt_off = ZL_JOURNAL_RING_OFF;
	m->sb.generation = 1;
	m->head = ZL_JOURNAL_RING_OFF;
	m->seq = 1;
	m->fail_at = -1;
	assert_int_equal(zl_journal_sb_encode(&m->sb, m->b), 0);
}

static void img_fini(struct img *m)
{
	for (unsigned i = 0; i < m->nrecs; i++)
		free(m->recs[i].bytes);
	free(m->b);
}

static int mem_read(void *arg, void *buf, size_t len, uint64_t off)
{
	struct img *m = arg;

	if (off > m->sb.size || len > m->sb.size - off)
		return -ZL_ERR_IO;
	memcpy(buf, m->b + off, len);
	return 0;
}

static int rec_apply(void *arg, const struct zl_journal_rec *rec)
{
	struct img *m = arg;
	bool found = false;

	if (m->fail_at >= 0 && m->napplied == (unsigned)m->fail_at)
		return -EIO;
	for (unsigned i = 0; i < m->nrecs; i++) {
		if (m->recs[i].seq != rec->seq)
			continue;
		/* The latest record written with this sequence. */
		found = m->recs[i].len == rec->total_len &&
			!memcmp(m->recs[i].bytes, rec->buf, rec->total_len);
	}
	if (!found)
		m->damaged_applied = true;
	assert_true(m->napplied < MAX_RECS);
	m->applied[m->napplied++] = rec->seq;
	return 0;
}

/* Writes an encoded record at the head (it must fit before the ring's end)
 * and remembers it; returns its offset. */
static uint64_t img_append(struct img *m, const uint8_t *rec, uint32_t len)
{
	uint64_t off = m->head;

	assert_true(off + len <= m->sb.size);
	memcpy(m->b + off, rec, len);
	assert_true(m->nrecs < MAX_RECS);
	m->recs[m->nrecs].seq = zl_get_le64(rec + 8);
	m->recs[m->nrecs].off = off;
	m->recs[m->nrecs].len = len;
	m->recs[m->nrecs].bytes = malloc(len);
	assert_non_null(m->recs[m->nrecs].bytes);
	memcpy(m->recs[m->nrecs].bytes, rec, len);
	m->nrecs++;
	m->head = off + len == m->sb.size ? m->sb.ring_off : off + len;
	return off;
}

static uint8_t data_pool[1 << 20];
static uint32_t crc_pool[1024];

/* Fills n entries; entry i is inline when inline_mask has bit i % 32 set. */
static void make_entries(struct zl_journal_entry *e, uint32_t n, uint32_t inline_mask,
			 uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = 512u * (1 + (seed + i * 7) % 24); /* 512 B .. 12 KiB */

		memset(&e[i], 0, sizeof(e[i]));
		e[i].vol = 0x1000 + seed + i;
		e[i].chunk = (seed * 31 + i) % 17;
		e[i].version = 1000 + seed * 100 + i;
		e[i].claim_gap = (seed + i) % 3 ? 0 : 1 + i;
		e[i].offset = 512u * ((seed + i * 13) % 64);
		e[i].length = len;
		if (inline_mask & (1u << (i % 32))) {
			e[i].flags = ZL_JOURNAL_ENT_INLINE;
			e[i].data = data_pool + (seed * 4096 + i * 1024) % (sizeof(data_pool) / 2);
		} else {
			e[i].flags = (i & 1) ? ZL_JOURNAL_ENT_ZERO : ZL_JOURNAL_ENT_INPLACE;
		}
		e[i].crcs = crc_pool + (seed + i) % 512;
	}
}

/* The stamp of a record with sequence seq in the image's journal. */
static const struct zl_journal_stamp *img_stamp(const struct img *m, uint64_t seq)
{
	static struct zl_journal_stamp st;

	st.seq = seq;
	st.nonce = m->sb.nonce;
	st.journal_id = m->sb.journal_id;
	st.generation = (uint32_t)m->sb.generation;
	return &st;
}

/* Encodes a BATCH of n entries with sequence seq into recbuf; returns its
 * length. */
static uint32_t img_rec(struct img *m, uint64_t seq, uint32_t n, uint32_t inline_mask,
			uint32_t seed)
{
	struct zl_journal_entry e[64];
	int len;

	assert_true(n <= 64);
	make_entries(e, n, inline_mask, seed);
	len = zl_journal_rec_encode(recbuf, sizeof(recbuf), img_stamp(m, seq), e, n);
	assert_true(len > 0);
	assert_int_equal(len % BLK, 0);
	return (uint32_t)len;
}

/* The writer: encodes the next record, puts a PAD (taking a sequence
 * number) at the head when it does not fit before the ring's end, appends.
 * Returns the record's offset; *lenp its length (recbuf holds it). */
static uint64_t img_push(struct img *m, uint32_t n, uint32_t inline_mask, uint32_t seed,
			 uint32_t *lenp)
{
	uint32_t pad, len = img_rec(m, m->seq, n, inline_mask, seed);
	uint8_t p[BLK];
	uint64_t off;

	zl_journal_ring_place(&m->sb, m->head, len, &pad);
	if (pad) {
		assert_int_equal(zl_journal_pad_encode(p, img_stamp(m, m->seq++), pad), 0);
		memcpy(m->b + m->head, p, BLK);
		m->head = m->sb.ring_off;
		len = img_rec(m, m->seq, n, inline_mask, seed);
	}
	m->seq++;
	off = img_append(m, recbuf, len);
	if (lenp)
		*lenp = len;
	return off;
}

static int img_replay(struct img *m, struct zl_journal_replay_stats *st)
{
	m->napplied = 0;
	m->damaged_applied = false;
	return zl_journal_replay(&m->sb, mem_read, m, rec_apply, m, scratch, sizeof(scratch), st);
}

/* Replays the image and checks: no error, `records` records applied, never
 * a damaged one, and (when stop >= 0) the stop reason. */
static void replay_expect(struct img *m, struct zl_journal_replay_stats *st, uint64_t records,
			  int stop)
{
	assert_int_equal(img_replay(m, st), 0);
	assert_false(m->damaged_applied);
	assert_int_equal(st->records, records);
	if (stop >= 0)
		assert_int_equal(st->stop, stop);
}

static int group_setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(data_pool); i++)
		data_pool[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(crc_pool); i++)
		crc_pool[i] = (uint32_t)(i * 0x9e3779b9u) ^ 0xdeadbeefu;
	return 0;
}

static void test_sb_roundtrip_and_damage(void **state)
{
	struct zl_journal_sb sb = {
	    .size = 1ull << 30,
	    .ring_off = ZL_JOURNAL_RING_OFF,
	    .journal_id = 2,
	    .journal_count = 4,
	    .nonce = NONCE,
	    .sb_seq = 7,
	    .ckpt_seq = 99,
	    .ckpt_off = ZL_JOURNAL_RING_OFF + 5 * BLK,
	    .generation = 0x1234567890ull,
	};
	struct zl_journal_sb got;
	uint8_t a[ZL_JOURNAL_SB_SIZE], b[ZL_JOURNAL_SB_SIZE];
	const char *why = NULL;
	unsigned slot = 9;

	(void)state;
	assert_int_equal(zl_journal_sb_encode(&sb, a), 0);
	assert_int_equal(zl_journal_sb_decode(a, sizeof(a), &got, &why), 0);
	assert_memory_equal(&got, &sb, sizeof(sb));
	assert_int_equal(zl_journal_sb_decode(a, sizeof(a) - 1, &got, &why), -ZL_ERR_CORRUPT);

	/* Every byte of the slot is covered: magic or CRC catches a flip. */
	for (size_t i = 0; i < sizeof(a); i++) {
		memcpy(b, a, sizeof(a));
		b[i] ^= 0x20;
		why = NULL;
		assert_int_equal(zl_journal_sb_decode(b, sizeof(b), &got, &why), -ZL_ERR_CORRUPT);
		assert_non_null(why);
		if (i >= 8)
			assert_string_equal(why, "journal superblock CRC mismatch");
	}

	/* Out-of-bounds fields are refused by encode. */
	got = sb;
	got.journal_id = 4;
	assert_int_equal(zl_journal_sb_encode(&got, b), -ZL_ERR_INVAL);
	got = sb;
	got.ckpt_off = sb.size;
	assert_int_equal(zl_journal_sb_encode(&got, b), -ZL_ERR_INVAL);
	got = sb;
	got.ckpt_off += 512;
	assert_int_equal(zl_journal_sb_encode(&got, b), -ZL_ERR_INVAL);
	got = sb;
	got.size = ZL_JOURNAL_MIN_SIZE - BLK;
	assert_int_equal(zl_journal_sb_encode(&got, b), -ZL_ERR_INVAL);
	got = sb;
	got.nonce = 0;
	assert_int_equal(zl_journal_sb_encode(&got, b), -ZL_ERR_INVAL);

	/* A newer format version with a right CRC says so. */
	memcpy(b, a, sizeof(a));
	zl_put_le32(b + 8, 2);
	zl_put_le32(b + ZL_JOURNAL_SB_SIZE - 4, zl_crc32c(b, ZL_JOURNAL_SB_SIZE - 4));
	assert_int_equal(zl_journal_sb_decode(b, sizeof(b), &got, &why), -ZL_ERR_VERSION);

	/* Pick: the higher sb_seq of the valid slots; a damaged slot loses. */
	got = sb;
	got.sb_seq = 8;
	got.ckpt_seq = 120;
	assert_int_equal(zl_journal_sb_encode(&got, b), 0);
	assert_int_equal(zl_journal_sb_pick(a, b, &got, &slot, &why), 0);
	assert_int_equal(slot, 1);
	assert_true(got.ckpt_seq == 120);
	assert_int_equal(zl_journal_sb_pick(b, a, &got, &slot, &why), 0);
	assert_int_equal(slot, 0);
	assert_true(got.ckpt_seq == 120);
	b[100] ^= 1; /* torn write of slot B */
	assert_int_equal(zl_journal_sb_pick(a, b, &got, &slot, &why), 0);
	assert_int_equal(slot, 0);
	assert_true(got.ckpt_seq == 99);
	/* Both bad: refused with the reason. */
	a[200] ^= 1;
	why = NULL;
	assert_int_equal(zl_journal_sb_pick(a, b, &got, &slot, &why), -ZL_ERR_CORRUPT);
	assert_string_equal(why, "journal superblock CRC mismatch");
	/* Two valid slots of different journals: refused. */
	a[200] ^= 1;
	got = sb;
	got.nonce = NONCE + 1;
	assert_int_equal(zl_journal_sb_encode(&got, b), 0);
	assert_int_equal(zl_journal_sb_pick(a, b, &got, &slot, &why), -ZL_ERR_CORRUPT);
	assert_non_null(strstr(why, "different journals"));
}

static void check_entries_equal(const struct zl_journal_rec *rec, const struct zl_journal_entry *e,
				uint32_t n)
{
	struct zl_journal_entry d;
	size_t cur = 0;
	uint32_t i = 0;

	while (zl_journal_rec_next(rec, &cur, &d)) {
		assert_true(i < n);
		assert_true(d.vol == e[i].vol);
		assert_true(d.chunk == e[i].chunk);
		assert_true(d.version == e[i].version);
		assert_int_equal(d.claim_gap, e[i].claim_gap);
		assert_int_equal(d.offset, e[i].offset);
		assert_int_equal(d.length, e[i].length);
		assert_int_equal(d.flags, e[i].flags);
		for (uint32_t k = 0; k < zl_journal_entry_blocks(d.offset, d.length); k++)
			assert_int_equal(zl_journal_entry_crc(&d, k), e[i].crcs[k]);
		if (e[i].flags & ZL_JOURNAL_ENT_INLINE) {
			assert_non_null(d.data);
			assert_memory_equal(d.data, e[i].data, d.length);
		} else {
			assert_null(d.data);
		}
		i++;
	}
	assert_int_equal(i, n);
}

static void test_rec_roundtrip(void **state)
{
	struct zl_journal_entry e[64];
	struct zl_journal_expect exp = {
	    .nonce = NONCE, .journal_id = 3, .space = ZL_JOURNAL_REC_MAX};
	struct zl_journal_rec rec;
	const char *why;
	size_t need;

	(void)state;
	for (uint32_t n = 1; n <= 40; n++) {
		for (uint32_t mask = 0; mask < 3; mask++) {
			uint32_t inl = mask == 0 ? 0 : mask == 1 ? 0xffffffffu : 0x55555555u;
			int len;

			make_entries(e, n, inl, n * 3 + mask);
			len = zl_journal_rec_encode(recbuf, sizeof(recbuf), STAMP(40 + n, 3), e, n);
			assert_true(len > 0);
			assert_int_equal(len % BLK, 0);
			exp.seq = 40 + n;
			why = NULL;
			assert_int_equal(
			    zl_journal_rec_decode(recbuf, (size_t)len, &exp, &rec, &need, &why), 0);
			assert_null(why);
			assert_int_equal(rec.type, ZL_JOURNAL_REC_BATCH);
			assert_true(rec.seq == 40 + n);
			assert_int_equal(rec.nentries, n);
			assert_int_equal(rec.total_len, (uint32_t)len);
			check_entries_equal(&rec, e, n);
			/* A short buffer asks for the rest. */
			assert_int_equal(
			    zl_journal_rec_decode(recbuf, BLK - 1, &exp, &rec, &need, &why),
			    len > (int)(BLK - 1) ? -ZL_ERR_RANGE : 0);
			if (len > (int)(BLK - 1))
				assert_int_equal(need, (size_t)len);
		}
	}

	/* The builder gives the same bytes as the one-shot encoder. */
	{
		struct zl_journal_builder b;
		static uint8_t other[64 * BLK];
		int len;

		make_entries(e, 9, 0x0f, 77);
		len = zl_journal_rec_encode(recbuf, sizeof(recbuf), STAMP(5, 0), e, 9);
		assert_true(len > 0);
		zl_journal_builder_init(&b, other, sizeof(other));
		for (uint32_t i = 0; i < 9; i++)
			assert_int_equal(zl_journal_builder_add(&b, &e[i]), 0);
		assert_int_equal(zl_journal_builder_len(&b), (size_t)len);
		assert_int_equal(zl_journal_builder_finish(&b, STAMP(5, 0)), len);
		assert_memory_equal(other, recbuf, (size_t)len);
	}
}

static void test_builder_limits(void **state)
{
	struct zl_journal_builder b;
	struct zl_journal_entry e, bad;
	static uint8_t small[2 * BLK];
	static uint32_t crcs[1025];

	(void)state;
	memset(&e, 0, sizeof(e));
	e.vol = 1;
	e.offset = 0;
	e.length = 3000;
	e.flags = ZL_JOURNAL_ENT_INLINE;
	e.data = data_pool;
	e.crcs = crcs;
	zl_journal_builder_init(&b, small, sizeof(small));
	assert_int_equal(zl_journal_builder_finish(&b, STAMP(1, 0)),
			 -ZL_ERR_INVAL); /* no entries */
	assert_int_equal(zl_journal_builder_add(&b, &e), 0);
	assert_int_equal(zl_journal_builder_add(&b, &e), 0);
	/* The third does not fit 8 KiB: refused, the builder unchanged. */
	assert_int_equal(zl_journal_builder_add(&b, &e), -ZL_ERR_NOSPC);
	assert_int_equal(b.nentries, 2);
	assert_int_equal(zl_journal_builder_finish(&b, STAMP(1, 0)), (int)(2 * BLK));

	bad = e;
	bad.length = 0;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.length = ZL_JOURNAL_IO_MAX + 1;
	bad.flags = ZL_JOURNAL_ENT_INPLACE;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.offset = ZL_JOURNAL_CHUNK_MAX - 512;
	bad.length = 1024;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.flags = ZL_JOURNAL_ENT_INLINE | ZL_JOURNAL_ENT_ZERO;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.flags = 8;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.data = NULL;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	bad = e;
	bad.crcs = NULL;
	assert_int_equal(zl_journal_entry_size(&bad), 0);
	zl_journal_builder_init(&b, small, sizeof(small));
	assert_int_equal(zl_journal_builder_add(&b, &bad), -ZL_ERR_INVAL);

	/* Largest in-place entry: 4 MiB spanning 1025 blocks (unaligned). */
	bad = e;
	bad.flags = ZL_JOURNAL_ENT_INPLACE;
	bad.offset = 512;
	bad.length = ZL_JOURNAL_IO_MAX;
	assert_int_equal(zl_journal_entry_blocks(bad.offset, bad.length), 1025);
	assert_int_equal(zl_journal_entry_size(&bad), ZL_JOURNAL_ENTRY_HDR_SIZE + 4 * 1025 + 4);
	/* An inline 4 MiB entry fits one record, two do not. */
	bad.flags = ZL_JOURNAL_ENT_INLINE;
	bad.data = scratch;
	zl_journal_builder_init(&b, recbuf, sizeof(recbuf));
	assert_int_equal(zl_journal_builder_add(&b, &bad), 0);
	assert_int_equal(zl_journal_builder_add(&b, &bad), -ZL_ERR_NOSPC);
}

/* An image with `whole` records, then one more (several blocks, inline
 * data) at `*last_off` of `*last_len` bytes, kept in `last`. */
static void img_build(struct img *m, uint8_t fill, unsigned whole, uint8_t *last,
		      uint64_t *last_off, uint32_t *last_len)
{
	img_init(m, ZL_JOURNAL_RING_OFF + 64 * BLK, fill);
	for (unsigned i = 0; i < whole; i++)
		img_push(m, 1 + i % 3, i & 1 ? 0xffffffffu : 0, i, NULL);
	*last_off = img_push(m, 5, 0x15, 99, last_len);
	assert_true(*last_len >= 3 * BLK);
	memcpy(last, recbuf, *last_len);
}

static void test_replay_basic(void **state)
{
	struct zl_journal_replay_stats st;
	struct img m;
	static uint8_t last[64 * BLK];
	uint64_t off;
	uint32_t len;

	(void)state;
	img_build(&m, 0xa5, 6, last, &off, &len);
	replay_expect(&m, &st, 7, -1);
	for (unsigned i = 0; i < 7; i++)
		assert_true(m.applied[i] == i + 1);
	assert_int_equal(st.stop, ZL_JOURNAL_STOP_END);
	assert_true(st.next_seq == 8);
	assert_true(st.next_off == off + len);
	assert_true(st.bytes == off + len - ZL_JOURNAL_RING_OFF);
	assert_true(st.entries == 1 + 2 + 3 + 1 + 2 + 3 + 5);

	/* From a checkpoint in the middle: the records from there on. */
	m.sb.ckpt_seq = 4;
	m.sb.ckpt_off = m.recs[3].off;
	replay_expect(&m, &st, 4, -1);
	assert_true(m.applied[0] == 4);
	assert_true(st.next_seq == 8);

	/* A checkpoint past the end: nothing to replay, writer continues. */
	m.sb.ckpt_seq = 8;
	m.sb.ckpt_off = off + len;
	replay_expect(&m, &st, 0, -1);
	assert_true(st.next_seq == 8 && st.next_off == off + len);

	/* The apply callback's error stops the scan and is returned. */
	m.sb.ckpt_seq = 1;
	m.sb.ckpt_off = ZL_JOURNAL_RING_OFF;
	m.fail_at = 2;
	assert_int_equal(img_replay(&m, &st), -EIO);
	assert_int_equal(st.stop, ZL_JOURNAL_STOP_CALLBACK);
	assert_int_equal(st.records, 2);
	assert_true(st.next_seq == 3);

	/* Scratch below zl_journal_replay_buf_size: refused. */
	assert_int_equal(zl_journal_replay(&m.sb, mem_read, &m, rec_apply, &m, scratch,
					   zl_journal_replay_buf_size(&m.sb) - 1, &st),
			 -ZL_ERR_INVAL);
	img_fini(&m);
}

/* Writes bytes [from, to) of the last record over the old content (the rest
 * of it stays old), replays, and checks that the last record is applied only
 * when all its bytes are there and that nothing damaged is ever applied. */
static void tear_check(uint8_t fill, unsigned whole, const uint32_t *cuts, unsigned ncuts,
		       bool head_first)
{
	static uint8_t last[64 * BLK], old[64 * BLK];
	struct zl_journal_replay_stats st;
	struct img m;
	uint64_t off;
	uint32_t len;

	img_build(&m, fill, whole, last, &off, &len);
	memset(old, fill, len);
	for (unsigned c = 0; c < ncuts; c++) {
		uint32_t k = cuts[c];
		bool all;

		if (k > len)
			continue;
		if (head_first) {
			memcpy(m.b + off, last, k);
			memcpy(m.b + off + k, old + k, len - k);
		} else { /* the tail landed, the head did not */
			memcpy(m.b + off, old, k);
			memcpy(m.b + off + k, last + k, len - k);
		}
		all = !memcmp(m.b + off, last, len);
		assert_int_equal(img_replay(&m, &st), 0);
		assert_false(m.damaged_applied);
		if (all) {
			assert_int_equal(st.records, whole + 1);
		} else {
			assert_int_equal(st.records, whole);
			assert_true(st.next_seq == whole + 1);
			assert_true(st.next_off == off);
		}
		if (fill != 0 && k != (head_first ? len : 0))
			assert_false(all);
	}
	img_fini(&m);
}

static void test_tear_every_512(void **state)
{
	uint32_t cuts[64 * BLK / 512 + 1];
	unsigned n = 0;

	(void)state;
	for (uint32_t k = 0; k <= 64 * BLK; k += 512)
		cuts[n++] = k;
	/* Old content: garbage, zeros (never written), and both tear shapes. */
	tear_check(0xa5, 6, cuts, n, true);
	tear_check(0xa5, 6, cuts, n, false);
	tear_check(0x00, 6, cuts, n, true);
	tear_check(0x00, 6, cuts, n, false);
	tear_check(0xa5, 0, cuts, n, true); /* the only record torn */
}

static void test_tear_every_field(void **state)
{
	static const uint32_t hdr_fields[] = {0, 4, 6, 8, 16, 24, 28, 32, 36, 40, 44, 48};
	static const uint32_t ent_fields[] = {0, 8, 16, 24, 28, 32, 36, 40};
	uint32_t cuts[4096];
	struct zl_journal_entry e[5];
	unsigned n = 0;
	uint32_t cur = ZL_JOURNAL_REC_HDR_SIZE;

	(void)state;
	for (unsigned i = 0; i < ZL_ARRAY_SIZE(hdr_fields); i++)
		cuts[n++] = hdr_fields[i];
	/* The same entries img_build makes for the last record. */
	make_entries(e, 5, 0x15, 99);
	for (unsigned i = 0; i < 5; i++) {
		uint32_t nb = zl_journal_entry_blocks(e[i].offset, e[i].length);

		for (unsigned f = 0; f < ZL_ARRAY_SIZE(ent_fields); f++)
			cuts[n++] = cur + ent_fields[f];
		for (uint32_t k = 1; k <= nb; k++)
			cuts[n++] = cur + ZL_JOURNAL_ENTRY_HDR_SIZE + 4 * k; /* after each CRC */
		if (e[i].flags & ZL_JOURNAL_ENT_INLINE) {
			uint32_t d = cur + ZL_JOURNAL_ENTRY_HDR_SIZE + 4 * nb;

			cuts[n++] = d + 1;
			cuts[n++] = d + e[i].length / 2;
			cuts[n++] = d + e[i].length - 1;
		}
		cur += (uint32_t)zl_journal_entry_size(&e[i]);
		cuts[n++] = cur; /* after the entry's padding */
	}
	cuts[n++] = cur + 1; /* inside the record's zero padding */
	tear_check(0xa5, 6, cuts, n, true);
	tear_check(0xa5, 6, cuts, n, false);
	tear_check(0x00, 6, cuts, n, true);
	tear_check(0x00, 6, cuts, n, false);
}

/* Flips every byte of every record in turn: decode refuses it; replay
 * (for the header bytes and a stride through the rest) applies exactly the
 * records before it, never the damaged one nor any after it. */
static void test_flip_every_byte(void **state)
{
	static uint8_t last[64 * BLK];
	struct zl_journal_replay_stats st;
	struct zl_journal_expect exp;
	struct zl_journal_rec rec;
	const char *why;
	struct img m;
	uint64_t off;
	uint32_t len;

	(void)state;
	img_build(&m, 0xa5, 6, last, &off, &len);
	exp.nonce = NONCE;
	exp.journal_id = 0;
	exp.min_generation = 1;
	for (unsigned victim = 0; victim < m.nrecs; victim++) {
		uint8_t *v = m.b + m.recs[victim].off;
		uint32_t vlen = m.recs[victim].len;

		exp.seq = m.recs[victim].seq;
		exp.space = m.sb.size - m.recs[victim].off;
		assert_int_equal(zl_journal_rec_decode(v, vlen, &exp, &rec, NULL, &why), 0);
		for (uint32_t i = 0; i < vlen; i++) {
			v[i] ^= 0x5a;
			assert_int_not_equal(zl_journal_rec_decode(v, vlen, &exp, &rec, NULL, &why),
					     0);
			if (i < 2 * ZL_JOURNAL_REC_HDR_SIZE || i % 97 == 0) {
				replay_expect(&m, &st, victim, -1);
				assert_true(st.next_seq == m.recs[victim].seq);
				assert_int_not_equal(st.stop, ZL_JOURNAL_STOP_LAP);
			}
			v[i] ^= 0x5a;
		}
	}
	img_fini(&m);
}

/* Re-CRCs a record after a field was changed, as a writer with a bug (or an
 * attacker knowing the nonce) would produce it. */
static void rec_recrc(uint8_t *p, uint32_t written)
{
	zl_put_le32(p + 44, 0);
	zl_put_le32(p + 44, zl_crc32c(p, written));
}

/* Fields out of bounds behind a right CRC: decode refuses, replay stops. */
static void test_strict_fields(void **state)
{
	static uint8_t last[64 * BLK], bad[64 * BLK];
	struct zl_journal_replay_stats st;
	struct zl_journal_expect exp;
	struct zl_journal_rec rec;
	const char *why;
	struct img m;
	uint64_t off;
	uint32_t len, e0 = ZL_JOURNAL_REC_HDR_SIZE;
	struct {
		uint32_t at, width;
		uint64_t val;
		int rc;
		uint32_t written; /* bytes the CRC covers when not the record's */
	} cases[] = {
	    {4, 2, 3, -ZL_ERR_PROTO, 0},			     /* unknown type */
	    {4, 2, ZL_JOURNAL_REC_PAD, -ZL_ERR_CORRUPT, 0},	     /* pad with used > 4096 */
	    {4, 2, ZL_JOURNAL_REC_PAD, -ZL_ERR_CORRUPT, BLK},	     /* the same, CRC over 4096 */
	    {6, 2, 1, -ZL_ERR_PROTO, 0},			     /* flags */
	    {32, 4, 0, -ZL_ERR_PROTO, 0},			     /* no entries */
	    {32, 4, 4, -ZL_ERR_PROTO, 0},			     /* fewer entries than bytes */
	    {32, 4, 6, -ZL_ERR_PROTO, 0},			     /* more entries than bytes */
	    {32, 4, 0xffffffffu, -ZL_ERR_PROTO, 0},		     /* absurd count */
	    {24, 4, 0, -ZL_ERR_CORRUPT, 0},			     /* total 0 */
	    {24, 4, 100, -ZL_ERR_CORRUPT, 0},			     /* total unaligned */
	    {24, 4, 0xfffff000u, -ZL_ERR_CORRUPT, 0},		     /* total beyond the ring */
	    {28, 4, 8, -ZL_ERR_CORRUPT, 0},			     /* used below the header */
	    {28, 4, 0xfffffff0u, -ZL_ERR_CORRUPT, 0},		     /* used beyond total */
	    {e0 + 32, 4, 0, -ZL_ERR_PROTO, 0},			     /* entry without a kind */
	    {e0 + 32, 4, 3, -ZL_ERR_PROTO, 0},			     /* two kinds */
	    {e0 + 32, 4, 0x101, -ZL_ERR_PROTO, 0},		     /* unknown flag */
	    {e0 + 28, 4, 0, -ZL_ERR_PROTO, 0},			     /* length 0 */
	    {e0 + 28, 4, ZL_JOURNAL_IO_MAX + 512, -ZL_ERR_PROTO, 0}, /* length > 4 MiB */
	    {e0 + 24, 4, ZL_JOURNAL_CHUNK_MAX - 512, -ZL_ERR_PROTO, 0}, /* beyond the chunk */
	    {e0 + 36, 4, 0x7fffffffu, -ZL_ERR_PROTO, 0},		/* claim gap > version */
	};

	(void)state;
	img_build(&m, 0xa5, 2, last, &off, &len);
	exp.nonce = NONCE;
	exp.journal_id = 0;
	exp.min_generation = 1;
	exp.seq = 3;
	exp.space = m.sb.size - off;
	assert_int_equal(zl_journal_rec_decode(last, len, &exp, &rec, NULL, &why), 0);
	for (unsigned c = 0; c < ZL_ARRAY_SIZE(cases); c++) {
		memcpy(bad, last, len);
		if (cases[c].width == 2)
			zl_put_le16(bad + cases[c].at, (uint16_t)cases[c].val);
		else
			zl_put_le32(bad + cases[c].at, (uint32_t)cases[c].val);
		rec_recrc(bad, cases[c].written ? cases[c].written : len);
		why = NULL;
		assert_int_equal(zl_journal_rec_decode(bad, len, &exp, &rec, NULL, &why),
				 cases[c].rc);
		assert_non_null(why);
		memcpy(m.b + off, bad, len);
		replay_expect(&m, &st, 2, -1);
		assert_int_equal(st.stop, cases[c].rc == -ZL_ERR_PROTO ? ZL_JOURNAL_STOP_BAD
								       : ZL_JOURNAL_STOP_TORN);
	}
	/* Non-zero padding inside an entry and after the entries. */
	{
		uint32_t used = zl_get_le32(last + 28);

		memcpy(bad, last, len);
		bad[used] = 1;
		rec_recrc(bad, len);
		assert_int_equal(zl_journal_rec_decode(bad, len, &exp, &rec, NULL, &why),
				 -ZL_ERR_PROTO);
	}
	{
		struct zl_journal_entry e[5];
		uint32_t body;

		make_entries(e, 5, 0x15, 99);
		body = ZL_JOURNAL_ENTRY_HDR_SIZE +
		       4 * zl_journal_entry_blocks(e[0].offset, e[0].length) +
		       ((e[0].flags & ZL_JOURNAL_ENT_INLINE) ? e[0].length : 0);
		if (body != zl_journal_entry_size(&e[0])) {
			memcpy(bad, last, len);
			bad[e0 + body] = 1;
			rec_recrc(bad, len);
			assert_int_equal(zl_journal_rec_decode(bad, len, &exp, &rec, NULL, &why),
					 -ZL_ERR_PROTO);
			assert_string_equal(why, "entry padding not zero");
		}
		/* Entry 0 is a multiple of 8 without padding otherwise; make
		 * sure the check above ran for some entry of the record. */
		for (unsigned i = 0, cur = e0; i < 5; i++) {
			uint32_t b2 = ZL_JOURNAL_ENTRY_HDR_SIZE +
				      4 * zl_journal_entry_blocks(e[i].offset, e[i].length) +
				      ((e[i].flags & ZL_JOURNAL_ENT_INLINE) ? e[i].length : 0);

			if (b2 != zl_journal_entry_size(&e[i])) {
				memcpy(bad, last, len);
				bad[cur + b2] = 1;
				rec_recrc(bad, len);
				assert_int_equal(
				    zl_journal_rec_decode(bad, len, &exp, &rec, NULL, &why),
				    -ZL_ERR_PROTO);
				assert_string_equal(why, "entry padding not zero");
			}
			cur += (uint32_t)zl_journal_entry_size(&e[i]);
		}
	}
	img_fini(&m);
}

/* Sequence gaps, stale records, other journals. */
static void test_seq_gap_and_strangers(void **state)
{
	struct zl_journal_replay_stats st;
	struct img m;
	uint32_t len;
	uint64_t off;

	(void)state;
	img_init(&m, ZL_JOURNAL_RING_OFF + 64 * BLK, 0);
	img_push(&m, 2, 1, 1, NULL);
	img_push(&m, 2, 1, 2, NULL);
	m.seq++; /* seq 3 lost: the writer skipped one */
	off = img_push(&m, 1, 1, 4, &len);
	img_push(&m, 1, 1, 5, NULL);
	replay_expect(&m, &st, 2, ZL_JOURNAL_STOP_SEQ);
	assert_string_equal(st.why, "record sequence gap");
	assert_true(st.next_off == off && st.next_seq == 3);

	/* A record of an earlier lap (lower seq) there: the normal end. */
	zl_put_le64(m.b + off + 8, 1);
	rec_recrc(m.b + off, len);
	replay_expect(&m, &st, 2, ZL_JOURNAL_STOP_END);

	/* Seq 3 but another journal's nonce, or another journal id. */
	zl_put_le64(m.b + off + 8, 3);
	zl_put_le64(m.b + off + 16, NONCE ^ 1);
	rec_recrc(m.b + off, len);
	replay_expect(&m, &st, 2, ZL_JOURNAL_STOP_END);
	zl_put_le64(m.b + off + 16, NONCE);
	zl_put_le32(m.b + off + 36, 1);
	rec_recrc(m.b + off, len);
	replay_expect(&m, &st, 2, -1);
	/* Renumbered to 3: it is applied, and the next one (seq 5) is the gap. */
	zl_put_le32(m.b + off + 36, 0);
	rec_recrc(m.b + off, len);
	m.recs[2].seq = 3;
	memcpy(m.recs[2].bytes, m.b + off, len);
	replay_expect(&m, &st, 3, ZL_JOURNAL_STOP_SEQ);
	img_fini(&m);
}

/* A crash with two record writes in flight: record 3 torn, record 4 (not
 * acknowledged, 3 was not durable) whole. Replay stops at 3; the daemon
 * reopens (generation + 1) and writes a new record 3 of the same length at
 * the same place; after a second crash, replay applies the new 3 and must not
 * take the old 4 behind it, whose sequence number is the next one. */
static void test_stale_after_reopen(void **state)
{
	struct zl_journal_replay_stats st;
	struct zl_journal_expect exp;
	struct zl_journal_rec rec;
	const char *why;
	struct img m;
	uint64_t off3, off4;
	uint32_t len3, len4;

	(void)state;
	img_init(&m, ZL_JOURNAL_RING_OFF + 64 * BLK, 0);
	img_push(&m, 2, 1, 1, NULL);
	img_push(&m, 2, 1, 2, NULL);
	off3 = img_push(&m, 3, 0x5, 3, &len3);
	off4 = img_push(&m, 1, 1, 4, &len4);
	m.b[off3 + len3 - 1] ^= 1; /* 3 torn */
	replay_expect(&m, &st, 2, ZL_JOURNAL_STOP_TORN);
	assert_true(st.next_off == off3 && st.next_seq == 3);

	/* Reopen: generation 2, the writer continues at (off3, 3). */
	m.sb.generation = 2;
	m.head = st.next_off;
	m.seq = st.next_seq;
	assert_true(img_push(&m, 3, 0x5, 3, NULL) == off3);
	assert_true(m.head == off4); /* same length: old 4 right behind */
	replay_expect(&m, &st, 3, ZL_JOURNAL_STOP_END);
	assert_string_equal(st.why, "record of an earlier opening after a newer one (stale)");
	assert_true(st.next_off == off4 && st.next_seq == 4);

	/* The decoder alone: the old 4 is whole, but stale after generation 2. */
	exp.nonce = NONCE;
	exp.seq = 4;
	exp.journal_id = 0;
	exp.space = m.sb.size - off4;
	exp.min_generation = 1;
	assert_int_equal(zl_journal_rec_decode(m.b + off4, len4, &exp, &rec, NULL, &why), 0);
	assert_int_equal(rec.generation, 1);
	exp.min_generation = 2;
	assert_int_equal(zl_journal_rec_decode(m.b + off4, len4, &exp, &rec, NULL, &why),
			 -ZL_ERR_STALE);
	img_fini(&m);
}

/* Many laps around a small ring with a checkpoint trimmed just enough for
 * each new record: every replay from the checkpoint returns exactly the live
 * records in order, through the PADs. */
static void test_wrap_around(void **state)
{
	struct zl_journal_replay_stats st;
	struct img m;
	uint64_t ring, ck_off, ck_seq;
	unsigned first_live = 0, pads = 0;

	(void)state;
	img_init(&m, ZL_JOURNAL_RING_OFF + 32 * BLK, 0x5c);
	ring = m.sb.size - m.sb.ring_off;
	ck_off = m.head;
	ck_seq = m.seq;
	for (unsigned round = 0; round < 300; round++) {
		uint32_t n = 1 + round % 4, mask = round % 3 ? 0xffffffffu : 0;
		uint32_t pad, len = img_rec(&m, m.seq, n, mask, round);

		zl_journal_ring_place(&m.sb, m.head, len, &pad);
		pads += pad != 0;
		/* Keep at least one block free between head and checkpoint. */
		while ((m.head + ring - ck_off) % ring + pad + len >= ring) {
			assert_true(first_live < m.nrecs);
			first_live++;
			ck_off = first_live < m.nrecs ? m.recs[first_live].off : m.head;
			ck_seq = first_live < m.nrecs ? m.recs[first_live].seq : m.seq;
		}
		img_push(&m, n, mask, round, NULL);
		m.sb.ckpt_seq = ck_seq;
		m.sb.ckpt_off = ck_off;
		replay_expect(&m, &st, m.nrecs - first_live, -1);
		for (unsigned i = 0; i < st.records; i++)
			assert_true(m.applied[i] == m.recs[first_live + i].seq);
		assert_true(st.next_seq == m.seq);
		assert_true(st.next_off == m.head);
		assert_int_equal(st.stop, ZL_JOURNAL_STOP_END);
	}
	assert_true(pads > 10);		   /* the test did wrap, many times */
	assert_true(m.seq > m.nrecs + 10); /* and the PADs took sequence numbers */
	img_fini(&m);
}

/* A PAD must reach exactly the ring's end and carries nothing. */
static void test_pad(void **state)
{
	struct zl_journal_expect exp = {
	    .nonce = NONCE, .seq = 9, .journal_id = 0, .space = 3 * BLK};
	struct zl_journal_rec rec;
	struct zl_journal_entry e;
	uint8_t p[BLK];
	const char *why;
	size_t cur = 0;

	(void)state;
	assert_int_equal(zl_journal_pad_encode(p, STAMP(9, 0), 3 * BLK), 0);
	assert_int_equal(zl_journal_rec_decode(p, BLK, &exp, &rec, NULL, &why), 0);
	assert_int_equal(rec.type, ZL_JOURNAL_REC_PAD);
	assert_int_equal(rec.total_len, 3 * BLK);
	assert_false(zl_journal_rec_next(&rec, &cur, &e));
	exp.space = 4 * BLK; /* short of the end */
	assert_int_equal(zl_journal_rec_decode(p, BLK, &exp, &rec, NULL, &why), -ZL_ERR_PROTO);
	assert_string_equal(why, "pad record does not reach the ring's end");
	exp.space = 2 * BLK; /* beyond the end */
	assert_int_equal(zl_journal_rec_decode(p, BLK, &exp, &rec, NULL, &why), -ZL_ERR_CORRUPT);
	exp.space = 3 * BLK;
	zl_put_le32(p + 32, 1); /* a pad with an entry count */
	rec_recrc(p, BLK);
	assert_int_equal(zl_journal_rec_decode(p, BLK, &exp, &rec, NULL, &why), -ZL_ERR_PROTO);
	assert_int_equal(zl_journal_pad_encode(p, STAMP(9, 0), 100), -ZL_ERR_INVAL);
	assert_int_equal(zl_journal_pad_encode(p, STAMP(9, 0), 0), -ZL_ERR_INVAL);
}

/* A ring filled exactly by valid records: one lap, each applied once. */
static void test_full_lap(void **state)
{
	struct zl_journal_replay_stats st;
	struct zl_journal_entry e;
	struct img m;
	uint32_t crc = 7;

	(void)state;
	img_init(&m, ZL_JOURNAL_MIN_SIZE, 0);
	memset(&e, 0, sizeof(e));
	e.length = 4096;
	e.flags = ZL_JOURNAL_ENT_INPLACE;
	e.crcs = &crc;
	for (unsigned i = 0; i < 16; i++) {
		int len = zl_journal_rec_encode(recbuf, sizeof(recbuf), STAMP(m.seq++, 0), &e, 1);

		assert_int_equal(len, (int)BLK);
		img_append(&m, recbuf, (uint32_t)len);
	}
	assert_true(m.head == m.sb.ring_off);
	replay_expect(&m, &st, 16, ZL_JOURNAL_STOP_LAP);
	img_fini(&m);
}

/* Through a real file: format, superblock read, records by pwrite, replay
 * with the pread reader; a damaged superblock is refused. */
static void test_file_format(void **state)
{
	char path[] = "/tmp/zl-journal-test-XXXXXX";
	struct zl_journal_replay_stats st;
	struct zl_journal_sb sb, got;
	struct img m;
	const char *why = NULL;
	unsigned slot;
	uint64_t off;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(zl_journal_format(fd, ZL_JOURNAL_MIN_SIZE, 0, 1, &sb), 0);
	assert_int_equal(zl_journal_sb_read(fd, &got, &slot, &why), 0);
	assert_int_equal(slot, 0);
	assert_memory_equal(&got, &sb, sizeof(sb));
	assert_true(got.nonce != 0 && got.ckpt_seq == 1 && got.ckpt_off == ZL_JOURNAL_RING_OFF);
	assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)ZL_JOURNAL_MIN_SIZE);

	/* Records written to the file replay through zl_journal_read_fd. */
	img_init(&m, ZL_JOURNAL_MIN_SIZE, 0);
	m.sb = sb;
	off = ZL_JOURNAL_RING_OFF;
	for (unsigned i = 0; i < 3; i++) {
		uint32_t len;

		off = img_push(&m, 2, 1, i, &len);
		assert_int_equal(pwrite(fd, recbuf, len, (off_t)off), (ssize_t)len);
	}
	m.napplied = 0;
	assert_int_equal(zl_journal_replay(&sb, zl_journal_read_fd, &fd, rec_apply, &m, scratch,
					   sizeof(scratch), &st),
			 0);
	assert_int_equal(st.records, 3);
	assert_false(m.damaged_applied);

	/* Slot A damaged, slot B zero (as formatted): refused, with why. */
	assert_int_equal(pwrite(fd, "X", 1, 100), 1);
	why = NULL;
	assert_int_equal(zl_journal_sb_read(fd, &got, &slot, &why), -ZL_ERR_CORRUPT);
	assert_string_equal(why, "journal superblock CRC mismatch");
	img_fini(&m);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sb_roundtrip_and_damage),
	    cmocka_unit_test(test_rec_roundtrip),
	    cmocka_unit_test(test_builder_limits),
	    cmocka_unit_test(test_replay_basic),
	    cmocka_unit_test(test_tear_every_512),
	    cmocka_unit_test(test_tear_every_field),
	    cmocka_unit_test(test_flip_every_byte),
	    cmocka_unit_test(test_strict_fields),
	    cmocka_unit_test(test_seq_gap_and_strangers),
	    cmocka_unit_test(test_stale_after_reopen),
	    cmocka_unit_test(test_wrap_around),
	    cmocka_unit_test(test_pad),
	    cmocka_unit_test(test_full_lap),
	    cmocka_unit_test(test_file_format),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
