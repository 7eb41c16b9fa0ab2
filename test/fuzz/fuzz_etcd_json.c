/* libFuzzer target: every decoder of etcd gateway answers (lib/etcd) on
 * arbitrary bytes. Build: clang -fsanitize=fuzzer,address,undefined with
 * lib/etcd/etcd_json.c and etcd.c (for etcd_set_error), zl_common, jansson,
 * libcrypto, libcurl. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/etcd/etcd.h"
#include "lib/etcd/etcd_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fuzz_events;

static void fuzz_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	/* Touch everything the callback is promised. */
	if (kv->key && kv->value && kv->value[kv->value_len] == '\0' &&
	    (type == ZL_ETCD_EV_PUT || type == ZL_ETCD_EV_DELETE))
		fuzz_events += strlen(kv->key) + kv->value_len;
	(void)arg;
}

static void fuzz_check_range(const struct zl_etcd_range *r)
{
	for (size_t i = 0; i < r->n; i++) {
		/* Keys are C strings, values NUL-terminated after value_len. */
		if (!r->kvs[i].key || !r->kvs[i].value || r->kvs[i].value[r->kvs[i].value_len])
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct zl_etcd_op success[] = {
		{ .kind = ZL_ETCD_OP_GET, .key = "a" },
		{ .kind = ZL_ETCD_OP_PUT, .key = "b" },
		{ .kind = ZL_ETCD_OP_GET, .key = "c" },
	};
	static const struct zl_etcd_op failure[] = {
		{ .kind = ZL_ETCD_OP_DELETE, .key = "d" },
		{ .kind = ZL_ETCD_OP_GET, .key = "e" },
	};
	const char *buf = (const char *)data;
	struct zl_etcd_txn_result res;
	struct etcd_watch_msg msg;
	struct zl_etcd_range r;
	struct zl_etcd_kv kv;
	const char *emsg;
	bool succeeded;
	char *out;
	size_t len;
	int64_t v;
	json_t *j;
	int code;

	/* A watch stream line. */
	etcd_json_parse_watch(buf, size, fuzz_cb, NULL, &msg);

	/* Raw base64. */
	if (!etcd_b64_decode(buf, size, &out, &len)) {
		if (out[len])
			abort();
		free(out);
	}

	/* Unary answers. */
	if (etcd_json_parse_object(buf, size, &j))
		return 0;
	etcd_json_error(j, &code, &emsg);
	etcd_json_get_i64(j, "count", &v);
	if (!etcd_json_parse_range(j, &r)) {
		fuzz_check_range(&r);
		zl_etcd_range_fini(&r);
	}
	if (!etcd_json_parse_txn(j, success, ZL_ARRAY_SIZE(success), failure,
				 ZL_ARRAY_SIZE(failure), &succeeded, &res)) {
		if (res.n_gets != (succeeded ? 2u : 1u))
			abort();
		for (size_t i = 0; i < res.n_gets; i++)
			fuzz_check_range(&res.gets[i]);
		zl_etcd_txn_result_fini(&res);
	}
	etcd_json_parse_txn(j, success, ZL_ARRAY_SIZE(success), failure, ZL_ARRAY_SIZE(failure),
			    &succeeded, NULL);
	etcd_json_parse_keepalive(j, &v);
	if (!etcd_json_parse_kv(j, &kv))
		zl_etcd_kv_fini(&kv);
	json_decref(j);
	return 0;
}
