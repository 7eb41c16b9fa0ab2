#!/usr/bin/env bash
# E2E: the membership manager of zipline-controller (--manager=on, rules
# M1-M7 of docs/REPLICATION.md) against a real etcd and real controller
# processes; storage nodes are node records on leases the driver holds
# (manager_test.py), so no storage daemon runs. The oracle is etcd.
# Usage: manager_e2e.sh BUILD_DIR
# Environment: ZL_E2E_RUNS=N runs the whole test N times in a row, each on a
# fresh etcd, and stops at the first failure; KEEP=1 keeps the state dir.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${ZL_E2E_RUNS:-1}" != 1 ]; then
	for i in $(seq 1 "$ZL_E2E_RUNS"); do
		echo "manager_e2e: run $i of $ZL_E2E_RUNS"
		ZL_E2E_RUNS=1 "$0" "$BUILD" || exit 1
	done
	exit 0
fi

export CL_BIN=$BUILD/bin
CL_DIR=$(mktemp -d "$BUILD/e2e-manager.XXXXXX")
export CL_DIR
source "$SRC/test/lib/cluster.sh"
trap 'for c in ctrl-off ctrl-a ctrl-b; do cl_stop "$c" KILL; done; cl_stop etcd; cl_ports_release; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
fail() {
	echo "manager_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/ctrl-*/log; do
		[ -f "$f" ] && { echo "--- $f" >&2; grep -v ' debug ' "$f" | tail -40 >&2; }
	done
	exit 1
}
for b in zipline-controller zl; do
	[ -x "$CL_BIN/$b" ] || fail "no $CL_BIN/$b: build it first"
done
command -v etcd >/dev/null || fail "etcd is not installed (scripts/install-deps.sh)"
[ -x /usr/bin/python3 ] || fail "/usr/bin/python3 is missing"
cl_start_etcd || fail "etcd did not start"
ZL_BUILD_DIR=$BUILD /usr/bin/python3 "$SRC/test/e2e/manager_test.py" || fail "manager_test.py"
for f in "$CL_DIR"/ctrl-*/log; do
	grep -h -m 5 'manager: vol=' "$f" | sed 's/^/manager_e2e: decision: /' || true
done
echo "manager_e2e: PASS"
