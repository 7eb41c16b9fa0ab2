/* zipline-node internals: the CSI Node service and the per-volume attach
 * process. Nothing here is a public interface; only csi-node/ includes it.
 *
 * Layout of the state directory (--state-dir, default /var/lib/zipline/node):
 *   <vol-id>/state.json   what is staged/published here (node_state.c)
 *   <vol-id>/fuse/disk    the volume as one regular file (attach process, FUSE)
 *   <vol-id>/token        the attach token (0600; nbd, ublk: a new attach
 *                         process taking a dead one's /dev/nbdN or
 *                         /dev/ublkbN over needs it)
 *   <vol-id>/ctl.sock     the attach process's control socket
 *   <vol-id>/attach.log   its stdout/stderr
 * state.json is the only truth: every RPC reads it under the volume's
 * operation lock, so a restarted zipline-node simply reads it again. */
#ifndef ZL_CSI_NODE_H
#define ZL_CSI_NODE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/common/common.h"
#include "lib/etcd/etcd.h"
#include "lib/grpc/grpc_server.h"

#define NODE_LOG	  "csi-node"
#define NODE_DRIVER_NAME  "zipline.csi.io"
#define NODE_TOPOLOGY_KEY "topology.zipline.io/node"
#define NODE_PATH_MAX	  1024
#define NODE_MAX_TARGETS  16
#define NODE_MAX_FLAGS	  16

enum node_frontend { NODE_FRONTEND_FUSE = 0, NODE_FRONTEND_NBD, NODE_FRONTEND_UBLK };

struct node_cfg {
	const char *endpoint;
	const char *node_id;
	const char *etcd_urls;
	const char *etcd_prefix;
	const char *state_dir;
	const char *kubelet_dir;
	const char *transport; /* passed on to attach processes */
	const char *log_level;
	const char *io_timeout; /* seconds, passed on to attach processes; NULL = 600 */
	bool legacy_drop;	/* attach processes run the 0.1 client (no manager) */
	/* seconds an attach process may take to prove it can read its volume
	 * (passed on as its --start-timeout); NULL = NODE_ATTACH_START_S */
	const char *attach_timeout;
	/* threads serving a ublk device's queues, passed on to ublk attach
	 * processes as --ublk-threads; NULL = theirs (one per queue) */
	const char *ublk_threads;
	enum node_frontend frontend;
	bool frontend_auto; /* --frontend auto: resolved at start (node_frontend_auto) */
	unsigned int workers;
	const char *metrics; /* --metrics HOST:PORT, NULL: off */
	/* --spawner PATH: attach processes are started by `zipline-node
	 * spawner` listening there (node_spawn.c), NULL: by us */
	const char *spawner;
};

/* Volume ids with an operation running. Locking rule: `lock` guards
 * `busy`; an RPC holds its volume's entry for its whole duration. */
struct node_oplocks {
	pthread_mutex_t lock;
	char busy[64][ZL_VOL_ID_LEN + 1];
};

struct node {
	struct node_cfg cfg;
	char self_exe[NODE_PATH_MAX]; /* /proc/self/exe, for attach processes */
	struct zl_etcd *etcd;
	struct node_oplocks ops;
};

/* ---- state.json (node_state.c) ---- */

struct node_target {
	char path[NODE_PATH_MAX];
	bool readonly;
};

struct node_vol_state {
	char volume_id[ZL_VOL_ID_LEN + 1];
	char staging[NODE_PATH_MAX]; /* staging_target_path */
	bool block;		     /* access type block (else mount) */
	char fs_type[16];	     /* mount mode */
	char mount_flags[512];	     /* comma-joined */
	bool stage_ro;
	pid_t pid;     /* attach process */
	char loop[64]; /* the staged device: /dev/loopN (FUSE), /dev/nbdN or /dev/ublkbN;
			  "" until set up */
	enum node_frontend frontend;
	int ublk_id; /* N of /dev/ublkbN (what --recover takes), -1: none */
	uint64_t epoch;
	uint64_t size;
	char prefix[128];
	bool staged; /* stage finished (mounted / device ready) */
	size_t n_targets;
	struct node_target targets[NODE_MAX_TARGETS];
};

/* Paths inside the state directory; return 0 or -ENAMETOOLONG. */
int node_vol_dir(const struct node *n, const char *vol_id, char *out, size_t len);
int node_vol_file(const struct node *n, const char *vol_id, const char *name, char *out,
		  size_t len);
/* Loads <vol>/state.json: 0, -ENOENT (not staged here) or -ZL_ERR_INVAL. */
int node_state_load(const struct node *n, const char *vol_id, struct node_vol_state *st);
/* Writes state.json atomically (temp file + rename + fsync). 0 or -errno. */
int node_state_save(const struct node *n, const struct node_vol_state *st);
/* Removes the volume's state directory and everything in it. */
int node_state_remove(const struct node *n, const char *vol_id);
/* Reaps the attach processes of this zipline-node that ended on their own
 * (SIGTERM, a crash), so none lingers as a zombie. */
void node_state_reap_all(struct node *n);
/* Calls fn for every volume directory under the state dir. */
void node_state_foreach(struct node *n, void (*fn)(struct node *n, const char *vol_id, void *arg),
			void *arg);
/* JSON codec, pure (unit-tested). */
char *node_state_to_json(const struct node_vol_state *st);
int node_state_from_json(const char *json, struct node_vol_state *st);

/* Per-volume operation lock: 0 or -ZL_ERR_BUSY (another operation runs). */
int node_op_begin(struct node *n, const char *vol_id);
void node_op_end(struct node *n, const char *vol_id);

/* Start-up: adopts live attach processes, cleans up dead unstaged ones. */
void node_state_adopt_all(struct node *n);

/* ---- helpers (node_exec.c) ---- */

/* Runs argv[0] (absolute path or found in PATH) without a shell, waits up to
 * timeout_ms (then SIGKILL). Returns the exit status (0..255), or a negative
 * errno when it could not run. Its stdout+stderr (trimmed, at most outlen-1
 * bytes) land in out when out != NULL. */
int node_run(const char *const argv[], int timeout_ms, char *out, size_t outlen);
/* Is path a mount point (an entry in /proc/self/mountinfo)? 1, 0 or -errno.
 * src (optional) receives the mount source. */
int node_mountinfo_find(const char *path, char *src, size_t srclen);
/* Decodes the octal escapes of a mountinfo field in place. */
void node_mountinfo_unescape(char *s);
/* mkdir -p (mode 0750). 0 or -errno. */
int node_mkdir_p(const char *path);
/* Unmounts path if it is mounted (repeatedly, for stacked mounts); 0 or a
 * negative errno with the umount error in msg. */
int node_umount_all(const char *path, char *msg, size_t msglen);

/* Grows the mounted file system of st (ext4: resize2fs on the device,
 * xfs: xfs_growfs on the staging mount) to the device's size; nothing to do
 * is success. node_run's result (node_stats.c). */
int node_fs_grow(const struct node_vol_state *st, char *out, size_t outlen);

/* ---- attach processes (node_attach.c) ---- */

struct node_attach_req {
	const char *volume_id;
	const char *prefix;
	uint64_t epoch;
	const char *token;
	enum node_frontend frontend;
	const char *reattach; /* NBD: take over this /dev/nbdN of a dead attach process */
	const char *recover;  /* ublk: take over this device id of a dead attach process */
	char *dev;	      /* NBD, ublk: gets the /dev/nbdN or /dev/ublkbN served */
	size_t devlen;
	int *ublk_id; /* ublk: gets the device id (optional) */
};

/* Starts the attach process for a volume and waits until its FUSE file or
 * its nbd or ublk device (req->dev) is served. Returns 0 with *pid set, or a negative error with msg filled. */
int node_attach_start(struct node *n, const struct node_attach_req *req, pid_t *pid, char *msg,
		      size_t msglen);
/* Is pid a live attach process of vol_id? (Reaps it when it is a zombie
 * child of ours.) */
bool node_attach_alive(pid_t pid, const char *vol_id);
/* SIGTERM, then waits up to timeout_ms (SIGKILL after). 0 or -ETIMEDOUT. */
int node_attach_stop(pid_t pid, const char *vol_id, int timeout_ms);
/* One request line to the attach process's control socket, one reply line
 * back. Returns 0 or a negative errno. */
int node_attach_ctl(const struct node *n, const char *vol_id, const char *cmd, char *reply,
		    size_t replylen);
/* losetup on the FUSE file; *loop gets /dev/loopN. */
int node_loop_setup(const struct node *n, const char *vol_id, char *loop, size_t looplen, char *msg,
		    size_t msglen);
/* Full teardown after the mounts are gone: losetup -d, stop the attach
 * process, unmount the FUSE dir, remove the state dir. */
int node_detach(struct node *n, struct node_vol_state *st, char *msg, size_t msglen);
/* Size of a block device in bytes (BLKGETSIZE64). 0 or -errno. */
int node_blkdev_size(const char *dev, uint64_t *size);

/* ---- RPC handlers ---- */

int node_stage(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
	       ProtobufCMessage *resp);
int node_unstage(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp);
int node_publish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp);
int node_unpublish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp);
int node_get_stats(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp);
int node_expand(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		ProtobufCMessage *resp);
/* The full method table (Identity + Node). */
extern const struct zl_grpc_method node_methods[];
extern const size_t node_n_methods;

/* A VolumeCapability reduced to what the node acts on. */
struct node_cap {
	bool block;
	bool ro_mode; /* a reader-only access mode */
	char fs_type[16];
	char flags[512]; /* mount_flags joined with ',' */
};

/* Parses and checks a capability (NULL allowed only when !required).
 * Returns 0, or ZL_GRPC_INVALID_ARGUMENT with msg filled. */
struct Csi__V1__VolumeCapability;
int node_cap_parse(const struct Csi__V1__VolumeCapability *c, struct node_cap *out, char *msg,
		   size_t msglen);

/* The argument checks NodeStage and NodePublish share, in the spec's order:
 * volume_id present, `field` (the path argument) present, absolute and short
 * enough, the capability valid, the volume id well formed. Returns
 * ZL_GRPC_OK with *cap filled, or the failed status (INVALID_ARGUMENT,
 * NOT_FOUND) with its message recorded on the call. */
/* The opening checks of every node RPC: volume_id and the path named field
 * present (INVALID_ARGUMENT), the id a Zipline id (NOT_FOUND).
 * ZL_GRPC_OK or the code the call failed with. */
int node_check_args(struct zl_grpc_call *call, const char *volume_id, const char *field,
		    const char *path);
/* node_op_begin for an RPC: ZL_GRPC_OK, or the call fails with ABORTED
 * while another operation on the volume runs (end it with node_op_end). */
int node_op_begin_call(struct node *n, struct zl_grpc_call *call, const char *volume_id);
/* node_check_args, then node_op_begin_call: the opening of an RPC that
 * changes a volume. ZL_GRPC_OK (end with node_op_end) or the call's code. */
int node_rpc_begin(struct node *n, struct zl_grpc_call *call, const char *volume_id,
		   const char *field, const char *path);
int node_check_stage_args(struct zl_grpc_call *call, const char *volume_id, const char *field,
			  const char *path, const struct Csi__V1__VolumeCapability *vc,
			  struct node_cap *cap);
/* Value of key in a protobuf-c string map (any *Entry type), or NULL. */
const char *node_map_get(void *const *entries, size_t n, const char *key);

/* Checks a volume id for the RPCs: 0 or -ZL_ERR_INVAL. */
int node_check_vol_id(const char *id);
/* Volume known in etcd? 0, -ZL_ERR_NOT_FOUND or an etcd error. */
int node_volume_exists(struct node *n, const char *prefix, const char *vol_id, uint64_t *size);

/* ---- starting attach processes (node_spawn.c) ---- */

#define NODE_SPAWN_MSG_MAX (64u << 10)

/* posix_spawn of exe with argv and envp in a new session: stdin /dev/null,
 * stdout and stderr logfd, fd 3 readyfd, nothing else open, default signal
 * dispositions and an empty mask. Returns 0 (*pid set) or -errno. */
int node_spawn_attach(const char *exe, char *const *argv, char *const *envp, int logfd,
		      int readyfd, pid_t *pid);
/* A spawn request's bytes: argv (at least 2 entries, argv[1] "attach") and
 * envp (NULL-terminated; envp may be NULL). Returns the length or
 * -ZL_ERR_INVAL / -ZL_ERR_RANGE (over cap). */
ssize_t node_spawn_msg_encode(const char *const *argv, const char *const *envp, uint8_t *buf,
			      size_t cap);
/* Splits a request of len bytes in place: argv and envp point into buf and
 * are NULL-terminated (room for 65 and 2049 pointers). Returns 0, or
 * -ZL_ERR_PROTO with *why (bad magic, counts, an unterminated string,
 * trailing bytes, argv[1] not "attach"). */
int node_spawn_msg_decode(uint8_t *buf, size_t len, char **argv, char **envp, const char **why);
/* Asks the spawner at sock to start an attach process with argv, envp and
 * the two descriptors. Returns 0 (*pid set) or an error with msg. */
int node_spawner_request(const char *sock, const char *const *argv, const char *const *envp,
			 int logfd, int readyfd, pid_t *pid, char *msg, size_t msglen);
/* `zipline-node spawner --socket PATH`: serves such requests until SIGTERM. */
int spawner_main(int argc, char **argv);

/* ---- the attach process (attach_main.c, attach_fuse.c) ---- */

/* `zipline-node attach ...`: serves one volume until SIGTERM. */
int attach_main(int argc, char **argv);

/* ---- registration for the controller (node_register.c) ---- */

/* Writes <prefix>csinodes/<node-id> (no lease); when etcd does not answer,
 * starts a thread that retries until it does. 0, or -ZL_ERR_INVAL (key too
 * long, printed) / a thread error. */
int node_register_start(struct node *n);
/* Stops the retry thread, if any. */
void node_register_stop(void);
/* True once the csinodes/ record was put. */
bool node_registered(void);

/* ---- node_metrics.c: --metrics ---- */
/* Serves /metrics (CSI calls of srv, etcd calls, every staged volume with
 * its attach process's state and I/O counters), /healthz and /readyz
 * (registered in etcd) on n->cfg.metrics; no-op when it is NULL or "off".
 * 0 or a negative error (logged). */
int node_metrics_start(struct node *n, struct zl_grpc_server *srv);
void node_metrics_stop(void);

struct zl_cfg_etcd;
/* Parses zipline-node's argv into c and its etcd options into e (e must
 * outlive c: c->etcd_urls and c->etcd_prefix point into it), exports them for
 * the attach processes. 0, 1 (--help or --version printed: exit 0), or
 * -ZL_ERR_INVAL after one line on stderr (exit 2). node_flags.c. */
int node_flags_parse(int argc, char **argv, struct node_cfg *c, struct zl_cfg_etcd *e);
/* Takes e's TLS/auth settings from that environment (the defaults of the
 * flags). node_etcd.c. */
void node_etcd_import(struct zl_cfg_etcd *e);
/* Records the etcd TLS/auth flags (--etcd-cacert, --etcd-cert, --etcd-key,
 * --etcd-user, --etcd-password-file) of e in the environment for this
 * process's attach processes. node_etcd.c. */
void node_etcd_export(const struct zl_cfg_etcd *e);
/* Fills the TLS/auth fields of eo from that environment (eo->endpoints
 * set); pw holds the password read from its file. 0 or -ZL_ERR_INVAL after
 * printing why. */
int node_etcd_opts(struct zl_etcd_opts *eo, char *pw, size_t pw_len);

/* ---- frontends (node_frontend.c) ---- */

/* "fuse", "nbd", "ublk". */
const char *node_frontend_name(enum node_frontend f);
/* Parses fuse|nbd|ublk into *out: 0; "auto": 1 (*out untouched);
 * anything else: -ZL_ERR_INVAL. */
int node_frontend_parse(const char *s, enum node_frontend *out);
/* Does this node's kernel offer frontend f (its module loaded, or `modprobe`
 * loads it; ublk: /dev/ublk-control exists)? 0, or -EOPNOTSUPP with why
 * naming the missing module. */
int node_frontend_check(enum node_frontend f, char *why, size_t len);
/* Picks the frontend for --frontend auto: ublk when the kernel offers it,
 * else nbd, else FUSE; logs why. */
enum node_frontend node_frontend_auto(void);
/* Does the nbd/ublk device of a staged volume still exist for it (waiting
 * for a server when its attach process is gone)? false for FUSE. */
bool node_frontend_dev_present(const struct node_vol_state *st);
/* Starts an attach process that takes over the nbd or ublk device of a
 * staged volume whose attach process died (st->pid, state saved). 0 or an
 * error with msg filled. */
int node_attach_takeover(struct node *n, struct node_vol_state *st, char *msg, size_t msglen);
/* UBLK_CMD_DEL_DEV of a device whose server is gone (attach_ublk.c),
 * when the kernel names server (> 0) as its last server: 0, -ESRCH (another
 * server's device), or -errno. */
int attach_ublk_del_dev(int dev_id, pid_t server);
/* Is /dev/nbdN still connected for vol_id (its sysfs backend names the
 * volume and it has a size)? */
bool node_nbd_serves(const char *dev, const char *vol_id);
/* NBD_CMD_DISCONNECT of /dev/nbdN (attach_nbd.c). 0 or -errno. */
int attach_nbd_disconnect_dev(const char *dev);
/* NBD_CMD_RECONFIGURE of /dev/nbdN served for vol_id to size bytes (the
 * kernel freezes the device's queue until its requests end: never call it
 * from the loop of the attach process that serves them). 0 or -errno. */
int attach_nbd_resize_dev(const char *dev, const char *vol_id, uint64_t size);
/* Keeps / reads the attach token of a volume staged through nbd or ublk
 * (<vol>/token, 0600): a new attach process that takes the device over
 * after a crash needs it. 0 or -errno. */
int node_token_save(const struct node *n, const char *vol_id, const char *token);
int node_token_load(const struct node *n, const char *vol_id, char *token, size_t len);
/* The loop device (/dev/loopN) whose backing file is `file`, if any: 1,
 * else 0. */
int node_loop_find(const char *file, char *loop, size_t looplen);
/* Parses an --io-timeout value: whole seconds 1..86400. 0 (*out, optional,
 * set) or -ZL_ERR_INVAL. attach_main.c. */
int node_io_timeout_parse(const char *s, uint32_t *out);
/* Default of --attach-timeout: well under the CSI sidecars' and kubelet's
 * timeouts, so NodeStage answers with the reason before they give up. */
#define NODE_ATTACH_START_S 20
/* Parses an --attach-timeout / --start-timeout value: whole seconds
 * 1..600. 0 (*out, optional, gets it) or -ZL_ERR_INVAL. */
int node_start_timeout_parse(const char *s, uint32_t *out);
/* Parses a --ublk-threads value: 1..ATTACH_UBLK_THREADS_MAX (16). 0 (*out,
 * optional, gets it) or -ZL_ERR_INVAL. attach_main.c. */
int node_ublk_threads_parse(const char *s, uint32_t *out);

#endif
