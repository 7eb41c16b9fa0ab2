/* csi-node/node_state.c: the state.json codec, state files on disk and the
 * per-volume operation locks. */
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

static void fill(struct node_vol_state *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->volume_id, sizeof(st->volume_id), "vol-0123456789abcdef");
	snprintf(st->staging, sizeof(st->staging), "/var/lib/kubelet/plugins/x/globalmount");
	snprintf(st->fs_type, sizeof(st->fs_type), "xfs");
	snprintf(st->mount_flags, sizeof(st->mount_flags), "noatime,discard");
	snprintf(st->loop, sizeof(st->loop), "/dev/loop7");
	snprintf(st->prefix, sizeof(st->prefix), "/zl/");
	st->pid = 4242;
	st->epoch = 1ull << 40;
	st->size = 5ull << 30;
	st->staged = true;
	st->stage_ro = true;
	st->n_targets = 2;
	snprintf(st->targets[0].path, sizeof(st->targets[0].path), "/pods/a/vol \"quoted\"");
	snprintf(st->targets[1].path, sizeof(st->targets[1].path), "/pods/b/vol");
	st->targets[1].readonly = true;
}

static void test_roundtrip(void **state)
{
	struct node_vol_state a, b;
	char *json;

	fill(&a);
	json = node_state_to_json(&a);
	assert_non_null(json);
	assert_int_equal(node_state_from_json(json, &b), 0);
	free(json);
	assert_string_equal(b.volume_id, a.volume_id);
	assert_string_equal(b.staging, a.staging);
	assert_string_equal(b.fs_type, "xfs");
	assert_string_equal(b.mount_flags, a.mount_flags);
	assert_string_equal(b.loop, "/dev/loop7");
	assert_string_equal(b.prefix, "/zl/");
	assert_int_equal(b.pid, 4242);
	assert_true(b.epoch == a.epoch && b.size == a.size);
	assert_true(b.staged && b.stage_ro && !b.block);
	assert_int_equal(b.n_targets, 2);
	assert_string_equal(b.targets[0].path, a.targets[0].path);
	assert_false(b.targets[0].readonly);
	assert_true(b.targets[1].readonly);

	a.block = true;
	a.n_targets = 0;
	json = node_state_to_json(&a);
	assert_int_equal(node_state_from_json(json, &b), 0);
	free(json);
	assert_true(b.block);
	assert_int_equal(b.n_targets, 0);
	assert_int_equal(b.frontend, NODE_FRONTEND_FUSE);

	/* The frontend survives the round trip; a state without the field
	 * (written before the nbd frontend existed) is FUSE. */
	a.frontend = NODE_FRONTEND_NBD;
	snprintf(a.loop, sizeof(a.loop), "/dev/nbd3");
	json = node_state_to_json(&a);
	assert_non_null(strstr(json, "\"frontend\": \"nbd\""));
	assert_int_equal(node_state_from_json(json, &b), 0);
	free(json);
	assert_int_equal(b.frontend, NODE_FRONTEND_NBD);
	assert_string_equal(b.loop, "/dev/nbd3");
	assert_int_equal(node_state_from_json("{\"volume_id\": \"vol-0123456789abcdef\", "
					      "\"staging_path\": \"/s\", \"mode\": \"mount\"}",
					      &b),
			 0);
	assert_int_equal(b.frontend, NODE_FRONTEND_FUSE);
	assert_int_equal(node_state_from_json("{\"volume_id\": \"vol-0123456789abcdef\", "
					      "\"staging_path\": \"/s\", \"mode\": \"mount\", "
					      "\"frontend\": 7}",
					      &b),
			 0);
	assert_int_equal(b.frontend, NODE_FRONTEND_FUSE);
	assert_int_equal(b.ublk_id, -1);

	/* ublk: the device id a --recover takes survives too; a frontend
	 * this node does not know is a damaged state, not FUSE. */
	a.frontend = NODE_FRONTEND_UBLK;
	a.ublk_id = 0;
	snprintf(a.loop, sizeof(a.loop), "/dev/ublkb0");
	json = node_state_to_json(&a);
	assert_non_null(strstr(json, "\"frontend\": \"ublk\""));
	assert_non_null(strstr(json, "\"ublk_id\": 0"));
	assert_int_equal(node_state_from_json(json, &b), 0);
	free(json);
	assert_int_equal(b.frontend, NODE_FRONTEND_UBLK);
	assert_int_equal(b.ublk_id, 0);
	assert_string_equal(b.loop, "/dev/ublkb0");
	assert_int_equal(node_state_from_json("{\"volume_id\": \"vol-0123456789abcdef\", "
					      "\"staging_path\": \"/s\", \"mode\": \"mount\", "
					      "\"frontend\": \"spdk\"}",
					      &b),
			 -ZL_ERR_INVAL);
}

static void test_frontend_names(void **state)
{
	enum node_frontend f = NODE_FRONTEND_NBD;

	(void)state;
	assert_int_equal(node_frontend_parse("auto", &f), 1);
	assert_int_equal(f, NODE_FRONTEND_NBD); /* untouched */
	for (int i = NODE_FRONTEND_FUSE; i <= NODE_FRONTEND_UBLK; i++) {
		assert_int_equal(node_frontend_parse(node_frontend_name(i), &f), 0);
		assert_int_equal(f, i);
	}
	assert_string_equal(node_frontend_name(NODE_FRONTEND_UBLK), "ublk");
	assert_int_equal(node_frontend_parse("UBLK", &f), -ZL_ERR_INVAL);
	assert_int_equal(node_frontend_parse("", &f), -ZL_ERR_INVAL);
}

static void test_malformed(void **state)
{
	struct node_vol_state st;

	assert_int_equal(node_state_from_json("", &st), -ZL_ERR_INVAL);
	assert_int_equal(node_state_from_json("[]", &st), -ZL_ERR_INVAL);
	/* no volume id */
	assert_int_equal(node_state_from_json("{\"staging_path\":\"/a\",\"mode\":\"mount\"}", &st),
			 -ZL_ERR_INVAL);
	/* bad mode */
	assert_int_equal(node_state_from_json("{\"volume_id\":\"vol-0123456789abcdef\","
					      "\"staging_path\":\"/a\",\"mode\":\"tape\"}",
					      &st),
			 -ZL_ERR_INVAL);
	/* targets not an array, target without path */
	assert_int_equal(node_state_from_json("{\"volume_id\":\"vol-0123456789abcdef\","
					      "\"staging_path\":\"/a\",\"mode\":\"block\","
					      "\"targets\":{}}",
					      &st),
			 -ZL_ERR_INVAL);
	assert_int_equal(node_state_from_json("{\"volume_id\":\"vol-0123456789abcdef\","
					      "\"staging_path\":\"/a\",\"mode\":\"block\","
					      "\"targets\":[{\"readonly\":true}]}",
					      &st),
			 -ZL_ERR_INVAL);
	assert_int_equal(node_state_from_json("{\"volume_id\":\"vol-0123456789abcdef\","
					      "\"staging_path\":\"/a\",\"mode\":\"block\"}",
					      &st),
			 0);
	assert_true(st.block);
}

static void test_files(void **state)
{
	char dir[] = "/tmp/zl-node-state-XXXXXX";
	struct node n = {0};
	struct node_vol_state a, b;
	char path[NODE_PATH_MAX];

	assert_non_null(mkdtemp(dir));
	n.cfg.state_dir = dir;
	fill(&a);
	assert_int_equal(node_state_load(&n, a.volume_id, &b), -ENOENT);
	assert_int_equal(node_vol_dir(&n, a.volume_id, path, sizeof(path)), 0);
	assert_int_equal(node_mkdir_p(path), 0);
	assert_int_equal(node_state_save(&n, &a), 0);
	assert_int_equal(node_state_load(&n, a.volume_id, &b), 0);
	assert_string_equal(b.staging, a.staging);
	assert_int_equal(node_state_remove(&n, a.volume_id), 0);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(node_state_load(&n, a.volume_id, &b), -ENOENT);
	assert_int_equal(node_vol_file(&n, a.volume_id, "state.json", path, 8), -ENAMETOOLONG);
	assert_int_equal(rmdir(dir), 0);
}

static void test_oplocks(void **state)
{
	static struct node n;

	pthread_mutex_init(&n.ops.lock, NULL);
	assert_int_equal(node_op_begin(&n, "vol-0000000000000001"), 0);
	assert_int_equal(node_op_begin(&n, "vol-0000000000000001"), -ZL_ERR_BUSY);
	assert_int_equal(node_op_begin(&n, "vol-0000000000000002"), 0);
	node_op_end(&n, "vol-0000000000000001");
	assert_int_equal(node_op_begin(&n, "vol-0000000000000001"), 0);
	node_op_end(&n, "vol-0000000000000001");
	node_op_end(&n, "vol-0000000000000002");
	/* The table is bounded: beyond it, operations are refused, not lost. */
	for (int i = 0; i < 64; i++) {
		char id[32];

		snprintf(id, sizeof(id), "vol-%016x", i + 16);
		assert_int_equal(node_op_begin(&n, id), 0);
	}
	assert_int_equal(node_op_begin(&n, "vol-0000000000000003"), -ZL_ERR_BUSY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_frontend_names),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_files),
	    cmocka_unit_test(test_oplocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
