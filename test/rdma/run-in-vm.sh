#!/usr/bin/env bash
# Runs a command inside the project's test VM (test/vm/vm.sh) with Soft-RoCE
# set up, and exits with its status. Used by ctest (label "rdma") and by hand:
#
#   test/rdma/run-in-vm.sh build/bin/transport_test
#   test/rdma/run-in-vm.sh --ip 10.77.0.1/24 --ip 10.77.0.2/24 -- cmd args...
#
# Options before "--" go to vm.sh run (e.g. -m 4G, -M nbd, --ip CIDR); rxe0
# is always set up (default address 10.77.0.1/24). The guest shares the
# source tree read-write (ZL_SOURCE_DIR, default: this script's repository)
# and the build tree ZL_BUILD_DIR when that lies outside it; the rest of the
# host is visible read-only. ZL_TEST_XPORT_REQUIRE=rdma is exported so that
# the transport suite fails instead of skipping when RDMA does not work.
#
# The harness failing (exit 125) or the guest timing out (124) is a test
# FAILURE, reported loudly by vm.sh: the RDMA tests did not run.
#
# Environment: ZL_VM_TIMEOUT (guest time limit in s, default here 900),
# ZL_VM_KVM=1 to use /dev/kvm (off by default: on the project machines
# /dev/kvm exists but qemu aborts in kvm_buf_set_msrs, so it runs under TCG),
# and the other ZL_VM_* of test/vm/vm.sh.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
src=$(cd "${ZL_SOURCE_DIR:-$here/../..}" && pwd -P) || exit 1
vm=$here/../vm/vm.sh

vm_args=()
if [[ " $* " == *" -- "* ]]; then
	while [[ $1 != -- ]]; do
		vm_args+=("$1")
		shift
	done
	shift
fi
if [[ $# -eq 0 ]]; then
	echo "usage: $0 [vm.sh options --] command [args...]" >&2
	exit 2
fi
shares=(--share "$src")
if [[ -n ${ZL_BUILD_DIR:-} ]]; then
	b=$(cd "$ZL_BUILD_DIR" && pwd -P) || exit 1
	[[ $b == "$src" || $b == "$src"/* ]] || shares+=(--share "$b")
fi
export ZL_VM_TIMEOUT=${ZL_VM_TIMEOUT:-900}
export ZL_TEST_XPORT_REQUIRE=${ZL_TEST_XPORT_REQUIRE:-rdma}

cd "$src" || exit 1
exec bash "$vm" run --rxe "${shares[@]}" "${vm_args[@]}" -- "$@"
