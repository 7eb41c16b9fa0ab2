/* Placement: chooses the replica nodes of every slice of a volume.
 * Replicas of one slice are on distinct nodes, on distinct failure domains
 * when there are at least `replicas` domains, balanced by free capacity
 * (a node with twice the free space gets about twice the replicas), primaries
 * spread evenly, and the result is deterministic for the same input
 * (nodes are sorted by id inside, so input order does not matter). */
#ifndef ZL_PLACEMENT_H
#define ZL_PLACEMENT_H

#include <stdint.h>
#include <stddef.h>

struct zl_place_node {
	const char *id;      /* unique node id */
	const char *domain;  /* failure domain ("zone-a/rack-1"), NULL or "" = its own */
	uint64_t free;       /* free bytes, used as weight (0 counts as 1) */
};

/* Fills out[s * replicas + r] with the index (into nodes[]) of replica r of
 * slice s; r == 0 is the primary. Returns 0, -ZL_ERR_INVAL (replicas 0 or >
 * 3, n_slices 0), -ZL_ERR_NODES (fewer nodes than replicas). */
int zl_placement_compute(const struct zl_place_node *nodes, size_t n_nodes, uint32_t n_slices,
			 uint32_t replicas, uint64_t seed, uint32_t *out);

#endif
