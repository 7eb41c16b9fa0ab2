/* Transport latency probe: one process, a server and a client transport of
 * the same kind on one loop (one thread), QD1 round trips of PING, 4 KiB
 * WRITE, 4 KiB READ and 1 MiB READ, then 4 KiB READs at QD32. Prints one line
 * per case with min/p50/p99 in microseconds. Meant for comparing TCP and RDMA
 * inside the same test VM guest (test/rdma/bench.sh), not as a benchmark.
 *
 * Usage: xport_lat tcp|rdma HOST [iterations]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/transport/transport.h"

#define QD 32

struct lat_srv {
	struct zl_xport *x;
	uint8_t *data; /* READ reply data, shared by every reply */
	uint8_t *wbuf;
};

static void lat_fetched(void *arg, int status)
{
	(void)arg;
	(void)status;
}

static void lat_on_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
			   struct zl_xport_payload *p)
{
	struct lat_srv *s = arg;
	struct zl_wire_hdr rep;

	/* The reply goes out at once; a fetch completes before the reply (in
	 * order on the connection, and the client waits for the reply). */
	if (p && zl_xport_fetch(p, s->wbuf, h->payload_len, lat_fetched, NULL))
		zl_xport_discard(p);
	zl_wire_reply_init(h, &rep, 0);
	if (h->opcode == ZL_OP_READ)
		zl_xport_reply(c, &rep, s->data, h->length, NULL, NULL);
	else
		zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
}

static void lat_done(void *arg, int status, const struct zl_wire_hdr *rep)
{
	int *left = arg;

	(void)rep;
	if (status) {
		fprintf(stderr, "request failed: %s\n", zl_strerror(status));
		exit(1);
	}
	(*left)--;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int issue(struct zl_xport_conn *c, uint8_t op, uint32_t len, uint8_t *buf, int *left)
{
	struct zl_wire_hdr h = {.opcode = op, .vol_id = 1, .length = len};

	if (op == ZL_OP_PING)
		h.length = 0;
	if (op == ZL_OP_WRITE)
		return zl_xport_request(c, &h, buf, len, NULL, 0, lat_done, left);
	if (op == ZL_OP_READ)
		return zl_xport_request(c, &h, NULL, 0, buf, len, lat_done, left);
	return zl_xport_request(c, &h, NULL, 0, NULL, 0, lat_done, left);
}

static void run_case(struct zl_loop *loop, struct zl_xport_conn *c, const char *name, uint8_t op,
		     uint32_t len, uint8_t *buf, int iters)
{
	uint64_t *t = calloc((size_t)iters, sizeof(*t));

	for (int i = 0; i < iters; i++) {
		uint64_t t0 = zl_now_ns();
		int left = 1;

		if (issue(c, op, len, buf, &left))
			exit(1);
		while (left)
			zl_loop_run_once(loop, 100);
		t[i] = zl_now_ns() - t0;
	}
	qsort(t, (size_t)iters, sizeof(*t), cmp_u64);
	printf("%-14s qd1  min=%7.1f p50=%7.1f p99=%7.1f us\n", name, t[0] / 1e3,
	       t[iters / 2] / 1e3, t[iters * 99 / 100] / 1e3);
	free(t);
}

int main(int argc, char **argv)
{
	static const struct zl_xport_server_ops ops = {.on_request = lat_on_request};
	struct zl_xport_opts o = {0};
	struct zl_xport *sx, *cx;
	struct zl_xport_listener *l;
	struct zl_xport_conn *c;
	struct lat_srv srv = {0};
	struct zl_loop *loop;
	int iters = argc > 3 ? atoi(argv[3]) : 1000, rc;
	uint8_t *buf;
	uint64_t t0;
	int left, total;

	if (argc < 3) {
		fprintf(stderr, "usage: %s tcp|rdma HOST [iterations]\n", argv[0]);
		return 2;
	}
	zl_log_init("xport_lat");
	o.kind = strcmp(argv[1], "rdma") ? ZL_XPORT_TCP : ZL_XPORT_RDMA;
	if (zl_loop_create(&loop) || zl_xport_create(loop, &o, &sx) ||
	    zl_xport_create(loop, &o, &cx))
		return 1;
	srv.x = sx;
	srv.data = zl_xport_buf_alloc(sx, 1u << 20);
	srv.wbuf = zl_xport_buf_alloc(sx, 1u << 20);
	buf = zl_xport_buf_alloc(cx, QD << 12 > (1 << 20) ? QD << 12 : 1 << 20);
	memset(srv.data, 7, 1u << 20);
	memset(buf, 9, 1u << 20);
	rc = zl_xport_listen(sx, argv[2], 0, &ops, &srv, &l);
	if (rc || zl_xport_connect(cx, argv[2], zl_xport_listener_port(l), 10000, NULL, NULL, &c)) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	printf("transport=%s host=%s iterations=%d\n", argv[1], argv[2], iters);
	run_case(loop, c, "ping", ZL_OP_PING, 0, buf, iters);
	run_case(loop, c, "write 4KiB", ZL_OP_WRITE, 4096, buf, iters);
	run_case(loop, c, "read 4KiB", ZL_OP_READ, 4096, buf, iters);
	run_case(loop, c, "read 1MiB", ZL_OP_READ, 1u << 20, buf, iters / 10 + 1);
	/* QD32 4 KiB reads: IOPS */
	total = iters * 4;
	left = total;
	t0 = zl_now_ns();
	for (int i = 0; i < QD && i < total; i++)
		issue(c, ZL_OP_READ, 4096, buf + (size_t)i * 4096, &left);
	for (int issued = QD; left > 0;) {
		int before = left;

		zl_loop_run_once(loop, 100);
		for (int k = 0; k < before - left && issued < total; k++, issued++)
			issue(c, ZL_OP_READ, 4096, buf + (size_t)(issued % QD) * 4096, &left);
	}
	printf("%-14s qd32 %.0f IOPS\n", "read 4KiB", total / ((zl_now_ns() - t0) / 1e9));
	zl_xport_conn_close(c);
	zl_xport_conn_put(c);
	zl_xport_destroy(cx);
	zl_xport_destroy(sx);
	zl_loop_destroy(loop);
	return 0;
}
