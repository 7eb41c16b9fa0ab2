/* CSI answers that zipline-controller and zipline-node give alike, because
 * the CSI spec says they describe the plugin as a whole. */
#ifndef ZL_GRPC_CSI_H
#define ZL_GRPC_CSI_H

#include "csi.pb-c.h"
#include "lib/grpc/grpc_server.h"

/* Fills r with the plugin's capabilities: the controller service, volume
 * accessibility constraints (topology) and online volume expansion; the
 * messages live in call's arena. ZL_GRPC_OK or -ENOMEM. */
int zl_grpc_csi_plugin_caps(struct zl_grpc_call *call, Csi__V1__GetPluginCapabilitiesResponse *r);

#endif
