#!/usr/bin/env bash
# E2E: real etcd, the cluster manager (zipline-controller, started by
# cl_e2e_begin) and three zipline-storage daemons, healing on (the defaults).
# A 3-replica volume gets 256 MiB of verified random writes; one daemon is
# killed with SIGKILL while writes are in flight; every write must still be
# acknowledged and read back, and the manager must have taken the dead node
# out; the daemon restarts, registers again and heals by itself: RECOVERING,
# then IN_SYNC in every row within a bound, and its own chunks (read from it
# directly) hold every acknowledged write (e2e_io); `zl volume rm` leaves no
# chunk file on any daemon.
# Usage: cluster_e2e.sh BUILD_DIR
#
# Environment (all optional; unset = loopback TCP, the host test):
#   ZL_E2E_STORAGE_IPS  three addresses, space separated: daemon I listens on
#                       the I-th (test/rdma/cluster_rdma.sh: the guest's rxe0)
#   ZL_E2E_TRANSPORT    --transport of the daemons, and of zl / e2e_io (through
#                       ZIPLINE_TRANSPORT); "rdma" also checks that the data
#                       path really ran over RDMA (logs, zl status, and the
#                       daemons' RDMA connection counters in /metrics)
#   ZL_E2E_BYTES        verified random writes (default 256M)
#   ZL_E2E_VOLUME_SIZE  size of the volume in MiB, "NM" (default 512M); e2e_io
#                       reads all of it back after each of its phases
#   ZL_E2E_HEAL_TIMEOUT seconds the restarted daemon has to be in sync in
#                       every row again (default 300)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() { echo "cluster_e2e: FAIL: $*" >&2; cl_dump_logs 25 "$CL_DIR"/manager/log "$CL_DIR"/storage-*/log; exit 1; }
read -r -a ips <<<"${ZL_E2E_STORAGE_IPS:-127.0.0.1 127.0.0.1 127.0.0.1}"
[ "${#ips[@]}" -eq 3 ] || { echo "cluster_e2e: ZL_E2E_STORAGE_IPS wants 3 addresses" >&2; exit 1; }
xport=${ZL_E2E_TRANSPORT:-}
[ -z "$xport" ] || export ZIPLINE_TRANSPORT=$xport
# Extra flags of daemon I (none on the host: cl_start_storage's defaults;
# over RDMA, --metrics too).
node_flags() {
	local i=$1 port=$2
	[ -z "${ZL_E2E_STORAGE_IPS:-}" ] || printf -- '--listen %s:%s ' "${ips[$((i - 1))]}" "$port"
	[ -z "$xport" ] || printf -- '--transport %s ' "$xport"
	[ "$xport" != rdma ] || printf -- '--metrics 127.0.0.1:0 '
}
cl_e2e_begin e2e-cluster "$1" 0 || fail "cluster did not start"
for i in 1 2 3; do
	port=$(cl_free_port)
	# shellcheck disable=SC2046 # node_flags prints separate words
	cl_start_storage "$i" "$port" $(node_flags "$i" "$port")
done
cl_wait_nodes 3 || fail "cluster did not start"

vsize=${ZL_E2E_VOLUME_SIZE:-512M}
[[ $vsize =~ ^[1-9][0-9]*M$ ]] || { echo "cluster_e2e: ZL_E2E_VOLUME_SIZE is NM, not '$vsize'" >&2; exit 1; }
"$ZL" volume create e2e --size "$vsize" --replicas 3 || fail "volume create"
# Idempotent create: same name and size is the same volume; another size is refused.
"$ZL" volume create e2e --size "$vsize" --replicas 3 || fail "repeated create with the same size must succeed"
if "$ZL" volume create e2e --size "$((${vsize%M} * 2))M" --replicas 3 2>"$CL_DIR/err"; then fail "create with another size must fail"; fi
grep -qi "exists" "$CL_DIR/err" || fail "different-size create did not say 'already exists': $(cat "$CL_DIR/err")"
"$ZL" volume inspect e2e >"$CL_DIR/inspect" || fail "inspect"

pid1=$(cl_pid storage-1)
port1=$(cat "$CL_DIR/storage-1/port")
"$BUILD/bin/e2e_io" --etcd "$CL_ETCD" --volume e2e --bytes "${ZL_E2E_BYTES:-256M}" \
	--kill-cmd "kill -9 $pid1" --killed-node node-1 \
	--restart-cmd "bash -c 'source $SRC/test/lib/cluster.sh; cl_start_storage 1 $port1 $(node_flags 1 "$port1")'" \
	--wait-cmd "bash -c 'for i in \$(seq 1 100); do $ZL node ls 2>/dev/null | grep -q node-1 && exec 3<>/dev/tcp/${ips[0]}/$port1 && exit 0; sleep 0.2; done; exit 1'" \
	--heal-timeout "${ZL_E2E_HEAL_TIMEOUT:-300}" \
	|| fail "e2e_io"
grep -h 'manager: vol=' "$CL_DIR/manager/log" | grep node-1 | head -6 | sed 's/^/cluster_e2e: manager: /' || true

# The killed daemon came back and registered again.
"$ZL" node ls | grep -q node-1 || fail "node-1 not registered after restart"

if [ "$xport" = rdma ]; then
	# The data path really was RDMA: every daemon accepted RDMA connections
	# (clients and forwarding primaries), forwarding used RDMA, and zl status
	# pings every node over RDMA.
	for i in 1 2 3; do
		grep -q "connection accepted: .*transport=rdma" "$CL_DIR/storage-$i/log" ||
			fail "node-$i accepted no RDMA connection"
		grep -q "serving .*transports=tcp,rdma" "$CL_DIR/storage-$i/log" ||
			fail "node-$i does not serve tcp,rdma"
	done
	grep -qh "connected to peer .*transport=rdma" "$CL_DIR"/storage-*/log ||
		fail "no replication connection over RDMA"
	if grep -h "connected to peer .*transport=tcp" "$CL_DIR"/storage-*/log; then
		fail "replication went over TCP"
	fi
	# ... and the daemons counted them as RDMA (their /metrics, parsed by
	# prometheus_client).
	for i in 1 2 3; do
		p=$(cl_metrics_port "$CL_DIR/storage-$i/log")
		[ -n "$p" ] || fail "node-$i logged no metrics port"
		n=$(/usr/bin/python3 "$SRC/test/lib/metrics_tool.py" sum \
			zipline_transport_connections_opened_total kind=rdma -- "http://127.0.0.1:$p/metrics") ||
			fail "cannot scrape node-$i's metrics"
		echo "cluster_e2e: node-$i counted $n RDMA connections"
		[ "$n" -gt 0 ] || fail "node-$i's zipline_transport_connections_opened_total{kind=rdma} is $n"
	done
	# Zero copy: 1 MiB reads and writes over RDMA copy no payload byte in
	# user space on the client (zl bench's transport) or on any daemon
	# (their rdma_copy counters); 4 KiB writes, inline in the message,
	# are copied once each on the client (the counter counts).
	"$ZL" volume create zc --size 64M --replicas 3 >/dev/null || fail "create zc"
	copied() {
		local t=0 p n
		for i in 1 2 3; do
			p=$(cl_metrics_port "$CL_DIR/storage-$i/log")
			n=$(/usr/bin/python3 "$SRC/test/lib/metrics_tool.py" sum \
				zipline_rdma_copied_bytes_total -- "http://127.0.0.1:$p/metrics") ||
				fail "cannot scrape node-$i's metrics"
			t=$((t + n))
		done
		echo "$t"
	}
	bench_copied() { # bench_copied RW BS COUNT: the client's copied bytes
		local out
		out=$("$ZL" bench zc --rw "$1" --bs "$2" --qd 4 --count "$3" --size 32M --json) ||
			fail "zl bench $1 $2"
		sed -n 's/.*"rdma_copied_bytes":\([0-9]*\).*/\1/p' <<<"$out"
	}
	s0=$(copied)
	cw=$(bench_copied write 1M 32)
	cr=$(bench_copied read 1M 64)
	s1=$(copied)
	echo "cluster_e2e: 1 MiB over RDMA: client copied $cw bytes (32 writes) and $cr (64 reads), the daemons $((s1 - s0))"
	[ "$cw" = 0 ] && [ "$cr" = 0 ] && [ "$s1" -eq "$s0" ] ||
		fail "1 MiB reads or writes over RDMA were copied in user space (client $cw + $cr bytes, daemons $((s1 - s0)))"
	cs=$(bench_copied write 4k 100)
	echo "cluster_e2e: 100 writes of 4 KiB: client copied $cs bytes (inline)"
	[ "$cs" -ge $((100 * 4096)) ] || fail "4 KiB inline writes counted $cs copied bytes, want >= 409600"
	"$ZL" volume rm zc >/dev/null || fail "volume rm zc"
	"$ZL" status >"$CL_DIR/status" || fail "zl status: $(cat "$CL_DIR/status")"
	cat "$CL_DIR/status"
	[ "$(grep -c 'tcp,rdma .* us rdma$' "$CL_DIR/status")" -eq 3 ] ||
		fail "zl status does not show 3 nodes with tcp,rdma pinged over rdma"
fi

# zl volume rm leaves no chunk file anywhere.
n=$(find "$CL_DIR"/storage-*/data -name '*.zlc' | wc -l)
[ "$n" -gt 0 ] || fail "no chunk files were written at all"
"$ZL" volume rm e2e || fail "volume rm"
n=$(find "$CL_DIR"/storage-*/data -name '*.zlc' | wc -l)
[ "$n" -eq 0 ] || fail "$n chunk files left after volume rm"
if "$ZL" volume inspect e2e 2>/dev/null; then fail "volume still listed after rm"; fi
echo "cluster_e2e: PASS"
