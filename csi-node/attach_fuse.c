/* FUSE low-level session of the attach process: a root directory with one
 * regular file, "disk", whose bytes are the volume. Requests are received
 * and dispatched on the zl_loop; read/write/fsync/fallocate are answered
 * from the volume client's completion callbacks, so as many requests are in
 * flight as there are slots. */
#include "attach.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/common.h"

enum { ATTACH_OP_READ = 1, ATTACH_OP_WRITE, ATTACH_OP_SYNC, ATTACH_OP_FLUSH };

static void attach_fill_attr(const struct attach *a, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0700;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = (off_t)a->size;
		st->st_blocks = (blkcnt_t)(a->size / 512);
	}
	st->st_blksize = 4096;
}

static void attach_poll_fuse(struct attach *a, bool on)
{
	if (a->fuse_polling == on || !a->se)
		return;
	if (zl_loop_mod(a->loop, &a->fuse_h, on ? EPOLLIN : 0) == 0)
		a->fuse_polling = on;
}

static void attach_slot_put(struct attach *a, struct attach_slot *s)
{
	s->taken = false;
	s->req = NULL;
	s->next_free = a->free_slots;
	a->free_slots = s;
	a->busy_slots--;
	if (!a->stopping)
		attach_poll_fuse(a, true);
}

/* Claims the slot of the request being processed for an asynchronous reply. */
static struct attach_slot *attach_slot_take(struct attach *a, fuse_req_t req, int op)
{
	struct attach_slot *s = a->cur_slot;

	s->taken = true;
	s->req = req;
	s->op = op;
	/* A request that changes data: the next fsync has work to do. */
	if (op == ATTACH_OP_WRITE || op == ATTACH_OP_SYNC)
		a->write_gen++;
	return s;
}

static void attach_io_err(struct attach *a, const char *what, uint64_t off, uint64_t len, int st)
{
	a->io_errors++;
	if (zl_ratelimit_ok(&a->err_rl, 5))
		ZL_LOG_ERR(ATTACH_LOG, "%s failed: vol=%s off=%llu len=%llu err=%s", what,
			   a->vol_id, (unsigned long long)off, (unsigned long long)len,
			   zl_strerror(st));
}

static void attach_io_done(void *arg, int status)
{
	struct attach_slot *s = arg;
	struct attach *a = s->a;

	switch (s->op) {
	case ATTACH_OP_READ:
		if (status) {
			attach_io_err(a, "read", 0, s->len, status);
			fuse_reply_err(s->req, EIO);
		} else {
			fuse_reply_buf(s->req, s->buf.mem, s->len);
		}
		break;
	case ATTACH_OP_WRITE:
		if (status) {
			attach_io_err(a, "write", 0, s->len, status);
			fuse_reply_err(s->req, status == -ZL_ERR_NOSPC ? ENOSPC : EIO);
		} else {
			fuse_reply_write(s->req, s->len);
		}
		break;
	case ATTACH_OP_FLUSH:
		if (status)
			attach_io_err(a, "flush", 0, 0, status);
		else if (s->gen > a->flushed_gen)
			a->flushed_gen = s->gen;
		fuse_reply_err(s->req, status ? EIO : 0);
		break;
	default:
		if (status)
			attach_io_err(a, "discard/zeroes", 0, s->len, status);
		fuse_reply_err(s->req, status ? EIO : 0);
		break;
	}
	attach_slot_put(a, s);
}

/* Maps a submission error to the request's reply; the slot goes back. */
static void attach_submit_failed(struct attach *a, struct attach_slot *s, int rc)
{
	s->taken = false;
	attach_io_err(a, "submit", 0, s->len, rc);
	fuse_reply_err(s->req, rc == -ZL_ERR_RANGE ? EINVAL : EIO);
}

static void attach_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct attach *a = userdata;

	a->fuse_inited = true;
	/* Plain memory buffers: write payloads stay in their slot. */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	/* The loop device submits asynchronous direct I/O: let it overlap. */
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	conn->max_write = ATTACH_MAX_WRITE;
	conn->max_readahead = 0;
	/* Asynchronous direct I/O counts as background requests. */
	conn->max_background = ATTACH_SLOTS;
	conn->congestion_threshold = ATTACH_SLOTS * 3 / 4;
}

static void attach_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct attach *a = fuse_req_userdata(req);
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID || strcmp(name, "disk") != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ATTACH_INO_DISK;
	e.generation = 1;
	e.attr_timeout = 0; /* the size changes on expansion */
	e.entry_timeout = 3600;
	attach_fill_attr(a, ATTACH_INO_DISK, &e.attr);
	fuse_reply_entry(req, &e);
}

static void attach_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct attach *a = fuse_req_userdata(req);
	struct stat st;

	if (ino != FUSE_ROOT_ID && ino != ATTACH_INO_DISK) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attach_fill_attr(a, ino, &st);
	fuse_reply_attr(req, &st, 0);
}

static void attach_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
			      struct fuse_file_info *fi)
{
	struct attach *a = fuse_req_userdata(req);
	struct stat st;

	/* The size is the volume's: only ControllerExpandVolume changes it. */
	if ((to_set & FUSE_SET_ATTR_SIZE) && (uint64_t)attr->st_size != a->size) {
		fuse_reply_err(req, EPERM);
		return;
	}
	attach_fill_attr(a, ino, &st);
	fuse_reply_attr(req, &st, 0);
}

static void attach_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != ATTACH_INO_DISK) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	/* No page cache under the loop device: it caches above us already. */
	fi->direct_io = 1;
	fi->keep_cache = 0;
	fuse_reply_open(req, fi);
}

static void attach_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	struct attach *a = fuse_req_userdata(req);
	struct attach_slot *s;
	int rc;

	if ((uint64_t)off >= a->size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	s = attach_slot_take(a, req, ATTACH_OP_READ);
	s->len = ZL_MIN((uint64_t)size, a->size - (uint64_t)off);
	s->len = ZL_MIN(s->len, (uint64_t)ATTACH_BUF_SIZE);
	rc = zl_vol_aio_read(s->a->vol, s->buf.mem, (uint64_t)off, s->len, attach_io_done, s);
	if (rc)
		attach_submit_failed(a, s, rc);
}

static void attach_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
			    struct fuse_file_info *fi)
{
	struct attach *a = fuse_req_userdata(req);
	struct attach_slot *s;
	int rc;

	if ((uint64_t)off >= a->size || size > a->size - (uint64_t)off) {
		fuse_reply_err(req, ENOSPC);
		return;
	}
	/* buf points into this slot's buffer, which stays ours until the reply. */
	s = attach_slot_take(a, req, ATTACH_OP_WRITE);
	s->len = size;
	rc = zl_vol_aio_write(s->a->vol, buf, (uint64_t)off, size, 0, attach_io_done, s);
	if (rc)
		attach_submit_failed(a, s, rc);
}

static void attach_sync(fuse_req_t req)
{
	struct attach *a = fuse_req_userdata(req);
	struct attach_slot *s;
	int rc;

	/* Nothing changed since the last flush that succeeded (writes are
	 * acknowledged once stable on every in-sync replica): nothing to do.
	 * This is what `losetup --direct-io=on` sends while it holds the loop
	 * driver's lock; it must never wait on storage. */
	if (a->write_gen == a->flushed_gen) {
		fuse_reply_err(req, 0);
		return;
	}
	s = attach_slot_take(a, req, ATTACH_OP_FLUSH);
	s->len = 0;
	s->gen = a->write_gen;
	rc = zl_vol_aio_flush(s->a->vol, attach_io_done, s);
	if (rc)
		attach_submit_failed(a, s, rc);
}

static void attach_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	attach_sync(req);
}

static void attach_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	attach_sync(req);
}

static void attach_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void attach_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
				struct fuse_file_info *fi)
{
	struct attach *a = fuse_req_userdata(req);
	struct attach_slot *s;
	uint64_t end;
	int rc;

	if (off < 0 || len <= 0 || (uint64_t)off >= a->size) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	end = ZL_MIN((uint64_t)off + (uint64_t)len, a->size);
	if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) {
		s = attach_slot_take(a, req, ATTACH_OP_SYNC);
		s->len = end - (uint64_t)off;
		rc = zl_vol_aio_discard(s->a->vol, (uint64_t)off, s->len, attach_io_done, s);
	} else if (mode == FALLOC_FL_ZERO_RANGE ||
		   mode == (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)) {
		s = attach_slot_take(a, req, ATTACH_OP_SYNC);
		s->len = end - (uint64_t)off;
		rc =
		    zl_vol_aio_write_zeroes(s->a->vol, (uint64_t)off, s->len, attach_io_done, s);
	} else {
		/* Preallocation means nothing on a thin volume of fixed size. */
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (rc)
		attach_submit_failed(a, s, rc);
}

static void attach_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_reply_open(req, fi);
}

static void attach_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			      struct fuse_file_info *fi)
{
	static const char *const names[] = {".", "..", "disk"};
	static const fuse_ino_t inos[] = {FUSE_ROOT_ID, FUSE_ROOT_ID, ATTACH_INO_DISK};
	char buf[512];
	size_t used = 0;

	for (off_t i = off; i < (off_t)ZL_ARRAY_SIZE(names); i++) {
		struct stat st = {.st_ino = inos[i], .st_mode = i < 2 ? S_IFDIR : S_IFREG};
		size_t need = fuse_add_direntry(req, buf + used, ZL_MIN(size, sizeof(buf)) - used,
						names[i], &st, i + 1);

		if (used + need > ZL_MIN(size, sizeof(buf)))
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
}

static const struct fuse_lowlevel_ops attach_ops = {
    .init = attach_op_init,
    .lookup = attach_op_lookup,
    .getattr = attach_op_getattr,
    .setattr = attach_op_setattr,
    .open = attach_op_open,
    .read = attach_op_read,
    .write = attach_op_write,
    .flush = attach_op_flush,
    .fsync = attach_op_fsync,
    .release = attach_op_release,
    .fallocate = attach_op_fallocate,
    .opendir = attach_op_opendir,
    .readdir = attach_op_readdir,
};

static void attach_fuse_cb(void *arg, uint32_t events)
{
	struct attach *a = arg;

	/* Bounded batch per wakeup so timers and the control socket get a turn. */
	for (int i = 0; i < ATTACH_SLOTS; i++) {
		struct attach_slot *s = a->free_slots;
		int rc;

		if (!s) {
			attach_poll_fuse(a, false);
			return;
		}
		a->free_slots = s->next_free;
		a->busy_slots++;
		s->buf.flags = 0;
		s->buf.size = ATTACH_BUF_SIZE;
		rc = fuse_session_receive_buf(a->se, &s->buf);
		if (rc <= 0) {
			attach_slot_put(a, s);
			if (rc == 0 || fuse_session_exited(a->se)) {
				ZL_LOG_WARN(ATTACH_LOG, "FUSE connection ended: vol=%s mnt=%s",
					    a->vol_id, a->mnt);
				a->fuse_mounted = false;
				zl_loop_del(a->loop, &a->fuse_h);
				a->fuse_polling = false;
				zl_loop_stop(a->loop);
			} else if (rc != -EAGAIN && rc != -EINTR) {
				ZL_LOG_ERR(ATTACH_LOG, "reading /dev/fuse failed: vol=%s err=%s",
					   a->vol_id, strerror(-rc));
			}
			return;
		}
		a->cur_slot = s;
		s->taken = false;
		fuse_session_process_buf(a->se, &s->buf);
		a->cur_slot = NULL;
		if (!s->taken)
			attach_slot_put(a, s);
	}
}

int attach_fuse_start(struct attach *a)
{
	char fsname[96];
	char *argv[] = {"zipline-attach", "-o", fsname, NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	int fd, rc;

	snprintf(fsname, sizeof(fsname), "fsname=zipline:%s,subtype=zipline", a->vol_id);
	for (size_t i = 0; i < ATTACH_SLOTS; i++) {
		struct attach_slot *s = &a->slots[i];

		s->a = a;
		if (posix_memalign(&s->buf.mem, 4096, ATTACH_BUF_SIZE))
			return -ENOMEM;
		s->buf.size = ATTACH_BUF_SIZE;
		s->next_free = a->free_slots;
		a->free_slots = s;
	}
	a->se = fuse_session_new(&args, &attach_ops, sizeof(attach_ops), a);
	fuse_opt_free_args(&args); /* parsing may have copied them */
	if (!a->se) {
		ZL_LOG_ERR(ATTACH_LOG, "cannot create the FUSE session: vol=%s", a->vol_id);
		return -EIO;
	}
	if (fuse_session_mount(a->se, a->mnt) != 0) {
		ZL_LOG_ERR(ATTACH_LOG,
			   "cannot mount FUSE: vol=%s mnt=%s (is /dev/fuse there and are we root?)",
			   a->vol_id, a->mnt);
		return -EIO;
	}
	a->fuse_mounted = true;
	fd = fuse_session_fd(a->se);
	rc = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (rc == 0)
		rc = zl_loop_add(a->loop, &a->fuse_h, fd, EPOLLIN, attach_fuse_cb, a);
	if (rc) {
		rc = rc < 0 ? rc : -errno;
		ZL_LOG_ERR(ATTACH_LOG, "cannot poll /dev/fuse: vol=%s err=%s", a->vol_id,
			   strerror(-rc));
		return rc;
	}
	a->fuse_polling = true;
	return 0;
}

void attach_fuse_resized(struct attach *a)
{
	int rc;

	if (!a->se || !a->fuse_mounted)
		return;
	rc = fuse_lowlevel_notify_inval_inode(a->se, ATTACH_INO_DISK, -1, 0);
	if (rc && rc != -ENOENT)
		ZL_LOG_WARN(ATTACH_LOG, "cannot invalidate cached size: vol=%s err=%s", a->vol_id,
			    strerror(-rc));
}

void attach_fuse_stop(struct attach *a)
{
	if (a->se) {
		zl_loop_del(a->loop, &a->fuse_h);
		a->fuse_polling = false;
		fuse_session_unmount(a->se);
		fuse_session_destroy(a->se);
		a->se = NULL;
		a->fuse_mounted = false;
	}
	for (size_t i = 0; i < ATTACH_SLOTS; i++) {
		free(a->slots[i].buf.mem);
		a->slots[i].buf.mem = NULL;
	}
}
