/* Running the system tools (mount, umount, losetup, mkfs, blkid, resize2fs,
 * xfs_growfs) without a shell, and reading /proc/self/mountinfo. */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void node_trim(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
		s[--n] = '\0';
	for (char *p = s; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

int node_run(const char *const argv[], int timeout_ms, char *out, size_t outlen)
{
	posix_spawn_file_actions_t fa;
	char sink[256];
	size_t used = 0;
	uint64_t deadline = zl_now_ms() + (uint64_t)timeout_ms;
	int pfd[2], status = 0, rc;
	bool eof = false;
	pid_t pid;

	if (out && outlen)
		out[0] = '\0';
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		if (out)
			snprintf(out, outlen, "cannot run %s: %s", argv[0], strerror(rc));
		return -rc;
	}
	while (!eof) {
		struct pollfd p = {.fd = pfd[0], .events = POLLIN};
		int64_t left = (int64_t)(deadline - zl_now_ms());
		ssize_t n;

		if (left <= 0) {
			ZL_LOG_ERR(NODE_LOG, "command timed out, killing it: cmd=%s timeout_ms=%d",
				   argv[0], timeout_ms);
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&p, 1, (int)ZL_MIN(left, 1000)) <= 0)
			continue;
		if (out && used + 1 < outlen)
			n = read(pfd[0], out + used, outlen - 1 - used);
		else
			n = read(pfd[0], sink, sizeof(sink));
		if (n > 0 && out && used + 1 < outlen && (size_t)n <= outlen - 1 - used)
			used += (size_t)n;
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			eof = true;
	}
	close(pfd[0]);
	if (out && outlen) {
		out[used] = '\0';
		node_trim(out);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!eof && out)
		snprintf(out + strlen(out), outlen - strlen(out), "%s(timed out after %d ms)",
			 out[0] ? " " : "", timeout_ms);
	if (!eof)
		return -ETIMEDOUT;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

void node_mountinfo_unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

int node_mountinfo_find(const char *path, char *src, size_t srclen)
{
	char want[NODE_PATH_MAX];
	char *line = NULL;
	size_t cap = 0;
	size_t wl;
	int found = 0;
	FILE *f;

	snprintf(want, sizeof(want), "%s", path);
	wl = strlen(want);
	while (wl > 1 && want[wl - 1] == '/')
		want[--wl] = '\0';
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *mnt = NULL, *tok;
		int i = 0;
		bool dash = false;

		for (tok = strtok_r(line, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save), i++) {
			if (i == 4)
				mnt = tok;
			if (i > 5 && strcmp(tok, "-") == 0) {
				dash = true;
				break;
			}
		}
		if (!mnt || !dash)
			continue;
		node_mountinfo_unescape(mnt);
		if (strcmp(mnt, want) != 0)
			continue;
		found = 1;
		strtok_r(NULL, " \n", &save); /* fstype */
		tok = strtok_r(NULL, " \n", &save);
		if (src && srclen) {
			snprintf(src, srclen, "%s", tok ? tok : "");
			node_mountinfo_unescape(src);
		}
	}
	free(line);
	fclose(f);
	return found;
}

int node_mkdir_p(const char *path)
{
	char buf[NODE_PATH_MAX];
	size_t n;

	n = (size_t)snprintf(buf, sizeof(buf), "%s", path);
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0750) < 0 && errno != EEXIST)
			return -errno;
		if (i < n)
			buf[i] = '/';
	}
	return 0;
}

int node_umount_all(const char *path, char *msg, size_t msglen)
{
	for (int i = 0; i < 8; i++) {
		const char *argv[] = {"umount", path, NULL};
		char out[512];
		int rc = node_mountinfo_find(path, NULL, 0);

		if (rc <= 0)
			return rc;
		rc = node_run(argv, 60000, out, sizeof(out));
		if (rc) {
			snprintf(msg, msglen, "umount %s failed: %s", path, out);
			return rc < 0 ? rc : -EBUSY;
		}
	}
	snprintf(msg, msglen, "%s is still mounted after 8 umounts", path);
	return -EBUSY;
}
