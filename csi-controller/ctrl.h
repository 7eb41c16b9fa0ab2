/* zipline-controller internals: the CSI Identity and Controller services on
 * lib/grpc, volume records in etcd through lib/meta. Every replica serves
 * every CSI call (operation locks and records in etcd make that safe); an
 * election on an etcd lease picks the one replica that runs the background
 * jobs that must run once. Shared by the files of csi-controller/ only. */
#ifndef ZL_CTRL_H
#define ZL_CTRL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "csi.pb-c.h"
#include "lib/common/common.h"
#include "lib/cfg/cfg.h"
#include "lib/etcd/etcd.h"
#include "lib/grpc/grpc_server.h"
#include "lib/manager/manager.h"
#include "lib/meta/meta.h"
#include "lib/metrics/metrics.h"

#define CTRL_LOG "ctrl"
#define CTRL_DRIVER_NAME "zipline.csi.io"
#define CTRL_TOPOLOGY_KEY "topology.zipline.io/node"
/* TTL of a replica's etcd lease, which holds its operation locks and, on the
 * leader, the leader key: a dead replica's locks are freed and a dead leader
 * is replaced within this time. */
#define CTRL_LEADER_TTL_S 10
/* Per-call timeout of the controller's etcd handles. */
#define CTRL_ETCD_TIMEOUT_MS 5000
/* Probe and /readyz say ready while the background thread reached etcd
 * this recently. */
#define CTRL_ETCD_FRESH_MS 5000
/* Manager defaults (docs/REPLICATION.md §2): how long a node record may be
 * gone before its members are OUT, and before they are replaced. */
#define CTRL_MANAGER_GRACE_S 2
#define CTRL_DOWN_OUT_INTERVAL_S 600
/* Period of the leader's garbage collection when --gc-interval is not given. */
#define CTRL_GC_INTERVAL_S 60
/* --flatten-rate when not given (MiB/s). */
#define CTRL_FLATTEN_RATE_MIB 64
/* Volume size when CreateVolume gives no capacity_range. */
#define CTRL_DEFAULT_SIZE (1ull << 30)
/* Largest volume this controller creates or grows to (1 PiB, lib/meta). */
#define CTRL_MAX_SIZE ZL_META_SIZE_MAX
/* CSI: strings are at most 128 bytes; node ids are used in the attach token. */
#define CTRL_NODE_ID_MAX 128
#define CTRL_ID_MAX 128

struct ctrl_cfg {
	const char *endpoint;
	struct zl_cfg_etcd etcd; /* --etcd, --etcd-prefix, etcd TLS and auth */
	const char *cluster_key_file; /* NULL: <prefix>keys/cluster in etcd */
	bool leader_election;
	const char *leader_id; /* NULL = hostname-pid */
	unsigned int gc_interval_s;
	bool manager;              /* --manager: decide slice membership (lib/manager) */
	unsigned int manager_grace_s; /* --manager-grace */
	unsigned int down_out_s;   /* --down-out-interval */
	unsigned int workers;
	const char *log_level;
	const char *metrics; /* --metrics HOST:PORT, NULL: off */
	bool flatten;                  /* --flatten: the leader flattens clones (default on) */
	unsigned int flatten_rate_mib; /* --flatten-rate MiB/s, 0 = no limit */
};

/* One held operation lock (see ctrl_oplock.c). */
struct ctrl_oplock {
	char key[512];
	int64_t rev; /* mod_revision of our lock key */
};

struct ctrl {
	char prefix[128];
	const char *cluster_key_file; /* --cluster-key-file (argv), NULL = etcd */
	struct zl_etcd *etcd;	 /* the RPCs' handle (thread-safe, serialized inside) */
	struct zl_etcd *etcd_bg; /* the background thread's own: keepalives never queue behind RPCs */
	struct zl_grpc_server *srv;

	/* Background thread: etcd health for Probe, the replica lease, leader
	 * election and the leader's jobs. stop/stop_cond are protected by bg_lock. */
	pthread_t bg_thread;
	bool bg_started;
	pthread_mutex_t bg_lock;
	pthread_cond_t bg_cond;
	bool stop;

	/* Last time (zl_now_ms) the background thread reached etcd; 0 = never. */
	atomic_uint_fast64_t etcd_ok_ms;

	/* Replica lease and leader state. leader_lock protects is_leader,
	 * holder, lease and lease_ok_ms; only the background thread changes
	 * them (and ctrl_stop, after the thread ended). */
	bool election;
	char leader_id[CTRL_ID_MAX]; /* this replica's identity */
	pthread_mutex_t leader_lock;
	bool is_leader;
	char holder[CTRL_ID_MAX]; /* current holder as last seen ("" = none) */
	int64_t lease;
	uint64_t lease_ok_ms; /* last successful grant/keepalive */

	/* The membership manager (--manager=on), NULL when off; its own etcd
	 * handle, so its decisions never queue behind RPCs or keepalives. */
	struct zl_manager *mgr;
	struct zl_etcd *etcd_mgr;

	/* Leader jobs, background thread only. */
	unsigned int gc_interval_s;
	uint64_t gc_last_ms;

	/* --metrics (ctrl_metrics.c); bg_round_ms: the background thread's
	 * last round (zl_now_ms), what /healthz checks. */
	struct zl_metrics_srv *metrics;
	atomic_uint_fast64_t bg_round_ms;

	/* The background flatten (ctrl_flatten.c): its thread (stopped by
	 * stop/bg_cond like the background thread), its etcd handle, its
	 * rate, and figures for /metrics (written by its thread only). */
	pthread_t flat_thread;
	bool flat_started;
	struct zl_etcd *etcd_flat;
	uint64_t flat_rate_bps;
	atomic_uint_fast64_t flat_done, flat_failed, flat_copied_bytes, flat_active;
	atomic_uint_fast64_t flat_chunks_done, flat_chunks_total;
};

/* ---- ctrl_cfg.c ---- */
/* Parses argv into cfg (defaults from CSI_ENDPOINT / ZIPLINE_ETCD; cfg must
 * not move afterwards). Returns 0, 1 when --help/--version was handled (exit
 * 0), or -ZL_ERR_INVAL after printing one line about a bad flag (exit 2). */
int ctrl_cfg_parse(int argc, char **argv, struct ctrl_cfg *cfg);

/* ---- ctrl.c: lifetime ---- */
/* Connects to etcd, starts the background thread and the gRPC server.
 * 0 or a negative error (logged). */
int ctrl_start(struct ctrl *c, const struct ctrl_cfg *cfg);
/* Stops serving (grace_ms for running calls), gives up leadership, frees.
 * Safe on a half-started ctrl. */
void ctrl_stop(struct ctrl *c, unsigned int grace_ms);

/* ---- ctrl_leader.c ---- */
/* Background thread body: etcd health checks, the replica lease, leader
 * election and, on the leader, its jobs. */
void *ctrl_bg_main(void *arg);
/* This replica's live lease (renewed recently enough that it cannot have
 * expired), or 0 when it has none. */
int64_t ctrl_lease(struct ctrl *c);
/* True while this replica is the elected leader (always with election off):
 * the one that runs the jobs that must run once. Never gates a CSI call. */
bool ctrl_leader_is(struct ctrl *c);
/* True while this replica leads and its lease was renewed so recently that
 * a write sent now reaches etcd (within CTRL_ETCD_TIMEOUT_MS) before the
 * lease, and with it the leader key, could have expired: what the manager
 * checks before every write. */
bool ctrl_leader_may_write(struct ctrl *c);
/* Revokes the replica lease: the leader key and any operation lock go. */
void ctrl_leader_release(struct ctrl *c);

/* ---- ctrl_gc.c: the leader's garbage collection ---- */
/* One pass: deletes secrets/<id> whose volume record is gone (left by `zl
 * volume rm` or an abandoned DeleteVolume). 0 or an etcd error. */
int ctrl_gc_run(struct ctrl *c);

/* ---- ctrl_flatten.c: the leader's background flatten of clones ---- */
/* Starts its thread (nothing with --flatten=off). 0 or an error (logged). */
int ctrl_flatten_start(struct ctrl *c, const struct ctrl_cfg *cfg);
/* Waits for the thread once c->stop is set (a flatten in progress stops
 * within a second; the next leader runs it again), frees its etcd handle.
 * Safe when it never started. */
void ctrl_flatten_join(struct ctrl *c);
/* Appends the zipline_controller_flatten_* figures (none with it off). */
void ctrl_flatten_metrics(struct ctrl *c, struct zl_metrics_text *t);

/* ---- ctrl_oplock.c ---- */
/* Takes the operation lock of (kind, id), shared by every replica: ZL_GRPC_OK
 * with *lk filled, or ABORTED (another operation holds it) / UNAVAILABLE (no
 * lease, etcd unreachable) recorded on call. */
int ctrl_op_begin(struct ctrl *c, struct zl_grpc_call *call, const char *kind, const char *id,
		  struct ctrl_oplock *lk);
/* Releases a lock taken by ctrl_op_begin (if it is still ours). */
void ctrl_op_end(struct ctrl *c, struct ctrl_oplock *lk);

/* ---- ctrl.c: records ---- */
/* Reads <prefix><kind>/<id> with the RPCs' etcd handle: 0 with *kv filled
 * (free with zl_etcd_kv_fini), -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL (key too
 * long) or an etcd error. */
int ctrl_record_get(struct ctrl *c, const char *kind, const char *id, struct zl_etcd_kv *kv);

/* A storage client on a private loop, which the calling thread runs (its
 * blocking calls): the cluster token (--cluster-key-file or keys/cluster,
 * created if absent), attach epoch epoch (0: an operator's), etcd borrowed.
 * 0, or an error with *what = "key", "loop" or "client" (what failed). */
struct zl_loop;
struct zl_client;
int ctrl_client_create(struct ctrl *c, struct zl_etcd *etcd, uint64_t epoch,
		       struct zl_loop **loop, struct zl_client **cl, const char **what);
/* Frees both (NULL accepted). */
void ctrl_client_destroy(struct zl_loop *loop, struct zl_client *cl);

/* ---- ctrl_caps.c ---- */
/* INVALID_ARGUMENT "<field> is required" (recorded on call) when value is
 * empty, ZL_GRPC_OK otherwise. */
int ctrl_arg_required(struct zl_grpc_call *call, const char *field, const char *value);
/* Checks one capability; NULL when supported, otherwise a static reason.
 * *field gets the sub-field at fault ("access_mode", "access_type",
 * "mount.fs_type"). */
const char *ctrl_cap_check(const Csi__V1__VolumeCapability *cap, const char **field);
/* INVALID_ARGUMENT (message naming field[i]) for the first unsupported or
 * malformed capability of caps; ZL_GRPC_OK when all are supported. required:
 * an empty list is an error too. */
int ctrl_caps_validate(struct zl_grpc_call *call, const char *field,
		       Csi__V1__VolumeCapability *const *caps, size_t n, bool required);

/* ---- ctrl_params.c ---- */
struct ctrl_params {
	uint32_t replicas;   /* 0 = not given */
	uint32_t chunk_size; /* 0 = not given */
	char transport[8];   /* "" = not given */
	uint32_t min_size;   /* 0 = not given (the default for the replicas) */
	/* The knobs a running volume may change too (ctrl_params_knob): limits,
	 * ioTimeout, minSize (also in min_size). */
	struct zl_volume_mod knobs;
	char frontend[8];    /* auto|ublk|nbd|fuse, "" = not given */
	/* flatten=false: a clone of this class keeps reading through its
	 * source (no background flatten; `zl volume flatten` still works). */
	bool no_flatten;
};
/* Every generated map entry of csi.proto has this layout. */
struct ctrl_kv {
	ProtobufCMessage base;
	char *key;
	char *value;
};
#define CTRL_KV(entries) ((const struct ctrl_kv *const *)(entries))
/* Parses StorageClass parameters. ZL_GRPC_OK, or INVALID_ARGUMENT naming the
 * key at fault (message recorded on call). */
int ctrl_params_parse(struct zl_grpc_call *call, const struct ctrl_kv *const *kv, size_t n,
		      struct ctrl_params *out);
/* ctrl_params_knob: k is not a knob. */
#define CTRL_PARAMS_NOT_KNOB (-1)
/* One parameter of the knobs a running volume may change (lib/meta
 * zl_knob: the limits, ioTimeout, minSize), for CreateVolume and
 * ControllerModifyVolume: parses v into mod and returns ZL_GRPC_OK,
 * INVALID_ARGUMENT naming the key and what it takes, or
 * CTRL_PARAMS_NOT_KNOB when k is none of them. */
int ctrl_params_knob(struct zl_grpc_call *call, const char *k, const char *v,
		     struct zl_volume_mod *mod);
/* Transport recorded in the volume record's params ("auto" when absent). */
void ctrl_params_transport(const struct zl_volume *v, char *out, size_t len);
/* Frontend recorded in the volume record's params ("" when absent). */
void ctrl_params_frontend(const struct zl_volume *v, char *out, size_t len);

/* ---- ctrl_volume.c / ctrl_publish.c / ctrl_identity.c: handlers ---- */
int ctrl_create_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp);
int ctrl_modify_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp);
/* ctrl_snap.c */
/* How long a snapshot (CreateSnapshot, a clone's internal one) may wait for
 * the client serving its volume: the call's deadline less a margin for the
 * answer, 30 s without one (ctrl_snap.c). */
uint32_t ctrl_snap_wait_ms(struct zl_grpc_call *call);
int ctrl_create_snapshot(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp);
int ctrl_delete_snapshot(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp);
int ctrl_list_snapshots(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			ProtobufCMessage *resp);
int ctrl_delete_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp);
int ctrl_validate_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp);
int ctrl_list_volumes(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		      ProtobufCMessage *resp);
int ctrl_get_capacity(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		      ProtobufCMessage *resp);
int ctrl_get_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		  ProtobufCMessage *resp);
int ctrl_expand_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp);
int ctrl_get_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		    ProtobufCMessage *resp);
int ctrl_publish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp);
int ctrl_unpublish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp);
int ctrl_plugin_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp);
int ctrl_plugin_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp);
int ctrl_probe(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
	       ProtobufCMessage *resp);
/* True while the background thread reached etcd within CTRL_ETCD_FRESH_MS. */
bool ctrl_etcd_fresh(struct ctrl *c);

/* ---- ctrl_metrics.c: --metrics ---- */
/* Serves /metrics, /healthz and /readyz on cfg->metrics (no-op when NULL
 * or "off"). 0 or a negative error (logged). */
int ctrl_metrics_start(struct ctrl *c, const struct ctrl_cfg *cfg);
void ctrl_metrics_stop(struct ctrl *c);

/* ---- ctrl_publish.c: attachments ---- */
struct ctrl_attach {
	char node[CTRL_NODE_ID_MAX + 1];
	uint64_t epoch;
	bool readonly;
	int64_t time;
	int64_t mod_rev;
};
/* Reads attachments/<vol_id>: 0, -ZL_ERR_NOT_FOUND, or an etcd error. */
int ctrl_attach_get(struct ctrl *c, const char *vol_id, struct ctrl_attach *out);
/* 0 when s is a valid CSI node id for Zipline. */
int ctrl_node_id_check(const char *s);

/* ---- ctrl_secret.c: per-volume secret and attach token ---- */
#define CTRL_SECRET_HEX 64
#define CTRL_TOKEN_HEX 64
/* Creates secrets/<vol_id> (32 random bytes as 64 hex) unless it exists.
 * 0 or an etcd error. */
int ctrl_secret_ensure(struct ctrl *c, const char *vol_id);
/* Reads the secret as 64 hex chars + NUL: 0, -ZL_ERR_NOT_FOUND or an error. */
int ctrl_secret_get(struct ctrl *c, const char *vol_id, char out[CTRL_SECRET_HEX + 1]);
/* Deletes secrets/<vol_id> (absent is fine). */
int ctrl_secret_delete(struct ctrl *c, const char *vol_id);
/* The attach token: zl_auth_attach_token (lib/meta/zl_auth.h). */

/* ---- ctrl_volume.c helpers shared with ctrl_publish.c ---- */
/* Fills a CSI Volume from a record (volume_context per the contract). */
Csi__V1__Volume *ctrl_volume_msg(struct zl_grpc_call *call, const struct zl_volume *v);
/* Condition of a volume from its placement and the live nodes. */
Csi__V1__VolumeCondition *ctrl_volume_condition(struct zl_grpc_call *call,
						const struct zl_volume *v,
						const struct zl_node_info *live, size_t n_live);
/* Reads a volume by CSI volume id: ZL_GRPC_OK, or NOT_FOUND / another code
 * recorded on call (field names the request field for the message). */
int ctrl_volume_load(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id,
		     struct zl_volume *out);

#endif
