#!/usr/bin/env bash
# E2E of recovery under writes to the chunks being copied (hot chunks):
# 3 daemons, a 3-replica volume of 2 chunks of 4 MiB. node-3 is killed and
# turned OUT, e2e_io writes at random all over the volume (so every write hits
# one of the 2 chunks), node-3 restarts and is turned RECOVERING while the
# writes go on: its primaries copy chunks piece by piece (slowly:
# --recovery-mbps 40) while client writes of the same chunks are forwarded to
# it. Once the writer stopped and every primary reported node-3 CAUGHT_UP,
# the daemons are stopped and the chunk files of the 3 replicas compared byte
# for byte, and their versions (independent of the code under test: files
# read directly; a member in sync with the right bytes at an older version
# would carry that version into a snapshot's clone). e2e_io
# checks the volume against its record of acknowledged writes too.
# The test plays the manager (CL_MANAGER=0), as heal_e2e does.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "recover_hot_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log "$CL_DIR"/io.log; do
		echo "--- $f" >&2
		tail -25 "$f" >&2
	done
	exit 1
}
CHUNK=$((4 << 20))
ROUNDS=${ZL_HOT_ROUNDS:-3}
export CL_STORAGE_FLAGS="--repl-wait 30 --recovery-mbps 40 --log-level info"
cl_seed recover_hot_e2e # the pauses between write bursts
CL_MANAGER=0 cl_e2e_begin e2e-hot "$1" 3 --heal on || fail "cluster did not start"

for round in $(seq 1 "$ROUNDS"); do
	vol=hot$round
	"$ZL" volume create $vol --size 8M --replicas 3 --chunk-size 4M >/dev/null || fail "create"
	vid=$("$ZL" volume inspect $vol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
	[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
	n_rows=$(cl_rows "$vid" | grep -c 'node-3:')

	cl_stop storage-3 KILL
	hl_etcd set "$vid" node-3 out || fail "marking node-3 out"
	touch "$CL_DIR/io.mark"
	"$CL_BIN/e2e_io" --etcd "$CL_ETCD" --volume $vol --bytes "${ZL_HOT_BYTES:-1G}" \
		>"$CL_DIR/io.log" 2>&1 &
	io=$!
	# Writes land on the live replicas while node-3 is out (a chunk file of
	# node-1 changes) before node-3 restarts.
	for _ in $(seq 1 100); do
		[ -n "$(find "$CL_DIR/storage-1/data/chunks/$vid" -name '*.zlc' -newer "$CL_DIR/io.mark" 2>/dev/null)" ] && break
		sleep 0.1
	done
	[ -n "$(find "$CL_DIR/storage-1/data/chunks/$vid" -name '*.zlc' -newer "$CL_DIR/io.mark" 2>/dev/null)" ] ||
		fail "no write reached node-1 within 10 s of the writer's start"
	cl_start_storage 3
	cl_wait_nodes 3 || fail "node-3 did not register again"
	hl_etcd set "$vid" node-3 recovering || fail "marking node-3 recovering"
	t0=$(date +%s)
	kill -0 "$io" 2>/dev/null || fail "the writer ended before node-3 recovered: raise ZL_HOT_BYTES"
	wait "$io" || fail "e2e_io (writes and read back through the primaries)"
	echo "recover_hot_e2e: round $round: writer done $(($(date +%s) - t0)) s after RECOVERING"
	got=$(hl_wait_caught_up "$vid" node-3 "$n_rows" 60) || fail "only $got of $n_rows slices reported node-3 CAUGHT_UP"
	hl_etcd set "$vid" node-3 in_sync || fail "marking node-3 in sync"
	copies=$(grep -h 'recovery caught up' "$CL_DIR"/storage-[12]/log | grep -c "vol=$vid" || true)
	echo "recover_hot_e2e: round $round: $got CAUGHT_UP reports, $copies with copies logged"

	# Every replica holds the same bytes: read with the daemons stopped.
	for i in 1 2 3; do cl_stop storage-$i; done
	hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" ||
		fail "reading chunk files"
	cat "$CL_DIR/files"
	bad=$(awk '{d[$2] = d[$2] " " $3 "/" $4; n[$2]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k]; break}}}' "$CL_DIR/files")
	[ -z "$bad" ] || fail "round $round: replicas differ in data or version (chunk file, copies): $bad"
	[ "$(wc -l <"$CL_DIR/files")" -eq 6 ] || fail "round $round: expected 2 chunk files on each of 3 nodes"
	for i in 1 2 3; do cl_start_storage "$i"; done
	cl_wait_nodes 3 || fail "daemons did not come back"
done

# Bursts: 128 chunks of 2 MiB (2 per slice), all behind on node-3; while it
# recovers, the first 8 MiB (chunks 0-3) are rewritten in bursts with pauses,
# so hot chunks go back and forth between "equal" and "being written" while
# passes keep running for the cold chunks of their slices.
vol=hotb
CHUNK=$((2 << 20))
"$ZL" volume create $vol --size 256M --replicas 3 --chunk-size 2M >/dev/null || fail "create $vol"
vid=$("$ZL" volume inspect $vol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
n_rows=$(cl_rows "$vid" | grep -c 'node-3:')
cl_stop storage-3 KILL
hl_etcd set "$vid" node-3 out || fail "marking node-3 out"
head -c 256M /dev/urandom >"$CL_DIR/want"
"$ZL" volume import $vol "$CL_DIR/want" >/dev/null || fail "import with node-3 out"
cl_start_storage 3
cl_wait_nodes 3 || fail "node-3 did not register again"
(
	for k in $(seq 1 "${ZL_HOT_BURSTS:-25}"); do
		head -c 8M /dev/urandom >"$CL_DIR/hot"
		"$ZL" volume import $vol "$CL_DIR/hot" --depth 4 >/dev/null || exit 1
		cp "$CL_DIR/hot" "$CL_DIR/hot.last"
		sleep 0.$((RANDOM % 5)) # deliberate (seeded): pauses of 0-0.4 s between bursts
	done
) &
wr=$!
for _ in $(seq 1 100); do [ -f "$CL_DIR/hot.last" ] && break; sleep 0.1; done
[ -f "$CL_DIR/hot.last" ] || fail "the first burst did not complete in 10 s"
hl_etcd set "$vid" node-3 recovering || fail "marking node-3 recovering"
kill -0 "$wr" 2>/dev/null || fail "the burst writer ended before node-3 recovered"
wait "$wr" || fail "burst writer"
got=$(hl_wait_caught_up "$vid" node-3 "$n_rows" 90) || fail "bursts: only $got of $n_rows slices reported node-3 CAUGHT_UP"
hl_etcd set "$vid" node-3 in_sync || fail "marking node-3 in sync"
dd if="$CL_DIR/hot.last" of="$CL_DIR/want" conv=notrunc status=none
"$ZL" volume export $vol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/want" "$CL_DIR/out" || fail "bursts: volume content differs from what was written"
for i in 1 2 3; do cl_stop storage-$i; done
hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
bad=$(awk '{d[$2] = d[$2] " " $3 "/" $4; n[$2]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k]; break}}}' "$CL_DIR/files")
[ -z "$bad" ] || fail "bursts: replicas differ in data or version (chunk file, copies): $(echo $bad | head -c 300)"
[ "$(wc -l <"$CL_DIR/files")" -eq 384 ] || fail "bursts: expected 128 chunk files on each of 3 nodes"
echo "recover_hot_e2e: bursts: 128 chunks identical on all 3 replicas"
echo "recover_hot_e2e: PASS ($ROUNDS rounds and bursts, every replica identical)"
