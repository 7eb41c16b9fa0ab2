/* zl_worker: run goes to the helper thread and done comes back to the loop
 * thread, in submission order; a job is refused while busy; destroy waits
 * for the running job and cancels the queued ones (done with cancelled). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/worker.h"

struct job {
	struct zl_work w;
	pthread_t run_thread, done_thread;
	int started, ran, done, order;
	bool cancelled;
	unsigned sleep_ms;
};

static int next_order;

static void job_run(struct zl_work *w)
{
	struct job *j = ZL_CONTAINER_OF(w, struct job, w);

	__atomic_store_n(&j->started, 1, __ATOMIC_SEQ_CST);
	if (j->sleep_ms)
		usleep(j->sleep_ms * 1000);
	j->run_thread = pthread_self();
	j->ran++;
}

static void job_done(struct zl_work *w)
{
	struct job *j = ZL_CONTAINER_OF(w, struct job, w);

	j->done_thread = pthread_self();
	j->done++;
	j->cancelled = w->cancelled;
	j->order = ++next_order;
}

static void test_run_and_done(void **state)
{
	struct zl_loop *loop;
	struct zl_worker *wk;
	struct job a, b;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	next_order = 0;
	assert_int_equal(zl_loop_create(&loop), 0);
	assert_int_equal(zl_worker_create(loop, &wk), 0);
	a.sleep_ms = 20;
	assert_int_equal(zl_worker_submit(wk, &a.w, job_run, job_done), 0);
	assert_int_equal(zl_worker_submit(wk, &a.w, job_run, job_done), -EBUSY);
	assert_int_equal(zl_worker_submit(wk, &b.w, job_run, job_done), 0);
	/* The loop does not wait for the 20 ms job. */
	assert_int_equal(a.done, 0);
	for (int i = 0; i < 100 && !b.done; i++)
		zl_loop_run_once(loop, 50);
	assert_int_equal(a.ran, 1);
	assert_int_equal(b.ran, 1);
	assert_int_equal(a.done, 1);
	assert_int_equal(b.done, 1);
	assert_false(a.cancelled);
	assert_int_equal(a.order, 1);
	assert_int_equal(b.order, 2);
	assert_false(pthread_equal(a.run_thread, pthread_self()));
	assert_true(pthread_equal(a.done_thread, pthread_self()));
	assert_true(pthread_equal(b.done_thread, pthread_self()));
	/* Done: it may go again. */
	assert_int_equal(zl_worker_submit(wk, &a.w, job_run, job_done), 0);
	for (int i = 0; i < 100 && a.done < 2; i++)
		zl_loop_run_once(loop, 50);
	assert_int_equal(a.done, 2);
	zl_worker_destroy(wk);
	zl_loop_destroy(loop);
}

static void test_destroy_cancels(void **state)
{
	struct zl_loop *loop;
	struct zl_worker *wk;
	struct job a, b;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	assert_int_equal(zl_loop_create(&loop), 0);
	assert_int_equal(zl_worker_create(loop, &wk), 0);
	a.sleep_ms = 100;
	assert_int_equal(zl_worker_submit(wk, &a.w, job_run, job_done), 0);
	assert_int_equal(zl_worker_submit(wk, &b.w, job_run, job_done), 0);
	while (!__atomic_load_n(&a.started, __ATOMIC_SEQ_CST))
		usleep(1000); /* a is running: b waits behind it */
	zl_worker_destroy(wk);
	/* a ran to its end; b never ran; both got done on this thread. */
	assert_int_equal(a.ran, 1);
	assert_int_equal(a.done, 1);
	assert_int_equal(b.ran, 0);
	assert_int_equal(b.done, 1);
	assert_true(b.cancelled);
	assert_true(pthread_equal(b.done_thread, pthread_self()));
	zl_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_and_done),
		cmocka_unit_test(test_destroy_cancels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
