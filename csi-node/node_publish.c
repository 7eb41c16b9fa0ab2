/* NodePublishVolume / NodeUnpublishVolume: bind mounts of the staged
 * filesystem (a directory target) or of the loop device node (a file target
 * for block volumes). */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csi.pb-c.h"

static int node_find_target(const struct node_vol_state *st, const char *path)
{
	for (size_t i = 0; i < st->n_targets; i++)
		if (strcmp(st->targets[i].path, path) == 0)
			return (int)i;
	return -1;
}

/* Is the mount on path one of this volume's (its filesystem, or a bind of
 * its loop device)? */
static bool node_target_is_ours(const struct node_vol_state *st, const char *path)
{
	struct stat a, b;
	char src[128] = "";

	if (!st->block)
		return node_mountinfo_find(path, src, sizeof(src)) > 0 &&
		       strcmp(src, st->loop) == 0;
	return stat(path, &a) == 0 && stat(st->loop, &b) == 0 && S_ISBLK(a.st_mode) &&
	       a.st_rdev == b.st_rdev;
}

static int node_make_target(struct zl_grpc_call *call, const char *target, bool file)
{
	char parent[NODE_PATH_MAX];
	int fd, rc;

	if (!file) {
		rc = node_mkdir_p(target);
		if (rc)
			return zl_grpc_fail_err(call, rc, "cannot create target directory %s",
						target);
		return ZL_GRPC_OK;
	}
	snprintf(parent, sizeof(parent), "%s", target);
	rc = node_mkdir_p(dirname(parent));
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot create the directory of target %s",
					target);
	fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0660);
	if (fd < 0)
		return zl_grpc_fail_err(call, -errno, "cannot create target file %s", target);
	close(fd);
	return ZL_GRPC_OK;
}

static int node_publish_locked(struct node *n, struct zl_grpc_call *call,
			       const Csi__V1__NodePublishVolumeRequest *r,
			       const struct node_cap *cap)
{
	struct node_vol_state st;
	const char *src;
	char out[1024];
	int rc, i;

	rc = node_state_load(n, r->volume_id, &st);
	if (rc == -ENOENT) {
		rc = node_volume_exists(n, n->cfg.etcd_prefix, r->volume_id, NULL);
		if (rc == -ZL_ERR_NOT_FOUND)
			return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s does not exist",
					    r->volume_id);
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s is not staged on this node: call NodeStageVolume "
				    "first",
				    r->volume_id);
	}
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	if (!st.staged || strcmp(st.staging, r->staging_target_path) != 0)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s is not staged at %s%s%s: call NodeStageVolume first",
				    r->volume_id, r->staging_target_path,
				    st.staged ? " (it is staged at " : "",
				    st.staged ? st.staging : "");
	if (cap->block != st.block)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "volume %s was staged as %s, publish asks for %s", r->volume_id,
				    st.block ? "block" : "mount", cap->block ? "block" : "mount");
	if (!node_attach_alive(st.pid, st.volume_id))
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "the attach process of volume %s (pid %d) is gone: unstage and "
				    "stage the volume again",
				    r->volume_id, (int)st.pid);
	i = node_find_target(&st, r->target_path);
	rc = node_mountinfo_find(r->target_path, NULL, 0);
	if (i >= 0 && rc > 0) {
		if (st.targets[i].readonly == (bool)r->readonly)
			return ZL_GRPC_OK; /* idempotent */
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "volume %s is already published at %s %s", r->volume_id,
				    r->target_path,
				    st.targets[i].readonly ? "read-only" : "read-write");
	}
	if (rc > 0 && i < 0 && node_target_is_ours(&st, r->target_path)) {
		/* Mounted by us but never recorded (a crash in between): redo it. */
		rc = node_umount_all(r->target_path, out, sizeof(out));
		if (rc)
			return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "volume %s: %s", r->volume_id,
					    out);
	} else if (rc > 0) {
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "target %s already has something else mounted on it",
				    r->target_path);
	}
	if (i < 0 && st.n_targets >= NODE_MAX_TARGETS)
		return zl_grpc_fail(call, ZL_GRPC_RESOURCE_EXHAUSTED,
				    "volume %s is already published at %d targets", r->volume_id,
				    NODE_MAX_TARGETS);
	rc = node_make_target(call, r->target_path, st.block);
	if (rc)
		return rc;
	src = st.block ? st.loop : st.staging;
	{
		const char *argv[] = {"mount", "--bind",       "-o", r->readonly ? "ro" : "rw",
				      src,     r->target_path, NULL};

		rc = node_run(argv, 60000, out, sizeof(out));
	}
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "bind mount of %s on %s failed: %s",
				    src, r->target_path, out);
	if (i < 0)
		i = (int)st.n_targets++;
	snprintf(st.targets[i].path, sizeof(st.targets[i].path), "%s", r->target_path);
	st.targets[i].readonly = r->readonly;
	rc = node_state_save(n, &st);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot record the publish of %s", r->volume_id);
	ZL_LOG_INFO(NODE_LOG, "published: vol=%s target=%s ro=%d", r->volume_id, r->target_path,
		    (int)r->readonly);
	return ZL_GRPC_OK;
}

int node_publish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		 ProtobufCMessage *resp)
{
	const Csi__V1__NodePublishVolumeRequest *r = (const Csi__V1__NodePublishVolumeRequest *)req;
	struct node *n = ctx;
	struct node_cap cap;
	int rc;

	if (r->volume_id[0] && r->target_path[0] && !r->staging_target_path[0])
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "staging_target_path is required (this plugin stages volumes)");
	rc = node_check_stage_args(call, r->volume_id, "target_path", r->target_path,
				   r->volume_capability, &cap);
	if (rc == 0)
		rc = node_op_begin_call(n, call, r->volume_id);
	if (rc)
		return rc;
	rc = node_publish_locked(n, call, r, &cap);
	node_op_end(n, r->volume_id);
	return rc;
}

static int node_unpublish_locked(struct node *n, struct zl_grpc_call *call,
				 const Csi__V1__NodeUnpublishVolumeRequest *r)
{
	struct node_vol_state st;
	struct stat sb;
	char msg[768] = "";
	bool known;
	int rc, i;

	rc = node_state_load(n, r->volume_id, &st);
	if (rc && rc != -ENOENT)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	known = rc == 0;
	rc = node_umount_all(r->target_path, msg, sizeof(msg));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "volume %s: %s", r->volume_id, msg);
	if (lstat(r->target_path, &sb) == 0) {
		rc = S_ISDIR(sb.st_mode) ? rmdir(r->target_path) : unlink(r->target_path);
		if (rc < 0 && errno != ENOENT)
			return zl_grpc_fail_err(call, -errno,
						"cannot remove target %s of volume %s (is it "
						"empty?)",
						r->target_path, r->volume_id);
	} else if (!known) {
		/* Nothing here, nothing staged: is the volume known at all? */
		rc = node_volume_exists(n, n->cfg.etcd_prefix, r->volume_id, NULL);
		if (rc == -ZL_ERR_NOT_FOUND)
			return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s does not exist",
					    r->volume_id);
		return ZL_GRPC_OK;
	}
	if (known && (i = node_find_target(&st, r->target_path)) >= 0) {
		st.targets[i] = st.targets[--st.n_targets];
		rc = node_state_save(n, &st);
		if (rc)
			return zl_grpc_fail_err(call, rc, "cannot record the unpublish of %s",
						r->volume_id);
	}
	ZL_LOG_INFO(NODE_LOG, "unpublished: vol=%s target=%s", r->volume_id, r->target_path);
	return ZL_GRPC_OK;
}

int node_unpublish(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp)
{
	const Csi__V1__NodeUnpublishVolumeRequest *r =
	    (const Csi__V1__NodeUnpublishVolumeRequest *)req;
	struct node *n = ctx;
	int rc;

	rc = node_rpc_begin(n, call, r->volume_id, "target_path", r->target_path);
	if (rc)
		return rc;
	rc = node_unpublish_locked(n, call, r);
	node_op_end(n, r->volume_id);
	return rc;
}
