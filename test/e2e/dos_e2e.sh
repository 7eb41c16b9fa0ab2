#!/usr/bin/env bash
# Acceptance test of "no cheap denial of service" (issue 11 item 5,
# docs/SECURITY.md): one zipline-storage daemon (node-3 of 3, --auth on)
# reaches etcd through a counting proxy (test/lib/etcd_count_proxy.py, the
# oracle: HTTP requests by path, counted outside the daemon) and is flooded
# by e2e_flood (hand-made wire requests, pipelined, many connections) with:
#   A  reads of 16 unknown volume ids, over and over, on a cluster connection
#   B  reads of a new unknown volume id each, on a cluster connection
#   C  reads of unknown volumes on a client connection (attach token)
#   D  reads with made-up slice versions of the client's own volume
#   E  HELLOs for unknown volumes with made-up tokens (before any HELLO)
#   F  writes with epoch 2^64-1 to unknown volumes (cluster connection)
#   G  reads before any HELLO, one connection each
#   H  headers with payload_len 2^31, one connection each
#   I  300 connections that never finish a HELLO (idle, half a header)
# while a real client (e2e_load, QD 8, verified writes and reads through
# lib/client) works on another volume. Checked, each with its figure:
#   - etcd range requests of node-3 per phase stay within the documented
#     limits (negative cache, load bucket, one refresh per volume per 250 ms)
#     plus the idle rate measured before;
#   - the misbehaving connections are closed (counted by e2e_flood);
#   - the real client has no failed I/O, no bad sector, max latency bounded;
#   - node-3's log grew by a bounded number of lines.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
PY=/usr/bin/python3
T=dos_e2e
fail() {
	echo "$T: FAIL: $*" >&2
	cl_dump_logs 20 "$CL_DIR"/storage-*/log
	exit 1
}
BAD=0
check_fail() { echo "$T: FAIL: $*" >&2; BAD=1; }
export CL_STORAGE_FLAGS="--log-level info"
export CL_AUTH=on
cl_e2e_begin e2e-dos "$1" 2 || fail "cluster did not start"
trap 'exit 143' TERM INT
FLOOD="$CL_BIN/e2e_flood"
[ -x "$FLOOD" ] || fail "$FLOOD is missing (built with the e2e tests)"

# --- node-3 behind the counting proxy -----------------------------------------
mkdir -p "$CL_DIR/serve-proxy" # cl_stop_all stops serve-*
"$PY" "$SRC/test/lib/etcd_count_proxy.py" "$CL_ETCD" "$CL_DIR/serve-proxy/port" \
	"$CL_DIR/serve-proxy/counts" >"$CL_DIR/serve-proxy/log" 2>&1 &
echo $! >"$CL_DIR/serve-proxy/pid"
for _ in $(seq 1 100); do [ -s "$CL_DIR/serve-proxy/port" ] && break; sleep 0.05; done
[ -s "$CL_DIR/serve-proxy/port" ] || fail "the etcd proxy did not start: $(cat "$CL_DIR/serve-proxy/log")"
PROXY="http://127.0.0.1:$(cat "$CL_DIR/serve-proxy/port")"
cl_start_storage 3 "" --etcd "$PROXY"
cl_wait_nodes 3 || fail "node-3 (etcd through $PROXY) did not register"
PORT=$(cat "$CL_DIR/storage-3/port")
LOG3=$CL_DIR/storage-3/log

# counts [SINCE_MS]: "RANGES TOTAL" node-3 sent to etcd so far (the proxy's
# file, rewritten every 100 ms); with SINCE_MS, from a file written at or
# after that wall-clock millisecond (waits for it, 5 s at most).
counts() {
	"$PY" - "$CL_DIR/serve-proxy/counts" "${1:-0}" <<'PY'
import json, sys, time
for _ in range(500):
    c = json.load(open(sys.argv[1]))
    if c.get('written_ms', 0) >= int(sys.argv[2]):
        print(c.get('/v3/kv/range', 0), c.get('total', 0))
        sys.exit(0)
    time.sleep(0.01)
sys.exit('counts: the proxy wrote no snapshot since %s' % sys.argv[2])
PY
}
now_ms() { date +%s%3N; }

# --- volumes, the client's attachment, the cluster token ---------------------
"$ZL" volume create dosload --size 64M --replicas 3 --chunk-size 1M >/dev/null || fail "create dosload"
"$ZL" volume create dosclient --size 16M --replicas 3 --chunk-size 1M >/dev/null || fail "create dosclient"
VC=$("$ZL" volume inspect dosclient | awk '$1 == "id" {print $2}')
[ -n "$VC" ] || fail "no id of dosclient"
# pub VID NODE: plays ControllerPublish (secret, attachment record through
# the etcd gateway); prints "EPOCH TOKEN CLUSTER_KEY".
pub() {
	"$PY" - "$SRC/test/lib" "$CL_ETCD" "$1" "$2" <<'PY'
import base64, hashlib, hmac, json, os, sys
sys.path.insert(0, sys.argv[1])
from etcd_gw import b64, call, get
etcd, vid, node = sys.argv[2], sys.argv[3], sys.argv[4]
secret = os.urandom(32).hex()
call(etcd, '/v3/kv/put', {'key': b64('/zipline/secrets/' + vid), 'value': b64(secret)})
key = '/zipline/attachments/' + vid
call(etcd, '/v3/kv/put', {'key': b64(key), 'value': b64(json.dumps(
    {'node': node, 'epoch': 0, 'readonly': False, 'time': 0}))})
epoch = get(etcd, key)['create_revision']
tok = hmac.new(bytes.fromhex(secret), ('%s|%s|%s' % (vid, node, epoch)).encode(),
               hashlib.sha256).hexdigest()
ck = get(etcd, '/zipline/keys/cluster')
ck = json.loads(base64.b64decode(ck['value']))['key'] if ck else ''
print(epoch, tok, ck)
PY
}
read -r EC TOKC CK <<<"$(pub "$VC" wn-dos)" || fail "cannot publish $VC"
[ -n "$CK" ] || fail "no cluster key in etcd after the daemons started"
CTOK=$("$PY" -c 'import hmac, hashlib, sys; print(hmac.new(bytes.fromhex(sys.argv[1]), b"peer|flood-op", hashlib.sha256).hexdigest())' "$CK")
CLUSTER=(--cluster --node flood-op --token "$CTOK")
CLIENT=(--hello-vol "$VC" --epoch "$EC" --node wn-dos --token "$TOKC")
# The client's HELLO works on node-3 (the watch may lag a moment).
for _ in $(seq 1 50); do
	out=$("$FLOOD" 127.0.0.1 "$PORT" slice-ver "${CLIENT[@]}" --vol "$VC" --count 1 --window 1)
	grep -q 'hello_failed=0' <<<"$out" && break
	sleep 0.1
done
grep -q 'hello_failed=0' <<<"$out" || fail "the attach token of $VC is refused by node-3: $out"

# --- the real client ----------------------------------------------------------
STOP=$CL_DIR/load.stop
"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume dosload --log "$CL_DIR/load.log" --qd 8 \
	--seed 5 --read-pct 30 --min-len 4K --max-len 64K --seconds 400 --stop-file "$STOP" \
	>"$CL_DIR/load.out" 2>"$CL_DIR/load.err" &
LOAD_PID=$!
cl_wait_count "$CL_DIR/load.log" '^A ' 100 30 || fail "e2e_load got no 100 writes acknowledged: $(cat "$CL_DIR/load.out" "$CL_DIR/load.err")"
kill -0 "$LOAD_PID" 2>/dev/null || fail "e2e_load ended early: $(cat "$CL_DIR/load.out" "$CL_DIR/load.err")"

# --- idle rate of node-3's etcd requests ---------------------------------------
read -r r0 t0 <<<"$(counts)"
ms0=$(now_ms)
sleep 5 # deliberate: the idle rate is measured over 5 s
read -r r1 t1 <<<"$(counts)"
IDLE_MS=$(($(now_ms) - ms0))
IDLE_R=$((r1 - r0))
echo "FIGURE: dos: idle node-3 (real client running): $IDLE_R etcd ranges, $((t1 - t0)) etcd requests in $IDLE_MS ms"
LINES0=$(wc -l <"$LOG3")
FLOOD_T0=$(now_ms)

# phase NAME MAX_RANGES_FIXED RANGES_PER_SEC KIND ARGS...: runs e2e_flood,
# checks node-3's etcd ranges during it against MAX_RANGES_FIXED +
# RANGES_PER_SEC * seconds + the idle rate, prints the figures; the flood's
# output in $CL_DIR/flood.out.
phase() {
	local name=$1 fixed=$2 per_sec=$3 ra ta rb tb ms ms_a bound sent
	shift 3
	read -r ra ta <<<"$(counts)"
	ms_a=$(now_ms)
	"$FLOOD" 127.0.0.1 "$PORT" "$@" >"$CL_DIR/flood.out" 2>&1 || fail "e2e_flood $name: $(cat "$CL_DIR/flood.out")"
	read -r rb tb <<<"$(counts "$(now_ms)")"
	ms=$(($(now_ms) - ms_a))
	bound=$((fixed + per_sec * (ms + 999) / 1000 + IDLE_R * (ms + IDLE_MS - 1) / IDLE_MS + 5))
	sent=$(sed -n 's/^FLOOD .* sent=\([0-9]*\).*/\1/p' "$CL_DIR/flood.out")
	echo "FIGURE: dos: $name: $(head -1 "$CL_DIR/flood.out" | cut -d' ' -f2-) | $(grep '^STATUS' "$CL_DIR/flood.out" | cut -d' ' -f2- | tr '\n' ' ')| node-3 etcd: $((rb - ra)) ranges, $((tb - ta)) requests (bound $bound ranges) in $ms ms"
	[ "${sent:-0}" -gt 0 ] || check_fail "$name: the flood sent nothing"
	[ $((rb - ra)) -le "$bound" ] ||
		check_fail "$name: node-3 made $((rb - ra)) etcd range requests for $sent flood requests (bound $bound)"
}
fl() { sed -n "s/^FLOOD .* $1=\([0-9]*\).*/\1/p" "$CL_DIR/flood.out"; }
# closed_all NAME: every connection of the flood but the last (which may end
# with the count) was closed by the daemon, each after at most the budget of
# 32 refusals plus the window of 64 requests already on the wire.
closed_all() {
	local conns closed answered
	conns=$(fl conns) closed=$(fl closed) answered=$(fl answered)
	[ "$closed" -ge $((conns - 1)) ] ||
		check_fail "$1: only $closed of $conns connections refused over and over were closed"
	[ "$answered" -le $((conns * (32 + 64 + 1))) ] ||
		check_fail "$1: $answered refusals on $conns connections: more than 97 each before the close"
}
st() { awk -v s="$1" '$1 == "STATUS" && $2 == s {print $3}' "$CL_DIR/flood.out"; }

# Limits of storage/storage_vol.c (docs/SECURITY.md): bucket 100/s, depth 200.
phase "A: 20000 reads of 16 unknown volumes (cluster connection)" 16 0 \
	unknown-vol "${CLUSTER[@]}" --distinct 16 --count 20000
[ "$(fl closed)" = 0 ] || check_fail "A: the daemon closed a cluster connection"
nf=$(st ZL_ERR_NOT_FOUND)
[ "${nf:-0}" -ge 19000 ] ||
	check_fail "A: fewer than 19000 of 20000 answered ZL_ERR_NOT_FOUND ($(st ZL_ERR_NOT_FOUND))"
phase "B: 20000 reads of 20000 unknown volumes (cluster connection)" 200 100 \
	unknown-vol "${CLUSTER[@]}" --count 20000 --seed 7
[ "$(fl answered)" = 20000 ] || check_fail "B: $(fl answered) of 20000 answered"
phase "C: 5000 reads of unknown volumes (client connection)" 0 0 \
	unknown-vol "${CLIENT[@]}" --count 5000
closed_all C
phase "D: 5000 reads with made-up slice versions (client connection, own volume)" 2 4 \
	slice-ver "${CLIENT[@]}" --vol "$VC" --count 5000
closed_all D
phase "E: 20000 HELLOs for unknown volumes" 0 0 hello --count 20000
closed_all E
phase "F: 5000 writes at epoch 2^64-1 to unknown volumes (cluster connection)" 16 0 \
	epoch "${CLUSTER[@]}" --distinct 16 --count 5000 --seed 3
[ "$(fl closed)" = 0 ] || check_fail "F: the daemon closed a cluster connection"
phase "G: 2000 connections with a read before any HELLO" 0 0 \
	noauth --vol "$VC" --count 2000 --window 1
closed_all G
phase "H: 500 connections with payload_len 2^31" 0 0 oversize --vol "$VC" --count 500
[ "$(fl closed)" -ge 495 ] || check_fail "H: only $(fl closed) of 500 oversize frames closed their connection"
# I: connections that never finish a HELLO (idle, or half a header) hold
# slots of the connection limit: each is closed after 10 s (docs/SECURITY.md).
"$PY" - "$PORT" >"$CL_DIR/idle.out" 2>&1 <<'PY'
import select, socket, sys, time
port = int(sys.argv[1])
socks, t0 = [], time.time()
for i in range(300):
    s = socket.create_connection(('127.0.0.1', port))
    if i % 3 == 0:
        s.sendall(b'\x00' * 40)  # half of an 80-byte header
    socks.append(s)
closed, first, last = {}, None, None
while len(closed) < len(socks) and time.time() - t0 < 20:
    r, _, _ = select.select([s for s in socks if s.fileno() not in closed], [], [], 1)
    for s in r:
        try:
            data = s.recv(4096)
        except OSError:
            data = b''
        if not data:
            t = time.time() - t0
            closed[s.fileno()] = t
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
print('IDLE conns=%d closed=%d first_ms=%d last_ms=%d' % (
    len(socks), len(closed), (first or 0) * 1000, (last or 0) * 1000))
PY
IDLE=$(grep '^IDLE' "$CL_DIR/idle.out")
echo "FIGURE: dos: I: $IDLE"
read -r ic icl ifirst ilast <<<"$(sed -n 's/^IDLE conns=\([0-9]*\) closed=\([0-9]*\) first_ms=\([0-9]*\) last_ms=\([0-9]*\)/\1 \2 \3 \4/p' <<<"$IDLE")"
[ -n "${ic:-}" ] || fail "I: the idle-connection probe failed: $(cat "$CL_DIR/idle.out")"
[ "$icl" = "$ic" ] || check_fail "I: only $icl of $ic connections without a HELLO were closed within 20 s"
[ "$ifirst" -ge 9000 ] && [ "$ilast" -le 13000 ] ||
	check_fail "I: connections without a HELLO closed between $ifirst and $ilast ms (want 10 s, +- the 1 s sweep)"
FLOOD_MS=$(($(now_ms) - FLOOD_T0))
LINES=$(($(wc -l <"$LOG3") - LINES0))

# --- the real client kept working ---------------------------------------------
touch "$STOP"
wait "$LOAD_PID"
load_rc=$?
LOADL=$(grep '^LOAD:' "$CL_DIR/load.out")
echo "FIGURE: dos: real client during the floods: $LOADL"
[ "$load_rc" = 0 ] || check_fail "the real client failed: $LOADL $(grep -m 3 failed "$CL_DIR/load.err" | tr '\n' ' ')"
LAT=$(sed -n 's/.* lat_max_ms=\([0-9]*\).*/\1/p' <<<"$LOADL")
[ -n "$LAT" ] && [ "$LAT" -le 3000 ] || check_fail "the real client's max latency ${LAT:-?} ms is above 3000 ms"
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume dosload --log "$CL_DIR/load.log" --exact \
	>"$CL_DIR/check.out" 2>&1 || check_fail "read-back of the real client's volume: $(grep CHECK "$CL_DIR/check.out")"
echo "FIGURE: dos: $(grep '^CHECK' "$CL_DIR/check.out")"

# --- bounded log ---------------------------------------------------------------
# Rate-limited sources: refusals and closes (1/s), accepted and refused
# connections (1/s each), the transport's frame errors (10/s), failed loads
# (1/s); so 15 a second at most, plus the real client's few.
LBOUND=$((20 + 15 * (FLOOD_MS + 999) / 1000))
echo "FIGURE: dos: node-3 log: $LINES lines during $FLOOD_MS ms of floods (bound $LBOUND)"
[ "$LINES" -le "$LBOUND" ] || check_fail "node-3 logged $LINES lines during the floods (bound $LBOUND)"
kill -0 "$(cl_pid storage-3)" 2>/dev/null || check_fail "node-3 died"
[ "$BAD" = 0 ] || fail "see above"
echo "$T: PASS"
