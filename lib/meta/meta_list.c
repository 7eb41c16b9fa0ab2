/* Records by key: one reader of <prefix><kind>/<id> and one paging lister
 * under <prefix><kind>/, shared by every kind of record (nodes, volumes). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* Keys per etcd range request of a listing. */
#define META_LIST_PAGE 256
/* Bound of the paging loop: 2^20 pages of 256 keys is far beyond any
 * cluster; reaching it means etcd keeps answering "more" without progress. */
#define META_LIST_MAX_PAGES (1u << 20)

/* Decodes kv and checks that the record names the id of its key. 0,
 * -ZL_ERR_INVAL (logged) or another error of ops->decode. */
static int meta_record_decode(const struct meta_record_ops *ops, const struct zl_etcd_kv *kv,
			      void *rec)
{
	const char *key_id = strrchr(kv->key, '/');
	const char *rec_id;
	char why[256] = "";
	int ret;

	memset(rec, 0, ops->size);
	ret = ops->decode(kv, rec, why, sizeof(why));
	if (ret == -ZL_ERR_INVAL) {
		ZL_LOG_ERR("meta", "malformed %s record key=%s%s%s: %s (etcdctl get %s shows it)",
			   ops->what, kv->key, why[0] ? ": " : "", why, ops->hint, kv->key);
		return ret;
	}
	if (ret)
		return ret;
	rec_id = (const char *)rec + ops->id_off;
	if (!key_id || strcmp(key_id + 1, rec_id)) {
		ZL_LOG_ERR("meta", "%s record key=%s holds id=%s: %s", ops->what, kv->key, rec_id,
			   ops->hint);
		if (ops->fini)
			ops->fini(rec);
		memset(rec, 0, ops->size);
		return -ZL_ERR_INVAL;
	}
	return 0;
}

int meta_record_get(struct zl_etcd *e, const char *prefix, const struct meta_record_ops *ops,
		    const char *id, void *rec)
{
	struct zl_etcd_kv kv;
	char key[ZL_META_KEY_MAX];
	int ret;

	ret = zl_meta_key(key, sizeof(key), prefix, ops->kind, id);
	if (ret)
		return ret;
	ret = zl_etcd_get(e, key, &kv);
	if (ret)
		return ret;
	ret = meta_record_decode(ops, &kv, rec);
	zl_etcd_kv_fini(&kv);
	return ret;
}

static void meta_records_free(const struct meta_record_ops *ops, char *recs, size_t n)
{
	if (ops->fini) {
		for (size_t i = 0; i < n; i++)
			ops->fini(recs + i * ops->size);
	}
	free(recs);
}

/* Makes room for `more` records after the first n of *recs. */
static int meta_records_reserve(const struct meta_record_ops *ops, char **recs, size_t *cap,
				size_t n, size_t more)
{
	size_t want = n + more, new_cap = *cap ? *cap : META_LIST_PAGE;
	char *p;

	if (want <= *cap)
		return 0;
	while (new_cap < want)
		new_cap *= 2;
	if (new_cap > SIZE_MAX / ops->size)
		return -ENOMEM;
	p = realloc(*recs, new_cap * ops->size);
	if (!p)
		return -ENOMEM;
	*recs = p;
	*cap = new_cap;
	return 0;
}

int meta_record_list(struct zl_etcd *e, const char *prefix, const struct meta_record_ops *ops,
		     void **out, size_t *n)
{
	struct zl_etcd_range page = {0}, prev = {0};
	char key[ZL_META_KEY_MAX];
	char *recs = NULL;
	size_t cnt = 0, cap = 0;
	unsigned pages = 0;
	int ret;

	*out = NULL;
	*n = 0;
	ret = zl_meta_key(key, sizeof(key), prefix, ops->kind, NULL);
	if (ret)
		return ret;
	do {
		/* The previous page stays alive for its last key, where this one starts. */
		ret = zl_etcd_range_prefix(e, key, prev.n ? prev.kvs[prev.n - 1].key : NULL,
					   META_LIST_PAGE, &page);
		zl_etcd_range_fini(&prev);
		if (ret)
			goto out_free;
		if ((page.more && !page.n) || ++pages > META_LIST_MAX_PAGES) {
			ZL_LOG_ERR("meta",
				   "listing %s: etcd keeps answering more keys without "
				   "progress after %u pages; retry",
				   key, pages);
			ret = -ZL_ERR_ETCD;
			goto out_page;
		}
		ret = meta_records_reserve(ops, &recs, &cap, cnt, page.n);
		if (ret)
			goto out_page;
		for (size_t i = 0; i < page.n; i++) {
			ret = meta_record_decode(ops, &page.kvs[i], recs + cnt * ops->size);
			if (ret == -ZL_ERR_INVAL)
				continue; /* logged; one bad record must not hide the rest */
			if (ret)
				goto out_page;
			cnt++;
		}
		prev = page;
		memset(&page, 0, sizeof(page));
	} while (prev.more);
	zl_etcd_range_fini(&prev);
	if (cnt > 1)
		qsort(recs, cnt, ops->size, ops->cmp);
	if (!cnt) {
		free(recs);
		recs = NULL;
	}
	*out = recs;
	*n = cnt;
	return 0;

out_page:
	zl_etcd_range_fini(&page);
out_free:
	meta_records_free(ops, recs, cnt);
	return ret;
}
