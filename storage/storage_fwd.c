/* Forwarding: the requests this storage daemon sends to other storage nodes
 * (a primary's REPL_WRITE to its backups; recovery, peering and scrub send
 * theirs over the same connections). One connection per node, found through
 * nodes/<id> in etcd, cached, re-resolved and reconnected after a failure.
 * HELLO is pipelined ahead of the first request; a reply naming another node
 * (an address reused after a restart) closes the connection, which fails the
 * requests behind it. Loop thread only. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_io.h"

#define FWD_CONNECT_MS 2000
/* After a failed connect, fail fast for this long instead of blocking the
 * loop on every forwarded write (the backup is being dropped anyway). */
#define FWD_BACKOFF_MS 1000

struct fwd_node {
	struct fwd_node *next;
	struct zl_storage_fwd *owner;
	char id[ZL_NODE_ID_MAX];
	struct zl_xport_conn *conn;
	uint64_t fail_until_ms;
	struct zl_xport_hello hello;
	bool hello_pending;
};

struct zl_storage_fwd {
	struct zl_storage *st;
	struct fwd_node *list;
};

int zl_storage_fwd_create(struct zl_storage *st, struct zl_storage_fwd **out)
{
	struct zl_storage_fwd *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->st = st;
	*out = p;
	return 0;
}

static void fwd_drop_conn(struct fwd_node *pe)
{
	struct zl_xport_conn *c = pe->conn;

	if (!c)
		return;
	pe->conn = NULL;
	zl_xport_conn_set_ctx(c, NULL);
	zl_xport_conn_close(c);
	zl_xport_conn_put(c);
}

void zl_storage_fwd_destroy(struct zl_storage_fwd *p)
{
	if (!p)
		return;
	while (p->list) {
		struct fwd_node *pe = p->list;

		p->list = pe->next;
		fwd_drop_conn(pe);
		/* A HELLO still in flight holds pe as its callback argument: the
		 * transport fails it when the connection closes. */
		if (!pe->hello_pending)
			free(pe);
		else
			pe->owner = NULL;
	}
	free(p);
}

static void fwd_on_close(void *arg, struct zl_xport_conn *c, int reason)
{
	struct fwd_node *pe = zl_xport_conn_ctx(c);

	(void)arg;
	if (!pe || pe->conn != c)
		return;
	ZL_LOG_INFO("storage", "peer connection closed: node=%s peer=%s reason=%s", pe->id,
		    zl_xport_conn_peer(c), zl_errname(reason));
	pe->conn = NULL;
	zl_xport_conn_set_ctx(c, NULL);
	zl_xport_conn_put(c);
}

static void fwd_hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct fwd_node *pe = arg;
	int err;

	pe->hello_pending = false;
	if (!pe->owner) {
		free(pe);
		return;
	}
	err = zl_xport_hello_check(&pe->hello, status, rep, pe->id, NULL);
	if (err && pe->conn) {
		ZL_LOG_WARN("storage", "HELLO to peer failed: node=%s err=%s", pe->id,
			    zl_errname(err));
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		fwd_drop_conn(pe);
	}
}

static int fwd_connect(struct zl_storage_fwd *p, struct fwd_node *pe)
{
	struct zl_storage *st = p->st;
	struct zl_node_info ni;
	enum zl_xport_kind kind;
	struct zl_xport *x;
	uint16_t port;
	int rc;

	if (zl_now_ms() < pe->fail_until_ms)
		return -ZL_ERR_CONN;
	rc = zl_meta_node_get(st->etcd, st->cfg.prefix, pe->id, &ni);
	if (rc) {
		ZL_LOG_WARN("storage", "peer lookup failed: node=%s err=%s", pe->id,
			    zl_errname(rc));
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		return rc == -ZL_ERR_NOT_FOUND ? rc : -ZL_ERR_CONN;
	}
	/* Chosen like the volume client does; --transport is the selection. */
	rc = zl_xport_pick(st->sel, ni.id, ni.addr, ni.rdma_port, ni.transports,
			   st->xport_rdma != NULL, FWD_CONNECT_MS, &kind);
	if (rc) {
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		return -ZL_ERR_CONN;
	}
	x = kind == ZL_XPORT_RDMA ? st->xport_rdma : st->xport_tcp;
	port = kind == ZL_XPORT_RDMA ? ni.rdma_port : ni.port;
	rc = zl_xport_connect_node(x, ni.id, ni.addr, port, ni.tls, FWD_CONNECT_MS, fwd_on_close,
				   p, &pe->conn);
	if (rc) {
		ZL_LOG_WARN(
		    "storage", "connect to peer failed: node=%s addr=%s:%u transport=%s err=%s",
		    pe->id, ni.addr, port, zl_xport_kind_name(zl_xport_kind(x)), zl_errname(rc));
		pe->conn = NULL;
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		return -ZL_ERR_CONN;
	}
	zl_xport_conn_set_ctx(pe->conn, pe);
	{
		/* Forwarding, recovery, peering and scrub: the cluster token
		 * (docs/SECURITY.md); none without a cluster key. */
		char tok[65];
		const struct zl_xport_cred cred = {
		    .token = zl_storage_auth_token(st, tok) ? NULL : tok, .cluster = true};

		rc = zl_xport_hello_send_cred(pe->conn, &pe->hello, st->cfg.node_id, &cred,
					      fwd_hello_cb, pe);
		explicit_bzero(tok, sizeof(tok));
	}
	if (rc) {
		fwd_drop_conn(pe);
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		return -ZL_ERR_CONN;
	}
	pe->hello_pending = true;
	ZL_LOG_INFO("storage", "connected to peer node=%s addr=%s:%u transport=%s", pe->id, ni.addr,
		    port, zl_xport_kind_name(zl_xport_kind(x)));
	return 0;
}

static int fwd_request(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
		       const void *out, uint32_t out_len, const uint32_t *out_crcs, void *in,
		       uint32_t in_cap, zl_xport_reply_cb cb, void *arg);

int zl_storage_fwd_send(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
			 const void *out, uint32_t out_len, zl_xport_reply_cb cb, void *arg)
{
	return fwd_request(p, node_id, hdr, out, out_len, NULL, NULL, 0, cb, arg);
}

int zl_storage_fwd_send_crcs(struct zl_storage_fwd *p, const char *node_id,
			      struct zl_wire_hdr *hdr, const void *out, uint32_t out_len,
			      const uint32_t *out_crcs, zl_xport_reply_cb cb, void *arg)
{
	return fwd_request(p, node_id, hdr, out, out_len, out_crcs, NULL, 0, cb, arg);
}

int zl_storage_fwd_request(struct zl_storage_fwd *p, const char *node_id,
			    struct zl_wire_hdr *hdr, const void *out, uint32_t out_len, void *in,
			    uint32_t in_cap, zl_xport_reply_cb cb, void *arg)
{
	return fwd_request(p, node_id, hdr, out, out_len, NULL, in, in_cap, cb, arg);
}

static int fwd_request(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
		       const void *out, uint32_t out_len, const uint32_t *out_crcs, void *in,
		       uint32_t in_cap, zl_xport_reply_cb cb, void *arg)
{
	struct fwd_node *pe;
	int rc;

	for (pe = p->list; pe; pe = pe->next)
		if (!strcmp(pe->id, node_id))
			break;
	if (!pe) {
		pe = calloc(1, sizeof(*pe));
		if (!pe)
			return -ENOMEM;
		pe->owner = p;
		snprintf(pe->id, sizeof(pe->id), "%s", node_id);
		pe->next = p->list;
		p->list = pe;
	}
	if (pe->conn && !zl_xport_conn_alive(pe->conn))
		fwd_drop_conn(pe);
	if (!pe->conn) {
		rc = fwd_connect(p, pe);
		if (rc)
			return rc;
	}
	rc = zl_xport_request_crcs(pe->conn, hdr, out, out_len, out_crcs, in, in_cap, cb, arg);
	if (rc == -ZL_ERR_CONN)
		fwd_drop_conn(pe);
	return rc;
}
