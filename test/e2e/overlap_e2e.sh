#!/usr/bin/env bash
# Overlapping writes in flight (issue 22, REPLICATION.md §1: backups apply a
# chunk's writes in the primary's version order). 3 daemons with --heal on
# and a real zipline-controller --manager=on.
# Phase 1 (e2e_order, acting as a primary towards one backup): two
# overlapping forwards whose payloads complete out of version order; the
# backup's copy must hold the newer one's data and version.
# Phase 2: a 3-replica volume; writers (e2e_load --overlap: QD 16, 4-64
# KiB writes inside one 192 KiB span of chunk 0 per run, each sector stamped
# with (offset, generation), every submission and acknowledgement in a
# fsynced log) keep many overlapping writes to one chunk in flight at once.
# Twice: kill -9 of the writer together with the chunk's primary (the
# overlapping writes in flight then stay the last ones of their span), a
# new writer on the next span through the new primary, restart of the dead
# node under it, the writer stops, every slice 3/3 in_sync again
# (cl_wait_in_sync: recovery copies a chunk in a pause of its writes). Then
# a last run and a read-back. Pass conditions:
#   - the writers that stopped had writes in flight over other writes in
#     flight (more than 500 of them), none failed, no bad sector in the
#     final read-back;
#   - `zl volume verify` exits 0, every replica's chunk files identical
#     (data and version), and each holds in every sector a write that no
#     acknowledged write submitted after it ended replaces (the last
#     acknowledged one, or one in flight with or after it: the killed
#     writers' last writes may or may not have landed);
#   - a new client reads the same back.
# Usage: overlap_e2e.sh BUILD_DIR. Environment: ZL_TEST_SEED (the writers'
# seeds; printed), KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test overlap_e2e

SIZE=64M
CHUNK=1M
SIZE_B=$((64 << 20))
CHUNK_B=$((1 << 20))
SPAN_B=$((192 << 10)) # five spans of chunk 0: one per writer run
SPAN=$SPAN_B
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
# One writer run per span of chunk 0 (SPAN bytes at OFF); each run replays
# the log of the ones before. load_start RUN OFF [FLAGS]
load_start() {
	rm -f "$CL_DIR/stop"
	# shellcheck disable=SC2086 # FLAGS are words
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume ovol --log "$LOG" --qd 16 \
		--seed $((SEED + $1)) --overlap "$2:$SPAN" --min-len 4K --max-len 64K \
		--stop-file "$CL_DIR/stop" ${3:-} >"$CL_DIR/load-$1.out" 2>"$CL_DIR/load-$1.err" &
	load=$!
	HL_PIDS="$HL_PIDS $load"
}
# load_stop RUN: stops the writer and checks its summary.
load_stop() {
	local out=$CL_DIR/load-$1.out
	hl_load_stop "$load" "$out" "$CL_DIR/load-$1.err" "overlap load (run $1)"
	over=$((over + $(sed -n 's/^LOAD: .* overlapping=\([0-9]*\).*/\1/p' "$out")))
}
# load_acks N SECS RUN WHAT: waits for N more acknowledged writes in the log.
load_acks() {
	local acks
	acks=$(grep -c '^A ' "$LOG" 2>/dev/null)
	cl_wait_count "$LOG" '^A ' $((${acks:-0} + $1)) "$2" ||
		{ cat "$CL_DIR/load-$3.err" >&2; fail "run $3: no $1 writes acknowledged within $2 s $4"; }
}

# Each round: a writer on its own span is killed (-9) together with the
# chunk's primary, so the overlapping writes in flight then are the last
# ones of that span (no later write hides a copy that applied them in
# another order); a second writer goes on, on the next span, through the
# new primary; the dead node restarts under it; the writer stops and every
# slice gets 3/3 in_sync.
over=0
for round in 1 2; do
	kr=$((round * 2 - 1)) cr=$((round * 2))
	load_start $kr $(((kr - 1) * SPAN_B))
	load_acks 300 30 $kr "after its start"
	victim=$(hl_etcd primary "$vid" 0) || fail "round $round: no primary for slice 0"
	i=${victim#node-}
	echo "$T: round $round: kill -9 of the writer and of $victim (primary of slice 0) after $(grep -c '^A ' "$LOG") acknowledged writes"
	kill -KILL "$load" "$(cl_pid storage-$i)"
	wait "$load" 2>/dev/null
	cl_stop storage-$i KILL
	# The next writer goes on with a new primary (the manager takes the
	# dead node out after its 10 s lease).
	load_start $cr $(((cr - 1) * SPAN_B))
	load_acks 300 90 $cr "after the kill"
	now=$(hl_etcd primary "$vid" 0) || fail "round $round: no primary for slice 0 after the kill"
	[ "$now" != "$victim" ] || fail "round $round: $victim still primary of slice 0 after it was killed"
	echo "$T: round $round: $now is primary of slice 0; restarting $victim under the load"
	cl_start_storage "$i"
	load_acks 300 60 $cr "after the restart"
	# Recovery copies a chunk in a pause of its writes: the writer stops.
	load_stop $cr
	ms=$(cl_wait_in_sync "$vid" --all 3 90) ||
		fail "round $round: not every slice 3 of 3 in_sync within 90 s of the writer's stop"
	echo "FIGURE: overlap: round $round: every slice 3/3 in sync $ms ms after the writer stopped"
done
# A last run on the healed cluster, read back whole.
load_start 5 $((4 * SPAN_B)) --final-check
load_acks 300 30 5 "on the healed cluster"
load_stop 5
grep -q '^CHECK: source=volume bad_sectors=0 read_error=none' "$CL_DIR/load-5.out" ||
	check_fail "final read-back of the load: $(grep '^CHECK:' "$CL_DIR/load-5.out" || echo 'not run')"
[ "$over" -gt 500 ] ||
	check_fail "only $over writes went out over a write in flight (want > 500): the test did not test overlapping writes"

hl_etcd insync "$vid" 3 || check_fail "after the load stopped not every slice is 3/3 in sync: $(hl_etcd summary "$vid")"
hl_end_oracles ovol "$vid" $SIZE_B $CHUNK_B "$LOG" --allowed "$CL_DIR"/load-*.err
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume ovol --log "$LOG" ||
	check_fail "a new client reads content that the acknowledged writes do not allow"

hl_end
