/* Single-threaded event loop: epoll for fds, timers, deferred calls and
 * busy-poll hooks. Everything registered on a loop runs on the loop's thread;
 * only zl_loop_wake() and zl_loop_stop() may be called from other threads.
 * All registration structs are caller-owned (no malloc per event). */
#ifndef ZL_LOOP_H
#define ZL_LOOP_H

#include <stdint.h>
#include <stdbool.h>
#include <sys/epoll.h>

struct zl_loop;

typedef void (*zl_loop_fd_cb)(void *arg, uint32_t events);
typedef void (*zl_loop_cb)(void *arg);
/* A poller returns how much work it did; while any poller did work the loop
 * does not sleep (busy-poll under load, sleep when idle). */
typedef int (*zl_loop_poll_fn)(void *arg);

struct zl_loop_handle {
	int fd;
	uint32_t events;
	zl_loop_fd_cb cb;
	void *arg;
};

struct zl_timer {
	struct zl_timer *next;
	uint64_t deadline_ns;
	uint64_t period_ns; /* 0: one-shot */
	zl_loop_cb cb;
	void *arg;
	bool armed;
};

struct zl_defer {
	struct zl_defer *next;
	zl_loop_cb cb;
	void *arg;
	bool queued;
};

struct zl_poller {
	struct zl_poller *next;
	zl_loop_poll_fn fn;
	void *arg;
};

/* Returns 0 or a negative errno. */
int zl_loop_create(struct zl_loop **out);
/* Accepts NULL. Does not close registered fds. */
void zl_loop_destroy(struct zl_loop *loop);

/* Registers fd for EPOLLIN/EPOLLOUT/...; returns 0 or -errno. */
int zl_loop_add(struct zl_loop *loop, struct zl_loop_handle *h, int fd, uint32_t events,
		zl_loop_fd_cb cb, void *arg);
int zl_loop_mod(struct zl_loop *loop, struct zl_loop_handle *h, uint32_t events);
/* Unregisters; safe to call from inside the handle's own callback. */
void zl_loop_del(struct zl_loop *loop, struct zl_loop_handle *h);

/* Arms a timer (one-shot when period_ms == 0). Re-arming an armed timer moves it. */
void zl_timer_start(struct zl_loop *loop, struct zl_timer *t, uint64_t delay_ms,
		    uint64_t period_ms, zl_loop_cb cb, void *arg);
void zl_timer_stop(struct zl_loop *loop, struct zl_timer *t);

/* Queues cb to run on the loop after the current dispatch (FIFO). A deferral
 * that is already queued stays queued once. */
void zl_loop_defer(struct zl_loop *loop, struct zl_defer *d, zl_loop_cb cb, void *arg);
void zl_loop_defer_cancel(struct zl_loop *loop, struct zl_defer *d);

void zl_loop_add_poller(struct zl_loop *loop, struct zl_poller *p, zl_loop_poll_fn fn, void *arg);
void zl_loop_del_poller(struct zl_loop *loop, struct zl_poller *p);

/* Busy polling: for spin_us microseconds after an iteration that did work,
 * iterations poll (epoll with no wait) instead of sleeping, so a completion
 * or a reply that follows soon is taken without a wake-up; past the window
 * the loop sleeps as usual, so an idle loop costs nothing. 0 (the default)
 * turns it off. It pays where the loop has a core of its own; on a machine
 * with fewer cores than busy loops, the spinning takes the CPU the other
 * side of the exchange needs (docs/ARCHITECTURE.md). */
void zl_loop_set_busy_poll(struct zl_loop *loop, uint32_t spin_us);

/* One iteration: waits at most timeout_ms (-1 forever) for events, runs fd
 * callbacks, expired timers and deferred calls. Returns the number of
 * callbacks run, or -errno. */
int zl_loop_run_once(struct zl_loop *loop, int timeout_ms);
/* Runs until zl_loop_stop(). Returns 0 or -errno. */
int zl_loop_run(struct zl_loop *loop);
/* Thread-safe: makes zl_loop_run() return after the current iteration. */
void zl_loop_stop(struct zl_loop *loop);
/* Thread-safe: interrupts a sleeping epoll_wait. */
void zl_loop_wake(struct zl_loop *loop);
bool zl_loop_stopping(struct zl_loop *loop);
/* Monotonic time in ns, for deadlines and rate limits on the loop's thread:
 * inside an iteration (callbacks, timers, defers) the time read once when
 * epoll_wait returned, so at most one iteration old, without a clock read
 * per call; outside one (pollers, code before the loop runs) zl_now_ns().
 * Not for latencies: an I/O that starts and ends late in two iterations
 * would be measured from the two iterations' starts. */
uint64_t zl_loop_now_ns(struct zl_loop *loop);

#endif
