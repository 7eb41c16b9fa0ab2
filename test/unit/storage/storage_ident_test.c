/* Identity of a data dir (storage/storage_ident.c): the identity file's codec
 * and atomic write, chunk-file detection, the incarnation an adopted 0.1
 * data dir keeps, and the membership hook of storage_server.c. Start-up
 * against a real etcd (refusal, new incarnation, backfill) runs in
 * test/e2e/emptydisk_e2e.sh. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/storage_ctl.h"

#define CID  "0123456789abcdef0123456789abcdef"
#define INC  "fedcba9876543210fedcba9876543210"
#define INC2 "00000000000000000000000000000001"

static void ident_json_roundtrip(void **state)
{
	struct zl_storage_ident a = {
	    .cluster_id = CID, .node_id = "node-1", .incarnation = INC, .created = 1700000000};
	struct zl_storage_ident b;
	char *j = zl_storage_ident_to_json(&a);

	(void)state;
	assert_non_null(j);
	assert_int_equal(zl_storage_ident_from_json(j, strlen(j), &b), 0);
	assert_string_equal(b.cluster_id, CID);
	assert_string_equal(b.node_id, "node-1");
	assert_string_equal(b.incarnation, INC);
	assert_int_equal(b.created, 1700000000);
	free(j);
	/* Invalid identities are neither written nor read. */
	a.cluster_id[0] = 'X';
	assert_null(zl_storage_ident_to_json(&a));
	static const char *bad[] = {
	    "",
	    "[]",
	    "{}",
	    "not json",
	    "{\"cluster_id\":\"" CID "\",\"node_id\":\"n\"}",
	    "{\"cluster_id\":\"" CID "\",\"node_id\":\"n\",\"incarnation\":\"abc\"}",
	    "{\"cluster_id\":\"" CID "\",\"node_id\":\"a b\",\"incarnation\":\"" INC "\"}",
	    "{\"cluster_id\":\"" CID "\",\"node_id\":\"n\",\"incarnation\":\"" INC
	    "\",\"created\":-1}",
	    "{\"cluster_id\":\"" CID "\",\"cluster_id\":\"" CID "\",\"node_id\":\"n\","
	    "\"incarnation\":\"" INC "\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(zl_storage_ident_from_json(bad[i], strlen(bad[i]), &b),
				 -ZL_ERR_INVAL);
	/* created is optional. */
	const char *ok =
	    "{\"cluster_id\":\"" CID "\",\"node_id\":\"n\",\"incarnation\":\"" INC "\"}";
	assert_int_equal(zl_storage_ident_from_json(ok, strlen(ok), &b), 0);
}

static void ident_file(void **state)
{
	char dir[] = "/tmp/zl-ident-XXXXXX", path[256];
	struct zl_storage_ident a = {.cluster_id = CID, .node_id = "node-2", .incarnation = INC};
	struct zl_storage_ident b;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(zl_storage_ident_read(dir, &b), -ENOENT);
	assert_int_equal(zl_storage_ident_has_chunks(dir), 0);
	assert_int_equal(zl_storage_ident_write(dir, &a), 0);
	assert_int_equal(zl_storage_ident_read(dir, &b), 0);
	assert_string_equal(b.incarnation, INC);
	snprintf(path, sizeof(path), "%s/identity.tmp", dir);
	assert_int_not_equal(access(path, F_OK), 0); /* renamed away */
	/* A torn identity reads as malformed, never as absent. */
	snprintf(path, sizeof(path), "%s/identity", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"cluster_id\":\"01", f);
	fclose(f);
	assert_int_equal(zl_storage_ident_read(dir, &b), -ZL_ERR_INVAL);
	unlink(path);
	/* chunks/FORMAT and an empty volume dir are not chunk files... */
	snprintf(path, sizeof(path), "%s/chunks", dir);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/chunks/FORMAT", dir);
	f = fopen(path, "w");
	fclose(f);
	snprintf(path, sizeof(path), "%s/chunks/vol-0000000000000001", dir);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(zl_storage_ident_has_chunks(dir), 0);
	/* ... a .zlc file is. */
	snprintf(path, sizeof(path), "%s/chunks/vol-0000000000000001/0000000000000000.zlc", dir);
	f = fopen(path, "w");
	fclose(f);
	assert_int_equal(zl_storage_ident_has_chunks(dir), 1);
	unlink(path);
	snprintf(path, sizeof(path), "%s/chunks/vol-0000000000000001", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/chunks/FORMAT", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/chunks", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/identity", dir);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
}

static void row(struct zl_slice *s, const char *n0, const char *i0, const char *n1, const char *i1)
{
	memset(s, 0, sizeof(*s));
	s->n = 2;
	s->version = 1;
	snprintf(s->nodes[0], sizeof(s->nodes[0]), "%s", n0);
	snprintf(s->nodes[1], sizeof(s->nodes[1]), "%s", n1);
	snprintf(s->incarnation[0], sizeof(s->incarnation[0]), "%s", i0);
	snprintf(s->incarnation[1], sizeof(s->incarnation[1]), "%s", i1);
	s->in_sync[0] = s->in_sync[1] = true;
}

static void ident_adopt_pick(void **state)
{
	struct zl_slice rows[4];
	struct zl_volume v[2] = {{.n_slices = 3, .slices = rows},
				 {.n_slices = 1, .slices = rows + 3}};
	char inc[ZL_META_ID_SIZE];
	size_t n, other;

	(void)state;
	/* 0.1 rows: no incarnation named -> a new one. */
	row(&rows[0], "a", "", "b", "");
	row(&rows[1], "b", "", "a", "");
	row(&rows[2], "c", INC, "b", INC);
	row(&rows[3], "b", "", "c", INC);
	assert_int_equal(zl_storage_ident_adopt_pick(v, 2, "a", inc, &n, &other), 0);
	assert_string_equal(inc, "");
	/* Rows name one: keep it. */
	assert_int_equal(zl_storage_ident_adopt_pick(v, 2, "c", inc, &n, &other), 1);
	assert_string_equal(inc, INC);
	assert_int_equal(n, 2);
	assert_int_equal(other, 0);
	/* Two named: the one most rows name. */
	row(&rows[0], "c", INC2, "b", "");
	row(&rows[1], "b", "", "c", INC2);
	row(&rows[3], "c", INC2, "b", "");
	assert_int_equal(zl_storage_ident_adopt_pick(v, 2, "c", inc, &n, &other), 1);
	assert_string_equal(inc, INC2);
	assert_int_equal(n, 3);
	assert_int_equal(other, 1);
	assert_int_equal(zl_storage_ident_adopt_pick(v, 0, "c", inc, NULL, NULL), 0);
}

static void ident_member_ok(void **state)
{
	static struct zl_storage st;
	struct zl_slice s;

	(void)state;
	snprintf(st.cfg.node_id, sizeof(st.cfg.node_id), "b");
	snprintf(st.cfg.incarnation, sizeof(st.cfg.incarnation), INC);
	row(&s, "a", INC2, "b", INC);
	assert_true(zl_storage_ident_member_ok(&st, &s, 1));
	assert_true(zl_storage_ident_member_ok(&st, &s, -1));
	/* The row names the incarnation of a data dir that is gone. */
	row(&s, "a", INC2, "b", INC2);
	assert_false(zl_storage_ident_member_ok(&st, &s, 1));
	/* A 0.1 row names none. */
	row(&s, "a", "", "b", "");
	assert_true(zl_storage_ident_member_ok(&st, &s, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(ident_json_roundtrip),
	    cmocka_unit_test(ident_file),
	    cmocka_unit_test(ident_adopt_pick),
	    cmocka_unit_test(ident_member_ok),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
