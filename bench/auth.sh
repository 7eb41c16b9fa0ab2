#!/usr/bin/env bash
# What authentication costs (issue 11: "within 3 % of tokens off"): the same
# `zl bench` jobs against a 3-replica volume on three zipline-storage daemons
# started with --auth off and with --auth on, ROUNDS times each, alternating
# off/on so that load from elsewhere on the machine hits both alike. Per job
# and mode: IOPS, mean latency, CPU time (user + system) per I/O of the
# client (`zl bench`, from its rusage) and of the three daemons together
# (from /proc/PID/stat), and the daemons' CPU while idle for IDLE seconds.
# Prints the medians over the rounds and the on/off ratios as one table.
#   bench/auth.sh [BUILD_DIR]   env: ROUNDS=3 RUNTIME=5 (s per job) WSET=128M IDLE=10
#   BENCH_JOBS (below). Every round's figures are printed too (the spread).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-5}
WSET=${WSET:-128M}
IDLE=${IDLE:-10}
export CL_BIN=$BUILD/bin
TOP=$(mktemp -d "$BUILD/bench-auth.XXXXXX")
CL_DIR=
source "$SRC/test/lib/cluster.sh"
source "$SRC/bench/lib.sh"
cleanup() { [ -n "$CL_DIR" ] && cl_stop_all; rm -rf "$TOP"; }
trap cleanup EXIT
ZL="$CL_BIN/zl"
RES="$TOP/results.tsv"
: >"$RES"
TICK=$(getconf CLK_TCK)

JOBS=("randread 4k 32" "randwrite 4k 32" "randread 4k 1")
# BENCH_JOBS="randwrite 4k 32;randread 4k 1" picks jobs (rw bs qd; ...).
if [ -n "${BENCH_JOBS:-}" ]; then IFS=';' read -r -a JOBS <<<"$BENCH_JOBS"; fi

one_round() {
	local round=$1 mode=$2 pids p
	CL_DIR=$TOP/r$round-$mode
	mkdir -p "$CL_DIR"
	export CL_DIR
	cl_start_etcd >/dev/null 2>&1
	export ZIPLINE_ETCD=$CL_ETCD
	for i in 1 2 3; do CL_AUTH=$mode cl_start_storage "$i"; done
	cl_wait_nodes 3
	pids=""
	for i in 1 2 3; do pids="$pids $(cl_pid "storage-$i")"; done
	# shellcheck disable=SC2086
	for p in $pids; do tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "--auth $mode" ||
		{ echo "bench/auth.sh: daemon $p is not running with --auth $mode" >&2; exit 1; }; done
	"$ZL" volume create bench --size 1G --replicas 3 >/dev/null
	# Every block of the working set written once, so reads read data.
	"$ZL" bench bench --rw write --bs 1M --qd 8 --seconds 4 --size "$WSET" --json >/dev/null
	for j in "${JOBS[@]}"; do
		local rw bs qd s0 s1 out
		read -r rw bs qd <<<"$j"
		echo "bench/auth.sh: round $round, auth $mode: $rw $bs QD$qd" >&2
		# shellcheck disable=SC2086
		s0=$(bench_cpu_ticks $pids)
		out=$(bench_zl_bench_cpu "$ZL" bench bench --rw "$rw" --bs "$bs" --qd "$qd" --seconds "$RUNTIME" \
			--size "$WSET" --json)
		# shellcheck disable=SC2086
		s1=$(bench_cpu_ticks $pids)
		/usr/bin/python3 - "$mode" "$rw $bs QD$qd" "$((s1 - s0))" "$TICK" "$out" >>"$RES" <<'PY'
import json, sys
mode, job, ticks, tck, out = sys.argv[1:]
lines = out.strip().split("\n")
d, cli = json.loads(lines[0]), float(lines[1])
if d["errors"] or not d["ios"]:
    sys.exit("zl bench reported errors or no I/O: %s" % lines[0])
srv = int(ticks) / int(tck)
print("\t".join([mode, job, "%.1f" % d["iops"], "%.1f" % d["lat_us"]["avg"],
                 "%.2f" % (cli / d["ios"] * 1e6), "%.2f" % (srv / d["ios"] * 1e6)]))
PY
	done
	# shellcheck disable=SC2086
	s0=$(bench_cpu_ticks $pids)
	sleep "$IDLE"
	# shellcheck disable=SC2086
	s1=$(bench_cpu_ticks $pids)
	/usr/bin/python3 -c 'import sys; m,t,k,s=sys.argv[1:]; print("%s\tidle\t-\t-\t-\t%.3f" % (m, int(t)/int(k)/float(s)/3*100))' \
		"$mode" "$((s1 - s0))" "$TICK" "$IDLE" >>"$RES"
	cl_stop_all
	CL_DIR=
}

for r in $(seq 1 "$ROUNDS"); do
	for m in off on; do one_round "$r" "$m"; done
done

echo
echo "Every round (mode, job, IOPS, mean latency us, client and storage CPU us per I/O):"
cat "$RES"
echo
echo "Machine: $(nproc) cores, $(uname -r); 3 replicas, $ROUNDS rounds x ${RUNTIME}s per job, working set $WSET; medians"
echo
/usr/bin/python3 - "$RES" "$IDLE" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
jobs = []
for r in rows:
    if r[1] not in jobs:
        jobs.append(r[1])
def med(mode, job, col):
    v = [float(r[col]) for r in rows if r[0] == mode and r[1] == job and r[col] != "-"]
    return statistics.median(v) if v else None
print("| job | IOPS off / on (ratio) | mean lat us off / on (ratio) | client CPU us/IO off / on (ratio) | storage CPU us/IO off / on (ratio) |")
print("|---|---|---|---|---|")
for j in jobs:
    if j == "idle":
        a, b = med("off", j, 5), med("on", j, 5)
        print("| idle %s s | storage CPU %% of a core per daemon: %.3f / %.3f | | | |" % (sys.argv[2], a, b))
        continue
    cells = []
    for col in (2, 3, 4, 5):
        a, b = med("off", j, col), med("on", j, col)
        cells.append("%.1f / %.1f (%.3f)" % (a, b, b / a if a else float("nan")))
    print("| %s | %s |" % (j, " | ".join(cells)))
PY
