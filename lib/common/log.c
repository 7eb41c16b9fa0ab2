#include "log.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int zl_log_level = ZL_LOG_LVL_INFO;
static const char *log_prog = "zipline";
static const char *const log_names[] = { "ERR", "WARN", "INFO", "DEBUG" };

int zl_log_set_level(const char *name)
{
	static const char *const lower[] = { "err", "warn", "info", "debug" };

	for (size_t i = 0; i < ZL_ARRAY_SIZE(lower); i++) {
		if (!strcasecmp(name, lower[i]) || !strcasecmp(name, log_names[i])) {
			zl_log_level = (int)i;
			return 0;
		}
	}
	if (!strcasecmp(name, "error"))
		return zl_log_set_level("err");
	if (!strcasecmp(name, "warning"))
		return zl_log_set_level("warn");
	return -ZL_ERR_INVAL;
}

void zl_log_init(const char *prog)
{
	const char *env = getenv("ZL_LOG_LEVEL");

	if (prog)
		log_prog = prog;
	if (env && *env && zl_log_set_level(env))
		fprintf(stderr, "%s: ignoring ZL_LOG_LEVEL=%s (use err|warn|info|debug)\n", log_prog,
			env);
}

void zl_log_write(int level, const char *comp, const char *file, int line, const char *fmt, ...)
{
	int saved = errno;
	char msg[1024];
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;
	const char *base = strrchr(file, '/');

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level < 0)
		level = 0;
	if (level > ZL_LOG_LVL_DEBUG)
		level = ZL_LOG_LVL_DEBUG;
	fprintf(stderr, "%s.%03ldZ %s %s[%d] %s %s:%d %s\n", ts, now.tv_nsec / 1000000,
		log_names[level], log_prog, (int)getpid(), comp, base ? base + 1 : file, line, msg);
	errno = saved;
}

int zl_ratelimit_ok(struct zl_ratelimit *rl, uint32_t per_sec)
{
	uint64_t now = zl_now_ns();

	if (now - rl->window_ns >= 1000000000ull) {
		rl->window_ns = now;
		rl->count = 0;
	}
	if (rl->count < per_sec) {
		rl->count++;
		return 1;
	}
	rl->suppressed++;
	return 0;
}

static void log_crash(int sig)
{
	static const char head[] = "fatal signal; backtrace (addr2line -e BINARY OFFSET):\n";
	void *frames[64];
	char num[16];
	int n = backtrace(frames, 64), len = 0;

	for (int v = sig; v && len < (int)sizeof(num) - 1; v /= 10)
		num[len++] = (char)('0' + v % 10);
	(void)!write(STDERR_FILENO, "signal ", 7);
	while (len)
		(void)!write(STDERR_FILENO, &num[--len], 1);
	(void)!write(STDERR_FILENO, ": ", 2);
	(void)!write(STDERR_FILENO, head, sizeof(head) - 1);
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	raise(sig); /* SA_RESETHAND: the default action now */
}

void zl_log_crash_handler(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
	struct sigaction sa;
	void *warm[1];

	backtrace(warm, 1); /* loads what backtrace needs now, not in the handler */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = log_crash;
	sa.sa_flags = SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}
