/* zipline-storage, the core its files share: the configuration and the
 * daemon object. Its functions are declared by concern: storage_io.h (the
 * data path), storage_heal.h (healing), storage_ctl.h (control);
 * storage_chunk.h is the chunk store. Only storage/ and its unit tests
 * include these headers.
 *
 * Threads: the loop thread owns everything below except struct
 * zl_storage_node, which runs the heartbeat on its own thread with its own
 * etcd handle. */
#ifndef ZL_STORAGE_H
#define ZL_STORAGE_H

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/common/common.h"
#include "lib/common/loop.h"
#include "lib/common/slab.h"
#include "lib/common/worker.h"
#include "lib/etcd/etcd.h"
#include "lib/meta/meta.h"
#include "lib/metrics/metrics.h"
#include "lib/transport/transport.h"
#include "lib/transport/xport_hello.h"
#include "lib/wire/wire.h"
#include "storage_chunk.h"
#include "storage_fair.h"

struct zl_storage_cfg {
	const char *data_dir;
	char listen_host[64];
	uint16_t listen_port;
	char advertise[64];
	char node_id[ZL_NODE_ID_MAX];
	char domain[128]; /* labels joined by "," */
	/* etcd endpoints, TLS and auth (password inside the parser's struct
	 * zl_cfg_etcd of main.c, which lives as long as the process). */
	struct zl_etcd_opts eo;
	const char *transport;	 /* auto|tcp|rdma */
	const char *prefix;
	uint64_t capacity; /* 0: filesystem size */
	unsigned int etcd_wait_sec;
	/* --heal=on (docs/REPLICATION.md, S1-S3): data versions, forwarding to
	 * recovering members, failure reports instead of drops, recovery. Off:
	 * the 0.1 behaviour, exactly. */
	bool heal;
	uint32_t repl_wait_ms;	/* --repl-wait: bound of a write parked on a row change */
	uint32_t recovery_mbps; /* --recovery-mbps: megabits/s of recovery copies */
	uint32_t scrub_mbps;	   /* --scrub-mbps: megabits/s a scrub reads (default 100) */
	uint32_t scrub_interval_s; /* --scrub-interval: background scrub period, 0 = off */
	uint32_t gc_interval_s;	   /* --gc-interval: old-copy removal period, 0 = off */
	uint32_t gc_grace_s;	   /* --gc-grace: a row off this node that long, then removed */
	bool journal;		   /* --write-path journal, the default (storage_chunk.h) */
	uint64_t journal_size;	   /* --journal-size, 0: default */
	uint32_t busy_poll_us;	   /* --busy-poll: spin window after work, 0 = off */
	const char *metrics;	   /* --metrics HOST:PORT (off: NULL), storage_metrics.c */
	uint16_t metrics_port;	   /* the port it bound (0: off), in the node record */
	/* Identity of the data dir (storage_ident.c), set by
	 * zl_storage_ident_resolve before anything touches the disk. */
	char cluster_id[ZL_META_ID_SIZE];
	char incarnation[ZL_META_ID_SIZE];
	/* --auth on|off (docs/SECURITY.md) and --cluster-key-file (else the
	 * key <prefix>keys/cluster in etcd). */
	bool auth;
	const char *cluster_key_file;
	/* --tls-cert/--tls-key (serve TLS only, published as "tls" in the node
	 * record), --tls-ca (verify peers that serve TLS), --tls-server-name
	 * (the name their certificates carry; default: their address). */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	const char *tls_server_name;
	/* --fair-share on|off, --fair-share-bytes: the disk shared per volume
	 * under contention (storage_fair.h). */
	struct zl_storage_fair_opts fair;
};

struct zl_storage_vols;
struct zl_storage_fwd;
struct zl_storage_node;
struct zl_storage_tombs;
struct zl_storage_heal;
struct zl_storage_peering;
struct zl_storage_scrub;
struct storage_req;
struct zl_storage_auth;
struct zl_storage_ord;
struct zl_storage_ddir;
struct zl_storage_metrics;
struct zl_storage_snapgc;

/* What the requests did, counted by the loop thread where each ends
 * (storage_server.c srv_account, srv_reply) in plain counters; the metrics
 * module copies them once a second (storage_metrics.c). Indexed by opcode. */
#define ZL_STORAGE_ERR_SLOTS 64 /* ZL_ERR_* - ZL_ERR_INVAL, the last: any errno */
struct zl_storage_reqstats {
	uint64_t n[ZL_OP_MAX_ + 1];	/* requests ended */
	uint64_t bytes[ZL_OP_MAX_ + 1]; /* their data (READ, WRITE, REPL_WRITE, pushes) */
	struct zl_metrics_hist lat[ZL_OP_MAX_ + 1]; /* arrival to answer sent */
	uint64_t err[ZL_OP_MAX_ + 1][ZL_STORAGE_ERR_SLOTS]; /* error answers by code */
	struct zl_metrics_hist fwd_lat; /* this primary's forwards: send to a good reply */
	struct zl_wire_scrub_result scrub; /* summed over the scrub jobs that ended */
	uint64_t scrub_jobs;
	uint64_t fair_queued; /* disk operations that waited for their volume's share */
};

struct zl_storage {
	struct zl_storage_cfg cfg;
	struct zl_loop *loop;
	/* Buffer pool of the chunk store and request buffers: the RDMA
	 * transport when there is one (registered memory; TCP takes any),
	 * else the TCP one. Not owned: it is xport_tcp or xport_rdma. */
	struct zl_xport *xport;
	struct zl_xport *xport_tcp;  /* always */
	struct zl_xport *xport_rdma; /* NULL when not serving RDMA */
	enum zl_xport_select sel;    /* --transport */
	struct zl_xport_listener *listener;	 /* TCP */
	struct zl_xport_listener *listener_rdma; /* NULL without RDMA */
	struct zl_etcd *etcd; /* loop thread's handle */
	/* The helper thread of the daemon's own etcd work (failure reports,
	 * the report lease, old-copy look-ups; lib/common/worker.h) and its
	 * own etcd handle, so that no loop-thread call waits behind its
	 * calls. NULL with --heal=off. */
	struct zl_worker *worker;
	struct zl_etcd *wetcd;
	struct zl_chunk_store *chunks;
	struct zl_storage_vols *vols;
	struct zl_storage_fwd *fwd; /* connections to other storage nodes (storage_fwd.c) */
	struct zl_storage_tombs *tombs;
	struct zl_slab reqs; /* request contexts (storage_server.c) */
	struct zl_storage_ord *ord; /* REPL_WRITE order queues (storage_server.c) */
	struct zl_storage_fair *fair; /* disk admission per volume (storage_fair.c) */
	uint32_t inflight; /* requests not yet answered */
	uint32_t n_conns;  /* connections served now (storage_server.c) */
	/* Their log lines: accepted ones per transport (TCP, RDMA), refused. */
	struct zl_ratelimit accept_rl[2], conn_rl;
	struct zl_ratelimit snap_rl; /* writes refused without a snapshot sequence */
	struct zl_ratelimit row_short_rl; /* writes refused: row short of room */
	bool draining;
	struct zl_storage_heal *heal; /* NULL with --heal=off */
	struct zl_storage_scrub *scrub; /* storage_scrub.c */
	/* Writes waiting for a row change (--heal=on, storage_server.c),
	 * checked against the watch-refreshed volume cache by park_t. */
	struct storage_req *parked;
	struct zl_timer park_t;
	/* Peering (storage_peering.c, NULL with --heal=off) and the client
	 * requests held while their slice peers (storage_server.c), checked
	 * by held_t. */
	struct zl_storage_peering *peering;
	struct storage_req *held;
	uint32_t n_held;
	uint32_t n_held_load; /* of them, waiting for a volume record load */
	struct zl_timer held_t;
	struct zl_storage_status *status; /* NULL with --heal=off */
	struct zl_storage_gc *gc; /* old copies of moved slices (storage_gc.c) */
	struct zl_storage_snapgc *snapgc; /* clones of deleted snapshots (storage_snapgc.c) */
	struct zl_storage_auth *auth; /* storage_auth.c */
	struct zl_storage_ddir *ddir; /* the data dir watch (storage_ddir.c) */
	struct zl_storage_reqstats rs;	    /* loop thread only */
	struct zl_storage_metrics *metrics; /* NULL without --metrics */
	bool registered;		    /* in etcd (for /readyz) */
};

#endif
