#!/usr/bin/env bash
# Storage-side fair share of the disk per volume (issue 26 item 4;
# storage/storage_fair.c): one zipline-storage (its data dir on the build's
# disk, O_DIRECT) with --metrics, two volumes of 1 replica on it.
#  1. The victim: `zl bench` 4 KiB random reads at QD1, its p99 alone and
#     while the other volume (the hog) is hammered by an unlimited writer of
#     256 KiB blocks at QD32 (disk bound: few large requests, each 64 times
#     the victim's), in alternating phases of one run (the hog stopped and
#     resumed). Both p99s and their ratio are printed; with
#     FAIR_P99_RATIO=R (make bench-fair: 2, issue 26's target) the
#     contended p99 must be within R x alone.
#  2. The daemon's metrics: the hog's operations waited for its share
#     (zipline_volume_fair_queued_total > 0, and the daemon's
#     zipline_storage_fair_queued_total at least that), the victim's never.
# FAIR_E2E_STORAGE_FLAGS adds daemon flags: `--fair-share off` shows the
# test failing without the mechanism.
# Usage: fair_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/metrics.sh" fair_e2e
cl_require "$T" "$1" zipline-storage zipline-controller zl
export CL_STORAGE_FLAGS="--log-level info --metrics 127.0.0.1:0 ${FAIR_E2E_STORAGE_FLAGS:-}"
cl_e2e_begin e2e-fair "$1" 1 || fail "cluster did not start"
trap 'hl_cleanup' EXIT
HOG_BS=256K

"$ZL" volume create victim --size 64M --replicas 1 --chunk-size 4M >/dev/null 2>&1 || fail "zl volume create victim"
"$ZL" volume create hog --size 1G --replicas 1 --chunk-size 4M >/dev/null 2>&1 || fail "zl volume create hog"
# The victim's blocks exist on disk: its reads go to the disk.
"$ZL" bench victim --rw write --bs 1M --qd 4 --count 64 --json >/dev/null || fail "filling the victim failed"

# The hog: an unlimited writer, running (its second progress line: a full
# second of load), then stopped (SIGSTOP) and resumed by the phases below.
"$ZL" bench hog --rw randwrite --bs $HOG_BS --qd 32 --seconds 600 --progress >"$CL_DIR/hog.out" 2>"$CL_DIR/hog.err" &
hog=$!
HL_PIDS="$HL_PIDS $hog"
cl_wait_count "$CL_DIR/hog.err" IOPS 2 20 || fail "the hammer printed no progress: $(tail -3 "$CL_DIR/hog.err")"
kill -STOP "$hog"

# The victim: one bench of 4 KiB random reads at QD1 for PHASES x 3
# seconds, its p99 printed every second. The phases alternate, alone (the
# hog stopped) and contended (the hog running), so that the machine's own
# load (2 cores shared with other builds and tests) weighs on both alike.
# The first second of each phase is a transition (the hog's queued writes
# drain or start); the other two count. Alone and contended: the median of
# their seconds' p99s.
PHASES=8
"$ZL" bench victim --rw randread --bs 4k --qd 1 --seconds $((PHASES * 3 + 1)) --progress \
	>"$CL_DIR/victim.out" 2>"$CL_DIR/victim.err" &
vpid=$!
HL_PIDS="$HL_PIDS $vpid"
# p99s FILE: the p99 (us) of each progress line.
p99s() { awk '{for (i = 1; i < NF; i++) if ($i == "p99") print $(i+1)}' "$1"; }
alone_s=() cont_s=()
for k in $(seq 0 $((PHASES - 1))); do
	if [ $((k % 2)) = 1 ]; then kill -CONT "$hog"; else kill -STOP "$hog"; fi
	cl_wait_count "$CL_DIR/victim.err" IOPS $((3 * k + 3)) 10 ||
		fail "the victim's bench printed no progress in phase $k: $(tail -3 "$CL_DIR/victim.err")"
	kill -0 "$hog" 2>/dev/null || fail "the hammer ended: $(tail -3 "$CL_DIR/hog.err")"
	mapfile -t all < <(p99s "$CL_DIR/victim.err")
	if [ $((k % 2)) = 1 ]; then
		cont_s+=("${all[3 * k + 1]}" "${all[3 * k + 2]}")
	else
		alone_s+=("${all[3 * k + 1]}" "${all[3 * k + 2]}")
	fi
done
kill -CONT "$hog"
wait "$vpid" || fail "the victim's bench failed: $(tail -3 "$CL_DIR/victim.err")"
kill -TERM "$hog"
wait "$hog"
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
alone=$(median "${alone_s[@]}")
cont=$(median "${cont_s[@]}")
hog_iops=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "IOPS") print $i}' "$CL_DIR/hog.err" | tr '\n' ' ')
echo "FIGURE: fair: victim 4 KiB randread QD1, p99 per second: alone ${alone_s[*]} us (median $alone); while another volume takes $HOG_BS writes at QD32: ${cont_s[*]} us (median $cont); the hog's IOPS per second: $hog_iops"
ratio=$(/usr/bin/python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$cont" "$alone")
# The p99 bound is a measurement of this machine's disk (make bench-fair
# sets FAIR_P99_RATIO=2, issue 26's target), not a check of make test: on a
# shared disk one 256 KiB write in flight alone raises a 4 KiB read's p99
# several times (fio: 0.12 -> 0.9 ms here), whatever the admission does.
if [ -n "${FAIR_P99_RATIO:-}" ]; then
	/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[3]) * float(sys.argv[2]) else 1)' "$cont" "$alone" "$FAIR_P99_RATIO" ||
		check_fail "the victim's p99 under contention ($cont us) is above ${FAIR_P99_RATIO}x its p99 alone ($alone us)"
else
	echo "fair_e2e: the victim's p99 contended / alone: ${ratio}x (make bench-fair checks it against 2x)"
fi

# 2. metrics (sampled once a second): wait for the hog's count to show.
port=$(cl_metrics_port "$CL_DIR/storage-1/log")
[ -n "$port" ] || fail "storage-1 logged no metrics port"
URL="http://127.0.0.1:$port/metrics"
# vq NAME: zipline_volume_fair_queued_total of a volume.
vq() { mt_sum zipline_volume_fair_queued_total "volume=$(hl_vol_id "$1")" -- "$URL"; }
for _ in $(seq 1 50); do
	hq=$(vq hog) || fail "cannot scrape $URL"
	[ "$hq" -gt 0 ] && break
	sleep 0.1
done
vvq=$(vq victim) || fail "cannot scrape $URL"
dq=$(mt_sum zipline_storage_fair_queued_total -- "$URL") || fail "cannot scrape $URL"
echo "FIGURE: fair: operations that waited for their volume's share: hog $hq, victim $vvq, daemon $dq"
[ "$hq" -gt 0 ] || check_fail "no operation of the hog waited for its share (zipline_volume_fair_queued_total)"
[ "$vvq" = 0 ] || check_fail "$vvq operations of the QD1 victim waited for its share"
[ "$dq" -ge "$hq" ] || check_fail "zipline_storage_fair_queued_total ($dq) is below the hog's ($hq)"
hl_end
