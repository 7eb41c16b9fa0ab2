/* Connections from this storage daemon to its peers, used by a primary to
 * forward REPL_WRITE to backups. One connection per peer, found through
 * nodes/<id> in etcd, cached, re-resolved and reconnected after a failure.
 * HELLO is pipelined ahead of the first request; a reply naming another node
 * (an address reused after a restart) closes the connection, which fails the
 * requests behind it. Loop thread only. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

#define PEER_CONNECT_MS 2000
/* After a failed connect, fail fast for this long instead of blocking the
 * loop on every forwarded write (the backup is being dropped anyway). */
#define PEER_BACKOFF_MS 1000

struct storage_peer {
	struct storage_peer *next;
	struct zl_storage_peers *owner;
	char id[ZL_NODE_ID_MAX];
	struct zl_xport_conn *conn;
	uint64_t fail_until_ms;
	struct zl_wire_hdr hello_hdr;
	uint8_t hello_out[ZL_WIRE_HELLO_SIZE];
	uint8_t hello_in[ZL_WIRE_HELLO_SIZE];
	bool hello_pending;
};

struct zl_storage_peers {
	struct zl_storage *st;
	struct storage_peer *list;
};

int zl_storage_peers_create(struct zl_storage *st, struct zl_storage_peers **out)
{
	struct zl_storage_peers *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->st = st;
	*out = p;
	return 0;
}

static void peer_drop_conn(struct storage_peer *pe)
{
	struct zl_xport_conn *c = pe->conn;

	if (!c)
		return;
	pe->conn = NULL;
	zl_xport_conn_set_ctx(c, NULL);
	zl_xport_conn_close(c);
	zl_xport_conn_put(c);
}

void zl_storage_peers_destroy(struct zl_storage_peers *p)
{
	if (!p)
		return;
	while (p->list) {
		struct storage_peer *pe = p->list;

		p->list = pe->next;
		peer_drop_conn(pe);
		/* A HELLO still in flight holds pe as its callback argument: the
		 * transport fails it when the connection closes. */
		if (!pe->hello_pending)
			free(pe);
		else
			pe->owner = NULL;
	}
	free(p);
}

static void peer_on_close(void *arg, struct zl_xport_conn *c, int reason)
{
	struct storage_peer *pe = zl_xport_conn_ctx(c);

	(void)arg;
	if (!pe || pe->conn != c)
		return;
	ZL_LOG_INFO("storage", "peer connection closed: node=%s peer=%s reason=%s", pe->id,
		    zl_xport_conn_peer(c), zl_errname(reason));
	pe->conn = NULL;
	zl_xport_conn_set_ctx(c, NULL);
	zl_xport_conn_put(c);
}

static void peer_hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct storage_peer *pe = arg;
	struct zl_wire_hello hl;
	int err = status;

	pe->hello_pending = false;
	if (!pe->owner) {
		free(pe);
		return;
	}
	if (!err && rep->status)
		err = zl_wire_status_to_err(rep->status);
	if (!err && zl_wire_hello_decode(pe->hello_in, rep->payload_len, &hl))
		err = -ZL_ERR_PROTO;
	if (!err && strcmp(hl.node_id, pe->id)) {
		ZL_LOG_WARN("storage",
			    "peer at the address of node=%s answers as node=%s: closing "
			    "(its address was reused; nodes/ in etcd is stale)",
			    pe->id, hl.node_id);
		err = -ZL_ERR_PROTO;
	}
	if (err && pe->conn) {
		ZL_LOG_WARN("storage", "HELLO to peer failed: node=%s err=%s", pe->id,
			    zl_errname(err));
		pe->fail_until_ms = zl_now_ms() + PEER_BACKOFF_MS;
		peer_drop_conn(pe);
	}
}

/* The transport to reach peer ni, chosen like the volume client does:
 * --transport tcp: TCP; rdma: RDMA (the peer must serve it); auto: RDMA when
 * the peer serves it and an RDMA device reaches its address, else TCP.
 * Returns 0 with *x and *port set, or -ZL_ERR_CONN. */
static int peer_pick(struct zl_storage *st, const struct zl_node_info *ni, struct zl_xport **x,
		     uint16_t *port)
{
	bool has_rdma = ni->rdma_port && strstr(ni->transports, "rdma");
	enum zl_xport_kind kind = ZL_XPORT_TCP;

	if (st->sel != ZL_XPORT_SEL_TCP && has_rdma && st->xport_rdma)
		zl_xport_select_kind(st->sel, ni->addr, ni->rdma_port, PEER_CONNECT_MS, &kind);
	if (st->sel == ZL_XPORT_SEL_RDMA && kind != ZL_XPORT_RDMA) {
		ZL_LOG_WARN("storage",
			    "peer does not serve RDMA but --transport is rdma: node=%s addr=%s "
			    "transports=%s; start it with RDMA or use --transport auto",
			    ni->id, ni->addr, ni->transports);
		return -ZL_ERR_CONN;
	}
	if (kind == ZL_XPORT_RDMA) {
		*x = st->xport_rdma;
		*port = ni->rdma_port;
	} else {
		*x = st->xport_tcp;
		*port = ni->port;
	}
	return 0;
}

static int peer_connect(struct zl_storage_peers *p, struct storage_peer *pe)
{
	struct zl_storage *st = p->st;
	struct zl_node_info ni;
	struct zl_wire_hello hl;
	struct zl_xport *x = NULL;
	uint16_t port = 0;
	int rc;

	if (zl_now_ms() < pe->fail_until_ms)
		return -ZL_ERR_CONN;
	rc = zl_meta_node_get(st->etcd, st->cfg.prefix, pe->id, &ni);
	if (rc) {
		ZL_LOG_WARN("storage", "peer lookup failed: node=%s err=%s", pe->id,
			    zl_errname(rc));
		pe->fail_until_ms = zl_now_ms() + PEER_BACKOFF_MS;
		return rc == -ZL_ERR_NOT_FOUND ? rc : -ZL_ERR_CONN;
	}
	rc = peer_pick(st, &ni, &x, &port);
	if (rc) {
		pe->fail_until_ms = zl_now_ms() + PEER_BACKOFF_MS;
		return rc;
	}
	rc = zl_xport_connect(x, ni.addr, port, PEER_CONNECT_MS, peer_on_close, p, &pe->conn);
	if (rc) {
		ZL_LOG_WARN(
		    "storage", "connect to peer failed: node=%s addr=%s:%u transport=%s err=%s",
		    pe->id, ni.addr, port, zl_xport_kind_name(zl_xport_kind(x)), zl_errname(rc));
		pe->conn = NULL;
		pe->fail_until_ms = zl_now_ms() + PEER_BACKOFF_MS;
		return -ZL_ERR_CONN;
	}
	zl_xport_conn_set_ctx(pe->conn, pe);
	memset(&hl, 0, sizeof(hl));
	hl.proto_version = ZL_WIRE_VERSION;
	hl.caps = zl_xport_kind(x) == ZL_XPORT_RDMA ? 2u : 1u;
	snprintf(hl.node_id, sizeof(hl.node_id), "%s", st->cfg.node_id);
	zl_wire_hello_encode(&hl, pe->hello_out);
	memset(&pe->hello_hdr, 0, sizeof(pe->hello_hdr));
	pe->hello_hdr.opcode = ZL_OP_HELLO;
	rc = zl_xport_request(pe->conn, &pe->hello_hdr, pe->hello_out, ZL_WIRE_HELLO_SIZE,
			      pe->hello_in, ZL_WIRE_HELLO_SIZE, peer_hello_cb, pe);
	if (rc) {
		peer_drop_conn(pe);
		pe->fail_until_ms = zl_now_ms() + PEER_BACKOFF_MS;
		return -ZL_ERR_CONN;
	}
	pe->hello_pending = true;
	ZL_LOG_INFO("storage", "connected to peer node=%s addr=%s:%u transport=%s", pe->id, ni.addr,
		    port, zl_xport_kind_name(zl_xport_kind(x)));
	return 0;
}

int zl_storage_peer_send(struct zl_storage_peers *p, const char *node_id, struct zl_wire_hdr *hdr,
			 const void *out, uint32_t out_len, zl_xport_reply_cb cb, void *arg)
{
	struct storage_peer *pe;
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
		peer_drop_conn(pe);
	if (!pe->conn) {
		rc = peer_connect(p, pe);
		if (rc)
			return rc;
	}
	rc = zl_xport_request(pe->conn, hdr, out, out_len, NULL, 0, cb, arg);
	if (rc == -ZL_ERR_CONN)
		peer_drop_conn(pe);
	return rc;
}
