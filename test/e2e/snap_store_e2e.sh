#!/usr/bin/env bash
# Snapshots on the storage side (docs/SNAPSHOTS.md §6 step 2): 3 daemons with
# --heal on, no manager (nothing fails here); the test plays the snapshot
# taker by editing the volume record (snap_seq, snaps) in etcd and talks raw
# wire to the daemons (e2e_chunk). A chunk is written at sequence 0, a
# snapshot (sequence 1) is taken, the chunk is rewritten at sequence 1. Pass
# conditions (the oracle: the bytes the test wrote, compared byte for byte):
#   - READ at sequence 1 answers the old data on the primary and, with
#     ZL_WF_ANY, on every replica (each took its clone at the same write);
#     the live READ answers the new data, on every replica too;
#   - a write at sequence 0 and a write without a sequence are refused
#     SNAPSEQ, the latter logged as a client too old for a snapshotted volume;
#   - the snapshot removed from the record, every replica's clone file goes
#     (bounded wait on the file count) and the live data stays.
# Usage: snap_store_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
T=snap_store_e2e
fail() {
	echo "$T: FAIL: $*" >&2
	cl_dump_logs 25 "$CL_DIR"/storage-*/log
	exit 1
}
CHUNK=65536
export CL_STORAGE_FLAGS="--log-level info"
CL_MANAGER=0 cl_e2e_begin e2e-snapstore "$1" 3 --heal on || fail "cluster did not start"

"$ZL" volume create svol --size 1M --replicas 3 --chunk-size 64K || fail "volume create"
vid=$(hl_vol_id svol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect svol'"
prim=$(hl_etcd primary "$vid" 0) || fail "no primary for slice 0"
sv=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
port() { cat "$CL_DIR/storage-${1#node-}/port"; }
# chunk NODE ARGS...: one raw request (e2e_chunk) to NODE; prints its status.
chunk() {
	local node=$1 out
	shift
	out=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$(port "$node")" "$@" 2>"$CL_DIR/chunk.err") ||
		fail "e2e_chunk $node $*: $(cat "$CL_DIR/chunk.err")"
	echo "$out" | sed -n 's/^status=\([^ ]*\).*/\1/p'
}
# expect WHAT WANT GOT
expect() { [ "$3" = "$2" ] || fail "$1: status $3, want $2"; }
# clones NODE: clone chunk files (ids with a sequence above bit 40) of vid on NODE.
clones() {
	find "$CL_DIR/storage-${1#node-}/data/chunks/$vid" -name '*.zlc' 2>/dev/null |
		grep -vc '/000000[0-9a-f]\{10\}\.zlc$' || true
}

head -c $CHUNK /dev/urandom >"$CL_DIR/old"
head -c $CHUNK /dev/urandom >"$CL_DIR/new"
expect "write at sequence 0" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/old" 10000 seq=0)"

# A snapshot: sequence 1 exists. The write at 1 follows at once, racing the
# daemons' watch: one that has not seen the record yet reloads it first.
hl_etcd snaps "$vid" 1 1 || fail "setting snap_seq=1 snaps=[1]"
expect "write at sequence 1" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/new" 10000 seq=1)"

for n in node-1 node-2 node-3; do
	[ "$n" = "$prim" ] && nl=primary || nl=backup
	expect "READ ANY at sequence 1 on $n" OK \
		"$(chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any seq=1 "$CL_DIR/snap-$n")"
	cmp -s "$CL_DIR/old" "$CL_DIR/snap-$n" || fail "snapshot 1 read on $n ($nl) is not the data written before it"
	expect "live READ ANY on $n" OK "$(chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any "$CL_DIR/live-$n")"
	cmp -s "$CL_DIR/new" "$CL_DIR/live-$n" || fail "live read on $n ($nl) is not the data written last"
	[ "$(clones "$n")" = 1 ] || fail "$n holds $(clones "$n") clone chunk files of $vid, want 1"
done
expect "READ at sequence 1 on the primary" OK \
	"$(chunk "$prim" read "$vid" 0 0 $CHUNK "$sv" seq=1 "$CL_DIR/snap-prim")"
cmp -s "$CL_DIR/old" "$CL_DIR/snap-prim" || fail "snapshot 1 read on the primary $prim is not the old data"
expect "live READ on the primary" OK "$(chunk "$prim" read "$vid" 0 0 $CHUNK "$sv" "$CL_DIR/live-prim")"
cmp -s "$CL_DIR/new" "$CL_DIR/live-prim" || fail "live read on the primary $prim is not the new data"
echo "$T: snapshot 1 reads the old data and the live chunk the new one on every replica"

# Writers that missed the snapshot are refused, the data stays.
expect "write at sequence 0 after snapshot 1" ZL_ERR_SNAPSEQ \
	"$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/old" 10000 seq=0)"
expect "write without a sequence to a snapshotted volume" ZL_ERR_SNAPSEQ \
	"$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/old" 10000)"
grep -q "write refused: vol=$vid .*too old for a snapshotted volume" "$CL_DIR/storage-${prim#node-}/log" ||
	fail "the primary did not log the write without a sequence as a too old client"
for n in node-1 node-2 node-3; do
	chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any "$CL_DIR/live-$n" >/dev/null
	cmp -s "$CL_DIR/new" "$CL_DIR/live-$n" || fail "a refused write changed the live data on $n"
	chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any seq=1 "$CL_DIR/snap-$n" >/dev/null
	cmp -s "$CL_DIR/old" "$CL_DIR/snap-$n" || fail "a refused write changed snapshot 1 on $n"
done
echo "$T: writes at sequence 0 and without a sequence refused SNAPSEQ"

# The snapshot is deleted: every replica removes its clone.
hl_etcd snaps "$vid" 1 || fail "setting snaps=[]"
for _ in $(seq 1 100); do
	left=0
	for n in node-1 node-2 node-3; do left=$((left + $(clones "$n"))); done
	[ "$left" = 0 ] && break
	sleep 0.1
done
[ "$left" = 0 ] || fail "$left clone chunk files of $vid left 10 s after the snapshot was deleted"
for n in node-1 node-2 node-3; do
	chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any "$CL_DIR/live-$n" >/dev/null
	cmp -s "$CL_DIR/new" "$CL_DIR/live-$n" || fail "live data on $n changed when the snapshot went"
done
grep -q "clone chunks no snapshot needs removed: vol=$vid" "$CL_DIR"/storage-1/log ||
	fail "node-1 did not log the removal of the clone"
echo "$T: PASS"
