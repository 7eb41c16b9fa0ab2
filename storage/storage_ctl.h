/* zipline-storage, control: start-up checks and identity of the data dir,
 * registration and heartbeat, status for zl status, tombstones and removal
 * of old copies, the advertised address. */
#ifndef ZL_STORAGE_CTL_H
#define ZL_STORAGE_CTL_H

#include "storage.h"
#include "storage_ddir.h"

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
/* The data dir failed (storage_ddir.c): the next record carries why as
 * disk_error, at the next put, with the chunk store's figures of now (the
 * fenced store's last). No-op without a status (--heal=off). */
void zl_storage_status_disk_error(struct zl_storage *st, const char *why);


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

/* ---- the command line (storage_flags.c) ---- */

struct zl_cfg_etcd;
/* Parses argv into cfg, the etcd options into etcd (which must outlive cfg:
 * cfg->eo points into it) and --node-id into *node_flag, then checks them
 * together and picks the advertised address. 0 (go on), 1 (--help or
 * --version printed: exit 0), or -ZL_ERR_INVAL after one line on stderr
 * (exit 2). */
int zl_storage_cfg_parse(struct zl_storage_cfg *cfg, struct zl_cfg_etcd *etcd,
			 const char **node_flag, int argc, char **argv);
/* zl_etcd_create refused cfg->eo with err: one line on stderr that says so.
 * Returns -ZL_ERR_INVAL. */
int zl_storage_cfg_bad_etcd(const struct zl_storage_cfg *cfg, int err);

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
/* 0 when etcd's cluster record (read through e) is still ours,
 * -ZL_ERR_IDENTITY when it differs, or an etcd error (blocking: the
 * start-up, or the worker thread). Guards destructive work. */
int zl_storage_ident_cluster_ok(const struct zl_storage *st, struct zl_etcd *e);

/* ---- old copies of slices moved away (storage_gc.c), loop thread ---- */
struct zl_storage_gc;
/* Arms the periodic removal of chunk files of slices this node left
 * (cfg.gc_interval_s, 0 = off; after cfg.gc_grace_s). 0 or -ENOMEM. */
int zl_storage_gc_start(struct zl_storage *st);
void zl_storage_gc_stop(struct zl_storage *st);
/* This node applied a write, zeroing or push of `slice` of volume vol: its
 * old copies are not removed for a grace period from now. */
void zl_storage_gc_note_write(struct zl_storage *st, uint64_t vol, uint32_t slice);

/* ---- clone chunks of deleted snapshots (storage_snapgc.c), loop thread ---- */
struct zl_storage_snapgc;
/* Hooks the volume cache (st->vols) so that clone chunks no remaining
 * snapshot needs are removed when a record enters it or loses a snapshot,
 * and looks up every volume the chunk store holds clones of (start-up
 * collection). 0 or -ENOMEM. */
int zl_storage_snapgc_start(struct zl_storage *st, struct zl_storage_snapgc **out);
/* Unhooks and frees g (before st->vols goes). Accepts NULL. */
void zl_storage_snapgc_stop(struct zl_storage *st, struct zl_storage_snapgc *g);

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
