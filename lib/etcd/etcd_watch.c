/* Prefix watches: one thread and one connection per watch. The /v3/watch
 * gateway answers a create_request with a never-ending HTTP body of
 * newline-separated JSON messages. The thread drives its transfer through a
 * curl multi handle so zl_etcd_watch_cancel() can wake it at once
 * (curl_multi_wakeup) instead of waiting for a progress callback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "etcd_internal.h"

#define WATCH_COMP "etcd-watch"
#define WATCH_BACKOFF_MIN_MS 100
#define WATCH_BACKOFF_MAX_MS 5000
/* A stream that is silent this long is reconnected (from the last revision,
 * so nothing is lost); TCP keep-alive catches dead peers sooner. */
#define WATCH_IDLE_SEC 120L

struct zl_etcd_watch {
	struct zl_etcd *e;          /* outlives the watch (caller's contract) */
	char *body_prefix_key;      /* base64 key and range_end of the prefix */
	char *body_prefix_end;
	zl_etcd_watch_cb cb;
	void *arg;

	/* Everything below belongs to the watch thread, except stop (set by
	 * cancel) and multi (curl_multi_wakeup is thread-safe). */
	pthread_t thread;
	bool thread_started;
	bool stop;                  /* __atomic */
	CURLM *multi;
	CURL *curl;
	char errbuf[CURL_ERROR_SIZE];
	struct etcd_buf line;       /* stream bytes not yet split into lines */
	struct etcd_buf auth;       /* answer of auth/authenticate */
	char *token;
	bool logged_in;
	size_t ep;
	int64_t next_rev;           /* resume point; 0 = "now" */
	char *prefix, *prefix_end;  /* the watched range, for a resync's listing */
	bool resync;		    /* next_rev was compacted: list, then watch */
	bool restart;               /* stream said canceled/error: reconnect */
	bool progress;              /* this session delivered something */
	struct zl_ratelimit bad_rl;
};

static bool watch_stopped(struct zl_etcd_watch *w)
{
	return __atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
}

/* Runs w->curl to completion or until cancel. Returns the transfer's
 * result, CURLE_ABORTED_BY_CALLBACK when canceled. */
static CURLcode watch_perform(struct zl_etcd_watch *w)
{
	CURLcode res = CURLE_ABORTED_BY_CALLBACK;
	int running = 1;

	if (curl_multi_add_handle(w->multi, w->curl))
		return CURLE_OUT_OF_MEMORY;
	while (!watch_stopped(w)) {
		struct CURLMsg *m;
		int left;

		if (curl_multi_perform(w->multi, &running)) {
			res = CURLE_RECV_ERROR;
			break;
		}
		m = curl_multi_info_read(w->multi, &left);
		if (m && m->msg == CURLMSG_DONE) {
			res = m->data.result;
			break;
		}
		if (curl_multi_poll(w->multi, NULL, 0, 1000, NULL)) {
			res = CURLE_RECV_ERROR;
			break;
		}
	}
	curl_multi_remove_handle(w->multi, w->curl);
	return res;
}

/* Sleeps up to ms, returning early on cancel. */
static void watch_sleep(struct zl_etcd_watch *w, long ms)
{
	uint64_t deadline = zl_now_ms() + (uint64_t)ms;

	while (!watch_stopped(w)) {
		uint64_t now = zl_now_ms();

		if (now >= deadline)
			break;
		curl_multi_poll(w->multi, NULL, 0, (int)(deadline - now), NULL);
	}
}

static void watch_line(struct zl_etcd_watch *w, const char *line, size_t len)
{
	struct etcd_watch_msg msg;
	int rc;

	rc = etcd_json_parse_watch(line, len, w->cb, w->arg, &msg);
	if (rc) {
		if (zl_ratelimit_ok(&w->bad_rl, 1))
			ZL_LOG_WARN(WATCH_COMP, "unreadable watch message endpoint=%s err=%s",
				    w->e->endpoints[w->ep], zl_strerror(rc));
		w->restart = true;
		return;
	}
	if (msg.n_bad && zl_ratelimit_ok(&w->bad_rl, 1))
		ZL_LOG_WARN(WATCH_COMP, "skipped undecodable watch events count=%zu", msg.n_bad);
	if (msg.last_event_rev)
		w->next_rev = msg.last_event_rev + 1;
	if (msg.created && !msg.canceled) {
		/* Watching from "now" means: after the revision the watch
		 * was created at; reconnects resume from there. */
		if (!w->next_rev)
			w->next_rev = msg.header_rev + 1;
		w->progress = true;
	}
	if (msg.n_events)
		w->progress = true;
	if (msg.error || msg.canceled) {
		if (msg.compact_rev > 0) {
			ZL_LOG_WARN(WATCH_COMP,
				    "watch start revision compacted, events lost: "
				    "prefix=%s from=%lld compacted=%lld; listing it again",
				    w->prefix, (long long)w->next_rev, (long long)msg.compact_rev);
			w->resync = true;
		} else {
			ZL_LOG_WARN(WATCH_COMP, "watch ended by etcd endpoint=%s reason=\"%s\"",
				    w->e->endpoints[w->ep], msg.reason);
		}
		/* A rejected token shows up only here on the stream. */
		if (strstr(msg.reason, "auth") || strstr(msg.reason, "Unauthenticated") ||
		    strstr(msg.reason, "user name is empty"))
			w->logged_in = false;
		w->restart = true;
	}
}

/* curl write callback: splits the stream into lines. */
static size_t watch_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct zl_etcd_watch *w = userdata;
	size_t n = size * nmemb, start = 0;
	char *nl;

	if (etcd_buf_write(ptr, size, nmemb, &w->line) != n)
		return 0;
	while ((nl = memchr(w->line.data + start, '\n', w->line.len - start))) {
		size_t len = (size_t)(nl - (w->line.data + start));

		if (len)
			watch_line(w, w->line.data + start, len);
		start += len + 1;
		if (w->restart || watch_stopped(w))
			return 0; /* ends the transfer */
	}
	memmove(w->line.data, w->line.data + start, w->line.len - start);
	w->line.len -= start;
	w->line.data[w->line.len] = '\0';
	return n;
}

/* Gets a token on the watch's own connection. 0 or an error. */
static int watch_login(struct zl_etcd_watch *w)
{
	struct curl_slist *hdrs = etcd_headers(NULL);
	char *body = etcd_auth_body(w->e);
	long http = 0;
	CURLcode res;
	int rc;

	free(w->token);
	w->token = NULL;
	if (!hdrs || !body) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = etcd_easy_prepare(w->e, w->curl, w->ep, "/v3/auth/authenticate", body, hdrs,
			       w->e->timeout_ms, w->e->timeout_ms, w->errbuf);
	if (rc)
		goto out_free;
	w->auth.len = 0;
	curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, etcd_buf_write);
	curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, &w->auth);
	res = watch_perform(w);
	if (watch_stopped(w)) {
		rc = -ECANCELED;
		goto out_free;
	}
	if (etcd_xfer_classify(w->e, w->curl, w->ep, res, w->errbuf) != ETCD_XFER_OK) {
		rc = -ZL_ERR_ETCD;
		goto out_free;
	}
	curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &http);
	rc = etcd_auth_answer(w->e, w->ep, http, &w->auth, &w->token);
	if (!rc)
		w->logged_in = true;

out_free:
	if (body) {
		explicit_bzero(body, strlen(body));
		free(body);
	}
	curl_slist_free_all(hdrs);
	return rc;
}

static char *watch_body(struct zl_etcd_watch *w)
{
	json_t *create, *req;
	char *body = NULL;

	create = json_pack("{s:s, s:s}", "key", w->body_prefix_key, "range_end",
			   w->body_prefix_end);
	if (!create)
		return NULL;
	if (w->next_rev > 0 && etcd_json_set_i64(create, "start_revision", w->next_rev)) {
		json_decref(create);
		return NULL;
	}
	req = json_pack("{s:o}", "create_request", create);
	if (req)
		body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	return body;
}

/* One connection: log in if needed, stream until it ends. Returns 0 when
 * the stream ended (or was canceled), an error when it could not start. */
static int watch_session(struct zl_etcd_watch *w)
{
	struct curl_slist *hdrs = NULL;
	char *body = NULL;
	CURLcode res;
	int rc;

	if (w->e->user && !w->logged_in) {
		rc = watch_login(w);
		if (rc)
			return rc;
	}
	body = watch_body(w);
	hdrs = etcd_headers(w->token);
	if (!body || !hdrs) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = etcd_easy_prepare(w->e, w->curl, w->ep, "/v3/watch", body, hdrs, w->e->timeout_ms,
			       0, w->errbuf);
	if (rc)
		goto out_free;
	if (curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, watch_write) ||
	    curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, w) ||
	    curl_easy_setopt(w->curl, CURLOPT_LOW_SPEED_LIMIT, 1L) ||
	    curl_easy_setopt(w->curl, CURLOPT_LOW_SPEED_TIME, WATCH_IDLE_SEC)) {
		rc = -ENOMEM;
		goto out_free;
	}
	w->line.len = 0;
	w->restart = false;
	res = watch_perform(w);
	if (watch_stopped(w) || w->restart) {
		rc = 0;
		goto out_free;
	}
	switch (etcd_xfer_classify(w->e, w->curl, w->ep, res, w->errbuf)) {
	case ETCD_XFER_OK:
		ZL_LOG_DEBUG(WATCH_COMP, "watch stream closed by endpoint=%s",
			     w->e->endpoints[w->ep]);
		rc = 0;
		break;
	case ETCD_XFER_TIMEOUT:
		rc = 0; /* idle too long: reconnect */
		break;
	default:
		ZL_LOG_WARN(WATCH_COMP, "watch connection failed err=\"%s\"",
			    zl_etcd_last_error());
		rc = -ZL_ERR_ETCD;
		break;
	}

out_free:
	curl_slist_free_all(hdrs);
	free(body);
	return rc;
}

/* After a compaction: the prefix listed at one revision and delivered as
 * RESYNC_BEGIN, a PUT per key, RESYNC_END (etcd.h); the watch resumes after
 * that revision. 0, or an error (etcd away: tried again after a backoff). */
static int watch_resync(struct zl_etcd_watch *w)
{
	struct zl_etcd_range r = {0};
	struct zl_etcd_kv mark = {0};
	int rc;

	rc = zl_etcd_range(w->e, w->prefix, w->prefix_end, 0, &r);
	if (rc) {
		ZL_LOG_WARN(WATCH_COMP, "cannot list %s again after a compaction: %s (%s)",
			    w->prefix, zl_errname(rc), zl_etcd_last_error());
		return rc;
	}
	mark.key = w->prefix;
	mark.value = (char *)"";
	mark.mod_rev = r.revision;
	w->cb(w->arg, ZL_ETCD_EV_RESYNC_BEGIN, &mark);
	for (size_t i = 0; i < r.n; i++)
		w->cb(w->arg, ZL_ETCD_EV_PUT, &r.kvs[i]);
	w->cb(w->arg, ZL_ETCD_EV_RESYNC_END, &mark);
	ZL_LOG_INFO(WATCH_COMP, "listed again after a compaction: prefix=%s revision=%lld keys=%zu",
		    w->prefix, (long long)r.revision, r.n);
	w->next_rev = r.revision + 1;
	w->resync = false;
	zl_etcd_range_fini(&r);
	return 0;
}

static void *watch_thread(void *arg)
{
	struct zl_etcd_watch *w = arg;
	long backoff = WATCH_BACKOFF_MIN_MS;

	while (!watch_stopped(w)) {
		int rc;

		w->progress = false;
		rc = w->resync ? watch_resync(w) : 0;
		if (!rc)
			rc = watch_session(w);
		if (watch_stopped(w))
			break;
		if (w->progress) {
			backoff = WATCH_BACKOFF_MIN_MS;
		} else {
			if (rc && rc != -ZL_ERR_AUTH)
				w->ep = (w->ep + 1) % w->e->n_endpoints;
			backoff = ZL_MIN(backoff * 2, WATCH_BACKOFF_MAX_MS);
		}
		watch_sleep(w, backoff);
	}
	return NULL;
}

int zl_etcd_watch_prefix(struct zl_etcd *e, const char *prefix, int64_t start_rev,
			 zl_etcd_watch_cb cb, void *arg, struct zl_etcd_watch **out)
{
	struct zl_etcd_watch *w;
	size_t plen;
	char *end;
	int rc;

	*out = NULL;
	if (!prefix || !cb) {
		etcd_set_error("etcd watch: prefix and callback are required");
		return -ZL_ERR_INVAL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->e = e;
	w->cb = cb;
	w->arg = arg;
	w->next_rev = start_rev > 0 ? start_rev : 0;
	w->ep = __atomic_load_n(&e->cur, __ATOMIC_RELAXED);
	plen = strlen(prefix);
	end = malloc(plen + 1);
	if (!end) {
		rc = -ENOMEM;
		goto out_cancel;
	}
	zl_etcd_prefix_end(prefix, end);
	w->prefix = strdup(prefix);
	w->prefix_end = end;
	/* An empty prefix starts at "\0", the smallest key; an empty end is
	 * etcd's "\0" (no upper bound). */
	w->body_prefix_key = etcd_b64_encode(plen ? prefix : "", plen ? plen : 1);
	w->body_prefix_end = etcd_b64_encode(end, *end ? strlen(end) : 1);
	w->multi = curl_multi_init();
	w->curl = curl_easy_init();
	if (!w->prefix || !w->body_prefix_key || !w->body_prefix_end || !w->multi || !w->curl) {
		rc = -ENOMEM;
		goto out_cancel;
	}
	rc = -pthread_create(&w->thread, NULL, watch_thread, w);
	if (rc) {
		etcd_set_error("etcd watch: cannot start a thread: %s", strerror(-rc));
		goto out_cancel;
	}
	w->thread_started = true;
	*out = w;
	return 0;

out_cancel:
	zl_etcd_watch_cancel(w);
	return rc;
}

void zl_etcd_watch_cancel(struct zl_etcd_watch *w)
{
	if (!w)
		return;
	__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
	if (w->thread_started) {
		curl_multi_wakeup(w->multi);
		pthread_join(w->thread, NULL);
	}
	if (w->curl)
		curl_easy_cleanup(w->curl);
	if (w->multi)
		curl_multi_cleanup(w->multi);
	etcd_buf_free(&w->line);
	etcd_buf_free(&w->auth);
	free(w->token);
	free(w->body_prefix_key);
	free(w->body_prefix_end);
	free(w->prefix);
	free(w->prefix_end);
	free(w);
}
