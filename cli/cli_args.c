/* zl argument helpers: global flags, value parsing, latency histogram. No
 * I/O, so they are unit-tested (test/unit/cli). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cli_global_value_flags[] = {
    "--etcd", "--etcd-prefix", "--transport", "--log-level", "--io-timeout", "--tls-ca",
    "--tls-server-name", "--busy-poll"};

static const char **cli_global_slot(struct zl_cli_globals *g, size_t i)
{
	switch (i) {
	case 0:
		return &g->etcd;
	case 1:
		return &g->prefix;
	case 2:
		return &g->transport;
	case 3:
		return &g->log_level;
	case 4:
		return &g->io_timeout;
	case 5:
		return &g->tls_ca;
	case 6:
		return &g->tls_server_name;
	default:
		return &g->busy_poll;
	}
}

int zl_cli_globals_parse(int *argc, char **argv, struct zl_cli_globals *g, char *err,
			 size_t err_len)
{
	int i, out = 1;
	bool have_cmd = false, rest = false;

	memset(g, 0, sizeof(*g));
	for (i = 1; i < *argc; i++) {
		char *a = argv[i];
		bool matched = false;

		if (rest) {
			argv[out++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			rest = true;
			argv[out++] = a;
			continue;
		}
		for (size_t k = 0; k < ZL_ARRAY_SIZE(cli_global_value_flags); k++) {
			const char *f = cli_global_value_flags[k];
			size_t fl = strlen(f);

			if (strncmp(a, f, fl) != 0)
				continue;
			if (a[fl] == '=') {
				*cli_global_slot(g, k) = a + fl + 1;
			} else if (a[fl] == 0) {
				if (i + 1 >= *argc) {
					snprintf(err, err_len, "%s needs a value", f);
					return -ZL_ERR_INVAL;
				}
				*cli_global_slot(g, k) = argv[++i];
			} else {
				continue; /* a longer flag with this prefix */
			}
			matched = true;
			break;
		}
		if (matched)
			continue;
		if (strcmp(a, "--version") == 0) {
			g->version = true;
			continue;
		}
		if (strcmp(a, "--legacy-drop") == 0) {
			g->legacy_drop = true;
			continue;
		}
		if (!have_cmd && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
			g->help = true;
			continue;
		}
		if (a[0] != '-')
			have_cmd = true;
		argv[out++] = a;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

int zl_cli_parse_size(const char *s, bool allow_zero, uint64_t *out)
{
	uint64_t v;

	if (!s || zl_parse_size(s, &v))
		return -ZL_ERR_INVAL;
	if (!v && !allow_zero)
		return -ZL_ERR_INVAL;
	*out = v;
	return 0;
}

int zl_cli_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -ZL_ERR_INVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -ZL_ERR_INVAL;
	*out = (uint32_t)v;
	return 0;
}

int zl_cli_nbd_spec_check(const char *s)
{
	const char *colon;
	uint32_t port;

	if (!s || !*s)
		return -ZL_ERR_INVAL;
	if (strncmp(s, "unix:", 5) == 0)
		return s[5] && strlen(s + 5) < 108 ? 0 : -ZL_ERR_INVAL;
	colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -ZL_ERR_INVAL;
	return zl_cli_parse_u32(colon + 1, 0, 65535, &port);
}

/* ---- histogram ---- */

static unsigned hist_index(uint64_t v)
{
	unsigned msb, shift;

	if (v < ZL_HIST_SUB)
		return (unsigned)v;
	msb = 63u - (unsigned)__builtin_clzll(v);
	shift = msb - ZL_HIST_SUB_BITS;
	/* Group (msb - SUB_BITS + 1), linear position within the group. */
	return (shift + 1) * ZL_HIST_SUB + (unsigned)((v >> shift) & (ZL_HIST_SUB - 1));
}

/* Largest value that falls in bucket i. */
static uint64_t hist_upper(unsigned i)
{
	unsigned group = i / ZL_HIST_SUB, pos = i % ZL_HIST_SUB, shift;

	if (group == 0)
		return pos;
	shift = group - 1;
	if (shift + ZL_HIST_SUB_BITS >= 63)
		return UINT64_MAX;
	return (((uint64_t)(ZL_HIST_SUB + pos) + 1) << shift) - 1;
}

void zl_hist_init(struct zl_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

void zl_hist_add(struct zl_hist *h, uint64_t v)
{
	unsigned i = hist_index(v);

	if (i >= ZL_HIST_BUCKETS)
		i = ZL_HIST_BUCKETS - 1;
	h->b[i]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

uint64_t zl_hist_quantile(const struct zl_hist *h, double q)
{
	uint64_t target, seen = 0;
	unsigned i;

	if (!h->count)
		return 0;
	if (q <= 0)
		return h->min;
	if (q >= 1)
		return h->max;
	/* The smallest value with at least q of the samples at or below it. */
	target = (uint64_t)(q * (double)h->count);
	if ((double)target < q * (double)h->count)
		target++;
	if (target < 1)
		target = 1;
	for (i = 0; i < ZL_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= target) {
			uint64_t u = hist_upper(i);

			return u > h->max ? h->max : (u < h->min ? h->min : u);
		}
	}
	return h->max;
}

void zl_hist_merge(struct zl_hist *dst, const struct zl_hist *src)
{
	for (unsigned i = 0; i < ZL_HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}
