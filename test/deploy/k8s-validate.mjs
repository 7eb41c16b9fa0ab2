// Validates Kubernetes manifests (multi-document YAML, e.g. `helm template`
// output) against the Kubernetes API schemas, offline.
//
//   node k8s-validate.mjs TOOLS_DIR FILE...
//
// TOOLS_DIR is what test/deploy/get-tools.sh prints; it holds the npm packages
// `kubernetes-models` (the API's OpenAPI schemas compiled to ajv validators:
// types, required fields, enums, formats) and `yaml`.
//
// The compiled schemas, like the API's OpenAPI document, accept fields they do
// not know. kubectl and kubeconform -strict reject them (a misspelt
// `mountPropogation` would silently do nothing), so this checker does too: each
// object is handed to the validator behind a Proxy that records which fields
// the schema looked up. A schema with known properties looks up every one of
// them; a map schema (labels, resources.limits) enumerates the keys instead.
// Any field of a looked-up, non-map object that the schema never asked for is
// reported as unknown.
//
// Also rejected: documents without apiVersion/kind/metadata.name, kinds with
// no schema, and two objects with the same kind, namespace and name.
// Exit status 0 when every document is valid, 1 otherwise, 2 on usage errors.
import { createRequire } from "node:module";
import { readFileSync, existsSync } from "node:fs";
import path from "node:path";

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
	console.error("usage: node k8s-validate.mjs TOOLS_DIR FILE...");
	process.exit(2);
}
const require = createRequire(path.join(path.resolve(toolsDir), "node_modules", "x.js"));
const YAML = require("yaml");
const schemaDir = path.join(path.resolve(toolsDir), "node_modules", "kubernetes-models", "_schemas");

// "rbac.authorization.k8s.io/v1" + "ClusterRole" -> IoK8sApiRbacV1ClusterRole
function schemaName(apiVersion, kind) {
	const slash = apiVersion.indexOf("/");
	const group = slash < 0 ? "core" : apiVersion.slice(0, slash).split(".")[0];
	const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
	const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
	return `IoK8sApi${cap(group)}${cap(version)}${kind}`;
}

function loadValidator(apiVersion, kind) {
	const file = path.join(schemaDir, schemaName(apiVersion, kind) + ".js");
	if (!existsSync(file))
		return null;
	return require(file).validate;
}

// Wraps `root` so that every object the validator reads is recorded.
function track(root) {
	const seen = new Map(); // target -> { path, got: Set, enumerated }
	const proxies = new Map();
	function wrap(value, where) {
		if (value === null || typeof value !== "object")
			return value;
		if (proxies.has(value))
			return proxies.get(value);
		const rec = { path: where, got: new Set(), enumerated: false, isArray: Array.isArray(value) };
		seen.set(value, rec);
		const p = new Proxy(value, {
			get(t, key, recv) {
				if (typeof key === "string")
					rec.got.add(key);
				const v = Reflect.get(t, key, recv);
				if (typeof key === "string" && Object.prototype.hasOwnProperty.call(t, key))
					return wrap(v, rec.isArray ? `${where}[${key}]` : `${where}.${key}`);
				return v;
			},
			ownKeys(t) {
				rec.enumerated = true;
				return Reflect.ownKeys(t);
			},
			has(t, key) {
				if (typeof key === "string")
					rec.got.add(key);
				return Reflect.has(t, key);
			},
		});
		proxies.set(value, p);
		return p;
	}
	return { proxy: wrap(root, ""), seen };
}

function unknownFields(seen) {
	const out = [];
	for (const [target, rec] of seen) {
		if (rec.isArray || rec.enumerated || rec.got.size === 0)
			continue;
		for (const k of Object.keys(target))
			if (!rec.got.has(k))
				out.push(`${rec.path || "."}: unknown field "${k}"`);
	}
	return out;
}

function describeError(e) {
	const where = e.instancePath || "/";
	const params = e.params ? JSON.stringify(e.params) : "";
	return `${where}: ${e.keyword}${e.message ? " " + e.message : ""} ${params}`;
}

let bad = 0, count = 0;
const ids = new Set();
for (const file of files) {
	const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
	for (const doc of docs) {
		if (doc.errors.length) {
			console.error(`${file}: YAML error: ${doc.errors[0].message}`);
			bad++;
			continue;
		}
		const obj = doc.toJS();
		if (obj === null || obj === undefined)
			continue; // empty document (a template that rendered nothing)
		count++;
		const name = obj?.metadata?.name;
		const label = `${file}: ${obj.kind ?? "?"}/${name ?? "?"}`;
		if (typeof obj !== "object" || !obj.apiVersion || !obj.kind || !name) {
			console.error(`${label}: needs apiVersion, kind and metadata.name`);
			bad++;
			continue;
		}
		const id = `${obj.apiVersion.split("/").length > 1 ? obj.apiVersion.split("/")[0] : ""}/${obj.kind}/${obj.metadata.namespace ?? ""}/${name}`;
		if (ids.has(id)) {
			console.error(`${label}: defined twice`);
			bad++;
		}
		ids.add(id);
		const validate = loadValidator(obj.apiVersion, obj.kind);
		if (!validate) {
			console.error(`${label}: no schema for ${obj.apiVersion} ${obj.kind}`);
			bad++;
			continue;
		}
		const { proxy, seen } = track(obj);
		const ok = validate(proxy);
		const problems = ok ? [] : (validate.errors || []).map(describeError);
		problems.push(...unknownFields(seen));
		if (problems.length) {
			bad++;
			for (const p of problems)
				console.error(`${label}: ${p}`);
		} else {
			console.log(`ok ${obj.apiVersion} ${obj.kind} ${name}`);
		}
	}
}
if (count === 0) {
	console.error("k8s-validate: no documents found");
	process.exit(1);
}
console.log(`k8s-validate: ${count} objects, ${bad} invalid`);
process.exit(bad ? 1 : 0);
