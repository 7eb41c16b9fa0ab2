/* e2e_io: drives a real cluster through lib/client and checks every byte.
 *
 *   e2e_io --etcd URL --volume NAME [--bytes 256M] [--seed N]
 *          [--kill-cmd CMD --killed-node ID --restart-cmd CMD --wait-cmd CMD]
 *          [--legacy-drop] [--io-timeout SEC] [--heal-timeout SECONDS]
 *
 * Phase 1: random writes (512 B .. 1 MiB, aligned and unaligned offsets)
 *   until --bytes were written, QD 8, never two overlapping writes in flight;
 *   a shadow copy in memory records what every acknowledged write wrote; then
 *   the whole volume is read back and compared byte for byte.
 * Phase 2 (with --kill-cmd): writes go on at QD 16 and, after 32 MiB more,
 *   CMD (e.g. kill -9 of a storage daemon) runs while they are in flight; all
 *   writes must still be acknowledged (the client waits for the manager to
 *   take the dead node out, and for a new primary); then full read-back, and
 *   the killed node (--killed-node) must be out of the in-sync set of some
 *   of its rows in etcd. --restart-cmd and --wait-cmd bring the daemon back;
 *   the restarted node must heal: RECOVERING, then IN_SYNC in every row that
 *   lists it within --heal-timeout (default 300 s; rows polled every 100
 *   ms); full read back again, 16 MiB of new writes, full read back; then
 *   every chunk of its slices read from it directly (ZL_WF_ANY) equals what
 *   was acknowledged.
 * Exit 0 only when everything matched. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/meta/zl_auth.h"
#include "lib/transport/transport.h"
#include "lib/transport/xport_hello.h"

#define SECTOR 512u
#define MAX_QD 32

struct e2e;

struct wio {
	struct e2e *t;
	bool busy;
	uint64_t off, len;
	uint8_t *buf;
};

struct e2e {
	struct zl_loop *loop;
	struct zl_etcd *etcd;
	struct zl_client *cli;
	struct zl_vol *vol;
	char key[ZL_AUTH_KEY_HEX + 1]; /* the cluster key: operator HELLOs */
	uint64_t size;
	uint8_t *shadow;
	uint8_t *unknown; /* one byte per sector: content not determined */
	uint64_t rng;
	struct wio slots[MAX_QD];
	uint64_t acked_bytes, acked_ios, failed_ios;
	int inflight;
	int first_err;
};

static uint64_t rnd(struct e2e *t)
{
	t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
	return zl_hash64(t->rng);
}

static void fill_random(struct e2e *t, uint8_t *p, uint64_t len)
{
	uint64_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = rnd(t);

		memcpy(p + i, &v, 8);
	}
	for (; i < len; i++)
		p[i] = (uint8_t)rnd(t);
}

static bool overlaps_inflight(struct e2e *t, uint64_t off, uint64_t len)
{
	for (int i = 0; i < MAX_QD; i++) {
		struct wio *w = &t->slots[i];

		if (w->busy && off < w->off + w->len && w->off < off + len)
			return true;
	}
	return false;
}

static void pick_io(struct e2e *t, uint64_t *off, uint64_t *len)
{
	for (;;) {
		uint64_t l = 512 + rnd(t) % ((1u << 20) - 512 + 1);
		uint64_t o;

		switch (rnd(t) % 3) {
		case 0: /* 4 KiB aligned offset and length */
			l = ZL_ALIGN_UP(l, 4096);
			o = ZL_ALIGN_DOWN(rnd(t) % (t->size - l + 1), 4096);
			break;
		case 1: /* sector aligned */
			l = ZL_ALIGN_UP(l, 512);
			o = ZL_ALIGN_DOWN(rnd(t) % (t->size - l + 1), 512);
			break;
		default: /* anything */
			o = rnd(t) % (t->size - l + 1);
			break;
		}
		if (!overlaps_inflight(t, o, l)) {
			*off = o;
			*len = l;
			return;
		}
	}
}

static void mark_unknown(struct e2e *t, uint64_t off, uint64_t len)
{
	for (uint64_t s = off / SECTOR; s <= (off + len - 1) / SECTOR; s++)
		t->unknown[s] = 1;
}

static void write_done(void *arg, int status)
{
	struct wio *w = arg;
	struct e2e *t = w->t;

	w->busy = false;
	t->inflight--;
	if (status) {
		fprintf(stderr, "e2e: write off=%" PRIu64 " len=%" PRIu64 " failed: %s\n", w->off,
			w->len, zl_strerror(status));
		t->failed_ios++;
		mark_unknown(t, w->off, w->len);
		if (!t->first_err)
			t->first_err = status;
		return;
	}
	memcpy(t->shadow + w->off, w->buf, w->len);
	t->acked_bytes += w->len;
	t->acked_ios++;
}

/* Writes until `bytes` more were acknowledged; runs `mid_cmd` once after
 * `mid_after` bytes. Returns the number of failed writes. */
static uint64_t write_phase(struct e2e *t, uint64_t bytes, int qd, const char *mid_cmd,
			    uint64_t mid_after)
{
	uint64_t start = t->acked_bytes, failed0 = t->failed_ios;
	bool mid_done = !mid_cmd;
	uint64_t t0 = zl_now_ms();

	while (t->acked_bytes - start < bytes || t->inflight > 0) {
		while (t->acked_bytes - start < bytes && t->inflight < qd) {
			struct wio *w = NULL;
			int rc;

			for (int i = 0; i < qd; i++)
				if (!t->slots[i].busy) {
					w = &t->slots[i];
					break;
				}
			pick_io(t, &w->off, &w->len);
			/* unknown sectors become known again once rewritten completely,
			 * but partial sectors stay unknown: keep it simple and only clear
			 * fully covered sectors after the ack (not needed for safety). */
			fill_random(t, w->buf, w->len);
			w->busy = true;
			w->t = t;
			rc = zl_vol_aio_write(t->vol, w->buf, w->off, w->len, 0, write_done, w);
			if (rc) {
				w->busy = false;
				fprintf(stderr, "e2e: submit failed: %s\n", zl_strerror(rc));
				return UINT64_MAX;
			}
			t->inflight++;
		}
		zl_loop_run_once(t->loop, 100);
		if (!mid_done && t->acked_bytes - start >= mid_after) {
			fprintf(stderr, "e2e: %d writes in flight, running: %s\n", t->inflight,
				mid_cmd);
			if (system(mid_cmd) != 0)
				fprintf(stderr, "e2e: warning: '%s' returned non-zero\n", mid_cmd);
			mid_done = true;
		}
		if (zl_now_ms() - t0 > 600000) {
			fprintf(stderr, "e2e: write phase did not finish in 600 s\n");
			return UINT64_MAX;
		}
	}
	fprintf(stderr, "e2e: wrote %" PRIu64 " MiB in %.1f s (%" PRIu64 " failed writes)\n",
		(t->acked_bytes - start) >> 20, (double)(zl_now_ms() - t0) / 1000.0,
		t->failed_ios - failed0);
	return t->failed_ios - failed0;
}

static int verify_all(struct e2e *t, const char *what)
{
	const uint64_t piece = 1u << 20;
	uint8_t *buf = malloc(piece);
	uint64_t mism = 0, skipped = 0, t0 = zl_now_ms();
	int rc = 0;

	for (uint64_t off = 0; off < t->size; off += piece) {
		uint64_t len = ZL_MIN(piece, t->size - off);

		rc = zl_vol_read(t->vol, buf, off, len);
		if (rc) {
			fprintf(stderr, "e2e: %s: read off=%" PRIu64 " failed: %s\n", what, off,
				zl_strerror(rc));
			break;
		}
		for (uint64_t s = off / SECTOR; s < (off + len) / SECTOR; s++) {
			uint64_t so = s * SECTOR - off;

			if (t->unknown[s]) {
				skipped++;
				continue;
			}
			if (memcmp(buf + so, t->shadow + s * SECTOR, SECTOR)) {
				if (mism < 5)
					fprintf(stderr, "e2e: %s: MISMATCH at byte %" PRIu64 "\n",
						what, s * SECTOR);
				mism++;
			}
		}
	}
	free(buf);
	fprintf(stderr, "e2e: %s: read back %" PRIu64 " MiB in %.1f s: %" PRIu64
		" mismatched sectors, %" PRIu64 " undetermined\n", what, t->size >> 20,
		(double)(zl_now_ms() - t0) / 1000.0, mism, skipped);
	if (rc)
		return rc;
	return mism ? -ZL_ERR_CORRUPT : 0;
}

/* ---- phase 2 oracle: the killed node heals (rows in etcd, its own chunks) ---- */

/* Counts the rows of the volume that list node_id and, among them, the ones
 * where it is in sync / recovering. */
static int node_rows(struct e2e *t, const char *prefix, const char *node_id, int *member,
		     int *in_sync, int *recovering)
{
	struct zl_volume v = {0};
	int rc = zl_meta_volume_get(t->etcd, prefix, zl_vol_meta(t->vol)->id, &v);

	*member = *in_sync = *recovering = 0;
	if (rc)
		return rc;
	for (uint32_t s = 0; s < v.n_slices; s++) {
		int idx = zl_slice_index_of(&v.slices[s], node_id);

		if (idx < 0)
			continue;
		(*member)++;
		switch (zl_slice_member_state(&v.slices[s], idx)) {
		case ZL_MEMBER_IN_SYNC:
			(*in_sync)++;
			break;
		case ZL_MEMBER_RECOVERING:
			(*recovering)++;
			break;
		default:
			break;
		}
	}
	zl_volume_fini(&v);
	return 0;
}

/* Before the restart: writes were acknowledged while node_id was dead, so the
 * manager must have taken it out of the in-sync set of the rows written. */
static int check_out(struct e2e *t, const char *prefix, const char *node_id)
{
	int member, in_sync, recovering, rc;

	rc = node_rows(t, prefix, node_id, &member, &in_sync, &recovering);
	if (rc) {
		fprintf(stderr, "e2e: reading the volume record: %s\n", zl_strerror(rc));
		return rc;
	}
	fprintf(stderr, "e2e: killed node %s: member of %d slices, in sync in %d\n", node_id,
		member, in_sync);
	if (member == 0 || in_sync == member) {
		fprintf(stderr,
			"e2e: writes were acknowledged while %s was dead, yet it is still "
			"in sync in all %d of its slices\n",
			node_id, member);
		return -ZL_ERR_NOT_INSYNC;
	}
	return 0;
}

/* After the restart: the node must go RECOVERING and then IN_SYNC in every
 * row that lists it, within timeout_s (rows polled every 100 ms). */
static int wait_healed(struct e2e *t, const char *prefix, const char *node_id, int timeout_s)
{
	uint64_t t0 = zl_now_ms(), first_rec = 0;
	int member = 0, in_sync = 0, recovering = 0, max_rec = 0, rc;

	for (;;) {
		rc = node_rows(t, prefix, node_id, &member, &in_sync, &recovering);
		if (rc) {
			fprintf(stderr, "e2e: reading the volume record: %s\n", zl_strerror(rc));
			return rc;
		}
		if (recovering && !first_rec)
			first_rec = zl_now_ms();
		max_rec = ZL_MAX(max_rec, recovering);
		if (member && in_sync == member)
			break;
		if (zl_now_ms() - t0 > (uint64_t)timeout_s * 1000) {
			fprintf(stderr,
				"e2e: %s not in sync %d s after its restart: in sync in %d, "
				"recovering in %d of %d slices\n",
				node_id, timeout_s, in_sync, recovering, member);
			return -ZL_ERR_TIMEOUT;
		}
		zl_loop_run_once(t->loop, 100);
	}
	fprintf(stderr,
		"e2e: %s healed: in sync in all %d slices %.1f s after its restart "
		"(recovering seen in up to %d slices%s)\n",
		node_id, member, (double)(zl_now_ms() - t0) / 1000.0, max_rec,
		first_rec ? "" : ": NEVER");
	if (!first_rec) {
		fprintf(stderr,
			"e2e: %s went back in sync without being RECOVERING: what it "
			"missed was never copied to it\n",
			node_id);
		return -ZL_ERR_NOT_INSYNC;
	}
	return 0;
}

struct rd_ctx {
	bool done;
	int status;
	uint16_t wire_status;
	uint64_t aux;
};

static void rd_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct rd_ctx *r = arg;

	r->done = true;
	r->status = status;
	r->wire_status = rep ? rep->status : 0;
	r->aux = rep ? rep->aux : 0;
}

/* Runs the loop until r is done (30 s at most): 0 or -ZL_ERR_TIMEOUT. */
static int rd_wait(struct e2e *t, const struct rd_ctx *r)
{
	uint64_t t0 = zl_now_ms();

	while (!r->done && zl_now_ms() - t0 < 30000)
		zl_loop_run_once(t->loop, 100);
	return r->done ? 0 : -ZL_ERR_TIMEOUT;
}

/* One READ (ZL_WF_ANY: from this replica, primary or not) on conn; *ver =
 * the replica's chunk version (reply aux). */
static int replica_read(struct e2e *t, struct zl_xport_conn *conn, const struct zl_volume *v,
			uint64_t chunk, uint32_t off, uint32_t len, uint8_t *buf, uint64_t *ver)
{
	const struct zl_slice *sl = &v->slices[zl_volume_slice_of(v, chunk)];
	struct zl_wire_hdr h = {0};
	struct rd_ctx r = {0};
	int rc;

	h.opcode = ZL_OP_READ;
	h.flags = ZL_WF_ANY;
	h.vol_id = v->num;
	h.chunk = chunk;
	h.offset = off;
	h.length = len;
	h.slice_ver = sl->version;
	rc = zl_xport_request(conn, &h, NULL, 0, buf, len, rd_cb, &r);
	if (rc)
		return rc;
	rc = rd_wait(t, &r);
	if (rc)
		return rc;
	*ver = r.aux;
	return r.status ? r.status : -(int)r.wire_status;
}

/* The cluster HELLO of an operator connection (storage --auth on). */
static int operator_hello(struct e2e *t, struct zl_xport_conn *conn)
{
	static struct zl_xport_hello hello;
	char tok[ZL_AUTH_TOKEN_HEX + 1];
	struct zl_xport_cred cred = {.cluster = true, .token = tok};
	struct rd_ctx r = {0};
	int rc;

	rc = zl_auth_cluster_token(t->key, "e2e_io-check", tok);
	if (!rc)
		rc = zl_xport_hello_send_cred(conn, &hello, "e2e_io-check", &cred, rd_cb, &r);
	if (rc)
		return rc;
	rc = rd_wait(t, &r);
	if (rc)
		return rc;
	return r.status ? r.status : -(int)r.wire_status;
}

/* The healed node's own copy: every chunk of every slice it is a member of,
 * read from it directly, equals what was acknowledged. */
static int check_replica(struct e2e *t, const char *prefix, const char *node_id)
{
	const uint32_t piece = 1u << 20;
	struct zl_volume v = {0};
	struct zl_node_info ni;
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP};
	struct zl_xport *x = NULL;
	struct zl_xport_conn *conn = NULL;
	uint8_t *buf = NULL;
	uint64_t n_chunks, bytes = 0, mism = 0, bad_chunks = 0;
	int rc;

	rc = zl_meta_volume_get(t->etcd, prefix, zl_vol_meta(t->vol)->id, &v);
	if (rc)
		return rc;
	rc = zl_meta_node_get(t->etcd, prefix, node_id, &ni);
	if (rc) {
		fprintf(stderr, "e2e: restarted node %s not registered: %s\n", node_id,
			zl_strerror(rc));
		goto out;
	}
	/* TLS nodes: the CA lib/client also reads (docs/SECURITY.md). */
	xo.tls_ca = getenv("ZIPLINE_TLS_CA");
	xo.tls_server_name = getenv("ZIPLINE_TLS_SERVER_NAME");
	rc = zl_xport_create(t->loop, &xo, &x);
	if (rc)
		goto out;
	rc = zl_xport_connect_node(x, ni.id, ni.addr, ni.port, ni.tls, 2000, NULL, NULL, &conn);
	if (!rc)
		rc = operator_hello(t, conn);
	if (rc) {
		fprintf(stderr, "e2e: connect to %s failed: %s\n", node_id, zl_strerror(rc));
		goto out;
	}
	buf = zl_xport_buf_alloc(x, piece);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	n_chunks = (v.size + v.chunk_size - 1) / v.chunk_size;
	for (uint64_t c = 0; c < n_chunks; c++) {
		const struct zl_slice *sl = &v.slices[zl_volume_slice_of(&v, c)];
		uint64_t c_mism = 0, first = 0, ver = 0;
		bool zeros = true;

		if (zl_slice_index_of(sl, node_id) < 0)
			continue;
		for (uint32_t o = 0; o < v.chunk_size; o += piece) {
			uint64_t voff = c * v.chunk_size + o;
			uint32_t len = (uint32_t)ZL_MIN((uint64_t)ZL_MIN(piece, v.chunk_size - o),
							v.size - voff);

			if (voff >= v.size)
				break;
			rc = replica_read(t, conn, &v, c, o, len, buf, &ver);
			if (rc) {
				fprintf(stderr, "e2e: read of chunk %" PRIu64 " +%u from %s: %s\n",
					c, o, node_id, zl_strerror(rc));
				goto out;
			}
			for (uint64_t sct = voff / SECTOR; sct < (voff + len) / SECTOR; sct++) {
				const uint8_t *got = buf + (sct * SECTOR - voff);

				if (t->unknown[sct] ||
				    !memcmp(got, t->shadow + sct * SECTOR, SECTOR))
					continue;
				if (!c_mism++)
					first = sct * SECTOR;
				for (uint32_t b = 0; b < SECTOR && zeros; b++)
					zeros = !got[b];
			}
			bytes += len;
		}
		mism += c_mism;
		/* What a failure says: which chunks, from where, stale or zeros,
		 * the copy's version against the row (term, primary). */
		if (c_mism && bad_chunks++ < 8)
			fprintf(
			    stderr,
			    "e2e: %s's copy of chunk %" PRIu64 " (slice %u, term %u, primary %s)"
			    ": %" PRIu64 " sectors differ from the acknowledged data, the "
			    "first at byte %" PRIu64 "; they hold %s; its version %" PRIx64 "\n",
			    node_id, c, zl_volume_slice_of(&v, c), sl->term,
			    zl_slice_primary(sl) >= 0 ? sl->nodes[zl_slice_primary(sl)] : "-",
			    c_mism, first, zeros ? "zeros" : "other data (stale?)", ver);
	}
	fprintf(stderr,
		"e2e: %s's own replicas: read %" PRIu64 " MiB directly, %" PRIu64
		" mismatched sectors in %" PRIu64 " chunks\n",
		node_id, bytes >> 20, mism, bad_chunks);
	rc = mism ? -ZL_ERR_CORRUPT : bytes ? 0 : -ZL_ERR_NOT_FOUND;
out:
	if (buf)
		zl_xport_buf_free(x, buf);
	if (conn) {
		zl_xport_conn_close(conn);
		zl_xport_conn_put(conn);
	}
	zl_xport_destroy(x);
	zl_volume_fini(&v);
	return rc;
}

static void usage(void)
{
	fprintf(stderr, "usage: e2e_io --etcd URL --volume NAME [--bytes SIZE] [--seed N]\n"
			"              [--kill-cmd CMD --killed-node ID --restart-cmd CMD --wait-cmd CMD]\n"
			"              [--legacy-drop] [--io-timeout SEC] [--heal-timeout SECONDS]\n"
			"  --legacy-drop: the 0.1 client (promotes by itself; for clusters without\n"
			"  a manager); default: heal mode (reports and waits up to --io-timeout)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "etcd", required_argument, NULL, 'e' },   { "volume", required_argument, NULL, 'v' },
		{ "bytes", required_argument, NULL, 'b' },  { "seed", required_argument, NULL, 's' },
		{ "kill-cmd", required_argument, NULL, 'k' },
		{ "killed-node", required_argument, NULL, 'n' },
		{ "restart-cmd", required_argument, NULL, 'r' },
		{ "wait-cmd", required_argument, NULL, 'w' },
		{ "legacy-drop", no_argument, NULL, 'L' },
		{ "io-timeout", required_argument, NULL, 'T' },
		{ "heal-timeout", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	const char *etcd_url = NULL, *volname = NULL, *kill_cmd = NULL, *killed = NULL;
	const char *restart_cmd = NULL, *wait_cmd = NULL;
	uint64_t bytes = 256ull << 20;
	int heal_s = 300;
	struct e2e t = { .rng = 42 };
	struct zl_etcd_opts eo = { 0 };
	struct zl_client_opts co = { .client_id = "e2e_io", .transport = ZL_XPORT_SEL_TCP };
	int c, rc = 1;

	zl_log_init("e2e_io");
	/* The RDMA run of cluster_e2e.sh (test/rdma) sets ZIPLINE_TRANSPORT;
	 * unset means TCP, as before. */
	if (getenv("ZIPLINE_TRANSPORT") && *getenv("ZIPLINE_TRANSPORT") &&
	    zl_xport_select_parse(getenv("ZIPLINE_TRANSPORT"), &co.transport)) {
		fprintf(stderr, "e2e_io: bad ZIPLINE_TRANSPORT (auto|tcp|rdma)\n");
		return 2;
	}
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e': etcd_url = optarg; break;
		case 'v': volname = optarg; break;
		case 'b':
			if (zl_parse_size(optarg, &bytes))
				usage();
			break;
		case 's': t.rng = strtoull(optarg, NULL, 0); break;
		case 'k': kill_cmd = optarg; break;
		case 'n': killed = optarg; break;
		case 'r': restart_cmd = optarg; break;
		case 'w': wait_cmd = optarg; break;
		case 'L': co.legacy_drop = true; break;
		case 'T': co.io_timeout_s = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'H':
			heal_s = atoi(optarg);
			if (heal_s < 1)
				usage();
			break;
		default: usage();
		}
	}
	if (!etcd_url || !volname)
		usage();
	eo.endpoints = etcd_url;
	if (zl_loop_create(&t.loop) || zl_etcd_create(&eo, &t.etcd) ||
	    zl_auth_cluster_key_load(t.etcd, ZL_META_DEFAULT_PREFIX,
				     getenv("ZIPLINE_CLUSTER_KEY_FILE"), true, t.key) ||
	    (co.cluster_key = t.key, zl_client_create(t.loop, t.etcd, &co, &t.cli))) {
		fprintf(stderr, "e2e: setup failed\n");
		return 1;
	}
	rc = zl_vol_open(t.cli, volname, &t.vol);
	if (rc) {
		fprintf(stderr, "e2e: open %s: %s\n", volname, zl_strerror(rc));
		return 1;
	}
	t.size = zl_vol_size(t.vol);
	t.shadow = calloc(1, t.size);
	t.unknown = calloc(1, t.size / SECTOR + 1);
	for (int i = 0; i < MAX_QD; i++)
		t.slots[i].buf = zl_vol_buf_alloc(t.vol, 1u << 20);
	/* The volume is new: it reads as zeroes, and so does the shadow. */
	fprintf(stderr, "e2e: phase 1: %" PRIu64 " MiB of random writes on %s (%" PRIu64 " MiB)\n",
		bytes >> 20, volname, t.size >> 20);
	if (write_phase(&t, bytes, 8, NULL, 0) != 0)
		goto fail;
	if (verify_all(&t, "phase 1"))
		goto fail;
	if (kill_cmd) {
		fprintf(stderr, "e2e: phase 2: writes while '%s'\n", kill_cmd);
		if (write_phase(&t, 96ull << 20, 16, kill_cmd, 32ull << 20) != 0)
			goto fail;
		if (verify_all(&t, "after kill"))
			goto fail;
		if (killed && check_out(&t, ZL_META_DEFAULT_PREFIX, killed))
			goto fail;
		if (restart_cmd) {
			if (system(restart_cmd) != 0) {
				fprintf(stderr, "e2e: restart command failed\n");
				goto fail;
			}
			if (wait_cmd && system(wait_cmd) != 0) {
				fprintf(stderr, "e2e: restarted daemon did not register\n");
				goto fail;
			}
			/* Rows polled from right after the restart: the copy of
			 * what it missed takes seconds, RECOVERING is seen. */
			if (killed && wait_healed(&t, ZL_META_DEFAULT_PREFIX, killed, heal_s))
				goto fail;
			if (verify_all(&t, "after restart"))
				goto fail;
			if (write_phase(&t, 16ull << 20, 16, NULL, 0) != 0)
				goto fail;
			if (verify_all(&t, "after restart + writes"))
				goto fail;
			if (killed && check_replica(&t, ZL_META_DEFAULT_PREFIX, killed))
				goto fail;
		}
	}
	{
		struct zl_vol_stats st;

		zl_vol_get_stats(t.vol, &st);
		fprintf(stderr, "e2e: OK (retries=%" PRIu64 " failovers=%" PRIu64
			" promotions=%" PRIu64 " reloads=%" PRIu64 ")\n", st.retries,
			st.failovers, st.promotions, st.placement_reloads);
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "e2e: FAILED\n");
	rc = 1;
out:
	for (int i = 0; i < MAX_QD; i++)
		zl_vol_buf_free(t.vol, t.slots[i].buf);
	zl_vol_close(t.vol);
	zl_client_destroy(t.cli);
	zl_etcd_destroy(t.etcd);
	zl_loop_destroy(t.loop);
	free(t.shadow);
	free(t.unknown);
	return rc;
}
