/* JSON codecs of the node and volume records, record checks, and the small
 * struct helpers. Decoders trust nothing: every field's presence, type,
 * range and length is checked before it is copied into the fixed buffers
 * (they are fuzzed, test/fuzz/fuzz_meta_json.c). Unknown fields are ignored
 * so that newer writers can add some. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"
#include "meta_internal.h"

const char *meta_prefix(const char *prefix)
{
	return prefix ? prefix : ZL_META_DEFAULT_PREFIX;
}

int zl_meta_key(char *out, size_t len, const char *prefix, const char *kind, const char *id)
{
	int n;

	if (!out || !kind)
		return -ZL_ERR_INVAL;
	n = snprintf(out, len, "%s%s/%s", meta_prefix(prefix), kind, id ? id : "");
	if (n < 0 || (size_t)n >= len)
		return -ZL_ERR_INVAL;
	return 0;
}

/* ---- struct helpers ---- */

void zl_volume_fini(struct zl_volume *v)
{
	if (!v)
		return;
	free(v->slices);
	v->slices = NULL;
}

void zl_volume_free(struct zl_volume *v)
{
	if (!v)
		return;
	zl_volume_fini(v);
	free(v);
}

int zl_volume_copy(const struct zl_volume *src, struct zl_volume *dst)
{
	struct zl_slice *slices = NULL;

	if (src == dst)
		return 0;
	if (src->n_slices && src->slices) {
		slices = malloc((size_t)src->n_slices * sizeof(*slices));
		if (!slices)
			return -ENOMEM;
		memcpy(slices, src->slices, (size_t)src->n_slices * sizeof(*slices));
	}
	*dst = *src;
	dst->slices = slices;
	return 0;
}

int zl_slice_primary(const struct zl_slice *s)
{
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		if (s->in_sync[i])
			return i;
	}
	return -1;
}

int zl_slice_index_of(const struct zl_slice *s, const char *node_id)
{
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		if (!strcmp(s->nodes[i], node_id))
			return i;
	}
	return -1;
}

/* ---- decoding helpers ---- */

int meta_get_field(json_t *o, const struct meta_field *f, void *rec)
{
	json_t *j = json_object_get(o, f->name);
	char *p = (char *)rec + f->off;
	json_int_t x;
	size_t n;

	if (!j && f->optional)
		return 0;
	if (f->is_bool) {
		bool b = json_is_true(j);

		if (!json_is_boolean(j))
			return -ZL_ERR_INVAL;
		memcpy(p, &b, sizeof(b));
		return 0;
	}
	if (f->is_str) {
		if (!json_is_string(j))
			return -ZL_ERR_INVAL;
		n = json_string_length(j);
		/* The parser rejects \u0000, so the length is also the C string length. */
		if (n >= f->size || (!f->allow_empty && n == 0) ||
		    strlen(json_string_value(j)) != n)
			return -ZL_ERR_INVAL;
		memcpy(p, json_string_value(j), n + 1);
		return 0;
	}
	if (!json_is_integer(j))
		return -ZL_ERR_INVAL;
	x = json_integer_value(j);
	if (x < f->min || x > f->max)
		return -ZL_ERR_INVAL;
	if (f->size == sizeof(uint16_t)) {
		uint16_t v = (uint16_t)x;

		memcpy(p, &v, sizeof(v));
	} else if (f->size == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)x;

		memcpy(p, &v, sizeof(v));
	} else {
		int64_t v = (int64_t)x; /* uint64_t members have min >= 0: same bits */

		memcpy(p, &v, sizeof(v));
	}
	return 0;
}

int meta_get_fields(json_t *o, const struct meta_field *f, size_t n, void *rec, char *why,
		    size_t why_len)
{
	for (size_t i = 0; i < n; i++) {
		if (meta_get_field(o, &f[i], rec))
			return meta_fail(why, why_len,
					 "field %s is missing, of the wrong type or out of range",
					 f[i].name);
	}
	return 0;
}

char *meta_dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return s;
}

json_t *meta_parse(const char *json, size_t len)
{
	if (!json)
		return NULL;
	/* JSON_REJECT_DUPLICATES: two "nodes" keys must not let a checker and a
	 * user see different rows. Trailing garbage is rejected by default. */
	return json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
}

/* ---- node record ---- */

char *zl_meta_node_to_json(const struct zl_node_info *n)
{
	json_t *o;

	if (meta_node_check(n, NULL, 0))
		return NULL;
	o = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:s}", "id", n->id,
		      "addr", n->addr, "port", (int)n->port, "rdma_port", (int)n->rdma_port,
		      "transports", n->transports, "domain", n->domain, "capacity",
		      (json_int_t)n->capacity, "free", (json_int_t)n->free, "start_time",
		      (json_int_t)n->start_time, "version", n->version, "cluster_id", n->cluster_id,
		      "incarnation", n->incarnation);
	/* Only when on: records of plaintext nodes stay as older readers know them. */
	if (o && n->tls && json_object_set_new(o, "tls", json_true())) {
		json_decref(o);
		o = NULL;
	}
	if (o && n->metrics_port &&
	    json_object_set_new(o, "metrics_port", json_integer(n->metrics_port))) {
		json_decref(o);
		o = NULL;
	}
	return meta_dump(o);
}

static const struct meta_field meta_node_fields[] = {
    META_STR(struct zl_node_info, id, "id", false),
    META_STR(struct zl_node_info, addr, "addr", false),
    META_STR(struct zl_node_info, transports, "transports", false),
    META_STR(struct zl_node_info, domain, "domain", true),
    META_STR(struct zl_node_info, version, "version", true),
    META_INT(struct zl_node_info, port, "port", 1, UINT16_MAX),
    META_INT(struct zl_node_info, rdma_port, "rdma_port", 0, UINT16_MAX),
    META_INT(struct zl_node_info, capacity, "capacity", 0, INT64_MAX),
    META_INT(struct zl_node_info, free, "free", 0, INT64_MAX),
    META_INT(struct zl_node_info, start_time, "start_time", INT64_MIN, INT64_MAX),
    META_STR_NEW(struct zl_node_info, cluster_id, "cluster_id"),
    META_STR_NEW(struct zl_node_info, incarnation, "incarnation"),
    META_BOOL_NEW(struct zl_node_info, tls, "tls"),
    META_INT_NEW(struct zl_node_info, metrics_port, "metrics_port", 0, UINT16_MAX),
};

int meta_decode_flat(const char *json, size_t len, const struct meta_field *f, size_t n, void *rec,
		     size_t size, meta_check_fn check, char *why, size_t why_len)
{
	json_t *o = meta_parse(json, len);
	int ret;

	memset(rec, 0, size);
	if (!o || !json_is_object(o))
		ret = meta_fail(why, why_len, "not a JSON object");
	else
		ret = meta_get_fields(o, f, n, rec, why, why_len);
	if (!ret)
		ret = check(rec, why, why_len);
	json_decref(o);
	if (ret)
		memset(rec, 0, size);
	return ret;
}

static int meta_node_check_rec(const void *rec, char *why, size_t why_len)
{
	return meta_node_check(rec, why, why_len);
}

int meta_node_from_json(const char *json, size_t len, struct zl_node_info *n, char *why,
			size_t why_len)
{
	return meta_decode_flat(json, len, meta_node_fields, ZL_ARRAY_SIZE(meta_node_fields), n,
				sizeof(*n), meta_node_check_rec, why, why_len);
}

int zl_meta_node_from_json(const char *json, size_t len, struct zl_node_info *n)
{
	return meta_node_from_json(json, len, n, NULL, 0);
}

/* ---- volume record ---- */

/* A row as {"v", "term", "nodes", "in_sync", "states", "incarnations"}:
 * nodes and in_sync as 0.1 wrote them (so 0.1 readers keep working during
 * an upgrade), states and incarnations one per node, in the order of nodes. */
enum { META_ROW_NODES, META_ROW_IN_SYNC, META_ROW_STATES, META_ROW_INCS, META_ROW_ARRAYS };
static const char *const meta_row_keys[META_ROW_ARRAYS] = {"nodes", "in_sync", "states",
							   "incarnations"};

static json_t *meta_slice_to_json(const struct zl_slice *s)
{
	json_t *o = json_object(), *arr[META_ROW_ARRAYS];
	bool failed = !o;

	for (int k = 0; k < META_ROW_ARRAYS; k++)
		failed |= !(arr[k] = json_array());
	for (int i = 0; i < s->n && !failed; i++) {
		enum zl_member_state st = zl_slice_member_state(s, i);

		failed |= json_array_append_new(arr[META_ROW_NODES], json_string(s->nodes[i])) ||
			  json_array_append_new(arr[META_ROW_STATES],
						json_string(zl_member_state_name(st))) ||
			  json_array_append_new(arr[META_ROW_INCS], json_string(s->incarnation[i]));
		if (st == ZL_MEMBER_IN_SYNC)
			failed |= json_array_append_new(arr[META_ROW_IN_SYNC],
							json_string(s->nodes[i])) != 0;
	}
	failed = failed || json_object_set_new(o, "v", json_integer((json_int_t)s->version)) ||
		 json_object_set_new(o, "term", json_integer(s->term ? s->term : 1));
	for (int k = 0; k < META_ROW_ARRAYS; k++) {
		if (failed)
			json_decref(arr[k]); /* not handed over */
		else if (json_object_set_new(o, meta_row_keys[k], arr[k]))
			failed = true; /* set_new released it */
	}
	if (failed) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* "io_timeout", "qos" (the non-zero limits), "snap_seq", "snaps" and
 * "parent" when set: records without them stay as before. 0 or -ENOMEM. */
static int meta_volume_knobs_to_json(const struct zl_volume *v, json_t *o)
{
	json_t *q = NULL;

	if (v->io_timeout_s &&
	    json_object_set_new(o, "io_timeout", json_integer((json_int_t)v->io_timeout_s)))
		return -ENOMEM;
	for (int k = 0; k < ZL_QOS_N; k++) {
		if (!v->qos[k])
			continue;
		if (!q && (!(q = json_object()) || json_object_set_new(o, "qos", q)))
			return -ENOMEM;
		if (json_object_set_new(q, zl_qos_keys[k].json,
					json_integer((json_int_t)v->qos[k])))
			return -ENOMEM;
	}
	if (v->snap_seq &&
	    json_object_set_new(o, "snap_seq", json_integer((json_int_t)v->snap_seq)))
		return -ENOMEM;
	if (v->n_snaps) {
		json_t *a = json_array();

		if (!a || json_object_set_new(o, "snaps", a))
			return -ENOMEM;
		for (uint32_t i = 0; i < v->n_snaps; i++)
			if (json_array_append_new(a, json_integer((json_int_t)v->snaps[i])))
				return -ENOMEM;
	}
	if (v->parent_vol[0] &&
	    json_object_set_new(o, "parent",
				json_pack("{s:s, s:I}", "vol", v->parent_vol, "seq",
					  (json_int_t)v->parent_seq)))
		return -ENOMEM;
	return 0;
}

/* The "parent" object of a clone (absent: none); meta_volume_shape_check
 * decides whether it names a volume and a sequence. 0 or -ZL_ERR_INVAL. */
static int meta_volume_parent_from_json(json_t *o, struct zl_volume *v, char *why,
					size_t why_len)
{
	json_t *p = json_object_get(o, "parent"), *pv, *ps;

	if (!p)
		return 0;
	pv = json_object_get(p, "vol");
	ps = json_object_get(p, "seq");
	if (!json_is_object(p) || !json_is_string(pv) ||
	    strlen(json_string_value(pv)) >= sizeof(v->parent_vol) || !json_is_integer(ps) ||
	    json_integer_value(ps) < 1 || json_integer_value(ps) > ZL_WIRE_SEQ_MAX)
		return meta_fail(why, why_len,
				 "field parent is not {\"vol\": a volume id, \"seq\": 1..%u}",
				 ZL_WIRE_SEQ_MAX);
	strcpy(v->parent_vol, json_string_value(pv));
	v->parent_seq = (uint32_t)json_integer_value(ps);
	return 0;
}

/* The "snaps" array of a record (absent: none); meta_volume_shape_check
 * decides whether the sequences are valid. 0 or -ZL_ERR_INVAL. */
static int meta_volume_snaps_from_json(json_t *o, struct zl_volume *v, char *why, size_t why_len)
{
	json_t *a = json_object_get(o, "snaps"), *j;
	size_t i;

	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > ZL_META_SNAPS_MAX)
		return meta_fail(why, why_len, "field snaps is not an array of at most %d sequences",
				 ZL_META_SNAPS_MAX);
	json_array_foreach(a, i, j)
	{
		if (!json_is_integer(j) || json_integer_value(j) < 1 ||
		    json_integer_value(j) > ZL_WIRE_SEQ_MAX)
			return meta_fail(why, why_len, "snaps[%zu] is not an integer in [1, %u]", i,
					 ZL_WIRE_SEQ_MAX);
		v->snaps[i] = (uint32_t)json_integer_value(j);
	}
	v->n_snaps = (uint32_t)json_array_size(a);
	return 0;
}

/* The "qos" object of a record (absent: no limits); unknown keys in it are
 * ignored like unknown fields. 0 or -ZL_ERR_INVAL. */
static int meta_volume_qos_from_json(json_t *o, struct zl_volume *v, char *why, size_t why_len)
{
	json_t *q = json_object_get(o, "qos");

	if (!q)
		return 0;
	if (!json_is_object(q))
		return meta_fail(why, why_len, "field qos is not a JSON object");
	for (int k = 0; k < ZL_QOS_N; k++) {
		json_t *j = json_object_get(q, zl_qos_keys[k].json);

		if (!j)
			continue;
		if (!json_is_integer(j) || json_integer_value(j) < 0)
			return meta_fail(why, why_len, "qos %s is not an integer in [0, 2^63)",
					 zl_qos_keys[k].json);
		v->qos[k] = (uint64_t)json_integer_value(j);
	}
	return 0;
}

char *zl_meta_volume_to_json(const struct zl_volume *v)
{
	json_t *o = NULL, *params = NULL, *placement = NULL;
	char *s = NULL;

	/* A record that cannot be decoded again is not written either. */
	if (zl_meta_volume_check(v, NULL, 0))
		return NULL;
	params = json_loads(v->params, JSON_REJECT_DUPLICATES, NULL);
	placement = json_array();
	if (!params || !placement)
		goto out;
	for (uint32_t i = 0; i < v->n_slices; i++) {
		if (json_array_append_new(placement, meta_slice_to_json(&v->slices[i])))
			goto out;
	}
	o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:O, s:O}", "id", v->id,
		      "name", v->name, "size", (json_int_t)v->size, "chunk_size",
		      (json_int_t)v->chunk_size, "replicas", (json_int_t)v->replicas, "min_size",
		      (json_int_t)zl_volume_min_size(v), "slices", (json_int_t)v->n_slices, "state",
		      v->state, "created", (json_int_t)v->created, "params", params, "placement",
		      placement);
	if (!o || meta_volume_knobs_to_json(v, o))
		goto out;
	s = json_dumps(o, JSON_COMPACT);
out:
	json_decref(o);
	json_decref(placement);
	json_decref(params);
	return s;
}

/* A JSON array of n strings, each shorter than size bytes. */
static bool meta_str_array_ok(json_t *a, size_t n, size_t size)
{
	size_t i;
	json_t *j;

	if (!json_is_array(a) || json_array_size(a) != n)
		return false;
	json_array_foreach(a, i, j)
	{
		if (!json_is_string(j) || json_string_length(j) >= size ||
		    strlen(json_string_value(j)) != json_string_length(j))
			return false;
	}
	return true;
}

/* Copies one placement row: v, nodes[replicas] and in_sync (a subset of
 * nodes), and in rows written after 0.1 also term, states[replicas] and
 * incarnations[replicas] — all three or none: a 0.1 row reads as term 1, its
 * in_sync members in sync, the others out, incarnations "". in_sync and
 * states must agree. zl_meta_volume_check judges the values. */
static int meta_slice_from_json(json_t *row, size_t idx, uint32_t replicas, struct zl_slice *s,
				char *why, size_t why_len)
{
	static const struct meta_field version =
	    META_INT(struct zl_slice, version, "v", 1, INT64_MAX);
	static const struct meta_field term =
	    META_INT(struct zl_slice, term, "term", 1, UINT32_MAX);
	json_t *arr[META_ROW_ARRAYS], *j;
	int n_new;
	size_t i;

	if (!json_is_object(row))
		return meta_fail(why, why_len, "placement row %zu is not an object", idx);
	if (meta_get_field(row, &version, s))
		return meta_fail(why, why_len,
				 "placement row %zu: v is missing or not in [1, 2^63)", idx);
	for (int k = 0; k < META_ROW_ARRAYS; k++)
		arr[k] = json_object_get(row, meta_row_keys[k]);
	n_new = !!json_object_get(row, "term") + !!arr[META_ROW_STATES] + !!arr[META_ROW_INCS];
	if (n_new != 0 && n_new != 3)
		return meta_fail(why, why_len,
				 "placement row %zu has only some of term, states and "
				 "incarnations (all three or none)",
				 idx);
	if (!meta_str_array_ok(arr[META_ROW_NODES], replicas, sizeof(s->nodes[0])))
		return meta_fail(why, why_len,
				 "placement row %zu: nodes is not %u node ids of at most %d "
				 "characters",
				 idx, replicas, ZL_NODE_ID_MAX - 1);
	s->n = (uint8_t)replicas;
	json_array_foreach(arr[META_ROW_NODES], i, j) strcpy(s->nodes[i], json_string_value(j));

	if (!json_is_array(arr[META_ROW_IN_SYNC]) ||
	    json_array_size(arr[META_ROW_IN_SYNC]) > replicas)
		return meta_fail(why, why_len,
				 "placement row %zu: in_sync is not an array of at most %u ids",
				 idx, replicas);
	json_array_foreach(arr[META_ROW_IN_SYNC], i, j)
	{
		int k = json_is_string(j) ? zl_slice_index_of(s, json_string_value(j)) : -1;

		/* in_sync must be a subset of nodes, without repeats. */
		if (k < 0 || s->in_sync[k])
			return meta_fail(why, why_len,
					 "placement row %zu: in_sync[%zu] is not a node of the "
					 "row, or repeats one",
					 idx, i);
		s->in_sync[k] = true;
		s->state[k] = ZL_MEMBER_IN_SYNC;
	}
	if (!n_new) {
		s->term = 1;
		return 0;
	}

	if (meta_get_field(row, &term, s))
		return meta_fail(why, why_len, "placement row %zu: term is not in [1, 2^32)", idx);
	if (!meta_str_array_ok(arr[META_ROW_STATES], replicas, 16))
		return meta_fail(why, why_len, "placement row %zu: states is not %u strings", idx,
				 replicas);
	json_array_foreach(arr[META_ROW_STATES], i, j)
	{
		int st = meta_member_state_parse(json_string_value(j));

		if (st < 0)
			return meta_fail(why, why_len,
					 "placement row %zu: states[%zu] is not in_sync, "
					 "recovering or out",
					 idx, i);
		if ((st == ZL_MEMBER_IN_SYNC) != s->in_sync[i])
			return meta_fail(why, why_len,
					 "placement row %zu: states and in_sync disagree on %s",
					 idx, s->nodes[i]);
		s->state[i] = (uint8_t)st;
	}
	if (!meta_str_array_ok(arr[META_ROW_INCS], replicas, sizeof(s->incarnation[0])))
		return meta_fail(why, why_len,
				 "placement row %zu: incarnations is not %u strings of at most "
				 "%d characters",
				 idx, replicas, ZL_META_ID_LEN);
	json_array_foreach(arr[META_ROW_INCS], i, j)
	    strcpy(s->incarnation[i], json_string_value(j));
	return 0;
}

/* Integers get the range of their C type here; meta_volume_shape_check and
 * zl_meta_volume_check decide what a valid value is. */
static const struct meta_field meta_volume_fields[] = {
    META_STR(struct zl_volume, id, "id", false),
    META_STR(struct zl_volume, name, "name", false),
    META_STR(struct zl_volume, state, "state", false),
    META_INT(struct zl_volume, size, "size", 0, INT64_MAX),
    META_INT(struct zl_volume, chunk_size, "chunk_size", 0, UINT32_MAX),
    META_INT(struct zl_volume, replicas, "replicas", 0, UINT32_MAX),
    META_INT(struct zl_volume, n_slices, "slices", 0, UINT32_MAX),
    META_INT(struct zl_volume, created, "created", INT64_MIN, INT64_MAX),
    /* 0.1 records: the default for replicas, set after decoding. */
    META_INT_NEW(struct zl_volume, min_size, "min_size", 1, UINT32_MAX),
    /* Absent: the client's own. */
    META_INT_NEW(struct zl_volume, io_timeout_s, "io_timeout", 1, UINT32_MAX),
    /* Absent: never snapshotted. */
    META_INT_NEW(struct zl_volume, snap_seq, "snap_seq", 1, UINT32_MAX),
};

int meta_volume_from_json(const char *json, size_t len, struct zl_volume *v, char *why,
			  size_t why_len)
{
	json_t *o = meta_parse(json, len);
	json_t *params, *placement, *row;
	char *params_text = NULL;
	size_t i;
	int ret = -ZL_ERR_INVAL;

	if (why && why_len)
		why[0] = '\0';
	memset(v, 0, sizeof(*v));
	if (!o || !json_is_object(o)) {
		ret = meta_fail(why, why_len, "not a JSON object");
		goto out;
	}
	ret = meta_get_fields(o, meta_volume_fields, ZL_ARRAY_SIZE(meta_volume_fields), v, why,
			      why_len);
	if (ret)
		goto out;
	if (zl_vol_id_parse(v->id, &v->num)) {
		ret = meta_fail(why, why_len, "id %s is not vol- and 16 hex digits", v->id);
		goto out;
	}
	if (!v->min_size)
		v->min_size = zl_meta_min_size_default(v->replicas);
	ret = meta_volume_qos_from_json(o, v, why, why_len);
	if (ret)
		goto out;
	ret = meta_volume_snaps_from_json(o, v, why, why_len);
	if (ret)
		goto out;
	ret = meta_volume_parent_from_json(o, v, why, why_len);
	if (ret)
		goto out;
	/* Before the placement table is sized by them. */
	ret = meta_volume_shape_check(v, why, why_len);
	if (ret)
		goto out;
	params = json_object_get(o, "params");
	if (!json_is_object(params)) {
		ret = meta_fail(why, why_len, "field params is not a JSON object");
		goto out;
	}
	params_text = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
	if (!params_text) {
		ret = -ENOMEM;
		goto out;
	}
	if (strlen(params_text) >= sizeof(v->params)) {
		ret = meta_fail(why, why_len, "params is longer than %zu bytes",
				sizeof(v->params) - 1);
		goto out;
	}
	strcpy(v->params, params_text);

	placement = json_object_get(o, "placement");
	if (!json_is_array(placement) || json_array_size(placement) != v->n_slices) {
		ret = meta_fail(why, why_len, "placement is not an array of %u rows", v->n_slices);
		goto out;
	}
	v->slices = calloc(v->n_slices, sizeof(*v->slices));
	if (!v->slices) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(placement, i, row)
	{
		ret = meta_slice_from_json(row, i, v->replicas, &v->slices[i], why, why_len);
		if (ret)
			goto out;
	}
	ret = zl_meta_volume_check(v, why, why_len);
out:
	free(params_text);
	json_decref(o);
	if (ret) {
		zl_volume_fini(v);
		memset(v, 0, sizeof(*v));
	}
	return ret;
}

int zl_meta_volume_from_json(const char *json, size_t len, struct zl_volume *v)
{
	return meta_volume_from_json(json, len, v, NULL, 0);
}
