// Checks the chart's monitoring objects (templates/monitoring.yaml), rendered
// with every monitoring.* switch on:
//
//   node monitoring-check.mjs TOOLS_DIR RENDERED.yaml SOURCE_DIR [RULES_OUT.yaml [DASHBOARD_OUT.json]]
//
// RULES_OUT gets the PrometheusRule's groups as a Prometheus rules file
// (for `promtool check rules`), DASHBOARD_OUT the dashboard ConfigMap's JSON
// (for dashboard-schema.mjs, which checks it against Grafana's schema).
// The PodMonitor selects the storage pods and scrapes their "metrics" port;
// every alert has an expression, a severity and a summary; the dashboard
// ConfigMap holds JSON whose panels all have PromQL queries; and every zipline_*
// metric a rule or a panel names is one a daemon exposes (named in the
// storage daemon's, the controller's, lib/etcd's or lib/grpc's metrics code
// under SOURCE_DIR), so a renamed metric cannot leave a rule silently
// matching nothing. Two more PodMonitors scrape the controller's and the
// node plugin's pods' "metrics" port. Exit 1 on any failure.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { loadRender, checker } from "./check-lib.mjs";

const [toolsDir, file, srcDir, rulesOut, dashOut] = process.argv.slice(2);
if (!toolsDir || !file || !srcDir) {
	console.error("usage: node monitoring-check.mjs TOOLS_DIR RENDERED.yaml SOURCE_DIR [RULES_OUT.yaml [DASHBOARD_OUT.json]]");
	process.exit(2);
}
const { YAML, objs } = loadRender(toolsDir, file);
const source = ["storage/storage_metrics.c", "csi-controller/ctrl_metrics.c", "csi-node/node_metrics.c",
	"lib/etcd/etcd.c", "lib/grpc/grpc_server.c"].map((f) => readFileSync(path.join(srcDir, f), "utf8")).join("\n");

const { check, done } = checker("monitoring");
// Every zipline_* name in a PromQL expression is exposed by the daemon (a
// histogram's _bucket/_sum/_count by its family).
function namesExposed(where, expr) {
	for (const m of expr.matchAll(/\bzipline_[a-z_]+/g)) {
		const fam = m[0].replace(/_(bucket|sum|count)$/, "");
		check(`${where}: ${m[0]} is a metric a Zipline daemon exposes`,
			source.includes(`"${m[0]}"`) || source.includes(`"${fam}"`), expr);
	}
}

const storage = objs.find((o) => (o.kind === "DaemonSet" || o.kind === "StatefulSet") &&
	o.metadata?.labels?.["app.kubernetes.io/component"] === "storage");
const podLabels = storage?.spec?.template?.metadata?.labels ?? {};
const zs = storage?.spec?.template?.spec?.containers?.find((c) => c.name === "zipline-storage");
check("the storage container has a port named metrics", !!zs?.ports?.some((p) => p.name === "metrics"));

const pm = objs.find((o) => o.kind === "PodMonitor" && o.metadata?.name?.endsWith("-storage"));
check("a PodMonitor", !!pm && pm.apiVersion === "monitoring.coreos.com/v1");
const sel = pm?.spec?.selector?.matchLabels ?? {};
check("the PodMonitor selects the storage pods",
	Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => podLabels[k] === v),
	JSON.stringify(sel));
check("the PodMonitor scrapes port metrics at /metrics",
	pm?.spec?.podMetricsEndpoints?.[0]?.port === "metrics" && pm?.spec?.podMetricsEndpoints?.[0]?.path === "/metrics");

// The controller's and the node plugin's endpoints: port, flag, readiness
// probe, and a PodMonitor that selects their pods.
for (const [comp, kind, container] of [["controller", "Deployment", "zipline-controller"],
	["node", "DaemonSet", "zipline-node"]]) {
	const w = objs.find((o) => o.kind === kind && o.metadata?.labels?.["app.kubernetes.io/component"] === comp);
	const labels = w?.spec?.template?.metadata?.labels ?? {};
	const c = w?.spec?.template?.spec?.containers?.find((x) => x.name === container);
	check(`the ${comp} container has a port named metrics and --metrics`,
		!!c?.ports?.some((p) => p.name === "metrics") && (c?.args ?? []).some((a) => a.startsWith("--metrics=")));
	check(`the ${comp}'s readiness probe is /readyz on port metrics`,
		c?.readinessProbe?.httpGet?.path === "/readyz" && c?.readinessProbe?.httpGet?.port === "metrics");
	const m = objs.find((o) => o.kind === "PodMonitor" && o.metadata?.name?.endsWith(`-${comp}`));
	const sel = m?.spec?.selector?.matchLabels ?? {};
	check(`a PodMonitor selects the ${comp} pods`,
		Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels[k] === v),
		JSON.stringify(sel));
	check(`the ${comp} PodMonitor scrapes port metrics at /metrics`,
		m?.spec?.podMetricsEndpoints?.[0]?.port === "metrics" && m?.spec?.podMetricsEndpoints?.[0]?.path === "/metrics");
}

const pr = objs.find((o) => o.kind === "PrometheusRule");
check("a PrometheusRule", !!pr && pr.apiVersion === "monitoring.coreos.com/v1");
const rules = (pr?.spec?.groups ?? []).flatMap((g) => g.rules ?? []);
if (rulesOut) writeFileSync(rulesOut, YAML.stringify({ groups: pr?.spec?.groups ?? [] }));
check("alert rules", rules.length >= 5, `${rules.length}`);
for (const r of rules) {
	check(`${r.alert}: an expression`, typeof r.expr === "string" && r.expr.length > 0);
	check(`${r.alert}: a severity`, ["critical", "warning"].includes(r.labels?.severity));
	check(`${r.alert}: a summary and a description`, !!r.annotations?.summary && !!r.annotations?.description);
	if (typeof r.expr === "string" && r.alert !== "ZiplineStorageDown")
		namesExposed(r.alert, r.expr);
}
for (const want of ["ZiplineStorageDown", "ZiplineStorageDiskFailed", "ZiplineDegraded", "ZiplineJournalFull",
	"ZiplineSlicesDown", "ZiplineSlicesDegraded", "ZiplineNoLeader", "ZiplineEtcdErrors"])
	check(`alert ${want}`, rules.some((r) => r.alert === want));

const cm = objs.find((o) => o.kind === "ConfigMap" && o.data?.["zipline.json"]);
check("a dashboard ConfigMap with the Grafana sidecar label", cm?.metadata?.labels?.grafana_dashboard === "1");
let dash = null;
try {
	dash = JSON.parse(cm?.data?.["zipline.json"] ?? "");
} catch (e) {
	check("the dashboard is JSON", false, String(e));
}
if (dashOut) writeFileSync(dashOut, cm?.data?.["zipline.json"] ?? "");
const panels = dash?.panels ?? [];
check("dashboard panels", panels.length >= 8, `${panels.length}`);
for (const p of panels) {
	check(`panel "${p.title}": queries`, (p.targets ?? []).length > 0);
	for (const t of p.targets ?? []) {
		check(`panel "${p.title}" query ${t.refId}: a PromQL expr`, typeof t.expr === "string" && t.expr.length > 0,
			JSON.stringify(t));
		namesExposed(`panel "${p.title}"`, t.expr ?? "");
	}
}
done("monitoring");
