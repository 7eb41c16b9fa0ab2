#!/usr/bin/env bash
# Measurements for the RDMA closing note, all in ONE Soft-RoCE guest:
#   1. `zl bench` 4 KiB randread QD32 and 1 MiB sequential read QD8, over TCP
#      and over RDMA, with the CPU time (user+sys from /proc/PID/stat) of the
#      storage daemon and of the client per run;
#   2. user-space instructions per 4 KiB read and per 4 KiB write (QD8),
#      client and storage, with valgrind --tool=callgrind: the same job over
#      both transports; per-I/O numbers are differences between a short and
#      a long run (Ir_long - Ir_short) / (ios_long - ios_short), so start-up
#      and connection set-up cancel out;
#   3. perftest ib_send_lat / ib_write_lat (64 B and 4 KiB) on the same rxe0.
# One zipline-storage (--transport auto: TCP and RDMA on 10.77.0.1), a
# 1-replica 64 MiB volume filled with random data, the client picks the
# transport with zl --transport tcp|rdma. Soft-RoCE under TCG emulation: the
# ratios and the CPU cost mean something, the absolute numbers do not.
#
# Usage: test/rdma/measure.sh BUILD_DIR [bench seconds (10)]
# Environment: ZL_TEST_WRITE_PATH (zipline-storage --write-path, as in the
# e2e tests: test/lib/cluster.sh).
# Output: the report on stdout, raw files in BUILD_DIR/rdma-measure/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR [seconds]}" && pwd)
secs=${2:-10}

if [[ ${ZL_VM:-0} != 1 ]]; then
	export ZL_BUILD_DIR=$build
	exec "$here/run-in-vm.sh" -m "${ZL_VM_MEM:-3G}" --ip 10.77.0.1/24 -- \
		bash "$here/measure.sh" "$build" "$secs"
fi

set -e
# cl_write_path_flags (ZL_TEST_WRITE_PATH)
source "$here/../lib/cluster.sh"
out=$build/rdma-measure
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d /tmp/zl-measure.XXXXXX)
ZL=$build/bin/zl
ip=${RXE_IP:?not in the test VM (test/vm/vm.sh --rxe)}
ulimit -l unlimited
hz=$(getconf CLK_TCK)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# ---- etcd ----
cport=$(free_port) pport=$(free_port)
etcd --name m --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
	--advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
	--initial-advertise-peer-urls "http://127.0.0.1:$pport" --initial-cluster "m=http://127.0.0.1:$pport" \
	--log-level warn --logger zap >"$out/etcd.log" 2>&1 &
pids+=($!)
export ZIPLINE_ETCD=http://127.0.0.1:$cport
for _ in $(seq 1 300); do curl -s -m 1 -X POST -d '{}' "$ZIPLINE_ETCD/v3/maintenance/status" >/dev/null 2>&1 && break; sleep 0.2; done

sport=$(free_port)
mkdir -p "$work/data"
# start_storage [wrapper...]: the daemon (optionally under valgrind); sets spid.
start_storage() {
	# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
	"$@" "$build/bin/zipline-storage" --data-dir "$work/data" --listen "$ip:$sport" \
		--node-id m1 --etcd "$ZIPLINE_ETCD" --transport auto $(cl_write_path_flags) \
		>>"$out/storage.log" 2>&1 &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 1 600); do
		"$ZL" status 2>/dev/null | grep -q "m1 .* rdma$" && return 0
		sleep 0.5
	done
	echo "measure: storage did not come up; log:" >&2
	tail -30 "$out/storage.log" >&2
	return 1
}
stop_storage() {
	kill -TERM "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start_storage
"$ZL" status | tee "$out/status.txt"
"$ZL" volume create m --size 64M --replicas 1 >/dev/null
head -c 64M /dev/urandom >"$work/fill"
"$ZL" --transport tcp volume import m "$work/fill" >/dev/null

echo
echo "=== 1. zl bench (${secs} s each; CPU = user+sys seconds of the process during the run)"
printf '%-5s %-22s %10s %9s %9s %9s %11s %11s\n' xport job IOPS MiB/s p50_us p99_us client_cpu storage_cpu
bench() { # transport label args...
	local t=$1 label=$2
	shift 2
	local s0 s1 j
	s0=$(cpu_ticks "$spid")
	/usr/bin/time -f '%U %S' -o "$out/time.$t.$label" \
		"$ZL" --transport "$t" bench m "$@" --seconds "$secs" --size 64M --json >"$out/bench.$t.$label.json"
	s1=$(cpu_ticks "$spid")
	j=$(cat "$out/bench.$t.$label.json")
	python3 - "$t" "$label" "$j" "$(cat "$out/time.$t.$label")" "$(((s1 - s0)))" "$hz" <<'PY'
import json, sys
t, label, j, tm, sticks, hz = sys.argv[1:]
d = json.loads(j)
u, s = (float(x) for x in tm.split())
print(f"{t:<5} {label:<22} {d['iops']:>10.0f} {d['mib_s']:>9.1f} {d['lat_us']['p50']:>9.0f} "
      f"{d['lat_us']['p99']:>9.0f} {u + s:>10.2f}s {int(sticks) / int(hz):>10.2f}s")
PY
}
for t in tcp rdma; do
	bench "$t" randread-4k-qd32 --rw randread --bs 4k --qd 32
	bench "$t" read-1m-qd8 --rw read --bs 1m --qd 8
done
grep -h "connected: node=m1" "$out/storage.log" >/dev/null 2>&1 || true

echo
echo "=== 2. callgrind: user-space instructions per 4 KiB I/O (QD8, 1 replica)"
stop_storage
start_storage valgrind --tool=callgrind --callgrind-out-file="$out/cg.storage.%p" --dump-instr=no
vg_storage=$spid
# callgrind Ir total of a client run / the storage's counters since the last zero.
cg_total() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }
short=$((secs / 2 > 4 ? secs / 2 : 4))
long=$((short * 3))
printf '%-5s %-10s %14s %14s\n' xport job client_Ir/io storage_Ir/io
for t in tcp rdma; do
	for rw in randread randwrite; do
		declare -A ios cir sir
		for d in short long; do
			sec=$short
			[ $d = long ] && sec=$long
			callgrind_control -z "$vg_storage" >/dev/null
			rm -f "$out"/cg.storage.*.[0-9]*
			valgrind --tool=callgrind --callgrind-out-file="$out/cg.client.$t.$rw.$d" --dump-instr=no \
				"$ZL" --transport "$t" bench m --rw "$rw" --bs 4k --qd 8 --seconds "$sec" --size 64M \
				--json >"$out/cg.bench.$t.$rw.$d.json" 2>"$out/cg.client.$t.$rw.$d.log"
			callgrind_control -d "$vg_storage" >/dev/null
			# The dump is written by the daemon after callgrind_control
			# returns: wait for the file.
			for _ in $(seq 1 100); do
				ls "$out"/cg.storage.*.[0-9]* >/dev/null 2>&1 && break
				sleep 0.1
			done
			dump=$(ls -t "$out"/cg.storage.*.[0-9]* | head -1)
			mv "$dump" "$out/cg.storage.$t.$rw.$d"
			ios[$d]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ios"])' "$out/cg.bench.$t.$rw.$d.json")
			cir[$d]=$(cg_total "$out/cg.client.$t.$rw.$d")
			sir[$d]=$(cg_total "$out/cg.storage.$t.$rw.$d")
			echo "  ($t $rw ${sec}s: ios=${ios[$d]} client_Ir=${cir[$d]} storage_Ir=${sir[$d]})" >>"$out/callgrind.raw"
		done
		python3 - "$t" "$rw" "${ios[short]}" "${ios[long]}" "${cir[short]}" "${cir[long]}" "${sir[short]}" "${sir[long]}" <<'PY'
import sys
t, rw, i0, i1, c0, c1, s0, s1 = sys.argv[1:3] + [int(x) for x in sys.argv[3:]]
di = max(i1 - i0, 1)
print(f"{t:<5} {rw:<10} {(c1 - c0) / di:>14.0f} {(s1 - s0) / di:>14.0f}   (ios {i0} / {i1})")
PY
		unset ios cir sir
	done
done
cat "$out/callgrind.raw"
stop_storage

echo
echo "=== 3. perftest on the same rxe0 (RC over rdma_cm, 1000 iterations)"
for tool in ib_send_lat ib_write_lat; do
	for size in 64 4096; do
		ok=0
		for attempt in 1 2 3; do
			$tool -d "$RXE_DEV" -x "$RXE_GID_INDEX" -s $size -n 1000 -R >"$out/$tool.$size.srv" 2>&1 &
			srv=$!
			# the perftest server prints nothing when it listens: the client
			# is tried after a pause, up to 3 times.
			sleep 2
			if $tool -d "$RXE_DEV" -x "$RXE_GID_INDEX" -s $size -n 1000 -R "$ip" >"$out/$tool.$size" 2>&1 &&
				! grep -q " inf " "$out/$tool.$size"; then
				ok=1
			fi
			wait $srv 2>/dev/null || true
			[ $ok = 1 ] && break
		done
		echo "$tool size=$size: $(awk '$1 ~ /^[0-9]+$/ && NF >= 5 {print "t_min " $3 " us, t_typical " $5 " us, t_avg " $6 " us"}' "$out/$tool.$size" | tail -1)"
	done
done
