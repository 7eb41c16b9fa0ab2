/* libFuzzer target for lib/metrics' reader of the Prometheus text format
 * (zl_metrics_parse): `zl top` parses whatever answers on a node's metrics
 * port. Properties checked besides "no crash / no sanitizer report": every
 * sample handed out has a name of the allowed characters within its
 * limits, at most ZL_METRICS_LABELS_MAX labels, terminated strings; a
 * failure names a line that exists; and a sample re-rendered with
 * lib/metrics' writer parses back to the same name, labels and value. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/metrics/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int again_cb(void *arg, const struct zl_metrics_sample *s)
{
	const struct zl_metrics_sample *want = arg;

	if (strcmp(s->name, want->name) || s->n_labels != want->n_labels)
		abort();
	for (unsigned i = 0; i < s->n_labels; i++)
		if (strcmp(s->labels[i].name, want->labels[i].name) ||
		    strcmp(s->labels[i].value, want->labels[i].value))
			abort();
	if (!(s->value == want->value || (isnan(s->value) && isnan(want->value))))
		abort();
	return 0;
}

static int sample_cb(void *arg, const struct zl_metrics_sample *s)
{
	struct zl_metrics_text t = {0};
	char lab[ZL_METRICS_LABELS_MAX * (ZL_METRICS_NAME_MAX + 2 * ZL_METRICS_LABEL_MAX + 4)];
	size_t o = 0;
	unsigned bad;

	(void)arg;
	lab[0] = '\0';
	if (!s->name[0] || strlen(s->name) >= ZL_METRICS_NAME_MAX ||
	    s->n_labels > ZL_METRICS_LABELS_MAX)
		abort();
	for (unsigned i = 0; i < s->n_labels; i++) {
		char esc[2 * ZL_METRICS_LABEL_MAX];

		if (strlen(s->labels[i].name) >= ZL_METRICS_NAME_MAX ||
		    strlen(s->labels[i].value) >= ZL_METRICS_LABEL_MAX)
			abort();
		zl_metrics_label_escape(s->labels[i].value, esc, sizeof(esc));
		o += (size_t)snprintf(lab + o, sizeof(lab) - o, "%s%s=\"%s\"", i ? "," : "",
				      s->labels[i].name, esc);
	}
	if (isnan(s->value) || isinf(s->value))
		return 0; /* the writer prints these its own way */
	zl_metrics_f64(&t, s->name, lab, s->value);
	if (t.oom)
		abort();
	/* %.9g rounds: compare with what the writer's text says. */
	{
		struct zl_metrics_sample want = *s;
		char *sp = strrchr(t.buf, ' ');

		want.value = strtod(sp + 1, NULL);
		if (zl_metrics_parse(t.buf, t.len, again_cb, &want, &bad))
			abort();
	}
	free(t.buf);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned bad = 0, lines = 1;
	int rc = zl_metrics_parse((const char *)data, size, sample_cb, NULL, &bad);

	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	if (rc && (bad < 1 || bad > lines))
		abort();
	if (!rc && bad)
		abort();
	return 0;
}
