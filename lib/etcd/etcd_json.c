/* Base64 and JSON for the etcd v3 gateway: keys and values travel as
 * standard base64, int64 fields as decimal strings, fields with default
 * values (0, false, empty) are omitted by the gateway. Every decoder here is
 * reachable from the network and is fuzzed (test/fuzz/fuzz_etcd_json.c). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "lib/common/common.h"
#include "etcd_internal.h"

char *etcd_b64_encode(const void *data, size_t len)
{
	size_t olen;
	char *out;

	if (len > (size_t)INT_MAX / 4 * 3 - 3)
		return NULL;
	olen = (len + 2) / 3 * 4;
	out = malloc(olen + 1);
	if (!out)
		return NULL;
	EVP_EncodeBlock((unsigned char *)out, data, (int)len);
	out[olen] = '\0';
	return out;
}

static bool b64_char_ok(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

int etcd_b64_decode(const char *s, size_t slen, char **out, size_t *len)
{
	size_t pad = 0;
	char *buf;
	int n;

	*out = NULL;
	*len = 0;
	/* EVP_DecodeBlock is lenient (whitespace, '=' anywhere), so check the
	 * alphabet and padding first. */
	if (slen % 4 || slen > (size_t)INT_MAX)
		return -ZL_ERR_PROTO;
	if (slen && s[slen - 1] == '=')
		pad = (slen >= 2 && s[slen - 2] == '=') ? 2 : 1;
	for (size_t i = 0; i < slen - pad; i++)
		if (!b64_char_ok(s[i]))
			return -ZL_ERR_PROTO;
	buf = malloc(slen / 4 * 3 + 1);
	if (!buf)
		return -ENOMEM;
	n = EVP_DecodeBlock((unsigned char *)buf, (const unsigned char *)s, (int)slen);
	if (n < 0 || (size_t)n < pad) {
		free(buf);
		return -ZL_ERR_PROTO;
	}
	*len = (size_t)n - pad;
	buf[*len] = '\0';
	*out = buf;
	return 0;
}

int etcd_json_set_b64(json_t *obj, const char *field, const void *data, size_t len)
{
	char *s = etcd_b64_encode(data, len);

	if (!s)
		return -ENOMEM;
	if (json_object_set_new(obj, field, json_string(s))) {
		free(s);
		return -ENOMEM;
	}
	free(s);
	return 0;
}

int etcd_json_set_i64(json_t *obj, const char *field, int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, v);
	return json_object_set_new(obj, field, json_string(s)) ? -ENOMEM : 0;
}

int etcd_json_get_i64(const json_t *obj, const char *field, int64_t *out)
{
	const json_t *v = json_is_object(obj) ? json_object_get(obj, field) : NULL;
	const char *s;
	char *end;
	long long x;

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -ZL_ERR_PROTO;
	s = json_string_value(v);
	if (!*s)
		return 0;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || *end || end == s)
		return -ZL_ERR_PROTO;
	*out = x;
	return 0;
}

static bool json_get_bool(const json_t *obj, const char *field)
{
	return json_is_true(json_object_get(obj, field));
}

int etcd_json_parse_object(const char *buf, size_t len, json_t **out)
{
	json_error_t jerr;
	json_t *root;

	*out = NULL;
	if (!buf || !len)
		return -ZL_ERR_PROTO;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return -ZL_ERR_PROTO;
	if (!json_is_object(root)) {
		json_decref(root);
		return -ZL_ERR_PROTO;
	}
	*out = root;
	return 0;
}

bool etcd_json_error(const json_t *obj, int *code, const char **msg)
{
	const json_t *err = json_object_get(obj, "error");
	const json_t *m = json_object_get(obj, "message");
	const json_t *c = json_object_get(obj, "code");

	*code = 0;
	*msg = NULL;
	/* LeaseGrantResponse has an "error" string of its own, empty when fine. */
	if (!err || json_is_null(err) || (json_is_string(err) && !*json_string_value(err)))
		return false;
	/* Unary calls: {"error": "...", "message": "...", "code": N}.
	 * Streams: {"error": {"grpc_code": N, "message": "...", ...}}. */
	if (json_is_object(err)) {
		c = json_object_get(err, "grpc_code");
		if (!c)
			c = json_object_get(err, "code");
		m = json_object_get(err, "message");
	} else if (!json_is_string(m)) {
		m = err;
	}
	if (json_is_integer(c))
		*code = (int)json_integer_value(c);
	*msg = json_is_string(m) ? json_string_value(m) : "unknown etcd error";
	return true;
}

static int json_get_b64(const json_t *obj, const char *field, char **out, size_t *len)
{
	const json_t *v = json_object_get(obj, field);

	if (!v || json_is_null(v))
		return etcd_b64_decode("", 0, out, len);
	if (!json_is_string(v))
		return -ZL_ERR_PROTO;
	return etcd_b64_decode(json_string_value(v), json_string_length(v), out, len);
}

void zl_etcd_kv_fini(struct zl_etcd_kv *kv)
{
	if (!kv)
		return;
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

void zl_etcd_range_fini(struct zl_etcd_range *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		zl_etcd_kv_fini(&r->kvs[i]);
	free(r->kvs);
	memset(r, 0, sizeof(*r));
}

void zl_etcd_txn_result_fini(struct zl_etcd_txn_result *res)
{
	if (!res)
		return;
	for (size_t i = 0; i < res->n_gets; i++)
		zl_etcd_range_fini(&res->gets[i]);
	free(res->gets);
	memset(res, 0, sizeof(*res));
}

int etcd_json_parse_kv(const json_t *kv, struct zl_etcd_kv *out)
{
	size_t klen;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(kv))
		return -ZL_ERR_PROTO;
	rc = json_get_b64(kv, "key", &out->key, &klen);
	if (rc)
		goto out_fini;
	/* The API hands keys out as C strings: a key holding a NUL is not one
	 * Zipline wrote. */
	if (memchr(out->key, '\0', klen)) {
		rc = -ZL_ERR_PROTO;
		goto out_fini;
	}
	rc = json_get_b64(kv, "value", &out->value, &out->value_len);
	if (rc)
		goto out_fini;
	rc = etcd_json_get_i64(kv, "create_revision", &out->create_rev);
	if (!rc)
		rc = etcd_json_get_i64(kv, "mod_revision", &out->mod_rev);
	if (!rc)
		rc = etcd_json_get_i64(kv, "version", &out->version);
	if (!rc)
		rc = etcd_json_get_i64(kv, "lease", &out->lease);
	if (rc)
		goto out_fini;
	return 0;

out_fini:
	zl_etcd_kv_fini(out);
	return rc;
}

int etcd_json_parse_range(const json_t *resp, struct zl_etcd_range *out)
{
	const json_t *kvs;
	size_t n;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(resp))
		return -ZL_ERR_PROTO;
	rc = etcd_json_get_i64(json_object_get(resp, "header"), "revision", &out->revision);
	if (!rc)
		rc = etcd_json_get_i64(resp, "count", &out->count);
	if (rc)
		return rc;
	out->more = json_get_bool(resp, "more");
	kvs = json_object_get(resp, "kvs");
	if (!kvs || json_is_null(kvs))
		return 0;
	if (!json_is_array(kvs))
		return -ZL_ERR_PROTO;
	n = json_array_size(kvs);
	if (!n)
		return 0;
	out->kvs = calloc(n, sizeof(*out->kvs));
	if (!out->kvs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		rc = etcd_json_parse_kv(json_array_get(kvs, i), &out->kvs[i]);
		if (rc)
			goto out_fini;
		out->n++;
	}
	return 0;

out_fini:
	zl_etcd_range_fini(out);
	return rc;
}

int etcd_json_parse_txn(const json_t *resp, const struct zl_etcd_op *success, size_t n_success,
			const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
			struct zl_etcd_txn_result *res)
{
	const struct zl_etcd_op *ops;
	const json_t *responses;
	size_t n_ops, g = 0;
	int64_t rev;
	bool ok;
	int rc;

	if (res)
		memset(res, 0, sizeof(*res));
	if (!json_is_object(resp))
		return -ZL_ERR_PROTO;
	rc = etcd_json_get_i64(json_object_get(resp, "header"), "revision", &rev);
	if (rc)
		return rc;
	ok = json_get_bool(resp, "succeeded");
	if (succeeded)
		*succeeded = ok;
	if (!res)
		return 0;
	res->succeeded = ok;
	res->revision = rev;
	ops = ok ? success : failure;
	n_ops = ok ? n_success : n_failure;
	for (size_t i = 0; i < n_ops; i++)
		res->n_gets += ops[i].kind == ZL_ETCD_OP_GET;
	if (!res->n_gets)
		return 0;
	res->gets = calloc(res->n_gets, sizeof(*res->gets));
	if (!res->gets) {
		res->n_gets = 0;
		return -ENOMEM;
	}
	responses = json_object_get(resp, "responses");
	if (responses && !json_is_array(responses)) {
		rc = -ZL_ERR_PROTO;
		goto out_fini;
	}
	for (size_t i = 0; i < n_ops; i++) {
		const json_t *rr;

		if (ops[i].kind != ZL_ETCD_OP_GET)
			continue;
		/* responses[i] answers ops[i]; a missing one stays empty. */
		rr = json_object_get(json_array_get(responses, i), "response_range");
		if (rr) {
			rc = etcd_json_parse_range(rr, &res->gets[g]);
			if (rc)
				goto out_fini;
			/* Inner headers carry only the revision; keep the
			 * transaction's when it is absent. */
			if (!res->gets[g].revision)
				res->gets[g].revision = rev;
		}
		g++;
	}
	return 0;

out_fini:
	zl_etcd_txn_result_fini(res);
	return rc;
}

int etcd_json_parse_keepalive(const json_t *resp, int64_t *ttl)
{
	const json_t *result = json_object_get(resp, "result");
	const char *msg;
	int code;

	*ttl = 0;
	if (etcd_json_error(resp, &code, &msg)) {
		etcd_set_error("etcd lease keepalive failed: %s (code %d)", msg, code);
		return -ZL_ERR_ETCD;
	}
	if (!json_is_object(result))
		return -ZL_ERR_PROTO;
	return etcd_json_get_i64(result, "TTL", ttl);
}

int etcd_json_parse_watch(const char *line, size_t len, zl_etcd_watch_cb cb, void *arg,
			  struct etcd_watch_msg *msg)
{
	const json_t *result, *events;
	const char *emsg;
	json_t *root;
	int code, rc;

	memset(msg, 0, sizeof(*msg));
	rc = etcd_json_parse_object(line, len, &root);
	if (rc)
		return rc;
	if (etcd_json_error(root, &code, &emsg)) {
		msg->error = true;
		snprintf(msg->reason, sizeof(msg->reason), "%s (code %d)", emsg, code);
		goto out_put;
	}
	result = json_object_get(root, "result");
	if (!json_is_object(result)) {
		rc = -ZL_ERR_PROTO;
		goto out_put;
	}
	msg->created = json_get_bool(result, "created");
	msg->canceled = json_get_bool(result, "canceled");
	rc = etcd_json_get_i64(json_object_get(result, "header"), "revision", &msg->header_rev);
	if (!rc)
		rc = etcd_json_get_i64(result, "compact_revision", &msg->compact_rev);
	if (rc)
		goto out_put;
	if (json_is_string(json_object_get(result, "cancel_reason")))
		snprintf(msg->reason, sizeof(msg->reason), "%s",
			 json_string_value(json_object_get(result, "cancel_reason")));
	events = json_object_get(result, "events");
	if (events && !json_is_array(events)) {
		rc = -ZL_ERR_PROTO;
		goto out_put;
	}
	for (size_t i = 0; i < json_array_size(events); i++) {
		const json_t *ev = json_array_get(events, i);
		const json_t *type = json_object_get(ev, "type");
		enum zl_etcd_event_type t;
		struct zl_etcd_kv kv;
		int krc;

		/* PUT is the enum's zero value, so the gateway omits it. */
		if (!type || json_is_null(type) ||
		    (json_is_string(type) && !strcmp(json_string_value(type), "PUT")) ||
		    (json_is_integer(type) && json_integer_value(type) == 0)) {
			t = ZL_ETCD_EV_PUT;
		} else if ((json_is_string(type) && !strcmp(json_string_value(type), "DELETE")) ||
			   (json_is_integer(type) && json_integer_value(type) == 1)) {
			t = ZL_ETCD_EV_DELETE;
		} else {
			msg->n_bad++;
			continue;
		}
		krc = etcd_json_parse_kv(json_object_get(ev, "kv"), &kv);
		if (krc == -ENOMEM) {
			rc = krc;
			goto out_put;
		}
		if (krc) {
			msg->n_bad++;
			continue;
		}
		if (kv.mod_rev > msg->last_event_rev)
			msg->last_event_rev = kv.mod_rev;
		msg->n_events++;
		if (cb)
			cb(arg, t, &kv);
		zl_etcd_kv_fini(&kv);
	}

out_put:
	json_decref(root);
	return rc;
}
