/* RDMA transport internals (rdma.c). Only xport.c and the memory-exposure
 * test (test/rdma/mw_test.c) include this, and only when the build found
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

#define RDMA_HS_MAGIC 0x44524c5au /* "ZLRD" little-endian */
#define RDMA_HS_VERSION 1
#define RDMA_HS_SIZE 16
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

#endif
