/* NBD codec: greeting, option handling, request decoding and checks, reply
 * encoding. Pure functions over byte buffers (fuzzed). */
#include "nbd.h"

#include <errno.h>
#include <string.h>

#include "lib/common/byteorder.h"
#include "lib/common/common.h"

void zl_nbd_greeting_encode(uint8_t out[ZL_NBD_GREETING_LEN])
{
	zl_put_be64(out, ZL_NBD_MAGIC);
	zl_put_be64(out + 8, ZL_NBD_IHAVEOPT);
	zl_put_be16(out + 16, ZL_NBD_FLAG_FIXED_NEWSTYLE | ZL_NBD_FLAG_NO_ZEROES);
}

int zl_nbd_opt_hdr_decode(const uint8_t in[ZL_NBD_OPT_HDR_LEN], struct zl_nbd_opt_hdr *out)
{
	if (zl_get_be64(in) != ZL_NBD_IHAVEOPT)
		return -ZL_ERR_PROTO;
	out->option = zl_get_be32(in + 8);
	out->length = zl_get_be32(in + 12);
	return 0;
}

/* Reply builder: appends option replies to a bounded buffer. */
struct nbd_rep_buf {
	uint8_t *p;
	size_t len, cap;
	bool overflow;
};

static uint8_t *nbd_rep_add(struct nbd_rep_buf *b, uint32_t option, uint32_t type, uint32_t len)
{
	uint8_t *h;

	if (b->overflow || b->cap - b->len < ZL_NBD_OPT_REPLY_HDR_LEN + (size_t)len) {
		b->overflow = true;
		return NULL;
	}
	h = b->p + b->len;
	zl_put_be64(h, ZL_NBD_OPT_REPLY_MAGIC);
	zl_put_be32(h + 8, option);
	zl_put_be32(h + 12, type);
	zl_put_be32(h + 16, len);
	b->len += ZL_NBD_OPT_REPLY_HDR_LEN + len;
	return h + ZL_NBD_OPT_REPLY_HDR_LEN;
}

static void nbd_rep_err(struct nbd_rep_buf *b, uint32_t option, uint32_t type, const char *msg)
{
	uint32_t len = (uint32_t)strlen(msg);
	uint8_t *d = nbd_rep_add(b, option, type, len);

	if (d)
		memcpy(d, msg, len);
}

/* An empty configured name accepts every requested name. */
static bool nbd_name_ok(const struct zl_nbd_export *exp, const uint8_t *name, uint32_t len)
{
	if (!exp->name || !exp->name[0])
		return true;
	return strlen(exp->name) == len && memcmp(exp->name, name, len) == 0;
}

static void nbd_opt_info(const struct zl_nbd_export *exp, const struct zl_nbd_opt_hdr *hdr,
			 const uint8_t *data, struct nbd_rep_buf *b, enum zl_nbd_opt_action *action)
{
	uint32_t name_len, i;
	uint16_t n_req;
	bool want_name = false;
	uint8_t *d;

	/* u32 name length, name, u16 number of info requests, u16 each. */
	if (hdr->length < 6) {
		nbd_rep_err(b, hdr->option, ZL_NBD_REP_ERR_INVALID, "option data too short");
		return;
	}
	name_len = zl_get_be32(data);
	if (name_len > ZL_NBD_MAX_NAME || (uint64_t)name_len + 6 > hdr->length) {
		nbd_rep_err(b, hdr->option, ZL_NBD_REP_ERR_INVALID, "bad export name length");
		return;
	}
	n_req = zl_get_be16(data + 4 + name_len);
	if ((uint64_t)name_len + 6 + 2ull * n_req != hdr->length) {
		nbd_rep_err(b, hdr->option, ZL_NBD_REP_ERR_INVALID, "bad info request count");
		return;
	}
	if (!nbd_name_ok(exp, data + 4, name_len)) {
		nbd_rep_err(b, hdr->option, ZL_NBD_REP_ERR_UNKNOWN, "unknown export name");
		return;
	}
	for (i = 0; i < n_req; i++) {
		if (zl_get_be16(data + 4 + name_len + 2 + 2 * i) == ZL_NBD_INFO_NAME)
			want_name = true;
	}
	d = nbd_rep_add(b, hdr->option, ZL_NBD_REP_INFO, 12);
	if (d) {
		zl_put_be16(d, ZL_NBD_INFO_EXPORT);
		zl_put_be64(d + 2, exp->size);
		zl_put_be16(d + 10, exp->tflags);
	}
	d = nbd_rep_add(b, hdr->option, ZL_NBD_REP_INFO, 14);
	if (d) {
		zl_put_be16(d, ZL_NBD_INFO_BLOCK_SIZE);
		zl_put_be32(d + 2, 1);
		zl_put_be32(d + 6, ZL_NBD_PREF_BLOCK);
		zl_put_be32(d + 10, ZL_NBD_MAX_IO);
	}
	if (want_name) {
		d = nbd_rep_add(b, hdr->option, ZL_NBD_REP_INFO, 2 + name_len);
		if (d) {
			zl_put_be16(d, ZL_NBD_INFO_NAME);
			memcpy(d + 2, data + 4, name_len);
		}
	}
	nbd_rep_add(b, hdr->option, ZL_NBD_REP_ACK, 0);
	if (hdr->option == ZL_NBD_OPT_GO)
		*action = ZL_NBD_ACT_TRANSMIT;
}

int zl_nbd_opt_reply(const struct zl_nbd_export *exp, uint32_t client_flags,
		     const struct zl_nbd_opt_hdr *hdr, const uint8_t *data, uint8_t *out,
		     size_t out_cap, size_t *out_len, enum zl_nbd_opt_action *action)
{
	struct nbd_rep_buf b = {.p = out, .cap = out_cap};
	const char *name;
	uint32_t name_len;
	uint8_t *d;

	*action = ZL_NBD_ACT_CONTINUE;
	*out_len = 0;
	switch (hdr->option) {
	case ZL_NBD_OPT_EXPORT_NAME:
		/* No error reply exists for this option: a wrong name closes. */
		if (hdr->length > ZL_NBD_MAX_NAME || !nbd_name_ok(exp, data, hdr->length)) {
			*action = ZL_NBD_ACT_CLOSE;
			return 0;
		}
		if (out_cap < 10 + 124)
			return -ZL_ERR_INVAL;
		zl_put_be64(out, exp->size);
		zl_put_be16(out + 8, exp->tflags);
		b.len = 10;
		if (!(client_flags & ZL_NBD_FLAG_C_NO_ZEROES)) {
			memset(out + 10, 0, 124);
			b.len += 124;
		}
		*action = ZL_NBD_ACT_TRANSMIT;
		break;
	case ZL_NBD_OPT_ABORT:
		nbd_rep_add(&b, hdr->option, ZL_NBD_REP_ACK, 0);
		*action = ZL_NBD_ACT_CLOSE;
		break;
	case ZL_NBD_OPT_LIST:
		if (hdr->length != 0) {
			nbd_rep_err(&b, hdr->option, ZL_NBD_REP_ERR_INVALID,
				    "NBD_OPT_LIST takes no data");
			break;
		}
		name = exp->name ? exp->name : "";
		name_len = (uint32_t)strnlen(name, ZL_NBD_MAX_NAME);
		d = nbd_rep_add(&b, hdr->option, ZL_NBD_REP_SERVER, 4 + name_len);
		if (d) {
			zl_put_be32(d, name_len);
			memcpy(d + 4, name, name_len);
		}
		nbd_rep_add(&b, hdr->option, ZL_NBD_REP_ACK, 0);
		break;
	case ZL_NBD_OPT_STARTTLS:
		nbd_rep_err(&b, hdr->option, ZL_NBD_REP_ERR_POLICY, "TLS is not offered");
		break;
	case ZL_NBD_OPT_INFO:
	case ZL_NBD_OPT_GO:
		nbd_opt_info(exp, hdr, data, &b, action);
		break;
	default:
		nbd_rep_err(&b, hdr->option, ZL_NBD_REP_ERR_UNSUP, "option not supported");
		break;
	}
	if (b.overflow)
		return -ZL_ERR_INVAL;
	*out_len = b.len;
	return 0;
}

int zl_nbd_req_decode(const uint8_t in[ZL_NBD_REQ_LEN], struct zl_nbd_req *out)
{
	if (zl_get_be32(in) != ZL_NBD_REQUEST_MAGIC)
		return -ZL_ERR_PROTO;
	out->flags = zl_get_be16(in + 4);
	out->type = zl_get_be16(in + 6);
	out->cookie = zl_get_be64(in + 8);
	out->offset = zl_get_be64(in + 16);
	out->length = zl_get_be32(in + 24);
	return 0;
}

uint32_t zl_nbd_req_check(const struct zl_nbd_req *r, uint64_t export_size)
{
	uint16_t allowed = ZL_NBD_CMD_FLAG_FUA;

	switch (r->type) {
	case ZL_NBD_CMD_DISC:
	case ZL_NBD_CMD_FLUSH:
		return r->flags & ~allowed ? ZL_NBD_EINVAL : 0;
	case ZL_NBD_CMD_READ:
	case ZL_NBD_CMD_WRITE:
		if (r->length > ZL_NBD_MAX_IO)
			return ZL_NBD_EINVAL;
		break;
	case ZL_NBD_CMD_WRITE_ZEROES:
		allowed |= ZL_NBD_CMD_FLAG_NO_HOLE;
		break;
	case ZL_NBD_CMD_TRIM:
		break;
	default:
		return ZL_NBD_EINVAL;
	}
	if (r->flags & ~allowed)
		return ZL_NBD_EINVAL;
	if (r->length == 0)
		return ZL_NBD_EINVAL;
	if (r->offset > export_size || r->length > export_size - r->offset)
		return ZL_NBD_EINVAL;
	return 0;
}

void zl_nbd_reply_encode(uint8_t out[ZL_NBD_REPLY_LEN], uint32_t nbd_error, uint64_t cookie)
{
	zl_put_be32(out, ZL_NBD_SIMPLE_REPLY_MAGIC);
	zl_put_be32(out + 4, nbd_error);
	zl_put_be64(out + 8, cookie);
}

uint32_t zl_nbd_errno(int err)
{
	if (err >= 0)
		return 0;
	switch (-err) {
	case EPERM:
	case EACCES:
	case EROFS:
	case ZL_ERR_AUTH:
		return ZL_NBD_EPERM;
	case ENOMEM:
		return ZL_NBD_ENOMEM;
	case EINVAL:
	case ERANGE:
	case ZL_ERR_INVAL:
	case ZL_ERR_RANGE:
		return ZL_NBD_EINVAL;
	case ENOSPC:
	case ZL_ERR_NOSPC:
		return ZL_NBD_ENOSPC;
	case EOVERFLOW:
		return ZL_NBD_EOVERFLOW;
	case ENOTSUP:
		return ZL_NBD_ENOTSUP;
	case ESHUTDOWN:
		return ZL_NBD_ESHUTDOWN;
	default:
		return ZL_NBD_EIO;
	}
}
