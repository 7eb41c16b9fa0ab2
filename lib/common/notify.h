/* Cross-thread wake-up of a loop: any thread posts, the loop thread runs the
 * callback (once for any number of posts since the last run). For handing
 * work from a background thread (an etcd watch) to the loop that owns the
 * state. */
#ifndef ZL_NOTIFY_H
#define ZL_NOTIFY_H

#include <stdbool.h>

#include "loop.h"

struct zl_notify {
	struct zl_loop *loop; /* NULL until zl_notify_init succeeded */
	int efd;
	struct zl_loop_handle h;
	zl_loop_cb cb;
	void *arg;
};

/* Creates the eventfd and registers it on loop (loop thread). Returns 0 or
 * -errno; on failure n needs no fini (calling it is harmless). */
int zl_notify_init(struct zl_notify *n, struct zl_loop *loop, zl_loop_cb cb, void *arg);
/* Unregisters and closes (loop thread). Safe on a zeroed or failed n, and
 * twice. */
void zl_notify_fini(struct zl_notify *n);
/* Thread-safe, async-signal-safe: cb will run on the loop thread. */
void zl_notify_post(struct zl_notify *n);

#endif
