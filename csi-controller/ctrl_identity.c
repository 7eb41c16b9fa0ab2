/* CSI Identity. These run on the gRPC completion-queue thread and must not
 * block: Probe reports the background thread's etcd check of the last few
 * seconds instead of calling etcd itself. */
#include <errno.h>

#include "ctrl.h"
#include "lib/grpc/grpc_csi.h"

/* etcd must have answered within this window for Probe to say ready. */

int ctrl_plugin_info(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp)
{
	Csi__V1__GetPluginInfoResponse *r = (Csi__V1__GetPluginInfoResponse *)resp;

	r->name = CTRL_DRIVER_NAME;
	r->vendor_version = ZL_VERSION_STRING;
	return ZL_GRPC_OK;
}

int ctrl_plugin_caps(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
		     ProtobufCMessage *resp)
{
	return zl_grpc_csi_plugin_caps(call, (Csi__V1__GetPluginCapabilitiesResponse *)resp);
}

int ctrl_probe(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
	       ProtobufCMessage *resp)
{
	struct ctrl *c = ctx;
	Csi__V1__ProbeResponse *r = (Csi__V1__ProbeResponse *)resp;

	r->ready = zl_grpc_call_new_msg(call, &google__protobuf__bool_value__descriptor);
	if (!r->ready)
		return -ENOMEM;
	r->ready->value = ctrl_etcd_fresh(c);
	return ZL_GRPC_OK;
}

bool ctrl_etcd_fresh(struct ctrl *c)
{
	uint64_t ok = atomic_load(&c->etcd_ok_ms);

	return ok && zl_now_ms() - ok <= CTRL_ETCD_FRESH_MS;
}
