/* Taking a snapshot as a requester (docs/SNAPSHOTS.md §3), shared by `zl
 * snapshot create` and the CSI controller's CreateSnapshot: a volume some
 * client serves (its snapwriters/ key is live on that client's lease) is
 * snapshotted by that client, which alone knows which writes it
 * acknowledged; otherwise the requester takes it itself (one transaction,
 * meta_snap.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* How often the requester reads the request back while it waits. */
#define META_SNAP_POLL_MS 50u
/* Rounds of "look for a serving client, else the transaction" while
 * clients come and go between the two. */
#define META_SNAP_ROUNDS 4

/* The error a serving client answered, by name (struct zl_snapreq.error). */
static int meta_snap_err_by_name(const char *name)
{
#define META_SNAP_ERR(e) {#e, -e}
	static const struct {
		const char *name;
		int err;
	} tab[] = {META_SNAP_ERR(ZL_ERR_NOT_FOUND), META_SNAP_ERR(ZL_ERR_EXISTS),
		   META_SNAP_ERR(ZL_ERR_INVAL),	    META_SNAP_ERR(ZL_ERR_BUSY),
		   META_SNAP_ERR(ZL_ERR_RANGE),	    META_SNAP_ERR(ZL_ERR_CONFLICT)};
#undef META_SNAP_ERR

	for (size_t i = 0; i < ZL_ARRAY_SIZE(tab); i++)
		if (!strcmp(tab[i].name, name))
			return tab[i].err;
	return -ZL_ERR_ETCD;
}

/* Asks the serving client for the snapshot and waits (bounded) for its
 * answer. 0 with *out, an error of zl_meta_snap_create (the client's),
 * -ZL_ERR_TIMEOUT, or -ZL_ERR_NOT_ATTACHED when the client went away before
 * it answered (the caller then takes the snapshot itself, with the same id,
 * so a snapshot the client did take is found). */
static int meta_snap_ask(struct zl_etcd *e, const char *prefix, const struct zl_volume *v,
			 const char *name, const char *id, uint32_t timeout_ms,
			 struct zl_snapshot *out)
{
	struct zl_snapreq q = {0}, got;
	uint64_t deadline = zl_now_ms() + timeout_ms;
	int rc;

	snprintf(q.vol, sizeof(q.vol), "%s", v->id);
	snprintf(q.id, sizeof(q.id), "%s", id);
	snprintf(q.name, sizeof(q.name), "%s", name);
	snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_PENDING);
	q.requested = zl_wall_sec();
	rc = zl_meta_snapreq_put(e, prefix, &q);
	if (rc)
		return rc;
	for (;;) {
		rc = zl_meta_snapreq_get(e, prefix, v->id, id, &got);
		if (rc)
			break;
		if (!strcmp(got.state, ZL_SNAPREQ_DONE)) {
			rc = zl_meta_snap_lookup(e, prefix, id, out);
			break;
		}
		if (!strcmp(got.state, ZL_SNAPREQ_FAILED)) {
			rc = meta_snap_err_by_name(got.error);
			break;
		}
		if (zl_meta_snapwriter_get(e, prefix, v->id, NULL, 0) == -ZL_ERR_NOT_FOUND) {
			rc = -ZL_ERR_NOT_ATTACHED;
			break;
		}
		if (zl_now_ms() >= deadline) {
			rc = -ZL_ERR_TIMEOUT;
			break;
		}
		usleep(META_SNAP_POLL_MS * 1000u);
	}
	/* Answered or abandoned: a client that has not taken it yet never
	 * will (it takes only pending requests that exist). */
	zl_meta_snapreq_delete(e, prefix, v->id, id);
	return rc;
}

int zl_meta_snap_take(struct zl_etcd *e, const char *prefix, const struct zl_volume *v,
		      const char *name, uint32_t timeout_ms, struct zl_snapshot *out,
		      bool *created, char *writer, size_t writer_len)
{
	char id[ZL_SNAP_ID_LEN + 1], who[128] = "";
	int rc;

	*created = false;
	if (writer && writer_len)
		writer[0] = '\0';
	if (zl_volume_name_check(name))
		return -ZL_ERR_INVAL;
	/* Asked again after a timeout: the snapshot is there already. */
	rc = zl_meta_snap_lookup(e, prefix, name, out);
	if (rc == 0)
		return strcmp(out->vol, v->id) ? -ZL_ERR_EXISTS : 0;
	if (rc != -ZL_ERR_NOT_FOUND)
		return rc;
	zl_meta_snap_id_generate(id);
	/* A client that starts serving between the look and the transaction
	 * makes the transaction fail (-EAGAIN): it is asked then. */
	for (int round = 0; round < META_SNAP_ROUNDS; round++) {
		rc = zl_meta_snapwriter_get(e, prefix, v->id, who, sizeof(who));
		if (rc && rc != -ZL_ERR_NOT_FOUND)
			return rc;
		if (rc == 0) {
			if (writer && writer_len)
				snprintf(writer, writer_len, "%s", who);
			rc = meta_snap_ask(e, prefix, v, name, id, timeout_ms, out);
			if (rc == 0)
				*created = true;
			if (rc != -ZL_ERR_NOT_ATTACHED)
				return rc;
			/* It left: take it here, with the same id. */
			if (writer && writer_len)
				writer[0] = '\0';
		}
		rc = meta_snap_create(e, prefix, v->id, name, id, out, created, NULL, true);
		if (rc != -EAGAIN)
			return rc;
	}
	return -ZL_ERR_CONFLICT;
}
