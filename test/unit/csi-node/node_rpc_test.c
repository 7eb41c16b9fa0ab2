/* csi-node/node_rpc.c: capability checks, map lookup, volume ids, and the
 * method table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "csi-node/node.h"
#include "csi.pb-c.h"

static Csi__V1__VolumeCapability__AccessMode am = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
static Csi__V1__VolumeCapability__MountVolume mv = CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT;
static Csi__V1__VolumeCapability__BlockVolume bv = CSI__V1__VOLUME_CAPABILITY__BLOCK_VOLUME__INIT;

static Csi__V1__VolumeCapability mount_cap(int mode, const char *fs)
{
	Csi__V1__VolumeCapability c = CSI__V1__VOLUME_CAPABILITY__INIT;

	am.mode = mode;
	mv.fs_type = (char *)fs;
	mv.n_mount_flags = 0;
	c.access_mode = &am;
	c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
	c.mount = &mv;
	return c;
}

static void test_cap(void **state)
{
	Csi__V1__VolumeCapability c;
	struct node_cap nc;
	char msg[256];
	char *flags[] = {"noatime", "", "discard"};
	char *bad[] = {"a b"};

	c = mount_cap(1, "");
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), 0);
	assert_string_equal(nc.fs_type, "ext4");
	assert_false(nc.block || nc.ro_mode);
	c = mount_cap(2, "xfs");
	mv.mount_flags = flags;
	mv.n_mount_flags = 3;
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), 0);
	assert_string_equal(nc.fs_type, "xfs");
	assert_string_equal(nc.flags, "noatime,discard");
	assert_true(nc.ro_mode);
	mv.mount_flags = bad;
	mv.n_mount_flags = 1;
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
	c = mount_cap(1, "vfat");
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "vfat"));
	c = mount_cap(5, "ext4"); /* multi-node writer on ext4 */
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
	c = mount_cap(0, "ext4");
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "access_mode"));
	assert_int_equal(node_cap_parse(NULL, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
	c = mount_cap(5, "");
	c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
	c.block = &bv;
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), 0); /* block may be shared */
	assert_true(nc.block);
	c.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET;
	assert_int_equal(node_cap_parse(&c, &nc, msg, sizeof(msg)), ZL_GRPC_INVALID_ARGUMENT);
}

static void test_map_ids(void **state)
{
	Csi__V1__NodeStageVolumeRequest__PublishContextEntry e1 =
	    CSI__V1__NODE_STAGE_VOLUME_REQUEST__PUBLISH_CONTEXT_ENTRY__INIT;
	Csi__V1__NodeStageVolumeRequest__PublishContextEntry e2 =
	    CSI__V1__NODE_STAGE_VOLUME_REQUEST__PUBLISH_CONTEXT_ENTRY__INIT;
	void *entries[] = {&e1, &e2};

	e1.key = "epoch";
	e1.value = "17";
	e2.key = "token";
	e2.value = "abcd";
	assert_string_equal(node_map_get(entries, 2, "token"), "abcd");
	assert_string_equal(node_map_get(entries, 2, "epoch"), "17");
	assert_null(node_map_get(entries, 2, "etcdPrefix"));
	assert_null(node_map_get(NULL, 0, "epoch"));

	assert_int_equal(node_check_vol_id("vol-0123456789abcdef"), 0);
	assert_int_equal(node_check_vol_id("vol-0123"), -ZL_ERR_INVAL);
	assert_int_equal(node_check_vol_id("../etc"), -ZL_ERR_INVAL);
	assert_int_equal(node_check_vol_id(""), -ZL_ERR_INVAL);
}

static void test_methods(void **state)
{
	size_t inline_n = 0;

	assert_int_equal(node_n_methods, 11);
	for (size_t i = 0; i < node_n_methods; i++) {
		assert_non_null(node_methods[i].fn);
		assert_true(strncmp(node_methods[i].name, "/csi.v1.", 8) == 0);
		if (node_methods[i].flags & ZL_GRPC_METHOD_INLINE)
			inline_n++;
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(node_methods[i].name, node_methods[j].name);
	}
	/* Only the cheap, non-blocking ones run on the completion queue. */
	assert_int_equal(inline_n, 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap),
	    cmocka_unit_test(test_map_ids),
	    cmocka_unit_test(test_methods),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
