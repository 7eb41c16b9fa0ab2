#!/usr/bin/env bash
# Acceptance test DELTA of issue 10 (replication that heals): 3 daemons with
# --heal on and a real zipline-controller --manager=on. A 1 GiB 3-replica
# volume (chunk 1 MiB) gets 256 MiB written spread over it (1 MiB every
# 4 MiB); the primary of slice 0 is killed (-9); 1 % of the volume is
# rewritten (random 64-256 KiB writes) while it is down; it restarts.
# Pass conditions:
#   - every write acknowledged (none failed) with the node down;
#   - every slice 3/3 in_sync within 60 s of the restart (time printed);
#   - bytes copied by recovery (the primaries' "recovery caught up ...
#     bytes_copied=" lines) <= chunks touched x chunk size, and so is the
#     number of chunk files the restarted node changed once it serves (mtime,
#     read from its data dir; its journal replay comes before) x chunk size;
#   - `zl volume verify` exits 0; every replica's chunk files identical
#     across the 3 replicas and exactly what the writes wrote; a new client
#     reads exactly that.
# Usage: delta_e2e.sh BUILD_DIR [--manager-restart] (kill -9 + restart of the
# manager 1 s into the recovery). KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test delta_e2e "${2:-}"

SIZE_B=$((1 << 30))
CHUNK_B=$((1 << 20))
hl_begin e2e-delta "$1" || fail "cluster or manager did not start"
"$ZL" volume create xvol --size 1G --replicas 3 --chunk-size 1M || fail "volume create"
vid=$(hl_vol_id xvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect xvol'"
LOG=$CL_DIR/load.log

t0=$(hl_now_ms)
"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume xvol --log "$LOG" --qd 8 --fill 4M:1M \
	>"$CL_DIR/fill.out" 2>"$CL_DIR/fill.err" || { cat "$CL_DIR/fill.out" "$CL_DIR/fill.err" >&2; fail "initial fill"; }
echo "FIGURE: delta: initial fill 256 MiB (1 MiB every 4 MiB) in $(($(hl_now_ms) - t0)) ms"

victim=$(hl_etcd primary "$vid" 0) || fail "no primary for slice 0"
vi=${victim#node-}
echo "$T: kill -9 $victim (primary of slice 0)"
cl_stop storage-$vi KILL
t0=$(hl_now_ms)
"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume xvol --log "$LOG" --qd 8 --seed 11 \
	--bytes $((SIZE_B / 100)) --min-len 64K --max-len 256K --seconds 170 \
	>"$CL_DIR/rewrite.out" 2>"$CL_DIR/rewrite.err"
rw_rc=$?
cat "$CL_DIR/rewrite.out"
touched=$(sed -n 's/^TOUCHED_CHUNKS //p' "$CL_DIR/rewrite.out")
[ -n "$touched" ] || { cat "$CL_DIR/rewrite.err" >&2; fail "the rewrite printed no TOUCHED_CHUNKS"; }
echo "FIGURE: delta: rewrite of 1 % ($((SIZE_B / 100 >> 20)) MiB) with $victim down: $(($(hl_now_ms) - t0)) ms, $touched chunks touched"
[ "$rw_rc" = 0 ] || check_fail "the rewrite with $victim down had failed writes or errors: $(grep '^LOAD' "$CL_DIR/rewrite.out") $(grep -m 3 failed "$CL_DIR/rewrite.err" | tr '\n' ' ')"
hl_etcd summary "$vid"

hl_log_mark "$CL_DIR/logmark"
n_serving=$(grep -c ' serving node=' "$CL_DIR/storage-$vi/log")
cl_start_storage "$vi"
t_restart=$(hl_now_ms)
# Chunk files changed by recovery are counted from the moment the daemon
# serves: on the journal write path its start-up first replays the journal
# (acknowledged writes, not recovery) and syncs the chunk files it touched.
for _ in $(seq 1 300); do
	[ "$(grep -c ' serving node=' "$CL_DIR/storage-$vi/log")" -gt "$n_serving" ] && break
	sleep 0.1
done
[ "$(grep -c ' serving node=' "$CL_DIR/storage-$vi/log")" -gt "$n_serving" ] || fail "$victim did not serve within 30 s of its restart"
t_restart_s=$(date +%s.%N)
if [ $MGR_RESTART = 1 ]; then
	sleep 1 # deliberate: the manager dies 1 s into the recovery, whatever it has done by then
	echo "$T: kill -9 of the manager 1 s into the recovery, restart 2 s later"
	cl_manager_outage "$HL_MGR" 2 hl_start_manager || fail "the manager did not restart"
fi
if ms=$(cl_wait_in_sync "$vid" --all 3 60); then
	echo "FIGURE: delta: every slice 3/3 in sync $(($(hl_now_ms) - t_restart)) ms after $victim restarted"
else
	check_fail "not every slice was 3 of 3 in_sync within 60 s of the restart of $victim"
fi

read -r copied chunks lines < <(hl_recovery_bytes "$CL_DIR/logmark")
limit=$((touched * CHUNK_B))
echo "FIGURE: delta: recovery copied $copied bytes in $chunks chunks ($lines 'recovery caught up' lines); limit $touched touched chunks x $CHUNK_B = $limit; a full copy of what it holds would be >= $((256 << 20))"
if [ "$lines" = 0 ]; then
	check_fail "no 'recovery caught up ... bytes_copied=' line in the storage logs after the restart: recovery did not run or does not log its figure"
else
	[ "$copied" -le "$limit" ] || check_fail "recovery copied $copied bytes, more than $touched touched chunks x $CHUNK_B = $limit"
	[ "$chunks" -ge 1 ] || check_fail "recovery copied nothing, yet $victim missed $touched chunks"
fi
changed=$(find "$CL_DIR/storage-$vi/data/chunks/$vid" -name '*.zlc' -newermt "@$t_restart_s" 2>/dev/null | wc -l)
echo "FIGURE: delta: chunk files changed on $victim since its restart: $changed (x $CHUNK_B = $((changed * CHUNK_B)) bytes at most)"
[ "$changed" -le "$touched" ] || check_fail "$victim rewrote $changed chunk files after its restart, more than the $touched chunks touched while it was down"

hl_end_oracles xvol "$vid" $SIZE_B $CHUNK_B "$LOG" --exact "$CL_DIR"/fill.err "$CL_DIR"/rewrite.err
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume xvol --log "$LOG" --exact ||
	check_fail "a new client reads content that is not what the acknowledged writes wrote"

hl_end
