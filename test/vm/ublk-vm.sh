#!/bin/bash
# ublk frontend of the attach process (issue 24), in one VM guest (ublk_drv
# exists only there): etcd, three zipline-storage and a 3-replica volume
# served by `zipline-node attach --frontend ublk` as /dev/ublkbN; fio with
# verify=crc32c (randwrite QD 1/32/128, a mixed job), write-zeroes read back,
# ext4 made, mounted, written, checked; then the attach process is killed
# with SIGKILL under a verified fio load on the mounted file system, a new
# one takes the device over (--recover), fio ends without an error and the
# file system checks clean; xfs made and checked with xfs_repair -n; then
# the CSI path (zipline-controller, zipline-node, the StorageClass parameter
# frontend=ublk, the takeover by zipline-node). The steps are in
# ublk-guest.sh.
#
# Usage: ublk-vm.sh BUILD_DIR   (ctest ublk_vm, label vm). KEEP=1 keeps the
# work directory (BUILD/ublk.*: logs of etcd, the daemons, the attach
# processes and fio).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: ublk-vm.sh BUILD_DIR}" && pwd -P)
vm=$here/vm.sh
t_start=$SECONDS

fail() {
	echo "ublk_vm: FAIL: $*" >&2
	exit 1
}

for t in "$build/bin/zipline-storage" "$build/bin/zl" "$build/bin/zipline-node" \
	"$build/bin/zipline-controller"; do
	[[ -x $t ]] || fail "$t is not built"
done
for t in etcd curl fio mkfs.ext4 fsck.ext4 mkfs.xfs xfs_repair blkdiscard; do
	command -v "$t" >/dev/null || fail "$t is missing (scripts/install-deps.sh installs it)"
done
work=$(mktemp -d "$build/ublk.XXXXXX") || fail "cannot create a work directory in $build"
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "ublk_vm: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
img=$work/disk.img
truncate -s 2G "$img" || fail "cannot create $img"

bash "$vm" run -M ublk_drv --share "$build" --disk "$img" -m 2G -t "${ZL_UBLK_VM_TIMEOUT:-1200}" -- \
	bash "$here/ublk-guest.sh" "$build" "$work"
rc=$?
echo "ublk_vm: guest exited $rc after $((SECONDS - t_start)) s"
if ((rc != 0)); then
	for f in "$work"/logs/*.log; do
		[[ -f $f ]] || continue
		echo "---- ${f##*/} (last 25 lines)" >&2
		tail -25 "$f" | sed 's/^/    | /' >&2
	done
	((rc == 124)) && fail "the guest hit its time limit"
	((rc == 125)) && fail "the VM harness failed (see the banner above): nothing was tested"
	fail "the guest's checks failed (exit $rc)"
fi
echo "ublk_vm: PASS"
