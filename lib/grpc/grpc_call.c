/* What handlers see of a call: deadline, per-call memory, error status; and
 * the project-error to gRPC-code mapping both CSI daemons share. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/grpc/grpc_internal.h"

int zl_grpc_code_from_err(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return ZL_GRPC_OK;
	/* project errors */
	case ZL_ERR_INVAL:
		return ZL_GRPC_INVALID_ARGUMENT;
	case ZL_ERR_NOT_FOUND:
		return ZL_GRPC_NOT_FOUND;
	case ZL_ERR_EXISTS:
		return ZL_GRPC_ALREADY_EXISTS;
	case ZL_ERR_STALE:    /* a newer version or epoch won: retry with fresh state */
	case ZL_ERR_CONFLICT: /* concurrent update or operation on the same object */
		return ZL_GRPC_ABORTED;
	case ZL_ERR_CORRUPT:
		return ZL_GRPC_DATA_LOSS;
	case ZL_ERR_NOSPC:
	case ZL_ERR_NODES: /* placement cannot be satisfied: CSI wants RESOURCE_EXHAUSTED */
		return ZL_GRPC_RESOURCE_EXHAUSTED;
	case ZL_ERR_CONN:
	case ZL_ERR_NOT_INSYNC:
	case ZL_ERR_NOT_PRIMARY:
	case ZL_ERR_UNAVAIL:
	case ZL_ERR_ETCD:
		return ZL_GRPC_UNAVAILABLE;
	case ZL_ERR_TIMEOUT:
		return ZL_GRPC_DEADLINE_EXCEEDED;
	case ZL_ERR_BUSY: /* in use (mounted, attached): the caller must release it first */
	case ZL_ERR_VERSION:
	case ZL_ERR_NOT_ATTACHED: /* ControllerPublish to this node first */
		return ZL_GRPC_FAILED_PRECONDITION;
	case ZL_ERR_RANGE:
		return ZL_GRPC_OUT_OF_RANGE;
	case ZL_ERR_AUTH:
		return ZL_GRPC_UNAUTHENTICATED;
	case ZL_ERR_PROTO:
	case ZL_ERR_IO:
		return ZL_GRPC_INTERNAL;
	/* errno values that reach the daemons from syscalls and helpers */
	case EINVAL:
		return ZL_GRPC_INVALID_ARGUMENT;
	case ENOENT:
		return ZL_GRPC_NOT_FOUND;
	case EEXIST:
		return ZL_GRPC_ALREADY_EXISTS;
	case EPERM:
	case EACCES:
		return ZL_GRPC_PERMISSION_DENIED;
	case ENOSPC:
	case EDQUOT:
	case ENOMEM:
	case EMFILE:
	case ENFILE:
		return ZL_GRPC_RESOURCE_EXHAUSTED;
	case EBUSY:
		return ZL_GRPC_FAILED_PRECONDITION;
	case EALREADY:
	case EINPROGRESS:
		return ZL_GRPC_ABORTED;
	case ETIMEDOUT:
		return ZL_GRPC_DEADLINE_EXCEEDED;
	case EAGAIN:
	case EINTR:
	case ECONNREFUSED:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EPIPE:
		return ZL_GRPC_UNAVAILABLE;
	case ERANGE:
	case EFBIG:
	case EOVERFLOW:
		return ZL_GRPC_OUT_OF_RANGE;
	case ENOSYS:
	case EOPNOTSUPP:
		return ZL_GRPC_UNIMPLEMENTED;
	case ECANCELED:
		return ZL_GRPC_CANCELLED;
	default:
		return ZL_GRPC_INTERNAL;
	}
}

const char *zl_grpc_code_name(int code)
{
	static const char *const names[] = {
	    "OK",
	    "CANCELLED",
	    "UNKNOWN",
	    "INVALID_ARGUMENT",
	    "DEADLINE_EXCEEDED",
	    "NOT_FOUND",
	    "ALREADY_EXISTS",
	    "PERMISSION_DENIED",
	    "RESOURCE_EXHAUSTED",
	    "FAILED_PRECONDITION",
	    "ABORTED",
	    "OUT_OF_RANGE",
	    "UNIMPLEMENTED",
	    "INTERNAL",
	    "UNAVAILABLE",
	    "DATA_LOSS",
	    "UNAUTHENTICATED",
	};

	if (code < 0 || (size_t)code >= ZL_ARRAY_SIZE(names))
		return "UNKNOWN_CODE";
	return names[code];
}

const char *zl_grpc_call_method(const struct zl_grpc_call *call)
{
	return call->method;
}

int64_t zl_grpc_call_deadline_left_ms(const struct zl_grpc_call *call)
{
	if (!call->deadline_ns)
		return INT64_MAX;
	return ((int64_t)call->deadline_ns - (int64_t)zl_now_ns()) / 1000000;
}

uint64_t zl_grpc_call_deadline_ns(const struct zl_grpc_call *call)
{
	return call->deadline_ns;
}

void *zl_grpc_call_alloc(struct zl_grpc_call *call, size_t size)
{
	struct grpc_arena_chunk *ch;

	if (size > SIZE_MAX - sizeof(*ch))
		return NULL;
	ch = calloc(1, sizeof(*ch) + size);
	if (!ch)
		return NULL;
	ch->next = call->arena;
	call->arena = ch;
	return ch->data;
}

char *zl_grpc_call_strdup(struct zl_grpc_call *call, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = zl_grpc_call_alloc(call, n);

	if (d)
		memcpy(d, s, n);
	return d;
}

void *zl_grpc_call_new_msg(struct zl_grpc_call *call, const ProtobufCMessageDescriptor *desc)
{
	void *m = zl_grpc_call_alloc(call, desc->sizeof_message);

	if (m)
		protobuf_c_message_init(desc, m);
	return m;
}

void grpc_call_arena_free(struct zl_grpc_call *c)
{
	while (c->arena) {
		struct grpc_arena_chunk *ch = c->arena;

		c->arena = ch->next;
		free(ch);
	}
}

static int grpc_code_valid_error(int code)
{
	return code > ZL_GRPC_OK && code <= ZL_GRPC_UNAUTHENTICATED;
}

int zl_grpc_fail(struct zl_grpc_call *call, int code, const char *fmt, ...)
{
	va_list ap;

	if (!grpc_code_valid_error(code))
		code = ZL_GRPC_INTERNAL;
	va_start(ap, fmt);
	vsnprintf(call->msg, sizeof(call->msg), fmt, ap);
	va_end(ap);
	call->code = code;
	return code;
}

int zl_grpc_fail_err(struct zl_grpc_call *call, int err, const char *fmt, ...)
{
	char what[ZL_GRPC_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return zl_grpc_fail(call, zl_grpc_code_from_err(err), "%s: %s", what, zl_strerror(err));
}
