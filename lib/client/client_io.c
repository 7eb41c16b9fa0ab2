/* Volume handles and the I/O engine of the volume client.
 *
 * A user I/O (client_io) is split into sub-requests (client_sub) from the
 * volume's preallocated pools; when the sub pool runs dry the I/O waits in
 * vol->split_wait and goes on as subs come back. Every sub carries its own
 * target and retry state:
 *
 *   start -> send -> SENT --reply--> result: DONE | FAIL       -> done
 *                                            REPORT (heal)      -> report, TIMER
 *                                            FAILOVER (heal)    -> report, READ
 *                                                                  ANY elsewhere
 *                                            FAILOVER (legacy)  -> next replica
 *                                            PROMOTE (legacy)   -> slice_drop, retry
 *                                            RELOAD | RETRY     -> TIMER -> send
 *
 * Heal mode (the default, c->legacy_drop false): every op goes to the row's
 * primary, classification is zl_client_classify_heal, there is no attempt
 * budget, and the time budget is io_timeout from the submit of the user I/O
 * (io->start_ns); REPORT puts one failure report per (slice, peer,
 * slice_ver) (v->reported) and retries with a placement reload. A READ the
 * primary answers CORRUPT or IO (its copy is bad) is read around it: one
 * failure report "CORRUPT"/"IO" about the primary per (slice, peer,
 * slice_ver), then the same range from each other IN_SYNC member of that row
 * in turn with READ + ZL_WF_ANY (served from the member's own, CRC-checked
 * copy) until one answers; when none does, the read fails with the
 * primary's error. The client writes nothing back: repairing the bad copy is
 * the storage's scrub (zl volume scrub). Nothing here changes a row in heal
 * mode. Legacy mode is the 0.1 engine unchanged.
 *
 * Results, retries and completions always run from loop callbacks (reply,
 * timer, defer), never inside a submit call; waiting is timers on the loop,
 * never a sleep. The user callback runs when every sub of the I/O is done,
 * with the first error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client_internal.h"

#define ETCD_QUIET_NS  (200ull * 1000000ull) /* after a failed etcd call */
#define NODES_FRESH_NS (50ull * 1000000ull)  /* node list younger than this is reused */
#define TIMEOUT_LOG_NS (10ull * 1000000000ull)  /* heal: "waited" lines per slice */
#define RELOAD_FRESH_NS (50ull * 1000000ull) /* heal: a record younger than this is reused */

static void sub_send(struct client_sub *s);
static void sub_done(struct client_sub *s, int err);
static void vol_reload_soon(struct zl_vol *v);

/* ---- placement ---- */

/* Points vol->slice_nodes at the node objects of v->meta's placement, asking
 * etcd for the node list when a replica node is unknown and `refresh` (the
 * blocking paths: open, legacy promotion; a reload listed them on the
 * worker). */
static int vol_bind_nodes(struct zl_vol *v, bool refresh)
{
	struct zl_client *c = v->c;
	const struct zl_volume *m = &v->meta;
	bool missing = false;
	int rc = 0;

	for (uint32_t s = 0; s < m->n_slices && !missing; s++)
		for (unsigned r = 0; r < m->slices[s].n && r < ZL_MAX_REPLICAS; r++)
			if (!client_node_find(c, m->slices[s].nodes[r]))
				missing = true;
	if (missing && refresh)
		client_nodes_refresh(c);
	for (uint32_t s = 0; s < m->n_slices; s++) {
		for (unsigned r = 0; r < ZL_MAX_REPLICAS; r++) {
			struct client_node *n = NULL;

			if (r < m->slices[s].n) {
				n = client_node_get_or_add(c, m->slices[s].nodes[r], v->sel);
				if (!n)
					rc = -ENOMEM;
			}
			v->slice_nodes[s * ZL_MAX_REPLICAS + r] = n;
		}
	}
	return rc;
}

/* Replaces the volume record with fresh (consumed). */
static int vol_install(struct zl_vol *v, struct zl_volume *fresh, bool refresh)
{
	if (fresh->num != v->meta.num || fresh->chunk_size != v->meta.chunk_size ||
	    fresh->n_slices != v->meta.n_slices || !fresh->slices) {
		ZL_LOG_ERR(CLIENT_LOG,
			   "volume record changed shape under an open volume, keeping the old "
			   "one: vol=%s chunk_size=%u->%u slices=%u->%u; reopen the volume",
			   v->meta.id, v->meta.chunk_size, fresh->chunk_size, v->meta.n_slices,
			   fresh->n_slices);
		zl_volume_fini(fresh);
		return -ZL_ERR_PROTO;
	}
	zl_volume_fini(&v->meta);
	v->meta = *fresh;
	memset(fresh, 0, sizeof(*fresh));
	client_vol_snap_switch(v, v->meta.snap_seq);
	v->reload_seq++;
	client_qos_apply(v);
	return vol_bind_nodes(v, refresh);
}

static bool etcd_quiet(struct zl_client *c)
{
	return c->etcd_fail_ns && zl_now_ns() - c->etcd_fail_ns < ETCD_QUIET_NS;
}

/* Worker thread: the volume record and, when asked, the node list. */
static void vol_reload_run(struct zl_work *w)
{
	struct zl_vol *v = ZL_CONTAINER_OF(w, struct zl_vol, reload_w);
	struct zl_client *c = v->c;

	memset(&v->reload_fresh, 0, sizeof(v->reload_fresh));
	v->reload_list = NULL;
	v->reload_n = 0;
	v->reload_nodes_rc = 0;
	v->reload_rc = zl_meta_volume_get(c->etcd, c->prefix, v->reload_vid, &v->reload_fresh);
	if (v->reload_rc) {
		ZL_LOG_WARN(CLIENT_LOG, "cannot reload volume record: vol=%s err=%s detail=%s",
			    v->reload_vid, zl_strerror(v->reload_rc), zl_etcd_last_error());
		return;
	}
	if (!v->reload_nodes)
		return;
	v->reload_nodes_rc = zl_meta_node_list(c->etcd, c->prefix, &v->reload_list, &v->reload_n);
	if (v->reload_nodes_rc)
		ZL_LOG_WARN(CLIENT_LOG, "cannot list storage nodes from etcd: err=%s detail=%s",
			    zl_strerror(v->reload_nodes_rc), zl_etcd_last_error());
}

/* Frees v if it was closed and nothing of it is left in flight. */
static void vol_maybe_free(struct zl_vol *v)
{
	if (v->closing && !v->inflight_reqs && !v->reload_w.busy && !v->reload_applying &&
	    !v->c->destroying) {
		client_list_del(&v->link);
		client_vol_free(v);
	}
}

/* Loop thread: installs what the worker read, then sends the subs that
 * waited for it (or ends them: the volume was deleted). */
static void vol_reload_done(struct zl_work *w)
{
	struct zl_vol *v = ZL_CONTAINER_OF(w, struct zl_vol, reload_w);
	struct zl_client *c = v->c;
	int rc = w->cancelled ? -ZL_ERR_ETCD : v->reload_rc;
	struct client_list *l;

	if (!v->closing && !rc) {
		if (v->reload_nodes && !v->reload_nodes_rc &&
		    !client_nodes_apply(c, v->reload_list, v->reload_n))
			c->nodes_loaded_ns = zl_now_ns();
		else if (v->reload_nodes)
			c->etcd_fail_ns = zl_now_ns();
		v->stats.placement_reloads++;
		v->reloaded_ns = zl_now_ns();
		vol_install(v, &v->reload_fresh, false);
	} else if (!v->closing && rc != -ZL_ERR_NOT_FOUND) {
		c->etcd_fail_ns = zl_now_ns();
	}
	zl_volume_fini(&v->reload_fresh);
	free(v->reload_list);
	v->reload_list = NULL;
	v->reload_n = 0;
	if (v->watch_again && !v->closing) {
		/* The record changed again while this reload read it. */
		v->watch_again = false;
		vol_reload_soon(v);
	}
	/* A user callback may close the volume: it stays until this ends. */
	v->reload_applying = true;
	while ((l = client_list_pop(&v->reload_wait))) {
		struct client_sub *s = ZL_CONTAINER_OF(l, struct client_sub, link);

		s->state = SUB_IDLE;
		if (rc == -ZL_ERR_NOT_FOUND) {
			ZL_LOG_ERR(CLIENT_LOG, "volume deleted under I/O: vol=%s", v->meta.id);
			sub_done(s, -ZL_ERR_NOT_FOUND);
		} else {
			sub_send(s);
		}
	}
	v->reload_applying = false;
	vol_maybe_free(v);
}

/* Starts a reload of the volume record (and of the node list when it is
 * older than NODES_FRESH_NS: a burst of reloads lists nodes once) on the
 * worker. 0 when one is on its way (started now or before), -ZL_ERR_ETCD
 * when etcd failed lately. */
static int vol_reload_start(struct zl_vol *v)
{
	struct zl_client *c = v->c;
	uint64_t now = zl_now_ns();

	if (v->reload_w.busy)
		return 0;
	if (etcd_quiet(c))
		return -ZL_ERR_ETCD;
	snprintf(v->reload_vid, sizeof(v->reload_vid), "%s", v->meta.id);
	v->reload_nodes = now - c->nodes_loaded_ns >= NODES_FRESH_NS;
	if (v->reload_nodes)
		c->nodes_loaded_ns = now;
	return zl_worker_submit(c->worker, &v->reload_w, vol_reload_run, vol_reload_done);
}

static void vol_reload_defer_cb(void *arg)
{
	struct zl_vol *v = arg;

	v->reload_soon = false;
	vol_reload_start(v);
}

static void vol_reload_soon(struct zl_vol *v)
{
	if (v->reload_soon)
		return;
	v->reload_soon = true;
	zl_loop_defer(v->c->loop, &v->reload_defer, vol_reload_defer_cb, v);
}

/* ---- the watch of the volume record ---- */

#define WATCH_RETRY_MS 250u /* a reload refused while etcd was failing */

static void vol_watch_changed(void *arg);

static void vol_watch_retry_cb(void *arg)
{
	struct zl_vol *v = arg;

	v->watch_retry_on = false;
	vol_watch_changed(v);
}

/* Loop thread: the record changed (limits, io_timeout, placement): read it
 * again; one reload on its way reads it again once it is done. */
static void vol_watch_changed(void *arg)
{
	struct zl_vol *v = arg;

	if (v->closing)
		return;
	if (v->reload_w.busy) {
		v->watch_again = true;
		return;
	}
	if (vol_reload_start(v) && !v->watch_retry_on) {
		v->watch_retry_on = true;
		zl_timer_start(v->c->loop, &v->watch_retry, WATCH_RETRY_MS, 0, vol_watch_retry_cb,
			       v);
	}
}

/* The watch's thread: hands the event to the loop. */
static void vol_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	struct zl_vol *v = arg;

	(void)kv;
	/* A put reloads the record; so does the end of a listing after a
	 * compaction (the watch was away: a change may have been lost). */
	if (type == ZL_ETCD_EV_PUT || type == ZL_ETCD_EV_RESYNC_END)
		zl_notify_post(&v->watch_notify);
}

/* Watches <prefix>volumes/<id> from the revision after the one read at
 * open, so no change in between is missed. Without it the volume works
 * as before, its limits as of open (logged). */
static void vol_watch_start(struct zl_vol *v)
{
	struct zl_client *c = v->c;
	char key[256];
	int rc;

	rc = zl_notify_init(&v->watch_notify, c->loop, vol_watch_changed, v);
	if (!rc)
		rc = zl_meta_key(key, sizeof(key), c->prefix, "volumes", v->meta.id);
	if (!rc)
		rc = zl_etcd_watch_prefix(c->etcd, key, v->meta.mod_rev + 1, vol_watch_cb, v,
					  &v->watch);
	if (rc) {
		ZL_LOG_WARN(CLIENT_LOG,
			    "cannot watch the volume record: vol=%s err=%s; its limits and "
			    "io_timeout stay as of now until it is reopened",
			    v->meta.id, zl_strerror(rc));
		v->watch = NULL;
	}
}

static void vol_watch_stop(struct zl_vol *v)
{
	zl_etcd_watch_cancel(v->watch);
	v->watch = NULL;
	zl_notify_fini(&v->watch_notify);
	if (v->watch_retry_on)
		zl_timer_stop(v->c->loop, &v->watch_retry);
	v->watch_retry_on = false;
}

uint32_t client_vol_io_timeout_s(const struct zl_vol *v)
{
	return v->meta.io_timeout_s ? v->meta.io_timeout_s : v->c->io_timeout_s;
}

/* ---- user I/O ---- */

static uint64_t io_total(const struct client_io *io)
{
	return io->op == ZL_OP_FLUSH ? io->vol->meta.n_slices : io->len;
}

static void io_maybe_complete(struct client_io *io)
{
	struct zl_vol *v = io->vol;
	zl_io_cb cb;
	void *arg;
	int status;

	if (io->outstanding || (!io->status && io->split_done < io_total(io)))
		return;
	if (client_list_linked(&io->link))
		client_list_del(&io->link);
	status = io->status;
	if (io->op == ZL_OP_READ) {
		v->stats.reads++;
		if (!status)
			v->stats.read_bytes += io->len;
	} else if (io->op == ZL_OP_WRITE) {
		v->stats.writes++;
		if (!status)
			v->stats.write_bytes += io->len;
	}
	zl_metrics_hist_add(&v->stats.lat[io->op == ZL_OP_READ	  ? 0
					  : io->op == ZL_OP_FLUSH ? 2
								  : 1],
			    zl_now_ns() - io->start_ns);
	cb = io->cb;
	arg = io->arg;
	io->active = false;
	io->cb = NULL;
	client_list_add_tail(&v->free_ios, &io->link);
	/* Last: the callback may submit, or close the volume. */
	cb(arg, status);
}

static void io_defer_cb(void *arg)
{
	io_maybe_complete(arg);
}

/* FLUSH goes once to every node that is primary of some slice: slice s gets
 * a sub only if no earlier slice has the same primary node. */
static bool flush_slice_is_first(const struct zl_vol *v, uint32_t s)
{
	const struct zl_slice *sl = v->meta.slices;
	int p = zl_slice_primary(&sl[s]);
	const struct client_node *pn = p >= 0 ? v->slice_nodes[s * ZL_MAX_REPLICAS + p] : NULL;

	for (uint32_t i = 0; i < s; i++) {
		int q = zl_slice_primary(&sl[i]);

		if (p < 0 && q < 0)
			return false;
		if (p >= 0 && q >= 0 && v->slice_nodes[i * ZL_MAX_REPLICAS + q] == pn)
			return false;
	}
	return true;
}

static void sub_start(struct client_sub *s)
{
	struct zl_client *c = s->vol->c;

	s->attempts = 0;
	s->tried = 0;
	s->any = false;
	s->any_err = 0;
	s->any_ver = 0;
	s->bad_data = 0;
	s->need_reload = false;
	s->pending_err = 0;
	s->last_err = 0;
	if (c->legacy_drop)
		s->deadline_ns = zl_now_ns() + (uint64_t)CLIENT_MAX_IO_MS * 1000000ull;
	else /* counted from the submit of the user I/O, not of this piece */
		s->deadline_ns =
		    s->io->start_ns + (uint64_t)client_vol_io_timeout_s(s->vol) * 1000000000ull;
	sub_send(s);
}

/* Cuts as many subs out of io as the pool allows. Leaves io in split_wait
 * when the pool ran dry, removes it when splitting is over. */
static void io_split(struct client_io *io)
{
	struct zl_vol *v = io->vol;
	uint64_t total = io_total(io);

	while (!io->status && io->split_done < total) {
		struct zl_client_extent e = {0};
		struct client_list *l;
		struct client_sub *s;

		if (io->op == ZL_OP_FLUSH && !flush_slice_is_first(v, (uint32_t)io->split_done)) {
			io->split_done++;
			continue;
		}
		l = client_list_pop(&v->free_subs);
		if (!l) {
			if (!client_list_linked(&io->link))
				client_list_add_tail(&v->split_wait, &io->link);
			return;
		}
		s = ZL_CONTAINER_OF(l, struct client_sub, link);
		s->io = io;
		s->op = io->op;
		s->flags = io->fua ? ZL_WF_FUA : 0;
		s->state = SUB_IDLE;
		if (io->op == ZL_OP_FLUSH) {
			s->chunk = io->split_done;
			s->slice = (uint32_t)io->split_done;
			s->offset = 0;
			s->length = 0;
			s->buf = NULL;
			io->split_done++;
		} else {
			zl_client_split_next(io->off, io->len, io->split_done, v->meta.chunk_size,
					     ZL_WIRE_MAX_IO, &e);
			s->chunk = e.chunk;
			s->slice = zl_volume_slice_of(&v->meta, e.chunk);
			s->offset = e.offset;
			s->length = e.length;
			s->buf = io->buf ? io->buf + e.pos : NULL;
			io->split_done += e.length;
		}
		io->outstanding++;
		sub_start(s);
	}
	if (client_list_linked(&io->link))
		client_list_del(&io->link);
}

static void vol_split_resume(struct zl_vol *v)
{
	while (!client_list_empty(&v->split_wait) && !client_list_empty(&v->free_subs)) {
		struct client_io *io = ZL_CONTAINER_OF(v->split_wait.next, struct client_io, link);

		io_split(io);
		if (client_list_linked(&io->link))
			break;
	}
}

static int vol_submit_io(struct zl_vol *v, uint8_t op, uint32_t snap, bool copyup, void *buf,
			 uint64_t off, uint64_t len, bool fua, zl_io_cb cb, void *arg)
{
	struct client_list *l;
	struct client_io *io;
	int rc;

	if (!v || !cb || v->closing)
		return -ZL_ERR_INVAL;
	if (op != ZL_OP_FLUSH) {
		rc = zl_client_range_check(v->meta.size, off, len);
		if (rc)
			return rc;
		if ((op == ZL_OP_READ || op == ZL_OP_WRITE) && len && !buf)
			return -ZL_ERR_INVAL;
	}
	l = client_list_pop(&v->free_ios);
	if (!l)
		return -ZL_ERR_BUSY;
	io = ZL_CONTAINER_OF(l, struct client_io, link);
	io->active = true;
	io->op = op;
	io->fua = fua;
	io->status = 0;
	io->timeout_logged = false;
	io->start_ns = zl_now_ns();
	io->buf = buf;
	io->off = off;
	io->len = len;
	io->split_done = 0;
	io->snap = snap;
	io->copyup = copyup;
	io->outstanding = 0;
	io->cb = cb;
	io->arg = arg;
	if (io_total(io) == 0) {
		zl_loop_defer(v->c->loop, &io->defer, io_defer_cb, io);
		return 0;
	}
	if (client_qos_admit(v, io, io->start_ns))
		client_io_start(io);
	return 0;
}

static int vol_submit_snap(struct zl_vol *v, uint8_t op, uint32_t snap, void *buf, uint64_t off,
			   uint64_t len, bool fua, zl_io_cb cb, void *arg)
{
	return vol_submit_io(v, op, snap, false, buf, off, len, fua, cb, arg);
}

int client_vol_submit_copyup(struct zl_vol *v, uint64_t chunk, void *buf, zl_io_cb cb,
			     void *arg)
{
	return vol_submit_io(v, ZL_OP_READ, 0, true, buf, chunk * v->meta.chunk_size,
			     ZL_BLOCK_SIZE, false, cb, arg);
}

static int vol_submit(struct zl_vol *v, uint8_t op, void *buf, uint64_t off, uint64_t len, bool fua,
		      zl_io_cb cb, void *arg)
{
	return vol_submit_snap(v, op, 0, buf, off, len, fua, cb, arg);
}

void client_vol_snap_switch(struct zl_vol *v, uint32_t seq)
{
	if (seq > v->snap_seq) {
		ZL_LOG_INFO(CLIENT_LOG, "vol=%s writes carry snapshot sequence %u (was %u)",
			    v->meta.id, seq, v->snap_seq);
		v->snap_seq = seq;
		client_snap_publish(v, false);
	}
}

void client_vol_snap_hold(struct zl_vol *v)
{
	v->snap_hold = true;
	client_snap_publish(v, false);
}

void client_vol_snap_release(struct zl_vol *v, uint32_t seq)
{
	struct client_list held;

	client_vol_snap_switch(v, seq);
	v->snap_hold = false;
	client_snap_publish(v, true);
	/* The held I/O starts in its order; one that fails at once may run a
	 * user callback, so the list is taken first. */
	client_list_init(&held);
	while (!client_list_empty(&v->hold_wait)) {
		struct client_list *l = v->hold_wait.next;

		client_list_del(l);
		client_list_add_tail(&held, l);
	}
	while (!client_list_empty(&held) && !v->closing) {
		struct client_io *io = ZL_CONTAINER_OF(held.next, struct client_io, link);

		client_list_del(&io->link);
		client_io_start(io);
	}
}

void client_io_start(struct client_io *io)
{
	struct zl_vol *v = io->vol;

	if (io->op != ZL_OP_READ && io->op != ZL_OP_FLUSH && client_vol_held(v)) {
		client_list_add_tail(&v->hold_wait, &io->link);
		return;
	}
	if (!client_list_empty(&v->split_wait))
		client_list_add_tail(&v->split_wait, &io->link); /* keep FIFO order */
	else
		io_split(io);
}

/* ---- sub-requests ---- */

static void sub_timer_cb(void *arg);

static void sub_arm(struct client_sub *s, uint8_t what, uint32_t delay_ms)
{
	s->pending = what;
	s->state = SUB_TIMER;
	zl_timer_start(s->vol->c->loop, &s->timer, delay_ms, 0, sub_timer_cb, s);
}

void client_sub_fail_async(struct client_sub *s, int err)
{
	s->pending_err = err;
	s->pending_transport = true;
	sub_arm(s, PEND_RESULT, 0);
}

void client_sub_result_later(struct client_sub *s, int err, uint32_t delay_ms)
{
	s->pending_err = err;
	s->pending_transport = false;
	sub_arm(s, PEND_RESULT, delay_ms);
}

void client_sub_send(struct client_sub *s)
{
	sub_send(s);
}

void client_sub_done(struct client_sub *s, int err)
{
	sub_done(s, err);
}

static void sub_send(struct client_sub *s)
{
	struct zl_vol *v = s->vol;
	struct zl_client *c = v->c;
	const struct zl_slice *sl = &v->meta.slices[s->slice];
	struct client_node *n;
	uint32_t avoid = 0;
	/* Heal mode: reads go to the primary like writes, except around a
	 * bad copy of the primary (s->any). */
	bool rd = s->op == ZL_OP_READ && c->legacy_drop;
	int idx, rc;

	if (s->any && sl->version != s->any_ver) {
		/* The row moved while reading around a bad copy: its primary
		 * first again. */
		s->any = false;
		s->tried = 0;
	}
	if (v->fenced) {
		s->target = -1;
		s->pending_err = v->fence_err;
		s->pending_transport = false;
		sub_arm(s, PEND_RESULT, 0);
		return;
	}
	s->reload_seq = v->reload_seq;
	s->sent_ver = sl->version;
	if (rd || s->any) {
		uint64_t now = zl_loop_now_ns(c->loop);

		for (unsigned i = 0; i < sl->n && i < ZL_MAX_REPLICAS; i++) {
			n = v->slice_nodes[s->slice * ZL_MAX_REPLICAS + i];
			if (!n || client_node_is_down(n, now))
				avoid |= 1u << i;
		}
	}
	/* s->any: s->tried holds the primary, so this is another IN_SYNC one */
	idx = zl_client_pick_target(sl, rd || s->any, s->tried, avoid);
	if (idx < 0) {
		s->target = -1;
		/* No in-sync replica (heal: no primary) left to try: reload and
		 * start over. */
		s->pending_err = -ZL_ERR_UNAVAIL;
		s->pending_transport = false;
		sub_arm(s, PEND_RESULT, 0);
		return;
	}
	n = v->slice_nodes[s->slice * ZL_MAX_REPLICAS + idx];
	s->target = (int8_t)idx;
	s->node = n;
	memset(&s->hdr, 0, sizeof(s->hdr));
	s->hdr.opcode = s->op;
	s->hdr.flags = s->flags | (s->any ? ZL_WF_ANY : 0) | client_clone_flags(s);
	s->hdr.vol_id = v->meta.num;
	s->hdr.chunk = s->chunk;
	s->hdr.offset = s->offset;
	s->hdr.length = s->length;
	s->hdr.slice_ver = sl->version;
	s->hdr.epoch = v->epoch;
	/* Sent again after its data failed the CRCs it came with: the primary
	 * checks every block on disk (and repairs a bad copy it finds). */
	if (s->op == ZL_OP_READ && s->bad_data && !s->any)
		s->hdr.aux = ZL_READ_RECHECK;
	/* The sequence of now: a write resent after a switch (or a SNAPSEQ
	 * answer and reload) carries the new one. The flag is set per
	 * connection (client_node.c, conn_seq_set). */
	s->seq = s->op == ZL_OP_READ ? s->io->snap : s->op == ZL_OP_FLUSH ? 0 : client_vol_seq(v);
	rc = n ? client_node_submit(n, s) : -ZL_ERR_CONN;
	if (rc)
		client_sub_fail_async(s, rc);
}

static void sub_free(struct client_sub *s)
{
	client_clone_drop(s);
	s->io = NULL;
	s->node = NULL;
	s->state = SUB_FREE;
	client_list_add_tail(&s->vol->free_subs, &s->link);
}

static void sub_done(struct client_sub *s, int err)
{
	struct client_io *io = s->io;
	struct zl_vol *v = s->vol;

	if (err && !io->status)
		io->status = err;
	sub_free(s);
	io->outstanding--;
	vol_split_resume(v);
	io_maybe_complete(io); /* last: may run the user callback */
}

static const char *sub_node_id(const struct client_sub *s)
{
	return s->node ? s->node->id : "?";
}

/* Heal mode: io_timeout is spent. One error line per user I/O. */
static void sub_give_up_heal(struct client_sub *s, uint64_t t)
{
	struct zl_vol *v = s->vol;
	struct client_io *io = s->io;
	struct client_reported *rp = &v->reported[s->slice];
	int err = zl_client_heal_final_err(s->last_err);

	/* One line per I/O, and per slice at most every TIMEOUT_LOG_NS: the
	 * parallel I/Os of a stuck slice all end at about the same time. */
	if (!io->timeout_logged &&
	    (!rp->logged_ns || t - rp->logged_ns >= TIMEOUT_LOG_NS || t < rp->logged_ns)) {
		rp->logged_ns = t;
		io->timeout_logged = true;
		ZL_LOG_ERR(CLIENT_LOG,
			   "vol=%s slice=%u waited %llu s for an in-sync primary (last: %s, %s); "
			   "%s failed with %s: chunk=%llu primary=%s attempts=%u io_timeout=%u s; "
			   "check the storage nodes and the manager (zl status)",
			   v->meta.id, s->slice,
			   (unsigned long long)((t - io->start_ns + 500000000ull) / 1000000000ull),
			   zl_errname(s->last_err), zl_strerror(s->last_err),
			   zl_wire_op_name(s->op), zl_errname(err), (unsigned long long)s->chunk,
			   sub_node_id(s), s->attempts, client_vol_io_timeout_s(v));
	}
	sub_done(s, err);
}

/* Heal mode: another attempt after a backoff, until io_timeout. */
static void sub_retry_heal(struct client_sub *s, bool reload, bool now, int why)
{
	struct zl_vol *v = s->vol;
	uint64_t t = zl_now_ns();
	uint32_t delay;

	s->attempts++;
	v->stats.retries++;
	if (why) {
		s->last_err = why;
		v->last_retry_err = why;
		snprintf(v->last_retry_node, sizeof(v->last_retry_node), "%s", sub_node_id(s));
	}
	if (t >= s->deadline_ns) {
		sub_give_up_heal(s, t);
		return;
	}
	s->need_reload |= reload;
	delay = now ? 0 : zl_client_heal_backoff_ms(s->attempts);
	if (delay && t + (uint64_t)delay * 1000000ull > s->deadline_ns)
		delay = (uint32_t)((s->deadline_ns - t) / 1000000ull) + 1;
	sub_arm(s, PEND_SEND, delay);
}

/* Schedules another attempt; gives up with -ZL_ERR_UNAVAIL when the attempt
 * or time budget is spent (legacy), or after io_timeout (heal). */
static void sub_retry(struct client_sub *s, bool reload, bool now, int why)
{
	struct zl_vol *v = s->vol;
	uint64_t t = zl_now_ns();
	uint32_t delay;

	if (!v->c->legacy_drop) {
		sub_retry_heal(s, reload, now, why);
		return;
	}
	s->attempts++;
	v->stats.retries++;
	if (s->attempts >= CLIENT_MAX_ATTEMPTS || t >= s->deadline_ns) {
		ZL_LOG_ERR(CLIENT_LOG,
			   "giving up on request: vol=%s op=%s chunk=%llu slice=%u node=%s "
			   "attempts=%u last_err=%s; no replica of the slice could serve it",
			   v->meta.id, zl_wire_op_name(s->op), (unsigned long long)s->chunk,
			   s->slice, sub_node_id(s), s->attempts, zl_strerror(why));
		sub_done(s, -ZL_ERR_UNAVAIL);
		return;
	}
	s->need_reload |= reload;
	delay = now ? 0 : zl_client_backoff_ms(s->attempts);
	if (delay && t + (uint64_t)delay * 1000000ull > s->deadline_ns)
		delay = (uint32_t)((s->deadline_ns - t) / 1000000ull) + 1;
	sub_arm(s, PEND_SEND, delay);
}

/* A write-class request got no answer from the slice's primary: drop it from
 * the in-sync set (promoting the next replica) and retry there. */
static void sub_promote(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	struct zl_client *c = v->c;
	const struct zl_slice *sl = &v->meta.slices[s->slice];
	char node_id[ZL_NODE_ID_MAX];
	struct zl_volume fresh;
	int rc, np;

	if (sl->version != s->sent_ver || s->target < 0 || s->target >= sl->n ||
	    zl_slice_primary(sl) != s->target) {
		/* The row changed since we sent: someone already acted. */
		sub_retry(s, false, true, err);
		return;
	}
	if (etcd_quiet(c)) {
		sub_retry(s, false, false, err);
		return;
	}
	snprintf(node_id, sizeof(node_id), "%s", sl->nodes[s->target]);
	memset(&fresh, 0, sizeof(fresh));
	rc = zl_meta_slice_drop(c->etcd, c->prefix, v->meta.id, s->slice, node_id, s->sent_ver,
				&fresh);
	if (rc) {
		if (rc == -ZL_ERR_ETCD || rc == -ZL_ERR_TIMEOUT)
			c->etcd_fail_ns = zl_now_ns();
		ZL_LOG_WARN(CLIENT_LOG,
			    "cannot promote a new primary: vol=%s slice=%u node=%s version=%llu "
			    "io_err=%s err=%s",
			    v->meta.id, s->slice, node_id, (unsigned long long)s->sent_ver,
			    zl_strerror(err), zl_strerror(rc));
		sub_retry(s, true, false, err);
		return;
	}
	v->stats.promotions++;
	rc = vol_install(v, &fresh, true);
	sl = &v->meta.slices[s->slice];
	np = zl_slice_primary(sl);
	ZL_LOG_WARN(CLIENT_LOG,
		    "promoted new primary: vol=%s slice=%u dropped=%s new_primary=%s version=%llu "
		    "cause=%s",
		    v->meta.id, s->slice, node_id, np >= 0 ? sl->nodes[np] : "none",
		    (unsigned long long)sl->version, zl_strerror(err));
	sub_retry(s, rc != 0, true, err);
}

/* Heal mode: the primary gave no answer. Puts one failure report per (slice,
 * peer, slice_ver) for the manager, then reloads the placement and retries
 * after a backoff. The row is never changed here. */
static void sub_report(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	struct zl_client *c = v->c;
	const struct zl_slice *sl = &v->meta.slices[s->slice];
	struct client_reported *rp = &v->reported[s->slice];
	const char *peer;

	if (sl->version != s->sent_ver || s->target < 0 || s->target >= sl->n ||
	    s->target >= ZL_MAX_REPLICAS) {
		/* The row moved since we sent: try the new primary first. */
		sub_retry(s, false, true, err);
		return;
	}
	peer = sl->nodes[s->target];
	if ((rp->slice_ver != s->sent_ver || strcmp(rp->peer, peer) != 0) && !etcd_quiet(c)) {
		/* Reported once it is queued; a put that fails clears it. */
		if (!client_report_put(c, v, s->slice, peer, zl_client_report_error(err),
				       s->sent_ver)) {
			rp->slice_ver = s->sent_ver;
			snprintf(rp->peer, sizeof(rp->peer), "%s", peer);
		}
	}
	sub_retry(s, true, false, err);
}

/* Heal mode: the primary's copy of the range is bad (err CORRUPT or IO).
 * One failure report about it per (slice, peer, slice_ver), so that the
 * operator sees it (the manager leaves the row alone: one client's word). */
static void sub_report_bad_copy(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	struct zl_client *c = v->c;
	const struct zl_slice *sl = &v->meta.slices[s->slice];
	struct client_reported *rp = &v->reported[s->slice];
	const char *peer = sl->nodes[s->target];

	if ((rp->bad_ver == s->sent_ver && strcmp(rp->bad_peer, peer) == 0) || etcd_quiet(c))
		return;
	if (!client_report_put(c, v, s->slice, peer, zl_client_report_error(err), s->sent_ver)) {
		rp->bad_ver = s->sent_ver;
		snprintf(rp->bad_peer, sizeof(rp->bad_peer), "%s", peer);
	}
}

/* Heal mode, reading around a bad copy: the next IN_SYNC member after a
 * failed attempt (err), or the end with the primary's error. */
static void sub_any_next(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	const struct zl_slice *sl = &v->meta.slices[s->slice];

	if (sl->version == s->any_ver && zl_client_pick_target(sl, true, s->tried, 0) < 0) {
		ZL_LOG_ERR(CLIENT_LOG,
			   "read failed: vol=%s slice=%u chunk=%llu offset=%u length=%u: the "
			   "primary's copy is bad (%s) and no other in-sync member served it "
			   "(last: %s); see 'zl volume verify %s'",
			   v->meta.id, s->slice, (unsigned long long)s->chunk, s->offset, s->length,
			   zl_errname(s->any_err), zl_errname(err), v->meta.name);
		sub_done(s, s->any_err);
		return;
	}
	sub_retry(s, false, true, err);
}

/* Heal mode: the primary answered a READ with CORRUPT or IO. Reports it and
 * reads the range from the other IN_SYNC members, READ + ZL_WF_ANY. */
static void sub_read_around(struct client_sub *s, int err)
{
	struct zl_vol *v = s->vol;
	const struct zl_slice *sl = &v->meta.slices[s->slice];

	if (sl->version != s->sent_ver || s->target < 0 || s->target >= sl->n ||
	    s->target >= ZL_MAX_REPLICAS) {
		/* The row moved since we sent: ask its primary again. */
		sub_retry(s, false, true, err);
		return;
	}
	v->stats.failovers++;
	if (zl_ratelimit_ok(&v->rl, 10))
		ZL_LOG_WARN(CLIENT_LOG,
			    "bad copy on the primary: vol=%s slice=%u chunk=%llu node=%s err=%s; "
			    "reading the other in-sync members ('zl volume scrub %s' repairs it)",
			    v->meta.id, s->slice, (unsigned long long)s->chunk, sub_node_id(s),
			    zl_errname(err), v->meta.name);
	sub_report_bad_copy(s, err);
	s->any = true;
	s->any_err = err;
	s->any_ver = sl->version;
	s->tried = (uint8_t)(1u << s->target);
	sub_any_next(s, err);
}

/* Heal mode: the answer of a READ + ZL_WF_ANY around a bad primary copy. */
static void sub_result_any(struct client_sub *s, int err, uint64_t rep_ver, bool transport)
{
	struct zl_vol *v = s->vol;

	if (!err) {
		if (rep_ver > s->sent_ver)
			vol_reload_soon(v);
		sub_done(s, 0);
		return;
	}
	if (err == -ZL_ERR_BUSY && !transport) {
		sub_retry(s, false, false, err); /* the same member, after a backoff */
		return;
	}
	if (zl_ratelimit_ok(&v->rl, 10))
		ZL_LOG_WARN(CLIENT_LOG,
			    "read around a bad copy failed on one member: vol=%s slice=%u "
			    "chunk=%llu node=%s err=%s",
			    v->meta.id, s->slice, (unsigned long long)s->chunk, sub_node_id(s),
			    zl_errname(err));
	if (s->target >= 0 && s->target < ZL_MAX_REPLICAS)
		s->tried |= (uint8_t)(1u << s->target);
	sub_any_next(s, err);
}

void client_vol_refuse(struct zl_client *c, uint64_t vol_num, int err, const char *why)
{
	struct client_list *l;

	for (l = c->vols.next; l != &c->vols; l = l->next) {
		struct zl_vol *v = ZL_CONTAINER_OF(l, struct zl_vol, link);

		if ((vol_num && v->meta.num != vol_num) || v->fenced)
			continue;
		v->fenced = true;
		v->fence_err = err;
		snprintf(v->fence_why, sizeof(v->fence_why), "%s", why);
		if (err == -ZL_ERR_STALE)
			ZL_LOG_ERR(CLIENT_LOG,
				   "vol=%s is fenced at attach epoch %llu (%s): it was detached "
				   "from this node or attached to another; every I/O fails with "
				   "ZL_ERR_STALE from now on (unstage the volume here; the data is "
				   "the new attachment's)",
				   v->meta.id, (unsigned long long)c->epoch, why);
		else
			ZL_LOG_ERR(CLIENT_LOG,
				   "vol=%s refused at attach epoch %llu: %s (%s); every I/O fails "
				   "with %s from now on",
				   v->meta.id, (unsigned long long)c->epoch, why, zl_strerror(err),
				   zl_errname(err));
	}
}

void client_vol_fence(struct zl_client *c, uint64_t vol_num, const char *why)
{
	client_vol_refuse(c, vol_num, -ZL_ERR_STALE, why);
}

/* A STALE reply that is an epoch fence rather than a placement change: the
 * storage refused a FLUSH (no version is checked there), or a request at
 * the slice version it holds itself (storage_server.c: srv_check, and a
 * backup's fence forwarded by the primary). */
static bool sub_stale_is_fence(const struct client_sub *s, int err, uint64_t rep_ver,
			       bool transport)
{
	if (err != -ZL_ERR_STALE || transport || s->any)
		return false;
	return s->op == ZL_OP_FLUSH || (rep_ver && rep_ver == s->sent_ver);
}

/* s succeeded; a reply from a newer slice version reloads the volume. */
static void sub_success(struct client_sub *s, uint64_t rep_ver)
{
	if (rep_ver > s->sent_ver)
		vol_reload_soon(s->vol);
	sub_done(s, 0);
}

static void sub_result(struct client_sub *s, int err, uint64_t rep_ver, bool transport)
{
	struct zl_vol *v = s->vol;
	const struct zl_slice *sl;
	int next;
	enum zl_client_action act;

	if (!err && !s->any && s->clone != CLONE_CREATE) {
		/* Success of a plain request (every reply of a healthy volume):
		 * where the checks below end for it, both classifiers' DONE. */
		sub_success(s, rep_ver);
		return;
	}
	if (err && !v->fenced && sub_stale_is_fence(s, err, rep_ver, transport))
		client_vol_fence(v->c, v->meta.num, "a request at the current slice version "
						    "was answered STALE");
	if (err && v->fenced) {
		/* Final: no retry, no failure report about a healthy primary. */
		sub_done(s, v->fence_err);
		return;
	}
	if (client_clone_result(s, err))
		return;
	if (err == -ZL_ERR_VERSION && s->seq) {
		/* client_node.c found no connection that takes sequences. */
		if (!v->seq_warned) {
			v->seq_warned = true;
			ZL_LOG_ERR(CLIENT_LOG,
				   "vol=%s has snapshots (sequence %u) but storage node %s does "
				   "not take snapshot sequences: %s failed with %s; upgrade the "
				   "storage daemons before writing to (or reading snapshots of) "
				   "a snapshotted volume",
				   v->meta.id, s->seq, sub_node_id(s), zl_wire_op_name(s->op),
				   zl_errname(err));
		}
		sub_done(s, err);
		return;
	}
	if (s->any) {
		sub_result_any(s, err, rep_ver, transport);
		return;
	}
	/* A read reply whose data does not match the CRCs it carries (the
	 * primary's stored ones: the reader checks reads, zl_chunk_read_crcs):
	 * once may be the wire, twice in a row is the primary's copy. */
	if (transport && err == -ZL_ERR_CORRUPT && s->op == ZL_OP_READ && ++s->bad_data >= 2)
		transport = false;
	act = v->c->legacy_drop ? zl_client_classify(s->op, err, transport)
				: zl_client_classify_heal(s->op, err, transport);
	switch (act) {
	case ZL_CLIENT_ACT_DONE:
		sub_success(s, rep_ver);
		return;
	case ZL_CLIENT_ACT_FAIL:
		if (zl_ratelimit_ok(&v->rl, 10))
			ZL_LOG_ERR(CLIENT_LOG,
				   "request failed: vol=%s op=%s chunk=%llu node=%s err=%s",
				   v->meta.id, zl_wire_op_name(s->op), (unsigned long long)s->chunk,
				   sub_node_id(s), zl_strerror(err));
		sub_done(s, err);
		return;
	case ZL_CLIENT_ACT_FAILOVER:
		if (!v->c->legacy_drop) {
			sub_read_around(s, err);
			return;
		}
		v->stats.failovers++;
		if (s->target >= 0)
			s->tried |= (uint8_t)(1u << s->target);
		sl = &v->meta.slices[s->slice];
		next = zl_client_pick_target(sl, true, s->tried, 0);
		if (zl_ratelimit_ok(&v->rl, 10))
			ZL_LOG_WARN(
			    CLIENT_LOG,
			    "read failover: vol=%s slice=%u chunk=%llu node=%s err=%s next=%s",
			    v->meta.id, s->slice, (unsigned long long)s->chunk, sub_node_id(s),
			    zl_strerror(err), next >= 0 ? sl->nodes[next] : "(reload)");
		if (next >= 0) {
			sub_retry(s, false, true, err);
		} else {
			s->tried = 0;
			sub_retry(s, true, false, err);
		}
		return;
	case ZL_CLIENT_ACT_PROMOTE:
		sub_promote(s, err);
		return;
	case ZL_CLIENT_ACT_REPORT:
		sub_report(s, err);
		return;
	case ZL_CLIENT_ACT_RELOAD:
		s->tried = 0;
		if (!v->c->legacy_drop) {
			/* Immediately only the first time: a row that does not
			 * move is asked again after a growing backoff. */
			sub_retry(s, true, s->attempts == 0, err);
			return;
		}
		/* Retry at once the first time, or when someone reloaded since we
		 * sent; back off when the placement does not move. */
		sub_retry(s, true, s->attempts == 0 || s->reload_seq != v->reload_seq, err);
		return;
	case ZL_CLIENT_ACT_RETRY:
		sub_retry(s, false, false, err);
		return;
	}
}

static void sub_timer_cb(void *arg)
{
	struct client_sub *s = arg;
	struct zl_vol *v = s->vol;
	int err = s->pending_err;

	s->state = SUB_IDLE;
	s->pending_err = 0;
	if (s->pending == PEND_RESULT) {
		sub_result(s, err, 0, s->pending_transport);
		return;
	}
	if (s->need_reload) {
		s->need_reload = false;
		/* Another sub may have reloaded since we sent (heal mode: or
		 * just now, for another reason): then use that. */
		if (s->reload_seq == v->reload_seq &&
		    (v->c->legacy_drop || zl_now_ns() - v->reloaded_ns >= RELOAD_FRESH_NS ||
		     v->reload_w.busy) &&
		    !vol_reload_start(v)) {
			/* Sent once the reload is in (vol_reload_done); etcd
			 * failed lately: sent with what we have. */
			s->state = SUB_RELOAD;
			client_list_add_tail(&v->reload_wait, &s->link);
			return;
		}
	}
	sub_send(s);
}

void client_sub_reply_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct client_sub *s = arg;
	struct zl_vol *v = s->vol;
	struct client_node *n = s->node;
	int err = status;
	uint64_t rep_ver = 0;

	v->inflight_reqs--;
	s->state = SUB_IDLE;
	if (!s->io) {
		/* Orphan of a closed volume. */
		client_clone_drop(s);
		s->state = SUB_FREE;
		vol_maybe_free(v);
		goto out_kick;
	}
	if (!status) {
		err = zl_wire_status_to_err(rep->status);
		rep_ver = rep->slice_ver;
		if (!err && s->op == ZL_OP_READ && rep->payload_len != s->length)
			err = -ZL_ERR_PROTO;
	}
	sub_result(s, err, rep_ver, status != 0);
out_kick:
	if (n)
		client_node_kick(n);
}

/* ---- volume handles ---- */

/* The transport selection of a volume: the client's when it names one
 * (tcp/rdma), else the volume's "transport" parameter when it has one, else
 * auto. */
static enum zl_xport_select vol_pick_sel(const struct zl_client *c, const struct zl_volume *m)
{
	enum zl_xport_select sel = ZL_XPORT_SEL_AUTO;
	json_t *o, *t;

	if (c->sel != ZL_XPORT_SEL_AUTO)
		return c->sel;
	o = json_loads(m->params[0] ? m->params : "{}", 0, NULL);
	t = o ? json_object_get(o, "transport") : NULL;
	if (json_is_string(t) && zl_xport_select_parse(json_string_value(t), &sel)) {
		ZL_LOG_WARN(CLIENT_LOG,
			    "volume parameter transport is not auto|tcp|rdma, using auto: vol=%s "
			    "transport=%s",
			    m->id, json_string_value(t));
		sel = ZL_XPORT_SEL_AUTO;
	}
	json_decref(o);
	return sel;
}

int zl_vol_open(struct zl_client *c, const char *name_or_id, struct zl_vol **out)
{
	return client_vol_open_depth(c, name_or_id, 0, out);
}

int client_vol_open_depth(struct zl_client *c, const char *name_or_id, uint32_t depth,
			  struct zl_vol **out)
{
	struct zl_vol *v;
	char why[256];
	uint32_t n_subs;
	int rc;

	if (!c || !name_or_id || !out)
		return -ZL_ERR_INVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->c = c;
	v->epoch = depth ? 0 : c->epoch;
	client_list_init(&v->link);
	client_list_init(&v->free_ios);
	client_list_init(&v->free_subs);
	client_list_init(&v->split_wait);
	client_list_init(&v->hold_wait);
	client_list_init(&v->reload_wait);
	client_qos_init(v);
	rc = zl_meta_volume_lookup(c->etcd, c->prefix, name_or_id, &v->meta);
	if (rc) {
		if (rc != -ZL_ERR_NOT_FOUND)
			ZL_LOG_ERR(CLIENT_LOG, "cannot look up volume: vol=%s err=%s detail=%s",
				   name_or_id, zl_strerror(rc), zl_etcd_last_error());
		goto out_free;
	}
	if (strcmp(v->meta.state, "deleting") == 0) {
		ZL_LOG_ERR(CLIENT_LOG, "volume is being deleted, not opening it: vol=%s",
			   v->meta.id);
		rc = -ZL_ERR_NOT_FOUND;
		goto out_meta;
	}
	if (zl_meta_volume_check(&v->meta, why, sizeof(why))) {
		ZL_LOG_ERR(CLIENT_LOG, "volume record is malformed: vol=%s %s", v->meta.id, why);
		rc = -ZL_ERR_INVAL;
		goto out_meta;
	}
	v->slice_nodes =
	    calloc((size_t)v->meta.n_slices * ZL_MAX_REPLICAS, sizeof(*v->slice_nodes));
	v->reported = calloc(v->meta.n_slices, sizeof(*v->reported));
	v->n_ios = c->max_io;
	n_subs = c->max_io * CLIENT_SUBS_PER_IO;
	v->n_subs = n_subs;
	v->ios = calloc(v->n_ios, sizeof(*v->ios));
	v->subs = calloc(v->n_subs, sizeof(*v->subs));
	if (!v->slice_nodes || !v->reported || !v->ios || !v->subs) {
		rc = -ENOMEM;
		goto out_arrays;
	}
	for (uint32_t i = 0; i < v->n_ios; i++) {
		v->ios[i].vol = v;
		client_list_add_tail(&v->free_ios, &v->ios[i].link);
	}
	for (uint32_t i = 0; i < v->n_subs; i++) {
		v->subs[i].vol = v;
		v->subs[i].state = SUB_FREE;
		client_list_add_tail(&v->free_subs, &v->subs[i].link);
	}
	v->sel = vol_pick_sel(c, &v->meta);
	v->snap_seq = v->meta.snap_seq;
	atomic_init(&v->pub_seq, v->snap_seq);
	atomic_init(&v->pub_hold, false);
	rc = client_nodes_refresh(c);
	if (rc)
		goto out_arrays;
	rc = vol_bind_nodes(v, true);
	if (rc)
		goto out_arrays;
	client_list_add_tail(&c->vols, &v->link);
	client_qos_apply(v);
	vol_watch_start(v);
	ZL_LOG_INFO(CLIENT_LOG,
		    "volume opened: vol=%s name=%s size=%llu chunk_size=%u slices=%u transport=%s "
		    "mode=%s io_timeout=%u s",
		    v->meta.id, v->meta.name, (unsigned long long)v->meta.size, v->meta.chunk_size,
		    v->meta.n_slices,
		    v->sel == ZL_XPORT_SEL_TCP	  ? "tcp"
		    : v->sel == ZL_XPORT_SEL_RDMA ? "rdma"
						  : "auto",
		    c->legacy_drop ? "legacy-drop" : "heal", client_vol_io_timeout_s(v));
	rc = client_clone_open(v, depth);
	if (rc) {
		zl_vol_close(v);
		return rc;
	}
	*out = v;
	return 0;

out_arrays:
	free(v->subs);
	free(v->ios);
	free(v->reported);
	free(v->slice_nodes);
out_meta:
	zl_volume_fini(&v->meta);
out_free:
	free(v);
	return rc;
}

void client_vol_free(struct zl_vol *v)
{
	if (!v)
		return;
	zl_volume_fini(&v->meta);
	free(v->subs);
	free(v->ios);
	free(v->reported);
	free(v->slice_nodes);
	free(v);
}

void zl_vol_close(struct zl_vol *v)
{
	struct zl_client *c;

	if (!v || v->closing)
		return;
	c = v->c;
	v->closing = true;
	/* The parent first: its reads for us end here (client_clone.c). */
	zl_vol_close(v->parent);
	v->parent = NULL;
	client_snap_stop(v);
	client_snap_unfollow(v);
	vol_watch_stop(v);
	client_qos_stop(v);
	zl_loop_defer_cancel(c->loop, &v->reload_defer);
	for (uint32_t i = 0; i < v->n_subs; i++) {
		struct client_sub *s = &v->subs[i];

		switch (s->state) {
		case SUB_WAIT:
			client_list_del(&s->link);
			s->state = SUB_FREE;
			break;
		case SUB_TIMER:
			zl_timer_stop(c->loop, &s->timer);
			s->state = SUB_FREE;
			break;
		case SUB_RELOAD:
			client_list_del(&s->link);
			s->state = SUB_FREE;
			break;
		case SUB_PARENT: /* its parent read ended with the parent */
			client_clone_drop(s);
			s->state = SUB_FREE;
			break;
		case SUB_SENT:
			s->io = NULL; /* its reply frees it */
			break;
		default:
			break;
		}
	}
	client_list_del(&v->link);
	if (v->inflight_reqs || v->reload_w.busy || v->reload_applying)
		client_list_add_tail(&c->zombies, &v->link);
	/* User callbacks last: they must not find half-closed state. */
	for (uint32_t i = 0; i < v->n_ios; i++) {
		struct client_io *io = &v->ios[i];

		if (!io->active)
			continue;
		zl_loop_defer_cancel(c->loop, &io->defer);
		io->active = false;
		io->cb(io->arg, -ZL_ERR_CONN);
	}
	ZL_LOG_INFO(CLIENT_LOG, "volume closed: vol=%s", v->meta.id);
	if (!v->inflight_reqs && !v->reload_w.busy && !v->reload_applying)
		client_vol_free(v);
}

uint64_t zl_vol_size(const struct zl_vol *v)
{
	return v->meta.size;
}

bool zl_vol_fenced(const struct zl_vol *v)
{
	return v->fenced;
}

int zl_vol_refusal(const struct zl_vol *v, char *why, size_t len)
{
	if (!v->fenced)
		return 0;
	if (why && len)
		snprintf(why, len, "%s", v->fence_why);
	return v->fence_err;
}

void zl_vol_last_error(const struct zl_vol *v, char *out, size_t len)
{
	const struct zl_client *c = v->c;
	size_t used = 0;
	int n;

	if (!len)
		return;
	out[0] = '\0';
	if (v->fenced) {
		snprintf(out, len, "%s: %s", zl_errname(v->fence_err), v->fence_why);
		return;
	}
	if (c->last_node_err) {
		n = snprintf(out, len, "storage node %s at %s: %s failed: %s", c->last_node_id,
			     c->last_node_addr, c->last_node_what, zl_strerror(c->last_node_err));
		used = n > 0 ? ZL_MIN((size_t)n, len - 1) : 0;
	}
	if (v->last_retry_err)
		snprintf(out + used, len - used, "%slast reply from storage node %s: %s (%s)",
			 used ? "; " : "", v->last_retry_node,
			 zl_errname(v->last_retry_err), zl_strerror(v->last_retry_err));
	if (!out[0]) {
		/* Nothing failed yet: say who we are still waiting for. */
		for (size_t i = 0; i < c->n_nodes && !out[0]; i++)
			for (uint32_t j = 0; j < c->conns_per_node; j++)
				if (c->nodes[i]->conns[j].state == CONN_HELLO) {
					snprintf(out, len,
						 "storage node %s at %s:%u accepted our connection "
						 "but never answered its HELLO",
						 c->nodes[i]->id, c->nodes[i]->addr,
						 c->nodes[i]->port);
					break;
				}
	}
	if (!out[0])
		snprintf(out, len, "no storage node answered");
}

const struct zl_volume *zl_vol_meta(const struct zl_vol *v)
{
	return &v->meta;
}

int zl_vol_aio_read(struct zl_vol *v, void *buf, uint64_t off, uint64_t len, zl_io_cb cb, void *arg)
{
	return vol_submit(v, ZL_OP_READ, buf, off, len, false, cb, arg);
}

int zl_vol_aio_read_snap(struct zl_vol *v, uint32_t seq, void *buf, uint64_t off, uint64_t len,
			 zl_io_cb cb, void *arg)
{
	if (seq < 1 || seq > ZL_WIRE_SEQ_MAX)
		return -ZL_ERR_INVAL;
	return vol_submit_snap(v, ZL_OP_READ, seq, buf, off, len, false, cb, arg);
}

uint32_t zl_vol_snap_seq(const struct zl_vol *v)
{
	return client_vol_seq(v);
}

int zl_vol_aio_write(struct zl_vol *v, const void *buf, uint64_t off, uint64_t len, int fua,
		     zl_io_cb cb, void *arg)
{
	/* The buffer is only read from; the cast spares a second field. */
	return vol_submit(v, ZL_OP_WRITE, (void *)(uintptr_t)buf, off, len, fua != 0, cb, arg);
}

int zl_vol_aio_flush(struct zl_vol *v, zl_io_cb cb, void *arg)
{
	return vol_submit(v, ZL_OP_FLUSH, NULL, 0, 0, false, cb, arg);
}

int zl_vol_aio_discard(struct zl_vol *v, uint64_t off, uint64_t len, zl_io_cb cb, void *arg)
{
	return vol_submit(v, ZL_OP_DISCARD, NULL, off, len, false, cb, arg);
}

int zl_vol_aio_write_zeroes(struct zl_vol *v, uint64_t off, uint64_t len, zl_io_cb cb, void *arg)
{
	return vol_submit(v, ZL_OP_WRITE_ZEROES, NULL, off, len, false, cb, arg);
}

/* ---- blocking wrappers ---- */

struct vol_wait {
	bool done;
	int status;
};

static void vol_wait_cb(void *arg, int status)
{
	struct vol_wait *w = arg;

	w->status = status;
	w->done = true;
}

/* Submits (waiting out -ZL_ERR_BUSY) and runs the loop until completion. The
 * I/O itself is bounded (attempts, deadline), so the loop ends. */
static int vol_run_snap(struct zl_vol *v, uint8_t op, uint32_t snap, void *buf, uint64_t off,
			uint64_t len)
{
	struct vol_wait w = {0};
	int rc;

	if (!v)
		return -ZL_ERR_INVAL;
	for (;;) {
		rc = vol_submit_snap(v, op, snap, buf, off, len, false, vol_wait_cb, &w);
		if (rc != -ZL_ERR_BUSY)
			break;
		zl_loop_run_once(v->c->loop, 100);
	}
	if (rc)
		return rc;
	while (!w.done)
		zl_loop_run_once(v->c->loop, 100);
	return w.status;
}

static int vol_run(struct zl_vol *v, uint8_t op, void *buf, uint64_t off, uint64_t len)
{
	return vol_run_snap(v, op, 0, buf, off, len);
}

int zl_vol_read_snap(struct zl_vol *v, uint32_t seq, void *buf, uint64_t off, uint64_t len)
{
	if (seq < 1 || seq > ZL_WIRE_SEQ_MAX)
		return -ZL_ERR_INVAL;
	return vol_run_snap(v, ZL_OP_READ, seq, buf, off, len);
}

int zl_vol_read(struct zl_vol *v, void *buf, uint64_t off, uint64_t len)
{
	return vol_run(v, ZL_OP_READ, buf, off, len);
}

int zl_vol_write(struct zl_vol *v, const void *buf, uint64_t off, uint64_t len)
{
	return vol_run(v, ZL_OP_WRITE, (void *)(uintptr_t)buf, off, len);
}

int zl_vol_flush(struct zl_vol *v)
{
	return vol_run(v, ZL_OP_FLUSH, NULL, 0, 0);
}

int zl_vol_discard(struct zl_vol *v, uint64_t off, uint64_t len)
{
	return vol_run(v, ZL_OP_DISCARD, NULL, off, len);
}

int zl_vol_write_zeroes(struct zl_vol *v, uint64_t off, uint64_t len)
{
	return vol_run(v, ZL_OP_WRITE_ZEROES, NULL, off, len);
}

/* ---- buffers and stats ---- */

/* The pool for the volume's buffers: RDMA's when any replica node is reached
 * over RDMA (a volume spanning both kinds included: TCP takes any memory),
 * else TCP's. Picks the nodes' transports (blocking probe) on first use. */
static struct zl_xport *vol_buf_xport(struct zl_vol *v)
{
	struct zl_client *c = v->c;
	enum zl_xport_kind kind = ZL_XPORT_TCP;
	size_t n = (size_t)v->meta.n_slices * ZL_MAX_REPLICAS;
	struct zl_xport *x = NULL;

	if (v->buf_x)
		return v->buf_x;
	for (size_t i = 0; i < n && kind != ZL_XPORT_RDMA; i++) {
		struct client_node *nd = v->slice_nodes[i];
		uint16_t port;

		if (nd && !nd->gone && client_node_xport(nd, &x, &port) == 0)
			kind = nd->kind;
	}
	if (client_xport_get(c, kind, &x))
		return NULL;
	v->buf_x = x;
	return x;
}

void *zl_vol_buf_alloc(struct zl_vol *v, size_t len)
{
	struct zl_xport *x = vol_buf_xport(v);

	return x ? zl_xport_buf_alloc(x, len) : NULL;
}

void zl_vol_buf_free(struct zl_vol *v, void *buf)
{
	struct zl_client *c;

	if (!buf)
		return;
	c = v->c;
	if (v->buf_x && zl_xport_buf_owned(v->buf_x, buf, 1)) {
		zl_xport_buf_free(v->buf_x, buf);
		return;
	}
	for (int k = ZL_XPORT_TCP; k <= ZL_XPORT_RDMA; k++) {
		if (c->xports[k] && zl_xport_buf_owned(c->xports[k], buf, 1)) {
			zl_xport_buf_free(c->xports[k], buf);
			return;
		}
	}
	ZL_LOG_ERR(CLIENT_LOG, "zl_vol_buf_free of a buffer no pool owns: vol=%s buf=%p",
		   v->meta.id, buf);
}

void zl_vol_get_stats(const struct zl_vol *v, struct zl_vol_stats *out)
{
	*out = v->stats;
}
