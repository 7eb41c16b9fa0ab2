#!/usr/bin/env bash
# etcd down under load: 3 daemons (--heal on), the real manager, a 3-replica
# volume under a verified load (e2e_load: QD8, 20 % reads, every submission
# and acknowledgement in a fsynced log). etcd, the cluster's only member, is
# killed -9 twice and started again on its data dir:
#  1. etcd away 15 s, longer than the daemons' 10 s leases: the open
#     volume's reads and writes go on without it (acknowledgements while it
#     is down), and once it is back every daemon is registered again and the
#     manager takes no live node out (every slice 3/3 in sync throughout
#     the 15 s after its return).
#  2. etcd killed, then a storage daemon killed -9 while etcd is away:
#     writes to the dead node's rows wait (nobody can change a row) and
#     none fails; etcd back after 10 s, the manager takes the dead node out,
#     the load goes on, the node restarts and catches up by itself.
# Then: no failed write, read error or bad sector; every slice 3/3 in sync;
# `zl volume verify` clean; the replicas' chunk files identical and exactly
# the log; a new client reads exactly the log.
# Usage: etcd_down_e2e.sh BUILD_DIR. Environment: ZL_TEST_SEED, KEEP=1.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test etcd_down_e2e

SIZE=128M
CHUNK=1M
SIZE_B=$((128 << 20))
CHUNK_B=$((1 << 20))
cl_seed $T

hl_begin e2e-etcddown "$1" || fail "cluster or manager did not start"
hl_load_begin evol $SIZE $CHUNK 64K

# etcd's ports, to start it again where every process looks for it.
epid=$(cl_pid etcd)
[ -n "$epid" ] || fail "no etcd pid recorded"
cport=${CL_ETCD##*:}
pport=$(tr '\0' '\n' </proc/"$epid"/cmdline | sed -n 's#^http://127.0.0.1:\([0-9]*\)$#\1#p' | grep -vx "$cport" | head -1)
[ -n "$pport" ] || fail "cannot read etcd's peer port from its command line"
acks() { grep -c '^A ' "$LOG"; }
# etcd_back: starts etcd again on its data dir and ports.
etcd_back() {
	cl_start_etcd "$cport" "$pport" || fail "etcd did not start again on its data dir"
}

# 1. etcd away for 15 s (deliberate: longer than the 10 s leases of the
# daemons' registrations and of the manager's leadership).
a0=$(acks)
cl_stop etcd KILL
t_kill=$(hl_now_ms)
cl_wait_count "$LOG" '^A ' $((a0 + 200)) 10 ||
	check_fail "the open volume's writes stopped with etcd: $(($(acks) - a0)) acknowledged in 10 s after etcd was killed"
sleep $((15 - ($(hl_now_ms) - t_kill) / 1000)) # deliberate: the outage's length
a1=$(acks)
etcd_back
echo "FIGURE: etcd_down: $((a1 - a0)) writes acknowledged while etcd was down $((($(hl_now_ms) - t_kill) / 1000)) s"
cl_wait_nodes 3 || check_fail "the daemons did not register again after etcd came back"
# The manager takes no live node out: every slice stays 3/3 in sync.
out_seen=""
for _ in $(seq 1 30); do
	hl_etcd insync "$vid" 3 >/dev/null 2>&1 || { out_seen=$(hl_etcd summary "$vid" 2>&1); break; }
	sleep 0.5
done
[ -z "$out_seen" ] || check_fail "after etcd came back a slice was no longer 3/3 in sync (no node had died): $out_seen"
cl_wait_count "$LOG" '^A ' $((a1 + 200)) 30 || check_fail "the load did not go on after etcd came back"

# 2. etcd killed, then a storage daemon: the manager cannot act until etcd
# is back; the load must wait, not fail.
a2=$(acks)
cl_stop etcd KILL
t_kill=$(hl_now_ms)
victim=$((RANDOM % 3 + 1))
cl_stop storage-$victim KILL
echo "$T: etcd and node-$victim killed -9"
sleep $((10 - ($(hl_now_ms) - t_kill) / 1000)) # deliberate: the outage's length
a3=$(acks)
etcd_back
echo "FIGURE: etcd_down: $((a3 - a2)) writes acknowledged while etcd and node-$victim were down"
cl_wait_count "$LOG" '^A ' $((a3 + 500)) 60 ||
	check_fail "the load did not go on within 60 s of etcd's return (node-$victim still dead): $(hl_etcd summary "$vid")"
echo "$T: rows with node-$victim dead: $(hl_etcd summary "$vid")"
cl_start_storage $victim
t_restart=$(hl_now_ms)
if cl_wait_in_sync "$vid" --all 3 90 >/dev/null; then
	echo "FIGURE: etcd_down: every slice 3/3 in sync $(($(hl_now_ms) - t_restart)) ms after node-$victim restarted"
else
	check_fail "not every slice was 3/3 in sync within 90 s of node-$victim's restart: $(hl_etcd summary "$vid")"
fi

hl_load_end evol $SIZE_B $CHUNK_B "etcd_down load"
