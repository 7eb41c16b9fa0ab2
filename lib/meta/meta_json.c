/* JSON codecs of the node and volume records, record checks, and the small
 * struct helpers. Decoders trust nothing: every field's presence, type,
 * range and length is checked before it is copied into the fixed buffers
 * (they are fuzzed, test/fuzz/fuzz_meta_json.c). Unknown fields are ignored
 * so that newer writers can add some. */
#include <errno.h>
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

/* ---- record checks ---- */

static bool meta_buf_ok(const char *buf, size_t size, bool allow_empty)
{
	size_t n = strnlen(buf, size);

	return n < size && (allow_empty || n > 0);
}

int meta_node_check(const struct zl_node_info *n)
{
	if (!meta_buf_ok(n->id, sizeof(n->id), false) || zl_node_id_check(n->id))
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(n->addr, sizeof(n->addr), false) || n->port == 0)
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(n->transports, sizeof(n->transports), false))
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(n->domain, sizeof(n->domain), true))
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(n->version, sizeof(n->version), true))
		return -ZL_ERR_INVAL;
	if (n->capacity > INT64_MAX || n->free > INT64_MAX)
		return -ZL_ERR_INVAL;
	return 0;
}

/* params must be a JSON object whose compact text fits v->params. */
static int meta_params_check(const char *text, size_t size)
{
	json_t *o;
	int ret = 0;

	if (!meta_buf_ok(text, size, false))
		return -ZL_ERR_INVAL;
	o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	if (!o || !json_is_object(o))
		ret = -ZL_ERR_INVAL;
	json_decref(o);
	return ret;
}

static int meta_slice_check(const struct zl_slice *s, uint32_t replicas)
{
	if (s->version == 0 || s->version > INT64_MAX || s->n != replicas)
		return -ZL_ERR_INVAL;
	for (uint32_t i = 0; i < replicas; i++) {
		if (!meta_buf_ok(s->nodes[i], sizeof(s->nodes[i]), false) ||
		    zl_node_id_check(s->nodes[i]))
			return -ZL_ERR_INVAL;
		for (uint32_t j = 0; j < i; j++) {
			if (!strcmp(s->nodes[i], s->nodes[j]))
				return -ZL_ERR_INVAL;
		}
	}
	return 0;
}

int meta_volume_check(const struct zl_volume *v)
{
	uint64_t num;

	if (!meta_buf_ok(v->id, sizeof(v->id), false) || zl_vol_id_parse(v->id, &num) ||
	    num != v->num)
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(v->name, sizeof(v->name), false) || zl_volume_name_check(v->name))
		return -ZL_ERR_INVAL;
	if (v->size == 0 || v->size > INT64_MAX || v->size % ZL_BLOCK_SIZE)
		return -ZL_ERR_INVAL;
	if (v->chunk_size < ZL_WIRE_MIN_CHUNK || v->chunk_size > ZL_WIRE_MAX_CHUNK ||
	    (v->chunk_size & (v->chunk_size - 1)))
		return -ZL_ERR_INVAL;
	if (v->replicas < 1 || v->replicas > ZL_MAX_REPLICAS)
		return -ZL_ERR_INVAL;
	if (v->n_slices < 1 || v->n_slices > ZL_META_MAX_SLICES || !v->slices)
		return -ZL_ERR_INVAL;
	if (!meta_buf_ok(v->state, sizeof(v->state), false))
		return -ZL_ERR_INVAL;
	if (meta_params_check(v->params, sizeof(v->params)))
		return -ZL_ERR_INVAL;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		if (meta_slice_check(&v->slices[s], v->replicas))
			return -ZL_ERR_INVAL;
	}
	return 0;
}

/* ---- decoding helpers ---- */

static int meta_get_str(json_t *o, const char *field, char *buf, size_t size, bool allow_empty)
{
	json_t *j = json_object_get(o, field);
	size_t n;

	if (!json_is_string(j))
		return -ZL_ERR_INVAL;
	n = json_string_length(j);
	/* The parser rejects \u0000, so the length is also the C string length. */
	if (n >= size || (!allow_empty && n == 0) || strlen(json_string_value(j)) != n)
		return -ZL_ERR_INVAL;
	memcpy(buf, json_string_value(j), n + 1);
	return 0;
}

static int meta_get_int(json_t *o, const char *field, int64_t min, int64_t max, int64_t *out)
{
	json_t *j = json_object_get(o, field);
	json_int_t x;

	if (!json_is_integer(j))
		return -ZL_ERR_INVAL;
	x = json_integer_value(j);
	if (x < min || x > max)
		return -ZL_ERR_INVAL;
	*out = (int64_t)x;
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

int zl_meta_node_from_json(const char *json, size_t len, struct zl_node_info *n)
{
	json_t *o = meta_parse(json, len);
	int64_t x;
	int ret = -ZL_ERR_INVAL;

	memset(n, 0, sizeof(*n));
	if (!o || !json_is_object(o))
		goto out;
	if (meta_get_str(o, "id", n->id, sizeof(n->id), false) ||
	    meta_get_str(o, "addr", n->addr, sizeof(n->addr), false) ||
	    meta_get_str(o, "transports", n->transports, sizeof(n->transports), false) ||
	    meta_get_str(o, "domain", n->domain, sizeof(n->domain), true) ||
	    meta_get_str(o, "version", n->version, sizeof(n->version), true))
		goto out;
	if (meta_get_int(o, "port", 1, UINT16_MAX, &x))
		goto out;
	n->port = (uint16_t)x;
	if (meta_get_int(o, "rdma_port", 0, UINT16_MAX, &x))
		goto out;
	n->rdma_port = (uint16_t)x;
	if (meta_get_int(o, "capacity", 0, INT64_MAX, &x))
		goto out;
	n->capacity = (uint64_t)x;
	if (meta_get_int(o, "free", 0, INT64_MAX, &x))
		goto out;
	n->free = (uint64_t)x;
	if (meta_get_int(o, "start_time", INT64_MIN, INT64_MAX, &n->start_time))
		goto out;
	ret = meta_node_check(n);
out:
	json_decref(o);
	if (ret)
		memset(n, 0, sizeof(*n));
	return ret;
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
	if (meta_volume_check(v))
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

static int meta_slice_from_json(json_t *row, uint32_t replicas, struct zl_slice *s)
{
	json_t *nodes, *in_sync, *j;
	int64_t ver;
	size_t i;

	if (!json_is_object(row))
		return -ZL_ERR_INVAL;
	if (meta_get_int(row, "v", 1, INT64_MAX, &ver))
		return -ZL_ERR_INVAL;
	s->version = (uint64_t)ver;
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
	return meta_slice_check(s, replicas);
}

int zl_meta_volume_from_json(const char *json, size_t len, struct zl_volume *v)
{
	json_t *o = meta_parse(json, len);
	json_t *params, *placement, *row;
	char *params_text = NULL;
	int64_t x;
	size_t i;
	int ret = -ZL_ERR_INVAL;

	memset(v, 0, sizeof(*v));
	if (!o || !json_is_object(o))
		goto out;
	if (meta_get_str(o, "id", v->id, sizeof(v->id), false) || zl_vol_id_parse(v->id, &v->num) ||
	    meta_get_str(o, "name", v->name, sizeof(v->name), false) ||
	    meta_get_str(o, "state", v->state, sizeof(v->state), false))
		goto out;
	if (meta_get_int(o, "size", 1, INT64_MAX, &x))
		goto out;
	v->size = (uint64_t)x;
	if (meta_get_int(o, "chunk_size", ZL_WIRE_MIN_CHUNK, ZL_WIRE_MAX_CHUNK, &x))
		goto out;
	v->chunk_size = (uint32_t)x;
	if (meta_get_int(o, "replicas", 1, ZL_MAX_REPLICAS, &x))
		goto out;
	v->replicas = (uint32_t)x;
	if (meta_get_int(o, "slices", 1, ZL_META_MAX_SLICES, &x))
		goto out;
	v->n_slices = (uint32_t)x;
	if (meta_get_int(o, "created", INT64_MIN, INT64_MAX, &v->created))
		goto out;

	params = json_object_get(o, "params");
	if (!json_is_object(params))
		goto out;
	params_text = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
	if (!params_text) {
		ret = -ENOMEM;
		goto out;
	}
	if (strlen(params_text) >= sizeof(v->params))
		goto out;
	strcpy(v->params, params_text);

	placement = json_object_get(o, "placement");
	if (!json_is_array(placement) || json_array_size(placement) != v->n_slices)
		goto out;
	v->slices = calloc(v->n_slices, sizeof(*v->slices));
	if (!v->slices) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(placement, i, row)
	{
		if (meta_slice_from_json(row, v->replicas, &v->slices[i]))
			goto out;
	}
	ret = meta_volume_check(v);
out:
	free(params_text);
	json_decref(o);
	if (ret) {
		zl_volume_fini(v);
		memset(v, 0, sizeof(*v));
	}
	return ret;
}
