/* Scrub's verdict for one chunk (zl_storage_scrub_judge, storage.h): the
 * winner is the highest version among good copies, ties to the primary's
 * copy (index 0); missing, bad and divergent copies are rewritten; a copy
 * not held is fine only next to an all-zero version-0 chunk; BUSY means no
 * verdict. Pure function: no daemon, no disk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "storage/storage_heal.h"

#define ZD 0x1234u /* the all-zero digest of the test's chunk size */

static struct zl_scrub_copy cp(uint64_t ver, uint32_t digest, uint32_t bad)
{
	struct zl_scrub_copy c = {.held = true, .version = ver, .digest = digest, .bad = bad};

	return c;
}

static const struct zl_scrub_copy none = {0};

static void test_all_equal(void **state)
{
	struct zl_scrub_copy c[3] = {cp(5, 7, 0), cp(5, 7, 0), cp(5, 7, 0)};
	const char *why[3];
	uint32_t rep;

	(void)state;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 0);
	assert_int_equal(rep, 0);
}

static void test_bad_missing_divergent(void **state)
{
	/* primary bad (crc), member 1 good, member 2 missing */
	struct zl_scrub_copy c[3] = {cp(5, 7, 2), cp(5, 7, 0), cp(5, 0, ZL_WIRE_DIGEST_MISSING)};
	const char *why[3];
	uint32_t rep;

	(void)state;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 1);
	assert_int_equal(rep, 1u | 4u);
	assert_string_equal(why[0], "crc");
	assert_string_equal(why[2], "missing");
	/* same version, other digest, both good: the primary's copy wins */
	c[0] = cp(5, 7, 0);
	c[2] = cp(5, 8, 0);
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 0);
	assert_int_equal(rep, 4u);
	assert_string_equal(why[2], "divergent");
	/* ... unless the primary's copy is bad: the first good member wins */
	c[0] = cp(5, 7, 1);
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 1);
	assert_int_equal(rep, 1u | 4u);
	/* a copy not held at all is missing */
	c[0] = cp(5, 7, 0);
	c[2] = none;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 0);
	assert_int_equal(rep, 4u);
	assert_string_equal(why[2], "missing");
}

static void test_newest_good_wins(void **state)
{
	/* the newest copy is bad: the newest good one wins, even a member's */
	struct zl_scrub_copy c[3] = {cp(4, 1, 0), cp(9, 2, 3), cp(6, 3, 0)};
	const char *why[3];
	uint32_t rep;

	(void)state;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 2);
	assert_int_equal(rep, 1u | 2u);
	assert_string_equal(why[0], "divergent"); /* older, good: rolled forward */
	assert_string_equal(why[1], "crc");
	/* versions of a later term order after any of an earlier one */
	c[0] = cp(zl_wire_dver_make(3, 1), 5, 0);
	c[1] = cp(zl_wire_dver_make(2, 900), 6, 0);
	c[2] = cp(zl_wire_dver_make(3, 1), 5, 0);
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), 0);
	assert_int_equal(rep, 2u);
}

static void test_no_verdict_and_no_good_copy(void **state)
{
	struct zl_scrub_copy c[3] = {cp(5, 7, 0), cp(5, 7, ZL_WIRE_DIGEST_BUSY), cp(5, 7, 0)};
	struct zl_scrub_copy z[2] = {none, none};
	const char *why[3];
	uint32_t rep;

	(void)state;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), -2);
	assert_int_equal(zl_storage_scrub_judge(z, 2, ZD, &rep, why), -2);
	c[0] = cp(5, 0, ZL_WIRE_DIGEST_MISSING);
	c[1] = cp(5, 7, 1);
	c[2] = none;
	assert_int_equal(zl_storage_scrub_judge(c, 3, ZD, &rep, why), -1);
	assert_int_equal(rep, 1u | 2u); /* the held ones */
	assert_string_equal(why[0], "missing");
	assert_string_equal(why[1], "crc");
}

static void test_zero_chunk_absent_is_fine(void **state)
{
	/* a chunk of zeros at version 0 (written, then never versioned) and a
	 * member without the file hold the same bytes */
	struct zl_scrub_copy c[2] = {cp(0, ZD, 0), none};
	const char *why[2];
	uint32_t rep;

	(void)state;
	assert_int_equal(zl_storage_scrub_judge(c, 2, ZD, &rep, why), 0);
	assert_int_equal(rep, 0);
	c[0] = cp(0, ZD + 1, 0); /* not zeros: the absent copy is missing */
	assert_int_equal(zl_storage_scrub_judge(c, 2, ZD, &rep, why), 0);
	assert_int_equal(rep, 2u);
	c[0] = cp(1, ZD, 0); /* a versioned zeroing: the member must hold it */
	assert_int_equal(zl_storage_scrub_judge(c, 2, ZD, &rep, why), 0);
	assert_int_equal(rep, 2u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_all_equal),
	    cmocka_unit_test(test_bad_missing_divergent),
	    cmocka_unit_test(test_newest_good_wins),
	    cmocka_unit_test(test_no_verdict_and_no_good_copy),
	    cmocka_unit_test(test_zero_chunk_absent_is_fine),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
