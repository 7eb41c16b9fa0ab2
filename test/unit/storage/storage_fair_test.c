/* Admission of storage/storage_fair.c: a volume alone is never bounded;
 * under contention a volume over its share waits in order and goes as its
 * own operations end; a light volume is admitted at once; off admits all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "storage/storage_fair.h"

#define MS 1000000ull

struct ran {
	struct zl_storage_fair_item *it[64];
	int n;
};

static void on_run(void *arg, struct zl_storage_fair_item *it)
{
	struct ran *r = arg;

	r->it[r->n++] = it;
}

static struct zl_storage_fair *fair_new(bool on, struct ran *r)
{
	struct zl_storage_fair_opts o;
	struct zl_storage_fair *f;

	zl_storage_fair_opts_default(&o);
	o.on = on;
	o.share_bytes = 256u << 10;
	memset(r, 0, sizeof(*r));
	assert_int_equal(zl_storage_fair_create(&o, on_run, r, &f), 0);
	return f;
}

static void test_alone_unbounded(void **state)
{
	struct zl_storage_fair_item it[32];
	struct zl_storage_fair_stats s;
	struct ran r;
	struct zl_storage_fair *f = fair_new(true, &r);

	(void)state;
	memset(it, 0, sizeof(it));
	for (int i = 0; i < 32; i++)
		assert_true(zl_storage_fair_admit(f, &it[i], zl_hash64(7), 1u << 20, 1 * MS));
	zl_storage_fair_stats(f, &s);
	assert_int_equal(s.inflight, 32);
	assert_int_equal(s.queued, 0);
	for (int i = 0; i < 32; i++)
		zl_storage_fair_done(f, &it[i]);
	zl_storage_fair_stats(f, &s);
	assert_int_equal(s.inflight, 0);
	assert_int_equal(r.n, 0);
	zl_storage_fair_destroy(f);
}

static void test_contended_share(void **state)
{
	struct zl_storage_fair_item hog[8], v[2];
	struct zl_storage_fair_stats s;
	struct ran r;
	struct zl_storage_fair *f = fair_new(true, &r);
	/* The drain reads the clock itself: admissions at the real time. */
	uint64_t now = zl_now_ns();

	(void)state;
	memset(hog, 0, sizeof(hog));
	memset(v, 0, sizeof(v));
	/* Another volume's operation starts contention. */
	assert_true(zl_storage_fair_admit(f, &v[0], zl_hash64(9), 4096, now));
	/* The hog: one operation over the share goes (at least one), the
	 * rest waits in order. */
	assert_true(zl_storage_fair_admit(f, &hog[0], zl_hash64(7), 1u << 20, now));
	for (int i = 1; i < 8; i++)
		assert_false(zl_storage_fair_admit(f, &hog[i], zl_hash64(7), 1u << 20, now));
	/* The light volume is admitted at once while the hog waits. */
	assert_true(zl_storage_fair_admit(f, &v[1], zl_hash64(9), 4096, now));
	zl_storage_fair_stats(f, &s);
	assert_int_equal(s.queued, 7);
	assert_int_equal(s.waiting, 7);
	zl_storage_fair_done(f, &v[0]);
	zl_storage_fair_done(f, &v[1]);
	assert_int_equal(r.n, 0);
	/* Each hog completion admits the next, in order. */
	for (int i = 0; i < 7; i++) {
		zl_storage_fair_done(f, &hog[i]);
		assert_int_equal(r.n, i + 1);
		assert_ptr_equal(r.it[i], &hog[i + 1]);
	}
	zl_storage_fair_done(f, &hog[7]);
	zl_storage_fair_done(f, &hog[7]); /* twice: nothing */
	zl_storage_fair_stats(f, &s);
	assert_int_equal(s.inflight, 0);
	assert_int_equal(s.waiting, 0);
	zl_storage_fair_destroy(f);
}

/* A queued operation admitted by a completion may end at once (its
 * submission failed): the drain goes on with the next ones. */
static struct zl_storage_fair *nested_f;
static void on_run_fail(void *arg, struct zl_storage_fair_item *it)
{
	struct ran *r = arg;

	r->it[r->n++] = it;
	zl_storage_fair_done(nested_f, it);
}

static void test_nested_done(void **state)
{
	struct zl_storage_fair_item hog[4], v;
	struct zl_storage_fair_opts o;
	struct zl_storage_fair_stats s;
	struct ran r;
	uint64_t now = zl_now_ns();

	(void)state;
	memset(hog, 0, sizeof(hog));
	memset(&v, 0, sizeof(v));
	memset(&r, 0, sizeof(r));
	zl_storage_fair_opts_default(&o);
	assert_int_equal(zl_storage_fair_create(&o, on_run_fail, &r, &nested_f), 0);
	assert_true(zl_storage_fair_admit(nested_f, &v, zl_hash64(9), 4096, now));
	assert_true(zl_storage_fair_admit(nested_f, &hog[0], zl_hash64(7), 1u << 20, now));
	for (int i = 1; i < 4; i++)
		assert_false(zl_storage_fair_admit(nested_f, &hog[i], zl_hash64(7), 1u << 20, now));
	zl_storage_fair_done(nested_f, &hog[0]);
	assert_int_equal(r.n, 3);
	zl_storage_fair_stats(nested_f, &s);
	assert_int_equal(s.waiting, 0);
	assert_int_equal(s.inflight, 1); /* v */
	zl_storage_fair_done(nested_f, &v);
	zl_storage_fair_destroy(nested_f);
}

static void test_off(void **state)
{
	struct zl_storage_fair_item it[4];
	struct zl_storage_fair_stats s;
	struct ran r;
	struct zl_storage_fair *f = fair_new(false, &r);

	(void)state;
	memset(it, 0, sizeof(it));
	for (int i = 0; i < 4; i++)
		assert_true(zl_storage_fair_admit(f, &it[i], zl_hash64((uint64_t)i % 2), 1u << 20, 1 * MS));
	for (int i = 0; i < 4; i++)
		zl_storage_fair_done(f, &it[i]);
	zl_storage_fair_stats(f, &s);
	assert_int_equal(s.queued, 0);
	assert_int_equal(s.inflight, 0);
	zl_storage_fair_destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alone_unbounded),
	    cmocka_unit_test(test_contended_share),
	    cmocka_unit_test(test_nested_done),
	    cmocka_unit_test(test_off),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
