/* Healing side of a storage daemon (--heal=on; docs/REPLICATION.md §3-4,
 * contract rules S2 and S3): data versions of the slices this node is
 * primary of, which members' chunk copies are known complete, failure
 * reports, and the recovery task that copies to RECOVERING members every
 * chunk whose version differs from the primary's (older, missing, or newer:
 * a write the old primary applied but never acknowledged, rolled back with
 * CHUNK_PUSH subop ZL_PUSH_REPLACE), then reports "CAUGHT_UP". Recovery of
 * a slice starts only once its primary has peered (storage_peering.c).
 *
 * A recovery job (struct heal_member), one per (volume, slice, member) the
 * primary tracks, runs passes on the loop thread, off the I/O fast path:
 *   IDLE   nothing in flight; the tick starts a pass for a RECOVERING member
 *   LIST   CHUNK_VERSIONS to the member in flight (paged)
 *   SCAN   comparing the member's versions with ours, a batch per loop turn
 *   READ   reading a piece of the chunk being copied (chunk store, async)
 *   PUSH   CHUNK_PUSH of that piece in flight
 *   WAIT   rate limit (--recovery-mbps) before the next piece or chunk
 *   REPORT a pass copied nothing: its CAUGHT_UP report is on the worker
 *   DONE   a pass copied nothing: reported CAUGHT_UP at done_ver; waits for
 *          the manager to change the row
 * A pass that copied something is followed by another one; a chunk whose
 * versions are equal is marked complete (forwarded writes then raise its
 * version on the member).
 *
 * Copies under writes (REPLICATION.md §4): CAUGHT_UP must mean that every
 * chunk of the member equals ours. The member's version of a chunk changes
 * only by a copy's last piece (cur_ver) or by a forwarded write carrying its
 * version, sent only for chunks marked complete (clean). Hence:
 *  - a chunk is copied only while no client write of it is on its way here
 *    (zl_storage_heal_plan counts them from srv_plan until the local write
 *    and every forward ended), so our data is stable at cur_ver when the
 *    copy starts; else the pass skips it (pass_skipped: another pass);
 *  - a write of it planned during the copy is forwarded without a version
 *    and marks the copy dirty (cur_dirty): a piece read before it may land
 *    after it on the member, but our version passes cur_ver, so the next
 *    pass copies again; a copy that ends clean marks the chunk complete;
 *  - a chunk is compared (and marked complete) only while no client write
 *    of it is on its way either: one planned before the mark is forwarded
 *    without a version, and landing after it would leave the member's
 *    version behind its data (a clone taken there later would carry it);
 *  - a chunk written while its clones were being made equal (cl_dirty) is
 *    not marked complete in that pass: the write, forwarded without a
 *    version, may have taken a clone on the member from its older copy
 *    after the clone plan; the next pass lists and compares its clones
 *    again;
 *  - a complete chunk is not compared again (its listed version may lag
 *    forwards on their way; a failed forward or OUT clears the mark); for
 *    the others equal versions mean equal data, as the chunk store never
 *    claims a version whose data is not durable (storage_chunk.c).
 * A chunk written without pause waits for a quiet moment.
 *
 * Clone chunks (snapshots, docs/SNAPSHOTS.md §2) travel with their chunk:
 * CHUNK_VERSIONS lists a chunk's clones after it, and before a chunk is
 * compared the member's clones of it are made equal to ours (same ids,
 * same versions): a clone it holds and we do not is deleted (CHUNK_DELETE),
 * one it lacks or holds at another version is copied (CHUNK_PUSH with
 * ZL_WF_SEQ carrying the clone's lo; the member makes it a clone again).
 * A clone is never written after it was taken, so equal versions mean
 * equal data; an action taken makes the pass copy something (another pass
 * follows and compares again).
 *
 * Nothing here waits for etcd on the loop thread: failure reports, the
 * report lease's renewal and the scan of the chunk directory run on the
 * daemon's worker thread (st->worker, its own etcd handle st->wetcd) and
 * their results come back to the loop; the volume records come from the
 * cache (loads on the cache's loader thread). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage_heal.h"
#include "storage_io.h"

#define HEAL_TICK_MS 500
#define HEAL_LEASE_TTL 10
#define HEAL_LEASE_RENEW_MS 3000
#define HEAL_PIECE (1u << 20)	/* bytes of one CHUNK_PUSH */
#define HEAL_SCAN_BATCH 64	/* chunk version lookups per loop turn */
#define HEAL_VERS_SCAN 256	/* chunks one CHUNK_VERSIONS request looks at (and warms) */
#define HEAL_REPORTS 64		/* failure reports queued for the worker at once */

/* Sequences of (volume, slice), hashed: looked up on every client write. */
#define HEAL_SEQ_BUCKETS 1024u

struct heal_seq {
	struct heal_seq *next; /* hash chain */
	uint64_t vol;
	uint32_t slice;
	uint32_t term;
	uint32_t seq; /* last sequence number handed out in term */
	uint64_t n_busy; /* entries of busy */
	uint16_t *busy;	 /* per local chunk: client writes planned, I/O not ended */
};

enum heal_phase {
	HP_IDLE,
	HP_LIST,
	HP_SCAN,
	HP_READ,
	HP_PUSH,
	HP_WAIT,
	HP_REPORT,
	HP_DONE,
};

enum heal_report_kind {
	HR_PLAIN,     /* nobody waits for the outcome */
	HR_CAUGHT_UP, /* ends a member's pass (heal_pass_end) */
	HR_SUSPECT,   /* a suspect member reported again (heal_suspect) */
};

/* A failure report on its way to etcd through the worker. */
struct heal_report {
	struct zl_work w;
	struct zl_storage_heal *h;
	enum heal_report_kind kind;
	uint64_t vol; /* HR_CAUGHT_UP, HR_SUSPECT: the member's volume */
	struct zl_report r;
	int rc; /* worker thread: the outcome */
};

struct heal_member {
	struct heal_member *next;
	struct zl_storage_heal *h;
	uint64_t vol;
	uint32_t slice;
	char node[ZL_NODE_ID_MAX];
	uint32_t n_slices;
	uint32_t chunk_size;
	uint64_t n_local; /* chunks of the slice: slice + i * n_slices */
	uint64_t *clean;  /* bit i: the member's copy of local chunk i is complete */
	uint64_t *mver;	  /* the member's versions, collected by LIST */
	/* The member's clone chunks, collected by LIST (ascending id within a
	 * chunk, chunks ascending), and the clone actions of the chunk at the
	 * cursor (acts[i_act ..] still to do). cl_cursor: cursor + 1 of the
	 * chunk whose clones this pass made equal already (0: none). */
	struct zl_storage_clone *mcl, *acts;
	uint32_t n_mcl, cap_mcl, n_acts, cap_acts, i_act;
	uint64_t cl_cursor;
	bool suspect;	  /* a forward failed while it was not OUT */
	uint64_t suspect_ver; /* row version of the last failure report sent for it */
	bool suspect_in_sync; /* seen IN_SYNC while suspect (heal_suspect) */
	uint64_t suspect_sent; /* row version of a report about it on the worker */
	bool reset;	  /* went OUT while a pass ran: forget everything at IDLE */
	char inc[ZL_META_ID_SIZE]; /* the member's incarnation its copies were compared under */
	bool copying;	  /* a copy of cur_chunk is in flight (READ/PUSH/WAIT) */
	bool cur_dirty;	  /* a write of cur_chunk was planned during its copy */
	bool cl_dirty;	  /* a write of the chunk at cl_cursor - 1 was planned since
			   * its clone plan: it may have taken a clone there */
	enum heal_phase phase;
	uint64_t row_ver; /* row version the pass runs under */
	uint64_t cursor;  /* LIST: next chunk to ask about; SCAN: next local index */
	uint64_t warm_end; /* SCAN: local chunks below it were warmed (heal_warm) */
	unsigned warming;  /* their warms still due: the member stays (member_busy) */
	uint64_t cur_chunk, cur_ver;
	uint32_t cur_off;
	uint32_t pass_pushed, pass_skipped;
	uint64_t started_ms; /* first pass since it became RECOVERING */
	uint64_t bytes, chunks;
	uint64_t done_ver;
	uint64_t next_ms; /* rate limit: earliest start of the next piece */
	/* The member's data dir was full (a piece refused NOSPC): no pass
	 * before retry_ms; room_wait_ms the wait after the next refusal. */
	uint64_t retry_ms;
	uint32_t room_wait_ms;
	struct zl_wire_hdr hdr;
	uint8_t *vbuf; /* CHUNK_VERSIONS reply payload (pool) */
	uint8_t *pbuf; /* piece being copied (pool) */
	struct zl_timer t;
	struct zl_defer d;
};

struct zl_storage_heal {
	struct zl_storage *st;
	struct heal_seq *seqs[HEAL_SEQ_BUCKETS];
	struct heal_member *members;
	uint64_t *vols; /* volumes this node serves (recovery looks at them) */
	size_t n_vols, cap_vols;
	struct zl_timer tick;
	struct heal_report reports[HEAL_REPORTS];
	struct zl_ratelimit report_rl; /* "report queue full" lines */
	/* Worker thread only (and heal_destroy, after the worker stopped): the
	 * lease the reports live on, 0 = none yet or expired. */
	int64_t lease;
	struct zl_work renew; /* keep-alive of lease */
	uint64_t renew_ms;    /* loop thread: last renewal submitted */
	/* The scan of the chunk directory: scan_vols is the worker's while
	 * scan is busy, then the loop's. */
	struct zl_work scan;
	uint64_t *scan_vols;
	size_t n_scan, cap_scan;
	uint64_t rate_next_ms; /* --recovery-mbps, for the whole daemon: end of the last reserved piece */
	/* Bytes and chunks every recovery (and backfill) job of this daemon
	 * pushed since it started: the metrics' counters, which outlive the
	 * jobs. */
	uint64_t bytes_total, chunks_total;
	/* Bytes pushed since this daemon last had no recovery job running:
	 * the progress of the jobs running now, those that finished while
	 * others ran included (zl_storage_heal_progress; 0 when none runs). */
	uint64_t run_bytes;
	bool stopping;
};

static void heal_pass_start(struct heal_member *m, uint64_t row_ver);
static void heal_scan(void *arg);

/* ---- lookups ---- */

static uint64_t vol_chunks(const struct zl_volume *v)
{
	return (v->size + v->chunk_size - 1) / v->chunk_size;
}

static uint64_t slice_chunks(const struct zl_volume *v, uint32_t slice)
{
	uint64_t n = vol_chunks(v);

	return slice < n ? (n - slice + v->n_slices - 1) / v->n_slices : 0;
}

static bool bit_get(const uint64_t *b, uint64_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bit_put(uint64_t *b, uint64_t i, bool on)
{
	if (on)
		b[i / 64] |= 1ull << (i % 64);
	else
		b[i / 64] &= ~(1ull << (i % 64));
}

static struct heal_member *member_find(struct zl_storage_heal *h, uint64_t vol, uint32_t slice,
				       const char *node)
{
	for (struct heal_member *m = h->members; m; m = m->next)
		if (m->vol == vol && m->slice == slice && !strcmp(m->node, node))
			return m;
	return NULL;
}

static struct heal_member *member_get(struct zl_storage_heal *h, const struct zl_volume *v,
				      uint32_t slice, const char *node)
{
	struct heal_member *m = member_find(h, v->num, slice, node);

	if (m)
		return m;
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->h = h;
	m->vol = v->num;
	m->slice = slice;
	snprintf(m->node, sizeof(m->node), "%s", node);
	m->n_slices = v->n_slices;
	m->chunk_size = v->chunk_size;
	m->n_local = slice_chunks(v, slice);
	m->clean = calloc((m->n_local + 63) / 64 + 1, sizeof(uint64_t));
	m->mver = calloc(m->n_local + 1, sizeof(uint64_t));
	if (!m->clean || !m->mver) {
		free(m->clean);
		free(m->mver);
		free(m);
		return NULL;
	}
	m->next = h->members;
	h->members = m;
	return m;
}

static void member_free_bufs(struct heal_member *m)
{
	struct zl_storage *st = m->h->st;

	if (m->vbuf)
		zl_xport_buf_free(st->xport, m->vbuf);
	if (m->pbuf)
		zl_xport_buf_free(st->xport, m->pbuf);
	m->vbuf = m->pbuf = NULL;
}

static bool member_busy(const struct heal_member *m)
{
	return (m->phase != HP_IDLE && m->phase != HP_DONE) || m->warming;
}

static void member_remove(struct zl_storage_heal *h, struct heal_member *m)
{
	for (struct heal_member **pp = &h->members; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	zl_timer_stop(h->st->loop, &m->t);
	zl_loop_defer_cancel(h->st->loop, &m->d);
	member_free_bufs(m);
	free(m->clean);
	free(m->mver);
	free(m->mcl);
	free(m->acts);
	free(m);
}

/* No chunk of the member is known complete. */
static void member_clean_clear(struct heal_member *m)
{
	memset(m->clean, 0, ((m->n_local + 63) / 64 + 1) * sizeof(uint64_t));
}

/* The member's copies are no longer trusted (it was OUT). */
static void member_forget(struct heal_member *m)
{
	member_clean_clear(m);
	m->suspect = false;
	m->suspect_ver = 0;
	m->suspect_in_sync = false;
	m->started_ms = 0;
	m->bytes = m->chunks = 0;
}

/* The row names another incarnation of the member than the one its copies
 * were compared under: a data dir emptied and restarted, made RECOVERING
 * again by the manager (M3) with no OUT between. Nothing known of the old
 * one counts; a running pass stops and the next one compares every chunk.
 * True when so. */
static bool member_new_inc(struct heal_member *m, const struct zl_slice *s, int i)
{
	bool had = m->inc[0];

	if (i < 0 || !strcmp(m->inc, s->incarnation[i]))
		return false;
	snprintf(m->inc, sizeof(m->inc), "%s", s->incarnation[i]);
	if (!had)
		return false;
	ZL_LOG_INFO("storage",
		    "recovery starts over: vol=%016" PRIx64 " slice=%u member=%s incarnation=%.8s "
		    "(a new data dir)",
		    m->vol, m->slice, m->node, m->inc);
	if (member_busy(m)) {
		member_clean_clear(m);
		m->reset = true;
	} else {
		member_forget(m);
		m->phase = HP_IDLE;
	}
	return true;
}

/* ---- versions (S2) ---- */

static struct heal_seq **seq_bucket(struct zl_storage_heal *h, uint64_t vol, uint32_t slice)
{
	return &h->seqs[zl_hash64(vol ^ (uint64_t)slice << 40) % HEAL_SEQ_BUCKETS];
}

static struct heal_seq *seq_find(struct zl_storage_heal *h, uint64_t vol, uint32_t slice)
{
	for (struct heal_seq *q = *seq_bucket(h, vol, slice); q; q = q->next)
		if (q->vol == vol && q->slice == slice)
			return q;
	return NULL;
}

static struct heal_seq *seq_get(struct zl_storage_heal *h, uint64_t vol, uint32_t slice)
{
	struct heal_seq **b, *q = seq_find(h, vol, slice);

	if (q)
		return q;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->vol = vol;
	q->slice = slice;
	b = seq_bucket(h, vol, slice);
	q->next = *b;
	*b = q;
	return q;
}

int zl_storage_heal_seq_set(struct zl_storage *st, uint64_t vol, uint32_t slice, uint32_t term,
			    uint32_t seq)
{
	struct heal_seq *q = seq_get(st->heal, vol, slice);

	if (!q)
		return -ENOMEM;
	q->term = term;
	q->seq = seq;
	return 0;
}

int zl_storage_heal_version_next(struct zl_storage *st, const struct zl_volume *v,
				 uint32_t slice, uint64_t *ver)
{
	struct zl_storage_heal *h = st->heal;
	const struct zl_slice *s = &v->slices[slice];
	uint32_t term = s->term ? s->term : 1;
	struct heal_seq *q = seq_get(h, v->num, slice);

	if (!q)
		return -ENOMEM;
	/* The term's first sequence is peering's (zl_storage_heal_seq_set,
	 * above the versions the members hold). A write admitted in an
	 * earlier term is answered as one arriving before the peering of
	 * this term: the client retries. */
	if (q->term != term)
		return -ZL_ERR_PEERING;
	if (q->seq == UINT32_MAX)
		return -ERANGE;
	*ver = zl_wire_dver_make(term, ++q->seq);
	return 0;
}

bool zl_storage_heal_fwd_versioned(struct zl_storage *st, const struct zl_volume *v,
				   uint32_t slice, const char *node, enum zl_member_state ms,
				   uint64_t chunk)
{
	struct heal_member *m = member_find(st->heal, v->num, slice, node);

	if (ms == ZL_MEMBER_IN_SYNC)
		return !(m && m->suspect);
	if (!m)
		m = member_get(st->heal, v, slice, node);
	if (!m || chunk / v->n_slices >= m->n_local || m->reset ||
	    member_new_inc(m, &v->slices[slice], zl_slice_index_of(&v->slices[slice], node)))
		return false;
	if (m->copying && m->cur_chunk == chunk)
		m->cur_dirty = true; /* the copy may miss it: copied again */
	if (m->cl_cursor == chunk / v->n_slices + 1)
		m->cl_dirty = true; /* its clones are compared again */
	return bit_get(m->clean, chunk / v->n_slices);
}

int zl_storage_heal_plan(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			 uint64_t chunk, bool start)
{
	struct heal_seq *q = seq_get(st->heal, v->num, slice);
	uint64_t li = chunk / v->n_slices;

	if (!q)
		return -ENOMEM;
	if (!q->busy) {
		if (!start)
			return 0;
		q->n_busy = slice_chunks(v, slice);
		q->busy = calloc(q->n_busy + 1, sizeof(*q->busy));
		if (!q->busy)
			return -ENOMEM;
	}
	if (li >= q->n_busy)
		return start ? -ENOMEM : 0;
	if (start) {
		if (q->busy[li] == UINT16_MAX)
			return -ENOMEM;
		q->busy[li]++;
	} else if (q->busy[li]) {
		q->busy[li]--;
	}
	return 0;
}

/* Whether a client write of local chunk li of the slice is on its way. */
static bool slice_chunk_busy(struct zl_storage_heal *h, uint64_t vol, uint32_t slice, uint64_t li)
{
	struct heal_seq *q = seq_find(h, vol, slice);

	return q && q->busy && li < q->n_busy && q->busy[li];
}

void zl_storage_heal_fwd_skipped(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
				 const char *node, uint64_t chunk)
{
	struct heal_member *m = member_find(st->heal, v->num, slice, node);

	if (m && chunk / v->n_slices < m->n_local)
		bit_put(m->clean, chunk / v->n_slices, false);
}

void zl_storage_heal_fwd_failed(struct zl_storage *st, const struct zl_volume *v,
				uint32_t slice, const char *node, uint64_t chunk)
{
	struct heal_member *m = member_get(st->heal, v, slice, node);
	int i = zl_slice_index_of(&v->slices[slice], node);

	if (!m)
		return;
	/* Also while RECOVERING: a CAUGHT_UP may reach the manager before the
	 * failure report (same key, the manager read the first), and the row
	 * then says IN_SYNC though the member missed this write. */
	if (i >= 0 && zl_slice_member_state(&v->slices[slice], i) != ZL_MEMBER_OUT) {
		m->suspect = true;
		m->suspect_ver = 0; /* heal_suspect reports it again at the next row */
	}
	if (chunk / v->n_slices < m->n_local)
		bit_put(m->clean, chunk / v->n_slices, false);
}

void zl_storage_heal_note_vol(struct zl_storage *st, uint64_t num)
{
	struct zl_storage_heal *h = st->heal;

	for (size_t i = 0; i < h->n_vols; i++)
		if (h->vols[i] == num)
			return;
	zl_u64_push(&h->vols, &h->n_vols, &h->cap_vols, num);
}

/* The first chunk of slice at or after `from`. */
static uint64_t vers_first(const struct zl_volume *v, uint32_t slice, uint64_t from)
{
	return from + (slice + v->n_slices - from % v->n_slices) % v->n_slices;
}

int zl_storage_heal_versions_warm(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
				  uint64_t from, zl_chunk_cb cb, void *arg)
{
	uint64_t n = vol_chunks(v), c = vers_first(v, slice, from);
	unsigned queued = 0;

	if (slice >= v->n_slices)
		return 0;
	for (uint32_t scanned = 0; c < n && scanned < HEAL_VERS_SCAN; c += v->n_slices, scanned++)
		queued += zl_chunk_snap_warm(st->chunks, v->num, c, v->chunk_size, cb, arg);
	return (int)queued;
}

int zl_storage_heal_versions(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			     uint64_t from, uint64_t above, struct zl_wire_chunk_ver *out,
			     uint32_t max, uint64_t *next)
{
	struct zl_chunk_clone cl[ZL_WIRE_VERS_MAX];
	uint64_t n = vol_chunks(v), c;
	uint32_t got = 0, scanned = 0;

	if (slice >= v->n_slices)
		return -ZL_ERR_RANGE;
	c = vers_first(v, slice, from);
	for (; c < n && got < max && scanned < HEAL_VERS_SCAN; c += v->n_slices, scanned++) {
		uint32_t ncl = zl_chunk_snap_clones(st->chunks, v->num, c, cl, ZL_WIRE_VERS_MAX);
		uint64_t cv = 0;
		int rc;

		/* A chunk's pairs stay on one page (a page holds them all when
		 * it starts with them). */
		ncl = ZL_MIN(ncl, ZL_WIRE_VERS_MAX - 1);
		if (got && got + 1 + ncl > max)
			break;
		rc = zl_chunk_version(st->chunks, v->num, c, v->chunk_size, &cv);
		if (rc)
			return rc;
		if (cv > above) {
			out[got].chunk = c;
			out[got].version = cv;
			got++;
		}
		/* Its clone chunks (docs/SNAPSHOTS.md §2), whatever `above`:
		 * recovery compares the clone sets whole. */
		for (uint32_t i = 0; i < ncl && got < max; i++) {
			out[got].chunk = zl_chunk_clone_id(c, cl[i].hi);
			rc = zl_chunk_version(st->chunks, v->num, out[got].chunk, v->chunk_size,
					      &out[got].version);
			if (rc)
				return rc;
			got++;
		}
	}
	*next = c < n ? c : 0;
	return (int)got;
}

/* ---- clone chunks (shared by recovery, peering and scrub) ---- */

uint32_t zl_storage_clone_plan(const struct zl_storage_clone *want, uint32_t n_want,
			       const struct zl_storage_clone *have, uint32_t n_have,
			       bool del_differing, struct zl_storage_clone *out)
{
	uint32_t n = 0;

	for (uint32_t j = 0; j < n_have; j++) {
		bool keep = false;

		for (uint32_t i = 0; i < n_want && !keep; i++)
			keep = want[i].id == have[j].id &&
			       (!del_differing || want[i].version == have[j].version);
		if (!keep)
			out[n++] = (struct zl_storage_clone){.id = have[j].id, .del = true};
	}
	for (uint32_t i = 0; i < n_want; i++) {
		bool same = false;

		for (uint32_t j = 0; j < n_have && !same; j++)
			same = have[j].id == want[i].id && have[j].version == want[i].version;
		if (!same)
			out[n++] = (struct zl_storage_clone){
			    .id = want[i].id, .version = want[i].version, .lo = want[i].lo};
	}
	return n;
}

int zl_storage_clones_own(struct zl_storage *st, uint64_t vol, uint64_t chunk,
			  uint32_t chunk_size, struct zl_storage_clone *out, uint32_t max,
			  uint32_t *n)
{
	struct zl_chunk_clone cl[ZL_WIRE_VERS_MAX];
	uint32_t k = zl_chunk_snap_clones(st->chunks, vol, chunk, cl, ZL_WIRE_VERS_MAX);

	k = ZL_MIN(k, ZL_MIN(max, ZL_WIRE_VERS_MAX));
	for (uint32_t i = 0; i < k; i++) {
		int rc;

		out[i] = (struct zl_storage_clone){.id = zl_chunk_clone_id(chunk, cl[i].hi),
						   .lo = cl[i].lo};
		rc = zl_chunk_version(st->chunks, vol, out[i].id, chunk_size, &out[i].version);
		if (rc)
			return rc;
	}
	*n = k;
	return 0;
}

int zl_storage_clone_listed(struct zl_storage_clone **v, uint32_t *n, uint32_t *cap,
			    uint64_t id, uint64_t version)
{
	const struct zl_storage_clone *prev = *n ? &(*v)[*n - 1] : NULL;
	uint32_t lo = 0;

	if (prev && zl_chunk_id_base(prev->id) == zl_chunk_id_base(id) && prev->id < id)
		lo = (uint32_t)(prev->id >> ZL_CHUNK_IDX_BITS);
	if (*n == *cap) {
		uint32_t nc = *cap ? 2 * *cap : 16;
		struct zl_storage_clone *p = realloc(*v, nc * sizeof(*p));

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct zl_storage_clone){.id = id, .version = version, .lo = lo};
	return 0;
}

/* ---- reports ---- */

/* Worker thread: puts the report on the daemon's report lease, granting one
 * when there is none, and a new one once when the put fails (the lease may
 * have expired). */
static void heal_report_run(struct zl_work *w)
{
	struct heal_report *hr = ZL_CONTAINER_OF(w, struct heal_report, w);
	struct zl_storage_heal *h = hr->h;
	struct zl_storage *st = h->st;
	int rc = -ZL_ERR_ETCD;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (!h->lease) {
			rc = zl_etcd_lease_grant(st->wetcd, HEAL_LEASE_TTL, &h->lease);
			if (rc) {
				h->lease = 0;
				break;
			}
		}
		rc = zl_meta_report_put(st->wetcd, st->cfg.prefix, &hr->r, h->lease);
		if (!rc)
			break;
		h->lease = 0; /* expired lease: grant a new one once */
	}
	hr->rc = rc;
}

static void heal_caught_up_done(struct zl_storage_heal *h, const struct heal_report *hr);

static void heal_report_done(struct zl_work *w)
{
	struct heal_report *hr = ZL_CONTAINER_OF(w, struct heal_report, w);
	struct zl_storage_heal *h = hr->h;
	const struct zl_report *r = &hr->r;
	struct heal_member *m;
	int rc = w->cancelled ? -ZL_ERR_CONN : hr->rc;

	if (!rc)
		ZL_LOG_INFO("storage",
			    "report put: vol=%s slice=%u peer=%s error=%s slice_ver=%" PRIu64,
			    r->vol_id, r->slice, r->peer, r->error, r->slice_ver);
	else if (!w->cancelled)
		ZL_LOG_ERR("storage",
			   "cannot put failure report: vol=%s slice=%u peer=%s error=%s err=%s (is "
			   "etcd reachable?)",
			   r->vol_id, r->slice, r->peer, r->error, zl_errname(rc));
	hr->rc = rc;
	switch (hr->kind) {
	case HR_PLAIN:
		break;
	case HR_CAUGHT_UP:
		heal_caught_up_done(h, hr);
		break;
	case HR_SUSPECT:
		m = member_find(h, hr->vol, r->slice, r->peer);
		if (m && m->suspect_sent == r->slice_ver) {
			m->suspect_sent = 0;
			if (!rc)
				m->suspect_ver = r->slice_ver;
		}
		break;
	}
}

/* Queues a report for the worker (loop thread). 0, or -ZL_ERR_BUSY when
 * HEAL_REPORTS are on their way already (logged, at most once a second). A
 * report equal to one on its way is that one. */
static int heal_report_queue(struct zl_storage *st, enum heal_report_kind kind, uint64_t vol,
			     const char *vol_id, uint32_t slice, const char *peer,
			     const char *error, uint64_t slice_ver)
{
	struct zl_storage_heal *h = st->heal;
	struct heal_report *hr = NULL;
	struct zl_report *r;

	if (!st->worker)
		return -ZL_ERR_CONN; /* shutting down (main.c) */
	for (unsigned i = 0; i < HEAL_REPORTS; i++) {
		struct heal_report *q = &h->reports[i];

		if (!q->w.busy) {
			if (!hr)
				hr = q;
			continue;
		}
		if (kind == HR_PLAIN && q->r.slice == slice && q->r.slice_ver == slice_ver &&
		    !strcmp(q->r.vol_id, vol_id) && !strcmp(q->r.peer, peer) &&
		    !strcmp(q->r.error, error))
			return 0;
	}
	if (!hr) {
		if (zl_ratelimit_ok(&h->report_rl, 1))
			ZL_LOG_ERR("storage",
				   "failure report dropped: vol=%s slice=%u peer=%s error=%s: %u "
				   "reports already wait for etcd (is etcd reachable?)",
				   vol_id, slice, peer, error, HEAL_REPORTS);
		return -ZL_ERR_BUSY;
	}
	r = &hr->r;
	memset(r, 0, sizeof(*r));
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", vol_id);
	r->slice = slice;
	snprintf(r->reporter, sizeof(r->reporter), "%s", st->cfg.node_id);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	snprintf(r->error, sizeof(r->error), "%s", error);
	r->slice_ver = slice_ver;
	r->time = (int64_t)time(NULL);
	hr->h = h;
	hr->kind = kind;
	hr->vol = vol;
	hr->rc = 0;
	return zl_worker_submit(st->worker, &hr->w, heal_report_run, heal_report_done);
}

int zl_storage_heal_report(struct zl_storage *st, const char *vol_id, uint32_t slice,
			   const char *peer, const char *error, uint64_t slice_ver)
{
	return heal_report_queue(st, HR_PLAIN, 0, vol_id, slice, peer, error, slice_ver);
}

/* Worker thread: keeps the report lease alive; forgets it when it expired
 * (the next report grants a new one). */
static void heal_renew_run(struct zl_work *w)
{
	struct zl_storage_heal *h = ZL_CONTAINER_OF(w, struct zl_storage_heal, renew);
	int64_t ttl = 0;

	if (h->lease && (zl_etcd_lease_keepalive(h->st->wetcd, h->lease, &ttl) || ttl <= 0))
		h->lease = 0;
}

static void heal_renew_done(struct zl_work *w)
{
	(void)w;
}

/* ---- recovery (S3) ---- */

static bool member_should_stop(struct heal_member *m)
{
	if (m->h->stopping || m->reset) {
		if (m->reset)
			member_forget(m);
		m->reset = false;
		m->copying = false;
		m->phase = HP_IDLE;
		member_free_bufs(m);
		return true;
	}
	return false;
}

/* First and longest wait of a member whose data dir is full. */
#define HEAL_ROOM_WAIT_MS     2000u
#define HEAL_ROOM_WAIT_MAX_MS 30000u

static void heal_pass_fail(struct heal_member *m, const char *what, int err)
{
	if (err == -ZL_ERR_NOSPC) {
		/* Its disk is full: every try would copy data only to have it
		 * refused. The member waits, longer each time, until room is
		 * made (status record disk_full, zl status). */
		m->room_wait_ms = m->room_wait_ms
				      ? ZL_MIN(2 * m->room_wait_ms, HEAL_ROOM_WAIT_MAX_MS)
				      : HEAL_ROOM_WAIT_MS;
		m->retry_ms = zl_now_ms() + m->room_wait_ms;
		ZL_LOG_WARN(
		    "storage",
		    "recovery waits for room: vol=%016" PRIx64 " slice=%u member=%s: its "
		    "data disk is full (NOSPC at %s); next try in %u s (free space on %s or "
		    "add capacity)",
		    m->vol, m->slice, m->node, what, m->room_wait_ms / 1000, m->node);
	} else {
		ZL_LOG_WARN("storage",
			    "recovery pass failed: vol=%016" PRIx64
			    " slice=%u member=%s step=%s err=%s (retried)",
			    m->vol, m->slice, m->node, what, zl_errname(err));
	}
	m->copying = false;
	m->phase = HP_IDLE;
	member_free_bufs(m);
}

static void heal_list_send(struct heal_member *m);

static void heal_list_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct heal_member *m = arg;
	struct zl_wire_chunk_ver pairs[ZL_WIRE_VERS_MAX];
	int n;

	if (member_should_stop(m))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status) {
		heal_pass_fail(m, "CHUNK_VERSIONS", status);
		return;
	}
	n = zl_wire_chunk_vers_decode(m->vbuf, rep->payload_len, pairs);
	if (n < 0) {
		heal_pass_fail(m, "CHUNK_VERSIONS", n);
		return;
	}
	for (int i = 0; i < n; i++) {
		uint64_t li = zl_chunk_id_base(pairs[i].chunk) / m->n_slices;

		if (zl_slice_of_id(pairs[i].chunk, m->n_slices) != m->slice || li >= m->n_local)
			continue;
		if (!(pairs[i].chunk >> ZL_CHUNK_IDX_BITS))
			m->mver[li] = pairs[i].version;
		else if (zl_storage_clone_listed(&m->mcl, &m->n_mcl, &m->cap_mcl, pairs[i].chunk,
						 pairs[i].version)) {
			heal_pass_fail(m, "CHUNK_VERSIONS", -ENOMEM);
			return;
		}
	}
	if (rep->aux > m->cursor) {
		m->cursor = rep->aux;
		heal_list_send(m);
		return;
	}
	m->phase = HP_SCAN;
	m->cursor = 0;
	m->warm_end = 0;
	zl_loop_defer(m->h->st->loop, &m->d, heal_scan, m);
}

static void heal_list_send(struct heal_member *m)
{
	struct zl_storage *st = m->h->st;
	int rc;

	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.opcode = ZL_OP_CHUNK_VERSIONS;
	m->hdr.vol_id = m->vol;
	m->hdr.offset = m->slice;
	m->hdr.chunk = m->cursor;
	m->hdr.slice_ver = m->row_ver;
	rc = zl_storage_fwd_request(st->fwd, m->node, &m->hdr, NULL, 0, m->vbuf,
				     ZL_WIRE_MAX_CTRL, heal_list_cb, m);
	if (rc)
		heal_pass_fail(m, "CHUNK_VERSIONS", rc);
}

static void heal_pass_start(struct heal_member *m, uint64_t row_ver)
{
	struct zl_storage *st = m->h->st;

	if (!m->vbuf)
		m->vbuf = zl_xport_buf_alloc(st->xport, ZL_WIRE_MAX_CTRL);
	if (!m->vbuf) {
		heal_pass_fail(m, "buffer", -ENOMEM);
		return;
	}
	if (!m->started_ms) {
		m->started_ms = zl_now_ms();
		ZL_LOG_INFO("storage", "recovery started: vol=%016" PRIx64 " slice=%u member=%s",
			    m->vol, m->slice, m->node);
	}
	memset(m->mver, 0, (m->n_local + 1) * sizeof(uint64_t));
	m->n_mcl = m->n_acts = m->i_act = 0;
	m->cl_cursor = 0;
	m->row_ver = row_ver;
	m->cursor = 0;
	m->pass_pushed = m->pass_skipped = 0;
	m->phase = HP_LIST;
	heal_list_send(m);
}

static void heal_piece_read(void *arg);
static void heal_clone_next(void *arg);

static void heal_wait_then(struct heal_member *m, uint32_t bytes, zl_loop_cb next)
{
	struct zl_storage *st = m->h->st;
	uint64_t now = zl_now_ms(), cost;

	/* bits / (mbps * 1000) = milliseconds. The budget is the daemon's, shared
	 * by every recovery job (all slices, all members), so client I/O keeps its
	 * share however many slices recover at once. A piece waits for its turn
	 * before it is read (next: heal_piece_read), so a recovery starting on
	 * many slices does not copy a chunk of each at once. */
	cost = (uint64_t)bytes * 8 / ((uint64_t)st->cfg.recovery_mbps * 1000);
	m->h->rate_next_ms = ZL_MAX(m->h->rate_next_ms, now) + cost;
	m->next_ms = m->h->rate_next_ms;
	m->phase = HP_WAIT;
	if (m->next_ms <= now)
		zl_loop_defer(st->loop, &m->d, next, m);
	else
		zl_timer_start(st->loop, &m->t, m->next_ms - now, 0, next, m);
}

static void heal_push_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct heal_member *m = arg;
	uint32_t len = ZL_MIN(HEAL_PIECE, m->chunk_size - m->cur_off);

	if (member_should_stop(m))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status == -ZL_ERR_CONFLICT) {
		/* The member's copy changed under the copy (or equals ours now):
		 * left for the next pass. */
		m->copying = false;
		m->n_acts = m->i_act = 0;
		m->pass_skipped++;
		m->cursor++;
		m->phase = HP_SCAN;
		zl_loop_defer(m->h->st->loop, &m->d, heal_scan, m);
		return;
	}
	if (status) {
		heal_pass_fail(m, "CHUNK_PUSH", status);
		return;
	}
	m->bytes += len;
	m->h->bytes_total += len;
	m->h->run_bytes += len;
	m->cur_off += len;
	if (m->cur_off < m->chunk_size) {
		heal_wait_then(m, ZL_MIN(HEAL_PIECE, m->chunk_size - m->cur_off), heal_piece_read);
		return;
	}
	if (m->cur_chunk >> ZL_CHUNK_IDX_BITS) {
		/* A clone copied: the chunk's next clone action. */
		m->chunks++;
		m->pass_pushed++;
		m->i_act++;
		m->phase = HP_SCAN;
		zl_loop_defer(m->h->st->loop, &m->d, heal_clone_next, m);
		return;
	}
	/* No client write of the chunk was on its way when the copy started nor
	 * planned since: the member's copy equals ours at cur_ver, and the
	 * writes planned from now on carry their versions to it. */
	m->copying = false;
	if (!m->cur_dirty && !m->cl_dirty)
		bit_put(m->clean, m->cursor, true);
	m->chunks++;
	m->h->chunks_total++;
	m->pass_pushed++;
	m->cursor++;
	m->phase = HP_SCAN;
	zl_loop_defer(m->h->st->loop, &m->d, heal_scan, m);
}

static void heal_read_cb(void *arg, int status)
{
	struct heal_member *m = arg;
	struct zl_storage *st = m->h->st;
	uint32_t len = ZL_MIN(HEAL_PIECE, m->chunk_size - m->cur_off);
	int rc;

	if (member_should_stop(m))
		return;
	if (status) {
		heal_pass_fail(m, "read", status);
		return;
	}
	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.opcode = ZL_OP_CHUNK_PUSH;
	m->hdr.vol_id = m->vol;
	m->hdr.chunk = m->cur_chunk;
	m->hdr.offset = m->cur_off;
	m->hdr.length = len;
	m->hdr.slice_ver = m->row_ver;
	m->hdr.aux = m->cur_ver;
	m->hdr.subop = ZL_PUSH_REPLACE;
	if (m->cur_chunk >> ZL_CHUNK_IDX_BITS) { /* a clone: its lo goes along */
		m->hdr.flags = ZL_WF_SEQ;
		m->hdr.snap_seq = m->acts[m->i_act].lo;
	}
	m->phase = HP_PUSH;
	rc = zl_storage_fwd_request(st->fwd, m->node, &m->hdr, m->pbuf, len, NULL, 0,
				     heal_push_cb, m);
	if (rc)
		heal_pass_fail(m, "CHUNK_PUSH", rc);
}

static void heal_piece_read(void *arg)
{
	struct heal_member *m = arg;
	struct zl_storage *st = m->h->st;
	uint32_t len = ZL_MIN(HEAL_PIECE, m->chunk_size - m->cur_off);
	int rc;

	if (member_should_stop(m))
		return;
	if (!m->pbuf)
		m->pbuf = zl_xport_buf_alloc(st->xport, HEAL_PIECE);
	if (!m->pbuf) {
		heal_pass_fail(m, "buffer", -ENOMEM);
		return;
	}
	m->phase = HP_READ;
	rc = zl_chunk_read(st->chunks, m->vol, m->cur_chunk, m->chunk_size, m->cur_off, len,
			   m->pbuf, heal_read_cb, m);
	if (rc)
		heal_pass_fail(m, "read", rc);
}

/* End of a pass: caught up when nothing was copied, else another pass. */
static void heal_pass_end(struct heal_member *m)
{
	struct zl_storage *st = m->h->st;
	char vid[ZL_VOL_ID_LEN + 1];
	struct zl_storage_vol *sv;
	const struct zl_slice *s;
	int i;

	member_free_bufs(m);
	if (zl_storage_vol_lookup(st->vols, m->vol, &sv) || m->slice >= sv->v.n_slices) {
		m->phase = HP_IDLE;
		return;
	}
	s = &sv->v.slices[m->slice];
	i = zl_slice_index_of(s, m->node);
	if (i < 0 || zl_slice_member_state(s, i) != ZL_MEMBER_RECOVERING ||
	    zl_slice_index_of(s, st->cfg.node_id) != zl_slice_primary(s)) {
		m->phase = HP_IDLE;
		return;
	}
	if (m->pass_pushed) {
		heal_pass_start(m, s->version);
		return;
	}
	if (m->pass_skipped) {
		/* A copy the member refused (its copy changed meanwhile): the
		 * next tick starts another pass. */
		m->phase = HP_IDLE;
		return;
	}
	zl_vol_id_format(m->vol, vid);
	m->done_ver = s->version;
	m->phase = HP_REPORT;
	if (heal_report_queue(st, HR_CAUGHT_UP, m->vol, vid, m->slice, m->node, "CAUGHT_UP",
			      s->version))
		m->phase = HP_IDLE;
}

/* The CAUGHT_UP report of a pass came back: the member is DONE at that row
 * version, or a next tick starts another pass. */
static void heal_caught_up_done(struct zl_storage_heal *h, const struct heal_report *hr)
{
	struct heal_member *m = member_find(h, hr->vol, hr->r.slice, hr->r.peer);

	if (!m || m->phase != HP_REPORT || m->done_ver != hr->r.slice_ver ||
	    member_should_stop(m))
		return;
	if (hr->rc) {
		m->phase = HP_IDLE;
		return;
	}
	ZL_LOG_INFO("storage",
		    "recovery caught up: vol=%s slice=%u member=%s chunks_copied=%" PRIu64
		    " bytes_copied=%" PRIu64 " ms=%" PRIu64 " slice_ver=%" PRIu64,
		    hr->r.vol_id, m->slice, m->node, m->chunks, m->bytes,
		    zl_now_ms() - m->started_ms, m->done_ver);
	m->phase = HP_DONE;
	m->room_wait_ms = 0;
}

/* The clone actions that make the member's clones of chunk equal to ours
 * (m->acts: deletions first, then copies; a clone it holds at another
 * version is replaced by the copy, the member not being IN_SYNC). 0 or an
 * error. */
static int heal_clone_plan(struct heal_member *m, uint64_t chunk)
{
	struct zl_storage *st = m->h->st;
	struct zl_storage_clone own[ZL_WIRE_VERS_MAX];
	uint32_t first = 0, n_mine = 0, n_own;
	int rc;

	m->n_acts = m->i_act = 0;
	rc = zl_storage_clones_own(st, m->vol, chunk, m->chunk_size, own, ZL_WIRE_VERS_MAX, &n_own);
	if (rc)
		return rc;
	/* The member's clones of chunk: a run of m->mcl. */
	while (first < m->n_mcl && zl_chunk_id_base(m->mcl[first].id) != chunk)
		first++;
	while (first + n_mine < m->n_mcl && zl_chunk_id_base(m->mcl[first + n_mine].id) == chunk)
		n_mine++;
	if (!n_own && !n_mine)
		return 0;
	if (m->cap_acts < n_own + n_mine) {
		struct zl_storage_clone *p = realloc(m->acts, (n_own + n_mine) * sizeof(*p));

		if (!p)
			return -ENOMEM;
		m->acts = p;
		m->cap_acts = n_own + n_mine;
	}
	m->n_acts = zl_storage_clone_plan(own, n_own, n_mine ? m->mcl + first : NULL, n_mine, false,
					  m->acts);
	return 0;
}

static void heal_clone_del_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct heal_member *m = arg;

	if (member_should_stop(m))
		return;
	if (!status)
		status = zl_wire_status_to_err(rep->status);
	if (status) {
		heal_pass_fail(m, "CHUNK_DELETE of a clone", status);
		return;
	}
	ZL_LOG_INFO("storage",
		    "recovery removed a clone chunk our copy does not hold: vol=%016" PRIx64
		    " chunk=%016" PRIx64 " member=%s",
		    m->vol, m->acts[m->i_act].id, m->node);
	m->pass_pushed++;
	m->i_act++;
	heal_clone_next(m);
}

/* The next clone action of the chunk at the cursor; when none is left, the
 * chunk itself is compared (heal_scan). */
static void heal_clone_next(void *arg)
{
	struct heal_member *m = arg;
	struct zl_storage *st = m->h->st;
	const struct zl_storage_clone *a;
	int rc;

	if (member_should_stop(m))
		return;
	if (m->i_act >= m->n_acts) {
		m->n_acts = m->i_act = 0;
		heal_scan(m);
		return;
	}
	a = &m->acts[m->i_act];
	if (!a->del) {
		m->cur_chunk = a->id;
		m->cur_ver = a->version;
		m->cur_off = 0;
		m->copying = false; /* forwards never name a clone id */
		heal_wait_then(m, ZL_MIN(HEAL_PIECE, m->chunk_size), heal_piece_read);
		return;
	}
	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.opcode = ZL_OP_CHUNK_DELETE;
	m->hdr.vol_id = m->vol;
	m->hdr.chunk = a->id;
	m->phase = HP_PUSH;
	rc = zl_storage_fwd_request(st->fwd, m->node, &m->hdr, NULL, 0, NULL, 0,
				     heal_clone_del_cb, m);
	if (rc)
		heal_pass_fail(m, "CHUNK_DELETE of a clone", rc);
}

static void heal_warm_cb(void *arg, int status)
{
	struct heal_member *m = arg;

	(void)status; /* the version look-up that follows says what failed */
	m->warming--;
	if (member_should_stop(m) || m->warming || m->phase != HP_SCAN)
		return;
	zl_loop_defer(m->h->st->loop, &m->d, heal_scan, m);
}

/* Opens the next batch of local chunks from the cursor on the store's open
 * workers, so the scan's version look-ups answer from memory instead of
 * reading chunk files on the loop. True: heal_scan runs again when they
 * are open. */
static bool heal_warm(struct heal_member *m)
{
	struct zl_storage *st = m->h->st;
	uint64_t end = ZL_MIN(m->cursor + HEAL_SCAN_BATCH, m->n_local);

	for (uint64_t i = m->cursor; i < end; i++)
		if (!bit_get(m->clean, i))
			m->warming +=
			    zl_chunk_snap_warm(st->chunks, m->vol, m->slice + i * m->n_slices,
					       m->chunk_size, heal_warm_cb, m);
	m->warm_end = end;
	return m->warming > 0;
}

static void heal_scan(void *arg)
{
	struct heal_member *m = arg;
	struct zl_storage *st = m->h->st;

	if (member_should_stop(m))
		return;
	m->phase = HP_SCAN;
	if (m->cursor >= m->warm_end && heal_warm(m))
		return;
	for (unsigned n = 0; n < HEAL_SCAN_BATCH && m->cursor < m->warm_end; n++) {
		uint64_t chunk = m->slice + m->cursor * m->n_slices, own = 0;
		int rc;

		if (bit_get(m->clean, m->cursor)) {
			/* Known complete: forwarded writes keep it in step (a
			 * failed one clears the bit); its version as listed may
			 * lag writes on their way. */
			m->cursor++;
			continue;
		}
		rc = zl_chunk_version(st->chunks, m->vol, chunk, m->chunk_size, &own);
		if (rc) {
			heal_pass_fail(m, "chunk version", rc);
			return;
		}
		if (m->cl_cursor != m->cursor + 1) {
			/* First its clones, once per pass. */
			rc = heal_clone_plan(m, chunk);
			if (rc) {
				heal_pass_fail(m, "clone versions", rc);
				return;
			}
			m->cl_cursor = m->cursor + 1;
			m->cl_dirty = false;
			if (m->n_acts && slice_chunk_busy(m->h, m->vol, m->slice, m->cursor)) {
				/* A write of it may be taking a clone: later. */
				m->n_acts = 0;
				m->pass_skipped++;
				m->cursor++;
				continue;
			}
			if (m->n_acts) {
				heal_clone_next(m);
				return;
			}
		}
		if (slice_chunk_busy(m->h, m->vol, m->slice, m->cursor)) {
			/* A write of it is on its way: its data may miss the
			 * pieces while its version is already ours, and, with
			 * versions equal now, its forward (planned before the
			 * chunk was complete: without a version) would land
			 * after the mark and leave the member's version behind
			 * its data. Later. */
			m->pass_skipped++;
			m->cursor++;
			continue;
		}
		if (m->mver[m->cursor] != own) {
			/* Older, missing or newer than ours: the member gets our
			 * copy (ZL_PUSH_REPLACE: a newer one is rolled back). */
			if (m->mver[m->cursor] > own)
				ZL_LOG_INFO("storage",
					    "recovery rolls back a newer copy: vol=%016" PRIx64
					    " chunk=%" PRIu64 " member=%s member_version=%" PRIx64
					    " primary_version=%" PRIx64,
					    m->vol, chunk, m->node, m->mver[m->cursor], own);
			m->cur_chunk = chunk;
			m->cur_ver = own; /* read before the data: the copy is never labelled newer */
			m->cur_off = 0;
			m->copying = true;
			m->cur_dirty = false;
			heal_wait_then(m, ZL_MIN(HEAL_PIECE, m->chunk_size), heal_piece_read);
			return;
		}
		if (m->cl_dirty) {
			/* Written while its clones were made equal: the write
			 * may have taken a clone on the member from its older
			 * copy. Compared again by the next pass. */
			m->pass_skipped++;
			m->cursor++;
			continue;
		}
		bit_put(m->clean, m->cursor, true);
		m->cursor++;
	}
	if (m->cursor < m->n_local) {
		zl_loop_defer(st->loop, &m->d, heal_scan, m);
		return;
	}
	heal_pass_end(m);
}

/* An IN_SYNC member a forward failed to may lack an acknowledged write
 * (it gets version-0 forwards meanwhile, so its chunk versions show it).
 * Only the manager may take it out (rule M5 on the primary's report), and
 * its report is dropped as stale when the row moved on before it was read
 * (a CAUGHT_UP racing with the failure, or another member's change). So
 * while the member is still IN_SYNC in a newer row than the last report,
 * the failure is reported again at that row: M5 sets it OUT, member_forget
 * clears suspect, and it comes back through recovery (full version
 * compare). A suspect member is never silently trusted again. */
static void heal_suspect(struct zl_storage_heal *h, const struct zl_volume *v, uint32_t slice,
			 struct heal_member *m)
{
	const struct zl_slice *s = &v->slices[slice];
	char vid[ZL_VOL_ID_LEN + 1];

	m->suspect_in_sync = true;
	if (s->version <= m->suspect_ver || s->version == m->suspect_sent)
		return;
	zl_vol_id_format(v->num, vid);
	ZL_LOG_WARN("storage",
		    "member still in sync after a failed forward: vol=%s slice=%u member=%s "
		    "row_ver=%" PRIu64 ": reporting it again",
		    vid, slice, m->node, s->version);
	if (!heal_report_queue(h->st, HR_SUSPECT, v->num, vid, slice, m->node, "ZL_ERR_CONN",
			       s->version))
		m->suspect_sent = s->version;
}

/* Looks at one slice this node may be primary of. */
static void heal_slice(struct zl_storage_heal *h, const struct zl_volume *v, uint32_t slice)
{
	struct zl_storage *st = h->st;
	const struct zl_slice *s = &v->slices[slice];
	int me = zl_slice_index_of(s, st->cfg.node_id);
	bool primary = me >= 0 && me == zl_slice_primary(s);

	/* A primary copies nothing before it peered: its own copies may be
	 * behind the winning ones. */
	if (primary && zl_storage_peering_ready(st, v, slice))
		return;
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		struct heal_member *m = member_find(h, v->num, slice, s->nodes[i]);
		enum zl_member_state ms = zl_slice_member_state(s, i);

		if (i == me)
			continue;
		if (m)
			member_new_inc(m, s, i);
		if (!primary) {
			if (m && !member_busy(m))
				member_remove(h, m);
			else if (m)
				m->reset = true;
			continue;
		}
		switch (ms) {
		case ZL_MEMBER_IN_SYNC:
			if (m && m->suspect)
				heal_suspect(h, v, slice, m);
			else if (m && !member_busy(m))
				member_remove(h, m);
			break;
		case ZL_MEMBER_OUT:
			if (m && member_busy(m))
				m->reset = true;
			else if (m)
				member_forget(m), m->phase = HP_IDLE;
			break;
		case ZL_MEMBER_RECOVERING:
			if (!m) {
				m = member_get(h, v, slice, s->nodes[i]);
				if (m)
					member_new_inc(m, s, i);
			}
			if (!m)
				break;
			if (m->suspect_in_sync || (m->suspect && m->phase == HP_IDLE)) {
				/* IN_SYNC -> RECOVERING: it went OUT (M5 on our
				 * report) or M3 between two looks; what OUT does.
				 * So does a pass about to start after a failed
				 * forward (an OUT this look missed: the manager
				 * may set OUT, then RECOVERING within a tick): the
				 * pass compares every chunk, so its CAUGHT_UP
				 * covers the failure and the member is no longer
				 * suspect once IN_SYNC. A failure during a pass
				 * keeps it suspect (heal_suspect). */
				if (member_busy(m)) {
					m->reset = true;
					break;
				}
				member_forget(m);
				m->phase = HP_IDLE;
			}
			if (m->phase == HP_DONE && m->done_ver != s->version)
				m->phase = HP_IDLE;
			if (m->phase == HP_IDLE && zl_now_ms() >= m->retry_ms)
				heal_pass_start(m, s->version);
			break;
		}
	}
}

/* Worker thread: the volumes with chunk files here (zl_chunk_volume_foreach
 * reads the chunk directory only, no state of the store). */
static int heal_scan_collect(void *arg, uint64_t vol)
{
	struct zl_storage_heal *h = arg;

	return zl_u64_push(&h->scan_vols, &h->n_scan, &h->cap_scan, vol);
}

static void heal_scan_run(struct zl_work *w)
{
	struct zl_storage_heal *h = ZL_CONTAINER_OF(w, struct zl_storage_heal, scan);

	h->n_scan = 0;
	zl_chunk_volume_foreach(h->st->chunks, heal_scan_collect, h);
}

static void heal_scan_done(struct zl_work *w)
{
	struct zl_storage_heal *h = ZL_CONTAINER_OF(w, struct zl_storage_heal, scan);

	for (size_t i = 0; i < h->n_scan && !w->cancelled; i++)
		zl_storage_heal_note_vol(h->st, h->scan_vols[i]);
}

/* Members no longer in their row (replaced, moved, dropped): their jobs go.
 * What recovery knew of such a member's copies does not hold when it joins
 * the row again (writes meanwhile were not forwarded to it). */
static void heal_drop_gone(struct zl_storage_heal *h)
{
	struct heal_member *m = h->members, *next;

	for (; m; m = next) {
		struct zl_storage_vol *sv = zl_storage_vol_peek(h->st->vols, m->vol);

		next = m->next;
		/* Not cached: looked at once it is, loaded for other reasons
		 * (no load for this look). */
		if (!sv)
			continue;
		if (m->slice < sv->v.n_slices &&
		    zl_slice_index_of(&sv->v.slices[m->slice], m->node) >= 0)
			continue;
		if (!member_busy(m)) {
			member_remove(h, m);
		} else {
			member_clean_clear(m);
			m->reset = true;
		}
	}
}

static void heal_tick(void *arg)
{
	struct zl_storage_heal *h = arg;
	struct zl_storage *st = h->st;

	if (h->stopping)
		return;
	if (zl_now_ms() - h->renew_ms >= HEAL_LEASE_RENEW_MS &&
	    !zl_worker_submit(st->worker, &h->renew, heal_renew_run, heal_renew_done))
		h->renew_ms = zl_now_ms();
	/* The volumes found now are looked at from the next tick on. */
	zl_worker_submit(st->worker, &h->scan, heal_scan_run, heal_scan_done);
	for (size_t i = 0; i < h->n_vols; i++) {
		struct zl_storage_vol *sv;

		/* Not cached: loaded on the cache's loader thread, looked at
		 * from a next tick on. */
		if (zl_storage_vol_lookup(st->vols, h->vols[i], &sv))
			continue;
		for (uint32_t s = 0; s < sv->v.n_slices; s++)
			heal_slice(h, &sv->v, s);
	}
	heal_drop_gone(h);
}

/* A watched record (storage_vol.c): a row this node leads with a member
 * being recovered is noted, so a volume nobody wrote or read here since
 * start-up (no chunk, no request: a rebalance of an empty volume) is
 * looked at by the next ticks too, and its members finish. */
static void heal_on_watch(void *arg, const struct zl_volume *v)
{
	struct zl_storage *st = arg;

	for (uint32_t s = 0; v->slices && s < v->n_slices; s++) {
		const struct zl_slice *sl = &v->slices[s];
		int me = zl_slice_index_of(sl, st->cfg.node_id);

		if (me < 0 || zl_slice_primary(sl) != me)
			continue;
		for (int i = 0; i < sl->n; i++) {
			if (zl_slice_member_state(sl, i) == ZL_MEMBER_RECOVERING) {
				zl_storage_heal_note_vol(st, v->num);
				return;
			}
		}
	}
}

int zl_storage_heal_start(struct zl_storage *st)
{
	struct zl_storage_heal *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->st = st;
	if (zl_storage_peering_create(st)) {
		free(h);
		return -ENOMEM;
	}
	st->heal = h;
	zl_storage_vols_on_watch(st->vols, heal_on_watch, st);
	zl_timer_start(st->loop, &h->tick, HEAL_TICK_MS, HEAL_TICK_MS, heal_tick, h);
	ZL_LOG_INFO("storage", "healing on: repl_wait_ms=%u recovery_mbps=%u", st->cfg.repl_wait_ms,
		    st->cfg.recovery_mbps);
	return 0;
}

void zl_storage_heal_stop(struct zl_storage *st)
{
	struct zl_storage_heal *h = st->heal;

	if (!h)
		return;
	h->stopping = true;
	zl_storage_vols_on_watch(st->vols, NULL, NULL);
	zl_storage_peering_stop(st);
	zl_timer_stop(st->loop, &h->tick);
	for (struct heal_member *m = h->members; m; m = m->next) {
		zl_timer_stop(st->loop, &m->t);
		zl_loop_defer_cancel(st->loop, &m->d);
		if (m->phase == HP_WAIT || m->phase == HP_SCAN)
			m->phase = HP_IDLE;
	}
}

void zl_storage_heal_destroy(struct zl_storage *st)
{
	struct zl_storage_heal *h = st->heal;

	if (!h)
		return;
	zl_storage_heal_stop(st);
	/* The worker is gone (main.c): the lease is ours now. */
	if (h->lease)
		zl_etcd_lease_revoke(st->wetcd, h->lease);
	while (h->members)
		member_remove(h, h->members);
	for (uint32_t i = 0; i < HEAL_SEQ_BUCKETS; i++) {
		while (h->seqs[i]) {
			struct heal_seq *q = h->seqs[i];

			h->seqs[i] = q->next;
			free(q->busy);
			free(q);
		}
	}
	free(h->vols);
	free(h->scan_vols);
	free(h);
	st->heal = NULL;
	zl_storage_peering_destroy(st);
}

/* ---- progress, for zl status (storage_status.c) ---- */

void zl_storage_heal_progress(struct zl_storage *st, struct zl_storage_heal_progress *out)
{
	memset(out, 0, sizeof(*out));
	if (!st->heal)
		return;
	out->bytes_total = st->heal->bytes_total;
	out->chunks_total = st->heal->chunks_total;
	for (struct heal_member *m = st->heal->members; m; m = m->next) {
		uint64_t clean = 0;

		if (!member_busy(m))
			continue;
		for (uint64_t w = 0; w < (m->n_local + 63) / 64; w++)
			clean += (uint64_t)__builtin_popcountll(m->clean[w]);
		out->members++;
		out->bytes_left += (m->n_local - ZL_MIN(clean, m->n_local)) * m->chunk_size;
	}
	/* A recovery's progress, also when each job is one chunk and ends
	 * (its member dropped) right after its copy; a new run starts at 0. */
	if (!out->members)
		st->heal->run_bytes = 0;
	out->bytes_done = st->heal->run_bytes;
}
