#!/usr/bin/env bash
# What --metrics costs per I/O (issue 26: "I/O cost of metrics on: within
# 2 % of off"; `make bench-metrics`): callgrind instructions per 4 KiB I/O
# of one storage daemon (bench/auth_instr.sh storage: deterministic, unlike
# CPU time on a shared machine), `zl bench` QD16 randwrite then randread,
# each with the daemon started without --metrics and with --metrics
# 127.0.0.1:0 (/metrics then scraped during the job every INSTR_SCRAPE_S
# seconds, default 15, a common Prometheus interval). Counted: the I/O
# loop (INSTR_COLLECT, default zl_loop_run_once: every request's work and
# the once-a-second sample --metrics adds to the loop), not the HTTP
# thread's rendering nor the heartbeat, whose cost is per second, not per
# I/O. "Off" still counts: the counters are plain increments compiled in
# (storage_server.c); --metrics adds the sample and the HTTP thread.
# Prints a line per job and run and the difference; exits 1 when on is
# above off by more than 2 % for a job. Not in `make test`: the figure
# moves by about 1 % between runs with the batching of a loaded machine.
#   bench/metrics_instr.sh            (BUILD=..., INSTR_SECONDS=8 as auth_instr.sh)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export INSTR_SCRAPE_S=${INSTR_SCRAPE_S:-15}
export INSTR_COLLECT=${INSTR_COLLECT-zl_loop_run_once}
rc=0
for rw in randwrite randread; do
	off=$(INSTR_STORAGE_FLAGS="" "$SRC/bench/auth_instr.sh" storage off "$rw") || {
		echo "metrics_instr: $rw without --metrics failed: $off" >&2
		exit 1
	}
	on=$(INSTR_STORAGE_FLAGS="--metrics 127.0.0.1:0" "$SRC/bench/auth_instr.sh" storage off "$rw") || {
		echo "metrics_instr: $rw with --metrics failed: $on" >&2
		exit 1
	}
	echo "metrics off: $off"
	echo "metrics on:  $on"
	a=$(sed -n 's/.*Ir_per_io=\([0-9]*\).*/\1/p' <<<"$off")
	b=$(sed -n 's/.*Ir_per_io=\([0-9]*\).*/\1/p' <<<"$on")
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt 0 ] || {
		echo "metrics_instr: no instruction count for $rw" >&2
		exit 1
	}
	pct=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%+.2f", (b - a) * 100 / a }')
	echo "FIGURE: metrics cost: $rw 4 KiB QD16: $a instructions per I/O off, $b on ($pct %)"
	awk -v a="$a" -v b="$b" 'BEGIN { exit !(b <= a * 1.02) }' ||
		{ echo "metrics_instr: $rw: --metrics costs $pct % instructions per I/O, above 2 %" >&2; rc=1; }
done
exit $rc
