#!/usr/bin/env bash
# E2E of snapshots (issue 25 step 3, docs/SNAPSHOTS.md §3): etcd, the
# manager and three storage daemons; a 3-replica volume written by e2e_snap,
# a lib/client writer that serves the volume's snapshots (the switch) and
# logs every write's submission and acknowledgement. While it writes, `zl
# snapshot create` runs every 1.5 s (through the writer: its snapwriters key
# is live), each call timed. After the load, every snapshot is exported
# (`zl snapshot export`, one with `zl volume export --snapshot`) and checked
# by snap_check.py: writes acknowledged before the call started are in it,
# writes issued after it returned are not; the same for a second volume
# whose writer writes through a follower handle on another client and
# thread (e2e_snap --follow, zl_vol_snap_follow), 3 snapshots. Then `zl snapshot ls`, `zl volume
# inspect` and `zl snapshot rm` agree with what was taken, and `zl volume
# verify` finds every replica equal, live and in every snapshot left.
# Before that, a clone of each snapshot reads as the snapshot, and a write
# to each clone changes neither the snapshot nor the volume. Half-way
# through the snapshots a storage daemon is killed -9 just before one is
# taken and started again after it (the manager turns it out, then
# recovering): before verify it must be in sync again in every row, and
# verify reads it too. At the end everything is deleted and no chunk file or
# etcd key is left.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
SNAPS=${SNAPS:-8}
fail() {
	echo "snap_e2e: FAIL: $*" >&2
	cl_dump_logs 20 "$CL_DIR"/storage-*/log "$CL_DIR"/writer.log
	[ -z "${wpid:-}" ] || kill "$wpid" 2>/dev/null || true # the writer this test started
	exit 1
}
cl_e2e_begin e2e-snap "$1" 3 || fail "cluster did not start"
now_ns() { date +%s%N; }
# writer_ready: waits for the writer ($wpid) to serve the snapshots.
writer_ready() {
	for _ in $(seq 1 100); do
		[ -e "$CL_DIR/ready" ] && return 0
		kill -0 "$wpid" 2>/dev/null || fail "the writer exited early: $(cat "$CL_DIR/writer.log")"
		sleep 0.1
	done
	fail "the writer did not start serving in 10 s"
}
files0=$(cl_chunk_files)
keys0=$(cl_vol_keys)

"$ZL" volume create sv --size 16M --replicas 3 --chunk-size 64K >/dev/null || fail "create"
"$CL_BIN/e2e_snap" --etcd "$CL_ETCD" --volume sv --log "$CL_DIR/writes.log" \
	--seconds 300 --qd 16 --ready "$CL_DIR/ready" --stop "$CL_DIR/stop" >"$CL_DIR/writer.log" 2>&1 &
wpid=$!
writer_ready
sleep 1
: >"$CL_DIR/snaps"
for i in $(seq 1 "$SNAPS"); do
	# Half-way: a storage daemon killed -9 as the snapshot is taken, back
	# once it is (its copies catch up: writes, and the snapshot's clones).
	[ "$i" != $((SNAPS / 2)) ] || cl_stop storage-2 KILL
	t0=$(now_ns)
	out=$("$ZL" snapshot create sv "s$i" --timeout 20) || fail "snapshot create s$i: $out"
	t1=$(now_ns)
	if [ "$i" = $((SNAPS / 2)) ]; then
		cl_start_storage 2
		echo "snap_e2e: storage-2 killed -9 before s$i, started again after it"
	fi
	grep -q "created snapshot 's$i' .* at sequence $i, taken by client e2e_snap" <<<"$out" ||
		fail "snapshot s$i not taken through the writer: $out"
	echo "s$i $t0 $t1 $CL_DIR/s$i.img" >>"$CL_DIR/snaps"
	echo "snap_e2e: s$i taken in $(((t1 - t0) / 1000000)) ms"
	sleep 1.5
done
: >"$CL_DIR/stop" # the writer ends once every snapshot was taken through it
wait "$wpid" || fail "the writer failed: $(cat "$CL_DIR/writer.log")"
grep "^e2e_snap:" "$CL_DIR/writer.log"

"$ZL" volume export sv "$CL_DIR/live.img" >/dev/null || fail "export of the volume"
for i in $(seq 1 "$SNAPS"); do
	if [ "$i" = 1 ]; then
		"$ZL" volume export sv "$CL_DIR/s$i.img" --snapshot "s$i" >/dev/null || fail "export s$i"
	else
		"$ZL" snapshot export "s$i" "$CL_DIR/s$i.img" >/dev/null || fail "export s$i"
	fi
done
python3 "$SRC/test/e2e/snap_check.py" "$CL_DIR/writes.log" "$CL_DIR/live.img" "$CL_DIR/snaps" ||
	fail "a snapshot does not hold what was acknowledged at its time"

# The same rule when the writes go through another handle of the volume,
# on a client and thread of its own, that follows the serving handle's
# switch (e2e_snap --follow, zl_vol_snap_follow: the ublk frontend's queue
# threads): 3 snapshots of a second volume, checked alike, then removed.
"$ZL" volume create sf --size 4M --replicas 3 --chunk-size 64K >/dev/null || fail "create sf"
rm -f "$CL_DIR/ready"
"$CL_BIN/e2e_snap" --etcd "$CL_ETCD" --volume sf --log "$CL_DIR/writes-f.log" --follow \
	--seconds 120 --qd 16 --ready "$CL_DIR/ready" --stop "$CL_DIR/stop-f" >"$CL_DIR/writer.log" 2>&1 &
wpid=$!
writer_ready
: >"$CL_DIR/snaps-f"
for i in 1 2 3; do
	sleep 1
	t0=$(now_ns)
	out=$("$ZL" snapshot create sf "f$i" --timeout 20) || fail "snapshot create f$i: $out"
	t1=$(now_ns)
	grep -q "created snapshot 'f$i' .* at sequence $i, taken by client e2e_snap" <<<"$out" ||
		fail "snapshot f$i not taken through the writer's lead handle: $out"
	echo "f$i $t0 $t1 $CL_DIR/f$i.img" >>"$CL_DIR/snaps-f"
done
: >"$CL_DIR/stop-f"
wait "$wpid" || fail "the follower writer failed: $(cat "$CL_DIR/writer.log")"
wpid=
grep "^e2e_snap:" "$CL_DIR/writer.log"
"$ZL" volume export sf "$CL_DIR/live-f.img" >/dev/null || fail "export of sf"
for i in 1 2 3; do
	"$ZL" snapshot export "f$i" "$CL_DIR/f$i.img" >/dev/null || fail "export f$i"
done
python3 "$SRC/test/e2e/snap_check.py" "$CL_DIR/writes-f.log" "$CL_DIR/live-f.img" "$CL_DIR/snaps-f" ||
	fail "a snapshot of writes through a follower handle does not hold what was acknowledged at its time"
for i in 1 2 3; do
	"$ZL" snapshot rm "f$i" >/dev/null || fail "snapshot rm f$i"
	rm -f "$CL_DIR/f$i.img"
done
"$ZL" volume rm sf >/dev/null || fail "volume rm sf"
echo "snap_e2e: writes through a follower handle: 3 snapshots hold what was acknowledged at their time"

# A clone of each snapshot reads as the snapshot (byte for byte: the
# snapshot's image was checked against the write log above); a write to
# each clone shows there only, never in the snapshot or the volume.
t_cl=$SECONDS
head -c 1M /dev/urandom >"$CL_DIR/cw.img"
for i in $(seq 1 "$SNAPS"); do
	"$ZL" volume clone sv "c$i" --from-snapshot "s$i" >/dev/null || fail "clone c$i of s$i"
	"$ZL" volume export "c$i" "$CL_DIR/c$i.img" >/dev/null || fail "export c$i"
	cmp -s "$CL_DIR/s$i.img" "$CL_DIR/c$i.img" || fail "clone c$i does not read as snapshot s$i"
	"$ZL" volume import "c$i" "$CL_DIR/cw.img" >/dev/null || fail "write to c$i"
done
for i in $(seq 1 "$SNAPS"); do
	"$ZL" volume export "c$i" "$CL_DIR/c$i.img" >/dev/null || fail "export c$i after its write"
	cmp -s -n 1048576 "$CL_DIR/cw.img" "$CL_DIR/c$i.img" || fail "c$i lost its own write"
	cmp -s -i 1048576 "$CL_DIR/s$i.img" "$CL_DIR/c$i.img" ||
		fail "c$i past its write is not snapshot s$i any more"
	"$ZL" snapshot export "s$i" "$CL_DIR/s$i-b.img" >/dev/null || fail "export s$i again"
	cmp -s "$CL_DIR/s$i.img" "$CL_DIR/s$i-b.img" || fail "a write to clone c$i changed snapshot s$i"
	rm -f "$CL_DIR/s$i-b.img"
done
"$ZL" volume export sv "$CL_DIR/live-b.img" >/dev/null || fail "export of the volume again"
cmp -s "$CL_DIR/live.img" "$CL_DIR/live-b.img" || fail "writes to the clones changed the volume"
for i in $(seq 1 "$SNAPS"); do
	"$ZL" volume rm "c$i" >/dev/null || fail "volume rm c$i"
	rm -f "$CL_DIR/c$i.img"
done
echo "snap_e2e: a clone of each of the $SNAPS snapshots read as it; writes to the clones stayed there ($((SECONDS - t_cl)) s)"

ls_out=$("$ZL" snapshot ls sv) || fail "snapshot ls"
[ "$(grep -c ' sv ' <<<"$ls_out")" -eq "$SNAPS" ] || fail "snapshot ls does not list $SNAPS: $ls_out"
insp=$("$ZL" volume inspect sv) || fail "inspect"
grep -q "^snap seq    $SNAPS\$" <<<"$insp" || fail "inspect: snap seq: $insp"
grep -q "^snapshots   $SNAPS\$" <<<"$insp" || fail "inspect: snapshots: $insp"
"$ZL" snapshot rm s1 >/dev/null || fail "snapshot rm"
[ "$("$ZL" snapshot ls sv | grep -c ' sv ')" -eq $((SNAPS - 1)) ] || fail "rm left s1 listed"
# The snapshot after it still reads the same.
"$ZL" snapshot export s2 "$CL_DIR/s2b.img" >/dev/null || fail "export s2 after rm s1"
cmp -s "$CL_DIR/s2.img" "$CL_DIR/s2b.img" || fail "s2 changed after s1 was removed"
# Every replica holds the same live chunks and the same chunks of every
# snapshot left (zl volume verify reads each at the snapshot's sequence).
# storage-2 (killed during s$((SNAPS / 2))) is back in sync everywhere first.
vid=$("$ZL" volume inspect sv | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
ms=$(cl_wait_in_sync "$vid" --all 3 120) || fail "not every row 3 of 3 in sync again"
echo "snap_e2e: every row 3 of 3 in sync again ($ms ms after the load)"
t_vf=$SECONDS
vout=$("$ZL" volume verify sv 2>&1) || fail "verify of the volume and its snapshots: $vout"
want="256 chunks compared on their in-sync members and $((256 * (SNAPS - 1))) snapshot chunks across $((SNAPS - 1)) snapshots, 0 differences"
grep -q "^verify of volume 'sv': $want\$" <<<"$vout" || fail "verify: $vout"
vout=$("$ZL" volume verify sv --snapshot s2 2>&1) || fail "verify --snapshot s2: $vout"
grep -q "^verify of volume 'sv': 0 chunks compared on their in-sync members and 256 snapshot chunks across 1 snapshot, 0 differences\$" <<<"$vout" ||
	fail "verify --snapshot s2: $vout"
echo "snap_e2e: zl volume verify clean on the volume and its $((SNAPS - 1)) snapshots ($((SECONDS - t_vf)) s)"
# Everything deleted: no chunk file, no etcd key left.
for i in $(seq 2 "$SNAPS"); do
	"$ZL" snapshot rm "s$i" >/dev/null || fail "snapshot rm s$i"
done
"$ZL" volume rm sv >/dev/null || fail "volume rm sv"
cl_wait_leak_free "$files0" "$keys0" 20 ||
	fail "left: $(cl_chunk_files) chunk files (had $files0), $(cl_vol_keys) etcd keys (had $keys0)"
echo "snap_e2e: nothing left after the deletes ($files0 chunk files, $keys0 volume keys)"
echo "snap_e2e: PASS"
