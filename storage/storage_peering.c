/* Peering of a slice's primary (--heal=on, docs/REPLICATION.md §3, contract
 * rule S4). When a row names this node primary in a term it has not peered
 * in (kept in memory per (volume, slice): a restarted daemon peers again),
 * the slice is PEERING and its client I/O is answered ZL_ERR_PEERING (or
 * held briefly by storage_server.c) until a peering job ran:
 *
 *   LIST  CHUNK_VERSIONS(slice, since=0) to every other IN_SYNC member, in
 *         parallel (paged). A member that cannot be reached is asked again
 *         for PEER_GRACE_MS (daemons restarting together find each other); one
 *         that fails or does not answer within the transport's request
 *         timeout gets a failure report and is left out; forwarded writes no
 *         longer raise its versions until recovery looked at it.
 *         RECOVERING members are not asked: they never held an acknowledged
 *         write the in-sync ones lack, and recovery replaces their copies.
 *   SCAN  per chunk (a batch per loop turn): the newest version among our own
 *         and the answers wins (zl_storage_peering_winner);
 *   COPY  when it is not ours, pull the whole chunk from its holder (READ +
 *         ZL_WF_ANY, 1 MiB pieces) and apply it with the winner's version;
 *         then CHUNK_PUSH the winning copy to every answered member whose
 *         version differs (behind: it applies over an older copy only), so
 *         all in-sync members end identical, rolled forward, never back.
 *         Before the chunk, its clone chunks (snapshots, docs/SNAPSHOTS.md
 *         §2): every copy's clones of it are made equal to the winning
 *         copy's holder's (the authority; a tie keeps ours), with the clone
 *         plan recovery uses (zl_storage_clone_plan): a clone the authority
 *         lacks or holds at another version is deleted (ours at once, a
 *         member's by CHUNK_DELETE), one a copy lacks is copied like a chunk
 *         (pulled with READ + ZL_WF_ANY | ZL_WF_SEQ at its hi and made a
 *         clone here, zl_chunk_snap_install; pushed with CHUNK_PUSH +
 *         ZL_WF_SEQ carrying its lo). A write made at a snapshot's sequence
 *         that reached only some members took its clone there only: the
 *         chunk then settles with the clone that belongs to its data.
 *   done  the term is peered; the term's sequence starts at 1 (above what
 *         our chunks hold of this term plus a gap, after a restart within
 *         the term), and the slice serves.
 * A failed pull or local step fails the attempt; zl_storage_peering_ready
 * starts a new one after PEER_RETRY_MS. A row change (version or term)
 * abandons the job; the next check starts over on the new row.
 *
 * Loop thread only; every request is bounded by the transport's timeout, so
 * every callback comes. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_heal.h"
#include "storage_io.h"

#define PEER_PIECE	   (1u << 20)
#define PEER_SCAN_BATCH	   64
#define PEER_RETRY_MS	   1000
#define PEER_GRACE_MS	   3000
#define PEER_GRACE_STEP_MS 250
/* Jobs running at once (a daemon starting with many volumes peers them in
 * waves: each job holds pool buffers and a version array per member). */
#define PEER_MAX_JOBS 64
/* A restart within a term skips this many sequence numbers: a write in
 * flight at the crash that reached only a member that did not answer never
 * shares a version with a new one. */
#define PEER_SEQ_GAP 65536u

struct peering_vol {
	struct peering_vol *next;
	uint64_t vol;
	uint32_t n_slices;
	uint32_t *peered; /* per slice: the term peered in, 0 = none */
};

enum pj_phase {
	PJ_LIST,
	PJ_SCAN,
	PJ_COPY,
	PJ_OVER, /* failed or abandoned: freed by the next check (after retry_ms) */
};

struct peering_job;

struct pj_member {
	struct peering_job *j;
	char node[ZL_NODE_ID_MAX];
	bool answered;
	bool failed; /* reported; not counted, not pushed to */
	int err;
	uint64_t cursor;
	uint64_t *ver; /* its version per local chunk */
	/* Its clone chunks (CHUNK_VERSIONS), ascending; cl_pos: the first of
	 * the chunk at the cursor or a later one. */
	struct zl_storage_clone *cl;
	uint32_t n_cl, cap_cl, cl_pos;
	struct zl_wire_hdr hdr;
	uint8_t *vbuf;
	struct zl_timer t; /* next CHUNK_VERSIONS to an unreachable member */
};

/* A clone of the chunk at the cursor, as the authority holds it: pulled
 * here (pull) and pushed to the members of the mask behind. */
struct pj_clone {
	struct zl_storage_clone c;
	bool pull;
	uint32_t behind;
};

/* A member's clone to delete (it is not the authority's). */
struct pj_clone_del {
	unsigned m;
	uint64_t id;
};

struct peering_job {
	struct peering_job *next;
	struct zl_storage *st;
	uint64_t vol;
	uint32_t slice, term;
	uint64_t row_ver;
	uint32_t n_slices, chunk_size;
	uint64_t n_local;
	char vid[ZL_VOL_ID_LEN + 1];
	enum pj_phase phase;
	bool abandon;
	bool forgotten; /* its volume is gone: freed when nothing is in flight */
	unsigned n_m;
	struct pj_member m[ZL_MAX_REPLICAS - 1];
	unsigned inflight; /* requests and chunk ops whose callback is due */
	uint64_t cursor;   /* SCAN: next local chunk index */
	uint64_t warm_end; /* SCAN: local chunks below it were warmed (pj_warm) */
	unsigned warming;  /* their warms still due (counted in inflight too) */
	/* chunk being copied (a clone chunk, or the chunk at the cursor) */
	uint64_t cur_chunk, cur_win;
	int cur_src; /* member pulled from, -1: our own copy */
	uint32_t cur_behind, cur_off;
	uint32_t cur_lo; /* a clone's lo */
	/* the chunk at the cursor: its winner, then its clones' steps */
	uint64_t live_chunk, live_win;
	int live_src;
	uint32_t live_behind;
	struct pj_clone cl[ZL_WIRE_VERS_MAX];
	uint32_t n_cl, i_cl;
	struct pj_clone_del del[(ZL_MAX_REPLICAS - 1) * ZL_WIRE_VERS_MAX];
	uint32_t n_del, i_del;
	struct zl_wire_hdr rhdr;
	uint8_t *pbuf;
	uint32_t pulled, pushed, max_seq;
	uint64_t started_ms, retry_ms;
	struct zl_defer d;
	struct zl_timer t; /* pj_finish again: the record was being loaded */
};

/* Direct-mapped by volume number: the I/O path's look-up (every request
 * a primary serves asks whether its row is peered) without walking every
 * volume's entry. */
#define PVOL_HOT 256

struct zl_storage_peering {
	struct zl_storage *st;
	struct peering_vol *vols;
	struct peering_vol *hot[PVOL_HOT]; /* a cache of vols' entries */
	struct peering_job *jobs;
	unsigned n_jobs;
	bool stopping;
};

static void pj_scan(void *arg);
static void pj_piece(struct peering_job *j);

/* ---- the rule ---- */

int zl_storage_peering_winner(uint64_t own, const uint64_t *ver, const bool *answered, unsigned n,
			   uint64_t *win, uint32_t *behind)
{
	int src = -1;

	*win = own;
	*behind = 0;
	for (unsigned i = 0; i < n; i++) {
		if (answered[i] && ver[i] > *win) {
			*win = ver[i];
			src = (int)i;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (answered[i] && ver[i] != *win)
			*behind |= 1u << i;
	return src;
}

/* ---- chunk copies (shared with CHUNK_PUSH) ---- */

static bool piece_is_zero(const uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

int zl_storage_chunk_apply(struct zl_storage *st, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			   uint32_t off, uint32_t len, const uint8_t *buf, uint64_t pushed,
			   zl_chunk_cb cb, void *arg)
{
	uint64_t ver = zl_storage_push_piece_version(off, len, chunk_size, pushed);

	if (!ver && piece_is_zero(buf, len)) {
		/* A clone of a chunk never written (zeros at version 0) is
		 * still a file, which zl_chunk_snap_install marks: its last
		 * piece writes the last block when no piece made the file. */
		if ((chunk >> ZL_CHUNK_IDX_BITS) && (uint64_t)off + len == chunk_size &&
		    !zl_chunk_held(st->chunks, vol, chunk))
			return zl_chunk_write(st->chunks, vol, chunk, chunk_size,
					      chunk_size - ZL_BLOCK_SIZE, ZL_BLOCK_SIZE,
					      buf + len - ZL_BLOCK_SIZE, 0, cb, arg);
		return zl_chunk_zero(st->chunks, vol, chunk, chunk_size, off, len, 0, cb, arg);
	}
	return zl_chunk_write(st->chunks, vol, chunk, chunk_size, off, len, buf, ver, cb, arg);
}

/* ---- state ---- */

int zl_storage_peering_create(struct zl_storage *st)
{
	struct zl_storage_peering *pg = calloc(1, sizeof(*pg));

	if (!pg)
		return -ENOMEM;
	pg->st = st;
	st->peering = pg;
	return 0;
}

/* pvol_get past its cache: finds or makes v's entry, caches it in *hot. */
static __attribute__((noinline)) struct peering_vol *
pvol_get_slow(struct zl_storage_peering *pg, const struct zl_volume *v, struct peering_vol **hot)
{
	struct peering_vol *pv;

	for (pv = pg->vols; pv; pv = pv->next)
		if (pv->vol == v->num)
			break;
	if (pv)
		*hot = pv;
	if (pv && pv->n_slices != v->n_slices) {
		uint32_t *np = calloc(v->n_slices, sizeof(*np));

		if (!np)
			return NULL;
		free(pv->peered);
		pv->peered = np;
		pv->n_slices = v->n_slices;
	}
	if (pv)
		return pv;
	pv = calloc(1, sizeof(*pv));
	if (!pv)
		return NULL;
	pv->peered = calloc(v->n_slices, sizeof(*pv->peered));
	if (!pv->peered) {
		free(pv);
		return NULL;
	}
	pv->vol = v->num;
	pv->n_slices = v->n_slices;
	pv->next = pg->vols;
	pg->vols = pv;
	*hot = pv;
	return pv;
}

/* v's entry (made on first use; NULL when out of memory): on the I/O path
 * (zl_storage_peering_ready_primary, every request a primary serves) one
 * look in the cache, inline. */
static inline struct peering_vol *pvol_get(struct zl_storage_peering *pg,
					   const struct zl_volume *v)
{
	struct peering_vol **hot = &pg->hot[v->num % PVOL_HOT];
	struct peering_vol *pv = *hot;

	if (pv && pv->vol == v->num && pv->n_slices == v->n_slices)
		return pv;
	return pvol_get_slow(pg, v, hot);
}

static void pj_free_bufs(struct peering_job *j)
{
	struct zl_storage *st = j->st;

	for (unsigned i = 0; i < j->n_m; i++) {
		if (j->m[i].vbuf)
			zl_xport_buf_free(st->xport, j->m[i].vbuf);
		j->m[i].vbuf = NULL;
	}
	if (j->pbuf)
		zl_xport_buf_free(st->xport, j->pbuf);
	j->pbuf = NULL;
}

static void pj_free(struct zl_storage_peering *pg, struct peering_job *j)
{
	for (struct peering_job **pp = &pg->jobs; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			pg->n_jobs--;
			break;
		}
	}
	zl_loop_defer_cancel(j->st->loop, &j->d);
	zl_timer_stop(j->st->loop, &j->t);
	pj_free_bufs(j);
	for (unsigned i = 0; i < j->n_m; i++) {
		zl_timer_stop(j->st->loop, &j->m[i].t);
		free(j->m[i].ver);
		free(j->m[i].cl);
	}
	free(j);
}

void zl_storage_peering_stop(struct zl_storage *st)
{
	struct zl_storage_peering *pg = st->peering;

	if (!pg)
		return;
	pg->stopping = true;
	for (struct peering_job *j = pg->jobs; j; j = j->next) {
		j->abandon = true;
		zl_loop_defer_cancel(st->loop, &j->d);
		for (unsigned i = 0; i < j->n_m; i++)
			zl_timer_stop(st->loop, &j->m[i].t);
	}
}

void zl_storage_peering_destroy(struct zl_storage *st)
{
	struct zl_storage_peering *pg = st->peering;

	if (!pg)
		return;
	while (pg->jobs)
		pj_free(pg, pg->jobs);
	while (pg->vols) {
		struct peering_vol *pv = pg->vols;

		pg->vols = pv->next;
		free(pv->peered);
		free(pv);
	}
	free(pg);
	st->peering = NULL;
}

/* ---- job steps ---- */

/* The attempt ends without peering: freed (and retried) by a later check. */
static void pj_over(struct peering_job *j, const char *what, int err)
{
	if (what)
		ZL_LOG_WARN("storage",
			    "peering attempt failed: vol=%s slice=%u term=%u step=%s err=%s "
			    "(retried in %u ms; client I/O of the slice waits)",
			    j->vid, j->slice, j->term, what, zl_errname(err), PEER_RETRY_MS);
	j->phase = PJ_OVER;
	j->retry_ms = zl_now_ms() + (what ? PEER_RETRY_MS : 0);
	zl_loop_defer_cancel(j->st->loop, &j->d);
	if (!j->inflight)
		pj_free_bufs(j);
}

/* A callback arrived: true when the job must not go on (it is over, or the
 * row changed / the daemon stops; then it ends once nothing is in flight). */
static bool pj_done_cb(struct peering_job *j)
{
	struct zl_storage_peering *pg = j->st->peering;

	j->inflight--;
	if (j->forgotten) {
		if (!j->inflight)
			pj_free(pg, j);
		return true;
	}
	if (j->phase == PJ_OVER) {
		if (!j->inflight)
			pj_free_bufs(j);
		return true;
	}
	if (j->abandon || pg->stopping) {
		if (!j->inflight)
			pj_over(j, NULL, 0);
		return true;
	}
	return false;
}

/* Member i failed: report it, no longer count or push to it; forwarded
 * writes to it stop raising its versions until recovery looked at it. */
static void pj_member_failed(struct peering_job *j, struct pj_member *m, const char *what, int err)
{
	struct zl_storage *st = j->st;
	struct zl_storage_vol *sv;

	if (m->failed)
		return;
	m->failed = true;
	m->answered = false;
	m->err = err;
	ZL_LOG_WARN("storage",
		    "peering: member failed: vol=%s slice=%u term=%u member=%s step=%s err=%s",
		    j->vid, j->slice, j->term, m->node, what, zl_errname(err));
	/* The cached record (a miss starts its load, never waits for it). */
	if (!zl_storage_vol_lookup(st->vols, j->vol, &sv) && j->slice < sv->v.n_slices)
		zl_storage_heal_fwd_failed(st, &sv->v, j->slice, m->node, UINT64_MAX);
	zl_storage_heal_report(st, j->vid, j->slice, m->node, zl_errname(err), j->row_ver);
}

static void pj_list_send(struct pj_member *m);

/* Every member answered or failed: compare. */
static void pj_list_cb_end(struct peering_job *j)
{
	j->phase = PJ_SCAN;
	zl_loop_defer(j->st->loop, &j->d, pj_scan, j);
}

static void pj_list_retry(void *arg)
{
	struct pj_member *m = arg;

	if (pj_done_cb(m->j))
		return;
	pj_list_send(m);
	if (!m->j->inflight)
		pj_list_cb_end(m->j);
}

/* A CHUNK_VERSIONS that failed fast (member not reachable yet): true when
 * it is asked again a little later, within PEER_GRACE_MS of the start. */
static bool pj_list_later(struct pj_member *m, int err)
{
	struct peering_job *j = m->j;

	if ((err != -ZL_ERR_CONN && err != -ZL_ERR_NOT_FOUND && err != -ZL_ERR_BUSY) ||
	    zl_now_ms() - j->started_ms >= PEER_GRACE_MS)
		return false;
	j->inflight++;
	zl_timer_start(j->st->loop, &m->t, PEER_GRACE_STEP_MS, 0, pj_list_retry, m);
	return true;
}

static void pj_list_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct pj_member *m = arg;
	struct peering_job *j = m->j;
	struct zl_wire_chunk_ver pairs[ZL_WIRE_VERS_MAX];
	int n;

	if (pj_done_cb(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	n = status ? status : zl_wire_chunk_vers_decode(m->vbuf, rep->payload_len, pairs);
	if (n < 0) {
		if (!pj_list_later(m, n))
			pj_member_failed(j, m, "CHUNK_VERSIONS", n);
	} else {
		for (int i = 0; i < n; i++) {
			uint64_t li = zl_chunk_id_base(pairs[i].chunk) / j->n_slices;

			if (zl_slice_of_id(pairs[i].chunk, j->n_slices) != j->slice ||
			    li >= j->n_local)
				continue;
			if (!(pairs[i].chunk >> ZL_CHUNK_IDX_BITS))
				m->ver[li] = pairs[i].version;
			else if (zl_storage_clone_listed(&m->cl, &m->n_cl, &m->cap_cl,
							 pairs[i].chunk, pairs[i].version)) {
				pj_over(j, "memory", -ENOMEM);
				return;
			}
		}
		if (rep->aux > m->cursor) {
			m->cursor = rep->aux;
			pj_list_send(m);
		} else {
			m->answered = true;
		}
	}
	if (!j->inflight)
		pj_list_cb_end(j);
}

static void pj_list_send(struct pj_member *m)
{
	struct peering_job *j = m->j;
	int rc;

	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.opcode = ZL_OP_CHUNK_VERSIONS;
	m->hdr.vol_id = j->vol;
	m->hdr.offset = j->slice;
	m->hdr.chunk = m->cursor;
	m->hdr.slice_ver = j->row_ver;
	rc = zl_storage_fwd_request(j->st->fwd, m->node, &m->hdr, NULL, 0, m->vbuf,
				     ZL_WIRE_MAX_CTRL, pj_list_cb, m);
	if (!rc)
		j->inflight++;
	else if (!pj_list_later(m, rc))
		pj_member_failed(j, m, "CHUNK_VERSIONS", rc);
}

static void pj_finish(struct peering_job *j);

static void pj_finish_retry(void *arg)
{
	struct peering_job *j = arg;

	if (pj_done_cb(j))
		return;
	pj_finish(j);
}

/* The end of a successful job: the slice serves in j->term. */
static void pj_finish(struct peering_job *j)
{
	struct zl_storage *st = j->st;
	struct zl_storage_vol *sv;
	struct peering_vol *pv;
	char members[ZL_MAX_REPLICAS * (ZL_NODE_ID_MAX + 24)] = "";
	uint32_t seq = 0;
	size_t o = 0;
	int rc;

	rc = zl_storage_vol_lookup(st->vols, j->vol, &sv);
	if (rc == -EINPROGRESS || rc == -ZL_ERR_BUSY) {
		/* The record is being loaded (or loads are throttled): look
		 * again a little later, never waiting for etcd here. */
		j->inflight++;
		zl_timer_start(st->loop, &j->t, PEER_GRACE_STEP_MS, 0, pj_finish_retry, j);
		return;
	}
	if (rc || !(pv = pvol_get(st->peering, &sv->v)) || j->slice >= pv->n_slices) {
		pj_over(j, "record", -ZL_ERR_NOT_FOUND);
		return;
	}
	if (j->max_seq)
		seq = j->max_seq > UINT32_MAX - 1 - PEER_SEQ_GAP ? UINT32_MAX - 1
								 : j->max_seq + PEER_SEQ_GAP;
	if (zl_storage_heal_seq_set(st, j->vol, j->slice, j->term, seq)) {
		/* Writes are numbered from it: no service without it. */
		pj_over(j, "data sequence", -ENOMEM);
		return;
	}
	pv->peered[j->slice] = j->term;
	for (unsigned i = 0; i < j->n_m && o < sizeof(members); i++)
		o += (size_t)snprintf(members + o, sizeof(members) - o, "%s%s%s%s%s", o ? "," : "",
				      j->m[i].node, j->m[i].failed ? "(" : "",
				      j->m[i].failed ? zl_errname(j->m[i].err) : "",
				      j->m[i].failed ? ")" : "");
	ZL_LOG_INFO("storage",
		    "peering vol=%s slice=%u term=%u members=%s pulled=%u pushed=%u ms=%" PRIu64
		    " seq=%u",
		    j->vid, j->slice, j->term, o ? members : "-", j->pulled, j->pushed,
		    zl_now_ms() - j->started_ms, seq);
	j->phase = PJ_OVER;
	j->retry_ms = 0;
	pj_free(st->peering, j);
}

static void pj_clone_next(struct peering_job *j);

/* A copy ended (the chunk at the cursor, or one of its clones first). */
static void pj_chunk_done(struct peering_job *j)
{
	j->pulled += j->cur_src >= 0;
	for (unsigned i = 0; i < j->n_m; i++)
		j->pushed += (j->cur_behind >> i) & 1;
	if (j->cur_chunk >> ZL_CHUNK_IDX_BITS) {
		j->i_cl++;
		pj_clone_next(j);
		return;
	}
	j->cursor++;
	j->phase = PJ_SCAN;
	zl_loop_defer(j->st->loop, &j->d, pj_scan, j);
}

static uint32_t pj_len(const struct peering_job *j)
{
	return ZL_MIN(PEER_PIECE, j->chunk_size - j->cur_off);
}

static void pj_piece_next(struct peering_job *j)
{
	j->cur_off += pj_len(j);
	if (j->cur_off < j->chunk_size)
		pj_piece(j);
	else
		pj_chunk_done(j);
}

static void pj_push_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct pj_member *m = arg;
	struct peering_job *j = m->j;
	unsigned i = (unsigned)(m - j->m);

	if (pj_done_cb(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status == -ZL_ERR_CONFLICT) {
		/* Its copy is not older after all (a forwarded write?), or it
		 * holds that clone already: leave it. */
		j->cur_behind &= ~(1u << i);
	} else if (status) {
		j->cur_behind &= ~(1u << i);
		pj_member_failed(j, m, "CHUNK_PUSH", status);
	}
	if (!j->inflight)
		pj_piece_next(j);
}

/* The piece is in j->pbuf (and applied here): push it to the members behind. */
static void pj_push(struct peering_job *j)
{
	uint32_t len = pj_len(j);

	for (unsigned i = 0; i < j->n_m; i++) {
		struct pj_member *m = &j->m[i];
		int rc;

		if (!((j->cur_behind >> i) & 1))
			continue;
		if (m->failed) {
			j->cur_behind &= ~(1u << i);
			continue;
		}
		memset(&m->hdr, 0, sizeof(m->hdr));
		m->hdr.opcode = ZL_OP_CHUNK_PUSH;
		m->hdr.vol_id = j->vol;
		m->hdr.chunk = j->cur_chunk;
		m->hdr.offset = j->cur_off;
		m->hdr.length = len;
		m->hdr.slice_ver = j->row_ver;
		m->hdr.aux = j->cur_win;
		if (j->cur_chunk >> ZL_CHUNK_IDX_BITS) { /* a clone: its lo goes along */
			m->hdr.flags = ZL_WF_SEQ;
			m->hdr.snap_seq = j->cur_lo;
		}
		rc = zl_storage_fwd_request(j->st->fwd, m->node, &m->hdr, j->pbuf, len, NULL, 0,
					     pj_push_cb, m);
		if (rc) {
			j->cur_behind &= ~(1u << i);
			pj_member_failed(j, m, "CHUNK_PUSH", rc);
		} else {
			j->inflight++;
		}
	}
	if (!j->inflight)
		pj_piece_next(j);
}

static void pj_installed_cb(void *arg, int status)
{
	struct peering_job *j = arg;

	if (pj_done_cb(j))
		return;
	if (status) {
		pj_over(j, "install pulled clone", status);
		return;
	}
	pj_push(j);
}

static void pj_local_cb(void *arg, int status)
{
	struct peering_job *j = arg;
	int rc;

	if (pj_done_cb(j))
		return;
	if (status) {
		pj_over(j, j->cur_src >= 0 ? "apply pulled piece" : "read own piece", status);
		return;
	}
	if (j->cur_src >= 0 && j->cur_chunk >> ZL_CHUNK_IDX_BITS &&
	    j->cur_off + pj_len(j) >= j->chunk_size) {
		/* A pulled clone is whole: it becomes a clone here. */
		rc = zl_chunk_snap_install(j->st->chunks, j->vol, j->cur_chunk, j->cur_lo,
					   pj_installed_cb, j);
		if (rc) {
			pj_over(j, "install pulled clone", rc);
			return;
		}
		j->inflight++;
		return;
	}
	pj_push(j);
}

static void pj_pull_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct peering_job *j = arg;
	struct pj_member *m = &j->m[j->cur_src];
	uint32_t len = pj_len(j);
	int rc;

	if (pj_done_cb(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (!status && (rep->payload_len != len || rep->aux != j->cur_win))
		status = -ZL_ERR_CONFLICT; /* its copy changed since it answered */
	if (status) {
		/* Without the winning copy the slice cannot serve: report and try
		 * again (the manager may change the row meanwhile). */
		ZL_LOG_WARN("storage",
			    "peering: pull failed: vol=%s slice=%u chunk=%" PRIu64 " from=%s "
			    "version=%" PRIx64 " err=%s",
			    j->vid, j->slice, j->cur_chunk, m->node, j->cur_win,
			    zl_errname(status));
		zl_storage_heal_report(j->st, j->vid, j->slice, m->node, zl_errname(status),
				       j->row_ver);
		pj_over(j, "pull", status);
		return;
	}
	/* A pulled clone replaces whatever file of its id is here (a copy cut
	 * short before). */
	rc = j->cur_chunk >> ZL_CHUNK_IDX_BITS && !j->cur_off
		     ? zl_chunk_delete(j->st->chunks, j->vol, j->cur_chunk)
		     : 0;
	if (!rc)
		rc = zl_storage_chunk_apply(j->st, j->vol, j->cur_chunk, j->chunk_size, j->cur_off,
					    len, j->pbuf, j->cur_win, pj_local_cb, j);
	if (rc) {
		pj_over(j, "apply pulled piece", rc);
		return;
	}
	j->inflight++;
}

static void pj_piece(struct peering_job *j)
{
	struct zl_storage *st = j->st;
	uint32_t len = pj_len(j);
	int rc;

	j->phase = PJ_COPY;
	if (!j->pbuf)
		j->pbuf = zl_xport_buf_alloc(st->xport, PEER_PIECE);
	if (!j->pbuf) {
		pj_over(j, "buffer", -ENOMEM);
		return;
	}
	if (j->cur_src < 0) {
		rc = zl_chunk_read(st->chunks, j->vol, j->cur_chunk, j->chunk_size, j->cur_off, len,
				   j->pbuf, pj_local_cb, j);
		if (rc) {
			pj_over(j, "read own piece", rc);
			return;
		}
		j->inflight++;
		return;
	}
	memset(&j->rhdr, 0, sizeof(j->rhdr));
	j->rhdr.opcode = ZL_OP_READ;
	j->rhdr.flags = ZL_WF_ANY;
	j->rhdr.vol_id = j->vol;
	j->rhdr.chunk = j->cur_chunk;
	if (j->cur_chunk >> ZL_CHUNK_IDX_BITS) {
		/* A clone is read as its snapshot (its hi) holds the chunk; the
		 * reply's aux must be the clone's version. */
		j->rhdr.flags |= ZL_WF_SEQ;
		j->rhdr.snap_seq = (uint32_t)(j->cur_chunk >> ZL_CHUNK_IDX_BITS);
		j->rhdr.chunk = zl_chunk_id_base(j->cur_chunk);
	}
	j->rhdr.offset = j->cur_off;
	j->rhdr.length = len;
	j->rhdr.slice_ver = j->row_ver;
	rc = zl_storage_fwd_request(st->fwd, j->m[j->cur_src].node, &j->rhdr, NULL, 0, j->pbuf,
				     len, pj_pull_cb, j);
	if (rc) {
		zl_storage_heal_report(st, j->vid, j->slice, j->m[j->cur_src].node, zl_errname(rc),
				       j->row_ver);
		pj_over(j, "pull", rc);
		return;
	}
	j->inflight++;
}

/* The clones member m listed of chunk: a run of m->cl (chunks come in
 * ascending order). */
static const struct zl_storage_clone *pj_member_clones(struct pj_member *m, uint64_t chunk,
						       uint32_t *n)
{
	while (m->cl_pos < m->n_cl && zl_chunk_id_base(m->cl[m->cl_pos].id) < chunk)
		m->cl_pos++;
	*n = 0;
	while (m->cl_pos + *n < m->n_cl && zl_chunk_id_base(m->cl[m->cl_pos + *n].id) == chunk)
		(*n)++;
	return *n ? m->cl + m->cl_pos : NULL; /* m->cl is NULL when none was listed */
}

/* The clone step of chunk (its winner in live_*): j->cl gets the
 * authority's clones of it (live_src's, -1 ours), each marked with the
 * copies that lack it (pull: ours; behind: members), j->del the members'
 * clones the authority lacks or holds at another version; ours are
 * deleted here. Leaves out the clones no copy needs (n_cl 0 when nothing
 * is to do). 0 or an error. */
static int pj_clone_plan(struct peering_job *j, uint64_t chunk)
{
	struct zl_storage_clone own[ZL_WIRE_VERS_MAX], acts[2 * ZL_WIRE_VERS_MAX];
	const struct zl_storage_clone *want = own;
	uint32_t n_own, n_want, n_acts, keep = 0;
	int rc;

	j->n_cl = j->i_cl = j->n_del = j->i_del = 0;
	rc = zl_storage_clones_own(j->st, j->vol, chunk, j->chunk_size, own, ZL_WIRE_VERS_MAX,
				   &n_own);
	if (rc)
		return rc;
	n_want = n_own;
	if (j->live_src >= 0)
		want = pj_member_clones(&j->m[j->live_src], chunk, &n_want);
	n_want = ZL_MIN(n_want, ZL_WIRE_VERS_MAX);
	for (uint32_t i = 0; i < n_want; i++)
		j->cl[i] = (struct pj_clone){.c = want[i]};
	if (j->live_src >= 0 && (n_want || n_own)) {
		n_acts = zl_storage_clone_plan(want, n_want, own, n_own, true, acts);
		for (uint32_t a = 0; a < n_acts; a++) {
			if (!acts[a].del) {
				for (uint32_t i = 0; i < n_want; i++)
					j->cl[i].pull |= j->cl[i].c.id == acts[a].id;
				continue;
			}
			rc = zl_chunk_delete(j->st->chunks, j->vol, acts[a].id);
			if (rc)
				return rc;
			ZL_LOG_INFO("storage",
				    "peering removed a clone chunk the winning copy's holder lacks: "
				    "vol=%s chunk=%016" PRIx64 " authority=%s",
				    j->vid, acts[a].id, j->m[j->live_src].node);
		}
	}
	for (unsigned m = 0; m < j->n_m; m++) {
		const struct zl_storage_clone *have;
		uint32_t n_have;

		if ((int)m == j->live_src || !j->m[m].answered || j->m[m].failed)
			continue;
		have = pj_member_clones(&j->m[m], chunk, &n_have);
		if (!n_want && !n_have)
			continue;
		n_have = ZL_MIN(n_have, ZL_WIRE_VERS_MAX);
		n_acts = zl_storage_clone_plan(want, n_want, have, n_have, true, acts);
		for (uint32_t a = 0; a < n_acts; a++) {
			if (acts[a].del) {
				j->del[j->n_del++] = (struct pj_clone_del){.m = m, .id = acts[a].id};
				continue;
			}
			for (uint32_t i = 0; i < n_want; i++)
				if (j->cl[i].c.id == acts[a].id)
					j->cl[i].behind |= 1u << m;
		}
	}
	for (uint32_t i = 0; i < n_want; i++)
		if (j->cl[i].pull || j->cl[i].behind)
			j->cl[keep++] = j->cl[i];
	j->n_cl = keep;
	return 0;
}

static void pj_clone_del_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct pj_member *m = arg;
	struct peering_job *j = m->j;

	if (pj_done_cb(j))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status)
		pj_member_failed(j, m, "CHUNK_DELETE of a clone", status);
	else
		ZL_LOG_INFO("storage",
			    "peering removed a member's clone chunk the authority lacks: vol=%s "
			    "chunk=%016" PRIx64 " member=%s",
			    j->vid, j->del[j->i_del].id, m->node);
	j->i_del++;
	pj_clone_next(j);
}

/* The next step of the chunk at the cursor: the members' clones to delete,
 * one at a time, then the clones to copy, then the chunk itself. */
static void pj_clone_next(struct peering_job *j)
{
	j->phase = PJ_COPY;
	while (j->i_del < j->n_del) {
		struct pj_member *m = &j->m[j->del[j->i_del].m];
		int rc;

		if (m->failed) {
			j->i_del++;
			continue;
		}
		memset(&m->hdr, 0, sizeof(m->hdr));
		m->hdr.opcode = ZL_OP_CHUNK_DELETE;
		m->hdr.vol_id = j->vol;
		m->hdr.chunk = j->del[j->i_del].id;
		m->hdr.slice_ver = j->row_ver;
		rc = zl_storage_fwd_request(j->st->fwd, m->node, &m->hdr, NULL, 0, NULL, 0,
					     pj_clone_del_cb, m);
		if (!rc) {
			j->inflight++;
			return;
		}
		pj_member_failed(j, m, "CHUNK_DELETE of a clone", rc);
		j->i_del++;
	}
	if (j->i_cl < j->n_cl) {
		const struct pj_clone *c = &j->cl[j->i_cl];

		j->cur_chunk = c->c.id;
		j->cur_win = c->c.version;
		j->cur_lo = c->c.lo;
		j->cur_src = c->pull ? j->live_src : -1;
		j->cur_behind = c->behind;
		j->cur_off = 0;
		pj_piece(j);
		return;
	}
	j->cur_chunk = j->live_chunk;
	j->cur_win = j->live_win;
	j->cur_src = j->live_src;
	j->cur_behind = j->live_behind;
	j->cur_off = 0;
	if (j->cur_src >= 0 || j->cur_behind) {
		pj_piece(j);
		return;
	}
	j->cursor++;
	j->phase = PJ_SCAN;
	zl_loop_defer(j->st->loop, &j->d, pj_scan, j);
}

static void pj_scan(void *arg);

static void pj_warm_cb(void *arg, int status)
{
	struct peering_job *j = arg;

	(void)status; /* the version look-up that follows says what failed */
	j->warming--;
	if (pj_done_cb(j))
		return;
	if (!j->warming)
		zl_loop_defer(j->st->loop, &j->d, pj_scan, j);
}

/* Opens the next batch of local chunks from the cursor on the store's open
 * workers, so the scan's version look-ups answer from memory instead of
 * reading chunk files on the loop. True: pj_scan runs again when they are
 * open. */
static bool pj_warm(struct peering_job *j)
{
	uint64_t end = ZL_MIN(j->cursor + PEER_SCAN_BATCH, j->n_local);

	for (uint64_t i = j->cursor; i < end; i++) {
		unsigned n = zl_chunk_snap_warm(j->st->chunks, j->vol, j->slice + i * j->n_slices,
						j->chunk_size, pj_warm_cb, j);

		j->warming += n;
		j->inflight += n;
	}
	j->warm_end = end;
	return j->warming > 0;
}

static void pj_scan(void *arg)
{
	struct peering_job *j = arg;
	struct zl_storage *st = j->st;
	uint64_t ver[ZL_MAX_REPLICAS - 1];
	bool answered[ZL_MAX_REPLICAS - 1];

	if (j->abandon || st->peering->stopping) {
		pj_over(j, NULL, 0);
		return;
	}
	if (j->cursor >= j->warm_end && pj_warm(j))
		return;
	for (unsigned n = 0; n < PEER_SCAN_BATCH && j->cursor < j->warm_end; n++) {
		uint64_t chunk = j->slice + j->cursor * j->n_slices, own = 0, win;
		uint32_t behind;
		int rc = zl_chunk_version(st->chunks, j->vol, chunk, j->chunk_size, &own);

		if (rc) {
			pj_over(j, "chunk version", rc);
			return;
		}
		for (unsigned i = 0; i < j->n_m; i++) {
			ver[i] = j->m[i].ver[j->cursor];
			answered[i] = j->m[i].answered && !j->m[i].failed;
		}
		j->live_src = zl_storage_peering_winner(own, ver, answered, j->n_m, &win, &behind);
		if (zl_wire_dver_term(win) == j->term)
			j->max_seq = ZL_MAX(j->max_seq, zl_wire_dver_seq(win));
		j->live_chunk = chunk;
		j->live_win = win;
		j->live_behind = behind;
		rc = pj_clone_plan(j, chunk);
		if (rc) {
			pj_over(j, "clone versions", rc);
			return;
		}
		if (j->live_src >= 0 || behind || j->n_del || j->n_cl) {
			pj_clone_next(j);
			return;
		}
		j->cursor++;
	}
	if (j->cursor < j->n_local) {
		zl_loop_defer(st->loop, &j->d, pj_scan, j);
		return;
	}
	pj_finish(j);
}

static uint64_t pj_slice_chunks(const struct zl_volume *v, uint32_t slice)
{
	uint64_t n = (v->size + v->chunk_size - 1) / v->chunk_size;

	return slice < n ? (n - slice + v->n_slices - 1) / v->n_slices : 0;
}

static void pj_start(struct zl_storage_peering *pg, const struct zl_volume *v, uint32_t slice)
{
	struct zl_storage *st = pg->st;
	const struct zl_slice *s = &v->slices[slice];
	struct peering_job *j = calloc(1, sizeof(*j));

	if (!j)
		return;
	j->st = st;
	j->vol = v->num;
	j->slice = slice;
	j->term = s->term ? s->term : 1;
	j->row_ver = s->version;
	j->n_slices = v->n_slices;
	j->chunk_size = v->chunk_size;
	j->n_local = pj_slice_chunks(v, slice);
	j->started_ms = zl_now_ms();
	zl_vol_id_format(v->num, j->vid);
	j->next = pg->jobs;
	pg->jobs = j;
	pg->n_jobs++;
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		struct pj_member *m = &j->m[j->n_m];

		if (!strcmp(s->nodes[i], st->cfg.node_id) ||
		    zl_slice_member_state(s, i) != ZL_MEMBER_IN_SYNC ||
		    j->n_m >= ZL_MAX_REPLICAS - 1)
			continue;
		m->j = j;
		snprintf(m->node, sizeof(m->node), "%s", s->nodes[i]);
		m->ver = calloc(j->n_local + 1, sizeof(uint64_t));
		m->vbuf = zl_xport_buf_alloc(st->xport, ZL_WIRE_MAX_CTRL);
		j->n_m++;
		if (!m->ver || !m->vbuf) {
			pj_over(j, "memory", -ENOMEM);
			return;
		}
	}
	ZL_LOG_INFO("storage",
		    "peering started: vol=%s slice=%u term=%u slice_ver=%" PRIu64 " members=%u",
		    j->vid, slice, j->term, j->row_ver, j->n_m);
	j->phase = PJ_LIST;
	for (unsigned i = 0; i < j->n_m; i++)
		pj_list_send(&j->m[i]);
	if (!j->inflight) {
		j->phase = PJ_SCAN;
		zl_loop_defer(st->loop, &j->d, pj_scan, j);
	}
}

/* ---- checks ---- */

int zl_storage_peering_ready(struct zl_storage *st, const struct zl_volume *v, uint32_t slice)
{
	const struct zl_slice *s;

	if (!st->peering || slice >= v->n_slices)
		return 0;
	s = &v->slices[slice];
	if (zl_slice_index_of(s, st->cfg.node_id) != zl_slice_primary(s) || zl_slice_primary(s) < 0)
		return 0;
	return zl_storage_peering_ready_primary(st, v, slice);
}

int zl_storage_peering_ready_primary(struct zl_storage *st, const struct zl_volume *v,
				     uint32_t slice)
{
	struct zl_storage_peering *pg = st->peering;
	const struct zl_slice *s;
	struct peering_vol *pv;
	struct peering_job *j;
	uint32_t term;

	if (!pg || slice >= v->n_slices)
		return 0;
	s = &v->slices[slice];
	term = s->term ? s->term : 1;
	pv = pvol_get(pg, v);
	if (pv && pv->peered[slice] == term)
		return 0;
	if (!pv || pg->stopping)
		return -ZL_ERR_PEERING;
	for (j = pg->jobs; j; j = j->next)
		if (j->vol == v->num && j->slice == slice)
			break;
	if (j && (j->term != term || j->row_ver != s->version)) {
		j->abandon = true;
		if (j->phase == PJ_SCAN && !j->inflight)
			pj_over(j, NULL, 0);
	}
	if (j && j->phase == PJ_OVER && !j->inflight && zl_now_ms() >= j->retry_ms) {
		pj_free(pg, j);
		j = NULL;
	}
	if (!j && pg->n_jobs < PEER_MAX_JOBS)
		pj_start(pg, v, slice);
	return -ZL_ERR_PEERING;
}

void zl_storage_peering_forget(struct zl_storage *st, uint64_t vol)
{
	struct zl_storage_peering *pg = st->peering;
	struct peering_job *j, *next;

	if (!pg)
		return;
	for (struct peering_vol **pp = &pg->vols; *pp; pp = &(*pp)->next) {
		struct peering_vol *pv = *pp;

		if (pv->vol == vol) {
			*pp = pv->next;
			if (pg->hot[vol % PVOL_HOT] == pv)
				pg->hot[vol % PVOL_HOT] = NULL;
			free(pv->peered);
			free(pv);
			break;
		}
	}
	for (j = pg->jobs; j; j = next) {
		next = j->next;
		if (j->vol != vol)
			continue;
		if (j->inflight) {
			j->forgotten = true; /* freed by its last callback */
			continue;
		}
		pj_free(pg, j);
	}
}

static int peering_cmp(const void *a, const void *b)
{
	const struct zl_status_peering *x = a, *y = b;

	if (x->vol != y->vol)
		return x->vol < y->vol ? -1 : 1;
	return x->slice < y->slice ? -1 : x->slice > y->slice;
}

uint32_t zl_storage_peering_list(struct zl_storage *st, struct zl_status_peering *out, uint32_t max)
{
	struct zl_storage_peering *pg = st->peering;
	uint32_t n = 0, total = 0;

	if (!pg)
		return 0;
	for (struct peering_vol *pv = pg->vols; pv; pv = pv->next) {
		struct zl_storage_vol *sv;

		/* Usually cached (peering looked at it); a miss starts a load
		 * and is left out of this listing. */
		if (zl_storage_vol_lookup(st->vols, pv->vol, &sv))
			continue;
		for (uint32_t i = 0; i < sv->v.n_slices && i < pv->n_slices; i++) {
			const struct zl_slice *s = &sv->v.slices[i];
			uint32_t term = s->term ? s->term : 1;
			int prim = zl_slice_primary(s);
			struct zl_status_peering e = {.vol = pv->vol, .slice = i, .term = term};

			if (prim < 0 || zl_slice_index_of(s, st->cfg.node_id) != prim ||
			    pv->peered[i] == term)
				continue;
			if (n < max)
				out[n++] = e;
			total++;
		}
	}
	if (n > 1)
		qsort(out, n, sizeof(*out), peering_cmp);
	return total;
}

int zl_storage_peering_vol_ready(struct zl_storage *st, const struct zl_volume *v)
{
	int rc = 0;

	if (!st->peering)
		return 0;
	for (uint32_t s = 0; s < v->n_slices; s++)
		if (zl_storage_peering_ready(st, v, s))
			rc = -ZL_ERR_PEERING;
	return rc;
}
