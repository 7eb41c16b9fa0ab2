/* The credentials of the raw e2e tools (storage --auth on,
 * docs/SECURITY.md). By default the cluster token of self_id, derived from
 * the key in $ZIPLINE_CLUSTER_KEY_FILE or <prefix>keys/cluster at
 * $ZIPLINE_ETCD (created when absent, as zl does). ZL_E2E_NOAUTH=1: no
 * token (what an outsider sends). ZL_E2E_TOKEN=<attach token> with
 * ZL_E2E_EPOCH and ZL_E2E_VOL (volume number, hex): a client HELLO with
 * that token instead, as node $ZL_E2E_NODE when set. */
#ifndef ZL_E2E_CRED_H
#define ZL_E2E_CRED_H

#include <stdio.h>
#include <stdlib.h>

#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/meta/zl_auth.h"
#include "lib/transport/xport_hello.h"

/* TLS of the raw e2e tools (docs/SECURITY.md): the CA in $ZIPLINE_TLS_CA
 * (and $ZIPLINE_TLS_SERVER_NAME), as lib/client reads them. The tools that
 * take HOST PORT instead of a node id connect with TLS exactly when
 * $ZIPLINE_TLS_CA is set. */
static inline bool e2e_tls_opts(struct zl_xport_opts *xo)
{
	const char *ca = getenv("ZIPLINE_TLS_CA");

	xo->tls_ca = ca && *ca ? ca : NULL;
	xo->tls_server_name = getenv("ZIPLINE_TLS_SERVER_NAME");
	return xo->tls_ca != NULL;
}

/* Connects to HOST PORT, over TLS when $ZIPLINE_TLS_CA is set. */
static inline int e2e_connect(struct zl_xport *x, bool tls, const char *host, uint16_t port,
			      zl_xport_close_cb cb, struct zl_xport_conn **out)
{
	return tls ? zl_xport_connect_tls(x, host, port, 3000, cb, NULL, out)
		   : zl_xport_connect(x, host, port, 3000, cb, NULL, out);
}

static inline int e2e_cred_cluster(const char *self_id, char tok[ZL_AUTH_TOKEN_HEX + 1],
				   struct zl_xport_cred *cred)
{
	const char *noauth = getenv("ZL_E2E_NOAUTH"), *file = getenv("ZIPLINE_CLUSTER_KEY_FILE");
	const char *url = getenv("ZIPLINE_ETCD");
	struct zl_etcd_opts eo = {.endpoints = url, .timeout_ms = 5000};
	struct zl_etcd *e = NULL;
	char key[ZL_AUTH_KEY_HEX + 1];
	int rc;

	if ((noauth && *noauth == '1') || (!(file && *file) && !(url && *url)))
		return 0;
	if (!(file && *file) && zl_etcd_create(&eo, &e)) {
		fprintf(stderr, "e2e: bad $ZIPLINE_ETCD %s\n", url);
		return -1;
	}
	rc = zl_auth_cluster_key_load(e, ZL_META_DEFAULT_PREFIX, file, true, key);
	zl_etcd_destroy(e);
	if (!rc)
		rc = zl_auth_cluster_token(key, self_id, tok);
	if (rc) {
		fprintf(stderr, "e2e: no cluster key: %s\n", zl_strerror(rc));
		return -1;
	}
	cred->token = tok;
	cred->cluster = true;
	return 0;
}

/* Fills cred (token in tok; *self_id may change). 0, or -1 after saying
 * why on stderr. */
static inline int e2e_cred(const char **self_id, char tok[ZL_AUTH_TOKEN_HEX + 1],
			   struct zl_xport_cred *cred)
{
	const char *atok = getenv("ZL_E2E_TOKEN");

	*cred = (struct zl_xport_cred){0};
	if (atok && *atok) {
		const char *ep = getenv("ZL_E2E_EPOCH"), *vol = getenv("ZL_E2E_VOL");
		const char *node = getenv("ZL_E2E_NODE");

		snprintf(tok, ZL_AUTH_TOKEN_HEX + 1, "%s", atok);
		cred->token = tok;
		cred->epoch = ep ? strtoull(ep, NULL, 0) : 0;
		cred->vol_id = vol ? strtoull(vol, NULL, 16) : 0;
		if (node && *node)
			*self_id = node;
		return 0;
	}
	return e2e_cred_cluster(*self_id, tok, cred);
}

#endif
