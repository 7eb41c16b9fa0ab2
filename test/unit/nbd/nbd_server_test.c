/* NBD server against an in-memory backend: a raw protocol client in this
 * thread, the server on a loop thread; then libnbd's tools (nbdinfo,
 * nbdcopy) as an independent client when they are installed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* cmocka needs the headers above first. */
#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/nbd/nbd.h"

#define MEM_SIZE    (8u << 20)
#define MEM_PENDING 256

/* In-memory backend. Completions run deferred (never inside the call), the
 * number in flight is capped to exercise -ZL_ERR_BUSY, and completion order
 * is reversed per round to exercise out-of-order replies. */
struct mem_io {
	zl_nbd_io_cb cb;
	void *arg;
	int status;
};

struct mem_be {
	struct zl_loop *loop;
	uint8_t *data;
	struct mem_io pend[MEM_PENDING];
	int n_pend;
	int cap; /* max in flight */
	struct zl_defer d;
	int writes, fua_writes, flushes, discards, zeroes, busy;
	int fail_next; /* error for the next I/O */
	/* hold: completions wait until the backend has refused an I/O as busy
	 * (or 20 ms passed), so a test of the server's back-pressure sees a
	 * refusal however the threads are scheduled. */
	bool hold;
	struct zl_timer hold_timer;
	int bufs;      /* outstanding buffers */
};

static void mem_complete(void *arg)
{
	struct mem_be *m = arg;
	struct mem_io done[MEM_PENDING];
	int n = m->n_pend, i;

	memcpy(done, m->pend, sizeof(done[0]) * (size_t)n);
	m->n_pend = 0;
	for (i = n - 1; i >= 0; i--)
		done[i].cb(done[i].arg, done[i].status);
}

static int mem_queue(struct mem_be *m, zl_nbd_io_cb cb, void *arg)
{
	if (m->n_pend >= m->cap) {
		m->busy++;
		if (m->hold) {
			zl_timer_stop(m->loop, &m->hold_timer);
			zl_loop_defer(m->loop, &m->d, mem_complete, m);
		}
		return -ZL_ERR_BUSY;
	}
	m->pend[m->n_pend++] = (struct mem_io){cb, arg, m->fail_next};
	m->fail_next = 0;
	if (m->hold && !m->busy) {
		/* Held until the server's next I/O is refused (mem_queue above);
		 * the timer completes them if that never comes. */
		if (!m->hold_timer.armed)
			zl_timer_start(m->loop, &m->hold_timer, 20, 0, mem_complete, m);
		return 0;
	}
	zl_loop_defer(m->loop, &m->d, mem_complete, m);
	return 0;
}

static int mem_read(void *ctx, void *buf, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	struct mem_be *m = ctx;

	assert_true(off + len <= MEM_SIZE);
	if (m->n_pend >= m->cap)
		return mem_queue(m, cb, arg);
	memcpy(buf, m->data + off, len);
	return mem_queue(m, cb, arg);
}

static int mem_write(void *ctx, const void *buf, uint64_t off, uint32_t len, bool fua,
		     zl_nbd_io_cb cb, void *arg)
{
	struct mem_be *m = ctx;

	assert_true(off + len <= MEM_SIZE);
	if (m->n_pend >= m->cap)
		return mem_queue(m, cb, arg);
	memcpy(m->data + off, buf, len);
	m->writes++;
	m->fua_writes += fua;
	return mem_queue(m, cb, arg);
}

static int mem_flush(void *ctx, zl_nbd_io_cb cb, void *arg)
{
	struct mem_be *m = ctx;
	int rc = mem_queue(m, cb, arg);

	m->flushes += rc == 0;
	return rc;
}

static int mem_discard(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	struct mem_be *m = ctx;

	assert_true(off + len <= MEM_SIZE);
	if (m->n_pend >= m->cap)
		return mem_queue(m, cb, arg);
	memset(m->data + off, 0, len);
	m->discards++;
	return mem_queue(m, cb, arg);
}

static int mem_zeroes(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	struct mem_be *m = ctx;

	assert_true(off + len <= MEM_SIZE);
	if (m->n_pend >= m->cap)
		return mem_queue(m, cb, arg);
	memset(m->data + off, 0, len);
	m->zeroes++;
	return mem_queue(m, cb, arg);
}

static void *mem_alloc(void *ctx, size_t len)
{
	((struct mem_be *)ctx)->bufs++;
	return aligned_alloc(4096, ZL_ALIGN_UP(len, 4096));
}

static void mem_free(void *ctx, void *buf)
{
	((struct mem_be *)ctx)->bufs--;
	free(buf);
}

static const struct zl_nbd_backend_ops mem_ops = {
    .read = mem_read,
    .write = mem_write,
    .flush = mem_flush,
    .discard = mem_discard,
    .write_zeroes = mem_zeroes,
    .buf_alloc = mem_alloc,
    .buf_free = mem_free,
};

struct fixture {
	struct zl_loop *loop;
	struct mem_be mem;
	struct zl_nbd_server *srv;
	pthread_t thr;
	char path[108];
};

static void *loop_thread(void *arg)
{
	zl_loop_run(arg);
	return NULL;
}

static void fx_start_at(struct fixture *f, uint32_t slots, int cap, const char *name,
			const char *tcp, uint32_t max_conns);

static void fx_start(struct fixture *f, uint32_t slots, int cap, const char *name)
{
	fx_start_at(f, slots, cap, name, NULL, 0);
}

static void fx_start_at(struct fixture *f, uint32_t slots, int cap, const char *name,
			const char *tcp, uint32_t max_conns)
{
	struct zl_nbd_backend be;
	struct zl_nbd_server_opts o = {0};

	memset(f, 0, sizeof(*f));
	assert_int_equal(zl_loop_create(&f->loop), 0);
	f->mem.loop = f->loop;
	f->mem.cap = cap;
	f->mem.data = calloc(1, MEM_SIZE);
	assert_non_null(f->mem.data);
	be = (struct zl_nbd_backend){.ops = &mem_ops, .ctx = &f->mem, .size = MEM_SIZE};
	snprintf(f->path, sizeof(f->path), "/tmp/zl-nbd-test-%d.sock", (int)getpid());
	/* A stale socket file from an earlier run must not stop us. */
	{
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};

		strcpy(sa.sun_path, f->path);
		unlink(f->path);
		assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		close(fd);
	}
	char listen[120];
	snprintf(listen, sizeof(listen), "unix:%s", f->path);
	o.listen = tcp ? tcp : listen;
	o.max_conns = max_conns;
	o.max_inflight = slots;
	o.slot_buf = 64 << 10;
	o.export_name = name;
	assert_int_equal(zl_nbd_server_create(f->loop, &be, &o, &f->srv), 0);
	if (!tcp)
		assert_string_equal(zl_nbd_server_address(f->srv), listen);
	/* A second server on the same live socket is refused. */
	if (!tcp) {
		struct zl_nbd_server *dup;

		assert_int_equal(zl_nbd_server_create(f->loop, &be, &o, &dup), -EADDRINUSE);
	}
	assert_int_equal(pthread_create(&f->thr, NULL, loop_thread, f->loop), 0);
}

static void fx_stop(struct fixture *f)
{
	int i;

	zl_loop_stop(f->loop);
	zl_loop_wake(f->loop);
	pthread_join(f->thr, NULL);
	zl_nbd_server_shutdown(f->srv);
	for (i = 0; i < 1000 && !zl_nbd_server_idle(f->srv); i++)
		zl_loop_run_once(f->loop, 10);
	assert_true(zl_nbd_server_idle(f->srv));
	zl_nbd_server_destroy(f->srv);
	assert_int_equal(f->mem.bufs, 0);
	if (access(f->path, F_OK) == 0)
		unlink(f->path); /* the stale file of a TCP run */
	else
		assert_int_equal(errno, ENOENT); /* socket file removed */
	zl_loop_destroy(f->loop);
	free(f->mem.data);
}

/* ---- raw client ---- */

static void wr(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void rd(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = recv(fd, (char *)p + got, n - got, 0);

		assert_true(k > 0);
		got += (size_t)k;
	}
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = 60};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	strcpy(sa.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_opt(int fd, uint32_t opt, const void *data, uint32_t len)
{
	uint8_t h[16];

	put64(h, ZL_NBD_IHAVEOPT);
	put32(h + 8, opt);
	put32(h + 12, len);
	wr(fd, h, 16);
	if (len)
		wr(fd, data, len);
}

/* Reads one option reply; returns its type, data into buf. */
static uint32_t recv_opt_reply(int fd, uint32_t opt, uint8_t *buf, uint32_t *len)
{
	uint8_t h[20];

	rd(fd, h, 20);
	assert_true(get64(h) == ZL_NBD_OPT_REPLY_MAGIC);
	assert_int_equal(get32(h + 8), opt);
	*len = get32(h + 16);
	assert_true(*len < 8192);
	if (*len)
		rd(fd, buf, *len);
	return get32(h + 12);
}

/* Handshake up to transmission with NBD_OPT_GO; returns size. */
static int handshake_fd(int fd, const char *name, uint64_t *size);

static int handshake(const char *path, const char *name, uint64_t *size)
{
	return handshake_fd(connect_unix(path), name, size);
}

static int handshake_fd(int fd, const char *name, uint64_t *size)
{
	uint8_t g[18], buf[8192], d[64];
	uint32_t len, type, nl = (uint32_t)strlen(name);

	rd(fd, g, 18);
	assert_memory_equal(g, "NBDMAGICIHAVEOPT", 16);
	assert_int_equal(g[17], 3);
	put32(d, ZL_NBD_FLAG_C_FIXED_NEWSTYLE | ZL_NBD_FLAG_C_NO_ZEROES);
	wr(fd, d, 4);
	/* An unknown option first: unsupported, session continues. */
	send_opt(fd, 99, "xyz", 3);
	assert_int_equal(recv_opt_reply(fd, 99, buf, &len), ZL_NBD_REP_ERR_UNSUP);
	put32(d, nl);
	memcpy(d + 4, name, nl);
	put16(d + 4 + nl, 0);
	send_opt(fd, ZL_NBD_OPT_GO, d, nl + 6);
	*size = 0;
	for (;;) {
		type = recv_opt_reply(fd, ZL_NBD_OPT_GO, buf, &len);
		if (type == ZL_NBD_REP_ACK)
			break;
		if (type != ZL_NBD_REP_INFO) {
			close(fd);
			return -(int)(type & 0xff);
		}
		if (buf[1] == ZL_NBD_INFO_EXPORT) {
			*size = get64(buf + 2);
			assert_int_equal((buf[10] << 8) | buf[11],
					 ZL_NBD_TFLAG_HAS_FLAGS | ZL_NBD_TFLAG_SEND_FLUSH |
					     ZL_NBD_TFLAG_SEND_FUA | ZL_NBD_TFLAG_SEND_TRIM |
					     ZL_NBD_TFLAG_SEND_WRITE_ZEROES |
					     ZL_NBD_TFLAG_CAN_MULTI_CONN);
		}
	}
	return fd;
}

static void send_req(int fd, uint16_t flags, uint16_t type, uint64_t cookie, uint64_t off,
		     uint32_t len, const void *payload)
{
	uint8_t b[28];

	put32(b, ZL_NBD_REQUEST_MAGIC);
	put16(b + 4, flags);
	put16(b + 6, type);
	put64(b + 8, cookie);
	put64(b + 16, off);
	put32(b + 24, len);
	wr(fd, b, 28);
	if (payload)
		wr(fd, payload, len);
}

/* Receives one simple reply; returns the error, cookie in *cookie. */
static uint32_t recv_reply(int fd, uint64_t *cookie)
{
	uint8_t b[16];

	rd(fd, b, 16);
	assert_int_equal(get32(b), ZL_NBD_SIMPLE_REPLY_MAGIC);
	*cookie = get64(b + 8);
	return get32(b + 4);
}

static void test_handshake_and_io(void **state)
{
	struct fixture f;
	uint64_t size, cookie;
	uint8_t *w = malloc(1 << 20), *r = malloc(1 << 20);
	int fd, i;

	(void)state;
	fx_start(&f, 4, 64, "");
	fd = handshake(f.path, "anything", &size);
	assert_true(fd >= 0);
	assert_int_equal(size, MEM_SIZE);
	for (i = 0; i < (1 << 20); i++)
		w[i] = (uint8_t)(i * 7 + 3);

	/* 1 MiB write (bigger than the slot buffer: borrowed buffer), FUA. */
	send_req(fd, ZL_NBD_CMD_FLAG_FUA, ZL_NBD_CMD_WRITE, 1, 12345, 1 << 20, w);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	assert_int_equal(cookie, 1);
	assert_memory_equal(f.mem.data + 12345, w, 1 << 20);
	assert_int_equal(f.mem.fua_writes, 1);
	send_req(fd, 0, ZL_NBD_CMD_READ, 2, 12345, 1 << 20, NULL);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	assert_int_equal(cookie, 2);
	rd(fd, r, 1 << 20);
	assert_memory_equal(r, w, 1 << 20);

	/* Beyond the end: EINVAL, the volume untouched, the payload skipped. */
	send_req(fd, 0, ZL_NBD_CMD_WRITE, 3, MEM_SIZE - 100, 4096, w);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EINVAL);
	assert_int_equal(cookie, 3);
	assert_int_equal(f.mem.writes, 1);
	send_req(fd, 0, ZL_NBD_CMD_READ, 4, MEM_SIZE, 1, NULL);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EINVAL);
	/* Oversized write: rejected, payload drained, the stream stays in sync. */
	{
		uint8_t *big = calloc(1, (4u << 20) + 4096);

		send_req(fd, 0, ZL_NBD_CMD_WRITE, 5, 0, (4u << 20) + 4096, big);
		assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EINVAL);
		assert_int_equal(cookie, 5);
		free(big);
	}
	/* Unknown command and bad flags. */
	send_req(fd, 0, 42, 6, 0, 512, NULL);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EINVAL);
	send_req(fd, 1u << 9, ZL_NBD_CMD_READ, 7, 0, 512, NULL);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EINVAL);

	/* Trim, write zeroes with FUA (a flush follows), flush. */
	send_req(fd, 0, ZL_NBD_CMD_TRIM, 8, 12345, 4096, NULL);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	send_req(fd, ZL_NBD_CMD_FLAG_FUA, ZL_NBD_CMD_WRITE_ZEROES, 9, 20000, 10000, NULL);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	send_req(fd, 0, ZL_NBD_CMD_FLUSH, 10, 0, 0, NULL);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	assert_int_equal(f.mem.discards, 1);
	assert_int_equal(f.mem.zeroes, 1);
	assert_int_equal(f.mem.flushes, 2);
	for (i = 12345; i < 12345 + 4096; i++)
		assert_int_equal(f.mem.data[i], 0);
	for (i = 20000; i < 30000; i++)
		assert_int_equal(f.mem.data[i], 0);
	assert_int_equal(f.mem.data[30000], w[30000 - 12345]);

	/* Backend error -> EIO (zl errors), ENOSPC. */
	f.mem.fail_next = -ZL_ERR_NOSPC;
	send_req(fd, 0, ZL_NBD_CMD_WRITE, 11, 0, 512, w);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_ENOSPC);
	f.mem.fail_next = -ZL_ERR_UNAVAIL;
	send_req(fd, 0, ZL_NBD_CMD_READ, 12, 0, 512, NULL);
	assert_int_equal(recv_reply(fd, &cookie), ZL_NBD_EIO); /* no data follows an error */
	send_req(fd, 0, ZL_NBD_CMD_READ, 13, 0, 4, NULL);
	assert_int_equal(recv_reply(fd, &cookie), 0);
	assert_int_equal(cookie, 13);
	rd(fd, r, 4);

	send_req(fd, 0, ZL_NBD_CMD_DISC, 14, 0, 0, NULL);
	assert_int_equal(recv(fd, r, 1, 0), 0); /* server closes */
	close(fd);
	fx_stop(&f);
	free(w);
	free(r);
}

/* Many pipelined requests with 2 slots per connection and a backend that
 * takes 3 at a time: the server must pause reading, retry BUSY and answer
 * each exactly once, possibly out of order, over two connections. */
struct pipe_writer {
	int fd, c, n, bs;
	int failed;
};

/* Sends all requests of one connection; replies are read concurrently by
 * the test thread, as a real client does (not reading replies while the
 * server throttles reading would deadlock any client). */
static void *pipe_writer_thread(void *arg)
{
	struct pipe_writer *w = arg;
	uint8_t *buf = malloc((size_t)w->bs), b[28];

	for (int i = 0; i < w->n && buf; i++) {
		uint64_t off = ((uint64_t)w->c * (uint64_t)w->n + (uint64_t)i) * (uint64_t)w->bs;

		memset(buf, (uint8_t)(i + w->c), (size_t)w->bs);
		put32(b, ZL_NBD_REQUEST_MAGIC);
		put16(b + 4, 0);
		put16(b + 6, ZL_NBD_CMD_WRITE);
		put64(b + 8, (uint64_t)i);
		put64(b + 16, off);
		put32(b + 24, (uint32_t)w->bs);
		if (send(w->fd, b, sizeof(b), MSG_NOSIGNAL) != (ssize_t)sizeof(b) ||
		    send(w->fd, buf, (size_t)w->bs, MSG_NOSIGNAL) != (ssize_t)w->bs) {
			w->failed = 1;
			break;
		}
	}
	if (!buf)
		w->failed = 1;
	free(buf);
	return NULL;
}

static void test_pipelined_backpressure(void **state)
{
	enum { N = 400, BS = 4096 };
	struct fixture f;
	struct pipe_writer w[2];
	pthread_t thr[2];
	uint64_t size, cookie;
	static uint8_t seen[2][N];
	int fds[2], c, i, k;

	(void)state;
	fx_start(&f, 2, 3, "vol1");
	f.mem.hold = true; /* no I/O has reached the backend yet */
	/* A wrong export name is refused with ERR_UNKNOWN. */
	assert_int_equal(handshake(f.path, "other", &size), -6);
	for (c = 0; c < 2; c++) {
		fds[c] = handshake(f.path, "vol1", &size);
		assert_true(fds[c] >= 0);
	}
	memset(seen, 0, sizeof(seen));
	for (c = 0; c < 2; c++) {
		w[c] = (struct pipe_writer){.fd = fds[c], .c = c, .n = N, .bs = BS};
		assert_int_equal(pthread_create(&thr[c], NULL, pipe_writer_thread, &w[c]), 0);
	}
	for (c = 0; c < 2; c++) {
		for (k = 0; k < N; k++) {
			assert_int_equal(recv_reply(fds[c], &cookie), 0);
			assert_true(cookie < N);
			assert_int_equal(seen[c][cookie], 0);
			seen[c][cookie] = 1;
		}
	}
	for (c = 0; c < 2; c++) {
		pthread_join(thr[c], NULL);
		assert_int_equal(w[c].failed, 0);
	}
	for (c = 0; c < 2; c++)
		for (i = 0; i < N; i++)
			assert_int_equal(f.mem.data[((size_t)c * N + (size_t)i) * BS + 7],
					 (uint8_t)(i + c));
	assert_true(f.mem.busy > 0);
	close(fds[0]);
	close(fds[1]);
	fx_stop(&f);
}

/* Garbage instead of the client flags, and a bad request magic: the server
 * closes the connection and keeps serving others. */
static void test_protocol_violations(void **state)
{
	struct fixture f;
	uint8_t g[18], junk[28] = {0}, b;
	uint64_t size;
	int fd;

	(void)state;
	fx_start(&f, 4, 64, "");
	fd = connect_unix(f.path);
	rd(fd, g, 18);
	wr(fd, "\xff\xff\xff\xff", 4);
	assert_int_equal(recv(fd, &b, 1, 0), 0);
	close(fd);

	fd = handshake(f.path, "", &size);
	wr(fd, junk, sizeof(junk));
	assert_int_equal(recv(fd, &b, 1, 0), 0);
	close(fd);

	/* Option with bad magic. */
	fd = connect_unix(f.path);
	rd(fd, g, 18);
	wr(fd, "\0\0\0\3", 4);
	wr(fd, junk, 16);
	assert_int_equal(recv(fd, &b, 1, 0), 0);
	close(fd);

	fd = handshake(f.path, "", &size);
	assert_true(fd >= 0);
	close(fd);
	fx_stop(&f);
}

/* TCP listener on an ephemeral port; the connection limit refuses the
 * third client while two are open. */
static void test_tcp_and_conn_limit(void **state)
{
	struct fixture f;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	const char *addr;
	uint64_t size, cookie;
	uint8_t b;
	int fds[3], i;

	(void)state;
	fx_start_at(&f, 4, 64, "", "127.0.0.1:0", 2);
	addr = zl_nbd_server_address(f.srv);
	assert_non_null(strchr(addr, ':'));
	sa.sin_port = htons((uint16_t)atoi(strchr(addr, ':') + 1));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(ntohs(sa.sin_port) > 0);
	for (i = 0; i < 3; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		if (i < 2) {
			assert_true(handshake_fd(fds[i], "", &size) >= 0);
			assert_int_equal(size, MEM_SIZE);
		}
	}
	assert_int_equal(recv(fds[2], &b, 1, 0), 0); /* refused: closed at once */
	send_req(fds[1], 0, ZL_NBD_CMD_READ, 77, 0, 16, NULL);
	assert_int_equal(recv_reply(fds[1], &cookie), 0);
	assert_int_equal(cookie, 77);
	{
		uint8_t d[16];

		rd(fds[1], d, sizeof(d));
	}
	for (i = 0; i < 3; i++)
		close(fds[i]);
	fx_stop(&f);
}

/* A unix path that is not a socket is never removed; bad addresses fail. */
static void test_listen_errors(void **state)
{
	struct zl_loop *loop;
	struct mem_be m = {0};
	struct zl_nbd_backend be = {.ops = &mem_ops, .ctx = &m, .size = 4096};
	struct zl_nbd_server_opts o = {0};
	struct zl_nbd_server *srv = NULL;
	char path[64], spec[80];
	FILE *fp;

	(void)state;
	assert_int_equal(zl_loop_create(&loop), 0);
	snprintf(path, sizeof(path), "/tmp/zl-nbd-file-%d", (int)getpid());
	fp = fopen(path, "w");
	assert_non_null(fp);
	fclose(fp);
	snprintf(spec, sizeof(spec), "unix:%s", path);
	o.listen = spec;
	assert_int_equal(zl_nbd_server_create(loop, &be, &o, &srv), -EEXIST);
	assert_int_equal(access(path, F_OK), 0);
	unlink(path);
	o.listen = "no-port-here";
	assert_int_equal(zl_nbd_server_create(loop, &be, &o, &srv), -ZL_ERR_INVAL);
	o.listen = "unix:";
	assert_int_equal(zl_nbd_server_create(loop, &be, &o, &srv), -ZL_ERR_INVAL);
	assert_null(srv);
	zl_loop_destroy(loop);
}

static int run_tool(char *const argv[], const char *out_path)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (out_path) {
			FILE *o = freopen(out_path, "w", stdout);

			(void)o;
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_libnbd_tools(void **state)
{
	struct fixture f;
	char uri[200], in[64], out[64], info[64];
	uint8_t *a, *b;
	FILE *fp;
	int i;

	(void)state;
	if (access("/usr/bin/nbdcopy", X_OK) || access("/usr/bin/nbdinfo", X_OK))
		fail_msg("nbdcopy/nbdinfo missing: install libnbd-bin (scripts/install-deps.sh); "
			 "this test fails rather than skips");
	fx_start(&f, 8, 64, "");
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", f.path);
	snprintf(in, sizeof(in), "/tmp/zl-nbd-in-%d", (int)getpid());
	snprintf(out, sizeof(out), "/tmp/zl-nbd-out-%d", (int)getpid());
	snprintf(info, sizeof(info), "/tmp/zl-nbd-info-%d", (int)getpid());
	a = malloc(MEM_SIZE);
	b = malloc(MEM_SIZE);
	srandom(7);
	for (i = 0; i < (int)MEM_SIZE; i++)
		a[i] = (uint8_t)random();
	fp = fopen(in, "w");
	assert_int_equal(fwrite(a, 1, MEM_SIZE, fp), MEM_SIZE);
	fclose(fp);

	{
		char *argv[] = {"nbdinfo", "--size", uri, NULL};

		assert_int_equal(run_tool(argv, info), 0);
		fp = fopen(info, "r");
		assert_int_equal(fscanf(fp, "%d", &i), 1);
		fclose(fp);
		assert_int_equal(i, MEM_SIZE);
	}
	{
		char *argv[] = {"nbdcopy", in, uri, NULL};

		assert_int_equal(run_tool(argv, NULL), 0);
	}
	assert_memory_equal(f.mem.data, a, MEM_SIZE);
	{
		char *argv[] = {"nbdcopy", "--connections=4", "--requests=16", uri, out, NULL};

		assert_int_equal(run_tool(argv, NULL), 0);
	}
	fp = fopen(out, "r");
	assert_int_equal(fread(b, 1, MEM_SIZE, fp), MEM_SIZE);
	fclose(fp);
	assert_memory_equal(a, b, MEM_SIZE);
	unlink(in);
	unlink(out);
	unlink(info);
	free(a);
	free(b);
	fx_stop(&f);
}

/* A socket handed over already connected (the kernel's nbd driver after a
 * netlink NBD_CMD_CONNECT): no listener, no greeting, requests at once. */
static void test_adopted_socket(void **state)
{
	struct zl_nbd_backend be;
	struct zl_nbd_server_opts o = {.max_inflight = 4, .slot_buf = 64 << 10};
	struct fixture f;
	uint8_t w[8192], r[8192];
	uint64_t cookie;
	int sv[2], i;

	(void)state;
	memset(&f, 0, sizeof(f));
	assert_int_equal(zl_loop_create(&f.loop), 0);
	f.mem.loop = f.loop;
	f.mem.cap = 64;
	f.mem.data = calloc(1, MEM_SIZE);
	assert_non_null(f.mem.data);
	/* Served at half the memory first: the kernel's device grows later. */
	be = (struct zl_nbd_backend){.ops = &mem_ops, .ctx = &f.mem, .size = MEM_SIZE / 2};
	assert_int_equal(zl_nbd_server_create(f.loop, &be, &o, &f.srv), 0);
	assert_string_equal(zl_nbd_server_address(f.srv), "adopted");
	assert_int_equal(zl_nbd_server_tflags(f.srv) &
			     (ZL_NBD_TFLAG_HAS_FLAGS | ZL_NBD_TFLAG_SEND_FLUSH |
			      ZL_NBD_TFLAG_SEND_FUA | ZL_NBD_TFLAG_SEND_TRIM |
			      ZL_NBD_TFLAG_SEND_WRITE_ZEROES),
			 ZL_NBD_TFLAG_HAS_FLAGS | ZL_NBD_TFLAG_SEND_FLUSH | ZL_NBD_TFLAG_SEND_FUA |
			     ZL_NBD_TFLAG_SEND_TRIM | ZL_NBD_TFLAG_SEND_WRITE_ZEROES);
	assert_int_equal(zl_nbd_server_adopt(f.srv, -1, "bad"), -ZL_ERR_INVAL);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(zl_nbd_server_adopt(f.srv, sv[0], "kernel#0"), 0);
	/* Beyond the export's end: EINVAL, the connection stays. Then the
	 * export grows (zl_nbd_server_set_size, on the loop's thread: the
	 * loop runs here until the thread starts). */
	send_req(sv[1], 0, ZL_NBD_CMD_READ, 70, MEM_SIZE / 2, 4096, NULL);
	for (i = 0; i < 500; i++) {
		struct pollfd pf = {.fd = sv[1], .events = POLLIN};

		zl_loop_run_once(f.loop, 10);
		if (poll(&pf, 1, 0) == 1)
			break;
	}
	assert_int_equal(recv_reply(sv[1], &cookie), ZL_NBD_EINVAL);
	assert_int_equal(cookie, 70);
	zl_nbd_server_set_size(f.srv, MEM_SIZE);
	assert_int_equal(pthread_create(&f.thr, NULL, loop_thread, f.loop), 0);
	memset(f.mem.data + MEM_SIZE / 2, 0x5a, 4096);
	send_req(sv[1], 0, ZL_NBD_CMD_READ, 71, MEM_SIZE / 2, 4096, NULL);
	assert_int_equal(recv_reply(sv[1], &cookie), 0);
	assert_int_equal(cookie, 71);
	rd(sv[1], r, 4096);
	assert_memory_equal(r, f.mem.data + MEM_SIZE / 2, 4096);
	for (i = 0; i < (int)sizeof(w); i++)
		w[i] = (uint8_t)(i * 13 + 1);
	/* The first bytes the server sees are a request: no greeting came. */
	send_req(sv[1], 0, ZL_NBD_CMD_WRITE, 77, 4096, sizeof(w), w);
	assert_int_equal(recv_reply(sv[1], &cookie), 0);
	assert_int_equal(cookie, 77);
	assert_memory_equal(f.mem.data + 4096, w, sizeof(w));
	send_req(sv[1], 0, ZL_NBD_CMD_READ, 78, 4096, sizeof(r), NULL);
	assert_int_equal(recv_reply(sv[1], &cookie), 0);
	assert_int_equal(cookie, 78);
	rd(sv[1], r, sizeof(r));
	assert_memory_equal(r, w, sizeof(r));
	/* A handshake on an adopted socket is garbage: the connection closes. */
	{
		uint8_t opt[28] = "IHAVEOPT";

		wr(sv[1], opt, sizeof(opt));
		assert_int_equal(recv(sv[1], r, 1, 0), 0);
	}
	close(sv[1]);
	zl_loop_stop(f.loop);
	zl_loop_wake(f.loop);
	pthread_join(f.thr, NULL);
	for (i = 0; i < 1000 && !zl_nbd_server_idle(f.srv); i++)
		zl_loop_run_once(f.loop, 10);
	assert_true(zl_nbd_server_idle(f.srv));
	zl_nbd_server_shutdown(f.srv);
	assert_int_equal(zl_nbd_server_adopt(f.srv, sv[1], "late"), -ZL_ERR_INVAL);
	zl_nbd_server_destroy(f.srv);
	assert_int_equal(f.mem.bufs, 0);
	zl_loop_destroy(f.loop);
	free(f.mem.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_handshake_and_io),
	    cmocka_unit_test(test_pipelined_backpressure),
	    cmocka_unit_test(test_protocol_violations),
	    cmocka_unit_test(test_tcp_and_conn_limit),
	    cmocka_unit_test(test_listen_errors),
	    cmocka_unit_test(test_adopted_socket),
	    cmocka_unit_test(test_libnbd_tools),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
