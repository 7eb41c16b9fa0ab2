#!/usr/bin/env bash
# E2E of replication that heals (storage side, zipline-storage --heal on):
# 3 daemons, a 3-replica volume full of data; node-3 is killed (-9) and 1% of
# the volume rewritten. The test plays the manager by hand with small edits
# of the slice rows in etcd: it turns node-3 OUT once a primary reported the
# failed forward (the parked writes are then acknowledged), and RECOVERING
# after node-3 restarted. Then every primary must copy exactly the chunks
# node-3 missed and report CAUGHT_UP; the test turns it IN_SYNC and checks
# that every replica holds the same data, byte for byte, and the same chunk
# versions. node-3 is killed right after the import's last acknowledgement
# (its journal's last records are often not checkpointed yet): after its
# restart (journal replay) its chunk versions, read from the chunk files, must
# equal the primaries' except for the chunks rewritten while it was down and
# those of slices whose forwards to it failed during the import (on a loaded
# machine a forward can time out; the primary reports the member and sends
# it the slice's later writes without a version until it went OUT, so that
# member's versions lag: REPLICATION.md §3-4). Recovery must copy exactly the
# chunks whose versions differ.
# Then node-3, RECOVERING with every chunk known complete, is replaced by a
# node-4 in every row, 1% is rewritten, and node-3 takes node-4's place
# again (RECOVERING): the rewritten chunks must reach it (replicas compared).
# The storage side alone: no zipline-controller runs (CL_MANAGER=0), the test
# is the manager; cluster_e2e and csi tests run the real one.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "heal_e2e: FAIL: $*" >&2
	cl_dump_logs 25 "$CL_DIR"/storage-*/log
	exit 1
}
SIZE_MB=64
CHUNK=65536
export CL_STORAGE_FLAGS="--repl-wait 30 --recovery-mbps 400 --log-level info"
# --heal on is the default; passed anyway, this test is about it.
CL_MANAGER=0 cl_e2e_begin e2e-heal "$1" 3 --heal on || fail "cluster did not start"

"$ZL" volume create hvol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect hvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import hvol "$CL_DIR/in" || fail "import"
# node-3 dies right after the last acknowledgement; 1% of the volume is
# rewritten while it is down.
cl_stop storage-3 KILL
hl_etcd rows "$vid" | sed -n 1,3p
# Failure reports of the import (forwards that failed on a loaded machine):
# only reports not among these count below (each put has a new revision).
hl_etcd reports "$vid" | sort >"$CL_DIR/reports-import"
# ... and the forwards of the import that failed, as their primaries logged
# them (a report may still be on its way): "primary node chunk".
for i in 1 2 3; do
	sed -n "s/.*forwarded write failed: node=\([^ ]*\) vol=[0-9a-f]* chunk=\([0-9]*\) .*/node-$i \1 \2/p" \
		"$CL_DIR/storage-$i/log"
done >"$CL_DIR/fwd-failed-import"
sed 's/^/heal_e2e: report of the import: /' "$CL_DIR/reports-import" | head -5
new_reports() { hl_etcd reports "$vid" | sort | comm -13 "$CL_DIR/reports-import" -; }
rew=$((SIZE_MB * 1024 * 1024 / 100 / CHUNK * CHUNK))
touched=$((rew / CHUNK))
head -c "$rew" /dev/urandom >"$CL_DIR/new"
cp "$CL_DIR/in" "$CL_DIR/want"
dd if="$CL_DIR/new" of="$CL_DIR/want" conv=notrunc status=none
"$ZL" volume import hvol "$CL_DIR/new" >"$CL_DIR/import2.log" 2>&1 &
imp=$!
# A primary whose forward to node-3 failed reports it and holds the write.
for _ in $(seq 1 150); do
	[ -n "$(new_reports | awk '$3 == "node-3"')" ] && break
	kill -0 "$imp" 2>/dev/null || break
	sleep 0.1
done
reports=$(new_reports | awk '$3 == "node-3"')
echo "heal_e2e: failure reports about node-3:"; echo "$reports"
[ -n "$reports" ] || fail "no primary put a failure report about node-3"
kill -0 "$imp" 2>/dev/null || fail "the rewrite finished before node-3 left the in-sync set (writes were acknowledged without it)"
hl_etcd set "$vid" node-3 out || fail "marking node-3 out"
wait "$imp" || { cat "$CL_DIR/import2.log" >&2; fail "rewrite with node-3 down"; }
grep -q "slice dropped\|dropped backup" "$CL_DIR"/storage-[12]/log &&
	fail "a daemon with --heal on dropped a member from a row"

# node-3 returns (same disk; journal replay at start-up): the manager makes
# it RECOVERING.
log3=$(stat -c %s "$CL_DIR/storage-3/log")
cl_start_storage 3
cl_wait_nodes 3 || fail "node-3 did not register again"
for _ in $(seq 1 600); do
	tail -c +$((log3 + 1)) "$CL_DIR/storage-3/log" | grep -q 'serving node=node-3' && break
	sleep 0.1
done
tail -c +$((log3 + 1)) "$CL_DIR/storage-3/log" | grep -q 'serving node=node-3' || fail "node-3 did not start serving again"
tail -c +$((log3 + 1)) "$CL_DIR/storage-3/log" | sed -n 's/.*\(journal replay: [0-9]* records, [0-9]* entries\).*/heal_e2e: node-3 \1/p'
# The oracle of what recovery must copy: per chunk, node-3's version against
# its slice primary's, from the chunk files (hl_files waits for every journal
# to be checkpointed). A difference must be a chunk rewritten while node-3
# was down (chunks 0 .. touched-1) or one of a slice where an import report
# or a failed forward of the import names node-3: as the peer, its forwards went without a version (its
# versions lag); as the reporter (the primary then), its backups' versions
# lag and the primary after it inherits theirs (recovery rolls node-3 back
# to it: same data, lower version).
hl_etcd members "$vid" >"$CL_DIR/members" || fail "reading the rows"
hl_files "$CHUNK" --chunk-index "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files-before" ||
	fail "reading chunk files"
{
	awk '$2 == "node-3" || $3 == "node-3" {print $1}' "$CL_DIR/reports-import"
	awk -v ns="$(wc -l <"$CL_DIR/members")" '$1 == "node-3" || $2 == "node-3" {print $3 % ns}' "$CL_DIR/fwd-failed-import"
} | sort -u >"$CL_DIR/slices-reported"
awk -v ns="$(wc -l <"$CL_DIR/members")" -v touched="$touched" '
	FILENAME ~ /members$/ {p[$1] = substr($2, 6); next}
	FILENAME ~ /slices-reported$/ {r[$1] = 1; next}
	{v[$1 " " $2] = $4; c[$2] = 1}
	END {for (k in c) if (v["3 " k] != v[p[k % ns] " " k])
		print k, (k + 0 < touched + 0 ? "touched" : (k % ns) in r ? "reported" : "unexplained"), v["3 " k], v[p[k % ns] " " k]}' \
	"$CL_DIR/members" "$CL_DIR/slices-reported" "$CL_DIR/files-before" | sort -n >"$CL_DIR/expected"
want=$(wc -l <"$CL_DIR/expected")
n_touched=$(awk '$2 == "touched"' "$CL_DIR/expected" | wc -l)
echo "heal_e2e: node-3 differs from the primaries in $want chunks: $n_touched rewritten while down, $(awk '$2 == "reported"' "$CL_DIR/expected" | wc -l) in slices where the import reported it or its forwards failed ($(wc -l <"$CL_DIR/slices-reported") slices)"
bad=$(awk '$2 == "unexplained"' "$CL_DIR/expected" | head -3)
[ -z "$bad" ] || fail "node-3's versions after its restart differ from the primaries' in chunks neither rewritten while it was down nor reported (lost by the journal replay?): (chunk kind node-3 primary) $bad"
[ "$n_touched" -eq "$touched" ] || fail "node-3 holds the version of a chunk rewritten while it was down"
t0=$(date +%s%N)
hl_etcd set "$vid" node-3 recovering || fail "marking node-3 recovering"
n_slices=$(hl_etcd rows "$vid" | grep -c 'node-3:')
got=$(hl_wait_caught_up "$vid" node-3 "$n_slices" 60) || true
t1=$(date +%s%N)
echo "heal_e2e: CAUGHT_UP reports: $got of $n_slices slices in $(((t1 - t0) / 1000000)) ms"
[ "$got" -ge "$n_slices" ] || fail "only $got of $n_slices slices reported node-3 CAUGHT_UP"
hl_etcd set "$vid" node-3 in_sync || fail "marking node-3 in sync"

copied=$(cat "$CL_DIR"/storage-[12]/log | grep 'recovery caught up' | grep "member=node-3" |
	sed -n 's/.*bytes_copied=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
chunks=$(cat "$CL_DIR"/storage-[12]/log | grep 'recovery caught up' | grep "member=node-3" |
	sed -n 's/.*chunks_copied=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
echo "heal_e2e: recovery copied $chunks chunks, $copied bytes (touched: $touched chunks of $CHUNK bytes; versions differing before: $want chunks)"
[ "$chunks" -eq "$want" ] || fail "recovery copied $chunks chunks, but node-3's versions differed in $want"
[ "$copied" -eq $((want * CHUNK)) ] || fail "recovery copied $copied bytes, not $want chunks of $CHUNK"

# Every replica: same data, byte for byte, and the same version per chunk.
hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
n_files=$(awk '$1 == 3' "$CL_DIR/files" | wc -l)
echo "heal_e2e: $n_files chunks identical (data and version) on all 3 replicas"
[ "$n_files" -eq $((SIZE_MB * 1024 * 1024 / CHUNK)) ] || fail "node-3 holds $n_files chunk files"

# Node-3 leaves its rows while RECOVERING and comes back: a replacement
# (node-4 in its place), a rewrite node-3 never sees, then node-3 back in
# node-4's place (a move back). Its primaries' earlier recovery (every chunk
# known complete) must not count: the rewritten chunks are copied again.
# caught_up_now NODE: every row holding NODE has a CAUGHT_UP about it at the
# row's current version.
caught_up_now() {
	local rows
	rows=$(hl_etcd rows "$vid")
	hl_etcd reports "$vid" CAUGHT_UP | awk -v n="$1" -v rows="$rows" '
		BEGIN {k = split(rows, r, "\n"); for (i = 1; i <= k; i++) {split(r[i], f, " "); if (r[i] ~ n ":") want[f[1]] = f[2]}}
		$3 == n && want[$1] == $5 {ok[$1] = 1}
		END {for (s in want) if (!ok[s]) exit 1}'
}
wait_caught_up_now() {
	for _ in $(seq 1 600); do caught_up_now "$1" && return 0; sleep 0.1; done
	fail "$1 not caught up at every row's current version in 60 s"
}
hl_etcd set "$vid" node-3 recovering || fail "marking node-3 recovering"
wait_caught_up_now node-3
cl_start_storage 4
cl_wait_nodes 4 || fail "node-4 did not register"
log_off() { for i in 1 2; do stat -c %s "$CL_DIR/storage-$i/log"; done | tr '\n' ' '; }
offs=($(log_off))
hl_etcd replace "$vid" node-3 node-4 recovering || fail "replacing node-3 with node-4"
# Both primaries see the new rows (they start recovering node-4) before the
# rewrite, so none forwards it to node-3.
n_prim=$(hl_etcd members "$vid" | wc -l)
for _ in $(seq 1 300); do
	n=$(for i in 1 2; do tail -c +$((${offs[$((i - 1))]} + 1)) "$CL_DIR/storage-$i/log"; done |
		grep -c "recovery started: vol=${vid#vol-} slice=[0-9]* member=node-4" || true)
	[ "$n" -ge "$n_prim" ] && break
	sleep 0.1
done
[ "$n" -ge "$n_prim" ] || fail "the primaries started recovering node-4 in $n of $n_prim rows"
head -c "$rew" /dev/urandom >"$CL_DIR/new2"
dd if="$CL_DIR/new2" of="$CL_DIR/want" conv=notrunc status=none
"$ZL" volume import hvol "$CL_DIR/new2" >"$CL_DIR/import3.log" 2>&1 ||
	{ cat "$CL_DIR/import3.log" >&2; fail "rewrite with node-3 out of the rows"; }
hl_etcd replace "$vid" node-4 node-3 recovering || fail "putting node-3 back in node-4's place"
wait_caught_up_now node-3
hl_etcd set "$vid" node-3 in_sync || fail "marking node-3 in sync"
cl_stop storage-4
hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
[ -z "$bad" ] || fail "after node-3 left its rows and came back, replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
echo "heal_e2e: node-3 replaced, $touched chunks rewritten, node-3 back: every chunk identical again"

# And the client reads the new data back.
"$ZL" volume export hvol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "volume content differs from what was written"
# No write may stay parked or lost: the daemons stop with nothing in flight.
for i in 1 2 3; do cl_stop storage-$i; done
grep -h "still in flight" "$CL_DIR"/storage-*/log && fail "a daemon stopped with requests never answered"
echo "heal_e2e: PASS (copied $copied bytes in $chunks chunks for $touched touched)"
