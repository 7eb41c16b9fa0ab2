#!/bin/sh
# Stage 1 of the Zipline test VM: /init of the initramfs (busybox sh, PID 1).
#
# It only builds the root the guest runs in, then PID 1 itself chroots there
# and becomes stage 2 (/run/zvm/guest.sh, host bash). Because PID 1 shares
# its fs_struct with the kernel's own threads, the chroot also moves the root
# the kernel's module-request helper (/sbin/modprobe) runs in: on-demand
# module loads use the host's kmod on the cached module tree.
#
#   /           overlay: host root over 9p (tag zvmroot, read-only) below,
#               tmpfs above (writes work and vanish with the guest)
#   /run        fresh tmpfs
#   /run/zvm    the run directory of this boot over 9p (tag zvmrun,
#               cache=none): guest.sh, config, command, status
#   /tmp, /var/tmp, /dev/shm  fresh tmpfs; /dev/pts
#
# Kept generic (no per-run data) so the initramfs is built once per kernel;
# vm.sh rebuilds it when this file or the module list changes.
PATH=/bin
export PATH
/bin/busybox --install -s /bin

halt() {
	sync
	poweroff -f
	sleep 60
}
die() {
	echo "zl-vm(init): error: $*" >/dev/console
	echo "zl-vm(init): the guest command did NOT run" >/dev/console
	halt
}

mkdir -p /proc /sys /dev /lower /upper /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

while read -r m; do
	[ -n "$m" ] || continue
	insmod "/lib/zvm/$m" || die "insmod $m failed"
done </lib/zvm/modules.order

# zvm.msize=N on the kernel command line: 9p message size.
msize=262144
for w in $(cat /proc/cmdline); do
	case $w in
	zvm.msize=*) msize=${w#zvm.msize=} ;;
	esac
done
p9="trans=virtio,version=9p2000.L,msize=$msize"

mount -t 9p -o "ro,$p9,cache=loose" zvmroot /lower ||
	die "cannot mount the host root (9p tag zvmroot)"
mount -t tmpfs -o mode=0755 zvmupper /upper
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work zvmroot /root ||
	die "cannot mount the overlay root"
mount -t tmpfs -o mode=0755,nosuid,nodev zvmrun /root/run
mkdir -p /root/run/zvm
mount -t 9p -o "$p9,cache=none" zvmrun /root/run/zvm ||
	die "cannot mount the run directory (9p tag zvmrun)"
[ -r /root/run/zvm/guest.sh ] || die "the run directory has no guest.sh"

for d in proc sys dev; do
	mount --move "/$d" "/root/$d" || die "cannot move /$d into the new root"
done
# The rest of the generic file systems, here where busybox runs from memory
# (every program stage 2 starts comes over 9p: slow under emulation).
R=/root
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts || die "cannot mount /dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm $R/dev/shm || die "cannot mount /dev/shm"
ln -sfn /proc/self/fd $R/dev/fd
ln -sfn /proc/self/fd/0 $R/dev/stdin
ln -sfn /proc/self/fd/1 $R/dev/stdout
ln -sfn /proc/self/fd/2 $R/dev/stderr
# Fresh /tmp and /var/tmp: the host's stay hidden.
mount -t tmpfs -o mode=1777,nosuid,nodev tmp $R/tmp || die "cannot mount /tmp"
mount -t tmpfs -o mode=1777,nosuid,nodev tmp $R/var/tmp || die "cannot mount /var/tmp"
# busybox for stage 2's power-off (the 9p root is gone by then).
mkdir -p $R/run/zvm-bin && cp /bin/busybox $R/run/zvm-bin/busybox
mount -t configfs configfs $R/sys/kernel/config 2>/dev/null
mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null
ip link set lo up

cd /root || die "cannot enter the new root"
# If this exec fails, PID 1 ends: the kernel panics (message on the console)
# and qemu stops; the host finds no status and reports a harness failure.
exec chroot /root /bin/bash /run/zvm/guest.sh
