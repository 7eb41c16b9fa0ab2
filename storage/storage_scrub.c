/* Scrub and repair (docs/REPLICATION.md §8): CHUNK_DIGEST on every replica,
 * SCRUB on a slice's primary, and the background scrub of the slices this
 * node is primary of (--scrub-interval).
 *
 * Digest of a chunk (struct zl_wire_chunk_digest): every block is read
 * through the chunk store and verified against its crc / prev_crc (bad ones
 * counted, not fatal); digest = CRC32C chained over the chunk's chunk_size
 * data bytes, holes as zeros, so copies that hold the same bytes agree
 * whatever their sparseness or CRC history. The version is read before the
 * data and again after: a chunk written meanwhile is read once more, then
 * reported BUSY (no verdict this time). A chunk the store recorded whose
 * file is gone reports bad_blocks = ZL_WIRE_DIGEST_MISSING.
 *
 * A chunk's clone chunks (snapshots, docs/SNAPSHOTS.md §2) follow its
 * record, each digested the same way under its own id; a chunk's records
 * never split across replies. The primary judges a clone among the members
 * that hold it (which clones each holds is peering's and recovery's
 * business) and repairs a damaged one like a chunk: read from the winner
 * as its snapshot (its hi) holds the chunk (READ + ZL_WF_ANY | ZL_WF_SEQ),
 * pushed with ZL_WF_SEQ carrying its lo (the member makes it a clone again),
 * or rewritten here in place (a missing one of ours is made a clone again,
 * zl_chunk_snap_install). They count in the scrub's figures like chunks.
 *
 * One CHUNK_DIGEST request looks at DG_WINDOW_BYTES worth of the slice's
 * chunks (at least one, whether held or not: every member answers the same
 * window), so its reply comes well inside the peers' request timeout. The
 * rate limit (--scrub-mbps) is applied by the scrubbing primary between
 * windows and repair pieces: every member reads one window per pause.
 *
 * A scrub job (struct sc_job), one per SCRUB request or background slice,
 * runs on the loop thread:
 *   DIGEST  the local digest job and a CHUNK_DIGEST to every IN_SYNC member
 *           of the row, for the same window
 *   FIX     per chunk, the winning copy: the highest version among copies
 *           without bad blocks; at equal versions with different digests
 *           the primary's (if good) else the first member's. Every other copy
 *           that is missing, bad or differs is rewritten from it piece by
 *           piece: read (local chunk read, or READ + ZL_WF_ANY from the
 *           winner, which must still be at that version) then written (a
 *           member: CHUNK_DELETE of its copy first, then CHUNK_PUSH with
 *           ZL_PUSH_REPLACE; the primary itself: local writes, the winning
 *           version on the last piece, each only while no client write of
 *           the chunk came since its piece was read, sc_piece_store)
 *   WAIT    rate limit before the next window or piece
 * and answers the SCRUB request with struct zl_wire_scrub_result. A job of
 * one chunk, not paced, starts when a client's I/O found a bad block in our
 * copy (zl_storage_scrub_on_corrupt).
 * Known limit: a copy repaired while clients write the same chunk can be
 * hit by a forwarded write between CHUNK_DELETE and the last piece (the push
 * is then refused as CONFLICT and logged); run the scrub again. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_heal.h"
#include "storage_io.h"

#define DG_WINDOW_BYTES (16u << 20) /* chunk bytes one CHUNK_DIGEST looks at */
#define DG_PIECE	(1u << 20)  /* bytes of one read / repair piece */
#define DG_ABSENT_BATCH 64	    /* absent chunks looked at per loop turn */
#define SC_MAX_FIX	(ZL_WIRE_DIGESTS_MAX * ZL_MAX_REPLICAS)
/* Clone chunks of one chunk digested (its records fit one reply). */
#define DG_CLONES_MAX (ZL_WIRE_DIGESTS_MAX - 1)
/* The background pass waits for records being loaded: this often, at most
 * this many times. */
#define SC_BG_WAIT_MS 200
#define SC_BG_WAITS   50
/* Repairs a client I/O asked for (zl_storage_scrub_on_corrupt): a chunk
 * whose last one repaired nothing (no good copy, or cut short) waits
 * SC_AUTO_GAP_MS for the next; remembered in SC_AUTO_SLOTS slots (the
 * oldest is reused). */
#define SC_AUTO_SLOTS  32
#define SC_AUTO_GAP_MS 5000

struct dg_job;
typedef void (*dg_done_fn)(struct dg_job *j, int status);

/* Digest of the chunks of one window of a slice on this node. */
struct dg_job {
	struct zl_storage *st;
	uint64_t vol;
	uint32_t slice, n_slices, chunk_size;
	uint64_t n_chunks; /* of the volume */
	uint64_t cursor;   /* next chunk to look at */
	uint32_t scanned, max_scan;
	/* the chunk at the cursor: its clones, and the id looked at (the
	 * chunk, then each clone) */
	bool in_chunk;
	struct zl_chunk_clone cl[DG_CLONES_MAX];
	uint32_t n_cl, i_cl;
	uint64_t cur_id;
	/* chunks from the cursor up to warm_end were warmed (dg_warm); warms
	 * still due: the job waits for them */
	uint64_t warm_end;
	unsigned warming;
	struct zl_wire_chunk_digest rec[ZL_WIRE_DIGESTS_MAX];
	uint32_t n;
	uint64_t next; /* result: chunk to continue from, 0 when done */
	/* chunk being read */
	uint64_t cur_ver;
	uint32_t off, crc, bad, attempts;
	uint8_t *buf; /* DG_PIECE, pool */
	bool running;
	struct zl_defer d;
	dg_done_fn done;
};

/* A CHUNK_DIGEST request being served. */
struct dg_serve {
	struct dg_job j;
	struct zl_xport_conn *conn;
	struct zl_wire_hdr req;
	uint8_t *out; /* reply payload, pool */
	struct dg_serve *next;
};

struct sc_fix {
	uint64_t chunk, version; /* chunk: a chunk or a clone chunk's id */
	uint8_t target, source; /* member indexes; 0 = this node */
	bool del_first;
	bool install; /* our own clone rebuilt after its delete: a clone again */
	uint32_t lo;  /* a clone's lo */
	const char *reason;
};

struct sc_member {
	struct sc_job *j;
	char node[ZL_NODE_ID_MAX];
	struct zl_wire_hdr hdr;
	uint8_t *in; /* CHUNK_DIGEST reply payload, pool */
	struct zl_wire_chunk_digest rec[ZL_WIRE_DIGESTS_MAX];
	int n;
	uint64_t next;
	int status;
};

enum sc_phase { SC_DIGEST, SC_FIX, SC_WAIT, SC_DONE };

/* Who started a job: a SCRUB request (answered on conn), the background
 * pass (the next of its slices follows), or a client I/O that found a bad
 * block in our copy (one chunk). */
enum sc_kind { SC_REQUEST, SC_BACKGROUND, SC_AUTO };

struct sc_job {
	struct zl_storage *st;
	struct sc_job *next;
	struct zl_xport_conn *conn; /* SC_REQUEST only */
	enum sc_kind kind;
	uint64_t auto_chunk; /* SC_AUTO: the chunk */
	struct zl_wire_hdr req;
	uint64_t vol;
	char vid[ZL_VOL_ID_LEN + 1];
	uint32_t slice, n_slices, chunk_size;
	uint64_t n_chunks, row_ver, epoch;
	uint32_t n_m;
	struct sc_member m[ZL_MAX_REPLICAS]; /* m[0] is this node */
	struct dg_job dg;
	uint32_t pending;
	enum sc_phase phase;
	uint64_t cursor, win_end, win_bytes;
	struct sc_fix fix[SC_MAX_FIX];
	uint32_t n_fix, i_fix;
	uint32_t off;	 /* piece of the fix in progress */
	bool src_warmed; /* its local copy (source or target) was opened (sc_piece_fetch) */
	uint64_t own_ver; /* our copy's version when the piece was read (target 0) */
	uint8_t *pbuf;
	struct zl_wire_hdr rhdr;
	struct zl_wire_scrub_result res;
	uint8_t out[ZL_WIRE_SCRUB_RESULT_SIZE];
	uint64_t t0;
	int err;
	struct zl_timer t;
	struct zl_defer d;
};

struct zl_storage_scrub {
	struct zl_storage *st;
	struct sc_job *jobs;
	struct dg_serve *serves;
	uint64_t next_ms; /* rate limit: earliest start of the next paced step */
	uint32_t zero_digest_cs;
	uint32_t zero_digest;
	struct zl_timer bg_t;
	struct zl_timer bg_wait_t; /* sc_bg_tick again: records being loaded */
	uint32_t bg_missing, bg_waits;
	/* background pass: the (volume, slice) pairs this node was primary of */
	uint64_t *bg_vol;
	uint32_t *bg_slice;
	size_t bg_n, bg_i, bg_cap;
	bool bg_running, stopping;
	/* SC_AUTO jobs started lately: (volume, chunk, start ms) */
	struct {
		uint64_t vol, chunk, t_ms;
	} auto_recent[SC_AUTO_SLOTS];
	uint32_t auto_next; /* slot reused next */
};

static uint64_t vol_chunks(const struct zl_volume *v)
{
	return (v->size + v->chunk_size - 1) / v->chunk_size;
}

static bool buf_zero(const uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* Digest of a chunk of zeros (what an absent copy holds). */
static uint32_t zero_digest(struct zl_storage_scrub *sc, uint32_t cs)
{
	static const uint8_t zeros[ZL_BLOCK_SIZE];

	if (sc->zero_digest_cs != cs) {
		uint32_t crc = 0;

		for (uint32_t o = 0; o < cs; o += ZL_BLOCK_SIZE)
			crc = zl_crc32c_update(crc, zeros, ZL_BLOCK_SIZE);
		sc->zero_digest = crc;
		sc->zero_digest_cs = cs;
	}
	return sc->zero_digest;
}

/* Milliseconds until `bytes` more may be read at --scrub-mbps. */
static uint64_t pace(struct zl_storage_scrub *sc, uint64_t bytes)
{
	uint64_t now = zl_now_ms(), mbps = sc->st->cfg.scrub_mbps ? sc->st->cfg.scrub_mbps : 100;

	sc->next_ms = ZL_MAX(sc->next_ms, now) + bytes * 8 / (mbps * 1000);
	return sc->next_ms > now ? sc->next_ms - now : 0;
}

/* ---- digest of one window (CHUNK_DIGEST, and the primary's own copy) ---- */

static void dg_step(void *arg);

static void dg_finish(struct dg_job *j, int status)
{
	j->running = false;
	j->next = j->cursor < j->n_chunks ? j->cursor : 0;
	j->done(j, status);
}

static void dg_record(struct dg_job *j, uint64_t ver, uint32_t digest, uint32_t bad)
{
	struct zl_wire_chunk_digest *r = &j->rec[j->n++];

	r->chunk = j->cur_id;
	r->version = ver;
	r->digest = digest;
	r->bad_blocks = bad;
}

/* The next id to look at: the chunk's next clone, else the next chunk. */
static void dg_next_id(struct dg_job *j)
{
	if (j->i_cl < j->n_cl) {
		j->cur_id = zl_chunk_clone_id(j->cursor, j->cl[j->i_cl++].hi);
		return;
	}
	j->in_chunk = false;
	j->cursor += j->n_slices;
	j->scanned++;
}

static void dg_advance(struct dg_job *j)
{
	dg_next_id(j);
	zl_loop_defer(j->st->loop, &j->d, dg_step, j);
}

static void dg_read(struct dg_job *j);

/* Gone between the look and the read: let the look decide. */
static void dg_gone(struct dg_job *j)
{
	if (++j->attempts < 2) {
		zl_loop_defer(j->st->loop, &j->d, dg_step, j);
		return;
	}
	dg_record(j, j->cur_ver, 0, ZL_WIRE_DIGEST_BUSY);
	j->attempts = 0;
	dg_advance(j);
}

static void dg_read_cb(void *arg, int status)
{
	struct dg_job *j = arg;
	uint32_t len = ZL_MIN(DG_PIECE, j->chunk_size - j->off);
	uint64_t ver = 0;

	if (j->st->scrub->stopping)
		status = -ZL_ERR_UNAVAIL;
	if (status == -ZL_ERR_NOT_FOUND) {
		dg_gone(j); /* found gone by the open of a chunk not open */
		return;
	}
	if (status) {
		dg_finish(j, status);
		return;
	}
	j->crc = zl_crc32c_update(j->crc, j->buf, len);
	j->off += len;
	if (j->off < j->chunk_size) {
		dg_read(j);
		return;
	}
	if (zl_chunk_version(j->st->chunks, j->vol, j->cur_id, j->chunk_size, &ver) ||
	    ver != j->cur_ver) {
		/* Written while we read it: once more, then no verdict. */
		if (++j->attempts < 2) {
			zl_loop_defer(j->st->loop, &j->d, dg_step, j);
			return;
		}
		dg_record(j, j->cur_ver, 0, ZL_WIRE_DIGEST_BUSY);
	} else {
		dg_record(j, j->cur_ver, j->crc, j->bad);
	}
	j->attempts = 0;
	dg_advance(j);
}

static void dg_read(struct dg_job *j)
{
	uint32_t len = ZL_MIN(DG_PIECE, j->chunk_size - j->off);
	int rc = zl_chunk_scrub_read(j->st->chunks, j->vol, j->cur_id, j->chunk_size, j->off, len,
				     j->buf, &j->bad, dg_read_cb, j);

	if (rc == -ZL_ERR_NOT_FOUND)
		dg_gone(j);
	else if (rc)
		dg_finish(j, rc);
}

static void dg_step(void *arg);

static void dg_warm_cb(void *arg, int status)
{
	struct dg_job *j = arg;

	(void)status; /* the look that follows says what failed */
	if (!--j->warming)
		zl_loop_defer(j->st->loop, &j->d, dg_step, j);
}

/* Opens the next chunks from the cursor (up to DG_ABSENT_BATCH of the
 * window) and their clones on the store's open workers, so zl_chunk_scrub_stat answers from
 * memory instead of reading chunk files on the loop. True: dg_step runs
 * again when they are open. */
static bool dg_warm(struct dg_job *j)
{
	uint64_t c = j->cursor;

	for (uint32_t k = 0; k < DG_ABSENT_BATCH && c < j->n_chunks && j->scanned + k < j->max_scan;
	     k++, c += j->n_slices)
		j->warming +=
		    zl_chunk_snap_warm(j->st->chunks, j->vol, c, j->chunk_size, dg_warm_cb, j);
	j->warm_end = c;
	return j->warming > 0;
}

static void dg_step(void *arg)
{
	struct dg_job *j = arg;

	if (j->st->scrub->stopping) {
		dg_finish(j, -ZL_ERR_UNAVAIL);
		return;
	}
	if (!j->in_chunk && j->cursor >= j->warm_end && dg_warm(j))
		return;
	for (unsigned k = 0; k < DG_ABSENT_BATCH; k++) {
		uint64_t ver = 0;
		int state;

		if (!j->in_chunk) {
			if (j->cursor >= j->n_chunks || j->scanned >= j->max_scan ||
			    j->n >= ZL_WIRE_DIGESTS_MAX) {
				dg_finish(j, 0);
				return;
			}
			if (j->cursor >= j->warm_end) {
				zl_loop_defer(j->st->loop, &j->d, dg_step, j); /* warms the next */
				return;
			}
			j->n_cl = zl_chunk_snap_clones(j->st->chunks, j->vol, j->cursor, j->cl,
						       DG_CLONES_MAX);
			j->n_cl = ZL_MIN(j->n_cl, DG_CLONES_MAX);
			if (j->n && j->n + 1 + j->n_cl > ZL_WIRE_DIGESTS_MAX) {
				dg_finish(j, 0); /* its records go in the next reply */
				return;
			}
			j->in_chunk = true;
			j->i_cl = 0;
			j->cur_id = j->cursor;
		}
		state = zl_chunk_scrub_stat(j->st->chunks, j->vol, j->cur_id, j->chunk_size, &ver);
		if (state < 0) {
			dg_finish(j, state);
			return;
		}
		if (state == ZL_CHUNK_ABSENT) {
			dg_next_id(j);
			continue;
		}
		if (state == ZL_CHUNK_MISSING) {
			dg_record(j, ver, 0, ZL_WIRE_DIGEST_MISSING);
			dg_advance(j);
			return;
		}
		j->cur_ver = ver;
		j->off = 0;
		j->crc = 0;
		j->bad = 0;
		dg_read(j);
		return;
	}
	zl_loop_defer(j->st->loop, &j->d, dg_step, j);
}

/* Starts the digest of the window of v's slice beginning at chunk `from`
 * (rounded up to the slice's next chunk). done runs once, never inside. */
static int dg_start(struct dg_job *j, struct zl_storage *st, const struct zl_volume *v,
		    uint32_t slice, uint64_t from, dg_done_fn done)
{
	j->st = st;
	j->vol = v->num;
	j->slice = slice;
	j->n_slices = v->n_slices;
	j->chunk_size = v->chunk_size;
	j->n_chunks = vol_chunks(v);
	j->cursor = from + (slice + v->n_slices - from % v->n_slices) % v->n_slices;
	j->scanned = 0;
	j->max_scan = ZL_MAX(1u, DG_WINDOW_BYTES / v->chunk_size);
	j->in_chunk = false;
	j->warm_end = 0;
	j->n = 0;
	j->attempts = 0;
	j->done = done;
	if (!j->buf)
		j->buf = zl_xport_buf_alloc(st->xport, DG_PIECE);
	if (!j->buf)
		return -ZL_ERR_BUSY;
	j->running = true;
	zl_loop_defer(st->loop, &j->d, dg_step, j);
	return 0;
}

static void dg_free_buf(struct dg_job *j)
{
	if (j->buf)
		zl_xport_buf_free(j->st->xport, j->buf);
	j->buf = NULL;
}

/* ---- CHUNK_DIGEST server ---- */

static void dg_serve_free(struct dg_serve *s)
{
	struct zl_storage_scrub *sc = s->j.st->scrub;

	for (struct dg_serve **pp = &sc->serves; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	dg_free_buf(&s->j);
	if (s->out)
		zl_xport_buf_free(s->j.st->xport, s->out);
	zl_xport_conn_put(s->conn);
	free(s);
}

static void dg_serve_sent(void *arg, int status)
{
	(void)status;
	dg_serve_free(arg);
}

static void dg_serve_done(struct dg_job *j, int status)
{
	struct dg_serve *s = (struct dg_serve *)j;
	struct zl_wire_hdr rep;

	zl_wire_reply_init(&s->req, &rep, status);
	if (!status) {
		rep.aux = j->next;
		rep.payload_len = j->n * ZL_WIRE_CHUNK_DIGEST_SIZE;
		zl_wire_chunk_digests_encode(j->rec, j->n, s->out);
	}
	if (zl_xport_reply(s->conn, &rep, s->out, rep.payload_len, dg_serve_sent, s))
		dg_serve_free(s);
}

void zl_storage_scrub_digest_serve(struct zl_storage *st, struct zl_xport_conn *c,
				   const struct zl_wire_hdr *h)
{
	struct zl_storage_vol *sv;
	struct dg_serve *s;
	/* A network request: never an etcd call here (docs/SECURITY.md). */
	int rc = st->scrub ? zl_storage_vol_lookup(st->vols, h->vol_id, &sv) : -ZL_ERR_UNAVAIL;

	if (rc == -EINPROGRESS)
		rc = -ZL_ERR_BUSY;
	if (!rc && h->offset >= sv->v.n_slices)
		rc = -ZL_ERR_RANGE;
	if (rc) {
		struct zl_wire_hdr rep;

		zl_wire_reply_init(h, &rep, rc);
		zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->j.st = st;
		s->out = zl_xport_buf_alloc(st->xport, ZL_WIRE_MAX_CTRL);
	}
	if (s && s->out) {
		s->req = *h;
		s->conn = c;
		zl_xport_conn_get(c);
		s->next = st->scrub->serves;
		st->scrub->serves = s;
		rc = dg_start(&s->j, st, &sv->v, h->offset, h->chunk, dg_serve_done);
		if (!rc)
			return;
		dg_serve_done(&s->j, rc);
		return;
	}
	if (s && s->out)
		zl_xport_buf_free(st->xport, s->out);
	free(s);
	{
		struct zl_wire_hdr rep;

		zl_wire_reply_init(h, &rep, -ZL_ERR_BUSY);
		zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
	}
}

/* ---- scrub of one slice (primary) ---- */

static void sc_window(void *arg);
static void sc_fix_next(void *arg);
static void sc_member_done(void *arg);
static void sc_bg_next(struct zl_storage_scrub *sc);

static void sc_free(struct sc_job *j)
{
	struct zl_storage_scrub *sc = j->st->scrub;

	for (struct sc_job **pp = &sc->jobs; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	}
	zl_timer_stop(j->st->loop, &j->t);
	zl_loop_defer_cancel(j->st->loop, &j->d);
	dg_free_buf(&j->dg);
	for (uint32_t i = 0; i < j->n_m; i++)
		if (j->m[i].in)
			zl_xport_buf_free(j->st->xport, j->m[i].in);
	if (j->pbuf)
		zl_xport_buf_free(j->st->xport, j->pbuf);
	if (j->conn)
		zl_xport_conn_put(j->conn);
	free(j);
}

static void sc_sent(void *arg, int status)
{
	(void)status;
	sc_free(arg);
}

static void sc_done(struct sc_job *j, int err)
{
	struct zl_storage_scrub *sc = j->st->scrub;
	static const char *const how[] = {"", " (background)", " (a client I/O found a bad block)"};
	struct zl_wire_hdr rep;

	j->phase = SC_DONE;
	j->st->rs.scrub.chunks_checked += j->res.chunks_checked;
	j->st->rs.scrub.bad_found += j->res.bad_found;
	j->st->rs.scrub.repaired += j->res.repaired;
	j->st->rs.scrub.bytes_read += j->res.bytes_read;
	j->st->rs.scrub_jobs++;
	if (err)
		ZL_LOG_WARN("storage",
			    "scrub failed: vol=%s slice=%u at_chunk=%" PRIu64
			    " err=%s (run it again; "
			    "the row may have changed)",
			    j->vid, j->slice, j->cursor, zl_errname(err));
	ZL_LOG_INFO("storage",
		    "scrub done: vol=%s slice=%u chunks_checked=%" PRIu64 " bad_found=%" PRIu64
		    " repaired=%" PRIu64 " bytes_read=%" PRIu64 " ms=%" PRIu64 "%s",
		    j->vid, j->slice, j->res.chunks_checked, j->res.bad_found, j->res.repaired,
		    j->res.bytes_read, zl_now_ms() - j->t0, how[j->kind]);
	if (j->kind == SC_AUTO) {
		/* Repaired: the copy going bad again is a new find, repaired at
		 * once; else the chunk waits SC_AUTO_GAP_MS. */
		for (uint32_t k = 0; !err && j->res.repaired && k < SC_AUTO_SLOTS; k++)
			if (sc->auto_recent[k].vol == j->vol &&
			    sc->auto_recent[k].chunk == j->auto_chunk)
				sc->auto_recent[k].t_ms = 0;
		sc_free(j);
		return;
	}
	if (j->kind == SC_BACKGROUND) {
		sc_free(j);
		if (!sc->stopping)
			sc_bg_next(sc);
		return;
	}
	zl_wire_reply_init(&j->req, &rep, err);
	rep.slice_ver = j->row_ver;
	if (!err) {
		zl_wire_scrub_result_encode(&j->res, j->out);
		rep.payload_len = ZL_WIRE_SCRUB_RESULT_SIZE;
	}
	if (zl_xport_reply(j->conn, &rep, j->out, rep.payload_len, sc_sent, j))
		sc_free(j);
}

static bool sc_stop_check(struct sc_job *j)
{
	if (!j->st->scrub->stopping)
		return false;
	sc_done(j, -ZL_ERR_UNAVAIL);
	return true;
}

/* The record of id in member m's window (NULL: it holds no copy). A
 * window holds at most ZL_WIRE_DIGESTS_MAX records per member. */
static const struct zl_wire_chunk_digest *sc_rec_of(const struct sc_member *m, uint64_t id)
{
	for (int i = 0; i < m->n; i++)
		if (m->rec[i].chunk == id)
			return &m->rec[i];
	return NULL;
}

/* Formats a chunk id for a log line: "17", or "17 clone=3" (the clone of
 * chunk 17 for the snapshots up to sequence 3). */
static const char *sc_id_str(uint64_t id, char *buf, size_t len)
{
	if (id >> ZL_CHUNK_IDX_BITS)
		snprintf(buf, len, "%" PRIu64 " clone=%u", zl_chunk_id_base(id),
			 (uint32_t)(id >> ZL_CHUNK_IDX_BITS));
	else
		snprintf(buf, len, "%" PRIu64, id);
	return buf;
}

/* The lo of clone id for a repair from member w: ours when we hold it as a
 * clone, else the hi of the clone before it in w's records (0 for the
 * first): no snapshot lies between the two (one there would have made a
 * clone between them), so every existing snapshot reads it, and collection
 * keeps it, the same (docs/SNAPSHOTS.md §6 step 2). */
static uint32_t sc_clone_lo(struct sc_job *j, unsigned w, uint64_t id)
{
	struct zl_chunk_clone cl[DG_CLONES_MAX];
	uint64_t base = zl_chunk_id_base(id);
	uint32_t hi = (uint32_t)(id >> ZL_CHUNK_IDX_BITS), lo = 0;
	uint32_t n = zl_chunk_snap_clones(j->st->chunks, j->vol, base, cl, DG_CLONES_MAX);

	for (uint32_t i = 0; i < ZL_MIN(n, DG_CLONES_MAX); i++)
		if (cl[i].hi == hi)
			return cl[i].lo;
	for (int i = 0; i < j->m[w].n; i++) {
		uint64_t r = j->m[w].rec[i].chunk;
		uint32_t rh = (uint32_t)(r >> ZL_CHUNK_IDX_BITS);

		if (zl_chunk_id_base(r) == base && rh && rh < hi)
			lo = ZL_MAX(lo, rh);
	}
	return lo;
}

int zl_storage_scrub_judge(const struct zl_scrub_copy *c, unsigned n, uint32_t zero_digest,
			   uint32_t *repair, const char **why)
{
	unsigned held = 0;
	int w = -1;

	*repair = 0;
	for (unsigned i = 0; i < n; i++) {
		why[i] = NULL;
		if (c[i].held && c[i].bad == ZL_WIRE_DIGEST_BUSY)
			return -2; /* written meanwhile: next time */
		held += c[i].held;
	}
	if (!held)
		return -2;
	for (unsigned i = 0; i < n; i++) {
		if (!c[i].held || c[i].bad)
			continue;
		if (w < 0 || c[i].version > c[w].version)
			w = (int)i; /* ties keep the earlier: the primary first */
	}
	for (unsigned i = 0; i < n; i++) {
		if ((int)i == w)
			continue;
		if (w < 0) {
			if (c[i].held) {
				*repair |= 1u << i;
				why[i] = c[i].bad == ZL_WIRE_DIGEST_MISSING ? "missing" : "crc";
			}
			continue;
		}
		if (c[i].held && !c[i].bad && c[i].version == c[w].version &&
		    c[i].digest == c[w].digest)
			continue;
		if (!c[i].held && c[w].version == 0 && c[w].digest == zero_digest)
			continue; /* zeros both */
		*repair |= 1u << i;
		why[i] = !c[i].held || c[i].bad == ZL_WIRE_DIGEST_MISSING ? "missing"
			 : c[i].bad					  ? "crc"
									  : "divergent";
	}
	return w;
}

/* Decides the winner of chunk id (a chunk, or a clone chunk: judged among
 * the members that hold it) and queues the repairs. */
static void sc_judge(struct sc_job *j, uint64_t id)
{
	const struct zl_wire_chunk_digest *rec;
	struct zl_scrub_copy cp[ZL_MAX_REPLICAS];
	const char *why[ZL_MAX_REPLICAS];
	uint8_t mi[ZL_MAX_REPLICAS]; /* copy k is member mi[k]'s */
	bool clone = id >> ZL_CHUNK_IDX_BITS;
	char idb[48];
	uint32_t repair, n = 0;
	int w;

	for (uint32_t i = 0; i < j->n_m; i++) {
		rec = sc_rec_of(&j->m[i], id);
		if (clone && !rec)
			continue;
		memset(&cp[n], 0, sizeof(cp[n]));
		cp[n].held = rec != NULL;
		if (rec) {
			cp[n].version = rec->version;
			cp[n].digest = rec->digest;
			cp[n].bad = rec->bad_blocks;
		}
		mi[n++] = (uint8_t)i;
	}
	if (!n)
		return;
	w = zl_storage_scrub_judge(cp, n, zero_digest(j->st->scrub, j->chunk_size), &repair, why);
	if (w == -2)
		return;
	j->res.chunks_checked++;
	j->win_bytes += j->chunk_size;
	for (uint32_t k = 0; k < n; k++)
		if (cp[k].held && cp[k].bad != ZL_WIRE_DIGEST_MISSING)
			j->res.bytes_read += j->chunk_size;
	sc_id_str(id, idb, sizeof(idb));
	if (w < 0) {
		ZL_LOG_ERR("storage",
			   "scrub found no good copy: vol=%s slice=%u chunk=%s"
			   " (every copy is missing or has bad blocks: restore from a backup)",
			   j->vid, j->slice, idb);
		j->res.bad_found += (uint32_t)__builtin_popcount(repair);
		return;
	}
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = mi[k];
		struct sc_fix *f;

		if (!(repair & (1u << k)))
			continue;
		j->res.bad_found++;
		ZL_LOG_WARN("storage",
			    "scrub found a bad copy: vol=%s chunk=%s member=%s reason=%s "
			    "version=%" PRIx64 " winner=%s version=%" PRIx64,
			    j->vid, idb, j->m[i].node, why[k], cp[k].version, j->m[mi[w]].node,
			    cp[w].version);
		if (j->n_fix >= SC_MAX_FIX)
			continue;
		f = &j->fix[j->n_fix++];
		memset(f, 0, sizeof(*f));
		f->chunk = id;
		f->version = cp[w].version;
		f->target = (uint8_t)i;
		f->source = mi[w];
		/* A member's copy at the winner's version would refuse the push;
		 * a missing one of ours is forgotten before it is rebuilt. */
		f->del_first = cp[k].held && (i != 0 || cp[k].bad == ZL_WIRE_DIGEST_MISSING);
		if (clone) {
			f->lo = sc_clone_lo(j, mi[w], id);
			f->install = i == 0 && f->del_first;
		}
		f->reason = why[k];
	}
}

/* The clone ids of chunk any member's window holds, ascending, into ids
 * (room for n_m * ZL_WIRE_DIGESTS_MAX). Returns how many. */
static uint32_t sc_clone_ids(const struct sc_job *j, uint64_t chunk, uint64_t *ids)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < j->n_m; i++) {
		for (int r = 0; r < j->m[i].n; r++) {
			uint64_t id = j->m[i].rec[r].chunk;
			uint32_t k;

			if (!(id >> ZL_CHUNK_IDX_BITS) || zl_chunk_id_base(id) != chunk)
				continue;
			for (k = 0; k < n && ids[k] < id; k++)
				;
			if (k < n && ids[k] == id)
				continue;
			memmove(ids + k + 1, ids + k, (n - k) * sizeof(*ids));
			ids[k] = id;
			n++;
		}
	}
	return n;
}

static void sc_compare(struct sc_job *j)
{
	uint64_t ids[ZL_MAX_REPLICAS * ZL_WIRE_DIGESTS_MAX];

	j->win_end = j->n_chunks;
	for (uint32_t i = 0; i < j->n_m; i++) {
		if (j->m[i].status) {
			ZL_LOG_WARN("storage",
				    "scrub: CHUNK_DIGEST failed: vol=%s slice=%u member=%s err=%s",
				    j->vid, j->slice, j->m[i].node, zl_errname(j->m[i].status));
			sc_done(j, j->m[i].status);
			return;
		}
		if (j->m[i].next)
			j->win_end = ZL_MIN(j->win_end, j->m[i].next);
	}
	j->n_fix = j->i_fix = 0;
	j->win_bytes = 0;
	for (uint64_t c = j->cursor; c < j->win_end; c += j->n_slices) {
		uint32_t n = sc_clone_ids(j, c, ids);

		sc_judge(j, c);
		for (uint32_t k = 0; k < n; k++)
			sc_judge(j, ids[k]);
	}
	j->phase = SC_FIX;
	sc_fix_next(j);
}

static void sc_member_done(void *arg)
{
	struct sc_job *j = arg;

	if (--j->pending)
		return;
	if (sc_stop_check(j))
		return;
	sc_compare(j);
}

static void sc_local_dg_done(struct dg_job *dg, int status)
{
	struct sc_job *j = (struct sc_job *)((char *)dg - offsetof(struct sc_job, dg));
	struct sc_member *m = &j->m[0];

	m->status = status;
	if (!status) {
		memcpy(m->rec, dg->rec, dg->n * sizeof(dg->rec[0]));
		m->n = (int)dg->n;
		m->next = dg->next;
	}
	sc_member_done(j);
}

static void sc_remote_dg_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct sc_member *m = arg;

	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (!status) {
		m->n = zl_wire_chunk_digests_decode(m->in, rep->payload_len, m->rec);
		m->next = rep->aux;
		if (m->n < 0)
			status = m->n;
		else if (m->next && m->next <= m->hdr.chunk)
			status = -ZL_ERR_PROTO; /* must move forward */
	}
	m->status = status;
	sc_member_done(m->j);
}

static void sc_window(void *arg)
{
	struct sc_job *j = arg;
	struct zl_storage_vol *sv;
	int rc;

	if (sc_stop_check(j))
		return;
	if (j->cursor >= j->n_chunks) {
		sc_done(j, 0);
		return;
	}
	/* Cached since sc_start; a miss (the volume was forgotten) loads it
	 * without waiting and ends this scrub BUSY. */
	rc = zl_storage_vol_lookup(j->st->vols, j->vol, &sv);
	if (rc) {
		sc_done(j, rc == -EINPROGRESS ? -ZL_ERR_BUSY : rc);
		return;
	}
	j->phase = SC_DIGEST;
	j->pending = j->n_m;
	for (uint32_t i = 0; i < j->n_m; i++) {
		j->m[i].status = 0;
		j->m[i].n = 0;
		j->m[i].next = 0;
	}
	rc = dg_start(&j->dg, j->st, &sv->v, j->slice, j->cursor, sc_local_dg_done);
	if (rc) {
		j->m[0].status = rc;
		j->pending--;
	}
	for (uint32_t i = 1; i < j->n_m; i++) {
		struct sc_member *m = &j->m[i];

		if (!m->in)
			m->in = zl_xport_buf_alloc(j->st->xport, ZL_WIRE_MAX_CTRL);
		memset(&m->hdr, 0, sizeof(m->hdr));
		m->hdr.opcode = ZL_OP_CHUNK_DIGEST;
		m->hdr.vol_id = j->vol;
		m->hdr.offset = j->slice;
		m->hdr.chunk = j->cursor;
		m->hdr.slice_ver = j->row_ver;
		m->hdr.epoch = j->epoch;
		rc = m->in ? zl_storage_fwd_request(j->st->fwd, m->node, &m->hdr, NULL, 0, m->in,
						     ZL_WIRE_MAX_CTRL, sc_remote_dg_cb, m)
			   : -ZL_ERR_BUSY;
		if (rc) {
			m->status = rc;
			j->pending--;
		}
	}
	if (!j->pending) {
		/* Nothing in flight: decide on the next turn, never inside. */
		j->pending = 1;
		zl_loop_defer(j->st->loop, &j->d, sc_member_done, j);
	}
}

/* ---- repairs ---- */

static void sc_piece_fetch(void *arg);

static void sc_fix_end(struct sc_job *j, int err)
{
	struct sc_fix *f = &j->fix[j->i_fix];
	char idb[48];

	sc_id_str(f->chunk, idb, sizeof(idb));
	if (err)
		ZL_LOG_WARN("storage",
			    "scrub repair failed: vol=%s chunk=%s member=%s reason=%s "
			    "source=%s err=%s (the copy stays bad: run the scrub again)",
			    j->vid, idb, j->m[f->target].node, f->reason, j->m[f->source].node,
			    zl_errname(err));
	else {
		j->res.repaired++;
		ZL_LOG_WARN("storage",
			    "scrub repaired vol=%s chunk=%s member=%s reason=%s "
			    "source=%s version=%" PRIx64,
			    j->vid, idb, j->m[f->target].node, f->reason, j->m[f->source].node,
			    f->version);
	}
	j->i_fix++;
	j->off = 0;
	zl_loop_defer(j->st->loop, &j->d, sc_fix_next, j);
}

static void sc_wait_then(struct sc_job *j, uint64_t bytes, zl_loop_cb next)
{
	/* A repair a client waits for is not paced. */
	uint64_t ms = j->kind == SC_AUTO ? 0 : pace(j->st->scrub, bytes);

	j->phase = SC_WAIT;
	if (ms)
		zl_timer_start(j->st->loop, &j->t, ms, 0, next, j);
	else
		zl_loop_defer(j->st->loop, &j->d, next, j);
}

static void sc_installed(void *arg, int status)
{
	struct sc_job *j = arg;

	if (sc_stop_check(j))
		return;
	sc_fix_end(j, status);
}

static void sc_piece_stored(struct sc_job *j, int status)
{
	struct sc_fix *f = &j->fix[j->i_fix];
	uint32_t len = ZL_MIN(DG_PIECE, j->chunk_size - j->off);
	int rc;

	if (sc_stop_check(j))
		return;
	if (status) {
		sc_fix_end(j, status);
		return;
	}
	j->res.bytes_read += len;
	j->off += len;
	if (j->off >= j->chunk_size && f->install) {
		/* Our own clone, rebuilt after its delete: a clone again. */
		rc = zl_chunk_snap_install(j->st->chunks, j->vol, f->chunk, f->lo, sc_installed, j);
		if (rc)
			sc_fix_end(j, rc);
		return;
	}
	if (j->off >= j->chunk_size) {
		sc_fix_end(j, 0);
		return;
	}
	j->phase = SC_FIX;
	sc_wait_then(j, len, sc_piece_fetch);
}

static void sc_local_stored(void *arg, int status)
{
	sc_piece_stored(arg, status);
}

static void sc_remote_stored(void *arg, int status, const struct zl_wire_hdr *rep)
{
	sc_piece_stored(arg, status ? status : zl_wire_status_to_err(rep->status));
}

/* The piece [off, off+len) of the winning copy is in pbuf: write it. */
static void sc_piece_store(struct sc_job *j)
{
	struct sc_fix *f = &j->fix[j->i_fix];
	uint32_t len = ZL_MIN(DG_PIECE, j->chunk_size - j->off);
	bool last = j->off + len >= j->chunk_size;
	int rc;

	if (f->target == 0) {
		/* Our own copy, which clients write meanwhile (we are the
		 * primary): a write submitted since the piece was read (ended:
		 * our version moved; or still on its way) is newer than the
		 * piece, which must not land over it; one submitted after this
		 * is ordered after it by the store. The version goes with the
		 * last piece, so a repair cut short is seen as behind and done
		 * again. */
		uint64_t ver = 0;

		rc = zl_chunk_version(j->st->chunks, j->vol, f->chunk, j->chunk_size, &ver);
		if (!rc &&
		    (ver != j->own_ver || zl_chunk_changing(j->st->chunks, j->vol, f->chunk)))
			rc = -ZL_ERR_CONFLICT;
		if (!rc && !last && buf_zero(j->pbuf, len))
			rc = zl_chunk_zero(j->st->chunks, j->vol, f->chunk, j->chunk_size, j->off,
					   len, 0, sc_local_stored, j);
		else if (!rc)
			rc =
			    zl_chunk_write(j->st->chunks, j->vol, f->chunk, j->chunk_size, j->off,
					   len, j->pbuf, last ? f->version : 0, sc_local_stored, j);
	} else {
		memset(&j->rhdr, 0, sizeof(j->rhdr));
		j->rhdr.opcode = ZL_OP_CHUNK_PUSH;
		j->rhdr.subop = ZL_PUSH_REPLACE;
		j->rhdr.vol_id = j->vol;
		j->rhdr.chunk = f->chunk;
		j->rhdr.offset = j->off;
		j->rhdr.length = len;
		j->rhdr.slice_ver = j->row_ver;
		j->rhdr.epoch = j->epoch;
		j->rhdr.aux = f->version;
		if (f->chunk >> ZL_CHUNK_IDX_BITS) { /* a clone: its lo goes along */
			j->rhdr.flags = ZL_WF_SEQ;
			j->rhdr.snap_seq = f->lo;
		}
		rc = zl_storage_fwd_request(j->st->fwd, j->m[f->target].node, &j->rhdr, j->pbuf,
					     len, NULL, 0, sc_remote_stored, j);
	}
	if (rc)
		sc_fix_end(j, rc);
}

static void sc_local_fetched(void *arg, int status)
{
	struct sc_job *j = arg;

	if (sc_stop_check(j))
		return;
	if (status) {
		sc_fix_end(j, status);
		return;
	}
	sc_piece_store(j);
}

static void sc_remote_fetched(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct sc_job *j = arg;

	if (sc_stop_check(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (!status && rep->aux != j->fix[j->i_fix].version)
		status = -ZL_ERR_CONFLICT; /* the winner changed meanwhile */
	if (status) {
		sc_fix_end(j, status);
		return;
	}
	sc_piece_store(j);
}

static void sc_piece_fetch(void *arg);

static void sc_src_warm_cb(void *arg, int status)
{
	(void)status; /* the version look-up that follows says what failed */
	sc_piece_fetch(arg);
}

static void sc_piece_fetch(void *arg)
{
	struct sc_job *j = arg;
	struct sc_fix *f = &j->fix[j->i_fix];
	uint32_t len = ZL_MIN(DG_PIECE, j->chunk_size - j->off);
	uint64_t ver = 0;
	int rc;

	if (sc_stop_check(j))
		return;
	j->phase = SC_FIX;
	if (f->source == 0 || f->target == 0) {
		/* Our copy's version is looked up first (the source's must
		 * still be the winning one; the target's is what the piece's
		 * write checks, sc_piece_store): a closed chunk (its digest's
		 * open evicted since) is opened off the loop, once a fix. */
		if (!j->src_warmed) {
			j->src_warmed = true;
			if (!zl_chunk_warm(j->st->chunks, j->vol, f->chunk, j->chunk_size,
					   sc_src_warm_cb, j))
				return;
		}
		rc = zl_chunk_version(j->st->chunks, j->vol, f->chunk, j->chunk_size, &ver);
		if (rc) {
			sc_fix_end(j, rc);
			return;
		}
		j->own_ver = ver;
	}
	if (f->source == 0) {
		rc = ver != f->version
			 ? -ZL_ERR_CONFLICT /* written meanwhile */
			 : zl_chunk_read(j->st->chunks, j->vol, f->chunk, j->chunk_size, j->off,
					 len, j->pbuf, sc_local_fetched, j);
	} else {
		memset(&j->rhdr, 0, sizeof(j->rhdr));
		j->rhdr.opcode = ZL_OP_READ;
		j->rhdr.flags = ZL_WF_ANY;
		j->rhdr.vol_id = j->vol;
		j->rhdr.chunk = f->chunk;
		if (f->chunk >> ZL_CHUNK_IDX_BITS) {
			/* A clone is read as its snapshot (its hi) holds the chunk. */
			j->rhdr.flags |= ZL_WF_SEQ;
			j->rhdr.snap_seq = (uint32_t)(f->chunk >> ZL_CHUNK_IDX_BITS);
			j->rhdr.chunk = zl_chunk_id_base(f->chunk);
		}
		j->rhdr.offset = j->off;
		j->rhdr.length = len;
		j->rhdr.slice_ver = j->row_ver;
		j->rhdr.epoch = j->epoch;
		rc = zl_storage_fwd_request(j->st->fwd, j->m[f->source].node, &j->rhdr, NULL, 0,
					     j->pbuf, len, sc_remote_fetched, j);
	}
	if (rc)
		sc_fix_end(j, rc);
}

static void sc_deleted(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct sc_job *j = arg;

	if (sc_stop_check(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status) {
		sc_fix_end(j, status);
		return;
	}
	sc_piece_fetch(j);
}

static void sc_fix_next(void *arg)
{
	struct sc_job *j = arg;
	struct sc_fix *f;
	char idb[48];
	int rc;

	if (sc_stop_check(j))
		return;
	if (j->i_fix >= j->n_fix) {
		/* Window done: every member read win_bytes; pace, then the next. */
		j->cursor = j->win_end;
		sc_wait_then(j, j->win_bytes, sc_window);
		return;
	}
	f = &j->fix[j->i_fix];
	j->off = 0;
	j->src_warmed = false;
	ZL_LOG_INFO("storage",
		    "scrub repairing vol=%s chunk=%s member=%s reason=%s source=%s "
		    "version=%" PRIx64,
		    j->vid, sc_id_str(f->chunk, idb, sizeof(idb)), j->m[f->target].node, f->reason,
		    j->m[f->source].node, f->version);
	if (!j->pbuf)
		j->pbuf = zl_xport_buf_alloc(j->st->xport, DG_PIECE);
	if (!j->pbuf) {
		sc_fix_end(j, -ZL_ERR_BUSY);
		return;
	}
	if (!f->del_first) {
		sc_piece_fetch(j);
		return;
	}
	if (f->target == 0) {
		/* Our own missing copy: forget the record, then rebuild it. */
		rc = zl_chunk_delete(j->st->chunks, j->vol, f->chunk);
		if (rc)
			sc_fix_end(j, rc);
		else
			sc_piece_fetch(j);
		return;
	}
	/* A member's copy at the winner's version (or above) would refuse the
	 * push: remove it first. */
	memset(&j->rhdr, 0, sizeof(j->rhdr));
	j->rhdr.opcode = ZL_OP_CHUNK_DELETE;
	j->rhdr.vol_id = j->vol;
	j->rhdr.chunk = f->chunk;
	j->rhdr.slice_ver = j->row_ver;
	j->rhdr.epoch = j->epoch;
	rc = zl_storage_fwd_request(j->st->fwd, j->m[f->target].node, &j->rhdr, NULL, 0, NULL, 0,
				     sc_deleted, j);
	if (rc)
		sc_fix_end(j, rc);
}

/* Starts the scrub of slice `slice` of volume `vol` on this node, which
 * must be its primary: a SCRUB request h on conn, a slice of the background
 * pass, or (SC_AUTO) only chunk `chunk` of it. 0 or an error (nothing
 * started). */
static int sc_start(struct zl_storage *st, enum sc_kind kind, struct zl_xport_conn *conn,
		    const struct zl_wire_hdr *h, uint64_t vol, uint32_t slice, uint64_t chunk)
{
	struct zl_storage_vol *sv;
	const struct zl_slice *s;
	struct sc_job *j;
	int me, rc;

	if (!st->scrub || st->scrub->stopping)
		return -ZL_ERR_UNAVAIL;
	/* Never an etcd call: a miss starts a load (the background scrub
	 * waited for the records of its pass, sc_bg_tick). */
	rc = zl_storage_vol_lookup(st->vols, vol, &sv);
	if (rc)
		return rc == -EINPROGRESS ? -ZL_ERR_BUSY : rc;
	if (slice >= sv->v.n_slices)
		return -ZL_ERR_RANGE;
	s = &sv->v.slices[slice];
	me = zl_slice_index_of(s, st->cfg.node_id);
	if (me < 0 || me != zl_slice_primary(s))
		return -ZL_ERR_NOT_PRIMARY;
	/* A repair a client asked for (one chunk, not paced) ends first: two
	 * jobs repairing one copy would cut each other's repair short. */
	for (struct sc_job *o = st->scrub->jobs; o; o = o->next)
		if (o->kind == SC_AUTO && o->vol == vol && o->slice == slice)
			return -ZL_ERR_BUSY;
	/* A primary that has not peered in the row's term may be behind:
	 * ZL_ERR_PEERING (peering starts; the caller retries). */
	rc = zl_storage_peering_ready(st, &sv->v, slice);
	if (rc)
		return rc;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->st = st;
	j->vol = vol;
	zl_vol_id_format(vol, j->vid);
	j->slice = slice;
	j->n_slices = sv->v.n_slices;
	j->chunk_size = sv->v.chunk_size;
	j->n_chunks = vol_chunks(&sv->v);
	j->row_ver = s->version;
	j->epoch = sv->max_epoch;
	j->cursor = slice;
	j->kind = kind;
	if (kind == SC_AUTO) {
		/* The one chunk: its window ends after it. */
		j->cursor = j->auto_chunk = chunk;
		j->n_chunks = ZL_MIN(j->n_chunks, chunk + 1);
	}
	j->t0 = zl_now_ms();
	snprintf(j->m[0].node, ZL_NODE_ID_MAX, "%s", st->cfg.node_id);
	j->m[0].j = j;
	j->n_m = 1;
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		if (i == me || zl_slice_member_state(s, i) != ZL_MEMBER_IN_SYNC)
			continue;
		snprintf(j->m[j->n_m].node, ZL_NODE_ID_MAX, "%s", s->nodes[i]);
		j->m[j->n_m].j = j;
		j->n_m++;
	}
	if (h)
		j->req = *h;
	if (conn) {
		j->conn = conn;
		zl_xport_conn_get(conn);
	}
	j->next = st->scrub->jobs;
	st->scrub->jobs = j;
	if (kind == SC_AUTO)
		ZL_LOG_WARN(
		    "storage",
		    "scrub started: vol=%s slice=%u chunk=%" PRIu64 " members=%u slice_ver=%" PRIu64
		    " (a client I/O found a bad block in our copy: repairing it from the members)",
		    j->vid, slice, chunk, j->n_m, j->row_ver);
	else
		ZL_LOG_INFO("storage",
			    "scrub started: vol=%s slice=%u members=%u slice_ver=%" PRIu64 "%s",
			    j->vid, slice, j->n_m, j->row_ver,
			    kind == SC_BACKGROUND ? " (background)" : "");
	zl_loop_defer(st->loop, &j->d, sc_window, j);
	return 0;
}

void zl_storage_scrub_serve(struct zl_storage *st, struct zl_xport_conn *c,
			    const struct zl_wire_hdr *h)
{
	int rc = sc_start(st, SC_REQUEST, c, h, h->vol_id, h->offset, 0);

	if (rc) {
		struct zl_wire_hdr rep;

		zl_wire_reply_init(h, &rep, rc);
		zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
	}
}

/* ---- repair on a client's find ---- */

void zl_storage_scrub_on_corrupt(struct zl_storage *st, uint64_t vol, uint32_t slice,
				 uint64_t chunk)
{
	struct zl_storage_scrub *sc = st->scrub;
	uint64_t now = zl_now_ms();
	uint32_t k;
	int rc;

	if (!sc || sc->stopping)
		return;
	/* A job on this slice may have passed the chunk: the client's next
	 * find (a write is sent again) starts one after it. */
	for (struct sc_job *j = sc->jobs; j; j = j->next)
		if (j->vol == vol && j->slice == slice)
			return;
	for (k = 0; k < SC_AUTO_SLOTS; k++)
		if (sc->auto_recent[k].t_ms && sc->auto_recent[k].vol == vol &&
		    sc->auto_recent[k].chunk == chunk &&
		    now - sc->auto_recent[k].t_ms < SC_AUTO_GAP_MS)
			return;
	rc = sc_start(st, SC_AUTO, NULL, NULL, vol, slice, chunk);
	if (rc) {
		ZL_LOG_DEBUG("storage", "no repair of chunk %" PRIu64 " of vol %016" PRIx64 ": %s",
			     chunk, vol, zl_errname(rc));
		return;
	}
	k = sc->auto_next++ % SC_AUTO_SLOTS;
	sc->auto_recent[k].vol = vol;
	sc->auto_recent[k].chunk = chunk;
	sc->auto_recent[k].t_ms = now;
}

/* ---- background scrub ---- */

static int sc_bg_vol(void *arg, uint64_t vol)
{
	struct zl_storage_scrub *sc = arg;
	struct zl_storage *st = sc->st;
	struct zl_storage_vol *sv;
	int rc;

	rc = zl_storage_vol_lookup(st->vols, vol, &sv);
	if (rc == -EINPROGRESS || rc == -ZL_ERR_BUSY)
		sc->bg_missing++; /* being loaded: sc_bg_tick comes back */
	if (rc)
		return 0;
	for (uint32_t s = 0; s < sv->v.n_slices; s++) {
		const struct zl_slice *sl = &sv->v.slices[s];
		int me = zl_slice_index_of(sl, st->cfg.node_id);

		if (me < 0 || me != zl_slice_primary(sl))
			continue;
		if (sc->bg_n == sc->bg_cap) {
			size_t cap = sc->bg_cap ? sc->bg_cap * 2 : 64;
			uint64_t *nv = realloc(sc->bg_vol, cap * sizeof(*nv));
			uint32_t *ns;

			if (!nv)
				return -ENOMEM;
			sc->bg_vol = nv;
			ns = realloc(sc->bg_slice, cap * sizeof(*ns));
			if (!ns)
				return -ENOMEM;
			sc->bg_slice = ns;
			sc->bg_cap = cap;
		}
		sc->bg_vol[sc->bg_n] = vol;
		sc->bg_slice[sc->bg_n] = s;
		sc->bg_n++;
	}
	return 0;
}

static void sc_bg_next(struct zl_storage_scrub *sc)
{
	while (sc->bg_i < sc->bg_n) {
		size_t i = sc->bg_i++;

		if (!sc_start(sc->st, SC_BACKGROUND, NULL, NULL, sc->bg_vol[i], sc->bg_slice[i], 0))
			return; /* sc_done calls us again */
	}
	if (sc->bg_running)
		ZL_LOG_INFO("storage", "background scrub pass done: slices=%zu", sc->bg_n);
	sc->bg_running = false;
}

static void sc_bg_tick(void *arg)
{
	struct zl_storage_scrub *sc = arg;

	if (sc->stopping || sc->bg_running)
		return;
	sc->bg_n = sc->bg_i = 0;
	sc->bg_missing = 0;
	zl_chunk_volume_foreach(sc->st->chunks, sc_bg_vol, sc);
	if (sc->bg_missing && sc->bg_waits < SC_BG_WAITS) {
		/* Records being loaded from etcd (on the loader thread): the
		 * pass starts once they are cached, or without them after
		 * SC_BG_WAITS looks. */
		sc->bg_waits++;
		zl_timer_start(sc->st->loop, &sc->bg_wait_t, SC_BG_WAIT_MS, 0, sc_bg_tick, sc);
		return;
	}
	sc->bg_waits = 0;
	sc->bg_running = true;
	ZL_LOG_INFO("storage", "background scrub pass started: slices=%zu", sc->bg_n);
	sc_bg_next(sc);
}

int zl_storage_scrub_start(struct zl_storage *st)
{
	struct zl_storage_scrub *sc = calloc(1, sizeof(*sc));
	uint64_t ms = (uint64_t)st->cfg.scrub_interval_s * 1000;

	if (!sc)
		return -ENOMEM;
	sc->st = st;
	st->scrub = sc;
	if (ms)
		zl_timer_start(st->loop, &sc->bg_t, ms, ms, sc_bg_tick, sc);
	ZL_LOG_INFO("storage", "scrub: mbps=%u interval_s=%u%s", st->cfg.scrub_mbps,
		    st->cfg.scrub_interval_s, ms ? "" : " (background scrub off)");
	return 0;
}

void zl_storage_scrub_stop(struct zl_storage *st)
{
	struct zl_storage_scrub *sc = st->scrub;

	if (!sc)
		return;
	sc->stopping = true;
	zl_timer_stop(st->loop, &sc->bg_t);
	zl_timer_stop(st->loop, &sc->bg_wait_t);
	/* Jobs waiting on a timer or a deferred step end now; the others end
	 * in the callback of what they wait for. */
	for (struct sc_job *j = sc->jobs, *next; j; j = next) {
		next = j->next;
		if (j->phase == SC_WAIT) {
			zl_timer_stop(st->loop, &j->t);
			zl_loop_defer_cancel(st->loop, &j->d);
			sc_done(j, -ZL_ERR_UNAVAIL);
		}
	}
}

void zl_storage_scrub_destroy(struct zl_storage *st)
{
	struct zl_storage_scrub *sc = st->scrub;

	if (!sc)
		return;
	zl_storage_scrub_stop(st);
	/* No callback can come now (peers and chunk store are gone): what is
	 * left only waited for a deferred step. */
	while (sc->jobs) {
		struct sc_job *j = sc->jobs;

		zl_loop_defer_cancel(st->loop, &j->dg.d);
		sc_free(j);
	}
	while (sc->serves) {
		struct dg_serve *s = sc->serves;

		zl_loop_defer_cancel(st->loop, &s->j.d);
		dg_serve_free(s);
	}
	free(sc->bg_vol);
	free(sc->bg_slice);
	free(sc);
	st->scrub = NULL;
}
