/* Group snapshots (docs/SNAPSHOTS.md §5): one etcd transaction over several
 * volumes' records, each with its own snap_seq bump and snapshot record
 * (named "<group>.<volume name>", field group = the group's id), and the
 * group record <prefix>snapgroups/<group> = {"name", "created", "snaps"}.
 *
 * A volume some client serves takes part through that client's request
 * snapreqs/<vol>/<snap-id>, in two phases driven here:
 *
 *   hold (put by the requester) -> held (the client holds new writes) ->
 *   switch + seq (put by the group's transaction itself) -> done (the
 *   client took the sequence and released its writes)
 *
 * The transaction compares every held request at the revision the client
 * answered: a client that gives up its hold first marks its request
 * "failed" (a compare-and-swap), so either the group was taken while every
 * client held, or it is not taken at all. A request deleted (the group
 * failed, or is over) makes the client read the volume record and release
 * with the sequence there. A volume nobody serves is snapshotted by the
 * transaction alone, which then also requires that no client serves it
 * (no snapwriters/<vol> key), like the single case. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/common/common.h"
#include "meta_internal.h"

#define META_GROUP_TRIES   16	 /* transaction rounds while records change */
#define META_GROUP_ROUNDS  4	 /* hold rounds while clients come and go */
#define META_GROUP_POLL_MS 20u	 /* the requester reads the requests back */
#define META_GROUP_HOLD_MS 5000u /* at most this long for every "held" */

int zl_meta_snapgroup_name_check(const char *group)
{
	return group && !zl_node_id_check(group) ? 0 : -ZL_ERR_INVAL;
}

static int meta_group_key(char *out, size_t len, const char *prefix, const char *group)
{
	if (zl_meta_snapgroup_name_check(group))
		return -ZL_ERR_INVAL;
	return zl_meta_key(out, len, prefix, "snapgroups", group);
}

/* "<group>.<volume name>": the member snapshot's name. */
static int meta_group_member_name(char *out, size_t len, const char *group, const char *vname)
{
	int n = snprintf(out, len, "%s.%s", group, vname);

	if (n < 0 || (size_t)n >= len || zl_volume_name_check(out))
		return -ZL_ERR_INVAL;
	return 0;
}

int zl_meta_snapgroup_exists(struct zl_etcd *e, const char *prefix, const char *group)
{
	char key[ZL_META_KEY_MAX];
	struct zl_etcd_kv kv;
	int ret;

	ret = meta_group_key(key, sizeof(key), prefix, group);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	zl_etcd_kv_fini(&kv);
	return 0;
}

int zl_meta_snapgroup_members(struct zl_etcd *e, const char *prefix, const char *group,
			      struct zl_snapshot **out, size_t *n)
{
	size_t k = 0;
	int ret;

	ret = zl_meta_snap_list(e, prefix, NULL, out, n);
	if (ret)
		return ret;
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*out)[i].group, group))
			(*out)[k++] = (*out)[i];
	*n = k;
	return 0;
}

/* Why a group transaction did not hold: -ZL_ERR_EXISTS (the group or a
 * member's name is taken), -ZL_ERR_STALE (a client no longer holds),
 * -EAGAIN (a client serves a volume taken as unserved) or -ZL_ERR_CONFLICT
 * (a volume record changed: again). */
static int meta_group_why(struct zl_etcd *e, const char *prefix, const char *group,
			  const struct zl_snapgroup_member *m, size_t n)
{
	struct zl_snapshot have;
	struct zl_snapreq q;

	if (zl_meta_snapgroup_exists(e, prefix, group) == 0)
		return -ZL_ERR_EXISTS;
	for (size_t i = 0; i < n; i++) {
		if (zl_meta_snap_lookup(e, prefix, m[i].snap.name, &have) == 0)
			return -ZL_ERR_EXISTS;
		if (m[i].req.mod_rev > 0 &&
		    (zl_meta_snapreq_get(e, prefix, m[i].vol, m[i].snap_id, &q) ||
		     q.mod_rev != m[i].req.mod_rev))
			return -ZL_ERR_STALE;
		if (m[i].req.mod_rev == 0 &&
		    zl_meta_snapwriter_get(e, prefix, m[i].vol, NULL, 0) == 0)
			return -EAGAIN;
	}
	return -ZL_ERR_CONFLICT;
}

/* Per member: the volume's record (in), and the JSON written for it. */
struct meta_group_txn {
	struct zl_volume v;
	char vkey[ZL_META_KEY_MAX], skey[ZL_META_KEY_MAX], nkey[ZL_META_KEY_MAX];
	char wkey[ZL_META_KEY_MAX], rkey[ZL_META_KEY_MAX];
	char *vjson, *sjson, *rjson;
};

static void meta_group_txn_fini(struct meta_group_txn *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		zl_volume_fini(&t[i].v);
		free(t[i].vjson);
		free(t[i].sjson);
		free(t[i].rjson);
	}
	free(t);
}

/* The member's snapshot in m->snap and its JSON in t, from the record t->v. */
static int meta_group_member_build(const char *prefix, const char *group, int64_t now,
				   struct zl_snapgroup_member *m, struct meta_group_txn *t)
{
	struct zl_volume *v = &t->v;
	struct zl_snapshot *s = &m->snap;
	struct zl_snapreq r;
	int n;

	if (strcmp(v->state, "ready")) {
		ZL_LOG_INFO("meta", "group snapshot %s refused: vol=%s is %s", group, v->id,
			    v->state);
		return -ZL_ERR_BUSY;
	}
	if (v->snap_seq >= ZL_WIRE_SEQ_MAX || v->n_snaps >= ZL_META_SNAPS_MAX) {
		ZL_LOG_ERR("meta",
			   "group snapshot %s refused: vol=%s holds %u snapshots (at most %u) at "
			   "sequence %u; delete some",
			   group, v->id, v->n_snaps, ZL_META_SNAPS_MAX, v->snap_seq);
		return -ZL_ERR_RANGE;
	}
	v->snap_seq++;
	v->snaps[v->n_snaps++] = v->snap_seq;
	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "%s", m->snap_id);
	if (meta_group_member_name(s->name, sizeof(s->name), group, v->name))
		return -ZL_ERR_INVAL;
	snprintf(s->vol, sizeof(s->vol), "%s", v->id);
	s->seq = v->snap_seq;
	s->size = v->size;
	s->created = now;
	snprintf(s->state, sizeof(s->state), "%s", ZL_SNAP_STATE_READY);
	n = snprintf(s->group, sizeof(s->group), "%s", group);
	if (n < 0 || (size_t)n >= sizeof(s->group))
		return -ZL_ERR_INVAL;
	if (zl_meta_key(t->vkey, sizeof(t->vkey), prefix, "volumes", v->id) ||
	    zl_meta_key(t->skey, sizeof(t->skey), prefix, "snapshots", s->id) ||
	    zl_meta_key(t->nkey, sizeof(t->nkey), prefix, "snapnames", s->name) ||
	    zl_meta_key(t->wkey, sizeof(t->wkey), prefix, "snapwriters", v->id))
		return -ZL_ERR_INVAL;
	t->vjson = zl_meta_volume_to_json(v);
	t->sjson = zl_meta_snap_to_json(s);
	if (!t->vjson || !t->sjson)
		return -ENOMEM;
	if (m->req.mod_rev <= 0)
		return 0;
	/* The served member's request becomes "switch" in the transaction. */
	r = m->req;
	snprintf(r.state, sizeof(r.state), "%s", ZL_SNAPREQ_SWITCH);
	r.seq = s->seq;
	r.error[0] = '\0';
	n = snprintf(t->rkey, sizeof(t->rkey), "%ssnapreqs/%s/%s", meta_prefix(prefix), v->id,
		     m->snap_id);
	if (n < 0 || (size_t)n >= sizeof(t->rkey))
		return -ZL_ERR_INVAL;
	t->rjson = zl_meta_snapreq_to_json(&r);
	return t->rjson ? 0 : -ZL_ERR_INVAL;
}

static char *meta_group_json(const char *group, int64_t now, const struct zl_snapgroup_member *m,
			     size_t n)
{
	json_t *o, *ids = json_array();

	for (size_t i = 0; ids && i < n; i++)
		if (json_array_append_new(ids, json_string(m[i].snap_id))) {
			json_decref(ids);
			return NULL;
		}
	if (!ids)
		return NULL;
	o = json_pack("{s:s, s:I, s:o}", "name", group, "created", (json_int_t)now, "snaps", ids);
	return meta_dump(o);
}

/* One attempt: 0, -ZL_ERR_CONFLICT (again) or a final error. */
static int meta_group_create_once(struct zl_etcd *e, const char *prefix, const char *group,
				  struct zl_snapgroup_member *m, size_t n, int64_t *rev)
{
	struct zl_etcd_cmp *cmps = NULL;
	struct zl_etcd_op *ops = NULL;
	struct meta_group_txn *t;
	char gkey[ZL_META_KEY_MAX];
	char *gjson = NULL;
	size_t nc = 0, no = 0;
	int64_t now = zl_wall_sec();
	struct zl_etcd_txn_result res = {0};
	bool ok = false;
	int ret;

	ret = meta_group_key(gkey, sizeof(gkey), prefix, group);
	if (ret)
		return ret;
	t = calloc(n, sizeof(*t));
	cmps = calloc(4 * n + 1, sizeof(*cmps));
	ops = calloc(4 * n + 1, sizeof(*ops));
	if (!t || !cmps || !ops) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		ret = zl_meta_volume_get(e, prefix, m[i].vol, &t[i].v);
		if (ret)
			goto out;
		ret = meta_group_member_build(prefix, group, now, &m[i], &t[i]);
		if (ret)
			goto out;
	}
	gjson = meta_group_json(group, now, m, n);
	if (!gjson) {
		ret = -ENOMEM;
		goto out;
	}
	cmps[nc++] = (struct zl_etcd_cmp){
	    .key = gkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
	ops[no++] = (struct zl_etcd_op){
	    .kind = ZL_ETCD_OP_PUT, .key = gkey, .value = gjson, .value_len = strlen(gjson)};
	for (size_t i = 0; i < n; i++) {
		struct meta_group_txn *x = &t[i];

		cmps[nc++] = (struct zl_etcd_cmp){.key = x->vkey,
						  .target = ZL_ETCD_CMP_MOD,
						  .result = ZL_ETCD_EQUAL,
						  .rev = x->v.mod_rev};
		cmps[nc++] = (struct zl_etcd_cmp){
		    .key = x->skey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
		cmps[nc++] = (struct zl_etcd_cmp){
		    .key = x->nkey, .target = ZL_ETCD_CMP_CREATE, .result = ZL_ETCD_EQUAL, .rev = 0};
		if (m[i].req.mod_rev > 0)
			cmps[nc++] = (struct zl_etcd_cmp){.key = x->rkey,
							  .target = ZL_ETCD_CMP_MOD,
							  .result = ZL_ETCD_EQUAL,
							  .rev = m[i].req.mod_rev};
		else
			cmps[nc++] = (struct zl_etcd_cmp){.key = x->wkey,
							  .target = ZL_ETCD_CMP_CREATE,
							  .result = ZL_ETCD_EQUAL,
							  .rev = 0};
		ops[no++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
						.key = x->vkey,
						.value = x->vjson,
						.value_len = strlen(x->vjson)};
		ops[no++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
						.key = x->skey,
						.value = x->sjson,
						.value_len = strlen(x->sjson)};
		ops[no++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
						.key = x->nkey,
						.value = m[i].snap.id,
						.value_len = strlen(m[i].snap.id)};
		if (x->rjson)
			ops[no++] = (struct zl_etcd_op){.kind = ZL_ETCD_OP_PUT,
							.key = x->rkey,
							.value = x->rjson,
							.value_len = strlen(x->rjson)};
	}
	ret = zl_etcd_txn(e, cmps, nc, ops, no, NULL, 0, &ok, &res);
	if (ret) {
		ZL_LOG_ERR("meta",
			   "group snapshot %s: etcd transaction failed err=%s detail=\"%s\"", group,
			   zl_errname(ret), zl_etcd_last_error());
		goto out;
	}
	if (!ok) {
		ret = meta_group_why(e, prefix, group, m, n);
		goto out;
	}
	*rev = res.revision;
	for (size_t i = 0; i < n; i++)
		m[i].snap.mod_rev = res.revision;
	ZL_LOG_INFO("meta", "group snapshot created group=%s volumes=%zu rev=%" PRId64, group, n,
		    res.revision);
out:
	zl_etcd_txn_result_fini(&res);
	free(gjson);
	free(ops);
	free(cmps);
	if (t)
		meta_group_txn_fini(t, n);
	return ret;
}

int zl_meta_snapgroup_create(struct zl_etcd *e, const char *prefix, const char *group,
			     struct zl_snapgroup_member *m, size_t n)
{
	int64_t rev = 0;
	int ret = -ZL_ERR_CONFLICT;

	if (zl_meta_snapgroup_name_check(group) || !m || n < 1 || n > ZL_SNAPGROUP_VOLS_MAX)
		return -ZL_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		if (zl_meta_snap_id_check(m[i].snap_id))
			return -ZL_ERR_INVAL;
		for (size_t k = 0; k < i; k++)
			if (!strcmp(m[i].vol, m[k].vol) || !strcmp(m[i].snap_id, m[k].snap_id))
				return -ZL_ERR_INVAL;
	}
	for (int tries = 0; tries < META_GROUP_TRIES; tries++) {
		ret = meta_group_create_once(e, prefix, group, m, n, &rev);
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
	}
	ZL_LOG_ERR("meta",
		   "group snapshot %s: gave up after %d conflicting attempts (volume records kept "
		   "changing); retry",
		   group, META_GROUP_TRIES);
	return ret;
}

/* ---- the requester: hold, transaction, switch ---- */

static void meta_group_why_set(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void meta_group_why_set(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !why_len || why[0])
		return; /* the first reason stays */
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
}

/* Deletes the requests of this round: a client still holding reads its
 * volume record and releases with the sequence there. */
static void meta_group_release(struct zl_etcd *e, const char *prefix,
			       struct zl_snapgroup_member *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!m[i].served)
			continue;
		zl_meta_snapreq_delete(e, prefix, m[i].vol, m[i].snap_id);
		m[i].served = false;
	}
}

/* Puts "hold" for every served member and waits until each answered
 * "held" (m[i].req then holds the answer and its revision). 0,
 * -ZL_ERR_TIMEOUT, -ZL_ERR_NOT_ATTACHED (a client went away: try again),
 * or the error a client answered. */
static int meta_group_hold(struct zl_etcd *e, const char *prefix, const char *group,
			   struct zl_snapgroup_member *m, size_t n, const char (*vname)[256],
			   uint32_t hold_ms, char *why, size_t why_len)
{
	uint64_t deadline;
	size_t held = 0, served = 0;
	int rc;

	for (size_t i = 0; i < n; i++) {
		struct zl_snapreq q = {0};

		if (!m[i].served)
			continue;
		snprintf(q.vol, sizeof(q.vol), "%s", m[i].vol);
		snprintf(q.id, sizeof(q.id), "%s", m[i].snap_id);
		if (meta_group_member_name(q.name, sizeof(q.name), group, vname[i]))
			return -ZL_ERR_INVAL;
		snprintf(q.state, sizeof(q.state), "%s", ZL_SNAPREQ_HOLD);
		snprintf(q.group, sizeof(q.group), "%s", group);
		q.requested = zl_wall_sec();
		rc = zl_meta_snapreq_put(e, prefix, &q);
		if (rc)
			return rc;
		m[i].req = q;
		m[i].req.mod_rev = 0;
		served++;
	}
	deadline = zl_now_ms() + hold_ms;
	while (held < served) {
		held = 0;
		for (size_t i = 0; i < n; i++) {
			struct zl_snapreq got;

			if (!m[i].served)
				continue;
			if (m[i].req.mod_rev > 0) {
				held++;
				continue;
			}
			rc = zl_meta_snapreq_get(e, prefix, m[i].vol, m[i].snap_id, &got);
			if (rc)
				return rc;
			if (!strcmp(got.state, ZL_SNAPREQ_HELD)) {
				m[i].req = got;
				held++;
				continue;
			}
			if (!strcmp(got.state, ZL_SNAPREQ_FAILED)) {
				meta_group_why_set(why, why_len,
						   "client %s serving volume '%s' could not hold "
						   "its writes (%s)",
						   m[i].writer, vname[i], got.error);
				return -ZL_ERR_BUSY;
			}
			if (zl_meta_snapwriter_get(e, prefix, m[i].vol, NULL, 0) ==
			    -ZL_ERR_NOT_FOUND)
				return -ZL_ERR_NOT_ATTACHED;
		}
		if (held == served)
			break;
		if (zl_now_ms() >= deadline) {
			for (size_t i = 0; i < n; i++)
				if (m[i].served && m[i].req.mod_rev <= 0)
					meta_group_why_set(why, why_len,
							   "client %s serving volume '%s' did not "
							   "hold its writes within %u ms",
							   m[i].writer, vname[i], hold_ms);
			return -ZL_ERR_TIMEOUT;
		}
		usleep(META_GROUP_POLL_MS * 1000u);
	}
	return 0;
}

/* After the transaction: waits (bounded) until every served member's
 * client answered "done" or went away. The snapshot is taken either way: a
 * client still holding when its request is deleted reads the record and
 * releases with the new sequence. */
static void meta_group_wait_done(struct zl_etcd *e, const char *prefix,
				 struct zl_snapgroup_member *m, size_t n, uint32_t timeout_ms)
{
	uint64_t deadline = zl_now_ms() + timeout_ms;

	for (;;) {
		bool all = true;

		for (size_t i = 0; i < n; i++) {
			struct zl_snapreq got;

			if (!m[i].served || m[i].switched)
				continue;
			if (zl_meta_snapreq_get(e, prefix, m[i].vol, m[i].snap_id, &got) ||
			    !strcmp(got.state, ZL_SNAPREQ_DONE) ||
			    zl_meta_snapwriter_get(e, prefix, m[i].vol, NULL, 0) ==
				-ZL_ERR_NOT_FOUND)
				m[i].switched = true;
			else
				all = false;
		}
		if (all)
			return;
		if (zl_now_ms() >= deadline) {
			ZL_LOG_WARN("meta",
				    "group snapshot taken but a serving client did not answer "
				    "'done' within %u ms; its request is deleted and it releases "
				    "with the record's sequence",
				    timeout_ms);
			return;
		}
		usleep(META_GROUP_POLL_MS * 1000u);
	}
}

/* The group exists already: ours (0, *created false) when it holds exactly
 * these volumes, else -ZL_ERR_EXISTS. */
static int meta_group_existing(struct zl_etcd *e, const char *prefix, const char *group,
			       struct zl_snapgroup_member *m, size_t n, char *why, size_t why_len)
{
	struct zl_snapshot *list = NULL;
	size_t k = 0;
	int rc;

	rc = zl_meta_snapgroup_members(e, prefix, group, &list, &k);
	if (rc)
		return rc;
	rc = k == n ? 0 : -ZL_ERR_EXISTS;
	for (size_t i = 0; !rc && i < n; i++) {
		rc = -ZL_ERR_EXISTS;
		for (size_t j = 0; j < k; j++)
			if (!strcmp(list[j].vol, m[i].vol)) {
				m[i].snap = list[j];
				rc = 0;
			}
	}
	if (rc)
		meta_group_why_set(why, why_len,
				   "snapshot group '%s' exists with other volumes (%zu snapshots)",
				   group, k);
	free(list);
	return rc;
}

int zl_meta_snapgroup_take(struct zl_etcd *e, const char *prefix, const char *group,
			   struct zl_snapgroup_member *m, size_t n, uint32_t timeout_ms,
			   bool *created, char *why, size_t why_len)
{
	char(*vname)[256] = NULL;
	uint32_t hold_ms = timeout_ms < META_GROUP_HOLD_MS ? timeout_ms : META_GROUP_HOLD_MS;
	int rc;

	*created = false;
	if (why && why_len)
		why[0] = '\0';
	if (zl_meta_snapgroup_name_check(group) || !m || n < 1 || n > ZL_SNAPGROUP_VOLS_MAX)
		return -ZL_ERR_INVAL;
	vname = calloc(n, sizeof(*vname));
	if (!vname)
		return -ENOMEM;
	/* Resolve every volume (m[i].vol: a name or an id) to its id. */
	for (size_t i = 0; i < n; i++) {
		struct zl_volume v = {0};

		rc = zl_meta_volume_lookup(e, prefix, m[i].vol, &v);
		if (rc) {
			meta_group_why_set(why, why_len, "volume '%s' %s", m[i].vol,
					   rc == -ZL_ERR_NOT_FOUND ? "not found"
								   : "cannot be read");
			goto out;
		}
		snprintf(m[i].vol, sizeof(m[i].vol), "%s", v.id);
		snprintf(vname[i], sizeof(vname[i]), "%s", v.name);
		zl_volume_fini(&v);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(m[k].vol, m[i].vol)) {
				meta_group_why_set(why, why_len, "volume '%s' is named twice",
						   vname[i]);
				rc = -ZL_ERR_INVAL;
				goto out;
			}
	}
	rc = zl_meta_snapgroup_exists(e, prefix, group);
	if (rc == 0) {
		rc = meta_group_existing(e, prefix, group, m, n, why, why_len);
		goto out;
	}
	if (rc != -ZL_ERR_NOT_FOUND)
		goto out;
	for (int round = 0; round < META_GROUP_ROUNDS; round++) {
		for (size_t i = 0; i < n; i++) {
			zl_meta_snap_id_generate(m[i].snap_id);
			memset(&m[i].req, 0, sizeof(m[i].req));
			m[i].switched = false;
			rc = zl_meta_snapwriter_get(e, prefix, m[i].vol, m[i].writer,
						    sizeof(m[i].writer));
			if (rc && rc != -ZL_ERR_NOT_FOUND)
				goto out;
			m[i].served = rc == 0;
			if (!m[i].served)
				m[i].writer[0] = '\0';
		}
		rc = meta_group_hold(e, prefix, group, m, n, (const char(*)[256])vname, hold_ms,
				     why, why_len);
		if (!rc)
			rc = zl_meta_snapgroup_create(e, prefix, group, m, n);
		if (rc) {
			meta_group_release(e, prefix, m, n);
			if (rc == -ZL_ERR_NOT_ATTACHED || rc == -EAGAIN) {
				rc = -ZL_ERR_CONFLICT; /* a client came or went: again */
				continue;
			}
			if (rc == -ZL_ERR_STALE)
				meta_group_why_set(why, why_len,
						   "a serving client gave up its hold before the "
						   "group was taken");
			goto out;
		}
		*created = true;
		meta_group_wait_done(e, prefix, m, n, timeout_ms);
		meta_group_release(e, prefix, m, n);
		goto out;
	}
	meta_group_why_set(why, why_len,
			   "serving clients kept starting or stopping while the group was taken");
out:
	free(vname);
	return rc;
}

int zl_meta_snapgroup_delete(struct zl_etcd *e, const char *prefix, const char *group,
			     size_t *n_deleted)
{
	struct zl_snapshot *list = NULL;
	char key[ZL_META_KEY_MAX];
	size_t k = 0;
	bool exists;
	int rc;

	*n_deleted = 0;
	rc = meta_group_key(key, sizeof(key), prefix, group);
	if (rc)
		return rc;
	rc = zl_meta_snapgroup_exists(e, prefix, group);
	if (rc && rc != -ZL_ERR_NOT_FOUND)
		return rc;
	exists = rc == 0;
	rc = zl_meta_snapgroup_members(e, prefix, group, &list, &k);
	if (rc)
		return rc;
	if (!exists && !k) {
		free(list);
		return -ZL_ERR_NOT_FOUND;
	}
	/* The members first, the group record last: an interrupted removal is
	 * finished by running it again. */
	for (size_t i = 0; i < k; i++) {
		rc = zl_meta_snap_delete(e, prefix, list[i].id, NULL);
		if (rc && rc != -ZL_ERR_NOT_FOUND)
			goto out;
		if (!rc)
			(*n_deleted)++;
	}
	rc = zl_etcd_delete(e, key, NULL, NULL);
	if (!rc)
		ZL_LOG_INFO("meta", "snapshot group deleted group=%s snapshots=%zu", group,
			    *n_deleted);
out:
	free(list);
	return rc;
}
