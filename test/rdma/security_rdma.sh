#!/usr/bin/env bash
# Data-path security over RDMA (issue 11, docs/SECURITY.md), the part
# "security" of rdma_vm (test/rdma/rdma-vm.sh, in its Soft-RoCE guest):
#   1. mw_test (test/rdma/mw_test.c): a rogue server/client on raw verbs
#      against the transport's per-request memory windows and local-only
#      registrations;
#   2. test/e2e/outsider_e2e.sh with ZL_OUTSIDER_TRANSPORT=rdma: three
#      daemons --auth on --transport rdma on rxe0, zl over RDMA, and the
#      outsider's hand-made requests carried by the RDMA transport against
#      every daemon (all of it against node-1, the core against 2 and 3).
# Usage: test/rdma/security_rdma.sh BUILD_DIR (on the host: runs
# rdma-vm.sh BUILD_DIR security). Environment: rdma-vm.sh's.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=part.sh
. "$here/part.sh"
rdma_part_enter security "${1:-}"

# In the guest. Cluster state on the guest's tmpfs (not the 9p share):
# outsider_e2e.sh keeps it under BUILD_DIR, so BUILD_DIR is a tmpfs
# directory whose bin/ points at the real build.
echo "security_rdma: guest $(uname -r), rxe0 address $ip"
t0=$(date +%s)
"$build/bin/mw_test" "$ip"
mw=$?
t1=$(date +%s)
echo "FIGURE: mw_test took $((t1 - t0)) s of guest time (exit $mw)"
work=$(mktemp -d /tmp/zl-security-rdma.XXXXXX)
trap 'rm -rf "$work"' EXIT
ln -s "$build/bin" "$work/bin"
# Every daemon is attacked over RDMA: node-1 with every credential against
# every opcode (the host runs that against all three over TCP), nodes 2 and 3
# with the core of it (outsider_e2e.sh, ZL_OUTSIDER_FULL_NODES): every
# process start costs ~1 s under TCG.
ZL_OUTSIDER_TRANSPORT=rdma ZL_OUTSIDER_HOST=$ip ZL_OUTSIDER_NODES=${ZL_OUTSIDER_NODES:-1 2 3} \
	ZL_OUTSIDER_FULL_NODES=${ZL_OUTSIDER_FULL_NODES:-1} bash "$here/../e2e/outsider_e2e.sh" "$work"
out=$?
echo "FIGURE: outsider_e2e over RDMA took $(($(date +%s) - t1)) s of guest time (exit $out)"
if [ "$mw" != 0 ] || [ "$out" != 0 ]; then
	echo "security_rdma: FAIL (mw_test exit $mw, outsider_e2e over RDMA exit $out)" >&2
	exit 1
fi
echo "security_rdma: PASS"
