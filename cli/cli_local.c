/* Where zl finds etcd: --etcd, $ZIPLINE_ETCD, or the endpoints file of the
 * local cluster (scripts/local-cluster.sh). That file decides which etcd
 * every later command trusts with volume data, so it is read only when
 * nobody but root or the invoking user can have written it: the file, its
 * directory and every directory above are owned by root or the user and are
 * not writable by group or others (a directory above may be, with the sticky
 * bit, like /tmp: then others cannot rename or replace entries in it). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLI_ENDPOINTS_FILE "etcd.endpoints"

/* Copies the first line of s, trimmed, into out. */
static void cli_first_line(const char *s, char *out, size_t len)
{
	size_t n;

	while (isspace((unsigned char)*s))
		s++;
	n = strcspn(s, "\r\n");
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (n >= len)
		n = len - 1;
	memcpy(out, s, n);
	out[n] = 0;
}

static int __attribute__((format(printf, 4, 5)))
cli_local_fail(int rc, char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Who may have written st: root or uid only, and nobody else through the
 * mode (a sticky directory excepted when allow_sticky). */
static int cli_local_trust(const struct stat *st, const char *path, const char *what, uid_t uid,
			   bool allow_sticky, char *err, size_t err_len)
{
	mode_t m = st->st_mode;

	if (st->st_uid != 0 && st->st_uid != uid)
		return cli_local_fail(-EACCES, err, err_len,
				      "%s %s is owned by uid %u, not by root or you (uid %u); "
				      "remove it or chown it",
				      what, path, (unsigned)st->st_uid, (unsigned)uid);
	if ((m & (S_IWGRP | S_IWOTH)) && !(allow_sticky && (m & S_ISVTX)))
		return cli_local_fail(-EACCES, err, err_len,
				      "%s %s is writable by %s (mode %04o); fix it with chmod go-w "
				      "%s",
				      what, path, (m & S_IWOTH) ? "every user" : "its group",
				      (unsigned)(m & 07777), path);
	return 0;
}

/* Checks every directory above the resolved directory dir (not dir itself). */
static int cli_local_check_above(const char *dir, uid_t uid, char *err, size_t err_len)
{
	char path[PATH_MAX];
	struct stat st;
	size_t len = strlen(dir);
	int rc;

	if (len >= sizeof(path))
		return cli_local_fail(-ENAMETOOLONG, err, err_len, "path %s is too long", dir);
	memcpy(path, dir, len + 1);
	/* Cut the last component off, then walk up to "/". */
	for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
		if (slash == path) {
			path[1] = '\0';
		} else {
			*slash = '\0';
		}
		if (lstat(path, &st))
			return cli_local_fail(-errno, err, err_len, "cannot stat %s: %s", path,
					      strerror(errno));
		rc = cli_local_trust(&st, path, "directory", uid, true, err, err_len);
		if (rc || slash == path)
			return rc;
	}
	return 0;
}

int zl_cli_local_read(const char *dir, uid_t uid, char *out, size_t out_len, char *err,
		      size_t err_len)
{
	char real[PATH_MAX], file[PATH_MAX + sizeof(CLI_ENDPOINTS_FILE) + 1], buf[1024];
	struct stat st;
	ssize_t n;
	int dfd, fd, rc;

	if (out_len)
		out[0] = '\0';
	if (!realpath(dir, real)) {
		if (errno == ENOENT || errno == ENOTDIR)
			return -ENOENT;
		return cli_local_fail(-errno, err, err_len, "cannot resolve %s: %s", dir,
				      strerror(errno));
	}
	snprintf(file, sizeof(file), "%s/%s", strcmp(real, "/") ? real : "", CLI_ENDPOINTS_FILE);
	rc = cli_local_check_above(real, uid, err, err_len);
	if (rc)
		return rc;
	/* The directory and the file are checked on the descriptors that are
	 * read, so nothing can be swapped in between. */
	dfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return cli_local_fail(-errno, err, err_len, "cannot open %s: %s", real,
				      strerror(errno));
	if (fstat(dfd, &st)) {
		rc = cli_local_fail(-errno, err, err_len, "cannot stat %s: %s", real,
				    strerror(errno));
		goto out_dir;
	}
	rc = cli_local_trust(&st, real, "directory", uid, false, err, err_len);
	if (rc)
		goto out_dir;
	fd = openat(dfd, CLI_ENDPOINTS_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			rc = -ENOENT;
		else if (errno == ELOOP)
			rc = cli_local_fail(-EACCES, err, err_len,
					    "%s is a symbolic link; replace it with a regular file",
					    file);
		else
			rc = cli_local_fail(-errno, err, err_len, "cannot open %s: %s", file,
					    strerror(errno));
		goto out_dir;
	}
	if (fstat(fd, &st)) {
		rc = cli_local_fail(-errno, err, err_len, "cannot stat %s: %s", file,
				    strerror(errno));
		goto out_file;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = cli_local_fail(-EACCES, err, err_len, "%s is not a regular file", file);
		goto out_file;
	}
	rc = cli_local_trust(&st, file, "file", uid, false, err, err_len);
	if (rc)
		goto out_file;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		rc = cli_local_fail(-errno, err, err_len, "cannot read %s: %s", file,
				    strerror(errno));
		goto out_file;
	}
	buf[n] = '\0';
	cli_first_line(buf, out, out_len);
out_file:
	close(fd);
out_dir:
	close(dfd);
	return rc;
}

int zl_cli_etcd_discover(const char *flag, const char *env, const char *local_dir, char *out,
			 size_t out_len, enum zl_cli_etcd_src *src, char *err, size_t err_len)
{
	char why[PATH_MAX + 256];
	int rc;

	if (flag && *flag) {
		snprintf(out, out_len, "%s", flag);
		*src = ZL_CLI_ETCD_FLAG;
		return 0;
	}
	if (env && *env) {
		snprintf(out, out_len, "%s", env);
		*src = ZL_CLI_ETCD_ENV;
		return 0;
	}
	if (!local_dir || !*local_dir)
		local_dir = getenv("ZIPLINE_LOCAL_DIR");
	if (!local_dir || !*local_dir)
		local_dir = ZL_CLI_DEFAULT_LOCAL_DIR;
	rc = zl_cli_local_read(local_dir, getuid(), out, out_len, why, sizeof(why));
	if (rc && rc != -ENOENT)
		return cli_local_fail(rc, err, err_len,
				      "not using the local cluster's etcd endpoints in %s: %s; "
				      "or pass --etcd URL (or set ZIPLINE_ETCD)",
				      local_dir, why);
	if (!rc && out[0]) {
		*src = ZL_CLI_ETCD_LOCAL;
		return 0;
	}
	snprintf(out, out_len, "%s", ZL_CLI_DEFAULT_ETCD);
	*src = ZL_CLI_ETCD_DEFAULT;
	return 0;
}
