// What the chart checkers (chart-check, monitoring-check, snapshot-check)
// share: reading a rendered chart with the tools' YAML parser, and counting
// checks.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

// The `yaml` package of TOOLS_DIR (what get-tools.sh prints) and every
// non-empty document of FILE (`helm template` output) as a plain object.
export function loadRender(toolsDir, file) {
	const require = createRequire(path.join(path.resolve(toolsDir), "node_modules", "x.js"));
	const YAML = require("yaml");
	const objs = YAML.parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS()).filter(Boolean);
	return { YAML, objs };
}

// check(what, cond, detail) prints "FAIL <who>: <what>: <detail>" when cond
// is false; done(label) prints the tally and exits 1 when a check failed.
export function checker(who) {
	let failed = 0, passed = 0;
	return {
		check(what, cond, detail = "") {
			if (cond) {
				passed++;
				return;
			}
			failed++;
			console.error(`FAIL ${who}: ${what}${detail ? ": " + detail : ""}`);
		},
		done(label) {
			console.log(`${label}: ${passed} passed, ${failed} failed`);
			process.exit(failed ? 1 : 0);
		},
	};
}
