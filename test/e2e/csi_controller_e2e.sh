#!/usr/bin/env bash
# E2E: zipline-controller against a real etcd and three zipline-storage
# daemons, driven over its UNIX socket by an independent CSI client
# (Debian's python3-grpcio, stubs generated at test time): every negative
# case of the controller RPCs with its code, idempotency, concurrency,
# paging, DeleteVolume removing every chunk file, publish fencing, expand,
# and leader election between two controllers.
# Usage: csi_controller_e2e.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d "$BUILD/e2e-csictl.XXXXXX")
source "$SRC/test/lib/cluster.sh"
trap 'cl_stop ctrl-c; cl_stop ctrl-b; cl_stop ctrl-a; cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
fail() {
	echo "csi_controller_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/ctrl-*/log "$CL_DIR"/storage-*/log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
	done
	exit 1
}
[ -x "$CL_BIN/zipline-controller" ] || fail "no $CL_BIN/zipline-controller: build it first"

cl_start_etcd
export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
for i in 1 2 3; do cl_start_storage "$i"; done
cl_wait_nodes 3 || fail "storage daemons did not register"

# ctrl_start NAME: a controller on $CL_DIR/NAME/controller.sock, leader id NAME.
ctrl_start() {
	local d="$CL_DIR/$1"
	mkdir -p "$d"
	"$CL_BIN/zipline-controller" --endpoint "unix://$d/controller.sock" --etcd "$CL_ETCD" \
		--leader-id "$1" --log-level info >>"$d/log" 2>&1 &
	echo $! >"$d/pid"
}
ctrl_start ctrl-a

# The test starts ctrl-b (and a third controller) itself and records their
# PIDs under $CL_DIR so that the trap above stops them whatever happens.
export ZL_SOURCE_DIR=$SRC ZL_BUILD_DIR=$BUILD
/usr/bin/python3 "$SRC/test/e2e/csi_controller_test.py" || fail "csi_controller_test.py"

echo "csi_controller_e2e: PASS"
