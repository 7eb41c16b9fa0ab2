/* The version rules recovery and peering rely on (storage_heal.h, --heal=on):
 * versions order by term first; peering's winner is the newest copy among
 * the in-sync answers (ties keep the own copy), members that differ get it;
 * a pushed copy applies only over an older copy, or with ZL_PUSH_REPLACE
 * whenever the versions differ (a newer copy is rolled back); a
 * chunk copy labels the chunk only with its last piece, so a copy cut short
 * (a crash, a restart) leaves the old version and is copied again; a
 * forwarded write of version 0 leaves the chunk's version alone; the clone
 * plan makes a replica's clone chunks equal to an authority's. Checked on
 * a real chunk store under the build directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/storage_heal.h"
#include "storage_test_buf.h"

#define CS (256u << 10)
#define PIECE (64u << 10)
#define VOL 0xfeed0001ull

struct env {
	char dir[512];
	struct zl_loop *loop;
	struct zl_chunk_store *s;
	uint8_t *buf;
};

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

static void test_peer_winner(void **state)
{
	uint64_t v1 = zl_wire_dver_make(1, 7), v2 = zl_wire_dver_make(2, 1), win = 0;
	uint64_t ver[2];
	bool ans[2];
	uint32_t behind = 99;

	(void)state;
	/* Everyone equal: nothing to do. */
	ver[0] = ver[1] = v1;
	ans[0] = ans[1] = true;
	assert_int_equal(zl_storage_peering_winner(v1, ver, ans, 2, &win, &behind), -1);
	assert_true(win == v1);
	assert_int_equal(behind, 0);
	/* A member holds a newer copy (a write the old primary forwarded but
	 * never acknowledged): it wins, we pull, the other member is behind. */
	ver[1] = v2;
	assert_int_equal(zl_storage_peering_winner(v1, ver, ans, 2, &win, &behind), 1);
	assert_true(win == v2);
	assert_int_equal(behind, 1u << 0);
	/* A member that did not answer counts for nothing. */
	ans[1] = false;
	assert_int_equal(zl_storage_peering_winner(v1, ver, ans, 2, &win, &behind), -1);
	assert_true(win == v1);
	assert_int_equal(behind, 0);
	/* Ours is the newest: both members behind, one missing the chunk. */
	ans[1] = true;
	ver[0] = 0;
	ver[1] = v1;
	assert_int_equal(zl_storage_peering_winner(v2, ver, ans, 2, &win, &behind), -1);
	assert_true(win == v2);
	assert_int_equal(behind, 3u);
	/* A tie between two members above ours: the first one is pulled from,
	 * neither is behind. */
	ver[0] = ver[1] = v2;
	assert_int_equal(zl_storage_peering_winner(v1, ver, ans, 2, &win, &behind), 0);
	assert_int_equal(behind, 0);
	/* Alone (min_size 1): own copy. */
	assert_int_equal(zl_storage_peering_winner(v1, ver, ans, 0, &win, &behind), -1);
	assert_true(win == v1);
	/* A later term beats any sequence of an earlier one. */
	ver[0] = zl_wire_dver_make(1, UINT32_MAX);
	ver[1] = zl_wire_dver_make(2, 1);
	assert_int_equal(zl_storage_peering_winner(0, ver, ans, 2, &win, &behind), 1);
	assert_int_equal(behind, 1u << 0);
}

static void test_push_accepts(void **state)
{
	uint64_t a = zl_wire_dver_make(1, 5), b = zl_wire_dver_make(1, 9);

	(void)state;
	assert_true(zl_storage_push_accepts(a, b, false));
	assert_false(zl_storage_push_accepts(b, a, false)); /* never over a newer copy */
	assert_false(zl_storage_push_accepts(b, b, false));
	assert_true(zl_storage_push_accepts(a, b, true));
	assert_true(zl_storage_push_accepts(b, a, true)); /* replace rolls back */
	assert_true(zl_storage_push_accepts(b, 0, true)); /* the primary has none */
	assert_false(zl_storage_push_accepts(b, b, true));
}

/* The clone plan (recovery, peering): deletions first, then copies; equal
 * ids at equal versions are left alone. */
static void test_clone_plan(void **state)
{
	uint64_t c1 = zl_chunk_clone_id(5, 1), c2 = zl_chunk_clone_id(5, 2),
		 c3 = zl_chunk_clone_id(5, 3);
	struct zl_storage_clone want[] = {{.id = c1, .version = 10, .lo = 0},
					  {.id = c3, .version = 30, .lo = 2}};
	struct zl_storage_clone have[] = {{.id = c1, .version = 10},
					  {.id = c2, .version = 20},
					  {.id = c3, .version = 31}};
	struct zl_storage_clone out[8];
	uint32_t n;

	(void)state;
	/* Equal sets: nothing. */
	assert_int_equal(zl_storage_clone_plan(want, 2, want, 2, true, out), 0);
	/* Nothing held: every clone copied with its version and lo. */
	n = zl_storage_clone_plan(want, 2, NULL, 0, true, out);
	assert_int_equal(n, 2);
	assert_false(out[0].del);
	assert_true(out[0].id == c1 && out[0].version == 10 && out[0].lo == 0);
	assert_true(out[1].id == c3 && out[1].version == 30 && out[1].lo == 2);
	/* The authority holds none: every clone deleted. */
	n = zl_storage_clone_plan(NULL, 0, have, 3, false, out);
	assert_int_equal(n, 3);
	for (uint32_t i = 0; i < n; i++)
		assert_true(out[i].del && out[i].id == have[i].id);
	/* Recovery (not IN_SYNC): the extra c2 deleted, c3 at another version
	 * copied over (the member replaces it at the first piece). */
	n = zl_storage_clone_plan(want, 2, have, 3, false, out);
	assert_int_equal(n, 2);
	assert_true(out[0].del && out[0].id == c2);
	assert_true(!out[1].del && out[1].id == c3 && out[1].version == 30);
	/* Peering, scrub (IN_SYNC): c3 at another version is deleted first. */
	n = zl_storage_clone_plan(want, 2, have, 3, true, out);
	assert_int_equal(n, 3);
	assert_true(out[0].del && out[0].id == c2);
	assert_true(out[1].del && out[1].id == c3);
	assert_true(!out[2].del && out[2].id == c3 && out[2].version == 30 && out[2].lo == 2);
}

/* A clone listed by CHUNK_VERSIONS gets the hi of the chunk's clone
 * before it as its lo (0 for a chunk's first). */
static void test_clone_listed(void **state)
{
	struct zl_storage_clone *v = NULL;
	uint32_t n = 0, cap = 0;

	(void)state;
	assert_int_equal(zl_storage_clone_listed(&v, &n, &cap, zl_chunk_clone_id(4, 2), 7), 0);
	assert_int_equal(zl_storage_clone_listed(&v, &n, &cap, zl_chunk_clone_id(4, 5), 8), 0);
	assert_int_equal(zl_storage_clone_listed(&v, &n, &cap, zl_chunk_clone_id(9, 3), 9), 0);
	for (int i = 0; i < 20; i++) /* grows */
		assert_int_equal(
		    zl_storage_clone_listed(&v, &n, &cap, zl_chunk_clone_id(10, 10 + i), i), 0);
	assert_int_equal(n, 23);
	assert_int_equal(v[0].lo, 0);
	assert_int_equal(v[1].lo, 2);
	assert_true(v[1].version == 8);
	assert_int_equal(v[2].lo, 0); /* another chunk */
	assert_int_equal(v[3].lo, 0);
	assert_int_equal(v[22].lo, 28);
	free(v);
}

/* A newer copy rolled back as the CHUNK_PUSH handler does with
 * ZL_PUSH_REPLACE: remove it on the first piece (a chunk's version only
 * grows), then apply the pieces (zl_storage_chunk_apply). */
static void apply_piece(struct env *e, uint32_t off, uint8_t fill, uint64_t pushed)
{
	struct zl_storage st;
	uint64_t deadline = zl_now_ms() + 20000;
	int d = 0;

	memset(&st, 0, sizeof(st));
	st.chunks = e->s;
	memset(e->buf, fill, PIECE);
	assert_int_equal(
	    zl_storage_chunk_apply(&st, VOL, 0, CS, off, PIECE, e->buf, pushed, done_cb, &d), 0);
	while (!d && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(d, 1);
}

static void test_replace_rolls_back(void **state)
{
	struct env *e = *state;
	uint64_t old = zl_wire_dver_make(1, 5), newer = zl_wire_dver_make(1, 6);
	uint64_t deadline;
	int d = 0;

	write_at(e, 0, CS, 0x11, newer);
	assert_true(version_of(e) == newer);
	assert_true(zl_storage_push_accepts(version_of(e), old, true));
	assert_int_equal(zl_chunk_delete(e->s, VOL, 0), 0);
	for (uint32_t off = 0; off < CS; off += PIECE)
		apply_piece(e, off, off == PIECE ? 0 : 0x22, old);
	assert_true(version_of(e) == old);
	/* After a restart too, and the data is the pushed copy (a zero piece
	 * reads back as zeros). */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	assert_true(version_of(e) == old);
	memset(e->buf, 0xee, CS);
	assert_int_equal(zl_chunk_read(e->s, VOL, 0, CS, 0, CS, e->buf, done_cb, &d), 0);
	deadline = zl_now_ms() + 20000;
	while (!d && zl_now_ms() < deadline)
		zl_loop_run_once(e->loop, 50);
	assert_int_equal(d, 1);
	for (uint32_t i = 0; i < CS; i++)
		assert_int_equal(e->buf[i], i / PIECE == 1 ? 0 : 0x22);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_version_order),
	    cmocka_unit_test(test_peer_winner),
	    cmocka_unit_test(test_push_accepts),
	    cmocka_unit_test(test_clone_plan),
	    cmocka_unit_test(test_clone_listed),
	    cmocka_unit_test_setup_teardown(test_replace_rolls_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_push_on_chunk_store, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
