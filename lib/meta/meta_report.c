/* Failure reports: <prefix>reports/<vol-id>/<slice>/<reporter>/<peer> =
 * {"peer", "error", "slice_ver", "time"}, each on its reporter's lease.
 * Clients and primaries write them instead of changing a row; the manager
 * reads them and alone decides (docs/REPLICATION.md §2). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "lib/wire/wire.h"
#include "meta_internal.h"

/* The four fields of the value; the rest comes from the key. */
static int meta_report_value_check(const struct zl_report *r, char *why, size_t why_len)
{
	size_t n = strnlen(r->error, sizeof(r->error));

	if (!meta_buf_ok(r->peer, sizeof(r->peer), false) || zl_node_id_check(r->peer))
		return meta_fail(why, why_len, "peer is not 1..%d characters of [A-Za-z0-9._-]",
				 ZL_NODE_ID_MAX - 1);
	if (n == 0 || n >= sizeof(r->error) ||
	    strspn(r->error, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			     "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
		return meta_fail(why, why_len, "error is not 1..%zu characters of [A-Za-z0-9_]",
				 sizeof(r->error) - 1);
	if (r->slice_ver == 0 || r->slice_ver > INT64_MAX)
		return meta_fail(why, why_len, "slice_ver=%" PRIu64 " is not in [1, 2^63)",
				 r->slice_ver);
	if (r->time < 0)
		return meta_fail(why, why_len, "time=%" PRId64 " is negative", r->time);
	return 0;
}

int zl_meta_report_check(const struct zl_report *r, char *why, size_t why_len)
{
	uint64_t num;

	if (!r)
		return meta_fail(why, why_len, "no report");
	if (!meta_buf_ok(r->vol_id, sizeof(r->vol_id), false) || zl_vol_id_parse(r->vol_id, &num))
		return meta_fail(why, why_len, "vol_id is not vol- and 16 hex digits");
	if (r->slice >= ZL_META_MAX_SLICES)
		return meta_fail(why, why_len, "slice=%u is not below %u", r->slice,
				 ZL_META_MAX_SLICES);
	if (!meta_buf_ok(r->reporter, sizeof(r->reporter), false) || zl_node_id_check(r->reporter))
		return meta_fail(why, why_len, "reporter is not 1..%d characters of [A-Za-z0-9._-]",
				 ZL_NODE_ID_MAX - 1);
	return meta_report_value_check(r, why, why_len);
}

char *zl_meta_report_to_json(const struct zl_report *r)
{
	json_t *o;

	if (zl_meta_report_check(r, NULL, 0))
		return NULL;
	o = json_pack("{s:s, s:s, s:I, s:I}", "peer", r->peer, "error", r->error, "slice_ver",
		      (json_int_t)r->slice_ver, "time", (json_int_t)r->time);
	return meta_dump(o);
}

static const struct meta_field meta_report_fields[] = {
    META_STR(struct zl_report, peer, "peer", false),
    META_STR(struct zl_report, error, "error", false),
    META_INT(struct zl_report, slice_ver, "slice_ver", 1, INT64_MAX),
    META_INT(struct zl_report, time, "time", 0, INT64_MAX),
};

static int meta_report_value_check_rec(const void *rec, char *why, size_t why_len)
{
	return meta_report_value_check(rec, why, why_len);
}

static int meta_report_from_json(const char *json, size_t len, struct zl_report *r, char *why,
				 size_t why_len)
{
	return meta_decode_flat(json, len, meta_report_fields, ZL_ARRAY_SIZE(meta_report_fields), r,
				sizeof(*r), meta_report_value_check_rec, why, why_len);
}

int zl_meta_report_from_json(const char *json, size_t len, struct zl_report *r)
{
	return meta_report_from_json(json, len, r, NULL, 0);
}

static int meta_report_key(char *key, size_t len, const char *prefix, const struct zl_report *r)
{
	int n = snprintf(key, len, "%sreports/%s/%u/%s/%s", meta_prefix(prefix), r->vol_id,
			 r->slice, r->reporter, r->peer);

	return n < 0 || (size_t)n >= len ? -ZL_ERR_INVAL : 0;
}

int zl_meta_report_put(struct zl_etcd *e, const char *prefix, const struct zl_report *r,
		       int64_t lease)
{
	char key[ZL_META_KEY_MAX];
	char why[160] = "no lease: a report must expire with its writer";
	char *json;
	int ret;

	if (lease <= 0 || zl_meta_report_check(r, why, sizeof(why))) {
		ZL_LOG_ERR("meta", "refusing to put an invalid failure report: %s", why);
		return -ZL_ERR_INVAL;
	}
	ret = meta_report_key(key, sizeof(key), prefix, r);
	if (ret)
		return ret;
	json = zl_meta_report_to_json(r);
	if (!json)
		return -ENOMEM;
	ret = zl_etcd_put(e, key, json, strlen(json), lease, NULL);
	free(json);
	if (ret)
		ZL_LOG_ERR("meta", "put failure report key=%s failed err=%s detail=\"%s\"", key,
			   zl_errname(ret), zl_etcd_last_error());
	return ret;
}

/* Splits "...reports/<vol>/<slice>/<reporter>/<peer>" into the key fields
 * of r (the rest zeroed) and checks them. 0 or -ZL_ERR_INVAL. */
static int meta_report_parse_key(const char *key, struct zl_report *r, char *why, size_t why_len)
{
	static const char shape[] = "key is not ...reports/<vol>/<slice>/<reporter>/<peer>";
	const char *end = key + strlen(key), *part[5];
	char slice[8], *stop;
	size_t len[5];
	unsigned long n;
	uint64_t num;

	memset(r, 0, sizeof(*r));
	/* The last five components, from the end: reports, vol, slice,
	 * reporter, peer. */
	for (int i = 4; i >= 0; i--) {
		const char *p = end;

		while (p > key && p[-1] != '/')
			p--;
		part[i] = p;
		len[i] = (size_t)(end - p);
		if (i > 0) {
			if (p == key)
				return meta_fail(why, why_len, "%s", shape);
			end = p - 1;
		}
	}
	if (len[0] != 7 || memcmp(part[0], "reports", 7))
		return meta_fail(why, why_len, "%s", shape);
	if (len[1] >= sizeof(r->vol_id) || len[2] >= sizeof(slice) ||
	    len[3] >= sizeof(r->reporter) || len[4] >= sizeof(r->peer))
		return meta_fail(why, why_len, "a component of the key is too long");
	memcpy(r->vol_id, part[1], len[1]);
	memcpy(slice, part[2], len[2]);
	slice[len[2]] = '\0';
	memcpy(r->reporter, part[3], len[3]);
	memcpy(r->peer, part[4], len[4]);
	/* Digits only (strtoul alone would take spaces and signs), no leading
	 * zero: one key per slice. */
	errno = 0;
	n = strtoul(slice, &stop, 10);
	if (!slice[0] || strspn(slice, "0123456789") != len[2] || *stop || errno ||
	    (slice[0] == '0' && slice[1]) || n >= ZL_META_MAX_SLICES)
		return meta_fail(why, why_len, "slice %s in the key is not a slice number", slice);
	r->slice = (uint32_t)n;
	if (zl_vol_id_parse(r->vol_id, &num))
		return meta_fail(why, why_len, "vol_id is not vol- and 16 hex digits");
	if (zl_node_id_check(r->reporter) || zl_node_id_check(r->peer))
		return meta_fail(why, why_len,
				 "reporter or peer is not 1..%d characters of [A-Za-z0-9._-]",
				 ZL_NODE_ID_MAX - 1);
	return 0;
}

int zl_meta_report_parse_key(const char *key, struct zl_report *r)
{
	int ret = key ? meta_report_parse_key(key, r, NULL, 0) : -ZL_ERR_INVAL;

	if (ret)
		memset(r, 0, sizeof(*r));
	return ret;
}

static int meta_report_decode(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len)
{
	struct zl_report *r = rec, key_part;
	int ret = meta_report_parse_key(kv->key, &key_part, why, why_len);

	if (!ret)
		ret = meta_report_from_json(kv->value, kv->value_len, r, why, why_len);
	if (ret)
		return ret;
	if (strcmp(r->peer, key_part.peer))
		return meta_fail(why, why_len, "the value names peer %s, the key %s", r->peer,
				 key_part.peer);
	memcpy(r->vol_id, key_part.vol_id, sizeof(r->vol_id));
	r->slice = key_part.slice;
	memcpy(r->reporter, key_part.reporter, sizeof(r->reporter));
	r->lease = kv->lease;
	r->mod_rev = kv->mod_rev;
	return zl_meta_report_check(r, why, why_len);
}

int zl_meta_report_from_kv(const struct zl_etcd_kv *kv, struct zl_report *r)
{
	int ret = kv && kv->key ? meta_report_decode(kv, r, NULL, 0) : -ZL_ERR_INVAL;

	if (ret)
		memset(r, 0, sizeof(*r));
	return ret;
}

static int meta_report_cmp(const void *a, const void *b)
{
	const struct zl_report *x = a, *y = b;
	int c = strcmp(x->vol_id, y->vol_id);

	if (c)
		return c;
	if (x->slice != y->slice)
		return x->slice < y->slice ? -1 : 1;
	c = strcmp(x->reporter, y->reporter);
	return c ? c : strcmp(x->peer, y->peer);
}

int zl_meta_report_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
			struct zl_report **out, size_t *n)
{
	char kind[64] = "reports";
	struct meta_record_ops ops = {
	    .kind = kind,
	    .what = "failure report",
	    .hint = "delete it with etcdctl (the reporter writes it again if it still fails)",
	    .size = sizeof(struct zl_report),
	    .id_off = offsetof(struct zl_report, peer), /* the key's last component */
	    .decode = meta_report_decode,
	    .cmp = meta_report_cmp,
	};
	uint64_t num;
	void *recs;
	int ret;

	*out = NULL;
	*n = 0;
	if (vol_id) {
		if (zl_vol_id_parse(vol_id, &num))
			return -ZL_ERR_INVAL;
		snprintf(kind, sizeof(kind), "reports/%s", vol_id);
	}
	ret = meta_record_list(e, prefix, &ops, &recs, n);
	*out = recs;
	return ret;
}

int zl_meta_report_delete(struct zl_etcd *e, const char *prefix, const struct zl_report *r)
{
	struct zl_etcd_txn_result res = {0};
	char key[ZL_META_KEY_MAX];
	char why[160];
	bool ok = false;
	int ret;

	if (zl_meta_report_check(r, why, sizeof(why))) {
		ZL_LOG_ERR("meta", "refusing to delete a failure report: %s", why);
		return -ZL_ERR_INVAL;
	}
	ret = meta_report_key(key, sizeof(key), prefix, r);
	if (ret)
		return ret;
	if (r->mod_rev <= 0)
		return zl_etcd_delete(e, key, NULL, NULL);
	/* Only the report that was read; a re-put one stays for the next look. */
	const struct zl_etcd_cmp cmp = {
	    .key = key, .target = ZL_ETCD_CMP_MOD, .result = ZL_ETCD_EQUAL, .rev = r->mod_rev};
	const struct zl_etcd_op del = {.kind = ZL_ETCD_OP_DELETE, .key = key};
	const struct zl_etcd_op get = {.kind = ZL_ETCD_OP_GET, .key = key};
	ret = zl_etcd_txn(e, &cmp, 1, &del, 1, &get, 1, &ok, &res);
	if (ret) {
		ZL_LOG_ERR("meta", "delete failure report key=%s failed err=%s detail=\"%s\"", key,
			   zl_errname(ret), zl_etcd_last_error());
		return ret;
	}
	if (!ok && res.n_gets == 1 && res.gets[0].n > 0)
		ret = -ZL_ERR_CONFLICT; /* still there, at another revision */
	zl_etcd_txn_result_fini(&res);
	return ret;
}
