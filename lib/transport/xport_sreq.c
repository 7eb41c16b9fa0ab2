/* Server side of every transport: the request slots of a server connection
 * and their state machine, written once for TCP and RDMA. An implementation
 * receives a request's header, takes a slot (xport_sreq_start), fills in what
 * it needs to move the payload and hands the slot to on_request
 * (xport_sreq_deliver); it moves bytes through ops->fetch, ops->discard and
 * ops->reply and reports back with xport_sreq_payload_done and
 * xport_sreq_reply_done. Everything else is here:
 *
 *   slot     FREE -> ACTIVE (delivered) -> REPLYING (zl_xport_reply) ->
 *            REPLIED (reply out) -> FREE once the payload is done with too;
 *   payload  UNDECIDED inside on_request, then FETCH (zl_xport_fetch; DONE
 *            when the bytes were copied at once and the callback waits) or
 *            DISCARD (zl_xport_discard, or left undecided: a server bug),
 *            then NONE;
 *   pending  the ACTIVE slots: a TCP connection stops reading when no slot is
 *            free, an RDMA connection refuses requests beyond its credits;
 *   index    the ACTIVE slots by the client's slot of their req_id, so a
 *            reply finds its request and a client cannot have one slot in
 *            flight twice.
 *
 * Callbacks never run inside zl_xport_fetch or zl_xport_reply: completions
 * learnt there go through the deferred work of the connection. At close the
 * implementation stops every transfer first, then xport_sreqs_fail_all ends
 * what is left. Nothing is allocated per I/O.
 */
#include "transport_internal.h"

#include <errno.h>
#include <stdlib.h>

/* The slot of n, a link at link_off in struct xport_sreq. */
static struct xport_sreq *sreq_of_link(struct xport_link *n, size_t link_off)
{
	return (struct xport_sreq *)((uint8_t *)n - link_off);
}

struct xport_sreq *xport_sreq_at(struct zl_xport_conn *c, uint32_t i)
{
	return (struct xport_sreq *)(c->sreqs.mem + (size_t)i * c->sreqs.size + c->sreqs.off);
}

int xport_sreqs_init(struct zl_xport_conn *c, uint32_t n, size_t size, size_t off)
{
	struct xport_sreqs *q = &c->sreqs;
	uint32_t cap = 2, bits = 1;

	while (cap < 2 * n) {
		cap <<= 1;
		bits++;
	}
	q->mem = calloc(n, size);
	q->index = calloc(cap, sizeof(*q->index));
	if (!q->mem || !q->index) {
		xport_sreqs_fini(c);
		return -ENOMEM;
	}
	q->size = size;
	q->off = off;
	q->n = n;
	q->index_mask = cap - 1;
	q->index_shift = 32 - bits;
	for (uint32_t i = n; i-- > 0;) {
		struct xport_sreq *s = xport_sreq_at(c, i);

		s->pl.conn = c;
		s->link.next = q->free;
		q->free = &s->link;
	}
	return 0;
}

void xport_sreqs_fini(struct zl_xport_conn *c)
{
	struct xport_sreqs *q = &c->sreqs;

	free(q->mem);
	free(q->index);
	q->mem = NULL;
	q->index = NULL;
	q->n = 0;
	q->free = NULL;
}

bool xport_sreq_available(const struct zl_xport_conn *c)
{
	return c->sreqs.free != NULL;
}

/* ---- index of the ACTIVE slots ---- */

static uint32_t sreq_home(const struct xport_sreqs *q, uint32_t key)
{
	return (uint32_t)(key * 2654435761u) >> q->index_shift;
}

/* The entry of key, or the empty one where it would go. */
static uint32_t sreq_index_pos(const struct xport_sreqs *q, uint32_t key)
{
	uint32_t i = sreq_home(q, key);

	while (q->index[i] && (uint32_t)q->index[i]->req_id != key)
		i = (i + 1) & q->index_mask;
	return i;
}

/* Removes the entry at i; the entries after it move back so that every one
 * stays reachable from its home position (no tombstones). */
static void sreq_index_del(struct xport_sreqs *q, uint32_t i)
{
	uint32_t j = i;

	for (;;) {
		uint32_t k;

		j = (j + 1) & q->index_mask;
		if (!q->index[j])
			break;
		k = sreq_home(q, (uint32_t)q->index[j]->req_id);
		/* Stays where it is when its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		q->index[i] = q->index[j];
		i = j;
	}
	q->index[i] = NULL;
}

/* ---- the slot machine ---- */

/* A slot is free again once its reply is out and its payload done with. */
static void sreq_maybe_put(struct zl_xport_conn *c, struct xport_sreq *s)
{
	if (s->state != XPORT_SREQ_REPLIED || s->pl_state != XPORT_PL_NONE)
		return;
	s->state = XPORT_SREQ_FREE;
	s->link.next = c->sreqs.free;
	c->sreqs.free = &s->link;
	if (c->ops->sreq_freed)
		c->ops->sreq_freed(c);
}

struct xport_sreq *xport_sreq_start(struct zl_xport_conn *c, const struct zl_wire_hdr *h,
				    const char **why)
{
	struct xport_sreqs *q = &c->sreqs;
	uint32_t pos = sreq_index_pos(q, (uint32_t)h->req_id);
	struct xport_sreq *s;

	if (q->index[pos]) {
		*why = "request id still in use";
		return NULL;
	}
	if (!q->free) {
		*why = "more requests than credits";
		return NULL;
	}
	s = sreq_of_link(q->free, offsetof(struct xport_sreq, link));
	q->free = s->link.next;
	s->link.next = NULL;
	s->state = XPORT_SREQ_ACTIVE;
	s->req_id = h->req_id;
	s->opcode = h->opcode;
	s->data_len = h->payload_len;
	s->data_crc = h->payload_crc;
	s->pl_state = h->payload_len ? XPORT_PL_UNDECIDED : XPORT_PL_NONE;
	s->fetch_buf = NULL;
	s->fetch_cb = NULL;
	s->sent_cb = NULL;
	q->index[pos] = s;
	q->pending++;
	return s;
}

void xport_sreq_deliver(struct zl_xport_conn *c, struct xport_sreq *s, const struct zl_wire_hdr *h)
{
	c->sops->on_request(c->sarg, c, h, s->data_len ? &s->pl : NULL);
	if (s->pl_state == XPORT_PL_UNDECIDED) {
		if (!c->closing && xport_warn_ok(c->x))
			ZL_LOG_WARN("xport",
				    "on_request neither fetched nor discarded the payload "
				    "transport=%s peer=%s op=%s; discarding it (server bug)",
				    zl_xport_kind_name(c->kind), c->peer,
				    zl_wire_op_name(h->opcode));
		s->pl_state = XPORT_PL_DISCARD;
	}
	if (s->pl_state != XPORT_PL_DISCARD)
		return;
	if (c->closing)
		xport_sreq_payload_done(c, s, 0); /* nothing left to skip */
	else
		c->ops->discard(c, s);
}

/* Clears the callback at *cbp, puts s back if it is done with, then runs the
 * callback (none: NULL). */
static void sreq_finish(struct zl_xport_conn *c, struct xport_sreq *s, zl_xport_done_cb *cbp,
			void *arg, int status)
{
	zl_xport_done_cb cb = *cbp;

	*cbp = NULL;
	sreq_maybe_put(c, s);
	if (cb)
		cb(arg, status);
}

void xport_sreq_payload_done(struct zl_xport_conn *c, struct xport_sreq *s, int status)
{
	if (s->pl_state != XPORT_PL_FETCH && s->pl_state != XPORT_PL_DONE)
		s->fetch_cb = NULL; /* skipped: nobody waits */
	s->pl_state = XPORT_PL_NONE;
	sreq_finish(c, s, &s->fetch_cb, s->fetch_arg, status);
}

static void sreq_work(void *arg);

void xport_sreq_payload_done_later(struct zl_xport_conn *c, struct xport_sreq *s, int status)
{
	s->pl_state = XPORT_PL_DONE;
	s->fetch_status = status;
	xport_list_append(&c->sreqs.fetch_done, &s->fetch_link);
	zl_loop_defer(c->x->loop, &c->sreqs.work_d, sreq_work, c);
}

void xport_sreq_reply_done(struct zl_xport_conn *c, struct xport_sreq *s, int status)
{
	s->state = XPORT_SREQ_REPLIED;
	sreq_finish(c, s, &s->sent_cb, s->sent_arg, status);
}

void xport_sreq_reply_done_later(struct zl_xport_conn *c, struct xport_sreq *s)
{
	if (!s->sent_cb) {
		xport_sreq_reply_done(c, s, 0); /* no callback to defer */
		return;
	}
	s->sent_queued = true;
	xport_list_append(&c->sreqs.sent_done, &s->sent_link);
	zl_loop_defer(c->x->loop, &c->sreqs.work_d, sreq_work, c);
}

static struct xport_sreq *sreq_pop(struct zl_xport_conn *c, struct xport_list *l, size_t link_off)
{
	struct xport_link *n = l->head;

	if (!n)
		return NULL;
	xport_list_del(l, n);
	return sreq_of_link(n, link_off);
}

static struct xport_sreq *sreq_pop_fetch(struct zl_xport_conn *c)
{
	return sreq_pop(c, &c->sreqs.fetch_done, offsetof(struct xport_sreq, fetch_link));
}

static struct xport_sreq *sreq_pop_sent(struct zl_xport_conn *c)
{
	struct xport_sreq *s =
	    sreq_pop(c, &c->sreqs.sent_done, offsetof(struct xport_sreq, sent_link));

	if (s)
		s->sent_queued = false;
	return s;
}

/* Deferred callbacks: fetches that completed inside zl_xport_fetch, replies
 * whose send completed where callbacks must not run. */
static void sreq_work(void *arg)
{
	struct zl_xport_conn *c = arg;
	struct xport_sreq *s;

	zl_xport_conn_get(c);
	while (!c->closing && (s = sreq_pop_fetch(c)))
		xport_sreq_payload_done(c, s, s->fetch_status);
	while (!c->closing && (s = sreq_pop_sent(c)))
		xport_sreq_reply_done(c, s, 0);
	zl_xport_conn_put(c);
}

void xport_sreqs_fail_all(struct zl_xport_conn *c)
{
	struct xport_sreq *s;

	if (!c->server || !c->sreqs.mem)
		return;
	zl_loop_defer_cancel(c->x->loop, &c->sreqs.work_d);
	/* Replies that did go out. */
	while ((s = sreq_pop_sent(c)))
		xport_sreq_reply_done(c, s, 0);
	/* Fetches that completed (with their status) or never will. */
	while ((s = sreq_pop_fetch(c)))
		xport_sreq_payload_done(c, s, s->fetch_status);
	for (uint32_t i = 0; i < c->sreqs.n; i++) {
		s = xport_sreq_at(c, i);
		if (s->pl_state == XPORT_PL_FETCH)
			xport_sreq_payload_done(c, s, -ZL_ERR_CONN);
		s->pl_state = XPORT_PL_NONE;
		if (s->state == XPORT_SREQ_REPLYING)
			xport_sreq_reply_done(c, s, -ZL_ERR_CONN);
	}
}

/* ---- the public calls, past their argument checks (xport.c) ---- */

bool xport_sreq_crc_ok(struct xport_sreq *s, const void *data, uint32_t len, uint32_t want)
{
	if (s->fetch_crcs && len && !(len % ZL_BLOCK_SIZE))
		return zl_crc32c_4k_pieces(data, len / ZL_BLOCK_SIZE, s->fetch_crcs) == want;
	return zl_crc32c(data, len) == want;
}

int xport_sreq_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, uint32_t *crcs,
		     zl_xport_done_cb cb, void *arg)
{
	struct zl_xport_conn *c = p->conn;
	struct xport_sreq *s = ZL_CONTAINER_OF(p, struct xport_sreq, pl);
	int rc;

	if (s->pl_state != XPORT_PL_UNDECIDED || len < s->data_len)
		return -ZL_ERR_INVAL; /* outside on_request, twice, or too small */
	s->fetch_buf = buf;
	s->fetch_crcs = crcs;
	s->fetch_cb = cb;
	s->fetch_arg = arg;
	s->pl_state = XPORT_PL_FETCH;
	rc = c->ops->fetch(c, s);
	if (rc) {
		s->pl_state = XPORT_PL_UNDECIDED;
		s->fetch_cb = NULL;
	}
	return rc;
}

void xport_sreq_discard(struct zl_xport_payload *p)
{
	struct xport_sreq *s = ZL_CONTAINER_OF(p, struct xport_sreq, pl);

	if (s->pl_state == XPORT_PL_UNDECIDED)
		s->pl_state = XPORT_PL_DISCARD;
}

int xport_sreq_reply(struct zl_xport_conn *c, const struct zl_wire_hdr *rep, const void *data,
		     uint32_t len, zl_xport_done_cb sent_cb, void *arg)
{
	struct xport_sreqs *q = &c->sreqs;
	uint32_t pos = sreq_index_pos(q, (uint32_t)rep->req_id);
	struct xport_sreq *s = q->index[pos];
	int rc;

	if (!s || s->req_id != rep->req_id) {
		if (xport_warn_ok(c->x))
			ZL_LOG_ERR("xport",
				   "reply to a request that is not pending transport=%s peer=%s "
				   "req_id=%llu (server bug)",
				   zl_xport_kind_name(c->kind), c->peer,
				   (unsigned long long)rep->req_id);
		return -ZL_ERR_INVAL;
	}
	/* REPLYING before the implementation runs: it may report the reply
	 * done before it returns. */
	sreq_index_del(q, pos);
	q->pending--;
	s->state = XPORT_SREQ_REPLYING;
	s->sent_cb = sent_cb;
	s->sent_arg = arg;
	rc = c->ops->reply(c, s, rep, data, len);
	if (rc) {
		s->state = XPORT_SREQ_ACTIVE;
		s->sent_cb = NULL;
		q->pending++;
		q->index[sreq_index_pos(q, (uint32_t)s->req_id)] = s;
	}
	return rc;
}
