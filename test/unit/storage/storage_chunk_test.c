/* Chunk store tests on real files under the build directory (O_DIRECT does
 * not work on every tmpfs). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <liburing.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "storage/storage_chunk.h"
#include "storage_test_buf.h"

#define CS  (1u << 20) /* chunk size used by most tests */
#define VOL 0x1234abcdull

struct env {
	char dir[512];
	struct zl_loop *loop;
	struct zl_chunk_store *s;
};

/* ZL_CHUNK_TEST_WRITE_PATH=journal: the stores of the shared tests use the
 * journal write path (ctest storage_chunk_journal_test), with the smallest
 * journal, so checkpoints and waits for space happen. */
static bool jmode;
/* max_open of the stores env_open makes (a test may raise it). */
static uint32_t env_max_open = 4;

static int env_open_mode(struct env *e, bool journal)
{
	struct zl_chunk_store_opts o = {.data_dir = e->dir,
					.loop = e->loop,
					.max_open = env_max_open,
					.buf_alloc = t_alloc,
					.buf_free = t_free,
					.journal = journal,
					.journal_size = ZL_CHUNK_JOURNAL_MIN};

	return zl_chunk_store_create(&o, &e->s);
}

static void env_open(struct env *e)
{
	assert_int_equal(env_open_mode(e, jmode), 0);
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

/* The outcome of one operation started with d as its callback's argument
 * (rc: what starting it returned). */
static int wait_one(struct env *e, struct done *d, int rc)
{
	if (rc)
		return rc;
	assert_int_equal(d->calls, 0); /* never inside the call */
	wait_all(e, d, 1);
	return d->status;
}

/* Write / zero / read of a chunk of size cs with data version ver. */
static int io_write(struct env *e, uint32_t cs, uint64_t chunk, uint32_t off, uint32_t len,
		    const void *p, uint64_t ver)
{
	struct done d = {0};

	return wait_one(e, &d, zl_chunk_write(e->s, VOL, chunk, cs, off, len, p, ver, done_cb, &d));
}

static int io_zero(struct env *e, uint32_t cs, uint64_t chunk, uint32_t off, uint32_t len,
		   uint64_t ver)
{
	struct done d = {0};
	int rc = zl_chunk_zero(e->s, VOL, chunk, cs, off, len, ver, done_cb, &d);

	if (rc)
		return rc;
	wait_all(e, &d, 1);
	return d.status;
}

/* Reads into out (unaligned caller memory) through an aligned buffer: the
 * live chunk (seq 0) or snapshot seq of it (zl_chunk_snap_read). */
static int io_read_seq(struct env *e, uint32_t cs, uint64_t chunk, uint32_t seq, uint32_t off,
		       uint32_t len, void *out)
{
	struct done d = {0};
	uint8_t *buf = t_alloc(NULL, zl_chunk_read_span(off, len));
	int rc;

	memset(buf, 0xee, zl_chunk_read_span(off, len));
	rc = seq ? zl_chunk_snap_read(e->s, VOL, chunk, cs, seq, off, len, buf, done_cb, &d)
		 : zl_chunk_read(e->s, VOL, chunk, cs, off, len, buf, done_cb, &d);
	if (!rc) {
		wait_all(e, &d, 1);
		rc = d.status;
	}
	if (!rc)
		memcpy(out, buf + off % 4096, len);
	free(buf);
	return rc;
}

static int io_read(struct env *e, uint32_t cs, uint64_t chunk, uint32_t off, uint32_t len,
		   void *out)
{
	return io_read_seq(e, cs, chunk, 0, off, len, out);
}

static int do_write(struct env *e, uint64_t chunk, uint32_t off, uint32_t len, const void *p)
{
	return io_write(e, CS, chunk, off, len, p, 0);
}

static int do_zero(struct env *e, uint64_t chunk, uint32_t off, uint32_t len)
{
	return io_zero(e, CS, chunk, off, len, 0);
}

static int do_read(struct env *e, uint64_t chunk, uint32_t off, uint32_t len, void *out)
{
	return io_read(e, CS, chunk, off, len, out);
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
	/* Neither a read nor a zeroing makes it held (a clone's chunk stays
	 * absent: it still reads its parent's). */
	assert_false(zl_chunk_held(e->s, VOL, 77));
	/* A written but untouched region of an existing chunk reads zero too. */
	assert_int_equal(do_write(e, 78, 0, 3, "abc"), 0);
	assert_true(zl_chunk_held(e->s, VOL, 78));
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
		    zl_chunk_write(e->s, VOL, 9, CS, offs[i], lens[i], src[i], 0, done_cb, &d[i]),
		    0);
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
	assert_int_equal(st.meta_page_writes, st.meta_rounds); /* one page per round */
	/* The ring's use (metrics): every write's data took an SQE, none is
	 * left unsubmitted, and the kernel posted no more than it took. */
	assert_true(st.uring.entries > 0);
	assert_true(st.uring.taken >= N);
	assert_int_equal(st.uring.queued, 0);
	assert_true(st.uring.taken - st.uring.posted <= st.uring.entries);
	print_message("group commit: %d concurrent 4 KiB writes, %" PRIu64 " metadata rounds\n", N,
		      st.meta_rounds);
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

/* ---- crash simulation ----
 * A crash leaves the file with any prefix of the write sequence on disk:
 * metadata pages (each one whole, lost or torn), then data blocks (any
 * subset once every metadata page of the write is durable). The images are
 * the real files the store wrote before (f0) and after (f2) one operation;
 * a crash state takes each region from one or the other. */

#define CS4 (4u << 20) /* 1024 blocks: three metadata pages */

static void chunk_file(struct env *e, uint64_t chunk, char *path, size_t len)
{
	snprintf(path, len, "%s/chunks/vol-%016" PRIx64 "/%016" PRIx64 ".zlc", e->dir,
		 (uint64_t)VOL, chunk);
}

static uint8_t *img_load(struct env *e, uint64_t chunk, size_t len)
{
	char path[700];
	uint8_t *p = calloc(1, len);
	int fd;

	chunk_file(e, chunk, path, sizeof(path));
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, p, len, 0), (ssize_t)len);
	close(fd);
	return p;
}

static void img_store(struct env *e, uint64_t chunk, const uint8_t *p, size_t len)
{
	char path[700];
	int fd;

	chunk_file(e, chunk, path, sizeof(path));
	fd = open(path, O_RDWR | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, p, len, 0), (ssize_t)len);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

/* Every block of [b0, b1) reads back (no corruption) as its f0 or f2 data;
 * returns how many read as f2 where the two differ. */
static uint32_t check_old_or_new(struct env *e, uint32_t cs, uint64_t chunk, const uint8_t *f0,
				 const uint8_t *f2, uint32_t b0, uint32_t b1)
{
	uint64_t d = zl_chunk_data_off(cs);
	uint8_t back[4096];
	uint32_t n_new = 0;

	for (uint32_t b = b0; b < b1; b++) {
		const uint8_t *o = f0 + d + (uint64_t)b * 4096, *n = f2 + d + (uint64_t)b * 4096;

		assert_int_equal(io_read(e, cs, chunk, b * 4096, 4096, back), 0);
		if (memcmp(o, n, 4096) && !memcmp(back, n, 4096))
			n_new++;
		else
			assert_memory_equal(back, o, 4096);
	}
	return n_new;
}

/* A write spanning two metadata pages, stopped after every step. */
static void test_crash_write_steps(void **state)
{
	struct env *e = *state;
	const uint32_t mp = zl_chunk_meta_pages(CS4);
	const uint64_t d = zl_chunk_data_off(CS4), flen = d + CS4;
	/* Old data on blocks [496, 529); the new write covers 500..520 with
	 * unaligned edges and crosses the page boundary at block 508. */
	const uint32_t wb0 = 496, wb1 = 529, off = 500 * 4096 + 100, len = 20 * 4096;
	uint8_t *src = malloc((size_t)(wb1 - wb0) * 4096), *f0, *f2, *img;
	struct zl_chunk_store_stats st0, st1;
	int changed_slot[3] = {-1, -1, -1};
	uint64_t ver;

	assert_int_equal(mp, 3);
	assert_int_equal(d, 7 * 4096);
	fill(src, (size_t)(wb1 - wb0) * 4096, 1);
	assert_int_equal(io_write(e, CS4, 20, wb0 * 4096, (wb1 - wb0) * 4096, src, 1), 0);
	fill(src, (size_t)(wb1 - wb0) * 4096, 2);
	assert_int_equal(io_write(e, CS4, 20, wb0 * 4096, (wb1 - wb0) * 4096, src, 2), 0);
	zl_chunk_store_destroy(e->s);
	f0 = img_load(e, 20, flen);
	env_open(e);
	zl_chunk_store_stats(e->s, &st0);
	fill(src, len, 3);
	assert_int_equal(io_write(e, CS4, 20, off, len, src, 3), 0);
	zl_chunk_store_stats(e->s, &st1);
	/* One round, both pages, before any data; then, the data durable, a
	 * round of page 0 that claims version 3 (the first one may not: a
	 * crash before the data must not leave version 3 without its data). */
	assert_int_equal(st1.meta_rounds - st0.meta_rounds, 2);
	assert_int_equal(st1.meta_page_writes - st0.meta_page_writes, 3);
	assert_int_equal(zl_chunk_version(e->s, VOL, 20, CS4, &ver), 0);
	assert_int_equal(ver, 3);
	zl_chunk_store_destroy(e->s);
	f2 = img_load(e, 20, flen);
	env_open(e);
	assert_int_equal(zl_chunk_version(e->s, VOL, 20, CS4, &ver), 0);
	assert_int_equal(ver, 3);
	zl_chunk_store_destroy(e->s);

	/* The first round changed one slot of pages 0 and 1 (of page 0 the one
	 * with the lower sequence: the second round wrote the other); page 2 is
	 * untouched. */
	for (uint32_t p = 0; p < mp; p++)
		for (unsigned sl = 0; sl < 2; sl++) {
			uint64_t so = zl_chunk_slot_off(p, sl);

			if (!memcmp(f0 + so, f2 + so, 4096))
				continue;
			assert_true(p < 2);
			if (changed_slot[p] >= 0) {
				uint64_t o = zl_chunk_slot_off(p, (unsigned)changed_slot[p]);

				assert_int_equal(p, 0);
				if (zl_get_le64(f2 + so + 8) > zl_get_le64(f2 + o + 8))
					continue;
			}
			changed_slot[p] = (int)sl;
		}
	assert_true(changed_slot[0] >= 0 && changed_slot[1] >= 0 && changed_slot[2] == -1);

	img = malloc(flen);
	/* meta: bit p set = page p landed; 4 = page 0 torn; data: 0 none,
	 * 1 first half of the blocks, 2 every other block, 3 all. */
	for (unsigned meta = 0; meta < 8; meta++) {
		for (unsigned data = 0; data < 4; data++) {
			bool all_meta = (meta & 3) == 3 && !(meta & 4);
			uint32_t n_new;

			if ((meta & 4) && (meta & 1))
				continue; /* torn and landed: not both */
			if (data && !all_meta)
				continue; /* data goes out only after every page */
			memcpy(img, f0, flen);
			for (uint32_t p = 0; p < 2; p++) {
				uint64_t so = zl_chunk_slot_off(p, (unsigned)changed_slot[p]);

				if (meta & (1u << p))
					memcpy(img + so, f2 + so, 4096);
			}
			if (meta & 4) { /* half of the new page 0 */
				uint64_t so = zl_chunk_slot_off(0, (unsigned)changed_slot[0]);

				memcpy(img + so, f2 + so, 2048);
			}
			for (uint32_t b = 500; b <= 520 && data; b++) {
				uint64_t bo = d + (uint64_t)b * 4096;

				if (data == 3 || (data == 1 && b < 510) || (data == 2 && b % 2))
					memcpy(img + bo, f2 + bo, 4096);
			}
			img_store(e, 20, img, flen);
			env_open(e);
			n_new = check_old_or_new(e, CS4, 20, f0, f2, wb0, wb1);
			if (!data)
				assert_int_equal(n_new, 0);
			/* Whatever landed, the version never claims write 3. */
			assert_int_equal(zl_chunk_version(e->s, VOL, 20, CS4, &ver), 0);
			assert_int_equal(ver, 2);
			if (data == 3)
				assert_int_equal(n_new, 21);
			/* Blocks never touched stay zero, the rest of the chunk
			 * verifies too. */
			assert_int_equal(check_old_or_new(e, CS4, 20, f0, f2, 0, 16), 0);
			assert_int_equal(check_old_or_new(e, CS4, 20, f0, f2, 1000, 1024), 0);
			/* Writable again after the crash: the next write must go to
			 * a slot that does not destroy the current one. */
			assert_int_equal(io_write(e, CS4, 20, 505 * 4096, 4096, src, 4), 0);
			zl_chunk_store_destroy(e->s);
			env_open(e);
			assert_int_equal(io_read(e, CS4, 20, 505 * 4096, 4096, img), 0);
			assert_memory_equal(img, src, 4096);
			zl_chunk_store_destroy(e->s);
		}
	}
	env_open(e);
	free(img);
	free(f0);
	free(f2);
	free(src);
}

/* The first write of a page torn: no valid slot, the blocks read as zeros. */
static void test_crash_first_write_torn(void **state)
{
	struct env *e = *state;
	const uint64_t d = zl_chunk_data_off(CS), flen = d + CS;
	uint8_t *src = t_alloc(NULL, 8192), *f0, *f2, back[4096];

	assert_int_equal(do_write(e, 21, 200 * 4096, 3, "abc"), 0); /* file exists */
	zl_chunk_store_destroy(e->s);
	f0 = img_load(e, 21, flen);
	env_open(e);
	fill(src, 8192, 9);
	assert_int_equal(do_write(e, 21, 0, 8192, src), 0);
	zl_chunk_store_destroy(e->s);
	f2 = img_load(e, 21, flen);
	/* f0's current slot is A (first round); the second round went to B. */
	assert_memory_equal(f0 + zl_chunk_slot_off(0, 0), f2 + zl_chunk_slot_off(0, 0), 4096);
	memcpy(f2 + zl_chunk_slot_off(0, 1) + 1024, f0 + zl_chunk_slot_off(0, 1) + 1024, 3072);
	memcpy(f2 + d, f0 + d, 8192); /* data not written yet */
	img_store(e, 21, f2, flen);
	env_open(e);
	for (uint32_t b = 0; b < 2; b++) {
		assert_int_equal(do_read(e, 21, b * 4096, 4096, back), 0);
		for (size_t i = 0; i < sizeof(back); i++)
			assert_int_equal(back[i], 0);
	}
	assert_int_equal(do_read(e, 21, 200 * 4096, 3, back), 0);
	assert_memory_equal(back, "abc", 3);
	free(f0);
	free(f2);
	free(src);
}

/* DISCARD / WRITE_ZEROES: pages, then punch and edge writes, then fsync. */
static void test_crash_zero_steps(void **state)
{
	struct env *e = *state;
	const uint64_t d = zl_chunk_data_off(CS), flen = d + CS;
	/* Old data on blocks [10, 31); zeroed: 12.5 .. 27.5 (edges 12 and 27,
	 * whole blocks [13, 27)). */
	const uint32_t off = 12 * 4096 + 2048, len = 15 * 4096;
	uint8_t *src = malloc(21 * 4096), *f0, *f2, *img = malloc(flen);
	struct zl_chunk_store_stats st0, st1;
	uint64_t ver;

	fill(src, 21 * 4096, 4);
	assert_int_equal(io_write(e, CS, 22, 10 * 4096, 21 * 4096, src, 5), 0);
	zl_chunk_store_destroy(e->s);
	f0 = img_load(e, 22, flen);
	env_open(e);
	zl_chunk_store_stats(e->s, &st0);
	assert_int_equal(io_zero(e, CS, 22, off, len, 6), 0);
	zl_chunk_store_stats(e->s, &st1);
	/* The punch was followed by a completed fdatasync before the ack. */
	assert_int_equal(st1.zero_syncs - st0.zero_syncs, 1);
	assert_int_equal(zl_chunk_version(e->s, VOL, 22, CS, &ver), 0);
	assert_int_equal(ver, 6);
	/* Zeroing inside one block punches nothing: no fsync needed (its
	 * rewrite is RWF_DSYNC). */
	assert_int_equal(io_write(e, CS, 23, 0, 4096, src, 1), 0);
	assert_int_equal(io_zero(e, CS, 23, 10, 100, 2), 0);
	zl_chunk_store_stats(e->s, &st0);
	assert_int_equal(st0.zero_syncs, st1.zero_syncs);
	zl_chunk_store_destroy(e->s);
	f2 = img_load(e, 22, flen);
	for (uint32_t b = 13; b < 27; b++) /* really punched (reads zero) */
		for (size_t i = 0; i < 4096; i++)
			assert_int_equal(f2[d + b * 4096ull + i], 0);

	/* steps: 0 pages only, 1 pages + punch, 2 pages + edges, 3 all. */
	for (unsigned step = 0; step < 4; step++) {
		memcpy(img, f0, flen);
		memcpy(img + 4096, f2 + 4096, 2 * 4096); /* both slots of page 0 */
		if (step & 1)
			memset(img + d + 13 * 4096ull, 0, 14 * 4096);
		if (step & 2) {
			memcpy(img + d + 12 * 4096ull, f2 + d + 12 * 4096ull, 4096);
			memcpy(img + d + 27 * 4096ull, f2 + d + 27 * 4096ull, 4096);
		}
		img_store(e, 22, img, flen);
		env_open(e);
		assert_int_equal(check_old_or_new(e, CS, 22, f0, f2, 0, 40),
				 (step & 1 ? 14u : 0u) + (step & 2 ? 2u : 0u));
		zl_chunk_store_destroy(e->s);
	}
	env_open(e);
	free(img);
	free(f0);
	free(f2);
	free(src);
}

/* Chunk versions: the highest of the writes, kept across reopen, per page. */
static void test_versions(void **state)
{
	struct env *e = *state;
	uint8_t buf[4096];
	uint64_t ver = 99;

	memset(buf, 7, sizeof(buf));
	assert_int_equal(zl_chunk_version(e->s, VOL, 30, CS4, &ver), 0);
	assert_int_equal(ver, 0); /* missing chunk */
	assert_int_equal(io_write(e, CS4, 30, 0, 100, buf, 5), 0);
	assert_int_equal(zl_chunk_version(e->s, VOL, 30, CS4, &ver), 0);
	assert_int_equal(ver, 5);
	assert_int_equal(io_write(e, CS4, 30, 4096, 100, buf, 3), 0); /* older: max stays */
	assert_int_equal(zl_chunk_version(e->s, VOL, 30, CS4, &ver), 0);
	assert_int_equal(ver, 5);
	assert_int_equal(io_write(e, CS4, 30, 1000 * 4096, 4096, buf, 9), 0); /* page 1 */
	assert_int_equal(io_zero(e, CS4, 30, 600 * 4096, 8192, 7), 0);
	zl_chunk_store_destroy(e->s);
	env_open(e);
	assert_int_equal(zl_chunk_version(e->s, VOL, 30, CS4, &ver), 0);
	assert_int_equal(ver, 9);
	assert_int_equal(io_read(e, CS4, 30, 1000 * 4096, 4096, buf), 0);
	assert_int_equal(buf[100], 7);
	assert_int_equal(zl_chunk_version(e->s, VOL, 30, CS, &ver), -ZL_ERR_INVAL);
}

/* ---- kill -9 under load ----
 * A child process runs a store with writes and zeroings of distinct blocks
 * in flight (one per block at a time) and reports every submission and
 * every acknowledgement on a pipe; the parent kills it with SIGKILL at a
 * random moment, reopens the file and checks every block: it must verify
 * and hold the last acknowledged operation's result or that of the one
 * still in flight. */

#define KILL_BLOCKS 64
#define KILL_DEPTH  12
#define KILL_UNIT_MAX (64u << 10)

/* Bytes per block of the load (4 KiB; 64 KiB in test_kill9_large, which the
 * journal write path writes in place) and the chunk size holding the 64. */
static uint32_t kill_unit = 4096, kill_cs = CS;

struct kill_rec {
	uint32_t kind; /* KILL_SUB_WRITE, KILL_SUB_ZERO, KILL_ACK */
	uint32_t block;
	uint64_t seed;
};

enum { KILL_SUB_WRITE = 1, KILL_SUB_ZERO, KILL_ACK };

struct kill_child {
	int wfd;
	uint32_t inflight;
	bool busy[KILL_BLOCKS];
};

struct kill_slot {
	struct kill_child *k;
	uint32_t block;
	uint64_t seed;
	uint8_t *buf;
};

static void kill_pattern(uint8_t *p, uint32_t block, uint64_t seed)
{
	fill(p, kill_unit, (unsigned)seed);
	for (uint32_t o = 0; o < kill_unit; o += 4096) {
		memcpy(p + o, &seed, 8);
		memcpy(p + o + 8, &block, 4);
	}
}

static void kill_send(int fd, uint32_t kind, uint32_t block, uint64_t seed)
{
	struct kill_rec r = {kind, block, seed};

	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
}

static void kill_done(void *arg, int status)
{
	struct kill_slot *sl = arg;

	if (status)
		_exit(4);
	kill_send(sl->k->wfd, KILL_ACK, sl->block, sl->seed);
	sl->k->busy[sl->block] = false;
	sl->k->inflight--;
	sl->block = UINT32_MAX;
}

/* The child: never returns. */
/* Closes the store and forks a child that runs child(dir, its pipe's write
 * end, arg) and never returns. Returns its pid; *rfd gets the read end. */
static pid_t kill_fork(struct env *e, void (*child)(const char *dir, int wfd, uint64_t arg),
		       uint64_t arg, int *rfd)
{
	int pfd[2];
	pid_t pid;

	zl_chunk_store_destroy(e->s);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		child(e->dir, pfd[1], arg);
	}
	close(pfd[1]);
	*rfd = pfd[0];
	return pid;
}

/* Reaps a child that must have died of the SIGKILL. */
static void kill_reap(pid_t pid, int rfd)
{
	int st;

	close(rfd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		fail_msg("child did not die of the kill: status %d", st);
}

static void kill_child_run(const char *dir, int wfd, uint64_t seed0)
{
	struct kill_child k = {.wfd = wfd};
	struct kill_slot slots[KILL_DEPTH];
	struct zl_chunk_store *s;
	struct zl_loop *loop;
	unsigned r = (unsigned)seed0;
	uint64_t seed = seed0;

	if (zl_loop_create(&loop))
		_exit(2);
	{
		struct zl_chunk_store_opts o = {.data_dir = dir,
						.loop = loop,
						.buf_alloc = t_alloc,
						.buf_free = t_free,
						.journal = jmode,
						.journal_size = ZL_CHUNK_JOURNAL_MIN};

		if (zl_chunk_store_create(&o, &s))
			_exit(2);
	}
	for (int i = 0; i < KILL_DEPTH; i++) {
		slots[i].k = &k;
		slots[i].block = UINT32_MAX;
		slots[i].buf = t_alloc(NULL, kill_unit);
	}
	for (;;) { /* ends by SIGKILL */
		for (int i = 0; i < KILL_DEPTH; i++) {
			struct kill_slot *sl = &slots[i];
			uint32_t b;
			int rc;

			if (sl->block != UINT32_MAX)
				continue;
			r = r * 1103515245 + 12345;
			b = (r >> 8) % KILL_BLOCKS;
			if (k.busy[b])
				continue;
			sl->block = b;
			sl->seed = ++seed;
			k.busy[b] = true;
			k.inflight++;
			if ((r >> 4) % 7 == 0) {
				kill_send(wfd, KILL_SUB_ZERO, b, sl->seed);
				rc = zl_chunk_zero(s, VOL, 50, kill_cs, b * kill_unit, kill_unit, sl->seed,
						   kill_done, sl);
			} else {
				kill_pattern(sl->buf, b, sl->seed);
				kill_send(wfd, KILL_SUB_WRITE, b, sl->seed);
				rc = zl_chunk_write(s, VOL, 50, kill_cs, b * kill_unit, kill_unit, sl->buf,
						    sl->seed, kill_done, sl);
			}
			if (rc)
				_exit(5);
		}
		zl_loop_run_once(loop, 10);
	}
}

/* What one operation leaves in a block: kind 0 (never written) or
 * KILL_SUB_ZERO read as zeros. */
static void kill_content(uint8_t *out, uint32_t kind, uint32_t block, uint64_t seed)
{
	if (kind == KILL_SUB_WRITE)
		kill_pattern(out, block, seed);
	else
		memset(out, 0, kill_unit);
}

static bool kill_matches(const uint8_t *p, uint32_t kind, uint32_t block, uint64_t seed)
{
	static uint8_t want[KILL_UNIT_MAX];

	kill_content(want, kind, block, seed);
	return !memcmp(p, want, kill_unit);
}

/* Every 4 KiB piece of p is the acknowledged content's or, with an operation
 * in flight, that one's (a multi-block write may land in part). */
static bool kill_pieces_ok(const uint8_t *p, const uint8_t *acked, const struct kill_rec *pend,
			   uint32_t block)
{
	static uint8_t want[KILL_UNIT_MAX];

	if (pend->kind)
		kill_content(want, pend->kind, block, pend->seed);
	for (uint32_t o = 0; o < kill_unit; o += 4096)
		if (memcmp(p + o, acked + o, 4096) && (!pend->kind || memcmp(p + o, want + o, 4096)))
			return false;
	return true;
}

/* Block b did not read back: fails with what the chunk file holds there
 * (the operation whose seed each 4 KiB piece carries; 0: zeros) against the
 * acknowledged and the in-flight operation. */
static void kill_read_fail(struct env *e, uint32_t b, int rc, const uint8_t *acked,
			   const struct kill_rec *pend)
{
	static uint8_t raw[KILL_UNIT_MAX];
	char path[700], pieces[256] = "";
	size_t n = 0;
	uint64_t sa;
	int fd;

	chunk_file(e, 50, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, raw, kill_unit,
			       (off_t)(zl_chunk_data_off(kill_cs) + (uint64_t)b * kill_unit)),
			 kill_unit);
	close(fd);
	for (uint32_t o = 0; o < kill_unit && n < sizeof(pieces) - 24; o += 4096) {
		uint64_t sd;

		memcpy(&sd, raw + o, 8);
		n += (size_t)snprintf(pieces + n, sizeof(pieces) - n, " %" PRIu64, sd);
	}
	memcpy(&sa, acked, 8);
	fail_msg("block %u reads as %s after the kill; the file holds seeds%s (acknowledged "
		 "%" PRIu64 ", in flight: kind %u seed %" PRIu64 ")",
		 b, zl_strerror(rc), pieces, sa, pend->kind, pend->seed);
}

static void test_kill9_under_load(void **state)
{
	struct env *e = *state;
	/* Per block: the state verified after the last round, the last
	 * acknowledged operation and the one in flight of this round. */
	struct kill_rec pend[KILL_BLOCKS];
	/* Contents: verified after the last round, and last acknowledged. */
	static uint8_t base_c[KILL_BLOCKS][KILL_UNIT_MAX], acked_c[KILL_BLOCKS][KILL_UNIT_MAX];
	uint64_t acks_total = 0, pending_seen = 0, ver, prev_ver = 0, rolled_total = 0, replayed = 0,
		 inexact_total = 0;
	struct zl_chunk_store_stats cst;
	static uint8_t back_all[KILL_BLOCKS * KILL_UNIT_MAX], back[KILL_UNIT_MAX];

	for (int round = 0; round < 4; round++) {
		uint64_t acks = 0, want_acks = 150 + (uint64_t)(rand() % 300);
		struct kill_rec rec;
		int rfd;
		pid_t pid;

		if (!round)
			memset(base_c, 0, sizeof(base_c));
		memcpy(acked_c, base_c, sizeof(acked_c));
		memset(pend, 0, sizeof(pend));
		pid = kill_fork(e, kill_child_run, (uint64_t)(round + 1) * 1000000, &rfd);
		/* Read until enough acknowledgements, then kill; the records
		 * written before the kill stay readable until EOF. */
		while (read(rfd, &rec, sizeof(rec)) == (ssize_t)sizeof(rec)) {
			assert_true(rec.block < KILL_BLOCKS);
			if (rec.kind == KILL_ACK) {
				kill_content(acked_c[rec.block], pend[rec.block].kind, rec.block,
					     pend[rec.block].seed);
				pend[rec.block].kind = 0;
				if (++acks == want_acks)
					assert_int_equal(kill(pid, SIGKILL), 0);
			} else {
				pend[rec.block] = rec;
			}
		}
		kill_reap(pid, rfd);
		acks_total += acks;
		env_open(e);
		for (uint32_t b = 0; b < KILL_BLOCKS; b++) {
			int rc = io_read(e, kill_cs, 50, b * kill_unit, kill_unit, back);

			if (rc)
				kill_read_fail(e, b, rc, acked_c[b], &pend[b]);
			memcpy(back_all + (size_t)b * kill_unit, back, kill_unit);
			assert_true(kill_pieces_ok(back, acked_c[b], &pend[b], b));
			pending_seen += pend[b].kind != 0;
			memcpy(base_c[b], back, kill_unit);
		}
		/* The chunk's version never claims an operation whose data is
		 * missing (recovery trusts equal versions), and never goes back. */
		assert_int_equal(zl_chunk_version(e->s, VOL, 50, kill_cs, &ver), 0);
		for (uint32_t b = 0; b < KILL_BLOCKS; b++)
			if (pend[b].kind && pend[b].seed <= ver)
				assert_true(kill_matches(back_all + (size_t)b * kill_unit, pend[b].kind, b,
							 pend[b].seed));
		/* A kill leaves no clean marker: the open verified the chunk. A
		 * block whose operation did not land (matching its previous CRC)
		 * drops the version to 0, below every real one, so a peer's copy
		 * wins; otherwise the version never goes back. */
		zl_chunk_store_stats(e->s, &cst);
		assert_true(cst.unclean_start);
		rolled_total += cst.rolled_back_chunks;
		replayed += cst.jw.replay_records;
		/* Journal: the replay made the metadata match the data, so the
		 * verification that follows finds nothing to roll back. */
		if (jmode)
			assert_int_equal(cst.rolled_back_chunks, 0);
		/* Journal: exact, a version above 0 never names less than the
		 * chunk holds either (an operation in flight above it did not
		 * land), or a copy that really is at that version would tie with
		 * this one. (The direct path holds versions of writes finished
		 * out of order back, so it may: REPLICATION.md §7.) */
		for (uint32_t b = 0; jmode && ver && b < KILL_BLOCKS; b++)
			if (pend[b].kind && pend[b].seed > ver &&
			    memcmp(back_all + (size_t)b * kill_unit, acked_c[b], kill_unit))
				fail_msg("block %u holds operation %" PRIu64 " (or part of it) but "
					 "the chunk claims version %" PRIu64, b, pend[b].seed, ver);
		inexact_total += cst.replay_inexact_chunks;
		if (cst.rolled_back_chunks || cst.replay_inexact_chunks) {
			assert_int_equal(ver, 0);
		} else {
			assert_true(ver >= prev_ver);
			prev_ver = ver;
		}
	}
	print_message("kill -9 under load: 4 kills, %" PRIu64 " acknowledged operations "
		      "verified, %" PRIu64 " operations in flight at the kills, %" PRIu64
		      " reopens rolled back, %" PRIu64 " journal records replayed, %" PRIu64
		      " replays left a chunk between versions (dropped to 0)\n",
		      acks_total, pending_seen, rolled_total, replayed, inexact_total);
	assert_true(pending_seen > 0); /* the kills really hit operations in flight */
	if (jmode)
		assert_true(replayed > 0);
}

/* The same with 64 KiB writes and zeroings in a 4 MiB chunk: on the journal
 * path the writes go in place after their records. */
static void test_kill9_large(void **state)
{
	kill_unit = 64u << 10;
	kill_cs = CS4;
	test_kill9_under_load(state);
	kill_unit = 4096;
	kill_cs = CS;
}

/* ---- v1 files (0.1): header | CRC table | data | previous-CRC table ---- */

static void v1_file_make(struct env *e, uint64_t chunk, uint8_t *model1)
{
	const uint64_t data = 8192, prev_tbl = 8192 + CS;
	uint8_t hdr[4096] = {0}, tbl[4096] = {0}, ptbl[4096] = {0};
	char path[700], dir[700];
	int fd;

	snprintf(dir, sizeof(dir), "%s/chunks/vol-%016" PRIx64, e->dir, (uint64_t)VOL);
	mkdir(dir, 0755);
	chunk_file(e, chunk, path, sizeof(path));
	memset(model1, 0, CS);
	memcpy(hdr, "ZLCHUNK1", 8);
	memcpy(hdr + 8, &(uint64_t){VOL}, 8); /* little-endian host */
	memcpy(hdr + 16, &chunk, 8);
	memcpy(hdr + 24, &(uint32_t){CS}, 4);
	memcpy(hdr + 28, &(uint32_t){zl_crc32c(hdr, 28)}, 4);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)(prev_tbl + 4096)), 0);
	for (uint32_t b = 0; b < 256; b++) {
		uint8_t *p = model1 + (size_t)b * 4096;
		uint32_t c;

		if (b % 5 == 4) /* holes: entry 0 */
			continue;
		fill(p, 4096, b + 100);
		c = zl_crc32c(p, 4096);
		if (b == 33) { /* crashed v1 write: entry = new CRC, data old */
			memcpy(ptbl + 4 * b, &c, 4);
			c ^= 0x5a5a;
		}
		memcpy(tbl + 4 * b, &c, 4);
		assert_int_equal(pwrite(fd, p, 4096, (off_t)(data + b * 4096ull)), 4096);
	}
	/* Block 77: damaged before the conversion. */
	model1[77 * 4096 + 5] ^= 1;
	assert_int_equal(pwrite(fd, model1 + 77 * 4096, 4096, (off_t)(data + 77 * 4096ull)), 4096);
	assert_int_equal(pwrite(fd, hdr, 4096, 0), 4096);
	assert_int_equal(pwrite(fd, tbl, 4096, 4096), 4096);
	assert_int_equal(pwrite(fd, ptbl, 4096, (off_t)prev_tbl), 4096);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void v1_check(struct env *e, uint64_t chunk, const uint8_t *model1)
{
	uint8_t back[4096], hdr[8];

	for (uint32_t b = 0; b < 256; b++) {
		int rc = do_read(e, chunk, b * 4096, 4096, back);

		if (b == 77) {
			assert_int_equal(rc, -ZL_ERR_CORRUPT);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_memory_equal(back, model1 + (size_t)b * 4096, 4096);
	}
	file_rw(e, chunk, 0, hdr, 8, false);
	assert_memory_equal(hdr, "ZLCHUNK2", 8);
}

static void test_v1_convert(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	uint8_t *model1 = malloc(CS);
	char path[700];
	struct stat stb;
	uint64_t alloc;

	/* At start-up (the FORMAT marker is gone: a data dir of 0.1). */
	zl_chunk_store_destroy(e->s);
	snprintf(path, sizeof(path), "%s/chunks/FORMAT", e->dir);
	assert_int_equal(unlink(path), 0);
	v1_file_make(e, 40, model1);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.converted, 1);
	assert_int_equal(stat(path, &stb), 0);
	v1_check(e, 40, model1);
	assert_int_equal(zl_chunk_info(e->s, VOL, 40, &alloc), 0);
	assert_true(alloc < CS); /* holes stayed holes */
	/* Still a working v2 chunk. */
	assert_int_equal(do_write(e, 40, 77 * 4096, 4096, model1), 0);
	memcpy(model1 + 77 * 4096, model1, 4096);
	zl_chunk_store_destroy(e->s);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.converted, 0); /* marker present: no second scan */
	for (uint32_t b = 0; b < 256; b += 7) {
		uint8_t back[4096];

		assert_int_equal(do_read(e, 40, b * 4096, 4096, back), 0);
		assert_memory_equal(back, model1 + (size_t)b * 4096, 4096);
	}

	/* A v1 file that shows up later is converted when first opened. */
	v1_file_make(e, 41, model1);
	v1_check(e, 41, model1);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.converted, 1);
	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64 "/%016" PRIx64 ".zlc.v2.tmp",
		 e->dir, (uint64_t)VOL, (uint64_t)41);
	assert_int_equal(stat(path, &stb), -1);
	free(model1);
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

	/* zl_chunk_held (a clone's ZL_WF_ABSENT): a deleted chunk is not held,
	 * the others are, also those the LRU closed. */
	assert_false(zl_chunk_held(e->s, VOL, 2));
	for (uint64_t c = 0; c < 6; c++)
		assert_true(c == 2 || zl_chunk_held(e->s, VOL, c));
	assert_int_equal(zl_chunk_volume_delete(e->s, VOL, &removed), 0);
	assert_int_equal(removed, 5);
	for (uint64_t c = 0; c < 6; c++)
		assert_false(zl_chunk_held(e->s, VOL, c));
	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64, e->dir, (uint64_t)VOL);
	assert_int_equal(stat(path, &stb), -1);
	assert_int_equal(do_read(e, 0, 4096, 16, back), 0);
	assert_int_equal(back[0], 0);
	/* A write that outlived the delete (checked before it, started after)
	 * is refused and makes neither the file nor the directory again. */
	assert_true(zl_chunk_vol_gone(e->s, VOL));
	assert_int_equal(do_write(e, 3, 4096, 16, "0123456789abcdef"), -ZL_ERR_NOT_FOUND);
	assert_int_equal(stat(path, &stb), -1);
	assert_false(zl_chunk_vol_gone(e->s, VOL + 1));
}

struct vol_done {
	int status, calls;
	uint64_t removed;
};

static void vol_done_cb(void *arg, int status, uint64_t removed)
{
	struct vol_done *d = arg;

	d->status = status;
	d->removed = removed;
	d->calls++;
}

/* zl_chunk_volume_delete_start: the replicas are gone for every caller at
 * once, the files on an open worker; counted in flight until its callback;
 * a write queued on an open of the volume at the delete fails. */
static void test_volume_delete_async(void **state)
{
	struct env *e = *state;
	struct vol_done vd = {0};
	struct done d = {0};
	char path[PATH_MAX];
	struct stat stb;
	uint8_t back[16], p[4096];

	for (uint64_t c = 0; c < 5; c++)
		assert_int_equal(do_write(e, c, 4096, 16, "0123456789abcdef"), 0);
	fill(p, sizeof(p), 5);
	/* Chunk 7's creation is queued on its open when the delete starts. */
	assert_int_equal(zl_chunk_write(e->s, VOL, 7, CS, 0, 4096, p, 1, done_cb, &d), 0);
	assert_int_equal(zl_chunk_volume_delete_start(e->s, VOL, vol_done_cb, &vd), 0);
	assert_true(zl_chunk_vol_gone(e->s, VOL));
	for (uint64_t c = 0; c < 8; c++)
		assert_false(zl_chunk_held(e->s, VOL, c));
	assert_true(zl_chunk_store_inflight(e->s) >= 1);
	assert_int_equal(do_read(e, 1, 4096, 16, back), 0); /* gone: zeros */
	assert_int_equal(back[0], 0);
	for (int i = 0; i < 2000 && (!vd.calls || !d.calls); i++)
		zl_loop_run_once(e->loop, 10);
	assert_int_equal(vd.calls, 1);
	assert_int_equal(vd.status, 0);
	assert_true(vd.removed >= 5 && vd.removed <= 6); /* chunk 7's file, if made by then */
	assert_int_equal(d.status, -ZL_ERR_NOT_FOUND);
	snprintf(path, sizeof(path), "%s/chunks/vol-%016" PRIx64, e->dir, (uint64_t)VOL);
	for (int i = 0; i < 200 && stat(path, &stb) == 0; i++)
		zl_loop_run_once(e->loop, 10);
	assert_int_equal(stat(path, &stb), -1);
	assert_int_equal(zl_chunk_store_inflight(e->s), 0);
	assert_int_equal(do_write(e, 3, 4096, 16, "0123456789abcdef"), -ZL_ERR_NOT_FOUND);
}

/* A second delete of a volume whose files are being removed (VOLUME_DELETE,
 * then the tombstone round it causes) waits for that removal instead of
 * queueing another: one job on the open workers, both callbacks with its
 * status, the files counted once (for the first); a delete after it ended
 * finds nothing to remove. */
static void test_volume_delete_twice(void **state)
{
	struct env *e = *state;
	struct vol_done a = {0}, b = {0}, c = {0};
	struct zl_chunk_store_stats st;
	uint32_t jobs0;

	for (uint64_t k = 0; k < 5; k++)
		assert_int_equal(do_write(e, k, 4096, 16, "0123456789abcdef"), 0);
	zl_chunk_store_stats(e->s, &st);
	jobs0 = st.open_jobs;
	assert_int_equal(zl_chunk_volume_delete_start(e->s, VOL, vol_done_cb, &a), 0);
	assert_int_equal(zl_chunk_volume_delete_start(e->s, VOL, vol_done_cb, &b), 0);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.open_jobs, jobs0 + 1);
	assert_int_equal(st.vol_removals, 2);
	for (int i = 0; i < 2000 && (!a.calls || !b.calls); i++)
		zl_loop_run_once(e->loop, 10);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	assert_int_equal(a.status, 0);
	assert_int_equal(b.status, 0);
	assert_int_equal(a.removed, 5);
	assert_int_equal(b.removed, 0);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.vol_removals, 0);
	assert_int_equal(zl_chunk_volume_delete_start(e->s, VOL, vol_done_cb, &c), 0);
	for (int i = 0; i < 2000 && !c.calls; i++)
		zl_loop_run_once(e->loop, 10);
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.status, 0);
	assert_int_equal(c.removed, 0);
	assert_int_equal(zl_chunk_store_inflight(e->s), 0);
}

/* Entries of directory path other than . and .. (-1: cannot list it). */
static int dir_entries(const char *path)
{
	struct dirent *de;
	DIR *d = opendir(path);
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* Descriptors of this process open on a file whose /proc link contains
 * name (an unlinked file's link ends in " (deleted)"). */
static int fds_on(const char *name)
{
	char link[64], target[1024];
	int n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		n += strstr(target, name) != NULL;
	}
	return n;
}

/* Runs the loop until no operation and no metadata round is in flight (a
 * round that claims a finished write's version ends after its callback and
 * holds the chunk's file until then). */
static void quiesce(struct env *e)
{
	uint64_t deadline = zl_now_ms() + 20000;
	struct zl_chunk_store_stats st;

	for (;;) {
		zl_chunk_store_stats(e->s, &st);
		if (!st.inflight && st.meta_rounds_done == st.meta_rounds)
			return;
		assert_true(zl_now_ms() < deadline);
		zl_loop_run_once(e->loop, 50);
	}
}

/* A delete with a write, a write queued behind it and a flush in flight on
 * the chunk (and one with only a flush in flight): the file goes at once,
 * the descriptor stays open until the last of them ended (none completes
 * with EBADF, none is lost, none runs twice), and a write after the delete
 * makes a new replica that holds nothing of the old one. */
static void test_delete_inflight(void **state)
{
	struct env *e = *state;
	uint8_t *p = t_alloc(NULL, CS), *q = t_alloc(NULL, 65536), *z = t_alloc(NULL, 4096);
	uint8_t back[4096], zeros[4096] = {0};
	char path7[700], path9[700], name7[128], name9[128];
	struct zl_chunk_store_stats st;
	struct stat stb;

	fill(p, CS, 5);
	memset(q, 0x71, 65536);
	memset(z, 0x7a, 4096);
	snprintf(path7, sizeof(path7), "%s/chunks/vol-%016" PRIx64 "/%016x.zlc", e->dir,
		 (uint64_t)VOL, 7);
	snprintf(path9, sizeof(path9), "%s/chunks/vol-%016" PRIx64 "/%016x.zlc", e->dir,
		 (uint64_t)VOL, 9);
	/* A deleted chunk's file is moved into the trash, then unlinked
	 * there by a sweep on an open worker. */
	snprintf(name7, sizeof(name7), "/.trash/%016" PRIx64 "-7-", (uint64_t)VOL);
	snprintf(name9, sizeof(name9), "/.trash/%016" PRIx64 "-9-", (uint64_t)VOL);
	for (int round = 0; round < 8; round++) {
		struct done d[5] = {0};
		uint64_t deferred;

		assert_int_equal(io_write(e, CS, 7, 0, CS, p, 1), 0);
		assert_int_equal(io_write(e, CS, 9, 0, CS, p, 1), 0);
		/* Let the metadata rounds that claim version 1 end (and the
		 * previous round's deferred close happen), so that on chunk 9
		 * only the flush holds the file. */
		quiesce(e);
		zl_chunk_store_stats(e->s, &st);
		deferred = st.deferred_closes;
		assert_int_equal(zl_chunk_write(e->s, VOL, 7, CS, 0, 65536, q, 2, done_cb, &d[0]),
				 0);
		/* Overlaps d[0]: waits, starts after d[0] ended, on the old file. */
		assert_int_equal(zl_chunk_write(e->s, VOL, 7, CS, 4096, 8192, q, 3, done_cb, &d[1]),
				 0);
		assert_int_equal(zl_chunk_flush(e->s, VOL, done_cb, &d[2]), 0);
		if (round % 2) /* some rounds let the SQEs reach the kernel first */
			zl_loop_run_once(e->loop, 0);
		assert_int_equal(zl_chunk_delete(e->s, VOL, 7), 0);
		assert_int_equal(zl_chunk_delete(e->s, VOL, 9), 0);
		assert_int_equal(stat(path7, &stb), -1);
		assert_int_equal(errno, ENOENT);
		assert_int_equal(stat(path9, &stb), -1);
		/* Nothing completed yet (callbacks run from the loop): both
		 * descriptors are still open on the unlinked files. */
		if (!d[2].calls) {
			/* Journal mode: a flush holds no file (acknowledged
			 * writes are durable in the journal), so chunk 9 closed
			 * at once. */
			assert_int_equal(fds_on(name7), 1);
			assert_int_equal(fds_on(name9), jmode ? 0 : 1);
			zl_chunk_store_stats(e->s, &st);
			assert_int_equal(st.deferred_closes, deferred + (jmode ? 1 : 2));
		}
		/* A write after the delete: a new replica, a new file. */
		assert_int_equal(zl_chunk_write(e->s, VOL, 7, CS, 4096, 4096, z, 4, done_cb, &d[3]),
				 0);
		assert_int_equal(zl_chunk_flush(e->s, VOL, done_cb, &d[4]), 0);
		wait_all(e, d, 5);
		/* Created on an open worker before the write ran. */
		assert_int_equal(stat(path7, &stb), 0);
		for (int i = 0; i < 5; i++)
			assert_int_equal(d[i].status, 0);
		quiesce(e);
		/* The last completion closed the old descriptors. */
		assert_int_equal(fds_on(name7), 0);
		assert_int_equal(fds_on(name9), 0);
		assert_int_equal(zl_chunk_store_inflight(e->s), 0);
		assert_int_equal(io_read(e, CS, 7, 0, 4096, back), 0);
		assert_memory_equal(back, zeros, 4096);
		assert_int_equal(io_read(e, CS, 7, 4096, 4096, back), 0);
		assert_memory_equal(back, z, 4096);
		assert_int_equal(io_read(e, CS, 7, 65536, 4096, back), 0);
		assert_memory_equal(back, zeros, 4096);
		assert_int_equal(io_read(e, CS, 9, 0, 4096, back), 0);
		assert_memory_equal(back, zeros, 4096);
		assert_int_equal(zl_chunk_delete(e->s, VOL, 7), 0);
	}
	/* The sweeps unlink every file moved into the trash. */
	snprintf(path7, sizeof(path7), "%s/chunks/.trash", e->dir);
	for (int i = 0; i < 500 && dir_entries(path7); i++)
		zl_loop_run_once(e->loop, 10);
	assert_int_equal(dir_entries(path7), 0);
	free(p);
	free(q);
	free(z);
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
	assert_int_equal(zl_chunk_write(e->s, VOL, 1, CS, 0, 0, buf, 0, done_cb, &d),
			 -ZL_ERR_RANGE);
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


/* Scrub helpers: a recorded chunk whose file is gone (also while open, and
 * after a restart that listed it) reads as ZL_ERR_CORRUPT, never zeros;
 * zl_chunk_scrub_read counts bad blocks instead of failing. */
static void test_scrub_missing(void **state)
{
	struct env *e = *state;
	uint8_t *p = malloc(CS), *buf = t_alloc(NULL, CS);
	char path[700];
	struct done d = {0};
	uint32_t bad = 0;
	uint64_t ver = 0, off;
	uint8_t b;

	fill(p, CS, 3);
	assert_int_equal(io_write(e, CS, 9, 0, CS, p, 0x100000007ull), 0);
	assert_int_equal(zl_chunk_scrub_stat(e->s, VOL, 9, CS, &ver), ZL_CHUNK_PRESENT);
	assert_true(ver == 0x100000007ull);
	assert_int_equal(zl_chunk_scrub_stat(e->s, VOL, 10, CS, &ver), ZL_CHUNK_ABSENT);
	assert_int_equal(do_read(e, 10, 0, 4096, buf), 0); /* never written: zeros */

	/* one flipped byte: scrub read counts one bad block, status 0 */
	off = zl_chunk_data_off(CS) + 5 * 4096 + 17;
	file_rw(e, 9, off, &b, 1, false);
	b ^= 0xff;
	file_rw(e, 9, off, &b, 1, true);
	assert_int_equal(zl_chunk_scrub_read(e->s, VOL, 9, CS, 0, CS, buf, &bad, done_cb, &d), 0);
	wait_all(e, &d, 1);
	assert_int_equal(d.status, 0);
	assert_int_equal(bad, 1);
	assert_int_equal(do_read(e, 9, 5 * 4096, 4096, buf), -ZL_ERR_CORRUPT);

	/* unlinked while open */
	chunk_file(e, 9, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(zl_chunk_scrub_stat(e->s, VOL, 9, CS, &ver), ZL_CHUNK_MISSING);
	assert_true(ver == 0x100000007ull);
	assert_int_equal(do_read(e, 9, 0, 4096, buf), -ZL_ERR_CORRUPT);
	/* Not open: its open finds no file (answered through cb). */
	memset(&d, 0, sizeof(d));
	assert_int_equal(zl_chunk_scrub_read(e->s, VOL, 9, CS, 0, 4096, buf, &bad, done_cb, &d), 0);
	wait_all(e, &d, 1);
	assert_int_equal(d.status, -ZL_ERR_NOT_FOUND);
	/* the version table answers 0 (behind), so recovery copies it */
	assert_int_equal(zl_chunk_version(e->s, VOL, 9, CS, &ver), 0);
	assert_true(ver == 0);

	/* reads notice an unlink under an open chunk within a second */
	assert_int_equal(io_write(e, CS, 11, 0, 4096, p, 5), 0);
	chunk_file(e, 11, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	usleep(1100 * 1000);
	assert_int_equal(do_read(e, 11, 0, 4096, buf), -ZL_ERR_CORRUPT);

	/* a restart lists the files: one removed while it was down is gone
	 * from the list, one removed after the start is missing */
	assert_int_equal(io_write(e, CS, 12, 0, 4096, p, 5), 0);
	zl_chunk_store_destroy(e->s);
	env_open(e);
	chunk_file(e, 12, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(do_read(e, 12, 0, 4096, buf), -ZL_ERR_CORRUPT);
	assert_int_equal(do_read(e, 9, 0, 4096, buf), 0);

	/* A write recreates a lost chunk's file, but it stays lost (reads fail,
	 * version 0, scrub says missing) until every block was written again:
	 * never the zeros of the blocks it lacks. */
	assert_int_equal(io_write(e, CS, 12, 0, 4096, p, 6), 0);
	assert_int_equal(do_read(e, 12, 0, 4096, buf), -ZL_ERR_CORRUPT);
	assert_int_equal(zl_chunk_version(e->s, VOL, 12, CS, &ver), 0);
	assert_true(ver == 0);
	assert_int_equal(zl_chunk_scrub_stat(e->s, VOL, 12, CS, &ver), ZL_CHUNK_MISSING);
	/* a whole-chunk copy: a zeroed first half (partial edge blocks do not
	 * count), then the data with the version */
	assert_int_equal(io_zero(e, CS, 12, 100, CS / 2 - 100, 0), 0);
	assert_int_equal(do_read(e, 12, CS / 2, 4096, buf), -ZL_ERR_CORRUPT);
	assert_int_equal(io_write(e, CS, 12, 0, 4096, p, 0), 0);
	assert_int_equal(do_read(e, 12, CS / 2, 4096, buf), -ZL_ERR_CORRUPT);
	assert_int_equal(io_write(e, CS, 12, CS / 2, CS / 2, p, 0x200000001ull), 0);
	assert_int_equal(do_read(e, 12, 0, 4096, buf), 0);
	assert_memory_equal(buf, p, 4096);
	assert_int_equal(zl_chunk_version(e->s, VOL, 12, CS, &ver), 0);
	assert_true(ver == 0x200000001ull);
	assert_int_equal(zl_chunk_scrub_stat(e->s, VOL, 12, CS, &ver), ZL_CHUNK_PRESENT);

	/* CHUNK_DELETE forgets: zeros again, and a write makes a whole chunk */
	assert_int_equal(zl_chunk_delete(e->s, VOL, 12), 0);
	assert_int_equal(do_read(e, 12, 0, 4096, buf), 0);
	assert_int_equal(io_write(e, CS, 12, 0, 4096, p, 9), 0);
	assert_int_equal(do_read(e, 12, 0, 4096, buf), 0);
	assert_memory_equal(buf, p, 4096);
	free(p);
	free(buf);
}

/* ---- unclean start ----
 * A clean close leaves chunks/CLEAN; without it (kill -9, power loss) the
 * store verifies every chunk at open. The crash is simulated by putting a
 * block's old data back behind the store's back while its metadata says the
 * new write happened (the metadata is durable before the data). */

#define UC_CHUNK 40

static void clean_marker_drop(struct env *e)
{
	char path[700];

	snprintf(path, sizeof(path), "%s/chunks/CLEAN", e->dir);
	assert_int_equal(unlink(path), 0); /* the clean close wrote it */
}

static void block_put(struct env *e, uint64_t chunk, uint32_t b, const uint8_t *p)
{
	file_rw(e, chunk, zl_chunk_data_off(CS) + (uint64_t)b * 4096, (void *)p, 4096, true);
}

/* Closes the store, puts old data into block b, reopens without (crash) or
 * with the clean marker. */
static void crash_reopen(struct env *e, uint32_t b, const uint8_t *old, bool crash)
{
	zl_chunk_store_destroy(e->s);
	if (old)
		block_put(e, UC_CHUNK, b, old);
	if (crash)
		clean_marker_drop(e);
	env_open(e);
}

/* What the unclean start relies on (zl_dio_settle): once the process that
 * wrote is reaped and settle returned, no write of it lands any more. A
 * child submits SETTLE_N O_DIRECT writes into holes (the case that lands
 * late: the extent is converted from a kernel workqueue after the reap) and
 * is killed; every 64 KiB piece must then be old or new, and still the same
 * after a window in which a late write would show. */
#define SETTLE_N  256
#define SETTLE_SZ (64u << 10)

static void settle_read(int fd, uint8_t *buf, uint8_t *state)
{
	for (uint32_t i = SETTLE_N; i-- > 0;) { /* the last submitted first */
		assert_int_equal(pread(fd, buf, SETTLE_SZ, (off_t)i * SETTLE_SZ), SETTLE_SZ);
		state[i] = buf[0];
		for (uint32_t o = 1; o < SETTLE_SZ; o++)
			if (buf[o] != buf[0])
				fail_msg("piece %u holds parts of two writes", i);
		if (buf[0] != 0 && buf[0] != 0x5e)
			fail_msg("piece %u holds 0x%02x, neither old nor new", i, buf[0]);
	}
}

static void settle_phase(struct env *e)
{
	static uint8_t now_st[SETTLE_N], later_st[SETTLE_N];
	uint32_t late = 0, landed = 0;
	uint8_t *buf = t_alloc(NULL, SETTLE_SZ);
	char path[700];
	int fd, pfd[2], st;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/settle.dat", e->dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("O_DIRECT open of %s: %s (put ZL_BUILD_DIR on ext4/xfs)", path,
			 strerror(errno));
	for (int round = 0; round < 3; round++) {
		/* Written, then punched: holes, as a zeroing leaves them. */
		memset(buf, 0x11, SETTLE_SZ);
		for (uint32_t i = 0; i < SETTLE_N; i++)
			assert_int_equal(pwrite(fd, buf, SETTLE_SZ, (off_t)i * SETTLE_SZ),
					 SETTLE_SZ);
		assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
					   (off_t)SETTLE_N * SETTLE_SZ),
				 0);
		assert_int_equal(fsync(fd), 0);
		assert_int_equal(pipe(pfd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct io_uring ring;

			if (io_uring_queue_init(SETTLE_N, &ring, 0))
				_exit(2);
			memset(buf, 0x5e, SETTLE_SZ);
			for (uint32_t i = 0; i < SETTLE_N; i++) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

				io_uring_prep_write(sqe, fd, buf, SETTLE_SZ,
						    (uint64_t)i * SETTLE_SZ);
				sqe->rw_flags = RWF_DSYNC;
			}
			if (io_uring_submit(&ring) != SETTLE_N || write(pfd[1], "s", 1) != 1)
				_exit(3);
			for (;;)
				pause();
		}
		close(pfd[1]);
		assert_int_equal(read(pfd[0], &(char){0}, 1), 1);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		close(pfd[0]);
		assert_true(WIFSIGNALED(st));
		assert_int_equal(zl_dio_settle(fd), 0);
		settle_read(fd, buf, now_st);
		usleep(200 * 1000); /* the window: a late write lands in it */
		settle_read(fd, buf, later_st);
		for (uint32_t i = 0; i < SETTLE_N; i++) {
			late += now_st[i] != later_st[i];
			landed += later_st[i] != 0;
		}
	}
	close(fd);
	unlink(path);
	free(buf);
	print_message("settle: %u of %u writes of killed processes landed, %u after the "
		      "settle\n",
		      landed, 3 * SETTLE_N, late);
	assert_int_equal(late, 0);
	assert_true(landed > 0); /* the kills really left writes to wait for */
}

static void test_unclean_rollback(void **state)
{
	struct env *e = *state;
	uint8_t a[4096], b2[8192], d[4096], z[4096], back[4096];
	struct zl_chunk_store_stats st;
	uint64_t ver;

	fill(a, sizeof(a), 11);
	fill(b2, sizeof(b2), 12);
	fill(d, sizeof(d), 13);
	memset(z, 0, sizeof(z));
	assert_int_equal(io_write(e, CS, UC_CHUNK, 5 * 4096, 4096, a, 1), 0);
	assert_int_equal(io_write(e, CS, UC_CHUNK, 5 * 4096, 8192, b2, 2), 0); /* blocks 5, 6 */
	assert_int_equal(io_write(e, CS, UC_CHUNK + 1, 0, 4096, d, 2), 0); /* untouched chunk */

	/* A clean restart: no scan. */
	crash_reopen(e, 0, NULL, false);
	zl_chunk_store_stats(e->s, &st);
	assert_false(st.unclean_start);

	/* Crash: block 5's write of version 2 did not land. */
	crash_reopen(e, 5, a, true);
	zl_chunk_store_stats(e->s, &st);
	assert_true(st.unclean_start);
	assert_int_equal(st.rolled_back_chunks, 1);
	assert_int_equal(st.rolled_back_blocks, 1);
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK, CS, &ver), 0);
	assert_int_equal(ver, 0); /* behind every real version: a peer's copy wins */
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK + 1, CS, &ver), 0);
	assert_int_equal(ver, 2);
	assert_int_equal(io_read(e, CS, UC_CHUNK, 5 * 4096, 4096, back), 0);
	assert_memory_equal(back, a, 4096);
	assert_int_equal(io_read(e, CS, UC_CHUNK, 6 * 4096, 4096, back), 0);
	assert_memory_equal(back, b2 + 4096, 4096);

	/* Version 0 is on disk: a second crash keeps it, nothing to roll back. */
	crash_reopen(e, 0, NULL, true);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.rolled_back_chunks, 0);
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK, CS, &ver), 0);
	assert_int_equal(ver, 0);

	/* Double crash: the next write of block 5 records the data really on
	 * disk (a) as prev, so its own crash before the data leaves a legal
	 * block, not a false corruption. */
	assert_int_equal(io_write(e, CS, UC_CHUNK, 5 * 4096, 4096, d, 3), 0);
	crash_reopen(e, 5, a, true);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.rolled_back_blocks, 1);
	assert_int_equal(io_read(e, CS, UC_CHUNK, 5 * 4096, 4096, back), 0);
	assert_memory_equal(back, a, 4096);
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK, CS, &ver), 0);
	assert_int_equal(ver, 0);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.corruptions, 0);

	/* A zeroing whose punch did not land: the old data is legal. */
	assert_int_equal(io_write(e, CS, UC_CHUNK, 7 * 4096, 4096, d, 4), 0);
	assert_int_equal(io_zero(e, CS, UC_CHUNK, 7 * 4096, 4096, 5), 0);
	crash_reopen(e, 7, d, true);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.rolled_back_blocks, 1);
	assert_int_equal(io_read(e, CS, UC_CHUNK, 7 * 4096, 4096, back), 0);
	assert_memory_equal(back, d, 4096);
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK, CS, &ver), 0);
	assert_int_equal(ver, 0);

	/* A new full write makes the chunk current again. */
	assert_int_equal(io_write(e, CS, UC_CHUNK, 5 * 4096, 4096, z, 6), 0);
	assert_int_equal(zl_chunk_version(e->s, VOL, UC_CHUNK, CS, &ver), 0);
	assert_int_equal(ver, 6);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.corruptions, 0);

	/* A killed store's writes may still land after it was reaped. */
	settle_phase(e);
}

/* In steady state (a clean open, no scan) a block verifying through
 * prev_crc is adopted, so a double crash is no false corruption either. */
static void test_prev_adopt(void **state)
{
	struct env *e = *state;
	uint8_t a[4096], b[4096], d[4096], back[4096];
	struct zl_chunk_store_stats st;

	fill(a, sizeof(a), 21);
	fill(b, sizeof(b), 22);
	fill(d, sizeof(d), 23);
	assert_int_equal(io_write(e, CS, UC_CHUNK, 9 * 4096, 4096, a, 1), 0);
	assert_int_equal(io_write(e, CS, UC_CHUNK, 9 * 4096, 4096, b, 2), 0);
	crash_reopen(e, 9, a, false); /* entry {b, a}, data a */
	assert_int_equal(io_read(e, CS, UC_CHUNK, 9 * 4096, 4096, back), 0);
	assert_memory_equal(back, a, 4096);
	assert_int_equal(io_write(e, CS, UC_CHUNK, 9 * 4096, 4096, d, 3), 0);
	crash_reopen(e, 9, a, false); /* entry must be {d, a} */
	assert_int_equal(io_read(e, CS, UC_CHUNK, 9 * 4096, 4096, back), 0);
	assert_memory_equal(back, a, 4096);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.corruptions, 0);
}

/* ---- the journal write path ----
 * A child process runs a journal-mode store, acknowledges its operations
 * and exits without closing the store (no checkpoint, no clean marker: what
 * a crash right after the acknowledgements leaves). Inside the child, a
 * failed step exits with a code naming it (cmocka's asserts belong to the
 * parent). */

#define JCHUNK 60

static void jc_wait(struct zl_loop *loop, struct done *d, int n)
{
	uint64_t deadline = zl_now_ms() + 20000;

	for (int i = 0; i < n; i++) {
		while (!d[i].calls) {
			if (zl_now_ms() > deadline)
				_exit(20);
			zl_loop_run_once(loop, 50);
		}
		if (d[i].status)
			_exit(21);
	}
}

static void jchild(struct env *e, void (*fn)(struct env *c))
{
	pid_t pid;
	int st;

	zl_chunk_store_destroy(e->s);
	e->s = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct env c = *e;

		if (zl_loop_create(&c.loop) || env_open_mode(&c, true))
			_exit(10);
		fn(&c);
		_exit(0); /* the store is not closed */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void jpattern(uint8_t *p, uint32_t block, unsigned seed)
{
	fill(p, 4096, seed + block);
	memcpy(p, &block, 4);
}

/* Submits a write in the child (exit 11 when refused). */
static void jc_write(struct env *c, uint32_t off, uint32_t len, const void *p, uint64_t ver,
		     struct done *d)
{
	if (zl_chunk_write(c->s, VOL, JCHUNK, CS, off, len, p, ver, done_cb, d))
		_exit(11);
}

/* Blocks 0..15 written whole, 100 bytes at block 17 + 1000, blocks 20..23
 * written then zeroed, block 30 written twice (the second wins). */
static void jc_writes(struct env *c)
{
	struct done d[20] = {0};
	uint8_t *src = t_alloc(NULL, 20 * 4096);
	int n = 0;

	for (uint32_t b = 0; b < 16; b++) {
		jpattern(src + (size_t)b * 4096, b, 1);
		jc_write(c, b * 4096, 4096, src + (size_t)b * 4096, b + 1, &d[n++]);
	}
	memset(src + 16 * 4096, 0x5c, 100);
	jc_write(c, 17 * 4096 + 1000, 100, src + 16 * 4096, 17, &d[n++]);
	jpattern(src + 17 * 4096, 20, 1);
	jc_write(c, 20 * 4096, 4096, src + 17 * 4096, 18, &d[n++]);
	jpattern(src + 18 * 4096, 30, 1);
	jc_write(c, 30 * 4096, 4096, src + 18 * 4096, 19, &d[n++]);
	jc_wait(c->loop, d, n);
	n = 0;
	memset(d, 0, sizeof(d));
	if (zl_chunk_zero(c->s, VOL, JCHUNK, CS, 20 * 4096, 4 * 4096, 20, done_cb, &d[n++]))
		_exit(12);
	jpattern(src + 19 * 4096, 30, 2);
	jc_write(c, 30 * 4096, 4096, src + 19 * 4096, 21, &d[n++]);
	jc_wait(c->loop, d, n);
}

static void jmodel_writes(uint8_t *m)
{
	memset(m, 0, CS);
	for (uint32_t b = 0; b < 16; b++)
		jpattern(m + (size_t)b * 4096, b, 1);
	memset(m + 17 * 4096 + 1000, 0x5c, 100);
	jpattern(m + 30 * 4096, 30, 2);
}

/* Overwrites the data of every block jc_writes wrote with garbage: the
 * chunk file writes behind the journal were never synced, a power cut may
 * lose any of them. */
static void jlose_data(struct env *e)
{
	static const uint32_t blocks[] = {0,  1,  2,  3,  4,  5,  6,  7,	 8,  9,
					  10, 11, 12, 13, 14, 15, 17, 20, 21, 22, 23, 30};
	uint8_t junk[4096];
	uint64_t d = zl_chunk_data_off(CS);

	memset(junk, 0xab, sizeof(junk));
	for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++)
		file_rw(e, JCHUNK, d + (uint64_t)blocks[i] * 4096, junk, sizeof(junk), true);
}

/* Acknowledged writes whose chunk-file copies were lost come back from the
 * journal, byte for byte, with their versions; the start that replayed them
 * moved the checkpoint, so the next start replays nothing. */
static void test_journal_replay(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	uint64_t ver;

	model = malloc(CS);
	jchild(e, jc_writes);
	jmodel_writes(model);
	jlose_data(e);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_true(st.jw.replay_records > 0);
	assert_int_equal(st.jw.replay_entries, 21); /* 20 writes, the zeroing's ZERO entry */
	check_all(e, JCHUNK);
	assert_int_equal(zl_chunk_version(e->s, VOL, JCHUNK, CS, &ver), 0);
	assert_int_equal(ver, 21);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.corruptions, 0);
	assert_int_equal(st.rolled_back_chunks, 0);
	/* Killed again right after the replay: nothing to replay twice. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.jw.replay_records, 0);
	check_all(e, JCHUNK);
	free(model);
}

/* The same journal opened by a store on the direct write path: replayed all
 * the same (a journal left behind is never ignored). */
static void test_journal_then_direct(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;

	model = malloc(CS);
	jchild(e, jc_writes);
	jmodel_writes(model);
	jlose_data(e);
	assert_int_equal(env_open_mode(e, false), 0);
	zl_chunk_store_stats(e->s, &st);
	assert_false(st.journal);
	assert_true(st.jw.replay_records > 0);
	check_all(e, JCHUNK);
	free(model);
}

/* A chunk deleted and written again: the journal's entries for the deleted
 * replica are never replayed into the new file. */
static void jc_delete_recreate(struct env *c)
{
	struct done d[2] = {0};
	uint8_t *a = t_alloc(NULL, 4096), *b = t_alloc(NULL, 4096);

	memset(a, 0xa1, 4096);
	memset(b, 0xb2, 4096);
	jc_write(c, 0, 4096, a, 1, &d[0]);
	jc_wait(c->loop, d, 1);
	if (zl_chunk_delete(c->s, VOL, JCHUNK))
		_exit(12);
	jc_write(c, 4096, 4096, b, 2, &d[1]);
	jc_wait(c->loop, d + 1, 1);
}

static void test_journal_delete_recreate(void **state)
{
	struct env *e = *state;
	uint8_t back[4096], want[4096];
	struct zl_chunk_store_stats st;

	jchild(e, jc_delete_recreate);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.jw.replay_entries, 2);
	memset(want, 0, sizeof(want));
	assert_int_equal(do_read(e, JCHUNK, 0, 4096, back), 0);
	assert_memory_equal(back, want, 4096);
	memset(want, 0xb2, sizeof(want));
	assert_int_equal(do_read(e, JCHUNK, 4096, 4096, back), 0);
	assert_memory_equal(back, want, 4096);
}

/* A 4 KiB write (in the record) and then a 64 KiB write over it (in place,
 * only its CRCs in the record), then 4 KiB again at block 15. */
static void jc_inline_inplace(struct env *c)
{
	struct done d[3] = {0};
	uint8_t *a = t_alloc(NULL, 4096), *b = t_alloc(NULL, 65536), *z = t_alloc(NULL, 4096);

	memset(a, 0xa1, 4096);
	memset(b, 0xb2, 65536);
	memset(z, 0xc3, 4096);
	jc_write(c, 0, 4096, a, 1, &d[0]);
	jc_wait(c->loop, d, 1);
	jc_write(c, 0, 65536, b, 2, &d[1]);
	jc_wait(c->loop, d + 1, 1);
	jc_write(c, 15 * 4096, 4096, z, 3, &d[2]);
	jc_wait(c->loop, d + 2, 1);
}

/* Replay keeps, per block, the newest entry whose data is there: the older
 * 4 KiB entry never overwrites the in-place write that followed it; the
 * newer 4 KiB entry does (its chunk-file copy lost here). */
static void test_journal_inline_then_inplace(void **state)
{
	struct env *e = *state;
	uint8_t back[65536], want[65536];
	struct zl_chunk_store_stats st;
	uint64_t ver;

	jchild(e, jc_inline_inplace);
	file_rw(e, JCHUNK, zl_chunk_data_off(CS) + 15 * 4096, memset(back, 0xee, 4096), 4096,
		true);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.jw.replay_entries, 3);
	memset(want, 0xb2, sizeof(want));
	memset(want + 15 * 4096, 0xc3, 4096);
	assert_int_equal(do_read(e, JCHUNK, 0, 65536, back), 0);
	assert_memory_equal(back, want, 65536);
	assert_int_equal(zl_chunk_version(e->s, VOL, JCHUNK, CS, &ver), 0);
	assert_int_equal(ver, 3);
}

/* 128 KiB writes to 32 chunks, 16 in flight, versions rising; checkpoints run
 * meanwhile (4 open files at most: every few chunks changed start one). The
 * child waits until everything was checkpointed, then exits. */
#define JV_CHUNKS 32
#define JV_ROUNDS 4

static void jc_versions(struct env *c)
{
	enum { QD = 16, N = JV_CHUNKS * JV_ROUNDS, W = 128 << 10 };
	struct done d[N] = {0};
	uint8_t *src = t_alloc(NULL, W);
	struct zl_chunk_store_stats st;
	uint64_t deadline = zl_now_ms() + 20000;

	memset(src, 0x3c, W);
	for (int i = 0; i < N; i++) {
		if (i >= QD)
			jc_wait(c->loop, &d[i - QD], 1);
		if (zl_chunk_write(c->s, VOL, 400 + (uint64_t)(i % JV_CHUNKS), CS,
				   (uint32_t)(i / JV_CHUNKS) * W, W, src, 1000 + (uint64_t)i,
				   done_cb, &d[i]))
			_exit(11);
	}
	jc_wait(c->loop, d, N);
	for (;;) {
		zl_chunk_store_stats(c->s, &st);
		if (!st.jw.used && !st.journal_dirty_chunks)
			break;
		if (zl_now_ms() > deadline)
			_exit(22);
		zl_loop_run_once(c->loop, 50);
	}
}

/* Every chunk's version survives in its chunk file once checkpointed (the
 * journal then holds nothing to replay): a checkpoint that ran while a write
 * was in flight must not leave a lower version on disk. */
static void test_journal_versions_checkpointed(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	uint64_t ver;

	jchild(e, jc_versions);
	env_open(e);
	zl_chunk_store_stats(e->s, &st);
	assert_int_equal(st.jw.replay_records, 0);
	for (int k = 0; k < JV_CHUNKS; k++) {
		assert_int_equal(zl_chunk_version(e->s, VOL, 400 + (uint64_t)k, CS, &ver), 0);
		assert_int_equal(ver, 1000 + (uint64_t)((JV_ROUNDS - 1) * JV_CHUNKS + k));
	}
}

/* Operations on a chunk not open wait on its open (an open worker opens or
 * creates the file) and run in their order once it is open; a delete while
 * the open is in flight answers them NOT_FOUND and removes the file it
 * created, and an operation after the delete gets a new replica. Nothing
 * below runs the loop between the submissions, so every open is still in
 * flight when the next call comes. */
static void test_open_waits(void **state)
{
	struct env *e = *state;
	struct done d[6] = {0};
	uint8_t *p = t_alloc(NULL, 8192), *r0 = t_alloc(NULL, 4096), *r1 = t_alloc(NULL, 4096);
	uint8_t zeros[4096] = {0};
	char path[PATH_MAX];
	struct stat stb;
	uint64_t ver;

	fill(p, 8192, 23);
	/* A write, then an overlapping read: the read sees the write. */
	assert_int_equal(zl_chunk_write(e->s, VOL, 30, CS, 0, 8192, p, 1, done_cb, &d[0]), 0);
	assert_int_equal(zl_chunk_read(e->s, VOL, 30, CS, 4096, 4096, r0, done_cb, &d[1]), 0);
	/* A read of a chunk with no file, then a write, then a read: zeros,
	 * the write creates the file, the second read sees it. */
	assert_int_equal(zl_chunk_read(e->s, VOL, 31, CS, 0, 4096, r1, done_cb, &d[2]), 0);
	assert_int_equal(zl_chunk_write(e->s, VOL, 31, CS, 0, 4096, p, 2, done_cb, &d[3]), 0);
	wait_all(e, d, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(d[i].status, 0);
	assert_memory_equal(r0, p + 4096, 4096);
	assert_memory_equal(r1, zeros, 4096);
	assert_int_equal(io_read(e, CS, 31, 0, 4096, r1), 0);
	assert_memory_equal(r1, p, 4096);
	assert_true(zl_chunk_held(e->s, VOL, 31));

	/* Deleted while its creation is in flight. */
	chunk_file(e, 32, path, sizeof(path));
	assert_int_equal(zl_chunk_write(e->s, VOL, 32, CS, 0, 4096, p, 3, done_cb, &d[4]), 0);
	assert_true(zl_chunk_held(e->s, VOL, 32)); /* a copy-up now would be EXISTS */
	assert_int_equal(zl_chunk_delete(e->s, VOL, 32), 0);
	assert_false(zl_chunk_held(e->s, VOL, 32));
	wait_all(e, &d[4], 1);
	assert_int_equal(d[4].status, -ZL_ERR_NOT_FOUND);
	assert_int_equal(stat(path, &stb), -1);
	assert_int_equal(errno, ENOENT);
	/* Again, with a write after the delete: a new replica holds only it. */
	memset(&d[4], 0, sizeof(d[4]));
	assert_int_equal(zl_chunk_write(e->s, VOL, 32, CS, 0, 4096, p, 4, done_cb, &d[4]), 0);
	assert_int_equal(zl_chunk_delete(e->s, VOL, 32), 0);
	assert_int_equal(zl_chunk_write(e->s, VOL, 32, CS, 4096, 4096, p + 4096, 5, done_cb,
					&d[5]), 0);
	wait_all(e, &d[4], 2);
	assert_int_equal(d[4].status, -ZL_ERR_NOT_FOUND);
	assert_int_equal(d[5].status, 0);
	assert_int_equal(stat(path, &stb), 0);
	assert_int_equal(io_read(e, CS, 32, 0, 4096, r1), 0);
	assert_memory_equal(r1, zeros, 4096);
	assert_int_equal(io_read(e, CS, 32, 4096, 4096, r1), 0);
	assert_memory_equal(r1, p + 4096, 4096);
	assert_int_equal(zl_chunk_version(e->s, VOL, 32, CS, &ver), 0);
	assert_true(ver == 5);
	assert_int_equal(zl_chunk_store_inflight(e->s), 0);
	free(p);
	free(r0);
	free(r1);
}

/* zl_chunk_warm: a closed chunk is opened off the loop (its callback once
 * it is in the table, then answered from memory: 1), a chunk with no file
 * ends at once with 0 and stays closed, warms join an open in flight in
 * order with other ops, a delete ends a warm in flight with NOT_FOUND. */
static void test_warm(void **state)
{
	struct env *e = *state;
	struct done d[6] = {0};
	uint8_t *p = t_alloc(NULL, 4096), *r = t_alloc(NULL, 4096);
	uint64_t ver;

	fill(p, 4096, 31);
	/* A warm reuses the context of an ended operation of a chunk freed
	 * since: it must not touch that chunk (ASan sees it if it does). */
	assert_int_equal(zl_chunk_write(e->s, VOL, 45, CS, 0, 4096, p, 1, done_cb, &d[0]), 0);
	wait_all(e, d, 1);
	assert_int_equal(zl_chunk_delete(e->s, VOL, 45), 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 46, CS, done_cb, &d[1]), 0);
	wait_all(e, &d[1], 1);
	assert_int_equal(d[1].status, 0);
	memset(d, 0, sizeof(d));
	assert_int_equal(zl_chunk_write(e->s, VOL, 40, CS, 0, 4096, p, 7, done_cb, &d[0]), 0);
	assert_int_equal(zl_chunk_write(e->s, VOL, 42, CS, 0, 4096, p, 9, done_cb, &d[1]), 0);
	wait_all(e, d, 2);
	assert_int_equal(d[0].status, 0);
	assert_int_equal(d[1].status, 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, CS, done_cb, &d[2]), 1); /* open */
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, 12345, done_cb, &d[2]), -ZL_ERR_INVAL);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, CS, NULL, NULL), -ZL_ERR_INVAL);
	/* Closed: a new store over the same directory. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	memset(d, 0, sizeof(d));
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, CS, done_cb, &d[0]), 0);
	/* A read queued behind it, and a second warm: in their order. */
	assert_int_equal(zl_chunk_read(e->s, VOL, 40, CS, 0, 4096, r, done_cb, &d[1]), 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, CS, done_cb, &d[2]), 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 41, CS, done_cb, &d[3]), 0); /* no file */
	assert_int_equal(zl_chunk_warm(e->s, VOL, 42, CS, done_cb, &d[4]), 0);
	assert_int_equal(zl_chunk_delete(e->s, VOL, 42), 0);
	wait_all(e, d, 5);
	assert_int_equal(d[0].status, 0);
	assert_int_equal(d[1].status, 0);
	assert_memory_equal(r, p, 4096);
	assert_int_equal(d[2].status, 0);
	assert_int_equal(d[3].status, 0);
	assert_int_equal(d[4].status, -ZL_ERR_NOT_FOUND);
	for (int i = 0; i < 5; i++)
		assert_int_equal(d[i].calls, 1);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 40, CS, done_cb, &d[5]), 1);
	assert_int_equal(zl_chunk_version(e->s, VOL, 40, CS, &ver), 0);
	assert_true(ver == 7);
	assert_int_equal(zl_chunk_version(e->s, VOL, 41, CS, &ver), 0);
	assert_true(ver == 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 41, CS, done_cb, &d[5]), 0); /* still none */
	wait_all(e, &d[5], 1);
	assert_int_equal(d[5].status, 0);
	assert_int_equal(zl_chunk_store_inflight(e->s), 0);
	free(p);
	free(r);
}

/* zl_chunk_changing: a write or zeroing counts from its submission (also
 * while it waits for the chunk's open) until its version is visible in
 * zl_chunk_version (answered), a read never, another chunk's never. */
static void test_changing(void **state)
{
	struct env *e = *state;
	struct done d[4] = {0};
	uint8_t *p = t_alloc(NULL, 4096), *r = t_alloc(NULL, 4096);
	uint64_t ver = 0;

	fill(p, 4096, 5);
	assert_false(zl_chunk_changing(e->s, VOL, 50));
	assert_int_equal(zl_chunk_write(e->s, VOL, 50, CS, 0, 4096, p, 3, done_cb, &d[0]), 0);
	assert_true(zl_chunk_changing(e->s, VOL, 50)); /* waits for the open */
	assert_false(zl_chunk_changing(e->s, VOL, 51));
	wait_all(e, d, 1);
	assert_int_equal(d[0].status, 0);
	assert_false(zl_chunk_changing(e->s, VOL, 50));
	assert_int_equal(zl_chunk_version(e->s, VOL, 50, CS, &ver), 0);
	assert_true(ver == 3);
	assert_int_equal(zl_chunk_read(e->s, VOL, 50, CS, 0, 4096, r, done_cb, &d[1]), 0);
	assert_false(zl_chunk_changing(e->s, VOL, 50));
	assert_int_equal(zl_chunk_write(e->s, VOL, 50, CS, 4096, 4096, p, 4, done_cb, &d[2]), 0);
	assert_true(zl_chunk_changing(e->s, VOL, 50));
	wait_all(e, &d[1], 2);
	assert_false(zl_chunk_changing(e->s, VOL, 50));
	assert_int_equal(zl_chunk_zero(e->s, VOL, 50, CS, 0, 4096, 5, done_cb, &d[3]), 0);
	assert_true(zl_chunk_changing(e->s, VOL, 50));
	wait_all(e, &d[3], 1);
	assert_false(zl_chunk_changing(e->s, VOL, 50));
	assert_int_equal(zl_chunk_version(e->s, VOL, 50, CS, &ver), 0);
	assert_true(ver == 5);
	free(p);
	free(r);
}

/* Group commit across chunks: 64 concurrent 4 KiB writes to 64 open chunks
 * share a few records; the disk sees far fewer durable writes than client
 * writes. (The chunks are created first: each creation ends on its own, on
 * an open worker, and starts its writes then.) */
static void test_journal_group_commit(void **state)
{
	struct env *e = *state;
	enum { N = 64 };
	struct done d[N] = {0}, d0[N] = {0};
	struct zl_chunk_store_stats st0, st;
	uint8_t *src = t_alloc(NULL, (size_t)N * 4096), back[4096];

	zl_chunk_store_destroy(e->s);
	env_max_open = 2 * N;
	env_open(e);
	fill(src, (size_t)N * 4096, 91);
	for (int i = 0; i < N; i++)
		assert_int_equal(zl_chunk_write(e->s, VOL, 200 + (uint64_t)i, CS, 0, 4096,
						src + (size_t)i * 4096, 1, done_cb, &d0[i]),
				 0);
	wait_all(e, d0, N);
	zl_chunk_store_stats(e->s, &st0);
	for (int i = 0; i < N; i++)
		assert_int_equal(zl_chunk_write(e->s, VOL, 200 + (uint64_t)i, CS, 8192, 4096,
						src + (size_t)i * 4096, 1, done_cb, &d[i]),
				 0);
	wait_all(e, d, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(d[i].status, 0);
	zl_chunk_store_stats(e->s, &st);
	st.jw.records -= st0.jw.records;
	st.durable_ios -= st0.durable_ios;
	print_message("journal group commit: %d writes to %d chunks, %" PRIu64
		      " records, %" PRIu64 " durable I/Os\n",
		      N, N, st.jw.records, st.durable_ios);
	assert_true(st.jw.records >= 1);
	assert_true(st.jw.records <= N / 8);
	assert_true(st.durable_ios <= N / 8);
	zl_chunk_store_destroy(e->s);
	env_max_open = 4;
	env_open(e);
	for (int i = 0; i < N; i++) {
		assert_int_equal(do_read(e, 200 + (uint64_t)i, 8192, 4096, back), 0);
		assert_memory_equal(back, src + (size_t)i * 4096, 4096);
	}
	free(src);
}

/* A nearly full data dir (zl_chunk_store_set_free): a write that needs new
 * blocks is refused NOSPC when it would leave less free than the ring plus
 * the slack (a write answered from the journal must find room in its chunk
 * file); an overwrite of blocks that hold data goes on; the estimate drops
 * by what each allowed write takes. */
static void test_journal_room(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	struct done d[6] = {0};
	uint8_t *p = t_alloc(NULL, 8192), *r = t_alloc(NULL, 8192);

	fill(p, 8192, 17);
	zl_chunk_store_stats(e->s, &st);
	/* Two blocks of room above what is kept. */
	zl_chunk_store_set_free(e->s, st.jw.ring + (8ull << 20) + 8192);
	assert_int_equal(zl_chunk_write(e->s, VOL, 60, CS, 0, 8192, p, 1, done_cb, &d[0]), 0);
	wait_all(e, d, 1);
	assert_int_equal(d[0].status, 0);
	/* No room left for a new block; an overwrite needs none. */
	assert_int_equal(zl_chunk_write(e->s, VOL, 60, CS, 8192, 4096, p, 2, done_cb, &d[1]), 0);
	wait_all(e, &d[1], 1);
	assert_int_equal(d[1].status, -ZL_ERR_NOSPC);
	assert_int_equal(zl_chunk_write(e->s, VOL, 60, CS, 0, 4096, p + 4096, 3, done_cb, &d[2]),
			 0);
	wait_all(e, &d[2], 1);
	assert_int_equal(d[2].status, 0);
	/* A partial write of a hole: its block is new too. */
	assert_int_equal(zl_chunk_write(e->s, VOL, 61, CS, 512, 512, p, 1, done_cb, &d[3]), 0);
	wait_all(e, &d[3], 1);
	assert_int_equal(d[3].status, -ZL_ERR_NOSPC);
	zl_chunk_store_stats(e->s, &st);
	assert_true(st.full_refused == 2);
	/* Space again (the next sample): new blocks are taken. */
	zl_chunk_store_set_free(e->s, 1ull << 40);
	assert_int_equal(zl_chunk_write(e->s, VOL, 60, CS, 8192, 4096, p, 4, done_cb, &d[4]), 0);
	wait_all(e, &d[4], 1);
	assert_int_equal(d[4].status, 0);
	assert_int_equal(zl_chunk_read(e->s, VOL, 60, CS, 0, 8192, r, done_cb, &d[5]), 0);
	wait_all(e, &d[5], 1);
	assert_int_equal(d[5].status, 0);
	assert_memory_equal(r, p + 4096, 4096);
	assert_memory_equal(r + 4096, p + 4096, 4096);
	free(p);
	free(r);
}

/* zl_chunk_overwrite (a primary whose row is short of room): a write or a
 * zeroing that would take a block holding no data fails NOSPC, nothing of
 * it applied (the chunk keeps its version and content), counted as refused
 * for room; one over blocks that hold data goes on, whatever the free
 * space. */
static void test_overwrite_only(void **state)
{
	struct env *e = *state;
	struct zl_chunk_store_stats st;
	struct done d[5] = {0};
	uint8_t *p = t_alloc(NULL, 8192), *q = t_alloc(NULL, 8192), *r = t_alloc(NULL, 8192);
	uint64_t ver = 0;

	fill(p, 8192, 23);
	fill(q, 8192, 29);
	/* A chunk never written: every block is new. */
	assert_int_equal(zl_chunk_overwrite(e->s, VOL, 70, CS, 0, 4096, p, NULL, 1, done_cb, &d[0]),
			 0);
	wait_all(e, d, 1);
	assert_int_equal(d[0].status, -ZL_ERR_NOSPC);
	assert_int_equal(io_write(e, CS, 71, 0, 8192, p, 2), 0);
	/* Half over data, half over a hole: refused whole. */
	assert_int_equal(
	    zl_chunk_overwrite(e->s, VOL, 71, CS, 4096, 8192, q, NULL, 3, done_cb, &d[1]), 0);
	wait_all(e, &d[1], 1);
	assert_int_equal(d[1].status, -ZL_ERR_NOSPC);
	assert_int_equal(zl_chunk_version(e->s, VOL, 71, CS, &ver), 0);
	assert_true(ver == 2);
	assert_int_equal(do_read(e, 71, 0, 8192, r), 0);
	assert_memory_equal(r, p, 8192);
	/* Over the blocks that hold data: applied. */
	assert_int_equal(zl_chunk_overwrite(e->s, VOL, 71, CS, 0, 8192, q, NULL, 4, done_cb, &d[2]),
			 0);
	wait_all(e, &d[2], 1);
	assert_int_equal(d[2].status, 0);
	assert_int_equal(do_read(e, 71, 0, 8192, r), 0);
	assert_memory_equal(r, q, 8192);
	/* A zeroing whose edge block is a hole needs it; whole blocks over
	 * data are punched. */
	assert_int_equal(
	    zl_chunk_overwrite(e->s, VOL, 71, CS, 4096, 4096 + 512, NULL, NULL, 5, done_cb, &d[3]),
	    0);
	wait_all(e, &d[3], 1);
	assert_int_equal(d[3].status, -ZL_ERR_NOSPC);
	assert_int_equal(
	    zl_chunk_overwrite(e->s, VOL, 71, CS, 4096, 4096, NULL, NULL, 6, done_cb, &d[4]), 0);
	wait_all(e, &d[4], 1);
	assert_int_equal(d[4].status, 0);
	assert_int_equal(do_read(e, 71, 0, 8192, r), 0);
	assert_memory_equal(r, q, 4096);
	for (int i = 4096; i < 8192; i++)
		assert_int_equal(r[i], 0);
	zl_chunk_store_stats(e->s, &st);
	assert_true(st.full_refused == 3);
	free(p);
	free(q);
	free(r);
}

/* Back-pressure: 1024 writes of 60 KiB (60 MiB, all in the records), 320
 * (18.75 MiB) in flight, through a 16 MiB ring: writes wait for checkpoints,
 * none fails, every byte reads back. */
static void test_journal_full(void **state)
{
	struct env *e = *state;
	enum { N = 1024, QD = 320, W = 60 << 10, PER = 16 };
	static struct done d[N];
	struct zl_chunk_store_stats st;
	uint8_t *src = t_alloc(NULL, (size_t)QD * W), *back = malloc(W);

	memset(d, 0, sizeof(d));
	for (int i = 0; i < N; i++) {
		if (i >= QD) {
			wait_all(e, &d[i - QD], 1);
			assert_int_equal(d[i - QD].status, 0);
		}
		fill(src + (size_t)(i % QD) * W, W, (unsigned)i);
		assert_int_equal(zl_chunk_write(e->s, VOL, 300 + (uint64_t)(i / PER), CS,
						(uint32_t)(i % PER) * (64u << 10), W,
						src + (size_t)(i % QD) * W, 1, done_cb, &d[i]),
				 0);
	}
	wait_all(e, d, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(d[i].status, 0);
	zl_chunk_store_stats(e->s, &st);
	print_message("journal full: %d x 60 KiB through a %" PRIu64 " MiB ring: %" PRIu64
		      " waits, %" PRIu64 " checkpoints\n",
		      N, st.jw.ring >> 20, st.jw.waits, st.checkpoints);
	assert_true(st.jw.waits > 0);
	assert_true(st.checkpoints > 0);
	assert_int_equal(st.jw.waiting, 0);
	for (int i = 0; i < N; i++) {
		fill(src, W, (unsigned)i);
		assert_int_equal(
		    do_read(e, 300 + (uint64_t)(i / PER), (uint32_t)(i % PER) * (64u << 10), W, back),
		    0);
		assert_memory_equal(back, src, W);
	}
	free(back);
	free(src);
}

/* ---- kill -9 while the journal is full ----
 * A child keeps 320 writes of 60 KiB in flight (18.75 MiB, all in the
 * records) through the 16 MiB ring, so writes wait for checkpoints; it
 * reports every submission and acknowledgement, and once writes are waiting
 * the parent kills it after enough acknowledgements. Every acknowledged
 * write must read back; one in flight old or new, per 4 KiB piece. */

#define JK_UNITS 320
#define JK_W	 (60u << 10)

enum { JK_SUB = 1, JK_ACK, JK_WAITING };

struct jk_slot {
	int wfd;
	uint32_t unit;
	uint64_t seed;
	bool busy;
	uint8_t *buf;
};

static void jk_pattern(uint8_t *p, uint32_t unit, uint64_t seed)
{
	fill(p, JK_W, (unsigned)seed);
	for (uint32_t o = 0; o < JK_W; o += 4096) {
		memcpy(p + o, &seed, 8);
		memcpy(p + o + 8, &unit, 4);
	}
}

static void jk_done(void *arg, int status)
{
	struct jk_slot *sl = arg;

	if (status)
		_exit(4);
	kill_send(sl->wfd, JK_ACK, sl->unit, sl->seed);
	sl->busy = false;
}

static void jk_child(const char *dir, int wfd, uint64_t unused)
{
	static struct jk_slot sl[JK_UNITS];
	struct zl_chunk_store_stats st;
	struct env c = {0};
	bool waiting_told = false;
	uint64_t seed = 0;

	snprintf(c.dir, sizeof(c.dir), "%s", dir);
	if (zl_loop_create(&c.loop) || env_open_mode(&c, true))
		_exit(2);
	for (uint32_t u = 0; u < JK_UNITS; u++) {
		sl[u] = (struct jk_slot){.wfd = wfd, .unit = u, .buf = t_alloc(NULL, JK_W)};
	}
	for (;;) { /* ends by SIGKILL */
		for (uint32_t u = 0; u < JK_UNITS; u++) {
			if (sl[u].busy)
				continue;
			sl[u].seed = ++seed;
			sl[u].busy = true;
			jk_pattern(sl[u].buf, u, sl[u].seed);
			kill_send(wfd, JK_SUB, u, sl[u].seed);
			if (zl_chunk_write(c.s, VOL, 500 + u / 16, CS, (u % 16) * (64u << 10), JK_W,
					   sl[u].buf, sl[u].seed, jk_done, &sl[u]))
				_exit(5);
		}
		zl_loop_run_once(c.loop, 10);
		zl_chunk_store_stats(c.s, &st);
		if (st.jw.waiting && !waiting_told) {
			kill_send(wfd, JK_WAITING, 0, st.jw.waiting);
			waiting_told = true;
		}
	}
}

static void test_journal_kill_full(void **state)
{
	struct env *e = *state;
	static uint64_t acked[JK_UNITS], pend[JK_UNITS];
	static uint8_t back[JK_W], a[JK_W], p[JK_W];
	uint64_t acks = 0, waiting = 0, pending_seen = 0;
	struct zl_chunk_store_stats cst;
	struct kill_rec rec;
	int rfd;
	pid_t pid = kill_fork(e, jk_child, 0, &rfd);

	while (read(rfd, &rec, sizeof(rec)) == (ssize_t)sizeof(rec)) {
		assert_true(rec.block < JK_UNITS || rec.kind == JK_WAITING);
		if (rec.kind == JK_WAITING) {
			waiting = rec.seed;
		} else if (rec.kind == JK_ACK) {
			acked[rec.block] = rec.seed;
			pend[rec.block] = 0;
			if (++acks == 1000 + JK_UNITS)
				assert_int_equal(kill(pid, SIGKILL), 0);
		} else {
			pend[rec.block] = rec.seed;
		}
	}
	kill_reap(pid, rfd);
	assert_true(waiting > 0); /* the journal was full: writes were waiting */
	env_open(e);
	for (uint32_t u = 0; u < JK_UNITS; u++) {
		assert_int_equal(do_read(e, 500 + u / 16, (u % 16) * (64u << 10), JK_W, back), 0);
		if (acked[u])
			jk_pattern(a, u, acked[u]);
		else
			memset(a, 0, JK_W);
		if (pend[u])
			jk_pattern(p, u, pend[u]);
		pending_seen += pend[u] != 0;
		for (uint32_t o = 0; o < JK_W; o += 4096)
			assert_true(!memcmp(back + o, a + o, 4096) ||
				    (pend[u] && !memcmp(back + o, p + o, 4096)));
	}
	zl_chunk_store_stats(e->s, &cst);
	assert_int_equal(cst.corruptions, 0);
	assert_true(cst.jw.replay_records > 0);
	print_message("kill -9 with the journal full: %" PRIu64 " writes acknowledged, %" PRIu64
		      " waiting at the first sign, %" PRIu64 " in flight at the kill, %" PRIu64
		      " records replayed\n",
		      acks, waiting, pending_seen, cst.jw.replay_records);
	assert_true(pending_seen > 0);
}

/* ---- snapshots: clone chunks (docs/SNAPSHOTS.md §2) ---- */

static int cow_io(struct env *e, uint64_t chunk, uint32_t off, uint32_t len, const void *p,
		  uint32_t seq, const uint32_t *snaps, uint32_t n)
{
	struct done d = {0};
	struct zl_chunk_cow w = {.vol = VOL,
				 .chunk = chunk,
				 .chunk_size = CS,
				 .off = off,
				 .len = len,
				 .zero = !p,
				 .data = p,
				 .seq = seq,
				 .snaps = snaps,
				 .n_snaps = n,
				 .cb = done_cb,
				 .arg = &d};

	return wait_one(e, &d, zl_chunk_cow_submit(e->s, &w));
}

/* seq 0 is refused by zl_chunk_snap_read, so it is tested directly. */
static int snap_rd(struct env *e, uint64_t chunk, uint32_t seq, uint32_t off, uint32_t len,
		   void *out)
{
	return io_read_seq(e, CS, chunk, seq, off, len, out);
}

static int snap_collect(struct env *e, const uint32_t *snaps, uint32_t n, uint32_t *removed)
{
	struct done d = {0};

	return wait_one(e, &d, zl_chunk_snap_gc(e->s, VOL, snaps, n, removed, done_cb, &d));
}

/* Files of VOL's directory: clone chunk files, and temporary files. */
static void snap_files(struct env *e, uint32_t *clones, uint32_t *tmps)
{
	char vid[ZL_VOL_ID_LEN + 1], path[700];
	struct dirent *de;
	DIR *d;

	*clones = *tmps = 0;
	zl_vol_id_format(VOL, vid);
	snprintf(path, sizeof(path), "%s/chunks/%s", e->dir, vid);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		unsigned long long id;

		if (strstr(de->d_name, ".tmp"))
			(*tmps)++;
		else if (sscanf(de->d_name, "%16llx.zlc", &id) == 1 && id >> ZL_CHUNK_IDX_BITS)
			(*clones)++;
	}
	closedir(d);
}

/* The oracle of the space accounting: what VOL's clone chunk files
 * allocate, from stat. */
static uint64_t snap_du(struct env *e)
{
	char vid[ZL_VOL_ID_LEN + 1], dir[700], path[1000];
	struct dirent *de;
	struct stat stb;
	uint64_t sum = 0;
	DIR *d;

	zl_vol_id_format(VOL, vid);
	snprintf(dir, sizeof(dir), "%s/chunks/%s", e->dir, vid);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		unsigned long long id;
		size_t len = strlen(de->d_name);

		/* Clone ids carry their hi above the chunk index. */
		if (len != 20 || sscanf(de->d_name, "%16llx.zlc", &id) != 1 ||
		    !(id >> ZL_CHUNK_IDX_BITS))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		assert_int_equal(stat(path, &stb), 0);
		sum += (uint64_t)stb.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

/* The store's space entry of (VOL, seq): its clones, bytes in *bytes. The
 * total must be the oracle's, and the entries' sum the total. */
static uint32_t snap_space_of(struct env *e, uint32_t seq, uint64_t *bytes)
{
	struct zl_chunk_snap_space sp[8];
	uint64_t total = 0, sum = 0;
	uint32_t n = zl_chunk_snap_space(e->s, sp, 8, &total), clones = 0;

	assert_true(n <= 8);
	assert_int_equal(total, snap_du(e));
	*bytes = 0;
	for (uint32_t i = 0; i < n; i++) {
		assert_true(!i || sp[i - 1].vol < sp[i].vol ||
			    (sp[i - 1].vol == sp[i].vol && sp[i - 1].seq < sp[i].seq));
		assert_true(sp[i].clones > 0);
		sum += sp[i].bytes;
		if (sp[i].vol == VOL && sp[i].seq == seq) {
			clones = sp[i].clones;
			*bytes = sp[i].bytes;
		}
	}
	assert_int_equal(sum, total);
	return clones;
}

static void test_snap_cow(void **state)
{
	struct env *e = *state;
	static uint8_t a[4 * 4096], b[4096], got[4 * 4096], want[4 * 4096], zero[4 * 4096];
	static const uint32_t s1[] = {1}, s12[] = {1, 2}, s2[] = {2}, s3[] = {3};
	struct zl_chunk_clone cl[4];
	uint32_t removed, nclones, ntmp;
	uint64_t bytes, before;

	fill(a, sizeof(a), 11);
	fill(b, sizeof(b), 22);
	/* Never snapshotted: no copy. */
	assert_int_equal(cow_io(e, 3, 0, sizeof(a), a, 0, NULL, 0), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 0);
	/* Snapshot 1 exists: the first write with 1 preserves the chunk. */
	assert_int_equal(cow_io(e, 3, 8192, 4096, b, 1, s1, 1), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 1);
	assert_int_equal(cl[0].lo, 0);
	assert_int_equal(cl[0].hi, 1);
	/* Its space counts for snapshot 1: the 16 KiB written and the header
	 * and metadata pages, not the chunk's size (holes stay holes). */
	assert_int_equal(snap_space_of(e, 1, &bytes), 1);
	assert_true(bytes >= sizeof(a) && bytes < CS / 2);
	assert_int_equal(snap_rd(e, 3, 1, 0, sizeof(got), got), 0);
	assert_memory_equal(got, a, sizeof(a));
	memcpy(want, a, sizeof(a));
	memcpy(want + 8192, b, 4096);
	assert_int_equal(do_read(e, 3, 0, sizeof(got), got), 0);
	assert_memory_equal(got, want, sizeof(want));
	/* A second write with 1: nothing more to preserve. */
	assert_int_equal(cow_io(e, 3, 100, 50, b, 1, s1, 1), 0);
	memcpy(want + 100, b, 50);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 1);
	/* Snapshot 2: a zeroing with 2 preserves (1, 2]. */
	assert_int_equal(cow_io(e, 3, 0, 4096, NULL, 2, s12, 2), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 2);
	assert_int_equal(cl[1].lo, 1);
	assert_int_equal(cl[1].hi, 2);
	assert_int_equal(snap_space_of(e, 1, &bytes), 1);
	assert_int_equal(snap_space_of(e, 2, &bytes), 1);
	assert_int_equal(snap_rd(e, 3, 2, 0, sizeof(got), got), 0);
	assert_memory_equal(got, want, sizeof(want));
	assert_int_equal(snap_rd(e, 3, 1, 0, sizeof(got), got), 0);
	assert_memory_equal(got, a, sizeof(a));
	memset(want, 0, 4096);
	assert_int_equal(do_read(e, 3, 0, sizeof(got), got), 0);
	assert_memory_equal(got, want, sizeof(want));
	/* A client that missed snapshot 2 is refused, nothing applied. */
	assert_int_equal(cow_io(e, 3, 0, 4096, a, 1, s1, 1), -ZL_ERR_STALE);
	assert_int_equal(do_read(e, 3, 0, sizeof(got), got), 0);
	assert_memory_equal(got, want, sizeof(want));
	/* A never-written chunk: the copy is its zeros, sparse (no data
	 * block allocated: it adds less than 64 KiB). */
	assert_int_equal(snap_space_of(e, 2, &before), 1);
	assert_int_equal(cow_io(e, 7, 4096, 4096, b, 2, s12, 2), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 7, cl, 4), 1);
	assert_int_equal(snap_space_of(e, 2, &bytes), 2);
	assert_true(bytes > before && bytes - before < 65536);
	assert_int_equal(snap_rd(e, 7, 1, 0, sizeof(got), got), 0);
	assert_memory_equal(got, zero, sizeof(zero));
	assert_int_equal(snap_rd(e, 7, 2, 4096, 4096, got), 0);
	assert_memory_equal(got, zero, 4096);
	/* Reopened: the index comes back from the files, wseq from the pages;
	 * the temporary file of a copy a crash interrupted is removed. */
	zl_chunk_store_destroy(e->s);
	{
		char vid[ZL_VOL_ID_LEN + 1], path[700];
		FILE *f;

		zl_vol_id_format(VOL, vid);
		snprintf(path, sizeof(path), "%s/chunks/%s/%016llx.zlc.tmp", e->dir, vid,
			 (unsigned long long)zl_chunk_clone_id(3, 3));
		f = fopen(path, "w");
		assert_non_null(f);
		fputs("half a copy", f);
		fclose(f);
	}
	snap_files(e, &nclones, &ntmp);
	assert_int_equal(ntmp, 1);
	env_open(e);
	snap_files(e, &nclones, &ntmp);
	assert_int_equal(ntmp, 0);
	assert_int_equal(nclones, 3);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 2);
	/* The space comes back from the files too. */
	assert_int_equal(snap_space_of(e, 1, &bytes), 1);
	assert_int_equal(snap_space_of(e, 2, &bytes), 2);
	assert_int_equal(snap_rd(e, 3, 1, 0, sizeof(got), got), 0);
	assert_memory_equal(got, a, sizeof(a));
	assert_int_equal(cow_io(e, 3, 0, 4096, a, 1, s1, 1), -ZL_ERR_STALE);
	/* Snapshot 1 deleted: only (0, 1] of chunk 3 goes. */
	assert_int_equal(snap_collect(e, s2, 1, &removed), 0);
	assert_int_equal(removed, 1);
	snap_files(e, &nclones, &ntmp);
	assert_int_equal(nclones, 2);
	assert_int_equal(ntmp, 0);
	assert_int_equal(snap_space_of(e, 1, &bytes), 0);
	assert_int_equal(snap_space_of(e, 2, &bytes), 2);
	memcpy(want, a, sizeof(a));
	memcpy(want + 8192, b, 4096);
	memcpy(want + 100, b, 50);
	assert_int_equal(snap_rd(e, 3, 2, 0, sizeof(got), got), 0);
	assert_memory_equal(got, want, sizeof(want));
	/* A clone removed as a chunk (CHUNK_DELETE) leaves the index too. */
	assert_int_equal(zl_chunk_delete(e->s, VOL, zl_chunk_clone_id(3, 2)), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 3, cl, 4), 0);
	assert_int_equal(snap_space_of(e, 2, &bytes), 1);
	/* None left: every clone goes, the live chunks stay. */
	assert_int_equal(snap_collect(e, NULL, 0, &removed), 0);
	assert_int_equal(removed, 1);
	snap_files(e, &nclones, &ntmp);
	assert_int_equal(nclones, 0);
	assert_int_equal(do_read(e, 7, 4096, 4096, got), 0);
	assert_memory_equal(got, b, 4096);
	/* Removing the volume forgets its clones. */
	assert_int_equal(cow_io(e, 9, 0, 4096, b, 3, s3, 1), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 9, cl, 4), 1);
	assert_int_equal(snap_space_of(e, 3, &bytes), 1);
	/* Snapshot 3 deleted, 2 reads the clone (0, 3] too: it counts for 2. */
	assert_int_equal(snap_collect(e, s2, 1, &removed), 0);
	assert_int_equal(removed, 0);
	assert_int_equal(snap_space_of(e, 3, &bytes), 0);
	assert_int_equal(snap_space_of(e, 2, &bytes), 1);
	assert_int_equal(zl_chunk_volume_delete(e->s, VOL, NULL), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 9, cl, 4), 0);
	assert_int_equal(snap_space_of(e, 2, &bytes), 0);
	/* Arguments. */
	assert_int_equal(cow_io(e, 3, 0, 4096, a, ZL_CHUNK_SEQ_MAX + 1, NULL, 0), -ZL_ERR_INVAL);
	assert_int_equal(cow_io(e, 1ull << ZL_CHUNK_IDX_BITS, 0, 4096, a, 2, NULL, 0),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_chunk_snap_read(e->s, VOL, 3, CS, 0, 0, 4096, got, done_cb, NULL),
			 -ZL_ERR_INVAL);
}

/* A clone copied by recovery (storage_heal.c): written as a chunk, then
 * made a clone by zl_chunk_snap_install; the index, reads at a sequence,
 * copy-on-write's wseq and a reopen all see it. */
/* zl_chunk_snap_warm: a closed chunk and its closed clones are opened off
 * the loop (one callback each), then answered from memory; open ones queue
 * nothing. */
static void test_snap_warm(void **state)
{
	struct env *e = *state;
	static uint8_t a[4096], b[4096];
	static const uint32_t s1[] = {1}, s12[] = {1, 2};
	struct zl_chunk_clone cl[4];
	struct done d = {0};
	uint64_t deadline, ver;

	fill(a, sizeof(a), 5);
	fill(b, sizeof(b), 6);
	assert_int_equal(cow_io(e, 7, 0, sizeof(a), a, 0, NULL, 0), 0);
	assert_int_equal(cow_io(e, 7, 0, sizeof(b), b, 1, s1, 1), 0);
	assert_int_equal(cow_io(e, 7, 0, sizeof(a), a, 2, s12, 2), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 7, cl, 4), 2);
	/* Closed: a new store over the same directory. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 7, cl, 4), 2);
	assert_int_equal(zl_chunk_snap_warm(e->s, VOL, 7, CS, done_cb, &d), 3);
	assert_int_equal(d.calls, 0); /* never inside the call */
	deadline = zl_now_ms() + 20000;
	while (d.calls < 3) {
		assert_true(zl_now_ms() < deadline);
		zl_loop_run_once(e->loop, 50);
	}
	assert_int_equal(d.status, 0);
	assert_int_equal(zl_chunk_warm(e->s, VOL, 7, CS, done_cb, &d), 1);
	for (uint32_t i = 0; i < 2; i++) {
		uint64_t id = zl_chunk_clone_id(7, cl[i].hi);

		assert_int_equal(zl_chunk_warm(e->s, VOL, id, CS, done_cb, &d), 1);
		assert_int_equal(zl_chunk_version(e->s, VOL, id, CS, &ver), 0);
	}
	assert_int_equal(zl_chunk_snap_warm(e->s, VOL, 7, CS, done_cb, &d), 0);
	assert_int_equal(d.calls, 3);
	assert_int_equal(zl_chunk_store_inflight(e->s), 0);
}

static void test_snap_install(void **state)
{
	struct env *e = *state;
	static uint8_t c[CS], live[4096], got[CS];
	static const uint32_t s2[] = {2};
	uint64_t id = zl_chunk_clone_id(5, 2), *vols = NULL, ver = 0;
	struct zl_chunk_clone cl[4];
	struct done d = {0};
	uint32_t n = 0;

	fill(c, sizeof(c), 33);
	fill(live, sizeof(live), 44);
	assert_false(zl_chunk_snap_vol_has(e->s, VOL));
	assert_int_equal(do_write(e, 5, 0, sizeof(live), live), 0);
	assert_int_equal(io_write(e, CS, id, 0, CS, c, 77), 0);
	/* Not a clone yet: reads at 2 are the live chunk's. */
	assert_int_equal(zl_chunk_snap_id(e->s, VOL, 5, 2), 5);
	assert_int_equal(wait_one(e, &d, zl_chunk_snap_install(e->s, VOL, id, 1, done_cb, &d)), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 5, cl, 4), 1);
	assert_int_equal(cl[0].lo, 1);
	assert_int_equal(cl[0].hi, 2);
	assert_int_equal(zl_chunk_snap_id(e->s, VOL, 5, 2), id);
	assert_int_equal(zl_chunk_snap_id(e->s, VOL, 5, 1), 5); /* (1, 2] holds 2 only */
	assert_int_equal(snap_rd(e, 5, 2, 0, CS, got), 0);
	assert_memory_equal(got, c, CS);
	assert_int_equal(zl_chunk_version(e->s, VOL, id, CS, &ver), 0);
	assert_int_equal(ver, 77);
	assert_true(zl_chunk_snap_vol_has(e->s, VOL));
	assert_false(zl_chunk_snap_vol_has(e->s, VOL + 1));
	assert_int_equal(zl_chunk_snap_vols(e->s, &vols, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(vols[0], VOL);
	free(vols);
	/* The chunk's wseq is at least 2 now: a write at 2 copies nothing
	 * more, one at 1 is refused. */
	assert_int_equal(cow_io(e, 5, 0, 4096, c, 2, s2, 1), 0);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 5, cl, 4), 1);
	assert_int_equal(cow_io(e, 5, 0, 4096, c, 1, s2, 1), -ZL_ERR_STALE);
	/* Reopened: the header says it is a clone. */
	zl_chunk_store_destroy(e->s);
	env_open(e);
	assert_int_equal(zl_chunk_snap_clones(e->s, VOL, 5, cl, 4), 1);
	assert_int_equal(cl[0].lo, 1);
	assert_int_equal(snap_rd(e, 5, 2, 0, CS, got), 0);
	assert_memory_equal(got, c, CS);
	/* Arguments: a live id, lo not below hi. */
	assert_int_equal(zl_chunk_snap_install(e->s, VOL, 5, 0, done_cb, &d), -ZL_ERR_INVAL);
	assert_int_equal(zl_chunk_snap_install(e->s, VOL, id, 2, done_cb, &d), -ZL_ERR_INVAL);
}

/* ---- kill -9 with snapshots ----
 * A child writes and zeroes units of three chunks through copy-on-write
 * with the current snapshot sequence, several at a time; every so often it
 * waits for what is in flight, takes a snapshot (the sequence goes up) and
 * sometimes deletes one (collecting its clones). It reports every
 * submission, acknowledgement, snapshot and deletion on a pipe; the parent
 * keeps its own record and kills the child at a random moment. After the
 * reopen: every remaining snapshot reads, at its sequence, exactly what was
 * acknowledged before it; the live chunks hold every acknowledged write (or
 * the one in flight); no temporary file is left, and after a collection
 * every clone file left holds a snapshot. */

#define SK_CHUNKS 3
#define SK_UNITS  8 /* 4 KiB units per chunk */
#define SK_DEPTH  6
#define SK_SNAPS  64
#define SK_ROUNDS 8

enum { SK_SUB = 1, SK_ACK, SK_SNAP, SK_DEL };

struct sk_rec {
	uint32_t kind, unit, seq;
	uint64_t seed; /* SUB: 0 = a zeroing */
};

/* The parent's record (the child starts from a copy: fork). */
static struct sk_model {
	uint32_t cur;			 /* the volume's sequence */
	uint32_t snaps[SK_SNAPS], n;	 /* existing snapshots, ascending */
	uint64_t acked[SK_CHUNKS * SK_UNITS];
	uint64_t pend[SK_CHUNKS * SK_UNITS];
	bool pending[SK_CHUNKS * SK_UNITS];
	/* What each snapshot must read: the acknowledged seeds at its taking. */
	uint64_t at[SK_SNAPS + 1][SK_CHUNKS * SK_UNITS];
} skm;

static void sk_content(uint8_t *p, uint32_t unit, uint64_t seed)
{
	if (!seed) {
		memset(p, 0, 4096);
		return;
	}
	fill(p, 4096, (unsigned)seed);
	zl_put_le64(p, seed);
	zl_put_le32(p + 8, unit);
}

struct sk_child;

/* The parent's random seed, for the child's choices. */
static unsigned sk_seed;

struct sk_slot {
	struct sk_child *k;
	struct zl_chunk_cow w;
	uint32_t unit;
	uint64_t seed;
	uint8_t *buf;
	bool busy;
};

struct sk_child {
	int wfd;
	uint32_t inflight, acks;
	int err;
	struct sk_slot sl[SK_DEPTH];
	bool busy[SK_CHUNKS * SK_UNITS];
};

static void sk_send(int fd, uint32_t kind, uint32_t unit, uint32_t seq, uint64_t seed)
{
	struct sk_rec r = {kind, unit, seq, seed};

	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
}

static void sk_done(void *arg, int status)
{
	struct sk_slot *sl = arg;
	struct sk_child *k = sl->k;

	if (status) {
		k->err = status;
		return;
	}
	sk_send(k->wfd, SK_ACK, sl->unit, 0, sl->seed);
	sl->busy = false;
	k->busy[sl->unit] = false;
	k->inflight--;
	k->acks++;
}

static void sk_gc_done(void *arg, int status)
{
	int *err = arg;

	if (status)
		*err = status;
}

static void sk_child_run(const char *dir, int wfd, uint64_t seed0)
{
	struct zl_loop *loop;
	struct zl_chunk_store *s;
	struct zl_chunk_store_opts o = {.data_dir = dir,
					.buf_alloc = t_alloc,
					.buf_free = t_free,
					.journal = jmode,
					.journal_size = ZL_CHUNK_JOURNAL_MIN};
	struct sk_child k = {.wfd = wfd};
	uint64_t seed = seed0;
	uint32_t next_snap = 30;
	int gc_err = 0;

	srand(sk_seed + (unsigned)seed0);
	if (zl_loop_create(&loop))
		_exit(2);
	o.loop = loop;
	if (zl_chunk_store_create(&o, &s))
		_exit(2);
	for (int i = 0; i < SK_DEPTH; i++) {
		k.sl[i].k = &k;
		k.sl[i].buf = t_alloc(NULL, 4096);
	}
	for (;;) {
		if (k.err || gc_err)
			_exit(4);
		if (k.acks >= next_snap && !k.inflight) {
			/* Everything issued was acknowledged: the snapshot
			 * holds exactly that; what follows carries its
			 * sequence. */
			if (skm.n == SK_SNAPS)
				_exit(5);
			skm.snaps[skm.n++] = ++skm.cur;
			sk_send(wfd, SK_SNAP, 0, skm.cur, 0);
			if (skm.n > 3 && rand() % 2) {
				uint32_t i = (uint32_t)rand() % skm.n;

				sk_send(wfd, SK_DEL, 0, skm.snaps[i], 0);
				memmove(skm.snaps + i, skm.snaps + i + 1,
					(skm.n - i - 1) * sizeof(skm.snaps[0]));
				skm.n--;
				if (zl_chunk_snap_gc(s, VOL, skm.snaps, skm.n, NULL, sk_gc_done,
						     &gc_err))
					_exit(6);
			}
			next_snap = k.acks + 20 + (uint32_t)(rand() % 40);
		}
		for (int i = 0; i < SK_DEPTH && k.acks < next_snap; i++) {
			struct sk_slot *sl = &k.sl[i];
			uint32_t u = (uint32_t)rand() % (SK_CHUNKS * SK_UNITS);
			bool zero = rand() % 5 == 0;

			if (sl->busy || k.busy[u])
				continue;
			sl->busy = true;
			k.busy[u] = true;
			k.inflight++;
			sl->unit = u;
			sl->seed = zero ? 0 : ++seed;
			sk_content(sl->buf, u, sl->seed);
			sl->w = (struct zl_chunk_cow){.vol = VOL,
						      .chunk = 60 + u / SK_UNITS,
						      .chunk_size = CS,
						      .off = (u % SK_UNITS) * 4096,
						      .len = 4096,
						      .zero = zero,
						      .data = sl->buf,
						      .version = seed,
						      .seq = skm.cur,
						      .snaps = skm.snaps,
						      .n_snaps = skm.n,
						      .cb = sk_done,
						      .arg = sl};
			sk_send(wfd, SK_SUB, u, skm.cur, sl->seed);
			if (zl_chunk_cow_submit(s, &sl->w))
				_exit(7);
		}
		zl_loop_run_once(loop, 10);
	}
}

/* Checks what the reopened store holds against the record; pending units
 * become what they read (the operation landed or not). */
static void sk_check(struct env *e, uint64_t *clones_seen)
{
	uint8_t got[4096], want[4096], alt[4096];
	struct zl_chunk_clone cl[SK_SNAPS + 1];
	uint32_t nclones, ntmp, indexed = 0, removed;

	snap_files(e, &nclones, &ntmp);
	assert_int_equal(ntmp, 0);
	for (uint32_t i = 0; i < skm.n; i++) {
		for (uint32_t u = 0; u < SK_CHUNKS * SK_UNITS; u++) {
			assert_int_equal(snap_rd(e, 60 + u / SK_UNITS, skm.snaps[i],
						 (u % SK_UNITS) * 4096, 4096, got),
					 0);
			sk_content(want, u, skm.at[skm.snaps[i]][u]);
			if (memcmp(got, want, 4096))
				fail_msg("snapshot %u unit %u: reads %" PRIu64 ", acknowledged "
					 "before it: %" PRIu64,
					 skm.snaps[i], u, zl_get_le64(got), skm.at[skm.snaps[i]][u]);
		}
	}
	for (uint32_t u = 0; u < SK_CHUNKS * SK_UNITS; u++) {
		assert_int_equal(do_read(e, 60 + u / SK_UNITS, (u % SK_UNITS) * 4096, 4096, got), 0);
		sk_content(want, u, skm.acked[u]);
		sk_content(alt, u, skm.pend[u]);
		if (memcmp(got, want, 4096) && !(skm.pending[u] && !memcmp(got, alt, 4096)))
			fail_msg("live unit %u: reads %" PRIu64 ", acknowledged %" PRIu64, u,
				 zl_get_le64(got), skm.acked[u]);
		if (skm.pending[u] && !memcmp(got, alt, 4096))
			skm.acked[u] = skm.pend[u];
		skm.pending[u] = false;
	}
	/* Collected: every clone left holds a remaining snapshot, and the
	 * files are exactly the clones indexed. */
	assert_int_equal(snap_collect(e, skm.snaps, skm.n, &removed), 0);
	for (uint32_t c = 0; c < SK_CHUNKS; c++) {
		uint32_t n = zl_chunk_snap_clones(e->s, VOL, 60 + c, cl, SK_SNAPS + 1);

		assert_true(n <= SK_SNAPS + 1);
		for (uint32_t i = 0; i < n; i++) {
			bool held = false;

			for (uint32_t j = 0; j < skm.n; j++)
				held |= skm.snaps[j] > cl[i].lo && skm.snaps[j] <= cl[i].hi;
			assert_true(held);
		}
		indexed += n;
	}
	snap_files(e, &nclones, &ntmp);
	assert_int_equal(nclones, indexed);
	*clones_seen += indexed + removed;
}

static void test_snap_kill9(void **state)
{
	struct env *e = *state;
	uint64_t acks_total = 0, pending_seen = 0, clones_seen = 0, snaps_taken = 0, mid_copy = 0;
	uint32_t ntmp, nclones;

	unsigned seed = (unsigned)time(NULL);

	print_message("kill -9 with snapshots: seed %u\n", seed);
	memset(&skm, 0, sizeof(skm));
	for (int round = 0; round < SK_ROUNDS; round++) {
		uint64_t acks = 0, want_acks = 100 + (uint64_t)(rand_r(&seed) % 250);
		/* Odd rounds: the kill comes at the first write after a
		 * snapshot (the one whose copy is being made), not at an
		 * acknowledgement count. */
		uint32_t kill_after_snap = round % 2 ? 2 + (uint32_t)(rand_r(&seed) % 3) : 0;
		uint32_t snaps_now = 0;
		bool killed = false;
		struct sk_rec rec;
		int rfd;
		pid_t pid;

		sk_seed = seed;
		pid = kill_fork(e, sk_child_run, (uint64_t)(round + 1) * 1000000, &rfd);
		while (read(rfd, &rec, sizeof(rec)) == (ssize_t)sizeof(rec)) {
			switch (rec.kind) {
			case SK_SUB:
				assert_true(rec.unit < SK_CHUNKS * SK_UNITS);
				assert_false(skm.pending[rec.unit]);
				assert_int_equal(rec.seq, skm.cur);
				skm.pend[rec.unit] = rec.seed;
				skm.pending[rec.unit] = true;
				if (kill_after_snap && snaps_now >= kill_after_snap && !killed) {
					assert_int_equal(kill(pid, SIGKILL), 0);
					killed = true;
				}
				break;
			case SK_ACK:
				assert_true(skm.pending[rec.unit]);
				skm.acked[rec.unit] = skm.pend[rec.unit];
				skm.pending[rec.unit] = false;
				if (++acks == want_acks && !kill_after_snap) {
					assert_int_equal(kill(pid, SIGKILL), 0);
					killed = true;
				}
				break;
			case SK_SNAP:
				snaps_now++;
				assert_int_equal(rec.seq, skm.cur + 1);
				assert_true(rec.seq <= SK_SNAPS);
				for (uint32_t u = 0; u < SK_CHUNKS * SK_UNITS; u++)
					assert_false(skm.pending[u]);
				skm.cur = rec.seq;
				skm.snaps[skm.n++] = rec.seq;
				memcpy(skm.at[rec.seq], skm.acked, sizeof(skm.acked));
				snaps_taken++;
				break;
			case SK_DEL:
				for (uint32_t i = 0; i < skm.n; i++) {
					if (skm.snaps[i] != rec.seq)
						continue;
					memmove(skm.snaps + i, skm.snaps + i + 1,
						(skm.n - i - 1) * sizeof(skm.snaps[0]));
					skm.n--;
					break;
				}
				break;
			default:
				fail_msg("unknown record %u", rec.kind);
			}
		}
		kill_reap(pid, rfd);
		acks_total += acks;
		for (uint32_t u = 0; u < SK_CHUNKS * SK_UNITS; u++)
			pending_seen += skm.pending[u];
		/* A copy was being made at the kill: its temporary file. */
		snap_files(e, &nclones, &ntmp);
		mid_copy += ntmp > 0;
		env_open(e);
		sk_check(e, &clones_seen);
	}
	print_message("kill -9 with snapshots: %d kills, %" PRIu64 " acknowledged operations, %" PRIu64
		      " in flight at the kills, %" PRIu64 " kills during a copy (temporary file "
		      "left, removed by the reopen), %" PRIu64 " snapshots taken (%u remain), %" PRIu64
		      " clone chunks checked or collected\n",
		      SK_ROUNDS, acks_total, pending_seen, mid_copy, snaps_taken, skm.n, clones_seen);
	assert_true(pending_seen > 0);
	assert_true(snaps_taken > 4);
	assert_true(clones_seen > 0);
}

int main(void)
{
	const char *wp = getenv("ZL_CHUNK_TEST_WRITE_PATH");
	const struct CMUnitTest shared[] = {
	    cmocka_unit_test_setup_teardown(test_round_trips, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_missing_reads_zero, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_zeroing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overlap_serialized, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_versions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_under_load, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overwrite_only, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_large, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v1_convert, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delete_inflight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_waits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_warm, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_changing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_volume_delete_async, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_volume_delete_twice, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_scrub_missing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_foreach_and_args, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snap_cow, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snap_warm, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snap_install, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snap_kill9, setup, teardown),
	};
	/* The direct path's metadata rounds and crash states. */
	const struct CMUnitTest direct[] = {
	    cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_write_steps, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_first_write_torn, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_zero_steps, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unclean_rollback, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prev_adopt, setup, teardown),
	};
	const struct CMUnitTest journal[] = {
	    cmocka_unit_test_setup_teardown(test_journal_replay, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_then_direct, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_delete_recreate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_inline_then_inplace, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_versions_checkpointed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_room, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_kill_full, setup, teardown),
	};
	int rc;

	zl_log_init("storage_chunk_test");
	jmode = wp && !strcmp(wp, "journal");
	rc = cmocka_run_group_tests_name(jmode ? "shared (journal)" : "shared (direct)", shared,
					 NULL, NULL);
	if (jmode)
		rc |= cmocka_run_group_tests_name("journal", journal, NULL, NULL);
	else
		rc |= cmocka_run_group_tests_name("direct", direct, NULL, NULL);
	return rc;
}
