/* The request path's volume lookups of zipline-storage (storage/storage_vol.c)
 * against a real etcd (test/lib/with-etcd.sh): the negative cache, the load
 * bucket, the per-volume refresh limit, and a watched record replacing a
 * negative entry. Every count of etcd loads is the cache's own counter and
 * is checked against what the test asked for. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/storage_io.h"

#define GIB (1ull << 30)

struct fx {
	struct zl_loop *loop;
	struct zl_etcd *e;
	struct zl_storage_vols *vc;
	char prefix[64];
};

static int fx_setup(void **state)
{
	const char *url = getenv("ZL_TEST_ETCD");
	struct zl_etcd_opts eo = {.endpoints = url, .timeout_ms = 5000};
	struct fx *f = calloc(1, sizeof(*f));
	static int n;

	if (!url) {
		fprintf(stderr, "ZL_TEST_ETCD is not set: run this test via test/lib/with-etcd.sh\n");
		return -1;
	}
	if (!f || zl_loop_create(&f->loop) || zl_etcd_create(&eo, &f->e))
		return -1;
	snprintf(f->prefix, sizeof(f->prefix), "/zlvol-%d-%d/", (int)getpid(), ++n);
	for (int i = 0; i < 3; i++) {
		struct zl_node_info ni = {0};

		snprintf(ni.id, sizeof(ni.id), "node-%d", i);
		snprintf(ni.addr, sizeof(ni.addr), "10.0.0.%d", i + 1);
		ni.port = 7420;
		strcpy(ni.transports, "tcp");
		ni.capacity = 200 * GIB;
		ni.free = 100 * GIB;
		if (zl_meta_node_put(f->e, f->prefix, &ni, 0))
			return -1;
	}
	if (zl_storage_vols_create(f->loop, f->e, &eo, f->prefix, &f->vc))
		return -1;
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	zl_storage_vols_destroy(f->vc);
	zl_etcd_delete_prefix(f->e, f->prefix, NULL);
	zl_etcd_destroy(f->e);
	zl_loop_destroy(f->loop);
	free(f);
	return 0;
}

/* Runs the loop until lookup of num stops answering -EINPROGRESS (5 s at
 * most); returns its last answer. */
static int settle(struct fx *f, uint64_t num, struct zl_storage_vol **sv)
{
	int rc = -EINPROGRESS;

	for (int i = 0; i < 500 && rc == -EINPROGRESS; i++) {
		zl_loop_run_once(f->loop, 10);
		rc = zl_storage_vol_lookup(f->vc, num, sv);
	}
	return rc;
}

static void create_volume(struct fx *f, const char *name, struct zl_volume *v)
{
	struct zl_volume_spec spec = {.name = name, .size = GIB};
	bool created;

	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, v, &created), 0);
	assert_true(created);
}

static void test_negative_cache(void **state)
{
	struct fx *f = *state;
	struct zl_storage_vols_stats st;
	struct zl_storage_vol *sv;
	uint64_t ghost = 0x1234567890abcdefull;

	assert_int_equal(zl_storage_vol_lookup(f->vc, ghost, &sv), -EINPROGRESS);
	/* A load in flight: asking again starts no second one. */
	assert_int_equal(zl_storage_vol_lookup(f->vc, ghost, &sv), -EINPROGRESS);
	assert_int_equal(settle(f, ghost, &sv), -ZL_ERR_NOT_FOUND);
	for (int i = 0; i < 10000; i++)
		assert_int_equal(zl_storage_vol_lookup(f->vc, ghost, &sv), -ZL_ERR_NOT_FOUND);
	zl_storage_vols_stats(f->vc, &st);
	assert_int_equal(st.loads, 1);
	assert_true(st.neg_hits >= 10000);
	assert_int_equal(st.negative, 1);
}

static void test_negative_expires(void **state)
{
	struct fx *f = *state;
	struct zl_storage_vols_limits lim;
	struct zl_storage_vols_stats st;
	struct zl_storage_vol *sv;
	uint64_t ghost = 0x0badc0ffee000001ull;

	zl_storage_vols_limits_default(&lim);
	lim.neg_ms = 200;
	zl_storage_vols_set_limits(f->vc, &lim);
	zl_storage_vol_lookup(f->vc, ghost, &sv);
	assert_int_equal(settle(f, ghost, &sv), -ZL_ERR_NOT_FOUND);
	usleep(300 * 1000);
	/* Expired: one more load, then negative again. */
	assert_int_equal(zl_storage_vol_lookup(f->vc, ghost, &sv), -EINPROGRESS);
	assert_int_equal(settle(f, ghost, &sv), -ZL_ERR_NOT_FOUND);
	zl_storage_vols_stats(f->vc, &st);
	assert_int_equal(st.loads, 2);
}

static void test_load_bucket(void **state)
{
	struct fx *f = *state;
	struct zl_storage_vols_limits lim;
	struct zl_storage_vols_stats st;
	struct zl_storage_vol *sv;
	int inprog = 0, busy = 0;

	zl_storage_vols_limits_default(&lim);
	lim.load_per_sec = 1;
	lim.load_burst = 5;
	zl_storage_vols_set_limits(f->vc, &lim);
	/* 1000 distinct unknown volumes at once: the bucket's depth of loads. */
	for (uint64_t i = 0; i < 1000; i++) {
		int rc = zl_storage_vol_lookup(f->vc, 0x7700000000000000ull + i, &sv);

		inprog += rc == -EINPROGRESS;
		busy += rc == -ZL_ERR_BUSY;
	}
	assert_int_equal(inprog, 5);
	assert_int_equal(busy, 995);
	zl_storage_vols_stats(f->vc, &st);
	assert_int_equal(st.loads, 5);
	assert_int_equal(st.throttled, 995);
	/* The queue bound: with tokens to spare, at most load_queue wait. */
	lim.load_per_sec = 100000;
	lim.load_burst = 100000;
	lim.load_queue = 3;
	for (int i = 0; i < 200; i++) /* let the five loads answer */
		zl_loop_run_once(f->loop, 5);
	zl_storage_vols_set_limits(f->vc, &lim);
	inprog = 0;
	for (uint64_t i = 0; i < 100; i++)
		inprog += zl_storage_vol_lookup(f->vc, 0x7800000000000000ull + i, &sv) ==
			  -EINPROGRESS;
	assert_int_equal(inprog, 3);
	for (int i = 0; i < 200; i++)
		zl_loop_run_once(f->loop, 5);
}

static void test_watch_replaces_negative(void **state)
{
	struct fx *f = *state;
	struct zl_storage_vols_stats st;
	struct zl_storage_vol *sv;
	struct zl_volume v;
	int rc = -ZL_ERR_NOT_FOUND;

	/* Found, loaded once, then served from the cache. */
	create_volume(f, "pvc-a", &v);
	assert_int_equal(zl_storage_vol_lookup(f->vc, v.num, &sv), -EINPROGRESS);
	assert_int_equal(settle(f, v.num, &sv), 0);
	assert_int_equal(sv->v.n_slices, v.n_slices);
	zl_storage_vol_forget(f->vc, v.num);
	zl_volume_fini(&v);

	/* A volume asked for while its record is absent: negative; the record
	 * put back comes through the watch and is served with no further
	 * load. */
	zl_storage_vols_stats(f->vc, &st);
	uint64_t loads = st.loads;

	create_volume(f, "pvc-b", &v);
	char key[512], *json = zl_meta_volume_to_json(&v);

	assert_non_null(json);
	assert_int_equal(zl_meta_key(key, sizeof(key), f->prefix, "volumes", v.id), 0);
	assert_int_equal(zl_etcd_delete(f->e, key, NULL, NULL), 0);
	/* The three watch events so far (a's create, b's create and delete:
	 * volumes nobody asks for now, nothing cached) pass first. */
	for (int i = 0; i < 500 && st.events < 3; i++) {
		zl_loop_run_once(f->loop, 10);
		zl_storage_vols_stats(f->vc, &st);
	}
	assert_int_equal(st.events, 3);
	assert_int_equal(zl_storage_vol_lookup(f->vc, v.num, &sv), -EINPROGRESS);
	assert_int_equal(settle(f, v.num, &sv), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_etcd_put(f->e, key, json, strlen(json), 0, NULL), 0);
	free(json);
	for (int i = 0; i < 500 && rc == -ZL_ERR_NOT_FOUND; i++) {
		zl_loop_run_once(f->loop, 10);
		rc = zl_storage_vol_lookup(f->vc, v.num, &sv);
	}
	assert_int_equal(rc, 0);
	zl_storage_vols_stats(f->vc, &st);
	assert_int_equal(st.loads, loads + 1); /* the one that said absent */
	zl_volume_fini(&v);
}

static void test_refresh_limit(void **state)
{
	struct fx *f = *state;
	struct zl_storage_vols_limits lim;
	struct zl_storage_vols_stats st;
	struct zl_storage_vol *sv;
	struct zl_volume v;
	uint64_t ver;
	int rc = -EINPROGRESS;

	zl_storage_vols_limits_default(&lim);
	lim.refresh_ms = 300;
	zl_storage_vols_set_limits(f->vc, &lim);
	create_volume(f, "pvc-r", &v);
	zl_storage_vol_lookup(f->vc, v.num, &sv);
	assert_int_equal(settle(f, v.num, &sv), 0);
	ver = sv->v.slices[0].version;
	zl_storage_vols_stats(f->vc, &st);
	uint64_t loads = st.loads;

	/* A made-up newer version, 1000 times: one refresh. */
	assert_int_equal(zl_storage_vol_refresh(f->vc, sv), -EINPROGRESS);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(zl_storage_vol_refresh(f->vc, sv), -EINPROGRESS);
	for (int i = 0; i < 500 && sv->refreshing; i++)
		zl_loop_run_once(f->loop, 10);
	assert_false(sv->refreshing);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(zl_storage_vol_refresh(f->vc, sv), -ZL_ERR_STALE);
	zl_storage_vols_stats(f->vc, &st);
	assert_int_equal(st.loads, loads + 1);
	assert_int_equal(st.refreshes, 1);
	assert_int_equal(sv->v.slices[0].version, ver);

	/* After the interval a real newer row is fetched. */
	v.slices[0].version = ver + 1;
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &v), 0);
	usleep(350 * 1000);
	zl_storage_vol_lookup(f->vc, v.num, &sv);
	if (sv->v.slices[0].version == ver) { /* the watch was not faster */
		rc = zl_storage_vol_refresh(f->vc, sv);
		assert_int_equal(rc, -EINPROGRESS);
	}
	for (int i = 0; i < 500; i++) {
		zl_loop_run_once(f->loop, 10);
		assert_int_equal(zl_storage_vol_lookup(f->vc, v.num, &sv), 0);
		if (sv->v.slices[0].version == ver + 1)
			break;
	}
	assert_int_equal(sv->v.slices[0].version, ver + 1);
	zl_volume_fini(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_negative_cache, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_negative_expires, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_load_bucket, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_watch_replaces_negative, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_refresh_limit, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
