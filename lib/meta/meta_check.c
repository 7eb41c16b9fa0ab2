/* Record checks: the one place that says what a valid node or volume record
 * is. The decoders end with them, the encoders and writers refuse what fails
 * them, and the daemons that hold a record call zl_meta_volume_check instead
 * of checking fields of their own. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"
#include "meta_internal.h"

int meta_fail(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return -ZL_ERR_INVAL;
}

bool meta_buf_ok(const char *buf, size_t size, bool allow_empty)
{
	size_t n = strnlen(buf, size);

	return n < size && (allow_empty || n > 0);
}

int zl_meta_id_check(const char *s)
{
	if (!s)
		return -ZL_ERR_INVAL;
	for (int i = 0; i < ZL_META_ID_LEN; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return -ZL_ERR_INVAL;
	}
	return s[ZL_META_ID_LEN] ? -ZL_ERR_INVAL : 0;
}

bool meta_opt_id_ok(const char *buf, size_t size)
{
	return meta_buf_ok(buf, size, true) && (!buf[0] || !zl_meta_id_check(buf));
}

int meta_node_check(const struct zl_node_info *n, char *why, size_t why_len)
{
	if (!meta_buf_ok(n->id, sizeof(n->id), false) || zl_node_id_check(n->id))
		return meta_fail(why, why_len, "id is not 1..%d characters of [A-Za-z0-9._-]",
				 ZL_NODE_ID_MAX - 1);
	if (!meta_buf_ok(n->addr, sizeof(n->addr), false) || n->port == 0)
		return meta_fail(why, why_len, "addr is empty or too long, or port is 0");
	if (!meta_buf_ok(n->transports, sizeof(n->transports), false))
		return meta_fail(why, why_len, "transports is empty or too long");
	if (!meta_buf_ok(n->domain, sizeof(n->domain), true) ||
	    !meta_buf_ok(n->version, sizeof(n->version), true))
		return meta_fail(why, why_len, "domain or version is too long");
	if (n->capacity > INT64_MAX || n->free > INT64_MAX)
		return meta_fail(why, why_len, "capacity or free is beyond 2^63");
	if (!meta_opt_id_ok(n->cluster_id, sizeof(n->cluster_id)) ||
	    !meta_opt_id_ok(n->incarnation, sizeof(n->incarnation)))
		return meta_fail(why, why_len,
				 "cluster_id or incarnation is neither empty nor %d lowercase hex "
				 "digits",
				 ZL_META_ID_LEN);
	return 0;
}

bool zl_meta_chunk_size_ok(uint64_t chunk_size)
{
	return chunk_size >= ZL_WIRE_MIN_CHUNK && chunk_size <= ZL_WIRE_MAX_CHUNK &&
	       !(chunk_size & (chunk_size - 1));
}

int meta_volume_shape_check(const struct zl_volume *v, char *why, size_t why_len)
{
	if (v->size == 0 || v->size > INT64_MAX || v->size % ZL_BLOCK_SIZE)
		return meta_fail(why, why_len, "size=%" PRIu64 " is not a positive multiple of %u",
				 v->size, ZL_BLOCK_SIZE);
	if (!zl_meta_chunk_size_ok(v->chunk_size))
		return meta_fail(why, why_len, "chunk_size=%u is not a power of two in [%u, %u]",
				 v->chunk_size, ZL_WIRE_MIN_CHUNK, ZL_WIRE_MAX_CHUNK);
	if (v->replicas < 1 || v->replicas > ZL_MAX_REPLICAS)
		return meta_fail(why, why_len, "replicas=%u is not in [1, %d]", v->replicas,
				 ZL_MAX_REPLICAS);
	if (v->n_slices < 1 || v->n_slices > ZL_META_MAX_SLICES)
		return meta_fail(why, why_len, "slices=%u is not in [1, %u]", v->n_slices,
				 ZL_META_MAX_SLICES);
	if (v->min_size > v->replicas) /* 0 is the default */
		return meta_fail(why, why_len, "min_size=%u is not in [1, replicas=%u]",
				 v->min_size, v->replicas);
	for (int k = 0; k < ZL_QOS_N; k++)
		if (v->qos[k] > ZL_QOS_MAX)
			return meta_fail(why, why_len, "qos %s=%" PRIu64 " is beyond 2^63",
					 zl_qos_keys[k].json, v->qos[k]);
	if (v->io_timeout_s > ZL_META_IO_TIMEOUT_MAX)
		return meta_fail(why, why_len, "io_timeout=%u is not in [0, %u] seconds",
				 v->io_timeout_s, ZL_META_IO_TIMEOUT_MAX);
	if (v->snap_seq > ZL_WIRE_SEQ_MAX)
		return meta_fail(why, why_len, "snap_seq=%u is not in [0, %u]", v->snap_seq,
				 ZL_WIRE_SEQ_MAX);
	if (v->n_snaps > ZL_META_SNAPS_MAX)
		return meta_fail(why, why_len, "%u snapshots is more than %d", v->n_snaps,
				 ZL_META_SNAPS_MAX);
	for (uint32_t i = 0; i < v->n_snaps; i++)
		if (v->snaps[i] < 1 || v->snaps[i] > v->snap_seq ||
		    (i && v->snaps[i] <= v->snaps[i - 1]))
			return meta_fail(why, why_len,
					 "snaps[%u]=%u: the snapshot sequences must ascend strictly "
					 "within [1, snap_seq=%u]",
					 i, v->snaps[i], v->snap_seq);
	if (v->parent_vol[0] || v->parent_seq) {
		uint64_t pnum;

		if (!memchr(v->parent_vol, '\0', sizeof(v->parent_vol)) ||
		    zl_vol_id_parse(v->parent_vol, &pnum) || v->parent_seq < 1 ||
		    v->parent_seq > ZL_WIRE_SEQ_MAX)
			return meta_fail(why, why_len,
					 "parent must name a volume id (vol- and 16 hex digits) and "
					 "a snapshot sequence in [1, %u]",
					 ZL_WIRE_SEQ_MAX);
		if (pnum == v->num)
			return meta_fail(why, why_len, "parent %s is the volume itself",
					 v->parent_vol);
	}
	return 0;
}

/* params must be a JSON object whose text fits v->params. */
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

/* One placement row: a version, exactly `replicas` distinct valid node ids
 * (in_sync only says which of them are current, any subset is valid), member
 * states of the enum and incarnations that are empty or ids. Any term is
 * valid (0 reads as 1). */
static int meta_slice_check(const struct zl_slice *s, uint32_t idx, uint32_t replicas, char *why,
			    size_t why_len)
{
	if (s->version == 0 || s->version > INT64_MAX)
		return meta_fail(why, why_len, "slice %u has version %" PRIu64, idx, s->version);
	if (s->n != replicas)
		return meta_fail(why, why_len, "slice %u lists %u nodes, replicas=%u", idx, s->n,
				 replicas);
	for (uint32_t i = 0; i < replicas; i++) {
		if (!meta_buf_ok(s->nodes[i], sizeof(s->nodes[i]), false) ||
		    zl_node_id_check(s->nodes[i]))
			return meta_fail(why, why_len, "slice %u replica %u has an invalid node id",
					 idx, i);
		for (uint32_t j = 0; j < i; j++) {
			if (!strcmp(s->nodes[i], s->nodes[j]))
				return meta_fail(why, why_len, "slice %u lists node %s twice", idx,
						 s->nodes[i]);
		}
		if (s->state[i] > ZL_MEMBER_IN_SYNC)
			return meta_fail(why, why_len, "slice %u member %s has state %u", idx,
					 s->nodes[i], s->state[i]);
		if (!meta_opt_id_ok(s->incarnation[i], sizeof(s->incarnation[i])))
			return meta_fail(why, why_len,
					 "slice %u member %s has an incarnation that is neither "
					 "empty nor %d lowercase hex digits",
					 idx, s->nodes[i], ZL_META_ID_LEN);
	}
	return 0;
}

int zl_meta_volume_check(const struct zl_volume *v, char *why, size_t why_len)
{
	uint64_t num;
	int ret;

	if (why && why_len)
		why[0] = '\0';
	if (!v)
		return meta_fail(why, why_len, "no volume record");
	if (!meta_buf_ok(v->id, sizeof(v->id), false) || zl_vol_id_parse(v->id, &num))
		return meta_fail(why, why_len, "id is not vol- and 16 hex digits");
	if (num != v->num)
		return meta_fail(why, why_len, "id %s does not match number %016" PRIx64, v->id,
				 v->num);
	if (!meta_buf_ok(v->name, sizeof(v->name), false) || zl_volume_name_check(v->name))
		return meta_fail(why, why_len, "name is not 1..253 characters of [A-Za-z0-9._-]");
	ret = meta_volume_shape_check(v, why, why_len);
	if (ret)
		return ret;
	if (!v->slices)
		return meta_fail(why, why_len, "no placement table for %u slices", v->n_slices);
	if (!meta_buf_ok(v->state, sizeof(v->state), false))
		return meta_fail(why, why_len, "state is empty or too long");
	if (meta_params_check(v->params, sizeof(v->params)))
		return meta_fail(why, why_len, "params is not a JSON object");
	for (uint32_t s = 0; s < v->n_slices; s++) {
		ret = meta_slice_check(&v->slices[s], s, v->replicas, why, why_len);
		if (ret)
			return ret;
	}
	return 0;
}
