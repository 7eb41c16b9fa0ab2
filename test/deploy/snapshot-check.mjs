// Checks the chart's CSI snapshot objects (snapshots.*: the csi-snapshotter
// sidecar, its RBAC, the VolumeSnapshotClass):
//
//   node snapshot-check.mjs TOOLS_DIR RENDERED.yaml on|off [CORE_OUT.yaml]
//
// off: the render (snapshots.enabled false) holds none of them.
// on:  the render (snapshots.enabled true, the chart's other values as in
//      values.yaml) holds them as the sidecar's project documents them:
//   - a csi-snapshotter container in the controller Deployment, with the
//     image of values.yaml (sidecars.registry, sidecars.snapshotter), only
//     flags csi-snapshotter knows, --csi-address on the socket the
//     controller serves (same volume, same path), --timeout, leader election
//     on in the release namespace (where the leases Role lets the controller's
//     ServiceAccount take leases), /healthz/leader-election as its liveness
//     probe on its --http-endpoint port, no privilege, resources;
//   - one ClusterRole *-external-snapshotter whose rules are exactly those of
//     csi-snapshotter v8.2.0 without its optional secrets and group snapshot
//     rules (no more, no fewer), bound by a ClusterRoleBinding to the
//     ServiceAccount the controller pods run as;
//   - one VolumeSnapshotClass (snapshots.class.create is true), valid against
//     the snapshot.storage.k8s.io/v1 CRD's schema (no unknown field, driver
//     and deletionPolicy required, deletionPolicy Delete or Retain, parameters
//     a map of strings), whose driver is the CSIDriver object's name.
// CORE_OUT gets every object but the snapshot.storage.k8s.io ones, for
// k8s-validate.mjs, which has no schema for CRD kinds.
// Exit 1 on any failure.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { loadRender, checker } from "./check-lib.mjs";

const [toolsDir, file, mode, coreOut] = process.argv.slice(2);
if (!toolsDir || !file || (mode !== "on" && mode !== "off")) {
	console.error("usage: node snapshot-check.mjs TOOLS_DIR RENDERED.yaml on|off [CORE_OUT.yaml]");
	process.exit(2);
}
const { YAML, objs } = loadRender(toolsDir, file);
const values = YAML.parse(readFileSync(path.resolve(path.dirname(new URL(import.meta.url).pathname),
	"../../deploy/helm/zipline/values.yaml"), "utf8"));

const { check, done } = checker(`snapshots ${mode}`);
const SNAP_GROUP = "snapshot.storage.k8s.io";
const isSnapKind = (o) => (o.apiVersion ?? "").split("/")[0] === SNAP_GROUP;
const classes = objs.filter((o) => o.kind === "VolumeSnapshotClass");
const ctl = objs.find((o) => o.kind === "Deployment" &&
	o.metadata?.labels?.["app.kubernetes.io/component"] === "controller");
const pod = ctl?.spec?.template?.spec;
const sidecar = pod?.containers?.find((c) => c.name === "csi-snapshotter");
const roles = objs.filter((o) => o.kind === "ClusterRole" && o.metadata?.name?.endsWith("-external-snapshotter"));

if (mode === "off") {
	check("no csi-snapshotter container in the controller", !!ctl && !sidecar);
	check("no external-snapshotter ClusterRole", roles.length === 0, roles.map((r) => r.metadata.name).join(","));
	check("no ClusterRoleBinding to an external-snapshotter role",
		!objs.some((o) => o.kind === "ClusterRoleBinding" && o.roleRef?.name?.endsWith("-external-snapshotter")));
	check(`no ${SNAP_GROUP} object`, !objs.some(isSnapKind), objs.filter(isSnapKind).map((o) => o.kind).join(","));
	done("snapshots off");
}

// The sidecar.
const args = sidecar?.args ?? [];
const flag = (f) => args.find((a) => a === f || a.startsWith(f + "="))?.slice(f.length + 1);
const env = (c, n) => c?.env?.find((e) => e.name === n)?.value;
check("a csi-snapshotter container in the controller Deployment", !!sidecar);
const sc = values.sidecars;
const wantImage = `${sc.registry}/${sc.snapshotter.name}:${sc.snapshotter.tag}`;
check(`csi-snapshotter image ${wantImage}`, sidecar?.image === wantImage, sidecar?.image);
check("csi-snapshotter is registry.k8s.io/sig-storage/csi-snapshotter:vX.Y.Z",
	/^registry\.k8s\.io\/sig-storage\/csi-snapshotter:v[0-9]+\.[0-9]+\.[0-9]+$/.test(sidecar?.image ?? ""),
	sidecar?.image);
// csi-snapshotter's flags (cmd/csi-snapshotter/main.go of v8.2.0, and
// klog's --v): it refuses to start on any other, a misspelt one included.
const known = new Set(["--csi-address", "--timeout", "--leader-election", "--leader-election-namespace",
	"--leader-election-lease-duration", "--leader-election-renew-deadline", "--leader-election-retry-period",
	"--http-endpoint", "--metrics-address", "--metrics-path", "--kube-api-qps", "--kube-api-burst",
	"--kubeconfig", "--worker-threads", "--snapshot-name-prefix", "--snapshot-name-uuid-length",
	"--groupsnapshot-name-prefix", "--groupsnapshot-name-uuid-length", "--extra-create-metadata",
	"--retry-interval-start", "--retry-interval-max", "--resync-period", "--node-deployment", "--feature-gates",
	"--v"]);
for (const a of args)
	check(`csi-snapshotter flag ${a} is one it knows`, known.has(a.split("=")[0]));
// --csi-address: the socket zipline-controller serves, through one volume.
const zc = pod?.containers?.find((c) => c.name === "zipline-controller");
const served = (env(zc, "CSI_ENDPOINT") ?? "").replace(/^unix:\/\//, "");
let addr = flag("--csi-address") ?? "";
addr = addr.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v) => env(sidecar, v) ?? m);
check("csi-snapshotter --csi-address is the socket zipline-controller serves", !!served && addr === served,
	`${addr} vs CSI_ENDPOINT ${served}`);
const mountOf = (c, p) => (c?.volumeMounts ?? []).find((m) => p.startsWith(m.mountPath + "/"));
const ms = mountOf(sidecar, addr), mz = mountOf(zc, served);
check("the socket's directory is one volume in both containers", !!ms && !!mz && ms.name === mz.name &&
	ms.mountPath === mz.mountPath, `${JSON.stringify(ms)} vs ${JSON.stringify(mz)}`);
check("csi-snapshotter --timeout is a duration", /^[0-9]+(ms|s|m|h)$/.test(flag("--timeout") ?? ""), flag("--timeout"));
check("csi-snapshotter --leader-election=true (two controller replicas)", flag("--leader-election") === "true" ||
	args.includes("--leader-election"), args.join(" "));
const ns = ctl?.metadata?.namespace;
check(`csi-snapshotter --leader-election-namespace is the release namespace ${ns}`,
	!!ns && flag("--leader-election-namespace") === ns, flag("--leader-election-namespace"));
const httpPort = Number((flag("--http-endpoint") ?? "").replace(/^.*:/, ""));
const port = sidecar?.ports?.find((p) => p.containerPort === httpPort);
check("csi-snapshotter --http-endpoint has a container port", httpPort > 0 && !!port, flag("--http-endpoint"));
const probe = sidecar?.livenessProbe?.httpGet;
check("csi-snapshotter liveness probe: /healthz/leader-election on its --http-endpoint port",
	probe?.path === "/healthz/leader-election" && !!port && (probe?.port === port.name || probe?.port === httpPort),
	JSON.stringify(probe));
const sec = sidecar?.securityContext ?? {};
check("csi-snapshotter without privilege", sec.allowPrivilegeEscalation === false && sec.privileged !== true &&
	sec.readOnlyRootFilesystem === true && (sec.capabilities?.drop ?? []).includes("ALL"), JSON.stringify(sec));
check("csi-snapshotter resources: requests and a memory limit", !!sidecar?.resources?.requests &&
	!!sidecar?.resources?.limits?.memory, JSON.stringify(sidecar?.resources));

// RBAC: exactly the documented rules, bound to the controller's ServiceAccount.
const want = [
	["", "events", ["list", "watch", "create", "update", "patch"]],
	[SNAP_GROUP, "volumesnapshotclasses", ["get", "list", "watch"]],
	[SNAP_GROUP, "volumesnapshotcontents", ["get", "list", "watch", "update", "patch"]],
	[SNAP_GROUP, "volumesnapshotcontents/status", ["update", "patch"]],
].flatMap(([g, r, vs]) => vs.map((v) => `${g}/${r}:${v}`));
check("one external-snapshotter ClusterRole", roles.length === 1, roles.map((r) => r.metadata.name).join(","));
const role = roles[0];
const got = (role?.rules ?? []).flatMap((rule) => {
	if (rule.nonResourceURLs || rule.resourceNames)
		return [`non-resource or named rule ${JSON.stringify(rule)}`];
	return (rule.apiGroups ?? []).flatMap((g) => (rule.resources ?? []).flatMap((r) =>
		(rule.verbs ?? []).map((v) => `${g}/${r}:${v}`)));
});
const missing = want.filter((w) => !got.includes(w));
const extra = got.filter((g) => !want.includes(g));
check("the ClusterRole grants every rule csi-snapshotter needs", missing.length === 0, `missing ${missing.join(", ")}`);
check("the ClusterRole grants nothing more", extra.length === 0, `extra ${extra.join(", ")}`);
const sa = pod?.serviceAccountName;
check("the controller pods name a ServiceAccount of the chart", !!sa &&
	objs.some((o) => o.kind === "ServiceAccount" && o.metadata?.name === sa && o.metadata?.namespace === ns), sa);
const binding = objs.filter((o) => o.kind === "ClusterRoleBinding" && o.roleRef?.name === role?.metadata?.name);
check("one ClusterRoleBinding of the ClusterRole", binding.length === 1);
const b = binding[0];
check("it binds a ClusterRole", b?.roleRef?.kind === "ClusterRole" && b?.roleRef?.apiGroup === "rbac.authorization.k8s.io",
	JSON.stringify(b?.roleRef));
check(`it binds the controller's ServiceAccount ${ns}/${sa}`, (b?.subjects ?? []).length === 1 &&
	b.subjects[0].kind === "ServiceAccount" && b.subjects[0].name === sa && b.subjects[0].namespace === ns,
	JSON.stringify(b?.subjects));
const leaseRole = objs.find((o) => o.kind === "Role" && o.metadata?.namespace === ns && (o.rules ?? []).some((r) =>
	(r.apiGroups ?? []).includes("coordination.k8s.io") && (r.resources ?? []).includes("leases") &&
	["get", "watch", "list", "update", "create"].every((v) => r.verbs.includes(v))));
check(`leader election: a Role for leases in ${ns} bound to ${sa}`, !!leaseRole && objs.some((o) =>
	o.kind === "RoleBinding" && o.metadata?.namespace === ns && o.roleRef?.kind === "Role" &&
	o.roleRef?.name === leaseRole.metadata.name &&
	(o.subjects ?? []).some((s) => s.kind === "ServiceAccount" && s.name === sa && s.namespace === ns)));

// The VolumeSnapshotClass, against the CRD's v1 schema.
const drv = objs.filter((o) => o.kind === "CSIDriver");
check("one CSIDriver", drv.length === 1);
const driver = drv[0]?.metadata?.name;
check("one VolumeSnapshotClass", classes.length === 1, `${classes.length}`);
const dns1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
for (const c of classes) {
	const n = `VolumeSnapshotClass ${c.metadata?.name}`;
	check(`${n}: apiVersion ${SNAP_GROUP}/v1`, c.apiVersion === `${SNAP_GROUP}/v1`, c.apiVersion);
	for (const k of Object.keys(c))
		check(`${n}: known field ${k}`, ["apiVersion", "kind", "metadata", "driver", "deletionPolicy", "parameters"].includes(k));
	for (const k of Object.keys(c.metadata ?? {}))
		check(`${n}: known metadata field ${k}`, ["name", "labels", "annotations"].includes(k));
	check(`${n}: metadata.name a DNS-1123 subdomain`, dns1123.test(c.metadata?.name ?? "") &&
		c.metadata.name.length <= 253);
	check(`${n}: no namespace (cluster-scoped)`, c.metadata?.namespace === undefined);
	check(`${n}: driver is the CSIDriver's name ${driver}`, !!driver && c.driver === driver, c.driver);
	check(`${n}: deletionPolicy Delete or Retain`, ["Delete", "Retain"].includes(c.deletionPolicy), c.deletionPolicy);
	check(`${n}: parameters a map of strings`, c.parameters === undefined || (typeof c.parameters === "object" &&
		!Array.isArray(c.parameters) && Object.values(c.parameters).every((v) => typeof v === "string")),
		JSON.stringify(c.parameters));
	const dflt = c.metadata?.annotations?.["snapshot.storage.kubernetes.io/is-default-class"];
	check(`${n}: is-default-class "true" or absent`, dflt === undefined || dflt === "true", JSON.stringify(dflt));
}
check(`only VolumeSnapshotClasses of ${SNAP_GROUP}`, objs.filter(isSnapKind).every((o) => o.kind === "VolumeSnapshotClass"));

if (coreOut)
	writeFileSync(coreOut, objs.filter((o) => !isSnapKind(o)).map((o) => YAML.stringify(o)).join("---\n"));
done("snapshots on");
