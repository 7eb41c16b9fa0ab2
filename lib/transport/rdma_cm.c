/* RDMA transport, connection management: librdmacm sets connections up over
 * IP (resolve, connect with the handshake in the private data, accept on a
 * listener's channel), RC queue pairs of libibverbs carry them; each
 * connection then has its own CM channel on the loop. Builds a connection's
 * CQ, QP, slots and receives, and tears them down (safe to run twice).
 */
#include "rdma_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Listeners of the process, so that a blocking connect can accept on a
 * listener of its own loop (client and server on one thread) instead of
 * deadlocking. Locking: rdma_lis_lock protects the list. */
struct rdma_listener;
static pthread_mutex_t rdma_lis_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_listener *rdma_lis_all;

static void rdma_hs_encode(const struct rdma_hs *h, uint8_t out[RDMA_HS_SIZE])
{
	uint32_t v[4] = {h->magic, (uint32_t)h->version | ((uint32_t)h->flags << 16), h->count,
			 h->max_msg};

	for (int i = 0; i < 4; i++) {
		out[i * 4] = (uint8_t)v[i];
		out[i * 4 + 1] = (uint8_t)(v[i] >> 8);
		out[i * 4 + 2] = (uint8_t)(v[i] >> 16);
		out[i * 4 + 3] = (uint8_t)(v[i] >> 24);
	}
}

static int rdma_hs_decode(const void *buf, size_t len, struct rdma_hs *h)
{
	const uint8_t *p = buf;
	uint32_t v[4];

	if (!buf || len < RDMA_HS_SIZE)
		return -ZL_ERR_PROTO;
	for (int i = 0; i < 4; i++)
		v[i] = (uint32_t)p[i * 4] | ((uint32_t)p[i * 4 + 1] << 8) |
		       ((uint32_t)p[i * 4 + 2] << 16) | ((uint32_t)p[i * 4 + 3] << 24);
	h->magic = v[0];
	h->version = (uint16_t)v[1];
	h->flags = (uint16_t)(v[1] >> 16);
	h->count = v[2];
	h->max_msg = v[3];
	if (h->magic != RDMA_HS_MAGIC)
		return -ZL_ERR_PROTO;
	if (h->version != RDMA_HS_VERSION)
		return -ZL_ERR_VERSION;
	if (h->count == 0 || h->count > XPORT_MAX_MAX_INFLIGHT || h->max_msg < RDMA_MSG_SIZE)
		return -ZL_ERR_PROTO;
	return 0;
}

int xport_rdma_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* ---- connection life cycle ---- */

static uint32_t rdma_pow2(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* Releases the verbs and CM resources; safe to run twice. */
void xport_rdma_conn_teardown(struct rdma_conn *c)
{
	if (c->ch_in_loop) {
		zl_loop_del(c->loop, &c->ch_h);
		c->ch_in_loop = false;
	}
	xport_rdma_mws_fini(c);
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq) {
		struct ibv_wc wc[RDMA_POLL_BATCH];
		int n;

		/* Receives this QP took from the SRQ go back to it. */
		while ((n = ibv_poll_cq(c->cq, RDMA_POLL_BATCH, wc)) > 0) {
			for (int i = 0; i < n; i++)
				if (c->base.server && (wc[i].wr_id & RDMA_RECV_BIT))
					xport_rdma_srq_post(c->xd,
							    (uint32_t)(wc[i].wr_id & 0xffffffffu));
		}
		if (c->cq_unacked)
			ibv_ack_cq_events(c->cq, c->cq_unacked);
		c->cq_unacked = 0;
		if (ibv_destroy_cq(c->cq))
			ZL_LOG_ERR("xport", "cannot destroy a completion queue peer=%s err=%s",
				   c->base.peer, zl_strerror(-errno));
		c->cq = NULL;
	}
	if (c->base.server && c->granted && c->xd) {
		c->xd->srq_reserved -= c->granted;
		c->granted = 0;
	}
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
	if (c->ch) {
		rdma_destroy_event_channel(c->ch);
		c->ch = NULL;
	}
}

void xport_rdma_conn_free(struct zl_xport_conn *bc)
{
	struct rdma_conn *c = rdma_conn_of(bc);

	/* Only reachable after the close work (which freed the pool memory)
	 * or from a failed setup. */
	xport_rdma_conn_teardown(c);
	free(c->ring);
	xport_conn_fini(bc);
	free(c);
}

/* Builds a connection on id: CQ, QP, slots, message buffers, receives.
 * n: client request slots, or server credits. */
static int rdma_conn_new(struct rdma_xport *tx, struct rdma_xdev *xd, struct rdma_cm_id *id,
			 bool server, uint32_t n, uint32_t peer_slots, struct rdma_conn **out)
{
	struct zl_xport *x = tx->x;
	const struct ibv_device_attr *a = &xd->dev->attr;
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn *c;
	uint32_t cqe, nmsg;
	int rc = -ENOMEM;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	xport_conn_init(x, &c->base, server);
	c->tx = tx;
	c->loop = x->loop;
	c->xd = xd;
	if (server) {
		c->granted = n;

		c->sq_depth = ZL_MIN(2 * n + 2 * RDMA_SIGNAL_EVERY, (uint32_t)a->max_qp_wr);
		cqe = c->sq_depth + 2 * n + 64;
		nmsg = 2 * n; /* a message per server slot */
	} else {
		c->n_reqs = n;
		/* Per request: BIND_MW + SEND, and maybe a LOCAL_INV. */
		c->sq_depth = ZL_MIN(3 * n + 2 * RDMA_SIGNAL_EVERY, (uint32_t)a->max_qp_wr);
		cqe = c->sq_depth + n;
		nmsg = 2 * n;
	}
	cqe = ZL_MIN(cqe, (uint32_t)a->max_cqe);
	c->ring_mask = rdma_pow2(c->sq_depth) - 1;
	c->ring = calloc(c->ring_mask + 1, sizeof(*c->ring));
	if (!c->ring)
		goto out_free;
	rc = xport_rdma_slab_grow(x, &c->slab, nmsg);
	if (rc)
		goto out_free;
	c->cq = ibv_create_cq(id->verbs, (int)cqe, c, xd->cc, 0);
	if (!c->cq) {
		rc = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	if (ibv_req_notify_cq(c->cq, 0)) {
		rc = -EIO;
		goto out_free;
	}
	qa.send_cq = qa.recv_cq = c->cq;
	qa.srq = server ? xd->srq : NULL;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = c->sq_depth;
	qa.cap.max_recv_wr = server ? 0 : n;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = RDMA_INLINE_HDR;
	if (rdma_create_qp(id, xd->dev->pd, &qa)) {
		/* Devices without inline sends. */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(id, xd->dev->pd, &qa)) {
			rc = errno ? -errno : -ENOMEM;
			goto out_free;
		}
	}
	c->id = id;
	id->context = c;
	c->max_inline = qa.cap.max_inline_data;
	if (server) {
		if (xport_sreqs_init(&c->base, 2 * n, sizeof(struct rdma_sreq),
				     offsetof(struct rdma_sreq, base)))
			goto out_nomem;
		c->peer_slots = peer_slots;
		for (uint32_t i = 0; i < 2 * n; i++)
			rdma_sreq_of(xport_sreq_at(&c->base, i))->msg = rdma_slab_at(&c->slab, i);
	} else {
		if (xport_reqs_init(&c->base, n, sizeof(struct rdma_req),
				    offsetof(struct rdma_req, base)))
			goto out_nomem;
		rc = xport_rdma_mws_init(c, n);
		if (rc)
			goto out_qp;
		for (uint32_t i = 0; i < n; i++) {
			rc = xport_rdma_recv_post(c, i);
			if (rc)
				goto out_qp;
		}
	}
	*out = c;
	return 0;

out_nomem:
	rc = -ENOMEM;
out_qp:
	rdma_destroy_qp(id);
	c->id = NULL;
out_free:
	if (c->cq)
		ibv_destroy_cq(c->cq);
	c->cq = NULL;
	xport_rdma_slab_fini(x, &c->slab);
	c->granted = 0;
	xport_rdma_conn_free(&c->base);
	return rc;
}

void xport_rdma_conn_close(struct zl_xport_conn *bc, int reason)
{
	struct rdma_conn *c = rdma_conn_of(bc);

	if (bc->closing)
		return;
	xport_conn_closing(bc, reason);
	/* The QP goes to the error state now: the peer can no longer read or
	 * write our buffers, which callers get back in the close work. */
	if (c->id && c->id->qp)
		rdma_disconnect(c->id);
	xport_rdma_busy_del(c);
	if (c->ch_in_loop) {
		zl_loop_del(c->loop, &c->ch_h);
		c->ch_in_loop = false;
	}
	zl_loop_defer_cancel(c->loop, &c->conn_d);
}

/* CM events of an established connection. */
static void rdma_conn_cm_cb(void *arg, uint32_t events)
{
	struct rdma_conn *c = arg;
	struct rdma_cm_event *ev;

	(void)events;
	zl_xport_conn_get(&c->base);
	while (!c->base.closing && c->ch && rdma_get_cm_event(c->ch, &ev) == 0) {
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_ESTABLISHED:
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			break;
		default:
			ZL_LOG_DEBUG("xport", "cm event transport=rdma peer=%s event=%s status=%d",
				     c->base.peer, rdma_event_str(type), status);
			xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
			break;
		}
	}
	zl_xport_conn_put(&c->base);
}

/* Registers the connection's own CM channel on the loop and links it. */
static int rdma_conn_start(struct rdma_conn *c, struct rdma_event_channel *ch)
{
	int rc;

	c->ch = ch;
	rc = xport_rdma_set_nonblock(ch->fd);
	if (rc)
		return rc;
	rc = zl_loop_add(c->loop, &c->ch_h, ch->fd, EPOLLIN, rdma_conn_cm_cb, c);
	if (rc)
		return rc;
	c->ch_in_loop = true;
	xport_format_peer(rdma_get_peer_addr(c->id), c->base.peer, sizeof(c->base.peer));
	xport_conn_link(&c->base);
	return 0;
}

/* ---- connection setup ---- */

static int rdma_cm_err(enum rdma_cm_event_type type, int status)
{
	switch (type) {
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -EHOSTUNREACH;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	default:
		return -EPROTO;
	}
}

static void rdma_lis_cb(void *arg, uint32_t events);

/* Waits for the event `want` on ch until deadline_ms. While it waits, the
 * listeners of `loop` accept connections (a client and a server on the same
 * thread would deadlock otherwise); their callbacks stay deferred. hs gets the
 * peer's handshake when wanted. */
static int rdma_cm_wait(struct rdma_event_channel *ch, struct zl_loop *loop, uint64_t deadline_ms,
			enum rdma_cm_event_type want, struct rdma_hs *hs)
{
	for (;;) {
		struct pollfd pfd[1 + RDMA_SPIN_LISTENERS];
		struct rdma_listener *ls[RDMA_SPIN_LISTENERS];
		struct rdma_cm_event *ev;
		uint64_t now;
		int nl = 0, n;

		if (rdma_get_cm_event(ch, &ev) == 0) {
			enum rdma_cm_event_type type = ev->event;
			int status = ev->status, rc = 0;

			if (type == want && hs)
				rc = rdma_hs_decode(ev->param.conn.private_data,
						    ev->param.conn.private_data_len, hs);
			rdma_ack_cm_event(ev);
			if (type == want)
				return rc;
			ZL_LOG_DEBUG("xport", "rdma connect event=%s status=%d (waiting for %s)",
				     rdma_event_str(type), status, rdma_event_str(want));
			return rdma_cm_err(type, status);
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		pfd[0] = (struct pollfd){.fd = ch->fd, .events = POLLIN};
		if (loop) {
			pthread_mutex_lock(&rdma_lis_lock);
			for (struct rdma_listener *l = rdma_lis_all; l && nl < RDMA_SPIN_LISTENERS;
			     l = l->all_next) {
				if (l->tx->x->loop != loop)
					continue;
				ls[nl] = l;
				pfd[1 + nl] = (struct pollfd){.fd = l->ch->fd, .events = POLLIN};
				nl++;
			}
			pthread_mutex_unlock(&rdma_lis_lock);
		}
		now = zl_now_ms();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		n = poll(pfd, (nfds_t)(1 + nl), (int)ZL_MIN(deadline_ms - now, 1000u));
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; n > 0 && i < nl; i++)
			if (pfd[1 + i].revents)
				rdma_lis_cb(ls[i], EPOLLIN);
	}
}

/* Resolves address and route of host:port on a fresh id of ch. */
static int rdma_resolve_id(struct rdma_event_channel *ch, struct zl_loop *loop, const char *host,
			   uint16_t port, uint64_t deadline_ms, struct rdma_cm_id **out)
{
	struct rdma_cm_id *id = NULL;
	struct addrinfo *res;
	int tmo, rc;

	rc = xport_resolve(host, port, false, &res);
	if (rc)
		return rc;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		rc = -errno;
		goto out_res;
	}
	tmo = (int)ZL_MAX(1, (int64_t)deadline_ms - (int64_t)zl_now_ms());
	if (rdma_resolve_addr(id, NULL, res->ai_addr, tmo)) {
		rc = errno == ENODEV ? -EHOSTUNREACH : -errno;
		goto out_id;
	}
	rc = rdma_cm_wait(ch, loop, deadline_ms, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (rc)
		goto out_id;
	tmo = (int)ZL_MAX(1, (int64_t)deadline_ms - (int64_t)zl_now_ms());
	if (rdma_resolve_route(id, tmo)) {
		rc = -errno;
		goto out_id;
	}
	rc = rdma_cm_wait(ch, loop, deadline_ms, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	if (rc)
		goto out_id;
	if (!id->verbs) {
		rc = -EHOSTUNREACH;
		goto out_id;
	}
	freeaddrinfo(res);
	*out = id;
	return 0;

out_id:
	rdma_destroy_id(id);
out_res:
	freeaddrinfo(res);
	return rc;
}

static int rdma_xport_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			      struct zl_xport_conn **out)
{
	struct rdma_xport *tx = x->impl;
	uint64_t deadline_ms = zl_now_ms() + (uint64_t)timeout_ms;
	struct rdma_conn_param cp = {0};
	struct rdma_event_channel *ch;
	struct rdma_hs hs = {.magic = RDMA_HS_MAGIC, .version = RDMA_HS_VERSION};
	uint8_t pd[RDMA_HS_SIZE];
	struct rdma_cm_id *id = NULL;
	struct rdma_xdev *xd;
	struct rdma_conn *c = NULL;
	int rc;

	ch = rdma_create_event_channel();
	if (!ch)
		return errno ? -errno : -ENODEV;
	rc = xport_rdma_set_nonblock(ch->fd);
	if (rc)
		goto out_ch;
	rc = rdma_resolve_id(ch, x->loop, host, port, deadline_ms, &id);
	if (rc)
		goto out_ch;
	rc = xport_rdma_xdev_get(tx, id->verbs, &xd);
	if (rc)
		goto out_id;
	rc = rdma_conn_new(tx, xd, id, false, x->opts.max_inflight, 0, &c);
	if (rc)
		goto out_id;
	hs.count = c->n_reqs;
	hs.flags = RDMA_HS_F_INV;
	hs.max_msg = RDMA_MSG_SIZE;
	rdma_hs_encode(&hs, pd);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources =
	    (uint8_t)ZL_MIN(RDMA_RD_ATOM_MAX, (uint32_t)xd->dev->attr.max_qp_rd_atom);
	cp.initiator_depth =
	    (uint8_t)ZL_MIN(RDMA_RD_ATOM_MAX, (uint32_t)xd->dev->attr.max_qp_init_rd_atom);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp)) {
		rc = -errno;
		goto out_conn;
	}
	rc = rdma_cm_wait(ch, x->loop, deadline_ms, RDMA_CM_EVENT_ESTABLISHED, &hs);
	if (rc)
		goto out_conn;
	c->credits = ZL_MIN(hs.count, c->n_reqs);
	c->peer_inv = hs.flags & RDMA_HS_F_INV;
	rc = rdma_conn_start(c, ch);
	if (rc) {
		c->ch = NULL; /* freed below */
		goto out_conn;
	}
	if (!c->peer_inv)
		ZL_LOG_INFO("xport",
			    "rdma server does not invalidate memory windows in its replies "
			    "(older version) peer=%s; invalidating each one locally",
			    c->base.peer);
	ZL_LOG_DEBUG("xport", "connected transport=rdma peer=%s dev=%s credits=%u", c->base.peer,
		     ibv_get_device_name(id->verbs->device), c->credits);
	*out = &c->base;
	return 0;

out_conn:
	xport_rdma_slab_fini(x, &c->slab);
	xport_rdma_conn_free(&c->base); /* destroys QP, CQ and id */
	id = NULL;
out_id:
	if (id)
		rdma_destroy_id(id);
out_ch:
	rdma_destroy_event_channel(ch);
	ZL_LOG_DEBUG("xport", "rdma connect failed host=%s port=%u err=%s", host, port,
		     zl_errname(rc));
	return rc;
}

/* ---- server ---- */

static void rdma_refuse(struct rdma_cm_id *id, const char *why, int rc)
{
	ZL_LOG_WARN("xport", "rejecting rdma connection reason=\"%s\" err=%s", why,
		    zl_strerror(rc));
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
}

static void rdma_accept_one(struct rdma_listener *l, struct rdma_cm_id *id,
			    const struct rdma_hs *hs, uint8_t ird, uint8_t ord)
{
	struct rdma_xport *tx = l->tx;
	struct zl_xport *x = tx->x;
	struct rdma_conn_param cp = {0};
	struct rdma_hs ahs = {.magic = RDMA_HS_MAGIC, .version = RDMA_HS_VERSION};
	struct rdma_event_channel *ch;
	uint8_t pd[RDMA_HS_SIZE];
	struct rdma_xdev *xd;
	struct rdma_conn *c;
	uint32_t credits;
	int rc;

	rc = xport_rdma_xdev_get(tx, id->verbs, &xd);
	if (rc) {
		rdma_refuse(id, "device setup failed", rc);
		return;
	}
	rc = xport_rdma_srq_fill(x, xd, xd->srq_reserved);
	if (rc) {
		rdma_refuse(id, "shared receive queue setup failed", rc);
		return;
	}
	credits = ZL_MIN(hs->count, x->opts.max_inflight);
	credits = ZL_MIN(credits, xd->srq_depth - xd->srq_reserved);
	if (!credits) {
		rdma_refuse(id, "shared receive queue full (too many connections)", -ZL_ERR_BUSY);
		return;
	}
	rc = xport_rdma_srq_fill(x, xd, xd->srq_reserved + credits);
	if (rc) {
		rdma_refuse(id, "cannot post shared receives", rc);
		return;
	}
	rc = rdma_conn_new(tx, xd, id, true, credits, hs->count, &c);
	if (rc) {
		rdma_refuse(id, "connection setup failed", rc);
		return;
	}
	xd->srq_reserved += credits;
	c->base.sops = l->base.sops;
	c->base.sarg = l->base.sarg;
	ch = rdma_create_event_channel();
	if (!ch || rdma_migrate_id(id, ch)) {
		rc = errno ? -errno : -ENOMEM;
		if (ch)
			rdma_destroy_event_channel(ch);
		goto out_reject;
	}
	rc = rdma_conn_start(c, ch);
	if (rc)
		goto out_reject;
	ahs.count = credits;
	c->peer_inv = hs->flags & RDMA_HS_F_INV;
	ahs.flags = c->peer_inv ? RDMA_HS_F_INV : 0;
	ahs.max_msg = RDMA_MSG_SIZE;
	rdma_hs_encode(&ahs, pd);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources = (uint8_t)ZL_MIN((int)ird, xd->dev->attr.max_qp_rd_atom);
	cp.initiator_depth = (uint8_t)ZL_MIN((int)ord, xd->dev->attr.max_qp_init_rd_atom);
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp)) {
		rc = -errno;
		ZL_LOG_WARN("xport", "rdma accept failed peer=%s err=%s", c->base.peer,
			    zl_strerror(rc));
		xport_rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	ZL_LOG_DEBUG("xport", "accepted transport=rdma peer=%s port=%u dev=%s credits=%u",
		     c->base.peer, l->base.port, ibv_get_device_name(id->verbs->device), credits);
	zl_loop_defer(c->loop, &c->conn_d, xport_rdma_announce_cb, c);
	return;

out_reject:
	ZL_LOG_WARN("xport", "dropping rdma connection err=%s", zl_strerror(rc));
	rdma_reject(id, NULL, 0);
	xport_rdma_slab_fini(x, &c->slab);
	xport_rdma_conn_free(&c->base); /* QP, CQ, id, channel, SRQ share */
}

static void rdma_lis_cb(void *arg, uint32_t events)
{
	struct rdma_listener *l = arg;
	struct rdma_cm_event *ev;

	(void)events;
	while (l->ch && rdma_get_cm_event(l->ch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *id = ev->id;
			uint8_t ird = ev->param.conn.initiator_depth;
			uint8_t ord = ev->param.conn.responder_resources;
			struct rdma_hs hs;
			int rc = rdma_hs_decode(ev->param.conn.private_data,
						ev->param.conn.private_data_len, &hs);

			rdma_ack_cm_event(ev);
			if (rc)
				rdma_refuse(
				    id, "bad handshake (not a Zipline peer or other version)", rc);
			else
				rdma_accept_one(l, id, &hs, ird, ord);
			continue;
		}
		ZL_LOG_DEBUG("xport", "listener cm event=%s port=%u", rdma_event_str(ev->event),
			     l->base.port);
		rdma_ack_cm_event(ev);
	}
}

static int rdma_xport_listen(struct zl_xport *x, const char *host, const struct addrinfo *ai,
			     struct zl_xport_listener **out)
{
	struct rdma_listener *l;
	int rc;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->tx = x->impl;
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->ch = rdma_create_event_channel();
	if (!l->ch) {
		rc = errno ? -errno : -ENODEV;
		goto out_free;
	}
	rc = xport_rdma_set_nonblock(l->ch->fd);
	if (rc)
		goto out_ch;
	if (rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP)) {
		rc = -errno;
		goto out_ch;
	}
	if (rdma_bind_addr(l->id, ai->ai_addr) || rdma_listen(l->id, 1024)) {
		rc = -errno;
		goto out_id;
	}
	if (!l->id->verbs && strcmp(host, "0.0.0.0") && strcmp(host, "::"))
		ZL_LOG_WARN("xport",
			    "listening on an address without an RDMA device host=%s; no RDMA "
			    "client will reach it",
			    host);
	l->base.port = ntohs(rdma_get_src_port(l->id));
	rc = zl_loop_add(x->loop, &l->h, l->ch->fd, EPOLLIN, rdma_lis_cb, l);
	if (rc)
		goto out_id;
	pthread_mutex_lock(&rdma_lis_lock);
	l->all_next = rdma_lis_all;
	rdma_lis_all = l;
	pthread_mutex_unlock(&rdma_lis_lock);
	*out = &l->base;
	return 0;

out_id:
	rdma_destroy_id(l->id);
out_ch:
	rdma_destroy_event_channel(l->ch);
out_free:
	free(l);
	return rc;
}

static void rdma_listener_close(struct zl_xport_listener *bl)
{
	struct rdma_listener *l = ZL_CONTAINER_OF(bl, struct rdma_listener, base);

	pthread_mutex_lock(&rdma_lis_lock);
	for (struct rdma_listener **pp = &rdma_lis_all; *pp; pp = &(*pp)->all_next) {
		if (*pp == l) {
			*pp = l->all_next;
			break;
		}
	}
	pthread_mutex_unlock(&rdma_lis_lock);
	zl_loop_del(bl->x->loop, &l->h);
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

bool xport_rdma_reaches(const char *host, uint16_t port, int timeout_ms)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	bool ok;

	if (!ch)
		return false;
	ok = !xport_rdma_set_nonblock(ch->fd) &&
	     !rdma_resolve_id(ch, NULL, host, port ? port : 1,
			      zl_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1000), &id);
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return ok;
}

const struct xport_ops xport_rdma_ops = {
    .kind = ZL_XPORT_RDMA,
    .init = xport_rdma_init,
    .fini = xport_rdma_fini,
    .connect = rdma_xport_connect,
    .listen = rdma_xport_listen,
    .listener_close = rdma_listener_close,
    .conn_close = xport_rdma_conn_close,
    .close_work = xport_rdma_close_work,
    .conn_free = xport_rdma_conn_free,
    .request = xport_rdma_request,
    .req_release = xport_rdma_req_release,
    .fetch = xport_rdma_fetch,
    .discard = xport_rdma_discard,
    .reply = xport_rdma_reply,
    .mem_register = xport_rdma_mem_register,
};