/* CSI Controller: CreateVolume, DeleteVolume, ControllerExpandVolume,
 * ControllerModifyVolume and the
 * volume helpers shared with the read-only RPCs (ctrl_query.c) and publish. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctrl.h"
#include "lib/client/client.h"

/* Compare-and-swap rounds of DeleteVolume's mark against concurrent record
 * updates (slice rows by the manager, knobs, a resize). */
#define DELETE_TRIES 8

static Csi__V1__Volume__VolumeContextEntry *ctx_entry(struct zl_grpc_call *call, const char *k,
						      const char *v)
{
	Csi__V1__Volume__VolumeContextEntry *e =
	    zl_grpc_call_new_msg(call, &csi__v1__volume__volume_context_entry__descriptor);

	if (!e)
		return NULL;
	e->key = (char *)k;
	e->value = zl_grpc_call_strdup(call, v);
	return e->value ? e : NULL;
}

Csi__V1__Volume *ctrl_volume_msg(struct zl_grpc_call *call, const struct zl_volume *v)
{
	Csi__V1__Volume *m = zl_grpc_call_new_msg(call, &csi__v1__volume__descriptor);
	char buf[32], transport[16], frontend[8];

	if (!m)
		return NULL;
	m->capacity_bytes = (int64_t)v->size;
	m->volume_id = zl_grpc_call_strdup(call, v->id);
	m->volume_context = zl_grpc_call_alloc(call, 4 * sizeof(*m->volume_context));
	if (!m->volume_id || !m->volume_context)
		return NULL;
	snprintf(buf, sizeof(buf), "%u", v->replicas);
	m->volume_context[0] = ctx_entry(call, "replicas", buf);
	snprintf(buf, sizeof(buf), "%u", v->chunk_size);
	m->volume_context[1] = ctx_entry(call, "chunkSize", buf);
	ctrl_params_transport(v, transport, sizeof(transport));
	m->volume_context[2] = ctx_entry(call, "transport", transport);
	if (!m->volume_context[0] || !m->volume_context[1] || !m->volume_context[2])
		return NULL;
	m->n_volume_context = 3;
	/* The StorageClass's frontend, for the node plugin's NodeStage. */
	ctrl_params_frontend(v, frontend, sizeof(frontend));
	if (frontend[0]) {
		m->volume_context[3] = ctx_entry(call, "frontend", frontend);
		if (!m->volume_context[3])
			return NULL;
		m->n_volume_context = 4;
	}
	return m;
}

Csi__V1__VolumeCondition *ctrl_volume_condition(struct zl_grpc_call *call,
						const struct zl_volume *v,
						const struct zl_node_info *live, size_t n_live)
{
	Csi__V1__VolumeCondition *cond =
	    zl_grpc_call_new_msg(call, &csi__v1__volume_condition__descriptor);
	uint32_t degraded = 0, lost = UINT32_MAX;
	char msg[256];

	if (!cond)
		return NULL;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *sl = &v->slices[s];
		unsigned int up = 0;

		for (unsigned int r = 0; r < sl->n && r < ZL_MAX_REPLICAS; r++) {
			if (!sl->in_sync[r])
				continue;
			for (size_t j = 0; j < n_live; j++)
				if (!strcmp(live[j].id, sl->nodes[r])) {
					up++;
					break;
				}
		}
		if (!up && lost == UINT32_MAX)
			lost = s;
		if (up < v->replicas)
			degraded++;
	}
	if (strcmp(v->state, "ready")) {
		cond->abnormal = 1;
		snprintf(msg, sizeof(msg), "volume is in state %s", v->state);
	} else if (lost != UINT32_MAX) {
		cond->abnormal = 1;
		snprintf(msg, sizeof(msg),
			 "slice %u has no live in-sync replica: its data is unavailable until a "
			 "storage node of its placement comes back",
			 lost);
	} else if (degraded) {
		snprintf(msg, sizeof(msg), "degraded: %u of %u slices have fewer than %u live "
			 "in-sync replicas", degraded, v->n_slices, v->replicas);
	} else {
		snprintf(msg, sizeof(msg), "healthy: every slice has %u live in-sync replicas",
			 v->replicas);
	}
	cond->message = zl_grpc_call_strdup(call, msg);
	return cond->message ? cond : NULL;
}

int ctrl_volume_load(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id,
		     struct zl_volume *out)
{
	uint64_t num;
	int rc;

	memset(out, 0, sizeof(*out));
	if (zl_vol_id_parse(vol_id, &num))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "volume_id %s not found (Zipline ids are vol- and 16 hex digits)",
				    vol_id);
	rc = zl_meta_volume_get(c->etcd, c->prefix, vol_id, out);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume_id %s not found", vol_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot read volume %s from etcd (%s)", vol_id,
					zl_etcd_last_error());
	return ZL_GRPC_OK;
}

/* ------------------------------------------------------------ CreateVolume */

/* Size from capacity_range: ZL_GRPC_OK with *size, or an error recorded. */
static int create_size(struct zl_grpc_call *call, const Csi__V1__CapacityRange *cr,
		       uint64_t *size)
{
	int64_t req = cr ? cr->required_bytes : 0, lim = cr ? cr->limit_bytes : 0;
	uint64_t s;

	if (req < 0 || lim < 0)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "capacity_range: required_bytes=%" PRId64 " and limit_bytes=%" PRId64
				    " must not be negative",
				    req, lim);
	if (lim && req > lim)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: limit_bytes=%" PRId64
				    " is below required_bytes=%" PRId64,
				    lim, req);
	if (req) {
		s = ZL_ALIGN_UP((uint64_t)req, ZL_BLOCK_SIZE);
	} else {
		s = CTRL_DEFAULT_SIZE;
		if (lim && s > (uint64_t)lim)
			s = ZL_ALIGN_DOWN((uint64_t)lim, ZL_BLOCK_SIZE);
	}
	if (!s || (lim && s > (uint64_t)lim))
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: sizes are multiples of 4096 bytes and none "
				    "fits required_bytes=%" PRId64 " limit_bytes=%" PRId64,
				    req, lim);
	if (s > CTRL_MAX_SIZE)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: required_bytes=%" PRId64
				    " is above the largest volume (%llu bytes)",
				    req, CTRL_MAX_SIZE);
	*size = s;
	return ZL_GRPC_OK;
}

static bool topo_has_key(const Csi__V1__Topology *t, const char **value)
{
	for (size_t i = 0; t && i < t->n_segments; i++) {
		if (!strcmp(t->segments[i]->key, CTRL_TOPOLOGY_KEY)) {
			*value = t->segments[i]->value;
			return true;
		}
	}
	return false;
}

/* accessible_topology of a new volume: network storage is reachable from
 * every node, so every requested segment with our key is accessible,
 * preferred ones first; none when the CO gave no requirement. */
static int create_topology(struct zl_grpc_call *call, const Csi__V1__TopologyRequirement *tr,
			   Csi__V1__Volume *m)
{
	Csi__V1__Topology *const *lists[2];
	size_t counts[2], max;
	const char *val;

	if (!tr)
		return ZL_GRPC_OK;
	lists[0] = tr->preferred;
	counts[0] = tr->n_preferred;
	lists[1] = tr->requisite;
	counts[1] = tr->n_requisite;
	max = counts[0] + counts[1];
	if (!max)
		return ZL_GRPC_OK;
	m->accessible_topology = zl_grpc_call_alloc(call, max * sizeof(*m->accessible_topology));
	if (!m->accessible_topology)
		return -ENOMEM;
	for (int l = 0; l < 2; l++) {
		for (size_t i = 0; i < counts[l]; i++) {
			Csi__V1__Topology *t;
			bool dup = false;

			if (!topo_has_key(lists[l][i], &val))
				continue;
			if (ctrl_node_id_check(val))
				return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
						    "accessibility_requirements: %s=\"%s\" is not "
						    "a valid node id",
						    CTRL_TOPOLOGY_KEY, val);
			for (size_t j = 0; j < m->n_accessible_topology && !dup; j++) {
				const char *have = NULL;

				topo_has_key(m->accessible_topology[j], &have);
				dup = have && !strcmp(have, val);
			}
			if (dup)
				continue;
			t = zl_grpc_call_new_msg(call, &csi__v1__topology__descriptor);
			if (!t)
				return -ENOMEM;
			t->segments = zl_grpc_call_alloc(call, sizeof(*t->segments));
			if (!t->segments)
				return -ENOMEM;
			t->segments[0] =
			    zl_grpc_call_new_msg(call, &csi__v1__topology__segments_entry__descriptor);
			if (!t->segments[0])
				return -ENOMEM;
			t->segments[0]->key = CTRL_TOPOLOGY_KEY;
			t->segments[0]->value = zl_grpc_call_strdup(call, val);
			if (!t->segments[0]->value)
				return -ENOMEM;
			t->n_segments = 1;
			m->accessible_topology[m->n_accessible_topology++] = t;
		}
	}
	return ZL_GRPC_OK;
}

/* CreateVolume's content source: a snapshot or a volume to clone. */
struct create_src {
	const char *snap; /* snapshot id, or NULL */
	const char *vol;  /* volume id, or NULL */
};

static int create_clone_of_volume(struct ctrl *c, struct zl_grpc_call *call, const char *name,
				  const struct zl_volume *v)
{
	char internal[64];
	struct zl_snapshot sn;
	int rc;

	snprintf(internal, sizeof(internal), "clone-%s", v->id);
	rc = zl_meta_snap_lookup(c->etcd, c->prefix, internal, &sn);
	if (rc == 0 && (strcmp(sn.vol, v->parent_vol) || sn.seq != v->parent_seq))
		rc = -ZL_ERR_NOT_FOUND;
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "name %s: volume %s of that name is a clone of a snapshot of "
				    "volume %s, not of the volume itself",
				    name, v->id, v->parent_vol);
	if (rc)
		return zl_grpc_fail_err(call, rc, "name %s: cannot read snapshot %s (%s)", name,
					internal, zl_etcd_last_error());
	return ZL_GRPC_OK;
}

/* A clone (docs/SNAPSHOTS.md §4) through zl_meta_clone_create, with the
 * call's deadline (less a margin) for the internal snapshot of a volume
 * source served by a client. ZL_GRPC_OK with *v, or the code recorded. */
static int create_clone(struct ctrl *c, struct zl_grpc_call *call,
			const Csi__V1__CreateVolumeRequest *r, const struct zl_volume_spec *spec,
			const struct create_src *src, struct zl_volume *v, bool *created)
{
	const char *what = src->snap ? "snapshot" : "volume";
	const char *id = src->snap ? src->snap : src->vol;
	uint32_t wait_ms = ctrl_snap_wait_ms(call);
	uint64_t src_size;
	int rc;

	/* The source's size first: a limit below it fails before anything
	 * is created. */
	if (src->snap) {
		struct zl_snapshot sn;

		rc = zl_meta_snap_lookup(c->etcd, c->prefix, src->snap, &sn);
		src_size = sn.size;
	} else {
		struct zl_volume sv;

		rc = zl_meta_volume_get(c->etcd, c->prefix, src->vol, &sv);
		src_size = sv.size;
		if (rc == 0)
			zl_volume_fini(&sv);
	}
	if (rc == -ZL_ERR_NOT_FOUND || rc == -ZL_ERR_INVAL)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "volume_content_source: %s %s does not exist", what, id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume_content_source: cannot read %s %s (%s)",
					what, id, zl_etcd_last_error());
	if (r->capacity_range && r->capacity_range->limit_bytes &&
	    (uint64_t)r->capacity_range->limit_bytes < src_size)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: limit_bytes=%" PRId64 " is below the %" PRIu64
				    " bytes of the source %s %s: a clone is at least as large as "
				    "its source",
				    r->capacity_range->limit_bytes, src_size, what, id);
	rc = zl_meta_clone_create(c->etcd, c->prefix, spec, src->vol, src->snap, wait_ms, v,
				  created);
	switch (-rc) {
	case 0:
		if (*created || src->snap)
			return ZL_GRPC_OK;
		/* An existing clone of the volume is the answer to a retry only
		 * if it reads through its own internal snapshot, not through a
		 * snapshot a user took (a clone of a snapshot: another source). */
		rc = create_clone_of_volume(c, call, r->name, v);
		if (rc)
			zl_volume_fini(v);
		return rc;
	case ZL_ERR_NOT_FOUND:
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume_content_source: %s %s does "
				    "not exist", what, id);
	case ZL_ERR_EXISTS:
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "name %s: a volume of that name exists that is not a clone of "
				    "%s %s with this size, chunkSize and replicas",
				    r->name, what, id);
	case ZL_ERR_RANGE:
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: required_bytes=%" PRIu64 " is below the size of "
				    "the source %s %s: a clone is at least as large as its source",
				    spec->size, what, id);
	case ZL_ERR_BUSY:
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
				    "volume_content_source: %s %s is being deleted", what, id);
	case ZL_ERR_TIMEOUT:
		return zl_grpc_fail(call, ZL_GRPC_DEADLINE_EXCEEDED,
				    "name %s: the client serving source volume %s did not take the "
				    "clone's snapshot in time: the call will be retried",
				    r->name, id);
	case ZL_ERR_NODES:
		return zl_grpc_fail(call, ZL_GRPC_RESOURCE_EXHAUSTED,
				    "name %s: fewer live storage nodes than replicas=%u; start "
				    "more storage nodes or lower the replicas parameter",
				    r->name, spec->replicas ? spec->replicas : 3);
	case ZL_ERR_CONFLICT:
		return zl_grpc_fail(call, ZL_GRPC_ABORTED,
				    "name %s: the source %s %s changed meanwhile: retry", r->name,
				    what, id);
	case ZL_ERR_INVAL:
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "name %s: clone of %s %s refused (see the controller log)",
				    r->name, what, id);
	default:
		return zl_grpc_fail_err(call, rc, "name %s: cannot create the clone of %s %s (%s)",
					r->name, what, id, zl_etcd_last_error());
	}
}

/* The request's content source, echoed in the response (CSI: "MUST be set
 * if the volume was created from a source"). */
static int create_src_msg(struct zl_grpc_call *call, const Csi__V1__VolumeContentSource *in,
			  Csi__V1__Volume *m)
{
	Csi__V1__VolumeContentSource *cs =
	    zl_grpc_call_new_msg(call, &csi__v1__volume_content_source__descriptor);

	if (!cs)
		return -ENOMEM;
	cs->type_case = in->type_case;
	if (in->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT) {
		cs->snapshot = zl_grpc_call_new_msg(
		    call, &csi__v1__volume_content_source__snapshot_source__descriptor);
		if (!cs->snapshot ||
		    !(cs->snapshot->snapshot_id = zl_grpc_call_strdup(call, in->snapshot->snapshot_id)))
			return -ENOMEM;
	} else {
		cs->volume = zl_grpc_call_new_msg(
		    call, &csi__v1__volume_content_source__volume_source__descriptor);
		if (!cs->volume ||
		    !(cs->volume->volume_id = zl_grpc_call_strdup(call, in->volume->volume_id)))
			return -ENOMEM;
	}
	m->content_source = cs;
	return ZL_GRPC_OK;
}

static int create_locked(struct ctrl *c, struct zl_grpc_call *call,
			 const Csi__V1__CreateVolumeRequest *r, const struct zl_volume_spec *spec,
			 const struct create_src *src, const char *transport, const char *frontend,
			 Csi__V1__CreateVolumeResponse *out)
{
	struct zl_volume v = {0};
	char have[16];
	bool created = false;
	int rc;

	if (src->snap || src->vol) {
		rc = create_clone(c, call, r, spec, src, &v, &created);
		if (rc)
			return rc;
		goto check;
	}
	rc = zl_meta_volume_create(c->etcd, c->prefix, spec, &v, &created);
	if (rc == -ZL_ERR_EXISTS)
		return zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				    "name %s: a volume of that name exists with another size, "
				    "chunkSize or replicas",
				    r->name);
	if (rc == -ZL_ERR_NODES)
		return zl_grpc_fail(call, ZL_GRPC_RESOURCE_EXHAUSTED,
				    "name %s: fewer live storage nodes than replicas=%u; start "
				    "more storage nodes or lower the replicas parameter",
				    r->name, spec->replicas ? spec->replicas : 3);
	if (rc == -ZL_ERR_INVAL)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "name %s: volume spec refused (see the controller log)", r->name);
	if (rc)
		return zl_grpc_fail_err(call, rc, "name %s: cannot create the volume record (%s)",
					r->name, zl_etcd_last_error());
	if (!created && v.parent_vol[0]) {
		rc = zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
				  "name %s: volume %s of that name is a clone, and this request "
				  "names no content source",
				  r->name, v.id);
		goto out;
	}
check:
	if (!created) {
		if (strcmp(v.state, "ready")) {
			rc = zl_grpc_fail(call, ZL_GRPC_ABORTED,
					  "name %s: volume %s is in state %s (being deleted); "
					  "retry once the deletion finished",
					  r->name, v.id, v.state);
			goto out;
		}
		ctrl_params_transport(&v, have, sizeof(have));
		if (strcmp(have, transport)) {
			rc = zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
					  "name %s: volume %s exists with transport=%s, not %s",
					  r->name, v.id, have, transport);
			goto out;
		}
		ctrl_params_frontend(&v, have, sizeof(have));
		if (strcmp(have, frontend)) {
			rc = zl_grpc_fail(call, ZL_GRPC_ALREADY_EXISTS,
					  "name %s: volume %s exists with frontend=%s, not %s",
					  r->name, v.id, have[0] ? have : "(none)",
					  frontend[0] ? frontend : "(none)");
			goto out;
		}
	}
	rc = ctrl_secret_ensure(c, v.id);
	if (rc) {
		rc = zl_grpc_fail_err(call, rc, "volume %s: cannot store its secret in etcd (%s)",
				      v.id, zl_etcd_last_error());
		goto out;
	}
	out->volume = ctrl_volume_msg(call, &v);
	if (!out->volume) {
		rc = -ENOMEM;
		goto out;
	}
	if (r->volume_content_source) {
		rc = create_src_msg(call, r->volume_content_source, out->volume);
		if (rc)
			goto out;
	}
	rc = create_topology(call, r->accessibility_requirements, out->volume);
	if (rc == ZL_GRPC_OK)
		ZL_LOG_INFO(CTRL_LOG, "CreateVolume name=%s id=%s size=%" PRIu64 " created=%d",
			    r->name, v.id, v.size, created);
out:
	zl_volume_fini(&v);
	return rc;
}

static int create_src_parse(struct zl_grpc_call *call, const Csi__V1__VolumeContentSource *cs,
			    struct create_src *src)
{
	uint64_t num;

	if (!cs)
		return ZL_GRPC_OK;
	switch (cs->type_case) {
	case CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT:
		if (!cs->snapshot || !cs->snapshot->snapshot_id[0])
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "volume_content_source.snapshot.snapshot_id is "
					    "required");
		/* An id that is not one of ours names no snapshot of ours. */
		if (zl_meta_snap_id_check(cs->snapshot->snapshot_id))
			return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
					    "volume_content_source: snapshot %.64s does not exist",
					    cs->snapshot->snapshot_id);
		src->snap = cs->snapshot->snapshot_id;
		return ZL_GRPC_OK;
	case CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME:
		if (!cs->volume || !cs->volume->volume_id[0])
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "volume_content_source.volume.volume_id is required");
		if (zl_vol_id_parse(cs->volume->volume_id, &num))
			return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
					    "volume_content_source: volume %.64s does not exist",
					    cs->volume->volume_id);
		src->vol = cs->volume->volume_id;
		return ZL_GRPC_OK;
	default:
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "volume_content_source: neither a snapshot nor a volume");
	}
}

int ctrl_create_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__CreateVolumeRequest *r = (const Csi__V1__CreateVolumeRequest *)req;
	struct ctrl_params p;
	struct zl_volume_spec spec = {0};
	const char *transport;
	char params[96];
	struct create_src src = {0};
	struct ctrl_oplock lk;
	uint64_t size = 0;
	int rc;

	rc = ctrl_arg_required(call, "name", r->name);
	if (rc)
		return rc;
	if (zl_volume_name_check(r->name))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "name \"%.128s\" must be 1..253 characters of A-Za-z0-9._-",
				    r->name);
	rc = ctrl_caps_validate(call, "volume_capabilities", r->volume_capabilities,
				r->n_volume_capabilities, true);
	if (rc)
		return rc;
	rc = create_src_parse(call, r->volume_content_source, &src);
	if (rc)
		return rc;
	if (r->n_mutable_parameters)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "mutable_parameters: not supported (no MODIFY_VOLUME)");
	rc = ctrl_params_parse(call, CTRL_KV(r->parameters), r->n_parameters, &p);
	if (rc)
		return rc;
	/* A clone without a size is its source's size (zl_meta_clone_create). */
	if (!src.snap && !src.vol)
		rc = create_size(call, r->capacity_range, &size);
	else if (r->capacity_range && r->capacity_range->required_bytes)
		rc = create_size(call, r->capacity_range, &size);
	else if (r->capacity_range && r->capacity_range->limit_bytes < 0)
		rc = zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				  "capacity_range: limit_bytes must not be negative");
	if (rc)
		return rc;
	transport = p.transport[0] ? p.transport : "auto";
	snprintf(params, sizeof(params), "{\"transport\":\"%s\"%s%s%s%s}", transport,
		 p.frontend[0] ? ",\"frontend\":\"" : "", p.frontend, p.frontend[0] ? "\"" : "",
		 p.no_flatten ? ",\"flatten\":\"false\"" : "");
	spec.name = r->name;
	spec.size = size;
	spec.chunk_size = p.chunk_size;
	spec.replicas = p.replicas;
	spec.min_size = p.min_size;
	memcpy(spec.qos, p.knobs.qos, sizeof(spec.qos));
	spec.io_timeout_s = p.knobs.io_timeout_s;
	spec.params = params;

	rc = ctrl_op_begin(c, call, "name", r->name, &lk);
	if (rc)
		return rc;
	rc = create_locked(c, call, r, &spec, &src, transport, p.frontend,
			   (Csi__V1__CreateVolumeResponse *)resp);
	ctrl_op_end(c, &lk);
	return rc;
}

/* ------------------------------------------------------------ DeleteVolume */

/* Removes every chunk on every storage daemon and the record, through a
 * volume client on a private loop run by this worker thread. */
static int delete_chunks(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id)
{
	struct zl_client *cl = NULL;
	struct zl_loop *loop = NULL;
	const char *what = NULL;
	int rc;

	/* VOLUME_DELETE is an operator request: the cluster token. */
	rc = ctrl_client_create(c, c->etcd, 0, &loop, &cl, &what);
	if (rc && c->cluster_key_file && !strcmp(what, "key"))
		return zl_grpc_fail_err(call, rc, "volume %s: cannot read the cluster key file %s",
					vol_id, c->cluster_key_file);
	if (rc && !strcmp(what, "key"))
		return zl_grpc_fail_err(call, rc,
					"volume %s: cannot read the cluster key %skeys/cluster "
					"(the controller needs read and create access to it)",
					vol_id, c->prefix);
	if (rc && !strcmp(what, "loop"))
		return zl_grpc_fail_err(call, rc, "volume %s: cannot create an event loop", vol_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot create a storage client",
					vol_id);
	rc = zl_client_volume_delete(cl, vol_id);
	if (rc == -ZL_ERR_NOT_FOUND)
		rc = 0;
	if (rc == -ZL_ERR_UNAVAIL)
		rc = zl_grpc_fail(call, ZL_GRPC_UNAVAILABLE,
				  "volume %s: a storage node of its placement is down or failing, "
				  "so its chunks there cannot be removed; the volume stays in "
				  "state deleting: retry when the node is back",
				  vol_id);
	else if (rc)
		rc = zl_grpc_fail_err(call, rc, "volume %s: deleting its chunks failed", vol_id);
	ctrl_client_destroy(loop, cl);
	return rc;
}

/* Marks the volume "deleting" if it is not published, in one transaction
 * (record unchanged, no attachment record), so that a
 * ControllerPublishVolume on another replica either lands first (and this
 * answers FAILED_PRECONDITION) or sees the state and answers NOT_FOUND.
 * ZL_GRPC_OK (also when the record is gone: *gone set) or the code recorded
 * on call. */
static int delete_mark(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id, bool *gone)
{
	char vkey[256], akey[256];
	struct ctrl_attach a;
	struct zl_volume v;
	int rc;

	*gone = false;
	zl_meta_key(vkey, sizeof(vkey), c->prefix, "volumes", vol_id);
	zl_meta_key(akey, sizeof(akey), c->prefix, "attachments", vol_id);
	for (int tries = 0; tries < DELETE_TRIES; tries++) {
		bool ok = false;
		char *json;

		rc = zl_meta_volume_get(c->etcd, c->prefix, vol_id, &v);
		if (rc == -ZL_ERR_NOT_FOUND) {
			*gone = true;
			return ZL_GRPC_OK;
		}
		if (rc)
			return zl_grpc_fail_err(call, rc, "volume %s: cannot read its record (%s)",
						vol_id, zl_etcd_last_error());
		rc = ctrl_attach_get(c, vol_id, &a);
		if (rc == 0) {
			zl_volume_fini(&v);
			return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
					    "volume %s is published to node %s: "
					    "ControllerUnpublishVolume it first",
					    vol_id, a.node);
		}
		if (rc != -ZL_ERR_NOT_FOUND) {
			zl_volume_fini(&v);
			return zl_grpc_fail_err(call, rc,
						"volume %s: cannot read its attachment (%s)", vol_id,
						zl_etcd_last_error());
		}
		if (!strcmp(v.state, "deleting")) {
			zl_volume_fini(&v);
			return ZL_GRPC_OK; /* an interrupted delete: go on */
		}
		/* Its snapshots' data are its chunks (docs/SNAPSHOTS.md §2); the
		 * compare on mod_revision below catches one taken after this. */
		if (v.n_snaps) {
			uint32_t n = v.n_snaps;
			char msg[512] = "", what[64];

			/* A clone's internal snapshot: name the clones. */
			zl_volume_fini(&v);
			snprintf(what, sizeof(what), "volume %s", vol_id);
			if (zl_meta_clone_refusal(c->etcd, c->prefix, vol_id, 0, what, msg,
						  sizeof(msg)) == -ZL_ERR_BUSY)
				return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION, "%s", msg);
			return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION,
					    "volume %s has %u snapshot%s: DeleteSnapshot them first",
					    vol_id, n, n == 1 ? "" : "s");
		}
		snprintf(v.state, sizeof(v.state), "deleting");
		json = zl_meta_volume_to_json(&v);
		const struct zl_etcd_cmp cmps[2] = {
		    {.key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v.mod_rev},
		    {.key = akey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
		};
		zl_volume_fini(&v);
		if (!json)
			return -ENOMEM;
		const struct zl_etcd_op put = {
		    .kind = ZL_ETCD_OP_PUT, .key = vkey, .value = json, .value_len = strlen(json)};
		rc = zl_etcd_txn(c->etcd, cmps, 2, &put, 1, NULL, 0, &ok, NULL);
		free(json);
		if (rc)
			return zl_grpc_fail_err(call, rc, "volume %s: cannot mark it deleting (%s)",
						vol_id, zl_etcd_last_error());
		if (ok)
			return ZL_GRPC_OK;
	}
	return zl_grpc_fail(call, ZL_GRPC_ABORTED,
			    "volume %s: its record kept changing while marking it deleting; retry",
			    vol_id);
}

static int delete_locked(struct ctrl *c, struct zl_grpc_call *call, const char *vol_id)
{
	bool gone;
	int rc;

	rc = delete_mark(c, call, vol_id, &gone);
	if (rc)
		return rc;
	if (!gone) {
		rc = delete_chunks(c, call, vol_id);
		if (rc)
			return rc;
	}
	/* Also when the record is gone already: finish an interrupted delete. */
	rc = ctrl_secret_delete(c, vol_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot delete its secret (%s)",
					vol_id, zl_etcd_last_error());
	ZL_LOG_INFO(CTRL_LOG, "DeleteVolume id=%s done", vol_id);
	return ZL_GRPC_OK;
}

int ctrl_delete_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__DeleteVolumeRequest *r = (const Csi__V1__DeleteVolumeRequest *)req;
	struct ctrl_oplock lk;
	uint64_t num;
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc || zl_vol_id_parse(r->volume_id, &num))
		return rc; /* not one of ours: nothing to delete */
	rc = ctrl_op_begin(c, call, "vol", r->volume_id, &lk);
	if (rc)
		return rc;
	rc = delete_locked(c, call, r->volume_id);
	ctrl_op_end(c, &lk);
	return rc;
}

/* --------------------------------------------------- ControllerExpandVolume */

/* The record edit is zl_meta_volume_modify's (ZL_VMOD_SIZE: a
 * compare-and-swap retried on a concurrent change), shared with zl volume
 * resize. */
static int expand_locked(struct ctrl *c, struct zl_grpc_call *call,
			 const Csi__V1__ControllerExpandVolumeRequest *r, uint64_t want,
			 Csi__V1__ControllerExpandVolumeResponse *out)
{
	const struct zl_volume_mod mod = {.mask = ZL_VMOD_SIZE | ZL_VMOD_BY_ID, .size = want};
	struct zl_volume was, now;
	uint64_t num;
	int rc;

	if (zl_vol_id_parse(r->volume_id, &num))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "volume_id %s not found (Zipline ids are vol- and 16 hex digits)",
				    r->volume_id);
	rc = zl_meta_volume_modify(c->etcd, c->prefix, r->volume_id, &mod, &was, &now);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume_id %s not found",
				    r->volume_id);
	/* Already at least as large (grown by zl volume resize, or a retry):
	 * OK with its size (CSI), unless that is above limit_bytes. */
	if (rc == -ZL_ERR_RANGE && r->capacity_range->limit_bytes &&
	    was.size > (uint64_t)r->capacity_range->limit_bytes)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range.limit_bytes=%" PRId64
				    " is below the current size %" PRIu64
				    " of volume %s: volumes cannot shrink",
				    r->capacity_range->limit_bytes, was.size, was.id);
	if (rc == -ZL_ERR_RANGE) {
		now = was;
		rc = 0;
	}
	if (rc == -ZL_ERR_BUSY)
		return zl_grpc_fail(call, ZL_GRPC_FAILED_PRECONDITION, "volume %s is in state %s",
				    was.id, was.state);
	if (rc && !was.id[0])
		return zl_grpc_fail_err(call, rc, "cannot read volume %s from etcd (%s)",
					r->volume_id, zl_etcd_last_error());
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot write the new size (%s)",
					r->volume_id, zl_etcd_last_error());
	if (was.size != now.size)
		ZL_LOG_INFO(CTRL_LOG, "ControllerExpandVolume id=%s size=%" PRIu64 "->%" PRIu64,
			    now.id, was.size, now.size);
	out->capacity_bytes = (int64_t)now.size;
	/* Block volumes have nothing to grow on the node; a filesystem does. */
	out->node_expansion_required =
	    !(r->volume_capability &&
	      r->volume_capability->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK);
	return ZL_GRPC_OK;
}

int ctrl_expand_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ControllerExpandVolumeRequest *r =
	    (const Csi__V1__ControllerExpandVolumeRequest *)req;
	const Csi__V1__CapacityRange *cr = r->capacity_range;
	struct ctrl_oplock lk;
	uint64_t want;
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc)
		return rc;
	if (!cr || (!cr->required_bytes && !cr->limit_bytes))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "capacity_range is required (required_bytes or limit_bytes)");
	if (cr->required_bytes < 0 || cr->limit_bytes < 0)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "capacity_range: required_bytes and limit_bytes must not be "
				    "negative");
	if (cr->limit_bytes && cr->required_bytes > cr->limit_bytes)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: limit_bytes=%" PRId64
				    " is below required_bytes=%" PRId64,
				    cr->limit_bytes, cr->required_bytes);
	if (r->volume_capability) {
		rc = ctrl_caps_validate(call, "volume_capability", &r->volume_capability, 1, true);
		if (rc)
			return rc;
	}
	want = ZL_ALIGN_UP((uint64_t)(cr->required_bytes ? cr->required_bytes : cr->limit_bytes),
			   ZL_BLOCK_SIZE);
	if (cr->limit_bytes && want > (uint64_t)cr->limit_bytes)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range: no multiple of 4096 bytes fits below "
				    "limit_bytes=%" PRId64,
				    cr->limit_bytes);
	if (want > CTRL_MAX_SIZE)
		return zl_grpc_fail(call, ZL_GRPC_OUT_OF_RANGE,
				    "capacity_range.required_bytes is above the largest volume "
				    "(%llu bytes)",
				    CTRL_MAX_SIZE);
	rc = ctrl_op_begin(c, call, "vol", r->volume_id, &lk);
	if (rc)
		return rc;
	rc = expand_locked(c, call, r, want, (Csi__V1__ControllerExpandVolumeResponse *)resp);
	ctrl_op_end(c, &lk);
	return rc;
}

/* --------------------------------------------------- ControllerModifyVolume */

/* mutable_parameters (a VolumeAttributesClass) on an existing volume: the
 * knobs of ctrl_params_knob (limits, ioTimeout, minSize), written with
 * zl_meta_volume_modify; open clients apply the limits and io_timeout from
 * their watch of the record, the storage daemons min_size from theirs. Any
 * other key (the volume's shape: replicas, chunkSize, transport; unknown
 * ones) is INVALID_ARGUMENT and nothing changes. */
int ctrl_modify_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ControllerModifyVolumeRequest *r =
	    (const Csi__V1__ControllerModifyVolumeRequest *)req;
	const struct ctrl_kv *const *kv = CTRL_KV(r->mutable_parameters);
	struct zl_volume_mod mod = {0};
	struct zl_volume was = {0}, now = {0};
	struct ctrl_oplock lk;
	char knobs[512];
	uint64_t num;
	int rc;

	(void)resp;
	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc)
		return rc;
	if (!r->n_mutable_parameters)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "mutable_parameters is required (the knobs to change: %s)",
				    zl_knob_names(false, knobs, sizeof(knobs)));
	for (size_t i = 0; i < r->n_mutable_parameters; i++) {
		rc = ctrl_params_knob(call, kv[i]->key, kv[i]->value, &mod);
		if (rc == CTRL_PARAMS_NOT_KNOB)
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "mutable_parameters[%s] cannot be changed on an existing "
					    "volume (what can: %s)",
					    kv[i]->key, zl_knob_names(false, knobs, sizeof(knobs)));
		if (rc)
			return rc;
	}
	if (zl_vol_id_parse(r->volume_id, &num))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "volume_id %s not found (Zipline ids are vol- and 16 hex digits)",
				    r->volume_id);
	rc = ctrl_op_begin(c, call, "vol", r->volume_id, &lk);
	if (rc)
		return rc;
	mod.mask |= ZL_VMOD_BY_ID; /* never a volume named like this id */
	rc = zl_meta_volume_modify(c->etcd, c->prefix, r->volume_id, &mod, &was, &now);
	ctrl_op_end(c, &lk);
	if (rc == -ZL_ERR_NOT_FOUND)
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND, "volume_id %s not found",
				    r->volume_id);
	if (rc == -ZL_ERR_INVAL)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "mutable_parameters[minSize]=%u is above the %u replicas of "
				    "volume %s: a write could never be acknowledged",
				    mod.min_size, was.replicas, r->volume_id);
	if (rc)
		return zl_grpc_fail_err(call, rc, "volume %s: cannot write the new parameters (%s)",
					r->volume_id, zl_etcd_last_error());
	ZL_LOG_INFO(CTRL_LOG,
		    "ControllerModifyVolume id=%s min_size=%u->%u io_timeout=%u->%u "
		    "read_iops=%" PRIu64 "->%" PRIu64 " write_iops=%" PRIu64 "->%" PRIu64
		    " read_bps=%" PRIu64 "->%" PRIu64 " write_bps=%" PRIu64 "->%" PRIu64,
		    now.id, zl_volume_min_size(&was), zl_volume_min_size(&now), was.io_timeout_s,
		    now.io_timeout_s, was.qos[ZL_QOS_READ_IOPS], now.qos[ZL_QOS_READ_IOPS],
		    was.qos[ZL_QOS_WRITE_IOPS], now.qos[ZL_QOS_WRITE_IOPS], was.qos[ZL_QOS_READ_BPS],
		    now.qos[ZL_QOS_READ_BPS], was.qos[ZL_QOS_WRITE_BPS], now.qos[ZL_QOS_WRITE_BPS]);
	return ZL_GRPC_OK;
}
