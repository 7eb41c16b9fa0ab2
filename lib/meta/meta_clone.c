/* Clone records (docs/SNAPSHOTS.md §4): a clone is a volume whose record
 * names a parent {vol, seq}; <prefix>dependants/<vol>/<seq>/<clone-id>
 * exists exactly while it does (created with the clone's record, deleted
 * with it or when flatten clears the parent), and the transactions that
 * delete a snapshot or a volume compare its range: a source with dependants
 * never vanishes under a clone. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* Rounds of "read, transaction" of a detach while the record changes. */
#define META_CLONE_TRIES 16
/* An internal snapshot without its clone that old (seconds) is a dead
 * creator's: its creation takes well under that. */
#define META_CLONE_ORPHAN_S 300
/* Dependants a refusal names before "and N more". */
#define META_CLONE_NAMED 4

int meta_dep_key(char *out, size_t len, const char *prefix, const char *vol, uint32_t seq,
		 const char *clone)
{
	uint64_t num;
	int n;

	if (!vol || zl_vol_id_parse(vol, &num) || !clone || zl_vol_id_parse(clone, &num) ||
	    seq < 1 || seq > ZL_WIRE_SEQ_MAX)
		return -ZL_ERR_INVAL;
	n = snprintf(out, len, "%sdependants/%s/%u/%s", meta_prefix(prefix), vol, seq, clone);
	return n < 0 || (size_t)n >= len ? -ZL_ERR_INVAL : 0;
}

int meta_dep_range(char *key, char *end, const char *prefix, const char *vol, uint32_t seq)
{
	uint64_t num;
	int n;

	if (!vol || zl_vol_id_parse(vol, &num) || seq > ZL_WIRE_SEQ_MAX)
		return -ZL_ERR_INVAL;
	/* The trailing '/' keeps seq 1 from covering 12. */
	if (seq)
		n = snprintf(key, ZL_META_KEY_MAX, "%sdependants/%s/%u/", meta_prefix(prefix), vol,
			     seq);
	else
		n = snprintf(key, ZL_META_KEY_MAX, "%sdependants/%s/", meta_prefix(prefix), vol);
	if (n < 0 || n >= ZL_META_KEY_MAX)
		return -ZL_ERR_INVAL;
	zl_etcd_prefix_end(key, end);
	return 0;
}

/* Parses "<seq>/<clone-id>" (what follows dependants/<vol>/). */
static int meta_dep_parse(const char *rest, struct zl_clone_dep *d)
{
	char *slash;
	unsigned long seq;
	uint64_t num;

	seq = strtoul(rest, &slash, 10);
	if (slash == rest || *slash != '/' || seq < 1 || seq > ZL_WIRE_SEQ_MAX ||
	    strlen(slash + 1) >= sizeof(d->clone) || zl_vol_id_parse(slash + 1, &num))
		return -ZL_ERR_INVAL;
	d->seq = (uint32_t)seq;
	snprintf(d->clone, sizeof(d->clone), "%s", slash + 1);
	return 0;
}

int zl_meta_clone_dependants(struct zl_etcd *e, const char *prefix, const char *vol_id,
			     uint32_t seq, struct zl_clone_dep **out, size_t *n)
{
	char key[ZL_META_KEY_MAX], end[ZL_META_KEY_MAX], base[ZL_META_KEY_MAX];
	char base_end[ZL_META_KEY_MAX];
	struct zl_etcd_range r;
	struct zl_clone_dep *deps = NULL;
	size_t k = 0;
	int ret;

	*out = NULL;
	*n = 0;
	ret = meta_dep_range(key, end, prefix, vol_id, seq);
	if (ret)
		return ret;
	meta_dep_range(base, base_end, prefix, vol_id, 0);
	ret = zl_etcd_range(e, key, end, 0, &r);
	if (ret)
		return ret;
	if (r.n) {
		deps = calloc(r.n, sizeof(*deps));
		if (!deps) {
			zl_etcd_range_fini(&r);
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < r.n; i++) {
		struct zl_clone_dep *d = &deps[k];

		if (meta_dep_parse(r.kvs[i].key + strlen(base), d)) {
			ZL_LOG_WARN("meta", "ignoring malformed dependant key=%s", r.kvs[i].key);
			continue;
		}
		snprintf(d->vol, sizeof(d->vol), "%s", vol_id);
		snprintf(d->name, sizeof(d->name), "%.*s", (int)r.kvs[i].value_len,
			 r.kvs[i].value);
		k++;
	}
	zl_etcd_range_fini(&r);
	if (!k) {
		free(deps);
		deps = NULL;
	}
	*out = deps;
	*n = k;
	return 0;
}

int zl_meta_clone_refusal(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t seq,
			  const char *what, char *msg, size_t len)
{
	struct zl_clone_dep *deps;
	size_t n, off;
	int ret;

	if (len)
		msg[0] = '\0';
	ret = zl_meta_clone_dependants(e, prefix, vol_id, seq, &deps, &n);
	if (ret || !n)
		return ret;
	off = (size_t)snprintf(msg, len, "%s has dependant%s: ", what, n == 1 ? "" : "s");
	for (size_t i = 0; i < n && i < META_CLONE_NAMED && off < len; i++)
		off += (size_t)snprintf(msg + off, len - off, "%s%s", i ? ", " : "",
					deps[i].name[0] ? deps[i].name : deps[i].clone);
	if (n > META_CLONE_NAMED && off < len)
		off += (size_t)snprintf(msg + off, len - off, " (and %zu more)",
					n - META_CLONE_NAMED);
	if (off < len)
		snprintf(msg + off, len - off, "; flatten them first (zl volume flatten NAME)");
	free(deps);
	return -ZL_ERR_BUSY;
}

void meta_clone_release(struct zl_etcd *e, const char *prefix, const char *clone_id,
			const char *parent_vol, uint32_t parent_seq)
{
	char name[64];
	struct zl_snapshot s;
	int ret;

	snprintf(name, sizeof(name), "clone-%s", clone_id);
	ret = zl_meta_snap_lookup(e, prefix, name, &s);
	if (ret == -ZL_ERR_NOT_FOUND)
		return; /* a clone of a snapshot, or dropped already */
	if (!ret && (strcmp(s.vol, parent_vol) || s.seq != parent_seq))
		return; /* a user's snapshot of that name: not ours */
	if (!ret)
		ret = zl_meta_snap_delete(e, prefix, s.id, NULL);
	if (ret == -ZL_ERR_BUSY)
		ZL_LOG_INFO("meta",
			    "internal snapshot name=%s of vol=%s stays: another clone reads "
			    "through it",
			    name, parent_vol);
	else if (ret && ret != -ZL_ERR_NOT_FOUND)
		ZL_LOG_WARN("meta",
			    "cannot drop internal snapshot name=%s of vol=%s err=%s: delete it "
			    "with zl snapshot rm %s",
			    name, parent_vol, zl_errname(ret), name);
}

void meta_clone_gc(struct zl_etcd *e, const char *prefix, const char *vol_id, int64_t min_age_s)
{
	struct zl_snapshot *list = NULL;
	int64_t now = zl_wall_sec();
	size_t n = 0;

	if (zl_meta_snap_list(e, prefix, vol_id, &list, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		const struct zl_snapshot *s = &list[i];
		struct zl_volume c = {0};
		const char *cid = s->name + strlen("clone-");
		uint64_t num;
		int rc;

		if (strncmp(s->name, "clone-", 6) || zl_vol_id_parse(cid, &num) ||
		    now - s->created < min_age_s)
			continue;
		rc = zl_meta_volume_get(e, prefix, cid, &c);
		if (rc == 0 && !strcmp(c.parent_vol, s->vol) && c.parent_seq == s->seq) {
			zl_volume_fini(&c);
			continue; /* its clone reads through it */
		}
		zl_volume_fini(&c);
		if (rc && rc != -ZL_ERR_NOT_FOUND)
			continue;
		/* The delete compares the dependant range: a clone that reads it
		 * after all keeps it (BUSY). */
		rc = zl_meta_snap_delete(e, prefix, s->id, NULL);
		ZL_LOG_INFO("meta", "internal snapshot name=%s of vol=%s has no clone: %s", s->name,
			    s->vol, rc ? zl_errname(rc) : "deleted");
	}
	free(list);
}

/* The source of a clone being created: it went away when its snapshot did
 * (a lost transaction then is not worth another round). */
static bool meta_clone_src_gone(struct zl_etcd *e, const char *prefix, void *arg)
{
	const struct zl_snapshot *s = arg;
	struct zl_snapshot now;

	return zl_meta_snap_lookup(e, prefix, s->id, &now) == -ZL_ERR_NOT_FOUND;
}

/* The source volume (the snapshot's, when src_snap is given) and, for a
 * snapshot source, the snapshot. */
static int meta_clone_source(struct zl_etcd *e, const char *prefix, const char *src_vol,
			     const char *src_snap, struct zl_volume *src, struct zl_snapshot *s)
{
	int ret;

	if (src_snap) {
		ret = zl_meta_snap_lookup(e, prefix, src_snap, s);
		if (ret)
			return ret;
		src_vol = s->vol;
	}
	if (!src_vol)
		return -ZL_ERR_INVAL;
	ret = zl_meta_volume_lookup(e, prefix, src_vol, src);
	if (ret)
		return ret;
	if (strcmp(src->state, "ready")) {
		ZL_LOG_INFO("meta", "clone of vol=%s refused: the volume is %s", src->id,
			    src->state);
		zl_volume_fini(src);
		return -ZL_ERR_BUSY;
	}
	return 0;
}

/* The clone's spec: the source's size, chunk size and replicas where the
 * caller left them 0. */
static int meta_clone_spec(const struct zl_volume_spec *spec, const struct zl_volume *src,
			   uint64_t src_size, struct zl_volume_spec *out)
{
	*out = *spec;
	if (!out->size)
		out->size = src_size;
	if (out->size < src_size) {
		ZL_LOG_INFO("meta",
			    "clone name=%s refused: size=%" PRIu64 " is below the source's %" PRIu64,
			    spec->name, spec->size, src_size);
		return -ZL_ERR_RANGE;
	}
	if (!out->chunk_size)
		out->chunk_size = src->chunk_size;
	if (out->chunk_size != src->chunk_size) {
		ZL_LOG_INFO("meta",
			    "clone name=%s refused: chunk_size=%u differs from the source's %u",
			    spec->name, spec->chunk_size, src->chunk_size);
		return -ZL_ERR_INVAL;
	}
	if (out->chunk_size > ZL_WIRE_MAX_IO) {
		/* A copy-up is one whole-chunk write (docs/SNAPSHOTS.md §4). */
		ZL_LOG_INFO("meta",
			    "clone name=%s refused: the source's chunk_size=%u is above %u, the "
			    "largest a clone copies up in one write",
			    spec->name, src->chunk_size, ZL_WIRE_MAX_IO);
		return -ZL_ERR_INVAL;
	}
	if (!out->replicas)
		out->replicas = src->replicas;
	return 0;
}

int zl_meta_clone_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
			 const char *src_vol, const char *src_snap, uint32_t timeout_ms,
			 struct zl_volume *out, bool *created)
{
	char skey[ZL_META_KEY_MAX], dkey[ZL_META_KEY_MAX], sname[64], vid[ZL_VOL_ID_LEN + 1];
	struct zl_volume src = {0}, have = {0};
	struct zl_volume_spec sp;
	struct zl_snapshot s = {0};
	bool internal = false, screated = false, dummy;
	uint64_t num;
	int ret;

	if (!created)
		created = &dummy;
	*created = false;
	if (!spec || !spec->name || zl_volume_name_check(spec->name) || (!src_vol && !src_snap))
		return -ZL_ERR_INVAL;
	ret = meta_clone_source(e, prefix, src_vol, src_snap, &src, &s);
	if (ret)
		return ret;
	ret = meta_clone_spec(spec, &src, src_snap ? s.size : src.size, &sp);
	if (ret)
		goto out_src;

	/* Asked again: the clone of that name is there (of a volume, through
	 * any snapshot: do not take another). */
	ret = zl_meta_volume_lookup(e, prefix, spec->name, &have);
	if (ret == 0) {
		struct meta_volume_extra x = {.parent_vol = src.id};

		zl_volume_fini(&have);
		ret = meta_volume_create(e, prefix, &sp, &x, out, created);
		goto out_check;
	}
	if (ret != -ZL_ERR_NOT_FOUND)
		goto out_src;

	num = zl_random_u64();
	zl_vol_id_format(num, vid);
	if (!src_snap) {
		/* Left by a creator that died between its snapshot and the
		 * clone's record. */
		meta_clone_gc(e, prefix, src.id, META_CLONE_ORPHAN_S);
		snprintf(sname, sizeof(sname), "clone-%s", vid);
		ret = zl_meta_snap_take(e, prefix, &src, sname, timeout_ms, &s, &screated, NULL,
					0);
		if (ret)
			goto out_src;
		internal = true;
	}
	ret = zl_meta_key(skey, sizeof(skey), prefix, "snapshots", s.id);
	if (!ret)
		ret = meta_dep_key(dkey, sizeof(dkey), prefix, s.vol, s.seq, vid);
	if (ret)
		goto out_internal;
	/* The snapshot is still the one read: not deleted meanwhile (its
	 * delete compares the dependant range, so after this one commits it
	 * cannot be). */
	const struct zl_etcd_cmp cmp = {
	    .key = skey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = s.mod_rev};
	const struct zl_etcd_op op = {.kind = ZL_ETCD_OP_PUT,
				      .key = dkey,
				      .value = spec->name,
				      .value_len = strlen(spec->name)};
	struct meta_volume_extra x = {.num = num,
				      .parent_vol = s.vol,
				      .parent_seq = s.seq,
				      .cmps = &cmp,
				      .n_cmps = 1,
				      .ops = &op,
				      .n_ops = 1,
				      .gone = meta_clone_src_gone,
				      .arg = &s};
	ret = meta_volume_create(e, prefix, &sp, &x, out, created);
out_check:
	/* A snapshot source: the clone found must read through that very
	 * snapshot. */
	if (!ret && !*created && src_snap && out->parent_seq != s.seq) {
		ZL_LOG_INFO("meta",
			    "volume name=%s exists as a clone of vol=%s seq=%u; requested of "
			    "snapshot %s (seq %u)",
			    out->name, out->parent_vol, out->parent_seq, s.name, s.seq);
		zl_volume_fini(out);
		ret = -ZL_ERR_EXISTS;
	}
	if (!ret && *created)
		ZL_LOG_INFO("meta", "clone created id=%s name=%s parent=%s seq=%u size=%" PRIu64,
			    out->id, out->name, out->parent_vol, out->parent_seq, out->size);
out_internal:
	/* Our internal snapshot serves no clone unless ours was created. */
	if (internal && !(ret == 0 && *created)) {
		int rc = zl_meta_snap_delete(e, prefix, s.id, NULL);

		if (rc && rc != -ZL_ERR_NOT_FOUND)
			ZL_LOG_WARN("meta",
				    "cannot drop internal snapshot name=%s of vol=%s err=%s: "
				    "delete it with zl snapshot rm %s",
				    s.name, s.vol, zl_errname(rc), s.name);
	}
out_src:
	zl_volume_fini(&src);
	return ret;
}

/* One attempt of a detach: 0, -ZL_ERR_CONFLICT (again) or an error. */
static int meta_clone_detach_once(struct zl_etcd *e, const char *prefix, struct zl_volume *v)
{
	char vkey[ZL_META_KEY_MAX], dkey[ZL_META_KEY_MAX], pvol[24];
	uint32_t pseq = v->parent_seq;
	struct zl_etcd_txn_result res = {0};
	bool ok = false;
	char *json;
	int ret;

	snprintf(pvol, sizeof(pvol), "%s", v->parent_vol);
	if (zl_meta_key(vkey, sizeof(vkey), prefix, "volumes", v->id) ||
	    meta_dep_key(dkey, sizeof(dkey), prefix, pvol, pseq, v->id))
		return -ZL_ERR_INVAL;
	v->parent_vol[0] = '\0';
	v->parent_seq = 0;
	json = zl_meta_volume_to_json(v);
	if (!json)
		return -ENOMEM;
	const struct zl_etcd_cmp cmp = {
	    .key = vkey, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = v->mod_rev};
	const struct zl_etcd_op ops[2] = {
	    {.kind = ZL_ETCD_OP_PUT, .key = vkey, .value = json, .value_len = strlen(json)},
	    {.kind = ZL_ETCD_OP_DELETE, .key = dkey},
	};
	ret = zl_etcd_txn(e, &cmp, 1, ops, 2, NULL, 0, &ok, &res);
	free(json);
	if (ret) {
		ZL_LOG_ERR("meta", "detach clone id=%s failed err=%s detail=\"%s\"", v->id,
			   zl_errname(ret), zl_etcd_last_error());
		return ret;
	}
	if (!ok) {
		zl_etcd_txn_result_fini(&res);
		return -ZL_ERR_CONFLICT;
	}
	v->mod_rev = res.revision;
	zl_etcd_txn_result_fini(&res);
	ZL_LOG_INFO("meta", "clone detached id=%s name=%s parent=%s seq=%u", v->id, v->name, pvol,
		    pseq);
	meta_clone_release(e, prefix, v->id, pvol, pseq);
	return 0;
}

int zl_meta_clone_detach(struct zl_etcd *e, const char *prefix, const char *vol,
			 struct zl_volume *out)
{
	int ret = -ZL_ERR_CONFLICT;

	for (int tries = 0; tries < META_CLONE_TRIES; tries++) {
		struct zl_volume v = {0};

		ret = zl_meta_volume_lookup(e, prefix, vol, &v);
		if (ret)
			return ret;
		ret = v.parent_vol[0] ? meta_clone_detach_once(e, prefix, &v) : 0;
		if (!ret && out)
			*out = v;
		else
			zl_volume_fini(&v);
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
	}
	ZL_LOG_ERR("meta", "detach clone %s: gave up after %d conflicting attempts; retry", vol,
		   META_CLONE_TRIES);
	return ret;
}
