/* ublk frontend of the attach process (`zipline-node attach --frontend
 * ublk`): the volume becomes the block device /dev/ublkbN of the kernel's
 * ublk_drv, served from the attach process's zl_loop.
 *
 * Protocol (Documentation/block/ublk.rst, include/uapi/linux/ublk_cmd.h):
 * control commands are io_uring URING_CMDs on /dev/ublk-control (ADD_DEV,
 * SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV, START/END_USER_RECOVERY); each
 * queue is an io_uring on /dev/ublkcN holding one FETCH_REQ per tag. When a
 * request arrives the kernel completes its tag's command; the descriptor
 * (op, sectors, buffer) is in a read-only shared mapping of /dev/ublkcN. We
 * run it on the volume and answer with COMMIT_AND_FETCH_REQ, which also
 * waits for the next request of that tag.
 *
 * Data: with UBLK_F_USER_COPY (where GET_FEATURES offers it, and on a
 * recovered device added with it) a READ or WRITE takes a buffer from the
 * device's pool (UBLK_POOL_BUFS of them, allocated once) when it arrives,
 * or waits for one (buf_wait list, first come first served); a write's
 * data is read from /dev/ublkcN at the tag's file offset, a read's data
 * written there (up to UBLK_SYNC_COPY_MAX bytes with pread/pwrite, larger
 * as io_uring operations on the queue's ring: ublk_tag_copy); the buffer
 * goes back to the pool at COMMIT. Without it (the classic copy
 * mode, --ublk-copy tag) every tag owns a buffer whose address its
 * FETCH_REQ gives: the kernel copies a write's payload into it before
 * delivering the request, and a read's data from it at COMMIT.
 *
 * Threads: by default one per queue (--ublk-threads N: N of them, at most
 * one per queue; 1: everything on the attach process's loop thread); the
 * kernel binds each queue to the task that issued its FETCH_REQs. Queue q
 * is served by thread q % N (struct ublk_thread): thread 0 is the attach
 * loop, each other one has its own loop, volume client and volume handle
 * (following the snapshot switch of the attach loop's, which serves the
 * snapshots: zl_vol_snap_follow), its share of the buffer pool and its own
 * waiting lists, and issues its queues' FETCH_REQs itself; no lock and no
 * memory of another thread per I/O. Every thread's handle draws on one set
 * of QoS buckets (zl_vol_qos_join: leases of about 1 ms of the rate), so
 * the volume's limits hold for the process, not per thread. A queue ring
 * signals an eventfd that its thread's loop polls. The control ring stays on the attach loop.
 * Control commands are issued without waiting in the kernel (ublk_drv
 * punts them to io_uring's workers), so START_DEV, END_USER_RECOVERY and
 * STOP_DEV, which wait for the device's own I/O, complete while the loops
 * keep serving that I/O.
 *
 * Kernel features: the ioctl-encoded commands (UBLK_U_*) when
 * UBLK_U_CMD_GET_FEATURES answers (Linux >= 6.5), else the legacy opcodes
 * (6.0-6.4); UBLK_F_USER_RECOVERY + UBLK_F_USER_RECOVERY_REISSUE (>= 6.1)
 * when the kernel offers them: then the device outlives this process and
 * `--recover ID` takes it over. The uapi header of the build machine may be
 * older than the running kernel: what it lacks is defined here, and used
 * only when GET_FEATURES lists it. */
#include "attach.h"
#include "lib/common/notify.h"
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef UBLK_CMD_GET_FEATURES
#define UBLK_CMD_GET_FEATURES 0x13
#endif
#ifndef UBLK_MAX_QUEUE_DEPTH
#define UBLK_MAX_QUEUE_DEPTH 4096
#endif
#ifndef UBLK_F_CMD_IOCTL_ENCODE
#define UBLK_F_CMD_IOCTL_ENCODE (1ULL << 6)
#endif
/* Linux >= 6.16: a started device changes its size (data[0]: sectors). */
#ifndef UBLK_CMD_UPDATE_SIZE
#define UBLK_CMD_UPDATE_SIZE 0x15
#endif
#ifndef UBLK_F_UPDATE_SIZE
#define UBLK_F_UPDATE_SIZE (1ULL << 10)
#endif
/* Linux >= 6.5: the server copies the request's data itself, with read and
 * write on /dev/ublkcN at UBLKSRV_IO_BUF_OFFSET + (queue << UBLK_QID_OFF) +
 * (tag << UBLK_TAG_OFF) + the byte offset in the request. */
#ifndef UBLK_F_USER_COPY
#define UBLK_F_USER_COPY (1ULL << 7)
#endif
#ifndef UBLK_TAG_OFF
#define UBLK_TAG_OFF 25
#define UBLK_QID_OFF (UBLK_TAG_OFF + 16)
#endif
/* User copy: copies up to this many bytes are system calls on the queue's
 * thread, larger ones io_uring operations (ublk_tag_copy). */
#define UBLK_SYNC_COPY_MAX (64u * 1024u)

/* ioctl encoding of the commands (Linux >= 6.5; the 6.1 header lacks it). */
#define UBLK_IOC_CTRL(nr)   _IOWR('u', (nr), struct ublksrv_ctrl_cmd)
#define UBLK_IOC_CTRL_R(nr) _IOR('u', (nr), struct ublksrv_ctrl_cmd)
#define UBLK_IOC_IO(nr)	    _IOWR('u', (nr), struct ublksrv_io_cmd)

#define UBLK_CTRL_DEV "/dev/ublk-control"
/* Tags: with user copy UBLK_DEPTH per queue, the request buffers a pool
 * of UBLK_POOL_BUFS shared by all of them (split evenly over the threads);
 * in the tag copy mode each tag owns its 1 MiB buffer and UBLK_DEPTH tags
 * are split evenly over the queues (UBLK_DEPTH_MIN at least each). Either
 * way a device locks UBLK_POOL_BUFS x UBLK_MAX_IO (128 MiB) of buffers,
 * whatever its queues and threads. */
#define UBLK_DEPTH     128
#define UBLK_DEPTH_MIN 16
#define UBLK_POOL_BUFS 128
#define UBLK_MAX_IO    (1u << 20)
/* The control ring: one command at a time. */
#define UBLK_CTRL_DEPTH 4
/* A dead server's device is quiesced by the kernel (up to a few seconds
 * after the process is gone); START_USER_RECOVERY answers EBUSY until then. */
#define UBLK_RECOVER_WAIT_MS 30000
/* A queue thread publishes its handle's size and stats this often. */
#define UBLK_PUB_MS 100
/* Control commands that do not wait for I/O. */
#define UBLK_CTRL_WAIT_MS 10000
/* user_data of a queue ring: the tag, with UBLK_UD_COPY for the data copy
 * of user copy (else the tag's FETCH/COMMIT_AND_FETCH command). */
#define UBLK_UD_COPY (1ull << 32)

/* State of a tag:
 * FETCH: a FETCH/COMMIT_AND_FETCH command is with the kernel (idle);
 * IO: the request runs on the volume (or waits in a retry list);
 * COPY: user copy: its data moves between its buffer and /dev/ublkcN;
 * DEAD: no command outstanding (the kernel aborted it: stopping). */
enum ublk_tag_state { UBLK_TAG_FETCH, UBLK_TAG_IO, UBLK_TAG_COPY, UBLK_TAG_DEAD };

/* A request buffer: from the transport's pool, else the heap. */
struct ublk_buf {
	void *p;
	bool pooled;
};

struct ublk_queue_srv;
struct attach_ublk;

/* A thread that serves queues (--ublk-threads N: queue q is served by
 * thread q % N). Thread 0 is the attach loop with the process's client and
 * volume handle (a->loop, a->client, a->vol); every other one has its own
 * loop, client and volume handle (a follower of a->vol's snapshot switch,
 * zl_vol_snap_follow), so an I/O takes no lock and touches no memory of
 * another thread. Each has its share of the request buffers and its own
 * waiting lists. The counters other threads read (ctl status, the stop
 * sequence, a resize) are atomics only their thread writes, or (stats) a
 * copy the thread publishes every UBLK_PUB_MS. */
struct ublk_thread {
	struct attach_ublk *u;
	unsigned int idx;
	struct zl_loop *loop;
	/* idx > 0: ours, created and closed on the thread; NULL once aborted.
	 * idx 0: a->client and a->vol. */
	struct zl_client *client;
	struct zl_vol *vol;
	bool aborting;
	pthread_t tid;
	bool created;	      /* tid runs (idx > 0) */
	_Atomic int state;    /* idx > 0: 1 while setting up, then 0 or -errno */
	_Atomic int loop_rc;  /* the loop's error, 0 */
	struct zl_notify cmd; /* the main thread's requests (abort_req) */
	_Atomic bool abort_req, aborted;
	struct zl_timer pub_timer;
	_Atomic uint64_t pub_size; /* the handle's size (a resize waits on it) */
	_Atomic bool pub_fenced;
	pthread_mutex_t stats_lock; /* guards stats: the publisher and ctl status */
	struct zl_vol_stats stats;
	/* The request buffers: user copy: this thread's share of the pool,
	 * free ones stacked in pool_free; tag copy: one per tag of its queues. */
	struct ublk_buf *bufs;
	unsigned int nr_bufs;
	struct ublk_buf **pool_free;
	unsigned int pool_nfree;
	/* Tags of our queues whose request the volume refused for now
	 * (-ZL_ERR_BUSY), oldest first. */
	struct ublk_tag *retry_head, *retry_tail;
	/* User copy: tags waiting for a buffer, oldest first. */
	struct ublk_tag *bwait_head, *bwait_tail;
	bool retrying; /* ublk_retry_waiting runs (not reentered) */
	/* Requests that change data, counted at submit; flushed_sum: the sum
	 * of every thread's write_gen the last successful flush here covered. */
	_Atomic uint64_t write_gen;
	uint64_t flushed_sum;
	_Atomic unsigned int busy;    /* idx > 0: requests on the volume */
	_Atomic uint64_t buf_waits;   /* requests that found the pool empty */
	_Atomic uint64_t sync_copies; /* user copies made with pread/pwrite */
	_Atomic uint64_t io_errors;
	struct zl_ratelimit err_rl;
};

struct ublk_tag {
	struct ublk_queue_srv *q;
	struct ublk_tag *next_retry;
	/* Tag copy mode: the tag's own buffer; user copy: the pool's buffer
	 * the request holds, NULL between requests. */
	struct ublk_buf *buf;
	uint64_t off;
	uint32_t len;
	uint16_t tag;
	uint8_t op;
	bool fua;
	uint64_t gen; /* a flush: the sum of write_gen it covers */
	enum ublk_tag_state state;
};

/* One hardware queue of the device: its ring on /dev/ublkcN (its eventfd
 * on its thread's loop), its descriptors (a read-only mapping of
 * /dev/ublkcN at the queue's offset) and its tags. Served by thread
 * q_id % nr_threads. */
struct ublk_queue_srv {
	struct attach_ublk *u;
	struct ublk_thread *th;
	uint16_t q_id;
	struct io_uring ring;
	bool ring_ok;
	int ev_fd;
	struct zl_loop_handle ev_h;
	struct ublksrv_io_desc *descs;
	size_t descs_len;
	struct ublk_tag *tags;
	_Atomic uint64_t reqs; /* requests taken (ctl status) */
	bool submit_queued;
	struct zl_defer submit_defer;
};

struct attach_ublk {
	struct attach *a;
	int ctrl_fd;
	struct io_uring ctrl_ring;
	bool ctrl_ring_ok;
	bool ioctl_encode;
	uint64_t features; /* UBLK_F_* the kernel offers (GET_FEATURES) */
	struct ublksrv_ctrl_dev_info info;
	int dev_id;	/* -1: none added or taken over */
	bool added;	/* ADD_DEV made it: ours to delete if the start fails */
	bool started;	/* START_DEV / END_USER_RECOVERY done: serving */
	bool recovered; /* START_USER_RECOVERY done: taking it over */

	int cdev_fd;
	struct ublk_queue_srv *queues; /* info.nr_hw_queues of them */
	unsigned int nr_queues;	       /* allocated (and torn down) */
	unsigned int depth;	       /* tags per queue */
	bool user_copy;		       /* UBLK_F_USER_COPY in info.flags */
	/* The threads serving the queues (--ublk-threads), nr_threads of
	 * them, at most one per queue. */
	struct ublk_thread *threads;
	unsigned int nr_threads;
	/* nr_threads > 1: the volume's QoS limits, held by every thread's
	 * handle together (each joins it; our reference goes at the stop). */
	struct zl_vol_qos_share *qos_share;

	/* The control command issued without waiting (START_DEV, STOP_DEV,
	 * END_USER_RECOVERY): its result arrives on the control ring's
	 * eventfd. */
	int ctrl_ev_fd;
	struct zl_loop_handle ctrl_ev_h;
	bool ctrl_busy;
	int ctrl_res;
	bool stop_sent;
	bool stop_holds_slot; /* STOP_DEV counts in a->busy_slots */
	bool resize_sent;     /* UPDATE_SIZE: attach_ublk_resized takes its result */
};

static uint32_t ublk_ctrl_op(const struct attach_ublk *u, uint32_t nr)
{
	if (!u->ioctl_encode)
		return nr;
	if (nr == UBLK_CMD_GET_DEV_INFO || nr == UBLK_CMD_GET_PARAMS || nr == UBLK_CMD_GET_FEATURES)
		return UBLK_IOC_CTRL_R(nr);
	return UBLK_IOC_CTRL(nr);
}

static uint32_t ublk_io_op(const struct attach_ublk *u, uint32_t nr)
{
	return u->ioctl_encode ? UBLK_IOC_IO(nr) : nr;
}

static const char *ublk_cmd_name(uint32_t nr)
{
	switch (nr) {
	case UBLK_CMD_ADD_DEV:
		return "ADD_DEV";
	case UBLK_CMD_DEL_DEV:
		return "DEL_DEV";
	case UBLK_CMD_START_DEV:
		return "START_DEV";
	case UBLK_CMD_STOP_DEV:
		return "STOP_DEV";
	case UBLK_CMD_SET_PARAMS:
		return "SET_PARAMS";
	case UBLK_CMD_GET_PARAMS:
		return "GET_PARAMS";
	case UBLK_CMD_GET_DEV_INFO:
		return "GET_DEV_INFO";
	case UBLK_CMD_START_USER_RECOVERY:
		return "START_USER_RECOVERY";
	case UBLK_CMD_END_USER_RECOVERY:
		return "END_USER_RECOVERY";
	case UBLK_CMD_GET_FEATURES:
		return "GET_FEATURES";
	case UBLK_CMD_UPDATE_SIZE:
		return "UPDATE_SIZE";
	default:
		return "?";
	}
}

/* Fills a (128-byte) SQE with one control command on /dev/ublk-control. */
static void ublk_ctrl_prep(struct io_uring_sqe *sqe, int fd, uint32_t cmd_op, uint32_t dev_id,
			   void *addr, uint16_t len, uint64_t data0)
{
	struct ublksrv_ctrl_cmd *cmd;

	memset(sqe, 0, 2 * sizeof(*sqe)); /* SQE128 */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->cmd_op = cmd_op;
	cmd = (struct ublksrv_ctrl_cmd *)(void *)sqe->cmd;
	cmd->dev_id = dev_id;
	cmd->queue_id = (uint16_t)-1;
	cmd->addr = (uint64_t)(uintptr_t)addr;
	cmd->len = len;
	cmd->data[0] = data0;
}

/* Queues one control command on the control ring and submits it. */
static int ublk_ctrl_submit(struct attach_ublk *u, uint32_t nr, uint32_t dev_id, void *addr,
			    uint16_t len, uint64_t data0)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ctrl_ring);
	int rc;

	if (!sqe)
		return -EBUSY;
	ublk_ctrl_prep(sqe, u->ctrl_fd, ublk_ctrl_op(u, nr), dev_id, addr, len, data0);
	sqe->user_data = nr;
	rc = io_uring_submit(&u->ctrl_ring);
	return rc == 1 ? 0 : (rc < 0 ? rc : -EIO);
}

/* Takes the control ring's completion, if there is one: 1 (res set), 0. */
static int ublk_ctrl_reap(struct attach_ublk *u, int *res)
{
	struct io_uring_cqe *cqe;

	if (io_uring_peek_cqe(&u->ctrl_ring, &cqe) != 0)
		return 0;
	*res = cqe->res;
	io_uring_cqe_seen(&u->ctrl_ring, cqe);
	return 1;
}

static void ublk_ctrl_ev_cb(void *arg, uint32_t events)
{
	struct attach_ublk *u = arg;
	uint64_t n;
	int res;

	if (read(u->ctrl_ev_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		ZL_LOG_WARN(ATTACH_LOG, "ublk control eventfd: err=%s", strerror(errno));
	if (u->ctrl_busy && ublk_ctrl_reap(u, &res)) {
		u->ctrl_res = res;
		u->ctrl_busy = false;
		/* STOP_DEV held the stop sequence (a busy slot) until now. */
		if (u->stop_holds_slot) {
			u->stop_holds_slot = false;
			u->a->busy_slots--;
		}
		if (u->resize_sent) {
			u->resize_sent = false;
			attach_ublk_resized(u->a, res);
		}
	}
}

/* Runs one control command and waits for its result while the loop keeps
 * serving (the device's own I/O, signals), at most timeout_ms: the
 * command's result (0 or -errno), -ETIMEDOUT. */
static int ublk_ctrl_run(struct attach_ublk *u, uint32_t nr, uint32_t dev_id, void *addr,
			 uint16_t len, uint64_t data0, uint32_t timeout_ms)
{
	uint64_t end = zl_now_ms() + timeout_ms;
	int rc;

	if (u->ctrl_busy)
		return -EBUSY;
	rc = ublk_ctrl_submit(u, nr, dev_id, addr, len, data0);
	if (rc)
		return rc;
	u->ctrl_busy = true;
	while (u->ctrl_busy && zl_now_ms() < end)
		if (zl_loop_run_once(u->a->loop, 20) < 0)
			break;
	if (u->ctrl_busy) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk %s did not finish in %u ms: dev=%d", ublk_cmd_name(nr),
			   timeout_ms, u->dev_id);
		return -ETIMEDOUT;
	}
	return u->ctrl_res;
}

/* The volume handle th's I/O goes to, NULL once aborted. */
static struct zl_vol *ublk_vol(const struct ublk_thread *th)
{
	const struct attach *a = th->u->a;

	if (th->idx)
		return th->aborting ? NULL : th->vol;
	return a->aborting ? NULL : a->vol;
}

/* A counter only its own thread writes, others read. */
static void ublk_count(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* Requests on the volume: thread 0's count in a->busy_slots (the stop
 * sequence's), the others' in their own (attach_ublk_busy). */
static void ublk_busy_add(struct ublk_thread *th, int d)
{
	if (th->idx == 0)
		th->u->a->busy_slots = (unsigned int)((int)th->u->a->busy_slots + d);
	else
		atomic_store_explicit(
		    &th->busy,
		    (unsigned int)((int)atomic_load_explicit(&th->busy, memory_order_relaxed) + d),
		    memory_order_relaxed);
}

/* The requests that changed data on every thread so far. */
static uint64_t ublk_write_sum(const struct attach_ublk *u)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < u->nr_threads; i++)
		n += atomic_load_explicit(&u->threads[i].write_gen, memory_order_relaxed);
	return n;
}

static void ublk_submit_cb(void *arg)
{
	struct ublk_queue_srv *q = arg;
	int rc;

	q->submit_queued = false;
	if (!q->ring_ok)
		return;
	rc = io_uring_submit(&q->ring);
	if (rc < 0)
		ZL_LOG_ERR(ATTACH_LOG, "ublk queue submit failed: dev=%d queue=%u err=%s",
			   q->u->dev_id, q->q_id, strerror(-rc));
}

/* The queue's ring is submitted once per loop iteration. */
static void ublk_queue_kick(struct ublk_queue_srv *q)
{
	if (!q->submit_queued) {
		q->submit_queued = true;
		zl_loop_defer(q->th->loop, &q->submit_defer, ublk_submit_cb, q);
	}
}

/* Queues FETCH (result ignored) or COMMIT_AND_FETCH for t; submitted
 * once per loop iteration. */
static void ublk_tag_queue_cmd(struct ublk_tag *t, uint32_t nr, int result)
{
	struct ublk_queue_srv *q = t->q;
	struct attach_ublk *u = q->u;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	struct ublksrv_io_cmd *cmd;

	if (!sqe) { /* never: one command per tag and as many SQEs as tags */
		ZL_LOG_ERR(ATTACH_LOG, "ublk queue ring full: dev=%d queue=%u tag=%u", u->dev_id,
			   q->q_id, t->tag);
		t->state = UBLK_TAG_DEAD;
		return;
	}
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = u->cdev_fd;
	sqe->cmd_op = ublk_io_op(u, nr);
	sqe->user_data = t->tag;
	cmd = (struct ublksrv_io_cmd *)(void *)sqe->cmd;
	cmd->q_id = q->q_id;
	cmd->tag = t->tag;
	cmd->result = result;
	/* User copy: no buffer address (the kernel refuses one). */
	cmd->addr = u->user_copy ? 0 : (uint64_t)(uintptr_t)t->buf->p;
	t->state = UBLK_TAG_FETCH;
	ublk_queue_kick(q);
}

static void ublk_io_err(struct ublk_thread *th, const char *what, const struct ublk_tag *t, int st)
{
	struct attach *a = th->u->a;

	ublk_count(&th->io_errors);
	if (zl_ratelimit_ok(&th->err_rl, 5))
		ZL_LOG_ERR(ATTACH_LOG, "%s failed: vol=%s off=%llu len=%u err=%s", what, a->vol_id,
			   (unsigned long long)t->off, t->len, zl_strerror(st));
}

/* Answers t's request; user copy: its buffer goes back to the pool (the
 * waiters get it in ublk_retry_waiting). */
static void ublk_tag_commit(struct ublk_tag *t, int result)
{
	struct ublk_thread *th = t->q->th;

	if (t->q->u->user_copy && t->buf) {
		th->pool_free[th->pool_nfree++] = t->buf;
		t->buf = NULL;
	}
	ublk_tag_queue_cmd(t, UBLK_IO_COMMIT_AND_FETCH_REQ, result);
}

/* A list of waiting tags (head, tail): t at the tail, or at the head. */
static void ublk_list_add(struct ublk_tag **head, struct ublk_tag **tail, struct ublk_tag *t,
			  bool front)
{
	if (front) {
		t->next_retry = *head;
		*head = t;
		if (!*tail)
			*tail = t;
		return;
	}
	t->next_retry = NULL;
	if (*tail)
		(*tail)->next_retry = t;
	else
		*head = t;
	*tail = t;
}

static struct ublk_tag *ublk_list_pop(struct ublk_tag **head, struct ublk_tag **tail)
{
	struct ublk_tag *t = *head;

	if (t) {
		*head = t->next_retry;
		if (!*head)
			*tail = NULL;
		t->next_retry = NULL;
	}
	return t;
}

static int ublk_tag_submit(struct ublk_thread *th, struct ublk_tag *t);
static void ublk_tag_start(struct ublk_thread *th, struct ublk_tag *t);
static void ublk_tag_copy(struct ublk_tag *t);
static void ublk_tag_copied(struct ublk_thread *th, struct ublk_tag *t, int res);

/* After a completion: the requests the volume refused go again, in order,
 * until it refuses one (it waits at the head for the next completion);
 * then (user copy) buffers freed go to the requests waiting for one, in
 * order. Buffer waiters never block the refused ones, which hold their
 * buffers: those go back whatever the waiters. */
static void ublk_retry_waiting(struct ublk_thread *th)
{
	struct ublk_tag *t;

	if (th->retrying)
		return;
	th->retrying = true;
	while ((t = ublk_list_pop(&th->retry_head, &th->retry_tail))) {
		if (ublk_tag_submit(th, t) == -ZL_ERR_BUSY) {
			ublk_list_add(&th->retry_head, &th->retry_tail, t, true);
			break;
		}
	}
	while (th->bwait_head && (th->pool_nfree || !ublk_vol(th)))
		ublk_tag_start(th, ublk_list_pop(&th->bwait_head, &th->bwait_tail));
	th->retrying = false;
}

static void ublk_io_done(void *arg, int status)
{
	struct ublk_tag *t = arg;
	struct ublk_thread *th = t->q->th;
	int result = 0;
	const char *what = "ublk read";

	switch (t->op) {
	case UBLK_IO_OP_READ:
		result = (int)t->len;
		break;
	case UBLK_IO_OP_WRITE:
		what = "ublk write";
		result = (int)t->len;
		break;
	case UBLK_IO_OP_FLUSH:
		what = "ublk flush";
		if (!status && t->gen > th->flushed_sum)
			th->flushed_sum = t->gen;
		break;
	default:
		what = "ublk discard/zeroes";
		break;
	}
	if (status) {
		ublk_io_err(th, what, t, status);
		result = status == -ZL_ERR_NOSPC ? -ENOSPC : -EIO;
	}
	ublk_busy_add(th, -1);
	if (t->q->u->user_copy && t->op == UBLK_IO_OP_READ && !status)
		ublk_tag_copy(t); /* the data to the request, then COMMIT */
	else
		ublk_tag_commit(t, result);
	ublk_retry_waiting(th);
}

/* Starts t's request on the volume. 0 (ublk_io_done commits it),
 * -ZL_ERR_BUSY (the caller queues it for retry); anything else is
 * committed here. */
static int ublk_tag_submit(struct ublk_thread *th, struct ublk_tag *t)
{
	struct zl_vol *v = ublk_vol(th);
	int rc;

	if (!v) {
		ublk_tag_commit(t, -EIO);
		return -EIO;
	}
	switch (t->op) {
	case UBLK_IO_OP_READ:
		rc = zl_vol_aio_read(v, t->buf->p, t->off, t->len, ublk_io_done, t);
		break;
	case UBLK_IO_OP_WRITE:
		rc = zl_vol_aio_write(v, t->buf->p, t->off, t->len, t->fua, ublk_io_done, t);
		break;
	case UBLK_IO_OP_FLUSH:
		t->gen = ublk_write_sum(th->u);
		rc = zl_vol_aio_flush(v, ublk_io_done, t);
		break;
	case UBLK_IO_OP_DISCARD:
		rc = zl_vol_aio_discard(v, t->off, t->len, ublk_io_done, t);
		break;
	default: /* UBLK_IO_OP_WRITE_ZEROES */
		rc = zl_vol_aio_write_zeroes(v, t->off, t->len, ublk_io_done, t);
		break;
	}
	if (rc == 0) {
		ublk_busy_add(th, 1);
		return 0;
	}
	if (rc == -ZL_ERR_BUSY)
		return rc;
	ublk_io_err(th, "ublk submit", t, rc);
	ublk_tag_commit(t, -EIO);
	return rc;
}

/* A request arrived on tag t: read its descriptor and run it. */
static void ublk_tag_request(struct ublk_thread *th, struct ublk_tag *t)
{
	struct attach_ublk *u = th->u;
	struct zl_vol *v = ublk_vol(th);
	const struct ublksrv_io_desc *d = &t->q->descs[t->tag];
	uint32_t op_flags = d->op_flags;
	uint64_t off = d->start_sector << 9, len = (uint64_t)d->nr_sectors << 9;
	/* Thread 0: the device's size; the others: their handle's, which a
	 * resize waits for before the device grows (a closed one fails the
	 * request at submit). */
	uint64_t size = th->idx ? (v ? zl_vol_size(v) : UINT64_MAX) : u->a->size;

	t->state = UBLK_TAG_IO;
	ublk_count(&t->q->reqs);
	t->op = (uint8_t)(op_flags & 0xff);
	t->fua = (op_flags & UBLK_IO_F_FUA) != 0;
	t->off = off;
	t->len = (uint32_t)len;
	switch (t->op) {
	case UBLK_IO_OP_FLUSH:
		/* Writes are acknowledged once stable on every in-sync
		 * replica: a flush with no write since the last flush that
		 * succeeded has nothing to do. */
		if (ublk_write_sum(u) == th->flushed_sum) {
			ublk_tag_commit(t, 0);
			return;
		}
		break;
	case UBLK_IO_OP_READ:
	case UBLK_IO_OP_WRITE:
		if (len > UBLK_MAX_IO || len > u->info.max_io_buf_bytes) {
			ublk_io_err(th, "ublk request too large", t, -ZL_ERR_INVAL);
			ublk_tag_commit(t, -EIO);
			return;
		}
		/* fall through */
	case UBLK_IO_OP_DISCARD:
	case UBLK_IO_OP_WRITE_ZEROES:
		if (off >= size || len > size - off) {
			ublk_io_err(th, "ublk request beyond the volume", t, -ZL_ERR_RANGE);
			ublk_tag_commit(t, -EIO);
			return;
		}
		if (t->op != UBLK_IO_OP_READ)
			ublk_count(&th->write_gen);
		break;
	default:
		ublk_tag_commit(t, -EOPNOTSUPP);
		return;
	}
	/* User copy: a READ or WRITE needs a buffer; it waits behind the
	 * requests already waiting for one. */
	if (u->user_copy && t->op <= UBLK_IO_OP_WRITE && (th->bwait_head || !th->pool_nfree)) {
		if (!th->pool_nfree)
			ublk_count(&th->buf_waits);
		ublk_list_add(&th->bwait_head, &th->bwait_tail, t, false);
		return;
	}
	ublk_tag_start(th, t);
}

/* Runs t's request: user copy: takes a buffer from the pool (there is
 * one, or we are stopping) and, for a WRITE, first copies the request's
 * data into it. */
static void ublk_tag_start(struct ublk_thread *th, struct ublk_tag *t)
{
	if (th->u->user_copy && t->op <= UBLK_IO_OP_WRITE) {
		if (!th->pool_nfree || !ublk_vol(th)) {
			ublk_tag_commit(t, -EIO);
			return;
		}
		t->buf = th->pool_free[--th->pool_nfree];
		if (t->op == UBLK_IO_OP_WRITE) {
			ublk_tag_copy(t);
			return;
		}
	}
	if (ublk_tag_submit(th, t) == -ZL_ERR_BUSY)
		ublk_list_add(&th->retry_head, &th->retry_tail, t, false);
}

/* User copy: moves t's data between its buffer and the request: a
 * WRITE's data into the buffer, a READ's from it; ublk_tag_copied takes
 * the result. Up to UBLK_SYNC_COPY_MAX bytes with pread/pwrite on the loop
 * thread: a copy between our locked buffer and the request's pages, which
 * the kernel holds for us, never waits for a device, and costs less than
 * the trip to io_uring's workers (/dev/ublkcN has no FMODE_NOWAIT, so
 * io_uring would punt it there). Larger ones as an io_uring operation on
 * the queue's ring, run on those workers: the loop goes on meanwhile. */
static void ublk_tag_copy(struct ublk_tag *t)
{
	struct ublk_queue_srv *q = t->q;
	struct attach_ublk *u = q->u;
	uint64_t pos = UBLKSRV_IO_BUF_OFFSET + ((uint64_t)q->q_id << UBLK_QID_OFF) +
		       ((uint64_t)t->tag << UBLK_TAG_OFF);
	struct io_uring_sqe *sqe;
	ssize_t n;

	if (t->len <= UBLK_SYNC_COPY_MAX) {
		if (t->op == UBLK_IO_OP_WRITE)
			n = pread(u->cdev_fd, t->buf->p, t->len, (off_t)pos);
		else
			n = pwrite(u->cdev_fd, t->buf->p, t->len, (off_t)pos);
		ublk_count(&q->th->sync_copies);
		ublk_tag_copied(q->th, t, n < 0 ? -errno : (int)n);
		return;
	}
	sqe = io_uring_get_sqe(&q->ring);
	if (!sqe) { /* never: one operation per tag and as many SQEs as tags */
		ZL_LOG_ERR(ATTACH_LOG, "ublk queue ring full: dev=%d queue=%u tag=%u", u->dev_id,
			   q->q_id, t->tag);
		ublk_tag_commit(t, -EIO);
		return;
	}
	memset(sqe, 0, 2 * sizeof(*sqe));
	if (t->op == UBLK_IO_OP_WRITE)
		io_uring_prep_read(sqe, u->cdev_fd, t->buf->p, t->len, pos);
	else
		io_uring_prep_write(sqe, u->cdev_fd, t->buf->p, t->len, pos);
	sqe->user_data = UBLK_UD_COPY | t->tag;
	t->state = UBLK_TAG_COPY;
	ublk_queue_kick(q);
}

/* The data copy of t ended (res: bytes copied or -errno): a WRITE goes to
 * the volume, a READ is answered. */
static void ublk_tag_copied(struct ublk_thread *th, struct ublk_tag *t, int res)
{
	t->state = UBLK_TAG_IO;
	if (res != (int)t->len) {
		ublk_io_err(th,
			    t->op == UBLK_IO_OP_WRITE ? "ublk copy from the request"
						      : "ublk copy to the request",
			    t, res < 0 ? res : -ZL_ERR_IO);
		ublk_tag_commit(t, -EIO);
		return;
	}
	if (t->op == UBLK_IO_OP_READ) {
		ublk_tag_commit(t, (int)t->len);
		return;
	}
	if (ublk_tag_submit(th, t) == -ZL_ERR_BUSY)
		ublk_list_add(&th->retry_head, &th->retry_tail, t, false);
}

static void ublk_ev_cb(void *arg, uint32_t events)
{
	struct ublk_queue_srv *q = arg;
	struct attach_ublk *u = q->u;
	struct io_uring_cqe *cqe;
	unsigned int head, seen = 0;
	uint64_t n;

	if (read(q->ev_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		ZL_LOG_WARN(ATTACH_LOG, "ublk queue %u eventfd: err=%s", q->q_id, strerror(errno));
	io_uring_for_each_cqe(&q->ring, head, cqe)
	{
		struct ublk_tag *t;

		seen++;
		if ((cqe->user_data & ~UBLK_UD_COPY) >= u->depth)
			continue;
		t = &q->tags[cqe->user_data & ~UBLK_UD_COPY];
		if (cqe->user_data & UBLK_UD_COPY) {
			ublk_tag_copied(q->th, t, cqe->res);
		} else if (cqe->res == UBLK_IO_RES_OK) {
			ublk_tag_request(q->th, t);
		} else {
			/* UBLK_IO_RES_ABORT: the device is stopping; anything
			 * else: the command was refused. No command is left
			 * on this tag either way. */
			if (cqe->res != UBLK_IO_RES_ABORT && zl_ratelimit_ok(&q->th->err_rl, 5))
				ZL_LOG_ERR(ATTACH_LOG,
					   "ublk command failed: dev=%d queue=%u tag=%u err=%s",
					   u->dev_id, q->q_id, t->tag, strerror(-cqe->res));
			t->state = UBLK_TAG_DEAD;
		}
	}
	io_uring_cq_advance(&q->ring, seen);
	/* Buffers the commits freed go to the requests waiting for one. */
	ublk_retry_waiting(q->th);
}

/* An io_uring with 128-byte SQEs (room for the commands) whose completions
 * wake the attach loop through an eventfd that runs cb. 0 or -errno. */
static int ublk_ring_init(struct zl_loop *loop, const char *what, unsigned int depth,
			  struct io_uring *ring, bool *ring_ok, int *ev_fd,
			  struct zl_loop_handle *h, zl_loop_fd_cb cb, void *arg)
{
	struct io_uring_params p = {.flags = IORING_SETUP_SQE128};
	int rc;

	rc = io_uring_queue_init_params(depth, ring, &p);
	if (rc) {
		ZL_LOG_ERR(ATTACH_LOG, "cannot create the ublk %s ring: %s", what, strerror(-rc));
		return rc;
	}
	*ring_ok = true;
	*ev_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (*ev_fd < 0)
		return -errno;
	rc = io_uring_register_eventfd(ring, *ev_fd);
	if (rc == 0)
		rc = zl_loop_add(loop, h, *ev_fd, EPOLLIN, cb, arg);
	return rc;
}

static int ublk_ctrl_open(struct attach_ublk *u)
{
	uint64_t features = 0;
	int rc, res;

	u->ctrl_fd = open(UBLK_CTRL_DEV, O_RDWR | O_CLOEXEC);
	if (u->ctrl_fd < 0) {
		rc = -errno;
		ZL_LOG_ERR(ATTACH_LOG, "cannot open %s: %s (is the ublk_drv module loaded?)",
			   UBLK_CTRL_DEV, strerror(errno));
		return rc;
	}
	rc = ublk_ring_init(u->a->loop, "control", UBLK_CTRL_DEPTH, &u->ctrl_ring, &u->ctrl_ring_ok,
			    &u->ctrl_ev_fd, &u->ctrl_ev_h, ublk_ctrl_ev_cb, u);
	if (rc)
		return rc;
	/* GET_FEATURES exists only ioctl-encoded (Linux >= 6.5). */
	u->ioctl_encode = true;
	res = ublk_ctrl_run(u, UBLK_CMD_GET_FEATURES, (uint32_t)-1, &features, sizeof(features), 0,
			    UBLK_CTRL_WAIT_MS);
	if (res == 0 && (features & UBLK_F_CMD_IOCTL_ENCODE)) {
		u->features = features;
	} else {
		/* Linux 6.0-6.4: legacy opcodes, the features of the 6.1 uapi. */
		u->ioctl_encode = false;
		u->features = UBLK_F_URING_CMD_COMP_IN_TASK | UBLK_F_NEED_GET_DATA |
			      UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
	}
	ZL_LOG_INFO(ATTACH_LOG, "ublk kernel features: features=0x%llx ioctl_encode=%d",
		    (unsigned long long)u->features, u->ioctl_encode);
	return 0;
}

/* Maps queue q's descriptors, creates its ring with its eventfd on the
 * loop, allocates its tags (once) and issues a FETCH_REQ for every tag. */
static int ublk_queue_init(struct attach_ublk *u, struct ublk_queue_srv *q)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	/* The kernel places queue q's descriptors at q times the room of the
	 * deepest queue (UBLK_MAX_QUEUE_DEPTH), whatever the device's depth. */
	size_t stride = (UBLK_MAX_QUEUE_DEPTH * sizeof(struct ublksrv_io_desc) + pg - 1) / pg * pg;
	int rc;

	q->descs_len = (u->depth * sizeof(struct ublksrv_io_desc) + pg - 1) / pg * pg;
	q->descs = mmap(NULL, q->descs_len, PROT_READ, MAP_SHARED | MAP_POPULATE, u->cdev_fd,
			(off_t)(UBLKSRV_CMD_BUF_OFFSET + q->q_id * stride));
	if (q->descs == MAP_FAILED) {
		rc = -errno;
		q->descs = NULL;
		ZL_LOG_ERR(ATTACH_LOG, "cannot map the descriptors of queue %u of /dev/ublkc%d: %s",
			   q->q_id, u->dev_id, strerror(errno));
		return rc;
	}
	rc = ublk_ring_init(q->th->loop, "queue", u->depth, &q->ring, &q->ring_ok, &q->ev_fd,
			    &q->ev_h, ublk_ev_cb, q);
	if (rc)
		return rc;
	if (!q->tags) {
		q->tags = calloc(u->depth, sizeof(*q->tags));
		if (!q->tags)
			return -ENOMEM;
		for (unsigned int i = 0; i < u->depth; i++) {
			struct ublk_tag *t = &q->tags[i];

			t->q = q;
			t->tag = (uint16_t)i;
			if (!u->user_copy)
				t->buf = &q->th->bufs[q->q_id / u->nr_threads * u->depth + i];
		}
	}
	for (unsigned int i = 0; i < u->depth; i++)
		ublk_tag_queue_cmd(&q->tags[i], UBLK_IO_FETCH_REQ, 0);
	rc = io_uring_submit(&q->ring);
	if (rc != (int)u->depth) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk FETCH_REQ submit: dev=%d queue=%u submitted=%d of %u",
			   u->dev_id, q->q_id, rc, u->depth);
		return rc < 0 ? rc : -EIO;
	}
	return 0;
}

/* Allocates th's request buffers, once: user copy: its share of the pool
 * (UBLK_POOL_BUFS split evenly over the threads), all free; tag copy: one
 * per tag of its queues. From its volume client's transport pool
 * (registered memory on RDMA: a read lands in it and a write leaves from
 * it with no bounce copy), plain memory if it has none. */
static int ublk_bufs_alloc(struct ublk_thread *th)
{
	struct attach_ublk *u = th->u;
	size_t len = u->info.max_io_buf_bytes;
	unsigned int nq = (u->nr_queues - th->idx + u->nr_threads - 1) / u->nr_threads;
	unsigned int n = u->user_copy ? UBLK_POOL_BUFS / u->nr_threads : nq * u->depth;

	th->bufs = calloc(n, sizeof(*th->bufs));
	th->pool_free = calloc(n, sizeof(*th->pool_free));
	if (!th->bufs || !th->pool_free)
		return -ENOMEM;
	for (; th->nr_bufs < n; th->nr_bufs++) {
		struct ublk_buf *b = &th->bufs[th->nr_bufs];

		b->p = zl_vol_buf_alloc(th->vol, len);
		b->pooled = b->p != NULL;
		if (!b->p && posix_memalign(&b->p, 4096, len))
			return -ENOMEM;
		if (u->user_copy)
			th->pool_free[th->pool_nfree++] = b;
	}
	return 0;
}

/* Sets up th's buffers and queues (q % nr_threads == idx), on th: the
 * kernel binds each queue to the task that issued its FETCH_REQs, and one
 * task may serve several queues. */
static int ublk_thread_queues(struct ublk_thread *th)
{
	struct attach_ublk *u = th->u;
	int rc = ublk_bufs_alloc(th);

	for (unsigned int i = th->idx; rc == 0 && i < u->nr_queues; i += u->nr_threads)
		rc = ublk_queue_init(u, &u->queues[i]);
	return rc;
}

/* Tears down th's queues and buffers, on th (or once it ended): pool
 * buffers go back through th's handle, or with its client when closed. */
static void ublk_thread_queues_fini(struct ublk_thread *th)
{
	struct attach_ublk *u = th->u;
	struct zl_vol *v = th->idx ? th->vol : u->a->vol;

	for (unsigned int i = th->idx; u->queues && i < u->nr_queues; i += u->nr_threads) {
		struct ublk_queue_srv *q = &u->queues[i];

		if (q->ring_ok) {
			zl_loop_del(th->loop, &q->ev_h);
			io_uring_queue_exit(&q->ring);
			q->ring_ok = false;
		}
		if (q->descs)
			munmap(q->descs, q->descs_len);
		q->descs = NULL;
		if (q->ev_fd >= 0)
			close(q->ev_fd);
		q->ev_fd = -1;
		if (th->loop)
			zl_loop_defer_cancel(th->loop, &q->submit_defer);
	}
	for (unsigned int i = 0; i < th->nr_bufs; i++) {
		struct ublk_buf *b = &th->bufs[i];

		if (!b->pooled)
			free(b->p);
		else if (v)
			zl_vol_buf_free(v, b->p);
	}
	free(th->bufs);
	free(th->pool_free);
	th->bufs = NULL;
	th->pool_free = NULL;
	th->nr_bufs = th->pool_nfree = 0;
}

/* th's loop: what other threads read of th (a resize waits for the size,
 * the ctl status sums the stats), every UBLK_PUB_MS. */
static void ublk_thread_publish(void *arg)
{
	struct ublk_thread *th = arg;
	struct zl_vol *v = ublk_vol(th);

	atomic_store(&th->pub_size, v ? zl_vol_size(v) : 0);
	atomic_store(&th->pub_fenced, v ? zl_vol_fenced(v) : true);
	if (v) {
		pthread_mutex_lock(&th->stats_lock);
		zl_vol_get_stats(v, &th->stats);
		pthread_mutex_unlock(&th->stats_lock);
	}
	zl_timer_start(th->loop, &th->pub_timer, UBLK_PUB_MS, 0, ublk_thread_publish, th);
}

/* th's loop: the main thread asks (attach_abort) to fail what is in flight
 * and every later request: the handle closes (its I/O completes with an
 * error), then the answer. */
static void ublk_thread_cmd_cb(void *arg)
{
	struct ublk_thread *th = arg;
	struct zl_vol *v = th->vol;

	if (!atomic_load(&th->abort_req) || th->aborting)
		return;
	th->aborting = true;
	th->vol = NULL;
	zl_vol_close(v);
	ublk_retry_waiting(th);
	atomic_store(&th->pub_size, 0);
	atomic_store(&th->pub_fenced, true);
	atomic_store(&th->aborted, true);
}

/* A queue thread (idx > 0): its loop, client and volume handle (a follower
 * of a->vol's snapshot switch), PR_SET_IO_FLUSHER (per task), its queues;
 * serves until attach_ublk_stop stops its loop, then tears down here. A
 * loop error stops the attach loop too (the process stops as on its own
 * loop's error). */
static void *ublk_thread_main(void *arg)
{
	struct ublk_thread *th = arg;
	struct attach *a = th->u->a;
	char name[16];
	int rc;

	/* Named for ps and /proc (the VM test finds it by its name). */
	snprintf(name, sizeof(name), "zl-ublk-t%u", th->idx);
	pthread_setname_np(pthread_self(), name);
	attach_flusher_enter(a);
	rc = zl_loop_create(&th->loop);
	if (rc == 0)
		rc = zl_client_create(th->loop, a->etcd, &a->copts, &th->client);
	if (rc == 0)
		rc = zl_vol_open(th->client, a->vol_id, &th->vol);
	if (rc == 0)
		rc = zl_vol_snap_follow(th->vol, a->vol);
	if (rc == 0)
		rc = zl_vol_qos_join(th->vol, th->u->qos_share);
	if (rc == 0)
		rc = zl_notify_init(&th->cmd, th->loop, ublk_thread_cmd_cb, th);
	if (rc == 0)
		rc = ublk_thread_queues(th);
	if (rc)
		ZL_LOG_ERR(ATTACH_LOG, "ublk queue thread %u cannot start: vol=%s err=%s", th->idx,
			   a->vol_id, zl_strerror(rc));
	else
		ublk_thread_publish(th);
	atomic_store(&th->state, rc);
	zl_loop_wake(a->loop);
	if (rc == 0) {
		rc = zl_loop_run(th->loop);
		if (rc < 0) {
			ZL_LOG_ERR(ATTACH_LOG, "ublk queue thread %u: loop failed: vol=%s err=%s",
				   th->idx, a->vol_id, strerror(-rc));
			atomic_store(&th->loop_rc, rc);
			zl_loop_stop(a->loop);
		}
	}
	if (th->loop)
		zl_timer_stop(th->loop, &th->pub_timer);
	/* The handle first: its I/O completes (committed on rings still
	 * there), and it leaves a->vol's followers before a->vol closes. */
	zl_vol_close(th->vol);
	th->vol = NULL;
	ublk_thread_queues_fini(th);
	zl_notify_fini(&th->cmd);
	zl_client_destroy(th->client);
	zl_loop_destroy(th->loop);
	th->loop = NULL;
	return NULL;
}

/* Opens /dev/ublkcN and sets up every queue of the device (u->info) on
 * nr_threads threads: thread 0's here (the attach loop), the others' on
 * their own threads; waits until every thread has issued its FETCH_REQs
 * (or failed). */
static int ublk_queues_setup(struct attach_ublk *u, unsigned int nr_threads)
{
	struct attach *a = u->a;
	char path[64];
	int rc;

	u->depth = u->info.queue_depth;
	u->user_copy = (u->info.flags & UBLK_F_USER_COPY) != 0;
	snprintf(path, sizeof(path), "/dev/ublkc%d", u->dev_id);
	/* udev may not have made the node yet (or there is no udev). */
	for (int i = 0; i < 100; i++) {
		u->cdev_fd = open(path, O_RDWR | O_CLOEXEC);
		if (u->cdev_fd >= 0 || errno != ENOENT)
			break;
		usleep(20000);
	}
	if (u->cdev_fd < 0) {
		rc = -errno;
		ZL_LOG_ERR(ATTACH_LOG, "cannot open %s: %s", path, strerror(errno));
		return rc;
	}
	u->queues = calloc(u->info.nr_hw_queues, sizeof(*u->queues));
	/* One thread per queue by default, never more (a recovered device
	 * has its own queues). */
	if (!nr_threads)
		nr_threads = u->info.nr_hw_queues;
	nr_threads = ZL_MAX(1u, ZL_MIN(nr_threads, (unsigned int)u->info.nr_hw_queues));
	u->threads = calloc(nr_threads, sizeof(*u->threads));
	if (!u->queues || !u->threads)
		return -ENOMEM;
	u->nr_threads = nr_threads;
	u->nr_queues = u->info.nr_hw_queues;
	for (unsigned int i = 0; i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		th->u = u;
		th->idx = i;
		pthread_mutex_init(&th->stats_lock, NULL);
		atomic_init(&th->state, 1);
	}
	u->threads[0].loop = a->loop;
	u->threads[0].client = a->client;
	u->threads[0].vol = a->vol;
	/* One set of QoS buckets for every thread's handle (the limits are
	 * the volume's, not a handle's). */
	if (u->nr_threads > 1) {
		rc = zl_vol_qos_share_create(&u->qos_share);
		if (rc == 0)
			rc = zl_vol_qos_join(a->vol, u->qos_share);
		if (rc)
			return rc;
	}
	for (unsigned int i = 0; i < u->nr_queues; i++) {
		struct ublk_queue_srv *q = &u->queues[i];

		q->u = u;
		q->th = &u->threads[i % u->nr_threads];
		q->q_id = (uint16_t)i;
		q->ev_fd = -1;
		q->ev_h.fd = -1;
	}
	for (unsigned int i = 1; i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		rc = pthread_create(&th->tid, NULL, ublk_thread_main, th);
		if (rc) {
			ZL_LOG_ERR(ATTACH_LOG, "cannot create ublk queue thread %u: %s", i,
				   strerror(rc));
			return -rc;
		}
		th->created = true;
	}
	rc = ublk_thread_queues(&u->threads[0]);
	/* The others set up meanwhile (each within the etcd and volume
	 * client's own timeouts). */
	for (unsigned int i = 1; i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];
		int st;

		while ((st = atomic_load(&th->state)) == 1)
			zl_loop_run_once(a->loop, 20);
		if (rc == 0)
			rc = st;
	}
	return rc;
}

static int ublk_add(struct attach_ublk *u, unsigned int nr_queues, enum attach_ublk_copy copy)
{
	struct attach *a = u->a;
	uint64_t want = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
	bool user = (u->features & UBLK_F_USER_COPY) && copy != ATTACH_UBLK_COPY_TAG;
	struct ublk_params prm;
	int rc;

	if (copy == ATTACH_UBLK_COPY_USER && !user) {
		ZL_LOG_ERR(ATTACH_LOG,
			   "--ublk-copy user: this kernel's ublk has no UBLK_F_USER_COPY "
			   "(Linux >= 6.5; features=0x%llx): use --ublk-copy auto or tag",
			   (unsigned long long)u->features);
		return -EOPNOTSUPP;
	}
	memset(&u->info, 0, sizeof(u->info));
	u->info.nr_hw_queues = (uint16_t)nr_queues;
	/* User copy: buffers are not the tags' (see UBLK_POOL_BUFS). */
	u->info.queue_depth =
	    (uint16_t)(user ? UBLK_DEPTH : ZL_MAX(UBLK_DEPTH / nr_queues, UBLK_DEPTH_MIN));
	u->info.max_io_buf_bytes = UBLK_MAX_IO;
	u->info.dev_id = (uint32_t)-1;
	u->info.flags = (want & u->features) | (user ? UBLK_F_USER_COPY : 0);
	rc = ublk_ctrl_run(u, UBLK_CMD_ADD_DEV, (uint32_t)-1, &u->info, sizeof(u->info), 0,
			   UBLK_CTRL_WAIT_MS);
	if (rc) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk ADD_DEV failed: vol=%s err=%s", a->vol_id,
			   strerror(-rc));
		return rc;
	}
	u->dev_id = (int)u->info.dev_id;
	u->added = true;
	if (user && !(u->info.flags & UBLK_F_USER_COPY)) {
		ZL_LOG_ERR(ATTACH_LOG,
			   "ublk device %d was added without the UBLK_F_USER_COPY asked for "
			   "(flags=0x%llx): retry with --ublk-copy tag",
			   u->dev_id, (unsigned long long)u->info.flags);
		return -EOPNOTSUPP;
	}
	/* The kernel gives at most one queue per possible CPU. */
	if (u->info.nr_hw_queues != nr_queues)
		ZL_LOG_WARN(ATTACH_LOG, "ublk device %d has %u queues, %u asked for", u->dev_id,
			    u->info.nr_hw_queues, nr_queues);
	if (!(u->info.flags & UBLK_F_USER_RECOVERY))
		ZL_LOG_WARN(ATTACH_LOG,
			    "ublk user recovery not offered by this kernel: dev=%d: the device "
			    "will not survive this process",
			    u->dev_id);
	memset(&prm, 0, sizeof(prm));
	prm.len = sizeof(prm);
	prm.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
	prm.basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
	prm.basic.logical_bs_shift = 9;
	prm.basic.physical_bs_shift = 12;
	prm.basic.io_min_shift = 12;
	prm.basic.io_opt_shift = 12;
	prm.basic.max_sectors = u->info.max_io_buf_bytes >> 9;
	prm.basic.dev_sectors = a->size >> 9;
	prm.discard.discard_granularity = 4096;
	prm.discard.max_discard_sectors = (1u << 30) >> 9;
	prm.discard.max_write_zeroes_sectors = (1u << 30) >> 9;
	prm.discard.max_discard_segments = 1;
	rc = ublk_ctrl_run(u, UBLK_CMD_SET_PARAMS, (uint32_t)u->dev_id, &prm, sizeof(prm), 0,
			   UBLK_CTRL_WAIT_MS);
	if (rc)
		ZL_LOG_ERR(ATTACH_LOG, "ublk SET_PARAMS failed: dev=%d err=%s", u->dev_id,
			   strerror(-rc));
	return rc;
}

/* Takes over a device whose server died: waits until the kernel has
 * quiesced it, checks it is a device of our size. */
static int ublk_recover_begin(struct attach_ublk *u, int dev_id)
{
	struct attach *a = u->a;
	struct ublk_params prm;
	uint64_t end = zl_now_ms() + UBLK_RECOVER_WAIT_MS;
	int rc;

	u->dev_id = dev_id;
	rc = ublk_ctrl_run(u, UBLK_CMD_GET_DEV_INFO, (uint32_t)dev_id, &u->info, sizeof(u->info), 0,
			   UBLK_CTRL_WAIT_MS);
	if (rc) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk device %d: GET_DEV_INFO failed: %s", dev_id,
			   strerror(-rc));
		return rc;
	}
	/* Every queue of the device is taken over, as many as it has. */
	if (!(u->info.flags & UBLK_F_USER_RECOVERY) || u->info.nr_hw_queues < 1 ||
	    u->info.nr_hw_queues > ATTACH_UBLK_QUEUES_MAX || u->info.queue_depth < 1 ||
	    u->info.queue_depth > UBLK_DEPTH || u->info.max_io_buf_bytes > UBLK_MAX_IO) {
		ZL_LOG_ERR(ATTACH_LOG,
			   "ublk device %d cannot be recovered by us: flags=0x%llx queues=%u "
			   "depth=%u max_io=%u (not a device of zipline-node attach)",
			   dev_id, (unsigned long long)u->info.flags, u->info.nr_hw_queues,
			   u->info.queue_depth, u->info.max_io_buf_bytes);
		return -EINVAL;
	}
	memset(&prm, 0, sizeof(prm));
	prm.len = sizeof(prm);
	rc = ublk_ctrl_run(u, UBLK_CMD_GET_PARAMS, (uint32_t)dev_id, &prm, sizeof(prm), 0,
			   UBLK_CTRL_WAIT_MS);
	if (rc == 0 && prm.basic.dev_sectors != a->size >> 9) {
		ZL_LOG_ERR(ATTACH_LOG,
			   "ublk device %d has %llu sectors, volume %s has %llu: not its device",
			   dev_id, (unsigned long long)prm.basic.dev_sectors, a->vol_id,
			   (unsigned long long)(a->size >> 9));
		return -EINVAL;
	}
	for (;;) {
		rc = ublk_ctrl_run(u, UBLK_CMD_START_USER_RECOVERY, (uint32_t)dev_id, NULL, 0, 0,
				   UBLK_CTRL_WAIT_MS);
		if (rc != -EBUSY || zl_now_ms() >= end || a->stopping)
			break;
		/* The old server's /dev/ublkcN is still open or the kernel has
		 * not quiesced the device yet. */
		for (uint64_t t = zl_now_ms() + 200; zl_now_ms() < t && !a->stopping;)
			zl_loop_run_once(a->loop, 50);
	}
	if (rc)
		ZL_LOG_ERR(ATTACH_LOG, "ublk device %d: START_USER_RECOVERY failed: %s%s", dev_id,
			   strerror(-rc),
			   rc == -EBUSY ? " (is its old server still running?)" : "");
	u->recovered = rc == 0;
	return rc;
}

int attach_ublk_start(struct attach *a, int recover_id, unsigned int nr_queues,
		      unsigned int nr_threads, enum attach_ublk_copy copy)
{
	struct attach_ublk *u;
	int rc;

	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->a = a;
	u->ctrl_fd = u->cdev_fd = u->ctrl_ev_fd = -1;
	u->ctrl_ev_h.fd = -1;
	u->dev_id = -1;
	a->ublk = u;
	/* Before the queues are mapped: MCL_FUTURE locks them too. */
	attach_flusher_enter(a);
	rc = ublk_ctrl_open(u);
	if (rc)
		return rc;
	rc = recover_id >= 0 ? ublk_recover_begin(u, recover_id) : ublk_add(u, nr_queues, copy);
	if (rc)
		return rc;
	rc = ublk_queues_setup(u, nr_threads);
	if (rc)
		return rc;
	/* Both wait in the kernel until every tag of every queue has fetched;
	 * START_DEV then reads the partition table through us. */
	if (u->recovered)
		rc = ublk_ctrl_run(u, UBLK_CMD_END_USER_RECOVERY, (uint32_t)u->dev_id, NULL, 0,
				   (uint64_t)getpid(), UBLK_CTRL_WAIT_MS * 3);
	else
		rc = ublk_ctrl_run(u, UBLK_CMD_START_DEV, (uint32_t)u->dev_id, NULL, 0,
				   (uint64_t)getpid(), UBLK_CTRL_WAIT_MS * 3);
	if (rc) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk %s failed: dev=%d err=%s",
			   u->recovered ? "END_USER_RECOVERY" : "START_DEV", u->dev_id,
			   strerror(-rc));
		return rc;
	}
	u->started = true;
	snprintf(a->ready_extra, sizeof(a->ready_extra),
		 " dev=/dev/ublkb%d ublk_id=%d queues=%u depth=%u copy=%s threads=%u", u->dev_id,
		 u->dev_id, u->nr_queues, u->depth, u->user_copy ? "user" : "tag", u->nr_threads);
	{
		unsigned int nbufs = 0;
		bool pooled = true;

		for (unsigned int i = 0; i < u->nr_threads; i++) {
			const struct ublk_thread *th = &u->threads[i];

			nbufs += th->nr_bufs;
			pooled = pooled && th->nr_bufs && th->bufs[th->nr_bufs - 1].pooled;
		}
		ZL_LOG_INFO(ATTACH_LOG,
			    "ublk device %s: vol=%s dev=/dev/ublkb%d queues=%u depth=%u "
			    "max_io=%u flags=0x%llx copy=%s buffers=%u from the %s threads=%u",
			    u->recovered ? "recovered" : "started", a->vol_id, u->dev_id,
			    u->nr_queues, u->depth, u->info.max_io_buf_bytes,
			    (unsigned long long)u->info.flags, u->user_copy ? "user" : "tag", nbufs,
			    pooled ? "pool" : "heap", u->nr_threads);
	}
	return 0;
}

int attach_ublk_resize(struct attach *a, uint64_t size, char *msg, size_t len)
{
	struct attach_ublk *u = a->ublk;
	int rc;

	if (!(u->features & UBLK_F_UPDATE_SIZE)) {
		snprintf(msg, len,
			 "this kernel's ublk cannot grow a live device (UBLK_U_CMD_UPDATE_SIZE "
			 "needs Linux >= 6.16; features=0x%llx): unstage and stage the volume "
			 "again to use the new size",
			 (unsigned long long)u->features);
		return -EOPNOTSUPP;
	}
	if (!u->started || u->stop_sent) {
		snprintf(msg, len,
			 "the attach process of /dev/ublkb%d is stopping: expand the volume "
			 "again once it is staged",
			 u->dev_id);
		return -ZL_ERR_CONN;
	}
	if (size % 512) {
		snprintf(msg, len, "the new size %llu is not a multiple of 512 bytes",
			 (unsigned long long)size);
		return -ZL_ERR_INVAL;
	}
	if (u->ctrl_busy) {
		snprintf(msg, len,
			 "another ublk control command on /dev/ublkb%d is running: retry the "
			 "expansion",
			 u->dev_id);
		return -ZL_ERR_BUSY;
	}
	rc = ublk_ctrl_submit(u, UBLK_CMD_UPDATE_SIZE, (uint32_t)u->dev_id, NULL, 0, size >> 9);
	if (rc) {
		snprintf(msg, len, "ublk UPDATE_SIZE of /dev/ublkb%d was not sent: %s", u->dev_id,
			 strerror(-rc));
		return rc;
	}
	u->ctrl_busy = true;
	u->resize_sent = true;
	return 0;
}

void attach_ublk_status(const struct attach *a, char *buf, size_t len)
{
	const struct attach_ublk *u = a->ublk;
	size_t l = 0;
	uint64_t waits = 0, sync = 0;

	buf[0] = '\0';
	if (!u || !u->started)
		return;
	for (unsigned int i = 0; i < u->nr_threads; i++) {
		waits += atomic_load(&u->threads[i].buf_waits);
		sync += atomic_load(&u->threads[i].sync_copies);
	}
	for (unsigned int i = 0; i < u->nr_queues && l < len; i++)
		l += (size_t)snprintf(buf + l, len - l, "%s%llu", i ? "," : " ublk_reqs=",
				      (unsigned long long)atomic_load(&u->queues[i].reqs));
	if (l < len)
		snprintf(buf + l, len - l,
			 " ublk_copy=%s ublk_buf_waits=%llu ublk_sync_copies=%llu ublk_threads=%u",
			 u->user_copy ? "user" : "tag", (unsigned long long)waits,
			 (unsigned long long)sync, u->nr_threads);
}

void attach_ublk_stats(const struct attach *a, struct zl_vol_stats *vs, uint64_t *errors,
		       bool *fenced)
{
	const struct attach_ublk *u = a->ublk;

	for (unsigned int i = 1; u && i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		*errors += atomic_load(&th->io_errors);
		*fenced = *fenced || atomic_load(&th->pub_fenced);
		pthread_mutex_lock(&th->stats_lock);
		vs->reads += th->stats.reads;
		vs->writes += th->stats.writes;
		vs->read_bytes += th->stats.read_bytes;
		vs->write_bytes += th->stats.write_bytes;
		vs->retries += th->stats.retries;
		vs->failovers += th->stats.failovers;
		vs->throttled += th->stats.throttled;
		for (int k = 0; k < 3; k++) {
			for (int b = 0; b <= ZL_METRICS_HIST_N; b++)
				vs->lat[k].b[b] += th->stats.lat[k].b[b];
			vs->lat[k].count += th->stats.lat[k].count;
			vs->lat[k].sum_ns += th->stats.lat[k].sum_ns;
		}
		pthread_mutex_unlock(&th->stats_lock);
	}
	if (u)
		*errors += atomic_load(&u->threads[0].io_errors);
}

bool attach_ublk_busy(const struct attach *a)
{
	const struct attach_ublk *u = a->ublk;

	for (unsigned int i = 1; u && i < u->nr_threads; i++)
		if (atomic_load(&u->threads[i].busy))
			return true;
	return false;
}

uint64_t attach_ublk_written(const struct attach *a)
{
	return a->ublk && a->ublk->threads ? ublk_write_sum(a->ublk) : 0;
}

bool attach_ublk_size_ok(const struct attach *a, uint64_t size)
{
	const struct attach_ublk *u = a->ublk;

	for (unsigned int i = 1; u && i < u->nr_threads; i++)
		if (atomic_load(&u->threads[i].pub_size) < size)
			return false;
	return true;
}

int attach_ublk_thread_error(const struct attach *a)
{
	const struct attach_ublk *u = a->ublk;

	for (unsigned int i = 1; u && i < u->nr_threads; i++)
		if (atomic_load(&u->threads[i].loop_rc))
			return atomic_load(&u->threads[i].loop_rc);
	return 0;
}

void attach_ublk_abort(struct attach *a)
{
	struct attach_ublk *u = a->ublk;
	uint64_t end = zl_now_ms() + UBLK_CTRL_WAIT_MS;

	for (unsigned int i = 1; u && i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		if (atomic_load(&th->state) != 0)
			continue;
		atomic_store(&th->abort_req, true);
		zl_notify_post(&th->cmd);
	}
	/* Their handles close before a->vol does (a->vol leads them). */
	for (unsigned int i = 1; u && i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		while (atomic_load(&th->state) == 0 && !atomic_load(&th->aborted) &&
		       zl_now_ms() < end)
			usleep(1000);
	}
}

void attach_ublk_stop_begin(struct attach *a)
{
	struct attach_ublk *u = a->ublk;
	int rc;

	if (!u || !u->started || u->stop_sent || u->ctrl_busy)
		return;
	/* The kernel writes back and drains the device while STOP_DEV runs;
	 * we keep serving. The stop sequence waits: STOP_DEV holds a slot. */
	rc = ublk_ctrl_submit(u, UBLK_CMD_STOP_DEV, (uint32_t)u->dev_id, NULL, 0, 0);
	if (rc) {
		ZL_LOG_ERR(ATTACH_LOG, "ublk STOP_DEV failed: dev=%d err=%s", u->dev_id,
			   strerror(-rc));
		return;
	}
	u->stop_sent = true;
	u->ctrl_busy = true;
	u->stop_holds_slot = true;
	a->busy_slots++;
}

void attach_ublk_stop(struct attach *a)
{
	struct attach_ublk *u = a->ublk;
	uint64_t end;
	int rc;

	if (!u)
		return;
	/* An UPDATE_SIZE in flight finishes first (the kernel answers it at
	 * once): STOP_DEV waits for the control ring. */
	for (end = zl_now_ms() + UBLK_CTRL_WAIT_MS; u->resize_sent && zl_now_ms() < end;)
		if (zl_loop_run_once(a->loop, 20) < 0)
			break;
	if (u->started && !u->stop_sent)
		attach_ublk_stop_begin(a);
	/* The volume may be closed by now: what still comes fails (EIO). */
	for (end = zl_now_ms() + 10000; u->stop_sent && u->ctrl_busy && zl_now_ms() < end;)
		if (zl_loop_run_once(a->loop, 20) < 0)
			break;
	/* The queue threads end (each tears its queues down and closes its
	 * handle), then thread 0's queues go. */
	for (unsigned int i = 1; i < u->nr_threads; i++) {
		struct ublk_thread *th = &u->threads[i];

		if (!th->created)
			continue;
		while (atomic_load(&th->state) == 1) /* still setting up */
			usleep(1000);
		if (atomic_load(&th->state) == 0)
			zl_loop_stop(th->loop);
		pthread_join(th->tid, NULL);
		th->created = false;
	}
	if (u->threads)
		ublk_thread_queues_fini(&u->threads[0]);
	if (u->cdev_fd >= 0)
		close(u->cdev_fd);
	/* A stopped device goes, and one we added whose start failed; one we
	 * were taking over stays for the next server (its mounts wait). */
	if (u->dev_id >= 0 && !u->ctrl_busy && (u->stop_sent || (u->added && !u->started))) {
		rc = ublk_ctrl_run(u, UBLK_CMD_DEL_DEV, (uint32_t)u->dev_id, NULL, 0, 0,
				   UBLK_CTRL_WAIT_MS);
		if (rc)
			ZL_LOG_ERR(ATTACH_LOG, "ublk DEL_DEV failed: dev=%d err=%s", u->dev_id,
				   strerror(-rc));
		else
			ZL_LOG_INFO(ATTACH_LOG, "ublk device deleted: vol=%s dev=%d", a->vol_id,
				    u->dev_id);
	}
	if (u->ctrl_ring_ok) {
		zl_loop_del(a->loop, &u->ctrl_ev_h);
		io_uring_queue_exit(&u->ctrl_ring);
	}
	if (u->ctrl_ev_fd >= 0)
		close(u->ctrl_ev_fd);
	if (u->ctrl_fd >= 0)
		close(u->ctrl_fd);
	for (unsigned int i = 0; i < u->nr_queues; i++)
		free(u->queues[i].tags);
	for (unsigned int i = 0; i < u->nr_threads; i++)
		pthread_mutex_destroy(&u->threads[i].stats_lock);
	free(u->threads);
	free(u->queues);
	zl_vol_qos_share_put(u->qos_share);
	free(u);
	a->ublk = NULL;
}

/* One control command on a private ring, for zipline-node (no loop, no
 * device of ours): waits at most UBLK_CTRL_WAIT_MS. The command's result, or
 * -ETIMEDOUT. */
static int ublk_ctrl_once(struct io_uring *ring, int fd, bool ioctl_encode, uint32_t nr,
			  uint32_t dev_id, void *addr, uint16_t len)
{
	struct __kernel_timespec ts = {.tv_sec = UBLK_CTRL_WAIT_MS / 1000};
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	uint32_t op = nr;
	int rc;

	if (!sqe)
		return -EBUSY;
	if (ioctl_encode)
		op = nr == UBLK_CMD_GET_DEV_INFO ? UBLK_IOC_CTRL_R(nr) : UBLK_IOC_CTRL(nr);
	ublk_ctrl_prep(sqe, fd, op, dev_id, addr, len, 0);
	rc = io_uring_submit(ring);
	if (rc != 1)
		return rc < 0 ? rc : -EIO;
	rc = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
	if (rc)
		return rc == -ETIME ? -ETIMEDOUT : rc;
	rc = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return rc;
}

int attach_ublk_del_dev(int dev_id, pid_t server)
{
	struct ublksrv_ctrl_dev_info info;
	struct io_uring ring;
	bool enc = true;
	int fd, rc;

	fd = open(UBLK_CTRL_DEV, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = io_uring_queue_init(UBLK_CTRL_DEPTH, &ring, IORING_SETUP_SQE128);
	if (rc)
		goto out_fd;
	/* ioctl-encoded commands from Linux 6.5, the legacy opcodes before. */
	memset(&info, 0, sizeof(info));
	rc = ublk_ctrl_once(&ring, fd, enc, UBLK_CMD_GET_DEV_INFO, (uint32_t)dev_id, &info,
			    sizeof(info));
	if (rc && rc != -ENODEV && rc != -ETIMEDOUT) {
		enc = false;
		rc = ublk_ctrl_once(&ring, fd, enc, UBLK_CMD_GET_DEV_INFO, (uint32_t)dev_id, &info,
				    sizeof(info));
	}
	if (rc)
		goto out_ring;
	/* The id may have gone to another volume's device since. */
	if (server > 0 && info.ublksrv_pid != server) {
		rc = -ESRCH;
		goto out_ring;
	}
	rc = ublk_ctrl_once(&ring, fd, enc, UBLK_CMD_DEL_DEV, (uint32_t)dev_id, NULL, 0);
out_ring:
	io_uring_queue_exit(&ring);
out_fd:
	close(fd);
	return rc;
}
