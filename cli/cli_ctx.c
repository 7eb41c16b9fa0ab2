/* zl runtime context: etcd connection, event loop and volume client, with
 * the error messages every command shares. */
#include "cli.h"

#include <errno.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/client/client.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/meta/zl_auth.h"
#include "lib/transport/transport.h"

void zl_cli_err(const char *fmt, ...)
{
	va_list ap;

	fputs("zl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char *cli_etcd_hint(const struct zl_cli *cli)
{
	switch (cli->etcd_src) {
	case ZL_CLI_ETCD_FLAG:
		return "check the --etcd URL";
	case ZL_CLI_ETCD_ENV:
		return "check ZIPLINE_ETCD or pass --etcd";
	case ZL_CLI_ETCD_LOCAL:
		return "the local cluster looks stopped: start it with 'make run' or pass --etcd";
	default:
		return "start the cluster with 'make run' or pass --etcd";
	}
}

/* One line: what failed, the endpoints (unless the detail names them
 * already), the detail, and the hint for where the endpoints came from. */
static void cli_etcd_unreachable(struct zl_cli *cli, const char *what, int rc, const char *detail)
{
	char pre[320] = "";

	if (what)
		snprintf(pre, sizeof(pre), "%s: ", what);
	if (!detail || !*detail)
		detail = zl_strerror(rc);
	if (strstr(detail, cli->etcd_urls))
		zl_cli_err("%scannot reach etcd: %s (%s)", pre, detail, cli_etcd_hint(cli));
	else
		zl_cli_err("%scannot reach etcd at %s: %s (%s)", pre, cli->etcd_urls, detail,
			   cli_etcd_hint(cli));
}

void zl_cli_etcd_err(struct zl_cli *cli, const char *what, int rc)
{
	const char *detail = zl_etcd_last_error();

	if (rc == -ZL_ERR_ETCD || rc == -ZL_ERR_TIMEOUT)
		cli_etcd_unreachable(cli, what, rc, detail);
	else if (rc == -ZL_ERR_AUTH)
		zl_cli_err("%s: etcd at %s refused the credentials", what, cli->etcd_urls);
	else
		zl_cli_err("%s: %s", what, zl_strerror(rc));
}

int zl_cli_etcd(struct zl_cli *cli)
{
	struct zl_etcd_opts o = {0};
	char err[4400];
	int rc;

	if (cli->etcd)
		return 0;
	rc = zl_cli_etcd_discover(cli->g.etcd, getenv("ZIPLINE_ETCD"), NULL, cli->etcd_urls,
				  sizeof(cli->etcd_urls), &cli->etcd_src, err, sizeof(err));
	if (rc) {
		zl_cli_err("%s", err);
		return ZL_CLI_EXIT_RUNTIME;
	}
	o.endpoints = cli->etcd_urls;
	o.timeout_ms = 5000;
	rc = zl_etcd_create(&o, &cli->etcd);
	if (rc) {
		zl_cli_err("bad etcd endpoints '%s': %s (use http://HOST:PORT[,...])",
			   cli->etcd_urls, zl_strerror(rc));
		return rc == -ZL_ERR_INVAL ? ZL_CLI_EXIT_USAGE : ZL_CLI_EXIT_RUNTIME;
	}
	rc = zl_etcd_ping(cli->etcd);
	if (rc) {
		cli_etcd_unreachable(cli, NULL, rc, zl_etcd_last_error());
		zl_etcd_destroy(cli->etcd);
		cli->etcd = NULL;
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}

int zl_cli_cluster_key(struct zl_cli *cli, char *out)
{
	const char *file = getenv("ZIPLINE_CLUSTER_KEY_FILE");
	char key[512];
	int rc;

	if (file && *file) {
		rc = zl_auth_cluster_key_file(file, out);
		if (rc)
			zl_cli_err("cannot read the cluster key from $ZIPLINE_CLUSTER_KEY_FILE=%s: "
				   "%s",
				   file, zl_strerror(rc));
		return rc ? ZL_CLI_EXIT_RUNTIME : 0;
	}
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_auth_cluster_key_etcd(cli->etcd, cli->prefix, true, out);
	if (rc) {
		zl_meta_key(key, sizeof(key), cli->prefix, "keys", "cluster");
		zl_cli_err("cannot read the cluster key %s from etcd: %s; zl talks to storage as "
			   "an operator and needs operator access to etcd (read and create %s), "
			   "or $ZIPLINE_CLUSTER_KEY_FILE",
			   key, zl_strerror(rc), key);
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}

int zl_cli_client(struct zl_cli *cli)
{
	struct zl_client_opts o = {0};
	char ckey[ZL_AUTH_KEY_HEX + 1];
	uint32_t spin = 0;
	int rc;

	if (cli->client)
		return 0;
	rc = zl_cli_etcd(cli);
	if (rc)
		return rc;
	rc = zl_cli_cluster_key(cli, ckey);
	if (rc)
		return rc;
	o.cluster_key = ckey;
	{
		/* --transport, else $ZIPLINE_TRANSPORT, else auto. */
		const char *t = cli->g.transport;
		const char *what = "--transport";

		if (!t && getenv("ZIPLINE_TRANSPORT") && *getenv("ZIPLINE_TRANSPORT")) {
			t = getenv("ZIPLINE_TRANSPORT");
			what = "$ZIPLINE_TRANSPORT";
		}
		if (t && zl_xport_select_parse(t, &o.transport)) {
			zl_cli_err("bad %s '%s': use auto, tcp or rdma", what, t);
			return ZL_CLI_EXIT_USAGE;
		}
	}
	if (cli->g.io_timeout &&
	    zl_cli_parse_u32(cli->g.io_timeout, 1, ZL_CLI_IO_TIMEOUT_MAX, &o.io_timeout_s)) {
		zl_cli_err("bad --io-timeout '%s': seconds, 1..%u", cli->g.io_timeout,
			   ZL_CLI_IO_TIMEOUT_MAX);
		return ZL_CLI_EXIT_USAGE;
	}
	o.legacy_drop = cli->g.legacy_drop;
	o.tls_ca = cli->g.tls_ca; /* NULL: lib/client reads the environment */
	o.tls_server_name = cli->g.tls_server_name;
	if (cli->g.busy_poll && zl_cli_parse_u32(cli->g.busy_poll, 0, ZL_CLI_BUSY_POLL_MAX, &spin)) {
		zl_cli_err("bad --busy-poll '%s': microseconds, 0..%u", cli->g.busy_poll,
			   ZL_CLI_BUSY_POLL_MAX);
		return ZL_CLI_EXIT_USAGE;
	}
	rc = zl_loop_create(&cli->loop);
	if (rc) {
		zl_cli_err("cannot create the event loop: %s", zl_strerror(rc));
		return ZL_CLI_EXIT_RUNTIME;
	}
	zl_loop_set_busy_poll(cli->loop, spin);
	o.prefix = cli->prefix;
	o.max_io = cli->client_max_io;
	rc = zl_client_create(cli->loop, cli->etcd, &o, &cli->client);
	explicit_bzero(ckey, sizeof(ckey));
	if (rc) {
		zl_cli_err("cannot start the volume client: %s", zl_strerror(rc));
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}

int zl_cli_vol_open(struct zl_cli *cli, const char *name, struct zl_vol **out)
{
	int rc = zl_cli_client(cli);

	if (rc)
		return rc;
	rc = zl_vol_open(cli->client, name, out);
	if (rc == -ZL_ERR_NOT_FOUND) {
		zl_cli_err("volume '%s' not found (see 'zl volume ls')", name);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc == -ZL_ERR_ETCD || rc == -ZL_ERR_TIMEOUT) {
		char what[300];

		snprintf(what, sizeof(what), "cannot open volume '%s'", name);
		zl_cli_etcd_err(cli, what, rc);
		return ZL_CLI_EXIT_RUNTIME;
	}
	if (rc) {
		zl_cli_err("cannot open volume '%s': %s (check 'zl status' for storage nodes)",
			   name, zl_strerror(rc));
		return ZL_CLI_EXIT_RUNTIME;
	}
	return 0;
}

void zl_cli_fini(struct zl_cli *cli)
{
	zl_client_destroy(cli->client);
	cli->client = NULL;
	zl_loop_destroy(cli->loop);
	cli->loop = NULL;
	zl_etcd_destroy(cli->etcd);
	cli->etcd = NULL;
}

int zl_cli_opt_error(const char *cmd, int c, int opt, char **argv, int optind_now)
{
	const char *arg = optind_now > 0 ? argv[optind_now - 1] : "?";

	if (c == ':')
		zl_cli_err("flag '%s' of '%s' needs a value (see 'zl %s --help')", arg, cmd, cmd);
	else if (opt)
		zl_cli_err("unknown flag '-%c' for '%s' (see 'zl %s --help')", opt, cmd, cmd);
	else
		zl_cli_err("unknown flag '%s' for '%s' (see 'zl %s --help')", arg, cmd, cmd);
	return ZL_CLI_EXIT_USAGE;
}

void zl_cli_fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!t || !gmtime_r(&tt, &tm)) {
		snprintf(buf, len, "-");
		return;
	}
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void zl_cli_fmt_duration(int64_t sec, char *buf, size_t len)
{
	if (sec < 0)
		snprintf(buf, len, "-");
	else if (sec < 120)
		snprintf(buf, len, "%llds", (long long)sec);
	else if (sec < 7200)
		snprintf(buf, len, "%lldm%02llds", (long long)(sec / 60), (long long)(sec % 60));
	else if (sec < 172800)
		snprintf(buf, len, "%lldh%02lldm", (long long)(sec / 3600),
			 (long long)(sec % 3600 / 60));
	else
		snprintf(buf, len, "%lldd%02lldh", (long long)(sec / 86400),
			 (long long)(sec % 86400 / 3600));
}
