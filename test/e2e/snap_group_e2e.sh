#!/usr/bin/env bash
# E2E of group snapshots (issue 25 step 6, docs/SNAPSHOTS.md §5): etcd, the
# manager and three storage daemons. One ordered writer (e2e_snap
# --volume2) writes pairs: block a of ga, and only once that write was
# acknowledged, block b of gb; ga and gb are each served by their own
# client (ids pw-a, pw-b), so a group snapshot goes through two holds and
# two switches. Group snapshots of ga and gb are taken under that load; each
# is exported and checked by snap_group_check.py (independent of the code):
# a group never holds gb's write of a pair without ga's.
# Then a client killed -9 while held: a second writer process serves gc; with
# the pair writer stopped (SIGSTOP), a group of ga and gc is asked, gc's
# client answers "held" and is killed -9, the pair writer continues: the
# group completes or fails as a whole (never half in etcd), no request is
# left, and the pair writer's client is released (its writes go on, and the
# next group goes through it). First, a thin volume's snapshots allocate
# nothing until a write, and the snapshot space every daemon's status
# record reports (docs/SNAPSHOTS.md §6) is what its clone chunk files
# allocate (the oracle: find's block counts), also in zl volume inspect,
# zl snapshot ls and zl status, and falls to 0 once the snapshot is gone.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
NGROUPS=${NGROUPS:-3}
fail() {
	echo "snap_group_e2e: FAIL: $*" >&2
	cl_dump_logs 20 "$CL_DIR"/storage-*/log "$CL_DIR"/pw.log "$CL_DIR"/cw.log
	[ -z "${cpid:-}" ] || kill -9 "$cpid" 2>/dev/null || true # the writers this test started
	[ -z "${wpid:-}" ] || { kill -CONT "$wpid"; kill "$wpid"; } 2>/dev/null || true
	exit 1
}
cl_e2e_begin e2e-snapgrp "$1" 3 || fail "cluster did not start"
t_start=$SECONDS
ectl() { etcdctl --endpoints "$CL_ETCD" "$@"; }

for v in ga gb gc; do
	"$ZL" volume create "$v" --size 8M --replicas 3 --chunk-size 64K >/dev/null || fail "create $v"
done
# Thin volumes stay thin: a snapshot (and a group snapshot) of a 1 GiB
# volume never written allocates no chunk file on any daemon; the first
# 4 KiB write allocates at most 128 KiB per replica.
chunk_files() { find "$CL_DIR"/storage-*/data/chunks/"$1" -type f 2>/dev/null | wc -l; }
"$ZL" volume create gt --size 1G --replicas 3 >/dev/null || fail "create gt"
gtid=$(ectl get --print-value-only /zipline/names/gt)
"$ZL" snapshot create gt gt-s1 >/dev/null || fail "snapshot of the thin volume"
"$ZL" snapshot create-group gthin gt gc >/dev/null || fail "group snapshot of the thin volume"
[ "$(chunk_files "$gtid")" = 0 ] || fail "snapshots of a thin volume allocated $(chunk_files "$gtid") chunk files"
# Snapshot space: clone_du I VOLID is what VOLID's clone chunk files (ids
# with a sequence above bit 40: not 000000 in front) allocate on node-I;
# reported I VOLID [SEQ] what node-I's status record says of them.
clone_du() {
	find "$CL_DIR/storage-$1/data/chunks/$2" -name '*.zlc' -printf "%f %b\n" 2>/dev/null |
		awk 'substr($1, 1, 6) != "000000" {s += $2 * 512} END {print s + 0}'
}
reported() {
	ectl get --print-value-only "/zipline/status/node-$1" | jq --arg v "$2" --argjson s "${3:-0}" \
		'[.snapshots[]? | select(.vol == $v and ($s == 0 or .seq == $s)) | .bytes] | add // 0'
}
# space_settled VOLID [BYTES]: within 20 s every node reports what its
# files hold (BYTES on each, when given).
space_settled() {
	local i ok du
	for _ in $(seq 1 100); do
		ok=1
		for i in 1 2 3; do
			du=$(clone_du "$i" "$1")
			[ "$(reported "$i" "$1")" = "$du" ] && [ "${2:-$du}" = "$du" ] || ok=0
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.2
	done
	return 1
}
space_state() { for i in 1 2 3; do printf "node-%s reports %s, files %s; " "$i" "$(reported "$i" "$1")" "$(clone_du "$i" "$1")"; done; }
space_settled "$gtid" 0 || fail "snapshot space of the never-written thin volume: $(space_state "$gtid")"
head -c 4096 /dev/urandom >"$CL_DIR/one.blk"
"$ZL" volume import gt "$CL_DIR/one.blk" >/dev/null || fail "write to the thin volume"
n_thin=$(chunk_files "$gtid")
# The write makes chunk 0 on every replica and, as the chunk is in the
# snapshots (absent, read as zeros), a clone of it: sparse, only its header
# and metadata pages are allocated, never the 4 MiB of the chunk.
alloc=$(find "$CL_DIR"/storage-*/data/chunks/"$gtid" -type f -printf "%b\n" | awk '{s += $1 * 512} END {print s + 0}')
[ "$alloc" -le $((3 * 128 * 1024)) ] ||
	fail "one 4 KiB write to a snapshotted thin volume allocated $alloc bytes on 3 replicas: $(find "$CL_DIR"/storage-*/data/chunks/"$gtid" -type f -printf "%P size=%s blocks=%b\n" | tr "\n" " ")"
space_settled "$gtid" || fail "snapshot space of the thin volume after one write: $(space_state "$gtid")"
thin_space=$(($(reported 1 "$gtid") + $(reported 2 "$gtid") + $(reported 3 "$gtid")))
[ "$thin_space" -gt 0 ] && [ "$thin_space" -le $((3 * 64 * 1024)) ] ||
	fail "the sparse clones of the thin volume are reported as $thin_space bytes: $(space_state "$gtid")"
echo "snap_group_e2e: thin 1 GiB volume with 2 snapshots: 0 chunk files; after one 4 KiB write $n_thin files (3 replicas of chunk 0 and of its clone), $alloc bytes allocated, $thin_space reported as snapshot space"
# A written volume: 16 chunks of 64 KiB, a snapshot, 3 chunks overwritten:
# each replica holds 3 clones of 64 KiB of data plus their pages.
t_space=$SECONDS
"$ZL" volume create gs --size 1M --replicas 3 --chunk-size 64K >/dev/null || fail "create gs"
gsid=$(ectl get --print-value-only /zipline/names/gs)
head -c $((1024 * 1024)) /dev/urandom >"$CL_DIR/gs.img"
"$ZL" volume import gs "$CL_DIR/gs.img" >/dev/null || fail "fill gs"
"$ZL" snapshot create gs gs-s1 >/dev/null || fail "snapshot gs-s1"
head -c $((3 * 64 * 1024)) /dev/urandom >"$CL_DIR/gs3.img"
"$ZL" volume import gs "$CL_DIR/gs3.img" >/dev/null || fail "overwrite 3 chunks of gs"
space_settled "$gsid" || fail "snapshot space of gs after 3 chunks overwritten: $(space_state "$gsid")"
gs_total=0
for i in 1 2 3; do
	r=$(reported "$i" "$gsid" 1)
	[ "$r" -ge $((3 * 64 * 1024)) ] && [ "$r" -le $((3 * 128 * 1024)) ] ||
		fail "node-$i reports $r bytes for gs-s1, not 3 chunks of 64 KiB and their pages: $(space_state "$gsid")"
	gs_total=$((gs_total + r))
done
out=$("$ZL" volume inspect gs) || fail "inspect gs"
grep -qE "^  gs-s1 .* space [0-9.]+ KiB \(9 clone chunks on 3 nodes\)$" <<<"$out" || fail "inspect gs does not show gs-s1's space: $out"
grep -q "^snap space  .* on disk, all replicas summed (status records of 3 nodes)$" <<<"$out" || fail "inspect gs has no snap space line: $out"
out=$("$ZL" snapshot ls gs) || fail "snapshot ls gs"
grep -qE "^gs-s1 .* [0-9.]+ KiB *$" <<<"$out" || fail "snapshot ls gs does not show gs-s1's space: $out"
out=$("$ZL" status) || fail "zl status: $out"
grep -qE "^  ID +ADDRESS +TRANSPORTS +CAPACITY +FREE +SNAPSHOTS " <<<"$out" || fail "zl status has no SNAPSHOTS column: $out"
grep -qE "^  node-1 +[^ ]+ +[^ ]+ +[0-9.]+ [KMGT]?i?B +[0-9.]+ [KMGT]?i?B +[0-9.]+ KiB " <<<"$out" || fail "zl status has no snapshot space for node-1: $out"
grep -qE "^snapshots [0-9.]+ KiB on disk, all nodes \(status records of 3\)$" <<<"$out" || fail "zl status has no snapshot total: $out"
"$ZL" snapshot rm gs-s1 >/dev/null || fail "rm gs-s1"
space_settled "$gsid" 0 || fail "snapshot space of gs after its snapshot was deleted: $(space_state "$gsid")"
echo "snap_group_e2e: 3 overwritten 64 KiB chunks: $gs_total bytes reported over 3 replicas, as their files allocate; 0 after the snapshot's deletion ($((SECONDS - t_space)) s)"
"$CL_BIN/e2e_snap" --etcd "$CL_ETCD" --volume ga --volume2 gb --client-id pw --log "$CL_DIR/pairs.log" \
	--seconds 300 --qd 8 --ready "$CL_DIR/ready-pw" --stop "$CL_DIR/stop" >"$CL_DIR/pw.log" 2>&1 &
wpid=$!
"$CL_BIN/e2e_snap" --etcd "$CL_ETCD" --volume gc --client-id cw --log "$CL_DIR/c.log" \
	--seconds 300 --qd 4 --ready "$CL_DIR/ready-cw" --stop "$CL_DIR/stop" >"$CL_DIR/cw.log" 2>&1 &
cpid=$!
for _ in $(seq 1 100); do
	[ -e "$CL_DIR/ready-pw" ] && [ -e "$CL_DIR/ready-cw" ] && break
	kill -0 "$wpid" 2>/dev/null || fail "the pair writer exited early: $(cat "$CL_DIR/pw.log")"
	kill -0 "$cpid" 2>/dev/null || fail "the gc writer exited early: $(cat "$CL_DIR/cw.log")"
	sleep 0.1
done
[ -e "$CL_DIR/ready-pw" ] && [ -e "$CL_DIR/ready-cw" ] || fail "the writers did not start serving in 10 s"
sleep 1

: >"$CL_DIR/groups"
take_pair_group() { # take_pair_group NAME
	local out t0 t1
	t0=$(date +%s%N)
	out=$("$ZL" snapshot create-group "$1" ga gb --timeout 20 2>&1) || fail "create-group $1: $out"
	t1=$(date +%s%N)
	grep -q "^created group snapshot '$1' of 2 volumes" <<<"$out" || fail "create-group $1 said: $out"
	grep -q "^  $1\.ga .* held and switched by client pw-a$" <<<"$out" || fail "$1: ga not through pw-a: $out"
	grep -q "^  $1\.gb .* held and switched by client pw-b$" <<<"$out" || fail "$1: gb not through pw-b: $out"
	echo "$1 $CL_DIR/$1.ga.img $CL_DIR/$1.gb.img" >>"$CL_DIR/groups"
	echo "snap_group_e2e: $1 taken in $(((t1 - t0) / 1000000)) ms"
}
for i in $(seq 1 "$NGROUPS"); do
	take_pair_group "g$i"
	sleep 0.5
done

# A client killed -9 while held.
gcid=$(ectl get --print-value-only /zipline/names/gc)
kill -STOP "$wpid"
"$ZL" snapshot create-group gk ga gc --timeout 4 >"$CL_DIR/gk.out" 2>&1 &
kpid=$!
held=0
for _ in $(seq 1 100); do
	[[ "$(ectl get --prefix --print-value-only "/zipline/snapreqs/$gcid/")" == *'"state":"held"'* ]] && { held=1; break; }
	sleep 0.05
done
[ "$held" = 1 ] || { kill -CONT "$wpid"; fail "gc's client did not answer held: $(cat "$CL_DIR/gk.out")"; }
kill -9 "$cpid"
wait "$cpid" 2>/dev/null || true
cpid=
size0=$(stat -c %s "$CL_DIR/pairs.log")
kill -CONT "$wpid"
krc=0
wait "$kpid" || krc=$?
echo "snap_group_e2e: group gk with gc's client killed -9 while held: exit $krc: $(head -1 "$CL_DIR/gk.out")"
[ -z "$(ectl get --prefix --keys-only /zipline/snapreqs/)" ] || fail "a request was left behind"
n_gk=$("$ZL" snapshot ls | grep -c '^gk\.' || true)
gk_rec=$(ectl get --keys-only /zipline/snapgroups/gk) # (no pipe into grep -q: pipefail and SIGPIPE)
if [ -n "$gk_rec" ]; then
	[ "$krc" = 0 ] && [ "$n_gk" = 2 ] || fail "group gk half there: exit $krc, $n_gk snapshots: $(cat "$CL_DIR/gk.out")"
else
	[ "$krc" != 0 ] && [ "$n_gk" = 0 ] || fail "group gk half there: exit $krc, no record, $n_gk snapshots"
	grep -q "not taken: .*run the same command again" "$CL_DIR/gk.out" || fail "gk's error says nothing to do: $(cat "$CL_DIR/gk.out")"
fi
# The pair writer's client was released: its writes go on.
grown=0
for _ in $(seq 1 100); do
	[ "$(stat -c %s "$CL_DIR/pairs.log")" -gt $((size0 + 4096)) ] && { grown=1; break; }
	sleep 0.1
done
[ "$grown" = 1 ] || fail "the pair writer's writes did not go on after the group with the killed client"
take_pair_group "g$((NGROUPS + 1))"

: >"$CL_DIR/stop"
wait "$wpid" || fail "the pair writer failed: $(cat "$CL_DIR/pw.log")"
wpid=
grep "^e2e_snap:" "$CL_DIR/pw.log"
echo "snap_group_e2e: writes and groups took $((SECONDS - t_start)) s"
"$ZL" volume export ga "$CL_DIR/live.ga.img" >/dev/null || fail "export ga"
"$ZL" volume export gb "$CL_DIR/live.gb.img" >/dev/null || fail "export gb"
while read -r g ia ib; do
	"$ZL" snapshot export "$g.ga" "$ia" >/dev/null || fail "export $g.ga"
	"$ZL" snapshot export "$g.gb" "$ib" >/dev/null || fail "export $g.gb"
done <"$CL_DIR/groups"
python3 "$SRC/test/e2e/snap_group_check.py" "$CL_DIR/pairs.log" "$CL_DIR/live.ga.img" \
	"$CL_DIR/live.gb.img" "$CL_DIR/groups" || fail "a group snapshot holds gb's write without ga's"

ls_out=$("$ZL" snapshot ls) || fail "snapshot ls"
grep -qE "^g1\.ga .* g1 " <<<"$ls_out" || fail "snapshot ls does not show group g1: $ls_out"
out=$("$ZL" snapshot rm-group g1) || fail "rm-group g1: $out"
grep -q "deleted group 'g1' and its 2 snapshots" <<<"$out" || fail "rm-group g1 said: $out"
ls_out=$("$ZL" snapshot ls) || fail "snapshot ls"
! grep -q '^g1\.' <<<"$ls_out" || fail "rm-group left a snapshot of g1: $ls_out"
echo "snap_group_e2e: PASS ($((SECONDS - t_start)) s after the cluster started)"
