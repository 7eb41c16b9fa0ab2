#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/resource.h>
#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"

struct ctx {
	int fd_calls, timer_calls, defer_calls, order[8], n_order;
	struct zl_loop *loop;
	struct zl_loop_handle h;
	char buf[16];
};

static void on_read(void *arg, uint32_t ev)
{
	struct ctx *c = arg;

	(void)ev;
	assert_true(read(c->h.fd, c->buf, sizeof(c->buf)) > 0);
	c->fd_calls++;
}

static void on_timer(void *arg)
{
	((struct ctx *)arg)->timer_calls++;
}

static void on_defer(void *arg)
{
	struct ctx *c = arg;

	c->order[c->n_order++] = ++c->defer_calls;
}

static void test_fd_timer_defer(void **state)
{
	struct ctx c = { 0 };
	struct zl_timer t = { 0 }, periodic = { 0 };
	struct zl_defer d1 = { 0 }, d2 = { 0 };
	int p[2];
	uint64_t start;

	(void)state;
	assert_int_equal(zl_loop_create(&c.loop), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(zl_loop_add(c.loop, &c.h, p[0], EPOLLIN, on_read, &c), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	zl_loop_run_once(c.loop, 1000);
	assert_int_equal(c.fd_calls, 1);

	start = zl_now_ms();
	zl_timer_start(c.loop, &t, 30, 0, on_timer, &c);
	while (c.timer_calls == 0 && zl_now_ms() - start < 2000)
		zl_loop_run_once(c.loop, -1);
	assert_int_equal(c.timer_calls, 1);
	assert_true(zl_now_ms() - start >= 29);

	zl_timer_start(c.loop, &periodic, 5, 5, on_timer, &c);
	while (c.timer_calls < 4 && zl_now_ms() - start < 2000)
		zl_loop_run_once(c.loop, -1);
	assert_int_equal(c.timer_calls, 4);
	zl_timer_stop(c.loop, &periodic);

	zl_loop_defer(c.loop, &d1, on_defer, &c);
	zl_loop_defer(c.loop, &d2, on_defer, &c);
	zl_loop_defer(c.loop, &d1, on_defer, &c); /* already queued: once */
	zl_loop_run_once(c.loop, 1000);
	assert_int_equal(c.defer_calls, 2);

	zl_loop_del(c.loop, &c.h);
	close(p[0]);
	close(p[1]);
	zl_loop_destroy(c.loop);
}

static void *stopper(void *arg)
{
	usleep(20000);
	zl_loop_stop(arg);
	return NULL;
}

static void test_stop_from_thread(void **state)
{
	struct zl_loop *loop;
	pthread_t th;

	(void)state;
	assert_int_equal(zl_loop_create(&loop), 0);
	pthread_create(&th, NULL, stopper, loop);
	assert_int_equal(zl_loop_run(loop), 0);
	pthread_join(th, NULL);
	assert_true(zl_loop_stopping(loop));
	zl_loop_destroy(loop);
}

static uint64_t thread_cpu_us(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Busy polling: right after work an iteration polls instead of sleeping;
 * past the window, and when idle, the loop sleeps (it costs no CPU). */
static void test_busy_poll(void **state)
{
	struct zl_loop *loop;
	struct ctx c = {0};
	struct zl_defer d = {0};
	struct zl_timer t = {0};
	uint64_t t0, cpu;

	(void)state;
	assert_int_equal(zl_loop_create(&loop), 0);
	zl_loop_set_busy_poll(loop, 20000); /* 20 ms */
	zl_loop_defer(loop, &d, on_defer, &c);
	assert_int_equal(zl_loop_run_once(loop, -1), 1);
	t0 = zl_now_ns();
	assert_int_equal(zl_loop_run_once(loop, 1000), 0); /* polled, did not sleep 1 s */
	assert_true(zl_now_ns() - t0 < 15000000ull);
	usleep(30000); /* past the window: the next iteration sleeps */
	t0 = zl_now_ns();
	assert_int_equal(zl_loop_run_once(loop, 60), 0);
	assert_true(zl_now_ns() - t0 >= 50000000ull);
	/* Idle for 500 ms (until a timer) with busy polling on: under 1 % of
	 * a core. */
	cpu = thread_cpu_us();
	zl_timer_start(loop, &t, 500, 0, on_timer, &c);
	while (!c.timer_calls)
		assert_true(zl_loop_run_once(loop, -1) >= 0);
	cpu = thread_cpu_us() - cpu;
	print_message("busy poll on, idle 500 ms: %" PRIu64 " us of CPU\n", cpu);
	assert_true(cpu < 5000);
	/* Off: an iteration right after work sleeps again. */
	zl_loop_set_busy_poll(loop, 0);
	zl_loop_defer(loop, &d, on_defer, &c);
	assert_int_equal(zl_loop_run_once(loop, -1), 1);
	t0 = zl_now_ns();
	assert_int_equal(zl_loop_run_once(loop, 60), 0);
	assert_true(zl_now_ns() - t0 >= 50000000ull);
	zl_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd_timer_defer),
		cmocka_unit_test(test_stop_from_thread),
		cmocka_unit_test(test_busy_poll),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
