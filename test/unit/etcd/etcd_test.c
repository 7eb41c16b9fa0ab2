/* lib/etcd against a real etcd 3.4 (test/lib/with-etcd.sh exports its URL
 * in ZL_TEST_ETCD), plus the JSON decoders on canned answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "lib/common/common.h"
#include "lib/etcd/etcd.h"
#include "lib/etcd/etcd_internal.h"

static const char *etcd_url;

static struct zl_etcd *client(const char *endpoints, int timeout_ms)
{
	struct zl_etcd_opts o = { .endpoints = endpoints, .timeout_ms = timeout_ms };
	struct zl_etcd *e = NULL;

	assert_int_equal(zl_etcd_create(&o, &e), 0);
	assert_non_null(e);
	return e;
}

static int setup(void **state)
{
	*state = client(etcd_url, 5000);
	return 0;
}

static int teardown(void **state)
{
	zl_etcd_destroy(*state);
	return 0;
}

/* ---- decoders, no etcd needed ---- */

static void test_b64(void **state)
{
	static const struct { const char *in; int rc; const char *out; size_t len; } v[] = {
		{ "", 0, "", 0 },
		{ "YQ==", 0, "a", 1 },
		{ "YWI=", 0, "ab", 2 },
		{ "YWJj", 0, "abc", 3 },
		{ "AAEA", 0, "\0\1\0", 3 },
		{ "YQ", -ZL_ERR_PROTO, NULL, 0 },
		{ "Y===", -ZL_ERR_PROTO, NULL, 0 },
		{ "Y=g=", -ZL_ERR_PROTO, NULL, 0 },
		{ " YQ=", -ZL_ERR_PROTO, NULL, 0 },
		{ "YQ==YQ==", -ZL_ERR_PROTO, NULL, 0 },
		{ "Y\nQ=", -ZL_ERR_PROTO, NULL, 0 },
	};
	char *enc, *out;
	size_t len;

	(void)state;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(v); i++) {
		int rc = etcd_b64_decode(v[i].in, strlen(v[i].in), &out, &len);

		assert_int_equal(rc, v[i].rc);
		if (rc) {
			assert_null(out);
			continue;
		}
		assert_int_equal(len, v[i].len);
		assert_memory_equal(out, v[i].out, len);
		assert_int_equal(out[len], '\0');
		enc = etcd_b64_encode(out, len);
		assert_string_equal(enc, v[i].in);
		free(enc);
		free(out);
	}
}

static void test_prefix_end(void **state)
{
	char out[8];

	(void)state;
	zl_etcd_prefix_end("abc", out);
	assert_string_equal(out, "abd");
	zl_etcd_prefix_end("a\xff", out);
	assert_string_equal(out, "b");
	zl_etcd_prefix_end("\xff\xff", out);
	assert_string_equal(out, "");
	zl_etcd_prefix_end("", out);
	assert_string_equal(out, "");
	zl_etcd_prefix_end("/z/", out);
	assert_string_equal(out, "/z0");
}

static void test_parse_answers(void **state)
{
	const char *range = "{\"header\":{\"revision\":\"42\"},\"kvs\":[{\"key\":\"YQ==\","
			    "\"create_revision\":\"3\",\"mod_revision\":\"7\",\"version\":\"2\","
			    "\"value\":\"AAE=\",\"lease\":\"9223372036854775807\"},{\"key\":\"Yg==\"}],"
			    "\"more\":true,\"count\":\"5\"}";
	struct zl_etcd_range r;
	int64_t ttl;
	json_t *j;

	(void)state;
	assert_int_equal(etcd_json_parse_object(range, strlen(range), &j), 0);
	assert_int_equal(etcd_json_parse_range(j, &r), 0);
	json_decref(j);
	assert_int_equal(r.n, 2);
	assert_true(r.more);
	assert_int_equal(r.count, 5);
	assert_int_equal(r.revision, 42);
	assert_string_equal(r.kvs[0].key, "a");
	assert_int_equal(r.kvs[0].value_len, 2);
	assert_memory_equal(r.kvs[0].value, "\0\1", 2);
	assert_int_equal(r.kvs[0].create_rev, 3);
	assert_int_equal(r.kvs[0].mod_rev, 7);
	assert_int_equal(r.kvs[0].version, 2);
	assert_true(r.kvs[0].lease == INT64_MAX);
	/* Omitted default fields decode as empty / 0. */
	assert_string_equal(r.kvs[1].key, "b");
	assert_int_equal(r.kvs[1].value_len, 0);
	assert_string_equal(r.kvs[1].value, "");
	assert_int_equal(r.kvs[1].mod_rev, 0);
	zl_etcd_range_fini(&r);

	/* Bad int64, bad base64, key with a NUL, wrong types are errors. */
	static const char *const bad[] = {
		"{\"count\":\"12x\"}", "{\"kvs\":[{\"key\":\"YQ\"}]}",
		"{\"kvs\":[{\"key\":\"AGE=\"}]}", "{\"kvs\":{}}", "{\"kvs\":[1]}",
		"{\"header\":{\"revision\":true}}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		assert_int_equal(etcd_json_parse_object(bad[i], strlen(bad[i]), &j), 0);
		assert_int_equal(etcd_json_parse_range(j, &r), -ZL_ERR_PROTO);
		assert_null(r.kvs);
		json_decref(j);
	}
	assert_int_equal(etcd_json_parse_object("[1]", 3, &j), -ZL_ERR_PROTO);
	assert_int_equal(etcd_json_parse_object("{", 1, &j), -ZL_ERR_PROTO);

	/* Keepalive of an unknown lease: no TTL. */
	const char *ka = "{\"result\":{\"header\":{},\"ID\":\"5\"}}";
	assert_int_equal(etcd_json_parse_object(ka, strlen(ka), &j), 0);
	assert_int_equal(etcd_json_parse_keepalive(j, &ttl), 0);
	assert_int_equal(ttl, 0);
	json_decref(j);
	ka = "{\"result\":{\"ID\":\"5\",\"TTL\":\"30\"}}";
	assert_int_equal(etcd_json_parse_object(ka, strlen(ka), &j), 0);
	assert_int_equal(etcd_json_parse_keepalive(j, &ttl), 0);
	assert_int_equal(ttl, 30);
	json_decref(j);
}

struct ev_log {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	enum zl_etcd_event_type type[64];
	char key[64][64];
	char value[64][64];
	size_t value_len[64];
	int64_t mod_rev[64];
};

static void ev_log_init(struct ev_log *l)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
}

static void ev_log_fini(struct ev_log *l)
{
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
}

static void ev_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct ev_log *l = arg;

	pthread_mutex_lock(&l->lock);
	if (l->n < 64) {
		l->type[l->n] = type;
		snprintf(l->key[l->n], sizeof(l->key[0]), "%s", kv->key);
		l->value_len[l->n] = ZL_MIN(kv->value_len, sizeof(l->value[0]));
		memcpy(l->value[l->n], kv->value, l->value_len[l->n]);
		l->mod_rev[l->n] = kv->mod_rev;
		l->n++;
	}
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

/* Waits (bounded) until the log holds n events; returns how many it holds. */
static int ev_wait(struct ev_log *l, int n, int timeout_ms)
{
	uint64_t deadline = zl_now_ms() + (uint64_t)timeout_ms;
	int got;

	pthread_mutex_lock(&l->lock);
	while (l->n < n && zl_now_ms() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&l->cond, &l->lock, &ts);
	}
	got = l->n;
	pthread_mutex_unlock(&l->lock);
	return got;
}

static void test_parse_watch(void **state)
{
	const char *line = "{\"result\":{\"header\":{\"revision\":\"6\"},\"events\":["
			   "{\"kv\":{\"key\":\"cDE=\",\"mod_revision\":\"5\",\"value\":\"AAEC\"}},"
			   "{\"type\":\"DELETE\",\"kv\":{\"key\":\"cDE=\",\"mod_revision\":\"6\"}},"
			   "{\"type\":\"BOGUS\",\"kv\":{\"key\":\"cDE=\"}}]}}";
	struct etcd_watch_msg m;
	struct ev_log l;

	(void)state;
	ev_log_init(&l);
	assert_int_equal(etcd_json_parse_watch(line, strlen(line), ev_cb, &l, &m), 0);
	assert_int_equal(m.n_events, 2);
	assert_int_equal(m.n_bad, 1);
	assert_int_equal(m.last_event_rev, 6);
	assert_int_equal(l.n, 2);
	assert_int_equal(l.type[0], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[0], "p1");
	assert_int_equal(l.value_len[0], 3);
	assert_memory_equal(l.value[0], "\0\1\2", 3);
	assert_int_equal(l.type[1], ZL_ETCD_EV_DELETE);

	line = "{\"result\":{\"header\":{\"revision\":\"9\"},\"watch_id\":\"-1\",\"created\":true,"
	       "\"canceled\":true,\"compact_revision\":\"4\",\"cancel_reason\":\"compacted\"}}";
	assert_int_equal(etcd_json_parse_watch(line, strlen(line), ev_cb, &l, &m), 0);
	assert_true(m.created && m.canceled);
	assert_int_equal(m.compact_rev, 4);
	assert_string_equal(m.reason, "compacted");

	line = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"no leader\"}}";
	assert_int_equal(etcd_json_parse_watch(line, strlen(line), ev_cb, &l, &m), 0);
	assert_true(m.error);
	assert_non_null(strstr(m.reason, "no leader"));
	assert_int_equal(etcd_json_parse_watch("{}", 2, ev_cb, &l, &m), -ZL_ERR_PROTO);
	assert_int_equal(l.n, 2);
	ev_log_fini(&l);
}

static void test_create_invalid(void **state)
{
	static const char *const bad[] = { "", " , ", "ftp://x:1", "http://", "http://a b:1",
					   "http://:2379" };
	struct zl_etcd_opts o = { 0 };
	struct zl_etcd *e = (void *)1;

	(void)state;
	assert_int_equal(zl_etcd_create(&o, &e), -ZL_ERR_INVAL);
	assert_null(e);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		o.endpoints = bad[i];
		assert_int_equal(zl_etcd_create(&o, &e), -ZL_ERR_INVAL);
		assert_null(e);
		assert_true(strlen(zl_etcd_last_error()) > 0);
	}
	/* Bare host:port means http; trailing slashes and blanks are dropped. */
	o.endpoints = " 127.0.0.1:2379/ , https://h:1";
	assert_int_equal(zl_etcd_create(&o, &e), 0);
	assert_string_equal(zl_etcd_endpoint(e), "http://127.0.0.1:2379");
	zl_etcd_destroy(e);
	zl_etcd_destroy(NULL);
}

/* ---- against etcd ---- */

static void test_put_get_delete(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_kv kv;
	int64_t rev1, rev2, n;

	assert_int_equal(zl_etcd_ping(e), 0);
	assert_int_equal(zl_etcd_put(e, "/t/pgd/a", "hello", 5, 0, &rev1), 0);
	assert_true(rev1 > 0);
	assert_int_equal(zl_etcd_get(e, "/t/pgd/a", &kv), 0);
	assert_string_equal(kv.key, "/t/pgd/a");
	assert_int_equal(kv.value_len, 5);
	assert_string_equal(kv.value, "hello");
	assert_int_equal(kv.create_rev, rev1);
	assert_int_equal(kv.mod_rev, rev1);
	assert_int_equal(kv.version, 1);
	assert_int_equal(kv.lease, 0);
	zl_etcd_kv_fini(&kv);

	assert_int_equal(zl_etcd_put(e, "/t/pgd/a", "world!", 6, 0, &rev2), 0);
	assert_true(rev2 > rev1);
	assert_int_equal(zl_etcd_get(e, "/t/pgd/a", &kv), 0);
	assert_string_equal(kv.value, "world!");
	assert_int_equal(kv.create_rev, rev1);
	assert_int_equal(kv.mod_rev, rev2);
	assert_int_equal(kv.version, 2);
	zl_etcd_kv_fini(&kv);

	/* Empty value is a value. */
	assert_int_equal(zl_etcd_put(e, "/t/pgd/empty", "", 0, 0, NULL), 0);
	assert_int_equal(zl_etcd_get(e, "/t/pgd/empty", &kv), 0);
	assert_int_equal(kv.value_len, 0);
	assert_string_equal(kv.value, "");
	zl_etcd_kv_fini(&kv);

	assert_int_equal(zl_etcd_delete(e, "/t/pgd/a", NULL, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(zl_etcd_delete(e, "/t/pgd/a", NULL, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(zl_etcd_get(e, "/t/pgd/a", &kv), -ZL_ERR_NOT_FOUND);
	assert_null(kv.key);
	assert_int_equal(zl_etcd_get(e, "/t/pgd/never", &kv), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_etcd_put(e, "", "x", 1, 0, NULL), -ZL_ERR_INVAL);
}

static void test_binary_value(void **state)
{
	struct zl_etcd *e = *state;
	unsigned char buf[1000];
	struct zl_etcd_kv kv;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7);
	buf[0] = 0;
	buf[sizeof(buf) - 1] = 0;
	assert_int_equal(zl_etcd_put(e, "/t/bin", buf, sizeof(buf), 0, NULL), 0);
	assert_int_equal(zl_etcd_get(e, "/t/bin", &kv), 0);
	assert_int_equal(kv.value_len, sizeof(buf));
	assert_memory_equal(kv.value, buf, sizeof(buf));
	assert_int_equal(kv.value[kv.value_len], '\0');
	zl_etcd_kv_fini(&kv);
	/* A lone NUL. */
	assert_int_equal(zl_etcd_put(e, "/t/bin", "\0", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_get(e, "/t/bin", &kv), 0);
	assert_int_equal(kv.value_len, 1);
	assert_int_equal(kv.value[0], '\0');
	zl_etcd_kv_fini(&kv);
}

static void test_range_paging(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_range r;
	char key[64], last[64];
	int seen = 0, pages = 0;
	int64_t n;

	for (int i = 0; i < 25; i++) {
		snprintf(key, sizeof(key), "/t/page/k%02d", i);
		assert_int_equal(zl_etcd_put(e, key, key, strlen(key), 0, NULL), 0);
	}
	/* Neighbours that must stay outside the prefix. */
	assert_int_equal(zl_etcd_put(e, "/t/pagf", "x", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/page", "x", 1, 0, NULL), 0);

	last[0] = '\0';
	for (;;) {
		assert_int_equal(zl_etcd_range_prefix(e, "/t/page/", pages ? last : NULL, 10, &r), 0);
		pages++;
		assert_true(pages <= 3);
		for (size_t i = 0; i < r.n; i++) {
			snprintf(key, sizeof(key), "/t/page/k%02d", seen);
			assert_string_equal(r.kvs[i].key, key);
			assert_string_equal(r.kvs[i].value, key);
			seen++;
		}
		assert_int_equal(r.count, 25 - (pages - 1) * 10);
		if (!r.more) {
			assert_int_equal(r.n, 5);
			zl_etcd_range_fini(&r);
			break;
		}
		assert_int_equal(r.n, 10);
		snprintf(last, sizeof(last), "%s", r.kvs[r.n - 1].key);
		zl_etcd_range_fini(&r);
	}
	assert_int_equal(seen, 25);
	assert_int_equal(pages, 3);

	/* No limit: everything; explicit [key, range_end). */
	assert_int_equal(zl_etcd_range_prefix(e, "/t/page/", NULL, 0, &r), 0);
	assert_int_equal(r.n, 25);
	assert_false(r.more);
	assert_true(r.revision > 0);
	zl_etcd_range_fini(&r);
	assert_int_equal(zl_etcd_range(e, "/t/page/k05", "/t/page/k08", 0, &r), 0);
	assert_int_equal(r.n, 3);
	assert_string_equal(r.kvs[0].key, "/t/page/k05");
	assert_string_equal(r.kvs[2].key, "/t/page/k07");
	zl_etcd_range_fini(&r);
	assert_int_equal(zl_etcd_range(e, "/t/page/k05", NULL, 0, &r), 0);
	assert_int_equal(r.n, 1);
	zl_etcd_range_fini(&r);
	/* "" = no upper bound. */
	assert_int_equal(zl_etcd_range(e, "/t/page/k20", "", 0, &r), 0);
	assert_true(r.n >= 6); /* k20..k24 and /t/pagf */
	zl_etcd_range_fini(&r);
	/* A prefix with nothing under it. */
	assert_int_equal(zl_etcd_range_prefix(e, "/t/page/zz", NULL, 10, &r), 0);
	assert_int_equal(r.n, 0);
	assert_null(r.kvs);
	zl_etcd_range_fini(&r);

	assert_int_equal(zl_etcd_delete_prefix(e, "/t/page/", &n), 0);
	assert_int_equal(n, 25);
	assert_int_equal(zl_etcd_range_prefix(e, "/t/page/", NULL, 0, &r), 0);
	assert_int_equal(r.n, 0);
	zl_etcd_range_fini(&r);
	assert_int_equal(zl_etcd_delete_prefix(e, "/t/pag", &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(zl_etcd_delete_prefix(e, "", &n), -ZL_ERR_INVAL);
}

static void test_txn_create_if_absent(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_cmp cmp = { .key = "/t/txn/once", .target = ZL_ETCD_CMP_CREATE,
				   .result = ZL_ETCD_EQUAL, .rev = 0 };
	struct zl_etcd_op put1 = { .kind = ZL_ETCD_OP_PUT, .key = "/t/txn/once", .value = "v1",
				   .value_len = 2 };
	struct zl_etcd_op put2 = { .kind = ZL_ETCD_OP_PUT, .key = "/t/txn/once", .value = "v2",
				   .value_len = 2 };
	struct zl_etcd_op get = { .kind = ZL_ETCD_OP_GET, .key = "/t/txn/once" };
	struct zl_etcd_txn_result res;
	struct zl_etcd_kv kv;
	bool ok = false;

	assert_int_equal(zl_etcd_txn(e, &cmp, 1, &put1, 1, &get, 1, &ok, NULL), 0);
	assert_true(ok);
	assert_int_equal(zl_etcd_txn(e, &cmp, 1, &put2, 1, &get, 1, &ok, &res), 0);
	assert_false(ok);
	assert_false(res.succeeded);
	assert_true(res.revision > 0);
	assert_int_equal(res.n_gets, 1);
	assert_int_equal(res.gets[0].n, 1);
	assert_string_equal(res.gets[0].kvs[0].value, "v1");
	zl_etcd_txn_result_fini(&res);
	assert_int_equal(zl_etcd_get(e, "/t/txn/once", &kv), 0);
	assert_string_equal(kv.value, "v1");
	zl_etcd_kv_fini(&kv);
}

static void test_txn_mod_revision(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_cmp cmp = { .key = "/t/txn/cas", .target = ZL_ETCD_CMP_MOD,
				   .result = ZL_ETCD_EQUAL };
	struct zl_etcd_op put = { .kind = ZL_ETCD_OP_PUT, .key = "/t/txn/cas", .value = "new",
				  .value_len = 3 };
	struct zl_etcd_kv kv;
	int64_t rev;
	bool ok;

	assert_int_equal(zl_etcd_put(e, "/t/txn/cas", "old", 3, 0, &rev), 0);
	cmp.rev = rev;
	assert_int_equal(zl_etcd_txn(e, &cmp, 1, &put, 1, NULL, 0, &ok, NULL), 0);
	assert_true(ok);
	/* Same (now stale) revision: the comparison fails, nothing is written. */
	put.value = "newer";
	put.value_len = 5;
	assert_int_equal(zl_etcd_txn(e, &cmp, 1, &put, 1, NULL, 0, &ok, NULL), 0);
	assert_false(ok);
	assert_int_equal(zl_etcd_get(e, "/t/txn/cas", &kv), 0);
	assert_string_equal(kv.value, "new");
	assert_true(kv.mod_rev > rev);

	/* VALUE and VERSION comparisons, several compares at once. */
	struct zl_etcd_cmp two[] = {
		{ .key = "/t/txn/cas", .target = ZL_ETCD_CMP_VALUE, .result = ZL_ETCD_EQUAL,
		  .value = "new", .value_len = 3 },
		{ .key = "/t/txn/cas", .target = ZL_ETCD_CMP_VERSION, .result = ZL_ETCD_GREATER,
		  .rev = 1 },
		{ .key = "/t/txn/cas", .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_LESS,
		  .rev = kv.mod_rev + 1 },
	};
	struct zl_etcd_op del = { .kind = ZL_ETCD_OP_DELETE, .key = "/t/txn/cas" };
	zl_etcd_kv_fini(&kv);
	assert_int_equal(zl_etcd_txn(e, two, 3, &del, 1, NULL, 0, &ok, NULL), 0);
	assert_true(ok);
	assert_int_equal(zl_etcd_get(e, "/t/txn/cas", &kv), -ZL_ERR_NOT_FOUND);

	/* Invalid input is refused locally. */
	struct zl_etcd_cmp nokey = { .key = "", .target = ZL_ETCD_CMP_MOD };
	assert_int_equal(zl_etcd_txn(e, &nokey, 1, NULL, 0, NULL, 0, &ok, NULL), -ZL_ERR_INVAL);
}

static void test_txn_gets(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_op ops[] = {
		{ .kind = ZL_ETCD_OP_GET, .key = "/t/txg/a" },
		{ .kind = ZL_ETCD_OP_PUT, .key = "/t/txg/c", .value = "C", .value_len = 1 },
		{ .kind = ZL_ETCD_OP_GET, .key = "/t/txg/", .range_end = "/t/txg0" },
		{ .kind = ZL_ETCD_OP_DELETE, .key = "/t/txg/b" },
		{ .kind = ZL_ETCD_OP_GET, .key = "/t/txg/missing" },
	};
	struct zl_etcd_txn_result res;
	struct zl_etcd_range r;
	bool ok;

	assert_int_equal(zl_etcd_put(e, "/t/txg/a", "A", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/txg/b", "B", 1, 0, NULL), 0);
	/* No compares: success branch runs. */
	assert_int_equal(zl_etcd_txn(e, NULL, 0, ops, ZL_ARRAY_SIZE(ops), NULL, 0, &ok, &res), 0);
	assert_true(ok && res.succeeded);
	assert_int_equal(res.n_gets, 3);
	assert_int_equal(res.gets[0].n, 1);
	assert_string_equal(res.gets[0].kvs[0].key, "/t/txg/a");
	assert_string_equal(res.gets[0].kvs[0].value, "A");
	/* Ops see the effects of earlier ops in the same transaction. */
	assert_int_equal(res.gets[1].n, 3);
	assert_string_equal(res.gets[1].kvs[0].key, "/t/txg/a");
	assert_string_equal(res.gets[1].kvs[1].key, "/t/txg/b");
	assert_string_equal(res.gets[1].kvs[2].key, "/t/txg/c");
	assert_int_equal(res.gets[2].n, 0);
	zl_etcd_txn_result_fini(&res);
	assert_int_equal(zl_etcd_range_prefix(e, "/t/txg/", NULL, 0, &r), 0);
	assert_int_equal(r.n, 2); /* b deleted */
	zl_etcd_range_fini(&r);
}

static void test_lease(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_kv kv;
	int64_t id, ttl;

	assert_int_equal(zl_etcd_lease_grant(e, 30, &id), 0);
	assert_true(id != 0);
	assert_int_equal(zl_etcd_put(e, "/t/lease/node", "up", 2, id, NULL), 0);
	assert_int_equal(zl_etcd_get(e, "/t/lease/node", &kv), 0);
	assert_true(kv.lease == id);
	zl_etcd_kv_fini(&kv);
	assert_int_equal(zl_etcd_lease_keepalive(e, id, &ttl), 0);
	assert_true(ttl > 0 && ttl <= 30);
	assert_int_equal(zl_etcd_lease_revoke(e, id), 0);
	assert_int_equal(zl_etcd_get(e, "/t/lease/node", &kv), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_etcd_lease_keepalive(e, id, &ttl), -ZL_ERR_NOT_FOUND);
	assert_int_equal(ttl, 0);
	assert_int_equal(zl_etcd_lease_revoke(e, id), -ZL_ERR_NOT_FOUND);
	/* Putting on a lease that no longer exists is an etcd error. */
	assert_int_equal(zl_etcd_put(e, "/t/lease/node", "up", 2, id, NULL), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_etcd_lease_grant(e, 0, &id), -ZL_ERR_INVAL);
}

static void test_lease_expiry(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_kv kv;
	int64_t id, ttl;
	int i;

	/* etcd's minimum TTL is a few seconds; give it a bounded wait. */
	assert_int_equal(zl_etcd_lease_grant(e, 1, &id), 0);
	assert_int_equal(zl_etcd_put(e, "/t/lease/short", "x", 1, id, NULL), 0);
	for (i = 0; i < 100; i++) {
		if (zl_etcd_get(e, "/t/lease/short", &kv) == -ZL_ERR_NOT_FOUND)
			break;
		zl_etcd_kv_fini(&kv);
		usleep(100 * 1000);
	}
	assert_true(i < 100);
	assert_int_equal(zl_etcd_lease_keepalive(e, id, &ttl), -ZL_ERR_NOT_FOUND);
}

static void test_watch(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_watch *w, *w2;
	struct ev_log l, l2;
	int64_t rev0, rev;
	uint64_t t0;

	ev_log_init(&l);
	ev_log_init(&l2);
	assert_int_equal(zl_etcd_put(e, "/t/watch/old", "o", 1, 0, &rev0), 0);
	assert_int_equal(zl_etcd_watch_prefix(e, "/t/watch/", 0, ev_cb, &l, &w), 0);
	/* Let the watch register (it starts from "now"). */
	usleep(300 * 1000);
	assert_int_equal(zl_etcd_put(e, "/t/watch/a", "\0A", 2, 0, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/watchx", "outside", 7, 0, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/watch/b", "B", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_delete(e, "/t/watch/a", NULL, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/watch/c", "C", 1, 0, &rev), 0);
	assert_int_equal(ev_wait(&l, 4, 5000), 4);
	usleep(100 * 1000);
	pthread_mutex_lock(&l.lock);
	assert_int_equal(l.n, 4);
	assert_int_equal(l.type[0], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[0], "/t/watch/a");
	assert_int_equal(l.value_len[0], 2);
	assert_memory_equal(l.value[0], "\0A", 2);
	assert_int_equal(l.type[1], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[1], "/t/watch/b");
	assert_int_equal(l.type[2], ZL_ETCD_EV_DELETE);
	assert_string_equal(l.key[2], "/t/watch/a");
	assert_int_equal(l.type[3], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[3], "/t/watch/c");
	assert_int_equal(l.mod_rev[3], rev);
	pthread_mutex_unlock(&l.lock);

	/* From an old revision: history replays, including /t/watch/old. */
	assert_int_equal(zl_etcd_watch_prefix(e, "/t/watch/", rev0, ev_cb, &l2, &w2), 0);
	assert_int_equal(ev_wait(&l2, 5, 5000), 5);
	assert_string_equal(l2.key[0], "/t/watch/old");
	assert_string_equal(l2.key[4], "/t/watch/c");

	/* Cancel is prompt even on an idle stream. */
	t0 = zl_now_ms();
	zl_etcd_watch_cancel(w);
	zl_etcd_watch_cancel(w2);
	assert_true(zl_now_ms() - t0 < 1000);
	zl_etcd_watch_cancel(NULL);
	ev_log_fini(&l);
	ev_log_fini(&l2);
}

static void test_watch_reconnects_to_live_endpoint(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd *dead_first;
	struct zl_etcd_watch *w;
	struct ev_log l;
	char eps[256];
	int64_t rev;

	/* The watch begins on a dead endpoint and must move on. */
	snprintf(eps, sizeof(eps), "http://127.0.0.1:1,%s", etcd_url);
	dead_first = client(eps, 2000);
	ev_log_init(&l);
	assert_int_equal(zl_etcd_put(e, "/t/wfo/a", "1", 1, 0, &rev), 0);
	assert_int_equal(zl_etcd_watch_prefix(dead_first, "/t/wfo/", rev, ev_cb, &l, &w), 0);
	assert_int_equal(ev_wait(&l, 1, 5000), 1);
	assert_string_equal(l.key[0], "/t/wfo/a");
	zl_etcd_watch_cancel(w);
	zl_etcd_destroy(dead_first);
	ev_log_fini(&l);
}

static size_t discard_body(char *p, size_t s, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return s * n;
}

/* etcd's compaction (POST /v3/kv/compaction) up to rev, physical. */
static void compact(int64_t rev)
{
	char url[256], body[128];
	CURL *c = curl_easy_init();
	long http = 0;

	assert_non_null(c);
	snprintf(url, sizeof(url), "%s/v3/kv/compaction", etcd_url);
	snprintf(body, sizeof(body), "{\"revision\":\"%lld\",\"physical\":true}", (long long)rev);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_body);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
	assert_int_equal(http, 200);
	curl_easy_cleanup(c);
}

/* A watch whose start revision etcd compacted lost the events before it:
 * it lists the prefix again and delivers RESYNC_BEGIN, the keys as they
 * are, RESYNC_END, then live events. A consumer learns that /t/wc/a was
 * deleted (no PUT of it between BEGIN and END) and /t/wc/b rewritten. */
static void test_watch_compacted(void **state)
{
	struct zl_etcd *e = *state;
	struct zl_etcd_watch *w;
	struct ev_log l;
	int64_t rev0, rev;

	ev_log_init(&l);
	assert_int_equal(zl_etcd_put(e, "/t/wc/a", "1", 1, 0, &rev0), 0);
	assert_int_equal(zl_etcd_put(e, "/t/wc/b", "1", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_delete(e, "/t/wc/a", NULL, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/wc/b", "2", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_put(e, "/t/wc/c", "3", 1, 0, &rev), 0);
	compact(rev);
	/* From rev0 + 1, which etcd no longer has. */
	assert_int_equal(zl_etcd_watch_prefix(e, "/t/wc/", rev0 + 1, ev_cb, &l, &w), 0);
	assert_int_equal(ev_wait(&l, 4, 10000), 4);
	pthread_mutex_lock(&l.lock);
	assert_int_equal(l.type[0], ZL_ETCD_EV_RESYNC_BEGIN);
	assert_string_equal(l.key[0], "/t/wc/");
	assert_true(l.mod_rev[0] >= rev);
	assert_int_equal(l.type[1], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[1], "/t/wc/b");
	assert_memory_equal(l.value[1], "2", 1);
	assert_int_equal(l.type[2], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[2], "/t/wc/c");
	assert_int_equal(l.type[3], ZL_ETCD_EV_RESYNC_END);
	assert_int_equal(l.mod_rev[3], l.mod_rev[0]);
	pthread_mutex_unlock(&l.lock);
	/* Then live: from just after the listing, nothing twice. */
	assert_int_equal(zl_etcd_put(e, "/t/wc/d", "4", 1, 0, &rev), 0);
	assert_int_equal(ev_wait(&l, 5, 5000), 5);
	usleep(100 * 1000);
	pthread_mutex_lock(&l.lock);
	assert_int_equal(l.n, 5);
	assert_int_equal(l.type[4], ZL_ETCD_EV_PUT);
	assert_string_equal(l.key[4], "/t/wc/d");
	assert_int_equal(l.mod_rev[4], rev);
	pthread_mutex_unlock(&l.lock);
	zl_etcd_watch_cancel(w);
	ev_log_fini(&l);
}

static void test_failover(void **state)
{
	struct zl_etcd_kv kv;
	struct zl_etcd *e;
	char eps[256];
	int64_t t0;

	(void)state;
	snprintf(eps, sizeof(eps), "http://127.0.0.1:1,%s", etcd_url);
	e = client(eps, 3000);
	assert_string_equal(zl_etcd_endpoint(e), "http://127.0.0.1:1");
	assert_int_equal(zl_etcd_put(e, "/t/fo", "x", 1, 0, NULL), 0);
	assert_string_equal(zl_etcd_endpoint(e), etcd_url);
	t0 = (int64_t)zl_now_ms();
	for (int i = 0; i < 20; i++) {
		assert_int_equal(zl_etcd_get(e, "/t/fo", &kv), 0);
		zl_etcd_kv_fini(&kv);
	}
	/* The working endpoint is remembered (keep-alive, no retries): fast. */
	assert_true((int64_t)zl_now_ms() - t0 < 2000);
	zl_etcd_destroy(e);
}

static void test_all_dead(void **state)
{
	struct zl_etcd_kv kv;
	struct zl_etcd *e;

	(void)state;
	e = client("http://127.0.0.1:1,127.0.0.1:2", 2000);
	assert_int_equal(zl_etcd_get(e, "/t/x", &kv), -ZL_ERR_ETCD);
	assert_non_null(strstr(zl_etcd_last_error(), "etcd at http://127.0.0.1:1"));
	assert_non_null(strstr(zl_etcd_last_error(), "etcd at http://127.0.0.1:2"));
	assert_int_equal(zl_etcd_ping(e), -ZL_ERR_ETCD);
	assert_int_equal(zl_etcd_put(e, "/t/x", "1", 1, 0, NULL), -ZL_ERR_ETCD);
	zl_etcd_destroy(e);
}

/* A listener that never accepts: connect succeeds (backlog), no answer. */
static int black_hole(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static void test_timeout(void **state)
{
	struct zl_etcd_kv kv;
	struct zl_etcd *e;
	char eps[256];
	uint64_t t0, dt;
	int fd, port;

	(void)state;
	fd = black_hole(&port);
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d", port);
	e = client(eps, 500);
	t0 = zl_now_ms();
	assert_int_equal(zl_etcd_get(e, "/t/x", &kv), -ZL_ERR_TIMEOUT);
	dt = zl_now_ms() - t0;
	assert_true(dt >= 450 && dt < 2000);
	assert_true(strlen(zl_etcd_last_error()) > 0);
	t0 = zl_now_ms();
	assert_int_equal(zl_etcd_put(e, "/t/x", "1", 1, 0, NULL), -ZL_ERR_TIMEOUT);
	assert_true(zl_now_ms() - t0 < 2000);
	zl_etcd_destroy(e);

	/* A timeout is not a reason to resend elsewhere: the request may have
	 * been applied. But the next call starts over and may still fail over. */
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", port, etcd_url);
	e = client(eps, 500);
	assert_int_equal(zl_etcd_put(e, "/t/x", "1", 1, 0, NULL), -ZL_ERR_TIMEOUT);
	zl_etcd_destroy(e);
	close(fd);
}

struct mt_arg {
	struct zl_etcd *e;
	int id;
	int failures;
};

static void *mt_worker(void *p)
{
	struct mt_arg *a = p;
	char key[64];

	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "/t/mt/%d/%02d", a->id, i);
		if (zl_etcd_put(a->e, key, key, strlen(key), 0, NULL))
			a->failures++;
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct zl_etcd *e = *state;
	struct mt_arg args[4];
	pthread_t th[4];
	int64_t n;

	for (int i = 0; i < 4; i++) {
		args[i] = (struct mt_arg){ .e = e, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, mt_worker, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(args[i].failures, 0);
	}
	assert_int_equal(zl_etcd_delete_prefix(e, "/t/mt/", &n), 0);
	assert_int_equal(n, 80);
}

/* ---- auth (last: it switches auth on in the shared etcd) ---- */

/* Raw admin POST; returns the HTTP status, copies the token if any. */
static size_t admin_write(char *p, size_t s, size_t n, void *ud)
{
	struct etcd_buf *b = ud;

	return etcd_buf_write(p, s, n, b);
}

static long admin_post(const char *path, const char *body, const char *token, char *tok_out)
{
	struct etcd_buf b = { 0 };
	struct curl_slist *h = etcd_headers(token);
	char url[256];
	long http = 0;
	CURL *c = curl_easy_init();

	assert_non_null(c);
	snprintf(url, sizeof(url), "%s%s", etcd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, admin_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
	if (tok_out) {
		json_t *j;

		assert_int_equal(etcd_json_parse_object(b.data, b.len, &j), 0);
		assert_true(json_is_string(json_object_get(j, "token")));
		snprintf(tok_out, 128, "%s", json_string_value(json_object_get(j, "token")));
		json_decref(j);
	}
	etcd_buf_free(&b);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return http;
}

static struct zl_etcd *auth_client(const char *user, const char *pw)
{
	struct zl_etcd_opts o = { .endpoints = etcd_url, .timeout_ms = 5000, .user = user,
				  .password = pw };
	struct zl_etcd *e = NULL;

	assert_int_equal(zl_etcd_create(&o, &e), 0);
	return e;
}

static void test_auth(void **state)
{
	struct zl_etcd *anon = *state, *good, *bad;
	struct zl_etcd_watch *w;
	struct zl_etcd_kv kv;
	struct ev_log l;
	char tok[128];

	/* Configured user while auth is still off: works without a token. */
	good = auth_client("root", "s3cret");
	assert_int_equal(zl_etcd_put(good, "/t/auth/pre", "1", 1, 0, NULL), 0);

	assert_int_equal(admin_post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"s3cret\"}",
				    NULL, NULL), 200);
	assert_int_equal(admin_post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}",
				    NULL, NULL), 200);
	assert_int_equal(admin_post("/v3/auth/enable", "{}", NULL, NULL), 200);

	/* No credentials, wrong credentials: refused with a message. */
	assert_int_equal(zl_etcd_get(anon, "/t/auth/pre", &kv), -ZL_ERR_AUTH);
	assert_non_null(strstr(zl_etcd_last_error(), "user and password"));
	bad = auth_client("root", "wrong");
	assert_int_equal(zl_etcd_put(bad, "/t/auth/k", "1", 1, 0, NULL), -ZL_ERR_AUTH);
	assert_non_null(strstr(zl_etcd_last_error(), "authenticate as root"));
	zl_etcd_destroy(bad);

	/* The client that ran without auth logs in when etcd asks for it. */
	assert_int_equal(zl_etcd_put(good, "/t/auth/k", "v", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_get(good, "/t/auth/k", &kv), 0);
	assert_string_equal(kv.value, "v");
	zl_etcd_kv_fini(&kv);

	/* Watches log in on their own connection. */
	ev_log_init(&l);
	assert_int_equal(zl_etcd_watch_prefix(good, "/t/auth/w/", 0, ev_cb, &l, &w), 0);
	usleep(300 * 1000);
	assert_int_equal(zl_etcd_put(good, "/t/auth/w/1", "1", 1, 0, NULL), 0);
	assert_int_equal(ev_wait(&l, 1, 5000), 1);

	/* Switching auth off and on drops every token: the client
	 * re-authenticates once and the call succeeds. */
	assert_int_equal(admin_post("/v3/auth/authenticate",
				    "{\"name\":\"root\",\"password\":\"s3cret\"}", NULL, tok), 200);
	assert_int_equal(admin_post("/v3/auth/disable", "{}", tok, NULL), 200);
	assert_int_equal(admin_post("/v3/auth/enable", "{}", NULL, NULL), 200);
	assert_int_equal(zl_etcd_put(good, "/t/auth/k", "w", 1, 0, NULL), 0);
	assert_int_equal(zl_etcd_get(good, "/t/auth/k", &kv), 0);
	assert_string_equal(kv.value, "w");
	zl_etcd_kv_fini(&kv);
	/* The watch stream was cut by the token change or still runs; either
	 * way it delivers new events. */
	assert_int_equal(zl_etcd_put(good, "/t/auth/w/2", "2", 1, 0, NULL), 0);
	assert_int_equal(ev_wait(&l, 2, 10000), 2);
	zl_etcd_watch_cancel(w);
	ev_log_fini(&l);

	assert_int_equal(admin_post("/v3/auth/authenticate",
				    "{\"name\":\"root\",\"password\":\"s3cret\"}", NULL, tok), 200);
	assert_int_equal(admin_post("/v3/auth/disable", "{}", tok, NULL), 200);
	assert_int_equal(zl_etcd_get(anon, "/t/auth/k", &kv), 0);
	zl_etcd_kv_fini(&kv);
	zl_etcd_destroy(good);
}

int main(void)
{
	const struct CMUnitTest offline[] = {
		cmocka_unit_test(test_b64),
		cmocka_unit_test(test_prefix_end),
		cmocka_unit_test(test_parse_answers),
		cmocka_unit_test(test_parse_watch),
		cmocka_unit_test(test_create_invalid),
	};
	const struct CMUnitTest online[] = {
	    cmocka_unit_test(test_put_get_delete),
	    cmocka_unit_test(test_binary_value),
	    cmocka_unit_test(test_range_paging),
	    cmocka_unit_test(test_txn_create_if_absent),
	    cmocka_unit_test(test_txn_mod_revision),
	    cmocka_unit_test(test_txn_gets),
	    cmocka_unit_test(test_lease),
	    cmocka_unit_test(test_lease_expiry),
	    cmocka_unit_test(test_watch),
	    cmocka_unit_test(test_watch_reconnects_to_live_endpoint),
	    cmocka_unit_test(test_watch_compacted),
	    cmocka_unit_test(test_failover),
	    cmocka_unit_test(test_all_dead),
	    cmocka_unit_test(test_timeout),
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_auth),
	};
	int rc;

	zl_log_init("etcd_test");
	rc = cmocka_run_group_tests_name("etcd_offline", offline, NULL, NULL);
	etcd_url = getenv("ZL_TEST_ETCD");
	if (!etcd_url || !*etcd_url) {
		fprintf(stderr, "ZL_TEST_ETCD is not set: run under test/lib/with-etcd.sh\n");
		return 1;
	}
	rc |= cmocka_run_group_tests_name("etcd_online", online, setup, teardown);
	return rc;
}
