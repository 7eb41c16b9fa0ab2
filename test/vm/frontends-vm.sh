#!/usr/bin/env bash
# frontends_vm: the block frontends of the attach process (issue 24) in ONE
# guest of the test VM (test/vm/vm.sh -M ublk_drv,nbd: the host's kernel
# has neither), one part after the other (test/vm/parts.sh), each with its
# own etcd, three zipline-storage and virtio disk:
#   ublk  ublk-guest.sh: /dev/ublkbN served by `zipline-node attach
#         --frontend ublk` (a thread per queue by default): the volume's
#         write IOPS limit held across the threads; fio verify=crc32c
#         (randwrite QD 1/32/128, mixed; user copy, writes waiting for the
#         buffer pool; the tag copy mode on one thread), write-zeroes, ext4 + fsck -n, SIGKILL of the attach
#         process under a verified load on the mounted file system and
#         `--recover`, SIGTERM deletes the device; --ublk-threads 2 (a
#         thread per queue): fio through both, SIGKILL under a verified
#         load and `--recover` on 2 threads; xfs + xfs_repair -n; then
#         CSI (csi_frontend_guest.py ublk param), the no-hang checks and the
#         plugin restart under load with ublk;
#   nbd   nbd-guest.sh: /dev/nbdN through the kernel NBD netlink interface:
#         fio verify=crc32c (randwrite QD 1/32/128, mixed), ext4, kill -9 of
#         the attach process under a verified load and `--reattach`, fsck -n,
#         SIGTERM disconnects, xfs + xfs_repair -n; then CSI (csi_frontend_guest.py nbd), the no-hang
#         checks and the plugin restart under load with nbd.
# A part that fails fails the test, named; a guest that cannot boot fails
# it too (every part DID NOT RUN).
#
# Usage: test/vm/frontends-vm.sh BUILD_DIR [PART...]   (default: ublk nbd;
# ctest frontends_vm, label vm). KEEP=1 keeps the work directory
# (BUILD/frontends.*/PART: logs of etcd, the daemons, the attach processes,
# zipline-node, every fio job). ZL_FRONTENDS_PART_LIMIT: seconds per part
# (1200); the guest's limit is their sum plus 300.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: frontends-vm.sh BUILD_DIR [PART...]}" && pwd -P)
shift
parts=("$@")
((${#parts[@]})) || parts=(ublk nbd)
limit=${ZL_FRONTENDS_PART_LIMIT:-1200}
# shellcheck source=parts.sh
. "$here/parts.sh"

if [[ ${ZL_VM:-0} == 1 ]]; then
	# In the guest: WORK is the second argument after the parts' "--".
	work=${ZL_FRONTENDS_WORK:?}
	read -r -a disks <<<"${ZL_VM_DISKS:-}"
	for p in "${parts[@]}"; do
		case $p in
		ublk) vm_part "$work/parts" ublk "$limit" env ZL_VM_DISKS="${disks[0]}" \
			bash "$here/ublk-guest.sh" "$build" "$work/ublk" ;;
		nbd) vm_part "$work/parts" nbd "$limit" env ZL_VM_DISKS="${disks[1]}" \
			bash "$here/nbd-guest.sh" "$build" "$work/nbd" ;;
		esac
	done
	vm_parts_end "$work/parts"
	exit
fi

fail() {
	echo "frontends_vm: FAIL: $*" >&2
	exit 1
}
for p in "${parts[@]}"; do
	[[ $p == ublk || $p == nbd ]] || fail "unknown part '$p' (ublk, nbd)"
done
for t in zipline-storage zl zipline-node zipline-controller; do
	[[ -x $build/bin/$t ]] || fail "$build/bin/$t is not built"
done
for t in etcd etcdctl curl fio mkfs.ext4 fsck.ext4 mkfs.xfs xfs_repair blkdiscard; do
	command -v "$t" >/dev/null || fail "$t is missing (scripts/install-deps.sh installs it)"
done
work=$(mktemp -d "$build/frontends.XXXXXX") || fail "cannot create a work directory in $build"
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "frontends_vm: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
mkdir -p "$work/ublk" "$work/nbd" && : >"$work/parts" || fail "cannot fill $work"
# The daemons' data: a disk per part (ublk's xfs wants a 320 MiB volume; nbd's
# online expansion writes past 1 GiB of journals and chunks).
truncate -s 2G "$work/ublk.img" && truncate -s 2G "$work/nbd.img" || fail "cannot create the disk images"
t0=$SECONDS
ZL_FRONTENDS_WORK=$work bash "$here/vm.sh" run -M ublk_drv,nbd --share "$build" \
	--disk "$work/ublk.img" --disk "$work/nbd.img" -m 2G \
	-t "$((limit * ${#parts[@]} + 300))" -- bash "$here/frontends-vm.sh" "$build" "${parts[@]}"
rc=$?
echo "FIGURE: frontends_vm: guest ($(IFS=+; echo "${parts[*]}")): $((SECONDS - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
if ! vm_parts_report frontends_vm "$work/parts" "$rc" "${parts[@]}"; then
	for p in "${parts[@]}"; do
		grep -q "^end $p 0 " "$work/parts" && continue
		while IFS= read -r f; do
			echo "---- $p: ${f#"$work/$p/"} (last 25 lines)" >&2
			tail -25 "$f" | sed 's/^/    | /' >&2
		done < <(find "$work/$p" -maxdepth 2 -name '*.log' | sort)
	done
	exit 1
fi
echo "frontends_vm: PASS"
