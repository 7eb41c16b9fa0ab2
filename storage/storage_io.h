/* zipline-storage, the data path: who may send requests (auth), the volume
 * cache the request path looks rows up in, the requests forwarded to other
 * storage nodes, and the request handling itself. Loop thread only. */
#ifndef ZL_STORAGE_IO_H
#define ZL_STORAGE_IO_H

#include "storage.h"

/* ---- authentication (storage_auth.c, docs/SECURITY.md) ---- */

/* Loads the cluster key (fatal with --auth on only) and, with --auth on,
 * the persisted epochs, then lists and watches attachments/ and secrets/.
 * 0 or an error (logged). */
int zl_storage_auth_start(struct zl_storage *st);
void zl_storage_auth_stop(struct zl_storage *st);
/* This daemon's cluster token (for HELLOs to peers) into out: 0, or
 * -ZL_ERR_NOT_FOUND without a cluster key (out is ""). */
int zl_storage_auth_token(const struct zl_storage *st, char out[65]);
/* The attach epoch writes of vol are fenced below (the watched attachment,
 * the persisted maximum); 0 with --auth off. Loop thread: its own copy of
 * the watched records, no lock. */
uint64_t zl_storage_auth_fence(struct zl_storage *st, uint64_t vol);
/* Checks a HELLO (h its header, hl its payload, NULL when it did not
 * decode: -ZL_ERR_PROTO) and binds the connection: 0, -ZL_ERR_AUTH,
 * -ZL_ERR_STALE, -ZL_ERR_BUSY. Always 0 (for a decoded hl) with --auth off. */
int zl_storage_auth_hello(struct zl_storage *st, struct zl_xport_conn *c,
			  const struct zl_wire_hdr *h, const struct zl_wire_hello *hl);
/* Whether the connection may make request h; on a client connection sets
 * h->epoch to the proven one. 0, -ZL_ERR_BUSY (a HELLO is still being
 * fetched) or -ZL_ERR_AUTH (*close: answer, then close the connection: no
 * valid HELLO came). */
int zl_storage_auth_check(struct zl_storage *st, struct zl_xport_conn *c, struct zl_wire_hdr *h,
			  bool *close);
/* Answers h with err, then closes c when close. */
void zl_storage_auth_refuse(struct zl_storage *st, struct zl_xport_conn *c,
			    const struct zl_wire_hdr *h, int err, bool close);
/* A request on c is answered err (not 0): counts it against the
 * connection's budget of refused requests (not on cluster connections, and
 * not transient errors). True when the budget is spent: answer, then close
 * c (zl_storage_auth_refuse with close); logged, rate-limited. */
bool zl_storage_auth_charge(struct zl_xport_conn *c, const struct zl_wire_hdr *h, int err);
/* Whether c is a cluster connection (a peer, the manager, an operator), or
 * --auth is off: no client budget applies. */
bool zl_storage_auth_conn_trusted(const struct zl_storage *st, struct zl_xport_conn *c);
/* A connection was accepted (--auth on): it must prove itself with a HELLO
 * within 10 s or it is closed. */
void zl_storage_auth_conn_open(struct zl_storage *st, struct zl_xport_conn *c);
/* Frees the connection's auth state (its close callback). */
void zl_storage_auth_conn_free(struct zl_xport_conn *c);

/* ---- volume cache (storage_vol.c), loop thread only ---- */

/* This node in one slice's row: its index (zl_slice_index_of, -1: not a
 * member) and whether the row names our incarnation for it
 * (zl_storage_ident_inc_ok). */
struct zl_storage_vol_self {
	int8_t idx;
	bool ident_ok;
};

struct zl_storage_vol {
	struct zl_storage_vol *next;
	uint64_t num;
	struct zl_volume v;
	/* Per slice of v, computed whenever v is set (NULL: no memory, or no
	 * self given to zl_storage_vols_set_self; looked up per request). */
	struct zl_storage_vol_self *me;
	uint64_t max_epoch; /* highest attach epoch seen (memory only) */
	uint64_t refresh_ms; /* when the last refresh (zl_storage_vol_refresh) started */
	bool refreshing;     /* a refresh is on the loader thread */
	uint32_t seen_gen;   /* the watch's last resync that listed it (storage_vol.c) */
	/* Client READs [0] and writes [1] (WRITE, WRITE_ZEROES, DISCARD) this
	 * node answered for the volume: count, bytes, summed latency. */
	uint64_t m_ops[2], m_bytes[2], m_ns[2];
	/* Its disk operations that waited for its fair share (storage_fair.c). */
	uint64_t m_fair_queued;
};

/* Limits of the request path's lookups (docs/SECURITY.md). */
struct zl_storage_vols_limits {
	uint32_t neg_ms;       /* an absent volume is answered NOT_FOUND that long */
	uint32_t err_ms;       /* a load that failed (etcd down): retried after that */
	uint32_t load_per_sec; /* loads and refreshes from etcd: token bucket rate */
	uint32_t load_burst;   /* ... and its depth */
	uint32_t load_queue;   /* loads queued or running at once */
	uint32_t refresh_ms;   /* one refresh per volume per that many ms */
	uint32_t miss_max;     /* entries of the negative cache */
};

/* What the request path's lookups did (counters since start). */
struct zl_storage_vols_stats {
	uint64_t loads;	    /* etcd loads started (misses and refreshes) */
	uint64_t refreshes; /* of them, refreshes of a cached volume */
	uint64_t neg_hits;  /* answered from the negative cache */
	uint64_t throttled; /* answered BUSY / STALE: bucket empty or queue full */
	uint64_t events;    /* watch events of volumes/ applied */
	uint32_t negative;  /* entries in the negative cache now */
};

/* Returns 0 or -errno. loop, etcd and prefix are borrowed; eo (NULL: share
 * etcd) gives the loader thread an etcd handle of its own. Starts a watch on
 * <prefix>volumes/ (etcd NULL: none) that refreshes (or drops) cached
 * records. */
int zl_storage_vols_create(struct zl_loop *loop, struct zl_etcd *etcd,
			   const struct zl_etcd_opts *eo, const char *prefix,
			   struct zl_storage_vols **out);
void zl_storage_vols_destroy(struct zl_storage_vols *vc);
void zl_storage_vols_limits_default(struct zl_storage_vols_limits *l);
void zl_storage_vols_set_limits(struct zl_storage_vols *vc, const struct zl_storage_vols_limits *l);
void zl_storage_vols_stats(const struct zl_storage_vols *vc, struct zl_storage_vols_stats *out);
/* The request path's lookup, never blocking: 0 with the cached record in
 * *out; -ZL_ERR_NOT_FOUND (or the etcd error of a failed load) from the
 * negative cache; -EINPROGRESS when a load is on the loader thread (ask
 * again once it answered); -ZL_ERR_BUSY when loads are throttled. */
int zl_storage_vol_lookup(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out);
/* The cached entry of num or NULL: no load, no side effect. */
struct zl_storage_vol *zl_storage_vol_peek(struct zl_storage_vols *vc, uint64_t num);
/* The same two with hash = zl_hash64(num) from the caller: a data request
 * hashes its volume once, for these and its fair-share flow. */
int zl_storage_vol_lookup_h(struct zl_storage_vols *vc, uint64_t num, uint64_t hash,
			    struct zl_storage_vol **out);
struct zl_storage_vol *zl_storage_vol_peek_h(struct zl_storage_vols *vc, uint64_t num,
					     uint64_t hash);
/* This node's id and incarnation (copied), for zl_storage_vol_me: set before
 * the first load. */
void zl_storage_vols_set_self(struct zl_storage_vols *vc, const char *node_id,
			      const char *incarnation);
/* This node's index in the row of `slice` (< sv->v.n_slices) of sv, -1 when
 * not a member: zl_slice_index_of(row, node_id), from sv->me when there. */
int zl_storage_vol_me(const struct zl_storage_vol *sv, uint32_t slice, const char *node_id);
/* zl_storage_ident_inc_ok(row of slice, idx, incarnation) for idx the
 * zl_storage_vol_me of slice, from sv->me when there. */
bool zl_storage_vol_ident_ok(const struct zl_storage_vol *sv, uint32_t slice, int idx,
			     const char *incarnation);
/* Whether member idx of row s is the data dir of incarnation: the row names
 * none for it, incarnation is "", or they match (true for idx < 0). */
bool zl_storage_ident_inc_ok(const struct zl_slice *s, int idx, const char *incarnation);
/* Calls fn for every cached volume (fn must not change the cache). */
void zl_storage_vols_foreach(struct zl_storage_vols *vc,
			     void (*fn)(void *arg, const struct zl_storage_vol *sv), void *arg);
/* A request showed a newer slice version than sv holds: -EINPROGRESS when a
 * refresh from etcd is on its way (started now or earlier; look again once
 * it answered), -ZL_ERR_STALE when refreshes of sv are throttled (sv stands). */
int zl_storage_vol_refresh(struct zl_storage_vols *vc, struct zl_storage_vol *sv);
/* The cached record of volume num, or NULL: never a load. */
struct zl_storage_vol *zl_storage_vol_cached(struct zl_storage_vols *vc, uint64_t num);
/* Replaces the cached record by *fresh (moved: fresh is zeroed) when it is
 * newer (mod_rev). */
void zl_storage_vol_update(struct zl_storage_vols *vc, struct zl_volume *fresh);
void zl_storage_vol_forget(struct zl_storage_vols *vc, uint64_t num);
/* fn(arg, record) runs on the loop thread when a record enters the cache
 * and when a cached record lost a snapshot (its snaps shrank): the clone
 * chunks the remaining snapshots no longer need may go (storage_snapgc.c).
 * fn must not change the cache. */
typedef void (*zl_storage_vols_snaps_fn)(void *arg, const struct zl_volume *v);
void zl_storage_vols_on_snaps(struct zl_storage_vols *vc, zl_storage_vols_snaps_fn fn, void *arg);
/* fn(arg, record) runs on the loop thread for every record the volumes/
 * watch brings, cached or not, before the cache takes it: healing learns
 * of a volume nobody asked this daemon about (storage_heal.c). The record
 * may have no slices. fn must not change the cache. */
void zl_storage_vols_on_watch(struct zl_storage_vols *vc, zl_storage_vols_snaps_fn fn, void *arg);

/* ---- forwarding: requests to other storage nodes (storage_fwd.c), loop thread only ---- */

/* Starts the look-up thread (its own etcd handle, st->cfg.eo). Returns 0
 * or -errno. */
int zl_storage_fwd_create(struct zl_storage *st, struct zl_storage_fwd **out);
/* Waits for a look-up in progress, closes every peer connection (in-flight
 * and queued requests fail). Accepts NULL. */
void zl_storage_fwd_destroy(struct zl_storage_fwd *p);
/* Sends a request to node_id without waiting: with no connection to it, the
 * node's address is looked up on the helper thread and the request queues
 * until the connection is being made. Returns 0 (cb runs once, never inside
 * this call: with -ZL_ERR_CONN, or -ZL_ERR_NOT_FOUND when the node is not
 * registered, if its look-up or connect fails) or, with no callback,
 * -ZL_ERR_CONN (the last connect to it failed less than a second ago) /
 * -ZL_ERR_BUSY (too many requests wait for the look-up). */
int zl_storage_fwd_send(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
			 const void *out, uint32_t out_len, zl_xport_reply_cb cb, void *arg);
/* zl_storage_fwd_send of whole 4 KiB pieces whose CRC32Cs are out_crcs (as
 * they were verified on arrival): no second pass over the data
 * (zl_xport_request_crcs). out_crcs, like out, stays valid until cb (a
 * request waiting for its node's look-up is sealed when it goes out). */
int zl_storage_fwd_send_crcs(struct zl_storage_fwd *p, const char *node_id,
			      struct zl_wire_hdr *hdr, const void *out, uint32_t out_len,
			      const uint32_t *out_crcs, zl_xport_reply_cb cb, void *arg);
/* zl_storage_fwd_send with a buffer for the reply's payload (in_cap bytes,
 * valid until cb). Returns as zl_storage_fwd_send. */
int zl_storage_fwd_request(struct zl_storage_fwd *p, const char *node_id,
			    struct zl_wire_hdr *hdr, const void *out, uint32_t out_len, void *in,
			    uint32_t in_cap, zl_xport_reply_cb cb, void *arg);

/* A peer's room (docs/REPLICATION.md §9): a storage node whose data dir is
 * near full says so in its replies to REPL_WRITE and PING
 * (ZL_REPLY_NEAR_FULL). zl_storage_fwd_note_room records what such a reply
 * said (srv_bk_done). zl_storage_fwd_full: whether node_id's last word was
 * near full; while one is, each such node that no reply refreshed for a
 * second is asked again with a PING (a node whose rows stopped forwarding
 * new space to it is seen to have room again within about 2 s).
 * zl_storage_fwd_any_full: whether any node's is (one load: the write
 * path's test while none is). Loop thread. */
void zl_storage_fwd_note_room(struct zl_storage_fwd *p, const char *node_id, bool near_full);
bool zl_storage_fwd_full(struct zl_storage_fwd *p, const char *node_id);
bool zl_storage_fwd_any_full(const struct zl_storage_fwd *p);
/* How many nodes' last word was near full (metrics). */
uint32_t zl_storage_fwd_n_full(const struct zl_storage_fwd *p);

/* ---- transports (storage_xport.c) ---- */

/* Creates the transports --transport asks for: TCP always; RDMA too with
 * "rdma" (required) or "auto" (when an RDMA device serves the listen
 * address; any device for a wildcard address). Sets st->xport_tcp, st->xport_rdma,
 * st->xport and st->sel. Returns 0, or -ENODEV after
 * printing why RDMA is not possible when it was required, or another error. */
int zl_storage_xports_create(struct zl_storage *st);

/* ---- request handling (storage_server.c) ---- */

/* Listens on cfg.listen_host:listen_port over TCP, and over RDMA (same port
 * number: rdma_cm has its own port space) when st->xport_rdma is set.
 * Returns 0 or -errno: st->listener is NULL when TCP failed, set when RDMA
 * failed (zl_storage_server_stop_accepting closes it). */
int zl_storage_server_start(struct zl_storage *st);
/* Stops accepting new connections; in-flight requests go on. */
void zl_storage_server_stop_accepting(struct zl_storage *st);
/* Frees the request slabs (after the loop stopped). */
void zl_storage_server_fini(struct zl_storage *st);

#endif
