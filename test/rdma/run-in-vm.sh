#!/usr/bin/env bash
# Runs a command inside the Soft-RoCE guest (../shared/rdma-vm/rdma-vm.sh)
# and exits with its status. Used by ctest (label "rdma") and by hand:
#
#   test/rdma/run-in-vm.sh build/bin/transport_test
#   test/rdma/run-in-vm.sh --ip 10.77.0.1/24 --ip 10.77.0.2/24 -- cmd args...
#
# Options before "--" go to rdma-vm.sh. The guest shares the source tree
# read-write (ZL_SOURCE_DIR, default: this script's repository) and sees the
# rest of the host read-only. ZL_TEST_XPORT_REQUIRE=rdma is exported so that
# the transport suite fails instead of skipping when RDMA does not work.
#
# rdma-vm itself failing (exit 125: package, boot, module or rxe setup) or the
# guest timing out (124) is a test FAILURE, reported loudly: the RDMA tests did
# not run, and nobody may read that as a pass.
#
# Environment: ZL_RDMA_VM (path of rdma-vm.sh), ZL_RDMA_VM_TIMEOUT (guest time
# limit in s, default 900), ZL_RDMA_VM_KVM=1 to let rdma-vm use /dev/kvm (off by
# default: on the project machines /dev/kvm exists but qemu aborts in
# kvm_buf_set_msrs, so TCG is forced with RDMA_VM_NO_KVM=1).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=${ZL_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
vm=${ZL_RDMA_VM:-$(cd "$src/.." && pwd)/shared/rdma-vm/rdma-vm.sh}
tmo=${ZL_RDMA_VM_TIMEOUT:-900}

banner() {
	echo "################################################################" >&2
	echo "## RDMA TESTS DID NOT RUN: $*" >&2
	echo "## This is a failure, not a skip." >&2
	echo "################################################################" >&2
}

vm_args=()
if [[ " $* " == *" -- "* ]]; then
	while [[ $# -gt 0 && $1 != -- ]]; do
		vm_args+=("$1")
		shift
	done
	shift
fi
if [[ $# -eq 0 ]]; then
	echo "usage: $0 [rdma-vm options --] command [args...]" >&2
	exit 2
fi
if [[ ! -f $vm ]]; then
	banner "rdma-vm.sh not found at $vm (set ZL_RDMA_VM)"
	exit 1
fi
if [[ ${ZL_RDMA_VM_KVM:-0} != 1 ]]; then
	export RDMA_VM_NO_KVM=1
fi
export ZL_TEST_XPORT_REQUIRE=${ZL_TEST_XPORT_REQUIRE:-rdma}

cd "$src" || exit 1
bash "$vm" -t "$tmo" "${vm_args[@]}" run -- "$@"
rc=$?
case $rc in
124)
	banner "the guest hit its time limit (${tmo}s) — rdma-vm exit 124"
	exit 1
	;;
125)
	banner "rdma-vm could not start the Soft-RoCE guest (exit 125); run 'bash $vm -v selftest' to see why"
	exit 1
	;;
esac
exit $rc
