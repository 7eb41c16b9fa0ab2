#!/usr/bin/env bash
# Acceptance test THRASH of issue 10 (replication that heals): 3 daemons
# with --heal on and a real zipline-controller --manager=on. A 3-replica
# volume under a verified write load (e2e_load: QD8, every sector encodes
# (offset, generation), reads during the load checked, every submission and
# acknowledgement in a fsynced log); five rounds of kill -9 of a random
# daemon (primaries included) and its restart a few seconds later, and one
# kill -9 + restart of the manager in the middle. Pass conditions:
#   - no failed write, no read error, no bad sector during the load;
#   - after the last restart every slice 3 of 3 in_sync within 60 s;
#   - `zl volume verify` exits 0;
#   - every replica's chunk files, read directly, identical (data and
#     version) across the 3 replicas and exactly what the log says;
#   - a final read-back through a new client is exactly the log.
# The schedule kills, in one round chosen by the seed, the current primary
# of a slice (0-3) chosen by the seed; the test asserts that a primary was
# among the victims.
# Usage: thrash_e2e.sh BUILD_DIR. Environment: ZL_TEST_SEED (the kill
# schedule and the load's seed; printed), KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test thrash_e2e

SIZE=256M
CHUNK=1M
SIZE_B=$((256 << 20))
CHUNK_B=$((1 << 20))
cl_seed $T
PRIM_ROUND=$((RANDOM % 5 + 1)) PRIM_SLICE=$((RANDOM % 4))

hl_begin e2e-thrash "$1" || fail "cluster or manager did not start"
hl_load_begin tvol $SIZE $CHUNK 256K

t_start=$(hl_now_ms)
prim_victims=""
for round in 1 2 3 4 5; do
	i=$((RANDOM % 3 + 1))
	prims=$(for s in 0 1 2 3; do echo "$s $(hl_etcd primary "$vid" $s 2>/dev/null || echo -)"; done)
	if [ $round = $PRIM_ROUND ]; then
		p=$(awk -v s=$PRIM_SLICE '$1 == s {print $2}' <<<"$prims")
		[ "${p#node-}" != "$p" ] || fail "round $round: slice $PRIM_SLICE has no primary to kill"
		i=${p#node-}
	fi
	for s in $(awk -v n="node-$i" '$2 == n {print $1}' <<<"$prims"); do prim_victims="$prim_victims $s@$round"; done
	echo "$T: round $round: kill -9 node-$i (primaries of slices 0-3: $(awk '{print $2}' <<<"$prims" | sort -u | tr '\n' ' '))"
	cl_stop storage-$i KILL
	sleep $((2 + RANDOM % 3)) # deliberate (seeded schedule): the node stays down 2-4 s under load
	if [ $round = 3 ]; then
		echo "$T: round $round: kill -9 of the manager, restart 2 s later"
		cl_manager_outage "$HL_MGR" 2 hl_start_manager || fail "the manager did not restart"
	fi
	cl_start_storage "$i"
	t_restart=$(hl_now_ms)
	echo "$T: round $round: node-$i restarted; rows: $(hl_etcd summary "$vid")"
	kill -0 "$load" 2>/dev/null || break
	sleep $((2 + RANDOM % 3)) # deliberate (seeded schedule): 2-4 s of load between rounds
done
# The victims included a slice's primary at the time of its kill.
if [ -n "$prim_victims" ]; then
	echo "$T: primaries killed (slice@round):$prim_victims"
else
	check_fail "no victim was the primary of one of slices 0-3 when killed (round $PRIM_ROUND was to kill slice $PRIM_SLICE's)"
fi
echo "FIGURE: thrash: 5 kill/restart rounds + 1 manager restart in $((($(hl_now_ms) - t_start) / 1000)) s"

# Every slice back to 3 of 3 in sync within 60 s of the last restart (load running).
if ms=$(cl_wait_in_sync "$vid" --all 3 60); then
	echo "FIGURE: thrash: every slice 3/3 in sync $(($(hl_now_ms) - t_restart)) ms after the last restart"
else
	check_fail "not every slice was 3 of 3 in_sync within 60 s of the last restart"
fi

hl_load_end tvol $SIZE_B $CHUNK_B "thrash load"
