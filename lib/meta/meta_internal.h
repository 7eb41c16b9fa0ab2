/* lib/meta internals shared by its files; not for other modules. */
#ifndef ZL_META_INTERNAL_H
#define ZL_META_INTERNAL_H

#include "meta.h"

/* Upper bound of slices per volume: keeps a record (and a hostile one) small. */
#define ZL_META_MAX_SLICES 65536u
/* Room for "<prefix><kind>/<name>" with the longest name. */
#define ZL_META_KEY_MAX 512

/* Writes the reason of a refusal into why (when why is not NULL) and returns
 * -ZL_ERR_INVAL. */
int meta_fail(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks every field of a node record; 0 or -ZL_ERR_INVAL. */
int meta_node_check(const struct zl_node_info *n);
/* The scalar part of zl_meta_volume_check (size, chunk size, replicas, slice
 * count): what a decoder must know before it sizes the placement table, and
 * what a creation spec must satisfy. 0 or -ZL_ERR_INVAL with why filled. */
int meta_volume_shape_check(const struct zl_volume *v, char *why, size_t why_len);
/* zl_meta_node_from_json with the reason of a refusal in why (optional). */
int meta_node_from_json(const char *json, size_t len, struct zl_node_info *n, char *why,
			size_t why_len);
/* zl_meta_volume_from_json with the reason of a refusal in why (optional). */
int meta_volume_from_json(const char *json, size_t len, struct zl_volume *v, char *why,
			  size_t why_len);
/* prefix NULL means ZL_META_DEFAULT_PREFIX. */
const char *meta_prefix(const char *prefix);

/* ---- records by key (meta_list.c) ---- */

/* One kind of record under <prefix><kind>/<id>: how to decode, release and
 * sort it. */
struct meta_record_ops {
	const char *kind; /* "nodes", "volumes" */
	const char *what; /* "node", "volume": for log lines */
	const char *hint; /* what to do about a malformed record */
	size_t size;	  /* of one decoded record */
	size_t id_off;	  /* offset of its NUL-terminated id, which must equal
			   * the key's last component */
	/* Decodes kv into rec (zeroed): 0, -ZL_ERR_INVAL (malformed, with the
	 * reason in why when known) or another negative error. */
	int (*decode)(const struct zl_etcd_kv *kv, void *rec, char *why, size_t why_len);
	/* Releases what decode allocated in rec; NULL when nothing. */
	void (*fini)(void *rec);
	/* Order of a listing. */
	int (*cmp)(const void *a, const void *b);
};

/* Reads <prefix><kind>/<id> into rec. 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL
 * (bad id, or a malformed record or one that names another id: logged), or an
 * etcd error. */
int meta_record_get(struct zl_etcd *e, const char *prefix, const struct meta_record_ops *ops,
		    const char *id, void *rec);
/* Every record under <prefix><kind>/, read in pages (so no single etcd reply
 * holds the whole keyspace), malformed ones skipped with a log line (one bad
 * record must not hide the others), sorted with ops->cmp. *out gets a malloc'd
 * array of *n records (NULL when none). Pages are read at successive
 * revisions: a record created or deleted during the listing may or may not be
 * in it; none is listed twice. 0, -ENOMEM or an etcd error (*out NULL). */
int meta_record_list(struct zl_etcd *e, const char *prefix, const struct meta_record_ops *ops,
		     void **out, size_t *n);

#endif
