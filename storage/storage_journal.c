/* The storage daemon's journal writer: see storage_journal.h; the format and
 * replay rules are lib/journal and docs/JOURNAL.md. */
#include "storage_journal.h"
#include "storage_uring.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/common/common.h"

#define BLK	    ZL_JOURNAL_BLOCK
#define JW_FILE	    "journal-0"
#define JW_ZERO_BUF (1u << 20)
#define JW_RING	    8u
#define TAG_REC	    1ull
#define TAG_SB	    2ull

/* A record between the checkpoint and the head. */
struct jw_rec {
	uint64_t off;
	uint32_t outstanding; /* items not yet applied to the chunk files */
	bool durable;
};

struct zl_jw {
	struct zl_loop *loop;
	char path[PATH_MAX];
	int fd;
	struct zl_journal_sb sb; /* current superblock */
	unsigned slot;		 /* its slot */
	uint64_t ring_len;
	uint64_t head, next_seq;     /* where the next record goes */
	uint64_t tail_seq, tail_off; /* the checkpoint */
	uint64_t aseq;		     /* records below it are all applied */
	struct jw_rec *recs;	     /* by seq % nrecs, tail_seq .. next_seq - 1 */
	uint64_t nrecs;
	bool writing;
	/* Group commit: the builder fills while the previous record flies. */
	uint8_t *buf[2], *padbuf;
	unsigned fill;
	size_t cap;
	struct zl_journal_builder b;
	struct zl_jw_item *fill_first, *fill_last;
	uint32_t fill_items;
	struct zl_jw_item *fly;
	uint32_t fly_sqes;
	int fly_err;
	uint64_t fly_seq, fly_pad_seq;
	bool fly_has_pad;
	struct zl_jw_item *wait_first, *wait_last;
	/* Superblock write of a checkpoint. */
	uint8_t *sbbuf;
	struct zl_journal_sb sb_next;
	bool sb_inflight;
	void (*sb_done)(void *arg, int err);
	void *sb_arg;
	struct io_uring ring;
	bool ring_ok;
	int efd;
	struct zl_loop_handle efd_h;
	bool efd_added;
	struct zl_defer kick;
	void (*need_ckpt)(void *arg);
	void *arg;
	struct zl_jw_stats st;
};

static void jw_flush(struct zl_jw *j);

static void *jw_alloc(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, BLK, ZL_ALIGN_UP(len, BLK)) ? NULL : p;
}

/* A new journal: formatted next to its final name, the ring zero-filled (so
 * record writes find their blocks allocated and written: no file system
 * metadata per record), synced, renamed, directory synced. */
static int jw_create(const char *dir, const char *path, uint64_t size)
{
	char tmp[PATH_MAX + 8];
	struct zl_journal_sb sb;
	uint8_t *zero = NULL;
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	rc = zl_journal_format(fd, size, 0, 1, &sb);
	if (rc)
		goto out;
	zero = calloc(1, JW_ZERO_BUF);
	if (!zero) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint64_t off = sb.ring_off; off < size && !rc; off += JW_ZERO_BUF)
		rc = zl_pwrite_all(fd, zero, (size_t)ZL_MIN((uint64_t)JW_ZERO_BUF, size - off), off);
	if (!rc && fdatasync(fd) < 0)
		rc = -errno;
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (!rc)
		rc = zl_fsync_dir(dir);
out:
	free(zero);
	close(fd);
	if (rc)
		unlink(tmp);
	return rc;
}

static int jw_open_fd(const char *path)
{
	int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);

	if (fd < 0 && errno == EINVAL)
		fd = open(path, O_RDWR | O_CLOEXEC); /* tmpfs: buffered + RWF_DSYNC */
	return fd < 0 ? -errno : fd;
}

void zl_jw_close(struct zl_jw *j)
{
	if (!j)
		return;
	if (j->efd_added)
		zl_loop_del(j->loop, &j->efd_h);
	zl_loop_defer_cancel(j->loop, &j->kick);
	if (j->ring_ok)
		io_uring_queue_exit(&j->ring);
	if (j->efd >= 0)
		close(j->efd);
	if (j->fd >= 0)
		close(j->fd);
	free(j->buf[0]);
	free(j->buf[1]);
	free(j->padbuf);
	free(j->sbbuf);
	free(j->recs);
	free(j);
}

int zl_jw_open(const struct zl_jw_opts *o, struct zl_jw **out)
{
	char dir[PATH_MAX];
	const char *why = NULL;
	struct zl_jw *j;
	int rc;

	*out = NULL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->fd = j->efd = -1;
	j->loop = o->loop;
	j->need_ckpt = o->need_ckpt;
	j->arg = o->arg;
	snprintf(dir, sizeof(dir), "%s", o->data_dir);
	if (snprintf(j->path, sizeof(j->path), "%s/" JW_FILE, o->data_dir) >=
	    (int)sizeof(j->path)) {
		rc = -ENAMETOOLONG;
		goto fail;
	}
	if (access(j->path, F_OK) < 0) {
		if (errno != ENOENT || !o->create) {
			rc = errno == ENOENT ? 0 : -errno;
			goto fail;
		}
		rc = jw_create(dir, j->path, o->size);
		if (rc) {
			ZL_LOG_ERR("storage",
				   "cannot create the journal %s (%" PRIu64 " bytes): %s (check free "
				   "space on the data dir's file system, or lower --journal-size)",
				   j->path, o->size, zl_strerror(rc));
			goto fail;
		}
		ZL_LOG_INFO("storage", "journal created: %s, %" PRIu64 " bytes", j->path, o->size);
	}
	j->fd = jw_open_fd(j->path);
	if (j->fd < 0) {
		rc = j->fd;
		ZL_LOG_ERR("storage", "cannot open the journal %s: %s", j->path, zl_strerror(rc));
		goto fail;
	}
	/* Records of a process killed -9 may still be on their way in: the
	 * replay reads what is there once they landed (zl_dio_settle). */
	rc = zl_dio_settle(j->fd);
	if (rc && rc != -EOPNOTSUPP)
		ZL_LOG_WARN("storage",
			    "cannot wait for writes in flight into the journal %s: %s (the "
			    "replay may miss a record of a killed process still on its way)",
			    j->path, zl_strerror(rc));
	rc = zl_journal_sb_read(j->fd, &j->sb, &j->slot, &why);
	if (rc) {
		ZL_LOG_ERR("storage",
			   "journal %s is unreadable: %s (%s); acknowledged writes may be in it: "
			   "do not remove it, move this node's data dir aside and let the "
			   "cluster rebuild it from the other replicas",
			   j->path, why ? why : "?", zl_strerror(rc));
		goto fail;
	}
	if (o->create && o->size && o->size != j->sb.size)
		ZL_LOG_INFO("storage",
			    "journal %s is %" PRIu64 " bytes; --journal-size %" PRIu64
			    " applies to a new journal only",
			    j->path, j->sb.size, o->size);
	j->ring_len = j->sb.size - j->sb.ring_off;
	j->nrecs = j->ring_len / BLK;
	j->recs = calloc(j->nrecs, sizeof(*j->recs));
	if (!j->recs) {
		rc = -ENOMEM;
		goto fail;
	}
	j->st.size = j->sb.size;
	j->st.ring = j->ring_len;
	*out = j;
	return 0;

fail:
	zl_jw_close(j);
	return rc;
}

int zl_jw_replay(struct zl_jw *j, zl_journal_apply_fn apply, void *arg)
{
	struct zl_journal_replay_stats rs;
	size_t len = zl_journal_replay_buf_size(&j->sb) + BLK;
	uint8_t *scratch = jw_alloc(len);
	int rc;

	if (!scratch)
		return -ENOMEM;
	rc = zl_journal_replay(&j->sb, zl_journal_read_fd, &j->fd, apply, arg, scratch, len, &rs);
	free(scratch);
	j->st.replay_records = rs.records;
	j->st.replay_entries = rs.entries;
	j->st.replay_ms = rs.elapsed_ns / 1000000;
	j->next_seq = rs.next_seq;
	j->head = rs.next_off;
	if (rc) {
		ZL_LOG_ERR("storage",
			   "journal replay of %s failed after %" PRIu64 " records: %s (%s); the "
			   "daemon does not start: fix the disk error, then start it again",
			   j->path, rs.records, zl_strerror(rc), rs.why ? rs.why : "?");
		return rc;
	}
	ZL_LOG_INFO("storage",
		    "journal replay: %" PRIu64 " records, %" PRIu64 " entries, %" PRIu64
		    " bytes in %" PRIu64 " ms from seq %" PRIu64 ", stopped: %s",
		    rs.records, rs.entries, rs.bytes, j->st.replay_ms, j->sb.ckpt_seq,
		    rs.why ? rs.why : "end");
	return 0;
}

int zl_jw_read(struct zl_jw *j, void *buf, size_t len, uint64_t off)
{
	uint64_t a = off & ~(uint64_t)(BLK - 1), e = ZL_ALIGN_UP(off + len, BLK);
	uint8_t *bounce;
	int rc;

	if (len > ZL_JOURNAL_IO_MAX || e > j->sb.size)
		return -ZL_ERR_RANGE;
	bounce = jw_alloc((size_t)(e - a));
	if (!bounce)
		return -ENOMEM;
	rc = zl_journal_read_fd(&j->fd, bounce, (size_t)(e - a), a);
	if (!rc)
		memcpy(buf, bounce + (off - a), len);
	free(bounce);
	return rc;
}

/* Writes sb into the slot that is not current and makes it durable
 * (blocking). */
static int jw_sb_write_sync(struct zl_jw *j, const struct zl_journal_sb *sb)
{
	uint8_t *p = jw_alloc(BLK);
	int rc;

	if (!p)
		return -ENOMEM;
	rc = zl_journal_sb_encode(sb, p);
	if (!rc)
		rc = zl_pwrite_all(j->fd, p, BLK, (uint64_t)(j->slot ^ 1) * BLK);
	if (!rc && fdatasync(j->fd) < 0)
		rc = -errno;
	free(p);
	if (!rc) {
		j->sb = *sb;
		j->slot ^= 1;
		j->st.sb_writes++;
	}
	return rc;
}

static void jw_efd_cb(void *arg, uint32_t events);

int zl_jw_start(struct zl_jw *j, bool writing)
{
	struct zl_journal_sb sb = j->sb;
	int rc;

	sb.sb_seq++;
	sb.generation++;
	sb.ckpt_seq = j->next_seq;
	sb.ckpt_off = j->head;
	rc = jw_sb_write_sync(j, &sb);
	if (rc) {
		ZL_LOG_ERR("storage", "cannot write the journal superblock of %s: %s", j->path,
			   zl_strerror(rc));
		return rc;
	}
	j->tail_seq = j->aseq = j->next_seq;
	j->tail_off = j->head;
	if (!writing)
		return 0;
	j->cap = ZL_MIN((size_t)ZL_JOURNAL_REC_MAX, (size_t)(j->ring_len / 2));
	j->buf[0] = jw_alloc(j->cap);
	j->buf[1] = jw_alloc(j->cap);
	j->padbuf = jw_alloc(BLK);
	j->sbbuf = jw_alloc(BLK);
	if (!j->buf[0] || !j->buf[1] || !j->padbuf || !j->sbbuf)
		return -ENOMEM;
	zl_journal_builder_init(&j->b, j->buf[0], j->cap);
	rc = zl_storage_uring_init(&j->ring, JW_RING, 0);
	if (rc < 0)
		return rc;
	j->ring_ok = true;
	rc = zl_storage_uring_efd(&j->ring, j->loop, &j->efd_h, &j->efd, jw_efd_cb, j);
	if (rc)
		return rc;
	j->efd_added = true;
	j->writing = true;
	return 0;
}

uint64_t zl_jw_next_seq(const struct zl_jw *j)
{
	return j->next_seq;
}

uint64_t zl_jw_nonce(const struct zl_jw *j)
{
	return j->sb.nonce;
}

/* Ring bytes in use (checkpoint to head). */
static uint64_t jw_used(const struct zl_jw *j)
{
	if (j->tail_seq == j->next_seq)
		return 0;
	if (j->head > j->tail_off)
		return j->head - j->tail_off;
	return j->ring_len - (j->tail_off - j->head);
}

static void jw_kick_cb(void *arg)
{
	jw_flush(arg);
}

/* Size of an item's entries in a record, 0 when one is invalid. */
static size_t jw_item_size(const struct zl_jw_item *it)
{
	size_t n = 0;

	for (uint32_t i = 0; i < it->n; i++) {
		size_t e = zl_journal_entry_size(&it->ents[i]);

		if (!e)
			return 0;
		n += e;
	}
	return n;
}

/* Adds it to the record being built. -ZL_ERR_NOSPC: it does not fit now. */
static int jw_add(struct zl_jw *j, struct zl_jw_item *it)
{
	size_t need = jw_item_size(it);
	int rc = 0;

	if (!need || !it->n)
		return -ZL_ERR_INVAL;
	if (ZL_ALIGN_UP(j->b.used + need, BLK) > j->cap)
		return j->b.nentries ? -ZL_ERR_NOSPC : -ZL_ERR_INVAL;
	for (uint32_t i = 0; i < it->n && !rc; i++)
		rc = zl_journal_builder_add(&j->b, &it->ents[i]);
	if (rc)
		return rc; /* cannot happen after the size check */
	it->next = NULL;
	if (j->fill_last)
		j->fill_last->next = it;
	else
		j->fill_first = it;
	j->fill_last = it;
	j->fill_items++;
	return 0;
}

static void jw_fail_list(struct zl_jw_item *it, int err)
{
	while (it) {
		struct zl_jw_item *next = it->next;

		it->done(it, err);
		it = next;
	}
}

/* Moves waiting items into the builder while they fit. */
static void jw_pull_waiters(struct zl_jw *j)
{
	while (j->wait_first) {
		struct zl_jw_item *it = j->wait_first;
		int rc;

		j->wait_first = it->next;
		rc = jw_add(j, it);
		if (rc == -ZL_ERR_NOSPC) {
			it->next = j->wait_first;
			j->wait_first = it;
			break;
		}
		j->st.waiting--;
		if (!j->wait_first)
			j->wait_last = NULL;
		if (rc)
			it->done(it, rc);
	}
	if (!j->wait_first)
		j->wait_last = NULL;
}

void zl_jw_append(struct zl_jw *j, struct zl_jw_item *it)
{
	int rc = -ZL_ERR_NOSPC;

	if (j->st.broken) {
		it->done(it, j->st.broken);
		return;
	}
	if (!j->wait_first)
		rc = jw_add(j, it);
	if (rc == -ZL_ERR_NOSPC) {
		it->next = NULL;
		if (j->wait_last)
			j->wait_last->next = it;
		else
			j->wait_first = it;
		j->wait_last = it;
		j->st.waits++;
		j->st.waiting++;
		if (j->need_ckpt && !j->fly)
			j->need_ckpt(j->arg);
		return;
	}
	if (rc) {
		it->done(it, rc);
		return;
	}
	if (!j->fly)
		zl_loop_defer(j->loop, &j->kick, jw_kick_cb, j);
}

static int jw_prep_write(struct zl_jw *j, const void *buf, uint32_t len, uint64_t off,
			 uint64_t tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&j->ring);

	if (!sqe)
		return -ZL_ERR_BUSY;
	io_uring_prep_write(sqe, j->fd, buf, len, off);
	sqe->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

/* Writes the record being built, unless one is in flight or it does not fit
 * the ring before the checkpoint (then a checkpoint is asked for). */
static void jw_flush(struct zl_jw *j)
{
	struct zl_journal_stamp stamp = {.nonce = j->sb.nonce,
					 .journal_id = j->sb.journal_id,
					 .generation = (uint32_t)j->sb.generation};
	uint32_t len, pad = 0;
	uint64_t place, used = jw_used(j), free_b;
	int rc;

	if (j->fly || !j->fill_first || j->st.broken)
		return;
	len = (uint32_t)zl_journal_builder_len(&j->b);
	place = zl_journal_ring_place(&j->sb, j->head, len, &pad);
	free_b = j->ring_len - used;
	/* Keep one block between the head and the checkpoint. */
	if ((uint64_t)len + pad + (used ? BLK : 0) > free_b ||
	    (used && (uint64_t)len + pad + BLK > free_b)) {
		if (j->need_ckpt)
			j->need_ckpt(j->arg);
		return;
	}
	stamp.seq = j->next_seq;
	j->fly_has_pad = pad != 0;
	if (pad) {
		j->fly_pad_seq = stamp.seq;
		rc = zl_journal_pad_encode(j->padbuf, &stamp, pad);
		if (!rc)
			rc = jw_prep_write(j, j->padbuf, BLK, j->head, TAG_REC);
		if (rc)
			goto fail;
		j->recs[stamp.seq % j->nrecs] = (struct jw_rec){.off = j->head};
		stamp.seq++;
		j->fly_sqes++;
		j->st.pads++;
		j->st.rec_bytes += BLK;
	}
	rc = zl_journal_builder_finish(&j->b, &stamp);
	if (rc < 0)
		goto fail;
	rc = jw_prep_write(j, j->buf[j->fill], len, place, TAG_REC);
	if (rc)
		goto fail;
	j->fly_sqes++;
	j->fly_seq = stamp.seq;
	j->fly_err = 0;
	j->recs[stamp.seq % j->nrecs] =
	    (struct jw_rec){.off = place, .outstanding = j->fill_items};
	j->next_seq = stamp.seq + 1;
	j->head = place + len == j->sb.size ? j->sb.ring_off : place + len;
	j->st.records++;
	j->st.entries += j->b.nentries;
	j->st.rec_bytes += len;
	j->fly = j->fill_first;
	j->fill_first = j->fill_last = NULL;
	j->fill_items = 0;
	j->fill ^= 1;
	zl_journal_builder_init(&j->b, j->buf[j->fill], j->cap);
	rc = io_uring_submit(&j->ring);
	if (rc < 0) {
		/* Nothing went out: the SQEs stay queued; fail loudly. */
		j->st.broken = -ZL_ERR_IO;
		ZL_LOG_ERR("storage", "journal submit failed: %s", zl_strerror(rc));
	}
	jw_pull_waiters(j);
	if (j->need_ckpt && jw_used(j) > j->ring_len / 2)
		j->need_ckpt(j->arg);
	return;

fail:
	ZL_LOG_ERR("storage", "journal record cannot be prepared: %s", zl_strerror(rc));
	j->st.broken = -ZL_ERR_IO;
	jw_fail_list(j->fill_first, j->st.broken);
	j->fill_first = j->fill_last = NULL;
}

static void jw_rec_done(struct zl_jw *j, int res)
{
	struct zl_jw_item *it;

	if (res < 0 && !j->fly_err)
		j->fly_err = res;
	if (--j->fly_sqes)
		return;
	it = j->fly;
	j->fly = NULL;
	if (j->fly_err && j->st.broken) {
		/* Fenced (zl_jw_fence) while it flew: the waiting items are
		 * failed already. */
		jw_fail_list(it, j->st.broken);
		return;
	}
	if (j->fly_err) {
		struct zl_jw_item *w = j->wait_first;

		ZL_LOG_ERR("storage",
			   "journal write failed: %s (%s); writes to this daemon fail from "
			   "now on: replace the disk, or move the data dir aside so the cluster "
			   "rebuilds it",
			   zl_strerror(j->fly_err), j->path);
		j->st.broken = -ZL_ERR_IO;
		j->wait_first = j->wait_last = NULL;
		j->st.waiting = 0;
		jw_fail_list(it, j->st.broken);
		jw_fail_list(j->fill_first, j->st.broken);
		j->fill_first = j->fill_last = NULL;
		jw_fail_list(w, j->st.broken);
		return;
	}
	if (j->fly_has_pad)
		j->recs[j->fly_pad_seq % j->nrecs].durable = true;
	j->recs[j->fly_seq % j->nrecs].durable = true;
	while (it) {
		struct zl_jw_item *next = it->next;

		it->seq = j->fly_seq;
		j->st.items++;
		it->done(it, 0);
		it = next;
	}
	jw_flush(j);
}

static void jw_sb_done(struct zl_jw *j, int res)
{
	void (*done)(void *, int) = j->sb_done;
	int err = res == (int)BLK ? 0 : res < 0 ? res : -EIO;

	j->sb_inflight = false;
	if (!err) {
		j->sb = j->sb_next;
		j->slot ^= 1;
		j->tail_seq = j->sb.ckpt_seq;
		j->tail_off = j->sb.ckpt_off;
		j->st.sb_writes++;
	} else {
		ZL_LOG_WARN("storage", "journal checkpoint write failed: %s (retried)",
			    zl_strerror(err));
	}
	done(j->sb_arg, err);
	jw_flush(j);
	jw_pull_waiters(j);
	if (!j->fly)
		jw_flush(j);
}

static void jw_efd_cb(void *arg, uint32_t events)
{
	struct zl_jw *j = arg;
	struct io_uring_cqe *cqe;

	(void)events;
	while (io_uring_peek_cqe(&j->ring, &cqe) == 0) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&j->ring, cqe);
		if (tag == TAG_SB)
			jw_sb_done(j, res);
		else
			jw_rec_done(j, res);
	}
}

void zl_jw_applied(struct zl_jw *j, uint64_t seq)
{
	struct jw_rec *r = &j->recs[seq % j->nrecs];

	if (r->outstanding)
		r->outstanding--;
}

bool zl_jw_ckpt_target(struct zl_jw *j, uint64_t *seq)
{
	while (j->aseq < j->next_seq) {
		const struct jw_rec *r = &j->recs[j->aseq % j->nrecs];

		if (!r->durable || r->outstanding)
			break;
		j->aseq++;
	}
	*seq = j->aseq;
	return j->aseq != j->tail_seq && !j->sb_inflight;
}

void zl_jw_ckpt_commit(struct zl_jw *j, uint64_t seq, void (*done)(void *arg, int err), void *arg)
{
	struct io_uring_sqe *sqe;
	int rc;

	j->sb_next = j->sb;
	j->sb_next.sb_seq++;
	j->sb_next.ckpt_seq = seq;
	j->sb_next.ckpt_off = seq < j->next_seq ? j->recs[seq % j->nrecs].off : j->head;
	rc = zl_journal_sb_encode(&j->sb_next, j->sbbuf);
	sqe = rc ? NULL : io_uring_get_sqe(&j->ring);
	if (!sqe) {
		done(arg, rc ? rc : -ZL_ERR_BUSY);
		return;
	}
	io_uring_prep_write(sqe, j->fd, j->sbbuf, BLK, (uint64_t)(j->slot ^ 1) * BLK);
	sqe->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(sqe, TAG_SB);
	j->sb_inflight = true;
	j->sb_done = done;
	j->sb_arg = arg;
	io_uring_submit(&j->ring);
}

bool zl_jw_busy(const struct zl_jw *j)
{
	return j->fly || j->fill_first || j->wait_first || j->sb_inflight;
}

void zl_jw_stats(const struct zl_jw *j, struct zl_jw_stats *st)
{
	*st = j->st;
	st->used = jw_used(j);
	st->next_seq = j->next_seq;
	st->ckpt_seq = j->tail_seq;
	zl_storage_uring_use(&j->ring, &st->uring);
}

void zl_jw_fence(struct zl_jw *j, int err)
{
	struct zl_jw_item *fill, *w;

	if (!j || j->st.broken)
		return;
	fill = j->fill_first;
	w = j->wait_first;
	j->st.broken = err;
	/* The record in flight is not vouched for either: its items fail
	 * when it ends. */
	if (j->fly && !j->fly_err)
		j->fly_err = err;
	j->fill_first = j->fill_last = NULL;
	j->fill_items = 0;
	zl_journal_builder_init(&j->b, j->buf[j->fill], j->cap);
	j->wait_first = j->wait_last = NULL;
	j->st.waiting = 0;
	jw_fail_list(fill, err);
	jw_fail_list(w, err);
}
