#!/usr/bin/env bash
# The RDMA transport's counters in the daemons' /metrics (docs/OBSERVABILITY.md),
# each under a load that provably moves it: the part "counters" of rdma_vm
# (test/rdma/rdma-vm.sh, in its Soft-RoCE guest). Three daemons --transport
# rdma --metrics on rxe0 (--auth off: the rogue below never says HELLO), a
# 4 MiB volume (one slice: primary P, backups B and C), scraped with
# test/lib/metrics_tool.py (prometheus_client's parser):
#   1. zipline_rdma_credit_waits_total: before any I/O (nothing is connected
#      to B yet: a daemon peers a slice at its first request), mw_test --fill
#      holds B's shared receive queue until 16 credits are left, so P's
#      connection to B gets 16 credits for its 256 request slots; then
#      `zl bench` writes at QD 64 through P, which forwards each write to B
#      -> P's counter rose, by at most one per forward (each waiting request
#      is counted once).
#   2. zipline_rdma_completion_errors_total: a rogue client (mw_test
#      --bad-rkey) asks C for chunk 0 (READ, ZL_WF_ANY) into a descriptor
#      naming memory registered local-only; C's RDMA WRITE of the data fails
#      at the rogue (remote access error) -> C +1 exactly, P and B +0
#      (flushes are not counted).
#   3. zipline_rdma_window_waits_total: 0 on every daemon after the load (a
#      connection has a memory window per request slot, so a post never waits
#      for one: the counter guards that invariant).
# Usage: test/rdma/counters_rdma.sh BUILD_DIR (on the host: runs rdma-vm.sh
# BUILD_DIR counters). Environment: ZL_CTR_WRITES (default 400).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=part.sh
. "$here/part.sh"
rdma_part_enter counters "${1:-}"

SRC=$(cd "$here/../.." && pwd)
# shellcheck source=../lib/metrics.sh
source "$SRC/test/lib/metrics.sh" counters_rdma
export ZIPLINE_TRANSPORT=rdma
writes=${ZL_CTR_WRITES:-400}
leave=16
qd=64
t0=$(date +%s)
# Cluster state on the guest's tmpfs; bin/ points at the real build.
work=$(mktemp -d /tmp/zl-rdma-ctr.XXXXXX)
ln -s "$build/bin" "$work/bin"
CL_MANAGER=0 CL_AUTH=off CL_JOURNAL_SIZE=32M CL_LISTEN_HOST=$ip CL_STORAGE_FLAGS="--transport rdma --metrics 127.0.0.1:0" \
	cl_e2e_begin rdma-ctr "$work" 3 || fail "cluster did not start"
fill_pid=
trap '[ -z "$fill_pid" ] || kill "$fill_pid" 2>/dev/null; cl_stop_all; rm -rf "$work"' EXIT

declare -A url rport
for i in 1 2 3; do
	log=$CL_DIR/storage-$i/log
	for _ in $(seq 1 100); do
		p=$(cl_metrics_port "$log")
		r=$(sed -n 's/.*registered node=.* rdma_port=\([0-9]*\) .*/\1/p' "$log" | tail -1)
		[ -n "$p" ] && [ -n "$r" ] && break
		sleep 0.1
	done
	[ -n "$p" ] || fail "node-$i logged no metrics port"
	[[ ${r:-0} -gt 0 ]] || fail "node-$i registered no RDMA port (rdma_port=${r:-none})"
	url[node-$i]=http://127.0.0.1:$p/metrics
	rport[node-$i]=$r
done
echo "counters_rdma: +$(($(date +%s) - t0)) s: cluster up"
"$ZL" volume create ctr --size 4M --replicas 3 || fail "volume create"
vid=$(hl_vol_id ctr)
read -r slice prim others < <(hl_etcd members "$vid") || fail "no placement for volume ctr ($vid)"
read -r -a backups <<<"${others//$prim/}"
if [ "$slice" != 0 ] || [ "${#backups[@]}" != 2 ]; then
	fail "want one slice on three members, got '$slice $prim $others'"
fi
b=${backups[0]} c=${backups[1]}
echo "counters_rdma: +$(($(date +%s) - t0)) s: slice 0: primary $prim, backups $b $c"
# snap: "NODE NAME VALUE" for every daemon and RDMA counter (and the open
# RDMA connections), one scrape of each daemon and one python start (slow
# under TCG) per snapshot; at NODE NAME SNAP: one value of it.
snap() {
	/usr/bin/python3 - "$MT" "${url[node-1]}" "${url[node-2]}" "${url[node-3]}" <<'EOF' || fail "scraping the daemons failed"
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import metrics_tool as mt
for i, u in enumerate(sys.argv[2:], 1):
    s = mt.scrape(u)
    for name in ('zipline_rdma_completion_errors_total', 'zipline_rdma_credit_waits_total',
                 'zipline_rdma_window_waits_total'):
        print('node-%d %s %d' % (i, name, mt.value(s, name)))
    print('node-%d rdma_open %d' % (i, mt.value(s, 'zipline_transport_connections', kind='rdma')))
EOF
}
at() { awk -v n="$1" -v k="$2" '$1 == n && $2 == k { print $3 }' <<<"$3"; }

# 1. Credit waits: B's receive queue held until 16 credits are left.
s2=$(snap)
open=$(at "$b" rdma_open "$s2")
[ "$open" = 0 ] || fail "$b has $open RDMA connections before any I/O (want 0: the fill needs an idle daemon)"
"$build/bin/mw_test" --fill "$ip" "${rport[$b]}" "$leave" >"$work/fill.log" 2>&1 &
fill_pid=$!
for _ in $(seq 1 600); do
	grep -q 'fill READY' "$work/fill.log" && break
	kill -0 "$fill_pid" 2>/dev/null || break
	sleep 0.1
done
sed 's/^/counters_rdma: /' "$work/fill.log"
grep -q 'fill READY' "$work/fill.log" || fail "mw_test --fill did not fill $b's receive queue"
echo "counters_rdma: +$(($(date +%s) - t0)) s: filled"
"$ZL" bench ctr --rw randwrite --bs 4k --qd "$qd" --count "$writes" --seconds 120 >"$work/bench.out" ||
	fail "zl bench: $(cat "$work/bench.out")"
sed 's/^/counters_rdma: bench: /' "$work/bench.out"
s3=$(snap)
echo "counters_rdma: +$(($(date +%s) - t0)) s: load done; $prim's warnings:"
grep -h ' WARN ' "$CL_DIR/storage-${prim#node-}/log" | head -5 | sed 's/^/counters_rdma:   /'
kill "$fill_pid" 2>/dev/null
wait "$fill_pid" 2>/dev/null
fill_pid=
cw=zipline_rdma_credit_waits_total
pw0=$(at "$prim" $cw "$s2") pw1=$(at "$prim" $cw "$s3")
echo "FIGURE: counters_rdma: $prim (primary) $cw $pw0 -> $pw1 under $writes writes at QD $qd forwarded to $b ($leave credits)"
[ "$pw1" -gt "$pw0" ] || check_fail "$prim: zipline_rdma_credit_waits_total did not rise ($pw0 -> $pw1) with $qd writes in flight against $leave credits"
# Each forward waits once at most (+ a few peering requests).
[ $((pw1 - pw0)) -le $((writes + 8)) ] ||
	check_fail "$prim: zipline_rdma_credit_waits_total rose by $((pw1 - pw0)), more than the $writes forwards (+8): a request counted more than once"

# 2. A completion in error: a rogue's descriptor with a local-only rkey, on
# C (the volume's chunk 0 holds data there now).
ce=zipline_rdma_completion_errors_total
s0=$s3
"$build/bin/mw_test" --bad-rkey "$ip" "${rport[$c]}" "$vid" || fail "mw_test --bad-rkey against $c"
for _ in $(seq 1 100); do
	s1=$(snap)
	[ "$(at "$c" $ce "$s1")" -gt "$(at "$c" $ce "$s0")" ] && break
	sleep 0.1
done
for n in node-1 node-2 node-3; do
	inc=0
	[ "$n" = "$c" ] && inc=1
	want=$(($(at "$n" $ce "$s0") + inc))
	echo "FIGURE: counters_rdma: $n $ce $(at "$n" $ce "$s0") -> $(at "$n" $ce "$s1") (want $want)"
	[ "$(at "$n" $ce "$s1")" = "$want" ] ||
		check_fail "$n: $ce $(at "$n" $ce "$s0") -> $(at "$n" $ce "$s1"), want $want (the rogue's bad rkey hit $c only)"
done
grep -q "RDMA work request failed .*status=\"remote access error\"" "$CL_DIR/storage-${c#node-}/log" ||
	check_fail "$c did not log the remote access error of its RDMA WRITE"

# 3. Window waits: never (one window per request slot).
for n in node-1 node-2 node-3; do
	ww=$(at "$n" zipline_rdma_window_waits_total "$s3")
	echo "counters_rdma: $n zipline_rdma_window_waits_total $ww"
	[ "$ww" = 0 ] || check_fail "$n: zipline_rdma_window_waits_total $ww, want 0"
done

echo "FIGURE: counters_rdma: $(($(date +%s) - t0)) s of guest time"
if ((${#FAILS[@]})); then
	printf 'counters_rdma: FAIL: %s\n' "${FAILS[@]}" >&2
	hl_dump_logs 20
	exit 1
fi
echo "counters_rdma: PASS"
