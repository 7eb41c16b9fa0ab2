#!/usr/bin/env bash
# A frozen storage daemon comes back (a zombie): 3 daemons (--heal on), the
# real manager, a 3-replica volume under a verified load (e2e_load: QD8,
# 20 % reads, every submission and acknowledgement in a fsynced log). A
# daemon is frozen (SIGSTOP) for 20 s, longer than its 10 s lease, so the
# manager takes it out and the other members go on without it; then it is
# thawed (SIGCONT) with everything it held before: requests read from its
# sockets before the freeze, its old view of the rows, its connections.
# Twice: the primary of slice 0, then a backup of another slice (a node
# that leads neither). Whatever the zombie does with what it held, no
# write may go backwards or be lost:
#   - the load goes on while it is frozen (acknowledgements meanwhile);
#   - once thawed it is taken back and caught up: every slice 3/3 in sync;
#   - no failed write, read error or bad sector; `zl volume verify` clean;
#     every replica's chunk files identical and exactly the log; a new
#     client reads exactly the log.
# Usage: frozen_e2e.sh BUILD_DIR. Environment: ZL_TEST_SEED, KEEP=1.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test frozen_e2e

SIZE=128M
CHUNK=1M
SIZE_B=$((128 << 20))
CHUNK_B=$((1 << 20))
cl_seed $T

hl_begin e2e-frozen "$1" || fail "cluster or manager did not start"
hl_load_begin fvol $SIZE $CHUNK 64K
acks() { grep -c '^A ' "$LOG"; }

# freeze NODE_NUM WHAT: SIGSTOP for 20 s under the load, then SIGCONT, and
# every slice 3/3 in sync again within 90 s.
freeze() {
	local i=$1 what=$2 pid a0 a1 t0
	pid=$(cl_pid storage-$i)
	a0=$(acks)
	kill -STOP "$pid" || fail "cannot stop node-$i"
	t0=$(hl_now_ms)
	echo "$T: node-$i ($what) frozen"
	# The manager takes it out (its lease ends 10 s after its last
	# renewal) and the writes go on: 300 more acknowledged within 30 s.
	cl_wait_count "$LOG" '^A ' $((a0 + 300)) 30 ||
		check_fail "$what: the load did not go on with node-$i frozen: $(($(acks) - a0)) writes in 30 s; rows: $(hl_etcd summary "$vid")"
	sleep $((20 - ($(hl_now_ms) - t0) / 1000 > 0 ? 20 - ($(hl_now_ms) - t0) / 1000 : 0)) # deliberate: the freeze's length
	a1=$(acks)
	echo "$T: rows with node-$i frozen $((($(hl_now_ms) - t0) / 1000)) s: $(hl_etcd summary "$vid")"
	kill -CONT "$pid"
	echo "FIGURE: frozen: $what: $((a1 - a0)) writes acknowledged while node-$i was frozen"
	cl_wait_count "$LOG" '^A ' $((a1 + 300)) 30 || check_fail "$what: the load did not go on after node-$i was thawed"
	if cl_wait_in_sync "$vid" --all 3 90 >/dev/null; then
		echo "FIGURE: frozen: $what: every slice 3/3 in sync $(($(hl_now_ms) - t0)) ms after the freeze began"
	else
		check_fail "$what: not every slice was 3/3 in sync within 90 s of node-$i's thaw: $(hl_etcd summary "$vid")"
	fi
	kill -0 "$pid" 2>/dev/null || check_fail "$what: node-$i died after its thaw: $(tail -n 5 "$CL_DIR/storage-$i/log")"
}

p=$(hl_etcd primary "$vid" 0) || fail "slice 0 has no primary"
v=${p#node-}
freeze "$v" "the primary of slice 0 ($p)"
# Then another node, as a backup of a slice it does not lead (every node
# holds every row: 3 replicas on 3 nodes).
b=$((v % 3 + 1))
s=$(hl_etcd members "$vid" | awk -v n="node-$b" '$2 != n {print $1; exit}')
[ -n "$s" ] || fail "node-$b leads every slice"
freeze "$b" "a backup of slice $s (node-$b)"

hl_load_end fvol $SIZE_B $CHUNK_B "frozen load"
