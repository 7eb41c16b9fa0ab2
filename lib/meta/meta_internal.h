/* lib/meta internals shared by its files; not for other modules. */
#ifndef ZL_META_INTERNAL_H
#define ZL_META_INTERNAL_H

#include <stddef.h>

#include <jansson.h>

#include "meta.h"

/* Upper bound of slices per volume: keeps a record (and a hostile one) small. */
#define ZL_META_MAX_SLICES 65536u
/* Room for "<prefix><kind>/<name>" with the longest name. */
#define ZL_META_KEY_MAX 512

/* Writes the reason of a refusal into why (when why is not NULL) and returns
 * -ZL_ERR_INVAL. */
int meta_fail(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks every field of a node record; 0 or -ZL_ERR_INVAL with the reason
 * in why (optional). */
int meta_node_check(const struct zl_node_info *n, char *why, size_t why_len);
/* buf holds a NUL within size bytes (and is not empty unless allowed). */
bool meta_buf_ok(const char *buf, size_t size, bool allow_empty);
/* An id field that may be empty: "" or zl_meta_id_check. */
bool meta_opt_id_ok(const char *buf, size_t size);
/* The enum value of a member state name ("in_sync", "recovering", "out"),
 * or -1. */
int meta_member_state_parse(const char *name);
/* The compact text of o (malloc'd; NULL when o is NULL or on ENOMEM);
 * releases o. */
char *meta_dump(json_t *o);
/* Parses a JSON text with the decoders' rules (no duplicate keys, nothing
 * after the value); NULL when it is not JSON. */
json_t *meta_parse(const char *json, size_t len);
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
/* One field of a record: a string copied into a char buffer of `size` bytes,
 * or an integer in [min, max] stored into an unsigned 16/32-bit or a 64-bit
 * member of `size` bytes. */
struct meta_field {
	const char *name;
	size_t off, size;
	bool is_str, allow_empty;
	bool is_bool; /* a JSON true/false into a bool member */
	int64_t min, max;
	bool optional; /* absent: the member keeps its value (zero or a default) */
};

#define META_FIELD(type, member, field_name)                                                       \
	.name = field_name, .off = offsetof(type, member), .size = sizeof(((type *)0)->member)
#define META_STR(type, member, name, empty_ok)                                                     \
	{                                                                                          \
		META_FIELD(type, member, name), .is_str = true, .allow_empty = empty_ok            \
	}
#define META_INT(type, member, name, lo, hi)                                                       \
	{                                                                                          \
		META_FIELD(type, member, name), .min = lo, .max = hi                               \
	}
/* A string that records of 0.1 lack: absent reads as "". */
#define META_STR_NEW(type, member, name)                                                           \
	{                                                                                          \
		META_FIELD(type, member, name), .is_str = true, .allow_empty = true,               \
						.optional = true                                   \
	}
/* An integer that records of 0.1 lack: absent keeps what the decoder set. */
#define META_INT_NEW(type, member, name, lo, hi)                                                   \
	{                                                                                          \
		META_FIELD(type, member, name), .min = lo, .max = hi, .optional = true             \
	}

/* A boolean that older records lack: absent reads as false. */
#define META_BOOL_NEW(type, member, name)                                                          \
	{                                                                                          \
		META_FIELD(type, member, name), .is_bool = true, .optional = true                  \
	}

/* Decodes field f of object o into rec: 0 or -ZL_ERR_INVAL. */
int meta_get_field(json_t *o, const struct meta_field *f, void *rec);
/* Decodes every field of the table into rec. 0 or -ZL_ERR_INVAL with the
 * field named in why. */
int meta_get_fields(json_t *o, const struct meta_field *f, size_t n, void *rec, char *why,
		    size_t why_len);
/* Checks a decoded record: 0 or -ZL_ERR_INVAL with the reason in why. */
typedef int (*meta_check_fn)(const void *rec, char *why, size_t why_len);
/* Decodes a record that is one JSON object of the n fields f into rec (size
 * bytes, zeroed first) and checks it: 0, or -ZL_ERR_INVAL with the reason in
 * why and rec zeroed. */
int meta_decode_flat(const char *json, size_t len, const struct meta_field *f, size_t n, void *rec,
		     size_t size, meta_check_fn check, char *why, size_t why_len);
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

/* What a clone adds to the creation of its volume record (meta_clone.c):
 * the id (chosen before, to name its internal snapshot; 0 = fresh), the
 * parent, and compares and operations of the creation's transaction (the
 * source snapshot still exists, the dependant key). */
#define META_EXTRA_MAX 4
struct meta_volume_extra {
	uint64_t num;
	const char *parent_vol;
	uint32_t parent_seq;
	const struct zl_etcd_cmp *cmps;
	size_t n_cmps;
	const struct zl_etcd_op *ops;
	size_t n_ops;
	/* After a lost transaction: true when the source is gone (then
	 * -ZL_ERR_NOT_FOUND, not another round). */
	bool (*gone)(struct zl_etcd *e, const char *prefix, void *arg);
	void *arg;
};
/* zl_meta_volume_create with x (NULL: a plain volume). A volume of the name
 * that exists with another parent is -ZL_ERR_EXISTS. */
int meta_volume_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
		       const struct meta_volume_extra *x, struct zl_volume *out, bool *created);

/* meta_clone.c: "<prefix>dependants/<vol>/<seq>/<clone>" into out. 0 or
 * -ZL_ERR_INVAL. */
int meta_dep_key(char *out, size_t len, const char *prefix, const char *vol, uint32_t seq,
		 const char *clone);
/* meta_clone.c: the range of <prefix>dependants/<vol>/ (seq 0) or of
 * <prefix>dependants/<vol>/<seq>/ into key and end (ZL_META_KEY_MAX each). */
int meta_dep_range(char *key, char *end, const char *prefix, const char *vol, uint32_t seq);
/* meta_clone.c: after v (a clone) left the tree or its parent: drops the
 * internal snapshot "clone-<v->id>" of its parent when nothing else needs it
 * (best effort, logged). */
void meta_clone_release(struct zl_etcd *e, const char *prefix, const char *clone_id,
			const char *parent_vol, uint32_t parent_seq);

/* meta_clone.c: deletes vol_id's internal snapshots ("clone-<vol-id>")
 * at least min_age_s old whose clone does not read through them (a
 * creator died between the snapshot and the clone's record; best effort,
 * logged). zl_meta_clone_create of a volume runs it (300 s). */
void meta_clone_gc(struct zl_etcd *e, const char *prefix, const char *vol_id, int64_t min_age_s);

/* meta_snap.c: zl_meta_snap_create; with unserved, the transaction also
 * requires that no client serves the volume (no snapwriters/<vol> key) and
 * answers -EAGAIN when one appeared (meta_snap_take.c then asks it). */
int meta_snap_create(struct zl_etcd *e, const char *prefix, const char *vol, const char *name,
		     const char *id, struct zl_snapshot *out, bool *created,
		     struct zl_volume *vol_out, bool unserved);

#endif
