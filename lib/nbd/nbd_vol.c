/* NBD backend over a Zipline volume (lib/client). */
#include "nbd.h"

#include "lib/client/client.h"

static int nbd_vol_read(void *ctx, void *buf, uint64_t off, uint32_t len, zl_nbd_io_cb cb,
			void *arg)
{
	return zl_vol_aio_read(ctx, buf, off, len, cb, arg);
}

static int nbd_vol_write(void *ctx, const void *buf, uint64_t off, uint32_t len, bool fua,
			 zl_nbd_io_cb cb, void *arg)
{
	return zl_vol_aio_write(ctx, buf, off, len, fua ? 1 : 0, cb, arg);
}

static int nbd_vol_flush(void *ctx, zl_nbd_io_cb cb, void *arg)
{
	return zl_vol_aio_flush(ctx, cb, arg);
}

static int nbd_vol_discard(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	return zl_vol_aio_discard(ctx, off, len, cb, arg);
}

static int nbd_vol_write_zeroes(void *ctx, uint64_t off, uint32_t len, zl_nbd_io_cb cb, void *arg)
{
	return zl_vol_aio_write_zeroes(ctx, off, len, cb, arg);
}

static void *nbd_vol_buf_alloc(void *ctx, size_t len)
{
	return zl_vol_buf_alloc(ctx, len);
}

static void nbd_vol_buf_free(void *ctx, void *buf)
{
	zl_vol_buf_free(ctx, buf);
}

static const struct zl_nbd_backend_ops nbd_vol_ops = {
    .read = nbd_vol_read,
    .write = nbd_vol_write,
    .flush = nbd_vol_flush,
    .discard = nbd_vol_discard,
    .write_zeroes = nbd_vol_write_zeroes,
    .buf_alloc = nbd_vol_buf_alloc,
    .buf_free = nbd_vol_buf_free,
};

void zl_nbd_backend_vol(struct zl_vol *v, struct zl_nbd_backend *out)
{
	out->ops = &nbd_vol_ops;
	out->ctx = v;
	out->size = zl_vol_size(v);
}
