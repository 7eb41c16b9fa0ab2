#include "storage_uring.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

void zl_storage_uring_use(const struct io_uring *ring, struct zl_storage_uring_use *u)
{
	memset(u, 0, sizeof(*u));
	if (!ring->sq.khead || !ring->cq.ktail)
		return;
	u->entries = ring->sq.ring_entries;
	u->taken = __atomic_load_n(ring->sq.khead, __ATOMIC_ACQUIRE);
	u->queued = ring->sq.sqe_tail - u->taken;
	u->posted = __atomic_load_n(ring->cq.ktail, __ATOMIC_ACQUIRE);
}

int zl_storage_uring_init(struct io_uring *ring, unsigned entries, unsigned cq_entries)
{
	struct io_uring_params p;
	int rc;

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_COOP_TASKRUN;
	if (cq_entries) {
		p.flags |= IORING_SETUP_CQSIZE;
		p.cq_entries = cq_entries;
	}
	rc = io_uring_queue_init_params(entries, ring, &p);
	if (rc != -EINVAL)
		return rc;
	/* A kernel before 5.19: completions interrupt the loop (task work). */
	memset(&p, 0, sizeof(p));
	if (cq_entries) {
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = cq_entries;
	}
	return io_uring_queue_init_params(entries, ring, &p);
}

int zl_storage_uring_efd(struct io_uring *ring, struct zl_loop *loop, struct zl_loop_handle *h,
			 int *efd, void (*cb)(void *arg, uint32_t events), void *arg)
{
	int rc;

	*efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (*efd < 0)
		return -errno;
	rc = io_uring_register_eventfd(ring, *efd);
	if (rc < 0)
		return rc;
	return zl_loop_add(loop, h, *efd, EPOLLIN | EPOLLET, cb, arg);
}
