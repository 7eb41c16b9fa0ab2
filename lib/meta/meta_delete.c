/* Removing volumes while storage nodes are down: the record goes away in one
 * transaction that leaves a tombstone per placement node,
 *   <prefix>deletes/<node-id>/<vol-id> = {"vol": "<vol-id>", "name": ..., "time": ...}
 * and each node removes its replicas of the volume when it sees its
 * tombstone (at start-up and through a watch), then clears it. A node only
 * ever deletes what a tombstone names. Also reads the attachment record
 * (<prefix>attachments/<vol-id>, written by zipline-controller) so a volume
 * in use is not removed by accident. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* A volume has at most n_slices * ZL_MAX_REPLICAS placement entries but few
 * distinct nodes; an etcd transaction takes 128 operations by default. */
#define META_TOMB_MAX_NODES 120

static int tomb_key(char *out, size_t len, const char *prefix, const char *node_id,
		    const char *vol_id)
{
	char id[ZL_NODE_ID_MAX + ZL_VOL_ID_LEN + 2];

	if (zl_node_id_check(node_id))
		return -ZL_ERR_INVAL;
	snprintf(id, sizeof(id), "%s/%s", node_id, vol_id ? vol_id : "");
	return zl_meta_key(out, len, prefix, "deletes", id);
}

int zl_meta_attachment_get(struct zl_etcd *e, const char *prefix, const char *vol_id, char *node,
			   size_t node_len)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_kv kv;
	json_t *j;
	int ret;

	ret = zl_meta_key(key, sizeof(key), prefix, "attachments", vol_id);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	if (node && node_len) {
		const char *s = NULL;

		j = json_loadb(kv.value, kv.value_len, 0, NULL);
		if (j)
			s = json_string_value(json_object_get(j, "node"));
		/* A malformed record still means "attached": say so. */
		snprintf(node, node_len, "%s", s ? s : "(unreadable attachment record)");
		json_decref(j);
	}
	zl_etcd_kv_fini(&kv);
	return 0;
}

/* Distinct node ids of v's placement, in first-seen order. */
static size_t tomb_nodes(const struct zl_volume *v, const char **out, size_t cap)
{
	size_t n = 0;

	for (uint32_t s = 0; s < v->n_slices; s++) {
		for (unsigned r = 0; r < v->slices[s].n && r < ZL_MAX_REPLICAS; r++) {
			const char *id = v->slices[s].nodes[r];
			size_t k;

			for (k = 0; k < n && strcmp(out[k], id); k++)
				;
			if (k == n && n < cap)
				out[n++] = id;
		}
	}
	return n;
}

int zl_meta_volume_remove(struct zl_etcd *e, const char *prefix, const struct zl_volume *v,
			  bool force)
{
	char vkey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX], akey[ZL_META_KEY_MAX];
	char dkey[ZL_META_KEY_MAX], dend[ZL_META_KEY_MAX], pkey[ZL_META_KEY_MAX];
	char(*tkeys)[ZL_META_KEY_MAX] = NULL;
	const char *nodes[META_TOMB_MAX_NODES];
	struct zl_etcd_op ops[4 + META_TOMB_MAX_NODES];
	struct zl_etcd_cmp cmps[4];
	struct zl_etcd_kv name_kv;
	size_t n_nodes, n_ops = 0, n_cmps = 0;
	char *json = NULL;
	json_t *jv;
	bool ok = false;
	uint64_t num;
	int ret;

	if (!v || zl_vol_id_parse(v->id, &num) || zl_volume_name_check(v->name) || v->mod_rev <= 0)
		return -ZL_ERR_INVAL;
	if (zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", v->id) ||
	    zl_meta_key(nkey, sizeof(nkey), prefix, "names", v->name) ||
	    zl_meta_key(akey, sizeof(akey), prefix, "attachments", v->id) ||
	    meta_dep_range(dkey, dend, prefix, v->id, 0))
		return -ZL_ERR_INVAL;
	/* pkey: a clone's own dependant key, which goes with it. */
	if (v->parent_vol[0] &&
	    meta_dep_key(pkey, sizeof(pkey), prefix, v->parent_vol, v->parent_seq, v->id))
		return -ZL_ERR_INVAL;
	n_nodes = tomb_nodes(v, nodes, ZL_ARRAY_SIZE(nodes));
	tkeys = calloc(n_nodes ? n_nodes : 1, sizeof(*tkeys));
	jv = json_pack("{s:s, s:s, s:I}", "vol", v->id, "name", v->name, "time",
		       (json_int_t)zl_wall_sec());
	json = jv ? json_dumps(jv, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(jv);
	if (!tkeys || !json) {
		ret = -ENOMEM;
		goto out_free;
	}
	memset(ops, 0, sizeof(ops));
	memset(cmps, 0, sizeof(cmps));
	/* The record we read (and marked deleting) is still the current one. */
	cmps[n_cmps++] = (struct zl_etcd_cmp){
	    .key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v->mod_rev};
	ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = vkey};
	ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = akey};
	if (v->parent_vol[0])
		ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = pkey};
	/* No clone reads through it, force or not: its data is theirs too. */
	cmps[n_cmps++] = (struct zl_etcd_cmp){.key = dkey,
					      .range_end = dend,
					      .target = ZL_ETCD_CMP_CREATE,
					      .result = ZL_ETCD_EQUAL,
					      .rev = 0};
	if (!force) /* no attachment appeared since the caller looked */
		cmps[n_cmps++] = (struct zl_etcd_cmp){
		    .key = akey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	/* The name goes only if it still names this volume: a late delete must
	 * not take the name from a newer volume that reused it. */
	ret = zl_etcd_get(e, nkey, &name_kv);
	if (ret && ret != -ZL_ERR_NOT_FOUND)
		goto out_free;
	if (!ret) {
		if (name_kv.value_len == strlen(v->id) &&
		    !memcmp(name_kv.value, v->id, name_kv.value_len)) {
			cmps[n_cmps++] = (struct zl_etcd_cmp){.key = nkey,
							      .target = ZL_ETCD_CMP_MOD,
							      .result = ZL_ETCD_EQUAL,
							      .rev = name_kv.mod_rev};
			ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = nkey};
		}
		zl_etcd_kv_fini(&name_kv);
	}
	for (size_t i = 0; i < n_nodes; i++) {
		ret = tomb_key(tkeys[i], sizeof(tkeys[i]), prefix, nodes[i], v->id);
		if (ret)
			goto out_free;
		ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
						   .key = tkeys[i],
						   .value = json,
						   .value_len = strlen(json)};
	}
	ret = zl_etcd_txn(e, cmps, n_cmps, ops, n_ops, NULL, 0, &ok, NULL);
	if (ret) {
		ZL_LOG_ERR("meta", "remove volume id=%s name=%s failed err=%s detail=\"%s\"", v->id,
			   v->name, zl_errname(ret), zl_etcd_last_error());
		goto out_free;
	}
	if (!ok) {
		char what[300], msg[1024];

		/* Tell "attached meanwhile" or "clones appeared" from "the
		 * record changed". */
		snprintf(what, sizeof(what), "volume %s", v->name);
		ret = !force && zl_meta_attachment_get(e, prefix, v->id, NULL, 0) == 0
			  ? -ZL_ERR_BUSY
			  : -ZL_ERR_CONFLICT;
		if (ret == -ZL_ERR_CONFLICT &&
		    zl_meta_clone_refusal(e, prefix, v->id, 0, what, msg, sizeof(msg)) ==
			-ZL_ERR_BUSY) {
			ZL_LOG_ERR("meta", "remove volume id=%s refused: %s", v->id, msg);
			ret = -ZL_ERR_BUSY;
		}
		goto out_free;
	}
	ZL_LOG_INFO("meta", "volume removed id=%s name=%s tombstones=%zu force=%d", v->id, v->name,
		    n_nodes, force);
	if (v->parent_vol[0])
		meta_clone_release(e, prefix, v->id, v->parent_vol, v->parent_seq);
out_free:
	free(json);
	free(tkeys);
	return ret;
}

int zl_meta_tombstone_list(struct zl_etcd *e, const char *prefix, const char *node_id,
			   uint64_t **vols, size_t *n, int64_t *revision)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_range r;
	uint64_t *out = NULL;
	size_t cnt = 0;
	int ret;

	*vols = NULL;
	*n = 0;
	ret = tomb_key(key, sizeof(key), prefix, node_id, NULL);
	if (ret)
		return ret;
	ret = zl_etcd_range_prefix(e, key, NULL, 0, &r);
	if (ret)
		return ret;
	if (r.n) {
		out = calloc(r.n, sizeof(*out));
		if (!out) {
			zl_etcd_range_fini(&r);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < r.n; i++) {
		const char *id = r.kvs[i].key + strlen(key);

		/* Only well-formed keys name a volume; anything else is left alone. */
		if (zl_vol_id_parse(id, &out[cnt]) == 0)
			cnt++;
		else
			ZL_LOG_WARN("meta", "ignoring malformed tombstone key=%s", r.kvs[i].key);
	}
	if (revision)
		*revision = r.revision;
	zl_etcd_range_fini(&r);
	*vols = out;
	*n = cnt;
	return 0;
}

int zl_meta_tombstone_clear(struct zl_etcd *e, const char *prefix, const char *node_id,
			    const char *vol_id)
{
	char key[ZL_META_KEY_MAX];
	int ret = tomb_key(key, sizeof(key), prefix, node_id, vol_id);

	if (ret)
		return ret;
	return zl_etcd_delete(e, key, NULL, NULL);
}

int zl_meta_tombstone_key(char *out, size_t len, const char *prefix, const char *node_id)
{
	return tomb_key(out, len, prefix, node_id, NULL);
}
