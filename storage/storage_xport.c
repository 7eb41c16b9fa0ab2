/* The transports zipline-storage serves (--transport): TCP always, RDMA
 * when asked for and available. */
#include <errno.h>
#include <stdio.h>

#include "storage_ctl.h"
#include "storage_io.h"

int zl_storage_xports_create(struct zl_storage *st)
{
	/* Forwarded writes time out well before a client gives up on the
	 * primary (its default is 10 s), so a hung backup is dropped in time. */
	struct zl_xport_opts xo = {.kind = ZL_XPORT_TCP,
				   .timeout_ms = 4000,
				   .tls_cert = st->cfg.tls_cert,
				   .tls_key = st->cfg.tls_key,
				   .tls_ca = st->cfg.tls_ca,
				   .tls_server_name = st->cfg.tls_server_name};
	const char *host = st->cfg.listen_host;
	bool wildcard = zl_storage_host_is_wildcard(host);
	enum zl_xport_kind kind = ZL_XPORT_TCP;
	const char *why = NULL;
	int rc;

	if (zl_xport_select_parse(st->cfg.transport, &st->sel))
		return -ZL_ERR_INVAL;
	rc = zl_xport_create(st->loop, &xo, &st->xport_tcp);
	if (rc)
		return rc;
	st->xport = st->xport_tcp;
	if (st->sel == ZL_XPORT_SEL_TCP)
		return 0;
	if (!wildcard) {
		/* "auto" for our own address: does rdma_cm find a device that
		 * owns it? */
		zl_xport_select_kind(ZL_XPORT_SEL_AUTO, host, st->cfg.listen_port, 2000, &kind);
		if (kind != ZL_XPORT_RDMA)
			why = "no RDMA device has this address";
	}
	if (!why) {
		/* RDMA is not encrypted (docs/SECURITY.md): no TLS options. */
		xo = (struct zl_xport_opts){.kind = ZL_XPORT_RDMA, .timeout_ms = xo.timeout_ms};
		rc = zl_xport_create(st->loop, &xo, &st->xport_rdma);
		if (rc == -EPROTONOSUPPORT)
			why = "this build has no RDMA support (rdma-core was missing)";
		else if (rc == -ENODEV)
			why = "no RDMA device found";
		else if (rc)
			return rc;
	}
	if (why) {
		st->xport_rdma = NULL;
		if (st->sel == ZL_XPORT_SEL_RDMA) {
			fprintf(stderr,
				"zipline-storage: --transport rdma but RDMA is not available for "
				"--listen %s: %s (load the driver, e.g. rdma_rxe for Soft-RoCE, "
				"listen on the device's address, or use --transport auto|tcp)\n",
				host, why);
			return -ENODEV;
		}
		ZL_LOG_INFO("storage",
			    "serving TCP only: RDMA not available listen=%s reason=\"%s\"", host,
			    why);
		return 0;
	}
	st->xport = st->xport_rdma;
	return 0;
}
