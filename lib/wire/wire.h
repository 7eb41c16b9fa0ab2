/* Zipline wire protocol: one fixed 80-byte little-endian header per message,
 * then `payload_len` bytes of payload (inline data on TCP, a remote buffer
 * descriptor on RDMA). Every field is validated by zl_wire_decode() before
 * anything else looks at it.
 *
 * Layout (offsets in bytes, all little-endian):
 *   0 magic u32 "ZLWP"   4 version u8   5 opcode u8   6 flags u8
 *   7 subop u8 (0, except REPL_WRITE with ZL_WF_DVER: the original opcode)
 *   8 status u16         10 rsvd u16 (0) 12 payload_len u32
 *  16 req_id u64         24 vol_id u64  32 chunk u64
 *  40 offset u32         44 length u32  48 slice_ver u64  56 epoch u64
 *  64 aux u64            72 payload_crc u32 (CRC32C of the payload, 0 if none)
 *  76 hdr_crc u32 (CRC32C of bytes 0..75)
 *
 * Snapshot sequence (docs/SNAPSHOTS.md §1): a WRITE, DISCARD, WRITE_ZEROES
 * or REPL_WRITE request with ZL_WF_SEQ carries snap_seq u32 (< 2^24) at 8,
 * where status and rsvd (always 0 on a request) are otherwise. A sender
 * sets ZL_WF_SEQ only on a connection whose HELLO exchange had both sides
 * name ZL_WIRE_CAP_SNAPSEQ (lib/transport/xport_hello.h): a peer that does
 * not know the flag refuses the message (unknown flag bits). A READ request
 * with ZL_WF_SEQ (snap_seq >= 1) reads the chunk as snapshot snap_seq holds
 * it (docs/SNAPSHOTS.md §2). A write refused because its sequence is below
 * the chunk's is answered ZL_ERR_SNAPSEQ: the client reloads the volume
 * record and resends with the current sequence. A CHUNK_PUSH of a clone
 * chunk (recovery copying a snapshot's chunk, docs/SNAPSHOTS.md §2) carries
 * ZL_WF_SEQ with the clone's lo as snap_seq (its hi is in the chunk id).
 */
#ifndef ZL_WIRE_H
#define ZL_WIRE_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#define ZL_WIRE_MAGIC 0x50574c5au /* "ZLWP" read as little-endian u32 */
#define ZL_WIRE_VERSION 1
#define ZL_WIRE_HDR_SIZE 80
/* Largest data length of one request (client splits larger I/O). */
#define ZL_WIRE_MAX_IO (4u << 20)
/* Largest payload of a non-data message (HELLO, CHUNK_INFO, ...). */
#define ZL_WIRE_MAX_CTRL 4096u
/* Largest chunk size a volume may have. */
#define ZL_WIRE_MAX_CHUNK (64u << 20)
#define ZL_WIRE_MIN_CHUNK (64u << 10)

enum zl_wire_op {
	ZL_OP_HELLO = 1,        /* payload: struct zl_wire_hello */
	ZL_OP_READ = 2,         /* length bytes at chunk/offset; reply carries data */
	ZL_OP_WRITE = 3,        /* payload: length bytes of data */
	ZL_OP_FLUSH = 4,        /* make every acknowledged write of vol_id durable */
	ZL_OP_DISCARD = 5,      /* deallocate range (reads back as zeroes) */
	ZL_OP_WRITE_ZEROES = 6, /* range reads back as zeroes */
	ZL_OP_REPL_WRITE = 7,   /* primary -> backup: aux = original opcode, payload as WRITE */
	ZL_OP_CHUNK_INFO = 8,   /* reply aux = allocated bytes of the chunk replica, 0 if absent */
	ZL_OP_CHUNK_DELETE = 9, /* remove one chunk replica */
	ZL_OP_VOLUME_DELETE = 10, /* remove every chunk replica of vol_id */
	ZL_OP_SYNC = 11,        /* unused (repair is CHUNK_PUSH and SCRUB); kept reserved */
	ZL_OP_PING = 12,        /* no-op round trip */
	/* Recovery (--heal=on, docs/REPLICATION.md §3). offset = slice index,
	 * chunk = first chunk to look at, aux = only versions above this; reply
	 * payload: zl_wire_chunk_ver pairs (at most ZL_WIRE_VERS_MAX), reply
	 * aux = chunk to continue from, 0 when the slice is done. */
	ZL_OP_CHUNK_VERSIONS = 13,
	/* Primary -> recovering member: a piece of a whole-chunk copy, payload
	 * as WRITE, aux = the primary's chunk version. Applied only while the
	 * receiver's chunk version is lower; the piece ending the chunk stores
	 * the version (earlier pieces keep the old one). */
	ZL_OP_CHUNK_PUSH = 14,
	/* CHUNK_PUSH subop: 0 = apply only over an older copy; ZL_PUSH_REPLACE
	 * = replace the copy whenever the versions differ (to a member that is
	 * not IN_SYNC: its newer, never-acknowledged writes are rolled back). */
#define ZL_PUSH_REPLACE 1
	/* Scrub (docs/REPLICATION.md §8). CHUNK_DIGEST: offset = slice index,
	 * chunk = first chunk to look at; reply payload: zl_wire_chunk_digest
	 * records of the chunks this replica holds (at most
	 * ZL_WIRE_DIGESTS_MAX), reply aux = chunk to continue from, 0 when done.
	 * SCRUB (admin -> a slice's primary): offset = slice index; verify every
	 * block of every member's copy and repair from the winning copy; reply
	 * payload: struct zl_wire_scrub_result. */
	ZL_OP_CHUNK_DIGEST = 15,
	ZL_OP_SCRUB = 16,
	ZL_OP_MAX_ = 16,
};

/* READ aux: ZL_READ_RECHECK, or 0. With it the server checks every block read
 * against its stored CRC, even one checked before. A client sets it when it
 * sends a read again because the reply's data failed the CRCs it carried;
 * the primary then finds its bad copy itself and repairs it. Daemons that
 * predate it ignore aux. */
#define ZL_READ_RECHECK 1

/* Reply aux of REPL_WRITE (but STALE, whose aux is the fence) and PING: this
 * bit set when the answering storage node's data dir is near full (free
 * space within 64 MiB of what its chunk store keeps, zl_chunk_store_tight):
 * a primary then refuses the writes that need new space of a slice whose
 * members with room would fall below min_size (docs/REPLICATION.md §9).
 * Senders that predate it answer 0 there and readers that predate it
 * ignore it. */
#define ZL_REPLY_NEAR_FULL (1ull << 63)

enum zl_wire_flag {
	ZL_WF_REPLY = 1u << 0, /* message is a reply */
	ZL_WF_FUA = 1u << 1,   /* force unit access: durable before reply */
	ZL_WF_RDMA = 1u << 2,  /* payload is a struct zl_wire_rdma_desc, not inline data */
	/* REPL_WRITE: aux is the data version the primary assigned (0: do not
	 * raise the chunk's version) and subop the original opcode. Without it
	 * aux is the original opcode (0.1 senders, --heal=off). */
	ZL_WF_DVER = 1u << 3,
	/* READ from any member holding the chunk (in sync or not, primary or
	 * not): peering's pulls, recovery and `zl volume verify`. The reply's
	 * aux carries the replica's chunk version. Never used by clients' I/O. */
	ZL_WF_ANY = 1u << 4,
	/* Request carries snap_seq at 8 (see the layout above). */
	ZL_WF_SEQ = 1u << 5,
	/* Clones (docs/SNAPSHOTS.md §4). On a READ, WRITE, DISCARD or
	 * WRITE_ZEROES request: a chunk (at snap_seq with ZL_WF_SEQ) this
	 * replica has never held is answered status ZL_ERR_ABSENT, nothing
	 * read or applied, instead of reading as zeros (the client then reads
	 * the volume's parent, or copies the parent's chunk up first). */
	ZL_WF_ABSENT = 1u << 6,
	/* On a WRITE or REPL_WRITE request: create only (a clone's copy-up).
	 * Applied only to a chunk the replica has never held, as the chunk's
	 * content from the start (no snapshot copy of the absent chunk it
	 * replaces: that read as this content); a held chunk is left as it is,
	 * answered ZL_ERR_EXISTS by the primary, 0 by a backup (the primary's
	 * forward carries the flag unchanged). */
	ZL_WF_CREATE = 1u << 7,
	ZL_WF_ALL_ = 0xff,
};

/* Largest snapshot sequence (chunk ids keep 24 bits for it). */
#define ZL_WIRE_SEQ_MAX ((1u << 24) - 1)
/* A chunk id: the chunk index in the low 40 bits; a clone chunk of a
 * snapshot (docs/SNAPSHOTS.md §2) has its hi sequence above them. */
#define ZL_WIRE_CHUNK_IDX_BITS 40

/* Host representation of the header. */
struct zl_wire_hdr {
	uint8_t version;
	uint8_t opcode;
	uint8_t flags;
	uint8_t subop;   /* see ZL_WF_DVER */
	uint16_t status; /* replies: 0 or a positive ZL_ERR_* / errno value */
	uint32_t payload_len;
	uint64_t req_id;
	uint64_t vol_id;
	uint64_t chunk;
	uint32_t offset;
	uint32_t length;
	uint64_t slice_ver;
	uint64_t epoch;
	uint64_t aux;
	uint32_t payload_crc;
	uint32_t snap_seq; /* with ZL_WF_SEQ (requests only), else 0 */
};

/* HELLO payload (both directions). Strings are NUL-padded. */
#define ZL_WIRE_NAME_LEN 64
struct zl_wire_hello {
	uint32_t proto_version;
	uint32_t caps;               /* bit 0: tcp, bit 1: rdma */
	char node_id[ZL_WIRE_NAME_LEN]; /* sender's node or client id */
	char token[128];             /* attach token (HMAC), may be empty */
};
#define ZL_WIRE_HELLO_SIZE (4 + 4 + ZL_WIRE_NAME_LEN + 128)

/* RDMA remote buffer descriptor (payload of a request with ZL_WF_RDMA). */
struct zl_wire_rdma_desc {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};
#define ZL_WIRE_RDMA_DESC_SIZE 16

/* One (chunk, version) pair of a CHUNK_VERSIONS reply: 16 bytes, LE. */
struct zl_wire_chunk_ver {
	uint64_t chunk;
	uint64_t version;
};
#define ZL_WIRE_CHUNK_VER_SIZE 16u
#define ZL_WIRE_VERS_MAX (ZL_WIRE_MAX_CTRL / ZL_WIRE_CHUNK_VER_SIZE)

/* One record of a CHUNK_DIGEST reply: 24 bytes, LE. digest is the CRC32C
 * chained over the chunk's chunk_size data bytes in order (holes and
 * never-written blocks count as zeros, so a sparse and a written-out copy
 * of the same data agree); bad_blocks counts the blocks matching neither
 * their crc nor their prev_crc (the digest is meaningless then). */
struct zl_wire_chunk_digest {
	uint64_t chunk;
	uint64_t version;
	uint32_t digest;
	uint32_t bad_blocks;
};
#define ZL_WIRE_CHUNK_DIGEST_SIZE 24u
#define ZL_WIRE_DIGESTS_MAX (ZL_WIRE_MAX_CTRL / ZL_WIRE_CHUNK_DIGEST_SIZE)
/* bad_blocks of a chunk this replica recorded (version = the one it knew)
 * whose file is gone: every block is lost. */
#define ZL_WIRE_DIGEST_MISSING 0xffffffffu
/* bad_blocks of a chunk that changed while it was read (a write went on):
 * no verdict, the scrub skips the chunk this time. */
#define ZL_WIRE_DIGEST_BUSY 0xfffffffeu

/* SCRUB reply payload: 4 x u64 LE. bad_found counts bad, missing or
 * divergent copies (one per member and chunk), repaired those rewritten from
 * the winning copy, bytes_read the bytes the digests and repairs read on all
 * members. */
struct zl_wire_scrub_result {
	uint64_t chunks_checked;
	uint64_t bad_found;
	uint64_t repaired;
	uint64_t bytes_read;
};
#define ZL_WIRE_SCRUB_RESULT_SIZE 32u

/* A data version: the slice's term in the high half, the primary's
 * sequence number in the low half, so any write of a later term orders
 * after every write of an earlier one. */
static inline uint64_t zl_wire_dver_make(uint32_t term, uint32_t seq)
{
	return ((uint64_t)term << 32) | seq;
}
static inline uint32_t zl_wire_dver_term(uint64_t v)
{
	return (uint32_t)(v >> 32);
}
static inline uint32_t zl_wire_dver_seq(uint64_t v)
{
	return (uint32_t)v;
}

/* The opcode a REPL_WRITE replays (subop with ZL_WF_DVER, else aux), or
 * h->opcode for any other message. */
static inline unsigned zl_wire_repl_op(const struct zl_wire_hdr *h)
{
	if (h->opcode != ZL_OP_REPL_WRITE)
		return h->opcode;
	return (h->flags & ZL_WF_DVER) ? h->subop : (unsigned)(h->aux > 0xff ? 0 : h->aux);
}

/* Packs n pairs into out (n * ZL_WIRE_CHUNK_VER_SIZE bytes). */
void zl_wire_chunk_vers_encode(const struct zl_wire_chunk_ver *v, uint32_t n, uint8_t *out);
/* Unpacks a CHUNK_VERSIONS reply payload of len bytes into v (room for
 * ZL_WIRE_VERS_MAX). Returns the number of pairs, or -ZL_ERR_PROTO (length
 * not a multiple of 16 or above ZL_WIRE_MAX_CTRL). */
int zl_wire_chunk_vers_decode(const uint8_t *buf, size_t len, struct zl_wire_chunk_ver *v);

/* Packs n digest records into out (n * ZL_WIRE_CHUNK_DIGEST_SIZE bytes). */
void zl_wire_chunk_digests_encode(const struct zl_wire_chunk_digest *d, uint32_t n, uint8_t *out);
/* Unpacks a CHUNK_DIGEST reply payload of len bytes into d (room for
 * ZL_WIRE_DIGESTS_MAX). Returns the number of records, or -ZL_ERR_PROTO
 * (length not a multiple of 24 or above ZL_WIRE_MAX_CTRL, chunks not
 * strictly increasing). */
int zl_wire_chunk_digests_decode(const uint8_t *buf, size_t len, struct zl_wire_chunk_digest *d);

void zl_wire_scrub_result_encode(const struct zl_wire_scrub_result *r,
				 uint8_t out[ZL_WIRE_SCRUB_RESULT_SIZE]);
/* Returns 0 or -ZL_ERR_PROTO (wrong size, repaired > bad_found). */
int zl_wire_scrub_result_decode(const uint8_t *buf, size_t len, struct zl_wire_scrub_result *r);

/* Encodes h into out[ZL_WIRE_HDR_SIZE], computing hdr_crc. */
void zl_wire_encode(const struct zl_wire_hdr *h, uint8_t out[ZL_WIRE_HDR_SIZE]);

/* Decodes and validates a header. chunk_size_max bounds offset+length when
 * nonzero. Returns 0, or -ZL_ERR_PROTO (bad magic, CRC, reserved bits,
 * unknown opcode/flags, inconsistent lengths, ZL_WF_SEQ on a reply or
 * another opcode, snap_seq above ZL_WIRE_SEQ_MAX), -ZL_ERR_VERSION (other version),
 * -ZL_ERR_RANGE (offset/length beyond limits). `why` (optional) gets a short
 * static reason for logs. */
int zl_wire_decode(const uint8_t *buf, size_t len, struct zl_wire_hdr *h, const char **why);

/* Semantic checks that need the opcode: data length vs payload_len, payload
 * limits, chunk bounds (offset + length <= chunk_size when chunk_size != 0).
 * Returns 0 or -ZL_ERR_PROTO / -ZL_ERR_RANGE. Called by zl_wire_decode with
 * chunk_size 0. */
int zl_wire_check(const struct zl_wire_hdr *h, uint32_t chunk_size, const char **why);

/* Builds a reply header for a request: same req_id/vol/chunk/offset, REPLY flag. */
void zl_wire_reply_init(const struct zl_wire_hdr *req, struct zl_wire_hdr *rep, int status);

void zl_wire_hello_encode(const struct zl_wire_hello *hl, uint8_t out[ZL_WIRE_HELLO_SIZE]);
/* Returns 0 or -ZL_ERR_PROTO (wrong size, unterminated strings). */
int zl_wire_hello_decode(const uint8_t *buf, size_t len, struct zl_wire_hello *hl);

void zl_wire_rdma_desc_encode(const struct zl_wire_rdma_desc *d, uint8_t out[ZL_WIRE_RDMA_DESC_SIZE]);
int zl_wire_rdma_desc_decode(const uint8_t *buf, size_t len, struct zl_wire_rdma_desc *d);

const char *zl_wire_op_name(int op);

/* Converts between the wire status (positive) and the project's negative codes. */
static inline uint16_t zl_wire_status_from_err(int err)
{
	int v = err < 0 ? -err : err;

	return v > 0xffff ? 0xffff : (uint16_t)v;
}
static inline int zl_wire_status_to_err(uint16_t status)
{
	return -(int)status;
}

#endif
