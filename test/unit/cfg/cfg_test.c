/* lib/cfg: the flag tables, --help layout, the one error style and the
 * shared etcd options. Error lines are read back from stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "lib/cfg/cfg.h"
#include "lib/common/common.h"

struct opts {
	const char *name;
	bool on;
	bool opt_on;
	bool set;
	unsigned int secs;
	unsigned int ms;
	const char *file;
	const char *word;
};

static struct opts o;
static char err_text[1024];
static int saved_fd = -1;
static FILE *err_file;

static void err_begin(void)
{
	fflush(stderr);
	err_file = tmpfile();
	assert_non_null(err_file);
	saved_fd = dup(2);
	assert_true(saved_fd >= 0);
	assert_true(dup2(fileno(err_file), 2) >= 0);
}

static const char *err_end(void)
{
	size_t n;

	fflush(stderr);
	assert_true(dup2(saved_fd, 2) >= 0);
	close(saved_fd);
	rewind(err_file);
	n = fread(err_text, 1, sizeof(err_text) - 1, err_file);
	err_text[n] = 0;
	fclose(err_file);
	return err_text;
}

static int word_parse(const char *value, void *target, const char **why)
{
	if (strcmp(value, "a") && strcmp(value, "b")) {
		*why = "not a or b; pass a or b";
		return -ZL_ERR_INVAL;
	}
	*(const char **)target = value;
	return 0;
}

static const struct zl_cfg_flag flags[] = {
    {.name = "name", .arg = "N", .type = ZL_CFG_STR, .target = &o.name, .help = "a name"},
    {.name = "on",
     .arg = "on|off",
     .type = ZL_CFG_BOOL,
     .target = &o.on,
     .help = "a switch\nsecond line"},
    {.name = "opt",
     .arg = "[=on|off]",
     .type = ZL_CFG_BOOL,
     .optional = true,
     .target = &o.opt_on,
     .help = "optional switch"},
    {.name = "set", .type = ZL_CFG_SET, .target = &o.set, .help = "sets"},
    {.name = "no-set", .type = ZL_CFG_CLEAR, .target = &o.set, .help = "clears"},
    {.name = "secs",
     .arg = "SEC",
     .type = ZL_CFG_UINT,
     .target = &o.secs,
     .min = 1,
     .max = 10,
     .unit = "seconds",
     .help = "seconds"},
    {.name = "wait",
     .arg = "SEC",
     .type = ZL_CFG_UINT,
     .target = &o.ms,
     .max = 5,
     .scale = 1000,
     .unit = "seconds",
     .help = "in ms"},
    {.name = "a-very-long-flag-name",
     .arg = "FILE",
     .type = ZL_CFG_FILE,
     .target = &o.file,
     .help = "long"},
    {.name = "word",
     .arg = "W",
     .type = ZL_CFG_CALL,
     .target = &o.word,
     .parse = word_parse,
     .help = "a or b"},
    {0},
};
static const struct zl_cfg_flag *const tables[] = {flags, NULL};
static const struct zl_cfg cli = {
    .prog = "zipline-test", .usage = "usage: t\n", .col = 16, .tables = tables};

static int parse(const char *first, ...)
{
	char *argv[16] = {"zipline-test"};
	int argc = 1;
	va_list ap;

	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		assert_true(argc < 15);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	memset(&o, 0, sizeof(o));
	return zl_cfg_parse(&cli, argc, argv);
}

static void test_types(void **state)
{
	(void)state;
	assert_int_equal(parse("--name", "x", "--on", "off", "--opt", "--set", "--secs", "10",
			       "--wait=5", "--a-very-long-flag-name", "/dev/null", "--word", "b",
			       NULL),
			 0);
	assert_string_equal(o.name, "x");
	assert_false(o.on);
	assert_true(o.opt_on);
	assert_true(o.set);
	assert_int_equal(o.secs, 10);
	assert_int_equal(o.ms, 5000);
	assert_string_equal(o.file, "/dev/null");
	assert_string_equal(o.word, "b");
	assert_int_equal(parse("--on", "yes", "--opt=off", "--set", "--no-set", NULL), 0);
	assert_true(o.on);
	assert_false(o.opt_on);
	assert_false(o.set);
	assert_int_equal(parse(NULL), 0);
}

/* want NULL: the caller checks err_text itself. */
static void expect_err(int rc, const char *want)
{
	const char *got = err_end();

	assert_int_equal(rc, -ZL_ERR_INVAL);
	if (want && strcmp(got, want))
		fail_msg("stderr\n  got: %s want: %s", got, want);
}

static void test_errors(void **state)
{
	(void)state;
	err_begin();
	expect_err(parse("--on", "maybe", NULL),
		   "zipline-test: --on 'maybe': not on or off; pass --on=on or --on=off\n");
	err_begin();
	expect_err(parse("--secs", "0", NULL),
		   "zipline-test: --secs '0': not a number of seconds in 1..10; pass one in "
		   "that range\n");
	err_begin();
	expect_err(parse("--secs", "11", NULL),
		   "zipline-test: --secs '11': not a number of seconds in 1..10; pass one in "
		   "that range\n");
	err_begin();
	expect_err(parse("--secs", "-1", NULL),
		   "zipline-test: --secs '-1': not a number of seconds in 1..10; pass one in "
		   "that range\n");
	err_begin();
	expect_err(parse("--secs", "3x", NULL),
		   "zipline-test: --secs '3x': not a number of seconds in 1..10; pass one in "
		   "that range\n");
	err_begin();
	expect_err(parse("--word", "c", NULL),
		   "zipline-test: --word 'c': not a or b; pass a or b\n");
	err_begin();
	expect_err(parse("--bogus", NULL),
		   "zipline-test: --bogus: unknown flag; see zipline-test --help\n");
	err_begin();
	expect_err(parse("--name", NULL), "zipline-test: --name: needs a value; see "
					  "zipline-test --help\n");
	err_begin();
	expect_err(parse("stray", NULL), "zipline-test: 'stray': unexpected argument (flags "
					 "start with --); see zipline-test --help\n");
	err_begin();
	expect_err(parse("--a-very-long-flag-name", "/nonexistent/f", NULL),
		   "zipline-test: --a-very-long-flag-name '/nonexistent/f': cannot read it (No "
		   "such file or directory); check the path and its permissions\n");
}

static void test_usage(void **state)
{
	char buf[2048] = {0};
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

	(void)state;
	assert_non_null(f);
	zl_cfg_usage(&cli, f);
	fclose(f);
	assert_string_equal(buf, "usage: t\n"
				 "  --name N      a name\n"
				 "  --on on|off   a switch\n"
				 "                second line\n"
				 "  --opt[=on|off]  optional switch\n"
				 "  --set         sets\n"
				 "  --no-set      clears\n"
				 "  --secs SEC    seconds\n"
				 "  --wait SEC    in ms\n"
				 "  --a-very-long-flag-name FILE  long\n"
				 "  --word W      a or b\n"
				 "  --version     print the version and exit\n"
				 "  --help        print this help and exit\n");
}

static void test_help_version(void **state)
{
	(void)state;
	/* Printed on stdout; only the result is checked here. */
	assert_int_equal(parse("--version", NULL), 1);
	assert_int_equal(parse("--help", NULL), 1);
}

static void test_csi_endpoint(void **state)
{
	(void)state;
	assert_int_equal(zl_cfg_csi_endpoint_check(&cli, "unix:///run/csi.sock"), 0);
	assert_int_equal(zl_cfg_csi_endpoint_check(&cli, "unix:/run/csi.sock"), 0);
	err_begin();
	expect_err(zl_cfg_csi_endpoint_check(&cli, NULL),
		   "zipline-test: --endpoint: not given; pass --endpoint "
		   "unix:///path/csi.sock or set CSI_ENDPOINT\n");
	err_begin();
	expect_err(zl_cfg_csi_endpoint_check(&cli, ""),
		   "zipline-test: --endpoint: not given; pass --endpoint "
		   "unix:///path/csi.sock or set CSI_ENDPOINT\n");
	err_begin();
	expect_err(zl_cfg_csi_endpoint_check(&cli, "tcp://h:1"),
		   "zipline-test: --endpoint 'tcp://h:1': not unix:///path; CSI allows UNIX "
		   "sockets only\n");
	err_begin();
	expect_err(zl_cfg_csi_endpoint_check(&cli, "unix://rel.sock"),
		   "zipline-test: --endpoint 'unix://rel.sock': no absolute socket path; pass "
		   "unix:///path/csi.sock\n");
}

static int etcd_parse(struct zl_cfg_etcd *e, const char *first, ...)
{
	const struct zl_cfg_flag *const t[] = {e->flags, NULL};
	const struct zl_cfg c = {.prog = "zipline-test", .usage = "", .col = 16, .tables = t};
	char *argv[16] = {"zipline-test"};
	int argc = 1, rc;
	va_list ap;

	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		assert_true(argc < 15);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	rc = zl_cfg_parse(&c, argc, argv);
	return rc ? rc : zl_cfg_etcd_check(&c, e);
}

static void test_etcd(void **state)
{
	char pwfile[] = "/tmp/zl_cfg_test_pw_XXXXXX";
	struct zl_etcd_opts eo = {.timeout_ms = 7};
	struct zl_cfg_etcd e;
	int fd;

	(void)state;
	unsetenv("ZIPLINE_ETCD");
	zl_cfg_etcd_init(&e, false);
	assert_int_equal(etcd_parse(&e, NULL), 0);
	assert_string_equal(e.endpoints, ZL_CFG_ETCD_DEFAULT);
	assert_string_equal(e.prefix, "/zipline/");
	/* An empty --etcd means not given. */
	setenv("ZIPLINE_ETCD", "http://env:2379", 1);
	zl_cfg_etcd_init(&e, false);
	assert_int_equal(etcd_parse(&e, "--etcd", "", "--etcd-prefix", "/p/", NULL), 0);
	assert_string_equal(e.endpoints, "http://env:2379");
	assert_string_equal(e.prefix, "/p/");
	unsetenv("ZIPLINE_ETCD");

	zl_cfg_etcd_init(&e, true);
	err_begin();
	expect_err(etcd_parse(&e, NULL), "zipline-test: --etcd: not given; pass --etcd "
					 "http://HOST:2379 or set ZIPLINE_ETCD\n");
	zl_cfg_etcd_init(&e, true);
	err_begin();
	expect_err(etcd_parse(&e, "--etcd", "h:1", "--etcd-prefix", "p", NULL),
		   "zipline-test: --etcd-prefix 'p': not a key prefix; pass one that ends with "
		   "'/' and is shorter than 100 bytes (default /zipline/)\n");
	zl_cfg_etcd_init(&e, true);
	err_begin();
	expect_err(etcd_parse(&e, "--etcd", "h:1", "--etcd-cert", "/dev/null", NULL),
		   "zipline-test: --etcd-cert: needs --etcd-key too; pass both or neither\n");
	zl_cfg_etcd_init(&e, true);
	err_begin();
	expect_err(etcd_parse(&e, "--etcd", "h:1", "--etcd-user", "u", NULL),
		   "zipline-test: --etcd-user: needs --etcd-password-file too; pass both or "
		   "neither\n");

	fd = mkstemp(pwfile);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "\n", 1), 1);
	zl_cfg_etcd_init(&e, true);
	err_begin();
	expect_err(etcd_parse(&e, "--etcd", "h:1", "--etcd-user", "u", "--etcd-password-file",
			      pwfile, NULL),
		   NULL);
	assert_non_null(strstr(err_text, "zipline-test: --etcd-password-file '/tmp/zl_cfg_"));
	assert_non_null(strstr(err_text, "': its first line is empty; put the etcd password "
					 "there\n"));
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(pwrite(fd, "s3cret\nignored\n", 15, 0), 15);
	close(fd);
	zl_cfg_etcd_init(&e, true);
	assert_int_equal(etcd_parse(&e, "--etcd", "h:1", "--etcd-user", "u", "--etcd-password-file",
				    pwfile, "--etcd-cacert", "/dev/null", "--etcd-cert",
				    "/dev/null", "--etcd-key", "/dev/null", NULL),
			 0);
	unlink(pwfile);
	zl_cfg_etcd_opts(&e, &eo);
	assert_string_equal(eo.endpoints, "h:1");
	assert_string_equal(eo.user, "u");
	assert_string_equal(eo.password, "s3cret");
	assert_string_equal(eo.cacert, "/dev/null");
	assert_string_equal(eo.cert, "/dev/null");
	assert_string_equal(eo.key, "/dev/null");
	assert_int_equal(eo.timeout_ms, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_types),	 cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_usage),	 cmocka_unit_test(test_help_version),
	    cmocka_unit_test(test_csi_endpoint), cmocka_unit_test(test_etcd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
