/* Transport conformance suite. Every test takes the transport kind from its
 * prestate, so the same tests run unchanged against TCP and RDMA (the
 * RDMA group runs where ZL_TEST_XPORT_REQUIRE=rdma says RDMA must work — in
 * the project's VM — and fails there if it does not; it never skips).
 *
 * Client and server transports share one loop on this thread; raw sockets
 * play misbehaving peers. Nothing here depends on timing except the request
 * timeout test, and every wait is bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* cmocka needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/transport/transport.h"
#include "lib/transport/transport_internal.h"
#include "lib/wire/wire.h"

#define VOL	0xabcdef0123456789ull
#define SRV_MAX 4096
#define WAIT_MS 10000 /* safety bound of every wait; never reached when passing */

static const enum zl_xport_kind kind_tcp = ZL_XPORT_TCP;
static const enum zl_xport_kind kind_rdma = ZL_XPORT_RDMA;
/* TCP with TLS: the server has a certificate for 127.0.0.1 (and the DNS name
 * TLS_NAME) signed by a CA made for the run, the client that CA. */
static const enum zl_xport_kind kind_tls = ZL_XPORT_TCP;
#define TLS_NAME "zipline-storage.test"

/* Certificates of the TLS group, made by tls_certs_make with the openssl CLI. */
static char tls_dir[64];
static char tls_ca[128], tls_cert[128], tls_key[128], tls_other_ca[128];

/* ZL_TEST_XPORT_REQUIRE=rdma (set by test/rdma/run-in-vm.sh): the kind must work,
 * a missing device or build is a failure, not a skip. */
static bool kind_required(enum zl_xport_kind k)
{
	const char *r = getenv("ZL_TEST_XPORT_REQUIRE");

	return r && strstr(r, zl_xport_kind_name(k));
}

/* RDMA needs an address on an RDMA device (RXE_IP inside the test VM, test/vm/vm.sh). */
static const char *kind_host(enum zl_xport_kind k)
{
	const char *h = k == ZL_XPORT_RDMA ? getenv("ZL_TEST_RDMA_HOST") : NULL;

	if (k == ZL_XPORT_RDMA && !h)
		h = getenv("RXE_IP");
	if (!h)
		h = getenv("ZL_TEST_XPORT_HOST");
	return h ? h : "127.0.0.1";
}

/* Set while a test is inside a transport call: no callback may run then. */
static bool in_call;

/* ---- data pattern ---- */

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static bool check(const uint8_t *p, size_t n, uint64_t seed)
{
	uint8_t *want = malloc(n ? n : 1);
	bool ok;

	assert_non_null(want);
	fill(want, n, seed);
	ok = memcmp(p, want, n) == 0;
	free(want);
	return ok;
}

/* ---- test server ---- */

enum srv_mode {
	SRV_ANSWER, /* reply as soon as the request (and its payload) is in */
	SRV_HOLD,   /* keep requests until the test releases them */
};

struct srv;

struct sreq {
	struct srv *s;
	struct zl_xport_conn *c;
	struct zl_wire_hdr h;
	uint8_t *buf;  /* fetched payload */
	uint8_t *data; /* READ reply data, freed by sent_cb */
	uint32_t *crcs; /* srv.crcs: the payload's 4 KiB pieces' CRCs (malloc) */
	int fetch_status;
};

struct srv {
	struct zl_xport *x;
	enum srv_mode mode;
	bool discard;	   /* discard payloads instead of fetching them */
	bool ignore;	   /* neither fetch nor discard (the transport must cope) */
	uint32_t close_at; /* close the connection on this request (1-based) */
	struct sreq reqs[SRV_MAX];
	struct sreq *held[SRV_MAX];
	uint32_t n_req, n_got, n_held, n_answered, n_sent_cb, n_conn, n_close;
	uint32_t n_fetch_corrupt;
	/* CRC once: fetch with zl_xport_fetch_crcs, answer READs with
	 * zl_xport_reply_crcs (bad_reply_crcs: one of them wrong); n_pieces_ok
	 * counts the pieces whose CRC the fetch left there, checked. */
	bool crcs, bad_reply_crcs;
	uint32_t n_pieces_ok;
	int last_close_reason;
	struct zl_xport_conn *last_conn;
};

static void srv_sent(void *arg, int status)
{
	struct sreq *r = arg;

	assert_false(in_call);
	assert_true(status == 0 || status == -ZL_ERR_CONN);
	zl_xport_buf_free(r->s->x, r->data);
	r->data = NULL;
	r->s->n_sent_cb++;
}

static void srv_answer(struct sreq *r)
{
	struct srv *s = r->s;
	struct zl_wire_hdr rep;
	int status = 0, rc;

	/* A WRITE succeeds only when its payload arrived intact. */
	if (r->h.opcode == ZL_OP_WRITE &&
	    (!r->buf || r->fetch_status || !check(r->buf, r->h.length, r->h.aux)))
		status = -ZL_ERR_IO;
	zl_wire_reply_init(&r->h, &rep, status);
	switch (r->h.opcode) {
	case ZL_OP_PING:
		rep.aux = r->h.aux * 3 + 1;
		break;
	case ZL_OP_WRITE:
		rep.aux = r->buf ? zl_crc32c(r->buf, r->h.length) : 0;
		break;
	default:
		break;
	}
	free(r->crcs);
	r->crcs = NULL;
	in_call = true;
	if (r->h.opcode == ZL_OP_READ && !status) {
		uint32_t n = r->h.length / 4096, crcs[ZL_WIRE_MAX_IO / 4096];

		r->data = zl_xport_buf_alloc(s->x, r->h.length);
		assert_non_null(r->data);
		fill(r->data, r->h.length, r->h.aux);
		if (s->crcs) {
			for (uint32_t i = 0; i < n; i++)
				crcs[i] = zl_crc32c(r->data + (size_t)i * 4096, 4096);
			if (s->bad_reply_crcs && n)
				crcs[n - 1] ^= 0x10;
		}
		rc = zl_xport_reply_crcs(r->c, &rep, r->data, r->h.length, s->crcs ? crcs : NULL,
					 srv_sent, r);
		if (rc) {
			zl_xport_buf_free(s->x, r->data);
			r->data = NULL;
		}
	} else {
		rc = zl_xport_reply(r->c, &rep, NULL, 0, NULL, NULL);
	}
	in_call = false;
	assert_true(rc == 0 || rc == -ZL_ERR_CONN);
	if (rc == 0)
		s->n_answered++;
	zl_xport_buf_free(s->x, r->buf);
	r->buf = NULL;
	zl_xport_conn_put(r->c);
	r->c = NULL;
}

static void srv_got(struct sreq *r)
{
	struct srv *s = r->s;

	s->n_got++;
	if (s->close_at && s->n_got == s->close_at) {
		in_call = true;
		zl_xport_conn_close(r->c);
		zl_xport_conn_close(r->c); /* idempotent */
		in_call = false;
	}
	if (s->mode == SRV_HOLD)
		s->held[s->n_held++] = r;
	else
		srv_answer(r);
}

static void srv_fetched(void *arg, int status)
{
	struct sreq *r = arg;

	assert_false(in_call);
	r->fetch_status = status;
	if (status == -ZL_ERR_CORRUPT)
		r->s->n_fetch_corrupt++;
	if (!status && r->crcs) {
		for (uint32_t i = 0; i < r->h.payload_len / 4096; i++) {
			assert_int_equal(r->crcs[i], zl_crc32c(r->buf + (size_t)i * 4096, 4096));
			r->s->n_pieces_ok++;
		}
	}
	srv_got(r);
}

static void srv_on_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
			   struct zl_xport_payload *p)
{
	struct srv *s = arg;
	struct sreq *r = &s->reqs[s->n_req++ % SRV_MAX];
	int rc;

	assert_false(in_call);
	assert_null(r->c);
	memset(r, 0, sizeof(*r));
	r->s = s;
	r->c = c;
	r->h = *h;
	zl_xport_conn_get(c);
	if (h->payload_len) {
		assert_non_null(p);
		if (s->discard || s->ignore) {
			if (s->discard)
				zl_xport_discard(p);
			srv_got(r);
			return;
		}
		r->buf = zl_xport_buf_alloc(s->x, h->payload_len);
		assert_non_null(r->buf);
		if (s->crcs && !(h->payload_len % 4096)) {
			r->crcs = malloc(h->payload_len / 4096 * sizeof(uint32_t));
			assert_non_null(r->crcs);
		}
		in_call = true;
		rc = zl_xport_fetch_crcs(p, r->buf, h->payload_len, r->crcs, srv_fetched, r);
		in_call = false;
		assert_int_equal(rc, 0);
		return;
	}
	assert_null(p);
	srv_got(r);
}

static void srv_on_conn(void *arg, struct zl_xport_conn *c)
{
	struct srv *s = arg;

	assert_false(in_call);
	assert_int_equal(zl_xport_conn_kind(c), zl_xport_kind(s->x));
	if (s->last_conn)
		zl_xport_conn_put(s->last_conn);
	zl_xport_conn_get(c);
	s->last_conn = c;
	s->n_conn++;
}

static void srv_on_close(void *arg, struct zl_xport_conn *c, int reason)
{
	struct srv *s = arg;

	assert_false(in_call);
	assert_false(zl_xport_conn_alive(c));
	s->n_close++;
	s->last_close_reason = reason;
}

static const struct zl_xport_server_ops srv_ops = {
    .on_conn = srv_on_conn,
    .on_request = srv_on_request,
    .on_close = srv_on_close,
};

/* Releases held requests in the order given by idx (or FIFO when NULL). */
static void srv_release(struct srv *s, const uint32_t *idx)
{
	uint32_t n = s->n_held;

	s->n_held = 0;
	for (uint32_t i = 0; i < n; i++)
		srv_answer(s->held[idx ? idx[i] : i]);
}

/* ---- environment ---- */

/* The loop of the running test: raw-peer reads pump it, because the
 * transport sends queued frames at the end of a loop iteration (cork). */
static struct zl_loop *pump_loop;

struct env {
	enum zl_xport_kind kind;
	bool tls;
	const char *host;
	struct zl_loop *loop;
	struct zl_xport *sx, *cx;
	struct zl_xport_listener *l;
	uint16_t port;
	struct srv *srv;
};

static struct env *env_start(void **state, const struct zl_xport_opts *copts,
			     const struct zl_xport_opts *sopts)
{
	enum zl_xport_kind kind = *(const enum zl_xport_kind *)*state;
	struct zl_xport_opts co = {.kind = kind}, so = {.kind = kind};
	struct env *e = calloc(1, sizeof(*e));
	int rc;

	assert_non_null(e);
	if (copts)
		co = *copts;
	if (sopts)
		so = *sopts;
	co.kind = so.kind = kind;
	e->tls = *state == (void *)&kind_tls;
	if (e->tls) {
		so.tls_cert = tls_cert;
		so.tls_key = tls_key;
		if (!co.tls_ca)
			co.tls_ca = tls_ca;
	}
	e->kind = kind;
	e->host = kind_host(kind);
	assert_int_equal(zl_loop_create(&e->loop), 0);
	pump_loop = e->loop;
	rc = zl_xport_create(e->loop, &so, &e->sx);
	if ((rc == -EPROTONOSUPPORT || rc == -ENODEV) && kind_required(kind))
		fail_msg("transport %s is required here but zl_xport_create says %s",
			 zl_xport_kind_name(kind), zl_errname(rc));
	if (rc == -EPROTONOSUPPORT || rc == -ENODEV)
		fail_msg("transport %s is not available here (zl_xport_create says %s)",
			 zl_xport_kind_name(kind), zl_errname(rc));
	assert_int_equal(rc, 0);
	assert_int_equal(zl_xport_create(e->loop, &co, &e->cx), 0);
	assert_int_equal(zl_xport_kind(e->cx), kind);
	assert_ptr_equal(zl_xport_loop(e->cx), e->loop);
	e->srv = calloc(1, sizeof(*e->srv));
	assert_non_null(e->srv);
	e->srv->x = e->sx;
	assert_int_equal(zl_xport_listen(e->sx, e->host, 0, &srv_ops, e->srv, &e->l), 0);
	e->port = zl_xport_listener_port(e->l);
	assert_true(e->port > 0);
	*state = e;
	return e;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	/* The prestate is the kind constant until env_start replaced it. */
	if (e == (void *)&kind_tcp || e == (void *)&kind_rdma || e == (void *)&kind_tls)
		return 0;
	for (uint32_t i = 0; i < SRV_MAX; i++) {
		struct sreq *r = &e->srv->reqs[i];

		if (r->c)
			zl_xport_conn_put(r->c);
		r->c = NULL;
	}
	if (e->srv->last_conn)
		zl_xport_conn_put(e->srv->last_conn);
	zl_xport_destroy(e->cx);
	zl_xport_destroy(e->sx);
	zl_loop_destroy(e->loop);
	free(e->srv);
	free(e);
	return 0;
}

static void run_until(struct env *e, const uint32_t *cnt, uint32_t target)
{
	uint64_t start = zl_now_ms();

	while (*cnt < target) {
		if (zl_now_ms() - start > WAIT_MS)
			fail_msg("waited %d ms: counter at %u, want %u", WAIT_MS, *cnt, target);
		assert_true(zl_loop_run_once(e->loop, 50) >= 0);
	}
}

/* Runs the loop for a few idle iterations (lets anything pending happen). */
static void run_idle(struct env *e, int rounds)
{
	for (int i = 0; i < rounds; i++)
		zl_loop_run_once(e->loop, 10);
}

/* ---- client helpers ---- */

struct creq {
	uint32_t *done;
	int status;
	int calls;
	bool has_rep;
	struct zl_wire_hdr rep;
	struct zl_wire_hdr req;
	uint8_t *in;
	uint32_t len;
	uint64_t seed;
	/* Overwritten by the callback: the out buffer is the caller's again. */
	uint8_t *scribble;
};

static void on_reply(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct creq *q = arg;

	assert_false(in_call);
	q->calls++;
	assert_int_equal(q->calls, 1);
	q->status = status;
	q->has_rep = rep != NULL;
	if (rep)
		q->rep = *rep;
	if (status)
		assert_null(rep);
	if (q->scribble)
		memset(q->scribble, 0xee, q->len);
	(*q->done)++;
}

struct cconn {
	uint32_t closes;
	int reason;
};

static void on_cclose(void *arg, struct zl_xport_conn *c, int reason)
{
	struct cconn *cc = arg;

	assert_false(in_call);
	assert_false(zl_xport_conn_alive(c));
	assert_int_equal(zl_xport_conn_inflight(c), 0);
	cc->closes++;
	cc->reason = reason;
}

static struct zl_xport_conn *cconnect(struct env *e, struct cconn *cc)
{
	struct zl_xport_conn *c = NULL;

	if (e->tls)
		assert_int_equal(
		    zl_xport_connect_tls(e->cx, e->host, e->port, 2000, on_cclose, cc, &c), 0);
	else
		assert_int_equal(zl_xport_connect(e->cx, e->host, e->port, 2000, on_cclose, cc, &c),
				 0);
	assert_non_null(c);
	assert_true(zl_xport_conn_alive(c));
	assert_int_equal(zl_xport_conn_kind(c), e->kind);
	return c;
}

/* Closes a client connection whose close callback points at the test's
 * stack, waits for the callback and drops the caller's reference. */
static void cdone(struct env *e, struct zl_xport_conn *c, struct cconn *cc)
{
	zl_xport_conn_close(c);
	run_until(e, &cc->closes, 1);
	assert_int_equal(cc->closes, 1);
	zl_xport_conn_put(c);
}

/* Issues q->req; the callback must not run inside the call. */
static int issue(struct zl_xport_conn *c, struct creq *q, const void *out, uint32_t out_len,
		 void *in, uint32_t in_cap)
{
	int rc;

	in_call = true;
	rc = zl_xport_request(c, &q->req, out, out_len, in, in_cap, on_reply, q);
	in_call = false;
	return rc;
}

static int send_ping(struct zl_xport_conn *c, struct creq *q, uint64_t aux)
{
	memset(&q->req, 0, sizeof(q->req));
	q->req.opcode = ZL_OP_PING;
	q->req.aux = aux;
	return issue(c, q, NULL, 0, NULL, 0);
}

/* READ into buf (zeroed first), or WRITE of buf filled from seed. */
static int send_io(struct zl_xport_conn *c, struct creq *q, uint8_t op, uint8_t *buf, uint32_t len,
		   uint64_t seed)
{
	bool rd = op == ZL_OP_READ;

	memset(&q->req, 0, sizeof(q->req));
	q->req.opcode = op;
	q->req.vol_id = VOL;
	q->req.length = len;
	q->req.aux = seed;
	q->len = len;
	q->seed = seed;
	if (!rd) {
		fill(buf, len, seed);
		return issue(c, q, buf, len, NULL, 0);
	}
	q->in = buf;
	memset(buf, 0, len);
	return issue(c, q, NULL, 0, buf, len);
}

static int send_read(struct zl_xport_conn *c, struct creq *q, uint8_t *in, uint32_t len,
		     uint64_t seed)
{
	return send_io(c, q, ZL_OP_READ, in, len, seed);
}

static int send_write(struct zl_xport_conn *c, struct creq *q, uint8_t *out, uint32_t len,
		      uint64_t seed)
{
	return send_io(c, q, ZL_OP_WRITE, out, len, seed);
}

/* ---- tests ---- */

static void test_ping_pong(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	uint32_t done = 0;
	char want[32];

	snprintf(want, sizeof(want), ":%u", e->port);
	assert_non_null(strstr(zl_xport_conn_peer(c), want));
	for (uint32_t i = 0; i < 200; i++) {
		struct creq q = {.done = &done};

		assert_int_equal(send_ping(c, &q, i), 0);
		assert_int_equal(q.calls, 0); /* never inside the call */
		assert_true(q.req.req_id != 0 || i == 0);
		assert_int_equal(zl_xport_conn_inflight(c), 1);
		run_until(e, &done, i + 1);
		assert_int_equal(q.status, 0);
		assert_true(q.has_rep);
		assert_int_equal(q.rep.req_id, q.req.req_id);
		assert_int_equal(q.rep.opcode, ZL_OP_PING);
		assert_true(q.rep.flags & ZL_WF_REPLY);
		assert_int_equal(q.rep.aux, i * 3 + 1);
		assert_int_equal(zl_xport_conn_inflight(c), 0);
	}
	assert_int_equal(e->srv->n_conn, 1);
	zl_xport_conn_set_ctx(c, &cc);
	assert_ptr_equal(zl_xport_conn_ctx(c), &cc);
	zl_xport_conn_close(c);
	assert_int_equal(cc.closes, 0); /* deferred */
	run_until(e, &cc.closes, 1);
	assert_int_equal(cc.reason, 0);
	run_until(e, &e->srv->n_close, 1);
	assert_int_equal(e->srv->last_close_reason, -ZL_ERR_CONN);
	zl_xport_conn_put(c);
	assert_int_equal(cc.closes, 1);
}

static void test_pipelined_out_of_order(void **state)
{
	enum { N = 1000 };
	struct zl_xport_opts o = {.max_inflight = 1024};
	struct env *e = env_start(state, &o, &o);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq *q = calloc(N, sizeof(*q));
	uint8_t *in = malloc((size_t)N * 1024);
	uint32_t *order = calloc(N, sizeof(*order));
	uint32_t done = 0;

	assert_non_null(q);
	assert_non_null(in);
	assert_non_null(order);
	e->srv->mode = SRV_HOLD;
	for (uint32_t i = 0; i < N; i++) {
		q[i].done = &done;
		if (i % 10 == 3)
			assert_int_equal(
			    send_read(c, &q[i], in + (size_t)i * 1024, 1 + i % 1000, 1000 + i), 0);
		else
			assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	assert_int_equal(zl_xport_conn_inflight(c), N);
	run_until(e, &e->srv->n_held, N);
	/* 7 is coprime with 1000: a full permutation, far from FIFO. */
	for (uint32_t i = 0; i < N; i++)
		order[i] = (i * 7 + 500) % N;
	srv_release(e->srv, order);
	run_until(e, &done, N);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(q[i].calls, 1);
		assert_int_equal(q[i].status, 0);
		assert_int_equal(q[i].rep.req_id, q[i].req.req_id);
		if (i % 10 == 3) {
			assert_int_equal(q[i].rep.opcode, ZL_OP_READ);
			assert_true(check(q[i].in, q[i].len, q[i].seed));
		} else {
			assert_int_equal(q[i].rep.aux, (uint64_t)i * 3 + 1);
		}
	}
	assert_int_equal(zl_xport_conn_inflight(c), 0);
	run_until(e, &e->srv->n_sent_cb, N / 10);
	cdone(e, c, &cc);
	free(q);
	free(in);
	free(order);
}

static void test_large_and_unaligned(void **state)
{
	static const uint32_t sizes[] = {1, 4097, 12345, 65536 + 17, 1u << 20, ZL_WIRE_MAX_IO};
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq wq[NS], rq[NS];
	uint8_t *wbuf[NS], *rbuf[NS];
	uint32_t done = 0;

	memset(wq, 0, sizeof(wq));
	memset(rq, 0, sizeof(rq));
	/* Pool memory for half, caller memory (malloc, unaligned) for the rest. */
	for (int i = 0; i < NS; i++) {
		bool pool = i % 2 == 0;

		wbuf[i] = pool ? zl_xport_buf_alloc(e->cx, sizes[i]) : malloc(sizes[i] + 1);
		rbuf[i] = pool ? zl_xport_buf_alloc(e->cx, sizes[i]) : malloc(sizes[i] + 1);
		assert_non_null(wbuf[i]);
		assert_non_null(rbuf[i]);
		if (!pool) {
			wbuf[i]++;
			rbuf[i]++;
		}
	}
	/* One at a time, then all pipelined together. */
	for (int i = 0; i < NS; i++) {
		wq[i].done = rq[i].done = &done;
		assert_int_equal(send_write(c, &wq[i], wbuf[i], sizes[i], 7 + i), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(wq[i].status, 0);
		assert_int_equal(wq[i].rep.status, 0);
		assert_int_equal(wq[i].rep.aux, zl_crc32c(wbuf[i], sizes[i]));
		assert_int_equal(send_read(c, &rq[i], rbuf[i], sizes[i], 99 + i), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(rq[i].status, 0);
		assert_int_equal(rq[i].rep.payload_len, sizes[i]);
		assert_true(check(rbuf[i], sizes[i], 99 + i));
	}
	memset(wq, 0, sizeof(wq));
	memset(rq, 0, sizeof(rq));
	done = 0;
	for (int i = 0; i < NS; i++) {
		wq[i].done = rq[i].done = &done;
		assert_int_equal(send_write(c, &wq[i], wbuf[i], sizes[i], 300 + i), 0);
		assert_int_equal(send_read(c, &rq[i], rbuf[i], sizes[i], 400 + i), 0);
	}
	run_until(e, &done, 2 * NS);
	for (int i = 0; i < NS; i++) {
		assert_int_equal(wq[i].status, 0);
		assert_int_equal(wq[i].rep.status, 0);
		assert_int_equal(rq[i].status, 0);
		assert_true(check(rbuf[i], sizes[i], 400 + i));
	}
	/* A READ reply larger than in_cap fails that request (-ZL_ERR_PROTO)
	 * and the connection keeps working. */
	{
		struct creq q = {.done = &done}, p = {.done = &done};

		memset(&q.req, 0, sizeof(q.req));
		q.req.opcode = ZL_OP_READ;
		q.req.vol_id = VOL;
		q.req.length = 8192;
		in_call = true;
		assert_int_equal(zl_xport_request(c, &q.req, NULL, 0, rbuf[1], 4096, on_reply, &q),
				 0);
		in_call = false;
		assert_int_equal(send_ping(c, &p, 5), 0);
		run_until(e, &done, 2 * NS + 2);
		assert_int_equal(q.status, -ZL_ERR_PROTO);
		assert_int_equal(p.status, 0);
		assert_int_equal(p.rep.aux, 16);
	}
	assert_true(zl_xport_conn_alive(c));
	for (int i = 0; i < NS; i++) {
		if (i % 2 == 0) {
			zl_xport_buf_free(e->cx, wbuf[i]);
			zl_xport_buf_free(e->cx, rbuf[i]);
		} else {
			free(wbuf[i] - 1);
			free(rbuf[i] - 1);
		}
	}
	cdone(e, c, &cc);
}

/* CRC once per byte: a sender that holds its data's 4 KiB CRCs sends them
 * joined (no pass over the data), a receiver gets the pieces' CRCs from its
 * one check; CRCs that do not match the data never pass: the receiver
 * checks the data, not the sender's word. */
static void test_crc_once(void **state)
{
	static const uint32_t sizes[] = {4096, 8192, 65536, 1u << 20, ZL_WIRE_MAX_IO, 12345};
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	static uint32_t crcs[ZL_WIRE_MAX_IO / 4096];
	uint32_t done = 0, pieces = 0;
	uint8_t *wbuf = zl_xport_buf_alloc(e->cx, ZL_WIRE_MAX_IO);
	uint8_t *rbuf = zl_xport_buf_alloc(e->cx, ZL_WIRE_MAX_IO);

	assert_non_null(wbuf);
	assert_non_null(rbuf);
	e->srv->crcs = true;
	for (int i = 0; i < NS; i++) {
		struct creq w = {.done = &done}, r = {.done = &done};
		uint32_t n = sizes[i] % 4096 ? 0 : sizes[i] / 4096;

		memset(&w.req, 0, sizeof(w.req));
		w.req.opcode = ZL_OP_WRITE;
		w.req.vol_id = VOL;
		w.req.length = sizes[i];
		w.req.aux = 50 + i;
		fill(wbuf, sizes[i], 50 + i);
		if (n)
			assert_int_equal(zl_crc32c_4k_pieces(wbuf, n, crcs),
					 zl_crc32c(wbuf, sizes[i]));
		in_call = true;
		assert_int_equal(zl_xport_request_crcs(c, &w.req, wbuf, sizes[i], n ? crcs : NULL,
						       NULL, 0, on_reply, &w),
				 0);
		in_call = false;
		run_until(e, &done, done + 1);
		assert_int_equal(w.status, 0);
		assert_int_equal(w.rep.status, 0);
		assert_int_equal(w.rep.aux, zl_crc32c(wbuf, sizes[i]));
		pieces += n;
		assert_int_equal(e->srv->n_pieces_ok, pieces);
		assert_int_equal(send_read(c, &r, rbuf, sizes[i], 70 + i), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(r.status, 0);
		assert_true(check(rbuf, sizes[i], 70 + i));
	}
	/* CRCs that do not match the data: the server's check fails the fetch
	 * (the write is answered with an error), the connection goes on. */
	{
		struct creq w = {.done = &done}, p = {.done = &done};

		memset(&w.req, 0, sizeof(w.req));
		w.req.opcode = ZL_OP_WRITE;
		w.req.vol_id = VOL;
		w.req.length = 8192;
		w.req.aux = 9;
		fill(wbuf, 8192, 9);
		zl_crc32c_4k_pieces(wbuf, 2, crcs);
		crcs[1] ^= 1;
		in_call = true;
		assert_int_equal(
		    zl_xport_request_crcs(c, &w.req, wbuf, 8192, crcs, NULL, 0, on_reply, &w), 0);
		in_call = false;
		run_until(e, &done, done + 1);
		assert_int_equal(e->srv->n_fetch_corrupt, 1);
		assert_true(w.status != 0 || w.rep.status != 0);
		assert_int_equal(send_ping(c, &p, 2), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(p.status, 0);
	}
	/* A reply whose block CRCs are wrong fails that read, not the next. */
	e->srv->bad_reply_crcs = true;
	{
		struct creq r = {.done = &done}, p = {.done = &done};

		assert_int_equal(send_read(c, &r, rbuf, 16384, 11), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(r.status, -ZL_ERR_CORRUPT);
		e->srv->bad_reply_crcs = false;
		assert_int_equal(send_ping(c, &p, 3), 0);
		run_until(e, &done, done + 1);
		assert_int_equal(p.status, 0);
	}
	zl_xport_buf_free(e->cx, wbuf);
	zl_xport_buf_free(e->cx, rbuf);
	cdone(e, c, &cc);
}

/* The server drops payloads it does not want and may answer before the
 * client finished sending: the out buffer stays owned by the transport until
 * the frame is out, and the connection stays in sync. */
static void test_discard_and_early_reply(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	uint8_t *buf = zl_xport_buf_alloc(e->cx, ZL_WIRE_MAX_IO);
	struct creq q[4] = {0};
	uint32_t done = 0;

	e->srv->discard = true;
	for (int i = 0; i < 3; i++) {
		q[i].done = &done;
		assert_int_equal(send_write(c, &q[i], buf, ZL_WIRE_MAX_IO - (uint32_t)i, i), 0);
	}
	q[3].done = &done;
	assert_int_equal(send_ping(c, &q[3], 1), 0);
	run_until(e, &done, 4);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(q[i].status, 0);
		assert_int_equal(q[i].rep.status, ZL_ERR_IO);
	}
	assert_int_equal(q[3].status, 0);
	assert_int_equal(q[3].rep.aux, 4);

	/* A server that forgets the payload: dropped for it, stream stays in sync. */
	e->srv->discard = false;
	e->srv->ignore = true;
	memset(q, 0, sizeof(q));
	done = 0;
	q[0].done = q[1].done = &done;
	assert_int_equal(send_write(c, &q[0], buf, 12345, 1), 0);
	assert_int_equal(send_ping(c, &q[1], 2), 0);
	run_until(e, &done, 2);
	assert_int_equal(q[0].status, 0);
	assert_int_equal(q[0].rep.status, ZL_ERR_IO);
	assert_int_equal(q[1].status, 0);
	assert_int_equal(q[1].rep.aux, 7);
	zl_xport_buf_free(e->cx, buf);
	cdone(e, c, &cc);
}

static void test_parallel_connections(void **state)
{
	enum { NC = 16, NR = 24 };
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc[NC];
	struct zl_xport_conn *c[NC];
	struct creq *q = calloc(NC * NR, sizeof(*q));
	uint8_t *bufs = malloc((size_t)NC * NR * 20000);
	uint32_t done = 0;

	assert_non_null(q);
	assert_non_null(bufs);
	memset(cc, 0, sizeof(cc));
	for (int i = 0; i < NC; i++)
		c[i] = cconnect(e, &cc[i]);
	for (int r = 0; r < NR; r++) {
		for (int i = 0; i < NC; i++) {
			struct creq *x = &q[i * NR + r];
			uint8_t *b = bufs + (size_t)(i * NR + r) * 20000;
			uint32_t len = 1000 + (uint32_t)(i * 997 + r * 331) % 19000;

			x->done = &done;
			if (r % 2)
				assert_int_equal(send_write(c[i], x, b, len, i * 1000 + r), 0);
			else
				assert_int_equal(send_read(c[i], x, b, len, i * 1000 + r), 0);
		}
	}
	run_until(e, &done, NC * NR);
	for (int i = 0; i < NC * NR; i++) {
		assert_int_equal(q[i].status, 0);
		assert_int_equal(q[i].rep.status, 0);
		if (q[i].req.opcode == ZL_OP_READ)
			assert_true(check(q[i].in, q[i].len, q[i].seed));
	}
	assert_int_equal(e->srv->n_conn, NC);
	for (int i = 0; i < NC; i++) {
		assert_int_equal(zl_xport_conn_inflight(c[i]), 0);
		cdone(e, c[i], &cc[i]);
	}
	free(q);
	free(bufs);
}

/* The server closes the connection while requests are in flight. */
static void test_peer_close(void **state)
{
	enum { N = 8 };
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq q[N] = {0}, late = {0};
	struct zl_wire_hdr rep;
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD;
	e->srv->close_at = 5;
	for (int i = 0; i < N; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(q[i].status, -ZL_ERR_CONN);
	assert_int_equal(cc.reason, -ZL_ERR_CONN);
	assert_false(zl_xport_conn_alive(c));
	assert_int_equal(zl_xport_conn_inflight(c), 0);
	late.done = &done;
	assert_int_equal(send_ping(c, &late, 1), -ZL_ERR_CONN);
	run_idle(e, 3);
	assert_int_equal(late.calls, 0);
	assert_int_equal(cc.closes, 1);

	/* Server side: closed locally (reason 0); replying now fails. */
	run_until(e, &e->srv->n_close, 1);
	assert_int_equal(e->srv->last_close_reason, 0);
	assert_true(e->srv->n_held >= 5);
	zl_wire_reply_init(&e->srv->held[0]->h, &rep, 0);
	assert_int_equal(zl_xport_reply(e->srv->held[0]->c, &rep, NULL, 0, NULL, NULL),
			 -ZL_ERR_CONN);
	srv_release(e->srv, NULL);
	assert_int_equal(e->srv->n_answered, 0);
	zl_xport_conn_put(c);
}

static int raw_listen(uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static int raw_connect(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	for (int rounds = 0; got < n; rounds++) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t r;

		assert_true(rounds < 100000);
		if (pump_loop)
			zl_loop_run_once(pump_loop, 0);
		if (poll(&pfd, 1, 10) <= 0)
			continue;
		r = read(fd, (uint8_t *)buf + got, n - got);
		assert_true(r > 0);
		got += (size_t)r;
	}
}

static void write_full(int fd, const void *buf, size_t n)
{
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
}

/* The peer dies (RST) with requests in flight. */
static void test_peer_reset(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct creq q[3] = {0};
	struct zl_xport_conn *c = NULL;
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	uint8_t hdr[ZL_WIRE_HDR_SIZE];
	uint32_t done = 0;
	uint16_t port;
	int lfd, fd;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	lfd = raw_listen(&port);
	assert_int_equal(zl_xport_connect(e->cx, "127.0.0.1", port, 2000, on_cclose, &cc, &c), 0);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	for (int i = 0; i < 3; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	read_full(fd, hdr, sizeof(hdr));
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	close(fd);
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(q[i].status, -ZL_ERR_CONN);
	assert_int_equal(cc.reason, -ZL_ERR_CONN);
	close(lfd);
	zl_xport_conn_put(c);
}

/* A raw server answers a 4 MiB WRITE before reading its payload. The reply
 * callback hands the out buffer back to the caller (who scribbles on it), so
 * the transport must not write from it afterwards: the payload the server
 * reads must still be intact. */
static void test_early_reply(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	struct cconn cc = {0};
	struct zl_xport_conn *c = NULL;
	struct creq q = {0};
	struct zl_wire_hdr req, rep;
	uint8_t hdr[ZL_WIRE_HDR_SIZE];
	uint8_t *out, *got;
	uint32_t done = 0, len = ZL_WIRE_MAX_IO;
	size_t have = 0;
	uint64_t start;
	int small = 4096, lfd, fd;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	/* A tiny receive window keeps most of the payload in the client. */
	assert_int_equal(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
	assert_int_equal(
	    zl_xport_connect(e->cx, "127.0.0.1", ntohs(a.sin_port), 2000, on_cclose, &cc, &c), 0);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	out = zl_xport_buf_alloc(e->cx, len);
	got = malloc(len);
	assert_non_null(out);
	assert_non_null(got);
	q.done = &done;
	q.scribble = out;
	assert_int_equal(send_write(c, &q, out, len, 11), 0);
	read_full(fd, hdr, sizeof(hdr));
	assert_int_equal(zl_wire_decode(hdr, sizeof(hdr), &req, NULL), 0);
	assert_int_equal(req.payload_len, len);
	zl_wire_reply_init(&req, &rep, -ZL_ERR_IO);
	zl_wire_encode(&rep, hdr);
	write_full(fd, hdr, sizeof(hdr));
	run_idle(e, 5);
	/* Drain the payload while the loop keeps sending. */
	start = zl_now_ms();
	while (have < len) {
		ssize_t n = recv(fd, got + have, len - have, MSG_DONTWAIT);

		if (n > 0)
			have += (size_t)n;
		else
			assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
		zl_loop_run_once(e->loop, 1);
		assert_true(zl_now_ms() - start < WAIT_MS);
	}
	run_until(e, &done, 1);
	assert_int_equal(q.status, 0);
	assert_int_equal(q.rep.status, ZL_ERR_IO);
	assert_true(check(got, len, 11));
	assert_int_equal(zl_crc32c(got, len), req.payload_crc);
	assert_true(zl_xport_conn_alive(c));
	cdone(e, c, &cc);
	zl_xport_buf_free(e->cx, out);
	free(got);
	close(fd);
	close(lfd);
}

/* The server closes a connection while big replies are still queued: every
 * sent_cb runs (0 or -ZL_ERR_CONN), and the client sees complete data or
 * -ZL_ERR_CONN, never a torn reply. */
static void test_server_close_with_queued_replies(void **state)
{
	enum { N = 3 };
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq q[N] = {0};
	uint8_t *in[N];
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD;
	for (int i = 0; i < N; i++) {
		in[i] = zl_xport_buf_alloc(e->cx, ZL_WIRE_MAX_IO);
		assert_non_null(in[i]);
		q[i].done = &done;
		assert_int_equal(send_read(c, &q[i], in[i], ZL_WIRE_MAX_IO, 70 + i), 0);
	}
	run_until(e, &e->srv->n_held, N);
	srv_release(e->srv, NULL);
	assert_int_equal(e->srv->n_answered, N);
	in_call = true;
	zl_xport_conn_close(e->srv->last_conn);
	in_call = false;
	assert_int_equal(e->srv->n_sent_cb, 0); /* deferred */
	run_until(e, &e->srv->n_sent_cb, N);
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, N);
	for (int i = 0; i < N; i++) {
		assert_true(q[i].status == 0 || q[i].status == -ZL_ERR_CONN);
		if (q[i].status == 0)
			assert_true(check(in[i], ZL_WIRE_MAX_IO, 70 + i));
		zl_xport_buf_free(e->cx, in[i]);
	}
	assert_int_equal(q[N - 1].status, -ZL_ERR_CONN);
	zl_xport_conn_put(c);
}

static void test_timeout(void **state)
{
	struct zl_xport_opts co = {.timeout_ms = 300};
	struct env *e = env_start(state, &co, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq q[3] = {0};
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD; /* never answers */
	for (int i = 0; i < 3; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, 3);
	assert_int_equal(q[0].status, -ZL_ERR_TIMEOUT);
	for (int i = 1; i < 3; i++)
		assert_true(q[i].status == -ZL_ERR_TIMEOUT || q[i].status == -ZL_ERR_CONN);
	assert_int_equal(cc.reason, -ZL_ERR_TIMEOUT);
	assert_false(zl_xport_conn_alive(c));
	/* The server notices the client going away. */
	run_until(e, &e->srv->n_close, 1);
	srv_release(e->srv, NULL);
	assert_int_equal(e->srv->n_answered, 0);
	zl_xport_conn_put(c);
}

static void test_busy(void **state)
{
	struct zl_xport_opts co = {.max_inflight = 4};
	struct env *e = env_start(state, &co, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq q[6] = {0};
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD;
	for (int i = 0; i < 6; i++)
		q[i].done = &done;
	for (int i = 0; i < 4; i++)
		assert_int_equal(send_ping(c, &q[i], i), 0);
	assert_int_equal(send_ping(c, &q[4], 4), -ZL_ERR_BUSY);
	assert_int_equal(zl_xport_conn_inflight(c), 4);
	run_until(e, &e->srv->n_held, 4);
	assert_int_equal(send_ping(c, &q[4], 4), -ZL_ERR_BUSY);
	srv_release(e->srv, NULL);
	run_until(e, &done, 4);
	assert_int_equal(send_ping(c, &q[4], 40), 0);
	assert_int_equal(send_ping(c, &q[5], 50), 0);
	run_until(e, &e->srv->n_held, 2);
	srv_release(e->srv, NULL);
	run_until(e, &done, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(q[i].status, 0);
	assert_int_equal(q[4].rep.aux, 121);
	assert_int_equal(q[5].rep.aux, 151);
	assert_int_equal(q[4].calls, 1);
	cdone(e, c, &cc);
}

/* A server never has more unanswered requests per connection than its
 * max_inflight: it stops reading until it has replied. */
static void test_server_backpressure(void **state)
{
	enum { N = 10 };
	struct zl_xport_opts so = {.max_inflight = 2};
	struct env *e = env_start(state, NULL, &so);
	struct cconn cc = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct creq q[N] = {0};
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD;
	for (int i = 0; i < N; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	while (done < N) {
		uint32_t before = done;

		run_until(e, &e->srv->n_held, ZL_MIN(2u, N - e->srv->n_answered));
		run_idle(e, 3);
		assert_true(e->srv->n_held <= 2);
		srv_release(e->srv, NULL);
		run_until(e, &done, before + 1);
	}
	for (int i = 0; i < N; i++) {
		assert_int_equal(q[i].status, 0);
		assert_int_equal(q[i].rep.aux, (uint64_t)i * 3 + 1);
	}
	cdone(e, c, &cc);
}

/* Garbage from a raw socket: the server closes that connection and keeps
 * serving others. */
static void test_bad_frames(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct zl_wire_hdr h = {.opcode = ZL_OP_PING}, rep;
	uint8_t good[ZL_WIRE_HDR_SIZE], bad[ZL_WIRE_HDR_SIZE];
	uint32_t closes = 0;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	zl_wire_encode(&h, good);
	for (int v = 0; v < 6; v++) {
		int fd = raw_connect(e->port);
		int want = -ZL_ERR_PROTO;
		uint8_t b;

		memcpy(bad, good, sizeof(bad));
		switch (v) {
		case 0:
			memset(bad, 0xaa, sizeof(bad));
			break;
		case 1: /* header CRC */
			bad[20] ^= 1;
			break;
		case 2: /* a reply sent to a server */
			zl_wire_reply_init(&h, &rep, 0);
			zl_wire_encode(&rep, bad);
			break;
		case 3: /* unknown opcode with a valid CRC */
			h.opcode = 99;
			zl_wire_encode(&h, bad);
			h.opcode = ZL_OP_PING;
			break;
		case 4: /* a valid PING first, then garbage */
			write_full(fd, good, sizeof(good));
			memset(bad, 0, sizeof(bad));
			break;
		case 5: /* truncated header, then EOF */
			write_full(fd, good, 40);
			shutdown(fd, SHUT_WR);
			want = -ZL_ERR_CONN;
			break;
		}
		if (v != 5)
			write_full(fd, bad, sizeof(bad));
		run_until(e, &e->srv->n_close, ++closes);
		assert_int_equal(e->srv->last_close_reason, want);
		if (v == 4) {
			/* the valid PING was answered before the garbage */
			read_full(fd, bad, sizeof(bad));
			assert_int_equal(zl_wire_decode(bad, sizeof(bad), &rep, NULL), 0);
			assert_int_equal(rep.aux, 1);
		}
		assert_true(read(fd, &b, 1) <= 0); /* EOF or RST */
		close(fd);
	}
	/* A payload with a wrong CRC: fetch reports -ZL_ERR_CORRUPT, the framing
	 * is intact so the connection survives. */
	{
		int fd = raw_connect(e->port);
		struct zl_wire_hdr w = {.opcode = ZL_OP_WRITE,
					.vol_id = VOL,
					.length = 100,
					.payload_len = 100,
					.aux = 1};
		uint8_t data[100];

		fill(data, sizeof(data), 1);
		w.payload_crc = zl_crc32c(data, sizeof(data)) ^ 1;
		zl_wire_encode(&w, bad);
		write_full(fd, bad, sizeof(bad));
		write_full(fd, data, sizeof(data));
		run_until(e, &e->srv->n_fetch_corrupt, 1);
		read_full(fd, bad, sizeof(bad));
		assert_int_equal(zl_wire_decode(bad, sizeof(bad), &rep, NULL), 0);
		assert_int_equal(rep.status, ZL_ERR_IO);
		assert_int_equal(e->srv->n_close, closes);
		close(fd);
		run_until(e, &e->srv->n_close, ++closes);
	}
	/* The server still works. */
	{
		struct cconn cc = {0};
		struct zl_xport_conn *c = cconnect(e, &cc);
		struct creq q = {0};
		uint32_t done = 0;

		q.done = &done;
		assert_int_equal(send_ping(c, &q, 2), 0);
		run_until(e, &done, 1);
		assert_int_equal(q.status, 0);
		assert_int_equal(q.rep.aux, 7);
		cdone(e, c, &cc);
	}
}

/* The server layer keys requests by the client's slot: a reply must name a
 * pending request (another generation of its slot is refused), and a client
 * that has one slot in flight twice breaks the protocol. */
static void test_duplicate_request_id(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct zl_wire_hdr h = {.opcode = ZL_OP_PING, .req_id = (7ull << 32) | 3, .aux = 1}, rep;
	uint8_t buf[ZL_WIRE_HDR_SIZE];
	int fd;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	e->srv->mode = SRV_HOLD;
	fd = raw_connect(e->port);
	zl_wire_encode(&h, buf);
	write_full(fd, buf, sizeof(buf));
	run_until(e, &e->srv->n_held, 1);
	zl_wire_reply_init(&e->srv->held[0]->h, &rep, 0);
	rep.req_id ^= 1ull << 32;
	assert_int_equal(zl_xport_reply(e->srv->held[0]->c, &rep, NULL, 0, NULL, NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(e->srv->n_close, 0);
	/* Slot 3 again (next generation) while the first is unanswered. */
	h.req_id = (8ull << 32) | 3;
	zl_wire_encode(&h, buf);
	write_full(fd, buf, sizeof(buf));
	run_until(e, &e->srv->n_close, 1);
	assert_int_equal(e->srv->last_close_reason, -ZL_ERR_PROTO);
	assert_int_equal(e->srv->n_held, 1);
	srv_release(e->srv, NULL);
	assert_int_equal(e->srv->n_answered, 0);
	close(fd);
}

/* A raw server answers with a wrong payload CRC, then with a reply to an
 * unknown request id. */
static void test_reply_corrupt(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = NULL;
	struct zl_wire_hdr req, rep;
	struct creq q = {0}, p = {0}, s = {0};
	uint8_t hdr[ZL_WIRE_HDR_SIZE], data[4096], in[4096];
	uint32_t done = 0;
	uint16_t port;
	int lfd, fd;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	lfd = raw_listen(&port);
	assert_int_equal(zl_xport_connect(e->cx, "127.0.0.1", port, 2000, on_cclose, &cc, &c), 0);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	q.done = p.done = s.done = &done;

	assert_int_equal(send_read(c, &q, in, sizeof(in), 5), 0);
	read_full(fd, hdr, sizeof(hdr));
	assert_int_equal(zl_wire_decode(hdr, sizeof(hdr), &req, NULL), 0);
	assert_int_equal(req.opcode, ZL_OP_READ);
	assert_int_equal(req.req_id, q.req.req_id);
	zl_wire_reply_init(&req, &rep, 0);
	fill(data, sizeof(data), 5);
	rep.payload_len = sizeof(data);
	rep.payload_crc = zl_crc32c(data, sizeof(data)) ^ 0x80;
	zl_wire_encode(&rep, hdr);
	write_full(fd, hdr, sizeof(hdr));
	write_full(fd, data, sizeof(data));
	run_until(e, &done, 1);
	assert_int_equal(q.status, -ZL_ERR_CORRUPT);
	assert_false(q.has_rep);
	assert_true(zl_xport_conn_alive(c));

	/* Next request works on the same connection. */
	assert_int_equal(send_ping(c, &p, 3), 0);
	read_full(fd, hdr, sizeof(hdr));
	assert_int_equal(zl_wire_decode(hdr, sizeof(hdr), &req, NULL), 0);
	zl_wire_reply_init(&req, &rep, 0);
	rep.aux = 42;
	zl_wire_encode(&rep, hdr);
	write_full(fd, hdr, sizeof(hdr));
	run_until(e, &done, 2);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.rep.aux, 42);

	/* A stale req_id (the PING's, already answered) is a protocol error. */
	assert_int_equal(send_ping(c, &s, 4), 0);
	read_full(fd, hdr, sizeof(hdr));
	zl_wire_encode(&rep, hdr);
	write_full(fd, hdr, sizeof(hdr));
	run_until(e, &cc.closes, 1);
	assert_int_equal(cc.reason, -ZL_ERR_PROTO);
	assert_int_equal(s.status, -ZL_ERR_CONN);
	assert_int_equal(done, 3);
	close(fd);
	close(lfd);
	zl_xport_conn_put(c);
}

static void test_local_close_and_destroy(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0}, cc2 = {0};
	struct zl_xport_conn *c = cconnect(e, &cc);
	struct zl_xport_conn *c2 = cconnect(e, &cc2);
	struct creq q[4] = {0};
	uint32_t done = 0;

	e->srv->mode = SRV_HOLD;
	for (int i = 0; i < 4; i++)
		q[i].done = &done;
	assert_int_equal(send_ping(c, &q[0], 0), 0);
	assert_int_equal(send_ping(c, &q[1], 1), 0);
	run_until(e, &e->srv->n_held, 2);
	zl_xport_conn_get(c);
	in_call = true;
	zl_xport_conn_close(c);
	zl_xport_conn_close(c);
	in_call = false;
	assert_false(zl_xport_conn_alive(c));
	assert_int_equal(done, 0);
	assert_int_equal(send_ping(c, &q[2], 2), -ZL_ERR_CONN);
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, 2);
	assert_int_equal(q[0].status, -ZL_ERR_CONN);
	assert_int_equal(q[1].status, -ZL_ERR_CONN);
	assert_int_equal(cc.reason, 0);
	zl_xport_conn_put(c);
	zl_xport_conn_put(c); /* last reference: freed */

	/* Destroying the client transport fails what is still in flight. */
	assert_int_equal(send_ping(c2, &q[3], 3), 0);
	run_until(e, &e->srv->n_held, 3);
	zl_xport_destroy(e->cx);
	e->cx = NULL;
	assert_int_equal(done, 3);
	assert_int_equal(q[3].status, -ZL_ERR_CONN);
	assert_int_equal(cc2.closes, 1);
	zl_xport_conn_put(c2); /* the caller's reference outlives the transport */
	srv_release(e->srv, NULL);
}

static void test_connect_errors(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct zl_xport_listener *l2 = NULL;
	struct zl_xport_conn *c = NULL;
	uint16_t port;
	int fd;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	/* A port nobody listens on. */
	fd = raw_listen(&port);
	close(fd);
	assert_int_equal(zl_xport_connect(e->cx, "127.0.0.1", port, 2000, NULL, NULL, &c),
			 -ECONNREFUSED);
	assert_null(c);
	/* The listener's port is taken. */
	assert_int_equal(zl_xport_listen(e->sx, "127.0.0.1", e->port, &srv_ops, e->srv, &l2),
			 -EADDRINUSE);
	/* Closing the listener refuses new connections, the transport stays. */
	zl_xport_listener_close(e->l);
	e->l = NULL;
	assert_int_equal(zl_xport_connect(e->cx, "127.0.0.1", e->port, 2000, NULL, NULL, &c),
			 -ECONNREFUSED);
}

/* zl_xport_connect_start: requests sent before the connect is done (and,
 * over TLS, the handshake) queue and go out in order once it is up. */
static void test_connect_start(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0};
	struct zl_xport_conn *c = NULL;
	struct creq q[20] = {0};
	uint32_t done = 0;

	assert_int_equal(
	    zl_xport_connect_start(e->cx, e->host, e->port, e->tls, 2000, on_cclose, &cc, &c), 0);
	assert_non_null(c);
	assert_true(zl_xport_conn_alive(c));
	for (uint32_t i = 0; i < 20; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
		assert_int_equal(q[i].calls, 0);
	}
	run_until(e, &done, 20);
	for (uint32_t i = 0; i < 20; i++) {
		assert_int_equal(q[i].status, 0);
		assert_int_equal(q[i].rep.aux, i * 3 + 1);
	}
	assert_int_equal(e->srv->n_conn, 1);
	cdone(e, c, &cc);
}

/* zl_xport_connect_start to a listener whose accept queue is full: the call
 * returns at once, the queued request fails when the connect's time is up
 * (ZL_ERR_TIMEOUT to the close callback), or goes out once the queue has
 * room again; to a port nobody listens on: the connect fails (at once or
 * through the close callback). */
static void test_connect_start_fails(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	struct cconn cc = {0}, cr = {0}, cs = {0};
	struct zl_xport_conn *c = NULL;
	struct creq q = {0}, qr = {0}, qs = {0};
	struct zl_wire_hdr req, rp;
	uint8_t hdr[ZL_WIRE_HDR_SIZE];
	uint32_t done = 0, done_r = 0, done_s = 0;
	int lfd, fd, fill[8], nfill = 0, rc;
	uint16_t port;
	uint64_t t0;

	if (e->kind != ZL_XPORT_TCP)
		fail_msg("raw TCP peer test registered for another transport");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
	/* Fill the accept queue (never accepted): later SYNs are dropped. */
	for (int i = 0; i < 8; i++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(fd >= 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			assert_int_equal(errno, EINPROGRESS);
		fill[nfill++] = fd;
	}
	t0 = zl_now_ms();
	assert_int_equal(zl_xport_connect_start(e->cx, "127.0.0.1", ntohs(a.sin_port), false, 300,
						on_cclose, &cc, &c),
			 0);
	assert_true(zl_now_ms() - t0 < 100);
	q.done = &done;
	assert_int_equal(send_ping(c, &q, 1), 0);
	assert_int_equal(q.calls, 0);
	run_until(e, &done, 1);
	assert_int_equal(q.status, -ZL_ERR_CONN);
	run_until(e, &cc.closes, 1);
	assert_int_equal(cc.reason, -ZL_ERR_TIMEOUT);
	assert_true(zl_now_ms() - t0 >= 250);
	zl_xport_conn_put(c);
	c = NULL;

	/* Again, but the queue frees up: the SYN sent again a second later
	 * gets in, and the request queued meanwhile goes out. */
	assert_int_equal(zl_xport_connect_start(e->cx, "127.0.0.1", ntohs(a.sin_port), false, 5000,
						on_cclose, &cs, &c),
			 0);
	qs.done = &done_s;
	assert_int_equal(send_ping(c, &qs, 5), 0);
	run_idle(e, 5);
	assert_int_equal(qs.calls, 0);
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	assert_int_equal(fcntl(lfd, F_SETFL, O_NONBLOCK), 0);
	while ((fd = accept(lfd, NULL, NULL)) >= 0)
		close(fd); /* the filler that got in */
	t0 = zl_now_ms();
	while ((fd = accept(lfd, NULL, NULL)) < 0) {
		assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
		assert_true(zl_now_ms() - t0 < 4000);
		zl_loop_run_once(e->loop, 10);
	}
	assert_int_equal(fcntl(fd, F_SETFL, 0), 0);
	read_full(fd, hdr, sizeof(hdr));
	assert_int_equal(zl_wire_decode(hdr, sizeof(hdr), &req, NULL), 0);
	assert_int_equal(req.opcode, ZL_OP_PING);
	assert_int_equal(req.aux, 5);
	zl_wire_reply_init(&req, &rp, 0);
	zl_wire_encode(&rp, hdr);
	write_full(fd, hdr, sizeof(hdr));
	run_until(e, &done_s, 1);
	assert_int_equal(qs.status, 0);
	assert_int_equal(qs.rep.status, 0);
	cdone(e, c, &cs);
	c = NULL;
	close(fd);
	close(lfd);

	lfd = raw_listen(&port);
	close(lfd);
	rc = zl_xport_connect_start(e->cx, "127.0.0.1", port, false, 2000, on_cclose, &cr, &c);
	if (rc) {
		assert_int_equal(rc, -ECONNREFUSED);
		assert_null(c);
		return;
	}
	qr.done = &done_r;
	assert_int_equal(send_ping(c, &qr, 2), 0);
	run_until(e, &done_r, 1);
	assert_int_equal(qr.status, -ZL_ERR_CONN);
	run_until(e, &cr.closes, 1);
	assert_int_equal(cr.reason, -ZL_ERR_CONN);
	zl_xport_conn_put(c);
}

/* ---- TLS ---- */

/* A CA, a server certificate for IP 127.0.0.1 and DNS TLS_NAME signed by it,
 * and an unrelated CA, in a fresh directory. Fails the run without the
 * openssl CLI (scripts/install-deps.sh installs it). */
static void tls_certs_make(void)
{
	char cmd[2048];

	snprintf(tls_dir, sizeof(tls_dir), "/tmp/zl-tls-test.XXXXXX");
	if (!mkdtemp(tls_dir)) {
		fprintf(stderr, "transport_test: mkdtemp: %s\n", strerror(errno));
		exit(1);
	}
	snprintf(tls_ca, sizeof(tls_ca), "%s/ca.crt", tls_dir);
	snprintf(tls_cert, sizeof(tls_cert), "%s/tls.crt", tls_dir);
	snprintf(tls_key, sizeof(tls_key), "%s/tls.key", tls_dir);
	snprintf(tls_other_ca, sizeof(tls_other_ca), "%s/other-ca.crt", tls_dir);
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; "
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
		 "-subj /CN=zl-test-ca -keyout ca.key -out ca.crt; "
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
		 "-subj /CN=zl-other-ca -keyout other-ca.key -out other-ca.crt; "
		 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
		 "-subj /CN=zl-test-server -keyout tls.key -out tls.csr; "
		 "printf 'subjectAltName=IP:127.0.0.1,DNS:%s\\n' >ext.cnf; "
		 "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
		 "-extfile ext.cnf -out tls.crt",
		 tls_dir, TLS_NAME);
	if (system(cmd) != 0) {
		fprintf(stderr, "transport_test: could not make test certificates with the openssl "
				"CLI (install it: scripts/install-deps.sh)\n");
		exit(1);
	}
}

static void tls_certs_remove(void)
{
	char cmd[128];

	if (!tls_dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tls_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "transport_test: could not remove %s\n", tls_dir);
}

/* Pings on c until the callback runs; returns its status. */
static int tls_ping(struct env *e, struct zl_xport_conn *c)
{
	struct creq q = {0};
	uint32_t done = 0;

	q.done = &done;
	assert_int_equal(send_ping(c, &q, 7), 0);
	run_until(e, &done, 1);
	return q.status;
}

/* Reads from fd until EOF or an error (the peer closed): true, or false
 * after 5 s. */
static bool raw_wait_closed(struct env *e, int fd)
{
	uint64_t start = zl_now_ms();
	char buf[4096];

	while (zl_now_ms() - start < 5000) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			return true;
		zl_loop_run_once(e->loop, 10);
	}
	return false;
}

/* A plaintext client (a wire header where a ClientHello belongs) is closed
 * by a TLS server, which keeps serving TLS clients. */
static void test_tls_plaintext_refused(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct zl_wire_hdr h = {.version = ZL_WIRE_VERSION, .opcode = ZL_OP_PING};
	uint8_t raw[ZL_WIRE_HDR_SIZE];
	struct cconn cc = {0};
	struct zl_xport_conn *c;
	int fd;

	assert_true(zl_xport_tls_serving(e->sx));
	assert_false(zl_xport_tls_serving(e->cx));
	zl_wire_encode(&h, raw);
	fd = raw_connect(e->port);
	assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
	assert_true(raw_wait_closed(e, fd));
	close(fd);
	assert_int_equal(e->srv->n_req, 0);
	c = cconnect(e, &cc);
	assert_int_equal(tls_ping(e, c), 0);
	cdone(e, c, &cc);
}

/* A client without a CA cannot start TLS; one with another CA fails the
 * handshake with -ZL_ERR_TLS (requests and close); the server is fine. */
static void test_tls_verify(void **state)
{
	struct env *e = env_start(state, NULL, NULL);
	struct zl_xport_opts wo = {.kind = ZL_XPORT_TCP, .tls_ca = tls_other_ca};
	struct zl_xport_opts no = {.kind = ZL_XPORT_TCP};
	struct zl_xport_opts nm = {.kind = ZL_XPORT_TCP, .tls_ca = tls_ca,
				   .tls_server_name = "other.name"};
	struct zl_xport_opts dn = {.kind = ZL_XPORT_TCP, .tls_ca = tls_ca,
				   .tls_server_name = TLS_NAME};
	struct zl_xport_opts bad = {.kind = ZL_XPORT_TCP, .tls_cert = tls_cert};
	struct zl_xport *wx, *nx, *mx, *dx, *bx = NULL;
	struct cconn cc = {0}, cw = {0}, cm = {0}, cd = {0};
	struct zl_xport_conn *c = NULL;

	assert_int_equal(zl_xport_create(e->loop, &no, &nx), 0);
	assert_int_equal(zl_xport_connect_tls(nx, e->host, e->port, 2000, NULL, NULL, &c),
			 -ZL_ERR_TLS_CA);
	assert_null(c);
	zl_xport_destroy(nx);
	/* A certificate without its key is refused at create. */
	assert_int_equal(zl_xport_create(e->loop, &bad, &bx), -ZL_ERR_INVAL);
	assert_null(bx);

	assert_int_equal(zl_xport_create(e->loop, &wo, &wx), 0);
	assert_int_equal(zl_xport_connect_tls(wx, e->host, e->port, 2000, on_cclose, &cw, &c), 0);
	assert_int_equal(tls_ping(e, c), -ZL_ERR_TLS);
	run_until(e, &cw.closes, 1);
	assert_int_equal(cw.reason, -ZL_ERR_TLS);
	zl_xport_conn_put(c);
	zl_xport_destroy(wx);

	/* The right CA, the wrong name. */
	assert_int_equal(zl_xport_create(e->loop, &nm, &mx), 0);
	assert_int_equal(zl_xport_connect_tls(mx, e->host, e->port, 2000, on_cclose, &cm, &c), 0);
	assert_int_equal(tls_ping(e, c), -ZL_ERR_TLS);
	run_until(e, &cm.closes, 1);
	zl_xport_conn_put(c);
	zl_xport_destroy(mx);

	/* The cluster-wide name of the certificate instead of the address. */
	assert_int_equal(zl_xport_create(e->loop, &dn, &dx), 0);
	assert_int_equal(zl_xport_connect_tls(dx, e->host, e->port, 2000, on_cclose, &cd, &c), 0);
	assert_int_equal(tls_ping(e, c), 0);
	zl_xport_conn_close(c);
	run_until(e, &cd.closes, 1);
	zl_xport_conn_put(c);
	zl_xport_destroy(dx);

	c = cconnect(e, &cc);
	assert_int_equal(tls_ping(e, c), 0);
	cdone(e, c, &cc);
}

/* The peer goes away in the middle of the handshake: a client that sends
 * half a ClientHello, then a server that reads the ClientHello and closes. */
static void test_tls_close_mid_handshake(void **state)
{
	static const uint8_t half_hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
	struct env *e = env_start(state, NULL, NULL);
	struct cconn cc = {0}, cr = {0};
	struct zl_xport_conn *c = NULL;
	uint8_t buf[512];
	uint16_t port;
	uint32_t conns;
	int lfd, fd;

	conns = e->srv->n_close;
	fd = raw_connect(e->port);
	assert_int_equal(write(fd, half_hello, sizeof(half_hello)), (ssize_t)sizeof(half_hello));
	run_idle(e, 5);
	close(fd);
	run_until(e, &e->srv->n_close, conns + 1);
	assert_int_equal(e->srv->n_req, 0);

	lfd = raw_listen(&port);
	assert_int_equal(zl_xport_connect_tls(e->cx, "127.0.0.1", port, 2000, on_cclose, &cr, &c),
			 0);
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	{
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		uint64_t start = zl_now_ms();

		/* The ClientHello goes out from the loop. */
		while (poll(&pfd, 1, 0) == 0 && zl_now_ms() - start < 5000)
			zl_loop_run_once(e->loop, 10);
		assert_true(read(fd, buf, sizeof(buf)) > 0);
		assert_int_equal(buf[0], 0x16);
	}
	close(fd);
	close(lfd);
	assert_int_equal(tls_ping(e, c), -ZL_ERR_TLS);
	run_until(e, &cr.closes, 1);
	assert_int_equal(cr.reason, -ZL_ERR_TLS);
	zl_xport_conn_put(c);

	c = cconnect(e, &cc);
	assert_int_equal(tls_ping(e, c), 0);
	cdone(e, c, &cc);
}

/* A peer that connects and stalls (nothing, or half a ClientHello) is
 * closed once the server's timeout_ms passed, with -ZL_ERR_TIMEOUT. */
static void test_tls_stalled_handshake(void **state)
{
	static const uint8_t half_hello[] = {0x16, 0x03, 0x01, 0x02, 0x00};
	struct zl_xport_opts so = {.timeout_ms = 300};
	struct env *e = env_start(state, NULL, &so);
	struct cconn cc = {0};
	struct zl_xport_conn *c;
	int fd, fd2;

	fd = raw_connect(e->port);
	fd2 = raw_connect(e->port);
	assert_int_equal(write(fd2, half_hello, sizeof(half_hello)), (ssize_t)sizeof(half_hello));
	assert_true(raw_wait_closed(e, fd));
	assert_true(raw_wait_closed(e, fd2));
	close(fd);
	close(fd2);
	run_until(e, &e->srv->n_close, 2);
	assert_int_equal(e->srv->last_close_reason, -ZL_ERR_TIMEOUT);
	c = cconnect(e, &cc);
	assert_int_equal(tls_ping(e, c), 0);
	cdone(e, c, &cc);
}

static void test_pool(void **state)
{
	static const size_t sizes[] = {0,     1,	4096,	  4097,
				       65535, 1u << 20, 4u << 20, (4u << 20) + 4096};
	struct zl_xport_opts o = {.pool_bytes = 1 << 20};
	struct env *e = env_start(state, &o, NULL);
	void *b[64], *p;
	uint8_t stack;

	for (size_t i = 0; i < ZL_ARRAY_SIZE(sizes); i++) {
		b[i] = zl_xport_buf_alloc(e->cx, sizes[i]);
		assert_non_null(b[i]);
		assert_int_equal((uintptr_t)b[i] % 4096, 0);
		assert_true(zl_xport_buf_owned(e->cx, b[i], sizes[i] ? sizes[i] : 1));
		memset(b[i], (int)i, sizes[i]);
		for (size_t j = 0; j < i; j++)
			assert_ptr_not_equal(b[i], b[j]);
	}
	for (size_t i = 0; i < ZL_ARRAY_SIZE(sizes); i++)
		for (size_t k = 0; k < sizes[i]; k += 4093)
			assert_int_equal(((uint8_t *)b[i])[k], (uint8_t)i);
	assert_null(zl_xport_buf_alloc(e->cx, (4u << 20) + 4097));
	/* The pool buffer that holds a range (rdma_dev.c binds memory windows to
	 * it on rdma_rxe): start and class size, also from inside it. */
	{
		uint8_t *st = NULL;
		size_t sz = 0;

		assert_true(xport_pool_buf_span(&e->cx->pool, (uint8_t *)b[3] + 4100, 10, &st, &sz));
		assert_ptr_equal(st, b[3]);
		assert_int_equal(sz, 8192);
		assert_true(xport_pool_buf_span(&e->cx->pool, (uint8_t *)b[6] + 12345, 100, &st, &sz));
		assert_ptr_equal(st, b[6]);
		assert_int_equal(sz, 4u << 20);
		assert_false(xport_pool_buf_span(&e->cx->pool, (uint8_t *)b[3] + 8190, 4, &st, &sz));
		assert_false(xport_pool_buf_span(&e->cx->pool, &stack, 1, &st, &sz));
	}
	assert_false(zl_xport_buf_owned(e->cx, &stack, 1));
	assert_false(zl_xport_buf_owned(e->cx, NULL, 1));
	assert_false(zl_xport_buf_owned(e->sx, b[2], 4096)); /* other pool */
	/* Freed buffers are reused by their class. */
	p = b[5];
	zl_xport_buf_free(e->cx, b[5]);
	b[5] = zl_xport_buf_alloc(e->cx, (1u << 20) - 5);
	assert_ptr_equal(b[5], p);
	/* Bad frees are refused, not corrupting the pool. */
	zl_xport_buf_free(e->cx, NULL);
	zl_xport_buf_free(e->cx, (uint8_t *)b[3] + 1);
	zl_xport_buf_free(e->cx, &stack);
	zl_xport_buf_free(e->cx, b[4]);
	zl_xport_buf_free(e->cx, b[4]); /* double free: ignored */
	assert_ptr_equal(zl_xport_buf_alloc(e->cx, 65536), b[4]);
	assert_ptr_not_equal(zl_xport_buf_alloc(e->cx, 65536), b[4]);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(sizes); i++)
		zl_xport_buf_free(e->cx, b[i]);
	/* Growth far beyond the initial size. */
	for (int i = 0; i < 40; i++) {
		b[i] = zl_xport_buf_alloc(e->cx, 1u << 20);
		assert_non_null(b[i]);
		assert_true(zl_xport_buf_owned(e->cx, b[i], 1u << 20));
		memset(b[i], 0x5a, 1u << 20);
	}
	for (int i = 0; i < 40; i++)
		zl_xport_buf_free(e->cx, b[i]);
	/* Reused across the regions growth inserted before theirs (a free
	 * buffer's region index moved): each marked in use in its own region,
	 * so a double free is still refused. */
	for (int i = 0; i < 40; i++) {
		b[i] = zl_xport_buf_alloc(e->cx, 1u << 20);
		assert_true(zl_xport_buf_owned(e->cx, b[i], 1u << 20));
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(b[i], b[j]);
	}
	for (int i = 0; i < 40; i++)
		zl_xport_buf_free(e->cx, b[i]);
	zl_xport_buf_free(e->cx, b[0]); /* double free: ignored */
	p = zl_xport_buf_alloc(e->cx, 1u << 20);
	assert_ptr_not_equal(zl_xport_buf_alloc(e->cx, 1u << 20), p);
}


/* ---- crash and churn (both kinds; the peers are separate processes) ---- */

/* Child process modes (argv: --child client|server KIND HOST [PORT]): a client
 * that sends 4 PINGs and waits, or a server that never answers. Both run until
 * killed (30 s at most). */
static void child_srv_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
			      struct zl_xport_payload *p)
{
	(void)arg;
	(void)c;
	(void)h;
	if (p)
		zl_xport_discard(p);
}

static void child_reply(void *arg, int status, const struct zl_wire_hdr *rep)
{
	(void)arg;
	(void)status;
	(void)rep;
}

static int child_main(int argc, char **argv)
{
	static const struct zl_xport_server_ops ops = {.on_request = child_srv_request};
	struct zl_xport_opts o = {0};
	struct zl_xport_listener *l = NULL;
	struct zl_xport_conn *c = NULL;
	struct zl_wire_hdr h[4];
	struct zl_loop *loop;
	struct zl_xport *x;
	uint64_t end;

	if (argc < 5)
		return 2;
	o.kind = strcmp(argv[3], "rdma") ? ZL_XPORT_TCP : ZL_XPORT_RDMA;
	if (zl_loop_create(&loop) || zl_xport_create(loop, &o, &x))
		return 3;
	if (!strcmp(argv[2], "server")) {
		if (zl_xport_listen(x, argv[4], 0, &ops, NULL, &l))
			return 4;
		printf("%u\n", zl_xport_listener_port(l));
		fflush(stdout);
	} else {
		if (argc < 6 || zl_xport_connect(x, argv[4], (uint16_t)atoi(argv[5]), 5000, NULL,
						 NULL, &c))
			return 5;
		for (int i = 0; i < 4; i++) {
			memset(&h[i], 0, sizeof(h[i]));
			h[i].opcode = ZL_OP_PING;
			if (zl_xport_request(c, &h[i], NULL, 0, NULL, 0, child_reply, NULL))
				return 6;
		}
	}
	end = zl_now_ms() + 30000;
	while (zl_now_ms() < end)
		zl_loop_run_once(loop, 100);
	return 0;
}

static pid_t spawn_child(const char *mode, struct env *e, uint16_t port, int *out_fd)
{
	char portstr[8];
	int pfd[2];
	pid_t pid;

	snprintf(portstr, sizeof(portstr), "%u", port);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		execl("/proc/self/exe", "transport_test", "--child", mode,
		      zl_xport_kind_name(e->kind), e->host, portstr, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	*out_fd = pfd[0];
	return pid;
}

static void reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* kill -9 of a peer process: a client with requests held by our server, then
 * a server with our requests in flight. Everything fails with
 * -ZL_ERR_CONN, nothing hangs, and the transport keeps serving. */
static void test_peer_crash(void **state)
{
	struct zl_xport_opts co = {.timeout_ms = 60000}; /* the crash, not a timeout */
	struct env *e = env_start(state, &co, NULL);
	struct cconn cc = {0}, cc2 = {0};
	struct zl_xport_conn *c = NULL, *c2;
	struct creq q[3] = {0}, p = {0};
	struct zl_wire_hdr rep;
	struct pollfd pfd;
	char line[16] = {0};
	uint32_t done = 0;
	pid_t pid;
	int fd;

	e->srv->mode = SRV_HOLD;
	pid = spawn_child("client", e, e->port, &fd);
	run_until(e, &e->srv->n_held, 4);
	reap(pid);
	close(fd);
	run_until(e, &e->srv->n_close, 1);
	assert_int_equal(e->srv->last_close_reason, -ZL_ERR_CONN);
	zl_wire_reply_init(&e->srv->held[0]->h, &rep, 0);
	assert_int_equal(zl_xport_reply(e->srv->held[0]->c, &rep, NULL, 0, NULL, NULL),
			 -ZL_ERR_CONN);
	srv_release(e->srv, NULL);
	assert_int_equal(e->srv->n_answered, 0);

	pid = spawn_child("server", e, 0, &fd);
	pfd = (struct pollfd){.fd = fd, .events = POLLIN};
	assert_int_equal(poll(&pfd, 1, 30000), 1);
	assert_true(read(fd, line, sizeof(line) - 1) > 0);
	close(fd);
	assert_int_equal(zl_xport_connect(e->cx, e->host, (uint16_t)atoi(line), 5000, on_cclose,
					  &cc, &c),
			 0);
	for (int i = 0; i < 3; i++) {
		q[i].done = &done;
		assert_int_equal(send_ping(c, &q[i], i), 0);
	}
	run_idle(e, 5);
	reap(pid);
	run_until(e, &cc.closes, 1);
	assert_int_equal(done, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(q[i].status, -ZL_ERR_CONN);
	assert_int_equal(cc.reason, -ZL_ERR_CONN);
	zl_xport_conn_put(c);

	e->srv->mode = SRV_ANSWER;
	c2 = cconnect(e, &cc2);
	p.done = &done;
	assert_int_equal(send_ping(c2, &p, 5), 0);
	run_until(e, &done, 4);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.rep.aux, 16);
	cdone(e, c2, &cc2);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Kernel RDMA objects of the device (iproute2 `rdma resource`), "" without
 * the tool. */
static void rdma_objects(char *out, size_t len)
{
	FILE *f = popen("rdma resource show 2>/dev/null", "r");
	size_t n = 0;

	out[0] = 0;
	if (!f)
		return;
	n = fread(out, 1, len - 1, f);
	out[n] = 0;
	pclose(f);
}

/* Many connect/write/read/close cycles leak nothing: no fd, and on RDMA no
 * QP, CQ, MR, PD, SRQ or cm_id (kernel's own accounting). */
static void test_connect_cycles(void **state)
{
	enum { CYCLES = 40, LEN = 65536 + 123 };
	struct env *e = env_start(state, NULL, NULL);
	uint8_t *w = zl_xport_buf_alloc(e->cx, LEN), *r = malloc(LEN);
	char before[512], after[512];
	int fds = 0;

	assert_non_null(w);
	assert_non_null(r);
	for (int i = 0; i <= CYCLES; i++) {
		struct cconn cc = {0};
		struct zl_xport_conn *c = cconnect(e, &cc);
		struct creq wq = {0}, rq = {0};
		uint32_t done = 0;

		wq.done = rq.done = &done;
		assert_int_equal(send_write(c, &wq, w, LEN, 1000 + i), 0);
		assert_int_equal(send_read(c, &rq, r, LEN, 2000 + i), 0);
		run_until(e, &done, 2);
		assert_int_equal(wq.status, 0);
		assert_int_equal(wq.rep.status, 0);
		assert_int_equal(rq.status, 0);
		assert_true(check(r, LEN, 2000 + i));
		cdone(e, c, &cc);
		run_until(e, &e->srv->n_close, (uint32_t)i + 1);
		if (i == 0) {
			/* after the first: per-device state exists now */
			fds = count_fds();
			rdma_objects(before, sizeof(before));
		}
	}
	assert_int_equal(count_fds(), fds);
	rdma_objects(after, sizeof(after));
	if (strcmp(before, after))
		fail_msg("RDMA objects leaked:\nbefore: %s\nafter:  %s", before, after);
	zl_xport_buf_free(e->cx, w);
	free(r);
}

static void test_names_and_create(void **state)
{
	struct zl_xport_opts o = {.kind = ZL_XPORT_RDMA};
	enum zl_xport_select sel = ZL_XPORT_SEL_TCP;
	struct zl_xport *x = NULL;
	struct zl_loop *loop;
	int rc;

	(void)state;
	assert_int_equal(zl_xport_select_parse("auto", &sel), 0);
	assert_int_equal(sel, ZL_XPORT_SEL_AUTO);
	assert_int_equal(zl_xport_select_parse("tcp", &sel), 0);
	assert_int_equal(sel, ZL_XPORT_SEL_TCP);
	assert_int_equal(zl_xport_select_parse("rdma", &sel), 0);
	assert_int_equal(sel, ZL_XPORT_SEL_RDMA);
	assert_int_equal(zl_xport_select_parse("RDMA", &sel), 0);
	assert_int_equal(zl_xport_select_parse("", &sel), -ZL_ERR_INVAL);
	assert_int_equal(zl_xport_select_parse("tcpx", &sel), -ZL_ERR_INVAL);
	assert_int_equal(zl_xport_select_parse(NULL, &sel), -ZL_ERR_INVAL);
	assert_string_equal(zl_xport_kind_name(ZL_XPORT_TCP), "tcp");
	assert_string_equal(zl_xport_kind_name(ZL_XPORT_RDMA), "rdma");
	assert_string_equal(zl_xport_kind_name((enum zl_xport_kind)7), "unknown");

	assert_int_equal(zl_loop_create(&loop), 0);
	/* RDMA: 0 with a device, else -ENODEV, or -EPROTONOSUPPORT when the
	 * build has no rdma-core. */
	rc = zl_xport_create(loop, &o, &x);
	if (kind_required(ZL_XPORT_RDMA)) {
		assert_int_equal(rc, 0);
		assert_int_equal(zl_xport_kind(x), ZL_XPORT_RDMA);
		zl_xport_destroy(x);
		x = NULL;
	} else {
		assert_true(rc == 0 || rc == -ENODEV || rc == -EPROTONOSUPPORT);
		zl_xport_destroy(x);
		x = NULL;
	}
	{
		enum zl_xport_kind k = 0;
		bool rdma = kind_required(ZL_XPORT_RDMA);

		assert_int_equal(zl_xport_select_kind(ZL_XPORT_SEL_TCP, "127.0.0.1", 0, 500, &k), 0);
		assert_int_equal(k, ZL_XPORT_TCP);
		assert_int_equal(zl_xport_select_kind(ZL_XPORT_SEL_RDMA, "127.0.0.1", 0, 500, &k), 0);
		assert_int_equal(k, ZL_XPORT_RDMA);
		/* auto: RDMA exactly when an RDMA device reaches the address. */
		assert_int_equal(zl_xport_select_kind(ZL_XPORT_SEL_AUTO,
						      kind_host(ZL_XPORT_RDMA), 0, 2000, &k), 0);
		if (rdma)
			assert_int_equal(k, ZL_XPORT_RDMA);
		else if (!getenv("RXE_IP"))
			assert_int_equal(k, ZL_XPORT_TCP);
		assert_int_equal(zl_xport_select_kind(ZL_XPORT_SEL_AUTO, "no-such-host.invalid",
						      0, 500, &k), 0);
		assert_int_equal(k, ZL_XPORT_TCP);
	}
	o.kind = (enum zl_xport_kind)9;
	assert_int_equal(zl_xport_create(loop, &o, &x), -ZL_ERR_INVAL);
	o.kind = ZL_XPORT_TCP;
	o.max_inflight = 1u << 20;
	assert_int_equal(zl_xport_create(loop, &o, &x), -ZL_ERR_INVAL);
	zl_xport_destroy(NULL);
	zl_loop_destroy(loop);
}

/* Every transport must pass these. */
#define KIND_TESTS(kind) \
	cmocka_unit_test_prestate_setup_teardown(test_ping_pong, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_pipelined_out_of_order, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_large_and_unaligned, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_crc_once, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_discard_and_early_reply, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_parallel_connections, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_peer_close, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_server_close_with_queued_replies, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_timeout, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_busy, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_server_backpressure, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_local_close_and_destroy, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_pool, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_peer_crash, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_connect_cycles, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_connect_start, NULL, env_teardown, kind)

/* These play a misbehaving peer with a raw TCP socket: TCP only. */
#define TCP_ONLY_TESTS(kind) \
	cmocka_unit_test_prestate_setup_teardown(test_peer_reset, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_early_reply, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_bad_frames, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_reply_corrupt, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_duplicate_request_id, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_connect_errors, NULL, env_teardown, kind),\
	cmocka_unit_test_prestate_setup_teardown(test_connect_start_fails, NULL, env_teardown, kind)

int main(int argc, char **argv)
{
	const struct CMUnitTest common[] = {
	    cmocka_unit_test(test_names_and_create),
	};
	const struct CMUnitTest tcp[] = {KIND_TESTS((void *)&kind_tcp),
					 TCP_ONLY_TESTS((void *)&kind_tcp)};
	const struct CMUnitTest rdma[] = {KIND_TESTS((void *)&kind_rdma)};
	/* The kind tests over TLS (not test_peer_crash: its child processes
	 * speak plaintext), and the TLS cases. */
#define TLS_TEST(t) cmocka_unit_test_prestate_setup_teardown(t, NULL, env_teardown, (void *)&kind_tls)
	const struct CMUnitTest tls[] = {
	    TLS_TEST(test_ping_pong),
	    TLS_TEST(test_pipelined_out_of_order),
	    TLS_TEST(test_large_and_unaligned),
	    TLS_TEST(test_crc_once),
	    TLS_TEST(test_discard_and_early_reply),
	    TLS_TEST(test_parallel_connections),
	    TLS_TEST(test_peer_close),
	    TLS_TEST(test_server_close_with_queued_replies),
	    TLS_TEST(test_timeout),
	    TLS_TEST(test_busy),
	    TLS_TEST(test_server_backpressure),
	    TLS_TEST(test_local_close_and_destroy),
	    TLS_TEST(test_pool),
	    TLS_TEST(test_connect_cycles),
	    TLS_TEST(test_connect_start),
	    TLS_TEST(test_tls_plaintext_refused),
	    TLS_TEST(test_tls_verify),
	    TLS_TEST(test_tls_close_mid_handshake),
	    TLS_TEST(test_tls_stalled_handshake),
	};
#undef TLS_TEST
	int failed = 0;

	if (argc > 1 && !strcmp(argv[1], "--child"))
		return child_main(argc, argv);
	zl_log_init("transport_test");
	failed += cmocka_run_group_tests_name("transport_common", common, NULL, NULL);
	failed += cmocka_run_group_tests_name("transport_tcp", tcp, NULL, NULL);
	tls_certs_make();
	failed += cmocka_run_group_tests_name("transport_tls", tls, NULL, NULL);
	tls_certs_remove();
	/* The RDMA group runs where RDMA is required (the VM run, ctest
	 * rdma_vm, part transport); elsewhere it is not run at all rather than
	 * skipped test by test. */
	if (kind_required(ZL_XPORT_RDMA))
		failed += cmocka_run_group_tests_name("transport_rdma", rdma, NULL, NULL);
	else
		printf("transport_rdma: not run here (no ZL_TEST_XPORT_REQUIRE=rdma); "
		       "ctest rdma_vm runs it in the VM\n");
	return failed;
}
