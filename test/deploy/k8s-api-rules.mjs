// Checks rendered Kubernetes manifests for what the API server (and the
// kubelet) enforce beyond the OpenAPI schema, which k8s-validate.mjs checks.
// A chart can pass the schema and still be refused by `kubectl apply`: a port
// name of 16 characters, a volumeMount naming no volume, a label value of 64.
//
//   node k8s-api-rules.mjs TOOLS_DIR FILE...
//
// Rules (the API server's validation of the same name in parentheses):
//   object names        DNS-1123 subdomain; Service DNS-1035 label; Namespace
//                       DNS-1123 label; StatefulSet a label short enough for its
//                       controller-revision-hash label (<= 52); RBAC objects a
//                       path segment; CSIDriver <= 63 (ValidateObjectMeta)
//   labels, selectors   qualified-name keys, values <= 63 of [A-Za-z0-9-_.]
//   nodeSelector        (ValidateLabels); annotations: qualified-name keys
//                       (compared lower-case), keys and values <= 256 KiB in
//                       total (ValidateAnnotations)
//   pod templates       container names DNS-1123 labels, unique; volume names
//                       likewise; every volumeMount/volumeDevice names a volume
//                       (or a volumeClaimTemplate); mountPaths unique; hostPath
//                       types from the allowed set; port names IANA_SVC_NAME
//                       (<= 15, [a-z0-9-], a letter, no leading, trailing or
//                       double '-'), unique; port numbers 1-65535; with
//                       hostNetwork a hostPort equals its containerPort; probe
//                       ports that are names name a port of that container; env
//                       names (IsEnvVarName as before Kubernetes 1.32 relaxed
//                       it: the chart supports 1.27); fieldRef paths the
//                       kubelet fills; $(VAR) in command/args defined in env (else the
//                       kubelet passes it literally); workload restartPolicy
//                       Always; the selector matches the template's labels
//   Services            port names DNS-1123 labels, unique, required with
//                       several ports; targetPort names IANA_SVC_NAME and name a
//                       port of a container the Service selects; the selector
//                       selects a pod template of the same manifests
//   ClusterRoleBinding  ServiceAccount subjects have a namespace
// Exit status 0 when nothing is violated, 1 otherwise, 2 on usage errors.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
	console.error("usage: node k8s-api-rules.mjs TOOLS_DIR FILE...");
	process.exit(2);
}
const require = createRequire(path.join(path.resolve(toolsDir), "node_modules", "x.js"));
const YAML = require("yaml");

const LABEL_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_RE = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QNAME_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const ENV_RE = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
const HOSTPATH_TYPES = new Set(["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"]);
const FIELD_PATHS = new Set(["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
	"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"]);
const WORKLOADS = new Set(["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"]);
const RBAC = new Set(["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]);
const ANNOTATIONS_MAX = 256 * 1024;

const isLabel = (s) => typeof s === "string" && s.length <= 63 && LABEL_RE.test(s);
const isSubdomain = (s) => typeof s === "string" && s.length <= 253 && SUBDOMAIN_RE.test(s);

function ianaProblem(s) {
	if (typeof s !== "string" || s.length === 0)
		return "must be a non-empty string";
	if (s.length > 15)
		return `must be no more than 15 characters (IANA_SVC_NAME), has ${s.length}`;
	if (!/^[-a-z0-9]+$/.test(s))
		return "must contain only lowercase letters, digits and '-' (IANA_SVC_NAME)";
	if (!/[a-z]/.test(s))
		return "must contain at least one letter (IANA_SVC_NAME)";
	if (s.includes("--") || s.startsWith("-") || s.endsWith("-"))
		return "must not begin or end with '-' or contain '--' (IANA_SVC_NAME)";
	return "";
}

function qualifiedNameProblem(k) {
	if (typeof k !== "string" || k.length === 0)
		return "must be a non-empty string";
	const parts = k.split("/");
	if (parts.length > 2)
		return "must be a name with at most one '/' prefix";
	const name = parts[parts.length - 1];
	if (parts.length === 2 && !isSubdomain(parts[0]))
		return `prefix "${parts[0]}" must be a DNS-1123 subdomain`;
	if (name.length > 63 || !QNAME_RE.test(name))
		return `name part "${name}" must be <= 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends`;
	return "";
}

function labelValueProblem(v) {
	if (typeof v !== "string")
		return `must be a string, is ${typeof v}`;
	if (v.length > 63)
		return `must be no more than 63 characters, has ${v.length}`;
	if (v !== "" && !QNAME_RE.test(v))
		return "must be empty or [A-Za-z0-9-_.], alphanumeric at both ends";
	return "";
}

let problems = 0;
function report(label, where, msg) {
	problems++;
	console.error(`${label}: ${where}: ${msg}`);
}

function checkLabels(label, where, labels) {
	if (labels === undefined || labels === null)
		return;
	if (typeof labels !== "object") {
		report(label, where, "must be a map");
		return;
	}
	for (const [k, v] of Object.entries(labels)) {
		const kp = qualifiedNameProblem(k);
		if (kp)
			report(label, `${where} key "${k}"`, kp);
		const vp = labelValueProblem(v);
		if (vp)
			report(label, `${where}["${k}"] value "${v}"`, vp);
	}
}

function checkAnnotations(label, where, ann) {
	if (!ann)
		return;
	let size = 0;
	for (const [k, v] of Object.entries(ann)) {
		// The API server validates annotation keys lower-cased.
		const kp = qualifiedNameProblem(k.toLowerCase());
		if (kp)
			report(label, `${where} key "${k}"`, kp);
		if (typeof v !== "string")
			report(label, `${where}["${k}"]`, "must be a string");
		size += k.length + String(v).length;
	}
	if (size > ANNOTATIONS_MAX)
		report(label, where, `may not be more than ${ANNOTATIONS_MAX} bytes in total, has ${size}`);
}

function checkSelector(label, where, sel) {
	if (!sel)
		return;
	checkLabels(label, `${where}.matchLabels`, sel.matchLabels);
	for (const [i, e] of (sel.matchExpressions ?? []).entries()) {
		const kp = qualifiedNameProblem(e.key);
		if (kp)
			report(label, `${where}.matchExpressions[${i}].key`, kp);
	}
}

// True when the label selector `sel` (matchLabels/matchExpressions) selects `labels`.
function selects(sel, labels = {}) {
	for (const [k, v] of Object.entries(sel.matchLabels ?? {}))
		if (labels[k] !== v)
			return false;
	for (const e of sel.matchExpressions ?? []) {
		const has = Object.prototype.hasOwnProperty.call(labels, e.key);
		const ok = e.operator === "In" ? has && e.values.includes(labels[e.key])
			: e.operator === "NotIn" ? !has || !e.values.includes(labels[e.key])
			: e.operator === "Exists" ? has : !has;
		if (!ok)
			return false;
	}
	return true;
}

function nameProblem(obj) {
	const n = obj.metadata.name;
	if (RBAC.has(obj.kind))
		return n === "." || n === ".." || /[/%]/.test(n) ? "must be a path segment (no '/', '%', '.' or '..')" : "";
	if (obj.kind === "Service")
		return n.length <= 63 && DNS1035_RE.test(n) ? "" : "must be a DNS-1035 label (<= 63, [a-z0-9-], starting with a letter)";
	if (obj.kind === "Namespace")
		return isLabel(n) ? "" : "must be a DNS-1123 label (<= 63, [a-z0-9-])";
	if (obj.kind === "StatefulSet") {
		// Its pods are named <name>-<ordinal> (a hostname: a DNS label), and
		// the controller-revision-hash label is <name>-<10 characters>.
		if (!isLabel(n))
			return "must be a DNS-1123 label (its pods' hostnames derive from it)";
		return n.length <= 52 ? "" : `must be no more than 52 characters (controller-revision-hash label "<name>-<hash>" <= 63), has ${n.length}`;
	}
	if (obj.kind === "CSIDriver" && n.length > 63)
		return `must be no more than 63 characters, has ${n.length}`;
	return isSubdomain(n) ? "" : "must be a DNS-1123 subdomain (<= 253, [a-z0-9-.])";
}

// Pod templates of all documents, for Service targetPort resolution.
const templates = []; // { labels, spec, namespace }

function checkPodSpec(label, where, spec, { workload, claimTemplates = [] }) {
	if (!spec)
		return;
	const containers = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
	const cnames = new Set();
	for (const c of containers) {
		if (!isLabel(c.name))
			report(label, `${where}.containers "${c.name}"`, "container name must be a DNS-1123 label (<= 63, [a-z0-9-])");
		if (cnames.has(c.name))
			report(label, `${where}.containers "${c.name}"`, "container name defined twice");
		cnames.add(c.name);
	}
	const volumes = new Set();
	for (const [i, v] of (spec.volumes ?? []).entries()) {
		const vw = `${where}.volumes[${i}] "${v.name}"`;
		if (!isLabel(v.name))
			report(label, vw, "volume name must be a DNS-1123 label (<= 63, [a-z0-9-])");
		if (volumes.has(v.name))
			report(label, vw, "volume name defined twice");
		volumes.add(v.name);
		if (v.hostPath && !HOSTPATH_TYPES.has(v.hostPath.type ?? ""))
			report(label, `${vw}.hostPath.type`, `"${v.hostPath.type}" is not one of ${[...HOSTPATH_TYPES].filter(Boolean).join(", ")}`);
		if (v.persistentVolumeClaim && !isSubdomain(v.persistentVolumeClaim.claimName))
			report(label, `${vw}.persistentVolumeClaim.claimName`, "must be a DNS-1123 subdomain");
	}
	for (const t of claimTemplates) {
		if (volumes.has(t))
			report(label, `${where} volumeClaimTemplate "${t}"`, "has the name of a volume of the pod");
		volumes.add(t);
	}
	checkLabels(label, `${where}.nodeSelector`, spec.nodeSelector);
	if (workload && spec.restartPolicy && spec.restartPolicy !== "Always")
		report(label, `${where}.restartPolicy`, `"${spec.restartPolicy}": only Always is allowed in a ${workload}`);
	for (const [k, n] of [["serviceAccountName", spec.serviceAccountName], ["priorityClassName", spec.priorityClassName]])
		if (n !== undefined && !isSubdomain(n))
			report(label, `${where}.${k}`, `"${n}" must be a DNS-1123 subdomain`);

	for (const c of containers) {
		const cw = `${where}.containers "${c.name}"`;
		const mounts = new Set();
		for (const m of c.volumeMounts ?? []) {
			if (!volumes.has(m.name))
				report(label, `${cw}.volumeMounts "${m.name}"`, "names no volume of the pod");
			if (mounts.has(m.mountPath))
				report(label, `${cw}.volumeMounts "${m.name}"`, `mountPath ${m.mountPath} used twice`);
			mounts.add(m.mountPath);
		}
		for (const d of c.volumeDevices ?? [])
			if (!volumes.has(d.name))
				report(label, `${cw}.volumeDevices "${d.name}"`, "names no volume of the pod");
		const ports = new Set();
		for (const [i, p] of (c.ports ?? []).entries()) {
			const pw = `${cw}.ports[${i}]`;
			if (p.name !== undefined) {
				const pp = ianaProblem(p.name);
				if (pp)
					report(label, `${pw}.name "${p.name}"`, pp);
				if (ports.has(p.name))
					report(label, `${pw}.name "${p.name}"`, "port name defined twice");
				ports.add(p.name);
			}
			if (!Number.isInteger(p.containerPort) || p.containerPort < 1 || p.containerPort > 65535)
				report(label, `${pw}.containerPort`, `${p.containerPort} is not 1-65535`);
			if (spec.hostNetwork && p.hostPort !== undefined && p.hostPort !== p.containerPort)
				report(label, `${pw}.hostPort`, "must equal containerPort with hostNetwork");
		}
		for (const probe of ["livenessProbe", "readinessProbe", "startupProbe"]) {
			const pr = c[probe];
			if (!pr)
				continue;
			for (const h of ["httpGet", "tcpSocket"]) {
				const port = pr[h]?.port;
				if (port === undefined)
					continue;
				const pw = `${cw}.${probe}.${h}.port`;
				if (typeof port === "string") {
					const pp = ianaProblem(port);
					if (pp)
						report(label, `${pw} "${port}"`, pp);
					else if (!ports.has(port))
						report(label, `${pw} "${port}"`, `names no port of container "${c.name}" (it has: ${[...ports].join(", ") || "none"})`);
				} else if (!Number.isInteger(port) || port < 1 || port > 65535) {
					report(label, pw, `${port} is not 1-65535`);
				}
			}
		}
		const envNames = new Set();
		for (const e of c.env ?? []) {
			if (!ENV_RE.test(e.name ?? ""))
				report(label, `${cw}.env "${e.name}"`, "must be a valid environment variable name ([-._a-zA-Z][-._a-zA-Z0-9]*)");
			envNames.add(e.name);
			const fp = e.valueFrom?.fieldRef?.fieldPath;
			if (fp !== undefined && !FIELD_PATHS.has(fp) && !/^metadata\.(labels|annotations)\['[^']+'\]$/.test(fp))
				report(label, `${cw}.env "${e.name}".valueFrom.fieldRef.fieldPath`, `"${fp}" is not a field the kubelet can provide`);
		}
		for (const [k, list] of [["command", c.command], ["args", c.args]]) {
			for (const a of list ?? []) {
				// $(NAME) expands from env; $$(NAME) is a literal "$(NAME)".
				// Only upper-case names: "$(cat f)" in a shell script is the
				// shell's, and the kubelet leaves it alone.
				for (const m of String(a).matchAll(/(\$+)\(([A-Z_][A-Z0-9_]*)\)/g)) {
					if (m[1].length % 2 === 1 && !envNames.has(m[2]))
						report(label, `${cw}.${k} "${String(a).split("\n")[0]}"`, `$(${m[2]}) is not an env var of the container: the kubelet passes it unexpanded`);
				}
			}
		}
	}
}

const docs = [];
for (const file of files) {
	for (const doc of YAML.parseAllDocuments(readFileSync(file, "utf8"))) {
		const obj = doc.toJS();
		if (obj && typeof obj === "object" && obj.kind && obj.metadata?.name)
			docs.push({ file, obj });
	}
}
if (docs.length === 0) {
	console.error("k8s-api-rules: no documents with kind and metadata.name found");
	process.exit(1);
}

for (const { file, obj } of docs) {
	const label = `${file}: ${obj.kind}/${obj.metadata.name}`;
	const np = nameProblem(obj);
	if (np)
		report(label, "metadata.name", `"${obj.metadata.name}" ${np}`);
	if (obj.metadata.namespace !== undefined && !isLabel(obj.metadata.namespace))
		report(label, "metadata.namespace", `"${obj.metadata.namespace}" must be a DNS-1123 label`);
	checkLabels(label, "metadata.labels", obj.metadata.labels);
	checkAnnotations(label, "metadata.annotations", obj.metadata.annotations);

	if (obj.kind === "Pod") {
		checkPodSpec(label, "spec", obj.spec, {});
	} else if (WORKLOADS.has(obj.kind)) {
		const t = obj.spec?.template ?? {};
		checkSelector(label, "spec.selector", obj.spec?.selector);
		checkLabels(label, "spec.template.metadata.labels", t.metadata?.labels);
		checkAnnotations(label, "spec.template.metadata.annotations", t.metadata?.annotations);
		if (obj.spec?.selector && !selects(obj.spec.selector, t.metadata?.labels))
			report(label, "spec.selector", "does not match the template's labels");
		const claims = (obj.spec?.volumeClaimTemplates ?? []).map((c) => c.metadata?.name);
		for (const [i, c] of (obj.spec?.volumeClaimTemplates ?? []).entries()) {
			if (!isLabel(c.metadata?.name))
				report(label, `spec.volumeClaimTemplates[${i}].metadata.name`, "must be a DNS-1123 label");
			checkLabels(label, `spec.volumeClaimTemplates[${i}].metadata.labels`, c.metadata?.labels);
		}
		checkPodSpec(label, "spec.template.spec", t.spec, { workload: obj.kind, claimTemplates: claims });
		templates.push({ labels: t.metadata?.labels ?? {}, spec: t.spec ?? {}, namespace: obj.metadata.namespace });
	} else if (obj.kind === "Service") {
		checkLabels(label, "spec.selector", obj.spec?.selector);
		const ports = obj.spec?.ports ?? [];
		const names = new Set();
		for (const [i, p] of ports.entries()) {
			const pw = `spec.ports[${i}]`;
			if (ports.length > 1 && !p.name)
				report(label, `${pw}.name`, "required when the Service has several ports");
			if (p.name !== undefined && !isLabel(p.name))
				report(label, `${pw}.name "${p.name}"`, "must be a DNS-1123 label");
			if (names.has(p.name))
				report(label, `${pw}.name "${p.name}"`, "defined twice");
			names.add(p.name);
			if (typeof p.targetPort === "string") {
				const pp = ianaProblem(p.targetPort);
				if (pp)
					report(label, `${pw}.targetPort "${p.targetPort}"`, pp);
			}
		}
	} else if (obj.kind === "ClusterRoleBinding") {
		for (const [i, s] of (obj.subjects ?? []).entries())
			if (s.kind === "ServiceAccount" && !s.namespace)
				report(label, `subjects[${i}].namespace`, "required for a ServiceAccount subject");
	} else if (obj.kind === "PodDisruptionBudget") {
		checkSelector(label, "spec.selector", obj.spec?.selector);
	}
}

// Services: the selector selects a pod template here, and a targetPort name
// is a port of a container in every selected template.
for (const { file, obj } of docs.filter((d) => d.obj.kind === "Service")) {
	const label = `${file}: Service/${obj.metadata.name}`;
	const sel = obj.spec?.selector;
	if (!sel || Object.keys(sel).length === 0)
		continue; // headless without selector: endpoints managed elsewhere
	const chosen = templates.filter((t) => t.namespace === obj.metadata.namespace && selects({ matchLabels: sel }, t.labels));
	if (chosen.length === 0) {
		report(label, "spec.selector", `${JSON.stringify(sel)} selects no pod template of these manifests`);
		continue;
	}
	for (const [i, p] of (obj.spec?.ports ?? []).entries()) {
		if (typeof p.targetPort !== "string")
			continue;
		for (const t of chosen) {
			const all = (t.spec.containers ?? []).flatMap((c) => (c.ports ?? []).map((x) => x.name));
			if (!all.includes(p.targetPort))
				report(label, `spec.ports[${i}].targetPort "${p.targetPort}"`, `names no container port of the selected pods (they have: ${all.filter(Boolean).join(", ") || "none"})`);
		}
	}
}

console.log(`k8s-api-rules: ${docs.length} objects, ${problems} problems`);
process.exit(problems ? 1 : 0);
