/* Metrics and probes over HTTP (metrics.h): libmicrohttpd with its own
 * polling thread, three GET paths, nothing else. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/common/log.h"

#define METRICS_CONN_MAX 16	  /* scrapers and probes at once */
#define METRICS_CONN_TIMEOUT_S 10 /* an idle or slow client is dropped */

struct zl_metrics_srv {
	struct MHD_Daemon *d;
	struct zl_metrics_ops ops;
	uint16_t port;
};

/* ---- text ---- */

static bool text_reserve(struct zl_metrics_text *t, size_t more)
{
	size_t cap;
	char *b;

	if (t->oom)
		return false;
	if (t->len + more + 1 <= t->cap)
		return true;
	cap = t->cap ? t->cap : 16384;
	while (cap < t->len + more + 1)
		cap *= 2;
	b = realloc(t->buf, cap);
	if (!b) {
		t->oom = true;
		return false;
	}
	t->buf = b;
	t->cap = cap;
	return true;
}

void zl_metrics_printf(struct zl_metrics_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	/* Formatted once where it fits (nearly always), twice when the
	 * buffer must grow first. */
	if (!text_reserve(t, 256))
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= t->cap - t->len) {
		if (!text_reserve(t, (size_t)n))
			return;
		va_start(ap, fmt);
		vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
	}
	t->len += (size_t)n;
}

void zl_metrics_family(struct zl_metrics_text *t, const char *name, const char *type,
		       const char *help)
{
	zl_metrics_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void zl_metrics_u64(struct zl_metrics_text *t, const char *name, const char *labels, uint64_t v)
{
	if (labels && labels[0])
		zl_metrics_printf(t, "%s{%s} %" PRIu64 "\n", name, labels, v);
	else
		zl_metrics_printf(t, "%s %" PRIu64 "\n", name, v);
}

void zl_metrics_f64(struct zl_metrics_text *t, const char *name, const char *labels, double v)
{
	if (labels && labels[0])
		zl_metrics_printf(t, "%s{%s} %.9g\n", name, labels, v);
	else
		zl_metrics_printf(t, "%s %.9g\n", name, v);
}

void zl_metrics_u64_by(struct zl_metrics_text *t, const char *name, const char *label,
		       const char *const *values, const uint64_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		zl_metrics_printf(t, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, values[i], v[i]);
}

void zl_metrics_label_escape(const char *in, char *out, size_t n)
{
	size_t o = 0;

	if (!n)
		return;
	for (; *in && o + 3 < n; in++) {
		if (*in == '\\' || *in == '"') {
			out[o++] = '\\';
			out[o++] = *in;
		} else if (*in == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *in;
		}
	}
	out[o] = '\0';
}

/* The buckets' upper bounds in seconds, as le label values: formatted once
 * (a float conversion per bucket per scrape costs more than the rest). */
static char hist_le[ZL_METRICS_HIST_N][24];
static pthread_once_t hist_le_once = PTHREAD_ONCE_INIT;

static void hist_le_init(void)
{
	for (unsigned i = 0; i < ZL_METRICS_HIST_N; i++)
		snprintf(hist_le[i], sizeof(hist_le[i]), "%.9g", (double)(8000ull << i) / 1e9);
}

void zl_metrics_hist_text(struct zl_metrics_text *t, const char *name, const char *labels,
			  const struct zl_metrics_hist *h)
{
	const char *sep = labels && labels[0] ? "," : "";
	uint64_t cum = 0;

	if (!labels)
		labels = "";
	pthread_once(&hist_le_once, hist_le_init);
	for (unsigned i = 0; i < ZL_METRICS_HIST_N; i++) {
		cum += h->b[i];
		zl_metrics_printf(t, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels, sep,
				  hist_le[i], cum);
	}
	cum += h->b[ZL_METRICS_HIST_N];
	zl_metrics_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
	if (labels[0]) {
		zl_metrics_printf(t, "%s_sum{%s} %.9g\n", name, labels, (double)h->sum_ns / 1e9);
		zl_metrics_printf(t, "%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
	} else {
		zl_metrics_printf(t, "%s_sum %.9g\n", name, (double)h->sum_ns / 1e9);
		zl_metrics_printf(t, "%s_count %" PRIu64 "\n", name, h->count);
	}
}

int zl_metrics_hist_format(const struct zl_metrics_hist *h, char *out, size_t n)
{
	size_t len;
	int w;

	w = snprintf(out, n, "%" PRIu64 ":%" PRIu64 ":", h->count, h->sum_ns);
	if (w < 0 || (size_t)w >= n)
		return -ENOSPC;
	len = (size_t)w;
	for (unsigned i = 0; i <= ZL_METRICS_HIST_N; i++) {
		w = snprintf(out + len, n - len, "%s%" PRIu64, i ? "," : "", h->b[i]);
		if (w < 0 || (size_t)w >= n - len)
			return -ENOSPC;
		len += (size_t)w;
	}
	return (int)len;
}

/* One unsigned decimal at *p followed by sep; advances *p past sep. */
static int hist_parse_u64(const char **p, char sep, uint64_t *v)
{
	char *end;

	if (**p < '0' || **p > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(*p, &end, 10);
	if (errno || (sep && *end != sep))
		return -EINVAL;
	*p = sep ? end + 1 : end;
	return 0;
}

int zl_metrics_hist_parse(const char *s, struct zl_metrics_hist *h)
{
	const char *p = s;
	int rc;

	memset(h, 0, sizeof(*h));
	rc = hist_parse_u64(&p, ':', &h->count);
	if (!rc)
		rc = hist_parse_u64(&p, ':', &h->sum_ns);
	for (unsigned i = 0; !rc && i <= ZL_METRICS_HIST_N; i++)
		rc = hist_parse_u64(&p, i < ZL_METRICS_HIST_N ? ',' : 0, &h->b[i]);
	if (!rc && *p && *p != ' ' && *p != '\n')
		rc = -EINVAL;
	if (rc)
		memset(h, 0, sizeof(*h));
	return rc;
}

/* ---- HTTP ---- */

static enum MHD_Result metrics_send(struct MHD_Connection *conn, unsigned status,
				    const char *ctype, char *body, size_t len, bool owned)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = owned ? MHD_create_response_from_buffer_with_free_callback(len, body, free)
		  : MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_COPY);
	if (!r) {
		if (owned)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result metrics_handle(void *cls, struct MHD_Connection *conn, const char *url,
				      const char *method, const char *version,
				      const char *upload_data, size_t *upload_size, void **req_cls)
{
	struct zl_metrics_srv *m = cls;
	static int first; /* marks the first call of a request (headers only) */
	char why[256], line[300];
	int n;

	(void)version;
	(void)upload_data;
	if (!*req_cls) {
		*req_cls = &first;
		return MHD_YES;
	}
	if (*upload_size) {
		*upload_size = 0; /* a body is ignored: every path is a GET */
		return MHD_YES;
	}
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		n = snprintf(line, sizeof(line), "only GET is served here\n");
		return metrics_send(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", line,
				    (size_t)n, false);
	}
	if (!strcmp(url, "/metrics")) {
		struct zl_metrics_text t = {0};

		m->ops.render(m->ops.arg, &t);
		if (t.oom || !t.buf) {
			free(t.buf);
			n = snprintf(line, sizeof(line), "out of memory rendering the metrics\n");
			return metrics_send(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
					    line, (size_t)n, false);
		}
		return metrics_send(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
				    t.buf, t.len, true);
	}
	if (!strcmp(url, "/healthz") || !strcmp(url, "/readyz")) {
		bool ready = url[1] == 'r';
		int rc;

		why[0] = '\0';
		rc = m->ops.probe(m->ops.arg, ready, why, sizeof(why));
		n = snprintf(line, sizeof(line), "%s%s%s%s\n", rc ? "not " : "",
			     ready ? "ready" : "ok", why[0] ? ": " : "", why);
		return metrics_send(conn, rc ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
				    "text/plain", line, (size_t)ZL_MIN(n, (int)sizeof(line) - 1),
				    false);
	}
	n = snprintf(line, sizeof(line), "not found: %s (try /metrics, /healthz or /readyz)\n",
		     url);
	return metrics_send(conn, MHD_HTTP_NOT_FOUND, "text/plain", line,
			    (size_t)ZL_MIN(n, (int)sizeof(line) - 1), false);
}

/* "HOST:PORT", "[V6]:PORT", ":PORT" into an address. */
static int metrics_addr(const char *listen, struct sockaddr_storage *ss, const char **why)
{
	char host[256];
	const char *colon = strrchr(listen, ':'), *h = listen;
	size_t hl;
	char *end;
	unsigned long port;
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *ai = NULL;

	if (!colon) {
		*why = "no port (HOST:PORT, :PORT for every address)";
		return -ZL_ERR_INVAL;
	}
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port > 65535) {
		*why = "the port is not a number from 0 to 65535";
		return -ZL_ERR_INVAL;
	}
	hl = (size_t)(colon - listen);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl >= sizeof(host)) {
		*why = "the host is too long";
		return -ZL_ERR_INVAL;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (!hl) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_any;
		a->sin6_port = htons((uint16_t)port);
		return 0;
	}
	if (getaddrinfo(host, NULL, &hints, &ai) || !ai) {
		*why = "the host is not a numeric IPv4 or IPv6 address";
		return -ZL_ERR_INVAL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	return 0;
}

int zl_metrics_start(const char *listen, const struct zl_metrics_ops *ops,
		     struct zl_metrics_srv **out)
{
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *info;
	struct zl_metrics_srv *m;
	const char *why = NULL;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
	int rc;

	*out = NULL;
	rc = metrics_addr(listen, &ss, &why);
	if (rc) {
		ZL_LOG_ERR("metrics", "bad metrics address %s: %s", listen, why);
		return rc;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ops = *ops;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_DUAL_STACK;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, metrics_handle, m, MHD_OPTION_SOCK_ADDR,
				(struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
				(unsigned)METRICS_CONN_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
				(unsigned)METRICS_CONN_TIMEOUT_S, MHD_OPTION_END);
	if (!m->d) {
		ZL_LOG_ERR("metrics",
			   "cannot serve metrics on %s (is the port in use? change the "
			   "metrics address)",
			   listen);
		free(m);
		return -ZL_ERR_IO;
	}
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info ? info->port : 0;
	*out = m;
	return 0;
}

uint16_t zl_metrics_port(const struct zl_metrics_srv *m)
{
	return m ? m->port : 0;
}

void zl_metrics_stop(struct zl_metrics_srv *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
