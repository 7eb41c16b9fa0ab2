/* RDMA transport, I/O: the send queue, client requests, server requests,
 * completions.
 *
 * Data movement is server-active: a client request carries a descriptor of
 * its pool buffer; the server RDMA-READs WRITE data out of it
 * (zl_xport_fetch) and RDMA-WRITEs READ data into it before the reply SEND
 * (zl_xport_reply). WRITEs of at most RDMA_INLINE_MAX bytes travel inside the
 * SEND. Caller memory outside the pool is bounced through pool buffers.
 *
 * Completions: one CQ per connection, one completion channel per transport
 * and device (an fd on the loop). A connection with work in progress sits on
 * the transport's busy list and its CQ is polled by a loop poller on every
 * iteration (the loop does not sleep meanwhile); after RDMA_IDLE_SPINS empty
 * polls the CQ is armed and the connection sleeps until the channel fires, so
 * an idle process uses no CPU.
 *
 * Send queue: every work request gets a sequence number; its wr_id is that
 * number and ring[seq & mask] says what completes with it. Only work requests
 * that need a completion are signalled (fetch READs, replies with data or a
 * sent callback, local invalidates), plus one in RDMA_SIGNAL_EVERY and any
 * that leaves less than RDMA_SIGNAL_EVERY free entries, so the queue always
 * drains. Posts that do not fit (send queue full, no credit, no free window)
 * wait in a per-connection FIFO.
 */
#include "rdma_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void rdma_bl_run(struct rdma_conn *c);
static int rdma_conn_poll(struct rdma_conn *c);

/* Every copy of payload bytes on the RDMA path goes through here (bounce
 * buffers for caller memory outside the pool, inline messages); the copies
 * of volume data (op: READ, WRITE, REPL_WRITE, CHUNK_PUSH) are counted, so
 * what the zero-copy path avoids is visible (zipline_rdma_copied_bytes_total,
 * zl bench --json "rdma_copied_bytes"). */
static void rdma_copy(struct zl_xport *x, unsigned op, void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
	if (op == ZL_OP_READ || op == ZL_OP_WRITE || op == ZL_OP_REPL_WRITE ||
	    op == ZL_OP_CHUNK_PUSH)
		x->st.rdma_copied_bytes += len;
}

static void rdma_proto_fail(struct rdma_conn *c, const char *why)
{
	if (xport_warn_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "invalid message transport=rdma peer=%s side=%s reason=\"%s\"; "
			    "closing connection",
			    c->base.peer, c->base.server ? "server" : "client", why);
	xport_rdma_conn_close(&c->base, -ZL_ERR_PROTO);
}

/* ---- busy polling ---- */

static void rdma_busy_add(struct rdma_conn *c)
{
	c->idle = 0;
	if (c->busy || c->base.closing)
		return;
	c->busy = true;
	xport_list_push(&c->tx->busy, &c->busy_link);
}

void xport_rdma_busy_del(struct rdma_conn *c)
{
	if (!c->busy)
		return;
	xport_list_del(&c->tx->busy, &c->busy_link);
	c->busy = false;
}

/* Loop poller: polls every busy CQ; a CQ that stayed empty for a while is
 * armed and leaves the list. Returns nonzero while anything is busy, so the
 * loop does not sleep then. */
int xport_rdma_poller(void *arg)
{
	struct rdma_xport *tx = arg;
	int work = 0;

	for (struct xport_link *l = tx->busy.head, *next; l; l = next) {
		struct rdma_conn *c = ZL_CONTAINER_OF(l, struct rdma_conn, busy_link);
		int n;

		/* Connections are freed only by deferred close work, never
		 * while this runs, so next stays valid. */
		next = l->next;
		zl_xport_conn_get(&c->base);
		n = rdma_conn_poll(c);
		if (n > 0) {
			c->idle = 0;
			work += n;
		} else if (!c->base.closing && ++c->idle >= RDMA_IDLE_SPINS) {
			/* Arm, then look once more: a completion that came
			 * between the last poll and the arming raises no event. */
			ibv_req_notify_cq(c->cq, 0);
			n = rdma_conn_poll(c);
			if (n > 0)
				c->idle = 0;
			else
				xport_rdma_busy_del(c);
			work += n;
		}
		if (c->base.closing)
			xport_rdma_busy_del(c);
		zl_xport_conn_put(&c->base);
	}
	return work + (tx->busy.head ? 1 : 0);
}

/* Completion channel: a sleeping CQ got a completion. */
void xport_rdma_cc_cb(void *arg, uint32_t events)
{
	struct rdma_xdev *xd = arg;
	struct ibv_cq *cq;
	void *ctx;

	(void)events;
	while (ibv_get_cq_event(xd->cc, &cq, &ctx) == 0) {
		struct rdma_conn *c = ctx;

		if (++c->cq_unacked >= RDMA_CQ_ACK_EVERY) {
			ibv_ack_cq_events(cq, c->cq_unacked);
			c->cq_unacked = 0;
		}
		if (c->base.closing)
			continue;
		zl_xport_conn_get(&c->base);
		rdma_busy_add(c);
		rdma_conn_poll(c);
		zl_xport_conn_put(&c->base);
	}
}

/* ---- send queue ---- */

static uint32_t rdma_sq_room(const struct rdma_conn *c)
{
	return c->sq_depth - (uint32_t)(c->sq_posted - c->sq_done);
}

/* Posts a chain of n work requests; only the last may be signalled and
 * carries (kind, ptr). Returns 0, -EAGAIN (no room: retry from the backlog)
 * or -ZL_ERR_CONN (the connection is closing now). */
static int rdma_post(struct rdma_conn *c, struct ibv_send_wr *wrs, uint32_t n,
		     enum rdma_wr_kind kind, void *ptr, bool need_signal)
{
	struct ibv_send_wr *w, *bad = NULL;
	uint64_t seq = c->sq_posted, sig_seq = 0;
	bool sig = false;
	int rc;

	if (c->base.closing)
		return -ZL_ERR_CONN;
	if (rdma_sq_room(c) < n)
		return -EAGAIN;
	for (w = wrs; w; w = w->next, seq++) {
		struct rdma_wr_ctx *e = &c->ring[seq & c->ring_mask];

		w->wr_id = seq;
		e->kind = RDMA_WR_NONE;
		e->ptr = NULL;
		if (w->next)
			continue;
		/* The last one: signalled when someone waits for it, and often
		 * enough that the send queue drains. */
		sig = need_signal || seq - c->last_sig >= RDMA_SIGNAL_EVERY ||
		      rdma_sq_room(c) - n < RDMA_SIGNAL_EVERY;
		if (sig) {
			w->send_flags |= IBV_SEND_SIGNALED;
			sig_seq = seq;
		}
		e->kind = (uint8_t)kind;
		e->ptr = ptr;
	}
	if (ibv_post_send(c->id->qp, wrs, &bad)) {
		rc = errno ? -errno : -EIO;
		if (xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "RDMA post_send failed transport=rdma peer=%s err=%s; closing "
				    "connection",
				    c->base.peer, zl_strerror(rc));
		xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return -ZL_ERR_CONN;
	}
	if (sig)
		c->last_sig = sig_seq;
	c->sq_posted += n;
	rdma_busy_add(c);
	return 0;
}

static void rdma_bl_push(struct rdma_conn *c, struct rdma_bl *b, enum rdma_bl_kind kind)
{
	b->kind = (uint8_t)kind;
	b->next = NULL;
	b->queued = true;
	if (c->bl_tail)
		c->bl_tail->next = b;
	else
		c->bl_head = b;
	c->bl_tail = b;
}

int xport_rdma_recv_post(struct rdma_conn *c, uint32_t idx)
{
	uint8_t *buf = rdma_slab_at(&c->slab, c->n_reqs + idx);
	struct ibv_mr *mr = xport_rdma_mr_of(c->xd, buf, RDMA_MSG_SIZE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = RDMA_MSG_SIZE};
	struct ibv_recv_wr wr = {.wr_id = RDMA_RECV_BIT | idx, .sg_list = &sge, .num_sge = 1}, *bad;

	if (!mr)
		return -EFAULT;
	sge.lkey = mr->lkey;
	return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

/* ---- client requests ---- */

/* Request layer hook: the bounce buffers go before the callback runs. */
void xport_rdma_req_release(struct zl_xport_conn *bc, struct xport_req *br)
{
	struct rdma_req *r = rdma_req_of(br);

	if (r->bounce_in)
		zl_xport_buf_free(bc->x, r->bounce_in);
	if (r->bounce_out)
		zl_xport_buf_free(bc->x, r->bounce_out);
	r->bounce_in = r->bounce_out = NULL;
	/* A window still bound here belongs to a connection whose QP is gone
	 * (close work): it is deallocated with the connection. */
	r->mw = NULL;
	r->d_len = 0;
}

/* Posts the request: with a descriptor, BIND_MW of a free window to exactly
 * the buffer (new rkey: key byte incremented) chained before the SEND that
 * carries that rkey, so the window exists from the SEND on, only on this QP. */
static int rdma_req_post(struct rdma_conn *c, struct rdma_req *r)
{
	struct ibv_mr *mr = xport_rdma_mr_of(c->xd, r->msg, r->msg_len);
	struct ibv_sge sge = {.addr = (uintptr_t)r->msg, .length = r->msg_len};
	struct ibv_send_wr w[2];
	struct rdma_mw *m = NULL;
	uint32_t n = 0, rkey = 0;
	int rc;

	if (!c->credits) {
		if (!r->credit_waited)
			c->base.x->st.rdma_credit_waits++;
		r->credit_waited = true;
		return -EAGAIN;
	}
	memset(w, 0, sizeof(w));
	if (r->d_len) {
		struct zl_wire_rdma_desc d;

		m = c->mw_free;
		if (!m) {
			if (!r->window_waited)
				c->base.x->st.rdma_window_waits++;
			r->window_waited = true;
			/* Not while every slot has its window (xport_rdma_mws_init:
			 * one per slot; a window goes back before its slot does):
			 * counted so that a change breaking this shows. */
			return -EAGAIN;
		}
		rkey = ibv_inc_rkey(m->mw->rkey);
		w[0].opcode = IBV_WR_BIND_MW;
		w[0].bind_mw.mw = m->mw;
		w[0].bind_mw.rkey = rkey;
		w[0].bind_mw.bind_info.mr = r->d_mr;
		w[0].bind_mw.bind_info.addr = r->d_addr;
		w[0].bind_mw.bind_info.length = r->d_len;
		w[0].bind_mw.bind_info.mw_access_flags = r->d_access;
		w[0].next = &w[1];
		n++;
		d = (struct zl_wire_rdma_desc){.addr = r->d_addr, .rkey = rkey, .len = r->d_len};
		zl_wire_rdma_desc_encode(&d, r->msg + ZL_WIRE_HDR_SIZE);
	}
	sge.lkey = mr->lkey;
	w[n].sg_list = &sge;
	w[n].num_sge = 1;
	w[n].opcode = IBV_WR_SEND;
	if (r->msg_len <= c->max_inline)
		w[n].send_flags = IBV_SEND_INLINE;
	n++;
	rc = rdma_post(c, w, n, RDMA_WR_NONE, NULL, false);
	if (rc)
		return rc;
	if (m) {
		/* The provider names the window by its current rkey in the
		 * next bind or invalidate: keep it current. */
		c->mw_free = m->next;
		m->mw->rkey = rkey;
		r->mw = m;
	}
	c->credits--;
	r->state = RDMA_REQ_SENT;
	return 0;
}

/* LOCAL_INV of the window of r (the server's reply did not invalidate it);
 * the request completes when this does. */
static int rdma_linv_post(struct rdma_conn *c, struct rdma_req *r)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV};

	int rc;

	wr.invalidate_rkey = r->mw->mw->rkey;
	rc = rdma_post(c, &wr, 1, RDMA_WR_LINV, r, true);
	if (!rc)
		c->tx->n_linv++;
	return rc;
}

/* Checks and delivers the data a server RDMA-WROTE into the reply buffer of
 * r (h has ZL_WF_RDMA): only once no window covers it any more. Updates
 * *status and turns h into what TCP delivers. */
static void rdma_cli_data(struct rdma_conn *c, struct rdma_req *r, int *status,
			  struct zl_wire_hdr *h)
{
	struct xport_req *br = &r->base;
	const uint8_t *src = r->bounce_in ? r->bounce_in : br->in;

	if (!(h->flags & ZL_WF_RDMA))
		return;
	h->flags &= (uint8_t)~ZL_WF_RDMA;
	h->payload_len = h->length;
	if (*status)
		return;
	if (h->length > r->in_len)
		*status = -ZL_ERR_PROTO;
	else if (zl_crc32c(src, h->length) != h->payload_crc)
		*status = -ZL_ERR_CORRUPT;
	else if (r->bounce_in)
		rdma_copy(c->base.x, h->opcode, br->in, r->bounce_in, h->length);
	if (*status && xport_warn_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "bad reply data transport=rdma peer=%s op=%s length=%u in_cap=%u "
			    "err=%s; failing the request",
			    c->base.peer, zl_wire_op_name(h->opcode), h->length, br->in_cap,
			    zl_errname(*status));
}

/* The LOCAL_INV of r's window completed: the buffer is ours again. */
static void rdma_linv_done(struct rdma_conn *c, struct rdma_req *r)
{
	struct xport_req *br = &r->base;
	int status = br->held_status;

	xport_rdma_mw_put(c, r->mw);
	r->mw = NULL;
	rdma_cli_data(c, r, &status, &br->held_rep);
	xport_req_finish(&c->base, br, status, status ? NULL : &br->held_rep);
}

static void rdma_cli_recv(struct rdma_conn *c, const struct ibv_wc *wc)
{
	uint32_t idx = (uint32_t)(wc->wr_id & 0xffffffffu), len = wc->byte_len;
	const uint8_t *buf = rdma_slab_at(&c->slab, c->n_reqs + idx);
	/* Remote invalidate: never together with immediate data (which shares
	 * the field with invalidated_rkey). */
	bool inv = (wc->wc_flags & c->xd->dev->wc_inv) && !(wc->wc_flags & IBV_WC_WITH_IMM);
	struct zl_wire_hdr h;
	const char *why = "?";
	struct xport_req *br;
	struct rdma_req *r;
	int status = 0;

	if (zl_wire_decode(buf, len, &h, &why)) {
		rdma_proto_fail(c, why);
		return;
	}
	if (!(h.flags & ZL_WF_REPLY)) {
		rdma_proto_fail(c, "request on a client connection");
		return;
	}
	br = xport_req_lookup(&c->base, &h, &why);
	if (!br) {
		rdma_proto_fail(c, why);
		return;
	}
	r = rdma_req_of(br);
	if (r->state != RDMA_REQ_SENT) {
		rdma_proto_fail(c, "reply to a request that was not sent or was answered already");
		return;
	}
	if (inv && (!r->mw || wc->invalidated_rkey != r->mw->mw->rkey)) {
		/* Only the request's own window may die with its reply. */
		rdma_proto_fail(c, "reply invalidated an rkey that is not its request's window");
		return;
	}
	if (h.flags & ZL_WF_RDMA) {
		if (!r->has_in_desc) {
			rdma_proto_fail(c, "RDMA reply to a request without a descriptor");
			return;
		}
	} else if (h.payload_len) {
		if (len < ZL_WIRE_HDR_SIZE + h.payload_len) {
			rdma_proto_fail(c, "message shorter than its payload");
			return;
		}
		if (!br->in || h.payload_len > br->in_cap)
			status = -ZL_ERR_PROTO;
		else if (zl_crc32c(buf + ZL_WIRE_HDR_SIZE, h.payload_len) != h.payload_crc)
			status = -ZL_ERR_CORRUPT;
		else
			rdma_copy(c->base.x, h.opcode, br->in, buf + ZL_WIRE_HDR_SIZE, h.payload_len);
		if (status && xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "bad reply data transport=rdma peer=%s op=%s payload_len=%u "
				    "in_cap=%u err=%s; failing the request",
				    c->base.peer, zl_wire_op_name(h.opcode), h.payload_len,
				    br->in_cap, zl_errname(status));
	}
	c->credits++;
	if (xport_rdma_recv_post(c, idx)) {
		xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	if (r->mw && !inv) {
		/* The server left the window valid (an older peer, or one that
		 * misbehaves): invalidate it ourselves; the caller gets the
		 * buffer back when that completed. */
		xport_req_hold(br, status, &h);
		r->state = RDMA_REQ_INVALIDATING;
		rdma_bl_push(c, &r->bl, RDMA_BL_LINV);
		rdma_bl_run(c);
		return;
	}
	if (r->mw) {
		xport_rdma_mw_put(c, r->mw);
		r->mw = NULL;
	}
	rdma_cli_data(c, r, &status, &h);
	xport_req_finish(&c->base, br, status, status ? NULL : &h);
}

int xport_rdma_request(struct zl_xport_conn *bc, struct xport_req *br,
		       const struct zl_wire_hdr *hdr, const void *out, uint32_t out_len)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct zl_xport *x = bc->x;
	struct rdma_req *r = rdma_req_of(br);
	struct zl_wire_hdr h = *hdr;
	bool desc = false;

	r->has_in_desc = false;
	r->credit_waited = r->window_waited = false;
	r->in_len = 0;
	r->d_len = 0;
	r->mw = NULL;
	if (hdr->opcode == ZL_OP_READ && br->in_cap) {
		/* The server RDMA-WRITEs the data straight into `in`. */
		uint32_t n = ZL_MIN(br->in_cap, ZL_MIN(hdr->length, ZL_WIRE_MAX_IO));
		uint8_t *dst = br->in;

		if (!zl_xport_buf_owned(x, dst, n)) {
			r->bounce_in = zl_xport_buf_alloc(x, n);
			if (!r->bounce_in)
				return -ENOMEM;
			dst = r->bounce_in;
		}
		r->d_addr = (uintptr_t)dst;
		r->d_len = n;
		r->d_access = IBV_ACCESS_REMOTE_WRITE;
		desc = true;
		r->has_in_desc = true;
		r->in_len = n;
		h.payload_crc = 0;
	} else if (out_len > RDMA_INLINE_MAX) {
		/* The server RDMA-READs the data out of `out`. */
		const uint8_t *src = out;

		if (!zl_xport_buf_owned(x, out, out_len)) {
			r->bounce_out = zl_xport_buf_alloc(x, out_len);
			if (!r->bounce_out)
				return -ENOMEM;
			rdma_copy(x, h.opcode, r->bounce_out, out, out_len);
			src = r->bounce_out;
		}
		r->d_addr = (uintptr_t)src;
		r->d_len = out_len;
		r->d_access = IBV_ACCESS_REMOTE_READ;
		desc = true;
	}
	if (desc) {
		r->d_mr = xport_rdma_bind_mr(c->xd, (const void *)(uintptr_t)r->d_addr, r->d_len);
		if (!r->d_mr) {
			r->d_len = 0;
			return -ENOMEM; /* the bounce buffers go with the slot */
		}
	}
	r->msg = rdma_slab_at(&c->slab, br->slot);
	if (desc) {
		/* The descriptor (with the window's rkey) is written when the
		 * request is posted. */
		h.flags |= ZL_WF_RDMA;
		h.payload_len = ZL_WIRE_RDMA_DESC_SIZE;
		zl_wire_encode(&h, r->msg);
		r->msg_len = ZL_WIRE_HDR_SIZE + ZL_WIRE_RDMA_DESC_SIZE;
	} else {
		zl_wire_encode(&h, r->msg);
		if (out_len)
			rdma_copy(x, h.opcode, r->msg + ZL_WIRE_HDR_SIZE, out, out_len);
		r->msg_len = ZL_WIRE_HDR_SIZE + out_len;
	}
	r->state = RDMA_REQ_QUEUED;
	rdma_bl_push(c, &r->bl, RDMA_BL_REQ);
	rdma_bl_run(c);
	return 0;
}

/* ---- server requests ---- */

/* Slots, the payload rule and the callbacks are the common server layer's
 * (xport_sreq.c); this moves the bytes: inline payloads out of the receive
 * buffer, descriptor payloads by RDMA READ, reply data by RDMA WRITE before
 * the reply SEND (SEND_WITH_INV of the client's window when it asked). */

static void rdma_announce(struct rdma_conn *c)
{
	if (c->announced)
		return;
	c->announced = true;
	if (c->base.sops->on_conn)
		c->base.sops->on_conn(c->base.sarg, &c->base);
}

void xport_rdma_announce_cb(void *arg)
{
	struct rdma_conn *c = arg;

	if (!c->base.closing)
		rdma_announce(c);
}

static void rdma_srv_recv(struct rdma_conn *c, const uint8_t *buf, uint32_t len)
{
	struct zl_wire_hdr h;
	struct zl_wire_rdma_desc d = {0};
	const char *why = "?";
	struct xport_sreq *bs;
	struct rdma_sreq *s;
	bool has_desc;
	uint64_t slot;

	rdma_announce(c);
	if (c->base.closing)
		return;
	if (zl_wire_decode(buf, len, &h, &why)) {
		rdma_proto_fail(c, why);
		return;
	}
	if (h.flags & ZL_WF_REPLY) {
		rdma_proto_fail(c, "reply on a server connection");
		return;
	}
	slot = h.req_id & 0xffffffffu;
	if (slot >= c->peer_slots) {
		rdma_proto_fail(c, "request id out of range or still in use");
		return;
	}
	if (c->base.sreqs.pending >= c->granted || !xport_sreq_available(&c->base)) {
		rdma_proto_fail(c, "more requests than credits");
		return;
	}
	has_desc = h.flags & ZL_WF_RDMA;
	if (has_desc) {
		if (len < ZL_WIRE_HDR_SIZE + ZL_WIRE_RDMA_DESC_SIZE ||
		    zl_wire_rdma_desc_decode(buf + ZL_WIRE_HDR_SIZE, ZL_WIRE_RDMA_DESC_SIZE, &d)) {
			rdma_proto_fail(c, "bad RDMA descriptor");
			return;
		}
		if (h.opcode != ZL_OP_READ && d.len != h.length) {
			rdma_proto_fail(c, "RDMA descriptor length differs from the request");
			return;
		}
	} else if (len < ZL_WIRE_HDR_SIZE + h.payload_len) {
		rdma_proto_fail(c, "message shorter than its payload");
		return;
	}
	/* The server sees the header TCP would have delivered. */
	if (has_desc && h.opcode == ZL_OP_READ) {
		h.payload_len = 0;
		h.payload_crc = 0;
	} else if (has_desc) {
		h.payload_len = h.length;
	}
	h.flags &= (uint8_t)~ZL_WF_RDMA;
	bs = xport_sreq_start(&c->base, &h, &why);
	if (!bs) {
		rdma_proto_fail(c, "request id out of range or still in use");
		return;
	}
	s = rdma_sreq_of(bs);
	s->has_desc = has_desc;
	s->desc = d;
	s->reply_bounce = s->fetch_bounce = NULL;
	s->rwrite = false;
	s->msg_len = 0;
	c->cur_inline = has_desc ? NULL : buf + ZL_WIRE_HDR_SIZE;
	xport_sreq_deliver(&c->base, bs, &h);
	c->cur_inline = NULL;
}

static int rdma_fetch_post(struct rdma_conn *c, struct rdma_sreq *s)
{
	uint8_t *dst = s->fetch_bounce ? s->fetch_bounce : s->base.fetch_buf;
	struct ibv_mr *mr = xport_rdma_mr_of(c->xd, dst, s->base.data_len);
	struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = s->base.data_len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};

	wr.wr.rdma.remote_addr = s->desc.addr;
	wr.wr.rdma.rkey = s->desc.rkey;
	return rdma_post(c, &wr, 1, RDMA_WR_FETCH, s, true);
}

static void rdma_fetch_done(struct rdma_conn *c, struct rdma_sreq *s)
{
	struct xport_sreq *bs = &s->base;
	int status = 0;

	if (s->fetch_bounce) {
		rdma_copy(c->base.x, bs->opcode, bs->fetch_buf, s->fetch_bounce, bs->data_len);
		zl_xport_buf_free(c->base.x, s->fetch_bounce);
		s->fetch_bounce = NULL;
	}
	if (!xport_sreq_crc_ok(bs, bs->fetch_buf, bs->data_len, bs->data_crc)) {
		status = -ZL_ERR_CORRUPT;
		if (xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "payload CRC mismatch transport=rdma peer=%s op=%s len=%u "
				    "req_id=%llu",
				    c->base.peer, zl_wire_op_name(bs->opcode), bs->data_len,
				    (unsigned long long)bs->req_id);
	}
	xport_sreq_payload_done(&c->base, bs, status);
}

int xport_rdma_fetch(struct zl_xport_conn *bc, struct xport_sreq *bs)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct rdma_sreq *s = rdma_sreq_of(bs);
	struct zl_xport *x = bc->x;
	int status = 0;

	if (!s->has_desc) {
		/* Inline: the data is in the receive buffer right now. */
		rdma_copy(x, bs->opcode, bs->fetch_buf, c->cur_inline, bs->data_len);
		if (!xport_sreq_crc_ok(bs, bs->fetch_buf, bs->data_len, bs->data_crc)) {
			status = -ZL_ERR_CORRUPT;
			if (xport_warn_ok(x))
				ZL_LOG_WARN("xport",
					    "payload CRC mismatch transport=rdma peer=%s op=%s "
					    "len=%u",
					    bc->peer, zl_wire_op_name(bs->opcode), bs->data_len);
		}
		xport_sreq_payload_done_later(bc, bs, status);
		return 0;
	}
	if (!zl_xport_buf_owned(x, bs->fetch_buf, bs->data_len)) {
		s->fetch_bounce = zl_xport_buf_alloc(x, bs->data_len);
		if (!s->fetch_bounce)
			return -ENOMEM;
	}
	rdma_bl_push(c, &s->bl_fetch, RDMA_BL_FETCH);
	rdma_bl_run(c);
	return 0;
}

/* Nothing to skip: an unfetched payload stays in the client's buffer or was
 * in the receive buffer, which goes back to the SRQ anyway. */
void xport_rdma_discard(struct zl_xport_conn *bc, struct xport_sreq *bs)
{
	xport_sreq_payload_done(bc, bs, 0);
}

static int rdma_reply_post(struct rdma_conn *c, struct rdma_sreq *s)
{
	struct ibv_send_wr w[2];
	struct ibv_sge sg[2];
	struct ibv_mr *mr;
	uint32_t n = 0;
	bool inl = s->msg_len <= c->max_inline, need;
	int rc;

	memset(w, 0, sizeof(w));
	if (s->rwrite) {
		const uint8_t *src = s->reply_bounce ? s->reply_bounce : s->rdata;

		mr = xport_rdma_mr_of(c->xd, src, s->rlen);
		sg[0] =
		    (struct ibv_sge){.addr = (uintptr_t)src, .length = s->rlen, .lkey = mr->lkey};
		w[0].sg_list = &sg[0];
		w[0].num_sge = 1;
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].wr.rdma.remote_addr = s->desc.addr;
		w[0].wr.rdma.rkey = s->desc.rkey;
		w[0].next = &w[1];
		n++;
	}
	mr = xport_rdma_mr_of(c->xd, s->msg, s->msg_len);
	sg[n] = (struct ibv_sge){.addr = (uintptr_t)s->msg, .length = s->msg_len, .lkey = mr->lkey};
	w[n].sg_list = &sg[n];
	w[n].num_sge = 1;
	w[n].opcode = IBV_WR_SEND;
	w[n].send_flags = inl ? IBV_SEND_INLINE : 0;
	if (s->has_desc && c->peer_inv) {
		/* The client's window for this request dies with the reply
		 * (remote invalidate, as NVMe-oF and iSER do). */
		w[n].opcode = IBV_WR_SEND_WITH_INV;
		w[n].invalidate_rkey = s->desc.rkey;
	}
	n++;
	/* The SEND's completion implies the WRITE's (same QP, in order). */
	need = s->base.sent_cb || s->reply_bounce || !inl;
	rc = rdma_post(c, w, n, need ? RDMA_WR_REPLY : RDMA_WR_NONE, s, need);
	if (rc)
		return rc;
	if (!need)
		xport_sreq_reply_done(&c->base, &s->base, 0); /* no callback: nothing runs */
	return 0;
}

static void rdma_reply_done(struct rdma_conn *c, struct rdma_sreq *s, int status)
{
	if (s->reply_bounce)
		zl_xport_buf_free(c->base.x, s->reply_bounce);
	s->reply_bounce = NULL;
	xport_sreq_reply_done(&c->base, &s->base, status);
}

int xport_rdma_reply(struct zl_xport_conn *bc, struct xport_sreq *bs, const struct zl_wire_hdr *rep,
		     const void *data, uint32_t len)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct rdma_sreq *s = rdma_sreq_of(bs);
	struct zl_xport *x = bc->x;
	struct zl_wire_hdr h = *rep;
	bool inline_data = len > 0;

	s->rwrite = false;
	s->reply_bounce = NULL;
	if (len && s->has_desc && bs->opcode == ZL_OP_READ) {
		/* Data goes by RDMA WRITE into the client's buffer. */
		inline_data = false;
		h.flags |= ZL_WF_RDMA;
		h.payload_len = 0;
		if (len <= s->desc.len) {
			s->rwrite = true;
			if (!zl_xport_buf_owned(x, data, len)) {
				s->reply_bounce = zl_xport_buf_alloc(x, len);
				if (!s->reply_bounce)
					return -ENOMEM;
				rdma_copy(x, bs->opcode, s->reply_bounce, data, len);
			}
		} else if (xport_warn_ok(x)) {
			/* The client fails the request (-ZL_ERR_PROTO). */
			ZL_LOG_WARN("xport",
				    "reply data larger than the client's buffer transport=rdma "
				    "peer=%s len=%u buffer=%u; data not sent",
				    bc->peer, len, s->desc.len);
		}
	} else if (len > RDMA_INLINE_MAX) {
		if (xport_warn_ok(x))
			ZL_LOG_ERR("xport",
				   "reply data without a client descriptor is too large "
				   "transport=rdma op=%s len=%u max=%u",
				   zl_wire_op_name(rep->opcode), len, RDMA_INLINE_MAX);
		return -ZL_ERR_INVAL;
	}
	zl_wire_encode(&h, s->msg);
	if (inline_data)
		rdma_copy(x, bs->opcode, s->msg + ZL_WIRE_HDR_SIZE, data, len);
	s->msg_len = ZL_WIRE_HDR_SIZE + (inline_data ? len : 0);
	s->rdata = data;
	s->rlen = len;
	rdma_bl_push(c, &s->bl_reply, RDMA_BL_REPLY);
	rdma_bl_run(c);
	return 0;
}

static void rdma_bl_run(struct rdma_conn *c)
{
	while (c->bl_head && !c->base.closing) {
		struct rdma_bl *b = c->bl_head;
		int rc;

		switch (b->kind) {
		case RDMA_BL_REQ:
			rc = rdma_req_post(c, ZL_CONTAINER_OF(b, struct rdma_req, bl));
			break;
		case RDMA_BL_FETCH:
			rc = rdma_fetch_post(c, ZL_CONTAINER_OF(b, struct rdma_sreq, bl_fetch));
			break;
		case RDMA_BL_LINV:
			rc = rdma_linv_post(c, ZL_CONTAINER_OF(b, struct rdma_req, bl));
			break;
		default:
			/* rdma_reply_post may put the slot: unlink first. */
			c->bl_head = b->next;
			if (!c->bl_head)
				c->bl_tail = NULL;
			rc = rdma_reply_post(c, ZL_CONTAINER_OF(b, struct rdma_sreq, bl_reply));
			if (rc == -EAGAIN) {
				b->next = c->bl_head;
				c->bl_head = b;
				if (!c->bl_tail)
					c->bl_tail = b;
				return;
			}
			b->queued = false;
			if (rc)
				return;
			continue;
		}
		if (rc == -EAGAIN)
			return;
		c->bl_head = b->next;
		if (!c->bl_head)
			c->bl_tail = NULL;
		b->queued = false;
		if (rc)
			return;
	}
}

/* ---- completions ---- */

static void rdma_wc(struct rdma_conn *c, const struct ibv_wc *wc)
{
	bool ok = wc->status == IBV_WC_SUCCESS;

	if (wc->wr_id & RDMA_RECV_BIT) {
		uint32_t idx = (uint32_t)(wc->wr_id & 0xffffffffu);

		if (c->base.server) {
			if (ok && !c->base.closing)
				rdma_srv_recv(c, rdma_slab_at(&c->xd->srq_slab, idx), wc->byte_len);
			/* Shared receives always go back to the SRQ. */
			if (xport_rdma_srq_post(c->xd, idx))
				ZL_LOG_ERR("xport", "cannot re-post a shared receive buffer idx=%u",
					   idx);
		} else if (ok && !c->base.closing) {
			rdma_cli_recv(c, wc);
		}
	} else if (ok) {
		struct rdma_wr_ctx *e = &c->ring[wc->wr_id & c->ring_mask];
		uint8_t kind = e->kind;
		void *ptr = e->ptr;

		c->sq_done = wc->wr_id + 1;
		e->kind = RDMA_WR_NONE;
		if (c->base.closing)
			return; /* the close work reports everything */
		if (kind == RDMA_WR_FETCH)
			rdma_fetch_done(c, ptr);
		else if (kind == RDMA_WR_REPLY)
			rdma_reply_done(c, ptr, 0);
		else if (kind == RDMA_WR_LINV)
			rdma_linv_done(c, ptr);
	}
	if (!ok && wc->status != IBV_WC_WR_FLUSH_ERR)
		c->base.x->st.rdma_wc_errors++;
	if (!ok && !c->base.closing) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR && xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "RDMA work request failed transport=rdma peer=%s status=\"%s\" "
				    "opcode=%d; closing connection",
				    c->base.peer, ibv_wc_status_str(wc->status), (int)wc->opcode);
		xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
	}
}

/* Polls one batch of completions; returns how many. The caller holds a
 * reference. */
static int rdma_conn_poll(struct rdma_conn *c)
{
	struct ibv_wc wc[RDMA_POLL_BATCH];
	int n;

	if (c->base.closing || !c->cq)
		return 0;
	n = ibv_poll_cq(c->cq, RDMA_POLL_BATCH, wc);
	if (n < 0) {
		xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return 0;
	}
	for (int i = 0; i < n; i++)
		rdma_wc(c, &wc[i]);
	if (n > 0 && !c->base.closing)
		rdma_bl_run(c);
	return n;
}

void xport_rdma_close_work(struct zl_xport_conn *bc)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct zl_xport *x = bc->x;

	/* No DMA into or out of any buffer after this. */
	xport_rdma_conn_teardown(c);
	for (struct rdma_bl *b = c->bl_head; b; b = b->next)
		b->queued = false;
	c->bl_head = c->bl_tail = NULL;
	/* Bounce buffers of transfers that never completed; the server layer
	 * fails their callbacks after this. */
	for (uint32_t i = 0; bc->server && i < bc->sreqs.n; i++) {
		struct rdma_sreq *s = rdma_sreq_of(xport_sreq_at(bc, i));

		if (s->fetch_bounce)
			zl_xport_buf_free(x, s->fetch_bounce);
		s->fetch_bounce = NULL;
		if (s->reply_bounce)
			zl_xport_buf_free(x, s->reply_bounce);
		s->reply_bounce = NULL;
	}
	/* Replies held for a local invalidate: the QP and the windows are
	 * gone, so the data may be checked and delivered now. */
	for (uint32_t i = 0; !bc->server && i < c->n_reqs; i++) {
		struct rdma_req *r = rdma_req_of(xport_req_at(bc, i));

		if (r->base.busy && r->state == RDMA_REQ_INVALIDATING) {
			int st = r->base.held_status;

			rdma_cli_data(c, r, &st, &r->base.held_rep);
			xport_req_hold(&r->base, st, st ? NULL : &r->base.held_rep);
			r->state = RDMA_REQ_SENT;
		}
	}
	xport_rdma_slab_fini(x, &c->slab);
	if (bc->server)
		rdma_announce(c);
}
