/* Reaching a storage node: which transport to use for it, and the HELLO
 * exchange that opens every connection (docs/PROTOCOL-NOTES.md,
 * "Connection"). One implementation shared by the volume client (lib/client)
 * and the storage daemon's replication (storage/). Loop thread only, like
 * the rest of the transport. */
#ifndef ZL_XPORT_PEER_H
#define ZL_XPORT_PEER_H

#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

/* Bits of struct zl_wire_hello.caps: the transports the sender serves (a
 * server) or is using (a client). Every server serves TCP. */
#define ZL_WIRE_CAP_TCP	 (1u << 0)
#define ZL_WIRE_CAP_RDMA (1u << 1)
#define ZL_WIRE_CAP_ALL_ (ZL_WIRE_CAP_TCP | ZL_WIRE_CAP_RDMA)
/* The sender reads and writes ZL_WF_SEQ (a snapshot sequence on data
 * requests, lib/wire/wire.h). A client offers it in its HELLO; a server
 * answers with it only when offered (an older client refuses unknown
 * bits), and only then may either side send the flag. */
#define ZL_WIRE_CAP_SNAPSEQ (1u << 2)
/* A request's HELLO: the token is a cluster token (docs/SECURITY.md), not an
 * attach token. Never in a server's reply. */
#define ZL_WIRE_CAP_CLUSTER (1u << 8)

/* Chooses the transport to a storage node from its etcd record (rdma_port,
 * transports "tcp" or "tcp,rdma") under selection sel. rdma_ok says this
 * process has (or can create) an RDMA transport.
 *   tcp:  TCP.
 *   rdma: RDMA when the node serves it and rdma_ok, else -ZL_ERR_CONN with
 *         one logged line saying what to change.
 *   auto: RDMA when the node serves it, rdma_ok, and rdma_cm resolves a route
 *         to addr over an RDMA device within timeout_ms (blocking), else TCP.
 * Returns 0 with *out set, -ZL_ERR_CONN, or -ZL_ERR_INVAL (bad arguments).
 * Touches no transport: any thread may call it (storage_fwd.c does so on
 * its look-up thread, as it may wait). */
int zl_xport_pick(enum zl_xport_select sel, const char *node_id, const char *addr,
		  uint16_t rdma_port, const char *transports, bool rdma_ok, int timeout_ms,
		  enum zl_xport_kind *out);

/* Connects to storage node node_id at addr:port on x: with TLS when the
 * node's record says tls and x is TCP (RDMA is never encrypted, see
 * docs/SECURITY.md), else plaintext. A TLS node without a CA in x fails
 * with -ZL_ERR_TLS_CA and one logged line that says to pass --tls-ca.
 * Returns what zl_xport_connect / zl_xport_connect_tls return. */
int zl_xport_connect_node(struct zl_xport *x, const char *node_id, const char *addr,
			  uint16_t port, bool tls, int timeout_ms, zl_xport_close_cb on_close,
			  void *arg, struct zl_xport_conn **out);

/* zl_xport_connect_node without waiting for the connection
 * (zl_xport_connect_start): requests queue until it is up. */
int zl_xport_connect_node_start(struct zl_xport *x, const char *node_id, const char *addr,
				uint16_t port, bool tls, int timeout_ms,
				zl_xport_close_cb on_close, void *arg, struct zl_xport_conn **out);

/* Buffers of one HELLO exchange; they must stay valid (inside the caller's
 * connection state) until the reply callback has run. */
struct zl_xport_hello {
	struct zl_wire_hdr hdr;
	uint8_t out[ZL_WIRE_HELLO_SIZE];
	uint8_t in[ZL_WIRE_HELLO_SIZE];
	char peer[64]; /* address, for the messages of zl_xport_hello_check */
};

/* Fills and encodes a HELLO payload: protocol version, self_id (truncated to
 * the wire field), caps, token (NULL or "" = none). */
void zl_xport_hello_encode(uint8_t out[ZL_WIRE_HELLO_SIZE], const char *self_id, uint32_t caps,
			   const char *token);

/* Sends HELLO on c (our id, the caps of c's transport, epoch, token) with the
 * buffers in h. Returns what zl_xport_request returns: 0 (cb runs exactly
 * once; check its outcome with zl_xport_hello_check), -ZL_ERR_BUSY,
 * -ZL_ERR_CONN. */
int zl_xport_hello_send(struct zl_xport_conn *c, struct zl_xport_hello *h, const char *self_id,
			uint64_t epoch, const char *token, zl_xport_reply_cb cb, void *arg);

/* Credentials of a HELLO (docs/SECURITY.md): an attach token for vol_id at
 * epoch, or (cluster) the cluster token of self_id with vol_id 0. */
struct zl_xport_cred {
	uint64_t vol_id;
	uint64_t epoch;
	const char *token; /* NULL or "" = none; never logged */
	bool cluster;	   /* sets ZL_WIRE_CAP_CLUSTER */
	/* Further caps to offer: ZL_WIRE_CAP_SNAPSEQ (other bits ignored). */
	uint32_t caps;
};

/* zl_xport_hello_send with credentials (cred NULL = none, epoch 0). */
int zl_xport_hello_send_cred(struct zl_xport_conn *c, struct zl_xport_hello *h,
			     const char *self_id, const struct zl_xport_cred *cred,
			     zl_xport_reply_cb cb, void *arg);

/* Checks the outcome of a HELLO (status and rep as given to the reply
 * callback, payload in h->in): a reply came, its status is 0, the payload
 * decodes, the protocol version is ours, caps name TCP and nothing unknown,
 * and the node id is expect_id (an address can be reused by another node
 * after a restart). Logs one warning naming what failed. Returns 0 (*out,
 * optional, gets the peer's HELLO), the transport error, the reply's error,
 * -ZL_ERR_PROTO, -ZL_ERR_VERSION, or -ZL_ERR_CONN (another node answered). */
int zl_xport_hello_check(const struct zl_xport_hello *h, int status, const struct zl_wire_hdr *rep,
			 const char *expect_id, struct zl_wire_hello *out);

/* "tcp", "rdma", "tcp,rdma" for HELLO caps (unknown bits ignored). */
const char *zl_xport_caps_name(uint32_t caps);

#endif
