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
fail() {
	echo "heal_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; tail -25 "$f" >&2; done
	exit 1
}
PY=/usr/bin/python3
SIZE_MB=64
CHUNK=65536
export CL_STORAGE_FLAGS="--repl-wait 30 --recovery-mbps 400 --log-level info"
# --heal on is the default; passed anyway, this test is about it.
CL_MANAGER=0 cl_e2e_begin e2e-heal "$1" 3 --heal on || fail "cluster did not start"

# Manager by hand: rows of the volume through the etcd JSON gateway.
#   heal_ctl set VOL NODE STATE    every row holding NODE: NODE -> STATE (CAS)
#   heal_ctl reports VOL [ERROR]   prints "slice reporter peer error slice_ver"
#   heal_ctl rows VOL              prints "slice v term node:state..."
heal_ctl() {
	"$PY" - "$CL_ETCD" "$@" <<'PY'
import base64, json, sys, urllib.request
etcd, cmd, vol = sys.argv[1], sys.argv[2], sys.argv[3]
b64 = lambda s: base64.b64encode(s.encode()).decode()
def call(path, body):
    req = urllib.request.Request(etcd + path, data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)
key = '/zipline/volumes/' + vol
if cmd == 'reports':
    want = sys.argv[4] if len(sys.argv) > 4 else None
    pre = '/zipline/reports/%s/' % vol
    end = pre[:-1] + chr(ord(pre[-1]) + 1)
    for kv in call('/v3/kv/range', {'key': b64(pre), 'range_end': b64(end)}).get('kvs', []):
        k = base64.b64decode(kv['key']).decode().split('/')
        r = json.loads(base64.b64decode(kv['value']))
        if want is None or r['error'] == want:
            print(k[-3], k[-2], r['peer'], r['error'], r['slice_ver'])
    sys.exit(0)
for attempt in range(50):
    kv = call('/v3/kv/range', {'key': b64(key)})['kvs'][0]
    rec = json.loads(base64.b64decode(kv['value']))
    if cmd == 'rows':
        for i, row in enumerate(rec['placement']):
            print(i, row['v'], row['term'],
                  ' '.join('%s:%s' % (n, s) for n, s in zip(row['nodes'], row['states'])))
        sys.exit(0)
    node, state = sys.argv[4], sys.argv[5]
    changed = False
    for row in rec['placement']:
        if node not in row['nodes']:
            continue
        i = row['nodes'].index(node)
        if row['states'][i] == state:
            continue
        prim = row['in_sync'][0] if row['in_sync'] else None
        row['states'][i] = state
        row['in_sync'] = [n for n, s in zip(row['nodes'], row['states']) if s == 'in_sync']
        if not row['in_sync']:
            sys.exit('refusing to leave a row without an in-sync member')
        row['v'] += 1
        if row['in_sync'][0] != prim:
            row['term'] += 1
        changed = True
    if not changed:
        sys.exit(0)
    txn = {'compare': [{'key': b64(key), 'target': 'MOD', 'result': 'EQUAL',
                        'mod_revision': kv['mod_revision']}],
           'success': [{'request_put': {'key': b64(key),
                                        'value': b64(json.dumps(rec, separators=(',', ':')))}}]}
    if call('/v3/kv/txn', txn).get('succeeded'):
        sys.exit(0)
sys.exit('row update lost the race 50 times')
PY
}

# heal_files DIR...: per chunk file of the volume: name, data sha256 and the
# chunk version (highest version of a metadata slot; storage_chunk.h).
heal_files() {
	"$PY" - "$CHUNK" "$@" <<'PY'
import hashlib, os, struct, sys
cs = int(sys.argv[1])
for d in sys.argv[2:]:
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), 'rb') as f:
            hdr = f.read(4096)
            if hdr[:8] != b'ZLCHUNK2':
                sys.exit('%s/%s: not a v2 chunk file' % (d, name))
            pages = struct.unpack_from('<I', hdr, 28)[0]
            data_off = struct.unpack_from('<Q', hdr, 40)[0]
            ver = 0
            for p in range(2 * pages):
                f.seek(4096 * (1 + p))
                slot = f.read(32)
                if slot[:4] == b'ZLMP':
                    ver = max(ver, struct.unpack_from('<Q', slot, 16)[0])
            f.seek(data_off)
            data = f.read(cs)
            data += b'\0' * (cs - len(data))
        print(d.split('/storage-')[1].split('/')[0], name, hashlib.sha256(data).hexdigest(), '%x' % ver)
PY
}

"$ZL" volume create hvol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect hvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import hvol "$CL_DIR/in" || fail "import"
heal_ctl rows "$vid" | sed -n 1,3p

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
	[ -n "$(heal_ctl reports "$vid" | awk '$3 == "node-3"')" ] && break
	kill -0 "$imp" 2>/dev/null || break
	sleep 0.1
done
reports=$(heal_ctl reports "$vid" | awk '$3 == "node-3"')
echo "heal_e2e: failure reports about node-3:"; echo "$reports"
[ -n "$reports" ] || fail "no primary put a failure report about node-3"
kill -0 "$imp" 2>/dev/null || fail "the rewrite finished before node-3 left the in-sync set (writes were acknowledged without it)"
heal_ctl set "$vid" node-3 out || fail "marking node-3 out"
wait "$imp" || { cat "$CL_DIR/import2.log" >&2; fail "rewrite with node-3 down"; }
grep -q "slice dropped\|dropped backup" "$CL_DIR"/storage-[12]/log &&
	fail "a daemon with --heal on dropped a member from a row"

# node-3 returns (same disk): the manager makes it RECOVERING.
cl_start_storage 3
cl_wait_nodes 3 || fail "node-3 did not register again"
t0=$(date +%s%N)
heal_ctl set "$vid" node-3 recovering || fail "marking node-3 recovering"
n_slices=$(heal_ctl rows "$vid" | grep -c 'node-3:')
for _ in $(seq 1 600); do
	got=$(heal_ctl reports "$vid" CAUGHT_UP | awk '$3 == "node-3"' | wc -l)
	[ "$got" -ge "$n_slices" ] && break
	sleep 0.1
done
t1=$(date +%s%N)
echo "heal_e2e: CAUGHT_UP reports: $got of $n_slices slices in $(((t1 - t0) / 1000000)) ms"
[ "$got" -ge "$n_slices" ] || fail "only $got of $n_slices slices reported node-3 CAUGHT_UP"
heal_ctl set "$vid" node-3 in_sync || fail "marking node-3 in sync"

copied=$(cat "$CL_DIR"/storage-[12]/log | grep 'recovery caught up' | grep "member=node-3" |
	sed -n 's/.*bytes_copied=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
chunks=$(cat "$CL_DIR"/storage-[12]/log | grep 'recovery caught up' | grep "member=node-3" |
	sed -n 's/.*chunks_copied=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
echo "heal_e2e: recovery copied $chunks chunks, $copied bytes (touched: $touched chunks of $CHUNK bytes = $((touched * CHUNK)))"
[ "$copied" -le $((touched * CHUNK)) ] || fail "recovery copied $copied bytes, more than $((touched * CHUNK))"
[ "$chunks" -ge 1 ] || fail "recovery copied nothing, yet node-3 missed $touched chunks"

# Every replica: same data, byte for byte, and the same version per chunk.
heal_files "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
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
