/* StorageClass parameters of CreateVolume / GetCapacity. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctrl.h"
#include "lib/wire/wire.h"

#define CSI_RESERVED_PREFIX "csi.storage.k8s.io/"

int ctrl_params_knob(struct zl_grpc_call *call, const char *k, const char *v,
		     struct zl_volume_mod *mod)
{
	int knob = zl_knob_by_param(k);

	if (knob < 0)
		return CTRL_PARAMS_NOT_KNOB;
	if (zl_volume_mod_parse(mod, knob, v))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "parameters[%s]=\"%s\" must be %s",
				    k, v, zl_knob_syntax(knob));
	return ZL_GRPC_OK;
}

static int ctrl_params_frontend_parse(struct zl_grpc_call *call, const char *v,
				      struct ctrl_params *out);

int ctrl_params_parse(struct zl_grpc_call *call, const struct ctrl_kv *const *kv, size_t n,
		      struct ctrl_params *out)
{
	char knobs[512];
	int rc;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		const char *k = kv[i]->key, *v = kv[i]->value;

		rc = ctrl_params_knob(call, k, v, &out->knobs);
		if (rc != CTRL_PARAMS_NOT_KNOB) {
			if (rc)
				return rc;
			continue;
		}
		if (!strncmp(k, CSI_RESERVED_PREFIX, strlen(CSI_RESERVED_PREFIX))) {
			continue; /* the CO's own keys (fstype, secrets, pvc names) */
		} else if (!strcmp(k, "replicas")) {
			char *end;
			long r = strtol(v, &end, 10);

			if (!*v || *end || r < 1 || r > ZL_MAX_REPLICAS)
				return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
						    "parameters[replicas]=\"%s\" must be 1..%d", v,
						    ZL_MAX_REPLICAS);
			out->replicas = (uint32_t)r;
		} else if (!strcmp(k, "chunkSize")) {
			uint64_t cs = 0;

			if (zl_parse_size(v, &cs) || cs < ZL_WIRE_MIN_CHUNK ||
			    cs > ZL_WIRE_MAX_CHUNK || (cs & (cs - 1)))
				return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
						    "parameters[chunkSize]=\"%s\" must be a power of "
						    "two from %uK to %uM (e.g. 4M)",
						    v, ZL_WIRE_MIN_CHUNK >> 10,
						    ZL_WIRE_MAX_CHUNK >> 20);
			out->chunk_size = (uint32_t)cs;
		} else if (!strcmp(k, "transport")) {
			if (strcmp(v, "auto") && strcmp(v, "rdma") && strcmp(v, "tcp"))
				return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
						    "parameters[transport]=\"%s\" must be auto, "
						    "rdma or tcp",
						    v);
			snprintf(out->transport, sizeof(out->transport), "%s", v);
		} else if (!strcmp(k, "flatten")) {
			if (strcmp(v, "true") && strcmp(v, "false"))
				return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
						    "parameters[flatten]=\"%s\" must be true or false",
						    v);
			out->no_flatten = !strcmp(v, "false");
		} else if (!strcmp(k, "frontend")) {
			rc = ctrl_params_frontend_parse(call, v, out);
			if (rc)
				return rc;
		} else {
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
					    "parameters[%s] is not a Zipline parameter (known: "
					    "replicas, chunkSize, transport, frontend, flatten, %s, "
					    CSI_RESERVED_PREFIX
					    "*)",
					    k, zl_knob_names(false, knobs, sizeof(knobs)));
		}
	}
	out->min_size = out->knobs.min_size;
	if (out->min_size && out->min_size > (out->replicas ? out->replicas : 3))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "parameters[minSize]=%u is above the volume's %u replicas: a "
				    "write could never be acknowledged",
				    out->min_size, out->replicas ? out->replicas : 3);
	return ZL_GRPC_OK;
}

static void ctrl_params_str(const struct zl_volume *v, const char *key, const char *dflt,
			    char *out, size_t len);

void ctrl_params_transport(const struct zl_volume *v, char *out, size_t len)
{
	ctrl_params_str(v, "transport", "auto", out, len);
}

/* parameters[frontend]: how the node presents the volume (the node plugin
 * reads it from the volume context; its kernel must offer it). */
static int ctrl_params_frontend_parse(struct zl_grpc_call *call, const char *v,
				      struct ctrl_params *out)
{
	if (strcmp(v, "auto") && strcmp(v, "ublk") && strcmp(v, "nbd") && strcmp(v, "fuse"))
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "parameters[frontend]=\"%s\" must be auto, ublk, nbd or fuse",
				    v);
	snprintf(out->frontend, sizeof(out->frontend), "%s", v);
	return ZL_GRPC_OK;
}

void ctrl_params_frontend(const struct zl_volume *v, char *out, size_t len)
{
	ctrl_params_str(v, "frontend", "", out, len);
}

/* A string of the volume record's params, dflt when absent. */
static void ctrl_params_str(const struct zl_volume *v, const char *key, const char *dflt,
			    char *out, size_t len)
{
	json_t *p = json_loads(v->params, 0, NULL);
	const char *s = p ? json_string_value(json_object_get(p, key)) : NULL;

	snprintf(out, len, "%s", s ? s : dflt);
	json_decref(p);
}
