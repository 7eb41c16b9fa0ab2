/* Rebalance requests: <prefix>rebalance/<vol-id> = {"requested", "by"}.
 * `zl volume rebalance` puts one; the manager moves members of the volume's
 * rows one at a time until every live node holds about as many as the
 * others, then deletes it (docs/REPLICATION.md §5). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

static int meta_rebalance_value_check(const struct zl_rebalance_req *r, char *why, size_t why_len)
{
	if (r->requested < 0)
		return meta_fail(why, why_len, "requested=%" PRId64 " is negative", r->requested);
	if (!meta_buf_ok(r->by, sizeof(r->by), false) || zl_node_id_check(r->by))
		return meta_fail(why, why_len, "by is not 1..%d characters of [A-Za-z0-9._-]",
				 ZL_NODE_ID_MAX - 1);
	return 0;
}

int zl_meta_rebalance_check(const struct zl_rebalance_req *r, char *why, size_t why_len)
{
	uint64_t num;

	if (!r)
		return meta_fail(why, why_len, "no request");
	if (!meta_buf_ok(r->vol_id, sizeof(r->vol_id), false) || zl_vol_id_parse(r->vol_id, &num))
		return meta_fail(why, why_len, "vol_id is not vol- and 16 hex digits");
	return meta_rebalance_value_check(r, why, why_len);
}

char *zl_meta_rebalance_to_json(const struct zl_rebalance_req *r)
{
	json_t *o;

	if (!r || meta_rebalance_value_check(r, NULL, 0))
		return NULL;
	o = json_pack("{s:I, s:s}", "requested", (json_int_t)r->requested, "by", r->by);
	return meta_dump(o);
}

static const struct meta_field meta_rebalance_fields[] = {
    META_INT(struct zl_rebalance_req, requested, "requested", 0, INT64_MAX),
    META_STR(struct zl_rebalance_req, by, "by", false),
};

static int meta_rebalance_value_check_rec(const void *rec, char *why, size_t why_len)
{
	return meta_rebalance_value_check(rec, why, why_len);
}

static int meta_rebalance_from_json_why(const char *json, size_t len, struct zl_rebalance_req *r,
					char *why, size_t why_len)
{
	return meta_decode_flat(json, len, meta_rebalance_fields,
				ZL_ARRAY_SIZE(meta_rebalance_fields), r, sizeof(*r),
				meta_rebalance_value_check_rec, why, why_len);
}

int zl_meta_rebalance_from_json(const char *json, size_t len, struct zl_rebalance_req *r)
{
	return meta_rebalance_from_json_why(json, len, r, NULL, 0);
}

/* The value, plus vol_id from the key's last component and mod_rev. */
static int meta_rebalance_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	struct zl_rebalance_req *r = rec;
	const char *id = strrchr(kv->key, '/');
	int ret;

	ret = meta_rebalance_from_json_why(kv->value, kv->value_len, r, why, why_len);
	if (ret)
		return ret;
	if (!id || strlen(id + 1) >= sizeof(r->vol_id))
		return meta_fail(why, why_len, "the key does not end in a volume id");
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", id + 1);
	r->mod_rev = kv->mod_rev;
	return zl_meta_rebalance_check(r, why, why_len);
}

static int meta_rebalance_cmp(const void *a, const void *b)
{
	const struct zl_rebalance_req *x = a, *y = b;

	return strcmp(x->vol_id, y->vol_id);
}

static const struct meta_record_ops meta_rebalance_ops = {
    .kind = "rebalance",
    .what = "rebalance request",
    .hint = "delete it with etcdctl and run `zl volume rebalance` again",
    .size = sizeof(struct zl_rebalance_req),
    .id_off = offsetof(struct zl_rebalance_req, vol_id),
    .decode = meta_rebalance_decode,
    .cmp = meta_rebalance_cmp,
};

int zl_meta_rebalance_put(struct zl_etcd *e, const char *prefix, const struct zl_rebalance_req *r)
{
	char key[ZL_META_KEY_MAX], why[160];
	char *json;
	int ret;

	if (zl_meta_rebalance_check(r, why, sizeof(why))) {
		ZL_LOG_ERR("meta", "refusing to put an invalid rebalance request: %s", why);
		return -ZL_ERR_INVAL;
	}
	ret = zl_meta_key(key, sizeof(key), prefix, "rebalance", r->vol_id);
	if (ret)
		return ret;
	json = zl_meta_rebalance_to_json(r);
	if (!json)
		return -ENOMEM;
	ret = zl_etcd_put(e, key, json, strlen(json), 0, NULL);
	free(json);
	if (ret)
		ZL_LOG_ERR("meta", "put rebalance request key=%s failed err=%s detail=\"%s\"", key,
			   zl_errname(ret), zl_etcd_last_error());
	return ret;
}

int zl_meta_rebalance_get(struct zl_etcd *e, const char *prefix, const char *vol_id,
			  struct zl_rebalance_req *out)
{
	uint64_t num;

	if (!vol_id || zl_vol_id_parse(vol_id, &num))
		return -ZL_ERR_INVAL;
	return meta_record_get(e, prefix, &meta_rebalance_ops, vol_id, out);
}

int zl_meta_rebalance_list(struct zl_etcd *e, const char *prefix, struct zl_rebalance_req **out,
			   size_t *n)
{
	void *recs;
	int ret = meta_record_list(e, prefix, &meta_rebalance_ops, &recs, n);

	*out = recs;
	return ret;
}

int zl_meta_rebalance_delete(struct zl_etcd *e, const char *prefix,
			     const struct zl_rebalance_req *r)
{
	struct zl_etcd_txn_result res = {0};
	char key[ZL_META_KEY_MAX];
	uint64_t num;
	bool ok = false;
	int ret;

	if (!r || zl_vol_id_parse(r->vol_id, &num))
		return -ZL_ERR_INVAL;
	ret = zl_meta_key(key, sizeof(key), prefix, "rebalance", r->vol_id);
	if (ret)
		return ret;
	if (r->mod_rev <= 0)
		return zl_etcd_delete(e, key, NULL, NULL);
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = r->mod_rev};
	const struct zl_etcd_op del = {.kind = ZL_ETCD_OP_DELETE, .key = key};
	const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = key};
	ret = zl_etcd_txn(e, &cmp, 1, &del, 1, &get, 1, &ok, &res);
	if (ret) {
		ZL_LOG_ERR("meta", "delete rebalance request key=%s failed err=%s detail=\"%s\"",
			   key, zl_errname(ret), zl_etcd_last_error());
		return ret;
	}
	if (!ok && res.n_gets == 1 && res.gets[0].n > 0)
		ret = -ZL_ERR_CONFLICT;
	zl_etcd_txn_result_fini(&res);
	return ret;
}
