/* e2e_order: two overlapping forwarded writes of one chunk whose payloads
 * reach a backup out of their version order, as a primary's would when an
 * RDMA read lags behind an inline payload (REPLICATION.md §1):
 *
 *   e2e_order HOST PORT VOL SLICE_VER CHUNK VERSION
 *
 * Acting as the chunk's primary (cluster credentials, e2e_cred.h) towards
 * the backup at HOST PORT (a non-primary member of the chunk's row at
 * SLICE_VER), on two connections:
 *   A: REPL_WRITE version VERSION, 64 KiB at 0, every byte 0xA1; its header
 *      and the first half of its payload go out, the rest is held back;
 *   B: REPL_WRITE version VERSION + 1, 64 KiB at 32 KiB, every byte 0xB2,
 *      sent whole on the second connection;
 * then (B answered or not within 1 s) the rest of A's payload, both
 * answers, and a READ (ZL_WF_ANY) of [0, 96 KiB) of the backup's copy.
 * Prints "ORDER: a=<status> b=<status> b_first=<0|1> overlap=<A|B|mixed>
 * version=<hex>". A backup applying in version order ends with B's data in
 * [32 KiB, 64 KiB) and version VERSION + 1, whether A waited for it (both
 * OK) or came too late (A answered CONFLICT). Exit 0 exactly then; 1
 * otherwise (or on a local failure, with the reason). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"
#include "e2e_cred.h"
#include "e2e_sock.h"

#define ORD_LEN	 (64u << 10)
#define ORD_HALF (ORD_LEN / 2)
#define ORD_READ (ORD_HALF * 3)

static uint64_t req_id;

/* Sends header h (its payload: pl, plen bytes, of which only the first
 * send bytes now). 0 or E2E_SOCK_CLOSED. */
static int ord_send(int fd, struct zl_wire_hdr *h, const uint8_t *pl, uint32_t plen,
		    uint32_t send)
{
	uint8_t raw[ZL_WIRE_HDR_SIZE];

	h->version = ZL_WIRE_VERSION;
	h->req_id = ++req_id;
	h->payload_len = plen;
	h->payload_crc = plen ? zl_crc32c(pl, plen) : 0;
	zl_wire_encode(h, raw);
	if (e2e_sock_send(fd, raw, sizeof(raw)))
		return E2E_SOCK_CLOSED;
	return send ? e2e_sock_send(fd, pl, send) : 0;
}

/* Receives one reply (its payload into buf, at most cap bytes): 0 with the
 * status in *err, E2E_SOCK_CLOSED, E2E_SOCK_TIMEOUT, or -1 (malformed). */
static int ord_reply(int fd, uint8_t *buf, uint32_t cap, struct zl_wire_hdr *rep, int *err)
{
	uint8_t raw[ZL_WIRE_HDR_SIZE];
	const char *why = NULL;
	int rc = e2e_sock_recv(fd, raw, sizeof(raw));

	if (rc)
		return rc;
	if (zl_wire_decode(raw, sizeof(raw), rep, &why) || !(rep->flags & ZL_WF_REPLY) ||
	    rep->payload_len > cap) {
		fprintf(stderr, "e2e_order: malformed reply: %s\n", why ? why : "not a reply");
		return -1;
	}
	rc = rep->payload_len ? e2e_sock_recv(fd, buf, rep->payload_len) : 0;
	*err = zl_wire_status_to_err(rep->status);
	return rc;
}

static void ord_timeout(int fd, unsigned int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* A connection that passed a HELLO with the cluster credentials; -1 after
 * saying why. */
static int ord_connect(const char *host, const char *port)
{
	char tok[ZL_AUTH_TOKEN_HEX + 1];
	const char *self = "e2e-order";
	struct zl_xport_cred cred;
	uint8_t hello[ZL_WIRE_HELLO_SIZE];
	struct zl_wire_hdr h = {.opcode = ZL_OP_HELLO}, rep;
	int fd, err = 0;

	if (e2e_cred(&self, tok, &cred))
		return -1;
	fd = e2e_sock_connect("e2e_order", host, port);
	if (fd < 0)
		return -1;
	ord_timeout(fd, 10000);
	zl_xport_hello_encode(hello, self, ZL_WIRE_CAP_TCP | (cred.cluster ? ZL_WIRE_CAP_CLUSTER : 0),
			      cred.token);
	if (ord_send(fd, &h, hello, sizeof(hello), sizeof(hello)) ||
	    ord_reply(fd, hello, sizeof(hello), &rep, &err) || err) {
		fprintf(stderr, "e2e_order: HELLO to %s:%s failed: %s\n", host, port,
			err ? zl_errname(err) : "no answer");
		close(fd);
		return -1;
	}
	return fd;
}

static const char *ord_status(bool done, int err)
{
	return !done ? "none" : err ? zl_errname(err) : "OK";
}

int main(int argc, char **argv)
{
	static uint8_t a[ORD_LEN], b[ORD_LEN], rd[ORD_READ];
	struct zl_wire_hdr ha = {0}, hb, hr, rep;
	int fa = -1, fb = -1, ea = 0, eb = 0, er = 0, rc, ret = 1;
	bool a_done = false, b_done = false, b_first = false;
	const char *overlap = "mixed";
	uint64_t ver;
	char *end;

	if (argc != 7 || strncmp(argv[3], "vol-", 4) || strlen(argv[3]) != 20) {
		fprintf(stderr, "usage: e2e_order HOST PORT VOL SLICE_VER CHUNK VERSION\n");
		return 2;
	}
	ha.vol_id = strtoull(argv[3] + 4, &end, 16);
	ha.slice_ver = strtoull(argv[4], NULL, 0);
	ha.chunk = strtoull(argv[5], NULL, 0);
	ver = strtoull(argv[6], NULL, 0);
	ha.opcode = ZL_OP_REPL_WRITE;
	ha.subop = ZL_OP_WRITE;
	ha.flags = ZL_WF_DVER;
	hb = ha;
	hr = ha;
	ha.aux = ver;
	ha.length = ORD_LEN;
	hb.aux = ver + 1;
	hb.offset = ORD_HALF;
	hb.length = ORD_LEN;
	memset(a, 0xa1, sizeof(a));
	memset(b, 0xb2, sizeof(b));

	fa = ord_connect(argv[1], argv[2]);
	fb = fa < 0 ? -1 : ord_connect(argv[1], argv[2]);
	if (fb < 0)
		goto out;
	/* A's header first; its payload stops half way (the backup waits for
	 * the rest of it). A short pause lets the backup read that header
	 * before B's comes on the other connection; were B's read first, a
	 * backup in version order answers A CONFLICT, which the check allows. */
	if (ord_send(fa, &ha, a, ORD_LEN, ORD_HALF))
		goto out_conn;
	nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
	if (ord_send(fb, &hb, b, ORD_LEN, ORD_LEN))
		goto out_conn;
	ord_timeout(fb, 1000);
	rc = ord_reply(fb, rd, sizeof(rd), &rep, &eb);
	if (rc != 0 && rc != E2E_SOCK_TIMEOUT)
		goto out_conn;
	b_done = b_first = rc == 0;
	/* The rest of A's payload: now A's data is in. */
	if (e2e_sock_send(fa, a + ORD_HALF, ORD_LEN - ORD_HALF) ||
	    ord_reply(fa, rd, sizeof(rd), &rep, &ea))
		goto out_conn;
	a_done = true;
	ord_timeout(fb, 10000);
	if (!b_done && ord_reply(fb, rd, sizeof(rd), &rep, &eb))
		goto out_conn;
	b_done = true;
	/* What the backup's copy holds now. */
	hr.opcode = ZL_OP_READ;
	hr.flags = ZL_WF_ANY;
	hr.subop = 0;
	hr.length = ORD_READ;
	if (ord_send(fb, &hr, NULL, 0, 0) || ord_reply(fb, rd, sizeof(rd), &rep, &er) || er ||
	    rep.payload_len != ORD_READ) {
		fprintf(stderr, "e2e_order: READ of the backup's copy failed: %s\n",
			er ? zl_errname(er) : "no answer");
		goto out_conn;
	}
	if (!memcmp(rd + ORD_HALF, b, ORD_HALF))
		overlap = "B";
	else if (!memcmp(rd + ORD_HALF, a, ORD_HALF))
		overlap = "A";
	printf("ORDER: a=%s b=%s b_first=%d overlap=%s version=%" PRIx64 "\n",
	       ord_status(a_done, ea), ord_status(b_done, eb), b_first, overlap, rep.aux);
	ret = !strcmp(overlap, "B") && !eb && (!ea || ea == -ZL_ERR_CONFLICT) &&
		      rep.aux == ver + 1 && !memcmp(rd + ORD_LEN, b + ORD_HALF, ORD_HALF)
		  ? 0
		  : 1;
	goto out;
out_conn:
	fprintf(stderr, "e2e_order: connection to %s:%s lost (a=%s b=%s)\n", argv[1], argv[2],
		ord_status(a_done, ea), ord_status(b_done, eb));
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return ret;
}
