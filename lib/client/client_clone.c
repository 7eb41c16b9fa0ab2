/* Clones (docs/SNAPSHOTS.md §4) in the volume client: a volume whose record
 * names a parent {vol, seq} sends its reads and writes of chunks the parent
 * covers with ZL_WF_ABSENT. A chunk the clone never held is answered
 * ABSENT: a read then reads the parent volume at snapshot seq (through the
 * parent's own handle, opened with the clone, itself a clone maybe: the
 * chain is bounded); a write first copies the parent's whole chunk up
 * (WRITE + ZL_WF_CREATE, applied only where the chunk is still absent) and
 * is then sent again. zl_vol_flatten copies up every chunk still absent
 * and clears the parent. Everything here runs on the client's loop thread,
 * except zl_vol_flatten, which runs the loop itself (like zl_vol_read). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "client_internal.h"
#include "lib/meta/meta.h"

/* Chunks zl_vol_flatten probes at once. */
#define CLONE_FLATTEN_WINDOW 8
/* Retry of a parent read refused BUSY (the parent's I/O slots are full). */
#define CLONE_BUSY_MS 2

int client_clone_open(struct zl_vol *v, uint32_t depth)
{
	int rc;

	if (!v->meta.parent_vol[0])
		return 0;
	if (depth + 1 > CLIENT_CLONE_DEPTH) {
		ZL_LOG_ERR(CLIENT_LOG,
			   "vol=%s is a clone %u levels deep (at most %u): flatten one of its "
			   "parents (zl volume flatten NAME)",
			   v->meta.id, depth + 1, CLIENT_CLONE_DEPTH);
		return -ZL_ERR_RANGE;
	}
	rc = client_vol_open_depth(v->c, v->meta.parent_vol, depth + 1, &v->parent);
	if (rc)
		ZL_LOG_ERR(CLIENT_LOG, "cannot open vol=%s, the parent of clone vol=%s: %s",
			   v->meta.parent_vol, v->meta.id, zl_strerror(rc));
	return rc;
}

/* The parent covers chunk: v is (still) a clone and the chunk starts
 * inside the parent (a larger clone's chunks beyond it are its own). */
static bool clone_covers(const struct zl_vol *v, uint64_t chunk)
{
	return v->parent && v->meta.parent_vol[0] &&
	       chunk * v->meta.chunk_size < v->parent->meta.size;
}

uint8_t client_clone_flags_of(const struct client_sub *s)
{
	if (s->clone != CLONE_NONE || !s->io)
		return 0;
	if (s->op != ZL_OP_READ && s->op != ZL_OP_WRITE && s->op != ZL_OP_DISCARD &&
	    s->op != ZL_OP_WRITE_ZEROES)
		return 0;
	return clone_covers(s->vol, s->chunk) ? ZL_WF_ABSENT : 0;
}

void client_clone_drop_of(struct client_sub *s)
{
	if (s->cbuf)
		zl_vol_buf_free(s->vol, s->cbuf);
	s->cbuf = NULL;
	s->clone = CLONE_NONE;
	s->copyups = 0;
}

/* Back to the request the copy-up stood in for. */
static void clone_restore(struct client_sub *s)
{
	if (s->clone == CLONE_CREATE) {
		s->op = s->orig_op;
		s->flags = s->orig_flags;
		s->offset = s->orig_offset;
		s->length = s->orig_length;
		s->buf = s->orig_buf;
	}
	if (s->cbuf)
		zl_vol_buf_free(s->vol, s->cbuf);
	s->cbuf = NULL;
	s->clone = CLONE_NONE;
}

static bool clone_all_zero(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static void clone_parent_done(void *arg, int status)
{
	struct client_sub *s = arg;
	struct zl_vol *v = s->vol;
	uint32_t cs = v->meta.chunk_size;

	if (v->closing || !s->io) {
		/* The clone is closing (its parent closes first): its own
		 * close ends the user I/O. */
		client_clone_drop(s);
		s->state = SUB_FREE;
		return;
	}
	s->state = SUB_IDLE;
	if (status) {
		client_sub_done(s, status);
		return;
	}
	if (s->clone == CLONE_READ) {
		s->clone = CLONE_NONE;
		client_sub_done(s, 0);
		return;
	}
	/* CLONE_COPY: flatten leaves a chunk of zeros absent (it reads as
	 * zeros once the clone has no parent); anything else is copied up. */
	if (s->io->copyup && clone_all_zero(s->cbuf, cs)) {
		clone_restore(s);
		client_sub_done(s, 0);
		return;
	}
	s->orig_op = s->op;
	s->orig_flags = s->flags;
	s->orig_offset = s->offset;
	s->orig_length = s->length;
	s->orig_buf = s->buf;
	s->op = ZL_OP_WRITE;
	s->flags = ZL_WF_CREATE | (s->orig_flags & ZL_WF_FUA);
	s->offset = 0;
	s->length = cs;
	s->buf = s->cbuf;
	s->clone = CLONE_CREATE;
	client_sub_send(s);
}

/* Reads [pos, pos + len) of the parent at the clone's parent_seq into buf;
 * what lies beyond the parent's end reads as zeros. */
static void clone_parent_read(struct client_sub *s, char *buf, uint64_t pos, uint32_t len)
{
	struct zl_vol *v = s->vol;
	uint64_t psize = v->parent->meta.size;
	uint32_t n = pos >= psize ? 0 : (uint32_t)ZL_MIN((uint64_t)len, psize - pos);
	int rc;

	memset(buf + n, 0, len - n);
	if (!n) {
		clone_parent_done(s, 0);
		return;
	}
	s->state = SUB_PARENT;
	rc = zl_vol_aio_read_snap(v->parent, v->meta.parent_seq, buf, pos, n, clone_parent_done,
				  s);
	if (rc == -ZL_ERR_BUSY) {
		/* The parent's slots are full: ask again shortly (the sub
		 * comes back here through its ABSENT answer). */
		s->state = SUB_IDLE;
		if (s->clone == CLONE_COPY) {
			clone_restore(s);
			s->copyups--; /* not a copy that failed */
		} else {
			s->clone = CLONE_NONE;
		}
		client_sub_result_later(s, -ZL_ERR_ABSENT, CLONE_BUSY_MS);
		return;
	}
	if (rc) {
		s->state = SUB_IDLE;
		client_sub_done(s, rc);
	}
}

bool client_clone_result_of(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	uint64_t pos = s->chunk * v->meta.chunk_size;

	if (s->clone == CLONE_CREATE) {
		if (err && err != -ZL_ERR_EXISTS)
			return false; /* retried (or failed) like any write */
		if (!err)
			v->stats.copyups++;
		else
			v->stats.copyup_races++;
		clone_restore(s);
		if (s->io->copyup)
			client_sub_done(s, 0);
		else
			client_sub_send(s); /* the write itself, on the chunk now held */
		return true;
	}
	if (err != -ZL_ERR_ABSENT || s->clone != CLONE_NONE)
		return false;
	if (!clone_covers(v, s->chunk)) {
		/* Flattened since it was sent: the chunk is the clone's own. */
		client_sub_send(s);
		return true;
	}
	if (s->op == ZL_OP_READ && !s->io->copyup) {
		s->clone = CLONE_READ;
		clone_parent_read(s, s->buf, pos + s->offset, s->length);
		return true;
	}
	if (++s->copyups > CLIENT_CLONE_COPYUPS) {
		ZL_LOG_ERR(CLIENT_LOG,
			   "vol=%s chunk=%" PRIu64 " is still absent after %u copies from its "
			   "parent: giving up the %s",
			   v->meta.id, s->chunk, CLIENT_CLONE_COPYUPS, zl_wire_op_name(s->op));
		client_sub_done(s, -ZL_ERR_ABSENT);
		return true;
	}
	s->cbuf = zl_vol_buf_alloc(v, v->meta.chunk_size);
	if (!s->cbuf) {
		s->copyups--;
		client_sub_result_later(s, -ZL_ERR_ABSENT, CLONE_BUSY_MS);
		return true;
	}
	s->clone = CLONE_COPY;
	clone_parent_read(s, s->cbuf, pos, v->meta.chunk_size);
	return true;
}

/* ---- flatten ---- */

struct clone_flat;

struct clone_probe {
	struct clone_flat *f;
	void *buf;
	bool busy;
};

struct clone_flat {
	uint64_t done;
	int err;
	struct clone_probe probes[CLONE_FLATTEN_WINDOW];
};

static void clone_probe_done(void *arg, int status)
{
	struct clone_probe *p = arg;

	p->busy = false;
	p->f->done++;
	if (status && !p->f->err)
		p->f->err = status;
}

/* The rate of a flatten: a token bucket of bytes, filled at rate_bps up to
 * one second's worth (one chunk at least). A probe may copy a whole chunk,
 * so one is sent only while the bucket holds a chunk for it and for every
 * probe in flight; the copies made are taken out as they happen. */
struct clone_rate {
	uint64_t rate_bps, cap, last_ms, copied;
	int64_t tokens;
};

static void clone_rate_init(struct clone_rate *r, uint64_t rate_bps, uint32_t cs,
			    uint64_t copied)
{
	r->rate_bps = rate_bps;
	r->cap = ZL_MAX(rate_bps, (uint64_t)cs);
	r->tokens = cs;
	r->last_ms = zl_now_ms();
	r->copied = copied;
}

/* 0 when a probe may go now with inflight others out, else the ms to
 * wait. */
static uint32_t clone_rate_wait(struct clone_rate *r, uint64_t copied, uint32_t inflight,
				uint32_t cs)
{
	uint64_t now = zl_now_ms();
	int64_t need;

	if (!r->rate_bps)
		return 0;
	r->tokens -= (int64_t)((copied - r->copied) * cs);
	r->copied = copied;
	r->tokens = ZL_MIN(r->tokens + (int64_t)(r->rate_bps * (now - r->last_ms) / 1000),
			   (int64_t)r->cap);
	r->last_ms = now;
	need = (int64_t)(inflight + 1) * cs - r->tokens;
	if (need <= 0)
		return 0;
	return (uint32_t)ZL_MIN((uint64_t)need * 1000 / r->rate_bps + 1, 100);
}

int zl_vol_flatten(struct zl_vol *v, const struct zl_flatten_opts *o)
{
	static const struct zl_flatten_opts none;
	struct clone_flat f = {0};
	struct clone_rate rate;
	uint64_t total = 0, next = 0, last_ms;
	struct zl_client *c;
	int rc = 0;

	if (!v)
		return -ZL_ERR_INVAL;
	if (!o)
		o = &none;
	c = v->c;
	if (v->parent && v->meta.parent_vol[0]) {
		uint64_t cs = v->meta.chunk_size;

		total = ZL_MIN((v->parent->meta.size + cs - 1) / cs, (v->meta.size + cs - 1) / cs);
	}
	clone_rate_init(&rate, o->rate_bps, v->meta.chunk_size, v->stats.copyups);
	last_ms = zl_now_ms();
	for (int i = 0; i < CLONE_FLATTEN_WINDOW && total; i++) {
		f.probes[i].f = &f;
		f.probes[i].buf = zl_vol_buf_alloc(v, ZL_BLOCK_SIZE);
		if (!f.probes[i].buf) {
			rc = -ENOMEM;
			goto out_bufs;
		}
	}
	while (f.done < total && !f.err) {
		uint32_t inflight = (uint32_t)(next - f.done), wait = 100;

		for (int i = 0; i < CLONE_FLATTEN_WINDOW && next < total && !f.err; i++) {
			struct clone_probe *p = &f.probes[i];

			if (p->busy)
				continue;
			wait = clone_rate_wait(&rate, v->stats.copyups, inflight,
					       v->meta.chunk_size);
			if (wait)
				break;
			wait = 100;
			rc = client_vol_submit_copyup(v, next, p->buf, clone_probe_done, p);
			if (rc == -ZL_ERR_BUSY)
				break;
			if (rc) {
				f.err = rc;
				break;
			}
			p->busy = true;
			next++;
			inflight++;
		}
		zl_loop_run_once(c->loop, (int)wait);
		if (o->progress && zl_now_ms() - last_ms >= 1000) {
			last_ms = zl_now_ms();
			rc = o->progress(o->arg, f.done, total, v->stats.copyups);
			if (rc && !f.err)
				f.err = rc;
		}
	}
	/* What is in flight ends before its buffers go. */
	for (int i = 0; i < CLONE_FLATTEN_WINDOW; i++)
		while (f.probes[i].busy)
			zl_loop_run_once(c->loop, 100);
	rc = f.err;
	if (o->progress && !rc)
		(void)o->progress(o->arg, f.done, total, v->stats.copyups);
out_bufs:
	for (int i = 0; i < CLONE_FLATTEN_WINDOW; i++)
		if (f.probes[i].buf)
			zl_vol_buf_free(v, f.probes[i].buf);
	if (rc) {
		ZL_LOG_ERR(CLIENT_LOG, "flatten of vol=%s stopped after %" PRIu64 " of %" PRIu64
			   " chunks: %s", v->meta.id, f.done, total, zl_strerror(rc));
		return rc;
	}
	rc = zl_meta_clone_detach(c->etcd, c->prefix, v->meta.id, NULL);
	if (rc)
		return rc;
	/* The record watch brings the same; writes stop asking for absent
	 * chunks now. */
	v->meta.parent_vol[0] = '\0';
	v->meta.parent_seq = 0;
	return 0;
}
