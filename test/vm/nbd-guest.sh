#!/usr/bin/env bash
# nbd-guest.sh BUILD WORK: the part "nbd" of frontends_vm
# (test/vm/frontends-vm.sh runs it inside the test VM with the nbd module
# loaded; the disk is the first of ZL_VM_DISKS).
#
# etcd and three zipline-storage (TCP, --auth off: no attach token needed, data on an ext4 file system on the
# virtio disk), a 3-replica volume, then the kernel NBD frontend of
# `zipline-node attach --frontend nbd` (issue 24):
#   1. attach: READY names /dev/nbdN, its size is the volume's;
#   2. fio with verify=crc32c on the raw device: randwrite QD 1, 32 and
#      128, and mixed reads and writes of 4-128 KiB at QD 32;
#   3. mkfs.ext4, mount, files written (sha256 kept);
#   4. a verified fio write load (direct I/O) on the mounted file system,
#      kill -9 of the attach process under it: the device, the mount and
#      fio stay (fio blocks, it does not fail); `--reattach /dev/nbdN`
#      takes the device over, fio ends with no error, the files read back;
#   5. umount, fsck.ext4 -n clean; SIGTERM to the attach process: exit 0
#      and the device is disconnected (size 0); then xfs on a new device of
#      the volume: made, written, `xfs_repair -n` clean, read back;
#   6. zipline-controller and `zipline-node --frontend nbd` driven through
#      CSI (csi_frontend_guest.py nbd): Filesystem and Block modes staged on
#      /dev/nbdN, the attach process killed and taken over by zipline-node
#      under a mounted file system, stats, unstage disconnects (no
#      /sys/block/nbdN/pid, size 0, no attach process left); then issue
#      20's hang checks with nbd (csi_hang_test.py --frontend nbd: a volume
#      whose storage is stopped or killed fails NodeStage fast while another
#      stages, nothing in state D; SIGTERM with a read stuck: EIO, the
#      device disconnected); then the node plugin's container restarted
#      under fio verify=crc32c on a mounted file system
#      (csi_restart_test.py --frontend nbd: the attach process, started by
#      `zipline-node spawner` in another cgroup, keeps the device; the new
#      plugin adopts it; no fio error).
# Logs in WORK (on the host). Exit 0 when every check passed.
set -u
build=${1:?usage: nbd-guest.sh BUILD WORK}
work=${2:?}
bin=$build/bin
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
etcd_url=http://127.0.0.1:2379
data=/mnt/zl-nbd-data
mnt=/mnt/zl-nbd-fs
adir=/run/zl-nbd-attach
vol_mib=320 # mkfs.xfs wants 300 MB or more
io_timeout=10
pids=()
# shellcheck source=guest-etcd.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-etcd.sh" || exit 1
# shellcheck source=guest-blk.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-blk.sh" || exit 1

say() {
	local up
	read -r up _ </proc/uptime
	echo "nbd-guest: [${up%.*} s] $*"
}
fail() {
	echo "nbd-guest: FAIL: $*" >&2
	[[ -f $work/attach.log ]] && tail -15 "$work/attach.log" | sed 's/^/    attach: /' >&2
	dmesg | grep -i nbd | tail -15 | sed 's/^/    kernel: /' >&2
	exit 1
}
# wait_for SECS CMD...: polls CMD every 0.1 s until it succeeds; 1 after SECS.
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}

[[ ${ZL_VM:-} == 1 ]] || fail "not inside the test VM (ZL_VM is not 1)"
[[ -d /sys/module/nbd ]] || fail "the nbd module is not loaded (vm.sh -M nbd)"
disk=${ZL_VM_DISKS%% *}
[[ -b $disk ]] || fail "no virtio disk (ZL_VM_DISKS='${ZL_VM_DISKS:-}')"
for t in etcd etcdctl curl fio mkfs.ext4 fsck.ext4 mkfs.xfs xfs_repair sha256sum "$bin/zipline-storage" "$bin/zl" \
	"$bin/zipline-node"; do
	command -v "$t" >/dev/null || fail "$t is missing (install it / build the tree)"
done
ip link set lo up || fail "cannot bring up lo"
mkdir -p "$data" "$mnt" "$adir" || fail "cannot create the mount points"
mkfs.ext4 -q -F "$disk" && mount "$disk" "$data" || fail "cannot put ext4 on $disk"

vm_guest_etcd_start "$data/etcd" "$work/etcd.log" "$etcd_url"
pids+=("$etcd_pid")
since=$(date +%s)
for i in 1 2 3; do
	mkdir -p "$data/storage-$i"
	"$bin/zipline-storage" --data-dir "$data/storage-$i" --listen "127.0.0.1:$((7200 + i))" \
		--node-id "node-$i" --label "zone=z$i" --etcd "$etcd_url" --transport tcp --auth off \
		--log-level info >"$work/storage-$i.log" 2>&1 &
	pids+=($!)
done
for i in 1 2 3; do
	# Minutes, not seconds, on a busy 2-core host under TCG.
	vm_guest_wait_node "$etcd_url" "node-$i" "${pids[i]}" "$since" 300 "$work/storage-$i.log"
done
say "etcd and zipline-storage node-1..3 up"
export ZIPLINE_ETCD=$etcd_url
"$bin/zl" volume create nbdvol --size "${vol_mib}M" --replicas 3 >/dev/null ||
	fail "zl volume create failed"
vid=$("$bin/zl" volume inspect nbdvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[[ -n $vid ]] || fail "zl volume inspect nbdvol names no volume id"

# attach [--reattach DEV]: starts the attach process, waits for its line on
# the ready fd; sets apid and dev.
attach() {
	rm -f "$adir/ready"
	"$bin/zipline-node" attach --frontend nbd --volume-id "$vid" --dir "$adir" \
		--etcd "$etcd_url" --transport tcp --io-timeout "$io_timeout" --ready-fd 3 \
		--log-level info "$@" 3>"$adir/ready" >>"$work/attach.log" 2>&1 &
	apid=$!
	ready_line() { grep -q . "$adir/ready" 2>/dev/null || ! kill -0 "$apid" 2>/dev/null; }
	wait_for 60 ready_line || fail "the attach process did not report in 60 s"
	line=$(head -1 "$adir/ready")
	[[ $line == READY* ]] || fail "attach $*: '$line'"
	dev=$(sed -n 's/.* dev=\(\/dev\/nbd[0-9]*\).*/\1/p' <<<"$line")
	[[ -b $dev ]] || fail "READY names no nbd device: '$line'"
	say "attach process $apid: $line"
}

# ---- 1. attach
attach
size=$(blockdev --getsize64 "$dev") || fail "blockdev --getsize64 $dev failed"
want=$((vol_mib << 20))
((size == want)) || fail "$dev has $size bytes, the volume $want"
grep -qx "$vid" "/sys/block/${dev#/dev/}/backend" || fail "$dev does not name $vid as its backend"
# Writeback through our own device must never wait on paged-out memory.
grep -q '^VmLck:[[:space:]]*[1-9]' "/proc/$apid/status" ||
	fail "the attach process has no locked memory: $(grep VmLck "/proc/$apid/status")"

# ---- 2. fio on the raw device, verified
vm_guest_fio qd1 "$dev" "$work" --rw=randwrite --bs=4k --iodepth=1 --size=1M
vm_guest_fio qd32 "$dev" "$work" --rw=randwrite --bs=16k --iodepth=32 --size=8M
vm_guest_fio qd128 "$dev" "$work" --rw=randwrite --bs=4k --iodepth=128 --size=64M --io_size=8M \
	--offset=64M
vm_guest_fio mixed "$dev" "$work" --rw=randrw --rwmixread=40 --bsrange=4k-128k --iodepth=32 \
	--size=64M --io_size=24M --offset=128M

# ---- 3. ext4, files
mkfs.ext4 -q -F "$dev" || fail "mkfs.ext4 $dev failed"
mount "$dev" "$mnt" || fail "mount $dev failed"
for f in 1 2 3; do
	head -c $((f * 1024 * 1024 + 12345)) /dev/urandom >"$mnt/file$f" || fail "cannot write $mnt/file$f"
done
sync
(cd "$mnt" && sha256sum file1 file2 file3) >/tmp/files.sha || fail "sha256sum failed"
say "ext4 on $dev mounted on $mnt, 3 files written"

# ---- 4. kill -9 of the attach process under a verified write load
writes() { awk '{print $5}' "/sys/block/${dev#/dev/}/stat"; }
w0=$(writes)
fio --name=fsload --directory="$mnt" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
	--iodepth=8 --size=4M --verify=crc32c --verify_fatal=1 --do_verify=1 \
	--output="$work/fio-fsload.txt" &
fio_pid=$!
busy() { (($(writes) > w0 + 200)) || ! kill -0 "$fio_pid" 2>/dev/null; }
wait_for 120 busy || fail "the fs load did not get going in 120 s"
kill -0 "$fio_pid" 2>/dev/null || fail "the fs load ended before the kill"
kill -9 "$apid"
wait "$apid" 2>/dev/null
t_kill=$SECONDS
say "attach process killed (-9) after $(($(writes) - w0)) writes of the load"
grep -q " $mnt " /proc/mounts || fail "$mnt is no longer mounted after the kill"
[[ -b $dev ]] || fail "$dev is gone after the kill"
kill -0 "$fio_pid" 2>/dev/null || fail "fio ended while no server ran: $(tail -5 "$work/fio-fsload.txt")"
attach --reattach "$dev"
wait "$fio_pid"
rc=$?
((rc == 0)) || fail "fio on the mounted file system exited $rc across the reattach: $(grep -iE 'err|verify' "$work/fio-fsload.txt" | head -5)"
grep -q 'err= 0' "$work/fio-fsload.txt" || fail "fio fsload reported an error"
say "FIGURE: fio fsload finished, no error, $((SECONDS - t_kill)) s after the kill"
(cd "$mnt" && sha256sum -c --quiet /tmp/files.sha) || fail "files changed across the reattach"

# ---- 5. umount, fsck, detach
umount "$mnt" || fail "umount $mnt failed"
fsck.ext4 -n -f "$dev" >"$work/fsck.txt" 2>&1 || fail "fsck.ext4 -n: $(tail -5 "$work/fsck.txt")"
say "umount, fsck.ext4 -n clean"
kill -TERM "$apid"
wait "$apid"
rc=$?
((rc == 0)) || fail "the attach process exited $rc on SIGTERM"
disconnected() { [[ $(cat "/sys/block/${dev#/dev/}/size") == 0 ]]; }
wait_for 10 disconnected || fail "$dev still has $(cat "/sys/block/${dev#/dev/}/size") sectors after the stop"
say "SIGTERM: the attach process exited 0, $dev disconnected"

# ---- 5b. xfs on a new device of the volume (its ext4 overwritten)
attach
vm_guest_xfs "$dev" "$mnt" "$work"
kill -TERM "$apid"
wait "$apid" || fail "the attach process of the xfs check exited $? on SIGTERM"
wait_for 10 disconnected || fail "$dev still has $(cat "/sys/block/${dev#/dev/}/size") sectors after the stop"

# ---- 6. the same through CSI: zipline-node --frontend nbd
ZL_BUILD_DIR=$build /usr/bin/python3 "$here/csi_frontend_guest.py" "$bin" "$work" "$etcd_url" nbd \
	"$data" ||
	fail "the CSI checks failed (node.log, controller.log in $work)"
for p in "${pids[@]}"; do kill -TERM "$p"; done
wait
grep -il 'corrupt' "$work"/storage-*.log && fail "a storage daemon logged corruption"
say "PASS"
exit 0
