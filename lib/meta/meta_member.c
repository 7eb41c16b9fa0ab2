/* Slice members (docs/REPLICATION.md §1-2): their states, the term rule,
 * and the compare-and-swap writes of one placement row on its slice version
 * (zl_meta_slice_drop of 0.1, zl_meta_slice_set of the manager). */
#include <inttypes.h>
#include <string.h>

#include "lib/common/common.h"
#include "meta_internal.h"

/* Rounds of "read, check the slice version, transaction" while other slices
 * of the same volume keep changing the record. */
#define META_SLICE_CAS_TRIES 16

static const char *const meta_member_names[] = {
    [ZL_MEMBER_OUT] = "out",
    [ZL_MEMBER_RECOVERING] = "recovering",
    [ZL_MEMBER_IN_SYNC] = "in_sync",
};

const char *zl_member_state_name(enum zl_member_state st)
{
	return (unsigned)st < ZL_ARRAY_SIZE(meta_member_names) ? meta_member_names[st] : "?";
}

int meta_member_state_parse(const char *name)
{
	for (size_t i = 0; i < ZL_ARRAY_SIZE(meta_member_names); i++) {
		if (!strcmp(name, meta_member_names[i]))
			return (int)i;
	}
	return -1;
}

enum zl_member_state zl_slice_member_state(const struct zl_slice *s, int i)
{
	if (s->in_sync[i])
		return ZL_MEMBER_IN_SYNC;
	return s->state[i] == ZL_MEMBER_RECOVERING ? ZL_MEMBER_RECOVERING : ZL_MEMBER_OUT;
}

void zl_slice_member_set(struct zl_slice *s, int i, enum zl_member_state st)
{
	s->in_sync[i] = st == ZL_MEMBER_IN_SYNC;
	s->state[i] = (uint8_t)st;
}

int zl_slice_member_count(const struct zl_slice *s, enum zl_member_state st)
{
	int n = 0;

	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++)
		n += zl_slice_member_state(s, i) == st;
	return n;
}

uint32_t zl_meta_min_size_default(uint32_t replicas)
{
	return replicas >= 3 ? 2 : 1;
}

uint32_t zl_volume_min_size(const struct zl_volume *v)
{
	return v->min_size ? v->min_size : zl_meta_min_size_default(v->replicas);
}

/* ---- the term rule ---- */

static uint32_t meta_term(const struct zl_slice *s)
{
	return s->term ? s->term : 1;
}

/* Whether the primary of b is another node, or another incarnation of the
 * same node, than the primary of a (no primary counts as one more). */
static bool meta_primary_changed(const struct zl_slice *a, const struct zl_slice *b)
{
	int pa = zl_slice_primary(a), pb = zl_slice_primary(b);

	if (pa < 0 || pb < 0)
		return pa != pb;
	return strcmp(a->nodes[pa], b->nodes[pb]) || strcmp(a->incarnation[pa], b->incarnation[pb]);
}

/* The row `next` may follow `cur`: some member is in sync (-ZL_ERR_UNAVAIL),
 * and the term does not go back and grows when the primary changes
 * (-ZL_ERR_INVAL). The reason goes into why. */
static int meta_slice_transition_check(const struct zl_slice *cur, const struct zl_slice *next,
				       char *why, size_t why_len)
{
	if (zl_slice_primary(next) < 0) {
		meta_fail(why, why_len, "the row would have no in-sync member");
		return -ZL_ERR_UNAVAIL;
	}
	if (meta_term(next) < meta_term(cur))
		return meta_fail(why, why_len, "term %u would go back from %u", meta_term(next),
				 meta_term(cur));
	if (meta_primary_changed(cur, next) && meta_term(next) == meta_term(cur))
		return meta_fail(why, why_len,
				 "the primary changes but the term stays %u (bump it)",
				 meta_term(cur));
	return 0;
}

/* Makes `row` (the current row, already holding the caller's change) the
 * row that follows `cur`: a term of 0 becomes the current term, plus one when
 * the primary changes. -ZL_ERR_INVAL when that would overflow. */
static int meta_slice_term_fill(const struct zl_slice *cur, struct zl_slice *row)
{
	if (row->term)
		return 0;
	row->term = meta_term(cur);
	if (meta_primary_changed(cur, row)) {
		if (row->term == UINT32_MAX)
			return -ZL_ERR_INVAL;
		row->term++;
	}
	return 0;
}

/* ---- compare-and-swap of one row ---- */

/* Changes *row (the current row of the slice, at the seen version) in place.
 * Returns 0 to write it, 1 when no change is needed (the call succeeds
 * without a write), or a negative error that ends the call (its reason in
 * why). */
typedef int (*meta_slice_edit_fn)(struct zl_slice *row, void *arg, char *why, size_t why_len);

/* The one compare-and-swap loop of zl_meta_slice_drop and zl_meta_slice_set:
 * see meta.h. `what` names the operation in log lines. */
static int meta_slice_cas(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t slice,
			  uint64_t seen_version, const char *what, meta_slice_edit_fn edit,
			  void *arg, struct zl_volume *out)
{
	struct zl_volume v;
	char why[160] = "";
	int ret;

	for (int attempt = 0; attempt < META_SLICE_CAS_TRIES; attempt++) {
		struct zl_slice cur, *s;

		ret = zl_meta_volume_get(e, prefix, vol_id, &v);
		if (ret)
			return ret;
		if (slice >= v.n_slices) {
			ZL_LOG_ERR("meta", "%s vol=%s slice=%u: the volume has %u slices", what,
				   vol_id, slice, v.n_slices);
			ret = -ZL_ERR_INVAL;
			goto out_fini;
		}
		s = &v.slices[slice];
		if (s->version != seen_version) {
			/* Someone (the manager, another reporter) changed the row
			 * after the caller read it: its decision may be moot. */
			ZL_LOG_INFO("meta",
				    "%s vol=%s slice=%u refused: seen version %" PRIu64
				    " is not the current %" PRIu64 "; reload and decide again",
				    what, vol_id, slice, seen_version, s->version);
			ret = -ZL_ERR_STALE;
			goto out_fini;
		}
		cur = *s;
		ret = edit(s, arg, why, sizeof(why));
		if (ret == 1)
			goto out_done;
		if (!ret && meta_slice_term_fill(&cur, s))
			ret = meta_fail(why, sizeof(why), "the term is at its maximum");
		if (!ret)
			ret = meta_slice_transition_check(&cur, s, why, sizeof(why));
		if (ret) {
			ZL_LOG_ERR("meta", "%s vol=%s slice=%u version=%" PRIu64 " refused: %s",
				   what, vol_id, slice, seen_version,
				   why[0] ? why : zl_errname(ret));
			goto out_fini;
		}
		s->version = seen_version + 1;
		ret = zl_meta_volume_update(e, prefix, &v);
		if (ret == 0) {
			ZL_LOG_INFO("meta", "%s vol=%s slice=%u version=%" PRIu64 " term=%u", what,
				    vol_id, slice, s->version, s->term);
			goto out_done;
		}
		zl_volume_fini(&v);
		if (ret != -ZL_ERR_CONFLICT)
			return ret;
		/* Another slice (or this one: the next round says) changed. */
		ZL_LOG_DEBUG("meta", "%s vol=%s slice=%u raced another update attempt=%d", what,
			     vol_id, slice, attempt);
	}
	ZL_LOG_ERR("meta", "%s vol=%s slice=%u: %d conflicting updates; retry", what, vol_id, slice,
		   META_SLICE_CAS_TRIES);
	return -ZL_ERR_CONFLICT;

out_done:
	if (out) {
		*out = v;
		return 0;
	}
	ret = 0;
out_fini:
	zl_volume_fini(&v);
	return ret;
}

static int meta_slice_drop_edit(struct zl_slice *s, void *arg, char *why, size_t why_len)
{
	const char *node_id = arg;
	int idx = zl_slice_index_of(s, node_id);

	if (idx < 0 || !s->in_sync[idx])
		return 1; /* already out of sync at this version: nothing to do */
	if (zl_slice_member_count(s, ZL_MEMBER_IN_SYNC) <= 1) {
		meta_fail(why, why_len, "node %s is the last in-sync replica", node_id);
		return -ZL_ERR_UNAVAIL;
	}
	zl_slice_member_set(s, idx, ZL_MEMBER_OUT);
	s->term = 0; /* the current one, bumped when node_id was the primary */
	return 0;
}

int zl_meta_slice_drop(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t slice,
		       const char *node_id, uint64_t seen_version, struct zl_volume *out)
{
	if (!vol_id || !node_id)
		return -ZL_ERR_INVAL;
	return meta_slice_cas(e, prefix, vol_id, slice, seen_version, "slice drop",
			      meta_slice_drop_edit, (void *)node_id, out);
}

static int meta_slice_set_edit(struct zl_slice *s, void *arg, char *why, size_t why_len)
{
	const struct zl_slice *next = arg;

	(void)why;
	(void)why_len;
	*s = *next;
	/* in_sync[] decides; state[] is written consistently with it. */
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++)
		zl_slice_member_set(s, i, zl_slice_member_state(next, i));
	return 0;
}

int zl_meta_slice_set(struct zl_etcd *e, const char *prefix, const char *vol_id, uint32_t slice,
		      uint64_t seen_version, const struct zl_slice *new_row, struct zl_volume *out)
{
	if (!vol_id || !new_row || new_row->n > ZL_MAX_REPLICAS)
		return -ZL_ERR_INVAL;
	return meta_slice_cas(e, prefix, vol_id, slice, seen_version, "slice set",
			      meta_slice_set_edit, (void *)new_row, out);
}
