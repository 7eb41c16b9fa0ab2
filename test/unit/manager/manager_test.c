/* The decision rules of lib/manager (docs/REPLICATION.md §2, M1-M7, and the
 * rebalance of §5), driven one tick at a time against a fake store: the
 * lib/meta calls the manager makes to read and write etcd are replaced at
 * link time (-Wl,--wrap, as daos-stack/daos fakes its drpc calls) by the
 * __wrap_ functions below, which serve canned node records, volumes,
 * reports and rebalance requests and record every write. The row write
 * itself is the real zl_meta_slice_set (its transition and term checks run)
 * over the faked zl_meta_volume_get / zl_meta_volume_update, and the clock
 * (zl_now_ms) is the test's, so grace and down-out need no waiting. No etcd
 * runs. The e2e counterpart is test/e2e/manager_test.py. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/manager/manager_internal.h"
#include "lib/meta/meta.h"

#define T_GRACE_S    2
#define T_DOWN_OUT_S 600
#define T_MAX_NODES  8
#define T_MAX_VOLS   2
#define T_MAX_REPS   16
#define T_MAX_REBS   4

/* ---- the fake store ---- */

static struct {
	uint64_t now_ms;
	int64_t rev; /* the store's revision: every write bumps it */
	struct zl_node_info nodes[T_MAX_NODES];
	size_t n_nodes;
	struct zl_volume vols[T_MAX_VOLS];
	size_t n_vols;
	struct zl_report reps[T_MAX_REPS];
	size_t n_reps;
	struct zl_rebalance_req rebs[T_MAX_REBS];
	size_t n_rebs;
	/* Status records: only disk_error matters to the manager. */
	struct zl_node_status status[T_MAX_NODES];
	size_t n_status;
	/* Recorded writes. */
	int row_tries;	 /* zl_meta_slice_set calls: rows the manager tried to write */
	int row_writes;	 /* zl_meta_volume_update calls that stored a row */
	int rep_deletes; /* reports deleted */
	int reb_deletes; /* rebalance requests deleted */
	int etcd_calls;	 /* every faked call: none may happen while off */
	/* Leadership as the controller would report it. */
	bool leader, may_write;
	/* The error zl_meta_node_list answers (0: the node table), and
	 * whether leadership is lost meanwhile (the lease timed out too). */
	int node_list_rc;
	bool node_list_unleads;
} fk;

uint64_t __wrap_zl_now_ms(void);
int __wrap_zl_meta_node_list(struct zl_etcd *e, const char *prefix, struct zl_node_info **out,
			     size_t *n);
int __wrap_zl_meta_status_list(struct zl_etcd *e, const char *prefix, struct zl_node_status **out,
			       size_t *n);
int __wrap_zl_meta_volume_list(struct zl_etcd *e, const char *prefix, struct zl_volume **out,
			       size_t *n);
int __wrap_zl_meta_volume_get(struct zl_etcd *e, const char *prefix, const char *id,
			      struct zl_volume *out);
int __wrap_zl_meta_volume_update(struct zl_etcd *e, const char *prefix, struct zl_volume *v);
int __real_zl_meta_slice_set(struct zl_etcd *e, const char *prefix, const char *vol_id,
			     uint32_t slice, uint64_t seen_version, const struct zl_slice *new_row,
			     struct zl_volume *out);
int __wrap_zl_meta_slice_set(struct zl_etcd *e, const char *prefix, const char *vol_id,
			     uint32_t slice, uint64_t seen_version, const struct zl_slice *new_row,
			     struct zl_volume *out);
int __wrap_zl_meta_report_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
			       struct zl_report **out, size_t *n);
int __wrap_zl_meta_report_delete(struct zl_etcd *e, const char *prefix, const struct zl_report *r);
int __wrap_zl_meta_rebalance_list(struct zl_etcd *e, const char *prefix,
				  struct zl_rebalance_req **out, size_t *n);
int __wrap_zl_meta_rebalance_delete(struct zl_etcd *e, const char *prefix,
				    const struct zl_rebalance_req *r);

uint64_t __wrap_zl_now_ms(void)
{
	return fk.now_ms;
}

int __wrap_zl_meta_node_list(struct zl_etcd *e, const char *prefix, struct zl_node_info **out,
			     size_t *n)
{
	fk.etcd_calls++;
	if (fk.node_list_rc) {
		if (fk.node_list_unleads)
			fk.leader = fk.may_write = false;
		return fk.node_list_rc;
	}
	*out = calloc(fk.n_nodes + 1, sizeof(**out));
	assert_non_null(*out);
	memcpy(*out, fk.nodes, fk.n_nodes * sizeof(**out));
	*n = fk.n_nodes;
	return 0;
}

int __wrap_zl_meta_status_list(struct zl_etcd *e, const char *prefix, struct zl_node_status **out,
			       size_t *n)
{
	fk.etcd_calls++;
	*out = calloc(fk.n_status + 1, sizeof(**out));
	assert_non_null(*out);
	memcpy(*out, fk.status, fk.n_status * sizeof(**out));
	*n = fk.n_status;
	return 0;
}

int __wrap_zl_meta_volume_list(struct zl_etcd *e, const char *prefix, struct zl_volume **out,
			       size_t *n)
{
	fk.etcd_calls++;
	*out = calloc(fk.n_vols + 1, sizeof(**out));
	assert_non_null(*out);
	for (size_t i = 0; i < fk.n_vols; i++)
		assert_int_equal(zl_volume_copy(&fk.vols[i], &(*out)[i]), 0);
	*n = fk.n_vols;
	return 0;
}

static struct zl_volume *fk_vol(const char *id)
{
	for (size_t i = 0; i < fk.n_vols; i++) {
		if (!strcmp(fk.vols[i].id, id))
			return &fk.vols[i];
	}
	return NULL;
}

int __wrap_zl_meta_volume_get(struct zl_etcd *e, const char *prefix, const char *id,
			      struct zl_volume *out)
{
	const struct zl_volume *v = fk_vol(id);

	fk.etcd_calls++;
	if (!v)
		return -ZL_ERR_NOT_FOUND;
	assert_int_equal(zl_volume_copy(v, out), 0);
	return 0;
}

/* What etcd and lib/meta do: the record must be valid and unchanged since
 * it was read (mod_rev). */
int __wrap_zl_meta_volume_update(struct zl_etcd *e, const char *prefix, struct zl_volume *v)
{
	struct zl_volume *cur = fk_vol(v->id);
	char why[256];

	fk.etcd_calls++;
	if (zl_meta_volume_check(v, why, sizeof(why)))
		fail_msg("the manager wrote an invalid record: %s", why);
	if (!cur)
		return -ZL_ERR_NOT_FOUND;
	if (cur->mod_rev != v->mod_rev)
		return -ZL_ERR_CONFLICT;
	zl_volume_fini(cur);
	assert_int_equal(zl_volume_copy(v, cur), 0);
	cur->mod_rev = v->mod_rev = ++fk.rev;
	__atomic_add_fetch(&fk.row_writes, 1, __ATOMIC_RELEASE); /* polled by test_run_* */
	return 0;
}

/* Counts the attempt, then the real row write (lib/meta's checks of the
 * transition and the term) over the fake volume_get / volume_update. */
int __wrap_zl_meta_slice_set(struct zl_etcd *e, const char *prefix, const char *vol_id,
			     uint32_t slice, uint64_t seen_version, const struct zl_slice *new_row,
			     struct zl_volume *out)
{
	fk.row_tries++;
	return __real_zl_meta_slice_set(e, prefix, vol_id, slice, seen_version, new_row, out);
}

int __wrap_zl_meta_report_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
			       struct zl_report **out, size_t *n)
{
	fk.etcd_calls++;
	*out = calloc(fk.n_reps + 1, sizeof(**out));
	assert_non_null(*out);
	*n = 0;
	for (size_t i = 0; i < fk.n_reps; i++) {
		if (!vol_id || !strcmp(fk.reps[i].vol_id, vol_id))
			(*out)[(*n)++] = fk.reps[i];
	}
	return 0;
}

static long fk_rep_find(const struct zl_report *r)
{
	for (size_t i = 0; i < fk.n_reps; i++) {
		const struct zl_report *x = &fk.reps[i];

		if (!strcmp(x->vol_id, r->vol_id) && x->slice == r->slice &&
		    !strcmp(x->reporter, r->reporter) && !strcmp(x->peer, r->peer))
			return (long)i;
	}
	return -1;
}

int __wrap_zl_meta_report_delete(struct zl_etcd *e, const char *prefix, const struct zl_report *r)
{
	long i = fk_rep_find(r);

	fk.etcd_calls++;
	if (i < 0)
		return 0;
	if (r->mod_rev > 0 && fk.reps[i].mod_rev != r->mod_rev)
		return -ZL_ERR_CONFLICT;
	fk.reps[i] = fk.reps[--fk.n_reps];
	fk.rep_deletes++;
	fk.rev++;
	return 0;
}

int __wrap_zl_meta_rebalance_list(struct zl_etcd *e, const char *prefix,
				  struct zl_rebalance_req **out, size_t *n)
{
	fk.etcd_calls++;
	*out = calloc(fk.n_rebs + 1, sizeof(**out));
	assert_non_null(*out);
	memcpy(*out, fk.rebs, fk.n_rebs * sizeof(**out));
	*n = fk.n_rebs;
	return 0;
}

int __wrap_zl_meta_rebalance_delete(struct zl_etcd *e, const char *prefix,
				    const struct zl_rebalance_req *r)
{
	fk.etcd_calls++;
	for (size_t i = 0; i < fk.n_rebs; i++) {
		if (strcmp(fk.rebs[i].vol_id, r->vol_id))
			continue;
		if (r->mod_rev > 0 && fk.rebs[i].mod_rev != r->mod_rev)
			return -ZL_ERR_CONFLICT;
		fk.rebs[i] = fk.rebs[--fk.n_rebs];
		fk.reb_deletes++;
		fk.rev++;
		return 0;
	}
	return 0;
}

/* The manager's watches (manager_run.c): recorded, fired by the test. */
static struct {
	char prefix[4][64];
	zl_etcd_watch_cb cb[4];
	void *arg[4];
	int n, cancelled;
	int fail_at; /* the watch that fails to start; -1: none */
} fw;

int __wrap_zl_etcd_watch_prefix(struct zl_etcd *e, const char *prefix, int64_t start_rev,
				zl_etcd_watch_cb cb, void *arg, struct zl_etcd_watch **out);
void __wrap_zl_etcd_watch_cancel(struct zl_etcd_watch *w);

int __wrap_zl_etcd_watch_prefix(struct zl_etcd *e, const char *prefix, int64_t start_rev,
				zl_etcd_watch_cb cb, void *arg, struct zl_etcd_watch **out)
{
	int i = fw.n;

	if (i == fw.fail_at || i >= 4)
		return -ZL_ERR_UNAVAIL;
	snprintf(fw.prefix[i], sizeof(fw.prefix[i]), "%s", prefix);
	fw.cb[i] = cb;
	fw.arg[i] = arg;
	fw.n++;
	*out = (struct zl_etcd_watch *)&fw.cb[i]; /* a token: only compared */
	return 0;
}

void __wrap_zl_etcd_watch_cancel(struct zl_etcd_watch *w)
{
	if (w)
		fw.cancelled++;
}

/* ---- building the state ---- */

static void inc_of(char *out, int node, int gen)
{
	snprintf(out, ZL_META_ID_SIZE, "%016x%016x", node, gen);
}

/* Node record "n<k>" (incarnation generation gen, failure domain "d<dom>"). */
static void node_up(int k, int gen, int dom)
{
	struct zl_node_info *nd = NULL;
	char id[ZL_NODE_ID_MAX];

	snprintf(id, sizeof(id), "n%d", k);
	for (size_t i = 0; i < fk.n_nodes && !nd; i++) {
		if (!strcmp(fk.nodes[i].id, id))
			nd = &fk.nodes[i];
	}
	if (!nd) {
		assert_true(fk.n_nodes < T_MAX_NODES);
		nd = &fk.nodes[fk.n_nodes++];
	}
	memset(nd, 0, sizeof(*nd));
	snprintf(nd->id, sizeof(nd->id), "%s", id);
	snprintf(nd->addr, sizeof(nd->addr), "10.0.0.%d", k);
	nd->port = 7000;
	snprintf(nd->domain, sizeof(nd->domain), "d%d", dom);
	nd->capacity = 1ull << 40;
	nd->free = (1ull << 39) + (uint64_t)k;
	nd->start_time = 1000 + gen;
	inc_of(nd->incarnation, k, gen);
}

static void node_down(int k)
{
	char id[ZL_NODE_ID_MAX];

	snprintf(id, sizeof(id), "n%d", k);
	for (size_t i = 0; i < fk.n_nodes; i++) {
		if (!strcmp(fk.nodes[i].id, id)) {
			fk.nodes[i] = fk.nodes[--fk.n_nodes];
			return;
		}
	}
	fail_msg("node n%d is not up", k);
}

/* Volume vol-000000000000000<n> of n_slices rows, replicas 3, every row
 * members[s] = {a, b, c} (node numbers) all in sync, generation 0. */
static struct zl_volume *vol_add(int n, uint32_t n_slices, const int (*members)[3])
{
	struct zl_volume *v;
	char why[256];

	assert_true(fk.n_vols < T_MAX_VOLS);
	v = &fk.vols[fk.n_vols++];
	memset(v, 0, sizeof(*v));
	v->num = (uint64_t)n;
	snprintf(v->id, sizeof(v->id), "vol-%016x", n);
	snprintf(v->name, sizeof(v->name), "pvc-%d", n);
	v->chunk_size = 4u << 20;
	v->size = (uint64_t)n_slices << 30;
	v->replicas = 3;
	v->n_slices = n_slices;
	snprintf(v->state, sizeof(v->state), "ready");
	snprintf(v->params, sizeof(v->params), "{}");
	v->slices = calloc(n_slices, sizeof(*v->slices));
	assert_non_null(v->slices);
	for (uint32_t s = 0; s < n_slices; s++) {
		struct zl_slice *row = &v->slices[s];

		row->version = 1;
		row->term = 1;
		row->n = 3;
		for (int i = 0; i < 3; i++) {
			snprintf(row->nodes[i], sizeof(row->nodes[i]), "n%d", members[s][i]);
			inc_of(row->incarnation[i], members[s][i], 0);
			zl_slice_member_set(row, i, ZL_MEMBER_IN_SYNC);
		}
	}
	v->mod_rev = ++fk.rev;
	if (zl_meta_volume_check(v, why, sizeof(why)))
		fail_msg("test volume invalid: %s", why);
	return v;
}

/* Member states of a row by hand (test setup, not a manager write). */
static void row_set(struct zl_volume *v, uint32_t s, const char *node, enum zl_member_state st)
{
	struct zl_slice *row = &v->slices[s];
	int i = zl_slice_index_of(row, node);

	assert_true(i >= 0);
	zl_slice_member_set(row, i, st);
	row->version++;
	v->mod_rev = ++fk.rev;
}

static void report_put(const struct zl_volume *v, uint32_t s, const char *reporter,
		       const char *peer, const char *error, uint64_t ver, int64_t at)
{
	struct zl_report r = {.slice = s, .slice_ver = ver, .time = at};
	long i;

	snprintf(r.vol_id, sizeof(r.vol_id), "%s", v->id);
	snprintf(r.reporter, sizeof(r.reporter), "%s", reporter);
	snprintf(r.peer, sizeof(r.peer), "%s", peer);
	snprintf(r.error, sizeof(r.error), "%s", error);
	r.mod_rev = ++fk.rev;
	i = fk_rep_find(&r);
	if (i < 0) {
		assert_true(fk.n_reps < T_MAX_REPS);
		i = (long)fk.n_reps++;
	}
	fk.reps[i] = r;
}

static bool report_exists(const char *reporter, const char *peer)
{
	for (size_t i = 0; i < fk.n_reps; i++) {
		if (!strcmp(fk.reps[i].reporter, reporter) && !strcmp(fk.reps[i].peer, peer))
			return true;
	}
	return false;
}

static enum zl_member_state st_of(const struct zl_volume *v, uint32_t s, const char *node)
{
	int i = zl_slice_index_of(&v->slices[s], node);

	assert_true(i >= 0);
	return zl_slice_member_state(&v->slices[s], i);
}

static const char *primary_of(const struct zl_volume *v, uint32_t s)
{
	int p = zl_slice_primary(&v->slices[s]);

	return p < 0 ? "" : v->slices[s].nodes[p];
}

/* ---- the manager under test ---- */

static struct zl_manager mgr;

static bool t_leader_is(void *arg)
{
	return fk.leader;
}

static bool t_may_write(void *arg)
{
	return fk.may_write;
}

static int setup(void **state)
{
	static int fake_etcd; /* never dereferenced: every call is faked */
	const struct zl_manager_cfg cfg = {
	    .etcd = (struct zl_etcd *)&fake_etcd,
	    .prefix = "/zl-test/",
	    .grace_s = T_GRACE_S,
	    .down_out_s = T_DOWN_OUT_S,
	    .leader_is = t_leader_is,
	    .leader_may_write = t_may_write,
	};

	memset(&fk, 0, sizeof(fk));
	memset(&fw, 0, sizeof(fw));
	fw.fail_at = -1;
	fk.now_ms = 1000000;
	fk.rev = 100;
	fk.leader = fk.may_write = true;
	assert_int_equal(manager_init(&mgr, &cfg), 0);
	return 0;
}

static int teardown(void **state)
{
	manager_fini(&mgr);
	for (size_t i = 0; i < fk.n_vols; i++)
		zl_volume_fini(&fk.vols[i]);
	return 0;
}

static void tick(void)
{
	assert_int_equal(manager_tick(&mgr), 0);
}

static void advance_s(unsigned int s)
{
	fk.now_ms += (uint64_t)s * 1000;
}

/* Node k (seen up first) goes, and the grace period passes: M1's turn. */
static void node_lost(int k)
{
	tick();
	node_down(k);
	tick();
	advance_s(T_GRACE_S);
	tick();
}

static const int rows3[4][3] = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}};

/* Three live nodes n1..n3 in domains d1..d3, and one volume on them. */
static struct zl_volume *cluster3(uint32_t n_slices)
{
	for (int k = 1; k <= 3; k++)
		node_up(k, 0, k);
	return vol_add(1, n_slices, rows3);
}

/* ---- M1: a node record gone for the grace period: its members go OUT ---- */

static void test_m1_lost_node_goes_out_after_grace(void **state)
{
	struct zl_volume *v = cluster3(1);

	tick();
	assert_int_equal(fk.row_writes, 0); /* a healthy row needs nothing */
	node_down(2);
	tick();
	advance_s(T_GRACE_S - 1);
	tick();
	assert_int_equal(fk.row_writes, 0); /* within grace: nothing yet */
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
	/* The thread wakes when the grace ends, not a tick later. */
	assert_int_equal(mgr.next_deadline_ms, 1000000 + T_GRACE_S * 1000);
	advance_s(1);
	tick();
	assert_int_equal(fk.row_writes, 1);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_IN_SYNC);
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_IN_SYNC);
	assert_int_equal(v->slices[0].version, 2);
	assert_int_equal(v->slices[0].term, 1); /* the primary stayed: same term */
	tick();
	assert_int_equal(fk.row_writes, 1); /* decided once */
}

static void test_m1_lost_primary_new_term(void **state)
{
	struct zl_volume *v = cluster3(1);

	node_lost(1);
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_OUT);
	assert_string_equal(primary_of(v, 0), "n2");
	assert_int_equal(v->slices[0].term, 2);
}

/* The last in-sync member is never taken out: the row waits for it. */
static void test_m1_last_in_sync_waits(void **state)
{
	struct zl_volume *v = cluster3(1);

	row_set(v, 0, "n2", ZL_MEMBER_OUT);
	row_set(v, 0, "n3", ZL_MEMBER_OUT);
	node_down(2);
	node_down(3);
	node_down(1);
	tick();
	advance_s(T_GRACE_S + 5);
	tick();
	/* Not even tried (lib/meta would refuse a row without an in-sync member). */
	assert_int_equal(fk.row_tries, 0);
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_IN_SYNC);
}

/* A replica that takes over keeps the clocks a follower started. */
static void test_follower_keeps_node_clocks(void **state)
{
	struct zl_volume *v = cluster3(1);

	fk.leader = fk.may_write = false;
	tick();
	node_down(2);
	tick(); /* the follower notes when n2 went */
	advance_s(T_GRACE_S);
	tick();
	assert_int_equal(fk.row_writes, 0); /* a follower writes nothing */
	fk.leader = fk.may_write = true;
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
}

/* ---- M2 and M4: back with the same incarnation, then caught up ---- */

static void test_m2_returning_node_recovers_then_in_sync(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver;

	node_lost(2);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
	node_up(2, 0, 2);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	ver = v->slices[0].version;
	tick();
	assert_int_equal(v->slices[0].version, ver); /* stays recovering until caught up */

	/* CAUGHT_UP from a backup: not the primary's word, deleted. */
	report_put(v, 0, "n3", "n2", "CAUGHT_UP", ver, 10);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	assert_false(report_exists("n3", "n2"));
	/* From the primary about an older row version: stale, deleted. */
	report_put(v, 0, "n1", "n2", "CAUGHT_UP", ver - 1, 11);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	assert_false(report_exists("n1", "n2"));
	/* From the primary at the current version: IN_SYNC, report deleted. */
	report_put(v, 0, "n1", "n2", "CAUGHT_UP", ver, 12);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
	assert_false(report_exists("n1", "n2"));
	assert_int_equal(v->slices[0].version, ver + 1);
	assert_string_equal(primary_of(v, 0), "n1");
}

/* A member ahead of the primary in preference order that becomes IN_SYNC
 * again does not take the primary over (no needless new term). */
static void test_m4_keeps_the_primary(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver;

	row_set(v, 0, "n1", ZL_MEMBER_RECOVERING);
	v->slices[0].term = 2; /* n2 became primary when n1 went out */
	assert_string_equal(primary_of(v, 0), "n2");
	ver = v->slices[0].version;
	report_put(v, 0, "n2", "n1", "CAUGHT_UP", ver, 10);
	tick();
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_IN_SYNC);
	assert_string_equal(primary_of(v, 0), "n2");
	assert_string_equal(v->slices[0].nodes[0], "n2");
	assert_int_equal(v->slices[0].term, 2);
}

/* CAUGHT_UP against a later failure report about the same member at the same
 * version: the failure wins; an older one loses. */
static void test_m4_later_failure_wins(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver;

	row_set(v, 0, "n2", ZL_MEMBER_RECOVERING);
	ver = v->slices[0].version;
	report_put(v, 0, "n1", "n2", "CAUGHT_UP", ver, 20);
	report_put(v, 0, "client-1", "n2", "ZL_ERR_IO", ver, 21);
	tick();
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	assert_true(report_exists("n1", "n2")); /* kept: applies if the failure goes */

	/* The failure (from a client: M6, no eviction) is older: CAUGHT_UP applies. */
	report_put(v, 0, "client-1", "n2", "ZL_ERR_IO", ver, 19);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
}

/* Never IN_SYNC on a node whose record is gone. */
static void test_m4_not_on_a_dead_node(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver;

	tick();
	row_set(v, 0, "n2", ZL_MEMBER_RECOVERING);
	ver = v->slices[0].version;
	node_down(2);
	report_put(v, 0, "n1", "n2", "CAUGHT_UP", ver, 10);
	tick();
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	/* After grace M1 takes it out instead. */
	advance_s(T_GRACE_S);
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
}

/* ---- M3: a node back with another incarnation: full copy ---- */

static void test_m3_new_incarnation_recovers(void **state)
{
	struct zl_volume *v = cluster3(1);
	char inc[ZL_META_ID_SIZE];

	tick();
	node_up(2, 1, 2); /* the data directory was wiped */
	tick();
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_RECOVERING);
	inc_of(inc, 2, 1);
	assert_string_equal(v->slices[0].incarnation[zl_slice_index_of(&v->slices[0], "n2")], inc);
}

/* ... unless it is the last in-sync member: the row waits. */
static void test_m3_last_in_sync_waits(void **state)
{
	struct zl_volume *v = cluster3(1);

	row_set(v, 0, "n1", ZL_MEMBER_OUT);
	row_set(v, 0, "n3", ZL_MEMBER_OUT);
	node_down(1);
	node_down(3);
	node_up(2, 1, 2);
	tick();
	tick();
	assert_int_equal(fk.row_tries, 0);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
}

/* ---- M5: the primary reports a backup: OUT, and the M2 hold ---- */

static void test_m5_primary_report_takes_backup_out(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver = v->slices[0].version;

	tick();
	report_put(v, 0, "n1", "n3", "ZL_ERR_IO", ver, 10);
	tick();
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_OUT);
	assert_false(report_exists("n1", "n3"));
	assert_int_equal(fk.row_writes, 1);
	/* n3's record lives on unchanged (a killed node's lease still runs):
	 * M2 holds it out for MGR_M2_HOLD_MS. */
	advance_s(MGR_M2_HOLD_MS / 1000 - 1);
	tick();
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_OUT);
	advance_s(1);
	tick();
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_RECOVERING);
}

static void test_m5_restarted_node_recovers_at_once(void **state)
{
	struct zl_volume *v = cluster3(1);

	tick();
	report_put(v, 0, "n1", "n3", "ZL_ERR_IO", v->slices[0].version, 10);
	tick();
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_OUT);
	fk.nodes[2].start_time++; /* re-registered: the daemon restarted */
	tick();
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_RECOVERING);
}

/* ---- M6: anyone else's word evicts nobody ---- */

static void test_m6_other_reports_change_nothing(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver = v->slices[0].version;

	tick();
	report_put(v, 0, "client-1", "n1", "ZL_ERR_TIMEOUT", ver, 10); /* about the primary */
	report_put(v, 0, "n2", "n3", "ZL_ERR_IO", ver, 10);	       /* a backup's word */
	tick();
	tick();
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_IN_SYNC);
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_IN_SYNC);
	/* Kept until the row moves on or the reporter's lease ends. */
	assert_true(report_exists("client-1", "n1"));
	assert_true(report_exists("n2", "n3"));
}

/* Reports that cannot apply are deleted: not a member, a volume that is gone. */
static void test_pointless_reports_deleted(void **state)
{
	struct zl_volume *v = cluster3(1);
	struct zl_volume gone = *v;

	snprintf(gone.id, sizeof(gone.id), "vol-%016x", 9);
	report_put(v, 0, "n1", "n7", "ZL_ERR_IO", v->slices[0].version, 10);
	report_put(&gone, 0, "n1", "n2", "ZL_ERR_IO", 1, 10);
	tick();
	assert_int_equal(fk.n_reps, 0);
	assert_int_equal(fk.rep_deletes, 2);
	assert_int_equal(fk.row_writes, 0);
}

/* ---- M7: gone past down_out_interval: replaced ---- */

static void test_m7_down_out_replacement(void **state)
{
	struct zl_volume *v = cluster3(1);
	char inc[ZL_META_ID_SIZE];

	node_up(4, 0, 4);
	node_up(5, 0, 3); /* more free space, but n3's failure domain */
	fk.nodes[4].free = 1ull << 40;
	node_lost(2);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
	advance_s(T_DOWN_OUT_S - T_GRACE_S - 1);
	tick();
	assert_true(zl_slice_index_of(&v->slices[0], "n2") >= 0); /* not yet */
	advance_s(1);
	tick();
	assert_int_equal(zl_slice_index_of(&v->slices[0], "n2"), -1);
	assert_int_equal(st_of(v, 0, "n4"), ZL_MEMBER_RECOVERING);
	inc_of(inc, 4, 0);
	assert_string_equal(v->slices[0].incarnation[zl_slice_index_of(&v->slices[0], "n4")], inc);
	assert_int_equal(zl_slice_index_of(&v->slices[0], "n5"), -1);
}

static void test_m7_waits_without_a_candidate(void **state)
{
	struct zl_volume *v = cluster3(1);

	tick();
	node_down(2);
	tick();
	advance_s(T_DOWN_OUT_S + 1);
	tick();
	tick();
	assert_int_equal(fk.row_writes, 1); /* OUT only: nobody to replace it with */
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_OUT);
}

/* ---- M8: a node whose status record says its disk failed ---- */

/* Node k's status record says why its disk failed ("" : fine again). */
static void disk_set(int k, const char *why)
{
	char id[ZL_NODE_ID_MAX];
	struct zl_node_status *st = NULL;

	snprintf(id, sizeof(id), "n%d", k);
	for (size_t i = 0; i < fk.n_status && !st; i++)
		if (!strcmp(fk.status[i].node, id))
			st = &fk.status[i];
	if (!st) {
		assert_true(fk.n_status < T_MAX_NODES);
		st = &fk.status[fk.n_status++];
	}
	memset(st, 0, sizeof(*st));
	snprintf(st->node, sizeof(st->node), "%s", id);
	snprintf(st->disk_error, sizeof(st->disk_error), "%s", why);
}

/* Out at once, whatever the grace: its node record lives on. A primary
 * hands over (new term); a backup stays out (no M2 while the disk is
 * failed), and comes back only once its record says the disk is fine. */
static void test_m8_failed_disk_goes_out_at_once(void **state)
{
	struct zl_volume *v = cluster3(2);

	row_set(v, 1, "n2", ZL_MEMBER_IN_SYNC);
	tick();
	assert_int_equal(fk.row_writes, 0);
	disk_set(1, "data directory /d was removed while running");
	disk_set(2, "");
	tick();
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_OUT);
	assert_int_equal(st_of(v, 1, "n1"), ZL_MEMBER_OUT);
	assert_string_equal(primary_of(v, 0), "n2");
	assert_int_equal(v->slices[0].term, 2);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_IN_SYNC);
	for (int i = 0; i < 3; i++) {
		advance_s(30);
		tick();
	}
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_OUT); /* M2 never brings it back */
	/* Restarted with a data dir: its record says so, M2 takes it back. */
	disk_set(1, "");
	node_up(1, 0, 1);
	fk.nodes[0].start_time++;
	tick();
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_RECOVERING);
}

/* The last in-sync member stays (the row waits); a failed disk takes no
 * replacement (M7 picks a usable node) and is itself replaced after
 * down-out. */
static void test_m8_placement_avoids_failed_disks(void **state)
{
	struct zl_volume *v = cluster3(1);
	uint64_t ver;

	node_up(4, 0, 4);
	node_up(5, 0, 5);
	fk.nodes[3].free = 1ull << 41; /* n4 would be the first choice */
	disk_set(4, "data directory /d4 is on a filesystem that turned read-only");
	row_set(v, 0, "n2", ZL_MEMBER_OUT);
	row_set(v, 0, "n3", ZL_MEMBER_OUT);
	disk_set(1, "journal /d/journal-0 failed a write (disk I/O error)");
	tick();
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_IN_SYNC); /* the last copy */
	row_set(v, 0, "n3", ZL_MEMBER_IN_SYNC);
	tick();
	assert_int_equal(st_of(v, 0, "n1"), ZL_MEMBER_OUT);
	assert_string_equal(primary_of(v, 0), "n3");
	advance_s(T_DOWN_OUT_S + 1);
	ver = v->slices[0].version;
	tick();
	/* One write, the replacement: n4 was never picked (and taken out). */
	assert_int_equal(v->slices[0].version, ver + 1);
	tick();
	assert_int_equal(zl_slice_index_of(&v->slices[0], "n1"), -1);
	assert_int_equal(zl_slice_index_of(&v->slices[0], "n4"), -1);
	assert_true(zl_slice_index_of(&v->slices[0], "n5") >= 0);
}

/* ---- leadership: off, follower, lost ---- */

/* What --manager=off amounts to for the rules (no manager decides): a
 * replica that does not lead changes nothing, whatever the state says. */
static void test_not_leading_changes_nothing(void **state)
{
	struct zl_volume *v = cluster3(1);

	fk.leader = fk.may_write = false;
	tick();
	node_down(2);
	node_up(3, 1, 3);
	report_put(v, 0, "n1", "n3", "ZL_ERR_IO", v->slices[0].version, 10);
	report_put(v, 0, "n1", "n9", "ZL_ERR_IO", 0, 10);
	for (int i = 0; i < 5; i++) {
		advance_s(T_DOWN_OUT_S);
		tick();
	}
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(fk.rep_deletes, 0);
	assert_int_equal(v->slices[0].version, 1);
}

/* A leader whose lease is too old to write stops before the first write. */
static void test_lost_lease_writes_nothing(void **state)
{
	struct zl_volume *v = cluster3(1);

	tick();
	fk.may_write = false;
	node_down(2);
	tick();
	advance_s(T_GRACE_S);
	assert_int_equal(manager_tick(&mgr), -ECANCELED);
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(st_of(v, 0, "n2"), ZL_MEMBER_IN_SYNC);
}

/* A leader's tick whose node table cannot be read (etcd away) is a failed
 * pass in the stats, like a pass that fails, also when leadership was lost
 * during that read; a follower's counts nothing. */
static void test_failed_tick_counted(void **state)
{
	struct zl_manager_stats ms;
	uint64_t passes;

	cluster3(1);
	tick();
	zl_manager_stats(&mgr, &ms);
	assert_int_equal(ms.pass_errors, 0);
	passes = ms.passes;
	fk.node_list_rc = -ZL_ERR_TIMEOUT;
	assert_int_equal(manager_tick(&mgr), -ZL_ERR_TIMEOUT);
	zl_manager_stats(&mgr, &ms);
	assert_int_equal(ms.passes, passes + 1);
	assert_int_equal(ms.pass_errors, 1);
	fk.node_list_unleads = true;
	assert_int_equal(manager_tick(&mgr), -ZL_ERR_TIMEOUT);
	zl_manager_stats(&mgr, &ms);
	assert_int_equal(ms.passes, passes + 2);
	assert_int_equal(ms.pass_errors, 2);
	assert_false(fk.leader);
	assert_int_equal(manager_tick(&mgr), -ZL_ERR_TIMEOUT);
	zl_manager_stats(&mgr, &ms);
	assert_int_equal(ms.passes, passes + 2);
	assert_int_equal(ms.pass_errors, 2);
}

/* ---- rebalance (docs/REPLICATION.md §5) ---- */

static void rebalance_request(const struct zl_volume *v)
{
	struct zl_rebalance_req *r = &fk.rebs[fk.n_rebs++];

	memset(r, 0, sizeof(*r));
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", v->id);
	snprintf(r->by, sizeof(r->by), "zl-cli");
	r->requested = 5;
	r->mod_rev = ++fk.rev;
}

static int members_on(const struct zl_volume *v, const char *node)
{
	int n = 0;

	for (uint32_t s = 0; s < v->n_slices; s++)
		n += zl_slice_index_of(&v->slices[s], node) >= 0;
	return n;
}

static void test_rebalance_moves_to_new_nodes(void **state)
{
	struct zl_volume *v = cluster3(4);

	node_up(4, 0, 4);
	node_up(5, 0, 5);
	tick();
	assert_int_equal(fk.row_writes, 0); /* no request, no move */
	rebalance_request(v);
	tick();
	assert_true(fk.row_writes >= 1);
	assert_true(members_on(v, "n4") + members_on(v, "n5") >= 1);
	/* A move is a full copy: the new member recovers; nobody else lost sync. */
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *row = &v->slices[s];

		assert_true(zl_slice_member_count(row, ZL_MEMBER_IN_SYNC) >= 2);
		for (int i = 0; i < row->n; i++) {
			bool fresh = !strcmp(row->nodes[i], "n4") || !strcmp(row->nodes[i], "n5");

			assert_int_equal(zl_slice_member_state(row, i),
					 fresh ? ZL_MEMBER_RECOVERING : ZL_MEMBER_IN_SYNC);
		}
	}
	assert_int_equal(fk.n_rebs, 1); /* moves pending: not done */
	/* The new members catch up; the next passes finish the job. */
	for (int round = 0; round < 12 && fk.n_rebs; round++) {
		for (uint32_t s = 0; s < v->n_slices; s++) {
			const struct zl_slice *row = &v->slices[s];
			int p = zl_slice_primary(row);

			for (int i = 0; i < row->n; i++) {
				if (zl_slice_member_state(row, i) == ZL_MEMBER_RECOVERING)
					report_put(v, s, row->nodes[p], row->nodes[i], "CAUGHT_UP",
						   row->version, 30 + round);
			}
		}
		tick();
	}
	assert_int_equal(fk.n_rebs, 0); /* balanced: the request is deleted */
	for (int k = 1; k <= 5; k++) {
		char id[8];
		int n;

		snprintf(id, sizeof(id), "n%d", k);
		n = members_on(v, id);
		assert_true(n >= 2 && n <= 3); /* 12 members over 5 nodes */
	}
}

/* A backup moves before a primary (no new term), and at most
 * MGR_REBAL_INFLIGHT rows of a volume move at once. */
static void test_rebalance_backups_first_and_bounded(void **state)
{
	static const int rows[8][3] = {{1, 2, 3}, {2, 3, 1}, {3, 1, 2}, {1, 2, 3},
				       {2, 3, 1}, {3, 1, 2}, {1, 2, 3}, {2, 3, 1}};
	struct zl_volume *v;
	int moving = 0;

	for (int k = 1; k <= 3; k++)
		node_up(k, 0, k);
	v = vol_add(1, 8, rows);
	node_up(4, 0, 4);
	node_up(5, 0, 5);
	node_up(6, 0, 6);
	rebalance_request(v);
	tick();
	for (uint32_t s = 0; s < v->n_slices; s++) {
		const struct zl_slice *row = &v->slices[s];

		moving += zl_slice_member_count(row, ZL_MEMBER_RECOVERING) > 0;
		assert_int_equal(row->term, 1); /* every move took a backup */
		assert_int_equal(zl_slice_member_count(row, ZL_MEMBER_RECOVERING) +
				     zl_slice_member_count(row, ZL_MEMBER_IN_SYNC),
				 3);
	}
	assert_int_equal(moving, MGR_REBAL_INFLIGHT);
	tick();
	assert_int_equal(fk.row_tries, MGR_REBAL_INFLIGHT); /* none until one settles */
}

static void test_rebalance_refused_at_min_size(void **state)
{
	struct zl_volume *v = cluster3(2);

	v->min_size = 3; /* a move would leave fewer than min_size in sync */
	node_up(4, 0, 4);
	rebalance_request(v);
	tick();
	tick();
	assert_int_equal(fk.row_writes, 0);
	assert_int_equal(fk.n_rebs, 1);
}

/* ---- the thread (manager_run.c) ---- */

static const struct zl_manager_cfg run_cfg = {
    .etcd = (struct zl_etcd *)&fw, /* never dereferenced: every call is faked */
    .prefix = "/zl-test/",
    .grace_s = T_GRACE_S,
    .down_out_s = T_DOWN_OUT_S,
    .leader_is = t_leader_is,
    .leader_may_write = t_may_write,
};

static uint64_t real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The thread watches the four prefixes and runs passes (here: M5) until
 * destroyed. (A watch event wakes it at once; the 1 s tick would too, so
 * the wake itself is not told apart here.) */
static void test_run_thread_runs_passes(void **state)
{
	static const char *const kinds[4] = {"nodes", "volumes", "reports", "rebalance"};
	struct zl_volume *v = cluster3(1);
	struct zl_manager *m = NULL;
	uint64_t until;

	report_put(v, 0, "n1", "n3", "ZL_ERR_IO", v->slices[0].version, 10);
	assert_int_equal(zl_manager_create(&run_cfg, &m), 0);
	assert_non_null(m);
	assert_int_equal(fw.n, 4);
	for (int i = 0; i < 4; i++) {
		char want[64];

		snprintf(want, sizeof(want), "/zl-test/%s/", kinds[i]);
		assert_string_equal(fw.prefix[i], want);
		assert_ptr_equal(fw.arg[i], m);
	}
	fw.cb[2](fw.arg[2], ZL_ETCD_EV_PUT, NULL); /* a report was put */
	/* The bound only guards a loaded machine; it takes milliseconds. */
	until = real_ms() + 5000;
	while (!__atomic_load_n(&fk.row_writes, __ATOMIC_ACQUIRE) && real_ms() < until) {
		struct timespec ms = {.tv_nsec = 1000000};

		nanosleep(&ms, NULL);
	}
	zl_manager_destroy(m); /* joins the thread: fk is ours again */
	assert_int_equal(fk.row_writes, 1);
	assert_int_equal(st_of(v, 0, "n3"), ZL_MEMBER_OUT);
	assert_int_equal(fw.cancelled, 4);
}

/* A watch that cannot start: create fails and undoes the others. */
static void test_run_create_unwinds(void **state)
{
	struct zl_manager_cfg bad = run_cfg;
	struct zl_manager *m = (struct zl_manager *)&fw;

	fw.fail_at = 2;
	assert_int_equal(zl_manager_create(&run_cfg, &m), -ZL_ERR_UNAVAIL);
	assert_null(m);
	assert_int_equal(fw.n, 2);
	assert_int_equal(fw.cancelled, 2);
	bad.leader_may_write = NULL;
	assert_int_equal(zl_manager_create(&bad, &m), -ZL_ERR_INVAL);
	assert_null(m);
	zl_manager_destroy(NULL);
	zl_manager_kick(NULL);
}

/* Node k's status record says its data dir is near full (or not). */
static void disk_near_full_set(int k, bool on)
{
	disk_set(k, "");
	for (size_t i = 0; i < fk.n_status; i++) {
		char id[ZL_NODE_ID_MAX];

		snprintf(id, sizeof(id), "n%d", k);
		if (!strcmp(fk.status[i].node, id))
			fk.status[i].disk_near_full = on;
	}
}

/* A near-full data dir (docs/REPLICATION.md §9): its members stay in their
 * rows, but neither a replacement (M7) nor a rebalance move goes to it,
 * even where its free space would make it the first choice; once it has
 * room again it takes moves. */
static void test_placement_avoids_full_disks(void **state)
{
	struct zl_volume *v = cluster3(4);

	node_up(4, 0, 4);
	node_up(5, 0, 5);
	fk.nodes[3].free = 1ull << 41; /* n4 would be the first choice */
	disk_near_full_set(4, true);
	disk_near_full_set(1, true);
	row_set(v, 0, "n2", ZL_MEMBER_OUT);
	node_down(2);
	tick();
	assert_int_equal(st_of(v, 1, "n1"), ZL_MEMBER_IN_SYNC); /* full, not failed */
	advance_s(T_DOWN_OUT_S + 1);
	tick();
	tick();
	for (uint32_t s = 0; s < v->n_slices; s++) {
		assert_int_equal(zl_slice_index_of(&v->slices[s], "n2"), -1);
		assert_int_equal(zl_slice_index_of(&v->slices[s], "n4"), -1);
	}
	assert_true(members_on(v, "n5") >= 1);
	/* A rebalance moves nothing onto n4 while it is near full. */
	rebalance_request(v);
	for (int round = 0; round < 6; round++) {
		tick();
		assert_int_equal(members_on(v, "n4"), 0);
	}
	/* Room again: once the rows settle (n5 caught up), moves go to n4. */
	disk_near_full_set(4, false);
	for (int round = 0; round < 4 && !members_on(v, "n4"); round++) {
		for (uint32_t s = 0; s < v->n_slices; s++) {
			const struct zl_slice *row = &v->slices[s];
			int p = zl_slice_primary(row);

			for (int i = 0; i < row->n; i++)
				if (zl_slice_member_state(row, i) == ZL_MEMBER_RECOVERING)
					report_put(v, s, row->nodes[p], row->nodes[i], "CAUGHT_UP",
						   row->version, 40 + round);
		}
		tick();
	}
	assert_true(members_on(v, "n4") >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_m1_lost_node_goes_out_after_grace, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_m1_lost_primary_new_term, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m1_last_in_sync_waits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_follower_keeps_node_clocks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m2_returning_node_recovers_then_in_sync, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_m4_keeps_the_primary, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m4_later_failure_wins, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m4_not_on_a_dead_node, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m3_new_incarnation_recovers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m3_last_in_sync_waits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m5_primary_report_takes_backup_out, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_m5_restarted_node_recovers_at_once, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_m6_other_reports_change_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pointless_reports_deleted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m7_down_out_replacement, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m8_failed_disk_goes_out_at_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m8_placement_avoids_failed_disks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_m7_waits_without_a_candidate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_placement_avoids_full_disks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_not_leading_changes_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lost_lease_writes_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failed_tick_counted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rebalance_moves_to_new_nodes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rebalance_backups_first_and_bounded, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_rebalance_refused_at_min_size, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_thread_runs_passes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_create_unwinds, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
