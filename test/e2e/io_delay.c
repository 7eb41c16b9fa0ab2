/* LD_PRELOAD shim of the e2e tests: delays fsync/fdatasync and opens of
 * chosen files so a test can see whether a daemon's I/O thread waits for
 * them.
 *
 *   ZL_FSYNC_DELAY_MS     the fsync delay (unset or 0: fsyncs as they are)
 *   ZL_FSYNC_DELAY_WHILE  delay only while this file exists (unset: always);
 *                         a number in it is the delay instead of ..._MS
 *   ZL_FSYNC_DELAY_SUFFIX delay files whose path ends so (default ".tmp")
 *   ZL_FSYNC_DELAY_DIRS   1: directories too
 *   ZL_FSYNC_DELAY_LOG    a line "<ms> <path>" appended per delayed call
 *   ZL_OPEN_DELAY_MS, ZL_OPEN_DELAY_WHILE, ZL_OPEN_DELAY_SUFFIX (no
 *   default: unset, no open is delayed), ZL_OPEN_DELAY_LOG: the same for
 *   open/open64 of existing files (an open that creates is not delayed)
 *   ZL_UNLINK_DELAY_MS, ..._WHILE, ..._SUFFIX (no default), ..._LOG: the
 *   same for unlink
 *
 * Only the libc calls are seen (an io_uring fsync is not). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The delay in ms the file `when` holds (a number), else dflt. */
static long delay_of(const char *when, long dflt)
{
	int (*real_open)(const char *, int, ...) =
	    (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	char buf[24];
	ssize_t n;
	long v;
	int fd;

	if (!when || (fd = real_open(when, O_RDONLY | O_CLOEXEC)) < 0)
		return dflt;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return dflt;
	buf[n] = 0;
	v = strtol(buf, NULL, 10);
	return v > 0 ? v : dflt;
}

/* Sleeps delay_ms (an environment variable's name) when the call on path
 * is to be delayed, and logs it. */
static void delay_call(const char *path, bool is_dir, const char *ms_var, const char *while_var,
		       const char *suffix_var, const char *dflt_suffix, const char *dirs_var,
		       const char *log_var)
{
	const char *ms = getenv(ms_var), *when = getenv(while_var), *suffix = getenv(suffix_var);
	const char *dirs = dirs_var ? getenv(dirs_var) : NULL, *log = getenv(log_var);
	char line[PATH_MAX + 32];
	long delay = ms ? strtol(ms, NULL, 10) : 0;
	size_t n = strlen(path), sl;

	suffix = suffix ? suffix : dflt_suffix;
	if (delay <= 0 || !suffix || (when && access(when, F_OK)))
		return;
	sl = strlen(suffix);
	if ((n < sl || strcmp(path + n - sl, suffix)) && !(dirs && !strcmp(dirs, "1") && is_dir))
		return;
	delay = delay_of(when, delay);
	nanosleep(&(struct timespec){.tv_sec = delay / 1000, .tv_nsec = delay % 1000 * 1000000},
		  NULL);
	if (log) {
		int (*real_open)(const char *, int, ...) =
		    (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
		int lfd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int k = snprintf(line, sizeof(line), "%ld %s\n", delay, path);

		if (lfd >= 0) {
			if (k > 0 && write(lfd, line, (size_t)k) < 0)
				k = 0;
			close(lfd);
		}
	}
}

static void fsync_delay(int fd)
{
	char link[64], path[PATH_MAX];
	struct stat st;
	ssize_t len;

	if (!getenv("ZL_FSYNC_DELAY_MS"))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len < 0)
		return;
	path[len] = 0;
	delay_call(path, fstat(fd, &st) == 0 && S_ISDIR(st.st_mode), "ZL_FSYNC_DELAY_MS",
		   "ZL_FSYNC_DELAY_WHILE", "ZL_FSYNC_DELAY_SUFFIX", ".tmp", "ZL_FSYNC_DELAY_DIRS",
		   "ZL_FSYNC_DELAY_LOG");
}

static int open_delayed(const char *sym, const char *path, int flags, mode_t mode)
{
	int (*real)(const char *, int, ...) =
	    (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);

	if (!(flags & O_CREAT))
		delay_call(path, false, "ZL_OPEN_DELAY_MS", "ZL_OPEN_DELAY_WHILE",
			   "ZL_OPEN_DELAY_SUFFIX", NULL, NULL, "ZL_OPEN_DELAY_LOG");
	return real(path, flags, mode);
}

int unlink(const char *path)
{
	int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");

	delay_call(path, false, "ZL_UNLINK_DELAY_MS", "ZL_UNLINK_DELAY_WHILE",
		   "ZL_UNLINK_DELAY_SUFFIX", NULL, NULL, "ZL_UNLINK_DELAY_LOG");
	return real(path);
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return open_delayed("open", path, flags, mode);
}

/* The same function in glibc on 64-bit hosts. */
int open64(const char *path, int flags, ...) __attribute__((alias("open")));

int fsync(int fd)
{
	int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");

	fsync_delay(fd);
	return real(fd);
}

int fdatasync(int fd)
{
	int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");

	fsync_delay(fd);
	return real(fd);
}
