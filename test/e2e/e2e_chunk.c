/* e2e_chunk: one raw request to one zipline-storage daemon, bypassing the
 * volume client (which would pick the primary, retry and report):
 *
 *   e2e_chunk HOST PORT read  VOL CHUNK OFF LEN SLICE_VER [any] [seq=N] [OUT]
 *   e2e_chunk HOST PORT write VOL CHUNK OFF SLICE_VER IN WAIT_MS [seq=N]
 *
 * VOL is the volume id ("vol-" and 16 hex digits). `read` sends a READ (with
 * ZL_WF_ANY when "any" is given) and writes the data to OUT (optional);
 * `write` sends the bytes of file IN as a WRITE and waits at most WAIT_MS
 * for the answer. "seq=N" sets ZL_WF_SEQ with snapshot sequence N (a read:
 * the chunk as snapshot N holds it; docs/SNAPSHOTS.md). Prints one line:
 *   status=<OK|error name|none> aux=<reply aux, hex>
 * ("none": no reply within the wait, e.g. a write the primary holds). Exit 0
 * when a line was printed, 1 on a local failure (with the reason). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/transport/xport_hello.h"
#include "e2e_cred.h"

struct wait {
	struct zl_wire_hdr rep;
	int status;
	bool done;
};

static struct zl_xport_hello hello;
static bool hello_done;

/* The HELLO's outcome goes to stderr ("hello=<status>"): stdout keeps its
 * one line. */
static void hello_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	int rc = status ? status : zl_wire_status_to_err(rep->status);

	(void)arg;
	fprintf(stderr, "hello=%s\n", rc ? zl_errname(rc) : "OK");
	hello_done = true;
}

static void req_cb(void *arg, int status, const struct zl_wire_hdr *rep)
{
	struct wait *w = arg;

	w->status = status;
	if (rep)
		w->rep = *rep;
	w->done = true;
}

static void close_cb(void *arg, struct zl_xport_conn *c, int reason)
{
	(void)arg;
	(void)c;
	(void)reason;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: e2e_chunk HOST PORT read VOL CHUNK OFF LEN SLICE_VER [any] [seq=N] [OUT]\n"
		"       e2e_chunk HOST PORT write VOL CHUNK OFF SLICE_VER IN WAIT_MS [seq=N]\n");
	return 2;
}

static int vol_num(const char *id, uint64_t *num)
{
	char *end;

	if (strncmp(id, "vol-", 4) || strlen(id) != 20)
		return -1;
	*num = strtoull(id + 4, &end, 16);
	return *end ? -1 : 0;
}

/* "seq=N": the request carries snapshot sequence N. */
static void seq_arg(struct zl_wire_hdr *h, const char *arg)
{
	h->flags |= ZL_WF_SEQ;
	h->snap_seq = (uint32_t)strtoul(arg + 4, NULL, 0);
}

static uint8_t *file_read(const char *path, uint32_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || n > (long)ZL_WIRE_MAX_IO ||
	    fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return NULL;
	}
	buf = malloc((size_t)n);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (uint32_t)n;
	return buf;
}

int main(int argc, char **argv)
{
	char cred_tok[ZL_AUTH_TOKEN_HEX + 1];
	struct zl_xport_cred cred;
	const char *self_id = "e2e-chunk";
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP, .timeout_ms = 30000};
	bool tls;
	struct zl_xport_conn *c = NULL;
	struct zl_xport *x = NULL;
	struct zl_loop *loop = NULL;
	struct zl_wire_hdr h;
	static struct wait w;
	uint8_t *buf = NULL;
	const char *out = NULL;
	uint64_t deadline, wait_ms = 10000;
	bool rd;
	int rc, ret = 1;

	if (argc < 9)
		return usage();
	rd = !strcmp(argv[3], "read");
	if (!rd && strcmp(argv[3], "write"))
		return usage();
	memset(&h, 0, sizeof(h));
	if (vol_num(argv[4], &h.vol_id)) {
		fprintf(stderr, "e2e_chunk: bad volume id '%s'\n", argv[4]);
		return 2;
	}
	h.chunk = strtoull(argv[5], NULL, 0);
	h.offset = (uint32_t)strtoul(argv[6], NULL, 0);
	if (rd) {
		h.opcode = ZL_OP_READ;
		h.length = (uint32_t)strtoul(argv[7], NULL, 0);
		h.slice_ver = strtoull(argv[8], NULL, 0);
		for (int i = 9; i < argc; i++) {
			if (!strcmp(argv[i], "any"))
				h.flags |= ZL_WF_ANY;
			else if (!strncmp(argv[i], "seq=", 4))
				seq_arg(&h, argv[i]);
			else
				out = argv[i];
		}
		buf = malloc(h.length ? h.length : 1);
	} else {
		if (argc != 10 && argc != 11)
			return usage();
		if (argc == 11 && strncmp(argv[10], "seq=", 4))
			return usage();
		if (argc == 11)
			seq_arg(&h, argv[10]);
		h.opcode = ZL_OP_WRITE;
		h.slice_ver = strtoull(argv[7], NULL, 0);
		buf = file_read(argv[8], &h.length);
		if (!buf) {
			fprintf(stderr, "e2e_chunk: cannot read '%s' (1 byte to 4 MiB)\n", argv[8]);
			return 1;
		}
		wait_ms = strtoull(argv[9], NULL, 0);
	}
	if (e2e_cred(&self_id, cred_tok, &cred))
		return 1;
	if (getenv("ZL_E2E_REQ_EPOCH")) /* what a client puts in its header */
		h.epoch = strtoull(getenv("ZL_E2E_REQ_EPOCH"), NULL, 0);
	tls = e2e_tls_opts(&xo);
	rc = zl_loop_create(&loop);
	if (!rc)
		rc = zl_xport_create(loop, &xo, &x);
	if (!rc)
		rc = e2e_connect(x, tls, argv[1], (uint16_t)atoi(argv[2]), close_cb, &c);
	if (!rc)
		rc = zl_xport_hello_send_cred(c, &hello, self_id, &cred, hello_cb, NULL);
	if (!rc)
		rc = zl_xport_request(c, &h, rd ? NULL : buf, rd ? 0 : h.length, rd ? buf : NULL,
				      rd ? h.length : 0, req_cb, &w);
	if (rc) {
		fprintf(stderr, "e2e_chunk: %s:%s: %s\n", argv[1], argv[2], zl_strerror(rc));
		goto out;
	}
	deadline = zl_now_ms() + wait_ms;
	while (!w.done && zl_now_ms() < deadline)
		zl_loop_run_once(loop, 20);
	ret = 0;
	if (!w.done) {
		printf("status=none aux=0\n");
		goto out;
	}
	rc = w.status ? w.status : zl_wire_status_to_err(w.rep.status);
	printf("status=%s aux=%" PRIx64 "\n", rc ? zl_errname(rc) : "OK", rc ? 0 : w.rep.aux);
	if (!rc && rd && out) {
		FILE *f = fopen(out, "wb");

		if (!f || fwrite(buf, 1, w.rep.payload_len, f) != w.rep.payload_len) {
			fprintf(stderr, "e2e_chunk: cannot write '%s': %s\n", out, strerror(errno));
			ret = 1;
		}
		if (f)
			fclose(f);
	}
out:
	if (c) {
		zl_xport_conn_close(c);
		zl_loop_run_once(loop, 10);
		zl_xport_conn_put(c);
	}
	if (x)
		zl_xport_destroy(x);
	if (loop)
		zl_loop_destroy(loop);
	free(buf);
	(void)hello_done;
	return ret;
}
