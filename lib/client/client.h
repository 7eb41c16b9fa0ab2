/* Volume client: asynchronous I/O on a Zipline volume over the transport.
 *
 * A client lives on one struct zl_loop (single thread, no locks): every call
 * and every completion callback happens on that thread. Blocking wrappers run
 * the loop until their I/O completes (call them only when not inside a loop
 * callback).
 *
 * I/O of any offset and length (unaligned too) is split at chunk boundaries
 * (and at ZL_WIRE_MAX_IO). Two modes (zl_client_opts.legacy_drop):
 *
 * heal (default; docs/REPLICATION.md §2 "Waiting instead of failing"): reads
 *   and writes go only to the row's primary (zl_slice_primary), except a
 *   READ the primary answers CORRUPT or IO (a bad copy): that is reported
 *   ("CORRUPT"/"IO") and read from the other IN_SYNC members with READ +
 *   ZL_WF_ANY, failing with the primary's error only when none serves it
 *   (the client repairs nothing: zl volume scrub does). The client
 *   never changes a row: when the primary gives no answer it puts a failure
 *   report (lib/meta reports/, on a short lease of its own) for the manager,
 *   and every I/O that meets PEERING, NOT_PRIMARY, STALE, NOT_INSYNC,
 *   MIN_SIZE, UNAVAIL, CONN or TIMEOUT reloads the placement and retries
 *   with backoff (50 ms doubling to 2 s) until io_timeout_s (default 600)
 *   after it was submitted; then it completes with -ZL_ERR_TIMEOUT
 *   (-ZL_ERR_MIN_SIZE when that was the last answer) and one error line
 *   names the volume, slice, seconds waited and last error.
 * legacy_drop (0.1, clusters without a manager): writes go to the primary,
 *   reads fall back to other in-sync replicas; a write whose primary is
 *   unreachable promotes the next in-sync replica itself (zl_meta_slice_drop)
 *   and goes on; a request gives up after 16 attempts or 30 s.
 *
 * Stale-version replies reload the placement in both modes. A STALE that
 * is an attach-epoch fence (docs/SECURITY.md: the volume was detached from
 * this node or attached to another) is final: the storage answers STALE
 * for a request whose slice version is current (a FLUSH: always), or
 * refuses the HELLO of our token with STALE. The volume is then fenced
 * (zl_vol_fenced): that I/O and every later one fail at once with
 * -ZL_ERR_STALE, in both modes, without waiting io_timeout_s. A HELLO of
 * an attach credential (not a cluster one) refused for good is final the
 * same way, with its own error: AUTH (a bad or missing token),
 * NOT_ATTACHED (the node's view has passed our epoch and holds no
 * attachment of ours, or it answered BUSY for 10 s) (zl_vol_refusal).
 * Request slots are preallocated: no malloc per I/O in the steady state.
 *
 * Limits (issue 26): a volume record's qos (read/write IOPS and bytes/s,
 * with bursts) is enforced here, on the loop thread, with token buckets: an
 * I/O beyond them waits on a loop timer, in order, and is never failed for
 * that. An open volume watches its record, so a changed limit (zl volume
 * set, ControllerModifyVolume) or io_timeout applies without a reopen. */
#ifndef ZL_CLIENT_H
#define ZL_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "../common/loop.h"
#include "../etcd/etcd.h"
#include "../transport/transport.h"
#include "../meta/meta.h"
#include "../metrics/metrics.h"

struct zl_client;
struct zl_vol;

struct zl_client_opts {
	const char *prefix;        /* etcd prefix, NULL = "/zipline/" */
	const char *client_id;     /* for HELLO and logs, NULL = hostname-pid */
	enum zl_xport_select transport; /* auto/tcp/rdma */
	uint32_t timeout_ms;       /* per request, default 10000 */
	uint32_t max_io;           /* parallel user I/Os per volume, default 256 */
	uint32_t conns_per_node;   /* connections per storage node, default 2 */
	uint64_t epoch;            /* attach epoch carried on every request (0 = none) */
	/* false (default) = heal mode: reads and writes go to the row's primary
	 * only; when it cannot be reached the client puts a failure report
	 * (lib/meta reports/) for the manager and waits, retrying with backoff
	 * and placement reloads, up to io_timeout_s. true = the 0.1 behaviour
	 * for clusters without a manager: read fallback to other in-sync
	 * replicas, promotion of the next replica by zl_meta_slice_drop, give
	 * up after 16 attempts or 30 s. */
	bool legacy_drop;
	/* Heal mode: seconds an I/O may wait, 0 = 600; a volume whose record
	 * names an io_timeout (StorageClass ioTimeout, zl volume set
	 * --io-timeout) uses that one. */
	uint32_t io_timeout_s;
	/* Credentials of every HELLO (docs/SECURITY.md), never logged: an
	 * attach token (ZL_ATTACH_TOKEN) minted for volume token_vol, node
	 * client_id and epoch; or else the cluster key (64 hex), from which
	 * the client derives the cluster token of client_id. Neither: no
	 * token (storage with --auth on refuses it). */
	const char *token;
	uint64_t token_vol;
	const char *cluster_key;
	/* TLS to storage nodes whose record says tls (docs/SECURITY.md): the
	 * cluster's CA (PEM file; NULL = $ZIPLINE_TLS_CA, unset = none: such
	 * nodes cannot be reached, with an error that says so) and the name
	 * server certificates carry (NULL = $ZIPLINE_TLS_SERVER_NAME, unset =
	 * the node's address must be in its certificate). Read at create. */
	const char *tls_ca;
	const char *tls_server_name;
};

/* etcd is borrowed (must outlive the client). Returns 0 or an error. */
int zl_client_create(struct zl_loop *loop, struct zl_etcd *etcd, const struct zl_client_opts *opts,
		     struct zl_client **out);
/* Fails in-flight I/O with -ZL_ERR_CONN, closes connections. Accepts NULL. */
void zl_client_destroy(struct zl_client *c);
/* A transport of the client (RDMA when one is in use, else TCP, created on
 * demand); NULL when it cannot be created. Volumes may use both kinds. */
struct zl_xport *zl_client_xport(struct zl_client *c);

/* Opens by name or id. -ZL_ERR_NOT_FOUND for an unknown volume. */
int zl_vol_open(struct zl_client *c, const char *name_or_id, struct zl_vol **out);
/* Waits for nothing: in-flight I/O fails with -ZL_ERR_CONN. Accepts NULL. */
void zl_vol_close(struct zl_vol *v);
uint64_t zl_vol_size(const struct zl_vol *v);
/* True once the storage fenced our attach epoch on v, or refused our
 * credential for it (see above): final. */
bool zl_vol_fenced(const struct zl_vol *v);
/* 0 while v is usable; else the error every I/O of v fails with
 * (-ZL_ERR_STALE: fenced, -ZL_ERR_AUTH: credential refused,
 * -ZL_ERR_NOT_ATTACHED: no attachment of ours), with why (optional) set to
 * what the storage said. */
int zl_vol_refusal(const struct zl_vol *v, char *why, size_t len);
/* One line on what kept v's I/O from completing: the refusal, the last
 * node that could not be reached and how, the last error a retried
 * request met. For messages when an I/O did not finish in time. */
void zl_vol_last_error(const struct zl_vol *v, char *out, size_t len);
const struct zl_volume *zl_vol_meta(const struct zl_vol *v);

/* Completion: 0 or a negative error (-ZL_ERR_UNAVAIL when no replica could
 * serve, -ZL_ERR_RANGE beyond the end, -ZL_ERR_IO, ...). */
typedef void (*zl_io_cb)(void *arg, int status);

/* Asynchronous I/O. Return 0 (cb runs exactly once, never inside this call),
 * -ZL_ERR_RANGE (beyond the volume), -ZL_ERR_BUSY (max_io in flight: retry
 * after a completion), -ZL_ERR_INVAL. Buffers stay the caller's and must stay
 * valid until cb. Buffers from zl_vol_buf_alloc avoid a copy on RDMA. */
int zl_vol_aio_read(struct zl_vol *v, void *buf, uint64_t off, uint64_t len, zl_io_cb cb,
		    void *arg);
int zl_vol_aio_write(struct zl_vol *v, const void *buf, uint64_t off, uint64_t len, int fua,
		     zl_io_cb cb, void *arg);
int zl_vol_aio_flush(struct zl_vol *v, zl_io_cb cb, void *arg);
int zl_vol_aio_discard(struct zl_vol *v, uint64_t off, uint64_t len, zl_io_cb cb, void *arg);
int zl_vol_aio_write_zeroes(struct zl_vol *v, uint64_t off, uint64_t len, zl_io_cb cb, void *arg);

/* Snapshots (docs/SNAPSHOTS.md). Every WRITE, DISCARD and WRITE_ZEROES
 * carries the volume's snapshot sequence (ZL_WF_SEQ) on connections whose
 * storage named ZL_WIRE_CAP_SNAPSEQ in its HELLO; to storage that did not,
 * a write of a volume with snapshots fails with -ZL_ERR_VERSION (one error
 * line says to upgrade the storage). A write answered ZL_ERR_SNAPSEQ (a
 * snapshot this client has not seen) reloads the volume record and is sent
 * again with the new sequence, retried like a placement change.
 *
 * zl_vol_aio_read_snap reads snapshot seq (struct zl_snapshot.seq, >= 1) of
 * the volume: READ + ZL_WF_SEQ, split and retried like any read. 0 or the
 * errors of zl_vol_aio_read, -ZL_ERR_INVAL for seq 0. */
int zl_vol_aio_read_snap(struct zl_vol *v, uint32_t seq, void *buf, uint64_t off, uint64_t len,
			 zl_io_cb cb, void *arg);
int zl_vol_read_snap(struct zl_vol *v, uint32_t seq, void *buf, uint64_t off, uint64_t len);
/* The sequence v's writes carry now. */
uint32_t zl_vol_snap_seq(const struct zl_vol *v);
/* Makes this client the one that takes v's snapshots (docs/SNAPSHOTS.md §3;
 * zl volume serve, the attach process): puts snapwriters/<vol-id> on a
 * lease of its own (renewed on the client's worker) and watches
 * snapreqs/<vol-id>/. For every pending request it runs zl_meta_snap_create
 * (with the request's id) on the worker, then switches, on the loop, the
 * sequence every later write carries, and only then answers the request
 * "done" with the snapshot's sequence ("failed" with an error name when the
 * transaction failed). Stops at zl_vol_close. Blocking (not from a loop
 * callback). 0, -ZL_ERR_BUSY (already serving) or an etcd error. */
int zl_vol_snap_serve(struct zl_vol *v);
/* One volume written through several handles, each on its own client and
 * thread (the ublk frontend's queue threads): every handle but the one
 * that serves the snapshots (lead, zl_vol_snap_serve) follows lead's
 * switch: a write v sends carries lead's sequence when it is higher than
 * v's, and while lead holds its writes for a group snapshot v's new writes
 * wait too (on v's loop, released when lead's hold ends). So a write issued
 * after lead answered a request "done" (or "held") carries the snapshot's
 * sequence (or waits), whichever handle sends it. lead's state is read
 * without a lock (atomics); no lock per I/O. Call on v's thread before v
 * sends a write; lead must outlive v (zl_vol_close of v leaves lead's
 * list first). 0, -ZL_ERR_INVAL (v is lead, follows already, serves
 * snapshots, or lead is a follower), or -errno. */
int zl_vol_snap_follow(struct zl_vol *v, struct zl_vol *lead);

/* One volume served through several handles (the ublk frontend's queue
 * threads, each handle on its own client and thread): the volume's QoS
 * limits hold for all of them together, not for each. A share holds the
 * state of the volume's four token buckets (read and write, I/Os and
 * bytes); a handle that joins it leases units from it in batches (one
 * compare-and-swap takes about 1 ms of the rate, at most a quarter of the
 * burst, at least what the I/O needs) and spends them locally: no lock, and
 * no shared atomic per I/O. Units a handle leased and has not spent yet
 * (at most one lease per bucket and handle) are the only excess over the
 * limits. Each handle still follows the record with its own watch; the
 * first to apply a changed limit starts the shared bucket full, as one
 * handle does today. A handle that never joins one keeps buckets of its
 * own (the single-handle path, unchanged).
 *
 * zl_vol_qos_share_create: a share with one reference (the caller's), 0 or
 * -ENOMEM. zl_vol_qos_share_put drops one (accepts NULL); the last frees
 * it. zl_vol_qos_join: v takes a reference and draws from s from now on
 * (until zl_vol_close); call on v's thread. 0 or -ZL_ERR_INVAL (v has
 * joined one already). */
struct zl_vol_qos_share;
int zl_vol_qos_share_create(struct zl_vol_qos_share **out);
void zl_vol_qos_share_put(struct zl_vol_qos_share *s);
int zl_vol_qos_join(struct zl_vol *v, struct zl_vol_qos_share *s);

/* Clones (docs/SNAPSHOTS.md §4): a volume whose record names a parent
 * {vol, seq} opens its parent (and the parent's, up to 16 levels) with it;
 * a chunk the clone never held reads from the parent at snapshot seq, and
 * the first write, discard or zeroing of it copies the parent's chunk up
 * first (one whole-chunk WRITE + ZL_WF_CREATE). zl_vol_flatten copies up
 * every chunk still absent (a chunk of zeros stays absent: it reads the
 * same without a parent), calling o->progress (optional; about once a
 * second, while it waits for the rate too, and at the end) with the chunks
 * probed, their total and the copy-ups this handle made; a progress that
 * returns non-zero stops the flatten with that error (the parent stays: run
 * it again, it probes from the start). o->rate_bps > 0 bounds the bytes
 * copied up per second (probes of chunks the clone holds cost nothing).
 * Then it clears the parent (zl_meta_clone_detach). o may be NULL.
 * Blocking: runs the client's loop like zl_vol_read. A volume without
 * parent: 0 at once. 0, an I/O error, an etcd error or progress's error. */
typedef int (*zl_flatten_cb)(void *arg, uint64_t done, uint64_t total, uint64_t copied);
struct zl_flatten_opts {
	zl_flatten_cb progress;
	void *arg;
	uint64_t rate_bps; /* 0 = no limit */
};
int zl_vol_flatten(struct zl_vol *v, const struct zl_flatten_opts *o);

/* Blocking wrappers: 0 or a negative error. */
int zl_vol_read(struct zl_vol *v, void *buf, uint64_t off, uint64_t len);
int zl_vol_write(struct zl_vol *v, const void *buf, uint64_t off, uint64_t len);
int zl_vol_flush(struct zl_vol *v);
int zl_vol_discard(struct zl_vol *v, uint64_t off, uint64_t len);
int zl_vol_write_zeroes(struct zl_vol *v, uint64_t off, uint64_t len);

/* Transport pool buffers: registered memory of the RDMA transport when the
 * volume reaches any replica over RDMA (TCP takes any memory), else the TCP
 * pool. Free them with zl_vol_buf_free of the same volume. */
void *zl_vol_buf_alloc(struct zl_vol *v, size_t len);
void zl_vol_buf_free(struct zl_vol *v, void *buf);

/* Counters for status and tests. */
struct zl_vol_stats {
	uint64_t reads, writes, read_bytes, write_bytes;
	uint64_t retries, failovers, promotions, placement_reloads;
	uint64_t reports; /* heal mode: failure reports put */
	uint64_t throttled; /* user I/Os that waited for the volume's limits */
	uint64_t copyups;   /* a clone's chunks copied up from its parent */
	/* Copy-ups that found the chunk already held (ZL_ERR_EXISTS: another
	 * copy-up or write of the same chunk won); the write went on as is. */
	uint64_t copyup_races;
	/* Submission to completion (QoS waits and retries included) of every
	 * read, write and flush that completed, failed ones too: [0] read,
	 * [1] write (and zeroing, discard), [2] flush. */
	struct zl_metrics_hist lat[3];
};
void zl_vol_get_stats(const struct zl_vol *v, struct zl_vol_stats *out);

/* What zl_client_volume_remove did. */
struct zl_client_delete_info {
	char attached_node[ZL_NODE_ID_MAX]; /* -ZL_ERR_BUSY: where it is attached */
	uint32_t nodes_done;		    /* placement nodes whose replicas are gone */
	uint32_t nodes_pending;		    /* down or failing: they remove them when back */
	char pending_node[ZL_NODE_ID_MAX];  /* the first of those */
	uint32_t snapshots;		    /* -ZL_ERR_BUSY: snapshots the volume holds */
	/* -ZL_ERR_BUSY: clones read through the volume (zl_meta_clone_refusal:
	 * names them and says to flatten them); "" when not why. */
	char dependants[1024];
};

/* Deletes a volume (by id or name) even while storage nodes are down: the
 * record is marked "deleting", then removed in one etcd transaction that
 * leaves a tombstone for every node of its placement (lib/meta); live nodes
 * drop their replicas now (VOLUME_DELETE), the others when they come back
 * (they process their tombstones at start-up and through a watch). A volume
 * with an attachment record, or with snapshots (whose data are its clone
 * chunks, docs/SNAPSHOTS.md §2), is refused unless force (which also
 * removes the attachment; the snapshot records stay, for `zl snapshot rm`).
 * A volume clones read through (docs/SNAPSHOTS.md §4) is refused even with
 * force (info->dependants says which).
 * Blocking. info (optional) tells what happened. Returns 0,
 * -ZL_ERR_NOT_FOUND, -ZL_ERR_BUSY (attached: info->attached_node; or it
 * holds info->snapshots snapshots), -ZL_ERR_CONFLICT (kept changing), or an
 * etcd error. */
int zl_client_volume_remove(struct zl_client *c, const char *name_or_id, bool force,
			    struct zl_client_delete_info *info);
/* zl_client_volume_remove without force and info. */
int zl_client_volume_delete(struct zl_client *c, const char *name_or_id);

/* PINGs a storage node; 0 or error. Blocking. rtt_us optional. */
int zl_client_ping_node(struct zl_client *c, const struct zl_node_info *n, uint64_t *rtt_us);
/* The same, also telling which transport carried the ping (*kind, optional:
 * ZL_XPORT_TCP or ZL_XPORT_RDMA as picked by the client's transport
 * selection; 0 when no connection was made). */
int zl_client_ping_node_kind(struct zl_client *c, const struct zl_node_info *n, uint64_t *rtt_us,
			     enum zl_xport_kind *kind);

#endif
