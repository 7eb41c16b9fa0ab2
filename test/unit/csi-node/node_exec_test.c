/* csi-node/node_exec.c: running tools without a shell, mountinfo parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "csi-node/node.h"

static void test_run(void **state)
{
	const char *ok[] = {"sh", "-c", "echo out; echo err >&2; exit 0", NULL};
	const char *three[] = {"sh", "-c", "echo failing >&2; exit 3", NULL};
	const char *missing[] = {"/nonexistent/zl-tool", NULL};
	const char *slow[] = {"sleep", "10", NULL};
	const char *chatty[] = {"sh", "-c", "yes 0123456789 | head -c 100000", NULL};
	char out[256];
	uint64_t t0;

	assert_int_equal(node_run(ok, 10000, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "out"));
	assert_non_null(strstr(out, "err"));
	assert_null(strchr(out, '\n')); /* one line for messages */
	assert_int_equal(node_run(three, 10000, out, sizeof(out)), 3);
	assert_string_equal(out, "failing");
	assert_true(node_run(missing, 10000, out, sizeof(out)) < 0);
	assert_non_null(strstr(out, "cannot run"));
	t0 = zl_now_ms();
	assert_int_equal(node_run(slow, 300, out, sizeof(out)), -ETIMEDOUT);
	assert_true(zl_now_ms() - t0 < 5000);
	assert_non_null(strstr(out, "timed out"));
	/* Output beyond the buffer is drained, not blocking the child. */
	assert_int_equal(node_run(chatty, 10000, out, sizeof(out)), 0);
	assert_true(strlen(out) < sizeof(out));
	assert_int_equal(node_run(ok, 10000, NULL, 0), 0);
}

static void test_unescape(void **state)
{
	char a[] = "/var/lib/my\\040dir\\011x\\134y";
	char b[] = "plain";
	char c[] = "\\09trail\\";

	node_mountinfo_unescape(a);
	assert_string_equal(a, "/var/lib/my dir\tx\\y");
	node_mountinfo_unescape(b);
	assert_string_equal(b, "plain");
	node_mountinfo_unescape(c);
	assert_string_equal(c, "\\09trail\\");
}

static void test_mountinfo(void **state)
{
	char src[128];

	assert_int_equal(node_mountinfo_find("/", src, sizeof(src)), 1);
	assert_true(src[0] != '\0');
	assert_int_equal(node_mountinfo_find("/proc", NULL, 0), 1);
	assert_int_equal(node_mountinfo_find("/proc/", NULL, 0), 1); /* trailing slash */
	assert_int_equal(node_mountinfo_find("/nonexistent/zl/path", NULL, 0), 0);
}

static void test_mkdir_umount(void **state)
{
	char dir[] = "/tmp/zl-node-exec-XXXXXX";
	char deep[256], msg[128] = "";

	assert_non_null(mkdtemp(dir));
	snprintf(deep, sizeof(deep), "%s/a/b/c", dir);
	assert_int_equal(node_mkdir_p(deep), 0);
	assert_int_equal(node_mkdir_p(deep), 0);
	assert_int_equal(access(deep, F_OK), 0);
	/* not mounted: nothing to do */
	assert_int_equal(node_umount_all(deep, msg, sizeof(msg)), 0);
	snprintf(deep, sizeof(deep), "rm -r %s", dir);
	assert_int_equal(system(deep), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_run),
	    cmocka_unit_test(test_unescape),
	    cmocka_unit_test(test_mountinfo),
	    cmocka_unit_test(test_mkdir_umount),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
