/* Helper thread handing results back to a loop (see worker.h). */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "notify.h"

struct zl_worker {
	struct zl_loop *loop;
	pthread_t thread;
	bool thread_up;
	struct zl_notify done_wake; /* helper -> loop: finished jobs */
	/* mu protects pending (jobs submitted, not yet run), finished and stop;
	 * cond wakes the helper. */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	bool stop;
	struct zl_work *pending, **pending_tail;
	struct zl_work *fin, **fin_tail;
};

static void *worker_main(void *arg)
{
	struct zl_worker *wk = arg;

	pthread_mutex_lock(&wk->mu);
	for (;;) {
		struct zl_work *w;

		while (!wk->stop && !wk->pending)
			pthread_cond_wait(&wk->cond, &wk->mu);
		if (wk->stop)
			break;
		w = wk->pending;
		wk->pending = w->next;
		if (!wk->pending)
			wk->pending_tail = &wk->pending;
		pthread_mutex_unlock(&wk->mu);
		w->run(w);
		pthread_mutex_lock(&wk->mu);
		w->next = NULL;
		*wk->fin_tail = w;
		wk->fin_tail = &w->next;
		zl_notify_post(&wk->done_wake);
	}
	pthread_mutex_unlock(&wk->mu);
	return NULL;
}

/* Runs done of a list of jobs (loop thread). */
static void worker_finish(struct zl_work *w, bool cancelled)
{
	while (w) {
		struct zl_work *next = w->next;

		w->next = NULL;
		w->busy = false;
		w->cancelled = cancelled;
		w->done(w);
		w = next;
	}
}

static void worker_done_cb(void *arg)
{
	struct zl_worker *wk = arg;
	struct zl_work *w;

	pthread_mutex_lock(&wk->mu);
	w = wk->fin;
	wk->fin = NULL;
	wk->fin_tail = &wk->fin;
	pthread_mutex_unlock(&wk->mu);
	worker_finish(w, false);
}

int zl_worker_create(struct zl_loop *loop, struct zl_worker **out)
{
	struct zl_worker *wk = calloc(1, sizeof(*wk));
	sigset_t all, old;
	int rc;

	if (!wk)
		return -ENOMEM;
	wk->loop = loop;
	wk->pending_tail = &wk->pending;
	wk->fin_tail = &wk->fin;
	pthread_mutex_init(&wk->mu, NULL);
	pthread_cond_init(&wk->cond, NULL);
	rc = zl_notify_init(&wk->done_wake, loop, worker_done_cb, wk);
	if (rc)
		goto out_free;
	/* The helper takes no signal (a process that reads them from a
	 * signalfd blocks them only in its own threads, maybe later). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&wk->thread, NULL, worker_main, wk);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		goto out_free;
	wk->thread_up = true;
	*out = wk;
	return 0;

out_free:
	zl_worker_destroy(wk);
	return rc;
}

void zl_worker_destroy(struct zl_worker *wk)
{
	if (!wk)
		return;
	if (wk->thread_up) {
		pthread_mutex_lock(&wk->mu);
		wk->stop = true;
		pthread_cond_signal(&wk->cond);
		pthread_mutex_unlock(&wk->mu);
		pthread_join(wk->thread, NULL);
	}
	zl_notify_fini(&wk->done_wake);
	worker_finish(wk->fin, false);
	worker_finish(wk->pending, true);
	pthread_mutex_destroy(&wk->mu);
	pthread_cond_destroy(&wk->cond);
	free(wk);
}

int zl_worker_submit(struct zl_worker *wk, struct zl_work *w, zl_work_fn run, zl_work_fn done)
{
	if (w->busy)
		return -EBUSY;
	w->run = run;
	w->done = done;
	w->busy = true;
	w->cancelled = false;
	w->next = NULL;
	pthread_mutex_lock(&wk->mu);
	*wk->pending_tail = w;
	wk->pending_tail = &w->next;
	pthread_cond_signal(&wk->cond);
	pthread_mutex_unlock(&wk->mu);
	return 0;
}
