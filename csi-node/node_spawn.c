/* Starting attach processes so that they outlive the node plugin's
 * container (issue 24): in Kubernetes a container restart kills every
 * process of the container's cgroup, so an attach process zipline-node
 * starts itself (new session or not) dies with it, and every volume it
 * serves with it. With --spawner, zipline-node asks `zipline-node spawner`,
 * running in a container of its own in the same pod (shareProcessNamespace),
 * to start them: they live in that container's cgroup, a plugin restart
 * does not reach them, and the restarted plugin adopts them as it adopts
 * them after a kill -9 (state.json, node_attach_alive).
 *
 * The request is one SOCK_SEQPACKET message on a unix socket (mode 0600, in
 * a directory only root reaches): node_spawn_msg_encode's bytes (argv and
 * environment) plus two descriptors in SCM_RIGHTS, the attach log (its
 * stdout and stderr) and the write end of the ready pipe (its fd 3). The
 * spawner runs only its own binary, only as `attach`, and answers one line:
 * "OK <pid>" or "ERR <what failed>". It reaps its children. */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/common/byteorder.h"

#define SPAWN_MAGIC	 0x50534c5au /* "ZLSP" read as a little-endian u32 */
#define SPAWN_ARGC_MAX	 64
#define SPAWN_ENVC_MAX	 2048
#define SPAWN_IO_TIMEOUT 5 /* seconds for one request, both sides */

ssize_t node_spawn_msg_encode(const char *const *argv, const char *const *envp, uint8_t *buf,
			      size_t cap)
{
	uint32_t argc = 0, envc = 0;
	size_t len = 12;

	while (argv[argc])
		argc++;
	while (envp && envp[envc])
		envc++;
	if (argc < 2 || argc > SPAWN_ARGC_MAX || envc > SPAWN_ENVC_MAX)
		return -ZL_ERR_INVAL;
	for (uint32_t i = 0; i < argc + envc; i++) {
		const char *s = i < argc ? argv[i] : envp[i - argc];
		size_t n = strlen(s) + 1;

		if (len + n > cap)
			return -ZL_ERR_RANGE;
		memcpy(buf + len, s, n);
		len += n;
	}
	zl_put_le32(buf, SPAWN_MAGIC);
	zl_put_le32(buf + 4, argc);
	zl_put_le32(buf + 8, envc);
	return (ssize_t)len;
}

int node_spawn_msg_decode(uint8_t *buf, size_t len, char **argv, char **envp, const char **why)
{
	uint32_t argc, envc;
	size_t pos = 12;

	if (len < 12 || len > NODE_SPAWN_MSG_MAX) {
		*why = "bad message length";
		return -ZL_ERR_PROTO;
	}
	argc = zl_get_le32(buf + 4);
	envc = zl_get_le32(buf + 8);
	if (zl_get_le32(buf) != SPAWN_MAGIC) {
		*why = "bad magic";
		return -ZL_ERR_PROTO;
	}
	if (argc < 2 || argc > SPAWN_ARGC_MAX || envc > SPAWN_ENVC_MAX) {
		*why = "bad argument or environment count";
		return -ZL_ERR_PROTO;
	}
	for (uint32_t i = 0; i < argc + envc; i++) {
		char *s = (char *)buf + pos;
		char *end = memchr(s, '\0', len - pos);

		if (pos >= len || !end) {
			*why = "string not terminated";
			return -ZL_ERR_PROTO;
		}
		if (i < argc)
			argv[i] = s;
		else
			envp[i - argc] = s;
		pos = (size_t)(end - (char *)buf) + 1;
	}
	if (pos != len) {
		*why = "trailing bytes";
		return -ZL_ERR_PROTO;
	}
	argv[argc] = NULL;
	envp[envc] = NULL;
	if (strcmp(argv[1], "attach") != 0) {
		*why = "not an attach command";
		return -ZL_ERR_PROTO;
	}
	return 0;
}

int node_spawn_attach(const char *exe, char *const *argv, char *const *envp, int logfd,
		      int readyfd, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, def;
	int rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, logfd, 1);
	posix_spawn_file_actions_adddup2(&fa, logfd, 2);
	posix_spawn_file_actions_adddup2(&fa, readyfd, 3);
	posix_spawn_file_actions_addclosefrom_np(&fa, 4);
	posix_spawn_file_actions_addchdir_np(&fa, "/");
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigemptyset(&def);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGHUP);
	sigaddset(&def, SIGPIPE);
	sigaddset(&def, SIGCHLD);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &def);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
					    POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(pid, exe, &fa, &attr, argv, envp);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	return -rc;
}

static int spawn_sock_timeouts(int fd)
{
	struct timeval tv = {.tv_sec = SPAWN_IO_TIMEOUT};

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	return 0;
}

static int spawn_addr(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path, path, strlen(path));
	return 0;
}

/* ---- the plugin's side ---- */

int node_spawner_request(const char *sock, const char *const *argv, const char *const *envp,
			 int logfd, int readyfd, pid_t *pid, char *msg, size_t msglen)
{
	static __thread uint8_t buf[NODE_SPAWN_MSG_MAX];
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct sockaddr_un a;
	struct iovec iov;
	struct msghdr mh = {0};
	struct cmsghdr *c;
	char rep[256];
	ssize_t len, r;
	int fd, rc, fds[2] = {logfd, readyfd};

	len = node_spawn_msg_encode(argv, envp, buf, sizeof(buf));
	if (len < 0) {
		snprintf(msg, msglen,
			 "cannot ask the spawner at %s: arguments and environment over %u bytes",
			 sock, NODE_SPAWN_MSG_MAX);
		return (int)len;
	}
	rc = spawn_addr(sock, &a);
	if (rc) {
		snprintf(msg, msglen, "spawner socket path too long: %s", sock);
		return rc;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(msg, msglen, "cannot create a unix socket: %s", strerror(errno));
		return rc;
	}
	rc = spawn_sock_timeouts(fd);
	if (!rc && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		rc = -errno;
	if (rc) {
		snprintf(msg, msglen,
			 "cannot reach the attach spawner at %s: %s (is the node plugin's "
			 "attacher container running? zipline-node spawner --socket %s)",
			 sock, strerror(-rc), sock);
		goto out;
	}
	iov.iov_base = buf;
	iov.iov_len = (size_t)len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	memset(&cm, 0, sizeof(cm));
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) != len) {
		rc = -errno;
		snprintf(msg, msglen, "cannot send the request to the spawner at %s: %s", sock,
			 strerror(errno));
		goto out;
	}
	r = recv(fd, rep, sizeof(rep) - 1, 0);
	if (r <= 0) {
		rc = r < 0 ? -errno : -ZL_ERR_CONN;
		snprintf(msg, msglen, "the spawner at %s did not answer: %s", sock,
			 r < 0 ? strerror(errno) : "connection closed");
		goto out;
	}
	rep[r] = '\0';
	rep[strcspn(rep, "\n")] = '\0';
	if (sscanf(rep, "OK %d", pid) == 1 && *pid > 0) {
		rc = 0;
	} else {
		rc = -ZL_ERR_IO;
		snprintf(msg, msglen, "the spawner at %s could not start the attach process: %s",
			 sock, strncmp(rep, "ERR ", 4) ? rep : rep + 4);
	}
out:
	close(fd);
	return rc;
}

/* ---- the spawner ---- */

static void spawner_reap(void)
{
	int status;
	pid_t p;

	while ((p = waitpid(-1, &status, WNOHANG)) > 0)
		ZL_LOG_INFO(NODE_LOG, "attach process ended: pid=%d %s=%d", (int)p,
			    WIFSIGNALED(status) ? "signal" : "status",
			    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static const char *spawner_vol(char *const *argv)
{
	for (int i = 0; argv[i] && argv[i + 1]; i++)
		if (!strcmp(argv[i], "--volume-id"))
			return argv[i + 1];
	return "?";
}

/* One request on connection fd. */
static void spawner_serve(int fd, const char *exe)
{
	static uint8_t buf[NODE_SPAWN_MSG_MAX];
	static char *argv[SPAWN_ARGC_MAX + 1], *envp[SPAWN_ENVC_MAX + 1];
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int fds[4], nfd = 0, rc;
	const char *why = "";
	char rep[256];
	pid_t pid = 0;
	ssize_t len;

	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	len = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	for (struct cmsghdr *c = len > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; i < n && nfd < 4; i++)
			memcpy(&fds[nfd++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	if (len <= 0) {
		snprintf(rep, sizeof(rep), "ERR cannot read the request: %s",
			 len < 0 ? strerror(errno) : "empty");
	} else if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		snprintf(rep, sizeof(rep), "ERR request over %u bytes or descriptors cut",
			 NODE_SPAWN_MSG_MAX);
	} else if (nfd != 2) {
		snprintf(rep, sizeof(rep), "ERR want 2 descriptors (log, ready pipe), got %d", nfd);
	} else if ((rc = node_spawn_msg_decode(buf, (size_t)len, argv, envp, &why))) {
		snprintf(rep, sizeof(rep), "ERR bad request: %s", why);
	} else if ((rc = node_spawn_attach(exe, argv, envp, fds[0], fds[1], &pid))) {
		snprintf(rep, sizeof(rep), "ERR cannot start %.160s: %s", exe,
			 strerror(-rc));
	} else {
		snprintf(rep, sizeof(rep), "OK %d\n", (int)pid);
		ZL_LOG_INFO(NODE_LOG, "attach process started: pid=%d vol=%s", (int)pid,
			    spawner_vol(argv));
	}
	if (!pid)
		ZL_LOG_WARN(NODE_LOG, "spawn request refused: %s", rep + 4);
	if (send(fd, rep, strlen(rep), MSG_NOSIGNAL) < 0)
		ZL_LOG_WARN(NODE_LOG, "cannot answer a spawn request: %s", strerror(errno));
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
}

int spawner_main(int argc, char **argv)
{
	const char *sock = NULL;
	char exe[NODE_PATH_MAX];
	struct sockaddr_un a;
	struct stat st;
	sigset_t sigs;
	ssize_t n;
	int lfd, sfd, rc = 1;

	zl_log_init("zipline-node spawner");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strncmp(argv[i], "--socket=", 9))
			sock = argv[i] + 9;
		else if (!strcmp(argv[i], "--log-level") && i + 1 < argc)
			zl_log_set_level(argv[++i]);
		else if (!strncmp(argv[i], "--log-level=", 12))
			zl_log_set_level(argv[i] + 12);
		else {
			fprintf(stderr,
				"usage: zipline-node spawner --socket PATH [--log-level L]\n"
				"  starts the node plugin's attach processes (zipline-node "
				"--spawner PATH) so that they outlive its container\n");
			return 2;
		}
	}
	if (!sock || spawn_addr(sock, &a)) {
		fprintf(stderr, "zipline-node spawner: --socket PATH is required (under %zu bytes)\n",
			sizeof(a.sun_path));
		return 2;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		fprintf(stderr, "zipline-node spawner: cannot resolve /proc/self/exe: %s\n",
			strerror(errno));
		return 1;
	}
	exe[n] = '\0';
	if (n > 10 && strcmp(exe + n - 10, " (deleted)") == 0)
		exe[n - 10] = '\0';
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGCHLD);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	/* A socket left by an earlier spawner goes; anything else stays. */
	if (lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(sock);
	umask(077);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sfd < 0 || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    chmod(sock, 0600) < 0 || listen(lfd, 16) < 0) {
		fprintf(stderr, "zipline-node spawner: cannot listen on %s: %s\n", sock,
			strerror(errno));
		goto out;
	}
	ZL_LOG_INFO(NODE_LOG, "spawner listening: socket=%s exe=%s", sock, exe);
	for (;;) {
		struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		struct signalfd_siginfo si;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents && read(sfd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGCHLD) {
				spawner_reap();
			} else {
				ZL_LOG_INFO(NODE_LOG, "spawner stopping on signal %u; its attach "
						      "processes keep serving",
					    si.ssi_signo);
				rc = 0;
				break;
			}
		}
		if (p[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (fd < 0)
				continue;
			if (spawn_sock_timeouts(fd) == 0)
				spawner_serve(fd, exe);
			close(fd);
		}
	}
	unlink(sock);
out:
	if (lfd >= 0)
		close(lfd);
	if (sfd >= 0)
		close(sfd);
	return rc;
}
