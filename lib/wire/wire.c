#include "wire.h"

#include <stddef.h>
#include <string.h>

#include "../common/byteorder.h"
#include "../common/common.h"

/* Bytes 16..75 of a header (req_id .. payload_crc) are, on a little-endian
 * host, the bytes of struct zl_wire_hdr from req_id on: copied as they are. */
#define WIRE_TAIL_LEN 60
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WIRE_TAIL_AS_IS 1
_Static_assert(offsetof(struct zl_wire_hdr, req_id) == 16 &&
		       offsetof(struct zl_wire_hdr, vol_id) == 24 &&
		       offsetof(struct zl_wire_hdr, chunk) == 32 &&
		       offsetof(struct zl_wire_hdr, offset) == 40 &&
		       offsetof(struct zl_wire_hdr, length) == 44 &&
		       offsetof(struct zl_wire_hdr, slice_ver) == 48 &&
		       offsetof(struct zl_wire_hdr, epoch) == 56 &&
		       offsetof(struct zl_wire_hdr, aux) == 64 &&
		       offsetof(struct zl_wire_hdr, payload_crc) == 72,
	       "struct zl_wire_hdr from req_id on is laid out as the wire's bytes 16..75");
#else
#define WIRE_TAIL_AS_IS 0
#endif

/* A request whose bytes 8..11 hold snap_seq instead of status and rsvd. */
static bool wire_seq_req(uint8_t flags)
{
	return (flags & ZL_WF_SEQ) && !(flags & ZL_WF_REPLY);
}

void zl_wire_encode(const struct zl_wire_hdr *h, uint8_t out[ZL_WIRE_HDR_SIZE])
{
	zl_put_le32(out + 0, ZL_WIRE_MAGIC);
	out[4] = h->version ? h->version : ZL_WIRE_VERSION;
	out[5] = h->opcode;
	out[6] = h->flags;
	out[7] = h->subop;
	if (wire_seq_req(h->flags)) {
		zl_put_le32(out + 8, h->snap_seq);
	} else {
		zl_put_le16(out + 8, h->status);
		zl_put_le16(out + 10, 0);
	}
	zl_put_le32(out + 12, h->payload_len);
#if WIRE_TAIL_AS_IS
	memcpy(out + 16, &h->req_id, WIRE_TAIL_LEN);
#else
	zl_put_le64(out + 16, h->req_id);
	zl_put_le64(out + 24, h->vol_id);
	zl_put_le64(out + 32, h->chunk);
	zl_put_le32(out + 40, h->offset);
	zl_put_le32(out + 44, h->length);
	zl_put_le64(out + 48, h->slice_ver);
	zl_put_le64(out + 56, h->epoch);
	zl_put_le64(out + 64, h->aux);
	zl_put_le32(out + 72, h->payload_crc);
#endif
	zl_put_le32(out + 76, zl_crc32c_76(out));
}

static int fail(const char **why, const char *reason, int code)
{
	if (why)
		*why = reason;
	return code;
}

/* The flags that zl_wire_check looks at before the lengths. */
#define WIRE_WF_RARE                                                                       \
	(ZL_WF_FUA | ZL_WF_DVER | ZL_WF_ANY | ZL_WF_SEQ | ZL_WF_ABSENT | ZL_WF_CREATE)

static bool op_is_data_write(unsigned op)
{
	return op == ZL_OP_WRITE || op == ZL_OP_REPL_WRITE || op == ZL_OP_CHUNK_PUSH;
}

/* zl_wire_check but for its short path. */
static __attribute__((noinline)) int wire_check_full(const struct zl_wire_hdr *h,
						      uint32_t chunk_size, const char **why)
{
	bool reply = h->flags & ZL_WF_REPLY;
	bool rdma = h->flags & ZL_WF_RDMA;
	unsigned op = h->opcode;
	uint64_t end = (uint64_t)h->offset + h->length;
	uint32_t limit = chunk_size ? chunk_size : ZL_WIRE_MAX_CHUNK;

	if (op < ZL_OP_HELLO || op > ZL_OP_MAX_)
		return fail(why, "unknown opcode", -ZL_ERR_PROTO);
	if (h->flags & ~(unsigned)ZL_WF_ALL_)
		return fail(why, "unknown flag bits", -ZL_ERR_PROTO);
	if (!reply && h->status)
		return fail(why, "status set on a request", -ZL_ERR_PROTO);
	/* Each check up to the length checks needs one of these set: the
	 * common message (none set) skips them. */
	if (!((h->flags & WIRE_WF_RARE) | h->subop | h->snap_seq))
		goto lengths;
	if ((h->flags & ZL_WF_DVER) && op != ZL_OP_REPL_WRITE)
		return fail(why, "DVER flag on an opcode other than REPL_WRITE", -ZL_ERR_PROTO);
	if ((h->flags & ZL_WF_ANY) && op != ZL_OP_READ)
		return fail(why, "ANY flag on an opcode other than READ", -ZL_ERR_PROTO);
	if ((h->flags & ZL_WF_ABSENT) &&
	    (reply || (op != ZL_OP_READ && op != ZL_OP_WRITE && op != ZL_OP_DISCARD &&
		       op != ZL_OP_WRITE_ZEROES)))
		return fail(why, "ABSENT flag on a reply or an opcode other than READ, WRITE, "
			    "DISCARD or WRITE_ZEROES", -ZL_ERR_PROTO);
	if ((h->flags & ZL_WF_CREATE) &&
	    (reply || (op != ZL_OP_WRITE && op != ZL_OP_REPL_WRITE)))
		return fail(why, "CREATE flag on a reply or an opcode other than WRITE or "
			    "REPL_WRITE", -ZL_ERR_PROTO);
	if ((h->flags & ZL_WF_CREATE) && (h->flags & ZL_WF_ABSENT))
		return fail(why, "CREATE and ABSENT flags together", -ZL_ERR_PROTO);
	if (h->flags & ZL_WF_SEQ) {
		if (reply)
			return fail(why, "SEQ flag on a reply", -ZL_ERR_PROTO);
		if (op != ZL_OP_WRITE && op != ZL_OP_DISCARD && op != ZL_OP_WRITE_ZEROES &&
		    op != ZL_OP_REPL_WRITE && op != ZL_OP_READ && op != ZL_OP_CHUNK_PUSH)
			return fail(why, "SEQ flag on an opcode other than READ or one that changes "
				    "data", -ZL_ERR_PROTO);
		if (h->snap_seq > ZL_WIRE_SEQ_MAX)
			return fail(why, "snapshot sequence above 2^24 - 1", -ZL_ERR_PROTO);
		if (op == ZL_OP_READ && !h->snap_seq)
			return fail(why, "snapshot read of sequence 0 (snapshots start at 1)",
				    -ZL_ERR_PROTO);
	} else if (h->snap_seq) {
		return fail(why, "snapshot sequence without the SEQ flag", -ZL_ERR_PROTO);
	}
	if (op == ZL_OP_CHUNK_PUSH && !reply) {
		if (h->subop > ZL_PUSH_REPLACE)
			return fail(why, "unknown CHUNK_PUSH subop", -ZL_ERR_PROTO);
	} else if (h->subop && !(h->flags & ZL_WF_DVER)) {
		return fail(why, "reserved subop byte set without DVER", -ZL_ERR_PROTO);
	}
	if ((h->flags & ZL_WF_FUA) && !op_is_data_write(op) && op != ZL_OP_WRITE_ZEROES &&
	    op != ZL_OP_DISCARD)
		return fail(why, "FUA on a non-write opcode", -ZL_ERR_PROTO);

lengths:
	if (reply) {
		if (op == ZL_OP_HELLO && h->status == 0)
			return h->payload_len == ZL_WIRE_HELLO_SIZE ?
				       0 :
				       fail(why, "HELLO reply payload size", -ZL_ERR_PROTO);
		if (op == ZL_OP_READ && h->status == 0 && !rdma) {
			if (h->payload_len != h->length || h->length > ZL_WIRE_MAX_IO)
				return fail(why, "READ reply payload_len != length",
					    -ZL_ERR_PROTO);
			return 0;
		}
		if ((op == ZL_OP_CHUNK_DIGEST || op == ZL_OP_SCRUB) && h->status == 0) {
			if (h->payload_len > ZL_WIRE_MAX_CTRL)
				return fail(why, "CHUNK_DIGEST/SCRUB reply payload size",
					    -ZL_ERR_PROTO);
			return 0;
		}
		if (op == ZL_OP_CHUNK_VERSIONS && h->status == 0) {
			if (h->payload_len > ZL_WIRE_MAX_CTRL ||
			    h->payload_len % ZL_WIRE_CHUNK_VER_SIZE)
				return fail(why, "CHUNK_VERSIONS reply payload size", -ZL_ERR_PROTO);
			return 0;
		}
		if (h->payload_len != 0)
			return fail(why, "unexpected payload on reply", -ZL_ERR_PROTO);
		return 0;
	}

	switch (op) {
	case ZL_OP_HELLO:
		if (h->payload_len != ZL_WIRE_HELLO_SIZE || h->length)
			return fail(why, "HELLO payload size", -ZL_ERR_PROTO);
		return 0;
	case ZL_OP_PING:
	case ZL_OP_SYNC:
		if (h->payload_len || h->length)
			return fail(why, "payload on a control opcode", -ZL_ERR_PROTO);
		return 0;
	case ZL_OP_FLUSH:
	case ZL_OP_VOLUME_DELETE:
		if (h->payload_len || h->length || h->offset)
			return fail(why, "FLUSH/VOLUME_DELETE carry no range", -ZL_ERR_PROTO);
		if (!h->vol_id)
			return fail(why, "zero volume id", -ZL_ERR_PROTO);
		return 0;
	case ZL_OP_CHUNK_INFO:
	case ZL_OP_CHUNK_DELETE:
		if (h->payload_len || h->length || h->offset)
			return fail(why, "chunk opcode carries no range", -ZL_ERR_PROTO);
		if (!h->vol_id)
			return fail(why, "zero volume id", -ZL_ERR_PROTO);
		return 0;
	case ZL_OP_CHUNK_VERSIONS:
	case ZL_OP_CHUNK_DIGEST:
	case ZL_OP_SCRUB:
		if (h->payload_len || h->length)
			return fail(why, "CHUNK_VERSIONS/DIGEST/SCRUB carry no payload",
				    -ZL_ERR_PROTO);
		if (!h->vol_id)
			return fail(why, "zero volume id", -ZL_ERR_PROTO);
		return 0;
	case ZL_OP_READ:
		if (rdma ? h->payload_len != ZL_WIRE_RDMA_DESC_SIZE : h->payload_len != 0)
			return fail(why, "READ request payload", -ZL_ERR_PROTO);
		if (h->length == 0 || h->length > ZL_WIRE_MAX_IO)
			return fail(why, "READ length out of range", -ZL_ERR_RANGE);
		break;
	case ZL_OP_DISCARD:
	case ZL_OP_WRITE_ZEROES:
		if (h->payload_len)
			return fail(why, "payload on DISCARD/WRITE_ZEROES", -ZL_ERR_PROTO);
		if (h->length == 0)
			return fail(why, "zero length", -ZL_ERR_RANGE);
		break;
	case ZL_OP_REPL_WRITE: {
		unsigned rop = zl_wire_repl_op(h);

		if (rop == ZL_OP_DISCARD || rop == ZL_OP_WRITE_ZEROES) {
			if (h->payload_len)
				return fail(why, "payload on replicated zeroing", -ZL_ERR_PROTO);
			if (h->length == 0)
				return fail(why, "zero length", -ZL_ERR_RANGE);
			break;
		}
		if (rop != ZL_OP_WRITE)
			return fail(why, "REPL_WRITE of unknown opcode", -ZL_ERR_PROTO);
	}
		/* fall through */
	case ZL_OP_CHUNK_PUSH:
	case ZL_OP_WRITE:
		if (h->length == 0 || h->length > ZL_WIRE_MAX_IO)
			return fail(why, "WRITE length out of range", -ZL_ERR_RANGE);
		if (rdma ? h->payload_len != ZL_WIRE_RDMA_DESC_SIZE : h->payload_len != h->length)
			return fail(why, "WRITE payload_len != length", -ZL_ERR_PROTO);
		break;
	default:
		return fail(why, "unknown opcode", -ZL_ERR_PROTO);
	}
	if (!h->vol_id)
		return fail(why, "zero volume id", -ZL_ERR_PROTO);
	if (end > limit)
		return fail(why, "range beyond the chunk", -ZL_ERR_RANGE);
	return 0;
}

int zl_wire_check(const struct zl_wire_hdr *h, uint32_t chunk_size, const char **why)
{
	/* The most common messages, a plain READ and its successful reply,
	 * pass here with exactly the checks wire_check_full makes of them;
	 * anything else (and any failure) takes the full path. */
	if (h->opcode == ZL_OP_READ && !(h->status | h->subop | h->snap_seq) &&
	    h->length <= ZL_WIRE_MAX_IO) {
		if (h->flags == ZL_WF_REPLY) {
			if (h->payload_len == h->length)
				return 0;
		} else if (!h->flags && !h->payload_len && h->length && h->vol_id &&
			   (uint64_t)h->offset + h->length <=
				   (chunk_size ? chunk_size : ZL_WIRE_MAX_CHUNK)) {
			return 0;
		}
	}
	return wire_check_full(h, chunk_size, why);
}

int zl_wire_decode(const uint8_t *buf, size_t len, struct zl_wire_hdr *h, const char **why)
{
	if (len < ZL_WIRE_HDR_SIZE)
		return fail(why, "truncated header", -ZL_ERR_PROTO);
	if (zl_get_le32(buf) != ZL_WIRE_MAGIC)
		return fail(why, "bad magic", -ZL_ERR_PROTO);
	if (zl_get_le32(buf + 76) != zl_crc32c_76(buf))
		return fail(why, "header CRC mismatch", -ZL_ERR_PROTO);
	if (buf[4] != ZL_WIRE_VERSION)
		return fail(why, "unsupported version", -ZL_ERR_VERSION);
	if (!wire_seq_req(buf[6]) && zl_get_le16(buf + 10))
		return fail(why, "reserved bytes set", -ZL_ERR_PROTO);
	memset(h, 0, sizeof(*h));
	h->version = buf[4];
	h->opcode = buf[5];
	h->flags = buf[6];
	h->subop = buf[7];
	if (wire_seq_req(h->flags))
		h->snap_seq = zl_get_le32(buf + 8);
	else
		h->status = zl_get_le16(buf + 8);
	h->payload_len = zl_get_le32(buf + 12);
#if WIRE_TAIL_AS_IS
	memcpy(&h->req_id, buf + 16, WIRE_TAIL_LEN);
#else
	h->req_id = zl_get_le64(buf + 16);
	h->vol_id = zl_get_le64(buf + 24);
	h->chunk = zl_get_le64(buf + 32);
	h->offset = zl_get_le32(buf + 40);
	h->length = zl_get_le32(buf + 44);
	h->slice_ver = zl_get_le64(buf + 48);
	h->epoch = zl_get_le64(buf + 56);
	h->aux = zl_get_le64(buf + 64);
	h->payload_crc = zl_get_le32(buf + 72);
#endif
	if (h->payload_len > ZL_WIRE_MAX_IO)
		return fail(why, "payload too large", -ZL_ERR_PROTO);
	return zl_wire_check(h, 0, why);
}

void zl_wire_reply_init(const struct zl_wire_hdr *req, struct zl_wire_hdr *rep, int status)
{
	memset(rep, 0, sizeof(*rep));
	rep->version = ZL_WIRE_VERSION;
	rep->opcode = req->opcode;
	rep->flags = ZL_WF_REPLY;
	rep->status = zl_wire_status_from_err(status);
	rep->req_id = req->req_id;
	rep->vol_id = req->vol_id;
	rep->chunk = req->chunk;
	rep->offset = req->offset;
	rep->length = req->length;
	rep->slice_ver = req->slice_ver;
	rep->epoch = req->epoch;
}

void zl_wire_hello_encode(const struct zl_wire_hello *hl, uint8_t out[ZL_WIRE_HELLO_SIZE])
{
	memset(out, 0, ZL_WIRE_HELLO_SIZE);
	zl_put_le32(out, hl->proto_version);
	zl_put_le32(out + 4, hl->caps);
	memcpy(out + 8, hl->node_id, strnlen(hl->node_id, ZL_WIRE_NAME_LEN - 1));
	memcpy(out + 8 + ZL_WIRE_NAME_LEN, hl->token, strnlen(hl->token, sizeof(hl->token) - 1));
}

int zl_wire_hello_decode(const uint8_t *buf, size_t len, struct zl_wire_hello *hl)
{
	if (len != ZL_WIRE_HELLO_SIZE)
		return -ZL_ERR_PROTO;
	memset(hl, 0, sizeof(*hl));
	hl->proto_version = zl_get_le32(buf);
	hl->caps = zl_get_le32(buf + 4);
	memcpy(hl->node_id, buf + 8, ZL_WIRE_NAME_LEN);
	memcpy(hl->token, buf + 8 + ZL_WIRE_NAME_LEN, sizeof(hl->token));
	if (hl->node_id[ZL_WIRE_NAME_LEN - 1] || hl->token[sizeof(hl->token) - 1])
		return -ZL_ERR_PROTO;
	return 0;
}

void zl_wire_rdma_desc_encode(const struct zl_wire_rdma_desc *d, uint8_t out[ZL_WIRE_RDMA_DESC_SIZE])
{
	zl_put_le64(out, d->addr);
	zl_put_le32(out + 8, d->rkey);
	zl_put_le32(out + 12, d->len);
}

int zl_wire_rdma_desc_decode(const uint8_t *buf, size_t len, struct zl_wire_rdma_desc *d)
{
	if (len != ZL_WIRE_RDMA_DESC_SIZE)
		return -ZL_ERR_PROTO;
	d->addr = zl_get_le64(buf);
	d->rkey = zl_get_le32(buf + 8);
	d->len = zl_get_le32(buf + 12);
	if (d->len == 0 || d->len > ZL_WIRE_MAX_IO)
		return -ZL_ERR_PROTO;
	return 0;
}

const char *zl_wire_op_name(int op)
{
	static const char *const names[] = { "?", "HELLO", "READ", "WRITE", "FLUSH", "DISCARD",
					     "WRITE_ZEROES", "REPL_WRITE", "CHUNK_INFO",
					     "CHUNK_DELETE", "VOLUME_DELETE", "SYNC", "PING",
					     "CHUNK_VERSIONS", "CHUNK_PUSH", "CHUNK_DIGEST",
					     "SCRUB" };

	if (op < 0 || op > ZL_OP_MAX_)
		return "?";
	return names[op];
}

void zl_wire_chunk_vers_encode(const struct zl_wire_chunk_ver *v, uint32_t n, uint8_t *out)
{
	for (uint32_t i = 0; i < n; i++) {
		zl_put_le64(out + i * ZL_WIRE_CHUNK_VER_SIZE, v[i].chunk);
		zl_put_le64(out + i * ZL_WIRE_CHUNK_VER_SIZE + 8, v[i].version);
	}
}

int zl_wire_chunk_vers_decode(const uint8_t *buf, size_t len, struct zl_wire_chunk_ver *v)
{
	size_t n = len / ZL_WIRE_CHUNK_VER_SIZE;

	if (len % ZL_WIRE_CHUNK_VER_SIZE || len > ZL_WIRE_MAX_CTRL)
		return -ZL_ERR_PROTO;
	for (size_t i = 0; i < n; i++) {
		v[i].chunk = zl_get_le64(buf + i * ZL_WIRE_CHUNK_VER_SIZE);
		v[i].version = zl_get_le64(buf + i * ZL_WIRE_CHUNK_VER_SIZE + 8);
	}
	return (int)n;
}

void zl_wire_chunk_digests_encode(const struct zl_wire_chunk_digest *d, uint32_t n, uint8_t *out)
{
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *p = out + (size_t)i * ZL_WIRE_CHUNK_DIGEST_SIZE;

		zl_put_le64(p, d[i].chunk);
		zl_put_le64(p + 8, d[i].version);
		zl_put_le32(p + 16, d[i].digest);
		zl_put_le32(p + 20, d[i].bad_blocks);
	}
}

int zl_wire_chunk_digests_decode(const uint8_t *buf, size_t len, struct zl_wire_chunk_digest *d)
{
	size_t n = len / ZL_WIRE_CHUNK_DIGEST_SIZE;

	if (len % ZL_WIRE_CHUNK_DIGEST_SIZE || len > ZL_WIRE_MAX_CTRL)
		return -ZL_ERR_PROTO;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = buf + i * ZL_WIRE_CHUNK_DIGEST_SIZE;

		d[i].chunk = zl_get_le64(p);
		d[i].version = zl_get_le64(p + 8);
		d[i].digest = zl_get_le32(p + 16);
		d[i].bad_blocks = zl_get_le32(p + 20);
		if (i && d[i].chunk <= d[i - 1].chunk)
			return -ZL_ERR_PROTO;
	}
	return (int)n;
}

void zl_wire_scrub_result_encode(const struct zl_wire_scrub_result *r,
				 uint8_t out[ZL_WIRE_SCRUB_RESULT_SIZE])
{
	zl_put_le64(out, r->chunks_checked);
	zl_put_le64(out + 8, r->bad_found);
	zl_put_le64(out + 16, r->repaired);
	zl_put_le64(out + 24, r->bytes_read);
}

int zl_wire_scrub_result_decode(const uint8_t *buf, size_t len, struct zl_wire_scrub_result *r)
{
	if (len != ZL_WIRE_SCRUB_RESULT_SIZE)
		return -ZL_ERR_PROTO;
	r->chunks_checked = zl_get_le64(buf);
	r->bad_found = zl_get_le64(buf + 8);
	r->repaired = zl_get_le64(buf + 16);
	r->bytes_read = zl_get_le64(buf + 24);
	if (r->repaired > r->bad_found)
		return -ZL_ERR_PROTO;
	return 0;
}
