/* The data directory under a running daemon: see storage_ddir.h. */
#include "storage_ddir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "storage_ctl.h"

#define DDIR_CHECK_MS	 1000
#define DDIR_WRITE_EVERY 10 /* checks: one in so many also writes (below) */
#define DDIR_PROBE_FILE	 ".zl-ddir-probe"
#define DDIR_JOURNAL	 "journal-0"
#define DDIR_CHUNKS	 "chunks"
#define DDIR_IDENT	 "identity" /* storage_ident.c */
/* inotify events read per callback: a removed tree sends many. */
#define DDIR_EVBUF 4096

struct zl_storage_ddir {
	struct zl_storage *st;
	struct zl_ddir_probe probe;
	int ifd;
	int wd_dir, wd_chunks;
	struct zl_loop_handle ih;
	bool ih_added;
	/* Its own helper thread: a stat on a sick disk never delays the
	 * daemon's etcd work, nor the other way round. */
	struct zl_worker *wk;
	struct zl_work job;
	bool want_write; /* the next check also writes (a write error came) */
	bool job_write;	 /* the worker's input: also zl_ddir_probe_write */
	bool job_bad;	 /* the worker's result, read in done */
	uint64_t job_free; /* and the filesystem's free bytes (UINT64_MAX: unknown) */
	char job_why[256];
	struct zl_timer t;
	uint32_t ticks;
	bool failed;
};

/* ---- the probe (blocking; worker thread and start-up) ---- */

void zl_ddir_probe_close(struct zl_ddir_probe *p)
{
	if (p->dir_fd >= 0)
		close(p->dir_fd);
	if (p->jfd >= 0)
		close(p->jfd);
	p->dir_fd = p->jfd = -1;
}

int zl_ddir_probe_open(const char *dir, struct zl_ddir_probe *p)
{
	char path[sizeof(p->dir) + 16];
	struct stat sb;
	int rc;

	memset(p, 0, sizeof(*p));
	p->dir_fd = p->jfd = -1;
	if (snprintf(p->dir, sizeof(p->dir), "%s", dir) >= (int)sizeof(p->dir))
		return -ENAMETOOLONG;
	p->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dir_fd < 0 || fstat(p->dir_fd, &sb) < 0)
		goto fail;
	p->dir_dev = sb.st_dev;
	p->dir_ino = sb.st_ino;
	if (fstatat(p->dir_fd, DDIR_CHUNKS, &sb, 0) < 0)
		goto fail;
	p->chunks_dev = sb.st_dev;
	p->chunks_ino = sb.st_ino;
	snprintf(path, sizeof(path), "%s/%s", dir, DDIR_JOURNAL);
	p->jfd = open(path, O_RDONLY | O_CLOEXEC);
	if (p->jfd < 0 && errno != ENOENT)
		goto fail;
	if (p->jfd >= 0) {
		if (fstat(p->jfd, &sb) < 0)
			goto fail;
		p->j_dev = sb.st_dev;
		p->j_ino = sb.st_ino;
	}
	return 0;
fail:
	rc = -errno;
	zl_ddir_probe_close(p);
	return rc;
}

/* path (p->dir + "/" + name, or p->dir) is still the inode (dev, ino). */
static bool probe_same(const struct zl_ddir_probe *p, const char *name, dev_t dev, ino_t ino,
		       char *why, size_t why_len)
{
	char path[sizeof(p->dir) + 16];
	struct stat sb;

	snprintf(path, sizeof(path), "%s%s%s", p->dir, name ? "/" : "", name ? name : "");
	if (stat(path, &sb) < 0) {
		snprintf(why, why_len, "%s %s was removed while running (%s)",
			 name ? "data directory entry" : "data directory", path, strerror(errno));
		return false;
	}
	if (sb.st_dev != dev || sb.st_ino != ino) {
		snprintf(why, why_len,
			 "%s %s was replaced while running (another directory or file is there "
			 "now)",
			 name ? "data directory entry" : "data directory", path);
		return false;
	}
	return true;
}

bool zl_ddir_probe_check(const struct zl_ddir_probe *p, char *why, size_t why_len)
{
	struct statvfs sv;
	struct stat sb;

	if (fstat(p->dir_fd, &sb) == 0 && sb.st_nlink == 0) {
		snprintf(why, why_len, "data directory %s was removed while running", p->dir);
		return true;
	}
	if (!probe_same(p, NULL, p->dir_dev, p->dir_ino, why, why_len) ||
	    !probe_same(p, DDIR_CHUNKS, p->chunks_dev, p->chunks_ino, why, why_len))
		return true;
	if (p->jfd >= 0) {
		if (fstat(p->jfd, &sb) == 0 && sb.st_nlink == 0) {
			snprintf(why, why_len,
				 "journal %s/%s was removed while running (its writes went to a "
				 "file no restart would find)",
				 p->dir, DDIR_JOURNAL);
			return true;
		}
		if (!probe_same(p, DDIR_JOURNAL, p->j_dev, p->j_ino, why, why_len))
			return true;
	}
	if (fstatvfs(p->dir_fd, &sv) == 0 && (sv.f_flag & ST_RDONLY)) {
		snprintf(why, why_len, "data directory %s is on a filesystem that turned read-only",
			 p->dir);
		return true;
	}
	return false;
}

bool zl_ddir_probe_write(const struct zl_ddir_probe *p, char *why, size_t why_len)
{
	int fd = openat(p->dir_fd, DDIR_PROBE_FILE, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
	int err = 0;

	if (fd < 0 || write(fd, "z", 1) != 1)
		err = errno;
	if (fd >= 0) {
		close(fd);
		(void)unlinkat(p->dir_fd, DDIR_PROBE_FILE, 0);
	}
	if (err == EROFS) {
		snprintf(why, why_len,
			 "data directory %s turned read-only (a write there fails: %s)", p->dir,
			 strerror(err));
		return true;
	}
	if (err == EIO) {
		snprintf(why, why_len,
			 "a write to data directory %s fails (%s): the disk is failing", p->dir,
			 strerror(err));
		return true;
	}
	return false; /* ENOSPC, EDQUOT, ...: not a lost directory */
}

bool zl_ddir_event_bad(const char *dir, bool in_chunks, unsigned int mask, const char *name,
		       char *why, size_t why_len)
{
	const char *where = in_chunks ? "/" DDIR_CHUNKS : "";

	if (mask & IN_Q_OVERFLOW)
		return false; /* events lost: the backstop looks */
	if (mask & IN_UNMOUNT) {
		snprintf(why, why_len, "the filesystem of data directory %s was unmounted", dir);
		return true;
	}
	if (mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
		snprintf(why, why_len, "data directory %s%s was %s while running", dir, where,
			 mask & IN_DELETE_SELF ? "removed" : "moved away");
		return true;
	}
	if (in_chunks || !(mask & (IN_DELETE | IN_MOVED_FROM)) || !name)
		return false;
	if (strcmp(name, DDIR_JOURNAL) && strcmp(name, DDIR_CHUNKS) && strcmp(name, DDIR_IDENT))
		return false;
	snprintf(why, why_len, "data directory entry %s/%s was %s while running", dir, name,
		 mask & IN_DELETE ? "removed" : "renamed");
	return true;
}

/* ---- the daemon's side (loop thread) ---- */

static void ddir_fail(struct zl_storage_ddir *d, const char *why)
{
	if (d->failed)
		return;
	d->failed = true;
	zl_chunk_store_fence(d->st->chunks, why);
	zl_storage_status_disk_error(d->st, why);
}

static void ddir_on_inotify(void *arg, uint32_t events)
{
	struct zl_storage_ddir *d = arg;
	char buf[DDIR_EVBUF] __attribute__((aligned(__alignof__(struct inotify_event))));
	char why[256];

	(void)events;
	for (;;) {
		ssize_t n = read(d->ifd, buf, sizeof(buf));

		if (n <= 0)
			return; /* EAGAIN: all read */
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			p += sizeof(*ev) + ev->len;
			if (d->failed || (ev->wd != d->wd_dir && ev->wd != d->wd_chunks &&
					  !(ev->mask & IN_Q_OVERFLOW)))
				continue;
			if (zl_ddir_event_bad(d->probe.dir, ev->wd == d->wd_chunks, ev->mask,
					      ev->len ? ev->name : NULL, why, sizeof(why)))
				ddir_fail(d, why);
		}
	}
}

static void ddir_run(struct zl_work *w)
{
	struct zl_storage_ddir *d = ZL_CONTAINER_OF(w, struct zl_storage_ddir, job);
	struct statvfs sv;

	d->job_bad =
	    zl_ddir_probe_check(&d->probe, d->job_why, sizeof(d->job_why)) ||
	    (d->job_write && zl_ddir_probe_write(&d->probe, d->job_why, sizeof(d->job_why)));
	d->job_free =
	    fstatvfs(d->probe.dir_fd, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : UINT64_MAX;
}

static void ddir_done(struct zl_work *w)
{
	struct zl_storage_ddir *d = ZL_CONTAINER_OF(w, struct zl_storage_ddir, job);
	struct zl_chunk_store_stats cs;

	if (w->cancelled || d->failed)
		return;
	if (d->job_bad) {
		ddir_fail(d, d->job_why);
		return;
	}
	if (d->job_free != UINT64_MAX)
		zl_chunk_store_set_free(d->st->chunks, d->job_free);
	/* A journal write failed (logged by the journal): its writes fail
	 * already; say so where the manager and `zl status` look. */
	zl_chunk_store_stats(d->st->chunks, &cs);
	if (cs.journal && cs.jw.broken) {
		char why[PATH_MAX + 64];

		snprintf(why, sizeof(why), "journal %s/%s failed a write (disk I/O error)",
			 d->probe.dir, DDIR_JOURNAL);
		ddir_fail(d, why);
	}
}

/* write: also write a file there (after a write error, and now and then). */
static void ddir_check_now(struct zl_storage_ddir *d, bool write)
{
	d->want_write |= write;
	if (d->failed || d->job.busy)
		return; /* the next tick takes want_write */
	d->job_write = d->want_write;
	d->want_write = false;
	(void)zl_worker_submit(d->wk, &d->job, ddir_run, ddir_done);
}

static void ddir_tick(void *arg)
{
	struct zl_storage_ddir *d = arg;

	ddir_check_now(d, ++d->ticks % DDIR_WRITE_EVERY == 0);
}

void zl_storage_ddir_io_error(struct zl_storage *st, int err)
{
	struct zl_storage_ddir *d = st->ddir;

	if (!d || d->failed)
		return;
	if (err == -EROFS) {
		char why[PATH_MAX + 64];

		snprintf(why, sizeof(why),
			 "data directory %s turned read-only (a write failed: %s)", d->probe.dir,
			 strerror(EROFS));
		ddir_fail(d, why);
		return;
	}
	if (zl_storage_ddir_error(err))
		ddir_check_now(d, true);
}

bool zl_storage_ddir_error(int err)
{
	return err == -ENOENT || err == -ESTALE || err == -EIO || err == -ZL_ERR_IO ||
	       err == -EROFS;
}

bool zl_storage_ddir_failed(const struct zl_storage *st)
{
	return st->ddir && st->ddir->failed;
}

int zl_storage_ddir_start(struct zl_storage *st)
{
	struct zl_storage_ddir *d = calloc(1, sizeof(*d));
	char chunks[PATH_MAX];
	int rc;

	if (!d)
		return -ENOMEM;
	d->st = st;
	d->ifd = d->wd_dir = d->wd_chunks = -1;
	rc = zl_ddir_probe_open(st->cfg.data_dir, &d->probe);
	if (rc) {
		ZL_LOG_ERR("storage", "cannot watch data directory %s: %s", st->cfg.data_dir,
			   zl_strerror(rc));
		goto fail;
	}
	d->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (d->ifd < 0)
		goto fail_errno;
	d->wd_dir = inotify_add_watch(d->ifd, st->cfg.data_dir,
				      IN_DELETE_SELF | IN_MOVE_SELF | IN_DELETE | IN_MOVED_FROM |
					  IN_ONLYDIR);
	snprintf(chunks, sizeof(chunks), "%s/%s", st->cfg.data_dir, DDIR_CHUNKS);
	d->wd_chunks =
	    d->wd_dir < 0
		? -1
		: inotify_add_watch(d->ifd, chunks, IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
	if (d->wd_dir < 0 || d->wd_chunks < 0)
		goto fail_errno;
	rc = zl_loop_add(st->loop, &d->ih, d->ifd, EPOLLIN, ddir_on_inotify, d);
	if (rc)
		goto fail;
	d->ih_added = true;
	rc = zl_worker_create(st->loop, &d->wk);
	if (rc)
		goto fail;
	st->ddir = d;
	zl_timer_start(st->loop, &d->t, DDIR_CHECK_MS, DDIR_CHECK_MS, ddir_tick, d);
	ZL_LOG_INFO("storage", "watching data directory %s (removal, replacement, read-only)",
		    st->cfg.data_dir);
	return 0;

fail_errno:
	rc = -errno;
	ZL_LOG_ERR("storage", "cannot watch data directory %s: inotify: %s", st->cfg.data_dir,
		   strerror(-rc));
fail:
	st->ddir = d;
	zl_storage_ddir_stop(st);
	return rc;
}

void zl_storage_ddir_stop(struct zl_storage *st)
{
	struct zl_storage_ddir *d = st->ddir;

	if (!d)
		return;
	zl_timer_stop(st->loop, &d->t);
	zl_worker_destroy(d->wk); /* waits for a check in flight */
	if (d->ih_added)
		zl_loop_del(st->loop, &d->ih);
	if (d->ifd >= 0)
		close(d->ifd);
	zl_ddir_probe_close(&d->probe);
	free(d);
	st->ddir = NULL;
}
