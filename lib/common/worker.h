/* A helper thread for the blocking work of a loop (etcd calls, directory
 * scans): the loop thread submits a job, the helper runs its `run` part, and
 * the loop thread then runs its `done` part, which applies the result. The
 * I/O path never waits for the work and takes no lock for it.
 *
 * Jobs are caller-owned (struct zl_work embedded in the object the work is
 * for; callbacks find it with ZL_CONTAINER_OF): nothing is allocated per
 * job. Jobs run one at a time, in submission order. A job's fields other
 * than the zl_work belong to `run` from submit until `done` starts. The
 * helper thread blocks every signal. */
#ifndef ZL_WORKER_H
#define ZL_WORKER_H

#include <stdbool.h>

#include "loop.h"

struct zl_worker;
struct zl_work;

typedef void (*zl_work_fn)(struct zl_work *w);

struct zl_work {
	struct zl_work *next;
	zl_work_fn run;	 /* helper thread */
	zl_work_fn done; /* loop thread */
	bool busy;	 /* loop thread: submitted, done not yet run */
	bool cancelled;	 /* in done: the worker was destroyed before run ran */
};

/* Starts the helper thread; results come back to loop. 0 or -errno. */
int zl_worker_create(struct zl_loop *loop, struct zl_worker **out);
/* Loop thread: stops the helper after the job it is running (waits for
 * it), then runs done of every job not yet done, in order (cancelled set
 * for those whose run never ran). Accepts NULL. */
void zl_worker_destroy(struct zl_worker *wk);
/* Loop thread: queues w. 0, or -EBUSY when w is queued or running (its
 * done has not run yet). */
int zl_worker_submit(struct zl_worker *wk, struct zl_work *w, zl_work_fn run, zl_work_fn done);

#endif
