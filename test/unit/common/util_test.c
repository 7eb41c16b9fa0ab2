#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lib/common/common.h"

/* Joined piece CRCs equal the CRC of the whole, for every count and data,
 * and any change to one piece changes the join. */
static void test_crc32c_4k_join(void **state)
{
	static uint8_t buf[64 * 4096];
	static uint32_t crcs[64];

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(zl_crc32c_4k_join(crcs, 0), 0);
	for (size_t n = 1; n <= 64; n++) {
		uint32_t whole = zl_crc32c(buf, n * 4096);

		assert_int_equal(zl_crc32c_4k_pieces(buf, n, crcs), whole);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(crcs[i], zl_crc32c(buf + i * 4096, 4096));
		assert_int_equal(zl_crc32c_4k_join(crcs, n), whole);
		crcs[n / 2] ^= 1u << (n % 32);
		assert_int_not_equal(zl_crc32c_4k_join(crcs, n), whole);
	}
	memset(buf, 0, 2 * 4096);
	assert_int_equal(zl_crc32c_4k_pieces(buf, 2, crcs), zl_crc32c(buf, 2 * 4096));
}

static void test_crc32c_vectors(void **state)
{
	(void)state;
	assert_int_equal(zl_crc32c("123456789", 9), 0xe3069283u);
	assert_int_equal(zl_crc32c("", 0), 0);
	/* Chaining over pieces equals one pass. */
	assert_int_equal(zl_crc32c_update(zl_crc32c("1234", 4), "56789", 5), 0xe3069283u);
	uint8_t zeros[32] = { 0 };
	assert_int_equal(zl_crc32c(zeros, sizeof(zeros)), 0x8a9136aau); /* RFC 3720 B.4 */
}

/* Bit by bit (RFC 3720's reflected polynomial 0x82f63b78): the oracle for
 * every length and alignment around the small-buffer path's limit (256). */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t len)
{
	uint32_t c = ~0u;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

static void test_crc32c_lengths(void **state)
{
	static uint8_t buf[600];

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 11);
	for (size_t a = 0; a < 8; a++)
		for (size_t n = 0; n + a <= sizeof(buf); n++) {
			uint32_t want = crc32c_bitwise(buf + a, n);

			assert_int_equal(zl_crc32c(buf + a, n), want);
			if (n == 76) /* the unrolled header CRC, at every alignment */
				assert_int_equal(zl_crc32c_76(buf + a), want);
			/* Chained at every split of a short prefix. */
			assert_int_equal(zl_crc32c_update(zl_crc32c(buf + a, n / 3), buf + a + n / 3,
							  n - n / 3),
					 want);
		}
}

static void test_parse_size(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(zl_parse_size("10G", &v), 0);
	assert_true(v == 10ull << 30);
	assert_int_equal(zl_parse_size("4M", &v), 0);
	assert_true(v == 4ull << 20);
	assert_int_equal(zl_parse_size("4MiB", &v), 0);
	assert_true(v == 4ull << 20);
	assert_int_equal(zl_parse_size("512", &v), 0);
	assert_true(v == 512);
	assert_int_equal(zl_parse_size("1t", &v), 0);
	assert_true(v == 1ull << 40);
	assert_int_equal(zl_parse_size("", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_parse_size("-1G", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_parse_size("10X", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_parse_size("G", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_parse_size("99999999999999999999", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_parse_size("20000000P", &v), -ZL_ERR_INVAL);
}

static void test_vol_id(void **state)
{
	char id[ZL_VOL_ID_LEN + 1];
	uint64_t n;

	(void)state;
	zl_vol_id_format(0x0123456789abcdefull, id);
	assert_string_equal(id, "vol-0123456789abcdef");
	assert_int_equal(zl_vol_id_parse(id, &n), 0);
	assert_true(n == 0x0123456789abcdefull);
	assert_int_equal(zl_vol_id_parse("vol-0123", &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_id_parse("vol-0123456789abcdeg", &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_id_parse("vol-0000000000000000", &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_vol_id_parse("vox-0123456789abcdef", &n), -ZL_ERR_INVAL);
}

static void test_u64_push(void **state)
{
	uint64_t *a = NULL;
	size_t n = 0, cap = 0;

	(void)state;
	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(zl_u64_push(&a, &n, &cap, i * 3), 0);
	assert_int_equal(n, 40);
	assert_true(cap >= 40);
	for (uint64_t i = 0; i < 40; i++)
		assert_int_equal(a[i], i * 3);
	free(a);
}

static void test_errors_and_names(void **state)
{
	(void)state;
	assert_string_equal(zl_errname(-ZL_ERR_STALE), "ZL_ERR_STALE");
	assert_string_equal(zl_errname(-2), "ENOENT");
	assert_non_null(strstr(zl_strerror(-ZL_ERR_CORRUPT), "CRC"));
	assert_int_equal(zl_node_id_check("node-1"), 0);
	assert_int_equal(zl_node_id_check("bad/id"), -ZL_ERR_INVAL);
	assert_int_equal(zl_node_id_check(""), -ZL_ERR_INVAL);
	assert_int_equal(zl_volume_name_check("pvc-1234.data_x"), 0);
	assert_int_equal(zl_volume_name_check("a b"), -ZL_ERR_INVAL);
	/* The names round-trip (the attach process's ERR line carries one). */
	assert_int_equal(zl_err_from_name("ZL_ERR_NOT_ATTACHED"), -ZL_ERR_NOT_ATTACHED);
	assert_int_equal(zl_err_from_name(zl_errname(-ZL_ERR_TLS_CA)), -ZL_ERR_TLS_CA);
	assert_int_equal(zl_err_from_name("ENOENT"), -2);
	assert_int_equal(zl_err_from_name("cannot"), 0);
	assert_int_equal(zl_err_from_name(""), 0);
	assert_int_equal(zl_err_from_name(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_vectors),
		cmocka_unit_test(test_crc32c_4k_join),
		cmocka_unit_test(test_crc32c_lengths),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_vol_id),
		cmocka_unit_test(test_errors_and_names),
		cmocka_unit_test(test_u64_push),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
