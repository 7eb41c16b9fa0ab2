/* Plain blocking TCP helpers of the hand-made wire tools (e2e_outsider,
 * e2e_flood): no lib/transport, so what they send is exactly what they
 * encoded. Include after lib/wire/wire.h. */
#ifndef ZL_E2E_SOCK_H
#define ZL_E2E_SOCK_H

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* HELLO caps bits (lib/transport/xport_hello.h and docs/SECURITY.md); kept
 * here so the tools need nothing but lib/wire. */
#ifndef ZL_WIRE_CAP_TCP
#define ZL_WIRE_CAP_TCP (1u << 0)
#endif
#ifndef ZL_WIRE_CAP_CLUSTER
#define ZL_WIRE_CAP_CLUSTER (1u << 8)
#endif

#define E2E_SOCK_CLOSED 1  /* the peer closed the connection (or reset it) */
#define E2E_SOCK_TIMEOUT 2 /* nothing within the socket's receive timeout */

/* Connects to host:port; the fd, or -1 after saying why on stderr as prog. */
static inline int e2e_sock_connect(const char *prog, const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai, *p;
	int fd = -1, rc;

	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc) {
		fprintf(stderr, "%s: cannot resolve %s:%s: %s\n", prog, host, port,
			gai_strerror(rc));
		return -1;
	}
	for (p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
		if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) == 0)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (fd < 0)
		fprintf(stderr, "%s: connect %s:%s failed: %s\n", prog, host, port,
			strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

/* Sends n bytes: 0, or E2E_SOCK_CLOSED. */
static inline int e2e_sock_send(int fd, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return E2E_SOCK_CLOSED;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Receives exactly n bytes: 0, E2E_SOCK_CLOSED or E2E_SOCK_TIMEOUT. */
static inline int e2e_sock_recv(int fd, void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t k = recv(fd, p, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return E2E_SOCK_TIMEOUT;
		if (k <= 0)
			return E2E_SOCK_CLOSED;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

#endif
