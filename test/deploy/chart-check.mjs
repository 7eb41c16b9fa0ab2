// Checks what a rendered Zipline chart must contain, beyond schema validity.
//
//   node chart-check.mjs TOOLS_DIR RENDERED.yaml SHAPE [BUILD_DIR]
//
// SHAPE: default or the name of a values file in deploy/helm/zipline/examples/
// (tcp-only, shared-hca, sriov-multus, external-etcd, local-pv, single-node);
// its storage.nodes (or storage.replicas) is read from that file.
// With BUILD_DIR, every flag the chart passes to a Zipline daemon must appear
// in that daemon's own `--help` (BUILD_DIR/bin/<daemon>), unless it is listed
// in pending-flags.txt beside this script, a flag the daemon is known not to
// accept yet; a listed flag the daemon has since learnt is an error too, so
// the list only shrinks. Daemons not built are reported and skipped.
import { readFileSync, existsSync } from "node:fs";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { loadRender, checker } from "./check-lib.mjs";

const [toolsDir, file, shape, buildDir] = process.argv.slice(2);
if (!toolsDir || !file || !shape) {
	console.error("usage: node chart-check.mjs TOOLS_DIR RENDERED.yaml SHAPE [BUILD_DIR]");
	process.exit(2);
}
const { YAML, objs } = loadRender(toolsDir, file);
const { check, done } = checker(shape);
const find = (kind, pred = () => true) => objs.filter((o) => o.kind === kind && pred(o));
const one = (kind, pred) => find(kind, pred)[0];
const comp = (c) => (o) => o.metadata?.labels?.["app.kubernetes.io/component"] === c;
const container = (w, name) => w?.spec?.template?.spec?.containers?.find((c) => c.name === name);
const args = (c) => c?.args ?? [];
const hasArg = (c, a) => args(c).some((x) => x === a || x.startsWith(a + "="));

// CSIDriver and StorageClasses
const drv = one("CSIDriver");
check("CSIDriver zipline.csi.io", drv?.metadata?.name === "zipline.csi.io");
check("CSIDriver attachRequired", drv?.spec?.attachRequired === true);
check("CSIDriver fsGroupPolicy File", drv?.spec?.fsGroupPolicy === "File");
check("CSIDriver Persistent only", JSON.stringify(drv?.spec?.volumeLifecycleModes) === '["Persistent"]');
const classes = find("StorageClass");
check("at least one StorageClass", classes.length > 0);
for (const sc of classes) {
	check(`StorageClass ${sc.metadata.name} provisioner`, sc.provisioner === "zipline.csi.io");
	check(`StorageClass ${sc.metadata.name} expandable`, sc.allowVolumeExpansion === true);
	check(`StorageClass ${sc.metadata.name} WaitForFirstConsumer`, sc.volumeBindingMode === "WaitForFirstConsumer");
	for (const k of ["replicas", "chunkSize", "csi.storage.k8s.io/fstype"])
		check(`StorageClass ${sc.metadata.name} parameter ${k}`, typeof sc.parameters?.[k] === "string");
}

// Controller
const ctl = one("Deployment", comp("controller"));
check("controller Deployment", !!ctl);
check("controller 2 replicas", ctl?.spec?.replicas === 2);
const zc = container(ctl, "zipline-controller");
check("zipline-controller --leader-election", hasArg(zc, "--leader-election"));
// Healing is the default (controller.manager, storage.heal, node.ioTimeout).
check("zipline-controller --manager=on", args(zc).includes("--manager=on"), args(zc).join(" "));
check("zipline-controller --down-out-interval", /^--down-out-interval=[1-9][0-9]*$/.test(
	args(zc).find((a) => a.startsWith("--down-out-interval=")) ?? ""), args(zc).join(" "));
// The background flatten of clones is on by default, rate-limited.
check("zipline-controller --flatten=on --flatten-rate=64", args(zc).includes("--flatten=on") &&
	args(zc).includes("--flatten-rate=64"), args(zc).join(" "));
for (const s of ["csi-provisioner", "csi-attacher", "csi-resizer", "liveness-probe"]) {
	const c = container(ctl, s);
	check(`controller sidecar ${s}`, !!c);
	if (s !== "liveness-probe")
		check(`${s} leader election`, hasArg(c, "--leader-election") && !args(c).includes("--leader-election=false"));
}
check("controller runs as non-root", ctl?.spec?.template?.spec?.securityContext?.runAsNonRoot === true);
const sa = ctl?.spec?.template?.spec?.serviceAccountName;
const bound = find("ClusterRoleBinding", (b) => b.subjects?.some((s) => s.name === sa)).map((b) => b.roleRef.name);
for (const r of ["provisioner", "attacher", "resizer"])
	check(`ClusterRole for external-${r} bound to ${sa}`, bound.some((n) => n.endsWith(`external-${r}`)) &&
	      find("ClusterRole", (c) => c.metadata.name.endsWith(`external-${r}`)).length === 1);
const leaseRole = one("Role", (r) => r.rules?.some((x) => x.resources?.includes("leases")));
check("Role for leases", !!leaseRole);
check("RoleBinding for leases", !!one("RoleBinding", (b) => b.roleRef.name === leaseRole?.metadata?.name &&
	b.subjects?.some((s) => s.name === sa)));

// Node plugin
const node = one("DaemonSet", comp("node"));
check("node DaemonSet", !!node);
const nps = node?.spec?.template?.spec;
const zn = container(node, "zipline-node");
check("zipline-node privileged", zn?.securityContext?.privileged === true);
const kubeletArg = args(zn).find((a) => a.startsWith("--kubelet-dir="))?.split("=")[1];
check("zipline-node --kubelet-dir", !!kubeletArg);
const kmount = zn?.volumeMounts?.find((m) => m.mountPath === kubeletArg);
check("kubelet dir mounted Bidirectional", kmount?.mountPropagation === "Bidirectional");
const kvol = nps?.volumes?.find((v) => v.name === kmount?.name);
check("kubelet dir is the host's", kvol?.hostPath?.path === kubeletArg);
for (const p of ["/dev", "/sys"])
	check(`node mounts host ${p}`, zn?.volumeMounts?.some((m) => m.mountPath === p &&
		nps.volumes.find((v) => v.name === m.name)?.hostPath?.path === p));
// Only what every kubelet host has may be `type: Directory`; anything else
// (/lib/modules, /run/udev) missing on a host would keep the plugin from starting.
const mustExist = new Set([kubeletArg, `${kubeletArg}/plugins_registry`, "/dev", "/sys"]);
for (const v of nps?.volumes ?? [])
	if (v.hostPath?.type === "Directory")
		check(`node hostPath ${v.hostPath.path} may be absent on a host`, mustExist.has(v.hostPath.path),
		      "type Directory fails the pod where it is missing: use DirectoryOrCreate");
const reg = container(node, "node-driver-registrar");
check("node-driver-registrar", !!reg);
check("registrar registration path under kubeletDir",
	args(reg).includes(`--kubelet-registration-path=${kubeletArg}/plugins/zipline.csi.io/csi.sock`));
check("registration dir", nps?.volumes?.some((v) => v.hostPath?.path === `${kubeletArg}/plugins_registry`));
check("node system-node-critical", nps?.priorityClassName === "system-node-critical");
check("node tolerations", (nps?.tolerations ?? []).length > 0);
check("node updateStrategy OnDelete", node?.spec?.updateStrategy?.type === "OnDelete");
check("zipline-node --io-timeout=600", args(zn).includes("--io-timeout=600"), args(zn).join(" "));
check("zipline-node heal mode (no --legacy-drop)", !args(zn).includes("--legacy-drop"), args(zn).join(" "));
// Attach processes outlive a restart of the zipline-node container: the
// attacher container starts them (zipline-node spawner) on the socket the
// plugin's --spawner names, with the plugin's mounts, in one process namespace.
const att = container(node, "attacher");
const spawnArg = args(zn).find((a) => a.startsWith("--spawner="))?.split("=")[1];
check("node attacher container", !!att);
check("attacher runs zipline-node spawner on the plugin's --spawner socket",
	!!spawnArg && att?.command?.[0] === "zipline-node" && args(att)[0] === "spawner" &&
	args(att).includes(`--socket=${spawnArg}`), `${args(att).join(" ")} vs --spawner=${spawnArg}`);
check("attacher privileged", att?.securityContext?.privileged === true);
check("node pod shares its process namespace", nps?.shareProcessNamespace === true);
const mountsOf = (c) => JSON.stringify((c?.volumeMounts ?? []).filter((m) => m.name !== "socket-dir"));
check("attacher has the plugin's mounts", mountsOf(att) === mountsOf(zn), `${mountsOf(att)} vs ${mountsOf(zn)}`);
check("spawner socket on a volume both containers mount",
	zn?.volumeMounts?.some((m) => spawnArg?.startsWith(m.mountPath + "/") &&
		att?.volumeMounts?.some((n) => n.name === m.name && n.mountPath === m.mountPath)));
check("node id from spec.nodeName", zn?.env?.some((e) => e.name === "NODE_NAME" &&
	e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName") && args(zn).includes("--node-id=$(NODE_NAME)"));

// Storage
const stw = objs.find((o) => (o.kind === "DaemonSet" || o.kind === "StatefulSet") && comp("storage")(o));
check("storage workload", !!stw);
const zs = container(stw, "zipline-storage");
const sps = stw?.spec?.template?.spec;
check("storage IPC_LOCK", zs?.securityContext?.capabilities?.add?.includes("IPC_LOCK"));
{
	// With a metrics port the probes are the daemon's own /readyz and
	// /healthz on it (--metrics); without one, connects to the data port.
	const mport = zs?.ports?.find((p) => p.name === "metrics");
	const metricsArg = args(zs).find((a) => a.startsWith("--metrics="));
	if (mport) {
		check("storage --metrics on its metrics port", metricsArg === `--metrics=:${mport.containerPort}`,
			args(zs).join(" "));
		check("storage readiness is /readyz on the metrics port",
			zs?.readinessProbe?.httpGet?.path === "/readyz" && zs?.readinessProbe?.httpGet?.port === "metrics");
		check("storage liveness is /healthz on the metrics port",
			zs?.livenessProbe?.httpGet?.path === "/healthz" && zs?.livenessProbe?.httpGet?.port === "metrics");
	} else {
		check("storage without --metrics when it has no metrics port", !metricsArg, args(zs).join(" "));
		check("storage readiness on its data port", zs?.readinessProbe?.tcpSocket?.port === "data");
	}
}
check("zipline-storage --heal=on", args(zs).includes("--heal=on"), args(zs).join(" "));
check("storage on labelled nodes", Object.keys(sps?.nodeSelector ?? {}).length > 0);
const limits = zs?.resources?.limits ?? {};
const rdmaLimits = Object.keys(limits).filter((k) => k.includes("/"));
const multus = sps && stw.spec.template.metadata?.annotations?.["k8s.v1.cni.cncf.io/networks"];
if (stw?.kind === "StatefulSet")
	check("StatefulSet data on a PVC", stw.spec.volumeClaimTemplates?.[0]?.metadata?.name === "data");
else
	check("DaemonSet data on hostPath", sps?.volumes?.some((v) => v.name === "data" && v.hostPath));
switch (shape) {
case "tcp-only":
	check("tcp-only: no RDMA resources", rdmaLimits.length === 0, rdmaLimits.join(","));
	check("tcp-only: no Multus", !multus);
	check("tcp-only: storage --transport=tcp", args(zs).includes("--transport=tcp"));
	check("tcp-only: node --transport=tcp", args(zn).includes("--transport=tcp"));
	break;
case "shared-hca":
	check("shared-hca: HCA resource", limits["rdma/rdma_shared_device_a"] === 1);
	check("shared-hca: no Multus", !multus);
	break;
case "sriov-multus":
	check("sriov: VF resource", limits["nvidia.com/sriov_rdma_vf"] === 1 &&
	      zs?.resources?.requests?.["nvidia.com/sriov_rdma_vf"] === 1);
	check("sriov: Multus annotation", multus === "sriov-rdma");
	check("sriov: advertises the VF interface", zs?.env?.some((e) => e.name === "ADVERTISE_IFACE" && e.value === "net1"));
	check("sriov: no hostNetwork", sps?.hostNetwork !== true);
	break;
case "local-pv":
	check("local-pv: StatefulSet", stw?.kind === "StatefulSet");
	check("local-pv: one per node", !!sps?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution);
	break;
}

// etcd
const etcdSts = one("StatefulSet", comp("etcd"));
const zipArgs = [zc, zn, zs].map(args);
if (shape === "external-etcd") {
	check("external etcd: no bundled etcd", !etcdSts);
	for (const [i, a] of zipArgs.entries()) {
		for (const f of ["--etcd-cacert", "--etcd-cert", "--etcd-key", "--etcd-user", "--etcd-password-file"])
			check(`external etcd: ${["controller", "node", "storage"][i]} ${f}`, a.some((x) => x.startsWith(f + "=")));
	}
	const env = zc?.env?.find((e) => e.name === "ZIPLINE_ETCD")?.value ?? "";
	check("external etcd: endpoints", env.startsWith("https://"), env);
} else {
	check("bundled etcd StatefulSet", !!etcdSts);
	const n = etcdSts?.spec?.replicas;
	const env = zc?.env?.find((e) => e.name === "ZIPLINE_ETCD")?.value ?? "";
	check("bundled etcd: every member in ZIPLINE_ETCD", env.split(",").length === n, env);
}
for (const [i, a] of zipArgs.entries())
	check(`${["controller", "node", "storage"][i]} gets --etcd and --etcd-prefix`,
	      a.includes("--etcd=$(ZIPLINE_ETCD)") && a.some((x) => x.startsWith("--etcd-prefix=")));

// Data-path auth (docs/SECURITY.md): the storage daemons check credentials,
// and every pod that speaks to them with the cluster token (the storage
// daemons themselves, the controller) mounts the cluster key Secret and
// passes it as --cluster-key-file. The node plugin gets attach tokens only:
// the cluster key must not reach it.
const authVals = {};
for (const f of [path.resolve(path.dirname(new URL(import.meta.url).pathname),
	"../../deploy/helm/zipline/values.yaml"),
	path.resolve(path.dirname(new URL(import.meta.url).pathname), `../../deploy/helm/zipline/examples/${shape}.yaml`)]) {
	if (!existsSync(f))
		continue;
	const a = YAML.parse(readFileSync(f, "utf8"))?.auth ?? {};
	Object.assign(authVals, a, { clusterKey: { ...(authVals.clusterKey ?? {}), ...(a.clusterKey ?? {}) } });
}
const keyItem = authVals.clusterKey?.secretKey ?? "cluster-key";
const created = find("Secret", comp("auth"));
const keySecret = authVals.clusterKey?.existingSecret || created[0]?.metadata?.name;
if (authVals.clusterKey?.existingSecret) {
	check("auth: no cluster key Secret of the chart with existingSecret", created.length === 0,
	      created.map((s) => s.metadata.name).join(","));
} else {
	check("auth: the chart creates one cluster key Secret", created.length === 1);
	const raw = created[0]?.data?.[keyItem];
	const key = raw ? Buffer.from(raw, "base64").toString("utf8") : "";
	check(`auth: Secret ${keySecret} holds 64 hex digits under ${keyItem}`, /^[0-9a-f]{64}$/.test(key),
	      `${key.length} characters`);
	check(`auth: Secret ${keySecret} survives helm uninstall`,
	      created[0]?.metadata?.annotations?.["helm.sh/resource-policy"] === "keep");
}
check("zipline-storage --auth=on", args(zs).includes("--auth=on"), args(zs).join(" "));
for (const [what, w, c] of [["storage", stw, zs], ["controller", ctl, zc]]) {
	const file = args(c).find((a) => a.startsWith("--cluster-key-file="))?.split("=")[1] ?? "";
	check(`${what}: --cluster-key-file`, !!file, args(c).join(" "));
	const m = (c?.volumeMounts ?? []).find((x) => file.startsWith(x.mountPath + "/"));
	check(`${what}: ${file} is on a read-only mount`, m?.readOnly === true, JSON.stringify(m));
	const v = (w?.spec?.template?.spec?.volumes ?? []).find((x) => x.name === m?.name);
	check(`${what}: the mount is Secret ${keySecret}`, !!keySecret && v?.secret?.secretName === keySecret,
	      JSON.stringify(v));
	const rel = file.slice((m?.mountPath ?? "").length + 1);
	const items = v?.secret?.items;
	check(`${what}: ${rel} is key ${keyItem} of the Secret`, rel === keyItem &&
	      (!items || items.some((i) => i.key === keyItem && i.path === rel)), JSON.stringify(items));
	const envKey = c?.env?.find((x) => x.name === "ZIPLINE_CLUSTER_KEY_FILE")?.value;
	check(`${what}: ZIPLINE_CLUSTER_KEY_FILE for zl in the pod is ${file}`, envKey === file, String(envKey));
	check(`${what}: the key file is not world-readable`, ((v?.secret?.defaultMode ?? 0o644) & 0o077) === 0,
	      `defaultMode ${(v?.secret?.defaultMode ?? 0o644).toString(8)}`);
}
check("node plugin: no ZIPLINE_CLUSTER_KEY_FILE", !zn?.env?.some((x) => x.name === "ZIPLINE_CLUSTER_KEY_FILE"));
check("node plugin: no --cluster-key-file (attach tokens only)", !hasArg(zn, "--cluster-key-file"),
      args(zn).join(" "));
check("node plugin: the cluster key Secret is not mounted",
      !(nps?.volumes ?? []).some((v) => v.secret?.secretName === keySecret), JSON.stringify(nps?.volumes));
// Every other workload of the chart (etcd, tests) stays away from it too.
for (const w of objs.filter((o) => o.spec?.template?.spec || (o.kind === "Pod"))) {
	if (w === stw || w === ctl)
		continue;
	const vols = (w.spec?.template?.spec ?? w.spec)?.volumes ?? [];
	check(`${w.kind} ${w.metadata.name} does not mount the cluster key`,
	      !vols.some((v) => v.secret?.secretName === keySecret));
}

// No PVC the chart's own components need may be bound by a Zipline class:
// Zipline needs etcd and its storage daemons, so a claim of theirs served by
// Zipline never binds (first install deadlocks). A claim without
// storageClassName gets the default class; one naming a class gets that one.
const hooks = objs.filter((o) => o.metadata?.annotations?.["helm.sh/hook"] === "test");
const driver = drv?.metadata?.name;
const ziplineClasses = classes.filter((c) => c.provisioner === driver);
const ziplineDefault = ziplineClasses.find((c) =>
	c.metadata?.annotations?.["storageclass.kubernetes.io/is-default-class"] === "true");
const claims = [
	...find("PersistentVolumeClaim", (o) => !hooks.includes(o)).map((o) => [`PVC ${o.metadata.name}`, o.spec]),
	...objs.flatMap((o) => (o.spec?.volumeClaimTemplates ?? []).map((t) =>
		[`${o.kind} ${o.metadata.name} volumeClaimTemplate ${t.metadata?.name}`, t.spec])),
];
for (const [what, spec] of claims) {
	const cls = spec?.storageClassName;
	if (cls === undefined || cls === null)
		check(`${what} not bound by a Zipline class`, !ziplineDefault,
		      `it has no storageClassName, so it gets the default class, and Zipline class "${ziplineDefault?.metadata?.name}" is the default`);
	else
		check(`${what} not bound by a Zipline class`, !ziplineClasses.some((c) => c.metadata.name === cls),
		      `storageClassName "${cls}" is a Zipline class`);
}

// Storage nodes as the operator declares them (values.yaml, then the
// example's values): no default class and not the helm test class may need
// more replicas than there are storage nodes.
const chartDir = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../../deploy/helm/zipline");
const valueFiles = [path.join(chartDir, "values.yaml")];
if (existsSync(path.join(chartDir, "examples", `${shape}.yaml`)))
	valueFiles.push(path.join(chartDir, "examples", `${shape}.yaml`));
const st = {};
for (const f of valueFiles)
	Object.assign(st, YAML.parse(readFileSync(f, "utf8"))?.storage ?? {});
const storageNodes = st.kind === "StatefulSet" ? st.replicas : st.nodes;
check("storage node count declared", Number.isInteger(storageNodes), `storage.nodes=${st.nodes}, storage.replicas=${st.replicas}`);
const replicasOf = (name) => Number(classes.find((c) => c.metadata.name === name)?.parameters?.replicas);
for (const sc of classes.filter((c) => c.metadata?.annotations?.["storageclass.kubernetes.io/is-default-class"] === "true"))
	check(`default class ${sc.metadata.name} fits on ${storageNodes} storage nodes`, Number(sc.parameters?.replicas) <= storageNodes,
	      `replicas=${sc.parameters?.replicas}`);

// helm test hook
check("helm test PVC", hooks.some((o) => o.kind === "PersistentVolumeClaim"));
check("helm test write and read pods", hooks.filter((o) => o.kind === "Pod").length === 2);
const testPVC = hooks.find((o) => o.kind === "PersistentVolumeClaim");
const testClass = testPVC?.spec?.storageClassName;
check(`helm test class ${testClass} is a Zipline class of the chart`, ziplineClasses.some((c) => c.metadata.name === testClass));
check(`helm test class ${testClass} fits on ${storageNodes} storage nodes`, replicasOf(testClass) <= storageNodes,
      `replicas=${replicasOf(testClass)}`);
// `helm test --logs` reads the pods' logs after the run: a pod deleted on
// success has none, and helm exits 1.
for (const pod of hooks.filter((o) => o.kind === "Pod")) {
	const policy = (pod.metadata.annotations["helm.sh/hook-delete-policy"] ?? "").split(",").map((x) => x.trim());
	check(`helm test pod ${pod.metadata.name} kept for --logs`, !policy.includes("hook-succeeded") && !policy.includes("hook-failed"),
	      `hook-delete-policy ${policy.join(",")}`);
	check(`helm test pod ${pod.metadata.name} replaced by the next run`, policy.includes("before-hook-creation"));
}

// Flags against the daemons' own --help.
if (buildDir) {
	const pendingFile = path.join(path.dirname(new URL(import.meta.url).pathname), "pending-flags.txt");
	const pending = new Set(readFileSync(pendingFile, "utf8").split("\n")
		.map((l) => l.replace(/#.*/, "").trim()).filter(Boolean));
	const usedPending = new Set();
	const helpCache = new Map();
	for (const w of objs.filter((o) => o.spec?.template?.spec?.containers)) {
		for (const c of w.spec.template.spec.containers) {
			const cmd = c.command ?? [];
			const bin = cmd[0]?.startsWith("zipline-") ? cmd[0] : cmd.find((x) => /^zipline-[a-z]+$/.test(x));
			if (!bin)
				continue;
			const exe = path.join(buildDir, "bin", bin);
			if (!existsSync(exe)) {
				console.log(`skip ${shape}: ${bin} not built, its flags are not checked`);
				continue;
			}
			if (!helpCache.has(bin)) {
				const out = execFileSync(exe, ["--help"], { encoding: "utf8" });
				helpCache.set(bin, new Set(out.match(/--[a-z][a-z0-9-]*/g)));
			}
			const known = helpCache.get(bin);
			const script = cmd.join(" ");
			const flags = [...args(c), ...(script.match(/--[a-z][a-z0-9-]*=?/g) ?? [])]
				.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0]);
			for (const f of new Set(flags)) {
				const key = `${bin} ${f}`;
				if (known.has(f)) {
					check(`${key} accepted`, !pending.has(key),
					      "the daemon accepts it now: remove it from test/deploy/pending-flags.txt");
				} else if (pending.has(key)) {
					usedPending.add(key);
					console.log(`pending ${shape}: ${key} (not in ${bin} --help yet)`);
				} else {
					check(`${key} is a flag of ${bin}`, false, `not in ${exe} --help`);
				}
			}
		}
	}
}

done(`chart-check ${shape}`);
