/* zipline-storage: flags, wiring, signals. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "lib/cfg/cfg.h"
#include "storage_ctl.h"
#include "storage_heal.h"
#include "storage_io.h"
#include "storage_metrics.h"

#define DRAIN_MS 10000

struct storage_main {
	struct zl_storage st;
	struct zl_cfg_etcd etcd; /* st.cfg.eo points into it */
	struct zl_loop_handle sig_h;
	int sig_fd;
	struct zl_timer drain_t;
	uint64_t drain_deadline;
};

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
	const char *node_flag = NULL;
	int rc, lock_fd, ret = 1;
	sigset_t sigs;

	zl_log_init("zipline-storage");
	zl_log_crash_handler();
	rc = zl_storage_cfg_parse(&st->cfg, &m.etcd, &node_flag, argc, argv);
	if (rc)
		return rc > 0 ? 0 : 2;
	lock_fd = zl_storage_datadir_lock(st->cfg.data_dir);
	if (lock_fd < 0)
		return 2;
	if (zl_storage_node_id_resolve(st->cfg.data_dir, node_flag, st->cfg.node_id))
		return 2;
	rc = zl_etcd_create(&st->cfg.eo, &st->etcd);
	if (rc) {
		zl_storage_cfg_bad_etcd(&st->cfg, rc);
		close(lock_fd);
		return 2;
	}
	if (zl_storage_etcd_wait(st->etcd, st->cfg.eo.endpoints, (int)st->cfg.etcd_wait_sec))
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
	zl_loop_set_busy_poll(st->loop, st->cfg.busy_poll_us);
	rc = zl_loop_add(st->loop, &m.sig_h, m.sig_fd, EPOLLIN, on_signal, &m);
	if (!rc) {
		rc = zl_storage_xports_create(st);
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
						 .buf_arg = st->xport,
						 .journal = st->cfg.journal,
						 .journal_size = st->cfg.journal_size};

		rc = zl_chunk_store_create(&co, &st->chunks);
	}
	if (!rc)
		rc = zl_storage_auth_start(st);
	if (!rc)
		rc = zl_storage_vols_create(st->loop, st->etcd, &st->cfg.eo, st->cfg.prefix,
					    &st->vols);
	if (!rc)
		zl_storage_vols_set_self(st->vols, st->cfg.node_id, st->cfg.incarnation);
	if (!rc && st->cfg.heal) {
		rc = zl_etcd_create(&st->cfg.eo, &st->wetcd);
		if (!rc)
			rc = zl_worker_create(st->loop, &st->worker);
	}
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
	if (!rc)
		rc = zl_storage_ddir_start(st);
	if (!rc)
		rc = zl_storage_metrics_start(st);
	if (!rc)
		rc = zl_storage_snapgc_start(st, &st->snapgc);
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
	st->registered = true;
	zl_storage_metrics_refresh(st);
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
	zl_storage_metrics_stop(st);
	zl_storage_ddir_stop(st); /* its result reaches the status record */
	zl_storage_heal_stop(st);
	zl_storage_scrub_stop(st);
	zl_storage_node_stop(node);
	zl_storage_status_destroy(st); /* the heartbeat no longer reads it */
	/* Waits for the etcd call it runs; the results of heal and gc land
	 * while both still exist (stopped: they start nothing more). */
	zl_worker_destroy(st->worker);
	st->worker = NULL;
	zl_storage_gc_stop(st);
	zl_storage_tombs_stop(st->tombs);
	zl_storage_snapgc_stop(st, st->snapgc);
	/* Runs the loop (operations in flight, the journal's last checkpoint)
	 * while every module its callbacks reach still exists. */
	zl_chunk_store_drain(st->chunks);
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
	zl_etcd_destroy(st->wetcd);
	zl_etcd_destroy(st->etcd);
	close(lock_fd);
	return ret;
}
