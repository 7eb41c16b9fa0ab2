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
#include "lib/meta/meta_internal.h" /* meta_volume_from_json: the reasons */

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
	assert_int_equal(a->metrics_port, b->metrics_port);
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

	/* TLS: written only when on, read back; records without it say off;
	 * anything but a JSON boolean is refused. */
	assert_false(b.tls);
	a.tls = true;
	json = zl_meta_node_to_json(&a);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"tls\":true"));
	assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), 0);
	assert_true(b.tls);
	assert_node_equal(&a, &b);
	{
		json_t *o = json_loads(json, 0, NULL);
		char *j2;

		assert_non_null(o);
		json_object_set_new(o, "tls", json_integer(1));
		j2 = json_dumps(o, JSON_COMPACT);
		assert_int_equal(zl_meta_node_from_json(j2, strlen(j2), &b), -ZL_ERR_INVAL);
		free(j2);
		json_decref(o);
	}
	free(json);
	a.tls = false;
	json = zl_meta_node_to_json(&a);
	assert_null(strstr(json, "tls"));
	assert_null(strstr(json, "metrics_port")); /* 0: not written */
	free(json);

	/* The metrics port: written when set, read back, bounded. */
	a.metrics_port = 9500;
	json = zl_meta_node_to_json(&a);
	assert_non_null(strstr(json, "\"metrics_port\":9500"));
	assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), 0);
	assert_int_equal(b.metrics_port, 9500);
	assert_node_equal(&a, &b);
	{
		json_t *o = json_loads(json, 0, NULL);
		char *j2;

		assert_non_null(o);
		json_object_set_new(o, "metrics_port", json_integer(65536));
		j2 = json_dumps(o, JSON_COMPACT);
		assert_int_equal(zl_meta_node_from_json(j2, strlen(j2), &b), -ZL_ERR_INVAL);
		free(j2);
		json_object_set_new(o, "metrics_port", json_string("9500"));
		j2 = json_dumps(o, JSON_COMPACT);
		assert_int_equal(zl_meta_node_from_json(j2, strlen(j2), &b), -ZL_ERR_INVAL);
		free(j2);
		json_decref(o);
	}
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

static const char g_inc[] = "00112233445566778899aabbccddeeff";

/* A node record exactly as 0.1 wrote it: no cluster_id, no incarnation. */
static void test_node_identity(void **state)
{
	static const char v01[] =
	    "{\"id\":\"storage-0\",\"addr\":\"10.0.0.7\",\"port\":7420,\"rdma_port\":0,"
	    "\"transports\":\"tcp\",\"domain\":\"\",\"capacity\":100,\"free\":50,"
	    "\"start_time\":1700000000,\"version\":\"0.1.0\"}";
	struct zl_node_info a, b;
	char *json;

	(void)state;
	assert_int_equal(zl_meta_node_from_json(v01, strlen(v01), &b), 0);
	assert_string_equal(b.id, "storage-0");
	assert_string_equal(b.cluster_id, "");
	assert_string_equal(b.incarnation, "");

	make_node(&a);
	strcpy(a.cluster_id, g_inc);
	zl_meta_id_generate(a.incarnation);
	json = zl_meta_node_to_json(&a);
	assert_non_null(json);
	assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	free(json);

	/* Neither empty nor 32 lowercase hex digits: refused both ways. */
	static const char *bad[] = {"abc", "00112233445566778899AABBCCDDEEFF",
				    "00112233445566778899aabbccddeef-", "1"};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		make_node(&a);
		strcpy(a.incarnation, bad[i]);
		assert_null(zl_meta_node_to_json(&a));
		json_t *o = json_loads(v01, 0, NULL);
		json_object_set_new(o, i % 2 ? "cluster_id" : "incarnation", json_string(bad[i]));
		json = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		assert_int_equal(zl_meta_node_from_json(json, strlen(json), &b), -ZL_ERR_INVAL);
		free(json);
	}
	g_field = "cluster_id";
	assert_int_equal(node_mutated(mut_int), -ZL_ERR_INVAL);
	g_field = "incarnation";
	assert_int_equal(node_mutated(mut_int), -ZL_ERR_INVAL);
}

/* A volume record exactly as 0.1 wrote it: rows of {v, nodes, in_sync}, no
 * term, states, incarnations or min_size. */
static const char g_v01_volume[] =
    "{\"id\":\"vol-00c0ffee12345678\",\"name\":\"pvc-old\",\"size\":1073741824,"
    "\"chunk_size\":4194304,\"replicas\":3,\"slices\":2,\"state\":\"ready\","
    "\"created\":1700000123,\"params\":{},\"placement\":["
    "{\"v\":4,\"nodes\":[\"n0\",\"n1\",\"n2\"],\"in_sync\":[\"n2\",\"n0\"]},"
    "{\"v\":1,\"nodes\":[\"n1\",\"n2\",\"n0\"],\"in_sync\":[\"n1\",\"n2\",\"n0\"]}]}";

static void test_volume_v01(void **state)
{
	struct zl_volume v, w;
	char *json;

	(void)state;
	assert_int_equal(zl_meta_volume_from_json(g_v01_volume, strlen(g_v01_volume), &v), 0);
	assert_int_equal(v.min_size, 2);
	assert_true(v.slices[0].version == 4);
	assert_int_equal(v.slices[0].term, 1);
	assert_int_equal(zl_slice_member_state(&v.slices[0], 0), ZL_MEMBER_IN_SYNC);
	assert_int_equal(zl_slice_member_state(&v.slices[0], 1), ZL_MEMBER_OUT);
	assert_int_equal(zl_slice_member_state(&v.slices[0], 2), ZL_MEMBER_IN_SYNC);
	assert_int_equal(zl_slice_primary(&v.slices[0]), 0);
	assert_int_equal(zl_slice_member_count(&v.slices[1], ZL_MEMBER_IN_SYNC), 3);
	for (int r = 0; r < 3; r++)
		assert_string_equal(v.slices[1].incarnation[r], "");
	/* Written again it has every new field, and keeps the 0.1 ones. */
	json = zl_meta_volume_to_json(&v);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"min_size\":2"));
	assert_non_null(strstr(json, "{\"v\":4,\"term\":1,\"nodes\":[\"n0\",\"n1\",\"n2\"],"
				     "\"in_sync\":[\"n0\",\"n2\"],"
				     "\"states\":[\"in_sync\",\"out\",\"in_sync\"],"
				     "\"incarnations\":[\"\",\"\",\"\"]}"));
	assert_int_equal(zl_meta_volume_from_json(json, strlen(json), &w), 0);
	assert_memory_equal(v.slices, w.slices, 2 * sizeof(*v.slices));
	free(json);
	zl_volume_fini(&w);
	zl_volume_fini(&v);

	/* The default min_size follows replicas: 1 for one replica. */
	const char *one = "{\"id\":\"vol-00c0ffee12345678\",\"name\":\"pvc-one\",\"size\":4096,"
			  "\"chunk_size\":65536,\"replicas\":1,\"slices\":1,\"state\":\"ready\","
			  "\"created\":1,\"params\":{},\"placement\":[{\"v\":1,\"nodes\":[\"n0\"],"
			  "\"in_sync\":[\"n0\"]}]}";
	assert_int_equal(zl_meta_volume_from_json(one, strlen(one), &v), 0);
	assert_int_equal(v.min_size, 1);
	zl_volume_fini(&v);
}

static void mut_drop_term(json_t *o)
{
	json_object_del(row(o, 1), "term");
}

static void mut_drop_states(json_t *o)
{
	json_object_del(row(o, 2), "states");
}

static void mut_drop_incs(json_t *o)
{
	json_object_del(row(o, 3), "incarnations");
}

static void mut_drop_all_new(json_t *o)
{
	/* A row of 0.1 in a record of today is fine. */
	json_object_del(row(o, 0), "term");
	json_object_del(row(o, 0), "states");
	json_object_del(row(o, 0), "incarnations");
	json_object_del(o, "min_size");
}

static void mut_term(json_t *o)
{
	json_object_set_new(row(o, 0), "term", json_integer(g_int));
}

static void mut_state_name(json_t *o)
{
	json_array_set_new(json_object_get(row(o, 0), "states"), 1,
			   json_string((const char *)(uintptr_t)g_int));
}

static void mut_states_short(json_t *o)
{
	json_array_remove(json_object_get(row(o, 0), "states"), 0);
}

static void mut_inc(json_t *o)
{
	json_array_set_new(json_object_get(row(o, 1), "incarnations"), 0,
			   json_string((const char *)(uintptr_t)g_int));
}

static void mut_inc_not_string(json_t *o)
{
	json_array_set_new(json_object_get(row(o, 1), "incarnations"), 0, json_integer(1));
}

/* make_volume: row 0 has members n0 (out), n1, n2 in sync. */
static int volume_state(const char *name)
{
	g_int = (int64_t)(uintptr_t)name;
	return volume_mutated(mut_state_name);
}

static void test_volume_rejects_new_fields(void **state)
{
	(void)state;
	assert_int_equal(volume_mutated(mut_drop_term), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_drop_states), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_drop_incs), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_drop_all_new), 0);
	assert_int_equal(volume_mutated(mut_states_short), -ZL_ERR_INVAL);
	assert_int_equal(volume_mutated(mut_inc_not_string), -ZL_ERR_INVAL);

	g_int = 0;
	assert_int_equal(volume_mutated(mut_term), -ZL_ERR_INVAL);
	g_int = -1;
	assert_int_equal(volume_mutated(mut_term), -ZL_ERR_INVAL);
	g_int = (int64_t)UINT32_MAX + 1;
	assert_int_equal(volume_mutated(mut_term), -ZL_ERR_INVAL);
	g_int = UINT32_MAX;
	assert_int_equal(volume_mutated(mut_term), 0);

	/* in_sync says n1 is in sync: states must agree. */
	assert_int_equal(volume_state("in_sync"), 0);
	assert_int_equal(volume_state("out"), -ZL_ERR_INVAL);
	assert_int_equal(volume_state("recovering"), -ZL_ERR_INVAL);
	assert_int_equal(volume_state("IN_SYNC"), -ZL_ERR_INVAL);
	assert_int_equal(volume_state(""), -ZL_ERR_INVAL);

	g_int = (int64_t)(uintptr_t)g_inc;
	assert_int_equal(volume_mutated(mut_inc), 0);
	g_int = (int64_t)(uintptr_t) "";
	assert_int_equal(volume_mutated(mut_inc), 0);
	g_int = (int64_t)(uintptr_t) "00112233445566778899aabbccddeeff0";
	assert_int_equal(volume_mutated(mut_inc), -ZL_ERR_INVAL);
	g_int = (int64_t)(uintptr_t) "00112233445566778899aabbccddeefg";
	assert_int_equal(volume_mutated(mut_inc), -ZL_ERR_INVAL);

	assert_int_equal(volume_field("min_size", 0), -ZL_ERR_INVAL);
	assert_int_equal(volume_field("min_size", 1), 0);
	assert_int_equal(volume_field("min_size", 3), 0);
	assert_int_equal(volume_field("min_size", 4), -ZL_ERR_INVAL);
	assert_int_equal(volume_str("min_size", "2"), -ZL_ERR_INVAL);
}

/* g_v01_volume with its first in_sync array replaced by `repl`. */
static void v01_with(char *out, size_t len, const char *repl)
{
	static const char first[] = "\"in_sync\":[\"n2\",\"n0\"]";
	const char *at = strstr(g_v01_volume, first);

	assert_non_null(at);
	snprintf(out, len, "%.*s%s%s", (int)(at - g_v01_volume), g_v01_volume, repl,
		 at + strlen(first));
}

/* Refusals of the decoder name the row and what is wrong in it (the lister
 * logs this reason next to the key). */
static void test_volume_reasons(void **state)
{
	static const struct {
		const char *row, *want;
	} cases[] = {
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2",
	     "placement row 0 has only some of term, states and incarnations"},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2,\"states\":[\"in_sync\",\"out\",\"in_sync\"],"
	     "\"incarnations\":[\"\",\"\",\"\"]",
	     ""},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2,\"states\":[\"in_sync\",\"gone\",\"in_sync\"],"
	     "\"incarnations\":[\"\",\"\",\"\"]",
	     "placement row 0: states[1] is not in_sync, recovering or out"},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2,\"states\":[\"in_sync\",\"recovering\","
	     "\"recovering\"],\"incarnations\":[\"\",\"\",\"\"]",
	     "placement row 0: states and in_sync disagree on n2"},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":0,\"states\":[\"in_sync\",\"out\",\"in_sync\"],"
	     "\"incarnations\":[\"\",\"\",\"\"]",
	     "placement row 0: term is not in [1, 2^32)"},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2,\"states\":[\"in_sync\",\"out\",\"in_sync\"],"
	     "\"incarnations\":[\"\",\"\"]",
	     "placement row 0: incarnations is not 3 strings"},
	    {"\"in_sync\":[\"n2\",\"n0\"],\"term\":2,\"states\":[\"in_sync\",\"out\",\"in_sync\"],"
	     "\"incarnations\":[\"\",\"x\",\"\"]",
	     "slice 0 member n1 has an incarnation that is neither empty nor 32"},
	    {"\"in_sync\":[\"n2\",\"n2\"]", "placement row 0: in_sync[1] is not a node of the row"},
	};
	char bad[sizeof(g_v01_volume) + 256];
	char why[256];
	struct zl_volume v;

	(void)state;
	for (size_t i = 0; i < ZL_ARRAY_SIZE(cases); i++) {
		int ret;

		v01_with(bad, sizeof(bad), cases[i].row);
		memset(why, 'x', sizeof(why));
		ret = meta_volume_from_json(bad, strlen(bad), &v, why, sizeof(why));
		if (!cases[i].want[0]) {
			assert_int_equal(ret, 0);
			assert_int_equal(v.slices[0].term, 2);
			zl_volume_fini(&v);
			continue;
		}
		assert_int_equal(ret, -ZL_ERR_INVAL);
		if (!strstr(why, cases[i].want))
			fail_msg("case %zu: reason \"%s\" does not mention \"%s\"", i, why,
				 cases[i].want);
		assert_null(v.slices);
	}
	v01_with(bad, sizeof(bad), "\"in_sync\":[\"n2\",\"n0\"]");
	{
		char *at = strstr(bad, "\"replicas\":3");
		char tail[sizeof(bad)];

		strcpy(tail, at + strlen("\"replicas\":3"));
		snprintf(at, sizeof(bad) - (size_t)(at - bad), "\"replicas\":3,\"min_size\":5%s",
			 tail);
	}
	assert_int_equal(meta_volume_from_json(bad, strlen(bad), &v, why, sizeof(why)),
			 -ZL_ERR_INVAL);
	assert_non_null(strstr(why, "min_size=5 is not in [1, replicas=3]"));
}

static void test_cluster_json(void **state)
{
	struct zl_cluster_info c = {.created = 1700000000}, d;
	char *json;

	(void)state;
	strcpy(c.id, g_inc);
	json = zl_meta_cluster_to_json(&c);
	assert_non_null(json);
	assert_string_equal(json, "{\"cluster_id\":\"00112233445566778899aabbccddeeff\","
				  "\"created\":1700000000}");
	assert_int_equal(zl_meta_cluster_from_json(json, strlen(json), &d), 0);
	assert_memory_equal(&c, &d, sizeof(c));
	free(json);

	static const char *bad[] = {
	    "",
	    "[]",
	    "{}",
	    "{\"cluster_id\":\"00112233445566778899aabbccddeeff\"}",
	    "{\"created\":1}",
	    "{\"cluster_id\":\"00112233445566778899aabbccddeef\",\"created\":1}",
	    "{\"cluster_id\":\"00112233445566778899AABBCCDDEEFF\",\"created\":1}",
	    "{\"cluster_id\":7,\"created\":1}",
	    "{\"cluster_id\":\"00112233445566778899aabbccddeeff\",\"created\":-1}",
	    "{\"cluster_id\":\"00112233445566778899aabbccddeeff\",\"created\":\"1\"}",
	    "{\"cluster_id\":\"00112233445566778899aabbccddeeff\",\"created\":1,\"created\":2}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		assert_int_equal(zl_meta_cluster_from_json(bad[i], strlen(bad[i]), &d),
				 -ZL_ERR_INVAL);
		assert_string_equal(d.id, "");
	}
	strcpy(c.id, "not-hex");
	assert_null(zl_meta_cluster_to_json(&c));
}

static void make_report(struct zl_report *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->vol_id, "vol-00c0ffee12345678");
	r->slice = 3;
	strcpy(r->reporter, "client-a");
	strcpy(r->peer, "storage-1");
	strcpy(r->error, "ZL_ERR_TIMEOUT");
	r->slice_ver = 9;
	r->time = 1700000000;
}

static void test_report_json(void **state)
{
	struct zl_report r, d;
	char *json;
	char why[160];

	(void)state;
	make_report(&r);
	json = zl_meta_report_to_json(&r);
	assert_non_null(json);
	assert_string_equal(json, "{\"peer\":\"storage-1\",\"error\":\"ZL_ERR_TIMEOUT\","
				  "\"slice_ver\":9,\"time\":1700000000}");
	/* The value carries peer, error, slice_ver and time; the key the rest. */
	assert_int_equal(zl_meta_report_from_json(json, strlen(json), &d), 0);
	assert_string_equal(d.peer, "storage-1");
	assert_string_equal(d.error, "ZL_ERR_TIMEOUT");
	assert_true(d.slice_ver == 9 && d.time == 1700000000);
	assert_string_equal(d.vol_id, "");
	free(json);

	static const char *bad[] = {
	    "",
	    "{}",
	    "{\"peer\":\"p\",\"error\":\"E\",\"slice_ver\":1}",
	    "{\"peer\":\"p\",\"error\":\"E\",\"time\":1}",
	    "{\"peer\":\"p/q\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}",
	    "{\"peer\":\"\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}",
	    "{\"peer\":\"p\",\"error\":\"\",\"slice_ver\":1,\"time\":1}",
	    "{\"peer\":\"p\",\"error\":\"a b\",\"slice_ver\":1,\"time\":1}",
	    "{\"peer\":\"p\",\"error\":\"E\",\"slice_ver\":0,\"time\":1}",
	    "{\"peer\":\"p\",\"error\":\"E\",\"slice_ver\":1,\"time\":-1}",
	    "{\"peer\":\"p\",\"error\":\"E\",\"slice_ver\":1.5,\"time\":1}",
	    ("{\"peer\":\"p\",\"error\":\"EEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE\",\"slice_ver\":1,"
	     "\"time\":1}"),
	    "{\"peer\":\"p\",\"peer\":\"q\",\"error\":\"E\",\"slice_ver\":1,\"time\":1}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++)
		assert_int_equal(zl_meta_report_from_json(bad[i], strlen(bad[i]), &d),
				 -ZL_ERR_INVAL);
	const char *ok = "{\"peer\":\"p\",\"error\":\"E\",\"slice_ver\":1,\"time\":0}";
	assert_int_equal(zl_meta_report_from_json(ok, strlen(ok), &d), 0);

	/* The full check names what is wrong, and the encoder agrees with it. */
	make_report(&r);
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), 0);
	strcpy(r.vol_id, "vol-1");
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), -ZL_ERR_INVAL);
	assert_non_null(strstr(why, "vol_id"));
	assert_null(zl_meta_report_to_json(&r));
	make_report(&r);
	r.slice = 65536;
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), -ZL_ERR_INVAL);
	assert_non_null(strstr(why, "slice=65536"));
	make_report(&r);
	strcpy(r.reporter, "a b");
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), -ZL_ERR_INVAL);
	assert_non_null(strstr(why, "reporter"));
	make_report(&r);
	strcpy(r.error, "ZL-ERR");
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), -ZL_ERR_INVAL);
	assert_non_null(strstr(why, "error"));
	make_report(&r);
	strcpy(r.peer, r.reporter); /* a member may report itself (lagging) */
	assert_int_equal(zl_meta_report_check(&r, why, sizeof(why)), 0);
	assert_int_equal(zl_meta_report_check(NULL, why, sizeof(why)), -ZL_ERR_INVAL);
}

/* status/<node>: progress counters and the slices peering (older records
 * without the peering fields read as none). */
/* 128 characters: one more than a status record's disk_error holds. */
#define LONG128                                                                                    \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"                         \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_status_json(void **state)
{
	static struct zl_node_status s, d;
	static const char *bad[] = {
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"peering\":[{\"vol\":"
	    "\"vol-0000000000000001\",\"slice\":0,\"term\":1}]}", /* peering_slices 0 < 1 */
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"peering_slices\":1,\"peering\":[{"
	    "\"vol\":\"vol-0000000000000001\",\"slice\":0,\"term\":0}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"peering_slices\":1,\"peering\":[{"
	    "\"vol\":\"vol-1\",\"slice\":0,\"term\":1}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"peering_slices\":1,\"peering\":{}}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"peering_slices\":2,\"peering\":["
	    "{\"vol\":\"vol-0000000000000001\",\"slice\":3,\"term\":1},"
	    "{\"vol\":\"vol-0000000000000001\",\"slice\":3,\"term\":1}]}", /* duplicate */
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"journal_size\":4096,"
	    "\"journal_used\":8192}", /* more used than the journal holds */
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"durable_ios\":-1}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"disk_error\":5}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"disk_error\":\"" LONG128 "\"}",
	    /* Snapshot space: more entries than snapshot_entries, seq 0,
	     * duplicates, a sum above snapshot_bytes, not an array, a bad
	     * volume id, a negative total. */
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,\"snapshots\":["
	    "{\"vol\":\"vol-0000000000000001\",\"seq\":1,\"clones\":1,\"bytes\":9}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,"
	    "\"snapshot_entries\":1,\"snapshots\":["
	    "{\"vol\":\"vol-0000000000000001\",\"seq\":0,\"clones\":1,\"bytes\":9}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,"
	    "\"snapshot_entries\":2,\"snapshots\":["
	    "{\"vol\":\"vol-0000000000000001\",\"seq\":2,\"clones\":1,\"bytes\":1},"
	    "{\"vol\":\"vol-0000000000000001\",\"seq\":2,\"clones\":1,\"bytes\":1}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,"
	    "\"snapshot_entries\":1,\"snapshots\":["
	    "{\"vol\":\"vol-0000000000000001\",\"seq\":1,\"clones\":1,\"bytes\":10}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,"
	    "\"snapshot_entries\":1,\"snapshots\":{}}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":9,"
	    "\"snapshot_entries\":1,\"snapshots\":["
	    "{\"vol\":\"vol-1\",\"seq\":1,\"clones\":1,\"bytes\":9}]}",
	    "{\"node\":\"n\",\"recovering_bytes_done\":0,\"recovering_bytes_left\":0,"
	    "\"rate\":0,\"recovering\":0,\"time\":1,\"snapshot_bytes\":-1}",
	};
	const char *old = "{\"node\":\"n\",\"recovering_bytes_done\":5,"
			  "\"recovering_bytes_left\":6,\"rate\":7,\"recovering\":1,\"time\":9}";
	char *json;

	(void)state;
	memset(&s, 0, sizeof(s));
	strcpy(s.node, "storage-1");
	s.rate = 7;
	s.time = 1700000000;
	s.peering_slices = 3;
	s.n_peering = 2;
	s.peering[0] = (struct zl_status_peering){.vol = 0xc0ffee, .slice = 4, .term = 2};
	s.peering[1] = (struct zl_status_peering){.vol = 0xc0ffee, .slice = 9, .term = 1};
	s.chunk_writes = 100;
	s.durable_ios = 30;
	s.journal_size = 1 << 27;
	s.journal_used = 1 << 20;
	s.journal_dirty_chunks = 4;
	s.journal_checkpoints = 2;
	s.journal_waits = 1;
	json = zl_meta_status_to_json(&s);
	assert_non_null(json);
	assert_string_equal(json, "{\"node\":\"storage-1\",\"recovering_bytes_done\":0,"
				  "\"recovering_bytes_left\":0,\"rate\":7,\"recovering\":0,"
				  "\"time\":1700000000,\"peering_slices\":3,\"peering\":["
				  "{\"vol\":\"vol-0000000000c0ffee\",\"slice\":4,\"term\":2},"
				  "{\"vol\":\"vol-0000000000c0ffee\",\"slice\":9,\"term\":1}],"
				  "\"chunk_writes\":100,\"durable_ios\":30,"
				  "\"journal_size\":134217728,\"journal_used\":1048576,"
				  "\"journal_dirty_chunks\":4,\"journal_checkpoints\":2,"
				  "\"journal_waits\":1}");
	assert_int_equal(zl_meta_status_from_json(json, strlen(json), &d), 0);
	assert_memory_equal(&s, &d, sizeof(s));
	free(json);
	assert_int_equal(zl_meta_status_from_json(old, strlen(old), &d), 0);
	assert_true(d.bytes_done == 5 && d.recovering == 1 && d.time == 9);
	assert_true(d.peering_slices == 0 && d.n_peering == 0);
	assert_true(d.journal_size == 0 && d.durable_ios == 0 && d.chunk_writes == 0);
	assert_false(d.disk_full);
	assert_false(d.disk_near_full);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		if (zl_meta_status_from_json(bad[i], strlen(bad[i]), &d) != -ZL_ERR_INVAL)
			fail_msg("status \"%s\" was accepted", bad[i]);
		assert_int_equal(d.n_peering, 0);
	}
	assert_string_equal(d.disk_error, "");
	/* A failed disk: the reason is written and read back; a record
	 * without it says the disk is fine. */
	strcpy(s.disk_error, "data directory /d was removed");
	json = zl_meta_status_to_json(&s);
	assert_non_null(json);
	assert_non_null(strstr(json, ",\"journal_waits\":1,\"disk_error\":\"data directory /d was "
				     "removed\"}"));
	assert_int_equal(zl_meta_status_from_json(json, strlen(json), &d), 0);
	assert_memory_equal(&s, &d, sizeof(s));
	free(json);
	memset(s.disk_error, 0, sizeof(s.disk_error));
	/* A full disk: written as true, read back (an older record without it
	 * reads false, above). */
	s.disk_full = true;
	json = zl_meta_status_to_json(&s);
	assert_non_null(json);
	assert_non_null(strstr(json, ",\"disk_full\":true"));
	assert_null(strstr(json, "disk_near_full"));
	assert_int_equal(zl_meta_status_from_json(json, strlen(json), &d), 0);
	assert_true(d.disk_full);
	assert_memory_equal(&s, &d, sizeof(s));
	free(json);
	s.disk_full = false;
	/* Near full: the same. */
	s.disk_near_full = true;
	json = zl_meta_status_to_json(&s);
	assert_non_null(json);
	assert_non_null(strstr(json, ",\"disk_near_full\":true"));
	assert_int_equal(zl_meta_status_from_json(json, strlen(json), &d), 0);
	assert_true(d.disk_near_full && !d.disk_full);
	assert_memory_equal(&s, &d, sizeof(s));
	free(json);
	s.disk_near_full = false;
	/* Snapshot space (docs/SNAPSHOTS.md §6): written once there is some,
	 * read back; 3 entries, 2 listed. */
	s.snap_bytes = 1 << 20;
	s.snap_entries = 3;
	s.n_snap = 2;
	s.snap[0] = (struct zl_status_snap){.vol = 0xc0ffee, .seq = 1, .clones = 2, .bytes = 8192};
	s.snap[1] = (struct zl_status_snap){.vol = 0xc0ffef, .seq = 4, .clones = 1, .bytes = 4096};
	json = zl_meta_status_to_json(&s);
	assert_non_null(json);
	assert_non_null(strstr(json, "\"snapshots\":[{\"vol\":\"vol-0000000000c0ffee\",\"seq\":1,"
				     "\"clones\":2,\"bytes\":8192},{\"vol\":"
				     "\"vol-0000000000c0ffef\",\"seq\":4,\"clones\":1,"
				     "\"bytes\":4096}],\"snapshot_bytes\":1048576,"
				     "\"snapshot_entries\":3}"));
	assert_int_equal(zl_meta_status_from_json(json, strlen(json), &d), 0);
	assert_memory_equal(&s, &d, sizeof(s));
	free(json);
	/* Entries past the total are not written. */
	s.snap_bytes = 10000;
	assert_null(zl_meta_status_to_json(&s));
	s.snap_bytes = 1 << 20;
	/* Unsorted entries are not written either. */
	s.peering[1].slice = 4;
	assert_null(zl_meta_status_to_json(&s));
}

static void test_report_key(void **state)
{
	static const char *bad[] = {
	    "",
	    "reports",
	    "/z/reports/vol-00c0ffee12345678/3/client-a",
	    "/z/reports/vol-00c0ffee12345678/3/client-a/",
	    "/z/reports/vol-00c0ffee12345678/03/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/+3/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/-3/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/3x/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/ 3/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/\v2/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/65536/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/99999999999/client-a/storage-1",
	    "/z/reports/vol-00c0ffee1234567/3/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/3/client a/storage-1",
	    "/z/reports/vol-00c0ffee12345678//client-a/storage-1",
	    "/z/report/vol-00c0ffee12345678/3/client-a/storage-1",
	    "/z/reports/x/vol-00c0ffee12345678/3/client-a/storage-1",
	    "/z/reports/vol-00c0ffee12345678/3/client-a/storage-1/x",
	};
	struct zl_report r, want;
	struct zl_etcd_kv kv = {0};
	char key[128], *json;

	(void)state;
	make_report(&want);
	assert_int_equal(zl_meta_report_parse_key("/z/reports/vol-00c0ffee12345678/3/client-a/"
						  "storage-1",
						  &r),
			 0);
	assert_string_equal(r.vol_id, want.vol_id);
	assert_int_equal(r.slice, 3);
	assert_string_equal(r.reporter, "client-a");
	assert_string_equal(r.peer, "storage-1");
	assert_true(r.slice_ver == 0);
	/* An empty prefix works too. */
	assert_int_equal(zl_meta_report_parse_key("reports/vol-00c0ffee12345678/0/a/b", &r), 0);
	assert_int_equal(r.slice, 0);
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++) {
		if (zl_meta_report_parse_key(bad[i], &r) != -ZL_ERR_INVAL)
			fail_msg("key \"%s\" was accepted", bad[i]);
		assert_string_equal(r.vol_id, "");
	}
	assert_int_equal(zl_meta_report_parse_key(NULL, &r), -ZL_ERR_INVAL);

	/* A whole stored report, as a watch event hands it over. */
	json = zl_meta_report_to_json(&want);
	assert_non_null(json);
	snprintf(key, sizeof(key), "/z/reports/%s/3/client-a/storage-1", want.vol_id);
	kv.key = key;
	kv.value = json;
	kv.value_len = strlen(json);
	kv.lease = 42;
	kv.mod_rev = 7;
	assert_int_equal(zl_meta_report_from_kv(&kv, &r), 0);
	want.lease = 42;
	want.mod_rev = 7;
	assert_memory_equal(&r, &want, sizeof(r));
	/* The key names another peer than the value. */
	snprintf(key, sizeof(key), "/z/reports/%s/3/client-a/storage-2", want.vol_id);
	assert_int_equal(zl_meta_report_from_kv(&kv, &r), -ZL_ERR_INVAL);
	assert_string_equal(r.peer, "");
	free(json);
	kv.value = "{}";
	kv.value_len = 2;
	assert_int_equal(zl_meta_report_from_kv(&kv, &r), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_report_from_kv(NULL, &r), -ZL_ERR_INVAL);
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
	    cmocka_unit_test(test_node_identity),
	    cmocka_unit_test(test_volume_v01),
	    cmocka_unit_test(test_volume_rejects_new_fields),
	    cmocka_unit_test(test_volume_reasons),
	    cmocka_unit_test(test_cluster_json),
	    cmocka_unit_test(test_report_json),
	    cmocka_unit_test(test_status_json),
	    cmocka_unit_test(test_report_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
