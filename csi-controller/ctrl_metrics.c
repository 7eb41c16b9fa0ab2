/* The controller's metrics and probes (--metrics HOST:PORT; docs/
 * ARCHITECTURE.md "Metrics and probes"): CSI calls by method and code,
 * etcd calls, leadership, and what the membership manager decided and last
 * saw (slices by class: only the leader's figures are current, so only the
 * leader exports them). Served by lib/metrics on its own thread; every
 * figure is read under the lock of the module that keeps it.
 *
 * /healthz fails when the background thread (lease, election, leader jobs)
 * has not finished a round for CTRL_STALL_MS; /readyz also while etcd was
 * not reached within CTRL_ETCD_FRESH_MS (what the CSI Probe says). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctrl.h"

#define CTRL_STALL_MS 30000

static void ctrl_metrics_render(void *arg, struct zl_metrics_text *t)
{
	static const char *const cls[ZL_MGR_SLICE_CLASSES_] = {"active", "recovering",
							       "degraded", "down"};
	/* enum zl_member_state order, as zl_member_state_name spells them. */
	static const char *const states[] = {"out", "recovering", "in_sync"};
	struct ctrl *c = arg;
	struct zl_manager_stats ms;
	char lab[CTRL_ID_MAX * 2 + 64], id[CTRL_ID_MAX * 2];
	bool leader = ctrl_leader_is(c);

	zl_metrics_label_escape(c->leader_id, id, sizeof(id));
	snprintf(lab, sizeof(lab), "replica=\"%s\",version=\"%s\"", id, ZL_VERSION_STRING);
	zl_metrics_family(t, "zipline_controller_info", "gauge",
			  "The controller replica's identity and version.");
	zl_metrics_u64(t, "zipline_controller_info", lab, 1);
	zl_metrics_family(t, "zipline_controller_leader", "gauge",
			  "1 while this replica is the elected leader (runs the manager and the "
			  "run-once jobs).");
	zl_metrics_u64(t, "zipline_controller_leader", "", leader);
	zl_metrics_family(t, "zipline_controller_etcd_ok", "gauge",
			  "1 while the background thread reaches etcd (the CSI Probe's answer).");
	zl_metrics_u64(t, "zipline_controller_etcd_ok", "", ctrl_etcd_fresh(c));
	if (c->mgr) {
		const struct {
			const char *name, *help;
			uint64_t v;
		} mc[] = {
		    {"zipline_manager_passes_total",
		     "Membership passes run while leading (every volume's rows read and decided).",
		     0},
		    {"zipline_manager_pass_errors_total",
		     "Passes that failed (etcd errors, leadership lost mid-pass).", 0},
		    {"zipline_manager_replacements_total",
		     "Members moved to another node (a node down past --down-out-interval, a "
		     "failed disk).",
		     0},
		    {"zipline_manager_rebalance_moves_total", "Rebalance moves started.", 0},
		};
		uint64_t vals[ZL_ARRAY_SIZE(mc)];

		zl_manager_stats(c->mgr, &ms);
		vals[0] = ms.passes;
		vals[1] = ms.pass_errors;
		vals[2] = ms.replacements;
		vals[3] = ms.rebalance_moves;
		for (size_t i = 0; i < ZL_ARRAY_SIZE(mc); i++) {
			zl_metrics_family(t, mc[i].name, "counter", mc[i].help);
			zl_metrics_u64(t, mc[i].name, "", vals[i]);
		}
		zl_metrics_family(t, "zipline_manager_member_changes_total", "counter",
				  "Member state changes the manager wrote, by the new state.");
		zl_metrics_u64_by(t, "zipline_manager_member_changes_total", "to", states,
				  ms.changes, ZL_ARRAY_SIZE(states));
		if (leader && ms.last_pass_ms) {
			zl_metrics_family(t, "zipline_slices", "gauge",
					  "Slices of ready volumes by class, as the leader's last "
					  "pass saw them: active (every member in sync), recovering, "
					  "degraded (a member out), down (none in sync).");
			zl_metrics_u64_by(t, "zipline_slices", "state", cls, ms.slices,
					  ZL_MGR_SLICE_CLASSES_);
			zl_metrics_family(t, "zipline_volumes", "gauge",
					  "Ready volumes, as the leader's last pass saw them.");
			zl_metrics_u64(t, "zipline_volumes", "", ms.volumes);
			zl_metrics_family(t, "zipline_manager_last_pass_age_seconds", "gauge",
					  "Seconds since the leader's last pass that ended without "
					  "error.");
			zl_metrics_f64(t, "zipline_manager_last_pass_age_seconds", "",
				       (double)(zl_now_ms() - ms.last_pass_ms) / 1000.0);
		}
	}
	ctrl_flatten_metrics(c, t);
	if (c->srv)
		zl_grpc_server_metrics(c->srv, t);
	zl_etcd_metrics(t);
}

static int ctrl_metrics_probe(void *arg, bool ready, char *why, size_t n)
{
	struct ctrl *c = arg;
	uint64_t round = atomic_load(&c->bg_round_ms), now = zl_now_ms();

	if (round && now - round > CTRL_STALL_MS) {
		snprintf(why, n, "the background thread has not finished a round for %" PRIu64
				 " ms (stuck in an etcd call?)",
			 now - round);
		return -1;
	}
	if (ready && !ctrl_etcd_fresh(c)) {
		snprintf(why, n, "etcd not reached in the last %d ms (see the log)",
			 CTRL_ETCD_FRESH_MS);
		return -1;
	}
	return 0;
}

int ctrl_metrics_start(struct ctrl *c, const struct ctrl_cfg *cfg)
{
	struct zl_metrics_ops o = {
	    .render = ctrl_metrics_render, .probe = ctrl_metrics_probe, .arg = c};
	int rc;

	if (!cfg->metrics || !strcmp(cfg->metrics, "off"))
		return 0;
	rc = zl_metrics_start(cfg->metrics, &o, &c->metrics);
	if (rc)
		return rc;
	ZL_LOG_INFO(CTRL_LOG, "metrics on http://%s port=%u (/metrics /healthz /readyz)",
		    cfg->metrics, zl_metrics_port(c->metrics));
	return 0;
}

void ctrl_metrics_stop(struct ctrl *c)
{
	zl_metrics_stop(c->metrics);
	c->metrics = NULL;
}
