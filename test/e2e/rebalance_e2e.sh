#!/usr/bin/env bash
# E2E of rebalance (docs/REPLICATION.md §5): 3 daemons and the manager
# (cl_e2e_begin), a 3-replica volume full of random data (kept as the
# oracle); a 4th daemon joins and `zl volume rebalance` runs while the whole
# volume is rewritten with new random data again and again. Then: every live node holds
# floor or ceil of slices*3/4 members, every row is 3/3 in sync, the
# manager logged its moves one member per row at a time, `zl volume export`
# equals what was written last, `zl volume verify` passes, and the chunk
# files of every row's members (read directly from the data dirs) hold the
# same data and version; then the daemons remove the old copies of the
# slices they left (storage_gc.c, --gc-interval 1 --gc-grace 3) within a
# bounded time, and nothing else: every member's files, `zl volume verify`
# and the exported data are checked again after the removal.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() {
	echo "rebalance_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/manager/log "$CL_DIR"/storage-*/log; do
		echo "--- $f" >&2
		tail -25 "$f" >&2
	done
	exit 1
}
PY=/usr/bin/python3
SIZE_MB=32
CHUNK=65536
export CL_STORAGE_FLAGS="--recovery-mbps 400 --log-level info --gc-interval 1 --gc-grace 3"
GC_BOUND=60 # seconds after the rebalance for the last old copy to go
cl_e2e_begin e2e-rebal "$1" 3 || fail "cluster did not start"

# rebal_files VOL_ID: per chunk file of every storage dir: node, chunk index,
# data sha256 and chunk version (format v2, storage/storage_chunk.h).
rebal_files() {
	"$PY" "$(dirname "$0")/../lib/heal_tool.py" files "$CHUNK" --missing-ok --node-label node- \
		--chunk-index "$CL_DIR"/storage-*/data/chunks/"$1"
}

# rebal_check: every chunk, as written last ("$CL_DIR/new"), on each of its
# row's members (files read directly), with one version across them.
rebal_check() {
	rebal_files "$vid" >"$CL_DIR/files" || fail "reading chunk files"
	bad=$("$PY" - "$CL_DIR/rows" "$CL_DIR/files" "$n_slices" "$CHUNK" "$SIZE_MB" "$CL_DIR/new" <<'PY'
import hashlib, sys
rows, files, ns, cs, mb, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
members = {}
for line in open(rows):
    p = line.split()
    members[int(p[0])] = [m.split(':')[0] for m in p[3:]]
have = {}
for line in open(files):
    node, idx, sha, ver = line.split()
    have[(node, int(idx))] = (sha, ver)
want = open(new, 'rb').read()
n_bad = 0
for idx in range(mb * 1024 * 1024 // cs):
    sha = hashlib.sha256(want[idx * cs:(idx + 1) * cs]).hexdigest()
    got = [(n, have.get((n, idx))) for n in members[idx % ns]]
    if any(g is None or g[0] != sha for _, g in got) or len({g[1] for _, g in got}) != 1:
        if n_bad < 3:
            print('chunk %d slice %d: %s' % (idx, idx % ns, got))
        n_bad += 1
if n_bad:
    print('%d chunks differ from the written data on some member' % n_bad)
PY
	)
	[ -z "$bad" ] || fail "$bad"
}

"$ZL" volume create rvol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect rvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import rvol "$CL_DIR/in" || fail "import"
n_slices=$(cl_rows "$vid" | wc -l)
cl_rows "$vid" | grep -q node-4 && fail "node-4 is in a row before it started"

# node-1 becomes the primary of every row (an edit of the rows, as the
# manager would write it: new term where the primary changes), so that the
# rebalance must move primaries too: node-1 is the most loaded node and no
# row has it as a backup.
"$PY" - "$SRC/test/lib" "$CL_ETCD" "$vid" <<'PY' || fail "making node-1 the primary of every row"
import json, sys
sys.path.insert(0, sys.argv[1])
from etcd_gw import b64, unb64
import etcd_gw
etcd, vol = sys.argv[2], sys.argv[3]
call = lambda path, body: etcd_gw.call(etcd, path, body)
key = '/zipline/volumes/' + vol
for attempt in range(50):
    kv = etcd_gw.get(etcd, key)
    rec = json.loads(unb64(kv['value']))
    for row in rec['placement']:
        i = row['nodes'].index('node-1')
        if i == 0:
            continue
        for k in ('nodes', 'states', 'incarnations'):
            row[k].insert(0, row[k].pop(i))
        row['in_sync'] = [n for n, st in zip(row['nodes'], row['states']) if st == 'in_sync']
        row['v'] += 1
        row['term'] += 1
    txn = {'compare': [{'key': b64(key), 'target': 'MOD', 'result': 'EQUAL',
                        'mod_revision': kv['mod_revision']}],
           'success': [{'request_put': {'key': b64(key),
                                        'value': b64(json.dumps(rec, separators=(',', ':')))}}]}
    if call('/v3/kv/txn', txn).get('succeeded'):
        sys.exit(0)
sys.exit('row update lost the race 50 times')
PY
[ "$(cl_rows "$vid" | awk '$4 !~ /^node-1:/' | wc -l)" -eq 0 ] || fail "node-1 is not first in every row"

# node-4 joins; rebalance while the whole volume is rewritten.
cl_start_storage 4
cl_wait_nodes 4 || fail "node-4 did not register"
# The write load: whole-volume imports of new random data, one after the
# other, until the rebalance is done; "$CL_DIR/new" is the last one written.
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/new.1"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/new.2"
(
	k=0
	while [ ! -e "$CL_DIR/rebal.done" ] && [ "$k" -lt 100 ]; do
		k=$((k + 1))
		"$ZL" volume import rvol "$CL_DIR/new.$((k % 2 + 1))" >>"$CL_DIR/import2.log" 2>&1 ||
			exit 1
		echo "$((k % 2 + 1))" >"$CL_DIR/last"
	done
) &
imp=$!
t0=$(date +%s)
"$ZL" volume rebalance rvol --timeout 300 >"$CL_DIR/rebal.log" 2>&1 ||
	{ cat "$CL_DIR/rebal.log" >&2; fail "zl volume rebalance failed"; }
t1=$(date +%s)
touch "$CL_DIR/rebal.done"
head -3 "$CL_DIR/rebal.log"; echo ...; tail -2 "$CL_DIR/rebal.log"
wait "$imp" || { cat "$CL_DIR/import2.log" >&2; fail "rewrite during the rebalance"; }
[ -s "$CL_DIR/last" ] || fail "no import finished"
cp "$CL_DIR/new.$(cat "$CL_DIR/last")" "$CL_DIR/new"
echo "rebalance_e2e: rebalance took $((t1 - t0)) s under $(grep -c imported "$CL_DIR/import2.log") whole-volume rewrites"

# Balance: floor/ceil of slices*3/4 members per node, every row 3/3 in sync.
cl_rows "$vid" >"$CL_DIR/rows" || fail "reading rows"
lo=$((n_slices * 3 / 4))
hi=$(((n_slices * 3 + 3) / 4))
for i in 1 2 3 4; do
	c=$(grep -c " node-$i:" "$CL_DIR/rows" || true)
	echo "rebalance_e2e: node-$i holds $c members (want $lo..$hi)"
	[ "$c" -ge "$lo" ] && [ "$c" -le "$hi" ] || fail "node-$i holds $c members, not $lo..$hi"
done
bad=$(awk '{n = 0; for (i = 4; i <= NF; i++) n += ($i ~ /:in_sync$/); if (n != 3) print}' "$CL_DIR/rows")
[ -z "$bad" ] || fail "rows not 3/3 in sync: $(echo "$bad" | head -3)"
"$ZL" volume rebalance rvol --no-wait >/dev/null || fail "rebalance --no-wait"

# The manager's moves: logged, and never two members of one row at once
# (each move is a row version of its own: a move line per slice and version).
moves=$(grep -c "rebalance node-[0-9] -> node-[0-9]" "$CL_DIR/manager/log" || true)
echo "rebalance_e2e: the manager logged $moves moves"
[ "$moves" -ge "$lo" ] || fail "only $moves moves logged for $lo members on node-4"
grep -q "vol=$vid rebalance done" "$CL_DIR/manager/log" || fail "the manager did not log the end"
prim=$(grep "rebalance node-[0-9] -> node-[0-9]" "$CL_DIR/manager/log" | grep -c "was the primary" || true)
echo "rebalance_e2e: $prim of the moves moved a primary (a new term each)"
[ "$prim" -ge 1 ] || fail "no move of a primary, yet node-1 was the primary of every row"
bad=$(grep "was the primary" "$CL_DIR/manager/log" | sed -n 's/.*term=\([0-9]*\)->\([0-9]*\)$/\1 \2/p' | awk '$2 <= $1')
[ -z "$bad" ] || fail "a primary moved without a new term: $bad"

# Data: what was written last, through the client and on every member.
"$ZL" volume export rvol "$CL_DIR/out" || fail "export"
cmp "$CL_DIR/new" "$CL_DIR/out" || fail "volume content differs from what was written"
"$ZL" volume verify rvol >"$CL_DIR/verify.log" 2>&1 || { cat "$CL_DIR/verify.log" >&2; fail "verify"; }
rebal_check
echo "rebalance_e2e: every chunk identical (data and version) on its row's 3 members"
old=$(awk 'NR == FNR {for (i = 4; i <= NF; i++) {split($i, a, ":"); m[$1 " " a[1]] = 1}; next}
	{if (!m[($2 % '"$n_slices"') " " $1]) n++} END {print n + 0}' "$CL_DIR/rows" "$CL_DIR/files")
echo "rebalance_e2e: $old chunk files on nodes no longer members of their slice right after the rebalance"

# Old copies: gone within GC_BOUND seconds of the end of the rebalance.
rebal_old() {
	rebal_files "$vid" >"$CL_DIR/files" || fail "reading chunk files"
	awk 'NR == FNR {for (i = 4; i <= NF; i++) {split($i, a, ":"); m[$1 " " a[1]] = 1}; next}
		{if (!m[($2 % '"$n_slices"') " " $1]) n++} END {print n + 0}' "$CL_DIR/rows" "$CL_DIR/files"
}
k=0
while old=$(rebal_old) && [ "$old" -gt 0 ] && [ "$k" -lt $((GC_BOUND * 2)) ]; do
	k=$((k + 1))
	sleep 0.5
done
t2=$(date +%s)
[ "$old" -eq 0 ] ||
	fail "$old old chunk files still on nodes no longer members of their slice $GC_BOUND s after the rebalance"
gc_files=$(cat "$CL_DIR"/storage-*/log | sed -n 's/.*removed \([0-9]*\) old chunk files (\([0-9]*\) bytes).*/\1/p' |
	awk '{n += $1} END {print n + 0}')
gc_bytes=$(cat "$CL_DIR"/storage-*/log | sed -n 's/.*removed \([0-9]*\) old chunk files (\([0-9]*\) bytes).*/\2/p' |
	awk '{n += $1} END {print n + 0}')
[ "$gc_files" -gt 0 ] && [ "$gc_bytes" -gt 0 ] || fail "no old copy removal logged ($gc_files files, $gc_bytes bytes), yet members moved"
# Every move left SIZE/CHUNK/slices chunk files behind on the node it left.
want=$((moves * SIZE_MB * 1024 * 1024 / CHUNK / n_slices))
[ "$gc_files" -ge "$want" ] || fail "only $gc_files old chunk files removed for $moves moves ($want expected)"
if grep -q EBADF "$CL_DIR"/storage-*/log; then
	fail "EBADF in a daemon log: $(grep -h EBADF "$CL_DIR"/storage-*/log | head -2)"
fi
echo "FIGURE: rebalance_gc $gc_files old chunk files, $gc_bytes bytes reclaimed; the last one $((t2 - t1)) s after the rebalance ended (--gc-interval 1 --gc-grace 3)"

# Nothing else removed: every member's files, the replicas and the data.
rebal_check
"$ZL" volume verify rvol >"$CL_DIR/verify2.log" 2>&1 || { cat "$CL_DIR/verify2.log" >&2; fail "verify after the removal"; }
"$ZL" volume export rvol "$CL_DIR/out2" || fail "export after the removal"
cmp "$CL_DIR/new" "$CL_DIR/out2" || fail "volume content differs from what was written after the removal"
echo "rebalance_e2e: after the removal every member's copy is intact, verify passes, the data reads back"
echo "rebalance_e2e: PASS ($moves moves in $((t1 - t0)) s under rewrites)"
