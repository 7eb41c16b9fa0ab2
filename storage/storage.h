/* zipline-storage internals shared by its files (main, server, repl, vol,
 * node). Nothing outside storage/ includes this header.
 *
 * Threads: the loop thread owns everything below except struct
 * zl_storage_node, which runs the heartbeat on its own thread with its own
 * etcd handle. */
#ifndef ZL_STORAGE_H
#define ZL_STORAGE_H

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/common/slab.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/transport/transport.h"
#include "lib/transport/xport_hello.h"
#include "lib/wire/wire.h"
#include "storage_chunk.h"

struct zl_storage_cfg {
	const char *data_dir;
	char listen_host[64];
	uint16_t listen_port;
	char advertise[64];
	char node_id[ZL_NODE_ID_MAX];
	char domain[128]; /* labels joined by "," */
	const char *etcd;
	const char *etcd_cacert; /* TLS and auth for etcd, all optional */
	const char *etcd_cert;
	const char *etcd_key;
	const char *etcd_user;
	char etcd_password[256]; /* read from --etcd-password-file */
	const char *transport;	 /* auto|tcp|rdma */
	const char *prefix;
	uint64_t capacity; /* 0: filesystem size */
	int etcd_wait_sec;
	/* --heal=on (docs/REPLICATION.md, S1-S3): data versions, forwarding to
	 * recovering members, failure reports instead of drops, recovery. Off:
	 * the 0.1 behaviour, exactly. */
	bool heal;
	uint32_t repl_wait_ms;	/* --repl-wait: bound of a write parked on a row change */
	uint32_t recovery_mbps; /* --recovery-mbps: megabits/s of recovery copies */
	uint32_t scrub_mbps;	   /* --scrub-mbps: megabits/s a scrub reads (default 100) */
	uint32_t scrub_interval_s; /* --scrub-interval: background scrub period, 0 = off */
	uint32_t gc_interval_s;	   /* --gc-interval: old-copy removal period, 0 = off */
	uint32_t gc_grace_s;	   /* --gc-grace: a row off this node that long, then removed */
	/* Identity of the data dir (storage_ident.c), set by
	 * zl_storage_ident_resolve before anything touches the disk. */
	char cluster_id[ZL_META_ID_SIZE];
	char incarnation[ZL_META_ID_SIZE];
	/* --auth on|off (docs/SECURITY.md) and --cluster-key-file (else the
	 * key <prefix>keys/cluster in etcd). */
	bool auth;
	const char *cluster_key_file;
	/* --tls-cert/--tls-key (serve TLS only, published as "tls" in the node
	 * record), --tls-ca (verify peers that serve TLS), --tls-server-name
	 * (the name their certificates carry; default: their address). */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	const char *tls_server_name;
};

struct zl_storage_vols;
struct zl_storage_fwd;
struct zl_storage_node;
struct zl_storage_tombs;
struct zl_storage_heal;
struct zl_storage_peering;
struct zl_storage_scrub;
struct storage_req;
struct zl_storage_auth;

struct zl_storage {
	struct zl_storage_cfg cfg;
	struct zl_loop *loop;
	/* Buffer pool of the chunk store and request buffers: the RDMA
	 * transport when there is one (registered memory; TCP takes any),
	 * else the TCP one. Not owned: it is xport_tcp or xport_rdma. */
	struct zl_xport *xport;
	struct zl_xport *xport_tcp;  /* always */
	struct zl_xport *xport_rdma; /* NULL when not serving RDMA */
	enum zl_xport_select sel;    /* --transport */
	struct zl_xport_listener *listener;	 /* TCP */
	struct zl_xport_listener *listener_rdma; /* NULL without RDMA */
	struct zl_etcd *etcd; /* loop thread's handle */
	struct zl_chunk_store *chunks;
	struct zl_storage_vols *vols;
	struct zl_storage_fwd *fwd; /* connections to other storage nodes (storage_fwd.c) */
	struct zl_storage_tombs *tombs;
	struct zl_slab reqs; /* request contexts (storage_server.c) */
	uint32_t inflight; /* requests not yet answered */
	uint32_t n_conns;  /* connections served now (storage_server.c) */
	/* Their log lines: accepted ones per transport (TCP, RDMA), refused. */
	struct zl_ratelimit accept_rl[2], conn_rl;
	bool draining;
	struct zl_storage_heal *heal; /* NULL with --heal=off */
	struct zl_storage_scrub *scrub; /* storage_scrub.c */
	/* Writes waiting for a row change (--heal=on, storage_server.c),
	 * checked against the watch-refreshed volume cache by park_t. */
	struct storage_req *parked;
	struct zl_timer park_t;
	/* Peering (storage_peering.c, NULL with --heal=off) and the client
	 * requests held while their slice peers (storage_server.c), checked
	 * by held_t. */
	struct zl_storage_peering *peering;
	struct storage_req *held;
	uint32_t n_held;
	uint32_t n_held_load; /* of them, waiting for a volume record load */
	struct zl_timer held_t;
	struct zl_storage_status *status; /* NULL with --heal=off */
	struct zl_storage_gc *gc; /* old copies of moved slices (storage_gc.c) */
	struct zl_storage_auth *auth; /* storage_auth.c */
};

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

struct zl_storage_vol {
	struct zl_storage_vol *next;
	uint64_t num;
	struct zl_volume v;
	uint64_t max_epoch; /* highest attach epoch seen (memory only) */
	uint64_t refresh_ms; /* when the last refresh (zl_storage_vol_refresh) started */
	bool refreshing;     /* a refresh is on the loader thread */
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
/* A request showed a newer slice version than sv holds: -EINPROGRESS when a
 * refresh from etcd is on its way (started now or earlier; look again once
 * it answered), -ZL_ERR_STALE when refreshes of sv are throttled (sv stands). */
int zl_storage_vol_refresh(struct zl_storage_vols *vc, struct zl_storage_vol *sv);
/* Cached record of volume num, loaded from etcd on a miss (blocking: the
 * daemon's own jobs only, never a network request). 0, -ZL_ERR_NOT_FOUND,
 * or an etcd error. *out stays valid until the next call that reloads or
 * forgets this volume. */
int zl_storage_vol_get(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out);
/* Reloads volume num from etcd (blocking); on -ZL_ERR_NOT_FOUND the entry is
 * dropped. 0 with the fresh entry in *out (optional), or an error. */
int zl_storage_vol_reload(struct zl_storage_vols *vc, uint64_t num, struct zl_storage_vol **out);
/* Replaces the cached record by *fresh (moved: fresh is zeroed) when it is
 * newer (mod_rev). */
void zl_storage_vol_update(struct zl_storage_vols *vc, struct zl_volume *fresh);
void zl_storage_vol_forget(struct zl_storage_vols *vc, uint64_t num);

/* ---- forwarding: requests to other storage nodes (storage_fwd.c), loop thread only ---- */

/* Returns 0 or -ENOMEM. */
int zl_storage_fwd_create(struct zl_storage *st, struct zl_storage_fwd **out);
/* Closes every peer connection (in-flight requests fail). Accepts NULL. */
void zl_storage_fwd_destroy(struct zl_storage_fwd *p);
/* Sends a request to node_id, connecting (blocking, bounded) when needed.
 * Returns 0 (cb runs once, never inside this call) or -ZL_ERR_CONN /
 * -ZL_ERR_BUSY / -ZL_ERR_NOT_FOUND (node not registered) with no callback. */
int zl_storage_fwd_send(struct zl_storage_fwd *p, const char *node_id, struct zl_wire_hdr *hdr,
			 const void *out, uint32_t out_len, zl_xport_reply_cb cb, void *arg);
/* zl_storage_fwd_send with a buffer for the reply's payload (in_cap bytes,
 * valid until cb). Returns as zl_storage_fwd_send. */
int zl_storage_fwd_request(struct zl_storage_fwd *p, const char *node_id,
			    struct zl_wire_hdr *hdr, const void *out, uint32_t out_len, void *in,
			    uint32_t in_cap, zl_xport_reply_cb cb, void *arg);

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

/* ---- healing (storage_heal.c), loop thread, --heal=on only ----
 *
 * The primary of a slice numbers its writes (zl_wire_dver_make(term, seq)),
 * and tells each member whether its copy of a chunk is known complete: only
 * then does the member's chunk version grow with a forwarded write (else it
 * is sent version 0, which keeps the member's version, so recovery still
 * sees the chunk as behind). A member's chunk version v therefore always
 * means "holds every write up to v", and recovery copies exactly the chunks
 * whose version differs from the primary's (below it, or above it: a write
 * the old primary applied but never acknowledged, rolled back). */

/* A pushed copy of version `pushed` replaces a member's chunk of version
 * `own` only when it is newer: a copy never overwrites a newer write. */
static inline bool zl_storage_push_applies(uint64_t own, uint64_t pushed)
{
	return own < pushed;
}

/* The version a member's chunk gets from a piece of a chunk copy: the
 * pushed version on the piece that ends the chunk, 0 (keep the old one)
 * before, so a copy cut short by a crash is copied again. */
static inline uint64_t zl_storage_push_piece_version(uint32_t off, uint32_t len,
						     uint32_t chunk_size, uint64_t pushed)
{
	return (uint64_t)off + len == chunk_size ? pushed : 0;
}

/* Whether a CHUNK_PUSH of version `pushed` applies over a copy of version
 * `own`: with `replace` (subop ZL_PUSH_REPLACE to a member that is not
 * IN_SYNC) whenever the versions differ, so a newer, never-acknowledged
 * write is rolled back to the primary's copy; else only over an older copy. */
static inline bool zl_storage_push_accepts(uint64_t own, uint64_t pushed, bool replace)
{
	return replace ? own != pushed : zl_storage_push_applies(own, pushed);
}

/* Creates st->heal and starts the recovery tick. 0 or -ENOMEM. */
int zl_storage_heal_start(struct zl_storage *st);
/* Stops recovery: the tick stops and no new step starts (steps in flight
 * end in their callbacks). Call before the peers and the chunk store go.
 * Accepts st->heal == NULL. */
void zl_storage_heal_stop(struct zl_storage *st);
/* Frees st->heal once no callback can come (after the peers and the chunk
 * store, before the transports). Accepts st->heal == NULL. */
void zl_storage_heal_destroy(struct zl_storage *st);
/* The next data version of a write to `slice` of v on this primary. The
 * first call in a term restarts the sequence above the highest version the
 * slice's chunks hold in that term (blocking chunk reads). 0, or -ERANGE
 * when the sequence of the term is exhausted. */
int zl_storage_heal_version_next(struct zl_storage *st, const struct zl_volume *v,
				 uint32_t slice, uint64_t *ver);
/* The version to forward with a write of `ver` to member `node` (state
 * `ms` in the row) for `chunk`: ver when the member's copy of the chunk is
 * known complete, else 0. */
uint64_t zl_storage_heal_fwd_version(struct zl_storage *st, const struct zl_volume *v,
				     uint32_t slice, const char *node, enum zl_member_state ms,
				     uint64_t chunk, uint64_t ver);
/* Counts the client writes of `chunk` (a slice of v this node is primary
 * of) from srv_plan (`start`) until their local write and every forward
 * ended (!start): recovery copies a chunk only while none is counted.
 * start: 0 or -ENOMEM (not counted; the caller must not end it). */
int zl_storage_heal_plan(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			 uint64_t chunk, bool start);
/* A forwarded write of `chunk` to node failed: its copy is no longer
 * trusted until recovery looked at it again. */
void zl_storage_heal_fwd_failed(struct zl_storage *st, const struct zl_volume *v,
				uint32_t slice, const char *node, uint64_t chunk);
/* Puts a failure report about peer (error zl_errname(err)) on this
 * daemon's report lease. 0 or an etcd error (logged). */
int zl_storage_heal_report(struct zl_storage *st, const char *vol_id, uint32_t slice,
			   const char *peer, const char *error, uint64_t slice_ver);
/* Remembers that this node serves volume num (recovery looks at it). */
void zl_storage_heal_note_vol(struct zl_storage *st, uint64_t num);
/* Fills up to max pairs of chunk versions above `above` of slice `slice`
 * of v, starting at chunk `from`; *next gets the chunk to continue from (0:
 * done). Blocking chunk metadata reads, bounded per call. Returns the number
 * of pairs or a negative error. */
int zl_storage_heal_versions(struct zl_storage *st, const struct zl_volume *v, uint32_t slice,
			     uint64_t from, uint64_t above, struct zl_wire_chunk_ver *out,
			     uint32_t max, uint64_t *next);

/* Sets the data sequence of `slice` of volume vol for `term` (peering
 * decided it): the next write gets seq + 1. */
void zl_storage_heal_seq_set(struct zl_storage *st, uint64_t vol, uint32_t slice, uint32_t term,
			     uint32_t seq);

/* ---- peering (storage_peering.c), loop thread, --heal=on only ----
 *
 * A primary serves client I/O of a slice only once it has peered in the
 * row's term (docs/REPLICATION.md §3): it asks every other IN_SYNC member for
 * its chunk versions, takes for every chunk the newest version among its own
 * and theirs, pulls the chunks it is behind on (READ + ZL_WF_ANY), pushes
 * the winning copy to the members behind, and only then serves. */

/* Creates st->peering. 0 or -ENOMEM. */
int zl_storage_peering_create(struct zl_storage *st);
/* Stops starting steps (callbacks in flight end quietly). Accepts NULL. */
void zl_storage_peering_stop(struct zl_storage *st);
/* Frees st->peering (no callback may come any more). Accepts NULL. */
void zl_storage_peering_destroy(struct zl_storage *st);
/* 0 when this node may serve client I/O of `slice` of v: --heal=off, not
 * its primary (the caller checks the role), or peered in the row's term.
 * Else -ZL_ERR_PEERING, and peering is started (or restarted after a row
 * change or a failed attempt). */
int zl_storage_peering_ready(struct zl_storage *st, const struct zl_volume *v, uint32_t slice);
/* zl_storage_peering_ready over every slice of v this node is primary of (a
 * FLUSH): 0 or -ZL_ERR_PEERING. */
int zl_storage_peering_vol_ready(struct zl_storage *st, const struct zl_volume *v);
/* Forgets what peering knows of volume vol (its replicas were deleted).
 * Accepts st->peering == NULL. */
void zl_storage_peering_forget(struct zl_storage *st, uint64_t vol);
/* The slices whose cached row names this node primary in a term it has not
 * peered in (of the volumes peering looked at): up to max of them into out,
 * sorted by (vol, slice); returns how many there are (may exceed max). 0
 * with --heal=off. Loop thread. */
uint32_t zl_storage_peering_list(struct zl_storage *st, struct zl_status_peering *out, uint32_t max);

/* Peering's rule for one chunk (pure): own is this node's version, ver[i]
 * what in-sync member i answered (answered[i] false: no answer, not
 * counted). The newest version wins; a tie keeps the own copy. Returns -1
 * when the own copy wins, else the member to pull from; *win gets the
 * winning version and *behind the mask of answered members whose version
 * differs from it (they get the winning copy). */
int zl_storage_peering_winner(uint64_t own, const uint64_t *ver, const bool *answered, unsigned n,
			   uint64_t *win, uint32_t *behind);

/* Applies one piece [off, off+len) of a whole-chunk copy of version
 * `pushed` (CHUNK_PUSH on a member, a pull on a peering primary): buf (4 KiB
 * aligned) holds the data; an all-zero piece before the last is zeroed
 * (stays sparse); the last piece stores the version. Returns as
 * zl_chunk_write. */
int zl_storage_chunk_apply(struct zl_storage *st, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
			   uint32_t off, uint32_t len, const uint8_t *buf, uint64_t pushed,
			   zl_chunk_cb cb, void *arg);
/* ---- scrub and repair (storage_scrub.c), loop thread ---- */

/* Creates st->scrub and starts the background scrub timer
 * (cfg.scrub_interval_s, 0 = off). 0 or -ENOMEM. */
int zl_storage_scrub_start(struct zl_storage *st);
/* No new work starts; jobs waiting on the rate limit end now, the others in
 * the callback of what they wait for. Call with zl_storage_heal_stop.
 * Accepts st->scrub == NULL. */
void zl_storage_scrub_stop(struct zl_storage *st);
/* Frees st->scrub once no callback can come (with zl_storage_heal_destroy).
 * Accepts st->scrub == NULL. */
void zl_storage_scrub_destroy(struct zl_storage *st);
/* CHUNK_DIGEST: digests of the chunks of slice h->offset this node holds,
 * one window from chunk h->chunk; answers on c (asynchronously). */
void zl_storage_scrub_digest_serve(struct zl_storage *st, struct zl_xport_conn *c,
				   const struct zl_wire_hdr *h);
/* SCRUB (this node must be the slice's primary): scrub and repair slice
 * h->offset of h->vol_id; answers on c with struct zl_wire_scrub_result. */
void zl_storage_scrub_serve(struct zl_storage *st, struct zl_xport_conn *c,
			    const struct zl_wire_hdr *h);
/* Recovery totals of this primary (zl status): bytes copied by the
 * recovery jobs it holds, and for the running ones an estimate of what is
 * left (chunks not yet known complete, times the chunk size). */
struct zl_storage_heal_progress {
	uint64_t bytes_done;
	uint64_t bytes_left;
	uint32_t members; /* running (volume, slice, member) jobs */
};
/* Fills *out (zeros with --heal=off). Loop thread. */
void zl_storage_heal_progress(struct zl_storage *st, struct zl_storage_heal_progress *out);

/* ---- recovery progress for zl status (storage_status.c) ----
 * The loop thread samples zl_storage_heal_progress every 2 s into a
 * snapshot; the heartbeat thread (storage_node.c) publishes it as
 * <prefix>status/<node> on the node's lease. */
struct zl_storage_status;
/* Creates st->status and starts sampling. 0 or -ENOMEM. */
int zl_storage_status_start(struct zl_storage *st);
/* Stops sampling (loop thread) and frees st->status once the heartbeat no
 * longer uses it (after zl_storage_node_stop). Accepts NULL status. */
void zl_storage_status_destroy(struct zl_storage *st);
/* Heartbeat thread: the latest snapshot into *out (node id and time set);
 * true when it changed since the last call or force is set. */
bool zl_storage_status_take(struct zl_storage_status *s, const char *node, bool force,
			    struct zl_node_status *out);

/* One member's copy of a chunk as a scrub sees it: held = a digest record
 * came (bad may then be ZL_WIRE_DIGEST_MISSING or _BUSY). */
struct zl_scrub_copy {
	bool held;
	uint64_t version;
	uint32_t digest;
	uint32_t bad;
};
/* Scrub's rule for one chunk over n copies, copy 0 the primary's (pure).
 * The winner is the highest version among held copies without bad blocks; a
 * tie keeps the lower index (the primary's copy first). Every other copy is
 * rewritten from it (bit i of *repair, why[i] = "missing" | "crc" |
 * "divergent") unless it is held, good, and of the winner's version and
 * digest; a copy not held is fine only when the winner is an all-zero
 * (zero_digest) chunk of version 0. Returns the winner; -1 when no copy is
 * good (*repair = the held copies); -2 when no copy is held or one is BUSY
 * (no verdict). */
int zl_storage_scrub_judge(const struct zl_scrub_copy *c, unsigned n, uint32_t zero_digest,
			   uint32_t *repair, const char **why);

/* ---- tombstones of deleted volumes (storage_tomb.c), loop thread ---- */

/* Removes the replicas named by this node's tombstones now (blocking etcd
 * and unlinks), then watches for new ones. Returns 0 (a failed listing or
 * watch is logged, not fatal) or -errno. */
int zl_storage_tombs_start(struct zl_storage *st, struct zl_storage_tombs **out);
/* Stops the watch. Accepts NULL. */
void zl_storage_tombs_stop(struct zl_storage_tombs *t);

/* ---- registration and heartbeat (storage_node.c) ---- */

/* Grants a lease, puts nodes/<id> (TCP port, rdma_port and transports
 * "tcp" or "tcp,rdma" when rdma_port != 0) and starts the heartbeat thread
 * with its own etcd handle; it also puts status/<id> from status (optional)
 * on the same lease every 2 s while it changes. Returns 0 or an etcd error. */
int zl_storage_node_start(const struct zl_storage_cfg *cfg, uint16_t port, uint16_t rdma_port,
			  struct zl_storage_status *status, struct zl_storage_node **out);
/* Stops the heartbeat and revokes the lease (the record disappears). Accepts
 * NULL. */
void zl_storage_node_stop(struct zl_storage_node *n);
/* Capacity and free bytes of the filesystem holding dir. 0 or -errno. */
int zl_storage_fs_space(const char *dir, uint64_t *capacity, uint64_t *free_bytes);

/* ---- start-up checks (storage_cfg.c); each prints one line on stderr ---- */

/* Checks that the data dir exists, is a writable directory, and takes
 * DATA/LOCK (flock) for the life of the process. Returns the lock fd, or -2
 * (config error: exit 2). */
int zl_storage_datadir_lock(const char *dir);
/* Resolves the node id: DATA/node-id when present, else the node of
 * DATA/identity (either must equal `flag` when that is set), else flag, else
 * the hostname; persists it. 0 or -2. */
int zl_storage_node_id_resolve(const char *dir, const char *flag, char out[ZL_NODE_ID_MAX]);
/* Fills eo (endpoints, TLS files, user/password) from cfg. */
void zl_storage_cfg_etcd_opts(const struct zl_storage_cfg *cfg, struct zl_etcd_opts *eo);

/* ---- identity of the data dir (storage_ident.c, docs/REPLICATION.md §6) ---- */

struct zl_storage_ident {
	char cluster_id[ZL_META_ID_SIZE];
	char node_id[ZL_NODE_ID_MAX];
	char incarnation[ZL_META_ID_SIZE];
	int64_t created; /* unix seconds */
};

/* JSON codec of DATA/identity. to_json: malloc'd text, NULL for an invalid
 * identity or ENOMEM. from_json: 0 or -ZL_ERR_INVAL (malformed, bad ids). */
char *zl_storage_ident_to_json(const struct zl_storage_ident *id);
int zl_storage_ident_from_json(const char *json, size_t len, struct zl_storage_ident *id);
/* Reads DATA/identity: 0, -ENOENT, -ZL_ERR_INVAL or -errno. */
int zl_storage_ident_read(const char *dir, struct zl_storage_ident *id);
/* Writes DATA/identity atomically (tmp file, fsync, rename, fsync of dir).
 * 0, -ZL_ERR_INVAL or -errno. */
int zl_storage_ident_write(const char *dir, const struct zl_storage_ident *id);
/* 1 when DATA/chunks holds a chunk file, 0 when not, or -errno. */
int zl_storage_ident_has_chunks(const char *dir);
/* The incarnation most slice rows of vols name for node (out; "" and 0
 * when none names one, else 1). *n_rows: rows naming it, *n_other: rows
 * naming another one (both optional). */
int zl_storage_ident_adopt_pick(const struct zl_volume *vols, size_t n_vols, const char *node,
				char out[ZL_META_ID_SIZE], size_t *n_rows, size_t *n_other);
/* Start-up, after etcd answers and before the chunk store opens: gets (or
 * creates) the cluster identity, then reads, checks or writes DATA/identity
 * and sets cfg.cluster_id / cfg.incarnation. A data dir of another cluster
 * or node: one line on stderr and -ZL_ERR_IDENTITY, nothing written. Other
 * failures: one line on stderr and the error. */
int zl_storage_ident_resolve(struct zl_storage *st);
/* Whether member idx of row s is this node's data dir: the row names no
 * incarnation for it, or ours (true for idx < 0: not a member). A node never
 * serves (nor answers versions of) a slice whose row names another
 * incarnation: that copy is gone. */
bool zl_storage_ident_member_ok(const struct zl_storage *st, const struct zl_slice *s, int idx);
/* 0 when etcd's cluster record is still ours, -ZL_ERR_IDENTITY when it
 * differs, or an etcd error (blocking). Guards destructive work. */
int zl_storage_ident_cluster_ok(struct zl_storage *st);

/* ---- old copies of slices moved away (storage_gc.c), loop thread ---- */
struct zl_storage_gc;
/* Arms the periodic removal of chunk files of slices this node left
 * (cfg.gc_interval_s, 0 = off; after cfg.gc_grace_s). 0 or -ENOMEM. */
int zl_storage_gc_start(struct zl_storage *st);
void zl_storage_gc_stop(struct zl_storage *st);
/* This node applied a write, zeroing or push of `slice` of volume vol: its
 * old copies are not removed for a grace period from now. */
void zl_storage_gc_note_write(struct zl_storage *st, uint64_t vol, uint32_t slice);

/* ---- advertised address (storage_addr.c) ---- */

/* True for 0.0.0.0, :: and [::]. */
bool zl_storage_host_is_wildcard(const char *host);
/* Interface of the default route (lowest metric, up, not rejecting, not lo)
 * in a /proc/net/route (ipv6 false) or /proc/net/ipv6_route text. 0 or
 * -ENOENT. */
int zl_storage_route_default_if(FILE *f, bool ipv6, char ifname[IF_NAMESIZE]);
/* The address to register when --advertise is not given: listen_host unless
 * it is a wildcard; then the address of the default route's interface
 * (IPv4 from route_path; for :: also IPv6 from route6_path). Returns 0, or
 * -ENOENT after printing on stderr why and that --advertise is needed,
 * -ENAMETOOLONG. */
int zl_storage_advertise_pick(const char *listen_host, const char *route_path,
			      const char *route6_path, char *out, size_t len);

/* Waits until etcd answers, retrying with exponential backoff (cap 5 s) for
 * up to wait_sec. 0 or -1 (gave up). */
int zl_storage_etcd_wait(struct zl_etcd *e, const char *urls, int wait_sec);

#endif
