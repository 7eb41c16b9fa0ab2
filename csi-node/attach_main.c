/* `zipline-node attach`: the process that serves one attached volume. It is
 * started by zipline-node (posix_spawn + setsid) and outlives it, so that a
 * crash or an upgrade of the node service leaves mounted volumes working.
 *
 * Life cycle: open etcd, the volume client and the volume; read its first
 * block (the proof that some replica serves us, within --start-timeout:
 * else "ERR <code> <why>" on the ready fd, and no device is ever put on a
 * volume that cannot answer); mount the FUSE session on <dir>/fuse (or,
 * with --frontend ublk, add the block device /dev/ublkbN, or take over the
 * one of a dead attach process with --recover: attach_ublk.c); listen
 * on <dir>/ctl.sock; report READY on the ready fd; serve until SIGTERM or
 * until the FUSE connection ends. The volume handle takes the volume's
 * snapshots (attach_snap_serve). SIGTERM drains and flushes for at most
 * ATTACH_STOP_MS; what is still in flight then fails with EIO, and the loop
 * devices on our file are detached. SIGHUP or "resize" on the control
 * socket re-reads the volume record after an expansion. */
#include "attach.h"
#include "node.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* SIGTERM: requests in flight and the final flush get this long, then
 * what is left fails with EIO (storage that does not answer must not keep
 * a node's device, and whoever uses it, waiting). */
#define ATTACH_STOP_MS 10000
/* A resize waits this long for the volume client to see the new size. */
#define ATTACH_RESIZE_MS 10000u

struct attach_args {
	const char *vol_id;
	const char *dir;
	const char *etcd;
	const char *prefix;
	const char *transport;
	const char *log_level;
	const char *io_timeout;
	bool legacy_drop;
	uint64_t epoch;
	uint32_t start_timeout_s; /* --start-timeout */
	int ready_fd;
	const char *node_id; /* --node-id: the node the attach token names */
	bool nbd;	     /* --frontend nbd */
	const char *reattach; /* --reattach /dev/nbdN */
	const char *token;   /* from ZL_ATTACH_TOKEN, never logged */
	bool ublk;	     /* --frontend ublk (default fuse) */
	int ublk_recover;    /* --recover ID: take over ublk device ID, else -1 */
	unsigned int ublk_queues; /* --ublk-queues N, 0: the default */
	unsigned int ublk_threads;	 /* --ublk-threads N, 0: one per queue */
	enum attach_ublk_copy ublk_copy; /* --ublk-copy auto|user|tag */
	bool ublk_copy_set;
};

static void attach_ready(int *fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Tells zipline-node how the start went (one line), then closes the fd. */
static void attach_ready(int *fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int len;

	if (*fd < 0)
		return;
	va_start(ap, fmt);
	len = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	len = ZL_MIN(len, (int)sizeof(line) - 2);
	line[len++] = '\n';
	if (write(*fd, line, (size_t)len) < 0)
		ZL_LOG_WARN(ATTACH_LOG, "cannot report to zipline-node: err=%s", strerror(errno));
	close(*fd);
	*fd = -1;
}

/* A whole number min..max (seconds, a count of queues): 0 (*out, optional, gets it)
 * or -ZL_ERR_INVAL. */
static int node_uint_parse(const char *s, unsigned long long min, unsigned long long max,
			   uint32_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -ZL_ERR_INVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -ZL_ERR_INVAL;
	if (out)
		*out = (uint32_t)v;
	return 0;
}

int node_io_timeout_parse(const char *s, uint32_t *out)
{
	return node_uint_parse(s, 1, 86400, out);
}

int node_start_timeout_parse(const char *s, uint32_t *out)
{
	return node_uint_parse(s, 1, 600, out);
}

int node_ublk_threads_parse(const char *s, uint32_t *out)
{
	return node_uint_parse(s, 1, ATTACH_UBLK_THREADS_MAX, out);
}

/* The ublk device's hardware queues: --ublk-queues, else one per online CPU
 * up to ATTACH_UBLK_QUEUES_DEFAULT. */
static unsigned int attach_ublk_queues(const struct attach_args *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (o->ublk_queues)
		return o->ublk_queues;
	return cpus < 1 ? 1 : (unsigned int)ZL_MIN(cpus, ATTACH_UBLK_QUEUES_DEFAULT);
}

static int attach_parse(int argc, char **argv, struct attach_args *o)
{
	static const struct option opts[] = {
	    {"volume-id", required_argument, NULL, 'v'},
	    {"dir", required_argument, NULL, 'd'},
	    {"etcd", required_argument, NULL, 'e'},
	    {"etcd-prefix", required_argument, NULL, 'p'},
	    {"transport", required_argument, NULL, 't'},
	    {"epoch", required_argument, NULL, 'E'},
	    {"ready-fd", required_argument, NULL, 'r'},
	    {"log-level", required_argument, NULL, 'l'},
	    {"io-timeout", required_argument, NULL, 'T'},
	    {"legacy-drop", no_argument, NULL, 'L'},
	    {"node-id", required_argument, NULL, 'N'},
	    {"start-timeout", required_argument, NULL, 'S'},
	    {"frontend", required_argument, NULL, 'F'},
	    {"reattach", required_argument, NULL, 'A'},
	    {"recover", required_argument, NULL, 'R'},
	    {"ublk-queues", required_argument, NULL, 'Q'},
	    {"ublk-copy", required_argument, NULL, 'C'},
	    {"ublk-threads", required_argument, NULL, 'U'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->ready_fd = -1;
	o->prefix = ZL_META_DEFAULT_PREFIX;
	o->start_timeout_s = NODE_ATTACH_START_S;
	o->ublk_recover = -1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'v':
			o->vol_id = optarg;
			break;
		case 'd':
			o->dir = optarg;
			break;
		case 'e':
			o->etcd = optarg;
			break;
		case 'p':
			o->prefix = optarg;
			break;
		case 't':
			o->transport = optarg;
			break;
		case 'l':
			o->log_level = optarg;
			break;
		case 'T':
			o->io_timeout = optarg;
			break;
		case 'L':
			o->legacy_drop = true;
			break;
		case 'N':
			o->node_id = optarg;
			break;
		case 'A':
			o->reattach = optarg;
			break;
		case 'S':
			if (node_start_timeout_parse(optarg, &o->start_timeout_s)) {
				fprintf(stderr,
					"zipline-node attach: bad --start-timeout '%s' "
					"(seconds, 1..600)\n",
					optarg);
				return -ZL_ERR_INVAL;
			}
			break;
		case 'E':
			o->epoch = strtoull(optarg, NULL, 10);
			break;
		case 'F':
			if (strcmp(optarg, "ublk") != 0 && strcmp(optarg, "fuse") != 0 &&
			    strcmp(optarg, "nbd") != 0) {
				fprintf(stderr,
					"zipline-node attach: bad --frontend '%s' "
					"(fuse|ublk|nbd)\n",
					optarg);
				return -ZL_ERR_INVAL;
			}
			o->ublk = strcmp(optarg, "ublk") == 0;
			o->nbd = strcmp(optarg, "nbd") == 0;
			break;
		case 'R':
			if (!isdigit((unsigned char)optarg[0]) || atoi(optarg) < 0) {
				fprintf(stderr,
					"zipline-node attach: bad --recover '%s' "
					"(a ublk device id)\n",
					optarg);
				return -ZL_ERR_INVAL;
			}
			o->ublk_recover = atoi(optarg);
			break;
		case 'Q': {
			uint32_t n;

			if (node_uint_parse(optarg, 1, ATTACH_UBLK_QUEUES_MAX, &n)) {
				fprintf(stderr,
					"zipline-node attach: bad --ublk-queues '%s' "
					"(hardware queues of the ublk device, 1..%d)\n",
					optarg, ATTACH_UBLK_QUEUES_MAX);
				return -ZL_ERR_INVAL;
			}
			o->ublk_queues = n;
			break;
		}
		case 'U': {
			uint32_t n;

			if (node_ublk_threads_parse(optarg, &n)) {
				fprintf(stderr,
					"zipline-node attach: bad --ublk-threads '%s' "
					"(threads serving the ublk device's queues, 1..%d)\n",
					optarg, ATTACH_UBLK_THREADS_MAX);
				return -ZL_ERR_INVAL;
			}
			o->ublk_threads = n;
			break;
		}
		case 'C':
			if (strcmp(optarg, "auto") == 0) {
				o->ublk_copy = ATTACH_UBLK_COPY_AUTO;
			} else if (strcmp(optarg, "user") == 0) {
				o->ublk_copy = ATTACH_UBLK_COPY_USER;
			} else if (strcmp(optarg, "tag") == 0) {
				o->ublk_copy = ATTACH_UBLK_COPY_TAG;
			} else {
				fprintf(stderr,
					"zipline-node attach: bad --ublk-copy '%s' "
					"(auto|user|tag)\n",
					optarg);
				return -ZL_ERR_INVAL;
			}
			o->ublk_copy_set = true;
			break;
		case 'r':
			o->ready_fd = atoi(optarg);
			break;
		default:
			return -ZL_ERR_INVAL;
		}
	}
	if (!o->vol_id || !o->dir || !o->etcd) {
		fprintf(stderr, "zipline-node attach: --volume-id, --dir and --etcd are required "
				"(this mode is started by zipline-node itself)\n");
		return -ZL_ERR_INVAL;
	}
	if (o->reattach && !o->nbd) {
		fprintf(stderr, "zipline-node attach: --reattach needs --frontend nbd\n");
		return -ZL_ERR_INVAL;
	}
	if (o->ublk_recover >= 0 && !o->ublk) {
		fprintf(stderr, "zipline-node attach: --recover needs --frontend ublk\n");
		return -ZL_ERR_INVAL;
	}
	if (o->ublk_queues && !o->ublk) {
		fprintf(stderr, "zipline-node attach: --ublk-queues needs --frontend ublk\n");
		return -ZL_ERR_INVAL;
	}
	if (o->ublk_threads && !o->ublk) {
		fprintf(stderr, "zipline-node attach: --ublk-threads needs --frontend ublk\n");
		return -ZL_ERR_INVAL;
	}
	if (o->ublk_queues && o->ublk_recover >= 0) {
		fprintf(stderr, "zipline-node attach: --ublk-queues and --recover exclude each "
				"other (a recovered device keeps its own queues)\n");
		return -ZL_ERR_INVAL;
	}
	if (o->ublk_copy_set && (!o->ublk || o->ublk_recover >= 0)) {
		fprintf(stderr, "zipline-node attach: --ublk-copy needs --frontend ublk and no "
				"--recover (a recovered device keeps its own copy mode)\n");
		return -ZL_ERR_INVAL;
	}
	return 0;
}

/* The answer to "resize" (fd, or none for SIGHUP), then the fd closed. */
static void attach_resize_answer(struct attach *a, int fd, int rc, const char *msg)
{
	char reply[400];

	if (rc)
		snprintf(reply, sizeof(reply), "err %s\n", msg);
	else
		snprintf(reply, sizeof(reply), "ok size=%llu\n", (unsigned long long)a->size);
	if (rc && fd < 0)
		ZL_LOG_ERR(ATTACH_LOG, "resize on SIGHUP failed: vol=%s err=%s", a->vol_id, msg);
	if (fd < 0)
		return;
	if (write(fd, reply, strlen(reply)) < 0)
		ZL_LOG_WARN(ATTACH_LOG, "control reply failed: vol=%s err=%s", a->vol_id,
			    strerror(errno));
	close(fd);
}

/* The handle shows the new size: the FUSE file grows, the NBD server
 * serves it; a ublk device is grown by the kernel (UPDATE_SIZE), whose
 * answer comes later (attach_ublk_resized). 0 (done: a->size grew), 1
 * (ublk: waiting), or an error with msg filled. */
static int attach_resize_grow(struct attach *a, char *msg, size_t len)
{
	uint64_t old = a->size;
	int rc;

	if (a->ublk) {
		rc = attach_ublk_resize(a, zl_vol_size(a->vol), msg, len);
		return rc ? rc : 1;
	}
	a->size = zl_vol_size(a->vol);
	attach_fuse_resized(a);
	attach_nbd_resized(a);
	ZL_LOG_INFO(ATTACH_LOG, "volume grew: vol=%s size=%llu->%llu", a->vol_id,
		    (unsigned long long)old, (unsigned long long)a->size);
	return 0;
}

void attach_ublk_resized(struct attach *a, int res)
{
	uint64_t old = a->size;
	char msg[256] = "";
	int fd = a->resize_fd;

	if (res == 0 && a->vol) {
		a->size = zl_vol_size(a->vol);
		ZL_LOG_INFO(ATTACH_LOG, "volume grew: vol=%s size=%llu->%llu (ublk UPDATE_SIZE)",
			    a->vol_id, (unsigned long long)old, (unsigned long long)a->size);
	} else {
		snprintf(msg, sizeof(msg),
			 "ublk UPDATE_SIZE to %llu bytes failed: %s; the device keeps %llu "
			 "bytes, retry the expansion",
			 a->vol ? (unsigned long long)zl_vol_size(a->vol) : 0ull,
			 res ? strerror(-res) : "the attach process is stopping",
			 (unsigned long long)a->size);
		res = res ? res : -ZL_ERR_CONN;
	}
	a->resize_waiting = false;
	a->resize_fd = -1;
	attach_resize_answer(a, fd, res, msg);
}

/* Loop: a resize waits until the volume handle installed the record's new
 * size (its watch of the record), ATTACH_RESIZE_MS at most. */
static void attach_resize_tick(void *arg)
{
	struct attach *a = arg;
	struct zl_vol *v = a->vol;
	char msg[256] = "";
	int fd = a->resize_fd, rc = 0;

	if (v && zl_vol_size(v) >= a->resize_want && attach_ublk_size_ok(a, a->resize_want)) {
		rc = attach_resize_grow(a, msg, sizeof(msg));
		if (rc == 1)
			return; /* attach_ublk_resized answers fd */
	} else if (v && !a->aborting && zl_now_ms() < a->resize_deadline_ms) {
		zl_timer_start(a->loop, &a->resize_timer, 20, 0, attach_resize_tick, a);
		return;
	} else if (!v || a->aborting) {
		rc = -ZL_ERR_CONN;
		snprintf(msg, sizeof(msg), "stopping");
	} else {
		rc = -ZL_ERR_TIMEOUT;
		snprintf(msg, sizeof(msg),
			 "the volume client did not see the new size %llu within %u ms (it "
			 "learns it through its watch of the volume record): check etcd and "
			 "retry",
			 (unsigned long long)a->resize_want, ATTACH_RESIZE_MS);
	}
	a->resize_waiting = false;
	a->resize_fd = -1;
	attach_resize_answer(a, fd, rc, msg);
}

/* Re-reads the volume record after an expansion. The volume handle is
 * never reopened: it installs the new size itself when its watch of the
 * record fires, and it is the one that takes the volume's snapshots
 * (zl_vol_snap_serve), so a second handle would either have two switches
 * (two serving handles) or a moment with none, in which a snapshot would be
 * taken by the transaction alone while writes are in flight. The answer
 * waits (attach_resize_tick, on the loop) until the handle shows the
 * record's size, ATTACH_RESIZE_MS at most. Returns 0 (done: a->size
 * grew), 1 (waiting: attach_resize_tick answers), or an error with msg
 * filled. */
static int attach_resize(struct attach *a, char *msg, size_t len)
{
	struct zl_volume v;
	uint64_t want;
	int rc;

	memset(&v, 0, sizeof(v));
	rc = zl_meta_volume_get(a->etcd, a->prefix, a->vol_id, &v);
	if (rc) {
		snprintf(msg, len, "cannot read the volume record: %s", zl_strerror(rc));
		return rc;
	}
	if (v.size == a->size) {
		zl_volume_fini(&v);
		return 0;
	}
	if (v.size < a->size) {
		snprintf(msg, len, "volume record says %llu bytes, less than the %llu served",
			 (unsigned long long)v.size, (unsigned long long)a->size);
		zl_volume_fini(&v);
		return -ZL_ERR_INVAL;
	}
	want = v.size;
	zl_volume_fini(&v);
	if (a->resize_waiting) {
		snprintf(msg, len, "the previous resize is still waiting for the new size, retry");
		return -ZL_ERR_BUSY;
	}
	if (!a->vol) {
		snprintf(msg, len, "stopping");
		return -ZL_ERR_CONN;
	}
	/* With --ublk-threads every thread's handle must serve it first. */
	if (zl_vol_size(a->vol) >= want && attach_ublk_size_ok(a, want)) {
		rc = attach_resize_grow(a, msg, len);
		if (rc == 1)
			a->resize_waiting = true;
		return rc;
	}
	a->resize_want = want;
	a->resize_deadline_ms = zl_now_ms() + ATTACH_RESIZE_MS;
	a->resize_waiting = true;
	zl_timer_start(a->loop, &a->resize_timer, 20, 0, attach_resize_tick, a);
	return 1;
}

static void attach_ctl_cb(void *arg, uint32_t events)
{
	struct attach *a = arg;
	struct timeval tv = {.tv_sec = 2};
	char req[64], reply[2048], msg[256] = "";
	ssize_t n;
	int fd, rc;

	fd = accept4(a->ctl_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = read(fd, req, sizeof(req) - 1);
	if (n <= 0)
		goto out_close;
	req[n] = '\0';
	req[strcspn(req, "\r\n")] = '\0';
	if (strcmp(req, "resize") == 0 && a->stopping) {
		snprintf(reply, sizeof(reply), "err stopping\n");
	} else if (strcmp(req, "resize") == 0) {
		rc = attach_resize(a, msg, sizeof(msg));
		if (rc == 1) { /* attach_resize_tick answers */
			a->resize_fd = fd;
			return;
		}
		if (rc)
			snprintf(reply, sizeof(reply), "err %s\n", msg);
		else
			snprintf(reply, sizeof(reply), "ok size=%llu\n",
				 (unsigned long long)a->size);
	} else if (strcmp(req, "status") == 0) {
		struct zl_vol_stats vs = {0};
		uint64_t errors = a->io_errors;
		bool fenced = !a->vol || zl_vol_fenced(a->vol);
		/* Latency histograms, one word each (zl_metrics_hist_format):
		 * 23 numbers of up to 20 digits. */
		char lat[3][512];
		/* The limits the client enforces now (the record it last
		 * installed; enum zl_qos order, 0 = unlimited). */
		char qos[ZL_QOS_N * 21 + 1] = "";
		/* ublk: the requests each queue took, " ublk_reqs=N,N,...",
		 * the copy mode, the waits for a buffer and the copies made
		 * with system calls. */
		char ublk[ATTACH_UBLK_QUEUES_MAX * 21 + 128] = "";
		size_t ql = 0;

		if (a->vol) {
			const uint64_t *lim = zl_vol_meta(a->vol)->qos;

			zl_vol_get_stats(a->vol, &vs);
			for (int k = 0; k < ZL_QOS_N; k++)
				ql += (size_t)snprintf(qos + ql, sizeof(qos) - ql, "%s%llu",
						       k ? "," : "", (unsigned long long)lim[k]);
		}
		attach_ublk_status(a, ublk, sizeof(ublk));
		attach_ublk_stats(a, &vs, &errors, &fenced);
		for (int i = 0; i < 3; i++)
			if (zl_metrics_hist_format(&vs.lat[i], lat[i], sizeof(lat[i])) < 0)
				lat[i][0] = '\0';
		/* The client's counters since this attach process started. */
		snprintf(reply, sizeof(reply),
			 "ok size=%llu errors=%llu busy=%u fenced=%d reads=%llu writes=%llu "
			 "read_bytes=%llu write_bytes=%llu retries=%llu failovers=%llu "
			 "throttled=%llu qos=%s%s read_lat=%s write_lat=%s flush_lat=%s\n",
			 (unsigned long long)a->size, (unsigned long long)errors, a->busy_slots,
			 (int)fenced, (unsigned long long)vs.reads, (unsigned long long)vs.writes,
			 (unsigned long long)vs.read_bytes, (unsigned long long)vs.write_bytes,
			 (unsigned long long)vs.retries, (unsigned long long)vs.failovers,
			 (unsigned long long)vs.throttled, qos, ublk, lat[0], lat[1], lat[2]);
	} else {
		snprintf(reply, sizeof(reply), "err unknown command '%.40s' (resize|status)\n",
			 req);
	}
	if (write(fd, reply, strlen(reply)) < 0)
		ZL_LOG_WARN(ATTACH_LOG, "control reply failed: vol=%s err=%s", a->vol_id,
			    strerror(errno));
out_close:
	close(fd);
}

static int attach_ctl_listen(struct attach *a)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/ctl.sock", a->dir) >=
	    sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	unlink(sa.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	a->ctl_fd = fd;
	return zl_loop_add(a->loop, &a->ctl_h, fd, EPOLLIN, attach_ctl_cb, a);
}

/* Detaches every loop device on our file (LOOP_CLR_FD; the kernel defers
 * it while the device is open: a mounted file system, a reader). On its own
 * thread: the ioctl may wait for the device's requests in flight, which
 * the loop thread answers meanwhile. */
static void *attach_detach_main(void *arg)
{
	struct attach *a = arg;
	char file[1200], dev[64];

	snprintf(file, sizeof(file), "%s/disk", a->mnt);
	for (int i = 0; i < 8 && node_loop_find(file, dev, sizeof(dev)); i++) {
		int fd = open(dev, O_RDONLY | O_CLOEXEC);

		if (fd < 0 || ioctl(fd, LOOP_CLR_FD, 0) < 0) {
			ZL_LOG_WARN(ATTACH_LOG, "cannot detach loop device: vol=%s dev=%s err=%s",
				    a->vol_id, dev, strerror(errno));
			if (fd >= 0)
				close(fd);
			break;
		}
		close(fd);
		ZL_LOG_INFO(ATTACH_LOG, "loop device detached: vol=%s dev=%s", a->vol_id, dev);
		/* A deferred detach leaves the file listed: done with it. */
		if (node_loop_find(file, dev, sizeof(dev)))
			break;
	}
	atomic_store(&a->detach_done, true);
	zl_loop_wake(a->loop);
	return NULL;
}

/* The stop bound passed (or storage answered the final flush): whatever is
 * in flight fails now with EIO, every later request too, and the loop
 * devices on our file go. Closing the volume handle runs the callbacks of
 * its I/O with an error. */
static void attach_abort(struct attach *a)
{
	struct zl_vol *v = a->vol;

	if (a->aborting)
		return;
	a->aborting = true;
	if (a->busy_slots)
		ZL_LOG_WARN(ATTACH_LOG,
			    "stop bound reached, failing requests in flight: vol=%s "
			    "busy=%u",
			    a->vol_id, a->busy_slots);
	a->vol = NULL;
	/* The ublk queue threads' handles follow v: they close first. */
	attach_ublk_abort(a);
	zl_vol_close(v);
	/* Requests still queued in the kernel get their EIO too. */
	if (a->se)
		zl_loop_mod(a->loop, &a->fuse_h, EPOLLIN);
	a->detach_started = pthread_create(&a->detach_thread, NULL, attach_detach_main, a) == 0;
	if (!a->detach_started)
		atomic_store(&a->detach_done, true);
}

static void attach_flushed(void *arg, int status)
{
	struct attach *a = arg;

	if (status)
		ZL_LOG_ERR(ATTACH_LOG, "final flush failed: vol=%s err=%s", a->vol_id,
			   zl_strerror(status));
	a->flushed_gen = a->flush_gen;
	a->flushing = false;
}

/* Stopping: wait for the requests in flight, then flush, then abort (fail
 * what is left, detach the loop devices) and stop; all within
 * ATTACH_STOP_MS, and the detach gets ATTACH_STOP_MS more. */
static void attach_stop_tick(void *arg)
{
	struct attach *a = arg;
	uint64_t now = zl_now_ns();
	uint64_t gen;
	bool busy;

	attach_ublk_stop_begin(a); /* once; the drain below waits for it */
	/* Requests in flight and those that changed data, the ublk queue
	 * threads' too (STOP_DEV counts in busy_slots until done). */
	gen = a->write_gen + attach_ublk_written(a);
	busy = a->busy_slots || attach_nbd_busy(a) || attach_ublk_busy(a);
	if (a->aborting) {
		if (atomic_load(&a->detach_done) ||
		    now >= a->stop_deadline_ns + (uint64_t)ATTACH_STOP_MS * 1000000u) {
			zl_loop_stop(a->loop);
			return;
		}
	} else if (now >= a->stop_deadline_ns || (!busy && !a->flushing && gen == a->flushed_gen)) {
		attach_abort(a);
	} else if (!busy && !a->flushing) {
		a->flushing = true;
		a->flush_gen = gen;
		if (zl_vol_aio_flush(a->vol, attach_flushed, a) != 0)
			attach_flushed(a, -ZL_ERR_IO);
	}
	zl_timer_start(a->loop, &a->stop_timer, 20, 0, attach_stop_tick, a);
}

static void attach_sig_cb(void *arg, uint32_t events)
{
	struct attach *a = arg;
	struct signalfd_siginfo si;
	char msg[256] = "";

	while (read(a->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			if (a->serving && !a->stopping &&
			    attach_resize(a, msg, sizeof(msg)) < 0)
				ZL_LOG_ERR(ATTACH_LOG, "resize on SIGHUP failed: vol=%s err=%s",
					   a->vol_id, msg);
			continue;
		}
		if (si.ssi_signo == SIGPIPE || a->stopping)
			continue;
		ZL_LOG_INFO(ATTACH_LOG, "stopping: vol=%s signal=%u busy=%u", a->vol_id,
			    si.ssi_signo, a->busy_slots);
		a->stopping = true;
		if (!a->serving)
			continue; /* still starting: the start-up waits see it */
		if (a->se)
			zl_loop_mod(a->loop, &a->fuse_h, 0);
		attach_nbd_disconnect(a);
		a->stop_deadline_ns = zl_now_ns() + (uint64_t)ATTACH_STOP_MS * 1000000u;
		attach_stop_tick(a);
	}
}

static int attach_signals(struct attach *a)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGPIPE);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	a->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sig_fd < 0)
		return -errno;
	return zl_loop_add(a->loop, &a->sig_h, a->sig_fd, EPOLLIN, attach_sig_cb, a);
}

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

void attach_flusher_enter(const struct attach *a)
{
	if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0)
		ZL_LOG_WARN(ATTACH_LOG,
			    "PR_SET_IO_FLUSHER failed (Linux >= 5.6, CAP_SYS_RESOURCE): vol=%s "
			    "err=%s",
			    a->vol_id, strerror(errno));
	if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0)
		ZL_LOG_WARN(ATTACH_LOG, "mlockall failed (CAP_IPC_LOCK): vol=%s err=%s", a->vol_id,
			    strerror(errno));
}

static int attach_open(struct attach *a, const struct attach_args *o, int *ready)
{
	struct zl_etcd_opts eo = {.endpoints = o->etcd, .timeout_ms = 5000};
	struct zl_client_opts co = {.prefix = o->prefix, .epoch = o->epoch};
	int rc;

	if (o->transport && zl_xport_select_parse(o->transport, &co.transport)) {
		attach_ready(ready, "ERR bad --transport '%s' (auto|tcp|rdma)", o->transport);
		return -ZL_ERR_INVAL;
	}
	if (o->io_timeout && node_io_timeout_parse(o->io_timeout, &co.io_timeout_s)) {
		attach_ready(ready, "ERR bad --io-timeout '%s' (seconds, 1..86400)", o->io_timeout);
		return -ZL_ERR_INVAL;
	}
	co.legacy_drop = o->legacy_drop;
	snprintf(a->client_id, sizeof(a->client_id), "attach-%s", o->vol_id);
	co.client_id = a->client_id;
	if (o->token && *o->token) {
		/* The attach token is for this node: HELLO names it. */
		if (!o->node_id || zl_vol_id_parse(o->vol_id, &co.token_vol)) {
			attach_ready(ready, "ERR an attach token needs --node-id and a volume id");
			return -ZL_ERR_INVAL;
		}
		co.client_id = o->node_id;
		co.token = o->token;
	}
	rc = node_etcd_opts(&eo, a->etcd_pw, sizeof(a->etcd_pw));
	if (rc) {
		attach_ready(ready, "ERR bad etcd TLS/auth settings (see the node's flags)");
		return rc;
	}
	rc = zl_loop_create(&a->loop);
	if (rc == 0) {
		rc = attach_signals(a);
		if (rc) {
			attach_ready(ready, "ERR cannot set up signals: %s", strerror(-rc));
			return rc;
		}
		rc = zl_etcd_create(&eo, &a->etcd);
	}
	if (rc) {
		attach_ready(ready, "ERR cannot set up etcd client for %s: %s", o->etcd,
			     zl_strerror(rc));
		return rc;
	}
	a->copts = co;
	rc = zl_client_create(a->loop, a->etcd, &co, &a->client);
	if (rc) {
		attach_ready(ready, "ERR cannot start the volume client: %s", zl_strerror(rc));
		return rc;
	}
	rc = zl_vol_open(a->client, o->vol_id, &a->vol);
	if (rc) {
		attach_ready(ready, "ERR %s cannot open volume %s: %s (detail: %s)", zl_errname(rc),
			     o->vol_id, zl_strerror(rc), zl_etcd_last_error());
		return rc;
	}
	a->size = zl_vol_size(a->vol);
	return 0;
}

static void attach_probe_cb(void *arg, int status)
{
	struct attach *a = arg;

	a->probe_status = status;
}

/* Reads the volume's first block: the proof that a replica serves us with
 * our credential, before anything (FUSE, a loop device) is set up on it.
 * Bounded by --start-timeout: a volume that cannot be read fails the start
 * with the reason (refused for good: at once). 0 or an error, reported. */
static int attach_probe(struct attach *a, const struct attach_args *o, int *ready)
{
	uint64_t len = ZL_MIN(a->size, (uint64_t)4096);
	uint64_t end = zl_now_ms() + (uint64_t)o->start_timeout_s * 1000u;
	char why[700];
	int rc;

	if (posix_memalign(&a->probe_buf, 4096, 4096)) {
		attach_ready(ready, "ERR ENOMEM out of memory");
		return -ENOMEM;
	}
	a->probe_status = 1;
	rc = len ? zl_vol_aio_read(a->vol, a->probe_buf, 0, len, attach_probe_cb, a) : 0;
	if (rc || !len) {
		a->probe_status = rc;
	}
	while (a->probe_status == 1 && !a->stopping && zl_now_ms() < end)
		if (zl_loop_run_once(a->loop, 100) < 0)
			break;
	if (a->probe_status == 0)
		return 0;
	if (a->stopping) {
		attach_ready(ready, "ERR ZL_ERR_CONN stopped by a signal while opening volume %s",
			     a->vol_id);
		return -ZL_ERR_CONN;
	}
	zl_vol_last_error(a->vol, why, sizeof(why));
	rc = a->probe_status == 1 ? -ZL_ERR_TIMEOUT : a->probe_status;
	if (zl_vol_refusal(a->vol, NULL, 0))
		rc = zl_vol_refusal(a->vol, NULL, 0);
	if (rc == -ZL_ERR_TIMEOUT)
		attach_ready(ready,
			     "ERR ZL_ERR_UNAVAIL cannot read volume %s within %u s "
			     "(--attach-timeout): %s; check that its storage daemons run and are "
			     "reachable from this node (zl status)",
			     a->vol_id, o->start_timeout_s, why);
	else
		attach_ready(ready, "ERR %s cannot read volume %s: %s", zl_errname(rc), a->vol_id,
			     why);
	ZL_LOG_ERR(ATTACH_LOG, "start failed: vol=%s err=%s why=\"%s\"", a->vol_id, zl_errname(rc),
		   why);
	return rc;
}

/* Makes this process the one that takes the volume's snapshots
 * (docs/SNAPSHOTS.md §3): only it knows which writes it acknowledged. A
 * snapshot taken by the transaction alone before our snapwriters/ key
 * existed (while we started, or, after a kill -9, once the dead process's
 * key expired with its lease) raised the record's sequence after our
 * handle read it: the handle's watch brings it, and no write is sent
 * before it did, else writes issued after that snapshot would land in it.
 * Before READY, bounded by --start-timeout. 0 or an error, reported. */
static int attach_snap_serve(struct attach *a, const struct attach_args *o, int *ready)
{
	uint64_t end = zl_now_ms() + (uint64_t)o->start_timeout_s * 1000u;
	struct zl_volume rec;
	uint32_t want;
	int rc;

	rc = zl_vol_snap_serve(a->vol);
	if (rc) {
		attach_ready(ready,
			     "ERR %s cannot take the snapshots of volume %s: %s (detail: %s); "
			     "not serving it, as its snapshots would not be crash-consistent: "
			     "check that etcd is reachable and stage the volume again",
			     zl_errname(rc), a->vol_id, zl_strerror(rc), zl_etcd_last_error());
		return rc;
	}
	memset(&rec, 0, sizeof(rec));
	rc = zl_meta_volume_get(a->etcd, a->prefix, a->vol_id, &rec);
	if (rc) {
		attach_ready(ready,
			     "ERR %s cannot read the record of volume %s: %s (detail: %s); check "
			     "that etcd is reachable and stage the volume again",
			     zl_errname(rc), a->vol_id, zl_strerror(rc), zl_etcd_last_error());
		return rc;
	}
	want = rec.snap_seq;
	zl_volume_fini(&rec);
	while (zl_vol_snap_seq(a->vol) < want && !a->stopping && zl_now_ms() < end)
		if (zl_loop_run_once(a->loop, 100) < 0)
			break;
	if (zl_vol_snap_seq(a->vol) < want) {
		attach_ready(ready,
			     "ERR ZL_ERR_TIMEOUT volume %s: the volume client did not learn "
			     "snapshot sequence %u within %u s (--attach-timeout; it has %u): "
			     "check etcd and stage the volume again",
			     a->vol_id, want, o->start_timeout_s, zl_vol_snap_seq(a->vol));
		return -ZL_ERR_TIMEOUT;
	}
	return 0;
}

/* Mounts the FUSE session on <dir>/fuse and waits for the kernel's INIT:
 * opening the file works once READY is reported. 0 or an error, reported. */
static int attach_start_fuse(struct attach *a, int *ready)
{
	int rc;

	if (mkdir(a->mnt, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		attach_ready(ready, "ERR cannot create %s: %s", a->mnt, strerror(errno));
		return rc;
	}
	rc = attach_fuse_start(a);
	if (rc) {
		attach_ready(ready, "ERR cannot serve FUSE on %s: %s (see attach.log)", a->mnt,
			     strerror(-rc));
		return rc;
	}
	for (uint64_t end = zl_now_ms() + 10000;
	     !a->fuse_inited && a->fuse_mounted && !a->stopping;) {
		if (zl_now_ms() > end || zl_loop_run_once(a->loop, 100) < 0)
			break;
	}
	if (!a->fuse_inited) {
		attach_ready(ready, "ERR the kernel did not finish FUSE INIT on %s (see attach.log)",
			     a->mnt);
		return -EIO;
	}
	return 0;
}

/* Connects (or, --reattach, reconnects) the kernel's nbd device. 0 or an
 * error, reported. */
static int attach_start_nbd(struct attach *a, const struct attach_args *o, int *ready)
{
	char why[400] = "";
	int rc;

	a->io_timeout_s = 600;
	if (o->io_timeout)
		node_io_timeout_parse(o->io_timeout, &a->io_timeout_s);
	rc = attach_nbd_start(a, o->reattach, why, sizeof(why));
	if (rc)
		attach_ready(ready, "ERR %s cannot serve volume %s through nbd: %s", zl_errname(rc),
			     a->vol_id, why);
	return rc;
}

int attach_main(int argc, char **argv)
{
	struct attach_args o;
	struct attach *a;
	static char token[129];
	int ready, rc;

	zl_log_init("zipline-node-attach");
	if (attach_parse(argc, argv, &o))
		return 2;
	if (o.log_level && zl_log_set_level(o.log_level))
		fprintf(stderr, "zipline-node attach: bad --log-level '%s'\n", o.log_level);
	ready = o.ready_fd;
	/* The attach token comes through the environment, never argv (argv is
	 * world-readable in /proc); it goes to the volume client's HELLOs and
	 * nowhere else (never logged), and out of the environment. */
	{
		const char *t = getenv("ZL_ATTACH_TOKEN");

		if (t && *t && strlen(t) < sizeof(token))
			snprintf(token, sizeof(token), "%s", t);
		if (t)
			unsetenv("ZL_ATTACH_TOKEN");
		o.token = token[0] ? token : NULL;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		attach_ready(&ready, "ERR out of memory");
		return 1;
	}
	a->fuse_h.fd = a->ctl_h.fd = a->sig_h.fd = -1;
	a->ctl_fd = a->sig_fd = a->resize_fd = -1;
	a->nbd_index = -1;
	a->vol_id = o.vol_id;
	a->prefix = o.prefix;
	snprintf(a->dir, sizeof(a->dir), "%s", o.dir);
	snprintf(a->mnt, sizeof(a->mnt), "%s/fuse", o.dir);
	rc = attach_open(a, &o, &ready);
	if (rc == 0)
		rc = attach_probe(a, &o, &ready);
	if (rc == 0)
		rc = attach_snap_serve(a, &o, &ready);
	if (rc)
		goto out;
	if (o.nbd) {
		rc = attach_start_nbd(a, &o, &ready);
	} else if (o.ublk) {
		rc = attach_ublk_start(a, o.ublk_recover, attach_ublk_queues(&o), o.ublk_threads,
				       o.ublk_copy);
		if (rc)
			attach_ready(&ready,
				     "ERR cannot serve volume %s as a ublk device: %s "
				     "(see attach.log)",
				     a->vol_id, strerror(-rc));
	} else {
		rc = attach_start_fuse(a, &ready);
	}
	if (rc)
		goto out;
	rc = attach_ctl_listen(a);
	if (rc) {
		attach_ready(&ready, "ERR cannot listen on %s/ctl.sock: %s", a->dir, strerror(-rc));
		if (!o.reattach)
			attach_nbd_disconnect(a);
		goto out;
	}
	if (a->se)
		ZL_LOG_INFO(ATTACH_LOG, "serving: vol=%s size=%llu epoch=%llu file=%s/disk pid=%d",
			    a->vol_id, (unsigned long long)a->size, (unsigned long long)o.epoch,
			    a->mnt, (int)getpid());
	else
		ZL_LOG_INFO(ATTACH_LOG, "serving: vol=%s size=%llu epoch=%llu%s pid=%d", a->vol_id,
			    (unsigned long long)a->size, (unsigned long long)o.epoch,
			    a->ready_extra, (int)getpid());
	attach_ready(&ready, "READY size=%llu%s", (unsigned long long)a->size, a->ready_extra);
	a->serving = true;
	if (a->stopping) { /* a signal came while starting */
		attach_nbd_disconnect(a);
		a->stop_deadline_ns = zl_now_ns() + (uint64_t)ATTACH_STOP_MS * 1000000u;
		attach_stop_tick(a);
	}
	rc = zl_loop_run(a->loop);
	if (rc == 0)
		rc = attach_ublk_thread_error(a);
	{
		/* The ublk threads count their errors themselves. */
		struct zl_vol_stats vs = {0};
		uint64_t errors = a->io_errors;
		bool fenced = false;

		attach_ublk_stats(a, &vs, &errors, &fenced);
		ZL_LOG_INFO(ATTACH_LOG, "stopped: vol=%s errors=%llu", a->vol_id,
			    (unsigned long long)errors);
	}
out:
	attach_fuse_stop(a);
	attach_nbd_stop(a);
	attach_ublk_stop(a);
	if (a->ctl_fd >= 0) {
		char path[1100];

		snprintf(path, sizeof(path), "%s/ctl.sock", a->dir);
		unlink(path);
		close(a->ctl_fd);
	}
	if (a->detach_started && !atomic_load(&a->detach_done)) {
		/* The FUSE connection is gone, so the detach ends soon; it
		 * still uses a and the loop: leave them to the exit. */
		ZL_LOG_WARN(ATTACH_LOG, "exiting while a loop device detach is pending: vol=%s",
			    a->vol_id);
		exit(1);
	}
	if (a->detach_started)
		pthread_join(a->detach_thread, NULL);
	zl_vol_close(a->vol);
	zl_client_destroy(a->client);
	free(a->probe_buf);
	zl_etcd_destroy(a->etcd);
	if (a->sig_fd >= 0)
		close(a->sig_fd);
	zl_loop_destroy(a->loop);
	free(a);
	return rc ? 1 : 0;
}
