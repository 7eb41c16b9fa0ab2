#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka needs the headers above first. */
#include <cmocka.h>

#include "cli/cli.h"

static void test_globals_anywhere(void **state)
{
	char *argv[] = {
	    "zl",	   "--etcd", "http://a:1",	  "volume", "ls", "--transport=tcp",
	    "--log-level", "debug",  "--etcd-prefix=/x/", NULL};
	int argc = 9;
	struct zl_cli_globals g;
	char err[128];

	(void)state;
	assert_int_equal(zl_cli_globals_parse(&argc, argv, &g, err, sizeof(err)), 0);
	assert_int_equal(argc, 3);
	assert_string_equal(argv[1], "volume");
	assert_string_equal(argv[2], "ls");
	assert_null(argv[3]);
	assert_string_equal(g.etcd, "http://a:1");
	assert_string_equal(g.transport, "tcp");
	assert_string_equal(g.log_level, "debug");
	assert_string_equal(g.prefix, "/x/");
	assert_false(g.help);
	assert_null(g.io_timeout);
	assert_false(g.legacy_drop);
}

static void test_globals_io_timeout(void **state)
{
	char *argv[] = {"zl",	  "volume", "import",	     "v", "--io-timeout",
			"5",	  "f",	    "--legacy-drop", NULL};
	char *a2[] = {"zl", "--io-timeout=30", "status", NULL};
	char *a3[] = {"zl", "status", "--io-timeout", NULL};
	int argc = 8;
	struct zl_cli_globals g;
	char err[128];

	(void)state;
	assert_int_equal(zl_cli_globals_parse(&argc, argv, &g, err, sizeof(err)), 0);
	assert_int_equal(argc, 5);
	assert_string_equal(argv[4], "f");
	assert_string_equal(g.io_timeout, "5");
	assert_true(g.legacy_drop);
	argc = 3;
	assert_int_equal(zl_cli_globals_parse(&argc, a2, &g, err, sizeof(err)), 0);
	assert_string_equal(g.io_timeout, "30");
	assert_false(g.legacy_drop);
	argc = 3;
	assert_int_equal(zl_cli_globals_parse(&argc, a3, &g, err, sizeof(err)), -ZL_ERR_INVAL);
	assert_non_null(strstr(err, "--io-timeout"));
}

/* --tls-ca and --tls-server-name are global (every command may reach a TLS
 * node), in both spellings. */
static void test_globals_tls(void **state)
{
	char *argv[] = {"zl", "volume", "export", "--tls-ca", "/ca.crt", "v", "f",
			"--tls-server-name=zipline-storage", NULL};
	int argc = 8;
	struct zl_cli_globals g;
	char err[128];

	(void)state;
	assert_int_equal(zl_cli_globals_parse(&argc, argv, &g, err, sizeof(err)), 0);
	assert_int_equal(argc, 5);
	assert_string_equal(argv[3], "v");
	assert_string_equal(argv[4], "f");
	assert_string_equal(g.tls_ca, "/ca.crt");
	assert_string_equal(g.tls_server_name, "zipline-storage");
	assert_null(g.io_timeout);
}

static void test_globals_help_and_errors(void **state)
{
	char *a1[] = {"zl", "--help", NULL};
	char *a2[] = {"zl", "volume", "create", "--help", NULL};
	char *a3[] = {"zl", "status", "--etcd", NULL};
	char *a4[] = {"zl", "volume", "create", "x", "--", "--etcd", "y", NULL};
	char *a5[] = {"zl", "--etcdx", "--version", NULL};
	struct zl_cli_globals g;
	char err[128];
	int argc;

	(void)state;
	argc = 2;
	assert_int_equal(zl_cli_globals_parse(&argc, a1, &g, err, sizeof(err)), 0);
	assert_true(g.help);
	assert_int_equal(argc, 1);
	/* After a command --help stays for the command. */
	argc = 4;
	assert_int_equal(zl_cli_globals_parse(&argc, a2, &g, err, sizeof(err)), 0);
	assert_false(g.help);
	assert_int_equal(argc, 4);
	assert_string_equal(a2[3], "--help");
	argc = 3;
	assert_int_equal(zl_cli_globals_parse(&argc, a3, &g, err, sizeof(err)), -ZL_ERR_INVAL);
	assert_non_null(strstr(err, "--etcd"));
	/* Nothing after "--" is a global flag. */
	argc = 7;
	assert_int_equal(zl_cli_globals_parse(&argc, a4, &g, err, sizeof(err)), 0);
	assert_null(g.etcd);
	assert_int_equal(argc, 7);
	/* A longer flag with a global flag's prefix is not that flag. */
	argc = 3;
	assert_int_equal(zl_cli_globals_parse(&argc, a5, &g, err, sizeof(err)), 0);
	assert_null(g.etcd);
	assert_true(g.version);
	assert_int_equal(argc, 2);
	assert_string_equal(a5[1], "--etcdx");
}

static void test_values(void **state)
{
	uint64_t v;
	uint32_t u;

	(void)state;
	assert_int_equal(zl_cli_parse_size("10G", false, &v), 0);
	assert_true(v == 10ull << 30);
	assert_int_equal(zl_cli_parse_size("4k", false, &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(zl_cli_parse_size("0", false, &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_size("0", true, &v), 0);
	assert_int_equal(zl_cli_parse_size("abc", true, &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_size("-1", true, &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_u32("3", 1, 3, &u), 0);
	assert_int_equal(u, 3);
	assert_int_equal(zl_cli_parse_u32("7", 1, 3, &u), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_u32("0", 1, 3, &u), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_u32("2x", 1, 3, &u), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_u32("", 1, 3, &u), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_parse_u32("99999999999", 0, UINT32_MAX, &u), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_nbd_spec_check("unix:/tmp/x.sock"), 0);
	assert_int_equal(zl_cli_nbd_spec_check("127.0.0.1:10809"), 0);
	assert_int_equal(zl_cli_nbd_spec_check("[::1]:10809"), 0);
	assert_int_equal(zl_cli_nbd_spec_check(":10809"), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_nbd_spec_check("bogus"), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_nbd_spec_check("unix:"), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_nbd_spec_check("host:port"), -ZL_ERR_INVAL);
	assert_int_equal(zl_cli_nbd_spec_check("host:70000"), -ZL_ERR_INVAL);
}

static void test_hist(void **state)
{
	static struct zl_hist h, h2;
	uint64_t i, p50, p99, p999;

	(void)state;
	zl_hist_init(&h);
	assert_int_equal(zl_hist_quantile(&h, 0.5), 0);
	/* 1..100000 ns uniform: quantiles within the 1/16 bucket error. */
	for (i = 1; i <= 100000; i++)
		zl_hist_add(&h, i);
	p50 = zl_hist_quantile(&h, 0.5);
	p99 = zl_hist_quantile(&h, 0.99);
	p999 = zl_hist_quantile(&h, 0.999);
	assert_true(p50 >= 50000 && p50 <= 50000 + 50000 / 16 + 1);
	assert_true(p99 >= 99000 && p99 <= 100000);
	assert_true(p999 >= 99900 && p999 <= 100000);
	assert_int_equal(h.min, 1);
	assert_int_equal(h.max, 100000);
	assert_int_equal(zl_hist_quantile(&h, 1.0), 100000);
	/* Small values are exact. */
	zl_hist_init(&h2);
	for (i = 0; i < 10; i++)
		zl_hist_add(&h2, 7);
	zl_hist_add(&h2, 5000000000ull);
	assert_int_equal(zl_hist_quantile(&h2, 0.5), 7);
	assert_int_equal(zl_hist_quantile(&h2, 0.999), 5000000000ull);
	/* Huge values do not overflow the table. */
	zl_hist_add(&h2, UINT64_MAX);
	assert_true(zl_hist_quantile(&h2, 1.0) == UINT64_MAX);
	zl_hist_merge(&h, &h2);
	assert_int_equal(h.count, 100012);
	assert_int_equal(h.min, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_globals_anywhere),
	    cmocka_unit_test(test_globals_io_timeout),
	    cmocka_unit_test(test_globals_tls),
	    cmocka_unit_test(test_globals_help_and_errors),
	    cmocka_unit_test(test_values),
	    cmocka_unit_test(test_hist),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
