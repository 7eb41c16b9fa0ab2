/* CSI snapshots (docs/SNAPSHOTS.md step 5): CreateSnapshot, DeleteSnapshot
 * and ListSnapshots over lib/meta's snapshot records. A snapshot of a
 * volume some client serves is taken through that client (the switch of
 * §3), otherwise by the transaction alone: zl_meta_snap_take, shared with
 * `zl snapshot create`. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"
#include "google/protobuf/timestamp.pb-c.h"

/* How long a snapshot waits for a serving client when the caller set no
 * deadline (the external-snapshotter always sets one: --timeout). */
#define CTRL_SNAP_WAIT_MS 30000u
/* What the call keeps for its answer after the wait. */
#define CTRL_SNAP_MARGIN_MS 2000

uint32_t ctrl_snap_wait_ms(struct zl_grpc_call *call)
{
	int64_t left = zl_grpc_call_deadline_left_ms(call);

	if (left == INT64_MAX)
		return CTRL_SNAP_WAIT_MS;
	return left > CTRL_SNAP_MARGIN_MS ? (uint32_t)(left - CTRL_SNAP_MARGIN_MS) : 1;
}

static Csi__V1__Snapshot *ctrl_snap_msg(struct zl_grpc_call *call, const struct zl_snapshot *s)
{
	Csi__V1__Snapshot *m = zl_grpc_call_new_msg(call, &csi__v1__snapshot__descriptor);
	Google__Protobuf__Timestamp *t =
	    zl_grpc_call_new_msg(call, &google__protobuf__timestamp__descriptor);

	if (!m || !t)
		return NULL;
	m->size_bytes = (int64_t)s->size;
	m->snapshot_id = zl_grpc_call_strdup(call, s->id);
	m->source_volume_id = zl_grpc_call_strdup(call, s->vol);
	if (!m->snapshot_id || !m->source_volume_id)
		return NULL;
	t->seconds = s->created;
	m->creation_time = t;
	m->ready_to_use = !strcmp(s->state, ZL_SNAP_STATE_READY);
	return m;
}

/* Snapshot classes carry no Zipline parameter yet: the CO's own keys
 * (csi.storage.k8s.io/...) pass, anything else is refused by name. */
static int ctrl_snap_params(struct zl_grpc_call *call, const struct ctrl_kv *const *kv, size_t n)
{
	static const char co[] = "csi.storage.k8s.io/";

	for (size_t i = 0; i < n; i++)
		if (strncmp(kv[i]->key, co, sizeof(co) - 1))
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "parameters[%s] is not a Zipline snapshot parameter "
					    "(a VolumeSnapshotClass takes none)",
					    kv[i]->key);
	return ZL_GRPC_OK;
}

static int create_locked(struct ctrl *c, struct zl_grpc_call *call,
			 const Csi__V1__CreateSnapshotRequest *r, Csi__V1__CreateSnapshotResponse *out)
{
	struct zl_volume v = {0};
	struct zl_snapshot s;
	char writer[128];
	uint32_t wait_ms = ctrl_snap_wait_ms(call);
	bool created;
	int rc;

	rc = zl_meta_volume_get(c->etcd, c->prefix, r->source_volume_id, &v);
	if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "source volume %s does not exist",
				    r->source_volume_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "source volume %s: cannot read its record (%s)",
					r->source_volume_id, zl_etcd_last_error());
	rc = zl_meta_snap_take(c->etcd, c->prefix, &v, r->name, wait_ms, &s, &created, writer,
			       sizeof(writer));
	switch (-rc) {
	case 0:
		break;
	case ZL_ERR_EXISTS:
		rc = zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				  "snapshot name %s is taken by a snapshot of another volume than %s",
				  r->name, v.id);
		goto out;
	case ZL_ERR_BUSY:
		rc = zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				  "source volume %s is being deleted", v.id);
		goto out;
	case ZL_ERR_RANGE:
		rc = zl_grpc_fail(call, ZL_GRPC_RESOURCE_EXHAUSTED,
				  "volume %s holds the most snapshots it can (%d): delete some first",
				  v.id, ZL_META_SNAPS_MAX);
		goto out;
	case ZL_ERR_TIMEOUT:
		rc = zl_grpc_fail(call, ZL_GRPC_DEADLINE_EXCEEDED,
				  "client %s serving volume %s did not take snapshot %s in time: "
				  "the call will be retried",
				  writer, v.id, r->name);
		goto out;
	default:
		rc = zl_grpc_fail_err(call, rc, "snapshot %s of volume %s: %s (%s)", r->name, v.id,
				      zl_strerror(rc), zl_etcd_last_error());
		goto out;
	}
	if (created)
		ZL_LOG_INFO(CTRL_LOG, "CreateSnapshot name=%s id=%s vol=%s seq=%u%s%s", s.name, s.id,
			    s.vol, s.seq, writer[0] ? " taken by client " : "", writer);
	out->snapshot = ctrl_snap_msg(call, &s);
	rc = out->snapshot ? ZL_GRPC_OK : -ENOMEM;
out:
	zl_volume_fini(&v);
	return rc;
}

int ctrl_create_snapshot(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__CreateSnapshotRequest *r = (const Csi__V1__CreateSnapshotRequest *)req;
	struct ctrl_oplock lk;
	int rc;

	rc = ctrl_arg_required(call, "name", r->name);
	if (!rc)
		rc = ctrl_arg_required(call, "source_volume_id", r->source_volume_id);
	if (!rc)
		rc = ctrl_snap_params(call, CTRL_KV(r->parameters), r->n_parameters);
	if (rc)
		return rc;
	if (zl_volume_name_check(r->name))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "name \"%.64s\" must be 1 to 253 characters of [A-Za-z0-9._-]",
				    r->name);
	rc = ctrl_op_begin(c, call, "snapname", r->name, &lk);
	if (rc)
		return rc;
	rc = create_locked(c, call, r, (Csi__V1__CreateSnapshotResponse *)resp);
	ctrl_op_end(c, &lk);
	return rc;
}

int ctrl_delete_snapshot(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__DeleteSnapshotRequest *r = (const Csi__V1__DeleteSnapshotRequest *)req;
	struct zl_snapshot s;
	int rc;

	(void)resp;
	rc = ctrl_arg_required(call, "snapshot_id", r->snapshot_id);
	if (rc || zl_meta_snap_id_check(r->snapshot_id))
		return rc; /* not one of ours: nothing to delete */
	rc = zl_meta_snap_delete(c->etcd, c->prefix, r->snapshot_id, &s);
	if (rc == -ZL_ERR_NOT_FOUND)
		return ZL_GRPC_OK;
	if (rc == -ZL_ERR_BUSY) {
		char msg[512] = "", what[300];

		/* In use by clones that still read through it (CSI: "snapshot in
		 * use"); its record is looked up again only for the message. */
		if (zl_meta_snap_lookup(c->etcd, c->prefix, r->snapshot_id, &s) == 0) {
			snprintf(what, sizeof(what), "snapshot %s", r->snapshot_id);
			zl_meta_clone_refusal(c->etcd, c->prefix, s.vol, s.seq, what, msg,
					      sizeof(msg));
		}
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION, "%s",
				    msg[0] ? msg
					   : "snapshot in use by clones that read through it: "
					     "flatten them first (zl volume flatten NAME)");
	}
	if (rc)
		return zl_grpc_fail_err(call, rc, "snapshot %s: cannot delete it (%s)",
					r->snapshot_id, zl_etcd_last_error());
	ZL_LOG_INFO(CTRL_LOG, "DeleteSnapshot id=%s name=%s vol=%s seq=%u", s.id, s.name, s.vol,
		    s.seq);
	return ZL_GRPC_OK;
}

/* Tokens are the decimal index of the next entry in the listing's order
 * (volume, then sequence). */
int ctrl_list_snapshots(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ListSnapshotsRequest *r = (const Csi__V1__ListSnapshotsRequest *)req;
	Csi__V1__ListSnapshotsResponse *out = (Csi__V1__ListSnapshotsResponse *)resp;
	struct zl_snapshot *list = NULL, one;
	size_t n = 0, start = 0, end;
	uint64_t num;
	int rc;

	if (r->max_entries < 0)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "max_entries=%d must not be negative", r->max_entries);
	if (r->starting_token[0]) {
		char *e;
		unsigned long long t = strtoull(r->starting_token, &e, 10);

		if (*e || r->starting_token[0] < '0' || r->starting_token[0] > '9')
			return zl_grpc_fail(call, ZL_GRPC_ABORTED,
					    "starting_token \"%.64s\" was not issued by this plugin: "
					    "start the listing again without a token",
					    r->starting_token);
		start = (size_t)t;
	}
	if (r->snapshot_id[0]) {
		/* One snapshot, if it exists (and is of source_volume_id when
		 * that is given too); an id not of ours names none. */
		if (zl_meta_snap_id_check(r->snapshot_id))
			return ZL_GRPC_OK;
		rc = zl_meta_snap_lookup(c->etcd, c->prefix, r->snapshot_id, &one);
		if (rc == -ZL_ERR_NOT_FOUND)
			return ZL_GRPC_OK;
		if (rc)
			return zl_grpc_fail_err(call, rc, "cannot read snapshot %s (%s)",
						r->snapshot_id, zl_etcd_last_error());
		if (r->source_volume_id[0] && strcmp(one.vol, r->source_volume_id))
			return ZL_GRPC_OK;
		list = malloc(sizeof(*list));
		if (!list)
			return -ENOMEM;
		list[0] = one;
		n = 1;
	} else if (r->source_volume_id[0] && zl_vol_id_parse(r->source_volume_id, &num)) {
		return ZL_GRPC_OK; /* not a volume of ours: it has no snapshots */
	} else {
		rc = zl_meta_snap_list(c->etcd, c->prefix,
				       r->source_volume_id[0] ? r->source_volume_id : NULL, &list,
				       &n);
		if (rc)
			return zl_grpc_fail_err(call, rc, "cannot list snapshots in etcd (%s)",
						zl_etcd_last_error());
	}
	if (start > n) {
		rc = zl_grpc_fail(call, ZL_GRPC_ABORTED,
				  "starting_token \"%.64s\" is past the end of the listing (%zu "
				  "snapshots now): start the listing again without a token",
				  r->starting_token, n);
		goto out;
	}
	end = n;
	if (r->max_entries > 0 && (size_t)r->max_entries < n - start)
		end = start + (size_t)r->max_entries;
	if (end > start) {
		out->entries = zl_grpc_call_alloc(call, (end - start) * sizeof(*out->entries));
		if (!out->entries) {
			rc = -ENOMEM;
			goto out;
		}
	}
	for (size_t i = start; i < end; i++) {
		Csi__V1__ListSnapshotsResponse__Entry *e =
		    zl_grpc_call_new_msg(call, &csi__v1__list_snapshots_response__entry__descriptor);

		if (!e || !(e->snapshot = ctrl_snap_msg(call, &list[i]))) {
			rc = -ENOMEM;
			goto out;
		}
		out->entries[out->n_entries++] = e;
	}
	if (end < n) {
		char tok[24];

		snprintf(tok, sizeof(tok), "%zu", end);
		out->next_token = zl_grpc_call_strdup(call, tok);
		if (!out->next_token) {
			rc = -ENOMEM;
			goto out;
		}
	}
	rc = ZL_GRPC_OK;
out:
	free(list);
	return rc;
}
