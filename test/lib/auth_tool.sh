# Sourced by e2e tests that mint attachments and tokens by hand (auth_e2e,
# fence_race_e2e), independently of lib/meta: etcd through its JSON gateway
# (test/lib/etcd_gw.py), HMAC-SHA256 by Python's hmac. Needs SRC, PY
# (/usr/bin/python3) and CL_ETCD.

# etcd_ctl put KEY VALUE: prints the create revision of KEY after the put.
# etcd_ctl del KEY.
etcd_ctl() {
	"$PY" - "$SRC/test/lib" "$CL_ETCD" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from etcd_gw import b64, call, get
etcd, cmd, key = sys.argv[2], sys.argv[3], sys.argv[4]
if cmd == 'put':
    call(etcd, '/v3/kv/put', {'key': b64(key), 'value': b64(sys.argv[5])})
    print(get(etcd, key)['create_revision'])
else:
    call(etcd, '/v3/kv/deleterange', {'key': b64(key)})
PY
}

# auth_wait_epoch NUM MIN I...: until <data-dir>/auth-epochs of every
# storage-I holds volume NUM (16 hex digits) at an epoch >= MIN: the daemon's
# attachment watch saw the change (storage_auth.c persists a risen epoch
# after applying it). 10 s each.
auth_wait_epoch() {
	local num=$1 min=$2 i ep
	shift 2
	for i in "$@"; do
		for _ in $(seq 1 100); do
			ep=$(sed -n "s/^$num //p" "$CL_DIR/storage-$i/data/auth-epochs" 2>/dev/null)
			[ -n "$ep" ] && [ "$ep" -ge "$min" ] && break
			sleep 0.1
		done
		[ -n "$ep" ] && [ "$ep" -ge "$min" ] ||
			{ echo "node-$i: epoch of $num is '$ep', not >= $min after 10 s" >&2; return 1; }
	done
}

# auth_wait_hello VOL EPOCH NODE TOKEN I...: until every storage-I answers
# a HELLO of attachment (VOL, EPOCH, NODE) with TOKEN "hello OK": its
# watches saw the volume's secret and the attachment. 10 s each.
auth_wait_hello() {
	local vol=$1 epoch=$2 node=$3 tok=$4 i out
	shift 4
	for i in "$@"; do
		for _ in $(seq 1 100); do
			out=$("$CL_BIN/e2e_outsider" 127.0.0.1 "$(cat "$CL_DIR/storage-$i/port")" --vol "$vol" \
				--epoch "$epoch" --node "$node" --token "$tok" hello 2>&1 || true)
			[ "${out%% node=*}" = "hello OK" ] && break
			sleep 0.1
		done
		[ "${out%% node=*}" = "hello OK" ] ||
			{ echo "node-$i: HELLO of $vol epoch $epoch: $out after 10 s" >&2; return 1; }
	done
}

# token SECRET_HEX MESSAGE: the hex HMAC-SHA256 (docs/SECURITY.md).
token() {
	"$PY" -c 'import hmac, hashlib, sys; print(hmac.new(bytes.fromhex(sys.argv[1]), sys.argv[2].encode(), hashlib.sha256).hexdigest())' "$1" "$2"
}
