#!/usr/bin/env bash
# E2E: two zipline-controller replicas against a real etcd and three
# zipline-storage daemons, driven over their UNIX sockets by an independent
# CSI client (Debian's python3-grpcio, stubs generated at test time) that
# sends each call to a replica chosen at random: every negative case of the
# controller RPCs with its code, idempotency, concurrency across replicas,
# paging, DeleteVolume removing every chunk file, publish fencing, NOT_FOUND
# for unregistered nodes (two zipline-node services register node-a and
# node-b), expand, and the election of the garbage-collecting leader.
# Usage: csi_controller_e2e.sh BUILD_DIR
# Environment: ZL_E2E_RUNS=N runs the whole test N times in a row, each on a
# fresh cluster, and stops at the first failure; ZL_TEST_SEED fixes the
# routing seed (otherwise each run draws one and prints it); KEEP=1 keeps
# the state directory.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${ZL_E2E_RUNS:-1}
case "$RUNS" in '' | *[!0-9]* | 0)
	echo "csi_controller_e2e: ZL_E2E_RUNS='$RUNS' must be a positive number" >&2
	exit 2 ;;
esac
if [ "$RUNS" -gt 1 ]; then
	start=$(date +%s)
	for i in $(seq 1 "$RUNS"); do
		echo "csi_controller_e2e: run $i of $RUNS"
		if ! ZL_E2E_RUNS=1 "$0" "$BUILD"; then
			echo "csi_controller_e2e: FAIL in run $i of $RUNS (the seed is printed above)" >&2
			exit 1
		fi
	done
	echo "csi_controller_e2e: PASS $RUNS runs in a row in $(($(date +%s) - start)) s"
	exit 0
fi

export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d "$BUILD/e2e-csictl.XXXXXX")
source "$SRC/test/lib/cluster.sh"
trap 'cl_stop ctrl-c; cl_stop ctrl-b; cl_stop ctrl-a; cl_stop znode-a; cl_stop znode-b; cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
fail() {
	echo "csi_controller_e2e: FAIL: $*" >&2
	cl_dump_logs 30 "$CL_DIR"/ctrl-*/log "$CL_DIR"/znode-*/log "$CL_DIR"/storage-*/log
	exit 1
}
for b in zipline-controller zipline-node zipline-storage zl; do
	[ -x "$CL_BIN/$b" ] || fail "no $CL_BIN/$b: build it first"
done

# Two zipline-node services: only their registration (csinodes/<id>) is used
# here; nothing is mounted, so this needs neither root nor /dev/fuse. node-b
# starts before etcd answers, so it registers through its retry thread.
znode_start() {
	local d="$CL_DIR/znode-$1"
	mkdir -p "$d"
	"$CL_BIN/zipline-node" --endpoint "unix://$d/node.sock" --node-id "node-$1" \
		--etcd "$2" --state-dir "$d/state" --kubelet-dir "$d" \
		--log-level info >>"$d/log" 2>&1 &
	echo $! >"$d/pid"
}
port=$(cl_free_port)
znode_start b "http://127.0.0.1:$port"
for _ in $(seq 1 100); do
	grep -q "cannot register node=node-b" "$CL_DIR/znode-b/log" 2>/dev/null && break
	sleep 0.1
done
grep -q "cannot register node=node-b" "$CL_DIR/znode-b/log" ||
	fail "zipline-node did not report that etcd is unreachable"
cl_start_etcd "$port"
export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
for i in 1 2 3; do cl_start_storage "$i"; done
cl_wait_nodes 3 || fail "storage daemons did not register"
znode_start a "$CL_ETCD"

# The test starts the controllers ctrl-a, ctrl-b (and ctrl-c) itself and
# records their PIDs under $CL_DIR so that the trap above stops them
# whatever happens.
export ZL_SOURCE_DIR=$SRC ZL_BUILD_DIR=$BUILD
/usr/bin/python3 "$SRC/test/e2e/csi_controller_test.py" || fail "csi_controller_test.py"

echo "csi_controller_e2e: PASS"
