/* Health of slices and of the cluster (cli_health.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_health.h"

static int node_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct zl_node_info *)elem)->id);
}

bool zl_cli_node_alive(const struct zl_node_info *nodes, size_t n, const char *id)
{
	return n && bsearch(id, nodes, n, sizeof(*nodes), node_cmp);
}

static int status_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct zl_node_status *)elem)->node);
}

static int peering_cmp(const void *key, const void *elem)
{
	const struct zl_status_peering *x = key, *y = elem;

	if (x->vol != y->vol)
		return x->vol < y->vol ? -1 : 1;
	return x->slice < y->slice ? -1 : x->slice > y->slice;
}

bool zl_cli_slice_peering(const struct zl_slice *s, uint64_t vol, uint32_t slice,
			  const struct zl_node_status *st, size_t n)
{
	int prim = zl_slice_primary(s);
	struct zl_status_peering key = {.vol = vol, .slice = slice};
	const struct zl_status_peering *e;
	const struct zl_node_status *ns;

	if (prim < 0 || !n)
		return false;
	ns = bsearch(s->nodes[prim], st, n, sizeof(*st), status_cmp);
	if (!ns || !ns->n_peering)
		return false;
	e = bsearch(&key, ns->peering, ns->n_peering, sizeof(*e), peering_cmp);
	/* A record from an older term (published before the row changed) does
	 * not count. */
	return e && e->term == (s->term ? s->term : 1);
}

void zl_cli_slice_eval(const struct zl_slice *s, uint32_t min_size,
		       const struct zl_node_info *nodes, size_t n_nodes, bool peering,
		       struct zl_cli_slice_eval *out)
{
	int prim = zl_slice_primary(s);
	bool recovering = false, degraded = false;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < s->n && i < ZL_MAX_REPLICAS; i++) {
		enum zl_member_state ms = zl_slice_member_state(s, i);
		bool alive = zl_cli_node_alive(nodes, n_nodes, s->nodes[i]);

		if (ms == ZL_MEMBER_IN_SYNC && alive)
			out->in_sync_alive++;
		recovering |= ms == ZL_MEMBER_RECOVERING && alive;
		degraded |= ms != ZL_MEMBER_IN_SYNC || !alive;
	}
	out->no_in_sync = prim < 0;
	out->primary_down = prim >= 0 && !zl_cli_node_alive(nodes, n_nodes, s->nodes[prim]);
	out->below_min = !out->no_in_sync && !out->primary_down && out->in_sync_alive < min_size;
	if (out->no_in_sync || out->primary_down)
		out->state = ZL_CLI_SLICE_DOWN;
	else if (peering)
		out->state = ZL_CLI_SLICE_PEERING;
	else if (recovering)
		out->state = ZL_CLI_SLICE_RECOVERING;
	else if (degraded || out->below_min)
		out->state = ZL_CLI_SLICE_DEGRADED;
	else
		out->state = ZL_CLI_SLICE_ACTIVE;
}

const char *zl_cli_slice_state_name(enum zl_cli_slice_state st)
{
	switch (st) {
	case ZL_CLI_SLICE_ACTIVE:
		return "active";
	case ZL_CLI_SLICE_RECOVERING:
		return "recovering";
	case ZL_CLI_SLICE_DEGRADED:
		return "degraded";
	case ZL_CLI_SLICE_DOWN:
		return "down";
	case ZL_CLI_SLICE_PEERING:
		return "peering";
	case ZL_CLI_SLICE_STATES:
		break;
	}
	return "?";
}

void zl_cli_health_add_volume(struct zl_cli_health *h, const struct zl_volume *v,
			      const struct zl_node_info *nodes, size_t n_nodes,
			      const struct zl_node_status *st, size_t n_st)
{
	uint32_t min_size = zl_volume_min_size(v);

	for (uint32_t i = 0; i < v->n_slices; i++) {
		const struct zl_slice *s = &v->slices[i];
		struct zl_cli_slice_eval e;

		zl_cli_slice_eval(s, min_size, nodes, n_nodes,
				  zl_cli_slice_peering(s, v->num, i, st, n_st), &e);
		h->slices++;
		h->degraded += e.state != ZL_CLI_SLICE_ACTIVE;
		h->recovering += e.state == ZL_CLI_SLICE_RECOVERING;
		h->peering += e.state == ZL_CLI_SLICE_PEERING;
		h->no_in_sync += e.no_in_sync;
		h->primary_down += e.primary_down;
		h->below_min += e.below_min;
	}
}

void zl_cli_health_add_status(struct zl_cli_health *h, const struct zl_node_status *st, size_t n,
			      const struct zl_node_info *nodes, size_t n_nodes)
{
	for (size_t i = 0; i < n; i++) {
		if (!zl_cli_node_alive(nodes, n_nodes, st[i].node))
			continue;
		h->disks_full += st[i].disk_full;
		h->disks_near_full += st[i].disk_near_full && !st[i].disk_full;
		if (!st[i].recovering)
			continue;
		h->rate += st[i].rate;
		h->bytes_left += st[i].bytes_left;
	}
}

/* Appends "<sep><n> slice(s) <what>" when n > 0. */
static size_t health_part(char *out, size_t len, size_t off, const char *sep, uint32_t n,
			  const char *what)
{
	int k;

	if (!n || off >= len)
		return off;
	k = snprintf(out + off, len - off, "%s%u slice%s %s", off ? sep : " ", n, n == 1 ? "" : "s",
		     what);
	return k < 0 ? off : off + (size_t)k;
}

int zl_cli_health_line(const struct zl_cli_health *h, char *out, size_t len)
{
	bool err = h->no_in_sync || h->primary_down || h->below_min;
	int level = err ? 2 : h->degraded || h->disks_full || h->disks_near_full ? 1 : 0;
	char parts[384] = "", what[64];
	size_t off = 0;
	int k;

	off = health_part(parts, sizeof(parts), off, ", ", h->no_in_sync, "with no in-sync member");
	off =
	    health_part(parts, sizeof(parts), off, ", ", h->primary_down, "with the primary down");
	off = health_part(parts, sizeof(parts), off, ", ", h->below_min, "below min_size");
	snprintf(what, sizeof(what), "degraded (%u recovering)", h->recovering);
	off = health_part(parts, sizeof(parts), off, err ? "; " : ", ", h->degraded, what);
	off = health_part(parts, sizeof(parts), off, ", ", h->peering, "peering");
	if (h->recovering && (h->rate || h->bytes_left) && off < sizeof(parts)) {
		if (h->rate)
			k = snprintf(parts + off, sizeof(parts) - off,
				     ", recovering %.1f MiB/s, ETA %" PRIu64 " s",
				     (double)h->rate / (1024.0 * 1024.0),
				     (h->bytes_left + h->rate - 1) / h->rate);
		else
			k = snprintf(parts + off, sizeof(parts) - off, ", recovering %.1f MiB left",
				     (double)h->bytes_left / (1024.0 * 1024.0));
		if (k > 0)
			off += (size_t)k;
	}
	if (h->disks_full && off < sizeof(parts)) {
		k = snprintf(parts + off, sizeof(parts) - off, "%s%u node%s data disk%s full",
			     off ? ", " : " ", h->disks_full, h->disks_full == 1 ? "'s" : "s'",
			     h->disks_full == 1 ? "" : "s");
		if (k > 0)
			off += (size_t)k;
	}
	if (h->disks_near_full && off < sizeof(parts)) {
		k = snprintf(parts + off, sizeof(parts) - off, "%s%u node%s data disk%s near full",
			     off ? ", " : " ", h->disks_near_full,
			     h->disks_near_full == 1 ? "'s" : "s'",
			     h->disks_near_full == 1 ? "" : "s");
		if (k > 0)
			off += (size_t)k;
	}
	snprintf(out, len, "%s%s",
		 level == 2 ? "HEALTH_ERR"
		 : level    ? "HEALTH_WARN"
			    : "HEALTH_OK",
		 parts);
	return level;
}
