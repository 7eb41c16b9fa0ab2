/* e2e_flood: the adversary of "no cheap denial of service" (docs/SECURITY.md,
 * dos_e2e.sh): floods one storage daemon with hand-made wire requests over
 * plain TCP sockets (lib/wire only), pipelined, many connections:
 *
 *   e2e_flood HOST PORT KIND [options]
 *
 * KIND (every request is one of these):
 *   unknown-vol  READ of chunk 0 of a volume id nobody created (--distinct N
 *                ids, cycled; 0: a new one each request)
 *   slice-ver    READ of --vol --chunk with a slice version far above any
 *                real one (a new one each request)
 *   epoch        4 KiB WRITE with epoch 2^64-1 (of --vol, or of unknown ids
 *                with --distinct)
 *   hello        HELLO for an unknown volume id with a made-up token
 *   noauth       READ of --vol before any HELLO
 *   oversize     one header with payload_len 2^31 per connection
 * Credentials, a HELLO first on each connection: --cluster --node N --token T
 * (cluster token) or --hello-vol V --epoch E --node N --token T (attach token).
 * --count N (requests, default 5000), --window W (in flight per connection,
 * default 64), --conns C (connections at most, default 2000: a connection the
 * daemon closes is replaced while requests are left), --seconds S (stop
 * after, default 60), --seed N.
 *
 * Prints "FLOOD kind=K sent=N answered=N conns=N closed=N hello_failed=N
 * seconds=S" (closed: connections the daemon closed) and one "STATUS NAME N"
 * line per reply status. Exit 0 when it ran, 1 when it could not connect at
 * all or a reply was malformed, 2 on bad usage. */
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
#include "lib/wire/wire.h"
#include "e2e_sock.h"

#define FLOOD_MAX_WINDOW 256
#define FLOOD_IO 4096u
#define N_STATUS 8192 /* by -err: errno values and ZL_ERR_* (4096...) */

enum flood_kind { K_UNKNOWN, K_SLICE_VER, K_EPOCH, K_HELLO, K_NOAUTH, K_OVERSIZE };

struct flood {
	const char *host, *port;
	enum flood_kind kind;
	bool cluster, cred;
	const char *node, *token;
	uint64_t hello_vol, epoch, vol, chunk, seed;
	uint32_t count, window, conns_max, seconds, distinct;
	/* results */
	uint64_t sent, answered, conns, closed, hello_failed, req_id;
	uint64_t status[N_STATUS];
	uint64_t n_none;
	uint8_t data[FLOOD_IO];
	uint8_t *obuf;
};

static uint64_t flood_rnd(struct flood *f)
{
	f->seed = f->seed * 6364136223846793005ull + 1442695040888963407ull;
	return zl_hash64(f->seed);
}

static int flood_connect(struct flood *f)
{
	struct timeval tv = {.tv_sec = 5};
	int fd = e2e_sock_connect("e2e_flood", f->host, f->port);

	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Appends request h (payload pl, plen bytes) to out; returns its size. */
static size_t flood_encode(struct flood *f, struct zl_wire_hdr *h, const uint8_t *pl,
			   uint32_t plen, uint8_t *out)
{
	h->version = ZL_WIRE_VERSION;
	h->req_id = ++f->req_id;
	h->payload_len = plen;
	h->payload_crc = plen ? zl_crc32c(pl, plen) : 0;
	zl_wire_encode(h, out);
	if (plen)
		memcpy(out + ZL_WIRE_HDR_SIZE, pl, plen);
	return ZL_WIRE_HDR_SIZE + plen;
}

static size_t flood_hello(struct flood *f, uint64_t vol, uint64_t epoch, bool cluster,
			  const char *node, const char *token, uint8_t *out)
{
	struct zl_wire_hello hl = {.proto_version = ZL_WIRE_VERSION};
	uint8_t pl[ZL_WIRE_HELLO_SIZE];
	struct zl_wire_hdr h = {.opcode = ZL_OP_HELLO, .vol_id = vol, .epoch = epoch};

	hl.caps = ZL_WIRE_CAP_TCP | (cluster ? ZL_WIRE_CAP_CLUSTER : 0);
	snprintf(hl.node_id, sizeof(hl.node_id), "%s", node);
	snprintf(hl.token, sizeof(hl.token), "%s", token);
	zl_wire_hello_encode(&hl, pl);
	return flood_encode(f, &h, pl, ZL_WIRE_HELLO_SIZE, out);
}

static uint64_t flood_unknown_vol(struct flood *f, uint64_t i)
{
	/* A random 64-bit id exists with odds of n_volumes / 2^64; --distinct
	 * ones cycle. */
	return f->distinct ? zl_hash64(0xd05ull ^ (i % f->distinct)) | 1
			   : flood_rnd(f) | 1;
}

/* Request number i into out; returns its size. */
static size_t flood_build(struct flood *f, uint64_t i, uint8_t *out)
{
	struct zl_wire_hdr h = {0};
	char tok[65];

	switch (f->kind) {
	case K_HELLO:
		for (int k = 0; k < 64; k++)
			tok[k] = "0123456789abcdef"[flood_rnd(f) & 15];
		tok[64] = '\0';
		return flood_hello(f, flood_rnd(f) | 1, flood_rnd(f) >> 20, false, "flood-node",
				   tok, out);
	case K_EPOCH:
		h.opcode = ZL_OP_WRITE;
		h.vol_id = f->distinct ? flood_unknown_vol(f, i) : f->vol;
		h.chunk = f->chunk;
		h.length = FLOOD_IO;
		h.epoch = UINT64_MAX;
		h.slice_ver = 1;
		return flood_encode(f, &h, f->data, FLOOD_IO, out);
	case K_OVERSIZE: {
		size_t n;

		h.opcode = ZL_OP_WRITE;
		h.vol_id = f->vol;
		h.length = FLOOD_IO;
		n = flood_encode(f, &h, NULL, 0, out);
		h.payload_len = 1u << 31;
		zl_wire_encode(&h, out);
		return n;
	}
	default:
		h.opcode = ZL_OP_READ;
		h.vol_id = f->kind == K_UNKNOWN ? flood_unknown_vol(f, i) : f->vol;
		h.chunk = f->kind == K_UNKNOWN ? 0 : f->chunk;
		h.length = FLOOD_IO;
		h.slice_ver = f->kind == K_SLICE_VER ? (1ull << 40) + (flood_rnd(f) >> 24) : 1;
		return flood_encode(f, &h, NULL, 0, out);
	}
}

/* Reads one reply: 0 (status counted), E2E_SOCK_CLOSED, E2E_SOCK_TIMEOUT, or
 * -1 when malformed. */
static int flood_reply(struct flood *f, int fd, int *err)
{
	uint8_t raw[ZL_WIRE_HDR_SIZE];
	static uint8_t sink[ZL_WIRE_MAX_IO];
	struct zl_wire_hdr rep;
	const char *why = NULL;
	int rc = e2e_sock_recv(fd, raw, sizeof(raw));

	if (rc)
		return rc;
	if (zl_wire_decode(raw, sizeof(raw), &rep, &why) || !(rep.flags & ZL_WF_REPLY)) {
		fprintf(stderr, "e2e_flood: malformed reply: %s\n", why ? why : "not a reply");
		return -1;
	}
	rc = e2e_sock_recv(fd, sink, rep.payload_len);
	if (rc)
		return rc;
	*err = zl_wire_status_to_err(rep.status);
	f->status[ZL_MIN((unsigned)-*err, N_STATUS - 1u)]++;
	f->answered++;
	return 0;
}

/* One connection: HELLO (when credentials), then windows of requests until
 * none are left or the daemon closes it. -1 on a malformed reply. */
static int flood_conn(struct flood *f, uint64_t t_end)
{
	int fd = flood_connect(f), err = 0, rc;
	size_t n;

	if (fd < 0)
		return 1;
	f->conns++;
	if (f->cred && f->kind != K_HELLO) {
		n = flood_hello(f, f->cluster ? 0 : f->hello_vol, f->cluster ? 0 : f->epoch,
				f->cluster, f->node, f->token, f->obuf);
		rc = e2e_sock_send(fd, f->obuf, n) ? E2E_SOCK_CLOSED : flood_reply(f, fd, &err);
		if (rc < 0) {
			close(fd);
			return -1;
		}
		if (rc || err) {
			f->hello_failed++;
			f->closed += rc == E2E_SOCK_CLOSED;
			close(fd);
			return 0;
		}
		f->answered--; /* the HELLO is not part of the flood */
		f->status[0]--;
	}
	while (f->sent < f->count && zl_now_ms() < t_end) {
		uint32_t w = f->kind == K_OVERSIZE ? 1 : f->window;
		uint32_t k = 0;

		n = 0;
		while (k < w && f->sent + k < f->count)
			n += flood_build(f, f->sent + k++, f->obuf + n);
		if (e2e_sock_send(fd, f->obuf, n)) {
			f->closed++;
			break;
		}
		f->sent += k;
		rc = 0;
		for (uint32_t j = 0; j < k && !rc; j++)
			rc = flood_reply(f, fd, &err);
		if (rc < 0) {
			close(fd);
			return -1;
		}
		if (rc == E2E_SOCK_CLOSED) {
			f->closed++;
			break;
		}
		if (rc == E2E_SOCK_TIMEOUT) {
			f->n_none++;
			break;
		}
	}
	close(fd);
	return 0;
}

static int flood_usage(void)
{
	fprintf(stderr,
		"usage: e2e_flood HOST PORT unknown-vol|slice-ver|epoch|hello|noauth|oversize\n"
		"  [--cluster --node N --token T | --hello-vol V --epoch E --node N --token T]\n"
		"  [--vol V] [--chunk C] [--distinct N] [--count N] [--window W] [--conns C]\n"
		"  [--seconds S] [--seed N]\n");
	return 2;
}

static bool flood_vol(const char *s, uint64_t *out)
{
	char *end;

	if (!strncmp(s, "vol-", 4))
		s += 4;
	errno = 0;
	*out = strtoull(s, &end, 16);
	return !errno && !*end && end != s;
}

int main(int argc, char **argv)
{
	static const char *kinds[] = {"unknown-vol", "slice-ver", "epoch",
				      "hello",	     "noauth",	  "oversize"};
	static struct flood f = {.count = 5000, .window = 64, .conns_max = 2000,
				 .seconds = 60, .seed = 1, .node = "", .token = ""};
	uint64_t t0, t_end;
	int i, kind = -1;

	if (argc < 4)
		return flood_usage();
	f.host = argv[1];
	f.port = argv[2];
	for (i = 0; i < 6; i++)
		if (!strcmp(argv[3], kinds[i]))
			kind = i;
	if (kind < 0)
		return flood_usage();
	f.kind = (enum flood_kind)kind;
	for (i = 4; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool ok = true;

		if (!strcmp(a, "--cluster")) {
			f.cluster = f.cred = true;
			continue;
		}
		if (!v)
			return flood_usage();
		i++;
		if (!strcmp(a, "--node"))
			f.node = v;
		else if (!strcmp(a, "--token"))
			f.token = v;
		else if (!strcmp(a, "--hello-vol"))
			ok = flood_vol(v, &f.hello_vol), f.cred = true;
		else if (!strcmp(a, "--vol"))
			ok = flood_vol(v, &f.vol);
		else if (!strcmp(a, "--epoch"))
			f.epoch = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--chunk"))
			f.chunk = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--distinct"))
			f.distinct = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--count"))
			f.count = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--window"))
			f.window = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--conns"))
			f.conns_max = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--seconds"))
			f.seconds = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--seed"))
			f.seed = strtoull(v, NULL, 10);
		else
			ok = false;
		if (!ok)
			return flood_usage();
	}
	if (!f.window || f.window > FLOOD_MAX_WINDOW)
		return flood_usage();
	f.obuf = malloc((size_t)FLOOD_MAX_WINDOW * (ZL_WIRE_HDR_SIZE + FLOOD_IO + 512));
	if (!f.obuf)
		return 1;
	memset(f.data, 0xd0, sizeof(f.data));
	t0 = zl_now_ms();
	t_end = t0 + f.seconds * 1000ull;
	while (f.sent < f.count && f.conns < f.conns_max && zl_now_ms() < t_end) {
		uint64_t before = f.conns;
		int rc = flood_conn(&f, t_end);

		if (rc < 0)
			return 1;
		if (rc && before == 0) {
			fprintf(stderr, "e2e_flood: cannot connect to %s:%s\n", f.host, f.port);
			return 1;
		}
	}
	printf("FLOOD kind=%s sent=%" PRIu64 " answered=%" PRIu64 " conns=%" PRIu64
	       " closed=%" PRIu64 " hello_failed=%" PRIu64 " no_answer=%" PRIu64 " seconds=%.2f\n",
	       kinds[kind], f.sent, f.answered, f.conns, f.closed, f.hello_failed, f.n_none,
	       (double)(zl_now_ms() - t0) / 1000.0);
	for (i = 0; i < N_STATUS; i++)
		if (f.status[i])
			printf("STATUS %s %" PRIu64 "\n", i ? zl_errname(-i) : "OK", f.status[i]);
	free(f.obuf);
	return 0;
}
