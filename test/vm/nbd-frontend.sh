#!/usr/bin/env bash
# nbd_frontend: the kernel NBD frontend of the attach process (issue 24).
#
# One guest of the test VM (test/vm/vm.sh -M nbd, a 2 GiB virtio disk for
# the daemons' data) runs test/vm/nbd-guest.sh: etcd, three
# zipline-storage, a 3-replica volume attached as /dev/nbdN by
# `zipline-node attach --frontend nbd`, fio with verify=crc32c on the raw
# device (QD 1 and 32), ext4 made, mounted and written, kill -9 of the
# attach process under a verified fio load on the mounted file system and
# `--reattach /dev/nbdN` (fio ends with no error, the mount stays), then
# umount, fsck.ext4 -n and a clean SIGTERM (the device disconnected).
#
# Usage: test/vm/nbd-frontend.sh BUILD_DIR
# Environment: KEEP=1 keeps the work directory (logs of etcd, the daemons,
# the attach processes, fio). A VM that cannot boot fails the test.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: nbd-frontend.sh BUILD_DIR}" && pwd -P)
fail() {
	echo "nbd_frontend: FAIL: $*" >&2
	exit 1
}
work=$(mktemp -d "$build/nbd-frontend.XXXXXX") || fail "cannot create a work directory in $build"
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "nbd_frontend: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
truncate -s 2G "$work/disk.img" || fail "cannot create $work/disk.img"
t0=$SECONDS
bash "$here/vm.sh" run -M nbd --share "$build" --disk "$work/disk.img" -t "${ZL_NBD_VM_TIMEOUT:-1200}" -- \
	bash "$here/nbd-guest.sh" "$build" "$work"
rc=$?
echo "FIGURE: guest: $((SECONDS - t0)) s"
((rc == 0)) || fail "the guest exited $rc (124: time limit, 125: the VM did not run the test)"
echo "nbd_frontend: PASS"
