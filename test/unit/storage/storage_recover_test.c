/* The version rules recovery relies on (storage.h, --heal=on): versions
 * order by term first; a pushed copy applies only over an older copy; a
 * chunk copy labels the chunk only with its last piece, so a copy cut short
 * (a crash, a restart) leaves the old version and is copied again; a
 * forwarded write of version 0 leaves the chunk's version alone. Checked on
 * a real chunk store under the build directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/storage.h"

#define CS (256u << 10)
#define PIECE (64u << 10)
#define VOL 0xfeed0001ull

struct env {
	char dir[512];
	struct zl_loop *loop;
	struct zl_chunk_store *s;
	uint8_t *buf;
};

static void *t_alloc(void *arg, size_t len)
{
	void *p = NULL;

	(void)arg;
	return posix_memalign(&p, 4096, ZL_ALIGN_UP(len, 4096)) ? NULL : p;
}

static void t_free(void *arg, void *p)
{
	(void)arg;
	free(p);
}

static void env_open(struct env *e)
{
	struct zl_chunk_store_opts o = {
	    .data_dir = e->dir, .loop = e->loop, .buf_alloc = t_alloc, .buf_free = t_free};

	assert_int_equal(zl_chunk_store_create(&o, &e->s), 0);
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *base = getenv("ZL_BUILD_DIR");

	snprintf(e->dir, sizeof(e->dir), "%s/recover-test.XXXXXX", base ? base : ".");
	assert_non_null(mkdtemp(e->dir));
	assert_int_equal(zl_loop_create(&e->loop), 0);
	env_open(e);
	e->buf = t_alloc(NULL, CS);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	char cmd[600];

	zl_chunk_store_destroy(e->s);
	zl_loop_destroy(e->loop);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
	assert_int_equal(system(cmd), 0);
	free(e->buf);
	free(e);
	return 0;
}

static void done_cb(void *arg, int status)
{
	int *d = arg;

	*d = status == 0 ? 1 : -1;
}

static void write_at(struct env *e, uint32_t off, uint32_t len, uint8_t fill, uint64_t ver)
{
	uint64_t deadline = zl_now_ms() + 20000;
	int d = 0;

	memset(e->buf, fill, len);
	assert_int_equal(zl_chunk_write(e->s, VOL, 0, CS, off, len, e->buf, ver, done_cb, &d), 0);
	while (!d && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(d, 1);
}

static uint64_t version_of(struct env *e)
{
	uint64_t v = 0;

	assert_int_equal(zl_chunk_version(e->s, VOL, 0, CS, &v), 0);
	return v;
}

/* One piece of a chunk copy as the CHUNK_PUSH handler applies it. */
static bool push_piece(struct env *e, uint32_t off, uint8_t fill, uint64_t pushed)
{
	if (!zl_storage_push_applies(version_of(e), pushed))
		return false;
	write_at(e, off, PIECE, fill, zl_storage_push_piece_version(off, PIECE, CS, pushed));
	return true;
}

static void test_version_order(void **state)
{
	(void)state;
	assert_true(zl_wire_dver_make(1, 2) < zl_wire_dver_make(1, 3));
	assert_true(zl_wire_dver_make(1, UINT32_MAX) < zl_wire_dver_make(2, 1));
	assert_true(zl_storage_push_applies(0, zl_wire_dver_make(1, 1)));
	assert_true(zl_storage_push_applies(zl_wire_dver_make(1, 9), zl_wire_dver_make(2, 1)));
	assert_false(zl_storage_push_applies(zl_wire_dver_make(2, 1), zl_wire_dver_make(2, 1)));
	assert_false(zl_storage_push_applies(zl_wire_dver_make(2, 2), zl_wire_dver_make(1, 50)));
	assert_int_equal(zl_storage_push_piece_version(0, PIECE, CS, 77), 0);
	assert_int_equal(zl_storage_push_piece_version(CS - PIECE, PIECE, CS, 77), 77);
}

static void test_push_on_chunk_store(void **state)
{
	struct env *e = *state;
	uint64_t a = zl_wire_dver_make(1, 5), b = zl_wire_dver_make(2, 3);

	write_at(e, 0, CS, 0x11, a);
	assert_true(version_of(e) == a);

	/* A copy of version b cut short after two pieces: the chunk still says
	 * a, also after the store is reopened (a restart), so it is copied
	 * again. */
	assert_true(push_piece(e, 0, 0x22, b));
	assert_true(push_piece(e, PIECE, 0x22, b));
	assert_true(version_of(e) == a);
	zl_chunk_store_destroy(e->s);
	env_open(e);
	assert_true(version_of(e) == a);

	/* The whole copy labels the chunk b. */
	for (uint32_t off = 0; off < CS; off += PIECE)
		assert_true(push_piece(e, off, 0x22, b));
	assert_true(version_of(e) == b);

	/* Neither the same copy again nor an older one applies. */
	assert_false(push_piece(e, 0, 0x33, b));
	assert_false(push_piece(e, 0, 0x33, a));

	/* A forwarded write of version 0 (copy not known complete) keeps b; a
	 * numbered one raises it. */
	write_at(e, 4096, 4096, 0x44, 0);
	assert_true(version_of(e) == b);
	write_at(e, 4096, 4096, 0x55, b + 1);
	assert_true(version_of(e) == b + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_version_order),
	    cmocka_unit_test_setup_teardown(test_push_on_chunk_store, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
