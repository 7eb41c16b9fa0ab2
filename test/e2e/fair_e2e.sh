#!/usr/bin/env bash
# Storage-side fair share of the disk per volume (issue 26 item 4;
# storage/storage_fair.c): one zipline-storage (its data dir on the build's
# disk, O_DIRECT) with --metrics, two volumes of 1 replica on it.
#  1. The victim: `zl bench` 4 KiB random reads at QD1 (10000), its p99
#     alone, then again while the other volume (the hog) is hammered by an
#     unlimited writer of 256 KiB blocks at QD32 (disk bound: few large
#     requests, each 64 times the victim's). Both p99s are printed; under
#     contention the victim's p99 stays within 2x of alone.
#  2. The daemon's metrics: the hog's operations waited for its share
#     (zipline_volume_fair_queued_total > 0, and the daemon's
#     zipline_storage_fair_queued_total at least that), the victim's never.
# FAIR_E2E_STORAGE_FLAGS adds daemon flags: `--fair-share off` shows the
# test failing without the mechanism.
# Usage: fair_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test fair_e2e
MT="$SRC/test/lib/metrics_tool.py"
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null ||
	{ echo "fair_e2e: FAIL: python3-prometheus-client is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
cl_require "$T" "$1" zipline-storage zipline-controller zl
export CL_STORAGE_FLAGS="--log-level info --metrics 127.0.0.1:0 ${FAIR_E2E_STORAGE_FLAGS:-}"
cl_e2e_begin e2e-fair "$1" 1 || fail "cluster did not start"
trap 'hl_cleanup' EXIT
HOG_BS=256K

"$ZL" volume create victim --size 64M --replicas 1 --chunk-size 4M >/dev/null 2>&1 || fail "zl volume create victim"
"$ZL" volume create hog --size 1G --replicas 1 --chunk-size 4M >/dev/null 2>&1 || fail "zl volume create hog"
# The victim's blocks exist on disk: its reads go to the disk.
"$ZL" bench victim --rw write --bs 1M --qd 4 --count 64 --json >/dev/null || fail "filling the victim failed"

# p99 VOLUME: "p99 p50 iops" of 10000 4 KiB random reads at QD1 (bench's own, us).
p99() {
	local out
	out=$("$ZL" bench "$1" --rw randread --bs 4k --qd 1 --count 10000 --seconds 120 --json) ||
		fail "zl bench $1 randread failed"
	/usr/bin/python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["lat_us"]["p99"], j["lat_us"]["p50"], j["iops"])' "$out"
}
read -r alone alone50 alone_iops < <(p99 victim)
[ -n "$alone" ] || fail "no p99 alone"

"$ZL" bench hog --rw randwrite --bs $HOG_BS --qd 32 --seconds 600 --progress >"$CL_DIR/hog.out" 2>"$CL_DIR/hog.err" &
hog=$!
HL_PIDS="$HL_PIDS $hog"
# The hammer runs: its second progress line (a full second of load).
for _ in $(seq 1 200); do
	[ "$(grep -c 'IOPS' "$CL_DIR/hog.err")" -ge 2 ] && break
	sleep 0.1
done
[ "$(grep -c 'IOPS' "$CL_DIR/hog.err")" -ge 2 ] || fail "the hammer printed no progress: $(tail -3 "$CL_DIR/hog.err")"
read -r cont cont50 cont_iops < <(p99 victim)
kill -0 "$hog" 2>/dev/null || fail "the hammer ended before the victim's run: $(tail -3 "$CL_DIR/hog.err")"
kill -TERM "$hog"
wait "$hog"
hog_iops=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "IOPS") print $i}' "$CL_DIR/hog.err" | tr '\n' ' ')
echo "FIGURE: fair: victim 4 KiB randread QD1: alone p99 $alone us (p50 $alone50, $alone_iops IOPS); while another volume takes $HOG_BS writes at QD32 (its IOPS per second: $hog_iops): p99 $cont us (p50 $cont50, $cont_iops IOPS)"
/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 2 * float(sys.argv[2]) else 1)' "$cont" "$alone" ||
	check_fail "the victim's p99 under contention ($cont us) is above 2x its p99 alone ($alone us)"

# 2. metrics (sampled once a second): wait for the hog's count to show.
port=$(cl_metrics_port "$CL_DIR/storage-1/log")
[ -n "$port" ] || fail "storage-1 logged no metrics port"
URL="http://127.0.0.1:$port/metrics"
# vq NAME: zipline_volume_fair_queued_total of a volume.
vq() { /usr/bin/python3 "$MT" sum zipline_volume_fair_queued_total "volume=$(hl_vol_id "$1")" -- "$URL"; }
for _ in $(seq 1 50); do
	hq=$(vq hog) || fail "cannot scrape $URL"
	[ "$hq" -gt 0 ] && break
	sleep 0.1
done
vvq=$(vq victim) || fail "cannot scrape $URL"
dq=$(/usr/bin/python3 "$MT" sum zipline_storage_fair_queued_total -- "$URL") || fail "cannot scrape $URL"
echo "FIGURE: fair: operations that waited for their volume's share: hog $hq, victim $vvq, daemon $dq"
[ "$hq" -gt 0 ] || check_fail "no operation of the hog waited for its share (zipline_volume_fair_queued_total)"
[ "$vvq" = 0 ] || check_fail "$vvq operations of the QD1 victim waited for its share"
[ "$dq" -ge "$hq" ] || check_fail "zipline_storage_fair_queued_total ($dq) is below the hog's ($hq)"
hl_end
