/* Volume capabilities Zipline supports: block or mount (ext4/xfs) access,
 * on one node at a time for writers (one attachment record per volume, fenced
 * by its epoch), or read-only. */
#include <string.h>

#include "ctrl.h"

int ctrl_arg_required(struct zl_grpc_call *call, const char *field, const char *value)
{
	if (value && value[0])
		return ZL_GRPC_OK;
	return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "%s is required", field);
}

const char *ctrl_cap_check(const Csi__V1__VolumeCapability *cap, const char **field)
{
	const char *fs;

	*field = "";
	if (!cap) {
		return "is empty";
	}
	if (!cap->access_mode) {
		*field = ".access_mode";
		return "is required";
	}
	if (cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK &&
	    cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT) {
		*field = ".access_type";
		return "is required (block or mount)";
	}
	*field = ".access_mode.mode";
	switch (cap->access_mode->mode) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
		break;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__UNKNOWN:
		return "is UNKNOWN: set an access mode";
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
		if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
			return "MULTI_NODE_MULTI_WRITER is not supported for mount access: a "
			       "block filesystem cannot be mounted read-write on several nodes";
		return "MULTI_NODE_MULTI_WRITER is not supported: a volume has one writer "
		       "node at a time";
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER:
		return "MULTI_NODE_SINGLE_WRITER is not supported: a volume is attached to "
		       "one node at a time (use SINGLE_NODE_WRITER or MULTI_NODE_READER_ONLY)";
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
		return "SINGLE_NODE_SINGLE_WRITER/SINGLE_NODE_MULTI_WRITER need the "
		       "SINGLE_NODE_MULTI_WRITER capability, which this plugin does not offer";
	default:
		return "is not a known access mode";
	}
	if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT) {
		if (!cap->mount) {
			*field = ".mount";
			return "is empty";
		}
		fs = cap->mount->fs_type;
		if (fs && *fs && strcmp(fs, "ext4") && strcmp(fs, "xfs")) {
			*field = ".mount.fs_type";
			return "is not supported (ext4 or xfs)";
		}
	}
	*field = "";
	return NULL;
}

int ctrl_caps_validate(struct zl_grpc_call *call, const char *field,
		       Csi__V1__VolumeCapability *const *caps, size_t n, bool required)
{
	const char *why, *sub;

	if (!n && required)
		return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT,
				    "%s is required: give at least one volume capability", field);
	for (size_t i = 0; i < n; i++) {
		why = ctrl_cap_check(caps[i], &sub);
		if (why && !strcmp(field, "volume_capability")) /* a single one */
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "%s%s %s", field, sub,
					    why);
		if (why)
			return zl_grpc_fail(call, ZL_GRPC_INVALID_ARGUMENT, "%s[%zu]%s %s", field,
					    i, sub, why);
	}
	return ZL_GRPC_OK;
}
