/* CSI Controller RPCs that only read: ValidateVolumeCapabilities,
 * ListVolumes, GetCapacity, ControllerGetCapabilities, ControllerGetVolume. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctrl.h"

/* ------------------------------------------------ ValidateVolumeCapabilities */

int ctrl_validate_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ValidateVolumeCapabilitiesRequest *r =
	    (const Csi__V1__ValidateVolumeCapabilitiesRequest *)req;
	Csi__V1__ValidateVolumeCapabilitiesResponse *out =
	    (Csi__V1__ValidateVolumeCapabilitiesResponse *)resp;
	Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed *conf;
	struct zl_volume v;
	struct ctrl_params p;
	char msg[ZL_GRPC_MSG_MAX] = "", val[32];
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc)
		return rc;
	if (!r->n_volume_capabilities)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "volume_capabilities is required");
	for (size_t i = 0; i < r->n_volume_capabilities; i++) {
		const Csi__V1__VolumeCapability *cap = r->volume_capabilities[i];

		if (!cap->access_mode)
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "volume_capabilities[%zu].access_mode is required", i);
		if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET)
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "volume_capabilities[%zu].access_type is required "
					    "(block or mount)",
					    i);
	}
	rc = ctrl_volume_load(c, call, r->volume_id, &v);
	if (rc)
		return rc;

	/* Anything unsupported is an answer, not an error: no confirmed. */
	for (size_t i = 0; i < r->n_volume_capabilities && !msg[0]; i++) {
		const char *sub, *why = ctrl_cap_check(r->volume_capabilities[i], &sub);

		if (why)
			snprintf(msg, sizeof(msg), "volume_capabilities[%zu]%s %s", i, sub, why);
	}
	if (!msg[0] && ctrl_params_parse(call, CTRL_KV(r->parameters), r->n_parameters, &p))
		snprintf(msg, sizeof(msg), "parameters are not valid for Zipline");
	if (!msg[0] && p.replicas && p.replicas != v.replicas)
		snprintf(msg, sizeof(msg), "parameters[replicas]=%u but the volume has %u",
			 p.replicas, v.replicas);
	if (!msg[0] && p.chunk_size && p.chunk_size != v.chunk_size)
		snprintf(msg, sizeof(msg), "parameters[chunkSize] differs from the volume's %u",
			 v.chunk_size);
	for (size_t i = 0; i < r->n_volume_context && !msg[0]; i++) {
		const char *k = r->volume_context[i]->key, *want = r->volume_context[i]->value;

		if (!strcmp(k, "replicas"))
			snprintf(val, sizeof(val), "%u", v.replicas);
		else if (!strcmp(k, "chunkSize"))
			snprintf(val, sizeof(val), "%u", v.chunk_size);
		else if (!strcmp(k, "transport"))
			ctrl_params_transport(&v, val, sizeof(val));
		else
			continue;
		if (strcmp(val, want))
			snprintf(msg, sizeof(msg), "volume_context[%s]=%s but the volume has %s", k,
				 want, val);
	}
	zl_volume_fini(&v);
	if (msg[0]) {
		out->message = zl_grpc_call_strdup(call, msg);
		return out->message ? ZL_GRPC_OK : -ENOMEM;
	}
	conf = zl_grpc_call_new_msg(
	    call, &csi__v1__validate_volume_capabilities_response__confirmed__descriptor);
	if (!conf)
		return -ENOMEM;
	/* Echo what was confirmed; the request outlives the response encoding. */
	conf->n_volume_capabilities = r->n_volume_capabilities;
	conf->volume_capabilities = r->volume_capabilities;
	conf->n_volume_context = r->n_volume_context;
	conf->volume_context =
	    (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__VolumeContextEntry **)
		r->volume_context;
	conf->n_parameters = r->n_parameters;
	conf->parameters =
	    (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__ParametersEntry **)
		r->parameters;
	out->confirmed = conf;
	return ZL_GRPC_OK;
}

/* -------------------------------------------------------------- ListVolumes */

/* Published node of vol_id among the attachment records, or NULL. */
static const char *list_attached(const struct zl_etcd_range *att, const char *akey_prefix,
				 const char *vol_id, struct ctrl_attach *a)
{
	size_t plen = strlen(akey_prefix);

	for (size_t i = 0; i < att->n; i++) {
		const struct zl_etcd_kv *kv = &att->kvs[i];
		json_t *j;

		if (strncmp(kv->key, akey_prefix, plen) || strcmp(kv->key + plen, vol_id))
			continue;
		j = json_loadb(kv->value, kv->value_len, 0, NULL);
		snprintf(a->node, sizeof(a->node), "%s",
			 j && json_string_value(json_object_get(j, "node"))
			     ? json_string_value(json_object_get(j, "node"))
			     : "");
		json_decref(j);
		return a->node[0] ? a->node : NULL;
	}
	return NULL;
}

static char **node_ids_msg(struct zl_grpc_call *call, const char *node, size_t *n)
{
	char **ids;

	*n = 0;
	if (!node)
		return NULL;
	ids = zl_grpc_call_alloc(call, sizeof(*ids));
	if (!ids)
		return NULL;
	ids[0] = zl_grpc_call_strdup(call, node);
	if (ids[0])
		*n = 1;
	return ids;
}

int ctrl_list_volumes(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		      ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ListVolumesRequest *r = (const Csi__V1__ListVolumesRequest *)req;
	Csi__V1__ListVolumesResponse *out = (Csi__V1__ListVolumesResponse *)resp;
	struct zl_etcd_range vols = {0}, att = {0};
	struct zl_node_info *live = NULL;
	size_t n_live = 0, vplen;
	char vprefix[256], aprefix[256], start[300];
	const char *last = NULL;
	uint64_t num;
	int rc;

	if (r->max_entries < 0)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "max_entries=%d must not be negative", r->max_entries);
	/* Tokens are the id of the last volume of the previous page. */
	if (r->starting_token[0] && zl_vol_id_parse(r->starting_token, &num))
		return zl_grpc_fail(call, ZL_GRPC_ABORTED,
				    "starting_token \"%.64s\" was not issued by this plugin: start "
				    "the listing again without a token",
				    r->starting_token);
	zl_meta_key(vprefix, sizeof(vprefix), c->prefix, "volumes", NULL);
	zl_meta_key(aprefix, sizeof(aprefix), c->prefix, "attachments", NULL);
	vplen = strlen(vprefix);
	snprintf(start, sizeof(start), "%s%s", vprefix, r->starting_token);
	rc = zl_etcd_range_prefix(c->etcd, vprefix, r->starting_token[0] ? start : NULL,
				  r->max_entries, &vols);
	if (!rc)
		rc = zl_etcd_range_prefix(c->etcd, aprefix, NULL, 0, &att);
	if (!rc)
		rc = zl_meta_node_list(c->etcd, c->prefix, &live, &n_live);
	if (rc) {
		rc = zl_grpc_fail_err(call, rc, "cannot list volumes in etcd (%s)",
				      zl_etcd_last_error());
		goto out;
	}
	if (vols.n) {
		out->entries = zl_grpc_call_alloc(call, vols.n * sizeof(*out->entries));
		if (!out->entries) {
			rc = -ENOMEM;
			goto out;
		}
	}
	for (size_t i = 0; i < vols.n; i++) {
		Csi__V1__ListVolumesResponse__Entry *e;
		Csi__V1__ListVolumesResponse__VolumeStatus *st;
		struct ctrl_attach a;
		struct zl_volume v = {0};

		last = vols.kvs[i].key + vplen;
		if (zl_meta_volume_from_json(vols.kvs[i].value, vols.kvs[i].value_len, &v)) {
			ZL_LOG_WARN(CTRL_LOG, "ListVolumes: skipping malformed record key=%s",
				    vols.kvs[i].key);
			continue;
		}
		e = zl_grpc_call_new_msg(call, &csi__v1__list_volumes_response__entry__descriptor);
		st = zl_grpc_call_new_msg(
		    call, &csi__v1__list_volumes_response__volume_status__descriptor);
		if (e && st) {
			e->volume = ctrl_volume_msg(call, &v);
			st->published_node_ids =
			    node_ids_msg(call, list_attached(&att, aprefix, v.id, &a),
					 &st->n_published_node_ids);
			st->volume_condition = ctrl_volume_condition(call, &v, live, n_live);
		}
		zl_volume_fini(&v);
		if (!e || !st || !e->volume || !st->volume_condition) {
			rc = -ENOMEM;
			goto out;
		}
		e->status = st;
		out->entries[out->n_entries++] = e;
	}
	if (vols.more && last) {
		out->next_token = zl_grpc_call_strdup(call, last);
		if (!out->next_token)
			rc = -ENOMEM;
	}
out:
	free(live);
	zl_etcd_range_fini(&att);
	zl_etcd_range_fini(&vols);
	return rc;
}

/* -------------------------------------------------------------- GetCapacity */

int ctrl_get_capacity(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		      ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__GetCapacityRequest *r = (const Csi__V1__GetCapacityRequest *)req;
	Csi__V1__GetCapacityResponse *out = (Csi__V1__GetCapacityResponse *)resp;
	struct zl_node_info *live = NULL;
	struct ctrl_params p;
	size_t n_live = 0;
	uint64_t sum = 0, replicas, avail;
	int rc;

	rc = ctrl_caps_validate(call, "volume_capabilities", r->volume_capabilities,
				r->n_volume_capabilities, false);
	if (rc)
		return rc;
	rc = ctrl_params_parse(call, CTRL_KV(r->parameters), r->n_parameters, &p);
	if (rc)
		return rc;
	/* accessible_topology is accepted as is: every node reaches every
	 * storage node, so the capacity is the same from any segment. */
	rc = zl_meta_node_list(c->etcd, c->prefix, &live, &n_live);
	if (rc)
		return zl_grpc_fail_err(call, rc, "cannot list storage nodes in etcd (%s)",
					zl_etcd_last_error());
	replicas = p.replicas ? p.replicas : 3;
	for (size_t i = 0; i < n_live; i++)
		sum += live[i].free;
	free(live);
	/* Every byte is stored `replicas` times on distinct nodes. */
	avail = n_live >= replicas ? sum / replicas : 0;
	avail = ZL_ALIGN_DOWN(ZL_MIN(avail, (uint64_t)INT64_MAX), ZL_BLOCK_SIZE);
	out->available_capacity = (int64_t)avail;
	out->minimum_volume_size = zl_grpc_call_new_msg(call, &google__protobuf__int64_value__descriptor);
	if (!out->minimum_volume_size)
		return -ENOMEM;
	out->minimum_volume_size->value = ZL_BLOCK_SIZE;
	return ZL_GRPC_OK;
}

/* ------------------------------------------------ ControllerGetCapabilities */

static const int ctrl_rpc_caps[] = {
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES_PUBLISHED_NODES,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_READONLY,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS,
    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CLONE_VOLUME,
};

/* Static: the sidecars ask it at start-up, before their own leader election. */
int ctrl_get_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		  ProtobufCMessage *resp)
{
	Csi__V1__ControllerGetCapabilitiesResponse *out =
	    (Csi__V1__ControllerGetCapabilitiesResponse *)resp;
	size_t n = ZL_ARRAY_SIZE(ctrl_rpc_caps);

	out->capabilities = zl_grpc_call_alloc(call, n * sizeof(*out->capabilities));
	if (!out->capabilities)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		Csi__V1__ControllerServiceCapability *cap =
		    zl_grpc_call_new_msg(call, &csi__v1__controller_service_capability__descriptor);

		if (!cap)
			return -ENOMEM;
		cap->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
		cap->rpc = zl_grpc_call_new_msg(
		    call, &csi__v1__controller_service_capability__rpc__descriptor);
		if (!cap->rpc)
			return -ENOMEM;
		cap->rpc->type = ctrl_rpc_caps[i];
		out->capabilities[i] = cap;
	}
	out->n_capabilities = n;
	return ZL_GRPC_OK;
}

/* ------------------------------------------------------ ControllerGetVolume */

int ctrl_get_volume(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		    ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	const Csi__V1__ControllerGetVolumeRequest *r =
	    (const Csi__V1__ControllerGetVolumeRequest *)req;
	Csi__V1__ControllerGetVolumeResponse *out = (Csi__V1__ControllerGetVolumeResponse *)resp;
	Csi__V1__ControllerGetVolumeResponse__VolumeStatus *st;
	struct zl_node_info *live = NULL;
	struct ctrl_attach a;
	struct zl_volume v;
	size_t n_live = 0;
	int rc;

	rc = ctrl_arg_required(call, "volume_id", r->volume_id);
	if (rc)
		return rc;
	rc = ctrl_volume_load(c, call, r->volume_id, &v);
	if (rc)
		return rc;
	rc = ctrl_attach_get(c, v.id, &a);
	if (rc == -ZL_ERR_NOT_FOUND)
		a.node[0] = '\0';
	else if (rc) {
		rc = zl_grpc_fail_err(call, rc, "volume %s: cannot read its attachment (%s)", v.id,
				      zl_etcd_last_error());
		goto out;
	}
	rc = zl_meta_node_list(c->etcd, c->prefix, &live, &n_live);
	if (rc) {
		rc = zl_grpc_fail_err(call, rc, "cannot list storage nodes in etcd (%s)",
				      zl_etcd_last_error());
		goto out;
	}
	st = zl_grpc_call_new_msg(call,
				  &csi__v1__controller_get_volume_response__volume_status__descriptor);
	out->volume = ctrl_volume_msg(call, &v);
	if (!st || !out->volume) {
		rc = -ENOMEM;
		goto out;
	}
	st->published_node_ids =
	    node_ids_msg(call, a.node[0] ? a.node : NULL, &st->n_published_node_ids);
	st->volume_condition = ctrl_volume_condition(call, &v, live, n_live);
	if (!st->volume_condition) {
		rc = -ENOMEM;
		goto out;
	}
	out->status = st;
	rc = ZL_GRPC_OK;
out:
	free(live);
	zl_volume_fini(&v);
	return rc;
}
