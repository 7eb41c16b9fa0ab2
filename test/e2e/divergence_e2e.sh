#!/usr/bin/env bash
# Acceptance test DIVERGENCE of issue 10 (replication that heals): 3
# daemons with --heal on and a real zipline-controller --manager=on. A
# writer (e2e_load: QD32, each sector encodes (offset, generation), every
# submission fsynced to a log before it goes out, every acknowledgement
# logged and fsynced before the next submissions) and the primary of slice 0
# are killed together (one kill -9) in the middle of forwarded writes, so
# backups may hold writes the dead primary never acknowledged. Pass
# conditions:
#   - the manager gives every slice the dead node was primary of a new
#     primary (within 40 s; the node lease is 10 s);
#   - with the node still down, a new client reads every acknowledged write
#     back, and every other sector old or new (never garbage, never older
#     than the last acknowledged write);
#   - the dead node restarts: every slice 3/3 in_sync within 60 s; the
#     volume content did not change (a read never goes backwards or sideways
#     without a write);
#   - `zl volume verify` exits 0; every replica's chunk files, read
#     directly, identical across the 3 replicas and allowed by the log.
# Usage: divergence_e2e.sh BUILD_DIR [--manager-restart] (kill -9 + restart of
# the manager while the new primaries are being chosen). KEEP=1 keeps the
# state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
hl_test divergence_e2e "${2:-}"

SIZE_B=$((128 << 20))
CHUNK_B=$((1 << 20))
hl_begin e2e-diverge "$1" || fail "cluster or manager did not start"
"$ZL" volume create dvol --size 128M --replicas 3 --chunk-size 1M || fail "volume create"
vid=$(hl_vol_id dvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect dvol'"
LOG=$CL_DIR/load.log

victim=$(hl_etcd primary "$vid" 0) || fail "no primary for slice 0"
vi=${victim#node-}
prim_slices=$(hl_etcd rows "$vid" | awk -v n="$victim" '{for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) {if ($i == n ":in_sync") print $1; break}}' | tr '\n' ' ')
echo "$T: $victim is primary of slices: $prim_slices"

"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume dvol --log "$LOG" --qd 32 --seed 7 \
	--min-len 4K --max-len 512K --seconds 300 >"$CL_DIR/load.out" 2>"$CL_DIR/load.err" &
load=$!
HL_PIDS="$HL_PIDS $load"
# Writes flowing for a few seconds, then writer and primary die together.
for _ in $(seq 1 100); do
	n=$(grep -c '^A ' "$LOG" 2>/dev/null)
	[ "${n:-0}" -ge 200 ] && break
	kill -0 "$load" 2>/dev/null || break
	sleep 0.1
done
sleep 1 # deliberate: writes go on flowing (QD 32 in flight) when writer and primary die
kill -0 "$load" 2>/dev/null || { cat "$CL_DIR/load.err" >&2; fail "the writer died before the kill"; }
vpid=$(cl_pid storage-$vi)
kill -KILL "$load" "$vpid"
t_kill=$(hl_now_ms)
wait "$load" 2>/dev/null
cl_stop storage-$vi KILL
acked=$(grep -c '^A ' "$LOG")
subm=$(grep -c '^S ' "$LOG")
echo "FIGURE: divergence: writer and primary $victim killed together: $subm writes submitted, $acked acknowledged, $((subm - acked)) unacknowledged"
[ "$acked" -ge 100 ] || fail "only $acked writes were acknowledged before the kill: the load did not run"

if [ $MGR_RESTART = 1 ]; then
	sleep 1 # deliberate: the manager dies 1 s into its handling of the kill, whatever it has done by then
	echo "$T: kill -9 of the manager, restart 2 s later"
	cl_manager_outage "$HL_MGR" 2 hl_start_manager || fail "the manager did not restart"
fi

# The manager gives every slice a live primary.
t_new=""
for _ in $(seq 1 200); do
	left=$(hl_etcd rows "$vid" | awk -v n="$victim" '{for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) {if ($i == n ":in_sync") print $1; break}}' | wc -l)
	[ "$left" = 0 ] && { t_new=$(hl_now_ms); break; }
	sleep 0.2
done
if [ -n "$t_new" ]; then
	echo "FIGURE: divergence: new primaries for the slices of $victim $((t_new - t_kill)) ms after the kill"
else
	check_fail "40 s after the kill $left slices still have $victim as their primary"
fi

# With the old primary down: every acknowledged write reads back.
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume dvol --log "$LOG" >"$CL_DIR/check1.out" 2>"$CL_DIR/check1.err" ||
	check_fail "with $victim down, a new client does not read back what the log allows: $(grep '^CHECK' "$CL_DIR/check1.out") $(grep -m 3 -E 'BAD|failed' "$CL_DIR/check1.err" | tr '\n' ' ')"
cat "$CL_DIR/check1.out"
timeout 120 "$ZL" volume export dvol "$CL_DIR/img1" 2>/dev/null || check_fail "export with $victim down"

cl_start_storage "$vi"
t_restart=$(hl_now_ms)
if ms=$(cl_wait_in_sync "$vid" --all 3 60); then
	echo "FIGURE: divergence: every slice 3/3 in sync $(($(hl_now_ms) - t_restart)) ms after $victim restarted"
else
	check_fail "not every slice was 3 of 3 in_sync within 60 s of the restart of $victim"
fi
timeout 120 "$ZL" volume export dvol "$CL_DIR/img2" 2>/dev/null || check_fail "export after the restart"
if [ -f "$CL_DIR/img1" ] && [ -f "$CL_DIR/img2" ]; then
	cmp -s "$CL_DIR/img1" "$CL_DIR/img2" ||
		check_fail "the volume content changed without a write when $victim came back (first difference: $(cmp "$CL_DIR/img1" "$CL_DIR/img2" 2>&1 | head -1))"
fi
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume dvol --log "$LOG" >"$CL_DIR/check2.out" 2>"$CL_DIR/check2.err" ||
	check_fail "after the restart, a new client does not read back what the log allows: $(grep '^CHECK' "$CL_DIR/check2.out") $(grep -m 3 -E 'BAD|failed' "$CL_DIR/check2.err" | tr '\n' ' ')"

hl_end_oracles dvol "$vid" $SIZE_B $CHUNK_B "$LOG" --allowed "$CL_DIR/load.err" "$CL_DIR"/check*.err

hl_end
