#include "loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common.h"

#define LOOP_MAX_EVENTS 64

struct zl_loop {
	int epfd;
	int wakefd;
	struct zl_loop_handle wake_h;
	atomic_bool stop;
	uint64_t now_ns; /* read after epoll_wait returned */
	bool in_pass;    /* now_ns is of the pass running (zl_loop_now_ns) */
	struct zl_timer *timers; /* sorted by deadline */
	struct zl_defer *defer_head, *defer_tail;
	struct zl_poller *pollers;
	/* Handles deleted during the current dispatch: their events must be skipped. */
	struct zl_loop_handle *deleted[LOOP_MAX_EVENTS];
	int n_deleted;
	bool dispatching;
	uint64_t spin_ns;      /* zl_loop_set_busy_poll */
	uint64_t last_work_ns; /* end of the last iteration that did work */
};

static void loop_wake_cb(void *arg, uint32_t events)
{
	struct zl_loop *loop = arg;
	uint64_t v;

	(void)events;
	if (read(loop->wakefd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing to drain */
	}
}

int zl_loop_create(struct zl_loop **out)
{
	struct zl_loop *loop = calloc(1, sizeof(*loop));
	int rc;

	if (!loop)
		return -ENOMEM;
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epfd < 0) {
		rc = -errno;
		goto out_free;
	}
	loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->wakefd < 0) {
		rc = -errno;
		goto out_epoll;
	}
	rc = zl_loop_add(loop, &loop->wake_h, loop->wakefd, EPOLLIN, loop_wake_cb, loop);
	if (rc)
		goto out_wake;
	loop->now_ns = zl_now_ns();
	*out = loop;
	return 0;

out_wake:
	close(loop->wakefd);
out_epoll:
	close(loop->epfd);
out_free:
	free(loop);
	return rc;
}

void zl_loop_destroy(struct zl_loop *loop)
{
	if (!loop)
		return;
	close(loop->wakefd);
	close(loop->epfd);
	free(loop);
}

int zl_loop_add(struct zl_loop *loop, struct zl_loop_handle *h, int fd, uint32_t events,
		zl_loop_fd_cb cb, void *arg)
{
	struct epoll_event ev = { .events = events, .data.ptr = h };

	h->fd = fd;
	h->events = events;
	h->cb = cb;
	h->arg = arg;
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	return 0;
}

int zl_loop_mod(struct zl_loop *loop, struct zl_loop_handle *h, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = h };

	if (h->events == events)
		return 0;
	if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, h->fd, &ev) < 0)
		return -errno;
	h->events = events;
	return 0;
}

void zl_loop_del(struct zl_loop *loop, struct zl_loop_handle *h)
{
	if (h->fd < 0)
		return;
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	h->fd = -1;
	h->cb = NULL;
	if (loop->dispatching && loop->n_deleted < LOOP_MAX_EVENTS)
		loop->deleted[loop->n_deleted++] = h;
}

void zl_timer_stop(struct zl_loop *loop, struct zl_timer *t)
{
	struct zl_timer **pp;

	if (!t->armed)
		return;
	for (pp = &loop->timers; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	t->armed = false;
	t->next = NULL;
}

static void timer_insert(struct zl_loop *loop, struct zl_timer *t)
{
	struct zl_timer **pp = &loop->timers;

	while (*pp && (*pp)->deadline_ns <= t->deadline_ns)
		pp = &(*pp)->next;
	t->next = *pp;
	*pp = t;
	t->armed = true;
}

void zl_timer_start(struct zl_loop *loop, struct zl_timer *t, uint64_t delay_ms,
		    uint64_t period_ms, zl_loop_cb cb, void *arg)
{
	zl_timer_stop(loop, t);
	t->cb = cb;
	t->arg = arg;
	t->period_ns = period_ms * 1000000ull;
	t->deadline_ns = zl_now_ns() + delay_ms * 1000000ull;
	timer_insert(loop, t);
}

void zl_loop_defer(struct zl_loop *loop, struct zl_defer *d, zl_loop_cb cb, void *arg)
{
	d->cb = cb;
	d->arg = arg;
	if (d->queued)
		return;
	d->queued = true;
	d->next = NULL;
	if (loop->defer_tail)
		loop->defer_tail->next = d;
	else
		loop->defer_head = d;
	loop->defer_tail = d;
}

void zl_loop_defer_cancel(struct zl_loop *loop, struct zl_defer *d)
{
	struct zl_defer *prev = NULL, *cur;

	if (!d->queued)
		return;
	for (cur = loop->defer_head; cur; prev = cur, cur = cur->next) {
		if (cur != d)
			continue;
		if (prev)
			prev->next = cur->next;
		else
			loop->defer_head = cur->next;
		if (loop->defer_tail == cur)
			loop->defer_tail = prev;
		break;
	}
	d->queued = false;
	d->next = NULL;
}

void zl_loop_add_poller(struct zl_loop *loop, struct zl_poller *p, zl_loop_poll_fn fn, void *arg)
{
	p->fn = fn;
	p->arg = arg;
	p->next = loop->pollers;
	loop->pollers = p;
}

void zl_loop_del_poller(struct zl_loop *loop, struct zl_poller *p)
{
	struct zl_poller **pp;

	for (pp = &loop->pollers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

static int loop_run_defers(struct zl_loop *loop)
{
	int n = 0;
	/* Run only what is queued now; callbacks may queue more for the next round. */
	struct zl_defer *tail = loop->defer_tail;

	while (loop->defer_head) {
		struct zl_defer *d = loop->defer_head;
		bool last = (d == tail);

		loop->defer_head = d->next;
		if (!loop->defer_head)
			loop->defer_tail = NULL;
		d->queued = false;
		d->next = NULL;
		d->cb(d->arg);
		n++;
		if (last)
			break;
	}
	return n;
}

static int loop_run_timers(struct zl_loop *loop)
{
	int n = 0;

	while (loop->timers && loop->timers->deadline_ns <= loop->now_ns) {
		struct zl_timer *t = loop->timers;

		loop->timers = t->next;
		t->next = NULL;
		t->armed = false;
		if (t->period_ns) {
			t->deadline_ns += t->period_ns;
			if (t->deadline_ns <= loop->now_ns)
				t->deadline_ns = loop->now_ns + t->period_ns;
			timer_insert(loop, t);
		}
		t->cb(t->arg);
		n++;
	}
	return n;
}

static bool loop_was_deleted(struct zl_loop *loop, struct zl_loop_handle *h)
{
	for (int i = 0; i < loop->n_deleted; i++)
		if (loop->deleted[i] == h)
			return true;
	return false;
}

int zl_loop_run_once(struct zl_loop *loop, int timeout_ms)
{
	struct epoll_event evs[LOOP_MAX_EVENTS];
	int n, work = 0;

	for (struct zl_poller *p = loop->pollers; p; p = p->next)
		work += p->fn(p->arg);
	if (work || loop->defer_head)
		timeout_ms = 0;
	else if (loop->spin_ns && zl_now_ns() - loop->last_work_ns < loop->spin_ns)
		timeout_ms = 0; /* busy polling: work was done a moment ago */
	if (timeout_ms != 0 && loop->timers) {
		uint64_t now = zl_now_ns();
		uint64_t dl = loop->timers->deadline_ns;
		int tmo = dl <= now ? 0 : (int)((dl - now + 999999) / 1000000);

		if (timeout_ms < 0 || tmo < timeout_ms)
			timeout_ms = tmo;
	}
	n = epoll_wait(loop->epfd, evs, LOOP_MAX_EVENTS, timeout_ms);
	if (n < 0) {
		if (errno != EINTR)
			return -errno;
		n = 0;
	}
	loop->now_ns = zl_now_ns();
	loop->in_pass = true;
	loop->dispatching = true;
	loop->n_deleted = 0;
	for (int i = 0; i < n; i++) {
		struct zl_loop_handle *h = evs[i].data.ptr;

		if (loop_was_deleted(loop, h) || !h->cb)
			continue;
		h->cb(h->arg, evs[i].events);
		work++;
	}
	loop->dispatching = false;
	loop->n_deleted = 0;
	work += loop_run_timers(loop);
	work += loop_run_defers(loop);
	loop->in_pass = false;
	if (work)
		loop->last_work_ns = loop->now_ns;
	return work;
}

int zl_loop_run(struct zl_loop *loop)
{
	while (!atomic_load(&loop->stop)) {
		int rc = zl_loop_run_once(loop, -1);

		if (rc < 0)
			return rc;
	}
	return 0;
}

void zl_loop_set_busy_poll(struct zl_loop *loop, uint32_t spin_us)
{
	loop->spin_ns = (uint64_t)spin_us * 1000;
}

void zl_loop_wake(struct zl_loop *loop)
{
	uint64_t one = 1;

	if (write(loop->wakefd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wake is pending anyway */
	}
}

void zl_loop_stop(struct zl_loop *loop)
{
	atomic_store(&loop->stop, true);
	zl_loop_wake(loop);
}

bool zl_loop_stopping(struct zl_loop *loop)
{
	return atomic_load(&loop->stop);
}

uint64_t zl_loop_now_ns(struct zl_loop *loop)
{
	return loop->in_pass ? loop->now_ns : zl_now_ns();
}
