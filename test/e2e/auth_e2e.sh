#!/usr/bin/env bash
# E2E of zipline-storage --auth on (docs/SECURITY.md) with raw requests
# (e2e_chunk, one connection per request): no token, a wrong token, the
# token of another volume, a client token on a read of another volume with
# ZL_WF_ANY are refused (ZL_ERR_AUTH) and change nothing; the attachment's
# own token reads (also with ZL_WF_ANY: the read around a bad copy) and
# writes, and a huge epoch in its request headers fences nobody; after
# the attachment moves to another node (a new epoch) the old token gets
# ZL_ERR_STALE and the new one writes; the epoch is persisted in the data
# dir; a deleted attachment (ControllerUnpublish) is fenced at once, also by
# a daemon that was down at the deletion. The test plays ControllerPublish by hand (secret and attachment
# records through the etcd JSON gateway, tokens with python's hmac).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() {
	echo "auth_e2e: FAIL: $*" >&2
	cl_dump_logs 15 "$CL_DIR"/storage-*/log
	exit 1
}
ok() { echo "auth_e2e: ok: $*"; }
PY=/usr/bin/python3
export CL_AUTH=on
cl_e2e_begin e2e-auth "$1" 3 || fail "cluster did not start"
CHUNK=$((4 << 20))

"$ZL" volume create a1 --size 64M --replicas 3 >/dev/null || fail "create a1"
"$ZL" volume create a2 --size 64M --replicas 3 >/dev/null || fail "create a2"
V1=$("$ZL" volume inspect a1 | awk '$1 == "id" {print $2}')
V2=$("$ZL" volume inspect a2 | awk '$1 == "id" {print $2}')
[ -n "$V1" ] && [ -n "$V2" ] || fail "no volume ids"

source "$SRC/test/lib/auth_tool.sh"
S1=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
S2=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
etcd_ctl put "/zipline/secrets/$V1" "$S1" >/dev/null
etcd_ctl put "/zipline/secrets/$V2" "$S2" >/dev/null
E1=$(etcd_ctl put "/zipline/attachments/$V1" '{"node":"wn-1","epoch":0,"readonly":false,"time":0}')
E2=$(etcd_ctl put "/zipline/attachments/$V2" '{"node":"wn-1","epoch":0,"readonly":false,"time":0}')
T1=$(token "$S1" "$V1|wn-1|$E1")
T2=$(token "$S2" "$V2|wn-1|$E2")
auth_wait_hello "$V1" "$E1" wn-1 "$T1" 1 2 3 || fail "the daemons' watches did not deliver $V1's secret and attachment"
auth_wait_hello "$V2" "$E2" wn-1 "$T2" 1 2 3 || fail "the daemons' watches did not deliver $V2's secret and attachment"

# Chunk 0 of a1: slice 0, its primary and row version.
row=$(cl_rows "$V1" | awk '$1 == 0')
SV=$(awk '{print $2}' <<<"$row")
PRIM=$("$ZL" volume inspect a1 | awk '$1 == "0" {for (i = 4; i <= NF; i++) if ($i ~ /\*/) {sub(/\*.*/, "", $i); print $i}}')
[ -n "$PRIM" ] || fail "no primary of slice 0: $row"
PORT=$(cat "$CL_DIR/storage-${PRIM#node-}/port")
N1=${V1#vol-}
N2=${V2#vol-}
head -c 65536 /dev/urandom >"$CL_DIR/good"
head -c 65536 /dev/urandom >"$CL_DIR/evil"

# chunk_as CRED... -- ARGS: e2e_chunk with the credentials in the environment;
# prints "hello=X status=Y".
chunk_as() {
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	local out
	out=$(env "${envs[@]}" "$CL_BIN/e2e_chunk" 127.0.0.1 "$PORT" "$@" 2>"$CL_DIR/chunk.err") ||
		fail "e2e_chunk $*: $(cat "$CL_DIR/chunk.err")"
	echo "$(grep -o 'hello=[A-Z_]*' "$CL_DIR/chunk.err" | tail -1) ${out%% aux=*}"
}
client1() { echo ZL_E2E_TOKEN="$T1" ZL_E2E_EPOCH="$E1" ZL_E2E_VOL="$N1" ZL_E2E_NODE=wn-1; }

# A HELLO the daemon cannot accept is answered for good once its view of
# attachments/ has passed the HELLO's epoch (issue 20): a token, signed with
# the volume's real secret, for an epoch the daemon has seen go by with no
# attachment of a2 at it gets ZL_ERR_NOT_ATTACHED; an epoch beyond anything
# it has seen (the watch may lag) gets ZL_ERR_BUSY. Another volume's
# attachment moves the view past E2.
NX=00000000000000ee
EX=$(etcd_ctl put "/zipline/attachments/vol-$NX" '{"node":"wn-9","epoch":0,"readonly":false,"time":0}')
auth_wait_epoch "$NX" "$EX" 1 2 3 || fail "the daemons' watches did not see attachment $EX"
for i in 1 2 3; do
	P=$(cat "$CL_DIR/storage-$i/port")
	out=$("$CL_BIN/e2e_outsider" 127.0.0.1 "$P" --vol "$V2" --epoch "$EX" --node wn-1 \
		--token "$(token "$S2" "$V2|wn-1|$EX")" hello 2>&1 || true)
	[ "${out%% *}" = "hello" ] && [ "$(awk '{print $2}' <<<"$out")" = ZL_ERR_NOT_ATTACHED ] ||
		fail "node-$i: a token of epoch $EX (seen, no attachment of $V2 there): $out"
	EF=$((EX + 100000))
	out=$("$CL_BIN/e2e_outsider" 127.0.0.1 "$P" --vol "$V2" --epoch "$EF" --node wn-1 \
		--token "$(token "$S2" "$V2|wn-1|$EF")" hello 2>&1 || true)
	[ "$(awk '{print $2}' <<<"$out")" = ZL_ERR_BUSY ] ||
		fail "node-$i: a token of epoch $EF (not seen yet) was not answered BUSY: $out"
done
etcd_ctl del "/zipline/attachments/vol-$NX"
ok "a seen epoch with no attachment: ZL_ERR_NOT_ATTACHED (final); an unseen one: ZL_ERR_BUSY"

# The attachment's own token writes and reads.
got=$(chunk_as $(client1) -- write "$V1" 0 0 "$SV" "$CL_DIR/good" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "the attach token's write: $got"
got=$(chunk_as $(client1) -- read "$V1" 0 0 65536 "$SV" "$CL_DIR/back")
[ "$got" = "hello=OK status=OK" ] || fail "the attach token's read: $got"
cmp -s "$CL_DIR/good" "$CL_DIR/back" || fail "read back differs"
ok "attach token of $V1 at epoch $E1 writes and reads on $PRIM"

# Outsiders: no token, wrong token, another volume's token, admin read.
for who in "ZL_E2E_NOAUTH=1" \
	"ZL_E2E_TOKEN=$(token "$S2" "$V1|wn-1|$E1") ZL_E2E_EPOCH=$E1 ZL_E2E_VOL=$N1 ZL_E2E_NODE=wn-1" \
	"ZL_E2E_TOKEN=$T2 ZL_E2E_EPOCH=$E2 ZL_E2E_VOL=$N2 ZL_E2E_NODE=wn-1" \
	"ZL_E2E_TOKEN=$T1 ZL_E2E_EPOCH=$E1 ZL_E2E_VOL=$N1 ZL_E2E_NODE=wn-2"; do
	# shellcheck disable=SC2086
	got=$(chunk_as $who -- write "$V1" 0 0 "$SV" "$CL_DIR/evil" 10000)
	[ "${got#* }" = "status=ZL_ERR_AUTH" ] || fail "write with [$who]: $got"
	# shellcheck disable=SC2086
	got=$(chunk_as $who -- read "$V1" 0 0 65536 "$SV" "$CL_DIR/out")
	[ "${got#* }" = "status=ZL_ERR_AUTH" ] || fail "read with [$who]: $got"
done
# A client reads around a bad copy of its own volume (ZL_WF_ANY), never
# another volume's.
got=$(chunk_as $(client1) -- read "$V2" 0 0 65536 "$SV" any "$CL_DIR/out")
[ "$got" = "hello=OK status=ZL_ERR_AUTH" ] || fail "ZL_WF_ANY read of another volume: $got"
got=$(chunk_as $(client1) -- read "$V1" 0 0 65536 "$SV" any "$CL_DIR/out")
[ "$got" = "hello=OK status=OK" ] || fail "ZL_WF_ANY read of its own volume: $got"
cmp -s "$CL_DIR/good" "$CL_DIR/out" || fail "ZL_WF_ANY read of its own volume: other bytes"
got=$(chunk_as $(client1) -- read "$V1" 0 0 65536 "$SV" "$CL_DIR/back")
cmp -s "$CL_DIR/good" "$CL_DIR/back" || fail "data changed by a refused write"
ok "no token, a wrong token, another volume's token, another node, ZL_WF_ANY of another volume: ZL_ERR_AUTH, data unchanged; ZL_WF_ANY of its own: OK"

# A huge epoch in the header of a valid client fences nobody.
got=$(chunk_as $(client1) ZL_E2E_REQ_EPOCH=18446744073709551615 -- write "$V1" 0 0 "$SV" "$CL_DIR/good" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "write with a huge header epoch: $got"
got=$(chunk_as $(client1) -- write "$V1" 0 0 "$SV" "$CL_DIR/good" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "the client was fenced by a header epoch: $got"
ok "a header epoch of 2^64-1 is ignored on client connections"

# ControllerPublish to another node: a new attachment, a higher epoch.
etcd_ctl del "/zipline/attachments/$V1"
E1b=$(etcd_ctl put "/zipline/attachments/$V1" '{"node":"wn-2","epoch":0,"readonly":false,"time":0}')
T1b=$(token "$S1" "$V1|wn-2|$E1b")
auth_wait_epoch "$N1" "$E1b" 1 2 3 || fail "the daemons' watches did not see the attachment $E1b"
got=$(chunk_as $(client1) -- write "$V1" 0 0 "$SV" "$CL_DIR/evil" 10000)
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "the old attachment's token: $got"
[ "${got#* }" = "status=ZL_ERR_AUTH" ] || fail "a write after a STALE HELLO: $got"
got=$(chunk_as ZL_E2E_TOKEN="$T1b" ZL_E2E_EPOCH="$E1b" ZL_E2E_VOL="$N1" ZL_E2E_NODE=wn-2 -- \
	write "$V1" 0 0 "$SV" "$CL_DIR/good" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "the new attachment's write: $got"
got=$(chunk_as $(client1) -- read "$V1" 0 0 65536 "$SV" any "$CL_DIR/out")
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "the old attachment's ZL_WF_ANY read: $got"
ok "after the move (epoch $E1 -> $E1b) the old token gets ZL_ERR_STALE, the new one writes"

# Every replica's copy is the client's data, and the epoch is persisted.
for i in 1 2 3; do
	P=$(cat "$CL_DIR/storage-$i/port")
	out=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$P" read "$V1" 0 0 65536 "$SV" any "$CL_DIR/r$i" 2>/dev/null)
	[ "${out%% aux=*}" = "status=OK" ] || fail "cluster read of node-$i: $out"
	cmp -s "$CL_DIR/good" "$CL_DIR/r$i" || fail "node-$i holds other data"
	grep -q "^$N1 $E1b\$" "$CL_DIR/storage-$i/data/auth-epochs" ||
		fail "node-$i did not persist epoch $E1b: $(cat "$CL_DIR/storage-$i/data/auth-epochs" 2>&1)"
done
ok "every replica holds the client's data; every daemon persisted epoch $E1b"

# ControllerUnpublish (a force detach of an unreachable node too) fences at
# once, before anyone attaches again: the deletion's revision is the fence.
client1b() { echo ZL_E2E_TOKEN="$T1b" ZL_E2E_EPOCH="$E1b" ZL_E2E_VOL="$N1" ZL_E2E_NODE=wn-2; }
etcd_ctl del "/zipline/attachments/$V1"
auth_wait_epoch "$N1" $((E1b + 1)) 1 2 3 || fail "the daemons' watches did not see the deletion of attachment $E1b"
got=$(chunk_as $(client1b) -- write "$V1" 0 0 "$SV" "$CL_DIR/evil" 10000)
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "the token of a deleted attachment: $got"
for i in 1 2 3; do
	ep=$(sed -n "s/^$N1 //p" "$CL_DIR/storage-$i/data/auth-epochs")
	[ -n "$ep" ] && [ "$ep" -gt "$E1b" ] ||
		fail "node-$i did not persist the deletion's fence (> $E1b): '$ep'"
done
ok "after ControllerUnpublish the token of epoch $E1b gets ZL_ERR_STALE; the fence ($ep) is persisted"

# A daemon down while an attachment is created and deleted fences it at start.
E3=$(etcd_ctl put "/zipline/attachments/$V1" '{"node":"wn-3","epoch":0,"readonly":false,"time":0}')
T3=$(token "$S1" "$V1|wn-3|$E3")
auth_wait_epoch "$N1" "$E3" 1 || fail "node-1's watch did not see the attachment $E3"
P1=$(cat "$CL_DIR/storage-1/port")
hello3() {
	"$CL_BIN/e2e_outsider" 127.0.0.1 "$P1" --vol "$V1" --epoch "$E3" --node wn-3 \
		--token "$T3" hello 2>&1 || true
}
out=$(hello3)
[ "${out%% node=*}" = "hello OK" ] || fail "node-1 before its restart, the token of attachment $E3: $out"
cl_stop storage-1
etcd_ctl del "/zipline/attachments/$V1"
cl_start_storage 1
cl_wait_nodes 3 || fail "storage-1 did not come back"
for _ in $(seq 1 50); do
	out=$(hello3)
	[ "$out" != "${out#hello ZL_ERR_STALE}" ] && break
	sleep 0.2
done
[ "$out" != "${out#hello ZL_ERR_STALE}" ] ||
	fail "node-1, restarted after the deletion, answers the deleted attachment's token: $out"
ok "node-1, down while attachment $E3 was deleted, fences its token at start (ZL_ERR_STALE)"
echo "auth_e2e: PASS"
