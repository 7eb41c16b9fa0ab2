/* A reader of the Prometheus text exposition format (metrics.h), for the
 * subset every exporter writes: samples with optional labels and an
 * optional timestamp; HELP/TYPE and other comments skipped. Untrusted input
 * (whatever answers on a node's metrics port): bounded, fuzzed
 * (test/fuzz/fuzz_metrics_parse.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "metrics.h"

static bool name_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
	       (!first && c >= '0' && c <= '9');
}

/* A metric or label name at *p (below end) into out. */
static int parse_name(const char **p, const char *end, char *out, size_t n)
{
	size_t i = 0;

	if (*p >= end || !name_char(**p, true))
		return -1;
	while (*p < end && name_char(**p, i == 0)) {
		if (i + 1 >= n)
			return -1;
		out[i++] = *(*p)++;
	}
	out[i] = '\0';
	return 0;
}

/* A quoted label value ("..." with \\, \" and \n escapes) into out. */
static int parse_value(const char **p, const char *end, char *out, size_t n)
{
	size_t i = 0;

	if (*p >= end || **p != '"')
		return -1;
	(*p)++;
	while (*p < end && **p != '"') {
		char c = *(*p)++;

		if (c == '\\') {
			if (*p >= end)
				return -1;
			c = *(*p)++;
			if (c == 'n')
				c = '\n';
			else if (c != '\\' && c != '"')
				return -1;
		}
		if (i + 1 >= n)
			return -1;
		out[i++] = c;
	}
	if (*p >= end)
		return -1;
	(*p)++; /* the closing quote */
	out[i] = '\0';
	return 0;
}

static void skip_blanks(const char **p, const char *end)
{
	while (*p < end && (**p == ' ' || **p == '\t'))
		(*p)++;
}

/* One sample line [p, end) into s. */
static int parse_line(const char *p, const char *end, struct zl_metrics_sample *s)
{
	char num[64];
	size_t k = 0;
	char *stop;

	s->n_labels = 0;
	if (parse_name(&p, end, s->name, sizeof(s->name)))
		return -1;
	if (p < end && *p == '{') {
		p++;
		skip_blanks(&p, end);
		while (p < end && *p != '}') {
			if (s->n_labels == ZL_METRICS_LABELS_MAX)
				return -1;
			if (parse_name(&p, end, s->labels[s->n_labels].name,
				       sizeof(s->labels[0].name)))
				return -1;
			skip_blanks(&p, end);
			if (p >= end || *p++ != '=')
				return -1;
			skip_blanks(&p, end);
			if (parse_value(&p, end, s->labels[s->n_labels].value,
					sizeof(s->labels[0].value)))
				return -1;
			s->n_labels++;
			skip_blanks(&p, end);
			if (p < end && *p == ',') {
				p++;
				skip_blanks(&p, end);
			} else if (p >= end || *p != '}') {
				return -1;
			}
		}
		if (p >= end)
			return -1;
		p++; /* } */
	}
	if (p >= end || (*p != ' ' && *p != '\t'))
		return -1;
	skip_blanks(&p, end);
	while (p < end && *p != ' ' && *p != '\t') {
		if (k + 1 >= sizeof(num))
			return -1;
		num[k++] = *p++;
	}
	if (!k)
		return -1;
	num[k] = '\0';
	errno = 0;
	s->value = strtod(num, &stop);
	if (*stop || (errno && !isinf(s->value)))
		return -1;
	skip_blanks(&p, end);
	if (p < end) { /* a timestamp: integer milliseconds */
		const char *t = p;

		if (*p == '-')
			p++;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		if (p == t || (p - t == 1 && *t == '-'))
			return -1;
		skip_blanks(&p, end);
		if (p < end)
			return -1;
	}
	return 0;
}

int zl_metrics_parse(const char *text, size_t len,
		     int (*cb)(void *arg, const struct zl_metrics_sample *s), void *arg,
		     unsigned *bad_line)
{
	const char *p = text, *end = text + len;
	struct zl_metrics_sample *s = malloc(sizeof(*s));
	unsigned line = 0;
	int rc = 0;

	if (bad_line)
		*bad_line = 0;
	if (!s)
		return -ENOMEM;
	while (p < end && !rc) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
		const char *q = p;

		line++;
		if (e > p && e[-1] == '\r')
			e--;
		skip_blanks(&q, e);
		if (q < e && *q != '#') {
			if (parse_line(q, e, s)) {
				if (bad_line)
					*bad_line = line;
				rc = -ZL_ERR_PROTO;
				break;
			}
			rc = cb(arg, s);
		}
		p = nl ? nl + 1 : end;
	}
	free(s);
	return rc;
}

const char *zl_metrics_sample_label(const struct zl_metrics_sample *s, const char *name)
{
	for (unsigned i = 0; i < s->n_labels; i++)
		if (!strcmp(s->labels[i].name, name))
			return s->labels[i].value;
	return NULL;
}
