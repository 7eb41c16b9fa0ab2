#!/usr/bin/env bash
# E2E of issue 23 "Nothing blocks an I/O thread": etcd work of the storage
# daemons and of the client library runs on helper threads, so reads and
# writes of an open volume keep their latency while etcd is held (requests
# accepted, answers withheld: test/lib/etcd_hold_proxy.py ... all).
#
# Three daemons (--gc-interval 1) reach etcd through one hold proxy (a
# fourth, node-4, directly), the
# client (test/e2e/e2e_lat.c: 4 KiB writes and read-backs at QD 1 in chunk
# 1, every operation and every gap between completions timed) through
# another.
#  1. The daemons' etcd is held for three seconds: their old-copy collection
#     (gc_tick, every second) reads etcd meanwhile.
#  2. The client's etcd is held, and the row of slice 0 moves to a new
#     version (same members): the client's writes to chunk 0 are answered
#     STALE and need a placement reload, which waits for etcd.
#  3. The daemons' etcd is held while the primary of chunk 1 (node-1) must
#     make a new connection: node-4, the backup of a second volume nb2 whose
#     primary is node-1 too (and of nothing else), was restarted, and a
#     write of nb2 (zl volume import, its own etcd) reaches node-1. The
#     look-up of node-4's address waits for etcd, the forward queues; the
#     I/O of nb goes on. After the release node-1 connects to node-4 and
#     the import completes.
#  4. New chunk files are created on the daemons (zl volume import of a new
#     volume nb3) while every fsync of a new chunk file takes FS_MS
#     (1500 ms: test/e2e/io_delay.c, preloaded into every daemon, delays
#     fsyncs of *.tmp files while $CL_DIR/slowfsync exists): the creation
#     runs on the chunk store's open workers, the I/O of nb's open chunk
#     goes on.
#  5. Peering over chunk files that are closed (node-1 restarted after nb4,
#     256 chunks of 64 KiB in 64 slices, was written) while every open of an
#     existing chunk file takes OPEN_MS (400 ms: the shim's open delay, while
#     $CL_DIR/slowopen exists): two slices of nb4 move to node-1 as primary
#     (its own version scan, 4 chunks each) and two to node-2 (node-1 lists
#     its versions for node-2's CHUNK_VERSIONS, with the 4 clone chunks each
#     of slices 2 and 3 hold: snapshot 1 of nb4 was set and their chunks
#     rewritten at sequence 1 before the restart). The chunks and clones are
#     opened on the store's open workers (zl_chunk_warm, zl_chunk_snap_warm),
#     the I/O of nb's open chunk goes on; on the loop each scan would take
#     1.6 s.
#  5b. A write at sequence 1 of a chunk of nb4 whose primary is not node-1
#     while every open of an existing chunk file takes COW_OPEN_MS (1500 ms,
#     the number written into slowopen): node-1's closed backup copy is
#     opened on an open worker before its copy-on-write looks the chunk's
#     sequence up (srv_warm in srv_write_disk), 1.5 s on the loop otherwise.
#  6. nb4 is deleted (zl volume rm) while every unlink of a chunk file takes
#     UNLINK_MS (15 ms, while $CL_DIR/slowunlink exists): node-1 removes its
#     256 files on the store's open workers (3.8 s on the loop otherwise),
#     the I/O of nb goes on, and the volume's directories are gone after.
# No cluster manager: the rows change only by hand (hl_etcd order).
# Oracle: e2e_lat's slowest operation and longest gap stay under
# NB_MAX_MS (1000 ms: a third of a hold, a fifth of the etcd timeout; on a
# loaded 2-core machine single operations took up to 490 ms with etcd
# answering), every read returns what was written, I/O completed during
# every hold, the chunk 0 writes completed after the release of step 2, in
# step 3 node-1 connected to node-4 after the release and nb2 reads back
# what the import wrote, and in step 4 the daemons' fsyncs were delayed (the
# shim's log), I/O completed meanwhile and nb3 reads back as imported; in
# step 5 node-1's opens of nb4's chunk files were delayed (16 chunks and 8
# clones, the shim's log) while e2e_lat's operations stayed under NB_MAX_MS;
# in step 5b the write completed, node-1's open of its copy was delayed by
# COW_OPEN_MS and the operations stayed under NB_MAX_MS; in step 6
# node-1's unlinks of nb4's files were delayed (256, the shim's log), the
# operations stayed under NB_MAX_MS and no daemon kept a directory of nb4.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
source "$SRC/test/lib/hold.sh"
fail() {
	echo "noblock_e2e: FAIL: $*" >&2
	[ -f "$CL_DIR/lat.out" ] && { echo "--- e2e_lat" >&2; cat "$CL_DIR/lat.out" "$CL_DIR/lat.err" >&2; }
	for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; grep -v DEBUG "$f" | tail -8 >&2; done
	[ -n "${LAT:-}" ] && kill "$LAT" 2>/dev/null
	exit 1
}
ok() { echo "noblock_e2e: ok: $*"; }
PY=/usr/bin/python3
MAX_MS=${NB_MAX_MS:-1000}
FS_MS=1500
OPEN_MS=400
COW_OPEN_MS=1500
UNLINK_MS=15
CL_MANAGER=0 cl_e2e_begin e2e-noblock "$1" 0 || fail "cluster did not start"
# Every exit, a failed command under set -e included, ends e2e_lat too.
HL_PIDS=""
trap 'hl_cleanup || true' EXIT

PS=$(hold_proxy_start storage all)
PC=$(hold_proxy_start client all)
# node-4 reaches etcd directly: it must load nb2 while the others' etcd is
# held (step 3).
# Every daemon with the fsync delay of step 4 (idle until slowfsync exists).
start() {
	local -x LD_PRELOAD="$CL_BIN/libzl_io_delay.so" ZL_FSYNC_DELAY_MS=$FS_MS \
		ZL_FSYNC_DELAY_WHILE="$CL_DIR/slowfsync" ZL_FSYNC_DELAY_SUFFIX=.zlc.tmp \
		ZL_FSYNC_DELAY_LOG="$CL_DIR/fsync-delays" ZL_OPEN_DELAY_MS=$OPEN_MS \
		ZL_OPEN_DELAY_WHILE="$CL_DIR/slowopen" ZL_OPEN_DELAY_SUFFIX=.zlc \
		ZL_OPEN_DELAY_LOG="$CL_DIR/storage-$1.open-delays" ZL_UNLINK_DELAY_MS=$UNLINK_MS \
		ZL_UNLINK_DELAY_WHILE="$CL_DIR/slowunlink" ZL_UNLINK_DELAY_SUFFIX=.zlc \
		ZL_UNLINK_DELAY_LOG="$CL_DIR/storage-$1.unlink-delays"
	if [ "$1" = 4 ]; then
		cl_start_storage 4 "" --gc-interval 1
	else
		cl_start_storage "$1" "" --etcd "http://127.0.0.1:$PS" --gc-interval 1
	fi
}
vol_id() { "$ZL" volume inspect "$1" | awk '$1 == "id" {print $2}'; }
# nb2 (one slice) on node-1 and node-4 only: created while they are the only
# nodes; node-4 then stops (its record goes) until nb exists.
start 1
start 4
cl_wait_nodes 2 || fail "node-1 and node-4 did not register"
"$ZL" volume create nb2 --size 1M --chunk-size 1M --replicas 2 >/dev/null || fail "create nb2"
V2=$(vol_id nb2)
[ -n "$V2" ] || fail "no volume id of nb2"
hl_etcd order "$V2" 0 node-1 node-4 || fail "cannot make node-1 primary of nb2: $(cl_rows "$V2")"
cl_stop storage-4
[ "$(hl_etcd node node-4)" = - ] || fail "node-4 still registered after its stop"
start 2
start 3
cl_wait_nodes 3 || fail "storage nodes did not register"
"$ZL" volume create nb --size 64M --replicas 3 >/dev/null || fail "create nb"
V=$(vol_id nb)
[ -n "$V" ] || fail "no volume id"
[ "$(cl_rows "$V" | wc -l)" -ge 2 ] || fail "nb has fewer than 2 slices: $(cl_rows "$V")"
# nb4 (step 5) on node-1..3, its first four rows with node-3 as primary;
# node-1 restarts after it is written, so its copies are closed.
"$ZL" volume create nb4 --size 16M --chunk-size 64K --replicas 3 >/dev/null || fail "create nb4"
V4=$(vol_id nb4)
[ "$(cl_rows "$V4" | wc -l)" = 64 ] || fail "nb4 does not have 64 slices: $(cl_rows "$V4" | wc -l)"
for s4 in 0 1 2 3; do
	hl_etcd order "$V4" $s4 node-3 node-2 node-1 || fail "cannot order slice $s4 of nb4"
done
dd if=/dev/urandom of="$CL_DIR/nb4.img" bs=1M count=16 status=none
"$ZL" volume import nb4 "$CL_DIR/nb4.img" >/dev/null 2>"$CL_DIR/import4.err" ||
	fail "import of nb4: $(cat "$CL_DIR/import4.err")"
# Snapshot 1 of nb4 (step 5): the chunks of slices 2 and 3 rewritten at
# sequence 1 through their primary node-3, so each copy holds 4 clones.
hl_etcd snaps "$V4" 1 1 || fail "cannot set snapshot 1 of nb4"
head -c 65536 /dev/urandom >"$CL_DIR/nb4.piece"
for c4 in 2 66 130 194 3 67 131 195; do
	sv4=$(cl_rows "$V4" | awk -v s=$((c4 % 64)) '$1 == s {print $2}')
	out=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$(cat "$CL_DIR/storage-3/port")" write "$V4" "$c4" 0 \
		"$sv4" "$CL_DIR/nb4.piece" 10000 seq=1 2>&1) || true
	grep -q "^status=OK" <<<"$out" || fail "write of chunk $c4 of nb4 at sequence 1 to node-3: $out"
done
cl_stop storage-1
start 1
cl_wait_nodes 3 || fail "node-1 did not register again"
# node-1 is the primary of chunk 1 (slice 1), the one e2e_lat writes.
row1=$(cl_rows "$V" | awk '$1 == 1')
others=$(awk '{for (i = 4; i <= NF; i++) {split($i, a, ":"); if (a[1] != "node-1") printf "%s ", a[1]}}' <<<"$row1")
# shellcheck disable=SC2086 # the node ids are words
hl_etcd order "$V" 1 node-1 $others || fail "cannot make node-1 primary of slice 1 ($row1)"
start 4
cl_wait_nodes 4 || fail "node-4 did not register again"
dd if=/dev/urandom of="$CL_DIR/nb2.img" bs=1M count=1 status=none
"$ZL" volume import nb2 "$CL_DIR/nb2.img" >/dev/null 2>"$CL_DIR/import0.err" ||
	fail "first import of nb2: $(cat "$CL_DIR/import0.err")"

"$CL_BIN/e2e_lat" --etcd "http://127.0.0.1:$PC" --volume nb --chunk 1 --max-ms "$MAX_MS" \
	--stop "$CL_DIR/stop" --trigger-chunk 0 --trigger "$CL_DIR/trigger" \
	>"$CL_DIR/lat.out" 2>"$CL_DIR/lat.err" &
LAT=$!
HL_PIDS="$HL_PIDS $LAT"
for _ in $(seq 1 300); do grep -q ready "$CL_DIR/lat.out" && break; sleep 0.1; done
grep -q ready "$CL_DIR/lat.out" || fail "e2e_lat did not start its I/O"
# ops_now: operations completed so far (e2e_lat's last "ops=" line).
ops_now() { grep -o '^ops=[0-9]*' "$CL_DIR/lat.out" | tail -1 | cut -d= -f2 || true; }
# ticks N: waits (at most N + 2 s) until e2e_lat printed N more lines.
ticks() {
	local want=$(($(grep -c '^ops=' "$CL_DIR/lat.out") + $1))
	for _ in $(seq 1 $((10 * $1 + 20))); do
		[ "$(grep -c '^ops=' "$CL_DIR/lat.out")" -ge "$want" ] && return 0
		sleep 0.1
	done
	return 0
}
# slowest L: the slowest operation e2e_lat reported after its line L.
slowest() { grep '^ops=' "$CL_DIR/lat.out" | tail -n "+$(($1 + 1))" | sed 's/.*max_ms=//' | sort -g | tail -1; }
# under_max MS: MS is under MAX_MS.
under_max() { awk -v m="${1:-0}" -v lim="$MAX_MS" 'BEGIN { exit !(m < lim) }'; }
# lat_check L O WHILE WHY: the operations e2e_lat reported after its line L
# (smax: the slowest) stayed under MAX_MS and some completed since O
# (o_end: ops now), while WHILE happened (WHY: what a failure means).
lat_check() {
	smax=$(slowest "$1")
	under_max "$smax" || fail "an operation of nb took ${smax} ms while $3 (limit $MAX_MS ms: $4)"
	o_end=$(ops_now)
	[ "${o_end:-0}" -gt "${2:-0}" ] || fail "no I/O completed while $3 (ops $2 -> $o_end)"
}
# held NAME: waits (at most 10 s) until proxy NAME holds an answer.
held() {
	for _ in $(seq 1 100); do
		grep -q 'held a response' "$CL_DIR/serve-proxy-$1/log" && return 0
		sleep 0.1
	done
	fail "proxy $1 held no answer: $(cat "$CL_DIR/serve-proxy-$1/log")"
}

# 1. The storage daemons' etcd held.
ticks 1
o0=$(ops_now)
hold_on storage
held storage
ticks 3
o1=$(ops_now)
hold_release storage
[ "${o1:-0}" -gt "${o0:-0}" ] || fail "no I/O completed while the daemons' etcd was held (ops $o0 -> $o1)"
ok "the daemons' etcd held for 3 s: $((o1 - o0)) operations meanwhile"

# 2. The client's etcd held; slice 0 moves to a new row version.
ticks 1
hold_on client
o2=$(ops_now)
row=$(cl_rows "$V" | awk '$1 == 0')
nodes=$(awk '{for (i = 4; i <= NF; i++) {split($i, a, ":"); printf "%s ", a[1]}}' <<<"$row")
# shellcheck disable=SC2086 # the node ids are words
hl_etcd order "$V" 0 $nodes || fail "cannot move the row of slice 0 ($row)"
touch "$CL_DIR/trigger"
held client
ticks 3
o3=$(ops_now)
hold_release client
[ "${o3:-0}" -gt "${o2:-0}" ] || fail "no I/O completed while the client's etcd was held (ops $o2 -> $o3)"
ok "the client's etcd held during a placement reload: $((o3 - o2)) operations meanwhile"

# 3. The daemons' etcd held while node-1 must connect to node-4 again.
S1="$CL_DIR/storage-1/log"
peer4() { grep -c "$1 node=node-4" "$S1" || true; }
cl_stop storage-4
start 4
for _ in $(seq 1 100); do
	[ "$(peer4 'peer connection closed:')" -ge "$(peer4 'connected to peer')" ] && break
	sleep 0.1
done
[ "$(peer4 'peer connection closed:')" -ge "$(peer4 'connected to peer')" ] ||
	fail "node-1 kept its connection to node-4 across node-4's restart"
for _ in $(seq 1 100); do [ "$(hl_etcd node node-4)" != - ] && break; sleep 0.1; done
[ "$(hl_etcd node node-4)" != - ] || fail "node-4 did not register after its restart"
looks0=$(peer4 'looking up peer')
conns0=$(peer4 'connected to peer')
ticks 1
o4=$(ops_now)
hold_on storage
held storage
dd if=/dev/urandom of="$CL_DIR/nb2b.img" bs=1M count=1 status=none
"$ZL" volume import nb2 "$CL_DIR/nb2b.img" >/dev/null 2>"$CL_DIR/import.err" &
IMP=$!
for _ in $(seq 1 100); do [ "$(peer4 'looking up peer')" -gt "$looks0" ] && break; sleep 0.1; done
[ "$(peer4 'looking up peer')" -gt "$looks0" ] ||
	fail "node-1 did not start a connection to node-4 while etcd was held"
ticks 3
o5=$(ops_now)
hold_release storage
[ "${o5:-0}" -gt "${o4:-0}" ] ||
	fail "no I/O completed while node-1 connected to node-4 with etcd held (ops $o4 -> $o5)"
rc=0
wait "$IMP" || rc=$?
[ "$rc" = 0 ] || fail "import of nb2 across the new connection failed: $(cat "$CL_DIR/import.err")"
[ "$(peer4 'connected to peer')" -gt "$conns0" ] || fail "node-1 never connected to node-4"
"$ZL" volume export nb2 "$CL_DIR/nb2c.img" >/dev/null 2>&1 || fail "export of nb2"
cmp -s "$CL_DIR/nb2b.img" "$CL_DIR/nb2c.img" || fail "nb2 does not read back as imported"
ok "node-1 connected to node-4 with the daemons' etcd held: $((o5 - o4)) operations meanwhile"

# 4. New chunk files created while their fsyncs take FS_MS each.
"$ZL" volume create nb3 --size 4M --chunk-size 1M --replicas 3 >/dev/null || fail "create nb3"
dd if=/dev/urandom of="$CL_DIR/nb3.img" bs=1M count=4 status=none
ticks 1
o6=$(ops_now)
l6=$(grep -c '^ops=' "$CL_DIR/lat.out")
touch "$CL_DIR/slowfsync"
t0=$(date +%s%N)
"$ZL" volume import nb3 "$CL_DIR/nb3.img" >/dev/null 2>"$CL_DIR/import3.err" ||
	fail "import of nb3 with slow fsyncs: $(cat "$CL_DIR/import3.err")"
t1=$(date +%s%N)
rm -f "$CL_DIR/slowfsync"
ticks 1
o7=$(ops_now)
# The slowest operation of the seconds e2e_lat reported meanwhile.
smax=$(slowest "$l6")
under_max "$smax" ||
	fail "an operation of nb took ${smax} ms while new chunk files were created (limit $MAX_MS ms: chunk creation blocks the I/O thread)"
delays=$(grep -c '\.zlc\.tmp$' "$CL_DIR/fsync-delays" 2>/dev/null || true)
[ "${delays:-0}" -ge 4 ] || fail "fewer than 4 fsyncs of new chunk files delayed (${delays:-0}): is the shim preloaded?"
[ "${o7:-0}" -gt "${o6:-0}" ] || fail "no I/O completed while new chunk files were created (ops $o6 -> $o7)"
"$ZL" volume export nb3 "$CL_DIR/nb3c.img" >/dev/null 2>&1 || fail "export of nb3"
cmp -s "$CL_DIR/nb3.img" "$CL_DIR/nb3c.img" || fail "nb3 does not read back as imported"
ok "$delays new chunk files created with ${FS_MS} ms fsyncs in $(((t1 - t0) / 1000000)) ms: $((o7 - o6)) operations meanwhile, the slowest ${smax} ms"

# 5. Peering over closed chunk files while each open takes OPEN_MS.
ticks 1
o8=$(ops_now)
l8=$(grep -c '^ops=' "$CL_DIR/lat.out")
touch "$CL_DIR/slowopen"
for s4 in 0 1; do
	hl_etcd order "$V4" $s4 node-1 node-2 node-3 || fail "cannot make node-1 primary of slice $s4 of nb4"
done
for s4 in 2 3; do
	hl_etcd order "$V4" $s4 node-2 node-1 node-3 || fail "cannot make node-2 primary of slice $s4 of nb4"
done
opens() { grep -c "/$V4/" "$CL_DIR/storage-1.open-delays" 2>/dev/null || true; }
for _ in $(seq 1 300); do [ "$(opens)" -ge 24 ] 2>/dev/null && break; sleep 0.1; done
n_opens=$(opens)
[ "${n_opens:-0}" -ge 24 ] ||
	fail "node-1 opened ${n_opens:-0} of the 24 closed chunk files (16 chunks, 8 clones) of nb4's slices 0-3 (were they open already?)"
ticks 2
rm -f "$CL_DIR/slowopen"
o9=$(ops_now)
smax=$(slowest "$l8")
under_max "$smax" ||
	fail "an operation of nb took ${smax} ms while node-1 peered over closed chunk files (limit $MAX_MS ms: chunk opens block the I/O thread)"
[ "${o9:-0}" -gt "${o8:-0}" ] || fail "no I/O completed while node-1 opened closed chunk files (ops $o8 -> $o9)"
ok "node-1 peered over $n_opens closed chunk files with ${OPEN_MS} ms opens: $((o9 - o8)) operations meanwhile, the slowest ${smax} ms"

# 5b. A write at a snapshot sequence to a closed backup copy on node-1.
ticks 1
o12=$(ops_now)
l12=$(grep -c '^ops=' "$CL_DIR/lat.out")
row5=$(cl_rows "$V4" | awk '$1 >= 4 && $4 !~ /^node-1:/ && / node-1:in_sync/ {print; exit}')
s5=${row5%% *}
[ -n "$s5" ] || fail "no slice of nb4 with node-1 as an in-sync backup: $(cl_rows "$V4")"
p5=$(awk '{split($4, a, ":"); print a[1]}' <<<"$row5")
cow_opens() { grep -c "^$COW_OPEN_MS .*/$V4/" "$CL_DIR/storage-1.open-delays" 2>/dev/null || true; }
echo "$COW_OPEN_MS" >"$CL_DIR/slowopen"
out=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$(cat "$CL_DIR/storage-${p5#node-}/port")" write "$V4" "$s5" 0 \
	"$(awk '{print $2}' <<<"$row5")" "$CL_DIR/nb4.piece" 10000 seq=1 2>&1) || true
ticks 2
rm -f "$CL_DIR/slowopen"
grep -q "^status=OK" <<<"$out" || fail "write of chunk $s5 of nb4 at sequence 1 to $p5: $out"
[ "$(cow_opens)" -ge 1 ] ||
	fail "node-1's open of its copy of chunk $s5 of nb4 was not delayed (was it open already?)"
lat_check "$l12" "$o12" "node-1 wrote a closed chunk at a snapshot sequence" \
	"the copy-on-write's look-up blocks the I/O thread"
ok "a write at a snapshot sequence of a closed copy on node-1 with ${COW_OPEN_MS} ms opens: $((o_end - o12)) operations meanwhile, the slowest ${smax} ms"

# 6. nb4 deleted while each unlink of a chunk file takes UNLINK_MS.
ticks 1
o10=$(ops_now)
l10=$(grep -c '^ops=' "$CL_DIR/lat.out")
touch "$CL_DIR/slowunlink"
t0=$(date +%s%N)
"$ZL" volume rm nb4 --force >/dev/null 2>"$CL_DIR/rm4.err" || fail "zl volume rm nb4: $(cat "$CL_DIR/rm4.err")"
t1=$(date +%s%N)
rm -f "$CL_DIR/slowunlink"
ticks 3 # an operation that waited is reported in a line after it ended
o11=$(ops_now)
unlinks=$(grep -c "/$V4/" "$CL_DIR/storage-1.unlink-delays" 2>/dev/null || true)
[ "${unlinks:-0}" -ge 256 ] ||
	fail "node-1 unlinked ${unlinks:-0} of nb4's 256 chunk files with the delay (is the shim preloaded?)"
smax=$(slowest "$l10")
under_max "$smax" ||
	fail "an operation of nb took ${smax} ms while node-1 removed nb4's files (limit $MAX_MS ms: a volume delete blocks the I/O thread)"
[ "${o11:-0}" -gt "${o10:-0}" ] || fail "no I/O completed while nb4 was deleted (ops $o10 -> $o11)"
for n in 1 2 3; do
	[ ! -e "$CL_DIR/storage-$n/data/chunks/$V4" ] || fail "node-$n kept the directory of the deleted nb4"
done
ok "nb4 deleted ($unlinks files on node-1 with ${UNLINK_MS} ms unlinks, $(((t1 - t0) / 1000000)) ms): $((o11 - o10)) operations meanwhile, the slowest ${smax} ms"

touch "$CL_DIR/stop"
rc=0
wait "$LAT" || rc=$?
[ "$rc" = 0 ] || fail "e2e_lat failed (rc $rc): $(tail -1 "$CL_DIR/lat.out")"
last=$(tail -1 "$CL_DIR/lat.out")
[[ "$last" =~ triggers=([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] ||
	fail "no write of chunk 0 completed after the reload: $last"
ok "every operation under $MAX_MS ms, every read back as written: $last"
echo "FIGURE: noblock: $last (etcd held 3 s for the daemons, then for the client, then for the daemons while a primary connects to a new peer; then new chunk files created with ${FS_MS} ms fsyncs; then peering over closed chunk files and clones with ${OPEN_MS} ms opens; then a write at a snapshot sequence with ${COW_OPEN_MS} ms opens; then a volume delete with ${UNLINK_MS} ms unlinks)"
