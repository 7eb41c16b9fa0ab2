/* Volume records: <prefix>volumes/<id> (record with placement table) and
 * <prefix>names/<name> ("<id>"). Creation is idempotent by name: the record
 * and the name are written in one transaction that requires the name to be
 * absent. Every later change compares the record's mod_revision. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lib/common/common.h"
#include "lib/placement/placement.h"
#include "lib/wire/wire.h"
#include "meta_internal.h"

/* Rounds of "read name, place, transaction" before giving up under a storm of
 * concurrent create/delete of the same name; also the compare-and-swap
 * rounds of zl_meta_volume_modify. */
#define META_CREATE_TRIES 8

static int meta_volume_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	struct zl_volume *v = rec;
	int ret = meta_volume_from_json(kv->value, kv->value_len, v, why, why_len);

	if (!ret)
		v->mod_rev = kv->mod_rev;
	return ret;
}

static void meta_volume_fini_rec(void *rec)
{
	zl_volume_fini(rec);
}

static int meta_volume_cmp_name(const void *a, const void *b)
{
	const struct zl_volume *x = a, *y = b;

	return strcmp(x->name, y->name);
}

static const struct meta_record_ops meta_volume_ops = {
    .kind = "volumes",
    .what = "volume",
    .hint = "fix or delete it with etcdctl",
    .size = sizeof(struct zl_volume),
    .id_off = offsetof(struct zl_volume, id),
    .decode = meta_volume_decode,
    .fini = meta_volume_fini_rec,
    .cmp = meta_volume_cmp_name,
};

int zl_meta_volume_get(struct zl_etcd *e, const char *prefix, const char *id, struct zl_volume *out)
{
	uint64_t num;

	if (!id || zl_vol_id_parse(id, &num))
		return -ZL_ERR_INVAL;
	return meta_record_get(e, prefix, &meta_volume_ops, id, out);
}

/* Reads names/<name> and the volume it names. -ZL_ERR_NOT_FOUND when the name
 * is absent; -ZL_ERR_INVAL when it names something that is not a volume id. */
static int meta_volume_by_name(struct zl_etcd *e, const char *prefix, const char *name,
			       struct zl_volume *out)
{
	struct zl_etcd_kv kv;
	char key[ZL_META_KEY_MAX];
	char id[ZL_VOL_ID_LEN + 1];
	uint64_t num;
	int ret;

	ret = zl_meta_key(key, sizeof(key), prefix, "names", name);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	if (kv.value_len != ZL_VOL_ID_LEN || zl_vol_id_parse(kv.value, &num)) {
		ZL_LOG_ERR("meta",
			   "name record key=%s does not hold a volume id: inspect it with "
			   "etcdctl get %s",
			   key, key);
		zl_etcd_kv_fini(&kv);
		return -ZL_ERR_INVAL;
	}
	memcpy(id, kv.value, sizeof(id));
	zl_etcd_kv_fini(&kv);
	ret = zl_meta_volume_get(e, prefix, id, out);
	if (ret == -ZL_ERR_NOT_FOUND)
		ZL_LOG_WARN("meta", "name=%s points to missing volume id=%s", name, id);
	return ret;
}

int zl_meta_volume_lookup(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			  struct zl_volume *out)
{
	uint64_t num;
	int ret;

	if (!name_or_id)
		return -ZL_ERR_INVAL;
	if (!zl_vol_id_parse(name_or_id, &num)) {
		ret = zl_meta_volume_get(e, prefix, name_or_id, out);
		if (ret != -ZL_ERR_NOT_FOUND)
			return ret;
	}
	if (zl_volume_name_check(name_or_id))
		return -ZL_ERR_INVAL;
	return meta_volume_by_name(e, prefix, name_or_id, out);
}

int zl_meta_volume_list(struct zl_etcd *e, const char *prefix, struct zl_volume **out, size_t *n)
{
	void *recs;
	int ret = meta_record_list(e, prefix, &meta_volume_ops, &recs, n);

	*out = recs;
	return ret;
}

void zl_meta_volume_list_free(struct zl_volume *vols, size_t n)
{
	if (!vols)
		return;
	for (size_t i = 0; i < n; i++)
		zl_volume_fini(&vols[i]);
	free(vols);
}

/* Fills the spec-derived fields of v (no id, no placement). */
static int meta_spec_apply(const struct zl_volume_spec *spec, struct zl_volume *v)
{
	char why[160];
	uint64_t chunks;
	json_t *params;
	char *text;
	size_t len;

	if (!spec || !spec->name || zl_volume_name_check(spec->name))
		return -ZL_ERR_INVAL;
	strcpy(v->name, spec->name);
	if (spec->size == 0 || spec->size > (uint64_t)INT64_MAX - (ZL_BLOCK_SIZE - 1))
		return -ZL_ERR_INVAL;
	v->size = ZL_ALIGN_UP(spec->size, ZL_BLOCK_SIZE);
	v->chunk_size = spec->chunk_size ? spec->chunk_size : ZL_DEFAULT_CHUNK_SIZE;
	v->replicas = spec->replicas ? spec->replicas : 3;
	v->n_slices = spec->n_slices ? spec->n_slices : 1;
	v->min_size = spec->min_size ? spec->min_size : zl_meta_min_size_default(v->replicas);
	memcpy(v->qos, spec->qos, sizeof(v->qos));
	v->io_timeout_s = spec->io_timeout_s;
	if (meta_volume_shape_check(v, why, sizeof(why))) {
		ZL_LOG_INFO("meta", "volume spec name=%s refused: %s", v->name, why);
		return -ZL_ERR_INVAL;
	}
	chunks = (v->size + v->chunk_size - 1) / v->chunk_size;
	if (!spec->n_slices) {
		v->n_slices = (uint32_t)ZL_MIN(chunks, (uint64_t)ZL_DEFAULT_SLICES);
	} else if (spec->n_slices > chunks) {
		/* More slices than chunks would leave slices that never hold data. */
		ZL_LOG_INFO("meta", "volume spec name=%s refused: slices=%u > chunks=%" PRIu64,
			    v->name, spec->n_slices, chunks);
		return -ZL_ERR_INVAL;
	}

	params = json_loads(spec->params ? spec->params : "{}", JSON_REJECT_DUPLICATES, NULL);
	if (!params || !json_is_object(params)) {
		json_decref(params);
		return -ZL_ERR_INVAL;
	}
	text = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(params);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	if (len >= sizeof(v->params)) {
		free(text);
		return -ZL_ERR_INVAL;
	}
	memcpy(v->params, text, len + 1);
	free(text);
	strcpy(v->state, "ready");
	return 0;
}

static bool meta_status_full(const struct zl_node_status *s)
{
	return s && (s->disk_full || s->disk_near_full);
}

/* Takes the nodes whose status record says their disk failed
 * (disk_error, storage/storage_ddir.c) out of nodes[0..*n): nothing is
 * placed on them; and those whose data dir is (near) full while at least
 * `replicas` others are left (docs/REPLICATION.md §9: their slices would
 * refuse new space). An unreadable status list drops none. */
static void meta_nodes_drop_failed(struct zl_etcd *e, const char *prefix,
				   struct zl_node_info *nodes, size_t *n, uint32_t replicas)
{
	struct zl_node_status *st = NULL;
	size_t n_st = 0, k = 0, roomy = 0;

	if (zl_meta_status_list(e, prefix, &st, &n_st))
		return;
	for (size_t i = 0; i < *n; i++) {
		const struct zl_node_status *s = zl_meta_status_find(st, n_st, nodes[i].id);

		roomy += !(s && s->disk_error[0]) && !meta_status_full(s);
	}
	for (size_t i = 0; i < *n; i++) {
		const struct zl_node_status *s = zl_meta_status_find(st, n_st, nodes[i].id);

		if (s && s->disk_error[0])
			ZL_LOG_WARN("meta", "not placing on node=%s: its disk failed (%s)",
				    nodes[i].id, s->disk_error);
		else if (meta_status_full(s) && roomy >= replicas)
			ZL_LOG_WARN("meta", "not placing on node=%s: its data disk is near full",
				    nodes[i].id);
		else
			nodes[k++] = nodes[i];
	}
	*n = k;
	free(st);
}

/* Chooses the id (num, or a fresh one when 0) and the placement over the
 * live nodes. */
static int meta_volume_place(struct zl_etcd *e, const char *prefix, struct zl_volume *v,
			     uint64_t num)
{
	struct zl_node_info *nodes = NULL;
	struct zl_place_node *pn = NULL;
	uint32_t *table = NULL;
	size_t n_nodes = 0;
	int ret;

	zl_volume_fini(v);
	v->num = num ? num : zl_random_u64();
	zl_vol_id_format(v->num, v->id);

	ret = zl_meta_node_list(e, prefix, &nodes, &n_nodes);
	if (ret)
		return ret;
	meta_nodes_drop_failed(e, prefix, nodes, &n_nodes, v->replicas);
	if (n_nodes < v->replicas) {
		ZL_LOG_ERR("meta",
			   "cannot place volume name=%s: replicas=%u but live_nodes=%zu; "
			   "start more storage nodes or lower replicas",
			   v->name, v->replicas, n_nodes);
		ret = -ZL_ERR_NODES;
		goto out_nodes;
	}
	pn = calloc(n_nodes, sizeof(*pn));
	table = calloc((size_t)v->n_slices * v->replicas, sizeof(*table));
	v->slices = calloc(v->n_slices, sizeof(*v->slices));
	if (!pn || !table || !v->slices) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (size_t i = 0; i < n_nodes; i++)
		pn[i] = (struct zl_place_node){nodes[i].id, nodes[i].domain, nodes[i].free};
	ret = zl_placement_compute(pn, n_nodes, v->n_slices, v->replicas, v->num, table);
	if (ret)
		goto out_free;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		struct zl_slice *sl = &v->slices[s];

		sl->version = 1;
		sl->term = 1;
		sl->n = (uint8_t)v->replicas;
		for (uint32_t r = 0; r < v->replicas; r++) {
			const struct zl_node_info *ni = &nodes[table[(size_t)s * v->replicas + r]];

			strcpy(sl->nodes[r], ni->id);
			strcpy(sl->incarnation[r], ni->incarnation);
			zl_slice_member_set(sl, (int)r, ZL_MEMBER_IN_SYNC);
		}
	}
out_free:
	if (ret)
		zl_volume_fini(v);
	free(table);
	free(pn);
out_nodes:
	free(nodes);
	return ret;
}

/* The same-name rule of CreateVolume: same size, chunk size and replicas
 * (and min_size when the spec names one) is the same volume; anything else is
 * a conflict. Consumes *existing. */
static int meta_volume_existing(struct zl_volume *existing, const struct zl_volume *want,
				bool min_size_given, struct zl_volume *out, bool *created)
{
	if (existing->size != want->size || existing->chunk_size != want->chunk_size ||
	    existing->replicas != want->replicas ||
	    (min_size_given && zl_volume_min_size(existing) != want->min_size)) {
		ZL_LOG_INFO("meta",
			    "volume name=%s exists as id=%s with size=%" PRIu64
			    " chunk_size=%u replicas=%u min_size=%u; requested size=%" PRIu64
			    " chunk_size=%u replicas=%u min_size=%u",
			    existing->name, existing->id, existing->size, existing->chunk_size,
			    existing->replicas, zl_volume_min_size(existing), want->size,
			    want->chunk_size, want->replicas, want->min_size);
		zl_volume_fini(existing);
		return -ZL_ERR_EXISTS;
	}
	*out = *existing;
	if (created)
		*created = false;
	return 0;
}

int zl_meta_volume_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
			  struct zl_volume *out, bool *created)
{
	return meta_volume_create(e, prefix, spec, NULL, out, created);
}

int meta_volume_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
		       const struct meta_volume_extra *x, struct zl_volume *out, bool *created)
{
	struct zl_volume v = {0};
	char vkey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX];
	struct zl_etcd_cmp cmps[2 + META_EXTRA_MAX];
	struct zl_etcd_op ops[2 + META_EXTRA_MAX];
	size_t n_cmps, n_ops;
	int ret;

	if (created)
		*created = false;
	if (x && (x->n_cmps > META_EXTRA_MAX || x->n_ops > META_EXTRA_MAX))
		return -ZL_ERR_INVAL;
	ret = meta_spec_apply(spec, &v);
	if (ret)
		return ret;
	ret = zl_meta_key(nkey, sizeof(nkey), prefix, "names", v.name);
	if (ret)
		return ret;

	for (int attempt = 0; attempt < META_CREATE_TRIES; attempt++) {
		struct zl_etcd_txn_result res = {0};
		struct zl_volume existing;
		bool ok = false;
		char *json;

		ret = meta_volume_by_name(e, prefix, v.name, &existing);
		if (ret == 0) {
			if (x && strcmp(existing.parent_vol, x->parent_vol)) {
				ZL_LOG_INFO("meta",
					    "volume name=%s exists as id=%s with parent=\"%s\"; "
					    "requested a clone of %s",
					    existing.name, existing.id, existing.parent_vol,
					    x->parent_vol);
				zl_volume_fini(&existing);
				zl_volume_fini(&v);
				return -ZL_ERR_EXISTS;
			}
			ret =
			    meta_volume_existing(&existing, &v, spec->min_size != 0, out, created);
			zl_volume_fini(&v);
			return ret;
		}
		if (ret != -ZL_ERR_NOT_FOUND)
			goto out_fini;

		ret = meta_volume_place(e, prefix, &v, x ? x->num : 0);
		if (ret)
			goto out_fini;
		v.created = zl_wall_sec();
		if (x) {
			snprintf(v.parent_vol, sizeof(v.parent_vol), "%s", x->parent_vol);
			v.parent_seq = x->parent_seq;
		}
		ret = zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", v.id);
		if (ret)
			goto out_fini;
		json = zl_meta_volume_to_json(&v);
		if (!json) {
			ret = -ENOMEM;
			goto out_fini;
		}

		/* The name must be new; the random id too (a collision of 64
		 * random bits is unlikely, but cheap to rule out). */
		cmps[0] = (struct zl_etcd_cmp){
		    .key = nkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
		cmps[1] = (struct zl_etcd_cmp){
		    .key = vkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
		ops[0] = (struct zl_etcd_op){
		    .kind = ZL_ETCD_OP_PUT, .key = vkey, .value = json, .value_len = strlen(json)};
		ops[1] = (struct zl_etcd_op){
		    .kind = ZL_ETCD_OP_PUT, .key = nkey, .value = v.id, .value_len = strlen(v.id)};
		n_cmps = n_ops = 2;
		/* A clone's: its source still exists, its dependant key. */
		for (size_t i = 0; x && i < x->n_cmps; i++)
			cmps[n_cmps++] = x->cmps[i];
		for (size_t i = 0; x && i < x->n_ops; i++)
			ops[n_ops++] = x->ops[i];
		ret = zl_etcd_txn(e, cmps, n_cmps, ops, n_ops, NULL, 0, &ok, &res);
		free(json);
		if (ret) {
			ZL_LOG_ERR("meta",
				   "create volume name=%s: etcd transaction failed err=%s "
				   "detail=\"%s\"",
				   v.name, zl_errname(ret), zl_etcd_last_error());
			goto out_fini;
		}
		if (ok) {
			v.mod_rev = res.revision;
			zl_etcd_txn_result_fini(&res);
			ZL_LOG_INFO("meta",
				    "volume created id=%s name=%s size=%" PRIu64
				    " chunk_size=%u replicas=%u slices=%u",
				    v.id, v.name, v.size, v.chunk_size, v.replicas, v.n_slices);
			*out = v;
			if (created)
				*created = true;
			return 0;
		}
		zl_etcd_txn_result_fini(&res);
		if (x && x->gone && x->gone(e, prefix, x->arg)) {
			ret = -ZL_ERR_NOT_FOUND;
			goto out_fini;
		}
		/* Lost a race on the name (or drew a used id): look again. */
		ZL_LOG_DEBUG("meta", "create volume name=%s: transaction lost attempt=%d", v.name,
			     attempt);
	}
	ZL_LOG_ERR("meta", "create volume name=%s: gave up after %d conflicting attempts; retry",
		   v.name, META_CREATE_TRIES);
	ret = -ZL_ERR_CONFLICT;
out_fini:
	zl_volume_fini(&v);
	return ret;
}

int zl_meta_volume_update(struct zl_etcd *e, const char *prefix, struct zl_volume *v)
{
	struct zl_etcd_txn_result res = {0};
	char why[256] = "it was not read from etcd";
	char key[ZL_META_KEY_MAX];
	bool ok = false;
	char *json;
	int ret;

	if (v->mod_rev <= 0 || zl_meta_volume_check(v, why, sizeof(why))) {
		ZL_LOG_ERR("meta",
			   "refusing to write invalid volume record id=%.24s mod_rev=%" PRId64
			   ": %s",
			   v->id, v->mod_rev, why);
		return -ZL_ERR_INVAL;
	}
	ret = zl_meta_key(key, sizeof(key), prefix, "volumes", v->id);
	if (ret)
		return ret;
	json = zl_meta_volume_to_json(v);
	if (!json)
		return -ENOMEM;
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v->mod_rev};
	const struct zl_etcd_op op = {
	    .kind = ZL_ETCD_OP_PUT, .key = key, .value = json, .value_len = strlen(json)};
	ret = zl_etcd_txn(e, &cmp, 1, &op, 1, NULL, 0, &ok, &res);
	free(json);
	if (ret) {
		ZL_LOG_ERR("meta", "update volume id=%s failed err=%s detail=\"%s\"", v->id,
			   zl_errname(ret), zl_etcd_last_error());
		return ret;
	}
	if (ok)
		v->mod_rev = res.revision;
	else
		ret = -ZL_ERR_CONFLICT;
	zl_etcd_txn_result_fini(&res);
	return ret;
}

int zl_meta_volume_delete(struct zl_etcd *e, const char *prefix, const struct zl_volume *v)
{
	char vkey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX], akey[ZL_META_KEY_MAX];
	uint64_t num;
	int ret;

	if (zl_vol_id_parse(v->id, &num) || zl_volume_name_check(v->name))
		return -ZL_ERR_INVAL;
	if (zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", v->id) ||
	    zl_meta_key(nkey, sizeof(nkey), prefix, "names", v->name) ||
	    zl_meta_key(akey, sizeof(akey), prefix, "attachments", v->id))
		return -ZL_ERR_INVAL;

	/* The name goes only if it still names this volume: a late delete must
	 * not take the name from a newer volume that reused it. */
	const struct zl_etcd_cmp cmp = {.key = nkey,
					.target = ZL_ETCD_CMP_VALUE,
					.result = ZL_ETCD_EQUAL,
					.value = v->id,
					.value_len = strlen(v->id)};
	const struct zl_etcd_op ops[3] = {
	    {.kind = ZL_ETCD_OP_DELETE, .key = vkey},
	    {.kind = ZL_ETCD_OP_DELETE, .key = akey},
	    {.kind = ZL_ETCD_OP_DELETE, .key = nkey},
	};
	ret = zl_etcd_txn(e, &cmp, 1, ops, 3, ops, 2, NULL, NULL);
	if (ret)
		ZL_LOG_ERR("meta", "delete volume id=%s name=%s failed err=%s detail=\"%s\"", v->id,
			   v->name, zl_errname(ret), zl_etcd_last_error());
	else
		ZL_LOG_INFO("meta", "volume deleted id=%s name=%s", v->id, v->name);
	return ret;
}

/* Applies the size of mod to v: 0 (*changed set when it grew), or the
 * errors of zl_meta_volume_modify. Rounded up like zl_meta_volume_create. */
static int meta_volume_mod_size(struct zl_volume *v, uint64_t size, bool *changed)
{
	if (size > ZL_META_SIZE_MAX)
		return -ZL_ERR_RANGE;
	size = ZL_ALIGN_UP(size, ZL_BLOCK_SIZE);
	if (size < v->size)
		return -ZL_ERR_RANGE;
	if (size == v->size)
		return 0;
	if (strcmp(v->state, "ready")) {
		ZL_LOG_INFO("meta", "grow of vol=%s refused: the volume is %s", v->id, v->state);
		return -ZL_ERR_BUSY;
	}
	v->size = size;
	*changed = true;
	return 0;
}

/* Applies mod to v: 0 (*changed set when a value differs from the
 * record's), or the errors of zl_meta_volume_modify. */
static int meta_volume_mod_apply(struct zl_volume *v, const struct zl_volume_mod *mod,
				 bool *changed)
{
	*changed = false;
	if (mod->mask & ZL_VMOD_SIZE) {
		int ret = meta_volume_mod_size(v, mod->size, changed);

		if (ret)
			return ret;
	}
	if (mod->mask & ZL_VMOD_MIN_SIZE) {
		if (mod->min_size < 1 || mod->min_size > v->replicas)
			return -ZL_ERR_INVAL;
		*changed |= v->min_size != mod->min_size;
		v->min_size = mod->min_size;
	}
	if (mod->mask & ZL_VMOD_IO_TIMEOUT) {
		if (mod->io_timeout_s > ZL_META_IO_TIMEOUT_MAX)
			return -ZL_ERR_INVAL;
		*changed |= v->io_timeout_s != mod->io_timeout_s;
		v->io_timeout_s = mod->io_timeout_s;
	}
	for (int k = 0; k < ZL_QOS_N; k++) {
		if (!(mod->mask & ZL_VMOD_QOS(k)))
			continue;
		if (mod->qos[k] > ZL_QOS_MAX)
			return -ZL_ERR_INVAL;
		*changed |= v->qos[k] != mod->qos[k];
		v->qos[k] = mod->qos[k];
	}
	return 0;
}

/* *out = *v without the placement. */
static void meta_volume_head(const struct zl_volume *v, struct zl_volume *out)
{
	if (!out)
		return;
	*out = *v;
	out->slices = NULL;
}

int zl_meta_volume_modify(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			  const struct zl_volume_mod *mod, struct zl_volume *before,
			  struct zl_volume *after)
{
	int ret = -ZL_ERR_CONFLICT;

	for (int tries = 0; tries < META_CREATE_TRIES; tries++) {
		struct zl_volume v = {0};
		bool changed;

		if (before)
			memset(before, 0, sizeof(*before));
		if (mod->mask & ZL_VMOD_BY_ID)
			ret = zl_meta_volume_get(e, prefix, name_or_id, &v);
		else
			ret = zl_meta_volume_lookup(e, prefix, name_or_id, &v);
		if (ret)
			return ret;
		meta_volume_head(&v, before);
		ret = meta_volume_mod_apply(&v, mod, &changed);
		if (!ret && changed)
			ret = zl_meta_volume_update(e, prefix, &v);
		if (!ret)
			meta_volume_head(&v, after);
		zl_volume_fini(&v);
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
	}
	return ret;
}
