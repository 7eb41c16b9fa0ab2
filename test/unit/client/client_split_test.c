/* Pure decisions of the volume client: range checks, chunk splitting, target
 * choice, retry classification, backoff. No network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cmocka needs the headers above first */
#include <cmocka.h>

#include "lib/client/client_internal.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

static void test_range_check(void **state)
{
	(void)state;
	assert_int_equal(zl_client_range_check(100, 0, 100), 0);
	assert_int_equal(zl_client_range_check(100, 100, 0), 0);
	assert_int_equal(zl_client_range_check(100, 0, 0), 0);
	assert_int_equal(zl_client_range_check(100, 99, 1), 0);
	assert_int_equal(zl_client_range_check(100, 101, 0), -ZL_ERR_RANGE);
	assert_int_equal(zl_client_range_check(100, 50, 51), -ZL_ERR_RANGE);
	assert_int_equal(zl_client_range_check(100, 100, 1), -ZL_ERR_RANGE);
	assert_int_equal(zl_client_range_check(100, UINT64_MAX, 2), -ZL_ERR_RANGE);
	assert_int_equal(zl_client_range_check(100, 2, UINT64_MAX), -ZL_ERR_RANGE);
}

static void expect_ext(uint64_t off, uint64_t len, uint64_t done, uint32_t cs, uint32_t max,
		       uint64_t chunk, uint32_t offset, uint32_t length)
{
	struct zl_client_extent e;

	assert_int_equal(zl_client_split_next(off, len, done, cs, max, &e), 1);
	assert_int_equal(e.chunk, chunk);
	assert_int_equal(e.offset, offset);
	assert_int_equal(e.length, length);
	assert_int_equal(e.pos, done);
}

static void test_split_boundaries(void **state)
{
	struct zl_client_extent e;
	uint32_t cs = 64 * KiB, max = ZL_WIRE_MAX_IO;

	(void)state;
	/* exactly one chunk */
	expect_ext(0, cs, 0, cs, max, 0, 0, cs);
	assert_int_equal(zl_client_split_next(0, cs, cs, cs, max, &e), 0);
	assert_int_equal(zl_client_split_count(0, cs, cs, max), 1);
	/* a chunk at its boundary */
	expect_ext(cs, cs, 0, cs, max, 1, 0, cs);
	/* two bytes straddling a boundary */
	expect_ext(cs - 1, 2, 0, cs, max, 0, cs - 1, 1);
	expect_ext(cs - 1, 2, 1, cs, max, 1, 0, 1);
	assert_int_equal(zl_client_split_count(cs - 1, 2, cs, max), 2);
	/* unaligned across four chunks */
	expect_ext(1000, 200000, 0, cs, max, 0, 1000, (uint32_t)(cs - 1000));
	expect_ext(1000, 200000, cs - 1000, cs, max, 1, 0, cs);
	expect_ext(1000, 200000, 2 * cs - 1000, cs, max, 2, 0, cs);
	expect_ext(1000, 200000, 3 * cs - 1000, cs, max, 3, 0,
		   (uint32_t)(200000 - (3 * cs - 1000)));
	assert_int_equal(zl_client_split_count(1000, 200000, cs, max), 4);
	/* zero length: nothing */
	assert_int_equal(zl_client_split_next(5, 0, 0, cs, max, &e), 0);
	assert_int_equal(zl_client_split_count(5, 0, cs, max), 0);
}

static void test_split_max_io(void **state)
{
	uint32_t cs = 64 * MiB, max = ZL_WIRE_MAX_IO;

	(void)state;
	/* inside one big chunk: cut every max_io bytes */
	expect_ext(1 * MiB, 10 * MiB, 0, cs, max, 0, 1 * MiB, 4 * MiB);
	expect_ext(1 * MiB, 10 * MiB, 4 * MiB, cs, max, 0, 5 * MiB, 4 * MiB);
	expect_ext(1 * MiB, 10 * MiB, 8 * MiB, cs, max, 0, 9 * MiB, 2 * MiB);
	assert_int_equal(zl_client_split_count(1 * MiB, 10 * MiB, cs, max), 3);
	/* chunk boundary and max_io together */
	cs = 8 * MiB;
	expect_ext(6 * MiB, 8 * MiB, 0, cs, max, 0, 6 * MiB, 2 * MiB);
	expect_ext(6 * MiB, 8 * MiB, 2 * MiB, cs, max, 1, 0, 4 * MiB);
	expect_ext(6 * MiB, 8 * MiB, 6 * MiB, cs, max, 1, 4 * MiB, 2 * MiB);
	/* a chunk of exactly max_io at the end of a large volume */
	expect_ext((1ull << 40) - 4 * MiB, 4 * MiB, 0, 4 * MiB, max, (1ull << 40) / (4 * MiB) - 1,
		   0, 4 * MiB);
}

/* Every piece is inside one chunk, at most max_io, and the pieces tile the I/O. */
static void test_split_property(void **state)
{
	uint64_t seed = 12345;

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		uint32_t cs = 1u << (12 + (iter % 8)); /* 4 KiB .. 512 KiB */
		uint32_t max = (iter % 3) ? 16 * 1024 : 1u << 20;
		uint64_t off, len, done = 0, n = 0;
		struct zl_client_extent e;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		off = (seed >> 20) % (64ull * cs);
		len = (seed >> 5) % (8ull * cs);
		while (zl_client_split_next(off, len, done, cs, max, &e)) {
			assert_int_equal(e.pos, done);
			assert_true(e.length > 0);
			assert_true(e.length <= max);
			assert_true((uint64_t)e.offset + e.length <= cs);
			assert_int_equal(e.chunk * cs + e.offset, off + done);
			done += e.length;
			n++;
			assert_true(n <= len + 1);
		}
		assert_int_equal(done, len);
		assert_int_equal(n, zl_client_split_count(off, len, cs, max));
	}
}

static void slice_set(struct zl_slice *s, int n, bool a, bool b, bool c)
{
	memset(s, 0, sizeof(*s));
	s->n = (uint8_t)n;
	s->version = 7;
	strcpy(s->nodes[0], "n0");
	strcpy(s->nodes[1], "n1");
	strcpy(s->nodes[2], "n2");
	s->in_sync[0] = a;
	s->in_sync[1] = b;
	s->in_sync[2] = c;
}

static void test_pick_target(void **state)
{
	struct zl_slice s;

	(void)state;
	slice_set(&s, 3, true, true, true);
	/* writes: always the primary */
	assert_int_equal(zl_client_pick_target(&s, false, 0, 0), 0);
	assert_int_equal(zl_client_pick_target(&s, false, 1, 1), 0);
	/* reads: primary first, then the others in order */
	assert_int_equal(zl_client_pick_target(&s, true, 0, 0), 0);
	assert_int_equal(zl_client_pick_target(&s, true, 1, 0), 1);
	assert_int_equal(zl_client_pick_target(&s, true, 3, 0), 2);
	assert_int_equal(zl_client_pick_target(&s, true, 7, 0), -1);
	/* down nodes are avoided while another in-sync replica is left... */
	assert_int_equal(zl_client_pick_target(&s, true, 0, 1), 1);
	assert_int_equal(zl_client_pick_target(&s, true, 0, 3), 2);
	/* ...and used when nothing else is */
	assert_int_equal(zl_client_pick_target(&s, true, 0, 7), 0);
	assert_int_equal(zl_client_pick_target(&s, true, 1, 7), 1);

	/* primary out of sync: the next in-sync replica is the primary */
	slice_set(&s, 3, false, true, true);
	assert_int_equal(zl_client_pick_target(&s, false, 0, 0), 1);
	assert_int_equal(zl_client_pick_target(&s, true, 0, 0), 1);
	assert_int_equal(zl_client_pick_target(&s, true, 2, 0), 2);
	assert_int_equal(zl_client_pick_target(&s, true, 6, 0), -1);

	/* never a replica beyond n, never an out-of-sync one */
	slice_set(&s, 2, true, false, true);
	assert_int_equal(zl_client_pick_target(&s, true, 1, 0), -1);
	slice_set(&s, 3, false, false, false);
	assert_int_equal(zl_client_pick_target(&s, false, 0, 0), -1);
	assert_int_equal(zl_client_pick_target(&s, true, 0, 0), -1);
}

static void test_classify(void **state)
{
	(void)state;
	assert_int_equal(zl_client_classify(ZL_OP_READ, 0, false), ZL_CLIENT_ACT_DONE);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, 0, false), ZL_CLIENT_ACT_DONE);
	/* Our TLS configuration is not the node's failure: fail, both modes. */
	for (int i = 0; i < 2; i++) {
		int err = i ? -ZL_ERR_TLS : -ZL_ERR_TLS_CA;

		assert_int_equal(zl_client_classify(ZL_OP_WRITE, err, true), ZL_CLIENT_ACT_FAIL);
		assert_int_equal(zl_client_classify(ZL_OP_READ, err, true), ZL_CLIENT_ACT_FAIL);
		assert_int_equal(zl_client_classify_heal(ZL_OP_WRITE, err, true),
				 ZL_CLIENT_ACT_FAIL);
		assert_int_equal(zl_client_classify_heal(ZL_OP_READ, err, false),
				 ZL_CLIENT_ACT_FAIL);
	}
	/* transport failures */
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_CONN, true),
			 ZL_CLIENT_ACT_FAILOVER);
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_TIMEOUT, true),
			 ZL_CLIENT_ACT_FAILOVER);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_CONN, true),
			 ZL_CLIENT_ACT_PROMOTE);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_TIMEOUT, true),
			 ZL_CLIENT_ACT_PROMOTE);
	assert_int_equal(zl_client_classify(ZL_OP_DISCARD, -ZL_ERR_CONN, true),
			 ZL_CLIENT_ACT_PROMOTE);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE_ZEROES, -ZL_ERR_TIMEOUT, true),
			 ZL_CLIENT_ACT_PROMOTE);
	/* version and role errors: reload */
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_STALE, false),
			 ZL_CLIENT_ACT_RELOAD);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_STALE, false),
			 ZL_CLIENT_ACT_RELOAD);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_NOT_PRIMARY, false),
			 ZL_CLIENT_ACT_RELOAD);
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_NOT_INSYNC, false),
			 ZL_CLIENT_ACT_RELOAD);
	/* corruption: another replica for reads */
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_CORRUPT, false),
			 ZL_CLIENT_ACT_FAILOVER);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_CORRUPT, false),
			 ZL_CLIENT_ACT_RETRY);
	/* errors a retry cannot fix reach the user */
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_NOSPC, false), ZL_CLIENT_ACT_FAIL);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_RANGE, false), ZL_CLIENT_ACT_FAIL);
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_IO, false), ZL_CLIENT_ACT_FAIL);
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_IO, false), ZL_CLIENT_ACT_FAILOVER);
	assert_int_equal(zl_client_classify(ZL_OP_READ, -ZL_ERR_PROTO, false), ZL_CLIENT_ACT_FAIL);
}

static void test_backoff(void **state)
{
	uint64_t total = 0;
	uint32_t prev = 0;

	(void)state;
	assert_int_equal(zl_client_backoff_ms(1), 0);
	for (uint32_t a = 1; a < CLIENT_MAX_ATTEMPTS; a++) {
		uint32_t d = zl_client_backoff_ms(a);

		assert_true(d >= prev);
		assert_true(d <= 2000);
		prev = d;
		total += d;
	}
	/* the attempt budget runs out before the time budget */
	assert_true(total < CLIENT_MAX_IO_MS);
	assert_true(total > 1000);
}

/* Heal mode: the retryable set of the shared contract (docs/REPLICATION.md
 * §2) reloads, a primary without answer is reported, nothing promotes, only
 * a READ the primary answered CORRUPT or IO fails over (to READ + ZL_WF_ANY
 * on the other IN_SYNC members), the rest fails as in 0.1. */
static void test_classify_heal(void **state)
{
	static const int retry[] = {ZL_ERR_PEERING,   ZL_ERR_NOT_PRIMARY, ZL_ERR_STALE,
				    ZL_ERR_NOT_INSYNC, ZL_ERR_MIN_SIZE,	  ZL_ERR_UNAVAIL,
				    ZL_ERR_CONN,       ZL_ERR_TIMEOUT,	  ZL_ERR_NOT_FOUND,
				    ZL_ERR_ETCD};
	static const int fail[] = {ZL_ERR_RANGE, ZL_ERR_INVAL, ZL_ERR_NOSPC, ZL_ERR_PROTO,
				   ZL_ERR_IDENTITY};
	static const int ops[] = {ZL_OP_READ, ZL_OP_WRITE, ZL_OP_FLUSH, ZL_OP_DISCARD,
				  ZL_OP_WRITE_ZEROES};

	(void)state;
	for (size_t o = 0; o < ZL_ARRAY_SIZE(ops); o++) {
		int op = ops[o];

		assert_int_equal(zl_client_classify_heal(op, 0, false), ZL_CLIENT_ACT_DONE);
		for (size_t i = 0; i < ZL_ARRAY_SIZE(retry); i++)
			assert_int_equal(zl_client_classify_heal(op, -retry[i], false),
					 ZL_CLIENT_ACT_RELOAD);
		for (size_t i = 0; i < ZL_ARRAY_SIZE(fail); i++)
			assert_int_equal(zl_client_classify_heal(op, -fail[i], false),
					 ZL_CLIENT_ACT_FAIL);
		/* no reply from the primary: report it, whatever the op */
		assert_int_equal(zl_client_classify_heal(op, -ZL_ERR_CONN, true),
				 ZL_CLIENT_ACT_REPORT);
		assert_int_equal(zl_client_classify_heal(op, -ZL_ERR_TIMEOUT, true),
				 ZL_CLIENT_ACT_REPORT);
		assert_int_equal(zl_client_classify_heal(op, -ZL_ERR_CORRUPT, true),
				 ZL_CLIENT_ACT_RETRY);
		assert_int_equal(zl_client_classify_heal(op, -ZL_ERR_BUSY, false),
				 ZL_CLIENT_ACT_RETRY);
		assert_int_equal(zl_client_classify_heal(op, -ZL_ERR_INVAL, true),
				 ZL_CLIENT_ACT_FAIL);
		/* never a promotion; failover only for a bad copy read */
		for (int e = 0; e < 5000; e++) {
			enum zl_client_action a = zl_client_classify_heal(op, -e, e & 1);
			bool bad_read =
			    op == ZL_OP_READ && !(e & 1) && (e == ZL_ERR_CORRUPT || e == ZL_ERR_IO);

			assert_true(a != ZL_CLIENT_ACT_PROMOTE);
			assert_true((a == ZL_CLIENT_ACT_FAILOVER) == bad_read);
		}
	}
	/* a damaged write payload is sent again, a write that failed on disk fails; a
	 * bad copy read goes to the other IN_SYNC members */
	assert_int_equal(zl_client_classify_heal(ZL_OP_WRITE, -ZL_ERR_CORRUPT, false),
			 ZL_CLIENT_ACT_RETRY);
	assert_int_equal(zl_client_classify_heal(ZL_OP_WRITE, -ZL_ERR_IO, false),
			 ZL_CLIENT_ACT_FAIL);
	assert_int_equal(zl_client_classify_heal(ZL_OP_FLUSH, -ZL_ERR_IO, false),
			 ZL_CLIENT_ACT_FAIL);
	assert_int_equal(zl_client_classify_heal(ZL_OP_READ, -ZL_ERR_CORRUPT, false),
			 ZL_CLIENT_ACT_FAILOVER);
	assert_int_equal(zl_client_classify_heal(ZL_OP_READ, -ZL_ERR_IO, false),
			 ZL_CLIENT_ACT_FAILOVER);
	/* legacy classification is unchanged by the heal one */
	assert_int_equal(zl_client_classify(ZL_OP_WRITE, -ZL_ERR_CONN, true),
			 ZL_CLIENT_ACT_PROMOTE);
}

static void test_heal_backoff(void **state)
{
	uint32_t prev = 0;
	uint64_t total = 0;

	(void)state;
	assert_int_equal(zl_client_heal_backoff_ms(0), 0);
	assert_int_equal(zl_client_heal_backoff_ms(1), 0);
	assert_int_equal(zl_client_heal_backoff_ms(2), 50);
	assert_int_equal(zl_client_heal_backoff_ms(3), 100);
	assert_int_equal(zl_client_heal_backoff_ms(4), 200);
	assert_int_equal(zl_client_heal_backoff_ms(7), 1600);
	assert_int_equal(zl_client_heal_backoff_ms(8), 2000);
	assert_int_equal(zl_client_heal_backoff_ms(1000000), 2000);
	assert_int_equal(zl_client_heal_backoff_ms(UINT32_MAX), 2000);
	for (uint32_t a = 1; a < 400; a++) {
		uint32_t d = zl_client_heal_backoff_ms(a);

		assert_true(d >= prev);
		assert_true(d <= CLIENT_HEAL_BACKOFF_MAX_MS);
		prev = d;
		total += d;
	}
	/* no attempt budget: 400 attempts cover the default io_timeout */
	assert_true(total >= (uint64_t)CLIENT_IO_TIMEOUT_S * 1000u);
}

static void test_heal_final_err(void **state)
{
	(void)state;
	assert_int_equal(zl_client_heal_final_err(-ZL_ERR_MIN_SIZE), -ZL_ERR_MIN_SIZE);
	assert_int_equal(zl_client_heal_final_err(-ZL_ERR_PEERING), -ZL_ERR_TIMEOUT);
	assert_int_equal(zl_client_heal_final_err(-ZL_ERR_CONN), -ZL_ERR_TIMEOUT);
	assert_int_equal(zl_client_heal_final_err(-ZL_ERR_UNAVAIL), -ZL_ERR_TIMEOUT);
	assert_int_equal(zl_client_heal_final_err(0), -ZL_ERR_TIMEOUT);
	assert_string_equal(zl_client_report_error(-ZL_ERR_TIMEOUT), "TIMEOUT");
	assert_string_equal(zl_client_report_error(-ZL_ERR_CONN), "UNREACHABLE");
	assert_string_equal(zl_client_report_error(-ZL_ERR_CORRUPT), "CORRUPT");
	assert_string_equal(zl_client_report_error(-ZL_ERR_IO), "IO");
	assert_true(strlen(zl_client_report_error(-ZL_ERR_CONN)) < ZL_META_ERROR_NAME_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_range_check),	 cmocka_unit_test(test_split_boundaries),
	    cmocka_unit_test(test_split_max_io), cmocka_unit_test(test_split_property),
	    cmocka_unit_test(test_pick_target),	 cmocka_unit_test(test_classify),
	    cmocka_unit_test(test_backoff),	 cmocka_unit_test(test_classify_heal),
	    cmocka_unit_test(test_heal_backoff), cmocka_unit_test(test_heal_final_err),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
