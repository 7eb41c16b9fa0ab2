/* Recovery progress of this daemon for `zl status` (docs/REPLICATION.md §9),
 * and its chunk store's write figures and journal use:
 * every 2 s the loop thread sums what its recovery jobs copied and still
 * have to copy (zl_storage_heal_progress), derives a rate and lists the
 * slices it is peering (zl_storage_peering_list) and reads the space its
 * clone chunks hold per snapshot (zl_chunk_snap_space: a copy of a table the
 * chunk store keeps, no file touched; docs/SNAPSHOTS.md §6); the heartbeat
 * thread (storage_node.c) takes the snapshot under the mutex and puts it as
 * <prefix>status/<node> on the node's lease, so it goes away with the node.
 * Nothing here runs on the I/O path. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "storage_chunk.h"
#include "storage_ctl.h"
#include "storage_heal.h"

#define STATUS_SAMPLE_MS 2000

/* The chunk store's figures a status record carries. */
struct status_store {
	uint64_t chunk_writes, durable_ios;
	uint64_t journal_size, journal_used, journal_checkpoints, journal_waits;
	uint32_t journal_dirty_chunks;
	bool disk_full, disk_near_full;
};

/* The snapshot space a status record carries. */
struct status_snap {
	uint64_t bytes;
	uint32_t entries, n;
	struct zl_status_snap e[ZL_STATUS_SNAP_MAX];
};

static void status_snap_sample(struct zl_storage *st, struct status_snap *o,
			       struct zl_chunk_snap_space *buf)
{
	uint64_t sum = 0;

	o->bytes = 0;
	o->entries = o->n = 0;
	if (!st->chunks)
		return;
	o->entries = zl_chunk_snap_space(st->chunks, buf, ZL_STATUS_SNAP_MAX, &o->bytes);
	o->n = ZL_MIN(o->entries, ZL_STATUS_SNAP_MAX);
	for (uint32_t i = 0; i < o->n; i++) {
		o->e[i] =
		    (struct zl_status_snap){.vol = buf[i].vol,
					    .seq = buf[i].seq,
					    .clones = buf[i].clones,
					    .bytes = ZL_MIN(buf[i].bytes, (uint64_t)INT64_MAX)};
		sum += o->e[i].bytes;
	}
	/* The record's check: the listed entries never sum past the total. */
	o->bytes = ZL_MIN(ZL_MAX(o->bytes, sum), (uint64_t)INT64_MAX);
}

static void status_store_sample(struct zl_storage *st, struct status_store *o)
{
	struct zl_chunk_store_stats cs;

	memset(o, 0, sizeof(*o));
	if (!st->chunks)
		return;
	zl_chunk_store_stats(st->chunks, &cs);
	o->chunk_writes = cs.writes + cs.zeroes;
	o->durable_ios = cs.durable_ios;
	o->disk_full = zl_chunk_store_full(st->chunks);
	o->disk_near_full = zl_chunk_store_tight(st->chunks);
	if (cs.journal) {
		o->journal_size = cs.jw.size;
		o->journal_used = cs.jw.used;
		o->journal_checkpoints = cs.checkpoints;
		o->journal_waits = cs.jw.waits;
		o->journal_dirty_chunks = cs.journal_dirty_chunks;
	}
}

struct zl_storage_status {
	struct zl_storage *st;
	struct zl_timer t;
	/* Loop thread only. */
	uint64_t last_done, last_ms;
	double rate; /* bytes/s, smoothed */
	/* Snapshot: mu protects it and `changed`. */
	pthread_mutex_t mu;
	struct zl_storage_heal_progress snap;
	uint64_t snap_rate;
	uint32_t snap_peering, snap_n_peering;
	struct zl_status_peering snap_peer[ZL_STATUS_PEERING_MAX];
	struct status_store snap_store;
	struct status_snap snap_space;
	char disk_error[sizeof(((struct zl_node_status *)0)->disk_error)];
	bool changed;
	/* Loop thread only: the lists being sampled. */
	struct zl_status_peering peer[ZL_STATUS_PEERING_MAX];
	struct zl_chunk_snap_space sp_buf[ZL_STATUS_SNAP_MAX];
	struct status_snap sp;
};

static void status_sample(void *arg)
{
	struct zl_storage_status *s = arg;
	struct zl_storage_heal_progress p;
	uint64_t now = zl_now_ms(), dt = now - s->last_ms;
	double inst = 0;
	uint32_t peering, n_peer;
	struct status_store ss;

	status_store_sample(s->st, &ss);
	status_snap_sample(s->st, &s->sp, s->sp_buf);
	zl_storage_heal_progress(s->st, &p);
	peering = zl_storage_peering_list(s->st, s->peer, ZL_STATUS_PEERING_MAX);
	n_peer = ZL_MIN(peering, ZL_STATUS_PEERING_MAX);
	/* bytes_done drops when a finished job is forgotten: no negative rate. */
	if (p.bytes_done > s->last_done && dt)
		inst = (double)(p.bytes_done - s->last_done) * 1000.0 / (double)dt;
	s->rate = p.members ? (s->rate ? 0.5 * s->rate + 0.5 * inst : inst) : 0;
	s->last_done = p.bytes_done;
	s->last_ms = now;
	pthread_mutex_lock(&s->mu);
	if (memcmp(&p, &s->snap, sizeof(p)) || (uint64_t)s->rate != s->snap_rate ||
	    peering != s->snap_peering || n_peer != s->snap_n_peering ||
	    memcmp(s->peer, s->snap_peer, n_peer * sizeof(s->peer[0])) ||
	    memcmp(&ss, &s->snap_store, sizeof(ss)) || s->sp.bytes != s->snap_space.bytes ||
	    s->sp.entries != s->snap_space.entries || s->sp.n != s->snap_space.n ||
	    memcmp(s->sp.e, s->snap_space.e, s->sp.n * sizeof(s->sp.e[0]))) {
		s->snap_store = ss;
		s->snap_space.bytes = s->sp.bytes;
		s->snap_space.entries = s->sp.entries;
		s->snap_space.n = s->sp.n;
		memcpy(s->snap_space.e, s->sp.e, s->sp.n * sizeof(s->sp.e[0]));
		s->snap = p;
		s->snap_rate = (uint64_t)s->rate;
		s->snap_peering = peering;
		s->snap_n_peering = n_peer;
		memcpy(s->snap_peer, s->peer, n_peer * sizeof(s->peer[0]));
		s->changed = true;
	}
	pthread_mutex_unlock(&s->mu);
}

int zl_storage_status_start(struct zl_storage *st)
{
	struct zl_storage_status *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->st = st;
	s->last_ms = zl_now_ms();
	s->changed = true; /* publish the zeros once */
	/* ... with the store's figures already: a reader learns the write path
	 * (journal_size) from the first record. */
	status_store_sample(st, &s->snap_store);
	pthread_mutex_init(&s->mu, NULL);
	st->status = s;
	zl_timer_start(st->loop, &s->t, STATUS_SAMPLE_MS, STATUS_SAMPLE_MS, status_sample, s);
	return 0;
}

void zl_storage_status_destroy(struct zl_storage *st)
{
	struct zl_storage_status *s = st->status;

	if (!s)
		return;
	zl_timer_stop(st->loop, &s->t);
	pthread_mutex_destroy(&s->mu);
	free(s);
	st->status = NULL;
}

bool zl_storage_status_take(struct zl_storage_status *s, const char *node, bool force,
			    struct zl_node_status *out)
{
	bool changed;

	memset(out, 0, sizeof(*out));
	snprintf(out->node, sizeof(out->node), "%s", node);
	out->time = zl_wall_sec();
	pthread_mutex_lock(&s->mu);
	changed = s->changed || force;
	s->changed = false;
	out->bytes_done = ZL_MIN(s->snap.bytes_done, (uint64_t)INT64_MAX);
	out->bytes_left = ZL_MIN(s->snap.bytes_left, (uint64_t)INT64_MAX);
	out->rate = ZL_MIN(s->snap_rate, (uint64_t)INT64_MAX);
	out->recovering = s->snap.members;
	out->peering_slices = s->snap_peering;
	out->n_peering = s->snap_n_peering;
	memcpy(out->peering, s->snap_peer, out->n_peering * sizeof(out->peering[0]));
	out->chunk_writes = ZL_MIN(s->snap_store.chunk_writes, (uint64_t)INT64_MAX);
	out->durable_ios = ZL_MIN(s->snap_store.durable_ios, (uint64_t)INT64_MAX);
	out->journal_size = s->snap_store.journal_size;
	out->journal_used = s->snap_store.journal_used;
	out->journal_checkpoints = s->snap_store.journal_checkpoints;
	out->journal_waits = s->snap_store.journal_waits;
	out->journal_dirty_chunks = s->snap_store.journal_dirty_chunks;
	out->disk_full = s->snap_store.disk_full;
	out->disk_near_full = s->snap_store.disk_near_full;
	memcpy(out->disk_error, s->disk_error, sizeof(out->disk_error));
	out->snap_bytes = s->snap_space.bytes;
	out->snap_entries = s->snap_space.entries;
	out->n_snap = s->snap_space.n;
	memcpy(out->snap, s->snap_space.e, out->n_snap * sizeof(out->snap[0]));
	pthread_mutex_unlock(&s->mu);
	return changed;
}

void zl_storage_status_disk_error(struct zl_storage *st, const char *why)
{
	struct zl_storage_status *s = st->status;

	struct status_store ss;

	if (!s)
		return;
	/* The store's figures at the fence go out with it: they change no
	 * more. */
	status_store_sample(st, &ss);
	pthread_mutex_lock(&s->mu);
	s->snap_store = ss;
	snprintf(s->disk_error, sizeof(s->disk_error), "%s", why);
	s->changed = true;
	pthread_mutex_unlock(&s->mu);
}
