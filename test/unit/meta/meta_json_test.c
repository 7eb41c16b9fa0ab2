/* JSON codecs of lib/meta: round trips and rejection of malformed records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"

static void make_node(struct zl_node_info *n)
{
	memset(n, 0, sizeof(*n));
	strcpy(n->id, "storage-0");
	strcpy(n->addr, "10.0.0.7");
	n->port = 7420;
	n->rdma_port = 7421;
	strcpy(n->transports, "tcp,rdma");
	strcpy(n->domain, "zone=a,rack=r1");
	n->capacity = 4ull << 40;
	n->free = 3ull << 40;
	n->start_time = 1700000000;
	strcpy(n->version, "0.1.0");
}

static void make_volume(struct zl_volume *v, uint32_t n_slices)
{
	static const char *ids[4] = {"n0", "n1", "n2", "n3"};

	memset(v, 0, sizeof(*v));
	v->num = 0x00c0ffee12345678ull;
	zl_vol_id_format(v->num, v->id);
	strcpy(v->name, "pvc-1234-abcd");
	v->size = 10ull << 30;
	v->chunk_size = 4u << 20;
	v->replicas = 3;
	v->n_slices = n_slices;
	strcpy(v->state, "ready");
	v->created = 1700000123;
	strcpy(v->params, "{\"fstype\":\"ext4\",\"transport\":\"auto\"}");
	v->slices = calloc(n_slices, sizeof(*v->slices));
	assert_non_null(v->slices);
	for (uint32_t s = 0; s < n_slices; s++) {
		v->slices[s].version = s + 1;
		v->slices[s].n = 3;
		for (int r = 0; r < 3; r++) {
			strcpy(v->slices[s].nodes[r], ids[(s + r) % 4]);
			v->slices[s].in_sync[r] = (s % 3) != (uint32_t)r;
		}
	}
}

static void assert_volume_equal(const struct zl_volume *a, const struct zl_volume *b)
{
	assert_string_equal(a->id, b->id);
	assert_true(a->num == b->num);
	assert_string_equal(a->name, b->name);
	assert_true(a->size == b->size);
	assert_int_equal(a->chunk_size, b->chunk_size);
	assert_int_equal(a->replicas, b->replicas);
	assert_int_equal(a->n_slices, b->n_slices);
	assert_string_equal(a->state, b->state);
	assert_true(a->created == b->created);
	assert_string_equal(a->params, b->params);
	for (uint32_t s = 0; s < a->n_slices; s++) {
		assert_true(a->slices[s].version == b->slices[s].version);
		assert_int_equal(a->slices[s].n, b->slices[s].n);
		for (int r = 0; r < a->slices[s].n; r++) {
			assert_string_equal(a->slices[s].nodes[r], b->slices[s].nodes[r]);
			assert_int_equal(a->slices[s].in_sync[r], b->slices[s].in_sync[r]);
		}
	}
}

static void assert_node_equal(const struct zl_node_info *a, const struct zl_node_info *b)
{
	assert_string_equal(a->id, b->id);
	assert_string_equal(a->addr, b->addr);
	assert_int_equal(a->port, b->port);
	assert_int_equal(a->rdma_port, b->rdma_port);
	assert_string_equal(a->transports, b->transports);
	assert_string_equal(a->domain, b->domain);
	assert_true(a->capacity == b->capacity);
	assert_true(a->free == b->free);
	assert_true(a->start_time == b->start_time);
	assert_string_equal(a->version, b->version);
}

static void test_node_round_trip(void **state)
{
	struct zl_node_info a, b;
	char *json;

	(void)state;
	make_node(&a);
	json = zl_meta_node_to_json(&a);
	assert_non_null(json);
	assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	free(json);

	/* Empty domain and no RDMA are valid. */
	a.domain[0] = 0;
	a.rdma_port = 0;
	strcpy(a.transports, "tcp");
	json = zl_meta_node_to_json(&a);
	assert_non_null(json);
	assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), 0);
	assert_node_equal(&a, &b);
	free(json);
}

/* Decodes json after fn(obj) changed it; returns from_json's result. */
static int node_mutated(void (*fn)(json_t *o))
{
	struct zl_node_info n;
	json_t *o;
	char *json;
	int ret;

	make_node(&n);
	json = zl_meta_node_to_json(&n);
	assert_non_null(json);
	o = json_loads(json, 0, NULL);
	assert_non_null(o);
	free(json);
	fn(o);
	json = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	ret = zl_meta_node_from_json(json, strlen(json), &n);
	free(json);
	return ret;
}

static const char *g_field; /* field the mutators act on */

static void mut_del(json_t *o)
{
	assert_int_equal(json_object_del(o, g_field), 0);
}

static void mut_str(json_t *o)
{
	json_object_set_new(o, g_field, json_string("7420"));
}

static void mut_int(json_t *o)
{
	json_object_set_new(o, g_field, json_integer(5));
}

static void mut_neg(json_t *o)
{
	json_object_set_new(o, g_field, json_integer(-1));
}

static void mut_real(json_t *o)
{
	json_object_set_new(o, g_field, json_real(1.0));
}

static void mut_big_port(json_t *o)
{
	json_object_set_new(o, "port", json_integer(65536));
}

static void mut_zero_port(json_t *o)
{
	json_object_set_new(o, "port", json_integer(0));
}

static void mut_bad_id(json_t *o)
{
	json_object_set_new(o, "id", json_string("node/../x"));
}

static void mut_long_addr(json_t *o)
{
	char buf[100];

	memset(buf, '1', sizeof(buf) - 1);
	buf[sizeof(buf) - 1] = 0;
	json_object_set_new(o, "addr", json_string(buf));
}

static void test_node_rejects(void **state)
{
	static const char *fields[] = {"id",	 "addr",     "port", "rdma_port",  "transports",
				       "domain", "capacity", "free", "start_time", "version"};
	static const char *ints[] = {"port", "rdma_port", "capacity", "free", "start_time"};
	static const char *strs[] = {"id", "addr", "transports", "domain", "version"};
	struct zl_node_info n;

	(void)state;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(fields); i++) {
		g_field = fields[i];
		assert_int_equal(node_mutated(mut_del), -ZL_ERR_INVAL);
	}
	for (size_t i = 0; i < ZL_ARRAY_SIZE(ints); i++) {
		g_field = ints[i];
		assert_int_equal(node_mutated(mut_str), -ZL_ERR_INVAL);
		assert_int_equal(node_mutated(mut_real), -ZL_ERR_INVAL);
	}
	for (size_t i = 0; i < ZL_ARRAY_SIZE(strs); i++) {
		g_field = strs[i];
		assert_int_equal(node_mutated(mut_int), -ZL_ERR_INVAL);
	}
	g_field = "capacity";
	assert_int_equal(node_mutated(mut_neg), -ZL_ERR_INVAL);
	g_field = "unknown_field";
	assert_int_equal(node_mutated(mut_int), 0); /* extra fields are allowed */
	assert_int_equal(node_mutated(mut_big_port), -ZL_ERR_INVAL);
	assert_int_equal(node_mutated(mut_zero_port), -ZL_ERR_INVAL);
	assert_int_equal(node_mutated(mut_bad_id), -ZL_ERR_INVAL);
	assert_int_equal(node_mutated(mut_long_addr), -ZL_ERR_INVAL);

	static const char *bad[] = {
	    "",
	    "{",
	    "[]",
	    "null",
	    "42",
	    "{\"id\":\"a\"}",
	    "{\"id\":\"a\",\"id\":\"b\",\"addr\":\"x\",\"port\":1,\"rdma_port\":0,"
	    "\"transports\":\"tcp\",\"domain\":\"\",\"capacity\":1,\"free\":1,"
	    "\"start_time\":1,\"version\":\"v\"}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++)
		assert_int_equal(zl_meta_node_from_json(bad[i], strlen(bad[i]), &n), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_node_from_json(NULL, 0, &n), -ZL_ERR_INVAL);

	/* Trailing garbage after a valid record. */
	struct zl_node_info good;
	make_node(&good);
	char *json = zl_meta_node_to_json(&good);
	size_t len = strlen(json);
	char *more = malloc(len + 3);
	memcpy(more, json, len);
	memcpy(more + len, "{}", 3);
	assert_int_equal(zl_meta_node_from_json(more, len + 2, &n), -ZL_ERR_INVAL);
	/* A length that cuts the record short. */
	assert_int_equal(zl_meta_node_from_json(json, len - 1, &n), -ZL_ERR_INVAL);
	free(more);
	free(json);
}

static void test_volume_round_trip(void **state)
{
	struct zl_volume a, b, c;
	char *json, *json2;

	(void)state;
	make_volume(&a, 16);
	json = zl_meta_volume_to_json(&a);
	assert_non_null(json);
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &b), 0);
	assert_volume_equal(&a, &b);
	assert_true(b.mod_rev == 0);
	/* Encoding the decoded record gives the same text. */
	json2 = zl_meta_volume_to_json(&b);
	assert_non_null(json2);
	assert_string_equal(json, json2);
	free(json2);

	assert_int_equal(zl_volume_copy(&b, &c), 0);
	assert_ptr_not_equal(b.slices, c.slices);
	assert_volume_equal(&b, &c);

	/* Replicas 1 with one slice. */
	zl_volume_fini(&a);
	make_volume(&a, 1);
	a.replicas = 1;
	a.slices[0].n = 1;
	a.slices[0].in_sync[0] = true;
	strcpy(a.params, "{}");
	free(json);
	json = zl_meta_volume_to_json(&a);
	assert_non_null(json);
	zl_volume_fini(&b);
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &b), 0);
	assert_volume_equal(&a, &b);

	free(json);
	zl_volume_fini(&a);
	zl_volume_fini(&b);
	zl_volume_free(NULL);
	struct zl_volume *h = calloc(1, sizeof(*h));
	assert_int_equal(zl_volume_copy(&c, h), 0);
	zl_volume_fini(&c);
	zl_volume_free(h);
}

static void test_slice_helpers(void **state)
{
	struct zl_slice s = {.version = 3, .n = 3};
	char key[64];

	(void)state;
	strcpy(s.nodes[0], "a");
	strcpy(s.nodes[1], "b");
	strcpy(s.nodes[2], "c");
	assert_int_equal(zl_slice_primary(&s), -1);
	s.in_sync[2] = true;
	assert_int_equal(zl_slice_primary(&s), 2);
	s.in_sync[1] = true;
	assert_int_equal(zl_slice_primary(&s), 1);
	assert_int_equal(zl_slice_index_of(&s, "c"), 2);
	assert_int_equal(zl_slice_index_of(&s, "d"), -1);

	assert_int_equal(zl_meta_key(key, sizeof(key), NULL, "nodes", "n1"), 0);
	assert_string_equal(key, "/zipline/nodes/n1");
	assert_int_equal(zl_meta_key(key, sizeof(key), "/p/", "volumes", NULL), 0);
	assert_string_equal(key, "/p/volumes/");
	assert_int_equal(zl_meta_key(key, 10, NULL, "nodes", "n1"), -ZL_ERR_INVAL);
}

/* Re-encodes a valid volume after fn(root) changed it. */
static int volume_mutated(void (*fn)(json_t *o))
{
	struct zl_volume v;
	json_t *o;
	char *json;
	int ret;

	make_volume(&v, 4);
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	zl_volume_fini(&v);
	o = json_loads(json, 0, NULL);
	assert_non_null(o);
	free(json);
	fn(o);
	json = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	assert_non_null(json);
	ret = zl_meta_volume_from_json(json, strlen(json), &v);
	if (ret == 0)
		zl_volume_fini(&v);
	else
		assert_null(v.slices);
	free(json);
	return ret;
}

static json_t *row(json_t *o, size_t i)
{
	return json_array_get(json_object_get(o, "placement"), i);
}

static void mut_nothing(json_t *o)
{
	(void)o;
}

static void mut_dup_node(json_t *o)
{
	json_t *nodes = json_object_get(row(o, 1), "nodes");

	json_array_set_new(nodes, 2, json_copy(json_array_get(nodes, 0)));
	json_object_set_new(row(o, 1), "in_sync", json_array());
}

static void mut_in_sync_stranger(json_t *o)
{
	json_array_append_new(json_object_get(row(o, 2), "in_sync"), json_string("n9"));
}

static void mut_in_sync_dup(json_t *o)
{
	json_t *in_sync = json_object_get(row(o, 0), "in_sync");

	json_array_clear(in_sync);
	json_array_append_new(in_sync, json_string("n1"));
	json_array_append_new(in_sync, json_string("n1"));
}

static void mut_in_sync_empty(json_t *o)
{
	json_t *states = json_object_get(row(o, 0), "states");

	/* Valid: a slice may have lost every in-sync replica. */
	json_array_clear(json_object_get(row(o, 0), "in_sync"));
	for (size_t i = 0; i < json_array_size(states); i++)
		json_array_set_new(states, i, json_string("out"));
}

static void mut_short_row(json_t *o)
{
	json_array_remove(json_object_get(row(o, 3), "nodes"), 2);
	json_object_set_new(row(o, 3), "in_sync", json_array());
}

static void mut_bad_node_id(json_t *o)
{
	json_array_set_new(json_object_get(row(o, 0), "nodes"), 0, json_string("bad id"));
}

static void mut_node_not_string(json_t *o)
{
	json_array_set_new(json_object_get(row(o, 0), "nodes"), 0, json_integer(3));
}

static void mut_row_not_object(json_t *o)
{
	json_array_set_new(json_object_get(o, "placement"), 1, json_string("x"));
}

static void mut_version_zero(json_t *o)
{
	json_object_set_new(row(o, 0), "v", json_integer(0));
}

static void mut_placement_short(json_t *o)
{
	json_array_remove(json_object_get(o, "placement"), 3);
}

static void mut_placement_long(json_t *o)
{
	json_t *p = json_object_get(o, "placement");

	json_array_append_new(p, json_deep_copy(json_array_get(p, 0)));
}

static int64_t g_int;

static void mut_set_int(json_t *o)
{
	json_object_set_new(o, g_field, json_integer(g_int));
}

static void mut_set_str(json_t *o)
{
	json_object_set_new(o, g_field, json_string((const char *)(uintptr_t)g_int));
}

static void mut_params_array(json_t *o)
{
	json_object_set_new(o, "params", json_array());
}

static void mut_params_huge(json_t *o)
{
	char buf[600];

	memset(buf, 'x', sizeof(buf) - 1);
	buf[sizeof(buf) - 1] = 0;
	json_object_set_new(json_object_get(o, "params"), "k", json_string(buf));
}

static void mut_params_nested(json_t *o)
{
	json_object_set_new(json_object_get(o, "params"), "nested",
			    json_pack("{s:[i,i], s:{s:b}}", "a", 1, 2, "b", "c", 1));
}

static int volume_field(const char *field, int64_t val)
{
	g_field = field;
	g_int = val;
	return volume_mutated(mut_set_int);
}

static int volume_str(const char *field, const char *val)
{
	g_field = field;
	g_int = (int64_t)(uintptr_t)val;
	return volume_mutated(mut_set_str);
}

static void test_volume_rejects(void **state)
{
	static const char *fields[] = {"id",	 "name",  "size",    "chunk_size", "replicas",
				       "slices", "state", "created", "params",	   "placement"};
	char long_name[300];

	(void)state;
	assert_int_equal(volume_mutated(mut_nothing), 0);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(fields); i++) {
		g_field = fields[i];
		assert_int_equal(volume_mutated(mut_del), -ZL_ERR_INVAL);
		/* Every field with the wrong type. */
		if (!strcmp(fields[i], "id") || !strcmp(fields[i], "name") ||
		    !strcmp(fields[i], "state") || !strcmp(fields[i], "params") ||
		    !strcmp(fields[i], "placement"))
			assert_int_equal(volume_mutated(mut_int), -ZL_ERR_INVAL);
		else
			assert_int_equal(volume_mutated(mut_str), -ZL_ERR_INVAL);
	}
	assert_int_equal(volume_mutated(mut_dup_node), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_in_sync_stranger), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_in_sync_dup), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_in_sync_empty), 0);
	assert_int_equal(volume_mutated(mut_short_row), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_bad_node_id), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_node_not_string), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_row_not_object), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_version_zero), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_placement_short), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_placement_long), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_params_array), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_params_huge), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_params_nested), 0);

	/* Chunk size: power of two within [64 KiB, 64 MiB]. */
	assert_int_equal(volume_field("chunk_size", 3 << 20), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("chunk_size", 32 << 10), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("chunk_size", 128 << 20), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("chunk_size", 0), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("chunk_size", 64 << 10), 0);
	assert_int_equal(volume_field("chunk_size", 64 << 20), 0);
	/* Replicas must match the rows (3 nodes each). */
	assert_int_equal(volume_field("replicas", 0), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("replicas", 4), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("replicas", 2), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("slices", 0), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("slices", 5), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("slices", -4), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("size", 0), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("size", -4096), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("size", 4097), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("size", 4096), 0);

	assert_int_equal(volume_str("id", "vol-123"), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("id", "vol-00000000000000000"), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("id", "vol-ABCDEF0123456789"), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("id", "vol-abcdef0123456789"), 0);
	assert_int_equal(volume_str("name", ""), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("name", "a/b"), -ZL_ERR_INVAL);
	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	assert_int_equal(volume_str("name", long_name), -ZL_ERR_INVAL);
	long_name[253] = 0;
	assert_int_equal(volume_str("name", long_name), 0);
	assert_int_equal(volume_str("state", ""), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("state", "much-too-long-state"), -ZL_ERR_INVAL);

	/* Not JSON, or not an object. */
	static const char *bad[] = {"", "{", "[]", "\"vol\"", "{}", "{\"placement\":[]}"};
	struct zl_volume v;

	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		assert_int_equal(zl_meta_volume_from_json(bad[i], strlen(bad[i]), &v),
				 -ZL_ERR_INVAL);
		assert_null(v.slices);
	}
}

static void test_volume_to_json_refuses_invalid(void **state)
{
	struct zl_volume v;

	(void)state;
	make_volume(&v, 4);
	strcpy(v.slices[2].nodes[1], v.slices[2].nodes[0]);
	assert_null(zl_meta_volume_to_json(&v));
	zl_volume_fini(&v);

	make_volume(&v, 4);
	strcpy(v.params, "not json");
	assert_null(zl_meta_volume_to_json(&v));
	zl_volume_fini(&v);

	make_volume(&v, 4);
	v.num++; /* id and number disagree */
	assert_null(zl_meta_volume_to_json(&v));
	zl_volume_fini(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_round_trip),
	    cmocka_unit_test(test_node_rejects),
	    cmocka_unit_test(test_volume_round_trip),
	    cmocka_unit_test(test_slice_helpers),
	    cmocka_unit_test(test_volume_rejects),
	    cmocka_unit_test(test_volume_to_json_refuses_invalid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
