/* etcd v3 client over the JSON gateway: one keep-alive curl handle behind a
 * lock, endpoint failover, per-call deadline, token auth with one
 * re-authentication when the token is rejected. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/metrics/metrics.h"
#include "etcd_internal.h"

#define ETCD_COMP "etcd"

/* Answers of gRPC status codes that matter here (google.golang.org/grpc/codes). */
enum etcd_grpc_code {
	ETCD_GRPC_INVALID_ARGUMENT = 3,
	ETCD_GRPC_DEADLINE_EXCEEDED = 4,
	ETCD_GRPC_NOT_FOUND = 5,
	ETCD_GRPC_PERMISSION_DENIED = 7,
	ETCD_GRPC_FAILED_PRECONDITION = 9,
	ETCD_GRPC_UNAVAILABLE = 14,
	ETCD_GRPC_UNAUTHENTICATED = 16,
};

/* Call flags. */
#define ETCD_RETRY_LOST 0x1u  /* idempotent: may be resent after a lost answer */
#define ETCD_NO_TOKEN 0x2u    /* the authenticate call itself */

static __thread char etcd_last_err[512];
static pthread_once_t etcd_curl_once = PTHREAD_ONCE_INIT;
static CURLcode etcd_curl_init_rc;

void etcd_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(etcd_last_err, sizeof(etcd_last_err), fmt, ap);
	va_end(ap);
}

const char *zl_etcd_last_error(void)
{
	return etcd_last_err;
}

const char *zl_etcd_endpoint(const struct zl_etcd *e)
{
	return e->endpoints[__atomic_load_n(&e->cur, __ATOMIC_RELAXED)];
}

static void etcd_curl_global_init(void)
{
	etcd_curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* ---- buffers and curl plumbing ---- */

size_t etcd_buf_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct etcd_buf *b = userdata;
	size_t n = size * nmemb;

	if (n > ETCD_MAX_RESPONSE - b->len)
		return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->data, cap);
		if (!p)
			return 0;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

void etcd_buf_free(struct etcd_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

struct curl_slist *etcd_headers(const char *token)
{
	struct curl_slist *h = NULL, *t;
	char *auth = NULL;

	t = curl_slist_append(h, "Content-Type: application/json");
	if (!t)
		goto out_free;
	h = t;
	/* No "Expect: 100-continue" round trip for large bodies. */
	t = curl_slist_append(h, "Expect:");
	if (!t)
		goto out_free;
	h = t;
	if (token) {
		if (asprintf(&auth, "Authorization: %s", token) < 0) {
			auth = NULL;
			goto out_free;
		}
		t = curl_slist_append(h, auth);
		free(auth);
		if (!t)
			goto out_free;
		h = t;
	}
	return h;

out_free:
	curl_slist_free_all(h);
	return NULL;
}

int etcd_easy_prepare(const struct zl_etcd *e, CURL *c, size_t ep, const char *path,
		      const char *body, struct curl_slist *hdrs, long connect_ms,
		      long timeout_ms, char *errbuf)
{
	char *url;
	int rc = 0;

	if (asprintf(&url, "%s%s", e->endpoints[ep], path) < 0)
		return -ENOMEM;
	curl_easy_reset(c); /* keeps the connection cache */
	errbuf[0] = '\0';
	if (timeout_ms && connect_ms > timeout_ms)
		connect_ms = timeout_ms;
	if (curl_easy_setopt(c, CURLOPT_URL, url) ||
	    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") ||
	    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) ||
	    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) ||
	    curl_easy_setopt(c, CURLOPT_POST, 1L) ||
	    curl_easy_setopt(c, CURLOPT_COPYPOSTFIELDS, body) ||
	    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs) ||
	    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L) ||
	    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 10L) ||
	    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 5L) ||
	    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms) ||
	    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms)) {
		rc = -ENOMEM;
		goto out_free;
	}
	if ((e->cacert && curl_easy_setopt(c, CURLOPT_CAINFO, e->cacert)) ||
	    (e->cert && curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert)) ||
	    (e->key && curl_easy_setopt(c, CURLOPT_SSLKEY, e->key)))
		rc = -ENOMEM;

out_free:
	free(url); /* curl copies the URL */
	return rc;
}

enum etcd_xfer etcd_xfer_classify(const struct zl_etcd *e, CURL *c, size_t ep, CURLcode res,
				  const char *errbuf)
{
	const char *detail = errbuf && errbuf[0] ? errbuf : curl_easy_strerror(res);
	curl_off_t pretransfer = 0;

	if (res == CURLE_OK)
		return ETCD_XFER_OK;
	etcd_set_error("etcd at %s: %s", e->endpoints[ep], detail);
	switch (res) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
		return ETCD_XFER_UNSENT;
	case CURLE_OPERATION_TIMEDOUT:
		/* Before the request could be sent (connect timeout) another
		 * endpoint may still answer in time. */
		curl_easy_getinfo(c, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
		return pretransfer ? ETCD_XFER_TIMEOUT : ETCD_XFER_UNSENT;
	case CURLE_OUT_OF_MEMORY:
		return ETCD_XFER_FATAL;
	case CURLE_WRITE_ERROR:
		etcd_set_error("etcd at %s: answer larger than %u bytes or out of memory",
			       e->endpoints[ep], ETCD_MAX_RESPONSE);
		return ETCD_XFER_FATAL;
	default:
		return ETCD_XFER_LOST;
	}
}

char *etcd_auth_body(const struct zl_etcd *e)
{
	json_t *req = json_pack("{s:s, s:s}", "name", e->user, "password",
				e->password ? e->password : "");
	char *body;

	if (!req)
		return NULL;
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	return body;
}

static bool etcd_msg_has(const char *msg, const char *needle)
{
	return msg && strstr(msg, needle);
}

int etcd_auth_answer(const struct zl_etcd *e, size_t ep, long http, const struct etcd_buf *b,
		     char **token)
{
	const char *msg;
	json_t *root;
	int code, rc;

	*token = NULL;
	rc = etcd_json_parse_object(b->data, b->len, &root);
	if (rc) {
		etcd_set_error("etcd at %s: unreadable answer to /v3/auth/authenticate (HTTP %ld)",
			       e->endpoints[ep], http);
		return rc == -ENOMEM ? rc : -ZL_ERR_ETCD;
	}
	if (etcd_json_error(root, &code, &msg)) {
		if (code == ETCD_GRPC_FAILED_PRECONDITION &&
		    etcd_msg_has(msg, "authentication is not enabled")) {
			rc = 0; /* no token needed */
		} else if (code == ETCD_GRPC_UNAVAILABLE) {
			etcd_set_error("etcd at %s: authenticate as %s: %s", e->endpoints[ep],
				       e->user, msg);
			rc = -ZL_ERR_ETCD;
		} else {
			etcd_set_error("etcd at %s: authenticate as %s: %s; check the etcd user "
				       "and password", e->endpoints[ep], e->user, msg);
			rc = -ZL_ERR_AUTH;
		}
		goto out_put;
	}
	if (!json_is_string(json_object_get(root, "token"))) {
		etcd_set_error("etcd at %s: authenticate as %s: no token in the answer",
			       e->endpoints[ep], e->user);
		rc = -ZL_ERR_ETCD;
		goto out_put;
	}
	*token = strdup(json_string_value(json_object_get(root, "token")));
	rc = *token ? 0 : -ENOMEM;

out_put:
	json_decref(root);
	return rc;
}

/* ---- create / destroy ---- */

static char *etcd_strdup_opt(const char *s, bool *oom)
{
	char *d;

	if (!s || !*s)
		return NULL;
	d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

/* Splits and normalizes the endpoint list. 0, -ZL_ERR_INVAL, -ENOMEM. */
static int etcd_parse_endpoints(struct zl_etcd *e, const char *list)
{
	char *copy, *tok, *save = NULL;
	size_t cap = 1;
	int rc = 0;

	for (const char *p = list; *p; p++)
		cap += *p == ',';
	e->endpoints = calloc(cap, sizeof(*e->endpoints));
	copy = strdup(list);
	if (!e->endpoints || !copy) {
		rc = -ENOMEM;
		goto out_free;
	}
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const char *host;
		size_t len;
		char *ep;

		const char *sep;
		size_t min_len = 0;

		while (*tok == ' ' || *tok == '\t')
			tok++;
		len = strlen(tok);
		while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
			tok[--len] = '\0';
		if (!len)
			continue;
		sep = strstr(tok, "://");
		if (sep)
			min_len = (size_t)(sep - tok) + 3;
		while (len > min_len && tok[len - 1] == '/')
			tok[--len] = '\0';
		if (sep) {
			if (strncmp(tok, "http://", 7) && strncmp(tok, "https://", 8)) {
				etcd_set_error("etcd endpoint \"%s\": only http:// and https:// "
					       "are supported", tok);
				rc = -ZL_ERR_INVAL;
				goto out_free;
			}
			ep = strdup(tok);
		} else if (asprintf(&ep, "http://%s", tok) < 0) {
			ep = NULL;
		}
		if (!ep) {
			rc = -ENOMEM;
			goto out_free;
		}
		e->endpoints[e->n_endpoints++] = ep;
		host = strstr(ep, "://") + 3;
		if (!*host || *host == '/' || *host == ':' || strpbrk(host, " \t/?#@")) {
			etcd_set_error("etcd endpoint \"%s\" is not host:port or a URL like "
				       "http://host:2379", tok);
			rc = -ZL_ERR_INVAL;
			goto out_free;
		}
	}
	if (!e->n_endpoints) {
		etcd_set_error("no etcd endpoint given (expected \"http://host:2379[,...]\")");
		rc = -ZL_ERR_INVAL;
	}

out_free:
	free(copy);
	return rc;
}

int zl_etcd_create(const struct zl_etcd_opts *opts, struct zl_etcd **out)
{
	struct zl_etcd *e;
	bool oom = false;
	int rc;

	*out = NULL;
	if (!opts || !opts->endpoints) {
		etcd_set_error("no etcd endpoint given (expected \"http://host:2379[,...]\")");
		return -ZL_ERR_INVAL;
	}
	pthread_once(&etcd_curl_once, etcd_curl_global_init);
	if (etcd_curl_init_rc) {
		etcd_set_error("curl_global_init failed: %s", curl_easy_strerror(etcd_curl_init_rc));
		return -ENOMEM;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	rc = pthread_mutex_init(&e->lock, NULL);
	if (rc) {
		free(e);
		return -rc;
	}
	rc = etcd_parse_endpoints(e, opts->endpoints);
	if (rc)
		goto out_destroy;
	e->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : ETCD_DEFAULT_TIMEOUT_MS;
	e->cacert = etcd_strdup_opt(opts->cacert, &oom);
	e->cert = etcd_strdup_opt(opts->cert, &oom);
	e->key = etcd_strdup_opt(opts->key, &oom);
	e->user = etcd_strdup_opt(opts->user, &oom);
	e->password = etcd_strdup_opt(opts->password, &oom);
	e->curl = curl_easy_init();
	if (oom || !e->curl) {
		rc = -ENOMEM;
		goto out_destroy;
	}
	*out = e;
	return 0;

out_destroy:
	zl_etcd_destroy(e);
	return rc;
}

void zl_etcd_destroy(struct zl_etcd *e)
{
	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (size_t i = 0; i < e->n_endpoints; i++)
		free(e->endpoints[i]);
	free(e->endpoints);
	free(e->cacert);
	free(e->cert);
	free(e->key);
	free(e->user);
	if (e->password) {
		explicit_bzero(e->password, strlen(e->password));
		free(e->password);
	}
	free(e->token);
	etcd_buf_free(&e->resp);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

/* ---- one call: failover loop, answer mapping, auth ---- */

static long etcd_remaining_ms(uint64_t deadline)
{
	uint64_t now = zl_now_ms();

	return now >= deadline ? 0 : (long)(deadline - now);
}

/* Maps an etcd error answer; *token_bad tells that a fresh token may help,
 * *retry that another endpoint may answer (this member is unavailable). */
static int etcd_map_error(const struct zl_etcd *e, size_t ep, const char *path, long http,
			  int code, const char *msg, bool *token_bad, bool *retry)
{
	const char *hint = "";
	int rc = -ZL_ERR_ETCD;

	*token_bad = false;
	*retry = false;
	switch (code) {
	case ETCD_GRPC_UNAUTHENTICATED:
		*token_bad = true;
		rc = -ZL_ERR_AUTH;
		hint = e->user ? "; check the etcd user and password" :
				 "; etcd requires a user and password";
		break;
	case ETCD_GRPC_PERMISSION_DENIED:
		rc = -ZL_ERR_AUTH;
		hint = "; grant the etcd user read/write on the Zipline prefix";
		break;
	case ETCD_GRPC_NOT_FOUND:
		rc = -ZL_ERR_NOT_FOUND;
		break;
	case ETCD_GRPC_DEADLINE_EXCEEDED:
		rc = -ZL_ERR_TIMEOUT;
		break;
	case ETCD_GRPC_UNAVAILABLE:
		*retry = true;
		break;
	case ETCD_GRPC_INVALID_ARGUMENT:
		/* Without a token, an auth-enabled etcd reports an empty user. */
		if (etcd_msg_has(msg, "user name is empty")) {
			*token_bad = true;
			rc = -ZL_ERR_AUTH;
			hint = e->user ? "" : "; etcd requires a user and password";
		}
		break;
	default:
		break;
	}
	etcd_set_error("etcd at %s: %s: %s (HTTP %ld, code %d)%s", e->endpoints[ep], path, msg,
		       http, code, hint);
	return rc;
}

/* Appends "; msg" (or msg) to buf, truncating. */
static void etcd_append(char *buf, size_t size, const char *msg)
{
	size_t used = strlen(buf), n;

	if (used && used + 2 < size) {
		memcpy(buf + used, "; ", 2);
		used += 2;
	}
	n = ZL_MIN(strlen(msg), size - 1 - used);
	memcpy(buf + used, msg, n);
	buf[used + n] = '\0';
}

/* Sends body to path on the endpoints in turn, starting with the one that
 * answered last, until one answers or the deadline passes. Called with
 * e->lock held. */
static int etcd_roundtrip(struct zl_etcd *e, const char *path, const char *body, unsigned flags,
			  uint64_t deadline, json_t **out, bool *token_bad)
{
	size_t start = e->cur, n_down = 0;
	char down[sizeof(etcd_last_err)] = "";
	int rc = -ZL_ERR_ETCD;

	*out = NULL;
	*token_bad = false;
	for (size_t i = 0; i < e->n_endpoints; i++) {
		size_t ep = (start + i) % e->n_endpoints;
		const char *token = flags & ETCD_NO_TOKEN ? NULL : e->token;
		long remaining = etcd_remaining_ms(deadline), connect_ms;
		struct curl_slist *hdrs;
		enum etcd_xfer x;
		const char *msg;
		bool retry;
		json_t *root;
		long http = 0;
		CURLcode res;
		int code;

		if (!remaining) {
			if (i == 0)
				etcd_set_error("etcd at %s: %s: timed out before sending",
					       e->endpoints[ep], path);
			else
				etcd_set_error("%s; no time left (timeout %d ms) to try %s", down,
					       e->timeout_ms, e->endpoints[ep]);
			rc = -ZL_ERR_TIMEOUT;
			break;
		}
		hdrs = etcd_headers(token);
		if (!hdrs)
			return -ENOMEM;
		/* Leave the endpoints after this one a share of the time in case
		 * this one does not even complete the TCP handshake. */
		connect_ms = ZL_MAX(remaining / (long)(e->n_endpoints - i),
				    ZL_MIN(remaining, 1000L));
		rc = etcd_easy_prepare(e, e->curl, ep, path, body, hdrs, connect_ms, remaining,
				       e->errbuf);
		if (!rc)
			rc = curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, etcd_buf_write) ||
			     curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &e->resp) ? -ENOMEM : 0;
		if (rc) {
			curl_slist_free_all(hdrs);
			return rc;
		}
		e->resp.len = 0;
		res = curl_easy_perform(e->curl);
		curl_slist_free_all(hdrs);
		x = etcd_xfer_classify(e, e->curl, ep, res, e->errbuf);
		if (x != ETCD_XFER_OK)
			ZL_LOG_DEBUG(ETCD_COMP, "request failed endpoint=%s path=%s err=\"%s\"",
				     e->endpoints[ep], path, zl_etcd_last_error());
		if (x == ETCD_XFER_UNSENT || x == ETCD_XFER_LOST) {
			rc = -ZL_ERR_ETCD;
			n_down++;
			etcd_append(down, sizeof(down), zl_etcd_last_error());
			if (x == ETCD_XFER_UNSENT || (flags & ETCD_RETRY_LOST))
				continue;
			break;
		}
		if (x == ETCD_XFER_TIMEOUT) {
			rc = -ZL_ERR_TIMEOUT;
			break;
		}
		if (x == ETCD_XFER_FATAL) {
			rc = res == CURLE_OUT_OF_MEMORY ? -ENOMEM : -ZL_ERR_ETCD;
			break;
		}

		/* An HTTP answer: this endpoint is the one to use next time. */
		if (e->cur != ep) {
			ZL_LOG_INFO(ETCD_COMP, "using endpoint=%s", e->endpoints[ep]);
			__atomic_store_n(&e->cur, ep, __ATOMIC_RELAXED);
		}
		curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &http);
		if (flags & ETCD_NO_TOKEN) {
			/* The authenticate caller reads e->resp itself. */
			*out = NULL;
			return (int)http;
		}
		rc = etcd_json_parse_object(e->resp.data, e->resp.len, &root);
		if (rc) {
			etcd_set_error("etcd at %s: %s: unreadable answer (HTTP %ld): %.120s; is "
				       "this an etcd client URL?", e->endpoints[ep], path, http,
				       e->resp.data ? e->resp.data : "");
			rc = rc == -ENOMEM ? rc : -ZL_ERR_ETCD;
			break;
		}
		if (http == 200 && !etcd_json_error(root, &code, &msg)) {
			*out = root;
			return 0;
		}
		if (!etcd_json_error(root, &code, &msg)) {
			code = 0;
			msg = "unexpected answer";
		}
		rc = etcd_map_error(e, ep, path, http, code, msg, token_bad, &retry);
		json_decref(root);
		if (retry && (flags & ETCD_RETRY_LOST))
			continue;
		break;
	}
	if (rc == -ZL_ERR_ETCD && n_down == e->n_endpoints)
		etcd_set_error("%s; check that etcd is running and the endpoint list is right",
			       down);
	return rc;
}

/* Gets a token for e->user (e->lock held). 0 (token set, or none needed),
 * -ZL_ERR_AUTH, -ZL_ERR_ETCD, -ZL_ERR_TIMEOUT, -ENOMEM. */
static int etcd_login(struct zl_etcd *e, uint64_t deadline)
{
	char *body = etcd_auth_body(e);
	char *token = NULL;
	bool token_bad;
	json_t *unused;
	int rc;

	if (!body)
		return -ENOMEM;
	free(e->token);
	e->token = NULL;
	e->logged_in = false;
	rc = etcd_roundtrip(e, "/v3/auth/authenticate", body, ETCD_NO_TOKEN | ETCD_RETRY_LOST,
			    deadline, &unused, &token_bad);
	explicit_bzero(body, strlen(body));
	free(body);
	if (rc < 0)
		return rc;
	rc = etcd_auth_answer(e, e->cur, rc, &e->resp, &token);
	if (rc)
		return rc;
	e->token = token;
	e->logged_in = true;
	ZL_LOG_DEBUG(ETCD_COMP, "authenticated user=%s endpoint=%s token=%s", e->user,
		     e->endpoints[e->cur], token ? "yes" : "not-needed");
	return 0;
}

/* Runs one request: serializes req, logs in when needed, fails over,
 * re-authenticates once on a rejected token. *out gets the answer. */
/* ---- call counters (zl_etcd_metrics): process-wide, relaxed atomics;
 * an etcd call is an HTTP round trip, so they cost nothing that shows. */

static const char *const etcd_stat_paths[] = {
    "/v3/kv/range",	"/v3/kv/put",	   "/v3/kv/txn",	"/v3/kv/deleterange",
    "/v3/lease/grant", "/v3/lease/keepalive", "/v3/lease/revoke",
};
#define ETCD_STAT_N ZL_ARRAY_SIZE(etcd_stat_paths)
static const char *const etcd_err_kinds[] = {"timeout", "unavailable", "auth", "other"};

struct etcd_stat {
	uint64_t errors[ZL_ARRAY_SIZE(etcd_err_kinds)];
	struct zl_metrics_hist lat; /* count: every call */
};
static struct etcd_stat etcd_stats[ETCD_STAT_N + 1]; /* the last: other paths */

static void etcd_stat_add(const char *path, int rc, uint64_t ns)
{
	struct etcd_stat *st = &etcd_stats[ETCD_STAT_N];

	for (size_t i = 0; i < ETCD_STAT_N; i++)
		if (!strcmp(path, etcd_stat_paths[i])) {
			st = &etcd_stats[i];
			break;
		}
	/* zl_metrics_hist_add with atomics: any thread calls. */
	__atomic_fetch_add(&st->lat.b[zl_metrics_hist_bucket(ns)], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&st->lat.count, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&st->lat.sum_ns, ns, __ATOMIC_RELAXED);
	if (rc)
		__atomic_fetch_add(&st->errors[rc == -ZL_ERR_TIMEOUT ? 0
					       : rc == -ZL_ERR_ETCD  ? 1
					       : rc == -ZL_ERR_AUTH  ? 2
								     : 3],
				   1, __ATOMIC_RELAXED);
}

void zl_etcd_metrics(struct zl_metrics_text *t)
{
	char lab[96];

	zl_metrics_family(t, "zipline_etcd_errors_total", "counter",
			  "etcd calls of this process that failed, by call and kind (timeout, "
			  "unavailable: no endpoint answered, auth, other).");
	for (size_t i = 0; i <= ETCD_STAT_N; i++)
		for (size_t k = 0; k < ZL_ARRAY_SIZE(etcd_err_kinds); k++) {
			uint64_t v = __atomic_load_n(&etcd_stats[i].errors[k], __ATOMIC_RELAXED);

			if (!v)
				continue;
			snprintf(lab, sizeof(lab), "call=\"%s\",kind=\"%s\"",
				 i < ETCD_STAT_N ? etcd_stat_paths[i] : "other", etcd_err_kinds[k]);
			zl_metrics_u64(t, "zipline_etcd_errors_total", lab, v);
		}
	zl_metrics_family(t, "zipline_etcd_request_duration_seconds", "histogram",
			  "etcd calls of this process (each with its failover and retries), by "
			  "call.");
	for (size_t i = 0; i <= ETCD_STAT_N; i++) {
		struct zl_metrics_hist h;

		for (size_t b = 0; b <= ZL_METRICS_HIST_N; b++)
			h.b[b] = __atomic_load_n(&etcd_stats[i].lat.b[b], __ATOMIC_RELAXED);
		h.count = __atomic_load_n(&etcd_stats[i].lat.count, __ATOMIC_RELAXED);
		h.sum_ns = __atomic_load_n(&etcd_stats[i].lat.sum_ns, __ATOMIC_RELAXED);
		if (!h.count)
			continue;
		snprintf(lab, sizeof(lab), "call=\"%s\"",
			 i < ETCD_STAT_N ? etcd_stat_paths[i] : "other");
		zl_metrics_hist_text(t, "zipline_etcd_request_duration_seconds", lab, &h);
	}
}

static int etcd_call(struct zl_etcd *e, const char *path, const json_t *req, unsigned flags,
		     json_t **out)
{
	uint64_t deadline = zl_now_ms() + (uint64_t)e->timeout_ms, start_ns = zl_now_ns();
	bool token_bad, relogged = false;
	char *body;
	int rc;

	*out = NULL;
	body = json_dumps(req, JSON_COMPACT);
	if (!body)
		return -ENOMEM;
	pthread_mutex_lock(&e->lock);
	if (e->user && !e->logged_in) {
		rc = etcd_login(e, deadline);
		if (rc)
			goto out_unlock;
		relogged = true;
	}
	for (;;) {
		rc = etcd_roundtrip(e, path, body, flags, deadline, out, &token_bad);
		if (rc != -ZL_ERR_AUTH || !token_bad || !e->user || relogged)
			break;
		/* The token expired or auth was switched on/off: once more. */
		relogged = true;
		rc = etcd_login(e, deadline);
		if (rc)
			break;
	}

out_unlock:
	pthread_mutex_unlock(&e->lock);
	free(body);
	etcd_stat_add(path, rc, zl_now_ns() - start_ns);
	return rc;
}

/* ---- KV ---- */

static bool etcd_key_ok(const char *key, const char *what)
{
	if (key && *key)
		return true;
	etcd_set_error("etcd %s: empty key", what);
	return false;
}

/* Sets key/range_end of a range-like request. range_end "" means "every key
 * from key on" (etcd's "\0"). */
static int etcd_set_range(json_t *req, const char *key, size_t key_len, const char *range_end)
{
	int rc = etcd_json_set_b64(req, "key", key, key_len);

	if (!rc && range_end)
		rc = etcd_json_set_b64(req, "range_end", range_end,
				       *range_end ? strlen(range_end) : 1);
	return rc;
}

int zl_etcd_put(struct zl_etcd *e, const char *key, const void *value, size_t len,
		int64_t lease, int64_t *rev_out)
{
	json_t *req, *resp = NULL;
	int64_t rev;
	int rc;

	if (!etcd_key_ok(key, "put"))
		return -ZL_ERR_INVAL;
	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_json_set_b64(req, "key", key, strlen(key));
	if (!rc)
		rc = etcd_json_set_b64(req, "value", value ? value : "", value ? len : 0);
	if (!rc && lease)
		rc = etcd_json_set_i64(req, "lease", lease);
	if (!rc)
		rc = etcd_call(e, "/v3/kv/put", req, ETCD_RETRY_LOST, &resp);
	if (rc)
		goto out_put;
	rc = etcd_json_get_i64(json_object_get(resp, "header"), "revision", &rev);
	if (rc) {
		etcd_set_error("etcd put %s: bad revision in the answer", key);
		rc = -ZL_ERR_ETCD;
		goto out_put;
	}
	if (rev_out)
		*rev_out = rev;

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

/* A range over raw key bytes (the key may end in a NUL for paging). */
static int etcd_range_raw(struct zl_etcd *e, const char *key, size_t key_len,
			  const char *range_end, int64_t limit, struct zl_etcd_range *out)
{
	json_t *req, *resp = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_set_range(req, key, key_len, range_end);
	if (!rc && limit > 0)
		rc = etcd_json_set_i64(req, "limit", limit);
	if (!rc)
		rc = etcd_call(e, "/v3/kv/range", req, ETCD_RETRY_LOST, &resp);
	if (rc)
		goto out_put;
	rc = etcd_json_parse_range(resp, out);
	if (rc == -ZL_ERR_PROTO) {
		etcd_set_error("etcd at %s: /v3/kv/range: malformed answer", zl_etcd_endpoint(e));
		rc = -ZL_ERR_ETCD;
	}

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

int zl_etcd_range(struct zl_etcd *e, const char *key, const char *range_end, int64_t limit,
		  struct zl_etcd_range *out)
{
	memset(out, 0, sizeof(*out));
	if (!etcd_key_ok(key, "range"))
		return -ZL_ERR_INVAL;
	return etcd_range_raw(e, key, strlen(key), range_end, limit, out);
}

int zl_etcd_get(struct zl_etcd *e, const char *key, struct zl_etcd_kv *out)
{
	struct zl_etcd_range r;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = zl_etcd_range(e, key, NULL, 1, &r);
	if (rc)
		return rc;
	if (!r.n) {
		etcd_set_error("etcd key %s not found", key);
		rc = -ZL_ERR_NOT_FOUND;
		goto out_fini;
	}
	*out = r.kvs[0];
	memset(&r.kvs[0], 0, sizeof(r.kvs[0]));

out_fini:
	zl_etcd_range_fini(&r);
	return rc;
}

void zl_etcd_prefix_end(const char *prefix, char *out)
{
	size_t n = strlen(prefix);

	memcpy(out, prefix, n + 1);
	while (n) {
		unsigned char c = (unsigned char)out[n - 1];

		if (c < 0xff) {
			out[n - 1] = (char)(c + 1);
			out[n] = '\0';
			return;
		}
		out[--n] = '\0';
	}
	/* "" or all 0xff: no upper bound, which etcd spells "\0" and this API "". */
}

int zl_etcd_range_prefix(struct zl_etcd *e, const char *prefix, const char *start_after,
			 int64_t limit, struct zl_etcd_range *out)
{
	const char *from;
	size_t from_len;
	char *end;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!prefix)
		return -ZL_ERR_INVAL;
	end = malloc(strlen(prefix) + 1);
	if (!end)
		return -ENOMEM;
	zl_etcd_prefix_end(prefix, end);
	if (start_after && strcmp(start_after, prefix) >= 0) {
		/* The smallest key above start_after is start_after + "\0". */
		from = start_after;
		from_len = strlen(start_after) + 1;
	} else if (*prefix) {
		from = prefix;
		from_len = strlen(prefix);
	} else {
		from = ""; /* "\0": the smallest key etcd accepts */
		from_len = 1;
	}
	rc = etcd_range_raw(e, from, from_len, end, limit, out);
	free(end);
	return rc;
}

int zl_etcd_delete(struct zl_etcd *e, const char *key, const char *range_end, int64_t *deleted)
{
	json_t *req, *resp = NULL;
	int64_t n;
	int rc;

	if (deleted)
		*deleted = 0;
	if (!etcd_key_ok(key, "delete"))
		return -ZL_ERR_INVAL;
	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_set_range(req, key, strlen(key), range_end);
	if (!rc)
		rc = etcd_call(e, "/v3/kv/deleterange", req, 0, &resp);
	if (rc)
		goto out_put;
	rc = etcd_json_get_i64(resp, "deleted", &n);
	if (rc) {
		etcd_set_error("etcd delete %s: bad count in the answer", key);
		rc = -ZL_ERR_ETCD;
		goto out_put;
	}
	if (deleted)
		*deleted = n;

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

int zl_etcd_delete_prefix(struct zl_etcd *e, const char *prefix, int64_t *deleted)
{
	char *end;
	int rc;

	if (!etcd_key_ok(prefix, "delete_prefix")) {
		/* Refuse to wipe the whole keyspace through an empty prefix. */
		if (deleted)
			*deleted = 0;
		return -ZL_ERR_INVAL;
	}
	end = malloc(strlen(prefix) + 1);
	if (!end)
		return -ENOMEM;
	zl_etcd_prefix_end(prefix, end);
	rc = zl_etcd_delete(e, prefix, end, deleted);
	free(end);
	return rc;
}

/* ---- transactions ---- */

static json_t *etcd_cmp_json(const struct zl_etcd_cmp *c)
{
	static const char *const targets[] = {
		[ZL_ETCD_CMP_VALUE] = "VALUE", [ZL_ETCD_CMP_MOD] = "MOD",
		[ZL_ETCD_CMP_CREATE] = "CREATE", [ZL_ETCD_CMP_VERSION] = "VERSION",
	};
	static const char *const fields[] = {
		[ZL_ETCD_CMP_MOD] = "mod_revision", [ZL_ETCD_CMP_CREATE] = "create_revision",
		[ZL_ETCD_CMP_VERSION] = "version",
	};
	static const char *const results[] = {
		[ZL_ETCD_EQUAL] = "EQUAL", [ZL_ETCD_NOT_EQUAL] = "NOT_EQUAL",
		[ZL_ETCD_LESS] = "LESS", [ZL_ETCD_GREATER] = "GREATER",
	};
	json_t *j;
	int rc;

	if ((unsigned)c->target >= ZL_ARRAY_SIZE(targets) ||
	    (unsigned)c->result >= ZL_ARRAY_SIZE(results) || !c->key || !*c->key)
		return NULL;
	j = json_pack("{s:s, s:s}", "target", targets[c->target], "result", results[c->result]);
	if (!j)
		return NULL;
	rc = etcd_json_set_b64(j, "key", c->key, strlen(c->key));
	if (!rc && c->target == ZL_ETCD_CMP_VALUE)
		rc = etcd_json_set_b64(j, "value", c->value ? c->value : "",
				       c->value ? c->value_len : 0);
	else if (!rc)
		rc = etcd_json_set_i64(j, fields[c->target], c->rev);
	if (!rc && c->range_end)
		rc = etcd_json_set_b64(j, "range_end", c->range_end, strlen(c->range_end));
	if (rc) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static json_t *etcd_op_json(const struct zl_etcd_op *op)
{
	json_t *inner = json_object();
	const char *kind;
	int rc;

	if (!inner || !op->key || !*op->key)
		goto out_put;
	rc = etcd_set_range(inner, op->key, strlen(op->key),
			    op->kind == ZL_ETCD_OP_PUT ? NULL : op->range_end);
	switch (op->kind) {
	case ZL_ETCD_OP_PUT:
		kind = "request_put";
		if (!rc)
			rc = etcd_json_set_b64(inner, "value", op->value ? op->value : "",
					       op->value ? op->value_len : 0);
		if (!rc && op->lease)
			rc = etcd_json_set_i64(inner, "lease", op->lease);
		break;
	case ZL_ETCD_OP_DELETE:
		kind = "request_delete_range";
		break;
	case ZL_ETCD_OP_GET:
		kind = "request_range";
		break;
	default:
		goto out_put;
	}
	if (rc)
		goto out_put;
	return json_pack("{s:o}", kind, inner);

out_put:
	json_decref(inner);
	return NULL;
}

static json_t *etcd_ops_json(const struct zl_etcd_op *ops, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < n; i++) {
		if (json_array_append_new(arr, etcd_op_json(&ops[i]))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

int zl_etcd_txn(struct zl_etcd *e, const struct zl_etcd_cmp *cmps, size_t n_cmps,
		const struct zl_etcd_op *success, size_t n_success,
		const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
		struct zl_etcd_txn_result *res)
{
	json_t *req, *cmp_arr, *resp = NULL;
	int rc = -ZL_ERR_INVAL;

	if (res)
		memset(res, 0, sizeof(*res));
	if (succeeded)
		*succeeded = false;
	req = json_object();
	cmp_arr = json_array();
	if (!req || !cmp_arr) {
		json_decref(cmp_arr);
		rc = -ENOMEM;
		goto out_put;
	}
	for (size_t i = 0; i < n_cmps; i++) {
		if (json_array_append_new(cmp_arr, etcd_cmp_json(&cmps[i]))) {
			json_decref(cmp_arr);
			etcd_set_error("etcd txn: compare %zu is invalid (empty key or bad "
				       "target/result) or out of memory", i);
			goto out_put;
		}
	}
	if (json_object_set_new(req, "compare", cmp_arr) ||
	    json_object_set_new(req, "success", etcd_ops_json(success, n_success)) ||
	    json_object_set_new(req, "failure", etcd_ops_json(failure, n_failure))) {
		etcd_set_error("etcd txn: an operation is invalid (empty key or bad kind) or out "
			       "of memory");
		goto out_put;
	}
	rc = etcd_call(e, "/v3/kv/txn", req, 0, &resp);
	if (rc)
		goto out_put;
	rc = etcd_json_parse_txn(resp, success, n_success, failure, n_failure, succeeded, res);
	if (rc == -ZL_ERR_PROTO) {
		etcd_set_error("etcd at %s: /v3/kv/txn: malformed answer", zl_etcd_endpoint(e));
		rc = -ZL_ERR_ETCD;
	}

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

/* ---- leases ---- */

int zl_etcd_lease_grant(struct zl_etcd *e, int64_t ttl_sec, int64_t *lease_id)
{
	json_t *req, *resp = NULL;
	const json_t *err;
	int64_t id;
	int rc;

	*lease_id = 0;
	if (ttl_sec <= 0) {
		etcd_set_error("etcd lease grant: TTL must be positive, got %lld",
			       (long long)ttl_sec);
		return -ZL_ERR_INVAL;
	}
	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_json_set_i64(req, "TTL", ttl_sec);
	if (!rc)
		rc = etcd_call(e, "/v3/lease/grant", req, 0, &resp);
	if (rc)
		goto out_put;
	/* LeaseGrantResponse carries its own "error" string. */
	err = json_object_get(resp, "error");
	if (json_is_string(err) && *json_string_value(err)) {
		etcd_set_error("etcd at %s: lease grant: %s", zl_etcd_endpoint(e),
			       json_string_value(err));
		rc = -ZL_ERR_ETCD;
		goto out_put;
	}
	rc = etcd_json_get_i64(resp, "ID", &id);
	if (rc || !id) {
		etcd_set_error("etcd at %s: lease grant: no lease ID in the answer",
			       zl_etcd_endpoint(e));
		rc = -ZL_ERR_ETCD;
		goto out_put;
	}
	*lease_id = id;

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

int zl_etcd_lease_keepalive(struct zl_etcd *e, int64_t lease_id, int64_t *ttl_left)
{
	json_t *req, *resp = NULL;
	int64_t ttl = 0;
	int rc;

	if (ttl_left)
		*ttl_left = 0;
	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_json_set_i64(req, "ID", lease_id);
	if (!rc)
		rc = etcd_call(e, "/v3/lease/keepalive", req, ETCD_RETRY_LOST, &resp);
	if (rc)
		goto out_put;
	rc = etcd_json_parse_keepalive(resp, &ttl);
	if (rc == -ZL_ERR_PROTO) {
		etcd_set_error("etcd at %s: /v3/lease/keepalive: malformed answer",
			       zl_etcd_endpoint(e));
		rc = -ZL_ERR_ETCD;
	}
	if (rc)
		goto out_put;
	if (ttl <= 0) {
		etcd_set_error("etcd lease %llx expired or unknown; grant a new lease",
			       (unsigned long long)lease_id);
		rc = -ZL_ERR_NOT_FOUND;
		goto out_put;
	}
	if (ttl_left)
		*ttl_left = ttl;

out_put:
	json_decref(resp);
	json_decref(req);
	return rc;
}

int zl_etcd_lease_revoke(struct zl_etcd *e, int64_t lease_id)
{
	json_t *req, *resp = NULL;
	int rc;

	req = json_object();
	if (!req)
		return -ENOMEM;
	rc = etcd_json_set_i64(req, "ID", lease_id);
	if (!rc)
		rc = etcd_call(e, "/v3/lease/revoke", req, ETCD_RETRY_LOST, &resp);
	json_decref(resp);
	json_decref(req);
	return rc;
}

int zl_etcd_ping(struct zl_etcd *e)
{
	json_t *req, *resp = NULL;
	int rc;

	/* etcd rejects the empty key, so count the one-NUL-byte key instead. */
	req = json_pack("{s:s, s:b}", "key", "AA==", "count_only", 1);
	if (!req)
		return -ENOMEM;
	rc = etcd_call(e, "/v3/kv/range", req, ETCD_RETRY_LOST, &resp);
	json_decref(resp);
	json_decref(req);
	return rc;
}
