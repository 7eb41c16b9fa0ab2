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

/* ---- recovery progress of a storage daemon: <prefix>status/<node-id> ---- */

static int meta_status_snap_check(const struct zl_node_status *s, char *why, size_t why_len)
{
	uint64_t sum = 0;

	if (s->snap_bytes > INT64_MAX)
		return meta_fail(why, why_len, "snapshot_bytes is out of range");
	if (s->n_snap > ZL_STATUS_SNAP_MAX || s->n_snap > s->snap_entries)
		return meta_fail(why, why_len,
				 "more snapshots entries than snapshot_entries or than %u",
				 ZL_STATUS_SNAP_MAX);
	for (uint32_t i = 0; i < s->n_snap; i++) {
		const struct zl_status_snap *p = &s->snap[i], *q = p - 1;

		if (!p->seq || p->bytes > INT64_MAX)
			return meta_fail(why, why_len,
					 "snapshots entry %u has seq 0 or too many bytes", i);
		if (i && (p->vol < q->vol || (p->vol == q->vol && p->seq <= q->seq)))
			return meta_fail(why, why_len,
					 "snapshots entries are not sorted by (vol, seq) at %u", i);
		sum += p->bytes;
		if (sum > s->snap_bytes)
			return meta_fail(why, why_len,
					 "snapshots entries sum to more than snapshot_bytes");
	}
	return 0;
}

static int meta_status_check(const void *rec, char *why, size_t why_len)
{
	const struct zl_node_status *s = rec;

	if (!meta_buf_ok(s->node, sizeof(s->node), false) || zl_node_id_check(s->node))
		return meta_fail(why, why_len, "node is not a valid node id");
	if (!meta_buf_ok(s->disk_error, sizeof(s->disk_error), true))
		return meta_fail(why, why_len, "disk_error is not a string of at most %zu bytes",
				 sizeof(s->disk_error) - 1);
	if (s->bytes_done > INT64_MAX || s->bytes_left > INT64_MAX || s->rate > INT64_MAX ||
	    s->time < 0 || s->chunk_writes > INT64_MAX || s->durable_ios > INT64_MAX ||
	    s->journal_size > INT64_MAX || s->journal_used > s->journal_size ||
	    s->journal_checkpoints > INT64_MAX || s->journal_waits > INT64_MAX)
		return meta_fail(why, why_len, "a counter is out of range");
	if (s->n_peering > ZL_STATUS_PEERING_MAX || s->n_peering > s->peering_slices)
		return meta_fail(why, why_len,
				 "more peering entries than peering_slices or than %u",
				 ZL_STATUS_PEERING_MAX);
	for (uint32_t i = 0; i < s->n_peering; i++) {
		const struct zl_status_peering *p = &s->peering[i], *q = p - 1;

		if (!p->term)
			return meta_fail(why, why_len, "peering entry %u has term 0", i);
		if (i && (p->vol < q->vol || (p->vol == q->vol && p->slice <= q->slice)))
			return meta_fail(why, why_len,
					 "peering entries are not sorted by (vol, slice) at %u", i);
	}
	return meta_status_snap_check(s, why, why_len);
}

/* "snapshot_bytes", "snapshot_entries" and "snapshots" into o. 0 or -1. */
static int meta_status_snap_put(json_t *o, const struct zl_node_status *s)
{
	json_t *arr = json_array();

	for (uint32_t i = 0; arr && i < s->n_snap; i++) {
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(s->snap[i].vol, vid);
		if (json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I}", "vol", vid, "seq",
							 (json_int_t)s->snap[i].seq, "clones",
							 (json_int_t)s->snap[i].clones, "bytes",
							 (json_int_t)s->snap[i].bytes))) {
			json_decref(arr);
			return -1;
		}
	}
	if (!arr || json_object_set_new(o, "snapshots", arr) ||
	    json_object_set_new(o, "snapshot_bytes", json_integer((json_int_t)s->snap_bytes)) ||
	    json_object_set_new(o, "snapshot_entries", json_integer((json_int_t)s->snap_entries)))
		return -1;
	return 0;
}

char *zl_meta_status_to_json(const struct zl_node_status *s)
{
	json_t *o, *arr;

	if (meta_status_check(s, NULL, 0))
		return NULL;
	arr = json_array();
	for (uint32_t i = 0; arr && i < s->n_peering; i++) {
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(s->peering[i].vol, vid);
		if (json_array_append_new(arr, json_pack("{s:s, s:I, s:I}", "vol", vid, "slice",
							 (json_int_t)s->peering[i].slice, "term",
							 (json_int_t)s->peering[i].term))) {
			json_decref(arr);
			return NULL;
		}
	}
	if (!arr)
		return NULL;
	o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
		      "node", s->node, "recovering_bytes_done", (json_int_t)s->bytes_done,
		      "recovering_bytes_left", (json_int_t)s->bytes_left, "rate",
		      (json_int_t)s->rate, "recovering", (json_int_t)s->recovering, "time",
		      (json_int_t)s->time, "peering_slices", (json_int_t)s->peering_slices,
		      "peering", arr, "chunk_writes", (json_int_t)s->chunk_writes, "durable_ios",
		      (json_int_t)s->durable_ios, "journal_size", (json_int_t)s->journal_size,
		      "journal_used", (json_int_t)s->journal_used, "journal_dirty_chunks",
		      (json_int_t)s->journal_dirty_chunks, "journal_checkpoints",
		      (json_int_t)s->journal_checkpoints, "journal_waits",
		      (json_int_t)s->journal_waits);
	/* Written only once the disk failed: records stay as they were. */
	if (o && s->disk_error[0] &&
	    json_object_set_new(o, "disk_error", json_string(s->disk_error))) {
		json_decref(o);
		return NULL;
	}
	/* Written only while the disk is full, or near full. */
	if (o && s->disk_full && json_object_set_new(o, "disk_full", json_true())) {
		json_decref(o);
		return NULL;
	}
	if (o && s->disk_near_full && json_object_set_new(o, "disk_near_full", json_true())) {
		json_decref(o);
		return NULL;
	}
	/* Written once the node holds snapshot space: records without stay as
	 * they were. */
	if (o && (s->snap_bytes || s->snap_entries) && meta_status_snap_put(o, s)) {
		json_decref(o);
		return NULL;
	}
	return meta_dump(o);
}

static const struct meta_field meta_status_fields[] = {
    META_STR(struct zl_node_status, node, "node", false),
    META_INT(struct zl_node_status, bytes_done, "recovering_bytes_done", 0, INT64_MAX),
    META_INT(struct zl_node_status, bytes_left, "recovering_bytes_left", 0, INT64_MAX),
    META_INT(struct zl_node_status, rate, "rate", 0, INT64_MAX),
    META_INT(struct zl_node_status, recovering, "recovering", 0, UINT32_MAX),
    META_INT(struct zl_node_status, time, "time", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, peering_slices, "peering_slices", 0, UINT32_MAX),
    META_INT_NEW(struct zl_node_status, chunk_writes, "chunk_writes", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, durable_ios, "durable_ios", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, journal_size, "journal_size", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, journal_used, "journal_used", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, journal_dirty_chunks, "journal_dirty_chunks", 0,
		 UINT32_MAX),
    META_INT_NEW(struct zl_node_status, journal_checkpoints, "journal_checkpoints", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, journal_waits, "journal_waits", 0, INT64_MAX),
    META_STR_NEW(struct zl_node_status, disk_error, "disk_error"),
    META_BOOL_NEW(struct zl_node_status, disk_full, "disk_full"),
    META_BOOL_NEW(struct zl_node_status, disk_near_full, "disk_near_full"),
    META_INT_NEW(struct zl_node_status, snap_bytes, "snapshot_bytes", 0, INT64_MAX),
    META_INT_NEW(struct zl_node_status, snap_entries, "snapshot_entries", 0, UINT32_MAX),
};

/* An array of objects {"vol", fields...} of a status record into
 * base[0 .. *n) (elements of size bytes, their uint64_t vol first), absent
 * in older records: "peering" {vol, slice, term}, "snapshots" {vol, seq,
 * clones, bytes}. 0 or -ZL_ERR_INVAL. */
static int meta_status_list_get(json_t *o, const char *key, size_t max, void *base, size_t size,
				const struct meta_field *fields, size_t n_fields, const char *shape,
				uint32_t *n, char *why, size_t why_len)
{
	json_t *arr = json_object_get(o, key), *e;
	size_t i;

	if (!arr)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > max)
		return meta_fail(why, why_len, "field %s is not an array of at most %zu entries",
				 key, max);
	json_array_foreach(arr, i, e)
	{
		void *p = (char *)base + i * size;
		json_t *vid = json_object_get(e, "vol");

		if (!json_is_object(e) || !json_is_string(vid) ||
		    zl_vol_id_parse(json_string_value(vid), (uint64_t *)p) ||
		    meta_get_fields(e, fields, n_fields, p, NULL, 0))
			return meta_fail(why, why_len, "%s entry %zu is not %s", key, i, shape);
	}
	*n = (uint32_t)json_array_size(arr);
	return 0;
}

static const struct meta_field meta_status_peering_fields[] = {
    META_INT(struct zl_status_peering, slice, "slice", 0, UINT32_MAX),
    META_INT(struct zl_status_peering, term, "term", 1, UINT32_MAX),
};

static const struct meta_field meta_status_snap_fields[] = {
    META_INT(struct zl_status_snap, seq, "seq", 1, UINT32_MAX),
    META_INT(struct zl_status_snap, clones, "clones", 0, UINT32_MAX),
    META_INT(struct zl_status_snap, bytes, "bytes", 0, INT64_MAX),
};

_Static_assert(offsetof(struct zl_status_peering, vol) == 0 &&
		   offsetof(struct zl_status_snap, vol) == 0,
	       "meta_status_list_get writes vol first");

static int meta_status_from_json(const char *json, size_t len, struct zl_node_status *s, char *why,
				 size_t why_len)
{
	json_t *o = meta_parse(json, len);
	int ret;

	memset(s, 0, sizeof(*s));
	if (!o || !json_is_object(o))
		ret = meta_fail(why, why_len, "not a JSON object");
	else
		ret = meta_get_fields(o, meta_status_fields, ZL_ARRAY_SIZE(meta_status_fields), s,
				      why, why_len);
	if (!ret)
		ret = meta_status_list_get(
		    o, "peering", ZL_STATUS_PEERING_MAX, s->peering, sizeof(s->peering[0]),
		    meta_status_peering_fields, ZL_ARRAY_SIZE(meta_status_peering_fields),
		    "{\"vol\", \"slice\", \"term\"}", &s->n_peering, why, why_len);
	if (!ret)
		ret = meta_status_list_get(
		    o, "snapshots", ZL_STATUS_SNAP_MAX, s->snap, sizeof(s->snap[0]),
		    meta_status_snap_fields, ZL_ARRAY_SIZE(meta_status_snap_fields),
		    "{\"vol\", \"seq\", \"clones\", \"bytes\"}", &s->n_snap, why, why_len);
	if (!ret)
		ret = meta_status_check(s, why, why_len);
	json_decref(o);
	if (ret)
		memset(s, 0, sizeof(*s));
	return ret;
}

int zl_meta_status_from_json(const char *json, size_t len, struct zl_node_status *s)
{
	return meta_status_from_json(json, len, s, NULL, 0);
}

const struct zl_node_status *zl_meta_status_find(const struct zl_node_status *st, size_t n,
						 const char *node)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(st[i].node, node))
			return &st[i];
	return NULL;
}

int zl_meta_status_put(struct zl_etcd *e, const char *prefix, const struct zl_node_status *s,
		       int64_t lease)
{
	char key[ZL_META_KEY_MAX];
	char *json;
	int ret;

	ret = zl_meta_key(key, sizeof(key), prefix, "status", s->node);
	if (ret)
		return ret;
	json = zl_meta_status_to_json(s);
	if (!json)
		return -ZL_ERR_INVAL;
	ret = zl_etcd_put(e, key, json, strlen(json), lease, NULL);
	free(json);
	return ret;
}

static int meta_status_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	return meta_status_from_json(kv->value, kv->value_len, rec, why, why_len);
}

static int meta_status_cmp(const void *a, const void *b)
{
	const struct zl_node_status *x = a, *y = b;

	return strcmp(x->node, y->node);
}

static const struct meta_record_ops meta_status_ops = {
    .kind = "status",
    .what = "node status",
    .hint = "it is rewritten every few seconds by that node's zipline-storage",
    .size = sizeof(struct zl_node_status),
    .id_off = offsetof(struct zl_node_status, node),
    .decode = meta_status_decode,
    .cmp = meta_status_cmp,
};

int zl_meta_status_list(struct zl_etcd *e, const char *prefix, struct zl_node_status **out,
			size_t *n)
{
	void *recs;
	int ret = meta_record_list(e, prefix, &meta_status_ops, &recs, n);

	*out = recs;
	return ret;
}
