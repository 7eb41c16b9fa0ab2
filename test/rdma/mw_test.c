/* mw_test: the adversary of RDMA memory exposure (docs/SECURITY.md, issue 11
 * item 4), run inside the Soft-RoCE test VM (test/rdma/security_rdma.sh).
 *
 * The victim is the project's RDMA transport (lib/transport/rdma_*.c) as a
 * client; the attacker a "rogue server" written here on raw verbs and
 * rdma_cm, which speaks the transport's handshake (rdma_internal.h) and wire
 * format (lib/wire) and keeps every descriptor (addr, rkey, len) it is sent.
 * Each case asserts on what the attacker's own work completions say and on
 * the victim's bytes, never on what the transport reports about itself:
 *
 *   read_after_reply   the window of a READ works during the request (the
 *                      positive control), and an RDMA WRITE with its rkey
 *                      after the reply (SEND_WITH_INV) fails; the buffer
 *                      keeps the reply's data
 *   write_after_reply  the window of a WRITE reads the data during the
 *                      request; an RDMA READ with it after the reply fails
 *                      and returns nothing
 *   write_into_write   a WRITE's window (REMOTE_READ) cannot be written
 *   no_remote_inv      a server that replies with a plain SEND: the client
 *                      invalidates the window itself (LOCAL_INV counted)
 *                      before the request completes; the rkey is dead then
 *   other_connection   a second connection of the same client process (same
 *                      protection domain) cannot use the first one's rkey,
 *                      while the first one still can
 *   outside_window     one byte past the end, one byte before the start and
 *                      len + 1 bytes of a live window over a pool buffer: all
 *                      refused, the last byte inside is readable
 *   server_memory      the transport as a server (what a storage daemon is):
 *                      its registrations have no remote access flag, and a
 *                      rogue client that uses the registration's real rkey
 *                      (and neighbours of it) cannot read or write a pool
 *                      buffer of the server
 *
 * Usage: mw_test HOST (an address on the RDMA device: $RXE_IP in the VM).
 * Prints "FIGURE:" lines and one "ok"/"FAIL" line per check; exit 0 when
 * every check passed, 1 otherwise (also when something cannot run).
 *
 * The same rogue client against a running storage daemon's RDMA port (its
 * /metrics are the oracle there: test/rdma/counters_rdma.sh):
 *   mw_test --fill HOST PORT LEAVE   holds connections until the daemon's
 *       shared receive queue has LEAVE credits left for the next connection
 *       ("fill READY"), then until killed;
 *   mw_test --bad-rkey HOST PORT VOL_ID   a READ of the volume's chunk 0
 *       whose descriptor names local-only memory: the daemon's RDMA WRITE
 *       fails (exit 0 once the rogue's QP went to ERR). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/transport/rdma_internal.h"
#include "lib/transport/transport.h"
#include "lib/wire/wire.h"

#define RG_SLOTS 8
#define RG_DATA_OFF (64u << 10)
#define RG_DATA_LEN (1u << 20)
#define RG_MEM (RG_DATA_OFF + RG_DATA_LEN)
#define RG_WAIT_MS 10000
#define IO_LEN 8192u /* above RDMA_INLINE_MAX: WRITEs go by descriptor too */

static int failures, checks;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		checks++;                                                                          \
		if (cond) {                                                                        \
			printf("  ok: ");                                                          \
		} else {                                                                           \
			failures++;                                                                \
			printf("  FAIL: ");                                                        \
		}                                                                                  \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
		fflush(stdout);                                                                    \
	} while (0)

/* ---- the rogue peer: raw verbs ---- */

struct rg_conn {
	struct rdma_event_channel *ch; /* own channel (rogue client) or NULL */
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr;
	uint8_t *mem; /* RG_SLOTS receive slots, a send slot, then the data area */
	struct zl_wire_hdr req; /* the last message received */
	struct zl_wire_rdma_desc desc;
	bool has_desc;
	uint64_t next_req;
};

struct rg_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	uint16_t port;
};

static int rg_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static uint8_t *rg_data(struct rg_conn *c)
{
	return c->mem + RG_DATA_OFF;
}

/* Waits for CM event `want` on ch (others are acknowledged and skipped),
 * running loop meanwhile when given. Returns 0 with *out, or -ETIMEDOUT. */
static int rg_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		    struct rdma_cm_event **out, struct zl_loop *loop)
{
	uint64_t end = zl_now_ms() + RG_WAIT_MS;

	while (zl_now_ms() < end) {
		struct rdma_cm_event *ev;
		struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};

		if (rdma_get_cm_event(ch, &ev) == 0) {
			if (ev->event == want) {
				*out = ev;
				return 0;
			}
			if (ev->event == RDMA_CM_EVENT_REJECTED ||
			    ev->event == RDMA_CM_EVENT_UNREACHABLE ||
			    ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
			    ev->event == RDMA_CM_EVENT_ADDR_ERROR ||
			    ev->event == RDMA_CM_EVENT_ROUTE_ERROR) {
				fprintf(stderr, "mw_test: rogue cm event %s while waiting for %s\n",
					rdma_event_str(ev->event), rdma_event_str(want));
				rdma_ack_cm_event(ev);
				return -ECONNREFUSED;
			}
			rdma_ack_cm_event(ev);
			continue;
		}
		if (loop)
			zl_loop_run_once(loop, 1);
		else
			poll(&pfd, 1, 20);
	}
	fprintf(stderr, "mw_test: rogue: no %s within %d ms\n", rdma_event_str(want), RG_WAIT_MS);
	return -ETIMEDOUT;
}

static int rg_post_recv(struct rg_conn *c, uint32_t i)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(c->mem + (size_t)i * RDMA_MSG_SIZE),
			      .length = RDMA_MSG_SIZE,
			      .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

/* PD, CQs, QP and the rogue's own (local-only) memory on id. */
static int rg_setup(struct rg_conn *c, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {0};

	c->id = id;
	c->pd = ibv_alloc_pd(id->verbs);
	c->scq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	c->rcq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	c->mem = aligned_alloc(4096, RG_MEM);
	if (!c->pd || !c->scq || !c->rcq || !c->mem)
		return -ENOMEM;
	memset(c->mem, 0, RG_MEM);
	c->mr = ibv_reg_mr(c->pd, c->mem, RG_MEM, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		return -errno;
	qa.send_cq = c->scq;
	qa.recv_cq = c->rcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 32;
	qa.cap.max_recv_wr = RG_SLOTS;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, c->pd, &qa))
		return -errno;
	for (uint32_t i = 0; i < RG_SLOTS; i++)
		if (rg_post_recv(c, i))
			return -EIO;
	return 0;
}

static void rg_free(struct rg_conn *c)
{
	if (c->id) {
		rdma_disconnect(c->id);
		if (c->id->qp)
			rdma_destroy_qp(c->id);
	}
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->scq)
		ibv_destroy_cq(c->scq);
	if (c->rcq)
		ibv_destroy_cq(c->rcq);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	free(c->mem);
	memset(c, 0, sizeof(*c));
}

static void rg_hs(uint8_t out[RDMA_HS_SIZE], uint16_t flags, uint32_t count)
{
	uint32_t v[4] = {RDMA_HS_MAGIC, RDMA_HS_VERSION | ((uint32_t)flags << 16), count,
			 RDMA_MSG_SIZE};

	for (int i = 0; i < 4; i++)
		zl_put_le32(out + 4 * i, v[i]);
}

static int rg_listen(struct rg_listener *l, const char *host)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_PASSIVE}, *ai;
	int rc;

	l->ch = rdma_create_event_channel();
	if (!l->ch)
		return -errno;
	rc = rg_nonblock(l->ch->fd);
	if (rc)
		return rc;
	if (getaddrinfo(host, "0", &hints, &ai))
		return -EHOSTUNREACH;
	rc = rdma_create_id(l->ch, &l->id, NULL, RDMA_PS_TCP) || rdma_bind_addr(l->id, ai->ai_addr) ||
	     rdma_listen(l->id, 8);
	freeaddrinfo(ai);
	if (rc)
		return -errno;
	l->port = ntohs(rdma_get_src_port(l->id));
	return 0;
}

struct rg_accept_job {
	struct rg_listener *l;
	struct rg_conn *c;
	uint16_t flags;
	int rc;
	atomic_bool done;
};

/* Thread: accepts one connection like the transport's server would, with
 * the handshake flags job->flags, 4 credits. */
static void *rg_accept_thread(void *arg)
{
	struct rg_accept_job *j = arg;
	struct rdma_conn_param cp = {0};
	struct rdma_cm_event *ev;
	uint8_t pd[RDMA_HS_SIZE];
	struct rdma_cm_id *id;
	uint8_t ird, ord;

	j->rc = rg_event(j->l->ch, RDMA_CM_EVENT_CONNECT_REQUEST, &ev, NULL);
	if (j->rc)
		goto out;
	id = ev->id;
	ird = ev->param.conn.initiator_depth;
	ord = ev->param.conn.responder_resources;
	rdma_ack_cm_event(ev);
	j->rc = rg_setup(j->c, id);
	if (j->rc)
		goto out;
	rg_hs(pd, j->flags, 4);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources = ird;
	cp.initiator_depth = ord;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp)) {
		j->rc = -errno;
		goto out;
	}
	j->rc = rg_event(j->l->ch, RDMA_CM_EVENT_ESTABLISHED, &ev, NULL);
	if (!j->rc)
		rdma_ack_cm_event(ev);
out:
	atomic_store(&j->done, true);
	return NULL;
}

/* Polls cq for one completion within RG_WAIT_MS, running loop meanwhile
 * when given. Returns 1 with *wc, 0 on timeout. */
static int rg_poll(struct ibv_cq *cq, struct ibv_wc *wc, struct zl_loop *loop)
{
	uint64_t end = zl_now_ms() + RG_WAIT_MS;

	while (zl_now_ms() < end) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n > 0;
		if (loop)
			zl_loop_run_once(loop, 1);
		else
			sched_yield(); /* the peer may be a process on this CPU */
	}
	return 0;
}

/* Receives one message; decodes its header (and descriptor). 0 or -1. */
static int rg_recv(struct rg_conn *c, struct zl_loop *loop)
{
	struct ibv_wc wc;
	const char *why = "?";
	const uint8_t *buf;

	if (!rg_poll(c->rcq, &wc, loop) || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "mw_test: rogue: no message received\n");
		return -1;
	}
	buf = c->mem + wc.wr_id * RDMA_MSG_SIZE;
	if (zl_wire_decode(buf, wc.byte_len, &c->req, &why)) {
		fprintf(stderr, "mw_test: rogue: undecodable message: %s\n", why);
		return -1;
	}
	c->has_desc = (c->req.flags & ZL_WF_RDMA) &&
		      !zl_wire_rdma_desc_decode(buf + ZL_WIRE_HDR_SIZE, wc.byte_len - ZL_WIRE_HDR_SIZE,
						&c->desc);
	return rg_post_recv(c, (uint32_t)wc.wr_id);
}

static const char *qp_state_name(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return "?";
	switch (a.qp_state) {
	case IBV_QPS_RTS:
		return "RTS";
	case IBV_QPS_ERR:
		return "ERR";
	case IBV_QPS_SQE:
		return "SQE";
	default:
		return "other";
	}
}

/* RDMA READ (into) or WRITE (from) the data area at loff, len bytes, at
 * raddr with rkey. Returns the work completion's status (IBV_WC_GENERAL_ERR
 * when none arrived or the post failed). */
static enum ibv_wc_status rg_rdma(struct rg_conn *c, enum ibv_wr_opcode op, uint32_t loff,
				  uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(rg_data(c) + loff), .length = len,
			      .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(c->id->qp, &wr, &bad))
		return IBV_WC_GENERAL_ERR;
	if (!rg_poll(c->scq, &wc, NULL))
		return IBV_WC_GENERAL_ERR;
	return wc.status;
}

/* Sends hdr (a reply or a request) from the send slot, followed by d when
 * given (a request whose payload the peer moves by RDMA); inv_rkey != 0
 * makes it a SEND_WITH_INV of that rkey. Returns the completion status. */
static enum ibv_wc_status rg_send_desc(struct rg_conn *c, const struct zl_wire_hdr *h,
				       const struct zl_wire_rdma_desc *d, uint32_t inv_rkey,
				       bool use_inv)
{
	uint8_t *msg = c->mem + (size_t)RG_SLOTS * RDMA_MSG_SIZE;
	struct ibv_sge sge = {.addr = (uintptr_t)msg,
			      .length = ZL_WIRE_HDR_SIZE + (d ? ZL_WIRE_RDMA_DESC_SIZE : 0),
			      .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1,
				 .opcode = use_inv ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc;

	wr.invalidate_rkey = inv_rkey;
	zl_wire_encode(h, msg);
	if (d)
		zl_wire_rdma_desc_encode(d, msg + ZL_WIRE_HDR_SIZE);
	if (ibv_post_send(c->id->qp, &wr, &bad) || !rg_poll(c->scq, &wc, NULL))
		return IBV_WC_GENERAL_ERR;
	return wc.status;
}

static enum ibv_wc_status rg_send(struct rg_conn *c, const struct zl_wire_hdr *h, uint32_t inv_rkey,
				  bool use_inv)
{
	return rg_send_desc(c, h, NULL, inv_rkey, use_inv);
}

/* Answers the last request: data_len > 0 says data of that length was
 * RDMA-written (READ reply). inv: SEND_WITH_INV of the request's rkey. */
static enum ibv_wc_status rg_reply(struct rg_conn *c, uint32_t data_len, bool inv)
{
	struct zl_wire_hdr rep;

	zl_wire_reply_init(&c->req, &rep, 0);
	if (data_len) {
		rep.flags |= ZL_WF_RDMA;
		rep.length = data_len;
		rep.payload_crc = zl_crc32c(rg_data(c), data_len);
	}
	return rg_send(c, &rep, c->desc.rkey, inv);
}

/* ---- the victim: the transport as a client ---- */

struct victim {
	struct zl_loop *loop;
	struct zl_xport *x;
	struct rg_listener l;
	const char *host;
};

struct vreq {
	bool done;
	int status;
	struct zl_wire_hdr rep;
};

static void vreq_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct vreq *v = arg;

	v->done = true;
	v->status = status;
	if (rep)
		v->rep = *rep;
}

static void vclose_cb(void *arg, struct zl_xport_conn *c, int reason)
{
	(void)c;
	(void)reason;
	*(bool *)arg = true;
}

static void run_for(struct zl_loop *loop, const bool *flag, int ms)
{
	uint64_t end = zl_now_ms() + (uint64_t)ms;

	while ((!flag || !*flag) && zl_now_ms() < end)
		zl_loop_run_once(loop, 5);
}

/* A rogue-accepted connection of the victim. flags: the rogue's ACCEPT
 * handshake flags. Returns the victim's connection or NULL. */
static struct zl_xport_conn *vconnect(struct victim *v, struct rg_conn *rc, uint16_t flags,
				      bool *closed)
{
	struct rg_accept_job j = {.l = &v->l, .c = rc, .flags = flags};
	struct zl_xport_conn *c = NULL;
	pthread_t th;
	int rc2;

	memset(rc, 0, sizeof(*rc));
	*closed = false;
	if (pthread_create(&th, NULL, rg_accept_thread, &j))
		return NULL;
	rc2 = zl_xport_connect(v->x, v->host, v->l.port, RG_WAIT_MS, vclose_cb, closed, &c);
	pthread_join(th, NULL);
	if (rc2 || j.rc) {
		fprintf(stderr, "mw_test: connection to the rogue failed: client %s, rogue %s\n",
			zl_strerror(rc2), zl_strerror(j.rc));
		if (!rc2) {
			zl_xport_conn_close(c);
			zl_xport_conn_put(c);
		}
		return NULL;
	}
	return c;
}

static void vdrop(struct victim *v, struct zl_xport_conn *c, bool *closed, struct rg_conn *rc)
{
	zl_xport_conn_close(c);
	run_for(v->loop, closed, 2000);
	zl_xport_conn_put(c);
	rg_free(rc);
}

/* Issues a READ (in != NULL) into in, or a WRITE of out; len bytes. */
static int vrequest(struct zl_xport_conn *c, void *in, const void *out, uint32_t len,
		    struct vreq *vr)
{
	struct zl_wire_hdr h = {.opcode = in ? ZL_OP_READ : ZL_OP_WRITE, .vol_id = 1, .length = len};

	memset(vr, 0, sizeof(*vr));
	return zl_xport_request(c, &h, out, out ? len : 0, in, in ? len : 0, vreq_cb, vr);
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return false;
	return true;
}

#define WC_OK(st) ((st) == IBV_WC_SUCCESS)
/* Refused by the victim's device: not a timeout, not a flush of a QP that
 * was dead already. */
#define REFUSED(st) ((st) == IBV_WC_REM_ACCESS_ERR)

/* The victim's buffer: a 64 KiB pool buffer of filler, the I/O range at
 * +4 KiB, so that the bytes around the window lie in the same registration. */
static uint8_t *vbuf(struct victim *v, uint8_t fill, uint8_t io)
{
	uint8_t *b = zl_xport_buf_alloc(v->x, 65536);

	if (b) {
		memset(b, fill, 65536);
		memset(b + 4096, io, IO_LEN);
	}
	return b;
}

static bool vbuf_is(const uint8_t *b, uint8_t fill, uint8_t io)
{
	return all_bytes(b, 4096, fill) && all_bytes(b + 4096, IO_LEN, io) &&
	       all_bytes(b + 4096 + IO_LEN, 65536 - 4096 - IO_LEN, fill);
}

static void case_read_after_reply(struct victim *v)
{
	struct rg_conn rc;
	struct vreq vr;
	bool closed;
	struct zl_xport_conn *c = vconnect(v, &rc, RDMA_HS_F_INV, &closed);
	uint8_t *b = vbuf(v, 0x11, 0x11);
	uint64_t linv0 = xport_rdma_local_invalidates(v->x);
	enum ibv_wc_status st;

	printf("case read_after_reply\n");
	if (!c || !b || vrequest(c, b + 4096, NULL, IO_LEN, &vr) || rg_recv(&rc, NULL)) {
		CHECK(false, "setup (connection, READ request, descriptor received)");
		goto out;
	}
	CHECK(rc.has_desc && rc.desc.addr == (uintptr_t)(b + 4096) && rc.desc.len == IO_LEN,
	      "the READ carries a descriptor of exactly its buffer (addr +0, len %u, rkey 0x%x)",
	      rc.desc.len, rc.desc.rkey);
	memset(rg_data(&rc), 0xa5, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_WRITE, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(WC_OK(st), "during the request the server RDMA-WRITEs the window: %s",
	      ibv_wc_status_str(st));
	st = rg_reply(&rc, IO_LEN, true);
	run_for(v->loop, &vr.done, RG_WAIT_MS);
	CHECK(WC_OK(st) && vr.done && vr.status == 0 && vr.rep.status == 0,
	      "the reply (SEND_WITH_INV) completes the READ: status %s",
	      vr.done ? zl_errname(vr.status) : "none");
	CHECK(vbuf_is(b, 0x11, 0xa5), "the buffer holds the server's data, nothing around it");
	CHECK(xport_rdma_local_invalidates(v->x) == linv0,
	      "the remote invalidate was seen: no local invalidate posted");
	memset(rg_data(&rc), 0x5a, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_WRITE, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(REFUSED(st), "RDMA WRITE with the kept descriptor after the reply is refused: %s",
	      ibv_wc_status_str(st));
	printf("FIGURE: stale rkey write after reply: %s, rogue qp %s\n", ibv_wc_status_str(st),
	       qp_state_name(rc.id->qp));
	run_for(v->loop, &closed, 500);
	CHECK(vbuf_is(b, 0x11, 0xa5), "the victim's buffer is unchanged (0xa5, not 0x5a)");
out:
	if (c)
		vdrop(v, c, &closed, &rc);
	zl_xport_buf_free(v->x, b);
}

static void case_write_after_reply(struct victim *v)
{
	struct rg_conn rc;
	struct vreq vr;
	bool closed;
	struct zl_xport_conn *c = vconnect(v, &rc, RDMA_HS_F_INV, &closed);
	uint8_t *b = vbuf(v, 0x22, 0x3c);
	enum ibv_wc_status st;

	printf("case write_after_reply\n");
	if (!c || !b || vrequest(c, NULL, b + 4096, IO_LEN, &vr) || rg_recv(&rc, NULL) ||
	    !rc.has_desc) {
		CHECK(false, "setup (connection, WRITE request with a descriptor)");
		goto out;
	}
	CHECK(rc.desc.addr == (uintptr_t)(b + 4096) && rc.desc.len == IO_LEN,
	      "the WRITE's descriptor is exactly its data (len %u)", rc.desc.len);
	st = rg_rdma(&rc, IBV_WR_RDMA_READ, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(WC_OK(st) && all_bytes(rg_data(&rc), IO_LEN, 0x3c),
	      "during the request the server RDMA-READs the data: %s", ibv_wc_status_str(st));
	st = rg_reply(&rc, 0, true);
	run_for(v->loop, &vr.done, RG_WAIT_MS);
	CHECK(WC_OK(st) && vr.done && vr.status == 0, "the reply completes the WRITE: %s",
	      vr.done ? zl_errname(vr.status) : "none");
	memset(rg_data(&rc), 0, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_READ, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(REFUSED(st) && all_bytes(rg_data(&rc), IO_LEN, 0),
	      "RDMA READ with the kept descriptor after the reply is refused and reads nothing: %s",
	      ibv_wc_status_str(st));
	printf("FIGURE: stale rkey read after reply: %s\n", ibv_wc_status_str(st));
out:
	if (c)
		vdrop(v, c, &closed, &rc);
	zl_xport_buf_free(v->x, b);
}

static void case_write_into_write(struct victim *v)
{
	struct rg_conn rc;
	struct vreq vr;
	bool closed;
	struct zl_xport_conn *c = vconnect(v, &rc, RDMA_HS_F_INV, &closed);
	uint8_t *b = vbuf(v, 0x22, 0x3c);
	enum ibv_wc_status st;

	printf("case write_into_write\n");
	if (!c || !b || vrequest(c, NULL, b + 4096, IO_LEN, &vr) || rg_recv(&rc, NULL) ||
	    !rc.has_desc) {
		CHECK(false, "setup (connection, WRITE request with a descriptor)");
		goto out;
	}
	memset(rg_data(&rc), 0x5a, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_WRITE, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(REFUSED(st), "RDMA WRITE into a WRITE's (read-only) window is refused: %s",
	      ibv_wc_status_str(st));
	run_for(v->loop, &vr.done, 4000); /* the victim's request fails or times out */
	CHECK(vbuf_is(b, 0x22, 0x3c), "the WRITE's data is unchanged");
out:
	if (c)
		vdrop(v, c, &closed, &rc);
	zl_xport_buf_free(v->x, b);
}

static void case_no_remote_inv(struct victim *v)
{
	struct rg_conn rc;
	struct vreq vr;
	bool closed;
	/* The rogue even claims it invalidates, then does not. */
	struct zl_xport_conn *c = vconnect(v, &rc, RDMA_HS_F_INV, &closed);
	uint8_t *b = vbuf(v, 0x11, 0x11);
	uint64_t linv0 = xport_rdma_local_invalidates(v->x);
	enum ibv_wc_status st;

	printf("case no_remote_inv\n");
	if (!c || !b || vrequest(c, b + 4096, NULL, IO_LEN, &vr) || rg_recv(&rc, NULL) ||
	    !rc.has_desc) {
		CHECK(false, "setup (connection, READ request with a descriptor)");
		goto out;
	}
	memset(rg_data(&rc), 0xa5, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_WRITE, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(WC_OK(st), "during the request the window is writable: %s", ibv_wc_status_str(st));
	st = rg_reply(&rc, IO_LEN, false);
	run_for(v->loop, &vr.done, RG_WAIT_MS);
	CHECK(WC_OK(st) && vr.done && vr.status == 0 && vbuf_is(b, 0x11, 0xa5),
	      "a plain-SEND reply completes the READ with the data: %s",
	      vr.done ? zl_errname(vr.status) : "none");
	CHECK(xport_rdma_local_invalidates(v->x) == linv0 + 1,
	      "the client invalidated the window itself (local invalidates %llu -> %llu)",
	      (unsigned long long)linv0, (unsigned long long)xport_rdma_local_invalidates(v->x));
	memset(rg_data(&rc), 0x5a, IO_LEN);
	st = rg_rdma(&rc, IBV_WR_RDMA_WRITE, 0, IO_LEN, rc.desc.addr, rc.desc.rkey);
	CHECK(REFUSED(st), "RDMA WRITE with the rkey once the READ completed is refused: %s",
	      ibv_wc_status_str(st));
	printf("FIGURE: stale rkey write after a non-invalidating reply: %s\n",
	       ibv_wc_status_str(st));
	run_for(v->loop, &closed, 500);
	CHECK(vbuf_is(b, 0x11, 0xa5), "the victim's buffer is unchanged");
out:
	if (c)
		vdrop(v, c, &closed, &rc);
	zl_xport_buf_free(v->x, b);
}

static void case_other_connection(struct victim *v)
{
	struct rg_conn ra, rb, rx;
	struct vreq vr;
	bool ca_closed, cb_closed, cc_closed;
	struct zl_xport_conn *cc;
	struct zl_xport_conn *ca = vconnect(v, &ra, RDMA_HS_F_INV, &ca_closed);
	struct zl_xport_conn *cb = vconnect(v, &rb, RDMA_HS_F_INV, &cb_closed);
	uint8_t *b = vbuf(v, 0x11, 0x11);
	enum ibv_wc_status st;

	printf("case other_connection\n");
	if (!ca || !cb || !b || vrequest(ca, b + 4096, NULL, IO_LEN, &vr) || rg_recv(&ra, NULL) ||
	    !ra.has_desc) {
		CHECK(false, "setup (two connections, READ request on the first)");
		goto out;
	}
	memset(rg_data(&rb), 0x5a, IO_LEN);
	st = rg_rdma(&rb, IBV_WR_RDMA_WRITE, 0, IO_LEN, ra.desc.addr, ra.desc.rkey);
	CHECK(REFUSED(st),
	      "RDMA WRITE through the second connection with the first one's live rkey is "
	      "refused: %s",
	      ibv_wc_status_str(st));
	printf("FIGURE: live rkey used on another QP of the same client: %s\n",
	       ibv_wc_status_str(st));
	/* A refused access moves the rogue's QP to the error state: the READ
	 * attempt gets a third connection of its own. */
	cc = vconnect(v, &rx, RDMA_HS_F_INV, &cc_closed);
	memset(rg_data(&rx), 0, IO_LEN);
	st = cc ? rg_rdma(&rx, IBV_WR_RDMA_READ, 0, IO_LEN, ra.desc.addr, ra.desc.rkey)
		: IBV_WC_GENERAL_ERR;
	CHECK(cc && REFUSED(st) && all_bytes(rg_data(&rx), IO_LEN, 0),
	      "and so is an RDMA READ through a third connection, which reads nothing: %s",
	      ibv_wc_status_str(st));
	if (cc)
		vdrop(v, cc, &cc_closed, &rx);
	memset(rg_data(&ra), 0xa5, IO_LEN);
	st = rg_rdma(&ra, IBV_WR_RDMA_WRITE, 0, IO_LEN, ra.desc.addr, ra.desc.rkey);
	CHECK(WC_OK(st), "the first connection still writes its window: %s",
	      ibv_wc_status_str(st));
	st = rg_reply(&ra, IO_LEN, true);
	run_for(v->loop, &vr.done, RG_WAIT_MS);
	CHECK(WC_OK(st) && vr.done && vr.status == 0 && vbuf_is(b, 0x11, 0xa5),
	      "the READ completes with the first connection's data only (status %s)",
	      vr.done ? zl_errname(vr.status) : "none");
out:
	if (ca)
		vdrop(v, ca, &ca_closed, &ra);
	if (cb)
		vdrop(v, cb, &cb_closed, &rb);
	zl_xport_buf_free(v->x, b);
}

/* One READ of len bytes at off from the window's start by the rogue, on a
 * fresh connection with a WRITE request in flight. whole: the WRITE's data
 * is a whole pool buffer (8 KiB class); else 8 KiB inside a 64 KiB one.
 * *ran: the request got a descriptor and no unexpected bytes arrived. */
static enum ibv_wc_status outside_try(struct victim *v, int64_t off, uint32_t len, bool whole,
				      bool *ran)
{
	struct rg_conn rc;
	struct vreq vr;
	bool closed;
	struct zl_xport_conn *c = vconnect(v, &rc, RDMA_HS_F_INV, &closed);
	uint8_t *b = whole ? zl_xport_buf_alloc(v->x, IO_LEN) : vbuf(v, 0x22, 0x3c);
	uint8_t *data = whole ? b : b + 4096;
	enum ibv_wc_status st = IBV_WC_GENERAL_ERR;

	*ran = false;
	if (b)
		memset(data, 0x3c, IO_LEN);
	if (c && b && !vrequest(c, NULL, data, IO_LEN, &vr) && !rg_recv(&rc, NULL) &&
	    rc.has_desc && rc.desc.addr == (uintptr_t)data) {
		*ran = true;
		memset(rg_data(&rc), 0, len);
		st = rg_rdma(&rc, IBV_WR_RDMA_READ, 0, len, (uint64_t)((int64_t)rc.desc.addr + off),
			     rc.desc.rkey);
		if (!WC_OK(st) && !all_bytes(rg_data(&rc), len, 0))
			*ran = false; /* refused, yet bytes arrived */
	}
	if (c)
		vdrop(v, c, &closed, &rc);
	zl_xport_buf_free(v->x, b);
	return st;
}

static void case_outside_window(struct victim *v)
{
	enum ibv_wc_status st;
	bool ran;

	printf("case outside_window\n");
	st = outside_try(v, IO_LEN - 1, 1, true, &ran);
	CHECK(ran && WC_OK(st), "RDMA READ of the last byte inside the window works: %s",
	      ibv_wc_status_str(st));
	st = outside_try(v, IO_LEN, 1, true, &ran);
	CHECK(ran && REFUSED(st), "RDMA READ of the byte after the window is refused: %s",
	      ibv_wc_status_str(st));
	printf("FIGURE: read 1 byte past the window: %s\n", ibv_wc_status_str(st));
	st = outside_try(v, -1, 1, true, &ran);
	CHECK(ran && REFUSED(st), "RDMA READ of the byte before the window is refused: %s",
	      ibv_wc_status_str(st));
	st = outside_try(v, 0, IO_LEN + 1, true, &ran);
	CHECK(ran && REFUSED(st), "RDMA READ of len + 1 bytes from the window's start is refused: %s",
	      ibv_wc_status_str(st));
	/* A window inside a larger pool buffer: the device decides whether the
	 * rest of that buffer is reachable during the request (rdma_rxe checks
	 * the registration, which is the buffer there; docs/SECURITY.md). */
	st = outside_try(v, IO_LEN, 1, false, &ran);
	printf("FIGURE: window inside a 64 KiB pool buffer, 1 byte past it (same buffer): %s "
	       "(device-dependent, not a check)\n",
	       ibv_wc_status_str(st));
}

/* ---- the transport as a server ---- */

static void srv_on_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
			   struct zl_xport_payload *p)
{
	struct zl_wire_hdr rep;

	(void)arg;
	zl_xport_discard(p);
	zl_wire_reply_init(h, &rep, 0);
	zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
}

/* The rogue as a client of the server at host:port (on loop, run meanwhile;
 * NULL: a server in another process): connects asking `count` credits,
 * stores the server's grant in *granted (when not NULL) and, with ping,
 * proves the connection works with a PING. */
static int rg_connect_n(struct rg_conn *c, const char *host, uint16_t port, uint32_t count,
			uint32_t *granted, bool ping, struct zl_loop *loop)
{
	struct addrinfo hints = {.ai_family = AF_INET}, *ai;
	struct rdma_conn_param cp = {0};
	struct rdma_cm_event *ev;
	uint8_t pd[RDMA_HS_SIZE];
	struct zl_wire_hdr h = {.opcode = ZL_OP_PING, .version = ZL_WIRE_VERSION};
	char ps[8];
	int rc;

	memset(c, 0, sizeof(*c));
	c->ch = rdma_create_event_channel();
	if (!c->ch || rg_nonblock(c->ch->fd) ||
	    rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP))
		return -EIO;
	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		return -EHOSTUNREACH;
	rc = rdma_resolve_addr(c->id, NULL, ai->ai_addr, 2000);
	freeaddrinfo(ai);
	if (rc || rg_event(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED, &ev, loop))
		return -EIO;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(c->id, 2000) ||
	    rg_event(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev, loop))
		return -EIO;
	rdma_ack_cm_event(ev);
	rc = rg_setup(c, c->id);
	if (rc)
		return rc;
	rg_hs(pd, RDMA_HS_F_INV, count);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources = 4;
	cp.initiator_depth = 4;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(c->id, &cp) || rg_event(c->ch, RDMA_CM_EVENT_ESTABLISHED, &ev, loop))
		return -ECONNREFUSED;
	/* The ACCEPT's handshake: magic, version and flags, credits, max_msg. */
	if (granted)
		*granted = ev->param.conn.private_data_len >= RDMA_HS_SIZE
			       ? zl_get_le32((const uint8_t *)ev->param.conn.private_data + 8)
			       : 0;
	rdma_ack_cm_event(ev);
	if (!ping)
		return 0;
	h.req_id = c->next_req++;
	if (!WC_OK(rg_send(c, &h, 0, false)) || rg_recv(c, loop) ||
	    !(c->req.flags & ZL_WF_REPLY) || c->req.opcode != ZL_OP_PING)
		return -EPROTO;
	return 0;
}

static int rg_connect(struct rg_conn *c, const char *host, uint16_t port, struct zl_loop *loop)
{
	return rg_connect_n(c, host, port, 4, NULL, true, loop);
}

static void case_server_memory(struct victim *v)
{
	static const struct zl_xport_server_ops ops = {.on_request = srv_on_request};
	struct zl_xport_opts o = {.kind = ZL_XPORT_RDMA, .pool_bytes = 8u << 20};
	struct zl_xport *sx = NULL;
	struct zl_xport_listener *l = NULL;
	struct rg_conn rc;
	uint8_t *sb = NULL;
	uint32_t rkey = 0;
	unsigned int access = 0;
	enum ibv_wc_status st;
	static const int32_t guesses[] = {0, 1, -1, 0x100, -0x100};
	int refused = 0, tried = 0;

	printf("case server_memory\n");
	if (zl_xport_create(v->loop, &o, &sx) ||
	    zl_xport_listen(sx, v->host, 0, &ops, NULL, &l) ||
	    !(sb = zl_xport_buf_alloc(sx, 4096)) || xport_rdma_mr_info(sx, sb, 4096, &rkey, &access)) {
		CHECK(false, "setup (an RDMA server transport and a pool buffer)");
		goto out;
	}
	memset(sb, 0x77, 4096);
	printf("FIGURE: server registration access flags 0x%x (remote read 0x%x, remote write "
	       "0x%x, remote atomic 0x%x)\n",
	       access, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(!(access & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_ATOMIC)),
	      "the server's pool is registered without any remote access flag");
	/* The registration's real rkey and neighbours of it (other key bytes,
	 * other indexes), each on a fresh connection: a refused RDMA operation
	 * moves the rogue's QP to the error state. */
	for (size_t i = 0; i < ZL_ARRAY_SIZE(guesses); i++) {
		for (int w = 0; w < 2; w++) {
			uint32_t k = rkey + (uint32_t)guesses[i];

			if (rg_connect(&rc, v->host, zl_xport_listener_port(l), v->loop)) {
				CHECK(false, "rogue client connects to the server and PINGs");
				rg_free(&rc);
				goto out;
			}
			memset(rg_data(&rc), w ? 0 : 0xee, 4096);
			st = rg_rdma(&rc, w ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, 0, 4096,
				     (uintptr_t)sb, k);
			tried++;
			if (REFUSED(st) && (w || all_bytes(rg_data(&rc), 4096, 0xee)))
				refused++;
			else
				printf("  rogue %s with rkey 0x%x: %s\n", w ? "write" : "read", k,
				       ibv_wc_status_str(st));
			if (i == 0)
				printf("FIGURE: server buffer %s with its registration's rkey 0x%x: "
				       "%s\n",
				       w ? "write" : "read", k, ibv_wc_status_str(st));
			rg_free(&rc);
		}
	}
	CHECK(refused == tried, "%d of %d rogue RDMA READs/WRITEs of server memory refused",
	      refused, tried);
	CHECK(all_bytes(sb, 4096, 0x77), "the server's buffer is unchanged");
out:
	if (sb)
		zl_xport_buf_free(sx, sb);
	if (l)
		zl_xport_listener_close(l);
	zl_xport_destroy(sx);
}

/* ---- against a running storage daemon (test/rdma/counters_rdma.sh) ---- */

/* --fill: connections that hold the daemon's shared receive queue until
 * `leave` credits are left for whoever connects next (the daemon grants
 * min(asked, its requests per connection, what its queue has left)), then
 * waits to be killed. Each grant must be exactly what was asked: a daemon
 * with other RDMA connections, or another queue depth, fails this. */
static int daemon_fill(const char *host, uint16_t port, uint32_t leave)
{
	struct ibv_device_attr a;
	struct rg_conn *cs = NULL;
	uint32_t depth = 0, held = 0, n = 0, cap = 0;

	for (;;) {
		uint32_t ask = depth ? ZL_MIN(XPORT_DEF_MAX_INFLIGHT, depth - leave - held)
				     : XPORT_DEF_MAX_INFLIGHT;
		uint32_t got = 0;

		if (depth && held + leave >= depth)
			break;
		if (n == cap) {
			struct rg_conn *m = realloc(cs, (cap + 32) * sizeof(*cs));

			if (!m)
				return 1;
			cs = m;
			cap += 32;
		}
		/* The grant proves the daemon took it: no PING (time). */
		if (rg_connect_n(&cs[n], host, port, ask, &got, false, NULL)) {
			fprintf(stderr,
				"mw_test: FAIL: fill connection %u to %s:%u (asking %u credits, "
				"%u held) failed\n",
				n + 1, host, port, ask, held);
			return 1;
		}
		n++;
		if (!depth) {
			/* The daemon's queue: RDMA_SRQ_MAX or less on this device. */
			if (ibv_query_device(cs[0].id->verbs, &a)) {
				fprintf(stderr, "mw_test: FAIL: ibv_query_device: %s\n",
					zl_strerror(-errno));
				return 1;
			}
			depth = ZL_MIN(RDMA_SRQ_MAX, (uint32_t)a.max_srq_wr);
			if (leave >= depth || depth - leave < ask) {
				fprintf(stderr, "mw_test: FAIL: cannot leave %u of %u credits\n",
					leave, depth);
				return 1;
			}
		}
		if (got != ask) {
			fprintf(
			    stderr,
			    "mw_test: FAIL: the daemon granted %u credits on fill connection %u, "
			    "not the %u asked (%u held): it has other RDMA connections or "
			    "another queue depth than %u\n",
			    got, n, ask, held, depth);
			return 1;
		}
		held += got;
	}
	printf("FIGURE: mw_test fill: %u connections hold %u credits of the daemon's %u; %u "
	       "left\n",
	       n, held, depth, depth - held);
	printf("mw_test: fill READY\n");
	fflush(stdout);
	for (;;)
		pause(); /* SIGTERM ends it; the kernel closes the connections */
}

/* --bad-rkey: a READ of chunk 0 of volume `vol` (ZL_WF_ANY: the daemon's
 * own copy, no row checks) whose descriptor names the rogue's memory under
 * the rkey of its local-only registration: the daemon's RDMA WRITE of the
 * data must fail at the rogue (remote access error: one work completion in
 * error on the daemon), and the rogue's QP goes to ERR. */
static int daemon_bad_rkey(const char *host, uint16_t port, const char *vol)
{
	struct rg_conn c;
	struct zl_wire_hdr h = {.opcode = ZL_OP_READ,
				.version = ZL_WIRE_VERSION,
				.flags = ZL_WF_RDMA | ZL_WF_ANY,
				.length = 4096,
				.payload_len = ZL_WIRE_RDMA_DESC_SIZE};
	struct zl_wire_rdma_desc d;
	uint64_t end;
	const char *qs = "?";
	int rc = 1;

	if (zl_vol_id_parse(vol, &h.vol_id)) {
		fprintf(stderr, "mw_test: FAIL: '%s' is not a volume id (vol-<16 hex>)\n", vol);
		return 1;
	}
	if (rg_connect(&c, host, port, NULL)) {
		fprintf(stderr, "mw_test: FAIL: rogue connection to %s:%u failed\n", host, port);
		goto out;
	}
	d = (struct zl_wire_rdma_desc){
	    .addr = (uintptr_t)rg_data(&c), .rkey = c.mr->rkey, .len = h.length};
	h.req_id = c.next_req++;
	if (!WC_OK(rg_send_desc(&c, &h, &d, 0, false))) {
		fprintf(stderr, "mw_test: FAIL: rogue READ not sent\n");
		goto out;
	}
	for (end = zl_now_ms() + RG_WAIT_MS; zl_now_ms() < end; poll(NULL, 0, 20)) {
		qs = qp_state_name(c.id->qp);
		if (!strcmp(qs, "ERR"))
			break;
	}
	printf("FIGURE: mw_test bad-rkey: the rogue's QP after the daemon's RDMA WRITE with "
	       "rkey 0x%x of local-only memory: %s\n",
	       d.rkey, qs);
	rc = strcmp(qs, "ERR") ? 1 : 0;
	if (rc)
		fprintf(stderr, "mw_test: FAIL: the rogue's QP is %s, not ERR, after %d ms\n", qs,
			RG_WAIT_MS);
out:
	rg_free(&c);
	return rc;
}

int main(int argc, char **argv)
{
	struct zl_xport_opts o = {.kind = ZL_XPORT_RDMA, .timeout_ms = 3000,
				  .pool_bytes = 8u << 20};
	struct victim v = {.host = argc > 1 ? argv[1] : getenv("RXE_IP")};
	int rc;

	zl_log_init("mw_test");
	if (argc == 5 && !strcmp(argv[1], "--fill"))
		return daemon_fill(argv[2], (uint16_t)atoi(argv[3]), (uint32_t)atoi(argv[4]));
	if (argc == 5 && !strcmp(argv[1], "--bad-rkey"))
		return daemon_bad_rkey(argv[2], (uint16_t)atoi(argv[3]), argv[4]);
	if (!v.host) {
		fprintf(stderr, "usage: mw_test HOST (an address on the RDMA device)\n"
				"       mw_test --fill HOST RDMA_PORT LEAVE | --bad-rkey HOST "
				"RDMA_PORT VOL_ID\n");
		return 1;
	}
	rc = zl_loop_create(&v.loop);
	if (!rc)
		rc = zl_xport_create(v.loop, &o, &v.x);
	if (!rc)
		rc = rg_listen(&v.l, v.host);
	if (rc) {
		fprintf(stderr, "mw_test: FAIL: cannot set up RDMA on %s: %s\n", v.host,
			zl_strerror(rc));
		return 1;
	}
	printf("mw_test: host %s, rogue listening on port %u\n", v.host, v.l.port);
	case_read_after_reply(&v);
	case_write_after_reply(&v);
	case_write_into_write(&v);
	case_no_remote_inv(&v);
	case_other_connection(&v);
	case_outside_window(&v);
	case_server_memory(&v);
	zl_xport_destroy(v.x);
	rdma_destroy_id(v.l.id);
	rdma_destroy_event_channel(v.l.ch);
	zl_loop_destroy(v.loop);
	printf("FIGURE: mw_test checks %d, failed %d\n", checks, failures);
	printf("mw_test: %s\n", failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
