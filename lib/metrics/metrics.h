/* Metrics and health probes of a daemon over HTTP: GET /metrics (the
 * Prometheus text exposition format 0.0.4), /healthz (alive) and /readyz
 * (ready to serve), served by libmicrohttpd on a thread of its own, so a
 * scrape never runs on an I/O thread. The daemon renders its figures from a
 * snapshot its I/O loop refreshes (no lock or atomic per I/O). */
#ifndef ZL_METRICS_H
#define ZL_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The text of one scrape, grown as needed (HTTP thread only). */
struct zl_metrics_text {
	char *buf;
	size_t len, cap;
	bool oom; /* an allocation failed: the scrape answers 500 */
};

void zl_metrics_printf(struct zl_metrics_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void zl_metrics_family(struct zl_metrics_text *t, const char *name, const char *type,
		       const char *help);
/* One sample: name{labels} value; labels is "" or `a="x",b="y"`. */
void zl_metrics_u64(struct zl_metrics_text *t, const char *name, const char *labels, uint64_t v);
void zl_metrics_f64(struct zl_metrics_text *t, const char *name, const char *labels, double v);
/* n samples of one family by one label: name{label="values[i]"} v[i]. */
void zl_metrics_u64_by(struct zl_metrics_text *t, const char *name, const char *label,
		       const char *const *values, const uint64_t *v, size_t n);
/* A label value with \, " and newlines escaped, as the format wants. */
void zl_metrics_label_escape(const char *in, char *out, size_t n);

/* Latency histogram: bucket i counts observations <= 8 us << i (8 us ..
 * 4.2 s), the last one the rest (+Inf). One writer; add costs a few
 * instructions (no syscall, no atomic). */
#define ZL_METRICS_HIST_N 20
struct zl_metrics_hist {
	uint64_t b[ZL_METRICS_HIST_N + 1];
	uint64_t count;
	uint64_t sum_ns;
};

/* The bucket of an observation of ns nanoseconds. */
static inline unsigned zl_metrics_hist_bucket(uint64_t ns)
{
	/* The smallest i with ns <= 8 us << i: ceil(log2(ns / 8 us)). */
	uint64_t q = ns ? (ns - 1) / 8000u : 0;
	unsigned i = q ? 64u - (unsigned)__builtin_clzll(q) : 0u;

	return i < ZL_METRICS_HIST_N ? i : ZL_METRICS_HIST_N;
}

static inline void zl_metrics_hist_add(struct zl_metrics_hist *h, uint64_t ns)
{
	h->b[zl_metrics_hist_bucket(ns)]++;
	h->count++;
	h->sum_ns += ns;
}

/* name_bucket{labels,le=".."} (cumulative), name_sum (seconds), name_count. */
void zl_metrics_hist_text(struct zl_metrics_text *t, const char *name, const char *labels,
			  const struct zl_metrics_hist *h);

/* A histogram as one word, "COUNT:SUM_NS:B0,B1,...,B20" (the buckets
 * not cumulative), for a process that answers its counters in text (the
 * attach process's status, csi-node). Format: the length written (without
 * the NUL), or -ENOSPC when n is too small. Parse: 0, or -EINVAL when s
 * does not start with such a word (h is then zeroed). */
int zl_metrics_hist_format(const struct zl_metrics_hist *h, char *out, size_t n);
int zl_metrics_hist_parse(const char *s, struct zl_metrics_hist *h);

struct zl_metrics_ops {
	/* Writes the daemon's samples (HTTP thread). */
	void (*render)(void *arg, struct zl_metrics_text *t);
	/* 0 when healthy (ready: ready to serve), else why not in why. */
	int (*probe)(void *arg, bool ready, char *why, size_t n);
	void *arg;
};

struct zl_metrics_srv;

/* Listens on listen ("HOST:PORT", "[V6]:PORT" or ":PORT" for every
 * address; port 0 picks a free one) and serves until zl_metrics_stop.
 * 0 or a negative error (logged with what to change). */
int zl_metrics_start(const char *listen, const struct zl_metrics_ops *ops,
		     struct zl_metrics_srv **out);
/* The port it listens on. */
uint16_t zl_metrics_port(const struct zl_metrics_srv *m);
/* Stops serving (waits for a scrape in progress). NULL is fine. */
void zl_metrics_stop(struct zl_metrics_srv *m);

/* ---- reading the text format (zl top; metrics_parse.c) ---- */

#define ZL_METRICS_NAME_MAX   128
#define ZL_METRICS_LABELS_MAX 8
#define ZL_METRICS_LABEL_MAX  256

struct zl_metrics_sample {
	char name[ZL_METRICS_NAME_MAX];
	unsigned n_labels;
	struct {
		char name[ZL_METRICS_NAME_MAX];
		char value[ZL_METRICS_LABEL_MAX]; /* unescaped */
	} labels[ZL_METRICS_LABELS_MAX];
	double value;
};

/* Parses text (len bytes, not necessarily terminated) in the Prometheus
 * text exposition format, as a scrape returns it from a daemon that may be
 * anything: comment and blank lines are skipped, every other line must be
 * `name[{label="value",...}] value [timestamp]` within the limits above;
 * cb gets each sample (a non-zero return stops with that value). 0, or
 * -ZL_ERR_PROTO with *bad_line (1-based) the line that is not one. */
int zl_metrics_parse(const char *text, size_t len,
		     int (*cb)(void *arg, const struct zl_metrics_sample *s), void *arg,
		     unsigned *bad_line);
/* The value of label name in s, or NULL. */
const char *zl_metrics_sample_label(const struct zl_metrics_sample *s, const char *name);

#endif
