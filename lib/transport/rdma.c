/* RDMA transport (rdma-core): librdmacm sets connections up over IP, RC queue
 * pairs of libibverbs carry them. The message format, the handshake and the
 * credit rule are described in rdma_internal.h.
 *
 * Memory: one protection domain per device for the whole process (refcounted
 * device cache, rdma_dev_get/put) and, per transport and device, one memory
 * registration per buffer-pool region (struct rdma_xdev), made when the
 * region appears or the device is first used, never per I/O. Every buffer the
 * transport posts (message slots, receive buffers, bounce buffers) comes from
 * the pool, so one lkey lookup serves everything. The registrations are local
 * only (RDMA_MR_ACCESS: LOCAL_WRITE | MW_BIND): no peer can read or write
 * anything through them, whatever rkey it guesses; a server connection never
 * exposes memory at all.
 *
 * Data movement is server-active: a client request carries a descriptor of
 * its pool buffer; the server RDMA-READs WRITE data out of it
 * (zl_xport_fetch) and RDMA-WRITEs READ data into it before the reply SEND
 * (zl_xport_reply). WRITEs of at most RDMA_INLINE_MAX bytes travel inside the
 * SEND. Caller memory outside the pool is bounced through pool buffers.
 *
 * Exposure of a client buffer (docs/SECURITY.md): each client connection
 * allocates one type 2 memory window per request slot when it is built. A
 * request with a descriptor posts BIND_MW (window = exactly the buffer's
 * bytes, REMOTE_READ for a WRITE's data, REMOTE_WRITE for a READ's
 * destination, rkey key byte incremented so an old rkey never matches) and
 * its SEND in one chain; a type 2 window is usable only through the QP that
 * bound it. The server answers with SEND_WITH_INV of that rkey, so the window
 * is dead when the reply lands (checked: IBV_WC_WITH_INV and the rkey). A
 * reply that did not invalidate (an older server) is held until our own
 * LOCAL_INV completed; on close the windows are deallocated before the QP is
 * destroyed, before any request fails back to its caller. A window is bound
 * to the pool region's registration, or, on a device that checks window
 * accesses against the registration's bounds instead of the window's
 * (rdma_rxe), to a registration of the pool buffer itself, made at the
 * buffer's first use (rdma_bind_mr).
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
 * sent callback, local invalidates), plus one in RDMA_SIGNAL_EVERY and any
 * that leaves less than RDMA_SIGNAL_EVERY free entries, so the queue always
 * drains. Posts that do not fit (send queue full, no credit, no free window)
 * wait in a per-connection FIFO.
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

#define RDMA_RECV_BIT	    (1ull << 63)
#define RDMA_SIGNAL_EVERY   16u
#define RDMA_IDLE_SPINS	    64u
#define RDMA_POLL_BATCH	    32
#define RDMA_CQ_ACK_EVERY   64u
#define RDMA_SLAB_CHUNK	    (1u << 20)
#define RDMA_SRQ_MAX	    16384u
#define RDMA_RD_ATOM_MAX    16u
#define RDMA_INLINE_HDR	    128u /* request max_inline_data: a header-only message */
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
	/* wc_flags bits that say "this receive invalidated invalidated_rkey" */
	unsigned int wc_inv;
	/* The device checks a window's accesses against the bounds of the
	 * registration it is bound to, not the window's own (rdma_rxe): bind
	 * windows to per-buffer registrations there. */
	bool mw_bounds_by_mr;
	uint32_t refs;
};

/* rdma_rxe writes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) into user
 * completions, where libibverbs reads bit 2 as IBV_WC_IP_CSUM_OK and expects
 * IBV_WC_WITH_INV at bit 3; and its responder checks an access through a
 * window against the window's MR, not the window (both seen on Linux 6.12,
 * rdma-core 44; test/rdma/mw_test.c). */
#define RDMA_RXE_VENDOR_ID 0xffffffu

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
struct rdma_bufmr {
	const uint8_t *base; /* NULL: empty slot */
	struct ibv_mr *mr;
};

struct rdma_xdev {
	struct rdma_xdev *next;
	struct rdma_xport *tx;
	struct rdma_dev *dev;
	struct ibv_mr **mrs;
	uint32_t n_mrs, cap_mrs;
	/* dev->mw_bounds_by_mr: one registration per pool buffer that a window
	 * was bound to, made at its first use (buffers never leave the pool):
	 * open addressing on the buffer's start, power-of-two capacity. */
	struct rdma_bufmr *bufmrs;
	uint32_t n_bufmrs, cap_bufmrs;
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
	struct zl_poller poller;
	struct xport_list busy; /* connections being polled */
	uint64_t n_linv;	/* local invalidates posted (replies that did not invalidate) */
};

/* What completes with a send work request. */
enum rdma_wr_kind { RDMA_WR_NONE, RDMA_WR_FETCH, RDMA_WR_REPLY, RDMA_WR_LINV };

struct rdma_wr_ctx {
	uint8_t kind;
	void *ptr;
};

/* Work waiting for a send-queue slot or a credit, in order. */
enum rdma_bl_kind { RDMA_BL_REQ, RDMA_BL_FETCH, RDMA_BL_REPLY, RDMA_BL_LINV };

struct rdma_bl {
	struct rdma_bl *next;
	uint8_t kind;
	bool queued;
};

enum rdma_req_state {
	RDMA_REQ_QUEUED,       /* waiting for a credit, a window or send-queue room */
	RDMA_REQ_SENT,	       /* BIND_MW + SEND posted, waiting for the reply */
	RDMA_REQ_INVALIDATING, /* reply held until our LOCAL_INV of the window completes */
};

/* A type 2 memory window of a client connection: bound to exactly one
 * request's buffer from its SEND to its reply, free (invalidated) otherwise.
 * mw->rkey is the window's current rkey (the one the last bind gave it). */
struct rdma_mw {
	struct ibv_mw *mw;
	struct rdma_mw *next; /* free list */
};

/* Client request slot: the common slot plus the message and descriptor. */
struct rdma_req {
	struct xport_req base;
	struct rdma_bl bl; /* the request, later its LOCAL_INV */
	enum rdma_req_state state;
	bool has_in_desc;
	uint32_t in_len; /* bytes the descriptor offers */
	uint8_t *bounce_in, *bounce_out;
	uint8_t *msg;
	uint32_t msg_len;
	/* The buffer the server may touch (d_len 0: none), with the window
	 * access it gets, and the window bound to it while the request lives. */
	uint64_t d_addr;
	uint32_t d_len;
	unsigned int d_access;
	struct ibv_mr *d_mr; /* what the window is bound to (rdma_bind_mr) */
	struct rdma_mw *mw;
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
	bool rwrite;	 /* RDMA WRITE of rdata before the SEND */
	bool reply_busy; /* reply queued or its completion pending */
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
	struct xport_link busy_link; /* tx->busy */
	bool busy;
	uint32_t idle;
	struct zl_defer work_d, conn_d; /* fetch reports, on_conn */
	bool announced;

	/* send queue */
	uint32_t sq_depth, ring_mask;
	uint64_t sq_posted, sq_done, last_sig;
	struct rdma_wr_ctx *ring;
	struct rdma_bl *bl_head, *bl_tail;

	struct rdma_slab slab; /* send messages, then (client) receive buffers */

	/* client */
	uint32_t n_reqs, credits;
	struct rdma_mw *mws; /* n_reqs windows, allocated with the connection */
	uint32_t n_mws;
	struct rdma_mw *mw_free;
	/* Client: the server invalidates our windows with SEND_WITH_INV.
	 * Server: the client asked for that (RDMA_HS_F_INV). */
	bool peer_inv;

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
	char host[64];
};

/* Handshake in the CM private data. */
struct rdma_hs {
	uint32_t magic;
	uint16_t version;
	uint16_t flags; /* RDMA_HS_F_* */
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

static struct rdma_req *rdma_req_of(struct xport_req *r)
{
	return ZL_CONTAINER_OF(r, struct rdma_req, base);
}

static void rdma_proto_fail(struct rdma_conn *c, const char *why)
{
	if (xport_warn_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "invalid message transport=rdma peer=%s side=%s reason=\"%s\"; "
			    "closing connection",
			    c->base.peer, c->base.server ? "server" : "client", why);
	rdma_conn_close(&c->base, -ZL_ERR_PROTO);
}

static void rdma_hs_encode(const struct rdma_hs *h, uint8_t out[RDMA_HS_SIZE])
{
	uint32_t v[4] = {h->magic, (uint32_t)h->version | ((uint32_t)h->flags << 16), h->count,
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
	h->flags = (uint16_t)(v[1] >> 16);
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
	if (!(d->attr.device_cap_flags &
	      (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) ||
	    d->attr.max_mw <= 0) {
		*err = -EOPNOTSUPP;
		ZL_LOG_ERR("xport",
			   "RDMA device dev=%s has no memory windows of type 2 "
			   "(device_cap_flags=0x%x max_mw=%d); Zipline exposes a client buffer "
			   "to a server only through a window bound for one request "
			   "(docs/SECURITY.md), so it does not use this device: use "
			   "--transport tcp for this node, or a device with memory windows "
			   "(ibv_devinfo -v lists MEM_WINDOW_TYPE_2A or _2B)",
			   ibv_get_device_name(verbs->device), d->attr.device_cap_flags,
			   d->attr.max_mw);
		free(d);
		d = NULL;
		goto out_unlock;
	}
	d->wc_inv = IBV_WC_WITH_INV;
	if (d->attr.vendor_id == RDMA_RXE_VENDOR_ID) {
		d->wc_inv |= IBV_WC_IP_CSUM_OK;
		d->mw_bounds_by_mr = true;
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
	/* Local access only: remote peers reach a client buffer through a
	 * window bound per request, never through this registration. */
	mr = ibv_reg_mr(xd->dev->pd, base, len, RDMA_MR_ACCESS);
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

int xport_rdma_mr_info(struct zl_xport *x, const void *buf, size_t len, uint32_t *rkey,
		       unsigned int *access)
{
	struct rdma_xport *tx = x && x->ops == &xport_rdma_ops ? x->impl : NULL;
	struct ibv_mr *mr = tx && tx->xdevs ? rdma_mr_of(tx->xdevs, buf, len) : NULL;

	if (!mr)
		return -ENOENT;
	*rkey = mr->rkey;
	*access = RDMA_MR_ACCESS;
	return 0;
}

uint64_t xport_rdma_local_invalidates(struct zl_xport *x)
{
	struct rdma_xport *tx = x && x->ops == &xport_rdma_ops ? x->impl : NULL;

	return tx ? tx->n_linv : 0;
}

/* ---- memory windows (client connections) ---- */

static uint32_t rdma_bufmr_slot(const struct rdma_xdev *xd, const uint8_t *base)
{
	uint64_t h = ((uintptr_t)base >> 12) * 0x9e3779b97f4a7c15ull;
	uint32_t i = (uint32_t)(h >> 32) & (xd->cap_bufmrs - 1);

	while (xd->bufmrs[i].base && xd->bufmrs[i].base != base)
		i = (i + 1) & (xd->cap_bufmrs - 1);
	return i;
}

static int rdma_bufmr_grow(struct rdma_xdev *xd)
{
	struct rdma_bufmr *old = xd->bufmrs;
	uint32_t n = xd->cap_bufmrs, cap = n ? n * 2 : 256;

	xd->bufmrs = calloc(cap, sizeof(*xd->bufmrs));
	if (!xd->bufmrs) {
		xd->bufmrs = old;
		return -ENOMEM;
	}
	xd->cap_bufmrs = cap;
	for (uint32_t i = 0; i < n; i++)
		if (old[i].base)
			xd->bufmrs[rdma_bufmr_slot(xd, old[i].base)] = old[i];
	free(old);
	return 0;
}

/* The registration a window over addr..addr+len is bound to: the pool
 * region's, or on a device that bounds windows by their registration
 * (mw_bounds_by_mr) the buffer's own, made once at its first use. */
static struct ibv_mr *rdma_bind_mr(struct rdma_xdev *xd, const void *addr, size_t len)
{
	struct zl_xport *x = xd->tx->x;
	struct rdma_bufmr *e;
	uint8_t *start;
	size_t size;

	if (!xd->dev->mw_bounds_by_mr)
		return rdma_mr_of(xd, addr, len);
	if (!xport_pool_buf_span(&x->pool, addr, len, &start, &size))
		return NULL;
	if (2 * (xd->n_bufmrs + 1) > xd->cap_bufmrs && rdma_bufmr_grow(xd))
		return NULL;
	e = &xd->bufmrs[rdma_bufmr_slot(xd, start)];
	if (e->base)
		return e->mr;
	e->mr = ibv_reg_mr(xd->dev->pd, start, size, RDMA_MR_ACCESS);
	if (!e->mr) {
		if (xport_warn_ok(x))
			ZL_LOG_WARN("xport",
				    "cannot register a pool buffer for memory windows dev=%s "
				    "bytes=%zu err=%s; failing the request",
				    ibv_get_device_name(xd->dev->verbs->device), size,
				    zl_strerror(errno ? -errno : -ENOMEM));
		return NULL;
	}
	e->base = start;
	xd->n_bufmrs++;
	return e->mr;
}

static void rdma_mw_put(struct rdma_conn *c, struct rdma_mw *m)
{
	m->next = c->mw_free;
	c->mw_free = m;
}

/* n type 2 windows for the connection, allocated once, never per I/O. */
static int rdma_mws_init(struct rdma_conn *c, uint32_t n)
{
	c->mws = calloc(n, sizeof(*c->mws));
	if (!c->mws)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct ibv_mw *mw = ibv_alloc_mw(c->xd->dev->pd, IBV_MW_TYPE_2);

		if (!mw) {
			int rc = errno ? -errno : -ENOMEM;

			ZL_LOG_ERR("xport",
				   "cannot allocate RDMA memory windows dev=%s have=%u want=%u "
				   "max_mw=%d err=%s; lower the requests in flight per connection "
				   "or the number of connections",
				   ibv_get_device_name(c->xd->dev->verbs->device), i, n,
				   c->xd->dev->attr.max_mw, zl_strerror(rc));
			return rc;
		}
		c->mws[i].mw = mw;
		c->n_mws = i + 1;
		rdma_mw_put(c, &c->mws[i]);
	}
	return 0;
}

/* Deallocating a window invalidates it (bound or not) and drops its hold on
 * the QP, so this runs before the QP is destroyed. */
static void rdma_mws_fini(struct rdma_conn *c)
{
	for (uint32_t i = 0; i < c->n_mws; i++)
		if (ibv_dealloc_mw(c->mws[i].mw))
			ZL_LOG_ERR("xport", "cannot deallocate an RDMA memory window peer=%s err=%s",
				   c->base.peer, zl_strerror(-errno));
	free(c->mws);
	c->mws = NULL;
	c->n_mws = 0;
	c->mw_free = NULL;
}

/* ---- message slabs ---- */

static uint8_t *rdma_slab_at(const struct rdma_slab *s, uint32_t i)
{
	return s->chunks[i / RDMA_SLAB_PER_CHUNK] +
	       (size_t)(i % RDMA_SLAB_PER_CHUNK) * RDMA_MSG_SIZE;
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
	for (uint32_t i = 0; i < xd->cap_bufmrs; i++)
		if (xd->bufmrs[i].base)
			ibv_dereg_mr(xd->bufmrs[i].mr);
	free(xd->bufmrs);
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
	c->idle = 0;
	if (c->busy || c->base.closing)
		return;
	c->busy = true;
	xport_list_push(&c->tx->busy, &c->busy_link);
}

static void rdma_busy_del(struct rdma_conn *c)
{
	if (!c->busy)
		return;
	xport_list_del(&c->tx->busy, &c->busy_link);
	c->busy = false;
}

/* Loop poller: polls every busy CQ; a CQ that stayed empty for a while is
 * armed and leaves the list. Returns nonzero while anything is busy, so the
 * loop does not sleep then. */
static int rdma_poller(void *arg)
{
	struct rdma_xport *tx = arg;
	int work = 0;

	for (struct xport_link *l = tx->busy.head, *next; l; l = next) {
		struct rdma_conn *c = ZL_CONTAINER_OF(l, struct rdma_conn, busy_link);
		int n;

		/* Connections are freed only by deferred close work, never
		 * while this runs, so next stays valid. */
		next = l->next;
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
	return work + (tx->busy.head ? 1 : 0);
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

/* ---- send queue ---- */

static uint32_t rdma_sq_room(const struct rdma_conn *c)
{
	return c->sq_depth - (uint32_t)(c->sq_posted - c->sq_done);
}

/* Posts a chain of n work requests; only the last may be signalled and
 * carries (kind, ptr). Returns 0, -EAGAIN (no room: retry from the backlog)
 * or -ZL_ERR_CONN (the connection is closing now). */
static int rdma_post(struct rdma_conn *c, struct ibv_send_wr *wrs, uint32_t n,
		     enum rdma_wr_kind kind, void *ptr, bool need_signal)
{
	struct ibv_send_wr *w, *bad = NULL;
	uint64_t seq = c->sq_posted, sig_seq = 0;
	bool sig = false;
	int rc;

	if (c->base.closing)
		return -ZL_ERR_CONN;
	if (rdma_sq_room(c) < n)
		return -EAGAIN;
	for (w = wrs; w; w = w->next, seq++) {
		struct rdma_wr_ctx *e = &c->ring[seq & c->ring_mask];

		w->wr_id = seq;
		e->kind = RDMA_WR_NONE;
		e->ptr = NULL;
		if (w->next)
			continue;
		/* The last one: signalled when someone waits for it, and often
		 * enough that the send queue drains. */
		sig = need_signal || seq - c->last_sig >= RDMA_SIGNAL_EVERY ||
		      rdma_sq_room(c) - n < RDMA_SIGNAL_EVERY;
		if (sig) {
			w->send_flags |= IBV_SEND_SIGNALED;
			sig_seq = seq;
		}
		e->kind = (uint8_t)kind;
		e->ptr = ptr;
	}
	if (ibv_post_send(c->id->qp, wrs, &bad)) {
		rc = errno ? -errno : -EIO;
		if (xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "RDMA post_send failed transport=rdma peer=%s err=%s; closing "
				    "connection",
				    c->base.peer, zl_strerror(rc));
		rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return -ZL_ERR_CONN;
	}
	if (sig)
		c->last_sig = sig_seq;
	c->sq_posted += n;
	rdma_busy_add(c);
	return 0;
}

static void rdma_bl_push(struct rdma_conn *c, struct rdma_bl *b, enum rdma_bl_kind kind)
{
	b->kind = (uint8_t)kind;
	b->next = NULL;
	b->queued = true;
	if (c->bl_tail)
		c->bl_tail->next = b;
	else
		c->bl_head = b;
	c->bl_tail = b;
}

static int rdma_recv_post(struct rdma_conn *c, uint32_t idx)
{
	uint8_t *buf = rdma_slab_at(&c->slab, c->n_reqs + idx);
	struct ibv_mr *mr = rdma_mr_of(c->xd, buf, RDMA_MSG_SIZE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = RDMA_MSG_SIZE};
	struct ibv_recv_wr wr = {.wr_id = RDMA_RECV_BIT | idx, .sg_list = &sge, .num_sge = 1}, *bad;

	if (!mr)
		return -EFAULT;
	sge.lkey = mr->lkey;
	return ibv_post_recv(c->id->qp, &wr, &bad) ? -EIO : 0;
}

/* ---- client requests ---- */

/* Request layer hook: the bounce buffers go before the callback runs. */
static void rdma_req_release(struct zl_xport_conn *bc, struct xport_req *br)
{
	struct rdma_req *r = rdma_req_of(br);

	if (r->bounce_in)
		zl_xport_buf_free(bc->x, r->bounce_in);
	if (r->bounce_out)
		zl_xport_buf_free(bc->x, r->bounce_out);
	r->bounce_in = r->bounce_out = NULL;
	/* A window still bound here belongs to a connection whose QP is gone
	 * (close work): it is deallocated with the connection. */
	r->mw = NULL;
	r->d_len = 0;
}

/* Posts the request: with a descriptor, BIND_MW of a free window to exactly
 * the buffer (new rkey: key byte incremented) chained before the SEND that
 * carries that rkey, so the window exists from the SEND on, only on this QP. */
static int rdma_req_post(struct rdma_conn *c, struct rdma_req *r)
{
	struct ibv_mr *mr = rdma_mr_of(c->xd, r->msg, r->msg_len);
	struct ibv_sge sge = {.addr = (uintptr_t)r->msg, .length = r->msg_len};
	struct ibv_send_wr w[2];
	struct rdma_mw *m = NULL;
	uint32_t n = 0, rkey = 0;
	int rc;

	if (!c->credits)
		return -EAGAIN;
	memset(w, 0, sizeof(w));
	if (r->d_len) {
		struct zl_wire_rdma_desc d;

		m = c->mw_free;
		if (!m)
			return -EAGAIN; /* windows still being invalidated locally */
		rkey = ibv_inc_rkey(m->mw->rkey);
		w[0].opcode = IBV_WR_BIND_MW;
		w[0].bind_mw.mw = m->mw;
		w[0].bind_mw.rkey = rkey;
		w[0].bind_mw.bind_info.mr = r->d_mr;
		w[0].bind_mw.bind_info.addr = r->d_addr;
		w[0].bind_mw.bind_info.length = r->d_len;
		w[0].bind_mw.bind_info.mw_access_flags = r->d_access;
		w[0].next = &w[1];
		n++;
		d = (struct zl_wire_rdma_desc){.addr = r->d_addr, .rkey = rkey, .len = r->d_len};
		zl_wire_rdma_desc_encode(&d, r->msg + ZL_WIRE_HDR_SIZE);
	}
	sge.lkey = mr->lkey;
	w[n].sg_list = &sge;
	w[n].num_sge = 1;
	w[n].opcode = IBV_WR_SEND;
	if (r->msg_len <= c->max_inline)
		w[n].send_flags = IBV_SEND_INLINE;
	n++;
	rc = rdma_post(c, w, n, RDMA_WR_NONE, NULL, false);
	if (rc)
		return rc;
	if (m) {
		/* The provider names the window by its current rkey in the
		 * next bind or invalidate: keep it current. */
		c->mw_free = m->next;
		m->mw->rkey = rkey;
		r->mw = m;
	}
	c->credits--;
	r->state = RDMA_REQ_SENT;
	return 0;
}

/* LOCAL_INV of the window of r (the server's reply did not invalidate it);
 * the request completes when this does. */
static int rdma_linv_post(struct rdma_conn *c, struct rdma_req *r)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_LOCAL_INV};

	int rc;

	wr.invalidate_rkey = r->mw->mw->rkey;
	rc = rdma_post(c, &wr, 1, RDMA_WR_LINV, r, true);
	if (!rc)
		c->tx->n_linv++;
	return rc;
}

/* Checks and delivers the data a server RDMA-WROTE into the reply buffer of
 * r (h has ZL_WF_RDMA): only once no window covers it any more. Updates
 * *status and turns h into what TCP delivers. */
static void rdma_cli_data(struct rdma_conn *c, struct rdma_req *r, int *status,
			  struct zl_wire_hdr *h)
{
	struct xport_req *br = &r->base;
	const uint8_t *src = r->bounce_in ? r->bounce_in : br->in;

	if (!(h->flags & ZL_WF_RDMA))
		return;
	h->flags &= (uint8_t)~ZL_WF_RDMA;
	h->payload_len = h->length;
	if (*status)
		return;
	if (h->length > r->in_len)
		*status = -ZL_ERR_PROTO;
	else if (zl_crc32c(src, h->length) != h->payload_crc)
		*status = -ZL_ERR_CORRUPT;
	else if (r->bounce_in)
		memcpy(br->in, r->bounce_in, h->length);
	if (*status && xport_warn_ok(c->base.x))
		ZL_LOG_WARN("xport",
			    "bad reply data transport=rdma peer=%s op=%s length=%u in_cap=%u "
			    "err=%s; failing the request",
			    c->base.peer, zl_wire_op_name(h->opcode), h->length, br->in_cap,
			    zl_errname(*status));
}

/* The LOCAL_INV of r's window completed: the buffer is ours again. */
static void rdma_linv_done(struct rdma_conn *c, struct rdma_req *r)
{
	struct xport_req *br = &r->base;
	int status = br->held_status;

	rdma_mw_put(c, r->mw);
	r->mw = NULL;
	rdma_cli_data(c, r, &status, &br->held_rep);
	xport_req_finish(&c->base, br, status, status ? NULL : &br->held_rep);
}

static void rdma_cli_recv(struct rdma_conn *c, const struct ibv_wc *wc)
{
	uint32_t idx = (uint32_t)(wc->wr_id & 0xffffffffu), len = wc->byte_len;
	const uint8_t *buf = rdma_slab_at(&c->slab, c->n_reqs + idx);
	/* Remote invalidate: never together with immediate data (which shares
	 * the field with invalidated_rkey). */
	bool inv = (wc->wc_flags & c->xd->dev->wc_inv) && !(wc->wc_flags & IBV_WC_WITH_IMM);
	struct zl_wire_hdr h;
	const char *why = "?";
	struct xport_req *br;
	struct rdma_req *r;
	int status = 0;

	if (zl_wire_decode(buf, len, &h, &why)) {
		rdma_proto_fail(c, why);
		return;
	}
	if (!(h.flags & ZL_WF_REPLY)) {
		rdma_proto_fail(c, "request on a client connection");
		return;
	}
	br = xport_req_lookup(&c->base, &h, &why);
	if (!br) {
		rdma_proto_fail(c, why);
		return;
	}
	r = rdma_req_of(br);
	if (r->state != RDMA_REQ_SENT) {
		rdma_proto_fail(c, "reply to a request that was not sent or was answered already");
		return;
	}
	if (inv && (!r->mw || wc->invalidated_rkey != r->mw->mw->rkey)) {
		/* Only the request's own window may die with its reply. */
		rdma_proto_fail(c, "reply invalidated an rkey that is not its request's window");
		return;
	}
	if (h.flags & ZL_WF_RDMA) {
		if (!r->has_in_desc) {
			rdma_proto_fail(c, "RDMA reply to a request without a descriptor");
			return;
		}
	} else if (h.payload_len) {
		if (len < ZL_WIRE_HDR_SIZE + h.payload_len) {
			rdma_proto_fail(c, "message shorter than its payload");
			return;
		}
		if (!br->in || h.payload_len > br->in_cap)
			status = -ZL_ERR_PROTO;
		else if (zl_crc32c(buf + ZL_WIRE_HDR_SIZE, h.payload_len) != h.payload_crc)
			status = -ZL_ERR_CORRUPT;
		else
			memcpy(br->in, buf + ZL_WIRE_HDR_SIZE, h.payload_len);
		if (status && xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "bad reply data transport=rdma peer=%s op=%s payload_len=%u "
				    "in_cap=%u err=%s; failing the request",
				    c->base.peer, zl_wire_op_name(h.opcode), h.payload_len,
				    br->in_cap, zl_errname(status));
	}
	c->credits++;
	if (rdma_recv_post(c, idx)) {
		rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	if (r->mw && !inv) {
		/* The server left the window valid (an older peer, or one that
		 * misbehaves): invalidate it ourselves; the caller gets the
		 * buffer back when that completed. */
		xport_req_hold(br, status, &h);
		r->state = RDMA_REQ_INVALIDATING;
		rdma_bl_push(c, &r->bl, RDMA_BL_LINV);
		rdma_bl_run(c);
		return;
	}
	if (r->mw) {
		rdma_mw_put(c, r->mw);
		r->mw = NULL;
	}
	rdma_cli_data(c, r, &status, &h);
	xport_req_finish(&c->base, br, status, status ? NULL : &h);
}

static int rdma_request(struct zl_xport_conn *bc, struct xport_req *br,
			const struct zl_wire_hdr *hdr, const void *out, uint32_t out_len)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct zl_xport *x = bc->x;
	struct rdma_req *r = rdma_req_of(br);
	struct zl_wire_hdr h = *hdr;
	bool desc = false;

	r->has_in_desc = false;
	r->in_len = 0;
	r->d_len = 0;
	r->mw = NULL;
	if (hdr->opcode == ZL_OP_READ && br->in_cap) {
		/* The server RDMA-WRITEs the data straight into `in`. */
		uint32_t n = ZL_MIN(br->in_cap, ZL_MIN(hdr->length, ZL_WIRE_MAX_IO));
		uint8_t *dst = br->in;

		if (!zl_xport_buf_owned(x, dst, n)) {
			r->bounce_in = zl_xport_buf_alloc(x, n);
			if (!r->bounce_in)
				return -ENOMEM;
			dst = r->bounce_in;
		}
		r->d_addr = (uintptr_t)dst;
		r->d_len = n;
		r->d_access = IBV_ACCESS_REMOTE_WRITE;
		desc = true;
		r->has_in_desc = true;
		r->in_len = n;
		h.payload_crc = 0;
	} else if (out_len > RDMA_INLINE_MAX) {
		/* The server RDMA-READs the data out of `out`. */
		const uint8_t *src = out;

		if (!zl_xport_buf_owned(x, out, out_len)) {
			r->bounce_out = zl_xport_buf_alloc(x, out_len);
			if (!r->bounce_out)
				return -ENOMEM;
			memcpy(r->bounce_out, out, out_len);
			src = r->bounce_out;
		}
		r->d_addr = (uintptr_t)src;
		r->d_len = out_len;
		r->d_access = IBV_ACCESS_REMOTE_READ;
		desc = true;
	}
	if (desc) {
		r->d_mr = rdma_bind_mr(c->xd, (const void *)(uintptr_t)r->d_addr, r->d_len);
		if (!r->d_mr) {
			r->d_len = 0;
			return -ENOMEM; /* the bounce buffers go with the slot */
		}
	}
	r->msg = rdma_slab_at(&c->slab, br->slot);
	if (desc) {
		/* The descriptor (with the window's rkey) is written when the
		 * request is posted. */
		h.flags |= ZL_WF_RDMA;
		h.payload_len = ZL_WIRE_RDMA_DESC_SIZE;
		zl_wire_encode(&h, r->msg);
		r->msg_len = ZL_WIRE_HDR_SIZE + ZL_WIRE_RDMA_DESC_SIZE;
	} else {
		zl_wire_encode(&h, r->msg);
		if (out_len)
			memcpy(r->msg + ZL_WIRE_HDR_SIZE, out, out_len);
		r->msg_len = ZL_WIRE_HDR_SIZE + out_len;
	}
	r->state = RDMA_REQ_QUEUED;
	rdma_bl_push(c, &r->bl, RDMA_BL_REQ);
	rdma_bl_run(c);
	return 0;
}

/* ---- server requests ---- */

/* A server slot is free again once its reply is out (or needs no
 * completion) and its payload is done with. */
static void rdma_sreq_maybe_put(struct rdma_conn *c, struct rdma_sreq *s)
{
	if (s->state != RDMA_SREQ_SENDING || s->reply_busy || s->pl_state != RDMA_PL_NONE)
		return;
	s->state = RDMA_SREQ_FREE;
	s->next = c->sreq_free;
	c->sreq_free = s;
}

static void rdma_announce(struct rdma_conn *c)
{
	if (c->announced)
		return;
	c->announced = true;
	if (c->base.sops->on_conn)
		c->base.sops->on_conn(c->base.sarg, &c->base);
}

static void rdma_announce_cb(void *arg)
{
	struct rdma_conn *c = arg;

	if (!c->base.closing)
		rdma_announce(c);
}

static void rdma_srv_recv(struct rdma_conn *c, const uint8_t *buf, uint32_t len)
{
	struct zl_wire_hdr h;
	struct zl_wire_rdma_desc d = {0};
	const char *why = "?";
	struct rdma_sreq *s;
	bool has_desc;
	uint64_t slot;

	rdma_announce(c);
	if (c->base.closing)
		return;
	if (zl_wire_decode(buf, len, &h, &why)) {
		rdma_proto_fail(c, why);
		return;
	}
	if (h.flags & ZL_WF_REPLY) {
		rdma_proto_fail(c, "reply on a server connection");
		return;
	}
	slot = h.req_id & 0xffffffffu;
	if (slot >= c->peer_slots || c->by_slot[slot]) {
		rdma_proto_fail(c, "request id out of range or still in use");
		return;
	}
	if (c->srv_pending >= c->granted || !c->sreq_free) {
		rdma_proto_fail(c, "more requests than credits");
		return;
	}
	has_desc = h.flags & ZL_WF_RDMA;
	if (has_desc) {
		if (len < ZL_WIRE_HDR_SIZE + ZL_WIRE_RDMA_DESC_SIZE ||
		    zl_wire_rdma_desc_decode(buf + ZL_WIRE_HDR_SIZE, ZL_WIRE_RDMA_DESC_SIZE, &d)) {
			rdma_proto_fail(c, "bad RDMA descriptor");
			return;
		}
		if (h.opcode != ZL_OP_READ && d.len != h.length) {
			rdma_proto_fail(c, "RDMA descriptor length differs from the request");
			return;
		}
	} else if (len < ZL_WIRE_HDR_SIZE + h.payload_len) {
		rdma_proto_fail(c, "message shorter than its payload");
		return;
	}
	s = c->sreq_free;
	c->sreq_free = s->next;
	s->next = NULL;
	s->state = RDMA_SREQ_ACTIVE;
	s->req_id = h.req_id;
	s->peer_slot = (uint32_t)slot;
	s->opcode = h.opcode;
	s->has_desc = has_desc;
	s->desc = d;
	s->data_crc = h.payload_crc;
	s->sent_cb = NULL;
	s->reply_bounce = s->fetch_bounce = NULL;
	s->rwrite = false;
	s->reply_busy = false;
	s->msg_len = 0;
	c->by_slot[slot] = s;
	c->srv_pending++;
	/* The server sees the header TCP would have delivered. */
	if (has_desc && h.opcode == ZL_OP_READ) {
		h.payload_len = 0;
		h.payload_crc = 0;
	} else if (has_desc) {
		h.payload_len = h.length;
	}
	h.flags &= (uint8_t)~ZL_WF_RDMA;
	s->data_len = h.payload_len;
	s->pl_state = h.payload_len ? RDMA_PL_UNDECIDED : RDMA_PL_NONE;
	c->cur_inline = has_desc ? NULL : buf + ZL_WIRE_HDR_SIZE;
	c->base.sops->on_request(c->base.sarg, &c->base, &h, h.payload_len ? &s->pl : NULL);
	c->cur_inline = NULL;
	if (s->pl_state == RDMA_PL_UNDECIDED) {
		if (!c->base.closing && xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "on_request neither fetched nor discarded the payload "
				    "transport=rdma peer=%s op=%s; discarding it (server bug)",
				    c->base.peer, zl_wire_op_name(h.opcode));
		s->pl_state = RDMA_PL_NONE;
		rdma_sreq_maybe_put(c, s);
	}
}

static int rdma_fetch_post(struct rdma_conn *c, struct rdma_sreq *s)
{
	uint8_t *dst = s->fetch_bounce ? s->fetch_bounce : s->fetch_buf;
	struct ibv_mr *mr = rdma_mr_of(c->xd, dst, s->data_len);
	struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = s->data_len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};

	wr.wr.rdma.remote_addr = s->desc.addr;
	wr.wr.rdma.rkey = s->desc.rkey;
	return rdma_post(c, &wr, 1, RDMA_WR_FETCH, s, true);
}

static void rdma_fetch_done(struct rdma_conn *c, struct rdma_sreq *s)
{
	zl_xport_done_cb cb = s->fetch_cb;
	void *arg = s->fetch_arg;
	int status = 0;

	if (s->fetch_bounce) {
		memcpy(s->fetch_buf, s->fetch_bounce, s->data_len);
		zl_xport_buf_free(c->base.x, s->fetch_bounce);
		s->fetch_bounce = NULL;
	}
	if (zl_crc32c(s->fetch_buf, s->data_len) != s->data_crc) {
		status = -ZL_ERR_CORRUPT;
		if (xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "payload CRC mismatch transport=rdma peer=%s op=%s len=%u "
				    "req_id=%llu",
				    c->base.peer, zl_wire_op_name(s->opcode), s->data_len,
				    (unsigned long long)s->req_id);
	}
	s->pl_state = RDMA_PL_NONE;
	rdma_sreq_maybe_put(c, s);
	cb(arg, status);
}

static int rdma_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, zl_xport_done_cb cb,
		      void *arg)
{
	struct rdma_sreq *s = ZL_CONTAINER_OF(p, struct rdma_sreq, pl);
	struct rdma_conn *c = s->c;
	struct zl_xport *x = c->base.x;

	if (s->pl_state != RDMA_PL_UNDECIDED || len < s->data_len)
		return -ZL_ERR_INVAL; /* outside on_request, twice, or too small */
	s->fetch_buf = buf;
	s->fetch_cb = cb;
	s->fetch_arg = arg;
	if (!s->has_desc) {
		/* Inline: the data is in the receive buffer right now. */
		memcpy(buf, c->cur_inline, s->data_len);
		s->fetch_status = 0;
		if (zl_crc32c(buf, s->data_len) != s->data_crc) {
			s->fetch_status = -ZL_ERR_CORRUPT;
			if (xport_warn_ok(x))
				ZL_LOG_WARN("xport",
					    "payload CRC mismatch transport=rdma peer=%s op=%s "
					    "len=%u",
					    c->base.peer, zl_wire_op_name(s->opcode), s->data_len);
		}
		s->pl_state = RDMA_PL_DONE;
		s->next = NULL;
		if (c->done_tail)
			c->done_tail->next = s;
		else
			c->done_head = s;
		c->done_tail = s;
		zl_loop_defer(c->loop, &c->work_d, rdma_work, c);
		return 0;
	}
	if (!zl_xport_buf_owned(x, buf, s->data_len)) {
		s->fetch_bounce = zl_xport_buf_alloc(x, s->data_len);
		if (!s->fetch_bounce)
			return -ENOMEM;
	}
	s->pl_state = RDMA_PL_FETCHING;
	rdma_bl_push(c, &s->bl_fetch, RDMA_BL_FETCH);
	rdma_bl_run(c);
	return 0;
}

static void rdma_discard(struct zl_xport_payload *p)
{
	struct rdma_sreq *s = ZL_CONTAINER_OF(p, struct rdma_sreq, pl);

	if (s->pl_state == RDMA_PL_UNDECIDED)
		s->pl_state = RDMA_PL_NONE;
}

static int rdma_reply_post(struct rdma_conn *c, struct rdma_sreq *s)
{
	struct ibv_send_wr w[2];
	struct ibv_sge sg[2];
	struct ibv_mr *mr;
	uint32_t n = 0;
	bool inl = s->msg_len <= c->max_inline, need;
	int rc;

	memset(w, 0, sizeof(w));
	if (s->rwrite) {
		const uint8_t *src = s->reply_bounce ? s->reply_bounce : s->rdata;

		mr = rdma_mr_of(c->xd, src, s->rlen);
		sg[0] =
		    (struct ibv_sge){.addr = (uintptr_t)src, .length = s->rlen, .lkey = mr->lkey};
		w[0].sg_list = &sg[0];
		w[0].num_sge = 1;
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].wr.rdma.remote_addr = s->desc.addr;
		w[0].wr.rdma.rkey = s->desc.rkey;
		w[0].next = &w[1];
		n++;
	}
	mr = rdma_mr_of(c->xd, s->msg, s->msg_len);
	sg[n] = (struct ibv_sge){.addr = (uintptr_t)s->msg, .length = s->msg_len, .lkey = mr->lkey};
	w[n].sg_list = &sg[n];
	w[n].num_sge = 1;
	w[n].opcode = IBV_WR_SEND;
	w[n].send_flags = inl ? IBV_SEND_INLINE : 0;
	if (s->has_desc && c->peer_inv) {
		/* The client's window for this request dies with the reply
		 * (remote invalidate, as NVMe-oF and iSER do). */
		w[n].opcode = IBV_WR_SEND_WITH_INV;
		w[n].invalidate_rkey = s->desc.rkey;
	}
	n++;
	/* The SEND's completion implies the WRITE's (same QP, in order). */
	need = s->sent_cb || s->reply_bounce || !inl;
	rc = rdma_post(c, w, n, need ? RDMA_WR_REPLY : RDMA_WR_NONE, s, need);
	if (rc)
		return rc;
	if (!need) {
		s->reply_busy = false;
		rdma_sreq_maybe_put(c, s);
	}
	return 0;
}

static void rdma_reply_done(struct rdma_conn *c, struct rdma_sreq *s, int status)
{
	zl_xport_done_cb cb = s->sent_cb;
	void *arg = s->sent_arg;

	if (s->reply_bounce)
		zl_xport_buf_free(c->base.x, s->reply_bounce);
	s->reply_bounce = NULL;
	s->sent_cb = NULL;
	s->reply_busy = false;
	rdma_sreq_maybe_put(c, s);
	if (cb)
		cb(arg, status);
}

static int rdma_reply(struct zl_xport_conn *bc, const struct zl_wire_hdr *rep, const void *data,
		      uint32_t len, zl_xport_done_cb sent_cb, void *arg)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct zl_xport *x = bc->x;
	uint64_t slot = rep->req_id & 0xffffffffu;
	struct rdma_sreq *s = slot < c->peer_slots ? c->by_slot[slot] : NULL;
	struct zl_wire_hdr h;
	bool inline_data = len > 0;

	if (!s || s->req_id != rep->req_id || s->state != RDMA_SREQ_ACTIVE) {
		if (xport_warn_ok(x))
			ZL_LOG_ERR("xport",
				   "reply to a request that is not pending transport=rdma peer=%s "
				   "req_id=%llu (server bug)",
				   bc->peer, (unsigned long long)rep->req_id);
		return -ZL_ERR_INVAL;
	}
	h = *rep;
	s->rwrite = false;
	s->reply_bounce = NULL;
	if (len && s->has_desc && s->opcode == ZL_OP_READ) {
		/* Data goes by RDMA WRITE into the client's buffer. */
		inline_data = false;
		h.flags |= ZL_WF_RDMA;
		h.payload_len = 0;
		if (len <= s->desc.len) {
			s->rwrite = true;
			if (!zl_xport_buf_owned(x, data, len)) {
				s->reply_bounce = zl_xport_buf_alloc(x, len);
				if (!s->reply_bounce)
					return -ENOMEM;
				memcpy(s->reply_bounce, data, len);
			}
		} else if (xport_warn_ok(x)) {
			/* The client fails the request (-ZL_ERR_PROTO). */
			ZL_LOG_WARN("xport",
				    "reply data larger than the client's buffer transport=rdma "
				    "peer=%s len=%u buffer=%u; data not sent",
				    bc->peer, len, s->desc.len);
		}
	} else if (len > RDMA_INLINE_MAX) {
		if (xport_warn_ok(x))
			ZL_LOG_ERR("xport",
				   "reply data without a client descriptor is too large "
				   "transport=rdma op=%s len=%u max=%u",
				   zl_wire_op_name(rep->opcode), len, RDMA_INLINE_MAX);
		return -ZL_ERR_INVAL;
	}
	zl_wire_encode(&h, s->msg);
	if (inline_data)
		memcpy(s->msg + ZL_WIRE_HDR_SIZE, data, len);
	s->msg_len = ZL_WIRE_HDR_SIZE + (inline_data ? len : 0);
	s->rdata = data;
	s->rlen = len;
	s->sent_cb = sent_cb;
	s->sent_arg = arg;
	c->by_slot[s->peer_slot] = NULL;
	c->srv_pending--;
	s->state = RDMA_SREQ_SENDING;
	s->reply_busy = true;
	rdma_bl_push(c, &s->bl_reply, RDMA_BL_REPLY);
	rdma_bl_run(c);
	return 0;
}

static void rdma_bl_run(struct rdma_conn *c)
{
	while (c->bl_head && !c->base.closing) {
		struct rdma_bl *b = c->bl_head;
		int rc;

		switch (b->kind) {
		case RDMA_BL_REQ:
			rc = rdma_req_post(c, ZL_CONTAINER_OF(b, struct rdma_req, bl));
			break;
		case RDMA_BL_FETCH:
			rc = rdma_fetch_post(c, ZL_CONTAINER_OF(b, struct rdma_sreq, bl_fetch));
			break;
		case RDMA_BL_LINV:
			rc = rdma_linv_post(c, ZL_CONTAINER_OF(b, struct rdma_req, bl));
			break;
		default:
			/* rdma_reply_post may put the slot: unlink first. */
			c->bl_head = b->next;
			if (!c->bl_head)
				c->bl_tail = NULL;
			rc = rdma_reply_post(c, ZL_CONTAINER_OF(b, struct rdma_sreq, bl_reply));
			if (rc == -EAGAIN) {
				b->next = c->bl_head;
				c->bl_head = b;
				if (!c->bl_tail)
					c->bl_tail = b;
				return;
			}
			b->queued = false;
			if (rc)
				return;
			continue;
		}
		if (rc == -EAGAIN)
			return;
		c->bl_head = b->next;
		if (!c->bl_head)
			c->bl_tail = NULL;
		b->queued = false;
		if (rc)
			return;
	}
}

/* ---- completions ---- */

static void rdma_wc(struct rdma_conn *c, const struct ibv_wc *wc)
{
	bool ok = wc->status == IBV_WC_SUCCESS;

	if (wc->wr_id & RDMA_RECV_BIT) {
		uint32_t idx = (uint32_t)(wc->wr_id & 0xffffffffu);

		if (c->base.server) {
			if (ok && !c->base.closing)
				rdma_srv_recv(c, rdma_slab_at(&c->xd->srq_slab, idx), wc->byte_len);
			/* Shared receives always go back to the SRQ. */
			if (rdma_srq_post(c->xd, idx))
				ZL_LOG_ERR("xport", "cannot re-post a shared receive buffer idx=%u",
					   idx);
		} else if (ok && !c->base.closing) {
			rdma_cli_recv(c, wc);
		}
	} else if (ok) {
		struct rdma_wr_ctx *e = &c->ring[wc->wr_id & c->ring_mask];
		uint8_t kind = e->kind;
		void *ptr = e->ptr;

		c->sq_done = wc->wr_id + 1;
		e->kind = RDMA_WR_NONE;
		if (c->base.closing)
			return; /* the close work reports everything */
		if (kind == RDMA_WR_FETCH)
			rdma_fetch_done(c, ptr);
		else if (kind == RDMA_WR_REPLY)
			rdma_reply_done(c, ptr, 0);
		else if (kind == RDMA_WR_LINV)
			rdma_linv_done(c, ptr);
	}
	if (!ok && !c->base.closing) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR && xport_warn_ok(c->base.x))
			ZL_LOG_WARN("xport",
				    "RDMA work request failed transport=rdma peer=%s status=\"%s\" "
				    "opcode=%d; closing connection",
				    c->base.peer, ibv_wc_status_str(wc->status), (int)wc->opcode);
		rdma_conn_close(&c->base, -ZL_ERR_CONN);
	}
}

/* Polls one batch of completions; returns how many. The caller holds a
 * reference. */
static int rdma_conn_poll(struct rdma_conn *c)
{
	struct ibv_wc wc[RDMA_POLL_BATCH];
	int n;

	if (c->base.closing || !c->cq)
		return 0;
	n = ibv_poll_cq(c->cq, RDMA_POLL_BATCH, wc);
	if (n < 0) {
		rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return 0;
	}
	for (int i = 0; i < n; i++)
		rdma_wc(c, &wc[i]);
	if (n > 0 && !c->base.closing)
		rdma_bl_run(c);
	return n;
}

/* Deferred work: inline fetches report here, never inside zl_xport_fetch. */
static void rdma_work(void *arg)
{
	struct rdma_conn *c = arg;

	zl_xport_conn_get(&c->base);
	while (c->done_head && !c->base.closing) {
		struct rdma_sreq *s = c->done_head;
		zl_xport_done_cb cb = s->fetch_cb;
		void *cb_arg = s->fetch_arg;
		int status = s->fetch_status;

		c->done_head = s->next;
		if (!c->done_head)
			c->done_tail = NULL;
		s->pl_state = RDMA_PL_NONE;
		rdma_sreq_maybe_put(c, s);
		cb(cb_arg, status);
	}
	zl_xport_conn_put(&c->base);
}

/* ---- connection life cycle ---- */

static uint32_t rdma_pow2(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* Releases the verbs and CM resources; safe to run twice. */
static void rdma_conn_teardown(struct rdma_conn *c)
{
	if (c->ch_in_loop) {
		zl_loop_del(c->loop, &c->ch_h);
		c->ch_in_loop = false;
	}
	rdma_mws_fini(c);
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq) {
		struct ibv_wc wc[RDMA_POLL_BATCH];
		int n;

		/* Receives this QP took from the SRQ go back to it. */
		while ((n = ibv_poll_cq(c->cq, RDMA_POLL_BATCH, wc)) > 0) {
			for (int i = 0; i < n; i++)
				if (c->base.server && (wc[i].wr_id & RDMA_RECV_BIT))
					rdma_srq_post(c->xd, (uint32_t)(wc[i].wr_id & 0xffffffffu));
		}
		if (c->cq_unacked)
			ibv_ack_cq_events(c->cq, c->cq_unacked);
		c->cq_unacked = 0;
		if (ibv_destroy_cq(c->cq))
			ZL_LOG_ERR("xport", "cannot destroy a completion queue peer=%s err=%s",
				   c->base.peer, zl_strerror(-errno));
		c->cq = NULL;
	}
	if (c->base.server && c->granted && c->xd) {
		c->xd->srq_reserved -= c->granted;
		c->granted = 0;
	}
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
	if (c->ch) {
		rdma_destroy_event_channel(c->ch);
		c->ch = NULL;
	}
}

static void rdma_conn_free(struct zl_xport_conn *bc)
{
	struct rdma_conn *c = rdma_conn_of(bc);

	/* Only reachable after the close work (which freed the pool memory)
	 * or from a failed setup. */
	rdma_conn_teardown(c);
	free(c->ring);
	xport_conn_fini(bc);
	free(c->sreqs);
	free(c->by_slot);
	free(c);
}

/* Builds a connection on id: CQ, QP, slots, message buffers, receives.
 * n: client request slots, or server credits. */
static int rdma_conn_new(struct rdma_xport *tx, struct rdma_xdev *xd, struct rdma_cm_id *id,
			 bool server, uint32_t n, uint32_t peer_slots, struct rdma_conn **out)
{
	struct zl_xport *x = tx->x;
	const struct ibv_device_attr *a = &xd->dev->attr;
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn *c;
	uint32_t cqe, nmsg;
	int rc = -ENOMEM;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	xport_conn_init(x, &c->base, server);
	c->tx = tx;
	c->loop = x->loop;
	c->xd = xd;
	if (server) {
		c->granted = n;
		c->n_sreqs = 2 * n;
		c->sq_depth = ZL_MIN(2 * n + 2 * RDMA_SIGNAL_EVERY, (uint32_t)a->max_qp_wr);
		cqe = c->sq_depth + 2 * n + 64;
		nmsg = c->n_sreqs;
	} else {
		c->n_reqs = n;
		/* Per request: BIND_MW + SEND, and maybe a LOCAL_INV. */
		c->sq_depth = ZL_MIN(3 * n + 2 * RDMA_SIGNAL_EVERY, (uint32_t)a->max_qp_wr);
		cqe = c->sq_depth + n;
		nmsg = 2 * n;
	}
	cqe = ZL_MIN(cqe, (uint32_t)a->max_cqe);
	c->ring_mask = rdma_pow2(c->sq_depth) - 1;
	c->ring = calloc(c->ring_mask + 1, sizeof(*c->ring));
	if (!c->ring)
		goto out_free;
	rc = rdma_slab_grow(x, &c->slab, nmsg);
	if (rc)
		goto out_free;
	c->cq = ibv_create_cq(id->verbs, (int)cqe, c, xd->cc, 0);
	if (!c->cq) {
		rc = errno ? -errno : -ENOMEM;
		goto out_free;
	}
	if (ibv_req_notify_cq(c->cq, 0)) {
		rc = -EIO;
		goto out_free;
	}
	qa.send_cq = qa.recv_cq = c->cq;
	qa.srq = server ? xd->srq : NULL;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = c->sq_depth;
	qa.cap.max_recv_wr = server ? 0 : n;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = RDMA_INLINE_HDR;
	if (rdma_create_qp(id, xd->dev->pd, &qa)) {
		/* Devices without inline sends. */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(id, xd->dev->pd, &qa)) {
			rc = errno ? -errno : -ENOMEM;
			goto out_free;
		}
	}
	c->id = id;
	id->context = c;
	c->max_inline = qa.cap.max_inline_data;
	if (server) {
		c->sreqs = calloc(c->n_sreqs, sizeof(*c->sreqs));
		c->by_slot = calloc(peer_slots, sizeof(*c->by_slot));
		if (!c->sreqs || !c->by_slot)
			goto out_nomem;
		c->peer_slots = peer_slots;
		for (uint32_t i = c->n_sreqs; i-- > 0;) {
			struct rdma_sreq *s = &c->sreqs[i];

			s->c = c;
			s->pl.conn = &c->base;
			s->msg = rdma_slab_at(&c->slab, i);
			s->next = c->sreq_free;
			c->sreq_free = s;
		}
	} else {
		if (xport_reqs_init(&c->base, n, sizeof(struct rdma_req),
				    offsetof(struct rdma_req, base)))
			goto out_nomem;
		rc = rdma_mws_init(c, n);
		if (rc)
			goto out_qp;
		for (uint32_t i = 0; i < n; i++) {
			rc = rdma_recv_post(c, i);
			if (rc)
				goto out_qp;
		}
	}
	*out = c;
	return 0;

out_nomem:
	rc = -ENOMEM;
out_qp:
	rdma_destroy_qp(id);
	c->id = NULL;
out_free:
	if (c->cq)
		ibv_destroy_cq(c->cq);
	c->cq = NULL;
	rdma_slab_fini(x, &c->slab);
	c->granted = 0;
	rdma_conn_free(&c->base);
	return rc;
}

static void rdma_close_work(struct zl_xport_conn *bc)
{
	struct rdma_conn *c = rdma_conn_of(bc);
	struct zl_xport *x = bc->x;

	/* No DMA into or out of any buffer after this. */
	rdma_conn_teardown(c);
	for (struct rdma_bl *b = c->bl_head; b; b = b->next)
		b->queued = false;
	c->bl_head = c->bl_tail = NULL;
	c->done_head = c->done_tail = NULL;
	for (uint32_t i = 0; i < c->n_sreqs; i++) {
		struct rdma_sreq *s = &c->sreqs[i];

		if (s->pl_state == RDMA_PL_FETCHING || s->pl_state == RDMA_PL_DONE) {
			int st = s->pl_state == RDMA_PL_DONE ? s->fetch_status : -ZL_ERR_CONN;

			if (s->fetch_bounce)
				zl_xport_buf_free(x, s->fetch_bounce);
			s->fetch_bounce = NULL;
			s->pl_state = RDMA_PL_NONE;
			s->fetch_cb(s->fetch_arg, st);
		}
		s->pl_state = RDMA_PL_NONE;
		if (s->state == RDMA_SREQ_SENDING && s->reply_busy) {
			zl_xport_done_cb cb = s->sent_cb;

			if (s->reply_bounce)
				zl_xport_buf_free(x, s->reply_bounce);
			s->reply_bounce = NULL;
			s->sent_cb = NULL;
			s->reply_busy = false;
			if (cb)
				cb(s->sent_arg, -ZL_ERR_CONN);
		}
	}
	/* Replies held for a local invalidate: the QP and the windows are
	 * gone, so the data may be checked and delivered now. */
	for (uint32_t i = 0; !bc->server && i < c->n_reqs; i++) {
		struct rdma_req *r = rdma_req_of(xport_req_at(bc, i));

		if (r->base.busy && r->state == RDMA_REQ_INVALIDATING) {
			int st = r->base.held_status;

			rdma_cli_data(c, r, &st, &r->base.held_rep);
			xport_req_hold(&r->base, st, st ? NULL : &r->base.held_rep);
			r->state = RDMA_REQ_SENT;
		}
	}
	rdma_slab_fini(x, &c->slab);
	if (bc->server)
		rdma_announce(c);
}

static void rdma_conn_close(struct zl_xport_conn *bc, int reason)
{
	struct rdma_conn *c = rdma_conn_of(bc);

	if (bc->closing)
		return;
	xport_conn_closing(bc, reason);
	/* The QP goes to the error state now: the peer can no longer read or
	 * write our buffers, which callers get back in the close work. */
	if (c->id && c->id->qp)
		rdma_disconnect(c->id);
	rdma_busy_del(c);
	if (c->ch_in_loop) {
		zl_loop_del(c->loop, &c->ch_h);
		c->ch_in_loop = false;
	}
	zl_loop_defer_cancel(c->loop, &c->work_d);
	zl_loop_defer_cancel(c->loop, &c->conn_d);
}

/* CM events of an established connection. */
static void rdma_conn_cm_cb(void *arg, uint32_t events)
{
	struct rdma_conn *c = arg;
	struct rdma_cm_event *ev;

	(void)events;
	zl_xport_conn_get(&c->base);
	while (!c->base.closing && c->ch && rdma_get_cm_event(c->ch, &ev) == 0) {
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_ESTABLISHED:
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			break;
		default:
			ZL_LOG_DEBUG("xport", "cm event transport=rdma peer=%s event=%s status=%d",
				     c->base.peer, rdma_event_str(type), status);
			rdma_conn_close(&c->base, -ZL_ERR_CONN);
			break;
		}
	}
	zl_xport_conn_put(&c->base);
}

/* Registers the connection's own CM channel on the loop and links it. */
static int rdma_conn_start(struct rdma_conn *c, struct rdma_event_channel *ch)
{
	int rc;

	c->ch = ch;
	rc = rdma_set_nonblock(ch->fd);
	if (rc)
		return rc;
	rc = zl_loop_add(c->loop, &c->ch_h, ch->fd, EPOLLIN, rdma_conn_cm_cb, c);
	if (rc)
		return rc;
	c->ch_in_loop = true;
	xport_format_peer(rdma_get_peer_addr(c->id), c->base.peer, sizeof(c->base.peer));
	xport_conn_link(&c->base);
	return 0;
}

/* ---- connection setup ---- */

static int rdma_cm_err(enum rdma_cm_event_type type, int status)
{
	switch (type) {
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -EHOSTUNREACH;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	default:
		return -EPROTO;
	}
}

static void rdma_lis_cb(void *arg, uint32_t events);

/* Waits for the event `want` on ch until deadline_ms. While it waits, the
 * listeners of `loop` accept connections (a client and a server on the same
 * thread would deadlock otherwise); their callbacks stay deferred. hs gets the
 * peer's handshake when wanted. */
static int rdma_cm_wait(struct rdma_event_channel *ch, struct zl_loop *loop, uint64_t deadline_ms,
			enum rdma_cm_event_type want, struct rdma_hs *hs)
{
	for (;;) {
		struct pollfd pfd[1 + RDMA_SPIN_LISTENERS];
		struct rdma_listener *ls[RDMA_SPIN_LISTENERS];
		struct rdma_cm_event *ev;
		uint64_t now;
		int nl = 0, n;

		if (rdma_get_cm_event(ch, &ev) == 0) {
			enum rdma_cm_event_type type = ev->event;
			int status = ev->status, rc = 0;

			if (type == want && hs)
				rc = rdma_hs_decode(ev->param.conn.private_data,
						    ev->param.conn.private_data_len, hs);
			rdma_ack_cm_event(ev);
			if (type == want)
				return rc;
			ZL_LOG_DEBUG("xport", "rdma connect event=%s status=%d (waiting for %s)",
				     rdma_event_str(type), status, rdma_event_str(want));
			return rdma_cm_err(type, status);
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		pfd[0] = (struct pollfd){.fd = ch->fd, .events = POLLIN};
		if (loop) {
			pthread_mutex_lock(&rdma_lis_lock);
			for (struct rdma_listener *l = rdma_lis_all; l && nl < RDMA_SPIN_LISTENERS;
			     l = l->all_next) {
				if (l->tx->x->loop != loop)
					continue;
				ls[nl] = l;
				pfd[1 + nl] = (struct pollfd){.fd = l->ch->fd, .events = POLLIN};
				nl++;
			}
			pthread_mutex_unlock(&rdma_lis_lock);
		}
		now = zl_now_ms();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		n = poll(pfd, (nfds_t)(1 + nl), (int)ZL_MIN(deadline_ms - now, 1000u));
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; n > 0 && i < nl; i++)
			if (pfd[1 + i].revents)
				rdma_lis_cb(ls[i], EPOLLIN);
	}
}

/* Resolves address and route of host:port on a fresh id of ch. */
static int rdma_resolve_id(struct rdma_event_channel *ch, struct zl_loop *loop, const char *host,
			   uint16_t port, uint64_t deadline_ms, struct rdma_cm_id **out)
{
	struct rdma_cm_id *id = NULL;
	struct addrinfo *res;
	int tmo, rc;

	rc = xport_resolve(host, port, false, &res);
	if (rc)
		return rc;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		rc = -errno;
		goto out_res;
	}
	tmo = (int)ZL_MAX(1, (int64_t)deadline_ms - (int64_t)zl_now_ms());
	if (rdma_resolve_addr(id, NULL, res->ai_addr, tmo)) {
		rc = errno == ENODEV ? -EHOSTUNREACH : -errno;
		goto out_id;
	}
	rc = rdma_cm_wait(ch, loop, deadline_ms, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (rc)
		goto out_id;
	tmo = (int)ZL_MAX(1, (int64_t)deadline_ms - (int64_t)zl_now_ms());
	if (rdma_resolve_route(id, tmo)) {
		rc = -errno;
		goto out_id;
	}
	rc = rdma_cm_wait(ch, loop, deadline_ms, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	if (rc)
		goto out_id;
	if (!id->verbs) {
		rc = -EHOSTUNREACH;
		goto out_id;
	}
	freeaddrinfo(res);
	*out = id;
	return 0;

out_id:
	rdma_destroy_id(id);
out_res:
	freeaddrinfo(res);
	return rc;
}

static int rdma_xport_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			      struct zl_xport_conn **out)
{
	struct rdma_xport *tx = x->impl;
	uint64_t deadline_ms = zl_now_ms() + (uint64_t)timeout_ms;
	struct rdma_conn_param cp = {0};
	struct rdma_event_channel *ch;
	struct rdma_hs hs = {.magic = RDMA_HS_MAGIC, .version = RDMA_HS_VERSION};
	uint8_t pd[RDMA_HS_SIZE];
	struct rdma_cm_id *id = NULL;
	struct rdma_xdev *xd;
	struct rdma_conn *c = NULL;
	int rc;

	ch = rdma_create_event_channel();
	if (!ch)
		return errno ? -errno : -ENODEV;
	rc = rdma_set_nonblock(ch->fd);
	if (rc)
		goto out_ch;
	rc = rdma_resolve_id(ch, x->loop, host, port, deadline_ms, &id);
	if (rc)
		goto out_ch;
	rc = rdma_xdev_get(tx, id->verbs, &xd);
	if (rc)
		goto out_id;
	rc = rdma_conn_new(tx, xd, id, false, x->opts.max_inflight, 0, &c);
	if (rc)
		goto out_id;
	hs.count = c->n_reqs;
	hs.flags = RDMA_HS_F_INV;
	hs.max_msg = RDMA_MSG_SIZE;
	rdma_hs_encode(&hs, pd);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources =
	    (uint8_t)ZL_MIN(RDMA_RD_ATOM_MAX, (uint32_t)xd->dev->attr.max_qp_rd_atom);
	cp.initiator_depth =
	    (uint8_t)ZL_MIN(RDMA_RD_ATOM_MAX, (uint32_t)xd->dev->attr.max_qp_init_rd_atom);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp)) {
		rc = -errno;
		goto out_conn;
	}
	rc = rdma_cm_wait(ch, x->loop, deadline_ms, RDMA_CM_EVENT_ESTABLISHED, &hs);
	if (rc)
		goto out_conn;
	c->credits = ZL_MIN(hs.count, c->n_reqs);
	c->peer_inv = hs.flags & RDMA_HS_F_INV;
	rc = rdma_conn_start(c, ch);
	if (rc) {
		c->ch = NULL; /* freed below */
		goto out_conn;
	}
	if (!c->peer_inv)
		ZL_LOG_INFO("xport",
			    "rdma server does not invalidate memory windows in its replies "
			    "(older version) peer=%s; invalidating each one locally",
			    c->base.peer);
	ZL_LOG_DEBUG("xport", "connected transport=rdma peer=%s dev=%s credits=%u", c->base.peer,
		     ibv_get_device_name(id->verbs->device), c->credits);
	*out = &c->base;
	return 0;

out_conn:
	rdma_slab_fini(x, &c->slab);
	rdma_conn_free(&c->base); /* destroys QP, CQ and id */
	id = NULL;
out_id:
	if (id)
		rdma_destroy_id(id);
out_ch:
	rdma_destroy_event_channel(ch);
	ZL_LOG_DEBUG("xport", "rdma connect failed host=%s port=%u err=%s", host, port,
		     zl_errname(rc));
	return rc;
}

/* ---- server ---- */

static void rdma_refuse(struct rdma_cm_id *id, const char *why, int rc)
{
	ZL_LOG_WARN("xport", "rejecting rdma connection reason=\"%s\" err=%s", why,
		    zl_strerror(rc));
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
}

static void rdma_accept_one(struct rdma_listener *l, struct rdma_cm_id *id,
			    const struct rdma_hs *hs, uint8_t ird, uint8_t ord)
{
	struct rdma_xport *tx = l->tx;
	struct zl_xport *x = tx->x;
	struct rdma_conn_param cp = {0};
	struct rdma_hs ahs = {.magic = RDMA_HS_MAGIC, .version = RDMA_HS_VERSION};
	struct rdma_event_channel *ch;
	uint8_t pd[RDMA_HS_SIZE];
	struct rdma_xdev *xd;
	struct rdma_conn *c;
	uint32_t credits;
	int rc;

	rc = rdma_xdev_get(tx, id->verbs, &xd);
	if (rc) {
		rdma_refuse(id, "device setup failed", rc);
		return;
	}
	rc = rdma_srq_fill(x, xd, xd->srq_reserved);
	if (rc) {
		rdma_refuse(id, "shared receive queue setup failed", rc);
		return;
	}
	credits = ZL_MIN(hs->count, x->opts.max_inflight);
	credits = ZL_MIN(credits, xd->srq_depth - xd->srq_reserved);
	if (!credits) {
		rdma_refuse(id, "shared receive queue full (too many connections)", -ZL_ERR_BUSY);
		return;
	}
	rc = rdma_srq_fill(x, xd, xd->srq_reserved + credits);
	if (rc) {
		rdma_refuse(id, "cannot post shared receives", rc);
		return;
	}
	rc = rdma_conn_new(tx, xd, id, true, credits, hs->count, &c);
	if (rc) {
		rdma_refuse(id, "connection setup failed", rc);
		return;
	}
	xd->srq_reserved += credits;
	c->base.sops = l->base.sops;
	c->base.sarg = l->base.sarg;
	ch = rdma_create_event_channel();
	if (!ch || rdma_migrate_id(id, ch)) {
		rc = errno ? -errno : -ENOMEM;
		if (ch)
			rdma_destroy_event_channel(ch);
		goto out_reject;
	}
	rc = rdma_conn_start(c, ch);
	if (rc)
		goto out_reject;
	ahs.count = credits;
	c->peer_inv = hs->flags & RDMA_HS_F_INV;
	ahs.flags = c->peer_inv ? RDMA_HS_F_INV : 0;
	ahs.max_msg = RDMA_MSG_SIZE;
	rdma_hs_encode(&ahs, pd);
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources = (uint8_t)ZL_MIN((int)ird, xd->dev->attr.max_qp_rd_atom);
	cp.initiator_depth = (uint8_t)ZL_MIN((int)ord, xd->dev->attr.max_qp_init_rd_atom);
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp)) {
		rc = -errno;
		ZL_LOG_WARN("xport", "rdma accept failed peer=%s err=%s", c->base.peer,
			    zl_strerror(rc));
		rdma_conn_close(&c->base, -ZL_ERR_CONN);
		return;
	}
	ZL_LOG_DEBUG("xport", "accepted transport=rdma peer=%s port=%u dev=%s credits=%u",
		     c->base.peer, l->base.port, ibv_get_device_name(id->verbs->device), credits);
	zl_loop_defer(c->loop, &c->conn_d, rdma_announce_cb, c);
	return;

out_reject:
	ZL_LOG_WARN("xport", "dropping rdma connection err=%s", zl_strerror(rc));
	rdma_reject(id, NULL, 0);
	rdma_slab_fini(x, &c->slab);
	rdma_conn_free(&c->base); /* QP, CQ, id, channel, SRQ share */
}

static void rdma_lis_cb(void *arg, uint32_t events)
{
	struct rdma_listener *l = arg;
	struct rdma_cm_event *ev;

	(void)events;
	while (l->ch && rdma_get_cm_event(l->ch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *id = ev->id;
			uint8_t ird = ev->param.conn.initiator_depth;
			uint8_t ord = ev->param.conn.responder_resources;
			struct rdma_hs hs;
			int rc = rdma_hs_decode(ev->param.conn.private_data,
						ev->param.conn.private_data_len, &hs);

			rdma_ack_cm_event(ev);
			if (rc)
				rdma_refuse(
				    id, "bad handshake (not a Zipline peer or other version)", rc);
			else
				rdma_accept_one(l, id, &hs, ird, ord);
			continue;
		}
		ZL_LOG_DEBUG("xport", "listener cm event=%s port=%u", rdma_event_str(ev->event),
			     l->base.port);
		rdma_ack_cm_event(ev);
	}
}

static int rdma_xport_listen(struct zl_xport *x, const char *host, const struct addrinfo *ai,
			     struct zl_xport_listener **out)
{
	struct rdma_listener *l;
	int rc;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->tx = x->impl;
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->ch = rdma_create_event_channel();
	if (!l->ch) {
		rc = errno ? -errno : -ENODEV;
		goto out_free;
	}
	rc = rdma_set_nonblock(l->ch->fd);
	if (rc)
		goto out_ch;
	if (rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP)) {
		rc = -errno;
		goto out_ch;
	}
	if (rdma_bind_addr(l->id, ai->ai_addr) || rdma_listen(l->id, 1024)) {
		rc = -errno;
		goto out_id;
	}
	if (!l->id->verbs && strcmp(host, "0.0.0.0") && strcmp(host, "::"))
		ZL_LOG_WARN("xport",
			    "listening on an address without an RDMA device host=%s; no RDMA "
			    "client will reach it",
			    host);
	l->base.port = ntohs(rdma_get_src_port(l->id));
	rc = zl_loop_add(x->loop, &l->h, l->ch->fd, EPOLLIN, rdma_lis_cb, l);
	if (rc)
		goto out_id;
	pthread_mutex_lock(&rdma_lis_lock);
	l->all_next = rdma_lis_all;
	rdma_lis_all = l;
	pthread_mutex_unlock(&rdma_lis_lock);
	*out = &l->base;
	return 0;

out_id:
	rdma_destroy_id(l->id);
out_ch:
	rdma_destroy_event_channel(l->ch);
out_free:
	free(l);
	return rc;
}

static void rdma_listener_close(struct zl_xport_listener *bl)
{
	struct rdma_listener *l = ZL_CONTAINER_OF(bl, struct rdma_listener, base);

	pthread_mutex_lock(&rdma_lis_lock);
	for (struct rdma_listener **pp = &rdma_lis_all; *pp; pp = &(*pp)->all_next) {
		if (*pp == l) {
			*pp = l->all_next;
			break;
		}
	}
	pthread_mutex_unlock(&rdma_lis_lock);
	zl_loop_del(bl->x->loop, &l->h);
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

/* ---- transport ---- */

/* CAP_IPC_LOCK lifts the memlock limit for verbs registrations. */
static bool rdma_has_ipc_lock(void)
{
	char line[256];
	bool has = false;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			has = caps & (1ull << 14);
			break;
		}
	}
	fclose(f);
	return has;
}

static int rdma_init(struct zl_xport *x)
{
	struct rdma_xport *tx;
	struct ibv_device **list;
	struct ibv_context **ctxs;
	struct rlimit rl;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	if (!list || n == 0) {
		ZL_LOG_WARN("xport", "no RDMA device found; load the driver (e.g. rdma_rxe for "
				     "Soft-RoCE) or use transport tcp");
		return -ENODEV;
	}
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < x->opts.pool_bytes && !rdma_has_ipc_lock()) {
		ZL_LOG_ERR("xport",
			   "memlock limit too low for the RDMA buffer pool memlock=%llu "
			   "pool_bytes=%llu; raise it (ulimit -l unlimited, LimitMEMLOCK=infinity, "
			   "or the IPC_LOCK capability in a pod) or lower pool_bytes",
			   (unsigned long long)rl.rlim_cur, (unsigned long long)x->opts.pool_bytes);
		return -ENOMEM;
	}
	tx = calloc(1, sizeof(*tx));
	if (!tx)
		return -ENOMEM;
	tx->x = x;
	x->impl = tx;
	zl_loop_add_poller(x->loop, &tx->poller, rdma_poller, tx);
	/* Open every device rdma_cm knows now, so that the pool (registered
	 * right after this, region by region) is pinned at start and the first
	 * connection does not pay for it. */
	ctxs = rdma_get_devices(&n);
	for (int i = 0; ctxs && i < n; i++) {
		struct rdma_xdev *xd;
		int rc = rdma_xdev_get(tx, ctxs[i], &xd);

		if (rc)
			ZL_LOG_WARN("xport", "cannot use RDMA device dev=%s err=%s; skipping it",
				    ibv_get_device_name(ctxs[i]->device), zl_strerror(rc));
	}
	if (ctxs)
		rdma_free_devices(ctxs);
	return 0;
}

static void rdma_fini(struct zl_xport *x)
{
	struct rdma_xport *tx = x->impl;

	if (!tx)
		return;
	zl_loop_del_poller(x->loop, &tx->poller);
	while (tx->xdevs) {
		struct rdma_xdev *xd = tx->xdevs;

		tx->xdevs = xd->next;
		rdma_xdev_free(x, xd);
	}
	free(tx);
	x->impl = NULL;
}

bool xport_rdma_reaches(const char *host, uint16_t port, int timeout_ms)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	bool ok;

	if (!ch)
		return false;
	ok = !rdma_set_nonblock(ch->fd) &&
	     !rdma_resolve_id(ch, NULL, host, port ? port : 1,
			      zl_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1000), &id);
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return ok;
}

const struct xport_ops xport_rdma_ops = {
    .kind = ZL_XPORT_RDMA,
    .init = rdma_init,
    .fini = rdma_fini,
    .connect = rdma_xport_connect,
    .listen = rdma_xport_listen,
    .listener_close = rdma_listener_close,
    .conn_close = rdma_conn_close,
    .close_work = rdma_close_work,
    .conn_free = rdma_conn_free,
    .request = rdma_request,
    .req_release = rdma_req_release,
    .fetch = rdma_fetch,
    .discard = rdma_discard,
    .reply = rdma_reply,
    .mem_register = rdma_mem_register,
};
