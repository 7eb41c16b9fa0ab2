/* Write-ahead journal format, encode/decode and replay scan. The layout is
 * described field by field in docs/JOURNAL.md; the offsets below are the
 * only other copy of it. */
#include "lib/journal/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"

/* Superblock slot. */
static const uint8_t journal_sb_magic[8] = {'Z', 'L', 'J', 'R', 'N', 'L', 'S', 'B'};
#define SB_VERSION  8
#define SB_BLOCK    12
#define SB_SIZE	    16
#define SB_RING_OFF 24
#define SB_JID	    32
#define SB_JCOUNT   36
#define SB_NONCE    40
#define SB_SEQ	    48
#define SB_CKPT_SEQ 56
#define SB_CKPT_OFF 64
#define SB_GEN	    72
#define SB_USED	    80 /* bytes [SB_USED, SB_CRC) are zero */
#define SB_CRC	    (ZL_JOURNAL_SB_SIZE - 4)

/* Record header. */
#define REC_MAGIC 0x524a4c5au /* "ZLJR" little-endian */
#define REC_TYPE  4
#define REC_FLAGS 6
#define REC_SEQ	  8
#define REC_NONCE 16
#define REC_TOTAL 24
#define REC_USED  28
#define REC_NENT  32
#define REC_JID	  36
#define REC_GEN	  40
#define REC_CRC	  44

/* Entry header. */
#define ENT_VOL	    0
#define ENT_CHUNK   8
#define ENT_VERSION 16
#define ENT_OFFSET  24
#define ENT_LENGTH  28
#define ENT_FLAGS   32
#define ENT_GAP     36

#define JOURNAL_ALIGN8(x) (((x) + 7) & ~(size_t)7)

static bool journal_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

static bool journal_is_pow2_kind(uint32_t f)
{
	return f && !(f & (f - 1));
}

/* Checks what encode and decode of a superblock both require. */
static const char *journal_sb_check(const struct zl_journal_sb *sb)
{
	if (sb->size < ZL_JOURNAL_MIN_SIZE || sb->size > ZL_JOURNAL_MAX_SIZE ||
	    sb->size % ZL_JOURNAL_BLOCK)
		return "journal size out of bounds or not a multiple of 4096";
	if (sb->ring_off != ZL_JOURNAL_RING_OFF)
		return "ring offset is not 8192";
	if (!sb->journal_count || sb->journal_id >= sb->journal_count)
		return "journal id not below the journal count";
	if (!sb->nonce)
		return "journal nonce is 0";
	if (!sb->ckpt_seq)
		return "checkpoint sequence is 0";
	if (sb->ckpt_off < sb->ring_off || sb->ckpt_off >= sb->size ||
	    sb->ckpt_off % ZL_JOURNAL_BLOCK)
		return "checkpoint offset outside the ring or not 4096-aligned";
	return NULL;
}

int zl_journal_sb_encode(const struct zl_journal_sb *sb, uint8_t out[ZL_JOURNAL_SB_SIZE])
{
	if (journal_sb_check(sb))
		return -ZL_ERR_INVAL;
	memset(out, 0, ZL_JOURNAL_SB_SIZE);
	memcpy(out, journal_sb_magic, sizeof(journal_sb_magic));
	zl_put_le32(out + SB_VERSION, ZL_JOURNAL_FORMAT_VERSION);
	zl_put_le32(out + SB_BLOCK, ZL_JOURNAL_BLOCK);
	zl_put_le64(out + SB_SIZE, sb->size);
	zl_put_le64(out + SB_RING_OFF, sb->ring_off);
	zl_put_le32(out + SB_JID, sb->journal_id);
	zl_put_le32(out + SB_JCOUNT, sb->journal_count);
	zl_put_le64(out + SB_NONCE, sb->nonce);
	zl_put_le64(out + SB_SEQ, sb->sb_seq);
	zl_put_le64(out + SB_CKPT_SEQ, sb->ckpt_seq);
	zl_put_le64(out + SB_CKPT_OFF, sb->ckpt_off);
	zl_put_le64(out + SB_GEN, sb->generation);
	zl_put_le32(out + SB_CRC, zl_crc32c(out, SB_CRC));
	return 0;
}

int zl_journal_sb_decode(const uint8_t *buf, size_t len, struct zl_journal_sb *sb, const char **why)
{
	const char *w;

	if (len < ZL_JOURNAL_SB_SIZE) {
		*why = "superblock shorter than 4096 bytes";
		return -ZL_ERR_CORRUPT;
	}
	if (memcmp(buf, journal_sb_magic, sizeof(journal_sb_magic))) {
		*why = "no journal superblock magic (not a journal, or never written)";
		return -ZL_ERR_CORRUPT;
	}
	if (zl_get_le32(buf + SB_CRC) != zl_crc32c(buf, SB_CRC)) {
		*why = "journal superblock CRC mismatch";
		return -ZL_ERR_CORRUPT;
	}
	if (zl_get_le32(buf + SB_VERSION) != ZL_JOURNAL_FORMAT_VERSION) {
		*why = "journal format version not supported by this build";
		return zl_get_le32(buf + SB_VERSION) > ZL_JOURNAL_FORMAT_VERSION ? -ZL_ERR_VERSION
										 : -ZL_ERR_CORRUPT;
	}
	if (zl_get_le32(buf + SB_BLOCK) != ZL_JOURNAL_BLOCK ||
	    !journal_zero(buf + SB_USED, SB_CRC - SB_USED)) {
		*why = "journal superblock block size or reserved bytes wrong";
		return -ZL_ERR_CORRUPT;
	}
	sb->size = zl_get_le64(buf + SB_SIZE);
	sb->ring_off = zl_get_le64(buf + SB_RING_OFF);
	sb->journal_id = zl_get_le32(buf + SB_JID);
	sb->journal_count = zl_get_le32(buf + SB_JCOUNT);
	sb->nonce = zl_get_le64(buf + SB_NONCE);
	sb->sb_seq = zl_get_le64(buf + SB_SEQ);
	sb->ckpt_seq = zl_get_le64(buf + SB_CKPT_SEQ);
	sb->ckpt_off = zl_get_le64(buf + SB_CKPT_OFF);
	sb->generation = zl_get_le64(buf + SB_GEN);
	w = journal_sb_check(sb);
	if (w) {
		*why = w;
		return -ZL_ERR_CORRUPT;
	}
	return 0;
}

int zl_journal_sb_pick(const uint8_t a[ZL_JOURNAL_SB_SIZE], const uint8_t b[ZL_JOURNAL_SB_SIZE],
		       struct zl_journal_sb *sb, unsigned *slot, const char **why)
{
	struct zl_journal_sb sa, sbb;
	const char *wa = NULL, *wb = NULL;
	int ra = zl_journal_sb_decode(a, ZL_JOURNAL_SB_SIZE, &sa, &wa);
	int rb = zl_journal_sb_decode(b, ZL_JOURNAL_SB_SIZE, &sbb, &wb);

	if (!ra && !rb &&
	    (sa.nonce != sbb.nonce || sa.size != sbb.size || sa.journal_id != sbb.journal_id)) {
		/* Two valid slots of different journals: refuse to guess. */
		*why = "journal superblock slots A and B belong to different journals";
		return -ZL_ERR_CORRUPT;
	}
	if (!ra && (rb || sa.sb_seq >= sbb.sb_seq)) {
		*sb = sa;
		*slot = 0;
		return 0;
	}
	if (!rb) {
		*sb = sbb;
		*slot = 1;
		return 0;
	}
	/* Both bad: name slot A's reason (slot B is zero after a format). */
	*why = wa;
	(void)wb;
	return ra;
}

uint32_t zl_journal_entry_crc(const struct zl_journal_entry *e, uint32_t i)
{
	return e->crc_le ? zl_get_le32(e->crc_le + 4u * i) : e->crcs[i];
}

/* Bounds one entry's fields (shared by encode and decode). */
static const char *journal_entry_check(const struct zl_journal_entry *e)
{
	if (!journal_is_pow2_kind(e->flags & ZL_JOURNAL_ENT_KINDS) ||
	    (e->flags & ~ZL_JOURNAL_ENT_KINDS))
		return "entry flags not exactly one of INLINE, INPLACE, ZERO";
	if (!e->length || e->length > ZL_JOURNAL_IO_MAX)
		return "entry length 0 or above 4 MiB";
	if ((uint64_t)e->offset + e->length > ZL_JOURNAL_CHUNK_MAX)
		return "entry range beyond the largest chunk";
	if (e->claim_gap > e->version && e->claim_gap != ZL_JOURNAL_CLAIM_NONE)
		return "entry claim gap larger than its version";
	return NULL;
}

/* Bytes of an entry without its 8-byte pad: header, CRCs, inline data. */
static size_t journal_entry_body(const struct zl_journal_entry *e)
{
	size_t n = ZL_JOURNAL_ENTRY_HDR_SIZE + 4ull * zl_journal_entry_blocks(e->offset, e->length);

	if (e->flags & ZL_JOURNAL_ENT_INLINE)
		n += e->length;
	return n;
}

static size_t journal_entry_bytes(const struct zl_journal_entry *e)
{
	return JOURNAL_ALIGN8(journal_entry_body(e));
}

size_t zl_journal_entry_size(const struct zl_journal_entry *e)
{
	if (journal_entry_check(e) || !e->crcs || ((e->flags & ZL_JOURNAL_ENT_INLINE) && !e->data))
		return 0;
	return journal_entry_bytes(e);
}

void zl_journal_builder_init(struct zl_journal_builder *b, void *buf, size_t cap)
{
	b->buf = buf;
	b->cap = cap;
	b->used = ZL_JOURNAL_REC_HDR_SIZE;
	b->nentries = 0;
}

size_t zl_journal_builder_len(const struct zl_journal_builder *b)
{
	return ZL_ALIGN_UP(b->used, ZL_JOURNAL_BLOCK);
}

int zl_journal_builder_add(struct zl_journal_builder *b, const struct zl_journal_entry *e)
{
	size_t n = zl_journal_entry_size(e);
	uint32_t nb;
	uint8_t *p;

	if (!n)
		return -ZL_ERR_INVAL;
	if (ZL_ALIGN_UP(b->used + n, ZL_JOURNAL_BLOCK) > ZL_MIN(b->cap, (size_t)ZL_JOURNAL_REC_MAX))
		return -ZL_ERR_NOSPC;
	p = b->buf + b->used;
	zl_put_le64(p + ENT_VOL, e->vol);
	zl_put_le64(p + ENT_CHUNK, e->chunk);
	zl_put_le64(p + ENT_VERSION, e->version);
	zl_put_le32(p + ENT_OFFSET, e->offset);
	zl_put_le32(p + ENT_LENGTH, e->length);
	zl_put_le32(p + ENT_FLAGS, e->flags);
	zl_put_le32(p + ENT_GAP, e->claim_gap);
	p += ZL_JOURNAL_ENTRY_HDR_SIZE;
	nb = zl_journal_entry_blocks(e->offset, e->length);
	for (uint32_t i = 0; i < nb; i++, p += 4)
		zl_put_le32(p, e->crcs[i]);
	if (e->flags & ZL_JOURNAL_ENT_INLINE) {
		memcpy(p, e->data, e->length);
		p += e->length;
	}
	memset(p, 0, (size_t)(b->buf + b->used + n - p));
	b->used += n;
	b->nentries++;
	return 0;
}

static void journal_hdr_put(uint8_t *p, uint32_t type, const struct zl_journal_stamp *st,
			    uint32_t total, uint32_t used, uint32_t nent)
{
	zl_put_le32(p, REC_MAGIC);
	zl_put_le16(p + REC_TYPE, (uint16_t)type);
	zl_put_le16(p + REC_FLAGS, 0);
	zl_put_le64(p + REC_SEQ, st->seq);
	zl_put_le64(p + REC_NONCE, st->nonce);
	zl_put_le32(p + REC_TOTAL, total);
	zl_put_le32(p + REC_USED, used);
	zl_put_le32(p + REC_NENT, nent);
	zl_put_le32(p + REC_JID, st->journal_id);
	zl_put_le32(p + REC_GEN, st->generation);
	zl_put_le32(p + REC_CRC, 0);
}

int zl_journal_builder_finish(struct zl_journal_builder *b, const struct zl_journal_stamp *st)
{
	size_t total = zl_journal_builder_len(b);

	if (!b->nentries)
		return -ZL_ERR_INVAL;
	memset(b->buf + b->used, 0, total - b->used);
	journal_hdr_put(b->buf, ZL_JOURNAL_REC_BATCH, st, (uint32_t)total, (uint32_t)b->used,
			b->nentries);
	zl_put_le32(b->buf + REC_CRC, zl_crc32c(b->buf, total));
	return (int)total;
}

int zl_journal_rec_encode(void *buf, size_t cap, const struct zl_journal_stamp *st,
			  const struct zl_journal_entry *ents, uint32_t n)
{
	struct zl_journal_builder b;
	int rc;

	if (cap < ZL_JOURNAL_BLOCK)
		return -ZL_ERR_NOSPC;
	zl_journal_builder_init(&b, buf, cap);
	for (uint32_t i = 0; i < n; i++) {
		rc = zl_journal_builder_add(&b, &ents[i]);
		if (rc)
			return rc;
	}
	return zl_journal_builder_finish(&b, st);
}

int zl_journal_pad_encode(uint8_t out[ZL_JOURNAL_BLOCK], const struct zl_journal_stamp *st,
			  uint32_t total_len)
{
	if (total_len < ZL_JOURNAL_BLOCK || total_len % ZL_JOURNAL_BLOCK ||
	    total_len > ZL_JOURNAL_REC_MAX)
		return -ZL_ERR_INVAL;
	memset(out, 0, ZL_JOURNAL_BLOCK);
	journal_hdr_put(out, ZL_JOURNAL_REC_PAD, st, total_len, ZL_JOURNAL_REC_HDR_SIZE, 0);
	zl_put_le32(out + REC_CRC, zl_crc32c(out, ZL_JOURNAL_BLOCK));
	return 0;
}

/* CRC32C of [0, written) with the CRC field counted as zero. */
static uint32_t journal_rec_crc(const uint8_t *p, size_t written)
{
	static const uint8_t zero4[4];
	uint32_t c = zl_crc32c(p, REC_CRC);

	c = zl_crc32c_update(c, zero4, sizeof(zero4));
	return zl_crc32c_update(c, p + REC_CRC + 4, written - REC_CRC - 4);
}

/* Reads the header fields of the entry at p (40 bytes must be there) and
 * returns the entry's length without its 8-byte pad. No pointers are formed:
 * the fields are not checked yet. */
static size_t journal_entry_get(const uint8_t *p, struct zl_journal_entry *e)
{
	e->vol = zl_get_le64(p + ENT_VOL);
	e->chunk = zl_get_le64(p + ENT_CHUNK);
	e->version = zl_get_le64(p + ENT_VERSION);
	e->offset = zl_get_le32(p + ENT_OFFSET);
	e->length = zl_get_le32(p + ENT_LENGTH);
	e->flags = zl_get_le32(p + ENT_FLAGS);
	e->claim_gap = zl_get_le32(p + ENT_GAP);
	e->crcs = NULL;
	e->crc_le = NULL;
	e->data = NULL;
	return journal_entry_body(e);
}

/* Walks the entries of a CRC-checked BATCH record; NULL when they tile
 * [hdr, used) exactly and each is in bounds. */
static const char *journal_entries_check(const uint8_t *p, uint32_t used, uint32_t nent)
{
	size_t cur = ZL_JOURNAL_REC_HDR_SIZE;
	struct zl_journal_entry e;
	const char *w;

	for (uint32_t i = 0; i < nent; i++) {
		size_t n, body;

		if (used - cur < ZL_JOURNAL_ENTRY_HDR_SIZE)
			return "entry header beyond the record";
		body = journal_entry_get(p + cur, &e);
		w = journal_entry_check(&e);
		if (w)
			return w;
		n = JOURNAL_ALIGN8(body);
		if (used - cur < n)
			return "entry CRCs or data beyond the record";
		if (!journal_zero(p + cur + body, n - body))
			return "entry padding not zero";
		cur += n;
	}
	if (cur != used)
		return "entries do not fill the record's used length";
	return NULL;
}

int zl_journal_rec_decode(const void *buf, size_t len, const struct zl_journal_expect *exp,
			  struct zl_journal_rec *rec, size_t *need, const char **why)
{
	const uint8_t *p = buf;
	uint64_t seq, space;
	uint32_t type, total, used, written, nent;

	if (len < ZL_JOURNAL_REC_HDR_SIZE) {
		if (need)
			*need = ZL_JOURNAL_REC_HDR_SIZE;
		*why = "record header incomplete";
		return -ZL_ERR_RANGE;
	}
	if (zl_get_le32(p) != REC_MAGIC || zl_get_le64(p + REC_NONCE) != exp->nonce ||
	    zl_get_le32(p + REC_JID) != exp->journal_id) {
		*why = "no record of this journal here";
		return -ZL_ERR_NOT_FOUND;
	}
	seq = zl_get_le64(p + REC_SEQ);
	if (seq != exp->seq) {
		*why = seq < exp->seq ? "record from an earlier lap of the ring"
				      : "record sequence gap";
		return -ZL_ERR_STALE;
	}
	/* The lengths locate the CRC'd bytes, so they are checked before the
	 * CRC: wrong ones mean the header itself is damaged. */
	type = zl_get_le16(p + REC_TYPE);
	total = zl_get_le32(p + REC_TOTAL);
	used = zl_get_le32(p + REC_USED);
	space = ZL_MIN(exp->space, (uint64_t)ZL_JOURNAL_REC_MAX);
	if (!total || total % ZL_JOURNAL_BLOCK || total > space || used < ZL_JOURNAL_REC_HDR_SIZE ||
	    used > total) {
		*why = "record lengths out of bounds (damaged header)";
		return -ZL_ERR_CORRUPT;
	}
	written = type == ZL_JOURNAL_REC_PAD ? ZL_JOURNAL_BLOCK
					     : (uint32_t)ZL_ALIGN_UP(used, ZL_JOURNAL_BLOCK);
	if (written > total || used > written) {
		*why = "record lengths out of bounds (damaged header)";
		return -ZL_ERR_CORRUPT;
	}
	if (len < written) {
		if (need)
			*need = written;
		*why = "record incomplete in the buffer";
		return -ZL_ERR_RANGE;
	}
	if (zl_get_le32(p + REC_CRC) != journal_rec_crc(p, written)) {
		*why = "record CRC mismatch (torn or damaged)";
		return -ZL_ERR_CORRUPT;
	}
	if (zl_get_le32(p + REC_GEN) < exp->min_generation) {
		*why = "record of an earlier opening after a newer one (stale)";
		return -ZL_ERR_STALE;
	}
	nent = zl_get_le32(p + REC_NENT);
	if (zl_get_le16(p + REC_FLAGS) || !journal_zero(p + used, written - used)) {
		*why = "record flags or padding not zero";
		return -ZL_ERR_PROTO;
	}
	if (type == ZL_JOURNAL_REC_PAD) {
		if (nent || used != ZL_JOURNAL_REC_HDR_SIZE || total != exp->space) {
			*why = "pad record does not reach the ring's end";
			return -ZL_ERR_PROTO;
		}
	} else if (type == ZL_JOURNAL_REC_BATCH) {
		const char *w;

		if (total != written || !nent) {
			*why = "batch record with no entries or a length beyond its data";
			return -ZL_ERR_PROTO;
		}
		w = journal_entries_check(p, used, nent);
		if (w) {
			*why = w;
			return -ZL_ERR_PROTO;
		}
	} else {
		*why = "unknown record type";
		return -ZL_ERR_PROTO;
	}
	rec->type = type;
	rec->seq = seq;
	rec->nonce = exp->nonce;
	rec->journal_id = exp->journal_id;
	rec->generation = zl_get_le32(p + REC_GEN);
	rec->total_len = total;
	rec->used_len = used;
	rec->nentries = nent;
	rec->buf = p;
	rec->off = 0;
	return 0;
}

bool zl_journal_rec_next(const struct zl_journal_rec *rec, size_t *cursor,
			 struct zl_journal_entry *e)
{
	size_t cur = *cursor ? *cursor : ZL_JOURNAL_REC_HDR_SIZE, body;

	if (rec->type != ZL_JOURNAL_REC_BATCH || cur >= rec->used_len)
		return false;
	/* Decode checked every entry: the pointers stay inside the record. */
	body = journal_entry_get(rec->buf + cur, e);
	e->crc_le = rec->buf + cur + ZL_JOURNAL_ENTRY_HDR_SIZE;
	if (e->flags & ZL_JOURNAL_ENT_INLINE)
		e->data = rec->buf + cur + body - e->length;
	*cursor = cur + JOURNAL_ALIGN8(body);
	return true;
}

uint64_t zl_journal_ring_place(const struct zl_journal_sb *sb, uint64_t head, uint32_t len,
			       uint32_t *pad_len)
{
	if (head + len <= sb->size) {
		*pad_len = 0;
		return head;
	}
	*pad_len = (uint32_t)(sb->size - head);
	return sb->ring_off;
}

size_t zl_journal_replay_buf_size(const struct zl_journal_sb *sb)
{
	return (size_t)ZL_MIN(sb->size - sb->ring_off, (uint64_t)ZL_JOURNAL_REC_MAX);
}

static enum zl_journal_stop journal_stop_of(int rc, const struct zl_journal_expect *exp,
					    const uint8_t *p)
{
	switch (rc) {
	case -ZL_ERR_NOT_FOUND:
		return ZL_JOURNAL_STOP_END;
	case -ZL_ERR_STALE:
		/* An earlier lap, or a leftover of an earlier opening: the end. */
		return zl_get_le64(p + REC_SEQ) <= exp->seq ? ZL_JOURNAL_STOP_END
							    : ZL_JOURNAL_STOP_SEQ;
	case -ZL_ERR_CORRUPT:
		return ZL_JOURNAL_STOP_TORN;
	default:
		return ZL_JOURNAL_STOP_BAD;
	}
}

int zl_journal_replay(const struct zl_journal_sb *sb, zl_journal_read_fn read, void *read_arg,
		      zl_journal_apply_fn apply, void *apply_arg, void *scratch, size_t scratch_len,
		      struct zl_journal_replay_stats *st)
{
	uint64_t t0 = zl_now_ns(), ring, walked = 0, pos;
	struct zl_journal_expect exp;
	struct zl_journal_rec rec;
	uint8_t *buf = scratch;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	if (journal_sb_check(sb) || scratch_len < zl_journal_replay_buf_size(sb))
		return -ZL_ERR_INVAL;
	ring = sb->size - sb->ring_off;
	pos = sb->ckpt_off;
	exp.nonce = sb->nonce;
	exp.journal_id = sb->journal_id;
	exp.seq = sb->ckpt_seq;
	exp.min_generation = 0;
	st->stop = ZL_JOURNAL_STOP_LAP;
	st->why = "walked the whole ring";
	while (walked < ring) {
		size_t need = 0;
		int drc;

		exp.space = sb->size - pos;
		rc = read(read_arg, buf, ZL_JOURNAL_BLOCK, pos);
		if (rc) {
			st->stop = ZL_JOURNAL_STOP_READ;
			st->why = "journal read failed";
			break;
		}
		drc = zl_journal_rec_decode(buf, ZL_JOURNAL_BLOCK, &exp, &rec, &need, &st->why);
		if (drc == -ZL_ERR_RANGE) {
			/* need is bounded by exp.space and ZL_JOURNAL_REC_MAX. */
			rc = read(read_arg, buf + ZL_JOURNAL_BLOCK, need - ZL_JOURNAL_BLOCK,
				  pos + ZL_JOURNAL_BLOCK);
			if (rc) {
				st->stop = ZL_JOURNAL_STOP_READ;
				st->why = "journal read failed";
				break;
			}
			drc = zl_journal_rec_decode(buf, need, &exp, &rec, NULL, &st->why);
		}
		if (drc) {
			st->stop = journal_stop_of(drc, &exp, buf);
			break;
		}
		if (walked + rec.total_len > ring) {
			/* Cannot happen with a writer that keeps head behind the
			 * checkpoint; never apply a record twice. */
			st->stop = ZL_JOURNAL_STOP_LAP;
			st->why = "record would overlap the checkpoint";
			break;
		}
		if (rec.type == ZL_JOURNAL_REC_BATCH) {
			rec.off = pos;
			rc = apply(apply_arg, &rec);
			if (rc) {
				st->stop = ZL_JOURNAL_STOP_CALLBACK;
				st->why = "apply callback failed";
				break;
			}
			st->records++;
			st->entries += rec.nentries;
		}
		walked += rec.total_len;
		st->bytes += rec.total_len;
		pos += rec.total_len;
		if (pos == sb->size)
			pos = sb->ring_off;
		exp.seq++;
		exp.min_generation = rec.generation;
		if (walked == ring) {
			st->stop = ZL_JOURNAL_STOP_LAP;
			st->why = "walked the whole ring";
		}
	}
	st->next_seq = exp.seq;
	st->next_off = pos;
	st->elapsed_ns = zl_now_ns() - t0;
	return rc;
}

/* Whole pread (wr false) or pwrite (wr true) of len bytes at off. */
static int journal_pio(int fd, void *buf, size_t len, uint64_t off, bool wr)
{
	size_t done = 0;

	while (done < len) {
		uint8_t *p = (uint8_t *)buf + done;
		ssize_t n = wr ? pwrite(fd, p, len - done, (off_t)(off + done))
			       : pread(fd, p, len - done, (off_t)(off + done));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			return -ZL_ERR_IO;
		done += (size_t)n;
	}
	return 0;
}

int zl_journal_read_fd(void *arg, void *buf, size_t len, uint64_t off)
{
	return journal_pio(*(const int *)arg, buf, len, off, false);
}

int zl_journal_format(int fd, uint64_t size, uint32_t journal_id, uint32_t journal_count,
		      struct zl_journal_sb *sb)
{
	/* Slot A, then slot B zeroed, in one write (aligned for O_DIRECT). */
	_Alignas(ZL_JOURNAL_BLOCK) uint8_t slots[2 * ZL_JOURNAL_SB_SIZE] = {0};
	int rc;

	sb->size = size;
	sb->ring_off = ZL_JOURNAL_RING_OFF;
	sb->journal_id = journal_id;
	sb->journal_count = journal_count;
	sb->nonce = zl_random_u64();
	sb->sb_seq = 1;
	sb->ckpt_seq = 1;
	sb->ckpt_off = ZL_JOURNAL_RING_OFF;
	sb->generation = 0;
	rc = zl_journal_sb_encode(sb, slots);
	if (rc)
		return rc;
	rc = posix_fallocate(fd, 0, (off_t)size);
	if (rc)
		return -rc;
	rc = journal_pio(fd, slots, sizeof(slots), 0, true);
	if (rc)
		return rc;
	if (fdatasync(fd))
		return -errno;
	return 0;
}

int zl_journal_sb_read(int fd, struct zl_journal_sb *sb, unsigned *slot, const char **why)
{
	_Alignas(ZL_JOURNAL_BLOCK) uint8_t b[2 * ZL_JOURNAL_SB_SIZE]; /* O_DIRECT fds too */
	int rc = zl_journal_read_fd(&fd, b, sizeof(b), 0);

	if (rc) {
		*why = "cannot read the journal superblocks";
		return rc;
	}
	return zl_journal_sb_pick(b, b + ZL_JOURNAL_SB_SIZE, sb, slot, why);
}
