/* The etcd keyspace (docs/ARCHITECTURE.md): storage nodes, volumes (with their
 * placement table), names, attachments. Values are JSON (jansson). Every
 * read-modify-write is a transaction comparing mod_revision.
 *
 * Keys (prefix default "/zipline/"):
 *   <prefix>nodes/<node-id>        struct zl_node_info, on the node's lease
 *   <prefix>volumes/<vol-id>       struct zl_volume
 *   <prefix>names/<name>           "<vol-id>"
 *   <prefix>attachments/<vol-id>   written by zipline-controller (ControllerPublish)
 */
#ifndef ZL_META_H
#define ZL_META_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "../etcd/etcd.h"

#define ZL_META_DEFAULT_PREFIX "/zipline/"
#define ZL_MAX_REPLICAS 3
#define ZL_NODE_ID_MAX 64
#define ZL_DEFAULT_CHUNK_SIZE (4u << 20)
#define ZL_DEFAULT_SLICES 64

struct zl_node_info {
	char id[ZL_NODE_ID_MAX];
	char addr[64];          /* IP address clients connect to */
	uint16_t port;          /* TCP port */
	uint16_t rdma_port;     /* 0 when no RDMA listener */
	char transports[32];    /* "tcp" or "tcp,rdma" */
	char domain[128];       /* failure domain, e.g. "zone=a,rack=r1"; "" = none */
	uint64_t capacity;      /* bytes */
	uint64_t free;          /* bytes */
	int64_t start_time;     /* unix seconds */
	char version[32];
};

struct zl_slice {
	uint64_t version;                          /* grows whenever the row changes */
	uint8_t n;                                 /* replicas in nodes[] */
	char nodes[ZL_MAX_REPLICAS][ZL_NODE_ID_MAX]; /* preference order */
	bool in_sync[ZL_MAX_REPLICAS];
};

struct zl_volume {
	char id[24];             /* "vol-" + 16 hex */
	uint64_t num;            /* the 64-bit id on the wire */
	char name[256];
	uint64_t size;
	uint32_t chunk_size;
	uint32_t replicas;
	uint32_t n_slices;
	char state[16];          /* "ready", "deleting" */
	int64_t created;         /* unix seconds */
	char params[512];        /* JSON object text of extra parameters, "{}" default */
	struct zl_slice *slices; /* n_slices rows */
	int64_t mod_rev;         /* etcd mod_revision of the record (0 = not stored) */
};

/* Key helpers: write "<prefix>nodes/<id>" etc. into out; return 0 or -ZL_ERR_INVAL
 * (does not fit). */
int zl_meta_key(char *out, size_t len, const char *prefix, const char *kind, const char *id);

/* ---- JSON codecs (also fuzzed) ---- */
/* Returns malloc'd JSON text or NULL on ENOMEM. */
char *zl_meta_node_to_json(const struct zl_node_info *n);
/* Returns 0 or -ZL_ERR_INVAL (malformed or missing fields). */
int zl_meta_node_from_json(const char *json, size_t len, struct zl_node_info *n);
char *zl_meta_volume_to_json(const struct zl_volume *v);
/* Fills *v (v->slices malloc'd; free with zl_volume_fini). 0 or -ZL_ERR_INVAL. */
int zl_meta_volume_from_json(const char *json, size_t len, struct zl_volume *v);

/* ---- record checks ---- */
/* The sanity check of a volume record, the only one in the tree: id and
 * number agree, name, size (a positive multiple of 4096), chunk size (see
 * zl_meta_chunk_size_ok), replicas (1..ZL_MAX_REPLICAS), slice count
 * (1..65536), state, params (a JSON object) and the placement table (n_slices
 * rows, each with a version >= 1 and exactly `replicas` distinct valid node
 * ids; any in_sync subset is valid). Every record lib/meta decodes or writes
 * passes it; a module that holds a record of its own calls it rather than
 * checking fields itself. On failure writes a one-line reason into why
 * (optional; why_len bytes, e.g. "chunk_size=3000 is not a power of two in
 * [65536, 67108864]"). Returns 0 or -ZL_ERR_INVAL. */
int zl_meta_volume_check(const struct zl_volume *v, char *why, size_t why_len);
/* True when chunk_size is a power of two in [ZL_WIRE_MIN_CHUNK, ZL_WIRE_MAX_CHUNK]. */
bool zl_meta_chunk_size_ok(uint64_t chunk_size);

void zl_volume_fini(struct zl_volume *v);
void zl_volume_free(struct zl_volume *v);
/* Deep copy; 0 or -ENOMEM. */
int zl_volume_copy(const struct zl_volume *src, struct zl_volume *dst);

/* Slice of a chunk, and the primary (first in-sync replica) of a slice:
 * index into slice->nodes, or -1 when no replica is in sync. */
static inline uint32_t zl_volume_slice_of(const struct zl_volume *v, uint64_t chunk)
{
	return (uint32_t)(chunk % v->n_slices);
}
int zl_slice_primary(const struct zl_slice *s);
int zl_slice_index_of(const struct zl_slice *s, const char *node_id);

/* ---- nodes ---- */

/* Puts the node record on the lease. 0 or an etcd error. */
int zl_meta_node_put(struct zl_etcd *e, const char *prefix, const struct zl_node_info *n,
		     int64_t lease);
/* All registered (live) nodes, sorted by id. *out malloc'd (NULL when
 * none). Read in pages, so no etcd reply holds the whole keyspace; a
 * malformed record, or one under another id's key, is skipped with a log
 * line. 0, -ENOMEM or an etcd error. */
int zl_meta_node_list(struct zl_etcd *e, const char *prefix, struct zl_node_info **out,
		      size_t *n);
int zl_meta_node_get(struct zl_etcd *e, const char *prefix, const char *id,
		     struct zl_node_info *out);

/* ---- volumes ---- */

struct zl_volume_spec {
	const char *name;
	uint64_t size;          /* bytes, > 0, multiple of 4096 after rounding up */
	uint32_t chunk_size;    /* 0 = default; power of two in [64 KiB, 64 MiB] */
	uint32_t replicas;      /* 0 = default 3; 1..3 */
	uint32_t n_slices;      /* 0 = default: min(64, chunks) */
	const char *params;     /* JSON object text, NULL = "{}" */
};

/* Creates the volume atomically by name: places slices over the live nodes
 * (lib/placement), writes volumes/<id> and names/<name> in one transaction
 * that requires names/<name> to be absent. If the name exists with the same
 * size, chunk size and replicas, returns 0 with the existing volume
 * (*created = false); with other parameters -ZL_ERR_EXISTS. -ZL_ERR_NODES
 * when fewer live nodes than replicas, -ZL_ERR_INVAL for a bad spec. */
int zl_meta_volume_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
			  struct zl_volume *out, bool *created);
/* By id ("vol-...") or, failing that, by name. -ZL_ERR_NOT_FOUND. */
int zl_meta_volume_lookup(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			  struct zl_volume *out);
int zl_meta_volume_get(struct zl_etcd *e, const char *prefix, const char *id,
		       struct zl_volume *out);
/* All volumes sorted by name, read and checked like zl_meta_node_list; *out
 * malloc'd array (NULL when none), free it with zl_meta_volume_list_free. */
int zl_meta_volume_list(struct zl_etcd *e, const char *prefix, struct zl_volume **out, size_t *n);
void zl_meta_volume_list_free(struct zl_volume *vols, size_t n);
/* Writes v back if its record still has v->mod_rev; updates v->mod_rev.
 * -ZL_ERR_CONFLICT when someone else changed it. */
int zl_meta_volume_update(struct zl_etcd *e, const char *prefix, struct zl_volume *v);
/* Deletes volumes/<id>, names/<name> and attachments/<id> in one transaction. */
int zl_meta_volume_delete(struct zl_etcd *e, const char *prefix, const struct zl_volume *v);

/* Drops node_id from the in-sync set of slice `slice` of volume vol_id,
 * bumping the slice version, as a compare-and-swap loop (re-reads on
 * conflict, bounded retries). If the slice version is already beyond
 * `seen_version` and node_id is already out of sync, succeeds without change.
 * Refuses (-ZL_ERR_UNAVAIL) to drop the last in-sync replica. On success *out
 * (optional) gets the fresh volume record. */
int zl_meta_slice_drop(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t slice,
		       const char *node_id, uint64_t seen_version, struct zl_volume *out);

/* ---- volume removal with nodes down (meta_delete.c) ----
 * <prefix>deletes/<node-id>/<vol-id>: tombstone telling that node to remove
 * its replicas of the volume (then it clears the key). */

/* Reads <prefix>attachments/<vol_id>: 0 when the volume is attached (node,
 * optional, gets the node id), -ZL_ERR_NOT_FOUND, or an etcd error. */
int zl_meta_attachment_get(struct zl_etcd *e, const char *prefix, const char *vol_id, char *node,
			   size_t node_len);
/* In one transaction: deletes volumes/<id>, names/<name> (when it still names
 * this volume) and attachments/<id>, and puts a tombstone for every node of
 * v's placement. v must be the current record (v->mod_rev compared). Without
 * force the transaction also requires that no attachment exists. Returns 0,
 * -ZL_ERR_BUSY (attached), -ZL_ERR_CONFLICT (record changed: re-read and
 * retry), -ZL_ERR_INVAL, or an etcd error. */
int zl_meta_volume_remove(struct zl_etcd *e, const char *prefix, const struct zl_volume *v,
			  bool force);
/* Volume numbers of node_id's tombstones (*vols malloc'd, may be NULL when
 * *n is 0); *revision (optional) gets the etcd revision of the read, to
 * start a watch after it. 0 or an etcd error. */
int zl_meta_tombstone_list(struct zl_etcd *e, const char *prefix, const char *node_id,
			   uint64_t **vols, size_t *n, int64_t *revision);
/* Deletes node_id's tombstone of vol_id (0 also when it is absent). */
int zl_meta_tombstone_clear(struct zl_etcd *e, const char *prefix, const char *node_id,
			    const char *vol_id);
/* "<prefix>deletes/<node-id>/" into out (to watch it). 0 or -ZL_ERR_INVAL. */
int zl_meta_tombstone_key(char *out, size_t len, const char *prefix, const char *node_id);

#endif
