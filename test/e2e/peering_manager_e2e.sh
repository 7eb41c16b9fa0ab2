#!/usr/bin/env bash
# E2E of failover with the real manager (zipline-controller --manager=on)
# and zipline-storage --heal on: 3 daemons, a 3-replica volume of 256
# chunks; node-1 is killed (-9). The manager turns its members OUT once its
# node record is gone (M1); the rows it led get a new primary in a new term,
# which peers before it serves; acknowledged writes go on. node-1 restarts:
# the manager makes it RECOVERING (M2), its primaries copy what it missed and
# report CAUGHT_UP, the manager makes it IN_SYNC (M4). Oracle: every
# replica's chunk files (data sha256 and version) and `zl volume export`
# against the last acknowledged import.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "peering_manager_e2e: FAIL: $*" >&2
	cl_dump_logs 25 "$CL_DIR"/storage-*/log "$CL_DIR"/controller/log
	exit 1
}
CHUNK=65536
N_CHUNKS=256
export CL_STORAGE_FLAGS="--repl-wait 60 --recovery-mbps 400 --log-level info"
CL_MANAGER=0 cl_e2e_begin e2e-pmgr "$1" 3 --heal on || fail "cluster did not start"
CL_MANAGER_GRACE=1 CL_DOWN_OUT=600 cl_start_manager controller --leader-election=off ||
	fail "the manager did not start"

rows() { hl_etcd rows "$1"; }
# wait_rows VOL AWK_COND SECS: until no row line matches AWK_COND.
wait_rows() {
	for _ in $(seq 1 $(($3 * 10))); do
		[ -z "$(rows "$1" | awk "$2")" ] && return 0
		sleep 0.1
	done
	return 1
}

"$ZL" volume create mvol --size $((N_CHUNKS * CHUNK / 1024))K --replicas 3 --chunk-size 64K ||
	fail "create"
vid=$(hl_vol_id mvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c $((N_CHUNKS * CHUNK)) /dev/urandom >"$CL_DIR/want"
"$ZL" volume import mvol "$CL_DIR/want" || fail "import"
led=$(rows "$vid" | awk '$4 ~ /^node-1:/ {print $1}')
echo "peering_manager_e2e: node-1 leads $(echo "$led" | wc -w) slices"

cl_stop storage-1 KILL
t0=$(date +%s)
wait_rows "$vid" '/node-1:in_sync/' 60 || fail "the manager did not turn node-1 out within 60 s"
echo "peering_manager_e2e: node-1 out in every row after $(($(date +%s) - t0)) s"
for s in $led; do
	for _ in $(seq 1 100); do
		grep -q "peering vol=$vid slice=$s term=2 " "$CL_DIR"/storage-[23]/log && break
		sleep 0.1
	done
	grep -q "peering vol=$vid slice=$s term=2 " "$CL_DIR"/storage-[23]/log ||
		fail "no new primary of slice $s peered in term 2"
done
echo "peering_manager_e2e: every slice node-1 led peered in term 2 on its new primary"
head -c $((N_CHUNKS * CHUNK)) /dev/urandom >"$CL_DIR/want"
"$ZL" volume import mvol "$CL_DIR/want" || fail "import with node-1 out"
"$ZL" volume export mvol "$CL_DIR/out" || fail "export with node-1 out"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "content with node-1 out differs from the acknowledged import"

cl_start_storage 1
wait_rows "$vid" '!/node-1:in_sync/' 120 || fail "node-1 did not become in sync in every row within 120 s: $(rows "$vid" | grep -v 'node-1:in_sync' | head -3)"
echo "peering_manager_e2e: node-1 in sync again after recovery"
grep -h "recovery caught up" "$CL_DIR"/storage-[23]/log | grep -c "member=node-1" |
	sed 's/^/peering_manager_e2e: CAUGHT_UP lines for node-1: /'
hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
[ "$(awk '$1 == 1' "$CL_DIR/files" | wc -l)" -eq $N_CHUNKS ] || fail "node-1 lacks chunk files"
"$ZL" volume export mvol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "volume content differs from the acknowledged import"
echo "peering_manager_e2e: $N_CHUNKS chunks identical on all 3 replicas, export matches"
cl_stop controller
for i in 1 2 3; do cl_stop storage-$i; done
grep -h "still in flight" "$CL_DIR"/storage-*/log && fail "a daemon stopped with requests never answered"
echo "peering_manager_e2e: PASS"
