/* The cluster manager (docs/REPLICATION.md §2, rules M1-M7 of the heal
 * contract): the one writer of slice membership (which members of a row are
 * in sync, recovering or out), and of rebalance moves. zipline-controller
 * runs it (--manager=on) and tells it, through two callbacks, whether this
 * replica is the elected leader; it decides only while it is.
 *
 * It runs on a thread of its own with an etcd handle of its own, so no
 * decision delays a CSI call or a lease keepalive of the caller. */
#ifndef ZL_MANAGER_H
#define ZL_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/etcd/etcd.h"

struct zl_manager;

/* Leadership as the caller knows it; called from the manager's thread. */
typedef bool (*zl_manager_leader_fn)(void *arg);

struct zl_manager_cfg {
	struct zl_etcd *etcd;	 /* the manager's own handle; outlives the manager */
	const char *prefix;	 /* etcd key prefix, e.g. "/zipline/" */
	unsigned int grace_s;	 /* a node record gone this long: its members go OUT */
	unsigned int down_out_s; /* gone this long: its members are replaced (M7) */
	/* True while the caller leads: the manager decides only then. */
	zl_manager_leader_fn leader_is;
	/* True while the caller leads and a write sent now lands before its
	 * leader lease could expire: checked before every write. */
	zl_manager_leader_fn leader_may_write;
	void *leader_arg;
};

/* Starts the manager: watches of nodes/, volumes/, reports/ and rebalance/
 * under cfg->prefix that wake its thread, plus a 1 s tick. Returns 0 with
 * *out set, -ZL_ERR_INVAL (prefix too long, callback missing), -ENOMEM, or
 * the error of a watch or of pthread_create (logged; nothing is left
 * running). */
int zl_manager_create(const struct zl_manager_cfg *cfg, struct zl_manager **out);

/* Wakes the manager for a pass now (e.g. leadership changed). NULL: no-op. */
void zl_manager_kick(struct zl_manager *m);

/* What the manager did and last saw, for the controller's metrics. */
enum zl_manager_slice_class {
	ZL_MGR_SLICE_ACTIVE,	 /* every member in sync */
	ZL_MGR_SLICE_RECOVERING, /* a member is being copied to */
	ZL_MGR_SLICE_DEGRADED,	 /* a member out, none recovering, one in sync at least */
	ZL_MGR_SLICE_DOWN,	 /* no member in sync: nothing can be read */
	ZL_MGR_SLICE_CLASSES_
};

struct zl_manager_stats {
	bool leading;		/* deciding at the last tick */
	uint64_t passes;	/* passes run while leading */
	uint64_t pass_errors;	/* of those, the ones that failed */
	uint64_t last_pass_ms;	/* zl_now_ms of the last pass that ended without error */
	uint64_t changes[3];	/* member state changes written, by the new state
				 * (enum zl_member_state) */
	uint64_t replacements;	/* members moved to another node (M7, M8) */
	uint64_t rebalance_moves;
	/* The slices of ready volumes by class, and the volumes, as the last
	 * pass that ended without error left them (zero until one did). */
	uint32_t slices[ZL_MGR_SLICE_CLASSES_];
	uint32_t volumes;
};

/* Copies m's figures (any thread). */
void zl_manager_stats(struct zl_manager *m, struct zl_manager_stats *out);

/* Stops the thread and the watches and frees m. NULL: no-op. */
void zl_manager_destroy(struct zl_manager *m);

#endif
