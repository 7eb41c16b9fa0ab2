/* Volume client against fake storage nodes served by the real TCP transport
 * on the test's own loop, with a real etcd (ZL_TEST_ETCD). The fake follows
 * docs/PROTOCOL-NOTES.md: slice versions (reloading its cached record when a
 * request carries a newer one), primary-only writes replicated to the in-sync
 * replicas, in-sync-only reads, READ + ZL_WF_ANY served by any node from its
 * own copy (no row checks); switches make a node close connections on
 * WRITE, answer CORRUPT to READ or a given error to writes. Tests run in the
 * client's heal mode (the default) unless set up legacy (legacy_drop, 0.1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cmocka needs the headers above first */
#include <cmocka.h>

#include "lib/client/client_internal.h"
#include "lib/common/common.h"
#include "lib/meta/meta.h"

#define CS	(64u * 1024u)
#define NCHUNK	16u
#define VSIZE	((uint64_t)CS * NCHUNK)
#define NSLICES 4u
#define NNODES	3

struct env;

struct fake_node {
	struct env *env;
	char id[32];
	struct zl_xport *x;
	struct zl_xport_listener *l;
	uint16_t port;
	uint8_t *data;
	uint8_t hello[ZL_WIRE_HELLO_SIZE];
	bool close_on_write;
	bool corrupt_reads;
	int err_left;	/* writes answered with err_status before working again */
	int err_status;
	int nonprimary_reads; /* reads served while not the slice's primary */
	int any_reads;	      /* READ + ZL_WF_ANY served */
	int hellos, reads, writes, flushes, deletes, pings, stales, corrupts, closes, wrong_role;
	/* Snapshot sequences: the highest applied per chunk (a lower one is
	 * answered SNAPSEQ), what the last write and read carried (flags &
	 * ZL_WF_SEQ: seq, else -1), SNAPSEQ answers given. */
	uint32_t wseq[NCHUNK];
	int64_t last_write_seq, last_read_seq;
	int snapseqs;
};

struct env {
	struct zl_loop *loop;
	struct zl_etcd *etcd;
	char prefix[64];
	char vol_id[ZL_VOL_ID_LEN + 1];
	char vol_name[64];
	struct zl_volume meta; /* the fake storage's cached record */
	struct fake_node nodes[NNODES];
	struct zl_client *cli;
	struct zl_vol *vol;
};

struct fake_write {
	struct fake_node *fn;
	struct zl_xport_conn *conn;
	struct zl_wire_hdr hdr;
	uint8_t *buf;
};

static int test_seq;
static bool env_legacy; /* the next env_setup opens a legacy_drop client */
static bool env_nocap;	/* the next env_setup's fakes do not take sequences */

static struct fake_node *fake_by_id(struct env *e, const char *id)
{
	for (int i = 0; i < NNODES; i++)
		if (strcmp(e->nodes[i].id, id) == 0)
			return &e->nodes[i];
	return NULL;
}

/* Storage-side version check of PROTOCOL-NOTES: reload on a newer version,
 * STALE on any mismatch. Returns the slice or NULL with *status set. */
static const struct zl_slice *fake_slice(struct fake_node *fn, const struct zl_wire_hdr *h,
					 int *status)
{
	struct env *e = fn->env;
	const struct zl_slice *s;

	if (h->vol_id != e->meta.num) {
		*status = -ZL_ERR_NOT_FOUND;
		return NULL;
	}
	if (h->chunk >= NCHUNK || (uint64_t)h->offset + h->length > CS) {
		*status = -ZL_ERR_RANGE;
		return NULL;
	}
	s = &e->meta.slices[h->chunk % e->meta.n_slices];
	if (h->slice_ver > s->version) {
		struct zl_volume fresh;

		assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &fresh), 0);
		zl_volume_fini(&e->meta);
		e->meta = fresh;
		s = &e->meta.slices[h->chunk % e->meta.n_slices];
	}
	if (h->slice_ver != s->version) {
		fn->stales++;
		*status = -ZL_ERR_STALE;
		return NULL;
	}
	*status = 0;
	return s;
}

static void fake_reply(struct zl_xport_conn *c, const struct zl_wire_hdr *h, int status,
		       uint64_t ver, const void *data, uint32_t len)
{
	struct zl_wire_hdr rep;

	zl_wire_reply_init(h, &rep, status);
	rep.slice_ver = ver;
	zl_xport_reply(c, &rep, data, len, NULL, NULL);
}

/* The primary's write: applied to every in-sync replica of the slice. */
static void fake_apply(struct env *e, const struct zl_wire_hdr *h, int op, const uint8_t *buf)
{
	const struct zl_slice *s = &e->meta.slices[h->chunk % e->meta.n_slices];
	uint64_t off = h->chunk * CS + h->offset;

	for (unsigned r = 0; r < s->n; r++) {
		struct fake_node *fn = fake_by_id(e, s->nodes[r]);

		if (!s->in_sync[r] || !fn)
			continue;
		if (op == ZL_OP_WRITE)
			memcpy(fn->data + off, buf, h->length);
		else
			memset(fn->data + off, 0, h->length);
	}
}

static void fake_write_done(void *arg, int status)
{
	struct fake_write *w = arg;
	struct env *e = w->fn->env;
	const struct zl_slice *s = &e->meta.slices[w->hdr.chunk % e->meta.n_slices];

	if (!status)
		fake_apply(e, &w->hdr, ZL_OP_WRITE, w->buf);
	fake_reply(w->conn, &w->hdr, status, s->version, NULL, 0);
	zl_xport_conn_put(w->conn);
	free(w->buf);
	free(w);
}

/* READ + ZL_WF_ANY: this node's own copy, whatever its role; aux = the
 * copy's version (the fake has one per node: 1). */
static void fake_read_any(struct fake_node *fn, struct zl_xport_conn *c,
			  const struct zl_wire_hdr *h)
{
	struct env *e = fn->env;
	struct zl_wire_hdr rep;
	int status = 0;

	if (h->vol_id != e->meta.num)
		status = -ZL_ERR_NOT_FOUND;
	else if (h->chunk >= NCHUNK || (uint64_t)h->offset + h->length > CS)
		status = -ZL_ERR_RANGE;
	else if (fn->corrupt_reads)
		status = -ZL_ERR_CORRUPT;
	if (status == -ZL_ERR_CORRUPT)
		fn->corrupts++;
	if (status) {
		fake_reply(c, h, status, 0, NULL, 0);
		return;
	}
	fn->any_reads++;
	zl_wire_reply_init(h, &rep, 0);
	rep.slice_ver = e->meta.slices[h->chunk % e->meta.n_slices].version;
	rep.aux = 1;
	zl_xport_reply(c, &rep, fn->data + h->chunk * CS + h->offset, h->length, NULL, NULL);
}

static void fake_on_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
			    struct zl_xport_payload *p)
{
	struct fake_node *fn = arg;
	const struct zl_slice *s;
	struct fake_write *w;
	int status, idx;

	switch (h->opcode) {
	case ZL_OP_HELLO:
		fn->hellos++;
		if (p)
			zl_xport_discard(p);
		fake_reply(c, h, 0, 0, fn->hello, ZL_WIRE_HELLO_SIZE);
		return;
	case ZL_OP_PING:
		fn->pings++;
		fake_reply(c, h, 0, 0, NULL, 0);
		return;
	case ZL_OP_FLUSH:
		fn->flushes++;
		fake_reply(c, h, 0, 0, NULL, 0);
		return;
	case ZL_OP_VOLUME_DELETE:
		fn->deletes++;
		fake_reply(c, h, 0, 0, NULL, 0);
		return;
	case ZL_OP_READ:
		if (h->flags & ZL_WF_ANY) {
			fake_read_any(fn, c, h);
			return;
		}
		s = fake_slice(fn, h, &status);
		if (!s) {
			fake_reply(c, h, status, 0, NULL, 0);
			return;
		}
		idx = zl_slice_index_of(s, fn->id);
		if (idx < 0 || !s->in_sync[idx]) {
			fn->wrong_role++;
			fake_reply(c, h, -ZL_ERR_NOT_INSYNC, s->version, NULL, 0);
			return;
		}
		if (fn->corrupt_reads) {
			fn->corrupts++;
			fake_reply(c, h, -ZL_ERR_CORRUPT, s->version, NULL, 0);
			return;
		}
		fn->reads++;
		fn->last_read_seq = (h->flags & ZL_WF_SEQ) ? (int64_t)h->snap_seq : -1;
		if (zl_slice_primary(s) != idx)
			fn->nonprimary_reads++;
		fake_reply(c, h, 0, s->version, fn->data + h->chunk * CS + h->offset, h->length);
		return;
	case ZL_OP_WRITE:
	case ZL_OP_DISCARD:
	case ZL_OP_WRITE_ZEROES:
		if (fn->close_on_write) {
			fn->closes++;
			if (p)
				zl_xport_discard(p);
			zl_xport_conn_close(c);
			return;
		}
		s = fake_slice(fn, h, &status);
		if (s && !status && (h->flags & ZL_WF_SEQ) && h->snap_seq < fn->wseq[h->chunk]) {
			fn->snapseqs++;
			status = -ZL_ERR_SNAPSEQ;
		} else if (s && !status && fn->err_left > 0) {
			fn->err_left--;
			status = fn->err_status;
		} else if (s && zl_slice_primary(s) != zl_slice_index_of(s, fn->id)) {
			fn->wrong_role++;
			status = -ZL_ERR_NOT_PRIMARY;
		}
		if (status) {
			if (p)
				zl_xport_discard(p);
			fake_reply(c, h, status, s ? s->version : 0, NULL, 0);
			return;
		}
		fn->writes++;
		fn->last_write_seq = (h->flags & ZL_WF_SEQ) ? (int64_t)h->snap_seq : -1;
		if ((h->flags & ZL_WF_SEQ) && h->snap_seq > fn->wseq[h->chunk])
			fn->wseq[h->chunk] = h->snap_seq;
		if (h->opcode != ZL_OP_WRITE) {
			fake_apply(fn->env, h, h->opcode, NULL);
			fake_reply(c, h, 0, s->version, NULL, 0);
			return;
		}
		w = calloc(1, sizeof(*w));
		assert_non_null(w);
		w->buf = malloc(h->length);
		assert_non_null(w->buf);
		w->fn = fn;
		w->conn = c;
		w->hdr = *h;
		zl_xport_conn_get(c);
		assert_int_equal(zl_xport_fetch(p, w->buf, h->length, fake_write_done, w), 0);
		return;
	default:
		if (p)
			zl_xport_discard(p);
		fake_reply(c, h, -ZL_ERR_PROTO, 0, NULL, 0);
	}
}

static void fake_on_conn(void *arg, struct zl_xport_conn *c)
{
	(void)arg;
	(void)c;
}

static void fake_on_close(void *arg, struct zl_xport_conn *c, int reason)
{
	(void)arg;
	(void)c;
	(void)reason;
}

static const struct zl_xport_server_ops fake_ops = {
    .on_conn = fake_on_conn,
    .on_request = fake_on_request,
    .on_close = fake_on_close,
};

static void fake_register(struct env *e, int i)
{
	struct fake_node *fn = &e->nodes[i];
	struct zl_node_info ni;

	memset(&ni, 0, sizeof(ni));
	snprintf(ni.id, sizeof(ni.id), "%s", fn->id);
	snprintf(ni.addr, sizeof(ni.addr), "127.0.0.1");
	ni.port = fn->port;
	snprintf(ni.transports, sizeof(ni.transports), "tcp");
	ni.capacity = 1ull << 30;
	ni.free = 1ull << 30;
	ni.start_time = zl_wall_sec();
	snprintf(ni.version, sizeof(ni.version), "test");
	assert_int_equal(zl_meta_node_put(e->etcd, e->prefix, &ni, 0), 0);
}

static void fake_start(struct env *e, int i)
{
	struct fake_node *fn = &e->nodes[i];
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP};
	struct zl_wire_hello hl = {.proto_version = ZL_WIRE_VERSION,
				   .caps = ZL_WIRE_CAP_TCP | (env_nocap ? 0 : ZL_WIRE_CAP_SNAPSEQ)};

	fn->env = e;
	snprintf(fn->id, sizeof(fn->id), "fake-%d", i);
	fn->data = calloc(1, VSIZE);
	assert_non_null(fn->data);
	snprintf(hl.node_id, sizeof(hl.node_id), "%s", fn->id);
	zl_wire_hello_encode(&hl, fn->hello);
	assert_int_equal(zl_xport_create(e->loop, &xo, &fn->x), 0);
	assert_int_equal(zl_xport_listen(fn->x, "127.0.0.1", 0, &fake_ops, fn, &fn->l), 0);
	fn->port = zl_xport_listener_port(fn->l);
	fake_register(e, i);
}

/* Slice s on fake-(s%3) (primary) and fake-((s+1)%3), version 1. */
static void put_volume(struct env *e)
{
	struct zl_volume v;
	char key[256];
	char *json;
	uint64_t num = 0x1000 + (uint64_t)test_seq;

	memset(&v, 0, sizeof(v));
	zl_vol_id_format(num, v.id);
	v.num = num;
	snprintf(v.name, sizeof(v.name), "%s", e->vol_name);
	v.size = VSIZE;
	v.chunk_size = CS;
	v.replicas = 2;
	v.n_slices = NSLICES;
	snprintf(v.state, sizeof(v.state), "ready");
	snprintf(v.params, sizeof(v.params), "{}");
	v.created = zl_wall_sec();
	v.slices = calloc(NSLICES, sizeof(*v.slices));
	assert_non_null(v.slices);
	for (unsigned s = 0; s < NSLICES; s++) {
		v.slices[s].version = 1;
		v.slices[s].n = 2;
		snprintf(v.slices[s].nodes[0], ZL_NODE_ID_MAX, "fake-%u", s % NNODES);
		snprintf(v.slices[s].nodes[1], ZL_NODE_ID_MAX, "fake-%u", (s + 1) % NNODES);
		v.slices[s].in_sync[0] = true;
		v.slices[s].in_sync[1] = true;
	}
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_int_equal(zl_meta_key(key, sizeof(key), e->prefix, "volumes", v.id), 0);
	assert_int_equal(zl_etcd_put(e->etcd, key, json, strlen(json), 0, NULL), 0);
	free(json);
	assert_int_equal(zl_meta_key(key, sizeof(key), e->prefix, "names", v.name), 0);
	assert_int_equal(zl_etcd_put(e->etcd, key, v.id, strlen(v.id), 0, NULL), 0);
	snprintf(e->vol_id, sizeof(e->vol_id), "%s", v.id);
	zl_volume_fini(&v);
	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &e->meta), 0);
}

static int env_setup(void **state)
{
	const char *url = getenv("ZL_TEST_ETCD");
	struct zl_etcd_opts eo = {0};
	struct zl_client_opts co = {0};
	struct env *e;

	if (!url) {
		fprintf(stderr, "ZL_TEST_ETCD is not set: run through test/lib/with-etcd.sh\n");
		return -1;
	}
	e = calloc(1, sizeof(*e));
	assert_non_null(e);
	test_seq++;
	snprintf(e->prefix, sizeof(e->prefix), "/zlt-client-%d-%d/", (int)getpid(), test_seq);
	snprintf(e->vol_name, sizeof(e->vol_name), "testvol-%d", test_seq);
	assert_int_equal(zl_loop_create(&e->loop), 0);
	eo.endpoints = url;
	assert_int_equal(zl_etcd_create(&eo, &e->etcd), 0);
	for (int i = 0; i < NNODES; i++)
		fake_start(e, i);
	put_volume(e);
	co.prefix = e->prefix;
	co.client_id = "unit-client";
	co.transport = ZL_XPORT_SEL_AUTO;
	co.timeout_ms = 2000;
	co.legacy_drop = env_legacy;
	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &e->cli), 0);
	assert_int_equal(zl_vol_open(e->cli, e->vol_name, &e->vol), 0);
	*state = e;
	return 0;
}

static int env_setup_legacy(void **state)
{
	int rc;

	env_legacy = true;
	rc = env_setup(state);
	env_legacy = false;
	return rc;
}

static int env_setup_nocap(void **state)
{
	int rc;

	env_nocap = true;
	rc = env_setup(state);
	env_nocap = false;
	return rc;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	if (!e)
		return 0;
	zl_vol_close(e->vol); /* accepts NULL: a test may have closed it */
	zl_client_destroy(e->cli);
	for (int i = 0; i < NNODES; i++) {
		zl_xport_destroy(e->nodes[i].x);
		free(e->nodes[i].data);
	}
	zl_volume_fini(&e->meta);
	zl_etcd_delete_prefix(e->etcd, e->prefix, NULL);
	zl_etcd_destroy(e->etcd);
	zl_loop_destroy(e->loop);
	free(e);
	return 0;
}

static void fill_pattern(uint8_t *b, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 131u + seed * 7u + (i >> 9)) ^ seed);
}

struct done {
	int calls;
	int status;
};

static void done_cb(void *arg, int status)
{
	struct done *d = arg;

	d->calls++;
	d->status = status;
}

static void run_until(struct env *e, const int *counter, int want)
{
	uint64_t deadline = zl_now_ms() + 40000;

	while (*counter < want && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(*counter, want);
}

/* Runs the loop until the volume counted `want` failure reports put: they go
 * to etcd on the client's worker thread, their outcome comes back through
 * the loop. */
static void run_until_reports(struct env *e, uint64_t want)
{
	uint64_t deadline = zl_now_ms() + 10000;
	struct zl_vol_stats st;

	zl_vol_get_stats(e->vol, &st);
	while (st.reports < want && zl_now_ms() < deadline) {
		zl_loop_run_once(e->loop, 50);
		zl_vol_get_stats(e->vol, &st);
	}
	assert_int_equal(st.reports, want);
}

static void test_roundtrip(void **state)
{
	struct env *e = *state;
	const uint64_t off = 1000, len = 3 * CS + 4321; /* unaligned, four chunks */
	uint8_t *wbuf = malloc(len), *rbuf = malloc(len), *zero = calloc(1, CS);
	struct zl_vol *other = NULL;
	struct zl_vol_stats st;
	struct done d = {0};

	assert_non_null(wbuf);
	assert_non_null(rbuf);
	assert_non_null(zero);
	assert_int_equal(zl_vol_size(e->vol), VSIZE);
	assert_string_equal(zl_vol_meta(e->vol)->id, e->vol_id);
	fill_pattern(wbuf, len, 1);
	assert_int_equal(zl_vol_write(e->vol, wbuf, off, len), 0);
	memset(rbuf, 0, len);
	assert_int_equal(zl_vol_read(e->vol, rbuf, off, len), 0);
	assert_memory_equal(rbuf, wbuf, len);
	/* both replicas of every touched slice hold the data, others nothing */
	for (uint64_t ch = off / CS; ch <= (off + len - 1) / CS; ch++) {
		unsigned s = (unsigned)(ch % NSLICES);
		uint64_t lo = ZL_MAX(off, ch * CS), hi = ZL_MIN(off + len, (ch + 1) * CS);

		assert_memory_equal(e->nodes[s % NNODES].data + lo, wbuf + (lo - off), hi - lo);
		assert_memory_equal(e->nodes[(s + 1) % NNODES].data + lo, wbuf + (lo - off),
				    hi - lo);
	}
	/* a read across the tail of a chunk */
	assert_int_equal(zl_vol_read(e->vol, rbuf, CS - 10, 20), 0);
	assert_memory_equal(rbuf, wbuf + (CS - 10 - off), 20);

	/* range and argument checks at submit */
	assert_int_equal(zl_vol_aio_read(e->vol, rbuf, VSIZE - 10, 11, done_cb, &d), -ZL_ERR_RANGE);
	assert_int_equal(zl_vol_aio_write(e->vol, wbuf, VSIZE + 1, 0, 0, done_cb, &d),
			 -ZL_ERR_RANGE);
	assert_int_equal(zl_vol_aio_read(e->vol, NULL, 0, 10, done_cb, &d), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_read(e->vol, rbuf, VSIZE, 1), -ZL_ERR_RANGE);
	/* zero length completes, never inside the call */
	assert_int_equal(zl_vol_aio_read(e->vol, rbuf, VSIZE, 0, done_cb, &d), 0);
	assert_int_equal(d.calls, 0);
	run_until(e, &d.calls, 1);
	assert_int_equal(d.status, 0);

	/* write zeroes and discard read back as zeroes */
	assert_int_equal(zl_vol_write_zeroes(e->vol, off, CS), 0);
	assert_int_equal(zl_vol_read(e->vol, rbuf, off, CS), 0);
	assert_memory_equal(rbuf, zero, CS);
	assert_int_equal(zl_vol_discard(e->vol, off + CS, CS), 0);
	assert_int_equal(zl_vol_read(e->vol, rbuf, off + CS, CS), 0);
	assert_memory_equal(rbuf, zero, CS);
	assert_int_equal(zl_vol_read(e->vol, rbuf, off + 2 * CS, len - 2 * CS), 0);
	assert_memory_equal(rbuf, wbuf + 2 * CS, len - 2 * CS);

	/* FLUSH reaches each primary once: slices 0..3 -> fake-0,1,2,0 */
	assert_int_equal(zl_vol_flush(e->vol), 0);
	for (int i = 0; i < NNODES; i++)
		assert_int_equal(e->nodes[i].flushes, 1);
	for (int i = 0; i < NNODES; i++) {
		assert_int_equal(e->nodes[i].wrong_role, 0);
		assert_int_equal(e->nodes[i].stales, 0);
	}

	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.writes, 1);
	assert_int_equal(st.write_bytes, len);
	assert_true(st.reads >= 5);
	assert_int_equal(st.retries, 0);
	assert_int_equal(st.promotions, 0);

	/* open by id too; unknown volumes are NOT_FOUND */
	assert_int_equal(zl_vol_open(e->cli, e->vol_id, &other), 0);
	assert_int_equal(zl_vol_read(other, rbuf, off + 2 * CS, 100), 0);
	assert_memory_equal(rbuf, wbuf + 2 * CS, 100);
	zl_vol_close(other);
	assert_int_equal(zl_vol_open(e->cli, "no-such-volume", &other), -ZL_ERR_NOT_FOUND);

	/* ping */
	{
		struct zl_node_info ni;
		uint64_t rtt = 0;

		assert_int_equal(zl_meta_node_get(e->etcd, e->prefix, "fake-1", &ni), 0);
		assert_int_equal(zl_client_ping_node(e->cli, &ni, &rtt), 0);
		assert_int_equal(e->nodes[1].pings, 1);
		/* an address that answers as another node */
		snprintf(ni.id, sizeof(ni.id), "fake-2");
		assert_int_not_equal(zl_client_ping_node(e->cli, &ni, NULL), 0);
	}
	free(wbuf);
	free(rbuf);
	free(zero);
}

#define NPAR 64

static void test_parallel(void **state)
{
	struct env *e = *state;
	const uint64_t stride = VSIZE / NPAR, len = stride - 777;
	uint8_t *wbuf[NPAR], *rbuf[NPAR];
	struct done d = {0};
	int calls = 0;

	for (int i = 0; i < NPAR; i++) {
		wbuf[i] = zl_vol_buf_alloc(e->vol, len);
		rbuf[i] = malloc(len);
		assert_non_null(wbuf[i]);
		assert_non_null(rbuf[i]);
		fill_pattern(wbuf[i], len, (uint32_t)i + 100);
	}
	for (int i = 0; i < NPAR; i++)
		assert_int_equal(
		    zl_vol_aio_write(e->vol, wbuf[i], i * stride + 333, len, i & 1, done_cb, &d),
		    0);
	run_until(e, &d.calls, NPAR);
	assert_int_equal(d.status, 0);
	d.calls = 0;
	for (int i = 0; i < NPAR; i++)
		assert_int_equal(
		    zl_vol_aio_read(e->vol, rbuf[i], i * stride + 333, len, done_cb, &d), 0);
	run_until(e, &d.calls, NPAR);
	assert_int_equal(d.status, 0);
	for (int i = 0; i < NPAR; i++) {
		assert_memory_equal(rbuf[i], wbuf[i], len);
		zl_vol_buf_free(e->vol, wbuf[i]);
		free(rbuf[i]);
	}
	(void)calls;
}

/* A client with few I/O slots: BUSY when they are all taken, and a big I/O
 * that needs more sub-requests than the pool holds still completes. */
static void test_busy_and_pool(void **state)
{
	struct env *e = *state;
	struct zl_client_opts co = {
	    .prefix = e->prefix, .client_id = "small", .max_io = 2, .conns_per_node = 1};
	struct zl_client *cli;
	struct zl_vol *v;
	uint8_t *buf = malloc(VSIZE), *rbuf = malloc(VSIZE);
	struct done d = {0};

	assert_non_null(buf);
	assert_non_null(rbuf);
	fill_pattern(buf, VSIZE, 9);
	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &cli), 0);
	assert_int_equal(zl_vol_open(cli, e->vol_id, &v), 0);
	/* 16 chunks = 16 subs > 2 * CLIENT_SUBS_PER_IO */
	assert_int_equal(zl_vol_aio_write(v, buf, 0, VSIZE, 0, done_cb, &d), 0);
	assert_int_equal(zl_vol_aio_read(v, rbuf, 0, 10, done_cb, &d), 0);
	assert_int_equal(zl_vol_aio_read(v, rbuf, 0, 10, done_cb, &d), -ZL_ERR_BUSY);
	run_until(e, &d.calls, 2);
	assert_int_equal(d.status, 0);
	assert_int_equal(zl_vol_read(v, rbuf, 0, VSIZE), 0);
	assert_memory_equal(rbuf, buf, VSIZE);
	/* closing with I/O in flight fails it with CONN */
	d.calls = 0;
	assert_int_equal(zl_vol_aio_read(v, rbuf, 0, VSIZE, done_cb, &d), 0);
	zl_vol_close(v);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.status, -ZL_ERR_CONN);
	zl_client_destroy(cli);
	free(buf);
	free(rbuf);
}

/* The storage learned a newer slice version first: the client's request is
 * STALE, it reloads the record and retries. */
static void test_stale_reload(void **state)
{
	struct env *e = *state;
	struct zl_volume v;
	struct zl_vol_stats st;
	uint8_t wbuf[5000], rbuf[5000];
	int stales = 0;

	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	for (unsigned s = 0; s < v.n_slices; s++)
		v.slices[s].version++;
	assert_int_equal(zl_meta_volume_update(e->etcd, e->prefix, &v), 0);
	zl_volume_fini(&v);
	zl_volume_fini(&e->meta);
	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &e->meta), 0);

	fill_pattern(wbuf, sizeof(wbuf), 3);
	assert_int_equal(zl_vol_write(e->vol, wbuf, 2 * CS - 100, sizeof(wbuf)), 0);
	assert_int_equal(zl_vol_read(e->vol, rbuf, 2 * CS - 100, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(wbuf));
	for (int i = 0; i < NNODES; i++)
		stales += e->nodes[i].stales;
	assert_true(stales >= 1);
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.placement_reloads >= 1);
	assert_true(st.retries >= 1);
	assert_int_equal(zl_vol_meta(e->vol)->slices[1].version, 2);
}

/* The primary of slice 0 drops every connection that carries a WRITE: the
 * client promotes the next replica in etcd and the write lands there. */
static void test_promotion(void **state)
{
	struct env *e = *state;
	struct zl_volume v;
	struct zl_vol_stats st;
	uint8_t wbuf[3000], rbuf[3000];
	int w1;

	e->nodes[0].close_on_write = true;
	w1 = e->nodes[1].writes;
	fill_pattern(wbuf, sizeof(wbuf), 4);
	/* chunk 4 is in slice 0: fake-0 primary, fake-1 backup */
	assert_int_equal(zl_vol_write(e->vol, wbuf, 4 * CS + 10, sizeof(wbuf)), 0);
	assert_true(e->nodes[0].closes >= 1);
	assert_int_equal(e->nodes[1].writes, w1 + 1);
	assert_memory_equal(e->nodes[1].data + 4 * CS + 10, wbuf, sizeof(wbuf));

	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	assert_int_equal(v.slices[0].version, 2);
	assert_false(v.slices[0].in_sync[0]);
	assert_true(v.slices[0].in_sync[1]);
	assert_int_equal(zl_slice_primary(&v.slices[0]), 1);
	/* other slices untouched */
	assert_int_equal(v.slices[1].version, 1);
	zl_volume_fini(&v);

	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.promotions, 1);
	/* reads now go to the new primary */
	assert_int_equal(zl_vol_read(e->vol, rbuf, 4 * CS + 10, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(rbuf));
	assert_int_equal(e->nodes[0].wrong_role, 0);
}

/* The primary of slice 0 finds corruption: the read is served by the backup. */
static void test_corrupt_failover(void **state)
{
	struct env *e = *state;
	struct zl_vol_stats st;
	uint8_t wbuf[8192], rbuf[8192];

	fill_pattern(wbuf, sizeof(wbuf), 5);
	assert_int_equal(zl_vol_write(e->vol, wbuf, 8 * CS + 4096, sizeof(wbuf)), 0);
	e->nodes[0].corrupt_reads = true;
	memset(rbuf, 0, sizeof(rbuf));
	assert_int_equal(zl_vol_read(e->vol, rbuf, 8 * CS + 4096, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(rbuf));
	assert_true(e->nodes[0].corrupts >= 1);
	assert_true(e->nodes[1].reads >= 1);
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.failovers >= 1);
	assert_int_equal(st.promotions, 0);
}

/* A storage node dies (listener and connections gone): reads of its slices
 * move to the other in-sync replica, a write promotes that replica. */
static void test_node_down(void **state)
{
	struct env *e = *state;
	struct zl_vol_stats st;
	uint8_t wbuf[6000], rbuf[6000];

	fill_pattern(wbuf, sizeof(wbuf), 6);
	/* chunk 0: slice 0 = fake-0 (primary), fake-1 */
	assert_int_equal(zl_vol_write(e->vol, wbuf, 100, sizeof(wbuf)), 0);
	zl_xport_destroy(e->nodes[0].x);
	e->nodes[0].x = NULL;
	memset(rbuf, 0, sizeof(rbuf));
	assert_int_equal(zl_vol_read(e->vol, rbuf, 100, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(rbuf));
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.failovers >= 1);
	assert_int_equal(st.promotions, 0);

	fill_pattern(wbuf, sizeof(wbuf), 7);
	assert_int_equal(zl_vol_write(e->vol, wbuf, 100, sizeof(wbuf)), 0);
	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.promotions, 1);
	assert_memory_equal(e->nodes[1].data + 100, wbuf, sizeof(wbuf));
	assert_int_equal(zl_slice_primary(&zl_vol_meta(e->vol)->slices[0]), 1);
	assert_int_equal(zl_vol_read(e->vol, rbuf, 100, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(rbuf));
	/* slices without fake-0 never noticed */
	assert_int_equal(zl_vol_meta(e->vol)->slices[1].version, 1);
	/* FLUSH to the dead primary of slice 3 promotes there too, then succeeds */
	assert_int_equal(zl_vol_flush(e->vol), 0);
	assert_int_equal(zl_slice_primary(&zl_vol_meta(e->vol)->slices[3]), 1);
	assert_true(e->nodes[1].flushes >= 1);
}

/* Every replica of slice 0 reports corruption: the read gives up, bounded by
 * the attempt budget, with -ZL_ERR_UNAVAIL; other slices keep working. */
static void test_bounded_failure(void **state)
{
	struct env *e = *state;
	uint8_t buf[4096];
	struct done d = {0};
	uint64_t t0 = zl_now_ms();

	e->nodes[0].corrupt_reads = true;
	e->nodes[1].corrupt_reads = true;
	assert_int_equal(zl_vol_aio_read(e->vol, buf, 4 * CS, sizeof(buf), done_cb, &d), 0);
	/* slice 2 (fake-2, fake-0) is served meanwhile by fake-2 */
	assert_int_equal(zl_vol_read(e->vol, buf, 2 * CS, sizeof(buf)), 0);
	assert_int_equal(d.calls, 0);
	run_until(e, &d.calls, 1);
	assert_int_equal(d.status, -ZL_ERR_UNAVAIL);
	assert_true(zl_now_ms() - t0 < CLIENT_MAX_IO_MS);
	assert_true(e->nodes[0].corrupts + e->nodes[1].corrupts >= 8);
}

/* ---- heal mode ---- */

/* The reports of the test volume (malloc'd, *n of them). */
static struct zl_report *reports_of(struct env *e, size_t *n)
{
	struct zl_report *r = NULL;

	assert_int_equal(zl_meta_report_list(e->etcd, e->prefix, e->vol_id, &r, n), 0);
	return r;
}

/* What the manager would do: slice `slice` without member idx, version+1. */
static void manager_evict(struct env *e, uint32_t slice, unsigned idx)
{
	struct zl_volume v;

	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	v.slices[slice].in_sync[idx] = false;
	v.slices[slice].version++;
	assert_int_equal(zl_meta_volume_update(e->etcd, e->prefix, &v), 0);
	zl_volume_fini(&v);
}

static void node_kill(struct env *e, int i)
{
	zl_xport_destroy(e->nodes[i].x);
	e->nodes[i].x = NULL;
}

/* The primary of slice 0 dies: a write and a read of that slice wait (no
 * promotion, no read from the backup), the client puts one failure report,
 * and both complete once the "manager" moves the dead node out of the row. */
static void test_heal_node_down(void **state)
{
	struct env *e = *state;
	struct zl_vol_stats st;
	uint8_t wbuf[6000], w2[6000], rbuf[6000];
	struct done dw = {0}, dr = {0};
	struct zl_report *r = NULL;
	struct zl_volume v;
	uint64_t deadline;
	size_t n = 0;

	fill_pattern(wbuf, sizeof(wbuf), 11);
	/* chunk 0: slice 0 = fake-0 (primary), fake-1 */
	assert_int_equal(zl_vol_write(e->vol, wbuf, 100, sizeof(wbuf)), 0);
	node_kill(e, 0);
	fill_pattern(w2, sizeof(w2), 12);
	assert_int_equal(zl_vol_aio_write(e->vol, w2, 100, sizeof(w2), 0, done_cb, &dw), 0);
	assert_int_equal(zl_vol_aio_read(e->vol, rbuf, 8 * CS, 512, done_cb, &dr), 0);
	deadline = zl_now_ms() + 10000;
	while (n == 0 && zl_now_ms() < deadline) {
		zl_loop_run_once(e->loop, 50);
		free(r);
		r = reports_of(e, &n);
	}
	assert_int_equal(n, 1);
	assert_int_equal(r[0].slice, 0);
	assert_string_equal(r[0].reporter, "unit-client");
	assert_string_equal(r[0].peer, "fake-0");
	assert_string_equal(r[0].error, "UNREACHABLE");
	assert_int_equal(r[0].slice_ver, 1);
	assert_true(r[0].lease > 0);
	free(r);
	/* it keeps waiting (a few backoffs), the row is untouched */
	deadline = zl_now_ms() + 1500;
	while (zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(dw.calls, 0);
	assert_int_equal(dr.calls, 0);
	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	assert_int_equal(v.slices[0].version, 1);
	assert_true(v.slices[0].in_sync[0]);
	zl_volume_fini(&v);
	r = reports_of(e, &n);
	assert_int_equal(n, 1); /* one per (slice, peer, slice_ver) */
	free(r);
	assert_int_equal(e->nodes[1].nonprimary_reads, 0);

	manager_evict(e, 0, 0);
	run_until(e, &dw.calls, 1);
	run_until(e, &dr.calls, 1);
	assert_int_equal(dw.status, 0);
	assert_int_equal(dr.status, 0);
	assert_memory_equal(e->nodes[1].data + 100, w2, sizeof(w2));
	assert_int_equal(zl_vol_read(e->vol, rbuf, 100, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, w2, sizeof(rbuf));
	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.promotions, 0);
	assert_int_equal(st.failovers, 0);
	assert_int_equal(st.reports, 1);
	assert_true(st.retries >= 2);
	for (int i = 0; i < NNODES; i++)
		assert_int_equal(e->nodes[i].nonprimary_reads, 0);
}

/* With io_timeout 2 s and the primary dead for good, a write fails with
 * -ZL_ERR_TIMEOUT after about 2 s; other slices serve meanwhile. */
static void test_heal_timeout(void **state)
{
	struct env *e = *state;
	struct zl_client_opts co = {.prefix = e->prefix, .client_id = "short", .io_timeout_s = 2};
	struct zl_client *cli;
	struct zl_vol *v;
	uint8_t buf[4096];
	struct done d = {0};
	uint64_t t0, ms;

	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &cli), 0);
	assert_int_equal(zl_vol_open(cli, e->vol_id, &v), 0);
	fill_pattern(buf, sizeof(buf), 13);
	node_kill(e, 0);
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_aio_write(v, buf, 4 * CS, sizeof(buf), 0, done_cb, &d), 0);
	/* slice 1 (fake-1, fake-2) is served meanwhile */
	assert_int_equal(zl_vol_write(v, buf, 1 * CS, sizeof(buf)), 0);
	run_until(e, &d.calls, 1);
	ms = zl_now_ms() - t0;
	assert_int_equal(d.status, -ZL_ERR_TIMEOUT);
	assert_true(ms >= 1900);
	assert_true(ms < 5000);
	/* the metadata never changed */
	assert_int_equal(zl_vol_meta(v)->slices[0].version, 1);
	zl_vol_close(v);
	zl_client_destroy(cli);
}

/* The volume record's io_timeout (issue 26) replaces the client's (600 s
 * here), and an open volume takes a new one from its watch of the record. */
static void test_heal_volume_io_timeout(void **state)
{
	struct env *e = *state;
	struct zl_volume_mod mod = {.mask = ZL_VMOD_IO_TIMEOUT, .io_timeout_s = 2};
	uint64_t deadline = zl_now_ms() + 10000, t0, ms;
	uint8_t buf[4096];
	struct done d = {0};

	assert_int_equal(zl_meta_volume_modify(e->etcd, e->prefix, e->vol_id, &mod, NULL, NULL), 0);
	while (zl_vol_meta(e->vol)->io_timeout_s != 2 && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 20);
	assert_int_equal(zl_vol_meta(e->vol)->io_timeout_s, 2);
	fill_pattern(buf, sizeof(buf), 14);
	node_kill(e, 0);
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_aio_write(e->vol, buf, 4 * CS, sizeof(buf), 0, done_cb, &d), 0);
	run_until(e, &d.calls, 1);
	ms = zl_now_ms() - t0;
	assert_int_equal(d.status, -ZL_ERR_TIMEOUT);
	assert_true(ms >= 1900);
	assert_true(ms < 5000);
}

/* STALE at the slice version the node itself holds is an attach-epoch
 * fence (docs/SECURITY.md): final. The write fails at once (not after
 * io_timeout), the volume is fenced, and later I/O on any slice fails with
 * STALE without reaching a node; nothing was reported about the primary. */
static void test_heal_fenced(void **state)
{
	struct env *e = *state;
	struct zl_vol_stats st;
	uint8_t buf[4096];
	uint64_t t0, ms;
	int writes = 0, reads = 0;

	fill_pattern(buf, sizeof(buf), 17);
	assert_false(zl_vol_fenced(e->vol));
	e->nodes[0].err_left = 1000000; /* fake-0: primary of slice 0 */
	e->nodes[0].err_status = -ZL_ERR_STALE;
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_write(e->vol, buf, 4 * CS, sizeof(buf)), -ZL_ERR_STALE);
	ms = zl_now_ms() - t0;
	assert_true(ms < 1000); /* io_timeout is 600 s */
	assert_true(zl_vol_fenced(e->vol));
	assert_int_equal(e->nodes[0].err_left, 1000000 - 1); /* asked once, not retried */
	for (int i = 0; i < NNODES; i++) {
		writes += e->nodes[i].writes;
		reads += e->nodes[i].reads;
	}
	/* slice 1 is not fenced at fake-1, but the volume is: nothing is sent */
	assert_int_equal(zl_vol_write(e->vol, buf, 1 * CS, sizeof(buf)), -ZL_ERR_STALE);
	assert_int_equal(zl_vol_read(e->vol, buf, 1 * CS, sizeof(buf)), -ZL_ERR_STALE);
	assert_int_equal(zl_vol_flush(e->vol), -ZL_ERR_STALE);
	for (int i = 0; i < NNODES; i++) {
		writes -= e->nodes[i].writes;
		reads -= e->nodes[i].reads;
	}
	assert_int_equal(writes, 0);
	assert_int_equal(reads, 0);
	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.reports, 0);
	assert_int_equal(e->nodes[0].err_left, 1000000 - 1);
}

/* PEERING answers are waited out; MIN_SIZE until io_timeout stays MIN_SIZE. */
static void test_heal_peering_min_size(void **state)
{
	struct env *e = *state;
	struct zl_client_opts co = {.prefix = e->prefix, .client_id = "ms", .io_timeout_s = 1};
	struct zl_vol_stats st;
	struct zl_client *cli;
	struct zl_vol *v;
	uint8_t buf[4096], rbuf[4096];
	uint64_t t0, ms;

	fill_pattern(buf, sizeof(buf), 14);
	/* chunk 1: slice 1, primary fake-1 */
	e->nodes[1].err_left = 4;
	e->nodes[1].err_status = -ZL_ERR_PEERING;
	assert_int_equal(zl_vol_write(e->vol, buf, CS + 7, sizeof(buf)), 0);
	assert_int_equal(e->nodes[1].err_left, 0);
	assert_int_equal(zl_vol_read(e->vol, rbuf, CS + 7, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, buf, sizeof(buf));
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.retries >= 4);
	assert_int_equal(st.reports, 0);

	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &cli), 0);
	assert_int_equal(zl_vol_open(cli, e->vol_id, &v), 0);
	e->nodes[1].err_left = 1000000;
	e->nodes[1].err_status = -ZL_ERR_MIN_SIZE;
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_write(v, buf, CS, sizeof(buf)), -ZL_ERR_MIN_SIZE);
	ms = zl_now_ms() - t0;
	assert_true(ms >= 900);
	assert_true(ms < 4000);
	/* reads go on below min_size */
	assert_int_equal(zl_vol_read(v, rbuf, CS + 7, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, buf, sizeof(buf));
	zl_vol_close(v);
	zl_client_destroy(cli);
}

/* What the manager would write: every slice gets the third node as a third
 * member, fake-(s%3), fake-((s+1)%3), fake-((s+2)%3), IN_SYNC unless it is
 * fake-2 in slice 0 and rec02 (then RECOVERING); versions +1. */
static void rows_three(struct env *e, bool rec02)
{
	struct zl_volume v;

	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	v.replicas = 3;
	for (uint32_t sl = 0; sl < v.n_slices; sl++) {
		v.slices[sl].n = 3;
		for (int i = 0; i < 3; i++) {
			snprintf(v.slices[sl].nodes[i], ZL_NODE_ID_MAX, "fake-%u",
				 (sl + (unsigned)i) % NNODES);
			zl_slice_member_set(&v.slices[sl], i,
					    rec02 && sl == 0 && i == 2 ? ZL_MEMBER_RECOVERING
								       : ZL_MEMBER_IN_SYNC);
		}
		v.slices[sl].version++;
	}
	assert_int_equal(zl_meta_volume_update(e->etcd, e->prefix, &v), 0);
	zl_volume_fini(&v);
	/* the fake storage learns it first: the client meets STALE */
	zl_volume_fini(&e->meta);
	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &e->meta), 0);
}

static int total_nonprimary_reads(struct env *e)
{
	int n = 0;

	for (int i = 0; i < NNODES; i++)
		n += e->nodes[i].nonprimary_reads;
	return n;
}

/* The primary of slice 0 finds a bad block: the client reports it once
 * ("CORRUPT") and reads the range from the backup with READ + ZL_WF_ANY;
 * nothing is written back, the row is untouched, nobody is promoted. */
static void test_heal_read_around_corrupt(void **state)
{
	struct env *e = *state;
	struct zl_vol_stats st;
	uint8_t *wbuf = malloc(2 * CS), *rbuf = malloc(2 * CS);
	struct zl_report *r;
	struct zl_volume v;
	size_t n = 0;
	int w0, w1;

	assert_non_null(wbuf);
	assert_non_null(rbuf);
	fill_pattern(wbuf, 2 * CS, 15);
	/* chunks 4 and 8: slice 0 = fake-0 (primary), fake-1 */
	assert_int_equal(zl_vol_write(e->vol, wbuf, 4 * CS, CS), 0);
	assert_int_equal(zl_vol_write(e->vol, wbuf + CS, 8 * CS, CS), 0);
	w0 = e->nodes[0].writes;
	w1 = e->nodes[1].writes;
	e->nodes[0].corrupt_reads = true;
	memset(rbuf, 0, 2 * CS);
	assert_int_equal(zl_vol_read(e->vol, rbuf, 4 * CS + 100, 5000), 0);
	assert_memory_equal(rbuf, wbuf + 100, 5000);
	assert_true(e->nodes[0].corrupts >= 1);
	assert_int_equal(e->nodes[1].any_reads, 1);
	/* another chunk of the slice: served the same way, no second report */
	assert_int_equal(zl_vol_read(e->vol, rbuf, 8 * CS, CS), 0);
	assert_memory_equal(rbuf, wbuf + CS, CS);
	assert_true(e->nodes[1].any_reads >= 2);
	assert_int_equal(total_nonprimary_reads(e), 0);
	/* one report, about the primary, CORRUPT */
	run_until_reports(e, 1);
	r = reports_of(e, &n);
	assert_int_equal(n, 1);
	assert_int_equal(r[0].slice, 0);
	assert_string_equal(r[0].reporter, "unit-client");
	assert_string_equal(r[0].peer, "fake-0");
	assert_string_equal(r[0].error, "CORRUPT");
	assert_int_equal(r[0].slice_ver, 1);
	assert_true(r[0].lease > 0);
	free(r);
	zl_vol_get_stats(e->vol, &st);
	assert_int_equal(st.reports, 1);
	assert_true(st.failovers >= 2);
	assert_int_equal(st.promotions, 0);
	/* the client wrote nothing, the row is as it was */
	assert_int_equal(e->nodes[0].writes, w0);
	assert_int_equal(e->nodes[1].writes, w1);
	assert_int_equal(zl_meta_volume_get(e->etcd, e->prefix, e->vol_id, &v), 0);
	assert_int_equal(v.slices[0].version, 1);
	assert_true(v.slices[0].in_sync[0] && v.slices[0].in_sync[1]);
	zl_volume_fini(&v);
	/* the primary healed (scrub): reads go to it again, no ANY read */
	e->nodes[0].corrupt_reads = false;
	n = (size_t)e->nodes[1].any_reads;
	assert_int_equal(zl_vol_read(e->vol, rbuf, 4 * CS, CS), 0);
	assert_memory_equal(rbuf, wbuf, CS);
	assert_int_equal(e->nodes[1].any_reads, (int)n);
	free(wbuf);
	free(rbuf);
}

/* Both copies of slice 0 are bad: -ZL_ERR_CORRUPT at once (no waiting for
 * io_timeout), after the backup was asked; other slices serve meanwhile. */
static void test_heal_read_around_all_bad(void **state)
{
	struct env *e = *state;
	uint8_t buf[4096];
	struct zl_report *r;
	size_t n = 0;
	uint64_t t0;

	fill_pattern(buf, sizeof(buf), 16);
	assert_int_equal(zl_vol_write(e->vol, buf, 4 * CS, sizeof(buf)), 0);
	e->nodes[0].corrupt_reads = true;
	e->nodes[1].corrupt_reads = true;
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_read(e->vol, buf, 4 * CS, sizeof(buf)), -ZL_ERR_CORRUPT);
	assert_true(zl_now_ms() - t0 < 2000);
	assert_int_equal(e->nodes[0].corrupts, 1);
	assert_int_equal(e->nodes[1].corrupts, 1); /* once, READ + ZL_WF_ANY */
	assert_int_equal(e->nodes[1].any_reads, 0);
	run_until_reports(e, 1);
	r = reports_of(e, &n);
	assert_int_equal(n, 1);
	assert_string_equal(r[0].peer, "fake-0");
	assert_string_equal(r[0].error, "CORRUPT");
	free(r);
	/* slice 2 (fake-2, fake-0) is fine */
	assert_int_equal(zl_vol_read(e->vol, buf, 2 * CS, sizeof(buf)), 0);
}

/* Three members: the first backup is bad too, the second serves. A member
 * that is not IN_SYNC (RECOVERING) is never read around a bad copy. */
static void test_heal_read_around_members(void **state)
{
	struct env *e = *state;
	uint8_t wbuf[8192], rbuf[8192];

	rows_three(e, false);
	fill_pattern(wbuf, sizeof(wbuf), 17);
	assert_int_equal(zl_vol_write(e->vol, wbuf, 4 * CS + 4096, sizeof(wbuf)), 0);
	assert_memory_equal(e->nodes[2].data + 4 * CS + 4096, wbuf, sizeof(wbuf));
	e->nodes[0].corrupt_reads = true;
	e->nodes[1].corrupt_reads = true;
	memset(rbuf, 0, sizeof(rbuf));
	assert_int_equal(zl_vol_read(e->vol, rbuf, 4 * CS + 4096, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, wbuf, sizeof(rbuf));
	assert_int_equal(e->nodes[1].corrupts, 1);
	assert_int_equal(e->nodes[2].any_reads, 1);

	/* fake-2 RECOVERING: holds the data, but is not asked */
	rows_three(e, true);
	e->nodes[2].any_reads = 0;
	e->nodes[1].corrupts = 0;
	assert_int_equal(zl_vol_read(e->vol, rbuf, 4 * CS + 4096, sizeof(rbuf)), -ZL_ERR_CORRUPT);
	assert_int_equal(e->nodes[1].corrupts, 1);
	assert_int_equal(e->nodes[2].any_reads, 0);
	assert_int_equal(total_nonprimary_reads(e), 0);
}

/* True when node's tombstones name the test volume. */
static bool has_tombstone(struct env *e, const char *node)
{
	uint64_t *vols = NULL;
	size_t n = 0;
	bool found = false;

	assert_int_equal(zl_meta_tombstone_list(e->etcd, e->prefix, node, &vols, &n, NULL), 0);
	for (size_t i = 0; i < n; i++)
		found |= vols[i] == e->meta.num;
	free(vols);
	return found;
}

/* Sets the volume's limits in etcd (zl_volume_mod) and runs the loop until
 * the open volume applied them from its watch of the record. */
static void set_limits(struct env *e, const struct zl_volume_mod *mod)
{
	uint64_t deadline = zl_now_ms() + 10000;

	assert_int_equal(zl_meta_volume_modify(e->etcd, e->prefix, e->vol_id, mod, NULL, NULL), 0);
	while (memcmp(zl_vol_meta(e->vol)->qos, mod->qos, sizeof(mod->qos)) &&
	       zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 20);
	assert_memory_equal(zl_vol_meta(e->vol)->qos, mod->qos, sizeof(mod->qos));
}

/* A write IOPS limit of 1 per second, n writes spread over the handles
 * v[0..nv) (buf: n * 4096 bytes), then the limit removed while they wait:
 * every handle follows its record, and they all complete at once. */
static void qos_unlimit_waiting(struct env *e, struct zl_vol **v, int nv, int n, uint8_t *buf,
				struct zl_volume_mod *mod)
{
	struct done d = {0};
	uint64_t t0, ms;

	mod->qos[ZL_QOS_WRITE_IOPS] = 1;
	set_limits(e, mod);
	for (int i = 0; i < n; i++)
		assert_int_equal(zl_vol_aio_write(v[i % nv], buf + (size_t)i * 4096,
						  (uint64_t)i * 4096, 4096, 0, done_cb, &d),
				 0);
	for (int i = 0; i < 20; i++)
		zl_loop_run_once(e->loop, 10);
	assert_true(d.calls < 4);
	mod->qos[ZL_QOS_WRITE_IOPS] = 0;
	mod->qos[ZL_QOS_BURST(ZL_QOS_WRITE_IOPS)] = 0;
	t0 = zl_now_ms();
	set_limits(e, mod);
	run_until(e, &d.calls, n);
	assert_int_equal(d.status, 0);
	ms = zl_now_ms() - t0;
	print_message("qos: limit removed: %d writes waiting on %d handles done %llu ms later\n", n,
		      nv, (unsigned long long)ms);
	assert_true(ms < 3000);
}

/* Issue 26: the volume's write IOPS limit holds the writes back (they wait,
 * none fails), reads are not limited, and a limit removed while writes wait
 * lets them all go at once: the open volume follows its record. */
static void test_qos_limits(void **state)
{
	enum { N = 60, LIMIT = 200 };
	struct env *e = *state;
	struct zl_volume_mod mod = {.mask = ZL_VMOD_QOS(ZL_QOS_WRITE_IOPS) |
					    ZL_VMOD_QOS(ZL_QOS_BURST(ZL_QOS_WRITE_IOPS))};
	uint8_t *buf = malloc((size_t)N * 4096);
	struct zl_vol_stats st;
	struct done d = {0};
	uint64_t t0, ms;

	assert_non_null(buf);
	fill_pattern(buf, (size_t)N * 4096, 9);
	mod.qos[ZL_QOS_WRITE_IOPS] = LIMIT;
	mod.qos[ZL_QOS_BURST(ZL_QOS_WRITE_IOPS)] = 1;
	set_limits(e, &mod);

	/* N writes at once: one goes with the burst, then one per 5 ms. */
	t0 = zl_now_ms();
	for (int i = 0; i < N; i++)
		assert_int_equal(zl_vol_aio_write(e->vol, buf + (size_t)i * 4096,
						  (uint64_t)i * 4096, 4096, 0, done_cb, &d),
				 0);
	run_until(e, &d.calls, N);
	ms = zl_now_ms() - t0;
	assert_int_equal(d.status, 0);
	zl_vol_get_stats(e->vol, &st);
	print_message("qos: %d writes at %d IOPS took %llu ms, %llu waited\n", N, LIMIT,
		      (unsigned long long)ms, (unsigned long long)st.throttled);
	assert_true(ms >= (N - 2) * 1000 / LIMIT);
	assert_true(ms < 4 * N * 1000 / LIMIT);
	assert_true(st.throttled >= N - 2);

	/* Reads: no read limit, nothing waits. */
	d.calls = 0;
	for (int i = 0; i < N; i++)
		assert_int_equal(zl_vol_aio_read(e->vol, buf + (size_t)i * 4096, (uint64_t)i * 4096,
						 4096, done_cb, &d),
				 0);
	run_until(e, &d.calls, N);
	assert_int_equal(d.status, 0);
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.throttled >= N - 2 && st.throttled <= N);

	/* A limit of 1 write per second, then removed while they wait. */
	qos_unlimit_waiting(e, &e->vol, 1, N, buf, &mod);
	free(buf);
}

/* Two handles of the volume (two clients, as the ublk frontend's queue
 * threads have) joined to one zl_vol_qos_share: the write IOPS limit holds
 * for both together (per-handle buckets would let each reach it), waiting
 * writes of both go by the timer, and a limit removed while they wait
 * reaches the share through each handle's watch. */
static void test_qos_share(void **state)
{
	enum { N = 30, LIMIT = 200 };
	struct env *e = *state;
	struct zl_volume_mod mod = {.mask = ZL_VMOD_QOS(ZL_QOS_WRITE_IOPS) |
					    ZL_VMOD_QOS(ZL_QOS_BURST(ZL_QOS_WRITE_IOPS))};
	struct zl_client_opts co = {.prefix = e->prefix, .client_id = "unit-qos2"};
	uint8_t *buf = malloc((size_t)2 * N * 4096);
	struct zl_vol_qos_share *share;
	struct zl_client *cli2;
	struct zl_vol *v[2];
	struct done d = {0};
	uint64_t t0, ms, deadline;

	assert_non_null(buf);
	fill_pattern(buf, (size_t)2 * N * 4096, 11);
	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &cli2), 0);
	assert_int_equal(zl_vol_open(cli2, e->vol_name, &v[1]), 0);
	v[0] = e->vol;
	assert_int_equal(zl_vol_qos_share_create(&share), 0);
	for (int h = 0; h < 2; h++)
		assert_int_equal(zl_vol_qos_join(v[h], share), 0);
	assert_int_equal(zl_vol_qos_join(v[1], share), -ZL_ERR_INVAL);
	/* The handles hold their references: the creator's may go now. */
	zl_vol_qos_share_put(share);
	mod.qos[ZL_QOS_WRITE_IOPS] = LIMIT;
	mod.qos[ZL_QOS_BURST(ZL_QOS_WRITE_IOPS)] = 1;
	set_limits(e, &mod);
	deadline = zl_now_ms() + 10000;
	while (zl_vol_meta(v[1])->qos[ZL_QOS_WRITE_IOPS] != LIMIT && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 20);

	/* 2N writes, N on each handle: one per 5 ms for both together. */
	t0 = zl_now_ms();
	for (int i = 0; i < 2 * N; i++)
		assert_int_equal(zl_vol_aio_write(v[i % 2], buf + (size_t)i * 4096,
						  (uint64_t)i * 4096, 4096, 0, done_cb, &d),
				 0);
	run_until(e, &d.calls, 2 * N);
	ms = zl_now_ms() - t0;
	assert_int_equal(d.status, 0);
	print_message("qos share: %d writes on 2 handles at %d IOPS took %llu ms\n", 2 * N, LIMIT,
		      (unsigned long long)ms);
	assert_true(ms >= (2 * N - 2) * 1000 / LIMIT);
	assert_true(ms < 4 * 2 * N * 1000 / LIMIT);

	/* 1 write per second, removed while both handles' writes wait. */
	qos_unlimit_waiting(e, v, 2, 2 * N, buf, &mod);
	zl_vol_close(v[1]);
	zl_client_destroy(cli2);
	free(buf);
}

static void test_volume_delete(void **state)
{
	struct env *e = *state;
	struct zl_client_delete_info info;
	struct zl_volume v;
	char key[256];

	/* a placement node without a record (down): the delete succeeds, the
	 * live nodes drop their replicas now, the down one keeps a tombstone */
	assert_int_equal(zl_meta_key(key, sizeof(key), e->prefix, "nodes", "fake-2"), 0);
	assert_int_equal(zl_etcd_delete(e->etcd, key, NULL, NULL), 0);
	assert_int_equal(zl_client_volume_remove(e->cli, e->vol_name, false, &info), 0);
	assert_int_equal(info.nodes_done, 2);
	assert_int_equal(info.nodes_pending, 1);
	assert_string_equal(info.pending_node, "fake-2");
	assert_int_equal(zl_meta_volume_lookup(e->etcd, e->prefix, e->vol_id, &v),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_lookup(e->etcd, e->prefix, e->vol_name, &v),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(e->nodes[0].deletes, 1);
	assert_int_equal(e->nodes[1].deletes, 1);
	assert_int_equal(e->nodes[2].deletes, 0);
	assert_false(has_tombstone(e, "fake-0"));
	assert_false(has_tombstone(e, "fake-1"));
	assert_true(has_tombstone(e, "fake-2"));
	assert_int_equal(zl_client_volume_delete(e->cli, e->vol_id), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_tombstone_clear(e->etcd, e->prefix, "fake-2", e->vol_id), 0);
	assert_false(has_tombstone(e, "fake-2"));
}

/* An attached volume is refused (record, name and data intact) unless
 * forced; the forced delete removes the attachment too. */
static void test_volume_delete_attached(void **state)
{
	struct env *e = *state;
	struct zl_client_delete_info info;
	static const char att[] = "{\"node\":\"k8s-node-7\",\"epoch\":5,\"readonly\":false,"
				  "\"time\":1}";
	struct zl_volume v;
	char key[256];

	assert_int_equal(zl_meta_key(key, sizeof(key), e->prefix, "attachments", e->vol_id), 0);
	assert_int_equal(zl_etcd_put(e->etcd, key, att, strlen(att), 0, NULL), 0);
	assert_int_equal(zl_client_volume_remove(e->cli, e->vol_name, false, &info), -ZL_ERR_BUSY);
	assert_string_equal(info.attached_node, "k8s-node-7");
	assert_int_equal(zl_client_volume_delete(e->cli, e->vol_name), -ZL_ERR_BUSY);
	assert_int_equal(zl_meta_volume_lookup(e->etcd, e->prefix, e->vol_name, &v), 0);
	assert_string_equal(v.state, "ready");
	zl_volume_fini(&v);
	for (int i = 0; i < NNODES; i++)
		assert_int_equal(e->nodes[i].deletes, 0);
	assert_int_equal(zl_meta_attachment_get(e->etcd, e->prefix, e->vol_id, NULL, 0), 0);

	assert_int_equal(zl_client_volume_remove(e->cli, e->vol_name, true, &info), 0);
	assert_int_equal(info.nodes_done, NNODES);
	assert_int_equal(info.nodes_pending, 0);
	for (int i = 0; i < NNODES; i++)
		assert_int_equal(e->nodes[i].deletes, 1);
	assert_int_equal(zl_meta_attachment_get(e->etcd, e->prefix, e->vol_id, NULL, 0),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_lookup(e->etcd, e->prefix, e->vol_id, &v),
			 -ZL_ERR_NOT_FOUND);
}

/* ---- snapshots ---- */

/* Runs the loop until the client's write sequence is want. */
static void run_until_seq(struct env *e, uint32_t want)
{
	uint64_t deadline = zl_now_ms() + 10000;

	while (zl_vol_snap_seq(e->vol) != want && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(zl_vol_snap_seq(e->vol), want);
}

static void snap_take(struct env *e, const char *name, uint32_t want_seq)
{
	struct zl_snapshot s;

	assert_int_equal(
	    zl_meta_snap_create(e->etcd, e->prefix, e->vol_id, name, NULL, &s, NULL, NULL), 0);
	assert_int_equal(s.seq, want_seq);
}

/* Writes carry the volume's sequence; a snapshot taken elsewhere reaches the
 * client through its watch of the record, and the next write carries it. A
 * READ of a snapshot carries its sequence; a live READ none. */
static void test_snap_seq_carried(void **state)
{
	struct env *e = *state;
	struct fake_node *p0 = &e->nodes[0]; /* primary of slice 0 (chunk 0) */
	uint8_t buf[4096], rbuf[4096];

	fill_pattern(buf, sizeof(buf), 11);
	assert_int_equal(zl_vol_write(e->vol, buf, 0, sizeof(buf)), 0);
	assert_int_equal(p0->last_write_seq, 0);
	snap_take(e, "s1", 1);
	run_until_seq(e, 1);
	assert_int_equal(zl_vol_write(e->vol, buf, 0, sizeof(buf)), 0);
	assert_int_equal(p0->last_write_seq, 1);
	assert_int_equal(zl_vol_write_zeroes(e->vol, 4096, 4096), 0);
	assert_int_equal(p0->last_write_seq, 1);

	assert_int_equal(zl_vol_read(e->vol, rbuf, 0, sizeof(rbuf)), 0);
	assert_int_equal(p0->last_read_seq, -1);
	assert_int_equal(zl_vol_read_snap(e->vol, 1, rbuf, 0, sizeof(rbuf)), 0);
	assert_int_equal(p0->last_read_seq, 1);
	assert_memory_equal(rbuf, buf, sizeof(buf));
	assert_int_equal(zl_vol_read_snap(e->vol, 0, rbuf, 0, sizeof(rbuf)), -ZL_ERR_INVAL);
	/* A snapshot read spanning chunks is split like any read. */
	uint8_t *big = malloc(2 * CS);
	assert_non_null(big);
	assert_int_equal(zl_vol_read_snap(e->vol, 1, big, CS / 2, 2 * CS), 0);
	assert_int_equal(e->nodes[1].last_read_seq, 1); /* chunk 1: slice 1 on fake-1 */
	free(big);
}

/* A write whose sequence is below the chunk's is answered SNAPSEQ: the
 * client reloads the record and sends it again with the new sequence. */
static void test_snapseq_resend(void **state)
{
	struct env *e = *state;
	struct fake_node *p0 = &e->nodes[0];
	uint8_t buf[4096], rbuf[4096];
	struct zl_vol_stats st;

	/* The storage has seen sequence 1 on chunk 0 (another client after a
	 * snapshot) before this client learned of it: the write below is sent
	 * with 0 before the loop runs the watch. */
	p0->wseq[0] = 1;
	snap_take(e, "s1", 1);
	fill_pattern(buf, sizeof(buf), 12);
	assert_int_equal(zl_vol_write(e->vol, buf, 100, sizeof(buf)), 0);
	assert_true(p0->snapseqs >= 1);
	assert_int_equal(p0->last_write_seq, 1);
	assert_int_equal(zl_vol_snap_seq(e->vol), 1);
	zl_vol_get_stats(e->vol, &st);
	assert_true(st.retries >= 1);
	assert_int_equal(zl_vol_read(e->vol, rbuf, 100, sizeof(rbuf)), 0);
	assert_memory_equal(rbuf, buf, sizeof(buf));
}

/* Storage that does not take sequences: fine for a volume without
 * snapshots; a write (and a snapshot read) of a snapshotted one fails with
 * VERSION at once, not after io_timeout. */
static void test_snap_storage_too_old(void **state)
{
	struct env *e = *state;
	uint8_t buf[4096];
	uint64_t t0;

	fill_pattern(buf, sizeof(buf), 13);
	assert_int_equal(zl_vol_write(e->vol, buf, 0, sizeof(buf)), 0);
	assert_int_equal(e->nodes[0].last_write_seq, -1);
	snap_take(e, "s1", 1);
	run_until_seq(e, 1);
	t0 = zl_now_ms();
	assert_int_equal(zl_vol_write(e->vol, buf, 0, sizeof(buf)), -ZL_ERR_VERSION);
	assert_int_equal(zl_vol_read_snap(e->vol, 1, buf, 0, sizeof(buf)), -ZL_ERR_VERSION);
	assert_true(zl_now_ms() - t0 < 5000);
	assert_int_equal(zl_vol_read(e->vol, buf, 0, sizeof(buf)), 0);
}

/* The switch: a serving client takes a requested snapshot, switches its
 * sequence, and only then answers "done". */
static void test_snap_serve(void **state)
{
	struct env *e = *state;
	struct zl_snapreq q = {0}, got = {0};
	struct zl_snapshot s;
	uint64_t deadline;
	char client[64];
	uint8_t buf[4096];

	assert_int_equal(zl_vol_snap_serve(e->vol), 0);
	assert_int_equal(zl_vol_snap_serve(e->vol), -ZL_ERR_BUSY);
	assert_int_equal(
	    zl_meta_snapwriter_get(e->etcd, e->prefix, e->vol_id, client, sizeof(client)), 0);
	assert_string_equal(client, "unit-client");

	for (uint32_t round = 1; round <= 2; round++) {
		snprintf(q.vol, sizeof(q.vol), "%s", e->vol_id);
		zl_meta_snap_id_generate(q.id);
		snprintf(q.name, sizeof(q.name), "serve-%u", round);
		snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_PENDING);
		q.requested = zl_wall_sec();
		assert_int_equal(zl_meta_snapreq_put(e->etcd, e->prefix, &q), 0);
		deadline = zl_now_ms() + 10000;
		memset(&got, 0, sizeof(got));
		while (zl_now_ms() < deadline) {
			zl_loop_run_once(e->loop, 20);
			assert_int_equal(zl_meta_snapreq_get(e->etcd, e->prefix, q.vol, q.id, &got),
					 0);
			if (strcmp(got.state, ZL_SNAPREQ_PENDING))
				break;
		}
		assert_string_equal(got.state, ZL_SNAPREQ_DONE);
		assert_int_equal(got.seq, round);
		/* Switched before it answered: no loop turn in between here. */
		assert_int_equal(zl_vol_snap_seq(e->vol), round);
		assert_int_equal(zl_meta_snap_lookup(e->etcd, e->prefix, q.name, &s), 0);
		assert_string_equal(s.id, q.id);
		assert_int_equal(s.seq, round);
		fill_pattern(buf, sizeof(buf), round);
		assert_int_equal(zl_vol_write(e->vol, buf, 0, sizeof(buf)), 0);
		assert_int_equal(e->nodes[0].last_write_seq, round);
	}

	/* Closing gives up the snapwriters key (revoked on the worker). */
	zl_vol_close(e->vol);
	e->vol = NULL;
	deadline = zl_now_ms() + 10000;
	while (zl_meta_snapwriter_get(e->etcd, e->prefix, e->vol_id, NULL, 0) == 0 &&
	       zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(zl_meta_snapwriter_get(e->etcd, e->prefix, e->vol_id, NULL, 0),
			 -ZL_ERR_NOT_FOUND);
}

static void group_write_cb(void *arg, int status)
{
	int *done = arg;

	*done = status ? status : 1;
}

/* Runs the loop until request (vol, id) is in state want (10 s at most). */
static void group_wait_state(struct env *e, const char *id, const char *want,
			     struct zl_snapreq *got)
{
	uint64_t deadline = zl_now_ms() + 10000;

	memset(got, 0, sizeof(*got));
	while (zl_now_ms() < deadline) {
		zl_loop_run_once(e->loop, 20);
		if (zl_meta_snapreq_get(e->etcd, e->prefix, e->vol_id, id, got) == 0 &&
		    !strcmp(got->state, want))
			return;
	}
	fail_msg("request %s not %s within 10 s (state %s)", id, want, got->state);
}

/* The group hold (docs/SNAPSHOTS.md §5): on a "hold" request the client
 * answers "held" and a write submitted then waits (nothing reaches the
 * storage); the group's transaction turns the request into "switch", the
 * client answers "done", and the held write goes with the new sequence. A
 * hold whose request is deleted (the group failed) releases the write with
 * the record's sequence, no snapshot taken. */
static void test_snap_group_hold(void **state)
{
	struct env *e = *state;
	struct zl_snapgroup_member m = {0};
	struct zl_snapreq q = {0}, got;
	uint8_t *buf = malloc(4096);
	uint64_t writes, until;
	int done = 0;

	assert_non_null(buf);
	fill_pattern(buf, 4096, 7);
	assert_int_equal(zl_vol_snap_serve(e->vol), 0);
	for (int round = 1; round <= 2; round++) {
		snprintf(q.vol, sizeof(q.vol), "%s", e->vol_id);
		zl_meta_snap_id_generate(q.id);
		snprintf(q.name, sizeof(q.name), "grp%d.vol", round);
		snprintf(q.group, sizeof(q.group), "grp%d", round);
		snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_HOLD);
		q.requested = zl_wall_sec();
		assert_int_equal(zl_meta_snapreq_put(e->etcd, e->prefix, &q), 0);
		group_wait_state(e, q.id, ZL_SNAPREQ_HELD, &got);
		writes = e->nodes[0].writes;
		done = 0;
		assert_int_equal(zl_vol_aio_write(e->vol, buf, 0, 4096, 0, group_write_cb, &done),
				 0);
		until = zl_now_ms() + 300;
		while (zl_now_ms() < until)
			zl_loop_run_once(e->loop, 20);
		assert_int_equal(done, 0); /* held */
		assert_int_equal(e->nodes[0].writes, writes);
		assert_int_equal(zl_vol_snap_seq(e->vol), round - 1);
		if (round == 1) {
			snprintf(m.vol, sizeof(m.vol), "%s", e->vol_id);
			snprintf(m.snap_id, sizeof(m.snap_id), "%s", q.id);
			m.req = got;
			assert_int_equal(zl_meta_snapgroup_create(e->etcd, e->prefix, "grp1", &m, 1),
					 0);
			assert_int_equal(m.snap.seq, 1);
			group_wait_state(e, q.id, ZL_SNAPREQ_DONE, &got);
			assert_int_equal(got.seq, 1);
		} else {
			/* The group failed: its requester deletes the request. */
			assert_int_equal(zl_meta_snapreq_delete(e->etcd, e->prefix, e->vol_id, q.id),
					 0);
		}
		until = zl_now_ms() + 10000;
		while (!done && zl_now_ms() < until)
			zl_loop_run_once(e->loop, 20);
		assert_int_equal(done, 1);
		/* Round 1: the new sequence; round 2: the record's (still 1). */
		assert_int_equal(e->nodes[0].last_write_seq, 1);
		assert_int_equal(zl_vol_snap_seq(e->vol), 1);
		if (round == 1)
			zl_meta_snapreq_delete(e->etcd, e->prefix, e->vol_id, q.id);
	}
	assert_int_equal(zl_meta_snapgroup_exists(e->etcd, e->prefix, "grp2"), -ZL_ERR_NOT_FOUND);
	free(buf);
}

/* A handle on another client that follows the serving one
 * (zl_vol_snap_follow): its writes carry the lead's sequence as soon as the
 * lead switches (the record, which its own watch reads, never changes
 * here), and wait while the lead holds, until the lead's release wakes it. */
static void test_snap_follow(void **state)
{
	struct env *e = *state;
	struct fake_node *p0 = &e->nodes[0];
	struct zl_client_opts co = {.prefix = e->prefix, .client_id = "unit-follower"};
	struct zl_client *cli2;
	struct zl_vol *v2;
	uint8_t *buf = malloc(4096);
	uint64_t writes, until;
	int done = 0;

	assert_non_null(buf);
	fill_pattern(buf, 4096, 9);
	co.timeout_ms = 2000;
	assert_int_equal(zl_client_create(e->loop, e->etcd, &co, &cli2), 0);
	assert_int_equal(zl_vol_open(cli2, e->vol_name, &v2), 0);
	assert_int_equal(zl_vol_snap_follow(e->vol, e->vol), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_snap_follow(v2, e->vol), 0);
	assert_int_equal(zl_vol_snap_follow(v2, e->vol), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_write(v2, buf, 0, 4096), 0);
	assert_int_equal(p0->last_write_seq, 0);
	/* The lead's switch: the follower's next write carries it. */
	client_vol_snap_switch(e->vol, 5);
	assert_int_equal(zl_vol_snap_seq(v2), 5);
	assert_int_equal(zl_vol_write(v2, buf, 0, 4096), 0);
	assert_int_equal(p0->last_write_seq, 5);
	/* The lead holds: the follower's write waits, then carries the
	 * sequence the lead released with. */
	client_vol_snap_hold(e->vol);
	writes = p0->writes;
	assert_int_equal(zl_vol_aio_write(v2, buf, 0, 4096, 0, group_write_cb, &done), 0);
	until = zl_now_ms() + 300;
	while (zl_now_ms() < until)
		zl_loop_run_once(e->loop, 20);
	assert_int_equal(done, 0);
	assert_int_equal(p0->writes, writes);
	client_vol_snap_release(e->vol, 6);
	until = zl_now_ms() + 10000;
	while (!done && zl_now_ms() < until)
		zl_loop_run_once(e->loop, 20);
	assert_int_equal(done, 1);
	assert_int_equal(p0->last_write_seq, 6);
	/* The follower closes first (the lead outlives it). */
	zl_vol_close(v2);
	zl_client_destroy(cli2);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_roundtrip, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_parallel, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_busy_and_pool, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_stale_reload, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_promotion, env_setup_legacy, env_teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_failover, env_setup_legacy, env_teardown),
	    cmocka_unit_test_setup_teardown(test_node_down, env_setup_legacy, env_teardown),
	    cmocka_unit_test_setup_teardown(test_bounded_failure, env_setup_legacy, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_node_down, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_timeout, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_peering_min_size, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_fenced, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_volume_io_timeout, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_read_around_corrupt, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_read_around_all_bad, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_heal_read_around_members, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_qos_limits, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_qos_share, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_volume_delete, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_volume_delete_attached, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snap_seq_carried, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snapseq_resend, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snapseq_resend, env_setup_legacy, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snap_storage_too_old, env_setup_nocap,
					    env_teardown),
	    cmocka_unit_test_setup_teardown(test_snap_serve, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snap_group_hold, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_snap_follow, env_setup, env_teardown),
	};

	zl_log_init("client_io_test");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
