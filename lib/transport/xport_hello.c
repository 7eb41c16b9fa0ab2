/* Transport choice and HELLO for connections to storage nodes (see
 * xport_hello.h). */
#include "xport_hello.h"
#include "transport_internal.h"

#include <stdio.h>
#include <string.h>

#include "../common/common.h"

#define HELLO_LOG "xport"

/* True when the comma-separated list names `want`. */
static bool hello_list_has(const char *list, const char *want)
{
	size_t n = strlen(want);

	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && !strncmp(p, want, n))
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

static int hello_connect_node(struct zl_xport *x, const char *node_id, const char *addr,
			      uint16_t port, bool tls, bool nowait, int timeout_ms,
			      zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out)
{
	int rc;

	if (!x || !addr)
		return -ZL_ERR_INVAL;
	tls = tls && zl_xport_kind(x) == ZL_XPORT_TCP;
	if (nowait)
		rc = zl_xport_connect_start(x, addr, port, tls, timeout_ms, on_close, arg, out);
	else if (!tls)
		return zl_xport_connect(x, addr, port, timeout_ms, on_close, arg, out);
	else
		rc = zl_xport_connect_tls(x, addr, port, timeout_ms, on_close, arg, out);
	if (rc == -ZL_ERR_TLS_CA) {
		char msg[256];

		snprintf(msg, sizeof(msg),
			 "storage %s at %s:%u requires TLS: pass --tls-ca FILE (the cluster's CA; "
			 "or set ZIPLINE_TLS_CA)",
			 node_id ? node_id : "?", addr, port);
		xport_tls_note(msg);
		ZL_LOG_ERR(HELLO_LOG, "%s", msg);
	}
	return rc;
}

int zl_xport_connect_node(struct zl_xport *x, const char *node_id, const char *addr,
			  uint16_t port, bool tls, int timeout_ms, zl_xport_close_cb on_close,
			  void *arg, struct zl_xport_conn **out)
{
	return hello_connect_node(x, node_id, addr, port, tls, false, timeout_ms, on_close, arg,
				  out);
}

int zl_xport_connect_node_start(struct zl_xport *x, const char *node_id, const char *addr,
				uint16_t port, bool tls, int timeout_ms,
				zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out)
{
	return hello_connect_node(x, node_id, addr, port, tls, true, timeout_ms, on_close, arg,
				  out);
}

int zl_xport_pick(enum zl_xport_select sel, const char *node_id, const char *addr,
		  uint16_t rdma_port, const char *transports, bool rdma_ok, int timeout_ms,
		  enum zl_xport_kind *out)
{
	bool serves_rdma = rdma_port && transports && hello_list_has(transports, "rdma");

	if (!out || !addr)
		return -ZL_ERR_INVAL;
	*out = ZL_XPORT_TCP;
	switch (sel) {
	case ZL_XPORT_SEL_TCP:
		return 0;
	case ZL_XPORT_SEL_RDMA:
		if (!serves_rdma) {
			ZL_LOG_ERR(HELLO_LOG,
				   "transport rdma asked but the storage node serves no RDMA: "
				   "node=%s addr=%s transports=%s (start it with --transport "
				   "auto|rdma on an RDMA device, or use transport auto|tcp)",
				   node_id, addr, transports ? transports : "");
			return -ZL_ERR_CONN;
		}
		if (!rdma_ok) {
			ZL_LOG_ERR(HELLO_LOG,
				   "transport rdma asked but this host has no usable RDMA "
				   "transport: node=%s addr=%s (load the RDMA driver, or use "
				   "transport auto|tcp)",
				   node_id, addr);
			return -ZL_ERR_CONN;
		}
		*out = ZL_XPORT_RDMA;
		return 0;
	case ZL_XPORT_SEL_AUTO:
		if (!serves_rdma || !rdma_ok)
			return 0;
		return zl_xport_select_kind(ZL_XPORT_SEL_AUTO, addr, rdma_port, timeout_ms, out);
	}
	return -ZL_ERR_INVAL;
}

void zl_xport_hello_encode(uint8_t out[ZL_WIRE_HELLO_SIZE], const char *self_id, uint32_t caps,
			   const char *token)
{
	struct zl_wire_hello hl;

	memset(&hl, 0, sizeof(hl));
	hl.proto_version = ZL_WIRE_VERSION;
	hl.caps = caps;
	snprintf(hl.node_id, sizeof(hl.node_id), "%s", self_id ? self_id : "");
	if (token)
		snprintf(hl.token, sizeof(hl.token), "%s", token);
	zl_wire_hello_encode(&hl, out);
}

int zl_xport_hello_send_cred(struct zl_xport_conn *c, struct zl_xport_hello *h,
			     const char *self_id, const struct zl_xport_cred *cred,
			     zl_xport_reply_cb cb, void *arg)
{
	uint32_t caps = zl_xport_conn_kind(c) == ZL_XPORT_RDMA ? ZL_WIRE_CAP_RDMA : ZL_WIRE_CAP_TCP;

	if (cred && cred->cluster)
		caps |= ZL_WIRE_CAP_CLUSTER;
	if (cred)
		caps |= cred->caps & ZL_WIRE_CAP_SNAPSEQ;
	snprintf(h->peer, sizeof(h->peer), "%s", zl_xport_conn_peer(c));
	zl_xport_hello_encode(h->out, self_id, caps, cred ? cred->token : NULL);
	memset(&h->hdr, 0, sizeof(h->hdr));
	h->hdr.opcode = ZL_OP_HELLO;
	h->hdr.vol_id = cred ? cred->vol_id : 0;
	h->hdr.epoch = cred ? cred->epoch : 0;
	return zl_xport_request(c, &h->hdr, h->out, ZL_WIRE_HELLO_SIZE, h->in, ZL_WIRE_HELLO_SIZE,
				cb, arg);
}

int zl_xport_hello_send(struct zl_xport_conn *c, struct zl_xport_hello *h, const char *self_id,
			uint64_t epoch, const char *token, zl_xport_reply_cb cb, void *arg)
{
	const struct zl_xport_cred cred = {.epoch = epoch, .token = token};

	return zl_xport_hello_send_cred(c, h, self_id, &cred, cb, arg);
}

int zl_xport_hello_check(const struct zl_xport_hello *h, int status, const struct zl_wire_hdr *rep,
			 const char *expect_id, struct zl_wire_hello *out)
{
	struct zl_wire_hello hl;
	const char *what;
	int err;

	if (status || !rep)
		return status ? status : -ZL_ERR_CONN; /* the caller reports the transport */
	if (rep->status) {
		err = zl_wire_status_to_err(rep->status);
		what = "refused";
	} else if (zl_wire_hello_decode(h->in, rep->payload_len, &hl)) {
		err = -ZL_ERR_PROTO;
		what = "malformed reply";
	} else if (hl.proto_version != ZL_WIRE_VERSION) {
		err = -ZL_ERR_VERSION;
		what = "other protocol version";
	} else if (!(hl.caps & ZL_WIRE_CAP_TCP) ||
		   (hl.caps & ~(ZL_WIRE_CAP_ALL_ | ZL_WIRE_CAP_SNAPSEQ))) {
		err = -ZL_ERR_PROTO;
		what = "bad transport list";
	} else if (expect_id && strcmp(hl.node_id, expect_id) != 0) {
		ZL_LOG_WARN(HELLO_LOG,
			    "address answers as another node, closing: addr=%s expected=%s got=%s "
			    "(the address was reused; nodes/ in etcd is stale)",
			    h->peer, expect_id, hl.node_id);
		return -ZL_ERR_CONN;
	} else {
		if (out)
			*out = hl;
		return 0;
	}
	ZL_LOG_WARN(HELLO_LOG, "HELLO failed: addr=%s node=%s what=\"%s\" err=%s", h->peer,
		    expect_id ? expect_id : "-", what, zl_strerror(err));
	return err;
}

const char *zl_xport_caps_name(uint32_t caps)
{
	switch (caps & ZL_WIRE_CAP_ALL_) {
	case ZL_WIRE_CAP_TCP:
		return "tcp";
	case ZL_WIRE_CAP_RDMA:
		return "rdma";
	case ZL_WIRE_CAP_ALL_:
		return "tcp,rdma";
	}
	return "none";
}
