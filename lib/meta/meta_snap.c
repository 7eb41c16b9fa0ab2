/* Snapshot records (docs/SNAPSHOTS.md §1): <prefix>snapshots/<snap-id> and
 * <prefix>snapnames/<name> ("<snap-id>"). Taking one is a single etcd
 * transaction that compares the volume record's mod_revision, so the
 * sequence bump, the snapshot and its name appear together or not at all. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* Rounds of "read, transaction" while the volume record keeps changing
 * (placement changes by the manager, other snapshots). */
#define META_SNAP_TRIES 16

int zl_meta_snap_id_check(const char *s)
{
	if (!s || strlen(s) != ZL_SNAP_ID_LEN || strncmp(s, "snap-", 5))
		return -ZL_ERR_INVAL;
	for (const char *p = s + 5; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return -ZL_ERR_INVAL;
	return 0;
}

void zl_meta_snap_id_generate(char *out)
{
	snprintf(out, ZL_SNAP_ID_LEN + 1, "snap-%016" PRIx64, zl_random_u64());
}

static bool meta_snap_state_ok(const char *st)
{
	return !strcmp(st, ZL_SNAP_STATE_CREATING) || !strcmp(st, ZL_SNAP_STATE_READY) ||
	       !strcmp(st, ZL_SNAP_STATE_DELETING);
}

int zl_meta_snap_check(const struct zl_snapshot *s, char *why, size_t why_len)
{
	uint64_t num;

	if (!s)
		return meta_fail(why, why_len, "no snapshot");
	if (!meta_buf_ok(s->id, sizeof(s->id), false) || zl_meta_snap_id_check(s->id))
		return meta_fail(why, why_len, "id is not snap- and 16 hex digits");
	if (!meta_buf_ok(s->name, sizeof(s->name), false) || zl_volume_name_check(s->name))
		return meta_fail(why, why_len, "name is not 1..253 characters of [A-Za-z0-9._-]");
	if (!meta_buf_ok(s->vol, sizeof(s->vol), false) || zl_vol_id_parse(s->vol, &num))
		return meta_fail(why, why_len, "vol is not vol- and 16 hex digits");
	if (s->seq < 1 || s->seq > ZL_WIRE_SEQ_MAX)
		return meta_fail(why, why_len, "seq=%u is not in [1, %u]", s->seq, ZL_WIRE_SEQ_MAX);
	if (s->size == 0 || s->size % ZL_BLOCK_SIZE || s->size > (uint64_t)INT64_MAX)
		return meta_fail(why, why_len, "size=%" PRIu64 " is not a positive multiple of %u",
				 s->size, ZL_BLOCK_SIZE);
	if (s->created < 0)
		return meta_fail(why, why_len, "created=%" PRId64 " is negative", s->created);
	if (!meta_buf_ok(s->state, sizeof(s->state), false) || !meta_snap_state_ok(s->state))
		return meta_fail(why, why_len, "state is not creating, ready or deleting");
	if (!meta_buf_ok(s->group, sizeof(s->group), true) ||
	    (s->group[0] && zl_node_id_check(s->group)))
		return meta_fail(why, why_len, "group is not \"\" or an id of [A-Za-z0-9._-]");
	return 0;
}

char *zl_meta_snap_to_json(const struct zl_snapshot *s)
{
	json_t *o;

	if (!s || zl_meta_snap_check(s, NULL, 0))
		return NULL;
	o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s}", "id", s->id, "name", s->name,
		      "vol", s->vol, "seq", (json_int_t)s->seq, "size", (json_int_t)s->size,
		      "created", (json_int_t)s->created, "state", s->state, "group", s->group);
	return meta_dump(o);
}

static const struct meta_field meta_snap_fields[] = {
    META_STR(struct zl_snapshot, id, "id", false),
    META_STR(struct zl_snapshot, name, "name", false),
    META_STR(struct zl_snapshot, vol, "vol", false),
    META_INT(struct zl_snapshot, seq, "seq", 1, ZL_WIRE_SEQ_MAX),
    META_INT(struct zl_snapshot, size, "size", 1, INT64_MAX),
    META_INT(struct zl_snapshot, created, "created", 0, INT64_MAX),
    META_STR(struct zl_snapshot, state, "state", false),
    META_STR(struct zl_snapshot, group, "group", true),
};

static int meta_snap_check_rec(const void *rec, char *why, size_t why_len)
{
	return zl_meta_snap_check(rec, why, why_len);
}

static int meta_snap_from_json_why(const char *json, size_t len, struct zl_snapshot *s, char *why,
				   size_t why_len)
{
	return meta_decode_flat(json, len, meta_snap_fields, ZL_ARRAY_SIZE(meta_snap_fields), s,
				sizeof(*s), meta_snap_check_rec, why, why_len);
}

int zl_meta_snap_from_json(const char *json, size_t len, struct zl_snapshot *s)
{
	return meta_snap_from_json_why(json, len, s, NULL, 0);
}

static int meta_snap_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	struct zl_snapshot *s = rec;
	int ret = meta_snap_from_json_why(kv->value, kv->value_len, s, why, why_len);

	if (!ret)
		s->mod_rev = kv->mod_rev;
	return ret;
}

static int meta_snap_cmp(const void *a, const void *b)
{
	const struct zl_snapshot *x = a, *y = b;
	int c = strcmp(x->vol, y->vol);

	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const struct meta_record_ops meta_snap_ops = {
    .kind = "snapshots",
    .what = "snapshot",
    .hint = "fix or delete it with etcdctl",
    .size = sizeof(struct zl_snapshot),
    .id_off = offsetof(struct zl_snapshot, id),
    .decode = meta_snap_decode,
    .cmp = meta_snap_cmp,
};

static int meta_snap_get(struct zl_etcd *e, const char *prefix, const char *id,
			 struct zl_snapshot *out)
{
	if (zl_meta_snap_id_check(id))
		return -ZL_ERR_INVAL;
	return meta_record_get(e, prefix, &meta_snap_ops, id, out);
}

/* snapnames/<name> -> the snapshot. -ZL_ERR_NOT_FOUND when the name is
 * absent (or names a record that is gone). */
static int meta_snap_by_name(struct zl_etcd *e, const char *prefix, const char *name,
			     struct zl_snapshot *out)
{
	char key[ZL_META_KEY_MAX], id[ZL_SNAP_ID_LEN + 1];
	struct zl_etcd_kv kv;
	int ret;

	ret = zl_meta_key(key, sizeof(key), prefix, "snapnames", name);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	if (kv.value_len != ZL_SNAP_ID_LEN || zl_meta_snap_id_check(kv.value)) {
		ZL_LOG_ERR("meta",
			   "snapshot name record key=%s does not hold a snapshot id: inspect it "
			   "with etcdctl get %s",
			   key, key);
		zl_etcd_kv_fini(&kv);
		return -ZL_ERR_INVAL;
	}
	memcpy(id, kv.value, sizeof(id));
	zl_etcd_kv_fini(&kv);
	return meta_snap_get(e, prefix, id, out);
}

int zl_meta_snap_lookup(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			struct zl_snapshot *out)
{
	int ret;

	if (!name_or_id)
		return -ZL_ERR_INVAL;
	if (!zl_meta_snap_id_check(name_or_id)) {
		ret = meta_snap_get(e, prefix, name_or_id, out);
		if (ret != -ZL_ERR_NOT_FOUND)
			return ret;
	}
	if (zl_volume_name_check(name_or_id))
		return -ZL_ERR_INVAL;
	return meta_snap_by_name(e, prefix, name_or_id, out);
}

int zl_meta_snap_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
		      struct zl_snapshot **out, size_t *n)
{
	struct zl_snapshot *recs = NULL;
	size_t k = 0;
	uint64_t num;
	void *all;
	int ret;

	*out = NULL;
	*n = 0;
	if (vol_id && zl_vol_id_parse(vol_id, &num))
		return -ZL_ERR_INVAL;
	ret = meta_record_list(e, prefix, &meta_snap_ops, &all, n);
	if (ret)
		return ret;
	recs = all;
	for (size_t i = 0; i < *n; i++)
		if (!vol_id || !strcmp(recs[i].vol, vol_id))
			recs[k++] = recs[i];
	*n = k;
	if (!k) {
		free(recs);
		recs = NULL;
	}
	*out = recs;
	return 0;
}

/* The existing snapshot of a create call: ours when it is of the same
 * volume (and, asked by id, of the same name). */
static int meta_snap_existing(const struct zl_snapshot *have, const struct zl_volume *v,
			      const char *name, struct zl_snapshot *out, bool *created)
{
	if (strcmp(have->vol, v->id) || strcmp(have->name, name)) {
		ZL_LOG_INFO("meta",
			    "snapshot name=%s exists as id=%s name=%s of vol=%s; requested of "
			    "vol=%s",
			    name, have->id, have->name, have->vol, v->id);
		return -ZL_ERR_EXISTS;
	}
	*out = *have;
	if (created)
		*created = false;
	return 0;
}

/* One attempt: 0 (done or found), -ZL_ERR_CONFLICT (lost a race: again),
 * or a final error. */
static int meta_snap_create_once(struct zl_etcd *e, const char *prefix, struct zl_volume *v,
				 const char *name, const char *id, struct zl_snapshot *out,
				 bool *created, bool unserved)
{
	char vkey[ZL_META_KEY_MAX], skey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX];
	char wkey[ZL_META_KEY_MAX];
	struct zl_etcd_txn_result res = {0};
	struct zl_snapshot s = {0}, have;
	char *vjson = NULL, *sjson = NULL;
	bool ok = false;
	int ret;

	ret = meta_snap_get(e, prefix, id, &have);
	if (ret == 0)
		return meta_snap_existing(&have, v, name, out, created);
	if (ret != -ZL_ERR_NOT_FOUND)
		return ret;
	ret = meta_snap_by_name(e, prefix, name, &have);
	if (ret == 0)
		return meta_snap_existing(&have, v, name, out, created);
	if (ret != -ZL_ERR_NOT_FOUND)
		return ret;
	if (strcmp(v->state, "ready")) {
		ZL_LOG_INFO("meta", "snapshot name=%s refused: vol=%s is %s", name, v->id,
			    v->state);
		return -ZL_ERR_BUSY;
	}
	if (v->snap_seq >= ZL_WIRE_SEQ_MAX || v->n_snaps >= ZL_META_SNAPS_MAX) {
		ZL_LOG_ERR("meta",
			   "snapshot name=%s refused: vol=%s holds %u snapshots (at most %u) at "
			   "sequence %u (at most %u); delete some",
			   name, v->id, v->n_snaps, ZL_META_SNAPS_MAX, v->snap_seq,
			   ZL_WIRE_SEQ_MAX);
		return -ZL_ERR_RANGE;
	}
	v->snap_seq++;
	v->snaps[v->n_snaps++] = v->snap_seq;
	snprintf(s.id, sizeof(s.id), "%s", id);
	snprintf(s.name, sizeof(s.name), "%s", name);
	snprintf(s.vol, sizeof(s.vol), "%s", v->id);
	s.seq = v->snap_seq;
	s.size = v->size;
	s.created = zl_wall_sec();
	snprintf(s.state, sizeof(s.state), "%s", ZL_SNAP_STATE_READY);

	if (zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", v->id) ||
	    zl_meta_key(skey, sizeof(skey), prefix, "snapshots", s.id) ||
	    zl_meta_key(nkey, sizeof(nkey), prefix, "snapnames", s.name) ||
	    zl_meta_key(wkey, sizeof(wkey), prefix, "snapwriters", v->id))
		return -ZL_ERR_INVAL;
	vjson = zl_meta_volume_to_json(v);
	sjson = zl_meta_snap_to_json(&s);
	if (!vjson || !sjson) {
		ret = vjson && sjson ? -ENOMEM : -ZL_ERR_INVAL;
		goto out_free;
	}
	/* The last compare (unserved only): no client serves the volume, so
	 * none can have read the record before this transaction and go on
	 * writing with the old sequence after it. */
	const struct zl_etcd_cmp cmps[4] = {
	    {.key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v->mod_rev},
	    {.key = skey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
	    {.key = nkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
	    {.key = wkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0},
	};
	const struct zl_etcd_op ops[3] = {
	    {.kind = ZL_ETCD_OP_PUT, .key = vkey, .value = vjson, .value_len = strlen(vjson)},
	    {.kind = ZL_ETCD_OP_PUT, .key = skey, .value = sjson, .value_len = strlen(sjson)},
	    {.kind = ZL_ETCD_OP_PUT, .key = nkey, .value = s.id, .value_len = strlen(s.id)},
	};
	ret = zl_etcd_txn(e, cmps, unserved ? 4 : 3, ops, 3, NULL, 0, &ok, &res);
	if (ret) {
		ZL_LOG_ERR("meta",
			   "create snapshot name=%s vol=%s: etcd transaction failed err=%s "
			   "detail=\"%s\"",
			   name, v->id, zl_errname(ret), zl_etcd_last_error());
		goto out_free;
	}
	if (!ok) {
		ret = -ZL_ERR_CONFLICT;
		if (unserved && zl_meta_snapwriter_get(e, prefix, v->id, NULL, 0) == 0)
			ret = -EAGAIN; /* a client serves it now: ask it */
		goto out_res;
	}
	v->mod_rev = res.revision;
	s.mod_rev = res.revision;
	*out = s;
	if (created)
		*created = true;
	ZL_LOG_INFO("meta", "snapshot created id=%s name=%s vol=%s seq=%u", s.id, s.name, s.vol,
		    s.seq);
out_res:
	zl_etcd_txn_result_fini(&res);
out_free:
	free(sjson);
	free(vjson);
	return ret;
}

int zl_meta_snap_create(struct zl_etcd *e, const char *prefix, const char *vol, const char *name,
			const char *id, struct zl_snapshot *out, bool *created,
			struct zl_volume *vol_out)
{
	return meta_snap_create(e, prefix, vol, name, id, out, created, vol_out, false);
}

int meta_snap_create(struct zl_etcd *e, const char *prefix, const char *vol, const char *name,
		     const char *id, struct zl_snapshot *out, bool *created,
		     struct zl_volume *vol_out, bool unserved)
{
	char fresh[ZL_SNAP_ID_LEN + 1];
	int ret = -ZL_ERR_CONFLICT;

	if (created)
		*created = false;
	if (!vol || !name || zl_volume_name_check(name) || (id && zl_meta_snap_id_check(id)))
		return -ZL_ERR_INVAL;
	if (!id) {
		zl_meta_snap_id_generate(fresh);
		id = fresh;
	}
	for (int tries = 0; tries < META_SNAP_TRIES; tries++) {
		struct zl_volume v = {0};

		ret = zl_meta_volume_lookup(e, prefix, vol, &v);
		if (ret)
			return ret;
		ret = meta_snap_create_once(e, prefix, &v, name, id, out, created, unserved);
		if (!ret && vol_out)
			*vol_out = v;
		else
			zl_volume_fini(&v);
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
	}
	ZL_LOG_ERR("meta",
		   "create snapshot name=%s of vol=%s: gave up after %d conflicting attempts "
		   "(the volume record kept changing); retry",
		   name, vol, META_SNAP_TRIES);
	return ret;
}

/* v without seq in snaps. */
static void meta_snaps_remove(struct zl_volume *v, uint32_t seq)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < v->n_snaps; i++)
		if (v->snaps[i] != seq)
			v->snaps[k++] = v->snaps[i];
	v->n_snaps = k;
}

/* Why a delete transaction failed: -ZL_ERR_BUSY (logged with the
 * dependants) when clones read through the snapshot, else -ZL_ERR_CONFLICT
 * (again). */
static int meta_snap_refusal(struct zl_etcd *e, const char *prefix, const struct zl_snapshot *s)
{
	char what[300], msg[1024];
	int ret;

	snprintf(what, sizeof(what), "snapshot %s", s->name);
	ret = zl_meta_clone_refusal(e, prefix, s->vol, s->seq, what, msg, sizeof(msg));
	if (ret == -ZL_ERR_BUSY) {
		ZL_LOG_ERR("meta", "delete snapshot id=%s refused: %s", s->id, msg);
		return ret;
	}
	return -ZL_ERR_CONFLICT;
}

/* One attempt of a delete: 0, -ZL_ERR_CONFLICT (again), -ZL_ERR_BUSY (clones
 * depend on it) or an error. */
static int meta_snap_delete_once(struct zl_etcd *e, const char *prefix,
				 const struct zl_snapshot *s)
{
	char vkey[ZL_META_KEY_MAX], skey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX];
	char dkey[ZL_META_KEY_MAX], dend[ZL_META_KEY_MAX];
	struct zl_volume v = {0};
	struct zl_etcd_cmp cmps[3];
	struct zl_etcd_op ops[3];
	size_t n_cmps = 0, n_ops = 0;
	char *vjson = NULL;
	bool ok = false;
	int ret;

	if (zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", s->vol) ||
	    zl_meta_key(skey, sizeof(skey), prefix, "snapshots", s->id) ||
	    zl_meta_key(nkey, sizeof(nkey), prefix, "snapnames", s->name) ||
	    meta_dep_range(dkey, dend, prefix, s->vol, s->seq))
		return -ZL_ERR_INVAL;
	ret = zl_meta_volume_get(e, prefix, s->vol, &v);
	if (ret && ret != -ZL_ERR_NOT_FOUND)
		return ret;
	memset(cmps, 0, sizeof(cmps));
	memset(ops, 0, sizeof(ops));
	cmps[n_cmps++] = (struct zl_etcd_cmp){
	    .key = skey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = s->mod_rev};
	if (ret == -ZL_ERR_NOT_FOUND) {
		/* The volume is gone: so is every sequence it listed. */
		cmps[n_cmps++] = (struct zl_etcd_cmp){
		    .key = vkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	} else {
		meta_snaps_remove(&v, s->seq);
		vjson = zl_meta_volume_to_json(&v);
		if (!vjson) {
			ret = -ENOMEM;
			goto out_vol;
		}
		cmps[n_cmps++] = (struct zl_etcd_cmp){
		    .key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v.mod_rev};
		ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
						   .key = vkey,
						   .value = vjson,
						   .value_len = strlen(vjson)};
	}
	/* No clone reads through it (docs/SNAPSHOTS.md §4). */
	cmps[n_cmps++] = (struct zl_etcd_cmp){.key = dkey,
					      .range_end = dend,
					      .target = ZL_ETCD_CMP_CREATE,
					      .result = ZL_ETCD_EQUAL,
					      .rev = 0};
	ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = skey};
	ops[n_ops++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_DELETE, .key = nkey};
	ret = zl_etcd_txn(e, cmps, n_cmps, ops, n_ops, NULL, 0, &ok, NULL);
	if (ret)
		ZL_LOG_ERR("meta", "delete snapshot id=%s failed err=%s detail=\"%s\"", s->id,
			   zl_errname(ret), zl_etcd_last_error());
	else if (!ok)
		ret = meta_snap_refusal(e, prefix, s);
	else
		ZL_LOG_INFO("meta", "snapshot deleted id=%s name=%s vol=%s seq=%u", s->id,
			    s->name, s->vol, s->seq);
	free(vjson);
out_vol:
	zl_volume_fini(&v);
	return ret;
}

int zl_meta_snap_delete(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			struct zl_snapshot *out)
{
	int ret = -ZL_ERR_CONFLICT;

	for (int tries = 0; tries < META_SNAP_TRIES; tries++) {
		struct zl_snapshot s;

		ret = zl_meta_snap_lookup(e, prefix, name_or_id, &s);
		if (ret)
			return ret;
		ret = meta_snap_delete_once(e, prefix, &s);
		if (!ret && out)
			*out = s;
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
	}
	ZL_LOG_ERR("meta", "delete snapshot %s: gave up after %d conflicting attempts; retry",
		   name_or_id, META_SNAP_TRIES);
	return ret;
}

/* ---- requests to the writing client ---- */

static bool meta_snapreq_state_ok(const char *st)
{
	return !strcmp(st, ZL_SNAPREQ_PENDING) || !strcmp(st, ZL_SNAPREQ_DONE) ||
	       !strcmp(st, ZL_SNAPREQ_FAILED) || !strcmp(st, ZL_SNAPREQ_HOLD) ||
	       !strcmp(st, ZL_SNAPREQ_HELD) || !strcmp(st, ZL_SNAPREQ_SWITCH);
}

/* The states of a group's two-phase switch (§5), which need the group. */
static bool meta_snapreq_state_group(const char *st)
{
	return !strcmp(st, ZL_SNAPREQ_HOLD) || !strcmp(st, ZL_SNAPREQ_HELD) ||
	       !strcmp(st, ZL_SNAPREQ_SWITCH);
}

static int meta_snapreq_value_check(const struct zl_snapreq *r, char *why, size_t why_len)
{
	bool done;

	if (!meta_buf_ok(r->name, sizeof(r->name), false) || zl_volume_name_check(r->name))
		return meta_fail(why, why_len, "name is not 1..253 characters of [A-Za-z0-9._-]");
	if (!meta_buf_ok(r->state, sizeof(r->state), false) || !meta_snapreq_state_ok(r->state))
		return meta_fail(why, why_len,
				 "state is not pending, done, failed, hold, held or switch");
	if (r->requested < 0)
		return meta_fail(why, why_len, "requested=%" PRId64 " is negative", r->requested);
	if (!meta_buf_ok(r->group, sizeof(r->group), true) ||
	    (r->group[0] && zl_node_id_check(r->group)) ||
	    (meta_snapreq_state_group(r->state) && !r->group[0]))
		return meta_fail(why, why_len,
				 "group is not an id of [A-Za-z0-9._-] (required by hold, held "
				 "and switch)");
	done = !strcmp(r->state, ZL_SNAPREQ_DONE) || !strcmp(r->state, ZL_SNAPREQ_SWITCH);
	if (done ? (r->seq < 1 || r->seq > ZL_WIRE_SEQ_MAX) : r->seq != 0)
		return meta_fail(why, why_len, "seq=%u does not fit state %s", r->seq, r->state);
	if (!meta_buf_ok(r->error, sizeof(r->error), true) ||
	    (!strcmp(r->state, ZL_SNAPREQ_FAILED) != (r->error[0] != '\0')))
		return meta_fail(why, why_len, "error must be set exactly when the state is failed");
	for (const char *p = r->error; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return meta_fail(why, why_len, "error is not an error name");
	return 0;
}

int zl_meta_snapreq_check(const struct zl_snapreq *r, char *why, size_t why_len)
{
	uint64_t num;

	if (!r)
		return meta_fail(why, why_len, "no request");
	if (!meta_buf_ok(r->vol, sizeof(r->vol), false) || zl_vol_id_parse(r->vol, &num))
		return meta_fail(why, why_len, "vol is not vol- and 16 hex digits");
	if (!meta_buf_ok(r->id, sizeof(r->id), false) || zl_meta_snap_id_check(r->id))
		return meta_fail(why, why_len, "id is not snap- and 16 hex digits");
	return meta_snapreq_value_check(r, why, why_len);
}

char *zl_meta_snapreq_to_json(const struct zl_snapreq *r)
{
	json_t *o;

	if (!r || meta_snapreq_value_check(r, NULL, 0))
		return NULL;
	o = json_pack("{s:s, s:s, s:I, s:I, s:s}", "name", r->name, "state", r->state,
		      "requested", (json_int_t)r->requested, "seq", (json_int_t)r->seq, "error",
		      r->error);
	/* "group" only in a group's requests: a single one reads as before. */
	if (o && r->group[0] && json_object_set_new(o, "group", json_string(r->group))) {
		json_decref(o);
		return NULL;
	}
	return meta_dump(o);
}

static const struct meta_field meta_snapreq_fields[] = {
    META_STR(struct zl_snapreq, name, "name", false),
    META_STR(struct zl_snapreq, state, "state", false),
    META_INT(struct zl_snapreq, requested, "requested", 0, INT64_MAX),
    META_INT(struct zl_snapreq, seq, "seq", 0, ZL_WIRE_SEQ_MAX),
    META_STR(struct zl_snapreq, error, "error", true),
    META_STR_NEW(struct zl_snapreq, group, "group"),
};

static int meta_snapreq_check_rec(const void *rec, char *why, size_t why_len)
{
	return meta_snapreq_value_check(rec, why, why_len);
}

int zl_meta_snapreq_from_json(const char *json, size_t len, struct zl_snapreq *r)
{
	return meta_decode_flat(json, len, meta_snapreq_fields, ZL_ARRAY_SIZE(meta_snapreq_fields),
				r, sizeof(*r), meta_snapreq_check_rec, NULL, 0);
}

int zl_meta_snapreq_from_kv(const struct zl_etcd_kv *kv, struct zl_snapreq *r)
{
	const char *id, *vol;
	size_t vol_len;

	if (!kv || !kv->key || zl_meta_snapreq_from_json(kv->value, kv->value_len, r))
		return -ZL_ERR_INVAL;
	id = strrchr(kv->key, '/');
	if (!id || id == kv->key)
		goto out_bad;
	vol = id - 1;
	while (vol > kv->key && vol[-1] != '/')
		vol--;
	vol_len = (size_t)(id - vol);
	if (vol_len >= sizeof(r->vol) || strlen(id + 1) >= sizeof(r->id))
		goto out_bad;
	memcpy(r->vol, vol, vol_len);
	r->vol[vol_len] = '\0';
	snprintf(r->id, sizeof(r->id), "%s", id + 1);
	r->mod_rev = kv->mod_rev;
	if (zl_meta_snapreq_check(r, NULL, 0))
		goto out_bad;
	return 0;
out_bad:
	memset(r, 0, sizeof(*r));
	return -ZL_ERR_INVAL;
}

static int meta_snapreq_key(char *out, size_t len, const char *prefix, const char *vol,
			    const char *id)
{
	uint64_t num;
	int n;

	if (!vol || zl_vol_id_parse(vol, &num) || !id || zl_meta_snap_id_check(id))
		return -ZL_ERR_INVAL;
	n = snprintf(out, len, "%ssnapreqs/%s/%s", meta_prefix(prefix), vol, id);
	return n < 0 || (size_t)n >= len ? -ZL_ERR_INVAL : 0;
}

int zl_meta_snapreq_prefix(char *out, size_t len, const char *prefix, const char *vol_id)
{
	uint64_t num;
	int n;

	if (!vol_id || zl_vol_id_parse(vol_id, &num))
		return -ZL_ERR_INVAL;
	n = snprintf(out, len, "%ssnapreqs/%s/", meta_prefix(prefix), vol_id);
	return n < 0 || (size_t)n >= len ? -ZL_ERR_INVAL : 0;
}

int zl_meta_snapreq_put(struct zl_etcd *e, const char *prefix, const struct zl_snapreq *r)
{
	char key[ZL_META_KEY_MAX], why[160];
	char *json;
	int ret;

	if (zl_meta_snapreq_check(r, why, sizeof(why))) {
		ZL_LOG_ERR("meta", "refusing to put an invalid snapshot request: %s", why);
		return -ZL_ERR_INVAL;
	}
	ret = meta_snapreq_key(key, sizeof(key), prefix, r->vol, r->id);
	if (ret)
		return ret;
	json = zl_meta_snapreq_to_json(r);
	if (!json)
		return -ENOMEM;
	if (r->mod_rev > 0) {
		const struct zl_etcd_cmp cmp = {
		    .key = key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = r->mod_rev};
		const struct zl_etcd_op op = {
		    .kind = ZL_ETCD_OP_PUT, .key = key, .value = json, .value_len = strlen(json)};
		bool ok = false;

		ret = zl_etcd_txn(e, &cmp, 1, &op, 1, NULL, 0, &ok, NULL);
		if (!ret && !ok)
			ret = -ZL_ERR_CONFLICT;
	} else {
		ret = zl_etcd_put(e, key, json, strlen(json), 0, NULL);
	}
	free(json);
	if (ret && ret != -ZL_ERR_CONFLICT)
		ZL_LOG_ERR("meta", "put snapshot request key=%s failed err=%s detail=\"%s\"", key,
			   zl_errname(ret), zl_etcd_last_error());
	return ret;
}

int zl_meta_snapreq_get(struct zl_etcd *e, const char *prefix, const char *vol, const char *id,
			struct zl_snapreq *out)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_kv kv;
	int ret;

	ret = meta_snapreq_key(key, sizeof(key), prefix, vol, id);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	ret = zl_meta_snapreq_from_kv(&kv, out);
	if (ret)
		ZL_LOG_ERR("meta", "malformed snapshot request key=%s: delete it with etcdctl",
			   key);
	zl_etcd_kv_fini(&kv);
	return ret;
}

int zl_meta_snapreq_delete(struct zl_etcd *e, const char *prefix, const char *vol,
			   const char *id)
{
	char key[ZL_META_KEY_MAX];
	int ret;

	ret = meta_snapreq_key(key, sizeof(key), prefix, vol, id);
	if (ret)
		return ret;
	return zl_etcd_delete(e, key, NULL, NULL);
}

int zl_meta_snapwriter_put(struct zl_etcd *e, const char *prefix, const char *vol_id,
			   const char *client, int64_t lease)
{
	char key[ZL_META_KEY_MAX];
	uint64_t num;
	int ret;

	if (!vol_id || zl_vol_id_parse(vol_id, &num) || !client || !client[0])
		return -ZL_ERR_INVAL;
	ret = zl_meta_key(key, sizeof(key), prefix, "snapwriters", vol_id);
	if (ret)
		return ret;
	return zl_etcd_put(e, key, client, strlen(client), lease, NULL);
}

int zl_meta_snapwriter_get(struct zl_etcd *e, const char *prefix, const char *vol_id,
			   char *client, size_t client_len)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_kv kv;
	uint64_t num;
	int ret;

	if (!vol_id || zl_vol_id_parse(vol_id, &num))
		return -ZL_ERR_INVAL;
	ret = zl_meta_key(key, sizeof(key), prefix, "snapwriters", vol_id);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	if (client && client_len)
		snprintf(client, client_len, "%.*s", (int)kv.value_len, kv.value);
	zl_etcd_kv_fini(&kv);
	return 0;
}
