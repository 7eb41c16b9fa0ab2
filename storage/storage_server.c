/* Request handling of zipline-storage (docs/PROTOCOL-NOTES.md): checks of
 * volume, range, slice version, attach epoch and role, then the chunk store;
 * writes on a primary are forwarded to the in-sync backups in parallel and
 * acknowledged when all of them are durable, or after the failed ones were
 * dropped from the slice's in-sync set in etcd.
 *
 * With --heal=on (contract S1/S2): the primary numbers each write with a
 * data version, forwards to IN_SYNC and RECOVERING members, never drops
 * anyone: a failed member gets a failure report, and a write whose IN_SYNC
 * backup failed is parked until the row no longer counts that member IN_SYNC
 * (the manager's answer), bounded by --repl-wait. CHUNK_VERSIONS and
 * CHUNK_PUSH serve the recovery of storage_heal.c and the peering of
 * storage_peering.c. Client I/O is served by the row's primary only (a READ
 * elsewhere: ZL_ERR_NOT_PRIMARY), and only once it peered in the row's
 * term: before that a request is held up to HOLD_MAX_MS, then answered
 * ZL_ERR_PEERING (the client retries). READ with ZL_WF_ANY is served by any
 * node that knows the volume, from its own copy, with the copy's chunk
 * version in the reply's aux (peering's pulls, scrub, verify).
 *
 * Request state (struct storage_req), one per request that outlives
 * on_request:
 *   fetch    payload (write data, HELLO) moving into our buffer
 *   exec     local chunk I/O and forwarded REPL_WRITEs in flight (pending)
 *   finish   all done: drop failed backups (blocking etcd), reply
 *   parked   (heal) waiting on st->parked for a row change, then reply
 *   held     (heal) waiting on st->held for its slice to peer, then exec
 *   sent     READ/HELLO data being sent; freed by the sent callback
 *
 * A REPL_WRITE on a backup also has an order state (enum srv_ord): from its
 * arrival until its chunk I/O is submitted it waits in its chunk's order
 * queue, and goes to the chunk store only after every write of the chunk
 * that precedes it (lower data version, else earlier arrival) went there.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_ctl.h"
#include "storage_fair.h"
#include "storage_heal.h"
#include "storage_io.h"

#define REQ_SLAB 128u

/* REPL_WRITE order queues (REPLICATION.md §1): hash buckets of (volume,
 * chunk), and the writes one chunk may have queued at once (a primary's
 * connection carries at most 256 requests: more is a primary gone wrong). */
#define ORD_BUCKETS   1024u
#define ORD_CHUNK_MAX 256u
/* Block CRCs kept inside a request (64 KiB of data); more take a pool buffer. */
#define SRV_CRCS_SMALL 16u

/* Order state of a REPL_WRITE on a backup. */
enum srv_ord {
	ORD_NONE = 0, /* not in an order queue (not a REPL_WRITE, or done) */
	ORD_WAIT,     /* queued; its data or its checks are not ready yet */
	ORD_READY,    /* queued, ready; waits for the writes of its chunk before it */
	ORD_BUSY,     /* submitted to the chunk store; in the queue until freed */
};

/* The REPL_WRITEs of one bucket in queue order (per chunk: the order they
 * go to the chunk store). */
struct srv_ordq {
	struct storage_req *head, *tail;
};

struct zl_storage_ord {
	struct srv_ordq q[ORD_BUCKETS];
	/* A primary's writes whose forwards wait for its own write
	 * (srv_late_add), per chunk in numbering order. */
	struct srv_ordq late[ORD_BUCKETS];
	uint64_t waited;   /* REPL_WRITEs that were ready and waited for a predecessor */
	uint64_t refused;  /* answered CONFLICT (older than a write in flight) or BUSY (full) */
	struct zl_ratelimit refused_rl; /* their log lines */
};

struct storage_bk {
	struct storage_req *r;
	char node[ZL_NODE_ID_MAX];
	int status;
	bool in_sync; /* IN_SYNC when forwarded (heal): its failure holds the ack */
	bool versioned; /* heal: forwarded with the write's data version, else 0 */
	uint64_t dver; /* data version forwarded (heal) */
	uint64_t rep_ver; /* slice version in its reply (a STALE tells why) */
	uint64_t fence;	  /* STALE: the epoch fence the backup enforces (its reply's aux) */
	uint64_t sent_ns; /* zl_now_ns when forwarded (the forward latency metric) */
	struct zl_wire_hdr hdr;
};

struct storage_req {
	struct zl_storage *st;
	struct zl_xport_conn *conn; /* referenced */
	struct zl_wire_hdr req;
	uint64_t vh; /* zl_hash64(req.vol_id): its look-ups and fair-share flow */
	uint8_t op;   /* effective opcode (REPL_WRITE: its aux) */
	uint8_t *buf; /* pool buffer */
	uint32_t chunk_size;
	uint32_t slice;
	uint64_t seen_ver;
	uint32_t pending;
	int local_err;
	uint64_t dver;	      /* data version of this write (heal), 0 without */
	uint64_t deadline_ms; /* parked / held: when to give up */
	uint64_t t0_ns;	      /* arrival (metrics: latency to the answer) */
	bool failed;	      /* answered with an error, or not at all */
	bool nocount;	      /* answered by another context (metrics count that one) */
	unsigned warming;     /* chunk opens it waits for (srv_warm) */
	bool warmed;	      /* they ended: it does not wait for opens again */
	void (*warm_resume)(struct storage_req *r); /* run when they ended */
	bool held;	      /* waits for peering or a volume load before it runs */
	bool loadwait;	      /* held for a volume load: slice, chunk_size unknown */
	bool hold_load;	      /* held now for a load (counted in st->n_held_load) */
	bool planned;	      /* counted by zl_storage_heal_plan until its I/O ends */
	uint64_t fenced;      /* REPL_WRITE of a fenced epoch: our fence (applied, STALE) */
	struct storage_req *park_next;
	struct storage_req *ord_prev, *ord_next; /* order queue (REPL_WRITE) */
	uint8_t ord;			       /* enum srv_ord */
	uint8_t n_bk;
	uint8_t bk_init; /* bk[0, bk_init) zeroed (srv_bk_add) */
	/* The CRC32C of each 4 KiB block of buf (a block-aligned WRITE,
	 * REPL_WRITE or READ): computed once, when the payload arrives or the
	 * blocks are verified, then kept by the chunk store, carried by the
	 * forwards and the reply (srv_crcs). crcs_small or a pool buffer. */
	uint32_t *crcs;
	/* Its disk operation's admission (storage_fair.c): READ, WRITE,
	 * WRITE_ZEROES, DISCARD and REPL_WRITE. */
	struct zl_storage_fair_item fair;
	/* A write carrying ZL_WF_SEQ goes to the chunk store as this
	 * copy-on-write (srv_write_disk); cow_snap is the one snapshot it
	 * needs to know of (srv_cow_snap). */
	bool cowed;
	/* Its forwards wait for its own write (srv_write_disk: our data dir
	 * is near full), in its chunk's late queue (srv_late_add). */
	bool fwd_late;
	/* req_alloc zeroes the fields above; the ones below are set before
	 * they are read: bk by srv_bk_add, cow and cow_snap by srv_cow_submit,
	 * small and crcs_small when filled. */
	struct storage_bk bk[ZL_MAX_REPLICAS - 1];
	struct zl_chunk_cow cow;
	uint32_t cow_snap;
	uint8_t small[ZL_WIRE_HELLO_SIZE];
	uint32_t crcs_small[SRV_CRCS_SMALL];
};

/* Room for the block CRCs of r's data (offset, length), or NULL when they
 * are not whole blocks (or no buffer is free: the CRCs are then computed
 * where needed, as before). */
static uint32_t *srv_crcs(struct storage_req *r, uint64_t off, uint32_t len)
{
	uint32_t n = len / ZL_BLOCK_SIZE;

	if (!len || off % ZL_BLOCK_SIZE || len % ZL_BLOCK_SIZE)
		return NULL;
	if (n <= SRV_CRCS_SMALL)
		r->crcs = r->crcs_small;
	else
		r->crcs = zl_xport_buf_alloc(r->st->xport, ZL_ALIGN_UP(n * 4u, ZL_BLOCK_SIZE));
	return r->crcs;
}

/* ---- contexts ---- */

/* A context for request h (vh: zl_hash64 of its volume number). */
static struct storage_req *req_alloc(struct zl_storage *st, struct zl_xport_conn *c,
				     const struct zl_wire_hdr *h, uint64_t vh)
{
	struct storage_req *r = zl_slab_alloc(&st->reqs);

	if (!r)
		return NULL;
	memset(r, 0, offsetof(struct storage_req, bk));
	r->st = st;
	r->conn = c;
	zl_xport_conn_get(c);
	r->req = *h;
	r->vh = vh;
	r->op = (uint8_t)zl_wire_repl_op(h);
	r->t0_ns = zl_now_ns();
	st->inflight++;
	return r;
}

/* The write of r (planned by srv_plan) no longer moves data: recovery may
 * copy its chunk again (zl_storage_heal_plan). */
static void srv_unplan(struct storage_req *r)
{
	struct zl_storage_vol *sv;

	if (!r->planned)
		return;
	r->planned = false;
	if (!zl_storage_vol_lookup(r->st->vols, r->req.vol_id, &sv) && r->slice < sv->v.n_slices)
		zl_storage_heal_plan(r->st, &sv->v, r->slice, r->req.chunk, false);
}

static void srv_ord_del(struct storage_req *r);

/* Counts r as it ends (metrics, storage_metrics.c): by opcode, its data
 * and latency; a client's data request also on its volume. Loop thread,
 * plain counters. */
static void srv_account(struct storage_req *r)
{
	struct zl_storage_reqstats *rs = &r->st->rs;
	const struct zl_wire_hdr *h = &r->req;
	unsigned op = h->opcode <= ZL_OP_MAX_ ? h->opcode : 0;
	uint64_t ns = zl_now_ns() - r->t0_ns;
	struct zl_storage_vol *sv;
	int w;

	if (r->nocount)
		return;
	rs->n[op]++;
	if (!r->failed && (op == ZL_OP_READ || op == ZL_OP_WRITE || op == ZL_OP_REPL_WRITE))
		rs->bytes[op] += h->length;
	zl_metrics_hist_add(&rs->lat[op], ns);
	if (r->failed || (op != ZL_OP_READ && op != ZL_OP_WRITE && op != ZL_OP_WRITE_ZEROES &&
			  op != ZL_OP_DISCARD))
		return;
	sv = zl_storage_vol_peek_h(r->st->vols, h->vol_id, r->vh);
	if (!sv)
		return;
	w = op != ZL_OP_READ;
	sv->m_ops[w]++;
	sv->m_bytes[w] += op == ZL_OP_READ || op == ZL_OP_WRITE ? h->length : 0;
	sv->m_ns[w] += ns;
}

static void req_free(struct storage_req *r)
{
	struct zl_storage *st = r->st;

	srv_account(r);
	zl_storage_fair_done(st->fair, &r->fair);
	srv_ord_del(r);
	srv_unplan(r);
	if (r->buf)
		zl_xport_buf_free(st->xport, r->buf);
	if (r->crcs && r->crcs != r->crcs_small)
		zl_xport_buf_free(st->xport, r->crcs);
	zl_xport_conn_put(r->conn);
	zl_slab_free(&st->reqs, r);
	st->inflight--;
}

void zl_storage_server_fini(struct zl_storage *st)
{
	zl_slab_fini(&st->reqs);
	zl_storage_fair_destroy(st->fair);
	st->fair = NULL;
	free(st->ord);
	st->ord = NULL;
}

/* ---- replies ---- */

/* An error answer, counted by opcode and code (loop thread). */
static void srv_count_err(struct zl_storage *st, uint8_t opcode, int status)
{
	int code = -status;
	unsigned slot = code >= ZL_ERR_INVAL && code - ZL_ERR_INVAL < ZL_STORAGE_ERR_SLOTS - 1
				? (unsigned)(code - ZL_ERR_INVAL)
				: ZL_STORAGE_ERR_SLOTS - 1;

	st->rs.err[opcode <= ZL_OP_MAX_ ? opcode : 0][slot]++;
}

static void srv_reply(struct zl_storage *st, struct zl_xport_conn *c,
		      const struct zl_wire_hdr *req, int status, uint64_t slice_ver, uint64_t aux)
{
	struct zl_wire_hdr rep;
	int rc;

	if (status == -EINPROGRESS) /* a volume load on its way: retry */
		status = -ZL_ERR_BUSY;
	if (status)
		srv_count_err(st, req->opcode, status);
	/* A connection refused once too often (docs/SECURITY.md): answered,
	 * then closed. */
	if (status && zl_storage_auth_charge(c, req, status)) {
		zl_storage_auth_refuse(NULL, c, req, status, true);
		return;
	}
	zl_wire_reply_init(req, &rep, status);
	rep.slice_ver = slice_ver;
	rep.aux = aux;
	/* Our room, for the primaries forwarding to us (srv_row_short). */
	if ((req->opcode == ZL_OP_REPL_WRITE || req->opcode == ZL_OP_PING) &&
	    status != -ZL_ERR_STALE && st->chunks && zl_chunk_store_tight(st->chunks))
		rep.aux |= ZL_REPLY_NEAR_FULL;
	rc = zl_xport_reply(c, &rep, NULL, 0, NULL, NULL);
	if (rc)
		ZL_LOG_DEBUG("storage", "reply dropped: op=%s peer=%s err=%s",
			     zl_wire_op_name(req->opcode), zl_xport_conn_peer(c), zl_errname(rc));
	if (status && status != -ZL_ERR_STALE)
		ZL_LOG_DEBUG(
		    "storage", "request failed: op=%s vol=%016" PRIx64 " chunk=%" PRIu64 " err=%s",
		    zl_wire_op_name(req->opcode), req->vol_id, req->chunk, zl_errname(status));
}

static void req_reply_free(struct storage_req *r, int status, uint64_t slice_ver)
{
	r->failed = status != 0;
	srv_reply(r->st, r->conn, &r->req, status, slice_ver, 0);
	req_free(r);
}

static void req_sent_cb(void *arg, int status)
{
	(void)status;
	req_free(arg);
}

/* ---- checks ---- */

/* The epoch below which a request with epoch on vol is fenced: the highest
 * one this node served, and with --auth on the watched attachment's (a
 * client can no longer raise it) for requests carrying an attach epoch (a
 * client's, or a primary's forward of one). An operator's request (epoch 0,
 * a cluster connection) is fenced as before, by the served epochs only. */
static uint64_t srv_fence(struct zl_storage *st, const struct zl_storage_vol *sv, uint64_t epoch)
{
	return epoch ? ZL_MAX(sv->max_epoch, zl_storage_auth_fence(st, sv->num)) : sv->max_epoch;
}

static int srv_check_role(struct zl_storage *st, const struct zl_wire_hdr *h,
			  struct zl_storage_vol *sv, const struct zl_slice *s, uint32_t slice);

static bool srv_is_write(uint8_t opcode)
{
	return opcode == ZL_OP_WRITE || opcode == ZL_OP_DISCARD || opcode == ZL_OP_WRITE_ZEROES ||
	       opcode == ZL_OP_REPL_WRITE;
}

/* The snapshot sequence checks of a write (docs/SNAPSHOTS.md §1-2): one
 * carrying a sequence above the cached record's waits for the record to be
 * reloaded (-EINPROGRESS: a snapshot was just taken, and copy-on-write must
 * see it; a refresh throttled now is asked for again by the recheck), one
 * without a sequence to a snapshotted volume is refused (-ZL_ERR_SNAPSEQ):
 * applied, it would change a snapshot's data. */
static int srv_check_seq(struct zl_storage *st, const struct zl_wire_hdr *h,
			 struct zl_storage_vol *sv)
{
	char vid[ZL_VOL_ID_LEN + 1];

	if (h->flags & ZL_WF_SEQ) {
		if (h->snap_seq <= sv->v.snap_seq)
			return 0;
		zl_storage_vol_refresh(st->vols, sv);
		return -EINPROGRESS;
	}
	if (!sv->v.snap_seq)
		return 0;
	if (zl_ratelimit_ok(&st->snap_rl, 1)) {
		zl_vol_id_format(h->vol_id, vid);
		ZL_LOG_WARN("storage",
			    "write refused: vol=%s op=%s snap_seq=%u: the volume has snapshots and "
			    "the %s sends no snapshot sequence (too old for a snapshotted volume: "
			    "upgrade it; %u more not logged)",
			    vid, zl_wire_op_name(h->opcode), sv->v.snap_seq,
			    h->opcode == ZL_OP_REPL_WRITE ? "primary" : "client",
			    st->snap_rl.suppressed);
		st->snap_rl.suppressed = 0;
	}
	return -ZL_ERR_SNAPSEQ;
}

/* Volume, range, version, epoch and role checks of a data request (vh:
 * zl_hash64 of its volume number; arrival_ms: when it arrived, zl_now_ms,
 * 0 for now). On success *slice / *ver are the slice
 * and its current version; on failure *ver is the current version when
 * known. */
static int srv_check(struct zl_storage *st, const struct zl_wire_hdr *h, uint64_t vh,
		     uint64_t arrival_ms, uint32_t *slice, uint64_t *ver, uint32_t *chunk_size)
{
	struct zl_storage_vol *sv;
	struct zl_slice *s;
	uint64_t n_chunks;
	int rc;

	*ver = h->slice_ver;
	rc = zl_storage_vol_lookup_h(st->vols, h->vol_id, vh, &sv);
	if (rc)
		return rc;
	*chunk_size = sv->v.chunk_size;
	n_chunks = (sv->v.size + sv->v.chunk_size - 1) / sv->v.chunk_size;
	/* A CHUNK_PUSH with ZL_WF_SEQ copies a clone chunk: its id holds the
	 * snapshot's sequence above the chunk index. */
	if ((uint64_t)h->offset + h->length > sv->v.chunk_size)
		return -ZL_ERR_RANGE;
	if ((h->opcode == ZL_OP_CHUNK_PUSH && (h->flags & ZL_WF_SEQ) ? zl_chunk_id_base(h->chunk)
								       : h->chunk) >= n_chunks) {
		/* Beyond the end our record knows: the volume may have grown
		 * (ControllerExpandVolume) and its writer seen the new record
		 * before our watch did. Only a record loaded after the request
		 * arrived says the range is wrong; until then the request
		 * waits for a reload (held, like a newer row's), and a reload
		 * throttled now is answered BUSY, which the client retries. */
		if (!sv->refreshing && sv->refresh_ms >= (arrival_ms ? arrival_ms : zl_now_ms()))
			return -ZL_ERR_RANGE;
		rc = zl_storage_vol_refresh(st->vols, sv);
		return rc == -EINPROGRESS ? rc : -ZL_ERR_BUSY;
	}
	*slice = zl_volume_slice_of(&sv->v, h->chunk);
	if (h->opcode == ZL_OP_READ && (h->flags & ZL_WF_ANY)) {
		/* Any node's own copy, whatever its role: no row checks. A
		 * client's read around a bad copy (its attach epoch) is fenced
		 * like its other I/O; peers and operators read at epoch 0. */
		*ver = sv->v.slices[*slice].version;
		if (h->epoch && h->epoch < srv_fence(st, sv, h->epoch))
			return -ZL_ERR_STALE;
		return 0;
	}
	/* A newer row than ours (watch lag, or a made-up version): one refresh
	 * in flight per volume, throttled; never an etcd call here. */
	if (h->slice_ver > sv->v.slices[*slice].version) {
		rc = zl_storage_vol_refresh(st->vols, sv);
		if (rc == -EINPROGRESS)
			return rc;
	}
	s = &sv->v.slices[*slice];
	*ver = s->version;
	if (h->slice_ver != s->version)
		return -ZL_ERR_STALE;
	if (srv_is_write(h->opcode)) {
		rc = srv_check_seq(st, h, sv);
		if (rc)
			return rc;
	}
	/* The attach epoch fences clients; a primary's copy carries none, and an
	 * operator's read (epoch 0: `zl volume export` of an attached volume)
	 * changes nothing a fence protects. */
	/* A fenced REPL_WRITE is applied all the same and answered STALE
	 * (srv_data): the primary applied it already, the copies never differ. */
	if (h->opcode != ZL_OP_CHUNK_PUSH && h->opcode != ZL_OP_REPL_WRITE &&
	    !(h->opcode == ZL_OP_READ && !h->epoch) && h->epoch < srv_fence(st, sv, h->epoch))
		return -ZL_ERR_STALE;
	rc = srv_check_role(st, h, sv, s, *slice);
	/* Only a request this node serves raises the epoch (with --auth on the
	 * header's epoch is the one a HELLO proved, or a peer's). */
	if (!rc && h->opcode != ZL_OP_CHUNK_PUSH && h->epoch > sv->max_epoch)
		sv->max_epoch = h->epoch;
	return rc;
}

/* The role checks of srv_check. */
static int srv_check_role(struct zl_storage *st, const struct zl_wire_hdr *h,
			  struct zl_storage_vol *sv, const struct zl_slice *s, uint32_t slice)
{
	int me, prim;

	me = zl_storage_vol_me(sv, slice, st->cfg.node_id);
	prim = zl_slice_primary(s);
	if (me >= 0 && !zl_storage_vol_ident_ok(sv, slice, me, st->cfg.incarnation))
		return -ZL_ERR_NOT_INSYNC; /* the row names a data dir of ours that is gone */
	if (me >= 0 && zl_storage_ddir_failed(st))
		return -ZL_ERR_NOT_INSYNC; /* our data dir is gone now (storage_ddir.c) */
	if (st->heal)
		zl_storage_heal_note_vol(st, h->vol_id);
	switch (h->opcode) {
	case ZL_OP_READ:
		if (!st->heal)
			return me >= 0 && s->in_sync[me] ? 0 : -ZL_ERR_NOT_INSYNC;
		if (me < 0 || me != prim)
			return -ZL_ERR_NOT_PRIMARY;
		return zl_storage_peering_ready_primary(st, &sv->v, slice);
	case ZL_OP_REPL_WRITE:
		/* heal: a RECOVERING member gets every new write too (S1). */
		if (st->heal && me >= 0 && me != prim &&
		    zl_slice_member_state(s, me) == ZL_MEMBER_RECOVERING)
			return 0;
		return me >= 0 && s->in_sync[me] && me != prim ? 0 : -ZL_ERR_NOT_INSYNC;
	case ZL_OP_CHUNK_PUSH:
		return st->heal && me >= 0 && me != prim ? 0 : -ZL_ERR_NOT_INSYNC;
	default:
		if (me < 0 || me != prim)
			return -ZL_ERR_NOT_PRIMARY;
		return st->heal ? zl_storage_peering_ready_primary(st, &sv->v, slice) : 0;
	}
}

/* ---- write path ---- */

static void srv_heal_finish(struct storage_req *r);

/* A backup answered r's forward STALE at our placement: it enforces an
 * epoch fence our watch has not shown yet. Raise ours to it. */
static void srv_adopt_fence(struct storage_req *r)
{
	struct zl_storage_vol *sv;
	uint64_t fence = 0;

	for (uint8_t i = 0; i < r->n_bk; i++)
		if (r->bk[i].status == -ZL_ERR_STALE)
			fence = ZL_MAX(fence, r->bk[i].fence);
	if (zl_storage_vol_lookup(r->st->vols, r->req.vol_id, &sv) || fence <= sv->max_epoch ||
	    fence <= r->req.epoch)
		return;
	ZL_LOG_INFO("storage",
		    "epoch fence taken from a backup: vol=%016" PRIx64 " epoch=%" PRIu64
		    " fence=%" PRIu64 " (its watch saw the new attachment first)",
		    r->req.vol_id, r->req.epoch, fence);
	sv->max_epoch = fence;
}

static void srv_write_finish(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	char vid[ZL_VOL_ID_LEN + 1];
	uint64_t ver = r->seen_ver;
	struct zl_storage_vol *sv;
	bool stale = false;

	srv_unplan(r); /* the local write and every forward ended */
	if (r->local_err) {
		/* Our data dir is gone (storage_ddir.c): not a failed write
		 * but a member out of sync; the client goes to the new
		 * primary, a primary reports us. */
		req_reply_free(r,
			       zl_storage_ddir_failed(st) || zl_storage_ddir_error(r->local_err)
				   ? -ZL_ERR_NOT_INSYNC
				   : r->local_err,
			       ver);
		return;
	}
	if (r->fenced) { /* a backup: applied like the primary did, never acknowledged */
		srv_reply(r->st, r->conn, &r->req, -ZL_ERR_STALE, ver, r->fenced);
		r->failed = true;
		req_free(r);
		return;
	}
	for (uint8_t i = 0; i < r->n_bk; i++)
		stale |= r->bk[i].status == -ZL_ERR_STALE;
	/* A backup's STALE carries its slice version. Above ours: a newer
	 * placement, the client reloads (STALE at that version). Equal to ours:
	 * the backup fenced the client's attach epoch (it saw the newer
	 * attachment first) and applied the write all the same (srv_data: the
	 * copies never differ); the backup is healthy, never dropped nor
	 * reported for it, and the client is told it is fenced (STALE at its own
	 * version, final in lib/client). Below ours: the backup lags (its
	 * refresh is throttled); not a fence, the client retries (BUSY). Our
	 * row is refreshed in the background (throttled), never on this path. */
	if (stale) {
		uint64_t newer = 0;
		bool fence = false;

		for (uint8_t i = 0; i < r->n_bk; i++) {
			if (r->bk[i].status != -ZL_ERR_STALE)
				continue;
			if (r->bk[i].rep_ver == ver)
				fence = true;
			else if (r->bk[i].rep_ver > ver)
				newer = ZL_MAX(newer, r->bk[i].rep_ver);
		}
		if (!zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv)) {
			if (r->slice < sv->v.n_slices && sv->v.slices[r->slice].version > ver)
				newer = ZL_MAX(newer, sv->v.slices[r->slice].version);
			zl_storage_vol_refresh(st->vols, sv);
		}
		if (newer) {
			req_reply_free(r, -ZL_ERR_STALE, newer);
		} else if (fence) {
			/* It applied the write as we did and said so; we take its
			 * fence at once (no further write of that epoch is applied
			 * anywhere). */
			srv_adopt_fence(r);
			req_reply_free(r, -ZL_ERR_STALE, ver);
		} else {
			req_reply_free(r, -ZL_ERR_BUSY, ver);
		}
		return;
	}
	if (st->heal && r->req.opcode != ZL_OP_REPL_WRITE) {
		srv_heal_finish(r);
		return;
	}
	for (uint8_t i = 0; i < r->n_bk; i++) {
		struct zl_volume fresh;
		int rc;

		if (!r->bk[i].status)
			continue;
		zl_vol_id_format(r->req.vol_id, vid); /* failures only: not per write */
		memset(&fresh, 0, sizeof(fresh));
		/* ver: the row version after the drops so far (a second failed
		 * backup is dropped from the row the first drop wrote). */
		rc = zl_meta_slice_drop(st->etcd, st->cfg.prefix, vid, r->slice, r->bk[i].node,
					ver, &fresh);
		if (rc) {
			ZL_LOG_ERR(
			    "storage",
			    "cannot drop failed backup from the in-sync set: vol=%s slice=%u "
			    "node=%s backup_err=%s err=%s (write not acknowledged)",
			    vid, r->slice, r->bk[i].node, zl_errname(r->bk[i].status),
			    zl_errname(rc));
			req_reply_free(r, -ZL_ERR_UNAVAIL, ver);
			return;
		}
		if (fresh.slices && r->slice < fresh.n_slices)
			ver = ZL_MAX(ver, fresh.slices[r->slice].version);
		ZL_LOG_WARN("storage",
			    "dropped backup from the in-sync set: vol=%s slice=%u node=%s "
			    "backup_err=%s slice_ver=%" PRIu64,
			    vid, r->slice, r->bk[i].node, zl_errname(r->bk[i].status), ver);
		zl_storage_vol_update(st->vols, &fresh);
	}
	req_reply_free(r, 0, ver);
}

/* ---- write path with --heal=on (S1) ---- */

/* Acknowledges r when the row allows it: every member whose forward failed
 * while IN_SYNC is no longer IN_SYNC, and the IN_SYNC members holding the
 * write (this primary included) reach min_size. Gives up with
 * ZL_ERR_UNAVAIL at the deadline (ZL_ERR_MIN_SIZE when only min_size is
 * missing), ZL_ERR_STALE when this node is no longer
 * the primary. True when r was answered (and freed). */
static bool srv_heal_try_ack(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	struct zl_storage_vol *sv;
	const struct zl_slice *s;
	uint32_t ok = 1, min;
	bool waiting = false;
	int rc = zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv);

	if (rc) {
		req_reply_free(r, rc, r->seen_ver);
		return true;
	}
	if (r->slice >= sv->v.n_slices) {
		req_reply_free(r, -ZL_ERR_STALE, r->seen_ver);
		return true;
	}
	s = &sv->v.slices[r->slice];
	if (zl_slice_index_of(s, st->cfg.node_id) != zl_slice_primary(s)) {
		req_reply_free(r, -ZL_ERR_STALE, s->version);
		return true;
	}
	for (uint8_t b = 0; b < r->n_bk; b++) {
		int i = zl_slice_index_of(s, r->bk[b].node);
		bool in_sync = i >= 0 && zl_slice_member_state(s, i) == ZL_MEMBER_IN_SYNC;

		if (r->bk[b].status)
			waiting |= r->bk[b].in_sync && in_sync;
		else
			ok += in_sync;
	}
	min = zl_volume_min_size(&sv->v);
	if (!waiting && ok >= min) {
		req_reply_free(r, 0, s->version);
		return true;
	}
	if (zl_now_ms() >= r->deadline_ms) {
		ZL_LOG_ERR("storage",
			   "write not acknowledged after --repl-wait: vol=%016" PRIx64
			   " slice=%u chunk=%" PRIu64 " in_sync_copies=%u min_size=%u%s",
			   r->req.vol_id, r->slice, r->req.chunk, ok, min,
			   waiting ? " (a failed member is still IN_SYNC in the row: is the "
				     "manager running?)"
				   : "");
		req_reply_free(r, waiting ? -ZL_ERR_UNAVAIL : -ZL_ERR_MIN_SIZE, s->version);
		return true;
	}
	return false;
}

#define PARK_CHECK_MS 20

static void srv_park_check(void *arg)
{
	struct zl_storage *st = arg;
	struct storage_req **pp = &st->parked;

	while (*pp) {
		struct storage_req *r = *pp;

		*pp = r->park_next;
		if (!srv_heal_try_ack(r)) {
			r->park_next = *pp; /* back in its place */
			*pp = r;
			pp = &r->park_next;
		}
	}
	if (!st->parked)
		zl_timer_stop(st->loop, &st->park_t);
}

static void srv_park(struct storage_req *r)
{
	struct zl_storage *st = r->st;

	r->park_next = st->parked;
	st->parked = r;
	/* The row changes through the volumes/ watch, which refreshes the
	 * cache these checks read: the loop never blocks on a parked write. */
	zl_timer_start(st->loop, &st->park_t, PARK_CHECK_MS, PARK_CHECK_MS, srv_park_check, st);
}

static void srv_heal_finish(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	char vid[ZL_VOL_ID_LEN + 1];
	struct zl_storage_vol *sv;

	for (uint8_t i = 0; i < r->n_bk; i++) {
		if (!r->bk[i].status)
			continue;
		zl_vol_id_format(r->req.vol_id, vid); /* failures only: not per write */
		if (!zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv) && r->slice < sv->v.n_slices)
			zl_storage_heal_fwd_failed(st, &sv->v, r->slice, r->bk[i].node,
						   r->req.chunk);
		zl_storage_heal_report(st, vid, r->slice, r->bk[i].node,
				       zl_errname(r->bk[i].status), r->seen_ver);
	}
	r->deadline_ms = zl_now_ms() + st->cfg.repl_wait_ms;
	if (!srv_heal_try_ack(r))
		srv_park(r);
}

static void srv_forward(struct storage_req *r);
static void srv_late_run(struct zl_storage *st, uint64_t vol, uint64_t chunk);

static void srv_local_done(void *arg, int status)
{
	struct storage_req *r = arg;

	zl_storage_fair_done(r->st->fair, &r->fair);
	/* The chunk store's refusal of a sequence below the chunk's (never a
	 * slice version's STALE: none reaches the store). */
	if (r->cowed && status == -ZL_ERR_STALE)
		status = -ZL_ERR_SNAPSEQ;
	r->local_err = status;
	if (status)
		zl_storage_ddir_io_error(r->st, status);
	/* A client's write found a bad edge block in our copy: it is sent
	 * again (CORRUPT), and waits until the copy is repaired. */
	if (status == -ZL_ERR_CORRUPT && srv_is_write(r->req.opcode) &&
	    r->req.opcode != ZL_OP_REPL_WRITE)
		zl_storage_scrub_on_corrupt(r->st, r->req.vol_id, r->slice, r->req.chunk);
	if (r->fwd_late) {
		r->ord = ORD_READY;
		srv_late_run(r->st, r->req.vol_id, r->req.chunk);
		return;
	}
	if (--r->pending == 0)
		srv_write_finish(r);
}

static void srv_bk_done(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct storage_bk *bk = arg;
	struct storage_req *r = bk->r;

	bk->status = status ? status : zl_wire_status_to_err(rep->status);
	if (!bk->status)
		zl_metrics_hist_add(&r->st->rs.fwd_lat, zl_now_ns() - bk->sent_ns);
	bk->rep_ver = status ? 0 : rep->slice_ver;
	bk->fence = bk->status == -ZL_ERR_STALE && rep ? rep->aux : 0;
	if (rep && bk->status != -ZL_ERR_STALE)
		zl_storage_fwd_note_room(r->st->fwd, bk->node, rep->aux & ZL_REPLY_NEAR_FULL);
	if (bk->status)
		ZL_LOG_WARN("storage",
			    "forwarded write failed: node=%s vol=%016" PRIx64 " chunk=%" PRIu64
			    " err=%s",
			    bk->node, r->req.vol_id, r->req.chunk, zl_errname(bk->status));
	if (--r->pending == 0)
		srv_write_finish(r);
}

static void srv_simple_done(void *arg, int status);
static void srv_hold(struct storage_req *r);
static void srv_plan(struct storage_req *r);

/* Whether this node is not IN_SYNC in the row of r (a REPLACE may roll its
 * copy back). */
static bool srv_push_may_replace(struct storage_req *r)
{
	struct zl_storage_vol *sv;
	const struct zl_slice *s;
	int me;

	if (r->req.subop != ZL_PUSH_REPLACE ||
	    zl_storage_vol_lookup(r->st->vols, r->req.vol_id, &sv) || r->slice >= sv->v.n_slices)
		return false;
	s = &sv->v.slices[r->slice];
	me = zl_slice_index_of(s, r->st->cfg.node_id);
	return me >= 0 && zl_slice_member_state(s, me) != ZL_MEMBER_IN_SYNC;
}

/* The last piece of a clone chunk's copy is on disk: it becomes a clone. */
static void srv_clone_pushed(void *arg, int status)
{
	struct storage_req *r = arg;
	int rc = status;

	if (!rc)
		rc = zl_chunk_snap_install(r->st->chunks, r->req.vol_id, r->req.chunk,
					   r->req.snap_seq, srv_simple_done, r);
	if (rc)
		req_reply_free(r, rc, 0);
}

/* CHUNK_PUSH of a clone chunk (ZL_WF_SEQ, snap_seq = its lo,
 * docs/SNAPSHOTS.md §2): the first piece removes the member's copy of that
 * file (its primary found the clone missing or of another version), the
 * pieces rewrite it, the last one makes it a clone again
 * (zl_chunk_snap_install). With ZL_PUSH_REPLACE to a member that is not
 * IN_SYNC (recovery) always; else (peering, scrub) only while the member
 * holds no clone of that id: a clone it holds is replaced only after a
 * CHUNK_DELETE of it. */
static void srv_clone_push_exec(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;
	bool last = (uint64_t)h->offset + h->length == r->chunk_size;
	uint32_t hi = (uint32_t)(h->chunk >> ZL_CHUNK_IDX_BITS);
	int rc = 0;

	if (!hi || h->snap_seq >= hi)
		rc = -ZL_ERR_INVAL;
	else if (!srv_push_may_replace(r) &&
		 zl_chunk_snap_id(st->chunks, h->vol_id, zl_chunk_id_base(h->chunk), hi) == h->chunk)
		rc = -ZL_ERR_CONFLICT;
	if (!rc && !h->offset)
		rc = zl_chunk_delete(st->chunks, h->vol_id, h->chunk);
	if (!rc)
		rc = zl_storage_chunk_apply(st, h->vol_id, h->chunk, r->chunk_size, h->offset,
					    h->length, r->buf, h->aux,
					    last ? srv_clone_pushed : srv_simple_done, r);
	if (rc)
		req_reply_free(r, rc, r->seen_ver);
}

/* ---- chunks opened off the loop for a request (zl_chunk_warm) ---- */

static void srv_warm_cb(void *arg, int status)
{
	struct storage_req *r = arg;

	(void)status; /* the look-up that follows says what failed */
	if (--r->warming)
		return;
	r->warmed = true;
	r->warm_resume(r);
}

/* r is about to look up chunk's version (zl_chunk_version reads a closed
 * chunk's metadata on the loop): true when the chunk's open was queued on
 * the store's open workers, resume(r) then runs. Once per request. */
static bool srv_warm(struct storage_req *r, uint64_t chunk, void (*resume)(struct storage_req *r))
{
	if (r->warmed ||
	    zl_chunk_warm(r->st->chunks, r->req.vol_id, chunk, r->chunk_size, srv_warm_cb, r) != 0)
		return false;
	r->warming = 1;
	r->warm_resume = resume;
	return true;
}

/* CHUNK_PUSH on a member: applied only while our copy is older than the
 * pushed version (never over a newer write), or, with ZL_PUSH_REPLACE to a
 * member that is not IN_SYNC, whenever the versions differ: a newer copy
 * (never acknowledged) is removed on the first piece, as the chunk's version
 * only grows. The piece ending the chunk stores the version; zero pieces
 * before it are zeroed (sparse). */
static void srv_push_exec(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;
	bool replace = srv_push_may_replace(r);
	uint64_t own = 0;
	int rc;

	if (h->flags & ZL_WF_SEQ) {
		srv_clone_push_exec(r);
		return;
	}
	if (srv_warm(r, h->chunk, srv_push_exec))
		return;
	rc = zl_chunk_version(st->chunks, h->vol_id, h->chunk, r->chunk_size, &own);

	if (!rc && !zl_storage_push_accepts(own, h->aux, replace))
		rc = -ZL_ERR_CONFLICT;
	if (!rc && own > h->aux) {
		/* replace only. A later piece over a newer copy: its first piece
		 * did not remove it; the primary copies the chunk again. */
		rc =
		    h->offset ? -ZL_ERR_CONFLICT : zl_chunk_delete(st->chunks, h->vol_id, h->chunk);
		if (!rc)
			ZL_LOG_INFO("storage",
				    "newer copy rolled back to the primary's: vol=%016" PRIx64
				    " chunk=%" PRIu64 " version=%" PRIx64
				    " primary_version=%" PRIx64,
				    h->vol_id, h->chunk, own, h->aux);
	}
	if (!rc)
		rc = zl_storage_chunk_apply(st, h->vol_id, h->chunk, r->chunk_size, h->offset,
					    h->length, r->buf, h->aux, srv_simple_done, r);
	if (rc)
		req_reply_free(r, rc, r->seen_ver);
}

/* ---- REPL_WRITE order on a backup (REPLICATION.md §1) ----
 *
 * The primary numbers a chunk's writes in the order it submits them to its
 * own chunk store and sends their forwards in that order on one connection
 * per backup. A backup must submit them to its chunk store in the same
 * order (the store serializes overlapping writes by submission): but a
 * forward whose payload comes later (an RDMA read behind an inline one), a
 * forward held for a volume load (srv_hold) or one arriving on another
 * connection would overtake its predecessor. So every REPL_WRITE enters its
 * chunk's queue when its header arrives (srv_ord_add), in data version
 * order (version 0, an unversioned forward: arrival order), and is
 * submitted only once every write queued before it was (srv_ord_run). A
 * write older than one already submitted is refused (CONFLICT): applying it
 * would put older data over newer; the primary reports this member and
 * recovery copies the chunk. The queues are links in the requests (no
 * allocation); a queue is bounded by ORD_CHUNK_MAX (beyond: BUSY, reported
 * the same way), and its waits by what frees a request (a fetch that fails,
 * a held request's deadline). */

static void srv_exec_io(struct storage_req *r);
static void srv_write_disk(struct storage_req *r);
static void srv_read_disk(struct storage_req *r);

/* ---- fair share of the disk per volume (storage_fair.c) ---- */

/* Whether r's disk operation may start now: true, or false when it waits
 * for its volume's share (srv_fair_run starts it). */
static bool srv_fair_admit(struct storage_req *r)
{
	struct zl_storage_vol *sv;
	/* Zeroing and discards punch holes: they move no data. */
	uint32_t bytes = r->op == ZL_OP_READ || r->op == ZL_OP_WRITE ? r->req.length : 0;

	if (zl_storage_fair_admit(r->st->fair, &r->fair, r->vh, bytes, r->t0_ns))
		return true;
	r->st->rs.fair_queued++;
	sv = zl_storage_vol_peek_h(r->st->vols, r->req.vol_id, r->vh);
	if (sv)
		sv->m_fair_queued++;
	return false;
}

static void srv_fair_run(void *arg, struct zl_storage_fair_item *it)
{
	struct storage_req *r = ZL_CONTAINER_OF(it, struct storage_req, fair);

	(void)arg;
	if (r->req.opcode == ZL_OP_READ)
		srv_read_disk(r);
	else
		srv_write_disk(r);
}

static struct srv_ordq *srv_ord_q(struct zl_storage *st, uint64_t vol, uint64_t chunk)
{
	return &st->ord->q[zl_hash64(vol ^ chunk * 0x9e3779b97f4a7c15ull) & (ORD_BUCKETS - 1)];
}

static bool srv_ord_same(const struct storage_req *e, uint64_t vol, uint64_t chunk)
{
	return e->req.vol_id == vol && e->req.chunk == chunk;
}

/* Puts r into queue q before `before` (NULL: at its tail), waiting
 * (ORD_WAIT). srv_ordq_unlink takes it out. */
static void srv_ordq_insert(struct srv_ordq *q, struct storage_req *r, struct storage_req *before)
{
	r->ord = ORD_WAIT;
	r->ord_next = before;
	r->ord_prev = before ? before->ord_prev : q->tail;
	if (r->ord_prev)
		r->ord_prev->ord_next = r;
	else
		q->head = r;
	if (before)
		before->ord_prev = r;
	else
		q->tail = r;
}

/* Whether queued e (not submitted yet) comes after a write of version dver
 * (0: an unversioned write keeps arrival order). */
static bool srv_ord_after(const struct storage_req *e, uint64_t dver)
{
	return e->ord != ORD_BUSY && dver && e->dver > dver;
}

/* Queues REPL_WRITE r at the arrival of its header: 0, -ZL_ERR_CONFLICT (a
 * newer write of the chunk went to the chunk store already) or
 * -ZL_ERR_BUSY (the chunk's queue is full). */
static int srv_ord_add(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	uint64_t vol = r->req.vol_id, chunk = r->req.chunk;
	struct srv_ordq *q = srv_ord_q(st, vol, chunk);
	struct storage_req *before = NULL, *e;
	uint32_t queued = 0;
	bool newer_busy = false;

	for (e = q->head; e; e = e->ord_next) {
		if (!srv_ord_same(e, vol, chunk))
			continue;
		queued += e->ord != ORD_BUSY;
		newer_busy |= e->ord == ORD_BUSY && r->dver && e->dver > r->dver;
	}
	if (newer_busy || queued >= ORD_CHUNK_MAX) {
		st->ord->refused++;
		if (zl_ratelimit_ok(&st->ord->refused_rl, 1)) {
			ZL_LOG_WARN("storage",
				    "forwarded write refused: vol=%016" PRIx64 " chunk=%" PRIu64
				    " version=%" PRIx64 " reason=%s refused=%" PRIu64
				    " (%u more not logged)",
				    vol, chunk, r->dver,
				    newer_busy ? "a newer write of the chunk is applied already"
					       : "the chunk's order queue is full",
				    st->ord->refused, st->ord->refused_rl.suppressed);
			st->ord->refused_rl.suppressed = 0;
		}
		return newer_busy ? -ZL_ERR_CONFLICT : -ZL_ERR_BUSY;
	}
	/* Behind the last write of the chunk that does not come after r. */
	for (e = q->tail; e; e = e->ord_prev) {
		if (!srv_ord_same(e, vol, chunk))
			continue;
		if (!srv_ord_after(e, r->dver))
			break;
		before = e;
	}
	srv_ordq_insert(q, r, before);
	return 0;
}

/* Submits the ready writes at the front of the chunk's queue, in order,
 * up to the first one still waiting for its data or checks. */
static void srv_ord_run(struct zl_storage *st, uint64_t vol, uint64_t chunk)
{
	struct srv_ordq *q = srv_ord_q(st, vol, chunk);

	for (;;) {
		struct storage_req *e;

		for (e = q->head; e; e = e->ord_next)
			if (srv_ord_same(e, vol, chunk) && e->ord != ORD_BUSY)
				break;
		if (!e || e->ord != ORD_READY)
			return;
		/* Submitted: a failure frees e (srv_ord_del of a BUSY write
		 * starts no run of its own). */
		e->ord = ORD_BUSY;
		srv_exec_io(e);
	}
}

/* r is ready (data in, checks passed): submitted now if nothing of its
 * chunk is queued before it, else when the last of those goes. */
static void srv_ord_ready(struct storage_req *r)
{
	struct storage_req *e;

	r->ord = ORD_READY;
	for (e = r->ord_prev; e; e = e->ord_prev)
		if (srv_ord_same(e, r->req.vol_id, r->req.chunk) && e->ord != ORD_BUSY)
			break;
	if (e)
		r->st->ord->waited++;
	srv_ord_run(r->st, r->req.vol_id, r->req.chunk);
}

/* Takes r out of queue q (ORD_NONE). */
static void srv_ordq_unlink(struct srv_ordq *q, struct storage_req *r)
{
	if (r->ord_prev)
		r->ord_prev->ord_next = r->ord_next;
	else
		q->head = r->ord_next;
	if (r->ord_next)
		r->ord_next->ord_prev = r->ord_prev;
	else
		q->tail = r->ord_prev;
	r->ord = ORD_NONE;
	r->ord_prev = r->ord_next = NULL;
}

/* ---- forwards after our own write (a near-full data dir) ----
 *
 * A primary whose data dir is near full (zl_chunk_store_tight) forwards a
 * write only once its own copy took it: a write it refuses for room (NOSPC,
 * the client is told) then reaches no backup, and the members in sync never
 * differ by it. The forwards still leave in the order the writes were
 * numbered (a backup refuses a write older than one it applied): a chunk's
 * late writes wait in its late queue in numbering order (ord_prev/ord_next,
 * ORD_WAIT while their own write runs, ORD_READY once it ended) and leave
 * from the front, forwarded if their own write succeeded. A write numbered
 * behind a late one of its chunk is late too. */

static struct srv_ordq *srv_late_q(struct zl_storage *st, uint64_t vol, uint64_t chunk)
{
	return &st->ord->late[zl_hash64(vol ^ chunk * 0x9e3779b97f4a7c15ull) & (ORD_BUCKETS - 1)];
}

static bool srv_late_has(struct zl_storage *st, uint64_t vol, uint64_t chunk)
{
	for (struct storage_req *e = srv_late_q(st, vol, chunk)->head; e; e = e->ord_next)
		if (srv_ord_same(e, vol, chunk))
			return true;
	return false;
}

static void srv_late_add(struct storage_req *r)
{
	srv_ordq_insert(srv_late_q(r->st, r->req.vol_id, r->req.chunk), r, NULL);
}

/* Forwards the chunk's late writes at the front of its queue whose own
 * write ended, in order, up to the first one still running. */
static void srv_late_run(struct zl_storage *st, uint64_t vol, uint64_t chunk)
{
	struct srv_ordq *q = srv_late_q(st, vol, chunk);

	for (;;) {
		struct storage_req *e;

		for (e = q->head; e; e = e->ord_next)
			if (srv_ord_same(e, vol, chunk))
				break;
		if (!e || e->ord != ORD_READY)
			return;
		srv_ordq_unlink(q, e);
		if (!e->local_err)
			srv_forward(e);
		if (--e->pending == 0)
			srv_write_finish(e);
	}
}

/* Takes r out of its queue (req_free); the writes behind a write that
 * never went to the chunk store may go now. */
static void srv_ord_del(struct storage_req *r)
{
	struct srv_ordq *q;
	bool queued = r->ord != ORD_BUSY;

	if (r->ord == ORD_NONE)
		return;
	q = srv_ord_q(r->st, r->req.vol_id, r->req.chunk);
	srv_ordq_unlink(q, r);
	if (queued)
		srv_ord_run(r->st, r->req.vol_id, r->req.chunk);
}

/* A client write on its primary, right before its local write: its data
 * version, and the one each forward carries. Numbered here, not at its
 * arrival, so that the versions of a chunk's writes follow the order of
 * their submission to our chunk store and of their forwards (a payload
 * fetched late, a request held, would otherwise apply a lower version after
 * a higher one: backups apply in version order). 0 or an error. */
static int srv_number(struct storage_req *r)
{
	struct zl_storage_vol *sv;
	int rc;

	if (!r->st->heal)
		return 0;
	rc = zl_storage_vol_lookup(r->st->vols, r->req.vol_id, &sv);
	if (!rc && r->slice >= sv->v.n_slices)
		rc = -ZL_ERR_STALE;
	if (!rc)
		rc = zl_storage_heal_version_next(r->st, &sv->v, r->slice, &r->dver);
	for (uint8_t i = 0; !rc && i < r->n_bk; i++)
		r->bk[i].dver = r->bk[i].versioned ? r->dver : 0;
	return rc;
}

/* Local write (and, on a primary, forwarding) once the data is in r->buf;
 * a REPL_WRITE goes through its chunk's order queue first. */
static void srv_exec(struct storage_req *r)
{
	if (r->held) {
		srv_hold(r);
		return;
	}
	if (r->ord == ORD_WAIT) {
		srv_ord_ready(r);
		return;
	}
	srv_exec_io(r);
}

static void srv_exec_io(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;

	zl_storage_gc_note_write(st, h->vol_id, r->slice);
	if (r->op == ZL_OP_CHUNK_PUSH) {
		srv_push_exec(r);
		return;
	}
	if (srv_fair_admit(r))
		srv_write_disk(r);
}

/* The largest snapshot of vol at or below seq (0: none). Copy-on-write of
 * a write carrying seq needs only it: some snapshot lies in (wseq, seq]
 * exactly when this one is above wseq. A snapshot at or below seq cannot
 * appear later (new ones get sequences above the record's snap_seq, which
 * srv_check_seq made at least seq), so one number stands for the list the
 * write keeps until it ends. */
static uint32_t srv_cow_snap(struct zl_storage *st, uint64_t vol, uint32_t seq)
{
	struct zl_storage_vol *sv = zl_storage_vol_peek(st->vols, vol);
	uint32_t best = 0;

	for (uint32_t i = 0; sv && i < sv->v.n_snaps && sv->v.snaps[i] <= seq; i++)
		best = sv->v.snaps[i];
	return best;
}

/* The cached record of vol names a parent: ZL_WF_ABSENT is answered only
 * then. A client that has not seen its clone flattened yet asks for a chunk
 * the flatten left absent (the parent's was zeros): it reads as zeros and
 * a write applies, rather than sending it to a parent snapshot that may be
 * gone by now. */
static bool srv_is_clone(struct zl_storage *st, uint64_t vol)
{
	struct zl_storage_vol *sv = zl_storage_vol_peek(st->vols, vol);

	return sv && sv->v.parent_vol[0];
}

/* r's write or zeroing through copy-on-write (ZL_WF_SEQ). 0, -ZL_ERR_SNAPSEQ
 * or the chunk store's error. */
static int srv_cow_submit(struct storage_req *r, bool row_short)
{
	const struct zl_wire_hdr *h = &r->req;
	struct zl_chunk_cow *w = &r->cow;
	int rc;

	r->cow_snap = srv_cow_snap(r->st, h->vol_id, h->snap_seq);
	*w = (struct zl_chunk_cow){
	    .vol = h->vol_id,
	    .chunk = h->chunk,
	    .chunk_size = r->chunk_size,
	    .off = h->offset,
	    .len = h->length,
	    .zero = r->op != ZL_OP_WRITE,
	    .data = r->op == ZL_OP_WRITE ? r->buf : NULL,
	    .crcs = r->op == ZL_OP_WRITE ? r->crcs : NULL,
	    .version = r->dver,
	    .seq = h->snap_seq,
	    .snaps = &r->cow_snap,
	    .n_snaps = r->cow_snap ? 1 : 0,
	    .no_new = row_short,
	    .cb = srv_local_done,
	    .arg = r,
	};
	r->cowed = true;
	rc = zl_chunk_cow_submit(r->st->chunks, w);
	return rc == -ZL_ERR_STALE ? -ZL_ERR_SNAPSEQ : rc;
}

/* Whether r's row is short of room (docs/REPLICATION.md §9): its in-sync
 * backups that said their data dir is near full (zl_storage_fwd_full) would
 * refuse a write that needs new space and be taken out, and the in-sync
 * members left (this primary included) would be fewer than min_size, where
 * every write of the slice waits. Then r may take no new space
 * (zl_chunk_overwrite; NOSPC to the client at once, nothing applied) and
 * its forwards wait for our own write. Loop thread, no etcd: one load
 * while no peer is near full. */
static bool srv_row_short(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	struct zl_storage_vol *sv;
	uint32_t room = 1, full = 0, min;

	if (!st->heal || !r->n_bk || !zl_storage_fwd_any_full(st->fwd))
		return false;
	for (uint8_t b = 0; b < r->n_bk; b++) {
		if (!r->bk[b].in_sync)
			continue;
		if (zl_storage_fwd_full(st->fwd, r->bk[b].node))
			full++;
		else
			room++;
	}
	if (!full || zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv))
		return false;
	min = zl_volume_min_size(&sv->v);
	if (room >= min)
		return false;
	if (zl_ratelimit_ok(&st->row_short_rl, 1))
		ZL_LOG_WARN("storage",
			    "writes that need new space refused NOSPC: vol=%016" PRIx64
			    " slice=%u: %u in-sync member(s) near full, %u with room < min_size %u "
			    "(free space on the full members or add capacity; overwrites go on)",
			    r->req.vol_id, r->slice, full, room, min);
	return true;
}

/* The chunk write (or zeroing) of r and its forwards, once admitted. */
static void srv_write_disk(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;
	bool row_short;
	int rc;

	/* A clone's chunk (docs/SNAPSHOTS.md §4): a write to one never held
	 * is refused so its client copies the parent's chunk up first; a
	 * copy-up to one held leaves it (the primary says so, a backup
	 * agrees with its primary). */
	if (h->flags & (ZL_WF_ABSENT | ZL_WF_CREATE)) {
		bool held = zl_chunk_held(st->chunks, h->vol_id, h->chunk);

		if ((h->flags & ZL_WF_ABSENT) && !held && srv_is_clone(st, h->vol_id)) {
			req_reply_free(r, -ZL_ERR_ABSENT, r->seen_ver);
			return;
		}
		if ((h->flags & ZL_WF_CREATE) && held) {
			req_reply_free(r, h->opcode == ZL_OP_REPL_WRITE ? 0 : -ZL_ERR_EXISTS,
				       r->seen_ver);
			return;
		}
	}
	/* A write at a snapshot sequence looks its chunk's wseq up first
	 * (zl_chunk_cow_submit): a closed chunk is opened off the loop. */
	if ((h->flags & ZL_WF_SEQ) && !(h->flags & ZL_WF_CREATE) &&
	    srv_warm(r, h->chunk, srv_write_disk))
		return;
	row_short = h->opcode != ZL_OP_REPL_WRITE && srv_row_short(r);
	/* Data version 0 (keeps the chunk's) unless the primary assigned one:
	 * --heal=on, REPLICATION.md §1. */
	rc = h->opcode == ZL_OP_REPL_WRITE ? 0 : srv_number(r);
	if (rc) {
		req_reply_free(r, rc, r->seen_ver);
		return;
	}
	/* A copy-up is the chunk's content from the start: no snapshot copy
	 * of the absent chunk it replaces, which read as the same. */
	if ((h->flags & ZL_WF_SEQ) && !(h->flags & ZL_WF_CREATE))
		rc = srv_cow_submit(r, row_short);
	else if (row_short)
		rc = zl_chunk_overwrite(st->chunks, h->vol_id, h->chunk, r->chunk_size, h->offset,
					h->length, r->op == ZL_OP_WRITE ? r->buf : NULL, r->crcs,
					r->dver, srv_local_done, r);
	else if (r->op == ZL_OP_WRITE)
		rc = zl_chunk_write_crcs(st->chunks, h->vol_id, h->chunk, r->chunk_size, h->offset,
					 h->length, r->buf, r->crcs, r->dver, srv_local_done, r);
	else
		rc = zl_chunk_zero(st->chunks, h->vol_id, h->chunk, r->chunk_size, h->offset,
				   h->length, r->dver, srv_local_done, r);
	if (rc == -ZL_ERR_SNAPSEQ) {
		req_reply_free(r, rc, r->seen_ver);
		return;
	}
	if (rc) {
		zl_storage_ddir_io_error(st, rc);
		req_reply_free(r,
			       zl_storage_ddir_failed(st) || zl_storage_ddir_error(rc)
				   ? -ZL_ERR_NOT_INSYNC
				   : rc,
			       r->seen_ver);
		return;
	}
	r->pending = 1;
	/* Near full, or short of room in the row, the forwards wait for our
	 * own write (srv_late_add). A backup that refuses one for room is
	 * reported and taken out like any failed member. */
	r->fwd_late = r->n_bk && (row_short || zl_chunk_store_tight(st->chunks) ||
				  srv_late_has(st, h->vol_id, h->chunk));
	if (r->fwd_late)
		srv_late_add(r);
	else
		srv_forward(r);
}

/* Sends r's forwards (REPL_WRITE to each backup), each counted in
 * r->pending until its answer. */
static void srv_forward(struct storage_req *r)
{
	const struct zl_wire_hdr *h = &r->req;
	struct zl_storage *st = r->st;
	int rc;

	for (uint8_t i = 0; i < r->n_bk; i++) {
		struct storage_bk *bk = &r->bk[i];

		memset(&bk->hdr, 0, sizeof(bk->hdr));
		bk->r = r;
		bk->hdr.opcode = ZL_OP_REPL_WRITE;
		bk->hdr.flags = h->flags & ZL_WF_FUA;
		bk->hdr.vol_id = h->vol_id;
		bk->hdr.chunk = h->chunk;
		bk->hdr.offset = h->offset;
		bk->hdr.length = h->length;
		bk->hdr.slice_ver = r->seen_ver;
		bk->hdr.epoch = h->epoch;
		bk->hdr.aux = r->op;
		/* Every replica takes the same clone at the same write, and a
		 * copy-up as a copy-up. */
		bk->hdr.flags |= h->flags & (ZL_WF_SEQ | ZL_WF_CREATE);
		bk->hdr.snap_seq = h->snap_seq;
		if (st->heal) {
			bk->hdr.flags |= ZL_WF_DVER;
			bk->hdr.subop = r->op;
			bk->hdr.aux = bk->dver;
		}
		bk->sent_ns = zl_now_ns();
		rc = zl_storage_fwd_send_crcs(st->fwd, bk->node, &bk->hdr, r->buf,
					       r->op == ZL_OP_WRITE ? h->length : 0, r->crcs,
					       srv_bk_done, bk);
		if (rc)
			bk->status = rc;
		else
			r->pending++;
	}
}

static void srv_fetch_done(void *arg, int status)
{
	struct storage_req *r = arg;

	if (status == -ZL_ERR_CORRUPT) {
		req_reply_free(r, status, r->seen_ver);
		return;
	}
	if (status) {
		r->failed = true;
		req_free(r);
		return;
	}
	if (r->req.opcode == ZL_OP_HELLO) {
		struct zl_wire_hello hl;
		struct zl_wire_hdr rep;

		if (zl_wire_hello_decode(r->small, ZL_WIRE_HELLO_SIZE, &hl)) {
			req_reply_free(r, zl_storage_auth_hello(r->st, r->conn, &r->req, NULL), 0);
			return;
		}
		ZL_LOG_DEBUG("storage", "HELLO from id=%s peer=%s", hl.node_id,
			     zl_xport_conn_peer(r->conn));
		status = zl_storage_auth_hello(r->st, r->conn, &r->req, &hl);
		explicit_bzero(hl.token, sizeof(hl.token));
		explicit_bzero(r->small, ZL_WIRE_HELLO_SIZE);
		if (status) {
			req_reply_free(r, status, 0);
			return;
		}
		/* The transports we really serve: TCP always, RDMA while its
		 * listener is up. */
		/* ZL_WF_SEQ only when offered: an older client refuses unknown
		 * caps. */
		zl_xport_hello_encode(r->small, r->st->cfg.node_id,
				      ZL_WIRE_CAP_TCP |
					  (r->st->listener_rdma ? ZL_WIRE_CAP_RDMA : 0) |
					  (hl.caps & ZL_WIRE_CAP_SNAPSEQ),
				      NULL);
		zl_wire_reply_init(&r->req, &rep, 0);
		rep.payload_len = ZL_WIRE_HELLO_SIZE;
		if (zl_xport_reply(r->conn, &rep, r->small, ZL_WIRE_HELLO_SIZE, req_sent_cb, r))
			req_free(r);
		return;
	}
	srv_exec(r);
}

/* ---- read path ---- */

static void srv_read_done(void *arg, int status)
{
	struct storage_req *r = arg;
	struct zl_wire_hdr rep;

	zl_storage_fair_done(r->st->fair, &r->fair);
	/* A client's read of our copy (the primary's) found a bad block: the
	 * client reads around it (ZL_WF_ANY from the members); our copy is
	 * repaired from them. */
	if (status == -ZL_ERR_CORRUPT && r->req.opcode == ZL_OP_READ && !(r->req.flags & ZL_WF_ANY))
		zl_storage_scrub_on_corrupt(r->st, r->req.vol_id, r->slice, r->req.chunk);
	if (status) {
		req_reply_free(r, status, r->seen_ver);
		return;
	}
	zl_wire_reply_init(&r->req, &rep, 0);
	rep.slice_ver = r->seen_ver;
	rep.aux = r->dver; /* ZL_WF_ANY: the copy's chunk version, else 0 */
	rep.payload_len = r->req.length;
	if (zl_xport_reply_crcs(r->conn, &rep, r->buf + r->req.offset % ZL_BLOCK_SIZE,
				r->req.length, r->crcs, req_sent_cb, r))
		req_free(r);
}

static void srv_simple_done(void *arg, int status)
{
	struct storage_req *r = arg;

	req_reply_free(r, status, 0);
}

/* ---- dispatch ---- */

/* Starts the chunk read of r (a READ past its checks) once admitted. */
static void srv_read_start(struct storage_req *r)
{
	if (srv_fair_admit(r))
		srv_read_disk(r);
}

static void srv_read_disk(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;
	/* ZL_WF_SEQ: the chunk as that snapshot holds it (a clone chunk, or
	 * the live one), read and verified like any chunk. */
	uint64_t id = h->flags & ZL_WF_SEQ
			  ? zl_chunk_snap_id(st->chunks, h->vol_id, h->chunk, h->snap_seq)
			  : h->chunk;
	int rc = 0;

	/* A clone's chunk it never held: the client reads the parent. */
	if ((h->flags & ZL_WF_ABSENT) && !zl_chunk_held(st->chunks, h->vol_id, id) &&
	    srv_is_clone(st, h->vol_id)) {
		req_reply_free(r, -ZL_ERR_ABSENT, r->seen_ver);
		return;
	}
	if ((h->flags & ZL_WF_ANY) && srv_warm(r, id, srv_read_disk))
		return;
	if (h->flags & ZL_WF_ANY)
		/* Read before the data: the copy is never labelled newer. */
		rc = zl_chunk_version(st->chunks, h->vol_id, id, r->chunk_size, &r->dver);
	r->buf =
	    rc ? NULL : zl_xport_buf_alloc(st->xport, zl_chunk_read_span(h->offset, h->length));
	if (!rc)
		rc = r->buf
			 ? zl_chunk_read_crcs(st->chunks, h->vol_id, id, r->chunk_size, h->offset,
					      h->length, r->buf, srv_crcs(r, h->offset, h->length),
					      (h->flags & ZL_WF_ANY) || (h->aux & ZL_READ_RECHECK),
					      srv_read_done, r)
			 : -ENOMEM;
	if (rc)
		req_reply_free(r, rc == -ENOMEM ? -ZL_ERR_BUSY : rc, r->seen_ver);
}

/* A client write on its primary: the members it is forwarded to, and
 * whether with its data version (heal; the version itself is taken at
 * submission, srv_number). */
static void srv_plan(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	const struct zl_wire_hdr *h = &r->req;
	struct zl_storage_vol *sv;
	const struct zl_slice *s;

	/* srv_check just loaded it: this does not block. */
	if (zl_storage_vol_lookup(st->vols, h->vol_id, &sv))
		return;
	s = &sv->v.slices[r->slice];
	if (st->heal && !r->planned && !zl_storage_heal_plan(st, &sv->v, r->slice, h->chunk, true))
		r->planned = true;
	r->n_bk = 0;
	for (uint8_t i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		enum zl_member_state ms = zl_slice_member_state(s, i);
		struct storage_bk *bk = &r->bk[r->n_bk];

		if (!strcmp(s->nodes[i], st->cfg.node_id) || r->n_bk >= ZL_MAX_REPLICAS - 1)
			continue;
		if (st->heal ? ms == ZL_MEMBER_OUT : !s->in_sync[i]) {
			if (st->heal)
				zl_storage_heal_fwd_skipped(st, &sv->v, r->slice, s->nodes[i],
							    h->chunk);
			continue;
		}
		/* First use of this entry by r: zeroed as req_alloc zeroes the
		 * rest (a later pass keeps what the entry holds, as before). */
		if (r->n_bk >= r->bk_init) {
			memset(bk, 0, sizeof(*bk));
			r->bk_init = r->n_bk + 1;
		}
		snprintf(bk->node, ZL_NODE_ID_MAX, "%s", s->nodes[i]);
		bk->in_sync = ms == ZL_MEMBER_IN_SYNC;
		if (st->heal)
			bk->versioned = zl_storage_heal_fwd_versioned(st, &sv->v, r->slice,
								      s->nodes[i], ms, h->chunk);
		r->n_bk++;
	}
}

/* ---- requests held while their slice peers (heal) ---- */

#define HOLD_CHECK_MS 10
#define HOLD_MAX_MS   5000
/* Requests held at once (each may hold a data buffer); beyond it a request
 * is answered ZL_ERR_PEERING at once. */
#define HOLD_MAX_REQS 64
/* Requests of client (not cluster) connections held for a volume load or
 * refresh at once; beyond it one is answered ZL_ERR_BUSY at once. A peer's
 * forward (REPL_WRITE, CHUNK_PUSH) is never refused for it: a BUSY would
 * make its primary report this node failed. Those are bounded by the
 * transport's slots per connection. HOLD_MAX_REQS bounds the peering
 * holds. */
#define HOLD_LOAD_MAX 16

static void srv_flush(struct storage_req *r)
{
	int rc = zl_chunk_flush(r->st->chunks, r->req.vol_id, srv_simple_done, r);

	if (rc)
		req_reply_free(r, rc, 0);
}

/* The checks of r again: 0 (go on), -ZL_ERR_PEERING, or another error. */
static int srv_recheck(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	struct zl_storage_vol *sv;
	uint32_t slice, cs;
	uint64_t ver;
	int rc;

	if (r->req.opcode == ZL_OP_CHUNK_VERSIONS)
		return zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv);
	if (r->req.opcode == ZL_OP_FLUSH) {
		rc = zl_storage_vol_lookup(st->vols, r->req.vol_id, &sv);
		if (!rc && r->req.epoch < srv_fence(st, sv, r->req.epoch))
			rc = -ZL_ERR_STALE;
		return rc ? rc : zl_storage_peering_vol_ready(st, &sv->v);
	}
	slice = UINT32_MAX;
	rc = srv_check(st, &r->req, r->vh, r->t0_ns / 1000000u, &slice, &ver, &cs);
	r->seen_ver = ver;
	if (r->loadwait && slice != UINT32_MAX) {
		/* Held before the record was known: now it is. */
		r->slice = slice;
		r->chunk_size = cs;
		r->loadwait = false;
	}
	if (!rc && slice != r->slice)
		rc = -ZL_ERR_STALE;
	return rc;
}

static void srv_chunk_versions(struct zl_storage *st, struct zl_xport_conn *c,
			       const struct zl_wire_hdr *h, bool warmed);

/* r passed its checks after waiting: run it. */
static void srv_resume(struct storage_req *r)
{
	r->held = false;
	switch (r->req.opcode) {
	case ZL_OP_CHUNK_VERSIONS: /* answered with a request of its own */
		srv_chunk_versions(r->st, r->conn, &r->req, false);
		r->nocount = true;
		req_free(r);
		return;
	case ZL_OP_FLUSH:
		srv_flush(r);
		return;
	case ZL_OP_READ:
		srv_read_start(r);
		return;
	case ZL_OP_REPL_WRITE:
	case ZL_OP_CHUNK_PUSH: /* a backup's part: no plan, no forwards */
		srv_exec(r);
		return;
	default:
		srv_plan(r);
		srv_exec(r);
	}
}

static void srv_held_check(void *arg)
{
	struct zl_storage *st = arg;
	struct storage_req *list = st->held, **tail = &st->held;

	/* Resumed requests may be held again: work on a detached list. */
	st->held = NULL;
	while (list) {
		struct storage_req *r = list;
		int rc = srv_recheck(r);

		list = r->park_next;
		st->n_held--;
		st->n_held_load -= r->hold_load;
		r->hold_load = false;
		if (!rc) {
			srv_resume(r);
			continue;
		}
		if ((rc != -ZL_ERR_PEERING && rc != -EINPROGRESS) || zl_now_ms() >= r->deadline_ms) {
			req_reply_free(r, rc, r->seen_ver);
			continue;
		}
		while (*tail)
			tail = &(*tail)->park_next;
		r->park_next = NULL;
		*tail = r;
		st->n_held++;
		r->hold_load = rc == -EINPROGRESS;
		st->n_held_load += r->hold_load;
	}
	if (!st->held)
		zl_timer_stop(st->loop, &st->held_t);
}

/* Holds r until its slice peered or its volume record came
 * (srv_held_check), HOLD_MAX_MS at most. r->hold_load: held for a load. */
static void srv_hold(struct storage_req *r)
{
	struct zl_storage *st = r->st;
	struct storage_req **tail;

	if (r->hold_load ? st->n_held_load >= HOLD_LOAD_MAX &&
				!zl_storage_auth_conn_trusted(st, r->conn)
			 : st->n_held - st->n_held_load >= HOLD_MAX_REQS) {
		req_reply_free(r, r->hold_load ? -ZL_ERR_BUSY : -ZL_ERR_PEERING, r->seen_ver);
		return;
	}
	if (!r->deadline_ms)
		r->deadline_ms = zl_now_ms() + HOLD_MAX_MS;
	/* At the tail: held writes resume in their order of arrival. */
	for (tail = &st->held; *tail; tail = &(*tail)->park_next)
		;
	r->park_next = NULL;
	*tail = r;
	st->n_held++;
	st->n_held_load += r->hold_load;
	zl_timer_start(st->loop, &st->held_t, HOLD_CHECK_MS, HOLD_CHECK_MS, srv_held_check, st);
}

/* ---- dispatch ---- */

static void srv_data(struct zl_storage *st, struct zl_xport_conn *c, const struct zl_wire_hdr *h,
		     struct zl_xport_payload *p)
{
	struct zl_storage_vol *sv;
	struct storage_req *r;
	uint32_t slice = 0, cs = 0;
	uint64_t ver, vh = zl_hash64(h->vol_id);
	int rc = srv_check(st, h, vh, 0, &slice, &ver, &cs);
	/* Client I/O of a slice that is peering waits for it, and any data
	 * request for its volume record from etcd (both bounded). */
	bool hold = rc == -ZL_ERR_PEERING || rc == -EINPROGRESS;

	if (rc && !hold)
		goto out_reply;
	r = req_alloc(st, c, h, vh);
	if (!r) {
		rc = -ENOMEM;
		goto out_reply;
	}
	r->slice = slice;
	r->seen_ver = ver;
	r->chunk_size = cs;
	r->held = hold;
	r->hold_load = r->loadwait = rc == -EINPROGRESS;
	if (h->opcode == ZL_OP_READ) {
		if (h->payload_len)
			zl_xport_discard(p);
		if (hold)
			srv_hold(r);
		else
			srv_read_start(r);
		return;
	}
	if (h->opcode == ZL_OP_REPL_WRITE && (h->flags & ZL_WF_DVER))
		r->dver = h->aux;
	if (h->opcode == ZL_OP_REPL_WRITE) {
		/* Its place among the chunk's writes: taken now, at arrival. */
		rc = srv_ord_add(r);
		if (rc) {
			r->failed = true;
			req_free(r);
			goto out_reply;
		}
	}
	if (h->opcode == ZL_OP_REPL_WRITE && !zl_storage_vol_lookup(st->vols, h->vol_id, &sv) &&
	    h->epoch < srv_fence(st, sv, h->epoch))
		r->fenced = srv_fence(st, sv, h->epoch);
	if (!hold && h->opcode != ZL_OP_REPL_WRITE && h->opcode != ZL_OP_CHUNK_PUSH)
		srv_plan(r);
	if (r->op != ZL_OP_WRITE && r->op != ZL_OP_CHUNK_PUSH) {
		srv_exec(r);
		return;
	}
	r->buf = zl_xport_buf_alloc(st->xport, h->length);
	if (!r->buf) {
		zl_xport_discard(p);
		req_reply_free(r, -ZL_ERR_BUSY, ver);
		return;
	}
	rc = zl_xport_fetch_crcs(p, r->buf, h->length, srv_crcs(r, h->offset, h->length),
				 srv_fetch_done, r);
	if (rc) {
		r->failed = true;
		req_free(r);
	}
	return;

out_reply:
	if (h->payload_len)
		zl_xport_discard(p);
	srv_reply(st, c, h, rc, ver, 0);
}

/* The chunks a CHUNK_VERSIONS request looks at are open: answered. */
static void srv_versions_warmed(struct storage_req *r)
{
	srv_chunk_versions(r->st, r->conn, &r->req, true);
	r->nocount = true;
	req_free(r);
}

/* CHUNK_VERSIONS (heal): the (chunk, version) pairs of slice h->offset
 * above h->aux from chunk h->chunk on, one bounded page per request.
 * warmed: the chunks were opened for it (a second warm could chase an
 * eviction: the look-up reads what is still closed). */
static void srv_chunk_versions(struct zl_storage *st, struct zl_xport_conn *c,
			       const struct zl_wire_hdr *h, bool warmed)
{
	struct zl_wire_chunk_ver pairs[ZL_WIRE_VERS_MAX];
	struct zl_storage_vol *sv;
	struct storage_req *r;
	struct zl_wire_hdr rep;
	uint64_t next = 0;
	int n = zl_storage_vol_lookup(st->vols, h->vol_id, &sv);

	/* A record on its way from etcd: a peer's peering or recovery waits
	 * for it rather than failing its attempt. */
	if (n == -EINPROGRESS) {
		r = req_alloc(st, c, h, zl_hash64(h->vol_id));
		if (r) {
			r->hold_load = true;
			srv_hold(r);
			return;
		}
		n = -ZL_ERR_BUSY;
	}
	/* A row naming another incarnation of ours: we hold nothing of it. */
	if (!n && h->offset < sv->v.n_slices &&
	    !zl_storage_ident_member_ok(
		st, &sv->v.slices[h->offset],
		zl_slice_index_of(&sv->v.slices[h->offset], st->cfg.node_id)))
		n = 0;
	else if (!n) {
		/* Closed chunks are opened off the loop first (a member just
		 * restarted answers every primary's peering and recovery). */
		r = warmed ? NULL : req_alloc(st, c, h, zl_hash64(h->vol_id));
		if (r) {
			r->warm_resume = srv_versions_warmed;
			r->warming = (unsigned)zl_storage_heal_versions_warm(
			    st, &sv->v, h->offset, h->chunk, srv_warm_cb, r);
			if (r->warming)
				return;
			r->nocount = true;
			req_free(r);
		}
		n = zl_storage_heal_versions(st, &sv->v, h->offset, h->chunk, h->aux, pairs,
					     ZL_WIRE_VERS_MAX, &next);
	}
	if (n < 0) {
		srv_reply(st, c, h, n, 0, 0);
		return;
	}
	r = req_alloc(st, c, h, zl_hash64(h->vol_id));
	if (r)
		r->buf = zl_xport_buf_alloc(st->xport, ZL_WIRE_MAX_CTRL);
	if (!r || !r->buf) {
		if (r)
			req_free(r);
		srv_reply(st, c, h, -ZL_ERR_BUSY, 0, 0);
		return;
	}
	zl_wire_chunk_vers_encode(pairs, (uint32_t)n, r->buf);
	zl_wire_reply_init(h, &rep, 0);
	rep.aux = next;
	rep.payload_len = (uint32_t)n * ZL_WIRE_CHUNK_VER_SIZE;
	if (zl_xport_reply(c, &rep, r->buf, rep.payload_len, req_sent_cb, r))
		req_free(r);
}

static void srv_vol_deleted(void *arg, int status, uint64_t removed)
{
	struct storage_req *r = arg;

	ZL_LOG_INFO("storage",
		    "volume replicas deleted: vol=%016" PRIx64 " files=%" PRIu64 " err=%s",
		    r->req.vol_id, removed, zl_errname(status));
	req_reply_free(r, status, 0);
}

static void srv_on_request(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *hdr,
			   struct zl_xport_payload *p)
{
	struct zl_storage *st = arg;
	struct zl_wire_hdr hc = *hdr;
	const struct zl_wire_hdr *h = &hc;
	struct zl_storage_vol *sv;
	struct storage_req *r;
	uint64_t n = 0;
	bool close;
	int rc;

	if (st->draining) {
		/* Shutting down: the client retries elsewhere on a closed connection. */
		if (h->payload_len)
			zl_xport_discard(p);
		zl_xport_conn_close(c);
		return;
	}
	/* --auth on: who may ask what (docs/SECURITY.md); a client's epoch is
	 * the one its HELLO proved. */
	rc = zl_storage_auth_check(st, c, &hc, &close);
	if (rc) {
		if (h->payload_len)
			zl_xport_discard(p);
		zl_storage_auth_refuse(st, c, h, rc, close);
		return;
	}
	switch (h->opcode) {
	case ZL_OP_READ:
	case ZL_OP_WRITE:
	case ZL_OP_DISCARD:
	case ZL_OP_WRITE_ZEROES:
	case ZL_OP_REPL_WRITE:
		srv_data(st, c, h, p);
		return;
	case ZL_OP_CHUNK_PUSH:
		if (!st->heal)
			break;
		srv_data(st, c, h, p);
		return;
	case ZL_OP_CHUNK_VERSIONS:
		if (!st->heal)
			break;
		srv_chunk_versions(st, c, h, false);
		return;
	case ZL_OP_CHUNK_DIGEST: /* storage_scrub.c */
		zl_storage_scrub_digest_serve(st, c, h);
		return;
	case ZL_OP_SCRUB:
		zl_storage_scrub_serve(st, c, h);
		return;
	case ZL_OP_HELLO:
		r = req_alloc(st, c, h, zl_hash64(h->vol_id));
		if (!r) {
			zl_xport_discard(p);
			/* No HELLO pending any more (the auth state says so). */
			zl_storage_auth_hello(st, c, h, NULL);
			srv_reply(st, c, h, -ZL_ERR_BUSY, 0, 0);
			return;
		}
		if (zl_xport_fetch(p, r->small, ZL_WIRE_HELLO_SIZE, srv_fetch_done, r))
			req_free(r);
		return;
	case ZL_OP_PING:
		srv_reply(st, c, h, 0, 0, 0);
		return;
	case ZL_OP_FLUSH:
		rc = zl_storage_vol_lookup(st->vols, h->vol_id, &sv);
		if (!rc && h->epoch < srv_fence(st, sv, h->epoch))
			rc = -ZL_ERR_STALE;
		/* heal: after the slices this node is primary of peered. */
		if (!rc && st->heal)
			rc = zl_storage_peering_vol_ready(st, &sv->v);
		if (!rc || rc == -ZL_ERR_PEERING || rc == -EINPROGRESS) {
			r = req_alloc(st, c, h, zl_hash64(h->vol_id));
			if (r)
				r->hold_load = rc == -EINPROGRESS;
			if (r && rc)
				srv_hold(r);
			else if (r)
				srv_flush(r);
			if (r)
				return;
			rc = -ENOMEM;
		}
		srv_reply(st, c, h, rc, 0, 0);
		return;
	case ZL_OP_CHUNK_INFO:
		rc = zl_chunk_info(st->chunks, h->vol_id, h->chunk, &n);
		srv_reply(st, c, h, rc, 0, n);
		return;
	case ZL_OP_CHUNK_DELETE:
		rc = zl_chunk_delete(st->chunks, h->vol_id, h->chunk);
		srv_reply(st, c, h, rc, 0, 0);
		return;
	case ZL_OP_VOLUME_DELETE:
		/* Answered once the files are gone (an open worker removes
		 * them); the replicas are gone for everyone at once. */
		r = req_alloc(st, c, h, zl_hash64(h->vol_id));
		rc = r ? zl_chunk_volume_delete_start(st->chunks, h->vol_id, srv_vol_deleted, r)
		       : -ENOMEM;
		zl_storage_vol_forget(st->vols, h->vol_id);
		zl_storage_peering_forget(st, h->vol_id);
		if (!rc)
			return;
		if (r)
			req_free(r);
		srv_reply(st, c, h, rc == -ENOMEM ? -ZL_ERR_BUSY : rc, 0, 0);
		return;
	default:
		break;
	}
	if (h->payload_len)
		zl_xport_discard(p);
	srv_reply(st, c, h, -ZL_ERR_INVAL, 0, 0);
}

/* Connections open at once; beyond it a new one is closed at once. */
#define SRV_MAX_CONNS 4096u

static void srv_on_conn(void *arg, struct zl_xport_conn *c)
{
	struct zl_storage *st = arg;
	struct zl_ratelimit *rl;

	if (++st->n_conns > SRV_MAX_CONNS) {
		if (zl_ratelimit_ok(&st->conn_rl, 1)) {
			ZL_LOG_WARN("storage",
				    "connection refused: %u connections open, the limit peer=%s "
				    "transport=%s (%u more not logged)",
				    SRV_MAX_CONNS, zl_xport_conn_peer(c),
				    zl_xport_kind_name(zl_xport_conn_kind(c)), st->conn_rl.suppressed);
			st->conn_rl.suppressed = 0;
		}
		zl_xport_conn_close(c);
		return;
	}
	zl_storage_auth_conn_open(st, c);
	/* One line per second and transport at most: a flood of connections is
	 * no flood of log lines. */
	rl = &st->accept_rl[zl_xport_conn_kind(c) == ZL_XPORT_RDMA];
	if (zl_ratelimit_ok(rl, 1)) {
		ZL_LOG_INFO("storage", "connection accepted: peer=%s transport=%s open=%u (%u more "
				       "accepted, not logged)",
			    zl_xport_conn_peer(c), zl_xport_kind_name(zl_xport_conn_kind(c)),
			    st->n_conns, rl->suppressed);
		rl->suppressed = 0;
	}
}

static void srv_on_close(void *arg, struct zl_xport_conn *c, int reason)
{
	struct zl_storage *st = arg;

	st->n_conns--;
	zl_storage_auth_conn_free(c);
	ZL_LOG_DEBUG("storage", "connection closed: peer=%s reason=%s", zl_xport_conn_peer(c),
		     zl_errname(reason));
}

static const struct zl_xport_server_ops srv_ops = {
    .on_conn = srv_on_conn,
    .on_request = srv_on_request,
    .on_close = srv_on_close,
};

int zl_storage_server_start(struct zl_storage *st)
{
	int rc;

	zl_slab_init(&st->reqs, sizeof(struct storage_req), REQ_SLAB);
	st->ord = calloc(1, sizeof(*st->ord));
	if (!st->ord)
		return -ENOMEM;
	rc = zl_storage_fair_create(&st->cfg.fair, srv_fair_run, st, &st->fair);
	if (rc)
		return rc;
	rc = zl_xport_listen(st->xport_tcp, st->cfg.listen_host, st->cfg.listen_port, &srv_ops, st,
			     &st->listener);
	if (rc) {
		st->listener = NULL;
		return rc;
	}
	if (!st->xport_rdma)
		return 0;
	/* rdma_cm ports are a space of their own: take the TCP port number
	 * (the one the kernel picked when --listen said port 0). */
	rc =
	    zl_xport_listen(st->xport_rdma, st->cfg.listen_host,
			    zl_xport_listener_port(st->listener), &srv_ops, st, &st->listener_rdma);
	if (rc) {
		/* The TCP listener stays (the caller tells the two failures
		 * apart by it); zl_storage_server_stop_accepting closes it. */
		st->listener_rdma = NULL;
		return rc;
	}
	return 0;
}

void zl_storage_server_stop_accepting(struct zl_storage *st)
{
	st->draining = true;
	/* Parked writes are not acknowledged: the client retries them. */
	while (st->parked) {
		struct storage_req *r = st->parked;

		st->parked = r->park_next;
		req_reply_free(r, -ZL_ERR_UNAVAIL, r->seen_ver);
	}
	while (st->held) {
		struct storage_req *r = st->held;

		st->held = r->park_next;
		st->n_held--;
		st->n_held_load -= r->hold_load;
		req_reply_free(r, -ZL_ERR_PEERING, r->seen_ver);
	}
	if (st->loop) {
		zl_timer_stop(st->loop, &st->park_t);
		zl_timer_stop(st->loop, &st->held_t);
	}
	if (st->listener) {
		zl_xport_listener_close(st->listener);
		st->listener = NULL;
	}
	if (st->listener_rdma) {
		zl_xport_listener_close(st->listener_rdma);
		st->listener_rdma = NULL;
	}
}
