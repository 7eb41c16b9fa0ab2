#!/usr/bin/env bash
# E2E for the CSI driver: real etcd, three zipline-storage daemons (healing
# on), zipline-controller (the cluster manager on: both defaults) and two
# zipline-node instances (started by
# csi_e2e_test.py, which plays the kubelet and the sidecars). Needs root,
# /dev/fuse and loop devices: the volumes are really mounted.
# Usage: csi_e2e.sh BUILD_DIR [TEST_SCRIPT]
#   TEST_SCRIPT: a Python script in test/e2e (default csi_e2e_test.py;
#   csi_fence_test.py: a volume moved off a partitioned node, issue 11).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=${2:-csi_e2e_test.py}
[ -f "$SRC/test/e2e/$SCRIPT" ] || { echo "csi_e2e: no test script test/e2e/$SCRIPT" >&2; exit 1; }
export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d "$BUILD/e2e-csi.XXXXXX")
export CSI_WORK=$CL_DIR/csi
source "$SRC/test/lib/cluster.sh"

if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ] || ! command -v losetup >/dev/null; then
	echo "csi_e2e: FAILED: cannot run: needs root, /dev/fuse and losetup (real mounts)." >&2
	echo "csi_e2e: run make test as root on a machine with FUSE and loop devices; this is a failure, not a skip" >&2
	exit 1
fi
for b in zipline-storage zipline-controller zipline-node zl; do
	[ -x "$CL_BIN/$b" ] || { echo "csi_e2e: $CL_BIN/$b is missing: build everything first" >&2; exit 1; }
done

# Undo whatever a failed run left: mounts under the work dir (deepest
# first), loop devices on our FUSE files, then the processes we started
# (node services and their attach processes, by recorded PID).
csi_cleanup() {
	local m pid f
	for f in "$CSI_WORK"/node*/pid; do
		[ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
	done
	awk -v w="$CSI_WORK" '$5 ~ "^"w { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		case "$m" in */fuse) ;; *) umount -l "$m" 2>/dev/null || true ;; esac
	done
	losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v w="$CSI_WORK" 'index($2, w) == 1 { print $1 }' |
		while read -r m; do losetup -d "$m" 2>/dev/null || true; done
	local pids=""
	for f in "$CSI_WORK"/node*/state/*/state.json; do
		[ -f "$f" ] || continue
		pid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$f")
		[ -n "$pid" ] && [ "$pid" -gt 0 ] && grep -qa attach "/proc/$pid/cmdline" 2>/dev/null &&
			kill -TERM "$pid" 2>/dev/null && pids="$pids $pid"
	done
	# The attach processes TERMed above exit (10 s at most) before the unmounts.
	for pid in $pids; do
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	done
	awk -v w="$CSI_WORK" '$5 ~ "^"w { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	cl_stop ctrl
	cl_stop_all
	# The cgroups csi_restart_test.py made for its containers, once empty
	# (a failed run leaves its attach process in one until the kills above).
	for m in /sys/fs/cgroup/zl-e2e-* /sys/fs/cgroup/unified/zl-e2e-* /sys/fs/cgroup/pids/zl-e2e-*; do
		[ -d "$m" ] && rmdir "$m" 2>/dev/null || true
	done
}
trap 'rc=$?; csi_cleanup; if [ $rc != 0 ] || [ "${KEEP:-0}" = 1 ]; then echo "csi_e2e: logs kept in $CL_DIR" >&2; else rm -rf "$CL_DIR"; fi' EXIT
fail() {
	echo "csi_e2e: FAIL: $*" >&2
	cl_dump_logs 30 "$CL_DIR"/ctrl/log "$CSI_WORK"/node*/node.log "$CSI_WORK"/node*/state/*/attach.log
	exit 1
}

cl_start_etcd
export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
for i in 1 2 3; do cl_start_storage "$i"; done
cl_wait_nodes 3 || fail "storage daemons did not register"

mkdir -p "$CL_DIR/ctrl" "$CSI_WORK"
export CTRL_EP="unix://$CL_DIR/ctrl/controller.sock"
# --gc-interval 2: the background flatten looks for clones every 2 s
# (csi_snap_test.py waits for it), not every minute; at 8 MiB/s it still
# runs when the clone it started on unattached is staged (and is fenced).
"$CL_BIN/zipline-controller" --endpoint "$CTRL_EP" --etcd "$CL_ETCD" --log-level info \
	--gc-interval 2 --flatten-rate 8 >>"$CL_DIR/ctrl/log" 2>&1 &
echo $! >"$CL_DIR/ctrl/pid"

export ZL_BIN=$CL_BIN ZL_SOURCE_DIR=$SRC ZL_BUILD_DIR=$BUILD
/usr/bin/python3 "$SRC/test/e2e/$SCRIPT" || fail "$SCRIPT"

# Started without --manager, the controller ran the cluster manager (the
# default): the storage daemons' writes and restarts were healed by it.
grep -q "manager on:" "$CL_DIR/ctrl/log" || fail "zipline-controller without --manager did not run the manager (default on)"

# Nothing may be left mounted or attached once every volume is unstaged.
if grep -q "$CSI_WORK" /proc/self/mountinfo; then fail "mounts left: $(grep "$CSI_WORK" /proc/self/mountinfo)"; fi
if losetup -l -n -O BACK-FILE | grep -q "$CSI_WORK"; then fail "loop devices left"; fi
echo "csi_e2e: PASS"
