/* Project error table: one X-macro gives codes, names and messages.
 * Functions return 0, a negative errno, or a negative ZL_ERR_* code.
 * Project codes start at 4096 so they never collide with errno values. */
#ifndef ZL_ERR_H
#define ZL_ERR_H

#define ZL_ERR_TABLE(X)                                                         \
	X(ZL_ERR_INVAL,      4096, "invalid argument")                          \
	X(ZL_ERR_NOT_FOUND,  4097, "not found")                                  \
	X(ZL_ERR_EXISTS,     4098, "already exists with different parameters")   \
	X(ZL_ERR_STALE,      4099, "stale slice version or attach epoch")        \
	X(ZL_ERR_CORRUPT,    4100, "data corruption detected (CRC mismatch)")    \
	X(ZL_ERR_PROTO,      4101, "protocol violation")                         \
	X(ZL_ERR_NOSPC,      4102, "no space left on storage")                   \
	X(ZL_ERR_IO,         4103, "I/O error on storage")                       \
	X(ZL_ERR_CONN,       4104, "connection lost")                            \
	X(ZL_ERR_TIMEOUT,    4105, "timed out")                                  \
	X(ZL_ERR_NOT_INSYNC, 4106, "replica is not in sync for this slice")      \
	X(ZL_ERR_NOT_PRIMARY,4107, "node is not the primary of this slice")      \
	X(ZL_ERR_UNAVAIL,    4108, "no in-sync replica reachable")               \
	X(ZL_ERR_ETCD,       4109, "etcd request failed")                        \
	X(ZL_ERR_CONFLICT,   4110, "concurrent update, retry")                   \
	X(ZL_ERR_NODES,      4111, "not enough storage nodes")                   \
	X(ZL_ERR_BUSY,       4112, "resource busy")                              \
	X(ZL_ERR_RANGE,      4113, "offset or length out of range")              \
	X(ZL_ERR_AUTH,       4114, "authentication failed")                      \
	X(ZL_ERR_VERSION,    4115, "unsupported protocol version")              \
	X(ZL_ERR_PEERING,    4116, "slice primary is peering, retry shortly")    \
	X(ZL_ERR_MIN_SIZE,   4117, "fewer in-sync copies than the volume's min_size") \
	X(ZL_ERR_IDENTITY,   4118, "data directory belongs to another cluster or node") \
	X(ZL_ERR_TLS,        4119, "TLS handshake failed")                       \
	X(ZL_ERR_TLS_CA,     4120, "node requires TLS but no CA is configured (--tls-ca FILE or ZIPLINE_TLS_CA)") \
	X(ZL_ERR_NOT_ATTACHED, 4121, "volume is not attached to this node at this epoch (ControllerPublish it here first)") \
	X(ZL_ERR_SNAPSEQ,    4122, "write carries an older snapshot sequence than the chunk holds (reload the volume record and resend)") \
	X(ZL_ERR_ABSENT,     4123, "chunk never written in this clone (read it from the clone's parent)")

enum zl_err {
#define ZL_ERR_ENUM(name, val, msg) name = (val),
	ZL_ERR_TABLE(ZL_ERR_ENUM)
#undef ZL_ERR_ENUM
};

/* Returns a static message for a negative (or positive) errno or ZL_ERR_*. */
const char *zl_strerror(int err);
/* Returns the symbolic name ("ZL_ERR_STALE", "ENOENT") of an error code. */
const char *zl_errname(int err);
/* The negative code whose zl_errname() is name (ZL_ERR_* or an errno
 * name), or 0 when no code has that name. */
int zl_err_from_name(const char *name);

#endif
