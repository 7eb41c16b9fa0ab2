/* NodeStageVolume / NodeUnstageVolume: attach the volume through its own
 * attach process (FUSE file + loop device, /dev/nbdN with the nbd frontend,
 * /dev/ublkbN with ublk; the StorageClass's `frontend` parameter, passed in
 * the volume context, goes over the node's --frontend), format it when
 * blank, mount it on the staging path; and the reverse. A staged nbd or
 * ublk volume whose attach process died gets a new one that takes the
 * device over (the mount stays). */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "csi.pb-c.h"

#define NODE_MKFS_TIMEOUT_MS  (10 * 60 * 1000)
#define NODE_MOUNT_TIMEOUT_MS (2 * 60 * 1000)

static bool node_stage_same(const struct node_vol_state *st, const char *staging,
			    const struct node_cap *cap)
{
	if (st->block != cap->block)
		return false;
	if (cap->block)
		return true;
	return strcmp(st->fs_type, cap->fs_type) == 0 && strcmp(st->mount_flags, cap->flags) == 0 &&
	       st->stage_ro == cap->ro_mode;
}

/* Formats the device if it holds nothing blkid recognises; *existed tells
 * whether it held the file system already. */
static int node_format(struct zl_grpc_call *call, const struct node_vol_state *st, bool *existed)
{
	const char *blkid[] = {"blkid", "-p", "-s", "TYPE", "-o", "value", st->loop, NULL};
	const char *ext4[] = {"mkfs.ext4", "-F",      "-q",	"-E", "nodiscard",
			      "-L",	   "zipline", st->loop, NULL};
	const char *xfs[] = {"mkfs.xfs", "-f", "-q", "-K", st->loop, NULL};
	char out[1024];
	int rc;

	*existed = false;
	rc = node_run(blkid, 60000, out, sizeof(out));
	if (rc == 0 && out[0]) {
		*existed = true;
		if (strcmp(out, st->fs_type) == 0)
			return ZL_GRPC_OK;
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s already holds a %s filesystem but %s was asked for; "
				    "it is never reformatted: use fsType %s",
				    st->volume_id, out, st->fs_type, out);
	}
	if (rc != 2)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
				    "blkid on %s (volume %s) failed with status %d: %s", st->loop,
				    st->volume_id, rc, out);
	ZL_LOG_INFO(NODE_LOG, "formatting blank volume: vol=%s dev=%s fs=%s", st->volume_id,
		    st->loop, st->fs_type);
	rc = node_run(strcmp(st->fs_type, "xfs") == 0 ? xfs : ext4, NODE_MKFS_TIMEOUT_MS, out,
		      sizeof(out));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "mkfs.%s on %s (volume %s) failed: %s",
				    st->fs_type, st->loop, st->volume_id, out);
	return ZL_GRPC_OK;
}

/* The number after "label:" in dumpe2fs -h's output, 0 when absent. */
static uint64_t node_dumpe2fs_field(const char *out, const char *label)
{
	const char *p = strstr(out, label);

	return p ? strtoull(p + strlen(label), NULL, 10) : 0;
}

/* An existing ext4 smaller than its device (a clone larger than its source,
 * an expansion while unstaged) is grown before it is mounted: offline
 * resize2fs needs no CAP_SYS_RESOURCE, which online growth does, and it
 * wants a checked file system first (e2fsck -f -p: 0 clean, 1 repaired). */
static int node_ext4_fit(struct zl_grpc_call *call, const struct node_vol_state *st)
{
	const char *dump[] = {"dumpe2fs", "-h", st->loop, NULL};
	const char *fsck[] = {"e2fsck", "-f", "-p", st->loop, NULL};
	const char *grow[] = {"resize2fs", st->loop, NULL};
	uint64_t dev = 0, blocks, bsize;
	char out[8192];
	int fd, rc;

	fd = open(st->loop, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, BLKGETSIZE64, &dev) < 0) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return zl_grpc_fail_err(call, rc, "volume %s: cannot read the size of %s",
					st->volume_id, st->loop);
	}
	close(fd);
	rc = node_run(dump, 60000, out, sizeof(out));
	blocks = node_dumpe2fs_field(out, "Block count:");
	bsize = node_dumpe2fs_field(out, "Block size:");
	if (rc || !blocks || !bsize)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
				    "volume %s: dumpe2fs -h %s failed (status %d): %.300s",
				    st->volume_id, st->loop, rc, out);
	if ((blocks + 1) * bsize > dev)
		return ZL_GRPC_OK;
	ZL_LOG_INFO(NODE_LOG, "growing ext4 to the volume: vol=%s dev=%s fs=%" PRIu64 " dev=%" PRIu64,
		    st->volume_id, st->loop, blocks * bsize, dev);
	rc = node_run(fsck, NODE_MKFS_TIMEOUT_MS, out, sizeof(out));
	if (rc < 0 || rc > 1)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
				    "volume %s: e2fsck -f -p %s before growing it found what it "
				    "cannot repair alone (status %d): %.300s; run e2fsck on the "
				    "volume by hand",
				    st->volume_id, st->loop, rc, out);
	rc = node_run(grow, NODE_MKFS_TIMEOUT_MS, out, sizeof(out));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
				    "volume %s: resize2fs %s to %" PRIu64 " bytes failed: %.300s",
				    st->volume_id, st->loop, dev, out);
	return ZL_GRPC_OK;
}

static int node_mount_staging(struct zl_grpc_call *call, const struct node_vol_state *st)
{
	char opts[600], src[128] = "", out[1024];
	const char *argv[] = {"mount", "-t", st->fs_type, "-o", opts, st->loop, st->staging, NULL};
	bool existed, grow;
	int rc;

	rc = node_mkdir_p(st->staging);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot create staging path %s", st->staging);
	rc = node_mountinfo_find(st->staging, src, sizeof(src));
	if (rc > 0) {
		if (strcmp(src, st->loop) == 0)
			return ZL_GRPC_OK;
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "staging path %s already has %s mounted, not volume %s",
				    st->staging, src, st->volume_id);
	}
	rc = node_format(call, st, &existed);
	if (rc)
		return rc;
	grow = existed && !st->stage_ro;
	if (grow && strcmp(st->fs_type, "ext4") == 0) {
		rc = node_ext4_fit(call, st);
		if (rc)
			return rc;
	}
	snprintf(opts, sizeof(opts), "%s%s%s", st->stage_ro ? "ro" : "rw",
		 st->mount_flags[0] ? "," : "", st->mount_flags);
	rc = node_run(argv, NODE_MOUNT_TIMEOUT_MS, out, sizeof(out));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
				    "mounting %s (%s, volume %s) on %s with -o %s failed: %s",
				    st->loop, st->fs_type, st->volume_id, st->staging, opts, out);
	/* xfs grows only mounted (xfs_growfs: nothing to do is success). */
	if (!grow || strcmp(st->fs_type, "xfs"))
		return ZL_GRPC_OK;
	rc = node_fs_grow(st, out, sizeof(out));
	if (rc == 0)
		return ZL_GRPC_OK;
	rc = zl_grpc_fail(call, ZL_GRPC_INTERNAL,
			  "growing %s on %s (volume %s) to the volume's size failed: %s", st->fs_type,
			  st->loop, st->volume_id, out);
	if (node_umount_all(st->staging, out, sizeof(out)))
		ZL_LOG_ERR(NODE_LOG, "unmounting %s after the failed grow: %s", st->staging, out);
	return rc;
}

/* Undoes a stage whose attach process died: lazily unmounts what is left. */
static int node_stage_reset(struct node *n, struct node_vol_state *st, char *msg, size_t len)
{
	if (!st->block && node_mountinfo_find(st->staging, NULL, 0) > 0) {
		const char *argv[] = {"umount", "-l", st->staging, NULL};
		char out[512];

		if (node_run(argv, 60000, out, sizeof(out)) != 0) {
			snprintf(msg, len, "umount -l %.300s failed: %.300s", st->staging, out);
			return -EBUSY;
		}
	}
	return node_detach(n, st, msg, len);
}

/* The frontend of a new stage: the volume context's `frontend` (the
 * StorageClass parameter) over --frontend; one this node's kernel lacks is
 * refused, naming the module. ZL_GRPC_OK with *out set, or the call's code. */
static int node_stage_frontend(struct node *n, struct zl_grpc_call *call,
			       const Csi__V1__NodeStageVolumeRequest *r, enum node_frontend *out)
{
	const char *v =
	    node_map_get((void *const *)r->volume_context, r->n_volume_context, "frontend");
	char why[320];
	int rc;

	*out = n->cfg.frontend;
	rc = v && v[0] ? node_frontend_parse(v, out) : 1;
	if (rc < 0)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "volume %s: volume_context[frontend]=\"%s\" is not a frontend "
				    "(auto, ublk, nbd or fuse)",
				    r->volume_id, v);
	if (rc == 1) /* none or auto: what this node picked (--frontend) */
		*out = n->cfg.frontend;
	if (node_frontend_check(*out, why, sizeof(why)) == 0)
		return ZL_GRPC_OK;
	if (rc == 1)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s: zipline-node --frontend %s, but %s on node %s; "
				    "load the module or run zipline-node with --frontend auto",
				    r->volume_id, node_frontend_name(*out), why, n->cfg.node_id);
	return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
			    "volume %s asks for the %s frontend (StorageClass parameter "
			    "frontend), but %s on node %s; load the module, or use a "
			    "StorageClass with frontend auto or fuse",
			    r->volume_id, v, why, n->cfg.node_id);
}

static int node_stage_locked(struct node *n, struct zl_grpc_call *call,
			     const Csi__V1__NodeStageVolumeRequest *r, const struct node_cap *cap)
{
	struct node_vol_state st;
	struct node_attach_req ar;
	const char *v, *tok;
	char msg[768] = "", dev[64];
	bool started = false;
	int rc;

	rc = node_state_load(n, r->volume_id, &st);
	if (rc == 0 && strcmp(st.staging, r->staging_target_path) != 0)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s is already staged on this node at %s, not %s",
				    r->volume_id, st.staging, r->staging_target_path);
	if (rc == 0 && !node_stage_same(&st, r->staging_target_path, cap))
		return zl_grpc_fail(
		    call, ZL_GRPC_ALREADY_EXISTS,
		    "volume %s is staged at %s with another capability (%s %s -o %s)", r->volume_id,
		    st.staging, st.block ? "block" : "mount", st.fs_type,
		    st.mount_flags[0] ? st.mount_flags : "defaults");
	if (rc == 0 && st.staged && !node_attach_alive(st.pid, st.volume_id) &&
	    node_frontend_dev_present(&st)) {
		/* The device (and what is mounted on it) waits for a new server. */
		if (node_attach_takeover(n, &st, msg, sizeof(msg)))
			return zl_grpc_fail(call, ZL_GRPC_UNAVAILABLE,
					    "cannot take over %s of volume %s: %s", st.loop,
					    r->volume_id, msg);
	}
	if (rc == 0 && !node_attach_alive(st.pid, st.volume_id)) {
		ZL_LOG_WARN(NODE_LOG, "attach process gone, staging again: vol=%s pid=%d",
			    st.volume_id, (int)st.pid);
		if (node_stage_reset(n, &st, msg, sizeof(msg)))
			return zl_grpc_fail(call, ZL_GRPC_INTERNAL,
					    "cannot clean up the dead attachment of %s: %s",
					    r->volume_id, msg);
		rc = -ENOENT;
	}
	if (rc == 0 && st.staged) {
		/* Idempotent; a staging mount lost since (unmounted by hand) comes back. */
		if (!st.block && node_mountinfo_find(st.staging, NULL, 0) <= 0)
			return node_mount_staging(call, &st);
		return ZL_GRPC_OK;
	}
	if (rc && rc != -ENOENT)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	if (rc == -ENOENT) {
		memset(&st, 0, sizeof(st));
		snprintf(st.volume_id, sizeof(st.volume_id), "%s", r->volume_id);
		snprintf(st.staging, sizeof(st.staging), "%s", r->staging_target_path);
		st.block = cap->block;
		snprintf(st.fs_type, sizeof(st.fs_type), "%s", cap->fs_type);
		snprintf(st.mount_flags, sizeof(st.mount_flags), "%s", cap->flags);
		st.stage_ro = cap->ro_mode;
		st.ublk_id = -1;
		rc = node_stage_frontend(n, call, r, &st.frontend);
		if (rc)
			return rc;
	}
	v = node_map_get((void *const *)r->publish_context, r->n_publish_context, "etcdPrefix");
	snprintf(st.prefix, sizeof(st.prefix), "%s", v && v[0] ? v : n->cfg.etcd_prefix);
	v = node_map_get((void *const *)r->publish_context, r->n_publish_context, "epoch");
	st.epoch = v ? strtoull(v, NULL, 10) : 0;

	rc = node_volume_exists(n, st.prefix, st.volume_id, &st.size);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s does not exist",
				    st.volume_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot look up volume %s in etcd (%s)",
					st.volume_id, zl_etcd_last_error());

	/* Zipline's ControllerPublish always hands out an attach token: without
	 * one no storage daemon would serve this node, so say so now rather
	 * than start an attach process that cannot read. */
	tok = node_map_get((void *const *)r->publish_context, r->n_publish_context, "token");
	if (!tok || !tok[0] || !st.epoch)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s: publish_context has no attach %s; call "
				    "ControllerPublishVolume for this volume and node %s first and "
				    "pass its publish_context to NodeStageVolume",
				    st.volume_id, !tok || !tok[0] ? "token" : "epoch",
				    n->cfg.node_id);
	if (!node_attach_alive(st.pid, st.volume_id)) {
		ar = (struct node_attach_req){
		    .volume_id = st.volume_id,
		    .prefix = st.prefix,
		    .epoch = st.epoch,
		    .token = tok,
		    .frontend = st.frontend,
		    .dev = dev,
		    .devlen = sizeof(dev),
		    .ublk_id = &st.ublk_id,
		};
		dev[0] = '\0';
		rc = node_attach_start(n, &ar, &st.pid, msg, sizeof(msg));
		if (rc)
			return zl_grpc_fail(call, zl_grpc_code_from_err(rc), "%s", msg);
		started = true;
		snprintf(st.loop, sizeof(st.loop), "%s", dev);
	}
	rc = node_state_save(n, &st);
	if (rc == 0 && st.frontend != NODE_FRONTEND_FUSE)
		rc = node_token_save(n, st.volume_id, tok);
	if (rc) {
		rc = zl_grpc_fail_err(call, rc, "cannot record the attachment of %s in %s",
				      st.volume_id, n->cfg.state_dir);
		goto out_undo;
	}
	if (st.frontend != NODE_FRONTEND_FUSE)
		rc = 0; /* the attach process serves /dev/nbdN or /dev/ublkbN itself */
	else
		rc = node_loop_setup(n, st.volume_id, st.loop, sizeof(st.loop), msg, sizeof(msg));
	if (rc) {
		rc = zl_grpc_fail(call, ZL_GRPC_INTERNAL, "volume %s: %s", st.volume_id, msg);
		goto out_undo;
	}
	rc = node_state_save(n, &st);
	if (rc == 0 && !st.block)
		rc = node_mount_staging(call, &st);
	else if (rc)
		rc =
		    zl_grpc_fail_err(call, rc, "cannot record the loop device of %s", st.volume_id);
	if (rc)
		goto out_undo;
	st.staged = true;
	rc = node_state_save(n, &st);
	if (rc) {
		rc = zl_grpc_fail_err(call, rc, "cannot record the stage of %s", st.volume_id);
		goto out_undo;
	}
	ZL_LOG_INFO(NODE_LOG, "staged: vol=%s mode=%s dev=%s staging=%s pid=%d epoch=%llu",
		    st.volume_id, st.block ? "block" : st.fs_type, st.loop, st.staging, (int)st.pid,
		    (unsigned long long)st.epoch);
	return ZL_GRPC_OK;
out_undo:
	/* Leave nothing behind that no state describes: a retry starts clean. */
	if (started) {
		char umsg[512];

		if (node_mountinfo_find(st.staging, NULL, 0) <= 0 &&
		    node_detach(n, &st, umsg, sizeof(umsg)))
			ZL_LOG_ERR(NODE_LOG, "cleanup after failed stage failed: vol=%s err=%s",
				   st.volume_id, umsg);
	}
	return rc;
}

int node_check_stage_args(struct zl_grpc_call *call, const char *volume_id, const char *field,
			  const char *path, const struct Csi__V1__VolumeCapability *vc,
			  struct node_cap *cap)
{
	char msg[256];
	int rc;

	rc = node_check_args(call, volume_id, field, path);
	if (rc)
		return rc;
	if (path[0] != '/' || strlen(path) >= NODE_PATH_MAX)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "%s must be an absolute path shorter than %d", field,
				    NODE_PATH_MAX);
	rc = node_cap_parse(vc, cap, msg, sizeof(msg));
	if (rc)
		return zl_grpc_fail(call, rc, "%s", msg);
	return ZL_GRPC_OK;
}

int node_stage(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
	       ProtobufCMessage *resp)
{
	const Csi__V1__NodeStageVolumeRequest *r = (const Csi__V1__NodeStageVolumeRequest *)req;
	struct node *n = ctx;
	struct node_cap cap;
	int rc;

	rc = node_check_stage_args(call, r->volume_id, "staging_target_path",
				   r->staging_target_path, r->volume_capability, &cap);
	if (rc == 0)
		rc = node_op_begin_call(n, call, r->volume_id);
	if (rc)
		return rc;
	rc = node_stage_locked(n, call, r, &cap);
	node_op_end(n, r->volume_id);
	return rc;
}

/* Drops targets whose mounts are gone (unpublished by hand, or lost). */
static void node_prune_targets(struct node_vol_state *st)
{
	size_t j = 0;

	for (size_t i = 0; i < st->n_targets; i++)
		if (node_mountinfo_find(st->targets[i].path, NULL, 0) > 0)
			st->targets[j++] = st->targets[i];
	st->n_targets = j;
}

static int node_unstage_locked(struct node *n, struct zl_grpc_call *call,
			       const Csi__V1__NodeUnstageVolumeRequest *r)
{
	struct node_vol_state st;
	char msg[768] = "";
	int rc;

	rc = node_state_load(n, r->volume_id, &st);
	if (rc == -ENOENT) {
		rc = node_volume_exists(n, n->cfg.etcd_prefix, r->volume_id, NULL);
		if (rc == -ZL_ERR_NOT_FOUND)
			return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s does not exist",
					    r->volume_id);
		return ZL_GRPC_OK; /* not staged here: nothing to do */
	}
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	if (strcmp(st.staging, r->staging_target_path) != 0)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s is staged at %s, not at %s", r->volume_id,
				    st.staging, r->staging_target_path);
	node_prune_targets(&st);
	if (st.n_targets)
		return zl_grpc_fail(
		    call, ZL_GRPC_FAILED_PRECONDITION,
		    "volume %s is still published at %s%s: call NodeUnpublishVolume "
		    "first",
		    r->volume_id, st.targets[0].path, st.n_targets > 1 ? " and more" : "");
	/* A device waiting for a server would hold the unmount's writeback
	 * (ublk: for ever): serve it again first. */
	if (st.staged && !node_attach_alive(st.pid, st.volume_id) &&
	    node_frontend_dev_present(&st) && node_attach_takeover(n, &st, msg, sizeof(msg)))
		ZL_LOG_WARN(NODE_LOG, "unstage without a server for its device: vol=%s err=\"%s\"",
			    st.volume_id, msg);
	if (!st.block) {
		rc = node_umount_all(st.staging, msg, sizeof(msg));
		if (rc)
			return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "volume %s: %s", r->volume_id,
					    msg);
	}
	st.staged = false;
	node_state_save(n, &st);
	rc = node_detach(n, &st, msg, sizeof(msg));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "detaching volume %s: %s", r->volume_id,
				    msg);
	ZL_LOG_INFO(NODE_LOG, "unstaged: vol=%s staging=%s", r->volume_id, r->staging_target_path);
	return ZL_GRPC_OK;
}

int node_unstage(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp)
{
	const Csi__V1__NodeUnstageVolumeRequest *r = (const Csi__V1__NodeUnstageVolumeRequest *)req;
	struct node *n = ctx;
	int rc;

	rc = node_rpc_begin(n, call, r->volume_id, "staging_target_path", r->staging_target_path);
	if (rc)
		return rc;
	rc = node_unstage_locked(n, call, r);
	node_op_end(n, r->volume_id);
	return rc;
}
