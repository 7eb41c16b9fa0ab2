#!/usr/bin/env bash
# Overlapping writes in flight (issue 22, REPLICATION.md §1: backups apply a
# chunk's writes in the primary's version order). 3 daemons with --heal on
# and a real zipline-controller --manager=on.
# Phase 1 (e2e_order, acting as a primary towards one backup): two
# overlapping forwards whose payloads complete out of version order; the
# backup's copy must hold the newer one's data and version.
# Phase 2: a 3-replica volume; a writer
# (e2e_load --overlap: every write inside the first 256 KiB of chunk 0, QD
# 16, 4-64 KiB, each sector stamped with (offset, generation), every
# submission and acknowledgement in a fsynced log) keeps many overlapping
# writes to one chunk in flight at once. Twice: kill -9 of the current
# primary of slice 0 (the chunk's) in the middle of the load, load on the
# new primary, restart under the load, the writer stops, every slice 3/3
# in_sync again (cl_wait_in_sync: recovery copies a chunk in a pause of its
# writes). Then a last run and a read-back. Pass conditions:
#   - the writers had writes in flight over other writes in flight (more
#     than 500 of them), none failed, no bad sector in the final read-back;
#   - `zl volume verify` exits 0, every replica's chunk files identical
#     (data and version), and each holds in every sector an acknowledged
#     write that no acknowledged write submitted after it ended replaces
#     (the last one, or one in flight with it);
#   - a new client reads the same back.
# Usage: overlap_e2e.sh BUILD_DIR. Environment: ZL_TEST_SEED (the load's
# seed and the pauses; printed), KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test overlap_e2e

SIZE=64M
CHUNK=1M
SIZE_B=$((64 << 20))
CHUNK_B=$((1 << 20))
SPAN=256K
cl_seed $T

hl_begin e2e-overlap "$1" || fail "cluster or manager did not start"

# Phase 1: forwards reaching a backup out of version order, made on purpose
# (e2e_order acts as the primary of a volume no client writes: the older
# write's payload completes after the newer one's). The backup must end
# with the newer write's data and version.
"$ZL" volume create rvol --size 4M --replicas 3 --chunk-size $CHUNK || fail "volume create rvol"
rvid=$(hl_vol_id rvol)
row=$(hl_etcd rows "$rvid" | awk '$1 == 0')
rprim=$(hl_etcd primary "$rvid" 0) || fail "no primary for slice 0 of rvol"
rbk=$(echo "$row" | tr ' ' '\n' | awk -F: -v p="$rprim" '$2 == "in_sync" && $1 != p {print $1; exit}')
[ -n "$rbk" ] || fail "no backup in rvol's row: $row"
rsv=$(echo "$row" | awk '{print $2}')
out=$("$CL_BIN/e2e_order" 127.0.0.1 "$(cat "$CL_DIR/storage-${rbk#node-}/port")" "$rvid" "$rsv" 0 \
	$(((1 << 32) + 1000)) 2>"$CL_DIR/order.err")
ord_rc=$?
echo "$T: forwards out of order to backup $rbk: $out"
[ $ord_rc = 0 ] || check_fail "backup $rbk applied two overlapping forwards out of version order: ${out:-$(cat "$CL_DIR/order.err")}"
"$ZL" volume rm rvol --force >/dev/null 2>&1 || "$ZL" volume rm rvol >/dev/null || fail "volume rm rvol"

# Phase 2: overlapping writes through the client, kill -9 of the primary.
"$ZL" volume create ovol --size $SIZE --replicas 3 --chunk-size $CHUNK || fail "volume create"
vid=$(hl_vol_id ovol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect ovol'"
LOG=$CL_DIR/load.log
# One writer run per round; each run replays the log of the ones before.
load_start() {
	rm -f "$CL_DIR/stop"
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume ovol --log "$LOG" --qd 16 \
		--seed $((SEED + $1)) --overlap $SPAN --min-len 4K --max-len 64K \
		--stop-file "$CL_DIR/stop" $2 >"$CL_DIR/load-$1.out" 2>"$CL_DIR/load-$1.err" &
	load=$!
	HL_PIDS="$HL_PIDS $load"
}
# load_stop ROUND: stops the writer and checks its summary.
load_stop() {
	local rc=0 out=$CL_DIR/load-$1.out
	touch "$CL_DIR/stop"
	for _ in $(seq 1 600); do kill -0 "$load" 2>/dev/null || break; sleep 0.2; done
	kill -0 "$load" 2>/dev/null && { kill -KILL "$load"; check_fail "round $1: the load generator did not stop within 120 s of the stop file (I/O hung)"; }
	wait "$load" || rc=$?
	grep -E 'failed|BAD|never' "$CL_DIR/load-$1.err" | head -10 >&2
	cat "$out"
	sed -n "s/^LOAD: /FIGURE: overlap load (run $1): /p" "$out"
	grep -q '^LOAD: .* failed=0 .*read_errors=0 bad_sectors=0' "$out" ||
		check_fail "round $1: the load saw failed writes, read errors or bad sectors: $(grep '^LOAD:' "$out" || echo 'no LOAD line')"
	over=$((over + $(sed -n 's/^LOAD: .* overlapping=\([0-9]*\).*/\1/p' "$out")))
	[ "$rc" = 0 ] || check_fail "round $1: e2e_load write exited $rc"
}

over=0
for round in 1 2; do
	load_start $round ""
	acks=$(grep -c '^A ' "$LOG" 2>/dev/null)
	cl_wait_count "$LOG" '^A ' $((${acks:-0} + 300)) 30 ||
		{ cat "$CL_DIR/load-$round.err" >&2; fail "round $round: the load did not get 300 writes acknowledged"; }
	victim=$(hl_etcd primary "$vid" 0) || fail "round $round: no primary for slice 0"
	i=${victim#node-}
	acks=$(grep -c '^A ' "$LOG")
	echo "$T: round $round: kill -9 of $victim (primary of slice 0) after $acks acknowledged writes"
	cl_stop storage-$i KILL
	# The load goes on with a new primary (the manager takes the dead node
	# out after its 10 s lease): 300 more writes acknowledged.
	cl_wait_count "$LOG" '^A ' $((acks + 300)) 90 ||
		{ cat "$CL_DIR/load-$round.err" >&2; fail "round $round: no 300 writes acknowledged within 90 s of the kill"; }
	now=$(hl_etcd primary "$vid" 0) || fail "round $round: no primary for slice 0 after the kill"
	[ "$now" != "$victim" ] || fail "round $round: $victim still primary of slice 0 after it was killed"
	echo "$T: round $round: $now is primary of slice 0; restarting $victim under the load"
	cl_start_storage "$i"
	acks=$(grep -c '^A ' "$LOG")
	cl_wait_count "$LOG" '^A ' $((acks + 300)) 60 ||
		{ cat "$CL_DIR/load-$round.err" >&2; fail "round $round: no 300 writes acknowledged within 60 s of the restart"; }
	# Recovery copies a chunk in a pause of its writes: the writer stops.
	load_stop $round
	ms=$(cl_wait_in_sync "$vid" --all 3 90) ||
		fail "round $round: not every slice 3 of 3 in_sync within 90 s of the writer's stop"
	echo "FIGURE: overlap: round $round: every slice 3/3 in sync $ms ms after the writer stopped"
done
# A last run on the healed cluster, read back whole.
load_start 3 --final-check
acks=$(grep -c '^A ' "$LOG")
cl_wait_count "$LOG" '^A ' $((acks + 300)) 30 || check_fail "no 300 writes acknowledged on the healed cluster"
load_stop 3
grep -q '^CHECK: source=volume bad_sectors=0 read_error=none' "$CL_DIR/load-3.out" ||
	check_fail "final read-back of the load: $(grep '^CHECK:' "$CL_DIR/load-3.out" || echo 'not run')"
[ "$over" -gt 500 ] ||
	check_fail "only $over writes went out over a write in flight (want > 500): the test did not test overlapping writes"

hl_etcd insync "$vid" 3 || check_fail "after the load stopped not every slice is 3/3 in sync: $(hl_etcd summary "$vid")"
hl_end_oracles ovol "$vid" $SIZE_B $CHUNK_B "$LOG" --exact "$CL_DIR"/load-*.err
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume ovol --log "$LOG" --exact ||
	check_fail "a new client reads content that the acknowledged writes do not allow"

hl_end
