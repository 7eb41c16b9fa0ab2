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

/* One field of a record: a string copied into a char buffer of `size` bytes,
 * or an integer in [min, max] stored into an unsigned 16/32-bit or a 64-bit
 * member of `size` bytes. */
struct meta_field {
	const char *name;
	size_t off, size;
	bool is_str, allow_empty;
	int64_t min, max;
};

#define META_STR(type, member, name, allow_empty)                                                  \
	{                                                                                          \
		name, offsetof(type, member), sizeof(((type *)0)->member), true, allow_empty, 0, 0 \
	}
#define META_INT(type, member, name, min, max)                                                     \
	{                                                                                          \
		name, offsetof(type, member), sizeof(((type *)0)->member), false, false, min, max  \
	}

static int meta_get_field(json_t *o, const struct meta_field *f, void *rec)
{
	json_t *j = json_object_get(o, f->name);
	char *p = (char *)rec + f->off;
	json_int_t x;
	size_t n;

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

/* Decodes every field of the table into rec. 0 or -ZL_ERR_INVAL with the
 * field named in why. */
static int meta_get_fields(json_t *o, const struct meta_field *f, size_t n, void *rec, char *why,
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

static json_t *meta_parse(const char *json, size_t len)
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
	char *s;

	if (n->capacity > INT64_MAX || n->free > INT64_MAX)
		return NULL;
	o = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:s}", "id", n->id, "addr",
		      n->addr, "port", (int)n->port, "rdma_port", (int)n->rdma_port, "transports",
		      n->transports, "domain", n->domain, "capacity", (json_int_t)n->capacity,
		      "free", (json_int_t)n->free, "start_time", (json_int_t)n->start_time,
		      "version", n->version);
	if (!o)
		return NULL;
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
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
};

int meta_node_from_json(const char *json, size_t len, struct zl_node_info *n, char *why,
			size_t why_len)
{
	json_t *o = meta_parse(json, len);
	int ret;

	memset(n, 0, sizeof(*n));
	if (!o || !json_is_object(o))
		ret = meta_fail(why, why_len, "not a JSON object");
	else
		ret = meta_get_fields(o, meta_node_fields, ZL_ARRAY_SIZE(meta_node_fields), n, why,
				      why_len);
	if (!ret && meta_node_check(n))
		ret = meta_fail(why, why_len, "id, addr or port is not valid");
	json_decref(o);
	if (ret)
		memset(n, 0, sizeof(*n));
	return ret;
}

int zl_meta_node_from_json(const char *json, size_t len, struct zl_node_info *n)
{
	return meta_node_from_json(json, len, n, NULL, 0);
}

/* ---- volume record ---- */

static json_t *meta_slice_to_json(const struct zl_slice *s)
{
	json_t *o, *nodes, *in_sync;

	o = json_object();
	nodes = json_array();
	in_sync = json_array();
	if (!o || !nodes || !in_sync)
		goto out_err;
	for (int i = 0; i < s->n; i++) {
		if (json_array_append_new(nodes, json_string(s->nodes[i])))
			goto out_err;
		if (s->in_sync[i] && json_array_append_new(in_sync, json_string(s->nodes[i])))
			goto out_err;
	}
	if (json_object_set_new(o, "v", json_integer((json_int_t)s->version)))
		goto out_err;
	if (json_object_set(o, "nodes", nodes) || json_object_set(o, "in_sync", in_sync))
		goto out_err;
	json_decref(nodes);
	json_decref(in_sync);
	return o;

out_err:
	json_decref(in_sync);
	json_decref(nodes);
	json_decref(o);
	return NULL;
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
	o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:I, s:O, s:O}", "id", v->id, "name",
		      v->name, "size", (json_int_t)v->size, "chunk_size", (json_int_t)v->chunk_size,
		      "replicas", (json_int_t)v->replicas, "slices", (json_int_t)v->n_slices,
		      "state", v->state, "created", (json_int_t)v->created, "params", params,
		      "placement", placement);
	if (!o)
		goto out;
	s = json_dumps(o, JSON_COMPACT);
out:
	json_decref(o);
	json_decref(placement);
	json_decref(params);
	return s;
}

/* Copies one placement row (its shape: a version, `replicas` node ids,
 * in_sync a subset of them); zl_meta_volume_check judges the values. */
static int meta_slice_from_json(json_t *row, uint32_t replicas, struct zl_slice *s)
{
	static const struct meta_field version =
	    META_INT(struct zl_slice, version, "v", 1, INT64_MAX);
	json_t *nodes, *in_sync, *j;
	size_t i;

	if (!json_is_object(row) || meta_get_field(row, &version, s))
		return -ZL_ERR_INVAL;
	nodes = json_object_get(row, "nodes");
	in_sync = json_object_get(row, "in_sync");
	if (!json_is_array(nodes) || json_array_size(nodes) != replicas ||
	    !json_is_array(in_sync) || json_array_size(in_sync) > replicas)
		return -ZL_ERR_INVAL;
	s->n = (uint8_t)replicas;
	json_array_foreach(nodes, i, j)
	{
		if (!json_is_string(j) || json_string_length(j) >= sizeof(s->nodes[i]))
			return -ZL_ERR_INVAL;
		strcpy(s->nodes[i], json_string_value(j));
	}
	json_array_foreach(in_sync, i, j)
	{
		int k;

		if (!json_is_string(j))
			return -ZL_ERR_INVAL;
		k = zl_slice_index_of(s, json_string_value(j));
		/* in_sync must be a subset of nodes, without repeats. */
		if (k < 0 || s->in_sync[k])
			return -ZL_ERR_INVAL;
		s->in_sync[k] = true;
	}
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
		if (meta_slice_from_json(row, v->replicas, &v->slices[i])) {
			ret = meta_fail(why, why_len,
					"placement row %zu is not {v, nodes[%u], in_sync "
					"a subset of nodes}",
					i, v->replicas);
			goto out;
		}
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
