/* lib/meta against a real etcd (run under test/lib/with-etcd.sh, which sets
 * ZL_TEST_ETCD). Every test works under its own key prefix. */
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

static void test_nodes(void **state)
{
	struct fixture *f = *state;
	struct zl_node_info n, got, *list;
	int64_t lease;
	size_t cnt;

	assert_int_equal(zl_etcd_lease_grant(f->e, 30, &lease), 0);
	for (int i = 2; i >= 0; i--) {
		make_node(&n, i, "zone=a", (uint64_t)(i + 1) * GIB);
		assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, lease), 0);
	}
	assert_int_equal(zl_meta_node_list(f->e, f->prefix, &list, &cnt), 0);
	assert_int_equal(cnt, 3);
	for (size_t i = 0; i < cnt; i++) {
		char id[32];

		snprintf(id, sizeof(id), "node-%zu", i);
		assert_string_equal(list[i].id, id);
		assert_true(list[i].free == (i + 1) * GIB);
	}
	free(list);

	make_node(&n, 1, "zone=a", 2 * GIB);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-1", &got), 0);
	assert_string_equal(got.addr, n.addr);
	assert_string_equal(got.domain, "zone=a");
	assert_true(got.start_time == n.start_time);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-9", &got), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "bad/id", &got), -ZL_ERR_INVAL);

	/* An invalid record is refused before it reaches etcd. */
	n.port = 0;
	assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), -ZL_ERR_INVAL);

	/* The records live on the lease. */
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);
	assert_int_equal(zl_meta_node_list(f->e, f->prefix, &list, &cnt), 0);
	assert_int_equal(cnt, 0);
	free(list);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-1", &got), -ZL_ERR_NOT_FOUND);
}

static void test_create(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-create", .size = 10 * GIB + 1};
	struct zl_volume v, got;
	bool created = false;
	uint64_t num;
	unsigned per_node[5] = {0};

	register_nodes(f, 5);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	assert_true(created);
	assert_int_equal(zl_vol_id_parse(v.id, &num), 0);
	assert_true(num == v.num);
	assert_string_equal(v.name, "pvc-create");
	assert_true(v.size == 10 * GIB + 4096);
	assert_int_equal(v.chunk_size, ZL_DEFAULT_CHUNK_SIZE);
	assert_int_equal(v.replicas, 3);
	assert_int_equal(v.n_slices, 64);
	assert_string_equal(v.state, "ready");
	assert_string_equal(v.params, "{}");
	assert_true(v.mod_rev > 0);
	for (uint32_t s = 0; s < v.n_slices; s++) {
		const struct zl_slice *sl = &v.slices[s];

		assert_true(sl->version == 1);
		assert_int_equal(sl->n, 3);
		for (int r = 0; r < 3; r++) {
			int k;

			assert_true(sl->in_sync[r]);
			assert_int_equal(sscanf(sl->nodes[r], "node-%d", &k), 1);
			assert_in_range(k, 0, 4);
			per_node[k]++;
			for (int q = 0; q < r; q++)
				assert_string_not_equal(sl->nodes[r], sl->nodes[q]);
		}
	}
	for (int i = 0; i < 5; i++)
		assert_in_range(per_node[i], 38, 39);

	/* Stored: the record and the name. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &got), 0);
	assert_true(got.mod_rev == v.mod_rev);
	assert_string_equal(got.name, v.name);
	assert_memory_equal(got.slices, v.slices, v.n_slices * sizeof(*v.slices));
	zl_volume_fini(&got);
	char key[512];
	struct zl_etcd_kv kv;
	key_of(f, key, "names", "pvc-create");
	assert_int_equal(zl_etcd_get(f->e, key, &kv), 0);
	assert_string_equal(kv.value, v.id);
	zl_etcd_kv_fini(&kv);

	/* Small volumes get fewer slices; params are kept (normalized). */
	struct zl_volume w;
	struct zl_volume_spec small = {.name = "pvc-small",
				       .size = MIB,
				       .chunk_size = 64 << 10,
				       .replicas = 2,
				       .params = "{ \"b\": 1, \"a\": \"x\" }"};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &small, &w, &created), 0);
	assert_true(created);
	assert_int_equal(w.n_slices, 16);
	assert_int_equal(w.replicas, 2);
	assert_string_equal(w.params, "{\"a\":\"x\",\"b\":1}");
	zl_volume_fini(&w);
	struct zl_volume_spec tiny = {.name = "pvc-tiny", .size = 100000, .replicas = 1};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &tiny, &w, &created), 0);
	assert_int_equal(w.n_slices, 1);
	assert_true(w.size == 102400);
	zl_volume_fini(&w);
	zl_volume_fini(&v);
}

/* Placement skips a node whose status record says its disk failed, and one
 * whose data dir is near full while enough others are left; with too few
 * others the near-full one still takes replicas (never a failed one). */
static void test_create_avoids_full_disks(void **state)
{
	struct fixture *f = *state;
	struct zl_node_status st = {0};
	struct zl_volume_spec spec = {.name = "pvc-full", .size = GIB};
	struct zl_volume v;
	bool created = false;

	register_nodes(f, 5);
	strcpy(st.node, "node-1");
	st.disk_near_full = true;
	assert_int_equal(zl_meta_status_put(f->e, f->prefix, &st, 0), 0);
	memset(&st, 0, sizeof(st));
	strcpy(st.node, "node-2");
	strcpy(st.disk_error, "data directory /d was removed");
	assert_int_equal(zl_meta_status_put(f->e, f->prefix, &st, 0), 0);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	for (uint32_t s = 0; s < v.n_slices; s++) {
		assert_int_equal(zl_slice_index_of(&v.slices[s], "node-1"), -1);
		assert_int_equal(zl_slice_index_of(&v.slices[s], "node-2"), -1);
	}
	zl_volume_fini(&v);
	/* node-3 near full too: 2 nodes with room for 3 replicas. */
	memset(&st, 0, sizeof(st));
	strcpy(st.node, "node-3");
	st.disk_full = true;
	assert_int_equal(zl_meta_status_put(f->e, f->prefix, &st, 0), 0);
	spec.name = "pvc-full-2";
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	for (uint32_t s = 0; s < v.n_slices; s++) {
		assert_int_equal(zl_slice_index_of(&v.slices[s], "node-2"), -1);
		assert_int_equal(v.slices[s].n, 3);
	}
	zl_volume_fini(&v);
}

static void test_create_idempotent(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-idem", .size = GIB, .replicas = 2};
	struct zl_volume a, b;
	bool created = true;

	register_nodes(f, 3);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &a, &created), 0);
	assert_true(created);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created), 0);
	assert_false(created);
	assert_string_equal(a.id, b.id);
	assert_true(a.mod_rev == b.mod_rev);
	zl_volume_fini(&b);

	/* A size that rounds up to the same bytes is the same volume. */
	spec.size = GIB - 100;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created), 0);
	assert_false(created);
	assert_string_equal(a.id, b.id);
	zl_volume_fini(&b);
	spec.size = GIB + 1;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created),
			 -ZL_ERR_EXISTS);
	spec.size = GIB;
	spec.replicas = 3;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created),
			 -ZL_ERR_EXISTS);
	spec.replicas = 2;
	spec.chunk_size = 1 << 20;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created),
			 -ZL_ERR_EXISTS);
	spec.chunk_size = ZL_DEFAULT_CHUNK_SIZE;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &b, &created), 0);
	assert_false(created);
	assert_string_equal(a.id, b.id);
	zl_volume_fini(&b);
	zl_volume_fini(&a);

	struct zl_volume *list;
	size_t n;
	assert_int_equal(zl_meta_volume_list(f->e, f->prefix, &list, &n), 0);
	assert_int_equal(n, 1);
	zl_meta_volume_list_free(list, n);
}

static void test_create_errors(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v;
	bool created;
	char long_name[300];

	register_nodes(f, 2);
	struct zl_volume_spec spec = {.name = "pvc-nodes", .size = GIB};
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created),
			 -ZL_ERR_NODES);
	assert_false(key_exists(f, "names", "pvc-nodes"));
	spec.replicas = 2;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	assert_true(created);
	zl_volume_fini(&v);

	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	const struct zl_volume_spec bad[] = {
	    {.name = NULL, .size = GIB, .replicas = 1},
	    {.name = "", .size = GIB, .replicas = 1},
	    {.name = "a/b", .size = GIB, .replicas = 1},
	    {.name = "sp ace", .size = GIB, .replicas = 1},
	    {.name = long_name, .size = GIB, .replicas = 1},
	    {.name = "ok", .size = 0, .replicas = 1},
	    {.name = "ok", .size = UINT64_MAX, .replicas = 1},
	    {.name = "ok", .size = GIB, .replicas = 4},
	    {.name = "ok", .size = GIB, .replicas = 1, .chunk_size = 3 << 20},
	    {.name = "ok", .size = GIB, .replicas = 1, .chunk_size = 32 << 10},
	    {.name = "ok", .size = GIB, .replicas = 1, .chunk_size = 128 << 20},
	    {.name = "ok", .size = 8 * MIB, .replicas = 1, .n_slices = 3},
	    {.name = "ok", .size = GIB, .replicas = 1, .params = "[1]"},
	    {.name = "ok", .size = GIB, .replicas = 1, .params = "not json"},
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++)
		assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &bad[i], &v, &created),
				 -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, NULL, &v, &created), -ZL_ERR_INVAL);
	assert_false(key_exists(f, "names", "ok"));
}

static pthread_barrier_t g_barrier;

struct race_arg {
	const char *prefix;
	const char *name;
	int ret;
	bool created;
	char id[24];
};

static void *race_thread(void *p)
{
	struct race_arg *a = p;
	struct zl_etcd *e = new_client();
	struct zl_volume_spec spec = {.name = a->name, .size = 4 * GIB};
	struct zl_volume v;

	a->ret = -1;
	pthread_barrier_wait(&g_barrier);
	if (!e)
		return NULL;
	a->ret = zl_meta_volume_create(e, a->prefix, &spec, &v, &a->created);
	if (a->ret == 0) {
		strcpy(a->id, v.id);
		zl_volume_fini(&v);
	}
	zl_etcd_destroy(e);
	return NULL;
}

static void test_create_race(void **state)
{
	struct fixture *f = *state;
	struct zl_volume *list;
	size_t n;
	char names[6][16];

	register_nodes(f, 4);
	assert_int_equal(pthread_barrier_init(&g_barrier, NULL, 2), 0);
	for (int round = 0; round < 6; round++) {
		struct race_arg a[2];
		pthread_t t[2];

		snprintf(names[round], sizeof(names[round]), "race-%d", round);
		for (int i = 0; i < 2; i++) {
			a[i] = (struct race_arg){.prefix = f->prefix, .name = names[round]};
			assert_int_equal(pthread_create(&t[i], NULL, race_thread, &a[i]), 0);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
		assert_int_equal(a[0].ret, 0);
		assert_int_equal(a[1].ret, 0);
		assert_int_equal(a[0].created + a[1].created, 1);
		assert_string_equal(a[0].id, a[1].id);
	}
	pthread_barrier_destroy(&g_barrier);
	assert_int_equal(zl_meta_volume_list(f->e, f->prefix, &list, &n), 0);
	assert_int_equal(n, 6);
	zl_meta_volume_list_free(list, n);
}

static void test_lookup_list(void **state)
{
	struct fixture *f = *state;
	static const char *names[3] = {"charlie", "alpha", "bravo"};
	char ids[3][24];
	struct zl_volume v, *list;
	size_t n;
	bool created;

	register_nodes(f, 3);
	for (int i = 0; i < 3; i++) {
		struct zl_volume_spec spec = {.name = names[i], .size = (uint64_t)(i + 1) * GIB};

		assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
		strcpy(ids[i], v.id);
		zl_volume_fini(&v);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, names[i], &v), 0);
		assert_string_equal(v.id, ids[i]);
		assert_true(v.mod_rev > 0);
		zl_volume_fini(&v);
		assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, ids[i], &v), 0);
		assert_string_equal(v.name, names[i]);
		zl_volume_fini(&v);
	}
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "delta", &v), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "vol-0000000000000001", &v),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "no/such", &v), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, "alpha", &v), -ZL_ERR_INVAL);

	assert_int_equal(zl_meta_volume_list(f->e, f->prefix, &list, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(list[0].name, "alpha");
	assert_string_equal(list[1].name, "bravo");
	assert_string_equal(list[2].name, "charlie");
	assert_true(list[0].size == 2 * GIB);
	assert_true(list[2].mod_rev > 0);
	zl_meta_volume_list_free(list, n);
}

/* More records than one page (256) of the lister, written in reverse, with
 * malformed records and records under another id's key among them: every
 * good record comes back once, sorted; the bad ones are skipped, and a get
 * of a record under the wrong key is refused. */
#define LIST_NODES 600
#define LIST_VOLS  300
static void test_list_pages(void **state)
{
	struct fixture *f = *state;
	struct zl_node_info n, *nodes;
	struct zl_volume v, *vols;
	char id[64], *json;
	size_t cnt;

	for (int i = LIST_NODES - 1; i >= 0; i--) {
		make_node(&n, i, NULL, GIB);
		snprintf(n.id, sizeof(n.id), "node-%04d", i);
		assert_int_equal(zl_meta_node_put(f->e, f->prefix, &n, 0), 0);
	}
	put_raw(f, "nodes", "node-0300x", "{\"id\":\"node-0300x\"}"); /* fields missing */
	put_raw(f, "nodes", "node-0301x", "not json");
	make_node(&n, 7, NULL, GIB);
	strcpy(n.id, "node-elsewhere");
	json = zl_meta_node_to_json(&n);
	assert_non_null(json);
	put_raw(f, "nodes", "node-0302x", json); /* valid, but not its key's id */
	free(json);

	assert_int_equal(zl_meta_node_list(f->e, f->prefix, &nodes, &cnt), 0);
	assert_int_equal(cnt, LIST_NODES);
	for (size_t i = 0; i < cnt; i++) {
		snprintf(id, sizeof(id), "node-%04zu", i);
		assert_string_equal(nodes[i].id, id);
		assert_true(nodes[i].start_time == 1700000000 + (int64_t)i);
	}
	free(nodes);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-0302x", &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-0301x", &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_node_get(f->e, f->prefix, "node-0599", &n), 0);
	assert_string_equal(n.id, "node-0599");

	/* Volumes: names sort the other way round from ids. */
	memset(&v, 0, sizeof(v));
	v.size = GIB;
	v.chunk_size = ZL_DEFAULT_CHUNK_SIZE;
	v.replicas = 1;
	v.n_slices = 1;
	strcpy(v.state, "ready");
	strcpy(v.params, "{}");
	v.slices = calloc(1, sizeof(*v.slices));
	assert_non_null(v.slices);
	v.slices[0].version = 1;
	v.slices[0].n = 1;
	strcpy(v.slices[0].nodes[0], "node-0000");
	for (int i = 0; i < LIST_VOLS; i++) {
		v.num = 0x1000 + (uint64_t)i;
		zl_vol_id_format(v.num, v.id);
		snprintf(v.name, sizeof(v.name), "vol-name-%04d", LIST_VOLS - 1 - i);
		json = zl_meta_volume_to_json(&v);
		assert_non_null(json);
		put_raw(f, "volumes", v.id, json);
		free(json);
	}
	/* A valid record under another id's key, and one with fields missing. */
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	zl_vol_id_format(0x2000, id);
	put_raw(f, "volumes", id, json);
	free(json);
	zl_vol_id_format(0x2001, id);
	put_raw(f, "volumes", id, "{\"id\":\"vol-0000000000002001\",\"replicas\":2}");
	zl_volume_fini(&v);

	assert_int_equal(zl_meta_volume_list(f->e, f->prefix, &vols, &cnt), 0);
	assert_int_equal(cnt, LIST_VOLS);
	for (size_t i = 0; i < cnt; i++) {
		snprintf(id, sizeof(id), "vol-name-%04zu", i);
		assert_string_equal(vols[i].name, id);
		assert_true(vols[i].num == 0x1000 + (LIST_VOLS - 1 - i));
		assert_true(vols[i].mod_rev > 0);
		assert_int_equal(zl_meta_volume_check(&vols[i], NULL, 0), 0);
	}
	zl_meta_volume_list_free(vols, cnt);
	zl_vol_id_format(0x2000, id);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, id, &v), -ZL_ERR_INVAL);
	assert_null(v.slices);

	/* An empty kind lists nothing, without an array. */
	assert_int_equal(zl_etcd_delete_prefix(f->e, f->prefix, NULL), 0);
	assert_int_equal(zl_meta_volume_list(f->e, f->prefix, &vols, &cnt), 0);
	assert_int_equal(cnt, 0);
	assert_null(vols);
}

static void test_update_conflict(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-upd", .size = GIB};
	struct zl_volume a, b, c;
	bool created;
	int64_t rev;

	register_nodes(f, 3);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &a, &created), 0);
	assert_int_equal(zl_volume_copy(&a, &b), 0);
	rev = a.mod_rev;

	a.size = 2 * GIB;
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &a), 0);
	assert_true(a.mod_rev > rev);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, a.id, &c), 0);
	assert_true(c.size == 2 * GIB);
	assert_true(c.mod_rev == a.mod_rev);
	zl_volume_fini(&c);

	/* b still has the old revision. */
	strcpy(b.state, "deleting");
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &b), -ZL_ERR_CONFLICT);
	assert_true(b.mod_rev == rev);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, a.id, &c), 0);
	assert_string_equal(c.state, "ready");
	zl_volume_fini(&c);

	/* Never stored / invalid records are refused. */
	b.mod_rev = 0;
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &b), -ZL_ERR_INVAL);
	a.chunk_size = 12345;
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &a), -ZL_ERR_INVAL);
	zl_volume_fini(&a);
	zl_volume_fini(&b);
}

static void test_slice_drop(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-drop", .size = GIB};
	struct zl_volume v, out;
	char n0[ZL_NODE_ID_MAX], n1[ZL_NODE_ID_MAX], n2[ZL_NODE_ID_MAX];
	bool created;

	register_nodes(f, 4);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	strcpy(n0, v.slices[5].nodes[0]);
	strcpy(n1, v.slices[5].nodes[1]);
	strcpy(n2, v.slices[5].nodes[2]);

	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n1, 1, &out), 0);
	assert_true(out.slices[5].version == 2);
	assert_false(out.slices[5].in_sync[1]);
	assert_true(out.slices[5].in_sync[0] && out.slices[5].in_sync[2]);
	assert_true(out.mod_rev > v.mod_rev);
	/* Other slices are untouched. */
	assert_true(out.slices[4].version == 1);
	assert_memory_equal(&out.slices[6], &v.slices[6], sizeof(v.slices[6]));
	zl_volume_fini(&out);

	/* Dropping at the old version (a second failed write sent before the
	 * first drop) changes nothing: the row moved on, the caller must reload. */
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n1, 1, &out),
			 -ZL_ERR_STALE);
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n0, 1, &out),
			 -ZL_ERR_STALE);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	assert_true(out.slices[5].version == 2);
	assert_true(out.slices[5].in_sync[0]);
	zl_volume_fini(&out);
	/* At the current version, dropping one already out is a no-op. */
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n1, 2, &out), 0);
	assert_true(out.slices[5].version == 2);
	assert_int_equal(zl_slice_member_state(&out.slices[5], 1), ZL_MEMBER_OUT);
	assert_int_equal(out.slices[5].term, 1); /* the primary did not change */
	zl_volume_fini(&out);

	/* The primary goes; the next in-sync replica becomes primary, in a new
	 * term. */
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n0, 2, NULL), 0);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	assert_true(out.slices[5].version == 3);
	assert_int_equal(out.slices[5].term, 2);
	assert_int_equal(zl_slice_primary(&out.slices[5]), 2);
	zl_volume_fini(&out);

	/* Never the last in-sync replica. */
	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 5, n2, 3, NULL),
			 -ZL_ERR_UNAVAIL);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	assert_true(out.slices[5].version == 3);
	assert_true(out.slices[5].in_sync[2]);
	zl_volume_fini(&out);

	assert_int_equal(zl_meta_slice_drop(f->e, f->prefix, v.id, 64, n2, 1, NULL), -ZL_ERR_INVAL);
	assert_int_equal(
	    zl_meta_slice_drop(f->e, f->prefix, "vol-0000000000000001", 0, n2, 1, NULL),
	    -ZL_ERR_NOT_FOUND);
	zl_volume_fini(&v);
}

struct drop_arg {
	const char *prefix;
	const char *vol;
	const char *node;
	int ret;
};

static void *drop_thread(void *p)
{
	struct drop_arg *a = p;
	struct zl_etcd *e = new_client();

	a->ret = -1;
	pthread_barrier_wait(&g_barrier);
	if (!e)
		return NULL;
	a->ret = zl_meta_slice_drop(e, a->prefix, a->vol, 0, a->node, 1, NULL);
	zl_etcd_destroy(e);
	return NULL;
}

/* Two replicas dropped at once from the same slice, both at the version the
 * droppers saw: exactly one drop happens, the other is told the row moved on
 * (it reloads and decides again). */
static void test_slice_drop_concurrent(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-drop2", .size = GIB};
	struct zl_volume v, out;
	struct drop_arg a[2];
	pthread_t t[2];
	bool created;

	register_nodes(f, 3);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	assert_int_equal(pthread_barrier_init(&g_barrier, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct drop_arg){
		    .prefix = f->prefix, .vol = v.id, .node = v.slices[0].nodes[i + 1]};
		assert_int_equal(pthread_create(&t[i], NULL, drop_thread, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&g_barrier);
	assert_true((a[0].ret == 0 && a[1].ret == -ZL_ERR_STALE) ||
		    (a[1].ret == 0 && a[0].ret == -ZL_ERR_STALE));
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &out), 0);
	assert_true(out.slices[0].version == 2);
	assert_true(out.slices[0].in_sync[0]);
	/* The winner's node is out, the loser's stays in sync. */
	assert_int_equal(out.slices[0].in_sync[1], a[0].ret != 0);
	assert_int_equal(out.slices[0].in_sync[2], a[1].ret != 0);
	zl_volume_fini(&out);
	zl_volume_fini(&v);
}

static void test_delete(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-del", .size = GIB};
	struct zl_volume v, w, x;
	char key[512];
	bool created;

	register_nodes(f, 3);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	key_of(f, key, "attachments", v.id);
	assert_int_equal(zl_etcd_put(f->e, key, "{}", 2, 0, NULL), 0);
	assert_true(key_exists(f, "attachments", v.id));

	assert_int_equal(zl_meta_volume_delete(f->e, f->prefix, &v), 0);
	assert_false(key_exists(f, "volumes", v.id));
	assert_false(key_exists(f, "names", "pvc-del"));
	assert_false(key_exists(f, "attachments", v.id));
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "pvc-del", &w), -ZL_ERR_NOT_FOUND);
	/* Idempotent. */
	assert_int_equal(zl_meta_volume_delete(f->e, f->prefix, &v), 0);

	/* The name is free again, for any parameters. */
	spec.size = 2 * GIB;
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &w, &created), 0);
	assert_true(created);
	assert_string_not_equal(w.id, v.id);
	/* A late delete of the old volume leaves the new one's name alone. */
	assert_int_equal(zl_meta_volume_delete(f->e, f->prefix, &v), 0);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "pvc-del", &x), 0);
	assert_string_equal(x.id, w.id);
	zl_volume_fini(&x);
	zl_volume_fini(&w);
	zl_volume_fini(&v);
}

/* --- zl_meta_volume_modify's size: a writer meddling between its read and
 * its compare-and-swap. zl_etcd_txn is wrapped at link time (CMakeLists):
 * while g_meddle > 0, a put of the volume record first lets another writer
 * change the record (io_timeout + 1, the way a knob or a slice row would),
 * so that put's compare on the mod_revision fails, deterministically. */
int __real_zl_etcd_txn(struct zl_etcd *e, const struct zl_etcd_cmp *cmps, size_t n_cmps,
		       const struct zl_etcd_op *success, size_t n_success,
		       const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
		       struct zl_etcd_txn_result *res);
int __wrap_zl_etcd_txn(struct zl_etcd *e, const struct zl_etcd_cmp *cmps, size_t n_cmps,
		       const struct zl_etcd_op *success, size_t n_success,
		       const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
		       struct zl_etcd_txn_result *res);

static struct {
	const char *prefix;
	char vol_key[512]; /* the record meddled with */
	const char *vol_id;
	int meddle; /* puts still to meddle with */
	int puts;   /* puts of vol_key seen (meddlers' excluded) */
	bool in_meddle;
} g_mod;

static void meddle(struct zl_etcd *e)
{
	struct zl_volume v;

	g_mod.in_meddle = true;
	assert_int_equal(zl_meta_volume_get(e, g_mod.prefix, g_mod.vol_id, &v), 0);
	v.io_timeout_s++;
	assert_int_equal(zl_meta_volume_update(e, g_mod.prefix, &v), 0);
	zl_volume_fini(&v);
	g_mod.in_meddle = false;
}

int __wrap_zl_etcd_txn(struct zl_etcd *e, const struct zl_etcd_cmp *cmps, size_t n_cmps,
		       const struct zl_etcd_op *success, size_t n_success,
		       const struct zl_etcd_op *failure, size_t n_failure, bool *succeeded,
		       struct zl_etcd_txn_result *res)
{
	if (!g_mod.in_meddle && g_mod.vol_key[0] && n_success == 1 &&
	    success[0].kind == ZL_ETCD_OP_PUT && !strcmp(success[0].key, g_mod.vol_key)) {
		g_mod.puts++;
		if (g_mod.meddle > 0) {
			g_mod.meddle--;
			meddle(e);
		}
	}
	return __real_zl_etcd_txn(e, cmps, n_cmps, success, n_success, failure, n_failure,
				  succeeded, res);
}

/* Grow: rounded up, lost by nobody (the meddler's change stays, the size
 * lands on the retry); 8 conflicts in a row give up with the record as the
 * meddler left it; equal is a no-op in any state; shrink, past the limit,
 * growing a deleting volume and a missing one are refused without a write. */
static void test_modify_size(void **state)
{
	struct fixture *f = *state;
	struct zl_volume_spec spec = {.name = "pvc-grow", .size = 8 * MIB, .replicas = 2};
	struct zl_volume_mod mod = {.mask = ZL_VMOD_SIZE, .size = 24 * MIB};
	struct zl_volume v, was, now, cur;
	bool created;
	int64_t rev;

	register_nodes(f, 3);
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &v, &created), 0);
	g_mod.prefix = f->prefix;
	g_mod.vol_id = v.id;
	key_of(f, g_mod.vol_key, "volumes", v.id);

	/* One conflict: the second compare-and-swap lands; both changes stay. */
	g_mod.meddle = 1;
	g_mod.puts = 0;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, "pvc-grow", &mod, &was, &now), 0);
	assert_int_equal(g_mod.meddle, 0);
	assert_int_equal(g_mod.puts, 2);
	assert_true(was.size == 8 * MIB);
	assert_int_equal(was.io_timeout_s, 1); /* read again after the conflict */
	assert_true(now.size == 24 * MIB);
	assert_null(now.slices);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	assert_true(cur.size == 24 * MIB);
	assert_int_equal(cur.io_timeout_s, 1);
	assert_true(cur.mod_rev == now.mod_rev);
	assert_int_equal(cur.n_slices, v.n_slices);
	zl_volume_fini(&cur);

	/* Conflicts on every try: -ZL_ERR_CONFLICT, the size untouched. */
	g_mod.meddle = 100;
	g_mod.puts = 0;
	mod.size = 32 * MIB;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, NULL, NULL),
			 -ZL_ERR_CONFLICT);
	assert_int_equal(g_mod.puts, 8);
	g_mod.meddle = 0;
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	assert_true(cur.size == 24 * MIB);
	assert_int_equal(cur.io_timeout_s, 9);
	rev = cur.mod_rev;
	zl_volume_fini(&cur);

	/* Rounded up to 4 KiB. */
	mod.size = 24 * MIB + 1;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, &now), 0);
	assert_true(was.size == 24 * MIB);
	assert_true(now.size == 24 * MIB + 4096);
	rev = now.mod_rev;

	/* Equal (also before rounding): nothing written. Smaller and too
	 * large: -ZL_ERR_RANGE, before says the size. */
	g_mod.puts = 0;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, &now), 0);
	assert_true(now.size == 24 * MIB + 4096 && now.mod_rev == rev);
	mod.size = 16 * MIB;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, NULL),
			 -ZL_ERR_RANGE);
	assert_true(was.size == 24 * MIB + 4096);
	mod.size = ZL_META_SIZE_MAX + 1;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, NULL),
			 -ZL_ERR_RANGE);
	assert_int_equal(g_mod.puts, 0);

	/* A deleting volume: equal is fine, growing is -ZL_ERR_BUSY. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	strcpy(cur.state, "deleting");
	assert_int_equal(zl_meta_volume_update(f->e, f->prefix, &cur), 0);
	rev = cur.mod_rev;
	zl_volume_fini(&cur);
	g_mod.puts = 0;
	mod.size = 24 * MIB + 4096;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, &now), 0);
	mod.size = 48 * MIB;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, v.id, &mod, &was, NULL),
			 -ZL_ERR_BUSY);
	assert_string_equal(was.state, "deleting");
	assert_int_equal(g_mod.puts, 0);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &cur), 0);
	assert_true(cur.size == 24 * MIB + 4096 && cur.mod_rev == rev);
	zl_volume_fini(&cur);

	/* Missing: -ZL_ERR_NOT_FOUND, before zeroed. */
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, "pvc-nosuch", &mod, &was, NULL),
			 -ZL_ERR_NOT_FOUND);
	assert_string_equal(was.id, "");
	g_mod.vol_key[0] = '\0';

	/* A volume named like an id that is not its own: found by name, never
	 * with ZL_VMOD_BY_ID (a CSI volume_id). */
	spec.name = "vol-00000000000000fe";
	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, &cur, &created), 0);
	assert_string_not_equal(cur.id, spec.name);
	mod.mask = ZL_VMOD_SIZE | ZL_VMOD_BY_ID;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, spec.name, &mod, &was, NULL),
			 -ZL_ERR_NOT_FOUND);
	mod.mask = ZL_VMOD_SIZE;
	assert_int_equal(zl_meta_volume_modify(f->e, f->prefix, spec.name, &mod, &was, &now), 0);
	assert_string_equal(now.id, cur.id);
	assert_true(now.size == 48 * MIB);
	zl_volume_fini(&cur);
	zl_volume_fini(&v);
}

int main(void)
{
	zl_log_init("meta_test");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_nodes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_idempotent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_avoids_full_disks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lookup_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list_pages, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_update_conflict, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slice_drop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slice_drop_concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_modify_size, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
