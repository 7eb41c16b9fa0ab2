/* zipline-node: the CSI Identity + Node service (see node.h), and, as
 * `zipline-node attach ...`, the per-volume attach process it starts. */
#include "node.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/meta/meta.h"

static void node_usage(FILE *f)
{
	fputs("usage: zipline-node --node-id ID --etcd URLS [options]\n"
	      "  --endpoint EP        CSI endpoint, unix:///path (env CSI_ENDPOINT)\n"
	      "  --node-id ID         this node's id (env NODE_NAME; required)\n"
	      "  --etcd URLS          etcd endpoints (env ZIPLINE_ETCD; required)\n"
	      "  --etcd-prefix P      key prefix (default /zipline/)\n"
	      "  --etcd-cacert FILE   CA bundle for https etcd endpoints\n"
	      "  --etcd-cert FILE     client certificate for etcd (with --etcd-key)\n"
	      "  --etcd-key FILE      client key for etcd\n"
	      "  --etcd-user USER     etcd user (with --etcd-password-file)\n"
	      "  --etcd-password-file FILE  file holding the etcd password\n"
	      "  --state-dir DIR      attachment state (default /var/lib/zipline/node)\n"
	      "  --kubelet-dir DIR    kubelet root (default /var/lib/kubelet)\n"
	      "  --frontend F         auto|fuse|nbd (default auto = fuse)\n"
	      "  --transport T        auto|rdma|tcp (default auto)\n"
	      "  --workers N          gRPC worker threads (default 4)\n"
	      "  --log-level L        err|warn|info|debug\n"
	      "  --io-timeout SEC     how long volume I/O waits for an in-sync primary while\n"
	      "                       the cluster heals before it fails (default 600)\n"
	      "  --attach-timeout SEC how long an attach process may take to prove it can\n"
	      "                       read its volume before NodeStage fails (default 20)\n"
	      "  --legacy-drop        0.1 client for clusters without a manager: promote\n"
	      "                       the next replica itself, give up after 30 s\n"
	      "  --tls-ca FILE        the cluster's CA (PEM; env ZIPLINE_TLS_CA): attach\n"
	      "                       processes reach storage nodes that serve TLS with it\n"
	      "  --tls-server-name N  name their certificates carry (env\n"
	      "                       ZIPLINE_TLS_SERVER_NAME; default: their address)\n"
	      "  --version, --help\n",
	      f);
}

static int node_parse(int argc, char **argv, struct node_cfg *c)
{
	static const struct option opts[] = {
	    {"endpoint", required_argument, NULL, 'E'},
	    {"node-id", required_argument, NULL, 'n'},
	    {"etcd", required_argument, NULL, 'e'},
	    {"etcd-prefix", required_argument, NULL, 'p'},
	    {"etcd-cacert", required_argument, NULL, 'C'},
	    {"etcd-cert", required_argument, NULL, 'c'},
	    {"etcd-key", required_argument, NULL, 'K'},
	    {"etcd-user", required_argument, NULL, 'u'},
	    {"etcd-password-file", required_argument, NULL, 'P'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"kubelet-dir", required_argument, NULL, 'k'},
	    {"frontend", required_argument, NULL, 'f'},
	    {"transport", required_argument, NULL, 't'},
	    {"workers", required_argument, NULL, 'w'},
	    {"log-level", required_argument, NULL, 'l'},
	    {"io-timeout", required_argument, NULL, 'T'},
	    {"legacy-drop", no_argument, NULL, 'L'},
	    {"attach-timeout", required_argument, NULL, 'a'},
	    {"tls-ca", required_argument, NULL, 'A'},
	    {"tls-server-name", required_argument, NULL, 'S'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *frontend = "auto";
	int o;

	c->endpoint = getenv("CSI_ENDPOINT");
	c->node_id = getenv("NODE_NAME");
	c->etcd_urls = getenv("ZIPLINE_ETCD");
	c->etcd_prefix = ZL_META_DEFAULT_PREFIX;
	c->state_dir = "/var/lib/zipline/node";
	c->kubelet_dir = "/var/lib/kubelet";
	c->transport = "auto";
	c->workers = 4;
	while ((o = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
		switch (o) {
		case 'E':
			c->endpoint = optarg;
			break;
		case 'n':
			c->node_id = optarg;
			break;
		case 'e':
			c->etcd_urls = optarg;
			break;
		case 'p':
			c->etcd_prefix = optarg;
			break;
		case 'C':
		case 'c':
		case 'K':
		case 'u':
		case 'P': {
			int idx = 0;

			while (opts[idx].val != o)
				idx++;
			if (node_etcd_flag(opts[idx].name, optarg))
				return 2;
			break;
		}
		case 's':
			c->state_dir = optarg;
			break;
		case 'k':
			c->kubelet_dir = optarg;
			break;
		case 'f':
			frontend = optarg;
			break;
		case 't':
			c->transport = optarg;
			break;
		case 'w':
			c->workers = (unsigned int)strtoul(optarg, NULL, 10);
			break;
		case 'l':
			c->log_level = optarg;
			break;
		case 'T':
			c->io_timeout = optarg;
			break;
		case 'L':
			c->legacy_drop = true;
			break;
		case 'a':
			c->attach_timeout = optarg;
			break;
		case 'A':
		case 'S':
			/* Attach processes inherit the environment, where lib/client
			 * reads both (docs/SECURITY.md). */
			if (o == 'A' && access(optarg, R_OK)) {
				fprintf(stderr, "zipline-node: cannot read --tls-ca %s: %s\n",
					optarg, strerror(errno));
				exit(2);
			}
			setenv(o == 'A' ? "ZIPLINE_TLS_CA" : "ZIPLINE_TLS_SERVER_NAME", optarg, 1);
			break;
		case 'V':
			puts("zipline-node " ZL_VERSION_STRING);
			exit(0);
		case 'h':
			node_usage(stdout);
			exit(0);
		default:
			node_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "zipline-node: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!c->endpoint || !c->node_id || !c->node_id[0] || !c->etcd_urls) {
		fprintf(stderr, "zipline-node: %s is required\n",
			!c->endpoint	? "--endpoint (or CSI_ENDPOINT)"
			: !c->etcd_urls ? "--etcd (or ZIPLINE_ETCD)"
					: "--node-id (or NODE_NAME)");
		return 2;
	}
	if (strlen(c->node_id) > 128 || c->state_dir[0] != '/' || c->workers > 64) {
		fprintf(stderr, "zipline-node: node id longer than 128 characters, a relative "
				"--state-dir, or more than 64 --workers\n");
		return 2;
	}
	if (c->io_timeout && node_io_timeout_parse(c->io_timeout, NULL)) {
		fprintf(stderr, "zipline-node: bad --io-timeout '%s' (seconds, 1..86400)\n",
			c->io_timeout);
		return 2;
	}
	if (c->attach_timeout && node_start_timeout_parse(c->attach_timeout, NULL)) {
		fprintf(stderr, "zipline-node: bad --attach-timeout '%s' (seconds, 1..600)\n",
			c->attach_timeout);
		return 2;
	}
	if (c->log_level && zl_log_set_level(c->log_level)) {
		fprintf(stderr, "zipline-node: bad --log-level '%s' (err|warn|info|debug)\n",
			c->log_level);
		return 2;
	}
	if (strcmp(frontend, "auto") == 0 || strcmp(frontend, "fuse") == 0) {
		c->frontend = NODE_FRONTEND_FUSE;
	} else if (strcmp(frontend, "nbd") == 0) {
		fprintf(stderr,
			"zipline-node: --frontend nbd is not available in this version%s; "
			"use --frontend fuse\n",
			access("/sys/module/nbd", F_OK) ? " (and this kernel has no nbd module)"
							: "");
		return 2;
	} else {
		fprintf(stderr, "zipline-node: bad --frontend '%s' (auto|fuse|nbd)\n", frontend);
		return 2;
	}
	if (strcmp(c->transport, "auto") && strcmp(c->transport, "tcp") &&
	    strcmp(c->transport, "rdma")) {
		fprintf(stderr, "zipline-node: bad --transport '%s' (auto|rdma|tcp)\n",
			c->transport);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct zl_etcd_opts eo = {.timeout_ms = 5000};
	static char etcd_pw[256];
	struct zl_grpc_server_cfg gc = {0};
	struct zl_grpc_server *srv = NULL;
	static struct node n;
	sigset_t sigs;
	ssize_t len;
	int sig, rc;

	if (argc > 1 && strcmp(argv[1], "attach") == 0)
		return attach_main(argc - 1, argv + 1);
	zl_log_init("zipline-node");
	rc = node_parse(argc, argv, &n.cfg);
	if (rc)
		return rc;
	pthread_mutex_init(&n.ops.lock, NULL);
	len = readlink("/proc/self/exe", n.self_exe, sizeof(n.self_exe) - 1);
	if (len <= 0) {
		fprintf(stderr, "zipline-node: cannot resolve /proc/self/exe: %s\n",
			strerror(errno));
		return 1;
	}
	n.self_exe[len] = '\0';
	/* Replaced on disk while running (an upgrade): exec the new binary. */
	if (len > 10 && strcmp(n.self_exe + len - 10, " (deleted)") == 0)
		n.self_exe[len - 10] = '\0';
	rc = node_mkdir_p(n.cfg.state_dir);
	if (rc || chmod(n.cfg.state_dir, 0700) < 0) {
		fprintf(stderr, "zipline-node: cannot create --state-dir %s: %s\n", n.cfg.state_dir,
			strerror(rc ? -rc : errno));
		return 1;
	}
	if (access(n.cfg.kubelet_dir, F_OK) != 0)
		ZL_LOG_INFO(NODE_LOG, "kubelet directory missing (fine outside Kubernetes): dir=%s",
			    n.cfg.kubelet_dir);
	eo.endpoints = n.cfg.etcd_urls;
	if (node_etcd_opts(&eo, etcd_pw, sizeof(etcd_pw)))
		return 2;
	rc = zl_etcd_create(&eo, &n.etcd);
	if (rc) {
		fprintf(stderr, "zipline-node: bad --etcd '%s': %s (use http://HOST:PORT[,...])\n",
			n.cfg.etcd_urls, zl_strerror(rc));
		return 2;
	}
	node_state_adopt_all(&n);
	if (node_register_start(&n)) {
		zl_etcd_destroy(n.etcd);
		return 1;
	}

	/* gRPC's threads inherit this mask; we take the signals with sigwait. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	gc.endpoint = n.cfg.endpoint;
	gc.methods = node_methods;
	gc.n_methods = node_n_methods;
	gc.workers = n.cfg.workers;
	gc.ctx = &n;
	gc.name = "zipline-node";
	rc = zl_grpc_server_create(&gc, &srv);
	if (rc) {
		fprintf(stderr, "zipline-node: cannot serve CSI on %s: %s\n", n.cfg.endpoint,
			zl_strerror(rc));
		node_register_stop();
		zl_etcd_destroy(n.etcd);
		return 1;
	}
	ZL_LOG_INFO(NODE_LOG, "serving: endpoint=%s node=%s state=%s frontend=fuse version=%s",
		    n.cfg.endpoint, n.cfg.node_id, n.cfg.state_dir, ZL_VERSION_STRING);
	/* Every 2 s without a signal: reap the attach processes that ended. */
	for (;;) {
		struct timespec tick = {.tv_sec = 2};

		sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig < 0 && (errno == EAGAIN || errno == EINTR)) {
			node_state_reap_all(&n);
			continue;
		}
		if (sig < 0)
			sig = SIGTERM;
		if (sig != SIGPIPE)
			break;
	}
	/* Only the CSI service stops: attach processes keep serving volumes. */
	ZL_LOG_INFO(NODE_LOG, "shutting down on signal %d; attached volumes stay served", sig);
	zl_grpc_server_shutdown(srv, 10000);
	zl_grpc_server_destroy(srv);
	node_register_stop();
	zl_etcd_destroy(n.etcd);
	return 0;
}
