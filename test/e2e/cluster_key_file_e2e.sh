#!/usr/bin/env bash
# E2E of the chart's cluster key configuration (deploy/helm/zipline, docs/
# SECURITY.md): the cluster key in a file (the mounted Secret), passed to
# three zipline-storage daemons (--auth on, the default, so no --auth flag
# here) and to zipline-controller as --cluster-key-file, and to `zl` as
# $ZIPLINE_CLUSTER_KEY_FILE. Nobody falls back to <prefix>keys/cluster in
# etcd; a `zl` without the file is refused; DeleteVolume (the controller's
# cluster token) removes every chunk file; a controller given a bad key file
# refuses to start and says why.
# Usage: cluster_key_file_e2e.sh BUILD_DIR
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export SRC
source "$SRC/test/lib/cluster.sh"
T=cluster_key_file_e2e
say() { echo "$T: $*"; }
fail() {
	echo "$T: FAIL: $*" >&2
	cl_dump_logs 20 "$CL_DIR"/storage-*/log "$CL_DIR"/ctrl/log
	exit 1
}

BUILD=$(cd "$1" && pwd)
export CL_BIN=$BUILD/bin CL_DIR
CL_DIR=$(mktemp -d "$BUILD/$T.XXXXXX")
trap 'cl_stop ctrl; cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
ZL="$CL_BIN/zl"
KEY="$CL_DIR/secret/cluster-key"
mkdir -p "$CL_DIR/secret"
# What the chart puts in the Secret: sha256sum of a random string.
head -c 48 /dev/urandom | base64 | sha256sum | cut -c1-64 >"$KEY"
chmod 0400 "$KEY"

cl_start_etcd
export ZIPLINE_ETCD=$CL_ETCD
# Not CL_AUTH: the daemons run with their default, which must be --auth on.
for i in 1 2 3; do
	d="$CL_DIR/storage-$i"
	mkdir -p "$d/data"
	cl_free_port >"$d/port"
	# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
	"$CL_BIN/zipline-storage" --data-dir "$d/data" --listen "127.0.0.1:$(cat "$d/port")" \
		--node-id "node-$i" --label "zone=z$i" --etcd "$CL_ETCD" --cluster-key-file "$KEY" \
		$(cl_write_path_flags) >>"$d/log" 2>&1 &
	echo $! >"$d/pid"
done
cl_wait_nodes 3 || fail "storage daemons did not register"
CL_DOWN_OUT=600 cl_start_manager ctrl --cluster-key-file "$KEY" || fail "zipline-controller did not start"

# The default is --auth on: a request without a HELLO is refused.
for i in 1 2 3; do
	out=$("$CL_BIN/e2e_outsider" 127.0.0.1 "$(cat "$CL_DIR/storage-$i/port")" \
		--vol vol-0000000000000001 read)
	grep -q "^read ZL_ERR_AUTH" <<<"$out" || fail "storage-$i without --auth serves a request without a HELLO: $out"
done
say "3 daemons started without --auth: a read without a HELLO -> ZL_ERR_AUTH (the default is on)"

# zl with the Secret's key: the whole data path works.
export ZIPLINE_CLUSTER_KEY_FILE=$KEY
"$ZL" volume create kf --size 64M --replicas 3 >/dev/null || fail "zl volume create"
head -c 8M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import kf "$CL_DIR/in" >/dev/null || fail "zl volume import with the key file"
"$ZL" volume export kf "$CL_DIR/out" >/dev/null || fail "zl volume export with the key file"
cmp -n $((8 << 20)) "$CL_DIR/in" "$CL_DIR/out" || fail "exported data differs"
say "zl with ZIPLINE_CLUSTER_KEY_FILE: 8 MiB imported and exported, identical"

# zl without it falls back to <prefix>keys/cluster in etcd, which is not
# the daemons' key: refused, and nothing is written.
unset ZIPLINE_CLUSTER_KEY_FILE
head -c 1M /dev/zero >"$CL_DIR/zero"
if "$ZL" --io-timeout 5 volume import kf "$CL_DIR/zero" >"$CL_DIR/wrong.out" 2>&1; then
	fail "zl with the etcd key (not the daemons') wrote: $(cat "$CL_DIR/wrong.out")"
fi
grep -q "bad cluster token in HELLO" "$CL_DIR"/storage-*/log ||
	fail "no daemon logged the refused cluster token; zl said: $(tail -3 "$CL_DIR/wrong.out")"
ZIPLINE_CLUSTER_KEY_FILE=$KEY "$ZL" volume export kf "$CL_DIR/out2" >/dev/null || fail "export after the refusal"
cmp -n $((8 << 20)) "$CL_DIR/in" "$CL_DIR/out2" || fail "the refused zl changed the volume"
say "zl with the etcd key instead of the file: refused, the volume unchanged"

# DeleteVolume through the controller: its cluster token from the file.
vid=$(ZIPLINE_CLUSTER_KEY_FILE=$KEY "$ZL" volume inspect kf | sed -n 's/^id *//p')
[ -n "$vid" ] || fail "no id of volume kf"
n=$(find "$CL_DIR" -path "*/data/chunks/$vid/*" -name '*.zlc' | wc -l)
[ "$n" -gt 0 ] || fail "no chunk files of $vid before DeleteVolume"
/usr/bin/python3 - "unix://$CL_DIR/ctrl/csi.sock" "$vid" <<'PY' || fail "DeleteVolume"
import os, sys
sys.path.insert(0, os.path.join(os.environ["SRC"], "test", "lib"))
from csi_client import CsiClient
c = CsiClient(sys.argv[1])
c.wait_ready(30)
c.controller.DeleteVolume(c.pb.DeleteVolumeRequest(volume_id=sys.argv[2]), timeout=120)
PY
left=$(find "$CL_DIR" -path "*/data/chunks/$vid/*" -name '*.zlc' | wc -l)
[ "$left" = 0 ] || fail "$left chunk files of $vid left after DeleteVolume"
say "DeleteVolume (the controller's --cluster-key-file) removed $n chunk files"

# The etcd key exists only because the refused zl made it; the daemons and
# the controller never used it: its value is not the file's.
ekey=$(cl_etcd_get /zipline/keys/cluster) || fail "cannot read /zipline/keys/cluster"
if grep -q "$(cat "$KEY")" <<<"$ekey"; then fail "the file's key is in etcd"; fi
say "the file's key never reached etcd"

# A controller whose key file is malformed refuses to start, naming it.
printf 'not a key\n' >"$CL_DIR/bad-key"
set +e
timeout 30 "$CL_BIN/zipline-controller" --endpoint "unix://$CL_DIR/bad.sock" --etcd "$CL_ETCD" \
	--cluster-key-file "$CL_DIR/bad-key" --leader-id bad >"$CL_DIR/bad.out" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "zipline-controller with a bad key file: exit $rc"
grep -q "cluster-key-file $CL_DIR/bad-key" "$CL_DIR/bad.out" ||
	fail "the refusal does not name the key file: $(tail -3 "$CL_DIR/bad.out")"
say "zipline-controller --cluster-key-file with a malformed file: exit $rc, $(grep -o 'cannot use --cluster-key-file[^(]*' "$CL_DIR/bad.out" | head -1)"
say PASS
