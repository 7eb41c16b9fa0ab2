/* The attach process: one per attached volume, serving the volume as the
 * regular file <dir>/fuse/disk through a FUSE low-level session, or as the
 * block device /dev/ublkbN (--frontend ublk), on the same zl_loop as the
 * volume client (ublk with more than one queue: by default, or
 * --ublk-threads N > 1, also on a thread per other queue, or N - 1 threads,
 * with their own loop and client, attach_ublk.c). Private to csi-node/. */
#ifndef ZL_CSI_ATTACH_H
#define ZL_CSI_ATTACH_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/client/client.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"

#define ATTACH_LOG "attach"
/* Requests served at once; each slot owns one receive buffer, which also
 * holds the write payload until the volume acknowledges it and serves as the
 * read destination, so no buffer is allocated per I/O. */
#define ATTACH_SLOTS 32
/* libfuse reads whole requests of up to FUSE_MAX_MAX_PAGES (256) pages plus
 * a header page into the buffer. */
#define ATTACH_BUF_SIZE	 ((256u + 1u) * 4096u)
#define ATTACH_MAX_WRITE (1u << 20)
#define ATTACH_INO_DISK	 2

struct attach;

struct attach_slot {
	struct attach *a;
	struct attach_slot *next_free;
	struct fuse_buf buf;
	fuse_req_t req;
	uint64_t len;
	uint64_t gen; /* a flush: the write_gen it covers */
	int op;	      /* ATTACH_OP_* of the request in flight */
	bool taken;
};

struct attach {
	struct zl_loop *loop;
	struct zl_etcd *etcd;
	char etcd_pw[256]; /* etcd password read from its file, if any */
	struct zl_client *client;
	/* How a->client was made: the ublk queue threads make theirs alike. */
	struct zl_client_opts copts;
	char client_id[64];
	/* The one volume handle of the process's whole life: it takes the
	 * volume's snapshots (zl_vol_snap_serve) and learns a new size through
	 * its record watch, so a resize never reopens it (and the snapshot
	 * switch never moves between handles). NULL once aborted. */
	struct zl_vol *vol;
	uint64_t size;
	const char *vol_id;
	const char *prefix;
	char dir[1024];
	char mnt[1100];

	struct fuse_session *se;
	struct zl_loop_handle fuse_h;
	bool fuse_polling;
	bool fuse_mounted;
	bool fuse_inited; /* the kernel's INIT was answered */
	struct attach_slot slots[ATTACH_SLOTS];
	struct attach_slot *free_slots;
	struct attach_slot *cur_slot; /* the slot whose request is being processed */
	unsigned int busy_slots;

	int ctl_fd;
	struct zl_loop_handle ctl_h;
	int sig_fd;
	struct zl_loop_handle sig_h;
	struct zl_timer stop_timer;
	uint64_t stop_deadline_ns;
	bool stopping;
	bool flushing;

	/* A resize waiting for the handle to install the record's size. */
	struct zl_timer resize_timer;
	uint64_t resize_want, resize_deadline_ms;
	int resize_fd; /* the ctl connection to answer, -1 for SIGHUP */
	bool resize_waiting;

	/* Requests that change data, counted at submit; flushed_gen: the
	 * count the last successful flush covered. Equal: fsync is a no-op. */
	uint64_t write_gen, flushed_gen;
	uint64_t flush_gen; /* what the stop sequence's flush covers */
	bool serving;	  /* READY was reported: SIGTERM runs the stop sequence */
	bool aborting;	  /* the stop bound passed: every request fails */
	int probe_status; /* the start-up read: 1 while in flight */
	void *probe_buf;
	pthread_t detach_thread;
	bool detach_started;
	_Atomic bool detach_done;

	uint64_t io_errors;
	struct zl_ratelimit err_rl;

	/* --frontend nbd (attach_nbd.c); nbd NULL with FUSE. */
	struct zl_nbd_server *nbd;
	struct zl_xport *nbd_x; /* the request buffers' pool */
	struct zl_timer nbd_timer;
	int nbd_index;	   /* N of /dev/nbdN, -1 until connected */
	char nbd_dev[32];  /* "/dev/nbdN" */
	int nbd_plugged;   /* connections handed to the kernel so far */
	uint32_t io_timeout_s;
	struct attach_ublk *ublk; /* --frontend ublk (attach_ublk.c), else NULL */
	char ready_extra[96];	  /* appended to the READY line (" dev=...") */
};

/* Creates the FUSE session, mounts it on a->mnt and starts serving it on
 * a->loop. 0 or a negative errno (the log says what failed). */
int attach_fuse_start(struct attach *a);
/* Unmounts and destroys the session. Safe to call twice. */
void attach_fuse_stop(struct attach *a);
/* The volume grew to a->size: drop the kernel's cached attributes. */
void attach_fuse_resized(struct attach *a);
/* Serves the volume as /dev/nbdN: a new device, or (reattach "/dev/nbdN")
 * the device a dead attach process of this volume served. Sets
 * PR_SET_IO_FLUSHER and locks memory. 0 or an error with why filled. */
int attach_nbd_start(struct attach *a, const char *reattach, char *why, size_t len);
/* Stopping (SIGTERM): disconnects the device and closes the connections. */
void attach_nbd_disconnect(struct attach *a);
/* True while the NBD server has connections or backend I/O. */
bool attach_nbd_busy(const struct attach *a);
/* The volume grew to a->size: the NBD server serves it (the node plugin
 * then grows the kernel's device, attach_nbd_resize_dev). */
void attach_nbd_resized(struct attach *a);
/* Destroys the NBD server (waits a bounded time for its I/O). */
void attach_nbd_stop(struct attach *a);
/* Hardware queues of a ublk device (--ublk-queues): at most this many; by
 * default one per online CPU up to ATTACH_UBLK_QUEUES_DEFAULT. */
#define ATTACH_UBLK_QUEUES_MAX	   16
#define ATTACH_UBLK_QUEUES_DEFAULT 4
/* How a ublk device's data moves (--ublk-copy): AUTO: user copy where the
 * kernel offers it (UBLK_F_USER_COPY, Linux >= 6.5), else tag; USER: user
 * copy or fail; TAG: the classic copy into a buffer per tag. */
enum attach_ublk_copy { ATTACH_UBLK_COPY_AUTO, ATTACH_UBLK_COPY_USER, ATTACH_UBLK_COPY_TAG };
/* ublk frontend: opens /dev/ublk-control, adds a device of a->size bytes
 * with nr_queues hardware queues and the copy mode copy (recover_id < 0)
 * or takes over device recover_id, every queue it has, in its own copy
 * mode, after its server died (UBLK_F_USER_RECOVERY; nr_queues and copy
 * unused), and serves its queues on nr_threads threads (at most one per
 * queue; 0: one per queue): queue q on thread q % nr_threads, thread 0
 * being a->loop, the others with their own loop, client and volume handle
 * (one zl_vol_qos_share for all of them). 0 or a negative
 * errno (the log says what failed); attach_ublk_stop undoes a half start. */
int attach_ublk_start(struct attach *a, int recover_id, unsigned int nr_queues,
		      unsigned int nr_threads, enum attach_ublk_copy copy);
/* --ublk-threads N: at most this many threads serve a device's queues. */
#define ATTACH_UBLK_THREADS_MAX ATTACH_UBLK_QUEUES_MAX
/* For the ctl "status" reply with --ublk-threads > 1: adds the other
 * threads' volume handles' counters (as last published, UBLK_PUB_MS) to vs,
 * their I/O errors (and thread 0's) to errors, their fencing to fenced. */
void attach_ublk_stats(const struct attach *a, struct zl_vol_stats *vs, uint64_t *errors,
		       bool *fenced);
/* The stop sequence: true while another thread has requests on the volume;
 * the requests that changed data on every thread so far (the final flush
 * is needed while it is not what the last one covered). */
bool attach_ublk_busy(const struct attach *a);
uint64_t attach_ublk_written(const struct attach *a);
/* A resize: true once every other thread's handle serves size bytes. */
bool attach_ublk_size_ok(const struct attach *a, uint64_t size);
/* The loop error of another thread (it stopped a->loop), or 0. */
int attach_ublk_thread_error(const struct attach *a);
/* attach_abort: every other thread closes its handle (its I/O fails with
 * EIO, and every later request); waits (bounded) until they have, so that
 * a->vol, which they follow, closes last. */
void attach_ublk_abort(struct attach *a);
/* For the ctl "status" reply: " ublk_reqs=N,N,..." (the requests each
 * hardware queue took since this process serves the device), then
 * " ublk_copy=user|tag ublk_buf_waits=N ublk_sync_copies=N" (requests
 * that found the buffer pool empty and waited; user copies made with
 * pread/pwrite), "" without a ublk device. */
void attach_ublk_status(const struct attach *a, char *buf, size_t len);
/* Grows the started device to size bytes (UBLK_U_CMD_UPDATE_SIZE, Linux
 * >= 6.16) without waiting: 0 (sent; the kernel's answer reaches
 * attach_ublk_resized on the loop), or an error with msg filled
 * (-EOPNOTSUPP: the kernel cannot; -ZL_ERR_BUSY: another control command
 * runs). */
int attach_ublk_resize(struct attach *a, uint64_t size, char *msg, size_t len);
/* attach_main.c: the kernel answered UPDATE_SIZE (0 or -errno). */
void attach_ublk_resized(struct attach *a, int res);
/* SIGTERM: STOP_DEV; the kernel drains the device through us meanwhile,
 * and the stop sequence waits for it (it holds a busy slot). */
void attach_ublk_stop_begin(struct attach *a);
/* Waits (bounded) for STOP_DEV, joins the queue threads, tears the queues
 * down, deletes a stopped device; a device being taken over stays. Accepts
 * a->ublk == NULL. */
void attach_ublk_stop(struct attach *a);
/* The nbd and ublk frontends, before they map their buffers and queues:
 * writeback to the device we serve waits on this process, so memory
 * reclaim from here must not write to it (PR_SET_IO_FLUSHER) and our
 * pages, these and every later mapping (mlockall MCL_FUTURE), stay
 * resident. A failure is logged, not fatal: the device works, without that
 * safety under memory pressure. */
void attach_flusher_enter(const struct attach *a);

#endif
