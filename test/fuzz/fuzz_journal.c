/* libFuzzer target for lib/journal: the record and superblock decoders and
 * the replay scan, all of which read bytes from disk that a crash, a bad
 * disk or another program may have left there.
 *
 * Input: byte 0 selects the mode (bits 0-1) and whether the fuzzer's CRCs
 * are replaced by right ones (bit 2) so that the checks behind the CRC are
 * reached; the rest is the bytes under test.
 *   0, 3  one record: decoded with the sequence, nonce, journal id and
 *         generation (or the next one) of its own header and a ring space
 *         taken from byte 1;
 *   1     one superblock slot (and the pick of it against a zero slot);
 *   2     a journal image: the bytes are laid into the ring of a smallest
 *         journal at a checkpoint offset from byte 1, replayed.
 * Properties checked besides "no crash / no sanitizer report":
 *  - a decoded BATCH re-encodes from its iterated entries to the identical
 *    bytes, a PAD to the identical block; every entry is in bounds;
 *  - a decoded superblock re-encodes to the identical slot;
 *  - replay: records come in consecutive sequence, each decodes again, the
 *    walk never exceeds one ring and ends at an aligned offset inside it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/journal/journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_IMG_SIZE ZL_JOURNAL_MIN_SIZE
#define FUZZ_REC_CAP  (256u * 1024)

static uint8_t fuzz_buf[FUZZ_REC_CAP];
static uint8_t fuzz_out[FUZZ_REC_CAP];
static uint8_t fuzz_img[FUZZ_IMG_SIZE];
static uint8_t fuzz_scratch[FUZZ_IMG_SIZE];

static void fuzz_check(bool ok)
{
	if (!ok)
		abort();
}

/* Rewrites the CRC of the record at p (len bytes available) the way
 * decode computes it, when its lengths let it be located. */
static void fuzz_fix_rec_crc(uint8_t *p, size_t len)
{
	uint32_t used, written;

	if (len < ZL_JOURNAL_REC_HDR_SIZE)
		return;
	used = zl_get_le32(p + 28);
	written = zl_get_le16(p + 4) == ZL_JOURNAL_REC_PAD
		      ? ZL_JOURNAL_BLOCK
		      : (uint32_t)ZL_ALIGN_UP((uint64_t)used, ZL_JOURNAL_BLOCK);
	if (written < ZL_JOURNAL_REC_HDR_SIZE || written > len)
		return;
	zl_put_le32(p + 44, 0);
	zl_put_le32(p + 44, zl_crc32c(p, written));
}

static void fuzz_entries_reencode(const struct zl_journal_rec *rec)
{
	static uint32_t crcs[2048];
	struct zl_journal_builder b;
	struct zl_journal_entry e;
	size_t cur = 0;
	uint32_t n = 0;

	struct zl_journal_stamp st = {
	    .seq = rec->seq,
	    .nonce = rec->nonce,
	    .journal_id = rec->journal_id,
	    .generation = rec->generation,
	};

	zl_journal_builder_init(&b, fuzz_out, sizeof(fuzz_out));
	while (zl_journal_rec_next(rec, &cur, &e)) {
		uint32_t nb = zl_journal_entry_blocks(e.offset, e.length);
		const uint8_t *end = rec->buf + rec->used_len;

		fuzz_check(e.length && e.length <= ZL_JOURNAL_IO_MAX);
		fuzz_check((uint64_t)e.offset + e.length <= ZL_JOURNAL_CHUNK_MAX);
		fuzz_check(nb <= ZL_ARRAY_SIZE(crcs));
		fuzz_check(e.crc_le + 4ull * nb <= end);
		fuzz_check(cur <= rec->used_len);
		if (e.data)
			fuzz_check((const uint8_t *)e.data + e.length <= end);
		for (uint32_t i = 0; i < nb; i++)
			crcs[i] = zl_journal_entry_crc(&e, i);
		e.crcs = crcs;
		e.crc_le = NULL;
		fuzz_check(zl_journal_builder_add(&b, &e) == 0);
		n++;
	}
	fuzz_check(n == rec->nentries);
	fuzz_check(zl_journal_builder_finish(&b, &st) == (int)rec->total_len);
	fuzz_check(memcmp(fuzz_out, rec->buf, rec->total_len) == 0);
}

static void fuzz_rec(const uint8_t *data, size_t size, bool fix)
{
	struct zl_journal_expect exp;
	struct zl_journal_rec rec;
	const char *why = NULL;
	size_t need = 0;
	uint8_t ctl;
	int rc;

	if (size < 1)
		return;
	/* Byte 1: ring space (1..128 blocks) and whether a newer generation
	 * than the record's is expected. */
	ctl = data[0];
	exp.space = (uint64_t)ZL_JOURNAL_BLOCK * (1 + (ctl >> 1));
	data++;
	size--;
	if (size > sizeof(fuzz_buf))
		size = sizeof(fuzz_buf);
	memcpy(fuzz_buf, data, size);
	if (fix)
		fuzz_fix_rec_crc(fuzz_buf, size);
	if (size >= ZL_JOURNAL_REC_HDR_SIZE) {
		exp.seq = zl_get_le64(fuzz_buf + 8);
		exp.nonce = zl_get_le64(fuzz_buf + 16);
		exp.journal_id = zl_get_le32(fuzz_buf + 36);
		exp.min_generation = zl_get_le32(fuzz_buf + 40) + (ctl & 1);
	} else {
		exp.seq = 1;
		exp.nonce = 1;
		exp.journal_id = 0;
		exp.min_generation = 0;
	}
	rc = zl_journal_rec_decode(fuzz_buf, size, &exp, &rec, &need, &why);
	if (rc) {
		fuzz_check(why != NULL);
		if (rc == -ZL_ERR_RANGE)
			fuzz_check(need > size && need <= exp.space && need <= ZL_JOURNAL_REC_MAX);
		return;
	}
	fuzz_check(rec.total_len <= exp.space && rec.total_len % ZL_JOURNAL_BLOCK == 0);
	fuzz_check(rec.used_len <= size && rec.used_len <= rec.total_len);
	if (rec.type == ZL_JOURNAL_REC_PAD) {
		uint8_t pad[ZL_JOURNAL_BLOCK];

		fuzz_check(rec.total_len == exp.space);
		struct zl_journal_stamp st = {
		    .seq = rec.seq,
		    .nonce = rec.nonce,
		    .journal_id = rec.journal_id,
		    .generation = rec.generation,
		};

		fuzz_check(rec.generation >= exp.min_generation);
		fuzz_check(zl_journal_pad_encode(pad, &st, rec.total_len) == 0);
		fuzz_check(memcmp(pad, fuzz_buf, sizeof(pad)) == 0);
		return;
	}
	fuzz_check(rec.type == ZL_JOURNAL_REC_BATCH && rec.total_len <= size);
	fuzz_check(rec.generation >= exp.min_generation);
	fuzz_entries_reencode(&rec);
}

static void fuzz_sb(const uint8_t *data, size_t size, bool fix)
{
	uint8_t slot[ZL_JOURNAL_SB_SIZE], out[ZL_JOURNAL_SB_SIZE], zero[ZL_JOURNAL_SB_SIZE] = {0};
	struct zl_journal_sb sb, picked;
	const char *why = NULL;
	unsigned which = 9;
	int rc;

	memset(slot, 0, sizeof(slot));
	memcpy(slot, data, ZL_MIN(size, sizeof(slot)));
	if (fix)
		zl_put_le32(slot + ZL_JOURNAL_SB_SIZE - 4, zl_crc32c(slot, ZL_JOURNAL_SB_SIZE - 4));
	rc = zl_journal_sb_decode(slot, sizeof(slot), &sb, &why);
	if (rc) {
		fuzz_check(why != NULL);
		fuzz_check(zl_journal_sb_pick(slot, zero, &picked, &which, &why) == rc);
		return;
	}
	fuzz_check(zl_journal_sb_encode(&sb, out) == 0);
	fuzz_check(memcmp(out, slot, sizeof(out)) == 0);
	fuzz_check(zl_journal_sb_pick(zero, slot, &picked, &which, &why) == 0 && which == 1);
	fuzz_check(memcmp(&picked, &sb, sizeof(sb)) == 0);
}

struct fuzz_replay {
	uint64_t next_seq;
	uint64_t nonce;
	uint64_t calls;
	uint32_t generation;
};

static int fuzz_read(void *arg, void *buf, size_t len, uint64_t off)
{
	fuzz_check(off <= FUZZ_IMG_SIZE && len <= FUZZ_IMG_SIZE - off);
	fuzz_check(off % ZL_JOURNAL_BLOCK == 0 && off >= ZL_JOURNAL_RING_OFF);
	memcpy(buf, fuzz_img + off, len);
	return 0;
}

static int fuzz_apply(void *arg, const struct zl_journal_rec *rec)
{
	struct fuzz_replay *r = arg;
	struct zl_journal_expect exp = {
	    .nonce = r->nonce,
	    .seq = rec->seq,
	    .journal_id = 0,
	    .min_generation = rec->generation,
	    .space = rec->total_len,
	};
	struct zl_journal_rec again;
	const char *why;

	/* In order, PADs in between take a sequence number each; openings
	 * never go back. */
	fuzz_check(rec->seq >= r->next_seq);
	fuzz_check(rec->generation >= r->generation);
	r->generation = rec->generation;
	r->next_seq = rec->seq + 1;
	r->calls++;
	fuzz_check(rec->type == ZL_JOURNAL_REC_BATCH);
	fuzz_check(zl_journal_rec_decode(rec->buf, rec->total_len, &exp, &again, NULL, &why) == 0);
	fuzz_entries_reencode(rec);
	return 0;
}

static void fuzz_replay(const uint8_t *data, size_t size, bool fix)
{
	struct zl_journal_sb sb = {
	    .size = FUZZ_IMG_SIZE,
	    .ring_off = ZL_JOURNAL_RING_OFF,
	    .journal_id = 0,
	    .journal_count = 1,
	    .nonce = 0x6a6f75726e616c31ull,
	    .sb_seq = 1,
	    .ckpt_seq = 1,
	};
	struct zl_journal_replay_stats st;
	struct fuzz_replay r = {.next_seq = 1, .nonce = sb.nonce};
	uint64_t ring = FUZZ_IMG_SIZE - ZL_JOURNAL_RING_OFF, pos;

	if (size < 1)
		return;
	sb.ckpt_off =
	    ZL_JOURNAL_RING_OFF + ZL_JOURNAL_BLOCK * (data[0] % (ring / ZL_JOURNAL_BLOCK));
	data++;
	size--;
	memset(fuzz_img, 0, sizeof(fuzz_img));
	/* Lay the input into the ring from the checkpoint on, wrapping. */
	pos = sb.ckpt_off;
	for (size_t done = 0; done < size && done < ring;) {
		size_t n = ZL_MIN(size - done, (size_t)(FUZZ_IMG_SIZE - pos));

		n = ZL_MIN(n, (size_t)(ring - done));
		memcpy(fuzz_img + pos, data + done, n);
		done += n;
		pos += n;
		if (pos == FUZZ_IMG_SIZE)
			pos = ZL_JOURNAL_RING_OFF;
	}
	/* Optionally make the records the fuzzer put down well-formed
	 * envelopes of this journal (nonce, sequence, CRC) so that the walk
	 * goes further than the first one. */
	if (fix) {
		uint64_t seq = 1, walked = 0;

		pos = sb.ckpt_off;
		while (walked < ring) {
			uint8_t *p = fuzz_img + pos;
			uint32_t total = zl_get_le32(p + 24);

			zl_put_le32(p, 0x524a4c5au);
			zl_put_le64(p + 8, seq++);
			zl_put_le64(p + 16, sb.nonce);
			zl_put_le32(p + 36, 0);
			fuzz_fix_rec_crc(p, (size_t)(FUZZ_IMG_SIZE - pos));
			if (!total || total % ZL_JOURNAL_BLOCK || total > FUZZ_IMG_SIZE - pos)
				break;
			walked += total;
			pos += total;
			if (pos == FUZZ_IMG_SIZE)
				pos = ZL_JOURNAL_RING_OFF;
		}
	}
	fuzz_check(zl_journal_replay(&sb, fuzz_read, NULL, fuzz_apply, &r, fuzz_scratch,
				     sizeof(fuzz_scratch), &st) == 0);
	fuzz_check(st.records == r.calls);
	fuzz_check(st.bytes <= ring);
	fuzz_check(st.next_off >= ZL_JOURNAL_RING_OFF && st.next_off < FUZZ_IMG_SIZE);
	fuzz_check(st.next_off % ZL_JOURNAL_BLOCK == 0);
	fuzz_check(st.next_seq >= r.next_seq && st.why != NULL);
	fuzz_check((sb.ckpt_off - ZL_JOURNAL_RING_OFF + st.bytes) % ring ==
		   st.next_off - ZL_JOURNAL_RING_OFF);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool fix;

	if (size < 1)
		return 0;
	fix = data[0] & 4;
	switch (data[0] & 3) {
	case 1:
		fuzz_sb(data + 1, size - 1, fix);
		break;
	case 2:
		fuzz_replay(data + 1, size - 1, fix);
		break;
	default:
		fuzz_rec(data + 1, size - 1, fix);
		break;
	}
	return 0;
}
