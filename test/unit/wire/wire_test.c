/* lib/wire: header layout, round trips of every opcode, and every rejection
 * rule of the decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cmocka needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"

#define VOL 0x1122334455667788ull

/* A valid request of the given opcode (inline TCP form). */
static struct zl_wire_hdr valid_req(unsigned op)
{
	struct zl_wire_hdr h = {
	    .version = ZL_WIRE_VERSION,
	    .opcode = (uint8_t)op,
	    .req_id = 0x0000000700000003ull,
	    .vol_id = VOL,
	    .chunk = 42,
	    .slice_ver = 9,
	    .epoch = 5,
	};

	switch (op) {
	case ZL_OP_HELLO:
		h.payload_len = ZL_WIRE_HELLO_SIZE;
		h.payload_crc = 0xdeadbeef;
		break;
	case ZL_OP_READ:
		h.offset = 8192;
		h.length = 65536;
		break;
	case ZL_OP_WRITE:
		h.offset = 4096;
		h.length = 12345;
		h.payload_len = 12345;
		h.payload_crc = 0x12345678;
		h.flags = ZL_WF_FUA;
		break;
	case ZL_OP_REPL_WRITE:
		h.offset = 0;
		h.length = 4096;
		h.payload_len = 4096;
		h.aux = ZL_OP_WRITE;
		break;
	case ZL_OP_CHUNK_PUSH:
		h.offset = 1 << 20;
		h.length = 1 << 20;
		h.payload_len = 1 << 20;
		h.aux = 0x0000000300000007ull;
		break;
	case ZL_OP_CHUNK_VERSIONS:
		h.offset = 3; /* slice */
		h.aux = 0x0000000200000001ull;
		break;
	case ZL_OP_DISCARD:
	case ZL_OP_WRITE_ZEROES:
		h.offset = 1 << 20;
		h.length = 1 << 20;
		break;
	case ZL_OP_CHUNK_INFO:
	case ZL_OP_CHUNK_DELETE:
	case ZL_OP_FLUSH:
	case ZL_OP_VOLUME_DELETE:
		break;
	case ZL_OP_SYNC:
	case ZL_OP_PING:
		h.aux = 77;
		break;
	}
	return h;
}

static void recrc(uint8_t *b)
{
	uint32_t crc = zl_crc32c(b, 76);

	for (int i = 0; i < 4; i++)
		b[76 + i] = (uint8_t)(crc >> (8 * i));
}

static void assert_hdr_equal(const struct zl_wire_hdr *a, const struct zl_wire_hdr *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->opcode, b->opcode);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->status, b->status);
	assert_int_equal(a->payload_len, b->payload_len);
	assert_int_equal(a->req_id, b->req_id);
	assert_int_equal(a->vol_id, b->vol_id);
	assert_int_equal(a->chunk, b->chunk);
	assert_int_equal(a->offset, b->offset);
	assert_int_equal(a->length, b->length);
	assert_int_equal(a->slice_ver, b->slice_ver);
	assert_int_equal(a->epoch, b->epoch);
	assert_int_equal(a->aux, b->aux);
	assert_int_equal(a->payload_crc, b->payload_crc);
	assert_int_equal(a->snap_seq, b->snap_seq);
}

/* Encodes h, decodes, expects rc; on success the fields round-trip and a
 * re-encode gives the same bytes. */
static int roundtrip(const struct zl_wire_hdr *h)
{
	uint8_t b[ZL_WIRE_HDR_SIZE], b2[ZL_WIRE_HDR_SIZE];
	struct zl_wire_hdr d;
	const char *why = NULL;
	int rc;

	zl_wire_encode(h, b);
	rc = zl_wire_decode(b, sizeof(b), &d, &why);
	if (rc) {
		assert_non_null(why);
		return rc;
	}
	assert_hdr_equal(h, &d);
	zl_wire_encode(&d, b2);
	assert_memory_equal(b, b2, sizeof(b));
	return 0;
}

static int decode_rc(const uint8_t *b, const char **why)
{
	struct zl_wire_hdr d;

	*why = NULL;
	return zl_wire_decode(b, ZL_WIRE_HDR_SIZE, &d, why);
}

static void test_layout(void **state)
{
	struct zl_wire_hdr h = valid_req(ZL_OP_WRITE);
	uint8_t b[ZL_WIRE_HDR_SIZE];

	(void)state;
	h.vol_id = 0x0102030405060708ull;
	zl_wire_encode(&h, b);
	assert_memory_equal(b, "ZLWP", 4);
	assert_int_equal(b[4], ZL_WIRE_VERSION);
	assert_int_equal(b[5], ZL_OP_WRITE);
	assert_int_equal(b[6], ZL_WF_FUA);
	assert_int_equal(b[7], 0);
	/* payload_len 12345 = 0x3039 little-endian at 12 */
	assert_int_equal(b[12], 0x39);
	assert_int_equal(b[13], 0x30);
	assert_int_equal(b[14], 0);
	/* req_id at 16 */
	assert_int_equal(b[16], 0x03);
	assert_int_equal(b[20], 0x07);
	/* vol_id at 24, little-endian */
	assert_int_equal(b[24], 0x08);
	assert_int_equal(b[31], 0x01);
	/* chunk 42 at 32, offset 4096 at 40 */
	assert_int_equal(b[32], 42);
	assert_int_equal(b[41], 0x10);
	/* payload_crc at 72 */
	assert_int_equal(b[72], 0x78);
	assert_int_equal(b[75], 0x12);
	/* hdr_crc at 76 covers 0..75 */
	{
		uint32_t crc = zl_crc32c(b, 76);

		assert_int_equal(b[76], crc & 0xff);
		assert_int_equal(b[79], crc >> 24);
	}
}

static void test_roundtrip_every_opcode(void **state)
{
	(void)state;
	for (unsigned op = ZL_OP_HELLO; op <= ZL_OP_MAX_; op++) {
		struct zl_wire_hdr h = valid_req(op), rep;

		assert_int_equal(roundtrip(&h), 0);

		/* Error reply: no payload. */
		zl_wire_reply_init(&h, &rep, -ZL_ERR_STALE);
		assert_int_equal(rep.flags, ZL_WF_REPLY);
		assert_int_equal(rep.status, ZL_ERR_STALE);
		assert_int_equal(rep.req_id, h.req_id);
		assert_int_equal(rep.opcode, op);
		assert_int_equal(roundtrip(&rep), 0);

		/* Success reply: payload only for READ (data) and HELLO. */
		zl_wire_reply_init(&h, &rep, 0);
		rep.aux = 0xabcdef;
		if (op == ZL_OP_READ)
			rep.payload_len = rep.length;
		if (op == ZL_OP_HELLO)
			rep.payload_len = ZL_WIRE_HELLO_SIZE;
		assert_int_equal(roundtrip(&rep), 0);
	}
	/* RDMA forms: descriptor payloads. */
	{
		struct zl_wire_hdr h = valid_req(ZL_OP_WRITE);

		h.flags |= ZL_WF_RDMA;
		h.payload_len = ZL_WIRE_RDMA_DESC_SIZE;
		assert_int_equal(roundtrip(&h), 0);
		h = valid_req(ZL_OP_READ);
		h.flags = ZL_WF_RDMA;
		h.payload_len = ZL_WIRE_RDMA_DESC_SIZE;
		assert_int_equal(roundtrip(&h), 0);
	}
	/* REPL_WRITE of zeroing opcodes carries no payload. */
	{
		struct zl_wire_hdr h = valid_req(ZL_OP_REPL_WRITE);

		h.aux = ZL_OP_DISCARD;
		h.payload_len = 0;
		assert_int_equal(roundtrip(&h), 0);
		h.aux = ZL_OP_WRITE_ZEROES;
		assert_int_equal(roundtrip(&h), 0);
	}
	/* Extremes: the largest I/O at the end of the largest chunk. */
	{
		struct zl_wire_hdr h = valid_req(ZL_OP_WRITE);

		h.length = h.payload_len = ZL_WIRE_MAX_IO;
		h.offset = ZL_WIRE_MAX_CHUNK - ZL_WIRE_MAX_IO;
		h.req_id = UINT64_MAX;
		h.chunk = UINT64_MAX;
		h.epoch = UINT64_MAX;
		assert_int_equal(roundtrip(&h), 0);
	}
}

static void test_reject_framing(void **state)
{
	struct zl_wire_hdr h = valid_req(ZL_OP_READ), d;
	uint8_t b[ZL_WIRE_HDR_SIZE], t[ZL_WIRE_HDR_SIZE];
	const char *why;

	(void)state;
	zl_wire_encode(&h, b);
	assert_int_equal(decode_rc(b, &why), 0);

	/* truncated */
	for (size_t len = 0; len < ZL_WIRE_HDR_SIZE; len += 13) {
		why = NULL;
		assert_int_equal(zl_wire_decode(b, len, &d, &why), -ZL_ERR_PROTO);
		assert_non_null(strstr(why, "truncated"));
	}
	assert_int_equal(zl_wire_decode(b, ZL_WIRE_HDR_SIZE - 1, &d, NULL), -ZL_ERR_PROTO);

	/* bad magic (with a correct CRC, so the magic check is what fires) */
	memcpy(t, b, sizeof(t));
	t[0] ^= 0x20;
	recrc(t);
	assert_int_equal(decode_rc(t, &why), -ZL_ERR_PROTO);
	assert_non_null(strstr(why, "magic"));

	/* header CRC: any flipped bit anywhere in 0..79 */
	for (int i = 4; i < ZL_WIRE_HDR_SIZE; i++) {
		memcpy(t, b, sizeof(t));
		t[i] ^= (uint8_t)(1u << (i % 8));
		assert_int_equal(decode_rc(t, &why), -ZL_ERR_PROTO);
		assert_non_null(strstr(why, "CRC"));
	}

	/* version */
	memcpy(t, b, sizeof(t));
	t[4] = ZL_WIRE_VERSION + 1;
	recrc(t);
	assert_int_equal(decode_rc(t, &why), -ZL_ERR_VERSION);
	t[4] = 0;
	recrc(t);
	assert_int_equal(decode_rc(t, &why), -ZL_ERR_VERSION);

	/* reserved bytes */
	memcpy(t, b, sizeof(t));
	t[7] = 1;
	recrc(t);
	assert_int_equal(decode_rc(t, &why), -ZL_ERR_PROTO);
	assert_non_null(strstr(why, "reserved"));
	memcpy(t, b, sizeof(t));
	t[11] = 0x80;
	recrc(t);
	assert_int_equal(decode_rc(t, &why), -ZL_ERR_PROTO);
	assert_non_null(strstr(why, "reserved"));
}

static void expect_reject(const struct zl_wire_hdr *h, int rc, const char *why_part)
{
	uint8_t b[ZL_WIRE_HDR_SIZE];
	const char *why;

	zl_wire_encode(h, b);
	assert_int_equal(decode_rc(b, &why), rc);
	assert_non_null(why);
	if (why_part && !strstr(why, why_part))
		fail_msg("reason \"%s\" does not mention \"%s\"", why, why_part);
}

static void test_reject_fields(void **state)
{
	struct zl_wire_hdr h;

	(void)state;
	/* unknown opcodes */
	h = valid_req(ZL_OP_PING);
	h.opcode = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "opcode");
	h.opcode = ZL_OP_MAX_ + 1;
	expect_reject(&h, -ZL_ERR_PROTO, "opcode");
	h.opcode = 255;
	expect_reject(&h, -ZL_ERR_PROTO, "opcode");

	/* unknown flags */
	for (unsigned bit = 3; bit < 8; bit++) {
		if ((1u << bit) == ZL_WF_ANY || (1u << bit) == ZL_WF_SEQ || /* test_snap_seq */
		    (1u << bit) == ZL_WF_ABSENT || (1u << bit) == ZL_WF_CREATE) /* test_clone */
			continue;
		h = valid_req(ZL_OP_READ);
		h.flags = (uint8_t)(1u << bit);
		expect_reject(&h, -ZL_ERR_PROTO, "flag");
	}

	/* ANY only on READ */
	h = valid_req(ZL_OP_WRITE);
	h.flags = ZL_WF_ANY;
	expect_reject(&h, -ZL_ERR_PROTO, "ANY");
	h = valid_req(ZL_OP_READ);
	h.flags = ZL_WF_ANY;
	assert_int_equal(roundtrip(&h), 0);

	/* status on a request */
	h = valid_req(ZL_OP_READ);
	h.status = ZL_ERR_IO;
	expect_reject(&h, -ZL_ERR_PROTO, "status");

	/* FUA only on writes */
	h = valid_req(ZL_OP_READ);
	h.flags = ZL_WF_FUA;
	expect_reject(&h, -ZL_ERR_PROTO, "FUA");

	/* oversized payload */
	h = valid_req(ZL_OP_WRITE);
	h.payload_len = ZL_WIRE_MAX_IO + 1;
	h.length = ZL_WIRE_MAX_IO + 1;
	expect_reject(&h, -ZL_ERR_PROTO, "too large");
	h = valid_req(ZL_OP_PING);
	h.payload_len = UINT32_MAX;
	expect_reject(&h, -ZL_ERR_PROTO, "too large");

	/* oversized length */
	h = valid_req(ZL_OP_READ);
	h.length = ZL_WIRE_MAX_IO + 1;
	expect_reject(&h, -ZL_ERR_RANGE, "READ length");
	h.length = 0;
	expect_reject(&h, -ZL_ERR_RANGE, "READ length");
	h = valid_req(ZL_OP_DISCARD);
	h.length = 0;
	expect_reject(&h, -ZL_ERR_RANGE, "zero length");

	/* offset + length beyond the largest chunk (no u32 wrap) */
	h = valid_req(ZL_OP_READ);
	h.offset = ZL_WIRE_MAX_CHUNK - 4096;
	h.length = 8192;
	expect_reject(&h, -ZL_ERR_RANGE, "beyond");
	h.offset = UINT32_MAX;
	h.length = 4096;
	expect_reject(&h, -ZL_ERR_RANGE, "beyond");
	h = valid_req(ZL_OP_WRITE_ZEROES);
	h.offset = 0;
	h.length = ZL_WIRE_MAX_CHUNK + 1;
	expect_reject(&h, -ZL_ERR_RANGE, "beyond");

	/* WRITE payload_len != length */
	h = valid_req(ZL_OP_WRITE);
	h.payload_len = h.length - 1;
	expect_reject(&h, -ZL_ERR_PROTO, "payload_len != length");
	h = valid_req(ZL_OP_REPL_WRITE);
	h.payload_len = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "payload_len != length");
	h = valid_req(ZL_OP_WRITE);
	h.flags |= ZL_WF_RDMA; /* descriptor must be 16 bytes */
	expect_reject(&h, -ZL_ERR_PROTO, "payload_len != length");

	/* REPL_WRITE of an opcode that is not a write */
	h = valid_req(ZL_OP_REPL_WRITE);
	h.aux = ZL_OP_READ;
	expect_reject(&h, -ZL_ERR_PROTO, "REPL_WRITE");
	h = valid_req(ZL_OP_REPL_WRITE);
	h.aux = ZL_OP_DISCARD; /* zeroing carries no payload */
	expect_reject(&h, -ZL_ERR_PROTO, NULL);

	/* payloads where none belongs */
	h = valid_req(ZL_OP_READ);
	h.payload_len = 1;
	expect_reject(&h, -ZL_ERR_PROTO, "READ request payload");
	h = valid_req(ZL_OP_PING);
	h.payload_len = 8;
	expect_reject(&h, -ZL_ERR_PROTO, "control");
	h = valid_req(ZL_OP_PING);
	h.length = 8;
	expect_reject(&h, -ZL_ERR_PROTO, "control");
	h = valid_req(ZL_OP_DISCARD);
	h.payload_len = 4096;
	expect_reject(&h, -ZL_ERR_PROTO, "payload");
	h = valid_req(ZL_OP_FLUSH);
	h.offset = 4096;
	expect_reject(&h, -ZL_ERR_PROTO, "range");
	h = valid_req(ZL_OP_CHUNK_INFO);
	h.length = 4096;
	expect_reject(&h, -ZL_ERR_PROTO, "range");

	/* HELLO size */
	h = valid_req(ZL_OP_HELLO);
	h.payload_len = ZL_WIRE_HELLO_SIZE - 1;
	expect_reject(&h, -ZL_ERR_PROTO, "HELLO");

	/* zero volume id on volume opcodes */
	h = valid_req(ZL_OP_WRITE);
	h.vol_id = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "volume id");
	h = valid_req(ZL_OP_FLUSH);
	h.vol_id = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "volume id");
	h = valid_req(ZL_OP_CHUNK_DELETE);
	h.vol_id = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "volume id");
	/* READ (zl_wire_check's short path for plain READs) */
	h = valid_req(ZL_OP_READ);
	h.vol_id = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "volume id");
}

static void test_reject_replies(void **state)
{
	struct zl_wire_hdr req = valid_req(ZL_OP_READ), rep;

	(void)state;
	zl_wire_reply_init(&req, &rep, 0);
	rep.payload_len = rep.length - 1;
	expect_reject(&rep, -ZL_ERR_PROTO, "READ reply");
	/* Checked as such (decode refuses the payload size first). */
	rep.length = rep.payload_len = ZL_WIRE_MAX_IO + 1;
	assert_int_equal(zl_wire_check(&rep, 0, NULL), -ZL_ERR_PROTO);
	rep.length = rep.payload_len = ZL_WIRE_MAX_IO;
	assert_int_equal(zl_wire_check(&rep, 0, NULL), 0);
	rep.status = ZL_ERR_IO;
	assert_int_equal(zl_wire_check(&rep, 0, NULL), -ZL_ERR_PROTO);

	req = valid_req(ZL_OP_PING);
	zl_wire_reply_init(&req, &rep, 0);
	rep.payload_len = 4;
	expect_reject(&rep, -ZL_ERR_PROTO, "unexpected payload");

	/* an error reply never carries data, even for READ */
	req = valid_req(ZL_OP_READ);
	zl_wire_reply_init(&req, &rep, -ZL_ERR_IO);
	rep.payload_len = rep.length;
	expect_reject(&rep, -ZL_ERR_PROTO, "unexpected payload");

	req = valid_req(ZL_OP_HELLO);
	zl_wire_reply_init(&req, &rep, 0);
	rep.payload_len = 0;
	expect_reject(&rep, -ZL_ERR_PROTO, "HELLO");
}

/* Data versions in REPL_WRITE (ZL_WF_DVER), CHUNK_VERSIONS pairs, CHUNK_PUSH. */
static void test_heal_ops(void **state)
{
	struct zl_wire_hdr h = valid_req(ZL_OP_REPL_WRITE), rep;
	struct zl_wire_chunk_ver in[3] = {{1, zl_wire_dver_make(2, 7)},
					  {UINT64_MAX, UINT64_MAX},
					  {0, 0}},
				 out[ZL_WIRE_VERS_MAX];
	uint8_t buf[ZL_WIRE_MAX_CTRL + 16];
	uint8_t b[ZL_WIRE_HDR_SIZE];

	(void)state;
	/* versions order by term first */
	assert_true(zl_wire_dver_make(2, 0) > zl_wire_dver_make(1, UINT32_MAX));
	assert_int_equal(zl_wire_dver_term(zl_wire_dver_make(5, 9)), 5);
	assert_int_equal(zl_wire_dver_seq(zl_wire_dver_make(5, 9)), 9);

	/* REPL_WRITE with a data version: subop holds the opcode, byte 7 */
	h.flags = ZL_WF_DVER | ZL_WF_FUA;
	h.subop = ZL_OP_WRITE;
	h.aux = zl_wire_dver_make(3, 1);
	assert_int_equal(roundtrip(&h), 0);
	zl_wire_encode(&h, b);
	assert_int_equal(b[7], ZL_OP_WRITE);
	assert_int_equal(zl_wire_repl_op(&h), ZL_OP_WRITE);
	h.subop = ZL_OP_DISCARD;
	h.payload_len = 0;
	assert_int_equal(roundtrip(&h), 0);
	assert_int_equal(zl_wire_repl_op(&h), ZL_OP_DISCARD);
	h.subop = ZL_OP_READ;
	expect_reject(&h, -ZL_ERR_PROTO, "unknown opcode");
	/* without DVER the old meaning of aux stays, and subop must be 0 */
	h = valid_req(ZL_OP_REPL_WRITE);
	assert_int_equal(zl_wire_repl_op(&h), ZL_OP_WRITE);
	h.subop = ZL_OP_WRITE;
	expect_reject(&h, -ZL_ERR_PROTO, "reserved");
	h = valid_req(ZL_OP_WRITE);
	h.flags |= ZL_WF_DVER;
	expect_reject(&h, -ZL_ERR_PROTO, "DVER");

	/* CHUNK_VERSIONS: no payload in the request, pairs in the reply */
	h = valid_req(ZL_OP_CHUNK_VERSIONS);
	h.payload_len = 16;
	expect_reject(&h, -ZL_ERR_PROTO, "no payload");
	h = valid_req(ZL_OP_CHUNK_VERSIONS);
	zl_wire_reply_init(&h, &rep, 0);
	rep.payload_len = ZL_WIRE_MAX_CTRL;
	assert_int_equal(roundtrip(&rep), 0);
	rep.payload_len = 24;
	expect_reject(&rep, -ZL_ERR_PROTO, "CHUNK_VERSIONS");
	rep.payload_len = ZL_WIRE_MAX_CTRL + 16;
	expect_reject(&rep, -ZL_ERR_PROTO, "CHUNK_VERSIONS");
	zl_wire_chunk_vers_encode(in, 3, buf);
	assert_int_equal(zl_wire_chunk_vers_decode(buf, 48, out), 3);
	for (int i = 0; i < 3; i++) {
		assert_true(out[i].chunk == in[i].chunk);
		assert_true(out[i].version == in[i].version);
	}
	assert_int_equal(zl_wire_chunk_vers_decode(buf, 47, out), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_chunk_vers_decode(buf, sizeof(buf), out), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_chunk_vers_decode(buf, 0, out), 0);

	/* CHUNK_PUSH: ranged like WRITE */
	h = valid_req(ZL_OP_CHUNK_PUSH);
	h.payload_len = h.length - 1;
	expect_reject(&h, -ZL_ERR_PROTO, "payload_len");
	h = valid_req(ZL_OP_CHUNK_PUSH);
	h.offset = ZL_WIRE_MAX_CHUNK - 4096;
	expect_reject(&h, -ZL_ERR_RANGE, "beyond");
	assert_string_equal(zl_wire_op_name(ZL_OP_CHUNK_PUSH), "CHUNK_PUSH");
	assert_string_equal(zl_wire_op_name(ZL_OP_CHUNK_VERSIONS), "CHUNK_VERSIONS");
}

static void test_scrub_codecs(void **state)
{
	struct zl_wire_chunk_digest in[3] = {
	    {.chunk = 1, .version = zl_wire_dver_make(2, 7), .digest = 0xdeadbeef, .bad_blocks = 0},
	    {.chunk = 65, .version = 5, .digest = 0, .bad_blocks = ZL_WIRE_DIGEST_MISSING},
	    {.chunk = UINT64_MAX, .version = UINT64_MAX, .digest = 1, .bad_blocks = 3},
	};
	struct zl_wire_chunk_digest out[ZL_WIRE_DIGESTS_MAX];
	struct zl_wire_scrub_result r = {.chunks_checked = 64, .bad_found = 2, .repaired = 2,
					 .bytes_read = 1ull << 40},
				    r2;
	struct zl_wire_hdr h, rep;
	uint8_t buf[ZL_WIRE_MAX_CTRL + 24], rb[ZL_WIRE_SCRUB_RESULT_SIZE];

	(void)state;
	assert_int_equal(ZL_WIRE_DIGESTS_MAX, 170);
	zl_wire_chunk_digests_encode(in, 3, buf);
	/* little-endian layout: chunk @0, version @8, digest @16, bad @20 */
	assert_int_equal(buf[24], 65);
	assert_int_equal(buf[24 + 20], 0xff);
	assert_int_equal(buf[16], 0xef);
	assert_int_equal(zl_wire_chunk_digests_decode(buf, 72, out), 3);
	for (int i = 0; i < 3; i++) {
		assert_true(out[i].chunk == in[i].chunk);
		assert_true(out[i].version == in[i].version);
		assert_int_equal(out[i].digest, in[i].digest);
		assert_int_equal(out[i].bad_blocks, in[i].bad_blocks);
	}
	assert_int_equal(zl_wire_chunk_digests_decode(buf, 0, out), 0);
	assert_int_equal(zl_wire_chunk_digests_decode(buf, 71, out), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_chunk_digests_decode(buf, 4104, out), -ZL_ERR_PROTO);
	/* chunks must increase: a repeated or backwards record is refused */
	in[1].chunk = 1;
	zl_wire_chunk_digests_encode(in, 3, buf);
	assert_int_equal(zl_wire_chunk_digests_decode(buf, 72, out), -ZL_ERR_PROTO);
	/* the largest reply fits ZL_WIRE_MAX_CTRL */
	for (uint32_t i = 0; i < ZL_WIRE_DIGESTS_MAX; i++)
		out[i] = (struct zl_wire_chunk_digest){.chunk = i * 3 + 2, .version = i};
	zl_wire_chunk_digests_encode(out, ZL_WIRE_DIGESTS_MAX, buf);
	assert_int_equal(zl_wire_chunk_digests_decode(buf, ZL_WIRE_DIGESTS_MAX * 24, out),
			 (int)ZL_WIRE_DIGESTS_MAX);
	assert_true(out[169].chunk == 169 * 3 + 2);

	zl_wire_scrub_result_encode(&r, rb);
	assert_int_equal(zl_wire_scrub_result_decode(rb, sizeof(rb), &r2), 0);
	assert_true(r2.chunks_checked == 64 && r2.bad_found == 2 && r2.repaired == 2);
	assert_true(r2.bytes_read == 1ull << 40);
	assert_int_equal(zl_wire_scrub_result_decode(rb, sizeof(rb) - 1, &r2), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_scrub_result_decode(rb, 0, &r2), -ZL_ERR_PROTO);
	r.repaired = 3;
	zl_wire_scrub_result_encode(&r, rb);
	assert_int_equal(zl_wire_scrub_result_decode(rb, sizeof(rb), &r2), -ZL_ERR_PROTO);

	/* headers: requests carry nothing, replies at most ZL_WIRE_MAX_CTRL */
	h = valid_req(ZL_OP_CHUNK_DIGEST);
	h.length = 0;
	h.payload_len = 0;
	assert_int_equal(zl_wire_check(&h, 0, NULL), 0);
	h.payload_len = 24;
	assert_int_equal(zl_wire_check(&h, 0, NULL), -ZL_ERR_PROTO);
	h = valid_req(ZL_OP_SCRUB);
	h.length = 0;
	h.payload_len = 0;
	assert_int_equal(zl_wire_check(&h, 0, NULL), 0);
	zl_wire_reply_init(&h, &rep, 0);
	rep.payload_len = ZL_WIRE_SCRUB_RESULT_SIZE;
	assert_int_equal(zl_wire_check(&rep, 0, NULL), 0);
	rep.payload_len = ZL_WIRE_MAX_CTRL + 1;
	assert_int_equal(zl_wire_check(&rep, 0, NULL), -ZL_ERR_PROTO);
	assert_string_equal(zl_wire_op_name(ZL_OP_CHUNK_DIGEST), "CHUNK_DIGEST");
	assert_string_equal(zl_wire_op_name(ZL_OP_SCRUB), "SCRUB");
}

static void test_check_chunk_size(void **state)
{
	struct zl_wire_hdr h = valid_req(ZL_OP_READ);
	const char *why = NULL;

	(void)state;
	h.offset = (1u << 20) - 8192;
	h.length = 8192;
	assert_int_equal(zl_wire_check(&h, 1u << 20, &why), 0);
	h.length = 8193;
	assert_int_equal(zl_wire_check(&h, 1u << 20, &why), -ZL_ERR_RANGE);
	assert_non_null(why);
	/* without a chunk size only the global maximum applies */
	assert_int_equal(zl_wire_check(&h, 0, NULL), 0);
}

static void test_hello(void **state)
{
	struct zl_wire_hello hl = {.proto_version = 1, .caps = 3}, d;
	uint8_t b[ZL_WIRE_HELLO_SIZE];

	(void)state;
	strcpy(hl.node_id, "storage-0.zipline");
	strcpy(hl.token, "tok");
	zl_wire_hello_encode(&hl, b);
	assert_int_equal(zl_wire_hello_decode(b, sizeof(b), &d), 0);
	assert_int_equal(d.proto_version, 1);
	assert_int_equal(d.caps, 3);
	assert_string_equal(d.node_id, "storage-0.zipline");
	assert_string_equal(d.token, "tok");

	assert_int_equal(zl_wire_hello_decode(b, sizeof(b) - 1, &d), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_hello_decode(b, 0, &d), -ZL_ERR_PROTO);
	/* unterminated strings */
	memset(b + 8, 'a', ZL_WIRE_NAME_LEN);
	assert_int_equal(zl_wire_hello_decode(b, sizeof(b), &d), -ZL_ERR_PROTO);
	zl_wire_hello_encode(&hl, b);
	memset(b + 8 + ZL_WIRE_NAME_LEN, 'b', 128);
	assert_int_equal(zl_wire_hello_decode(b, sizeof(b), &d), -ZL_ERR_PROTO);

	/* over-long node id is truncated on encode, never unterminated */
	memset(hl.node_id, 'x', sizeof(hl.node_id));
	zl_wire_hello_encode(&hl, b);
	assert_int_equal(zl_wire_hello_decode(b, sizeof(b), &d), 0);
	assert_int_equal(strlen(d.node_id), ZL_WIRE_NAME_LEN - 1);
}

static void test_rdma_desc(void **state)
{
	struct zl_wire_rdma_desc in = {.addr = 0x7f0012345000ull, .rkey = 0xabcd1234, .len = 4096};
	struct zl_wire_rdma_desc out;
	uint8_t b[ZL_WIRE_RDMA_DESC_SIZE];

	(void)state;
	zl_wire_rdma_desc_encode(&in, b);
	assert_int_equal(zl_wire_rdma_desc_decode(b, sizeof(b), &out), 0);
	assert_int_equal(out.addr, in.addr);
	assert_int_equal(out.rkey, in.rkey);
	assert_int_equal(out.len, in.len);
	assert_int_equal(zl_wire_rdma_desc_decode(b, sizeof(b) + 1, &out), -ZL_ERR_PROTO);
	assert_int_equal(zl_wire_rdma_desc_decode(b, sizeof(b) - 1, &out), -ZL_ERR_PROTO);
	in.len = 0;
	zl_wire_rdma_desc_encode(&in, b);
	assert_int_equal(zl_wire_rdma_desc_decode(b, sizeof(b), &out), -ZL_ERR_PROTO);
	in.len = ZL_WIRE_MAX_IO + 1;
	zl_wire_rdma_desc_encode(&in, b);
	assert_int_equal(zl_wire_rdma_desc_decode(b, sizeof(b), &out), -ZL_ERR_PROTO);
}

static void test_names_and_status(void **state)
{
	(void)state;
	assert_string_equal(zl_wire_op_name(ZL_OP_READ), "READ");
	assert_string_equal(zl_wire_op_name(ZL_OP_PING), "PING");
	assert_string_equal(zl_wire_op_name(0), "?");
	assert_string_equal(zl_wire_op_name(ZL_OP_MAX_ + 1), "?");
	assert_string_equal(zl_wire_op_name(-1), "?");
	assert_int_equal(zl_wire_status_from_err(-ZL_ERR_STALE), ZL_ERR_STALE);
	assert_int_equal(zl_wire_status_to_err(ZL_ERR_STALE), -ZL_ERR_STALE);
	assert_int_equal(zl_wire_status_from_err(0), 0);
	assert_int_equal(zl_wire_status_from_err(-0x12345), 0xffff);
}

/* ZL_WF_SEQ: the snapshot sequence in bytes 8..11 of a data request. */
static void test_snap_seq(void **state)
{
	static const unsigned ops[] = {ZL_OP_WRITE, ZL_OP_DISCARD, ZL_OP_WRITE_ZEROES,
				       ZL_OP_REPL_WRITE};
	uint8_t b[ZL_WIRE_HDR_SIZE];
	struct zl_wire_hdr h, d;
	const char *why;

	(void)state;
	for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		h = valid_req(ops[i]);
		h.flags |= ZL_WF_SEQ;
		h.snap_seq = ZL_WIRE_SEQ_MAX;
		zl_wire_encode(&h, b);
		assert_int_equal(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24,
				 ZL_WIRE_SEQ_MAX);
		assert_int_equal(zl_wire_decode(b, sizeof(b), &d, &why), 0);
		assert_int_equal(d.snap_seq, ZL_WIRE_SEQ_MAX);
		assert_int_equal(d.status, 0);
		assert_hdr_equal(&h, &d);
	}
	/* Sequence 0 with the flag (never snapshotted) is a sequence too. */
	h = valid_req(ZL_OP_WRITE);
	h.flags |= ZL_WF_SEQ;
	zl_wire_encode(&h, b);
	assert_int_equal(zl_wire_decode(b, sizeof(b), &d, &why), 0);
	assert_int_equal(d.snap_seq, 0);
	/* Above 24 bits: the top byte is not a sequence. */
	b[11] = 1;
	recrc(b);
	assert_int_equal(decode_rc(b, &why), -ZL_ERR_PROTO);
	assert_non_null(strstr(why, "sequence"));
	/* Without the flag a host snap_seq would be encoded away: the check
	 * a sender runs refuses it. */
	h = valid_req(ZL_OP_WRITE);
	h.snap_seq = 3;
	assert_int_equal(zl_wire_check(&h, 0, &why), -ZL_ERR_PROTO);
	assert_non_null(strstr(why, "without the SEQ flag"));
	/* A READ with it reads a snapshot: sequence 1 or later, also with ANY. */
	h = valid_req(ZL_OP_READ);
	h.flags |= ZL_WF_SEQ | ZL_WF_ANY;
	h.snap_seq = 1;
	zl_wire_encode(&h, b);
	assert_int_equal(zl_wire_decode(b, sizeof(b), &d, &why), 0);
	assert_hdr_equal(&h, &d);
	h.snap_seq = 0;
	expect_reject(&h, -ZL_ERR_PROTO, "sequence 0");
	/* A CHUNK_PUSH of a clone chunk carries its lo (0 included). */
	h = valid_req(ZL_OP_CHUNK_PUSH);
	h.flags |= ZL_WF_SEQ;
	h.snap_seq = 0;
	zl_wire_encode(&h, b);
	assert_int_equal(zl_wire_decode(b, sizeof(b), &d, &why), 0);
	assert_hdr_equal(&h, &d);
	/* Only on READ and requests that change data. */
	h = valid_req(ZL_OP_CHUNK_VERSIONS);
	h.flags |= ZL_WF_SEQ;
	expect_reject(&h, -ZL_ERR_PROTO, "changes data");
	/* Never on a reply: its bytes 8..11 are status and rsvd. */
	h = valid_req(ZL_OP_WRITE);
	zl_wire_reply_init(&h, &d, 0);
	d.flags |= ZL_WF_SEQ;
	expect_reject(&d, -ZL_ERR_PROTO, "reply");
}

/* ZL_WF_ABSENT and ZL_WF_CREATE (docs/SNAPSHOTS.md §4): the byte's last two
 * bits; each only on the opcodes that take it, never on a reply, never
 * together. */
static void test_clone_flags(void **state)
{
	static const uint8_t absent_ok[] = {ZL_OP_READ, ZL_OP_WRITE, ZL_OP_DISCARD,
					    ZL_OP_WRITE_ZEROES};
	static const uint8_t absent_bad[] = {ZL_OP_REPL_WRITE, ZL_OP_FLUSH, ZL_OP_CHUNK_PUSH,
					     ZL_OP_PING};
	static const uint8_t create_bad[] = {ZL_OP_READ, ZL_OP_DISCARD, ZL_OP_WRITE_ZEROES,
					     ZL_OP_CHUNK_PUSH};
	struct zl_wire_hdr h, d;

	(void)state;
	assert_int_equal(ZL_WF_ALL_, 0xff);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(absent_ok); i++) {
		h = valid_req(absent_ok[i]);
		h.flags |= ZL_WF_ABSENT;
		assert_int_equal(roundtrip(&h), 0);
		/* With a snapshot's sequence too (a clone's snapshot read). */
		h.flags |= ZL_WF_SEQ;
		h.snap_seq = 3;
		assert_int_equal(roundtrip(&h), 0);
	}
	for (size_t i = 0; i < ZL_ARRAY_SIZE(absent_bad); i++) {
		h = valid_req(absent_bad[i]);
		h.flags |= ZL_WF_ABSENT;
		expect_reject(&h, -ZL_ERR_PROTO, "ABSENT");
	}
	h = valid_req(ZL_OP_WRITE);
	h.flags |= ZL_WF_CREATE;
	assert_int_equal(roundtrip(&h), 0);
	h = valid_req(ZL_OP_REPL_WRITE);
	h.flags |= ZL_WF_CREATE | ZL_WF_SEQ;
	h.snap_seq = 2;
	assert_int_equal(roundtrip(&h), 0);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(create_bad); i++) {
		h = valid_req(create_bad[i]);
		h.flags |= ZL_WF_CREATE;
		expect_reject(&h, -ZL_ERR_PROTO, "CREATE");
	}
	h = valid_req(ZL_OP_WRITE);
	h.flags |= ZL_WF_CREATE | ZL_WF_ABSENT;
	expect_reject(&h, -ZL_ERR_PROTO, "together");
	/* Never on a reply: the answer is a status (ABSENT, EXISTS). */
	h = valid_req(ZL_OP_READ);
	zl_wire_reply_init(&h, &d, -ZL_ERR_ABSENT);
	assert_int_equal(zl_wire_status_to_err(d.status), -ZL_ERR_ABSENT);
	d.flags |= ZL_WF_ABSENT;
	expect_reject(&d, -ZL_ERR_PROTO, "reply");
	h = valid_req(ZL_OP_WRITE);
	zl_wire_reply_init(&h, &d, -ZL_ERR_EXISTS);
	d.flags |= ZL_WF_CREATE;
	expect_reject(&d, -ZL_ERR_PROTO, "reply");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_layout),
	    cmocka_unit_test(test_clone_flags),
	    cmocka_unit_test(test_roundtrip_every_opcode),
	    cmocka_unit_test(test_reject_framing),
	    cmocka_unit_test(test_reject_fields),
	    cmocka_unit_test(test_reject_replies),
	    cmocka_unit_test(test_heal_ops),
	    cmocka_unit_test(test_check_chunk_size),
	    cmocka_unit_test(test_scrub_codecs),
	    cmocka_unit_test(test_hello),
	    cmocka_unit_test(test_rdma_desc),
	    cmocka_unit_test(test_names_and_status),
	    cmocka_unit_test(test_snap_seq),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
