/* The shared HELLO and transport-choice code of lib/transport/xport_hello.c
 * (used by the volume client and storage replication): what a reply must
 * hold to be accepted, and which transport each selection picks. The send
 * path runs against a real daemon in test/e2e/storage_e2e.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/transport/xport_hello.h"

/* A HELLO reply from node `id` with caps, as the server would send it. */
static void reply_of(struct zl_xport_hello *h, struct zl_wire_hdr *rep, const char *id,
		     uint32_t caps)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->peer, sizeof(h->peer), "127.0.0.1:7100");
	zl_xport_hello_encode(h->in, id, caps, NULL);
	memset(rep, 0, sizeof(*rep));
	rep->opcode = ZL_OP_HELLO;
	rep->flags = ZL_WF_REPLY;
	rep->payload_len = ZL_WIRE_HELLO_SIZE;
}

static void test_hello_encode_fields(void **state)
{
	uint8_t buf[ZL_WIRE_HELLO_SIZE];
	struct zl_wire_hello hl;
	char long_id[200];

	(void)state;
	zl_xport_hello_encode(buf, "node-1", ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_RDMA, "abcd");
	assert_int_equal(zl_wire_hello_decode(buf, sizeof(buf), &hl), 0);
	assert_int_equal(hl.proto_version, ZL_WIRE_VERSION);
	assert_int_equal(hl.caps, 3);
	assert_string_equal(hl.node_id, "node-1");
	assert_string_equal(hl.token, "abcd");
	/* an id longer than the field is cut, never left unterminated */
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = 0;
	zl_xport_hello_encode(buf, long_id, ZL_WIRE_CAP_TCP, NULL);
	assert_int_equal(zl_wire_hello_decode(buf, sizeof(buf), &hl), 0);
	assert_int_equal(strlen(hl.node_id), ZL_WIRE_NAME_LEN - 1);
	assert_string_equal(hl.token, "");
}

static void test_hello_check(void **state)
{
	struct zl_xport_hello h;
	struct zl_wire_hdr rep;
	struct zl_wire_hello hl;

	(void)state;
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", &hl), 0);
	assert_string_equal(hl.node_id, "node-1");
	assert_int_equal(hl.caps, ZL_WIRE_CAP_TCP);
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_RDMA);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), 0);
	/* a server that answers the snapshot-sequence offer */
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_SNAPSEQ);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", &hl), 0);
	assert_int_equal(hl.caps, ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_SNAPSEQ);
	assert_string_equal(zl_xport_caps_name(hl.caps), "tcp");

	/* another node answers at the address */
	reply_of(&h, &rep, "node-2", ZL_WIRE_CAP_TCP);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), -ZL_ERR_CONN);
	/* transport failure: passed through; error status: its code */
	assert_int_equal(zl_xport_hello_check(&h, -ZL_ERR_TIMEOUT, NULL, "node-2", NULL),
			 -ZL_ERR_TIMEOUT);
	rep.status = zl_wire_status_from_err(-ZL_ERR_AUTH);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-2", NULL), -ZL_ERR_AUTH);
	/* caps without TCP, or with unknown bits */
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_RDMA);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), -ZL_ERR_PROTO);
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP | 8u);
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), -ZL_ERR_PROTO);
	/* other protocol version */
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP);
	h.in[0] = ZL_WIRE_VERSION + 1;
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), -ZL_ERR_VERSION);
	/* short payload */
	reply_of(&h, &rep, "node-1", ZL_WIRE_CAP_TCP);
	rep.payload_len = 10;
	assert_int_equal(zl_xport_hello_check(&h, 0, &rep, "node-1", NULL), -ZL_ERR_PROTO);
}

static void test_caps_name(void **state)
{
	(void)state;
	assert_string_equal(zl_xport_caps_name(ZL_WIRE_CAP_TCP), "tcp");
	assert_string_equal(zl_xport_caps_name(ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_RDMA), "tcp,rdma");
	assert_string_equal(zl_xport_caps_name(0), "none");
}

static void test_pick(void **state)
{
	enum zl_xport_kind k = 0;

	(void)state;
	/* tcp: always TCP, whatever the node serves */
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_TCP, "n", "127.0.0.1", 7100, "tcp,rdma", true, 100, &k), 0);
	assert_int_equal(k, ZL_XPORT_TCP);
	/* rdma: the node must serve it (port and list) and we must have it */
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_RDMA, "n", "127.0.0.1", 7100, "tcp,rdma", true, 100, &k), 0);
	assert_int_equal(k, ZL_XPORT_RDMA);
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_RDMA, "n", "127.0.0.1", 7100, "tcp", true, 100, &k),
	    -ZL_ERR_CONN);
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_RDMA, "n", "127.0.0.1", 0, "tcp,rdma", true, 100, &k),
	    -ZL_ERR_CONN);
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_RDMA, "n", "127.0.0.1", 7100, "tcp,rdma", false, 100, &k),
	    -ZL_ERR_CONN);
	/* "rdmax" is not "rdma" */
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_RDMA, "n", "127.0.0.1", 7100, "tcp,rdmax", true, 100, &k),
	    -ZL_ERR_CONN);
	/* auto: TCP when the node or this host has no RDMA (no probe made) */
	k = 0;
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_AUTO, "n", "127.0.0.1", 7100, "tcp", true, 100, &k), 0);
	assert_int_equal(k, ZL_XPORT_TCP);
	k = 0;
	assert_int_equal(
	    zl_xport_pick(ZL_XPORT_SEL_AUTO, "n", "127.0.0.1", 7100, "tcp,rdma", false, 100, &k),
	    0);
	assert_int_equal(k, ZL_XPORT_TCP);
	assert_int_equal(zl_xport_pick(ZL_XPORT_SEL_TCP, "n", NULL, 0, "tcp", true, 100, &k),
			 -ZL_ERR_INVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hello_encode_fields),
	    cmocka_unit_test(test_hello_check),
	    cmocka_unit_test(test_caps_name),
	    cmocka_unit_test(test_pick),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
