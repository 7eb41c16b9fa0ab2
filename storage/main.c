/* zipline-storage: flags, wiring, signals. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "storage_ctl.h"
#include "storage_heal.h"
#include "storage_io.h"

#define DRAIN_MS 10000

static const char usage[] =
    "usage: zipline-storage --data-dir DIR [options]\n"
    "  --data-dir DIR       chunk replicas, node-id, identity and LOCK live\n"
    "                       here (required)\n"
    "  --listen HOST:PORT   address to serve on (default 0.0.0.0:7100)\n"
    "  --advertise ADDR     address registered in etcd (default: the listen host;\n"
    "                       for 0.0.0.0 or ::, the address of the interface of the\n"
    "                       default route; no default route: start-up fails)\n"
    "  --node-id ID         node id (default: DATA/node-id, else the hostname)\n"
    "  --label K=V          failure-domain label, repeatable (zone=a --label rack=r1)\n"
    "  --etcd URLS          etcd endpoints (default $ZIPLINE_ETCD or http://127.0.0.1:2379)\n"
    "  --etcd-prefix P      key prefix (default /zipline/)\n"
    "  --etcd-wait SEC      how long to wait for etcd at start (default 60)\n"
    "  --etcd-cacert FILE   CA bundle for https etcd endpoints\n"
    "  --etcd-cert FILE     client certificate for etcd (with --etcd-key)\n"
    "  --etcd-key FILE      client key for etcd\n"
    "  --etcd-user USER     etcd user (with --etcd-password-file)\n"
    "  --etcd-password-file FILE  file holding the etcd password\n"
    "  --transport MODE     auto|tcp|rdma: transports to serve (default auto)\n"
    "  --capacity SIZE      capacity to advertise (default: the filesystem size)\n"
    "  --log-level LEVEL    err|warn|info|debug (default info)\n"
    "  --heal on|off        data versions, failure reports instead of dropping\n"
    "                       backups, recovery of RECOVERING members (default on,\n"
    "                       with zipline-controller --manager=on; off = 0.1)\n"
    "  --repl-wait SEC      heal: how long a write whose backup failed waits for\n"
    "                       the manager to take it out of the in-sync set (default 8)\n"
    "  --recovery-mbps N    heal: recovery copy rate, megabits/s (default 200)\n"
    "  --scrub-mbps N       scrub read rate, megabits/s (default 100)\n"
    "  --scrub-interval SEC background scrub of the slices this node is primary\n"
    "                       of, every SEC seconds (default 86400, 0 = off)\n"
    "  --gc-interval SEC    heal: look for old copies of slices moved off this node\n"
    "                       every SEC seconds (default 60, 0 = keep them)\n"
    "  --gc-grace SEC       heal: remove them once their row has not listed this node,\n"
    "                       all in sync, and no write of them came, for SEC seconds\n"
    "                       (default 600)\n"
    "  --auth on|off        check HELLO credentials: attach tokens of clients, the\n"
    "                       cluster token of peers and operators (default on;\n"
    "                       off only for a cluster of pre-auth callers,\n"
    "                       docs/SECURITY.md)\n"
    "  --cluster-key-file FILE  the cluster key (64 hex digits, e.g. a mounted\n"
    "                       Secret); default: <prefix>keys/cluster in etcd\n"
    "  --tls-cert FILE      TLS certificate (PEM) of the TCP listener, with\n"
    "                       --tls-key and --tls-ca: then the listener speaks TLS\n"
    "                       only and the node record says so (docs/SECURITY.md)\n"
    "  --tls-key FILE       its private key (PEM)\n"
    "  --tls-ca FILE        the cluster's CA: verifies peers that serve TLS\n"
    "  --tls-server-name N  name peer certificates carry (SAN DNS); default: the\n"
    "                       peer's advertised address must be in its SAN\n"
    "  --help, --version\n";

struct storage_main {
	struct zl_storage st;
	struct zl_loop_handle sig_h;
	int sig_fd;
	struct zl_timer drain_t;
	uint64_t drain_deadline;
};

static int bad_flag(const char *msg, const char *arg)
{
	fprintf(stderr, "zipline-storage: %s%s%s (see --help)\n", msg, arg ? ": " : "",
		arg ? arg : "");
	return 2;
}

/* Reads the first line of path into buf. 0 or -1. */
static int read_password(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -1;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = 0;
	return n ? 0 : -1;
}

/* Parses flags into cfg. Returns -1 to go on, else the exit code. */
static int parse_flags(int argc, char **argv, struct zl_storage_cfg *cfg, const char **node_flag)
{
	enum { O_LISTEN = 256, O_ADV, O_NODE, O_LABEL, O_ETCD, O_PREFIX, O_WAIT, O_CAP, O_LOG,
	       O_CACERT, O_CERT, O_KEY, O_USER, O_PWFILE, O_XPORT, O_HEAL, O_RWAIT, O_RMBPS,
	       O_SMBPS, O_SINT, O_GCINT, O_GCGRACE, O_AUTH, O_CKEY, O_TLS_CERT, O_TLS_KEY,
	       O_TLS_CA, O_TLS_NAME };
	static const struct option opts[] = {
	    {"data-dir", required_argument, NULL, 'd'},
	    {"listen", required_argument, NULL, O_LISTEN},
	    {"advertise", required_argument, NULL, O_ADV},
	    {"node-id", required_argument, NULL, O_NODE},
	    {"label", required_argument, NULL, O_LABEL},
	    {"etcd", required_argument, NULL, O_ETCD},
	    {"etcd-prefix", required_argument, NULL, O_PREFIX},
	    {"etcd-wait", required_argument, NULL, O_WAIT},
	    {"capacity", required_argument, NULL, O_CAP},
	    {"log-level", required_argument, NULL, O_LOG},
	    {"etcd-cacert", required_argument, NULL, O_CACERT},
	    {"etcd-cert", required_argument, NULL, O_CERT},
	    {"etcd-key", required_argument, NULL, O_KEY},
	    {"etcd-user", required_argument, NULL, O_USER},
	    {"etcd-password-file", required_argument, NULL, O_PWFILE},
	    {"transport", required_argument, NULL, O_XPORT},
	    {"heal", required_argument, NULL, O_HEAL},
	    {"repl-wait", required_argument, NULL, O_RWAIT},
	    {"recovery-mbps", required_argument, NULL, O_RMBPS},
	    {"scrub-mbps", required_argument, NULL, O_SMBPS},
	    {"scrub-interval", required_argument, NULL, O_SINT},
	    {"gc-interval", required_argument, NULL, O_GCINT},
	    {"gc-grace", required_argument, NULL, O_GCGRACE},
	    {"auth", required_argument, NULL, O_AUTH},
	    {"cluster-key-file", required_argument, NULL, O_CKEY},
	    {"tls-cert", required_argument, NULL, O_TLS_CERT},
	    {"tls-key", required_argument, NULL, O_TLS_KEY},
	    {"tls-ca", required_argument, NULL, O_TLS_CA},
	    {"tls-server-name", required_argument, NULL, O_TLS_NAME},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	const char *listen = "0.0.0.0:7100", *adv = NULL;
	char *colon, *end;
	long v;
	int c;

	cfg->etcd = getenv("ZIPLINE_ETCD");
	if (!cfg->etcd || !*cfg->etcd)
		cfg->etcd = "http://127.0.0.1:2379";
	cfg->prefix = ZL_META_DEFAULT_PREFIX;
	cfg->etcd_wait_sec = 60;
	cfg->repl_wait_ms = 8000; /* below the client's 10 s request timeout */
	cfg->recovery_mbps = 200;
	cfg->scrub_mbps = 100;
	cfg->scrub_interval_s = 86400;
	cfg->gc_interval_s = 60;
	cfg->gc_grace_s = 600;
	cfg->heal = true;
	cfg->auth = true; /* every caller sends credentials (docs/SECURITY.md) */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg->data_dir = optarg;
			break;
		case O_LISTEN:
			listen = optarg;
			break;
		case O_ADV:
			adv = optarg;
			break;
		case O_NODE:
			*node_flag = optarg;
			break;
		case O_LABEL:
			if (!strchr(optarg, '=') || optarg[0] == '=' || strchr(optarg, ','))
				return bad_flag("--label wants K=V without commas", optarg);
			if (strlen(cfg->domain) + strlen(optarg) + 2 > sizeof(cfg->domain))
				return bad_flag("labels too long", optarg);
			if (cfg->domain[0])
				strcat(cfg->domain, ",");
			strcat(cfg->domain, optarg);
			break;
		case O_ETCD:
			/* An empty value (an unset variable in a script) means "not
			 * given": $ZIPLINE_ETCD or the default applies. */
			if (*optarg)
				cfg->etcd = optarg;
			break;
		case O_PREFIX:
			if (!*optarg || optarg[strlen(optarg) - 1] != '/')
				return bad_flag("--etcd-prefix must end with '/'", optarg);
			cfg->prefix = optarg;
			break;
		case O_WAIT:
			v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 86400)
				return bad_flag("--etcd-wait wants seconds (0..86400)", optarg);
			cfg->etcd_wait_sec = (int)v;
			break;
		case O_CAP:
			if (zl_parse_size(optarg, &cfg->capacity) || !cfg->capacity)
				return bad_flag("--capacity wants a size like 100G", optarg);
			break;
		case O_LOG:
			if (zl_log_set_level(optarg))
				return bad_flag("--log-level wants err|warn|info|debug", optarg);
			break;
		case O_CACERT:
		case O_CERT:
		case O_KEY:
			if (access(optarg, R_OK))
				return bad_flag("cannot read etcd TLS file (check the path and permissions)",
						optarg);
			if (c == O_CACERT)
				cfg->etcd_cacert = optarg;
			else if (c == O_CERT)
				cfg->etcd_cert = optarg;
			else
				cfg->etcd_key = optarg;
			break;
		case O_USER:
			cfg->etcd_user = optarg;
			break;
		case O_PWFILE:
			if (read_password(optarg, cfg->etcd_password, sizeof(cfg->etcd_password)))
				return bad_flag("cannot read --etcd-password-file", optarg);
			break;
		case O_XPORT: {
			enum zl_xport_select sel;

			if (zl_xport_select_parse(optarg, &sel))
				return bad_flag("--transport wants auto|tcp|rdma", optarg);
			cfg->transport = optarg;
			break;
		}
		case O_HEAL:
			if (strcmp(optarg, "on") && strcmp(optarg, "off"))
				return bad_flag("--heal wants on or off", optarg);
			cfg->heal = !strcmp(optarg, "on");
			break;
		case O_AUTH:
			if (strcmp(optarg, "on") && strcmp(optarg, "off"))
				return bad_flag("--auth wants on or off", optarg);
			cfg->auth = !strcmp(optarg, "on");
			break;
		case O_CKEY:
			cfg->cluster_key_file = optarg;
			break;
		case O_TLS_CERT:
		case O_TLS_KEY:
		case O_TLS_CA:
			if (access(optarg, R_OK))
				return bad_flag(c == O_TLS_CERT  ? "cannot read --tls-cert"
						: c == O_TLS_KEY ? "cannot read --tls-key"
								 : "cannot read --tls-ca",
						optarg);
			*(c == O_TLS_CERT  ? &cfg->tls_cert
			  : c == O_TLS_KEY ? &cfg->tls_key
					   : &cfg->tls_ca) = optarg;
			break;
		case O_TLS_NAME:
			cfg->tls_server_name = optarg;
			break;
		case O_RWAIT:
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 86400)
				return bad_flag("--repl-wait wants seconds (1..86400)", optarg);
			cfg->repl_wait_ms = (uint32_t)v * 1000;
			break;
		case O_RMBPS:
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1000000)
				return bad_flag("--recovery-mbps wants megabits/s (1..1000000)",
						optarg);
			cfg->recovery_mbps = (uint32_t)v;
			break;
		case O_SMBPS:
		case O_SINT:
			v = strtol(optarg, &end, 10);
			if (*end || v < (c == O_SMBPS) || v > (c == O_SMBPS ? 1000000 : 31536000))
				return bad_flag(c == O_SMBPS ? "--scrub-mbps wants megabits/s "
							       "(1..1000000)"
							     : "--scrub-interval wants seconds "
							       "(0 = off)",
						optarg);
			*(c == O_SMBPS ? &cfg->scrub_mbps : &cfg->scrub_interval_s) = (uint32_t)v;
			break;
		case O_GCINT:
		case O_GCGRACE:
			v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 31536000)
				return bad_flag(c == O_GCINT
						    ? "--gc-interval wants seconds (0 = off)"
						    : "--gc-grace wants seconds",
						optarg);
			*(c == O_GCINT ? &cfg->gc_interval_s : &cfg->gc_grace_s) = (uint32_t)v;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("zipline-storage %s\n", ZL_VERSION_STRING);
			return 0;
		default:
			return bad_flag("unknown flag or missing value", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return bad_flag("unexpected argument", argv[optind]);
	if (!cfg->data_dir)
		return bad_flag("--data-dir is required", NULL);
	if (!cfg->etcd_user != !cfg->etcd_password[0])
		return bad_flag("--etcd-user and --etcd-password-file go together", NULL);
	if ((cfg->etcd_cert == NULL) != (cfg->etcd_key == NULL))
		return bad_flag("--etcd-cert and --etcd-key go together", NULL);
	/* A TLS node reaches its TLS peers (replication) with the same CA. */
	if ((cfg->tls_cert || cfg->tls_key) && !(cfg->tls_cert && cfg->tls_key && cfg->tls_ca))
		return bad_flag("--tls-cert, --tls-key and --tls-ca go together", NULL);
	if (!cfg->transport)
		cfg->transport = "auto";
	colon = strrchr(listen, ':');
	if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(cfg->listen_host))
		return bad_flag("--listen wants HOST:PORT", listen);
	v = strtol(colon + 1, &end, 10);
	if (*end || !colon[1] || v < 0 || v > 65535)
		return bad_flag("--listen port must be 0..65535", listen);
	memcpy(cfg->listen_host, listen, (size_t)(colon - listen));
	cfg->listen_port = (uint16_t)v;
	if (!adv)
		return zl_storage_advertise_pick(cfg->listen_host, "/proc/net/route",
						 "/proc/net/ipv6_route", cfg->advertise,
						 sizeof(cfg->advertise))
			   ? 2
			   : -1;
	if (strlen(adv) >= sizeof(cfg->advertise))
		return bad_flag("--advertise too long", adv);
	snprintf(cfg->advertise, sizeof(cfg->advertise), "%s", adv);
	return -1;
}

static void drain_tick(void *arg)
{
	struct storage_main *m = arg;

	if (m->st.inflight && zl_now_ms() < m->drain_deadline)
		return;
	if (m->st.inflight)
		ZL_LOG_WARN("storage", "shutdown: %u requests still in flight after %d ms",
			    m->st.inflight, DRAIN_MS);
	zl_timer_stop(m->st.loop, &m->drain_t);
	zl_loop_stop(m->st.loop);
}

static void on_signal(void *arg, uint32_t events)
{
	struct storage_main *m = arg;
	struct signalfd_siginfo si;

	if (read(m->sig_fd, &si, sizeof(si)) != (ssize_t)sizeof(si) || m->st.draining)
		return;
	ZL_LOG_INFO("storage", "signal %u: stopping (in-flight requests=%u)", si.ssi_signo,
		    m->st.inflight);
	zl_storage_server_stop_accepting(&m->st);
	m->drain_deadline = zl_now_ms() + DRAIN_MS;
	zl_timer_start(m->st.loop, &m->drain_t, 0, 50, drain_tick, m);
}

/* Creates the transports --transport asks for: TCP always; RDMA too with
 * "rdma" (required) or "auto" (when an RDMA device serves the listen
 * address; any device for a wildcard address). Returns 0, or -ENODEV after
 * printing why RDMA is not possible when it was required, or another error. */
static int storage_xports(struct zl_storage *st)
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

static void *pool_alloc(void *arg, size_t len)
{
	return zl_xport_buf_alloc(arg, len);
}

static void pool_free(void *arg, void *buf)
{
	zl_xport_buf_free(arg, buf);
}

int main(int argc, char **argv)
{
	static struct storage_main m = {.sig_fd = -1};
	struct zl_storage *st = &m.st;
	struct zl_storage_node *node = NULL;
	struct zl_etcd_opts eo = {0};
	const char *node_flag = NULL;
	int rc, lock_fd, ret = 1;
	sigset_t sigs;

	zl_log_init("zipline-storage");
	rc = parse_flags(argc, argv, &st->cfg, &node_flag);
	if (rc >= 0)
		return rc;
	lock_fd = zl_storage_datadir_lock(st->cfg.data_dir);
	if (lock_fd < 0)
		return 2;
	if (zl_storage_node_id_resolve(st->cfg.data_dir, node_flag, st->cfg.node_id))
		return 2;
	zl_storage_cfg_etcd_opts(&st->cfg, &eo);
	if (zl_etcd_create(&eo, &st->etcd))
		return bad_flag("bad --etcd endpoint list", st->cfg.etcd);
	if (zl_storage_etcd_wait(st->etcd, st->cfg.etcd, st->cfg.etcd_wait_sec))
		goto out_etcd;
	/* Before anything writes to the data dir: a dir of another cluster or
	 * node stays as it is. */
	rc = zl_storage_ident_resolve(st);
	if (rc) {
		ret = rc == -ZL_ERR_IDENTITY ? 2 : 1;
		goto out_etcd;
	}

	/* From here signals arrive through the loop (threads inherit the mask). */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	m.sig_fd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	rc = m.sig_fd < 0 ? -errno : zl_loop_create(&st->loop);
	if (rc)
		goto out_fail;
	rc = zl_loop_add(st->loop, &m.sig_h, m.sig_fd, EPOLLIN, on_signal, &m);
	if (!rc) {
		rc = storage_xports(st);
		if (rc == -ENODEV)
			goto out_stop; /* said why on stderr; exit 1 */
	}
	if (rc)
		goto out_fail;
	{
		struct zl_chunk_store_opts co = {.data_dir = st->cfg.data_dir,
						 .loop = st->loop,
						 .buf_alloc = pool_alloc,
						 .buf_free = pool_free,
						 .buf_arg = st->xport};

		rc = zl_chunk_store_create(&co, &st->chunks);
	}
	if (!rc)
		rc = zl_storage_auth_start(st);
	if (!rc)
		rc = zl_storage_vols_create(st->loop, st->etcd, &eo, st->cfg.prefix, &st->vols);
	if (!rc)
		rc = zl_storage_fwd_create(st, &st->fwd);
	if (!rc)
		rc = zl_storage_tombs_start(st, &st->tombs);
	if (!rc && st->cfg.heal)
		rc = zl_storage_heal_start(st);
	if (!rc)
		rc = zl_storage_scrub_start(st);
	if (!rc && st->cfg.heal)
		rc = zl_storage_status_start(st);
	if (!rc && st->cfg.heal)
		rc = zl_storage_gc_start(st);
	if (rc)
		goto out_fail;
	rc = zl_storage_server_start(st);
	if (rc) {
		fprintf(stderr,
			"zipline-storage: cannot listen on %s:%u%s: %s (is the port in use? "
			"see --listen)\n",
			st->cfg.listen_host, st->cfg.listen_port, st->listener ? " over RDMA" : "",
			zl_strerror(rc));
		ret = 2;
		goto out_stop;
	}
	rc = zl_storage_node_start(
	    &st->cfg, zl_xport_listener_port(st->listener),
	    st->listener_rdma ? zl_xport_listener_port(st->listener_rdma) : 0, st->status, &node);
	if (rc)
		goto out_fail;
	ZL_LOG_INFO("storage",
		    "zipline-storage %s serving node=%s listen=%s:%u advertise=%s transports=%s "
		    "data=%s",
		    ZL_VERSION_STRING, st->cfg.node_id, st->cfg.listen_host,
		    zl_xport_listener_port(st->listener), st->cfg.advertise, st->listener_rdma ? "tcp,rdma" : "tcp",
		    st->cfg.data_dir);
	rc = zl_loop_run(st->loop);
	ret = rc ? 1 : 0;
	goto out_stop;

out_fail:
	ZL_LOG_ERR("storage", "start-up failed: %s", zl_strerror(rc));
out_stop:
	zl_storage_server_stop_accepting(st);
	zl_storage_heal_stop(st);
	zl_storage_scrub_stop(st);
	zl_storage_node_stop(node);
	zl_storage_status_destroy(st); /* the heartbeat no longer reads it */
	zl_storage_gc_stop(st);
	zl_storage_tombs_stop(st->tombs);
	zl_storage_fwd_destroy(st->fwd);
	zl_chunk_store_destroy(st->chunks); /* drains disk I/O still in flight */
	zl_storage_heal_destroy(st);	    /* no callback of it can come now */
	zl_storage_scrub_destroy(st);
	/* The pool transport goes last: closing the other one's connections
	 * frees request buffers into it. */
	if (st->xport == st->xport_rdma) {
		zl_xport_destroy(st->xport_tcp);
		zl_xport_destroy(st->xport_rdma);
	} else {
		zl_xport_destroy(st->xport_rdma);
		zl_xport_destroy(st->xport_tcp);
	}
	zl_storage_server_fini(st);
	zl_storage_vols_destroy(st->vols);
	zl_storage_auth_stop(st);
	if (st->loop) {
		if (m.sig_fd >= 0)
			zl_loop_del(st->loop, &m.sig_h);
		zl_loop_destroy(st->loop);
	}
	if (m.sig_fd >= 0)
		close(m.sig_fd);
	if (!ret)
		ZL_LOG_INFO("storage", "stopped cleanly");
out_etcd:
	zl_etcd_destroy(st->etcd);
	close(lock_fd);
	return ret;
}
