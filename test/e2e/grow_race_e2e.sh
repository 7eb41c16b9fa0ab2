#!/usr/bin/env bash
# E2E of a volume that grows while the storage daemons' etcd watches lag
# (ControllerExpandVolume racing the daemons' `volumes/` watch: a writer
# that has the new record writes beyond the end the daemons' cached records
# know). Every daemon reaches etcd through test/lib/etcd_hold_proxy.py,
# which holds its watch streams and lets plain requests through.
#  1. A 3-replica volume of 8 MiB (4 MiB chunks), 8 MiB imported: the
#     daemons hold its record.
#  2. Every daemon's watches held; the record grown to 16 MiB (heal_tool
#     grow, what ControllerExpandVolume writes); `zl volume import` of 16
#     MiB (it reads the new record) writes chunks 2 and 3, beyond the end
#     the daemons know: they reload the record (a get) and serve the
#     writes. Before they did, they answered ZL_ERR_RANGE at once and the
#     import failed.
#  3. The watches released; the volume exported: it is the 16 MiB imported
#     (the oracle: the file, not the daemons).
#  4. A raw write (e2e_chunk) to chunk 4, beyond the new end, to the
#     primary of its slice: refused with ZL_ERR_RANGE once the daemon
#     reloaded the record after the request came (a request out of range
#     is neither held nor answered BUSY for ever).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
source "$SRC/test/lib/hold.sh"
hl_test grow_race_e2e
ok() { echo "$T: ok: $*"; }
export CL_AUTH=off
cl_e2e_begin e2e-grow-race "$1" 0 || fail "cluster did not start"
MiB=$((1 << 20))

hold_storage 3

# 1. The volume, known to every daemon.
"$ZL" volume create gr --size 8M --replicas 3 --chunk-size 4M >/dev/null || fail "create gr"
V=$("$ZL" volume inspect gr | awk '$1 == "id" {print $2}')
[ -n "$V" ] || fail "no volume id"
head -c $((16 * MiB)) /dev/urandom >"$CL_DIR/data"
head -c $((8 * MiB)) "$CL_DIR/data" >"$CL_DIR/first"
"$ZL" volume import gr "$CL_DIR/first" >/dev/null || fail "import of the first 8 MiB failed"
ok "8 MiB imported into the 8 MiB volume $V"

# 2. Watches held, the record grown, the grown volume written.
for i in 1 2 3; do hold_watches "$i"; done
held0=$(cat "$CL_DIR"/serve-proxy-*/log | grep -c '^held a watch message' || true)
hl_etcd grow "$V" $((16 * MiB)) || fail "growing the record failed"
"$ZL" volume import gr "$CL_DIR/data" >"$CL_DIR/import.out" 2>&1 ||
	fail "the import into the grown volume failed while the daemons' watches lag: $(tail -3 "$CL_DIR/import.out")"
held1=$(cat "$CL_DIR"/serve-proxy-*/log | grep -c '^held a watch message' || true)
[ "$held1" -gt "$held0" ] || fail "the proxies held nothing of the growth: the daemons' watches did not lag"
ok "16 MiB imported into the grown volume while every daemon's watch lagged (the proxies held $((held1 - held0)) watch messages)"

# 3. Released; the volume is what was imported.
for i in 1 2 3; do hold_release "$i"; done
"$ZL" volume export gr "$CL_DIR/out" >/dev/null || fail "export failed"
cmp -s "$CL_DIR/data" "$CL_DIR/out" || fail "the grown volume does not read back what was imported"
ok "the 16 MiB read back"

# 4. Beyond the new end: refused, not held for ever.
N=${V#vol-}
SLICES=$(hl_etcd get "/zipline/volumes/$V" | /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)["placement"]))')
S4=$((4 % SLICES))
PRIM=$(hl_etcd primary "$V" "$S4")
SV=$(cl_rows "$V" | awk -v s="$S4" '$1 == s {print $2}')
head -c 4096 /dev/urandom >"$CL_DIR/blk"
# BUSY (a reload throttled: one per volume per 250 ms) is retried, as
# clients do.
for _ in $(seq 1 20); do
	got=$(ZL_E2E_VOL="$N" "$CL_BIN/e2e_chunk" 127.0.0.1 "$(cat "$CL_DIR/storage-${PRIM#node-}/port")" \
		write "$V" 4 0 "$SV" "$CL_DIR/blk" 10000 2>"$CL_DIR/chunk.err") ||
		fail "e2e_chunk: $(cat "$CL_DIR/chunk.err")"
	[ "${got%% *}" = "status=ZL_ERR_BUSY" ] || break
	sleep 0.3
done
[ "${got%% *}" = "status=ZL_ERR_RANGE" ] ||
	fail "a write to chunk 4 of the 16 MiB volume was answered '$got', not ZL_ERR_RANGE"
ok "a write beyond the new end: $got"
echo "grow_race_e2e: PASS"
