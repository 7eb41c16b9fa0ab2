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
# Then recovery (the test plays the manager, as heal_e2e): snapshot 2 is
# taken, a backup of the chunk is killed (-9), the chunk is rewritten at
# sequence 2 while it is down (the others clone it), the backup returns
# and recovers. Pass: every replica holds the one clone, snapshot 2 reads
# the data written before it and the live chunk the data written after,
# on every replica, also after one more write at sequence 2 (the recovered
# backup takes no second clone); a chunk first written at sequence 2 while
# the backup was down (a clone of the absent chunk: zeros, version 0) is
# recovered too, its clone file made on the backup. Then `zl volume verify` (live chunks and
# snapshot 2) is clean, and after one byte of one replica's clone file is
# flipped it reports exactly that snapshot, chunk and replica and exits 1.
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
export CL_STORAGE_FLAGS="--log-level info --repl-wait 30"
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
# check_all SEQ SNAP LIVE: on every replica (with ZL_WF_ANY), chunk 0 read at
# sequence SEQ is the file SNAP, read live the file LIVE, and one clone file.
check_all() {
	local n role
	for n in node-1 node-2 node-3; do
		[ "$n" = "$prim" ] && role=primary || role=backup
		expect "READ ANY at sequence $1 on $n" OK \
			"$(chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any seq="$1" "$CL_DIR/snap-$n")"
		cmp -s "$CL_DIR/$2" "$CL_DIR/snap-$n" ||
			fail "snapshot $1 read on $n ($role) is not $2, the data written before it"
		expect "live READ ANY on $n" OK "$(chunk "$n" read "$vid" 0 0 $CHUNK "$sv" any "$CL_DIR/live-$n")"
		cmp -s "$CL_DIR/$3" "$CL_DIR/live-$n" || fail "live read on $n ($role) is not $3, the data written last"
		[ "$(clones "$n")" = "${want_clones:-1}" ] ||
			fail "$n holds $(clones "$n") clone chunk files of $vid, want ${want_clones:-1}"
	done
}

head -c $CHUNK /dev/urandom >"$CL_DIR/old"
head -c $CHUNK /dev/urandom >"$CL_DIR/new"
expect "write at sequence 0" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/old" 10000 seq=0)"

# A snapshot: sequence 1 exists. The write at 1 follows at once, racing the
# daemons' watch: one that has not seen the record yet reloads it first.
hl_etcd snaps "$vid" 1 1 || fail "setting snap_seq=1 snaps=[1]"
expect "write at sequence 1" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/new" 10000 seq=1)"

check_all 1 old new
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
echo "$T: the deleted snapshot's clones are gone on every replica"

# Recovery of clone chunks. d1: the data snapshot 2 holds; d2: written at
# sequence 2 while a backup is down; d3: one more write once it is back.
head -c $CHUNK /dev/urandom >"$CL_DIR/d1"
head -c $CHUNK /dev/urandom >"$CL_DIR/d2"
head -c $CHUNK /dev/urandom >"$CL_DIR/d3"
expect "write d1 at sequence 1" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/d1" 10000 seq=1)"
hl_etcd snaps "$vid" 2 2 || fail "setting snap_seq=2 snaps=[2]"
bk=$(hl_etcd rows "$vid" | awk '$1 == 0' | tr ' ' '\n' | awk -F: -v p="$prim" '$2 == "in_sync" && $1 != p {print $1; exit}')
[ -n "$bk" ] || fail "no backup in slice 0's row"
echo "$T: killing backup $bk (-9), rewriting chunk 0 at sequence 2 without it"
cl_stop "storage-${bk#node-}" KILL
"$CL_BIN/e2e_chunk" 127.0.0.1 "$(port "$prim")" write "$vid" 0 0 "$sv" "$CL_DIR/d2" 60000 seq=2 \
	>"$CL_DIR/w2.out" 2>"$CL_DIR/w2.err" &
w2=$!
for _ in $(seq 1 150); do
	[ -n "$(hl_etcd reports "$vid" | awk -v b="$bk" '$3 == b')" ] && break
	sleep 0.1
done
[ -n "$(hl_etcd reports "$vid" | awk -v b="$bk" '$3 == b')" ] || fail "no failure report about $bk"
# OUT, then RECOVERING at once, as a manager does when the node is back
# before the primary's next look: the primary never sees the OUT, and the
# write it failed to forward must not leave $bk suspect after its recovery
# (its later writes would reach $bk without a version, and
# zl volume verify below would find $bk's chunk 0 a version behind).
hl_etcd set "$vid" "$bk" out recovering || fail "marking $bk out, then recovering"
wait "$w2" || fail "e2e_chunk write d2: $(cat "$CL_DIR/w2.err")"
grep -q '^status=OK' "$CL_DIR/w2.out" || fail "write d2 at sequence 2 with $bk down: $(cat "$CL_DIR/w2.out")"
sv=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
# Chunk zc was never written: its first write (4 KiB at sequence 2, $bk
# down) makes the others a clone of the absent chunk, zeros at version 0,
# which recovery must copy to $bk as well (a file that holds nothing).
zc=5
zs=$((zc % $(hl_etcd rows "$vid" | wc -l)))
zp=$(hl_etcd primary "$vid" "$zs") || fail "no primary for slice $zs"
zsv=$(hl_etcd rows "$vid" | awk -v s="$zs" '$1 == s {print $2}')
head -c 4096 /dev/urandom >"$CL_DIR/z4k"
expect "write 4 KiB to the never-written chunk $zc at sequence 2" OK \
	"$(chunk "$zp" write "$vid" "$zc" 0 "$zsv" "$CL_DIR/z4k" 10000 seq=2)"
want_clones=2

cl_start_storage "${bk#node-}"
cl_wait_nodes 3 || fail "$bk did not register again"
n_slices=$(hl_etcd rows "$vid" | grep -c "$bk:")
got=$(hl_wait_caught_up "$vid" "$bk" "$n_slices" 60) || true
[ "$got" -ge "$n_slices" ] || fail "only $got of $n_slices slices reported $bk CAUGHT_UP"
hl_etcd set "$vid" "$bk" in_sync || fail "marking $bk in sync"
sv=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
grep -q "recovery caught up: vol=$vid slice=0 member=$bk chunks_copied=[1-9]" "$CL_DIR"/storage-*/log ||
	fail "the recovery of slice 0 copied nothing to $bk"
check_all 2 d1 d2
head -c $CHUNK /dev/zero >"$CL_DIR/zeros"
cp "$CL_DIR/zeros" "$CL_DIR/zlive" && dd if="$CL_DIR/z4k" of="$CL_DIR/zlive" conv=notrunc status=none
zsv=$(hl_etcd rows "$vid" | awk -v s="$zs" '$1 == s {print $2}')
for n in node-1 node-2 node-3; do
	expect "READ ANY of chunk $zc at sequence 2 on $n" OK \
		"$(chunk "$n" read "$vid" "$zc" 0 $CHUNK "$zsv" any seq=2 "$CL_DIR/zsnap-$n")"
	cmp -s "$CL_DIR/zeros" "$CL_DIR/zsnap-$n" || fail "snapshot 2 of chunk $zc on $n is not zeros"
	expect "live READ ANY of chunk $zc on $n" OK \
		"$(chunk "$n" read "$vid" "$zc" 0 $CHUNK "$zsv" any "$CL_DIR/zlive-$n")"
	cmp -s "$CL_DIR/zlive" "$CL_DIR/zlive-$n" || fail "chunk $zc on $n is not its 4 KiB write"
done
echo "$T: after recovery every replica holds the clones (also of a chunk never written before) and the live chunks"
expect "write d3 at sequence 2" OK "$(chunk "$prim" write "$vid" 0 0 "$sv" "$CL_DIR/d3" 10000 seq=2)"
# Chunk $zc's first write failed to reach $bk while it was RECOVERING (and
# down); the pass that recovered it started after that and compared every
# chunk, so this rewrite must reach $bk with its version (verify compares).
zp=$(hl_etcd primary "$vid" "$zs") || fail "no primary for slice $zs"
zsv=$(hl_etcd rows "$vid" | awk -v s="$zs" '$1 == s {print $2}')
expect "rewrite chunk $zc at sequence 2 with $bk in sync" OK \
	"$(chunk "$zp" write "$vid" "$zc" 0 "$zsv" "$CL_DIR/z4k" 10000 seq=2)"
check_all 2 d1 d3

# zl volume verify compares the snapshot too (READ ANY at its sequence on
# every member): clean now; then one byte of one replica's clone file of
# chunk 0 (id (2 << 40) | 0) flipped behind its daemon: verify names
# snapshot 2, chunk 0 and that replica, and only it, and exits 1.
"$ZL" volume verify svol >"$CL_DIR/verify.out" 2>&1 || fail "verify with a snapshot: $(cat "$CL_DIR/verify.out")"
grep -q "^verify of volume 'svol': 16 chunks compared on their in-sync members and 16 snapshot chunks across 1 snapshot, 0 differences$" \
	"$CL_DIR/verify.out" || fail "verify summary: $(cat "$CL_DIR/verify.out")"
"$ZL" volume verify svol --json >"$CL_DIR/verify.json" 2>&1 || fail "verify --json: $(cat "$CL_DIR/verify.json")"
grep -q '"differences":\[\],"chunks":16,"snapshot_chunks":16,"snapshots":1,"differences_count":0,"identical":true' \
	"$CL_DIR/verify.json" || fail "verify --json: $(cat "$CL_DIR/verify.json")"
echo "$T: zl volume verify is clean on the live chunks and snapshot 2"
cf="$CL_DIR/storage-${bk#node-}/data/chunks/$vid/0000020000000000.zlc"
[ -f "$cf" ] || fail "no clone file $cf of chunk 0 for snapshot 2 on $bk"
off=$(cl_chunk_block_off "$cf" 3 123) || fail "cannot locate block 3 in $cf"
cl_flip_byte "$cf" "$off"
rc=0
"$ZL" volume verify svol >"$CL_DIR/verify.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "verify with a damaged clone on $bk exited $rc, want 1: $(cat "$CL_DIR/verify.out")"
grep -q "^snapshot sequence 2 chunk 0: $bk \(cannot be read\|differs from\)" "$CL_DIR/verify.out" ||
	fail "verify did not name snapshot 2, chunk 0 and $bk: $(cat "$CL_DIR/verify.out")"
[ "$(grep -c '^\(snapshot \)\?.*chunk [0-9]*: ' "$CL_DIR/verify.out")" = 1 ] ||
	fail "verify reported other differences than $bk's clone: $(cat "$CL_DIR/verify.out")"
grep -q "16 snapshot chunks across 1 snapshot, 1 difference$" "$CL_DIR/verify.out" ||
	fail "verify summary with a damaged clone: $(cat "$CL_DIR/verify.out")"
rc=0
"$ZL" volume verify svol --snapshot 2 --json >"$CL_DIR/verify.json" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "verify --snapshot 2 --json exited $rc, want 1: $(cat "$CL_DIR/verify.json")"
grep -q "{\"chunk\":0,\"snapshot\":2,\"snapshot_name\":\"\",\"node\":\"$bk\"" "$CL_DIR/verify.json" ||
	fail "verify --snapshot 2 --json did not name chunk 0 of snapshot 2 on $bk: $(cat "$CL_DIR/verify.json")"
grep -q '"chunks":0,"snapshot_chunks":16,"snapshots":1,"differences_count":1,"identical":false' \
	"$CL_DIR/verify.json" || fail "verify --snapshot 2 --json totals: $(cat "$CL_DIR/verify.json")"
rc=0
"$ZL" volume verify svol --snapshot 1 >"$CL_DIR/verify.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "has no snapshot '1'" "$CL_DIR/verify.out" ||
	fail "verify --snapshot 1 (deleted) exited $rc: $(cat "$CL_DIR/verify.out")"
echo "$T: the damaged clone: verify names snapshot 2, chunk 0 and $bk, exit 1 (also --snapshot 2 --json)"

# Scrub covers clone chunks: the damaged clone is found among the replicas
# that hold it, rewritten from a good one (made a clone again on $bk) and
# counted with the chunks (chunks 0 and $zc and their clones: 4 checked).
"$ZL" volume scrub svol --json >"$CL_DIR/scrub.json" 2>"$CL_DIR/scrub.err" ||
	fail "scrub with a damaged clone: $(cat "$CL_DIR/scrub.json" "$CL_DIR/scrub.err")"
grep -q '"chunks_checked":4,"bad_found":1,"repaired":1,' "$CL_DIR/scrub.json" ||
	fail "scrub totals with a damaged clone: $(cat "$CL_DIR/scrub.json")"
grep -q "scrub repaired vol=$vid chunk=0 clone=2 member=$bk reason=crc " "$CL_DIR"/storage-*/log ||
	fail "no 'scrub repaired' line for the clone of chunk 0 on $bk"
check_all 2 d1 d3
"$ZL" volume verify svol >"$CL_DIR/verify.out" 2>&1 || fail "verify after the scrub: $(cat "$CL_DIR/verify.out")"
echo "$T: scrub repaired the damaged clone on $bk; every replica reads snapshot 2 again, verify clean"

# Peering (docs/SNAPSHOTS.md §2): snapshot 3 exists, backup X is killed -9
# and chunks 0 and 1 are rewritten at sequence 3: the primary and backup Y
# clone them and apply the writes, X never sees them, and the primary is
# killed -9 with the writes in flight. The rows are ordered so that X leads
# slice 0 afterwards (it lacks the winning copy and its clone: it pulls
# both) and Y slice 1 (it holds them: it pushes both to X). Pass: every
# in-sync replica reads snapshots 2 and 3 and the live chunks as written,
# holds the same clone files, and verify is clean; then the old primary
# recovers and all three agree.
[ "$(hl_etcd rows "$vid" | wc -l)" -ge 2 ] || fail "svol has a single slice: no slice 1"
head -c $CHUNK /dev/urandom >"$CL_DIR/e1"
head -c $CHUNK /dev/urandom >"$CL_DIR/d4"
head -c $CHUNK /dev/urandom >"$CL_DIR/e2"
X=$bk
Y=$(hl_etcd rows "$vid" | awk '$1 == 0' | tr ' ' '\n' | awk -F: -v p="$prim" -v x="$X" '$2 == "in_sync" && $1 != p && $1 != x {print $1; exit}')
[ -n "$Y" ] || fail "no second backup in slice 0's row"
hl_etcd order "$vid" 0 "$prim" "$X" "$Y" || fail "ordering row 0"
hl_etcd order "$vid" 1 "$prim" "$Y" "$X" || fail "ordering row 1"
sv1=$(hl_etcd rows "$vid" | awk '$1 == 1 {print $2}')
expect "write e1 to chunk 1 at sequence 2" OK "$(chunk "$prim" write "$vid" 1 0 "$sv1" "$CL_DIR/e1" 10000 seq=2)"
hl_etcd snaps "$vid" 3 2 3 || fail "setting snap_seq=3 snaps=[2,3]"
echo "$T: killing backup $X (-9), then $prim (-9) with writes at sequence 3 in flight"
cl_stop "storage-${X#node-}" KILL
sv0=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
"$CL_BIN/e2e_chunk" 127.0.0.1 "$(port "$prim")" write "$vid" 0 0 "$sv0" "$CL_DIR/d4" 60000 seq=3 \
	>"$CL_DIR/w4.out" 2>&1 &
w4=$!
"$CL_BIN/e2e_chunk" 127.0.0.1 "$(port "$prim")" write "$vid" 1 0 "$sv1" "$CL_DIR/e2" 60000 seq=3 \
	>"$CL_DIR/w5.out" 2>&1 &
w5=$!
# clone_files NODE: the names of NODE's clone chunk files of vid.
clone_files() {
	find "$CL_DIR/storage-${1#node-}/data/chunks/$vid" -name '*.zlc' 2>/dev/null |
		grep -v '/000000[0-9a-f]\{10\}\.zlc$' | sed 's|.*/||' | sort | tr '\n' ' '
}
for _ in $(seq 1 100); do
	case "$(clone_files "$Y")" in *0000030000000000.zlc*0000030000000001.zlc*) break ;; esac
	sleep 0.1
done
case "$(clone_files "$Y")" in *0000030000000000.zlc*0000030000000001.zlc*) ;;
*) fail "$Y took no clones for snapshot 3 of chunks 0 and 1: $(clone_files "$Y")" ;; esac
# The clones are durable before the writes; wait for the writes themselves.
for _ in $(seq 1 100); do
	chunk "$Y" read "$vid" 0 0 $CHUNK "$sv0" any "$CL_DIR/yl0" >/dev/null
	chunk "$Y" read "$vid" 1 0 $CHUNK "$sv1" any "$CL_DIR/yl1" >/dev/null
	cmp -s "$CL_DIR/d4" "$CL_DIR/yl0" && cmp -s "$CL_DIR/e2" "$CL_DIR/yl1" && break
	sleep 0.1
done
cmp -s "$CL_DIR/d4" "$CL_DIR/yl0" && cmp -s "$CL_DIR/e2" "$CL_DIR/yl1" ||
	fail "$Y does not hold the writes at sequence 3"
cl_stop "storage-${prim#node-}" KILL
wait "$w4" "$w5" || true
cl_start_storage "${X#node-}"
hl_etcd set "$vid" "$prim" out || fail "marking $prim out"
wait_peered() { # wait_peered NODE SLICE PATTERN
	for _ in $(seq 1 300); do
		grep -q "peering vol=$vid slice=$2 term=[0-9]* $3" "$CL_DIR/storage-${1#node-}/log" && return 0
		sleep 0.1
	done
	fail "$1 did not log the peering of slice $2 with '$3': $(grep "peering.*vol=$vid slice=$2 " "$CL_DIR/storage-${1#node-}/log" | tail -3)"
}
wait_peered "$X" 0 "members=$Y pulled=2 pushed=0"
wait_peered "$Y" 1 "members=$X pulled=0 pushed=2"
sv0=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
sv1=$(hl_etcd rows "$vid" | awk '$1 == 1 {print $2}')
# check_snaps NODES...: chunk 0 reads d1 at sequence 2, d3 at 3, d4 live;
# chunk 1 reads e1 at 3, e2 live; the same clone files everywhere.
check_snaps() {
	local n c seq want files0
	files0=$(clone_files "$1")
	for n in "$@"; do
		for c in "0 2 d1" "0 3 d3" "0 0 d4" "1 3 e1" "1 0 e2"; do
			set -- $c
			if [ "$2" = 0 ]; then
				expect "live READ ANY of chunk $1 on $n" OK \
					"$(chunk "$n" read "$vid" "$1" 0 $CHUNK "$sv0" any "$CL_DIR/r-$n")"
			else
				expect "READ ANY of chunk $1 at sequence $2 on $n" OK \
					"$(chunk "$n" read "$vid" "$1" 0 $CHUNK "$sv0" any seq="$2" "$CL_DIR/r-$n")"
			fi
			cmp -s "$CL_DIR/$3" "$CL_DIR/r-$n" ||
				fail "chunk $1 read at sequence $2 (0: live) on $n is not $3"
		done
		[ "$(clone_files "$n")" = "$files0" ] ||
			fail "clone files differ: $n: $(clone_files "$n"), first: $files0"
	done
}
check_snaps "$X" "$Y"
"$ZL" volume verify svol >"$CL_DIR/verify.out" 2>&1 || fail "verify after peering: $(cat "$CL_DIR/verify.out")"
grep -q "across 2 snapshots, 0 differences" "$CL_DIR/verify.out" || fail "verify summary after peering: $(cat "$CL_DIR/verify.out")"
echo "$T: after peering $X and $Y hold the clones of the writes at sequence 3 and read every snapshot alike"

cl_start_storage "${prim#node-}"
cl_wait_nodes 3 || fail "$prim did not register again"
hl_etcd set "$vid" "$prim" recovering || fail "marking $prim recovering"
got=$(hl_wait_caught_up "$vid" "$prim" "$n_slices" 60) || true
[ "$got" -ge "$n_slices" ] || fail "only $got of $n_slices slices reported $prim CAUGHT_UP"
hl_etcd set "$vid" "$prim" in_sync || fail "marking $prim in sync"
sv0=$(hl_etcd rows "$vid" | awk '$1 == 0 {print $2}')
check_snaps "$X" "$Y" "$prim"
"$ZL" volume verify svol >"$CL_DIR/verify.out" 2>&1 || fail "verify after recovery: $(cat "$CL_DIR/verify.out")"
echo "$T: $prim recovered: all three replicas agree on every snapshot"
echo "$T: PASS"
