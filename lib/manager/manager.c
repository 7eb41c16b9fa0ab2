/* The cluster manager (docs/REPLICATION.md §2, rules M1-M7 of the heal
 * contract): the one writer of slice membership, run by the elected leader
 * replica with --manager=on.
 *
 * Its own thread and etcd handle, so no decision ever delays a CSI call or
 * the lease keepalives of the background thread. Four prefix watches
 * (nodes/, volumes/, reports/, rebalance/) only wake the thread; every pass then reads
 * the whole state (node records, reports, volumes) and decides from that,
 * level-triggered, so an event lost to a watch compaction (REVIEW item 8)
 * or a reconnect delays a decision by at most the 1 s tick. Followers keep
 * the node table (when each node record disappeared) current too, so a
 * replica that takes over does not restart the grace and down-out clocks.
 *
 * Every row change is one zl_meta_slice_set at the slice version the
 * decision was made on; -ZL_ERR_STALE reloads the volume and decides again.
 * Leadership is checked before every write (cfg.leader_may_write: the
 * caller's lease was renewed so recently that the write lands before it
 * could expire), and a pass stops at the first write it may no longer make. */
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/common/common.h"
#include "lib/manager/manager.h"
#include "lib/meta/meta.h"
#include "lib/placement/placement.h"

#define MGR_LOG "manager"
#define MGR_TICK_MS 1000
/* Writes of one slice in one pass (a report decision, then a node one). */
#define MGR_ROW_ROUNDS 4
/* Remembered "waits" lines (logged once per row version and reason). */
#define MGR_ONCE_SLOTS 256
/* M2 after M5: how long a member set OUT on a primary's failure report
 * stays out while its node record lives on unchanged (the storage node
 * lease, NODE_LEASE_TTL in storage/storage_node.c). */
#define MGR_M2_HOLD_MS 10000

/* One storage node as the manager last saw it. */
struct mgr_node {
	char id[ZL_NODE_ID_MAX];
	bool present;		/* in the last successful node list */
	uint64_t gone_ms;	/* zl_now_ms when first seen absent; 0 while present */
	struct zl_node_info info; /* last record seen (valid once seen) */
	bool seen;
	uint64_t out_ms;   /* zl_now_ms when M5 last set a member of it OUT; 0: never */
	int64_t out_start; /* info.start_time then */
};

struct zl_manager {
	struct zl_manager_cfg cfg;
	char prefix[128];
	struct zl_etcd *etcd; /* the manager's own handle */
	unsigned int grace_s, down_out_s;
	struct zl_etcd_watch *watch[4];

	/* lock protects dirty and stop; cond wakes the thread. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool dirty, stop;
	pthread_t thread;
	bool started;

	/* Manager thread only. */
	struct mgr_node *nodes;
	size_t n_nodes, cap_nodes;
	uint64_t next_deadline_ms; /* earliest grace/down-out expiry seen in the pass */
	char once[MGR_ONCE_SLOTS][256];
	unsigned int once_next;
};

/* One member change of a row decision. */
struct mgr_change {
	int member;
	char old_node[ZL_NODE_ID_MAX];
	char new_node[ZL_NODE_ID_MAX]; /* differs from old_node when replaced (M7) */
	enum zl_member_state from, to;
	char reason[160];
};

struct mgr_decision {
	struct zl_slice row; /* the row to write (term 0: lib/meta fills it) */
	struct mgr_change ch[ZL_MAX_REPLICAS * 2];
	int n_ch;
	/* Reports acted on: deleted once the row is written. */
	struct zl_report *acted[16];
	int n_acted;
};

static void mgr_wake(struct zl_manager *m)
{
	pthread_mutex_lock(&m->lock);
	m->dirty = true;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static void mgr_watch_cb(void *arg, enum zl_etcd_event_type type, const struct zl_etcd_kv *kv)
{
	(void)type;
	(void)kv;
	mgr_wake(arg);
}

void zl_manager_kick(struct zl_manager *m)
{
	if (m)
		mgr_wake(m);
}

static bool mgr_leads(struct zl_manager *m)
{
	return m->cfg.leader_is(m->cfg.leader_arg);
}

static bool mgr_may_write(struct zl_manager *m)
{
	return m->cfg.leader_may_write(m->cfg.leader_arg);
}

/* Logs a line once per key (e.g. a row that waits), until MGR_ONCE_SLOTS
 * other keys pushed it out. */
static bool mgr_once(struct zl_manager *m, const char *key)
{
	for (unsigned int i = 0; i < MGR_ONCE_SLOTS; i++) {
		if (!strcmp(m->once[i], key))
			return false;
	}
	snprintf(m->once[m->once_next], sizeof(m->once[0]), "%s", key);
	m->once_next = (m->once_next + 1) % MGR_ONCE_SLOTS;
	return true;
}

/* ---- the node table ---- */

static struct mgr_node *mgr_node_find(struct zl_manager *m, const char *id)
{
	for (size_t i = 0; i < m->n_nodes; i++) {
		if (!strcmp(m->nodes[i].id, id))
			return &m->nodes[i];
	}
	return NULL;
}

/* The entry of id, added as "absent since now" when the manager never saw
 * it (a row naming a node that is gone). NULL on ENOMEM. */
static struct mgr_node *mgr_node_get(struct zl_manager *m, const char *id)
{
	struct mgr_node *nd = mgr_node_find(m, id);

	if (nd)
		return nd;
	if (m->n_nodes == m->cap_nodes) {
		size_t cap = m->cap_nodes ? m->cap_nodes * 2 : 16;
		struct mgr_node *p = realloc(m->nodes, cap * sizeof(*p));

		if (!p)
			return NULL;
		m->nodes = p;
		m->cap_nodes = cap;
	}
	nd = &m->nodes[m->n_nodes++];
	memset(nd, 0, sizeof(*nd));
	snprintf(nd->id, sizeof(nd->id), "%s", id);
	nd->gone_ms = zl_now_ms();
	return nd;
}

/* Reads the node records and updates the table: present ones, and since
 * when the others are gone. 0 or an etcd error (the table is unchanged). */
static int mgr_nodes_refresh(struct zl_manager *m)
{
	struct zl_node_info *list = NULL;
	size_t n = 0;
	uint64_t now;
	int rc;

	rc = zl_meta_node_list(m->etcd, m->prefix, &list, &n);
	if (rc)
		return rc;
	now = zl_now_ms();
	for (size_t i = 0; i < m->n_nodes; i++)
		m->nodes[i].present = false;
	for (size_t i = 0; i < n; i++) {
		struct mgr_node *nd = mgr_node_get(m, list[i].id);

		if (!nd) {
			rc = -ENOMEM;
			break;
		}
		nd->present = true;
		nd->seen = true;
		nd->gone_ms = 0;
		nd->info = list[i];
	}
	for (size_t i = 0; i < m->n_nodes; i++) {
		if (!m->nodes[i].present && !m->nodes[i].gone_ms) {
			m->nodes[i].gone_ms = now;
			ZL_LOG_INFO(MGR_LOG, "manager: node=%s record gone", m->nodes[i].id);
		}
	}
	free(list);
	return rc;
}

/* ---- decisions ---- */

static void mgr_change_add(struct mgr_decision *d, const struct zl_slice *cur, int i,
			   enum zl_member_state to, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void mgr_change_add(struct mgr_decision *d, const struct zl_slice *cur, int i,
			   enum zl_member_state to, const char *fmt, ...)
{
	struct mgr_change *ch;
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
static void mgr_keep_primary(const struct zl_slice *cur, struct zl_slice *row)
{
	int op = zl_slice_primary(cur), j, np = zl_slice_primary(row);
	char node[ZL_NODE_ID_MAX], inc[ZL_META_ID_SIZE];
	bool in_sync;
	uint8_t st;

	if (op < 0)
		return;
	j = zl_slice_index_of(row, cur->nodes[op]);
	if (j < 0 || j == np || !row->in_sync[j] || strcmp(row->incarnation[j], cur->incarnation[op]))
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
static bool mgr_report_done(const struct zl_report *r)
{
	return r->mod_rev < 0;
}

static void mgr_act(struct mgr_decision *d, struct zl_report *r)
{
	if (d->n_acted < (int)ZL_ARRAY_SIZE(d->acted))
		d->acted[d->n_acted++] = r;
}

/* Deletes a report (the revision read) if this replica still leads. */
static int mgr_report_drop(struct zl_manager *m, struct zl_report *r, const char *why)
{
	int rc;

	if (!mgr_may_write(m))
		return -ECANCELED;
	rc = zl_meta_report_delete(m->etcd, m->prefix, r);
	r->mod_rev = -1;
	if (rc == -ZL_ERR_CONFLICT) {
		r->mod_rev = -2; /* re-put meanwhile: mgr_row_recheck, next pass */
		return 0;
	}
	if (!rc)
		ZL_LOG_INFO(MGR_LOG,
			    "manager: vol=%s slice=%u report reporter=%s peer=%s error=%s "
			    "slice_ver=%" PRIu64 " deleted: %s",
			    r->vol_id, r->slice, r->reporter, r->peer, r->error, r->slice_ver, why);
	return rc;
}

/* A failure report (any reporter) about the member c names, at c's row
 * version or later, written no earlier than c (report time): of the two,
 * the failure wins and c is not applied. Reports of one (reporter, peer)
 * share a key, so this is another reporter's word; the primary's own later
 * failure replaces its CAUGHT_UP (see mgr_row_recheck). */
static bool mgr_failure_after(const struct zl_report *c, const struct zl_report *reps,
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
static int mgr_caught_up(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			 struct zl_report *r, int idx, const struct zl_report *reps, size_t n_reps,
			 struct mgr_decision *d)
{
	const struct zl_slice *cur = &v->slices[slice];
	const struct mgr_node *nd = mgr_node_find(m, r->peer);
	char key[256];

	if (zl_slice_member_state(cur, idx) != ZL_MEMBER_RECOVERING)
		return mgr_report_drop(m, r, "the member is not recovering");
	snprintf(key, sizeof(key), "m4/%s/%u/%" PRIu64 "/%s", v->id, slice, cur->version, r->peer);
	if (mgr_failure_after(r, reps, n_reps)) {
		/* Kept: applied only if the failure goes away first. */
		if (mgr_once(m, key))
			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s CAUGHT_UP by %s not "
				    "applied: a later failure report about it exists",
				    v->id, slice, r->peer, r->reporter);
		return 0;
	}
	if (!nd || !nd->present) {
		/* Never IN_SYNC on a dead node; M1 takes it out after grace. */
		if (mgr_once(m, key))
			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s CAUGHT_UP by %s not "
				    "applied: its node record is gone",
				    v->id, slice, r->peer, r->reporter);
		return 0;
	}
	mgr_change_add(d, cur, idx, ZL_MEMBER_IN_SYNC, "M4 primary %s reports it caught up",
		       r->reporter);
	mgr_act(d, r);
	return 0;
}

/* M4, M5, M6 and stale reports of one row. Reports that are stale or
 * pointless are deleted here; those acted on go into d->acted. Returns 0 or
 * -ECANCELED (leadership lost). */
static int mgr_decide_reports(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			      struct zl_report *reps, size_t n_reps, struct mgr_decision *d)
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

			if (r->slice != slice || strcmp(r->vol_id, v->id) || caught_up != (pass == 0) ||
			    mgr_report_done(r))
				continue;
			if (r->slice_ver < cur->version) {
				rc = mgr_report_drop(m, r, "stale (the row moved on)");
				continue;
			}
			if (r->slice_ver > cur->version)
				continue; /* newer than our read: next pass */
			idx = zl_slice_index_of(cur, r->peer);
			if (idx < 0) {
				rc = mgr_report_drop(m, r, "the peer is not a member of the row");
				continue;
			}
			from_primary = prim >= 0 && !strcmp(r->reporter, cur->nodes[prim]);
			if (caught_up) {
				if (!from_primary)
					rc = mgr_report_drop(m, r, "CAUGHT_UP not from the primary");
				else
					rc = mgr_caught_up(m, v, slice, r, idx, reps, n_reps, d);
				continue;
			}
			if (from_primary && idx != prim) {
				if (zl_slice_member_state(cur, idx) == ZL_MEMBER_OUT) {
					rc = mgr_report_drop(m, r, "the member is already out");
				} else {
					mgr_change_add(d, cur, idx, ZL_MEMBER_OUT,
						       "M5 primary %s reports %s", r->reporter,
						       r->error);
					mgr_act(d, r);
				}
				continue;
			}
			/* M6: one reporter's word evicts nobody; a peer whose node
			 * record is gone is handled by M1. The report stays until
			 * the row moves on or its lease ends. */
			snprintf(key, sizeof(key), "m6/%s/%u/%" PRIu64 "/%s/%s", v->id, slice,
				 cur->version, r->reporter, r->peer);
			if (mgr_once(m, key))
				ZL_LOG_INFO(MGR_LOG,
					    "manager: vol=%s slice=%u member=%s report by %s "
					    "error=%s ignored: not the primary's word about a "
					    "backup (M6; the node's lease decides)",
					    v->id, slice, r->peer, r->reporter, r->error);
		}
	}
	return rc;
}

static void mgr_deadline(struct zl_manager *m, uint64_t at)
{
	if (!m->next_deadline_ms || at < m->next_deadline_ms)
		m->next_deadline_ms = at;
}

/* M7: a live node for slot `slot` of row (not in the row; a failure domain
 * of its own when the live nodes span at least `replicas` domains), chosen
 * by lib/placement (weighted by free space). NULL when there is none. */
static const struct zl_node_info *mgr_replacement(struct zl_manager *m, const struct zl_volume *v,
						  uint32_t slice, const struct zl_slice *row,
						  int slot)
{
	struct zl_place_node *cand = NULL;
	const struct mgr_node **cnode = NULL;
	const struct zl_node_info *res = NULL;
	size_t n = 0, domains = 0;
	uint32_t pick = 0;

	cand = calloc(m->n_nodes ? m->n_nodes : 1, sizeof(*cand));
	cnode = calloc(m->n_nodes ? m->n_nodes : 1, sizeof(*cnode));
	if (!cand || !cnode)
		goto out;
	/* Distinct domains among live nodes ("" = a domain of its own). */
	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct mgr_node *a = &m->nodes[i];
		bool dup = false;

		if (!a->present)
			continue;
		for (size_t j = 0; j < i && a->info.domain[0] && !dup; j++)
			dup = m->nodes[j].present &&
			      !strcmp(m->nodes[j].info.domain, a->info.domain);
		domains += !dup;
	}
	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct mgr_node *a = &m->nodes[i];
		bool ok = a->present && zl_slice_index_of(row, a->id) < 0;

		for (int j = 0; ok && j < row->n && domains >= v->replicas; j++) {
			const struct mgr_node *o = mgr_node_find(m, row->nodes[j]);

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
static bool mgr_m2_hold(struct zl_manager *m, const struct mgr_node *nd, uint64_t now)
{
	if (!nd->out_ms || nd->info.start_time != nd->out_start ||
	    now - nd->out_ms >= MGR_M2_HOLD_MS)
		return false;
	mgr_deadline(m, nd->out_ms + MGR_M2_HOLD_MS);
	return true;
}

/* M1, M2, M3 and M7 on one row, from the node table. */
static void mgr_decide_nodes(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			     struct mgr_decision *d)
{
	const struct zl_slice *cur = &v->slices[slice];
	uint64_t now = zl_now_ms();
	char key[256];

	for (int i = 0; i < cur->n; i++) {
		enum zl_member_state st = zl_slice_member_state(cur, i);
		struct mgr_node *nd = mgr_node_get(m, cur->nodes[i]);
		const char *rinc = cur->incarnation[i];

		if (!nd)
			return; /* ENOMEM: next pass */
		if (nd->present) {
			const char *ninc = nd->info.incarnation;

			if (ninc[0] && rinc[0] && strcmp(ninc, rinc)) {
				if (st == ZL_MEMBER_IN_SYNC &&
				    zl_slice_member_count(&d->row, ZL_MEMBER_IN_SYNC) <= 1) {
					snprintf(key, sizeof(key), "m3/%s/%u/%" PRIu64 "/%d", v->id,
						 slice, cur->version, i);
					if (mgr_once(m, key))
						ZL_LOG_WARN(MGR_LOG,
							    "manager: vol=%s slice=%u member=%s "
							    "has a new incarnation=%s but is the "
							    "last in-sync member: the row waits",
							    v->id, slice, cur->nodes[i], ninc);
					continue;
				}
				snprintf(d->row.incarnation[i], sizeof(d->row.incarnation[i]), "%s",
					 ninc);
				mgr_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
					       "M3 new incarnation %.8s (was %.8s): full copy", ninc,
					       rinc);
			} else if (st == ZL_MEMBER_OUT) {
				if (mgr_m2_hold(m, nd, now))
					continue;
				if (!rinc[0] && ninc[0])
					snprintf(d->row.incarnation[i],
						 sizeof(d->row.incarnation[i]), "%s", ninc);
				mgr_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
					       "M2 node back with the same incarnation");
			}
			continue;
		}
		uint64_t gone = now - nd->gone_ms;

		if (st != ZL_MEMBER_OUT) {
			if (gone < (uint64_t)m->grace_s * 1000) {
				mgr_deadline(m, nd->gone_ms + (uint64_t)m->grace_s * 1000);
				continue;
			}
			if (st == ZL_MEMBER_IN_SYNC &&
			    zl_slice_member_count(&d->row, ZL_MEMBER_IN_SYNC) <= 1) {
				snprintf(key, sizeof(key), "m1/%s/%u/%" PRIu64 "/%d", v->id, slice,
					 cur->version, i);
				if (mgr_once(m, key))
					ZL_LOG_WARN(MGR_LOG,
						    "manager: vol=%s slice=%u member=%s node record "
						    "gone but it is the last in-sync member: the "
						    "row waits for it",
						    v->id, slice, cur->nodes[i]);
				continue;
			}
			mgr_change_add(d, cur, i, ZL_MEMBER_OUT, "M1 node record gone for %" PRIu64
				       " ms", gone);
			continue;
		}
		if (gone < (uint64_t)m->down_out_s * 1000) {
			mgr_deadline(m, nd->gone_ms + (uint64_t)m->down_out_s * 1000);
			continue;
		}
		const struct zl_node_info *rep = mgr_replacement(m, v, slice, &d->row, i);

		if (!rep) {
			snprintf(key, sizeof(key), "m7/%s/%u/%" PRIu64 "/%d", v->id, slice,
				 cur->version, i);
			if (mgr_once(m, key))
				ZL_LOG_WARN(MGR_LOG,
					    "manager: vol=%s slice=%u member=%s gone for %" PRIu64
					    " s: no live node outside the row%s to replace it; "
					    "waiting (register a storage node)",
					    v->id, slice, cur->nodes[i], gone / 1000,
					    " and its failure domains");
			continue;
		}
		snprintf(d->row.nodes[i], sizeof(d->row.nodes[i]), "%s", rep->id);
		snprintf(d->row.incarnation[i], sizeof(d->row.incarnation[i]), "%s",
			 rep->incarnation);
		mgr_change_add(d, cur, i, ZL_MEMBER_RECOVERING,
			       "M7 node gone for %" PRIu64 " s: replaced by %s (domain \"%s\")",
			       gone / 1000, rep->id, rep->domain);
	}
}

/* After a row write that applied CAUGHT_UP report *r (read at row version
 * ver) whose delete found it re-put meanwhile: the primary wrote a failure
 * about that member over it (one key per reporter and peer), i.e. the
 * member missed a write after the CAUGHT_UP, while the row said RECOVERING
 * at ver. That failure is about the row just written, which says IN_SYNC:
 * *r becomes it at the new version, so the next round applies M5 (OUT,
 * then recovery again) instead of dropping it as stale. */
static void mgr_row_recheck(struct zl_manager *m, struct zl_report *r, uint64_t ver, uint64_t new_ver)
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
static int mgr_row(struct zl_manager *m, struct zl_volume *v, uint32_t slice,
		   struct zl_report *reps, size_t n_reps)
{
	struct mgr_decision d;
	int rc = 0;

	for (int round = 0; round < MGR_ROW_ROUNDS; round++) {
		const struct zl_slice *cur = &v->slices[slice];
		struct zl_volume fresh;

		memset(&d, 0, sizeof(d));
		d.row = *cur;
		rc = n_reps ? mgr_decide_reports(m, v, slice, reps, n_reps, &d) : 0;
		if (rc)
			return rc;
		if (!d.n_ch)
			mgr_decide_nodes(m, v, slice, &d);
		if (!d.n_ch)
			return 0;
		mgr_keep_primary(cur, &d.row);
		d.row.term = 0; /* the current one, plus one when the primary changes */
		if (!mgr_may_write(m))
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
			const struct mgr_change *ch = &d.ch[k];
			const struct zl_slice *nw = &fresh.slices[slice];
			bool moved = strcmp(ch->old_node, ch->new_node);
			struct mgr_node *nd;

			if (ch->to == ZL_MEMBER_OUT && !strncmp(ch->reason, "M5", 2) &&
			    (nd = mgr_node_find(m, ch->old_node)) && nd->present) {
				nd->out_ms = zl_now_ms();
				nd->out_start = nd->info.start_time;
			}

			ZL_LOG_INFO(MGR_LOG,
				    "manager: vol=%s slice=%u member=%s%s%s %s->%s reason=\"%s\" "
				    "version=%" PRIu64 "->%" PRIu64 " term=%u->%u",
				    v->id, slice, ch->old_node, moved ? "->" : "",
				    moved ? ch->new_node : "",
				    zl_member_state_name(ch->from), zl_member_state_name(ch->to),
				    ch->reason, cur->version, nw->version, cur->term ? cur->term : 1,
				    nw->term);
		}
		for (int k = 0; k < d.n_acted; k++) {
			struct zl_report *r = d.acted[k];

			rc = mgr_report_drop(m, r, "acted on");
			if (rc == -ECANCELED)
				break;
			if (r->mod_rev == -2 && !strcmp(r->error, "CAUGHT_UP"))
				mgr_row_recheck(m, r, cur->version, fresh.slices[slice].version);
		}
		zl_volume_fini(v);
		*v = fresh;
		if (rc == -ECANCELED)
			return rc;
	}
	return 0;
}

/* ---- rebalance (docs/REPLICATION.md §5) ---- */

/* Rows of one volume that may move at the same time. */
#define MGR_REBAL_INFLIGHT 4

/* Every member of row is in sync on a live node. */
static bool mgr_row_settled(struct zl_manager *m, const struct zl_slice *row)
{
	for (int i = 0; i < row->n; i++) {
		const struct mgr_node *nd = mgr_node_find(m, row->nodes[i]);

		if (!nd || !nd->present || zl_slice_member_state(row, i) != ZL_MEMBER_IN_SYNC)
			return false;
	}
	return true;
}

/* Distinct failure domains among live nodes ("" = a domain of its own). */
static size_t mgr_live_domains(struct zl_manager *m)
{
	size_t domains = 0;

	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct mgr_node *a = &m->nodes[i];
		bool dup = false;

		if (!a->present)
			continue;
		for (size_t j = 0; j < i && a->info.domain[0] && !dup; j++)
			dup = m->nodes[j].present &&
			      !strcmp(m->nodes[j].info.domain, a->info.domain);
		domains += !dup;
	}
	return domains;
}

/* Live node a may take slot `slot` of row: not in the row, and in a failure
 * domain of its own among the other members when the live nodes span at
 * least `replicas` domains (the rule of mgr_replacement). */
static bool mgr_rebal_fits(struct zl_manager *m, const struct zl_volume *v,
			   const struct zl_slice *row, int slot, const struct mgr_node *a,
			   size_t domains)
{
	if (!a->present || zl_slice_index_of(row, a->id) >= 0)
		return false;
	for (int j = 0; j < row->n && domains >= v->replicas; j++) {
		const struct mgr_node *o = mgr_node_find(m, row->nodes[j]);

		if (j != slot && o && o->present && a->info.domain[0] &&
		    !strcmp(o->info.domain, a->info.domain))
			return false;
	}
	return true;
}

/* Members of v per live node into cnt[] (indexed like m->nodes); the number
 * of rows not settled into *moving. */
static void mgr_rebal_count(struct zl_manager *m, const struct zl_volume *v, uint32_t *cnt,
			    uint32_t *moving)
{
	memset(cnt, 0, m->n_nodes * sizeof(*cnt));
	*moving = 0;
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *row = &v->slices[s];

		*moving += !mgr_row_settled(m, row);
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
static void mgr_rebal_extremes(struct zl_manager *m, const uint32_t *cnt, long *hi, long *lo)
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
static bool mgr_rebal_pick(struct zl_manager *m, const struct zl_volume *v, const uint32_t *cnt,
			   long hi, uint32_t *slice, int *slot, long *to)
{
	size_t domains = mgr_live_domains(m);
	bool found = false;

	for (int want_backup = 1; want_backup >= 0 && !found; want_backup--) {
		for (uint32_t s = 0; s < v->n_slices && !found; s++) {
			const struct zl_slice *row = &v->slices[s];
			int i = zl_slice_index_of(row, m->nodes[hi].id);
			long best = -1;

			if (i < 0 || !mgr_row_settled(m, row) ||
			    (want_backup && i == zl_slice_primary(row)))
				continue;
			for (size_t k = 0; k < m->n_nodes; k++) {
				if (cnt[k] + 1 >= cnt[hi] ||
				    !mgr_rebal_fits(m, v, row, i, &m->nodes[k], domains))
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

/* Moves member `slot` of row `slice` to node m->nodes[to] as RECOVERING at
 * version 0 (what M7 does for a dead node). 0, -ZL_ERR_STALE (someone wrote
 * the row: the next pass decides again), -ECANCELED or another error. */
static int mgr_rebal_move(struct zl_manager *m, struct zl_volume *v, uint32_t slice, int slot,
			  long to)
{
	const struct zl_slice *cur = &v->slices[slice];
	const struct mgr_node *nd = &m->nodes[to];
	struct zl_slice row = *cur;
	struct zl_volume fresh;
	char from[ZL_NODE_ID_MAX];
	int rc;

	snprintf(from, sizeof(from), "%s", cur->nodes[slot]);
	snprintf(row.nodes[slot], sizeof(row.nodes[slot]), "%s", nd->id);
	snprintf(row.incarnation[slot], sizeof(row.incarnation[slot]), "%s", nd->info.incarnation);
	zl_slice_member_set(&row, slot, ZL_MEMBER_RECOVERING);
	row.term = 0; /* the current one, plus one when the primary moves */
	if (!mgr_may_write(m))
		return -ECANCELED;
	rc = zl_meta_slice_set(m->etcd, m->prefix, v->id, slice, cur->version, &row, &fresh);
	if (rc) {
		ZL_LOG_WARN(MGR_LOG,
			    "manager: vol=%s slice=%u rebalance %s -> %s: row write refused "
			    "err=%s; next try in a pass",
			    v->id, slice, from, nd->id, zl_errname(rc));
		return rc == -ZL_ERR_CONFLICT ? -ZL_ERR_STALE : rc;
	}
	ZL_LOG_INFO(MGR_LOG,
		    "manager: vol=%s slice=%u rebalance %s -> %s (%s, full copy) version=%" PRIu64
		    "->%" PRIu64 " term=%u->%u",
		    v->id, slice, from, nd->id, slot == zl_slice_primary(cur) ? "was the primary"
									 : "backup",
		    cur->version, fresh.slices[slice].version, cur->term ? cur->term : 1,
		    fresh.slices[slice].term);
	zl_volume_fini(v);
	*v = fresh;
	return 0;
}

/* One rebalance step of volume *v on request *req: starts moves while fewer
 * than MGR_REBAL_INFLIGHT rows are moving, and deletes the request once the
 * volume is balanced (every row settled, max - min members per live node
 * <= 1). 0, -ECANCELED or an error (the next pass retries). */
static int mgr_rebalance(struct zl_manager *m, struct zl_volume *v, struct zl_rebalance_req *req)
{
	uint32_t *cnt, moving;
	long hi, lo;
	int rc = 0;

	if (v->replicas <= zl_volume_min_size(v)) {
		char key[128];

		snprintf(key, sizeof(key), "rebal-min/%s", v->id);
		if (mgr_once(m, key))
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

		mgr_rebal_count(m, v, cnt, &moving);
		mgr_rebal_extremes(m, cnt, &hi, &lo);
		if (hi < 0)
			break;
		if (!moving && cnt[hi] <= cnt[lo] + 1) {
			if (!mgr_may_write(m)) {
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
		if (!mgr_rebal_pick(m, v, cnt, hi, &slice, &slot, &to)) {
			char key[256];

			snprintf(key, sizeof(key), "rebal/%s/%u/%u/%u", v->id, moving, cnt[hi],
				 cnt[lo]);
			if (!moving && mgr_once(m, key))
				ZL_LOG_WARN(MGR_LOG,
					    "manager: vol=%s rebalance stuck: node %s holds %u "
					    "members, %s %u, but no in-sync row of %s can move to a "
					    "less loaded node within the failure-domain rules",
					    v->id, m->nodes[hi].id, cnt[hi], m->nodes[lo].id, cnt[lo],
					    m->nodes[hi].id);
			break;
		}
		rc = mgr_rebal_move(m, v, slice, slot, to);
		if (rc)
			break;
	}
	free(cnt);
	return rc == -ZL_ERR_STALE ? 0 : rc;
}

/* One leader pass over every volume. 0, -ECANCELED or an etcd error. */
static int mgr_pass(struct zl_manager *m)
{
	struct zl_report *reps = NULL;
	struct zl_volume *vols = NULL;
	struct zl_rebalance_req *rebs = NULL;
	size_t n_reps = 0, n_vols = 0, n_rebs = 0;
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
			int r = mgr_row(m, v, s, cnt ? &reps[first] : NULL, cnt);

			if (r == -ECANCELED) {
				rc = r;
				break;
			}
		}
		for (size_t k = 0; !rc && k < n_rebs; k++) {
			if (!strcmp(rebs[k].vol_id, v->id) && mgr_rebalance(m, v, &rebs[k]) == -ECANCELED)
				rc = -ECANCELED;
		}
	}
	/* Requests of volumes that no longer exist. */
	for (size_t k = 0; !rc && k < n_rebs; k++) {
		bool known = false;

		for (size_t i = 0; i < n_vols && !known; i++)
			known = !strcmp(vols[i].id, rebs[k].vol_id);
		if (!known && mgr_may_write(m) &&
		    !zl_meta_rebalance_delete(m->etcd, m->prefix, &rebs[k]))
			ZL_LOG_INFO(MGR_LOG, "manager: vol=%s rebalance request deleted: the volume "
				    "does not exist", rebs[k].vol_id);
	}
	free(rebs);
	/* Reports of volumes that no longer exist. */
	for (size_t k = 0; !rc && k < n_reps; k++) {
		bool known = false;

		for (size_t i = 0; i < n_vols && !known; i++)
			known = !strcmp(vols[i].id, reps[k].vol_id);
		if (!known && !mgr_report_done(&reps[k]))
			rc = mgr_report_drop(m, &reps[k], "the volume does not exist");
	}
	zl_meta_volume_list_free(vols, n_vols);
	free(reps);
	return rc;
}

static void *mgr_main(void *arg)
{
	struct zl_manager *m = arg;
	bool was_leader = false;

	for (;;) {
		uint64_t now = zl_now_ms(), wake = now + MGR_TICK_MS;
		struct timespec ts;
		bool leader;
		int rc;

		if (m->next_deadline_ms > now && m->next_deadline_ms < wake)
			wake = m->next_deadline_ms;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)((wake - now) / 1000);
		ts.tv_nsec += (long)((wake - now) % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&m->lock);
		while (!m->stop && !m->dirty &&
		       pthread_cond_timedwait(&m->cond, &m->lock, &ts) != ETIMEDOUT)
			;
		m->dirty = false;
		if (m->stop) {
			pthread_mutex_unlock(&m->lock);
			break;
		}
		pthread_mutex_unlock(&m->lock);

		m->next_deadline_ms = 0;
		rc = mgr_nodes_refresh(m);
		leader = mgr_leads(m);
		if (leader != was_leader)
			ZL_LOG_INFO(MGR_LOG, "manager: %s (grace=%u s down_out_interval=%u s)",
				    leader ? "deciding membership" : "stopped: not the leader",
				    m->grace_s, m->down_out_s);
		was_leader = leader;
		if (!rc && leader)
			rc = mgr_pass(m);
		if (rc == -ECANCELED) {
			ZL_LOG_WARN(MGR_LOG, "manager: stopped mid-pass: leadership lost");
			was_leader = false;
		} else if (rc) {
			static struct zl_ratelimit rl;

			if (zl_ratelimit_ok(&rl, 1))
				ZL_LOG_WARN(MGR_LOG, "manager: pass failed err=%s detail=\"%s\"",
					    zl_errname(rc), zl_etcd_last_error());
		}
	}
	return NULL;
}

int zl_manager_create(const struct zl_manager_cfg *cfg, struct zl_manager **out)
{
	static const char *const kinds[4] = {"nodes", "volumes", "reports", "rebalance"};
	struct zl_manager *m;
	pthread_condattr_t ca;
	char key[256];
	int rc;

	*out = NULL;
	if (!cfg->etcd || !cfg->prefix || !cfg->leader_is || !cfg->leader_may_write)
		return -ZL_ERR_INVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	if (snprintf(m->prefix, sizeof(m->prefix), "%s", cfg->prefix) >= (int)sizeof(m->prefix)) {
		free(m);
		return -ZL_ERR_INVAL;
	}
	m->cfg.prefix = m->prefix;
	m->etcd = cfg->etcd;
	m->grace_s = cfg->grace_s;
	m->down_out_s = cfg->down_out_s;
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	for (int i = 0; i < 4; i++) {
		rc = zl_meta_key(key, sizeof(key), m->prefix, kinds[i], NULL);
		if (!rc)
			rc = zl_etcd_watch_prefix(m->etcd, key, 0, mgr_watch_cb, m, &m->watch[i]);
		if (rc) {
			ZL_LOG_ERR(MGR_LOG, "manager: cannot watch %s: %s", key, zl_strerror(rc));
			goto out_destroy;
		}
	}
	rc = pthread_create(&m->thread, NULL, mgr_main, m);
	if (rc) {
		ZL_LOG_ERR(MGR_LOG, "manager: cannot start its thread: %s", strerror(rc));
		rc = -rc;
		goto out_destroy;
	}
	m->started = true;
	ZL_LOG_INFO(MGR_LOG, "manager on: grace=%u s down_out_interval=%u s (acts while leader)",
		    m->grace_s, m->down_out_s);
	*out = m;
	return 0;

out_destroy:
	zl_manager_destroy(m);
	return rc;
}

void zl_manager_destroy(struct zl_manager *m)
{
	if (!m)
		return;
	if (m->started) {
		pthread_mutex_lock(&m->lock);
		m->stop = true;
		pthread_cond_signal(&m->cond);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->thread, NULL);
	}
	for (int i = 0; i < 4; i++)
		zl_etcd_watch_cancel(m->watch[i]);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m->nodes);
	free(m);
}
