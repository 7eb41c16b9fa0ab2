#!/bin/bash
# Stage 2 of the Zipline test VM: PID 1 in the guest, host bash chrooted into
# the overlay root by the initramfs (test/vm/init.sh). vm.sh copies this file
# into the run directory of every boot (/run/zvm in the guest), next to
# "config" (settings of this boot) and "cmd" (the command, its environment
# and directory).
#
# It finishes the guest's file systems, loads the modules, shares the host
# directories read-write, finds the virtio disks, sets up Soft-RoCE, runs the
# command with its stdout/stderr on two virtio serial ports (which the host
# writes to its own stdout/stderr), records the exit status in
# /run/zvm/status and powers the guest off.
#
# A setup step that fails writes its reason to /run/zvm/failure instead of a
# status: the host reports a harness failure (exit 125), never a result.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN=/run/zvm
IO=/run/zvm-io

note() {
	[[ ${ZVM_VERBOSE:-0} == 1 ]] || return 0
	local up
	read -r up _ </proc/uptime
	echo "zl-vm(guest) [$up s]: $*" >/dev/console
}
power_off() {
	sync
	[[ ${ZVM_VERBOSE:-0} == 1 ]] || echo 0 >/proc/sys/kernel/printk # no "Power down"
	/run/zvm-bin/busybox poweroff -f # copied by init.sh: in memory, not over 9p
	exit 1 # PID 1 exiting panics the kernel; qemu (-no-reboot) stops then
}
fail() {
	trap - EXIT
	echo "zl-vm(guest): error: $*" >/dev/console
	echo "$*" >"$RUN/failure"
	power_off
}

# A bash error that ends this script (PID 1) must still say why.
trap 'fail "stage 2 (guest.sh) stopped unexpectedly"' EXIT
# shellcheck source=/dev/null
. "$RUN/config" || fail "cannot read $RUN/config"
note "stage 2 started"
# ZL_VM_FAKE_BOOT_CRASH=N on the host (vm_selftest): the first N boots of
# this guest crash the kernel here, before the command, as an emulator
# fault while booting would (vm.sh boots again; see test/vm/README.md).
read -r attempt <"$RUN/attempt" 2>/dev/null || attempt=1
if ((attempt <= ${ZVM_FAKE_CRASH:-0})); then
	echo "zl-vm(guest): ZL_VM_FAKE_BOOT_CRASH: crashing boot $attempt on purpose" >/dev/console
	echo c >/proc/sysrq-trigger
fi

# ---- private directories, kernel modules, host name
mkdir -p "$IO" || fail "cannot create $IO"
# The guest kernel's modules, visible read-only through the host root:
# bound where kmod looks for them.
mkdir -p "/lib/modules/$ZVM_KVER" || fail "cannot create /lib/modules/$ZVM_KVER"
mount --bind "$ZVM_MODDIR" "/lib/modules/$ZVM_KVER" || fail "cannot bind $ZVM_MODDIR"
echo /sbin/modprobe >/proc/sys/kernel/modprobe
echo "zl-vm-$ZVM_NAME" >/proc/sys/kernel/hostname

# ---- modules
mods="virtio_console $ZVM_MODULES"
((ZVM_DISKS > 0)) && mods+=" virtio_blk"
[[ $ZVM_RXE == 1 ]] && mods+=" rdma_rxe ib_uverbs rdma_ucm"
note "modprobe $mods"
# shellcheck disable=SC2086 # a list of module names
modprobe -a $mods || fail "modprobe failed for: $mods"

# poll FN ARG...: FN until it succeeds, for at most 10 s. Devices and GIDs
# appear asynchronously after modprobe / rdma link add (no udev here).
poll() {
	local try
	for ((try = 0; try < 200; try++)); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}
# sysfs_find GLOB WANT: sets found to the directory name of the first
# GLOB match (.../NAME/file) whose content is WANT.
sysfs_find() {
	local f v
	for f in $1; do
		# (some sysfs files, e.g. virtio-blk's serial, end without a newline)
		read -r v <"$f" 2>/dev/null || [[ -n ${v:-} ]] || continue
		[[ $v == "$2" ]] || continue
		f=${f%/*}
		found=${f##*/}
		return 0
	done
	return 1
}
char_dev() { sysfs_find "$1" "$2" && [[ -c /dev/$found ]]; }
blk_dev() { sysfs_find "$1" "$2" && [[ -b /dev/$found ]]; }
# roce_gid GID: sets found to the index of GID on rxe0 port 1 as RoCE v2
# (each address has a RoCE v1 and a v2 entry).
roce_gid() {
	local p=/sys/class/infiniband/rxe0/ports/1 t n v
	for t in "$p"/gid_attrs/types/*; do
		read -r v <"$t" 2>/dev/null && [[ $v == "RoCE v2" ]] || continue
		n=${t##*/}
		read -r v <"$p/gids/$n" 2>/dev/null && [[ $v == "$1" ]] || continue
		found=$n
		return 0
	done
	return 1
}

# ---- the two output ports (virtserialport name=zvm.out / zvm.err)
poll char_dev '/sys/class/virtio-ports/*/name' zvm.out || fail "virtio serial port zvm.out did not appear"
out_dev=/dev/$found
poll char_dev '/sys/class/virtio-ports/*/name' zvm.err || fail "virtio serial port zvm.err did not appear"
err_dev=/dev/$found

# ---- shared host directories, read-write at their own paths
for ((i = 0; i < ${#ZVM_SHARES[@]}; i++)); do
	d=${ZVM_SHARES[i]}
	ro=''
	((${ZVM_SHARE_RO[i]:-0})) && ro=ro,
	mkdir -p "$d" || fail "cannot create mount point $d"
	mount -t 9p -o "${ro}trans=virtio,version=9p2000.L,msize=$ZVM_MSIZE,cache=mmap" "zvmshare$i" "$d" ||
		fail "cannot mount the shared directory $d (9p tag zvmshare$i)"
done

# ---- virtio disks, in --disk order (serial zvmdiskN)
disks=''
for ((i = 0; i < ZVM_DISKS; i++)); do
	poll blk_dev '/sys/block/vd*/serial' "zvmdisk$i" ||
		fail "virtio disk $i (serial zvmdisk$i) did not appear"
	dev=/dev/$found
	disks+=${disks:+ }$dev
done
export ZL_VM_DISKS=$disks

# ---- Soft-RoCE: rxe0 over the dummy netdev zvm0 holding the addresses
if [[ $ZVM_RXE == 1 ]]; then
	modprobe dummy numdummies=0 || fail "modprobe dummy failed"
	ip link add zvm0 type dummy || fail "cannot create the dummy netdev zvm0"
	for a in "${ZVM_IPS[@]}"; do
		ip addr add "$a" dev zvm0 || fail "cannot add address $a to zvm0"
	done
	ip link set zvm0 up || fail "cannot bring zvm0 up"
	rdma link add rxe0 type rxe netdev zvm0 || fail "rdma link add rxe0 (netdev zvm0) failed"
	ips='' idx=''
	for a in "${ZVM_IPS[@]}"; do
		addr=${a%/*}
		IFS=. read -r o1 o2 o3 o4 <<<"$addr"
		gid=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4")
		poll roce_gid "$gid" || fail "rxe0 has no RoCE v2 GID for $addr"
		ips+=${ips:+ }$addr
		idx+=${idx:+ }$found
	done
	export RXE_DEV=rxe0 RXE_NETDEV=zvm0
	export RXE_IPS=$ips RXE_GID_INDEXES=$idx
	export RXE_IP=${ips%% *} RXE_GID_INDEX=${idx%% *}
	note "rxe0 over zvm0: addresses '$ips', RoCE v2 GID indexes '$idx'"
fi
export ZL_VM=1 ZL_VM_NAME=$ZVM_NAME

# ---- the command
if [[ $ZVM_SHELL == 1 ]]; then
	note "interactive shell on the console"
	: >"$RUN/started" || fail "cannot write $RUN/started"
	setsid --ctty --wait bash "$RUN/cmd" </dev/ttyS0 >/dev/ttyS0 2>&1
	rc=$?
else
	mkfifo "$IO/out" "$IO/err" || fail "cannot create the output pipes"
	cat "$IO/out" >"$out_dev" &
	cat_out=$!
	cat "$IO/err" >"$err_dev" &
	cat_err=$!
	note "running the command"
	# From here on a crash is the command's, not the boot's (vm.sh boots
	# again only when this file is missing).
	: >"$RUN/started" || fail "cannot write $RUN/started"
	bash "$RUN/cmd" </dev/null >"$IO/out" 2>"$IO/err"
	rc=$?
	note "command exited with status $rc"
	# The writes to the ports are synchronous: once cat is done, the host has
	# the output. Background processes still holding the pipes get 10 s.
	for ((try = 0; try < 200; try++)); do
		kill -0 "$cat_out" 2>/dev/null || kill -0 "$cat_err" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$cat_out" 2>/dev/null || kill -0 "$cat_err" 2>/dev/null; then
		echo "zl-vm(guest): background processes of the command still hold its output; cut" >/dev/console
		kill "$cat_out" "$cat_err" 2>/dev/null
	fi
fi
echo "$rc" >"$RUN/status.new" && mv "$RUN/status.new" "$RUN/status" ||
	fail "cannot record the exit status"
trap - EXIT
for ((i = ${#ZVM_SHARES[@]} - 1; i >= 0; i--)); do
	umount "${ZVM_SHARES[i]}" 2>/dev/null
done
power_off
