/* Forwarding: the requests this storage daemon sends to other storage nodes
 * (a primary's REPL_WRITE to its backups; recovery, peering and scrub send
 * theirs over the same connections). One connection per node, found through
 * nodes/<id> in etcd, cached, re-resolved and reconnected after a failure.
 * Nothing here waits: the look-up of nodes/<id> (and the choice of the
 * transport) runs on a helper thread of this module with its own etcd
 * handle, requests to a node being looked up queue (at most FWD_QUEUE_MAX),
 * and the connect itself does not wait (zl_xport_connect_node_start: the
 * transport queues the requests until the connection is up; RDMA's connect
 * still waits, bounded by FWD_CONNECT_MS). HELLO is pipelined ahead of the
 * first request; a reply naming another node (an address reused after a
 * restart) closes the connection, which fails the requests behind it. Loop
 * thread only, but for the look-up. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/slab.h"
#include "storage_io.h"

#define FWD_CONNECT_MS 2000
#define FWD_CLOSE_WAIT_MS 2000 /* teardown: the close work of our connections */
/* After a failed connect, fail fast for this long instead of blocking the
 * loop on every forwarded write (the backup is being dropped anyway). */
#define FWD_BACKOFF_MS 1000
/* A node said near full and no reply refreshed it for this long: a PING
 * asks again (fwd_probe_tick). */
#define FWD_FULL_PROBE_MS 1000
/* Requests waiting for a node's look-up; more are answered BUSY. */
#define FWD_QUEUE_MAX 128

/* A request waiting for its node's look-up: zl_storage_fwd_request's
 * arguments (the header copied). */
struct fwd_pend {
	struct fwd_pend *next;
	struct zl_wire_hdr hdr;
	const void *out;
	uint32_t out_len;
	const uint32_t *out_crcs; /* the caller's, valid until cb like out */
	void *in;
	uint32_t in_cap;
	zl_xport_reply_cb cb;
	void *arg;
};

struct fwd_node {
	struct fwd_node *next;
	struct zl_storage_fwd *owner;
	char id[ZL_NODE_ID_MAX];
	struct zl_xport_conn *conn;
	uint64_t fail_until_ms;
	struct zl_xport_hello hello;
	bool hello_pending;
	/* The look-up on the helper thread (lookup.busy): its answer (rc, ni,
	 * kind) is the helper's until done runs. pend: the requests waiting
	 * for it, in order. */
	struct zl_work lookup;
	int lookup_rc;
	struct zl_node_info ni;
	enum zl_xport_kind kind;
	struct fwd_pend *pend, **pend_tail;
	uint32_t n_pend;
	/* Its room (zl_storage_fwd_note_room): near full when its last reply
	 * said so (at full_ms); probing: a PING asking again is in flight,
	 * holding pe as its callback argument (freed by it after destroy). */
	bool full, probing;
	uint64_t full_ms;
	struct zl_wire_hdr probe;
};

struct zl_storage_fwd {
	struct zl_storage *st;
	struct fwd_node *list;
	struct zl_worker *worker; /* the look-ups */
	struct zl_etcd *etcd;	  /* the helper thread's */
	struct zl_slab pends;	  /* struct fwd_pend: no malloc per queued forward */
	uint32_t n_full;	  /* nodes whose last word was near full */
	struct zl_timer probe_t;  /* fwd_probe_tick, while n_full */
	bool destroying;
};

int zl_storage_fwd_create(struct zl_storage *st, struct zl_storage_fwd **out)
{
	struct zl_storage_fwd *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return -ENOMEM;
	p->st = st;
	zl_slab_init(&p->pends, sizeof(struct fwd_pend), FWD_QUEUE_MAX);
	rc = zl_etcd_create(&st->cfg.eo, &p->etcd);
	if (!rc)
		rc = zl_worker_create(st->loop, &p->worker);
	if (rc) {
		zl_storage_fwd_destroy(p);
		return rc;
	}
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

/* Answers the requests waiting for pe's look-up with err (0: sends them on
 * pe->conn, those it refuses answered with its error). */
static void fwd_pend_flush(struct fwd_node *pe, int err)
{
	struct fwd_pend *q = pe->pend;

	/* The callbacks may forward again (to this node too). */
	pe->pend = NULL;
	pe->pend_tail = &pe->pend;
	pe->n_pend = 0;
	while (q) {
		struct fwd_pend *next = q->next;
		int rc = err;

		if (!rc && !(pe->conn && zl_xport_conn_alive(pe->conn)))
			rc = -ZL_ERR_CONN;
		if (!rc)
			rc = zl_xport_request_crcs(pe->conn, &q->hdr, q->out, q->out_len,
						   q->out_crcs, q->in, q->in_cap, q->cb, q->arg);
		if (rc)
			q->cb(q->arg, rc, NULL);
		zl_slab_free(&pe->owner->pends, q);
		q = next;
	}
}

void zl_storage_fwd_destroy(struct zl_storage_fwd *p)
{
	struct zl_xport_conn **closing = NULL;
	size_t n = 0, cap = 0;
	uint64_t deadline;

	if (!p)
		return;
	p->destroying = true;
	zl_timer_stop(p->st->loop, &p->probe_t);
	/* Waits for the look-up it runs; the done parts see destroying. */
	zl_worker_destroy(p->worker);
	zl_etcd_destroy(p->etcd);
	while (p->list) {
		struct fwd_node *pe = p->list;

		p->list = pe->next;
		fwd_pend_flush(pe, -ZL_ERR_CONN);
		if (pe->conn) {
			if (n == cap) {
				size_t c2 = cap ? 2 * cap : 16;
				struct zl_xport_conn **v = realloc(closing, c2 * sizeof(*v));

				if (v) {
					closing = v;
					cap = c2;
				}
			}
			if (n < cap) {
				zl_xport_conn_get(pe->conn);
				closing[n++] = pe->conn;
			}
		}
		fwd_drop_conn(pe);
		/* A HELLO still in flight holds pe as its callback argument: the
		 * transport fails it when the connection closes. */
		if (!pe->hello_pending && !pe->probing)
			free(pe);
		else
			pe->owner = NULL;
	}
	/* Their close work is deferred: it fails the requests still on them
	 * (queued behind a connect in progress too), whose callbacks reach
	 * heal, peering and scrub. It runs here, while those still exist
	 * (main.c destroys them after this module): a daemon stopped during
	 * a peer connect crashed in peering's callback otherwise. */
	deadline = zl_now_ms() + FWD_CLOSE_WAIT_MS;
	for (size_t i = 0; i < n; i++) {
		while (!zl_xport_conn_closed(closing[i]) && zl_now_ms() < deadline)
			zl_loop_run_once(p->st->loop, 10);
		zl_xport_conn_put(closing[i]);
	}
	free(closing);
	zl_slab_fini(&p->pends);
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
		if (!pe->probing)
			free(pe);
		return;
	}
	err = zl_xport_hello_check(&pe->hello, status, rep, pe->id, NULL);
	if (err && pe->conn) {
		/* Also a connect that failed or timed out (the HELLO is its
		 * first request): fail fast for a while. */
		ZL_LOG_WARN("storage", "HELLO to peer failed: node=%s peer=%s err=%s", pe->id,
			    zl_xport_conn_peer(pe->conn), zl_errname(err));
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
		fwd_drop_conn(pe);
	} else if (!err && pe->conn) {
		ZL_LOG_INFO("storage", "connected to peer node=%s addr=%s transport=%s", pe->id,
			    zl_xport_conn_peer(pe->conn),
			    zl_xport_kind_name(zl_xport_conn_kind(pe->conn)));
	}
}

/* Helper thread: where node pe->id is and which transport reaches it. */
static void fwd_lookup_run(struct zl_work *w)
{
	struct fwd_node *pe = ZL_CONTAINER_OF(w, struct fwd_node, lookup);
	struct zl_storage_fwd *p = pe->owner;
	struct zl_storage *st = p->st;
	struct zl_node_info *ni = &pe->ni;
	int rc;

	rc = zl_meta_node_get(p->etcd, st->cfg.prefix, pe->id, ni);
	if (rc) {
		ZL_LOG_WARN("storage", "peer lookup failed: node=%s err=%s", pe->id,
			    zl_errname(rc));
		pe->lookup_rc = rc == -ZL_ERR_NOT_FOUND ? rc : -ZL_ERR_CONN;
		return;
	}
	/* Chosen like the volume client does; --transport is the selection. */
	rc = zl_xport_pick(st->sel, ni->id, ni->addr, ni->rdma_port, ni->transports,
			   st->xport_rdma != NULL, FWD_CONNECT_MS, &pe->kind);
	pe->lookup_rc = rc ? -ZL_ERR_CONN : 0;
}

/* Connects to the node pe->ni names (without waiting for TCP) and pipelines
 * the HELLO. 0 or -ZL_ERR_CONN. */
static int fwd_connect(struct zl_storage_fwd *p, struct fwd_node *pe)
{
	struct zl_storage *st = p->st;
	const struct zl_node_info *ni = &pe->ni;
	struct zl_xport *x = pe->kind == ZL_XPORT_RDMA ? st->xport_rdma : st->xport_tcp;
	uint16_t port = pe->kind == ZL_XPORT_RDMA ? ni->rdma_port : ni->port;
	int rc;

	rc = zl_xport_connect_node_start(x, ni->id, ni->addr, port, ni->tls, FWD_CONNECT_MS,
					 fwd_on_close, p, &pe->conn);
	if (rc) {
		ZL_LOG_WARN(
		    "storage", "connect to peer failed: node=%s addr=%s:%u transport=%s err=%s",
		    pe->id, ni->addr, port, zl_xport_kind_name(zl_xport_kind(x)), zl_errname(rc));
		pe->conn = NULL;
		return -ZL_ERR_CONN;
	}
	zl_xport_conn_set_ctx(pe->conn, pe);
	{
		/* Forwarding, recovery, peering and scrub: the cluster token
		 * (docs/SECURITY.md); none without a cluster key. */
		char tok[65];
		const struct zl_xport_cred cred = {
		    .token = zl_storage_auth_token(st, tok) ? NULL : tok,
		    .cluster = true,
		    /* REPL_WRITEs carry the client's snapshot sequence. */
		    .caps = ZL_WIRE_CAP_SNAPSEQ};

		rc = zl_xport_hello_send_cred(pe->conn, &pe->hello, st->cfg.node_id, &cred,
					      fwd_hello_cb, pe);
		explicit_bzero(tok, sizeof(tok));
	}
	if (rc) {
		fwd_drop_conn(pe);
		return -ZL_ERR_CONN;
	}
	pe->hello_pending = true;
	/* A failed connect fails the HELLO: fwd_hello_cb backs off. */
	ZL_LOG_INFO("storage", "connecting to peer node=%s addr=%s:%u transport=%s", pe->id,
		    ni->addr, port, zl_xport_kind_name(zl_xport_kind(x)));
	return 0;
}

/* Loop thread: the look-up answered; connect and send what waited. */
static void fwd_lookup_done(struct zl_work *w)
{
	struct fwd_node *pe = ZL_CONTAINER_OF(w, struct fwd_node, lookup);
	struct zl_storage_fwd *p = pe->owner;
	int rc = w->cancelled ? -ZL_ERR_CONN : pe->lookup_rc;

	if (p->destroying) {
		fwd_pend_flush(pe, -ZL_ERR_CONN);
		return;
	}
	if (!rc && !pe->conn)
		rc = fwd_connect(p, pe);
	if (rc)
		pe->fail_until_ms = zl_now_ms() + FWD_BACKOFF_MS;
	fwd_pend_flush(pe, rc);
}

static int fwd_request(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
		       const void *out, uint32_t out_len, const uint32_t *out_crcs, void *in,
		       uint32_t in_cap, zl_xport_reply_cb cb, void *arg);

static struct fwd_node *fwd_find(struct zl_storage_fwd *p, const char *node_id)
{
	struct fwd_node *pe;

	for (pe = p->list; pe; pe = pe->next)
		if (!strcmp(pe->id, node_id))
			break;
	return pe;
}

/* ---- peers' room ---- */

static void fwd_probe_tick(void *arg);

static void fwd_room(struct zl_storage_fwd *p, struct fwd_node *pe, bool near_full)
{
	pe->full_ms = zl_now_ms();
	if (pe->full == near_full)
		return;
	pe->full = near_full;
	p->n_full += near_full ? 1u : (uint32_t)-1;
	if (near_full) {
		ZL_LOG_WARN("storage",
			    "peer data dir near full: node=%s; writes that need new space fail "
			    "NOSPC on slices whose members with room would fall below min_size "
			    "(free space on %s or add capacity)",
			    pe->id, pe->id);
		if (p->n_full == 1)
			zl_timer_start(p->st->loop, &p->probe_t, FWD_FULL_PROBE_MS,
				       FWD_FULL_PROBE_MS, fwd_probe_tick, p);
	} else {
		ZL_LOG_INFO("storage", "peer data dir has room again: node=%s", pe->id);
		if (!p->n_full)
			zl_timer_stop(p->st->loop, &p->probe_t);
	}
}

void zl_storage_fwd_note_room(struct zl_storage_fwd *p, const char *node_id, bool near_full)
{
	struct fwd_node *pe = fwd_find(p, node_id);

	if (pe && !p->destroying)
		fwd_room(p, pe, near_full);
}

static void fwd_probe_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct fwd_node *pe = arg;

	pe->probing = false;
	if (!pe->owner) { /* destroyed meanwhile */
		if (!pe->hello_pending)
			free(pe);
		return;
	}
	/* No answer: near full for all we know, asked again at the next
	 * tick. */
	if (!status && rep && !rep->status && !pe->owner->destroying)
		fwd_room(pe->owner, pe, rep->aux & ZL_REPLY_NEAR_FULL);
}

/* While a node's last word was near full: every FWD_FULL_PROBE_MS, a PING
 * to each such node no reply refreshed for that long (one in flight per
 * node), so a node whose rows stopped forwarding new space to it is seen
 * to have room again. */
static void fwd_probe_tick(void *arg)
{
	struct zl_storage_fwd *p = arg;
	uint64_t now = zl_now_ms();

	for (struct fwd_node *pe = p->list; pe; pe = pe->next) {
		if (!pe->full || pe->probing || now - pe->full_ms < FWD_FULL_PROBE_MS)
			continue;
		memset(&pe->probe, 0, sizeof(pe->probe));
		pe->probe.opcode = ZL_OP_PING;
		pe->probing =
		    !fwd_request(p, pe->id, &pe->probe, NULL, 0, NULL, NULL, 0, fwd_probe_cb, pe);
	}
}

bool zl_storage_fwd_full(struct zl_storage_fwd *p, const char *node_id)
{
	struct fwd_node *pe;

	if (!p->n_full)
		return false;
	pe = fwd_find(p, node_id);
	return pe && pe->full;
}

bool zl_storage_fwd_any_full(const struct zl_storage_fwd *p)
{
	return p->n_full != 0;
}

uint32_t zl_storage_fwd_n_full(const struct zl_storage_fwd *p)
{
	return p->n_full;
}

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
	struct fwd_node *pe = fwd_find(p, node_id);
	struct fwd_pend *q;
	int rc;

	if (!pe) {
		pe = calloc(1, sizeof(*pe));
		if (!pe)
			return -ENOMEM;
		pe->owner = p;
		pe->pend_tail = &pe->pend;
		snprintf(pe->id, sizeof(pe->id), "%s", node_id);
		pe->next = p->list;
		p->list = pe;
	}
	if (pe->conn && !zl_xport_conn_alive(pe->conn))
		fwd_drop_conn(pe);
	if (pe->conn) {
		rc = zl_xport_request_crcs(pe->conn, hdr, out, out_len, out_crcs, in, in_cap, cb,
					   arg);
		if (rc == -ZL_ERR_CONN)
			fwd_drop_conn(pe);
		return rc;
	}
	if (!pe->lookup.busy) {
		if (zl_now_ms() < pe->fail_until_ms)
			return -ZL_ERR_CONN;
		rc = zl_worker_submit(p->worker, &pe->lookup, fwd_lookup_run, fwd_lookup_done);
		if (rc)
			return -ZL_ERR_CONN;
		ZL_LOG_INFO("storage", "looking up peer node=%s", pe->id);
	}
	if (pe->n_pend >= FWD_QUEUE_MAX)
		return -ZL_ERR_BUSY;
	q = zl_slab_alloc(&p->pends);
	if (!q)
		return -ENOMEM;
	*q = (struct fwd_pend){.hdr = *hdr, .out = out, .out_len = out_len, .out_crcs = out_crcs,
			       .in = in, .in_cap = in_cap, .cb = cb, .arg = arg};
	*pe->pend_tail = q;
	pe->pend_tail = &q->next;
	pe->n_pend++;
	return 0;
}
