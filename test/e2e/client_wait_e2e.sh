#!/usr/bin/env bash
# E2E of the client side of healing (docs/REPLICATION.md §2 "Waiting instead
# of failing"): 3 zipline-storage daemons with --heal on and a
# zipline-controller with --manager=on, real etcd, real sockets.
#
# Phase 1: `zl volume import` of random data into a 3-replica volume; while
#   it runs, the primary of one of its slices is killed with SIGKILL. Every
#   write must be acknowledged (import exits 0), the data must read back byte
#   for byte (export + cmp against the source file), the client must never
#   have promoted anyone itself ("promoted new primary" / slice_drop), and
#   the client's failure report must have reached etcd or the manager must
#   have moved the dead node out of the rows (both are checked and shown).
# Phase 2: a second node is killed, leaving one live node, the primary of a
#   one-slice volume. A write with --io-timeout 5 fails after about 5 s (not
#   before 4 s, not after 30 s) with one line naming the volume, the slice
#   and the seconds waited; reads of that volume still work and return the
#   data written before (the failed write wrote the same bytes again, so the
#   oracle does not depend on whether it was applied).
# Usage: client_wait_e2e.sh BUILD_DIR   (KEEP=1 keeps the state dir)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
PY=/usr/bin/python3
fail() {
	echo "client_wait_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log "$CL_DIR"/controller/log "$CL_DIR"/*.err; do
		[ -f "$f" ] && { echo "--- $f" >&2; grep -v ' DEBUG ' "$f" | tail -25 >&2; }
	done
	exit 1
}
ok() { echo "client_wait_e2e: ok: $*"; }
cl_require client_wait_e2e "$1" zipline-storage zipline-controller zl

# --repl-wait 3: a write whose backup died answers within 3 s (below the
# client's 10 s request timeout) while the manager has not moved it out yet.
export CL_STORAGE_FLAGS="--repl-wait 3 --log-level info"
CL_MANAGER=0 cl_e2e_begin e2e-client-wait "$1" 3 --heal on || fail "cluster did not start"
CL_DOWN_OUT=600 cl_start_manager controller || fail "the controller did not start"
for _ in $(seq 1 100); do
	grep -q 'manager: ' "$CL_DIR/controller/log" 2>/dev/null && break
	sleep 0.1
done
grep -q 'manager: ' "$CL_DIR/controller/log" || fail "the controller's manager did not start"

# rows VOL: "slice v primary node:state..." from the volume record in etcd.
# reports VOL: "slice reporter peer error slice_ver".
etcd_q() {
	"$PY" - "$SRC/test/lib" "$CL_ETCD" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import etcd_gw
etcd, cmd, vol = sys.argv[2], sys.argv[3], sys.argv[4]
if cmd == 'reports':
    for kv in etcd_gw.prefix(etcd, '/zipline/reports/%s/' % vol):
        k = etcd_gw.unb64(kv['key']).split('/')
        r = json.loads(etcd_gw.unb64(kv['value']))
        print(k[-3], k[-2], r['peer'], r['error'], r['slice_ver'])
    sys.exit(0)
rec = json.loads(etcd_gw.unb64(etcd_gw.get(etcd, '/zipline/volumes/' + vol)['value']))
for i, row in enumerate(rec['placement']):
    states = row.get('states') or ['in_sync' if n in row['in_sync'] else 'out' for n in row['nodes']]
    prim = row['in_sync'][0] if row['in_sync'] else '-'
    print(i, row['v'], prim, ' '.join('%s:%s' % (n, s) for n, s in zip(row['nodes'], states)))
PY
}
vid_of() { "$ZL" volume inspect "$1" | awk '$1 == "id" {print $2; exit}'; }

"$ZL" volume create big --size 256M --replicas 3 >/dev/null || fail "create big"
"$ZL" volume create small --size 4M --replicas 3 >/dev/null || fail "create small"
BIG=$(vid_of big) SMALL=$(vid_of small)
[ -n "$BIG" ] && [ -n "$SMALL" ] || fail "no volume ids (zl volume inspect)"
[ "$(etcd_q rows "$SMALL" | wc -l)" = 1 ] || fail "small should have one slice"
# Phase 2 keeps small's primary alive: phase 1 kills another node.
PS=$(etcd_q rows "$SMALL" | awk '{print $3}')
K=""
for n in node-1 node-2 node-3; do
	[ "$n" = "$PS" ] && continue
	if etcd_q rows "$BIG" | awk -v n="$n" '$3 == n {f = 1} END {exit !f}'; then K=$n; break; fi
done
[ -n "$K" ] || fail "no node other than $PS is primary of a slice of big"
B=""
for n in node-1 node-2 node-3; do [ "$n" != "$PS" ] && [ "$n" != "$K" ] && B=$n; done
KSLICES=$(etcd_q rows "$BIG" | awk -v n="$K" '$3 == n' | wc -l)
ok "big=$BIG small=$SMALL; phase 1 kills $K (primary of $KSLICES slices of big), phase 2 kills $B, $PS stays"

head -c 4M /dev/urandom >"$CL_DIR/small.src"
"$ZL" volume import small "$CL_DIR/small.src" >/dev/null || fail "import small"
head -c 256M /dev/urandom >"$CL_DIR/big.src"

# ---- phase 1: kill a primary during a verified write load ----
t0=$(date +%s)
"$ZL" --log-level warn --io-timeout 300 volume import big "$CL_DIR/big.src" \
	>"$CL_DIR/import.out" 2>"$CL_DIR/import.err" &
imp=$!
# The import's writes reach $K (a chunk file of big appears there) before the kill.
for _ in $(seq 1 100); do
	[ -n "$(find "$CL_DIR/storage-${K#node-}/data/chunks/$BIG" -name '*.zlc' 2>/dev/null | head -1)" ] && break
	sleep 0.05
done
kill -0 "$imp" 2>/dev/null || fail "the import finished before the kill (test is void): $(cat "$CL_DIR/import.err")"
cl_stop "storage-${K#node-}" KILL
ok "killed $K (SIGKILL) while the import was running"
rc=0
wait "$imp" || rc=$?
t1=$(date +%s)
[ "$rc" = 0 ] || fail "import big failed (rc=$rc) after a primary was killed: $(tail -5 "$CL_DIR/import.err")"
ok "import big: every write acknowledged ($((t1 - t0)) s, with $K dead)"
if grep -Ei 'promoted new primary|cannot promote|slice dropped|slice_drop' "$CL_DIR/import.err"; then
	fail "the client promoted a primary itself (heal mode must only report)"
fi
nrep=$(grep -c 'failure report put' "$CL_DIR/import.err" || true)
grep 'failure report put' "$CL_DIR/import.err" | head -3 | sed 's/^/client_wait_e2e: client: /'
# The manager moved K out of every row of big (its record's lease lapsed).
moved=0
for _ in $(seq 1 300); do
	if ! etcd_q rows "$BIG" | grep -q "$K:in_sync"; then moved=1; break; fi
	sleep 0.1
done
[ "$nrep" -gt 0 ] || [ "$moved" = 1 ] || fail "no failure report from the client and $K still in sync"
[ "$moved" = 1 ] || fail "the manager did not move $K out of big's rows"
grep -m 3 "manager: vol=$BIG" "$CL_DIR/controller/log" | sed 's/^/client_wait_e2e: manager: /' || true
ok "client failure reports: $nrep; $K out of every row of big: yes"
etcd_q rows "$BIG" | awk -v n="$K" '$3 == n {exit 1}' || fail "$K is still a primary of big"

"$ZL" --io-timeout 60 volume export big "$CL_DIR/big.out" >/dev/null 2>"$CL_DIR/export.err" ||
	fail "export big: $(tail -3 "$CL_DIR/export.err")"
cmp "$CL_DIR/big.src" "$CL_DIR/big.out" || fail "big does not read back byte for byte"
ok "big reads back byte for byte (256 MiB)"

# ---- phase 2: one live node; a write gives up after --io-timeout ----
cl_stop "storage-${B#node-}" KILL
ok "killed $B; only $PS (primary of small) is alive"
s=$(date +%s.%N)
rc=0
"$ZL" --log-level err --io-timeout 5 volume import small "$CL_DIR/small.src" \
	>/dev/null 2>"$CL_DIR/short.err" || rc=$?
e=$(date +%s.%N)
dt=$(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.1f", e - s}')
[ "$rc" != 0 ] || fail "a write with two of three nodes dead succeeded"
awk -v d="$dt" 'BEGIN {exit !(d >= 4 && d <= 30)}' ||
	fail "the write failed after $dt s, want 4..30 s with --io-timeout 5: $(cat "$CL_DIR/short.err")"
line=$(grep -m 1 'waited [0-9]* s for an in-sync primary' "$CL_DIR/short.err") ||
	fail "no 'waited N s for an in-sync primary' line: $(cat "$CL_DIR/short.err")"
grep -q "vol=$SMALL slice=0 " <<<"$line" || fail "the line does not name vol=$SMALL slice=0: $line"
grep -q '(last: ZL_ERR_' <<<"$line" || fail "the line does not name the last error: $line"
[ "$(grep -c 'waited [0-9]* s for an in-sync primary' "$CL_DIR/short.err")" = 1 ] ||
	fail "more than one 'waited' line for one I/O: $(cat "$CL_DIR/short.err")"
ok "write failed after $dt s (rc=$rc): ${line#*client_io.c:* }"
"$ZL" --io-timeout 20 volume export small "$CL_DIR/small.out" >/dev/null 2>"$CL_DIR/small.err" ||
	fail "reading small from its live primary failed: $(tail -3 "$CL_DIR/small.err")"
cmp "$CL_DIR/small.src" "$CL_DIR/small.out" || fail "small does not read back byte for byte"
ok "small reads back byte for byte from $PS with two nodes dead"
echo "client_wait_e2e: PASS"
