/* The kernel NBD frontend of the attach process (`--frontend nbd`): the
 * volume becomes /dev/nbdN, served by lib/nbd's server on the attach
 * process's loop through ATTACH_NBD_CONNS socket pairs whose other ends are
 * handed to the kernel's nbd driver with generic netlink (no handshake: the
 * kernel learns the size and the flags from NBD_CMD_CONNECT).
 *
 * Surviving the server's death: the device is configured with a dead-
 * connection timeout, so when this process dies (kill -9, OOM) the kernel
 * keeps the device, its mounts and the I/O queued on it, and waits
 * ATTACH_NBD_DEAD_CONN_S for a new server. A new attach process started
 * with `--reattach /dev/nbdN` hands fresh sockets to the same device with
 * NBD_CMD_RECONFIGURE; the requests the dead one had taken are retried by
 * the kernel once its request timeout (io-timeout + ATTACH_NBD_TIMEOUT_SLACK_S)
 * fires. A live server answers every request within io-timeout, so that
 * timeout never fires while it runs. A connection the kernel gives up on
 * while we run (its timeout fired) is replaced the same way at once.
 *
 * Growing (NodeExpandVolume): the attach process serves the new size
 * first (attach_nbd_resized, once its volume handle sees it), then the node
 * plugin tells the kernel with NBD_CMD_RECONFIGURE + NBD_ATTR_SIZE_BYTES
 * (attach_nbd_resize_dev). Not from this process's loop: the kernel
 * freezes the device's queue for the change, until the requests in flight
 * end, and this loop is what ends them.
 *
 * SIGTERM (unstage) disconnects the device (NBD_CMD_DISCONNECT) before the
 * usual drain-and-flush stop. */
#include "attach.h"
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/nbd-netlink.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/nbd/nbd.h"
#include "lib/transport/transport.h"

/* Connections to the kernel: it spreads requests over them (one receive
 * thread each on its side). */
#define ATTACH_NBD_CONNS 4
/* Requests in flight per connection, and the buffer each one owns. */
#define ATTACH_NBD_SLOTS    32
#define ATTACH_NBD_SLOT_BUF (128u << 10)
/* How long the kernel holds I/O for a new server after this one died. */
#define ATTACH_NBD_DEAD_CONN_S 120
/* The kernel's request timeout is the volume's io-timeout plus this: a live
 * server always answers (data or an error) before it. */
#define ATTACH_NBD_TIMEOUT_SLACK_S 10
#define ATTACH_NBD_TICK_MS 500
/* Not done here: capping queue/max_sectors_kb. Writing it freezes the
 * device's queue until its requests end, and we are the one who ends them
 * (a deadlock on a reattach). The kernel's default request limit
 * (max_sectors_kb 1280) is below the server's ZL_NBD_MAX_IO (4 MiB); larger
 * requests get EINVAL. */

/* ---- the backend: the attach process's current volume handle ---- */

static int attach_nbd_read(void *ctx, void *buf, uint64_t off, uint32_t len, zl_nbd_io_cb cb,
			   void *arg)
{
	struct attach *a = ctx;

	if (!a->vol)
		return -ZL_ERR_CONN;
	return zl_vol_aio_read(a->vol, buf, off, len, cb, arg);
}

static int attach_nbd_write(void *ctx, const void *buf, uint64_t off, uint32_t len, bool fua,
			    zl_nbd_io_cb cb, void *arg)
{
	struct attach *a = ctx;

	if (!a->vol)
		return -ZL_ERR_CONN;
	a->write_gen++;
	return zl_vol_aio_write(a->vol, buf, off, len, fua ? 1 : 0, cb, arg);
}

static int attach_nbd_flush(void *ctx, zl_nbd_io_cb cb, void *arg)
{
	struct attach *a = ctx;

	if (!a->vol)
		return -ZL_ERR_CONN;
	return zl_vol_aio_flush(a->vol, cb, arg);
}

static int attach_nbd_discard(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	struct attach *a = ctx;

	if (!a->vol)
		return -ZL_ERR_CONN;
	a->write_gen++;
	return zl_vol_aio_discard(a->vol, off, len, cb, arg);
}

static int attach_nbd_zeroes(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	struct attach *a = ctx;

	if (!a->vol)
		return -ZL_ERR_CONN;
	a->write_gen++;
	return zl_vol_aio_write_zeroes(a->vol, off, len, cb, arg);
}

/* Buffers come from the client's transport pool, which lives as long as the
 * client: the server's slots may outlive a closed volume handle. */
static void *attach_nbd_buf_alloc(void *ctx, size_t len)
{
	struct attach *a = ctx;

	return a->nbd_x ? zl_xport_buf_alloc(a->nbd_x, len) : NULL;
}

static void attach_nbd_buf_free(void *ctx, void *buf)
{
	struct attach *a = ctx;

	if (buf)
		zl_xport_buf_free(a->nbd_x, buf);
}

static const struct zl_nbd_backend_ops attach_nbd_ops = {
    .read = attach_nbd_read,
    .write = attach_nbd_write,
    .flush = attach_nbd_flush,
    .discard = attach_nbd_discard,
    .write_zeroes = attach_nbd_zeroes,
    .buf_alloc = attach_nbd_buf_alloc,
    .buf_free = attach_nbd_buf_free,
};

/* ---- generic netlink ---- */

struct attach_nbd_reply {
	int err;   /* the kernel's errno, negative */
	int index; /* NBD_ATTR_INDEX of a CONNECT reply, or -1 */
};

static int attach_nbd_nl_valid(struct nl_msg *msg, void *arg)
{
	struct attach_nbd_reply *r = arg;
	struct nlattr *attrs[NBD_ATTR_MAX + 1];

	if (genlmsg_parse(nlmsg_hdr(msg), 0, attrs, NBD_ATTR_MAX, NULL) == 0 &&
	    attrs[NBD_ATTR_INDEX])
		r->index = (int)nla_get_u32(attrs[NBD_ATTR_INDEX]);
	return NL_OK;
}

static int attach_nbd_nl_error(struct sockaddr_nl *nla, struct nlmsgerr *e, void *arg)
{
	struct attach_nbd_reply *r = arg;

	(void)nla;
	r->err = e->error < 0 ? e->error : -e->error;
	return NL_STOP;
}

/* Sends one NBD family command built by the caller after genlmsg_put, waits
 * for the kernel's answer. CONNECT carries size, and RECONFIGURE with
 * sockets the timeouts; RECONFIGURE without sockets is a resize (size, the
 * backend id the kernel checks, nothing else). 0 (reply->index set for
 * CONNECT) or -errno. */
static int attach_nbd_nl_call(const char *vol_id, uint8_t cmd, int index, int n_fds, const int *fds,
			      uint64_t size, uint64_t tflags, uint32_t io_timeout_s,
			      struct attach_nbd_reply *reply)
{
	struct nl_sock *sk;
	struct nl_msg *msg = NULL;
	struct nlattr *socks, *item;
	int family, rc;

	reply->err = 0;
	reply->index = -1;
	sk = nl_socket_alloc();
	if (!sk)
		return -ENOMEM;
	rc = genl_connect(sk);
	if (rc) {
		rc = -ENOTCONN;
		goto out_sock;
	}
	family = genl_ctrl_resolve(sk, NBD_GENL_FAMILY_NAME);
	if (family < 0) {
		rc = -ENOENT; /* no nbd module */
		goto out_sock;
	}
	msg = nlmsg_alloc();
	if (!msg) {
		rc = -ENOMEM;
		goto out_sock;
	}
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, family, 0, 0, cmd, NBD_GENL_VERSION))
		goto out_msgsize;
	if (index >= 0 && nla_put_u32(msg, NBD_ATTR_INDEX, (uint32_t)index))
		goto out_msgsize;
	if ((cmd == NBD_CMD_CONNECT || cmd == NBD_CMD_RECONFIGURE) &&
	    nla_put_string(msg, NBD_ATTR_BACKEND_IDENTIFIER, vol_id))
		goto out_msgsize;
	if ((cmd == NBD_CMD_CONNECT || (cmd == NBD_CMD_RECONFIGURE && n_fds)) &&
	    (nla_put_u64(msg, NBD_ATTR_TIMEOUT, (uint64_t)io_timeout_s + ATTACH_NBD_TIMEOUT_SLACK_S) ||
	     nla_put_u64(msg, NBD_ATTR_DEAD_CONN_TIMEOUT, ATTACH_NBD_DEAD_CONN_S)))
		goto out_msgsize;
	if (cmd == NBD_CMD_RECONFIGURE && !n_fds && nla_put_u64(msg, NBD_ATTR_SIZE_BYTES, size))
		goto out_msgsize;
	if (cmd == NBD_CMD_CONNECT &&
	    (nla_put_u64(msg, NBD_ATTR_SIZE_BYTES, size) ||
	     nla_put_u64(msg, NBD_ATTR_BLOCK_SIZE_BYTES, 512) ||
	     nla_put_u64(msg, NBD_ATTR_SERVER_FLAGS, tflags)))
		goto out_msgsize;
	if (n_fds) {
		socks = nla_nest_start(msg, NBD_ATTR_SOCKETS);
		if (!socks)
			goto out_msgsize;
		for (int i = 0; i < n_fds; i++) {
			item = nla_nest_start(msg, NBD_SOCK_ITEM);
			if (!item || nla_put_u32(msg, NBD_SOCK_FD, (uint32_t)fds[i]))
				goto out_msgsize;
			nla_nest_end(msg, item);
		}
		nla_nest_end(msg, socks);
	}
	nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, attach_nbd_nl_valid, reply);
	nl_socket_modify_err_cb(sk, NL_CB_CUSTOM, attach_nbd_nl_error, reply);
	rc = nl_send_auto(sk, msg);
	if (rc < 0) {
		rc = -EIO;
		goto out_msg;
	}
	rc = nl_wait_for_ack(sk);
	if (reply->err)
		rc = reply->err;
	else if (rc < 0)
		rc = -EIO;
	else
		rc = 0;
	goto out_msg;
out_msgsize:
	rc = -EMSGSIZE;
out_msg:
	nlmsg_free(msg);
out_sock:
	nl_socket_free(sk);
	return rc;
}

/* ---- connections ---- */

/* n fresh socket pairs: our ends served, the kernel's handed over with cmd
 * (CONNECT: a new device, a->nbd_index gets it; RECONFIGURE: replacing dead
 * connections of a->nbd_index). 0 or -errno, why filled. */
static int attach_nbd_plug(struct attach *a, uint8_t cmd, int n, char *why, size_t len)
{
	struct attach_nbd_reply reply;
	int kfd[ATTACH_NBD_CONNS], ufd[ATTACH_NBD_CONNS], i, made = 0, rc = 0;
	char peer[32];

	for (; made < n; made++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
			rc = -errno;
			snprintf(why, len, "socketpair: %s", strerror(errno));
			goto out_close;
		}
		ufd[made] = sv[0];
		kfd[made] = sv[1];
	}
	rc = attach_nbd_nl_call(a->vol_id, cmd, cmd == NBD_CMD_CONNECT ? -1 : a->nbd_index, n, kfd,
				a->size, zl_nbd_server_tflags(a->nbd), a->io_timeout_s, &reply);
	if (rc) {
		snprintf(why, len, "%s: %s%s",
			 cmd == NBD_CMD_CONNECT ? "NBD_CMD_CONNECT" : "NBD_CMD_RECONFIGURE",
			 strerror(-rc),
			 rc == -ENOENT	 ? " (no nbd module: modprobe nbd)"
			 : rc == -ENOSPC ? " (the device has no dead connection: is its old "
					   "server still running?)"
					 : "");
		goto out_close;
	}
	if (cmd == NBD_CMD_CONNECT) {
		if (reply.index < 0) {
			rc = -EPROTO;
			snprintf(why, len, "NBD_CMD_CONNECT answered without a device index");
			goto out_close;
		}
		a->nbd_index = reply.index;
		snprintf(a->nbd_dev, sizeof(a->nbd_dev), "/dev/nbd%d", a->nbd_index);
	}
	/* The kernel holds its ends now. */
	for (i = 0; i < made; i++) {
		close(kfd[i]);
		kfd[i] = -1;
		snprintf(peer, sizeof(peer), "nbd%d#%d", a->nbd_index, a->nbd_plugged++);
		rc = zl_nbd_server_adopt(a->nbd, ufd[i], peer);
		if (rc) {
			/* The kernel sees EOF on it: a dead connection, replaced
			 * by the next tick. */
			ZL_LOG_ERR(ATTACH_LOG, "cannot serve a connection: dev=%s err=%s",
				   a->nbd_dev, zl_strerror(rc));
			close(ufd[i]);
		}
		ufd[i] = -1;
	}
	return 0;
out_close:
	for (i = 0; i < made; i++) {
		if (ufd[i] >= 0)
			close(ufd[i]);
		if (kfd[i] >= 0)
			close(kfd[i]);
	}
	return rc;
}

/* Every ATTACH_NBD_TICK_MS: connections the kernel gave up on (their
 * request timed out: it shut them down) are replaced; a device that is
 * gone (disconnected by someone else) stops the process. */
static void attach_nbd_tick(void *arg)
{
	struct attach *a = arg;
	struct zl_nbd_server_stats st;
	char why[256];
	int rc;

	if (a->stopping || !a->nbd)
		return;
	zl_nbd_server_get_stats(a->nbd, &st);
	if (st.conns_open < ATTACH_NBD_CONNS) {
		int n = ATTACH_NBD_CONNS - (int)st.conns_open;

		rc = attach_nbd_plug(a, NBD_CMD_RECONFIGURE, n, why, sizeof(why));
		if (rc) {
			ZL_LOG_ERR(ATTACH_LOG,
				   "lost connections to the kernel and cannot replace them, "
				   "stopping: vol=%s dev=%s open=%llu err=\"%s\"",
				   a->vol_id, a->nbd_dev, (unsigned long long)st.conns_open, why);
			raise(SIGTERM);
			return;
		}
		ZL_LOG_WARN(ATTACH_LOG, "replaced connections the kernel dropped: vol=%s dev=%s n=%d",
			    a->vol_id, a->nbd_dev, n);
	}
	zl_timer_start(a->loop, &a->nbd_timer, ATTACH_NBD_TICK_MS, 0, attach_nbd_tick, a);
}

/* "/dev/nbdN" -> N, or -1. */
static int attach_nbd_index_parse(const char *dev)
{
	char *end;
	long v;

	if (strncmp(dev, "/dev/nbd", 8) != 0 || dev[8] < '0' || dev[8] > '9')
		return -1;
	v = strtol(dev + 8, &end, 10);
	return *end || v < 0 || v > 1000000 ? -1 : (int)v;
}

int attach_nbd_start(struct attach *a, const char *reattach, char *why, size_t len)
{
	struct zl_nbd_server_opts so = {
	    .max_inflight = ATTACH_NBD_SLOTS,
	    .slot_buf = ATTACH_NBD_SLOT_BUF,
	    .max_conns = 2 * ATTACH_NBD_CONNS,
	};
	struct zl_nbd_backend be = {.ops = &attach_nbd_ops, .ctx = a, .size = a->size};
	int rc;

	attach_flusher_enter(a);
	a->nbd_x = zl_client_xport(a->client);
	if (!a->nbd_x) {
		snprintf(why, len, "no transport for the request buffers");
		return -ZL_ERR_CONN;
	}
	rc = zl_nbd_server_create(a->loop, &be, &so, &a->nbd);
	if (rc) {
		snprintf(why, len, "cannot create the NBD server: %s", zl_strerror(rc));
		return rc;
	}
	if (reattach) {
		a->nbd_index = attach_nbd_index_parse(reattach);
		if (a->nbd_index < 0) {
			snprintf(why, len, "--reattach %s is not /dev/nbdN", reattach);
			return -ZL_ERR_INVAL;
		}
		if (!node_nbd_serves(reattach, a->vol_id)) {
			snprintf(why, len,
				 "%s is not a connected device of volume %s (see its "
				 "/sys/block/nbdN/backend and size)",
				 reattach, a->vol_id);
			return -ZL_ERR_INVAL;
		}
		snprintf(a->nbd_dev, sizeof(a->nbd_dev), "/dev/nbd%d", a->nbd_index);
		rc = attach_nbd_plug(a, NBD_CMD_RECONFIGURE, ATTACH_NBD_CONNS, why, len);
	} else {
		rc = attach_nbd_plug(a, NBD_CMD_CONNECT, ATTACH_NBD_CONNS, why, len);
	}
	if (rc)
		return rc;
	snprintf(a->ready_extra, sizeof(a->ready_extra), " dev=%s", a->nbd_dev);
	ZL_LOG_INFO(ATTACH_LOG, "nbd device %s: vol=%s dev=%s conns=%d timeout=%us dead_conn=%us",
		    reattach ? "reattached" : "connected", a->vol_id, a->nbd_dev, ATTACH_NBD_CONNS,
		    a->io_timeout_s + ATTACH_NBD_TIMEOUT_SLACK_S, ATTACH_NBD_DEAD_CONN_S);
	zl_timer_start(a->loop, &a->nbd_timer, ATTACH_NBD_TICK_MS, 0, attach_nbd_tick, a);
	return 0;
}

void attach_nbd_disconnect(struct attach *a)
{
	struct attach_nbd_reply reply;
	int rc;

	if (!a->nbd)
		return;
	zl_timer_stop(a->loop, &a->nbd_timer);
	if (a->nbd_index >= 0 && a->nbd_dev[0]) {
		rc = attach_nbd_nl_call(a->vol_id, NBD_CMD_DISCONNECT, a->nbd_index, 0, NULL, 0, 0, 0,
					&reply);
		if (rc)
			ZL_LOG_ERR(ATTACH_LOG, "NBD_CMD_DISCONNECT failed: vol=%s dev=%s err=%s",
				   a->vol_id, a->nbd_dev, strerror(-rc));
		else
			ZL_LOG_INFO(ATTACH_LOG, "nbd device disconnected: vol=%s dev=%s",
				    a->vol_id, a->nbd_dev);
	}
	zl_nbd_server_shutdown(a->nbd);
}

int attach_nbd_disconnect_dev(const char *dev)
{
	struct attach_nbd_reply reply;
	int index = attach_nbd_index_parse(dev);

	if (index < 0)
		return -EINVAL;
	return attach_nbd_nl_call(NULL, NBD_CMD_DISCONNECT, index, 0, NULL, 0, 0, 0, &reply);
}

int attach_nbd_resize_dev(const char *dev, const char *vol_id, uint64_t size)
{
	struct attach_nbd_reply reply;
	int index = attach_nbd_index_parse(dev);

	if (index < 0 || !size)
		return -EINVAL;
	return attach_nbd_nl_call(vol_id, NBD_CMD_RECONFIGURE, index, 0, NULL, size, 0, 0, &reply);
}

void attach_nbd_resized(struct attach *a)
{
	if (a->nbd)
		zl_nbd_server_set_size(a->nbd, a->size);
}

bool attach_nbd_busy(const struct attach *a)
{
	return a->nbd && !zl_nbd_server_idle(a->nbd);
}

void attach_nbd_stop(struct attach *a)
{
	if (!a->nbd)
		return;
	zl_timer_stop(a->loop, &a->nbd_timer);
	zl_nbd_server_shutdown(a->nbd);
	for (int i = 0; i < 500 && !zl_nbd_server_idle(a->nbd); i++)
		zl_loop_run_once(a->loop, 10);
	zl_nbd_server_destroy(a->nbd);
	a->nbd = NULL;
}
