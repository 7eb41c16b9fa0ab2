/* Attach processes seen from zipline-node: start one (node_spawn_attach,
 * new session, so it outlives us; or through the spawner of --spawner, so
 * it outlives our container too), check that one is alive, talk to its control
 * socket, put a loop device on its FUSE file, and tear everything down. */
#include "node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Beyond the attach process's own --start-timeout: etcd, FUSE INIT. */
#define NODE_ATTACH_READY_SLACK_MS 20000
#define NODE_LOG_ROTATE_BYTES	   (8u << 20)

static int node_open_log(const struct node *n, const char *vol_id)
{
	char path[NODE_PATH_MAX], old[NODE_PATH_MAX + 4];
	struct stat st;

	if (node_vol_file(n, vol_id, "attach.log", path, sizeof(path)))
		return -ENAMETOOLONG;
	if (stat(path, &st) == 0 && (uint64_t)st.st_size > NODE_LOG_ROTATE_BYTES) {
		snprintf(old, sizeof(old), "%s.1", path);
		rename(path, old);
	}
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

/* Last line of the attach log, for error messages. */
static void node_log_tail(const struct node *n, const char *vol_id, char *out, size_t len)
{
	char path[NODE_PATH_MAX], buf[2048];
	ssize_t r;
	off_t sz;
	int fd;

	out[0] = '\0';
	if (node_vol_file(n, vol_id, "attach.log", path, sizeof(path)))
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	sz = lseek(fd, 0, SEEK_END);
	r = pread(fd, buf, sizeof(buf) - 1,
		  sz > (off_t)sizeof(buf) - 1 ? sz - (off_t)sizeof(buf) + 1 : 0);
	close(fd);
	if (r <= 0)
		return;
	buf[r] = '\0';
	while (r > 0 && buf[r - 1] == '\n')
		buf[--r] = '\0';
	snprintf(out, len, "%.280s", strrchr(buf, '\n') ? strrchr(buf, '\n') + 1 : buf);
}

int node_attach_start(struct node *n, const struct node_attach_req *req, pid_t *pid, char *msg,
		      size_t msglen)
{
	char dir[NODE_PATH_MAX], epoch[24], tokenv[160], line[512], errname[40];
	const char *argv[32];
	size_t ac = 0, ne = 0, used = 0;
	char **envp = NULL;
	int pfd[2] = {-1, -1}, logfd, rc;
	uint64_t deadline;
	uint32_t start_s = NODE_ATTACH_START_S;

	if (n->cfg.attach_timeout)
		node_start_timeout_parse(n->cfg.attach_timeout, &start_s);
	rc = node_vol_dir(n, req->volume_id, dir, sizeof(dir));
	if (rc == 0)
		rc = node_mkdir_p(dir);
	if (rc) {
		snprintf(msg, msglen, "cannot create state directory %s: %s", dir, strerror(-rc));
		return rc;
	}
	chmod(dir, 0700); /* the volume's FUSE file and ctl.sock live here */
	logfd = node_open_log(n, req->volume_id);
	if (logfd < 0) {
		rc = -errno;
		snprintf(msg, msglen, "cannot open %s/attach.log: %s", dir, strerror(errno));
		return rc;
	}
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out_log;
	}
	snprintf(epoch, sizeof(epoch), "%llu", (unsigned long long)req->epoch);
	argv[ac++] = n->self_exe;
	argv[ac++] = "attach";
	argv[ac++] = "--volume-id";
	argv[ac++] = req->volume_id;
	argv[ac++] = "--dir";
	argv[ac++] = dir;
	argv[ac++] = "--etcd";
	argv[ac++] = n->cfg.etcd_urls;
	argv[ac++] = "--etcd-prefix";
	argv[ac++] = req->prefix;
	argv[ac++] = "--epoch";
	argv[ac++] = epoch;
	argv[ac++] = "--ready-fd";
	argv[ac++] = "3";
	argv[ac++] = "--transport";
	argv[ac++] = n->cfg.transport;
	if (n->cfg.log_level) {
		argv[ac++] = "--log-level";
		argv[ac++] = n->cfg.log_level;
	}
	if (n->cfg.io_timeout) {
		argv[ac++] = "--io-timeout";
		argv[ac++] = n->cfg.io_timeout;
	}
	if (n->cfg.attach_timeout) {
		argv[ac++] = "--start-timeout";
		argv[ac++] = n->cfg.attach_timeout;
	}
	if (n->cfg.legacy_drop)
		argv[ac++] = "--legacy-drop";
	if (n->cfg.node_id) {
		argv[ac++] = "--node-id";
		argv[ac++] = n->cfg.node_id;
	}
	if (req->frontend != NODE_FRONTEND_FUSE) {
		argv[ac++] = "--frontend";
		argv[ac++] = node_frontend_name(req->frontend);
	}
	if (req->reattach) {
		argv[ac++] = "--reattach";
		argv[ac++] = req->reattach;
	}
	if (req->recover) {
		argv[ac++] = "--recover";
		argv[ac++] = req->recover;
	}
	if (req->frontend == NODE_FRONTEND_UBLK && n->cfg.ublk_threads) {
		argv[ac++] = "--ublk-threads";
		argv[ac++] = n->cfg.ublk_threads;
	}
	argv[ac] = NULL;

	/* The token goes through the environment: argv is world-readable. */
	while (environ[ne])
		ne++;
	envp = calloc(ne + 2, sizeof(*envp));
	if (!envp) {
		rc = -ENOMEM;
		goto out_pipe;
	}
	for (size_t i = 0, j = 0; i < ne; i++)
		if (strncmp(environ[i], "ZL_ATTACH_TOKEN=", 16) != 0)
			envp[j++] = environ[i];
	if (req->token && req->token[0]) {
		snprintf(tokenv, sizeof(tokenv), "ZL_ATTACH_TOKEN=%s", req->token);
		for (ne = 0; envp[ne]; ne++)
			;
		envp[ne] = tokenv;
	}

	if (n->cfg.spawner) {
		rc = node_spawner_request(n->cfg.spawner, argv, (const char *const *)envp, logfd,
					  pfd[1], pid, msg, msglen);
	} else {
		rc = node_spawn_attach(n->self_exe, (char *const *)argv, envp, logfd, pfd[1], pid);
		if (rc)
			snprintf(msg, msglen, "cannot start the attach process %s: %s",
				 n->self_exe, strerror(-rc));
	}
	free(envp);
	close(pfd[1]);
	pfd[1] = -1;
	if (rc)
		goto out_pipe;

	/* One line: "READY ..." or "ERR [ZL_ERR_NAME] <what failed>", or EOF
	 * if it died. */
	deadline = zl_now_ms() + (uint64_t)start_s * 1000u + NODE_ATTACH_READY_SLACK_MS;
	line[0] = '\0';
	while (used + 1 < sizeof(line) && !memchr(line, '\n', used)) {
		struct pollfd p = {.fd = pfd[0], .events = POLLIN};
		int64_t left = (int64_t)(deadline - zl_now_ms());
		ssize_t r;

		if (left <= 0)
			break;
		if (poll(&p, 1, (int)ZL_MIN(left, 1000)) <= 0)
			continue;
		r = read(pfd[0], line + used, sizeof(line) - 1 - used);
		if (r <= 0)
			break;
		used += (size_t)r;
		line[used] = '\0';
	}
	line[used] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (strncmp(line, "READY", 5) == 0) {
		const char *d = strstr(line, req->frontend == NODE_FRONTEND_UBLK ? " dev=/dev/ublkb"
										 : " dev=/dev/nbd");
		const char *id = strstr(line, " ublk_id=");

		ZL_LOG_INFO(NODE_LOG, "attach process started: vol=%s pid=%d %s", req->volume_id,
			    (int)*pid, line + 5);
		rc = 0;
		if (req->frontend == NODE_FRONTEND_FUSE)
			goto out_pipe;
		if (req->ublk_id)
			*req->ublk_id = id ? atoi(id + 9) : -1;
		if (d && req->dev && (req->frontend != NODE_FRONTEND_UBLK || id)) {
			d += 5;
			snprintf(req->dev, req->devlen, "%.*s", (int)strcspn(d, " "), d);
			goto out_pipe;
		}
		snprintf(msg, msglen, "attach process for %s reported no %s device: %s",
			 req->volume_id, node_frontend_name(req->frontend), line);
		rc = -ZL_ERR_IO;
	} else if (strncmp(line, "ERR ", 4) == 0) {
		const char *what = line + 4;

		/* "ERR ZL_ERR_NOT_ATTACHED volume ...": the code says which
		 * gRPC status NodeStage answers. */
		rc = sscanf(what, "%39s", errname) == 1 ? zl_err_from_name(errname) : 0;
		if (rc)
			what += strlen(errname) + 1;
		else
			rc = -ZL_ERR_IO;
		snprintf(msg, msglen, "attaching %s failed: %s", req->volume_id, what);
	} else {
		char tail[300];

		node_log_tail(n, req->volume_id, tail, sizeof(tail));
		snprintf(msg, msglen, "attach process for %s %s; last log line: %s", req->volume_id,
			 used ? "answered garbage" : "did not become ready",
			 tail[0] ? tail : "(none)");
		rc = -ZL_ERR_TIMEOUT;
	}
	node_attach_stop(*pid, req->volume_id, 10000);
	*pid = 0;
	if (rc == -ZL_ERR_IO && strstr(msg, "not found"))
		rc = -ZL_ERR_NOT_FOUND;
out_pipe:
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
out_log:
	close(logfd);
	return rc;
}

bool node_attach_alive(pid_t pid, const char *vol_id)
{
	char path[64], buf[4096], *p;
	int status, fd;
	ssize_t len;
	bool want_id = false;

	if (pid <= 0)
		return false;
	if (waitpid(pid, &status, WNOHANG) == pid)
		return false; /* it was our child and has just been reaped */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	p = strrchr(buf, ')');
	if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')) {
		/* Ended since the waitpid above: reap it now if it is our child
		 * (else ECHILD: its parent, an earlier zipline-node, does). */
		waitpid(pid, &status, WNOHANG);
		return false;
	}
	if (!p || p[1] != ' ')
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	/* argv: <exe> attach ... --volume-id <vol> ... */
	p = buf + strlen(buf) + 1;
	if (p >= buf + len || strcmp(p, "attach") != 0)
		return false;
	for (; p < buf + len; p += strlen(p) + 1) {
		if (want_id)
			return strcmp(p, vol_id) == 0;
		want_id = strcmp(p, "--volume-id") == 0;
	}
	return false;
}

/* Reaps pid if it is our child: an attach process that stopped serving
 * (its /proc entry already says so) may still be on its way out; wait for
 * that, bounded. A process of an earlier zipline-node: ECHILD at once. */
static void node_attach_reap(pid_t pid)
{
	for (int i = 0; i < 200; i++) {
		pid_t r = waitpid(pid, NULL, WNOHANG);

		if (r == pid || r < 0)
			return;
		usleep(10000);
	}
}

int node_attach_stop(pid_t pid, const char *vol_id, int timeout_ms)
{
	uint64_t deadline = zl_now_ms() + (uint64_t)timeout_ms;

	if (!node_attach_alive(pid, vol_id)) {
		node_attach_reap(pid);
		return 0;
	}
	kill(pid, SIGTERM);
	while (zl_now_ms() < deadline) {
		if (!node_attach_alive(pid, vol_id)) {
			node_attach_reap(pid);
			return 0;
		}
		usleep(20000);
	}
	ZL_LOG_WARN(NODE_LOG, "attach process ignored SIGTERM, killing it: vol=%s pid=%d", vol_id,
		    (int)pid);
	kill(pid, SIGKILL);
	for (int i = 0; i < 100 && node_attach_alive(pid, vol_id); i++)
		usleep(20000);
	node_attach_reap(pid);
	return -ETIMEDOUT;
}

int node_attach_ctl(const struct node *n, const char *vol_id, const char *cmd, char *reply,
		    size_t replylen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	/* A resize reads etcd; a status must not hold up NodeGetVolumeStats. */
	struct timeval tv = {.tv_sec = strcmp(cmd, "status") == 0 ? 5 : 30};
	char req[64];
	size_t used = 0;
	ssize_t r;
	int fd, rc = 0;

	reply[0] = '\0';
	if (node_vol_file(n, vol_id, "ctl.sock", sa.sun_path, sizeof(sa.sun_path)))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	snprintf(req, sizeof(req), "%s\n", cmd);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		rc = -errno;
		goto out;
	}
	while (used + 1 < replylen && (r = read(fd, reply + used, replylen - 1 - used)) > 0)
		used += (size_t)r;
	reply[used] = '\0';
	reply[strcspn(reply, "\n")] = '\0';
	if (!used)
		rc = -EPIPE;
out:
	close(fd);
	return rc;
}

int node_loop_find(const char *file, char *loop, size_t looplen)
{
	struct dirent *de;
	DIR *d = opendir("/sys/block");
	int found = 0;

	if (!d)
		return 0;
	while (!found && (de = readdir(d))) {
		char path[300], buf[NODE_PATH_MAX];
		ssize_t r;
		int fd;

		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		r = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (r <= 0)
			continue;
		buf[r] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (strcmp(buf, file) == 0) {
			snprintf(loop, looplen, "/dev/%s", de->d_name);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

int node_loop_setup(const struct node *n, const char *vol_id, char *loop, size_t looplen, char *msg,
		    size_t msglen)
{
	char file[NODE_PATH_MAX], out[1024], *p;
	const char *argv[] = {"losetup", "--direct-io=on", "--find", "--show", file, NULL};
	int rc;

	if (node_vol_file(n, vol_id, "fuse/disk", file, sizeof(file)))
		return -ENAMETOOLONG;
	if (node_loop_find(file, loop, looplen))
		return 0;
	rc = node_run(argv, 60000, out, sizeof(out));
	if (rc) {
		snprintf(msg, msglen, "losetup on %s failed: %s", file, out);
		return rc < 0 ? rc : -EIO;
	}
	/* "/dev/loopN" (stdout) maybe next to a warning (stderr). */
	for (p = strstr(out, "/dev/loop"); p; p = strstr(p + 1, "/dev/loop")) {
		size_t l = 9 + strspn(p + 9, "0123456789");

		if (l > 9 && (p[l] == '\0' || p[l] == ' ')) {
			snprintf(loop, looplen, "%.*s", (int)l, p);
			if (strstr(out, "direct"))
				ZL_LOG_WARN(NODE_LOG,
					    "loop device without direct I/O: vol=%s msg=%s", vol_id,
					    out);
			return 0;
		}
	}
	snprintf(msg, msglen, "losetup on %s printed no device: %s", file, out);
	return -EIO;
}

/* First line of a small sysfs file of /dev/nbdN ("" when unreadable). */
static void node_nbd_sysfs(const char *dev, const char *name, char *out, size_t len)
{
	char path[128];
	ssize_t r;
	int fd;

	out[0] = '\0';
	if (strncmp(dev, "/dev/", 5) != 0 || strchr(dev + 5, '/'))
		return;
	snprintf(path, sizeof(path), "/sys/block/%s/%s", dev + 5, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	r = read(fd, out, len - 1);
	close(fd);
	out[r > 0 ? r : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

bool node_nbd_serves(const char *dev, const char *vol_id)
{
	char backend[128], size[32];

	node_nbd_sysfs(dev, "backend", backend, sizeof(backend));
	node_nbd_sysfs(dev, "size", size, sizeof(size));
	return strcmp(backend, vol_id) == 0 && size[0] && strcmp(size, "0") != 0;
}

int node_token_save(const struct node *n, const char *vol_id, const char *token)
{
	char path[NODE_PATH_MAX];
	size_t len = token ? strlen(token) : 0;
	int fd, rc = 0;

	if (node_vol_file(n, vol_id, "token", path, sizeof(path)))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, token ? token : "", len) != (ssize_t)len || fsync(fd) < 0)
		rc = -EIO;
	close(fd);
	return rc;
}

int node_token_load(const struct node *n, const char *vol_id, char *token, size_t len)
{
	char path[NODE_PATH_MAX];
	ssize_t r;
	int fd;

	token[0] = '\0';
	if (node_vol_file(n, vol_id, "token", path, sizeof(path)))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = read(fd, token, len - 1);
	close(fd);
	if (r < 0)
		return -EIO;
	token[r] = '\0';
	return 0;
}

int node_blkdev_size(const char *dev, uint64_t *size)
{
	int fd = open(dev, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (ioctl(fd, BLKGETSIZE64, size) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int node_detach(struct node *n, struct node_vol_state *st, char *msg, size_t msglen)
{
	char file[NODE_PATH_MAX], mnt[NODE_PATH_MAX], loop[64], out[512];
	pid_t server;
	int rc;

	if (node_vol_file(n, st->volume_id, "fuse/disk", file, sizeof(file)) ||
	    node_vol_file(n, st->volume_id, "fuse", mnt, sizeof(mnt)))
		return -ENAMETOOLONG;
	/* Every loop device on our file (normally the one in the state). */
	for (int i = 0; i < 4 && node_loop_find(file, loop, sizeof(loop)); i++) {
		const char *argv[] = {"losetup", "-d", loop, NULL};

		rc = node_run(argv, 60000, out, sizeof(out));
		if (rc) {
			snprintf(msg, msglen, "losetup -d %s failed: %s", loop, out);
			return rc < 0 ? rc : -EBUSY;
		}
		/* Detaching completes when the last opener closes the device. */
		for (int j = 0; j < 250 && node_loop_find(file, loop, sizeof(loop)); j++)
			usleep(20000);
	}
	if (node_loop_find(file, loop, sizeof(loop))) {
		snprintf(msg, msglen, "%s still backs %s after losetup -d: something holds it open",
			 file, loop);
		return -EBUSY;
	}
	if (st->frontend != NODE_FRONTEND_FUSE && st->loop[0]) {
		/* What a block-mode user left in the page cache goes out while
		 * the attach process still serves; its SIGTERM disconnects
		 * (nbd) or stops and deletes (ublk) the device. */
		const char *argv[] = {"blockdev", "--flushbufs", st->loop, NULL};

		if (node_attach_alive(st->pid, st->volume_id) && node_frontend_dev_present(st) &&
		    node_run(argv, 60000, out, sizeof(out)) != 0)
			ZL_LOG_WARN(NODE_LOG, "blockdev --flushbufs failed: vol=%s dev=%s: %s",
				    st->volume_id, st->loop, out);
	}
	server = st->pid;
	if (st->pid > 0) {
		node_attach_stop(st->pid, st->volume_id, 30000);
		st->pid = 0;
	}
	/* A device whose server died waits for a new one: nobody comes. */
	if (node_frontend_dev_present(st)) {
		rc = st->frontend == NODE_FRONTEND_NBD ? attach_nbd_disconnect_dev(st->loop)
						       : attach_ublk_del_dev(st->ublk_id, server);
		if (rc == -ESRCH || rc == -ENODEV) {
			ZL_LOG_WARN(NODE_LOG, "%s is no longer the device of %s: left alone",
				    st->loop, st->volume_id);
			rc = 0;
		}
		if (rc) {
			snprintf(msg, msglen, "cannot %s %s: %s",
				 st->frontend == NODE_FRONTEND_NBD ? "disconnect" : "delete",
				 st->loop, strerror(-rc));
			return rc;
		}
		ZL_LOG_INFO(NODE_LOG, "%s device removed: vol=%s dev=%s",
			    node_frontend_name(st->frontend), st->volume_id, st->loop);
	}
	st->ublk_id = -1;
	st->loop[0] = '\0';
	/* A dead attach process leaves its FUSE mount behind ("Transport
	 * endpoint is not connected"): detach it lazily. */
	if (node_mountinfo_find(mnt, NULL, 0) > 0) {
		const char *argv[] = {"umount", "-l", mnt, NULL};

		rc = node_run(argv, 60000, out, sizeof(out));
		if (rc) {
			snprintf(msg, msglen, "umount -l %s failed: %s", mnt, out);
			return rc < 0 ? rc : -EBUSY;
		}
	}
	rc = node_state_remove(n, st->volume_id);
	if (rc)
		snprintf(msg, msglen, "cannot remove the state directory of %s: %s", st->volume_id,
			 strerror(-rc));
	return rc;
}
