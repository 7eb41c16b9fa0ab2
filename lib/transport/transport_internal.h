/* Transport internals shared by the common dispatch (xport.c), the buffer
 * pool (pool.c) and the implementations (tcp.c, later rdma.c). Nothing
 * outside lib/transport includes this file.
 *
 * Every public object starts with a common part (struct zl_xport_conn,
 * struct zl_xport_listener, struct zl_xport_payload) that the implementation
 * embeds as the first member of its own struct; xport.c reaches the
 * implementation only through struct xport_ops, so adding RDMA changes no
 * caller.
 */
#ifndef ZL_TRANSPORT_INTERNAL_H
#define ZL_TRANSPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/common.h"
#include "transport.h"

#define XPORT_DEF_MAX_INFLIGHT 256u
#define XPORT_MAX_MAX_INFLIGHT 65536u
#define XPORT_DEF_TIMEOUT_MS   10000u
#define XPORT_DEF_POOL_BYTES   (64ull << 20)

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

/* ---- common objects ---- */

struct xport_ops;

struct zl_xport {
	const struct xport_ops *ops;
	struct zl_loop *loop;
	struct zl_xport_opts opts;
	struct xport_pool pool;
	/* Live connections (linked until their close work has run). */
	struct zl_xport_conn *conns;
	struct zl_xport_listener *listeners;
	void *impl; /* implementation state */
	bool destroying;
	struct zl_ratelimit warn_rl; /* per-I/O warnings of this transport */
};

struct zl_xport_conn {
	const struct xport_ops *ops;
	struct zl_xport *x;
	struct zl_xport_conn *prev, *next; /* x->conns */
	uint32_t refs;
	enum zl_xport_kind kind;
	bool closing; /* close started: no new requests, fd gone */
	bool closed;  /* close callback has run */
	bool server;
	uint32_t inflight;
	void *ctx;
	char peer[64];
};

struct zl_xport_listener {
	const struct xport_ops *ops;
	struct zl_xport *x;
	struct zl_xport_listener *prev, *next; /* x->listeners */
	uint16_t port;
};

struct zl_xport_payload {
	struct zl_xport_conn *conn;
};

/* Implementation table. Every entry is called on the loop thread. */
struct xport_ops {
	enum zl_xport_kind kind;
	int (*init)(struct zl_xport *x);
	void (*fini)(struct zl_xport *x);
	int (*connect)(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		       zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out);
	int (*listen)(struct zl_xport *x, const char *host, uint16_t port,
		      const struct zl_xport_server_ops *ops, void *arg,
		      struct zl_xport_listener **out);
	void (*listener_close)(struct zl_xport_listener *l);
	/* Starts closing (idempotent); callbacks run deferred. reason: 0 for a
	 * local close, else the negative cause handed to the close callback. */
	void (*conn_close)(struct zl_xport_conn *c, int reason);
	/* Destroy path: closes and runs the close work right now. */
	void (*conn_close_now)(struct zl_xport_conn *c);
	/* Last reference gone: frees the connection memory. */
	void (*conn_free)(struct zl_xport_conn *c);
	int (*request)(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
		       uint32_t out_len, void *in, uint32_t in_cap, zl_xport_reply_cb cb,
		       void *arg);
	int (*fetch)(struct zl_xport_payload *p, void *buf, uint32_t len, zl_xport_done_cb cb,
		     void *arg);
	void (*discard)(struct zl_xport_payload *p);
	int (*reply)(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data,
		     uint32_t len, zl_xport_done_cb sent_cb, void *arg);
	/* Optional: registers a new pool region with the device. */
	xport_pool_region_fn mem_register;
};

extern const struct xport_ops xport_tcp_ops;

/* Connection and listener bookkeeping in x (xport.c). */
void xport_conn_init(struct zl_xport *x, struct zl_xport_conn *c, bool server);
void xport_conn_link(struct zl_xport_conn *c);
void xport_conn_unlink(struct zl_xport_conn *c);
void xport_listener_link(struct zl_xport *x, struct zl_xport_listener *l);
void xport_listener_unlink(struct zl_xport_listener *l);

#endif
