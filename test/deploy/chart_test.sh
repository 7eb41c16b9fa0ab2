#!/usr/bin/env bash
# Lints, renders and validates the Helm chart for one cluster shape.
#   usage: chart_test.sh SHAPE [BUILD_DIR]
#   SHAPE: default | selftest | a values file name in deploy/helm/zipline/examples/
#          (tcp-only, shared-hca, sriov-multus, external-etcd, local-pv, single-node)
# Steps: helm lint --strict; helm template; every rendered object against the
# Kubernetes API schema (k8s-validate.mjs, unknown fields rejected) and the
# API server's rules beyond it (k8s-api-rules.mjs: names, labels, port names,
# volume references, probe ports...); the chart's own contract (chart-check.mjs,
# flags against BUILD_DIR/bin/*); the install NOTES render. The default shape
# also renders the monitoring objects (monitoring-check.mjs; the dashboard
# against Grafana's own schema, dashboard-schema.mjs) and the snapshot
# objects (snapshot-check.mjs: none by default, the csi-snapshotter sidecar,
# its RBAC and the VolumeSnapshotClass with snapshots.enabled=true).
# `selftest` feeds known-bad input to each checker and to the chart's own
# refusals, and expects each rejected for the reason it was made bad.
# helm is the one on PATH when it is Helm 3, else the fallback (get-tools.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
chart="$src/deploy/helm/zipline"
shape="${1:?usage: chart_test.sh SHAPE [BUILD_DIR]}"
build="${2:-}"
tools="$("$here/get-tools.sh")"
helm="$("$here/get-tools.sh" --which helm)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "chart_test: helm $helm ($("$helm" version --short))"

values=()
if [ "$shape" != default ] && [ "$shape" != selftest ]; then
	f="$chart/examples/$shape.yaml"
	[ -f "$f" ] || { echo "chart_test: no values file $f" >&2; exit 2; }
	values=(-f "$f")
fi

# render_notes OUT HELM_ARGS...: NOTES.txt as `helm install` would print it.
# helm template leaves NOTES out, so a copy of the chart renders it into a
# ConfigMap with tpl (same values, same helpers).
render_notes() {
	local out="$1"; shift
	rm -rf "$work/notes-chart"
	cp -r "$chart" "$work/notes-chart"
	mv "$work/notes-chart/templates/NOTES.txt" "$work/notes-chart/NOTES.txt"
	printf '%s\n' 'apiVersion: v1' 'kind: ConfigMap' 'metadata: {name: notes}' 'data:' \
		'  notes: {{ tpl (.Files.Get "NOTES.txt") . | quote }}' > "$work/notes-chart/templates/zz-notes.yaml"
	"$helm" template zipline "$work/notes-chart" --namespace zipline "$@" \
		--show-only templates/zz-notes.yaml > "$work/notes.yaml"
	node -e 'const Y = require(process.argv[1]); const fs = require("fs");
		fs.writeFileSync(process.argv[3], Y.parse(fs.readFileSync(process.argv[2], "utf8")).data.notes)' \
		"$tools/node_modules/yaml" "$work/notes.yaml" "$out"
}

# expect_fail WHAT PATTERN COMMAND...: the command must fail, and its output
# must match PATTERN (grep -E), so that it failed for the reason intended.
expect_fail() {
	local what="$1" pattern="$2"; shift 2
	if "$@" >"$work/out" 2>&1; then
		echo "FAIL selftest: $what was accepted" >&2
		cat "$work/out" >&2
		return 1
	fi
	if ! grep -qE -- "$pattern" "$work/out"; then
		echo "FAIL selftest: $what was rejected, but not with /$pattern/:" >&2
		cat "$work/out" >&2
		return 1
	fi
	echo "ok selftest: $what rejected: $(grep -m1 -E -- "$pattern" "$work/out" | cut -c1-220)"
}

# expect_renders WHAT FILE PREFIX WANT...: every WANT, after PREFIX, is a
# line's text in the rendered FILE.
expect_renders() {
	local what=$1 file=$2 prefix=$3 want bad=0
	shift 3
	for want in "$@"; do
		if grep -qF -- "$prefix$want" "$file"; then
			echo "ok selftest: $what: renders $want"
		else
			echo "FAIL selftest: $what: no $want" >&2
			bad=1
		fi
	done
	return $bad
}

# mutate NAME SED_SCRIPT: $work/NAME.yaml = good.yaml edited; the edit must change it.
mutate() {
	sed "$2" "$work/good.yaml" > "$work/$1.yaml"
	if cmp -s "$work/good.yaml" "$work/$1.yaml"; then
		echo "FAIL selftest: edit '$1' matched nothing in the rendered chart" >&2
		return 1
	fi
}

if [ "$shape" = selftest ]; then
	rc=0
	run() { "$@" || rc=1; }
	run expect_fail "values: unknown rdma.mode" "rdma.mode" "$helm" template t "$chart" --set rdma.mode=infiniband
	run expect_fail "values: misspelt key" "updateStrategie" "$helm" template t "$chart" --set node.updateStrategie.type=OnDelete
	run expect_fail "values: external etcd without endpoints" "endpoints" "$helm" template t "$chart" --set etcd.mode=external
	run expect_fail "values: sriov with storage hostNetwork" "hostNetwork cannot" "$helm" template t "$chart" \
		--set rdma.mode=sriov --set storage.hostNetwork=true
	# The chart's refusals: a Zipline default class while bundled etcd's PVCs
	# use the default class (first-install deadlock), a default class or no
	# class at all that fits on the storage nodes.
	cat > "$work/zdefault.yaml" <<-'EOF'
	storageClasses:
	  - {name: zipline, default: true, replicas: 3, chunkSize: 4M, fsType: ext4, reclaimPolicy: Delete,
	     allowVolumeExpansion: true, volumeBindingMode: WaitForFirstConsumer}
	  - {name: zipline-r1, default: false, replicas: 1, chunkSize: 4M, fsType: ext4, reclaimPolicy: Delete,
	     allowVolumeExpansion: true, volumeBindingMode: WaitForFirstConsumer}
	EOF
	run expect_fail "values: tcp-only with a Zipline default class, etcd on the default class" \
		"etcd would wait for Zipline" "$helm" template t "$chart" -f "$chart/examples/tcp-only.yaml" -f "$work/zdefault.yaml"
	run expect_fail "values: etcd PVCs on a Zipline class" "is a Zipline class" \
		"$helm" template t "$chart" --set etcd.bundled.persistence.storageClassName=zipline
	run expect_fail "values: default class replicas=3 on storage.nodes=2" "default class with replicas=3, but storage.nodes=2" \
		"$helm" template t "$chart" -f "$work/zdefault.yaml" --set etcd.bundled.persistence.storageClassName=local-path \
		--set storage.nodes=2
	run expect_fail "values: no class fits on storage.nodes=1" "no StorageClass in storageClasses has replicas <= storage.nodes=1" \
		"$helm" template t "$chart" --set storage.nodes=1
	run expect_fail "values: tests.storageClassName too big for storage.nodes=2" "helm test could not provision" \
		"$helm" template t "$chart" --set storage.nodes=2 --set tests.storageClassName=zipline
	# ... and what they allow: helm test takes the first class that fits.
	sed 's/default: true/default: false/' "$work/zdefault.yaml" > "$work/zfit.yaml"
	for n in 1:zipline-r1 3:zipline; do
		got="$("$helm" template t "$chart" -f "$work/zfit.yaml" --set storage.nodes="${n%%:*}" \
			--show-only templates/tests/test-volume.yaml | sed -n 's/^  storageClassName: //p')" || rc=1
		if [ "$got" = "${n#*:}" ]; then
			echo "ok selftest: storage.nodes=${n%%:*}: helm test uses class $got"
		else
			echo "FAIL selftest: storage.nodes=${n%%:*}: helm test uses class '$got', not ${n#*:}" >&2
			rc=1
		fi
	done

	# A class's QoS limits and ioTimeout become its parameters; an unknown
	# limit is refused.
	cat > "$work/qos.yaml" <<-'EOF'
	storageClasses:
	  - {name: zipline, default: false, replicas: 3, chunkSize: 4M, fsType: ext4, reclaimPolicy: Delete,
	     allowVolumeExpansion: true, volumeBindingMode: WaitForFirstConsumer, ioTimeout: 60,
	     qos: {writeIops: 2000, readBps: 100M, iopsBurst: 64}}
	EOF
	"$helm" template t "$chart" -f "$work/qos.yaml" --show-only templates/storageclass.yaml > "$work/qos-sc.yaml" || rc=1
	run expect_renders "storageClasses[].qos/ioTimeout" "$work/qos-sc.yaml" "  " \
		'ioTimeout: "60"' 'writeIops: "2000"' 'readBps: "100M"' 'iopsBurst: "64"'
	run expect_fail "values: unknown QoS limit" "writeIOPS" "$helm" template t "$chart" -f "$work/qos.yaml" \
		--set 'storageClasses[0].qos.writeIOPS=5'
	run expect_fail "values: QoS bytes with a bad suffix" "readBps" "$helm" template t "$chart" -f "$work/qos.yaml" \
		--set 'storageClasses[0].qos.readBps=1Q'

	# Healing is on by default; the switches turn it off (the 0.1 behaviour).
	"$helm" template t "$chart" --set storage.heal=false --set controller.manager=false \
		--set node.ioTimeout=30 > "$work/off.yaml" || rc=1
	run expect_renders "storage.heal/controller.manager false, node.ioTimeout 30" "$work/off.yaml" "- " \
		"--heal=off" "--manager=off" "--io-timeout=30" "--legacy-drop"
	run expect_fail "values: node.ioTimeout 0" "ioTimeout" "$helm" template t "$chart" --set node.ioTimeout=0
	run expect_fail "values: storage.heal without controller.manager" "storage.heal needs controller.manager" \
		"$helm" template t "$chart" --set controller.manager=false

	# The longest release name Helm allows (53) still gives valid names.
	long_release="$(printf 'r%.0s' $(seq 53))"
	for f in "" "$chart/examples/local-pv.yaml"; do
		"$helm" template "$long_release" "$chart" --namespace zipline ${f:+-f "$f"} > "$work/long.yaml" || rc=1
		if node "$here/k8s-api-rules.mjs" "$tools" "$work/long.yaml" > "$work/out" 2>&1; then
			echo "ok selftest: 53-character release name${f:+ with $(basename "$f")}: $(tail -1 "$work/out")"
		else
			echo "FAIL selftest: 53-character release name${f:+ with $(basename "$f")}:" >&2; cat "$work/out" >&2; rc=1
		fi
	done

	"$helm" template t "$chart" > "$work/good.yaml"
	# Schema: misspelt field, wrong type, bad enum.
	run mutate typo 's/mountPropagation: Bidirectional/mountPropogation: Bidirectional/'
	run mutate type 's/privileged: true/privileged: "yes"/'
	run mutate enum 's/type: DirectoryOrCreate/type: DirOrCreate/'
	run expect_fail "schema: typo" 'unknown field "mountPropogation"' node "$here/k8s-validate.mjs" "$tools" "$work/typo.yaml"
	run expect_fail "schema: type" "privileged: type" node "$here/k8s-validate.mjs" "$tools" "$work/type.yaml"
	run expect_fail "schema: enum" "enum" node "$here/k8s-validate.mjs" "$tools" "$work/enum.yaml"
	# API server rules beyond the schema, each on one edit of the chart.
	long="$(printf 'x%.0s' $(seq 64))"
	big="$(head -c 270000 /dev/zero | tr '\0' a)"
	printf 'controller:\n  podAnnotations:\n    example.com/big: "%s"\n' "$big" > "$work/big.yaml"
	"$helm" template t "$chart" -f "$work/big.yaml" > "$work/annot.yaml"
	run mutate portname 's/name: http-provision/name: provisioner-http/'
	run mutate mount '0,/- name: lib-modules/s//- name: lib-modulez/'
	run mutate hostpath 's/type: DirectoryOrCreate/type: DirOrCreate/'
	run mutate labelvalue "s/app.kubernetes.io\\/part-of: zipline/app.kubernetes.io\\/part-of: $long/"
	run mutate labelkey 's/app.kubernetes.io\/part-of: zipline/app.kubernetes.io\/part_of-: zipline/'
	run mutate probeport 's/port: healthz/port: healthy/'
	run mutate targetport 's/targetPort: client/targetPort: clients/'
	run mutate envname 's/- name: POD_NAMESPACE/- name: POD NAMESPACE/'
	run mutate container 's/- name: csi-attacher/- name: csi_attacher/'
	run mutate svcname 's/name: t-zipline-etcd-peer$/name: 0t-zipline-etcd-peer/'
	run mutate envref '0,/--node-id=$(NODE_NAME)/s//--node-id=$(NODE_NAM)/'
	run mutate selector 's/^        app.kubernetes.io\/component: etcd$/        app.kubernetes.io\/component: etcd2/'
	api() { node "$here/k8s-api-rules.mjs" "$tools" "$work/$1.yaml"; }
	run expect_fail "api: port name of 16" 'ports\[0\]\.name "provisioner-http": must be no more than 15' api portname
	run expect_fail "api: volumeMount without volume" 'volumeMounts "lib-modulez": names no volume' api mount
	run expect_fail "api: hostPath type" 'hostPath.type: "DirOrCreate" is not one of' api hostpath
	run expect_fail "api: label value of 64" 'part-of"\] value .*no more than 63' api labelvalue
	run expect_fail "api: label key" 'key "app.kubernetes.io/part_of-": name part' api labelkey
	run expect_fail "api: probe port names no port" 'livenessProbe.httpGet.port "healthy": names no port' api probeport
	run expect_fail "api: Service targetPort names no port" 'targetPort "clients": names no container port' api targetport
	run expect_fail "api: env var name" 'env "POD NAMESPACE": must be a valid environment variable name' api envname
	run expect_fail "api: container name" 'containers "csi_attacher": container name must be a DNS-1123 label' api container
	run expect_fail "api: Service name" 'Service/0t-zipline-etcd-peer: metadata.name: .*DNS-1035' api svcname
	run expect_fail "api: \$(VAR) not in env" '\$\(NODE_NAM\) is not an env var' api envref
	run expect_fail "api: selector does not match the template" 'spec.selector: does not match' api selector
	run expect_fail "api: annotations over 256 KiB" 'may not be more than 262144 bytes' api annot
	# Chart contract: Bidirectional, PVCs on Zipline, helm test pods, hostPath types.
	run mutate prop 's/mountPropagation: Bidirectional/mountPropagation: HostToContainer/'
	run mutate hookpolicy 's/helm.sh\/hook-delete-policy: before-hook-creation$/helm.sh\/hook-delete-policy: before-hook-creation,hook-succeeded/'
	run mutate libmodules '/path: \/lib\/modules/{n;s/type: DirectoryOrCreate/type: Directory/}'
	# The cluster key: off the controller, onto the node plugin, a world-readable file.
	run mutate ckeyctl '0,/- --cluster-key-file=/{/- --cluster-key-file=/d}'
	run mutate ckeymode 's/defaultMode: 256 /defaultMode: 292 /'
	run mutate ckeynode '0,/- --kubelet-dir=/s//- --cluster-key-file=\/etc\/zipline\/cluster-key\/cluster-key\n            - --kubelet-dir=/'
	contract() { node "$here/chart-check.mjs" "$tools" "$work/$1.yaml" "${2:-default}"; }
	run expect_fail "contract: a pod without --cluster-key-file" "--cluster-key-file: " contract ckeyctl
	run expect_fail "contract: a world-readable cluster key" "the key file is not world-readable" contract ckeymode
	run expect_fail "contract: the node plugin given the cluster key" "node plugin: no --cluster-key-file" contract ckeynode
	# helm lookup keeps the key of an existing Secret (an upgrade); helm
	# template alone renders a new random one each time.
	k1="$("$helm" template t "$chart" --show-only templates/cluster-key.yaml | sed -n 's/^  cluster-key: //p')"
	k2="$("$helm" template t "$chart" --show-only templates/cluster-key.yaml | sed -n 's/^  cluster-key: //p')"
	if [ -n "$k1" ] && [ "$k1" != "$k2" ] && [ "$(printf %s "$k1" | base64 -d | tr -d 0-9a-f | wc -c)" = 0 ]; then
		echo "ok selftest: a fresh install gets a random 64-hex cluster key"
	else
		echo "FAIL selftest: cluster keys of two renders: '$k1' '$k2'" >&2; rc=1
	fi
	if "$helm" template t "$chart" --set auth.clusterKey.existingSecret=mine > "$work/mine.yaml" &&
		! grep -q "name: t-zipline-cluster-key" "$work/mine.yaml" &&
		[ "$(grep -c "secretName: mine$" "$work/mine.yaml")" = 2 ]; then
		echo "ok selftest: auth.clusterKey.existingSecret=mine: no Secret of the chart, mine mounted twice"
	else
		echo "FAIL selftest: auth.clusterKey.existingSecret=mine" >&2; rc=1
	fi
	run expect_fail "contract: no Bidirectional" "kubelet dir mounted Bidirectional" contract prop
	run expect_fail "contract: helm test pods deleted on success" "kept for --logs" contract hookpolicy
	run expect_fail "contract: /lib/modules must exist" "hostPath /lib/modules may be absent" contract libmodules
	# tcp-only with Zipline as default class: allowed once etcd names its own
	# class; the checker must catch etcd's claim losing that class.
	"$helm" template t "$chart" -f "$chart/examples/tcp-only.yaml" -f "$work/zdefault.yaml" \
		--set etcd.bundled.persistence.storageClassName=local-path > "$work/good.yaml"
	run contract good tcp-only > /dev/null
	run mutate etcdclass '/storageClassName: "local-path"/d'
	run expect_fail "contract: etcd PVC on a Zipline default class" \
		'volumeClaimTemplate data not bound by a Zipline class: .*"zipline" is the default' contract etcdclass tcp-only
	run mutate etcdzipline 's/storageClassName: "local-path"/storageClassName: "zipline"/'
	run expect_fail "contract: etcd PVC naming a Zipline class" 'storageClassName "zipline" is a Zipline class' contract etcdzipline tcp-only

	# Snapshots (snapshots.*): the values schema refuses bad values...
	run expect_fail "values: snapshots.class.deletionPolicy Keep" 'deletionPolicy must be one of .*"Delete", "Retain"' \
		"$helm" template t "$chart" --set snapshots.enabled=true --set snapshots.class.deletionPolicy=Keep
	run expect_fail "values: misspelt snapshots.enable" "Additional property enable is not allowed" \
		"$helm" template t "$chart" --set snapshots.enable=true
	run expect_fail "values: a snapshot class parameter that is no string" "parameters.x: Invalid type" \
		"$helm" template t "$chart" --set snapshots.enabled=true --set snapshots.class.parameters.x=5
	# ... renders what the values ask for ...
	"$helm" template t "$chart" --set snapshots.enabled=true --set snapshots.class.isDefault=true \
		--set snapshots.class.deletionPolicy=Retain --set-string snapshots.class.parameters.x=5 \
		--show-only templates/snapshotclass.yaml > "$work/vsc.yaml" || rc=1
	run expect_renders "snapshots.class isDefault, Retain, parameters" "$work/vsc.yaml" "" \
		'    snapshot.storage.kubernetes.io/is-default-class: "true"' "deletionPolicy: Retain" '  x: "5"'
	if "$helm" template t "$chart" --set snapshots.enabled=true --set snapshots.class.create=false > "$work/noclass.yaml" &&
		! grep -q "^kind: VolumeSnapshotClass$" "$work/noclass.yaml" && grep -q -- "- name: csi-snapshotter$" "$work/noclass.yaml"; then
		echo "ok selftest: snapshots.class.create=false: the sidecar, no VolumeSnapshotClass"
	else
		echo "FAIL selftest: snapshots.class.create=false" >&2; rc=1
	fi
	# ... and snapshot-check.mjs rejects each broken object for its reason.
	"$helm" template t "$chart" --set snapshots.enabled=true > "$work/good.yaml"
	snap() { node "$here/snapshot-check.mjs" "$tools" "$work/$1.yaml" "${2:-on}"; }
	run snap good > /dev/null
	run mutate vscdriver 's/^driver: zipline.csi.io$/driver: other.csi.io/'
	run mutate vscpolicy 's/^deletionPolicy: Delete$/deletionPolicy: Keep/'
	run mutate vscfield 's/^deletionPolicy: Delete$/deletionPolicy: Delete\ndeletionPolcy: Retain/'
	run mutate snapverb 's/verbs: \[get, list, watch, update, patch\]/verbs: [get, list, watch, create, update, patch]/'
	run mutate snapstatus '/resources: \[volumesnapshotcontents\/status\]/{n;s/verbs: \[update, patch\]/verbs: [update]/}'
	run mutate snapsa 's/serviceAccountName: t-zipline-controller$/serviceAccountName: t-zipline-node/'
	run mutate snapflag '/- name: csi-snapshotter$/,/- name: liveness-probe$/s/--leader-election-namespace=/--leader-election-namespac=/'
	run mutate snapsock '/- name: csi-snapshotter$/,/- name: liveness-probe$/s/value: \/csi\/csi.sock/value: \/csi\/snap.sock/'
	run mutate snapimage 's/csi-snapshotter:v8.2.0$/csi-snapshotter:v6.3.0/'
	run expect_fail "snapshots: class of another driver" "driver is the CSIDriver's name zipline.csi.io: other.csi.io" snap vscdriver
	run expect_fail "snapshots: deletionPolicy Keep" "deletionPolicy Delete or Retain: Keep" snap vscpolicy
	run expect_fail "snapshots: unknown class field" "known field deletionPolcy" snap vscfield
	run expect_fail "snapshots: a verb more" "grants nothing more: extra snapshot.storage.k8s.io/volumesnapshotcontents:create" snap snapverb
	run expect_fail "snapshots: a verb less" "needs: missing snapshot.storage.k8s.io/volumesnapshotcontents/status:patch" snap snapstatus
	run expect_fail "snapshots: RBAC bound to another ServiceAccount" "binds the controller's ServiceAccount default/t-zipline-node" snap snapsa
	run expect_fail "snapshots: misspelt sidecar flag" "flag --leader-election-namespac=default is one it knows" snap snapflag
	run expect_fail "snapshots: sidecar on another socket" "csi-address is the socket zipline-controller serves: /csi/snap.sock" snap snapsock
	run expect_fail "snapshots: sidecar image not values.yaml's" "csi-snapshotter image .*: registry.k8s.io/sig-storage/csi-snapshotter:v6.3.0" snap snapimage
	run expect_fail "snapshots: objects in a render that should have none" "no csi-snapshotter container" snap good off
	# The dashboard against Grafana's schema (dashboard-schema.mjs): the
	# chart's own passes, each edit of it is rejected naming the field.
	grafana="$("$here/get-tools.sh" --which grafana-schema)"
	dash() { node "$here/dashboard-schema.mjs" "$grafana" "$work/$1.json"; }
	# dash_mutate NAME JS: $work/NAME.json is the chart's dashboard d after JS,
	# which must change it.
	dash_mutate() {
		node -e 'const fs = require("fs"); const d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
			const before = JSON.stringify(d); '"$2"';
			if (JSON.stringify(d) === before) { console.error("FAIL selftest: edit " + process.argv[3] + " changed nothing"); process.exit(1); }
			fs.writeFileSync(process.argv[2], JSON.stringify(d, null, 2))' \
			"$chart/dashboards/zipline.json" "$work/$1.json" "$1"
	}
	cp "$chart/dashboards/zipline.json" "$work/dashgood.json"
	run dash dashgood
	run dash_mutate dashgridpos 'delete d.panels[3].gridPos.h'
	run dash_mutate dashtypenum 'd.panels[4].type = 5'
	run dash_mutate dashtypo 'd.panels[5].type = "timeserie"'
	run dash_mutate dashpanles 'd.panles = d.panels; delete d.panels'
	run dash_mutate dashfield 'd.panels[6].fieldconfig = d.panels[6].fieldConfig; delete d.panels[6].fieldConfig'
	run dash_mutate dashenum 'd.graphTooltip = 7'
	run dash_mutate dashoption 'd.panels[7].options = {legend: {displayMode: "tabel"}}'
	run dash_mutate dashrefid 'delete d.panels[8].targets[0].refId'
	run expect_fail "dashboard: a gridPos without h" "panels\[3\]\.gridPos \(panel .*Property 'h' is missing" dash dashgridpos
	run expect_fail "dashboard: a panel type that is a number" "panels\[4\]\.type \(panel .*Type 'number' is not assignable" dash dashtypenum
	run expect_fail "dashboard: a panel type no Grafana panel has" "panels\[5\]\.type \(panel .*Did you mean '\"timeseries\"'" dash dashtypo
	run expect_fail "dashboard: misspelt panels" "panles: Object literal may only specify known properties" dash dashpanles
	run expect_fail "dashboard: misspelt fieldConfig" "panels\[6\]\.fieldconfig \(panel .*'\"fieldconfig\"' does not exist" dash dashfield
	run expect_fail "dashboard: graphTooltip out of its enum" "graphTooltip: Type '7' is not assignable" dash dashenum
	run expect_fail "dashboard: a timeseries legend displayMode out of its enum" "panels\[7\]\.options\.legend\.displayMode \(panel .*'\"tabel\"'" dash dashoption
	run expect_fail "dashboard: a query without refId" "panels\[8\]\.targets\[0\] \(panel .*'refId' is missing" dash dashrefid
	[ "$rc" -eq 0 ] && echo "chart_test selftest: passed"
	exit "$rc"
fi

echo "== helm lint --strict ($shape)"
"$helm" lint --strict "$chart" "${values[@]}"
echo "== helm template ($shape)"
"$helm" template zipline "$chart" --namespace zipline "${values[@]}" > "$work/rendered.yaml"
echo "== Kubernetes API schema ($shape)"
node "$here/k8s-validate.mjs" "$tools" "$work/rendered.yaml"
echo "== Kubernetes API server rules ($shape)"
node "$here/k8s-api-rules.mjs" "$tools" "$work/rendered.yaml"
echo "== chart contract ($shape)"
node "$here/chart-check.mjs" "$tools" "$work/rendered.yaml" "$shape" ${build:+"$build"}
if [ "$shape" = default ]; then
	echo "== monitoring objects (monitoring.* on)"
	mon=(--set monitoring.podMonitor.enabled=true --set monitoring.prometheusRule.enabled=true
		--set monitoring.dashboard.enabled=true)
	"$helm" lint --strict "$chart" "${mon[@]}"
	"$helm" template zipline "$chart" --namespace zipline "${mon[@]}" > "$work/monitoring.yaml"
	node "$here/monitoring-check.mjs" "$tools" "$work/monitoring.yaml" "$src" "$work/rules.yaml" "$work/dashboard.json"
	echo "== Grafana schema (the dashboard ConfigMap's JSON)"
	node "$here/dashboard-schema.mjs" "$("$here/get-tools.sh" --which grafana-schema)" "$work/dashboard.json"
	echo "== promtool check rules (the PrometheusRule's groups)"
	"$("$here/get-tools.sh" --which promtool)" check rules "$work/rules.yaml"
	if "$helm" template zipline "$chart" "${mon[@]}" --set storage.metricsPort=0 > "$work/out" 2>&1 ||
		! grep -q "need storage.metricsPort" "$work/out"; then
		echo "FAIL default: monitoring without storage.metricsPort was not refused" >&2
		exit 1
	fi
	echo "== snapshot objects (none by default; snapshots.enabled=true)"
	node "$here/snapshot-check.mjs" "$tools" "$work/rendered.yaml" off
	"$helm" lint --strict "$chart" --set snapshots.enabled=true
	"$helm" template zipline "$chart" --namespace zipline --set snapshots.enabled=true > "$work/snapshots.yaml"
	node "$here/snapshot-check.mjs" "$tools" "$work/snapshots.yaml" on "$work/snapshots-core.yaml"
	# The core kinds of that render (the VolumeSnapshotClass is a CRD kind
	# k8s-validate has no schema for; snapshot-check validates it).
	node "$here/k8s-validate.mjs" "$tools" "$work/snapshots-core.yaml"
	node "$here/k8s-api-rules.mjs" "$tools" "$work/snapshots.yaml"
	node "$here/chart-check.mjs" "$tools" "$work/snapshots.yaml" default ${build:+"$build"}
	render_notes "$work/NOTES-snapshots.txt" --set snapshots.enabled=true
	for want in 'Snapshots: VolumeSnapshotClass "zipline" (deletionPolicy Delete)' \
		"logs deploy/zipline-controller -c csi-snapshotter"; do
		if ! grep -qF -- "$want" "$work/NOTES-snapshots.txt"; then
			echo "FAIL default: NOTES with snapshots.enabled lack '$want':" >&2
			cat "$work/NOTES-snapshots.txt" >&2
			exit 1
		fi
	done
fi
echo "== NOTES ($shape)"
render_notes "$work/NOTES.txt" "${values[@]}"
if ! grep -q -- "- name: csi-snapshotter$" "$work/rendered.yaml" && grep -q "csi-snapshotter" "$work/NOTES.txt"; then
	echo "FAIL $shape: NOTES name csi-snapshotter, which this render does not run" >&2
	exit 1
fi
class="$(sed -n 's/^  storageClassName: //p' "$work/rendered.yaml" | tail -1)"
for want in "helm test zipline -n zipline --logs" "\"$class\" (replicas" "delete pod zipline-test-write zipline-test-read"; do
	if ! grep -qF -- "$want" "$work/NOTES.txt"; then
		echo "FAIL $shape: NOTES lack '$want':" >&2
		cat "$work/NOTES.txt" >&2
		exit 1
	fi
done
if grep -q 'type: OnDelete' "$work/rendered.yaml" && ! grep -q 'wait pod --for=condition=Ready' "$work/NOTES.txt"; then
	echo "FAIL $shape: node plugin is OnDelete (helm --wait skips it) and NOTES do not say how to wait for it" >&2
	exit 1
fi
echo "NOTES ($shape): render, name the helm test class \"$class\" and how to wait for the node plugin"
