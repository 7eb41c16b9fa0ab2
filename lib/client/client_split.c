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
	/* Our TLS configuration (no CA, another CA): the node is fine, nothing
	 * to fail over or promote. */
	if (err == -ZL_ERR_TLS || err == -ZL_ERR_TLS_CA)
		return ZL_CLIENT_ACT_FAIL;
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
	case ZL_ERR_SNAPSEQ:   /* a snapshot we have not seen: resend with its sequence */
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

enum zl_client_action zl_client_classify_heal(int op, int err, bool transport)
{
	bool write = zl_client_op_is_write(op);

	if (err == 0)
		return ZL_CLIENT_ACT_DONE;
	if (transport) {
		/* No reply: the primary (or the path to it) is in trouble. */
		if (err == -ZL_ERR_CORRUPT)
			return ZL_CLIENT_ACT_RETRY; /* damaged on the wire: send again */
		if (err == -ZL_ERR_CONN || err == -ZL_ERR_TIMEOUT)
			return ZL_CLIENT_ACT_REPORT;
		return ZL_CLIENT_ACT_FAIL;
	}
	switch (-err) {
	case ZL_ERR_PEERING:
	case ZL_ERR_NOT_PRIMARY:
	case ZL_ERR_STALE:
	case ZL_ERR_NOT_INSYNC:
	case ZL_ERR_MIN_SIZE:
	case ZL_ERR_UNAVAIL:
	case ZL_ERR_NOT_FOUND: /* volume unknown there: the reload tells if it is gone */
	case ZL_ERR_ETCD:
	case ZL_ERR_CONN:    /* the primary could not reach a backup: it reports */
	case ZL_ERR_TIMEOUT:
	case ZL_ERR_SNAPSEQ: /* a snapshot we have not seen: resend with its sequence */
		return ZL_CLIENT_ACT_RELOAD;
	case ZL_ERR_BUSY:
		return ZL_CLIENT_ACT_RETRY;
	case ZL_ERR_CORRUPT:
		/* A write whose payload arrived damaged is sent again; a read
		 * found a bad block in the primary's copy: the other IN_SYNC
		 * members have good ones (READ + ZL_WF_ANY). */
		return write ? ZL_CLIENT_ACT_RETRY : ZL_CLIENT_ACT_FAILOVER;
	case ZL_ERR_IO:
		return write ? ZL_CLIENT_ACT_FAIL : ZL_CLIENT_ACT_FAILOVER;
	default:
		return ZL_CLIENT_ACT_FAIL;
	}
}

uint32_t zl_client_heal_backoff_ms(uint32_t attempt)
{
	if (attempt <= 1)
		return 0;
	if (attempt >= 8) /* 50 << 6 > 2000: also keeps the shift small */
		return CLIENT_HEAL_BACKOFF_MAX_MS;
	return ZL_MIN(CLIENT_HEAL_BACKOFF_MIN_MS << (attempt - 2), CLIENT_HEAL_BACKOFF_MAX_MS);
}

int zl_client_heal_final_err(int last_err)
{
	return last_err == -ZL_ERR_MIN_SIZE ? -ZL_ERR_MIN_SIZE : -ZL_ERR_TIMEOUT;
}

const char *zl_client_report_error(int err)
{
	switch (-err) {
	case ZL_ERR_CORRUPT:
		return "CORRUPT";
	case ZL_ERR_IO:
		return "IO";
	case ZL_ERR_TIMEOUT:
		return "TIMEOUT";
	default:
		return "UNREACHABLE";
	}
}
