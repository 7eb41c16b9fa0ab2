/* Internals of the volume client (lib/client). Not for other folders.
 *
 * Objects (all on one loop thread, no locks; the blocking etcd work of
 * reloads, node lists and reports runs on the client's worker thread,
 * lib/common/worker.h, and its results are applied on the loop thread):
 *   zl_client     transport, etcd handle, node table, open and closing volumes
 *   client_node   one storage node: address, backoff, conns_per_node
 *                 connections, a wait queue of sub-requests; lives until the
 *                 client is destroyed (volumes keep plain pointers to nodes)
 *   client_conn   one transport connection of a node and its HELLO state
 *   zl_vol        a volume record copy, per-slice node pointers, and the
 *                 preallocated user-I/O (client_io) and sub-request
 *                 (client_sub) pools
 *   client_io     one user I/O; split at chunk boundaries and ZL_WIRE_MAX_IO
 *                 into sub-requests, completed when all are done
 *   client_sub    one wire request with its own target and retry state
 */
#ifndef ZL_CLIENT_INTERNAL_H
#define ZL_CLIENT_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/common.h"
#include "../common/notify.h"
#include "../common/worker.h"
#include "../transport/xport_hello.h"
#include "../wire/wire.h"
#include "client.h"

#define CLIENT_LOG	      "client"
#define CLIENT_MAX_ATTEMPTS   16
#define CLIENT_MAX_IO_MS      30000u
#define CLIENT_SUBS_PER_IO    4
#define CLIENT_CONNECT_MAX_MS 1000u
/* Heal mode (docs/REPLICATION.md §2 "Waiting instead of failing"). */
#define CLIENT_IO_TIMEOUT_S   600u /* default zl_client_opts.io_timeout_s */
#define CLIENT_HEAL_BACKOFF_MIN_MS 50u
#define CLIENT_HEAL_BACKOFF_MAX_MS 2000u
#define CLIENT_REPORT_LEASE_S 15 /* TTL of the lease the client's reports live on */
#define CLIENT_REPORTS 16 /* failure reports on their way to etcd at once */

/* ---- intrusive doubly linked list ---- */

struct client_list {
	struct client_list *next, *prev;
};

static inline void client_list_init(struct client_list *h)
{
	h->next = h->prev = h;
}

static inline bool client_list_empty(const struct client_list *h)
{
	return h->next == h;
}

static inline void client_list_add_tail(struct client_list *h, struct client_list *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline void client_list_del(struct client_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

/* True when n is linked (after client_list_init/del it points to itself). */
static inline bool client_list_linked(const struct client_list *n)
{
	return n->next != n;
}

static inline struct client_list *client_list_pop(struct client_list *h)
{
	struct client_list *n = h->next;

	if (n == h)
		return NULL;
	client_list_del(n);
	return n;
}

/* ---- pure helpers (unit-tested without a network) ---- */

/* One piece of a split I/O. */
struct zl_client_extent {
	uint64_t chunk;	 /* chunk index */
	uint32_t offset; /* byte offset inside the chunk */
	uint32_t length; /* bytes */
	uint64_t pos;	 /* offset of this piece inside the user I/O (buffer) */
};

/* Checks [off, off+len) against a volume of `size` bytes. Returns 0 or
 * -ZL_ERR_RANGE (beyond the end or overflowing). */
int zl_client_range_check(uint64_t size, uint64_t off, uint64_t len);

/* The piece of the I/O [off, off+len) that starts `done` bytes into it: it
 * ends at the next chunk boundary, after max_io bytes or at the end of the
 * I/O, whichever comes first. chunk_size is a power of two. Returns 1 and
 * fills *ext, or 0 when done >= len. */
int zl_client_split_next(uint64_t off, uint64_t len, uint64_t done, uint32_t chunk_size,
			 uint32_t max_io, struct zl_client_extent *ext);

/* Number of pieces zl_client_split_next produces for the I/O. */
uint64_t zl_client_split_count(uint64_t off, uint64_t len, uint32_t chunk_size, uint32_t max_io);

/* Replica index (into s->nodes) a request should go to.
 * Writes (is_read false): the primary (first in-sync replica), whatever the
 * masks say. Reads: in preference order, the first in-sync replica whose bit
 * is in neither tried_mask nor avoid_mask (nodes known to be down), else the
 * first in-sync one not in tried_mask. Returns -1 when there is none. */
int zl_client_pick_target(const struct zl_slice *s, bool is_read, uint32_t tried_mask,
			  uint32_t avoid_mask);

/* What to do with a finished request. */
enum zl_client_action {
	ZL_CLIENT_ACT_DONE,	/* success */
	ZL_CLIENT_ACT_FAIL,	/* give the error to the user */
	ZL_CLIENT_ACT_FAILOVER, /* read: try the next in-sync replica */
	ZL_CLIENT_ACT_PROMOTE,	/* write: drop the primary from the slice, retry */
	ZL_CLIENT_ACT_RELOAD,	/* reload volume record and nodes, retry */
	ZL_CLIENT_ACT_RETRY,	/* same target again after a backoff */
	ZL_CLIENT_ACT_REPORT,	/* heal: report the primary unreachable, reload, retry */
};

/* Classifies the outcome of a request of wire opcode `op`: err is 0 or
 * negative; `transport` tells a transport failure (no reply) from an error
 * status in a reply. Follows "Client retry rules" in docs/PROTOCOL-NOTES.md. */
enum zl_client_action zl_client_classify(int op, int err, bool transport);

/* Backoff before attempt number `attempt` (1-based) of a request. */
uint32_t zl_client_backoff_ms(uint32_t attempt);

/* Heal mode (zl_client_opts.legacy_drop false): every op goes to the row's
 * primary only, nobody is dropped, and the client waits. DONE, FAIL, RETRY
 * (BUSY; a damaged write payload), RELOAD (PEERING, NOT_PRIMARY, STALE,
 * NOT_INSYNC, MIN_SIZE, UNAVAIL, NOT_FOUND, ETCD and CONN/TIMEOUT statuses
 * in a reply: membership is changing), REPORT (no reply from the primary:
 * CONN or TIMEOUT of the transport) or, for a READ the primary answered
 * CORRUPT or IO (its copy is bad), FAILOVER: read the range once from each
 * other IN_SYNC member with READ + ZL_WF_ANY. Never PROMOTE. */
enum zl_client_action zl_client_classify_heal(int op, int err, bool transport);

/* Heal-mode backoff before attempt `attempt` (1-based): 0 for the first,
 * then CLIENT_HEAL_BACKOFF_MIN_MS doubling up to CLIENT_HEAL_BACKOFF_MAX_MS. */
uint32_t zl_client_heal_backoff_ms(uint32_t attempt);

/* The status an I/O that waited io_timeout in vain completes with, from the
 * last error it saw: -ZL_ERR_MIN_SIZE stays (too few copies to acknowledge
 * a write), anything else becomes -ZL_ERR_TIMEOUT. */
int zl_client_heal_final_err(int last_err);

/* The "error" of a failure report about a member that answered err:
 * "CORRUPT" for -ZL_ERR_CORRUPT and "IO" for -ZL_ERR_IO (a bad copy),
 * "TIMEOUT" for -ZL_ERR_TIMEOUT, else "UNREACHABLE". */
const char *zl_client_report_error(int err);

/* True for opcodes that must go to the primary. */
static inline bool zl_client_op_is_write(int op)
{
	return op != ZL_OP_READ;
}

/* ---- runtime objects ---- */

enum client_conn_state {
	CONN_IDLE,    /* no transport connection */
	CONN_HELLO,   /* connected, HELLO sent, waiting for the reply */
	CONN_READY,   /* HELLO checked: requests may go */
	CONN_CLOSING, /* close requested, waiting for the close callback */
};

struct client_node;

struct client_conn {
	struct client_node *node;
	struct zl_xport_conn *xc; /* our reference, NULL when IDLE */
	enum client_conn_state state;
	bool hello_pending; /* HELLO request callback not yet run */
	/* The node's HELLO answer named ZL_WIRE_CAP_SNAPSEQ: requests on this
	 * connection may carry ZL_WF_SEQ. */
	bool snapseq;
	struct zl_xport_hello hello;
};

/* A node is known once per transport selection in use (the client's, and a
 * volume's "transport" parameter may differ): the table is keyed by (id,
 * sel), and all entries of an id follow the same etcd record. */
struct client_node {
	struct zl_client *c;
	char id[ZL_NODE_ID_MAX];
	char addr[64];
	uint16_t port;
	uint16_t rdma_port;	  /* 0: the node serves no RDMA */
	char transports[32];	  /* as advertised, "tcp" or "tcp,rdma" */
	bool tls;		  /* its TCP listener speaks TLS only */
	/* -ZL_ERR_TLS_CA / -ZL_ERR_TLS of the last attempt, else 0: what
	 * waiting I/O fails with instead of -ZL_ERR_CONN, so that our own
	 * TLS configuration is never reported as the node's failure. */
	int tls_err;
	enum zl_xport_select sel; /* how this entry picks its transport */
	enum zl_xport_kind kind;  /* picked at first connect; 0 = not yet */
	bool gone;		/* no record in etcd: treated as down */
	uint64_t down_until_ns; /* after a failed connect: fail fast until then */
	uint32_t backoff_ms;
	/* First of an unbroken run of HELLOs of our attach token answered
	 * BUSY (the node has not seen our attachment yet), 0 = none. */
	uint64_t hello_busy_ns;
	uint32_t rr;		   /* round robin over conns */
	struct client_list waitq;  /* subs waiting for a ready connection or a slot */
	struct client_conn *conns; /* c->conns_per_node */
	struct zl_ratelimit rl;
};

/* A failure report on its way to etcd through the client's worker. */
struct client_report {
	struct zl_work w;
	struct zl_client *c;
	struct zl_report r;
	uint64_t vol;  /* the open volume whose `reported` it updates */
	bool bad_copy; /* error CORRUPT or IO: rp->bad_* */
	int rc;	       /* worker thread: the outcome */
};

struct zl_client {
	struct zl_loop *loop;
	struct zl_etcd *etcd;
	struct zl_worker *worker; /* reloads, node lists, reports */
	/* One transport per kind in use, created on first use: [ZL_XPORT_TCP],
	 * [ZL_XPORT_RDMA]; index 0 unused. */
	struct zl_xport *xports[3];
	bool rdma_unusable;	  /* creating the RDMA transport failed */
	enum zl_xport_select sel; /* opts.transport */
	char prefix[128];
	char id[ZL_WIRE_NAME_LEN];
	uint32_t timeout_ms;
	uint32_t max_io;
	uint32_t conns_per_node;
	uint64_t epoch;
	bool legacy_drop;	/* opts.legacy_drop: 0.1 promotion by slice_drop */
	struct zl_xport_cred cred; /* of every HELLO; token points at token */
	char token[129];
	char tls_ca[4096];	    /* "" = none (opts.tls_ca or $ZIPLINE_TLS_CA) */
	char tls_server_name[256]; /* "" = the node's address */
	uint32_t io_timeout_s;	/* heal mode: how long an I/O waits */
	/* Worker thread only (and zl_client_destroy once the worker is
	 * gone): the lease of our failure reports, 0 = none. */
	int64_t report_lease;
	bool renew_expired;	/* worker: the keep-alive found it expired */
	struct zl_work renew_w; /* keep-alive of report_lease */
	bool report_timer_on;
	struct zl_timer report_timer; /* submits renew_w */
	struct client_report reports[CLIENT_REPORTS];
	struct zl_ratelimit report_rl; /* "report not sent" lines */
	struct client_node **nodes;
	size_t n_nodes, cap_nodes;
	uint64_t nodes_loaded_ns;   /* last node list refresh */
	uint64_t etcd_fail_ns;	    /* last failed etcd call: avoid hammering a dead etcd */
	struct client_list vols;    /* open volumes */
	struct client_list zombies; /* closed volumes with requests still in the transport */
	bool destroying;
	/* The last failure to reach a node (connect, HELLO), for
	 * zl_vol_last_error: what start-up errors report. */
	int last_node_err;
	char last_node_what[16];
	char last_node_id[ZL_NODE_ID_MAX];
	char last_node_addr[72];
};

enum client_sub_state {
	SUB_FREE,  /* in vol->free_subs */
	SUB_WAIT,  /* in node->waitq */
	SUB_SENT,  /* handed to the transport, callback pending */
	SUB_TIMER, /* waiting on sub->timer (backoff or deferred result) */
	SUB_RELOAD, /* in vol->reload_wait: waits for the placement reload */
	SUB_IDLE,  /* being handled (transient) */
	SUB_PARENT, /* a clone's: waits for its read of the parent (client_clone.c) */
};

/* What a clone's sub-request is doing about a chunk the clone never held
 * (docs/SNAPSHOTS.md §4, client_clone.c). */
enum client_sub_clone {
	CLONE_NONE,   /* its own request (with ZL_WF_ABSENT when the parent covers it) */
	CLONE_READ,   /* a read answered ABSENT: reading the parent into buf */
	CLONE_COPY,   /* a write answered ABSENT: reading the parent's chunk into cbuf */
	CLONE_CREATE, /* the copy-up: WRITE + ZL_WF_CREATE of cbuf, then the write again */
};

enum client_sub_pending {
	PEND_SEND,   /* (re)send */
	PEND_RESULT, /* handle pending_err like a reply */
};

struct client_io;

struct client_sub {
	struct client_list link; /* free list or node wait queue */
	struct zl_vol *vol;
	struct client_io *io; /* NULL: orphan of a closed volume */
	enum client_sub_state state;
	uint8_t op;
	uint8_t flags;
	int8_t target;		/* replica index in the slice row */
	uint8_t tried;		/* replicas tried for this read (bit mask) */
	/* Heal mode: the primary's copy was bad (CORRUPT/IO), the read goes
	 * to the other IN_SYNC members of row version any_ver, READ +
	 * ZL_WF_ANY; any_err is the primary's answer, the result if all fail. */
	bool any;
	int any_err;
	uint64_t any_ver;
	uint8_t bad_data;	/* read replies in a row whose data failed its CRC */
	bool need_reload;	/* reload placement before the next send */
	uint8_t pending;	/* what the timer does: enum client_sub_pending */
	bool pending_transport; /* pending_err came without a reply */
	int pending_err;
	uint32_t slice;
	uint32_t attempts;
	int last_err;	/* heal mode: the last error seen, for the timeout */
	uint64_t chunk;
	uint32_t offset, length;
	char *buf;	     /* data for WRITE, destination for READ */
	uint64_t sent_ver;   /* slice version carried by the request */
	uint64_t reload_seq; /* vol->reload_seq when sent */
	uint64_t deadline_ns;
	/* ZL_WF_SEQ of this send: a write-class op carries the volume's
	 * sequence (vol->snap_seq when sent), a READ of a snapshot its
	 * sequence; 0 on a live READ and a FLUSH. */
	uint32_t seq;
	struct client_node *node; /* where it went */
	struct zl_wire_hdr hdr;
	struct zl_timer timer;
	/* A clone's chunk it never held (client_clone.c): enum
	 * client_sub_clone, the copy-ups done for this sub (bounded), the
	 * parent's chunk (zl_vol_buf_alloc, chunk_size bytes) and the request
	 * the copy-up stands in for. */
	uint8_t clone;
	uint8_t copyups;
	char *cbuf;
	uint8_t orig_op, orig_flags;
	uint32_t orig_offset, orig_length;
	char *orig_buf;
};

struct client_io {
	struct client_list link; /* free list or vol->split_wait */
	struct zl_vol *vol;
	bool active;
	uint8_t op;
	bool fua;
	int status; /* first error */
	bool timeout_logged; /* heal mode: the one "waited" line is out */
	uint64_t start_ns;   /* submit time: io_timeout counts from it */
	char *buf;
	uint64_t off, len;
	uint64_t split_done;  /* bytes (or, for FLUSH, slices) already split */
	uint32_t snap;	      /* READ of snapshot `snap` (its sequence); 0 = live */
	/* zl_vol_flatten's probe of one chunk (a 4 KiB READ): an ABSENT
	 * answer copies the parent's chunk up (unless it is zeros), then the
	 * probe is done (client_clone.c). */
	bool copyup;
	uint32_t outstanding; /* subs not yet done */
	zl_io_cb cb;
	void *arg;
	struct zl_defer defer; /* completion of an I/O that needed no request */
};

struct client_reported {
	uint64_t slice_ver; /* 0 = none yet */
	char peer[ZL_NODE_ID_MAX];
	uint64_t logged_ns; /* last "waited ... for an in-sync primary" line */
	uint64_t bad_ver;   /* the same for reports of a bad copy (CORRUPT, IO) */
	char bad_peer[ZL_NODE_ID_MAX];
};

/* The shared state of one bucket of a zl_vol_qos_share (client_qos.c):
 * its theoretical arrival time, moved by one CAS per lease, and the limit
 * last applied to it (so that only the first handle to apply a change
 * starts it full). A cache line of its own. */
struct client_tb_share {
	_Alignas(64) _Atomic uint64_t tat_ns;
	_Atomic uint64_t rate;
	_Atomic uint64_t tau_ns;
};

struct zl_vol_qos_share {
	struct client_tb_share tb[2][2]; /* [dir][0 I/Os, 1 bytes] */
	_Atomic uint32_t refs;
};

/* One limit of a volume as a GCRA token bucket (client_qos.c). */
struct client_tb {
	uint64_t rate;	 /* units (I/Os or bytes) per second, 0 = unlimited */
	uint64_t tau_ns; /* the burst, in ns of the rate */
	uint64_t tat_ns; /* theoretical arrival time (own bucket) */
	/* Joined to a zl_vol_qos_share: share's tat instead of tat_ns; left:
	 * units leased and not spent yet; lease: units one CAS takes. */
	struct client_tb_share *share;
	uint64_t left, lease;
};

/* The limits of one direction (reads or writes) and its waiting I/O. */
struct client_qos_dir {
	struct client_tb iops, bps;
	struct client_list wait; /* client_io (link) waiting for the buckets, FIFO */
};

struct client_qos {
	struct client_qos_dir dir[2]; /* [0] reads, [1] writes */
	bool on;		      /* some rate is set */
	struct zl_vol_qos_share *share; /* zl_vol_qos_join, else NULL */
	bool timer_on;
	struct zl_timer timer; /* starts waiting I/O when it conforms */
	uint32_t waiting;      /* I/Os in the queues */
};

struct zl_vol {
	struct client_list link; /* c->vols or c->zombies */
	struct zl_client *c;
	struct zl_volume meta;
	/* Attach epoch of its requests: the client's, 0 on a clone's parent
	 * handle (it only reads a snapshot, which no fence protects; the
	 * client's epoch is the clone's attachment's and would raise the
	 * parent's fence above its own attachment on the storage, fencing
	 * it: docs/SNAPSHOTS.md §4). */
	uint64_t epoch;
	enum zl_xport_select sel; /* client's, or the volume's "transport" param */
	struct zl_xport *buf_x;	  /* pool of zl_vol_buf_alloc, chosen on first use */
	struct client_node **slice_nodes; /* [n_slices * ZL_MAX_REPLICAS] */
	/* Heal mode, per slice: the last failure report put, so one goes per
	 * (slice, peer, slice_ver), and the last timeout line: [n_slices] */
	struct client_reported *reported;
	uint64_t reload_seq;		  /* bumps on every installed record */
	uint64_t reloaded_ns;		  /* last reload from etcd */
	bool closing;
	bool reload_soon;
	struct zl_defer reload_defer;
	/* The reload on the client's worker (vol_reload_start): the fields
	 * below reload_w are the worker's while it is busy. Subs waiting for
	 * it are in reload_wait; reload_applying while its result is applied
	 * (a user callback may close the volume meanwhile). */
	struct client_list reload_wait;
	bool reload_applying;
	struct zl_work reload_w;
	char reload_vid[24]; /* meta.id when it started */
	bool reload_nodes; /* list the nodes too */
	int reload_rc, reload_nodes_rc;
	struct zl_volume reload_fresh;
	struct zl_node_info *reload_list;
	size_t reload_n;
	uint32_t inflight_reqs; /* subs inside the transport */
	struct client_io *ios;
	struct client_sub *subs;
	uint32_t n_ios, n_subs;
	struct client_list free_ios, free_subs, split_wait;
	struct zl_vol_stats stats;
	struct zl_ratelimit rl; /* failover warnings */
	/* The storage refused this client the volume for good: it fenced our
	 * attach epoch (detached from this node or attached to another:
	 * fence_err -ZL_ERR_STALE), or refused the HELLO of our credential
	 * (-ZL_ERR_AUTH, -ZL_ERR_NOT_ATTACHED). Final: every I/O fails with
	 * fence_err from then on, nothing more is sent. */
	bool fenced;
	int fence_err;
	char fence_why[512];
	/* Heal mode: the last error a retried request met, and where. */
	int last_retry_err;
	char last_retry_node[ZL_NODE_ID_MAX];
	/* The limits of meta.qos (client_qos.c). */
	struct client_qos qos;
	/* A watch of the volume record (its own thread): every change posts
	 * watch_notify, which reloads the record on the loop (limits,
	 * io_timeout, placement); watch_again: it changed during a reload. */
	struct zl_etcd_watch *watch;
	struct zl_notify watch_notify;
	bool watch_again;
	bool watch_retry_on;
	struct zl_timer watch_retry; /* a reload refused while etcd was failing */
	/* The snapshot sequence writes carry (docs/SNAPSHOTS.md §3): the
	 * highest of every record installed and every switch; it never goes
	 * back (a reload that read the record before a snapshot must not
	 * undo the switch). */
	uint32_t snap_seq;
	bool seq_warned; /* the "storage too old" line is out */
	/* zl_vol_snap_serve: this client takes the volume's snapshots. */
	struct client_snapserve *snap;
	/* A group snapshot's hold (§5, client_snap.c): while set, a write,
	 * discard or write-zeroes that starts waits in hold_wait (FIFO;
	 * writes already started go on) until client_vol_snap_release. */
	bool snap_hold;
	struct client_list hold_wait;
	/* zl_vol_snap_follow (client_snap.c). A lead publishes its sequence
	 * and hold for its followers, which read them from their own threads
	 * (written on the lead's loop; atomics, no lock); its followers are a
	 * list under follow_lock. A follower: lead, and follow_notify, which
	 * the lead posts at a release of its hold (runs on our loop). */
	_Atomic uint32_t pub_seq;
	_Atomic bool pub_hold;
	struct zl_vol *followers;
	struct zl_vol *lead;
	struct zl_vol *follow_next;
	struct zl_notify follow_notify;
	/* A clone's parent volume (meta.parent_vol), opened with it and closed
	 * with it (client_clone.c); NULL for a volume without one. */
	struct zl_vol *parent;
};

/* ---- clones (client_clone.c, docs/SNAPSHOTS.md §4) ---- */

/* Parents a chain of clones may have (a clone of a clone of ...). */
#define CLIENT_CLONE_DEPTH 16
/* Copy-ups of one sub before it gives up (the chunk keeps vanishing). */
#define CLIENT_CLONE_COPYUPS 4
/* client_io.c: zl_vol_open of a parent `depth` levels down. */
int client_vol_open_depth(struct zl_client *c, const char *name_or_id, uint32_t depth,
			  struct zl_vol **out);
/* Opens v's parent chain (blocking, at open): 0, -ZL_ERR_RANGE (deeper than
 * CLIENT_CLONE_DEPTH) or zl_vol_open's error for the parent. */
int client_clone_open(struct zl_vol *v, uint32_t depth);
/* The ZL_WF_ABSENT a send of s carries: when s is v's own read or write of
 * a chunk its parent covers. */
uint8_t client_clone_flags_of(const struct client_sub *s);
/* Takes s's result when it is about a chunk the clone never held: an
 * ABSENT answer (read the parent, or copy it up), the copy-up's answer (0
 * or EXISTS: send the write again). True when s was taken. */
bool client_clone_result_of(struct client_sub *s, int err);
/* Releases what a clone's sub holds (its copy-up buffer) and forgets the
 * copy-up (sub_free, an orphan's reply). */
void client_clone_drop_of(struct client_sub *s);
/* The three above, per I/O: a volume without a parent, a sub that is not
 * in a copy-up and an answer other than ABSENT end here without a call
 * (the functions' own first tests, the same outcome). */
static inline uint8_t client_clone_flags(const struct client_sub *s)
{
	return s->vol->parent ? client_clone_flags_of(s) : 0;
}

static inline bool client_clone_result(struct client_sub *s, int err)
{
	if (s->clone != CLONE_CREATE && (err != -ZL_ERR_ABSENT || s->clone != CLONE_NONE))
		return false;
	return client_clone_result_of(s, err);
}

static inline void client_clone_drop(struct client_sub *s)
{
	if (s->cbuf || s->clone != CLONE_NONE || s->copyups)
		client_clone_drop_of(s);
}
/* client_io.c: sends (or resends) s to its slice. */
void client_sub_send(struct client_sub *s);
/* client_io.c: ends s with err (0 = success). */
void client_sub_done(struct client_sub *s, int err);
/* client_io.c: handles err as s's result (a reply status) after delay_ms. */
void client_sub_result_later(struct client_sub *s, int err, uint32_t delay_ms);
/* client_io.c: vol_submit_snap of a flatten probe (client_io.copyup). */
int client_vol_submit_copyup(struct zl_vol *v, uint64_t chunk, void *buf, zl_io_cb cb,
			     void *arg);

/* client_snap.c: ends the snapshot switch of v (zl_vol_close): the watch
 * and the renewal stop, v is forgotten (work still on the worker finds it
 * gone), and the lease is revoked on the worker. Accepts v->snap NULL. */
void client_snap_stop(struct zl_vol *v);
/* client_io.c: the sequence of v's next write is at least seq (the switch;
 * never lowers it). */
void client_vol_snap_switch(struct zl_vol *v, uint32_t seq);
/* client_io.c: the group hold: new write-class I/O of v waits from now on
 * (hold), or starts again, in order, after a switch to seq (release; seq 0
 * or below v's keeps v's sequence). */
void client_vol_snap_hold(struct zl_vol *v);
void client_vol_snap_release(struct zl_vol *v, uint32_t seq);
/* client_snap.c: the sequence v's writes carry now (a follower: the
 * lead's when higher), and whether its new write-class I/O waits (its own
 * hold, a follower's lead's). */
uint32_t client_vol_seq(const struct zl_vol *v);
bool client_vol_held(const struct zl_vol *v);
/* client_snap.c: a lead publishes its sequence and hold (after each
 * change, on its loop) and wakes its followers at a release. */
void client_snap_publish(struct zl_vol *v, bool released);
/* client_snap.c: zl_vol_close of a follower leaves its lead's list. */
void client_snap_unfollow(struct zl_vol *v);

/* client_qos.c: per-volume I/O limits on the loop thread. */
void client_qos_init(struct zl_vol *v);
/* Takes v->meta.qos (open, and after every install of the record). */
void client_qos_apply(struct zl_vol *v);
/* True when io (not started yet, start_ns = now) may start now: its
 * buckets are charged. False: it waits in its queue and the qos timer
 * starts it (client_io_start) when it conforms. */
bool client_qos_admit(struct zl_vol *v, struct client_io *io, uint64_t now);
/* Stops the timer and leaves the share (zl_vol_close). */
void client_qos_stop(struct zl_vol *v);
/* One bucket joined to a share (for tests of the share from threads):
 * client_tb_join ties b to s (its bucket [dir][0 I/Os, 1 bytes]) with the
 * limit b has; client_tb_set sets b's limit (rate per second, burst units:
 * 0 = a tenth of a second of the rate), true when it changed;
 * client_tb_lease is 0 when b holds n units (leasing what it lacks from
 * its share), else the ns to wait; client_tb_spend spends them. */
void client_tb_join(struct client_tb *b, struct client_tb_share *s, uint64_t now);
bool client_tb_set(struct client_tb *b, uint64_t rate, uint64_t burst, uint64_t now);
uint64_t client_tb_lease(struct client_tb *b, uint64_t n, uint64_t now);
void client_tb_spend(struct client_tb *b, uint64_t n);
/* client_io.c: splits io into sub-requests (or queues it for the pool). */
void client_io_start(struct client_io *io);
/* The io_timeout of v's I/O: the record's, else the client's. */
uint32_t client_vol_io_timeout_s(const struct zl_vol *v);

/* client_io.c: marks open volume vol_num of c fenced with -ZL_ERR_STALE
 * (logs it once; why says how the fence was seen). */
void client_vol_fence(struct zl_client *c, uint64_t vol_num, const char *why);
/* client_io.c: refuses open volume vol_num of c (every open volume when
 * vol_num is 0) for good with err: the same as a fence, with err and why as
 * what every I/O fails with and what zl_vol_refusal reports. */
void client_vol_refuse(struct zl_client *c, uint64_t vol_num, int err, const char *why);

/* client_node.c */
/* Lists the nodes from etcd and applies the list (blocking: zl_vol_open and
 * the legacy promotion only). 0 or an error (logged). */
int client_nodes_refresh(struct zl_client *c);
/* Applies a node list read from etcd (loop thread): new and moved nodes,
 * gone ones. 0 or -ENOMEM. */
int client_nodes_apply(struct zl_client *c, const struct zl_node_info *list, size_t cnt);
/* Any entry of node id (whatever its selection), or NULL. */
struct client_node *client_node_find(struct zl_client *c, const char *id);
/* The entry of (id, sel), added (with the address of another entry of id,
 * when there is one) if missing. NULL on -ENOMEM. */
struct client_node *client_node_get_or_add(struct zl_client *c, const char *id,
					   enum zl_xport_select sel);
/* Transport for a node record under selection sel (zl_xport_pick, with the
 * client's RDMA transport created on demand; auto falls back to TCP when it
 * cannot be). Returns 0 with *kind set, or -ZL_ERR_CONN (rdma asked, node or
 * host cannot do it). Blocking (address/route probe, at most ~1 s). */
int client_pick_kind(struct zl_client *c, enum zl_xport_select sel, const char *id,
		     const char *addr, uint16_t rdma_port, const char *transports,
		     enum zl_xport_kind *kind);
/* The client's transport of that kind, created on first use. 0 or error. */
int client_xport_get(struct zl_client *c, enum zl_xport_kind kind, struct zl_xport **out);
/* Picks n's transport (once) and returns it with the port to connect to. */
int client_node_xport(struct client_node *n, struct zl_xport **x, uint16_t *port);
bool client_node_is_down(const struct client_node *n, uint64_t now_ns);
/* Sends (or queues) s on node n; 0, or -ZL_ERR_CONN when the node is down. */
int client_node_submit(struct client_node *n, struct client_sub *s);
/* Sends queued subs; fails them when no connection can carry them. */
void client_node_kick(struct client_node *n);
void client_node_close_conns(struct client_node *n);
void client_node_free(struct client_node *n);
bool client_node_idle(const struct client_node *n);

/* client_io.c */
void client_sub_reply_cb(void *arg, int status, const struct zl_wire_hdr *rep);
/* Delivers err (a transport-level failure) to s from the loop, never inside
 * the caller. */
void client_sub_fail_async(struct client_sub *s, int err);
void client_vol_free(struct zl_vol *v);

/* client.c */
/* Heal mode: queues a failure report "reporter = this client, peer, error"
 * for (v, slice, slice_ver) for the worker, which puts it on the client's
 * report lease (granted on first use, kept alive from a loop timer, granted
 * again when it expired). Never waits for etcd: 0 when queued (the outcome
 * is logged; a failed one clears v->reported[slice] again, so that the
 * next attempt reports again, and counts as an etcd failure), or
 * -ZL_ERR_BUSY when CLIENT_REPORTS are on their way. */
int client_report_put(struct zl_client *c, struct zl_vol *v, uint32_t slice, const char *peer,
		      const char *error, uint64_t slice_ver);
/* Runs one control request (opcode op, after a HELLO) against each node on a
 * dedicated connection (transport picked by the client's selection), in
 * parallel; results[i] gets 0 or an error, rtt_ns (optional) the round trip
 * of the request, kinds (optional) the transport used (0: none). Blocking. */
int client_ctl_run(struct zl_client *c, const struct zl_node_info *nodes, size_t n, int op,
		   uint64_t vol_id, int *results, uint64_t *rtt_ns, enum zl_xport_kind *kinds);

#endif
