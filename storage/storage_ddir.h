/* The data directory under a running zipline-storage (storage_ddir.c): a
 * directory that disappears, is replaced or turns read-only stops the
 * daemon acknowledging at once. Seen three ways:
 *   - inotify on the data dir and its chunks/ (the dir itself removed or
 *     renamed; journal-0, chunks or identity removed or renamed out), its
 *     fd on the loop: the moment it happens;
 *   - a write error that means the dir is gone or read-only (EROFS, ENOENT
 *     or ESTALE, EIO, a broken journal) from the chunk store or journal;
 *   - every second, on a helper thread of its own (stat may block on a sick
 *     disk; lib/common/worker.h): the dir, chunks/ and journal-0 still the
 *     inodes opened at start (st_dev/st_ino; the journal's open fd still
 *     linked), the filesystem not read-only (statvfs ST_RDONLY); and right
 *     after a write error, and every DDIR_WRITE_EVERY checks, a small file
 *     written there (EROFS, EIO).
 * Then the chunk store is fenced (zl_chunk_store_fence: nothing more is
 * acknowledged), the status record says why (disk_error; the manager moves
 * the node's members out and places nothing on it) and requests for slices
 * are answered ZL_ERR_NOT_INSYNC (clients reload and go to the new primary,
 * a primary reports this backup). Final: a restart with a data directory
 * undoes it. Loop thread only, except the probe functions. */
#ifndef ZL_STORAGE_DDIR_H
#define ZL_STORAGE_DDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct zl_storage;

/* What the backstop compares against: taken at start (blocking). */
struct zl_ddir_probe {
	char dir[4096];
	int dir_fd; /* O_DIRECTORY of the data dir (fstatvfs, nlink) */
	int jfd;    /* journal-0 read-only, -1 without one */
	dev_t dir_dev, chunks_dev, j_dev;
	ino_t dir_ino, chunks_ino, j_ino;
};

/* Opens the probe of dir (dir and dir/chunks must exist; dir/journal-0 is
 * optional). 0 or -errno. */
int zl_ddir_probe_open(const char *dir, struct zl_ddir_probe *p);
/* Accepts a probe that failed to open or was never opened (zeroed with fds
 * -1). */
void zl_ddir_probe_close(struct zl_ddir_probe *p);
/* Blocking: true (and why, one line) when the dir, chunks/ or the journal
 * is no longer what was opened, or the filesystem is read-only. */
bool zl_ddir_probe_check(const struct zl_ddir_probe *p, char *why, size_t why_len);
/* Blocking: writes and removes a small file in the dir (no sync): true
 * (and why) when that fails with EROFS or EIO, what a filesystem turned
 * read-only after an error (ext4 errors=remount-ro: statvfs does not say
 * so) or a failing disk answers. */
bool zl_ddir_probe_write(const struct zl_ddir_probe *p, char *why, size_t why_len);
/* An inotify event (mask, name: "" for the watched dir itself) on the data
 * dir (in_chunks false) or on chunks/: true and why when it means the
 * data dir is no longer the daemon's. */
bool zl_ddir_event_bad(const char *dir, bool in_chunks, unsigned int mask, const char *name,
		       char *why, size_t why_len);

/* Starts watching st->cfg.data_dir (after the chunk store is created).
 * 0 or -errno. */
int zl_storage_ddir_start(struct zl_storage *st);
/* Stops it (waits for a check in flight). Accepts a daemon without one. */
void zl_storage_ddir_stop(struct zl_storage *st);
/* A chunk store or journal write failed with err: EROFS fences at once;
 * ENOENT, ESTALE, EIO and ZL_ERR_IO start a check now. */
void zl_storage_ddir_io_error(struct zl_storage *st, int err);
/* The data dir failed: this daemon serves no slice. */
bool zl_storage_ddir_failed(const struct zl_storage *st);
/* Whether err (an I/O's failure) is one that zl_storage_ddir_io_error
 * checks the data directory for (gone, replaced, read-only or failing).
 * Until that check has concluded, a write failing so is answered
 * -ZL_ERR_NOT_INSYNC like one after it: never a hard error to the client,
 * which goes to the new primary (a primary reports us). */
bool zl_storage_ddir_error(int err);

#endif
