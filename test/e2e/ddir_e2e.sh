#!/usr/bin/env bash
# A data directory that disappears, is replaced or turns read-only under a
# running daemon stops it acknowledging at once (issue 26 item 2;
# storage/storage_ddir.c).
# 3 daemons --heal on, a real manager, a 3-replica volume and a verifying
# writer (e2e_load: every submission logged before it goes out, every
# acknowledgement logged after it came back).
#  1. The data dir of the primary of slice 0 is removed (rm -rf) under the
#     load: its log says it stopped acknowledging within FENCE_S, its
#     /readyz answers 503 within 10 s, its status
#     record carries disk_error, it applies no write any more (its
#     chunk_writes stop), the manager moves its members out (M8) and the
#     writer goes on acknowledging. It is restarted on a fresh data dir and
#     refilled (a new incarnation).
#  2. Another daemon's data dir is replaced (mv dir dir.old; mkdir dir):
#     the same.
#  3. The third daemon, moved onto an ext4 image of its own (loop mount,
#     errors=remount-ro) and refilled there, sees its filesystem fail
#     (/sys/fs/ext4/<dev>/trigger_fs_error: read-only from then on, as after
#     a disk error; statvfs does not say so, writes get EROFS): the same.
#     Needs root, loop devices and mkfs.ext4 (as csi_e2e does).
# Oracles: every acknowledged write reads back (e2e_load check) with the
# replaced daemon still fenced, then after it restarted and was refilled;
# the heal oracles (only the manager changed rows, zl volume verify, the
# three replicas identical and allowed by the log).
# Usage: ddir_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test ddir_e2e

FENCE_S=2   # rm/mv -> "no longer acknowledging" in the log
OUT_S=10    # -> every row lists the node out
SIZE_B=$((64 << 20))
CHUNK_B=$((1 << 20))
# Case 3 mounts a filesystem image: root, loop devices and mkfs.ext4, like
# csi_e2e. Without them this is a failure, not a skip.
if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null || [ ! -e /dev/loop-control ]; then
	echo "ddir_e2e: FAILED: cannot run: needs root, loop devices and mkfs.ext4 (a read-only filesystem)" >&2
	exit 1
fi
# The daemons serve /readyz (issue 26: a daemon whose data disk fails turns
# not-ready within 10 s).
export HL_STORAGE_FLAGS="${HL_STORAGE_FLAGS:-} --metrics 127.0.0.1:0"
hl_begin e2e-ddir "$1" || fail "cluster or manager did not start"
RO_MNT=""
RO_DEV=""
# ro_cleanup: the daemon on the image stopped, the image unmounted (the
# loop device goes with it).
ro_cleanup() {
	[ -n "$RO_MNT" ] && mountpoint -q "$RO_MNT" || return 0
	cl_stop "storage-$i3" KILL
	umount "$RO_MNT" || umount -l "$RO_MNT"
}
trap 'ro_cleanup; hl_cleanup' EXIT
"$ZL" volume create dvol --size 64M --replicas 3 --chunk-size 1M || fail "volume create"
vid=$(hl_vol_id dvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect dvol'"
LOG=$CL_DIR/load.log
STOP=$CL_DIR/load.stop

# start_load / stop_load: the writer (a new run continues the log).
start_load() {
	rm -f "$STOP"
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume dvol --log "$LOG" --qd 16 \
		--seed "$1" --min-len 4K --max-len 256K --seconds 600 --stop-file "$STOP" \
		>>"$CL_DIR/load.out" 2>>"$CL_DIR/load.err" &
	load=$!
	HL_PIDS="$HL_PIDS $load"
}
stop_load() {
	touch "$STOP"
	wait "$load" || check_fail "the writer exited with an error: $(grep -m3 -E 'failed|FAIL' "$CL_DIR/load.err" | tr '\n' ' ')"
}

acks() {
	local n
	n=$(grep -c '^A ' "$LOG" 2>/dev/null)
	echo "${n:-0}"
}
# wait_acks N SECS: until N more writes than now were acknowledged.
wait_acks() {
	local want=$(($(acks) + $1))
	for _ in $(seq 1 $(($2 * 10))); do
		[ "$(acks)" -ge "$want" ] && return 0
		kill -0 "$load" 2>/dev/null || { cat "$CL_DIR/load.err" >&2; fail "the writer died"; }
		sleep 0.1
	done
	fail "the writer got fewer than $1 writes acknowledged in $2 s (now $(acks)): $(tail -3 "$CL_DIR/load.err")"
}
status_of() { hl_etcd get "/zipline/status/$1"; }
# writes_of NODE: chunk_writes of NODE's status record.
writes_of() { status_of "$1" | sed -n 's/.*"chunk_writes":\([0-9]*\).*/\1/p'; }
# rows_with NODE STATE: rows listing NODE in STATE.
rows_with() { hl_etcd rows "$vid" | grep -c " $1:$2" || true; }

# fence_case I HOW: makes storage-I lose its data dir (HOW: rm or mv) under
# the load and checks what the daemon, its status record, the manager and
# the writer do.
fence_case() {
	local i=$1 how=$2 node=node-$1 d="$CL_DIR/storage-$1" t0 t_fence="" t_out="" w1 w2 line off rec=""
	local port code t_ready
	wait_acks 200 60
	off=$(stat -c %s "$d/log")
	t0=$(hl_now_ms)
	case $how in
	rm) rm -rf "$d/data" ;;
	mv) mv "$d/data" "$d/data.old" && mkdir "$d/data" ;;
	ro) echo 1 >"/sys/fs/ext4/$RO_DEV/trigger_fs_error" ;;
	esac
	for _ in $(seq 1 $((FENCE_S * 20))); do
		line=$(tail -c +$((off + 1)) "$d/log" | grep -m1 'no longer acknowledging writes' || true)
		[ -n "$line" ] && { t_fence=$(hl_now_ms); break; }
		sleep 0.05
	done
	[ -n "$t_fence" ] || fail "$how: $node did not log 'no longer acknowledging writes' within $FENCE_S s"
	echo "FIGURE: ddir: $how of $node's data dir -> fenced within $((t_fence - t0)) ms: $line" | cut -c1-400
	echo "$line" | grep -q "$d/data" || check_fail "$how: the fencing line does not name the data dir: $line"
	port=$(cl_metrics_port "$d/log")
	[ -n "$port" ] || fail "$how: $node logged no metrics port"
	code=
	for _ in $(seq 1 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/readyz")
		[ "$code" = 503 ] && break
		sleep 0.1
	done
	t_ready=$(hl_now_ms)
	[ "$code" = 503 ] && [ $((t_ready - t0)) -le 10000 ] ||
		check_fail "$how: $node's /readyz answered $code, not 503, within 10 s of the $how"
	echo "FIGURE: ddir: $how -> $node's /readyz 503 after $((t_ready - t0)) ms: $(curl -s -m 2 "http://127.0.0.1:$port/readyz" | head -c 200)"
	for _ in $(seq 1 50); do
		rec=$(status_of "$node")
		grep -q '"disk_error":"' <<<"$rec" && break
		sleep 0.2
	done
	grep -q '"disk_error":"' <<<"$rec" ||
		fail "$how: $node's status record carries no disk_error 10 s later: $rec"
	# The record that says so carries the store's count at the fence.
	w1=$(sed -n 's/.*"chunk_writes":\([0-9]*\).*/\1/p' <<<"$rec")
	"$ZL" status 2>&1 | grep -q "disk failed  node=$node" ||
		check_fail "$how: zl status does not show $node's failed disk"
	for _ in $(seq 1 $((OUT_S * 10))); do
		if [ "$(rows_with "$node" in_sync)" = 0 ]; then t_out=$(hl_now_ms); break; fi
		sleep 0.1
	done
	[ -n "$t_out" ] || fail "$how: $OUT_S s after, rows still list $node in sync: $(hl_etcd rows "$vid" | grep -m3 "$node:in_sync")"
	echo "FIGURE: ddir: every row lists $node out $((t_out - t0)) ms after the $how"
	# It applies nothing any more, while the writer goes on without it.
	wait_acks 300 60
	sleep 2.5 # deliberate: more than one status period (2 s) for a change to show
	w2=$(writes_of "$node")
	[ -n "$w1" ] && [ "$w1" = "$w2" ] ||
		check_fail "$how: $node applied writes after it was fenced (chunk_writes $w1 -> $w2)"
	[ "$(rows_with "$node" in_sync)" = 0 ] || check_fail "$how: $node is in sync again while fenced"
}

# restart_fresh I: storage-I restarted on an empty data dir, refilled.
restart_fresh() {
	local i=$1 t0
	cl_stop "storage-$i"
	rm -rf "$CL_DIR/storage-$i/data" "$CL_DIR/storage-$i/data.old"
	cl_start_storage "$i"
	t0=$(hl_now_ms)
	cl_wait_in_sync "$vid" --all 3 90 >/dev/null || fail "storage-$i not refilled within 90 s: $(hl_etcd rows "$vid" | head -5)"
	echo "FIGURE: ddir: storage-$i refilled (3/3 in sync) $(($(hl_now_ms) - t0)) ms after its restart"
	status_of "node-$i" | grep -q '"disk_error"' && check_fail "storage-$i restarted still says disk_error"
}

# check_acked NAME: with the writer stopped, a new client reads every
# acknowledged write back; the writer goes on after.
check_acked() {
	stop_load
	"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume dvol --log "$LOG" \
		>"$CL_DIR/check-$1.out" 2>"$CL_DIR/check-$1.err" ||
		check_fail "$1: a new client does not read back what the log allows: $(grep '^CHECK' "$CL_DIR/check-$1.out") $(grep -m 3 -E 'BAD|failed' "$CL_DIR/check-$1.err" | tr '\n' ' ')"
	cat "$CL_DIR/check-$1.out"
	start_load "$2"
}

start_load 26
v1=$(hl_etcd primary "$vid" 0) || fail "no primary for slice 0"
fence_case "${v1#node-}" rm
check_acked rm 27
restart_fresh "${v1#node-}"

v2=$(hl_etcd primary "$vid" 1) || fail "no primary for slice 1"
[ "$v2" = "$v1" ] && v2=$(hl_etcd rows "$vid" | awk -v n="$v1" 'NR == 1 {for (i = 4; i <= NF; i++) {split($i, a, ":"); if (a[1] != n) {print a[1]; exit}}}')
fence_case "${v2#node-}" mv
check_acked mv 28
restart_fresh "${v2#node-}"

# 3. The third daemon on an ext4 image of its own (loop mount, errors=
# remount-ro), refilled there; the filesystem then fails (ext4's
# trigger_fs_error: read-only from then on, as after a disk error).
v3=$(hl_etcd rows "$vid" | awk -v a="$v1" -v b="$v2" 'NR == 1 {for (i = 4; i <= NF; i++) {split($i, x, ":"); if (x[1] != a && x[1] != b) {print x[1]; exit}}}')
[ -n "$v3" ] || fail "no third node in row 0"
i3=${v3#node-}
RO_MNT=$CL_DIR/storage-$i3/data
cl_stop "storage-$i3"
rm -rf "$RO_MNT" && mkdir "$RO_MNT" || fail "cannot empty $RO_MNT"
truncate -s 512M "$CL_DIR/ro.img" && mkfs.ext4 -q -F "$CL_DIR/ro.img" ||
	fail "cannot make an ext4 image (mkfs.ext4)"
mount -o loop,errors=remount-ro "$CL_DIR/ro.img" "$RO_MNT" || fail "cannot loop-mount $CL_DIR/ro.img"
RO_DEV=$(basename "$(findmnt -n -o SOURCE "$RO_MNT")")
[ -w "/sys/fs/ext4/$RO_DEV/trigger_fs_error" ] || fail "no /sys/fs/ext4/$RO_DEV/trigger_fs_error"
cl_start_storage "$i3"
cl_wait_in_sync "$vid" --all 3 90 >/dev/null || fail "$v3 not refilled on its ext4 image within 90 s"
fence_case "$i3" ro
check_acked ro 29
wait_acks 300 60
stop_load
echo "FIGURE: ddir: $(acks) writes acknowledged in all, $(grep -c '^F ' "$LOG") failed"
# A fenced daemon stops at once when told to (nothing of its journal can be
# checkpointed on a read-only filesystem, nor needs to be).
t0=$(hl_now_ms)
cl_stop "storage-$i3"
ms=$(($(hl_now_ms) - t0))
echo "FIGURE: ddir: fenced $v3 stopped (SIGTERM) in $ms ms"
[ "$ms" -lt 5000 ] || check_fail "the fenced $v3 took $ms ms to stop after SIGTERM"
ro_cleanup
restart_fresh "$i3"
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume dvol --log "$LOG" --exact \
	>"$CL_DIR/check-end.out" 2>"$CL_DIR/check-end.err" ||
	check_fail "end: a new client does not read back exactly the acknowledged writes: $(grep '^CHECK' "$CL_DIR/check-end.out")"
cl_wait_journal_clean 60 >/dev/null || check_fail "journals not clean 60 s after the load"
hl_end_oracles dvol "$vid" $SIZE_B $CHUNK_B "$LOG" --allowed "$CL_DIR/load.err" "$CL_DIR"/check-*.err
hl_end
