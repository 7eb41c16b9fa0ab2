/* Cross-thread wake-up of a loop through an eventfd (see notify.h). */
#include "notify.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void notify_fd_cb(void *arg, uint32_t events)
{
	struct zl_notify *n = arg;
	uint64_t v;

	(void)events;
	if (read(n->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: already drained by an earlier wake-up */
	}
	n->cb(n->arg);
}

int zl_notify_init(struct zl_notify *n, struct zl_loop *loop, zl_loop_cb cb, void *arg)
{
	int rc;

	n->loop = NULL;
	n->cb = cb;
	n->arg = arg;
	n->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (n->efd < 0)
		return -errno;
	rc = zl_loop_add(loop, &n->h, n->efd, EPOLLIN, notify_fd_cb, n);
	if (rc) {
		close(n->efd);
		n->efd = -1;
		return rc;
	}
	n->loop = loop;
	return 0;
}

void zl_notify_fini(struct zl_notify *n)
{
	if (!n->loop)
		return;
	zl_loop_del(n->loop, &n->h);
	close(n->efd);
	n->efd = -1;
	n->loop = NULL;
}

void zl_notify_post(struct zl_notify *n)
{
	uint64_t one = 1;

	if (write(n->efd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wake-up is pending anyway */
	}
}
