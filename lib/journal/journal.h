/* Write-ahead journal: on-disk format, record encode/decode and replay scan
 * (issue 22, step 1). Pure logic over caller buffers and a read callback;
 * no I/O engine, no allocation. The byte-by-byte format and what replay
 * guarantees are in docs/JOURNAL.md; the short form:
 *
 *   file     preallocated, size a multiple of 4096:
 *            [0, 4096)     superblock slot A
 *            [4096, 8192)  superblock slot B
 *            [8192, size)  the ring of records
 *   record   starts on a 4096 boundary, occupies a multiple of 4096 bytes,
 *            is written with one I/O: a 48-byte header, then its entries,
 *            zero padding up to the next 4096 boundary. Its CRC32C covers
 *            every written byte. A PAD record (one 4096 block) fills the
 *            ring's tail when the next record does not fit before the end.
 *   entry    one write of one chunk: volume, chunk, version, offset,
 *            length, flags, one CRC32C per touched 4 KiB block of the chunk,
 *            and the data itself when it travels inline (small writes).
 *
 * The superblock holds the checkpoint (the sequence number and file offset
 * of the first record not yet applied to the chunk files and synced): the
 * owner rewrites it, alternating slots, after syncing chunk files. Replay
 * walks records from the checkpoint in sequence order and stops at the first
 * record that is not whole and valid with the next sequence number.
 *
 * The storage daemon's writer is storage/storage_journal.c
 * (`zipline-storage --write-path journal`). */
#ifndef ZL_JOURNAL_H
#define ZL_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_JOURNAL_BLOCK	  4096u
#define ZL_JOURNAL_FORMAT_VERSION 1u
#define ZL_JOURNAL_SB_SIZE	  ZL_JOURNAL_BLOCK
#define ZL_JOURNAL_RING_OFF	  (2ull * ZL_JOURNAL_BLOCK) /* after the two slots */
/* Journal file size bounds: at least 16 ring blocks, at most 1 TiB. */
#define ZL_JOURNAL_MIN_SIZE	  (ZL_JOURNAL_RING_OFF + 16ull * ZL_JOURNAL_BLOCK)
#define ZL_JOURNAL_MAX_SIZE	  (1ull << 40)
#define ZL_JOURNAL_REC_HDR_SIZE	  48u
#define ZL_JOURNAL_ENTRY_HDR_SIZE 40u
/* Largest record (header, entries, inline data, padding). A batch that would
 * exceed it is split by the writer; replay needs a buffer of
 * zl_journal_replay_buf_size() bytes. */
#define ZL_JOURNAL_REC_MAX (8u << 20)
/* Bounds of one entry, as for the wire protocol: an I/O of at most 4 MiB
 * inside a chunk of at most 64 MiB. */
#define ZL_JOURNAL_IO_MAX    (4u << 20)
#define ZL_JOURNAL_CHUNK_MAX (64u << 20)

enum zl_journal_rec_type {
	ZL_JOURNAL_REC_BATCH = 1, /* one group commit: 1..n entries */
	ZL_JOURNAL_REC_PAD = 2,	  /* skip to the ring's start; no entries */
};

/* Entry flags: exactly one of INLINE, INPLACE, ZERO. */
enum zl_journal_entry_flags {
	ZL_JOURNAL_ENT_INLINE = 1u << 0,  /* data follows the CRCs in the record */
	ZL_JOURNAL_ENT_INPLACE = 1u << 1, /* data written to the chunk file first */
	ZL_JOURNAL_ENT_ZERO = 1u << 2,	  /* range zeroed (write-zeroes, discard) */
};
#define ZL_JOURNAL_ENT_KINDS (ZL_JOURNAL_ENT_INLINE | ZL_JOURNAL_ENT_INPLACE | ZL_JOURNAL_ENT_ZERO)

/* Superblock (one slot). */
struct zl_journal_sb {
	uint64_t size;	     /* journal file size in bytes */
	uint64_t ring_off;   /* file offset of the ring (ZL_JOURNAL_RING_OFF) */
	uint32_t journal_id; /* which journal of this daemon (one per loop later) */
	uint32_t journal_count;
	uint64_t nonce;	   /* random, != 0; stamped into every record */
	uint64_t sb_seq;   /* bumped on every superblock write; higher slot wins */
	uint64_t ckpt_seq; /* sequence of the first record replay applies */
	uint64_t ckpt_off; /* its file offset, in [ring_off, size), 4 KiB aligned */
	/* Opening count: the owner bumps it, durably, each time it opens the
	 * journal for writing, before its first record; records carry its low
	 * 32 bits, and replay refuses a record of an older opening after one
	 * of a newer (a leftover of a pipelined write the crash made stale). */
	uint64_t generation;
};

/* What a record is stamped with: the writer's sequence counter and, from
 * the superblock, the nonce, the journal id and the generation. */
struct zl_journal_stamp {
	uint64_t seq;
	uint64_t nonce;
	uint32_t journal_id;
	uint32_t generation; /* low 32 bits of zl_journal_sb.generation */
};

/* One entry. For encoding, `crcs` (host order) and, for INLINE, `data` are
 * read; for decoding, `crc_le` and `data` point into the record buffer. */
#define ZL_JOURNAL_CLAIM_NONE UINT32_MAX

struct zl_journal_entry {
	uint64_t vol;
	uint64_t chunk;
	uint64_t version;
	uint32_t offset;       /* byte offset inside the chunk */
	uint32_t length;       /* bytes, > 0 */
	uint32_t flags;	       /* ZL_JOURNAL_ENT_* */
	/* Once the entry is durable its chunk may claim version - claim_gap:
	 * writes of the chunk with a lower version that were not yet in the
	 * journal when it was built may be missing after a crash. <= version;
	 * ZL_JOURNAL_CLAIM_NONE: the entry claims no version. */
	uint32_t claim_gap;
	const uint32_t *crcs;  /* encode: zl_journal_entry_blocks() CRCs */
	const uint8_t *crc_le; /* decode: the same, little-endian in the record */
	const void *data;      /* INLINE: `length` bytes; else NULL */
};

/* A decoded record header; entries are read with zl_journal_rec_next(). */
struct zl_journal_rec {
	uint32_t type;
	uint64_t seq;
	uint64_t nonce;
	uint32_t journal_id;
	uint32_t generation;
	uint32_t total_len; /* bytes the record occupies in the ring */
	uint32_t used_len;  /* header + entries, without padding */
	uint32_t nentries;
	const uint8_t *buf; /* the record's bytes (decode input) */
	uint64_t off;	    /* replay: its file offset (0 from the decoder) */
};

/* What a record must match to be accepted. */
struct zl_journal_expect {
	uint64_t nonce;
	uint64_t seq;
	uint32_t journal_id;
	uint32_t min_generation; /* the previous record's generation */
	uint64_t space;		 /* bytes from the record's offset to the ring's end */
};

/* Why a replay scan stopped. END is the only reason with nothing suspicious:
 * the next position holds an older record or never-written space. */
enum zl_journal_stop {
	ZL_JOURNAL_STOP_END = 0,  /* no record of this journal with the next seq */
	ZL_JOURNAL_STOP_TORN,	  /* right header, CRC over its bytes wrong */
	ZL_JOURNAL_STOP_BAD,	  /* right CRC but fields out of bounds */
	ZL_JOURNAL_STOP_SEQ,	  /* a record of this journal with another seq */
	ZL_JOURNAL_STOP_LAP,	  /* walked the whole ring */
	ZL_JOURNAL_STOP_CALLBACK, /* the callback returned an error */
	ZL_JOURNAL_STOP_READ,	  /* the read callback failed */
};

struct zl_journal_replay_stats {
	uint64_t records; /* BATCH records handed to the callback */
	uint64_t entries;
	uint64_t bytes; /* ring bytes walked (records and pads) */
	uint64_t elapsed_ns;
	uint64_t next_seq; /* where the writer continues */
	uint64_t next_off;
	enum zl_journal_stop stop;
	const char *why; /* static text for the stop (for the log) */
};

/* Touched 4 KiB blocks of the chunk for [offset, offset+length); 0 when
 * length is 0. */
static inline uint32_t zl_journal_entry_blocks(uint32_t offset, uint32_t length)
{
	if (!length)
		return 0;
	return (uint32_t)(((uint64_t)offset + length - 1) / ZL_JOURNAL_BLOCK -
			  offset / ZL_JOURNAL_BLOCK + 1);
}

/* CRC i of a decoded entry. */
uint32_t zl_journal_entry_crc(const struct zl_journal_entry *e, uint32_t i);

/* Bytes `e` takes inside a record (header, CRCs, inline data, 8-byte pad),
 * or 0 when the entry is invalid (bounds, flags, missing data or CRCs). */
size_t zl_journal_entry_size(const struct zl_journal_entry *e);

/* Encodes `sb` into one 4096-byte slot. Returns 0, or -ZL_ERR_INVAL when a
 * field is out of bounds (size, ring offset, checkpoint, id >= count,
 * nonce 0). */
int zl_journal_sb_encode(const struct zl_journal_sb *sb, uint8_t out[ZL_JOURNAL_SB_SIZE]);
/* Decodes one slot. Returns 0 or -ZL_ERR_CORRUPT with *why set (bad magic,
 * CRC, version, bounds); -ZL_ERR_VERSION for a newer format. */
int zl_journal_sb_decode(const uint8_t *buf, size_t len, struct zl_journal_sb *sb,
			 const char **why);
/* Picks the current superblock out of both slots: the valid one with the
 * higher sb_seq. *slot = 0 (A) or 1 (B); the owner writes the next
 * superblock into the other slot. Returns 0, or the error of slot A when
 * neither is valid (*why says why for both). */
int zl_journal_sb_pick(const uint8_t a[ZL_JOURNAL_SB_SIZE], const uint8_t b[ZL_JOURNAL_SB_SIZE],
		       struct zl_journal_sb *sb, unsigned *slot, const char **why);

/* Incremental record builder over a caller buffer (group commit: entries
 * join while the previous record is in flight). The buffer must hold the
 * finished record (entries rounded up to 4096). */
struct zl_journal_builder {
	uint8_t *buf;
	size_t cap;
	size_t used; /* header + entries so far */
	uint32_t nentries;
};

void zl_journal_builder_init(struct zl_journal_builder *b, void *buf, size_t cap);
/* Appends an entry. Returns 0, -ZL_ERR_INVAL (invalid entry) or
 * -ZL_ERR_NOSPC (the record would exceed the buffer or ZL_JOURNAL_REC_MAX;
 * the builder is unchanged, finish it and start another). */
int zl_journal_builder_add(struct zl_journal_builder *b, const struct zl_journal_entry *e);
/* Bytes the record would occupy when finished now (a multiple of 4096). */
size_t zl_journal_builder_len(const struct zl_journal_builder *b);
/* Writes the header, zero padding and CRC. Returns the record length (a
 * multiple of 4096, the size of its single write) or -ZL_ERR_INVAL (no
 * entries). */
int zl_journal_builder_finish(struct zl_journal_builder *b, const struct zl_journal_stamp *st);

/* One-shot: encodes a BATCH record of n >= 1 entries into buf. Returns the
 * record length or a negative error as for the builder. */
int zl_journal_rec_encode(void *buf, size_t cap, const struct zl_journal_stamp *st,
			  const struct zl_journal_entry *ents, uint32_t n);
/* Encodes a PAD record of total_len bytes (multiple of 4096, >= 4096); only
 * its first 4096 bytes are written to the ring. */
int zl_journal_pad_encode(uint8_t out[ZL_JOURNAL_BLOCK], const struct zl_journal_stamp *st,
			  uint32_t total_len);

/* Strict decode of the record at the start of buf (len bytes available,
 * untrusted). Every length is bounded by len, by exp->space and by
 * ZL_JOURNAL_REC_MAX; every entry is checked; the CRC over the written bytes
 * is checked. Returns 0, or
 *   -ZL_ERR_NOT_FOUND  not a record of this journal (magic or nonce);
 *   -ZL_ERR_STALE      a record of this journal with another seq, or (with a
 *                      right CRC) a generation below exp->min_generation;
 *   -ZL_ERR_RANGE      len too short for the record's written bytes (read more
 *                      and call again: *need says how many);
 *   -ZL_ERR_CORRUPT    CRC mismatch (torn or damaged);
 *   -ZL_ERR_PROTO      CRC right but a field out of bounds.
 * *why is set on every error. need may be NULL. */
int zl_journal_rec_decode(const void *buf, size_t len, const struct zl_journal_expect *exp,
			  struct zl_journal_rec *rec, size_t *need, const char **why);
/* Iterates the entries of a decoded record: *cursor starts at 0. Returns
 * true and fills *e, or false after the last one. */
bool zl_journal_rec_next(const struct zl_journal_rec *rec, size_t *cursor,
			 struct zl_journal_entry *e);

/* Where a record of len bytes goes when the ring's head is at `head`: head
 * itself, or the ring's start after a PAD of *pad_len bytes at head. Free
 * space (the checkpoint) is the caller's business. */
uint64_t zl_journal_ring_place(const struct zl_journal_sb *sb, uint64_t head, uint32_t len,
			       uint32_t *pad_len);

/* Reads len bytes at file offset off. Returns 0 or a negative error. */
typedef int (*zl_journal_read_fn)(void *arg, void *buf, size_t len, uint64_t off);
/* Called for every whole valid BATCH record, in sequence order. A non-zero
 * return stops the scan (STOP_CALLBACK) and is returned by the replay. */
typedef int (*zl_journal_apply_fn)(void *arg, const struct zl_journal_rec *rec);

/* Scratch bytes zl_journal_replay needs for this journal. */
size_t zl_journal_replay_buf_size(const struct zl_journal_sb *sb);
/* Walks the ring from sb->ckpt_seq at sb->ckpt_off, hands every whole valid
 * record to apply, stops at the first one that is not (see enum
 * zl_journal_stop) or after one lap. Never reads more than the ring once.
 * Returns 0 (the stop reason is in st->stop; stopping is the normal end),
 * -ZL_ERR_INVAL (bad sb, buffer too small), the read callback's error, or
 * the apply callback's. */
int zl_journal_replay(const struct zl_journal_sb *sb, zl_journal_read_fn read, void *read_arg,
		      zl_journal_apply_fn apply, void *apply_arg, void *scratch, size_t scratch_len,
		      struct zl_journal_replay_stats *st);

/* pread-backed zl_journal_read_fn; arg is a pointer to the int fd. Replay
 * reads 4096-aligned offsets and lengths into scratch and scratch + 4096,
 * so an O_DIRECT fd works with a 4096-aligned scratch buffer. */
int zl_journal_read_fd(void *arg, void *buf, size_t len, uint64_t off);

/* Creates a journal on fd: preallocates size bytes (fallocate), writes
 * superblock slot A (ckpt_seq 1 at the ring's start, generation 0, a fresh
 * nonce; the owner bumps the generation before its first record) and a
 * zeroed slot B, fdatasyncs. Returns 0, -ZL_ERR_INVAL or -errno. */
int zl_journal_format(int fd, uint64_t size, uint32_t journal_id, uint32_t journal_count,
		      struct zl_journal_sb *sb);
/* Reads both superblock slots of fd and picks the current one. Returns as
 * zl_journal_sb_pick, or -errno / -ZL_ERR_IO for a short read. */
int zl_journal_sb_read(int fd, struct zl_journal_sb *sb, unsigned *slot, const char **why);

#endif
