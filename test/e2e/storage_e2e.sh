#!/usr/bin/env bash
# E2E of zipline-storage start-up and HELLO:
# 1. The HELLO reply of a TCP-only daemon says caps=tcp (read with e2e_hello,
#    which goes through the HELLO code the client and replication use), and a
#    reply checked for another node id is rejected.
# 2. --listen 0.0.0.0 without --advertise, in network namespaces made here:
#    with a veth and a default route the daemon registers the veth's address
#    (not 127.0.0.1); without a default route it refuses to start and says to
#    pass --advertise. Needs root and `ip netns`; fails (never skips) without.
# 3. The wire, seen by test/lib/wire_sniff.py (AF_PACKET on lo, root): a
#    4 KiB pattern imported into a 2-replica volume (client and replication
#    traffic) and exported back. CL_TLS=off: the pattern is on the wire (the
#    check of the sniffer itself). CL_TLS=on (ctest storage_tls_e2e, every
#    daemon and client on TLS, docs/SECURITY.md): it is not; a client
#    without the CA is refused with a message naming --tls-ca, one with
#    another CA fails certificate verification, a plaintext client is
#    refused and the daemon keeps serving TLS clients.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
BUILD=$(cd "$1" && pwd)
export CL_BIN=$BUILD/bin
CL_DIR=$(mktemp -d "$BUILD/storage_e2e.XXXXXX")
export CL_DIR
NS_A=zl-e2e-a-$$ NS_B=zl-e2e-b-$$
cleanup() {
	[ -f "$CL_DIR/sniff.pid" ] && kill "$(cat "$CL_DIR/sniff.pid")" 2>/dev/null
	cl_stop_all
	cl_stop nsetcd
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	[ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"
}
trap cleanup EXIT
fail() { echo "storage_e2e: FAIL: $*" >&2; exit 1; }
ok() { echo "storage_e2e: ok: $*"; }

# ---- 1. HELLO reply of a TCP-only daemon ----
cl_start_etcd || fail "etcd did not start"
export ZIPLINE_ETCD=$CL_ETCD
cl_start_storage 1 "" --transport tcp
cl_start_storage 2
cl_wait_nodes 2 || fail "storage daemons did not register (see $CL_DIR/storage-*/log)"
for i in 1 2; do
	port=$(cat "$CL_DIR/storage-$i/port")
	out=$("$CL_BIN/e2e_hello" 127.0.0.1 "$port" "node-$i" 2>&1) || fail "HELLO to node-$i: $out"
	[ "$out" = "node=node-$i version=1 caps=tcp" ] || fail "HELLO reply of node-$i: '$out'"
	ok "HELLO reply of node-$i (no RDMA listener): $out"
done
port=$(cat "$CL_DIR/storage-1/port")
if out=$("$CL_BIN/e2e_hello" 127.0.0.1 "$port" node-2 2>&1); then
	fail "a HELLO reply from node-1 passed the check for node-2: $out"
fi
grep -q "rejected" <<<"$out" || fail "wrong node id: unexpected message '$out'"
ok "reply of node-1 checked as node-2 is rejected: $out"

# ---- 3. what crosses the wire ----
[ "$(id -u)" = 0 ] || fail "the wire check needs root (AF_PACKET capture on lo)"
ZL=$CL_BIN/zl
p1=$(cat "$CL_DIR/storage-1/port") p2=$(cat "$CL_DIR/storage-2/port")
head -c 4096 /dev/urandom >"$CL_DIR/pattern"
for _ in $(seq 1 256); do cat "$CL_DIR/pattern"; done >"$CL_DIR/pattern.img"
rm -f "$CL_DIR/sniff.ready"
/usr/bin/python3 "$SRC/test/lib/wire_sniff.py" capture "$CL_DIR/wire" "$CL_DIR/sniff.ready" "$p1" "$p2" \
	2>"$CL_DIR/sniff.log" &
echo $! >"$CL_DIR/sniff.pid"
for _ in $(seq 1 50); do [ -f "$CL_DIR/sniff.ready" ] && break; sleep 0.1; done
[ -f "$CL_DIR/sniff.ready" ] || fail "wire_sniff did not start: $(cat "$CL_DIR/sniff.log")"
"$ZL" volume create wirevol --size 8M --replicas 2 >/dev/null || fail "volume create wirevol"
"$ZL" volume import wirevol "$CL_DIR/pattern.img" || fail "import through TLS=${CL_TLS:-off}"
"$ZL" volume export wirevol "$CL_DIR/back.img" || fail "export through TLS=${CL_TLS:-off}"
cmp -n $((1 << 20)) "$CL_DIR/pattern.img" "$CL_DIR/back.img" || fail "exported data differs from the import"
# Every frame of the export is queued on the sniffer's socket by now (loopback
# sends are synchronous); on SIGTERM wire_sniff.py reads what is queued first.
kill "$(cat "$CL_DIR/sniff.pid")"; wait "$(cat "$CL_DIR/sniff.pid")" 2>/dev/null
wire=$(/usr/bin/python3 "$SRC/test/lib/wire_sniff.py" count "$CL_DIR/pattern" "$CL_DIR/wire")
found=$(sed -n 's/.*found=\([0-9]*\).*/\1/p' <<<"$wire")
captured=$(sed -n 's/.*captured=\([0-9]*\).*/\1/p' <<<"$wire")
[ "${captured:-0}" -gt $((2 << 20)) ] || fail "captured only ${captured:-0} bytes of storage traffic: $wire"
if [ "${CL_TLS:-off}" = on ]; then
	[ "$found" = 0 ] || fail "TLS on, yet pieces of the pattern crossed the wire in the clear: $wire"
	ok "TLS: 1 MiB imported, exported, identical; none of the pattern on the wire ($wire)"
else
	[ "$found" -ge 100 ] || fail "TLS off, yet the sniffer did not see the pattern: $wire"
	ok "plaintext: the pattern is visible on the wire ($wire), so the sniffer works"
fi

if [ "${CL_TLS:-off}" = on ]; then
	grep -q '"tls":true' <<<"$(etcdctl --endpoints "$CL_ETCD" get /zipline/nodes/node-1 --print-value-only)" ||
		fail "node-1's record does not say \"tls\":true"
	ok "node record says \"tls\":true"
	# No CA: a clear refusal that says what to do, quickly (not the I/O timeout).
	out=$(env -u ZIPLINE_TLS_CA timeout 60 "$ZL" volume export wirevol "$CL_DIR/x.img" 2>&1) &&
		fail "export without a CA succeeded: $out"
	grep -q "requires TLS: pass --tls-ca FILE" <<<"$out" || fail "no-CA message: $out (zl -v: $(env -u ZIPLINE_TLS_CA timeout 60 "$ZL" --log-level debug volume export wirevol "$CL_DIR/x.img" 2>&1 | grep -i -m5 "tls\|unreach"))"
	ok "client without the CA refused: $(grep -m1 'requires TLS' <<<"$out")"
	# Another CA: certificate verification fails and says so.
	out=$(ZIPLINE_TLS_CA=$CL_DIR/tls/other-ca.crt timeout 60 "$ZL" volume export wirevol "$CL_DIR/x.img" 2>&1) &&
		fail "export with another CA succeeded: $out"
	grep -q "certificate verify failed" <<<"$out" && grep -q "is --tls-ca" <<<"$out" ||
		fail "wrong-CA message: $out"
	ok "client with another CA refused: $(grep -m1 'certificate verify failed' <<<"$out")"
	# A plaintext client: refused, logged; TLS clients still served.
	out=$(env -u ZIPLINE_TLS_CA "$CL_BIN/e2e_hello" 127.0.0.1 "$p1" node-1 2>&1) &&
		fail "plaintext HELLO to a TLS daemon succeeded: $out"
	for _ in $(seq 1 30); do grep -q "refused a plaintext connection" "$CL_DIR/storage-1/log" && break; sleep 0.1; done
	grep -q "refused a plaintext connection" "$CL_DIR/storage-1/log" ||
		fail "node-1 did not log the plaintext refusal"
	ok "plaintext client refused: $out"
	out=$("$CL_BIN/e2e_hello" 127.0.0.1 "$p1" node-1 2>&1) || fail "TLS HELLO after the plaintext one: $out"
	"$ZL" volume export wirevol "$CL_DIR/back2.img" || fail "export after the refusals"
	cmp -n $((1 << 20)) "$CL_DIR/pattern.img" "$CL_DIR/back2.img" || fail "second export differs"
	ok "node-1 keeps serving TLS clients: $out"
fi
cl_stop storage-1
cl_stop storage-2
cl_stop etcd

# ---- 2. --advertise for a wildcard listen address ----
[ "$(id -u)" = 0 ] || fail "the --advertise part needs root to create network namespaces (run as root)"
command -v ip >/dev/null || fail "the --advertise part needs iproute2 (ip netns)"
ip netns add "$NS_A" || fail "cannot create network namespace $NS_A"
ip netns add "$NS_B" || fail "cannot create network namespace $NS_B"
ina() { ip netns exec "$NS_A" "$@"; }
inb() { ip netns exec "$NS_B" "$@"; }
ina ip link set lo up && inb ip link set lo up || fail "lo up"
ina ip link add zlva type veth peer name zlvb netns "$NS_B" || fail "cannot create the veth pair"
ina ip addr add 10.213.7.1/24 dev zlva && ina ip link set zlva up || fail "veth A address"
inb ip addr add 10.213.7.2/24 dev zlvb && inb ip link set zlvb up || fail "veth B address"
ina ip route add default via 10.213.7.2 || fail "default route in $NS_A"

# Without a default route (namespace B): refuses, says --advertise, exit 2.
mkdir -p "$CL_DIR/nb"
# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
out=$(timeout 20 ip netns exec "$NS_B" "$CL_BIN/zipline-storage" --data-dir "$CL_DIR/nb" \
	--listen 0.0.0.0:7100 --node-id nb --etcd http://127.0.0.1:1 --etcd-wait 0 $(cl_write_path_flags) 2>&1); rc=$?
[ $rc -eq 2 ] || fail "no default route: exit $rc (want 2): $out"
grep -q -- "--advertise" <<<"$out" || fail "no default route: message lacks --advertise: $out"
grep -q "default route" <<<"$out" || fail "no default route: message does not say why: $out"
ok "no default route -> exit 2: $out"

# With a default route (namespace A): registers 10.213.7.1.
mkdir -p "$CL_DIR/nsetcd" "$CL_DIR/storage-adv/data"
ip netns exec "$NS_A" etcd --name zl-ns --data-dir "$CL_DIR/nsetcd/data" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster zl-ns=http://127.0.0.1:2380 --logger zap --log-level warn \
	>>"$CL_DIR/nsetcd/log" 2>&1 &
echo $! >"$CL_DIR/nsetcd/pid"
up=0
for _ in $(seq 1 100); do
	ina curl -s -m 1 -X POST -d '{}' http://127.0.0.1:2379/v3/maintenance/status >/dev/null 2>&1 && { up=1; break; }
	sleep 0.1
done
[ $up = 1 ] || fail "etcd in $NS_A did not start: $(tail -5 "$CL_DIR/nsetcd/log")"
# shellcheck disable=SC2046 # cl_write_path_flags: the flags are words
ip netns exec "$NS_A" "$CL_BIN/zipline-storage" --data-dir "$CL_DIR/storage-adv/data" \
	--listen 0.0.0.0:7100 --node-id adv --etcd http://127.0.0.1:2379 --auth "${CL_AUTH:-off}" \
	$(cl_tls_flags) $(cl_write_path_flags) >>"$CL_DIR/storage-adv/log" 2>&1 &
echo $! >"$CL_DIR/storage-adv/pid"
rec=""
for _ in $(seq 1 100); do
	rec=$(ina etcdctl --endpoints http://127.0.0.1:2379 get /zipline/nodes/adv --print-value-only 2>/dev/null)
	[ -n "$rec" ] && break
	kill -0 "$(cat "$CL_DIR/storage-adv/pid")" 2>/dev/null || break
	sleep 0.1
done
[ -n "$rec" ] || fail "daemon in $NS_A did not register: $(tail -5 "$CL_DIR/storage-adv/log")"
grep -q '"addr":"10.213.7.1"' <<<"${rec// /}" || fail "registered record does not advertise 10.213.7.1: $rec"
ok "0.0.0.0 with a default route advertises the route's interface address: $rec"
# The address works: HELLO over the veth from namespace B.
# Namespace B cannot reach that etcd: the cluster key (for the HELLO's
# token) goes through a file, as a mounted Secret would.
ina etcdctl --endpoints http://127.0.0.1:2379 get /zipline/keys/cluster --print-value-only \
	>"$CL_DIR/cluster.key" 2>/dev/null || fail "no cluster key in the etcd of $NS_A"
out=$(ZIPLINE_CLUSTER_KEY_FILE=$CL_DIR/cluster.key inb "$CL_BIN/e2e_hello" 10.213.7.1 7100 adv 2>&1) ||
	fail "HELLO over the advertised address: $out"
ok "HELLO from $NS_B to the advertised address: $out"
echo "storage_e2e: PASS"
