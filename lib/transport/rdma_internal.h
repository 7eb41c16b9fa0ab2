/* RDMA transport internals: shared by its three files (rdma_dev.c: devices,
 * registrations, memory windows, message slabs; rdma_cm.c: connection set-up
 * and teardown over rdma_cm; rdma_io.c: send queue, requests, replies,
 * completions). Outside them only xport.c and the memory-exposure test
 * (test/rdma/mw_test.c) include this, and only when the build found
 * libibverbs and librdmacm (ZL_HAVE_RDMA).
 *
 * Wire use of a connection (reliable connected QP, set up with rdma_cm):
 *
 *   handshake  private data of CONNECT / ACCEPT: struct rdma_hs (16 bytes,
 *              little-endian): magic "ZLRD", version, flags (RDMA_HS_F_*),
 *              the client's request slots (CONNECT) or the credits granted
 *              (ACCEPT), and the largest message the sender accepts.
 *   message    one SEND = the 80-byte wire header, then the payload:
 *              - inline data (payload_len bytes, ZL_WF_RDMA clear): WRITEs of
 *                at most RDMA_INLINE_MAX bytes, HELLO, replies without a
 *                descriptor;
 *              - a struct zl_wire_rdma_desc (ZL_WF_RDMA set): the client
 *                buffer that the server RDMA-READs (WRITE) or RDMA-WRITEs
 *                (READ); its rkey is that of a type 2 memory window the
 *                client bound to exactly this buffer, for this request and
 *                this QP, with REMOTE_READ (WRITE) or REMOTE_WRITE (READ)
 *                only. The reply to such a request is a SEND_WITH_INV of
 *                that rkey (when the client asked, RDMA_HS_F_INV), so the
 *                window is dead once the reply has landed; a client that
 *                got a plain SEND invalidates it locally before the request
 *                completes. payload_crc is the CRC32C of the data, not of
 *                the descriptor. The READ reply then carries ZL_WF_RDMA,
 *                payload_len 0 and payload_crc of the data written; the
 *                client hands the caller a header with payload_len = length
 *                and ZL_WF_RDMA clear, exactly what TCP delivers.
 *   credits    the server grants C credits at ACCEPT; a client has at most C
 *              requests unanswered (more wait in the client's queue), so the
 *              server's shared receive queue, which holds receives for the
 *              credits of every connection, is never overrun. A reply returns
 *              the credit of its request.
 */
#ifndef ZL_TRANSPORT_RDMA_INTERNAL_H
#define ZL_TRANSPORT_RDMA_INTERNAL_H

#include <stdbool.h>

#include <infiniband/verbs.h>

#include "transport_internal.h"

/* Largest WRITE payload that rides inside the SEND. */
#define RDMA_INLINE_MAX ZL_WIRE_MAX_CTRL
/* One message buffer: header + inline payload (+ slack to 64 bytes). */
#define RDMA_MSG_SIZE ZL_ALIGN_UP(ZL_WIRE_HDR_SIZE + RDMA_INLINE_MAX, 64)

#define RDMA_HS_MAGIC	0x44524c5au /* "ZLRD" little-endian */
#define RDMA_HS_VERSION 1
#define RDMA_HS_SIZE	16
/* CONNECT: "my descriptors are per-request memory windows: invalidate each
 * with SEND_WITH_INV in the reply"; ACCEPT: "I do". */
#define RDMA_HS_F_INV 0x1u

/* Access of every memory registration (the whole buffer pool): local only.
 * MW_BIND lets the owner bind windows to it; no remote peer can use the
 * registration's own rkey. */
#define RDMA_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)

extern const struct xport_ops xport_rdma_ops;

/* True when rdma_cm resolves an address and a route to host over an RDMA
 * device within timeout_ms (the probe behind transport selection "auto").
 * Blocking; never fails loudly (false on any error). */
bool xport_rdma_reaches(const char *host, uint16_t port, int timeout_ms);

/* For the memory-exposure test (test/rdma/mw_test.c): the rkey of the
 * registration of x that covers buf..buf+len on the first device, and the
 * access flags it was registered with. Returns 0 or -ENOENT. */
int xport_rdma_mr_info(struct zl_xport *x, const void *buf, size_t len, uint32_t *rkey,
		       unsigned int *access);
/* Local invalidates x posted so far: replies whose server did not invalidate
 * the request's window (the same test). */
uint64_t xport_rdma_local_invalidates(struct zl_xport *x);

/* ---- private to rdma_dev.c, rdma_cm.c and rdma_io.c ---- */

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
	/* Counted in rdma_credit_waits / rdma_window_waits already: a request
	 * tried again on every later post and completion counts once. */
	bool credit_waited, window_waited;
	uint32_t in_len; /* bytes the descriptor offers */
	uint8_t *bounce_in, *bounce_out;
	uint8_t *msg;
	uint32_t msg_len;
	/* The buffer the server may touch (d_len 0: none), with the window
	 * access it gets, and the window bound to it while the request lives. */
	uint64_t d_addr;
	uint32_t d_len;
	unsigned int d_access;
	struct ibv_mr *d_mr; /* what the window is bound to (xport_rdma_bind_mr) */
	struct rdma_mw *mw;
};

/* Server request slot: the common slot (xport_sreq.c: states, payload rule,
 * callbacks) plus the descriptor, the bounce buffers and the message. */
struct rdma_sreq {
	struct xport_sreq base;
	struct rdma_bl bl_fetch, bl_reply;
	bool has_desc;
	struct zl_wire_rdma_desc desc; /* WRITE: data to read; READ: where to write */
	uint8_t *fetch_bounce;
	/* reply */
	const uint8_t *rdata;
	uint32_t rlen;
	bool rwrite; /* RDMA WRITE of rdata before the SEND */
	uint8_t *reply_bounce;
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
	struct zl_defer conn_d; /* on_conn */
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

	/* server: request slots in base.sreqs, twice the credits */
	uint32_t granted;
	uint32_t peer_slots;	   /* the client's request slots (handshake) */
	const uint8_t *cur_inline; /* payload of the request in on_request */
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

static inline struct rdma_conn *rdma_conn_of(struct zl_xport_conn *c)
{
	return ZL_CONTAINER_OF(c, struct rdma_conn, base);
}

static inline struct rdma_req *rdma_req_of(struct xport_req *r)
{
	return ZL_CONTAINER_OF(r, struct rdma_req, base);
}

static inline struct rdma_sreq *rdma_sreq_of(struct xport_sreq *s)
{
	return ZL_CONTAINER_OF(s, struct rdma_sreq, base);
}

static inline uint8_t *rdma_slab_at(const struct rdma_slab *s, uint32_t i)
{
	return s->chunks[i / RDMA_SLAB_PER_CHUNK] +
	       (size_t)(i % RDMA_SLAB_PER_CHUNK) * RDMA_MSG_SIZE;
}

/* rdma_dev.c: the transport (init/fini, the pool-region hook), the
 * per-transport device state, registrations, windows, slabs, the SRQ. */
int xport_rdma_init(struct zl_xport *x);
void xport_rdma_fini(struct zl_xport *x);
int xport_rdma_mem_register(void *arg, void *base, size_t len);
/* The registration of the pool region that holds p..p+len, or NULL. */
struct ibv_mr *xport_rdma_mr_of(const struct rdma_xdev *xd, const void *p, size_t len);
/* The registration a window over addr..addr+len is bound to, or NULL. */
struct ibv_mr *xport_rdma_bind_mr(struct rdma_xdev *xd, const void *addr, size_t len);
void xport_rdma_mw_put(struct rdma_conn *c, struct rdma_mw *m);
int xport_rdma_mws_init(struct rdma_conn *c, uint32_t n);
void xport_rdma_mws_fini(struct rdma_conn *c);
int xport_rdma_slab_grow(struct zl_xport *x, struct rdma_slab *s, uint32_t n);
void xport_rdma_slab_fini(struct zl_xport *x, struct rdma_slab *s);
int xport_rdma_xdev_get(struct rdma_xport *tx, struct ibv_context *verbs, struct rdma_xdev **out);
int xport_rdma_srq_post(struct rdma_xdev *xd, uint32_t idx);
int xport_rdma_srq_fill(struct zl_xport *x, struct rdma_xdev *xd, uint32_t want);

/* rdma_cm.c: connection set-up, close and teardown. */
int xport_rdma_set_nonblock(int fd);
void xport_rdma_conn_close(struct zl_xport_conn *bc, int reason);
void xport_rdma_conn_teardown(struct rdma_conn *c);
void xport_rdma_conn_free(struct zl_xport_conn *bc);

/* rdma_io.c: polling, the send queue, requests, replies, completions. */
void xport_rdma_busy_del(struct rdma_conn *c);
int xport_rdma_poller(void *arg);
void xport_rdma_cc_cb(void *arg, uint32_t events);
int xport_rdma_recv_post(struct rdma_conn *c, uint32_t idx);
void xport_rdma_announce_cb(void *arg);
void xport_rdma_close_work(struct zl_xport_conn *bc);
int xport_rdma_request(struct zl_xport_conn *bc, struct xport_req *br,
		       const struct zl_wire_hdr *hdr, const void *out, uint32_t out_len);
void xport_rdma_req_release(struct zl_xport_conn *bc, struct xport_req *br);
int xport_rdma_fetch(struct zl_xport_conn *bc, struct xport_sreq *bs);
void xport_rdma_discard(struct zl_xport_conn *bc, struct xport_sreq *bs);
int xport_rdma_reply(struct zl_xport_conn *bc, struct xport_sreq *bs, const struct zl_wire_hdr *rep,
		     const void *data, uint32_t len);

#endif
