/* The storage daemon's metrics and probes (--metrics HOST:PORT; docs/
 * ARCHITECTURE.md "Metrics and probes"). Once a second a loop-thread timer
 * copies what the loop counts (the request counters of storage_server.c,
 * each cached volume's, the chunk store's and the journal's figures,
 * recovery and peering, the data dir's state) into a snapshot under a
 * mutex; lib/metrics renders it on its own HTTP thread. Nothing is added to
 * the I/O path but plain counter increments, and a scrape never waits for
 * the loop. /healthz fails when the loop has not taken a sample for
 * METRICS_STALL_MS (a stuck I/O loop), /readyz also when the daemon is not
 * registered, is draining or its data dir failed. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage_ctl.h"
#include "storage_ddir.h"
#include "storage_heal.h"
#include "storage_io.h"
#include "storage_metrics.h"

#define METRICS_SAMPLE_MS 1000
#define METRICS_STALL_MS  10000
#define METRICS_VOLS_MAX  4096 /* volumes listed in one scrape */

struct vol_snap {
	uint64_t num;
	char name[256];
	uint64_t ops[2], bytes[2], ns[2];
	uint64_t fair_queued;
};

/* A ring's running counts, widened at every sample from the kernel's 32-bit
 * ones (a second cannot wrap them). */
struct ring_acc {
	uint32_t last_taken, last_posted;
	uint64_t taken, posted;
};

enum { RING_CHUNKS, RING_JOURNAL, RING_N };

struct zl_storage_metrics {
	struct zl_storage *st;
	struct zl_metrics_srv *srv;
	struct zl_timer t;
	char node[ZL_NODE_ID_MAX * 2];
	char data_dir[1024];
	uint64_t start_ms;
	/* The snapshot: mu protects everything below. */
	pthread_mutex_t mu;
	struct zl_storage_reqstats rs;
	struct zl_chunk_store_stats cs;
	struct zl_storage_heal_progress heal;
	struct zl_xport_stats xs; /* both transports' */
	struct ring_acc ring[RING_N];
	uint32_t peering, inflight, conns, held;
	bool draining, disk_failed, registered, heal_on;
	bool disk_near_full;
	uint32_t peers_near_full;
	struct vol_snap *vols;
	size_t n_vols, cap_vols;
	uint64_t sample_ms; /* zl_now_ms of the last sample */
};

/* ---- the loop thread's sample ---- */

static void sample_vol(void *arg, const struct zl_storage_vol *sv)
{
	struct zl_storage_metrics *m = arg;
	struct vol_snap *v;

	if (m->n_vols == m->cap_vols) {
		size_t cap = m->cap_vols ? 2 * m->cap_vols : 64;

		if (cap > METRICS_VOLS_MAX)
			return;
		v = realloc(m->vols, cap * sizeof(*v));
		if (!v)
			return;
		m->vols = v;
		m->cap_vols = cap;
	}
	v = &m->vols[m->n_vols++];
	v->num = sv->num;
	snprintf(v->name, sizeof(v->name), "%s", sv->v.name);
	memcpy(v->ops, sv->m_ops, sizeof(v->ops));
	memcpy(v->bytes, sv->m_bytes, sizeof(v->bytes));
	memcpy(v->ns, sv->m_ns, sizeof(v->ns));
	v->fair_queued = sv->m_fair_queued;
}

static void ring_acc_add(struct ring_acc *a, const struct zl_storage_uring_use *u)
{
	a->taken += (uint32_t)(u->taken - a->last_taken);
	a->posted += (uint32_t)(u->posted - a->last_posted);
	a->last_taken = u->taken;
	a->last_posted = u->posted;
}

static void metrics_sample(void *arg)
{
	struct zl_storage_metrics *m = arg;
	struct zl_storage *st = m->st;

	pthread_mutex_lock(&m->mu);
	m->rs = st->rs;
	if (st->chunks) {
		zl_chunk_store_stats(st->chunks, &m->cs);
		ring_acc_add(&m->ring[RING_CHUNKS], &m->cs.uring);
		ring_acc_add(&m->ring[RING_JOURNAL], &m->cs.jw.uring);
	}
	zl_storage_heal_progress(st, &m->heal);
	memset(&m->xs, 0, sizeof(m->xs));
	zl_xport_stats_add(st->xport_tcp, &m->xs);
	zl_xport_stats_add(st->xport_rdma, &m->xs);
	m->peering = st->heal ? zl_storage_peering_list(st, NULL, 0) : 0;
	m->inflight = st->inflight;
	m->conns = st->n_conns;
	m->held = st->n_held;
	m->draining = st->draining;
	m->disk_failed = zl_storage_ddir_failed(st);
	m->disk_near_full = st->chunks && zl_chunk_store_tight(st->chunks);
	m->peers_near_full = st->fwd ? zl_storage_fwd_n_full(st->fwd) : 0;
	m->registered = st->registered;
	m->heal_on = st->heal != NULL;
	m->n_vols = 0;
	if (st->vols)
		zl_storage_vols_foreach(st->vols, sample_vol, m);
	m->sample_ms = zl_now_ms();
	pthread_mutex_unlock(&m->mu);
}

/* ---- the HTTP thread's render ---- */

/* The opcode's name in lower case, as a label value. */
static const char *op_label(unsigned op, char *out, size_t n)
{
	const char *name = zl_wire_op_name((uint8_t)op);
	size_t i;

	for (i = 0; name[i] && i + 1 < n; i++)
		out[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
	out[i] = '\0';
	return out;
}

static void render_requests(struct zl_storage_metrics *m, struct zl_metrics_text *t)
{
	const struct zl_storage_reqstats *rs = &m->rs;
	char lab[96], on[32];

	zl_metrics_family(t, "zipline_storage_requests_total", "counter",
			  "Requests this daemon answered, by opcode (client I/O, forwards, "
			  "recovery and control).");
	for (unsigned op = 1; op <= ZL_OP_MAX_; op++) {
		snprintf(lab, sizeof(lab), "op=\"%s\"", op_label(op, on, sizeof(on)));
		zl_metrics_u64(t, "zipline_storage_requests_total", lab, rs->n[op]);
	}
	zl_metrics_family(t, "zipline_storage_request_bytes_total", "counter",
			  "Data moved by the requests answered without error (read, write, "
			  "repl_write).");
	for (unsigned op = 1; op <= ZL_OP_MAX_; op++) {
		if (op != ZL_OP_READ && op != ZL_OP_WRITE && op != ZL_OP_REPL_WRITE)
			continue;
		snprintf(lab, sizeof(lab), "op=\"%s\"", op_label(op, on, sizeof(on)));
		zl_metrics_u64(t, "zipline_storage_request_bytes_total", lab, rs->bytes[op]);
	}
	zl_metrics_family(t, "zipline_storage_request_duration_seconds", "histogram",
			  "Time from a request's arrival to its answer (data requests: "
			  "including the replicas' for a primary's write).");
	for (unsigned op = 1; op <= ZL_OP_MAX_; op++) {
		if (!rs->lat[op].count && op != ZL_OP_READ && op != ZL_OP_WRITE &&
		    op != ZL_OP_FLUSH && op != ZL_OP_REPL_WRITE)
			continue;
		snprintf(lab, sizeof(lab), "op=\"%s\"", op_label(op, on, sizeof(on)));
		zl_metrics_hist_text(t, "zipline_storage_request_duration_seconds", lab,
				     &rs->lat[op]);
	}
	zl_metrics_family(t, "zipline_storage_forward_duration_seconds", "histogram",
			  "Writes this primary forwarded to a backup: from the send to the "
			  "backup's good answer.");
	zl_metrics_hist_text(t, "zipline_storage_forward_duration_seconds", "", &rs->fwd_lat);
	{
		const struct {
			const char *name, *help;
			uint64_t v;
		} sc[] = {
		    {"zipline_scrub_jobs_total", "Scrub jobs (a slice each) this primary ended.",
		     rs->scrub_jobs},
		    {"zipline_scrub_chunks_checked_total", "Chunks those scrubs compared.",
		     rs->scrub.chunks_checked},
		    {"zipline_scrub_bytes_read_total",
		     "Bytes those scrubs read on every member (digests and repairs).",
		     rs->scrub.bytes_read},
		    {"zipline_scrub_bad_found_total", "Chunk copies those scrubs found bad.",
		     rs->scrub.bad_found},
		    {"zipline_scrub_repaired_total", "Chunk copies those scrubs repaired.",
		     rs->scrub.repaired},
		    {"zipline_storage_fair_queued_total",
		     "Disk operations (client reads and writes, forwarded writes) that waited "
		     "for their volume's fair share while several volumes sent I/O.",
		     rs->fair_queued},
		};

		for (size_t i = 0; i < ZL_ARRAY_SIZE(sc); i++) {
			zl_metrics_family(t, sc[i].name, "counter", sc[i].help);
			zl_metrics_u64(t, sc[i].name, "", sc[i].v);
		}
	}
	zl_metrics_family(t, "zipline_storage_errors_total", "counter",
			  "Requests answered with an error, by opcode and error code.");
	for (unsigned op = 0; op <= ZL_OP_MAX_; op++)
		for (unsigned e = 0; e < ZL_STORAGE_ERR_SLOTS; e++) {
			if (!rs->err[op][e])
				continue;
			snprintf(lab, sizeof(lab), "op=\"%s\",code=\"%s\"",
				 op ? op_label(op, on, sizeof(on)) : "other",
				 e + 1 < ZL_STORAGE_ERR_SLOTS
				     ? zl_errname(-(int)(ZL_ERR_INVAL + (int)e))
				     : "errno");
			zl_metrics_u64(t, "zipline_storage_errors_total", lab, rs->err[op][e]);
		}
}

static void render_volumes(struct zl_storage_metrics *m, struct zl_metrics_text *t)
{
	static const char *const dir[2] = {"read", "write"};
	static const char *const fam[3] = {"zipline_volume_ops_total", "zipline_volume_bytes_total",
					   "zipline_volume_op_seconds_total"};
	static const char *const help[3] = {
	    ("Client reads and writes (write, write_zeroes, discard) this daemon answered for "
	     "the volume as its primary."),
	    "Client data this daemon read or wrote for the volume.",
	    "Summed time of those requests (divided by ops: the mean latency)."};
	char name[512], lab[700];

	for (int f = 0; f < 3; f++) {
		zl_metrics_family(t, fam[f], "counter", help[f]);
		for (size_t i = 0; i < m->n_vols; i++) {
			const struct vol_snap *v = &m->vols[i];
			char vid[ZL_VOL_ID_LEN + 1];

			zl_vol_id_format(v->num, vid);
			zl_metrics_label_escape(v->name, name, sizeof(name));
			for (int d = 0; d < 2; d++) {
				snprintf(lab, sizeof(lab), "volume=\"%s\",name=\"%s\",dir=\"%s\"", vid,
					 name, dir[d]);
				if (f == 2)
					zl_metrics_f64(t, fam[f], lab, (double)v->ns[d] / 1e9);
				else
					zl_metrics_u64(t, fam[f], lab,
						       f ? v->bytes[d] : v->ops[d]);
			}
		}
	}
	zl_metrics_family(t, "zipline_volume_fair_queued_total", "counter",
			  "The volume's disk operations on this daemon that waited for its fair "
			  "share (--fair-share).");
	for (size_t i = 0; i < m->n_vols; i++) {
		const struct vol_snap *v = &m->vols[i];
		char vid[ZL_VOL_ID_LEN + 1];

		zl_vol_id_format(v->num, vid);
		zl_metrics_label_escape(v->name, name, sizeof(name));
		snprintf(lab, sizeof(lab), "volume=\"%s\",name=\"%s\"", vid, name);
		zl_metrics_u64(t, "zipline_volume_fair_queued_total", lab, v->fair_queued);
	}
}

static void render_store(struct zl_storage_metrics *m, struct zl_metrics_text *t)
{
	const struct zl_chunk_store_stats *cs = &m->cs;
	uint64_t cap = 0, avail = 0;
	struct {
		const char *name, *type, *help;
		uint64_t v;
	} g[] = {
	    {"zipline_storage_chunk_writes_total", "counter",
	     "Writes and zeroings applied to chunk files.", cs->writes + cs->zeroes},
	    {"zipline_storage_chunk_reads_total", "counter", "Reads of chunk files.", cs->reads},
	    {"zipline_storage_durable_ios_total", "counter",
	     "Durable disk I/Os (DSYNC writes, fdatasyncs, journal records).", cs->durable_ios},
	    {"zipline_storage_corrupt_blocks_total", "counter",
	     "Blocks that failed their CRC32C check on read.", cs->corruptions},
	    {"zipline_storage_open_chunks", "gauge", "Chunk files held open.", cs->open_chunks},
	    {"zipline_storage_disk_inflight", "gauge", "Chunk store operations in flight.",
	     cs->inflight},
	    {"zipline_storage_open_jobs", "gauge",
	     "Chunk file opens and creations, and volume file removals, queued or running on "
	     "the chunk store's open workers.",
	     cs->open_jobs},
	    {"zipline_storage_volume_removals", "gauge",
	     "Deleted volumes whose chunk files are still being removed.", cs->vol_removals},
	    {"zipline_storage_early_acks_total", "counter",
	     "Writes answered once their journal record was durable.", cs->early_acks},
	    {"zipline_storage_writes_refused_full_total", "counter",
	     "Writes refused NOSPC: their new blocks would eat into the free space the chunk "
	     "store keeps (8 MiB, plus the journal ring on the journal path).",
	     cs->full_refused},
	    {"zipline_journal_size_bytes", "gauge", "Size of the journal ring (0: direct path).",
	     cs->journal ? cs->jw.size : 0},
	    {"zipline_journal_used_bytes", "gauge",
	     "Journal bytes not yet checkpointed (full: writes wait).",
	     cs->journal ? cs->jw.used : 0},
	    {"zipline_journal_waits_total", "counter",
	     "Writes that waited for journal space (a checkpoint).",
	     cs->journal ? cs->jw.waits : 0},
	    {"zipline_journal_checkpoints_total", "counter", "Journal checkpoints completed.",
	     cs->checkpoints},
	    {"zipline_journal_dirty_chunks", "gauge", "Chunks changed since the last checkpoint.",
	     cs->journal_dirty_chunks},
	    {"zipline_recovery_bytes_done", "gauge",
	     "Bytes the recovery jobs of this primary copied since it last had none running "
	     "(0 when none runs).",
	     m->heal.bytes_done},
	    {"zipline_recovery_bytes_left", "gauge",
	     "Bytes the running recovery jobs of this primary still have to copy.",
	     m->heal.bytes_left},
	    {"zipline_recovery_jobs", "gauge", "Running (volume, slice, member) recovery jobs.",
	     m->heal.members},
	    {"zipline_recovery_bytes_total", "counter",
	     "Bytes recovery and backfill jobs of this primary copied to members since the "
	     "start.",
	     m->heal.bytes_total},
	    {"zipline_recovery_chunks_total", "counter",
	     "Chunks recovery and backfill jobs of this primary copied whole to members since "
	     "the start.",
	     m->heal.chunks_total},
	    {"zipline_storage_peering_slices", "gauge", "Slices this primary is peering.",
	     m->peering},
	    {"zipline_storage_requests_inflight", "gauge", "Requests not yet answered.",
	     m->inflight},
	    {"zipline_storage_requests_held", "gauge",
	     "Client requests held while their slice peers or their volume loads.", m->held},
	    {"zipline_storage_connections", "gauge", "Connections served.", m->conns},
	    {"zipline_storage_disk_failed", "gauge",
	     "1 when the data directory failed (removed, replaced, read-only, I/O errors): "
	     "nothing is acknowledged.",
	     m->disk_failed},
	    {"zipline_storage_disk_near_full", "gauge",
	     "1 when the data directory's free space is within 64 MiB of what the chunk store "
	     "keeps: slices with too few members with room refuse writes that need new space.",
	     m->disk_near_full},
	    {"zipline_storage_peers_near_full", "gauge",
	     "Storage nodes whose last reply to this one said their data directory is near full.",
	     m->peers_near_full},
	    {"zipline_storage_registered", "gauge", "1 while the node is registered in etcd.",
	     m->registered},
	};

	for (size_t i = 0; i < ZL_ARRAY_SIZE(g); i++) {
		zl_metrics_family(t, g[i].name, g[i].type, g[i].help);
		zl_metrics_u64(t, g[i].name, "", g[i].v);
	}
	/* statvfs here, on the HTTP thread: never on the loop. */
	if (!zl_storage_fs_space(m->data_dir, &cap, &avail)) {
		zl_metrics_family(t, "zipline_storage_disk_capacity_bytes", "gauge",
				  "Size of the data directory's filesystem.");
		zl_metrics_u64(t, "zipline_storage_disk_capacity_bytes", "", cap);
		zl_metrics_family(t, "zipline_storage_disk_free_bytes", "gauge",
				  "Free bytes of the data directory's filesystem.");
		zl_metrics_u64(t, "zipline_storage_disk_free_bytes", "", avail);
	}
}

/* The io_urings' use: the chunk store's and the journal's. */
static void render_uring(struct zl_storage_metrics *m, struct zl_metrics_text *t)
{
	static const char *const ring[RING_N] = {"chunks", "journal"};
	const struct zl_storage_uring_use *u[RING_N] = {&m->cs.uring, &m->cs.jw.uring};
	uint64_t v[5][RING_N];
	static const struct {
		const char *name, *type, *help;
	} f[5] = {
	    {"zipline_uring_entries", "gauge", "Submission queue size of the io_uring (0: none)."},
	    {"zipline_uring_queued", "gauge",
	     "SQEs prepared and not yet taken by the kernel (submitted at the end of the loop's "
	     "iteration)."},
	    {"zipline_uring_inflight", "gauge",
	     "SQEs the kernel took whose completion the loop has not seen posted."},
	    {"zipline_uring_sqes_total", "counter", "SQEs the kernel took from the ring."},
	    {"zipline_uring_completions_total", "counter", "Completions the kernel posted."},
	};

	for (int r = 0; r < RING_N; r++) {
		v[0][r] = u[r]->entries;
		v[1][r] = u[r]->queued;
		v[2][r] = (uint32_t)(u[r]->taken - u[r]->posted);
		v[3][r] = m->ring[r].taken;
		v[4][r] = m->ring[r].posted;
	}
	for (int i = 0; i < 5; i++) {
		zl_metrics_family(t, f[i].name, f[i].type, f[i].help);
		zl_metrics_u64_by(t, f[i].name, "ring", ring, v[i], RING_N);
	}
}

static void render_transport(struct zl_storage_metrics *m, struct zl_metrics_text *t)
{
	const struct zl_xport_stats *xs = &m->xs;
	const struct {
		const char *name, *help;
		uint64_t v;
	} c[] = {
	    {"zipline_transport_request_timeouts_total",
	     "Requests this daemon sent (forwards, recovery, peering) that failed by their "
	     "deadline.",
	     xs->timeouts},
	    {"zipline_rdma_credit_waits_total",
	     "RDMA request posts that waited for a credit (the peer's receive queue full).",
	     xs->rdma_credit_waits},
	    {"zipline_rdma_window_waits_total",
	     "RDMA request posts that waited for a free memory window.", xs->rdma_window_waits},
	    {"zipline_rdma_completion_errors_total",
	     "RDMA work completions in error (each closes its connection; flushes not "
	     "counted).",
	     xs->rdma_wc_errors},
	    {"zipline_rdma_copied_bytes_total",
	     "Volume data bytes copied in user space on the RDMA path (bounce buffers, "
	     "inline messages); bulk data moves without a copy.",
	     xs->rdma_copied_bytes},
	};

	const char *kinds[ZL_XPORT_SK_N];
	uint64_t open[ZL_XPORT_SK_N];

	for (int k = 0; k < ZL_XPORT_SK_N; k++) {
		kinds[k] = zl_xport_stat_kind_name(k);
		open[k] = xs->opened[k] - xs->closed[k];
	}
	zl_metrics_family(t, "zipline_transport_connections_opened_total", "counter",
			  "Connections opened (accepted or connected), by kind: tcp, tls, rdma.");
	zl_metrics_u64_by(t, "zipline_transport_connections_opened_total", "kind", kinds,
			  xs->opened, ZL_XPORT_SK_N);
	zl_metrics_family(t, "zipline_transport_connections", "gauge",
			  "Connections open now, by kind (served and this daemon's own to peers).");
	zl_metrics_u64_by(t, "zipline_transport_connections", "kind", kinds, open, ZL_XPORT_SK_N);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(c); i++) {
		zl_metrics_family(t, c[i].name, "counter", c[i].help);
		zl_metrics_u64(t, c[i].name, "", c[i].v);
	}
}

static void metrics_render(void *arg, struct zl_metrics_text *t)
{
	struct zl_storage_metrics *m = arg;
	char lab[ZL_NODE_ID_MAX * 2 + 64];

	pthread_mutex_lock(&m->mu);
	snprintf(lab, sizeof(lab), "node=\"%s\",version=\"%s\"", m->node, ZL_VERSION_STRING);
	zl_metrics_family(t, "zipline_storage_info", "gauge", "The daemon's node and version.");
	zl_metrics_u64(t, "zipline_storage_info", lab, 1);
	zl_metrics_family(t, "zipline_storage_uptime_seconds", "gauge", "Seconds since start.");
	zl_metrics_u64(t, "zipline_storage_uptime_seconds", "",
		       (zl_now_ms() - m->start_ms) / 1000);
	render_requests(m, t);
	render_volumes(m, t);
	render_store(m, t);
	render_uring(m, t);
	render_transport(m, t);
	pthread_mutex_unlock(&m->mu);
	zl_etcd_metrics(t);
}

static int metrics_probe(void *arg, bool ready, char *why, size_t n)
{
	struct zl_storage_metrics *m = arg;
	uint64_t age;
	int rc = 0;

	pthread_mutex_lock(&m->mu);
	age = zl_now_ms() - m->sample_ms;
	if (age > METRICS_STALL_MS) {
		snprintf(why, n, "the I/O loop has not run for %" PRIu64 " ms", age);
		rc = -1;
	} else if (ready && m->disk_failed) {
		snprintf(why, n,
			 "the data directory failed (removed, replaced, read-only or I/O "
			 "errors: see the log); nothing is acknowledged");
		rc = -1;
	} else if (ready && m->draining) {
		snprintf(why, n, "stopping");
		rc = -1;
	} else if (ready && !m->registered) {
		snprintf(why, n, "not registered in etcd yet");
		rc = -1;
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

int zl_storage_metrics_start(struct zl_storage *st)
{
	struct zl_metrics_ops o = {.render = metrics_render, .probe = metrics_probe};
	struct zl_storage_metrics *m;
	int rc;

	if (!st->cfg.metrics || !strcmp(st->cfg.metrics, "off"))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->st = st;
	m->start_ms = zl_now_ms();
	snprintf(m->node, sizeof(m->node), "%s", st->cfg.node_id);
	snprintf(m->data_dir, sizeof(m->data_dir), "%s", st->cfg.data_dir);
	pthread_mutex_init(&m->mu, NULL);
	metrics_sample(m);
	o.arg = m;
	rc = zl_metrics_start(st->cfg.metrics, &o, &m->srv);
	if (rc) {
		pthread_mutex_destroy(&m->mu);
		free(m);
		return rc;
	}
	zl_timer_start(st->loop, &m->t, METRICS_SAMPLE_MS, METRICS_SAMPLE_MS, metrics_sample, m);
	st->metrics = m;
	st->cfg.metrics_port = zl_metrics_port(m->srv);
	ZL_LOG_INFO("storage", "metrics on http://%s port=%u (/metrics /healthz /readyz)",
		    st->cfg.metrics, zl_metrics_port(m->srv));
	return 0;
}

void zl_storage_metrics_refresh(struct zl_storage *st)
{
	if (st->metrics)
		metrics_sample(st->metrics);
}

void zl_storage_metrics_stop(struct zl_storage *st)
{
	struct zl_storage_metrics *m = st->metrics;

	if (!m)
		return;
	zl_metrics_stop(m->srv); /* no scrape reads the snapshot after this */
	zl_timer_stop(st->loop, &m->t);
	pthread_mutex_destroy(&m->mu);
	free(m->vols);
	free(m);
	st->metrics = NULL;
}
