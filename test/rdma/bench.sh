#!/usr/bin/env bash
# TCP vs RDMA through lib/transport in the same Soft-RoCE guest
# (build/bin/xport_lat), next to perftest (test/rdma/perftest.sh).
# Usage: test/rdma/bench.sh BUILD_DIR [iterations]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$(cd "${1:?usage: $0 BUILD_DIR [iterations]}" && pwd)/bin/xport_lat
iters=${2:-1000}
exec "$here/run-in-vm.sh" bash -c "
set -e
echo '--- tcp (loopback address of the guest: 127.0.0.1)'
'$bin' tcp 127.0.0.1 $iters
echo '--- tcp over the rxe netdev address'
'$bin' tcp \"\$RXE_IP\" $iters
echo '--- rdma (rxe0)'
'$bin' rdma \"\$RXE_IP\" $iters"
