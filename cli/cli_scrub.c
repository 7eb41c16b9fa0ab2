/* zl volume scrub NAME: SCRUB of every slice on its primary (the daemon
 * verifies every member's copy and repairs bad, missing and divergent ones,
 * docs/REPLICATION.md §8). zl volume verify NAME: reads every chunk from
 * every IN_SYNC member (READ + ZL_WF_ANY) and compares bytes and versions,
 * the operator's and the tests' independent check; then every chunk of every
 * snapshot of the volume the same way (READ + ZL_WF_ANY | ZL_WF_SEQ at the
 * snapshot's sequence, docs/SNAPSHOTS.md §2), or of one (--snapshot).
 *
 * Both talk to the storage nodes over their own TCP transport (one
 * connection per node, HELLO checked), with a per-request deadline of
 * their own: a scrub of a large slice may take long. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/meta/zl_auth.h"
#include "lib/transport/transport.h"
#include "lib/transport/xport_hello.h"
#include "lib/wire/wire.h"

#define SCRUB_REQ_MS  (24ull * 3600 * 1000) /* one slice's SCRUB */
#define VERIFY_REQ_MS 30000ull
#define CONNECT_MS    5000
#define RETRIES	      8
#define VERIFY_PIECE  (4u << 20)

struct sc_node {
	struct zl_node_info ni;
	struct zl_xport_conn *xc;
	int err;      /* connect / HELLO failure, kept */
	bool snapseq; /* its HELLO named ZL_WIRE_CAP_SNAPSEQ: snapshot reads go */
};

struct sc_ctx {
	struct zl_cli *cli;
	struct zl_xport *x;
	struct zl_volume v;
	struct sc_node *nodes;
	size_t n_nodes;
	char self[64];
	char token[ZL_AUTH_TOKEN_HEX + 1]; /* cluster token of self */
};

struct sc_wait {
	bool done;
	int status;
	struct zl_wire_hdr rep;
};

static void sc_close_cb(void *arg, struct zl_xport_conn *xc, int reason)
{
	(void)arg;
	(void)xc;
	(void)reason;
}

static void sc_reply_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct sc_wait *w = arg;

	w->status = status;
	if (rep)
		w->rep = *rep;
	w->done = true;
}

/* Runs the loop until w is done or the deadline passes (then closes xc,
 * which fails the request). */
static void sc_wait_for(struct sc_ctx *c, struct zl_xport_conn *xc, struct sc_wait *w, uint64_t ms)
{
	uint64_t deadline = zl_now_ms() + ms;

	while (!w->done && zl_now_ms() < deadline)
		zl_loop_run_once(c->cli->loop, 50);
	if (w->done)
		return;
	zl_xport_conn_close(xc);
	deadline = zl_now_ms() + 2000;
	while (!w->done && zl_now_ms() < deadline)
		zl_loop_run_once(c->cli->loop, 50);
	if (!w->done) {
		/* The transport still holds w: never return into freed memory. */
		zl_cli_err("transport kept a request past its deadline");
		exit(ZL_CLI_EXIT_RUNTIME);
	}
}

static void sc_node_drop(struct sc_node *n)
{
	if (!n->xc)
		return;
	zl_xport_conn_close(n->xc);
	zl_xport_conn_put(n->xc);
	n->xc = NULL;
}

static struct sc_node *sc_node_find(struct sc_ctx *c, const char *id)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		if (!strcmp(c->nodes[i].ni.id, id))
			return &c->nodes[i];
	return NULL;
}

/* The node's connection, HELLO done. 0 or an error. */
static int sc_conn(struct sc_ctx *c, const char *id, struct zl_xport_conn **out)
{
	struct sc_node *n = sc_node_find(c, id);
	struct zl_xport_hello *h;
	struct zl_wire_hello hl = {0};
	struct sc_wait w = {0};
	int rc;

	if (!n)
		return -ZL_ERR_NOT_FOUND;
	if (n->xc && zl_xport_conn_alive(n->xc)) {
		*out = n->xc;
		return 0;
	}
	sc_node_drop(n);
	rc = zl_xport_connect_node(c->x, n->ni.id, n->ni.addr, n->ni.port, n->ni.tls, CONNECT_MS,
				   sc_close_cb, NULL, &n->xc);
	if (rc) {
		n->xc = NULL;
		return rc;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	snprintf(h->peer, sizeof(h->peer), "%.50s:%u", n->ni.addr, n->ni.port);
	{
		const struct zl_xport_cred cred = {
		    .token = c->token, .cluster = true, .caps = ZL_WIRE_CAP_SNAPSEQ};

		rc = zl_xport_hello_send_cred(n->xc, h, c->self, &cred, sc_reply_cb, &w);
	}
	if (!rc) {
		sc_wait_for(c, n->xc, &w, VERIFY_REQ_MS);
		rc = zl_xport_hello_check(h, w.status, w.status ? NULL : &w.rep, n->ni.id, &hl);
	}
	n->snapseq = !rc && (hl.caps & ZL_WIRE_CAP_SNAPSEQ);
	free(h);
	if (rc) {
		sc_node_drop(n);
		return rc;
	}
	*out = n->xc;
	return 0;
}

/* One request to node id; *rep gets the reply header. Returns the transport
 * or reply error. */
static int sc_request(struct sc_ctx *c, const char *id, struct zl_wire_hdr *hdr, void *in,
		      uint32_t in_cap, uint64_t ms, struct zl_wire_hdr *rep)
{
	struct zl_xport_conn *xc;
	struct sc_wait w = {0};
	int rc = sc_conn(c, id, &xc);

	if (rc)
		return rc;
	rc = zl_xport_request(xc, hdr, NULL, 0, in, in_cap, sc_reply_cb, &w);
	if (rc) {
		sc_node_drop(sc_node_find(c, id));
		return rc;
	}
	sc_wait_for(c, xc, &w, ms);
	if (w.status) {
		sc_node_drop(sc_node_find(c, id));
		return w.status;
	}
	*rep = w.rep;
	return zl_wire_status_to_err(w.rep.status);
}

static int sc_load(struct sc_ctx *c, const char *name)
{
	int rc;

	zl_volume_fini(&c->v);
	rc = zl_meta_volume_lookup(c->cli->etcd, c->cli->prefix, name, &c->v);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_etcd_err(c->cli, "cannot read the volume record", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (!c->nodes) {
		struct zl_node_info *list = NULL;

		rc = zl_meta_node_list(c->cli->etcd, c->cli->prefix, &list, &c->n_nodes);
		if (rc) {
			zl_cli_etcd_err(c->cli, "cannot list the storage nodes", rc);
			return ZL_CLI_EXIT_RUNTIME;
		}
		c->nodes = calloc(c->n_nodes + 1, sizeof(*c->nodes));
		if (!c->nodes) {
			free(list);
			return ZL_CLI_EXIT_RUNTIME;
		}
		for (size_t i = 0; i < c->n_nodes; i++)
			c->nodes[i].ni = list[i];
		free(list);
	}
	return 0;
}

static int sc_setup(struct sc_ctx *c, struct zl_cli *cli, const char *name)
{
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP, .timeout_ms = (uint32_t)SCRUB_REQ_MS};
	int rc;

	/* TLS nodes (docs/SECURITY.md): the flags, else the environment. */
	xo.tls_ca = cli->g.tls_ca ? cli->g.tls_ca : getenv("ZIPLINE_TLS_CA");
	xo.tls_server_name =
	    cli->g.tls_server_name ? cli->g.tls_server_name : getenv("ZIPLINE_TLS_SERVER_NAME");

	memset(c, 0, sizeof(*c));
	c->cli = cli;
	snprintf(c->self, sizeof(c->self), "zl-scrub-%ld", (long)getpid());
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	{
		char key[ZL_AUTH_KEY_HEX + 1];

		rc = zl_cli_cluster_key(cli, key);
		if (!rc && zl_auth_cluster_token(key, c->self, c->token))
			rc = ZL_CLI_EXIT_RUNTIME;
		explicit_bzero(key, sizeof(key));
		if (rc)
			return rc;
	}
	if (!cli->loop && (rc = zl_loop_create(&cli->loop))) {
		zl_cli_err("cannot create the event loop: %s", zl_strerror(rc));
		return ZL_CLI_EXIT_RUNTIME;
	}
	rc = zl_xport_create(cli->loop, &xo, &c->x);
	if (rc) {
		zl_cli_err("cannot create the TCP transport: %s", zl_strerror(rc));
		return ZL_CLI_EXIT_RUNTIME;
	}
	return sc_load(c, name);
}

static void sc_teardown(struct sc_ctx *c)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		sc_node_drop(&c->nodes[i]);
	if (c->x) {
		uint64_t deadline = zl_now_ms() + 500;

		while (zl_now_ms() < deadline)
			zl_loop_run_once(c->cli->loop, 20);
	}
	zl_xport_destroy(c->x);
	free(c->nodes);
	zl_volume_fini(&c->v);
}

static bool sc_retryable(int rc)
{
	return rc == -ZL_ERR_STALE || rc == -ZL_ERR_NOT_PRIMARY || rc == -ZL_ERR_PEERING ||
	       rc == -ZL_ERR_CONN || rc == -ZL_ERR_TIMEOUT || rc == -ZL_ERR_BUSY ||
	       rc == -ZL_ERR_UNAVAIL || rc == -ZL_ERR_NOT_INSYNC;
}

/* Parses "CMD NAME [--json]", and with snap (verify) "[--snapshot S]"
 * (*snap stays NULL without it). 0, -1 (help printed) or an exit code. */
static int sc_args(const char *cmd, int argc, char **argv, const char **name, bool *json,
		   const char **snap)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {"snapshot", required_argument, NULL, 's'},
					     {0}};
	static const struct option opts_scrub[] = {
	    {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {0}};
	const char *usage = snap ? "NAME [--json] [--snapshot SNAPSHOT]" : "NAME [--json]";
	int ch;

	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":jh", snap ? opts : opts_scrub, NULL)) != -1) {
		if (ch == 'j') {
			*json = true;
			continue;
		}
		if (ch == 's') {
			*snap = optarg;
			continue;
		}
		if (ch == 'h') {
			printf("usage: zl %s %s\n", cmd, usage);
			return -1;
		}
		return zl_cli_opt_error(cmd, ch, optopt, argv, optind);
	}
	if (argc - optind != 1) {
		zl_cli_err("%s (usage: zl %s %s)",
			   argc - optind < 1 ? "missing volume name" : "too many arguments", cmd,
			   usage);
		return ZL_CLI_EXIT_USAGE;
	}
	*name = argv[optind];
	return 0;
}

/* ---- scrub ---- */

static int scrub_slice(struct sc_ctx *c, const char *name, uint32_t slice,
		       struct zl_wire_scrub_result *res, char *node, size_t node_len)
{
	int rc = 0;

	for (int attempt = 0; attempt < RETRIES; attempt++) {
		const struct zl_slice *s = &c->v.slices[slice];
		int p = zl_slice_primary(s);
		struct zl_wire_hdr h = {0}, rep;
		uint8_t out[ZL_WIRE_MAX_CTRL];

		if (attempt) {
			sleep(1);
			if (sc_load(c, name))
				return -ZL_ERR_NOT_FOUND;
			if (slice >= c->v.n_slices)
				return -ZL_ERR_STALE;
			s = &c->v.slices[slice];
			p = zl_slice_primary(s);
		}
		if (p < 0) {
			rc = -ZL_ERR_UNAVAIL;
			continue;
		}
		snprintf(node, node_len, "%s", s->nodes[p]);
		h.opcode = ZL_OP_SCRUB;
		h.vol_id = c->v.num;
		h.offset = slice;
		h.slice_ver = s->version;
		rc = sc_request(c, s->nodes[p], &h, out, sizeof(out), SCRUB_REQ_MS, &rep);
		if (!rc)
			return zl_wire_scrub_result_decode(out, rep.payload_len, res);
		if (!sc_retryable(rc))
			return rc;
	}
	return rc;
}

static int cli_volume_scrub(struct zl_cli *cli, int argc, char **argv)
{
	struct zl_wire_scrub_result tot = {0};
	bool json = false, tty = isatty(STDERR_FILENO);
	uint32_t done = 0, failed = 0;
	uint64_t t0 = zl_now_ms();
	const char *name = NULL;
	struct sc_ctx c;
	int rc = sc_args("volume scrub", argc, argv, &name, &json, NULL);

	if (rc)
		return rc < 0 ? 0 : rc;
	rc = sc_setup(&c, cli, name);
	if (rc) {
		sc_teardown(&c);
		return rc;
	}
	for (uint32_t s = 0; s < c.v.n_slices; s++) {
		struct zl_wire_scrub_result r = {0};
		char node[ZL_NODE_ID_MAX] = "";

		rc = scrub_slice(&c, name, s, &r, node, sizeof(node));
		if (rc) {
			failed++;
			if (tty && !json)
				fputc('\n', stderr);
			zl_cli_err("scrub of slice %u failed on its primary %s: %s", s,
				   node[0] ? node : "(none)", zl_strerror(rc));
		} else {
			done++;
			tot.chunks_checked += r.chunks_checked;
			tot.bad_found += r.bad_found;
			tot.repaired += r.repaired;
			tot.bytes_read += r.bytes_read;
		}
		if (!json)
			fprintf(stderr, "%sscrub: %u/%u slices, %" PRIu64 " repaired%s",
				tty ? "\r" : "", s + 1, c.v.n_slices, tot.repaired,
				tty ? "" : "\n");
	}
	if (tty && !json)
		fputc('\n', stderr);
	if (json)
		printf("{\"volume\":\"%s\",\"id\":\"%s\",\"slices\":%u,\"slices_scrubbed\":%u,"
		       "\"chunks_checked\":%" PRIu64 ",\"bad_found\":%" PRIu64
		       ",\"repaired\":%" PRIu64 ",\"bytes_read\":%" PRIu64 ",\"ms\":%" PRIu64 "}\n",
		       c.v.name, c.v.id, c.v.n_slices, done, tot.chunks_checked, tot.bad_found,
		       tot.repaired, tot.bytes_read, zl_now_ms() - t0);
	else
		printf("scrubbed volume '%s': %u/%u slices, %" PRIu64 " chunks checked, %" PRIu64
		       " bad copies found, %" PRIu64 " repaired, %.1f MiB read in %.1f s\n",
		       c.v.name, done, c.v.n_slices, tot.chunks_checked, tot.bad_found,
		       tot.repaired, tot.bytes_read / 1048576.0, (zl_now_ms() - t0) / 1000.0);
	if (!failed && tot.repaired < tot.bad_found)
		zl_cli_err("%" PRIu64 " bad copies were not repaired (see the storage logs: "
			   "'scrub repair failed' / 'no good copy')",
			   tot.bad_found - tot.repaired);
	sc_teardown(&c);
	return failed || tot.repaired < tot.bad_found ? ZL_CLI_EXIT_RUNTIME : 0;
}

/* ---- verify ---- */

struct vf_copy {
	char node[ZL_NODE_ID_MAX]; /* copied: a reload frees the record */
	uint8_t *data;		   /* chunk_size bytes */
	uint64_t version;
	int err;
};

/* One verify run: the copies of the chunk being compared and the tally. */
struct vf_run {
	struct sc_ctx *c;
	const char *name;
	struct vf_copy cp[ZL_MAX_REPLICAS];
	uint8_t *piece;
	bool json, first;
	uint64_t diffs, skipped;
	struct zl_snapshot *snaps; /* the volume's snapshot records (names) */
	size_t n_snaps;
};

static void vf_ver(uint64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%u:%u", zl_wire_dver_term(v), zl_wire_dver_seq(v));
}

/* Reads the whole chunk from one member into cp->data: live (seq 0) or as
 * snapshot seq holds it (ZL_WF_SEQ). */
static int vf_read(struct sc_ctx *c, const char *name, uint64_t chunk, uint32_t seq,
		   struct vf_copy *cp, uint8_t *piece)
{
	uint32_t cs = c->v.chunk_size;
	int rc = 0;

	if (seq) {
		struct zl_xport_conn *xc;

		rc = sc_conn(c, cp->node, &xc);
		if (rc)
			return rc;
		if (!sc_node_find(c, cp->node)->snapseq)
			return -ZL_ERR_VERSION; /* a node that cannot read snapshots */
	}
	for (uint32_t off = 0; off < cs;) {
		uint32_t len = ZL_MIN(VERIFY_PIECE, cs - off);
		const struct zl_slice *s = &c->v.slices[zl_volume_slice_of(&c->v, chunk)];
		struct zl_wire_hdr h = {0}, rep;

		h.opcode = ZL_OP_READ;
		h.flags = ZL_WF_ANY | (seq ? ZL_WF_SEQ : 0);
		h.snap_seq = seq;
		h.vol_id = c->v.num;
		h.chunk = chunk;
		h.offset = off;
		h.length = len;
		h.slice_ver = s->version;
		rc = sc_request(c, cp->node, &h, piece, len, VERIFY_REQ_MS, &rep);
		if (rc == -ZL_ERR_STALE && !sc_load(c, name))
			continue; /* the row moved on: read again at its version */
		if (rc)
			return rc;
		if (off == 0)
			cp->version = rep.aux;
		else if (rep.aux != cp->version)
			return -ZL_ERR_CONFLICT; /* written while we read it */
		memcpy(cp->data + off, piece, len);
		off += len;
	}
	return 0;
}

/* The name of the snapshot of sequence seq ("" when its record is absent). */
static const char *vf_snap_name(const struct vf_run *r, uint32_t seq)
{
	for (size_t i = 0; i < r->n_snaps; i++)
		if (r->snaps[i].seq == seq)
			return r->snaps[i].name;
	return "";
}

/* "snapshot 'NAME' (sequence S) " / "snapshot sequence S " / "" (live). */
static void vf_where(const struct vf_run *r, uint32_t seq, char *buf, size_t len)
{
	const char *sn = vf_snap_name(r, seq);

	if (!seq)
		buf[0] = 0;
	else if (sn[0])
		snprintf(buf, len, "snapshot '%s' (sequence %u) ", sn, seq);
	else
		snprintf(buf, len, "snapshot sequence %u ", seq);
}

static void vf_report(struct vf_run *r, uint32_t seq, uint64_t chunk, const struct vf_copy *a,
		      const struct vf_copy *ref, int64_t off)
{
	char va[32], vr[32], where[320], snap[24];

	vf_ver(a->version, va, sizeof(va));
	vf_ver(ref ? ref->version : 0, vr, sizeof(vr));
	if (r->json) {
		if (seq)
			snprintf(snap, sizeof(snap), "%u", seq);
		else
			snprintf(snap, sizeof(snap), "null");
		printf("%s{\"chunk\":%" PRIu64 ",\"snapshot\":%s,\"snapshot_name\":\"%s\","
		       "\"node\":\"%s\",\"ref\":\"%s\",\"offset\":%lld,"
		       "\"version\":\"%s\",\"ref_version\":\"%s\",\"error\":%s%s%s}",
		       r->first ? "" : ",", chunk, snap, vf_snap_name(r, seq), a->node,
		       ref ? ref->node : "", (long long)off, va, vr, a->err ? "\"" : "",
		       a->err ? zl_errname(a->err) : "null", a->err ? "\"" : "");
		r->first = false;
		return;
	}
	vf_where(r, seq, where, sizeof(where));
	if (a->err)
		printf("%schunk %" PRIu64 ": %s cannot be read: %s\n", where, chunk, a->node,
		       zl_strerror(a->err));
	else if (!ref)
		printf("%schunk %" PRIu64 ": no member could be read\n", where, chunk);
	else
		printf("%schunk %" PRIu64
		       ": %s differs from %s at offset %lld (versions %s vs %s)\n",
		       where, chunk, a->node, ref->node, (long long)off, va, vr);
}

/* Reads chunk ch (live with seq 0, else as snapshot seq holds it) from
 * every in-sync member and reports each copy that differs from the first
 * readable one. */
static void vf_chunk(struct vf_run *r, uint64_t ch, uint32_t seq)
{
	struct sc_ctx *c = r->c;
	const struct zl_slice *s = &c->v.slices[zl_volume_slice_of(&c->v, ch)];
	struct vf_copy *cp = r->cp, *ref = NULL;
	int n = 0;

	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		if (zl_slice_member_state(s, i) != ZL_MEMBER_IN_SYNC) {
			r->skipped++;
			continue;
		}
		snprintf(cp[n].node, sizeof(cp[n].node), "%s", s->nodes[i]);
		cp[n].version = 0;
		cp[n].err = vf_read(c, r->name, ch, seq, &cp[n], r->piece);
		s = &c->v.slices[zl_volume_slice_of(&c->v, ch)]; /* may be reloaded */
		if (!cp[n].err && !ref)
			ref = &cp[n]; /* the first readable: the primary when it is */
		n++;
	}
	for (int i = 0; i < n; i++) {
		int64_t off = -1;

		if (&cp[i] == ref)
			continue;
		if (!cp[i].err && ref) {
			for (uint32_t b = 0; b < c->v.chunk_size && off < 0; b += 4096)
				if (memcmp(cp[i].data + b, ref->data + b, 4096))
					for (uint32_t k = b; k < b + 4096; k++)
						if (cp[i].data[k] != ref->data[k]) {
							off = k;
							break;
						}
			if (off < 0 && cp[i].version == ref->version)
				continue;
		}
		r->diffs++;
		vf_report(r, seq, ch, &cp[i], ref, off);
	}
	if (!ref && n) {
		r->diffs++;
		vf_report(r, seq, ch, &cp[0], NULL, -1);
	}
}

/* The sequence of snapshot S of the volume (name or id, else a sequence in
 * its snaps): 0 and an error printed when there is none. */
static uint32_t vf_snap_pick(struct vf_run *r, const char *snap)
{
	const struct zl_volume *v = &r->c->v;
	char *end = NULL;
	unsigned long seq;

	for (size_t i = 0; i < r->n_snaps; i++)
		if (!strcmp(r->snaps[i].name, snap) || !strcmp(r->snaps[i].id, snap))
			return r->snaps[i].seq;
	errno = 0;
	seq = strtoul(snap, &end, 10);
	if (!errno && end != snap && !*end && snap[0] != '-')
		for (uint32_t i = 0; i < v->n_snaps; i++)
			if (v->snaps[i] == seq)
				return (uint32_t)seq;
	zl_cli_err("volume '%s' has no snapshot '%s' (see 'zl snapshot ls')", v->name, snap);
	return 0;
}

static int cli_volume_verify(struct zl_cli *cli, int argc, char **argv)
{
	struct vf_run r = {.first = true};
	uint64_t n_chunks, compared = 0, snap_compared = 0;
	uint32_t seqs[ZL_META_SNAPS_MAX], n_seqs = 0;
	const char *snap = NULL;
	struct sc_ctx c;
	int rc = sc_args("volume verify", argc, argv, &r.name, &r.json, &snap);

	if (rc)
		return rc < 0 ? 0 : rc;
	r.c = &c;
	rc = sc_setup(&c, cli, r.name);
	if (rc) {
		sc_teardown(&c);
		return rc;
	}
	for (int i = 0; i < ZL_MAX_REPLICAS; i++) {
		r.cp[i].data = malloc(c.v.chunk_size);
		if (!r.cp[i].data)
			rc = -ENOMEM;
	}
	r.piece = zl_xport_buf_alloc(c.x, VERIFY_PIECE);
	if (rc || !r.piece) {
		zl_cli_err("out of memory for %u-byte chunks", c.v.chunk_size);
		rc = ZL_CLI_EXIT_RUNTIME;
		goto out;
	}
	/* Names for the report; a volume whose records are missing (or an
	 * etcd hiccup) is still verified, by sequence. */
	if (c.v.n_snaps &&
	    zl_meta_snap_list(cli->etcd, cli->prefix, c.v.id, &r.snaps, &r.n_snaps)) {
		r.snaps = NULL;
		r.n_snaps = 0;
	}
	if (snap) {
		seqs[0] = vf_snap_pick(&r, snap);
		if (!seqs[0]) {
			rc = ZL_CLI_EXIT_RUNTIME;
			goto out;
		}
		n_seqs = 1;
	} else {
		for (uint32_t i = 0; i < c.v.n_snaps && i < ZL_META_SNAPS_MAX; i++)
			seqs[n_seqs++] = c.v.snaps[i];
	}
	if (r.json)
		printf("{\"volume\":\"%s\",\"id\":\"%s\",\"differences\":[", c.v.name, c.v.id);
	n_chunks = (c.v.size + c.v.chunk_size - 1) / c.v.chunk_size;
	if (!snap)
		for (uint64_t ch = 0; ch < n_chunks; ch++, compared++)
			vf_chunk(&r, ch, 0);
	for (uint32_t i = 0; i < n_seqs; i++)
		for (uint64_t ch = 0; ch < n_chunks; ch++, snap_compared++)
			vf_chunk(&r, ch, seqs[i]);
	if (r.json)
		printf("],\"chunks\":%" PRIu64 ",\"snapshot_chunks\":%" PRIu64
		       ",\"snapshots\":%u,\"differences_count\":%" PRIu64 ",\"identical\":%s}\n",
		       compared, snap_compared, n_seqs, r.diffs, r.diffs ? "false" : "true");
	else
		printf("verify of volume '%s': %" PRIu64 " chunks compared on their in-sync "
		       "members and %" PRIu64 " snapshot chunks across %u snapshot%s, %" PRIu64
		       " difference%s%s\n",
		       c.v.name, compared, snap_compared, n_seqs, n_seqs == 1 ? "" : "s", r.diffs,
		       r.diffs == 1 ? "" : "s",
		       r.skipped ? " (members not in sync were skipped)" : "");
	rc = r.diffs ? ZL_CLI_EXIT_RUNTIME : 0;
out:
	if (r.piece)
		zl_xport_buf_free(c.x, r.piece);
	for (int i = 0; i < ZL_MAX_REPLICAS; i++)
		free(r.cp[i].data);
	free(r.snaps);
	sc_teardown(&c);
	return rc;
}

int zl_cli_volume_scrub_cmd(struct zl_cli *cli, int argc, char **argv, bool verify)
{
	return verify ? cli_volume_verify(cli, argc, argv) : cli_volume_scrub(cli, argc, argv);
}
