/* lib/meta snapshots (snapshots/, snapnames/, snapreqs/, snapwriters/): the
 * codecs, and create, lookup, list and delete against a real etcd
 * (test/lib/with-etcd.sh), concurrent creators included. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/common/common.h"
#include "lib/meta/meta.h"
#include "lib/meta/meta_internal.h"
#include "meta_fixture.h"

static void make_snap(struct zl_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->id, "snap-0123456789abcdef");
	strcpy(s->name, "s1");
	strcpy(s->vol, "vol-00000000000000aa");
	s->seq = 3;
	s->size = GIB;
	s->created = 1700000000;
	strcpy(s->state, "ready");
}

static void test_codec(void **state)
{
	struct zl_snapshot s, q;
	char *json;

	(void)state;
	make_snap(&s);
	json = zl_meta_snap_to_json(&s);
	assert_non_null(json);
	assert_string_equal(json, "{\"id\":\"snap-0123456789abcdef\",\"name\":\"s1\","
				  "\"vol\":\"vol-00000000000000aa\",\"seq\":3,\"size\":1073741824,"
				  "\"created\":1700000000,\"state\":\"ready\",\"group\":\"\"}");
	assert_int_equal(zl_meta_snap_from_json(json, strlen(json), &q), 0);
	assert_memory_equal(&q, &s, sizeof(s));
	free(json);

	static const char *const bad[] = {
	    "{}",
	    /* seq 0 */
	    "{\"id\":\"snap-0123456789abcdef\",\"name\":\"s1\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":0,\"size\":4096,\"created\":1,\"state\":\"ready\",\"group\":\"\"}",
	    /* bad state */
	    "{\"id\":\"snap-0123456789abcdef\",\"name\":\"s1\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":1,\"size\":4096,\"created\":1,\"state\":\"gone\",\"group\":\"\"}",
	    /* bad id */
	    "{\"id\":\"snap-0123456789ABCDEF\",\"name\":\"s1\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":1,\"size\":4096,\"created\":1,\"state\":\"ready\",\"group\":\"\"}",
	    /* size not a multiple of 4096 */
	    "{\"id\":\"snap-0123456789abcdef\",\"name\":\"s1\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":1,\"size\":4095,\"created\":1,\"state\":\"ready\",\"group\":\"\"}",
	    /* seq above the wire's */
	    "{\"id\":\"snap-0123456789abcdef\",\"name\":\"s1\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":16777216,\"size\":4096,\"created\":1,\"state\":\"ready\",\"group\":\"\"}",
	    /* bad name */
	    "{\"id\":\"snap-0123456789abcdef\",\"name\":\"a/b\",\"vol\":\"vol-00000000000000aa\","
	    "\"seq\":1,\"size\":4096,\"created\":1,\"state\":\"ready\",\"group\":\"\"}",
	};
	for (size_t i = 0; i < ZL_ARRAY_SIZE(bad); i++)
		assert_int_equal(zl_meta_snap_from_json(bad[i], strlen(bad[i]), &q),
				 -ZL_ERR_INVAL);
	s.seq = 0;
	assert_null(zl_meta_snap_to_json(&s));

	char id[ZL_SNAP_ID_LEN + 1];
	zl_meta_snap_id_generate(id);
	assert_int_equal(zl_meta_snap_id_check(id), 0);
	assert_int_not_equal(zl_meta_snap_id_check("vol-0123456789abcdef"), 0);
	assert_int_not_equal(zl_meta_snap_id_check("snap-0123456789abcde"), 0);
}

static void test_snapreq_codec(void **state)
{
	struct zl_snapreq r = {0}, q;
	struct zl_etcd_kv kv = {0};
	char key[] = "/z/snapreqs/vol-00000000000000aa/snap-0123456789abcdef";
	char *json;

	(void)state;
	strcpy(r.vol, "vol-00000000000000aa");
	strcpy(r.id, "snap-0123456789abcdef");
	strcpy(r.name, "s1");
	strcpy(r.state, "pending");
	r.requested = 5;
	json = zl_meta_snapreq_to_json(&r);
	assert_non_null(json);
	assert_string_equal(
	    json, "{\"name\":\"s1\",\"state\":\"pending\",\"requested\":5,\"seq\":0,\"error\":\"\"}");
	kv.key = key;
	kv.value = json;
	kv.value_len = strlen(json);
	kv.mod_rev = 9;
	assert_int_equal(zl_meta_snapreq_from_kv(&kv, &q), 0);
	assert_string_equal(q.vol, r.vol);
	assert_string_equal(q.id, r.id);
	assert_int_equal(q.mod_rev, 9);
	free(json);

	strcpy(r.state, "done"); /* done needs its seq */
	assert_null(zl_meta_snapreq_to_json(&r));
	r.seq = 4;
	json = zl_meta_snapreq_to_json(&r);
	assert_non_null(json);
	free(json);
	strcpy(r.state, "failed"); /* failed needs its error, and no seq */
	assert_null(zl_meta_snapreq_to_json(&r));
	r.seq = 0;
	assert_null(zl_meta_snapreq_to_json(&r));
	strcpy(r.error, "ZL_ERR_EXISTS");
	json = zl_meta_snapreq_to_json(&r);
	assert_non_null(json);
	kv.value = json;
	kv.value_len = strlen(json);
	/* A group's states need the group; "group" is written only then. */
	r.error[0] = '\0';
	strcpy(r.state, "hold");
	assert_null(zl_meta_snapreq_to_json(&r));
	strcpy(r.group, "g1");
	free(json);
	json = zl_meta_snapreq_to_json(&r);
	assert_string_equal(json, "{\"name\":\"s1\",\"state\":\"hold\",\"requested\":5,"
				  "\"seq\":0,\"error\":\"\",\"group\":\"g1\"}");
	assert_int_equal(zl_meta_snapreq_from_json(json, strlen(json), &q), 0);
	assert_string_equal(q.group, "g1");
	free(json);
	strcpy(r.state, "switch"); /* switch needs its seq */
	assert_null(zl_meta_snapreq_to_json(&r));
	r.seq = 7;
	json = zl_meta_snapreq_to_json(&r);
	assert_non_null(json);
	kv.value = json;
	kv.value_len = strlen(json);
	char badkey[] = "snap-0123456789abcdef";
	kv.key = badkey;
	assert_int_equal(zl_meta_snapreq_from_kv(&kv, &q), -ZL_ERR_INVAL);
	free(json);
}

static void make_volume(struct fixture *f, const char *name, struct zl_volume *v)
{
	struct zl_volume_spec spec = {.name = name, .size = GIB, .replicas = 3};
	bool created = false;

	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, v, &created), 0);
	assert_true(created);
}

static void test_create_list_delete(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, w, got;
	struct zl_snapshot s1, s2, s3, x, *list = NULL;
	bool created = false;
	size_t n = 0;

	register_nodes(f, 3);
	make_volume(f, "va", &v);
	make_volume(f, "vb", &w);

	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "nope", "s1", NULL, &s1, &created,
					     NULL),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "va", "bad/name", NULL, &s1,
					     &created, NULL),
			 -ZL_ERR_INVAL);

	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "va", "s1", NULL, &s1, &created, &got), 0);
	assert_true(created);
	assert_int_equal(s1.seq, 1);
	assert_string_equal(s1.vol, v.id);
	assert_string_equal(s1.state, "ready");
	assert_true(s1.size == GIB);
	assert_int_equal(got.snap_seq, 1);
	assert_int_equal(got.n_snaps, 1);
	zl_volume_fini(&got);

	/* Same name, same volume: the same snapshot. Same name, other volume:
	 * EXISTS. */
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, v.id, "s1", NULL, &x, &created,
					     NULL),
			 0);
	assert_false(created);
	assert_string_equal(x.id, s1.id);
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "vb", "s1", NULL, &x, &created, NULL),
	    -ZL_ERR_EXISTS);
	/* A request's id makes the retry idempotent. */
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "va", "s2", "snap-00000000000000b2", &s2,
				&created, NULL),
	    0);
	assert_true(created);
	assert_int_equal(s2.seq, 2);
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "va", "s2", "snap-00000000000000b2", &x,
				&created, NULL),
	    0);
	assert_false(created);
	assert_int_equal(x.seq, 2);
	/* The id of s2 under another name: refused. */
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "va", "s9", "snap-00000000000000b2", &x,
				&created, NULL),
	    -ZL_ERR_EXISTS);
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "vb", "t1", NULL, &s3, &created, NULL), 0);
	assert_int_equal(s3.seq, 1);

	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &got), 0);
	assert_int_equal(got.snap_seq, 2);
	assert_int_equal(got.n_snaps, 2);
	assert_int_equal(got.snaps[0], 1);
	assert_int_equal(got.snaps[1], 2);
	zl_volume_fini(&got);

	assert_int_equal(zl_meta_snap_list(f->e, f->prefix, v.id, &list, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].name, "s1");
	assert_string_equal(list[1].name, "s2");
	free(list);
	assert_int_equal(zl_meta_snap_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 3);
	free(list);

	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "s2", &x), 0);
	assert_string_equal(x.id, "snap-00000000000000b2");
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, s1.id, &x), 0);
	assert_string_equal(x.name, "s1");
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "zz", &x), -ZL_ERR_NOT_FOUND);

	/* Delete: its sequence leaves snaps, the sequence stays. */
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s1", &x), 0);
	assert_string_equal(x.id, s1.id);
	assert_false(key_exists(f, "snapshots", s1.id));
	assert_false(key_exists(f, "snapnames", "s1"));
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &got), 0);
	assert_int_equal(got.snap_seq, 2);
	assert_int_equal(got.n_snaps, 1);
	assert_int_equal(got.snaps[0], 2);
	zl_volume_fini(&got);
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s1", NULL), -ZL_ERR_NOT_FOUND);
	/* The name is free again; the next snapshot gets sequence 3. */
	assert_int_equal(
	    zl_meta_snap_create(f->e, f->prefix, "va", "s1", NULL, &x, &created, NULL), 0);
	assert_int_equal(x.seq, 3);

	/* A snapshot whose volume is gone is just removed. */
	assert_int_equal(zl_meta_volume_delete(f->e, f->prefix, &w), 0);
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "t1", NULL), 0);
	assert_false(key_exists(f, "snapshots", s3.id));
	zl_volume_fini(&v);
	zl_volume_fini(&w);
}

struct racer {
	struct fixture *f;
	int idx;
	int rc;
	uint32_t seq;
};

static void *race_run(void *arg)
{
	struct racer *r = arg;
	struct zl_etcd *e = new_client();
	struct zl_snapshot s;
	char name[32];

	snprintf(name, sizeof(name), "r%d", r->idx);
	r->rc = e ? zl_meta_snap_create(e, r->f->prefix, "vr", name, NULL, &s, NULL, NULL) : -1;
	if (!r->rc)
		r->seq = s.seq;
	zl_etcd_destroy(e);
	return NULL;
}

/* Concurrent creators on one volume: every one gets its own sequence, and
 * the record lists them all. */
static void test_concurrent(void **state)
{
	struct fixture *f = *state;
	struct racer r[6];
	pthread_t t[6];
	struct zl_volume v;
	uint32_t seen = 0;

	register_nodes(f, 3);
	make_volume(f, "vr", &v);
	zl_volume_fini(&v);
	for (int i = 0; i < 6; i++) {
		r[i] = (struct racer){.f = f, .idx = i};
		assert_int_equal(pthread_create(&t[i], NULL, race_run, &r[i]), 0);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(r[i].rc, 0);
		assert_true(r[i].seq >= 1 && r[i].seq <= 6);
		assert_false(seen & (1u << r[i].seq));
		seen |= 1u << r[i].seq;
	}
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "vr", &v), 0);
	assert_int_equal(v.snap_seq, 6);
	assert_int_equal(v.n_snaps, 6);
	for (uint32_t i = 0; i < 6; i++)
		assert_int_equal(v.snaps[i], i + 1);
	zl_volume_fini(&v);
}

static void test_snapreq_store(void **state)
{
	struct fixture *f = *state;
	struct zl_snapreq r = {0}, got;
	char client[64];
	int64_t lease;

	strcpy(r.vol, "vol-00000000000000aa");
	strcpy(r.id, "snap-0123456789abcdef");
	strcpy(r.name, "s1");
	strcpy(r.state, "pending");
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &r), 0);
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, r.vol, r.id, &got), 0);
	assert_string_equal(got.state, "pending");
	assert_string_equal(got.name, "s1");
	/* An answer at the read revision; a second one at the same revision
	 * (or after the requester deleted it) is refused. */
	strcpy(got.state, "done");
	got.seq = 1;
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &got), 0);
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &got), -ZL_ERR_CONFLICT);
	assert_int_equal(zl_meta_snapreq_delete(f->e, f->prefix, r.vol, r.id), 0);
	got.mod_rev = 1;
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &got), -ZL_ERR_CONFLICT);
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, r.vol, r.id, &got),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, r.vol, r.id, &got),
			 -ZL_ERR_NOT_FOUND);

	assert_int_equal(zl_meta_snapwriter_get(f->e, f->prefix, r.vol, client, sizeof(client)),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_etcd_lease_grant(f->e, 30, &lease), 0);
	assert_int_equal(zl_meta_snapwriter_put(f->e, f->prefix, r.vol, "serve-1", lease), 0);
	assert_int_equal(zl_meta_snapwriter_get(f->e, f->prefix, r.vol, client, sizeof(client)),
			 0);
	assert_string_equal(client, "serve-1");
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);
	assert_int_equal(zl_meta_snapwriter_get(f->e, f->prefix, r.vol, client, sizeof(client)),
			 -ZL_ERR_NOT_FOUND);
}

/* The requester's transaction (no client serving) also requires that no
 * client serves the volume: a client whose snapwriters/ key appeared after
 * the requester looked could have read the record before the snapshot and
 * go on writing with the old sequence (meta_snap_take.c asks it instead). */
static void test_unserved(void **state)
{
	struct fixture *f = *state;
	struct zl_snapshot s;
	struct zl_volume v;
	bool created;
	int64_t lease;

	register_nodes(f, 3);
	make_volume(f, "vu", &v);
	assert_int_equal(zl_etcd_lease_grant(f->e, 30, &lease), 0);
	assert_int_equal(zl_meta_snapwriter_put(f->e, f->prefix, v.id, "late-client", lease), 0);
	assert_int_equal(meta_snap_create(f->e, f->prefix, v.id, "u1", NULL, &s, &created, NULL,
					  true),
			 -EAGAIN);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "u1", &s), -ZL_ERR_NOT_FOUND);
	/* The client itself (served) takes it. */
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, v.id, "u1", NULL, &s, &created, NULL),
			 0);
	assert_true(created);
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);
	assert_int_equal(meta_snap_create(f->e, f->prefix, v.id, "u2", NULL, &s, &created, NULL,
					  true),
			 0);
	assert_int_equal(s.seq, 2);
	zl_volume_fini(&v);
}

/* A held request of volume v for the group (what a serving client answers
 * in phase 1); m gets it. */
static void group_held(struct fixture *f, const struct zl_volume *v, const char *group,
		       struct zl_snapgroup_member *m)
{
	struct zl_snapreq q = {0};

	memset(m, 0, sizeof(*m));
	strcpy(m->vol, v->id);
	zl_meta_snap_id_generate(m->snap_id);
	strcpy(q.vol, v->id);
	strcpy(q.id, m->snap_id);
	snprintf(q.name, sizeof(q.name), "%s.%.64s", group, v->name);
	strcpy(q.state, "hold");
	strcpy(q.group, group);
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &q), 0);
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, v->id, m->snap_id, &q), 0);
	strcpy(q.state, "held");
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &q), 0);
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, v->id, m->snap_id, &m->req), 0);
	assert_string_equal(m->req.state, "held");
	assert_string_equal(m->req.group, group);
}

static void group_unserved(const struct zl_volume *v, struct zl_snapgroup_member *m)
{
	memset(m, 0, sizeof(*m));
	strcpy(m->vol, v->id);
	zl_meta_snap_id_generate(m->snap_id);
}

static uint32_t vol_seq(struct fixture *f, const struct zl_volume *v)
{
	struct zl_volume now;
	uint32_t seq;

	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v->id, &now), 0);
	seq = now.snap_seq;
	zl_volume_fini(&now);
	return seq;
}

/* A group snapshot (§5) is one transaction: every member's sequence, record
 * and name, the group record, and the served members' requests turned into
 * "switch" — or nothing at all: a client that gave up its hold (its request
 * changed), a client serving a member taken as unserved, or a name taken,
 * leave etcd as it was. Removal takes every member and the group. */
static void test_group(void **state)
{
	struct fixture *f = *state;
	struct zl_snapgroup_member m[3];
	struct zl_volume va, vb, vc, now;
	struct zl_snapshot *list;
	struct zl_snapreq q;
	size_t n, gone;
	int64_t lease;

	register_nodes(f, 3);
	make_volume(f, "ga", &va);
	make_volume(f, "gb", &vb);
	make_volume(f, "gc", &vc);
	/* The first snapshot of ga is single: the group bumps from 1. */
	struct zl_snapshot s1;
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "ga", "single", NULL, &s1, NULL,
					     NULL),
			 0);

	/* vc is served (its key is live) but given as unserved: -EAGAIN. */
	assert_int_equal(zl_etcd_lease_grant(f->e, 30, &lease), 0);
	assert_int_equal(zl_meta_snapwriter_put(f->e, f->prefix, vc.id, "late", lease), 0);
	group_unserved(&va, &m[0]);
	group_held(f, &vb, "g1", &m[1]);
	group_unserved(&vc, &m[2]);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g1", m, 3), -EAGAIN);
	assert_int_equal(zl_meta_snapgroup_exists(f->e, f->prefix, "g1"), -ZL_ERR_NOT_FOUND);
	assert_int_equal(vol_seq(f, &va), 1);
	assert_int_equal(vol_seq(f, &vb), 0);
	assert_int_equal(zl_meta_snapgroup_members(f->e, f->prefix, "g1", &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	assert_int_equal(zl_etcd_lease_revoke(f->e, lease), 0);

	/* vb's client gave up its hold (marked its request failed): -STALE. */
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, vb.id, m[1].snap_id, &q), 0);
	strcpy(q.state, "failed");
	strcpy(q.error, "ZL_ERR_TIMEOUT");
	assert_int_equal(zl_meta_snapreq_put(f->e, f->prefix, &q), 0);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g1", m, 3), -ZL_ERR_STALE);
	assert_int_equal(zl_meta_snapgroup_exists(f->e, f->prefix, "g1"), -ZL_ERR_NOT_FOUND);
	assert_int_equal(vol_seq(f, &vc), 0);

	/* Held again: the group is taken, each member at its own sequence. */
	group_held(f, &vb, "g1", &m[1]);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g1", m, 3), 0);
	assert_int_equal(zl_meta_snapgroup_exists(f->e, f->prefix, "g1"), 0);
	assert_int_equal(m[0].snap.seq, 2);
	assert_int_equal(m[1].snap.seq, 1);
	assert_int_equal(m[2].snap.seq, 1);
	assert_string_equal(m[0].snap.name, "g1.ga");
	assert_int_equal(vol_seq(f, &va), 2);
	assert_int_equal(vol_seq(f, &vb), 1);
	assert_int_equal(vol_seq(f, &vc), 1);
	/* The served member's request says switch, with its sequence. */
	assert_int_equal(zl_meta_snapreq_get(f->e, f->prefix, vb.id, m[1].snap_id, &q), 0);
	assert_string_equal(q.state, "switch");
	assert_int_equal(q.seq, 1);
	assert_int_equal(zl_meta_snapgroup_members(f->e, f->prefix, "g1", &list, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(list[i].group, "g1");
	free(list);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "g1.gc", &s1), 0);
	assert_string_equal(s1.vol, vc.id);

	/* The same group again: EXISTS, nothing bumped. */
	group_unserved(&va, &m[0]);
	group_unserved(&vb, &m[1]);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g1", m, 2), -ZL_ERR_EXISTS);
	assert_int_equal(vol_seq(f, &va), 2);
	/* A member named twice, or too many: INVAL. */
	strcpy(m[1].vol, va.id);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g2", m, 2), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "g2", m, 0), -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_snapgroup_create(f->e, f->prefix, "bad/name", m, 1),
			 -ZL_ERR_INVAL);

	/* Removal: every member, then the group; the sequences leave snaps. */
	assert_int_equal(zl_meta_snapgroup_delete(f->e, f->prefix, "g1", &gone), 0);
	assert_int_equal(gone, 3);
	assert_int_equal(zl_meta_snapgroup_exists(f->e, f->prefix, "g1"), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_snapgroup_delete(f->e, f->prefix, "g1", &gone),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_snap_list(f->e, f->prefix, NULL, &list, &n), 0);
	assert_int_equal(n, 1); /* "single" */
	free(list);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, va.id, &now), 0);
	assert_int_equal(now.n_snaps, 1);
	assert_int_equal(now.snaps[0], 1);
	zl_volume_fini(&now);
	zl_volume_fini(&va);
	zl_volume_fini(&vb);
	zl_volume_fini(&vc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_codec),
	    cmocka_unit_test(test_snapreq_codec),
	    cmocka_unit_test_setup_teardown(test_create_list_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snapreq_store, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unserved, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
