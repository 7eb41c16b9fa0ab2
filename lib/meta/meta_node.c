/* Storage node records: <prefix>nodes/<id>, each on its node's lease, so a
 * node that stops heartbeating disappears from the list by itself. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

int zl_meta_node_put(struct zl_etcd *e, const char *prefix, const struct zl_node_info *n,
		     int64_t lease)
{
	char key[ZL_META_KEY_MAX];
	char why[160];
	char *json;
	int ret;

	if (meta_node_check(n, why, sizeof(why))) {
		ZL_LOG_ERR("meta",
			   "refusing to register an invalid node record id=%.64s addr=%.64s "
			   "port=%u: %s",
			   n->id, n->addr, n->port, why);
		return -ZL_ERR_INVAL;
	}
	ret = zl_meta_key(key, sizeof(key), prefix, "nodes", n->id);
	if (ret)
		return ret;
	json = zl_meta_node_to_json(n);
	if (!json)
		return -ENOMEM;
	ret = zl_etcd_put(e, key, json, strlen(json), lease, NULL);
	if (ret)
		ZL_LOG_ERR("meta", "register node failed key=%s err=%s detail=\"%s\"", key,
			   zl_errname(ret), zl_etcd_last_error());
	free(json);
	return ret;
}

static int meta_node_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	return meta_node_from_json(kv->value, kv->value_len, rec, why, why_len);
}

static int meta_node_cmp(const void *a, const void *b)
{
	const struct zl_node_info *x = a, *y = b;

	return strcmp(x->id, y->id);
}

static const struct meta_record_ops meta_node_ops = {
    .kind = "nodes",
    .what = "node",
    .hint = "delete it or re-register that node",
    .size = sizeof(struct zl_node_info),
    .id_off = offsetof(struct zl_node_info, id),
    .decode = meta_node_decode,
    .cmp = meta_node_cmp,
};

int zl_meta_node_list(struct zl_etcd *e, const char *prefix, struct zl_node_info **out, size_t *n)
{
	void *recs;
	int ret = meta_record_list(e, prefix, &meta_node_ops, &recs, n);

	*out = recs;
	return ret;
}

int zl_meta_node_get(struct zl_etcd *e, const char *prefix, const char *id,
		     struct zl_node_info *out)
{
	if (!id || zl_node_id_check(id))
		return -ZL_ERR_INVAL;
	return meta_record_get(e, prefix, &meta_node_ops, id, out);
}
