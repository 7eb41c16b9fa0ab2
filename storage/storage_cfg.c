/* Start-up checks of zipline-storage: data directory, its lock, the
 * persisted node id and waiting for etcd. Errors are one line on stderr that
 * says what is wrong and what to do. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage_ctl.h"

int zl_storage_datadir_lock(const char *dir)
{
	char path[PATH_MAX];
	struct stat stb;
	int fd;

	if (stat(dir, &stb) < 0) {
		if (errno == ENOENT)
			fprintf(stderr,
				"zipline-storage: data dir %s does not exist: create it "
				"(mkdir -p %s)\n",
				dir, dir);
		else
			fprintf(stderr, "zipline-storage: cannot access data dir %s: %s\n", dir,
				strerror(errno));
		return -2;
	}
	if (!S_ISDIR(stb.st_mode)) {
		fprintf(stderr,
			"zipline-storage: data dir %s is not a directory: pass a "
			"directory with --data-dir\n",
			dir);
		return -2;
	}
	snprintf(path, sizeof(path), "%s/LOCK", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || access(dir, W_OK) < 0) {
		fprintf(stderr,
			"zipline-storage: data dir %s is not writable (%s): fix its "
			"permissions for this user\n",
			dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -2;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr,
			"zipline-storage: data dir %s is in use by another "
			"zipline-storage (lock %s held): stop it or use another --data-dir\n",
			dir, path);
		close(fd);
		return -2;
	}
	return fd;
}

static int node_id_write(const char *dir, const char *id)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(path, sizeof(path), "%s/node-id", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s\n", id);
	if (fflush(f) || fsync(fileno(f)) < 0) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	return rename(tmp, path) < 0 ? -errno : 0;
}

int zl_storage_node_id_resolve(const char *dir, const char *flag, char out[ZL_NODE_ID_MAX])
{
	char path[PATH_MAX], saved[ZL_NODE_ID_MAX + 2] = "";
	struct zl_storage_ident id;
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/node-id", dir);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(saved, sizeof(saved), f))
			saved[0] = 0;
		fclose(f);
		saved[strcspn(saved, "\r\n")] = 0;
		if (zl_node_id_check(saved)) {
			fprintf(stderr,
				"zipline-storage: %s holds an invalid node id \"%s\": fix "
				"or remove the file\n",
				path, saved);
			return -2;
		}
		if (flag && strcmp(flag, saved)) {
			fprintf(stderr,
				"zipline-storage: --node-id %s differs from %s in %s: "
				"this data dir belongs to node %s (drop --node-id or use another "
				"--data-dir)\n",
				flag, saved, path, saved);
			return -2;
		}
		snprintf(out, ZL_NODE_ID_MAX, "%s", saved);
		return 0;
	}
	if (zl_storage_ident_read(dir, &id) == 0) {
		/* node-id lost but the identity names the node: it decides. */
		if (flag && strcmp(flag, id.node_id)) {
			fprintf(
			    stderr,
			    "zipline-storage: data dir %s belongs to node %s of cluster %s "
			    "(%s/identity), not to --node-id %s: wrong --node-id or --data-dir? "
			    "(refusing to start; nothing was changed) [%s]\n",
			    dir, id.node_id, id.cluster_id, dir, flag,
			    zl_errname(-ZL_ERR_IDENTITY));
			return -2;
		}
		snprintf(saved, sizeof(saved), "%s", id.node_id);
	} else if (flag) {
		snprintf(saved, sizeof(saved), "%s", flag);
	} else if (gethostname(saved, sizeof(saved)) < 0) {
		fprintf(stderr, "zipline-storage: cannot read the hostname: pass --node-id\n");
		return -2;
	}
	saved[ZL_NODE_ID_MAX - 1] = 0;
	if (zl_node_id_check(saved)) {
		fprintf(stderr,
			"zipline-storage: invalid node id \"%s\": use 1..63 characters "
			"of [A-Za-z0-9._-] (--node-id)\n",
			saved);
		return -2;
	}
	rc = node_id_write(dir, saved);
	if (rc) {
		fprintf(stderr,
			"zipline-storage: cannot write %s: %s (fix the data dir's "
			"permissions)\n",
			path, strerror(-rc));
		return -2;
	}
	snprintf(out, ZL_NODE_ID_MAX, "%s", saved);
	return 0;
}

int zl_storage_etcd_wait(struct zl_etcd *e, const char *urls, int wait_sec)
{
	uint64_t deadline = zl_now_ms() + (uint64_t)wait_sec * 1000;
	unsigned delay = 1;

	for (;;) {
		struct timespec ts;

		if (zl_etcd_ping(e) == 0)
			return 0;
		if (zl_now_ms() + delay * 1000ull > deadline) {
			fprintf(stderr,
				"zipline-storage: etcd at %s unreachable for %d s, giving "
				"up (check --etcd and that etcd runs)\n",
				urls, wait_sec);
			return -1;
		}
		fprintf(stderr, "etcd at %s unreachable, retrying in %us (check --etcd)\n", urls,
			delay);
		ts.tv_sec = delay;
		ts.tv_nsec = 0;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		delay = ZL_MIN(delay * 2, 5u);
	}
}
