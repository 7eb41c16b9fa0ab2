#!/usr/bin/env bash
# E2E of a storage daemon whose etcd watches were away while etcd compacted
# the history they needed (lib/etcd/etcd_watch.c, the resync): a partition
# between the daemon and etcd (test/lib/etcd_hold_proxy.py holds, then cuts,
# its watch streams) during which
#   - volume A's attachment moves to another node (deleted, put again: a
#     new epoch), and
#   - volume B's record is deleted from etcd,
# then etcd compacts its history up to now, and the partition heals. The
# daemon's watches come back from revisions etcd no longer has. Oracle,
# independent of the daemon's own view: the answers it gives to raw requests
# (e2e_chunk) with each attachment's token:
#   - A's old token (the old epoch) is refused (ZL_ERR_STALE): without the
#     resync the lost events left the daemon admitting a fenced client for
#     good;
#   - A's new token reads what the old one wrote before the move;
#   - B is not served from a stale cache (ZL_ERR_NOT_FOUND).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/hold.sh"
fail() {
	echo "watch_compact_e2e: FAIL: $*" >&2
	cl_dump_logs 15 "$CL_DIR"/storage-*/log
	exit 1
}
ok() { echo "watch_compact_e2e: ok: $*"; }
PY=/usr/bin/python3
export CL_AUTH=on
cl_e2e_begin e2e-watch-compact "$1" 0 || fail "cluster did not start"
hold_storage 1

source "$SRC/test/lib/auth_tool.sh"
# attach NAME NODE: a secret (once: kept in $CL_DIR/secret-ID) and an
# attachment record for volume NAME's id; prints "ID EPOCH TOKEN".
attach() {
	local id ep sf
	id=$("$ZL" volume inspect "$1" | awk '$1 == "id" {print $2}')
	[ -n "$id" ] || fail "no id of volume $1"
	sf=$CL_DIR/secret-$id
	if [ ! -s "$sf" ]; then
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$sf"
		etcd_ctl put "/zipline/secrets/$id" "$(cat "$sf")" >/dev/null
	fi
	ep=$(etcd_ctl put "/zipline/attachments/$id" "{\"node\":\"$2\",\"epoch\":0,\"readonly\":false,\"time\":0}")
	echo "$id $ep $(token "$(cat "$sf")" "$id|$2|$ep")"
}
# chunk ID TOKEN EPOCH NODE -- ARGS: e2e_chunk to node-1 as a client of
# volume ID; prints "hello=X status=Y".
chunk() {
	local id=$1 tok=$2 ep=$3 wn=$4 out
	shift 5
	out=$(ZL_E2E_TOKEN="$tok" ZL_E2E_EPOCH="$ep" ZL_E2E_VOL="${id#vol-}" ZL_E2E_NODE="$wn" \
		"$CL_BIN/e2e_chunk" 127.0.0.1 "$(cat "$CL_DIR/storage-1/port")" "$@" 2>"$CL_DIR/chunk.err") ||
		fail "e2e_chunk $*: $(cat "$CL_DIR/chunk.err")"
	echo "$(grep -o 'hello=[A-Z_]*' "$CL_DIR/chunk.err" | tail -1) ${out%% aux=*}"
}
# until_got WANT CMD...: runs CMD (a chunk call) up to 50 times, 0.1 s
# apart, until it prints WANT; prints the last answer.
until_got() {
	local want=$1 got=""
	shift
	for _ in $(seq 1 50); do
		got=$("$@")
		[ "$got" = "$want" ] && break
		sleep 0.1
	done
	echo "$got"
}

"$ZL" volume create wa --size 8M --replicas 1 >/dev/null || fail "create wa"
"$ZL" volume create wb --size 8M --replicas 1 >/dev/null || fail "create wb"
read -r A EA1 TA1 <<<"$(attach wa wn-1)"
read -r B EB TB <<<"$(attach wb wn-1)"
SV=$(cl_rows "$A" | awk '$1 == 0 {print $2}')
SVB=$(cl_rows "$B" | awk '$1 == 0 {print $2}')
head -c 65536 /dev/urandom >"$CL_DIR/data"
got=$(until_got "hello=OK status=OK" chunk "$A" "$TA1" "$EA1" wn-1 -- write "$A" 0 0 "$SV" "$CL_DIR/data" 10000)
[ "$got" = "hello=OK status=OK" ] || fail "A's first write: $got"
got=$(until_got "hello=OK status=OK" chunk "$B" "$TB" "$EB" wn-1 -- read "$B" 0 0 4096 "$SVB" "$CL_DIR/x")
[ "$got" = "hello=OK status=OK" ] || fail "B's first read: $got"
ok "A written with epoch $EA1, B read: both volumes in the daemon's caches"

# The partition: the daemon's watches hold, the changes happen, etcd
# compacts them away, the streams are cut.
hold_watches 1
etcd_ctl del "/zipline/attachments/$A"
read -r _ EA2 TA2 <<<"$(attach wa wn-2)"
etcd_ctl del "/zipline/volumes/$B"
rev=$("$PY" - "$SRC/test/lib" "$CL_ETCD" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from etcd_gw import call
rev = int(call(sys.argv[2], '/v3/kv/range', {'key': 'AA=='})['header']['revision'])
call(sys.argv[2], '/v3/kv/compaction', {'revision': rev, 'physical': True})
print(rev)
PY
)
got=$(chunk "$A" "$TA1" "$EA1" wn-1 -- read "$A" 0 0 4096 "$SV" "$CL_DIR/x")
[ "$got" = "hello=OK status=OK" ] || fail "the held daemon already fences epoch $EA1 (the proxy did not hold): $got"
hold_cut 1
hold_release 1
hold_uncut 1
ok "attachment of A moved (epoch $EA1 -> $EA2) and B's record deleted while the watches were away; etcd compacted up to $rev; streams cut"

for _ in $(seq 1 100); do
	grep -q 'listed again after a compaction: prefix=/zipline/attachments/' "$CL_DIR/storage-1/log" && break
	sleep 0.1
done
grep -q 'watch start revision compacted' "$CL_DIR/storage-1/log" ||
	fail "the daemon's watches did not come back from a compacted revision (the test did not make the case)"
got=$(until_got "hello=ZL_ERR_STALE" chunk "$A" "$TA1" "$EA1" wn-1 -- read "$A" 0 0 4096 "$SV" "$CL_DIR/x")
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] ||
	fail "A's old attachment (epoch $EA1) still reads after its attachment moved while the watch was away: $got"
got=$(chunk "$A" "$TA1" "$EA1" wn-1 -- write "$A" 0 0 "$SV" "$CL_DIR/data" 10000)
[ "${got%% *}" = "hello=ZL_ERR_STALE" ] || fail "A's old attachment writes: $got"
ok "A's old epoch $EA1 is fenced"
got=$(until_got "hello=OK status=OK" chunk "$A" "$TA2" "$EA2" wn-2 -- read "$A" 0 0 65536 "$SV" "$CL_DIR/r")
[ "$got" = "hello=OK status=OK" ] || fail "A's new attachment (epoch $EA2) cannot read: $got"
cmp -s "$CL_DIR/r" "$CL_DIR/data" || fail "A's new attachment reads other data than the old one wrote"
ok "A's new epoch $EA2 reads what epoch $EA1 wrote"
got=$(until_got "hello=OK status=ZL_ERR_NOT_FOUND" chunk "$B" "$TB" "$EB" wn-1 -- read "$B" 0 0 4096 "$SVB" "$CL_DIR/x")
[ "$got" = "hello=OK status=ZL_ERR_NOT_FOUND" ] ||
	fail "B, deleted while the watch was away, is still served: $got"
ok "B, deleted while the watch was away, is no longer served"
echo "watch_compact_e2e: PASS"
