/* Deterministic greedy placement.
 *
 * Nodes are sorted by id first, so the result depends only on the set of
 * nodes, never on the order the caller listed them. Then, slice by slice and
 * replica position by replica position, the node chosen is the one with the
 * lowest key among the eligible nodes:
 *
 *   eligible: not already in the slice; and, while some eligible node has a
 *             failure domain not yet used by the slice, only such nodes (so
 *             replicas land on distinct domains whenever enough exist, and on
 *             as many domains as there are otherwise).
 *   key:      position 0 (primary): (primaries + 1) / weight first, so that
 *             primaries spread in proportion to capacity;
 *             then (replicas + 1) / weight, the node's load after taking this
 *             replica (weight = free bytes, 0 counts as 1);
 *             then zl_hash64(seed ^ slice ^ hash(id)), so ties break
 *             differently per volume and per slice but reproducibly;
 *             last the sorted position, for identical hashes.
 *
 * Loads are compared as exact fractions in 128-bit arithmetic: with weights
 * in bytes, floating point would make equal loads compare unequal. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common/common.h"
#include "placement.h"

struct place_cand {
	const struct zl_place_node *node;
	uint32_t index;	 /* into the caller's nodes[] */
	uint32_t domain; /* dense failure-domain number */
	uint64_t weight; /* free bytes, at least 1 */
	uint64_t id_hash;
	uint64_t assigned;  /* replicas placed so far */
	uint64_t primaries; /* primaries placed so far */
};

static int placement_cmp_id(const void *a, const void *b)
{
	const struct place_cand *x = a, *y = b;

	return strcmp(x->node->id, y->node->id);
}

/* a/wa < b/wb, exactly. */
static int placement_frac_cmp(uint64_t a, uint64_t wa, uint64_t b, uint64_t wb)
{
	unsigned __int128 l = (unsigned __int128)a * wb;
	unsigned __int128 r = (unsigned __int128)b * wa;

	return l < r ? -1 : l > r ? 1 : 0;
}

/* Negative when candidate x is preferred over y for position `pos`. */
static int placement_key_cmp(const struct place_cand *x, const struct place_cand *y, uint32_t pos,
			     uint64_t slice_seed, uint32_t xi, uint32_t yi)
{
	int c;

	if (pos == 0) {
		c = placement_frac_cmp(x->primaries + 1, x->weight, y->primaries + 1, y->weight);
		if (c)
			return c;
	}
	c = placement_frac_cmp(x->assigned + 1, x->weight, y->assigned + 1, y->weight);
	if (c)
		return c;
	uint64_t hx = zl_hash64(slice_seed ^ x->id_hash);
	uint64_t hy = zl_hash64(slice_seed ^ y->id_hash);
	if (hx != hy)
		return hx < hy ? -1 : 1;
	return xi < yi ? -1 : xi > yi ? 1 : 0;
}

/* Gives each candidate a dense domain number; nodes without a domain get one
 * of their own. Candidates are sorted by id, so numbering is deterministic. */
static void placement_number_domains(struct place_cand *c, size_t n)
{
	uint32_t next = 0;

	for (size_t i = 0; i < n; i++) {
		const char *d = c[i].node->domain;
		bool found = false;

		if (d && d[0]) {
			for (size_t j = 0; j < i; j++) {
				const char *dj = c[j].node->domain;

				if (dj && dj[0] && !strcmp(d, dj)) {
					c[i].domain = c[j].domain;
					found = true;
					break;
				}
			}
		}
		if (!found)
			c[i].domain = next++;
	}
}

int zl_placement_compute(const struct zl_place_node *nodes, size_t n_nodes, uint32_t n_slices,
			 uint32_t replicas, uint64_t seed, uint32_t *out)
{
	struct place_cand *cand;
	uint32_t *slice_dom;
	uint8_t *in_slice;
	int ret = 0;

	if (replicas == 0 || replicas > 3 || n_slices == 0 || !out || (n_nodes && !nodes))
		return -ZL_ERR_INVAL;
	if (n_nodes < replicas)
		return -ZL_ERR_NODES;
	if (n_nodes > UINT32_MAX)
		return -ZL_ERR_INVAL;
	for (size_t i = 0; i < n_nodes; i++) {
		if (!nodes[i].id)
			return -ZL_ERR_INVAL;
	}

	cand = calloc(n_nodes, sizeof(*cand));
	if (!cand)
		return -ENOMEM;
	in_slice = calloc(n_nodes, 1);
	if (!in_slice) {
		ret = -ENOMEM;
		goto out_cand;
	}
	/* Domains used by the current slice, by dense domain number. */
	slice_dom = calloc(n_nodes, sizeof(*slice_dom));
	if (!slice_dom) {
		ret = -ENOMEM;
		goto out_in_slice;
	}

	for (size_t i = 0; i < n_nodes; i++) {
		cand[i].node = &nodes[i];
		cand[i].index = (uint32_t)i;
		cand[i].weight = nodes[i].free ? nodes[i].free : 1;
		cand[i].id_hash = zl_hash_str(nodes[i].id, 0);
	}
	qsort(cand, n_nodes, sizeof(*cand), placement_cmp_id);
	for (size_t i = 1; i < n_nodes; i++) {
		if (!strcmp(cand[i - 1].node->id, cand[i].node->id)) {
			/* Duplicate ids would make the result depend on input order. */
			ret = -ZL_ERR_INVAL;
			goto out_slice_dom;
		}
	}
	placement_number_domains(cand, n_nodes);

	for (uint32_t s = 0; s < n_slices; s++) {
		uint64_t slice_seed = seed ^ (uint64_t)s;
		uint32_t n_used_dom = 0;

		memset(in_slice, 0, n_nodes);
		for (uint32_t r = 0; r < replicas; r++) {
			bool new_domain_left = false;
			size_t best = SIZE_MAX;

			/* Is there still a node on a domain this slice lacks? */
			for (size_t i = 0; i < n_nodes && !new_domain_left; i++) {
				bool used = false;

				if (in_slice[i])
					continue;
				for (uint32_t k = 0; k < n_used_dom; k++)
					used |= slice_dom[k] == cand[i].domain;
				new_domain_left = !used;
			}
			for (size_t i = 0; i < n_nodes; i++) {
				if (in_slice[i])
					continue;
				if (new_domain_left) {
					bool used = false;

					for (uint32_t k = 0; k < n_used_dom; k++)
						used |= slice_dom[k] == cand[i].domain;
					if (used)
						continue;
				}
				if (best == SIZE_MAX ||
				    placement_key_cmp(&cand[i], &cand[best], r, slice_seed,
						      (uint32_t)i, (uint32_t)best) < 0)
					best = i;
			}
			/* n_nodes >= replicas guarantees a candidate. */
			in_slice[best] = 1;
			cand[best].assigned++;
			if (r == 0)
				cand[best].primaries++;
			bool dom_known = false;
			for (uint32_t k = 0; k < n_used_dom; k++)
				dom_known |= slice_dom[k] == cand[best].domain;
			if (!dom_known)
				slice_dom[n_used_dom++] = cand[best].domain;
			out[(size_t)s * replicas + r] = cand[best].index;
		}
	}

out_slice_dom:
	free(slice_dom);
out_in_slice:
	free(in_slice);
out_cand:
	free(cand);
	return ret;
}
