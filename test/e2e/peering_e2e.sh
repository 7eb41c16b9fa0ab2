#!/usr/bin/env bash
# E2E of peering and recovery that converges (zipline-storage --heal on,
# docs/REPLICATION.md §3-4): 3 daemons, a 3-replica volume of 64 chunks (one
# per slice). The test creates divergence on purpose, with raw WRITEs to
# node-1 (e2e_chunk) that are never acknowledged. A, B and C are chunks of
# rows node-1 leads, A = (node-1, X, Y), B reordered to (node-1, Y, X):
#   W1  chunks A and B while X is dead: node-1 and Y hold it;
#   W2  chunk C while X and Y are dead: only node-1 holds it.
# node-1 dies; X and Y restart; the test plays the manager by hand (edits
# of the rows in etcd) and turns node-1 OUT, so rows node-1 was primary of
# get a new primary in a new term. Then:
#   - A's new primary X is behind: peering pulls W1 from Y;
#   - B's new primary Y holds W1: peering pushes it to X;
#   - while A's pull is made to fail (a flipped byte in Y's copy), A stays
#     peering: `zl volume inspect` and `zl status` show it, a READ at X is
#     held and answered ZL_ERR_PEERING; restored, A peers and is not shown
#     peering any more (every slice "active" at the end); X's
#     zipline_storage_peering_slices (its /metrics) is 1 during the hold,
#     0 after;
#   - a READ at a backup is refused (ZL_ERR_NOT_PRIMARY), a READ with
#     ZL_WF_ANY is served with that replica's chunk version;
#   - node-1 returns as RECOVERING: its newer copy of C (W2) is rolled back
#     to the primary's (ZL_PUSH_REPLACE), everything else equal;
# and the oracle reads every replica's chunk files (data sha256 and version)
# and every byte through `zl volume export`.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "peering_e2e: FAIL: $*" >&2
	cl_dump_logs 30 "$CL_DIR"/storage-*/log
	exit 1
}
CHUNK=65536
N_CHUNKS=64
# --metrics: the peering gauge is scraped while slice A is held peering.
export CL_STORAGE_FLAGS="--repl-wait 120 --recovery-mbps 400 --log-level info --metrics 127.0.0.1:0"
CL_MANAGER=0 cl_e2e_begin e2e-peering "$1" 3 --heal on || fail "cluster did not start"
RAW="$CL_BIN/e2e_chunk"
[ -x "$RAW" ] || fail "$RAW is missing (built with the e2e tests)"

# files: "node name sha256 version" of every chunk file of $vid (heal.sh).
files() { hl_files "$CHUNK" --missing-ok "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid"; }
# files_now: reads every replica's chunk files once into $CL_DIR/fnow, what
# fver and fsha look at: called after each change (a write, a peering, a
# recovery), before the checks of that state (each read of the files waits
# until the running daemons' journals hold nothing past their checkpoints).
files_now() { files >"$CL_DIR/fnow" || fail "reading chunk files"; }
# fver NODE CHUNK / fsha NODE CHUNK: version / data sha256 of NODE's copy
# as files_now read it.
fname() { printf '%016x.zlc' "$1"; }
fver() { awk -v n="$1" -v f="$(fname "$2")" '$1 == n && $2 == f {print $4}' "$CL_DIR/fnow"; }
fsha() { awk -v n="$1" -v f="$(fname "$2")" '$1 == n && $2 == f {print $3}' "$CL_DIR/fnow"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
port_of() { cat "$CL_DIR/storage-$1/port"; }
row_ver() { hl_etcd rows "$vid" | awk -v s="$1" '$1 == s {print $2}'; }
# raw_write NODE CHUNK FILE: WRITE at offset 0, waits 1.5 s for the answer.
raw_write() {
	"$RAW" 127.0.0.1 "$(port_of "$1")" write "$vid" "$2" 0 "$(row_ver "$2")" "$3" 1500
}
# wait_log NODE PATTERN [TRIES]: waits for a line of NODE's log.
wait_log() {
	for _ in $(seq 1 "${3:-300}"); do
		grep -q -- "$2" "$CL_DIR/storage-$1/log" && return 0
		sleep 0.1
	done
	return 1
}
wait_up() { # wait_up NODE: the daemon answers
	for _ in $(seq 1 100); do
		"$CL_BIN/e2e_hello" 127.0.0.1 "$(port_of "$1")" "node-$1" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

"$ZL" volume create pvol --size $((N_CHUNKS * CHUNK / 1024))K --replicas 3 --chunk-size 64K ||
	fail "create"
vid=$(hl_vol_id pvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
[ "$(hl_etcd rows "$vid" | wc -l)" -eq $N_CHUNKS ] || fail "expected $N_CHUNKS slices"
head -c $((N_CHUNKS * CHUNK)) /dev/urandom >"$CL_DIR/in"
"$ZL" volume import pvol "$CL_DIR/in" || fail "import"

# Three rows node-1 leads; B gets A's backups in the other order.
hl_etcd rows "$vid" >"$CL_DIR/rows"
read -r A B C _ <<<"$(awk '$4 ~ /^node-1:/ {printf "%s ", $1}' "$CL_DIR/rows")"
[ -n "$C" ] || fail "fewer than 3 rows led by node-1: $(head -5 "$CL_DIR/rows")"
X=$(awk -v a="$A" '$1 == a {sub(/^node-/, "", $5); sub(/:.*/, "", $5); print $5}' "$CL_DIR/rows")
Y=$(awk -v a="$A" '$1 == a {sub(/^node-/, "", $6); sub(/:.*/, "", $6); print $6}' "$CL_DIR/rows")
hl_etcd order "$vid" "$B" node-1 "node-$Y" "node-$X" || fail "reordering row $B"
echo "peering_e2e: chunks A=$A (pull) B=$B (push) C=$C (roll back); X=node-$X Y=node-$Y"
hl_etcd rows "$vid" | awk -v a="$A" -v b="$B" -v c="$C" '$1 == a || $1 == b || $1 == c'
for f in A B C; do head -c $CHUNK /dev/urandom >"$CL_DIR/w$f"; done
cp "$CL_DIR/in" "$CL_DIR/want"
for f in A B; do
	dd if="$CL_DIR/w$f" of="$CL_DIR/want" bs=$CHUNK seek="${!f}" conv=notrunc status=none
done
files_now
old_c=$(fsha 1 "$C")
ver0_a=$(fver 1 "$A")

# W1: X dead, writes to A and B reach node-1 and Y, never acknowledged.
cl_stop storage-$X KILL
for f in A B; do
	out=$(raw_write 1 "${!f}" "$CL_DIR/w$f") || fail "raw write of $f: $out"
	echo "peering_e2e: W1 to chunk $f: $out"
	case "$out" in status=OK*) fail "write $f was acknowledged with an IN_SYNC member dead" ;; esac
done
files_now
for n in 1 $Y; do
	for f in A B; do
		[ "$(fsha $n "${!f}")" = "$(sha_of "$CL_DIR/w$f")" ] || fail "node-$n does not hold W1 of $f"
	done
done
[ "$(fsha $X "$A")" != "$(sha_of "$CL_DIR/wA")" ] || fail "node-$X holds W1 although it was dead"
# W2: Y dead too, the write to C reaches node-1 only.
cl_stop storage-$Y KILL
out=$(raw_write 1 "$C" "$CL_DIR/wC") || fail "raw write of C: $out"
echo "peering_e2e: W2 to chunk C: $out"
files_now
[ "$(fsha 1 "$C")" = "$(sha_of "$CL_DIR/wC")" ] || fail "node-1 does not hold W2"
[ "$(fsha $Y "$C")" = "$old_c" ] || fail "node-$Y holds W2 although it was dead"
ver_w2=$(fver 1 "$C")
cl_stop storage-1 KILL

# X and Y return (same disks); the manager turns node-1 OUT.
cl_start_storage $X
cl_start_storage $Y
wait_up $X && wait_up $Y || fail "node-$X/node-$Y did not come back"
# Their own rows peer in term 1 without the dead node-1: it is asked again
# for a few seconds, then reported and left out.
wait_log $X "peering vol=$vid slice=[0-9]* term=1 members=.*node-1(ZL_ERR_[A-Z_]*)" 150 ||
	fail "node-$X did not peer its rows without the dead node-1"
hl_etcd reports "$vid" | awk -v r="node-$X" '$2 == r && $3 == "node-1"' | grep -q . ||
	fail "node-$X put no failure report about node-1"
# Hold the peering of slice A open: node-$Y's copy of chunk A (W1) is the
# winner; with one data byte of it flipped, node-$X's pull fails CORRUPT and
# is tried again every second, so slice A stays peering until the byte is
# restored. Meanwhile `zl volume inspect` shows A "peering" (from node-$X's
# status record), `zl status` counts it, and client I/O of A waits.
fileA="$CL_DIR/storage-$Y/data/chunks/$vid/$(fname "$A")"
offA=$(cl_chunk_block_off "$fileA" 2 77) || fail "cannot locate block 2 in $fileA"
cl_flip_byte "$fileA" "$offA"
hl_etcd set "$vid" node-1 out || fail "marking node-1 out"
hl_etcd rows "$vid" | awk -v a="$A" -v b="$B" -v c="$C" '$1 == a || $1 == b || $1 == c'
inspect() { "$ZL" volume inspect pvol 2>"$CL_DIR/inspect.err"; }
# slice_state SLICE: its STATE column in `zl volume inspect`.
slice_state() { inspect | awk -v s="$1" '$1 == s && $2 ~ /^[0-9]+$/ && NF >= 5 {print $4}'; }
# wait_state SLICE STATE [TRIES]: every 0.2 s.
wait_state() {
	for _ in $(seq 1 "${3:-100}"); do
		[ "$(slice_state "$1")" = "$2" ] && return 0
		sleep 0.2
	done
	return 1
}
wait_log $X "peering attempt failed: vol=$vid slice=$A term=2 step=pull err=ZL_ERR_CORRUPT" ||
	fail "node-$X did not fail its pull of the damaged chunk $A"
wait_state "$A" peering || fail "inspect does not show slice $A peering: $(inspect | awk -v s="$A" '$1 == s')"
inspect | awk -v s="$A" '$1 == s' | sed 's/^/peering_e2e: held: /'
out=$("$RAW" 127.0.0.1 "$(port_of $X)" read "$vid" "$A" 0 $CHUNK "$(row_ver "$A")")
echo "peering_e2e: READ of chunk A at its primary while peering: $out"
[ "${out%% *}" = status=ZL_ERR_PEERING ] || fail "a READ of slice $A was served while it peers: $out"
[ "$(slice_state "$A")" = peering ] || fail "slice $A no longer shows peering while the hold lasts"
"$ZL" status >"$CL_DIR/status" 2>&1 || true
head -1 "$CL_DIR/status" | sed 's/^/peering_e2e: /'
head -1 "$CL_DIR/status" | grep -Eq '^HEALTH_WARN [0-9]+ slices? degraded \([0-9]+ recovering\), [1-9][0-9]* slices? peering' ||
	fail "zl status does not count slice $A peering: $(head -1 "$CL_DIR/status")"
inspect | grep -Eq '^[0-9]+ slices: [0-9]+ active, [1-9][0-9]* peering, ' ||
	fail "inspect's summary counts no slice peering: $(inspect | tail -1)"
# node-$X's gauge of the slices it peers (its /metrics, parsed by
# prometheus_client's text parser; sampled once a second): A's, exactly
# (its other new rows peered at once).
murl="http://127.0.0.1:$(cl_metrics_port "$CL_DIR/storage-$X/log")/metrics"
# peering_gauge WANT: polls node-$X's gauge until it is WANT (10 s); prints it.
peering_gauge() {
	local v=""
	for _ in $(seq 1 50); do
		v=$(/usr/bin/python3 "$SRC/test/lib/metrics_tool.py" sum zipline_storage_peering_slices -- "$murl") ||
			fail "scraping $murl failed (python3-prometheus-client installed?)"
		[ "$v" = "$1" ] && break
		sleep 0.2
	done
	echo "$v"
}
pg=$(peering_gauge 1)
echo "peering_e2e: held: zipline_storage_peering_slices on node-$X: $pg"
[ "$pg" = 1 ] || fail "node-$X's zipline_storage_peering_slices is $pg, not 1, while slice $A is held peering"
cl_flip_byte "$fileA" "$offA"
wait_log $X "peering vol=$vid slice=$A term=2 .*pulled=1 pushed=0" ||
	fail "node-$X did not log peering of slice $A in term 2 with one chunk pulled"
# node-1 is out: peered, A is degraded (not peering) once X published.
wait_state "$A" degraded || fail "slice $A still shows $(slice_state "$A") after it peered"
pg=$(peering_gauge 0)
[ "$pg" = 0 ] || fail "node-$X's zipline_storage_peering_slices is $pg, not 0, after slice $A peered"
wait_log $Y "peering vol=$vid slice=$B term=2 .*pulled=0 pushed=1" ||
	fail "node-$Y did not log peering of slice $B in term 2 with one chunk pushed"
grep -h "peering vol=$vid slice=\($A\|$B\|$C\) term=2" "$CL_DIR"/storage-*/log | sed 's/.*storage_peering[^ ]* //'
files_now
for f in A B; do
	for n in $X $Y; do
		[ "$(fsha $n "${!f}")" = "$(sha_of "$CL_DIR/w$f")" ] ||
			fail "after peering node-$n does not hold W1 of chunk $f (rolled forward)"
	done
	[ "$(fver $X "${!f}")" = "$(fver $Y "${!f}")" ] || fail "versions of chunk $f differ on node-$X/node-$Y"
done
[ "$(fver $X "$A")" != "$ver0_a" ] || fail "chunk A's version did not move forward"

# Primary-only reads: A's primary is X now; Y is a backup.
out=$("$RAW" 127.0.0.1 "$(port_of $Y)" read "$vid" "$A" 0 $CHUNK "$(row_ver "$A")")
echo "peering_e2e: READ at a backup: $out"
[ "${out%% *}" = status=ZL_ERR_NOT_PRIMARY ] || fail "a backup served a READ: $out"
out=$("$RAW" 127.0.0.1 "$(port_of $Y)" read "$vid" "$A" 0 $CHUNK 0 any "$CL_DIR/rY")
echo "peering_e2e: READ ZL_WF_ANY at a backup: $out"
[ "$out" = "status=OK aux=$(fver $Y "$A")" ] || fail "ZL_WF_ANY READ at node-$Y: $out, want version $(fver $Y "$A")"
cmp "$CL_DIR/rY" "$CL_DIR/wA" || fail "ZL_WF_ANY READ returned other data than node-$Y's copy"
out=$("$RAW" 127.0.0.1 "$(port_of $X)" read "$vid" "$A" 0 $CHUNK "$(row_ver "$A")" "$CL_DIR/rX")
[ "${out%% *}" = status=OK ] || fail "the primary refused a READ: $out"
cmp "$CL_DIR/rX" "$CL_DIR/wA" || fail "the primary returned other data than W1"

# The client reads what the in-sync members agree on (C: the old data).
"$ZL" volume export pvol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "volume content after peering differs"

# node-1 returns as RECOVERING: its copy of C (W2, never acknowledged) is
# newer than the primary's and must be rolled back.
cl_start_storage 1
wait_up 1 || fail "node-1 did not come back"
hl_etcd set "$vid" node-1 recovering || fail "marking node-1 recovering"
got=$(hl_wait_caught_up "$vid" node-1 $N_CHUNKS 60) || fail "only $got of $N_CHUNKS slices reported node-1 CAUGHT_UP"
wait_log 1 "newer copy rolled back to the primary's: vol=[0-9a-f]* chunk=$C version=$ver_w2" 50 ||
	fail "node-1 did not log the roll back of chunk $C (version $ver_w2)"
files_now
[ "$(fsha 1 "$C")" = "$old_c" ] || fail "node-1's copy of C was not rolled back"
hl_etcd set "$vid" node-1 in_sync || fail "marking node-1 in sync"

# Every replica: same data and version per chunk, and the client agrees.
check_all() {
	files >"$CL_DIR/files" || fail "reading chunk files"
	bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
	[ -z "$bad" ] || fail "$1: replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
	[ "$(awk '$1 == 1' "$CL_DIR/files" | wc -l)" -eq $N_CHUNKS ] || fail "$1: node-1 lacks chunk files"
	"$ZL" volume export pvol "$CL_DIR/out" || fail "$1: export"
	cmp "$CL_DIR/want" "$CL_DIR/out" || fail "$1: volume content differs from the acknowledged writes"
	echo "peering_e2e: $1: $N_CHUNKS chunks identical on all 3 replicas, export matches"
}
check_all "after recovery"

# The new terms serve acknowledged writes (node-1 peered again where it leads).
head -c $((N_CHUNKS * CHUNK)) /dev/urandom >"$CL_DIR/want"
"$ZL" volume import pvol "$CL_DIR/want" || fail "import in the new terms"
check_all "after new writes"
grep -q "peering vol=$vid slice=$A term=3 " "$CL_DIR/storage-1/log" ||
	fail "node-1 did not peer slice $A when it led the row again"
# Every slice active again: no status record lists a slice peering.
for _ in $(seq 1 50); do
	inspect | grep -q "^$N_CHUNKS slices: $N_CHUNKS active, 0 peering, " && break
	sleep 0.2
done
inspect | tail -1 | sed 's/^/peering_e2e: after: /'
inspect | grep -q "^$N_CHUNKS slices: $N_CHUNKS active, 0 peering, " ||
	fail "not every slice active after peering: $(inspect | tail -1)"
[ "$("$ZL" status 2>/dev/null | head -1)" = HEALTH_OK ] || fail "zl status is not HEALTH_OK after peering: $("$ZL" status 2>&1 | head -1)"
# A daemon stopped while its peering waits on a member that does not answer
# (node-3 SIGSTOPped: connects complete, nothing is read) stops cleanly:
# its forwarding connections' requests fail inside the teardown while
# peering still exists (a SIGSEGV in peering's callback before: the
# requests failed only when the transport was destroyed, after peering).
kill -STOP "$(cl_pid storage-3)"
cl_stop storage-2
off=$(stat -c %s "$CL_DIR/storage-2/log")
# log2_has PATTERN: a line of node-2's log since the restart matches (grep
# -c reads all: grep -q could close the pipe early, and with pipefail
# tail's SIGPIPE would fail the check even though the line is there).
log2_has() { tail -c +$((off + 1)) "$CL_DIR/storage-2/log" | grep -c -- "$1" >/dev/null; }
cl_start_storage 2
# A start-up (journal, registration, volume loads) takes seconds on a busy
# machine: up to 30 s.
for _ in $(seq 1 600); do
	log2_has "peering started: vol=$vid" && break
	sleep 0.05
done
log2_has "peering started: vol=$vid" ||
	{ kill -CONT "$(cl_pid storage-3)"; fail "restarted node-2 did not start peering within 30 s"; }
sleep 0.3 # deliberate: its requests to node-3 are out and unanswered (they time out after 4 s)
cl_stop storage-2
kill -CONT "$(cl_pid storage-3)"
tail -c +$((off + 1)) "$CL_DIR/storage-2/log" | grep -E "fatal signal|backtrace" &&
	fail "node-2 crashed when stopped while peering waited on node-3"
log2_has "stopped cleanly" ||
	fail "node-2 did not stop cleanly while peering waited on node-3: $(tail -3 "$CL_DIR/storage-2/log")"
echo "peering_e2e: a daemon stopped while peering waited on a silent member stopped cleanly"
for i in 1 2 3; do cl_stop storage-$i; done
grep -h "still in flight" "$CL_DIR"/storage-*/log && fail "a daemon stopped with requests never answered"
echo "peering_e2e: PASS"
