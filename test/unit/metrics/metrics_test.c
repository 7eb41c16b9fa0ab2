/* lib/metrics: histogram buckets, label escaping, and the HTTP server over
 * a real socket (status codes, bodies, the probe's reason). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/common/common.h"
#include "lib/metrics/metrics.h"

static void test_hist_buckets(void **state)
{
	struct zl_metrics_hist h = {0};
	/* ns, bucket: the smallest i with ns <= 8 us << i. */
	const uint64_t cases[][2] = {{0, 0},	   {1, 0},	{8000, 0},
				     {8001, 1},	   {16000, 1},	{16001, 2},
				     {24000, 2},   {32000, 2},	{32001, 3},
				     {4194304000ull, 19}, {4194304001ull, 20}, {60000000000ull, 20}};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&h, 0, sizeof(h));
		zl_metrics_hist_add(&h, cases[i][0]);
		assert_int_equal(h.b[cases[i][1]], 1);
		assert_int_equal(h.count, 1);
		assert_int_equal(h.sum_ns, cases[i][0]);
	}
}

/* The one-word form of the attach process's status answer. */
static void test_hist_word(void **state)
{
	struct zl_metrics_hist h = {0}, g;
	char buf[512], small[16];
	int n;

	(void)state;
	zl_metrics_hist_add(&h, 5000);
	zl_metrics_hist_add(&h, 20000);
	zl_metrics_hist_add(&h, 9000000000ull);
	n = zl_metrics_hist_format(&h, buf, sizeof(buf));
	assert_int_equal(n, (int)strlen(buf));
	assert_string_equal(buf, "3:9000025000:1,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1");
	assert_int_equal(zl_metrics_hist_parse(buf, &g), 0);
	assert_memory_equal(&g, &h, sizeof(h));
	/* Followed by the next field or the end of the line. */
	strcat(buf, " write_lat=0");
	assert_int_equal(zl_metrics_hist_parse(buf, &g), 0);
	assert_int_equal(g.count, 3);
	assert_int_equal(zl_metrics_hist_format(&h, small, sizeof(small)), -ENOSPC);
	/* Short, not a number, trailing junk: refused, zeroed. */
	assert_int_equal(zl_metrics_hist_parse("3:9000025000:1,0,1", &g), -EINVAL);
	assert_int_equal(g.count, 0);
	assert_int_equal(zl_metrics_hist_parse("", &g), -EINVAL);
	assert_int_equal(zl_metrics_hist_parse("x:1:0", &g), -EINVAL);
	buf[strlen(buf) - strlen(" write_lat=0")] = 'x';
	assert_int_equal(zl_metrics_hist_parse(buf, &g), -EINVAL);
}

static void test_hist_text(void **state)
{
	struct zl_metrics_hist h = {0};
	struct zl_metrics_text t = {0};

	(void)state;
	zl_metrics_hist_add(&h, 5000);	  /* le 8e-06 */
	zl_metrics_hist_add(&h, 20000);	  /* le 3.2e-05 */
	zl_metrics_hist_add(&h, 9000000000ull); /* +Inf */
	zl_metrics_hist_text(&t, "x_seconds", "op=\"read\"", &h);
	assert_false(t.oom);
	assert_non_null(strstr(t.buf, "x_seconds_bucket{op=\"read\",le=\"8e-06\"} 1\n"));
	assert_non_null(strstr(t.buf, "x_seconds_bucket{op=\"read\",le=\"1.6e-05\"} 1\n"));
	assert_non_null(strstr(t.buf, "x_seconds_bucket{op=\"read\",le=\"3.2e-05\"} 2\n"));
	assert_non_null(strstr(t.buf, "x_seconds_bucket{op=\"read\",le=\"4.194304\"} 2\n"));
	assert_non_null(strstr(t.buf, "x_seconds_bucket{op=\"read\",le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(t.buf, "x_seconds_count{op=\"read\"} 3\n"));
	assert_non_null(strstr(t.buf, "x_seconds_sum{op=\"read\"} 9.000025\n"));
	free(t.buf);
}

static void test_label_escape(void **state)
{
	char out[64];

	(void)state;
	zl_metrics_label_escape("a\"b\\c\nd", out, sizeof(out));
	assert_string_equal(out, "a\\\"b\\\\c\\nd");
	zl_metrics_label_escape("abcdefgh", out, 6); /* truncated, terminated */
	assert_true(strlen(out) < 6);
}

struct srv_arg {
	int ready_rc;
	int renders;
};

static void srv_render(void *arg, struct zl_metrics_text *t)
{
	struct srv_arg *a = arg;

	a->renders++;
	zl_metrics_family(t, "y_total", "counter", "A test counter.");
	zl_metrics_u64(t, "y_total", "k=\"v\"", 42);
}

static int srv_probe(void *arg, bool ready, char *why, size_t n)
{
	struct srv_arg *a = arg;

	if (ready && a->ready_rc) {
		snprintf(why, n, "disk gone");
		return a->ready_rc;
	}
	return 0;
}

/* One HTTP/1.0 exchange over a real socket: the whole response. */
static char *http(uint16_t port, const char *req)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	static char buf[65536];
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while ((n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	return buf;
}

static void test_server(void **state)
{
	struct srv_arg a = {0};
	struct zl_metrics_ops ops = {.render = srv_render, .probe = srv_probe, .arg = &a};
	struct zl_metrics_srv *m = NULL;
	uint16_t port;
	char *r;

	(void)state;
	assert_int_not_equal(zl_metrics_start("127.0.0.1", &ops, &m), 0); /* no port */
	assert_int_not_equal(zl_metrics_start("nohost:80", &ops, &m), 0);
	assert_int_not_equal(zl_metrics_start("127.0.0.1:99999", &ops, &m), 0);
	assert_int_equal(zl_metrics_start("127.0.0.1:0", &ops, &m), 0);
	port = zl_metrics_port(m);
	assert_true(port > 0);
	r = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, "HTTP/1.0 200") ? r : strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "text/plain; version=0.0.4"));
	assert_non_null(strstr(r, "\r\n\r\n# HELP y_total A test counter.\n# TYPE y_total counter\n"
				  "y_total{k=\"v\"} 42\n"));
	assert_int_equal(a.renders, 1);
	r = http(port, "GET /healthz HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 200 "));
	assert_non_null(strstr(r, "\r\n\r\nok\n"));
	a.ready_rc = -1;
	r = http(port, "GET /readyz HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 503 "));
	assert_non_null(strstr(r, "\r\n\r\nnot ready: disk gone\n"));
	r = http(port, "GET /healthz HTTP/1.0\r\n\r\n"); /* alive all the same */
	assert_non_null(strstr(r, " 200 "));
	r = http(port, "GET /other HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 404 "));
	r = http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
	assert_non_null(strstr(r, " 405 "));
	r = http(port, "GARBAGE\r\n\r\n");
	assert_null(strstr(r, " 200 "));
	assert_int_equal(a.renders, 1);
	zl_metrics_stop(m);
	zl_metrics_stop(NULL);
}

struct collect {
	struct zl_metrics_sample s[32];
	unsigned n;
};

static int collect_cb(void *arg, const struct zl_metrics_sample *s)
{
	struct collect *c = arg;

	if (c->n == 32)
		return -1;
	c->s[c->n++] = *s;
	return 0;
}

static void test_parse(void **state)
{
	static struct collect c;
	struct zl_metrics_hist h = {0};
	struct zl_metrics_text t = {0};
	unsigned bad = 99;
	const char *txt = "# HELP a_total A.\n# TYPE a_total counter\n\n"
			  "a_total{op=\"read\",name=\"x\\\"y\\\\z\\n\"} 12 1700000000000\r\n"
			  "  b 3.5\n"
			  "c{} +Inf\n"
			  "d{k = \"v\" , } -2e3";

	(void)state;
	memset(&c, 0, sizeof(c));
	assert_int_equal(zl_metrics_parse(txt, strlen(txt), collect_cb, &c, &bad), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.s[0].name, "a_total");
	assert_int_equal(c.s[0].n_labels, 2);
	assert_string_equal(zl_metrics_sample_label(&c.s[0], "op"), "read");
	assert_string_equal(zl_metrics_sample_label(&c.s[0], "name"), "x\"y\\z\n");
	assert_null(zl_metrics_sample_label(&c.s[0], "nope"));
	assert_true(c.s[0].value == 12.0);
	assert_true(c.s[1].value == 3.5);
	assert_true(c.s[2].value > 1e308);
	assert_string_equal(zl_metrics_sample_label(&c.s[3], "k"), "v");
	assert_true(c.s[3].value == -2000.0);

	/* What zl_metrics_hist_text writes reads back. */
	zl_metrics_hist_add(&h, 5000);
	zl_metrics_hist_add(&h, 9000000000ull);
	zl_metrics_family(&t, "x_seconds", "histogram", "X.");
	zl_metrics_hist_text(&t, "x_seconds", "op=\"w\"", &h);
	memset(&c, 0, sizeof(c));
	assert_int_equal(zl_metrics_parse(t.buf, t.len, collect_cb, &c, &bad), 0);
	assert_int_equal(c.n, ZL_METRICS_HIST_N + 3);
	assert_string_equal(c.s[ZL_METRICS_HIST_N].name, "x_seconds_bucket");
	assert_string_equal(zl_metrics_sample_label(&c.s[ZL_METRICS_HIST_N], "le"), "+Inf");
	assert_true(c.s[ZL_METRICS_HIST_N].value == 2.0);
	assert_true(c.s[ZL_METRICS_HIST_N + 2].value == 2.0); /* _count */
	free(t.buf);

	/* Not samples: the line number of the first. */
	{
		static const struct {
			const char *text;
			unsigned line;
		} bads[] = {
		    {"a 1\n1a 2\n", 2},	  {"a{b=\"c\" 1\n", 1},	{"a{b=c} 1", 1},
		    {"a{b=\"c\"}1", 1},	  {"a 1 2 3", 1},		{"a", 1},
		    {"a one", 1},		  {"a{=\"x\"} 1", 1},		{"a{b=\"\\q\"} 1", 1},
		    {"a{b=\"x\",c=\"y\"", 1}, {"a 1 12x", 1},		{"a 1 -", 1},
		    {"# ok\n\nb 1\nc{", 4},
		};

		for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
			memset(&c, 0, sizeof(c));
			assert_int_equal(zl_metrics_parse(bads[i].text, strlen(bads[i].text),
							  collect_cb, &c, &bad),
					 -ZL_ERR_PROTO);
			assert_int_equal(bad, bads[i].line);
		}
	}
	/* A name, a label and a value longer than the limits. */
	{
		static char big[1024];

		memset(big, 'a', 300);
		memcpy(big + 300, " 1", 3);
		assert_int_equal(zl_metrics_parse(big, strlen(big), collect_cb, &c, &bad),
				 -ZL_ERR_PROTO);
		memcpy(big, "a{b=\"", 5);
		memset(big + 5, 'v', 400);
		memcpy(big + 405, "\"} 1", 5);
		assert_int_equal(zl_metrics_parse(big, strlen(big), collect_cb, &c, &bad),
				 -ZL_ERR_PROTO);
	}
	/* A callback's non-zero answer stops the parse with it. */
	memset(&c, 0, sizeof(c));
	c.n = 32;
	assert_int_equal(zl_metrics_parse("a 1\nb 2\n", 8, collect_cb, &c, &bad), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_buckets),
	    cmocka_unit_test(test_hist_word),
	    cmocka_unit_test(test_hist_text),
	    cmocka_unit_test(test_label_escape),
	    cmocka_unit_test(test_server),
	    cmocka_unit_test(test_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
