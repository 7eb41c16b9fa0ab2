/* The manager's node table: every storage node it saw, whether its record
 * was in the last node list, and since when it is gone (the clock of the
 * grace and down-out rules). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager_internal.h"

/* Logs a line once per key (e.g. a row that waits), until MGR_ONCE_SLOTS
 * other keys pushed it out. */
bool manager_once(struct zl_manager *m, const char *key)
{
	for (unsigned int i = 0; i < MGR_ONCE_SLOTS; i++) {
		if (!strcmp(m->once[i], key))
			return false;
	}
	snprintf(m->once[m->once_next], sizeof(m->once[0]), "%s", key);
	m->once_next = (m->once_next + 1) % MGR_ONCE_SLOTS;
	return true;
}

struct manager_node *manager_node_find(struct zl_manager *m, const char *id)
{
	for (size_t i = 0; i < m->n_nodes; i++) {
		if (!strcmp(m->nodes[i].id, id))
			return &m->nodes[i];
	}
	return NULL;
}

/* The entry of id, added as "absent since now" when the manager never saw
 * it (a row naming a node that is gone). NULL on ENOMEM. */
struct manager_node *manager_node_get(struct zl_manager *m, const char *id)
{
	struct manager_node *nd = manager_node_find(m, id);

	if (nd)
		return nd;
	if (m->n_nodes == m->cap_nodes) {
		size_t cap = m->cap_nodes ? m->cap_nodes * 2 : 16;
		struct manager_node *p = realloc(m->nodes, cap * sizeof(*p));

		if (!p)
			return NULL;
		m->nodes = p;
		m->cap_nodes = cap;
	}
	nd = &m->nodes[m->n_nodes++];
	memset(nd, 0, sizeof(*nd));
	snprintf(nd->id, sizeof(nd->id), "%s", id);
	nd->gone_ms = zl_now_ms();
	return nd;
}

/* Reads the status records: which live nodes say their disk failed, or
 * their data dir is (near) full. An unreadable list changes nothing (a
 * failed disk stays failed until a record says otherwise; none is marked
 * failed on a read error). */
static void manager_disks_refresh(struct zl_manager *m, uint64_t now)
{
	struct zl_node_status *st = NULL;
	size_t n = 0;

	if (zl_meta_status_list(m->etcd, m->prefix, &st, &n))
		return;
	for (size_t i = 0; i < m->n_nodes; i++) {
		struct manager_node *nd = &m->nodes[i];
		const struct zl_node_status *s = zl_meta_status_find(st, n, nd->id);
		bool full = nd->present && s && (s->disk_full || s->disk_near_full);
		if (full != nd->disk_full) {
			if (full)
				ZL_LOG_WARN(MGR_LOG,
					    "manager: node=%s data disk near full: nothing new is "
					    "placed on it (M7, rebalance)",
					    nd->id);
			else if (nd->present)
				ZL_LOG_INFO(MGR_LOG, "manager: node=%s data disk has room again",
					    nd->id);
			nd->disk_full = full;
		}
		if (!nd->present || !s || !s->disk_error[0]) {
			if (nd->disk_error[0] && nd->present)
				ZL_LOG_INFO(MGR_LOG, "manager: node=%s disk no longer failed",
					    nd->id);
			nd->disk_error[0] = 0;
			nd->disk_ms = 0;
			continue;
		}
		if (!nd->disk_error[0]) {
			nd->disk_ms = now;
			ZL_LOG_WARN(MGR_LOG,
				    "manager: node=%s disk failed: %s (its members go out, nothing "
				    "is placed on it)",
				    nd->id, s->disk_error);
		}
		snprintf(nd->disk_error, sizeof(nd->disk_error), "%s", s->disk_error);
	}
	free(st);
}

/* Reads the node records and updates the table: present ones, and since
 * when the others are gone. 0 or an etcd error (the table is unchanged). */
int manager_nodes_refresh(struct zl_manager *m)
{
	struct zl_node_info *list = NULL;
	size_t n = 0;
	uint64_t now;
	int rc;

	rc = zl_meta_node_list(m->etcd, m->prefix, &list, &n);
	if (rc)
		return rc;
	now = zl_now_ms();
	for (size_t i = 0; i < m->n_nodes; i++)
		m->nodes[i].present = false;
	for (size_t i = 0; i < n; i++) {
		struct manager_node *nd = manager_node_get(m, list[i].id);

		if (!nd) {
			rc = -ENOMEM;
			break;
		}
		nd->present = true;
		nd->seen = true;
		nd->gone_ms = 0;
		nd->info = list[i];
	}
	for (size_t i = 0; i < m->n_nodes; i++) {
		if (!m->nodes[i].present && !m->nodes[i].gone_ms) {
			m->nodes[i].gone_ms = now;
			ZL_LOG_INFO(MGR_LOG, "manager: node=%s record gone", m->nodes[i].id);
		}
	}
	free(list);
	if (!rc)
		manager_disks_refresh(m, now);
	return rc;
}

bool manager_node_usable(const struct manager_node *nd)
{
	return nd->present && !nd->disk_error[0] && !nd->disk_full;
}

void manager_deadline(struct zl_manager *m, uint64_t at)
{
	if (!m->next_deadline_ms || at < m->next_deadline_ms)
		m->next_deadline_ms = at;
}

/* Every member of row is in sync on a live node. */
bool manager_row_settled(struct zl_manager *m, const struct zl_slice *row)
{
	for (int i = 0; i < row->n; i++) {
		const struct manager_node *nd = manager_node_find(m, row->nodes[i]);

		if (!nd || !nd->present || zl_slice_member_state(row, i) != ZL_MEMBER_IN_SYNC)
			return false;
	}
	return true;
}

/* Distinct failure domains among live nodes ("" = a domain of its own). */
size_t manager_live_domains(struct zl_manager *m)
{
	size_t domains = 0;

	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct manager_node *a = &m->nodes[i];
		bool dup = false;

		if (!a->present)
			continue;
		for (size_t j = 0; j < i && a->info.domain[0] && !dup; j++)
			dup =
			    m->nodes[j].present && !strcmp(m->nodes[j].info.domain, a->info.domain);
		domains += !dup;
	}
	return domains;
}
