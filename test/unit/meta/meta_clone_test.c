/* lib/meta clones (meta_clone.c; docs/SNAPSHOTS.md §4) against a real etcd
 * (test/lib/with-etcd.sh): a clone of a snapshot and of a volume, their
 * dependant keys, the refusals of deleting a source with dependants, the
 * detach of flatten, and the internal snapshot that goes with the clone. */
#include <errno.h>
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

static void make_volume(struct fixture *f, const char *name, struct zl_volume *v)
{
	struct zl_volume_spec spec = {.name = name, .size = GIB, .replicas = 3};
	bool created = false;

	assert_int_equal(zl_meta_volume_create(f->e, f->prefix, &spec, v, &created), 0);
	assert_true(created);
}

static bool dep_exists(struct fixture *f, const char *vol, uint32_t seq, const char *clone)
{
	char id[128];

	snprintf(id, sizeof(id), "%s/%u/%s", vol, seq, clone);
	return key_exists(f, "dependants", id);
}

/* Removes volume name the way zl volume rm does at the end (the record as
 * read now). */
static int remove_volume(struct fixture *f, const char *name, bool force)
{
	struct zl_volume v;
	int rc;

	rc = zl_meta_volume_lookup(f->e, f->prefix, name, &v);
	if (rc)
		return rc;
	rc = zl_meta_volume_remove(f->e, f->prefix, &v, force);
	zl_volume_fini(&v);
	return rc;
}

static void test_from_snapshot(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, other, c1, c2, x;
	struct zl_volume_spec spec = {.name = "c1"};
	struct zl_clone_dep *deps;
	struct zl_snapshot s1;
	char msg[1024];
	bool created = false;
	size_t n;

	register_nodes(f, 3);
	make_volume(f, "va", &v);
	make_volume(f, "other", &other);
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "va", "s1", NULL, &s1, NULL, NULL),
			 0);

	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "nope", 1000, &c1,
					      &created),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &c1,
					      &created),
			 0);
	assert_true(created);
	assert_string_equal(c1.parent_vol, v.id);
	assert_int_equal(c1.parent_seq, s1.seq);
	assert_true(c1.size == GIB);
	assert_int_equal(c1.chunk_size, v.chunk_size);
	assert_int_equal(c1.replicas, 3);
	assert_string_not_equal(c1.id, v.id);
	assert_true(dep_exists(f, v.id, s1.seq, c1.id));
	/* A clone of a snapshot takes no snapshot of its own. */
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &x), 0);
	assert_int_equal(x.n_snaps, 1);
	zl_volume_fini(&x);

	/* Asked again: the same clone. */
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, s1.id, 1000, &x,
					      &created),
			 0);
	assert_false(created);
	assert_string_equal(x.id, c1.id);
	zl_volume_fini(&x);
	/* The name of a volume that is no clone of it; a smaller size; another
	 * chunk size. */
	spec.name = "other";
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &x,
					      &created),
			 -ZL_ERR_EXISTS);
	spec = (struct zl_volume_spec){.name = "small", .size = GIB / 2};
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &x,
					      &created),
			 -ZL_ERR_RANGE);
	spec = (struct zl_volume_spec){.name = "odd", .chunk_size = 1u << 20};
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &x,
					      &created),
			 -ZL_ERR_INVAL);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "small", &x), -ZL_ERR_NOT_FOUND);
	/* A larger one. */
	spec = (struct zl_volume_spec){.name = "c2", .size = 2 * GIB};
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &c2,
					      &created),
			 0);
	assert_true(created);
	assert_true(c2.size == 2 * GIB);

	assert_int_equal(zl_meta_clone_dependants(f->e, f->prefix, v.id, 0, &deps, &n), 0);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(deps[i].vol, v.id);
		assert_int_equal(deps[i].seq, s1.seq);
		assert_true(!strcmp(deps[i].name, "c1") || !strcmp(deps[i].name, "c2"));
	}
	free(deps);
	assert_int_equal(zl_meta_clone_dependants(f->e, f->prefix, v.id, s1.seq + 1, &deps, &n),
			 0);
	assert_int_equal(n, 0);
	assert_null(deps);

	/* The source cannot go: not the snapshot, not the volume, even with
	 * force. */
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s1", NULL), -ZL_ERR_BUSY);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "s1", &s1), 0);
	assert_int_equal(remove_volume(f, "va", true), -ZL_ERR_BUSY);
	assert_int_equal(remove_volume(f, "va", false), -ZL_ERR_BUSY);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "va", &x), 0);
	zl_volume_fini(&x);
	assert_int_equal(zl_meta_clone_refusal(f->e, f->prefix, v.id, s1.seq, "snapshot s1", msg,
					       sizeof(msg)),
			 -ZL_ERR_BUSY);
	assert_non_null(strstr(msg, "snapshot s1 has dependants: "));
	assert_non_null(strstr(msg, "c1"));
	assert_non_null(strstr(msg, "c2"));
	assert_non_null(strstr(msg, "flatten them first (zl volume flatten NAME)"));
	assert_int_equal(zl_meta_clone_refusal(f->e, f->prefix, other.id, 0, "volume other", msg,
					       sizeof(msg)),
			 0);
	assert_string_equal(msg, "");

	/* Flatten's detach of c1: no parent, no dependant key; c2 still holds
	 * the snapshot. */
	assert_int_equal(zl_meta_clone_detach(f->e, f->prefix, "c1", &x), 0);
	assert_string_equal(x.parent_vol, "");
	assert_int_equal(x.parent_seq, 0);
	zl_volume_fini(&x);
	assert_int_equal(zl_meta_volume_lookup(f->e, f->prefix, "c1", &x), 0);
	assert_string_equal(x.parent_vol, "");
	zl_volume_fini(&x);
	assert_false(dep_exists(f, v.id, s1.seq, c1.id));
	assert_int_equal(zl_meta_clone_detach(f->e, f->prefix, "c1", NULL), 0);
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s1", NULL), -ZL_ERR_BUSY);
	/* Removing the clone c2 drops its key: now the snapshot, then the
	 * volume, go. */
	assert_int_equal(remove_volume(f, "c2", false), 0);
	assert_false(dep_exists(f, v.id, s1.seq, c2.id));
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s1", NULL), 0);
	assert_int_equal(remove_volume(f, "va", false), 0);
	assert_int_equal(remove_volume(f, "c1", false), 0);
	/* The snapshot is gone: no clone of it. */
	spec = (struct zl_volume_spec){.name = "c3"};
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s1", 1000, &x,
					      &created),
			 -ZL_ERR_NOT_FOUND);
	zl_volume_fini(&c1);
	zl_volume_fini(&c2);
	zl_volume_fini(&other);
	zl_volume_fini(&v);
}

static void test_from_volume(void **state)
{
	struct fixture *f = *state;
	struct zl_volume v, c, cc, x;
	struct zl_volume_spec spec = {.name = "cv"};
	struct zl_clone_dep *deps;
	struct zl_snapshot s;
	char sname[64];
	bool created = false;
	size_t n;

	register_nodes(f, 3);
	make_volume(f, "vb", &v);
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, "vb", NULL, 1000, &c,
					      &created),
			 0);
	assert_true(created);
	assert_string_equal(c.parent_vol, v.id);
	assert_int_equal(c.parent_seq, 1);
	assert_true(dep_exists(f, v.id, 1, c.id));
	/* The internal snapshot, named after the clone. */
	snprintf(sname, sizeof(sname), "clone-%s", c.id);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, sname, &s), 0);
	assert_string_equal(s.vol, v.id);
	assert_int_equal(s.seq, 1);
	/* Asked again: the same clone, no second snapshot. */
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, v.id, NULL, 1000, &x,
					      &created),
			 0);
	assert_false(created);
	assert_string_equal(x.id, c.id);
	zl_volume_fini(&x);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &x), 0);
	assert_int_equal(x.snap_seq, 1);
	assert_int_equal(x.n_snaps, 1);
	zl_volume_fini(&x);

	/* A clone of the clone: the clone's own internal snapshot. */
	spec.name = "cc";
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, "cv", NULL, 1000, &cc,
					      &created),
			 0);
	assert_string_equal(cc.parent_vol, c.id);
	assert_int_equal(cc.parent_seq, 1);
	/* A clone of another snapshot of cv's source: listed under its own
	 * sequence only. */
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "vb", "s2", NULL, &s, NULL, NULL),
			 0);
	assert_int_equal(s.seq, 2);
	spec.name = "c2";
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, NULL, "s2", 1000, &x,
					      &created),
			 0);
	zl_volume_fini(&x);
	assert_int_equal(zl_meta_clone_dependants(f->e, f->prefix, v.id, 1, &deps, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(deps[0].name, "cv");
	free(deps);
	assert_int_equal(zl_meta_clone_dependants(f->e, f->prefix, v.id, 2, &deps, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(deps[0].name, "c2");
	assert_int_equal(deps[0].seq, 2);
	free(deps);
	assert_int_equal(zl_meta_clone_dependants(f->e, f->prefix, v.id, 0, &deps, &n), 0);
	assert_int_equal(n, 2);
	free(deps);
	assert_int_equal(remove_volume(f, "c2", false), 0);
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, "s2", NULL), 0);

	assert_int_equal(remove_volume(f, "cv", true), -ZL_ERR_BUSY);
	assert_int_equal(remove_volume(f, "vb", true), -ZL_ERR_BUSY);
	assert_int_equal(zl_meta_snap_delete(f->e, f->prefix, sname, NULL), -ZL_ERR_BUSY);

	/* Flatten cc: its internal snapshot of cv goes with the key. */
	assert_int_equal(zl_meta_clone_detach(f->e, f->prefix, cc.id, NULL), 0);
	snprintf(sname, sizeof(sname), "clone-%s", cc.id);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, sname, &s), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, c.id, &x), 0);
	assert_int_equal(x.n_snaps, 0);
	zl_volume_fini(&x);
	/* Remove cv: its internal snapshot of vb goes too, then vb can. */
	assert_int_equal(remove_volume(f, "cv", false), 0);
	snprintf(sname, sizeof(sname), "clone-%s", c.id);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, sname, &s), -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_volume_get(f->e, f->prefix, v.id, &x), 0);
	assert_int_equal(x.n_snaps, 0);
	zl_volume_fini(&x);
	assert_int_equal(remove_volume(f, "vb", false), 0);
	assert_int_equal(remove_volume(f, "cc", false), 0);

	/* A creator that died between its internal snapshot and the clone's
	 * record left "clone-<id>": collected (at any age here), while an
	 * internal snapshot a clone reads is kept. */
	make_volume(f, "vg", &x);
	zl_volume_fini(&x);
	assert_int_equal(zl_meta_snap_create(f->e, f->prefix, "vg", "clone-vol-00000000000000d1",
					     NULL, &s, NULL, NULL),
			 0);
	spec.name = "cg";
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, "vg", NULL, 1000, &x,
					      &created),
			 0);
	snprintf(sname, sizeof(sname), "clone-%s", x.id);
	meta_clone_gc(f->e, f->prefix, x.parent_vol, 0);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, "clone-vol-00000000000000d1", &s),
			 -ZL_ERR_NOT_FOUND);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, sname, &s), 0);
	zl_volume_fini(&x);
	assert_int_equal(remove_volume(f, "cg", false), 0);
	assert_int_equal(zl_meta_snap_lookup(f->e, f->prefix, sname, &s), -ZL_ERR_NOT_FOUND);

	/* A volume source that is not there. */
	spec.name = "cz";
	assert_int_equal(zl_meta_clone_create(f->e, f->prefix, &spec, "vb", NULL, 1000, &x,
					      &created),
			 -ZL_ERR_NOT_FOUND);
	zl_volume_fini(&cc);
	zl_volume_fini(&c);
	zl_volume_fini(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_from_snapshot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_from_volume, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
