#!/usr/bin/env bash
# E2E: one flipped byte in one replica's chunk file, with the defaults (the
# manager cl_e2e_begin starts, storage healing on, the client in heal mode).
# The volume is read once after its import: the primary has checked every
# block of it since the block's CRC last changed, so later client reads of
# those blocks are checked by the reader alone (CRC once per byte read,
# zl_chunk_read_crcs). Each node's replica of chunk 0 is then damaged in
# turn, so the primary of its slice is certainly among them:
#   - `zl volume verify` (exit 1, naming that node and chunk 0) reads every
#     copy, and the damaged daemon logs the corruption with volume, chunk
#     and block (verify only reports: it never starts a repair);
#   - the export equals the input every time (a bad copy on the primary is
#     read around: the client reads the other in-sync members, READ +
#     ZL_WF_ANY);
#   - with the primary's copy bad, the client finds it (the reply's data
#     does not match the stored CRCs it carries: "payload CRC mismatch"),
#     sends the read again with ZL_READ_RECHECK, which makes the primary
#     check the block on disk and answer CORRUPT ("bad copy on the
#     primary"), and puts a failure report error=CORRUPT about the primary
#     for slice 0 (seen in etcd's history through etcdctl, not through
#     lib/meta); the primary repairs its copy from the members by itself
#     (a "scrub repaired" line naming it; no scrub asked for) and verify
#     then exits 0;
#   - with a backup's copy bad, no report, and the byte is restored by hand;
#     the rows do not change.
# Then the volume is imported again (every block's CRC is written anew) and
# the primary's copy damaged and left so: the primary's first read of the
# block checks it and logs the corruption itself during the export, which
# still matches, and repairs its copy from the members by itself at once
# (a one-chunk scrub, "a client I/O found a bad block"; no scrub asked for):
# a "scrub repaired" line naming the primary, `zl volume verify` exits 0,
# the three replica files hold the same data block again (read directly),
# and the export still matches.
# Last, a write that covers part of a block bad on the primary (its edge
# block must be read and checked before the merge, and is refused CORRUPT):
# the primary repairs the copy by itself, and the write, sent again by the
# client, completes within seconds (before, it waited for a scrub: the
# daily background one or an operator's, up to the 600 s I/O timeout).
# Oracle: e2e_load's log of acknowledged writes, checked through the client
# and in every replica's chunk files read directly.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() {
	echo "corrupt_e2e: FAIL: $*" >&2
	cl_dump_logs 15 "$CL_DIR"/storage-*/log "$CL_DIR"/manager/log
	exit 1
}
cl_e2e_begin e2e-corrupt "$1" 3 || fail "cluster did not start"
ETCDCTL=(etcdctl --endpoints "$CL_ETCD")

"$ZL" volume create cvol --size 16M --replicas 3 --chunk-size 4M || fail "create"
head -c 16M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import cvol "$CL_DIR/in" || fail "import"
vid=$("$ZL" volume inspect cvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"

# The primary of slice 0 (chunk 0): its first in_sync member, from etcd.
cl_rows "$vid" >"$CL_DIR/rows0" || fail "cannot read the rows of $vid"
prim=$(awk '$1 == 0 {for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) {sub(/:in_sync$/, "", $i); print $i; exit}}' "$CL_DIR/rows0")
[ -n "$prim" ] || fail "slice 0 has no in-sync member: $(cat "$CL_DIR/rows0")"
echo "corrupt_e2e: slice 0 row: $(awk '$1 == 0' "$CL_DIR/rows0"); primary $prim"

# Every block read once: the primary checks them on this first read.
"$ZL" volume export cvol "$CL_DIR/out" || fail "first export"
cmp "$CL_DIR/in" "$CL_DIR/out" || fail "first export differs from the input"

etcd_rev() { "${ETCDCTL[@]}" get /zipline/ --limit 1 -w json | grep -o '"revision":[0-9]*' | head -1 | cut -d: -f2; }
# reports_since REV: the puts under reports/<vid>/ since REV (replayed
# history: the client's reports are gone with its lease when it exits).
reports_since() {
	timeout 3 "${ETCDCTL[@]}" watch --prefix "/zipline/reports/$vid/" --rev "$1" 2>/dev/null || true
}
corrupt_lines() { grep -i "corrupt" "$CL_DIR/storage-$1/log" | grep "$vid" | grep -c "chunk=0 block=3" || true; }
chunk_file() { echo "$CL_DIR/storage-$1/data/chunks/$vid/0000000000000000.zlc"; }

for i in 1 2 3; do
	f=$(chunk_file "$i")
	[ -f "$f" ] || fail "replica of chunk 0 missing on node-$i ($f)"
	# Flip one byte of data block 3 (the data offset comes from the header).
	off=$(cl_chunk_block_off "$f" 3 123) || fail "cannot locate block 3 in $f"
	cl_flip_byte "$f" "$off"
	before=$(corrupt_lines "$i")
	# verify reads every in-sync copy: it finds the damage on node-i, and
	# node-i logs it.
	set +e
	"$ZL" volume verify cvol >"$CL_DIR/verify-$i" 2>&1
	rc=$?
	set -e
	[ "$rc" -eq 1 ] || { cat "$CL_DIR/verify-$i" >&2; fail "verify with node-$i's copy damaged exited $rc, not 1"; }
	grep -q "^chunk 0: node-$i " "$CL_DIR/verify-$i" || { cat "$CL_DIR/verify-$i" >&2; fail "verify did not name chunk 0 on node-$i"; }
	[ "$(corrupt_lines "$i")" -gt "$before" ] || fail "node-$i did not log the corruption of chunk 0 block 3"
	echo "corrupt_e2e: node-$i logged: $(grep -i corrupt "$CL_DIR/storage-$i/log" | grep "$vid" | tail -1)"
	grep -q "scrub started: vol=$vid " "$CL_DIR/storage-$i/log" && fail "verify made node-$i start a repair"
	rev=$(($(etcd_rev) + 1))
	ZL_LOG_LEVEL=warn "$ZL" volume export cvol "$CL_DIR/out" 2>"$CL_DIR/export-$i.err" ||
		{ cat "$CL_DIR/export-$i.err" >&2; fail "export with a damaged replica on node-$i"; }
	cmp "$CL_DIR/in" "$CL_DIR/out" || fail "wrong data read with a damaged replica on node-$i"
	reports_since "$rev" >"$CL_DIR/reports-$i"
	if [ "node-$i" = "$prim" ]; then
		grep -q "bad copy on the primary: vol=$vid slice=0 chunk=0 node=node-$i err=ZL_ERR_CORRUPT" "$CL_DIR/export-$i.err" &&
		grep -q "payload CRC mismatch .*op=READ" "$CL_DIR/export-$i.err" ||
			{ cat "$CL_DIR/export-$i.err" >&2; fail "the client did not find node-$i's bad copy by its reply's CRC"; }
		grep -q "/zipline/reports/$vid/0/.*/node-$i\$" "$CL_DIR/reports-$i" ||
			fail "no failure report about node-$i for slice 0 in etcd: $(cat "$CL_DIR/reports-$i")"
		grep -q '"error":"CORRUPT"' "$CL_DIR/reports-$i" || fail "the report is not error=CORRUPT: $(cat "$CL_DIR/reports-$i")"
		echo "corrupt_e2e: node-$i (primary) damaged: export matches, the client found it by its CRC, report: $(grep -o '{.*}' "$CL_DIR/reports-$i" | head -1)"
		# The read sent again with ZL_READ_RECHECK made the primary find its
		# bad copy: it repairs it from the members.
		cl_wait_count "$CL_DIR/storage-$i/log" "scrub repaired vol=$vid chunk=0 member=node-$i reason=crc" 1 30 ||
			fail "node-$i did not repair its copy of chunk 0 after the client's read found block 3 bad"
		grep "scrub repaired vol=$vid chunk=0 member=node-$i" "$CL_DIR/storage-$i/log" | sed 's/^/corrupt_e2e: /'
		"$ZL" volume verify cvol >"$CL_DIR/verify-$i.after" 2>&1 ||
			{ cat "$CL_DIR/verify-$i.after" >&2; fail "verify after node-$i repaired its copy"; }
	else
		[ ! -s "$CL_DIR/reports-$i" ] || fail "a failure report with node-$i's backup copy damaged: $(cat "$CL_DIR/reports-$i")"
		grep -q "scrub started: vol=$vid " "$CL_DIR/storage-$i/log" && fail "node-$i (a backup) started a repair"
		# Restore the byte so the next round damages exactly one replica again.
		cl_flip_byte "$f" "$off"
	fi
done
cl_rows "$vid" >"$CL_DIR/rows1" || fail "cannot read the rows of $vid"
cmp -s "$CL_DIR/rows0" "$CL_DIR/rows1" || fail "rows changed: $(cat "$CL_DIR/rows0") -> $(cat "$CL_DIR/rows1")"
"$ZL" volume verify cvol >"$CL_DIR/verify-ok" 2>&1 || { cat "$CL_DIR/verify-ok" >&2; fail "verify after restoring the bytes"; }

# Write every block anew, then damage the primary's copy and leave it so:
# the primary's first read of the block checks it, and repairs its copy.
"$ZL" volume import cvol "$CL_DIR/in" || fail "second import"
n=${prim#node-}
f=$(chunk_file "$n")
off=$(cl_chunk_block_off "$f" 3 123) || fail "cannot locate block 3 in $f"
cl_flip_byte "$f" "$off"
before=$(corrupt_lines "$n")
plog="$CL_DIR/storage-$n/log"
"$ZL" volume export cvol "$CL_DIR/out" || fail "export with the primary's copy damaged (before its repair)"
cmp "$CL_DIR/in" "$CL_DIR/out" || fail "wrong data read with the primary's copy damaged (before its repair)"
[ "$(corrupt_lines "$n")" -gt "$before" ] || fail "primary $prim did not log the corruption of chunk 0 block 3 on its first read after the import"
cl_wait_count "$plog" "scrub repaired vol=$vid chunk=0 member=$prim reason=crc" 2 30 ||
	fail "$prim did not repair its copy of chunk 0 after a client's read found block 3 bad"
[ "$(grep -c "scrub started: vol=$vid slice=0 chunk=0 .*a client I/O found a bad block" "$plog")" -ge 2 ] ||
	fail "$prim repaired chunk 0 but not in a scrub of that chunk started by the read"
grep "scrub repaired vol=$vid chunk=0 member=$prim" "$plog" | sed 's/^/corrupt_e2e: /'
"$ZL" volume verify cvol >"$CL_DIR/verify-end" 2>&1 || { cat "$CL_DIR/verify-end" >&2; fail "verify after the repair"; }
# The data block, read from the three replica files directly.
for i in 1 2 3; do
	g=$(chunk_file "$i")
	o=$(cl_chunk_block_off "$g" 3 0) || fail "cannot locate block 3 in $g"
	head -c $((o + 4096)) "$g" | tail -c 4096 | sha256sum | cut -d' ' -f1
done | sort -u >"$CL_DIR/blocks"
[ "$(wc -l <"$CL_DIR/blocks")" -eq 1 ] || fail "block 3 of chunk 0 differs between the replica files after the repair"
[ "$(cat "$CL_DIR/blocks")" = "$(head -c $((4 * 4096)) "$CL_DIR/in" | tail -c 4096 | sha256sum | cut -d' ' -f1)" ] ||
	fail "block 3 of chunk 0 in the replica files is not what was imported"
before=$(corrupt_lines "$n")
"$ZL" volume export cvol "$CL_DIR/out" || fail "export after the repair"
cmp "$CL_DIR/in" "$CL_DIR/out" || fail "wrong data read after the repair"
[ "$(corrupt_lines "$n")" -eq "$before" ] || fail "$prim still finds corruption after the repair"
echo "corrupt_e2e: ok: a bad block the primary found on a client's read: repaired by the primary at once"

# A write over part of a block that is bad on the primary: a volume of one
# chunk, every 4 KiB written by e2e_load (its log is the oracle), one byte
# of block 3 flipped in the primary's copy, then one 512-byte write inside
# block 3 (not its first sector, where the flipped byte is).
"$ZL" volume create wvol --size 4M --replicas 3 --chunk-size 4M || fail "create wvol"
wid=$("$ZL" volume inspect wvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
LOG=$CL_DIR/load.log
timeout 120 "$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume wvol --log "$LOG" --qd 8 --fill 4K:4K \
	>"$CL_DIR/fill.out" 2>&1 || fail "fill: $(tail -3 "$CL_DIR/fill.out")"
cl_rows "$wid" >"$CL_DIR/wrows" || fail "cannot read the rows of $wid"
wprim=$(awk '$1 == 0 {for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) {sub(/:in_sync$/, "", $i); print $i; exit}}' "$CL_DIR/wrows")
[ -n "$wprim" ] || fail "slice 0 of wvol has no in-sync member: $(cat "$CL_DIR/wrows")"
wf="$CL_DIR/storage-${wprim#node-}/data/chunks/$wid/0000000000000000.zlc"
wlog="$CL_DIR/storage-${wprim#node-}/log"
# The 4 KiB writes went through the journals: the chunk files hold them once
# checkpointed (else the checkpoint would write block 3 over the flip).
cl_wait_journal_clean 60 >/dev/null || fail "the journals did not drain into the chunk files"
off=$(cl_chunk_block_off "$wf" 3 123) || fail "cannot locate block 3 in $wf"
cl_flip_byte "$wf" "$off"
t0=$(date +%s%N)
timeout 60 "$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume wvol --log "$LOG" --qd 1 --seed 7 \
	--overlap $((3 * 4096 + 512)):512 --min-len 512 --max-len 512 --bytes 512 >"$CL_DIR/w.out" 2>&1 ||
	fail "a 512-byte write into block 3, bad on the primary $wprim, did not complete in 60 s (exit $?): $(tail -3 "$CL_DIR/w.out")"
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q "corruption vol=$wid chunk=0 block=3 " "$wlog" ||
	fail "the write completed, but $wprim never found block 3 bad (was the flip undone?)"
grep -q "scrub repaired vol=$wid chunk=0 member=$wprim reason=crc" "$wlog" ||
	fail "$wprim did not repair its copy of chunk 0 for the write"
echo "corrupt_e2e: a 512-byte write into block 3, bad on the primary $wprim: acknowledged after $ms ms"
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume wvol --log "$LOG" --exact >"$CL_DIR/check.out" 2>&1 ||
	fail "read back through the client: $(grep -E 'BAD|CHECK' "$CL_DIR/check.out" | head -5)"
cl_wait_journal_clean 60 >/dev/null || fail "the journals did not drain into the chunk files after the write"
for i in 1 2 3; do
	"$CL_BIN/e2e_load" check --log "$LOG" --chunk-dir "$CL_DIR/storage-$i/data/chunks/$wid" \
		--size 4M --chunk-size 4M --exact >"$CL_DIR/check-$i.out" 2>&1 ||
		fail "node-$i's chunk file read directly: $(grep -E 'BAD|CHECK' "$CL_DIR/check-$i.out" | head -5)"
done
"$ZL" volume verify wvol >"$CL_DIR/verify-w" 2>&1 || { cat "$CL_DIR/verify-w" >&2; fail "verify of wvol after the write"; }
echo "corrupt_e2e: PASS (each damaged copy: export matches, verify finds it and its daemon logs it; the primary's: found by the client by its CRC, CORRUPT report, read around; a block not read since its write: the primary logs it and repairs its copy at once; a write over part of a bad block on the primary: acknowledged after the primary's own repair; every copy as acknowledged)"
