#!/usr/bin/env bash
# E2E of a write racing the fence between daemons (docs/SECURITY.md, "A
# fenced write between daemons"): the attachment moves to another node while
# the slice primary's etcd watches lag (test/lib/etcd_hold_proxy.py holds
# them), so the backups fence the old epoch first. The old attachment's
# token then writes two patterns through the primary (raw requests,
# e2e_chunk). Oracle, independent of the daemons: every replica's chunk
# files (heal_tool.py files) are identical in data and version; the first
# fenced write was answered ZL_ERR_STALE (it may have landed, on every
# replica alike); the second fenced write is refused at once and is on no
# replica (a byte search of every chunk file). After the watches are
# released the new attachment writes the same blocks (every replica alike
# again); then the primary is killed (kill -9), the manager fails the slice
# over, and a read through the new attachment's token from the new primary
# returns what the old primary returned: reads never go backwards.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
source "$SRC/test/lib/hold.sh"
fail() {
	echo "fence_race_e2e: FAIL: $*" >&2
	for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; grep -v DEBUG "$f" | tail -12 >&2; done
	exit 1
}
ok() { echo "fence_race_e2e: ok: $*"; }
PY=/usr/bin/python3
export CL_AUTH=on
cl_e2e_begin e2e-fence-race "$1" 0 || fail "cluster did not start"
CHUNK=$((4 << 20))

# One hold proxy per daemon (its --etcd); only the primary's is armed later.
hold_storage 3

"$ZL" volume create fr --size 64M --replicas 3 >/dev/null || fail "create fr"
V=$("$ZL" volume inspect fr | awk '$1 == "id" {print $2}')
[ -n "$V" ] || fail "no volume id"
N=${V#vol-}

source "$SRC/test/lib/auth_tool.sh"
S=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
etcd_ctl put "/zipline/secrets/$V" "$S" >/dev/null
E1=$(etcd_ctl put "/zipline/attachments/$V" '{"node":"wn-1","epoch":0,"readonly":false,"time":0}')
T1=$(token "$S" "$V|wn-1|$E1")

row=$(cl_rows "$V" | awk '$1 == 0')
SV=$(awk '{print $2}' <<<"$row")
PRIM=$(hl_etcd primary "$V" 0)
[ -n "$PRIM" ] || fail "no primary of slice 0: $row"
PI=${PRIM#node-}
head -c 65536 /dev/urandom >"$CL_DIR/good"
head -c 65536 /dev/urandom >"$CL_DIR/evil1"
head -c 65536 /dev/urandom >"$CL_DIR/evil2"

# chunk_at I TOKEN EPOCH NODE -- ARGS: e2e_chunk to node-I as a client of V;
# prints "hello=X status=Y".
chunk_at() {
	local i=$1 tok=$2 ep=$3 wn=$4 out
	shift 5
	out=$(ZL_E2E_TOKEN="$tok" ZL_E2E_EPOCH="$ep" ZL_E2E_VOL="$N" ZL_E2E_NODE="$wn" \
		"$CL_BIN/e2e_chunk" 127.0.0.1 "$(cat "$CL_DIR/storage-$i/port")" "$@" 2>"$CL_DIR/chunk.err") ||
		fail "e2e_chunk node-$i $*: $(cat "$CL_DIR/chunk.err")"
	echo "$(grep -o 'hello=[A-Z_]*' "$CL_DIR/chunk.err" | tail -1) ${out%% aux=*}"
}
got=""
for _ in $(seq 1 50); do
	got=$(chunk_at "$PI" "$T1" "$E1" wn-1 -- write "$V" 0 0 "$SV" "$CL_DIR/good" 10000)
	[ "$got" = "hello=OK status=OK" ] && break
	sleep 0.1
done
[ "$got" = "hello=OK status=OK" ] || fail "the attach token's first write: $got"
ok "epoch $E1 wrote chunk 0 through the primary $PRIM"

# The move, while the primary's watches are held.
hold_watches "$PI"
etcd_ctl del "/zipline/attachments/$V"
E2=$(etcd_ctl put "/zipline/attachments/$V" '{"node":"wn-2","epoch":0,"readonly":false,"time":0}')
T2=$(token "$S" "$V|wn-2|$E2")
for i in 1 2 3; do
	[ "$i" = "$PI" ] && continue
	got=""
	for _ in $(seq 1 50); do
		got=$(chunk_at "$i" "$T1" "$E1" wn-1 -- read "$V" 0 0 4096 "$SV" "$CL_DIR/x")
		[ "${got%% *}" = "hello=ZL_ERR_STALE" ] && break
		sleep 0.1
	done
	[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "backup node-$i did not fence epoch $E1: $got"
done
got=$(chunk_at "$PI" "$T1" "$E1" wn-1 -- read "$V" 0 0 4096 "$SV" "$CL_DIR/x")
[ "$got" = "hello=OK status=OK" ] ||
	fail "the held primary already fences epoch $E1 (the proxy did not hold its watch): $got"
ok "the backups fence epoch $E1 (new epoch $E2); the primary $PRIM has not seen it"

# The old attachment writes on through the primary.
got=$(chunk_at "$PI" "$T1" "$E1" wn-1 -- write "$V" 0 0 "$SV" "$CL_DIR/evil1" 10000)
[ "$got" = "hello=OK status=ZL_ERR_STALE" ] || fail "the first fenced write was answered: $got"
got=$(chunk_at "$PI" "$T1" "$E1" wn-1 -- write "$V" 0 0 "$SV" "$CL_DIR/evil2" 10000)
[ "$got" = "hello=OK status=ZL_ERR_STALE" ] || fail "the second fenced write was answered: $got"
ok "both fenced writes answered ZL_ERR_STALE"

hl_replicas_identical "$V" "$CHUNK" 16 3 || fail "the replicas diverged after the fenced writes"
# evil2_on DIR...: the replicas whose chunk files hold the second pattern.
evil2_on() {
	"$PY" - "$CL_DIR/evil2" "$@" <<'PY'
import os, sys
pat = open(sys.argv[1], 'rb').read(4096)
for d in sys.argv[2:]:
    for root, _, names in os.walk(d):
        for n in names:
            if n.endswith('.zlc') and pat in open(os.path.join(root, n), 'rb').read():
                print(d.split('/storage-')[1].split('/')[0])
PY
}
on=$(evil2_on "$CL_DIR"/storage-{1,2,3}/data/chunks/"$V")
[ -z "$on" ] || fail "the write after the primary took the fence is on node(s) $on"
ok "replicas identical in data and version; the second fenced write is on no replica"
grep -q "epoch fence taken from a backup" "$CL_DIR/storage-$PI/log" ||
	fail "the primary did not log taking the fence"

# Release the watches; the primary fences on its own too.
hold_release "$PI"
got=""
for _ in $(seq 1 50); do
	got=$(chunk_at "$PI" "$T2" "$E2" wn-2 -- read "$V" 0 0 65536 "$SV" "$CL_DIR/r1")
	[ "$got" = "hello=OK status=OK" ] && break
	sleep 0.1
done
[ "$got" = "hello=OK status=OK" ] || fail "the new attachment's read on the primary: $got"
cmp -s "$CL_DIR/r1" "$CL_DIR/good" || cmp -s "$CL_DIR/r1" "$CL_DIR/evil1" ||
	fail "the primary returns neither the acknowledged data nor the first fenced write"
cmp -s "$CL_DIR/r1" "$CL_DIR/evil1" && R1=evil1 || R1=good
ok "the new attachment reads chunk 0 from the primary: the $R1 pattern"
got=$(chunk_at "$PI" "$T1" "$E1" wn-1 -- read "$V" 0 0 4096 "$SV" "$CL_DIR/x")
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "the released primary still admits epoch $E1: $got"
# The new attachment writes the same blocks: every replica takes it (no
# version gap left behind by the fenced writes), the copies stay equal.
head -c 65536 /dev/urandom >"$CL_DIR/fresh"
got=$(chunk_at "$PI" "$T2" "$E2" wn-2 -- write "$V" 0 0 "$SV" "$CL_DIR/fresh" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "the new attachment's write: $got"
hl_replicas_identical "$V" "$CHUNK" 16 3 || fail "the replicas differ after the new attachment's write"
chunk_at "$PI" "$T2" "$E2" wn-2 -- read "$V" 0 0 65536 "$SV" "$CL_DIR/r1" >/dev/null
cmp -s "$CL_DIR/r1" "$CL_DIR/fresh" || fail "the primary does not return the new attachment's write"
ok "the primary now refuses epoch $E1 itself; epoch $E2 wrote chunk 0 on every replica alike"

# Failover: kill -9 the primary; the manager makes a backup primary.
cl_stop "storage-$PI" KILL
NP=""
for _ in $(seq 1 300); do
	NP=$(hl_etcd primary "$V" 0 2>/dev/null || true)
	[ -n "$NP" ] && [ "$NP" != "$PRIM" ] && break
	sleep 0.1
done
[ -n "$NP" ] && [ "$NP" != "$PRIM" ] || fail "no failover of slice 0 after killing $PRIM"
SV2=$(cl_rows "$V" | awk '$1 == 0 {print $2}')
got=""
for _ in $(seq 1 100); do
	got=$(chunk_at "${NP#node-}" "$T2" "$E2" wn-2 -- read "$V" 0 0 65536 "$SV2" "$CL_DIR/r2")
	[ "$got" = "hello=OK status=OK" ] && break
	sleep 0.1
done
[ "$got" = "hello=OK status=OK" ] || fail "the new attachment's read on the new primary $NP: $got"
cmp -s "$CL_DIR/r1" "$CL_DIR/r2" || fail "the read went backwards after the failover to $NP"
ok "after kill -9 of $PRIM the new primary $NP returns the new attachment's write"
echo "FIGURE: fence_race: first fenced write on every replica alike ($R1 read back), second on none; the new epoch's write equal on all and read back after failover"
