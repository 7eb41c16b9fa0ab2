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

# token SECRET_HEX MESSAGE: the hex HMAC-SHA256 (docs/SECURITY.md).
token() {
	"$PY" -c 'import hmac, hashlib, sys; print(hmac.new(bytes.fromhex(sys.argv[1]), sys.argv[2].encode(), hashlib.sha256).hexdigest())' "$1" "$2"
}
