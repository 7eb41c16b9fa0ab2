/* libFuzzer target for every lib/wire decoder.
 *
 * Properties checked besides "no crash / no sanitizer report":
 *  - a header that decodes re-encodes to the identical 80 bytes;
 *  - a decoded header passes zl_wire_check (decode already ran it);
 *  - HELLO: decode -> encode -> decode gives the same fields;
 *  - RDMA descriptor: decode -> encode gives the identical 16 bytes;
 *  - CHUNK_VERSIONS pairs: decode -> encode gives the identical bytes;
 *  - CHUNK_DIGEST records (increasing chunks) and the SCRUB result
 *    (repaired <= bad_found): decode -> encode gives the identical bytes;
 *  - a REPL_WRITE replays WRITE, DISCARD or WRITE_ZEROES, nothing else;
 *  - ZL_WF_SEQ only on READ (a snapshot, snap_seq >= 1), a data-changing
 *    request or CHUNK_PUSH (a clone chunk's copy, snap_seq its lo), with
 *    snap_seq below 2^24 and no status; snap_seq is 0 without it.
 * The input is offered whole to each decoder, and the bytes after an 80-byte
 * header are offered as that header's payload.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check(bool ok)
{
	if (!ok)
		abort();
}

static void fuzz_hdr(const uint8_t *data, size_t size)
{
	struct zl_wire_hdr h;
	uint8_t out[ZL_WIRE_HDR_SIZE];
	const char *why = NULL;

	if (zl_wire_decode(data, size, &h, &why)) {
		fuzz_check(why != NULL);
		return;
	}
	zl_wire_encode(&h, out);
	fuzz_check(memcmp(out, data, ZL_WIRE_HDR_SIZE) == 0);
	fuzz_check(zl_wire_check(&h, 0, NULL) == 0);
	fuzz_check(h.payload_len <= ZL_WIRE_MAX_IO);
	/* Ranged requests never reach past the largest chunk. */
	if (!(h.flags & ZL_WF_REPLY) && h.opcode >= ZL_OP_READ && h.opcode <= ZL_OP_REPL_WRITE &&
	    h.opcode != ZL_OP_FLUSH)
		fuzz_check((uint64_t)h.offset + h.length <= ZL_WIRE_MAX_CHUNK);
	if (h.opcode == ZL_OP_REPL_WRITE && !(h.flags & ZL_WF_REPLY)) {
		unsigned rop = zl_wire_repl_op(&h);

		fuzz_check(rop == ZL_OP_WRITE || rop == ZL_OP_DISCARD || rop == ZL_OP_WRITE_ZEROES);
	}
	if (!(h.flags & ZL_WF_REPLY) && h.opcode == ZL_OP_CHUNK_PUSH)
		fuzz_check((uint64_t)h.offset + h.length <= ZL_WIRE_MAX_CHUNK &&
			   h.length <= ZL_WIRE_MAX_IO);
	if (h.flags & ZL_WF_SEQ) {
		fuzz_check(!(h.flags & ZL_WF_REPLY) && h.status == 0);
		fuzz_check(h.opcode == ZL_OP_WRITE || h.opcode == ZL_OP_DISCARD ||
			   h.opcode == ZL_OP_WRITE_ZEROES || h.opcode == ZL_OP_REPL_WRITE ||
			   h.opcode == ZL_OP_CHUNK_PUSH || (h.opcode == ZL_OP_READ && h.snap_seq >= 1));
		fuzz_check(h.snap_seq <= ZL_WIRE_SEQ_MAX);
	} else {
		fuzz_check(h.snap_seq == 0);
	}
	(void)zl_wire_op_name(h.opcode);
	/* Chunk-bounded check must not crash either. */
	(void)zl_wire_check(&h, ZL_WIRE_MIN_CHUNK, NULL);
}

static void fuzz_hello(const uint8_t *data, size_t size)
{
	struct zl_wire_hello a, b;
	uint8_t out[ZL_WIRE_HELLO_SIZE];

	if (zl_wire_hello_decode(data, size, &a))
		return;
	zl_wire_hello_encode(&a, out);
	fuzz_check(zl_wire_hello_decode(out, sizeof(out), &b) == 0);
	fuzz_check(a.proto_version == b.proto_version && a.caps == b.caps);
	fuzz_check(strcmp(a.node_id, b.node_id) == 0 && strcmp(a.token, b.token) == 0);
}

static void fuzz_desc(const uint8_t *data, size_t size)
{
	struct zl_wire_rdma_desc d;
	uint8_t out[ZL_WIRE_RDMA_DESC_SIZE];

	if (zl_wire_rdma_desc_decode(data, size, &d))
		return;
	fuzz_check(d.len > 0 && d.len <= ZL_WIRE_MAX_IO);
	zl_wire_rdma_desc_encode(&d, out);
	fuzz_check(memcmp(out, data, sizeof(out)) == 0);
}

static void fuzz_vers(const uint8_t *data, size_t size)
{
	static struct zl_wire_chunk_ver v[ZL_WIRE_VERS_MAX];
	static uint8_t out[ZL_WIRE_MAX_CTRL];
	int n = zl_wire_chunk_vers_decode(data, size, v);

	if (n < 0)
		return;
	fuzz_check((size_t)n * ZL_WIRE_CHUNK_VER_SIZE == size && n <= (int)ZL_WIRE_VERS_MAX);
	zl_wire_chunk_vers_encode(v, (uint32_t)n, out);
	fuzz_check(memcmp(out, data, size) == 0);
}

static void fuzz_digests(const uint8_t *data, size_t size)
{
	static struct zl_wire_chunk_digest d[ZL_WIRE_DIGESTS_MAX];
	static uint8_t out[ZL_WIRE_MAX_CTRL];
	int n = zl_wire_chunk_digests_decode(data, size, d);

	if (n < 0)
		return;
	fuzz_check((size_t)n * ZL_WIRE_CHUNK_DIGEST_SIZE == size && n <= (int)ZL_WIRE_DIGESTS_MAX);
	for (int i = 1; i < n; i++)
		fuzz_check(d[i].chunk > d[i - 1].chunk);
	zl_wire_chunk_digests_encode(d, (uint32_t)n, out);
	fuzz_check(memcmp(out, data, size) == 0);
}

static void fuzz_scrub_result(const uint8_t *data, size_t size)
{
	struct zl_wire_scrub_result r;
	uint8_t out[ZL_WIRE_SCRUB_RESULT_SIZE];

	if (zl_wire_scrub_result_decode(data, size, &r))
		return;
	fuzz_check(r.repaired <= r.bad_found);
	zl_wire_scrub_result_encode(&r, out);
	fuzz_check(memcmp(out, data, sizeof(out)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_hdr(data, size);
	fuzz_hello(data, size);
	fuzz_desc(data, size);
	if (size > ZL_WIRE_HDR_SIZE) {
		const uint8_t *pl = data + ZL_WIRE_HDR_SIZE;
		size_t pl_len = size - ZL_WIRE_HDR_SIZE;

		fuzz_hello(pl, pl_len);
		fuzz_desc(pl, pl_len);
		fuzz_vers(pl, pl_len);
		fuzz_digests(pl, pl_len);
		fuzz_scrub_result(pl, pl_len);
	}
	fuzz_vers(data, size);
	fuzz_digests(data, size);
	fuzz_scrub_result(data, size);
	return 0;
}
