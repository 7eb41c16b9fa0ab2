/* The node plugin's metrics and probes (--metrics HOST:PORT; docs/
 * ARCHITECTURE.md "Metrics and probes"): its CSI calls (lib/grpc) and etcd
 * calls (lib/etcd), and every volume staged here, read at scrape time from
 * the state directory (state.json) and from the volume's attach process
 * (the "status" command of its control socket: the volume client's
 * counters since that process started, its I/O errors, whether the storage
 * fenced it). Everything runs on lib/metrics' HTTP thread: a scrape never
 * holds an RPC's volume lock, and an attach process that does not answer
 * costs the scrape its control socket's timeout, not an I/O.
 *
 * /healthz answers 200 while the process serves; /readyz 503 until the
 * node's csinodes/ record is in etcd (ControllerPublishVolume needs it). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#include "lib/meta/meta.h"
#include "lib/metrics/metrics.h"

static struct zl_metrics_srv *node_msrv;
static struct zl_grpc_server *node_msrv_grpc;

/* Counts over the staged volumes, and their samples, for one scrape. */
struct node_scrape {
	struct zl_metrics_text *t;
	uint64_t staged[3]; /* by enum node_frontend: fuse, nbd, ublk */
	uint32_t dead;	    /* staged with no live attach process */
	/* The per-volume samples, written after the families' heads. */
	struct zl_metrics_text vol;
	/* The per-volume QoS limits (one family). */
	struct zl_metrics_text qos;
	/* The per-volume latency histograms, one text per family (a
	 * histogram's samples follow their own head). */
	struct zl_metrics_text lat[3];
};

/* The latency histograms of an attach process's status answer
 * ("read_lat=COUNT:SUM_NS:B0,...", zl_metrics_hist_format). */
static const struct {
	const char *key, *name, *help;
} node_vol_hists[3] = {
    {" read_lat=", "zipline_node_volume_read_duration_seconds",
     "Reads of the volume's client: submission to completion (QoS waits and retries "
     "included)."},
    {" write_lat=", "zipline_node_volume_write_duration_seconds",
     "Writes (and zeroings) of the volume's client: submission to completion."},
    {" flush_lat=", "zipline_node_volume_flush_duration_seconds",
     "Flushes of the volume's client: submission to completion."},
};

/* The value of "key=" in an attach status reply, 0 when absent. */
static uint64_t node_status_field(const char *reply, const char *key)
{
	const char *p = strstr(reply, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* The counters of an attach process's status answer ("key=N"), each a
 * per-volume family. */
static const struct {
	const char *key, *name, *help;
} node_vol_counters[] = {
    {"reads=", "zipline_node_volume_reads_total",
     "Reads of the volume's client since its attach process started."},
    {"writes=", "zipline_node_volume_writes_total",
     "Writes (and zeroings) of the volume's client since its attach process started."},
    {"read_bytes=", "zipline_node_volume_read_bytes_total", "Bytes the volume's client read."},
    {"write_bytes=", "zipline_node_volume_write_bytes_total",
     "Bytes the volume's client wrote."},
    {"errors=", "zipline_node_volume_io_errors_total",
     "I/O requests of the volume that failed back to the kernel."},
    {"retries=", "zipline_node_volume_retries_total",
     "Requests the volume's client sent again (timeouts, busy, stale rows)."},
    {"failovers=", "zipline_node_volume_failovers_total",
     "Reads the volume's client moved to another replica."},
    {"throttled=", "zipline_node_volume_throttled_total",
     "I/Os that waited for the volume's QoS limits (token buckets of its client)."},
};

/* The limits the volume's client enforces ("qos=N,...", enum zl_qos
 * order; an attach process of an older version answers none): a sample
 * per limit, labelled by its record name (read_iops ... write_bps_burst). */
static void node_scrape_qos(struct node_scrape *sc, const char *volume_id, const char *reply)
{
	const char *p = strstr(reply, " qos=");
	char lab[256];

	if (!p)
		return;
	p += strlen(" qos=");
	for (int k = 0; k < ZL_QOS_N; k++) {
		char *end;
		uint64_t v = strtoull(p, &end, 10);

		if (end == p || (k + 1 < ZL_QOS_N && *end != ','))
			return;
		snprintf(lab, sizeof(lab), "volume=\"%s\",limit=\"%s\"", volume_id,
			 zl_qos_keys[k].json);
		zl_metrics_u64(&sc->qos, "zipline_node_volume_qos_limit", lab, v);
		p = end + 1;
	}
}

static void node_scrape_vol(struct node *n, const char *vol_id, void *arg)
{
	struct node_scrape *sc = arg;
	struct node_vol_state st;
	char reply[2048], lab[256], dev[128];
	bool alive;

	if (node_state_load(n, vol_id, &st) || !st.staged)
		return;
	if ((unsigned)st.frontend < ZL_ARRAY_SIZE(sc->staged))
		sc->staged[st.frontend]++;
	alive = st.pid > 0 && node_attach_alive(st.pid, st.volume_id);
	sc->dead += !alive;
	zl_metrics_label_escape(st.loop, dev, sizeof(dev));
	snprintf(lab, sizeof(lab), "volume=\"%s\",frontend=\"%s\",device=\"%s\"", st.volume_id,
		 node_frontend_name(st.frontend), dev);
	zl_metrics_u64(&sc->vol, "zipline_node_volume_attached", lab, alive);
	if (!alive || node_attach_ctl(n, vol_id, "status", reply, sizeof(reply)) ||
	    strncmp(reply, "ok ", 3))
		return;
	snprintf(lab, sizeof(lab), "volume=\"%s\"", st.volume_id);
	zl_metrics_u64(&sc->vol, "zipline_node_volume_fenced", lab,
		       node_status_field(reply, "fenced="));
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_vol_counters); i++)
		zl_metrics_u64(&sc->vol, node_vol_counters[i].name, lab,
			       node_status_field(reply, node_vol_counters[i].key));
	node_scrape_qos(sc, st.volume_id, reply);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_vol_hists); i++) {
		const char *p = strstr(reply, node_vol_hists[i].key);
		struct zl_metrics_hist h;

		/* An attach process of an older version answers none. */
		if (p && !zl_metrics_hist_parse(p + strlen(node_vol_hists[i].key), &h))
			zl_metrics_hist_text(&sc->lat[i], node_vol_hists[i].name, lab, &h);
	}
}

static void node_metrics_render(void *arg, struct zl_metrics_text *t)
{
	struct node *n = arg;
	const char *fl[] = {node_frontend_name(NODE_FRONTEND_FUSE), node_frontend_name(NODE_FRONTEND_NBD),
			    node_frontend_name(NODE_FRONTEND_UBLK)};
	struct node_scrape sc = {.t = t};
	char lab[384], id[256];

	zl_metrics_label_escape(n->cfg.node_id, id, sizeof(id));
	snprintf(lab, sizeof(lab), "node=\"%s\",version=\"%s\"", id, ZL_VERSION_STRING);
	zl_metrics_family(t, "zipline_node_info", "gauge", "The node plugin's node id and version.");
	zl_metrics_u64(t, "zipline_node_info", lab, 1);
	node_state_foreach(n, node_scrape_vol, &sc);
	zl_metrics_family(t, "zipline_node_volumes", "gauge",
			  "Volumes staged on this node, by frontend.");
	zl_metrics_u64_by(t, "zipline_node_volumes", "frontend", fl, sc.staged, ZL_ARRAY_SIZE(fl));
	zl_metrics_family(t, "zipline_node_volumes_unattached", "gauge",
			  "Staged volumes whose attach process is gone (their I/O waits or fails).");
	zl_metrics_u64(t, "zipline_node_volumes_unattached", "", sc.dead);
	/* One family head each, then every volume's samples. */
	zl_metrics_family(t, "zipline_node_volume_attached", "gauge",
			  "1 while the volume's attach process lives.");
	zl_metrics_family(t, "zipline_node_volume_fenced", "gauge",
			  "1 when the storage fenced the attachment (the volume moved).");
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_vol_counters); i++)
		zl_metrics_family(t, node_vol_counters[i].name, "counter", node_vol_counters[i].help);
	if (sc.vol.len)
		zl_metrics_printf(t, "%.*s", (int)sc.vol.len, sc.vol.buf);
	t->oom |= sc.vol.oom;
	free(sc.vol.buf);
	zl_metrics_family(t, "zipline_node_volume_qos_limit", "gauge",
			  "The QoS limits the volume's client enforces now, by limit: IOPS and "
			  "bytes/s (read and write), their bursts (I/Os, bytes); 0 = unlimited (a "
			  "burst: a tenth of a second of its rate).");
	if (sc.qos.len)
		zl_metrics_printf(t, "%.*s", (int)sc.qos.len, sc.qos.buf);
	t->oom |= sc.qos.oom;
	free(sc.qos.buf);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(node_vol_hists); i++) {
		zl_metrics_family(t, node_vol_hists[i].name, "histogram", node_vol_hists[i].help);
		if (sc.lat[i].len)
			zl_metrics_printf(t, "%.*s", (int)sc.lat[i].len, sc.lat[i].buf);
		t->oom |= sc.lat[i].oom;
		free(sc.lat[i].buf);
	}
	if (node_msrv_grpc)
		zl_grpc_server_metrics(node_msrv_grpc, t);
	zl_etcd_metrics(t);
}

static int node_metrics_probe(void *arg, bool ready, char *why, size_t len)
{
	(void)arg;
	if (ready && !node_registered()) {
		snprintf(why, len, "not registered in etcd yet (csinodes/ record; see the log)");
		return -1;
	}
	return 0;
}

int node_metrics_start(struct node *n, struct zl_grpc_server *srv)
{
	struct zl_metrics_ops o = {
	    .render = node_metrics_render, .probe = node_metrics_probe, .arg = n};
	int rc;

	if (!n->cfg.metrics || !strcmp(n->cfg.metrics, "off"))
		return 0;
	node_msrv_grpc = srv;
	rc = zl_metrics_start(n->cfg.metrics, &o, &node_msrv);
	if (rc)
		return rc;
	ZL_LOG_INFO(NODE_LOG, "metrics on http://%s port=%u (/metrics /healthz /readyz)",
		    n->cfg.metrics, zl_metrics_port(node_msrv));
	return 0;
}

void node_metrics_stop(void)
{
	zl_metrics_stop(node_msrv);
	node_msrv = NULL;
	node_msrv_grpc = NULL;
}
