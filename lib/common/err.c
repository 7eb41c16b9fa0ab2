#include <string.h>

#include "zl_err.h"

const char *zl_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
#define ZL_ERR_MSG(name, val, msg) case val: return msg;
	ZL_ERR_TABLE(ZL_ERR_MSG)
#undef ZL_ERR_MSG
	default:
		return strerror(err);
	}
}

const char *zl_errname(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
#define ZL_ERR_NAME(name, val, msg) case val: return #name;
	ZL_ERR_TABLE(ZL_ERR_NAME)
#undef ZL_ERR_NAME
	case 0:
		return "OK";
	default: {
		const char *n = strerrorname_np(err);

		return n ? n : "EUNKNOWN";
	}
	}
}

int zl_err_from_name(const char *name)
{
	if (!name || !name[0])
		return 0;
#define ZL_ERR_BYNAME(n, val, msg)                                                                 \
	if (strcmp(name, #n) == 0)                                                                 \
		return -(val);
	ZL_ERR_TABLE(ZL_ERR_BYNAME)
#undef ZL_ERR_BYNAME
	for (int e = 1; e < 134; e++) {
		const char *n = strerrorname_np(e);

		if (n && strcmp(n, name) == 0)
			return -e;
	}
	return 0;
}
