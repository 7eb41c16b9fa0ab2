/* Chunk store tests on real files under the build directory (O_DIRECT does
 * not work on every tmpfs). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "storage/storage_chunk.h"

#define CS  (1u << 20) /* chunk size used by most tests */
#define VOL 0x1234abcdull

struct env {
	char dir[512];
	struct zl_loop *loop;
	struct zl_chunk_store *s;
};

static void *t_alloc(void *arg, size_t len)
{
	void *p = NULL;

	(void)arg;
	if (posix_memalign(&p, 4096, ZL_ALIGN_UP(len, 4096)))
		return NULL;
	return p;
}

static void t_free(void *arg, void *p)
{
	(void)arg;
	free(p);
}

static void env_open(struct env *e)
{
	struct zl_chunk_store_opts o = {.data_dir = e->dir,
					.loop = e->loop,
					.max_open = 4,
					.buf_alloc = t_alloc,
					.buf_free = t_free};

	assert_int_equal(zl_chunk_store_create(&o, &e->s), 0);
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *base = getenv("ZL_BUILD_DIR");

	snprintf(e->dir, sizeof(e->dir), "%s/storage-test.XXXXXX", base ? base : ".");
	assert_non_null(mkdtemp(e->dir));
	assert_int_equal(zl_loop_create(&e->loop), 0);
	env_open(e);
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
	free(e);
	return 0;
}

struct done {
	int status;
	int calls;
};

static void done_cb(void *arg, int status)
{
	struct done *d = arg;

	d->status = status;
	d->calls++;
}

static void wait_all(struct env *e, struct done *d, int n)
{
	uint64_t deadline = zl_now_ms() + 20000;

	for (;;) {
		int left = 0;

		for (int i = 0; i < n; i++)
			left += d[i].calls == 0;
		if (!left)
			break;
		assert_true(zl_now_ms() < deadline);
		zl_loop_run_once(e->loop, 50);
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(d[i].calls, 1);
}

static int do_write(struct env *e, uint64_t chunk, uint32_t off, uint32_t len, const void *p)
{
	struct done d = {0};
	int rc = zl_chunk_write(e->s, VOL, chunk, CS, off, len, p, 0, done_cb, &d);

	if (rc)
		return rc;
	assert_int_equal(d.calls, 0); /* never inside the call */
	wait_all(e, &d, 1);
	return d.status;
}

static int do_zero(struct env *e, uint64_t chunk, uint32_t off, uint32_t len)
{
	struct done d = {0};
	int rc = zl_chunk_zero(e->s, VOL, chunk, CS, off, len, 0, done_cb, &d);

	if (rc)
		return rc;
	wait_all(e, &d, 1);
	return d.status;
}

/* Reads into out (unaligned caller memory) through an aligned buffer. */
static int do_read(struct env *e, uint64_t chunk, uint32_t off, uint32_t len, void *out)
{
	struct done d = {0};
	uint8_t *buf = t_alloc(NULL, zl_chunk_read_span(off, len));
	int rc;

	memset(buf, 0xee, zl_chunk_read_span(off, len));
	rc = zl_chunk_read(e->s, VOL, chunk, CS, off, len, buf, done_cb, &d);
	if (!rc) {
		wait_all(e, &d, 1);
		rc = d.status;
	}
	if (!rc)
		memcpy(out, buf + off % 4096, len);
	free(buf);
	return rc;
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 131 + seed * 7 + (i >> 12)) ^ seed);
}

/* Shadow model: what the chunk must contain. */
static uint8_t *model;

static void check_all(struct env *e, uint64_t chunk)
{
	uint8_t *got = malloc(CS);

	for (uint32_t off = 0; off < CS; off += 256 * 1024)
		assert_int_equal(do_read(e, chunk, off, 256 * 1024, got + off), 0);
	assert_memory_equal(got, model, CS);
	free(got);
}

static void test_round_trips(void **state)
{
	struct env *e = *state;
	static const uint32_t cases[][2] = {
	    {0, 1},	    {0, 512},	 {0, 4095},   {0, 4096},	 {0, 4097},
	    {1, 1},	    {4095, 2},	 {511, 512},  {8191, 4097},	 {12288, 65536},
	    {5000, 200000}, {100, 4095}, {CS - 1, 1}, {CS - 4097, 4097}, {300000, 4096 * 40 + 17},
	};
	uint8_t *src = malloc(CS), *back = malloc(CS);

	model = calloc(1, CS);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(cases); i++) {
		uint32_t off = cases[i][0], len = cases[i][1];

		fill(src, len, (unsigned)i + 1);
		assert_int_equal(do_write(e, 0, off, len, src), 0);
		memcpy(model + off, src, len);
		memset(back, 0, len);
		assert_int_equal(do_read(e, 0, off, len, back), 0);
		assert_memory_equal(back, src, len);
	}
	check_all(e, 0);

	/* Aligned write from an aligned buffer (zero-copy path). */
	{
		uint8_t *al = t_alloc(NULL, 65536);

		fill(al, 65536, 99);
		assert_int_equal(do_write(e, 0, 65536, 65536, al), 0);
		memcpy(model + 65536, al, 65536);
		free(al);
	}
	check_all(e, 0);

	/* Reopen: data and CRC table survive. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	check_all(e, 0);
	free(src);
	free(back);
	free(model);
}

static void test_missing_reads_zero(void **state)
{
	struct env *e = *state;
	uint8_t buf[10000];
	uint64_t alloc = 1;

	memset(buf, 0xaa, sizeof(buf));
	assert_int_equal(do_read(e, 77, 123, sizeof(buf), buf), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(zl_chunk_info(e->s, VOL, 77, &alloc), 0);
	assert_int_equal(alloc, 0);
	/* Zeroing an absent replica does not create it. */
	assert_int_equal(do_zero(e, 77, 0, 8192), 0);
	assert_int_equal(zl_chunk_info(e->s, VOL, 77, &alloc), 0);
	assert_int_equal(alloc, 0);
	/* A written but untouched region of an existing chunk reads zero too. */
	assert_int_equal(do_write(e, 78, 0, 3, "abc"), 0);
	assert_int_equal(do_read(e, 78, 500000, sizeof(buf), buf), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(zl_chunk_info(e->s, VOL, 78, &alloc), 0);
	assert_true(alloc > 0);
}

static void test_zeroing(void **state)
{
	struct env *e = *state;
	static const uint32_t cases[][2] = {
	    {0, 4096},	     {100, 50},		 {4000, 300},	{8192, 65536},
	    {70000, 200001}, {500000, 4096 * 7}, {CS - 10, 10},
	};
	uint8_t *src = malloc(CS);

	model = malloc(CS);
	fill(src, CS, 5);
	for (uint32_t off = 0; off < CS; off += 256 * 1024)
		assert_int_equal(do_write(e, 3, off, 256 * 1024, src + off), 0);
	memcpy(model, src, CS);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(cases); i++) {
		assert_int_equal(do_zero(e, 3, cases[i][0], cases[i][1]), 0);
		memset(model + cases[i][0], 0, cases[i][1]);
	}
	check_all(e, 3);
	/* Punched blocks are writable again. */
	assert_int_equal(do_write(e, 3, 8192 + 10, 5000, src), 0);
	memcpy(model + 8192 + 10, src, 5000);
	check_all(e, 3);
	zl_chunk_store_destroy(e->s);
	env_open(e);
	check_all(e, 3);
	/* Zero the whole chunk. */
	assert_int_equal(do_zero(e, 3, 0, CS), 0);
	memset(model, 0, CS);
	check_all(e, 3);
	free(src);
	free(model);
}

/* Many overlapping unaligned writes in flight at once: the result must be
 * what issuing them in order gives (each waits behind the one it overlaps). */
static void test_overlap_serialized(void **state)
{
	struct env *e = *state;
	enum { N = 64 };
	struct done d[N] = {0};
	uint8_t *src[N];
	uint32_t offs[N], lens[N];
	unsigned r = 12345;

	model = calloc(1, CS);
	for (int i = 0; i < N; i++) {
		r = r * 1103515245 + 12345;
		offs[i] = (r >> 8) % 60000;
		lens[i] = 1 + (r >> 3) % 20000;
		src[i] = malloc(lens[i]);
		fill(src[i], lens[i], (unsigned)i + 17);
		memcpy(model + offs[i], src[i], lens[i]);
		assert_int_equal(
		    zl_chunk_write(e->s, VOL, 9, CS, offs[i], lens[i], src[i], 0, done_cb, &d[i]), 0);
	}
	wait_all(e, d, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(d[i].status, 0);
		free(src[i]);
	}
	check_all(e, 9);
	/* Reads racing writes and zeroing never see a half-updated CRC. */
	{
		struct done w[N] = {0};
		uint8_t *rb[N];

		for (int i = 0; i < N; i++) {
			rb[i] = t_alloc(NULL, 3 * 4096);
			if (i % 3 == 0)
				assert_int_equal(zl_chunk_zero(e->s, VOL, 9, CS, (uint32_t)i * 1000,
							       3000, 0, done_cb, &w[i]),
						 0);
			else
				assert_int_equal(zl_chunk_read(e->s, VOL, 9, CS, (uint32_t)i * 1000,
							       4000, rb[i], done_cb, &w[i]),
						 0);
		}
		wait_all(e, w, N);
		for (int i = 0; i < N; i++) {
			assert_int_equal(w[i].status, 0);
			free(rb[i]);
		}
	}
	free(model);
}

/* Concurrent writes to distinct blocks covered by one CRC page share CRC
 * page writes (group commit) and all land. */
static void test_group_commit(void **state)
{
	struct env *e = *state;
	enum { N = 64 };
	struct done d[N] = {0};
	struct zl_chunk_store_stats st;
	uint8_t *src = t_alloc(NULL, (size_t)N * 4096);

	model = calloc(1, CS);
	fill(src, (size_t)N * 4096, 77);
	for (int i = 0; i < N; i++) {
		/* every other block, so no two writes overlap */
		uint32_t off = (uint32_t)i * 2 * 4096;

		memcpy(model + off, src + (size_t)i * 4096, 4096);
		assert_int_equal(zl_chunk_write(e->s, VOL, 11, CS, off, 4096,
						src + (size_t)i * 4096, 0, done_cb, &d[i]),
				 0);
	}
	wait_all(e, d, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(d[i].status, 0);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.writes, N);
	assert_true(st.meta_rounds >= 1);
	assert_true(st.meta_rounds < N / 2);
	assert_int_equal(st.inflight, 0);
	/* Durable CRCs: a fresh store verifies every block. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	check_all(e, 11);
	free(src);
	free(model);
}

static void flip_byte(struct env *e, uint64_t chunk, uint64_t file_off)
{
	char path[700];
	int fd;
	uint8_t b;

	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64 "/%016" PRIx64 ".zlc", e->dir,
		 (uint64_t)VOL, chunk);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)file_off), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)file_off), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void file_rw(struct env *e, uint64_t chunk, uint64_t off, void *buf, size_t len, bool wr)
{
	char path[700];
	int fd;

	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64 "/%016" PRIx64 ".zlc", e->dir,
		 (uint64_t)VOL, chunk);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	if (wr)
		assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
	else
		assert_int_equal(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

/* CRCs go to disk before data, the replaced CRC is kept: a crash between the
 * two leaves the old contents readable. CS = 1 MiB: CRC table at 4 KiB,
 * data at 8 KiB, previous-CRC table at 8 KiB + 1 MiB. */
static void test_crash_between_crc_and_data(void **state)
{
	struct env *e = *state;
	const uint64_t tbl = 4096, prev_tbl = 8192 + CS, data = 8192;
	uint8_t *x = t_alloc(NULL, 4096), *y = t_alloc(NULL, 4096), back[4096];
	uint32_t cur_e, prev_e, cx, cy;

	fill(x, 4096, 1);
	fill(y, 4096, 2);
	cx = zl_crc32c(x, 4096);
	cy = zl_crc32c(y, 4096);
	assert_int_equal(do_write(e, 12, 5 * 4096, 4096, x), 0);
	assert_int_equal(do_write(e, 12, 5 * 4096, 4096, y), 0);
	zl_chunk_store_destroy(e->s);
	file_rw(e, 12, tbl + 5 * 4, &cur_e, 4, false);
	file_rw(e, 12, prev_tbl + 5 * 4, &prev_e, 4, false);
	assert_int_equal(cur_e, cy); /* little-endian host */
	assert_int_equal(prev_e, cx);

	/* State after a crash between the CRC round of y and its data: data x. */
	file_rw(e, 12, data + 5 * 4096, x, 4096, true);
	env_open(e);
	assert_int_equal(do_read(e, 12, 5 * 4096, 4096, back), 0);
	assert_memory_equal(back, x, 4096);
	/* A first write that crashed the same way: the hole reads as zeros. */
	zl_chunk_store_destroy(e->s);
	cur_e = cy;
	prev_e = 0;
	file_rw(e, 12, tbl + 9 * 4, &cur_e, 4, true);
	file_rw(e, 12, prev_tbl + 9 * 4, &prev_e, 4, true);
	env_open(e);
	assert_int_equal(do_read(e, 12, 9 * 4096, 4096, back), 0);
	for (size_t i = 0; i < sizeof(back); i++)
		assert_int_equal(back[i], 0);
	/* Neither the CRC nor the previous one: corruption. */
	zl_chunk_store_destroy(e->s);
	back[0] ^= 1;
	file_rw(e, 12, data + 9 * 4096, back, 4096, true);
	env_open(e);
	assert_int_equal(do_read(e, 12, 9 * 4096, 10, back), -ZL_ERR_CORRUPT);
	free(x);
	free(y);
}

static void test_corruption(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	uint8_t *src = malloc(65536), back[4096];
	/* CS = 1 MiB: 256 blocks, one metadata page (two slots); data at 12 KiB. */
	const uint64_t data_off = zl_chunk_data_off(CS);

	fill(src, 65536, 3);
	assert_int_equal(do_write(e, 5, 0, 65536, src), 0);
	zl_chunk_store_destroy(e->s);
	flip_byte(e, 5, data_off + 7 * 4096 + 123);
	env_open(e);
	assert_int_equal(do_read(e, 5, 0, 4096, back), 0);
	assert_int_equal(do_read(e, 5, 7 * 4096 + 1000, 10, back), -ZL_ERR_CORRUPT);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.corruptions, 1);
	assert_int_equal(st.last_corrupt_vol, VOL);
	assert_int_equal(st.last_corrupt_chunk, 5);
	assert_int_equal(st.last_corrupt_block, 7);
	/* An unaligned write into the corrupt block refuses to launder it... */
	assert_int_equal(do_write(e, 5, 7 * 4096 + 5, 10, src), -ZL_ERR_CORRUPT);
	/* ...a full-block overwrite repairs it. */
	assert_int_equal(do_write(e, 5, 7 * 4096, 4096, src), 0);
	assert_int_equal(do_read(e, 5, 7 * 4096, 100, back), 0);
	assert_memory_equal(back, src, 100);

	/* Flip inside a hole (never written block): also detected, while open. */
	flip_byte(e, 5, data_off + 100 * 4096 + 9);
	assert_int_equal(do_read(e, 5, 100 * 4096, 1, back), -ZL_ERR_CORRUPT);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.last_corrupt_block, 100);

	/* A damaged header makes the replica unusable, not silently wrong. */
	zl_chunk_store_destroy(e->s);
	flip_byte(e, 5, 9);
	env_open(e);
	assert_int_equal(do_read(e, 5, 0, 10, back), -ZL_ERR_CORRUPT);
	free(src);
}

static void test_delete(void **state)
{
	struct env *e = *state;
	char path[700];
	struct stat stb;
	uint64_t alloc = 0, removed = 0;
	uint8_t back[16];

	for (uint64_t c = 0; c < 6; c++) /* more than max_open (4): exercises the LRU */
		assert_int_equal(do_write(e, c, 4096, 16, "0123456789abcdef"), 0);
	for (uint64_t c = 0; c < 6; c++) {
		assert_int_equal(do_read(e, c, 4096, 16, back), 0);
		assert_memory_equal(back, "0123456789abcdef", 16);
	}
	assert_int_equal(zl_chunk_info(e->s, VOL, 2, &alloc), 0);
	assert_true(alloc >= 4096);
	assert_int_equal(zl_chunk_delete(e->s, VOL, 2), 0);
	assert_int_equal(zl_chunk_info(e->s, VOL, 2, &alloc), 0);
	assert_int_equal(alloc, 0);
	assert_int_equal(do_read(e, 2, 4096, 16, back), 0);
	assert_int_equal(back[0], 0);
	assert_int_equal(zl_chunk_delete(e->s, VOL, 2), 0); /* absent: fine */

	assert_int_equal(zl_chunk_volume_delete(e->s, VOL, &removed), 0);
	assert_int_equal(removed, 5);
	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64, e->dir, (uint64_t)VOL);
	assert_int_equal(stat(path, &stb), -1);
	assert_int_equal(do_read(e, 0, 4096, 16, back), 0);
	assert_int_equal(back[0], 0);
}

static int count_vol(void *arg, uint64_t vol)
{
	int *n = arg;

	assert_int_equal(vol, VOL);
	(*n)++;
	return 0;
}

static void test_foreach_and_args(void **state)
{
	struct env *e = *state;
	struct done d = {0};
	uint8_t buf[8192];
	int n = 0;

	assert_int_equal(zl_chunk_volume_foreach(e->s, count_vol, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(do_write(e, 1, 0, 1, "x"), 0);
	assert_int_equal(zl_chunk_volume_foreach(e->s, count_vol, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(zl_chunk_write(e->s, VOL, 1, CS, CS - 1, 2, buf, 0, done_cb, &d),
			 -ZL_ERR_RANGE);
	assert_int_equal(zl_chunk_write(e->s, VOL, 1, CS, 0, 0, buf, 0, done_cb, &d), -ZL_ERR_RANGE);
	assert_int_equal(zl_chunk_write(e->s, VOL, 1, 12345, 0, 1, buf, 0, done_cb, &d),
			 -ZL_ERR_INVAL);
	/* Same chunk, other chunk size: refused rather than misread. */
	assert_int_equal(zl_chunk_read(e->s, VOL, 1, CS * 2, 0, 1, buf, done_cb, &d),
			 -ZL_ERR_INVAL);
	assert_int_equal(d.calls, 0);
	d.calls = 0;
	assert_int_equal(zl_chunk_flush(e->s, VOL, done_cb, &d), 0);
	wait_all(e, &d, 1);
	assert_int_equal(d.status, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_round_trips, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_missing_reads_zero, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_zeroing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overlap_serialized, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_between_crc_and_data, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreach_and_args, setup, teardown),
	};

	zl_log_init("storage_chunk_test");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
