/* libFuzzer target: the NBD option and request decoders, driven like a
 * session: a sequence of options (header + data) until one enters
 * transmission or closes, then a sequence of request headers (with WRITE
 * payloads skipped). Checks invariants the server relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/nbd/nbd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t fuzz_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[ZL_NBD_OPT_OUT_MAX];
	struct zl_nbd_export exp = {
	    .name = "", .size = 1ull << 30, .tflags = ZL_NBD_TFLAG_HAS_FLAGS};
	struct zl_nbd_opt_hdr oh;
	struct zl_nbd_req r;
	enum zl_nbd_opt_action act = ZL_NBD_ACT_CONTINUE;
	uint32_t client_flags = 0;
	size_t off = 0, out_len;

	if (size < 1)
		return 0;
	/* First byte: export flavour and client flags. */
	if (data[0] & 1)
		exp.name = "vol";
	if (data[0] & 2)
		client_flags = ZL_NBD_FLAG_C_NO_ZEROES;
	if (data[0] & 4)
		exp.size = 0;
	off = 1;
	while (act == ZL_NBD_ACT_CONTINUE && size - off >= ZL_NBD_OPT_HDR_LEN) {
		uint8_t hdr[ZL_NBD_OPT_HDR_LEN];

		memcpy(hdr, data + off, sizeof(hdr));
		memcpy(hdr, "IHAVEOPT", 8); /* reach the option logic, not just the magic */
		if (zl_nbd_opt_hdr_decode(hdr, &oh))
			abort();
		off += ZL_NBD_OPT_HDR_LEN;
		if (oh.length > ZL_NBD_MAX_OPT_LEN || oh.length > size - off)
			oh.length = (uint32_t)(size - off);
		if (oh.length > ZL_NBD_MAX_OPT_LEN)
			oh.length = ZL_NBD_MAX_OPT_LEN;
		/* Exact-size heap copy so ASan catches any read past the option data. */
		uint8_t *opt = malloc(oh.length ? oh.length : 1);

		if (!opt)
			return 0;
		memcpy(opt, data + off, oh.length);
		off += oh.length;
		if (zl_nbd_opt_reply(&exp, client_flags, &oh, opt, out, sizeof(out), &out_len,
				     &act))
			abort(); /* the reply must always fit ZL_NBD_OPT_OUT_MAX */
		free(opt);
		if (out_len > sizeof(out))
			abort();
		/* Every reply but EXPORT_NAME's starts with the option reply magic. */
		if (oh.option != ZL_NBD_OPT_EXPORT_NAME && out_len &&
		    fuzz_be64(out) != ZL_NBD_OPT_REPLY_MAGIC)
			abort();
	}
	while (size - off >= ZL_NBD_REQ_LEN) {
		uint8_t hdr[ZL_NBD_REQ_LEN];
		int rc;

		memcpy(hdr, data + off, sizeof(hdr));
		off += ZL_NBD_REQ_LEN;
		rc = zl_nbd_req_decode(hdr, &r);
		if (rc) {
			/* Half the time force the magic to get at the checks. */
			if (!(hdr[27] & 1))
				continue;
			hdr[0] = 0x25, hdr[1] = 0x60, hdr[2] = 0x95, hdr[3] = 0x13;
			if (zl_nbd_req_decode(hdr, &r))
				abort();
		}
		if (zl_nbd_req_check(&r, exp.size) == 0) {
			/* Anything accepted must lie within the export and the limits. */
			if (r.type != ZL_NBD_CMD_FLUSH && r.type != ZL_NBD_CMD_DISC) {
				if (r.length == 0 || r.offset + r.length > exp.size ||
				    r.offset + r.length < r.offset)
					abort();
				if ((r.type == ZL_NBD_CMD_READ || r.type == ZL_NBD_CMD_WRITE) &&
				    r.length > ZL_NBD_MAX_IO)
					abort();
			}
		}
		if (zl_nbd_req_has_payload(&r))
			off += ZL_MIN((size_t)r.length, size - off);
	}
	return 0;
}
