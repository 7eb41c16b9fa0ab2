/* CSI Identity. These run on the gRPC completion-queue thread and must not
 * block: Probe reports the background thread's etcd check of the last few
 * seconds instead of calling etcd itself. */
#include <errno.h>

#include "ctrl.h"

/* etcd must have answered within this window for Probe to say ready. */
#define PROBE_FRESH_MS 5000

int ctrl_plugin_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp)
{
	Csi__V1__GetPluginInfoResponse *r = (Csi__V1__GetPluginInfoResponse *)resp;

	r->name = CTRL_DRIVER_NAME;
	r->vendor_version = ZL_VERSION_STRING;
	return ZL_GRPC_OK;
}

static Csi__V1__PluginCapability *plugin_cap_service(struct zl_grpc_call *call, int type)
{
	Csi__V1__PluginCapability *p =
	    zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__descriptor);

	if (!p)
		return NULL;
	p->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
	p->service = zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__service__descriptor);
	if (!p->service)
		return NULL;
	p->service->type = type;
	return p;
}

int ctrl_plugin_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp)
{
	Csi__V1__GetPluginCapabilitiesResponse *r = (Csi__V1__GetPluginCapabilitiesResponse *)resp;
	Csi__V1__PluginCapability *exp;

	r->capabilities = zl_grpc_call_alloc(call, 3 * sizeof(*r->capabilities));
	exp = zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__descriptor);
	if (!r->capabilities || !exp)
		return -ENOMEM;
	r->capabilities[0] =
	    plugin_cap_service(call, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE);
	r->capabilities[1] = plugin_cap_service(
	    call, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS);
	exp->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
	exp->volume_expansion =
	    zl_grpc_call_new_msg(call, &csi__v1__plugin_capability__volume_expansion__descriptor);
	if (!r->capabilities[0] || !r->capabilities[1] || !exp->volume_expansion)
		return -ENOMEM;
	exp->volume_expansion->type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
	r->capabilities[2] = exp;
	r->n_capabilities = 3;
	return ZL_GRPC_OK;
}

int ctrl_probe(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
	       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	Csi__V1__ProbeResponse *r = (Csi__V1__ProbeResponse *)resp;
	uint64_t ok = atomic_load(&c->etcd_ok_ms);

	r->ready = zl_grpc_call_new_msg(call, &google__protobuf__bool_value__descriptor);
	if (!r->ready)
		return -ENOMEM;
	r->ready->value = ok && zl_now_ms() - ok <= PROBE_FRESH_MS;
	return ZL_GRPC_OK;
}
