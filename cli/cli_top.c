/* zl top: live per-volume and per-node IOPS, MiB/s and latency, from every
 * storage node's /metrics (zipline-storage --metrics; the port is in its node
 * record). Each round scrapes every node (libcurl, bounded), parses the text
 * with lib/metrics' reader, and prints the rates since the previous round:
 * refreshed in place on a terminal, one table after another otherwise.
 * A client operation is counted once, on the primary that answered it, so
 * a volume's figures are the sums over the nodes. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lib/meta/meta.h"
#include "lib/metrics/metrics.h"

#define TOP_SCRAPE_MS 2000	  /* one node's scrape, connect included */
#define TOP_BODY_MAX  (8u << 20) /* a bigger answer is not a metrics page */
#define TOP_VOLS_MAX  4096

/* Counters of one volume (summed over the nodes) or one node. */
struct top_ctr {
	char key[ZL_METRICS_LABEL_MAX]; /* node id, or volume id */
	char name[ZL_METRICS_LABEL_MAX];
	double ops[2], bytes[2], secs[2]; /* [0] read, [1] write */
	double inflight;
	bool seen;	/* in this round's scrapes */
	const char *err; /* node: why it has no figures this round */
};

struct top_round {
	struct top_ctr *nodes, *vols;
	size_t n_nodes, n_vols, cap_vols;
	uint64_t t_ns;
};

struct top_body {
	char *buf;
	size_t len;
	bool too_big;
};

static volatile sig_atomic_t top_stop;

static void top_sig(int sig)
{
	(void)sig;
	top_stop = 1;
}

static size_t top_write_cb(char *p, size_t sz, size_t n, void *arg)
{
	struct top_body *b = arg;
	size_t len = sz * n;
	char *nb;

	if (b->len + len > TOP_BODY_MAX) {
		b->too_big = true;
		return 0;
	}
	nb = realloc(b->buf, b->len + len + 1);
	if (!nb)
		return 0;
	memcpy(nb + b->len, p, len);
	b->buf = nb;
	b->len += len;
	return len;
}

static struct top_ctr *top_vol(struct top_round *r, const char *vid)
{
	for (size_t i = 0; i < r->n_vols; i++)
		if (!strcmp(r->vols[i].key, vid))
			return &r->vols[i];
	if (r->n_vols == r->cap_vols) {
		size_t cap = r->cap_vols ? 2 * r->cap_vols : 32;
		struct top_ctr *v;

		if (cap > TOP_VOLS_MAX)
			return NULL;
		v = realloc(r->vols, cap * sizeof(*v));
		if (!v)
			return NULL;
		r->vols = v;
		r->cap_vols = cap;
	}
	memset(&r->vols[r->n_vols], 0, sizeof(r->vols[0]));
	snprintf(r->vols[r->n_vols].key, sizeof(r->vols[0].key), "%s", vid);
	return &r->vols[r->n_vols++];
}

struct top_parse {
	struct top_round *r;
	struct top_ctr *node;
};

static int top_sample(void *arg, const struct zl_metrics_sample *s)
{
	struct top_parse *p = arg;
	const char *op = zl_metrics_sample_label(s, "op"), *dir, *vid, *name;
	int d;

	if (!strcmp(s->name, "zipline_storage_requests_inflight")) {
		p->node->inflight = s->value;
		return 0;
	}
	if (op && (!strcmp(op, "read") || !strcmp(op, "write"))) {
		d = op[0] == 'w';
		if (!strcmp(s->name, "zipline_storage_requests_total"))
			p->node->ops[d] += s->value;
		else if (!strcmp(s->name, "zipline_storage_request_bytes_total"))
			p->node->bytes[d] += s->value;
		else if (!strcmp(s->name, "zipline_storage_request_duration_seconds_sum"))
			p->node->secs[d] += s->value;
		return 0;
	}
	if (strncmp(s->name, "zipline_volume_", 15))
		return 0;
	dir = zl_metrics_sample_label(s, "dir");
	vid = zl_metrics_sample_label(s, "volume");
	name = zl_metrics_sample_label(s, "name");
	if (!dir || !vid || (strcmp(dir, "read") && strcmp(dir, "write")))
		return 0;
	d = dir[0] == 'w';
	{
		struct top_ctr *v = top_vol(p->r, vid);

		if (!v)
			return 0;
		if (name && !v->name[0])
			snprintf(v->name, sizeof(v->name), "%s", name);
		v->seen = true;
		if (!strcmp(s->name, "zipline_volume_ops_total"))
			v->ops[d] += s->value;
		else if (!strcmp(s->name, "zipline_volume_bytes_total"))
			v->bytes[d] += s->value;
		else if (!strcmp(s->name, "zipline_volume_op_seconds_total"))
			v->secs[d] += s->value;
	}
	return 0;
}

/* Scrapes node ni into its counters (n->err says why not). */
static void top_scrape(CURL *h, const struct zl_node_info *ni, struct top_round *r,
		       struct top_ctr *n)
{
	struct top_body b = {0};
	struct top_parse p = {.r = r, .node = n};
	char url[256];
	long code = 0;
	unsigned bad = 0;
	CURLcode cc;

	if (!ni->metrics_port) {
		n->err = "no metrics port (zipline-storage --metrics)";
		return;
	}
	snprintf(url, sizeof(url), strchr(ni->addr, ':') ? "http://[%s]:%u/metrics"
							 : "http://%s:%u/metrics",
		 ni->addr, ni->metrics_port);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, top_write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)TOP_SCRAPE_MS);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	if (cc != CURLE_OK)
		n->err = b.too_big ? "answer over 8 MiB" : curl_easy_strerror(cc);
	else if (code != 200)
		n->err = "/metrics did not answer 200";
	else if (zl_metrics_parse(b.buf ? b.buf : "", b.len, top_sample, &p, &bad))
		n->err = "/metrics is not in the Prometheus text format";
	else
		n->seen = true;
	free(b.buf);
}

static void top_round_free(struct top_round *r)
{
	free(r->nodes);
	free(r->vols);
	memset(r, 0, sizeof(*r));
}

/* One round: every registered node scraped. */
static int top_collect(struct zl_cli *cli, CURL *h, struct top_round *r)
{
	struct zl_node_info *ni = NULL;
	size_t n = 0;
	int rc;

	memset(r, 0, sizeof(*r));
	rc = zl_meta_node_list(cli->etcd, cli->prefix, &ni, &n);
	if (rc)
		return rc;
	r->nodes = calloc(n ? n : 1, sizeof(*r->nodes));
	if (!r->nodes) {
		free(ni);
		return -ENOMEM;
	}
	r->n_nodes = n;
	for (size_t i = 0; i < n; i++) {
		snprintf(r->nodes[i].key, sizeof(r->nodes[i].key), "%s", ni[i].id);
		snprintf(r->nodes[i].name, sizeof(r->nodes[i].name), "%s:%u", ni[i].addr,
			 ni[i].metrics_port);
		top_scrape(h, &ni[i], r, &r->nodes[i]);
	}
	r->t_ns = zl_now_ns();
	free(ni);
	return 0;
}

static const struct top_ctr *top_find(const struct top_ctr *v, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].key, key))
			return &v[i];
	return NULL;
}

/* Rates of cur against prev (a counter that went back: a restart, from 0). */
struct top_rate {
	const struct top_ctr *c;
	double iops[2], mibs[2], lat_us[2], total;
};

static void top_rate(const struct top_ctr *cur, const struct top_ctr *prev, double dt,
		     struct top_rate *o)
{
	memset(o, 0, sizeof(*o));
	o->c = cur;
	for (int d = 0; d < 2; d++) {
		double ops = cur->ops[d] - (prev ? prev->ops[d] : 0);
		double by = cur->bytes[d] - (prev ? prev->bytes[d] : 0);
		double s = cur->secs[d] - (prev ? prev->secs[d] : 0);

		if (ops < 0 || by < 0 || s < 0) {
			ops = cur->ops[d];
			by = cur->bytes[d];
			s = cur->secs[d];
		}
		o->iops[d] = ops / dt;
		o->mibs[d] = by / dt / 1048576.0;
		o->lat_us[d] = ops > 0 ? s / ops * 1e6 : 0;
		o->total += o->iops[d];
	}
}

static int top_rate_cmp(const void *a, const void *b)
{
	const struct top_rate *x = a, *y = b;

	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return strcmp(x->c->key, y->c->key);
}

static void top_print(const struct top_round *cur, const struct top_round *prev, double dt,
		      uint32_t max_vols, bool tty)
{
	struct top_rate *rv = calloc(cur->n_vols ? cur->n_vols : 1, sizeof(*rv));
	time_t now = time(NULL);
	char ts[32];
	size_t nv = 0;

	strftime(ts, sizeof(ts), "%H:%M:%S", localtime(&now));
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("zl top  %s  every %.1f s  %zu nodes  %zu volumes with I/O counters%s\n\n", ts, dt,
	       cur->n_nodes, cur->n_vols, tty ? "  (Ctrl-C quits)" : "");
	printf("%-20s %9s %9s %11s %11s %10s %10s %8s\n", "NODE", "READ/s", "WRITE/s", "READ MiB/s",
	       "WRITE MiB/s", "READ us", "WRITE us", "INFLIGHT");
	for (size_t i = 0; i < cur->n_nodes; i++) {
		const struct top_ctr *n = &cur->nodes[i];
		const struct top_ctr *p = top_find(prev->nodes, prev->n_nodes, n->key);
		struct top_rate r;

		if (!n->seen) {
			printf("%-20s %s\n", n->key, n->err ? n->err : "not scraped");
			continue;
		}
		top_rate(n, p && p->seen ? p : NULL, dt, &r);
		printf("%-20s %9.0f %9.0f %11.1f %11.1f %10.0f %10.0f %8.0f\n", n->key, r.iops[0],
		       r.iops[1], r.mibs[0], r.mibs[1], r.lat_us[0], r.lat_us[1], n->inflight);
	}
	for (size_t i = 0; rv && i < cur->n_vols; i++)
		top_rate(&cur->vols[i], top_find(prev->vols, prev->n_vols, cur->vols[i].key), dt,
			 &rv[nv++]);
	if (rv)
		qsort(rv, nv, sizeof(*rv), top_rate_cmp);
	printf("\n%-22s %-16s %9s %9s %11s %11s %10s %10s\n", "VOLUME", "NAME", "READ/s", "WRITE/s",
	       "READ MiB/s", "WRITE MiB/s", "READ us", "WRITE us");
	for (size_t i = 0; i < nv && i < max_vols; i++)
		printf("%-22s %-16.16s %9.0f %9.0f %11.1f %11.1f %10.0f %10.0f\n", rv[i].c->key,
		       rv[i].c->name, rv[i].iops[0], rv[i].iops[1], rv[i].mibs[0], rv[i].mibs[1],
		       rv[i].lat_us[0], rv[i].lat_us[1]);
	if (nv > max_vols)
		printf("(%zu more volumes; --volumes N shows more)\n", nv - max_vols);
	fflush(stdout);
	free(rv);
}

int zl_cli_top(struct zl_cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"interval", required_argument, NULL, 'i'},
	    {"count", required_argument, NULL, 'n'},
	    {"volumes", required_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct top_round prev = {0}, cur = {0};
	struct sigaction sa = {.sa_handler = top_sig};
	uint32_t interval = 2, count = 0, max_vols = 20;
	bool tty = isatty(STDOUT_FILENO);
	CURL *h;
	int c, rc = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":i:n:v:h", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (zl_cli_parse_u32(optarg, 1, 3600, &interval)) {
				zl_cli_err("bad --interval '%s': use 1 to 3600 seconds", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'n':
			if (zl_cli_parse_u32(optarg, 1, 1000000, &count)) {
				zl_cli_err("bad --count '%s': use 1 or more tables", optarg);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'v':
			if (zl_cli_parse_u32(optarg, 1, TOP_VOLS_MAX, &max_vols)) {
				zl_cli_err("bad --volumes '%s': use 1 to %u", optarg, TOP_VOLS_MAX);
				return ZL_CLI_EXIT_USAGE;
			}
			break;
		case 'h':
			printf("usage: zl top [--interval 2] [--count N] [--volumes 20]\n"
			       "  live IOPS, MiB/s and mean latency per storage node and per volume,\n"
			       "  from every node's /metrics (zipline-storage --metrics); --count N:\n"
			       "  N tables, then exit (default: until Ctrl-C)\n");
			return 0;
		default:
			return zl_cli_opt_error("top", c, optopt, argv, optind);
		}
	}
	if (optind != argc) {
		zl_cli_err("too many arguments (usage: zl top [--interval S] [--count N])");
		return ZL_CLI_EXIT_USAGE;
	}
	if (zl_cli_etcd(cli))
		return ZL_CLI_EXIT_RUNTIME;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) || !(h = curl_easy_init())) {
		zl_cli_err("cannot initialise libcurl");
		return ZL_CLI_EXIT_RUNTIME;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = top_collect(cli, h, &prev);
	for (uint32_t shown = 0; !rc && !top_stop && (!count || shown < count); shown++) {
		struct timespec ts = {.tv_sec = interval};

		while (nanosleep(&ts, &ts) && errno == EINTR && !top_stop)
			;
		if (top_stop)
			break;
		rc = top_collect(cli, h, &cur);
		if (rc)
			break;
		top_print(&cur, &prev, (double)(cur.t_ns - prev.t_ns) / 1e9, max_vols, tty);
		top_round_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
	}
	top_round_free(&prev);
	top_round_free(&cur);
	curl_easy_cleanup(h);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (rc) {
		zl_cli_etcd_err(cli, "cannot list storage nodes", rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}
