/* zipline-node: the CSI Identity + Node service (see node.h); as
 * `zipline-node attach ...`, the per-volume attach process it starts; as
 * `zipline-node spawner ...`, the starter of attach processes that outlive
 * the plugin's container (node_spawn.c). */
#include "node.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/cfg/cfg.h"
#include "lib/meta/meta.h"

int main(int argc, char **argv)
{
	struct zl_etcd_opts eo = {.timeout_ms = 5000};
	static struct zl_cfg_etcd etcd;
	struct zl_grpc_server_cfg gc = {0};
	struct zl_grpc_server *srv = NULL;
	static struct node n;
	sigset_t sigs;
	ssize_t len;
	int sig, rc;

	if (argc > 1 && strcmp(argv[1], "attach") == 0)
		return attach_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "spawner") == 0)
		return spawner_main(argc - 1, argv + 1);
	zl_log_init("zipline-node");
	rc = node_flags_parse(argc, argv, &n.cfg, &etcd);
	if (rc)
		return rc > 0 ? 0 : 2;
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
	zl_cfg_etcd_opts(&etcd, &eo);
	rc = zl_etcd_create(&eo, &n.etcd);
	if (rc) {
		fprintf(stderr, "zipline-node: bad --etcd '%s': %s (use http://HOST:PORT[,...])\n",
			n.cfg.etcd_urls, zl_strerror(rc));
		return 2;
	}
	if (n.cfg.frontend_auto)
		n.cfg.frontend = node_frontend_auto();
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
	if (node_metrics_start(&n, srv)) {
		zl_grpc_server_shutdown(srv, 0);
		zl_grpc_server_destroy(srv);
		node_register_stop();
		zl_etcd_destroy(n.etcd);
		return 1;
	}
	ZL_LOG_INFO(NODE_LOG, "serving: endpoint=%s node=%s state=%s frontend=%s version=%s",
		    n.cfg.endpoint, n.cfg.node_id, n.cfg.state_dir,
		    node_frontend_name(n.cfg.frontend), ZL_VERSION_STRING);
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
	node_metrics_stop(); /* no scrape reads the server after this */
	zl_grpc_server_shutdown(srv, 10000);
	zl_grpc_server_destroy(srv);
	node_register_stop();
	zl_etcd_destroy(n.etcd);
	return 0;
}
