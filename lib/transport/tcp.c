/* TCP transport. A frame is the 80-byte wire header followed by payload_len
 * bytes of payload. One nonblocking socket per connection, driven by the
 * loop's epoll (level-triggered).
 *
 * Receive: headers and small payloads are read through a 64 KiB read-ahead
 * buffer; a payload that is not already buffered is read with readv straight
 * into its destination (the request's `in` buffer for replies, the server's
 * fetch buffer for requests) with the read-ahead buffer as the second iovec,
 * so big payloads are never copied in user space.
 *
 * Send: a per-connection FIFO of frames; each frame lives in a preallocated
 * slot (client request slot or server request slot) that also holds its
 * progress, so partial writes need no allocation. EPOLLOUT is armed only while the queue
 * is not empty.
 *
 * Client request slots, req_ids, the in-flight list and timeouts are the
 * common request layer's (xport.c); a struct tcp_req adds the frame being
 * sent. A reply that arrives while its request's frame is still being
 * written is held until the write completes (the caller's out buffer is in
 * use until then). Server request slots, the payload rule and the count of
 * unanswered requests are the common server layer's (xport_sreq.c); a struct
 * tcp_sreq adds the reply frame. A server connection stops reading while no
 * slot is free.
 *
 * TLS (tcp_tls.c, docs/SECURITY.md): the same frames through one SSL per
 * connection. A server connection first peeks at the first byte (a TLS
 * record starts with 0x16; anything else is a plaintext client, refused),
 * then both sides run SSL_do_handshake on the loop, the fd's epoll interest
 * following what OpenSSL wants; client requests queue meanwhile. Once up,
 * SSL_read replaces read/readv (payloads are still read straight into their
 * destination) and SSL_write replaces sendmsg: headers and small frames are
 * gathered into a per-connection 16 KiB staging buffer (one TLS record),
 * large payloads are written from their own memory. Decrypted bytes that
 * epoll cannot see (left after the read budget) are picked up by a
 * deferred read. Nothing is allocated per I/O.
 */
#include "transport_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/ssl.h>

#define TCP_RBUF_SIZE (64u << 10)
#define TCP_IOV_MAX   64
#define TCP_BACKLOG   1024
/* Socket reads per wakeup before yielding to other fds (level-triggered
 * epoll brings us back). */
#define TCP_READ_BUDGET	  32
#define TCP_ACCEPT_BUDGET 64
/* TLS: the largest record's plaintext; smaller pieces are gathered into it. */
#define TCP_TLS_STAGE (16u << 10)
/* The first byte of a TLS record carrying a handshake message. */
#define TCP_TLS_HANDSHAKE_RECORD 0x16

enum tcp_tls_state {
	TCP_TLS_OFF,	   /* plaintext */
	TCP_TLS_PEEK,	   /* server: waiting for the first byte (ClientHello or plaintext) */
	TCP_TLS_HANDSHAKE, /* SSL_do_handshake until it completes */
	TCP_TLS_UP,	   /* frames flow through SSL_read / SSL_write */
};

enum tcp_rx_state {
	TCP_RX_HDR,  /* collecting the next header */
	TCP_RX_DATA, /* payload lands in rx_dst (reply in-buffer or fetch buffer) */
	TCP_RX_SKIP, /* payload is dropped (discarded, or a reply nobody can take) */
};

enum tcp_req_state {
	TCP_REQ_SENDING, /* queued, frame not fully written */
	TCP_REQ_WAIT,	 /* written, waiting for the reply */
	TCP_REQ_REPLIED, /* reply arrived (and is held) while the frame was being written */
};

enum tcp_send_kind { TCP_SEND_REQ, TCP_SEND_REPLY };

struct tcp_send {
	struct tcp_send *next;
	const uint8_t *data;
	uint32_t len;
	uint32_t sent; /* bytes of header + data written so far */
	enum tcp_send_kind kind;
	uint8_t hdr[ZL_WIRE_HDR_SIZE];
};

struct tcp_req {
	struct xport_req base;
	struct tcp_send send;
	struct tcp_req *done_next; /* held replies whose frame went out */
	enum tcp_req_state state;
};

/* Server request slot: the common slot plus its reply frame. */
struct tcp_sreq {
	struct xport_sreq base;
	struct tcp_send send;
};

struct tcp_conn {
	struct zl_xport_conn base;
	struct zl_loop *loop;
	int fd;
	struct zl_loop_handle h;
	bool in_loop;
	/* Client: connect() in progress (zl_xport_connect_start); frames
	 * queue, hs_t is the connect's deadline. */
	bool connecting;
	bool rx_paused;		/* server: no request slot is free */
	/* The last read returned less than it asked for: the socket was empty,
	 * and level-triggered epoll calls again when bytes arrive (saves the
	 * read that would only say EAGAIN). Reset by each tcp_rx. */
	bool rx_drained;
	struct zl_defer work_d; /* deferred completions, rx resume */

	/* receive */
	uint8_t *rbuf;
	uint32_t rpos, rlen; /* unread bytes are rbuf[rpos..rlen) */
	enum tcp_rx_state rx;
	struct zl_wire_hdr rhdr;
	uint8_t *rx_dst;
	uint32_t rx_len, rx_done;
	struct tcp_req *rx_req;	  /* client: request whose reply payload arrives */
	struct tcp_sreq *rx_sreq; /* server: request whose payload arrives */
	int rx_skip_status;

	/* send */
	struct tcp_send *sq_head, *sq_tail;
	/* Frames queued during one loop iteration go out in one sendmsg at its
	 * end (a software cork): fewer syscalls and segments under load, no
	 * added latency when idle. */
	struct zl_defer flush_d;

	/* client */
	struct tcp_req *req_done; /* held replies whose send completed */

	/* TLS: ssl NULL and tls TCP_TLS_OFF for plaintext. The *_want are the
	 * epoll events OpenSSL waits for: during the handshake, for a read
	 * that must write first, for a write that must read first. */
	SSL *ssl;
	enum tcp_tls_state tls;
	uint32_t hs_want, rd_want, wr_want;
	uint8_t *tx_stage;   /* TCP_TLS_STAGE bytes */
	struct zl_defer rx_d; /* decrypted bytes left after the read budget */
	/* The handshake must be done within the transport's timeout_ms: a peer
	 * that connects and stalls does not hold the connection forever.
	 * While connecting: the connect's deadline. */
	struct zl_timer hs_t;
};

struct tcp_listener {
	struct zl_xport_listener base;
	int fd;
	struct zl_loop_handle h;
};

static struct tcp_conn *tcp_conn_of(struct zl_xport_conn *c)
{
	return ZL_CONTAINER_OF(c, struct tcp_conn, base);
}

static struct tcp_req *tcp_req_of(struct xport_req *r)
{
	return ZL_CONTAINER_OF(r, struct tcp_req, base);
}

static struct tcp_sreq *tcp_sreq_of(struct xport_sreq *s)
{
	return ZL_CONTAINER_OF(s, struct tcp_sreq, base);
}

static void tcp_conn_close(struct zl_xport_conn *bc, int reason);
static void tcp_rx(struct tcp_conn *c);
static void tcp_rx_deferred(void *arg);
static void tcp_work(void *arg);
static void tcp_connect_step(struct tcp_conn *c);

/* ---- helpers ---- */

static bool tcp_warn_ok(struct tcp_conn *c)
{
	return xport_warn_ok(c->base.x);
}

static void tcp_set_events(struct tcp_conn *c)
{
	uint32_t ev = (c->rx_paused ? 0 : EPOLLIN) | (c->sq_head ? EPOLLOUT : 0);
	int rc;

	if (c->base.closing || !c->in_loop)
		return;
	if (c->connecting) {
		ev = EPOLLOUT;
	} else if (c->tls == TCP_TLS_PEEK) {
		ev = EPOLLIN;
	} else if (c->tls == TCP_TLS_HANDSHAKE) {
		ev = c->hs_want;
	} else if (c->tls == TCP_TLS_UP) {
		/* A write that waits for a read must not spin on EPOLLOUT. */
		ev = (c->rx_paused ? 0 : EPOLLIN) | c->rd_want;
		if (c->sq_head)
			ev |= c->wr_want ? c->wr_want : EPOLLOUT;
	}
	rc = zl_loop_mod(c->loop, &c->h, ev);
	if (rc) {
		if (tcp_warn_ok(c))
			ZL_LOG_WARN("xport", "epoll_ctl failed peer=%s err=%s; closing connection",
				    c->base.peer, zl_strerror(rc));
		tcp_conn_close(&c->base, -ZL_ERR_CONN);
	}
}

static void tcp_proto_fail(struct tcp_conn *c, const char *why)
{
	if (tcp_warn_ok(c))
		ZL_LOG_WARN("xport",
			    "invalid frame peer=%s side=%s reason=\"%s\"; closing connection",
			    c->base.peer, c->base.server ? "server" : "client", why);
	tcp_conn_close(&c->base, -ZL_ERR_PROTO);
}

/* ---- request and reply slots ---- */

/* A reply (or a transport error for this request) arrived. */
static void tcp_req_replied(struct tcp_conn *c, struct tcp_req *r, int status,
			    const struct zl_wire_hdr *rep)
{
	if (r->state == TCP_REQ_SENDING) {
		/* The out buffer is still being written: hold the reply. */
		r->state = TCP_REQ_REPLIED;
		xport_req_hold(&r->base, status, rep);
		return;
	}
	xport_req_finish(&c->base, &r->base, status, rep);
}

/* Server layer hook: a request slot is free again. */
static void tcp_sreq_freed(struct zl_xport_conn *bc)
{
	struct tcp_conn *c = tcp_conn_of(bc);

	if (c->rx_paused && !bc->closing)
		zl_loop_defer(c->loop, &c->work_d, tcp_work, c);
}

/* ---- send path ---- */

static void tcp_send_done(struct tcp_conn *c, struct tcp_send *s)
{
	if (s->kind == TCP_SEND_REQ) {
		struct tcp_req *r = ZL_CONTAINER_OF(s, struct tcp_req, send);

		if (r->state == TCP_REQ_SENDING) {
			r->state = TCP_REQ_WAIT;
		} else if (r->state == TCP_REQ_REPLIED) {
			r->done_next = c->req_done;
			c->req_done = r;
			zl_loop_defer(c->loop, &c->work_d, tcp_work, c);
		}
		return;
	}
	/* Inside a flush: the sent callback runs deferred. */
	xport_sreq_reply_done_later(&c->base, &ZL_CONTAINER_OF(s, struct tcp_sreq, send)->base);
}

static void tcp_send_advance(struct tcp_conn *c, size_t w)
{
	while (w > 0) {
		struct tcp_send *s = c->sq_head;
		size_t rem = ZL_WIRE_HDR_SIZE + (size_t)s->len - s->sent;

		if (w < rem) {
			s->sent += (uint32_t)w;
			return;
		}
		w -= rem;
		s->sent += (uint32_t)rem;
		c->sq_head = s->next;
		if (!c->sq_head)
			c->sq_tail = NULL;
		s->next = NULL;
		tcp_send_done(c, s);
	}
}

/* TLS: copies the queue from its head into the staging buffer, up to one
 * record. The same queue gives the same first bytes, which is what a retry
 * of SSL_write after "would block" needs. Returns the bytes staged. */
static size_t tcp_tls_stage(struct tcp_conn *c)
{
	size_t n = 0;

	for (struct tcp_send *s = c->sq_head; s && n < TCP_TLS_STAGE; s = s->next) {
		uint32_t sent = s->sent;
		size_t take;

		if (sent < ZL_WIRE_HDR_SIZE) {
			take = ZL_MIN((size_t)(ZL_WIRE_HDR_SIZE - sent), TCP_TLS_STAGE - n);
			memcpy(c->tx_stage + n, s->hdr + sent, take);
			n += take;
			sent += (uint32_t)take;
			if (sent < ZL_WIRE_HDR_SIZE)
				break;
		}
		take = ZL_MIN((size_t)(s->len - (sent - ZL_WIRE_HDR_SIZE)), TCP_TLS_STAGE - n);
		if (take) {
			memcpy(c->tx_stage + n, s->data + (sent - ZL_WIRE_HDR_SIZE), take);
			n += take;
		}
	}
	return n;
}

/* tcp_flush over TLS: nothing goes out before the handshake is done. */
static void tcp_tls_flush(struct tcp_conn *c)
{
	char why[160] = "";

	c->wr_want = 0;
	while (c->tls == TCP_TLS_UP && c->sq_head && !c->base.closing) {
		struct tcp_send *s = c->sq_head;
		uint32_t want = 0;
		const uint8_t *p;
		size_t len;
		ssize_t w;

		if (s->sent >= ZL_WIRE_HDR_SIZE &&
		    s->len - (s->sent - ZL_WIRE_HDR_SIZE) >= TCP_TLS_STAGE) {
			/* A large payload: encrypted from its own memory. */
			p = s->data + (s->sent - ZL_WIRE_HDR_SIZE);
			len = s->len - (s->sent - ZL_WIRE_HDR_SIZE);
		} else {
			len = tcp_tls_stage(c);
			p = c->tx_stage;
		}
		w = xport_tls_write(c->ssl, p, len, &want, why, sizeof(why));
		if (w > 0) {
			tcp_send_advance(c, (size_t)w);
			continue;
		}
		if (w == 0) {
			c->wr_want = want == EPOLLIN ? EPOLLIN : 0;
			break;
		}
		if (tcp_warn_ok(c))
			ZL_LOG_WARN("xport", "TLS send failed peer=%s reason=\"%s\"; closing connection",
				    c->base.peer, why);
		tcp_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	tcp_set_events(c);
}

/* Writes as much of the queue as the socket takes. Never runs user callbacks
 * (completions are deferred), so it is safe inside request/reply. */
static void tcp_flush(struct tcp_conn *c)
{
	if (c->connecting)
		return; /* the frames go out once connected */
	if (c->tls != TCP_TLS_OFF) {
		tcp_tls_flush(c);
		return;
	}
	while (c->sq_head && !c->base.closing) {
		struct iovec iov[TCP_IOV_MAX];
		struct msghdr msg = {.msg_iov = iov};
		int n = 0;
		ssize_t w;

		for (struct tcp_send *s = c->sq_head; s && n <= TCP_IOV_MAX - 2; s = s->next) {
			if (s->sent < ZL_WIRE_HDR_SIZE) {
				iov[n].iov_base = s->hdr + s->sent;
				iov[n++].iov_len = ZL_WIRE_HDR_SIZE - s->sent;
			}
			if (s->len) {
				uint32_t off =
				    s->sent > ZL_WIRE_HDR_SIZE ? s->sent - ZL_WIRE_HDR_SIZE : 0;

				iov[n].iov_base = (void *)(s->data + off);
				iov[n++].iov_len = s->len - off;
			}
		}
		msg.msg_iovlen = (size_t)n;
		w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (tcp_warn_ok(c))
				ZL_LOG_WARN("xport",
					    "send failed peer=%s err=%s; closing connection",
					    c->base.peer, zl_strerror(-errno));
			tcp_conn_close(&c->base, -ZL_ERR_CONN);
			return;
		}
		tcp_send_advance(c, (size_t)w);
	}
	tcp_set_events(c);
}

static void tcp_flush_deferred(void *arg)
{
	struct tcp_conn *c = arg;

	tcp_flush(c);
}

static void tcp_send_queue(struct tcp_conn *c, struct tcp_send *s)
{
	bool was_empty = !c->sq_head;

	s->next = NULL;
	s->sent = 0;
	if (c->sq_tail)
		c->sq_tail->next = s;
	else
		c->sq_head = s;
	c->sq_tail = s;
	/* Only an empty queue needs a flush; otherwise one is pending already
	 * (deferred or EPOLLOUT), which keeps the order. */
	if (was_empty)
		zl_loop_defer(c->loop, &c->flush_d, tcp_flush_deferred, c);
}

/* ---- receive path ---- */

/* tcp_read over TLS: one SSL_read (at most one record), into the payload's
 * destination while one is being received (rbuf is empty then), else into
 * the read-ahead buffer. */
static ssize_t tcp_tls_read(struct tcp_conn *c)
{
	uint32_t want = 0;
	char why[160] = "";
	ssize_t n;

	c->rd_want = 0;
	if (c->rx == TCP_RX_DATA) {
		n = xport_tls_read(c->ssl, c->rx_dst + c->rx_done, c->rx_len - c->rx_done, &want,
				   why, sizeof(why));
		if (n > 0)
			c->rx_done += (uint32_t)n;
	} else {
		n = xport_tls_read(c->ssl, c->rbuf + c->rlen, TCP_RBUF_SIZE - c->rlen, &want, why,
				   sizeof(why));
		if (n > 0)
			c->rlen += (uint32_t)n;
	}
	if (n > 0)
		return n;
	if (n == 0) {
		if (want == EPOLLOUT) {
			c->rd_want = EPOLLOUT;
			tcp_set_events(c);
		}
		return 0;
	}
	if (n == -1) {
		ZL_LOG_DEBUG("xport", "peer closed the connection peer=%s", c->base.peer);
	} else if (tcp_warn_ok(c)) {
		ZL_LOG_WARN("xport", "TLS receive failed peer=%s reason=\"%s\"; closing connection",
			    c->base.peer, why);
	}
	tcp_conn_close(&c->base, -ZL_ERR_CONN);
	return -1;
}

/* Reads once from the socket. Returns >0 bytes, 0 on EAGAIN, -1 when the
 * connection was closed. */
static ssize_t tcp_read(struct tcp_conn *c)
{
	ssize_t n;

	if (c->rpos == c->rlen) {
		c->rpos = c->rlen = 0;
	} else if (c->rpos && c->rx == TCP_RX_HDR) {
		memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
	if (c->ssl)
		return tcp_tls_read(c);
	for (;;) {
		if (c->rx == TCP_RX_DATA) {
			/* rbuf is empty here: the payload goes straight to its
			 * destination, the read-ahead catches the next header. */
			struct iovec iov[2] = {
			    {c->rx_dst + c->rx_done, c->rx_len - c->rx_done},
			    {c->rbuf, TCP_RBUF_SIZE},
			};

			n = readv(c->fd, iov, 2);
			c->rx_drained = n >= 0 && (size_t)n < iov[0].iov_len + iov[1].iov_len;
			if (n > 0) {
				size_t take = ZL_MIN((size_t)n, (size_t)(c->rx_len - c->rx_done));

				c->rx_done += (uint32_t)take;
				c->rlen = (uint32_t)((size_t)n - take);
			}
		} else {
			n = read(c->fd, c->rbuf + c->rlen, TCP_RBUF_SIZE - c->rlen);
			c->rx_drained = n >= 0 && (size_t)n < TCP_RBUF_SIZE - c->rlen;
			if (n > 0)
				c->rlen += (uint32_t)n;
		}
		if (n > 0)
			return n;
		if (n == 0) {
			ZL_LOG_DEBUG("xport", "peer closed the connection peer=%s", c->base.peer);
			tcp_conn_close(&c->base, -ZL_ERR_CONN);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (tcp_warn_ok(c))
			ZL_LOG_WARN("xport", "receive failed peer=%s err=%s; closing connection",
				    c->base.peer, zl_strerror(-errno));
		tcp_conn_close(&c->base, -ZL_ERR_CONN);
		return -1;
	}
}

static void tcp_rx_start_payload(struct tcp_conn *c, enum tcp_rx_state st, void *dst)
{
	c->rx = st;
	c->rx_dst = dst;
	c->rx_len = c->rhdr.payload_len;
	c->rx_done = 0;
}

/* Client: a reply header arrived. */
static void tcp_rx_reply(struct tcp_conn *c)
{
	const struct zl_wire_hdr *h = &c->rhdr;
	struct xport_req *br;
	struct tcp_req *r;
	const char *why;

	if (!(h->flags & ZL_WF_REPLY)) {
		tcp_proto_fail(c, "request on a client connection");
		return;
	}
	if (h->flags & ZL_WF_RDMA) {
		tcp_proto_fail(c, "RDMA descriptor on a TCP connection");
		return;
	}
	br = xport_req_lookup(&c->base, h, &why);
	if (!br) {
		tcp_proto_fail(c, why);
		return;
	}
	r = tcp_req_of(br);
	if (r->state == TCP_REQ_REPLIED) {
		tcp_proto_fail(c, "duplicate reply");
		return;
	}
	if (!h->payload_len) {
		tcp_req_replied(c, r, 0, h);
		return;
	}
	c->rx_req = r;
	if (!r->base.in || h->payload_len > r->base.in_cap) {
		if (tcp_warn_ok(c))
			ZL_LOG_WARN("xport",
				    "reply payload does not fit peer=%s op=%s payload_len=%u "
				    "in_cap=%u; failing the request",
				    c->base.peer, zl_wire_op_name(h->opcode), h->payload_len,
				    r->base.in_cap);
		c->rx_skip_status = -ZL_ERR_PROTO;
		tcp_rx_start_payload(c, TCP_RX_SKIP, NULL);
		return;
	}
	tcp_rx_start_payload(c, TCP_RX_DATA, r->base.in);
}

/* Server: a request header arrived. */
static void tcp_rx_request(struct tcp_conn *c)
{
	const struct zl_wire_hdr *h = &c->rhdr;
	struct xport_sreq *s;
	const char *why = "?";

	if (h->flags & ZL_WF_REPLY) {
		tcp_proto_fail(c, "reply on a server connection");
		return;
	}
	if (h->flags & ZL_WF_RDMA) {
		tcp_proto_fail(c, "RDMA descriptor on a TCP connection");
		return;
	}
	s = xport_sreq_start(&c->base, h, &why);
	if (!s) {
		tcp_proto_fail(c, why);
		return;
	}
	/* A discarded payload starts being skipped in here (tcp_discard). */
	xport_sreq_deliver(&c->base, s, h);
	if (!c->base.closing && s->pl_state == XPORT_PL_FETCH) {
		c->rx_sreq = tcp_sreq_of(s);
		tcp_rx_start_payload(c, TCP_RX_DATA, s->fetch_buf);
	}
}

/* The whole payload is in (or skipped). */
static void tcp_rx_payload_done(struct tcp_conn *c)
{
	int status = 0;

	c->rx = TCP_RX_HDR;
	if (c->rx_dst && !(c->base.server
				 ? xport_sreq_crc_ok(&c->rx_sreq->base, c->rx_dst, c->rx_len,
						     c->rhdr.payload_crc)
				 : zl_crc32c(c->rx_dst, c->rx_len) == c->rhdr.payload_crc)) {
		status = -ZL_ERR_CORRUPT;
		if (tcp_warn_ok(c))
			ZL_LOG_WARN("xport",
				    "payload CRC mismatch peer=%s op=%s len=%u req_id=%llu",
				    c->base.peer, zl_wire_op_name(c->rhdr.opcode), c->rx_len,
				    (unsigned long long)c->rhdr.req_id);
	}
	if (c->base.server) {
		struct tcp_sreq *s = c->rx_sreq;

		c->rx_sreq = NULL;
		xport_sreq_payload_done(&c->base, &s->base, status);
		return;
	}
	struct tcp_req *r = c->rx_req;

	c->rx_req = NULL;
	if (!c->rx_dst)
		status = c->rx_skip_status;
	tcp_req_replied(c, r, status, status ? NULL : &c->rhdr);
}

/* Consumes buffered bytes and reads from the socket until it would block,
 * the read budget is spent, the server must pause, or the connection closed.
 * The caller holds a reference. */
static void tcp_rx(struct tcp_conn *c)
{
	int budget = TCP_READ_BUDGET;

	c->rx_drained = false;
	for (;;) {
		uint32_t avail;

		if (c->base.closing || c->rx_paused)
			return;
		avail = c->rlen - c->rpos;
		if (c->rx == TCP_RX_HDR) {
			if (c->base.server && !xport_sreq_available(&c->base)) {
				/* Back-pressure: every request slot is in use. */
				c->rx_paused = true;
				tcp_set_events(c);
				return;
			}
			if (avail >= ZL_WIRE_HDR_SIZE) {
				const char *why = "?";

				if (zl_wire_decode(c->rbuf + c->rpos, ZL_WIRE_HDR_SIZE, &c->rhdr,
						   &why)) {
					tcp_proto_fail(c, why);
					return;
				}
				c->rpos += ZL_WIRE_HDR_SIZE;
				if (c->base.server) {
					tcp_rx_request(c);
					continue;
				}
				tcp_rx_reply(c);
				if (c->rx == TCP_RX_HDR || c->base.closing)
					continue;
				/* A reply's payload read with its header: taken
				 * below in this same pass. */
				avail = c->rlen - c->rpos;
			}
		}
		if (c->rx != TCP_RX_HDR) {
			uint32_t take = ZL_MIN(avail, c->rx_len - c->rx_done);

			if (take && c->rx == TCP_RX_DATA)
				memcpy(c->rx_dst + c->rx_done, c->rbuf + c->rpos, take);
			c->rpos += take;
			c->rx_done += take;
			if (c->rx_done == c->rx_len) {
				tcp_rx_payload_done(c);
				continue;
			}
		}
		if (budget-- == 0) {
			/* Level-triggered epoll brings us back for socket
			 * bytes, not for what OpenSSL has decrypted already. */
			if (c->ssl && xport_tls_pending(c->ssl))
				zl_loop_defer(c->loop, &c->rx_d, tcp_rx_deferred, c);
			return;
		}
		if (c->rx_drained && !c->ssl)
			return;
		if (tcp_read(c) <= 0)
			return;
	}
}

static void tcp_rx_deferred(void *arg)
{
	struct tcp_conn *c = arg;

	zl_xport_conn_get(&c->base);
	tcp_rx(c);
	zl_xport_conn_put(&c->base);
}

/* Server TLS connection: refuses a client whose first byte is not a TLS
 * handshake record. Returns true when the handshake may start. */
static bool tcp_tls_peek(struct tcp_conn *c)
{
	uint8_t b;
	ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return false;
	if (n <= 0) {
		ZL_LOG_DEBUG("xport", "peer closed before the TLS handshake peer=%s", c->base.peer);
		tcp_conn_close(&c->base, -ZL_ERR_CONN);
		return false;
	}
	if (b != TCP_TLS_HANDSHAKE_RECORD) {
		if (xport_tls_plain_log_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "refused a plaintext connection peer=%s first_byte=0x%02x: this "
				    "node serves TLS only (its node record says \"tls\":true); the "
				    "client must connect with TLS (zl/zipline-node with --tls-ca "
				    "FILE or ZIPLINE_TLS_CA)",
				    c->base.peer, b);
		tcp_conn_close(&c->base, -ZL_ERR_PROTO);
		return false;
	}
	c->tls = TCP_TLS_HANDSHAKE;
	return true;
}

/* Drives the TLS handshake one step (the caller holds a reference). */
static void tcp_tls_step(struct tcp_conn *c)
{
	uint32_t want = 0;
	char why[200] = "";
	int rc;

	if (c->tls == TCP_TLS_PEEK && !tcp_tls_peek(c))
		return;
	rc = xport_tls_handshake(c->ssl, &want, why, sizeof(why));
	if (rc == 0) {
		c->hs_want = want;
		tcp_set_events(c);
		return;
	}
	if (rc < 0) {
		bool log = xport_tls_hs_log_ok(c->base.x);
		char msg[384];

		if (log && c->base.server)
			ZL_LOG_WARN("xport",
				    "TLS handshake failed peer=%s side=server reason=\"%s\"; closing "
				    "connection",
				    c->base.peer, why);
		if (!c->base.server) {
			snprintf(msg, sizeof(msg), "TLS handshake with %s failed: %s; %s", c->base.peer,
				 why,
				 strstr(why, "certificate")
				     ? "is --tls-ca (ZIPLINE_TLS_CA) the cluster's CA?"
				     : "does that node serve TLS (its node record says so)?");
			xport_tls_note(msg);
			if (log)
				ZL_LOG_ERR("xport", "%s", msg);
		}
		tcp_conn_close(&c->base, -ZL_ERR_TLS);
		return;
	}
	c->tls = TCP_TLS_UP;
	c->hs_want = 0;
	zl_timer_stop(c->loop, &c->hs_t);
	xport_tls_established(c->base.x, c->ssl, c->base.peer);
	tcp_flush(c); /* requests queued during the handshake; sets the events */
	if (!c->base.closing)
		tcp_rx(c); /* application data that came with the last flight */
}

static void tcp_conn_io(void *arg, uint32_t events)
{
	struct tcp_conn *c = arg;

	zl_xport_conn_get(&c->base);
	if (c->connecting) {
		tcp_connect_step(c);
		zl_xport_conn_put(&c->base);
		return;
	}
	if (c->tls == TCP_TLS_PEEK || c->tls == TCP_TLS_HANDSHAKE) {
		tcp_tls_step(c);
		zl_xport_conn_put(&c->base);
		return;
	}
	if ((events & EPOLLOUT) || (events & c->wr_want))
		tcp_flush(c);
	if (!c->base.closing && (events & (EPOLLIN | EPOLLERR | EPOLLHUP | c->rd_want))) {
		if (!c->rx_paused)
			tcp_rx(c);
		else if (events & (EPOLLERR | EPOLLHUP))
			tcp_conn_close(&c->base, -ZL_ERR_CONN);
	}
	zl_xport_conn_put(&c->base);
}

/* Deferred work: completions that must not run inside request, and resuming
 * a server connection that paused for request slots. */
static void tcp_work(void *arg)
{
	struct tcp_conn *c = arg;

	if (c->base.closing)
		return; /* the close work takes over */
	zl_xport_conn_get(&c->base);
	while (c->req_done && !c->base.closing) {
		struct tcp_req *r = c->req_done;

		c->req_done = r->done_next;
		xport_req_finish_held(&c->base, &r->base);
	}
	if (!c->base.closing && c->rx_paused && xport_sreq_available(&c->base)) {
		c->rx_paused = false;
		tcp_set_events(c);
		tcp_rx(c);
	}
	zl_xport_conn_put(&c->base);
}

/* ---- connection life cycle ---- */

static int tcp_conn_new(struct zl_xport *x, int fd, bool server, struct tcp_conn **out)
{
	uint32_t n = x->opts.max_inflight;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct tcp_conn *c;
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return -errno;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	xport_conn_init(x, &c->base, server);
	c->loop = x->loop;
	c->fd = fd;
	c->h.fd = -1;
	c->rbuf = malloc(TCP_RBUF_SIZE);
	if (!c->rbuf)
		goto out_free;
	if (server) {
		if (xport_sreqs_init(&c->base, n, sizeof(struct tcp_sreq),
				     offsetof(struct tcp_sreq, base)))
			goto out_free;
		for (uint32_t i = 0; i < n; i++)
			tcp_sreq_of(xport_sreq_at(&c->base, i))->send.kind = TCP_SEND_REPLY;
	} else {
		if (xport_reqs_init(&c->base, n, sizeof(struct tcp_req),
				    offsetof(struct tcp_req, base)))
			goto out_free;
		for (uint32_t i = 0; i < n; i++)
			tcp_req_of(xport_req_at(&c->base, i))->send.kind = TCP_SEND_REQ;
	}
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		xport_format_peer((struct sockaddr *)&ss, c->base.peer, sizeof(c->base.peer));
	*out = c;
	return 0;

out_free:
	xport_conn_fini(&c->base);
	free(c->rbuf);
	free(c);
	return -ENOMEM;
}

/* Puts a new connection on TLS: a server peeks first, a client verifies
 * host (or the transport's tls_server_name). 0 or -ENOMEM. */
static int tcp_conn_tls(struct tcp_conn *c, bool server, const char *host)
{
	c->tx_stage = malloc(TCP_TLS_STAGE);
	if (!c->tx_stage)
		return -ENOMEM;
	if (xport_tls_new(c->base.x, c->fd, server, host, &c->ssl))
		return -ENOMEM;
	c->tls = server ? TCP_TLS_PEEK : TCP_TLS_HANDSHAKE;
	/* The client speaks first: its ClientHello waits for a writable socket. */
	c->hs_want = server ? EPOLLIN : EPOLLOUT;
	return 0;
}

static void tcp_tls_hs_expired(void *arg)
{
	struct tcp_conn *c = arg;

	if (c->base.closing || c->tls == TCP_TLS_UP)
		return;
	if (xport_tls_hs_log_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "TLS handshake not done within %u ms peer=%s side=%s; closing "
			    "connection",
			    c->base.x->opts.timeout_ms, c->base.peer,
			    c->base.server ? "server" : "client");
	zl_xport_conn_get(&c->base);
	tcp_conn_close(&c->base, -ZL_ERR_TIMEOUT);
	zl_xport_conn_put(&c->base);
}

/* The connect of zl_xport_connect_start did not complete in time. */
static void tcp_connect_expired(void *arg)
{
	struct tcp_conn *c = arg;

	if (c->base.closing || !c->connecting)
		return;
	ZL_LOG_DEBUG("xport", "connect not done in time peer=%s", c->base.peer);
	zl_xport_conn_get(&c->base);
	tcp_conn_close(&c->base, -ZL_ERR_TIMEOUT);
	zl_xport_conn_put(&c->base);
}

/* Links a new connection into the transport and the loop (connect_ms: the
 * deadline of a connect still in progress). */
static int tcp_conn_start(struct tcp_conn *c, int connect_ms)
{
	uint32_t ev = c->tls == TCP_TLS_HANDSHAKE ? c->hs_want : EPOLLIN;
	int rc;

	if (c->connecting)
		ev = EPOLLOUT;
	rc = zl_loop_add(c->loop, &c->h, c->fd, ev, tcp_conn_io, c);
	if (rc)
		return rc;
	if (c->connecting)
		zl_timer_start(c->loop, &c->hs_t, (uint64_t)connect_ms, 0, tcp_connect_expired, c);
	else if (c->tls != TCP_TLS_OFF)
		zl_timer_start(c->loop, &c->hs_t, c->base.x->opts.timeout_ms, 0,
			       tcp_tls_hs_expired, c);
	c->in_loop = true;
	c->base.tls = c->tls != TCP_TLS_OFF;
	xport_conn_link(&c->base);
	return 0;
}

static void tcp_close_work(struct zl_xport_conn *bc)
{
	struct tcp_conn *c = tcp_conn_of(bc);

	/* Early replies whose frame did go out: they are real answers. */
	while (c->req_done) {
		struct tcp_req *r = c->req_done;

		c->req_done = r->done_next;
		xport_req_finish_held(&c->base, &r->base);
	}
	/* Frames that never made it out: the server layer fails their
	 * replies (and a fetch still reading) after this. */
	while (c->sq_head) {
		struct tcp_send *s = c->sq_head;

		c->sq_head = s->next;
		s->next = NULL;
	}
	c->sq_tail = NULL;
	c->rx_req = NULL;
	c->rx_sreq = NULL;
}

static void tcp_conn_close(struct zl_xport_conn *bc, int reason)
{
	struct tcp_conn *c = tcp_conn_of(bc);

	if (bc->closing)
		return;
	/* Frames still corked in this iteration (e.g. the replies to requests
	 * that preceded a bad frame) go out first, best effort. */
	if (c->sq_head && c->fd >= 0 && reason != -ZL_ERR_CONN) {
		zl_loop_defer_cancel(c->loop, &c->flush_d);
		tcp_flush(c);
		if (bc->closing)
			return;
	}
	xport_conn_closing(bc, reason);
	if (c->in_loop) {
		zl_loop_del(c->loop, &c->h);
		c->in_loop = false;
	}
	/* close_notify only for a local close of a healthy connection. */
	xport_tls_free(c->ssl, reason == 0 && c->tls == TCP_TLS_UP);
	c->ssl = NULL;
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
	zl_loop_defer_cancel(c->loop, &c->work_d);
	zl_loop_defer_cancel(c->loop, &c->flush_d);
	zl_loop_defer_cancel(c->loop, &c->rx_d);
	zl_timer_stop(c->loop, &c->hs_t);
}

static void tcp_conn_free(struct zl_xport_conn *bc)
{
	struct tcp_conn *c = tcp_conn_of(bc);

	/* Only reachable after the close work dropped the transport's ref. */
	zl_timer_stop(c->loop, &c->hs_t);
	xport_tls_free(c->ssl, false);
	if (c->fd >= 0)
		close(c->fd);
	xport_conn_fini(bc);
	free(c->rbuf);
	free(c->tx_stage);
	free(c);
}

/* ---- client ---- */

/* Starts a nonblocking connect to ai: 0 (connected), -EINPROGRESS (the fd
 * becomes writable when done) or another error (no fd). */
static int tcp_sock_connect(const struct addrinfo *ai, int *out_fd)
{
	int fd, rc;

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
	if (rc && rc != -EINPROGRESS) {
		close(fd);
		return rc;
	}
	*out_fd = fd;
	return rc;
}

/* The outcome of a connect that was in progress: 0 or -errno. */
static int tcp_sock_error(int fd)
{
	int err = 0;
	socklen_t el = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		return -errno;
	return -err;
}

static int tcp_connect_one(const struct addrinfo *ai, uint64_t deadline_ms, int *out_fd)
{
	int fd, rc;

	rc = tcp_sock_connect(ai, &fd);
	if (rc != -EINPROGRESS) {
		if (!rc)
			*out_fd = fd;
		return rc;
	}
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		uint64_t now = zl_now_ms();
		int n;

		if (now >= deadline_ms) {
			rc = -ETIMEDOUT;
			goto out_close;
		}
		n = poll(&pfd, 1, (int)ZL_MIN(deadline_ms - now, (uint64_t)INT32_MAX));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out_close;
		}
		if (n > 0)
			break;
	}
	rc = tcp_sock_error(fd);
	if (rc)
		goto out_close;
	*out_fd = fd;
	return 0;

out_close:
	close(fd);
	return rc;
}

/* Builds and links the client connection of fd (connecting: its connect is
 * still in progress, to be done within timeout_ms); fd is the
 * connection's, or closed on failure. */
static int tcp_client_new(struct zl_xport *x, int fd, const struct sockaddr *sa, bool connecting,
			  bool tls, const char *host, int timeout_ms, struct zl_xport_conn **out)
{
	struct tcp_conn *c;
	int rc;

	rc = tcp_conn_new(x, fd, false, &c);
	if (rc) {
		close(fd);
		return rc;
	}
	c->connecting = connecting;
	if (!c->base.peer[0])
		xport_format_peer(sa, c->base.peer, sizeof(c->base.peer));
	if (tls) {
		rc = tcp_conn_tls(c, false, host);
		if (rc)
			goto out_conn;
	}
	rc = tcp_conn_start(c, timeout_ms);
	if (rc)
		goto out_conn;
	ZL_LOG_DEBUG("xport", "%s peer=%s tls=%s", connecting ? "connecting" : "connected",
		     c->base.peer, tls ? "yes" : "no");
	*out = &c->base;
	return 0;

out_conn:
	tcp_conn_free(&c->base); /* closes fd */
	return rc;
}

/* Connects to the first address of host that takes the connect; nowait:
 * returns while the connect is still in progress. */
static int tcp_connect_as(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			  bool tls, bool nowait, struct zl_xport_conn **out)
{
	uint64_t deadline_ms = zl_now_ms() + (uint64_t)timeout_ms;
	struct addrinfo *res, *ai;
	int fd = -1, rc;

	rc = xport_resolve(host, port, false, &res);
	if (rc)
		return rc;
	rc = -EHOSTUNREACH;
	for (ai = res; ai; ai = ai->ai_next) {
		rc = nowait ? tcp_sock_connect(ai, &fd) : tcp_connect_one(ai, deadline_ms, &fd);
		if (!rc || rc == -ETIMEDOUT || rc == -EINPROGRESS)
			break;
	}
	if (rc && rc != -EINPROGRESS) {
		freeaddrinfo(res);
		ZL_LOG_DEBUG("xport", "connect failed host=%s port=%u err=%s", host, port,
			     zl_errname(rc));
		return rc;
	}
	rc = tcp_client_new(x, fd, ai->ai_addr, rc == -EINPROGRESS, tls, host, timeout_ms, out);
	freeaddrinfo(res);
	return rc;
}

/* The connect of a connecting connection finished (its fd is writable):
 * frames queued meanwhile go out, or the TLS handshake starts. */
static void tcp_connect_step(struct tcp_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int rc = tcp_sock_error(c->fd);

	if (rc) {
		ZL_LOG_DEBUG("xport", "connect failed peer=%s err=%s", c->base.peer,
			     zl_errname(rc));
		tcp_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	c->connecting = false;
	zl_timer_stop(c->loop, &c->hs_t);
	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
		xport_format_peer((struct sockaddr *)&ss, c->base.peer, sizeof(c->base.peer));
	ZL_LOG_DEBUG("xport", "connected peer=%s tls=%s", c->base.peer,
		     c->tls != TCP_TLS_OFF ? "yes" : "no");
	if (c->tls != TCP_TLS_OFF) {
		zl_timer_start(c->loop, &c->hs_t, c->base.x->opts.timeout_ms, 0,
			       tcp_tls_hs_expired, c);
		tcp_tls_step(c); /* the ClientHello */
		return;
	}
	tcp_flush(c); /* frames queued while connecting; sets the events */
}

static int tcp_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		       struct zl_xport_conn **out)
{
	return tcp_connect_as(x, host, port, timeout_ms, false, false, out);
}

static int tcp_connect_tls(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			   struct zl_xport_conn **out)
{
	return tcp_connect_as(x, host, port, timeout_ms, true, false, out);
}

static int tcp_connect_start(struct zl_xport *x, const char *host, uint16_t port, bool tls,
			     int timeout_ms, struct zl_xport_conn **out)
{
	return tcp_connect_as(x, host, port, timeout_ms, tls, true, out);
}

static int tcp_request(struct zl_xport_conn *bc, struct xport_req *br,
		       const struct zl_wire_hdr *hdr, const void *out, uint32_t out_len)
{
	struct tcp_req *r = tcp_req_of(br);

	r->state = TCP_REQ_SENDING;
	zl_wire_encode(hdr, r->send.hdr);
	r->send.data = out;
	r->send.len = out_len;
	tcp_send_queue(tcp_conn_of(bc), &r->send);
	return 0;
}

/* ---- server ---- */

/* The payload follows the header on the stream: tcp_rx_request reads it
 * into s->fetch_buf once on_request returned. */
static int tcp_fetch(struct zl_xport_conn *bc, struct xport_sreq *s)
{
	(void)bc;
	(void)s;
	return 0;
}

static void tcp_discard(struct zl_xport_conn *bc, struct xport_sreq *s)
{
	struct tcp_conn *c = tcp_conn_of(bc);

	c->rx_sreq = tcp_sreq_of(s);
	tcp_rx_start_payload(c, TCP_RX_SKIP, NULL);
}

static int tcp_reply(struct zl_xport_conn *bc, struct xport_sreq *bs,
		     const struct zl_wire_hdr *rep, const void *data, uint32_t len)
{
	struct tcp_sreq *s = tcp_sreq_of(bs);

	zl_wire_encode(rep, s->send.hdr);
	s->send.data = data;
	s->send.len = len;
	tcp_send_queue(tcp_conn_of(bc), &s->send);
	return 0;
}

static void tcp_accept_cb(void *arg, uint32_t events)
{
	struct tcp_listener *l = arg;
	struct zl_xport *x = l->base.x;

	for (int i = 0; i < TCP_ACCEPT_BUDGET; i++) {
		struct tcp_conn *c;
		int fd, rc;

		fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK && xport_warn_ok(x))
				ZL_LOG_WARN("xport",
					    "accept failed port=%u err=%s; raise the fd "
					    "limit if EMFILE",
					    l->base.port, zl_strerror(-errno));
			return;
		}
		rc = tcp_conn_new(x, fd, true, &c);
		if (rc) {
			ZL_LOG_WARN("xport", "dropping accepted connection port=%u err=%s",
				    l->base.port, zl_strerror(rc));
			close(fd);
			continue;
		}
		c->base.sops = l->base.sops;
		c->base.sarg = l->base.sarg;
		rc = xport_tls_server(x) ? tcp_conn_tls(c, true, NULL) : 0;
		if (!rc)
			rc = tcp_conn_start(c, 0);
		if (rc) {
			ZL_LOG_WARN("xport", "dropping accepted connection port=%u err=%s",
				    l->base.port, zl_strerror(rc));
			tcp_conn_free(&c->base);
			continue;
		}
		ZL_LOG_DEBUG("xport", "accepted peer=%s port=%u", c->base.peer, l->base.port);
		if (l->base.sops->on_conn)
			l->base.sops->on_conn(l->base.sarg, &c->base);
	}
}

static int tcp_listen(struct zl_xport *x, const char *host, const struct addrinfo *ai,
		      struct zl_xport_listener **out)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct tcp_listener *l;
	int one = 1, rc;

	(void)host;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	if (setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l->fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l->fd, TCP_BACKLOG) < 0 ||
	    getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = -errno;
		goto out_close;
	}
	l->base.port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						: ntohs(((struct sockaddr_in *)&ss)->sin_port);
	rc = zl_loop_add(x->loop, &l->h, l->fd, EPOLLIN, tcp_accept_cb, l);
	if (rc)
		goto out_close;
	*out = &l->base;
	return 0;

out_close:
	close(l->fd);
out_free:
	free(l);
	return rc;
}

static void tcp_listener_close(struct zl_xport_listener *bl)
{
	struct tcp_listener *l = ZL_CONTAINER_OF(bl, struct tcp_listener, base);

	zl_loop_del(bl->x->loop, &l->h);
	close(l->fd);
	free(l);
}

/* ---- transport ---- */

const struct xport_ops xport_tcp_ops = {
    .kind = ZL_XPORT_TCP,
    .init = xport_tls_init,
    .fini = xport_tls_fini,
    .connect = tcp_connect,
    .connect_tls = tcp_connect_tls,
    .connect_start = tcp_connect_start,
    .listen = tcp_listen,
    .listener_close = tcp_listener_close,
    .conn_close = tcp_conn_close,
    .close_work = tcp_close_work,
    .conn_free = tcp_conn_free,
    .request = tcp_request,
    .req_release = NULL,
    .fetch = tcp_fetch,
    .discard = tcp_discard,
    .reply = tcp_reply,
    .sreq_freed = tcp_sreq_freed,
    .mem_register = NULL,
};
