#!/usr/bin/env bash
# Acceptance test BACKFILL of issue 10 (docs/REPLICATION.md §5): four storage
# daemons (--heal on, zone=z<i>), a real zipline-controller with the manager
# on (grace 2 s, down-out 5 s) and a 3-replica volume full of random data
# (the imported file is the oracle). node-4 is killed (-9) for good; the
# manager must replace it in every row that listed it (distinct nodes, one per
# zone) and the primaries must copy the new members whole, until every slice
# is 3 of 3 IN_SYNC on node-1..3 within a bound; meanwhile the first 8 MiB are
# written again (must be acknowledged: 2 of 3 in sync). The chunk files of all
# three must then equal the data written, chunk by chunk. node-4 then comes
# back on its data dir: it is in no row any more, so its old copies must be
# removed (storage_gc.c, --gc-interval 1 --gc-grace 3) within GC_BOUND s and
# the members' files stay the data written; it is stopped again. Then node-1 is
# killed (-9) as well: every byte must still read back (zl volume export ==
# the data written; only after the manager gave node-1's slices new
# primaries, reads being primary-only), and the two replicas left of every
# chunk must be identical.
#
# Usage: backfill_e2e.sh BUILD_DIR [--manager-restart]
#   --manager-restart: the controller is killed (-9) in the middle of the
#   backfill (replacement members recovering, not all in sync) and started
#   again; the end result must be the same.
# Figures on lines starting with "FIGURE:". KEEP=1 keeps the state dir. One
# of them puts the backfill's recovery rate next to the data directory
# filesystem's own sequential write rate, measured in the same run:
#   FIGURE: recovery_mbps=R disk_write_mbps=D ratio=R/D (...)
# (MB = 10^6 bytes; informative: only R > 0 is asserted).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal_b.sh"
hb_test backfill_e2e "${2:-}"
SIZE_MB=64
CHUNK=65536
DOWN_OUT=5
# Backfill bound: node lease (10 s) + down-out + the copy, with room for 2 cores.
BOUND_S=$((RESTART ? 90 : 75))
# Copies slow enough that the test sees the backfill under way (to rewrite
# data during it, and with --manager-restart to kill the manager in it).
# ZL_BACKFILL_MBPS overrides it to measure the uncapped rate (the README's figures).
MBPS=${ZL_BACKFILL_MBPS:-$((RESTART ? 32 : 64))}
cl_require "$T" "$1" zipline-storage zipline-controller zl

# recovery_rate MEMBER...: "BYTES MS MBPS" of the backfill from the storage
# logs' recovery counters: bytes_copied summed over the "recovery caught up"
# lines for those members of $vid since $t0, over the time from the first
# "recovery started" to the last "recovery caught up" line (log timestamps).
recovery_rate() {
	"$HB_PY" - "$vid" "$t0" "$*" "$CL_DIR"/storage-*/log <<'PY'
import re, sys, datetime
vid, t0, members = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split())
hexid = vid[len('vol-'):]
def ms(line):
    ts = datetime.datetime.strptime(line[:23], '%Y-%m-%dT%H:%M:%S.%f')
    return int(ts.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
first = last = None
total = 0
lines = [l for f in sys.argv[4:] for l in open(f, errors='replace')]
for line in lines:
    m = re.search(r'recovery (started|caught up): vol=(?:vol-)?([0-9a-f]{16}) slice=\d+ member=(\S+)', line)
    if not m or m.group(2) != hexid or m.group(3) not in members:
        continue
    t = ms(line)
    if t < t0:
        continue
    if m.group(1) == 'started':
        first = t if first is None else min(first, t)
    else:
        b = re.search(r'bytes_copied=(\d+)', line)
        total += int(b.group(1)) if b else 0
        last = t if last is None else max(last, t)
if first is None or last is None or last <= first:
    sys.exit('no recovery started/caught-up pair since the kill (first=%s last=%s)' % (first, last))
print(total, last - first, '%.1f' % (total / 1e3 / (last - first)))
PY
}

# disk_write_mbps DIR: sequential write rate of DIR's filesystem in MB/s, by
# fio (installed by scripts/install-deps.sh): one 256 MiB file in 1 MiB
# O_DIRECT writes, fsync at the end. Prints "MBPS".
disk_write_mbps() {
	local f="$1/disk-write.fio" out="$1/disk-write.json"
	command -v fio >/dev/null || { echo "fio is not installed (scripts/install-deps.sh)" >&2; return 1; }
	fio --name=seqwrite --filename="$f" --rw=write --bs=1M --size=256M --direct=1 \
		--ioengine=psync --end_fsync=1 --output-format=json --output="$out" >/dev/null 2>&1 ||
		{ rm -f "$f"; echo "fio failed: $(cat "$out" 2>/dev/null | tail -3)" >&2; return 1; }
	rm -f "$f"
	"$HB_PY" -c 'import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
if w["io_bytes"] < 256 << 20 or w["bw_bytes"] <= 0:
    sys.exit("fio wrote %d bytes at %d B/s" % (w["io_bytes"], w["bw_bytes"]))
print("%.1f" % (w["bw_bytes"] / 1e6))' "$out"
}

export CL_STORAGE_FLAGS="--recovery-mbps $MBPS --log-level info --gc-interval 1 --gc-grace 3"
GC_BOUND=60 # seconds from node-4's restart to its last old chunk file gone
hb_begin e2e-backfill "$1" 4 || fail "cluster did not start"
hb_start_manager "$DOWN_OUT" || fail "the manager (zipline-controller --manager=on) did not start"

"$ZL" volume create bvol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect bvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
t=$(hb_now_ms)
"$ZL" volume import bvol "$CL_DIR/in" || fail "import"
echo "FIGURE: import ${SIZE_MB} MiB in $(($(hb_now_ms) - t)) ms"
hb_ctl healthy "$vid" 3 >/dev/null || fail "rows not healthy before any failure: $(hb_ctl healthy "$vid" 3)"
rows4=$(hb_ctl count "$vid" node-4)
slices=$(hb_ctl rows "$vid" | wc -l)
full=$((rows4 * SIZE_MB * 1024 * 1024 / slices))
echo "$T: node-4 is a member of $rows4 of $slices rows ($full bytes to backfill)"

# While the new members are being filled, the first REWRITE_MB are written
# again (2 of 3 in sync: min_size holds, the write must be acknowledged, and
# the copies must not undo it). $CL_DIR/want is the volume's content after it.
REWRITE_MB=8
head -c ${REWRITE_MB}M /dev/urandom >"$CL_DIR/new"
cp "$CL_DIR/in" "$CL_DIR/want"
dd if="$CL_DIR/new" of="$CL_DIR/want" conv=notrunc status=none

# node-4 dies for good.
t0=$(hb_now_ms)
cl_stop storage-4 KILL
restarted=0 t_repl='' HB_BG=''
ok=0
while [ $(($(hb_now_ms) - t0)) -lt $((BOUND_S * 1000)) ]; do
	rows=$(hb_ctl rows "$vid") || fail "cannot read the rows"
	if [ -z "$t_repl" ] && ! grep -q 'node-4:' <<<"$rows"; then
		t_repl=$(hb_now_ms)
		echo "FIGURE: node-4 replaced in every row $((t_repl - t0)) ms after the kill"
	fi
	if [ -z "$HB_BG" ] && grep -v 'node-4:' <<<"$rows" | grep -q ':recovering'; then
		echo "$T: backfill under way ($(grep -c ':recovering' <<<"$rows") rows recovering): rewriting the first $REWRITE_MB MiB"
		timeout 120 "$ZL" volume import bvol "$CL_DIR/new" >"$CL_DIR/rewrite.log" 2>&1 &
		HB_BG=$!
	fi
	if [ "$RESTART" = 1 ] && [ "$restarted" = 0 ] &&
		grep -v 'node-4:' <<<"$rows" | grep -q ':recovering'; then
		echo "$T: backfill under way ($(grep -c ':recovering' <<<"$rows") rows recovering): killing the manager (-9)"
		cl_manager_outage manager 1 hb_start_manager "$DOWN_OUT" || fail "the manager did not start again"
		restarted=1
		echo "FIGURE: manager restarted $(($(hb_now_ms) - t0)) ms after the kill of node-4"
	fi
	if hb_ctl healthy "$vid" 3 node-4 >"$CL_DIR/healthy"; then
		ok=1
		break
	fi
	sleep 0.2
done
t1=$(hb_now_ms)
read -r chunks copied lines < <(hb_recovery_bytes node-1 node-2 node-3)
echo "FIGURE: backfill $((t1 - t0)) ms from the kill of node-4 to $(head -1 "$CL_DIR/healthy")" \
	"(bound ${BOUND_S} s); copied $copied bytes in $chunks chunks ($lines caught-up lines; full copy = $full bytes)"
if [ "$ok" != 1 ]; then
	cat "$CL_DIR/healthy" >&2
	grep -h 'manager: vol=' "$HB_MGR_LOG" | tail -5 >&2 || true
	fail "not every slice is 3 of 3 IN_SYNC without node-4 within ${BOUND_S} s: $(head -1 "$CL_DIR/healthy")"
fi
[ -n "$HB_BG" ] || fail "no replacement member was ever seen recovering: the backfill ended between two looks at the rows (no rewrite during it)"
wait "$HB_BG" || fail "the rewrite during the backfill (2 of 3 in sync) failed: $(tail -1 "$CL_DIR/rewrite.log")"
HB_BG=
[ "$RESTART" = 0 ] || [ "$restarted" = 1 ] ||
	fail "the backfill ended before a replacement member was seen recovering: no middle to kill the manager in"
m7=$(grep -c 'M7 node gone' "$HB_MGR_LOG" || true)
echo "$T: manager log: $m7 'M7 ... replaced' decisions"
# Independent oracle: the chunk files of all three members hold the data written.
hb_files "$CHUNK" "$vid" 1 2 3 >"$CL_DIR/files3" || fail "reading chunk files"
res=$(hb_ctl replicas "$vid" --input "$CL_DIR/want" "$CL_DIR/files3" node-1 node-2 node-3) ||
	fail "after the backfill the replicas are not all the data written: $res"
echo "FIGURE: after backfill: $(head -1 <<<"$res") (all three members, equal to the data written)"
[ "$copied" -ge "$full" ] ||
	echo "$T: note: the primaries logged $copied bytes copied, less than the $full of a full copy (the chunk files match, see above)"
# Recovery throughput next to the disk's own (same filesystem as the data
# directories, measured now that the copy is over).
[ "$copied" -gt 0 ] || fail "the primaries logged no bytes copied by the backfill"
read -r rbytes rms rmbps < <(recovery_rate node-1 node-2 node-3) ||
	fail "cannot derive the recovery rate from the storage logs"
dmbps=$(disk_write_mbps "$CL_DIR") || fail "cannot measure the disk write rate of $CL_DIR"
awk -v r="$rmbps" 'BEGIN {exit !(r > 0)}' || fail "recovery rate $rmbps MB/s is not > 0"
echo "FIGURE: recovery_mbps=$rmbps disk_write_mbps=$dmbps ratio=$(awk -v r="$rmbps" -v d="$dmbps" 'BEGIN {printf "%.3f", r / d}')" \
	"($rbytes bytes recovered in $rms ms, first start to last catch-up; recovery capped at --recovery-mbps $MBPS" \
	"= $(awk -v m="$MBPS" 'BEGIN {printf "%.1f", m / 8}') MB/s per primary daemon; disk: fio 256 MiB seq. write, 1 MiB O_DIRECT, fsync at end, in $CL_DIR)"

# node-4 returns on its data dir, a member of no row: its old copies go.
d4="$CL_DIR/storage-4/data/chunks/$vid"
n4() { { find "$d4" -name '*.zlc' 2>/dev/null || true; } | wc -l; }
old4=$(n4)
[ "$old4" -gt 0 ] || fail "node-4 holds no chunk file of $vid before it returns"
t3=$(hb_now_ms)
cl_start_storage 4
k=0
while [ "$(n4)" -gt 0 ] && [ "$k" -lt $((GC_BOUND * 5)) ]; do
	k=$((k + 1))
	sleep 0.2
done
t4=$(hb_now_ms)
[ "$(n4)" -eq 0 ] || fail "$(n4) of node-4's $old4 old chunk files still there $GC_BOUND s after it returned"
if hb_ctl rows "$vid" | grep -q 'node-4:'; then
	fail "node-4 is in a row again after it returned: $(hb_ctl rows "$vid" | grep -m 1 'node-4:')"
fi
read -r gc_files gc_bytes < <(sed -n 's/.*removed \([0-9]*\) old chunk files (\([0-9]*\) bytes).*/\1 \2/p' \
	"$CL_DIR/storage-4/log" | awk '{f += $1; b += $2} END {print f + 0, b + 0}')
[ "$gc_files" -eq "$old4" ] || fail "node-4 logged $gc_files old chunk files removed, $old4 were there"
echo "FIGURE: backfill_gc: node-4 back on its data dir: its $gc_files old chunk files ($gc_bytes bytes) reclaimed $((t4 - t3)) ms after its restart (--gc-interval 1 --gc-grace 3)"
if grep -q EBADF "$CL_DIR"/storage-*/log; then
	fail "EBADF in a daemon log: $(grep -h EBADF "$CL_DIR"/storage-*/log | head -2)"
fi
hb_files "$CHUNK" "$vid" 1 2 3 >"$CL_DIR/files3" || fail "reading chunk files"
res=$(hb_ctl replicas "$vid" --input "$CL_DIR/want" "$CL_DIR/files3" node-1 node-2 node-3) ||
	fail "after node-4 removed its old copies the replicas are not all the data written: $res"
"$ZL" volume verify bvol >"$CL_DIR/verify.log" 2>&1 || { cat "$CL_DIR/verify.log" >&2; fail "verify after node-4 removed its old copies"; }
echo "$T: after the removal: $(head -1 <<<"$res"), zl volume verify passes"
cl_stop storage-4

# A second daemon dies: two replicas of every chunk are left. Reads are
# served by a slice's primary only (once peered): the rows node-1 was primary
# of can be read only after the manager chose new primaries for them.
prim1=$(hb_ctl primary "$vid" node-1)
t2=$(hb_now_ms)
cl_stop storage-1 KILL
timeout 150 "$ZL" --log-level warn volume export bvol "$CL_DIR/out" >"$CL_DIR/export.log" 2>&1 ||
	{ cat "$CL_DIR/export.log" >&2; fail "export with node-1 and node-4 down failed"; }
still=$(hb_ctl primary "$vid" node-1)
echo "FIGURE: export of ${SIZE_MB} MiB after the kill of node-1 took $(($(hb_now_ms) - t2)) ms" \
	"(node-1 was primary of $prim1 rows, still of $still when it ended)"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "volume content read back after the second kill differs from the data written"
[ "$still" = 0 ] || fail "the export ended while $still rows still named the dead node-1 primary:" \
	"their data was read from non-primary members (heal mode: reads only from the peered primary)" \
	"$(grep -m 2 'read failover' "$CL_DIR/export.log")"
# Heal mode: only the manager changes rows; clients and primaries report.
if grep -m 3 'promoted new primary' "$CL_DIR/export.log" >&2; then
	fail "the client changed a row itself (dropped node-1 to promote a primary); in heal mode it must report and wait for the manager"
fi
if grep -h -m 3 'dropped backup from the in-sync set' "$CL_DIR"/storage-*/log >&2; then
	fail "a daemon with --heal on dropped a member from a row; only the manager may change rows"
fi
hb_files "$CHUNK" "$vid" 2 3 >"$CL_DIR/files2" || fail "reading chunk files"
res=$(hb_ctl replicas "$vid" --input "$CL_DIR/want" "$CL_DIR/files2" node-2 node-3) ||
	fail "the replicas left on node-2 and node-3 differ: $res"
echo "FIGURE: after the second kill: $(head -1 <<<"$res") (node-2, node-3)"
echo "$T: PASS"
