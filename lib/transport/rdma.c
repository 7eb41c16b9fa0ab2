/* RDMA transport (rdma-core): librdmacm sets connections up over IP, RC queue
 * pairs of libibverbs carry them. The message format, the handshake and the
 * credit rule are described in rdma_internal.h.
 *
 * Memory: one protection domain per device for the whole process (refcounted
 * device cache, rdma_dev_get/put) and, per transport and device, one memory
 * registration per buffer-pool region (struct rdma_xdev), made when the
 * region appears or the device is first used, never per I/O. Every buffer the
 * transport posts (message slots, receive buffers, bounce buffers) comes from
 * the pool, so one lkey lookup serves everything.
 *
 * Data movement is server-active: a client request carries a descriptor of
 * its pool buffer; the server RDMA-READs WRITE data out of it
 * (zl_xport_fetch) and RDMA-WRITEs READ data into it before the reply SEND
 * (zl_xport_reply). WRITEs of at most RDMA_INLINE_MAX bytes travel inside the
 * SEND. Caller memory outside the pool is bounced through pool buffers.
 *
 * Completions: one CQ per connection, one completion channel per transport
 * and device (an fd on the loop). A connection with work in progress sits on
 * the transport's busy list and its CQ is polled by a loop poller on every
 * iteration (the loop does not sleep meanwhile); after RDMA_IDLE_SPINS empty
 * polls the CQ is armed and the connection sleeps until the channel fires, so
 * an idle process uses no CPU.
 *
 * Send queue: every work request gets a sequence number; its wr_id is that
 * number and ring[seq & mask] says what completes with it. Only work requests
 * that need a completion are signalled (fetch READs, replies with data or a
 * sent callback), plus one in RDMA_SIGNAL_EVERY and any that leaves less than
 * RDMA_SIGNAL_EVERY free entries, so the queue always drains. Posts that do
 * not fit (send queue full, no credit) wait in a per-connection FIFO.
 */
#include "rdma_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define RDMA_RECV_BIT	  (1ull << 63)
#define RDMA_SIGNAL_EVERY 16u
#define RDMA_IDLE_SPINS	  64u
#define RDMA_POLL_BATCH	  32
#define RDMA_CQ_ACK_EVERY 64u
#define RDMA_TICK_MS	  100
#define RDMA_BACKLOG	  1024
#define RDMA_SLAB_CHUNK	  (1u << 20)
#define RDMA_SRQ_MAX	  16384u
#define RDMA_RD_ATOM_MAX  16u
#define RDMA_INLINE_HDR	  128u /* request max_inline_data: a header-only message */
#define RDMA_WARN_PER_SEC 10
#define RDMA_SPIN_LISTENERS 32

/* ---- process-wide device cache ---- */

/* One PD per device, shared by every transport of the process. rdma_cm opens
 * each device once and keeps its context, so the context pointer is the key.
 * Locking: rdma_dev_lock protects the list and the refcounts (transports on
 * different loop threads may share a device). */
struct rdma_dev {
	struct rdma_dev *next;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	struct ibv_device_attr attr;
	uint32_t refs;
};

static pthread_mutex_t rdma_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_dev *rdma_devs;

/* Listeners of the process, so that a blocking connect can accept on a
 * listener of its own loop (client and server on one thread) instead of
 * deadlocking. Locking: rdma_lis_lock protects the list. */
struct rdma_listener;
static pthread_mutex_t rdma_lis_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_listener *rdma_lis_all;

/* ---- per-transport state ---- */

/* Message buffers carved from pool chunks of RDMA_SLAB_CHUNK bytes. */
struct rdma_slab {
	uint8_t **chunks;
	uint32_t n_chunks;
	uint32_t n; /* buffers available */
};

#define RDMA_SLAB_PER_CHUNK ((uint32_t)(RDMA_SLAB_CHUNK / RDMA_MSG_SIZE))

struct rdma_conn;

/* A transport's use of one device: MRs of the pool, completion channel,
 * shared receive queue of its server connections. Lives until the transport
 * is destroyed. */
struct rdma_xdev {
	struct rdma_xdev *next;
	struct rdma_xport *tx;
	struct rdma_dev *dev;
	struct ibv_mr **mrs;
	uint32_t n_mrs, cap_mrs;
	struct ibv_comp_channel *cc;
	struct zl_loop_handle cc_h;
	bool cc_in_loop;
	/* server side */
	struct ibv_srq *srq;
	uint32_t srq_depth, srq_posted, srq_reserved;
	struct rdma_slab srq_slab;
};

struct rdma_xport {
	struct zl_xport *x;
	struct rdma_xdev *xdevs;
	struct zl_timer tick;
	uint32_t n_clients;
	struct zl_poller poller;
	struct rdma_conn *busy; /* connections being polled */
};

/* What completes with a send work request. */
enum rdma_wr_kind { RDMA_WR_NONE, RDMA_WR_FETCH, RDMA_WR_REPLY };

struct rdma_wr_ctx {
	uint8_t kind;
	void *ptr;
};

/* Work waiting for a send-queue slot or a credit, in order. */
enum rdma_bl_kind { RDMA_BL_REQ, RDMA_BL_FETCH, RDMA_BL_REPLY };

struct rdma_bl {
	struct rdma_bl *next;
	uint8_t kind;
	bool queued;
};

enum rdma_req_state {
	RDMA_REQ_FREE,	 /* on the free list */
	RDMA_REQ_QUEUED, /* waiting for a credit or send-queue room */
	RDMA_REQ_SENT,	 /* SEND posted, waiting for the reply */
};

struct rdma_req {
	struct rdma_bl bl;
	struct rdma_req *prev, *next; /* in-flight list (issue order) / free list */
	enum rdma_req_state state;
	uint32_t slot, gen;
	uint8_t opcode;
	bool has_in_desc;
	int fail;
	uint64_t deadline_ns;
	void *in;
	uint32_t in_cap, in_len; /* in_len: bytes the descriptor offers */
	uint8_t *bounce_in, *bounce_out;
	zl_xport_reply_cb cb;
	void *arg;
	uint8_t *msg;
	uint32_t msg_len;
};

enum rdma_sreq_state {
	RDMA_SREQ_FREE,	   /* on the free list */
	RDMA_SREQ_ACTIVE,  /* delivered to on_request, no reply yet */
	RDMA_SREQ_SENDING, /* reply posted, its completion pending */
};

enum rdma_pl_state {
	RDMA_PL_NONE,	   /* no payload, or done with it */
	RDMA_PL_UNDECIDED, /* inside on_request */
	RDMA_PL_FETCHING,  /* RDMA READ posted (or queued) */
	RDMA_PL_DONE,	   /* inline copy done, callback deferred */
};

/* Server request slot: a request from on_request to its reply's completion. */
struct rdma_sreq {
	struct rdma_bl bl_fetch, bl_reply;
	struct rdma_sreq *next; /* free list / done list */
	struct zl_xport_payload pl;
	struct rdma_conn *c;
	enum rdma_sreq_state state;
	enum rdma_pl_state pl_state;
	uint64_t req_id;
	uint32_t peer_slot;
	uint8_t opcode;
	bool has_desc;
	struct zl_wire_rdma_desc desc; /* WRITE: data to read; READ: where to write */
	uint32_t data_len, data_crc;
	/* fetch */
	uint8_t *fetch_buf, *fetch_bounce;
	int fetch_status;
	zl_xport_done_cb fetch_cb;
	void *fetch_arg;
	/* reply */
	const uint8_t *rdata;
	uint32_t rlen;
	bool rwrite; /* RDMA WRITE of rdata before the SEND */
	uint8_t *reply_bounce;
	zl_xport_done_cb sent_cb;
	void *sent_arg;
	uint8_t *msg;
	uint32_t msg_len;
};

struct rdma_conn {
	struct zl_xport_conn base;
	struct rdma_xport *tx;
	struct zl_loop *loop;
	struct rdma_xdev *xd;
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;
	struct zl_loop_handle ch_h;
	bool ch_in_loop;
	struct ibv_cq *cq;
	uint32_t cq_unacked;
	uint32_t max_inline;
	struct rdma_conn *busy_prev, *busy_next;
	bool busy;
	uint32_t idle;
	int close_reason;
	struct zl_defer close_d, work_d;
	const struct zl_xport_server_ops *sops;
	void *sarg;
	bool announced;
	zl_xport_close_cb on_close;
	void *close_arg;

	/* send queue */
	uint32_t sq_depth, ring_mask;
	uint64_t sq_posted, sq_done, last_sig;
	struct rdma_wr_ctx *ring;
	struct rdma_bl *bl_head, *bl_tail;

	struct rdma_slab slab; /* send messages, then (client) receive buffers */

	/* client */
	struct rdma_req *reqs;
	uint32_t n_reqs, credits;
	struct rdma_req *req_free;
	struct rdma_req *fl_head, *fl_tail;

	/* server */
	struct rdma_sreq *sreqs;
	uint32_t n_sreqs, granted, srv_pending;
	struct rdma_sreq *sreq_free;
	struct rdma_sreq **by_slot;
	uint32_t peer_slots;
	struct rdma_sreq *done_head, *done_tail; /* inline fetches to report */
	const uint8_t *cur_inline;		 /* payload of the request in on_request */
};

struct rdma_listener {
	struct zl_xport_listener base;
	struct rdma_listener *all_next;
	struct rdma_xport *tx;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct zl_loop_handle h;
	const struct zl_xport_server_ops *ops;
	void *arg;
	char host[64];
};

/* Handshake in the CM private data. */
struct rdma_hs {
	uint32_t magic;
	uint16_t version;
	uint16_t rsvd;
	uint32_t count; /* CONNECT: client request slots; ACCEPT: credits */
	uint32_t max_msg;
};

static void rdma_conn_close(struct zl_xport_conn *bc, int reason);
static void rdma_bl_run(struct rdma_conn *c);
static int rdma_conn_poll(struct rdma_conn *c);
static void rdma_work(void *arg);

static struct rdma_conn *rdma_conn_of(struct zl_xport_conn *c)
{
	return ZL_CONTAINER_OF(c, struct rdma_conn, base);
}

static bool rdma_warn_ok(struct zl_xport *x)
{
	return zl_ratelimit_ok(&x->warn_rl, RDMA_WARN_PER_SEC);
}

static void rdma_proto_fail(struct rdma_conn *c, const char *why)
{
	if (rdma_warn_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "invalid message transport=rdma peer=%s side=%s reason=\"%s\"; "
			    "closing connection",
			    c->base.peer, c->base.server ? "server" : "client", why);
	rdma_conn_close(&c->base, -ZL_ERR_PROTO);
}

static void rdma_hs_encode(const struct rdma_hs *h, uint8_t out[RDMA_HS_SIZE])
{
	uint32_t v[4] = {h->magic, (uint32_t)h->version | ((uint32_t)h->rsvd << 16), h->count,
			 h->max_msg};

	for (int i = 0; i < 4; i++) {
		out[i * 4] = (uint8_t)v[i];
		out[i * 4 + 1] = (uint8_t)(v[i] >> 8);
		out[i * 4 + 2] = (uint8_t)(v[i] >> 16);
		out[i * 4 + 3] = (uint8_t)(v[i] >> 24);
	}
}

static int rdma_hs_decode(const void *buf, size_t len, struct rdma_hs *h)
{
	const uint8_t *p = buf;
	uint32_t v[4];

	if (!buf || len < RDMA_HS_SIZE)
		return -ZL_ERR_PROTO;
	for (int i = 0; i < 4; i++)
		v[i] = (uint32_t)p[i * 4] | ((uint32_t)p[i * 4 + 1] << 8) |
		       ((uint32_t)p[i * 4 + 2] << 16) | ((uint32_t)p[i * 4 + 3] << 24);
	h->magic = v[0];
	h->version = (uint16_t)v[1];
	h->rsvd = (uint16_t)(v[1] >> 16);
	h->count = v[2];
	h->max_msg = v[3];
	if (h->magic != RDMA_HS_MAGIC)
		return -ZL_ERR_PROTO;
	if (h->version != RDMA_HS_VERSION)
		return -ZL_ERR_VERSION;
	if (h->count == 0 || h->count > XPORT_MAX_MAX_INFLIGHT || h->max_msg < RDMA_MSG_SIZE)
		return -ZL_ERR_PROTO;
	return 0;
}

static void rdma_format_peer(struct sockaddr *sa, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa && sa->sa_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	} else if (sa && sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		snprintf(out, len, "?");
	}
}

static int rdma_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* ---- device cache ---- */

static struct rdma_dev *rdma_dev_get(struct ibv_context *verbs, int *err)
{
	struct rdma_dev *d;

	pthread_mutex_lock(&rdma_dev_lock);
	for (d = rdma_devs; d; d = d->next) {
		if (d->verbs == verbs) {
			d->refs++;
			goto out_unlock;
		}
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		*err = -ENOMEM;
		goto out_unlock;
	}
	if (ibv_query_device(verbs, &d->attr)) {
		*err = errno ? -errno : -EIO;
		goto out_free;
	}
	d->pd = ibv_alloc_pd(verbs);
	if (!d->pd) {
		*err = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	d->verbs = verbs;
	d->refs = 1;
	d->next = rdma_devs;
	rdma_devs = d;
	ZL_LOG_DEBUG("xport", "rdma device opened dev=%s", ibv_get_device_name(verbs->device));
	goto out_unlock;

out_free:
	ZL_LOG_ERR("xport", "cannot open RDMA device dev=%s err=%s",
		   ibv_get_device_name(verbs->device), zl_strerror(*err));
	free(d);
	d = NULL;
out_unlock:
	pthread_mutex_unlock(&rdma_dev_lock);
	return d;
}

static void rdma_dev_put(struct rdma_dev *d)
{
	struct rdma_dev **pp;

	if (!d)
		return;
	pthread_mutex_lock(&rdma_dev_lock);
	if (--d->refs == 0) {
		for (pp = &rdma_devs; *pp; pp = &(*pp)->next) {
			if (*pp == d) {
				*pp = d->next;
				break;
			}
		}
		ibv_dealloc_pd(d->pd);
		free(d);
	}
	pthread_mutex_unlock(&rdma_dev_lock);
}

/* ---- memory registration ---- */

static int rdma_reg_region(struct rdma_xdev *xd, void *base, size_t len)
{
	struct ibv_mr *mr;

	if (xd->n_mrs == xd->cap_mrs) {
		uint32_t cap = xd->cap_mrs ? xd->cap_mrs * 2 : 8;
		struct ibv_mr **n = realloc(xd->mrs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		xd->mrs = n;
		xd->cap_mrs = cap;
	}
	mr = ibv_reg_mr(xd->dev->pd, base, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		int rc = errno ? -errno : -ENOMEM;
		struct rlimit rl = {0};

		getrlimit(RLIMIT_MEMLOCK, &rl);
		ZL_LOG_ERR("xport",
			   "cannot register the buffer pool with the RDMA device dev=%s "
			   "bytes=%zu memlock_limit=%llu err=%s; raise the memlock limit "
			   "(ulimit -l, LimitMEMLOCK=, IPC_LOCK capability in a pod) or lower "
			   "pool_bytes",
			   ibv_get_device_name(xd->dev->verbs->device), len,
			   (unsigned long long)rl.rlim_cur, zl_strerror(rc));
		return rc;
	}
	xd->mrs[xd->n_mrs++] = mr;
	return 0;
}

/* Pool callback: a new region is registered with every device in use. */
static int rdma_mem_register(void *arg, void *base, size_t len)
{
	struct zl_xport *x = arg;
	struct rdma_xport *tx = x->impl;
	int rc;

	if (!tx)
		return 0;
	for (struct rdma_xdev *xd = tx->xdevs; xd; xd = xd->next) {
		rc = rdma_reg_region(xd, base, len);
		if (rc)
			return rc; /* MRs of other devices stay until fini: harmless */
	}
	return 0;
}

static struct ibv_mr *rdma_mr_of(const struct rdma_xdev *xd, const void *p, size_t len)
{
	const uint8_t *a = p;

	for (uint32_t i = 0; i < xd->n_mrs; i++) {
		const uint8_t *b = xd->mrs[i]->addr;

		if (a >= b && a + len <= b + xd->mrs[i]->length)
			return xd->mrs[i];
	}
	return NULL;
}

/* ---- message slabs ---- */

static uint8_t *rdma_slab_at(const struct rdma_slab *s, uint32_t i)
{
	return s->chunks[i / RDMA_SLAB_PER_CHUNK] + (size_t)(i % RDMA_SLAB_PER_CHUNK) * RDMA_MSG_SIZE;
}

/* Makes at least n buffers available. */
static int rdma_slab_grow(struct zl_xport *x, struct rdma_slab *s, uint32_t n)
{
	uint32_t need = (n + RDMA_SLAB_PER_CHUNK - 1) / RDMA_SLAB_PER_CHUNK;
	uint8_t **nc;

	if (need <= s->n_chunks)
		return 0;
	nc = realloc(s->chunks, need * sizeof(*nc));
	if (!nc)
		return -ENOMEM;
	s->chunks = nc;
	while (s->n_chunks < need) {
		nc[s->n_chunks] = zl_xport_buf_alloc(x, RDMA_SLAB_CHUNK);
		if (!nc[s->n_chunks])
			return -ENOMEM;
		s->n_chunks++;
		s->n = s->n_chunks * RDMA_SLAB_PER_CHUNK;
	}
	return 0;
}

static void rdma_slab_fini(struct zl_xport *x, struct rdma_slab *s)
{
	for (uint32_t i = 0; i < s->n_chunks; i++)
		zl_xport_buf_free(x, s->chunks[i]);
	free(s->chunks);
	memset(s, 0, sizeof(*s));
}

/* ---- per-transport device state ---- */

static void rdma_cc_cb(void *arg, uint32_t events);

static void rdma_xdev_free(struct zl_xport *x, struct rdma_xdev *xd)
{
	if (xd->srq)
		ibv_destroy_srq(xd->srq);
	rdma_slab_fini(x, &xd->srq_slab);
	for (uint32_t i = 0; i < xd->n_mrs; i++)
		ibv_dereg_mr(xd->mrs[i]);
	free(xd->mrs);
	if (xd->cc_in_loop)
		zl_loop_del(x->loop, &xd->cc_h);
	if (xd->cc)
		ibv_destroy_comp_channel(xd->cc);
	rdma_dev_put(xd->dev);
	free(xd);
}

/* The transport's state for the device of verbs, created on first use (all
 * pool regions get registered then). */
static int rdma_xdev_get(struct rdma_xport *tx, struct ibv_context *verbs, struct rdma_xdev **out)
{
	struct zl_xport *x = tx->x;
	struct rdma_xdev *xd;
	int rc = -ENOMEM;

	for (xd = tx->xdevs; xd; xd = xd->next) {
		if (xd->dev->verbs == verbs) {
			*out = xd;
			return 0;
		}
	}
	xd = calloc(1, sizeof(*xd));
	if (!xd)
		return -ENOMEM;
	xd->tx = tx;
	xd->dev = rdma_dev_get(verbs, &rc);
	if (!xd->dev)
		goto out_free;
	for (uint32_t i = 0; i < x->pool.n_regions; i++) {
		rc = rdma_reg_region(xd, x->pool.regions[i].base, x->pool.regions[i].len);
		if (rc)
			goto out_free;
	}
	xd->cc = ibv_create_comp_channel(verbs);
	if (!xd->cc) {
		rc = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	rc = rdma_set_nonblock(xd->cc->fd);
	if (rc)
		goto out_free;
	rc = zl_loop_add(x->loop, &xd->cc_h, xd->cc->fd, EPOLLIN, rdma_cc_cb, xd);
	if (rc)
		goto out_free;
	xd->cc_in_loop = true;
	xd->next = tx->xdevs;
	tx->xdevs = xd;
	*out = xd;
	return 0;

out_free:
	rdma_xdev_free(x, xd);
	return rc;
}

static int rdma_srq_post(struct rdma_xdev *xd, uint32_t idx)
{
	struct ibv_mr *mr;
	uint8_t *buf = rdma_slab_at(&xd->srq_slab, idx);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = RDMA_MSG_SIZE};
	struct ibv_recv_wr wr = {.wr_id = RDMA_RECV_BIT | idx, .sg_list = &sge, .num_sge = 1}, *bad;

	mr = rdma_mr_of(xd, buf, RDMA_MSG_SIZE);
	if (!mr)
		return -EFAULT;
	sge.lkey = mr->lkey;
	return ibv_post_srq_recv(xd->srq, &wr, &bad) ? -EIO : 0;
}

/* Makes the SRQ hold receives for `want` credits. */
static int rdma_srq_fill(struct zl_xport *x, struct rdma_xdev *xd, uint32_t want)
{
	int rc;

	if (!xd->srq) {
		struct ibv_srq_init_attr a = {0};

		xd->srq_depth = ZL_MIN(RDMA_SRQ_MAX, (uint32_t)xd->dev->attr.max_srq_wr);
		a.attr.max_wr = xd->srq_depth;
		a.attr.max_sge = 1;
		xd->srq = ibv_create_srq(xd->dev->pd, &a);
		if (!xd->srq) {
			rc = errno ? -errno : -ENOMEM;
			ZL_LOG_ERR("xport", "cannot create a shared receive queue dev=%s err=%s",
				   ibv_get_device_name(xd->dev->verbs->device), zl_strerror(rc));
			return rc;
		}
	}
	want = ZL_MIN(want, xd->srq_depth);
	if (xd->srq_posted >= want)
		return 0;
	rc = rdma_slab_grow(x, &xd->srq_slab, want);
	if (rc)
		return rc;
	while (xd->srq_posted < want) {
		/* Buffers are posted in index order and re-posted with their own
		 * index, so indexes below srq_posted are all in use. */
		rc = rdma_srq_post(xd, xd->srq_posted);
		if (rc)
			return rc;
		xd->srq_posted++;
	}
	return 0;
}

/* ---- busy polling ---- */

static void rdma_busy_add(struct rdma_conn *c)
{
	struct rdma_xport *tx = c->tx;

	c->idle = 0;
	if (c->busy || c->base.closing)
		return;
	c->busy = true;
	c->busy_prev = NULL;
	c->busy_next = tx->busy;
	if (tx->busy)
		tx->busy->busy_prev = c;
	tx->busy = c;
}

static void rdma_busy_del(struct rdma_conn *c)
{
	if (!c->busy)
		return;
	if (c->busy_prev)
		c->busy_prev->busy_next = c->busy_next;
	else
		c->tx->busy = c->busy_next;
	if (c->busy_next)
		c->busy_next->busy_prev = c->busy_prev;
	c->busy_prev = c->busy_next = NULL;
	c->busy = false;
}

/* Loop poller: polls every busy CQ; a CQ that stayed empty for a while is
 * armed and leaves the list. Returns nonzero while anything is busy, so the
 * loop does not sleep then. */
static int rdma_poller(void *arg)
{
	struct rdma_xport *tx = arg;
	int work = 0;

	for (struct rdma_conn *c = tx->busy, *next; c; c = next) {
		int n;

		/* Connections are freed only by deferred close work, never
		 * while this runs, so next stays valid. */
		next = c->busy_next;
		zl_xport_conn_get(&c->base);
		n = rdma_conn_poll(c);
		if (n > 0) {
			c->idle = 0;
			work += n;
		} else if (!c->base.closing && ++c->idle >= RDMA_IDLE_SPINS) {
			/* Arm, then look once more: a completion that came
			 * between the last poll and the arming raises no event. */
			ibv_req_notify_cq(c->cq, 0);
			n = rdma_conn_poll(c);
			if (n > 0)
				c->idle = 0;
			else
				rdma_busy_del(c);
			work += n;
		}
		if (c->base.closing)
			rdma_busy_del(c);
		zl_xport_conn_put(&c->base);
	}
	return work + (tx->busy ? 1 : 0);
}

/* Completion channel: a sleeping CQ got a completion. */
static void rdma_cc_cb(void *arg, uint32_t events)
{
	struct rdma_xdev *xd = arg;
	struct ibv_cq *cq;
	void *ctx;

	(void)events;
	while (ibv_get_cq_event(xd->cc, &cq, &ctx) == 0) {
		struct rdma_conn *c = ctx;

		if (++c->cq_unacked >= RDMA_CQ_ACK_EVERY) {
			ibv_ack_cq_events(cq, c->cq_unacked);
			c->cq_unacked = 0;
		}
		if (c->base.closing)
			continue;
		zl_xport_conn_get(&c->base);
		rdma_busy_add(c);
		rdma_conn_poll(c);
		zl_xport_conn_put(&c->base);
	}
}
