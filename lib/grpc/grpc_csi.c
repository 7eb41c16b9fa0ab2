/* CSI answers shared by both CSI daemons (grpc_csi.h). */
#include <errno.h>

#include "grpc_csi.h"

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

int zl_grpc_csi_plugin_caps(struct zl_grpc_call *call, Csi__V1__GetPluginCapabilitiesResponse *r)
{
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
