/* CSI Identity, NodeGetInfo, NodeGetCapabilities, the shared argument
 * helpers, and the method table of zipline-node. */
#include "node.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "csi.pb-c.h"
#include "lib/grpc/grpc_csi.h"
#include "lib/meta/meta.h"

struct node_kv {
	ProtobufCMessage base;
	char *key;
	char *value;
};

const char *node_map_get(void *const *entries, size_t n, const char *key)
{
	/* Every generated map entry is {base, key, value}. */
	for (size_t i = 0; i < n; i++) {
		const struct node_kv *kv = entries[i];

		if (kv && kv->key && strcmp(kv->key, key) == 0)
			return kv->value;
	}
	return NULL;
}

int node_check_vol_id(const char *id)
{
	uint64_t num;

	if (!id || !id[0] || zl_vol_id_parse(id, &num) != 0)
		return -ZL_ERR_INVAL;
	return 0;
}

int node_check_args(struct zl_grpc_call *call, const char *volume_id, const char *field,
		    const char *path)
{
	if (!volume_id[0])
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "volume_id is required");
	if (!path[0])
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "%s is required", field);
	if (node_check_vol_id(volume_id))
		return zl_grpc_fail(call, ZL_GRPC_NOT_FOUND,
				    "volume %.64s does not exist (Zipline ids are vol-<16 hex>)",
				    volume_id);
	return ZL_GRPC_OK;
}

int node_op_begin_call(struct node *n, struct zl_grpc_call *call, const char *volume_id)
{
	if (node_op_begin(n, volume_id))
		return zl_grpc_fail(call, ZL_GRPC_ABORTED,
				    "an operation on volume %s is already in progress", volume_id);
	return ZL_GRPC_OK;
}

int node_rpc_begin(struct node *n, struct zl_grpc_call *call, const char *volume_id,
		   const char *field, const char *path)
{
	int rc = node_check_args(call, volume_id, field, path);

	return rc ? rc : node_op_begin_call(n, call, volume_id);
}

int node_volume_exists(struct node *n, const char *prefix, const char *vol_id, uint64_t *size)
{
	struct zl_volume v;
	int rc;

	if (node_check_vol_id(vol_id))
		return -ZL_ERR_NOT_FOUND;
	memset(&v, 0, sizeof(v));
	rc = zl_meta_volume_get(n->etcd, prefix, vol_id, &v);
	if (rc == 0) {
		if (strcmp(v.state, "deleting") == 0)
			rc = -ZL_ERR_NOT_FOUND;
		if (size)
			*size = v.size;
		zl_volume_fini(&v);
	}
	return rc;
}

int node_cap_parse(const Csi__V1__VolumeCapability *c, struct node_cap *out, char *msg,
		   size_t msglen)
{
	Csi__V1__VolumeCapability__AccessMode__Mode mode;

	memset(out, 0, sizeof(*out));
	if (!c) {
		snprintf(msg, msglen, "volume_capability is required");
		return ZL_GRPC_INVALID_ARGUMENT;
	}
	if (!c->access_mode || c->access_mode->mode == 0) {
		snprintf(msg, msglen, "volume_capability.access_mode is required");
		return ZL_GRPC_INVALID_ARGUMENT;
	}
	mode = c->access_mode->mode;
	out->ro_mode =
	    mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY ||
	    mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
	switch (c->access_type_case) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK:
		out->block = true;
		return 0;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT:
		break;
	default:
		snprintf(msg, msglen, "volume_capability needs an access type: mount or block");
		return ZL_GRPC_INVALID_ARGUMENT;
	}
	if (mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER ||
	    mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER) {
		snprintf(msg, msglen,
			 "access mode %d with a filesystem: ext4 and xfs cannot be "
			 "mounted on several nodes; use volumeMode Block",
			 (int)mode);
		return ZL_GRPC_INVALID_ARGUMENT;
	}
	if (!c->mount || !c->mount->fs_type || !c->mount->fs_type[0])
		snprintf(out->fs_type, sizeof(out->fs_type), "ext4");
	else if (strcmp(c->mount->fs_type, "ext4") == 0 || strcmp(c->mount->fs_type, "xfs") == 0)
		snprintf(out->fs_type, sizeof(out->fs_type), "%s", c->mount->fs_type);
	else {
		snprintf(msg, msglen, "fs_type '%.32s' is not supported: use ext4 or xfs",
			 c->mount->fs_type);
		return ZL_GRPC_INVALID_ARGUMENT;
	}
	for (size_t i = 0; c->mount && i < c->mount->n_mount_flags; i++) {
		const char *f = c->mount->mount_flags[i];
		size_t used = strlen(out->flags);

		if (!f || !f[0])
			continue;
		if (strpbrk(f, " \t\n") || used + strlen(f) + 2 > sizeof(out->flags)) {
			snprintf(msg, msglen,
				 "mount flag '%.64s' is malformed or the flags are too "
				 "long",
				 f);
			return ZL_GRPC_INVALID_ARGUMENT;
		}
		snprintf(out->flags + used, sizeof(out->flags) - used, "%s%s", used ? "," : "", f);
	}
	return 0;
}

static int node_get_plugin_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
				ProtobufCMessage *resp)
{
	Csi__V1__GetPluginInfoResponse *r = (Csi__V1__GetPluginInfoResponse *)resp;

	r->name = (char *)NODE_DRIVER_NAME;
	r->vendor_version = (char *)ZL_VERSION_STRING;
	return ZL_GRPC_OK;
}

/* The same as the controller's: the plugin as a whole (CSI spec). */
static int node_get_plugin_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
				ProtobufCMessage *resp)
{
	return zl_grpc_csi_plugin_caps(call, (Csi__V1__GetPluginCapabilitiesResponse *)resp);
}

static int node_probe(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		      ProtobufCMessage *resp)
{
	Csi__V1__ProbeResponse *r = (Csi__V1__ProbeResponse *)resp;

	/* Serving means ready: etcd is needed per volume, not to answer. */
	r->ready = zl_grpc_call_new_msg(call, &google__protobuf__bool_value__descriptor);
	if (!r->ready)
		return -ENOMEM;
	r->ready->value = 1;
	return ZL_GRPC_OK;
}

static int node_get_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp)
{
	struct node *n = ctx;
	Csi__V1__NodeGetInfoResponse *r = (Csi__V1__NodeGetInfoResponse *)resp;
	Csi__V1__Topology *t;
	Csi__V1__Topology__SegmentsEntry *seg;

	t = zl_grpc_call_new_msg(call, &csi__v1__topology__descriptor);
	seg = zl_grpc_call_new_msg(call, &csi__v1__topology__segments_entry__descriptor);
	if (!t || !seg)
		return -ENOMEM;
	t->segments = zl_grpc_call_alloc(call, sizeof(*t->segments));
	if (!t->segments)
		return -ENOMEM;
	seg->key = (char *)NODE_TOPOLOGY_KEY;
	seg->value = (char *)n->cfg.node_id;
	t->segments[0] = seg;
	t->n_segments = 1;
	r->node_id = (char *)n->cfg.node_id;
	r->accessible_topology = t;
	return ZL_GRPC_OK;
}

static int node_get_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
			 ProtobufCMessage *resp)
{
	static const Csi__V1__NodeServiceCapability__RPC__Type types[] = {
	    CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME,
	    CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS,
	    CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	    CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
	};
	Csi__V1__NodeGetCapabilitiesResponse *r = (Csi__V1__NodeGetCapabilitiesResponse *)resp;

	r->capabilities = zl_grpc_call_alloc(call, ZL_ARRAY_SIZE(types) * sizeof(*r->capabilities));
	if (!r->capabilities)
		return -ENOMEM;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(types); i++) {
		Csi__V1__NodeServiceCapability *c =
		    zl_grpc_call_new_msg(call, &csi__v1__node_service_capability__descriptor);

		if (!c)
			return -ENOMEM;
		c->type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
		c->rpc =
		    zl_grpc_call_new_msg(call, &csi__v1__node_service_capability__rpc__descriptor);
		if (!c->rpc)
			return -ENOMEM;
		c->rpc->type = types[i];
		r->capabilities[i] = c;
	}
	r->n_capabilities = ZL_ARRAY_SIZE(types);
	return ZL_GRPC_OK;
}

#define NODE_M(svc, name, lower, fn, flags)                                                        \
	{                                                                                          \
		"/csi.v1." svc "/" name, &csi__v1__##lower##_request__descriptor,                  \
		    &csi__v1__##lower##_response__descriptor, fn, flags                            \
	}

const struct zl_grpc_method node_methods[] = {
    NODE_M("Identity", "GetPluginInfo", get_plugin_info, node_get_plugin_info,
	   ZL_GRPC_METHOD_INLINE),
    NODE_M("Identity", "GetPluginCapabilities", get_plugin_capabilities, node_get_plugin_caps,
	   ZL_GRPC_METHOD_INLINE),
    NODE_M("Identity", "Probe", probe, node_probe, ZL_GRPC_METHOD_INLINE),
    NODE_M("Node", "NodeGetInfo", node_get_info, node_get_info, ZL_GRPC_METHOD_INLINE),
    NODE_M("Node", "NodeGetCapabilities", node_get_capabilities, node_get_caps,
	   ZL_GRPC_METHOD_INLINE),
    NODE_M("Node", "NodeStageVolume", node_stage_volume, node_stage, 0),
    NODE_M("Node", "NodeUnstageVolume", node_unstage_volume, node_unstage, 0),
    NODE_M("Node", "NodePublishVolume", node_publish_volume, node_publish, 0),
    NODE_M("Node", "NodeUnpublishVolume", node_unpublish_volume, node_unpublish, 0),
    NODE_M("Node", "NodeGetVolumeStats", node_get_volume_stats, node_get_stats, 0),
    NODE_M("Node", "NodeExpandVolume", node_expand_volume, node_expand, 0),
};
const size_t node_n_methods = ZL_ARRAY_SIZE(node_methods);
