/* One pass of the manager: reads reports, rebalance requests and volumes
 * through lib/meta, decides row by row (manager_rules.c) and writes each
 * decision as one zl_meta_slice_set at the row version it was made on. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager_internal.h"

/* Deletes a report (the revision read) if this replica still leads. */
int manager_report_drop(struct zl_manager *m, struct zl_report *r, const char *why)
{
	int rc;

	if (!manager_may_write(m))
		return -ECANCELED;
	rc = zl_meta_report_delete(m->etcd, m->prefix, r);
	r->mod_rev = -1;
	if (rc == -ZL_ERR_CONFLICT) {
		r->mod_rev = -2; /* re-put meanwhile: manager_row_recheck, next pass */
		return 0;
	}
	if (!rc)
		ZL_LOG_INFO(MGR_LOG,
			    "manager: vol=%s slice=%u report reporter=%s peer=%s error=%s "
			    "slice_ver=%" PRIu64 " deleted: %s",
			    r->vol_id, r->slice, r->reporter, r->peer, r->error, r->slice_ver, why);
	return rc;
}

/* After a row write that applied CAUGHT_UP report *r (read at row version
 * ver) whose delete found it re-put meanwhile: the primary wrote a failure
 * about that member over it (one key per reporter and peer), i.e. the
 * member missed a write after the CAUGHT_UP, while the row said RECOVERING
 * at ver. That failure is about the row just written, which says IN_SYNC:
 * *r becomes it at the new version, so the next round applies M5 (OUT,
 * then recovery again) instead of dropping it as stale. */
static void manager_row_recheck(struct zl_manager *m, struct zl_report *r, uint64_t ver,
				uint64_t new_ver)
{
	struct zl_report *list = NULL;
	size_t n = 0;

	if (zl_meta_report_list(m->etcd, m->prefix, r->vol_id, &list, &n))
		return; /* the primary reports again (storage heal_suspect) */
	for (size_t k = 0; k < n; k++) {
		struct zl_report *x = &list[k];

		if (x->slice != r->slice || strcmp(x->reporter, r->reporter) ||
		    strcmp(x->peer, r->peer) || !strcmp(x->error, "CAUGHT_UP") ||
		    x->slice_ver != ver)
			continue;
		ZL_LOG_WARN(MGR_LOG,
			    "manager: vol=%s slice=%u member=%s: %s reported error=%s at "
			    "slice_ver=%" PRIu64 " after its CAUGHT_UP (applied): the failure "
			    "wins at version %" PRIu64,
			    r->vol_id, r->slice, r->peer, r->reporter, x->error, ver, new_ver);
		*r = *x;
		r->slice_ver = new_ver;
		break;
	}
	free(list);
}

/* Decides, writes and logs the changes of one slice of *v until it needs
 * none (bounded). *v is kept current (the record each write returned, or a
 * reload after STALE). Returns 0, -ECANCELED (leadership lost: stop the
 * pass) or an error of the volume (logged; the next pass retries). */
static int manager_row(struct zl_manager *m, struct zl_volume *v, uint32_t slice,
		       struct zl_report *reps, size_t n_reps)
{
	struct manager_decision d;
	int rc = 0;

	for (int round = 0; round < MGR_ROW_ROUNDS; round++) {
		const struct zl_slice *cur = &v->slices[slice];
		struct zl_volume fresh;

		memset(&d, 0, sizeof(d));
		d.row = *cur;
		rc = n_reps ? manager_decide_reports(m, v, slice, reps, n_reps, &d) : 0;
		if (rc)
			return rc;
		if (!d.n_ch)
			manager_decide_nodes(m, v, slice, &d);
		if (!d.n_ch)
			return 0;
		manager_keep_primary(cur, &d.row);
		d.row.term = 0; /* the current one, plus one when the primary changes */
		if (!manager_may_write(m))
			return -ECANCELED;
		rc = zl_meta_slice_set(m->etcd, m->prefix, v->id, slice, cur->version, &d.row,
				       &fresh);
		if (rc == -ZL_ERR_STALE || rc == -ZL_ERR_CONFLICT) {
			/* Someone changed the row after our read: decide again. */
			rc = zl_meta_volume_get(m->etcd, m->prefix, v->id, &fresh);
			if (rc)
				return rc;
			zl_volume_fini(v);
			*v = fresh;
			if (slice >= v->n_slices)
				return 0;
			continue;
		}
		if (rc) {
			ZL_LOG_WARN(MGR_LOG,
				    "manager: vol=%s slice=%u version=%" PRIu64
				    ": row write refused err=%s (see the meta line above); next "
				    "try in a pass",
				    v->id, slice, cur->version, zl_errname(rc));
			return rc;
		}
		for (int k = 0; k < d.n_ch; k++) {
			const struct manager_change *ch = &d.ch[k];
			const struct zl_slice *nw = &fresh.slices[slice];
			bool moved = strcmp(ch->old_node, ch->new_node);
			struct manager_node *nd;

			pthread_mutex_lock(&m->lock);
			if (ch->to <= ZL_MEMBER_IN_SYNC)
				m->stats.changes[ch->to]++;
			m->stats.replacements += moved;
			pthread_mutex_unlock(&m->lock);

			if (ch->to == ZL_MEMBER_OUT && !strncmp(ch->reason, "M5", 2) &&
			    (nd = manager_node_find(m, ch->old_node)) && nd->present) {
				nd->out_ms = zl_now_ms();
				nd->out_start = nd->info.start_time;
			}

			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s%s%s %s->%s reason=\"%s\" "
				    "version=%" PRIu64 "->%" PRIu64 " term=%u->%u",
				    v->id, slice, ch->old_node, moved ? "->" : "",
				    moved ? ch->new_node : "", zl_member_state_name(ch->from),
				    zl_member_state_name(ch->to), ch->reason, cur->version,
				    nw->version, cur->term ? cur->term : 1, nw->term);
		}
		for (int k = 0; k < d.n_acted; k++) {
			struct zl_report *r = d.acted[k];

			rc = manager_report_drop(m, r, "acted on");
			if (rc == -ECANCELED)
				break;
			if (r->mod_rev == -2 && !strcmp(r->error, "CAUGHT_UP"))
				manager_row_recheck(m, r, cur->version,
						    fresh.slices[slice].version);
		}
		zl_volume_fini(v);
		*v = fresh;
		if (rc == -ECANCELED)
			return rc;
	}
	return 0;
}

/* Moves member `slot` of row `slice` to node m->nodes[to] as RECOVERING at
 * version 0 (what M7 does for a dead node). 0, -ZL_ERR_STALE (someone wrote
 * the row: the next pass decides again), -ECANCELED or another error. */
static int manager_rebal_move(struct zl_manager *m, struct zl_volume *v, uint32_t slice, int slot,
			      long to)
{
	const struct zl_slice *cur = &v->slices[slice];
	const struct manager_node *nd = &m->nodes[to];
	struct zl_slice row = *cur;
	struct zl_volume fresh;
	char from[ZL_NODE_ID_MAX];
	int rc;

	snprintf(from, sizeof(from), "%s", cur->nodes[slot]);
	snprintf(row.nodes[slot], sizeof(row.nodes[slot]), "%s", nd->id);
	snprintf(row.incarnation[slot], sizeof(row.incarnation[slot]), "%s", nd->info.incarnation);
	zl_slice_member_set(&row, slot, ZL_MEMBER_RECOVERING);
	row.term = 0; /* the current one, plus one when the primary moves */
	if (!manager_may_write(m))
		return -ECANCELED;
	rc = zl_meta_slice_set(m->etcd, m->prefix, v->id, slice, cur->version, &row, &fresh);
	if (rc) {
		ZL_LOG_WARN(MGR_LOG,
			    "manager: vol=%s slice=%u rebalance %s -> %s: row write refused "
			    "err=%s; next try in a pass",
			    v->id, slice, from, nd->id, zl_errname(rc));
		return rc == -ZL_ERR_CONFLICT ? -ZL_ERR_STALE : rc;
	}
	pthread_mutex_lock(&m->lock);
	m->stats.rebalance_moves++;
	pthread_mutex_unlock(&m->lock);
	ZL_LOG_INFO(MGR_LOG,
		    "manager: vol=%s slice=%u rebalance %s -> %s (%s, full copy) version=%" PRIu64
		    "->%" PRIu64 " term=%u->%u",
		    v->id, slice, from, nd->id,
		    slot == zl_slice_primary(cur) ? "was the primary" : "backup", cur->version,
		    fresh.slices[slice].version, cur->term ? cur->term : 1,
		    fresh.slices[slice].term);
	zl_volume_fini(v);
	*v = fresh;
	return 0;
}

/* One rebalance step of volume *v on request *req: starts moves while fewer
 * than MGR_REBAL_INFLIGHT rows are moving, and deletes the request once the
 * volume is balanced (every row settled, max - min members per live node
 * <= 1). 0, -ECANCELED or an error (the next pass retries). */
static int manager_rebalance(struct zl_manager *m, struct zl_volume *v,
			     struct zl_rebalance_req *req)
{
	uint32_t *cnt, moving;
	long hi, lo;
	int rc = 0;

	if (v->replicas <= zl_volume_min_size(v)) {
		char key[128];

		snprintf(key, sizeof(key), "rebal-min/%s", v->id);
		if (manager_once(m, key))
			ZL_LOG_WARN(MGR_LOG,
				    "manager: vol=%s rebalance refused: a move takes one of its %u "
				    "members out of sync, which would leave fewer than min_size=%u "
				    "in sync; delete the request (etcdctl del %srebalance/%s)",
				    v->id, v->replicas, zl_volume_min_size(v), m->prefix, v->id);
		return 0;
	}
	cnt = calloc(m->n_nodes ? m->n_nodes : 1, sizeof(*cnt));
	if (!cnt)
		return -ENOMEM;
	for (;;) {
		uint32_t slice;
		int slot;
		long to;

		manager_rebal_count(m, v, cnt, &moving);
		manager_rebal_extremes(m, cnt, &hi, &lo);
		if (hi < 0)
			break;
		if (!moving && cnt[hi] <= cnt[lo] + 1) {
			if (!manager_may_write(m)) {
				rc = -ECANCELED;
				break;
			}
			rc = zl_meta_rebalance_delete(m->etcd, m->prefix, req);
			if (!rc)
				ZL_LOG_INFO(MGR_LOG,
					    "manager: vol=%s rebalance done (requested by %s): "
					    "%u to %u members per live node",
					    v->id, req->by, cnt[lo], cnt[hi]);
			else if (rc == -ZL_ERR_CONFLICT)
				rc = 0; /* requested again meanwhile: the next pass */
			break;
		}
		if (moving >= MGR_REBAL_INFLIGHT || cnt[hi] <= cnt[lo] + 1)
			break;
		if (!manager_rebal_pick(m, v, cnt, hi, &slice, &slot, &to)) {
			char key[256];

			snprintf(key, sizeof(key), "rebal/%s/%u/%u/%u", v->id, moving, cnt[hi],
				 cnt[lo]);
			if (!moving && manager_once(m, key))
				ZL_LOG_WARN(
				    MGR_LOG,
				    "manager: vol=%s rebalance stuck: node %s holds %u "
				    "members, %s %u, but no in-sync row of %s can move to a "
				    "less loaded node within the failure-domain rules",
				    v->id, m->nodes[hi].id, cnt[hi], m->nodes[lo].id, cnt[lo],
				    m->nodes[hi].id);
			break;
		}
		rc = manager_rebal_move(m, v, slice, slot, to);
		if (rc)
			break;
	}
	free(cnt);
	return rc == -ZL_ERR_STALE ? 0 : rc;
}

/* One leader pass over every volume. 0, -ECANCELED or an etcd error. */
/* The class of a row for the metrics. */
static enum zl_manager_slice_class manager_slice_class(const struct zl_slice *row)
{
	int in = zl_slice_member_count(row, ZL_MEMBER_IN_SYNC);

	if (!in)
		return ZL_MGR_SLICE_DOWN;
	if (zl_slice_member_count(row, ZL_MEMBER_RECOVERING))
		return ZL_MGR_SLICE_RECOVERING;
	return in < row->n ? ZL_MGR_SLICE_DEGRADED : ZL_MGR_SLICE_ACTIVE;
}

int manager_pass(struct zl_manager *m)
{
	struct zl_report *reps = NULL;
	struct zl_volume *vols = NULL;
	struct zl_rebalance_req *rebs = NULL;
	size_t n_reps = 0, n_vols = 0, n_rebs = 0;
	uint32_t cls[ZL_MGR_SLICE_CLASSES_] = {0}, n_ready = 0;
	int rc;

	/* Reports before volumes: a report written after a row change names
	 * the new version, which the volume read then has too. */
	rc = zl_meta_report_list(m->etcd, m->prefix, NULL, &reps, &n_reps);
	if (!rc)
		rc = zl_meta_rebalance_list(m->etcd, m->prefix, &rebs, &n_rebs);
	if (!rc)
		rc = zl_meta_volume_list(m->etcd, m->prefix, &vols, &n_vols);
	for (size_t i = 0; !rc && i < n_vols; i++) {
		struct zl_volume *v = &vols[i];
		size_t first = n_reps, cnt = 0;

		if (strcmp(v->state, "ready"))
			continue;
		for (size_t k = 0; k < n_reps; k++) {
			if (!strcmp(reps[k].vol_id, v->id)) {
				if (first == n_reps)
					first = k;
				cnt++;
			}
		}
		for (uint32_t s = 0; s < v->n_slices; s++) {
			int r = manager_row(m, v, s, cnt ? &reps[first] : NULL, cnt);

			if (r == -ECANCELED) {
				rc = r;
				break;
			}
		}
		for (size_t k = 0; !rc && k < n_rebs; k++) {
			if (!strcmp(rebs[k].vol_id, v->id) &&
			    manager_rebalance(m, v, &rebs[k]) == -ECANCELED)
				rc = -ECANCELED;
		}
		n_ready++;
		for (uint32_t s = 0; s < v->n_slices; s++)
			cls[manager_slice_class(&v->slices[s])]++;
	}
	/* Requests of volumes that no longer exist. */
	for (size_t k = 0; !rc && k < n_rebs; k++) {
		bool known = false;

		for (size_t i = 0; i < n_vols && !known; i++)
			known = !strcmp(vols[i].id, rebs[k].vol_id);
		if (!known && manager_may_write(m) &&
		    !zl_meta_rebalance_delete(m->etcd, m->prefix, &rebs[k]))
			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s rebalance request deleted: the volume "
				    "does not exist",
				    rebs[k].vol_id);
	}
	free(rebs);
	/* Reports of volumes that no longer exist. */
	for (size_t k = 0; !rc && k < n_reps; k++) {
		bool known = false;

		for (size_t i = 0; i < n_vols && !known; i++)
			known = !strcmp(vols[i].id, reps[k].vol_id);
		if (!known && !manager_report_done(&reps[k]))
			rc = manager_report_drop(m, &reps[k], "the volume does not exist");
	}
	zl_meta_volume_list_free(vols, n_vols);
	free(reps);
	pthread_mutex_lock(&m->lock);
	m->stats.passes++;
	if (rc) {
		m->stats.pass_errors++;
	} else {
		memcpy(m->stats.slices, cls, sizeof(cls));
		m->stats.volumes = n_ready;
		m->stats.last_pass_ms = zl_now_ms();
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}
