#!/usr/bin/env bash
# E2E of issue 23's busy polling: three storage daemons with --busy-poll and
# `zl --busy-poll volume serve --nbd` as the client, a 3-replica volume.
#  1. Under load (fio's nbd engine, 4 KiB random writes with bursts of
#     larger ones, QD 16, verify=crc32c) the polling loops serve correct
#     data: fio verifies every block and reports no error.
#  2. Idle (no I/O for 10 s after the load, the NBD export still open), each
#     daemon and the serving client use under 1 % of a core: the spin window
#     follows work and ends with it. CPU time is utime + stime from
#     /proc/PID/stat, in clock ticks, over the same 10 s for all four.
# The same idle figure without busy polling (the daemons' and client's
# normal cost) is printed beside it for comparison, measured first, on the
# same cluster restarted without the flag.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
SPIN_US=${SPIN_US:-200}
fail() {
	echo "busypoll_e2e: FAIL: $*" >&2
	[ -f "$CL_DIR/fio.txt" ] && cat "$CL_DIR/fio.txt" >&2
	cl_dump_logs 10 "$CL_DIR"/storage-*/log "$CL_DIR"/serve-bp/log
	exit 1
}
cl_e2e_begin e2e-busypoll "$1" 3 || fail "cluster did not start"
HZ=$(getconf CLK_TCK)

cpu_ticks() { # cpu_ticks PID: utime + stime (fields 14, 15; the name may hold spaces)
	sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

serve() { # serve SOCK [zl global flags...]: the NBD export, pid in $CL_DIR/serve-bp/pid
	local sock=$1
	shift
	mkdir -p "$CL_DIR/serve-bp"
	"$ZL" "$@" volume serve bp --nbd "unix:$sock" >>"$CL_DIR/serve-bp/log" 2>&1 &
	echo $! >"$CL_DIR/serve-bp/pid"
	for _ in $(seq 1 100); do
		nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	fail "the NBD export at $sock did not answer in 10 s"
}

# idle LABEL: CPU of the three daemons and the export over 10 s without I/O;
# prints them and sets IDLE_MAX (the largest, in ticks) and IDLE_WHO.
idle() {
	local pids=() t0=() t1=() names=(node-1 node-2 node-3 serve) i
	for i in 1 2 3; do pids+=("$(cl_pid "storage-$i")"); done
	pids+=("$(cl_pid serve-bp)")
	sleep 1 # the load's last replies and the NBD disconnect
	for i in 0 1 2 3; do t0[$i]=$(cpu_ticks "${pids[$i]}"); done
	sleep 10
	IDLE_MAX=0
	IDLE_WHO=
	local line="busypoll_e2e: $1: CPU over 10 s idle:"
	for i in 0 1 2 3; do
		t1[$i]=$(cpu_ticks "${pids[$i]}")
		local d=$((t1[i] - t0[i]))
		line+=" ${names[$i]} $((d * 1000 / HZ)) ms"
		if [ "$d" -gt "$IDLE_MAX" ]; then IDLE_MAX=$d; IDLE_WHO=${names[$i]}; fi
	done
	echo "$line (1 % of a core = 100 ms)"
}

load() { # load SOCK: fio with verification through the export
	fio --name=bp --ioengine=nbd --uri="nbd+unix:///?socket=$1" --rw=randwrite --bs=4k \
		--bsrange=4k-64k --iodepth=16 --size=32M --verify=crc32c --do_verify=1 \
		--verify_fatal=1 --output="$CL_DIR/fio.txt" || fail "fio"
	grep -q "err= 0" "$CL_DIR/fio.txt" || fail "fio reported errors"
}

"$ZL" volume create bp --size 64M --replicas 3 || fail "create"

# Without busy polling: the reference figure.
serve "$CL_DIR/bp0.sock"
load "$CL_DIR/bp0.sock"
idle "without busy polling"
cl_stop serve-bp

# With it: every daemon restarted with --busy-poll, the export with it too.
for i in 1 2 3; do cl_stop "storage-$i"; done
CL_STORAGE_FLAGS="${CL_STORAGE_FLAGS:-} --busy-poll $SPIN_US"
for i in 1 2 3; do cl_start_storage "$i"; done
cl_wait_nodes 3 || fail "the daemons did not register again"
for i in 1 2 3; do
	tr '\0' ' ' <"/proc/$(cl_pid "storage-$i")/cmdline" | grep -q -- "--busy-poll $SPIN_US" ||
		fail "storage-$i does not run with --busy-poll $SPIN_US"
done
serve "$CL_DIR/bp1.sock" --busy-poll "$SPIN_US"
load "$CL_DIR/bp1.sock"
echo "busypoll_e2e: fio through the polling loops: $(grep -o 'IOPS=[^,]*' "$CL_DIR/fio.txt" | head -1), no error"
idle "with --busy-poll $SPIN_US"
[ "$IDLE_MAX" -lt $((HZ / 10)) ] ||
	fail "$IDLE_WHO used $((IDLE_MAX * 1000 / HZ)) ms of CPU in 10 s idle with busy polling on (at most 1 % of a core: 100 ms)"
cl_stop serve-bp
echo "busypoll_e2e: PASS"
