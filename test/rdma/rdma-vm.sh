#!/usr/bin/env bash
# rdma_vm: everything that needs real RDMA verbs, in ONE Soft-RoCE guest of
# the test VM (test/vm/vm.sh through run-in-vm.sh: rxe0 with 10.77.0.1-3),
# one part after the other (test/vm/parts.sh):
#   transport  the transport suite (build/bin/transport_test) with its RDMA
#              group required (ZL_TEST_XPORT_REQUIRE=rdma: no skip);
#   cluster    test/e2e/cluster_e2e.sh over RDMA: three daemons on three
#              rxe0 addresses (cluster_rdma.sh);
#   security   mw_test and outsider_e2e.sh over RDMA (security_rdma.sh,
#              docs/SECURITY.md);
#   counters   the RDMA counters of the daemons' /metrics, each under a load
#              that moves it (counters_rdma.sh, docs/OBSERVABILITY.md).
# A part that fails fails the test, named; a guest that cannot boot fails
# it too (every part DID NOT RUN).
#
# Usage: test/rdma/rdma-vm.sh BUILD_DIR [PART...]   (default: transport
# cluster security counters; ctest rdma_vm, labels vm and rdma).
# ZL_RDMA_PART_LIMIT: seconds per part (transport 600, cluster 1500,
# security 1200, counters 300 by default);
# the guest's limit is their sum plus 300. ZL_VM_MEM: guest memory (4G: the
# cluster's replicas live on the guest's tmpfs).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: rdma-vm.sh BUILD_DIR [PART...]}" && pwd -P)
shift
parts=("$@")
((${#parts[@]})) || parts=(transport cluster security counters)
declare -A limit=([transport]=600 [cluster]=1500 [security]=1200 [counters]=300)
if [[ -n ${ZL_RDMA_PART_LIMIT:-} ]]; then
	for p in "${!limit[@]}"; do limit[$p]=$ZL_RDMA_PART_LIMIT; done
fi
# shellcheck source=../vm/parts.sh
. "$here/../vm/parts.sh"

if [[ ${ZL_VM:-0} == 1 ]]; then
	work=${ZL_RDMA_WORK:?}
	for p in "${parts[@]}"; do
		case $p in
		transport) vm_part "$work/parts" transport "${limit[$p]}" \
			env ZL_TEST_XPORT_REQUIRE=rdma "$build/bin/transport_test" ;;
		cluster) vm_part "$work/parts" cluster "${limit[$p]}" bash "$here/cluster_rdma.sh" "$build" ;;
		security) vm_part "$work/parts" security "${limit[$p]}" bash "$here/security_rdma.sh" "$build" ;;
		counters) vm_part "$work/parts" counters "${limit[$p]}" bash "$here/counters_rdma.sh" "$build" ;;
		esac
	done
	vm_parts_end "$work/parts"
	exit
fi

fail() {
	echo "rdma_vm: FAIL: $*" >&2
	exit 1
}
total=300
for p in "${parts[@]}"; do
	[[ -n ${limit[$p]:-} ]] || fail "unknown part '$p' (transport, cluster, security, counters)"
	total=$((total + limit[$p]))
done
for t in transport_test zipline-storage zl e2e_io e2e_outsider mw_test; do
	[[ -x $build/bin/$t ]] || fail "$build/bin/$t is not built"
done
work=$(mktemp -d "$build/rdma.XXXXXX") || fail "cannot create a work directory in $build"
trap 'rm -rf "$work"' EXIT
: >"$work/parts" || fail "cannot write $work/parts"
t0=$SECONDS
ZL_RDMA_WORK=$work ZL_BUILD_DIR=$build ZL_VM_TIMEOUT=$total \
	"$here/run-in-vm.sh" -m "${ZL_VM_MEM:-4G}" --ip 10.77.0.1/24 --ip 10.77.0.2/24 --ip 10.77.0.3/24 -- \
	bash "$here/rdma-vm.sh" "$build" "${parts[@]}"
rc=$?
echo "FIGURE: rdma_vm: guest ($(IFS=+; echo "${parts[*]}")): $((SECONDS - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
vm_parts_report rdma_vm "$work/parts" "$rc" "${parts[@]}" || exit 1
echo "rdma_vm: PASS"
