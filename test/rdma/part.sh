# shellcheck shell=bash
# test/rdma/part.sh - the start every part script of rdma_vm shares
# (cluster_rdma.sh, security_rdma.sh, counters_rdma.sh), sourced after the
# script set `here` (its directory).
#
# rdma_part_enter PART BUILD_DIR: sets build (BUILD_DIR, absolute). On the
# host it runs the part in rdma_vm's Soft-RoCE guest instead (exec
# rdma-vm.sh BUILD_DIR PART); in the guest it sets ip (RXE_IP, rxe0's first
# address) and lifts the locked-memory limit (verbs register memory).
rdma_part_enter() {
	local part=$1
	build=$(cd "${2:?usage: $0 BUILD_DIR}" && pwd) || exit 2
	if [[ ${ZL_VM:-0} != 1 ]]; then
		exec bash "$here/rdma-vm.sh" "$build" "$part"
	fi
	ip=${RXE_IP:?not in the test VM (test/vm/vm.sh --rxe)}
	ulimit -l unlimited
}
