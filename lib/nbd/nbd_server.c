/* NBD server: listener, per-connection handshake and transmission state
 * machines on one zl_loop.
 *
 * Per connection: a 64 KiB input buffer (request headers and small payloads
 * are parsed from it; big payloads are received straight into the request
 * slot's buffer), a fixed array of request slots each with a preallocated
 * backend buffer, and a send queue of finished slots flushed with one
 * sendmsg per loop round. When every slot is busy the connection stops
 * reading its socket; a slot becomes free again once its reply is sent, so a
 * client that does not read its replies is throttled, not buffered. */
#include "nbd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/common/common.h"

#define NBD_IN_BUF	 (64u << 10)
#define NBD_MAX_IOV	 64
#define NBD_DEF_INFLIGHT 32u
#define NBD_DEF_SLOT_BUF (256u << 10)
#define NBD_DEF_CONNS	 64u

/* Connection states; each names what the connection waits for. */
enum nbd_cs {
	NBD_CS_CLIENT_FLAGS, /* greeting queued; waiting for the client's u32 flags */
	NBD_CS_OPT_HDR,	     /* waiting for an option header */
	NBD_CS_OPT_DATA,     /* receiving option data into opt_data */
	NBD_CS_REQ_HDR,	     /* transmission: waiting for a request header */
	NBD_CS_REQ_DATA,     /* receiving a WRITE payload into cur->data */
	NBD_CS_REQ_DRAIN,    /* discarding the payload of a rejected WRITE */
	NBD_CS_DRAINING,     /* DISC or EOF: no more input; close once replies are sent */
	NBD_CS_CLOSED,	     /* socket closed; freed once no backend I/O is in flight */
};

struct nbd_conn;

/* Request slot states: free (on the free list), receiving its payload,
 * submitted to the backend, waiting on the server's busy list, or queued
 * for sending its reply. */
struct nbd_slot {
	struct nbd_conn *conn;
	struct nbd_slot *next;
	struct zl_nbd_req req;
	uint8_t *buf;  /* preallocated, conn->srv->slot_buf bytes */
	uint8_t *big;  /* borrowed pool buffer for requests above slot_buf */
	uint8_t *data; /* buf or big */
	uint8_t hdr[ZL_NBD_REPLY_LEN];
	uint32_t nbd_err;
	uint32_t send_off, send_len;
	bool fua_flush;	  /* TRIM/WRITE_ZEROES with FUA: a flush follows */
	bool flush_stage; /* ... and this is that flush */
};

struct nbd_conn {
	struct zl_nbd_server *srv;
	struct nbd_conn *next, *prev; /* server list, until freed */
	bool linked;
	struct zl_loop_handle h;
	int fd;
	enum nbd_cs state;
	uint32_t client_flags;
	struct zl_nbd_opt_hdr opt;
	uint8_t *opt_data;
	uint32_t want, got; /* progress of opt_data / payload / drain */
	uint8_t *in;
	size_t in_start, in_end;
	uint8_t hs_out[ZL_NBD_OPT_OUT_MAX];
	size_t hs_len, hs_off;
	enum zl_nbd_opt_action hs_action;
	struct nbd_slot *slots, *free_slots, *cur;
	uint32_t n_slots, n_free;
	struct nbd_slot *sendq_head, *sendq_tail;
	bool paused;
	struct zl_defer flush_d, resume_d, free_d;
	char peer[64];
};

struct zl_nbd_server {
	struct zl_loop *loop;
	struct zl_nbd_backend be;
	struct zl_nbd_export exp;
	char export_name[ZL_NBD_MAX_NAME + 1];
	char addr[160];
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd;
	struct zl_loop_handle lh;
	uint32_t max_inflight, slot_buf, max_conns;
	struct nbd_conn *conns;
	uint32_t n_conns;
	uint64_t inflight;
	struct nbd_slot *busy_head, *busy_tail; /* -ZL_ERR_BUSY: resubmit later */
	bool shutting_down;
	struct zl_nbd_server_stats stats;
	struct zl_ratelimit err_rl;
};

static void nbd_conn_input(struct nbd_conn *c);
static void nbd_conn_close(struct nbd_conn *c, const char *why, int err);
static void nbd_slot_submit(struct nbd_slot *s);
static void nbd_conn_update_events(struct nbd_conn *c);

/* ---- slots ---- */

static struct nbd_slot *nbd_slot_get(struct nbd_conn *c)
{
	struct nbd_slot *s = c->free_slots;

	if (!s)
		return NULL;
	c->free_slots = s->next;
	s->next = NULL;
	c->n_free--;
	s->data = s->buf;
	s->big = NULL;
	s->nbd_err = 0;
	s->send_off = 0;
	s->send_len = 0;
	s->fua_flush = false;
	s->flush_stage = false;
	return s;
}

static void nbd_conn_free_cb(void *arg)
{
	struct nbd_conn *c = arg;
	struct zl_nbd_server *srv = c->srv;
	uint32_t i;

	zl_loop_defer_cancel(srv->loop, &c->flush_d);
	zl_loop_defer_cancel(srv->loop, &c->resume_d);
	zl_loop_defer_cancel(srv->loop, &c->free_d);
	if (c->linked) {
		if (c->prev)
			c->prev->next = c->next;
		else
			srv->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		srv->n_conns--;
		srv->stats.conns_open = srv->n_conns;
	}
	for (i = 0; i < c->n_slots; i++) {
		if (c->slots[i].buf)
			srv->be.ops->buf_free(srv->be.ctx, c->slots[i].buf);
	}
	free(c->slots);
	free(c->opt_data);
	free(c->in);
	free(c);
}

/* Frees a closed connection (on the next loop round) once all its slots
 * are back. */
static void nbd_conn_maybe_free(struct nbd_conn *c)
{
	if (c->state != NBD_CS_CLOSED || c->n_free != c->n_slots || c->free_d.queued)
		return;
	zl_loop_defer(c->srv->loop, &c->free_d, nbd_conn_free_cb, c);
}

static void nbd_resume_cb(void *arg)
{
	struct nbd_conn *c = arg;

	if (c->state == NBD_CS_CLOSED)
		return;
	c->paused = false;
	nbd_conn_input(c);
	nbd_conn_update_events(c);
}

static void nbd_slot_put(struct nbd_slot *s)
{
	struct nbd_conn *c = s->conn;

	if (s->big) {
		c->srv->be.ops->buf_free(c->srv->be.ctx, s->big);
		s->big = NULL;
	}
	s->next = c->free_slots;
	c->free_slots = s;
	c->n_free++;
	if (c->state == NBD_CS_CLOSED) {
		nbd_conn_maybe_free(c);
		return;
	}
	if (c->paused)
		zl_loop_defer(c->srv->loop, &c->resume_d, nbd_resume_cb, c);
	if (c->state == NBD_CS_DRAINING && c->n_free == c->n_slots)
		nbd_conn_close(c, "client disconnected", 0);
}

/* ---- output ---- */

static void nbd_conn_update_events(struct nbd_conn *c)
{
	uint32_t ev = 0;
	bool hs_pending = c->hs_off < c->hs_len;

	if (c->state == NBD_CS_CLOSED)
		return;
	if (c->state != NBD_CS_DRAINING && !c->paused && !hs_pending)
		ev |= EPOLLIN;
	if (hs_pending || c->sendq_head)
		ev |= EPOLLOUT;
	zl_loop_mod(c->srv->loop, &c->h, ev);
}

/* Sends what is queued; returns 0, or -1 when the connection was closed. */
static int nbd_conn_flush(struct nbd_conn *c)
{
	struct iovec iov[NBD_MAX_IOV];
	struct msghdr msg = {.msg_iov = iov};
	struct nbd_slot *s;
	ssize_t n;
	int k;

	while (c->hs_off < c->hs_len) {
		n = send(c->fd, c->hs_out + c->hs_off, c->hs_len - c->hs_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			nbd_conn_close(c, "send failed", -errno);
			return -1;
		}
		c->hs_off += (size_t)n;
	}
	while (c->sendq_head) {
		k = 0;
		for (s = c->sendq_head; s && k + 2 <= NBD_MAX_IOV; s = s->next) {
			uint32_t off = s->send_off;

			if (off < ZL_NBD_REPLY_LEN) {
				iov[k].iov_base = s->hdr + off;
				iov[k++].iov_len = ZL_NBD_REPLY_LEN - off;
				off = ZL_NBD_REPLY_LEN;
			}
			if (off < s->send_len) {
				iov[k].iov_base = s->data + (off - ZL_NBD_REPLY_LEN);
				iov[k++].iov_len = s->send_len - off;
			}
		}
		msg.msg_iovlen = (size_t)k;
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			nbd_conn_close(c, "send failed", -errno);
			return -1;
		}
		while (n > 0 && c->sendq_head) {
			uint32_t left;

			s = c->sendq_head;
			left = s->send_len - s->send_off;
			if ((size_t)n < left) {
				s->send_off += (uint32_t)n;
				break;
			}
			n -= left;
			c->sendq_head = s->next;
			if (!c->sendq_head)
				c->sendq_tail = NULL;
			nbd_slot_put(s);
			if (c->state == NBD_CS_CLOSED)
				return -1;
		}
	}
	return 0;
}

static void nbd_flush_cb(void *arg)
{
	struct nbd_conn *c = arg;

	if (c->state == NBD_CS_CLOSED)
		return;
	if (nbd_conn_flush(c) == 0)
		nbd_conn_update_events(c);
}

/* Queues the simple reply of slot s (with its data for a successful READ). */
static void nbd_slot_reply(struct nbd_slot *s, uint32_t nbd_err)
{
	struct nbd_conn *c = s->conn;
	struct zl_nbd_server *srv = c->srv;

	if (c->state == NBD_CS_CLOSED) {
		nbd_slot_put(s);
		return;
	}
	if (nbd_err)
		srv->stats.errors++;
	zl_nbd_reply_encode(s->hdr, nbd_err, s->req.cookie);
	s->send_off = 0;
	s->send_len = ZL_NBD_REPLY_LEN;
	if (!nbd_err && s->req.type == ZL_NBD_CMD_READ)
		s->send_len += s->req.length;
	s->next = NULL;
	if (c->sendq_tail)
		c->sendq_tail->next = s;
	else
		c->sendq_head = s;
	c->sendq_tail = s;
	zl_loop_defer(srv->loop, &c->flush_d, nbd_flush_cb, c);
}

/* ---- backend I/O ---- */

static void nbd_busy_retry(struct zl_nbd_server *srv)
{
	/* Resubmit in FIFO order until the backend says busy again. */
	while (srv->busy_head) {
		struct nbd_slot *s = srv->busy_head;
		uint64_t before = srv->inflight;

		srv->busy_head = s->next;
		if (!srv->busy_head)
			srv->busy_tail = NULL;
		s->next = NULL;
		nbd_slot_submit(s);
		if (srv->inflight == before && srv->busy_tail == s)
			break; /* went back on the list: still busy */
	}
}

static void nbd_io_done(void *arg, int status)
{
	struct nbd_slot *s = arg;
	struct nbd_conn *c = s->conn;
	struct zl_nbd_server *srv = c->srv;

	srv->inflight--;
	if (status == 0 && s->fua_flush && c->state != NBD_CS_CLOSED) {
		s->fua_flush = false;
		s->flush_stage = true;
		nbd_slot_submit(s);
		nbd_busy_retry(srv);
		return;
	}
	if (status && zl_ratelimit_ok(&srv->err_rl, 10))
		ZL_LOG_WARN("nbd", "request failed peer=%s type=%u off=%llu len=%u err=%s", c->peer,
			    s->req.type, (unsigned long long)s->req.offset, s->req.length,
			    zl_strerror(status));
	nbd_slot_reply(s, zl_nbd_errno(status));
	nbd_busy_retry(srv);
}

static void nbd_slot_submit(struct nbd_slot *s)
{
	struct nbd_conn *c = s->conn;
	struct zl_nbd_server *srv = c->srv;
	const struct zl_nbd_backend_ops *ops = srv->be.ops;
	const struct zl_nbd_req *r = &s->req;
	void *ctx = srv->be.ctx;
	int rc;

	if (c->state == NBD_CS_CLOSED) {
		nbd_slot_put(s);
		return;
	}
	switch (s->flush_stage ? ZL_NBD_CMD_FLUSH : r->type) {
	case ZL_NBD_CMD_READ:
		rc = ops->read(ctx, s->data, r->offset, r->length, nbd_io_done, s);
		break;
	case ZL_NBD_CMD_WRITE:
		rc = ops->write(ctx, s->data, r->offset, r->length,
				(r->flags & ZL_NBD_CMD_FLAG_FUA) != 0, nbd_io_done, s);
		break;
	case ZL_NBD_CMD_TRIM:
		rc = ops->discard(ctx, r->offset, r->length, nbd_io_done, s);
		break;
	case ZL_NBD_CMD_WRITE_ZEROES:
		rc = ops->write_zeroes(ctx, r->offset, r->length, nbd_io_done, s);
		break;
	default: /* FLUSH */
		rc = ops->flush(ctx, nbd_io_done, s);
		break;
	}
	if (rc == 0) {
		srv->inflight++;
		return;
	}
	if (rc == -ZL_ERR_BUSY) {
		s->next = NULL;
		if (srv->busy_tail)
			srv->busy_tail->next = s;
		else
			srv->busy_head = s;
		srv->busy_tail = s;
		return;
	}
	nbd_slot_reply(s, zl_nbd_errno(rc));
}

/* Counts and submits a checked request whose payload (if any) is in s->data. */
static void nbd_slot_start(struct nbd_slot *s)
{
	struct zl_nbd_server_stats *st = &s->conn->srv->stats;

	switch (s->req.type) {
	case ZL_NBD_CMD_READ:
		st->reads++;
		st->read_bytes += s->req.length;
		break;
	case ZL_NBD_CMD_WRITE:
		st->writes++;
		st->write_bytes += s->req.length;
		break;
	case ZL_NBD_CMD_FLUSH:
		st->flushes++;
		break;
	case ZL_NBD_CMD_TRIM:
		st->trims++;
		s->fua_flush = (s->req.flags & ZL_NBD_CMD_FLAG_FUA) != 0;
		break;
	case ZL_NBD_CMD_WRITE_ZEROES:
		st->zeroes++;
		s->fua_flush = (s->req.flags & ZL_NBD_CMD_FLAG_FUA) != 0;
		break;
	}
	nbd_slot_submit(s);
}

/* ---- input ---- */

/* Reads into the input buffer. Returns bytes read, 0 on EAGAIN, -1 when the
 * connection ended (EOF: draining; error: closed). */
static ssize_t nbd_conn_fill(struct nbd_conn *c)
{
	ssize_t n;

	if (c->in_start == c->in_end) {
		c->in_start = c->in_end = 0;
	} else if (c->in_start > 0) {
		memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
		c->in_end -= c->in_start;
		c->in_start = 0;
	}
	for (;;) {
		n = recv(c->fd, c->in + c->in_end, NBD_IN_BUF - c->in_end, 0);
		if (n > 0) {
			c->in_end += (size_t)n;
			return n;
		}
		if (n == 0) {
			if (c->state == NBD_CS_REQ_HDR) {
				/* EOF between requests: answer what is in flight. */
				c->state = NBD_CS_DRAINING;
				if (c->n_free == c->n_slots)
					nbd_conn_close(c, "client disconnected", 0);
			} else {
				nbd_conn_close(c, "client disconnected mid-message", 0);
			}
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return 0;
		nbd_conn_close(c, "recv failed", -errno);
		return -1;
	}
}

/* Moves up to want-got bytes of the stream into dst (NULL: drop them).
 * Returns true when complete; false when the socket is drained or closed. */
static bool nbd_conn_take(struct nbd_conn *c, uint8_t *dst)
{
	while (c->got < c->want) {
		size_t avail = c->in_end - c->in_start, need = c->want - c->got;
		ssize_t n;

		if (avail) {
			size_t k = ZL_MIN(avail, need);

			if (dst)
				memcpy(dst + c->got, c->in + c->in_start, k);
			c->in_start += k;
			c->got += (uint32_t)k;
			continue;
		}
		if (dst && need >= NBD_IN_BUF / 2) {
			/* Big payload: straight into the slot buffer. */
			n = recv(c->fd, dst + c->got, need, 0);
			if (n > 0) {
				c->got += (uint32_t)n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				return false;
			nbd_conn_close(c,
				       n == 0 ? "client disconnected mid-message" : "recv failed",
				       n == 0 ? 0 : -errno);
			return false;
		}
		if (nbd_conn_fill(c) <= 0)
			return false;
	}
	return true;
}

/* Ensures len bytes are buffered; returns a pointer to them or NULL. */
static const uint8_t *nbd_conn_peek(struct nbd_conn *c, size_t len)
{
	while (c->in_end - c->in_start < len) {
		if (nbd_conn_fill(c) <= 0)
			return NULL;
	}
	return c->in + c->in_start;
}

static void nbd_conn_handle_option(struct nbd_conn *c)
{
	struct zl_nbd_server *srv = c->srv;
	int rc;

	rc = zl_nbd_opt_reply(&srv->exp, c->client_flags, &c->opt, c->opt_data, c->hs_out,
			      sizeof(c->hs_out), &c->hs_len, &c->hs_action);
	if (rc) {
		nbd_conn_close(c, "option reply does not fit", rc);
		return;
	}
	c->hs_off = 0;
	ZL_LOG_DEBUG("nbd", "option peer=%s opt=%u len=%u action=%d", c->peer, c->opt.option,
		     c->opt.length, (int)c->hs_action);
	c->state = NBD_CS_OPT_HDR;
	if (nbd_conn_flush(c))
		return;
}

/* After the handshake output is flushed: act on the last option. */
static bool nbd_conn_hs_done(struct nbd_conn *c)
{
	enum zl_nbd_opt_action a = c->hs_action;

	c->hs_action = ZL_NBD_ACT_CONTINUE;
	if (a == ZL_NBD_ACT_CLOSE) {
		nbd_conn_close(c, "client ended the handshake", 0);
		return false;
	}
	if (a == ZL_NBD_ACT_TRANSMIT) {
		c->state = NBD_CS_REQ_HDR;
		ZL_LOG_INFO("nbd", "transmission peer=%s size=%llu", c->peer,
			    (unsigned long long)c->srv->exp.size);
	}
	return true;
}

/* Handles one request header already decoded into r. */
static void nbd_conn_request(struct nbd_conn *c, const struct zl_nbd_req *r)
{
	struct zl_nbd_server *srv = c->srv;
	struct nbd_slot *s;
	uint32_t err;

	if (r->type == ZL_NBD_CMD_DISC) {
		c->state = NBD_CS_DRAINING;
		if (c->n_free == c->n_slots)
			nbd_conn_close(c, "client sent NBD_CMD_DISC", 0);
		return;
	}
	s = nbd_slot_get(c); /* the caller checked that one is free */
	s->req = *r;
	err = zl_nbd_req_check(r, srv->exp.size);
	if (!err && (r->type == ZL_NBD_CMD_READ || r->type == ZL_NBD_CMD_WRITE) &&
	    r->length > srv->slot_buf) {
		s->big = srv->be.ops->buf_alloc(srv->be.ctx, r->length);
		if (!s->big)
			err = ZL_NBD_ENOMEM;
		else
			s->data = s->big;
	}
	if (err) {
		if (zl_ratelimit_ok(&srv->err_rl, 10))
			ZL_LOG_WARN("nbd",
				    "rejected request peer=%s type=%u flags=%#x off=%llu "
				    "len=%u size=%llu nbd_err=%u",
				    c->peer, r->type, r->flags, (unsigned long long)r->offset,
				    r->length, (unsigned long long)srv->exp.size, err);
		s->nbd_err = err;
		if (zl_nbd_req_has_payload(r)) {
			c->cur = s;
			c->want = r->length;
			c->got = 0;
			c->state = NBD_CS_REQ_DRAIN;
			return;
		}
		nbd_slot_reply(s, err);
		return;
	}
	if (zl_nbd_req_has_payload(r)) {
		c->cur = s;
		c->want = r->length;
		c->got = 0;
		c->state = NBD_CS_REQ_DATA;
		return;
	}
	nbd_slot_start(s);
}

/* Runs the input state machine until the socket is drained, the connection
 * pauses (no free slot / handshake reply pending) or closes. */
static void nbd_conn_input(struct nbd_conn *c)
{
	const uint8_t *p;
	struct zl_nbd_req r;

	for (;;) {
		if (c->hs_off < c->hs_len)
			return;
		if (c->hs_action != ZL_NBD_ACT_CONTINUE && !nbd_conn_hs_done(c))
			return;
		switch (c->state) {
		case NBD_CS_CLIENT_FLAGS:
			p = nbd_conn_peek(c, 4);
			if (!p)
				return;
			c->client_flags = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
					  ((uint32_t)p[2] << 8) | p[3];
			c->in_start += 4;
			if (!(c->client_flags & ZL_NBD_FLAG_C_FIXED_NEWSTYLE) ||
			    (c->client_flags &
			     ~(ZL_NBD_FLAG_C_FIXED_NEWSTYLE | ZL_NBD_FLAG_C_NO_ZEROES))) {
				nbd_conn_close(c, "unsupported client flags", -ZL_ERR_PROTO);
				return;
			}
			c->state = NBD_CS_OPT_HDR;
			break;
		case NBD_CS_OPT_HDR:
			p = nbd_conn_peek(c, ZL_NBD_OPT_HDR_LEN);
			if (!p)
				return;
			if (zl_nbd_opt_hdr_decode(p, &c->opt)) {
				nbd_conn_close(c, "bad option magic", -ZL_ERR_PROTO);
				return;
			}
			c->in_start += ZL_NBD_OPT_HDR_LEN;
			if (c->opt.length > ZL_NBD_MAX_OPT_LEN) {
				nbd_conn_close(c, "option too long", -ZL_ERR_PROTO);
				return;
			}
			c->want = c->opt.length;
			c->got = 0;
			c->state = NBD_CS_OPT_DATA;
			break;
		case NBD_CS_OPT_DATA:
			if (!nbd_conn_take(c, c->opt_data))
				return;
			nbd_conn_handle_option(c);
			if (c->state == NBD_CS_CLOSED)
				return;
			break;
		case NBD_CS_REQ_HDR:
			if (!c->free_slots) {
				/* All slots busy: stop reading until one is free. */
				c->paused = true;
				return;
			}
			p = nbd_conn_peek(c, ZL_NBD_REQ_LEN);
			if (!p)
				return;
			if (zl_nbd_req_decode(p, &r)) {
				nbd_conn_close(c, "bad request magic", -ZL_ERR_PROTO);
				return;
			}
			c->in_start += ZL_NBD_REQ_LEN;
			nbd_conn_request(c, &r);
			break;
		case NBD_CS_REQ_DATA:
			if (!nbd_conn_take(c, c->cur->data))
				return;
			c->state = NBD_CS_REQ_HDR;
			nbd_slot_start(c->cur);
			c->cur = NULL;
			break;
		case NBD_CS_REQ_DRAIN:
			if (!nbd_conn_take(c, NULL))
				return;
			c->state = NBD_CS_REQ_HDR;
			nbd_slot_reply(c->cur, c->cur->nbd_err);
			c->cur = NULL;
			break;
		case NBD_CS_DRAINING:
		case NBD_CS_CLOSED:
			return;
		}
	}
}

static void nbd_conn_event(void *arg, uint32_t events)
{
	struct nbd_conn *c = arg;

	if (events & (EPOLLHUP | EPOLLERR)) {
		/* The peer can receive nothing more: in-flight replies are moot. */
		nbd_conn_close(c, "connection hung up", 0);
		return;
	}
	if (events & EPOLLOUT) {
		if (nbd_conn_flush(c))
			return;
	}
	if (events & EPOLLIN)
		nbd_conn_input(c);
	else if (c->hs_off == c->hs_len && c->hs_action != ZL_NBD_ACT_CONTINUE)
		nbd_conn_input(c); /* handshake reply flushed: act on it */
	nbd_conn_update_events(c);
}

static void nbd_conn_close(struct nbd_conn *c, const char *why, int err)
{
	struct zl_nbd_server *srv = c->srv;
	struct nbd_slot *s, **pp;

	if (c->state == NBD_CS_CLOSED)
		return;
	if (err)
		ZL_LOG_WARN("nbd", "closing connection peer=%s reason=\"%s\" err=%s", c->peer, why,
			    zl_strerror(err));
	else
		ZL_LOG_INFO("nbd", "closing connection peer=%s reason=\"%s\"", c->peer, why);
	c->state = NBD_CS_CLOSED;
	zl_loop_del(srv->loop, &c->h);
	close(c->fd);
	c->fd = -1;
	zl_loop_defer_cancel(srv->loop, &c->flush_d);
	zl_loop_defer_cancel(srv->loop, &c->resume_d);
	/* Replies that can no longer be sent, payloads no longer coming. */
	while ((s = c->sendq_head)) {
		c->sendq_head = s->next;
		nbd_slot_put(s);
	}
	c->sendq_tail = NULL;
	if (c->cur) {
		s = c->cur;
		c->cur = NULL;
		nbd_slot_put(s);
	}
	/* Slots waiting for the backend to have room. */
	for (pp = &srv->busy_head; *pp;) {
		s = *pp;
		if (s->conn != c) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		nbd_slot_put(s);
	}
	srv->busy_tail = NULL;
	for (s = srv->busy_head; s; s = s->next)
		srv->busy_tail = s;
	nbd_conn_maybe_free(c);
}

/* ---- listener ---- */

/* A connection on fd: from its greeting (handshake) or, for a socket whose
 * client was configured without one (the kernel's nbd driver), straight in
 * the transmission phase. */
static int nbd_conn_create(struct zl_nbd_server *srv, int fd, const char *peer, bool handshake)
{
	struct nbd_conn *c = calloc(1, sizeof(*c));
	uint32_t i;
	int rc;

	if (!c)
		return -ENOMEM;
	c->srv = srv;
	c->fd = fd;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->in = malloc(NBD_IN_BUF);
	c->opt_data = malloc(ZL_NBD_MAX_OPT_LEN);
	c->slots = calloc(srv->max_inflight, sizeof(*c->slots));
	if (!c->in || !c->opt_data || !c->slots) {
		rc = -ENOMEM;
		goto out_free;
	}
	c->n_slots = srv->max_inflight;
	for (i = 0; i < c->n_slots; i++) {
		struct nbd_slot *s = &c->slots[i];

		s->conn = c;
		s->buf = srv->be.ops->buf_alloc(srv->be.ctx, srv->slot_buf);
		if (!s->buf) {
			rc = -ENOMEM;
			goto out_free;
		}
		s->next = c->free_slots;
		c->free_slots = s;
	}
	c->n_free = c->n_slots;
	if (handshake) {
		zl_nbd_greeting_encode(c->hs_out);
		c->hs_len = ZL_NBD_GREETING_LEN;
		c->state = NBD_CS_CLIENT_FLAGS;
	} else {
		c->state = NBD_CS_REQ_HDR;
	}
	rc = zl_loop_add(srv->loop, &c->h, fd, handshake ? EPOLLOUT : EPOLLIN, nbd_conn_event, c);
	if (rc)
		goto out_free;
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	c->linked = true;
	srv->n_conns++;
	srv->stats.conns_accepted++;
	srv->stats.conns_open = srv->n_conns;
	ZL_LOG_INFO("nbd", "connection peer=%s conns=%u", c->peer, srv->n_conns);
	return 0;

out_free:
	c->state = NBD_CS_CLOSED;
	c->fd = -1;
	nbd_conn_free_cb(c);
	return rc;
}

static void nbd_accept_cb(void *arg, uint32_t events)
{
	struct zl_nbd_server *srv = arg;
	struct sockaddr_storage ss;
	char peer[64], host[INET6_ADDRSTRLEN];
	int i, fd, one = 1, rc;

	for (i = 0; i < 64; i++) {
		socklen_t sl = sizeof(ss);

		fd = accept4(srv->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				ZL_LOG_WARN("nbd", "accept failed listen=%s err=%s", srv->addr,
					    strerror(errno));
			return;
		}
		if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			if (ss.ss_family == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host,
					  sizeof(host));
			else
				inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host,
					  sizeof(host));
			snprintf(peer, sizeof(peer), "%s:%u", host,
				 ntohs(ss.ss_family == AF_INET
					   ? ((struct sockaddr_in *)&ss)->sin_port
					   : ((struct sockaddr_in6 *)&ss)->sin6_port));
		} else {
			snprintf(peer, sizeof(peer), "unix#%d", fd);
		}
		if (srv->shutting_down || srv->n_conns >= srv->max_conns) {
			ZL_LOG_WARN("nbd", "refusing connection peer=%s conns=%u max=%u", peer,
				    srv->n_conns, srv->max_conns);
			close(fd);
			continue;
		}
		rc = nbd_conn_create(srv, fd, peer, true);
		if (rc) {
			ZL_LOG_ERR("nbd", "cannot set up connection peer=%s err=%s", peer,
				   zl_strerror(rc));
			close(fd);
		}
	}
}

static int nbd_listen_unix(struct zl_nbd_server *srv, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (!path[0] || strlen(path) >= sizeof(sa.sun_path))
		return -ZL_ERR_INVAL;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		/* A stale socket file is removed; a live server keeps it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	} else if (lstat(path, &st) == 0) {
		close(fd);
		return -EEXIST; /* never remove something that is not a socket */
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 128)) {
		rc = -errno;
		close(fd);
		return rc;
	}
	snprintf(srv->unix_path, sizeof(srv->unix_path), "%s", path);
	snprintf(srv->addr, sizeof(srv->addr), "unix:%s", path);
	srv->lfd = fd;
	return 0;
}

static int nbd_listen_tcp(struct zl_nbd_server *srv, const char *spec)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res, *ai;
	char host[128], port[16], hbuf[INET6_ADDRSTRLEN];
	const char *colon;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	size_t hl;
	int fd = -1, one = 1, rc;

	colon = strrchr(spec, ':');
	if (!colon || !colon[1] || strlen(colon + 1) >= sizeof(port))
		return -ZL_ERR_INVAL;
	hl = (size_t)(colon - spec);
	if (hl >= 2 && spec[0] == '[' && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return -ZL_ERR_INVAL;
	memcpy(host, spec, hl);
	host[hl] = 0;
	strcpy(port, colon + 1);
	rc = getaddrinfo(hl ? host : NULL, port, &hints, &res);
	if (rc)
		return -ZL_ERR_INVAL;
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
			break;
		rc = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return rc;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET6) {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, hbuf,
				  sizeof(hbuf));
			snprintf(srv->addr, sizeof(srv->addr), "[%s]:%u", hbuf,
				 ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
		} else {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, hbuf,
				  sizeof(hbuf));
			snprintf(srv->addr, sizeof(srv->addr), "%s:%u", hbuf,
				 ntohs(((struct sockaddr_in *)&ss)->sin_port));
		}
	}
	srv->lfd = fd;
	return 0;
}

int zl_nbd_server_create(struct zl_loop *loop, const struct zl_nbd_backend *backend,
			 const struct zl_nbd_server_opts *opts, struct zl_nbd_server **out)
{
	struct zl_nbd_server *srv;
	int rc;

	if (!loop || !backend || !backend->ops || !opts)
		return -ZL_ERR_INVAL;
	if (opts->export_name && strlen(opts->export_name) > ZL_NBD_MAX_NAME)
		return -ZL_ERR_INVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->loop = loop;
	srv->be = *backend;
	srv->lfd = -1;
	srv->max_inflight = opts->max_inflight ? opts->max_inflight : NBD_DEF_INFLIGHT;
	srv->slot_buf = opts->slot_buf ? opts->slot_buf : NBD_DEF_SLOT_BUF;
	srv->slot_buf = (uint32_t)ZL_ALIGN_UP(ZL_MIN(srv->slot_buf, ZL_NBD_MAX_IO), 4096);
	srv->max_conns = opts->max_conns ? opts->max_conns : NBD_DEF_CONNS;
	if (opts->export_name)
		snprintf(srv->export_name, sizeof(srv->export_name), "%s", opts->export_name);
	srv->exp.name = srv->export_name;
	srv->exp.size = backend->size;
	srv->exp.tflags = ZL_NBD_TFLAG_HAS_FLAGS | ZL_NBD_TFLAG_SEND_FLUSH | ZL_NBD_TFLAG_SEND_FUA |
			  ZL_NBD_TFLAG_SEND_TRIM | ZL_NBD_TFLAG_SEND_WRITE_ZEROES |
			  ZL_NBD_TFLAG_CAN_MULTI_CONN;
	if (!opts->listen) {
		snprintf(srv->addr, sizeof(srv->addr), "adopted");
		*out = srv;
		return 0;
	}
	if (strncmp(opts->listen, "unix:", 5) == 0)
		rc = nbd_listen_unix(srv, opts->listen + 5);
	else
		rc = nbd_listen_tcp(srv, opts->listen);
	if (rc)
		goto out_free;
	rc = zl_loop_add(loop, &srv->lh, srv->lfd, EPOLLIN, nbd_accept_cb, srv);
	if (rc)
		goto out_close;
	ZL_LOG_INFO("nbd", "listening addr=%s size=%llu slots=%u slot_buf=%u", srv->addr,
		    (unsigned long long)srv->exp.size, srv->max_inflight, srv->slot_buf);
	*out = srv;
	return 0;

out_close:
	close(srv->lfd);
	if (srv->unix_path[0])
		unlink(srv->unix_path);
out_free:
	free(srv);
	return rc;
}

int zl_nbd_server_adopt(struct zl_nbd_server *s, int fd, const char *peer)
{
	int flags;

	if (!s || fd < 0 || s->shutting_down)
		return -ZL_ERR_INVAL;
	if (s->n_conns >= s->max_conns)
		return -ZL_ERR_BUSY;
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	return nbd_conn_create(s, fd, peer ? peer : "adopted", false);
}

uint16_t zl_nbd_server_tflags(const struct zl_nbd_server *s)
{
	return s->exp.tflags;
}

void zl_nbd_server_set_size(struct zl_nbd_server *s, uint64_t size)
{
	ZL_LOG_INFO("nbd", "export size %llu -> %llu", (unsigned long long)s->exp.size,
		    (unsigned long long)size);
	s->exp.size = size;
}

void zl_nbd_server_shutdown(struct zl_nbd_server *s)
{
	if (!s || s->shutting_down)
		return;
	s->shutting_down = true;
	if (s->lfd >= 0) {
		zl_loop_del(s->loop, &s->lh);
		close(s->lfd);
		s->lfd = -1;
		if (s->unix_path[0])
			unlink(s->unix_path);
	}
	/* Closing never unlinks (freeing is deferred), so the walk is safe. */
	for (struct nbd_conn *c = s->conns; c; c = c->next)
		nbd_conn_close(c, "server shutting down", 0);
}

bool zl_nbd_server_idle(const struct zl_nbd_server *s)
{
	return !s || (s->n_conns == 0 && s->inflight == 0);
}

void zl_nbd_server_destroy(struct zl_nbd_server *s)
{
	struct nbd_conn *c;

	if (!s)
		return;
	zl_nbd_server_shutdown(s);
	/* Frees pending on the loop run now; slots still in the backend are
	 * abandoned (see the header). */
	while ((c = s->conns))
		nbd_conn_free_cb(c);
	free(s);
}

const char *zl_nbd_server_address(const struct zl_nbd_server *s)
{
	return s->addr;
}

void zl_nbd_server_get_stats(const struct zl_nbd_server *s, struct zl_nbd_server_stats *out)
{
	*out = s->stats;
}
