#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/placement/placement.h"

#define GIB (1ull << 30)

/* Every slice's replicas are distinct nodes. */
static void check_distinct(const uint32_t *out, uint32_t n_slices, uint32_t replicas,
			   size_t n_nodes)
{
	for (uint32_t s = 0; s < n_slices; s++) {
		for (uint32_t r = 0; r < replicas; r++) {
			assert_true(out[s * replicas + r] < n_nodes);
			for (uint32_t q = 0; q < r; q++)
				assert_int_not_equal(out[s * replicas + r], out[s * replicas + q]);
		}
	}
}

static void test_equal_nodes_balanced(void **state)
{
	struct zl_place_node nodes[5];
	char ids[5][16];
	uint32_t out[64 * 3];
	unsigned total[5] = {0}, prim[5] = {0};

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(ids[i], sizeof(ids[i]), "node-%d", i);
		nodes[i] = (struct zl_place_node){.id = ids[i], .domain = NULL, .free = 100 * GIB};
	}
	assert_int_equal(zl_placement_compute(nodes, 5, 64, 3, 42, out), 0);
	check_distinct(out, 64, 3, 5);
	for (int i = 0; i < 64 * 3; i++)
		total[out[i]]++;
	for (int s = 0; s < 64; s++)
		prim[out[s * 3]]++;
	for (int i = 0; i < 5; i++) {
		assert_in_range(total[i], 38, 39);
		assert_in_range(prim[i], 12, 13);
	}
}

static void test_domains_distinct(void **state)
{
	/* 6 nodes in 3 zones, ids interleaved so that zone order != id order. */
	static const char *ids[6] = {"a", "b", "c", "d", "e", "f"};
	static const char *zones[6] = {"zone=x", "zone=y", "zone=x", "zone=z", "zone=y", "zone=z"};
	struct zl_place_node nodes[6];
	uint32_t out[64 * 3];
	unsigned total[6] = {0};

	(void)state;
	for (int i = 0; i < 6; i++)
		nodes[i] = (struct zl_place_node){.id = ids[i], .domain = zones[i], .free = GIB};
	assert_int_equal(zl_placement_compute(nodes, 6, 64, 3, 7, out), 0);
	check_distinct(out, 64, 3, 6);
	for (int s = 0; s < 64; s++) {
		const char *z0 = zones[out[s * 3]], *z1 = zones[out[s * 3 + 1]],
			   *z2 = zones[out[s * 3 + 2]];

		assert_string_not_equal(z0, z1);
		assert_string_not_equal(z0, z2);
		assert_string_not_equal(z1, z2);
	}
	for (int i = 0; i < 64 * 3; i++)
		total[out[i]]++;
	for (int i = 0; i < 6; i++)
		assert_in_range(total[i], 31, 33); /* 192 / 6 = 32 */
}

static void test_two_domains_three_replicas(void **state)
{
	static const char *ids[4] = {"n1", "n2", "n3", "n4"};
	static const char *zones[4] = {"a", "a", "b", "b"};
	struct zl_place_node nodes[4];
	uint32_t out[32 * 3];

	(void)state;
	for (int i = 0; i < 4; i++)
		nodes[i] = (struct zl_place_node){.id = ids[i], .domain = zones[i], .free = GIB};
	assert_int_equal(zl_placement_compute(nodes, 4, 32, 3, 1, out), 0);
	check_distinct(out, 32, 3, 4);
	for (int s = 0; s < 32; s++) {
		int in_a = 0, in_b = 0;

		for (int r = 0; r < 3; r++) {
			in_a += !strcmp(zones[out[s * 3 + r]], "a");
			in_b += !strcmp(zones[out[s * 3 + r]], "b");
		}
		assert_true(in_a >= 1 && in_b >= 1);
		/* The first two replicas already cover both zones. */
		assert_string_not_equal(zones[out[s * 3]], zones[out[s * 3 + 1]]);
	}
}

static void test_weighted(void **state)
{
	static const char *ids[4] = {"big", "s1", "s2", "s3"};
	struct zl_place_node nodes[4];
	uint32_t out[128 * 2];
	unsigned total[4] = {0};

	(void)state;
	for (int i = 0; i < 4; i++)
		nodes[i] = (struct zl_place_node){.id = ids[i], .free = (i == 0 ? 200 : 100) * GIB};
	assert_int_equal(zl_placement_compute(nodes, 4, 128, 2, 99, out), 0);
	check_distinct(out, 128, 2, 4);
	for (int i = 0; i < 128 * 2; i++)
		total[out[i]]++;
	/* 256 replicas over weights 2:1:1:1 -> 102.4 vs 51.2 each. */
	for (int i = 1; i < 4; i++) {
		double ratio = (double)total[0] / (double)total[i];

		assert_true(ratio > 1.7 && ratio < 2.3);
	}
	assert_in_range(total[0], 87, 118); /* within 15% of 102.4 */
}

static void test_zero_free_counts_as_one(void **state)
{
	struct zl_place_node nodes[3] = {{"x", NULL, 0}, {"y", NULL, 0}, {"z", NULL, 0}};
	uint32_t out[9 * 3];
	unsigned total[3] = {0};

	(void)state;
	assert_int_equal(zl_placement_compute(nodes, 3, 9, 3, 5, out), 0);
	check_distinct(out, 9, 3, 3);
	for (int i = 0; i < 27; i++)
		total[out[i]]++;
	for (int i = 0; i < 3; i++)
		assert_int_equal(total[i], 9);
}

static void test_order_independent(void **state)
{
	static const char *ids[7] = {"n-a", "n-b", "n-c", "n-d", "n-e", "n-f", "n-g"};
	static const char *zones[7] = {"r1", "r2", "r3", "r1", "r2", "r3", ""};
	static const uint64_t free_gb[7] = {10, 20, 30, 40, 50, 60, 70};
	static const int perm[7] = {4, 6, 0, 2, 5, 1, 3};
	struct zl_place_node a[7], b[7];
	uint32_t out_a[50 * 3], out_b[50 * 3], out_c[50 * 3];

	(void)state;
	for (int i = 0; i < 7; i++) {
		a[i] = (struct zl_place_node){ids[i], zones[i], free_gb[i] * GIB};
		b[i] = (struct zl_place_node){ids[perm[i]], zones[perm[i]], free_gb[perm[i]] * GIB};
	}
	assert_int_equal(zl_placement_compute(a, 7, 50, 3, 1234, out_a), 0);
	assert_int_equal(zl_placement_compute(b, 7, 50, 3, 1234, out_b), 0);
	for (int i = 0; i < 50 * 3; i++)
		assert_string_equal(a[out_a[i]].id, b[out_b[i]].id);
	/* Same input, same output; another seed gives another table. */
	assert_int_equal(zl_placement_compute(a, 7, 50, 3, 1234, out_c), 0);
	assert_memory_equal(out_a, out_c, sizeof(out_a));
	assert_int_equal(zl_placement_compute(a, 7, 50, 3, 4321, out_c), 0);
	assert_memory_not_equal(out_a, out_c, sizeof(out_a));
}

static void test_errors(void **state)
{
	struct zl_place_node nodes[3] = {{"x", NULL, 1}, {"y", NULL, 1}, {"z", NULL, 1}};
	struct zl_place_node dup[3] = {{"x", NULL, 1}, {"y", NULL, 1}, {"x", NULL, 1}};
	uint32_t out[16];

	(void)state;
	assert_int_equal(zl_placement_compute(nodes, 2, 4, 3, 0, out), -ZL_ERR_NODES);
	assert_int_equal(zl_placement_compute(nodes, 0, 4, 1, 0, out), -ZL_ERR_NODES);
	assert_int_equal(zl_placement_compute(nodes, 3, 4, 0, 0, out), -ZL_ERR_INVAL);
	assert_int_equal(zl_placement_compute(nodes, 3, 4, 4, 0, out), -ZL_ERR_INVAL);
	assert_int_equal(zl_placement_compute(nodes, 3, 0, 3, 0, out), -ZL_ERR_INVAL);
	assert_int_equal(zl_placement_compute(nodes, 3, 4, 3, 0, NULL), -ZL_ERR_INVAL);
	assert_int_equal(zl_placement_compute(dup, 3, 4, 3, 0, out), -ZL_ERR_INVAL);
	/* Exactly as many nodes as replicas works: every slice uses all. */
	assert_int_equal(zl_placement_compute(nodes, 3, 4, 3, 0, out), 0);
	check_distinct(out, 4, 3, 3);
	assert_int_equal(zl_placement_compute(nodes, 1, 5, 1, 0, out), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(out[i], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_equal_nodes_balanced),
	    cmocka_unit_test(test_domains_distinct),
	    cmocka_unit_test(test_two_domains_three_replicas),
	    cmocka_unit_test(test_weighted),
	    cmocka_unit_test(test_zero_free_counts_as_one),
	    cmocka_unit_test(test_order_independent),
	    cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
