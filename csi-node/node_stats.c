/* NodeGetVolumeStats and NodeExpandVolume. */
#include "node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "csi.pb-c.h"

/* Is path the staging path or a publish target of the volume? */
static bool node_path_of(const struct node_vol_state *st, const char *path)
{
	if (strcmp(st->staging, path) == 0)
		return true;
	for (size_t i = 0; i < st->n_targets; i++)
		if (strcmp(st->targets[i].path, path) == 0)
			return true;
	return false;
}

static Csi__V1__VolumeUsage *node_usage(struct zl_grpc_call *call, int unit, uint64_t total,
					uint64_t avail, uint64_t used)
{
	Csi__V1__VolumeUsage *u = zl_grpc_call_new_msg(call, &csi__v1__volume_usage__descriptor);

	if (u) {
		u->unit = unit;
		u->total = (int64_t)total;
		u->available = (int64_t)avail;
		u->used = (int64_t)used;
	}
	return u;
}

/* Volume condition: the attach process and its I/O error count. */
static void node_condition(const struct node *n, const struct node_vol_state *st, bool *abnormal,
			   char *msg, size_t len)
{
	char reply[512];
	const char *e;

	*abnormal = false;
	const char *fe = node_frontend_name(st->frontend);

	snprintf(msg, len, "attached through pid %d (%s, frontend %s): attach process alive",
		 (int)st->pid, st->loop, fe);
	if (!node_attach_alive(st->pid, st->volume_id) && node_frontend_dev_present(st)) {
		*abnormal = true;
		snprintf(msg, len,
			 "the attach process (pid %d) of volume %s is gone: %s (frontend %s) "
			 "holds its I/O until the new one zipline-node starts takes it over%s",
			 (int)st->pid, st->volume_id, st->loop, fe,
			 st->frontend == NODE_FRONTEND_NBD ? " (120 s at most)" : "");
		return;
	}
	if (!node_attach_alive(st->pid, st->volume_id)) {
		*abnormal = true;
		snprintf(msg, len,
			 "the attach process (pid %d, frontend %s) of volume %s is gone: I/O "
			 "fails; unpublish and unstage to recover",
			 (int)st->pid, fe, st->volume_id);
		return;
	}
	if (node_attach_ctl(n, st->volume_id, "status", reply, sizeof(reply)) != 0)
		return;
	e = strstr(reply, "fenced=");
	if (e && e[7] == '1') {
		*abnormal = true;
		snprintf(msg, len,
			 "volume %s was detached from this node or attached to another "
			 "(ControllerUnpublish/Publish): this attachment (epoch %llu) is "
			 "fenced by the storage, every I/O fails; unpublish and unstage it here",
			 st->volume_id, (unsigned long long)st->epoch);
		return;
	}
	e = strstr(reply, "errors=");
	if (e && strtoull(e + 7, NULL, 10) > 0) {
		*abnormal = true;
		snprintf(msg, len,
			 "%llu I/O requests of volume %s failed since attach (see %s/%s/"
			 "attach.log)",
			 strtoull(e + 7, NULL, 10), st->volume_id, n->cfg.state_dir, st->volume_id);
	}
}

int node_get_stats(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		   ProtobufCMessage *resp)
{
	const Csi__V1__NodeGetVolumeStatsRequest *r =
	    (const Csi__V1__NodeGetVolumeStatsRequest *)req;
	Csi__V1__NodeGetVolumeStatsResponse *out = (Csi__V1__NodeGetVolumeStatsResponse *)resp;
	struct node *n = ctx;
	struct node_vol_state st;
	struct stat sb;
	char msg[512];
	bool abnormal;
	int rc;

	rc = node_check_args(call, r->volume_id, "volume_path", r->volume_path);
	if (rc)
		return rc;
	rc = node_state_load(n, r->volume_id, &st);
	if (rc == -ENOENT)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s is not staged on this node",
				    r->volume_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	if (!node_path_of(&st, r->volume_path) || stat(r->volume_path, &sb) < 0)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "%s is not a staging or publish path of volume %s on this node",
				    r->volume_path, r->volume_id);
	node_condition(n, &st, &abnormal, msg, sizeof(msg));
	out->usage = zl_grpc_call_alloc(call, 2 * sizeof(*out->usage));
	out->volume_condition = zl_grpc_call_new_msg(call, &csi__v1__volume_condition__descriptor);
	if (!out->usage || !out->volume_condition)
		return -ENOMEM;
	if (st.block) {
		uint64_t size = 0;

		rc = node_blkdev_size(st.loop, &size);
		if (rc && !abnormal) {
			abnormal = true;
			snprintf(msg, sizeof(msg), "cannot read the size of %s: %s", st.loop,
				 strerror(-rc));
		}
		if (rc == 0)
			out->usage[out->n_usage++] =
			    node_usage(call, CSI__V1__VOLUME_USAGE__UNIT__BYTES, size, 0, 0);
	} else {
		struct statvfs vfs;

		if (statvfs(r->volume_path, &vfs) == 0) {
			uint64_t f = vfs.f_frsize;

			out->usage[out->n_usage++] =
			    node_usage(call, CSI__V1__VOLUME_USAGE__UNIT__BYTES, vfs.f_blocks * f,
				       vfs.f_bavail * f, (vfs.f_blocks - vfs.f_bfree) * f);
			out->usage[out->n_usage++] =
			    node_usage(call, CSI__V1__VOLUME_USAGE__UNIT__INODES, vfs.f_files,
				       vfs.f_favail, vfs.f_files - vfs.f_ffree);
		} else if (!abnormal) {
			abnormal = true;
			snprintf(msg, sizeof(msg), "statvfs on %s failed: %s", r->volume_path,
				 strerror(errno));
		}
	}
	for (size_t i = 0; i < out->n_usage; i++)
		if (!out->usage[i])
			return -ENOMEM;
	out->volume_condition->abnormal = abnormal;
	out->volume_condition->message = zl_grpc_call_strdup(call, msg);
	if (!out->volume_condition->message)
		return -ENOMEM;
	return ZL_GRPC_OK;
}

/* Makes the loop device see the new size of the FUSE file. */
static int node_loop_refresh(const struct node *n, const struct node_vol_state *st, uint64_t size,
			     char *msg, size_t len)
{
	const char *argv[] = {"losetup", "-c", st->loop, NULL};
	char file[NODE_PATH_MAX], out[512];
	struct stat sb;
	uint64_t dev = 0;
	int rc;

	/* stat() fetches the new attributes, so the kernel's i_size grows. */
	if (node_vol_file(n, st->volume_id, "fuse/disk", file, sizeof(file)) ||
	    stat(file, &sb) < 0 || (uint64_t)sb.st_size != size) {
		snprintf(msg, len, "the FUSE file of %s does not show the new size %llu",
			 st->volume_id, (unsigned long long)size);
		return -EIO;
	}
	rc = node_run(argv, 60000, out, sizeof(out));
	if (rc) {
		snprintf(msg, len, "losetup -c %s failed: %s", st->loop, out);
		return -EIO;
	}
	rc = node_blkdev_size(st->loop, &dev);
	if (rc || dev != size) {
		snprintf(msg, len, "%s is %llu bytes after losetup -c, expected %llu", st->loop,
			 (unsigned long long)dev, (unsigned long long)size);
		return -EIO;
	}
	return 0;
}

/* Makes /dev/nbdN the new size: its attach process serves it already (it
 * answered "resize"); the kernel learns it by netlink. This thread may
 * wait for the device's queue to freeze: the attach process ends its
 * requests meanwhile. */
static int node_nbd_refresh(const struct node_vol_state *st, uint64_t size, char *msg, size_t len)
{
	uint64_t dev = 0;
	int rc;

	if (node_blkdev_size(st->loop, &dev) == 0 && dev == size)
		return 0; /* a retried expansion */
	rc = attach_nbd_resize_dev(st->loop, st->volume_id, size);
	if (rc) {
		snprintf(msg, len, "NBD_CMD_RECONFIGURE of %s to %llu bytes failed: %s", st->loop,
			 (unsigned long long)size, strerror(-rc));
		return -EIO;
	}
	rc = node_blkdev_size(st->loop, &dev);
	if (rc || dev != size) {
		snprintf(msg, len, "%s is %llu bytes after NBD_CMD_RECONFIGURE, expected %llu",
			 st->loop, (unsigned long long)dev, (unsigned long long)size);
		return -EIO;
	}
	return 0;
}

/* /dev/ublkbN grew in its attach process (UPDATE_SIZE, before the "ok"
 * of its resize): the device must show the new size. */
static int node_ublk_refresh(const struct node_vol_state *st, uint64_t size, char *msg,
			     size_t len)
{
	uint64_t dev = 0;

	if (node_blkdev_size(st->loop, &dev) || dev != size) {
		snprintf(msg, len, "%s is %llu bytes after its UPDATE_SIZE, expected %llu",
			 st->loop, (unsigned long long)dev, (unsigned long long)size);
		return -EIO;
	}
	return 0;
}

int node_fs_grow(const struct node_vol_state *st, char *out, size_t outlen)
{
	const char *ext4[] = {"resize2fs", st->loop, NULL};
	const char *xfs[] = {"xfs_growfs", st->staging, NULL};

	return node_run(strcmp(st->fs_type, "xfs") == 0 ? xfs : ext4, 10 * 60 * 1000, out, outlen);
}

static int node_expand_locked(struct node *n, struct zl_grpc_call *call,
			      const Csi__V1__NodeExpandVolumeRequest *r, uint64_t *size)
{
	struct node_vol_state st;
	char reply[320], msg[768], out[1024];
	const char *p;
	uint64_t want = 0;
	bool block;
	int rc;

	rc = node_state_load(n, r->volume_id, &st);
	if (rc == -ENOENT)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume %s is not staged on this node",
				    r->volume_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot read the node state of volume %s",
					r->volume_id);
	if (!node_path_of(&st, r->volume_path))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "%s is not a staging or publish path of volume %s on this node",
				    r->volume_path, r->volume_id);
	if (!node_attach_alive(st.pid, st.volume_id))
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "the attach process of volume %s (pid %d) is gone: unstage and "
				    "stage the volume again",
				    r->volume_id, (int)st.pid);
	if (r->capacity_range)
		want = (uint64_t)ZL_MAX(r->capacity_range->required_bytes, 0);
	rc = node_attach_ctl(n, st.volume_id, "resize", reply, sizeof(reply));
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot reach the attach process of %s",
					r->volume_id);
	p = strstr(reply, "size=");
	if (st.frontend == NODE_FRONTEND_UBLK && strncmp(reply, "err ", 4) == 0)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume %s is staged through the ublk frontend (%s), which "
				    "did not grow: %s",
				    r->volume_id, st.loop, reply + 4);
	if (strncmp(reply, "ok", 2) != 0 || !p)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "resizing the attachment of %s: %s",
				    r->volume_id, reply);
	*size = strtoull(p + 5, NULL, 10);
	if (want && *size < want)
		return zl_grpc_fail(
		    call, ZL_GRPC_OUT_OF_RANGE,
		    "volume %s is %llu bytes, less than the %llu required: expand it "
		    "with ControllerExpandVolume first",
		    r->volume_id, (unsigned long long)*size, (unsigned long long)want);
	if (st.frontend == NODE_FRONTEND_NBD)
		rc = node_nbd_refresh(&st, *size, msg, sizeof(msg));
	else if (st.frontend == NODE_FRONTEND_UBLK)
		rc = node_ublk_refresh(&st, *size, msg, sizeof(msg));
	else
		rc = node_loop_refresh(n, &st, *size, msg, sizeof(msg));
	if (rc)
		return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "%s", msg);
	block =
	    st.block || (r->volume_capability && r->volume_capability->access_type_case ==
						     CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK);
	if (!block) {
		rc = node_fs_grow(&st, out, sizeof(out));
		if (rc)
			return zl_grpc_fail(call, ZL_GRPC_INTERNAL, "growing %s on %s failed: %s",
					    st.fs_type, st.loop, out);
	}
	st.size = *size;
	node_state_save(n, &st);
	ZL_LOG_INFO(NODE_LOG, "expanded: vol=%s size=%llu mode=%s", r->volume_id,
		    (unsigned long long)*size, block ? "block" : st.fs_type);
	return ZL_GRPC_OK;
}

int node_expand(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		ProtobufCMessage *resp)
{
	const Csi__V1__NodeExpandVolumeRequest *r = (const Csi__V1__NodeExpandVolumeRequest *)req;
	Csi__V1__NodeExpandVolumeResponse *out = (Csi__V1__NodeExpandVolumeResponse *)resp;
	struct node *n = ctx;
	uint64_t size = 0;
	int rc;

	rc = node_rpc_begin(n, call, r->volume_id, "volume_path", r->volume_path);
	if (rc)
		return rc;
	rc = node_expand_locked(n, call, r, &size);
	node_op_end(n, r->volume_id);
	if (rc == ZL_GRPC_OK)
		out->capacity_bytes = (int64_t)size;
	return rc;
}
