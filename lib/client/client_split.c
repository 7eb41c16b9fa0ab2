/* Pure decisions of the volume client: range checks, splitting, target
 * choice, retry classification. No I/O here, so they are unit-tested alone. */
#include "client_internal.h"

int zl_client_range_check(uint64_t size, uint64_t off, uint64_t len)
{
	if (off > size || len > size - off)
		return -ZL_ERR_RANGE;
	return 0;
}

int zl_client_split_next(uint64_t off, uint64_t len, uint64_t done, uint32_t chunk_size,
			 uint32_t max_io, struct zl_client_extent *ext)
{
	uint64_t pos, in_chunk, n;

	if (done >= len || !chunk_size || !max_io)
		return 0;
	pos = off + done;
	in_chunk = pos & ((uint64_t)chunk_size - 1);
	n = len - done;
	n = ZL_MIN(n, (uint64_t)chunk_size - in_chunk);
	n = ZL_MIN(n, (uint64_t)max_io);
	ext->chunk = pos / chunk_size;
	ext->offset = (uint32_t)in_chunk;
	ext->length = (uint32_t)n;
	ext->pos = done;
	return 1;
}

uint64_t zl_client_split_count(uint64_t off, uint64_t len, uint32_t chunk_size, uint32_t max_io)
{
	struct zl_client_extent e;
	uint64_t done = 0, count = 0;

	while (zl_client_split_next(off, len, done, chunk_size, max_io, &e)) {
		done += e.length;
		count++;
	}
	return count;
}

int zl_client_pick_target(const struct zl_slice *s, bool is_read, uint32_t tried_mask,
			  uint32_t avoid_mask)
{
	int fallback = -1;
	unsigned n = ZL_MIN(s->n, (unsigned)ZL_MAX_REPLICAS);

	if (!is_read)
		return zl_slice_primary(s);
	for (unsigned i = 0; i < n; i++) {
		if (!s->in_sync[i] || (tried_mask & (1u << i)))
			continue;
		if (!(avoid_mask & (1u << i)))
			return (int)i;
		if (fallback < 0)
			fallback = (int)i;
	}
	return fallback;
}

enum zl_client_action zl_client_classify(int op, int err, bool transport)
{
	bool write = zl_client_op_is_write(op);

	if (err == 0)
		return ZL_CLIENT_ACT_DONE;
	if (transport) {
		/* No reply from the node: it (or the path to it) is in trouble. */
		if (!write)
			return ZL_CLIENT_ACT_FAILOVER;
		if (err == -ZL_ERR_CORRUPT)
			return ZL_CLIENT_ACT_RETRY;
		return ZL_CLIENT_ACT_PROMOTE;
	}
	switch (-err) {
	case ZL_ERR_STALE:
	case ZL_ERR_NOT_PRIMARY:
	case ZL_ERR_NOT_INSYNC:
	case ZL_ERR_NOT_FOUND: /* volume unknown there: the reload tells if it is gone */
	case ZL_ERR_UNAVAIL:   /* primary could not drop a failed backup */
	case ZL_ERR_ETCD:
		return ZL_CLIENT_ACT_RELOAD;
	case ZL_ERR_CORRUPT:
		/* A read found a bad block: another replica has good data. A
		 * write whose payload arrived damaged is simply sent again. */
		return write ? ZL_CLIENT_ACT_RETRY : ZL_CLIENT_ACT_FAILOVER;
	case ZL_ERR_IO:
		return write ? ZL_CLIENT_ACT_FAIL : ZL_CLIENT_ACT_FAILOVER;
	case ZL_ERR_TIMEOUT:
	case ZL_ERR_CONN:
	case ZL_ERR_BUSY:
		return ZL_CLIENT_ACT_RETRY;
	default:
		return ZL_CLIENT_ACT_FAIL;
	}
}

uint32_t zl_client_backoff_ms(uint32_t attempt)
{
	if (attempt <= 1)
		return 0;
	if (attempt >= 10)
		return 2000;
	return ZL_MIN(10u << (attempt - 2), 2000u);
}
