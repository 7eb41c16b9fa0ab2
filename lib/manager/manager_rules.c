/* The decision rules of the manager (docs/REPLICATION.md §2, M1-M7, and
 * the rebalance of §5): from the node table, the failure reports and one
 * slice row, the membership change to make. They read no etcd; the only I/O
 * they start is deleting a report that is stale or pointless
 * (manager_report_drop). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/placement/placement.h"
#include "manager_internal.h"

static void manager_change_add(struct manager_decision *d, const struct zl_slice *cur, int i,
			       enum zl_member_state to, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void manager_change_add(struct manager_decision *d, const struct zl_slice *cur, int i,
			       enum zl_member_state to, const char *fmt, ...)
{
	struct manager_change *ch;
	va_list ap;

	for (int k = 0; k < d->n_ch; k++) {
		if (d->ch[k].member == i) {
			ch = &d->ch[k];
			goto fill;
		}
	}
	if (d->n_ch == (int)ZL_ARRAY_SIZE(d->ch))
		return;
	ch = &d->ch[d->n_ch++];
	ch->member = i;
	snprintf(ch->old_node, sizeof(ch->old_node), "%s", cur->nodes[i]);
	ch->from = zl_slice_member_state(cur, i);
fill:
	ch->to = to;
	snprintf(ch->new_node, sizeof(ch->new_node), "%s", d->row.nodes[i]);
	va_start(ap, fmt);
	vsnprintf(ch->reason, sizeof(ch->reason), fmt, ap);
	va_end(ap);
	zl_slice_member_set(&d->row, i, to);
}

/* Keeps the primary where it is when the decision does not take it out of
 * sync: a member ahead of it in preference order that becomes in sync again
 * (M2-M4) would otherwise become the primary, a needless new term and
 * peering. The old primary's slot (node, state, incarnation) moves to the
 * front. */
void manager_keep_primary(const struct zl_slice *cur, struct zl_slice *row)
{
	int op = zl_slice_primary(cur), j, np = zl_slice_primary(row);
	char node[ZL_NODE_ID_MAX], inc[ZL_META_ID_SIZE];
	bool in_sync;
	uint8_t st;

	if (op < 0)
		return;
	j = zl_slice_index_of(row, cur->nodes[op]);
	if (j < 0 || j == np || !row->in_sync[j] ||
	    strcmp(row->incarnation[j], cur->incarnation[op]))
		return;
	memcpy(node, row->nodes[j], sizeof(node));
	memcpy(inc, row->incarnation[j], sizeof(inc));
	in_sync = row->in_sync[j];
	st = row->state[j];
	for (int k = j; k > 0; k--) {
		memcpy(row->nodes[k], row->nodes[k - 1], sizeof(row->nodes[k]));
		memcpy(row->incarnation[k], row->incarnation[k - 1], sizeof(row->incarnation[k]));
		row->in_sync[k] = row->in_sync[k - 1];
		row->state[k] = row->state[k - 1];
	}
	memcpy(row->nodes[0], node, sizeof(node));
	memcpy(row->incarnation[0], inc, sizeof(inc));
	row->in_sync[0] = in_sync;
	row->state[0] = st;
}

/* A report is handled once per pass: mod_rev -1 marks it. */
bool manager_report_done(const struct zl_report *r)
{
	return r->mod_rev < 0;
}

static void manager_act(struct manager_decision *d, struct zl_report *r)
{
	if (d->n_acted < (int)ZL_ARRAY_SIZE(d->acted))
		d->acted[d->n_acted++] = r;
}

/* A failure report (any reporter) about the member c names, at c's row
 * version or later, written no earlier than c (report time): of the two,
 * the failure wins and c is not applied. Reports of one (reporter, peer)
 * share a key, so this is another reporter's word; the primary's own later
 * failure replaces its CAUGHT_UP (see manager_row_recheck). */
static bool manager_failure_after(const struct zl_report *c, const struct zl_report *reps,
				  size_t n_reps)
{
	for (size_t k = 0; k < n_reps; k++) {
		const struct zl_report *r = &reps[k];

		if (r != c && r->slice == c->slice && !strcmp(r->vol_id, c->vol_id) &&
		    !strcmp(r->peer, c->peer) && strcmp(r->error, "CAUGHT_UP") &&
		    r->slice_ver >= c->slice_ver && r->time >= c->time)
			return true;
	}
	return false;
}

/* M4 on CAUGHT_UP report r about member idx of cur, from its primary. */
static int manager_caught_up(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			     struct zl_report *r, int idx, const struct zl_report *reps,
			     size_t n_reps, struct manager_decision *d)
{
	const struct zl_slice *cur = &v->slices[slice];
	const struct manager_node *nd = manager_node_find(m, r->peer);
	char key[256];

	if (zl_slice_member_state(cur, idx) != ZL_MEMBER_RECOVERING)
		return manager_report_drop(m, r, "the member is not recovering");
	snprintf(key, sizeof(key), "m4/%s/%u/%" PRIu64 "/%s", v->id, slice, cur->version, r->peer);
	if (manager_failure_after(r, reps, n_reps)) {
		/* Kept: applied only if the failure goes away first. */
		if (manager_once(m, key))
			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s CAUGHT_UP by %s not "
				    "applied: a later failure report about it exists",
				    v->id, slice, r->peer, r->reporter);
		return 0;
	}
	if (!nd || !nd->present) {
		/* Never IN_SYNC on a dead node; M1 takes it out after grace. */
		if (manager_once(m, key))
			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s CAUGHT_UP by %s not "
				    "applied: its node record is gone",
				    v->id, slice, r->peer, r->reporter);
		return 0;
	}
	manager_change_add(d, cur, idx, ZL_MEMBER_IN_SYNC, "M4 primary %s reports it caught up",
			   r->reporter);
	manager_act(d, r);
	return 0;
}

/* M4, M5, M6 and stale reports of one row. Reports that are stale or
 * pointless are deleted here; those acted on go into d->acted. Returns 0 or
 * -ECANCELED (leadership lost). */
int manager_decide_reports(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			   struct zl_report *reps, size_t n_reps, struct manager_decision *d)
{
	const struct zl_slice *cur = &v->slices[slice];
	int prim = zl_slice_primary(cur);
	char key[256];
	int rc = 0;

	/* Two passes: CAUGHT_UP first, so that a failure of the same member
	 * at the same version wins. */
	for (int pass = 0; pass < 2 && !rc; pass++) {
		for (size_t k = 0; k < n_reps && !rc; k++) {
			struct zl_report *r = &reps[k];
			bool caught_up = !strcmp(r->error, "CAUGHT_UP");
			bool from_primary;
			int idx;

			if (r->slice != slice || strcmp(r->vol_id, v->id) ||
			    caught_up != (pass == 0) || manager_report_done(r))
				continue;
			if (r->slice_ver < cur->version) {
				rc = manager_report_drop(m, r, "stale (the row moved on)");
				continue;
			}
			if (r->slice_ver > cur->version)
				continue; /* newer than our read: next pass */
			idx = zl_slice_index_of(cur, r->peer);
			if (idx < 0) {
				rc = manager_report_drop(m, r,
							 "the peer is not a member of the row");
				continue;
			}
			from_primary = prim >= 0 && !strcmp(r->reporter, cur->nodes[prim]);
			if (caught_up) {
				if (!from_primary)
					rc = manager_report_drop(m, r,
								 "CAUGHT_UP not from the primary");
				else
					rc =
					    manager_caught_up(m, v, slice, r, idx, reps, n_reps, d);
				continue;
			}
			if (from_primary && idx != prim) {
				if (zl_slice_member_state(cur, idx) == ZL_MEMBER_OUT) {
					rc = manager_report_drop(m, r, "the member is already out");
				} else {
					manager_change_add(d, cur, idx, ZL_MEMBER_OUT,
							   "M5 primary %s reports %s", r->reporter,
							   r->error);
					manager_act(d, r);
				}
				continue;
			}
			/* M6: one reporter's word evicts nobody; a peer whose node
			 * record is gone is handled by M1. The report stays until
			 * the row moves on or its lease ends. */
			snprintf(key, sizeof(key), "m6/%s/%u/%" PRIu64 "/%s/%s", v->id, slice,
				 cur->version, r->reporter, r->peer);
			if (manager_once(m, key))
				ZL_LOG_INFO(MGR_LOG,
					    "manager: vol=%s slice=%u member=%s report by %s "
					    "error=%s ignored: not the primary's word about a "
					    "backup (M6; the node's lease decides)",
					    v->id, slice, r->peer, r->reporter, r->error);
		}
	}
	return rc;
}

/* M7: a live node for slot `slot` of row (not in the row; a failure domain
 * of its own when the live nodes span at least `replicas` domains), chosen
 * by lib/placement (weighted by free space). NULL when there is none. */
static const struct zl_node_info *manager_replacement(struct zl_manager *m,
						      const struct zl_volume *v, uint32_t slice,
						      const struct zl_slice *row, int slot)
{
	struct zl_place_node *cand = NULL;
	const struct manager_node **cnode = NULL;
	const struct zl_node_info *res = NULL;
	size_t n = 0, domains = 0;
	uint32_t pick = 0;

	cand = calloc(m->n_nodes ? m->n_nodes : 1, sizeof(*cand));
	cnode = calloc(m->n_nodes ? m->n_nodes : 1, sizeof(*cnode));
	if (!cand || !cnode)
		goto out;
	domains = manager_live_domains(m);
	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct manager_node *a = &m->nodes[i];
		bool ok = manager_node_usable(a) && zl_slice_index_of(row, a->id) < 0;

		for (int j = 0; ok && j < row->n && domains >= v->replicas; j++) {
			const struct manager_node *o = manager_node_find(m, row->nodes[j]);

			if (j != slot && o && o->present && a->info.domain[0] &&
			    !strcmp(o->info.domain, a->info.domain))
				ok = false;
		}
		if (!ok)
			continue;
		cand[n].id = a->id;
		cand[n].domain = a->info.domain;
		cand[n].free = a->info.free;
		cnode[n++] = a;
	}
	if (n && !zl_placement_compute(cand, n, 1, 1, v->num * 65537u + slice, &pick) && pick < n) {
		/* placement sorts by id inside but returns input indexes. */
		res = &cnode[pick]->info;
	}
out:
	free(cand);
	free(cnode);
	return res;
}

/* M2 waits after M5: a primary's failure report right after a kill comes
 * while the dead node's record still lives (its lease runs for
 * MGR_M2_HOLD_MS), and "back with the same incarnation" would make it
 * RECOVERING: every write then forwards to a dead node and fails, the
 * primary reports again, M5, M2, ... a row version per round until the
 * lease ends. So a member M5 set OUT comes back only once its node
 * re-registered (a new start_time: the daemon restarted) or its record
 * outlived the hold (the node is alive; the failure was transient). A
 * manager that took over has no hold (it did not see the M5): the old
 * behaviour, at most one such round. */
static bool manager_m2_hold(struct zl_manager *m, const struct manager_node *nd, uint64_t now)
{
	if (!nd->out_ms || nd->info.start_time != nd->out_start ||
	    now - nd->out_ms >= MGR_M2_HOLD_MS)
		return false;
	manager_deadline(m, nd->out_ms + MGR_M2_HOLD_MS);
	return true;
}

/* M7 on member i of cur, OUT on a node gone (or, M8, whose disk failed)
 * since `since` (zl_now_ms): replaced by a usable node after
 * down_out_interval. */
static void manager_m7(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
		       struct manager_decision *d, int i, uint64_t since, uint64_t now)
{
	const struct zl_slice *cur = &v->slices[slice];
	const struct zl_node_info *rep;
	uint64_t gone = now - since;
	char key[256];

	if (gone < (uint64_t)m->down_out_s * 1000) {
		manager_deadline(m, since + (uint64_t)m->down_out_s * 1000);
		return;
	}
	rep = manager_replacement(m, v, slice, &d->row, i);
	if (!rep) {
		snprintf(key, sizeof(key), "m7/%s/%u/%" PRIu64 "/%d", v->id, slice, cur->version,
			 i);
		if (manager_once(m, key))
			ZL_LOG_WARN(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s gone for %" PRIu64
				    " s: no live node outside the row%s to replace it; "
				    "waiting (register a storage node)",
				    v->id, slice, cur->nodes[i], gone / 1000,
				    " and its failure domains");
		return;
	}
	snprintf(d->row.nodes[i], sizeof(d->row.nodes[i]), "%s", rep->id);
	snprintf(d->row.incarnation[i], sizeof(d->row.incarnation[i]), "%s", rep->incarnation);
	manager_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
			   "M7 node gone for %" PRIu64 " s: replaced by %s (domain \"%s\")",
			   gone / 1000, rep->id, rep->domain);
}

/* Member i of the row being decided is its last in-sync member: it stays,
 * the row waits (logged once per row version and rule, with what happened
 * to it). */
static bool manager_last_in_sync(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
				 const struct manager_decision *d, int i, const char *rule,
				 const char *what)
{
	const struct zl_slice *cur = &v->slices[slice];
	char key[256];

	if (zl_slice_member_state(cur, i) != ZL_MEMBER_IN_SYNC ||
	    zl_slice_member_count(&d->row, ZL_MEMBER_IN_SYNC) > 1)
		return false;
	snprintf(key, sizeof(key), "%s/%s/%u/%" PRIu64 "/%d", rule, v->id, slice, cur->version, i);
	if (manager_once(m, key))
		ZL_LOG_WARN(MGR_LOG,
			    "manager: vol=%s slice=%u member=%s %s but it is the last in-sync "
			    "member: the row waits for it",
			    v->id, slice, cur->nodes[i], what);
	return true;
}

/* M1, M2, M3, M7 and M8 on one row, from the node table. */
void manager_decide_nodes(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			  struct manager_decision *d)
{
	const struct zl_slice *cur = &v->slices[slice];
	uint64_t now = zl_now_ms();
	char what[128];

	for (int i = 0; i < cur->n; i++) {
		enum zl_member_state st = zl_slice_member_state(cur, i);
		struct manager_node *nd = manager_node_get(m, cur->nodes[i]);
		const char *rinc = cur->incarnation[i];

		if (!nd)
			return; /* ENOMEM: next pass */
		if (nd->present && nd->disk_error[0]) {
			/* M8: its status record says its disk failed; it
			 * acknowledges nothing (storage/storage_ddir.c). Out
			 * at once (a new primary when it was one), replaced
			 * like a gone node (M7) after down_out_interval. */
			if (st == ZL_MEMBER_OUT) {
				manager_m7(m, v, slice, d, i, nd->disk_ms, now);
				continue;
			}
			if (manager_last_in_sync(m, v, slice, d, i, "m8", "disk failed"))
				continue;
			manager_change_add(d, cur, i, ZL_MEMBER_OUT, "M8 disk failed: %.120s",
					   nd->disk_error);
			continue;
		}
		if (nd->present) {
			const char *ninc = nd->info.incarnation;

			if (ninc[0] && rinc[0] && strcmp(ninc, rinc)) {
				snprintf(what, sizeof(what), "has a new incarnation=%s", ninc);
				if (manager_last_in_sync(m, v, slice, d, i, "m3", what))
					continue;
				snprintf(d->row.incarnation[i], sizeof(d->row.incarnation[i]), "%s",
					 ninc);
				manager_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
						   "M3 new incarnation %.8s (was %.8s): full copy",
						   ninc, rinc);
			} else if (st == ZL_MEMBER_OUT) {
				if (manager_m2_hold(m, nd, now))
					continue;
				if (!rinc[0] && ninc[0])
					snprintf(d->row.incarnation[i],
						 sizeof(d->row.incarnation[i]), "%s", ninc);
				manager_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
						   "M2 node back with the same incarnation");
			}
			continue;
		}
		if (st != ZL_MEMBER_OUT) {
			uint64_t gone = now - nd->gone_ms;

			if (gone < (uint64_t)m->grace_s * 1000) {
				manager_deadline(m, nd->gone_ms + (uint64_t)m->grace_s * 1000);
				continue;
			}
			if (manager_last_in_sync(m, v, slice, d, i, "m1", "node record gone"))
				continue;
			manager_change_add(d, cur, i, ZL_MEMBER_OUT,
					   "M1 node record gone for %" PRIu64 " ms", gone);
			continue;
		}
		manager_m7(m, v, slice, d, i, nd->gone_ms, now);
	}
}

/* Live node a may take slot `slot` of row: not in the row, and in a failure
 * domain of its own among the other members when the live nodes span at
 * least `replicas` domains (the rule of manager_replacement). */
static bool manager_rebal_fits(struct zl_manager *m, const struct zl_volume *v,
			       const struct zl_slice *row, int slot, const struct manager_node *a,
			       size_t domains)
{
	if (!manager_node_usable(a) || zl_slice_index_of(row, a->id) >= 0)
		return false;
	for (int j = 0; j < row->n && domains >= v->replicas; j++) {
		const struct manager_node *o = manager_node_find(m, row->nodes[j]);

		if (j != slot && o && o->present && a->info.domain[0] &&
		    !strcmp(o->info.domain, a->info.domain))
			return false;
	}
	return true;
}

/* Members of v per live node into cnt[] (indexed like m->nodes); the number
 * of rows not settled into *moving. */
void manager_rebal_count(struct zl_manager *m, const struct zl_volume *v, uint32_t *cnt,
			 uint32_t *moving)
{
	memset(cnt, 0, m->n_nodes * sizeof(*cnt));
	*moving = 0;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *row = &v->slices[s];

		*moving += !manager_row_settled(m, row);
		for (int i = 0; i < row->n; i++) {
			for (size_t k = 0; k < m->n_nodes; k++) {
				if (m->nodes[k].present && !strcmp(m->nodes[k].id, row->nodes[i]))
					cnt[k]++;
			}
		}
	}
}

/* The most and least loaded live nodes (indexes into m->nodes; -1 when no
 * live node). */
void manager_rebal_extremes(struct zl_manager *m, const uint32_t *cnt, long *hi, long *lo)
{
	*hi = *lo = -1;
	for (size_t k = 0; k < m->n_nodes; k++) {
		if (!m->nodes[k].present)
			continue;
		if (*hi < 0 || cnt[k] > cnt[*hi])
			*hi = (long)k;
		if (*lo < 0 || cnt[k] < cnt[*lo])
			*lo = (long)k;
	}
}

/* A settled row of v with a member on node hi that a node loaded less than
 * cnt[hi] - 1 may take; prefers a row where hi is not the primary (no new
 * term). Fills *slice, *slot and *to (index into m->nodes); false when none. */
bool manager_rebal_pick(struct zl_manager *m, const struct zl_volume *v, const uint32_t *cnt,
			long hi, uint32_t *slice, int *slot, long *to)
{
	size_t domains = manager_live_domains(m);
	bool found = false;

	for (int want_backup = 1; want_backup >= 0 && !found; want_backup--) {
		for (uint32_t s = 0; s < v->n_slices && !found; s++) {
			const struct zl_slice *row = &v->slices[s];
			int i = zl_slice_index_of(row, m->nodes[hi].id);
			long best = -1;

			if (i < 0 || !manager_row_settled(m, row) ||
			    (want_backup && i == zl_slice_primary(row)))
				continue;
			for (size_t k = 0; k < m->n_nodes; k++) {
				if (cnt[k] + 1 >= cnt[hi] ||
				    !manager_rebal_fits(m, v, row, i, &m->nodes[k], domains))
					continue;
				if (best < 0 || cnt[k] < cnt[best])
					best = (long)k;
			}
			if (best >= 0) {
				*slice = s;
				*slot = i;
				*to = best;
				found = true;
			}
		}
	}
	return found;
}
