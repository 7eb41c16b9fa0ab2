/* The storage daemon's io_urings (chunk store, journal writer): how they are
 * set up so that their completions reach the loop thread cheaply. */
#ifndef ZL_STORAGE_URING_H
#define ZL_STORAGE_URING_H

#include <liburing.h>

#include "lib/common/loop.h"

/* Sets up ring with `entries` SQEs (and cq_entries CQEs when not 0) and
 * IORING_SETUP_COOP_TASKRUN where the kernel has it (5.19): a completion
 * does not interrupt the loop while it runs, it is reaped at the loop's next
 * system call. Returns 0 or a negative errno. */
int zl_storage_uring_init(struct io_uring *ring, unsigned entries, unsigned cq_entries);

/* Creates *efd, registers it with ring and adds it to loop edge-triggered:
 * every completion posts an edge, so cb (which must reap every CQE there
 * is) never has to read the counter. Returns 0 or a negative error; on an
 * error *efd may be open (the caller closes it). */
int zl_storage_uring_efd(struct io_uring *ring, struct zl_loop *loop, struct zl_loop_handle *h,
			 int *efd, void (*cb)(void *arg, uint32_t events), void *arg);

#endif
