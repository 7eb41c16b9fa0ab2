/* Chunk store: chunk replica files, their CRC tables and the io_uring that
 * moves their data. See storage_chunk.h for the file layout.
 *
 * Operation state machine (struct chunk_op.stage):
 *   OP_ST_WAIT    queued behind an overlapping operation of the same chunk
 *   OP_ST_EDGE    reading the partial edge blocks of an unaligned write/zero
 *   OP_ST_COMMIT  new CRCs set in memory, waiting for a CRC page write that
 *                 started after that (group commit); then the data goes out
 *   OP_ST_DATA    data write / read / punch / fsync in flight
 *   OP_ST_DONE    finished, callback pending
 * An operation keeps its block range in the chunk's active list from start to
 * finish, so an overlapping operation (at least one of them modifying) waits
 * until the earlier one is durable.
 *
 * Crash safety: the CRC of a block is made durable *before* its new data, and
 * the CRC it replaces is kept in a second table ("previous CRCs", after the
 * data area). A block is valid when it matches its CRC or its previous CRC,
 * so a crash or kill -9 between the CRC write and the data write leaves the
 * old (acknowledged) contents readable instead of reporting corruption.
 */
#include "storage_chunk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"
#include "lib/common/slab.h"
#include "lib/wire/wire.h"

#define BLK		  ZL_BLOCK_SIZE
#define CHUNK_MAGIC	  "ZLCHUNK1"
#define CHUNK_HDR_SIZE	  BLK
#define CHUNK_HDR_CRC_OFF 28
#define STORE_BUCKETS	  4096u
#define STORE_OP_SLAB	  256u
#define STORE_DRAIN_MS	  30000u
#define TAG_CRC		  1ull

enum op_kind { OP_READ, OP_WRITE, OP_ZERO, OP_FLUSH };
enum op_stage { OP_ST_WAIT, OP_ST_EDGE, OP_ST_DATA, OP_ST_COMMIT, OP_ST_DONE };

struct chunk;

struct chunk_op {
	struct chunk_op *next, *prev; /* free list, or the chunk's active/waiting list */
	struct zl_chunk_store *s;
	struct chunk *ch; /* NULL for FLUSH and missing-chunk reads */
	enum op_kind kind;
	enum op_stage stage;
	uint32_t off, len;
	uint32_t b0, b1;      /* blocks [b0, b1) touched */
	const void *data;     /* WRITE source */
	uint8_t *buf;	      /* READ: caller's; WRITE/ZERO: what goes to disk */
	bool own_buf;	      /* buf is a bounce buffer of ours */
	uint32_t pending;     /* SQEs in flight */
	uint64_t expect, got; /* bytes requested / transferred by those SQEs */
	int err;
	uint64_t need_round; /* CRC round that makes this op durable */
	zl_chunk_cb cb;
	void *arg;
	struct zl_defer defer;
};

struct op_list {
	struct chunk_op *first, *last;
};

struct chunk {
	struct chunk *hnext; /* hash chain */
	struct chunk *lru_prev, *lru_next;
	uint64_t vol, idx;
	uint32_t chunk_size, n_blocks, crc_pages;
	uint64_t data_off;
	int fd;
	uint32_t refs; /* ops holding it + CRC write in flight */
	bool in_lru, deleted;
	uint32_t *crc;	   /* CRC table (crc_pages * BLK bytes) */
	uint8_t *crc_snap; /* copy being written */
	uint32_t *prev;	   /* previous CRC of every block (same size) */
	uint8_t *prev_snap;
	uint64_t prev_off; /* file offset of the previous-CRC table */
	uint32_t crc_sqes; /* SQEs of the CRC round in flight */
	int crc_err;
	uint32_t dirty_mask; /* CRC pages changed since the last snapshot */
	bool crc_inflight;
	uint32_t crc_p0, crc_p1; /* pages of the write in flight */
	uint64_t round_started, round_done;
	struct op_list active, waiting;
};

struct zl_chunk_store {
	char *dir; /* <data_dir>/chunks */
	struct zl_loop *loop;
	struct io_uring ring;
	bool ring_ok;
	int efd;
	struct zl_loop_handle efd_h;
	bool efd_added;
	struct zl_poller poller;
	uint32_t to_submit;
	struct chunk *buckets[STORE_BUCKETS];
	struct chunk *lru_head, *lru_tail;
	uint32_t n_open, max_open;
	struct zl_slab ops; /* operation contexts; in_use = operations in flight */
	zl_chunk_buf_alloc_fn buf_alloc;
	zl_chunk_buf_free_fn buf_free;
	void *buf_arg;
	bool direct;
	struct zl_ratelimit rl_nospc, rl_io;
	struct zl_chunk_store_stats st;
};

static void op_start(struct chunk_op *op);
static void op_finish(struct chunk_op *op);
static void op_write_data(struct chunk_op *op);
static void op_zero_data(struct chunk_op *op);

/* ---- small helpers ---- */

static bool chunk_size_ok(uint32_t cs)
{
	return cs >= ZL_WIRE_MIN_CHUNK && cs <= ZL_WIRE_MAX_CHUNK && !(cs & (cs - 1));
}

static bool block_is_zero(const uint8_t *p)
{
	const uint64_t *q = (const uint64_t *)p;

	for (size_t i = 0; i < BLK / 8; i++)
		if (q[i])
			return false;
	return true;
}

static void list_add_tail(struct op_list *l, struct chunk_op *op)
{
	op->next = NULL;
	op->prev = l->last;
	if (l->last)
		l->last->next = op;
	else
		l->first = op;
	l->last = op;
}

static void list_del(struct op_list *l, struct chunk_op *op)
{
	if (op->prev)
		op->prev->next = op->next;
	else
		l->first = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		l->last = op->prev;
	op->next = op->prev = NULL;
}

static int store_path(const struct zl_chunk_store *s, uint64_t vol, uint64_t idx, char *out,
		      size_t len)
{
	char vid[ZL_VOL_ID_LEN + 1];
	int n;

	zl_vol_id_format(vol, vid);
	if (idx == UINT64_MAX)
		n = snprintf(out, len, "%s/%s", s->dir, vid);
	else
		n = snprintf(out, len, "%s/%s/%016" PRIx64 ".zlc", s->dir, vid, idx);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Maps an I/O error to the project code the client sees, logging it. */
static int store_map_err(struct zl_chunk_store *s, struct chunk_op *op, int err)
{
	char vid[ZL_VOL_ID_LEN + 1];

	if (err <= -4096)
		return err;
	zl_vol_id_format(op->ch ? op->ch->vol : 0, vid);
	if (err == -ENOSPC || err == -EDQUOT) {
		if (zl_ratelimit_ok(&s->rl_nospc, 1))
			ZL_LOG_ERR("storage",
				   "disk full writing chunk replica: vol=%s chunk=%" PRIu64
				   " dir=%s (free space on the data directory's filesystem)",
				   vid, op->ch ? op->ch->idx : 0, s->dir);
		return -ZL_ERR_NOSPC;
	}
	if (zl_ratelimit_ok(&s->rl_io, 5))
		ZL_LOG_ERR("storage", "disk I/O failed: vol=%s chunk=%" PRIu64 " op=%d err=%s", vid,
			   op->ch ? op->ch->idx : 0, (int)op->kind, zl_errname(err));
	return -ZL_ERR_IO;
}

/* ---- operation contexts (preallocated slabs, free list) ---- */

static struct chunk_op *op_alloc(struct zl_chunk_store *s)
{
	struct chunk_op *op = zl_slab_alloc(&s->ops);

	if (!op)
		return NULL;
	memset(op, 0, sizeof(*op));
	op->s = s;
	return op;
}

static void op_free(struct chunk_op *op)
{
	zl_slab_free(&op->s->ops, op);
}

/* ---- io_uring ---- */

static struct io_uring_sqe *store_sqe(struct zl_chunk_store *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		s->to_submit = 0;
		sqe = io_uring_get_sqe(&s->ring);
	}
	if (sqe)
		s->to_submit++;
	return sqe;
}

/* Submits everything prepared during the last loop iteration in one call. */
static int store_poll(void *arg)
{
	struct zl_chunk_store *s = arg;

	if (s->to_submit) {
		int rc = io_uring_submit(&s->ring);

		if (rc < 0 && zl_ratelimit_ok(&s->rl_io, 1))
			ZL_LOG_ERR("storage", "io_uring submit failed: err=%s", zl_errname(rc));
		else
			s->to_submit = 0;
	}
	return 0;
}

static int op_prep_rw(struct chunk_op *op, bool write, void *buf, uint32_t len, uint64_t file_off)
{
	struct io_uring_sqe *sqe = store_sqe(op->s);

	if (!sqe)
		return -ZL_ERR_BUSY;
	if (write) {
		io_uring_prep_write(sqe, op->ch->fd, buf, len, file_off);
		sqe->rw_flags = RWF_DSYNC;
	} else {
		io_uring_prep_read(sqe, op->ch->fd, buf, len, file_off);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
	op->pending++;
	op->expect += len;
	return 0;
}

/* ---- chunks: table, LRU, open/create ---- */

static uint32_t chunk_bucket(uint64_t vol, uint64_t idx)
{
	return (uint32_t)(zl_hash64(vol ^ zl_hash64(idx)) % STORE_BUCKETS);
}

static struct chunk *chunk_lookup(struct zl_chunk_store *s, uint64_t vol, uint64_t idx)
{
	for (struct chunk *c = s->buckets[chunk_bucket(vol, idx)]; c; c = c->hnext)
		if (c->vol == vol && c->idx == idx)
			return c;
	return NULL;
}

static void lru_del(struct zl_chunk_store *s, struct chunk *c)
{
	if (!c->in_lru)
		return;
	if (c->lru_prev)
		c->lru_prev->lru_next = c->lru_next;
	else
		s->lru_head = c->lru_next;
	if (c->lru_next)
		c->lru_next->lru_prev = c->lru_prev;
	else
		s->lru_tail = c->lru_prev;
	c->lru_prev = c->lru_next = NULL;
	c->in_lru = false;
}

static void lru_add(struct zl_chunk_store *s, struct chunk *c)
{
	c->lru_next = NULL;
	c->lru_prev = s->lru_tail;
	if (s->lru_tail)
		s->lru_tail->lru_next = c;
	else
		s->lru_head = c;
	s->lru_tail = c;
	c->in_lru = true;
}

static void chunk_free(struct zl_chunk_store *s, struct chunk *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	if (c->crc)
		s->buf_free(s->buf_arg, c->crc);
	if (c->crc_snap)
		s->buf_free(s->buf_arg, c->crc_snap);
	if (c->prev)
		s->buf_free(s->buf_arg, c->prev);
	if (c->prev_snap)
		s->buf_free(s->buf_arg, c->prev_snap);
	free(c);
}

/* Removes c from the table; it is closed now or when its last user leaves. */
static void chunk_detach(struct zl_chunk_store *s, struct chunk *c)
{
	struct chunk **pp = &s->buckets[chunk_bucket(c->vol, c->idx)];

	while (*pp && *pp != c)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = c->hnext;
	c->hnext = NULL;
	c->deleted = true;
	lru_del(s, c);
	s->n_open--;
	if (!c->refs)
		chunk_free(s, c);
}

static void store_evict(struct zl_chunk_store *s)
{
	while (s->n_open > s->max_open && s->lru_head)
		chunk_detach(s, s->lru_head);
}

static void chunk_put(struct zl_chunk_store *s, struct chunk *c)
{
	if (--c->refs)
		return;
	if (c->deleted) {
		chunk_free(s, c);
		return;
	}
	lru_add(s, c);
	store_evict(s);
}

static int chunk_open_fd(struct zl_chunk_store *s, const char *path, int flags)
{
	int fd;

	if (s->direct) {
		fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EINVAL)
			return fd < 0 ? -errno : fd;
		ZL_LOG_WARN("storage",
			    "O_DIRECT not supported under %s: falling back to buffered I/O "
			    "(RWF_DSYNC keeps writes durable; put the data dir on ext4/xfs for "
			    "direct I/O)",
			    s->dir);
		s->direct = false;
		s->st.direct_io = false;
	}
	fd = open(path, flags | O_CLOEXEC, 0644);
	return fd < 0 ? -errno : fd;
}

static void chunk_hdr_encode(uint8_t *p, uint64_t vol, uint64_t idx, uint32_t cs)
{
	memset(p, 0, CHUNK_HDR_SIZE);
	memcpy(p, CHUNK_MAGIC, 8);
	zl_put_le64(p + 8, vol);
	zl_put_le64(p + 16, idx);
	zl_put_le32(p + 24, cs);
	zl_put_le32(p + CHUNK_HDR_CRC_OFF, zl_crc32c(p, CHUNK_HDR_CRC_OFF));
}

static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Creates the file of a new chunk replica: header + sparse CRC table and
 * data, made durable (file and directory entry) before the first write. */
static int chunk_create_file(struct zl_chunk_store *s, struct chunk *c, const char *path)
{
	char dir[PATH_MAX], tmp[PATH_MAX + 8];
	uint8_t *hdr = NULL;
	int fd = -1, rc;

	rc = store_path(s, c->vol, UINT64_MAX, dir, sizeof(dir));
	if (rc)
		return rc;
	if (mkdir(dir, 0755) < 0) {
		if (errno != EEXIST)
			return -errno;
	} else {
		rc = fsync_dir(s->dir);
		if (rc)
			return rc;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = chunk_open_fd(s, tmp, O_RDWR | O_CREAT | O_TRUNC);
	if (fd < 0)
		return fd;
	hdr = s->buf_alloc(s->buf_arg, CHUNK_HDR_SIZE);
	if (!hdr) {
		rc = -ENOMEM;
		goto out_close;
	}
	chunk_hdr_encode(hdr, c->vol, c->idx, c->chunk_size);
	if (ftruncate(fd, (off_t)(c->prev_off + (uint64_t)c->crc_pages * BLK)) < 0) {
		rc = -errno;
		goto out_free;
	}
	if (pwrite(fd, hdr, CHUNK_HDR_SIZE, 0) != (ssize_t)CHUNK_HDR_SIZE) {
		rc = errno ? -errno : -EIO;
		goto out_free;
	}
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = fsync_dir(dir);
	if (rc)
		goto out_free;
	s->buf_free(s->buf_arg, hdr);
	return fd;

out_free:
	s->buf_free(s->buf_arg, hdr);
out_close:
	close(fd);
	unlink(tmp);
	return rc;
}

/* Reads and checks the header and loads the CRC table of an existing file. */
static int chunk_load(struct zl_chunk_store *s, struct chunk *c)
{
	char vid[ZL_VOL_ID_LEN + 1];
	uint8_t *hdr = s->buf_alloc(s->buf_arg, CHUNK_HDR_SIZE);
	size_t tbl = (size_t)c->crc_pages * BLK;
	struct stat stb;
	const char *why = NULL;
	int rc = 0;

	if (!hdr)
		return -ENOMEM;
	zl_vol_id_format(c->vol, vid);
	if (fstat(c->fd, &stb) < 0) {
		rc = -errno;
		goto out;
	}
	if (pread(c->fd, hdr, CHUNK_HDR_SIZE, 0) != (ssize_t)CHUNK_HDR_SIZE ||
	    pread(c->fd, c->crc, tbl, CHUNK_HDR_SIZE) != (ssize_t)tbl ||
	    pread(c->fd, c->prev, tbl, (off_t)c->prev_off) != (ssize_t)tbl) {
		rc = errno ? -errno : -EIO;
		goto out;
	}
	if (memcmp(hdr, CHUNK_MAGIC, 8))
		why = "bad magic";
	else if (zl_get_le32(hdr + CHUNK_HDR_CRC_OFF) != zl_crc32c(hdr, CHUNK_HDR_CRC_OFF))
		why = "header CRC mismatch";
	else if (zl_get_le64(hdr + 8) != c->vol || zl_get_le64(hdr + 16) != c->idx)
		why = "header names another chunk";
	else if (zl_get_le32(hdr + 24) != c->chunk_size)
		why = "chunk size differs from the volume's";
	else if ((uint64_t)stb.st_size < c->prev_off + tbl)
		why = "file shorter than the chunk";
	if (why) {
		ZL_LOG_ERR("storage",
			   "corruption vol=%s chunk=%" PRIu64 " block=header: %s (remove the "
			   "replica file so repair rebuilds it)",
			   vid, c->idx, why);
		rc = -ZL_ERR_CORRUPT;
	}
out:
	s->buf_free(s->buf_arg, hdr);
	return rc;
}

/* Finds or opens chunk (vol, idx); creates the file when create is set.
 * Returns 0 with a reference in *out, -ENOENT (absent, !create), or an error. */
static int chunk_get(struct zl_chunk_store *s, uint64_t vol, uint64_t idx, uint32_t cs, bool create,
		     struct chunk **out)
{
	char path[PATH_MAX];
	struct chunk *c = chunk_lookup(s, vol, idx);
	int rc, fd;

	if (c) {
		if (c->chunk_size != cs)
			return -ZL_ERR_INVAL;
		lru_del(s, c);
		c->refs++;
		*out = c;
		return 0;
	}
	rc = store_path(s, vol, idx, path, sizeof(path));
	if (rc)
		return rc;
	/* Open first: reads of never-written chunks (thin volumes) cost one
	 * failed open(), no allocation. */
	fd = chunk_open_fd(s, path, O_RDWR);
	if (fd < 0 && (fd != -ENOENT || !create))
		return fd;
	c = calloc(1, sizeof(*c));
	if (!c) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->vol = vol;
	c->idx = idx;
	c->chunk_size = cs;
	c->n_blocks = cs / BLK;
	c->crc_pages = (uint32_t)ZL_ALIGN_UP((uint64_t)c->n_blocks * 4, BLK) / BLK;
	c->data_off = CHUNK_HDR_SIZE + (uint64_t)c->crc_pages * BLK;
	c->crc = s->buf_alloc(s->buf_arg, (size_t)c->crc_pages * BLK);
	c->crc_snap = s->buf_alloc(s->buf_arg, (size_t)c->crc_pages * BLK);
	c->prev = s->buf_alloc(s->buf_arg, (size_t)c->crc_pages * BLK);
	c->prev_snap = s->buf_alloc(s->buf_arg, (size_t)c->crc_pages * BLK);
	c->prev_off = c->data_off + cs;
	if (!c->crc || !c->crc_snap || !c->prev || !c->prev_snap) {
		rc = -ENOMEM;
		goto out_free;
	}
	if (c->fd >= 0) {
		rc = chunk_load(s, c);
		if (rc)
			goto out_free;
	} else {
		memset(c->crc, 0, (size_t)c->crc_pages * BLK);
		memset(c->prev, 0, (size_t)c->crc_pages * BLK);
		c->fd = chunk_create_file(s, c, path);
		if (c->fd < 0) {
			rc = c->fd;
			goto out_free;
		}
	}
	c->hnext = s->buckets[chunk_bucket(vol, idx)];
	s->buckets[chunk_bucket(vol, idx)] = c;
	s->n_open++;
	c->refs = 1;
	store_evict(s);
	*out = c;
	return 0;

out_free:
	if (c->fd < 0)
		c->fd = -1;
	chunk_free(s, c);
	return rc;
}

/* ---- CRC table: verification and group commit ---- */

static int chunk_verify(struct zl_chunk_store *s, struct chunk *c, uint32_t b, const uint8_t *p)
{
	char vid[ZL_VOL_ID_LEN + 1];
	uint32_t want = c->crc[b], prev = c->prev[b], got = zl_crc32c(p, BLK);

	/* The previous CRC: the last write's data never reached the disk. */
	if (got == want || got == prev || ((want == 0 || prev == 0) && block_is_zero(p)))
		return 0;
	zl_vol_id_format(c->vol, vid);
	ZL_LOG_ERR("storage",
		   "corruption vol=%s chunk=%" PRIu64 " block=%u crc=%08x expected=%08x "
		   "(the client reads another replica)",
		   vid, c->idx, b, got, want);
	s->st.corruptions++;
	s->st.last_corrupt_vol = c->vol;
	s->st.last_corrupt_chunk = c->idx;
	s->st.last_corrupt_block = b;
	return -ZL_ERR_CORRUPT;
}

static void chunk_set_crc(struct chunk *c, uint32_t b, uint32_t crc)
{
	c->prev[b] = c->crc[b];
	c->crc[b] = crc;
	c->dirty_mask |= 1u << (b * 4 / BLK);
}

/* The op's data did not reach the disk: its blocks hold their previous
 * contents again. */
static void chunk_crc_rollback(struct chunk *c, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++) {
		c->crc[b] = c->prev[b];
		c->dirty_mask |= 1u << (b * 4 / BLK);
	}
}

/* Starts a CRC page write of everything dirty unless one is in flight. */
static void chunk_crc_kick(struct zl_chunk_store *s, struct chunk *c)
{
	struct io_uring_sqe *sqe, *sqe2;
	uint32_t p0, p1, len;
	size_t at;

	if (c->crc_inflight || !c->dirty_mask)
		return;
	p0 = (uint32_t)__builtin_ctz(c->dirty_mask);
	p1 = 31u - (uint32_t)__builtin_clz(c->dirty_mask);
	len = (p1 - p0 + 1) * BLK;
	at = (size_t)p0 * BLK;
	sqe = store_sqe(s);
	sqe2 = sqe ? store_sqe(s) : NULL;
	if (!sqe2) {
		if (sqe) { /* turn the one we got into an ignored no-op */
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, 0);
		}
		return; /* retried on the next completion of this chunk */
	}
	memcpy(c->crc_snap + at, (uint8_t *)c->crc + at, len);
	memcpy(c->prev_snap + at, (uint8_t *)c->prev + at, len);
	io_uring_prep_write(sqe, c->fd, c->crc_snap + at, len, CHUNK_HDR_SIZE + at);
	sqe->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | TAG_CRC);
	io_uring_prep_write(sqe2, c->fd, c->prev_snap + at, len, c->prev_off + at);
	sqe2->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(sqe2, (uint64_t)(uintptr_t)c | TAG_CRC);
	c->crc_sqes = 2;
	c->crc_err = 0;
	c->dirty_mask = 0;
	c->crc_inflight = true;
	c->crc_p0 = p0;
	c->crc_p1 = p1;
	c->round_started++;
	c->refs++;
	s->st.crc_page_writes++;
}

static void chunk_crc_done(struct zl_chunk_store *s, struct chunk *c, int res)
{
	uint64_t round = c->round_started;
	uint32_t want = (c->crc_p1 - c->crc_p0 + 1) * BLK;
	struct chunk_op *op, *next;
	int err;

	if ((res < 0 || (uint32_t)res != want) && !c->crc_err)
		c->crc_err = res < 0 ? res : -EIO;
	if (--c->crc_sqes)
		return;
	err = c->crc_err;
	c->crc_inflight = false;
	if (err) {
		/* The table in memory stays authoritative: rewrite those pages. */
		for (uint32_t p = c->crc_p0; p <= c->crc_p1; p++)
			c->dirty_mask |= 1u << p;
	}
	c->round_done = round;
	c->refs++; /* finishing ops below may drop the last other reference */
	for (op = c->active.first; op; op = next) {
		next = op->next;
		if (op->stage != OP_ST_COMMIT || op->need_round > round)
			continue;
		if (err) {
			chunk_crc_rollback(c, op->b0, op->b1);
			op->err = store_map_err(s, op, err);
			op_finish(op);
		} else if (op->kind == OP_WRITE) {
			op_write_data(op);
		} else {
			op_zero_data(op);
		}
	}
	/* After a failed round retry only for writers still waiting, so a dead
	 * disk does not spin. */
	for (op = c->active.first; op && err; op = op->next)
		if (op->stage == OP_ST_COMMIT)
			err = 0;
	if (!err)
		chunk_crc_kick(s, c);
	chunk_put(s, c); /* the extra one */
	chunk_put(s, c); /* the write's */
}

/* ---- operations ---- */

static bool op_conflict(const struct chunk_op *a, const struct chunk_op *b)
{
	if (a->kind == OP_READ && b->kind == OP_READ)
		return false;
	return a->b0 < b->b1 && b->b0 < a->b1;
}

static void op_defer_finish(void *arg)
{
	op_finish(arg);
}

/* Finishes op from the loop (never inside the call that started it). */
static void op_fail_later(struct chunk_op *op, int err)
{
	op->err = err;
	op->stage = OP_ST_DONE;
	zl_loop_defer(op->s->loop, &op->defer, op_defer_finish, op);
}

static void op_finish(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	zl_chunk_cb cb = op->cb;
	void *arg = op->arg;
	int err = op->err;

	if (c) {
		list_del(&c->active, op);
		/* Start waiting ops that no longer overlap anything ahead of them. */
		for (struct chunk_op *w = c->waiting.first, *wn; w; w = wn) {
			bool blocked = false;

			wn = w->next;
			for (struct chunk_op *a = c->active.first; a && !blocked; a = a->next)
				blocked = op_conflict(w, a);
			for (struct chunk_op *e = c->waiting.first; e != w && !blocked; e = e->next)
				blocked = op_conflict(w, e);
			if (blocked)
				continue;
			list_del(&c->waiting, w);
			list_add_tail(&c->active, w);
			op_start(w);
		}
	}
	if (op->own_buf)
		s->buf_free(s->buf_arg, op->buf);
	if (c)
		chunk_put(s, c);
	op_free(op);
	cb(arg, err);
}

/* Data stage of a write: the payload (merged with edge blocks) to disk. */
static void op_write_data(struct chunk_op *op)
{
	struct chunk *c = op->ch;
	uint32_t span = (op->b1 - op->b0) * BLK;
	int rc;

	op->stage = OP_ST_DATA;
	rc = op_prep_rw(op, true, op->buf, span, c->data_off + (uint64_t)op->b0 * BLK);
	if (rc) {
		chunk_crc_rollback(c, op->b0, op->b1);
		op_fail_later(op, rc);
	}
}

/* Geometry of a zeroing op: partial head block hb, partial tail block tb
 * (when distinct from hb), whole blocks [fb0, fb1). */
struct zero_geo {
	bool head, tail;
	uint32_t hb, tb, fb0, fb1;
};

static void op_zero_geo(const struct chunk_op *op, struct zero_geo *g)
{
	uint32_t e0 = op->off, e1 = op->off + op->len;

	g->hb = e0 / BLK;
	g->tb = e1 / BLK;
	g->fb0 = (e0 + BLK - 1) / BLK;
	g->fb1 = e1 / BLK;
	g->head = e0 % BLK;
	g->tail = e1 % BLK && !(g->head && g->tb == g->hb);
}

/* Data stage of a zeroing op: the rewritten edge blocks and the punch. */
static void op_zero_data(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	struct io_uring_sqe *sqe;
	struct zero_geo g;
	int rc = 0;

	op_zero_geo(op, &g);
	op->stage = OP_ST_DATA;
	if (g.head)
		rc = op_prep_rw(op, true, op->buf, BLK, c->data_off + (uint64_t)g.hb * BLK);
	if (!rc && g.tail)
		rc = op_prep_rw(op, true, op->buf + BLK, BLK, c->data_off + (uint64_t)g.tb * BLK);
	if (!rc && g.fb1 > g.fb0) {
		sqe = store_sqe(s);
		if (!sqe) {
			rc = -ZL_ERR_BUSY;
		} else {
			io_uring_prep_fallocate(
			    sqe, c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			    c->data_off + (uint64_t)g.fb0 * BLK, (uint64_t)(g.fb1 - g.fb0) * BLK);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
			op->pending++;
		}
	}
	if (rc && !op->pending) {
		chunk_crc_rollback(c, op->b0, op->b1);
		op_fail_later(op, rc);
	} else if (rc) {
		op->err = rc; /* finishes (and rolls back) once the others complete */
	}
}

/* Builds the blocks a write/zero will put on disk, sets their new CRCs
 * (keeping the old ones as previous) and waits for them to be durable. */
static void op_commit_prepare(struct chunk_op *op)
{
	struct chunk *c = op->ch;

	if (op->kind == OP_WRITE) {
		if (op->own_buf)
			memcpy(op->buf + (op->off - op->b0 * BLK), op->data, op->len);
		for (uint32_t b = op->b0; b < op->b1; b++)
			chunk_set_crc(c, b, zl_crc32c(op->buf + (size_t)(b - op->b0) * BLK, BLK));
	} else {
		uint32_t e0 = op->off, e1 = op->off + op->len;
		struct zero_geo g;

		op_zero_geo(op, &g);
		if (g.head) {
			uint32_t end = ZL_MIN(e1, (g.hb + 1) * BLK);

			memset(op->buf + (e0 - g.hb * BLK), 0, end - e0);
			chunk_set_crc(c, g.hb, zl_crc32c(op->buf, BLK));
		}
		if (g.tail) {
			memset(op->buf + BLK, 0, e1 - g.tb * BLK);
			chunk_set_crc(c, g.tb, zl_crc32c(op->buf + BLK, BLK));
		}
		for (uint32_t b = g.fb0; b < g.fb1; b++)
			chunk_set_crc(c, b, 0);
	}
	op->stage = OP_ST_COMMIT;
	op->need_round = c->round_started + 1;
	chunk_crc_kick(op->s, c);
}

/* Starts (or restarts after waiting) an operation on its chunk. */
static void op_start(struct chunk_op *op)
{
	struct chunk *c = op->ch;
	struct zero_geo g;
	bool head, tail;
	int rc = 0;

	switch (op->kind) {
	case OP_READ:
		op->stage = OP_ST_DATA;
		rc = op_prep_rw(op, false, op->buf, (op->b1 - op->b0) * BLK,
				c->data_off + (uint64_t)op->b0 * BLK);
		break;
	case OP_WRITE:
		op->stage = OP_ST_EDGE;
		head = op->own_buf && op->off % BLK;
		tail = op->own_buf && (op->off + op->len) % BLK && !(head && op->b1 - 1 == op->b0);
		if (head)
			rc = op_prep_rw(op, false, op->buf, BLK,
					c->data_off + (uint64_t)op->b0 * BLK);
		if (!rc && tail)
			rc = op_prep_rw(op, false, op->buf + (size_t)(op->b1 - 1 - op->b0) * BLK,
					BLK, c->data_off + (uint64_t)(op->b1 - 1) * BLK);
		if (!rc && !op->pending) {
			op_commit_prepare(op);
			return;
		}
		break;
	case OP_ZERO:
		op_zero_geo(op, &g);
		op->stage = OP_ST_EDGE;
		if (g.head)
			rc =
			    op_prep_rw(op, false, op->buf, BLK, c->data_off + (uint64_t)g.hb * BLK);
		if (!rc && g.tail)
			rc = op_prep_rw(op, false, op->buf + BLK, BLK,
					c->data_off + (uint64_t)g.tb * BLK);
		if (!rc && !op->pending) {
			op_commit_prepare(op);
			return;
		}
		break;
	case OP_FLUSH:
		break;
	}
	if (rc && !op->pending)
		op_fail_later(op, rc);
	else if (rc)
		op->err = rc;
}

/* All SQEs of the current stage completed. */
static void op_stage_done(struct chunk_op *op)
{
	struct zl_chunk_store *s = op->s;
	struct chunk *c = op->ch;
	int rc = 0;

	if (!op->err && op->got != op->expect)
		op->err = -EIO; /* short transfer */
	op->expect = op->got = 0;
	if (op->err) {
		if (op->stage == OP_ST_DATA && (op->kind == OP_WRITE || op->kind == OP_ZERO))
			chunk_crc_rollback(c, op->b0, op->b1);
		op->err = store_map_err(s, op, op->err);
		op_finish(op);
		return;
	}
	if (op->stage == OP_ST_EDGE) {
		/* Verify the edge blocks before merging: never launder corruption
		 * into a fresh CRC. */
		if (op->kind == OP_WRITE) {
			bool head = op->off % BLK;

			if (head)
				rc = chunk_verify(s, c, op->b0, op->buf);
			if (!rc && (op->off + op->len) % BLK && !(head && op->b1 - 1 == op->b0))
				rc = chunk_verify(s, c, op->b1 - 1,
						  op->buf + (size_t)(op->b1 - 1 - op->b0) * BLK);
		} else {
			struct zero_geo g;

			op_zero_geo(op, &g);
			if (g.head)
				rc = chunk_verify(s, c, g.hb, op->buf);
			if (!rc && g.tail)
				rc = chunk_verify(s, c, g.tb, op->buf + BLK);
		}
		if (rc) {
			op->err = rc;
			op_finish(op);
			return;
		}
		op_commit_prepare(op);
		return;
	}
	if (op->kind == OP_READ) {
		for (uint32_t b = op->b0; b < op->b1 && !op->err; b++)
			op->err = chunk_verify(s, c, b, op->buf + (size_t)(b - op->b0) * BLK);
	}
	op_finish(op);
}

static void store_cqe(struct zl_chunk_store *s, uint64_t ud, int res)
{
	struct chunk_op *op;

	if (!ud)
		return; /* no-op filler */
	if (ud & TAG_CRC) {
		chunk_crc_done(s, (struct chunk *)(uintptr_t)(ud & ~TAG_CRC), res);
		return;
	}
	op = (struct chunk_op *)(uintptr_t)ud;
	if (res < 0) {
		if (!op->err)
			op->err = res;
	} else {
		op->got += (uint64_t)res;
	}
	if (--op->pending == 0)
		op_stage_done(op);
}

static void store_efd_cb(void *arg, uint32_t events)
{
	struct zl_chunk_store *s = arg;
	struct io_uring_cqe *cqe;
	uint64_t v;

	if (read(s->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: completions already reaped */
	}
	while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&s->ring, cqe);
		store_cqe(s, ud, res);
	}
}

/* Common part of read/write/zero: checks, chunk lookup, context, queueing. */
static int store_submit(struct zl_chunk_store *s, enum op_kind kind, uint64_t vol, uint64_t idx,
			uint32_t cs, uint32_t off, uint32_t len, const void *data, void *buf,
			zl_chunk_cb cb, void *arg)
{
	struct chunk_op *op;
	struct chunk *c = NULL;
	uint32_t span = zl_chunk_read_span(off, len);
	int rc;

	if (!cb || !vol || !chunk_size_ok(cs) || (kind == OP_READ && !buf) ||
	    (kind == OP_WRITE && !data))
		return -ZL_ERR_INVAL;
	if (!len || (uint64_t)off + len > cs || (kind != OP_ZERO && len > ZL_WIRE_MAX_IO))
		return -ZL_ERR_RANGE;
	rc = chunk_get(s, vol, idx, cs, kind == OP_WRITE, &c);
	if (rc && rc != -ENOENT)
		return rc == -ENOSPC ? -ZL_ERR_NOSPC : rc;
	op = op_alloc(s);
	if (!op) {
		if (c)
			chunk_put(s, c);
		return -ENOMEM;
	}
	op->kind = kind;
	op->off = off;
	op->len = len;
	op->b0 = off / BLK;
	op->b1 = (uint32_t)(((uint64_t)off + len + BLK - 1) / BLK);
	op->data = data;
	op->cb = cb;
	op->arg = arg;
	op->ch = c;
	if (!c) {
		/* Absent replica: reads see zeros, zeroing has nothing to do. */
		if (kind == OP_READ)
			memset(buf, 0, span);
		op_fail_later(op, 0);
		return 0;
	}
	if (kind == OP_READ) {
		op->buf = buf;
	} else if (kind == OP_WRITE && !(off % BLK) && !(len % BLK) && !((uintptr_t)data % BLK)) {
		op->buf = (uint8_t *)data;
	} else if (kind == OP_WRITE || off % BLK || (off + len) % BLK) {
		op->buf = s->buf_alloc(s->buf_arg, kind == OP_WRITE ? span : 2 * BLK);
		if (!op->buf) {
			op_free(op);
			chunk_put(s, c);
			return -ENOMEM;
		}
		op->own_buf = true;
	}
	if (kind == OP_READ)
		s->st.reads++;
	else if (kind == OP_WRITE)
		s->st.writes++;
	else
		s->st.zeroes++;
	for (struct chunk_op *o = c->active.first; o; o = o->next)
		if (op_conflict(op, o))
			goto wait;
	for (struct chunk_op *o = c->waiting.first; o; o = o->next)
		if (op_conflict(op, o))
			goto wait;
	list_add_tail(&c->active, op);
	op_start(op);
	return 0;
wait:
	op->stage = OP_ST_WAIT;
	list_add_tail(&c->waiting, op);
	return 0;
}

int zl_chunk_write(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		   uint32_t off, uint32_t len, const void *data, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_WRITE, vol, chunk, chunk_size, off, len, data, NULL, cb, arg);
}

int zl_chunk_zero(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_ZERO, vol, chunk, chunk_size, off, len, NULL, NULL, cb, arg);
}

int zl_chunk_read(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint32_t chunk_size,
		  uint32_t off, uint32_t len, void *buf, zl_chunk_cb cb, void *arg)
{
	return store_submit(s, OP_READ, vol, chunk, chunk_size, off, len, NULL, buf, cb, arg);
}

int zl_chunk_flush(struct zl_chunk_store *s, uint64_t vol, zl_chunk_cb cb, void *arg)
{
	struct chunk_op *op;
	bool submit = false;

	if (!cb)
		return -ZL_ERR_INVAL;
	op = op_alloc(s);
	if (!op)
		return -ENOMEM;
	op->kind = OP_FLUSH;
	op->stage = OP_ST_DATA;
	op->cb = cb;
	op->arg = arg;
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct chunk *c = s->buckets[i]; c; c = c->hnext) {
			struct io_uring_sqe *sqe;

			if (c->vol != vol)
				continue;
			sqe = store_sqe(s);
			if (!sqe) {
				op->err = -ZL_ERR_BUSY;
				continue;
			}
			io_uring_prep_fsync(sqe, c->fd, IORING_FSYNC_DATASYNC);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
			op->pending++;
			submit = true;
		}
	}
	/* Submit now: the kernel takes its file references before any eviction
	 * could close one of these descriptors. */
	if (submit) {
		io_uring_submit(&s->ring);
		s->to_submit = 0;
	}
	if (!op->pending)
		op_fail_later(op, op->err);
	return 0;
}

/* ---- replica management (blocking, rare) ---- */

int zl_chunk_info(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk, uint64_t *allocated)
{
	char path[PATH_MAX];
	struct stat stb;
	int rc = store_path(s, vol, chunk, path, sizeof(path));

	if (rc)
		return rc;
	*allocated = 0;
	if (stat(path, &stb) < 0)
		return errno == ENOENT ? 0 : -errno;
	*allocated = (uint64_t)stb.st_blocks * 512;
	return 0;
}

int zl_chunk_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t chunk)
{
	char path[PATH_MAX];
	struct chunk *c = chunk_lookup(s, vol, chunk);
	int rc = store_path(s, vol, chunk, path, sizeof(path));

	if (rc)
		return rc;
	if (c)
		chunk_detach(s, c);
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int zl_chunk_volume_delete(struct zl_chunk_store *s, uint64_t vol, uint64_t *removed)
{
	char dir[PATH_MAX], path[PATH_MAX + 300];
	uint64_t n = 0;
	struct dirent *de;
	DIR *d;
	int rc = store_path(s, vol, UINT64_MAX, dir, sizeof(dir));

	if (removed)
		*removed = 0;
	if (rc)
		return rc;
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		for (struct chunk *c = s->buckets[i], *next; c; c = next) {
			next = c->hnext;
			if (c->vol == vol)
				chunk_detach(s, c);
		}
	}
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path) < 0 && errno != ENOENT) {
			rc = -errno;
			break;
		}
		if (strstr(de->d_name, ".zlc") && !strstr(de->d_name, ".tmp"))
			n++;
	}
	closedir(d);
	if (!rc && rmdir(dir) < 0 && errno != ENOENT)
		rc = -errno;
	if (!rc)
		fsync_dir(s->dir);
	if (removed)
		*removed = n;
	return rc;
}

int zl_chunk_volume_foreach(struct zl_chunk_store *s, int (*fn)(void *arg, uint64_t vol), void *arg)
{
	struct dirent *de;
	DIR *d = opendir(s->dir);
	int rc = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		uint64_t vol;

		if (zl_vol_id_parse(de->d_name, &vol))
			continue;
		rc = fn(arg, vol);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

/* ---- store lifecycle ---- */

int zl_chunk_store_create(const struct zl_chunk_store_opts *opts, struct zl_chunk_store **out)
{
	struct io_uring_params p = {0};
	struct zl_chunk_store *s;
	size_t n;
	int rc;

	if (!opts || !opts->data_dir || !opts->loop || !opts->buf_alloc || !opts->buf_free)
		return -ZL_ERR_INVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->efd = -1;
	s->loop = opts->loop;
	zl_slab_init(&s->ops, sizeof(struct chunk_op), STORE_OP_SLAB);
	s->max_open = opts->max_open ? opts->max_open : 1024;
	s->buf_alloc = opts->buf_alloc;
	s->buf_free = opts->buf_free;
	s->buf_arg = opts->buf_arg;
	s->direct = true;
	s->st.direct_io = true;
	n = strlen(opts->data_dir) + sizeof("/chunks");
	s->dir = malloc(n);
	if (!s->dir) {
		rc = -ENOMEM;
		goto out_free;
	}
	snprintf(s->dir, n, "%s/chunks", opts->data_dir);
	if (mkdir(s->dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		ZL_LOG_ERR("storage", "cannot create %s: %s (check the data dir's permissions)",
			   s->dir, strerror(-rc));
		goto out_free;
	}
	p.flags = IORING_SETUP_CQSIZE;
	p.cq_entries = 8 * (opts->ring_entries ? opts->ring_entries : 512);
	rc =
	    io_uring_queue_init_params(opts->ring_entries ? opts->ring_entries : 512, &s->ring, &p);
	if (rc < 0) {
		ZL_LOG_ERR("storage",
			   "io_uring setup failed: %s (kernel >= 5.6 with io_uring "
			   "enabled is required; check memlock limits)",
			   strerror(-rc));
		goto out_free;
	}
	s->ring_ok = true;
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->efd < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = io_uring_register_eventfd(&s->ring, s->efd);
	if (rc < 0)
		goto out_free;
	rc = zl_loop_add(s->loop, &s->efd_h, s->efd, EPOLLIN, store_efd_cb, s);
	if (rc)
		goto out_free;
	s->efd_added = true;
	zl_loop_add_poller(s->loop, &s->poller, store_poll, s);
	*out = s;
	return 0;

out_free:
	zl_chunk_store_destroy(s);
	return rc;
}

uint32_t zl_chunk_store_inflight(const struct zl_chunk_store *s)
{
	return s->ops.in_use;
}

void zl_chunk_store_stats(const struct zl_chunk_store *s, struct zl_chunk_store_stats *st)
{
	*st = s->st;
	st->open_chunks = s->n_open;
	st->inflight = s->ops.in_use;
}

void zl_chunk_store_destroy(struct zl_chunk_store *s)
{
	uint64_t deadline;

	if (!s)
		return;
	if (s->efd_added) {
		deadline = zl_now_ms() + STORE_DRAIN_MS;
		while (s->ops.in_use && zl_now_ms() < deadline)
			zl_loop_run_once(s->loop, 100);
		if (s->ops.in_use)
			ZL_LOG_WARN("storage",
				    "closing the chunk store with %u operations in flight",
				    s->ops.in_use);
		/* CRC writes may still be in flight without an op waiting. */
		for (uint32_t i = 0; i < STORE_BUCKETS; i++)
			for (struct chunk *c = s->buckets[i]; c; c = c->hnext)
				while (c->crc_inflight && zl_now_ms() < deadline)
					zl_loop_run_once(s->loop, 100);
		zl_loop_del_poller(s->loop, &s->poller);
		zl_loop_del(s->loop, &s->efd_h);
	}
	for (uint32_t i = 0; i < STORE_BUCKETS; i++) {
		while (s->buckets[i]) {
			struct chunk *c = s->buckets[i];

			s->buckets[i] = c->hnext;
			chunk_free(s, c);
		}
	}
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	if (s->efd >= 0)
		close(s->efd);
	zl_slab_fini(&s->ops);
	free(s->dir);
	free(s);
}
