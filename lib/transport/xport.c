/* Transport front end and common layer: argument checks, reference
 * counting, connection bookkeeping and the client request layer (slots,
 * req_ids, in-flight list, timeouts, completion) shared by every
 * implementation, which it reaches through struct xport_ops. The server
 * request layer is xport_sreq.c.
 */
#include "transport_internal.h"
#ifdef ZL_HAVE_RDMA
#include "rdma_internal.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int zl_xport_select_parse(const char *s, enum zl_xport_select *out)
{
	static const struct {
		const char *name;
		enum zl_xport_select sel;
	} names[] = {
	    {"auto", ZL_XPORT_SEL_AUTO},
	    {"tcp", ZL_XPORT_SEL_TCP},
	    {"rdma", ZL_XPORT_SEL_RDMA},
	};

	if (!s)
		return -ZL_ERR_INVAL;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(names); i++) {
		if (!strcasecmp(s, names[i].name)) {
			*out = names[i].sel;
			return 0;
		}
	}
	return -ZL_ERR_INVAL;
}

const char *zl_xport_kind_name(enum zl_xport_kind k)
{
	switch (k) {
	case ZL_XPORT_TCP:
		return "tcp";
	case ZL_XPORT_RDMA:
		return "rdma";
	}
	return "unknown";
}

int zl_xport_select_kind(enum zl_xport_select sel, const char *host, uint16_t port, int timeout_ms,
			 enum zl_xport_kind *out)
{
	if (!out)
		return -ZL_ERR_INVAL;
	switch (sel) {
	case ZL_XPORT_SEL_TCP:
		*out = ZL_XPORT_TCP;
		return 0;
	case ZL_XPORT_SEL_RDMA:
		*out = ZL_XPORT_RDMA;
		return 0;
	case ZL_XPORT_SEL_AUTO:
#ifdef ZL_HAVE_RDMA
		*out = host && xport_rdma_reaches(host, port, timeout_ms) ? ZL_XPORT_RDMA
									  : ZL_XPORT_TCP;
#else
		*out = ZL_XPORT_TCP;
#endif
		return 0;
	}
	return -ZL_ERR_INVAL;
}

static const struct xport_ops *xport_ops_for(enum zl_xport_kind kind)
{
	switch (kind) {
	case ZL_XPORT_TCP:
		return &xport_tcp_ops;
	case ZL_XPORT_RDMA:
#ifdef ZL_HAVE_RDMA
		return &xport_rdma_ops;
#else
		return NULL; /* built without rdma-core */
#endif
	}
	return NULL;
}

static void xport_listener_close(struct zl_xport_listener *l);
static void xport_close_work(void *arg);

int zl_xport_create(struct zl_loop *loop, const struct zl_xport_opts *opts, struct zl_xport **out)
{
	struct zl_xport *x;
	int rc;

	if (!loop || !opts || !out)
		return -ZL_ERR_INVAL;
	if (opts->kind != ZL_XPORT_TCP && opts->kind != ZL_XPORT_RDMA)
		return -ZL_ERR_INVAL;
	if (opts->max_inflight > XPORT_MAX_MAX_INFLIGHT)
		return -ZL_ERR_INVAL;
	if (!xport_ops_for(opts->kind))
		return -EPROTONOSUPPORT;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->ops = xport_ops_for(opts->kind);
	x->loop = loop;
	x->opts = *opts;
	if (!x->opts.max_inflight)
		x->opts.max_inflight = XPORT_DEF_MAX_INFLIGHT;
	if (!x->opts.timeout_ms)
		x->opts.timeout_ms = XPORT_DEF_TIMEOUT_MS;
	if (!x->opts.pool_bytes)
		x->opts.pool_bytes = XPORT_DEF_POOL_BYTES;
	rc = x->ops->init ? x->ops->init(x) : 0;
	if (rc)
		goto out_free;
	rc = xport_pool_init(&x->pool, x->opts.pool_bytes, x->ops->mem_register, x);
	if (rc) {
		ZL_LOG_ERR("xport",
			   "cannot reserve the buffer pool bytes=%llu err=%s; lower "
			   "pool_bytes or raise the memory limit",
			   (unsigned long long)x->opts.pool_bytes, zl_strerror(rc));
		goto out_fini;
	}
	*out = x;
	return 0;

out_fini:
	if (x->ops->fini)
		x->ops->fini(x);
out_free:
	free(x);
	return rc;
}

void zl_xport_destroy(struct zl_xport *x)
{
	if (!x)
		return;
	x->destroying = true;
	while (x->listeners.head)
		xport_listener_close(
		    ZL_CONTAINER_OF(x->listeners.head, struct zl_xport_listener, link));
	/* Close work unlinks each connection; callbacks may close others. */
	while (x->conns.head) {
		struct zl_xport_conn *c =
		    ZL_CONTAINER_OF(x->conns.head, struct zl_xport_conn, link);

		x->ops->conn_close(c, -ZL_ERR_CONN);
		zl_loop_defer_cancel(x->loop, &c->close_d);
		xport_close_work(c);
	}
	zl_timer_stop(x->loop, &x->tick);
	if (x->ops->fini)
		x->ops->fini(x);
	xport_pool_fini(&x->pool);
	free(x);
}

enum zl_xport_kind zl_xport_kind(const struct zl_xport *x)
{
	return x->ops->kind;
}

struct zl_loop *zl_xport_loop(const struct zl_xport *x)
{
	return x->loop;
}

void *zl_xport_buf_alloc(struct zl_xport *x, size_t len)
{
	return xport_pool_alloc(&x->pool, len);
}

void zl_xport_buf_free(struct zl_xport *x, void *buf)
{
	xport_pool_free(&x->pool, buf);
}

bool zl_xport_buf_owned(const struct zl_xport *x, const void *buf, size_t len)
{
	return buf && xport_pool_owned(&x->pool, buf, len);
}

/* ---- bookkeeping used by the implementations ---- */

bool xport_warn_ok(struct zl_xport *x)
{
	return zl_ratelimit_ok(&x->warn_rl, XPORT_WARN_PER_SEC);
}

void xport_format_peer(const struct sockaddr *sa, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		snprintf(out, len, "?");
	}
}

int xport_resolve(const char *host, uint16_t port, bool passive, struct addrinfo **res)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
	char portstr[8];
	int gai;

	snprintf(portstr, sizeof(portstr), "%u", port);
	gai = getaddrinfo(host, portstr, &hints, res);
	if (!gai)
		return 0;
	ZL_LOG_WARN("xport", "cannot resolve %s host=%s err=\"%s\"; check the address",
		    passive ? "the listen address" : "the peer", host, gai_strerror(gai));
	switch (gai) {
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_NONAME:
	case EAI_AGAIN:
	case EAI_FAIL:
	case EAI_NODATA:
		return -EHOSTUNREACH;
	case EAI_SYSTEM:
		return errno ? -errno : -EIO;
	default:
		return -EINVAL;
	}
}

static void xport_tick(void *arg);

void xport_conn_init(struct zl_xport *x, struct zl_xport_conn *c, bool server)
{
	c->ops = x->ops;
	c->x = x;
	c->kind = x->ops->kind;
	c->server = server;
	c->refs = 1; /* the transport's, dropped after the close callback */
	snprintf(c->peer, sizeof(c->peer), "?");
}

void xport_conn_fini(struct zl_xport_conn *c)
{
	xport_sreqs_fini(c);
	free(c->reqs.mem);
	c->reqs.mem = NULL;
	c->reqs.n = 0;
	c->reqs.free = NULL;
}

void xport_conn_closing(struct zl_xport_conn *c, int reason)
{
	c->closing = true;
	c->close_reason = reason;
	zl_loop_defer(c->x->loop, &c->close_d, xport_close_work, c);
	zl_loop_defer_cancel(c->x->loop, &c->sreqs.work_d);
	ZL_LOG_DEBUG("xport",
		     "connection closing transport=%s peer=%s side=%s reason=%s inflight=%u",
		     zl_xport_kind_name(c->kind), c->peer, c->server ? "server" : "client",
		     reason ? zl_errname(reason) : "local", c->inflight);
}

void zl_xport_stats_add(const struct zl_xport *x, struct zl_xport_stats *acc)
{
	if (!x)
		return;
	for (int k = 0; k < ZL_XPORT_SK_N; k++) {
		acc->opened[k] += x->st.opened[k];
		acc->closed[k] += x->st.closed[k];
	}
	acc->timeouts += x->st.timeouts;
	acc->rdma_credit_waits += x->st.rdma_credit_waits;
	acc->rdma_window_waits += x->st.rdma_window_waits;
	acc->rdma_wc_errors += x->st.rdma_wc_errors;
	acc->rdma_copied_bytes += x->st.rdma_copied_bytes;
}

const char *zl_xport_stat_kind_name(enum zl_xport_stat_kind k)
{
	return k == ZL_XPORT_SK_RDMA ? "rdma" : k == ZL_XPORT_SK_TLS ? "tls" : "tcp";
}

void xport_conn_link(struct zl_xport_conn *c)
{
	struct zl_xport *x = c->x;

	c->skind = c->kind == ZL_XPORT_RDMA ? ZL_XPORT_SK_RDMA
		   : c->tls		    ? ZL_XPORT_SK_TLS
					    : ZL_XPORT_SK_TCP;
	x->st.opened[c->skind]++;
	xport_list_push(&x->conns, &c->link);
	if (!c->server && x->n_clients++ == 0)
		zl_timer_start(x->loop, &x->tick, XPORT_TICK_MS, XPORT_TICK_MS, xport_tick, x);
}

void xport_conn_unlink(struct zl_xport_conn *c)
{
	struct zl_xport *x = c->x;

	x->st.closed[c->skind]++;
	xport_list_del(&x->conns, &c->link);
	if (!c->server && --x->n_clients == 0)
		zl_timer_stop(x->loop, &x->tick);
}

/* The close work, deferred by xport_conn_closing (or run right away by
 * zl_xport_destroy). c may be freed on return. */
static void xport_close_work(void *arg)
{
	struct zl_xport_conn *c = arg;

	c->ops->close_work(c);
	xport_sreqs_fail_all(c);
	xport_reqs_fail_all(c);
	c->closed = true;
	if (c->server) {
		if (c->sops->on_close)
			c->sops->on_close(c->sarg, c, c->close_reason);
	} else if (c->on_close) {
		c->on_close(c->close_arg, c, c->close_reason);
	}
	xport_conn_unlink(c);
	zl_xport_conn_put(c);
}

static void xport_listener_close(struct zl_xport_listener *l)
{
	xport_list_del(&l->x->listeners, &l->link);
	l->ops->listener_close(l);
}

/* ---- request slots ---- */

static struct xport_req *xport_req_of(struct xport_link *n)
{
	return ZL_CONTAINER_OF(n, struct xport_req, link);
}

int xport_reqs_init(struct zl_xport_conn *c, uint32_t n, size_t size, size_t off)
{
	struct xport_reqs *q = &c->reqs;

	q->mem = calloc(n, size);
	if (!q->mem)
		return -ENOMEM;
	q->size = size;
	q->off = off;
	q->n = n;
	for (uint32_t i = n; i-- > 0;) {
		struct xport_req *r = xport_req_at(c, i);

		r->slot = i;
		r->link.next = q->free;
		q->free = &r->link;
	}
	return 0;
}

struct xport_req *xport_req_at(struct zl_xport_conn *c, uint32_t slot)
{
	return (struct xport_req *)(c->reqs.mem + (size_t)slot * c->reqs.size + c->reqs.off);
}

static uint64_t xport_req_id(const struct xport_req *r)
{
	return ((uint64_t)r->gen << 32) | r->slot;
}

struct xport_req *xport_req_lookup(struct zl_xport_conn *c, const struct zl_wire_hdr *rep,
				   const char **why)
{
	uint64_t slot = rep->req_id & 0xffffffffu;
	struct xport_req *r = slot < c->reqs.n ? xport_req_at(c, (uint32_t)slot) : NULL;

	if (!r || !r->busy || r->gen != (uint32_t)(rep->req_id >> 32)) {
		*why = "reply to an unknown or stale request id";
		return NULL;
	}
	if (rep->opcode != r->opcode) {
		*why = "reply opcode differs from the request";
		return NULL;
	}
	return r;
}

/* Takes the next free slot (the caller checked there is one) into flight. */
static inline __attribute__((always_inline)) struct xport_req *
xport_req_start(struct zl_xport_conn *c, uint8_t opcode, void *in, uint32_t in_cap,
		zl_xport_reply_cb cb, void *arg)
{
	struct xport_req *r = xport_req_of(c->reqs.free);

	c->reqs.free = r->link.next;
	r->busy = true;
	r->opcode = opcode;
	r->fail = 0;
	r->deadline_ns = zl_loop_now_ns(c->x->loop) + (uint64_t)c->x->opts.timeout_ms * 1000000ull;
	r->in = in;
	r->in_cap = in_cap;
	r->cb = cb;
	r->arg = arg;
	r->held = false;
	xport_list_append(&c->reqs.flight, &r->link);
	c->inflight++;
	return r;
}

/* Takes r out of flight onto the free list; `reuse` makes its req_id stale. */
static void xport_req_release(struct zl_xport_conn *c, struct xport_req *r, bool reuse)
{
	xport_list_del(&c->reqs.flight, &r->link);
	if (c->ops->req_release)
		c->ops->req_release(c, r);
	r->busy = false;
	if (reuse)
		r->gen++;
	r->cb = NULL;
	r->in = NULL;
	r->link.next = c->reqs.free;
	c->reqs.free = &r->link;
	c->inflight--;
}

void xport_req_finish(struct zl_xport_conn *c, struct xport_req *r, int status,
		      const struct zl_wire_hdr *rep)
{
	zl_xport_reply_cb cb = r->cb;
	void *arg = r->arg;

	xport_req_release(c, r, true);
	cb(arg, status, rep);
}

void xport_req_hold(struct xport_req *r, int status, const struct zl_wire_hdr *rep)
{
	r->held = true;
	r->held_status = status;
	r->held_rep_valid = rep != NULL;
	if (rep)
		r->held_rep = *rep;
}

void xport_req_finish_held(struct zl_xport_conn *c, struct xport_req *r)
{
	xport_req_finish(c, r, r->held_status, r->held_rep_valid ? &r->held_rep : NULL);
}

void xport_reqs_fail_all(struct zl_xport_conn *c)
{
	while (c->reqs.flight.head) {
		struct xport_req *r = xport_req_of(c->reqs.flight.head);

		if (r->held)
			xport_req_finish_held(c, r);
		else
			xport_req_finish(c, r,
					 r->fail			     ? r->fail
					 : c->close_reason == -ZL_ERR_TLS ? -ZL_ERR_TLS
									  : -ZL_ERR_CONN,
					 NULL);
	}
}

/* Fails every client connection whose oldest request is past its deadline:
 * with one timeout per transport the in-flight list is in deadline order, so
 * one look per connection suffices. */
static void xport_tick(void *arg)
{
	struct zl_xport *x = arg;
	uint64_t now = zl_now_ns();

	for (struct xport_link *n = x->conns.head, *next; n; n = next) {
		struct zl_xport_conn *c = ZL_CONTAINER_OF(n, struct zl_xport_conn, link);
		struct xport_link *f = c->reqs.flight.head;
		struct xport_req *oldest;

		next = n->next; /* closing defers the unlink */
		if (c->server || c->closing || !f || xport_req_of(f)->deadline_ns > now)
			continue;
		oldest = xport_req_of(f);
		for (; f && xport_req_of(f)->deadline_ns <= now; f = f->next) {
			xport_req_of(f)->fail = -ZL_ERR_TIMEOUT;
			x->st.timeouts++;
		}
		if (xport_warn_ok(x))
			ZL_LOG_WARN("xport",
				    "request timed out transport=%s peer=%s op=%s req_id=%llu "
				    "timeout_ms=%u inflight=%u; closing connection",
				    zl_xport_kind_name(c->kind), c->peer,
				    zl_wire_op_name(oldest->opcode),
				    (unsigned long long)xport_req_id(oldest), x->opts.timeout_ms,
				    c->inflight);
		c->ops->conn_close(c, -ZL_ERR_TIMEOUT);
	}
}

/* Fills in version, payload_len and payload_crc of a message about to be
 * sent and checks it. Returns 0 or the zl_wire_check error. */
static int xport_hdr_seal(struct zl_xport_conn *c, struct zl_wire_hdr *h, const void *data,
			  uint32_t len, const uint32_t *crcs, const char *what)
{
	const char *why = "?";
	int rc;

	h->version = ZL_WIRE_VERSION;
	h->payload_len = len;
	if (crcs && len && !(len % ZL_BLOCK_SIZE))
		h->payload_crc = zl_crc32c_4k_join(crcs, len / ZL_BLOCK_SIZE);
	else
		h->payload_crc = len ? zl_crc32c(data, len) : 0;
	rc = zl_wire_check(h, 0, &why);
	if (rc && xport_warn_ok(c->x))
		ZL_LOG_WARN("xport", "refusing to send an invalid %s op=%s reason=\"%s\"", what,
			    zl_wire_op_name(h->opcode), why);
	return rc;
}

/* ---- connections ---- */

void zl_xport_conn_get(struct zl_xport_conn *c)
{
	c->refs++;
}

void zl_xport_conn_put(struct zl_xport_conn *c)
{
	if (!c)
		return;
	if (c->refs == 0) {
		ZL_LOG_ERR("xport", "conn_put on a freed connection peer=%s (reference bug)",
			   c->peer);
		return;
	}
	if (--c->refs == 0)
		c->ops->conn_free(c);
}

void zl_xport_conn_close(struct zl_xport_conn *c)
{
	if (c && !c->closing)
		c->ops->conn_close(c, 0);
}

bool zl_xport_conn_closed(const struct zl_xport_conn *c)
{
	return !c || c->closed;
}

bool zl_xport_conn_alive(const struct zl_xport_conn *c)
{
	return c && !c->closing;
}

void zl_xport_conn_set_ctx(struct zl_xport_conn *c, void *ctx)
{
	c->ctx = ctx;
}

void *zl_xport_conn_ctx(const struct zl_xport_conn *c)
{
	return c->ctx;
}

const char *zl_xport_conn_peer(const struct zl_xport_conn *c)
{
	return c->peer;
}

enum zl_xport_kind zl_xport_conn_kind(const struct zl_xport_conn *c)
{
	return c->kind;
}

uint32_t zl_xport_conn_inflight(const struct zl_xport_conn *c)
{
	return c->inflight;
}

/* ---- client side ---- */

/* The end of every connect: the caller's close callback and reference. */
static int xport_connected(int rc, zl_xport_close_cb on_close, void *arg,
			   struct zl_xport_conn **out)
{
	if (rc)
		return rc;
	(*out)->on_close = on_close;
	(*out)->close_arg = arg;
	(*out)->refs++; /* the caller's */
	return 0;
}

/* Every connect: checks, then the transport's connect (nowait: its
 * connect_start where it has one). */
static int xport_connect_as(struct zl_xport *x, const char *host, uint16_t port, bool tls,
			    bool nowait, int timeout_ms, zl_xport_close_cb on_close, void *arg,
			    struct zl_xport_conn **out)
{
	int rc;

	if (!x || !host || !out || !port)
		return -ZL_ERR_INVAL;
	if (x->destroying)
		return -ESHUTDOWN;
	if (tls && !x->ops->connect_tls)
		return -EPROTONOSUPPORT;
	if (tls && !xport_tls_client(x))
		return -ZL_ERR_TLS_CA;
	if (timeout_ms <= 0)
		timeout_ms = (int)ZL_MIN(x->opts.timeout_ms, (uint32_t)INT32_MAX);
	if (nowait && x->ops->connect_start)
		rc = x->ops->connect_start(x, host, port, tls, timeout_ms, out);
	else if (tls)
		rc = x->ops->connect_tls(x, host, port, timeout_ms, out);
	else
		rc = x->ops->connect(x, host, port, timeout_ms, out);
	return xport_connected(rc, on_close, arg, out);
}

int zl_xport_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		     zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out)
{
	return xport_connect_as(x, host, port, false, false, timeout_ms, on_close, arg, out);
}

int zl_xport_connect_tls(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			 zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out)
{
	return xport_connect_as(x, host, port, true, false, timeout_ms, on_close, arg, out);
}

int zl_xport_connect_start(struct zl_xport *x, const char *host, uint16_t port, bool tls,
			   int timeout_ms, zl_xport_close_cb on_close, void *arg,
			   struct zl_xport_conn **out)
{
	return xport_connect_as(x, host, port, tls, true, timeout_ms, on_close, arg, out);
}

bool zl_xport_tls_serving(const struct zl_xport *x)
{
	return x && xport_tls_server(x);
}

/* Both entries' body, inlined into each: zl_xport_request is not a call
 * with nine arguments more per request. */
static inline __attribute__((always_inline)) int
xport_request(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out, uint32_t out_len,
	      const uint32_t *out_crcs, void *in, uint32_t in_cap, zl_xport_reply_cb cb, void *arg)
{
	struct xport_req *r;
	int rc;

	if (!c || !hdr || !cb || (out_len && !out) || (in_cap && !in))
		return -ZL_ERR_INVAL;
	if (c->server)
		return -ZL_ERR_INVAL;
	if (c->closing)
		return -ZL_ERR_CONN;
	if (hdr->flags & (ZL_WF_REPLY | ZL_WF_RDMA))
		return -ZL_ERR_INVAL;
	if (!c->reqs.free)
		return -ZL_ERR_BUSY;
	hdr->status = 0;
	hdr->req_id = xport_req_id(xport_req_of(c->reqs.free));
	rc = xport_hdr_seal(c, hdr, out, out_len, out_crcs, "request");
	if (rc)
		return rc;
	r = xport_req_start(c, hdr->opcode, in, in_cap, cb, arg);
	rc = c->ops->request(c, r, hdr, out, out_len);
	if (rc)
		xport_req_release(c, r, false); /* the next request takes this req_id */
	return rc;
}

int zl_xport_request(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
		     uint32_t out_len, void *in, uint32_t in_cap, zl_xport_reply_cb cb, void *arg)
{
	return xport_request(c, hdr, out, out_len, NULL, in, in_cap, cb, arg);
}

int zl_xport_request_crcs(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
			  uint32_t out_len, const uint32_t *out_crcs, void *in, uint32_t in_cap,
			  zl_xport_reply_cb cb, void *arg)
{
	return xport_request(c, hdr, out, out_len, out_crcs, in, in_cap, cb, arg);
}

/* ---- server side ---- */

int zl_xport_listen(struct zl_xport *x, const char *host, uint16_t port,
		    const struct zl_xport_server_ops *ops, void *arg,
		    struct zl_xport_listener **out)
{
	struct addrinfo *res;
	int rc;

	if (!x || !ops || !ops->on_request || !out)
		return -ZL_ERR_INVAL;
	if (x->destroying)
		return -ESHUTDOWN;
	if (!host)
		host = "0.0.0.0";
	rc = xport_resolve(host, port, true, &res);
	if (rc)
		return rc;
	rc = x->ops->listen(x, host, res, out);
	freeaddrinfo(res);
	if (rc) {
		ZL_LOG_ERR("xport", "cannot listen transport=%s host=%s port=%u err=%s; %s",
			   zl_xport_kind_name(x->ops->kind), host, port, zl_strerror(rc),
			   x->ops->kind == ZL_XPORT_RDMA
			       ? "is the port in use, is the address on an RDMA device?"
			       : "is the port in use?");
		return rc;
	}
	(*out)->x = x;
	(*out)->ops = x->ops;
	(*out)->sops = ops;
	(*out)->sarg = arg;
	xport_list_push(&x->listeners, &(*out)->link);
	ZL_LOG_DEBUG("xport", "listening transport=%s host=%s port=%u",
		     zl_xport_kind_name(x->ops->kind), host, (*out)->port);
	return 0;
}

uint16_t zl_xport_listener_port(const struct zl_xport_listener *l)
{
	return l->port;
}

void zl_xport_listener_close(struct zl_xport_listener *l)
{
	if (l)
		xport_listener_close(l);
}

int zl_xport_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, zl_xport_done_cb cb,
		   void *arg)
{
	return zl_xport_fetch_crcs(p, buf, len, NULL, cb, arg);
}

int zl_xport_fetch_crcs(struct zl_xport_payload *p, void *buf, uint32_t len, uint32_t *crcs,
			zl_xport_done_cb cb, void *arg)
{
	if (!p || !buf || !cb)
		return -ZL_ERR_INVAL;
	if (p->conn->closing)
		return -ZL_ERR_CONN;
	return xport_sreq_fetch(p, buf, len, crcs, cb, arg);
}

void zl_xport_discard(struct zl_xport_payload *p)
{
	if (p)
		xport_sreq_discard(p);
}

int zl_xport_reply(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data, uint32_t len,
		   zl_xport_done_cb sent_cb, void *arg)
{
	return zl_xport_reply_crcs(c, rep, data, len, NULL, sent_cb, arg);
}

int zl_xport_reply_crcs(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data,
			uint32_t len, const uint32_t *crcs, zl_xport_done_cb sent_cb, void *arg)
{
	int rc;

	if (!c || !rep || (len && !data))
		return -ZL_ERR_INVAL;
	if (c->closing)
		return -ZL_ERR_CONN;
	if (!c->server)
		return -ZL_ERR_INVAL;
	if (!(rep->flags & ZL_WF_REPLY) || (rep->flags & ZL_WF_RDMA))
		return -ZL_ERR_INVAL;
	rc = xport_hdr_seal(c, rep, data, len, crcs, "reply");
	if (rc)
		return rc;
	return xport_sreq_reply(c, rep, data, len, sent_cb, arg);
}
