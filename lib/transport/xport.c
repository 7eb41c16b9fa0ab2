/* Transport front end: argument checks, reference counting and bookkeeping
 * common to every implementation, then dispatch through struct xport_ops.
 */
#include "transport_internal.h"
#ifdef ZL_HAVE_RDMA
#include "rdma_internal.h"
#endif

#include <errno.h>
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
	rc = x->ops->init(x);
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
	while (x->listeners)
		x->ops->listener_close(x->listeners);
	/* Close work unlinks each connection; callbacks may close others. */
	while (x->conns)
		x->ops->conn_close_now(x->conns);
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

void xport_conn_init(struct zl_xport *x, struct zl_xport_conn *c, bool server)
{
	c->ops = x->ops;
	c->x = x;
	c->kind = x->ops->kind;
	c->server = server;
	c->refs = 1; /* the transport's, dropped after the close callback */
	snprintf(c->peer, sizeof(c->peer), "?");
}

void xport_conn_link(struct zl_xport_conn *c)
{
	struct zl_xport *x = c->x;

	c->prev = NULL;
	c->next = x->conns;
	if (x->conns)
		x->conns->prev = c;
	x->conns = c;
}

void xport_conn_unlink(struct zl_xport_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else if (c->x->conns == c)
		c->x->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
}

void xport_listener_link(struct zl_xport *x, struct zl_xport_listener *l)
{
	l->x = x;
	l->ops = x->ops;
	l->prev = NULL;
	l->next = x->listeners;
	if (x->listeners)
		x->listeners->prev = l;
	x->listeners = l;
}

void xport_listener_unlink(struct zl_xport_listener *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else if (l->x->listeners == l)
		l->x->listeners = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
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

int zl_xport_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		     zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out)
{
	if (!x || !host || !out || !port)
		return -ZL_ERR_INVAL;
	if (x->destroying)
		return -ESHUTDOWN;
	if (timeout_ms <= 0)
		timeout_ms = (int)ZL_MIN(x->opts.timeout_ms, (uint32_t)INT32_MAX);
	return x->ops->connect(x, host, port, timeout_ms, on_close, arg, out);
}

int zl_xport_request(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
		     uint32_t out_len, void *in, uint32_t in_cap, zl_xport_reply_cb cb, void *arg)
{
	if (!c || !hdr || !cb || (out_len && !out) || (in_cap && !in))
		return -ZL_ERR_INVAL;
	if (c->server)
		return -ZL_ERR_INVAL;
	if (c->closing)
		return -ZL_ERR_CONN;
	return c->ops->request(c, hdr, out, out_len, in, in_cap, cb, arg);
}

/* ---- server side ---- */

int zl_xport_listen(struct zl_xport *x, const char *host, uint16_t port,
		    const struct zl_xport_server_ops *ops, void *arg,
		    struct zl_xport_listener **out)
{
	if (!x || !ops || !ops->on_request || !out)
		return -ZL_ERR_INVAL;
	if (x->destroying)
		return -ESHUTDOWN;
	return x->ops->listen(x, host ? host : "0.0.0.0", port, ops, arg, out);
}

uint16_t zl_xport_listener_port(const struct zl_xport_listener *l)
{
	return l->port;
}

void zl_xport_listener_close(struct zl_xport_listener *l)
{
	if (l)
		l->ops->listener_close(l);
}

int zl_xport_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, zl_xport_done_cb cb,
		   void *arg)
{
	if (!p || !buf || !cb)
		return -ZL_ERR_INVAL;
	if (p->conn->closing)
		return -ZL_ERR_CONN;
	return p->conn->ops->fetch(p, buf, len, cb, arg);
}

void zl_xport_discard(struct zl_xport_payload *p)
{
	if (p)
		p->conn->ops->discard(p);
}

int zl_xport_reply(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data, uint32_t len,
		   zl_xport_done_cb sent_cb, void *arg)
{
	if (!c || !rep || (len && !data))
		return -ZL_ERR_INVAL;
	if (c->closing)
		return -ZL_ERR_CONN;
	if (!c->server)
		return -ZL_ERR_INVAL;
	return c->ops->reply(c, rep, data, len, sent_cb, arg);
}
