/* Transport: one asynchronous, message-based interface with a TCP (tcp.c) and
 * an RDMA (rdma_*.c) implementation. Callers never know which one carries them.
 *
 * Threading: a struct zl_xport belongs to one struct zl_loop; every call and
 * every callback happens on that loop's thread. Callbacks are never invoked
 * from inside the call that started the operation (they are deferred to the
 * loop), so callers may hold state across calls without re-entrancy surprises.
 *
 * Memory: data buffers come from the transport's pool (zl_xport_buf_alloc):
 * 4 KiB aligned (usable for O_DIRECT), registered once with the RDMA device
 * on RDMA. The pool grows by large slabs and never returns memory, so steady
 * state I/O never mallocs. TCP also accepts any caller memory.
 *
 * Client side:  zl_xport_connect() then zl_xport_request(conn, hdr, out, in, cb).
 *   The transport fills hdr->req_id, payload_len (= out_len) and payload_crc;
 *   the reply's data (READ) lands directly in `in` (at most in_cap bytes).
 * Server side:  zl_xport_listen(); ops->on_request(conn, hdr, payload) is called
 *   once per request. If hdr->payload_len > 0 the server must, before
 *   returning from on_request, either call zl_xport_fetch(payload, buf, cb) to
 *   have the payload moved into its buffer, or zl_xport_discard(payload). On
 *   TCP no further request of that connection is read until the payload is
 *   consumed. Replies go out with zl_xport_reply().
 */
#ifndef ZL_TRANSPORT_H
#define ZL_TRANSPORT_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "../common/loop.h"
#include "../wire/wire.h"

enum zl_xport_kind {
	ZL_XPORT_TCP = 1,
	ZL_XPORT_RDMA = 2,
};

/* "auto" picks RDMA when a device reaches the peer, else TCP. */
enum zl_xport_select { ZL_XPORT_SEL_AUTO = 0, ZL_XPORT_SEL_TCP, ZL_XPORT_SEL_RDMA };
/* Parses "auto"|"tcp"|"rdma"; 0 or -ZL_ERR_INVAL. */
int zl_xport_select_parse(const char *s, enum zl_xport_select *out);
const char *zl_xport_kind_name(enum zl_xport_kind k);
/* Resolves a selection for a peer: tcp and rdma as given; auto is RDMA when
 * rdma_cm resolves an address and route to host over an RDMA device within
 * timeout_ms (blocking), else TCP (also when built without RDMA). port may be
 * 0. Returns 0 or -ZL_ERR_INVAL. */
int zl_xport_select_kind(enum zl_xport_select sel, const char *host, uint16_t port, int timeout_ms,
			 enum zl_xport_kind *out);

struct zl_xport;
struct zl_xport_conn;
struct zl_xport_listener;
struct zl_xport_payload; /* server-side handle to a request's payload */

struct zl_xport_opts {
	enum zl_xport_kind kind;
	/* Requests in flight per connection (client) / accepted per connection
	 * (server). Default 256. */
	uint32_t max_inflight;
	/* Request timeout in ms (client side). Default 10000. On timeout the
	 * request fails with -ZL_ERR_TIMEOUT and the connection is closed. */
	uint32_t timeout_ms;
	/* Initial pool size in bytes (default 64 MiB), grown on demand. */
	uint64_t pool_bytes;
	/* TLS (TCP only; RDMA ignores these; docs/SECURITY.md). File paths,
	 * read once by zl_xport_create. tls_cert + tls_key (PEM): every
	 * connection the transport's listeners accept must be TLS (a
	 * plaintext one is closed). tls_ca (PEM): zl_xport_connect_tls
	 * verifies the server's certificate chain against it. A handshake
	 * not done within timeout_ms closes the connection. */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	/* Name a server certificate must carry (SAN DNS entry) on every
	 * zl_xport_connect_tls; NULL or "": the address connected to must be
	 * in its SAN (IP entry, or DNS for a host name). */
	const char *tls_server_name;
};

/* Creates a transport bound to loop. Returns 0, -ENOMEM, -ENODEV (RDMA
 * without a device), -EPROTONOSUPPORT (kind not built in), -ZL_ERR_INVAL
 * (also for TLS files that do not load; logged). */
int zl_xport_create(struct zl_loop *loop, const struct zl_xport_opts *opts, struct zl_xport **out);
/* Closes every connection and listener (in-flight requests fail with
 * -ZL_ERR_CONN), frees the pool. Accepts NULL. */
void zl_xport_destroy(struct zl_xport *x);
enum zl_xport_kind zl_xport_kind(const struct zl_xport *x);
struct zl_loop *zl_xport_loop(const struct zl_xport *x);

/* What a transport counted (plain counters of its loop thread). */
enum zl_xport_stat_kind { ZL_XPORT_SK_TCP, ZL_XPORT_SK_TLS, ZL_XPORT_SK_RDMA, ZL_XPORT_SK_N };
struct zl_xport_stats {
	uint64_t opened[ZL_XPORT_SK_N]; /* connections, both sides, by kind */
	uint64_t closed[ZL_XPORT_SK_N];
	uint64_t timeouts;	   /* client requests failed by their deadline */
	uint64_t rdma_credit_waits; /* request posts that waited for a credit */
	uint64_t rdma_window_waits; /* ... for a free memory window */
	uint64_t rdma_wc_errors;    /* work completions in error (flushes not counted) */
	uint64_t rdma_copied_bytes; /* volume data memcpy'd on the RDMA path (rdma_copy) */
};
/* Adds x's counters to *acc (loop thread; NULL x: nothing). */
void zl_xport_stats_add(const struct zl_xport *x, struct zl_xport_stats *acc);
/* "tcp", "tls", "rdma". */
const char *zl_xport_stat_kind_name(enum zl_xport_stat_kind k);

/* Pool buffers: len rounded up to a size class (4 KiB .. 4 MiB + 4 KiB).
 * Returns NULL when len is larger than the biggest class or memory is out. */
void *zl_xport_buf_alloc(struct zl_xport *x, size_t len);
void zl_xport_buf_free(struct zl_xport *x, void *buf);
/* True when buf..buf+len lies inside the pool (registered memory). */
bool zl_xport_buf_owned(const struct zl_xport *x, const void *buf, size_t len);

/* ---- connections (both sides) ---- */

/* Called once when a connection dies (peer closed, error, timeout,
 * zl_xport_conn_close). After it returns the transport drops its reference. */
typedef void (*zl_xport_close_cb)(void *arg, struct zl_xport_conn *c, int reason);

/* Reference counting: a conn stays valid while someone holds a reference. */
void zl_xport_conn_get(struct zl_xport_conn *c);
void zl_xport_conn_put(struct zl_xport_conn *c);
/* Starts closing: in-flight client requests fail with -ZL_ERR_CONN, the close
 * callback runs (deferred). Idempotent. */
void zl_xport_conn_close(struct zl_xport_conn *c);
/* True once the close work ran: every request of c failed or answered,
 * its close callback called (a module's teardown waits for it). */
bool zl_xport_conn_closed(const struct zl_xport_conn *c);
bool zl_xport_conn_alive(const struct zl_xport_conn *c);
void zl_xport_conn_set_ctx(struct zl_xport_conn *c, void *ctx);
void *zl_xport_conn_ctx(const struct zl_xport_conn *c);
/* "10.0.0.1:7000" of the peer. */
const char *zl_xport_conn_peer(const struct zl_xport_conn *c);
enum zl_xport_kind zl_xport_conn_kind(const struct zl_xport_conn *c);
/* Requests currently waiting for a reply (client side). */
uint32_t zl_xport_conn_inflight(const struct zl_xport_conn *c);

/* ---- client side ---- */

/* Reply callback: status is 0 when a reply arrived (its status field says
 * how the request went), or a transport error (-ZL_ERR_CONN, -ZL_ERR_TLS,
 * -ZL_ERR_TIMEOUT,
 * -ZL_ERR_CORRUPT for a payload CRC mismatch, -ZL_ERR_PROTO). `rep` is NULL
 * on a transport error; valid only during the callback. */
typedef void (*zl_xport_reply_cb)(void *arg, int status, const struct zl_wire_hdr *rep);

/* Connects (blocking, at most timeout_ms). Returns 0, -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH, ... The caller owns one reference. */
int zl_xport_connect(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
		     zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out);

/* zl_xport_connect over TLS (TCP): the TCP connect blocks as above, the
 * handshake then runs on the loop; requests queue until it is done and fail
 * with -ZL_ERR_TLS if it fails (the reason, e.g. "certificate verify
 * failed: ...", is logged once). Returns what zl_xport_connect returns,
 * -ZL_ERR_TLS_CA when x has no tls_ca, -EPROTONOSUPPORT on RDMA. */
int zl_xport_connect_tls(struct zl_xport *x, const char *host, uint16_t port, int timeout_ms,
			 zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out);
/* zl_xport_connect (tls: zl_xport_connect_tls) without waiting for the
 * connection: returns at once with the connection being made; requests
 * queue until it is up and fail with -ZL_ERR_CONN (the close callback runs
 * with the reason) when the connect fails or is not done within timeout_ms.
 * Host names are resolved here (getaddrinfo: instant for an address
 * literal); of several addresses, the first one whose connect does not fail
 * at once is used. Where the transport cannot connect without waiting
 * (RDMA), this is the blocking connect. Returns 0 (the caller owns one
 * reference) or what zl_xport_connect / zl_xport_connect_tls return for an
 * immediate failure. */
int zl_xport_connect_start(struct zl_xport *x, const char *host, uint16_t port, bool tls,
			   int timeout_ms, zl_xport_close_cb on_close, void *arg,
			   struct zl_xport_conn **out);
/* The last TLS failure of a client connection on this thread, as logged
 * ("TLS handshake with ADDR failed: certificate verify failed: ...; is
 * --tls-ca ...", "storage N at ADDR requires TLS: pass --tls-ca FILE ..."),
 * for tools whose library logs are off; "" when there was none. */
const char *zl_xport_tls_last_error(void);
/* True when x's listeners accept TLS only (tls_cert and tls_key set). */
bool zl_xport_tls_serving(const struct zl_xport *x);

/* Sends a request. hdr: opcode, flags, vol_id, chunk, offset, length,
 * slice_ver, epoch, aux are the caller's; req_id, payload_len, payload_crc are
 * set here. out/out_len: payload to send (must stay valid until the callback).
 * in/in_cap: where READ reply data lands. Returns 0 (cb will run exactly once),
 * -ZL_ERR_BUSY (max_inflight reached), -ZL_ERR_CONN (connection dead). */
int zl_xport_request(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
		     uint32_t out_len, void *in, uint32_t in_cap, zl_xport_reply_cb cb, void *arg);
/* The same, out being whole 4 KiB pieces whose CRC32Cs the caller holds
 * (out_crcs, e.g. verified when they arrived): the message's CRC is joined
 * from them, no pass over the data (CRC once per byte). The receiver still
 * checks the data against it: CRCs that do not match the data fail there.
 * out_crcs NULL, or out_len not a multiple of 4 KiB: as zl_xport_request. */
int zl_xport_request_crcs(struct zl_xport_conn *c, struct zl_wire_hdr *hdr, const void *out,
			  uint32_t out_len, const uint32_t *out_crcs, void *in, uint32_t in_cap,
			  zl_xport_reply_cb cb, void *arg);

/* ---- server side ---- */

struct zl_xport_server_ops {
	/* New connection accepted; the transport holds its reference until close. */
	void (*on_conn)(void *arg, struct zl_xport_conn *c);
	/* A validated request header (zl_wire_decode passed). */
	void (*on_request)(void *arg, struct zl_xport_conn *c, const struct zl_wire_hdr *hdr,
			   struct zl_xport_payload *payload);
	void (*on_close)(void *arg, struct zl_xport_conn *c, int reason);
};

/* Listens on host:port ("0.0.0.0", port 0 picks one). Returns 0 or -errno. */
int zl_xport_listen(struct zl_xport *x, const char *host, uint16_t port,
		    const struct zl_xport_server_ops *ops, void *arg, struct zl_xport_listener **out);
uint16_t zl_xport_listener_port(const struct zl_xport_listener *l);
void zl_xport_listener_close(struct zl_xport_listener *l);

/* Fetch callback: 0 when the payload is in buf (its CRC checked), else
 * -ZL_ERR_CORRUPT / -ZL_ERR_CONN. */
typedef void (*zl_xport_done_cb)(void *arg, int status);

/* Moves the request's payload (hdr->payload_len bytes on TCP; the described
 * remote buffer on RDMA) into buf. Call from on_request only. Returns 0 (cb
 * runs once) or a negative error (cb does not run). */
int zl_xport_fetch(struct zl_xport_payload *p, void *buf, uint32_t len, zl_xport_done_cb cb,
		   void *arg);
/* The same, and when len is a multiple of 4 KiB, the CRC32C of each 4 KiB
 * piece of the payload lands in crcs[0 .. len / 4096) by the time cb runs
 * with 0: the check of the message's CRC computes them (one pass). */
int zl_xport_fetch_crcs(struct zl_xport_payload *p, void *buf, uint32_t len, uint32_t *crcs,
			zl_xport_done_cb cb, void *arg);
/* Drops the payload unread. */
void zl_xport_discard(struct zl_xport_payload *p);

/* Sends a reply: rep from zl_wire_reply_init(); data/len for READ replies
 * (must stay valid until sent_cb; NULL/0 otherwise). sent_cb (optional) runs
 * once the data buffer may be reused, with 0 or -ZL_ERR_CONN. Returns 0, or
 * -ZL_ERR_CONN when the connection is gone (sent_cb does not run). */
int zl_xport_reply(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data,
		   uint32_t len, zl_xport_done_cb sent_cb, void *arg);
/* The same with the CRC32Cs of data's 4 KiB pieces (see
 * zl_xport_request_crcs). */
int zl_xport_reply_crcs(struct zl_xport_conn *c, struct zl_wire_hdr *rep, const void *data,
			uint32_t len, const uint32_t *crcs, zl_xport_done_cb sent_cb, void *arg);

#endif
