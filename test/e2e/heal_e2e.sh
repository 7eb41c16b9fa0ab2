#!/usr/bin/env bash
# E2E of replication that heals (storage side, zipline-storage --heal on):
# 3 daemons, a 3-replica volume full of data; node-3 is killed (-9) and 1% of
# the volume rewritten. The test plays the manager by hand with small edits
# of the slice rows in etcd: it turns node-3 OUT once a primary reported the
# failed forward (the parked writes are then acknowledged), and RECOVERING
# after node-3 restarted. Then every primary must copy exactly the chunks
# node-3 missed and report CAUGHT_UP; the test turns it IN_SYNC and checks
# that every replica holds the same data, byte for byte, and the same chunk
# versions, and that the recovery copied at most chunks touched x chunk size.
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
hl_etcd rows "$vid" | sed -n 1,3p

# node-3 dies; 1% of the volume is rewritten while it is down.
cl_stop storage-3 KILL
rew=$((SIZE_MB * 1024 * 1024 / 100 / CHUNK * CHUNK))
touched=$((rew / CHUNK))
head -c "$rew" /dev/urandom >"$CL_DIR/new"
cp "$CL_DIR/in" "$CL_DIR/want"
dd if="$CL_DIR/new" of="$CL_DIR/want" conv=notrunc status=none
"$ZL" volume import hvol "$CL_DIR/new" >"$CL_DIR/import2.log" 2>&1 &
imp=$!
# A primary whose forward to node-3 failed reports it and holds the write.
for _ in $(seq 1 150); do
	[ -n "$(hl_etcd reports "$vid" | awk '$3 == "node-3"')" ] && break
	kill -0 "$imp" 2>/dev/null || break
	sleep 0.1
done
reports=$(hl_etcd reports "$vid" | awk '$3 == "node-3"')
echo "heal_e2e: failure reports about node-3:"; echo "$reports"
[ -n "$reports" ] || fail "no primary put a failure report about node-3"
kill -0 "$imp" 2>/dev/null || fail "the rewrite finished before node-3 left the in-sync set (writes were acknowledged without it)"
hl_etcd set "$vid" node-3 out || fail "marking node-3 out"
wait "$imp" || { cat "$CL_DIR/import2.log" >&2; fail "rewrite with node-3 down"; }
grep -q "slice dropped\|dropped backup" "$CL_DIR"/storage-[12]/log &&
	fail "a daemon with --heal on dropped a member from a row"

# node-3 returns (same disk): the manager makes it RECOVERING.
cl_start_storage 3
cl_wait_nodes 3 || fail "node-3 did not register again"
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
echo "heal_e2e: recovery copied $chunks chunks, $copied bytes (touched: $touched chunks of $CHUNK bytes = $((touched * CHUNK)))"
[ "$copied" -le $((touched * CHUNK)) ] || fail "recovery copied $copied bytes, more than $((touched * CHUNK))"
[ "$chunks" -ge 1 ] || fail "recovery copied nothing, yet node-3 missed $touched chunks"

# Every replica: same data, byte for byte, and the same version per chunk.
hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
n_files=$(awk '$1 == 3' "$CL_DIR/files" | wc -l)
echo "heal_e2e: $n_files chunks identical (data and version) on all 3 replicas"
[ "$n_files" -eq $((SIZE_MB * 1024 * 1024 / CHUNK)) ] || fail "node-3 holds $n_files chunk files"

# And the client reads the new data back.
"$ZL" volume export hvol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "volume content differs from what was written"
# No write may stay parked or lost: the daemons stop with nothing in flight.
for i in 1 2 3; do cl_stop storage-$i; done
grep -h "still in flight" "$CL_DIR"/storage-*/log && fail "a daemon stopped with requests never answered"
echo "heal_e2e: PASS (copied $copied bytes in $chunks chunks for $touched touched)"
