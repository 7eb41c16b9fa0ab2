/* Default-route parsing and the advertised-address choice of
 * storage/storage_addr.c. The real-interface path (a namespace with a veth
 * and a default route) runs in test/e2e/storage_e2e.sh. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/storage_ctl.h"

static const char route4[] =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    "eth1\t00000000\t010200C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
    "wlan0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "down0\t00000000\t0101A8C0\t0002\t0\t0\t1\t00000000\t0\t0\t0\n";

static const char route6[] =
    "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n";

static int parse(const char *text, bool v6, char *ifname)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int rc;

	assert_non_null(f);
	rc = zl_storage_route_default_if(f, v6, ifname);
	fclose(f);
	return rc;
}

static void test_default_route_v4(void **state)
{
	char ifn[IF_NAMESIZE] = "";

	(void)state;
	/* lowest metric among up default routes; the down one is skipped */
	assert_int_equal(parse(route4, false, ifn), 0);
	assert_string_equal(ifn, "wlan0");
	/* only a connected route: no default */
	assert_int_equal(parse("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
			       "eth1\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			       false, ifn),
			 -ENOENT);
	assert_int_equal(parse("", false, ifn), -ENOENT);
}

static void test_default_route_v6(void **state)
{
	char ifn[IF_NAMESIZE] = "";

	(void)state;
	/* the reject route on lo is not a default route */
	assert_int_equal(parse(route6, true, ifn), 0);
	assert_string_equal(ifn, "eth0");
}

static char tmp_dir[64];

static const char *tmp_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_advertise_pick(void **state)
{
	char out[64], r4[128], r6[128];

	(void)state;
	snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/zl-addr-test.XXXXXX");
	assert_non_null(mkdtemp(tmp_dir));
	/* a concrete listen address is advertised as is */
	assert_int_equal(
	    zl_storage_advertise_pick("10.1.2.3", "/nonexistent", "/nonexistent", out, sizeof(out)),
	    0);
	assert_string_equal(out, "10.1.2.3");
	assert_int_equal(zl_storage_advertise_pick("10.1.2.3", NULL, NULL, out, 4), -ENAMETOOLONG);
	/* wildcard without a default route: refused, never 127.0.0.1 */
	snprintf(r4, sizeof(r4), "%s",
		 tmp_file("route", "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\t"
				   "Mask\n"));
	snprintf(r6, sizeof(r6), "%s", tmp_file("route6", ""));
	out[0] = 0;
	assert_int_equal(zl_storage_advertise_pick("0.0.0.0", r4, r6, out, sizeof(out)), -ENOENT);
	assert_int_equal(zl_storage_advertise_pick("::", r4, r6, out, sizeof(out)), -ENOENT);
	/* a default route on an interface that does not exist here */
	snprintf(r4, sizeof(r4), "%s", tmp_file("route", route4));
	assert_int_equal(zl_storage_advertise_pick("0.0.0.0", r4, r6, out, sizeof(out)), -ENOENT);
	assert_true(zl_storage_host_is_wildcard("[::]"));
	assert_false(zl_storage_host_is_wildcard("127.0.0.1"));
	unlink(r4);
	unlink(r6);
	rmdir(tmp_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_route_v4),
	    cmocka_unit_test(test_default_route_v6),
	    cmocka_unit_test(test_advertise_pick),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
