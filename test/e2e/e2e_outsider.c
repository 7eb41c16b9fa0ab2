/* e2e_outsider: an outsider that speaks the wire protocol by hand over one
 * plain TCP socket (headers from lib/wire's encoders only; no lib/client,
 * no lib/transport), the adversary of the data-path security contract
 * (docs/SECURITY.md, issue 11):
 *
 *   e2e_outsider HOST PORT [SETTING | STEP]...
 *
 * With ZL_OUTSIDER_TRANSPORT=rdma the same hand-made headers travel over one
 * connection of the project's RDMA transport instead (lib/transport: it
 * fills req_id, payload_len and payload_crc and moves READ data and large
 * WRITE data by RDMA; every other header field is the outsider's), so the
 * RDMA listener of a daemon gets the same attacks (test/rdma/security_rdma.sh).
 *
 * Settings apply to the steps after them:
 *   --vol ID       vol-<16 hex> or 0 (cluster HELLO)   --epoch E   decimal or "max"
 *   --node N       HELLO node_id                        --token T   HELLO token
 *   --cluster / --no-cluster   HELLO caps bit ZL_WIRE_CAP_CLUSTER
 *   --chunk C  --off O  --len L  --sv SLICE_VER  --aux A
 *   --any / --no-any   ZL_WF_ANY on reads          --fill BYTE   data of writes
 *   --out FILE     where `read` stores its data    --wait MS     reply wait (10000)
 * Steps (one request each, in order, on the same connection):
 *   hello read write discard write-zeroes repl-write chunk-push
 *   chunk-versions chunk-delete volume-delete ping
 * A request "sent before any HELLO" is a step not preceded by `hello`.
 *
 * Prints one line per step: "<step> <status>" where status is OK, the
 * ZL_ERR name of the reply (zl_errname), CLOSED (the daemon closed the
 * connection without answering; the steps after it are not sent) or NONE
 * (no answer within the wait); `read` adds " bytes=N", `hello` " node=ID".
 * Exit 0 when every step got its line, 1 on a transport error (connect,
 * a malformed reply), 2 on bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/transport/transport.h"
#include "lib/wire/wire.h"

#include "e2e_sock.h"

#ifndef ZL_WIRE_CAP_RDMA
#define ZL_WIRE_CAP_RDMA (1u << 1)
#endif

#define OUT_CLOSED 1 /* step result: the daemon closed the connection */
#define OUT_NONE 2   /* step result: no answer within the wait */

struct outsider {
	int fd;
	/* ZL_OUTSIDER_TRANSPORT=rdma: the transport carries the frames; connected
	 * at the first step (the settings before it give the reply wait). */
	bool rdma;
	const char *host, *port;
	struct zl_loop *loop;
	struct zl_xport *x;
	struct zl_xport_conn *conn;
	bool xclosed;
	bool closed;
	uint64_t req_id;
	/* settings */
	uint64_t vol, epoch, chunk, sv, aux;
	uint32_t off, len, wait_ms;
	bool cluster, any;
	int fill;
	const char *node, *token, *out;
	uint8_t *buf; /* ZL_WIRE_MAX_IO bytes: write data and read replies */
};

/* 0, or OUT_CLOSED when the peer is gone. */
static int outsider_send(struct outsider *o, const uint8_t *p, size_t n)
{
	return e2e_sock_send(o->fd, p, n) ? OUT_CLOSED : 0;
}

/* 0, OUT_CLOSED (EOF or reset) or OUT_NONE (receive timeout). */
static int outsider_recv(struct outsider *o, uint8_t *p, size_t n)
{
	int rc = e2e_sock_recv(o->fd, p, n);

	return rc == E2E_SOCK_TIMEOUT ? OUT_NONE : rc ? OUT_CLOSED : 0;
}

struct outsider_wait {
	bool done;
	int status;
	struct zl_wire_hdr *rep;
};

static void outsider_xclose(void *arg, struct zl_xport_conn *c, int reason)
{
	(void)c;
	(void)reason;
	*(bool *)arg = true;
}

static void outsider_xreply(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct outsider_wait *w = arg;

	w->done = true;
	w->status = status;
	if (rep)
		*w->rep = *rep;
}

/* RDMA: the transport, its pool buffer o->buf, one connection. 0 or -1. */
static int outsider_xconnect(struct outsider *o)
{
	/* One request at a time: 4 slots (and memory windows) are plenty. */
	struct zl_xport_opts xo = {.kind = ZL_XPORT_RDMA, .max_inflight = 4,
				   .timeout_ms = o->wait_ms, .pool_bytes = 8u << 20};
	int rc = zl_loop_create(&o->loop);

	if (!rc)
		rc = zl_xport_create(o->loop, &xo, &o->x);
	if (!rc) {
		o->buf = zl_xport_buf_alloc(o->x, ZL_WIRE_MAX_IO);
		rc = o->buf ? 0 : -ENOMEM;
	}
	if (!rc)
		rc = zl_xport_connect(o->x, o->host, (uint16_t)atoi(o->port), (int)o->wait_ms,
				      outsider_xclose, &o->xclosed, &o->conn);
	if (rc) {
		fprintf(stderr, "e2e_outsider: rdma connect %s:%s failed: %s\n", o->host, o->port,
			zl_strerror(rc));
		return -1;
	}
	return 0;
}

/* The RDMA variant of outsider_call: same results. */
static int outsider_xcall(struct outsider *o, struct zl_wire_hdr *h, const uint8_t *pl,
			  uint32_t plen, struct zl_wire_hdr *rep)
{
	struct outsider_wait w = {.rep = rep};
	int rc;

	if (o->xclosed)
		return OUT_CLOSED;
	h->version = ZL_WIRE_VERSION;
	if (pl != o->buf && plen)
		memcpy(o->buf, pl, plen);
	/* The reply data (READ, HELLO, ...) lands in o->buf too: the request
	 * payload has been sent by then. */
	rc = zl_xport_request(o->conn, h, plen ? o->buf : NULL, plen, o->buf, ZL_WIRE_MAX_IO,
			      outsider_xreply, &w);
	if (rc == -ZL_ERR_CONN)
		return OUT_CLOSED;
	if (rc) {
		fprintf(stderr, "e2e_outsider: the transport refused to send %s: %s\n",
			zl_wire_op_name(h->opcode), zl_errname(rc));
		return -1;
	}
	while (!w.done)
		zl_loop_run_once(o->loop, 100);
	if (w.status == -ZL_ERR_CONN)
		return OUT_CLOSED;
	if (w.status == -ZL_ERR_TIMEOUT)
		return OUT_NONE;
	if (w.status) {
		fprintf(stderr, "e2e_outsider: reply to %s: transport error %s\n",
			zl_wire_op_name(h->opcode), zl_errname(w.status));
		return -1;
	}
	if (rep->opcode != h->opcode) {
		fprintf(stderr, "e2e_outsider: malformed reply to %s: other opcode\n",
			zl_wire_op_name(h->opcode));
		return -1;
	}
	return 0;
}

/* Sends h with payload pl (plen bytes) and reads its reply into rep (the
 * reply's payload into o->buf). 0 with *rep filled, OUT_CLOSED, OUT_NONE,
 * or -1 on a malformed reply (said on stderr). */
static int outsider_call(struct outsider *o, struct zl_wire_hdr *h, const uint8_t *pl,
			 uint32_t plen, struct zl_wire_hdr *rep)
{
	uint8_t raw[ZL_WIRE_HDR_SIZE];
	const char *why = NULL;
	int rc;

	if (o->rdma)
		return outsider_xcall(o, h, pl, plen, rep);

	h->version = ZL_WIRE_VERSION;
	h->req_id = ++o->req_id;
	h->payload_len = plen;
	h->payload_crc = plen ? zl_crc32c(pl, plen) : 0;
	zl_wire_encode(h, raw);
	rc = outsider_send(o, raw, sizeof(raw));
	if (!rc && plen)
		rc = outsider_send(o, pl, plen);
	if (!rc)
		rc = outsider_recv(o, raw, sizeof(raw));
	if (rc)
		return rc;
	if (zl_wire_decode(raw, sizeof(raw), rep, &why) || !(rep->flags & ZL_WF_REPLY) ||
	    rep->req_id != h->req_id || rep->opcode != h->opcode) {
		fprintf(stderr, "e2e_outsider: malformed reply to %s: %s\n",
			zl_wire_op_name(h->opcode), why ? why : "not the reply to this request");
		return -1;
	}
	rc = outsider_recv(o, o->buf, rep->payload_len);
	if (rc)
		return rc;
	if (rep->payload_len && zl_crc32c(o->buf, rep->payload_len) != rep->payload_crc) {
		fprintf(stderr, "e2e_outsider: reply to %s: payload CRC mismatch\n",
			zl_wire_op_name(h->opcode));
		return -1;
	}
	return 0;
}

static const struct {
	const char *name;
	int op;
} outsider_steps[] = {
    {"hello", ZL_OP_HELLO},
    {"read", ZL_OP_READ},
    {"write", ZL_OP_WRITE},
    {"discard", ZL_OP_DISCARD},
    {"write-zeroes", ZL_OP_WRITE_ZEROES},
    {"repl-write", ZL_OP_REPL_WRITE},
    {"chunk-push", ZL_OP_CHUNK_PUSH},
    {"chunk-versions", ZL_OP_CHUNK_VERSIONS},
    {"chunk-delete", ZL_OP_CHUNK_DELETE},
    {"volume-delete", ZL_OP_VOLUME_DELETE},
    {"ping", ZL_OP_PING},
};

/* Builds the request of step op from the settings; returns its payload length. */
static uint32_t outsider_build(struct outsider *o, int op, struct zl_wire_hdr *h)
{
	struct zl_wire_hello hl;

	memset(h, 0, sizeof(*h));
	h->opcode = (uint8_t)op;
	h->vol_id = o->vol;
	h->epoch = o->epoch;
	h->slice_ver = o->sv;
	switch (op) {
	case ZL_OP_HELLO:
		memset(&hl, 0, sizeof(hl));
		hl.proto_version = ZL_WIRE_VERSION;
		hl.caps = (o->rdma ? ZL_WIRE_CAP_RDMA : ZL_WIRE_CAP_TCP) |
			  (o->cluster ? ZL_WIRE_CAP_CLUSTER : 0);
		snprintf(hl.node_id, sizeof(hl.node_id), "%s", o->node);
		snprintf(hl.token, sizeof(hl.token), "%s", o->token);
		zl_wire_hello_encode(&hl, o->buf);
		h->slice_ver = 0;
		return ZL_WIRE_HELLO_SIZE;
	case ZL_OP_PING:
		h->vol_id = 0;
		return 0;
	case ZL_OP_VOLUME_DELETE:
		return 0;
	case ZL_OP_CHUNK_DELETE:
	case ZL_OP_CHUNK_VERSIONS:
		h->chunk = o->chunk;
		return 0;
	default:
		break;
	}
	h->chunk = o->chunk;
	h->offset = o->off;
	h->length = o->len;
	if (op == ZL_OP_READ) {
		h->flags = o->any ? ZL_WF_ANY : 0;
		return 0;
	}
	if (op == ZL_OP_DISCARD || op == ZL_OP_WRITE_ZEROES)
		return 0;
	if (op == ZL_OP_REPL_WRITE) {
		/* A backup's copy of a WRITE with a data version of a later term. */
		h->flags = ZL_WF_DVER;
		h->subop = ZL_OP_WRITE;
		h->aux = o->aux ? o->aux : zl_wire_dver_make(0xfffffff0u, 1);
	} else if (op == ZL_OP_CHUNK_PUSH) {
		/* Replace the member's copy whatever its version. */
		h->subop = ZL_PUSH_REPLACE;
		h->aux = o->aux ? o->aux : zl_wire_dver_make(0xfffffff0u, 1);
	}
	memset(o->buf, o->fill, o->len);
	return o->len;
}

/* Runs one step and prints its line. 0, or -1 on a transport error. */
static int outsider_step(struct outsider *o, const char *name, int op)
{
	struct zl_wire_hdr h, rep;
	struct zl_wire_hello hl;
	uint32_t plen;
	int rc, err;

	if (o->closed) {
		printf("%s CLOSED\n", name);
		return 0;
	}
	if (o->rdma && !o->conn && outsider_xconnect(o))
		return -1; /* o->buf (a pool buffer) exists from here on */
	plen = outsider_build(o, op, &h);
	rc = outsider_call(o, &h, o->buf, plen, &rep);
	if (rc < 0)
		return -1;
	if (rc == OUT_CLOSED || rc == OUT_NONE) {
		printf("%s %s\n", name, rc == OUT_CLOSED ? "CLOSED" : "NONE");
		o->closed = true; /* a late reply would be taken for the next step's */
		return 0;
	}
	err = zl_wire_status_to_err(rep.status);
	printf("%s %s", name, err ? zl_errname(err) : "OK");
	if (!err && op == ZL_OP_READ) {
		printf(" bytes=%" PRIu32, rep.payload_len);
		if (o->out) {
			FILE *f = fopen(o->out, "wb");

			if (!f || fwrite(o->buf, 1, rep.payload_len, f) != rep.payload_len) {
				fprintf(stderr, "e2e_outsider: cannot write '%s': %s\n", o->out,
					strerror(errno));
				if (f)
					fclose(f);
				return -1;
			}
			fclose(f);
		}
	}
	if (!err && op == ZL_OP_HELLO && !zl_wire_hello_decode(o->buf, rep.payload_len, &hl))
		printf(" node=%s", hl.node_id);
	printf("\n");
	return 0;
}

static int outsider_usage(void)
{
	fprintf(stderr, "usage: e2e_outsider HOST PORT [SETTING | STEP]...\n"
			"  settings: --vol ID|0 --epoch E|max --node N --token T --cluster "
			"--no-cluster\n"
			"            --chunk C --off O --len L --sv V --aux A --any --no-any "
			"--fill BYTE\n"
			"            --out FILE --wait MS\n"
			"  steps: hello read write discard write-zeroes repl-write chunk-push\n"
			"         chunk-versions chunk-delete volume-delete ping\n");
	return 2;
}

/* Parses the value of setting `flag`; false (said on stderr) when bad. */
static bool outsider_num(const char *flag, const char *s, uint64_t max, uint64_t *out)
{
	char *end;

	errno = 0;
	if (!strcmp(s, "max")) {
		*out = max;
		return true;
	}
	*out = strtoull(s, &end, 0);
	if (errno || !*s || *end || *s == '-' || *out > max) {
		fprintf(stderr, "e2e_outsider: %s wants a number up to %" PRIu64 ", got '%s'\n",
			flag, max, s);
		return false;
	}
	return true;
}

/* Applies setting argv[*i] (and its value); false on bad usage. */
static bool outsider_setting(struct outsider *o, int argc, char **argv, int *i)
{
	const char *f = argv[*i], *v;
	uint64_t n;

	if (!strcmp(f, "--cluster") || !strcmp(f, "--no-cluster")) {
		o->cluster = f[2] == 'c';
		return true;
	}
	if (!strcmp(f, "--any") || !strcmp(f, "--no-any")) {
		o->any = f[2] == 'a';
		return true;
	}
	if (*i + 1 >= argc) {
		fprintf(stderr, "e2e_outsider: %s needs a value\n", f);
		return false;
	}
	v = argv[++*i];
	if (!strcmp(f, "--vol")) {
		if (!strcmp(v, "0")) {
			o->vol = 0;
			return true;
		}
		if (zl_vol_id_parse(v, &o->vol)) {
			fprintf(stderr, "e2e_outsider: bad volume id '%s' (vol-<16 hex> or 0)\n", v);
			return false;
		}
		return true;
	}
	if (!strcmp(f, "--node") || !strcmp(f, "--token") || !strcmp(f, "--out")) {
		if (f[2] == 'n')
			o->node = v;
		else if (f[2] == 't')
			o->token = v;
		else
			o->out = v;
		return true;
	}
	if (!strcmp(f, "--epoch"))
		return outsider_num(f, v, UINT64_MAX, &o->epoch);
	if (!strcmp(f, "--chunk"))
		return outsider_num(f, v, UINT64_MAX, &o->chunk);
	if (!strcmp(f, "--sv"))
		return outsider_num(f, v, UINT64_MAX, &o->sv);
	if (!strcmp(f, "--aux"))
		return outsider_num(f, v, UINT64_MAX, &o->aux);
	if (!outsider_num(f, v, UINT32_MAX, &n))
		return false;
	if (!strcmp(f, "--off"))
		o->off = (uint32_t)n;
	else if (!strcmp(f, "--len") && n <= ZL_WIRE_MAX_IO)
		o->len = (uint32_t)n;
	else if (!strcmp(f, "--fill") && n <= 0xff)
		o->fill = (int)n;
	else if (!strcmp(f, "--wait"))
		o->wait_ms = (uint32_t)n;
	else {
		fprintf(stderr, "e2e_outsider: unknown setting or value out of range: %s %s\n", f,
			v);
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	struct outsider o = {.fd = -1, .node = "", .token = "", .len = 4096, .fill = 0x5a,
			     .wait_ms = 10000};
	const char *xp = getenv("ZL_OUTSIDER_TRANSPORT");
	struct timeval tv;
	int ret = 1;

	if (argc < 4)
		return outsider_usage();
	o.host = argv[1];
	o.port = argv[2];
	if (xp && strcmp(xp, "tcp")) {
		if (strcmp(xp, "rdma")) {
			fprintf(stderr, "e2e_outsider: ZL_OUTSIDER_TRANSPORT is tcp or rdma, not '%s'\n",
				xp);
			return 2;
		}
		o.rdma = true;
		zl_log_init("e2e_outsider");
	} else {
		o.buf = malloc(ZL_WIRE_MAX_IO);
		if (!o.buf) {
			fprintf(stderr, "e2e_outsider: out of memory\n");
			return 1;
		}
		o.fd = e2e_sock_connect("e2e_outsider", argv[1], argv[2]);
		if (o.fd < 0)
			goto out;
	}
	for (int i = 3; i < argc; i++) {
		if (!strncmp(argv[i], "--", 2)) {
			if (!outsider_setting(&o, argc, argv, &i)) {
				ret = outsider_usage();
				goto out;
			}
			continue;
		}
		tv.tv_sec = o.wait_ms / 1000;
		tv.tv_usec = (o.wait_ms % 1000) * 1000;
		if (!o.rdma)
			setsockopt(o.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		size_t k = 0;

		while (k < ZL_ARRAY_SIZE(outsider_steps) && strcmp(argv[i], outsider_steps[k].name))
			k++;
		if (k == ZL_ARRAY_SIZE(outsider_steps)) {
			fprintf(stderr, "e2e_outsider: unknown step '%s'\n", argv[i]);
			ret = outsider_usage();
			goto out;
		}
		if (outsider_step(&o, outsider_steps[k].name, outsider_steps[k].op))
			goto out;
		fflush(stdout);
	}
	ret = 0;
out:
	if (o.fd >= 0)
		close(o.fd);
	if (o.rdma) {
		if (o.conn) {
			zl_xport_conn_close(o.conn);
			zl_xport_conn_put(o.conn);
		}
		if (o.buf)
			zl_xport_buf_free(o.x, o.buf);
		zl_xport_destroy(o.x);
		if (o.loop)
			zl_loop_destroy(o.loop);
	} else {
		free(o.buf);
	}
	return ret;
}
