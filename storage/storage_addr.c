/* The address zipline-storage registers in etcd when --advertise is not
 * given: the listen host, or, for a wildcard listen address (0.0.0.0, ::),
 * the address of the interface that carries the default route. Never a
 * loopback guess: other nodes and clients would connect to themselves. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_ctl.h"

#define ROUTE_RTF_UP	 0x0001u
#define ROUTE_RTF_REJECT 0x0200u

bool zl_storage_host_is_wildcard(const char *host)
{
	return !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !strcmp(host, "[::]");
}

int zl_storage_route_default_if(FILE *f, bool ipv6, char ifname[IF_NAMESIZE])
{
	char line[512];
	uint32_t best_metric = UINT32_MAX;
	bool found = false;

	while (fgets(line, sizeof(line), f)) {
		char ifn[IF_NAMESIZE], dst[40], plen[4], src[40], splen[4], hop[40];
		unsigned int flags, metric, refcnt, use, dst4, gw4, mask4;
		bool deflt;

		if (ipv6) {
			/* dest plen src src_plen next_hop metric refcnt use flags ifname */
			if (sscanf(line, "%32s %2s %32s %2s %32s %x %x %x %x %15s", dst, plen, src,
				   splen, hop, &metric, &refcnt, &use, &flags, ifn) != 10)
				continue;
			deflt = !strcmp(plen, "00") && strspn(dst, "0") == strlen(dst);
		} else {
			/* Iface Destination Gateway Flags RefCnt Use Metric Mask ... */
			if (sscanf(line, "%15s %x %x %x %u %u %u %x", ifn, &dst4, &gw4, &flags,
				   &refcnt, &use, &metric, &mask4) != 8)
				continue;
			deflt = dst4 == 0 && mask4 == 0;
		}
		if (!deflt || !(flags & ROUTE_RTF_UP) || (flags & ROUTE_RTF_REJECT) ||
		    !strcmp(ifn, "lo"))
			continue;
		if (!found || metric < best_metric) {
			snprintf(ifname, IF_NAMESIZE, "%s", ifn);
			best_metric = metric;
			found = true;
		}
	}
	return found ? 0 : -ENOENT;
}

/* First usable address of family af on interface ifname (IPv6: not
 * link-local). 0 or -ENOENT. */
static int addr_of_if(const char *ifname, int af, char *out, size_t len)
{
	struct ifaddrs *ifa, *p;
	int rc = -ENOENT;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (p = ifa; p && rc; p = p->ifa_next) {
		const void *a;

		if (!p->ifa_addr || p->ifa_addr->sa_family != af || strcmp(p->ifa_name, ifname))
			continue;
		if (af == AF_INET) {
			a = &((const struct sockaddr_in *)(const void *)p->ifa_addr)->sin_addr;
		} else {
			const struct in6_addr *a6 =
			    &((const struct sockaddr_in6 *)(const void *)p->ifa_addr)->sin6_addr;

			if (IN6_IS_ADDR_LINKLOCAL(a6) || IN6_IS_ADDR_LOOPBACK(a6))
				continue;
			a = a6;
		}
		if (inet_ntop(af, a, out, (socklen_t)len))
			rc = 0;
	}
	freeifaddrs(ifa);
	return rc;
}

/* Address of the default route's interface for family af, from route_path
 * (/proc/net/route or /proc/net/ipv6_route). 0 or -ENOENT. */
static int addr_default(const char *route_path, int af, char *out, size_t len, char *ifname)
{
	FILE *f = fopen(route_path, "r");
	int rc;

	if (!f)
		return -ENOENT;
	rc = zl_storage_route_default_if(f, af == AF_INET6, ifname);
	fclose(f);
	return rc ? rc : addr_of_if(ifname, af, out, len);
}

int zl_storage_advertise_pick(const char *listen_host, const char *route_path,
			      const char *route6_path, char *out, size_t len)
{
	char ifname[IF_NAMESIZE] = "";
	bool v6 = strcmp(listen_host, "0.0.0.0") != 0;

	if (!zl_storage_host_is_wildcard(listen_host)) {
		if (strlen(listen_host) >= len)
			return -ENAMETOOLONG;
		snprintf(out, len, "%s", listen_host);
		return 0;
	}
	/* [::] takes IPv4 too (dual stack): IPv4 first, the common case. */
	if (addr_default(route_path, AF_INET, out, len, ifname) == 0)
		return 0;
	if (v6 && addr_default(route6_path, AF_INET6, out, len, ifname) == 0)
		return 0;
	fprintf(stderr,
		"zipline-storage: --listen %s is a wildcard address and %s, so there is no "
		"address to register for this node: pass --advertise ADDR (the address other "
		"nodes and clients reach it at)\n",
		listen_host,
		ifname[0] ? "the default route's interface has no address"
			  : "there is no default route");
	return -ENOENT;
}
