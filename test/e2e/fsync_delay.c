/* LD_PRELOAD shim of the e2e tests: delays fsync/fdatasync of chosen files
 * so a test can see whether a daemon's I/O thread waits for them.
 *
 *   ZL_FSYNC_DELAY_MS     the delay (unset or 0: the shim does nothing)
 *   ZL_FSYNC_DELAY_WHILE  delay only while this file exists (unset: always)
 *   ZL_FSYNC_DELAY_SUFFIX delay files whose path ends so (default ".tmp")
 *   ZL_FSYNC_DELAY_DIRS   1: directories too
 *   ZL_FSYNC_DELAY_LOG    a line "<ms> <path>" appended per delayed call
 *
 * Only the libc calls are seen (an io_uring fsync is not). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void fsync_delay(int fd)
{
	const char *ms = getenv("ZL_FSYNC_DELAY_MS"), *when = getenv("ZL_FSYNC_DELAY_WHILE");
	const char *suffix = getenv("ZL_FSYNC_DELAY_SUFFIX"), *dirs = getenv("ZL_FSYNC_DELAY_DIRS");
	const char *log = getenv("ZL_FSYNC_DELAY_LOG");
	char link[64], path[PATH_MAX], line[PATH_MAX + 32];
	long delay = ms ? strtol(ms, NULL, 10) : 0;
	size_t n, sl;
	struct stat st;
	ssize_t len;

	if (delay <= 0 || (when && access(when, F_OK)))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len < 0)
		return;
	path[len] = 0;
	n = (size_t)len;
	suffix = suffix ? suffix : ".tmp";
	sl = strlen(suffix);
	if ((n < sl || strcmp(path + n - sl, suffix)) &&
	    !(dirs && !strcmp(dirs, "1") && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)))
		return;
	nanosleep(&(struct timespec){.tv_sec = delay / 1000, .tv_nsec = delay % 1000 * 1000000},
		  NULL);
	if (log) {
		int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		int k = snprintf(line, sizeof(line), "%ld %s\n", delay, path);

		if (lfd >= 0) {
			if (k > 0 && write(lfd, line, (size_t)k) < 0)
				k = 0;
			close(lfd);
		}
	}
}

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
