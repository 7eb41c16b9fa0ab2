/* The leader's background flatten (docs/SNAPSHOTS.md §4): clones made by
 * CreateVolume from a snapshot or a volume read through their source until
 * every chunk is their own; this copies the rest up and clears the parent,
 * so the source (the VolumeSnapshot, the source PVC) can be deleted.
 *
 * One thread of its own, with its own etcd handle and a storage client per
 * clone on a private loop (never the gRPC workers', never the background
 * thread's, whose keepalives must not wait behind a copy). While this
 * replica leads it looks every --gc-interval seconds for clones (records
 * with a parent, state ready, not made with the StorageClass parameter
 * flatten=false) and flattens them one at a time through zl_vol_flatten at
 * --flatten-rate MiB/s. Leadership lost or a stop ends the flatten within
 * a second; an interrupted one (this process killed, a leader change, an
 * I/O error) is simply run again by the next pass, from the start:
 * zl_vol_flatten probes every chunk again and copies only those still
 * absent, and copy-ups are create-only, so two flatteners (an old leader
 * not yet aware, `zl volume flatten`) and the clone's own writers never
 * overwrite one another.
 *
 * Fencing (docs/SNAPSHOTS.md §4 "Who flattens"): a storage daemon refuses
 * a write whose attach epoch is below the highest it served for the volume
 * (an operator's epoch 0 included), so the copy-ups go at the epoch of the
 * clone's attachment when it has one, and otherwise at the etcd revision
 * at which it had none (every attachment made later has a higher one, every
 * earlier one a lower or equal one). With --auth on the connection uses the
 * cluster token, whose header epoch the daemons take as it is. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ctrl.h"
#include "lib/client/client.h"

/* A progress line every this often while a clone is flattened. */
#define FLAT_LOG_MS 5000

struct flat_run {
	struct ctrl *c;
	const struct zl_volume *v;
	uint64_t start_ms, log_ms;
};

/* True once this thread should stop (ctrl_stop). */
static bool flat_stopping(struct ctrl *c)
{
	bool stop;

	pthread_mutex_lock(&c->bg_lock);
	stop = c->stop;
	pthread_mutex_unlock(&c->bg_lock);
	return stop;
}

/* The clone's StorageClass asked for no background flatten. */
static bool flat_wanted(const struct zl_volume *v)
{
	json_t *p = json_loads(v->params, 0, NULL);
	const char *s = p ? json_string_value(json_object_get(p, "flatten")) : NULL;
	bool on = !s || strcmp(s, "false");

	json_decref(p);
	return on;
}

/* The epoch the copy-ups of vol_id carry: its attachment's (the epoch the
 * storage daemons admit for it now), or the revision at which it had none.
 * *attached tells which. 0 or an etcd error. */
static int flat_epoch(struct ctrl *c, const char *vol_id, uint64_t *epoch, bool *attached)
{
	struct zl_etcd_range r = {0};
	char key[256];
	int rc;

	rc = zl_meta_key(key, sizeof(key), c->prefix, "attachments", vol_id);
	if (!rc)
		rc = zl_etcd_range(c->etcd_flat, key, NULL, 1, &r);
	if (rc)
		return rc;
	*attached = r.n > 0;
	*epoch = r.n ? (uint64_t)r.kvs[0].create_rev : (uint64_t)r.revision;
	zl_etcd_range_fini(&r);
	return 0;
}

static int flat_progress(void *arg, uint64_t done, uint64_t total, uint64_t copied)
{
	struct flat_run *fr = arg;
	struct ctrl *c = fr->c;
	uint64_t now = zl_now_ms();

	atomic_store(&c->flat_chunks_done, done);
	atomic_store(&c->flat_chunks_total, total);
	if (now - fr->log_ms >= FLAT_LOG_MS && done < total) {
		fr->log_ms = now;
		ZL_LOG_INFO(CTRL_LOG,
			    "flatten: progress vol=%s name=%s chunks=%" PRIu64 "/%" PRIu64
			    " copied=%" PRIu64 " seconds=%" PRIu64,
			    fr->v->id, fr->v->name, done, total, copied,
			    (now - fr->start_ms) / 1000);
	}
	if (flat_stopping(c))
		return -ECANCELED;
	if (!ctrl_leader_is(c))
		return -ZL_ERR_NOT_PRIMARY;
	return 0;
}

/* Flattens clone v: 0 once its parent is cleared, else an error (logged). */
static int flat_one(struct ctrl *c, const struct zl_volume *v)
{
	struct flat_run fr = {.c = c, .v = v, .start_ms = zl_now_ms()};
	struct zl_flatten_opts fo = {
	    .progress = flat_progress, .arg = &fr, .rate_bps = c->flat_rate_bps};
	struct zl_client *cl = NULL;
	struct zl_loop *loop = NULL;
	struct zl_vol *zv = NULL;
	struct zl_vol_stats st;
	const char *what = NULL;
	bool attached = false;
	uint64_t epoch = 0;
	int rc;

	fr.log_ms = fr.start_ms;
	rc = flat_epoch(c, v->id, &epoch, &attached);
	if (rc) {
		ZL_LOG_WARN(CTRL_LOG,
			    "flatten: cannot read the attachment of vol=%s: %s (%s); "
			    "the next pass tries again",
			    v->id, zl_strerror(rc), zl_etcd_last_error());
		return rc;
	}
	/* Copy-ups are operator writes: the cluster token (--auth on). */
	rc = ctrl_client_create(c, c->etcd_flat, epoch, &loop, &cl, &what);
	if (rc && !strcmp(what, "key"))
		return rc; /* logged, naming the key or file */
	if (!rc)
		rc = zl_vol_open(cl, v->id, &zv);
	if (rc) {
		ZL_LOG_WARN(CTRL_LOG,
			    "flatten: cannot open vol=%s name=%s: %s; the next pass "
			    "tries again",
			    v->id, v->name, zl_strerror(rc));
		goto out;
	}
	if (!zl_vol_meta(zv)->parent_vol[0])
		goto out; /* flattened meanwhile (zl volume flatten, another leader) */
	ZL_LOG_INFO(CTRL_LOG,
		    "flatten: start vol=%s name=%s parent=%s seq=%u size=%" PRIu64 " epoch=%" PRIu64
		    " attached=%s rate_mib_s=%" PRIu64,
		    v->id, v->name, v->parent_vol, v->parent_seq, v->size, epoch,
		    attached ? "yes" : "no", c->flat_rate_bps >> 20);
	atomic_store(&c->flat_active, 1);
	rc = zl_vol_flatten(zv, &fo);
	zl_vol_get_stats(zv, &st); /* a fresh handle: every copy-up is the flatten's */
	atomic_fetch_add(&c->flat_copied_bytes, st.copyups * v->chunk_size);
	atomic_store(&c->flat_active, 0);
	if (rc) {
		atomic_fetch_add(&c->flat_failed, 1);
		ZL_LOG_WARN(CTRL_LOG,
			    "flatten: stopped vol=%s name=%s chunks=%" PRIu64 "/%" PRIu64
			    " error=%s: %s; the next pass (of this leader or the next) runs it "
			    "again",
			    v->id, v->name, (uint64_t)atomic_load(&c->flat_chunks_done),
			    (uint64_t)atomic_load(&c->flat_chunks_total), zl_errname(rc),
			    rc == -ECANCELED		? "the controller is stopping"
			    : rc == -ZL_ERR_NOT_PRIMARY ? "this replica no longer leads"
			    : rc == -ZL_ERR_STALE	? "fenced: the clone was attached meanwhile"
							: zl_strerror(rc));
		goto out;
	}
	atomic_fetch_add(&c->flat_done, 1);
	ZL_LOG_INFO(CTRL_LOG,
		    "flatten: done vol=%s name=%s chunks=%" PRIu64 " copied=%" PRIu64
		    " seconds=%.1f: it no longer reads from %s",
		    v->id, v->name, (uint64_t)atomic_load(&c->flat_chunks_total), st.copyups,
		    (double)(zl_now_ms() - fr.start_ms) / 1000.0, v->parent_vol);
out:
	zl_vol_close(zv);
	ctrl_client_destroy(loop, cl);
	return rc;
}

/* One pass: every clone that wants it, one at a time, while leading. */
static void flat_pass(struct ctrl *c)
{
	struct zl_volume *vols = NULL;
	size_t n = 0;
	int rc;

	rc = zl_meta_volume_list(c->etcd_flat, c->prefix, &vols, &n);
	if (rc) {
		ZL_LOG_WARN(CTRL_LOG, "flatten: cannot list volumes: %s (%s)", zl_strerror(rc),
			    zl_etcd_last_error());
		return;
	}
	for (size_t i = 0; i < n && !flat_stopping(c) && ctrl_leader_is(c); i++) {
		const struct zl_volume *v = &vols[i];

		if (!v->parent_vol[0] || strcmp(v->state, "ready") || !flat_wanted(v))
			continue;
		(void)flat_one(c, v);
	}
	zl_meta_volume_list_free(vols, n);
}

static void *flat_main(void *arg)
{
	struct ctrl *c = arg;

	for (;;) {
		struct timespec ts;

		pthread_mutex_lock(&c->bg_lock);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += c->gc_interval_s;
		while (!c->stop && pthread_cond_timedwait(&c->bg_cond, &c->bg_lock, &ts) == 0)
			;
		if (c->stop) {
			pthread_mutex_unlock(&c->bg_lock);
			break;
		}
		pthread_mutex_unlock(&c->bg_lock);
		if (ctrl_leader_is(c))
			flat_pass(c);
	}
	return NULL;
}

int ctrl_flatten_start(struct ctrl *c, const struct ctrl_cfg *cfg)
{
	struct zl_etcd_opts o = {.timeout_ms = CTRL_ETCD_TIMEOUT_MS};
	int rc;

	if (!cfg->flatten) {
		ZL_LOG_INFO(CTRL_LOG, "flatten: off (--flatten=off): clones keep reading through "
				      "their sources until `zl volume flatten NAME`");
		return 0;
	}
	c->flat_rate_bps = (uint64_t)cfg->flatten_rate_mib << 20;
	zl_cfg_etcd_opts(&cfg->etcd, &o);
	rc = zl_etcd_create(&o, &c->etcd_flat);
	if (rc)
		return rc;
	rc = pthread_create(&c->flat_thread, NULL, flat_main, c);
	if (rc) {
		ZL_LOG_ERR(CTRL_LOG, "cannot start the flatten thread: %s", strerror(rc));
		return -rc;
	}
	c->flat_started = true;
	return 0;
}

void ctrl_flatten_join(struct ctrl *c)
{
	if (c->flat_started) {
		pthread_join(c->flat_thread, NULL);
		c->flat_started = false;
	}
	zl_etcd_destroy(c->etcd_flat);
	c->etcd_flat = NULL;
}

void ctrl_flatten_metrics(struct ctrl *c, struct zl_metrics_text *t)
{
	const struct {
		const char *name, *type, *help;
		uint64_t v;
	} m[] = {
	    {"zipline_controller_flatten_done_total", "counter",
	     "Clones this replica flattened (copied up and detached from their source).",
	     atomic_load(&c->flat_done)},
	    {"zipline_controller_flatten_failed_total", "counter",
	     "Flattens that stopped (errors, leadership lost, stop); the next pass runs them "
	     "again.",
	     atomic_load(&c->flat_failed)},
	    {"zipline_controller_flatten_copied_bytes_total", "counter",
	     "Bytes the finished and stopped flattens copied up from sources.",
	     atomic_load(&c->flat_copied_bytes)},
	    {"zipline_controller_flatten_active", "gauge", "1 while a clone is being flattened.",
	     atomic_load(&c->flat_active)},
	    {"zipline_controller_flatten_chunks_done", "gauge",
	     "Chunks of the current (or last) flatten probed so far.",
	     atomic_load(&c->flat_chunks_done)},
	    {"zipline_controller_flatten_chunks_total", "gauge",
	     "Chunks of the current (or last) flatten to probe.",
	     atomic_load(&c->flat_chunks_total)},
	};

	if (!c->flat_started)
		return;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(m); i++) {
		zl_metrics_family(t, m[i].name, m[i].type, m[i].help);
		zl_metrics_u64(t, m[i].name, "", m[i].v);
	}
}
