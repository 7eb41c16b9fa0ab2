/* The volume knobs users set by name (StorageClass parameters, ModifyVolume,
 * zl volume create/set): one table of names and one parser, so the CSI
 * controller and the CLI accept the same values. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

const struct zl_qos_key zl_qos_keys[ZL_QOS_N] = {
#define ZL_QOS_ENTRY(e, j, p, f, b) [ZL_QOS_##e] = {.json = j, .param = p, .flag = f, .bytes = b},
    ZL_QOS_KEYS(ZL_QOS_ENTRY)
#undef ZL_QOS_ENTRY
};

enum knob_unit { KNOB_IOS, KNOB_BYTES, KNOB_COPIES, KNOB_SECONDS };

struct knob {
	const char *param, *flag;
	enum knob_unit unit;
	uint32_t mask; /* ZL_VMOD_* bits it sets */
	uint64_t min, max;
};

/* The four after the limits set a read and a write entry together. */
static const struct knob knob_extra[ZL_KNOB_N - ZL_QOS_N] = {
    [ZL_KNOB_IOPS - ZL_QOS_N] = {"iops", "iops", KNOB_IOS,
				 ZL_VMOD_QOS(ZL_QOS_READ_IOPS) | ZL_VMOD_QOS(ZL_QOS_WRITE_IOPS), 0,
				 ZL_QOS_MAX},
    [ZL_KNOB_BPS - ZL_QOS_N] = {"bps", "bps", KNOB_BYTES,
				ZL_VMOD_QOS(ZL_QOS_READ_BPS) | ZL_VMOD_QOS(ZL_QOS_WRITE_BPS), 0,
				ZL_QOS_MAX},
    [ZL_KNOB_IOPS_BURST -
	ZL_QOS_N] = {"iopsBurst", "burst-iops", KNOB_IOS,
		     ZL_VMOD_QOS(ZL_QOS_READ_IOPS_BURST) | ZL_VMOD_QOS(ZL_QOS_WRITE_IOPS_BURST), 0,
		     ZL_QOS_MAX},
    [ZL_KNOB_BPS_BURST -
	ZL_QOS_N] = {"bpsBurst", "burst-bps", KNOB_BYTES,
		     ZL_VMOD_QOS(ZL_QOS_READ_BPS_BURST) | ZL_VMOD_QOS(ZL_QOS_WRITE_BPS_BURST), 0,
		     ZL_QOS_MAX},
    [ZL_KNOB_MIN_SIZE -
	ZL_QOS_N] = {"minSize", "min-size", KNOB_COPIES, ZL_VMOD_MIN_SIZE, 1, ZL_MAX_REPLICAS},
    [ZL_KNOB_IO_TIMEOUT - ZL_QOS_N] = {"ioTimeout", "io-timeout", KNOB_SECONDS, ZL_VMOD_IO_TIMEOUT,
				       0, ZL_META_IO_TIMEOUT_MAX},
};

/* Entry of knob k (0 <= k < ZL_KNOB_N), the limits' made from zl_qos_keys. */
static struct knob knob_get(int k)
{
	if (k >= ZL_QOS_N)
		return knob_extra[k - ZL_QOS_N];
	return (struct knob){zl_qos_keys[k].param,
			     zl_qos_keys[k].flag,
			     zl_qos_keys[k].bytes ? KNOB_BYTES : KNOB_IOS,
			     ZL_VMOD_QOS(k),
			     0,
			     ZL_QOS_MAX};
}

int zl_knob_by_param(const char *param)
{
	for (int k = 0; param && k < ZL_KNOB_N; k++)
		if (!strcmp(knob_get(k).param, param))
			return k;
	return -1;
}

int zl_knob_by_flag(const char *flag)
{
	for (int k = 0; flag && k < ZL_KNOB_N; k++)
		if (!strcmp(knob_get(k).flag, flag))
			return k;
	return -1;
}

const char *zl_knob_param(int knob)
{
	return knob >= 0 && knob < ZL_KNOB_N ? knob_get(knob).param : "?";
}

const char *zl_knob_flag(int knob)
{
	return knob >= 0 && knob < ZL_KNOB_N ? knob_get(knob).flag : "?";
}

const char *zl_knob_syntax(int knob)
{
	bool burst = (knob >= ZL_QOS_RATES && knob < ZL_QOS_N) || knob == ZL_KNOB_IOPS_BURST ||
		     knob == ZL_KNOB_BPS_BURST;

	if (knob < 0 || knob >= ZL_KNOB_N)
		return "?";
	switch (knob_get(knob).unit) {
	case KNOB_IOS:
		return burst ? "an integer number of I/Os, 0 = a tenth of a second of the rate"
			     : "an integer number of I/Os per second, 0 = unlimited";
	case KNOB_BYTES:
		return burst ? "a number of bytes (K/M/G suffixes), 0 = a tenth of a second of "
			       "the rate"
			     : "bytes per second (K/M/G suffixes, e.g. 100M), 0 = unlimited";
	case KNOB_COPIES:
		return "1 to 3 (in-sync copies a write needs, at most the replicas)";
	case KNOB_SECONDS:
		return "seconds a client I/O waits for an in-sync primary, 1 to 604800, 0 = "
		       "the client's own (600 by default)";
	}
	return "?";
}

int zl_volume_mod_parse(struct zl_volume_mod *mod, int knob, const char *value)
{
	struct knob kn;
	uint64_t x;

	if (knob < 0 || knob >= ZL_KNOB_N || !value || !isdigit((unsigned char)value[0]))
		return -ZL_ERR_INVAL;
	kn = knob_get(knob);
	if (kn.unit == KNOB_BYTES) {
		if (zl_parse_size(value, &x))
			return -ZL_ERR_INVAL;
	} else {
		char *end;

		errno = 0;
		x = strtoull(value, &end, 10);
		if (errno || *end)
			return -ZL_ERR_INVAL;
	}
	if (x < kn.min || x > kn.max)
		return -ZL_ERR_INVAL;
	mod->mask |= kn.mask;
	if (kn.mask & ZL_VMOD_MIN_SIZE)
		mod->min_size = (uint32_t)x;
	if (kn.mask & ZL_VMOD_IO_TIMEOUT)
		mod->io_timeout_s = (uint32_t)x;
	for (int k = 0; k < ZL_QOS_N; k++)
		if (kn.mask & ZL_VMOD_QOS(k))
			mod->qos[k] = x;
	return 0;
}

char *zl_knob_names(bool flags, char *out, size_t len)
{
	size_t used = 0;

	if (!len)
		return out;
	out[0] = '\0';
	for (int k = 0; k < ZL_KNOB_N && used < len; k++) {
		int n = snprintf(out + used, len - used, "%s%s%s", k ? ", " : "", flags ? "--" : "",
				 flags ? zl_knob_flag(k) : zl_knob_param(k));

		if (n < 0)
			break;
		used += (size_t)n;
	}
	return out;
}
