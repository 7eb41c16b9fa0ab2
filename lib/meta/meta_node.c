/* Storage node records: <prefix>nodes/<id>, each on its node's lease, so a
 * node that stops heartbeating disappears from the list by itself. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

int zl_meta_node_put(struct zl_etcd *e, const char *prefix, const struct zl_node_info *n,
		     int64_t lease)
{
	char key[ZL_META_KEY_MAX];
	char *json;
	int ret;

	if (meta_node_check(n)) {
		ZL_LOG_ERR("meta",
			   "refusing to register an invalid node record id=%.64s addr=%.64s "
			   "port=%u: check the node id ([A-Za-z0-9._-], 1..63) and address",
			   n->id, n->addr, n->port);
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

static int meta_node_cmp(const void *a, const void *b)
{
	const struct zl_node_info *x = a, *y = b;

	return strcmp(x->id, y->id);
}

int zl_meta_node_list(struct zl_etcd *e, const char *prefix, struct zl_node_info **out, size_t *n)
{
	struct zl_etcd_range r;
	struct zl_node_info *nodes = NULL;
	char key[ZL_META_KEY_MAX];
	size_t cnt = 0;
	int ret;

	*out = NULL;
	*n = 0;
	ret = zl_meta_key(key, sizeof(key), prefix, "nodes", NULL);
	if (ret)
		return ret;
	ret = zl_etcd_range_prefix(e, key, NULL, 0, &r);
	if (ret)
		return ret;
	if (r.n) {
		nodes = calloc(r.n, sizeof(*nodes));
		if (!nodes) {
			ret = -ENOMEM;
			goto out_range;
		}
	}
	for (size_t i = 0; i < r.n; i++) {
		if (zl_meta_node_from_json(r.kvs[i].value, r.kvs[i].value_len, &nodes[cnt])) {
			/* One bad record must not hide every other node. */
			ZL_LOG_ERR("meta",
				   "skipping malformed node record key=%s: delete or "
				   "re-register that node",
				   r.kvs[i].key);
			continue;
		}
		cnt++;
	}
	if (cnt > 1)
		qsort(nodes, cnt, sizeof(*nodes), meta_node_cmp);
	*out = nodes;
	*n = cnt;
out_range:
	zl_etcd_range_fini(&r);
	return ret;
}

int zl_meta_node_get(struct zl_etcd *e, const char *prefix, const char *id,
		     struct zl_node_info *out)
{
	struct zl_etcd_kv kv;
	char key[ZL_META_KEY_MAX];
	int ret;

	if (!id || zl_node_id_check(id))
		return -ZL_ERR_INVAL;
	ret = zl_meta_key(key, sizeof(key), prefix, "nodes", id);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	ret = zl_meta_node_from_json(kv.value, kv.value_len, out);
	if (ret)
		ZL_LOG_ERR("meta", "malformed node record key=%s: re-register the node", key);
	else if (strcmp(out->id, id))
		ret = -ZL_ERR_INVAL;
	zl_etcd_kv_fini(&kv);
	return ret;
}
