/* Internals of lib/etcd shared by etcd.c (requests, failover, auth),
 * etcd_json.c (base64 and JSON encoding/decoding) and etcd_watch.c (the
 * watch thread). Also the entry points of the JSON fuzz target. */
#ifndef ZL_ETCD_INTERNAL_H
#define ZL_ETCD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "etcd.h"

/* Largest answer (or watch line) accepted; a bigger one is an error rather
 * than an unbounded allocation. */
#define ETCD_MAX_RESPONSE (64u << 20)
#define ETCD_DEFAULT_TIMEOUT_MS 5000

/* Growable byte buffer, always NUL-terminated when data != NULL. */
struct etcd_buf {
	char *data;
	size_t len;
	size_t cap;
};

struct zl_etcd {
	/* Immutable after zl_etcd_create(); read without the lock (also by
	 * watch threads). */
	char **endpoints;          /* normalized "http(s)://host:port", no slash */
	size_t n_endpoints;
	int timeout_ms;
	char *cacert, *cert, *key; /* TLS files, NULL = unset */
	char *user, *password;     /* NULL user = no auth */

	/* lock serializes every call: it protects curl, resp, errbuf and token.
	 * cur is written under lock and read atomically without it. */
	pthread_mutex_t lock;
	CURL *curl;
	struct etcd_buf resp;
	char errbuf[CURL_ERROR_SIZE];
	char *token;
	bool logged_in;            /* authenticated (or auth found disabled) */
	size_t cur;                /* endpoint that answered last */
};

/* ---- errors (etcd.c) ---- */

/* Sets this thread's zl_etcd_last_error() text. */
void etcd_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- HTTP plumbing shared with the watch thread (etcd.c) ---- */

/* Outcome of one transfer, before looking at the HTTP answer. */
enum etcd_xfer {
	ETCD_XFER_OK,       /* an HTTP answer arrived */
	ETCD_XFER_UNSENT,   /* no connection: safe to try another endpoint */
	ETCD_XFER_LOST,     /* request sent (maybe), answer lost */
	ETCD_XFER_TIMEOUT,  /* the call's time ran out after connecting */
	ETCD_XFER_FATAL,    /* local failure (memory, answer too large) */
};

/* Appends to the struct etcd_buf passed as userdata (curl write callback). */
size_t etcd_buf_write(char *ptr, size_t size, size_t nmemb, void *userdata);
void etcd_buf_free(struct etcd_buf *b);
/* Headers for a JSON POST, with the auth token when not NULL. */
struct curl_slist *etcd_headers(const char *token);
/* Resets c and sets every option of a POST of body to endpoint ep + path:
 * TLS files, keep-alive, connect timeout, total timeout (0 = none), errbuf.
 * The caller sets the write callback. Returns 0 or -ENOMEM. */
int etcd_easy_prepare(const struct zl_etcd *e, CURL *c, size_t ep, const char *path,
		      const char *body, struct curl_slist *hdrs, long connect_ms,
		      long timeout_ms, char *errbuf);
/* Classifies a finished transfer; on failure sets the last error text to
 * "etcd at <endpoint>: <curl detail>". */
enum etcd_xfer etcd_xfer_classify(const struct zl_etcd *e, CURL *c, size_t ep, CURLcode res,
				  const char *errbuf);
/* Interprets the answer of an auth/authenticate request: 0 with *token
 * (malloc'd, NULL when the cluster has auth disabled) or -ZL_ERR_AUTH /
 * -ZL_ERR_ETCD / -ENOMEM with the last error set. */
int etcd_auth_answer(const struct zl_etcd *e, size_t ep, long http, const struct etcd_buf *b,
		     char **token);
/* Body of an auth/authenticate request (malloc'd) or NULL. */
char *etcd_auth_body(const struct zl_etcd *e);

/* ---- base64 and JSON (etcd_json.c) ---- */

/* Standard base64 with padding; returns a malloc'd NUL-terminated string or
 * NULL (-ENOMEM / too large). */
char *etcd_b64_encode(const void *data, size_t len);
/* Strict decoding into a malloc'd buffer with a NUL after *len bytes.
 * Returns 0, -ZL_ERR_PROTO (not base64), -ENOMEM. */
int etcd_b64_decode(const char *s, size_t slen, char **out, size_t *len);
/* Sets obj[field] to base64(data, len). 0 or -ENOMEM. */
int etcd_json_set_b64(json_t *obj, const char *field, const void *data, size_t len);
/* Sets obj[field] to the decimal string of v (etcd's int64 JSON form). */
int etcd_json_set_i64(json_t *obj, const char *field, int64_t v);
/* Reads an int64 that etcd sends as a string (a JSON integer is accepted
 * too); a missing field or null gives 0. 0 or -ZL_ERR_PROTO. */
int etcd_json_get_i64(const json_t *obj, const char *field, int64_t *out);

/* Parses an HTTP answer into a JSON object. 0 or -ZL_ERR_PROTO / -ENOMEM. */
int etcd_json_parse_object(const char *buf, size_t len, json_t **out);
/* Reads the gRPC-gateway error fields {"error"/"message", "code"}: returns
 * true when obj is an error, with *code and *msg (borrowed from obj). */
bool etcd_json_error(const json_t *obj, int *code, const char **msg);
/* Decodes one mvccpb.KeyValue. 0, -ZL_ERR_PROTO, -ENOMEM; out is zeroed
 * first and left empty on failure. */
int etcd_json_parse_kv(const json_t *kv, struct zl_etcd_kv *out);
/* Decodes a RangeResponse (kvs, more, count, header.revision). */
int etcd_json_parse_range(const json_t *resp, struct zl_etcd_range *out);
/* Decodes a TxnResponse: succeeded, header.revision and, when res is not
 * NULL, one range per GET op of the branch that ran (ops/n_ops = that
 * branch). res is zeroed first and left empty on failure. */
int etcd_json_parse_txn(const json_t *resp, const struct zl_etcd_op *success, size_t n_success,
			const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
			struct zl_etcd_txn_result *res);
/* Decodes a LeaseKeepAliveResponse ({"result": {...}}): *ttl = remaining TTL
 * (0 = expired / unknown lease). 0 or -ZL_ERR_PROTO / -ZL_ERR_ETCD. */
int etcd_json_parse_keepalive(const json_t *resp, int64_t *ttl);

/* One line of the /v3/watch stream, decoded. */
struct etcd_watch_msg {
	bool created;
	bool canceled;
	bool error;                /* a stream error object */
	int64_t header_rev;
	int64_t compact_rev;       /* >0: start revision was compacted */
	int64_t last_event_rev;    /* mod_revision of the last event, 0 = none */
	size_t n_events;           /* events passed to cb */
	size_t n_bad;              /* events skipped because they did not decode */
	char reason[256];          /* cancel reason or error message */
};

/* Decodes one watch line and calls cb for each event, in order (the kv is
 * only valid during the call). Returns 0, -ZL_ERR_PROTO (not a watch
 * message), -ENOMEM. */
int etcd_json_parse_watch(const char *line, size_t len, zl_etcd_watch_cb cb, void *arg,
			  struct etcd_watch_msg *msg);

#endif
