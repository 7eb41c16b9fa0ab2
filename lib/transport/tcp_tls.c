/* TLS for the TCP transport (docs/SECURITY.md, "Transport encryption"): the
 * transport's SSL_CTX built from its options, one SSL per connection, and
 * the non-blocking primitives tcp.c drives from the loop: handshake, read
 * and write, each returning "would block" with the epoll events OpenSSL
 * waits for instead of blocking.
 *
 * One SSL_CTX per transport serves both roles: connections it accepts are
 * servers (certificate and key from tls_cert/tls_key; the client is not
 * verified, its HELLO token authenticates it), connections it makes with
 * zl_xport_connect_tls are clients that verify the server's chain against
 * tls_ca and its SAN against tls_server_name or the address connected to.
 * TLS 1.3 preferred, 1.2 the minimum; no session tickets (no post-handshake
 * messages, nothing cached); kTLS requested (SSL_OP_ENABLE_KTLS) and used
 * when the kernel and the OpenSSL build have it, never required.
 */
#include "transport_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct xport_tls {
	SSL_CTX *ctx;
	bool server; /* certificate and key loaded: listeners speak TLS */
	bool client; /* CA loaded: zl_xport_connect_tls works */
	bool ktls_logged;
	/* Refused plaintext connections and failed handshakes, logged at
	 * most once a second each. */
	struct zl_ratelimit plain_rl;
	struct zl_ratelimit hs_rl;
};

/* The newest OpenSSL error as text ("" when the queue is empty); clears
 * the queue. */
static void tls_err_text(char *out, size_t len)
{
	unsigned long e = ERR_peek_last_error();

	out[0] = 0;
	if (e) {
		const char *r = ERR_reason_error_string(e);

		if (r)
			snprintf(out, len, "%s", r);
		else
			ERR_error_string_n(e, out, len);
	}
	ERR_clear_error();
}

bool xport_tls_server(const struct zl_xport *x)
{
	return x->tls && x->tls->server;
}

bool xport_tls_client(const struct zl_xport *x)
{
	return x->tls && x->tls->client;
}

int xport_tls_init(struct zl_xport *x)
{
	const struct zl_xport_opts *o = &x->opts;
	struct xport_tls *t;
	char why[256];

	/* "" is unset, as an empty environment variable or flag value. */
	if (o->tls_cert && !*o->tls_cert)
		x->opts.tls_cert = NULL;
	if (o->tls_key && !*o->tls_key)
		x->opts.tls_key = NULL;
	if (o->tls_ca && !*o->tls_ca)
		x->opts.tls_ca = NULL;
	if (!o->tls_cert && !o->tls_key && !o->tls_ca)
		return 0;
	if (!o->tls_cert != !o->tls_key) {
		ZL_LOG_ERR("xport", "TLS needs both a certificate and its key (got %s only); pass "
				    "--tls-cert and --tls-key together",
			   o->tls_cert ? "the certificate" : "the key");
		return -ZL_ERR_INVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ctx = SSL_CTX_new(TLS_method());
	if (!t->ctx)
		goto out_ssl;
	if (!SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION))
		goto out_ssl;
	/* A peer that closes without close_notify is a closed connection, as
	 * on plain TCP: every frame carries its own length, so a truncation
	 * cannot pass for a shorter message. */
	SSL_CTX_set_options(t->ctx, SSL_OP_ENABLE_KTLS | SSL_OP_NO_RENEGOTIATION |
					SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* Partial writes: SSL_write returns after each record, so tcp.c
	 * accounts progress like a socket write; the buffer may move between
	 * retries (tcp.c rebuilds it from the send queue, same bytes first). */
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_clear_mode(t->ctx, SSL_MODE_AUTO_RETRY);
	/* Read ahead through a 64 KiB buffer: one read() takes several
	 * records, not two per record (header, then body). What it holds
	 * beyond the record being read is SSL_has_pending for tcp.c. The
	 * buffer is allocated once per connection, at the handshake. */
	SSL_CTX_set_read_ahead(t->ctx, 1);
	SSL_CTX_set_default_read_buffer_len(t->ctx, 64u << 10);
	SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(t->ctx, 0);
	if (o->tls_cert) {
		if (SSL_CTX_use_certificate_chain_file(t->ctx, o->tls_cert) != 1) {
			tls_err_text(why, sizeof(why));
			ZL_LOG_ERR("xport",
				   "cannot load the TLS certificate %s: %s; pass a PEM certificate "
				   "(chain) with --tls-cert",
				   o->tls_cert, why);
			goto out_inval;
		}
		if (SSL_CTX_use_PrivateKey_file(t->ctx, o->tls_key, SSL_FILETYPE_PEM) != 1) {
			tls_err_text(why, sizeof(why));
			ZL_LOG_ERR("xport",
				   "cannot load the TLS key %s: %s; pass the PEM key of --tls-cert "
				   "with --tls-key",
				   o->tls_key, why);
			goto out_inval;
		}
		if (SSL_CTX_check_private_key(t->ctx) != 1) {
			tls_err_text(why, sizeof(why));
			ZL_LOG_ERR("xport",
				   "TLS key %s does not belong to certificate %s: %s; pass the "
				   "matching pair",
				   o->tls_key, o->tls_cert, why);
			goto out_inval;
		}
		t->server = true;
	}
	if (o->tls_ca) {
		if (SSL_CTX_load_verify_locations(t->ctx, o->tls_ca, NULL) != 1) {
			tls_err_text(why, sizeof(why));
			ZL_LOG_ERR("xport",
				   "cannot load the TLS CA %s: %s; pass the cluster's CA "
				   "certificate (PEM) with --tls-ca or ZIPLINE_TLS_CA",
				   o->tls_ca, why);
			goto out_inval;
		}
		t->client = true;
	}
	x->tls = t;
	return 0;

out_ssl:
	tls_err_text(why, sizeof(why));
	ZL_LOG_ERR("xport", "cannot set up TLS: %s", why);
	SSL_CTX_free(t->ctx);
	free(t);
	return -ENOMEM;
out_inval:
	SSL_CTX_free(t->ctx);
	free(t);
	return -ZL_ERR_INVAL;
}

void xport_tls_fini(struct zl_xport *x)
{
	if (!x->tls)
		return;
	SSL_CTX_free(x->tls->ctx);
	free(x->tls);
	x->tls = NULL;
}

int xport_tls_new(struct zl_xport *x, int fd, bool server, const char *host, SSL **out)
{
	const char *name = x->opts.tls_server_name;
	SSL *ssl;

	ssl = SSL_new(x->tls->ctx);
	if (!ssl)
		return -ENOMEM;
	if (SSL_set_fd(ssl, fd) != 1)
		goto out_free;
	if (server) {
		SSL_set_accept_state(ssl);
		*out = ssl;
		return 0;
	}
	SSL_set_connect_state(ssl);
	SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
	if (name && *name) {
		/* One cluster-wide name in every server certificate. */
		if (SSL_set1_host(ssl, name) != 1 || SSL_set_tlsext_host_name(ssl, name) != 1)
			goto out_free;
	} else {
		struct in6_addr a6;
		struct in_addr a4;

		/* The address connected to, in the certificate's SAN. */
		if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
			if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
				goto out_free;
		} else if (SSL_set1_host(ssl, host) != 1 ||
			   SSL_set_tlsext_host_name(ssl, host) != 1) {
			goto out_free;
		}
	}
	*out = ssl;
	return 0;

out_free:
	ERR_clear_error();
	SSL_free(ssl);
	return -ENOMEM;
}

void xport_tls_free(SSL *ssl, bool notify)
{
	if (!ssl)
		return;
	/* close_notify, best effort: never waits for the peer's. */
	if (notify && SSL_is_init_finished(ssl))
		SSL_shutdown(ssl);
	ERR_clear_error();
	SSL_free(ssl);
}

/* What a non-blocking SSL call returned (ret <= 0): 0 with *want set for
 * "try again when the socket is ready", -1 when the peer closed, else
 * -ZL_ERR_TLS with the reason in why. */
static int tls_result(SSL *ssl, int ret, uint32_t *want, char *why, size_t why_len)
{
	int e = SSL_get_error(ssl, ret);
	long v;

	switch (e) {
	case SSL_ERROR_WANT_READ:
		*want = EPOLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*want = EPOLLOUT;
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		ERR_clear_error();
		snprintf(why, why_len, "connection closed by the peer");
		return -1;
	case SSL_ERROR_SYSCALL:
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
			ERR_clear_error();
			*want = EPOLLIN;
			return 0;
		}
		if (!ERR_peek_last_error()) {
			snprintf(why, why_len, "%s",
				 errno ? strerror(errno) : "connection closed by the peer");
			return errno ? -ZL_ERR_TLS : -1;
		}
		/* fall through */
	default:
		v = SSL_get_verify_result(ssl);
		if (v != X509_V_OK) {
			snprintf(why, why_len, "certificate verify failed: %s",
				 X509_verify_cert_error_string(v));
			ERR_clear_error();
		} else {
			tls_err_text(why, why_len);
			if (!why[0])
				snprintf(why, why_len, "TLS error %d", e);
		}
		return -ZL_ERR_TLS;
	}
}

int xport_tls_handshake(SSL *ssl, uint32_t *want, char *why, size_t why_len)
{
	int ret;

	ERR_clear_error();
	errno = 0; /* SSL_ERROR_SYSCALL reads it */
	ret = SSL_do_handshake(ssl);
	if (ret == 1)
		return 1;
	ret = tls_result(ssl, ret, want, why, why_len);
	if (ret == -1) {
		snprintf(why, why_len, "the peer closed the connection during the handshake");
		return -ZL_ERR_TLS;
	}
	return ret;
}

ssize_t xport_tls_read(SSL *ssl, void *buf, size_t len, uint32_t *want, char *why, size_t why_len)
{
	size_t n = 0;
	int ret;

	ERR_clear_error();
	errno = 0;
	ret = SSL_read_ex(ssl, buf, len, &n);
	if (ret == 1)
		return (ssize_t)n;
	return tls_result(ssl, ret, want, why, why_len);
}

ssize_t xport_tls_write(SSL *ssl, const void *buf, size_t len, uint32_t *want, char *why,
			size_t why_len)
{
	size_t n = 0;
	int ret;

	ERR_clear_error();
	errno = 0;
	ret = SSL_write_ex(ssl, buf, len, &n);
	if (ret == 1)
		return (ssize_t)n;
	ret = tls_result(ssl, ret, want, why, why_len);
	return ret == -1 ? -ZL_ERR_CONN : ret;
}

bool xport_tls_pending(SSL *ssl)
{
	return SSL_has_pending(ssl);
}

void xport_tls_established(struct zl_xport *x, SSL *ssl, const char *peer)
{
	struct xport_tls *t = x->tls;

	ZL_LOG_DEBUG("xport", "TLS established peer=%s version=%s cipher=%s", peer,
		     SSL_get_version(ssl), SSL_get_cipher_name(ssl));
	if (t->ktls_logged)
		return;
	t->ktls_logged = true;
	/* Once per transport: at info for a daemon's (serving) transport, at
	 * debug for a client's, whose stderr is the user's. */
	ZL_LOG_(t->server ? ZL_LOG_LVL_INFO : ZL_LOG_LVL_DEBUG, "xport",
		"TLS up version=%s cipher=%s ktls_send=%s ktls_recv=%s%s",
		    SSL_get_version(ssl), SSL_get_cipher_name(ssl),
		    BIO_get_ktls_send(SSL_get_wbio(ssl)) ? "yes" : "no",
		    BIO_get_ktls_recv(SSL_get_rbio(ssl)) ? "yes" : "no",
		    BIO_get_ktls_send(SSL_get_wbio(ssl))
			? ""
			: " (kTLS not in use: needs the kernel tls module and an OpenSSL built "
			  "with it; user-space TLS works the same)");
}

/* Per thread, like the loop that makes the connections. */
static _Thread_local char xport_tls_last[384];

void xport_tls_note(const char *msg)
{
	snprintf(xport_tls_last, sizeof(xport_tls_last), "%s", msg);
}

const char *zl_xport_tls_last_error(void)
{
	return xport_tls_last;
}

bool xport_tls_plain_log_ok(struct zl_xport *x)
{
	return zl_ratelimit_ok(&x->tls->plain_rl, 1);
}

bool xport_tls_hs_log_ok(struct zl_xport *x)
{
	return zl_ratelimit_ok(&x->tls->hs_rl, 1);
}
