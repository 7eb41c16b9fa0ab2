/* lib/meta for replication (issue 10) against a real etcd: the cluster
 * identity, identity fields of node records, the new fields of slice rows
 * (and 0.1 records without them), the manager's compare-and-swap of a row,
 * and failure reports. */
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"
#include "meta_fixture.h"

#define RACERS 4

static pthread_barrier_t g_barrier;

/* ---- cluster identity ---- */

static void test_cluster_identity(void **state)
{
	struct fixture *f = *state;
	struct zl_cluster_info a, b, c;
	char key[512], prefix[96];
	bool created = false;
	int64_t now = zl_wall_sec();

	assert_int_equal(zl_meta_cluster_get(f->e, f->prefix, &a), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_cluster_ensure(f->e, f->prefix, &a, &created), 0);
	assert_true(created);
	assert_int_equal(zl_meta_id_check(a.id), 0);
	assert_in_range(a.created, now - 5, now + 5);
	/* Once: later calls return the same identity. */
	assert_int_equal(zl_meta_cluster_ensure(f->e, f->prefix, &b, &created), 0);
	assert_false(created);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(zl_meta_cluster_ensure(f->e, f->prefix, &b, NULL), 0);
	assert_string_equal(a.id, b.id);
	assert_int_equal(zl_meta_cluster_get(f->e, f->prefix, &c), 0);
	assert_memory_equal(&a, &c, sizeof(a));
	/* Stored where the design says, as the design says. */
	struct zl_etcd_kv kv;
	snprintf(key, sizeof(key), "%scluster", f->prefix);
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	char want[128];
	snprintf(want, sizeof(want), "{\"cluster_id\":\"%s\",\"created\":%" PRId64 "}", a.id,
		 a.created);
	assert_string_equal(kv.value, want);
	zl_etcd_kv_fini(&kv);

	/* Another prefix is another cluster. */
	snprintf(prefix, sizeof(prefix), "%sother/", f->prefix);
	assert_int_equal(zl_meta_cluster_ensure(f->e, prefix, &b, &created), 0);
	assert_true(created);
	assert_string_not_equal(a.id, b.id);

	/* A malformed record is reported, never replaced. */
	snprintf(prefix, sizeof(prefix), "%sbroken/", f->prefix);
	snprintf(key, sizeof(key), "%scluster", prefix);
	assert_int_equal(
	    zl_etcd_put(f->e, key, "{\"cluster_id\":\"xyz\",\"created\":1}", 32, 0, NULL), 0);
	assert_int_equal(zl_meta_cluster_ensure(f->e, prefix, &b, &created), -ZL_ERR_INVAL);
	assert_false(created);
	assert_int_equal(zl_meta_cluster_get(f->e, prefix, &b), -ZL_ERR_INVAL);
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	assert_string_equal(kv.value, "{\"cluster_id\":\"xyz\",\"created\":1}");
	zl_etcd_kv_fini(&kv);
}

struct cluster_arg {
	const char *prefix;
	int ret;
	bool created;
	struct zl_cluster_info info;
};

static void *cluster_thread(void *p)
{
	struct cluster_arg *a = p;
	struct zl_etcd *e = new_client();

	a->ret = -1;
	pthread_barrier_wait(&g_barrier);
	if (!e)
		return NULL;
	a->ret = zl_meta_cluster_ensure(e, a->prefix, &a->info, &a->created);
	zl_etcd_destroy(e);
	return NULL;
}

/* Daemons starting together on an empty etcd agree on one cluster id. */
static void test_cluster_race(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(pthread_barrier_init(&g_barrier, NULL, RACERS), 0);
	for (int round = 0; round < 4; round++) {
		struct cluster_arg a[RACERS];
		pthread_t t[RACERS];
		char prefix[96];
		int n_created = 0;

		snprintf(prefix, sizeof(prefix), "%sround%d/", f->prefix, round);
		for (int i = 0; i < RACERS; i++) {
			a[i] = (struct cluster_arg){.prefix = prefix};
			assert_int_equal(pthread_create(&t[i], NULL, cluster_thread, &a[i]), 0);
		}
		for (int i = 0; i < RACERS; i++)
			pthread_join(t[i], NULL);
		for (int i = 0; i < RACERS; i++) {
			assert_int_equal(a[i].ret, 0);
			assert_string_equal(a[i].info.id, a[0].info.id);
			n_created += a[i].created;
		}
		assert_int_equal(n_created, 1);
	}
	pthread_barrier_destroy(&g_barrier);
}

/* ---- node records ---- */

static void test_node_identity(void **state)
{
	struct fixture *f = *state;
	struct zl_node_info n, got;

	make_node(&n, 0, NULL, GIB);
	zl_meta_id_generate(n.cluster_id);
	zl_meta_id_generate(n.incarnation);
	assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), 0);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-0", &got), 0);
	assert_string_equal(got.cluster_id, n.cluster_id);
	assert_string_equal(got.incarnation, n.incarnation);

	/* A record written by a 0.1 daemon. */
	put_raw(f, "nodes", "node-1",
		"{\"id\":\"node-1\",\"addr\":\"10.0.0.2\",\"port\":7420,\"rdma_port\":0,"
		"\"transports\":\"tcp\",\"domain\":\"\",\"capacity\":2,\"free\":1,"
		"\"start_time\":1700000001,\"version\":\"0.1.0\"}");
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-1", &got), 0);
	assert_string_equal(got.cluster_id, "");
	assert_string_equal(got.incarnation, "");

	/* Refused before it reaches etcd. */
	strcpy(n.incarnation, "not-an-id");
	assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), -ZL_ERR_INVAL);
}

/* ---- slice rows ---- */

/* node-0 .. node-<count-1>, each with its own incarnation (in incs). */
static void register_incarnated(struct fixture *f, int count, char incs[][ZL_META_ID_SIZE])
{
	for (int i = 0; i < count; i++) {
		struct zl_node_info n;

		make_node(&n, i, NULL, 100 * GIB);
		zl_meta_id_generate(n.incarnation);
		strcpy(incs[i], n.incarnation);
		assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), 0);
	}
}

static void test_create_fields(void **state)
{
	struct fixture *f = *state;
	char incs[4][ZL_META_ID_SIZE];
	struct zl_volume v, w;
	bool created;

	register_incarnated(f, 4, incs);
	struct zl_volume_spec spec = {.name = "pvc-fields", .size = GIB};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	assert_int_equal(v.min_size, 2);
	for (uint32_t s = 0; s < v.n_slices; s++) {
		const struct zl_slice *sl = &v.slices[s];

		assert_int_equal(sl->term, 1);
		for (int r = 0; r < sl->n; r++) {
			int k;

			assert_int_equal(zl_slice_member_state(sl, r), ZL_MEMBER_IN_SYNC);
			assert_int_equal(sl->state[r], ZL_MEMBER_IN_SYNC);
			assert_int_equal(sscanf(sl->nodes[r], "node-%d", &k), 1);
			assert_string_equal(sl->incarnation[r], incs[k]);
		}
	}
	/* What create returned is what is stored. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &w), 0);
	assert_int_equal(w.min_size, 2);
	assert_memory_equal(v.slices, w.slices, v.n_slices * sizeof(*v.slices));
	zl_volume_fini(&w);

	/* The same name: min_size is compared only when the spec gives one. */
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &w, &created), 0);
	assert_false(created);
	zl_volume_fini(&w);
	spec.min_size = 2;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &w, &created), 0);
	assert_false(created);
	assert_string_equal(w.id, v.id);
	zl_volume_fini(&w);
	spec.min_size = 3;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &w, &created),
			 -ZL_ERR_EXISTS);
	zl_volume_fini(&v);

	/* Defaults and bounds by replicas. */
	struct zl_volume_spec two = {.name = "pvc-two", .size = GIB, .replicas = 2};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &two, &v, &created), 0);
	assert_int_equal(v.min_size, 1);
	zl_volume_fini(&v);
	struct zl_volume_spec strict = {.name = "pvc-strict", .size = GIB, .min_size = 3};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &strict, &v, &created), 0);
	assert_int_equal(v.min_size, 3);
	zl_volume_fini(&v);
	struct zl_volume_spec bad = {.name = "pvc-bad", .size = GIB, .replicas = 2, .min_size = 3};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &bad, &v, &created), -ZL_ERR_INVAL);
	assert_false(key_exists(f, "names", "pvc-bad"));
}

/* A volume record exactly as 0.1 wrote it (rows without term, states,
 * incarnations; no min_size), on node-0..2. */
static const char g_v01[] =
    "{\"id\":\"vol-00000000000a0001\",\"name\":\"pvc-old\",\"size\":1073741824,"
    "\"chunk_size\":4194304,\"replicas\":3,\"slices\":2,\"state\":\"ready\","
    "\"created\":1700000123,\"params\":{},\"placement\":["
    "{\"v\":4,\"nodes\":[\"node-0\",\"node-1\",\"node-2\"],\"in_sync\":[\"node-2\",\"node-0\"]},"
    "{\"v\":1,\"nodes\":[\"node-1\",\"node-2\",\"node-0\"],"
    "\"in_sync\":[\"node-1\",\"node-2\",\"node-0\"]}]}";
#define V01_ID "vol-00000000000a0001"

static void test_v01_volume(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, out;
	struct zl_slice row;
	struct zl_etcd_kv kv;
	char key[512];

	put_raw(f, "volumes", V01_ID, g_v01);
	put_raw(f, "names", "pvc-old", V01_ID);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "pvc-old", &v), 0);
	assert_int_equal(v.min_size, 2);
	assert_int_equal(v.slices[0].term, 1);
	assert_int_equal(zl_slice_member_state(&v.slices[0], 1), ZL_MEMBER_OUT);
	assert_int_equal(zl_slice_primary(&v.slices[0]), 0);
	assert_string_equal(v.slices[0].incarnation[0], "");

	/* The manager can work on it: node-1 comes back as recovering. */
	row = v.slices[0];
	zl_slice_member_set(&row, 1, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, V01_ID, 0, 4, &row, &out), 0);
	assert_true(out.slices[0].version == 5);
	assert_int_equal(out.slices[0].term, 1);
	assert_int_equal(zl_slice_member_state(&out.slices[0], 1), ZL_MEMBER_RECOVERING);
	zl_volume_fini(&out);
	/* ... and the record now carries every field, 0.1's included. */
	key_of(f, key, "volumes", V01_ID);
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	assert_non_null(strstr(kv.value, "\"min_size\":2"));
	assert_non_null(strstr(kv.value, "{\"v\":5,\"term\":1,\"nodes\":[\"node-0\",\"node-1\","
					 "\"node-2\"],\"in_sync\":[\"node-0\",\"node-2\"],"
					 "\"states\":[\"in_sync\",\"recovering\",\"in_sync\"],"));
	zl_etcd_kv_fini(&kv);
	/* The 0.1 drop works on it too. */
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, V01_ID, 1, "node-2", 1, &out), 0);
	assert_true(out.slices[1].version == 2);
	assert_false(out.slices[1].in_sync[1]);
	zl_volume_fini(&out);
	zl_volume_fini(&v);
}

static void create3(struct fixture *f, const char *name, struct zl_volume *v)
{
	struct zl_volume_spec spec = {.name = name, .size = GIB, .n_slices = 4};
	bool created;

	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, v, &created), 0);
	assert_true(created);
}

static void assert_row_unchanged(struct fixture *f, const struct zl_volume *v, uint32_t s)
{
	struct zl_volume now;

	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v->id, &now), 0);
	assert_memory_equal(&now.slices[s], &v->slices[s], sizeof(now.slices[s]));
	zl_volume_fini(&now);
}

static void test_slice_set(void **state)
{
	struct fixture *f = *state;
	char incs[5][ZL_META_ID_SIZE];
	struct zl_volume v, out, cur;
	struct zl_slice row;

	register_incarnated(f, 5, incs);
	create3(f, "pvc-set", &v);

	/* A backup to recovering: same primary, same term, version + 1. */
	row = v.slices[1];
	row.version = 77; /* ignored */
	zl_slice_member_set(&row, 2, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 1, &row, &out), 0);
	assert_true(out.slices[1].version == 2);
	assert_int_equal(out.slices[1].term, 1);
	assert_int_equal(zl_slice_member_state(&out.slices[1], 2), ZL_MEMBER_RECOVERING);
	assert_true(out.mod_rev > v.mod_rev);
	/* Other rows are untouched. */
	for (uint32_t s = 0; s < 4; s++)
		if (s != 1)
			assert_memory_equal(&out.slices[s], &v.slices[s], sizeof(v.slices[s]));
	zl_volume_fini(&out);

	/* A stale seen_version writes nothing. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	row = cur.slices[1];
	zl_slice_member_set(&row, 2, ZL_MEMBER_OUT);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 1, &row, NULL), -ZL_ERR_STALE);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 3, &row, NULL), -ZL_ERR_STALE);
	assert_row_unchanged(f, &cur, 1);

	/* A new primary needs a new term: stated... */
	row = cur.slices[1];
	zl_slice_member_set(&row, 0, ZL_MEMBER_OUT);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 2, &row, NULL), -ZL_ERR_INVAL);
	assert_row_unchanged(f, &cur, 1);
	row.term = 5;
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 2, &row, &out), 0);
	assert_int_equal(out.slices[1].term, 5);
	assert_true(out.slices[1].version == 3);
	assert_int_equal(zl_slice_primary(&out.slices[1]), 1);
	zl_volume_fini(&out);
	/* ... or left to lib/meta with term 0: current + 1. */
	row = cur.slices[0];
	row.term = 0;
	zl_slice_member_set(&row, 0, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 0, 1, &row, &out), 0);
	assert_int_equal(out.slices[0].term, 2);
	zl_volume_fini(&out);
	/* The same node with another incarnation is another primary. */
	row = cur.slices[2];
	zl_meta_id_generate(row.incarnation[0]);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 2, 1, &row, NULL), -ZL_ERR_INVAL);
	row.term = 0;
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 2, 1, &row, &out), 0);
	assert_int_equal(out.slices[2].term, 2);
	assert_string_equal(out.slices[2].incarnation[0], row.incarnation[0]);
	zl_volume_fini(&out);
	/* The term never goes back, even with the same primary. */
	zl_volume_fini(&cur);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	row = cur.slices[1];
	row.term = 4;
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 1, 3, &row, NULL), -ZL_ERR_INVAL);
	assert_row_unchanged(f, &cur, 1);

	/* No in-sync member: refused. */
	row = cur.slices[3];
	for (int r = 0; r < 3; r++)
		zl_slice_member_set(&row, r, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL),
			 -ZL_ERR_UNAVAIL);
	/* Invalid rows: a node twice, a bad node id, another replica count. */
	row = cur.slices[3];
	strcpy(row.nodes[2], row.nodes[1]);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL), -ZL_ERR_INVAL);
	row = cur.slices[3];
	strcpy(row.nodes[2], "bad id");
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL), -ZL_ERR_INVAL);
	row = cur.slices[3];
	row.n = 2;
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL), -ZL_ERR_INVAL);
	row.n = 4;
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL), -ZL_ERR_INVAL);
	row = cur.slices[3];
	strcpy(row.incarnation[1], "xyz");
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, NULL), -ZL_ERR_INVAL);
	assert_row_unchanged(f, &cur, 3);
	/* Bad arguments. */
	row = cur.slices[3];
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 4, 1, &row, NULL), -ZL_ERR_INVAL);
	assert_int_equal(
	    zl_meta_slice_set(f->e, f->prefix, "vol-00000000000000ff", 0, 1, &row, NULL),
	    -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, "pvc-set", 0, 1, &row, NULL),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, NULL, 0, 1, &row, NULL), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 0, 1, NULL, NULL), -ZL_ERR_INVAL);

	/* Backfill: a lost member's slot goes to another node, as recovering
	 * with its incarnation. */
	row = cur.slices[3];
	int lost = 2, spare = -1;
	for (int k = 0; k < 5 && spare < 0; k++) {
		char id[16];

		snprintf(id, sizeof(id), "node-%d", k);
		if (zl_slice_index_of(&row, id) < 0)
			spare = k;
	}
	assert_true(spare >= 0);
	snprintf(row.nodes[lost], sizeof(row.nodes[lost]), "node-%d", spare);
	strcpy(row.incarnation[lost], incs[spare]);
	zl_slice_member_set(&row, lost, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 3, 1, &row, &out), 0);
	assert_string_equal(out.slices[3].nodes[lost], row.nodes[lost]);
	assert_int_equal(zl_slice_member_state(&out.slices[3], lost), ZL_MEMBER_RECOVERING);
	assert_int_equal(out.slices[3].term, 1);
	zl_volume_fini(&out);
	zl_volume_fini(&cur);
	zl_volume_fini(&v);
}

struct set_arg {
	const char *prefix;
	const char *vol;
	uint32_t slice;
	uint64_t seen;
	struct zl_slice row;
	int ret;
};

static void *set_thread(void *p)
{
	struct set_arg *a = p;
	struct zl_etcd *e = new_client();

	a->ret = -1;
	pthread_barrier_wait(&g_barrier);
	if (!e)
		return NULL;
	a->ret = zl_meta_slice_set(e, a->prefix, a->vol, a->slice, a->seen, &a->row, NULL);
	zl_etcd_destroy(e);
	return NULL;
}

static void run_setters(struct set_arg *a, int n)
{
	pthread_t t[RACERS];

	assert_int_equal(pthread_barrier_init(&g_barrier, NULL, (unsigned)n), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(pthread_create(&t[i], NULL, set_thread, &a[i]), 0);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&g_barrier);
}

/* Managers (an old leader and a new one, say) updating the same row at the
 * same seen_version: exactly one wins, the row is the winner's. Updates of
 * different rows of one volume at the same time all land. */
static void test_slice_set_race(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, now;

	register_nodes(f, 4);
	create3(f, "pvc-race", &v);
	for (int round = 0; round < 6; round++) {
		struct set_arg a[RACERS];
		int winner = -1;

		assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &now), 0);
		for (int i = 0; i < RACERS; i++) {
			a[i] = (struct set_arg){.prefix = f->prefix,
						.vol = v.id,
						.slice = 2,
						.seen = now.slices[2].version,
						.row = now.slices[2]};
			/* Each racer wants another change: member i % 3 moves. */
			zl_slice_member_set(&a[i].row, 1 + i % 2,
					    i < 2 ? ZL_MEMBER_RECOVERING : ZL_MEMBER_OUT);
			a[i].row.term = (uint32_t)(10 * round + i + 1);
		}
		zl_volume_fini(&now);
		run_setters(a, RACERS);
		for (int i = 0; i < RACERS; i++) {
			if (a[i].ret == 0) {
				assert_int_equal(winner, -1);
				winner = i;
			} else {
				assert_int_equal(a[i].ret, -ZL_ERR_STALE);
			}
		}
		assert_true(winner >= 0);
		assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &now), 0);
		assert_true(now.slices[2].version == a[winner].seen + 1);
		assert_int_equal(now.slices[2].term, a[winner].row.term);
		for (int r = 0; r < 3; r++)
			assert_int_equal(zl_slice_member_state(&now.slices[2], r),
					 zl_slice_member_state(&a[winner].row, r));
		zl_volume_fini(&now);
	}

	/* Different rows, same volume record: every update lands. */
	struct set_arg b[RACERS];
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &now), 0);
	for (int i = 0; i < RACERS; i++) {
		b[i] = (struct set_arg){.prefix = f->prefix,
					.vol = v.id,
					.slice = (uint32_t)i,
					.seen = now.slices[i].version,
					.row = now.slices[i]};
		zl_slice_member_set(&b[i].row, 2, ZL_MEMBER_RECOVERING);
	}
	zl_volume_fini(&now);
	run_setters(b, RACERS);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &now), 0);
	for (int i = 0; i < RACERS; i++) {
		assert_int_equal(b[i].ret, 0);
		assert_true(now.slices[i].version == b[i].seen + 1);
		assert_int_equal(zl_slice_member_state(&now.slices[i], 2), ZL_MEMBER_RECOVERING);
	}
	zl_volume_fini(&now);
	zl_volume_fini(&v);
}

/* zl_meta_slice_drop with a seen_version that is not current removes no
 * one, whether it is older or (a confused caller) newer. */
static void test_drop_stale(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, out;

	register_nodes(f, 3);
	create3(f, "pvc-stale", &v);
	assert_int_equal(
	    zl_meta_slice_drop(f->e, f->prefix, v.id, 0, v.slices[0].nodes[1], 2, &out),
	    -ZL_ERR_STALE);
	assert_row_unchanged(f, &v, 0);
	assert_int_equal(
	    zl_meta_slice_drop(f->e, f->prefix, v.id, 0, v.slices[0].nodes[1], 1, &out), 0);
	zl_volume_fini(&out);
	assert_int_equal(
	    zl_meta_slice_drop(f->e, f->prefix, v.id, 0, v.slices[0].nodes[2], 1, &out),
	    -ZL_ERR_STALE);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	assert_true(out.slices[0].version == 2);
	assert_true(out.slices[0].in_sync[2]);
	zl_volume_fini(&out);
	/* A recovering member is not in sync: dropping it is a no-op. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	struct zl_slice row = out.slices[0];
	zl_volume_fini(&out);
	zl_slice_member_set(&row, 1, ZL_MEMBER_RECOVERING);
	assert_int_equal(zl_meta_slice_set(f->e, f->prefix, v.id, 0, 2, &row, NULL), 0);
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 0, row.nodes[1], 3, &out), 0);
	assert_true(out.slices[0].version == 3);
	assert_int_equal(zl_slice_member_state(&out.slices[0], 1), ZL_MEMBER_RECOVERING);
	zl_volume_fini(&out);
	zl_volume_fini(&v);
}

/* ---- failure reports ---- */

static void report(struct zl_report *r, const char *vol, uint32_t slice, const char *reporter,
		   const char *peer)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->vol_id, sizeof(r->vol_id), "%s", vol);
	r->slice = slice;
	snprintf(r->reporter, sizeof(r->reporter), "%s", reporter);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	snprintf(r->error, sizeof(r->error), "%s", zl_errname(-ZL_ERR_TIMEOUT));
	r->slice_ver = 3;
	r->time = zl_wall_sec();
}

#define VOL_A "vol-000000000000000a"
#define VOL_B "vol-000000000000000b"

static void put_raw_key(struct fixture *f, const char *rest, const char *value)
{
	char key[512];

	snprintf(key, sizeof(key), "%sreports/%s", f->prefix, rest);
	assert_int_equal(zl_etcd_put(f->e, key, value, strlen(value), 0, NULL), 0);
}

static void test_reports(void **state)
{
	struct fixture *f = *state;
	struct zl_report r, *list;
	int64_t lease, other;
	size_t n;
	char key[512];

	assert_int_equal(zl_etcd_lease_grant(f->e, 60, &lease), 0);
	assert_int_equal(zl_etcd_lease_grant(f->e, 60, &other), 0);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 0);
	assert_null(list);

	/* Written out of order; slices sort as numbers (10 after 2). */
	report(&r, VOL_B, 0, "client-1", "node-0");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), 0);
	report(&r, VOL_A, 10, "node-0", "node-2");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), 0);
	report(&r, VOL_A, 2, "node-0", "node-2");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), 0);
	report(&r, VOL_A, 2, "node-0", "node-1"); /* the same reporter, another peer */
	r.slice_ver = 8;
	strcpy(r.error, "ZL_ERR_CONN");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, other), 0);
	report(&r, VOL_A, 2, "client-9", "node-0");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), 0);

	/* The key is the one of the design. */
	snprintf(key, sizeof(key), "%sreports/%s/2/node-0/node-1", f->prefix, VOL_A);
	struct zl_etcd_kv kv;
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	assert_true(kv.lease == other);
	/* What a watch on reports/ hands over decodes whole. */
	assert_int_equal(zl_meta_report_from_kv(&kv, &r), 0);
	assert_string_equal(r.vol_id, VOL_A);
	assert_int_equal(r.slice, 2);
	assert_string_equal(r.reporter, "node-0");
	assert_string_equal(r.peer, "node-1");
	assert_true(r.slice_ver == 8 && r.lease == other && r.mod_rev == kv.mod_rev);
	assert_non_null(strstr(kv.value, "\"peer\":\"node-1\",\"error\":\"ZL_ERR_CONN\","
					 "\"slice_ver\":8,\"time\":"));
	zl_etcd_kv_fini(&kv);

	/* Malformed entries are skipped (and logged), never fatal. */
	put_raw_key(f, VOL_A "/3/node-0/node-4", "not json");
	put_raw_key(f, VOL_A "/03/node-0/node-4",
		    "{\"peer\":\"node-4\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}");
	put_raw_key(f, VOL_A "/3/node-0/node-5",
		    "{\"peer\":\"node-4\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}");
	put_raw_key(f, VOL_A "/x/3/node-0/node-4",
		    "{\"peer\":\"node-4\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}");
	put_raw_key(f, "vol-1/3/node-0/node-4",
		    "{\"peer\":\"node-4\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}");

	assert_int_equal(zl_meta_report_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 5);
	static const struct {
		const char *vol;
		uint32_t slice;
		const char *reporter, *peer;
	} want[] = {
	    {VOL_A, 2, "client-9", "node-0"}, {VOL_A, 2, "node-0", "node-1"},
	    {VOL_A, 2, "node-0", "node-2"},   {VOL_A, 10, "node-0", "node-2"},
	    {VOL_B, 0, "client-1", "node-0"},
	};
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(list[i].vol_id, want[i].vol);
		assert_int_equal(list[i].slice, want[i].slice);
		assert_string_equal(list[i].reporter, want[i].reporter);
		assert_string_equal(list[i].peer, want[i].peer);
		assert_true(list[i].mod_rev > 0);
		assert_int_equal(zl_meta_report_check(&list[i], NULL, 0), 0);
	}
	assert_true(list[1].lease == other && list[0].lease == lease);
	assert_string_equal(list[1].error, "ZL_ERR_CONN");
	assert_true(list[1].slice_ver == 8);
	free(list);

	assert_int_equal(zl_meta_report_list(f->e, f->prefix, VOL_B, &list, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].reporter, "client-1");
	free(list);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, "vol-000000000000000c", &list, &n),
			 0);
	assert_int_equal(n, 0);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, "vol-c", &list, &n), -ZL_ERR_INVAL);

	/* Delete what was read; a report put again since stays. */
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, VOL_A, &list, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(zl_meta_report_delete(f->e, f->prefix, &list[0]), 0);
	assert_int_equal(zl_meta_report_delete(f->e, f->prefix, &list[0]), 0); /* gone: fine */
	r = list[1];
	r.time++;
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, other), 0);
	assert_int_equal(zl_meta_report_delete(f->e, f->prefix, &list[1]), -ZL_ERR_CONFLICT);
	r = list[2];
	r.mod_rev = 0; /* unconditional */
	assert_int_equal(zl_meta_report_delete(f->e, f->prefix, &r), 0);
	r = list[1];
	r.time++;
	free(list);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, VOL_A, &list, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].peer, "node-1");
	assert_true(list[0].time == r.time);
	assert_int_equal(list[1].slice, 10);
	free(list);

	/* Reports live on their lease. */
	assert_int_equal(zl_etcd_lease_revoke(f->e, other), 0);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, VOL_A, &list, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(list[0].slice, 10);
	free(list);
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 0);

	/* Refused before etcd: no lease, bad fields. */
	report(&r, VOL_A, 1, "node-0", "node-1");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, 0), -ZL_ERR_INVAL);
	assert_int_equal(zl_etcd_lease_grant(f->e, 60, &lease), 0);
	strcpy(r.peer, "node/1");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), -ZL_ERR_INVAL);
	report(&r, "vol-zz", 1, "node-0", "node-1");
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_report_delete(f->e, f->prefix, &r), -ZL_ERR_INVAL);
	report(&r, VOL_A, 1, "node-0", "node-1");
	r.slice_ver = 0;
	assert_int_equal(zl_meta_report_put(f->e, f->prefix, &r, lease), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_report_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);
}

int main(void)
{
	zl_log_init("meta_repl_test");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cluster_identity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cluster_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_node_identity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_fields, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_v01_volume, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slice_set, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slice_set_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_drop_stale, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reports, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
