/* NBD protocol server (newstyle fixed handshake, simple replies) on a
 * struct zl_loop, serving one export through an asynchronous backend (a
 * Zipline volume via zl_nbd_backend_vol(), or any other implementation of
 * struct zl_nbd_backend_ops, e.g. an in-memory one in tests).
 *
 * The codec half (zl_nbd_*_decode/encode, zl_nbd_opt_reply) is pure: no I/O,
 * no allocation, every field checked before use. It is fuzzed
 * (test/fuzz/fuzz_nbd.c). The server half owns sockets and request slots.
 *
 * Threading: everything runs on the loop's thread, like the client library. */
#ifndef ZL_NBD_H
#define ZL_NBD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/loop.h"

/* ---- protocol constants (all integers on the wire are big-endian) ---- */

#define ZL_NBD_MAGIC		  0x4e42444d41474943ull /* "NBDMAGIC" */
#define ZL_NBD_IHAVEOPT		  0x49484156454f5054ull /* "IHAVEOPT" */
#define ZL_NBD_OPT_REPLY_MAGIC	  0x0003e889045565a9ull
#define ZL_NBD_REQUEST_MAGIC	  0x25609513u
#define ZL_NBD_SIMPLE_REPLY_MAGIC 0x67446698u

/* Handshake flags (server) and client flags. */
#define ZL_NBD_FLAG_FIXED_NEWSTYLE   (1u << 0)
#define ZL_NBD_FLAG_NO_ZEROES	     (1u << 1)
#define ZL_NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define ZL_NBD_FLAG_C_NO_ZEROES	     (1u << 1)

/* Options. */
#define ZL_NBD_OPT_EXPORT_NAME	    1u
#define ZL_NBD_OPT_ABORT	    2u
#define ZL_NBD_OPT_LIST		    3u
#define ZL_NBD_OPT_STARTTLS	    5u
#define ZL_NBD_OPT_INFO		    6u
#define ZL_NBD_OPT_GO		    7u
#define ZL_NBD_OPT_STRUCTURED_REPLY 8u

/* Option reply types. */
#define ZL_NBD_REP_ACK	       1u
#define ZL_NBD_REP_SERVER      2u
#define ZL_NBD_REP_INFO	       3u
#define ZL_NBD_REP_ERR_BASE    (1u << 31)
#define ZL_NBD_REP_ERR_UNSUP   (ZL_NBD_REP_ERR_BASE + 1)
#define ZL_NBD_REP_ERR_POLICY  (ZL_NBD_REP_ERR_BASE + 2)
#define ZL_NBD_REP_ERR_INVALID (ZL_NBD_REP_ERR_BASE + 3)
#define ZL_NBD_REP_ERR_UNKNOWN (ZL_NBD_REP_ERR_BASE + 6)
#define ZL_NBD_REP_ERR_TOO_BIG (ZL_NBD_REP_ERR_BASE + 9)

/* NBD_REP_INFO payload types. */
#define ZL_NBD_INFO_EXPORT	0u
#define ZL_NBD_INFO_NAME	1u
#define ZL_NBD_INFO_DESCRIPTION 2u
#define ZL_NBD_INFO_BLOCK_SIZE	3u

/* Transmission flags. */
#define ZL_NBD_TFLAG_HAS_FLAGS	       (1u << 0)
#define ZL_NBD_TFLAG_READ_ONLY	       (1u << 1)
#define ZL_NBD_TFLAG_SEND_FLUSH	       (1u << 2)
#define ZL_NBD_TFLAG_SEND_FUA	       (1u << 3)
#define ZL_NBD_TFLAG_SEND_TRIM	       (1u << 5)
#define ZL_NBD_TFLAG_SEND_WRITE_ZEROES (1u << 6)
#define ZL_NBD_TFLAG_CAN_MULTI_CONN    (1u << 8)

/* Commands and command flags. */
#define ZL_NBD_CMD_READ		0u
#define ZL_NBD_CMD_WRITE	1u
#define ZL_NBD_CMD_DISC		2u
#define ZL_NBD_CMD_FLUSH	3u
#define ZL_NBD_CMD_TRIM		4u
#define ZL_NBD_CMD_WRITE_ZEROES 6u
#define ZL_NBD_CMD_FLAG_FUA	(1u << 0)
#define ZL_NBD_CMD_FLAG_NO_HOLE (1u << 1)

/* Error values carried in simple replies (fixed by the protocol, not the
 * host's errno numbering). */
#define ZL_NBD_EPERM	 1u
#define ZL_NBD_EIO	 5u
#define ZL_NBD_ENOMEM	 12u
#define ZL_NBD_EINVAL	 22u
#define ZL_NBD_ENOSPC	 28u
#define ZL_NBD_EOVERFLOW 75u
#define ZL_NBD_ENOTSUP	 95u
#define ZL_NBD_ESHUTDOWN 108u

/* Sizes. */
#define ZL_NBD_GREETING_LEN	 18u /* NBDMAGIC, IHAVEOPT, u16 flags */
#define ZL_NBD_OPT_HDR_LEN	 16u /* IHAVEOPT, u32 option, u32 length */
#define ZL_NBD_OPT_REPLY_HDR_LEN 20u /* magic, u32 option, u32 type, u32 length */
#define ZL_NBD_REQ_LEN		 28u
#define ZL_NBD_REPLY_LEN	 16u
#define ZL_NBD_MAX_NAME		 4096u
#define ZL_NBD_MAX_OPT_LEN	 (ZL_NBD_MAX_NAME + 1024u) /* longer options close the session */
#define ZL_NBD_MAX_IO		 (4u << 20)		   /* advertised maximum block size */
#define ZL_NBD_PREF_BLOCK	 4096u
/* Largest reply zl_nbd_opt_reply() produces (NBD_OPT_LIST with a full name). */
#define ZL_NBD_OPT_OUT_MAX (ZL_NBD_MAX_NAME + 256u)

/* ---- codec ---- */

struct zl_nbd_opt_hdr {
	uint32_t option;
	uint32_t length; /* bytes of option data that follow */
};

struct zl_nbd_req {
	uint16_t flags;
	uint16_t type;
	uint64_t cookie;
	uint64_t offset;
	uint32_t length;
};

/* What the export looks like to the handshake. */
struct zl_nbd_export {
	const char *name; /* "" accepts any name; otherwise the name must match */
	uint64_t size;
	uint16_t tflags; /* transmission flags */
};

/* Session action after an option. */
enum zl_nbd_opt_action {
	ZL_NBD_ACT_CONTINUE = 0, /* send the reply, read the next option */
	ZL_NBD_ACT_TRANSMIT,	 /* send the reply, then enter transmission */
	ZL_NBD_ACT_CLOSE,	 /* send the reply (if any), then close */
};

/* Writes the 18-byte server greeting. */
void zl_nbd_greeting_encode(uint8_t out[ZL_NBD_GREETING_LEN]);

/* Decodes an option header. Returns 0, or -ZL_ERR_PROTO (bad magic: the
 * session must be closed). The length is not checked here. */
int zl_nbd_opt_hdr_decode(const uint8_t in[ZL_NBD_OPT_HDR_LEN], struct zl_nbd_opt_hdr *out);

/* Handles one complete option (header + data of hdr->length bytes) with the
 * client's flags (ZL_NBD_FLAG_C_*): writes the whole reply into out (at most
 * ZL_NBD_OPT_OUT_MAX bytes), *out_len its length, *action what to do next.
 * Returns 0, or -ZL_ERR_INVAL when out_cap is too small. Malformed option
 * data yields an NBD_REP_ERR_INVALID reply, not an error. */
int zl_nbd_opt_reply(const struct zl_nbd_export *exp, uint32_t client_flags,
		     const struct zl_nbd_opt_hdr *hdr, const uint8_t *data, uint8_t *out,
		     size_t out_cap, size_t *out_len, enum zl_nbd_opt_action *action);

/* Decodes a transmission request header. Returns 0 or -ZL_ERR_PROTO (bad
 * magic: the connection must be closed). */
int zl_nbd_req_decode(const uint8_t in[ZL_NBD_REQ_LEN], struct zl_nbd_req *out);

/* Checks a decoded request against the export size and ZL_NBD_MAX_IO.
 * Returns 0 when it may be executed, else the NBD error to reply
 * (ZL_NBD_EINVAL for unknown commands or flags, zero or oversized lengths,
 * ranges beyond the end; ZL_NBD_ENOTSUP ...). DISC returns 0. */
uint32_t zl_nbd_req_check(const struct zl_nbd_req *r, uint64_t export_size);

/* True when the request carries a payload of r->length bytes (WRITE). */
static inline bool zl_nbd_req_has_payload(const struct zl_nbd_req *r)
{
	return r->type == ZL_NBD_CMD_WRITE;
}

/* Encodes a simple reply header. */
void zl_nbd_reply_encode(uint8_t out[ZL_NBD_REPLY_LEN], uint32_t nbd_error, uint64_t cookie);

/* Maps 0 / negative errno / negative ZL_ERR_* to an NBD error value. */
uint32_t zl_nbd_errno(int err);

/* ---- backend ---- */

/* Completion of a backend I/O: 0 or a negative error. */
typedef void (*zl_nbd_io_cb)(void *arg, int status);

/* Asynchronous storage behind the export. Submission functions return 0 (cb
 * runs exactly once, never inside the call), -ZL_ERR_BUSY (too much in
 * flight: the server retries after one of its I/Os completes), or another
 * negative error (replied to the client). Buffers come from buf_alloc. */
struct zl_nbd_backend_ops {
	int (*read)(void *ctx, void *buf, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg);
	int (*write)(void *ctx, const void *buf, uint64_t off, uint32_t len, bool fua,
		     zl_nbd_io_cb cb, void *arg);
	int (*flush)(void *ctx, zl_nbd_io_cb cb, void *arg);
	int (*discard)(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg);
	int (*write_zeroes)(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg);
	void *(*buf_alloc)(void *ctx, size_t len);
	void (*buf_free)(void *ctx, void *buf);
};

struct zl_nbd_backend {
	const struct zl_nbd_backend_ops *ops;
	void *ctx;
	uint64_t size;
};

struct zl_vol;
/* Fills *out to serve a Zipline volume (lib/client). The volume must outlive
 * the server. */
void zl_nbd_backend_vol(struct zl_vol *v, struct zl_nbd_backend *out);

/* ---- server ---- */

struct zl_nbd_server;

struct zl_nbd_server_opts {
	/* "unix:/path/to.sock" (a stale socket file is removed) or "HOST:PORT"
	 * ("[::1]:10809", "0.0.0.0:10809"); NULL: no listener, the server
	 * serves only the sockets handed to zl_nbd_server_adopt(). */
	const char *listen;
	const char *export_name; /* NULL or "": any name is accepted */
	uint32_t max_inflight;	 /* requests in flight per connection, default 32 */
	uint32_t slot_buf;	 /* preallocated buffer per request slot, default 256 KiB;
				  * larger requests (up to 4 MiB) borrow a pool buffer */
	uint32_t max_conns;	 /* simultaneous connections, default 64 */
};

struct zl_nbd_server_stats {
	uint64_t conns_accepted, conns_open;
	uint64_t reads, writes, flushes, trims, zeroes, errors;
	uint64_t read_bytes, write_bytes;
};

/* Listens and serves on loop. backend is copied; its ctx must outlive the
 * server. Returns 0, -ZL_ERR_INVAL (bad listen address), -EADDRINUSE (a live
 * server owns the unix socket / port), -EEXIST (the unix path exists and is
 * not a socket), or another -errno. */
int zl_nbd_server_create(struct zl_loop *loop, const struct zl_nbd_backend *backend,
			 const struct zl_nbd_server_opts *opts, struct zl_nbd_server **out);
/* Serves fd, a connected stream socket whose client skipped the handshake
 * (the kernel's nbd driver, configured through netlink with the export's
 * size and zl_nbd_server_tflags()), in the transmission phase. Takes fd
 * (made non-blocking) on success; on error the caller still owns it.
 * 0, -ZL_ERR_INVAL (shutting down, bad fd), -ZL_ERR_BUSY (max_conns open),
 * -ENOMEM or another -errno. */
int zl_nbd_server_adopt(struct zl_nbd_server *s, int fd, const char *peer);
/* The transmission flags the export advertises (ZL_NBD_TFLAG_*). */
uint16_t zl_nbd_server_tflags(const struct zl_nbd_server *s);
/* The export grew to size (the volume was expanded): requests up to it are
 * served from now on, and new clients' handshakes announce it. A client
 * that learnt the old size keeps it until told otherwise (the kernel's nbd
 * driver: NBD_CMD_RECONFIGURE with NBD_ATTR_SIZE_BYTES). Loop thread. */
void zl_nbd_server_set_size(struct zl_nbd_server *s, uint64_t size);
/* Stops accepting and closes every connection once its in-flight I/O has
 * completed (no reply is sent for it). Run the loop until
 * zl_nbd_server_idle() before zl_nbd_server_destroy(). */
void zl_nbd_server_shutdown(struct zl_nbd_server *s);
/* True when no connection is open and no backend I/O is in flight. */
bool zl_nbd_server_idle(const struct zl_nbd_server *s);
/* Closes everything. Backend I/O still in flight would complete into freed
 * memory: shut down and wait for idle first (or destroy the backend first
 * if it completes nothing after its own destruction). Accepts NULL. */
void zl_nbd_server_destroy(struct zl_nbd_server *s);
/* The bound address ("unix:/path", "127.0.0.1:40123"), useful with port 0. */
const char *zl_nbd_server_address(const struct zl_nbd_server *s);
void zl_nbd_server_get_stats(const struct zl_nbd_server *s, struct zl_nbd_server_stats *out);

#endif
