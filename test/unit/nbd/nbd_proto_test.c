#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cmocka needs the headers above first. */
#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/nbd/nbd.h"

static uint32_t be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p)
{
	return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static const struct zl_nbd_export exp_any = {
    .name = "",
    .size = 1ull << 30,
    .tflags = ZL_NBD_TFLAG_HAS_FLAGS | ZL_NBD_TFLAG_SEND_FLUSH,
};
static const struct zl_nbd_export exp_named = {
    .name = "disk",
    .size = 8192,
    .tflags = ZL_NBD_TFLAG_HAS_FLAGS,
};

/* Builds GO/INFO data: name, then n info requests. */
static uint32_t go_data(uint8_t *d, const char *name, const uint16_t *req, uint16_t n)
{
	uint32_t nl = (uint32_t)strlen(name), i;

	put32(d, nl);
	memcpy(d + 4, name, nl);
	d[4 + nl] = (uint8_t)(n >> 8);
	d[5 + nl] = (uint8_t)n;
	for (i = 0; i < n; i++) {
		d[6 + nl + 2 * i] = (uint8_t)(req[i] >> 8);
		d[7 + nl + 2 * i] = (uint8_t)req[i];
	}
	return nl + 6 + 2u * n;
}

/* Walks option replies: returns the count, fills types. */
static int walk_replies(const uint8_t *p, size_t len, uint32_t opt, uint32_t *types, int max)
{
	size_t off = 0;
	int n = 0;

	while (off < len) {
		assert_true(len - off >= ZL_NBD_OPT_REPLY_HDR_LEN);
		assert_true(be64(p + off) == ZL_NBD_OPT_REPLY_MAGIC);
		assert_int_equal(be32(p + off + 8), opt);
		assert_true(n < max);
		types[n++] = be32(p + off + 12);
		off += ZL_NBD_OPT_REPLY_HDR_LEN + be32(p + off + 16);
	}
	assert_int_equal(off, len);
	return n;
}

static void test_greeting_and_opt_hdr(void **state)
{
	uint8_t g[ZL_NBD_GREETING_LEN], h[ZL_NBD_OPT_HDR_LEN];
	struct zl_nbd_opt_hdr oh;

	(void)state;
	zl_nbd_greeting_encode(g);
	assert_memory_equal(g, "NBDMAGICIHAVEOPT", 16);
	assert_int_equal(g[16], 0);
	assert_int_equal(g[17], ZL_NBD_FLAG_FIXED_NEWSTYLE | ZL_NBD_FLAG_NO_ZEROES);
	memcpy(h, "IHAVEOPT", 8);
	put32(h + 8, ZL_NBD_OPT_GO);
	put32(h + 12, 77);
	assert_int_equal(zl_nbd_opt_hdr_decode(h, &oh), 0);
	assert_int_equal(oh.option, ZL_NBD_OPT_GO);
	assert_int_equal(oh.length, 77);
	h[0] = 'X';
	assert_int_equal(zl_nbd_opt_hdr_decode(h, &oh), -ZL_ERR_PROTO);
}

static void test_opt_go_info(void **state)
{
	uint8_t d[64], out[ZL_NBD_OPT_OUT_MAX];
	uint16_t reqs[] = {ZL_NBD_INFO_NAME, ZL_NBD_INFO_BLOCK_SIZE};
	struct zl_nbd_opt_hdr h = {.option = ZL_NBD_OPT_GO};
	enum zl_nbd_opt_action act;
	uint32_t types[8];
	size_t len;
	int n;

	(void)state;
	h.length = go_data(d, "whatever", NULL, 0);
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, d, out, sizeof(out), &len, &act), 0);
	assert_int_equal(act, ZL_NBD_ACT_TRANSMIT);
	n = walk_replies(out, len, ZL_NBD_OPT_GO, types, 8);
	assert_int_equal(n, 3);
	assert_int_equal(types[0], ZL_NBD_REP_INFO);
	/* NBD_INFO_EXPORT: type 0, size, flags */
	assert_int_equal(be32(out + 16), 12);
	assert_int_equal(out[20], 0);
	assert_int_equal(out[21], ZL_NBD_INFO_EXPORT);
	assert_true(be64(out + 22) == (1ull << 30));
	assert_int_equal((out[30] << 8) | out[31], exp_any.tflags);
	assert_int_equal(types[1], ZL_NBD_REP_INFO);
	/* block size: min 1, preferred 4096, max 4 MiB */
	assert_int_equal(out[32 + 20 + 1], ZL_NBD_INFO_BLOCK_SIZE);
	assert_int_equal(be32(out + 32 + 22), 1);
	assert_int_equal(be32(out + 32 + 26), 4096);
	assert_int_equal(be32(out + 32 + 30), 4u << 20);
	assert_int_equal(types[2], ZL_NBD_REP_ACK);

	/* INFO keeps negotiating; a NAME request is answered. */
	h.option = ZL_NBD_OPT_INFO;
	h.length = go_data(d, "disk", reqs, 2);
	assert_int_equal(zl_nbd_opt_reply(&exp_named, 0, &h, d, out, sizeof(out), &len, &act), 0);
	assert_int_equal(act, ZL_NBD_ACT_CONTINUE);
	n = walk_replies(out, len, ZL_NBD_OPT_INFO, types, 8);
	assert_int_equal(n, 4);
	assert_int_equal(types[3], ZL_NBD_REP_ACK);

	/* Wrong name for a named export. */
	h.option = ZL_NBD_OPT_GO;
	h.length = go_data(d, "other", NULL, 0);
	assert_int_equal(zl_nbd_opt_reply(&exp_named, 0, &h, d, out, sizeof(out), &len, &act), 0);
	assert_int_equal(act, ZL_NBD_ACT_CONTINUE);
	assert_int_equal(walk_replies(out, len, ZL_NBD_OPT_GO, types, 8), 1);
	assert_int_equal(types[0], ZL_NBD_REP_ERR_UNKNOWN);
}

static void test_opt_go_malformed(void **state)
{
	uint8_t d[64], out[ZL_NBD_OPT_OUT_MAX];
	uint16_t reqs[] = {ZL_NBD_INFO_EXPORT};
	struct zl_nbd_opt_hdr h = {.option = ZL_NBD_OPT_GO};
	enum zl_nbd_opt_action act;
	uint32_t types[4], full;
	size_t len;

	(void)state;
	full = go_data(d, "abc", reqs, 1);
	/* Every truncation and one extension are rejected with ERR_INVALID. */
	for (h.length = 0; h.length <= full + 1; h.length++) {
		if (h.length == full)
			continue;
		assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, d, out, sizeof(out), &len, &act),
				 0);
		assert_int_equal(act, ZL_NBD_ACT_CONTINUE);
		assert_int_equal(walk_replies(out, len, ZL_NBD_OPT_GO, types, 4), 1);
		assert_int_equal(types[0], ZL_NBD_REP_ERR_INVALID);
	}
	/* A name length beyond the data. */
	put32(d, 0xffffffffu);
	h.length = full;
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, d, out, sizeof(out), &len, &act), 0);
	walk_replies(out, len, ZL_NBD_OPT_GO, types, 4);
	assert_int_equal(types[0], ZL_NBD_REP_ERR_INVALID);
	/* Output buffer too small is an error, not an overflow. */
	h.length = go_data(d, "abc", reqs, 1);
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, d, out, 30, &len, &act), -ZL_ERR_INVAL);
}

static void test_opt_others(void **state)
{
	uint8_t out[ZL_NBD_OPT_OUT_MAX];
	struct zl_nbd_opt_hdr h = {0};
	enum zl_nbd_opt_action act;
	uint32_t types[4];
	size_t len;

	(void)state;
	h.option = ZL_NBD_OPT_STARTTLS;
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, NULL, out, sizeof(out), &len, &act), 0);
	walk_replies(out, len, ZL_NBD_OPT_STARTTLS, types, 4);
	assert_int_equal(types[0], ZL_NBD_REP_ERR_POLICY);

	h.option = ZL_NBD_OPT_STRUCTURED_REPLY;
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, NULL, out, sizeof(out), &len, &act), 0);
	walk_replies(out, len, h.option, types, 4);
	assert_int_equal(types[0], ZL_NBD_REP_ERR_UNSUP);
	assert_int_equal(act, ZL_NBD_ACT_CONTINUE);

	h.option = 12345;
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, NULL, out, sizeof(out), &len, &act), 0);
	walk_replies(out, len, h.option, types, 4);
	assert_int_equal(types[0], ZL_NBD_REP_ERR_UNSUP);

	h.option = ZL_NBD_OPT_LIST;
	assert_int_equal(zl_nbd_opt_reply(&exp_named, 0, &h, NULL, out, sizeof(out), &len, &act),
			 0);
	assert_int_equal(walk_replies(out, len, h.option, types, 4), 2);
	assert_int_equal(types[0], ZL_NBD_REP_SERVER);
	assert_int_equal(be32(out + 20), 4);
	assert_memory_equal(out + 24, "disk", 4);
	assert_int_equal(types[1], ZL_NBD_REP_ACK);

	h.option = ZL_NBD_OPT_ABORT;
	assert_int_equal(zl_nbd_opt_reply(&exp_any, 0, &h, NULL, out, sizeof(out), &len, &act), 0);
	assert_int_equal(act, ZL_NBD_ACT_CLOSE);
	walk_replies(out, len, h.option, types, 4);
	assert_int_equal(types[0], ZL_NBD_REP_ACK);
}

static void test_opt_export_name(void **state)
{
	uint8_t out[ZL_NBD_OPT_OUT_MAX];
	struct zl_nbd_opt_hdr h = {.option = ZL_NBD_OPT_EXPORT_NAME, .length = 4};
	enum zl_nbd_opt_action act;
	size_t len;

	(void)state;
	assert_int_equal(zl_nbd_opt_reply(&exp_named, 0, &h, (const uint8_t *)"disk", out,
					  sizeof(out), &len, &act),
			 0);
	assert_int_equal(act, ZL_NBD_ACT_TRANSMIT);
	assert_int_equal(len, 134);
	assert_true(be64(out) == 8192);
	assert_int_equal(zl_nbd_opt_reply(&exp_named, ZL_NBD_FLAG_C_NO_ZEROES, &h,
					  (const uint8_t *)"disk", out, sizeof(out), &len, &act),
			 0);
	assert_int_equal(len, 10);
	assert_int_equal(zl_nbd_opt_reply(&exp_named, 0, &h, (const uint8_t *)"disc", out,
					  sizeof(out), &len, &act),
			 0);
	assert_int_equal(act, ZL_NBD_ACT_CLOSE);
	assert_int_equal(len, 0);
}

static void mkreq(uint8_t *b, uint16_t flags, uint16_t type, uint64_t cookie, uint64_t off,
		  uint32_t len)
{
	put32(b, ZL_NBD_REQUEST_MAGIC);
	b[4] = (uint8_t)(flags >> 8);
	b[5] = (uint8_t)flags;
	b[6] = (uint8_t)(type >> 8);
	b[7] = (uint8_t)type;
	put32(b + 8, (uint32_t)(cookie >> 32));
	put32(b + 12, (uint32_t)cookie);
	put32(b + 16, (uint32_t)(off >> 32));
	put32(b + 20, (uint32_t)off);
	put32(b + 24, len);
}

static void test_request_decode_check(void **state)
{
	uint8_t b[ZL_NBD_REQ_LEN], rep[ZL_NBD_REPLY_LEN];
	struct zl_nbd_req r;
	const uint64_t size = 1 << 20;

	(void)state;
	mkreq(b, ZL_NBD_CMD_FLAG_FUA, ZL_NBD_CMD_WRITE, 0x1122334455667788ull, 4096, 512);
	assert_int_equal(zl_nbd_req_decode(b, &r), 0);
	assert_int_equal(r.flags, ZL_NBD_CMD_FLAG_FUA);
	assert_int_equal(r.type, ZL_NBD_CMD_WRITE);
	assert_true(r.cookie == 0x1122334455667788ull);
	assert_int_equal(r.offset, 4096);
	assert_int_equal(r.length, 512);
	assert_true(zl_nbd_req_has_payload(&r));
	assert_int_equal(zl_nbd_req_check(&r, size), 0);
	b[0] ^= 1;
	assert_int_equal(zl_nbd_req_decode(b, &r), -ZL_ERR_PROTO);

	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_READ, .offset = size - 512, .length = 512};
	assert_int_equal(zl_nbd_req_check(&r, size), 0);
	r.length = 513;
	assert_int_equal(zl_nbd_req_check(&r, size), ZL_NBD_EINVAL);
	r.offset = UINT64_MAX - 10;
	r.length = 100;
	assert_int_equal(zl_nbd_req_check(&r, size), ZL_NBD_EINVAL);
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_READ, .length = 0};
	assert_int_equal(zl_nbd_req_check(&r, size), ZL_NBD_EINVAL);
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_READ, .length = (4u << 20) + 1};
	assert_int_equal(zl_nbd_req_check(&r, 1ull << 40), ZL_NBD_EINVAL);
	r.length = 4u << 20;
	assert_int_equal(zl_nbd_req_check(&r, 1ull << 40), 0);
	/* TRIM/WRITE_ZEROES may exceed the block size (no payload). */
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_TRIM, .length = 64u << 20};
	assert_int_equal(zl_nbd_req_check(&r, 1ull << 40), 0);
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_WRITE_ZEROES,
				.length = 4096,
				.flags = ZL_NBD_CMD_FLAG_NO_HOLE | ZL_NBD_CMD_FLAG_FUA};
	assert_int_equal(zl_nbd_req_check(&r, size), 0);
	r.type = ZL_NBD_CMD_WRITE;
	assert_int_equal(zl_nbd_req_check(&r, size), ZL_NBD_EINVAL); /* NO_HOLE on WRITE */
	r = (struct zl_nbd_req){.type = 5 /* CACHE */, .length = 4096};
	assert_int_equal(zl_nbd_req_check(&r, size), ZL_NBD_EINVAL);
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_FLUSH};
	assert_int_equal(zl_nbd_req_check(&r, size), 0);
	r = (struct zl_nbd_req){.type = ZL_NBD_CMD_DISC};
	assert_int_equal(zl_nbd_req_check(&r, size), 0);
	assert_false(zl_nbd_req_has_payload(&r));

	zl_nbd_reply_encode(rep, ZL_NBD_EIO, 42);
	assert_int_equal(be32(rep), ZL_NBD_SIMPLE_REPLY_MAGIC);
	assert_int_equal(be32(rep + 4), 5);
	assert_true(be64(rep + 8) == 42);
}

static void test_errno_map(void **state)
{
	(void)state;
	assert_int_equal(zl_nbd_errno(0), 0);
	assert_int_equal(zl_nbd_errno(-ZL_ERR_RANGE), ZL_NBD_EINVAL);
	assert_int_equal(zl_nbd_errno(-EINVAL), ZL_NBD_EINVAL);
	assert_int_equal(zl_nbd_errno(-ZL_ERR_NOSPC), ZL_NBD_ENOSPC);
	assert_int_equal(zl_nbd_errno(-ENOSPC), ZL_NBD_ENOSPC);
	assert_int_equal(zl_nbd_errno(-ENOMEM), ZL_NBD_ENOMEM);
	assert_int_equal(zl_nbd_errno(-ZL_ERR_AUTH), ZL_NBD_EPERM);
	assert_int_equal(zl_nbd_errno(-ZL_ERR_UNAVAIL), ZL_NBD_EIO);
	assert_int_equal(zl_nbd_errno(-ZL_ERR_CORRUPT), ZL_NBD_EIO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_greeting_and_opt_hdr),
	    cmocka_unit_test(test_opt_go_info),
	    cmocka_unit_test(test_opt_go_malformed),
	    cmocka_unit_test(test_opt_others),
	    cmocka_unit_test(test_opt_export_name),
	    cmocka_unit_test(test_request_decode_check),
	    cmocka_unit_test(test_errno_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
