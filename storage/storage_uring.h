/* The storage daemon's io_urings (chunk store, journal writer): how they are
 * set up so that their completions reach the loop thread cheaply. */
#ifndef ZL_STORAGE_URING_H
#define ZL_STORAGE_URING_H

#include <liburing.h>
#include <stdint.h>

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

/* How much of a ring is in use, for the metrics: read from the ring's shared
 * indexes by the thread that owns the ring, nothing counted per I/O.
 * `taken` and `posted` are the kernel's own running counts (32 bits,
 * wrapping): SQEs it took from the submission queue and CQEs it posted.
 * Every SQE of the storage rings posts exactly one CQE (no links, no
 * multishot, no CQE_SKIP_SUCCESS), so taken - posted is what the kernel
 * holds (in flight; with COOP_TASKRUN also the ended ones whose CQE
 * waits for the loop's next system call). */
struct zl_storage_uring_use {
	uint32_t entries; /* SQ ring size */
	uint32_t queued;  /* SQEs prepared, not yet taken by the kernel */
	uint32_t taken;	  /* SQEs the kernel took (wrapping count) */
	uint32_t posted;  /* CQEs the kernel posted (wrapping count) */
};

/* Fills *u from ring (zeroes when ring was never set up: entries 0). */
void zl_storage_uring_use(const struct io_uring *ring, struct zl_storage_uring_use *u);

#endif
