/* The etcd keyspace (docs/ARCHITECTURE.md): storage nodes, volumes (with their
 * placement table), names, attachments. Values are JSON (jansson). Every
 * read-modify-write is a transaction comparing mod_revision.
 *
 * Keys (prefix default "/zipline/"):
 *   <prefix>nodes/<node-id>        struct zl_node_info, on the node's lease
 *   <prefix>volumes/<vol-id>       struct zl_volume
 *   <prefix>names/<name>           "<vol-id>"
 *   <prefix>attachments/<vol-id>   written by zipline-controller (ControllerPublish)
 *   <prefix>cluster                {"cluster_id", "created"}: written once
 *   <prefix>reports/<vol-id>/<slice>/<reporter-id>/<peer-id>
 *                                  struct zl_report, on the reporter's lease
 *   <prefix>status/<node-id>       struct zl_node_status, on the node's lease
 *   <prefix>snapshots/<snap-id>    struct zl_snapshot (meta_snap.c)
 *   <prefix>snapnames/<name>       "<snap-id>"
 *   <prefix>snapreqs/<vol-id>/<snap-id>  struct zl_snapreq: a snapshot asked of
 *                                  the volume's writing client
 *   <prefix>snapwriters/<vol-id>   the id of the client that takes the volume's
 *                                  snapshots (zl_snapreq), on its lease
 *   <prefix>snapgroups/<group>     {"name", "created", "snaps": [snap-id...]}:
 *                                  a group snapshot (meta_snap_group.c)
 *   <prefix>dependants/<vol-id>/<seq>/<clone-id>  the clone's name: clone-id
 *                                  reads through to vol-id's snapshot seq
 *                                  (meta_clone.c)
 *
 * Records written by 0.1 (no cluster_id/incarnation in node records, no
 * term/states/incarnations/min_size in volume records) decode with the
 * defaults named at each field; what this version writes stays readable by
 * 0.1 (it only adds fields, which 0.1 ignores).
 */
#ifndef ZL_META_H
#define ZL_META_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "../etcd/etcd.h"
#include "../wire/wire.h"

#define ZL_META_DEFAULT_PREFIX "/zipline/"
#define ZL_MAX_REPLICAS 3
#define ZL_NODE_ID_MAX 64
#define ZL_DEFAULT_CHUNK_SIZE (4u << 20)
#define ZL_DEFAULT_SLICES 64
/* Cluster and incarnation ids: ZL_META_ID_LEN lowercase hex digits (128
 * random bits, see zl_meta_id_generate); "" where unknown (0.1 records). */
#define ZL_META_ID_LEN 32
#define ZL_META_ID_SIZE (ZL_META_ID_LEN + 1)
/* Room for an error name in a failure report ("ZL_ERR_TIMEOUT"). */
#define ZL_META_ERROR_NAME_MAX 32
/* Snapshots one volume can hold at once (its record lists their sequences). */
#define ZL_META_SNAPS_MAX 256

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
	/* Identity of the data directory (docs/REPLICATION.md §6); "" in
	 * records of 0.1 or of a daemon that does not know them yet. */
	char cluster_id[ZL_META_ID_SIZE];
	char incarnation[ZL_META_ID_SIZE];
	/* The TCP listener speaks TLS only (zipline-storage --tls-cert;
	 * docs/SECURITY.md); absent in older records: false. */
	bool tls;
	/* HTTP port of the daemon's /metrics, /healthz, /readyz on addr
	 * (zipline-storage --metrics); absent or 0: none. */
	uint16_t metrics_port;
};

/* What a member of a slice is doing (docs/REPLICATION.md §1-4). */
enum zl_member_state {
	ZL_MEMBER_OUT = 0,        /* holds nothing anyone may read; gets no writes */
	ZL_MEMBER_RECOVERING = 1, /* gets every new write and is being copied to;
				   * does not count for acknowledgements */
	ZL_MEMBER_IN_SYNC = 2,    /* holds every acknowledged write */
};

/* One placement row. in_sync[] is the 0.1 field and stays the word on who
 * is in sync: member i is ZL_MEMBER_IN_SYNC exactly when in_sync[i];
 * state[i] tells a member that is not in sync RECOVERING from OUT (any other
 * value reads as OUT). Read and write members with zl_slice_member_state /
 * zl_slice_member_set, which keep the two consistent; code that only knows
 * in_sync[] keeps working. */
struct zl_slice {
	uint64_t version;                          /* grows whenever the row changes */
	uint8_t n;                                 /* replicas in nodes[] */
	char nodes[ZL_MAX_REPLICAS][ZL_NODE_ID_MAX]; /* preference order */
	bool in_sync[ZL_MAX_REPLICAS];
	/* Bumped (by the manager) whenever the row's primary changes: the high
	 * half of every data version the primary assigns. 0 = not set, written
	 * as 1; 0.1 records decode as 1. */
	uint32_t term;
	uint8_t state[ZL_MAX_REPLICAS];            /* enum zl_member_state */
	/* The incarnation of each member's data directory when it was placed
	 * or last changed; "" = unknown (0.1 records, nodes without one). */
	char incarnation[ZL_MAX_REPLICAS][ZL_META_ID_SIZE];
};

/* Per-volume client I/O limits (issue 26; docs/ARCHITECTURE.md "Per-volume
 * QoS"), one X-macro table: X(enum suffix, JSON name in the record's
 * "qos" object, StorageClass / ModifyVolume parameter, zl volume flag, true
 * for bytes/s). A rate of 0 is unlimited; the burst of a rate (the same
 * entry 4 places later) is how many I/Os or bytes may go at once after an
 * idle time, 0 = a tenth of a second of the rate (at least one I/O). */
#define ZL_QOS_KEYS(X)                                                                             \
	X(READ_IOPS, "read_iops", "readIops", "read-iops", false)                                  \
	X(WRITE_IOPS, "write_iops", "writeIops", "write-iops", false)                              \
	X(READ_BPS, "read_bps", "readBps", "read-bps", true)                                       \
	X(WRITE_BPS, "write_bps", "writeBps", "write-bps", true)                                   \
	X(READ_IOPS_BURST, "read_iops_burst", "readIopsBurst", "burst-read-iops", false)           \
	X(WRITE_IOPS_BURST, "write_iops_burst", "writeIopsBurst", "burst-write-iops", false)       \
	X(READ_BPS_BURST, "read_bps_burst", "readBpsBurst", "burst-read-bps", true)                \
	X(WRITE_BPS_BURST, "write_bps_burst", "writeBpsBurst", "burst-write-bps", true)

enum zl_qos {
#define ZL_QOS_ENUM(e, json, param, flag, bytes) ZL_QOS_##e,
	ZL_QOS_KEYS(ZL_QOS_ENUM)
#undef ZL_QOS_ENUM
	ZL_QOS_N
};
/* The four rates come first; the burst of rate k is ZL_QOS_BURST(k). */
#define ZL_QOS_RATES	 4
#define ZL_QOS_BURST(k) ((k) + ZL_QOS_RATES)
/* The largest value of a limit (it is a JSON integer). */
#define ZL_QOS_MAX	 ((uint64_t)INT64_MAX)
/* The largest per-volume io_timeout, seconds (a week). */
#define ZL_META_IO_TIMEOUT_MAX 604800u

struct zl_qos_key {
	const char *json;  /* "read_iops" */
	const char *param; /* "readIops" */
	const char *flag;  /* "read-iops" */
	bool bytes;	   /* bytes/s (or bytes), else I/Os */
};
/* Indexed by enum zl_qos. */
extern const struct zl_qos_key zl_qos_keys[ZL_QOS_N];

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
	/* Copies that must hold a write before it is acknowledged, 1..replicas;
	 * 0 = the default (zl_meta_min_size_default), which is also what a 0.1
	 * record without it decodes to. Read it with zl_volume_min_size. */
	uint32_t min_size;
	/* Client I/O limits, indexed by enum zl_qos (0 = unlimited / default
	 * burst); JSON "qos": an object of the non-zero ones, absent in older
	 * records (all unlimited). */
	uint64_t qos[ZL_QOS_N];
	/* JSON "io_timeout": seconds a client I/O waits for membership to
	 * settle (docs/REPLICATION.md §2), 1..ZL_META_IO_TIMEOUT_MAX; 0 or
	 * absent = the client's own (zl_client_opts.io_timeout_s). */
	uint32_t io_timeout_s;
	/* Snapshots (docs/SNAPSHOTS.md §1). JSON "snap_seq": the sequence every
	 * write carries, 1..ZL_WIRE_SEQ_MAX; 0 or absent = never snapshotted.
	 * JSON "snaps": the sequences of the snapshots that exist, strictly
	 * ascending, each in [1, snap_seq]; absent = none. */
	uint32_t snap_seq;
	uint32_t n_snaps;
	uint32_t snaps[ZL_META_SNAPS_MAX];
	/* A clone's source (docs/SNAPSHOTS.md §4): JSON "parent": {"vol": the
	 * source volume's id, "seq": the source's snapshot sequence, >= 1};
	 * absent ("" and 0) for a volume that is no clone or was flattened. */
	char parent_vol[24];
	uint32_t parent_seq;
};

/* Key helpers: write "<prefix>nodes/<id>" etc. into out; return 0 or -ZL_ERR_INVAL
 * (does not fit). */
int zl_meta_key(char *out, size_t len, const char *prefix, const char *kind, const char *id);

/* ---- JSON codecs (also fuzzed) ---- */
/* Returns malloc'd JSON text, or NULL for an invalid record or on ENOMEM. */
char *zl_meta_node_to_json(const struct zl_node_info *n);
/* Returns 0 or -ZL_ERR_INVAL (malformed or missing fields; cluster_id and
 * incarnation may be absent, as in 0.1 records). */
int zl_meta_node_from_json(const char *json, size_t len, struct zl_node_info *n);
/* Returns malloc'd JSON text, or NULL when v fails zl_meta_volume_check or
 * on ENOMEM. Writes min_size and each row's term, states and incarnations
 * (with 0.1's nodes and in_sync). */
char *zl_meta_volume_to_json(const struct zl_volume *v);
/* Fills *v (v->slices malloc'd; free with zl_volume_fini). 0 or -ZL_ERR_INVAL. */
int zl_meta_volume_from_json(const char *json, size_t len, struct zl_volume *v);

/* ---- record checks ---- */
/* The sanity check of a volume record, the only one in the tree: id and
 * number agree, name, size (a positive multiple of 4096), chunk size (see
 * zl_meta_chunk_size_ok), replicas (1..ZL_MAX_REPLICAS), slice count
 * (1..65536), min_size (0 = default, else 1..replicas), limits (qos, each
 * <= ZL_QOS_MAX), io_timeout (<= ZL_META_IO_TIMEOUT_MAX), state, params (a JSON
 * object) and the placement table (n_slices rows, each with a version >= 1
 * and exactly `replicas` distinct valid node ids, member states of enum
 * zl_member_state, incarnations "" or zl_meta_id_check; any in_sync subset is
 * valid, any term too). Every record lib/meta decodes or writes
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

/* Slice of a chunk id among n_slices: a clone chunk (hi << 40 | chunk,
 * docs/SNAPSHOTS.md §2) lives in its chunk's slice. The one computation of
 * a slice; zl_volume_slice_of for a volume record. */
static inline uint32_t zl_slice_of_id(uint64_t id, uint32_t n_slices)
{
	return (uint32_t)((id & ((1ull << ZL_WIRE_CHUNK_IDX_BITS) - 1)) % n_slices);
}

/* Slice of a chunk, and the primary (first in-sync replica) of a slice:
 * index into slice->nodes, or -1 when no replica is in sync. */
static inline uint32_t zl_volume_slice_of(const struct zl_volume *v, uint64_t chunk)
{
	return zl_slice_of_id(chunk, v->n_slices);
}
int zl_slice_primary(const struct zl_slice *s);
int zl_slice_index_of(const struct zl_slice *s, const char *node_id);
/* The state of member i (0 <= i < s->n): IN_SYNC when s->in_sync[i], else
 * RECOVERING or OUT from s->state[i]. */
enum zl_member_state zl_slice_member_state(const struct zl_slice *s, int i);
/* Sets member i's state (in_sync[i] and state[i] together). */
void zl_slice_member_set(struct zl_slice *s, int i, enum zl_member_state st);
/* Members of s in state st. */
int zl_slice_member_count(const struct zl_slice *s, enum zl_member_state st);
/* "in_sync", "recovering", "out" (the JSON names); "?" for other values. */
const char *zl_member_state_name(enum zl_member_state st);
/* The default min_size: 2 for 3 replicas, 1 for 1 and 2 (docs/REPLICATION.md
 * §2). */
uint32_t zl_meta_min_size_default(uint32_t replicas);
/* v->min_size, or the default when it is 0. */
uint32_t zl_volume_min_size(const struct zl_volume *v);

/* ---- ids ---- */

/* 0 when s is ZL_META_ID_LEN lowercase hex digits, else -ZL_ERR_INVAL. */
int zl_meta_id_check(const char *s);
/* Writes a fresh random id (ZL_META_ID_LEN hex digits and a NUL) into out. */
void zl_meta_id_generate(char out[ZL_META_ID_SIZE]);

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

/* A slice whose row names the publishing node primary in a term it has not
 * peered in yet: its client I/O waits (docs/REPLICATION.md §3). */
struct zl_status_peering {
	uint64_t vol; /* "vol": the volume id ("vol-" + 16 hex digits) */
	uint32_t slice;
	uint32_t term; /* the row's term, >= 1 */
};
/* Entries a status record lists; a node peering more lists that many and
 * counts all in peering_slices. */
#define ZL_STATUS_PEERING_MAX 256

/* The space a node's clone chunk files hold for one snapshot of a volume
 * (docs/SNAPSHOTS.md §6): the clones whose newest existing reader is
 * snapshot seq, and the bytes their files allocate (st_blocks * 512). */
struct zl_status_snap {
	uint64_t vol; /* "vol": the volume id */
	uint32_t seq; /* "seq", >= 1 */
	uint32_t clones;
	uint64_t bytes;
};
/* Entries a status record lists: the first by (vol, seq); snap_entries
 * counts all, snap_bytes sums all. */
#define ZL_STATUS_SNAP_MAX 256

/* Recovery progress a storage daemon publishes (zl status: rate, ETA), and
 * the slices it is peering (zl volume inspect: state "peering"). */
struct zl_node_status {
	char node[ZL_NODE_ID_MAX];
	uint64_t bytes_done; /* "recovering_bytes_done": copied by running recoveries */
	uint64_t bytes_left; /* "recovering_bytes_left": estimate of what they still copy */
	uint64_t rate;	     /* bytes/s, recent */
	uint32_t recovering; /* (slice, member) recoveries running on this primary */
	int64_t time;	     /* unix seconds of the sample */
	/* "peering_slices" (absent in older records: 0): slices peering, listed
	 * or not; "peering": n_peering entries, sorted by (vol, slice), no
	 * duplicates, n_peering <= min(peering_slices, ZL_STATUS_PEERING_MAX). */
	uint32_t peering_slices;
	uint32_t n_peering;
	struct zl_status_peering peering[ZL_STATUS_PEERING_MAX];
	/* The chunk store (absent in older records: 0). "chunk_writes": writes
	 * and zeroings applied since start; "durable_ios": the disk writes a
	 * disk must flush for (RWF_DSYNC writes, fdatasyncs, journal records
	 * and superblocks). "journal_size" 0: the direct write path; else the
	 * journal's bytes, "journal_used" the ring bytes not checkpointed,
	 * "journal_dirty_chunks" the chunks a checkpoint still has to sync,
	 * "journal_checkpoints" and "journal_waits" (writes that waited for
	 * space) since start. */
	uint64_t chunk_writes, durable_ios;
	uint64_t journal_size, journal_used, journal_checkpoints, journal_waits;
	uint32_t journal_dirty_chunks;
	/* "disk_error" (absent in older records, and while the disk is fine:
	 * ""): why the daemon stopped acknowledging writes, e.g. "data
	 * directory /x was removed" (storage/storage_ddir.c). Non-empty: the
	 * disk failed; the manager moves the node's members out and places
	 * nothing on it. */
	char disk_error[128];
	/* "disk_full" (absent in older records, and while there is room:
	 * false): the data dir is full, writes that need new space fail NOSPC
	 * and recovery to the node waits for room (storage_chunk.c op_room). */
	bool disk_full;
	/* "disk_near_full" (absent in older records, and while there is more
	 * room: false): free space within 64 MiB of what the chunk store keeps
	 * (zl_chunk_store_tight, true while disk_full too): slices with too
	 * few members with room refuse writes that need new space
	 * (docs/REPLICATION.md §9). */
	bool disk_near_full;
	/* Snapshot space (absent in older records: 0): "snapshot_bytes" what
	 * every clone chunk file of the node allocates; "snapshots" n_snap
	 * entries sorted by (vol, seq), no duplicates, n_snap <=
	 * min(snap_entries = "snapshot_entries", ZL_STATUS_SNAP_MAX). */
	uint64_t snap_bytes;
	uint32_t snap_entries;
	uint32_t n_snap;
	struct zl_status_snap snap[ZL_STATUS_SNAP_MAX];
};

/* JSON codec (fuzzed): to_json NULL for an invalid record or ENOMEM;
 * from_json 0 or -ZL_ERR_INVAL. */
char *zl_meta_status_to_json(const struct zl_node_status *s);
int zl_meta_status_from_json(const char *json, size_t len, struct zl_node_status *s);
/* Puts <prefix>status/<s->node> on lease. 0, -ZL_ERR_INVAL or an etcd error. */
int zl_meta_status_put(struct zl_etcd *e, const char *prefix, const struct zl_node_status *s,
		       int64_t lease);
/* The record of node in st[0..n) (a zl_meta_status_list), NULL if none. */
const struct zl_node_status *zl_meta_status_find(const struct zl_node_status *st, size_t n,
						 const char *node);
/* Every status record, sorted by node, read like zl_meta_node_list. */
int zl_meta_status_list(struct zl_etcd *e, const char *prefix, struct zl_node_status **out,
			size_t *n);

/* ---- volumes ---- */

struct zl_volume_spec {
	const char *name;
	uint64_t size;          /* bytes, > 0, multiple of 4096 after rounding up */
	uint32_t chunk_size;    /* 0 = default; power of two in [64 KiB, 64 MiB] */
	uint32_t replicas;      /* 0 = default 3; 1..3 */
	uint32_t n_slices;      /* 0 = default: min(64, chunks) */
	const char *params;     /* JSON object text, NULL = "{}" */
	uint32_t min_size;      /* 0 = default (zl_meta_min_size_default); 1..replicas */
	uint64_t qos[ZL_QOS_N]; /* client I/O limits, as in struct zl_volume */
	uint32_t io_timeout_s;  /* 0 = the client's own */
};

/* Creates the volume atomically by name: places slices over the live nodes
 * (lib/placement), writes volumes/<id> and names/<name> in one transaction
 * that requires names/<name> to be absent. Every row starts at version 1,
 * term 1, all members in sync with the incarnation their node record names.
 * If the name exists with the same size, chunk size and replicas (and
 * min_size, when the spec gives one), returns 0 with the existing volume
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
/* The largest size a volume grows to (ZL_VMOD_SIZE) and the CSI controller
 * creates (1 PiB). */
#define ZL_META_SIZE_MAX (1ull << 50)
/* What zl_meta_volume_modify changes: the knobs whose bit is in mask, and
 * the size. */
#define ZL_VMOD_MIN_SIZE   (1u << 0)
#define ZL_VMOD_IO_TIMEOUT (1u << 1)
#define ZL_VMOD_QOS(k)	   (1u << (2 + (k)))
#define ZL_VMOD_SIZE	   (1u << (2 + ZL_QOS_N))
/* Not a change: name_or_id is a volume id, never looked up as a name (a
 * CSI volume_id; a volume may be named like another's id). */
#define ZL_VMOD_BY_ID	   (1u << 31)
struct zl_volume_mod {
	uint32_t mask;
	uint32_t min_size;	/* 1..replicas */
	uint32_t io_timeout_s;	/* 0 = the client's own */
	uint64_t qos[ZL_QOS_N]; /* 0..ZL_QOS_MAX */
	/* Bytes, rounded up to a multiple of ZL_BLOCK_SIZE; never below the
	 * volume's size, at most ZL_META_SIZE_MAX. */
	uint64_t size;
};
/* The knobs of a volume a user sets by name: the limits of zl_qos_keys,
 * then "iops", "bps", "iopsBurst" and "bpsBurst" (read and write together),
 * "minSize" and "ioTimeout". Names are the StorageClass parameter and the
 * zl volume flag. */
enum zl_knob {
	ZL_KNOB_IOPS = ZL_QOS_N,
	ZL_KNOB_BPS,
	ZL_KNOB_IOPS_BURST,
	ZL_KNOB_BPS_BURST,
	ZL_KNOB_MIN_SIZE,
	ZL_KNOB_IO_TIMEOUT,
	ZL_KNOB_N
};
/* The knob named param ("readIops") or flag ("read-iops"); -1 when none. */
int zl_knob_by_param(const char *param);
int zl_knob_by_flag(const char *flag);
const char *zl_knob_param(int knob);
const char *zl_knob_flag(int knob);
/* What a value of the knob is, for messages: "an integer number of I/Os per
 * second, 0 = unlimited". */
const char *zl_knob_syntax(int knob);
/* Parses value (I/Os, seconds and copies: a decimal integer; bytes: also
 * with K/M/G/T suffixes, powers of 1024) into mod and sets its mask bits.
 * The range is checked (min_size 1..ZL_MAX_REPLICAS: against the volume's
 * replicas when it is applied). 0 or -ZL_ERR_INVAL. */
int zl_volume_mod_parse(struct zl_volume_mod *mod, int knob, const char *value);
/* Writes the list of knob names ("readIops, writeIops, ...") for messages
 * into out (len bytes, truncated); flags true: the zl flags ("--read-iops,
 * ..."). Returns out. */
char *zl_knob_names(bool flags, char *out, size_t len);

/* Changes the knobs and the size of mod on a running volume (by id or
 * name, by id only with ZL_VMOD_BY_ID): a compare-and-swap on its record's mod_revision, read again and
 * retried (8 tries) when someone else changed it meanwhile (a slice row, a
 * knob, another resize). The daemons apply min_size from their volume
 * watch, open clients their limits and io_timeout from theirs; a grown size
 * reaches the storage daemons through their volumes/ watch (and a request
 * past the end they know reloads the record) and open clients through
 * their record watch (ControllerExpandVolume, zl volume resize). A size
 * equal to the volume's changes nothing, in any state; a larger one needs
 * the state "ready". Nothing is written when the record would not change.
 * before and after (optional) get the record as read (last read; zeroed
 * when no read succeeded) and as written, without the placement (slices
 * NULL). Returns 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL (a value out of range,
 * e.g. min_size above the volume's replicas: before tells them),
 * -ZL_ERR_RANGE (the size is below the volume's — before has it — or above
 * ZL_META_SIZE_MAX), -ZL_ERR_BUSY (growing a volume that is not "ready",
 * e.g. "deleting"), -ZL_ERR_CONFLICT (it kept changing) or an etcd error;
 * on an error nothing of mod is written. */
int zl_meta_volume_modify(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			  const struct zl_volume_mod *mod, struct zl_volume *before,
			  struct zl_volume *after);
/* Deletes volumes/<id>, names/<name> and attachments/<id> in one transaction. */
int zl_meta_volume_delete(struct zl_etcd *e, const char *prefix, const struct zl_volume *v);

/* ---- slice rows: compare-and-swap on the slice version ----
 *
 * Both functions below read the volume record, require slice `slice` to be
 * at version seen_version, and write the changed row back with the version
 * bumped to seen_version + 1 in one etcd transaction that compares the
 * record's mod_revision (so the slice version is compared too: a record
 * whose slice moved on has another mod_revision). When the record changed
 * only in other slices, they re-read and try again (bounded). Of two calls
 * with the same seen_version at most one succeeds; the other gets
 * -ZL_ERR_STALE. Every written row keeps these rules (else -ZL_ERR_INVAL,
 * logged): the term never goes back, and it grows whenever the primary (the
 * first in-sync member: node id and incarnation) changes, so data versions
 * of a new primary beat every older one. */

/* Drops node_id from the in-sync set of slice `slice` of volume vol_id (its
 * state becomes ZL_MEMBER_OUT), bumping the slice version and, when node_id
 * was the primary, the term. Succeeds without change when node_id is already
 * not in sync at seen_version. Returns 0, -ZL_ERR_STALE when the slice is no
 * longer (or not) at seen_version — nobody is dropped then: the caller acted
 * on an old row and must reload it and decide again —, -ZL_ERR_UNAVAIL when
 * node_id is the last in-sync member (it is never dropped),
 * -ZL_ERR_INVAL (bad vol_id, node_id or slice), -ZL_ERR_NOT_FOUND,
 * -ZL_ERR_CONFLICT (the record kept changing under us; retry) or an etcd
 * error. On success *out (optional) gets the fresh volume record. To be
 * replaced by failure reports (zl_meta_report_put) and the manager's
 * zl_meta_slice_set. */
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
/* The manager's write of a whole row: replaces slice `slice` of vol_id with
 * *new_row (its version is ignored: the row is written at seen_version + 1;
 * a term of 0 means "the current term, plus one if the primary changes").
 * new_row must have `replicas`
 * distinct members, at least one of them in sync, and obey the term rule
 * above. Returns 0 (*out, optional, gets the fresh record), -ZL_ERR_STALE
 * (slice not at seen_version: nothing written), -ZL_ERR_UNAVAIL (no member
 * in sync), -ZL_ERR_INVAL (bad arguments, an invalid row or a term that goes
 * back or stays while the primary changes; the reason is logged),
 * -ZL_ERR_NOT_FOUND, -ZL_ERR_CONFLICT or an etcd error. */
int zl_meta_slice_set(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t slice,
		      uint64_t seen_version, const struct zl_slice *new_row, struct zl_volume *out);

/* ---- cluster identity: <prefix>cluster ---- */

struct zl_cluster_info {
	char id[ZL_META_ID_SIZE]; /* ZL_META_ID_LEN hex digits */
	int64_t created;          /* unix seconds */
};

/* JSON codec of the cluster record {"cluster_id", "created"} (fuzzed).
 * to_json: malloc'd text, NULL for an invalid record or ENOMEM. from_json: 0
 * or -ZL_ERR_INVAL (malformed, a bad id or a negative time). */
char *zl_meta_cluster_to_json(const struct zl_cluster_info *c);
int zl_meta_cluster_from_json(const char *json, size_t len, struct zl_cluster_info *c);
/* Returns the cluster's identity, creating it (a fresh id, created = now)
 * when absent, in one transaction that puts the record only if the key was
 * never created (create_revision == 0), so concurrent callers all get the
 * same id. *created (optional) tells whether this call created it. 0,
 * -ZL_ERR_INVAL (a malformed record is there: logged with what to do), or
 * an etcd error. */
int zl_meta_cluster_ensure(struct zl_etcd *e, const char *prefix, struct zl_cluster_info *out,
			   bool *created);
/* Reads the cluster record: 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL (malformed,
 * logged) or an etcd error. */
int zl_meta_cluster_get(struct zl_etcd *e, const char *prefix, struct zl_cluster_info *out);

/* ---- failure reports: <prefix>reports/<vol>/<slice>/<reporter>/<peer> ----
 *
 * A client or primary that failed to reach a peer of a slice says so here,
 * on its own short lease, instead of changing the row; the manager reads the
 * reports (plus node leases) and decides. One report per (slice, reporter,
 * peer): a newer one replaces it. The value is {"peer", "error",
 * "slice_ver", "time"}; the other fields come from the key. A manager that
 * watches them: zl_etcd_watch_prefix on zl_meta_key(.., "reports", NULL),
 * zl_meta_report_from_kv on puts, zl_meta_report_parse_key on deletes. */
struct zl_report {
	char vol_id[24];                      /* "vol-" + 16 hex */
	uint32_t slice;
	char reporter[ZL_NODE_ID_MAX];        /* node or client id (zl_node_id_check) */
	char peer[ZL_NODE_ID_MAX];            /* the member that failed */
	char error[ZL_META_ERROR_NAME_MAX];   /* zl_errname() of what the reporter saw */
	uint64_t slice_ver;                   /* row version the reporter acted on, >= 1 */
	int64_t time;                         /* unix seconds, >= 0 */
	int64_t lease;                        /* set by zl_meta_report_list */
	int64_t mod_rev;                      /* set by zl_meta_report_list */
};

/* JSON codec of a report's value (fuzzed): to_json writes peer, error,
 * slice_ver and time (NULL for an invalid report or ENOMEM); from_json fills
 * those four and zeroes the rest: 0 or -ZL_ERR_INVAL. */
char *zl_meta_report_to_json(const struct zl_report *r);
int zl_meta_report_from_json(const char *json, size_t len, struct zl_report *r);
/* Checks every field but lease and mod_rev; 0 or -ZL_ERR_INVAL with a
 * one-line reason in why (optional). */
int zl_meta_report_check(const struct zl_report *r, char *why, size_t why_len);
/* Fills vol_id, slice, reporter and peer of *r (the rest zeroed) from a
 * report key "...reports/<vol>/<slice>/<reporter>/<peer>" — what a watch on
 * <prefix>reports/ sees, also for a delete. 0 or -ZL_ERR_INVAL (fuzzed). */
int zl_meta_report_parse_key(const char *key, struct zl_report *r);
/* Decodes a stored report (key and value, e.g. of a watch event): every
 * field, lease and mod_rev from kv. 0 or -ZL_ERR_INVAL (malformed, or the
 * value names another peer than the key). */
int zl_meta_report_from_kv(const struct zl_etcd_kv *kv, struct zl_report *r);
/* Puts the report on lease (> 0: a report must go away with its writer).
 * 0, -ZL_ERR_INVAL (invalid report or no lease; logged) or an etcd error. */
int zl_meta_report_put(struct zl_etcd *e, const char *prefix, const struct zl_report *r,
		       int64_t lease);
/* The reports of volume vol_id, or of every volume when vol_id is NULL,
 * sorted by volume, slice, reporter and peer, read in pages; malformed ones
 * are skipped with a log line. *out malloc'd (NULL when none). 0,
 * -ZL_ERR_INVAL (bad vol_id), -ENOMEM or an etcd error. */
int zl_meta_report_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
			struct zl_report **out, size_t *n);
/* Deletes the report of (vol_id, slice, reporter, peer). With r->mod_rev > 0
 * only if it is still that revision (a report re-put since it was read
 * stays): -ZL_ERR_CONFLICT then. Deleting an absent report succeeds. 0,
 * -ZL_ERR_INVAL or an etcd error. */
int zl_meta_report_delete(struct zl_etcd *e, const char *prefix, const struct zl_report *r);

/* ---- rebalance requests: <prefix>rebalance/<vol-id> ----
 *
 * `zl volume rebalance` (or an operator) asks the manager to spread the
 * volume's members evenly over the live nodes (docs/REPLICATION.md §5). The
 * value is {"requested", "by"}; vol_id comes from the key. The manager
 * deletes the record once the volume is balanced (max - min members per
 * live node <= 1). */
struct zl_rebalance_req {
	char vol_id[24];             /* "vol-" + 16 hex */
	int64_t requested;           /* unix seconds, >= 0 */
	char by[ZL_NODE_ID_MAX];     /* who asked (zl_node_id_check: "zl-cli", a host) */
	int64_t mod_rev;             /* set by get/list */
};

/* JSON codec of the value (fuzzed): to_json writes requested and by (NULL for
 * an invalid request or ENOMEM); from_json fills those two and zeroes the
 * rest: 0 or -ZL_ERR_INVAL. */
char *zl_meta_rebalance_to_json(const struct zl_rebalance_req *r);
int zl_meta_rebalance_from_json(const char *json, size_t len, struct zl_rebalance_req *r);
/* Checks vol_id, requested and by: 0 or -ZL_ERR_INVAL with the reason in why
 * (optional). */
int zl_meta_rebalance_check(const struct zl_rebalance_req *r, char *why, size_t why_len);
/* Puts the request (no lease: it stays until the manager is done). 0,
 * -ZL_ERR_INVAL (logged) or an etcd error. */
int zl_meta_rebalance_put(struct zl_etcd *e, const char *prefix, const struct zl_rebalance_req *r);
/* Reads the request of vol_id: 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL or an etcd
 * error. */
int zl_meta_rebalance_get(struct zl_etcd *e, const char *prefix, const char *vol_id,
			  struct zl_rebalance_req *out);
/* Every request, sorted by vol_id, malformed ones skipped with a log line.
 * *out malloc'd (NULL when none). 0, -ENOMEM or an etcd error. */
int zl_meta_rebalance_list(struct zl_etcd *e, const char *prefix, struct zl_rebalance_req **out,
			   size_t *n);
/* Deletes the request of r->vol_id; with r->mod_rev > 0 only that revision
 * (a request put again since stays: -ZL_ERR_CONFLICT). Absent: 0. */
int zl_meta_rebalance_delete(struct zl_etcd *e, const char *prefix,
			     const struct zl_rebalance_req *r);

/* ---- snapshots (docs/SNAPSHOTS.md §1, §3; meta_snap.c) ----
 *
 * <prefix>snapshots/<snap-id> holds struct zl_snapshot; <prefix>snapnames/
 * <name> its id (names are unique cluster-wide, like volume names). A
 * snapshot is created by one transaction that compares the volume record's
 * mod_revision and writes, together, the record with snap_seq = s = old + 1
 * and s appended to snaps, the snapshot record (seq s) and its name. */

#define ZL_SNAP_ID_LEN 21 /* "snap-" + 16 hex digits */
#define ZL_SNAP_STATE_CREATING "creating"
#define ZL_SNAP_STATE_READY    "ready"
#define ZL_SNAP_STATE_DELETING "deleting"

struct zl_snapshot {
	char id[ZL_SNAP_ID_LEN + 3]; /* "snap-" + 16 hex */
	char name[256];		     /* zl_volume_name_check */
	char vol[24];		     /* the volume's id */
	uint32_t seq;		     /* 1..ZL_WIRE_SEQ_MAX: holds the writes below it */
	uint64_t size;		     /* the volume's size when it was taken */
	int64_t created;	     /* unix seconds */
	char state[16];		     /* ZL_SNAP_STATE_* */
	char group[64];		     /* group snapshot id; "" = none (§5) */
	int64_t mod_rev;	     /* set by get/list */
};

/* 0 when s is "snap-" and 16 lowercase hex digits (the form of
 * zl_meta_snap_id_generate), else -ZL_ERR_INVAL. */
int zl_meta_snap_id_check(const char *s);
/* A fresh random snapshot id into out (ZL_SNAP_ID_LEN + 1 bytes). */
void zl_meta_snap_id_generate(char *out);
/* Every field but mod_rev: 0 or -ZL_ERR_INVAL with the reason in why
 * (optional). */
int zl_meta_snap_check(const struct zl_snapshot *s, char *why, size_t why_len);
/* JSON codec (fuzzed): to_json NULL for an invalid record or ENOMEM;
 * from_json fills every field but mod_rev: 0 or -ZL_ERR_INVAL. */
char *zl_meta_snap_to_json(const struct zl_snapshot *s);
int zl_meta_snap_from_json(const char *json, size_t len, struct zl_snapshot *s);

/* Takes snapshot `name` of volume vol (id or name) in one transaction (see
 * above), retried (bounded) while the volume record changes under it. id:
 * the snapshot id to use (a request's, so a retry finds it), NULL = a fresh
 * one. Idempotent: a snapshot of that id, or of that name on the same
 * volume, is returned as it is (*created false). Returns 0 (*out gets the
 * record), -ZL_ERR_NOT_FOUND (no such volume), -ZL_ERR_EXISTS (the name
 * belongs to a snapshot of another volume, or the id to another name),
 * -ZL_ERR_BUSY (the volume is being deleted), -ZL_ERR_RANGE (the volume
 * holds ZL_META_SNAPS_MAX snapshots, or its sequence is at
 * ZL_WIRE_SEQ_MAX), -ZL_ERR_INVAL (bad name or id), -ZL_ERR_CONFLICT (it kept
 * changing) or an etcd error. *vol_out (optional) gets the volume record
 * as written (or as read when nothing was written; free with
 * zl_volume_fini). */
int zl_meta_snap_create(struct zl_etcd *e, const char *prefix, const char *vol, const char *name,
			const char *id, struct zl_snapshot *out, bool *created,
			struct zl_volume *vol_out);
/* By id ("snap-...") or name. 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL (bad
 * argument, or a malformed record: logged) or an etcd error. */
int zl_meta_snap_lookup(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			struct zl_snapshot *out);
/* The snapshots of volume vol_id (NULL = of every volume), sorted by volume
 * and sequence; malformed records skipped with a log line. *out malloc'd
 * (NULL when none). 0, -ZL_ERR_INVAL, -ENOMEM or an etcd error. */
int zl_meta_snap_list(struct zl_etcd *e, const char *prefix, const char *vol_id,
		      struct zl_snapshot **out, size_t *n);
/* Deletes a snapshot (by id or name): its sequence leaves the volume's
 * snaps (a compare-and-swap of the volume record, retried bounded), and the
 * record and its name go in the same transaction. A snapshot whose volume
 * is gone is just removed. *out (optional) gets the record deleted. 0,
 * -ZL_ERR_NOT_FOUND, -ZL_ERR_CONFLICT or an etcd error. */
int zl_meta_snap_delete(struct zl_etcd *e, const char *prefix, const char *name_or_id,
			struct zl_snapshot *out);

/* A snapshot asked of the client that writes the volume (docs/SNAPSHOTS.md
 * §3): <prefix>snapreqs/<vol-id>/<snap-id> = {name, state, requested, seq,
 * error}. The requester puts it "pending"; the client takes the snapshot
 * (zl_meta_snap_create with the request's id), switches its writes to the
 * new sequence and sets it "done" with seq (or "failed" with error, a
 * zl_errname). The requester deletes it once it read the answer. */
#define ZL_SNAPREQ_PENDING "pending"
#define ZL_SNAPREQ_DONE	   "done"
#define ZL_SNAPREQ_FAILED  "failed"
/* A group's two-phase switch (§5, meta_snap_group.c): the requester puts
 * "hold"; the client holds new writes and answers "held"; the group's
 * transaction itself sets "switch" with seq (so it cannot happen once a
 * client gave up its hold: the transaction compares the held revision);
 * the client takes seq, releases its writes and answers "done". */
#define ZL_SNAPREQ_HOLD	  "hold"
#define ZL_SNAPREQ_HELD	  "held"
#define ZL_SNAPREQ_SWITCH "switch"
struct zl_snapreq {
	char vol[24];		     /* from the key */
	char id[ZL_SNAP_ID_LEN + 3]; /* from the key */
	char name[256];
	char state[16];			    /* ZL_SNAPREQ_* */
	int64_t requested;		    /* unix seconds */
	uint32_t seq;			    /* done, switch: the snapshot's sequence, else 0 */
	char error[ZL_META_ERROR_NAME_MAX]; /* failed: why, else "" */
	char group[64];			    /* a group's request: its id; else "" */
	int64_t mod_rev;		    /* set by decode */
};
/* JSON codec of the value (fuzzed): to_json writes name, state, requested,
 * seq and error (NULL for an invalid request or ENOMEM); from_json fills
 * those and zeroes the rest: 0 or -ZL_ERR_INVAL. */
char *zl_meta_snapreq_to_json(const struct zl_snapreq *r);
int zl_meta_snapreq_from_json(const char *json, size_t len, struct zl_snapreq *r);
/* Every field but mod_rev: 0 or -ZL_ERR_INVAL with the reason in why. */
int zl_meta_snapreq_check(const struct zl_snapreq *r, char *why, size_t why_len);
/* Decodes a stored request (key "...snapreqs/<vol>/<snap>" and value, e.g.
 * of a watch event). 0 or -ZL_ERR_INVAL. */
int zl_meta_snapreq_from_kv(const struct zl_etcd_kv *kv, struct zl_snapreq *r);
/* Puts the request; with r->mod_rev > 0 only if the key is still at that
 * revision (an answer must not bring back a request its requester deleted):
 * -ZL_ERR_CONFLICT then, also when it is gone. 0, -ZL_ERR_INVAL or an etcd
 * error. */
int zl_meta_snapreq_put(struct zl_etcd *e, const char *prefix, const struct zl_snapreq *r);
/* Reads the request (vol, id) into out. 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_INVAL
 * or an etcd error. */
int zl_meta_snapreq_get(struct zl_etcd *e, const char *prefix, const char *vol, const char *id,
			struct zl_snapreq *out);
/* Deletes the request (vol, id); absent: 0. */
int zl_meta_snapreq_delete(struct zl_etcd *e, const char *prefix, const char *vol,
			   const char *id);
/* "<prefix>snapreqs/<vol-id>/" into out (to watch it). 0 or -ZL_ERR_INVAL. */
int zl_meta_snapreq_prefix(char *out, size_t len, const char *prefix, const char *vol_id);
/* <prefix>snapwriters/<vol-id>: the client that takes vol_id's snapshots
 * (it watches snapreqs/<vol-id>/), on that client's lease. put: 0 or an etcd
 * error; get: 0 (client, optional, gets its id), -ZL_ERR_NOT_FOUND (no live
 * writer: take the snapshot directly) or an etcd error. */
int zl_meta_snapwriter_put(struct zl_etcd *e, const char *prefix, const char *vol_id,
			   const char *client, int64_t lease);
int zl_meta_snapwriter_get(struct zl_etcd *e, const char *prefix, const char *vol_id,
			   char *client, size_t client_len);

/* Takes snapshot `name` of volume v as a requester (meta_snap_take.c; `zl
 * snapshot create`, CreateSnapshot): through the client that serves v when
 * one does (a snapreqs/ request, waited for up to timeout_ms; writer, when
 * given, gets that client's id, "" when none took part), else by the
 * transaction here, which also requires that no client serves v (one that
 * began serving after the look, having read the record before the
 * snapshot, is asked instead); a client that goes away before it answers
 * leaves it to the requester, with the same id. Idempotent by name: a snapshot of that name of v is returned
 * as it is (*created false). 0 with *out, -ZL_ERR_EXISTS (the name belongs
 * to a snapshot of another volume), -ZL_ERR_TIMEOUT (the serving client did
 * not answer in time: asking again finds a snapshot it took late), another
 * error of zl_meta_snap_create (the client's, when it took it) or an etcd
 * error. Blocks (polls etcd): never call it on an I/O loop. */
int zl_meta_snap_take(struct zl_etcd *e, const char *prefix, const struct zl_volume *v,
		      const char *name, uint32_t timeout_ms, struct zl_snapshot *out,
		      bool *created, char *writer, size_t writer_len);

/* ---- group snapshots (docs/SNAPSHOTS.md §5; meta_snap_group.c) ----
 *
 * One transaction over several volumes: each gets its own snap_seq bump and
 * snapshot record "<group>.<volume name>" (field group = the group), and
 * <prefix>snapgroups/<group> is created with them. */
#define ZL_SNAPGROUP_VOLS_MAX 16 /* members of one group (etcd's txn op limit) */

struct zl_snapgroup_member {
	char vol[256];			  /* in: the volume (take: name or id; out: id) */
	char snap_id[ZL_SNAP_ID_LEN + 3]; /* create: in; take: out */
	/* A served member: its request, "held" at req.mod_rev (> 0), which the
	 * transaction compares and turns into "switch". req.mod_rev 0: nobody
	 * serves the volume (the transaction requires no snapwriters/ key). */
	struct zl_snapreq req;
	bool served, switched; /* take's own */
	char writer[128];      /* take: the serving client's id, "" when none */
	struct zl_snapshot snap; /* out: the member's snapshot */
};

/* 0 when group is a group id (1..63 characters of [A-Za-z0-9._-]), else
 * -ZL_ERR_INVAL. */
int zl_meta_snapgroup_name_check(const char *group);
/* The group's transaction (m[i].vol: ids, m[i].snap_id: the ids to use),
 * retried (bounded) while volume records change. 0 with every m[i].snap,
 * -ZL_ERR_EXISTS (the group or a member's name exists), -ZL_ERR_STALE (a
 * held request is not at its revision: that client gave up its hold),
 * -EAGAIN (a client serves a member given as unserved), -ZL_ERR_NOT_FOUND,
 * -ZL_ERR_BUSY, -ZL_ERR_RANGE (as zl_meta_snap_create, for some member),
 * -ZL_ERR_INVAL (bad group, ids, n or a name too long), -ZL_ERR_CONFLICT or
 * an etcd error. Nothing is written unless everything is. */
int zl_meta_snapgroup_create(struct zl_etcd *e, const char *prefix, const char *group,
			     struct zl_snapgroup_member *m, size_t n);
/* Takes group snapshot `group` of the n volumes m[i].vol as a requester
 * (`zl snapshot create-group`): the two-phase hold and switch through every
 * serving client (bounded: a client that does not hold in time fails the
 * group and every held client is released with its old sequence), then
 * zl_meta_snapgroup_create. Idempotent: a group of that name over the same
 * volumes is returned (*created false). 0, -ZL_ERR_EXISTS, -ZL_ERR_TIMEOUT,
 * -ZL_ERR_BUSY (a client could not hold), another error of
 * zl_meta_snapgroup_create, or an etcd error; why (optional) says what
 * failed, naming the volume and client. Blocks: never on an I/O loop. */
int zl_meta_snapgroup_take(struct zl_etcd *e, const char *prefix, const char *group,
			   struct zl_snapgroup_member *m, size_t n, uint32_t timeout_ms,
			   bool *created, char *why, size_t why_len);
/* 0 when snapgroups/<group> exists, -ZL_ERR_NOT_FOUND, or an error. */
int zl_meta_snapgroup_exists(struct zl_etcd *e, const char *prefix, const char *group);
/* The snapshots whose group is `group` (*out malloc'd, may be NULL). */
int zl_meta_snapgroup_members(struct zl_etcd *e, const char *prefix, const char *group,
			      struct zl_snapshot **out, size_t *n);
/* Deletes every snapshot of the group, then its record (an interrupted
 * removal is finished by running it again). 0 (*n_deleted: snapshots
 * removed), -ZL_ERR_NOT_FOUND (no such group), or an error of
 * zl_meta_snap_delete (-ZL_ERR_BUSY: a member has clones). */
int zl_meta_snapgroup_delete(struct zl_etcd *e, const char *prefix, const char *group,
			     size_t *n_deleted);

/* ---- clones (docs/SNAPSHOTS.md §4; meta_clone.c) ----
 *
 * A clone is a volume whose record names a parent {vol, seq}: a chunk it
 * has never held reads from the parent volume's snapshot seq. While it does,
 * <prefix>dependants/<parent-vol>/<seq>/<clone-id> (value: the clone's
 * name) exists; it is created in the clone's creation transaction and
 * deleted in the one that removes the clone or clears its parent
 * (flatten). Deleting a snapshot with a dependant key, or a volume with any
 * (even with force), is refused by a compare over the keys' range in the
 * deleting transaction: -ZL_ERR_BUSY. A clone of a volume first takes an
 * internal snapshot of it named "clone-<new-vol-id>", dropped when the clone
 * no longer needs it. */

/* Creates clone volume spec->name (in one transaction, placed like any new
 * volume by zl_meta_volume_create's code) of snapshot src_snap (id or
 * name) when it is not NULL, else of volume src_vol (id or name), through an
 * internal snapshot taken by zl_meta_snap_take (through the client serving
 * src_vol, waited for up to timeout_ms; blocks: never on an I/O loop).
 * spec: size 0 = the source's (the snapshot's), else at least it (rounded
 * up to 4096); chunk_size 0 or the source's (at most ZL_WIRE_MAX_IO: a
 * copy-up is one write); replicas 0 = the source's;
 * other fields as zl_meta_volume_create. Idempotent by name: a clone of that
 * name of the same source (same snapshot; any of the volume's) with the
 * same size, chunk size and replicas is returned (*created false).
 * Returns 0 with *out (free with zl_volume_fini), -ZL_ERR_NOT_FOUND (no
 * such source), -ZL_ERR_EXISTS (the name belongs to another volume),
 * -ZL_ERR_RANGE (size below the source's), -ZL_ERR_INVAL (bad argument),
 * -ZL_ERR_BUSY (the source volume is being deleted), -ZL_ERR_TIMEOUT (the
 * client serving src_vol did not answer in time: ask again),
 * -ZL_ERR_NODES, -ZL_ERR_CONFLICT or an etcd error. */
int zl_meta_clone_create(struct zl_etcd *e, const char *prefix, const struct zl_volume_spec *spec,
			 const char *src_vol, const char *src_snap, uint32_t timeout_ms,
			 struct zl_volume *out, bool *created);

/* One dependant key. */
struct zl_clone_dep {
	char vol[24];	/* the parent volume's id */
	uint32_t seq;	/* the parent snapshot's sequence */
	char clone[24]; /* the clone's id */
	char name[256]; /* the clone's name */
};
/* The clones that read through to volume vol_id (seq 0) or to its snapshot
 * seq, sorted by key. *out malloc'd (NULL when none). 0, -ZL_ERR_INVAL,
 * -ENOMEM or an etcd error. */
int zl_meta_clone_dependants(struct zl_etcd *e, const char *prefix, const char *vol_id,
			     uint32_t seq, struct zl_clone_dep **out, size_t *n);
/* The refusal of a delete, for a user: "<what> has dependants: a, b (and N
 * more); flatten them first (zl volume flatten NAME)" into msg (len bytes)
 * when volume vol_id (seq 0) or its snapshot seq has dependants: returns
 * -ZL_ERR_BUSY; 0 (msg "") when none; an etcd error. what: e.g. "volume v1"
 * or "snapshot s1". */
int zl_meta_clone_refusal(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t seq,
			  const char *what, char *msg, size_t len);
/* Flatten's last step: clears the parent of clone vol (id or name) with a
 * compare-and-swap of its record and deletes its dependant key in the same
 * transaction (retried while the record changes), then drops its internal
 * snapshot when nothing else needs it. The caller copied every chunk first.
 * A volume without parent: 0, nothing done. *out (optional) gets the record
 * as written. 0, -ZL_ERR_NOT_FOUND, -ZL_ERR_CONFLICT or an etcd error. */
int zl_meta_clone_detach(struct zl_etcd *e, const char *prefix, const char *vol,
			 struct zl_volume *out);

#endif
