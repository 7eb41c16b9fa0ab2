/* Internals of lib/manager, shared by its files only:
 *   manager_rules.c  the decision rules: from the node table, the failure
 *                    reports and a slice row, the membership change to make
 *                    (M1-M7) or the rebalance move to start
 *   manager_node.c   the node table (which storage nodes live, since when
 *                    the others are gone) and its queries
 *   manager_pass.c   one pass: reads the state through lib/meta, applies
 *                    the rules row by row, writes rows, deletes reports
 *   manager_run.c    the thread, its watches and wake-ups, create/destroy
 *
 * Every function here runs on the manager's thread (or a unit test's),
 * except manager_wake.
 *
 * Its own thread and etcd handle, so no decision ever delays a CSI call or
 * the lease keepalives of the controller's own threads. Four prefix watches
 * (nodes/, volumes/, reports/, rebalance/) only wake the thread; every
 * pass then reads the whole state (node records, reports, volumes) and
 * decides from that, level-triggered, so an event lost to a watch
 * compaction or a reconnect delays a decision by at most
 * the 1 s tick. Followers keep
 * the node table (when each node record disappeared) current too, so a
 * replica that takes over does not restart the grace and down-out clocks.
 *
 * Every row change is one zl_meta_slice_set at the slice version the
 * decision was made on; -ZL_ERR_STALE reloads the volume and decides again.
 * Leadership is checked before every write (cfg.leader_may_write: the
 * caller's lease was renewed so recently that the write lands before it
 * could expire), and a pass stops at the first write it may no longer make. */
#ifndef ZL_MANAGER_INTERNAL_H
#define ZL_MANAGER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/common/common.h"
#include "lib/manager/manager.h"
#include "lib/meta/meta.h"

#define MGR_LOG	    "manager"
#define MGR_TICK_MS 1000
/* Writes of one slice in one pass (a report decision, then a node one). */
#define MGR_ROW_ROUNDS 4
/* Remembered "waits" lines (logged once per row version and reason). */
#define MGR_ONCE_SLOTS 256
/* M2 after M5: how long a member set OUT on a primary's failure report
 * stays out while its node record lives on unchanged (the storage node
 * lease, NODE_LEASE_TTL in storage/storage_node.c). */
#define MGR_M2_HOLD_MS 10000
/* Rows of one volume that may move at the same time (rebalance,
 * docs/REPLICATION.md §5). */
#define MGR_REBAL_INFLIGHT 4

/* One storage node as the manager last saw it. */
struct manager_node {
	char id[ZL_NODE_ID_MAX];
	bool present;		  /* in the last successful node list */
	uint64_t gone_ms;	  /* zl_now_ms when first seen absent; 0 while present */
	struct zl_node_info info; /* last record seen (valid once seen) */
	bool seen;
	uint64_t out_ms;   /* zl_now_ms when M5 last set a member of it OUT; 0: never */
	int64_t out_start; /* info.start_time then */
	/* Its status record says its disk failed (disk_error, "" when fine or
	 * unknown): M8 moves its members out, nothing is placed on it. */
	char disk_error[128];
	uint64_t disk_ms; /* zl_now_ms when first seen failed; 0 while fine */
	/* Its status record says its data dir is near full or full
	 * (disk_near_full, disk_full): its members stay, nothing new is placed
	 * on it (a copy to it would wait for room). */
	bool disk_full;
};

struct zl_manager {
	struct zl_manager_cfg cfg;
	char prefix[128];
	struct zl_etcd *etcd; /* the manager's own handle */
	unsigned int grace_s, down_out_s;
	struct zl_etcd_watch *watch[4];

	/* lock protects dirty, stop and stats; cond wakes the thread. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool dirty, stop;
	struct zl_manager_stats stats;
	pthread_t thread;
	bool inited, started;

	/* Manager thread only. */
	bool was_leader; /* at the last tick (logs the changes) */
	struct manager_node *nodes;
	size_t n_nodes, cap_nodes;
	uint64_t next_deadline_ms; /* earliest grace/down-out expiry seen in the pass */
	char once[MGR_ONCE_SLOTS][256];
	unsigned int once_next;
};

/* One member change of a row decision. */
struct manager_change {
	int member;
	char old_node[ZL_NODE_ID_MAX];
	char new_node[ZL_NODE_ID_MAX]; /* differs from old_node when replaced (M7) */
	enum zl_member_state from, to;
	char reason[160];
};

struct manager_decision {
	struct zl_slice row; /* the row to write (term 0: lib/meta fills it) */
	struct manager_change ch[ZL_MAX_REPLICAS * 2];
	int n_ch;
	/* Reports acted on: deleted once the row is written. */
	struct zl_report *acted[16];
	int n_acted;
};

/* ---- manager_node.c ---- */
bool manager_once(struct zl_manager *m, const char *key);
struct manager_node *manager_node_find(struct zl_manager *m, const char *id);
struct manager_node *manager_node_get(struct zl_manager *m, const char *id);
int manager_nodes_refresh(struct zl_manager *m);
void manager_deadline(struct zl_manager *m, uint64_t at);
bool manager_row_settled(struct zl_manager *m, const struct zl_slice *row);
/* A live node whose disk neither failed nor is (near) full: one that may
 * take a replica. */
bool manager_node_usable(const struct manager_node *nd);
size_t manager_live_domains(struct zl_manager *m);

/* ---- manager_rules.c ---- */
bool manager_report_done(const struct zl_report *r);
int manager_decide_reports(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			   struct zl_report *reps, size_t n_reps, struct manager_decision *d);
void manager_decide_nodes(struct zl_manager *m, const struct zl_volume *v, uint32_t slice,
			  struct manager_decision *d);
void manager_keep_primary(const struct zl_slice *cur, struct zl_slice *row);
void manager_rebal_count(struct zl_manager *m, const struct zl_volume *v, uint32_t *cnt,
			 uint32_t *moving);
void manager_rebal_extremes(struct zl_manager *m, const uint32_t *cnt, long *hi, long *lo);
bool manager_rebal_pick(struct zl_manager *m, const struct zl_volume *v, const uint32_t *cnt,
			long hi, uint32_t *slice, int *slot, long *to);

/* ---- manager_pass.c ---- */
int manager_report_drop(struct zl_manager *m, struct zl_report *r, const char *why);
int manager_pass(struct zl_manager *m);

/* ---- manager_run.c ---- */
/* The caller's cfg.leader_may_write: checked before every write. */
bool manager_may_write(struct zl_manager *m);
/* Fills *m from cfg (no watch, no thread): 0 or -ZL_ERR_INVAL. */
int manager_init(struct zl_manager *m, const struct zl_manager_cfg *cfg);
/* Undoes manager_init; safe on a zeroed or finished *m. */
void manager_fini(struct zl_manager *m);
/* One wake-up of the thread: refreshes the node table (every replica, so a
 * new leader keeps the grace and down-out clocks) and, while leading, runs
 * a pass. 0, -ECANCELED (leadership lost mid-pass) or an etcd error
 * (logged, rate-limited). */
int manager_tick(struct zl_manager *m);

#endif
