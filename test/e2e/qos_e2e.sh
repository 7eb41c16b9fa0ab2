#!/usr/bin/env bash
# Per-volume client I/O limits (issue 26 item 4; lib/client/client_qos.c):
# 3 daemons --heal on, a real manager (a zipline-controller, whose CSI
# endpoint also serves ControllerModifyVolume), real etcd.
#  1. `zl volume create --write-iops 2000 --burst-write-iops 1000` shows in
#     `zl volume inspect`; `zl
#     bench` 4 KiB random writes at QD32, --count 40000 (20 s at the limit):
#     the rate bench measures itself (ios / seconds) is 2000 +- 5 %, and its
#     I/Os waited for the limit (throttled > 0); reads of that volume (no
#     read limit) and writes of a volume without limits wait for nothing
#     (throttled 0) and go faster than the limit.
#  2. Changing the limit of a volume open in a running `zl bench` applies
#     without a restart, both ways: --write-iops 200 with --count 3000 (15 s
#     at that limit), raised to 4000 by ControllerModifyVolume once bench
#     runs: it ends within 4 s of the change. Then an unlimited bench lowered
#     to 300 by `zl volume set`: its per-second progress drops to 300 +- 5 %
#     (mean of the full seconds after the change).
#  3. Bad flags are refused with a message naming them.
# Usage: qos_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test qos_e2e
LIMIT=2000
COUNT=40000
# Half a second of burst: the test machine (2 cores shared by several
# builds, load average ~10) stalls the client and the daemon for longer
# than the default (a tenth of a second), and a token bucket does not make
# up for more than its burst (with the default it measured 1870 IOPS). The
# burst's own overshoot stays below 2.5 % over 40000 I/Os.
BURST=1000
hl_begin e2e-qos "$1" || fail "cluster or manager did not start"

# bench VOL RW COUNT [flags]: zl bench --json; prints its JSON line.
bench() {
	local vol=$1 rw=$2 count=$3
	shift 3
	"$ZL" bench "$vol" --rw "$rw" --bs 4k --qd 32 --count "$count" --seconds 300 --json "$@" ||
		fail "zl bench $vol $rw --count $count failed"
}
# jget JSON KEY: a number of bench's JSON.
jget() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
# within X LO HI: LO <= X <= HI (decimals).
within() { /usr/bin/python3 -c 'import sys; x,lo,hi=map(float,sys.argv[1:]); sys.exit(0 if lo<=x<=hi else 1)' "$1" "$2" "$3"; }

# 1. the limit holds
# One replica: the limit is the client's, and the test machine (2 cores,
# shared) must sustain well above it without a limit.
"$ZL" volume create qvol --size 64M --replicas 1 --chunk-size 1M --write-iops $LIMIT --burst-write-iops $BURST >"$CL_DIR/create.log" 2>&1 ||
	fail "zl volume create --write-iops: $(cat "$CL_DIR/create.log")"
"$ZL" volume create uvol --size 64M --replicas 1 --chunk-size 1M >/dev/null 2>&1 || fail "zl volume create uvol"
ins=$("$ZL" volume inspect qvol) || fail "zl volume inspect qvol"
grep -q "^limits  *write_iops $LIMIT" <<<"$ins" || fail "zl volume inspect does not show the limit: $(grep -E '^(limits|io timeout)' <<<"$ins")"
grep -q "^limits  *none" < <("$ZL" volume inspect uvol) || fail "zl volume inspect uvol shows limits"

out=$(bench qvol randwrite $COUNT)
ios=$(jget "$out" ios)
[ "$ios" = $COUNT ] || fail "bench did $ios writes, not $COUNT: $out"
rate=$(jget "$out" iops)
echo "FIGURE: qos: write-iops $LIMIT, QD32, $COUNT x 4 KiB writes: $rate IOPS in $(jget "$out" seconds) s (bench's own), throttled $(jget "$out" throttled), p99 $(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["lat_us"]["p99"])' "$out") us"
within "$rate" $((LIMIT * 95 / 100)) $((LIMIT * 105 / 100)) ||
	check_fail "a volume limited to $LIMIT write IOPS did $rate IOPS (outside +-5 %)"
[ "$(jget "$out" throttled)" -gt 0 ] || check_fail "no I/O waited for the limit: $out"

out=$(bench qvol randread 10000)
echo "FIGURE: qos: reads of the write-limited volume: $(jget "$out" iops) IOPS, throttled $(jget "$out" throttled)"
[ "$(jget "$out" throttled)" = 0 ] || check_fail "reads of a volume with only a write limit waited: $out"
within "$(jget "$out" iops)" $((LIMIT * 11 / 10)) 1e9 ||
	check_fail "reads of a volume with only a write limit ran at $(jget "$out" iops) IOPS, not above the write limit"
out=$(bench uvol randwrite $COUNT)
echo "FIGURE: qos: unlimited volume, same load: $(jget "$out" iops) IOPS, throttled $(jget "$out" throttled)"
[ "$(jget "$out" throttled)" = 0 ] || check_fail "writes of a volume without limits waited: $out"
within "$(jget "$out" iops)" $((LIMIT * 11 / 10)) 1e9 ||
	check_fail "the volume without limits ran at $(jget "$out" iops) IOPS, not above the other's limit"

# 2a. raised by ControllerModifyVolume under a running bench
vid=$(hl_vol_id qvol)
[ -n "$vid" ] || fail "no volume id for qvol"
"$ZL" volume set qvol --write-iops 200 --burst-write-iops 0 >"$CL_DIR/set200.log" 2>&1 || fail "zl volume set --write-iops 200: $(cat "$CL_DIR/set200.log")"
grep -q "write_iops $LIMIT -> 200" "$CL_DIR/set200.log" || fail "zl volume set did not say what changed: $(cat "$CL_DIR/set200.log")"
"$ZL" --log-level info bench qvol --rw randwrite --bs 4k --qd 32 --count 3000 --seconds 300 --progress \
	>"$CL_DIR/b2.out" 2>"$CL_DIR/b2.err" &
bpid=$!
HL_PIDS="$HL_PIDS $bpid"
# Running: its first progress line (a second of I/O at 200 IOPS).
for _ in $(seq 1 100); do
	grep -q 'IOPS' "$CL_DIR/b2.err" && break
	sleep 0.1
done
grep -q 'IOPS' "$CL_DIR/b2.err" || fail "the bench at 200 IOPS printed no progress: $(cat "$CL_DIR/b2.err")"
# iops_col: the IOPS figure of each progress line ("[  1s]   200 IOPS ...").
iops_col() { awk '{for (i = 1; i < NF; i++) if ($(i+1) == "IOPS") print $i}' "$1"; }
first=$(iops_col "$CL_DIR/b2.err" | head -1)
t0=$(hl_now_ms)
/usr/bin/python3 - "$SRC" "$CL_DIR/manager/csi.sock" "$vid" <<'PY' || fail "ControllerModifyVolume writeIops=4000 failed"
import sys
sys.path.insert(0, sys.argv[1] + "/test/lib")
from csi_client import CsiClient
c = CsiClient("unix://" + sys.argv[2])
c.wait_ready(10)
c.controller.ControllerModifyVolume(c.pb.ControllerModifyVolumeRequest(
    volume_id=sys.argv[3], mutable_parameters={"writeIops": "4000"}), timeout=30)
PY
wait "$bpid" || fail "the bench whose limit was raised failed: $(tail -3 "$CL_DIR/b2.err")"
dt=$(($(hl_now_ms) - t0))
b2ios=$(awk '$1 == "ios" { print $2 }' "$CL_DIR/b2.out")
echo "FIGURE: qos: write-iops 200 -> 4000 (ControllerModifyVolume) under a running bench (first second: $first IOPS): it ended $dt ms after the change; $(head -1 "$CL_DIR/b2.out") for 3000 writes (15 s at 200)"
[ "$b2ios" = 3000 ] || check_fail "the bench did $b2ios writes, not 3000: $(cat "$CL_DIR/b2.out")"
within "$first" 150 250 || check_fail "the first second at write-iops 200 ran at $first IOPS"
[ "$dt" -le 4000 ] || check_fail "the raised limit did not apply without a restart: the bench ended $dt ms after ModifyVolume"
grep -q "volume limits: vol=$vid .*write_iops=4000" "$CL_DIR/b2.err" "$CL_DIR/b2.out" ||
	check_fail "the client did not log the new limits: $(grep 'volume limits' "$CL_DIR/b2.err")"

# 2b. lowered by zl volume set under a running bench
"$ZL" volume set qvol --write-iops 0 >/dev/null 2>&1 || fail "zl volume set --write-iops 0"
"$ZL" bench qvol --rw randwrite --bs 4k --qd 32 --seconds 8 --progress >"$CL_DIR/b3.out" 2>"$CL_DIR/b3.err" &
bpid=$!
HL_PIDS="$HL_PIDS $bpid"
for _ in $(seq 1 100); do
	[ "$(grep -c 'IOPS' "$CL_DIR/b3.err")" -ge 2 ] && break
	sleep 0.1
done
n_before=$(grep -c 'IOPS' "$CL_DIR/b3.err")
"$ZL" volume set qvol --write-iops 300 >"$CL_DIR/set300.log" 2>&1 || fail "zl volume set --write-iops 300: $(cat "$CL_DIR/set300.log")"
wait "$bpid" || fail "the bench whose limit was lowered failed: $(tail -3 "$CL_DIR/b3.err")"
# Seconds of progress: the one the change fell in, then full ones.
mapfile -t per < <(iops_col "$CL_DIR/b3.err")
echo "FIGURE: qos: write-iops unlimited -> 300 (zl volume set) under a running bench: per second ${per[*]} (changed after second $n_before)"
[ ${#per[@]} -ge $((n_before + 3)) ] || fail "too few progress lines after the change: ${per[*]}"
within "${per[0]}" 330 1e9 || check_fail "before the change the bench ran at ${per[0]} IOPS, not above 300"
# The full seconds after the one of the change, but the last (cut short):
# one second alone follows the storage's latency on a loaded machine, their
# mean the limit.
after=("${per[@]:$((n_before + 1)):$((${#per[@]} - n_before - 2))}")
mean=$(/usr/bin/python3 -c 'import sys; v=list(map(float,sys.argv[1:])); print("%.1f" % (sum(v)/len(v)))' "${after[@]}")
echo "FIGURE: qos: after lowering to 300: ${#after[@]} full seconds at $mean IOPS on average"
within "$mean" 285 315 || check_fail "after lowering to 300 the bench ran at $mean IOPS on average (seconds: ${after[*]})"

# 3. bad input
for bad in "--write-iops 2K" "--read-bps lots" "--burst-iops -1" "--io-timeout 604801" "--iops"; do
	# shellcheck disable=SC2086
	if "$ZL" volume set qvol $bad >"$CL_DIR/bad.log" 2>&1; then
		check_fail "zl volume set qvol $bad was accepted"
	fi
	flag=${bad%% *}
	grep -q -- "$flag" "$CL_DIR/bad.log" || check_fail "zl volume set qvol $bad: the message does not name $flag: $(cat "$CL_DIR/bad.log")"
done
"$ZL" volume set qvol --io-timeout 45 --burst-write-iops 64 >"$CL_DIR/set45.log" 2>&1 || fail "zl volume set --io-timeout 45: $(cat "$CL_DIR/set45.log")"
ins=$("$ZL" volume inspect qvol)
grep -q '^io timeout  *45 s' <<<"$ins" || check_fail "zl volume inspect does not show io timeout 45 s: $ins"
grep -q '^limits  *write_iops 300, write_iops_burst 64' <<<"$ins" || check_fail "zl volume inspect does not show the limits: $(grep '^limits' <<<"$ins")"
hl_end
