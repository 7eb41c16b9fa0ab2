/* lib/grpc internals: the per-call state shared by grpc_server.c (gRPC core
 * plumbing) and grpc_call.c (what handlers see). */
#ifndef ZL_GRPC_INTERNAL_H
#define ZL_GRPC_INTERNAL_H

#include <stdint.h>

#include <grpc/grpc.h>

#include "lib/grpc/grpc_server.h"

#define GRPC_COMP	     "grpc"
#define GRPC_METHOD_NAME_MAX 256

/* What a completion-queue tag stands for. */
enum grpc_tag_kind {
	GRPC_TAG_NEW_CALL,  /* a requested call arrived (or the request failed at shutdown) */
	GRPC_TAG_CALL_DONE, /* the final batch (status sent, close received) completed */
	GRPC_TAG_SHUTDOWN,  /* grpc_server_shutdown_and_notify finished */
};

struct grpc_tag {
	enum grpc_tag_kind kind;
};

/* Per-call memory for handlers: a list of separately allocated chunks. */
struct grpc_arena_chunk {
	struct grpc_arena_chunk *next;
	max_align_t data[];
};

/* One RPC, from the request we post to gRPC until its final batch
 * completes. Owned by exactly one thread at a time: the completion-queue
 * thread until it is queued, then one worker until the final batch starts,
 * then the completion-queue thread again, which frees it. */
struct zl_grpc_call {
	struct grpc_tag tag;
	struct zl_grpc_server *srv;
	const struct zl_grpc_method *m; /* NULL: the catch-all for unregistered methods */
	size_t midx;
	struct zl_grpc_call *next; /* worker queue link */

	/* filled by gRPC when the call arrives */
	grpc_call *call;
	gpr_timespec deadline;
	grpc_metadata_array md;
	grpc_byte_buffer *payload; /* registered methods only */
	grpc_call_details details; /* unregistered methods only */

	/* filled while serving */
	char method[GRPC_METHOD_NAME_MAX];
	uint64_t accepted_ns;
	uint64_t deadline_ns; /* zl_now_ns() clock; 0 = none */
	int code;
	char msg[ZL_GRPC_MSG_MAX];
	grpc_byte_buffer *resp_bb; /* owned until the final batch completes */
	int cancelled;		   /* out-argument of RECV_CLOSE_ON_SERVER */
	struct grpc_arena_chunk *arena;
};

/* Frees the per-call memory handed out by zl_grpc_call_alloc(). */
void grpc_call_arena_free(struct zl_grpc_call *c);

#endif
