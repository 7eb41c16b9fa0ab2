/* zl_notify: a post from another thread runs the callback on the loop
 * thread; posts before a run coalesce; fini is safe twice and on a zeroed
 * struct. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/notify.h"

struct ctx {
	struct zl_notify n;
	int calls;
	pthread_t cb_thread;
};

static void on_wake(void *arg)
{
	struct ctx *c = arg;

	c->calls++;
	c->cb_thread = pthread_self();
}

static void *poster(void *arg)
{
	struct ctx *c = arg;

	for (int i = 0; i < 3; i++)
		zl_notify_post(&c->n);
	return NULL;
}

static void test_post_from_thread(void **state)
{
	struct zl_loop *loop;
	struct ctx c;
	pthread_t t;

	(void)state;
	memset(&c, 0, sizeof(c));
	assert_int_equal(zl_loop_create(&loop), 0);
	assert_int_equal(zl_notify_init(&c.n, loop, on_wake, &c), 0);
	/* nothing posted: nothing runs */
	zl_loop_run_once(loop, 0);
	assert_int_equal(c.calls, 0);
	assert_int_equal(pthread_create(&t, NULL, poster, &c), 0);
	pthread_join(t, NULL);
	/* three posts before the loop ran: one callback, on this thread */
	for (int i = 0; i < 20 && !c.calls; i++)
		zl_loop_run_once(loop, 50);
	assert_int_equal(c.calls, 1);
	assert_true(pthread_equal(c.cb_thread, pthread_self()));
	zl_loop_run_once(loop, 0);
	assert_int_equal(c.calls, 1);
	zl_notify_post(&c.n);
	for (int i = 0; i < 20 && c.calls < 2; i++)
		zl_loop_run_once(loop, 50);
	assert_int_equal(c.calls, 2);
	zl_notify_fini(&c.n);
	zl_notify_fini(&c.n);
	zl_loop_destroy(loop);
}

static void test_fini_zeroed(void **state)
{
	struct zl_notify n;

	(void)state;
	memset(&n, 0, sizeof(n));
	zl_notify_fini(&n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_post_from_thread),
	    cmocka_unit_test(test_fini_zeroed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
