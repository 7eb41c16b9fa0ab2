/* The cluster's identity: <prefix>cluster = {"cluster_id", "created"},
 * written once by whoever comes first (a daemon or the chart) and never
 * changed, so a data directory can tell its own cluster from another one
 * reached by a wrong --etcd or prefix (docs/REPLICATION.md §6). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

void zl_meta_id_generate(char out[ZL_META_ID_SIZE])
{
	snprintf(out, ZL_META_ID_SIZE, "%016" PRIx64 "%016" PRIx64, zl_random_u64(),
		 zl_random_u64());
}

static int meta_cluster_check(const struct zl_cluster_info *c, char *why, size_t why_len)
{
	if (!meta_buf_ok(c->id, sizeof(c->id), false) || zl_meta_id_check(c->id))
		return meta_fail(why, why_len, "cluster_id is not %d lowercase hex digits",
				 ZL_META_ID_LEN);
	if (c->created < 0)
		return meta_fail(why, why_len, "created=%" PRId64 " is negative", c->created);
	return 0;
}

char *zl_meta_cluster_to_json(const struct zl_cluster_info *c)
{
	json_t *o;

	if (meta_cluster_check(c, NULL, 0))
		return NULL;
	o = json_pack("{s:s, s:I}", "cluster_id", c->id, "created", (json_int_t)c->created);
	return meta_dump(o);
}

static const struct meta_field meta_cluster_fields[] = {
    META_STR(struct zl_cluster_info, id, "cluster_id", false),
    META_INT(struct zl_cluster_info, created, "created", INT64_MIN, INT64_MAX),
};

static int meta_cluster_check_rec(const void *rec, char *why, size_t why_len)
{
	return meta_cluster_check(rec, why, why_len);
}

static int meta_cluster_from_json(const char *json, size_t len, struct zl_cluster_info *c,
				  char *why, size_t why_len)
{
	return meta_decode_flat(json, len, meta_cluster_fields, ZL_ARRAY_SIZE(meta_cluster_fields),
				c, sizeof(*c), meta_cluster_check_rec, why, why_len);
}

int zl_meta_cluster_from_json(const char *json, size_t len, struct zl_cluster_info *c)
{
	return meta_cluster_from_json(json, len, c, NULL, 0);
}

/* Decodes the stored record kv of key; logs a malformed one. */
static int meta_cluster_decode(const char *key, const struct zl_etcd_kv *kv,
			       struct zl_cluster_info *out)
{
	char why[160];
	int ret = meta_cluster_from_json(kv->value, kv->value_len, out, why, sizeof(why));

	if (ret)
		ZL_LOG_ERR("meta",
			   "malformed cluster record key=%s: %s; it must be {\"cluster_id\": "
			   "\"<%d hex>\", \"created\": <unix s>}: restore it with etcdctl (a new "
			   "id makes every data directory foreign)",
			   key, why, ZL_META_ID_LEN);
	return ret;
}

static int meta_cluster_key(char *key, size_t len, const char *prefix)
{
	int n = snprintf(key, len, "%scluster", meta_prefix(prefix));

	return n < 0 || (size_t)n >= len ? -ZL_ERR_INVAL : 0;
}

int zl_meta_cluster_get(struct zl_etcd *e, const char *prefix, struct zl_cluster_info *out)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_kv kv;
	int ret;

	ret = meta_cluster_key(key, sizeof(key), prefix);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	ret = meta_cluster_decode(key, &kv, out);
	zl_etcd_kv_fini(&kv);
	return ret;
}

int zl_meta_cluster_ensure(struct zl_etcd *e, const char *prefix, struct zl_cluster_info *out,
			   bool *created)
{
	struct zl_etcd_txn_result res = {0};
	struct zl_cluster_info mine = {0};
	char key[ZL_META_KEY_MAX];
	bool ok = false;
	char *json;
	int ret;

	if (created)
		*created = false;
	ret = meta_cluster_key(key, sizeof(key), prefix);
	if (ret)
		return ret;
	zl_meta_id_generate(mine.id);
	mine.created = zl_wall_sec();
	json = zl_meta_cluster_to_json(&mine);
	if (!json)
		return -ENOMEM;
	/* Put it only where the key was never created; else read what is there,
	 * in the same round trip. */
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	const struct zl_etcd_op put = {
	    .kind = ZL_ETCD_OP_PUT, .key = key, .value = json, .value_len = strlen(json)};
	const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = key};
	ret = zl_etcd_txn(e, &cmp, 1, &put, 1, &get, 1, &ok, &res);
	free(json);
	if (ret) {
		ZL_LOG_ERR("meta",
			   "cluster identity key=%s: etcd transaction failed err=%s "
			   "detail=\"%s\"",
			   key, zl_errname(ret), zl_etcd_last_error());
		return ret;
	}
	if (ok) {
		*out = mine;
		if (created)
			*created = true;
		ZL_LOG_INFO("meta", "cluster identity created key=%s cluster_id=%s", key, mine.id);
	} else if (res.n_gets != 1 || res.gets[0].n != 1) {
		/* Cannot happen: the compare and the read are one transaction. */
		ZL_LOG_ERR("meta", "cluster identity key=%s: etcd answered no record; retry", key);
		ret = -ZL_ERR_ETCD;
	} else {
		ret = meta_cluster_decode(key, &res.gets[0].kvs[0], out);
	}
	zl_etcd_txn_result_fini(&res);
	return ret;
}
