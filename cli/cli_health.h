/* Health of the cluster as `zl status` and `zl volume inspect` show it
 * (docs/REPLICATION.md §9): from the slice rows (member states), the node
 * records (a node is alive while its record exists) and the status records
 * storage daemons publish (recovery progress, slices peering). Pure
 * functions, unit-tested. */
#ifndef ZL_CLI_HEALTH_H
#define ZL_CLI_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "lib/meta/meta.h"

enum zl_cli_slice_state {
	ZL_CLI_SLICE_ACTIVE,	 /* every member in sync, every node alive */
	ZL_CLI_SLICE_RECOVERING, /* a member is being copied to */
	ZL_CLI_SLICE_DEGRADED,	 /* a member is out or its node is down */
	ZL_CLI_SLICE_DOWN,	 /* no in-sync member, or its primary's node is down */
	ZL_CLI_SLICE_PEERING,	 /* its primary has not peered in the row's term: I/O waits */
	ZL_CLI_SLICE_STATES
};

struct zl_cli_slice_eval {
	enum zl_cli_slice_state state;
	bool no_in_sync;   /* no member in sync: nothing serves it */
	bool primary_down; /* the primary's node record is gone */
	bool below_min;	   /* fewer live in-sync members than min_size: writes wait */
	uint32_t in_sync_alive;
};

struct zl_cli_health {
	uint32_t slices, degraded, recovering, peering;
	uint32_t no_in_sync, primary_down, below_min;
	uint64_t rate, bytes_left; /* summed over live nodes' status records */
	uint32_t disks_full;	   /* live nodes whose status record says disk_full */
	uint32_t disks_near_full;  /* ... disk_near_full, not disk_full */
};

/* True when node id has a record in nodes (n sorted by id, as
 * zl_meta_node_list returns them). */
bool zl_cli_node_alive(const struct zl_node_info *nodes, size_t n, const char *id);
/* True when the status record of row s's primary (st: n records sorted by
 * node, as zl_meta_status_list returns them) lists slice `slice` of volume
 * vol as peering in the row's term. */
bool zl_cli_slice_peering(const struct zl_slice *s, uint64_t vol, uint32_t slice,
			  const struct zl_node_status *st, size_t n);
/* The state of row s of a volume with min_size; peering as
 * zl_cli_slice_peering says. Down wins over peering, peering over the
 * member states. */
void zl_cli_slice_eval(const struct zl_slice *s, uint32_t min_size,
		       const struct zl_node_info *nodes, size_t n_nodes, bool peering,
		       struct zl_cli_slice_eval *out);
/* "active", "recovering", "degraded", "down", "peering". */
const char *zl_cli_slice_state_name(enum zl_cli_slice_state st);
/* Adds every row of v to h (st, n_st: the status records, may be 0). */
void zl_cli_health_add_volume(struct zl_cli_health *h, const struct zl_volume *v,
			      const struct zl_node_info *nodes, size_t n_nodes,
			      const struct zl_node_status *st, size_t n_st);
/* Adds the published progress of live nodes. */
void zl_cli_health_add_status(struct zl_cli_health *h, const struct zl_node_status *st, size_t n,
			      const struct zl_node_info *nodes, size_t n_nodes);
/* The one line: "HEALTH_OK", "HEALTH_WARN 3 slices degraded (1 recovering),
 * recovering 12.3 MiB/s, ETA 40 s", "HEALTH_ERR 2 slices below min_size;
 * ...". Peering slices count as degraded and are named after them:
 * "HEALTH_WARN 2 slices degraded (0 recovering), 2 slices peering".
 * Returns 0 (OK), 1 (WARN) or 2 (ERR). */
int zl_cli_health_line(const struct zl_cli_health *h, char *out, size_t len);

#endif
