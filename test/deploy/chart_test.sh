#!/usr/bin/env bash
# Lints, renders and validates the Helm chart for one cluster shape.
#   usage: chart_test.sh SHAPE [BUILD_DIR]
#   SHAPE: default | selftest | a values file name in deploy/helm/zipline/examples/
#          (tcp-only, shared-hca, sriov-multus, external-etcd, local-pv)
# Steps: helm lint --strict; helm template; every rendered object against the
# Kubernetes API schema (k8s-validate.mjs, unknown fields rejected); the
# chart's own contract (chart-check.mjs, flags against BUILD_DIR/bin/*).
# `selftest` feeds known-bad input to each checker and expects it rejected.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
chart="$src/deploy/helm/zipline"
shape="${1:?usage: chart_test.sh SHAPE [BUILD_DIR]}"
build="${2:-}"
tools="$("$here/get-tools.sh")"
helm="$tools/bin/helm"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

values=()
if [ "$shape" != default ] && [ "$shape" != selftest ]; then
	f="$chart/examples/$shape.yaml"
	[ -f "$f" ] || { echo "chart_test: no values file $f" >&2; exit 2; }
	values=(-f "$f")
fi

expect_fail() { # expect_fail WHAT COMMAND...: the command must fail
	local what="$1"; shift
	if "$@" >"$work/out" 2>&1; then
		echo "FAIL selftest: $what was accepted" >&2
		cat "$work/out" >&2
		return 1
	fi
	echo "ok selftest: $what rejected: $(grep -m1 -iE 'error|fail|unknown|must|invalid|not allowed' "$work/out" || head -1 "$work/out")"
}

if [ "$shape" = selftest ]; then
	rc=0
	expect_fail "values: unknown rdma.mode" "$helm" template t "$chart" --set rdma.mode=infiniband || rc=1
	expect_fail "values: misspelt key" "$helm" template t "$chart" --set node.updateStrategie.type=OnDelete || rc=1
	expect_fail "values: external etcd without endpoints" "$helm" template t "$chart" --set etcd.mode=external || rc=1
	expect_fail "values: sriov with storage hostNetwork" "$helm" template t "$chart" \
		--set rdma.mode=sriov --set storage.hostNetwork=true || rc=1
	"$helm" template t "$chart" > "$work/good.yaml"
	# Misspelt field, wrong type, bad enum: each must be caught by the validator.
	sed 's/mountPropagation: Bidirectional/mountPropogation: Bidirectional/' "$work/good.yaml" > "$work/typo.yaml"
	sed 's/privileged: true/privileged: "yes"/' "$work/good.yaml" > "$work/type.yaml"
	sed 's/type: DirectoryOrCreate/type: DirOrCreate/' "$work/good.yaml" > "$work/enum.yaml"
	for bad in typo type enum; do
		cmp -s "$work/good.yaml" "$work/$bad.yaml" && { echo "FAIL selftest: $bad edit matched nothing" >&2; rc=1; }
		expect_fail "manifest: $bad" node "$here/k8s-validate.mjs" "$tools" "$work/$bad.yaml" || rc=1
	done
	# The contract check must notice a node plugin that lost Bidirectional.
	sed 's/mountPropagation: Bidirectional/mountPropagation: HostToContainer/' "$work/good.yaml" > "$work/prop.yaml"
	expect_fail "contract: no Bidirectional" node "$here/chart-check.mjs" "$tools" "$work/prop.yaml" default || rc=1
	[ "$rc" -eq 0 ] && echo "chart_test selftest: passed"
	exit "$rc"
fi

echo "== helm lint --strict ($shape)"
"$helm" lint --strict "$chart" "${values[@]}"
echo "== helm template ($shape)"
"$helm" template zipline "$chart" --namespace zipline "${values[@]}" > "$work/rendered.yaml"
echo "== Kubernetes API schema ($shape)"
node "$here/k8s-validate.mjs" "$tools" "$work/rendered.yaml"
echo "== chart contract ($shape)"
node "$here/chart-check.mjs" "$tools" "$work/rendered.yaml" "$shape" ${build:+"$build"}
