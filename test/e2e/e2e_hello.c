/* e2e_hello HOST PORT NODE_ID [tcp|rdma]: connects to a zipline-storage
 * daemon, sends HELLO through the shared code the client and replication use
 * (lib/transport/xport_hello.c), checks the reply and prints
 *   node=<id> version=<n> caps=<tcp|tcp,rdma>
 * Exit 0 when the reply passed zl_xport_hello_check for NODE_ID, else 1 with
 * the reason on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/transport/xport_hello.h"
#include "e2e_cred.h"

struct hello_wait {
	struct zl_xport_hello h;
	struct zl_wire_hdr rep;
	int status;
	bool done;
};

static void hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct hello_wait *w = arg;

	w->status = status;
	if (rep)
		w->rep = *rep;
	w->done = true;
}

static void close_cb(void *arg, struct zl_xport_conn *c, int reason)
{
	(void)arg;
	(void)c;
	(void)reason;
}

int main(int argc, char **argv)
{
	char cred_tok[ZL_AUTH_TOKEN_HEX + 1];
	struct zl_xport_cred cred;
	const char *self_id = "e2e-hello";
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP, .timeout_ms = 5000};
	static struct hello_wait w;
	struct zl_xport_conn *c = NULL;
	struct zl_xport *x = NULL;
	struct zl_loop *loop = NULL;
	struct zl_wire_hello hl;
	uint64_t deadline;
	int rc, ret = 1;
	bool tls;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: e2e_hello HOST PORT NODE_ID [tcp|rdma]\n");
		return 2;
	}
	if (argc == 5 && !strcmp(argv[4], "rdma"))
		xo.kind = ZL_XPORT_RDMA;
	tls = e2e_tls_opts(&xo) && xo.kind == ZL_XPORT_TCP;
	if (e2e_cred(&self_id, cred_tok, &cred))
		return 1;
	rc = zl_loop_create(&loop);
	if (!rc)
		rc = zl_xport_create(loop, &xo, &x);
	if (rc) {
		fprintf(stderr, "e2e_hello: cannot create the %s transport: %s\n",
			zl_xport_kind_name(xo.kind), zl_strerror(rc));
		goto out;
	}
	rc = e2e_connect(x, tls, argv[1], (uint16_t)atoi(argv[2]), close_cb, &c);
	if (rc) {
		fprintf(stderr, "e2e_hello: connect %s:%s failed: %s\n", argv[1], argv[2],
			zl_strerror(rc));
		goto out;
	}
	rc = zl_xport_hello_send_cred(c, &w.h, self_id, &cred, hello_cb, &w);
	if (rc) {
		fprintf(stderr, "e2e_hello: HELLO not sent: %s\n", zl_strerror(rc));
		goto out;
	}
	deadline = zl_now_ms() + 5000;
	while (!w.done && zl_now_ms() < deadline)
		zl_loop_run_once(loop, 50);
	if (!w.done) {
		fprintf(stderr, "e2e_hello: no HELLO reply within 5 s\n");
		goto out;
	}
	rc = zl_xport_hello_check(&w.h, w.status, w.status ? NULL : &w.rep, argv[3], &hl);
	if (rc) {
		fprintf(stderr, "e2e_hello: HELLO reply rejected: %s\n", zl_strerror(rc));
		goto out;
	}
	printf("node=%s version=%u caps=%s\n", hl.node_id, hl.proto_version,
	       zl_xport_caps_name(hl.caps));
	ret = 0;
out:
	if (c) {
		zl_xport_conn_close(c);
		zl_loop_run_once(loop, 10);
		zl_xport_conn_put(c);
	}
	zl_xport_destroy(x);
	zl_loop_destroy(loop);
	return ret;
}
