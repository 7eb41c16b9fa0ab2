/* Transport internals shared by the common layer (xport.c), the buffer pool
 * (pool.c) and the implementations (tcp.c, rdma_*.c). Nothing outside
 * lib/transport includes this file.
 *
 * Every public object has a common part (struct zl_xport_conn, struct
 * zl_xport_listener, struct zl_xport_payload) that the implementation embeds
 * in its own struct; xport.c reaches the implementation only through struct
 * xport_ops.
 *
 * Client requests live in the common request layer (xport.c): per
 * connection, max_inflight preallocated slots (struct xport_req, embedded in
 * the implementation's slot struct), req_id = generation << 32 | slot so that
 * a reply to a slot that has since been reused is detected, the in-flight
 * list in issue order, one timeout tick per transport, and the completion
 * callback. Server requests live in the common server layer (xport_sreq.c):
 * preallocated slots (struct xport_sreq), the payload rule (undecided inside
 * on_request, then fetched or discarded), the count of requests not yet
 * answered, the reply's lookup by req_id, deferred and close-time callbacks.
 * An implementation only moves the bytes.
 */
#ifndef ZL_TRANSPORT_INTERNAL_H
#define ZL_TRANSPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/common.h"
#include "transport.h"

#define XPORT_DEF_MAX_INFLIGHT 256u
#define XPORT_MAX_MAX_INFLIGHT 65536u
#define XPORT_DEF_TIMEOUT_MS   10000u
#define XPORT_DEF_POOL_BYTES   (64ull << 20)
/* Period of the request timeout check. */
#define XPORT_TICK_MS 100u
/* Per-I/O warnings per second and transport. */
#define XPORT_WARN_PER_SEC 10u

/* ---- intrusive lists ---- */

/* Doubly linked, NULL-terminated: "for (n = l->head; n; n = n->next)" walks
 * it, and a node may unlink itself (or others) during the walk when the walk
 * saved n->next first. */
struct xport_link {
	struct xport_link *prev, *next;
};

struct xport_list {
	struct xport_link *head, *tail;
};

/* Links n after `after` (NULL: at the head). */
static inline void xport_list_insert(struct xport_list *l, struct xport_link *after,
				     struct xport_link *n)
{
	n->prev = after;
	n->next = after ? after->next : l->head;
	if (n->next)
		n->next->prev = n;
	else
		l->tail = n;
	if (after)
		after->next = n;
	else
		l->head = n;
}

static inline void xport_list_push(struct xport_list *l, struct xport_link *n)
{
	xport_list_insert(l, NULL, n);
}

static inline void xport_list_append(struct xport_list *l, struct xport_link *n)
{
	xport_list_insert(l, l->tail, n);
}

/* Unlinks n; a node that is not on l is left alone. */
static inline void xport_list_del(struct xport_list *l, struct xport_link *n)
{
	if (!n->prev && l->head != n)
		return;
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

/* ---- buffer pool (pool.c) ---- */

/* Size classes: 4 KiB << 0..10 (4 KiB .. 4 MiB), then 4 MiB + 4 KiB (a full
 * data block plus one page, for unaligned I/O that straddles blocks). */
#define XPORT_POOL_N_POW2    11
#define XPORT_POOL_N_CLASSES (XPORT_POOL_N_POW2 + 1)
#define XPORT_POOL_PAGE	     4096u
#define XPORT_POOL_MAX_BUF   ((4u << 20) + XPORT_POOL_PAGE)
/* Growth step: regions are at least this large. */
#define XPORT_POOL_MIN_GROW (16ull << 20)

/* Called once per new region (RDMA registers it with the device). Returns 0
 * or a negative error; on error the region is dropped and the alloc fails. */
typedef int (*xport_pool_region_fn)(void *arg, void *base, size_t len);

struct xport_pool_region {
	uint8_t *base;
	size_t len;
	/* One byte per 4 KiB page: 0 = not the start of a buffer, else
	 * class + 1, with POOL_MAP_FREE set while the buffer is on a free list. */
	uint8_t *map;
};

/* Single-threaded (one pool per transport, one transport per loop), so no
 * locks: the free lists are plain singly linked lists threaded through the
 * free buffers themselves. */
struct xport_pool {
	struct xport_pool_region *regions; /* sorted by base address */
	uint32_t n_regions, cap_regions;
	/* Bump allocation inside the newest region. */
	struct xport_pool_region *cur;
	size_t cur_used;
	void *free_list[XPORT_POOL_N_CLASSES];
	uint64_t grow_bytes;
	uint64_t total_bytes;
	xport_pool_region_fn on_region;
	void *on_region_arg;
};

/* Reserves `initial` bytes (rounded up to pages) as the first region.
 * Returns 0 or -ENOMEM. */
int xport_pool_init(struct xport_pool *p, uint64_t initial, xport_pool_region_fn on_region,
		    void *arg);
/* Unmaps every region. Accepts a zeroed or half-initialised pool. */
void xport_pool_fini(struct xport_pool *p);
void *xport_pool_alloc(struct xport_pool *p, size_t len);
void xport_pool_free(struct xport_pool *p, void *buf);
bool xport_pool_owned(const struct xport_pool *p, const void *buf, size_t len);
/* Size of the class that serves len, or 0 when len is too large. */
size_t xport_pool_class_size(size_t len);
/* The pool buffer (start, class size) that holds addr..addr+len; false when
 * the range is not inside one carved buffer. */
bool xport_pool_buf_span(const struct xport_pool *p, const void *addr, size_t len, uint8_t **start,
			 size_t *size);

/* ---- common objects ---- */

struct xport_ops;
struct addrinfo;
struct xport_tls;

struct zl_xport {
	const struct xport_ops *ops;
	struct zl_loop *loop;
	struct zl_xport_opts opts;
	struct xport_pool pool;
	/* Live connections (linked until their close work has run), newest
	 * first; listeners likewise. */
	struct xport_list conns;
	struct xport_list listeners;
	/* Request timeouts: runs every XPORT_TICK_MS while n_clients > 0. */
	struct zl_timer tick;
	uint32_t n_clients; /* client connections in conns */
	void *impl;	    /* implementation state */
	bool destroying;
	struct zl_ratelimit warn_rl; /* per-I/O warnings of this transport */
	struct xport_tls *tls;	     /* TCP with TLS options (tcp_tls.c), else NULL */
	struct zl_xport_stats st;
};

/* A client request slot, from zl_xport_request to its reply callback. The
 * implementation embeds it in its own slot struct (xport_reqs_init). */
struct xport_req {
	struct xport_link link; /* in-flight list, or free list (next only) */
	uint32_t slot, gen;	/* req_id = gen << 32 | slot */
	bool busy;		/* in flight (not on the free list) */
	uint8_t opcode;
	int fail; /* status if the connection closes: -ZL_ERR_TIMEOUT once expired */
	uint64_t deadline_ns;
	void *in; /* where the reply's data lands, in_cap bytes at most */
	uint32_t in_cap;
	zl_xport_reply_cb cb;
	void *arg;
	/* A reply that arrived before the request's own send completed (TCP
	 * is still writing the out buffer), delivered by xport_req_finish_held. */
	bool held;
	bool held_rep_valid;
	int held_status;
	struct zl_wire_hdr held_rep;
};

/* The request slots of a client connection: one allocation when the
 * connection is built, none per I/O. */
struct xport_reqs {
	uint8_t *mem; /* n slots of `size` bytes, each with a struct xport_req at `off` */
	size_t size, off;
	uint32_t n;
	struct xport_link *free;  /* free slots, singly linked through link.next */
	struct xport_list flight; /* in flight, issue order: the head expires first */
};

struct zl_xport_payload {
	struct zl_xport_conn *conn;
};

/* A server request slot, from the request's delivery to on_request until its
 * reply is out and its payload is done with. The implementation embeds it in
 * its own slot struct (xport_sreqs_init). */
enum xport_sreq_state {
	XPORT_SREQ_FREE,     /* on the free list */
	XPORT_SREQ_ACTIVE,   /* delivered to on_request, not answered (counts in `pending`) */
	XPORT_SREQ_REPLYING, /* reply handed to the implementation, its send not complete */
	XPORT_SREQ_REPLIED,  /* reply out; the slot waits for its payload to be done */
};

/* The request's payload, beside the slot's state. */
enum xport_pl_state {
	XPORT_PL_NONE,	    /* no payload, or done with it */
	XPORT_PL_UNDECIDED, /* inside on_request: neither fetched nor discarded yet */
	XPORT_PL_FETCH,	    /* being moved into fetch_buf; fetch_cb pending */
	XPORT_PL_DONE,	    /* moved already (inline copy); fetch_cb deferred */
	XPORT_PL_DISCARD,   /* dropped: the implementation skips what is left of it */
};

struct xport_sreq {
	struct xport_link link;	      /* free list (next only) */
	struct xport_link fetch_link; /* sreqs.fetch_done */
	struct xport_link sent_link;  /* sreqs.sent_done */
	struct zl_xport_payload pl;
	enum xport_sreq_state state;
	enum xport_pl_state pl_state;
	bool sent_queued; /* on sreqs.sent_done */
	uint8_t opcode;
	uint64_t req_id;
	uint32_t data_len, data_crc; /* the payload on_request was offered */
	void *fetch_buf;
	uint32_t *fetch_crcs; /* zl_xport_fetch_crcs: the 4 KiB pieces' CRCs go here */
	int fetch_status;     /* XPORT_PL_DONE */
	zl_xport_done_cb fetch_cb;
	void *fetch_arg;
	zl_xport_done_cb sent_cb;
	void *sent_arg;
};

/* The request slots of a server connection: one allocation when the
 * connection is built, none per I/O. */
struct xport_sreqs {
	uint8_t *mem; /* n slots of `size` bytes, each with a struct xport_sreq at `off` */
	size_t size, off;
	uint32_t n;
	struct xport_link *free; /* free slots, singly linked through link.next */
	uint32_t pending;	 /* XPORT_SREQ_ACTIVE slots */
	/* XPORT_SREQ_ACTIVE slots by the client's slot (req_id's low 32 bits):
	 * open addressing, linear probing, index_mask + 1 >= 2 n entries. */
	struct xport_sreq **index;
	uint32_t index_mask, index_shift;
	/* Callbacks that must not run where the implementation learns of them
	 * (inside zl_xport_fetch, or inside a send): run by `work_d`. */
	struct xport_list fetch_done, sent_done;
	struct zl_defer work_d;
};

struct zl_xport_conn {
	const struct xport_ops *ops;
	struct zl_xport *x;
	struct xport_link link; /* x->conns */
	uint32_t refs;
	enum zl_xport_kind kind;
	bool tls;     /* TCP with TLS (set before xport_conn_link) */
	uint8_t skind; /* enum zl_xport_stat_kind, fixed by xport_conn_link */
	bool closing; /* close started: no new requests, fd gone */
	bool closed;  /* close callback has run */
	bool server;
	uint32_t inflight;	 /* requests in reqs.flight */
	struct xport_reqs reqs;	 /* client side */
	struct xport_sreqs sreqs; /* server side */
	int close_reason;	 /* handed to the close callback */
	struct zl_defer close_d; /* runs the close work */
	/* Close callback: the listener's (server) or the connector's (client). */
	const struct zl_xport_server_ops *sops;
	void *sarg;
	zl_xport_close_cb on_close;
	void *close_arg;
	void *ctx;
	char peer[64];
};

struct zl_xport_listener {
	const struct xport_ops *ops;
	struct zl_xport *x;
	struct xport_link link; /* x->listeners */
	uint16_t port;
	/* Handed to every connection it accepts. */
	const struct zl_xport_server_ops *sops;
	void *sarg;
};

/* Implementation table. Every entry is called on the loop thread. */
struct xport_ops {
	enum zl_xport_kind kind;
	int (*init)(struct zl_xport *x);
	void (*fini)(struct zl_xport *x);
	/* Connects and links a client connection; xport.c then sets its close
	 * callback and takes the caller's reference. */
	int (*connect)(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		       struct zl_xport_conn **out);
	/* Optional (NULL: -EPROTONOSUPPORT): connect, then a TLS handshake
	 * driven by the loop; requests queue until it is done. */
	int (*connect_tls)(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			   struct zl_xport_conn **out);
	/* Optional (NULL: connect / connect_tls, which wait): starts the
	 * connect and links the connection without waiting; requests queue
	 * until it is up (and, with tls, its handshake done). A connect that
	 * fails or is not done within timeout_ms closes the connection. */
	int (*connect_start)(struct zl_xport *x, const char *host, uint16_t port, bool tls,
			     int timeout_ms, struct zl_xport_conn **out);
	/* Listens on ai (host as given, for messages); sets (*out)->port.
	 * xport.c links the listener and sets its server ops. */
	int (*listen)(struct zl_xport *x, const char *host, const struct addrinfo *ai,
		      struct zl_xport_listener **out);
	/* Frees a listener (xport.c unlinked it already). */
	void (*listener_close)(struct zl_xport_listener *l);
	/* Starts closing (idempotent); callbacks run deferred. reason: 0 for a
	 * local close, else the negative cause handed to the close callback. */
	void (*conn_close)(struct zl_xport_conn *c, int reason);
	/* The implementation's part of the close work (deferred by
	 * xport_conn_closing): releases its resources and ends its pending
	 * server-side operations. The request layer then fails the client
	 * requests still in flight and runs the close callback. */
	void (*close_work)(struct zl_xport_conn *c);
	/* Last reference gone: frees the connection memory. */
	void (*conn_free)(struct zl_xport_conn *c);
	/* Sends the request of slot r (already in flight: req_id, in, cb set);
	 * hdr is checked and complete. Returns 0, or a negative error when
	 * nothing was sent (the slot is returned without a callback). Must not
	 * run callbacks. */
	int (*request)(struct zl_xport_conn *c, struct xport_req *r, const struct zl_wire_hdr *hdr,
		       const void *out, uint32_t out_len);
	/* Optional: frees what the implementation holds for slot r, right
	 * before its callback runs. */
	void (*req_release)(struct zl_xport_conn *c, struct xport_req *r);
	/* Server side (the slot machine is xport_sreq.c's; these only move
	 * bytes). fetch: inside on_request, s->fetch_buf takes s->data_len
	 * bytes; start moving them now or once on_request returned, and report
	 * with xport_sreq_payload_done (or _done_later). Returns 0, or a
	 * negative error when nothing started. */
	int (*fetch)(struct zl_xport_conn *c, struct xport_sreq *s);
	/* After on_request, nobody fetched: drop the payload (skip its bytes)
	 * and report with xport_sreq_payload_done. */
	void (*discard)(struct zl_xport_conn *c, struct xport_sreq *s);
	/* Sends the reply of s (already XPORT_SREQ_REPLYING, sent_cb set); rep
	 * is checked and complete (payload_len = len, payload_crc set). Reports
	 * with xport_sreq_reply_done (or _done_later); may do so before it
	 * returns. Returns 0, or a negative error when nothing was queued. */
	int (*reply)(struct zl_xport_conn *c, struct xport_sreq *s, const struct zl_wire_hdr *rep,
		     const void *data, uint32_t len);
	/* Optional: a server slot is free again (a paused reader may resume). */
	void (*sreq_freed)(struct zl_xport_conn *c);
	/* Optional: registers a new pool region with the device. */
	xport_pool_region_fn mem_register;
};

extern const struct xport_ops xport_tcp_ops;

/* ---- TLS of the TCP transport (tcp_tls.c) ---- */

struct ssl_st;

/* Builds x->tls from x->opts (tls_cert/tls_key: serve TLS; tls_ca: verify
 * servers); nothing without TLS options. Logs what failed. Returns 0,
 * -ZL_ERR_INVAL (unreadable or mismatched files), -ENOMEM. */
int xport_tls_init(struct zl_xport *x);
void xport_tls_fini(struct zl_xport *x);
/* x's listeners accept TLS only / x can connect with TLS. */
bool xport_tls_server(const struct zl_xport *x);
bool xport_tls_client(const struct zl_xport *x);
/* One SSL on fd: server side, or client side checking host (or
 * opts.tls_server_name) against the certificate. 0 or -ENOMEM. */
int xport_tls_new(struct zl_xport *x, int fd, bool server, const char *host, struct ssl_st **out);
/* Frees ssl (NULL ok); notify: first sends close_notify if the handshake is
 * done (never waits for the peer's; only for a connection without a fatal
 * error). */
void xport_tls_free(struct ssl_st *ssl, bool notify);
/* Non-blocking steps. handshake: 1 done, 0 would block (*want: the epoll
 * events to wait for), -ZL_ERR_TLS with the reason in why. read/write: >0
 * bytes, 0 would block (*want), -1 (read) peer closed, -ZL_ERR_TLS /
 * -ZL_ERR_CONN (write) on failure with the reason in why. */
int xport_tls_handshake(struct ssl_st *ssl, uint32_t *want, char *why, size_t why_len);
ssize_t xport_tls_read(struct ssl_st *ssl, void *buf, size_t len, uint32_t *want, char *why,
		       size_t why_len);
ssize_t xport_tls_write(struct ssl_st *ssl, const void *buf, size_t len, uint32_t *want,
			char *why, size_t why_len);
/* Decrypted or buffered bytes that epoll cannot see. */
bool xport_tls_pending(struct ssl_st *ssl);
/* Handshake done: a debug line per connection, and once per transport an
 * info line saying whether kTLS carries it. */
void xport_tls_established(struct zl_xport *x, struct ssl_st *ssl, const char *peer);
/* Rate limits (once a second) of refused plaintext connections and failed
 * handshakes. */
bool xport_tls_plain_log_ok(struct zl_xport *x);
/* Keeps msg for zl_xport_tls_last_error. */
void xport_tls_note(const char *msg);
bool xport_tls_hs_log_ok(struct zl_xport *x);

/* ---- common layer (xport.c) ---- */

struct sockaddr;

/* True while per-I/O warnings of x are not rate-limited. */
bool xport_warn_ok(struct zl_xport *x);
/* "1.2.3.4:5" or "[::1]:5" of sa, "?" for NULL or another family. */
void xport_format_peer(const struct sockaddr *sa, char *out, size_t len);
/* getaddrinfo of host:port for a stream socket (passive: to listen on).
 * Returns 0 (free *res with freeaddrinfo), -EHOSTUNREACH for a name that does
 * not resolve, -ENOMEM, -EINVAL, or the errno of a system failure. */
int xport_resolve(const char *host, uint16_t port, bool passive, struct addrinfo **res);

/* Connection bookkeeping in x. Linking the first client
 * connection starts the timeout tick, unlinking the last stops it. */
void xport_conn_init(struct zl_xport *x, struct zl_xport_conn *c, bool server);
void xport_conn_link(struct zl_xport_conn *c);
void xport_conn_unlink(struct zl_xport_conn *c);
/* Start of conn_close: marks c closing for reason and defers the close work
 * (ops->close_work, then the in-flight requests fail, then the close
 * callback, then the transport's reference goes). */
void xport_conn_closing(struct zl_xport_conn *c, int reason);
/* Frees what xport_conn_init and xport_reqs_init allocated. */
void xport_conn_fini(struct zl_xport_conn *c);

/* Client request slots. xport_reqs_init allocates n zeroed slots of `size`
 * bytes with their struct xport_req at offset `off`. Returns 0 or -ENOMEM. */
int xport_reqs_init(struct zl_xport_conn *c, uint32_t n, size_t size, size_t off);
struct xport_req *xport_req_at(struct zl_xport_conn *c, uint32_t slot);
/* The in-flight request a reply header answers, or NULL with *why set
 * (unknown or stale req_id, other opcode). */
struct xport_req *xport_req_lookup(struct zl_xport_conn *c, const struct zl_wire_hdr *rep,
				   const char **why);
/* Completes r: the slot is free again (its req_id stale) before cb runs, so
 * the callback may issue the next request right away. */
void xport_req_finish(struct zl_xport_conn *c, struct xport_req *r, int status,
		      const struct zl_wire_hdr *rep);
/* Keeps a reply (status, rep or NULL) for later delivery. */
void xport_req_hold(struct xport_req *r, int status, const struct zl_wire_hdr *rep);
/* Completes r with the reply xport_req_hold kept. */
void xport_req_finish_held(struct zl_xport_conn *c, struct xport_req *r);
/* Close work: every request still in flight completes, oldest first, with
 * its held reply, or -ZL_ERR_TIMEOUT if it expired, -ZL_ERR_TLS when the
 * connection closed for a failed handshake, else -ZL_ERR_CONN. */
void xport_reqs_fail_all(struct zl_xport_conn *c);

/* ---- server request slots (xport_sreq.c) ---- */

/* Allocates n zeroed server slots of `size` bytes with their struct
 * xport_sreq at offset `off`, and their index. Returns 0 or -ENOMEM. */
int xport_sreqs_init(struct zl_xport_conn *c, uint32_t n, size_t size, size_t off);
/* Frees what xport_sreqs_init allocated (called by xport_conn_fini). */
void xport_sreqs_fini(struct zl_xport_conn *c);
struct xport_sreq *xport_sreq_at(struct zl_xport_conn *c, uint32_t i);
/* A free slot is there for the next request. */
bool xport_sreq_available(const struct zl_xport_conn *c);
/* Takes a free slot for request h (payload_len and payload_crc as on_request
 * will see them). NULL with *why set when no slot is free or the client's
 * slot of h->req_id is still in use: a protocol error. */
struct xport_sreq *xport_sreq_start(struct zl_xport_conn *c, const struct zl_wire_hdr *h,
				    const char **why);
/* Hands s to on_request, then settles a payload it left undecided (a server
 * bug: discarded) and has a discarded one dropped (ops->discard). */
void xport_sreq_deliver(struct zl_xport_conn *c, struct xport_sreq *s, const struct zl_wire_hdr *h);
/* The payload of s is in (status: 0 or -ZL_ERR_CORRUPT) or skipped: the fetch
 * callback runs now, if it was fetched. */
void xport_sreq_payload_done(struct zl_xport_conn *c, struct xport_sreq *s, int status);
/* The same, from inside zl_xport_fetch: the callback runs deferred. */
void xport_sreq_payload_done_later(struct zl_xport_conn *c, struct xport_sreq *s, int status);
/* The reply of s is out (status 0) or failed: the sent callback runs now. */
void xport_sreq_reply_done(struct zl_xport_conn *c, struct xport_sreq *s, int status);
/* The reply of s is out, learnt where callbacks must not run: deferred. */
void xport_sreq_reply_done_later(struct zl_xport_conn *c, struct xport_sreq *s);
/* zl_xport_fetch, zl_xport_discard and zl_xport_reply past their argument
 * checks. */
/* Whether the fetched payload data[0..len) has the CRC the request header
 * gave (want); one pass: with fetch_crcs and len a whole number of 4 KiB
 * pieces, the pieces' CRCs are left there on the way. */
bool xport_sreq_crc_ok(struct xport_sreq *s, const void *data, uint32_t len, uint32_t want);
int xport_sreq_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, uint32_t *crcs,
		     zl_xport_done_cb cb,
		     void *arg);
void xport_sreq_discard(struct zl_xport_payload *p);
int xport_sreq_reply(struct zl_xport_conn *c, const struct zl_wire_hdr *rep, const void *data,
		     uint32_t len, zl_xport_done_cb sent_cb, void *arg);
/* Close work, after the implementation's (no DMA, nothing queued any more):
 * deferred callbacks run, then every fetch still pending fails and every reply
 * not sent fails (-ZL_ERR_CONN), slot by slot. */
void xport_sreqs_fail_all(struct zl_xport_conn *c);

#endif
