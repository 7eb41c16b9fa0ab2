/* etcd v3 client over the JSON gateway (POST /v3/kv/range, /v3/kv/put,
 * /v3/kv/deleterange, /v3/kv/txn, /v3/lease/grant|keepalive|revoke,
 * /v3/watch) with libcurl: keep-alive, several endpoints with failover,
 * per-call timeouts, TLS client certificates and user/password auth.
 *
 * Keys and values are byte strings (values may hold NULs; they are
 * base64-encoded on the wire). Thread-safe: calls from several threads are
 * serialized on one internal lock (the metadata path is not the I/O path). */
#ifndef ZL_ETCD_H
#define ZL_ETCD_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

struct zl_etcd;

struct zl_etcd_opts {
	/* Comma-separated "http://127.0.0.1:2379,https://host:2379"; a bare
	 * "host:port" means http. Required. */
	const char *endpoints;
	int timeout_ms;          /* per call, default 5000 */
	const char *cacert;      /* TLS: CA bundle path (optional) */
	const char *cert;        /* TLS: client certificate path (optional) */
	const char *key;         /* TLS: client key path (optional) */
	const char *user;        /* auth (optional): /v3/auth/authenticate token */
	const char *password;
};

struct zl_etcd_kv {
	char *key;            /* NUL-terminated */
	char *value;          /* NUL-terminated for convenience; value_len bytes */
	size_t value_len;
	int64_t create_rev;
	int64_t mod_rev;
	int64_t version;
	int64_t lease;
};

struct zl_etcd_range {
	struct zl_etcd_kv *kvs;
	size_t n;
	bool more;            /* more keys beyond the limit */
	int64_t count;        /* total keys in the range */
	int64_t revision;     /* header revision */
};

/* Returns 0, -ZL_ERR_INVAL (no endpoints / bad URL), -ENOMEM. Does not contact
 * etcd (see zl_etcd_ping). */
int zl_etcd_create(const struct zl_etcd_opts *opts, struct zl_etcd **out);
void zl_etcd_destroy(struct zl_etcd *e);
/* Which endpoint answered last (for messages). */
const char *zl_etcd_endpoint(const struct zl_etcd *e);
/* Last error detail ("connect to http://127.0.0.1:2379: Connection refused"),
 * per thread. */
const char *zl_etcd_last_error(void);

struct zl_metrics_text;
/* Appends this process's etcd call figures (every handle's):
 * zipline_etcd_request_duration_seconds{call} and
 * zipline_etcd_errors_total{call,kind}. Any thread. */
void zl_etcd_metrics(struct zl_metrics_text *t);

/* Checks that some endpoint answers (a cheap range on the key ""). 0 or
 * -ZL_ERR_ETCD / -ZL_ERR_TIMEOUT. */
int zl_etcd_ping(struct zl_etcd *e);

/* All calls: 0 on success; -ZL_ERR_NOT_FOUND (get of an absent key),
 * -ZL_ERR_ETCD (no endpoint answered, or etcd returned an error),
 * -ZL_ERR_TIMEOUT, -ZL_ERR_AUTH, -ENOMEM. *rev_out (optional) gets the
 * header revision. */
int zl_etcd_put(struct zl_etcd *e, const char *key, const void *value, size_t len,
		int64_t lease, int64_t *rev_out);
int zl_etcd_get(struct zl_etcd *e, const char *key, struct zl_etcd_kv *out);
/* Keys in [key, range_end); range_end NULL = just key. limit 0 = no limit. */
int zl_etcd_range(struct zl_etcd *e, const char *key, const char *range_end, int64_t limit,
		  struct zl_etcd_range *out);
/* Keys starting with prefix and > start_after (NULL = from the start): for
 * paging, pass the last key of the previous page. */
int zl_etcd_range_prefix(struct zl_etcd *e, const char *prefix, const char *start_after,
			 int64_t limit, struct zl_etcd_range *out);
/* Deletes key (range_end NULL) or [key, range_end). *deleted gets the count. */
int zl_etcd_delete(struct zl_etcd *e, const char *key, const char *range_end, int64_t *deleted);
int zl_etcd_delete_prefix(struct zl_etcd *e, const char *prefix, int64_t *deleted);

/* Computes the range_end for a prefix ("abc" -> "abd"). out must hold
 * strlen(prefix)+1 bytes. */
void zl_etcd_prefix_end(const char *prefix, char *out);

void zl_etcd_kv_fini(struct zl_etcd_kv *kv);
void zl_etcd_range_fini(struct zl_etcd_range *r);

/* ---- transactions ---- */

enum zl_etcd_cmp_target { ZL_ETCD_CMP_VALUE, ZL_ETCD_CMP_MOD, ZL_ETCD_CMP_CREATE,
			  ZL_ETCD_CMP_VERSION };
enum zl_etcd_cmp_result { ZL_ETCD_EQUAL, ZL_ETCD_NOT_EQUAL, ZL_ETCD_LESS, ZL_ETCD_GREATER };

struct zl_etcd_cmp {
	const char *key;
	enum zl_etcd_cmp_target target;
	enum zl_etcd_cmp_result result;
	int64_t rev;          /* for MOD, CREATE, VERSION */
	const void *value;    /* for VALUE */
	size_t value_len;
	/* Optional: compare every key in [key, range_end) instead of key alone.
	 * A range with no key compares as one absent key (create_revision,
	 * mod_revision and version 0), so CREATE EQUAL 0 over a prefix's range
	 * means "no key under the prefix" (etcd's applyCompare). */
	const char *range_end;
};

enum zl_etcd_op_kind { ZL_ETCD_OP_PUT, ZL_ETCD_OP_DELETE, ZL_ETCD_OP_GET };

struct zl_etcd_op {
	enum zl_etcd_op_kind kind;
	const char *key;
	const char *range_end; /* DELETE/GET range, optional */
	const void *value;     /* PUT */
	size_t value_len;
	int64_t lease;         /* PUT, 0 = none */
};

struct zl_etcd_txn_result {
	bool succeeded;
	int64_t revision;
	/* One range per GET op of the branch that ran, in order (others empty). */
	struct zl_etcd_range *gets;
	size_t n_gets;
};

/* Runs If(cmps) Then(success) Else(failure). Returns 0 whether or not the
 * comparison held (see res->succeeded), or an error as above. res may be
 * NULL when the caller only needs *succeeded; succeeded may be NULL. */
int zl_etcd_txn(struct zl_etcd *e, const struct zl_etcd_cmp *cmps, size_t n_cmps,
		const struct zl_etcd_op *success, size_t n_success,
		const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
		struct zl_etcd_txn_result *res);
void zl_etcd_txn_result_fini(struct zl_etcd_txn_result *res);

/* ---- leases ---- */

int zl_etcd_lease_grant(struct zl_etcd *e, int64_t ttl_sec, int64_t *lease_id);
/* One keep-alive round trip; *ttl_left gets the remaining TTL (0 or
 * -ZL_ERR_NOT_FOUND when the lease expired). */
int zl_etcd_lease_keepalive(struct zl_etcd *e, int64_t lease_id, int64_t *ttl_left);
int zl_etcd_lease_revoke(struct zl_etcd *e, int64_t lease_id);

/* ---- watch ---- */

/* RESYNC_BEGIN, then a PUT of every key under the prefix, then RESYNC_END:
 * the watch's start revision was compacted (it was away, or started from a
 * revision older than etcd keeps), so events were lost; the prefix was
 * listed again at one revision (the kv of BEGIN and END: key the prefix,
 * no value, mod_rev that revision) and the watch goes on after it. A key
 * the consumer knows that no PUT between BEGIN and END named was deleted
 * meanwhile. */
enum zl_etcd_event_type {
	ZL_ETCD_EV_PUT,
	ZL_ETCD_EV_DELETE,
	ZL_ETCD_EV_RESYNC_BEGIN,
	ZL_ETCD_EV_RESYNC_END,
};

/* Called on the watch's own thread for every event. */
typedef void (*zl_etcd_watch_cb)(void *arg, enum zl_etcd_event_type type,
				 const struct zl_etcd_kv *kv);

struct zl_etcd_watch;

/* Watches every key under prefix from start_rev (0 = now) on a background
 * thread with its own connection; reconnects (from the last seen revision)
 * on errors. When etcd has compacted that revision, the prefix is listed
 * again and delivered as a resync (above). Returns 0 or an error. */
int zl_etcd_watch_prefix(struct zl_etcd *e, const char *prefix, int64_t start_rev,
			 zl_etcd_watch_cb cb, void *arg, struct zl_etcd_watch **out);
/* Stops the thread and frees. Accepts NULL. */
void zl_etcd_watch_cancel(struct zl_etcd_watch *w);

#endif
