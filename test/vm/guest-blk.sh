# Sourced by the guest scripts of frontends_vm (ublk-guest.sh,
# nbd-guest.sh): the checks every block frontend passes the same way. Each
# calls the caller's `say` and `fail`.
#
# vm_guest_fio NAME DEV LOGDIR FIO_ARG...: one fio job on the raw device DEV
# with direct I/O and verify=crc32c (every block written is read back and
# checked, the first bad one fatal), its output in LOGDIR/fio-NAME.log;
# fails on a non-zero exit or an error in the summary.
vm_guest_fio() {
	local name=$1 dev=$2 logs=$3 rc
	shift 3
	fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 --verify=crc32c \
		--verify_fatal=1 --do_verify=1 --output="$logs/fio-$name.log" "$@"
	rc=$?
	((rc == 0)) || fail "fio $name exited $rc: $(grep -m3 -i 'err\|bad' "$logs/fio-$name.log")"
	grep -q 'err= 0' "$logs/fio-$name.log" || fail "fio $name reported an error"
	say "fio $name ($*): $(grep -m1 -o 'IOPS=[^,]*' "$logs/fio-$name.log") verified"
}

# vm_guest_xfs DEV MNT LOGDIR: xfs on DEV (300 MiB at least): mkfs.xfs,
# mount on MNT, 16 MiB of random data written and synced, umount,
# `xfs_repair -n` clean, mounted again and the file read back the same,
# umount.
vm_guest_xfs() {
	local dev=$1 mnt=$2 logs=$3 sum
	mkfs.xfs -q -f "$dev" >"$logs/mkfs-xfs.log" 2>&1 ||
		fail "mkfs.xfs $dev failed: $(cat "$logs/mkfs-xfs.log")"
	mount "$dev" "$mnt" || fail "mount $dev (xfs) failed"
	head -c 16M /dev/urandom >"$mnt/file" || fail "cannot write to $mnt/file (xfs)"
	sync -f "$mnt/file" || fail "sync failed (xfs)"
	sum=$(md5sum <"$mnt/file")
	umount "$mnt" || fail "umount $mnt (xfs) failed"
	xfs_repair -n "$dev" >"$logs/xfs_repair.log" 2>&1 ||
		fail "xfs_repair -n after umount: $(tail -5 "$logs/xfs_repair.log")"
	mount "$dev" "$mnt" || fail "mount $dev (xfs, again) failed"
	[[ $(md5sum <"$mnt/file") == "$sum" ]] || fail "$mnt/file (xfs) reads back different after a remount"
	umount "$mnt" || fail "umount $mnt (xfs, again) failed"
	say "xfs on $dev: made, mounted, 16 MiB written, unmounted, xfs_repair -n clean, read back"
}
