/* zipline-storage's command line (storage_flags.c): the defaults every flag
 * had before lib/cfg, values landing in their fields, and the checks across
 * flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "lib/cfg/cfg.h"
#include "storage/storage_ctl.h"

static struct zl_storage_cfg cfg;
static struct zl_cfg_etcd etcd;
static const char *node_flag;

static int parse(const char *first, ...)
{
	char *argv[64] = {"zipline-storage"};
	int argc = 1;
	va_list ap;

	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		assert_true(argc < 63);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	memset(&cfg, 0, sizeof(cfg));
	node_flag = NULL;
	return zl_storage_cfg_parse(&cfg, &etcd, &node_flag, argc, argv);
}

static void test_defaults(void **state)
{
	(void)state;
	unsetenv("ZIPLINE_ETCD");
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "10.0.0.1", NULL), 0);
	assert_string_equal(cfg.data_dir, "/d");
	assert_string_equal(cfg.listen_host, "0.0.0.0");
	assert_int_equal(cfg.listen_port, 7100);
	assert_string_equal(cfg.advertise, "10.0.0.1");
	assert_null(node_flag);
	assert_string_equal(cfg.domain, "");
	assert_string_equal(cfg.eo.endpoints, "http://127.0.0.1:2379");
	assert_null(cfg.eo.cacert);
	assert_null(cfg.eo.user);
	assert_null(cfg.eo.password);
	assert_string_equal(cfg.prefix, "/zipline/");
	assert_int_equal(cfg.etcd_wait_sec, 60);
	assert_string_equal(cfg.transport, "auto");
	assert_int_equal(cfg.capacity, 0);
	assert_true(cfg.heal);
	assert_int_equal(cfg.repl_wait_ms, 8000);
	assert_int_equal(cfg.recovery_mbps, 200);
	assert_int_equal(cfg.scrub_mbps, 100);
	assert_int_equal(cfg.scrub_interval_s, 86400);
	assert_int_equal(cfg.gc_interval_s, 60);
	assert_int_equal(cfg.gc_grace_s, 600);
	assert_true(cfg.auth);
	assert_null(cfg.cluster_key_file);
	assert_null(cfg.tls_cert);
	assert_null(cfg.tls_server_name);
}

static void test_values(void **state)
{
	(void)state;
	setenv("ZIPLINE_ETCD", "http://env:2379", 1);
	assert_int_equal(
	    parse("--data-dir", "/d", "--listen", "[::]:7200", "--advertise", "a", "--node-id",
		  "n1", "--label", "zone=a", "--label", "rack=r1", "--etcd-prefix", "/p/",
		  "--etcd-wait", "0", "--transport", "tcp", "--capacity", "2G", "--heal", "off",
		  "--repl-wait", "3", "--recovery-mbps", "7", "--scrub-mbps", "9",
		  "--scrub-interval", "0", "--gc-interval", "0", "--gc-grace", "5", "--auth", "off",
		  "--cluster-key-file", "/k", "--tls-cert", "/dev/null", "--tls-key", "/dev/null",
		  "--tls-ca", "/dev/null", "--tls-server-name", "s", NULL),
	    0);
	unsetenv("ZIPLINE_ETCD");
	assert_string_equal(cfg.listen_host, "[::]");
	assert_int_equal(cfg.listen_port, 7200);
	assert_string_equal(node_flag, "n1");
	assert_string_equal(cfg.domain, "zone=a,rack=r1");
	assert_string_equal(cfg.eo.endpoints, "http://env:2379");
	assert_string_equal(cfg.prefix, "/p/");
	assert_int_equal(cfg.etcd_wait_sec, 0);
	assert_string_equal(cfg.transport, "tcp");
	assert_true(cfg.capacity == 2ull << 30);
	assert_false(cfg.heal);
	assert_int_equal(cfg.repl_wait_ms, 3000);
	assert_int_equal(cfg.recovery_mbps, 7);
	assert_int_equal(cfg.scrub_mbps, 9);
	assert_int_equal(cfg.scrub_interval_s, 0);
	assert_int_equal(cfg.gc_interval_s, 0);
	assert_int_equal(cfg.gc_grace_s, 5);
	assert_false(cfg.auth);
	assert_string_equal(cfg.cluster_key_file, "/k");
	assert_string_equal(cfg.tls_ca, "/dev/null");
	assert_string_equal(cfg.tls_server_name, "s");
}

static void test_refused(void **state)
{
	(void)state;
	/* Each is refused with one line on stderr (its wording: cfg_test). */
	assert_int_equal(parse("--advertise", "a", NULL), -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--listen", "h:70000", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--label", "a,b=c", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--repl-wait", "0", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--scrub-mbps", "0", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--heal", "maybe", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--capacity", "0", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(
	    parse("--data-dir", "/d", "--advertise", "a", "--tls-cert", "/dev/null", NULL),
	    -ZL_ERR_INVAL);
	assert_int_equal(parse("--data-dir", "/d", "--advertise", "a", "--etcd-user", "u", NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(parse("--version", NULL), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_values),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
