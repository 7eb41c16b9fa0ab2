/* lib/meta rebalance requests (rebalance/<vol-id>): the codec, and put,
 * get, list and delete against a real etcd (test/lib/with-etcd.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"
#include "meta_fixture.h"

static void make_req(struct zl_rebalance_req *r, const char *vol)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", vol);
	r->requested = 1700000000;
	snprintf(r->by, sizeof(r->by), "zl-cli");
}

static void test_codec(void **state)
{
	struct zl_rebalance_req r, q;
	char *json;

	(void)state;
	make_req(&r, "vol-0123456789abcdef");
	json = zl_meta_rebalance_to_json(&r);
	assert_non_null(json);
	assert_string_equal(json, "{\"requested\":1700000000,\"by\":\"zl-cli\"}");
	assert_int_equal(zl_meta_rebalance_from_json(json, strlen(json), &q), 0);
	assert_int_equal(q.requested, r.requested);
	assert_string_equal(q.by, "zl-cli");
	assert_string_equal(q.vol_id, ""); /* from the key, not the value */
	free(json);

	static const char *const bad[] = {
	    "",
	    "[]",
	    "{\"requested\":1}",
	    "{\"by\":\"x\"}",
	    "{\"requested\":-1,\"by\":\"x\"}",
	    "{\"requested\":1,\"by\":\"\"}",
	    "{\"requested\":1,\"by\":\"a b\"}",
	    "{\"requested\":\"1\",\"by\":\"x\"}",
	    "{\"requested\":1,\"by\":7}",
	    "{\"requested\":1,\"by\":\"x\",\"by\":\"y\"}",
	    "{\"requested\":1.5,\"by\":\"x\"}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		memset(&q, 0x5a, sizeof(q));
		assert_int_equal(zl_meta_rebalance_from_json(bad[i], strlen(bad[i]), &q),
				 -ZL_ERR_INVAL);
	}
	r.requested = -5;
	assert_null(zl_meta_rebalance_to_json(&r));
	make_req(&r, "vol-xyz");
	assert_int_not_equal(zl_meta_rebalance_check(&r, NULL, 0), 0);
}

static void test_put_get_list_delete(void **state)
{
	struct fixture *f = *state;
	struct zl_rebalance_req r, got, *list = NULL;
	size_t n = 0;

	assert_int_equal(zl_meta_rebalance_get(f->e, f->prefix, "vol-0000000000000001", &got),
			 -ZL_ERR_NOT_FOUND);
	make_req(&r, "vol-0000000000000002");
	assert_int_equal(zl_meta_rebalance_put(f->e, f->prefix, &r), 0);
	make_req(&r, "vol-0000000000000001");
	snprintf(r.by, sizeof(r.by), "host-a");
	assert_int_equal(zl_meta_rebalance_put(f->e, f->prefix, &r), 0);
	assert_int_equal(zl_meta_rebalance_get(f->e, f->prefix, r.vol_id, &got), 0);
	assert_string_equal(got.vol_id, r.vol_id);
	assert_string_equal(got.by, "host-a");
	assert_true(got.mod_rev > 0);
	/* A malformed record is skipped by the listing, not fatal. */
	put_raw(f, "rebalance", "vol-0000000000000003", "{\"requested\":1}");
	assert_int_equal(zl_meta_rebalance_list(f->e, f->prefix, &list, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].vol_id, "vol-0000000000000001");
	assert_string_equal(list[1].vol_id, "vol-0000000000000002");
	free(list);
	/* Delete at a revision: a request put again since stays. */
	assert_int_equal(zl_meta_rebalance_put(f->e, f->prefix, &r), 0);
	assert_int_equal(zl_meta_rebalance_delete(f->e, f->prefix, &got), -ZL_ERR_CONFLICT);
	assert_true(key_exists(f, "rebalance", r.vol_id));
	assert_int_equal(zl_meta_rebalance_get(f->e, f->prefix, r.vol_id, &got), 0);
	assert_int_equal(zl_meta_rebalance_delete(f->e, f->prefix, &got), 0);
	assert_false(key_exists(f, "rebalance", r.vol_id));
	assert_int_equal(zl_meta_rebalance_delete(f->e, f->prefix, &got), 0); /* absent */
	/* Invalid requests are refused before etcd. */
	make_req(&r, "vol-0000000000000004");
	r.by[0] = '\0';
	assert_int_equal(zl_meta_rebalance_put(f->e, f->prefix, &r), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_rebalance_get(f->e, f->prefix, "nope", &got), -ZL_ERR_INVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_codec),
	    cmocka_unit_test_setup_teardown(test_put_get_list_delete, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
