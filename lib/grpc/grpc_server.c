/* Unary gRPC server on gRPC core: accepting calls on a completion queue,
 * dispatching them to workers, answering with protobuf-c messages, shutting
 * down cleanly. All gRPC core calls of the project are in this folder. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "lib/common/common.h"
#include "lib/grpc/grpc_internal.h"
#include "lib/metrics/metrics.h"

#define GRPC_DEFAULT_WORKERS 4
#define GRPC_MAX_WORKERS     64
/* Calls requested from gRPC ahead of time per method; gRPC queues the rest. */
#define GRPC_REQS_PER_METHOD 2

enum grpc_srv_state {
	GRPC_SRV_RUNNING, /* serving */
	GRPC_SRV_DOWN,	  /* shut down: threads joined, socket removed */
};

struct zl_grpc_server {
	char name[64];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	void *ctx;
	struct zl_grpc_method *methods;
	void **handles; /* grpc_server_register_method() results, per method */
	size_t n_methods;

	grpc_server *server;
	grpc_completion_queue *cq;
	pthread_t cq_thread;
	bool cq_thread_started;
	pthread_t *workers;
	unsigned int n_workers; /* started */
	atomic_bool stopping;	/* no new requests are posted once set */
	struct grpc_tag shutdown_tag;

	/* Protects the queue, shutdown_done and workers_stop; cond signals
	 * both a queued call (to workers) and shutdown_done (to shutdown). */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct zl_grpc_call *q_head, *q_tail;
	bool shutdown_done;
	bool workers_stop;

	pthread_mutex_t state_lock; /* serialises shutdown callers */
	enum grpc_srv_state state;

	/* Calls served, per registered method (index n_methods: the rest);
	 * stats_lock is taken once per finished call (never on an I/O path). */
	pthread_mutex_t stats_lock;
	struct grpc_method_stats *stats;
};

/* ------------------------------------------------------------------ logging */

static void grpc_core_log(gpr_log_func_args *args)
{
	int lvl;

	switch (args->severity) {
	case GPR_LOG_SEVERITY_ERROR:
		lvl = ZL_LOG_LVL_WARN; /* gRPC's errors are mostly per-connection noise */
		break;
	default:
		lvl = ZL_LOG_LVL_DEBUG;
		break;
	}
	if (lvl <= zl_log_level)
		zl_log_write(lvl, "grpc-core", args->file, args->line, "%s", args->message);
}

/* ---------------------------------------------------------------- endpoint */

int zl_grpc_endpoint_path(const char *endpoint, char *path, size_t len)
{
	const char *p;
	size_t n;

	if (!endpoint || !*endpoint) {
		ZL_LOG_ERR(GRPC_COMP,
			   "no CSI endpoint given: set CSI_ENDPOINT=unix:///path/csi.sock");
		return -ZL_ERR_INVAL;
	}
	if (!strncmp(endpoint, "unix://", 7))
		p = endpoint + 7;
	else if (!strncmp(endpoint, "unix:", 5))
		p = endpoint + 5;
	else {
		ZL_LOG_ERR(GRPC_COMP,
			   "endpoint=%s is not supported: CSI plugins listen on UNIX sockets only, "
			   "use CSI_ENDPOINT=unix:///path/csi.sock",
			   endpoint);
		return -ZL_ERR_INVAL;
	}
	if (p[0] != '/') {
		ZL_LOG_ERR(GRPC_COMP,
			   "endpoint=%s has no absolute socket path: use unix:///path/csi.sock",
			   endpoint);
		return -ZL_ERR_INVAL;
	}
	n = strlen(p);
	if (n >= len || n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		ZL_LOG_ERR(GRPC_COMP,
			   "endpoint=%s: socket path is %zu bytes, UNIX sockets allow %zu: use a "
			   "shorter path",
			   endpoint, n, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(path, p, n + 1);
	return 0;
}

/* Removes a socket file left by a dead server. Refuses when a server still
 * answers on it or when the path is something else than a socket. */
static int grpc_socket_clear_stale(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		rc = -errno;
		ZL_LOG_ERR(GRPC_COMP, "cannot inspect socket path=%s: %s", path, strerror(-rc));
		return rc;
	}
	if (!S_ISSOCK(st.st_mode)) {
		ZL_LOG_ERR(GRPC_COMP,
			   "path=%s exists and is not a socket; refusing to remove it: "
			   "point CSI_ENDPOINT elsewhere or remove it by hand",
			   path);
		return -EEXIST;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		ZL_LOG_ERR(GRPC_COMP, "socket() failed: %s", strerror(-rc));
		return rc;
	}
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (!rc) {
		ZL_LOG_ERR(GRPC_COMP,
			   "path=%s: another server is listening on this socket; stop it first",
			   path);
		return -EADDRINUSE;
	}
	if (unlink(path) && errno != ENOENT) {
		rc = -errno;
		ZL_LOG_ERR(GRPC_COMP, "cannot remove stale socket path=%s: %s", path,
			   strerror(-rc));
		return rc;
	}
	ZL_LOG_INFO(GRPC_COMP, "removed stale socket path=%s", path);
	return 0;
}

/* ------------------------------------------------------------------- calls */

static void grpc_call_ctx_free(struct zl_grpc_call *c)
{
	if (!c)
		return;
	grpc_call_arena_free(c);
	if (c->payload)
		grpc_byte_buffer_destroy(c->payload);
	if (c->resp_bb)
		grpc_byte_buffer_destroy(c->resp_bb);
	grpc_metadata_array_destroy(&c->md);
	if (!c->m)
		grpc_call_details_destroy(&c->details);
	if (c->call)
		grpc_call_unref(c->call);
	free(c);
}

/* Posts one request for the next call of method midx (SIZE_MAX: the
 * catch-all for unregistered methods). */
static int grpc_request_post(struct zl_grpc_server *srv, size_t midx)
{
	struct zl_grpc_call *c;
	grpc_call_error e;

	if (atomic_load(&srv->stopping))
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->tag.kind = GRPC_TAG_NEW_CALL;
	c->srv = srv;
	c->midx = midx;
	grpc_metadata_array_init(&c->md);
	if (midx == SIZE_MAX) {
		grpc_call_details_init(&c->details);
		e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, srv->cq,
					     srv->cq, &c->tag);
	} else {
		c->m = &srv->methods[midx];
		e = grpc_server_request_registered_call(srv->server, srv->handles[midx], &c->call,
							&c->deadline, &c->md, &c->payload, srv->cq,
							srv->cq, &c->tag);
	}
	if (e != GRPC_CALL_OK) {
		ZL_LOG_ERR(GRPC_COMP,
			   "server=%s cannot request calls method=%s: grpc_call_error=%d",
			   srv->name, c->m ? c->m->name : "(unregistered)", (int)e);
		grpc_call_ctx_free(c);
		return -EIO;
	}
	return 0;
}

/* Sends the final batch: headers, the response on success, the status. */
/* Per method: calls by status code, and how long they took. */
struct grpc_method_stats {
	uint64_t codes[ZL_GRPC_UNAUTHENTICATED + 2]; /* the last: codes outside 0..16 */
	struct zl_metrics_hist lat;
};

static void grpc_stats_add(struct zl_grpc_server *srv, size_t midx, int code, uint64_t took_us)
{
	struct grpc_method_stats *st = &srv->stats[midx];
	unsigned k = code >= 0 && code <= ZL_GRPC_UNAUTHENTICATED ? (unsigned)code
								   : ZL_GRPC_UNAUTHENTICATED + 1;

	pthread_mutex_lock(&srv->stats_lock);
	st->codes[k]++;
	zl_metrics_hist_add(&st->lat, took_us * 1000);
	pthread_mutex_unlock(&srv->stats_lock);
}

void zl_grpc_server_metrics(struct zl_grpc_server *srv, struct zl_metrics_text *t)
{
	char lab[GRPC_METHOD_NAME_MAX + 64];

	zl_metrics_family(t, "zipline_csi_calls_total", "counter",
			  "CSI calls answered, by method and gRPC status code.");
	pthread_mutex_lock(&srv->stats_lock);
	for (size_t i = 0; i <= srv->n_methods; i++)
		for (unsigned k = 0; k < ZL_ARRAY_SIZE(srv->stats[i].codes); k++) {
			if (!srv->stats[i].codes[k])
				continue;
			snprintf(lab, sizeof(lab), "method=\"%s\",code=\"%s\"",
				 i < srv->n_methods ? srv->methods[i].name : "other",
				 zl_grpc_code_name((int)k));
			zl_metrics_u64(t, "zipline_csi_calls_total", lab, srv->stats[i].codes[k]);
		}
	zl_metrics_family(t, "zipline_csi_call_duration_seconds", "histogram",
			  "Time from a CSI call's arrival to its answer, by method.");
	for (size_t i = 0; i <= srv->n_methods; i++) {
		if (!srv->stats[i].lat.count)
			continue;
		snprintf(lab, sizeof(lab), "method=\"%s\"",
			 i < srv->n_methods ? srv->methods[i].name : "other");
		zl_metrics_hist_text(t, "zipline_csi_call_duration_seconds", lab,
				     &srv->stats[i].lat);
	}
	pthread_mutex_unlock(&srv->stats_lock);
}

static void grpc_call_finish(struct zl_grpc_call *c)
{
	grpc_op ops[4];
	grpc_slice details;
	grpc_call_error e;
	size_t n = 0;
	uint64_t took_us = (zl_now_ns() - c->accepted_ns) / 1000;

	memset(ops, 0, sizeof(ops));
	ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
	n++;
	if (c->code == ZL_GRPC_OK && c->resp_bb) {
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n].data.send_message.send_message = c->resp_bb;
		n++;
	}
	details = grpc_slice_from_copied_string(c->code == ZL_GRPC_OK ? "" : c->msg);
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = (grpc_status_code)c->code;
	ops[n].data.send_status_from_server.status_details = &details;
	n++;
	ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
	n++;

	grpc_stats_add(c->srv, c->m ? c->midx : c->srv->n_methods, c->code, took_us);
	if (c->code == ZL_GRPC_OK)
		ZL_LOG_DEBUG(GRPC_COMP, "call method=%s code=OK took_us=%llu", c->method,
			     (unsigned long long)took_us);
	else
		ZL_LOG_INFO(GRPC_COMP, "call method=%s code=%s took_us=%llu msg=\"%s\"", c->method,
			    zl_grpc_code_name(c->code), (unsigned long long)took_us, c->msg);

	c->tag.kind = GRPC_TAG_CALL_DONE;
	e = grpc_call_start_batch(c->call, ops, n, &c->tag, NULL);
	grpc_slice_unref(details);
	if (e != GRPC_CALL_OK) {
		/* No completion will come: nothing else owns c. */
		ZL_LOG_ERR(GRPC_COMP, "call method=%s: cannot send status, grpc_call_error=%d",
			   c->method, (int)e);
		grpc_call_ctx_free(c);
	}
}

/* Reads the whole request payload into one slice. */
static grpc_slice grpc_payload_slice(grpc_byte_buffer *bb, bool *ok)
{
	grpc_byte_buffer_reader r;
	grpc_slice s;

	if (!grpc_byte_buffer_reader_init(&r, bb)) {
		*ok = false;
		return grpc_empty_slice();
	}
	s = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*ok = true;
	return s;
}

static void grpc_free_cb(void *p)
{
	free(p);
}

/* Decodes the request, runs the handler, encodes the response, then sends
 * the final batch. The request is unpacked and freed here, and nowhere
 * else. */
static void grpc_call_serve(struct zl_grpc_server *srv, struct zl_grpc_call *c)
{
	const struct zl_grpc_method *m = c->m;
	ProtobufCMessage *req = NULL;
	ProtobufCMessage *resp;
	grpc_slice in, out;
	bool ok;
	size_t len;
	uint8_t *buf;
	int rc;

	c->code = ZL_GRPC_OK;
	if (c->deadline_ns && zl_grpc_call_deadline_left_ms(c) <= 0) {
		zl_grpc_fail(
		    c, ZL_GRPC_DEADLINE_EXCEEDED,
		    "%s: deadline passed before a worker was free; retry with a longer timeout",
		    c->method);
		goto out_finish;
	}
	if (!c->payload) {
		zl_grpc_fail(c, ZL_GRPC_INVALID_ARGUMENT, "%s: the request carries no message",
			     c->method);
		goto out_finish;
	}
	in = grpc_payload_slice(c->payload, &ok);
	if (!ok) {
		zl_grpc_fail(c, ZL_GRPC_INVALID_ARGUMENT,
			     "%s: cannot read the request (bad compression?)", c->method);
		goto out_finish;
	}
	req = protobuf_c_message_unpack(m->req_desc, NULL, GRPC_SLICE_LENGTH(in),
					GRPC_SLICE_START_PTR(in));
	len = GRPC_SLICE_LENGTH(in);
	grpc_slice_unref(in);
	if (!req) {
		zl_grpc_fail(c, ZL_GRPC_INVALID_ARGUMENT,
			     "%s: cannot decode the %zu-byte request as %s: malformed protobuf",
			     c->method, len, m->req_desc->name);
		goto out_finish;
	}

	resp = zl_grpc_call_alloc(c, m->resp_desc->sizeof_message);
	if (!resp) {
		zl_grpc_fail(c, ZL_GRPC_RESOURCE_EXHAUSTED, "%s: out of memory", c->method);
		goto out_free_req;
	}
	protobuf_c_message_init(m->resp_desc, resp);

	rc = m->fn(srv->ctx, c, req, resp);
	if (rc < 0) {
		zl_grpc_fail(c, zl_grpc_code_from_err(rc), "%s failed: %s", c->method,
			     zl_strerror(rc));
	} else if (rc > 0) {
		if (c->code != rc || !c->msg[0]) {
			/* The handler returned a code without zl_grpc_fail(). */
			zl_grpc_fail(c, rc, "%s failed with %s", c->method, zl_grpc_code_name(rc));
		}
	} else {
		c->code = ZL_GRPC_OK;
		len = protobuf_c_message_get_packed_size(resp);
		buf = malloc(len ? len : 1);
		if (!buf) {
			zl_grpc_fail(c, ZL_GRPC_RESOURCE_EXHAUSTED,
				     "%s: out of memory encoding the response", c->method);
			goto out_free_req;
		}
		protobuf_c_message_pack(resp, buf);
		out = grpc_slice_new(buf, len, grpc_free_cb);
		c->resp_bb = grpc_raw_byte_buffer_create(&out, 1);
		grpc_slice_unref(out);
	}

out_free_req:
	protobuf_c_message_free_unpacked(req, NULL);
out_finish:
	grpc_call_arena_free(c);
	grpc_call_finish(c);
}

static void grpc_call_unimplemented(struct zl_grpc_server *srv, struct zl_grpc_call *c)
{
	zl_grpc_fail(c, ZL_GRPC_UNIMPLEMENTED, "%s: method %s is not implemented", srv->name,
		     c->method);
	grpc_call_finish(c);
}

static void grpc_worker_enqueue(struct zl_grpc_server *srv, struct zl_grpc_call *c)
{
	pthread_mutex_lock(&srv->lock);
	c->next = NULL;
	if (srv->q_tail)
		srv->q_tail->next = c;
	else
		srv->q_head = c;
	srv->q_tail = c;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
}

static void *grpc_worker_main(void *arg)
{
	struct zl_grpc_server *srv = arg;
	struct zl_grpc_call *c;

	for (;;) {
		pthread_mutex_lock(&srv->lock);
		while (!srv->q_head && !srv->workers_stop)
			pthread_cond_wait(&srv->cond, &srv->lock);
		c = srv->q_head;
		if (!c) {
			pthread_mutex_unlock(&srv->lock);
			break;
		}
		srv->q_head = c->next;
		if (!srv->q_head)
			srv->q_tail = NULL;
		pthread_mutex_unlock(&srv->lock);
		grpc_call_serve(srv, c);
	}
	return NULL;
}

static void grpc_on_new_call(struct zl_grpc_server *srv, struct zl_grpc_call *c, int success)
{
	gpr_timespec now, left;
	size_t n;

	if (!success) {
		/* Shutdown failed the pending request: no call attached. */
		grpc_call_ctx_free(c);
		return;
	}
	/* Keep a request posted for this method before serving this one. */
	if (grpc_request_post(srv, c->m ? c->midx : SIZE_MAX))
		ZL_LOG_ERR(GRPC_COMP, "server=%s: method=%s may stop being served", srv->name,
			   c->m ? c->m->name : "(unregistered)");

	c->accepted_ns = zl_now_ns();
	if (c->m) {
		snprintf(c->method, sizeof(c->method), "%s", c->m->name);
	} else {
		n = ZL_MIN(GRPC_SLICE_LENGTH(c->details.method), sizeof(c->method) - 1);
		memcpy(c->method, GRPC_SLICE_START_PTR(c->details.method), n);
		c->method[n] = '\0';
		c->deadline = c->details.deadline;
	}
	now = gpr_now(c->deadline.clock_type);
	if (gpr_time_cmp(c->deadline, gpr_inf_future(c->deadline.clock_type)) == 0) {
		c->deadline_ns = 0;
	} else {
		left = gpr_time_sub(c->deadline, now);
		if (left.tv_sec < 0)
			c->deadline_ns = c->accepted_ns; /* already expired */
		else
			c->deadline_ns = c->accepted_ns + (uint64_t)left.tv_sec * 1000000000ull +
					 (uint64_t)left.tv_nsec;
	}

	if (!c->m)
		grpc_call_unimplemented(srv, c);
	else if (c->m->flags & ZL_GRPC_METHOD_INLINE)
		grpc_call_serve(srv, c);
	else
		grpc_worker_enqueue(srv, c);
}

static void *grpc_cq_main(void *arg)
{
	struct zl_grpc_server *srv = arg;

	for (;;) {
		grpc_event ev =
		    grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		struct grpc_tag *t;

		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		t = ev.tag;
		switch (t->kind) {
		case GRPC_TAG_NEW_CALL:
			grpc_on_new_call(srv, ZL_CONTAINER_OF(t, struct zl_grpc_call, tag),
					 ev.success);
			break;
		case GRPC_TAG_CALL_DONE: {
			struct zl_grpc_call *c = ZL_CONTAINER_OF(t, struct zl_grpc_call, tag);

			if (!ev.success || c->cancelled)
				ZL_LOG_DEBUG(GRPC_COMP,
					     "call method=%s: client gone before the answer",
					     c->method);
			grpc_call_ctx_free(c);
			break;
		}
		case GRPC_TAG_SHUTDOWN:
			pthread_mutex_lock(&srv->lock);
			srv->shutdown_done = true;
			pthread_cond_broadcast(&srv->cond);
			pthread_mutex_unlock(&srv->lock);
			break;
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------ server */

static int grpc_methods_check(const struct zl_grpc_server_cfg *cfg)
{
	for (size_t i = 0; i < cfg->n_methods; i++) {
		const struct zl_grpc_method *m = &cfg->methods[i];

		if (!m->name || m->name[0] != '/' || !m->req_desc || !m->resp_desc || !m->fn ||
		    strlen(m->name) >= GRPC_METHOD_NAME_MAX) {
			ZL_LOG_ERR(GRPC_COMP, "method table entry %zu (%s) is incomplete", i,
				   m->name ? m->name : "no name");
			return -ZL_ERR_INVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (!strcmp(cfg->methods[j].name, m->name)) {
				ZL_LOG_ERR(GRPC_COMP, "method=%s registered twice", m->name);
				return -ZL_ERR_INVAL;
			}
		}
	}
	return 0;
}

/* Blocks until the server's shutdown notification arrived or deadline_ns
 * (CLOCK_MONOTONIC; 0 = forever) passed. Returns true when it arrived. */
static bool grpc_wait_shutdown_done(struct zl_grpc_server *srv, const struct timespec *until)
{
	bool done;

	pthread_mutex_lock(&srv->lock);
	while (!srv->shutdown_done) {
		if (until) {
			if (pthread_cond_timedwait(&srv->cond, &srv->lock, until) == ETIMEDOUT)
				break;
		} else {
			pthread_cond_wait(&srv->cond, &srv->lock);
		}
	}
	done = srv->shutdown_done;
	pthread_mutex_unlock(&srv->lock);
	return done;
}

static void grpc_threads_stop(struct zl_grpc_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	srv->workers_stop = true;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	for (unsigned int i = 0; i < srv->n_workers; i++)
		pthread_join(srv->workers[i], NULL);
	srv->n_workers = 0;
}

int zl_grpc_server_shutdown(struct zl_grpc_server *srv, unsigned int grace_ms)
{
	struct timespec until;
	struct stat st;

	pthread_mutex_lock(&srv->state_lock);
	if (srv->state == GRPC_SRV_DOWN) {
		pthread_mutex_unlock(&srv->state_lock);
		return 0;
	}
	atomic_store(&srv->stopping, true);
	ZL_LOG_INFO(GRPC_COMP, "server=%s shutting down grace_ms=%u", srv->name, grace_ms);
	grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);

	clock_gettime(CLOCK_REALTIME, &until); /* pthread_cond_t default clock */
	until.tv_sec += grace_ms / 1000;
	until.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	if (!grpc_wait_shutdown_done(srv, &until)) {
		ZL_LOG_WARN(GRPC_COMP,
			    "server=%s: calls still running after grace_ms=%u, cancelling them",
			    srv->name, grace_ms);
		grpc_server_cancel_all_calls(srv->server);
		/* Running handlers are not interrupted; their calls end when they return. */
		grpc_wait_shutdown_done(srv, NULL);
	}
	grpc_threads_stop(srv);
	grpc_server_destroy(srv->server);
	srv->server = NULL;
	grpc_completion_queue_shutdown(srv->cq);
	if (srv->cq_thread_started) {
		pthread_join(srv->cq_thread, NULL);
		srv->cq_thread_started = false;
	}
	grpc_completion_queue_destroy(srv->cq);
	srv->cq = NULL;

	if (!lstat(srv->path, &st) && S_ISSOCK(st.st_mode) && unlink(srv->path) && errno != ENOENT)
		ZL_LOG_WARN(GRPC_COMP, "cannot remove socket path=%s: %s", srv->path,
			    strerror(errno));
	srv->state = GRPC_SRV_DOWN;
	pthread_mutex_unlock(&srv->state_lock);
	ZL_LOG_INFO(GRPC_COMP, "server=%s stopped", srv->name);
	return 0;
}

void zl_grpc_server_destroy(struct zl_grpc_server *srv)
{
	if (!srv)
		return;
	if (srv->state != GRPC_SRV_DOWN)
		zl_grpc_server_shutdown(srv, 0);
	pthread_cond_destroy(&srv->cond);
	pthread_mutex_destroy(&srv->lock);
	pthread_mutex_destroy(&srv->state_lock);
	pthread_mutex_destroy(&srv->stats_lock);
	free(srv->stats);
	free(srv->workers);
	free(srv->handles);
	free(srv->methods);
	free(srv);
	grpc_shutdown();
}

const char *zl_grpc_server_socket_path(const struct zl_grpc_server *srv)
{
	return srv->path;
}

/* Undoes a server that never started serving: stops the threads, destroys
 * the gRPC objects, then frees it. */
static void grpc_server_abort(struct zl_grpc_server *srv)
{
	grpc_threads_stop(srv);
	if (srv->server)
		grpc_server_destroy(srv->server);
	srv->server = NULL;
	if (srv->cq) {
		grpc_completion_queue_shutdown(srv->cq);
		if (srv->cq_thread_started)
			pthread_join(srv->cq_thread, NULL);
		else
			while (grpc_completion_queue_next(srv->cq,
							  gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
				   .type != GRPC_QUEUE_SHUTDOWN)
				;
		grpc_completion_queue_destroy(srv->cq);
	}
	srv->cq_thread_started = false;
	srv->cq = NULL;
	srv->state = GRPC_SRV_DOWN;
	zl_grpc_server_destroy(srv);
}

int zl_grpc_server_create(const struct zl_grpc_server_cfg *cfg, struct zl_grpc_server **out)
{
	struct zl_grpc_server *srv;
	grpc_server_credentials *creds;
	char addr[sizeof(srv->path) + 8];
	unsigned int nw = cfg->workers ? cfg->workers : GRPC_DEFAULT_WORKERS;
	int rc;

	*out = NULL;
	if (nw > GRPC_MAX_WORKERS || (cfg->n_methods && !cfg->methods)) {
		ZL_LOG_ERR(GRPC_COMP, "bad server config workers=%u methods=%zu", nw,
			   cfg->n_methods);
		return -ZL_ERR_INVAL;
	}
	rc = grpc_methods_check(cfg);
	if (rc)
		return rc;

	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	snprintf(srv->name, sizeof(srv->name), "%s", cfg->name ? cfg->name : "zipline");
	srv->ctx = cfg->ctx;
	srv->state = GRPC_SRV_RUNNING;
	srv->shutdown_tag.kind = GRPC_TAG_SHUTDOWN;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_mutex_init(&srv->state_lock, NULL);
	pthread_mutex_init(&srv->stats_lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	/* From here zl_grpc_server_destroy() undoes everything, grpc_init included. */
	gpr_set_log_function(grpc_core_log);
	grpc_init();

	rc = zl_grpc_endpoint_path(cfg->endpoint, srv->path, sizeof(srv->path));
	if (rc)
		goto out_abort;
	rc = grpc_socket_clear_stale(srv->path);
	if (rc)
		goto out_abort;

	srv->n_methods = cfg->n_methods;
	srv->methods = calloc(cfg->n_methods + 1, sizeof(*srv->methods));
	srv->handles = calloc(cfg->n_methods + 1, sizeof(*srv->handles));
	srv->workers = calloc(nw, sizeof(*srv->workers));
	srv->stats = calloc(cfg->n_methods + 1, sizeof(*srv->stats));
	if (!srv->methods || !srv->handles || !srv->workers || !srv->stats) {
		rc = -ENOMEM;
		goto out_abort;
	}
	if (cfg->n_methods)
		memcpy(srv->methods, cfg->methods, cfg->n_methods * sizeof(*srv->methods));

	srv->cq = grpc_completion_queue_create_for_next(NULL);
	srv->server = grpc_server_create(NULL, NULL);
	if (!srv->cq || !srv->server) {
		rc = -ENOMEM;
		goto out_abort;
	}
	grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
	for (size_t i = 0; i < srv->n_methods; i++) {
		srv->handles[i] =
		    grpc_server_register_method(srv->server, srv->methods[i].name, NULL,
						GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
		if (!srv->handles[i]) {
			ZL_LOG_ERR(GRPC_COMP, "gRPC refused to register method=%s",
				   srv->methods[i].name);
			rc = -ZL_ERR_INVAL;
			goto out_abort;
		}
	}

	/* Threads first: they only wait until the server starts. */
	rc = pthread_create(&srv->cq_thread, NULL, grpc_cq_main, srv);
	if (rc) {
		rc = -rc;
		ZL_LOG_ERR(GRPC_COMP, "cannot start the completion-queue thread: %s",
			   strerror(-rc));
		goto out_abort;
	}
	srv->cq_thread_started = true;
	for (unsigned int i = 0; i < nw; i++) {
		rc = pthread_create(&srv->workers[i], NULL, grpc_worker_main, srv);
		if (rc) {
			rc = -rc;
			ZL_LOG_ERR(GRPC_COMP, "cannot start worker %u: %s", i, strerror(-rc));
			goto out_abort;
		}
		srv->n_workers++;
	}

	snprintf(addr, sizeof(addr), "unix:%s", srv->path);
	creds = grpc_insecure_server_credentials_create();
	rc = grpc_server_add_http2_port(srv->server, addr, creds);
	grpc_server_credentials_release(creds);
	if (!rc) {
		ZL_LOG_ERR(GRPC_COMP,
			   "server=%s cannot listen on path=%s: check that the directory exists "
			   "and is writable",
			   srv->name, srv->path);
		rc = -EIO;
		goto out_abort;
	}
	grpc_server_start(srv->server);

	/* The server runs: from here on only a full shutdown undoes it. */
	for (size_t i = 0; i < srv->n_methods; i++) {
		for (int k = 0; k < GRPC_REQS_PER_METHOD; k++) {
			rc = grpc_request_post(srv, i);
			if (rc)
				goto out_started;
		}
	}
	rc = grpc_request_post(srv, SIZE_MAX);
	if (rc)
		goto out_started;

	ZL_LOG_INFO(GRPC_COMP, "server=%s listening endpoint=unix://%s methods=%zu workers=%u",
		    srv->name, srv->path, srv->n_methods, nw);
	*out = srv;
	return 0;

out_started:
	zl_grpc_server_destroy(srv);
	return rc;
out_abort:
	grpc_server_abort(srv);
	return rc;
}
