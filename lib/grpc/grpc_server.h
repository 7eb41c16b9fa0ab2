/* Unary gRPC server for the CSI daemons: gRPC core underneath, protobuf-c
 * messages on top. Named grpc_server.h so that it never shadows
 * <grpc/grpc.h>; gRPC core's C API is not ABI-stable, so every gRPC core call
 * of the project lives in lib/grpc and nothing here exposes a gRPC type.
 *
 * Model: one completion-queue thread accepts calls and hands them to a pool
 * of worker threads, so a slow handler (a mount, an etcd round trip) never
 * holds up another call. Methods flagged ZL_GRPC_METHOD_INLINE (Identity:
 * Probe, GetPluginInfo) run on the completion-queue thread itself and are
 * answered even when every worker is busy; they must not block.
 *
 * A handler receives the decoded request and a zeroed response message of
 * the method's response type. Whatever it hangs off the response (strings,
 * sub-messages, arrays) comes from zl_grpc_call_alloc()/_strdup(), which the
 * server frees once the response is encoded: the request is unpacked and
 * freed, and the response packed, in the one function that runs the
 * handler. */
#ifndef ZL_GRPC_SERVER_H
#define ZL_GRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* gRPC status codes (the wire values every gRPC implementation uses). */
enum zl_grpc_code {
	ZL_GRPC_OK = 0,
	ZL_GRPC_CANCELLED = 1,
	ZL_GRPC_UNKNOWN = 2,
	ZL_GRPC_INVALID_ARGUMENT = 3,
	ZL_GRPC_DEADLINE_EXCEEDED = 4,
	ZL_GRPC_NOT_FOUND = 5,
	ZL_GRPC_ALREADY_EXISTS = 6,
	ZL_GRPC_PERMISSION_DENIED = 7,
	ZL_GRPC_RESOURCE_EXHAUSTED = 8,
	ZL_GRPC_FAILED_PRECONDITION = 9,
	ZL_GRPC_ABORTED = 10,
	ZL_GRPC_OUT_OF_RANGE = 11,
	ZL_GRPC_UNIMPLEMENTED = 12,
	ZL_GRPC_INTERNAL = 13,
	ZL_GRPC_UNAVAILABLE = 14,
	ZL_GRPC_DATA_LOSS = 15,
	ZL_GRPC_UNAUTHENTICATED = 16,
};

/* Longest status message sent to a client (longer ones are truncated). */
#define ZL_GRPC_MSG_MAX 512

struct zl_grpc_server;
/* One RPC being served. Valid only while its handler runs. */
struct zl_grpc_call;

/* Serves one RPC. `req` is the decoded request (read-only, freed after the
 * handler returns); `resp` a zeroed, initialised message of the method's
 * response type. Returns ZL_GRPC_OK to send `resp`, otherwise the status to
 * send: preferably the value of zl_grpc_fail()/zl_grpc_fail_err(), which also
 * record the message. A bare negative project error or errno is accepted as
 * well and mapped with zl_grpc_code_from_err(), its message zl_strerror(). */
typedef int (*zl_grpc_handler_fn)(void *ctx, struct zl_grpc_call *call, const ProtobufCMessage *req,
				  ProtobufCMessage *resp);

/* Run on the completion-queue thread: for cheap, non-blocking handlers only. */
#define ZL_GRPC_METHOD_INLINE 0x1u

struct zl_grpc_method {
	const char *name;			     /* "/csi.v1.Identity/Probe" */
	const ProtobufCMessageDescriptor *req_desc;  /* &csi__v1__probe_request__descriptor */
	const ProtobufCMessageDescriptor *resp_desc; /* &csi__v1__probe_response__descriptor */
	zl_grpc_handler_fn fn;
	unsigned int flags; /* ZL_GRPC_METHOD_* */
};

struct zl_grpc_server_cfg {
	const char *endpoint;		      /* CSI_ENDPOINT: "unix:///path/csi.sock" */
	const struct zl_grpc_method *methods; /* copied; names must be unique */
	size_t n_methods;
	unsigned int workers; /* worker threads; 0 = 4 */
	void *ctx;	      /* passed to every handler */
	const char *name;     /* for logs and messages: "zipline-node" */
};

/* Binds the endpoint (a UNIX socket only, as the CSI spec requires; a stale
 * socket file left by a dead server is removed, a live one or a non-socket
 * file is never touched), registers the methods (any other method answers
 * UNIMPLEMENTED), and starts serving. Block SIGTERM/SIGINT before calling it
 * if the caller waits for them with sigwait(): gRPC's threads inherit the
 * mask. Returns 0, -ZL_ERR_INVAL (bad endpoint or method table),
 * -EADDRINUSE (another server answers on the socket), -EEXIST (the path is
 * not a socket), -ENAMETOOLONG, -ENOMEM, -EIO (gRPC could not listen) or a
 * negative errno from thread creation. */
int zl_grpc_server_create(const struct zl_grpc_server_cfg *cfg, struct zl_grpc_server **out);

/* Stops accepting calls, lets running calls finish for up to grace_ms, then
 * cancels the rest (their handlers still run to completion: the function
 * returns only when no handler runs any more), stops the threads and removes
 * the socket. Call it from a normal thread (e.g. after sigwait()), never
 * from a signal handler or a handler. Idempotent; returns 0. */
int zl_grpc_server_shutdown(struct zl_grpc_server *srv, unsigned int grace_ms);

/* Shuts down (grace 0) if that has not happened yet and frees the server.
 * Accepts NULL. */
void zl_grpc_server_destroy(struct zl_grpc_server *srv);

struct zl_metrics_text;
/* Appends zipline_csi_calls_total{method,code} and
 * zipline_csi_call_duration_seconds{method} (lib/metrics) for the calls
 * answered so far. Any thread; not after zl_grpc_server_destroy. */
void zl_grpc_server_metrics(struct zl_grpc_server *srv, struct zl_metrics_text *t);

/* Filesystem path of the listening socket. */
const char *zl_grpc_server_socket_path(const struct zl_grpc_server *srv);

/* Extracts the socket path from a CSI endpoint ("unix:///abs/path" or
 * "unix:/abs/path") into path[len]. Returns 0, -ZL_ERR_INVAL (not a unix
 * endpoint or not an absolute path; the log line says what is accepted) or
 * -ENAMETOOLONG (longer than a sockaddr_un allows). */
int zl_grpc_endpoint_path(const char *endpoint, char *path, size_t len);

/* The one mapping from project errors (negative ZL_ERR_* or errno; the sign
 * is ignored) to gRPC status codes, shared by both CSI daemons. 0 maps to
 * ZL_GRPC_OK, anything unknown to ZL_GRPC_INTERNAL. */
int zl_grpc_code_from_err(int err);

/* Static name of a status code ("NOT_FOUND"); "UNKNOWN_CODE" outside 0..16. */
const char *zl_grpc_code_name(int code);

/* Full method name of the call ("/csi.v1.Node/NodeStageVolume"). */
const char *zl_grpc_call_method(const struct zl_grpc_call *call);

/* Milliseconds left before the client's deadline: INT64_MAX when the client
 * set none, <= 0 once it has passed (the client no longer waits; a handler
 * should stop starting new work). */
int64_t zl_grpc_call_deadline_left_ms(const struct zl_grpc_call *call);

/* Absolute deadline on the zl_now_ns() clock; 0 when the client set none. */
uint64_t zl_grpc_call_deadline_ns(const struct zl_grpc_call *call);

/* Zeroed memory that lives until the response is encoded (for response
 * strings, sub-messages and arrays). Returns NULL when out of memory. */
void *zl_grpc_call_alloc(struct zl_grpc_call *call, size_t size);
/* strdup into the same per-call memory; NULL when out of memory. */
char *zl_grpc_call_strdup(struct zl_grpc_call *call, const char *s);
/* A sub-message of type desc in the same per-call memory, initialised with
 * its defaults (as the generated __INIT macro would). NULL when out of
 * memory. */
void *zl_grpc_call_new_msg(struct zl_grpc_call *call, const ProtobufCMessageDescriptor *desc);

/* Records the status message (printf format) for the call and returns
 * `code`, so a handler ends with `return zl_grpc_fail(call, ...)`. A code of
 * ZL_GRPC_OK or out of range is turned into ZL_GRPC_INTERNAL. */
int zl_grpc_fail(struct zl_grpc_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a project error: code from zl_grpc_code_from_err(err), message
 * "<formatted text>: <zl_strerror(err)>". */
int zl_grpc_fail_err(struct zl_grpc_call *call, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
