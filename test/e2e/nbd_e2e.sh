#!/usr/bin/env bash
# E2E: `zl volume serve --nbd` driven by libnbd's tools as the independent
# client: nbdinfo sees the size, nbdcopy in and out is byte-identical, fio's
# nbd engine with verify=crc32c finds no error; once for a unix socket and a
# 3-replica volume, once for TCP and a 1-replica volume. CL_TLS=on (ctest
# nbd_tls_e2e): the same with every storage connection on TLS.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() { echo "nbd_e2e: FAIL: $*" >&2; tail -20 "$CL_DIR"/serve-*/log >&2 || true; exit 1; }
cl_e2e_begin e2e-nbd "$1" 3 || fail "cluster did not start"
if [ "${CL_TLS:-off}" = on ]; then
	# nbd_tls_e2e: every storage node serves TLS only, zl reaches them with the CA.
	for i in 1 2 3; do
		cl_wait_count "$CL_DIR/storage-$i/log" "registered node=node-$i .* tls=on" 1 5 ||
			fail "node-$i did not register with TLS on"
	done
	[ -f "${ZIPLINE_TLS_CA:-}" ] || fail "CL_TLS=on but no ZIPLINE_TLS_CA"
	echo "nbd_e2e: every storage node serves TLS"
fi

serve() { # serve NAME VOLUME SPEC
	mkdir -p "$CL_DIR/serve-$1"
	"$ZL" volume serve "$2" --nbd "$3" >>"$CL_DIR/serve-$1/log" 2>&1 &
	echo $! >"$CL_DIR/serve-$1/pid"
}

run_checks() { # run_checks URI LABEL
	local uri=$1 label=$2 ok=0
	for _ in $(seq 1 100); do nbdinfo --size "$uri" >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1; done
	[ $ok = 1 ] || fail "$label: nbdinfo could not connect to $uri"
	size=$(nbdinfo --size "$uri")
	[ "$size" = $((128 * 1024 * 1024)) ] || fail "$label: nbdinfo size $size, want 128 MiB"
	nbdinfo "$uri" | grep -q "can_flush: true" || fail "$label: export does not advertise flush"
	head -c 128M /dev/urandom >"$CL_DIR/in"
	nbdcopy "$CL_DIR/in" "$uri" || fail "$label: nbdcopy in"
	nbdcopy "$uri" "$CL_DIR/out" || fail "$label: nbdcopy out"
	cmp "$CL_DIR/in" "$CL_DIR/out" || fail "$label: nbdcopy round trip differs"
	fio --name=verify --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --bsrange=512-256k \
		--iodepth=16 --size=64M --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--output="$CL_DIR/fio.txt" || { cat "$CL_DIR/fio.txt" >&2; fail "$label: fio verify"; }
	grep -q "err= 0" "$CL_DIR/fio.txt" || { cat "$CL_DIR/fio.txt" >&2; fail "$label: fio reported errors"; }
	echo "nbd_e2e: $label OK"
}

"$ZL" volume create nbd3 --size 128M --replicas 3 || fail "create nbd3"
serve 1 nbd3 "unix:$CL_DIR/nbd3.sock"
run_checks "nbd+unix:///?socket=$CL_DIR/nbd3.sock" "unix socket, 3 replicas"

"$ZL" volume create nbd1 --size 128M --replicas 1 || fail "create nbd1"
port=$(cl_free_port)
serve 2 nbd1 "127.0.0.1:$port"
run_checks "nbd://127.0.0.1:$port" "tcp, 1 replica"
echo "nbd_e2e: PASS"
