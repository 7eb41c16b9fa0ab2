#!/usr/bin/env bash
# E2E of data dir identity (docs/REPLICATION.md §6) and the health line (§9):
# 3 daemons --heal on, a zipline-controller --manager=on, a 3-replica volume
# of random data.
#  1. node-2 is killed (-9): `zl status` says HEALTH_WARN once its record is
#     gone; its data dir is removed and it restarts with the same node id: it
#     gets a new incarnation, the manager makes it RECOVERING, recovery copies
#     everything, it becomes IN_SYNC and the health line is HEALTH_OK again.
#     Midway through that refill it is killed, emptied and restarted once
#     more (RECOVERING -> RECOVERING under a third incarnation): the refill
#     must copy every chunk again, not only those the second one lacked.
#  2. The same on the node that is primary of most rows, restarted at once
#     (its rows still name it in sync, as primary, under its old
#     incarnation): a client read during that window must return the data,
#     never the zeros of the empty disk.
#  3. A daemon pointed at another etcd (another cluster) refuses to start
#     with one line and leaves its data dir unchanged, even with a tombstone
#     of its volume waiting in that etcd; one with a foreign --node-id too.
#     Without its identity file (a data dir of 0.1) it adopts its chunk
#     files under the incarnation its rows name.
# Oracles: `zl volume export` equals the input; every replica's chunk files
# (read directly) hold the same data and version; sha256 of the data dir.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
SIZE_MB=32
CHUNK=65536
fail() {
	echo "emptydisk_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log "$CL_DIR"/controller/log; do
		[ -f "$f" ] && { echo "--- $f" >&2; grep -v ' debug ' "$f" | tail -25 >&2; }
	done
	exit 1
}
say() { echo "emptydisk_e2e: $*"; }
command -v etcd >/dev/null || { echo "emptydisk_e2e: FAIL: etcd is not installed"; exit 1; }
[ -x "$HL_PY" ] || { echo "emptydisk_e2e: FAIL: $HL_PY is missing"; exit 1; }
# 16 Mbit/s: the refill of 32 MiB (16 MiB per primary) lasts ~8.5 s at
# least (the rate is a cap: a busy machine only makes it longer), 4 of the
# 2 s samples of the status records, so the health line can show a rate and
# an ETA while it runs (a rate needs 2 samples of a primary's progress).
export CL_STORAGE_FLAGS="--recovery-mbps 16 --log-level info"
CL_MANAGER=0 cl_e2e_begin e2e-emptydisk "$1" 3 --heal on || fail "cluster did not start"
trap 'cl_stop etcd2; cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
for b in zipline-controller zipline-storage zl; do
	[ -x "$CL_BIN/$b" ] || fail "no $CL_BIN/$b: build it first"
done

start_manager() { CL_DOWN_OUT=600 cl_start_manager controller || fail "the manager did not start"; }
start_manager

# dir_hash DIR: sha256 over every file's path, mode and content.
dir_hash() {
	(cd "$1" && find . -printf '%p %m %s\n' | sort && find . -type f -print0 | sort -z |
		xargs -0 sha256sum) | sha256sum | cut -d' ' -f1
}

# (whole outputs go through variables: with pipefail, grep -q or head
# closing a pipe early would fail the writer)
health() { "$ZL" status 2>/dev/null | sed -n 1p || true; }
inspect() { "$ZL" volume inspect "${1:-evol}" 2>&1 || true; }
# wait_health WORD SECS: until the health line starts with WORD.
wait_health() {
	local h=""
	for _ in $(seq 1 $(($2 * 2))); do
		h=$(health)
		case "$h" in "$1"*) say "health: $h"; return 0 ;; esac
		sleep 0.5
	done
	fail "health line is '$h', not $1 after $2 s"
}
# wait_in_sync SECS: until every member of every row (3) is in_sync.
wait_in_sync() { cl_wait_in_sync "$vid" --all 3 "$1" >/dev/null || fail "rows not all in sync after $1 s"; }
# check_replicas: every chunk identical (data and version) on all 3 nodes.
check_replicas() {
	local bad n
	hl_files "$CHUNK" "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" ||
		fail "reading chunk files"
	bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
	[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
	for i in 1 2 3; do
		n=$(awk -v i="$i" '$1 == i' "$CL_DIR/files" | wc -l)
		[ "$n" -eq $((SIZE_MB * 1024 * 1024 / CHUNK)) ] || fail "node-$i holds $n chunk files"
	done
	say "$n chunks identical (data and version) on all 3 replicas"
}
check_export() {
	"$ZL" volume export evol "$CL_DIR/out" || fail "export ($1)"
	cmp "$CL_DIR/in" "$CL_DIR/out" || fail "volume content differs from the input ($1)"
}
ident_inc() { sed -n 's/.*"incarnation":"\([0-9a-f]*\)".*/\1/p' "$CL_DIR/storage-$1/data/identity"; }

# ---- a healthy cluster ----
for i in 1 2 3; do
	[ -f "$CL_DIR/storage-$i/data/identity" ] || fail "node-$i wrote no identity file"
done
inc1=$(ident_inc 2)
[ ${#inc1} -eq 32 ] || fail "node-2's identity names no incarnation: $(cat "$CL_DIR/storage-2/data/identity")"
[ "$(hl_etcd node node-2)" = "$inc1" ] || fail "node-2's record does not carry its incarnation $inc1"
"$ZL" volume create evol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$(inspect | sed -n 's/^id *\(vol-[0-9a-f]\{16\}\)$/\1/p')
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
grep -q "node-2:in_sync:${inc1:0:8}" <<<"$(hl_etcd incs "$vid")" || fail "rows do not name node-2's incarnation"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import evol "$CL_DIR/in" || fail "import"
wait_health HEALTH_OK 30
grep -q ' active ' <<<"$(inspect)" || fail "inspect shows no active slice"

# ---- 1. node-2 down, its disk emptied, back after a while ----
cl_stop storage-2 KILL
for _ in $(seq 1 300); do [ "$(hl_etcd node node-2)" = - ] && break; sleep 0.1; done
[ "$(hl_etcd node node-2)" = - ] || fail "node-2's record did not expire"
wait_health HEALTH_WARN 30
out=$(inspect)
grep -q ' degraded \| down ' <<<"$out" || fail "inspect shows no degraded slice with node-2 down: $out"
grep -q 'node-2:[a-z_]*(down)' <<<"$out" || fail "inspect does not mark node-2 down: $out"
rm -rf "$CL_DIR/storage-2/data"
cl_start_storage 2
if [ "${2:-}" = --manager-restart ]; then
	# The manager dies (-9) while node-2 registers on its empty dir and is
	# restarted: the new one must still see the new incarnation (M3).
	for _ in $(seq 1 100); do [ -f "$CL_DIR/storage-2/data/identity" ] && break; sleep 0.05; done
	[ -f "$CL_DIR/storage-2/data/identity" ] || fail "node-2 made no identity on its empty dir"
	cl_stop controller KILL
	say "manager killed (-9) while node-2 registers (its new identity made); restarting it"
	start_manager
fi
cl_wait_nodes 3 || fail "node-2 did not register again"
inc2=$(ident_inc 2)
[ ${#inc2} -eq 32 ] && [ "$inc2" != "$inc1" ] || fail "node-2 on an empty dir kept incarnation '$inc2'"
say "node-2: incarnation $inc1 -> $inc2"
for _ in $(seq 1 50); do [ "$(hl_etcd node node-2)" = "$inc2" ] && break; sleep 0.1; done
[ "$(hl_etcd node node-2)" = "$inc2" ] || fail "node-2's record does not carry $inc2"
# 1b. Emptied again in the middle of its refill and restarted at once: its
# rows go RECOVERING -> RECOVERING under a third incarnation (M3, no OUT
# between). What the primaries copied to the second one is gone, so the
# refill must copy every chunk again (check_replicas counts node-2's files).
n2() { find "$CL_DIR/storage-2/data/chunks/$vid" -name '*.zlc' 2>/dev/null | wc -l; }
for _ in $(seq 1 600); do [ "$(n2)" -ge 48 ] && break; sleep 0.1; done
[ "$(n2)" -ge 48 ] || fail "node-2 received $(n2) chunk files in 60 s of its refill"
say "node-2 holds $(n2) chunk files of its refill: killed (-9), emptied, restarted at once"
cl_stop storage-2 KILL
rm -rf "$CL_DIR/storage-2/data"
cl_start_storage 2
# (its old record may still be there: the new identity file is the sign)
for _ in $(seq 1 300); do [ -f "$CL_DIR/storage-2/data/identity" ] && break; sleep 0.1; done
[ -f "$CL_DIR/storage-2/data/identity" ] || fail "node-2 made no identity on its emptied dir in 30 s"
inc3=$(ident_inc 2)
[ ${#inc3} -eq 32 ] && [ "$inc3" != "$inc2" ] || fail "node-2 emptied again kept incarnation '$inc3'"
for _ in $(seq 1 300); do [ "$(hl_etcd node node-2)" = "$inc3" ] && break; sleep 0.1; done
[ "$(hl_etcd node node-2)" = "$inc3" ] || fail "node-2's record does not carry $inc3"
say "node-2: incarnation $inc2 -> $inc3 during its refill"
t0=$(date +%s)
# While it refills the health line says so (and, once the primaries
# published their progress, at what rate).
: >"$CL_DIR/health.log"
for _ in $(seq 1 600); do
	h=$(health)
	echo "$h" >>"$CL_DIR/health.log"
	grep -q ':out:\|:recovering:' <<<"$(hl_etcd incs "$vid")" || break
	sleep 0.2
done
wait_in_sync 120
grep -q '^HEALTH_WARN .* degraded ([1-9][0-9]* recovering)' "$CL_DIR/health.log" ||
	fail "no health line named recovering slices: $(sort -u "$CL_DIR/health.log" | head -5)"
rate_line=$(grep -m1 'recovering [0-9.]* MiB/s, ETA [0-9]* s' "$CL_DIR/health.log" || true)
say "health while refilling: ${rate_line:-$(grep -m1 recovering "$CL_DIR/health.log")}"
[ -n "$rate_line" ] || fail "no health line showed a recovery rate and ETA: $(sort -u "$CL_DIR/health.log" | head -5)"
say "node-2 back in sync in $(($(date +%s) - t0)) s"
grep -q "node-2:in_sync:\(${inc1:0:8}\|${inc2:0:8}\)" <<<"$(hl_etcd incs "$vid")" && fail "a row still names an old incarnation"
grep -q "M3 new incarnation" "$CL_DIR/controller/log" || fail "the manager logged no M3 decision"
check_replicas
grep -q "recovery starts over: vol=${vid#vol-} .* member=node-2 incarnation=${inc3:0:8}" "$CL_DIR"/storage-[13]/log ||
	fail "no primary started node-2's refill over for its third incarnation (1b did not happen)"
check_export "after the first refill"
wait_health HEALTH_OK 30

# ---- 2. emptied and restarted at once: rows still name the old incarnation ----
# On the node that is primary of most rows: reads go to primaries, so a
# node serving what its rows name of an old data dir would return zeros.
p=$(hl_etcd incs "$vid" | awk '{for (i = 2; i <= NF; i++) if ($i ~ /:in_sync:/) {split($i, a, ":"); n[a[1]]++; break}} END {for (k in n) if (n[k] > m) {m = n[k]; b = k} print substr(b, 6)}')
[ -n "$p" ] || fail "no primary in the rows"
say "emptying node-$p, primary of $(hl_etcd incs "$vid" | awk -v n="node-$p" '{for (i = 2; i <= NF; i++) if ($i ~ /:in_sync:/) {split($i, a, ":"); c += a[1] == n; break}} END {print c}') rows"
incp=$(ident_inc "$p")
cl_stop storage-$p KILL
rm -rf "$CL_DIR/storage-$p/data"
cl_start_storage "$p"
for _ in $(seq 1 100); do [ -f "$CL_DIR/storage-$p/data/identity" ] && break; sleep 0.05; done
incq=$(ident_inc "$p")
[ ${#incq} -eq 32 ] && [ "$incq" != "$incp" ] || fail "node-$p restarted on an empty dir kept incarnation '$incq'"
check_export "while the rows named node-$p's old data dir"
wait_in_sync 120
check_replicas
check_export "after the second refill"

# ---- 3. a wrong etcd (another cluster) and a wrong --node-id ----
e2port=$(cl_free_port)
e2peer=$(cl_free_port)
mkdir -p "$CL_DIR/etcd2"
etcd --name zl-etcd2 --data-dir "$CL_DIR/etcd2/data" \
	--listen-client-urls "http://127.0.0.1:$e2port" --advertise-client-urls "http://127.0.0.1:$e2port" \
	--listen-peer-urls "http://127.0.0.1:$e2peer" --initial-advertise-peer-urls "http://127.0.0.1:$e2peer" \
	--initial-cluster "zl-etcd2=http://127.0.0.1:$e2peer" --logger zap --log-level warn \
	>>"$CL_DIR/etcd2/log" 2>&1 &
echo $! >"$CL_DIR/etcd2/pid"
ETCD2="http://127.0.0.1:$e2port"
cl_wait_etcd "$ETCD2" || { tail -5 "$CL_DIR/etcd2/log" >&2; fail "second etcd did not start"; }
CL_ETCD=$ETCD2 hl_etcd tomb node-3 "$vid" # a wrong etcd must delete nothing
cl_stop storage-3
h0=$(dir_hash "$CL_DIR/storage-3/data")
set +e
# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
timeout 60 "$CL_BIN/zipline-storage" --data-dir "$CL_DIR/storage-3/data" --listen 127.0.0.1:0 \
	--node-id node-3 --etcd "$ETCD2" --heal on $(cl_write_path_flags) >"$CL_DIR/foreign.out" 2>&1
rc=$?
set -e
say "foreign etcd: exit $rc: $(grep -v ' info ' "$CL_DIR/foreign.out" | tail -1)"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a daemon on another cluster's etcd did not refuse to start (exit $rc)"
grep -q "belongs to cluster .* but etcd $ETCD2 prefix /zipline/ is cluster .*refusing to start; nothing was changed" \
	"$CL_DIR/foreign.out" || fail "no clear refusal line: $(tail -3 "$CL_DIR/foreign.out")"
[ "$(dir_hash "$CL_DIR/storage-3/data")" = "$h0" ] || fail "the refused start changed the data dir"
rm "$CL_DIR/storage-3/data/node-id"
h0=$(dir_hash "$CL_DIR/storage-3/data")
set +e
# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
timeout 60 "$CL_BIN/zipline-storage" --data-dir "$CL_DIR/storage-3/data" --listen 127.0.0.1:0 \
	--node-id node-9 --etcd "$CL_ETCD" --heal on $(cl_write_path_flags) >"$CL_DIR/foreign2.out" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a daemon with a foreign --node-id did not refuse to start (exit $rc)"
grep -q "belongs to node node-3 .*refusing to start" "$CL_DIR/foreign2.out" ||
	fail "no clear refusal line for --node-id node-9: $(tail -3 "$CL_DIR/foreign2.out")"
[ "$(dir_hash "$CL_DIR/storage-3/data")" = "$h0" ] || fail "the refused start changed the data dir"
# Back on its own etcd, without its identity file (as a data dir of 0.1):
# node-3 adopts its chunk files and keeps the incarnation its rows name, so
# nothing is copied again in full.
inc_n3=$(ident_inc 3)
rm "$CL_DIR/storage-3/data/identity"
cl_start_storage 3
cl_wait_nodes 3 || fail "node-3 did not register again"
[ "$(ident_inc 3)" = "$inc_n3" ] || fail "node-3 adopted its data dir with incarnation '$(ident_inc 3)', not $inc_n3"
grep -q "adopting data dir .*keeping incarnation=$inc_n3" "$CL_DIR/storage-3/log" ||
	fail "node-3 did not log the adoption"
for _ in $(seq 1 50); do [ "$(hl_etcd node node-3)" = "$inc_n3" ] && break; sleep 0.1; done
[ "$(hl_etcd node node-3)" = "$inc_n3" ] || fail "node-3 came back with another incarnation"
wait_in_sync 60
check_replicas
check_export "after node-3 came back"
wait_health HEALTH_OK 30

# ---- 4. tombstones delete nothing once etcd's cluster record is not ours ----
"$ZL" volume create tvol --size 1M --replicas 3 --chunk-size 64K >/dev/null || fail "create tvol"
tvid=$(inspect tvol | sed -n 's/^id *\(vol-[0-9a-f]\{16\}\)$/\1/p')
head -c 1M /dev/urandom >"$CL_DIR/tin"
"$ZL" volume import tvol "$CL_DIR/tin" || fail "import tvol"
tdir="$CL_DIR/storage-1/data/chunks/$tvid"
[ "$(ls "$tdir" | wc -l)" -eq 16 ] || fail "node-1 holds $(ls "$tdir" | wc -l) chunk files of tvol, not 16"
cluster=$(hl_etcd get /zipline/cluster)
# The record goes as a wrong etcd would have it (a record of another cluster).
hl_etcd put /zipline/cluster '{"cluster_id":"00000000000000000000000000000bad","created":1}'
hl_etcd del "/zipline/volumes/$tvid"
hl_etcd del /zipline/names/tvol
hl_etcd tomb node-1 "$tvid"
for _ in $(seq 1 50); do grep -q "tombstones of deleted volumes ignored" "$CL_DIR/storage-1/log" && break; sleep 0.1; done
grep -q "tombstones of deleted volumes ignored" "$CL_DIR/storage-1/log" ||
	fail "node-1 did not refuse a tombstone under another cluster's record"
[ "$(ls "$tdir" | wc -l)" -eq 16 ] || fail "a tombstone under another cluster's record deleted chunk files"
say "tombstone ignored while etcd's cluster record is not node-1's"
hl_etcd put /zipline/cluster "$cluster"
hl_etcd tomb node-1 "$tvid"
for _ in $(seq 1 50); do [ -d "$tdir" ] || break; sleep 0.1; done
[ ! -d "$tdir" ] || fail "the tombstone deleted nothing once the cluster record was node-1's again"
say "tombstone processed once the cluster record was back"
say "PASS"
