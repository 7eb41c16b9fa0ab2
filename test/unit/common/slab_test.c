/* zl_slab: objects come from slabs, are recycled LIFO, stay aligned and
 * distinct, and fini frees everything (ASan checks the leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/slab.h"

struct obj {
	void *link;
	uint64_t payload[5];
};

static void test_alloc_free_reuse(void **state)
{
	struct zl_slab s;
	struct obj *a, *b, *c;

	(void)state;
	zl_slab_init(&s, sizeof(struct obj), 4);
	assert_int_equal(s.n_slabs, 0);
	a = zl_slab_alloc(&s);
	b = zl_slab_alloc(&s);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	assert_int_equal(s.n_slabs, 1);
	assert_int_equal(s.in_use, 2);
	/* objects of one slab are in address order and do not overlap */
	assert_true((char *)b - (char *)a == (ptrdiff_t)sizeof(struct obj));
	memset(a, 0xab, sizeof(*a));
	memset(b, 0xcd, sizeof(*b));
	assert_int_equal(((uint8_t *)a)[sizeof(*a) - 1], 0xab);
	zl_slab_free(&s, a);
	assert_int_equal(s.in_use, 1);
	c = zl_slab_alloc(&s); /* LIFO: the object just freed */
	assert_ptr_equal(c, a);
	zl_slab_free(&s, NULL);
	assert_int_equal(s.in_use, 2);
	zl_slab_fini(&s);
	assert_int_equal(s.n_slabs, 0);
	zl_slab_fini(&s); /* twice is fine */
}

static void test_grows_by_slabs(void **state)
{
	struct zl_slab s;
	void *objs[10];

	(void)state;
	zl_slab_init(&s, sizeof(struct obj), 3);
	for (int i = 0; i < 10; i++) {
		objs[i] = zl_slab_alloc(&s);
		assert_non_null(objs[i]);
		assert_true((uintptr_t)objs[i] % sizeof(void *) == 0);
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(objs[i], objs[j]);
	}
	assert_int_equal(s.n_slabs, 4); /* ceil(10 / 3) */
	assert_int_equal(s.in_use, 10);
	for (int i = 0; i < 10; i++)
		zl_slab_free(&s, objs[i]);
	assert_int_equal(s.in_use, 0);
	/* all 12 come back without a new slab */
	for (int i = 0; i < 12; i++)
		assert_non_null(zl_slab_alloc(&s));
	assert_int_equal(s.n_slabs, 4);
	assert_non_null(zl_slab_alloc(&s));
	assert_int_equal(s.n_slabs, 5);
	zl_slab_fini(&s);
}

static void test_small_objects_and_default(void **state)
{
	struct zl_slab s;
	char *a, *b;

	(void)state;
	zl_slab_init(&s, 1, 0); /* rounded up to a pointer, 128 per slab */
	assert_int_equal(s.obj_size, sizeof(void *));
	assert_int_equal(s.per_slab, 128);
	a = zl_slab_alloc(&s);
	b = zl_slab_alloc(&s);
	assert_true(b - a == (ptrdiff_t)sizeof(void *));
	zl_slab_fini(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alloc_free_reuse),
	    cmocka_unit_test(test_grows_by_slabs),
	    cmocka_unit_test(test_small_objects_and_default),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
