/* Volume client: lifetime, and the blocking control operations (volume
 * delete, ping) that run on dedicated short-lived connections. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "lib/meta/zl_auth.h"

#define CLIENT_DEFAULT_TIMEOUT_MS 10000u
#define CLIENT_DEFAULT_MAX_IO	  256u
#define CLIENT_DEFAULT_CONNS	  2u
#define CLIENT_MAX_CONNS	  64u
#define CLIENT_MAX_MAX_IO	  65536u
#define CLIENT_DRAIN_MS		  2000u

int zl_client_create(struct zl_loop *loop, struct zl_etcd *etcd, const struct zl_client_opts *opts,
		     struct zl_client **out)
{
	struct zl_client_opts o = {0};
	struct zl_xport *x;
	struct zl_client *c;
	const char *prefix;
	char host[64] = "client";
	int rc;

	if (!loop || !etcd || !out)
		return -ZL_ERR_INVAL;
	if (opts)
		o = *opts;
	prefix = o.prefix ? o.prefix : ZL_META_DEFAULT_PREFIX;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->etcd = etcd;
	client_list_init(&c->vols);
	client_list_init(&c->zombies);
	if (strlen(prefix) >= sizeof(c->prefix)) {
		ZL_LOG_ERR(CLIENT_LOG, "etcd prefix too long: prefix=%s max=%zu", prefix,
			   sizeof(c->prefix) - 1);
		rc = -ZL_ERR_INVAL;
		goto out_free;
	}
	snprintf(c->prefix, sizeof(c->prefix), "%s", prefix);
	if (o.client_id) {
		if (!o.client_id[0] || strlen(o.client_id) >= sizeof(c->id)) {
			ZL_LOG_ERR(CLIENT_LOG, "client id must be 1..%zu characters: id=%s",
				   sizeof(c->id) - 1, o.client_id);
			rc = -ZL_ERR_INVAL;
			goto out_free;
		}
		snprintf(c->id, sizeof(c->id), "%s", o.client_id);
	} else {
		if (gethostname(host, sizeof(host)) != 0)
			snprintf(host, sizeof(host), "client");
		host[40] = '\0';
		snprintf(c->id, sizeof(c->id), "%s-%ld", host, (long)getpid());
	}
	c->timeout_ms = o.timeout_ms ? o.timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
	c->max_io = o.max_io ? ZL_MIN(o.max_io, CLIENT_MAX_MAX_IO) : CLIENT_DEFAULT_MAX_IO;
	c->conns_per_node =
	    o.conns_per_node ? ZL_MIN(o.conns_per_node, CLIENT_MAX_CONNS) : CLIENT_DEFAULT_CONNS;
	c->epoch = o.epoch;
	c->cred.epoch = o.epoch;
	c->cred.caps = ZL_WIRE_CAP_SNAPSEQ; /* we send and read snapshot sequences */
	if (o.token && *o.token) {
		if (strlen(o.token) >= sizeof(c->token)) {
			ZL_LOG_ERR(CLIENT_LOG, "attach token too long (max %zu characters)",
				   sizeof(c->token) - 1);
			rc = -ZL_ERR_INVAL;
			goto out_free;
		}
		snprintf(c->token, sizeof(c->token), "%s", o.token);
		c->cred.vol_id = o.token_vol;
		c->cred.token = c->token;
	} else if (o.cluster_key && *o.cluster_key) {
		rc = zl_auth_cluster_token(o.cluster_key, c->id, c->token);
		if (rc) {
			ZL_LOG_ERR(CLIENT_LOG, "malformed cluster key (64 hex digits expected)");
			goto out_free;
		}
		c->cred.token = c->token;
		c->cred.cluster = true;
	}
	if (!o.tls_ca)
		o.tls_ca = getenv("ZIPLINE_TLS_CA");
	if (!o.tls_server_name)
		o.tls_server_name = getenv("ZIPLINE_TLS_SERVER_NAME");
	if ((o.tls_ca && strlen(o.tls_ca) >= sizeof(c->tls_ca)) ||
	    (o.tls_server_name && strlen(o.tls_server_name) >= sizeof(c->tls_server_name))) {
		ZL_LOG_ERR(CLIENT_LOG, "TLS CA path or server name too long");
		rc = -ZL_ERR_INVAL;
		goto out_free;
	}
	snprintf(c->tls_ca, sizeof(c->tls_ca), "%s", o.tls_ca ? o.tls_ca : "");
	snprintf(c->tls_server_name, sizeof(c->tls_server_name), "%s",
		 o.tls_server_name ? o.tls_server_name : "");
	c->legacy_drop = o.legacy_drop;
	rc = zl_worker_create(loop, &c->worker);
	if (rc)
		goto out_free;
	c->io_timeout_s = o.io_timeout_s ? o.io_timeout_s : CLIENT_IO_TIMEOUT_S;
	c->sel = o.transport;
	switch (o.transport) {
	case ZL_XPORT_SEL_AUTO:
		/* Transports are created when a node first needs one. */
		break;
	case ZL_XPORT_SEL_TCP:
	case ZL_XPORT_SEL_RDMA:
		/* Fail now, not at the first I/O, when the kind cannot work. */
		rc = client_xport_get(
		    c, o.transport == ZL_XPORT_SEL_TCP ? ZL_XPORT_TCP : ZL_XPORT_RDMA, &x);
		if (rc)
			goto out_free;
		break;
	default:
		rc = -ZL_ERR_INVAL;
		goto out_free;
	}
	*out = c;
	return 0;

out_free:
	zl_worker_destroy(c->worker);
	free(c);
	return rc;
}

static bool client_busy(const struct zl_client *c)
{
	if (!client_list_empty(&c->zombies)) {
		for (const struct client_list *l = c->zombies.next; l != &c->zombies; l = l->next)
			if (ZL_CONTAINER_OF(l, const struct zl_vol, link)->inflight_reqs)
				return true;
	}
	for (size_t i = 0; i < c->n_nodes; i++)
		if (!client_node_idle(c->nodes[i]))
			return true;
	return false;
}

void zl_client_destroy(struct zl_client *c)
{
	struct client_list *l;
	uint64_t deadline;

	if (!c)
		return;
	c->destroying = true;
	if (c->report_timer_on)
		zl_timer_stop(c->loop, &c->report_timer);
	while (!client_list_empty(&c->vols))
		zl_vol_close(ZL_CONTAINER_OF(c->vols.next, struct zl_vol, link));
	/* Waits for the etcd call it runs; what is queued ends cancelled. */
	zl_worker_destroy(c->worker);
	c->worker = NULL;
	if (c->report_lease)
		zl_etcd_lease_revoke(c->etcd, c->report_lease); /* our reports go now */
	for (size_t i = 0; i < c->n_nodes; i++)
		client_node_close_conns(c->nodes[i]);
	/* Let the transport deliver the failures and close callbacks while our
	 * objects still exist. */
	deadline = zl_now_ms() + CLIENT_DRAIN_MS;
	while (client_busy(c) && zl_now_ms() < deadline)
		zl_loop_run_once(c->loop, 10);
	zl_xport_destroy(c->xports[ZL_XPORT_RDMA]);
	zl_xport_destroy(c->xports[ZL_XPORT_TCP]);
	while ((l = client_list_pop(&c->zombies)))
		client_vol_free(ZL_CONTAINER_OF(l, struct zl_vol, link));
	for (size_t i = 0; i < c->n_nodes; i++)
		client_node_free(c->nodes[i]);
	free(c->nodes);
	explicit_bzero(c->token, sizeof(c->token));
	free(c);
}

struct zl_xport *zl_client_xport(struct zl_client *c)
{
	struct zl_xport *x = NULL;

	if (c->xports[ZL_XPORT_RDMA])
		return c->xports[ZL_XPORT_RDMA];
	if (client_xport_get(c, ZL_XPORT_TCP, &x))
		return NULL;
	return x;
}

/* ---- failure reports (heal mode) ---- */

/* Worker thread: one keep-alive of the report lease; an expired one is
 * forgotten (the next failure report grants a new one). */
static void report_renew_run(struct zl_work *w)
{
	struct zl_client *c = ZL_CONTAINER_OF(w, struct zl_client, renew_w);
	int64_t left = 0;
	int rc;

	c->renew_expired = false;
	if (!c->report_lease)
		return;
	rc = zl_etcd_lease_keepalive(c->etcd, c->report_lease, &left);
	if (rc == -ZL_ERR_NOT_FOUND || (!rc && left <= 0)) {
		ZL_LOG_WARN(CLIENT_LOG, "report lease expired: client=%s lease=%" PRId64
			    "; the next failure report grants a new one", c->id, c->report_lease);
		c->report_lease = 0;
		c->renew_expired = true;
	}
}

static void report_renew_done(struct zl_work *w)
{
	struct zl_client *c = ZL_CONTAINER_OF(w, struct zl_client, renew_w);

	if (c->renew_expired && !w->cancelled && c->report_timer_on) {
		zl_timer_stop(c->loop, &c->report_timer);
		c->report_timer_on = false;
	}
}

static void report_timer_cb(void *arg)
{
	struct zl_client *c = arg;

	/* A keep-alive still on its way (etcd slow): this one is skipped. */
	zl_worker_submit(c->worker, &c->renew_w, report_renew_run, report_renew_done);
}

/* A reporter id from the client id: characters zl_node_id_check refuses
 * become '_'. */
static void report_reporter_id(const struct zl_client *c, char *out, size_t len)
{
	size_t i;

	for (i = 0; c->id[i] && i + 1 < len && i < 63; i++) {
		unsigned char ch = (unsigned char)c->id[i];

		out[i] = (isalnum(ch) || ch == '.' || ch == '_' || ch == '-') ? (char)ch : '_';
	}
	out[i] = '\0';
}

/* Worker thread: the put, on the lease (granted when there is none, and
 * again once when the put fails: it may have expired). Logs the outcome. */
static void report_run(struct zl_work *w)
{
	struct client_report *cr = ZL_CONTAINER_OF(w, struct client_report, w);
	struct zl_client *c = cr->c;
	const struct zl_report *r = &cr->r;
	int rc = -ZL_ERR_ETCD;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (!c->report_lease) {
			rc = zl_etcd_lease_grant(c->etcd, CLIENT_REPORT_LEASE_S, &c->report_lease);
			if (rc) {
				c->report_lease = 0;
				break;
			}
		}
		rc = zl_meta_report_put(c->etcd, c->prefix, r, c->report_lease);
		if (!rc || rc == -ZL_ERR_INVAL)
			break;
		c->report_lease = 0; /* maybe an expired lease: grant a new one once */
	}
	cr->rc = rc;
	if (!rc) {
		ZL_LOG_WARN(CLIENT_LOG,
			    "failure report put: vol=%s slice=%u peer=%s error=%s "
			    "slice_ver=%" PRIu64 " reporter=%s; %s",
			    r->vol_id, r->slice, r->peer, r->error, r->slice_ver, r->reporter,
			    cr->bad_copy ? "its copy is bad: 'zl volume scrub' repairs it"
					 : "waiting for the manager");
		return;
	}
	ZL_LOG_ERR(CLIENT_LOG,
		   "cannot put failure report: vol=%s slice=%u peer=%s error=%s err=%s detail=%s "
		   "(is etcd reachable?)%s",
		   r->vol_id, r->slice, r->peer, r->error, zl_errname(rc), zl_etcd_last_error(),
		   cr->bad_copy ? "" : "; the I/O keeps waiting");
}

static void report_done(struct zl_work *w)
{
	struct client_report *cr = ZL_CONTAINER_OF(w, struct client_report, w);
	struct zl_client *c = cr->c;
	int rc = w->cancelled ? -ZL_ERR_ETCD : cr->rc;

	for (struct client_list *l = c->vols.next; l != &c->vols; l = l->next) {
		struct zl_vol *v = ZL_CONTAINER_OF(l, struct zl_vol, link);
		struct client_reported *rp;

		if (v->meta.num != cr->vol || cr->r.slice >= v->meta.n_slices)
			continue;
		rp = &v->reported[cr->r.slice];
		if (!rc) {
			v->stats.reports++;
		} else if (cr->bad_copy && rp->bad_ver == cr->r.slice_ver &&
			   !strcmp(rp->bad_peer, cr->r.peer)) {
			rp->bad_ver = 0; /* the next bad read reports again */
		} else if (!cr->bad_copy && rp->slice_ver == cr->r.slice_ver &&
			   !strcmp(rp->peer, cr->r.peer)) {
			rp->slice_ver = 0;
		}
	}
	if (rc && rc != -ZL_ERR_INVAL)
		c->etcd_fail_ns = zl_now_ns();
}

int client_report_put(struct zl_client *c, struct zl_vol *v, uint32_t slice, const char *peer,
		      const char *error, uint64_t slice_ver)
{
	struct client_report *cr = NULL;
	struct zl_report *r;

	for (unsigned i = 0; i < CLIENT_REPORTS && !cr; i++)
		if (!c->reports[i].w.busy)
			cr = &c->reports[i];
	if (!cr) {
		if (zl_ratelimit_ok(&c->report_rl, 1))
			ZL_LOG_ERR(CLIENT_LOG,
				   "failure report not sent: vol=%s slice=%u peer=%s error=%s: %u "
				   "reports already wait for etcd (is etcd reachable?; one line "
				   "per second at most)",
				   v->meta.id, slice, peer, error, CLIENT_REPORTS);
		return -ZL_ERR_BUSY;
	}
	r = &cr->r;
	memset(r, 0, sizeof(*r));
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", v->meta.id);
	r->slice = slice;
	report_reporter_id(c, r->reporter, sizeof(r->reporter));
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	snprintf(r->error, sizeof(r->error), "%s", error);
	r->slice_ver = slice_ver;
	r->time = (int64_t)time(NULL);
	cr->c = c;
	cr->vol = v->meta.num;
	cr->bad_copy = !strcmp(error, "CORRUPT") || !strcmp(error, "IO");
	cr->rc = 0;
	if (!c->report_timer_on) {
		c->report_timer_on = true;
		zl_timer_start(c->loop, &c->report_timer, CLIENT_REPORT_LEASE_S * 1000u / 3,
			       CLIENT_REPORT_LEASE_S * 1000u / 3, report_timer_cb, c);
	}
	return zl_worker_submit(c->worker, &cr->w, report_run, report_done);
}

/* ---- control requests on dedicated connections ---- */

struct ctl_slot {
	const struct zl_node_info *node;
	struct zl_xport_conn *xc;
	struct zl_xport_hello hello;
	struct zl_wire_hdr hello_rep, hdr;
	int hello_status, status;
	bool hello_done, done;
	enum zl_xport_kind kind; /* transport used, 0 before the connect */
	uint64_t t0, t1;
	size_t *pending;
};

struct ctl_batch {
	size_t pending; /* callbacks still to come */
	struct ctl_slot slots[];
};

static void ctl_close_cb(void *arg, struct zl_xport_conn *xc, int reason)
{
	(void)arg;
	(void)xc;
	(void)reason;
}

static void ctl_hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct ctl_slot *sl = arg;

	sl->hello_status = status;
	if (rep)
		sl->hello_rep = *rep;
	sl->hello_done = true;
	(*sl->pending)--;
}

static void ctl_op_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct ctl_slot *sl = arg;

	sl->t1 = zl_now_ns();
	sl->status = status ? status : zl_wire_status_to_err(rep->status);
	sl->done = true;
	(*sl->pending)--;
}

static int ctl_start(struct zl_client *c, struct ctl_slot *sl, int op, uint64_t vol_id)
{
	const struct zl_node_info *ni = sl->node;
	int tmo = (int)ZL_MIN(c->timeout_ms, CLIENT_CONNECT_MAX_MS);
	enum zl_xport_kind kind;
	struct zl_xport *x;
	int rc;

	rc = client_pick_kind(c, c->sel, ni->id, ni->addr, ni->rdma_port, ni->transports, &kind);
	if (!rc)
		rc = client_xport_get(c, kind, &x);
	if (rc)
		return rc;
	rc = zl_xport_connect_node(x, ni->id, ni->addr,
				   kind == ZL_XPORT_RDMA ? ni->rdma_port : ni->port, ni->tls, tmo,
				   ctl_close_cb, NULL, &sl->xc);
	if (rc) {
		sl->xc = NULL;
		return rc;
	}
	sl->kind = kind;
	rc = zl_xport_hello_send_cred(sl->xc, &sl->hello, c->id, &c->cred, ctl_hello_cb, sl);
	if (rc)
		return rc;
	(*sl->pending)++;
	sl->hdr.opcode = (uint8_t)op;
	sl->hdr.vol_id = vol_id;
	sl->hdr.epoch = c->epoch;
	sl->t0 = zl_now_ns();
	rc = zl_xport_request(sl->xc, &sl->hdr, NULL, 0, NULL, 0, ctl_op_cb, sl);
	if (rc)
		return rc;
	(*sl->pending)++;
	return 0;
}

/* Outcome of one slot: the request's status, unless the HELLO failed (for
 * instance the address belongs to another node). */
static int ctl_result(const struct ctl_slot *sl)
{
	int rc;

	if (!sl->done || !sl->hello_done)
		return -ZL_ERR_TIMEOUT;
	rc = zl_xport_hello_check(&sl->hello, sl->hello_status,
				  sl->hello_status ? NULL : &sl->hello_rep, sl->node->id, NULL);
	return rc ? rc : sl->status;
}

int client_ctl_run(struct zl_client *c, const struct zl_node_info *nodes, size_t n, int op,
		   uint64_t vol_id, int *results, uint64_t *rtt_ns, enum zl_xport_kind *kinds)
{
	struct ctl_batch *b;
	uint64_t deadline;

	if (!n)
		return 0;
	b = calloc(1, sizeof(*b) + n * sizeof(b->slots[0]));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		b->slots[i].node = &nodes[i];
		b->slots[i].pending = &b->pending;
		results[i] = ctl_start(c, &b->slots[i], op, vol_id);
	}
	deadline = zl_now_ms() + c->timeout_ms + 1000;
	while (b->pending && zl_now_ms() < deadline)
		zl_loop_run_once(c->loop, 50);
	for (size_t i = 0; i < n; i++)
		if (b->slots[i].xc)
			zl_xport_conn_close(b->slots[i].xc);
	deadline = zl_now_ms() + 2000;
	while (b->pending && zl_now_ms() < deadline)
		zl_loop_run_once(c->loop, 50);
	for (size_t i = 0; i < n; i++) {
		if (!results[i])
			results[i] = ctl_result(&b->slots[i]);
		if (rtt_ns)
			rtt_ns[i] = b->slots[i].done ? b->slots[i].t1 - b->slots[i].t0 : 0;
		if (kinds)
			kinds[i] = b->slots[i].kind;
		if (b->slots[i].xc)
			zl_xport_conn_put(b->slots[i].xc);
	}
	if (b->pending) {
		/* Callbacks would still write into b: leak it rather than free. */
		ZL_LOG_ERR(CLIENT_LOG, "transport kept %zu control requests past their timeout",
			   b->pending);
		return 0;
	}
	free(b);
	return 0;
}

int zl_client_ping_node(struct zl_client *c, const struct zl_node_info *n, uint64_t *rtt_us)
{
	return zl_client_ping_node_kind(c, n, rtt_us, NULL);
}

int zl_client_ping_node_kind(struct zl_client *c, const struct zl_node_info *n, uint64_t *rtt_us,
			     enum zl_xport_kind *kind)
{
	enum zl_xport_kind k = 0;
	uint64_t rtt = 0;
	int res = 0, rc;

	if (!c || !n)
		return -ZL_ERR_INVAL;
	rc = client_ctl_run(c, n, 1, ZL_OP_PING, 0, &res, &rtt, &k);
	if (kind)
		*kind = k;
	if (rc)
		return rc;
	if (res)
		return res;
	if (rtt_us)
		*rtt_us = rtt / 1000;
	return 0;
}

/* Marks the record "deleting" (compare-and-swap on its revision). */
static int volume_mark_deleting(struct zl_client *c, struct zl_volume *v)
{
	int rc = 0;

	for (int tries = 0; strcmp(v->state, "deleting") != 0; tries++) {
		char id[sizeof(v->id)];

		snprintf(v->state, sizeof(v->state), "deleting");
		rc = zl_meta_volume_update(c->etcd, c->prefix, v);
		if (rc != -ZL_ERR_CONFLICT || tries >= 8)
			return rc;
		snprintf(id, sizeof(id), "%s", v->id);
		zl_volume_fini(v);
		rc = zl_meta_volume_get(c->etcd, c->prefix, id, v);
		if (rc)
			return rc;
	}
	return rc;
}

/* Undoes volume_mark_deleting of a volume whose removal was refused
 * (best effort: a record changed meanwhile is left to the next try). */
static void volume_unmark_deleting(struct zl_client *c, struct zl_volume *v)
{
	struct zl_volume now = {0};

	if (zl_meta_volume_get(c->etcd, c->prefix, v->id, &now))
		return;
	if (!strcmp(now.state, "deleting")) {
		snprintf(now.state, sizeof(now.state), "ready");
		if (zl_meta_volume_update(c->etcd, c->prefix, &now))
			ZL_LOG_WARN(CLIENT_LOG,
				    "vol=%s stays marked deleting after a refused removal: run "
				    "zl volume rm again once its clones are flattened",
				    v->id);
	}
	zl_volume_fini(&now);
}

/* Asks every live node to drop its replicas of v (VOLUME_DELETE) and clears
 * the tombstone of each placement node that did; the others keep theirs and
 * remove the replicas when they are back. Counts into info. */
static void volume_drop_replicas(struct zl_client *c, const struct zl_volume *v,
				 struct zl_client_delete_info *info)
{
	struct zl_node_info *live = NULL;
	const char **ids = NULL;
	size_t n_live = 0, n_ids = 0;
	int *res = NULL;
	int rc;

	rc = zl_meta_node_list(c->etcd, c->prefix, &live, &n_live);
	if (rc)
		ZL_LOG_WARN(CLIENT_LOG,
			    "cannot list storage nodes, replicas go through tombstones: vol=%s "
			    "err=%s detail=%s",
			    v->id, zl_strerror(rc), zl_etcd_last_error());
	res = calloc(n_live ? n_live : 1, sizeof(*res));
	ids = calloc((size_t)v->n_slices * ZL_MAX_REPLICAS + 1, sizeof(*ids));
	if (!rc && res)
		rc = client_ctl_run(c, live, n_live, ZL_OP_VOLUME_DELETE, v->num, res, NULL, NULL);
	/* The distinct nodes of the placement: the ones with a tombstone. */
	for (uint32_t s = 0; ids && s < v->n_slices; s++) {
		for (unsigned r = 0; r < v->slices[s].n && r < ZL_MAX_REPLICAS; r++) {
			size_t k;

			for (k = 0; k < n_ids && strcmp(ids[k], v->slices[s].nodes[r]); k++)
				;
			if (k == n_ids)
				ids[n_ids++] = v->slices[s].nodes[r];
		}
	}
	for (size_t k = 0; k < n_ids; k++) {
		size_t j;

		for (j = 0; j < n_live && strcmp(live[j].id, ids[k]); j++)
			;
		if (!rc && res && j < n_live && (res[j] == 0 || res[j] == -ZL_ERR_NOT_FOUND) &&
		    zl_meta_tombstone_clear(c->etcd, c->prefix, ids[k], v->id) == 0) {
			info->nodes_done++;
			continue;
		}
		if (!rc && res && j < n_live)
			ZL_LOG_WARN(CLIENT_LOG,
				    "VOLUME_DELETE failed, the node removes the replicas later: "
				    "vol=%s node=%s err=%s",
				    v->id, ids[k], zl_strerror(res[j]));
		if (info->nodes_pending == 0)
			snprintf(info->pending_node, sizeof(info->pending_node), "%s", ids[k]);
		info->nodes_pending++;
	}
	free(ids);
	free(res);
	free(live);
}

int zl_client_volume_remove(struct zl_client *c, const char *name_or_id, bool force,
			    struct zl_client_delete_info *info)
{
	struct zl_client_delete_info local;
	struct zl_volume v;
	char what[300];
	int rc = -ZL_ERR_CONFLICT;

	if (!c || !name_or_id)
		return -ZL_ERR_INVAL;
	if (!info)
		info = &local;
	memset(info, 0, sizeof(*info));
	memset(&v, 0, sizeof(v));
	for (int tries = 0; tries < 8 && rc == -ZL_ERR_CONFLICT; tries++) {
		zl_volume_fini(&v);
		memset(&v, 0, sizeof(v));
		rc = zl_meta_volume_lookup(c->etcd, c->prefix, name_or_id, &v);
		if (rc)
			return rc;
		/* Clones read its data: not even with force (the delete
		 * transaction compares it too). */
		snprintf(what, sizeof(what), "volume %s", v.name);
		rc = zl_meta_clone_refusal(c->etcd, c->prefix, v.id, 0, what, info->dependants,
					   sizeof(info->dependants));
		if (rc)
			break;
		if (!force) {
			rc = zl_meta_attachment_get(c->etcd, c->prefix, v.id, info->attached_node,
						    sizeof(info->attached_node));
			if (rc == 0) {
				rc = -ZL_ERR_BUSY;
				break;
			}
			if (rc != -ZL_ERR_NOT_FOUND)
				break;
			/* The record's mod_revision guards the mark below: a
			 * snapshot taken after this look makes it retry. */
			if (v.n_snaps) {
				info->snapshots = v.n_snaps;
				rc = -ZL_ERR_BUSY;
				break;
			}
		}
		/* "deleting" first: readers see the volume going away. */
		rc = volume_mark_deleting(c, &v);
		if (!rc)
			rc = zl_meta_volume_remove(c->etcd, c->prefix, &v, force);
		if (rc == -ZL_ERR_BUSY &&
		    zl_meta_clone_refusal(c->etcd, c->prefix, v.id, 0, what, info->dependants,
					  sizeof(info->dependants)) == -ZL_ERR_BUSY) {
			/* A clone appeared after the look: the volume stays. */
			volume_unmark_deleting(c, &v);
			break;
		}
	}
	if (rc == -ZL_ERR_BUSY && !info->attached_node[0] && !info->snapshots &&
	    !info->dependants[0])
		zl_meta_attachment_get(c->etcd, c->prefix, v.id, info->attached_node,
				       sizeof(info->attached_node));
	if (rc) {
		if (rc != -ZL_ERR_BUSY)
			ZL_LOG_ERR(CLIENT_LOG,
				   "cannot remove volume record: vol=%s err=%s detail=%s", v.id,
				   zl_strerror(rc), zl_etcd_last_error());
		goto out_vol;
	}
	volume_drop_replicas(c, &v, info);
	ZL_LOG_INFO(CLIENT_LOG,
		    "volume deleted: vol=%s name=%s nodes_done=%u nodes_pending=%u force=%d", v.id,
		    v.name, info->nodes_done, info->nodes_pending, force);
out_vol:
	zl_volume_fini(&v);
	return rc;
}

int zl_client_volume_delete(struct zl_client *c, const char *name_or_id)
{
	return zl_client_volume_remove(c, name_or_id, false, NULL);
}
