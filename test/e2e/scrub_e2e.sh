#!/usr/bin/env bash
# E2E of scrub and repair (docs/REPLICATION.md §8): 3 daemons with --heal on,
# a 3-replica volume of random data. While the daemons run, one byte is
# flipped in the copy of chunk A held by its slice's primary and in the copy
# of chunk A2 (same slice) held by another member, and the whole chunk file
# of chunk B is deleted on a member that is not its primary.
# A fourth copy (chunk D) is made divergent: other bytes with a matching
# CRC, same version; a fifth (chunk E) is deleted on its own primary.
#   - `zl volume verify` reports the five (exit 1),
#   - `zl volume scrub` repairs the five (a "scrub repaired" log line each,
#     with the right member and reason),
#   - `zl volume verify` then finds nothing (exit 0), the export equals the
#     input, and the replicas' chunk files read directly (an oracle that does
#     not go through the daemons) hold the same data and version everywhere.
# Then the background scrub (--scrub-interval) repairs a damaged copy alone.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "scrub_e2e: FAIL: $*" >&2
	cl_dump_logs 25 "$CL_DIR"/storage-*/log
	exit 1
}
SIZE_MB=32
CHUNK=65536 # 512 chunks in 64 slices: several chunks per CHUNK_DIGEST window
export CL_STORAGE_FLAGS="--log-level info --scrub-mbps 800"
cl_e2e_begin e2e-scrub "$1" 3 --heal on || fail "cluster did not start"

# replicas_identical: every chunk file on all 3 nodes, same data and version.
replicas_identical() {
	hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
	local bad n
	bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
	[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
	n=$(awk '$1 == 3' "$CL_DIR/files" | wc -l)
	[ "$n" -eq $((SIZE_MB * 1024 * 1024 / CHUNK)) ] || fail "node-3 holds $n chunk files"
}

"$ZL" volume create svol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect svol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import svol "$CL_DIR/in" || fail "import"
"$ZL" volume verify svol >"$CL_DIR/verify0" 2>&1 || { cat "$CL_DIR/verify0" >&2; fail "verify of an undamaged volume"; }
replicas_identical
hl_etcd members "$vid" >"$CL_DIR/rows"
n_slices=$(wc -l <"$CL_DIR/rows")
echo "scrub_e2e: $n_slices slices; $(head -2 "$CL_DIR/rows" | tr '\n' ';')"

# Chunk A = 3: damaged on its primary; A2 (same slice): damaged on another
# member. Chunk B = 6: deleted on a non-primary. Chunk D = 9: divergent
# (valid, other bytes, same version) on a non-primary.
A=3 B=6 A2=$((3 + n_slices)) D=9 E=12
read -r _ primA na1 na2 na3 < <(awk -v s=$((A % n_slices)) '$1 == s' "$CL_DIR/rows")
for n in $na1 $na2 $na3; do [ "$n" != "$primA" ] && { memA2=$n; break; }; done
read -r _ primB nb1 nb2 nb3 < <(awk -v s=$((B % n_slices)) '$1 == s' "$CL_DIR/rows")
for n in $nb1 $nb2 $nb3; do [ "$n" != "$primB" ] && { lostB=$n; break; }; done
echo "scrub_e2e: chunk $A damaged on its primary $primA, chunk $B deleted on $lostB (primary $primB)"
# The divergent copy is made while its daemon is down (a running one keeps
# the CRCs it loaded in memory).
read -r _ primD nd1 nd2 nd3 < <(awk -v s=$((D % n_slices)) '$1 == s' "$CL_DIR/rows")
for n in $nd1 $nd2 $nd3; do [ "$n" != "$primD" ] && memD=$n; done
fD="$CL_DIR/storage-${memD#node-}/data/chunks/$vid/$(printf '%016x' $D).zlc"
logoff=$(stat -c %s "$CL_DIR/storage-${memD#node-}/log")
cl_stop "storage-${memD#node-}"
hl_divergent "$fD" 7 100 || fail "cannot make $fD divergent"
cl_start_storage "${memD#node-}"
cl_wait_nodes 3 || fail "$memD did not register again"
# The restarted daemon peers the slices it leads: the damage below comes
# after, else that peering could heal it (a file it finds missing is pulled).
hl_wait_peered "$vid" "$memD" "$logoff" 30 || fail "$memD did not peer again"
echo "scrub_e2e: chunk $D made divergent on $memD (primary $primD)"
fA="$CL_DIR/storage-${primA#node-}/data/chunks/$vid/$(printf '%016x' $A).zlc"
fB="$CL_DIR/storage-${lostB#node-}/data/chunks/$vid/$(printf '%016x' $B).zlc"
[ -f "$fA" ] && [ -f "$fB" ] || fail "chunk files $fA / $fB missing before the damage"
fA2="$CL_DIR/storage-${memA2#node-}/data/chunks/$vid/$(printf '%016x' $A2).zlc"
off=$(cl_chunk_block_off "$fA" 5 77) || fail "cannot locate block 5 in $fA"
cl_flip_byte "$fA" "$off"
off=$(cl_chunk_block_off "$fA2" 15 4095) || fail "cannot locate block 15 in $fA2"
cl_flip_byte "$fA2" "$off"
echo "scrub_e2e: chunk $A2 damaged on $memA2"

rm -f "$fB"
# Chunk E = 12: deleted on its own primary (which rebuilds it from a member).
read -r _ primE _ < <(awk -v s=$((E % n_slices)) '$1 == s' "$CL_DIR/rows")
fE="$CL_DIR/storage-${primE#node-}/data/chunks/$vid/$(printf '%016x' $E).zlc"
rm -f "$fE" || fail "cannot delete $fE"
echo "scrub_e2e: chunk $E deleted on its primary $primE"
# Deliberate: a read checks that an open chunk's file is still linked at most
# once a second per chunk (STORE_GONE_CHECK_MS in storage/storage_chunk.c);
# the second passes so that verify's own reads are the ones that notice.
sleep 1.2

set +e
"$ZL" volume verify svol >"$CL_DIR/verify1" 2>&1
rc=$?
set -e
cat "$CL_DIR/verify1"
[ "$rc" -eq 1 ] || fail "verify of a damaged volume exited $rc, not 1"
grep -q "^chunk $A: $primA " "$CL_DIR/verify1" || fail "verify did not report chunk $A on $primA"
grep -q "^chunk $A2: $memA2 " "$CL_DIR/verify1" || fail "verify did not report chunk $A2 on $memA2"
grep -q "^chunk $B: $lostB " "$CL_DIR/verify1" || fail "verify did not report chunk $B on $lostB"
grep -q "^chunk $D: $memD differs from $primD at offset $((7 * 4096 + 100)) (versions 1:[0-9]* vs 1:[0-9]*)" "$CL_DIR/verify1" ||
	fail "verify did not report the divergent chunk $D on $memD at offset $((7 * 4096 + 100))"
grep -q "^chunk $E: $primE " "$CL_DIR/verify1" || fail "verify did not report chunk $E on $primE"
[ "$(grep -c '^chunk ' "$CL_DIR/verify1")" -eq 5 ] || fail "verify reported other differences"
grep -h "chunk file missing\|removed while open" "$CL_DIR/storage-${lostB#node-}/log" | grep -q "chunk=$B" ||
	fail "$lostB did not log the missing chunk file of chunk $B"

if [ "${2:-}" = --manager-restart ]; then
	# The manager is killed (-9) before the scrub and restarted while it
	# runs: scrub and repair go on, and no row changes because of it.
	cl_stop manager KILL
	"$ZL" volume scrub svol >"$CL_DIR/scrub1" 2>&1 &
	scrub_pid=$!
	sleep 1 # deliberate: the scrub runs 1 s without a manager
	cl_start_manager || fail "the manager did not start again"
	echo "scrub_e2e: manager killed (-9) and restarted during the scrub"
	wait "$scrub_pid" || { cat "$CL_DIR/scrub1" >&2; fail "scrub"; }
else
	"$ZL" volume scrub svol >"$CL_DIR/scrub1" 2>&1 || { cat "$CL_DIR/scrub1" >&2; fail "scrub"; }
fi
cat "$CL_DIR/scrub1"
grep -q "^scrub: $n_slices/$n_slices slices, 5 repaired" "$CL_DIR/scrub1" || fail "no final progress line with 5 repaired"
grep -q "5 bad copies found, 5 repaired" "$CL_DIR/scrub1" || fail "scrub summary does not say 5 found, 5 repaired"
grep -h "scrub repaired" "$CL_DIR"/storage-*/log | tee "$CL_DIR/repairs"
grep -q "chunk=$A member=$primA reason=crc" "$CL_DIR/repairs" || fail "no repair log of chunk $A on $primA (crc)"
grep -q "chunk=$A2 member=$memA2 reason=crc" "$CL_DIR/repairs" || fail "no repair log of chunk $A2 on $memA2 (crc)"
grep -q "chunk=$B member=$lostB reason=missing" "$CL_DIR/repairs" || fail "no repair log of chunk $B on $lostB (missing)"
grep -q "chunk=$D member=$memD reason=divergent source=$primD" "$CL_DIR/repairs" || fail "no repair log of chunk $D on $memD (divergent, from $primD)"
grep -q "chunk=$E member=$primE reason=missing" "$CL_DIR/repairs" || fail "no repair log of chunk $E on its primary $primE (missing)"
[ "$(wc -l <"$CL_DIR/repairs")" -eq 5 ] || fail "scrub repaired other copies too"

"$ZL" volume verify svol >"$CL_DIR/verify2" 2>&1 || { cat "$CL_DIR/verify2" >&2; fail "verify after the scrub"; }
"$ZL" volume export svol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/in" "$CL_DIR/out" || fail "volume content differs from what was written"
replicas_identical
echo "scrub_e2e: manual scrub repaired the five copies; replicas identical"

# A second scrub finds nothing.
"$ZL" volume scrub svol --json >"$CL_DIR/scrub2" || fail "second scrub"
grep -q '"bad_found":0,"repaired":0' "$CL_DIR/scrub2" || fail "second scrub found something: $(cat "$CL_DIR/scrub2")"

# Background scrub: node-1 restarts with --scrub-interval 2 and repairs, on
# its own, a damaged copy of a slice it is primary of (on another member).
read -r s1 _ m1 m2 m3 < <(awk '$2 == "node-1"' "$CL_DIR/rows" | head -1)
[ -n "${s1:-}" ] || fail "node-1 is primary of no slice"
for n in $m1 $m2 $m3; do [ "$n" != node-1 ] && { other=$n; break; }; done
C=$s1
fC="$CL_DIR/storage-${other#node-}/data/chunks/$vid/$(printf '%016x' $C).zlc"
cl_stop storage-1
cl_start_storage 1 "" --scrub-interval 2
cl_wait_nodes 3 || fail "node-1 did not register again"
off=$(cl_chunk_block_off "$fC" 0 9) || fail "cannot locate block 0 in $fC"
cl_flip_byte "$fC" "$off"
cl_wait_count "$CL_DIR/storage-1/log" "scrub repaired vol=$vid chunk=$C member=$other reason=crc" 1 30 ||
	fail "the background scrub of node-1 did not repair chunk $C on $other"
"$ZL" volume verify svol >"$CL_DIR/verify3" 2>&1 || { cat "$CL_DIR/verify3" >&2; fail "verify after the background scrub"; }
replicas_identical
for i in 1 2 3; do cl_stop storage-$i; done
echo "scrub_e2e: PASS (verify found the five, scrub repaired them, background scrub repaired chunk $C)"
