#!/usr/bin/env bash
# E2E of scrub and repair (docs/REPLICATION.md §8): 3 daemons with --heal on,
# a 3-replica volume of random data. While the daemons run, one byte is
# flipped in the copy of chunk A held by its slice's primary, and the whole
# chunk file of chunk B is deleted on a member that is not its primary.
#   - `zl volume verify` reports both (exit 1),
#   - `zl volume scrub` repairs both (a "scrub repaired" log line each, with
#     the right member and reason),
#   - `zl volume verify` then finds nothing (exit 0), the export equals the
#     input, and the replicas' chunk files read directly (an oracle that does
#     not go through the daemons) hold the same data and version everywhere.
# Then the background scrub (--scrub-interval) repairs a damaged copy alone.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() {
	echo "scrub_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; tail -25 "$f" >&2; done
	exit 1
}
PY=/usr/bin/python3
SIZE_MB=32
CHUNK=$((1024 * 1024))
export CL_STORAGE_FLAGS="--log-level info --scrub-mbps 800"
cl_e2e_begin e2e-scrub "$1" 3 --heal on || fail "cluster did not start"

# rows VOL: "slice primary node..." from the etcd record (not through zl).
rows() {
	"$PY" - "$CL_ETCD" "$1" <<'PY'
import base64, json, sys, urllib.request
etcd, vol = sys.argv[1], sys.argv[2]
b64 = lambda s: base64.b64encode(s.encode()).decode()
req = urllib.request.Request(etcd + '/v3/kv/range',
                             data=json.dumps({'key': b64('/zipline/volumes/' + vol)}).encode())
with urllib.request.urlopen(req, timeout=5) as r:
    rec = json.loads(base64.b64decode(json.load(r)['kvs'][0]['value']))
for i, row in enumerate(rec['placement']):
    print(i, row['in_sync'][0], ' '.join(row['nodes']))
PY
}

# chunk_files DIR...: per chunk file: node, name, data sha256, chunk version
# (highest version of a valid-looking metadata slot; storage_chunk.h).
chunk_files() {
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

# replicas_identical: every chunk file on all 3 nodes, same data and version.
replicas_identical() {
	chunk_files "$CL_DIR"/storage-{1,2,3}/data/chunks/"$vid" >"$CL_DIR/files" || fail "reading chunk files"
	local bad n
	bad=$(awk '{k = $2; d[k] = d[k] " " $3 "/" $4; n[k]++} END {for (k in d) {split(d[k], a, " "); for (i in a) if (a[i] != a[1] || n[k] != 3) {print k, n[k], d[k]; break}}}' "$CL_DIR/files")
	[ -z "$bad" ] || fail "replicas differ (chunk, copies, sha/version...): $(echo "$bad" | head -3)"
	n=$(awk '$1 == 3' "$CL_DIR/files" | wc -l)
	[ "$n" -eq $((SIZE_MB * 1024 * 1024 / CHUNK)) ] || fail "node-3 holds $n chunk files"
}

"$ZL" volume create svol --size ${SIZE_MB}M --replicas 3 --chunk-size 1M || fail "create"
vid=$("$ZL" volume inspect svol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import svol "$CL_DIR/in" || fail "import"
"$ZL" volume verify svol >"$CL_DIR/verify0" 2>&1 || { cat "$CL_DIR/verify0" >&2; fail "verify of an undamaged volume"; }
replicas_identical
rows "$vid" >"$CL_DIR/rows"
n_slices=$(wc -l <"$CL_DIR/rows")
echo "scrub_e2e: $n_slices slices; $(head -2 "$CL_DIR/rows" | tr '\n' ';')"

# Chunk A = 3: damaged on its primary. Chunk B = 6: deleted on a non-primary.
A=3 B=6
read -r _ primA _ < <(awk -v s=$((A % n_slices)) '$1 == s' "$CL_DIR/rows")
read -r _ primB nb1 nb2 nb3 < <(awk -v s=$((B % n_slices)) '$1 == s' "$CL_DIR/rows")
for n in $nb1 $nb2 $nb3; do [ "$n" != "$primB" ] && { lostB=$n; break; }; done
echo "scrub_e2e: chunk $A damaged on its primary $primA, chunk $B deleted on $lostB (primary $primB)"
fA="$CL_DIR/storage-${primA#node-}/data/chunks/$vid/$(printf '%016x' $A).zlc"
fB="$CL_DIR/storage-${lostB#node-}/data/chunks/$vid/$(printf '%016x' $B).zlc"
[ -f "$fA" ] && [ -f "$fB" ] || fail "chunk files $fA / $fB missing before the damage"
off=$(cl_chunk_block_off "$fA" 5 77) || fail "cannot locate block 5 in $fA"
cl_flip_byte "$fA" "$off"
rm -f "$fB"
sleep 1.2 # a file removed under an open chunk is noticed by reads within a second

set +e
"$ZL" volume verify svol >"$CL_DIR/verify1" 2>&1
rc=$?
set -e
cat "$CL_DIR/verify1"
[ "$rc" -eq 1 ] || fail "verify of a damaged volume exited $rc, not 1"
grep -q "^chunk $A: $primA " "$CL_DIR/verify1" || fail "verify did not report chunk $A on $primA"
grep -q "^chunk $B: $lostB " "$CL_DIR/verify1" || fail "verify did not report chunk $B on $lostB"
[ "$(grep -c '^chunk ' "$CL_DIR/verify1")" -eq 2 ] || fail "verify reported other differences"
grep -h "chunk file missing\|removed while open" "$CL_DIR/storage-${lostB#node-}/log" | grep -q "chunk=$B" ||
	fail "$lostB did not log the missing chunk file of chunk $B"

"$ZL" volume scrub svol >"$CL_DIR/scrub1" 2>&1 || { cat "$CL_DIR/scrub1" >&2; fail "scrub"; }
cat "$CL_DIR/scrub1"
grep -q "^scrub: $n_slices/$n_slices slices, 2 repaired" "$CL_DIR/scrub1" || fail "no final progress line with 2 repaired"
grep -q "2 bad copies found, 2 repaired" "$CL_DIR/scrub1" || fail "scrub summary does not say 2 found, 2 repaired"
grep -h "scrub repaired" "$CL_DIR"/storage-*/log | tee "$CL_DIR/repairs"
grep -q "chunk=$A member=$primA reason=crc" "$CL_DIR/repairs" || fail "no repair log of chunk $A on $primA (crc)"
grep -q "chunk=$B member=$lostB reason=missing" "$CL_DIR/repairs" || fail "no repair log of chunk $B on $lostB (missing)"
[ "$(wc -l <"$CL_DIR/repairs")" -eq 2 ] || fail "scrub repaired other copies too"

"$ZL" volume verify svol >"$CL_DIR/verify2" 2>&1 || { cat "$CL_DIR/verify2" >&2; fail "verify after the scrub"; }
"$ZL" volume export svol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/in" "$CL_DIR/out" || fail "volume content differs from what was written"
replicas_identical
echo "scrub_e2e: manual scrub repaired both copies; replicas identical"

# A second scrub finds nothing.
"$ZL" volume scrub svol --json >"$CL_DIR/scrub2" || fail "second scrub"
grep -q '"bad_found":0,"repaired":0' "$CL_DIR/scrub2" || fail "second scrub found something: $(cat "$CL_DIR/scrub2")"

# Background scrub: node-1 restarts with --scrub-interval 2 and repairs, on
# its own, a damaged copy of a slice it is primary of (on another member).
read -r s1 _ m1 m2 m3 < <(awk '$2 == "node-1"' "$CL_DIR/rows" | head -1)
[ -n "${s1:-}" ] || fail "node-1 is primary of no slice"
for n in $m1 $m2 $m3; do [ "$n" != node-1 ] && { other=$n; break; }; done
C=$s1
fC="$CL_DIR/storage-${other#node-}/data/chunks/$vid/$(printf '%016x' $C).zlc"
cl_stop storage-1
cl_start_storage 1 "" --scrub-interval 2
cl_wait_nodes 3 || fail "node-1 did not register again"
off=$(cl_chunk_block_off "$fC" 0 9) || fail "cannot locate block 0 in $fC"
cl_flip_byte "$fC" "$off"
for _ in $(seq 1 300); do
	grep -q "scrub repaired vol=$vid chunk=$C member=$other reason=crc" "$CL_DIR/storage-1/log" && break
	sleep 0.1
done
grep -q "scrub repaired vol=$vid chunk=$C member=$other reason=crc" "$CL_DIR/storage-1/log" ||
	fail "the background scrub of node-1 did not repair chunk $C on $other"
"$ZL" volume verify svol >"$CL_DIR/verify3" 2>&1 || { cat "$CL_DIR/verify3" >&2; fail "verify after the background scrub"; }
replicas_identical
for i in 1 2 3; do cl_stop storage-$i; done
echo "scrub_e2e: PASS (verify found both, scrub repaired both, background scrub repaired chunk $C)"
