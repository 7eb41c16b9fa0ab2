/* Logging: one line per event, key=value fields, level checked before
 * formatting, errno preserved. Level from zl_log_init() or ZL_LOG_LEVEL
 * (err|warn|info|debug). */
#ifndef ZL_LOG_H
#define ZL_LOG_H

#include <stdint.h>

enum zl_log_level { ZL_LOG_LVL_ERR = 0, ZL_LOG_LVL_WARN, ZL_LOG_LVL_INFO, ZL_LOG_LVL_DEBUG };

extern int zl_log_level;

/* Sets the level from a name; returns 0 or ZL_ERR_INVAL for an unknown name. */
int zl_log_set_level(const char *name);
/* Reads ZL_LOG_LEVEL; sets the program name printed in each line. */
void zl_log_init(const char *prog);
/* Fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) print the signal
 * and a backtrace (binary+offset: addr2line -e BINARY OFFSET) on stderr, then
 * end the process with that signal as before. For daemons. */
void zl_log_crash_handler(void);
void zl_log_write(int level, const char *comp, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* Rate limit helper: returns 1 at most `per_sec` times per second per state. */
struct zl_ratelimit { uint64_t window_ns; uint32_t count; uint32_t suppressed; };
int zl_ratelimit_ok(struct zl_ratelimit *rl, uint32_t per_sec);

#define ZL_LOG_(lvl, comp, ...)                                                  \
	do {                                                                     \
		if ((lvl) <= zl_log_level)                                       \
			zl_log_write((lvl), (comp), __FILE__, __LINE__, __VA_ARGS__); \
	} while (0)
#define ZL_LOG_ERR(comp, ...)   ZL_LOG_(ZL_LOG_LVL_ERR, comp, __VA_ARGS__)
#define ZL_LOG_WARN(comp, ...)  ZL_LOG_(ZL_LOG_LVL_WARN, comp, __VA_ARGS__)
#define ZL_LOG_INFO(comp, ...)  ZL_LOG_(ZL_LOG_LVL_INFO, comp, __VA_ARGS__)
#define ZL_LOG_DEBUG(comp, ...) ZL_LOG_(ZL_LOG_LVL_DEBUG, comp, __VA_ARGS__)

#endif
