/* Frontends of the node plugin: how an attached volume reaches the kernel
 * (FUSE file + loop device, /dev/nbdN, /dev/ublkbN), which ones this node's
 * kernel offers, the pick of --frontend auto, and the takeover of a staged
 * nbd/ublk device whose attach process died (the kernel keeps the device
 * and its mounts; a new attach process serves it again). */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODE_UBLK_CTRL "/dev/ublk-control"

const char *node_frontend_name(enum node_frontend f)
{
	switch (f) {
	case NODE_FRONTEND_NBD:
		return "nbd";
	case NODE_FRONTEND_UBLK:
		return "ublk";
	default:
		return "fuse";
	}
}

int node_frontend_parse(const char *s, enum node_frontend *out)
{
	if (!strcmp(s, "auto"))
		return 1;
	if (!strcmp(s, "fuse"))
		*out = NODE_FRONTEND_FUSE;
	else if (!strcmp(s, "nbd"))
		*out = NODE_FRONTEND_NBD;
	else if (!strcmp(s, "ublk"))
		*out = NODE_FRONTEND_UBLK;
	else
		return -ZL_ERR_INVAL;
	return 0;
}

/* The kernel module a frontend needs. */
static const char *node_frontend_module(enum node_frontend f)
{
	return f == NODE_FRONTEND_UBLK ? "ublk_drv" : f == NODE_FRONTEND_NBD ? "nbd" : "fuse";
}

/* Is the module's interface there: the module in /sys/module, and for ublk
 * its control device? */
static bool node_frontend_present(enum node_frontend f)
{
	char path[64];

	if (f == NODE_FRONTEND_UBLK)
		return access(NODE_UBLK_CTRL, F_OK) == 0;
	snprintf(path, sizeof(path), "/sys/module/%s", node_frontend_module(f));
	return access(path, F_OK) == 0;
}

int node_frontend_check(enum node_frontend f, char *why, size_t len)
{
	const char *mod = node_frontend_module(f);
	const char *argv[] = {"modprobe", mod, NULL};
	char out[256] = "";
	int rc;

	why[0] = '\0';
	if (f == NODE_FRONTEND_FUSE || node_frontend_present(f))
		return 0;
	rc = node_run(argv, 30000, out, sizeof(out));
	if (rc == 0 && node_frontend_present(f))
		return 0;
	if (f == NODE_FRONTEND_UBLK && rc == 0)
		snprintf(why, len,
			 "modprobe ublk_drv succeeded but %s does not exist (Linux >= 6.0 with "
			 "CONFIG_BLK_DEV_UBLK needed)",
			 NODE_UBLK_CTRL);
	else
		snprintf(why, len,
			 "this node's kernel lacks the %s module (modprobe %s exited %d: %s)", mod,
			 mod, rc, out[0] ? out : "-");
	return -EOPNOTSUPP;
}

enum node_frontend node_frontend_auto(void)
{
	static const enum node_frontend order[] = {NODE_FRONTEND_UBLK, NODE_FRONTEND_NBD};
	char why[2][320];

	for (size_t i = 0; i < ZL_ARRAY_SIZE(order); i++) {
		bool loaded = node_frontend_present(order[i]);

		if (node_frontend_check(order[i], why[i], sizeof(why[i])) == 0) {
			ZL_LOG_INFO(NODE_LOG, "frontend auto: %s (%s %s)",
				    node_frontend_name(order[i]), node_frontend_module(order[i]),
				    loaded ? "loaded" : "loaded by modprobe");
			return order[i];
		}
	}
	ZL_LOG_INFO(NODE_LOG,
		    "frontend auto: fuse (ublk: %s; nbd: %s); --frontend ublk or nbd needs the "
		    "module",
		    why[0], why[1]);
	return NODE_FRONTEND_FUSE;
}

/* /dev/ublkbN still exists with the volume's size: its device (and what is
 * mounted on it) outlives a dead server, waiting for --recover. (A ublk
 * device resize is refused, so the size stays the one staged.) */
static bool node_ublk_present(const struct node_vol_state *st)
{
	char path[96], size[32] = "";
	ssize_t r;
	int fd;

	if (st->ublk_id < 0)
		return false;
	snprintf(path, sizeof(path), "/sys/block/ublkb%d/size", st->ublk_id);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	r = read(fd, size, sizeof(size) - 1);
	close(fd);
	size[r > 0 ? r : 0] = '\0';
	return strtoull(size, NULL, 10) > 0 &&
	       (!st->size || strtoull(size, NULL, 10) << 9 == st->size);
}

bool node_frontend_dev_present(const struct node_vol_state *st)
{
	if (!st->loop[0])
		return false;
	if (st->frontend == NODE_FRONTEND_NBD)
		return node_nbd_serves(st->loop, st->volume_id);
	if (st->frontend == NODE_FRONTEND_UBLK)
		return node_ublk_present(st);
	return false;
}

int node_attach_takeover(struct node *n, struct node_vol_state *st, char *msg, size_t msglen)
{
	char token[160], dev[64], id[16];
	const char *fe = node_frontend_name(st->frontend);
	struct node_attach_req ar = {
	    .volume_id = st->volume_id,
	    .prefix = st->prefix,
	    .epoch = st->epoch,
	    .token = token,
	    .frontend = st->frontend,
	    .dev = dev,
	    .devlen = sizeof(dev),
	};
	pid_t pid = 0;
	int rc;

	if (st->frontend == NODE_FRONTEND_NBD) {
		ar.reattach = st->loop;
	} else if (st->frontend == NODE_FRONTEND_UBLK && st->ublk_id >= 0) {
		snprintf(id, sizeof(id), "%d", st->ublk_id);
		ar.recover = id;
	} else {
		snprintf(msg, msglen, "volume %s: a %s attachment cannot be taken over",
			 st->volume_id, fe);
		return -ZL_ERR_INVAL;
	}
	node_token_load(n, st->volume_id, token, sizeof(token));
	ZL_LOG_WARN(NODE_LOG,
		    "attach process gone, taking its device over: vol=%s pid=%d dev=%s frontend=%s",
		    st->volume_id, (int)st->pid, st->loop, fe);
	dev[0] = '\0';
	rc = node_attach_start(n, &ar, &pid, msg, msglen);
	if (rc)
		return rc;
	if (strcmp(dev, st->loop) != 0) {
		snprintf(msg, msglen, "the new attach process of %s serves %s, not %s",
			 st->volume_id, dev, st->loop);
		node_attach_stop(pid, st->volume_id, 10000);
		return -ZL_ERR_IO;
	}
	st->pid = pid;
	rc = node_state_save(n, st);
	if (rc)
		snprintf(msg, msglen, "cannot record the new attach process of %s: %s",
			 st->volume_id, strerror(-rc));
	else
		ZL_LOG_INFO(NODE_LOG, "device taken over: vol=%s pid=%d dev=%s frontend=%s",
			    st->volume_id, (int)pid, st->loop, fe);
	return rc;
}
