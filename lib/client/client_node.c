/* Storage node table and per-node connections of the volume client.
 *
 * A node's connections are opened on demand: connect (blocking, bounded),
 * then HELLO with our id; the reply must carry the node id we meant, else the
 * connection is closed (the address now belongs to another node). Requests
 * wait in the node's queue until a connection is READY. A failed connect or
 * HELLO puts the node in backoff, during which requests fail fast so reads
 * move to another replica and writes promote. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define NODE_BACKOFF_MIN_MS 50u
#define NODE_BACKOFF_MAX_MS 5000u
/* How long a node may answer the HELLO of our attach token with BUSY (it
 * has not seen our attachment yet: its etcd watch lags) before that is
 * taken as final. A storage daemon answers the final error itself once its
 * view has passed our epoch; this bounds a watch that never catches up. */
#define NODE_HELLO_BUSY_MS 10000u

bool client_node_is_down(const struct client_node *n, uint64_t now_ns)
{
	return n->gone || now_ns < n->down_until_ns;
}

static void node_mark_down(struct client_node *n, int err, const char *what)
{
	struct zl_client *c = n->c;

	n->tls_err = err == -ZL_ERR_TLS_CA || err == -ZL_ERR_TLS ? err : 0;
	c->last_node_err = err;
	snprintf(c->last_node_what, sizeof(c->last_node_what), "%s", what);
	snprintf(c->last_node_id, sizeof(c->last_node_id), "%s", n->id);
	snprintf(c->last_node_addr, sizeof(c->last_node_addr), "%s:%u", n->addr, n->port);
	n->backoff_ms =
	    n->backoff_ms ? ZL_MIN(n->backoff_ms * 2, NODE_BACKOFF_MAX_MS) : NODE_BACKOFF_MIN_MS;
	n->down_until_ns = zl_now_ns() + (uint64_t)n->backoff_ms * 1000000ull;
	if (zl_ratelimit_ok(&n->rl, 2))
		ZL_LOG_WARN(CLIENT_LOG,
			    "storage node unreachable: node=%s addr=%s:%u what=%s err=%s "
			    "retry_in_ms=%u client=%s",
			    n->id, n->addr, n->port, what, zl_strerror(err), n->backoff_ms, c->id);
}

struct client_node *client_node_find(struct zl_client *c, const char *id)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		if (strcmp(c->nodes[i]->id, id) == 0)
			return c->nodes[i];
	return NULL;
}

static struct client_node *node_add(struct zl_client *c, const char *id, enum zl_xport_select sel)
{
	struct client_node *twin = client_node_find(c, id);
	struct client_node *n;

	if (c->n_nodes == c->cap_nodes) {
		size_t cap = c->cap_nodes ? c->cap_nodes * 2 : 16;
		struct client_node **t = realloc(c->nodes, cap * sizeof(*t));

		if (!t)
			return NULL;
		c->nodes = t;
		c->cap_nodes = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->conns = calloc(c->conns_per_node, sizeof(*n->conns));
	if (!n->conns) {
		free(n);
		return NULL;
	}
	n->c = c;
	snprintf(n->id, sizeof(n->id), "%s", id);
	n->sel = sel;
	n->gone = true;
	if (twin) {
		/* Same node, another transport selection: same record. */
		memcpy(n->addr, twin->addr, sizeof(n->addr));
		memcpy(n->transports, twin->transports, sizeof(n->transports));
		n->port = twin->port;
		n->rdma_port = twin->rdma_port;
		n->tls = twin->tls;
		n->gone = twin->gone;
	}
	client_list_init(&n->waitq);
	for (uint32_t i = 0; i < c->conns_per_node; i++)
		n->conns[i].node = n;
	c->nodes[c->n_nodes++] = n;
	return n;
}

struct client_node *client_node_get_or_add(struct zl_client *c, const char *id,
					   enum zl_xport_select sel)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		if (c->nodes[i]->sel == sel && strcmp(c->nodes[i]->id, id) == 0)
			return c->nodes[i];
	return node_add(c, id, sel);
}

int client_xport_get(struct zl_client *c, enum zl_xport_kind kind, struct zl_xport **out)
{
	struct zl_xport_opts xo = {.kind = kind,
				   .timeout_ms = c->timeout_ms,
				   .tls_ca = c->tls_ca[0] ? c->tls_ca : NULL,
				   .tls_server_name = c->tls_server_name};
	int rc;

	if (kind != ZL_XPORT_TCP && kind != ZL_XPORT_RDMA)
		return -ZL_ERR_INVAL;
	if (!c->xports[kind]) {
		if (kind == ZL_XPORT_RDMA && c->rdma_unusable)
			return -ENODEV;
		rc = zl_xport_create(c->loop, &xo, &c->xports[kind]);
		if (rc) {
			c->xports[kind] = NULL;
			if (kind == ZL_XPORT_RDMA)
				c->rdma_unusable = true;
			ZL_LOG_ERR(CLIENT_LOG, "cannot create transport: kind=%s err=%s client=%s",
				   zl_xport_kind_name(kind), zl_strerror(rc), c->id);
			return rc;
		}
	}
	*out = c->xports[kind];
	return 0;
}

int client_pick_kind(struct zl_client *c, enum zl_xport_select sel, const char *id,
		     const char *addr, uint16_t rdma_port, const char *transports,
		     enum zl_xport_kind *kind)
{
	int tmo = (int)ZL_MIN(c->timeout_ms, CLIENT_CONNECT_MAX_MS);
	struct zl_xport *x;
	bool rdma_ok;
	int rc;

	/* rdma must work now; auto creates the transport only once a node
	 * needs it (and falls back to TCP when it cannot). */
	rdma_ok = sel == ZL_XPORT_SEL_RDMA ? client_xport_get(c, ZL_XPORT_RDMA, &x) == 0
					   : !c->rdma_unusable;
	rc = zl_xport_pick(sel, id, addr, rdma_port, transports, rdma_ok, tmo, kind);
	if (!rc && *kind == ZL_XPORT_RDMA && client_xport_get(c, ZL_XPORT_RDMA, &x))
		*kind = ZL_XPORT_TCP;
	return rc;
}

int client_node_xport(struct client_node *n, struct zl_xport **x, uint16_t *port)
{
	int rc;

	if (!n->kind) {
		rc = client_pick_kind(n->c, n->sel, n->id, n->addr, n->rdma_port, n->transports,
				      &n->kind);
		if (rc) {
			n->kind = 0;
			return rc;
		}
	}
	rc = client_xport_get(n->c, n->kind, x);
	if (rc)
		return rc;
	*port = n->kind == ZL_XPORT_RDMA ? n->rdma_port : n->port;
	return 0;
}

void client_node_close_conns(struct client_node *n)
{
	for (uint32_t i = 0; i < n->c->conns_per_node; i++) {
		struct client_conn *cc = &n->conns[i];

		if (cc->xc && (cc->state == CONN_HELLO || cc->state == CONN_READY)) {
			cc->state = CONN_CLOSING;
			zl_xport_conn_close(cc->xc);
		}
	}
}

bool client_node_idle(const struct client_node *n)
{
	for (uint32_t i = 0; i < n->c->conns_per_node; i++)
		if (n->conns[i].xc || n->conns[i].hello_pending)
			return false;
	return true;
}

void client_node_free(struct client_node *n)
{
	if (!n)
		return;
	free(n->conns);
	free(n);
}

int client_nodes_refresh(struct zl_client *c)
{
	struct zl_node_info *list = NULL;
	size_t cnt = 0;
	int rc;

	rc = zl_meta_node_list(c->etcd, c->prefix, &list, &cnt);
	if (rc) {
		ZL_LOG_WARN(CLIENT_LOG, "cannot list storage nodes from etcd: err=%s detail=%s",
			    zl_strerror(rc), zl_etcd_last_error());
		return rc;
	}
	rc = client_nodes_apply(c, list, cnt);
	free(list);
	return rc;
}

int client_nodes_apply(struct zl_client *c, const struct zl_node_info *list, size_t cnt)
{
	int rc = 0;

	/* Known nodes without a record are gone: fail what waits for them. */
	for (size_t i = 0; i < c->n_nodes; i++) {
		bool listed = false;
		struct client_node *n = c->nodes[i];

		for (size_t j = 0; j < cnt; j++)
			if (strcmp(list[j].id, n->id) == 0)
				listed = true;
		if (!listed && !n->gone) {
			ZL_LOG_WARN(
			    CLIENT_LOG,
			    "storage node left etcd, treating it as down: node=%s addr=%s:%u",
			    n->id, n->addr, n->port);
			n->gone = true;
			client_node_close_conns(n);
			client_node_kick(n);
		}
	}
	for (size_t j = 0; j < cnt; j++) {
		const struct zl_node_info *ni = &list[j];

		/* Every listed node has an entry under the client's selection. */
		if (!client_node_get_or_add(c, ni->id, c->sel)) {
			rc = -ENOMEM;
			break;
		}
		for (size_t i = 0; i < c->n_nodes; i++) {
			struct client_node *n = c->nodes[i];

			if (strcmp(n->id, ni->id) != 0)
				continue;
			if (strcmp(n->addr, ni->addr) != 0 || n->port != ni->port ||
			    n->rdma_port != ni->rdma_port || n->tls != ni->tls ||
			    strcmp(n->transports, ni->transports) != 0) {
				if (n->addr[0])
					ZL_LOG_INFO(CLIENT_LOG,
						    "storage node moved: node=%s old=%s:%u/%s "
						    "new=%s:%u/%s",
						    n->id, n->addr, n->port, n->transports,
						    ni->addr, ni->port, ni->transports);
				client_node_close_conns(n);
				snprintf(n->addr, sizeof(n->addr), "%s", ni->addr);
				snprintf(n->transports, sizeof(n->transports), "%s",
					 ni->transports);
				n->port = ni->port;
				n->rdma_port = ni->rdma_port;
				n->tls = ni->tls;
				n->kind = 0; /* pick again at the next connect */
				n->down_until_ns = 0;
				n->backoff_ms = 0;
			}
			if (n->gone) {
				n->gone = false;
				n->down_until_ns = 0;
				n->backoff_ms = 0;
			}
		}
	}
	c->nodes_loaded_ns = zl_now_ns();
	return rc;
}

static void conn_close_cb(void *arg, struct zl_xport_conn *xc, int reason)
{
	struct client_conn *cc = arg;
	struct client_node *n = cc->node;

	if (cc->xc == xc) {
		cc->xc = NULL;
		cc->state = CONN_IDLE;
	}
	ZL_LOG_DEBUG(CLIENT_LOG, "connection closed: node=%s addr=%s:%u reason=%s", n->id, n->addr,
		     n->port, zl_strerror(reason));
	zl_xport_conn_put(xc);
	client_node_kick(n);
}

/* A HELLO of our attach credential answered err: is the refusal final for
 * the volume? The storage answers AUTH (bad or missing token), STALE (our
 * epoch is fenced) and NOT_ATTACHED (its view of attachments has passed our
 * epoch and holds none of ours) only once it knows; BUSY (not seen yet)
 * turns final once it outlasts NODE_HELLO_BUSY_MS. */
static void conn_hello_refused(struct client_node *n, int err)
{
	struct zl_client *c = n->c;
	uint64_t now = zl_now_ns();
	char why[512];

	if (c->cred.cluster)
		return; /* a cluster credential: zl and peers report it themselves */
	if (err != -ZL_ERR_BUSY)
		n->hello_busy_ns = 0;
	switch (-err) {
	case ZL_ERR_STALE:
		if (c->cred.token && c->cred.token[0])
			client_vol_fence(c, c->cred.vol_id, "the HELLO of our attach token was "
							    "answered STALE");
		return;
	case ZL_ERR_AUTH:
		snprintf(why, sizeof(why), "storage node %s refused %s", n->id,
			 c->cred.token && c->cred.token[0]
			     ? "our attach token (not the volume's, or another node's: "
			       "ControllerPublish the volume to this node again)"
			     : "a client without an attach token (ControllerPublish the volume "
			       "to this node first)");
		break;
	case ZL_ERR_NOT_ATTACHED:
		snprintf(why, sizeof(why),
			 "storage node %s knows no attachment of this volume to %s at epoch %llu "
			 "(ControllerPublish it to this node first)",
			 n->id, c->id, (unsigned long long)c->epoch);
		break;
	case ZL_ERR_BUSY:
		if (!n->hello_busy_ns) {
			n->hello_busy_ns = now;
			return;
		}
		if (now - n->hello_busy_ns < (uint64_t)NODE_HELLO_BUSY_MS * 1000000ull)
			return;
		err = -ZL_ERR_NOT_ATTACHED;
		snprintf(why, sizeof(why),
			 "storage node %s has not seen an attachment of this volume to %s at "
			 "epoch %llu for %u s (ControllerPublish it to this node first; or its "
			 "etcd watch lags)",
			 n->id, c->id, (unsigned long long)c->epoch, NODE_HELLO_BUSY_MS / 1000);
		break;
	default:
		return;
	}
	client_vol_refuse(c, c->cred.vol_id, err, why);
}

static void conn_hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct client_conn *cc = arg;
	struct client_node *n = cc->node;
	struct zl_wire_hello hl;
	int err;

	cc->hello_pending = false;
	if (cc->state != CONN_HELLO)
		goto out_kick;
	err = zl_xport_hello_check(&cc->hello, status, rep, n->id, &hl);
	if (err && !status && rep && rep->status)
		conn_hello_refused(n, err); /* the node said no: is it final? */
	if (err) {
		node_mark_down(n, err, "HELLO");
		cc->state = CONN_CLOSING;
		zl_xport_conn_close(cc->xc);
		goto out_kick;
	}
	cc->state = CONN_READY;
	cc->snapseq = (hl.caps & ZL_WIRE_CAP_SNAPSEQ) != 0;
	n->tls_err = 0;
	n->backoff_ms = 0;
	n->down_until_ns = 0;
	n->hello_busy_ns = 0;
	ZL_LOG_INFO(CLIENT_LOG, "connected: node=%s addr=%s:%u transport=%s client=%s", n->id,
		    n->addr, n->kind == ZL_XPORT_RDMA ? n->rdma_port : n->port,
		    zl_xport_kind_name(zl_xport_conn_kind(cc->xc)), n->c->id);
out_kick:
	client_node_kick(n);
}

/* Connects an idle slot and sends HELLO. 0 or an error (node marked down). */
static int conn_open(struct client_conn *cc)
{
	struct client_node *n = cc->node;
	struct zl_client *c = n->c;
	int tmo = (int)ZL_MIN(c->timeout_ms, CLIENT_CONNECT_MAX_MS);
	struct zl_xport *x = NULL;
	uint16_t port = 0;
	int rc;

	rc = client_node_xport(n, &x, &port);
	if (rc) {
		cc->xc = NULL;
		node_mark_down(n, rc, "transport");
		return rc;
	}
	rc = zl_xport_connect_node(x, n->id, n->addr, port, n->tls, tmo, conn_close_cb, cc,
				   &cc->xc);
	if (rc) {
		cc->xc = NULL;
		node_mark_down(n, rc, "connect");
		return rc;
	}
	rc = zl_xport_hello_send_cred(cc->xc, &cc->hello, c->id, &c->cred, conn_hello_cb, cc);
	if (rc) {
		node_mark_down(n, rc, "HELLO send");
		cc->state = CONN_CLOSING;
		zl_xport_conn_close(cc->xc);
		return rc;
	}
	cc->hello_pending = true;
	cc->state = CONN_HELLO;
	return 0;
}

/* Sets ZL_WF_SEQ of s for connection cc: a write-class op carries its
 * sequence where the node reads it (docs/SNAPSHOTS.md §1), a snapshot READ
 * must. False when s cannot go on cc: a snapshot READ, or a write of a
 * snapshotted volume (s->seq > 0), to a node that does not take sequences
 * (it would neither preserve the snapshot nor refuse a stale write). */
static bool conn_seq_set(const struct client_conn *cc, struct client_sub *s)
{
	bool seq_op = s->op == ZL_OP_WRITE || s->op == ZL_OP_DISCARD ||
		      s->op == ZL_OP_WRITE_ZEROES || (s->op == ZL_OP_READ && s->seq);

	s->hdr.flags &= (uint8_t)~ZL_WF_SEQ;
	s->hdr.snap_seq = 0;
	if (!seq_op)
		return true;
	if (!cc->snapseq)
		return s->seq == 0;
	s->hdr.flags |= ZL_WF_SEQ;
	s->hdr.snap_seq = s->seq;
	return true;
}

/* Hands s to a READY connection, round robin. 0, or -ZL_ERR_BUSY when every
 * ready connection is full, -ZL_ERR_CONN when none is ready, -ZL_ERR_VERSION
 * when every ready one goes to storage that does not take the snapshot
 * sequence s needs (conn_seq_set). */
static int node_try_send(struct client_node *n, struct client_sub *s)
{
	struct zl_client *c = n->c;
	int result = -ZL_ERR_CONN;
	const void *out = NULL;
	uint32_t out_len = 0;
	void *in = NULL;
	uint32_t in_cap = 0;

	if (s->op == ZL_OP_WRITE) {
		out = s->buf;
		out_len = s->length;
	} else if (s->op == ZL_OP_READ) {
		in = s->buf;
		in_cap = s->length;
	}
	for (uint32_t i = 0; i < c->conns_per_node; i++) {
		uint32_t k = (n->rr + i) % c->conns_per_node;
		struct client_conn *cc = &n->conns[k];
		int rc;

		if (cc->state != CONN_READY)
			continue;
		if (!conn_seq_set(cc, s)) {
			if (result == -ZL_ERR_CONN)
				result = -ZL_ERR_VERSION;
			continue;
		}
		rc = zl_xport_request(cc->xc, &s->hdr, out, out_len, in, in_cap,
				      client_sub_reply_cb, s);
		if (rc == 0) {
			n->rr = k + 1;
			s->state = SUB_SENT;
			s->vol->inflight_reqs++;
			return 0;
		}
		if (rc == -ZL_ERR_BUSY)
			result = -ZL_ERR_BUSY;
	}
	return result;
}

static bool node_has_live_conn(const struct client_node *n)
{
	for (uint32_t i = 0; i < n->c->conns_per_node; i++)
		if (n->conns[i].state == CONN_HELLO || n->conns[i].state == CONN_READY)
			return true;
	return false;
}

/* Opens every idle slot (conns_per_node is the parallelism we want), unless
 * the node failed recently. */
static void node_open_idle(struct client_node *n)
{
	struct zl_client *c = n->c;

	if (n->gone || c->destroying || client_node_is_down(n, zl_now_ns()))
		return;
	for (uint32_t i = 0; i < c->conns_per_node; i++) {
		struct client_conn *cc = &n->conns[i];

		if (cc->state == CONN_IDLE && !cc->hello_pending && !cc->xc) {
			if (conn_open(cc))
				break;
		}
	}
}

int client_node_submit(struct client_node *n, struct client_sub *s)
{
	struct zl_client *c = n->c;

	if (n->gone || c->destroying)
		return -ZL_ERR_CONN;
	if (client_list_empty(&n->waitq)) {
		int rc = node_try_send(n, s);

		if (rc == 0 || rc == -ZL_ERR_VERSION)
			return rc;
	}
	node_open_idle(n);
	if (!node_has_live_conn(n))
		return n->tls_err ? n->tls_err : -ZL_ERR_CONN;
	s->state = SUB_WAIT;
	client_list_add_tail(&n->waitq, &s->link);
	return 0;
}

void client_node_kick(struct client_node *n)
{
	struct client_list *l;
	int rc;

	/* Every reply kicks; nothing queued (the common case) is nothing to do. */
	if (client_list_empty(&n->waitq))
		return;
	/* Queued requests whose connections all closed (peer restart, address
	 * change) get fresh ones first; they fail only if the node is down. */
	if (!node_has_live_conn(n))
		node_open_idle(n);
	while (!client_list_empty(&n->waitq)) {
		struct client_sub *s = ZL_CONTAINER_OF(n->waitq.next, struct client_sub, link);

		if (n->gone || !node_has_live_conn(n))
			break;
		client_list_del(&s->link);
		rc = node_try_send(n, s);
		if (rc == 0)
			continue;
		if (rc == -ZL_ERR_VERSION) {
			client_sub_fail_async(s, rc);
			continue;
		}
		/* No slot now: back to the head; a reply or HELLO kicks again. */
		s->link.next = n->waitq.next;
		s->link.prev = &n->waitq;
		n->waitq.next->prev = &s->link;
		n->waitq.next = &s->link;
		return;
	}
	if (n->gone || !node_has_live_conn(n)) {
		while ((l = client_list_pop(&n->waitq))) {
			struct client_sub *s = ZL_CONTAINER_OF(l, struct client_sub, link);

			client_sub_fail_async(s, n->tls_err ? n->tls_err : -ZL_ERR_CONN);
		}
	}
}
