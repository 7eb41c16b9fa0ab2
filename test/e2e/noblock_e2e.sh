#!/usr/bin/env bash
# E2E of issue 23 "Nothing blocks an I/O thread": etcd work of the storage
# daemons and of the client library runs on helper threads, so reads and
# writes of an open volume keep their latency while etcd is held (requests
# accepted, answers withheld: test/lib/etcd_hold_proxy.py ... all).
#
# Three daemons (--gc-interval 1) reach etcd through one hold proxy, the
# client (test/e2e/e2e_lat.c: 4 KiB writes and read-backs at QD 1 in chunk
# 1, every operation and every gap between completions timed) through
# another.
#  1. The daemons' etcd is held for three seconds: their old-copy collection
#     (gc_tick, every second) reads etcd meanwhile.
#  2. The client's etcd is held, and the row of slice 0 moves to a new
#     version (same members): the client's writes to chunk 0 are answered
#     STALE and need a placement reload, which waits for etcd.
# Oracle: e2e_lat's slowest operation and longest gap stay under
# NB_MAX_MS (1000 ms: a third of a hold, a fifth of the etcd timeout; on a
# loaded 2-core machine single operations took up to 490 ms with etcd
# answering), every read returns what was written, I/O completed during
# both holds, and the chunk 0 writes completed after the release.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "noblock_e2e: FAIL: $*" >&2
	[ -f "$CL_DIR/lat.out" ] && { echo "--- e2e_lat" >&2; cat "$CL_DIR/lat.out" "$CL_DIR/lat.err" >&2; }
	for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; grep -v DEBUG "$f" | tail -8 >&2; done
	exit 1
}
ok() { echo "noblock_e2e: ok: $*"; }
PY=/usr/bin/python3
MAX_MS=${NB_MAX_MS:-1000}
cl_e2e_begin e2e-noblock "$1" 0 || fail "cluster did not start"

EPORT=${CL_ETCD##*:}
# proxy NAME: a hold proxy for every request, its port on stdout.
proxy() {
	local d="$CL_DIR/serve-proxy-$1" pp
	mkdir -p "$d"
	pp=$(cl_free_port)
	"$PY" "$SRC/test/lib/etcd_hold_proxy.py" "$pp" "$EPORT" "$d/hold" all >"$d/log" 2>&1 &
	echo $! >"$d/pid"
	for _ in $(seq 1 50); do grep -q listening "$d/log" && break; sleep 0.1; done
	grep -q listening "$d/log" || fail "hold proxy $1 did not start: $(cat "$d/log")"
	echo "$pp"
}
PS=$(proxy storage)
PC=$(proxy client)
for i in 1 2 3; do
	cl_start_storage "$i" "" --etcd "http://127.0.0.1:$PS" --gc-interval 1
done
cl_wait_nodes 3 || fail "storage nodes did not register"
"$ZL" volume create nb --size 64M --replicas 3 >/dev/null || fail "create nb"
V=$("$ZL" volume inspect nb | awk '$1 == "id" {print $2}')
[ -n "$V" ] || fail "no volume id"
[ "$(cl_rows "$V" | wc -l)" -ge 2 ] || fail "nb has fewer than 2 slices: $(cl_rows "$V")"

"$CL_BIN/e2e_lat" --etcd "http://127.0.0.1:$PC" --volume nb --chunk 1 --max-ms "$MAX_MS" \
	--stop "$CL_DIR/stop" --trigger-chunk 0 --trigger "$CL_DIR/trigger" \
	>"$CL_DIR/lat.out" 2>"$CL_DIR/lat.err" &
LAT=$!
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
touch "$CL_DIR/serve-proxy-storage/hold"
held storage
ticks 3
o1=$(ops_now)
rm -f "$CL_DIR/serve-proxy-storage/hold"
[ "${o1:-0}" -gt "${o0:-0}" ] || fail "no I/O completed while the daemons' etcd was held (ops $o0 -> $o1)"
ok "the daemons' etcd held for 3 s: $((o1 - o0)) operations meanwhile"

# 2. The client's etcd held; slice 0 moves to a new row version.
ticks 1
touch "$CL_DIR/serve-proxy-client/hold"
o2=$(ops_now)
row=$(cl_rows "$V" | awk '$1 == 0')
nodes=$(awk '{for (i = 4; i <= NF; i++) {split($i, a, ":"); printf "%s ", a[1]}}' <<<"$row")
# shellcheck disable=SC2086 # the node ids are words
hl_etcd order "$V" 0 $nodes || fail "cannot move the row of slice 0 ($row)"
touch "$CL_DIR/trigger"
held client
ticks 3
o3=$(ops_now)
rm -f "$CL_DIR/serve-proxy-client/hold"
[ "${o3:-0}" -gt "${o2:-0}" ] || fail "no I/O completed while the client's etcd was held (ops $o2 -> $o3)"
ok "the client's etcd held during a placement reload: $((o3 - o2)) operations meanwhile"

touch "$CL_DIR/stop"
rc=0
wait "$LAT" || rc=$?
[ "$rc" = 0 ] || fail "e2e_lat failed (rc $rc): $(tail -1 "$CL_DIR/lat.out")"
last=$(tail -1 "$CL_DIR/lat.out")
[[ "$last" =~ triggers=([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] ||
	fail "no write of chunk 0 completed after the reload: $last"
ok "every operation under $MAX_MS ms, every read back as written: $last"
echo "FIGURE: noblock: $last (etcd held 3 s for the daemons, then for the client)"
