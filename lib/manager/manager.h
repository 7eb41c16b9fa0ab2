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

/* Stops the thread and the watches and frees m. NULL: no-op. */
void zl_manager_destroy(struct zl_manager *m);

#endif
