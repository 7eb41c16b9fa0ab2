#!/bin/bash
# The part "ublk" of frontends_vm (test/vm/frontends-vm.sh runs it inside
# test/vm/vm.sh with ublk_drv loaded; the disk is the first of ZL_VM_DISKS).
# Usage: ublk-guest.sh BUILD WORK
#
# 1. the disk gets ext4 for etcd and three zipline-storage (node-1..3,
#    127.0.0.1:7101..7103, --transport tcp, --auth off: the attach process
#    runs without zipline-node, so without an attach token);
#    `zl volume create` makes a 3-replica volume;
# 1b. the volume's QoS limits hold for the attach process, not per queue
#    thread: with a write limit of QOS_IOPS set before the attach, the
#    default attach (a thread per queue) serves 4 KiB random writes of two
#    fio jobs at QD 32, one pinned to each of CPUs 0 and 1 (both queues,
#    so both threads, take requests: ctl status ublk_reqs) at QOS_IOPS
#    +-10 % in all (per-thread buckets gave twice that);
# 2. `zipline-node attach --frontend ublk` serves it; its READY line names
#    /dev/ublkbN and its hardware queues, one per CPU of the guest (2..4),
#    which /sys/block/ublkbN/mq lists, each with a thread (the default);
#    user copy (the guest's 7.3 has UBLK_F_USER_COPY) with 128 tags per
#    queue (READY line, nr_tags);
# 3. fio verify=crc32c on the raw device: randwrite QD 1, 32 (two jobs, one
#    pinned to each of CPUs 0 and 1: the ctl status of the attach process
#    must show both queues 0 and 1 taking requests), 128 and a mixed randrw
#    job (4-128 KiB); two jobs of 16 KiB writes at QD 128 (one per queue):
#    more requests than the pool's 128 buffers, the ctl status's
#    ublk_buf_waits grows, verified; 64 reads of 1 MiB take 64 requests (not
#    split); copies of 64 KiB or less are system calls (ublk_sync_copies
#    grows by the 4 KiB job's requests), of 1 MiB io_uring operations;
#    BLKZEROOUT (write-zeroes) over written data reads back as zeros;
#    BLKDISCARD succeeds;
# 4. mkfs.ext4, mount, a file written and its checksum, umount, fsck -n
#    clean, mounted again: the same checksum;
# 5. a verified fio write load on the mounted file system; once the device
#    has taken writes of it, SIGKILL of the attach process: the device stays
#    and fio waits; `zipline-node attach --frontend ublk --recover N` takes
#    it over (every queue), fio ends with no error, umount, fsck -n clean;
# 6. SIGTERM: the attach process exits 0 and the device is gone;
#    then --ublk-queues 2 --ublk-threads 2 (explicitly): the READY line says 2 threads,
#    the queue thread (zl-ublk-t1) has PR_SET_IO_FLUSHER (PF_LOCAL_THROTTLE
#    in its /proc stat flags), a verified fio of two jobs pinned to CPUs 0
#    and 1 goes through both queues (so both threads), SIGKILL under a
#    verified load of two such jobs and `--recover` with 2 threads: fio ends
#    with no error, both queues serve; SIGTERM deletes the device;
# 7. --ublk-copy tag (the mode of kernels without user copy) and
#    --ublk-threads 1 (every queue on the attach loop): 128 tags split
#    over the queues (READY line, nr_tags), a verified fio; then xfs
#    on that fresh device of the volume: mkfs.xfs, mount, a file written,
#    umount, xfs_repair -n clean, the file read back after a remount;
# 8. the same through CSI (csi_frontend_guest.py ublk param):
#    zipline-controller and zipline-node, the StorageClass parameter
#    frontend=ublk over zipline-node --frontend fuse, Filesystem and Block
#    modes on /dev/ublkbN, the attach process killed under a mounted file
#    system and taken over by zipline-node (--recover), zipline-node
#    restarted with --frontend auto (picks ublk, adopts the attach process),
#    NodeExpandVolume refused, NodeUnstage deleting the device (/dev/ublkbN,
#    /dev/ublkcN gone, no attach process left); then issue 20's hang checks
#    with ublk (csi_hang_test.py --frontend ublk: a volume whose storage is
#    stopped or killed fails NodeStage fast while another stages, nothing in
#    state D; SIGTERM with a read stuck: EIO, the device deleted); then the
#    node plugin's container restarted under fio verify=crc32c on a mounted
#    file system (csi_restart_test.py --frontend ublk: the attach process,
#    started by `zipline-node spawner` in another cgroup, keeps the device;
#    the new plugin adopts it; no fio error).
set -u
build=${1:?usage: ublk-guest.sh BUILD WORK}
work=${2:?usage: ublk-guest.sh BUILD WORK}
bin=$build/bin
# shellcheck source=guest-etcd.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-etcd.sh" || exit 1
# shellcheck source=guest-blk.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-blk.sh" || exit 1
logs=$work/logs
data=/mnt/zl-ublk-data
mnt=/mnt/zl-ublk-fs
etcd_url=http://127.0.0.1:2379
nodes=3
vol=ublkvol
size_mb=320 # mkfs.xfs wants 300 MB or more
storage_pids=() attach_pid='' fio_pid=''
t0=$SECONDS

say() { echo "ublk-guest: [$((SECONDS - t0)) s] $*"; }
fail() {
	echo "ublk-guest: FAIL: $*" >&2
	exit 1
}
# Nothing may outlive this script: the guest ends when its output closes.
cleanup() {
	local p
	for p in $fio_pid $attach_pid "${storage_pids[@]}" ${etcd_pid:-}; do
		kill -9 "$p" 2>/dev/null
	done
}
trap cleanup EXIT

[[ ${ZL_VM:-} == 1 ]] || fail "not inside the test VM (ZL_VM is not 1)"
disk=${ZL_VM_DISKS%% *}
[[ -b $disk ]] || fail "no virtio disk (ZL_VM_DISKS='${ZL_VM_DISKS:-}')"
[[ -c /dev/ublk-control ]] || fail "/dev/ublk-control is missing (ublk_drv not loaded?)"
for t in etcd etcdctl curl fio mkfs.ext4 fsck.ext4 mkfs.xfs xfs_repair blkdiscard \
	"$bin/zipline-storage" "$bin/zl" "$bin/zipline-node" "$bin/zipline-controller"; do
	command -v "$t" >/dev/null || fail "$t is missing"
done
mkdir -p "$logs" "$data" "$mnt" || fail "cannot create $logs, $data or $mnt"
ip link set lo up || fail "cannot bring up lo"
mkfs.ext4 -q -F "$disk" || fail "mkfs.ext4 $disk failed"
mount "$disk" "$data" || fail "cannot mount $disk"

vm_guest_etcd_start "$data/etcd" "$logs/etcd.log" "$etcd_url"
since=$(date +%s)
for ((i = 1; i <= nodes; i++)); do
	mkdir -p "$data/storage-$i"
	"$bin/zipline-storage" --data-dir "$data/storage-$i" --listen "127.0.0.1:$((7100 + i))" \
		--node-id "node-$i" --label "zone=z$i" --etcd "$etcd_url" --transport tcp \
		--auth off --log-level info >>"$logs/storage-$i.log" 2>&1 &
	storage_pids[i]=$!
done
for ((i = 1; i <= nodes; i++)); do
	vm_guest_wait_node "$etcd_url" "node-$i" "${storage_pids[i]}" "$since" 300 "$logs/storage-$i.log"
done
say "etcd and zipline-storage node-1..$nodes up"
export ZIPLINE_ETCD=$etcd_url
"$bin/zl" volume create "$vol" --size "${size_mb}M" --replicas "$nodes" >"$logs/zl.log" 2>&1 ||
	fail "zl volume create failed: $(cat "$logs/zl.log")"
vid=$("$bin/zl" volume inspect "$vol" | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[[ -n $vid ]] || fail "no id for volume $vol"

# attach_start NAME [ARGS...]: starts an attach process, waits for its READY
# line (sets attach_pid, ready_line).
attach_start() {
	local name=$1 i
	shift
	# --dir holds the control socket: not on the 9p share (no sockets there).
	mkdir -p "/run/zl-ublk/$name"
	rm -f "$work/$name.ready"
	"$bin/zipline-node" attach --volume-id "$vid" --dir "/run/zl-ublk/$name" --etcd "$etcd_url" \
		--transport tcp --frontend ublk --ready-fd 3 "$@" \
		3>"$work/$name.ready" >>"$logs/$name.log" 2>&1 &
	attach_pid=$!
	for ((i = 0; i < 1200; i++)); do
		ready_line=$(head -1 "$work/$name.ready" 2>/dev/null)
		[[ -n $ready_line ]] && break
		kill -0 "$attach_pid" 2>/dev/null || break
		sleep 0.1
	done
	ready_line=$(head -1 "$work/$name.ready" 2>/dev/null)
	[[ $ready_line == READY* ]] ||
		fail "attach $name did not report READY: '${ready_line:-nothing}'"
	say "attach $name: $ready_line (pid $attach_pid)"
}

# wait_dev: $dev (from a READY line) appears, within 10 s.
wait_dev() {
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -b $dev ]] && return 0
		sleep 0.1
	done
	fail "$dev did not appear"
}

# fio_run NAME FIO_ARG...: vm_guest_fio on the device (guest-blk.sh).
fio_run() { vm_guest_fio "$1" "$dev" "$logs" "${@:2}"; }
# ublk_status NAME: the ctl status of attach process NAME.
ublk_status() {
	/usr/bin/python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"status\n")
print(s.recv(4096).decode())' "/run/zl-ublk/$1/ctl.sock"
}
# ublk_reqs NAME: the requests each queue of attach process NAME took
# ("N,N,..." from its ctl status).
ublk_reqs() {
	ublk_status "$1" | sed -n 's/.* ublk_reqs=\([0-9,]*\).*/\1/p'
}
# ublk_waits NAME: the requests that found the buffer pool empty.
ublk_waits() {
	ublk_status "$1" | sed -n 's/.* ublk_buf_waits=\([0-9]*\).*/\1/p'
}
# ublk_sync NAME: the user copies made with pread/pwrite (64 KiB or less).
ublk_sync() {
	ublk_status "$1" | sed -n 's/.* ublk_sync_copies=\([0-9]*\).*/\1/p'
}
# reqs_sum "N,N,...": their sum.
reqs_sum() {
	local n s=0
	IFS=, read -r -a n <<<"$1"
	for x in "${n[@]}"; do s=$((s + x)); done
	echo "$s"
}
# both_queues R0 R1 MIN WHAT: queues 0 and 1 each took MIN requests or
# more between the ublk_reqs R0 and R1 (else fails, naming WHAT).
both_queues() {
	local q a b
	IFS=, read -r -a a <<<"$1"
	IFS=, read -r -a b <<<"$2"
	for q in 0 1; do
		((b[q] - a[q] >= $3)) || fail "$4: queue $q took $((b[q] - a[q])) requests ('$1', then '$2')"
	done
}

# One hardware queue per CPU, at most 4 (the attach process's default),
# each with its own thread (the default too).
cpus=$(nproc)
queues=$((cpus < 4 ? cpus : 4))
((queues >= 2)) || fail "the guest has $cpus CPU: the queues cannot be tested (vm.sh gives 2)"

# ---- 1b. the volume's write IOPS limit across the queue threads
qos_iops=100
"$bin/zl" volume set "$vol" --write-iops "$qos_iops" >>"$logs/zl.log" 2>&1 ||
	fail "zl volume set --write-iops $qos_iops failed: $(tail -3 "$logs/zl.log")"
attach_start attach_qos
[[ $ready_line == *" queues=$queues depth=128 copy=user threads=$queues"* ]] ||
	fail "the default attach does not serve $queues queues on $queues threads: '$ready_line'"
dev=$(sed -n 's/.* dev=\(\/dev\/ublkb[0-9]*\).*/\1/p' <<<"$ready_line")
wait_dev
r0=$(ublk_reqs attach_qos)
# Not verified (a verify pass would read, which the write limit does not hold).
fio --name=qos --filename="$dev" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
	--iodepth=32 --size=64M --numjobs=2 --offset_increment=64M --cpus_allowed=0,1 \
	--cpus_allowed_policy=split --time_based --runtime=10 --group_reporting \
	--output="$logs/fio-qos.log" || fail "fio qos exited $?: $(grep -m3 -i 'err' "$logs/fio-qos.log")"
grep -q 'err= 0' "$logs/fio-qos.log" || fail "fio qos reported an error"
r1=$(ublk_reqs attach_qos)
both_queues "$r0" "$r1" 100 "QoS: the two fio jobs (a queue and a thread each)"
# "write: IOPS=99, ..." (the two jobs together); 1.2k above 999.
iops=$(sed -n 's/.*write: IOPS=\([0-9.]*k\{0,1\}\),.*/\1/p' "$logs/fio-qos.log" | head -1)
[[ $iops == *k ]] && iops=$(awk -v v="${iops%k}" 'BEGIN { printf "%d", v * 1000 }')
[[ $iops =~ ^[0-9]+$ ]] || fail "QoS: no write IOPS in fio-qos.log: $(grep -m1 'IOPS=' "$logs/fio-qos.log")"
((iops * 10 >= qos_iops * 9 && iops * 10 <= qos_iops * 11)) ||
	fail "QoS: $iops write IOPS through $queues threads, the volume's limit is $qos_iops (+-10 %)"
say "QoS: $iops write IOPS through $queues queue threads (limit $qos_iops), requests per queue $r0, then $r1"
kill -TERM "$attach_pid"
wait "$attach_pid" || fail "attach_qos exited $? on SIGTERM"
attach_pid=''
"$bin/zl" volume set "$vol" --write-iops 0 >>"$logs/zl.log" 2>&1 ||
	fail "zl volume set --write-iops 0 failed: $(tail -3 "$logs/zl.log")"

attach_start attach1
dev=$(sed -n 's/.* dev=\(\/dev\/ublkb[0-9]*\).*/\1/p' <<<"$ready_line")
ublk_id=$(sed -n 's/.* ublk_id=\([0-9]*\).*/\1/p' <<<"$ready_line")
[[ -n $dev && -n $ublk_id ]] || fail "the READY line names no ublk device: '$ready_line'"
# The guest's kernel (7.3) offers UBLK_F_USER_COPY: 128 tags per queue, the
# 128 buffers of 1 MiB a pool that requests take from.
[[ $ready_line == *" depth=128 copy=user"* ]] ||
	fail "the READY line does not say user copy with 128 tags per queue: '$ready_line'"
grep -q 'ublk device started: .* copy=user buffers=128 from the pool' "$logs/attach1.log" ||
	fail "the request buffers are not 128 from the transport's pool (attach1.log)"
wait_dev
[[ $ready_line == *" queues=$queues depth=128 copy=user threads=$queues"* ]] ||
	fail "the READY line does not name $queues queues on $queues threads: '$ready_line'"
mq=$(find "/sys/block/${dev#/dev/}/mq" -mindepth 1 -maxdepth 1 -type d | wc -l)
((mq == queues)) || fail "$dev has $mq hardware queues in /sys/block/${dev#/dev/}/mq, want $queues"
# check_tags DEV N: every hardware queue of DEV has N tags.
check_tags() {
	local f n
	for f in /sys/block/"${1#/dev/}"/mq/*/nr_tags; do
		n=$(cat "$f") || fail "cannot read $f"
		((n == $2)) || fail "$f says $n tags, want $2"
	done
}
check_tags "$dev" 128
q=/sys/block/${dev#/dev/}/queue
say "$dev has $queues hardware queues of 128 tags; max_sectors_kb=$(cat $q/max_sectors_kb)" \
	"max_hw_sectors_kb=$(cat $q/max_hw_sectors_kb) max_segments=$(cat $q/max_segments)" \
	"max_segment_size=$(cat $q/max_segment_size)"
bytes=$(blockdev --getsize64 "$dev") || fail "blockdev --getsize64 $dev failed"
((bytes == size_mb * 1024 * 1024)) || fail "$dev has $bytes bytes, want $((size_mb * 1024 * 1024))"
[[ $(blockdev --getss "$dev") == 512 && $(blockdev --getpbsz "$dev") == 4096 ]] ||
	fail "$dev: logical $(blockdev --getss "$dev"), physical $(blockdev --getpbsz "$dev"), want 512/4096"

# ---- 3. fio with verify on the raw device
s0=$(ublk_sync attach1)
fio_run qd1 --rw=randwrite --bs=4k --iodepth=1 --size=64M --io_size=2M
s1=$(ublk_sync attach1)
# 512 writes of 4 KiB and their verifying reads: copies of 64 KiB or less
# are system calls on the queue's thread.
[[ -n $s0 ]] && ((s1 - s0 >= 1024)) ||
	fail "1024 requests of 4 KiB made $((s1 - s0)) copies with pread/pwrite ('$(ublk_status attach1)')"
r0=$(ublk_reqs attach1)
# Two jobs, each on its own CPU and its own 64 MiB: the two queues.
fio_run qd32 --rw=randwrite --bs=4k --iodepth=32 --size=64M --io_size=4M --offset=64M \
	--numjobs=2 --offset_increment=64M --cpus_allowed=0,1 --cpus_allowed_policy=split
r1=$(ublk_reqs attach1)
IFS=, read -r -a q0 <<<"$r0"
IFS=, read -r -a q1 <<<"$r1"
((${#q0[@]} == queues && ${#q1[@]} == queues)) ||
	fail "the ctl status names ${#q1[@]} queues ('$r0', then '$r1'), want $queues"
# 4 MiB of 4 KiB writes and their verifying reads per job: 2048.
both_queues "$r0" "$r1" 1024 "the two fio jobs"
say "the two fio jobs went through queues 0 and 1: requests per queue $r0, then $r1"
fio_run qd128 --rw=randwrite --bs=4k --iodepth=128 --size=64M --io_size=8M --offset=192M
fio_run mixed --rw=randrw --rwmixread=40 --bsrange=4k-128k --iodepth=32 --size=64M \
	--io_size=24M --offset=128M
# More requests than buffers: two jobs (one per queue) of 128 writes in
# flight, then their verifying reads, for the 128 buffers (any request
# takes a whole one; 16 KiB ones, as 1 MiB ones 256 at a time time out
# between the replicas of the TCG guest): requests wait for one
# (ublk_buf_waits grows), none fails, none hangs.
w0=$(ublk_waits attach1)
[[ -n $w0 ]] || fail "the ctl status has no ublk_buf_waits: '$(ublk_status attach1)'"
fio_run pool --rw=randwrite --bs=16k --iodepth=128 --iodepth_batch_submit=128 --size=64M \
	--io_size=4M --numjobs=2 --offset_increment=128M --cpus_allowed=0,1 \
	--cpus_allowed_policy=split
w1=$(ublk_waits attach1)
((w1 > w0)) || fail "256 requests in flight never waited for a buffer (ublk_buf_waits $w0, then $w1)"
say "pool: $((w1 - w0)) requests waited for a buffer"
# 1 MiB reads reach the server whole: one request each (split, they would
# take twice as many; udev's probe after the writes may add a few).
r0=$(reqs_sum "$(ublk_reqs attach1)")
s0=$(ublk_sync attach1)
fio_run read1m --rw=read --bs=1M --iodepth=16 --size=64M --do_verify=0 --verify=0
r1=$(reqs_sum "$(ublk_reqs attach1)")
s1=$(ublk_sync attach1)
# Their copies go to io_uring's workers (larger than 64 KiB).
((s1 - s0 < 32)) || fail "64 reads of 1 MiB made $((s1 - s0)) copies with pread/pwrite, want none"
((r1 - r0 >= 64 && r1 - r0 < 96)) || fail "64 reads of 1 MiB took $((r1 - r0)) requests, want 64"
say "64 reads of 1 MiB took $((r1 - r0)) requests: $(grep -m1 -o 'BW=[^ ]*' "$logs/fio-read1m.log")"
# Write-zeroes over data reads back as zeros; discard is accepted.
head -c 1M /dev/urandom >"$work/rand" || fail "cannot make random data"
dd if="$work/rand" of="$dev" bs=1M count=1 seek=3 oflag=direct status=none ||
	fail "dd to $dev failed"
cmp -s "$work/rand" <(dd if="$dev" bs=1M count=1 skip=3 iflag=direct status=none) ||
	fail "the megabyte written to $dev does not read back"
blkdiscard -z -o $((3 << 20)) -l $((1 << 20)) "$dev" || fail "blkdiscard -z (write-zeroes) failed"
cmp -s <(head -c 1M /dev/zero) <(dd if="$dev" bs=1M count=1 skip=3 iflag=direct status=none) ||
	fail "after write-zeroes the megabyte does not read as zeros"
blkdiscard -o $((4 << 20)) -l $((1 << 20)) "$dev" || fail "blkdiscard (discard) failed"
say "write-zeroes read back as zeros, discard accepted"

# ---- 4. ext4
mkfs.ext4 -q -F "$dev" >"$logs/mkfs.log" 2>&1 || fail "mkfs.ext4 $dev failed: $(cat "$logs/mkfs.log")"
mount "$dev" "$mnt" || fail "mount $dev failed"
head -c 24M /dev/urandom >"$mnt/file" || fail "cannot write to $mnt/file"
sync -f "$mnt/file" || fail "sync failed"
sum=$(md5sum <"$mnt/file")
umount "$mnt" || fail "umount $mnt failed"
fsck.ext4 -n -f "$dev" >"$logs/fsck1.log" 2>&1 || fail "fsck -n after umount: $(tail -5 "$logs/fsck1.log")"
mount "$dev" "$mnt" || fail "mount $dev (again) failed"
[[ $(md5sum <"$mnt/file") == "$sum" ]] || fail "$mnt/file reads back different after a remount"
say "ext4: made, mounted, 24 MiB written, unmounted, fsck -n clean, read back"

# ---- 5. SIGKILL of the attach process under a verified load, --recover
name=$(basename "$dev")
writes() { awk '{print $7}' "/sys/block/$name/stat"; }
w0=$(writes)
fio --name=load --filename="$mnt/load" --size=48M --io_size=8M --rw=randwrite --bs=4k \
	--iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 \
	--output="$logs/fio-load.log" &
fio_pid=$!
for ((i = 0; i < 600; i++)); do
	(($(writes) - w0 >= 4096)) && break # 2 MiB of the load's writes went through
	kill -0 "$fio_pid" 2>/dev/null || fail "fio ended before the kill"
	sleep 0.1
done
((i < 600)) || fail "the load wrote too little in 60 s"
kill -0 "$fio_pid" 2>/dev/null || fail "fio ended before the kill"
kill -9 "$attach_pid"
wait "$attach_pid" 2>/dev/null
say "attach process killed (SIGKILL) under the load, $(($(writes) - w0)) sectors written"
[[ -b $dev && -e /sys/block/$name ]] || fail "$dev went away with its server"
grep -q " $mnt " /proc/mounts || fail "$mnt is no longer mounted"
kill -0 "$fio_pid" 2>/dev/null || fail "fio ended while the device had no server"
attach_start attach2 --recover "$ublk_id"
[[ $ready_line == *" dev=$dev "* ]] || fail "recovery served another device: '$ready_line'"
[[ $ready_line == *" queues=$queues depth=128 copy=user threads=$queues"* ]] ||
	fail "recovery did not take over $queues queues of 128 tags in user copy on $queues threads: '$ready_line'"
wait "$fio_pid"
rc=$?
fio_pid=''
((rc == 0)) || fail "fio under the kill exited $rc: $(grep -m3 -i 'err\|bad' "$logs/fio-load.log")"
grep -q 'err= 0' "$logs/fio-load.log" || fail "fio under the kill reported an error"
say "recovered: fio under the kill ended without an error (verified)"
[[ $(md5sum <"$mnt/file") == "$sum" ]] || fail "$mnt/file reads back different after the recovery"
umount "$mnt" || fail "umount $mnt after the recovery failed"
fsck.ext4 -n -f "$dev" >"$logs/fsck2.log" 2>&1 ||
	fail "fsck -n after the recovery: $(tail -5 "$logs/fsck2.log")"
say "after the recovery: unmounted, fsck -n clean"

# ---- 6. SIGTERM: drained, device deleted
kill -TERM "$attach_pid"
wait "$attach_pid"
rc=$?
((rc == 0)) || fail "the attach process exited $rc on SIGTERM"
[[ ! -e /sys/block/$name ]] || fail "$dev is still there after SIGTERM"
grep -q 'ublk device deleted' "$logs/attach2.log" || fail "attach2.log does not say the device was deleted"
for ((i = 1; i <= nodes; i++)); do
	grep -qi 'corrupt' "$logs/storage-$i.log" && fail "storage-$i.log reports corruption"
done
say "SIGTERM: exit 0, $dev deleted"

# ---- 6b. --ublk-threads 2: queue q served by thread q % 2, each thread
# with its own loop and volume client; kill -9 under a verified load and
# --recover with 2 threads
# flusher_threads PID: "N F": the tasks of PID named zl-ublk-t* (a queue
# thread and the threads it started, which inherit its name) and how many
# of them have PF_LOCAL_THROTTLE (0x100000 in the flags of
# /proc/PID/task/TID/stat, set by PR_SET_IO_FLUSHER, per task).
flusher_threads() {
	local t n=0 f=0
	for t in /proc/"$1"/task/*; do
		[[ $(cat "$t/comm" 2>/dev/null) == zl-ublk-t* ]] || continue
		n=$((n + 1))
		(($(awk '{print $9}' "$t/stat") & 0x100000)) && f=$((f + 1))
	done
	echo "$n $f"
}
attach_start attach_mt --ublk-queues 2 --ublk-threads 2
dev=$(sed -n 's/.* dev=\(\/dev\/ublkb[0-9]*\).*/\1/p' <<<"$ready_line")
ublk_id=$(sed -n 's/.* ublk_id=\([0-9]*\).*/\1/p' <<<"$ready_line")
[[ $ready_line == *" queues=2 depth=128 copy=user threads=2"* ]] ||
	fail "--ublk-threads 2: the READY line does not say 2 queues on 2 threads: '$ready_line'"
wait_dev
read -r nt nf <<<"$(flusher_threads "$attach_pid")"
((nt >= 1 && nf == nt)) ||
	fail "--ublk-threads 2: $nt tasks zl-ublk-t1 in /proc/$attach_pid/task, $nf of them with PR_SET_IO_FLUSHER"
r0=$(ublk_reqs attach_mt)
fio_run mt-qd32 --rw=randwrite --bs=4k --iodepth=32 --size=64M --io_size=4M --numjobs=2 \
	--offset_increment=64M --cpus_allowed=0,1 --cpus_allowed_policy=split
r1=$(ublk_reqs attach_mt)
both_queues "$r0" "$r1" 1024 "--ublk-threads 2 (queue q on thread q)"
say "--ublk-threads 2: queues 0 and 1 (threads 0 and 1) took $r1 requests"
name=$(basename "$dev")
w0=$(writes)
fio --name=mt-load --filename="$dev" --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 \
	--rw=randwrite --bs=4k --iodepth=32 --size=64M --io_size=6M --offset=128M --numjobs=2 \
	--offset_increment=64M --cpus_allowed=0,1 --cpus_allowed_policy=split \
	--output="$logs/fio-mt-load.log" &
fio_pid=$!
for ((i = 0; i < 600; i++)); do
	(($(writes) - w0 >= 4096)) && break
	kill -0 "$fio_pid" 2>/dev/null || fail "fio mt-load ended before the kill"
	sleep 0.1
done
((i < 600)) || fail "the load wrote too little in 60 s"
kill -9 "$attach_pid"
wait "$attach_pid" 2>/dev/null
say "--ublk-threads 2: attach process killed (SIGKILL) under the load"
kill -0 "$fio_pid" 2>/dev/null || fail "fio mt-load ended while the device had no server"
attach_start attach_mt2 --recover "$ublk_id" --ublk-threads 2
[[ $ready_line == *" dev=$dev "* && $ready_line == *" queues=2 depth=128 copy=user threads=2"* ]] ||
	fail "recovery with --ublk-threads 2 did not take over $dev on 2 threads: '$ready_line'"
wait "$fio_pid"
rc=$?
fio_pid=''
((rc == 0)) || fail "fio mt-load exited $rc: $(grep -m3 -i 'err\|bad' "$logs/fio-mt-load.log")"
grep -q 'err= 0' "$logs/fio-mt-load.log" || fail "fio mt-load reported an error"
IFS=, read -r -a q1 <<<"$(ublk_reqs attach_mt2)"
((q1[0] > 0 && q1[1] > 0)) ||
	fail "after the recovery with 2 threads a queue took no request: '$(ublk_status attach_mt2)'"
say "--ublk-threads 2: recovered on 2 threads, fio under the kill ended without an error (verified)"
kill -TERM "$attach_pid"
wait "$attach_pid" || fail "attach_mt2 exited $? on SIGTERM"
attach_pid=''
[[ ! -e /sys/block/$name ]] || fail "$dev is still there after SIGTERM (--ublk-threads 2)"

# ---- 7. the tag copy mode (--ublk-copy tag, what kernels without user
# copy get) on one thread (--ublk-threads 1): 128 tags split over the
# queues, a verified fio; then xfs (the device is new; the volume still
# holds ext4: overwritten)
attach_start attach3 --ublk-copy tag --ublk-threads 1
dev=$(sed -n 's/.* dev=\(\/dev\/ublkb[0-9]*\).*/\1/p' <<<"$ready_line")
[[ $ready_line == *" depth=$((128 / queues)) copy=tag threads=1"* ]] ||
	fail "--ublk-copy tag --ublk-threads 1: the READY line does not say $((128 / queues)) tags per queue in tag copy on 1 thread: '$ready_line'"
wait_dev
check_tags "$dev" $((128 / queues))
fio_run tagcopy --rw=randrw --rwmixread=40 --bsrange=4k-256k --iodepth=32 --size=64M --io_size=16M
st=$(ublk_status attach3)
[[ $st == *" ublk_copy=tag ublk_buf_waits=0"* ]] || fail "--ublk-copy tag: the ctl status says '$st'"
# The same 1 MiB reads as with user copy (the figures to compare).
fio_run read1m-tag --rw=read --bs=1M --iodepth=16 --size=64M --do_verify=0 --verify=0
vm_guest_xfs "$dev" "$mnt" "$logs"
kill -TERM "$attach_pid"
wait "$attach_pid" || fail "attach3 exited $? on SIGTERM"
attach_pid=''

# ---- 8. through CSI
ZL_BUILD_DIR=$build /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/csi_frontend_guest.py" \
	"$bin" "$logs" "$etcd_url" ublk "$data" param || fail "the CSI checks failed (node.log, controller.log in $logs)"
for ((i = 1; i <= nodes; i++)); do
	grep -qi 'corrupt' "$logs/storage-$i.log" && fail "storage-$i.log reports corruption"
done
say "PASS"
