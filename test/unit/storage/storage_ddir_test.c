/* The data dir watch (storage/storage_ddir.c): the backstop's probe on a
 * removed or replaced dir and an unlinked journal, the inotify events that
 * fence, and the daemon's side on a real chunk store (journal write path):
 * a write error EROFS (a filesystem turned read-only: no mount is needed to
 * test it) and an unlinked journal-0 fence the store, after which nothing
 * is acknowledged, in flight or new. rm -rf and mv under real daemons run
 * in test/e2e/ddir_e2e.sh. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/storage_ctl.h"
#include "storage_test_buf.h"

struct env {
	char dir[512];	/* the data dir */
	char base[400]; /* its parent (mv targets) */
	struct zl_storage st;
};

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_int_equal(system(cmd), 0);
}

static void touch(const char *dir, const char *name)
{
	char p[1024];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	close(fd);
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *b = getenv("ZL_BUILD_DIR");
	char p[1024];

	snprintf(e->base, sizeof(e->base), "%s/ddir-test.XXXXXX", b ? b : ".");
	assert_non_null(mkdtemp(e->base));
	snprintf(e->dir, sizeof(e->dir), "%s/data", e->base);
	assert_int_equal(mkdir(e->dir, 0755), 0);
	snprintf(p, sizeof(p), "%s/chunks", e->dir);
	assert_int_equal(mkdir(p, 0755), 0);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	sh("rm -rf '%s'", e->base);
	free(e);
	return 0;
}

/* ---- the probe (backstop) ---- */

static void probe_sees_removal_and_replacement(void **state)
{
	struct env *e = *state;
	struct zl_ddir_probe p;
	char why[256], old[600];

	touch(e->dir, "journal-0");
	assert_int_equal(zl_ddir_probe_open(e->dir, &p), 0);
	assert_false(zl_ddir_probe_check(&p, why, sizeof(why)));
	/* The journal unlinked (its open fd still writes somewhere). */
	sh("rm '%s/journal-0'", e->dir);
	assert_true(zl_ddir_probe_check(&p, why, sizeof(why)));
	assert_non_null(strstr(why, "journal"));
	assert_non_null(strstr(why, "removed"));
	/* Another file under its name: still not ours. */
	touch(e->dir, "journal-0");
	assert_true(zl_ddir_probe_check(&p, why, sizeof(why)));
	zl_ddir_probe_close(&p);

	/* The dir replaced by a new one, chunks/ and journal-0 too. */
	assert_int_equal(zl_ddir_probe_open(e->dir, &p), 0);
	assert_false(zl_ddir_probe_check(&p, why, sizeof(why)));
	snprintf(old, sizeof(old), "%s/data.old", e->base);
	assert_int_equal(rename(e->dir, old), 0);
	sh("mkdir -p '%s/chunks' && touch '%s/journal-0'", e->dir, e->dir);
	assert_true(zl_ddir_probe_check(&p, why, sizeof(why)));
	assert_non_null(strstr(why, "replaced"));
	assert_non_null(strstr(why, e->dir));
	zl_ddir_probe_close(&p);

	/* A healthy dir takes the write probe and keeps no file of it. */
	assert_int_equal(zl_ddir_probe_open(e->dir, &p), 0);
	assert_false(zl_ddir_probe_write(&p, why, sizeof(why)));
	sh("test -z \"$(ls -A '%s' | grep -v '^chunks$\\|^journal-0$')\"", e->dir);
	zl_ddir_probe_close(&p);

	/* The dir removed. */
	assert_int_equal(zl_ddir_probe_open(e->dir, &p), 0);
	sh("rm -rf '%s'", e->dir);
	assert_true(zl_ddir_probe_check(&p, why, sizeof(why)));
	assert_non_null(strstr(why, "removed"));
	zl_ddir_probe_close(&p);
	/* Without chunks/ there is nothing to watch. */
	assert_int_equal(mkdir(e->dir, 0755), 0);
	assert_int_equal(zl_ddir_probe_open(e->dir, &p), -ENOENT);
	zl_ddir_probe_close(&p); /* twice is fine */
}

/* ---- inotify events ---- */

static void events_that_fence(void **state)
{
	static const struct {
		bool in_chunks;
		unsigned int mask;
		const char *name;
		bool bad;
	} cases[] = {
	    {false, IN_DELETE_SELF, NULL, true},
	    {false, IN_MOVE_SELF, NULL, true},
	    {true, IN_DELETE_SELF, NULL, true},
	    {true, IN_MOVE_SELF, NULL, true},
	    {false, IN_UNMOUNT, NULL, true},
	    {false, IN_DELETE, "journal-0", true},
	    {false, IN_MOVED_FROM, "journal-0", true},
	    {false, IN_DELETE | IN_ISDIR, "chunks", true},
	    {false, IN_MOVED_FROM | IN_ISDIR, "chunks", true},
	    {false, IN_DELETE, "identity", true},
	    /* What the daemon does itself, or nothing of its data. */
	    {false, IN_DELETE, "identity.tmp", false},
	    {false, IN_DELETE, "lock", false},
	    {false, IN_MOVED_TO, "identity", false},
	    {true, IN_DELETE | IN_ISDIR, "vol-0000000000000001", false},
	    {false, IN_IGNORED, NULL, false},
	    {false, IN_Q_OVERFLOW, NULL, false},
	};
	char why[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = 0;
		if (zl_ddir_event_bad("/d", cases[i].in_chunks, cases[i].mask, cases[i].name, why,
				      sizeof(why)) != cases[i].bad)
			fail_msg("case %zu (mask %#x name %s): expected %s", i, cases[i].mask,
				 cases[i].name ? cases[i].name : "-",
				 cases[i].bad ? "a fence" : "none");
		if (cases[i].bad)
			assert_non_null(strstr(why, "/d"));
	}
}

/* ---- the daemon's side, on a real chunk store ---- */

struct done {
	int status, calls;
};

static void t_done(void *arg, int status)
{
	struct done *d = arg;

	d->status = status;
	d->calls++;
}

static void daemon_open(struct env *e)
{
	struct zl_chunk_store_opts o = {.data_dir = e->dir,
					.buf_alloc = t_alloc,
					.buf_free = t_free,
					.journal = true,
					.journal_size = ZL_CHUNK_JOURNAL_MIN};

	memset(&e->st, 0, sizeof(e->st));
	e->st.cfg.data_dir = e->dir;
	assert_int_equal(zl_loop_create(&e->st.loop), 0);
	o.loop = e->st.loop;
	assert_int_equal(zl_chunk_store_create(&o, &e->st.chunks), 0);
	assert_int_equal(zl_storage_ddir_start(&e->st), 0);
}

static void daemon_close(struct env *e)
{
	zl_storage_ddir_stop(&e->st);
	assert_null(e->st.ddir);
	zl_chunk_store_destroy(e->st.chunks);
	zl_loop_destroy(e->st.loop);
}

/* Runs the loop until d has a result (bounded). */
static void run_until(struct env *e, const struct done *d)
{
	for (int i = 0; i < 500 && !d->calls; i++)
		zl_loop_run_once(e->st.loop, 10);
	assert_int_equal(d->calls, 1);
}

static uint8_t wbuf[65536] __attribute__((aligned(4096)));
static uint8_t rbuf[65536] __attribute__((aligned(4096)));

static int write_one(struct env *e, struct done *d)
{
	memset(d, 0, sizeof(*d));
	return zl_chunk_write(e->st.chunks, 1, 0, 1u << 20, 0, sizeof(wbuf), wbuf, 1, t_done, d);
}

static void erofs_fences_at_once(void **state)
{
	struct env *e = *state;
	struct done d, r = {0};

	memset(wbuf, 0xab, sizeof(wbuf));
	daemon_open(e);
	assert_int_equal(write_one(e, &d), 0);
	run_until(e, &d);
	assert_int_equal(d.status, 0);
	assert_false(zl_storage_ddir_failed(&e->st));
	/* Errors that may be transient only start a check (the dir is fine). */
	zl_storage_ddir_io_error(&e->st, -ZL_ERR_IO);
	zl_storage_ddir_io_error(&e->st, -ENOENT);
	for (int i = 0; i < 20; i++)
		zl_loop_run_once(e->st.loop, 10);
	assert_false(zl_storage_ddir_failed(&e->st));
	/* A write in flight when EROFS comes back is not acknowledged. */
	assert_int_equal(write_one(e, &d), 0);
	zl_storage_ddir_io_error(&e->st, -EROFS);
	assert_true(zl_storage_ddir_failed(&e->st));
	assert_true(zl_chunk_store_fenced(e->st.chunks));
	run_until(e, &d);
	assert_int_equal(d.status, -ZL_ERR_IO);
	/* Nothing new either: writes, zeroings and reads fail at once. */
	assert_int_equal(write_one(e, &d), -ZL_ERR_IO);
	assert_int_equal(zl_chunk_zero(e->st.chunks, 1, 0, 1u << 20, 0, 4096, 2, t_done, &r),
			 -ZL_ERR_IO);
	assert_int_equal(
	    zl_chunk_read(e->st.chunks, 1, 0, 1u << 20, 0, sizeof(rbuf), rbuf, t_done, &r),
	    -ZL_ERR_IO);
	assert_int_equal(r.calls, 0);
	daemon_close(e);
}

static void journal_unlinked_fences(void **state)
{
	struct env *e = *state;
	struct done d;
	char p[1024];

	memset(wbuf, 0xcd, sizeof(wbuf));
	daemon_open(e);
	assert_int_equal(write_one(e, &d), 0);
	run_until(e, &d);
	assert_int_equal(d.status, 0);
	snprintf(p, sizeof(p), "%s/journal-0", e->dir);
	assert_int_equal(unlink(p), 0);
	/* inotify: seen by the next loop pass, not the 1 s backstop. */
	for (int i = 0; i < 5 && !zl_storage_ddir_failed(&e->st); i++)
		zl_loop_run_once(e->st.loop, 10);
	assert_true(zl_storage_ddir_failed(&e->st));
	assert_int_equal(write_one(e, &d), -ZL_ERR_IO);
	daemon_close(e);
}

/* Without the watch: a write whose chunk file cannot be created because
 * chunks/ is gone fails (it once completed as a success, written nowhere). */
static void write_without_chunks_dir_fails(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_opts o = {.data_dir = e->dir,
					.buf_alloc = t_alloc,
					.buf_free = t_free,
					.journal = true,
					.journal_size = ZL_CHUNK_JOURNAL_MIN};
	struct done d;

	memset(&e->st, 0, sizeof(e->st));
	assert_int_equal(zl_loop_create(&e->st.loop), 0);
	o.loop = e->st.loop;
	assert_int_equal(zl_chunk_store_create(&o, &e->st.chunks), 0);
	sh("rm -rf '%s/chunks'", e->dir);
	/* The creation fails on an open worker: the error reaches cb. */
	assert_int_equal(write_one(e, &d), 0);
	run_until(e, &d);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.status, -ENOENT);
	zl_chunk_store_destroy(e->st.chunks);
	zl_loop_destroy(e->st.loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(probe_sees_removal_and_replacement, setup, teardown),
	    cmocka_unit_test(events_that_fence),
	    cmocka_unit_test_setup_teardown(erofs_fences_at_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(journal_unlinked_fences, setup, teardown),
	    cmocka_unit_test_setup_teardown(write_without_chunks_dir_fails, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
