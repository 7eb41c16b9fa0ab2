#!/usr/bin/env bash
# powercut_storage: three replicas survive power cuts (issues 10, 22).
#
# Inside the project's test VM (test/vm/vm.sh: qemu, the virtio disk with
# cache=none) etcd and three zipline-storage daemons (--heal on, each its
# own data dir and port) and the manager keep their data on a file system
# on the virtio disk; a 3-replica volume (4 MiB, chunk 64 KiB) gets a load
# of random WRITEs (4..64 KiB, aligned and unaligned), WRITE_ZEROES and
# DISCARDs at QD 8 from powercut_io (lib/client), which logs every
# acknowledged op in this test's directory on the host (9p share, fdatasync:
# on the host once acknowledged). After READY_AFTER acknowledged ops and a
# random delay the host SIGKILLs qemu (vm.sh kill): nothing in the guest
# flushes or unmounts. The next boot on the same image mounts the disk,
# reads every chunk file of every daemon itself (powercut_io scan: each
# block matches its crc or prev_crc; on the journal write path after the
# daemons replayed their journals and stopped cleanly, on the direct one
# before they start), starts etcd, the daemons and the manager again and checks
# (powercut_io check) that every block holds its last acknowledged content,
# each 4 KiB piece of an op in flight at the cut either old or new, every
# block readable, no ZL_ERR_CORRUPT and no "corruption" in any daemon's
# log; then that every slice is 3 of 3 in sync again and `zl volume verify`
# finds the replicas identical; then it loads the next round. ROUNDS cuts,
# then a final boot checks the last round, proves the check fails against a
# wrong base, and stops the daemons cleanly.
#
# ZL_POWERCUT_FULL=on (ctest powercut_full: 2 cuts, a 1-replica volume,
# test/vm/README.md says why): the cuts come while the data disks are full. Each daemon's data dir lies on a small virtio
# disk of its own (ZL_POWERCUT_FULL_DISK, 64M, cache=none like the first),
# filled at the first boot until ZL_POWERCUT_FULL_ROOM (2M) is left beyond
# what the daemon keeps free; the volume is larger (ZL_POWERCUT_SIZE, 32M
# here), so the load's writes that need new blocks fail NOSPC while
# overwrites go on. A failed op was not acknowledged: powercut_io logs it
# and checks each 4 KiB piece of it as old or new, like an op in flight at
# the cut. The cut comes once ZL_POWERCUT_FULL_FAILED (20) ops failed NOSPC
# and READY_AFTER were acknowledged, then the random delay; the daemons must
# replay their journals on the full disks and start (a daemon that does not
# fails the test with its log).
#
# Usage: test/vm/powercut-storage.sh BUILD_DIR
# Environment: ZL_POWERCUT_ROUNDS (3), ZL_POWERCUT_READY_AFTER (40),
# ZL_POWERCUT_SEED, ZL_POWERCUT_TRAP=on, ZL_POWERCUT_FULL=on (see
# powercut-guest.sh),
# ZL_TEST_WRITE_PATH (zipline-storage --write-path of every daemon; unset:
# none), KEEP=1 (keep the work directory), and those of powercut-guest.sh
# and vm.sh. A VM that cannot boot or a missing tool fails the test (never
# a skip).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: powercut-storage.sh BUILD_DIR}" && pwd -P)
vm=$here/vm.sh
rounds=${ZL_POWERCUT_ROUNDS:-3}
ready_after=${ZL_POWERCUT_READY_AFTER:-40}
trap_on=${ZL_POWERCUT_TRAP:-off}
seed0=${ZL_POWERCUT_SEED:-$(((RANDOM << 15) | RANDOM))}
full=${ZL_POWERCUT_FULL:-off}
t_start=$SECONDS
name=powercut-$$
tname=powercut_storage
if [[ $full == on ]]; then
	tname=powercut_full
	# The guest and the control below read the volume's size from here.
	export ZL_POWERCUT_SIZE=${ZL_POWERCUT_SIZE:-32M}
fi

fail() {
	echo "$tname: FAIL: $*" >&2
	exit 1
}
step() { echo "$tname: [$((SECONDS - t_start)) s] $*"; }
# acked LOG, nospc LOG: the ops LOG records as acknowledged / failed NOSPC.
acked() { grep -vc ' NOSPC$' "$1"; }
nospc() { grep -c ' NOSPC$' "$1"; }

for t in "$build/bin/zipline-storage" "$build/bin/zl" "$build/bin/powercut_io"; do
	[[ -x $t ]] || fail "$t is not built"
done
for t in etcd curl mkfs.ext4 /usr/bin/python3; do
	command -v "$t" >/dev/null || fail "$t is missing (scripts/install-deps.sh installs it)"
done
work=$(mktemp -d "$build/powercut.XXXXXX") || fail "cannot create a work directory in $build"
cleanup() {
	bash "$vm" kill "$name" >/dev/null 2>&1
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "$tname: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
img=$work/disk.img
truncate -s 1G "$img" || fail "cannot create $img"
disks=(--disk "$img")
if [[ $full == on ]]; then
	for i in 1 2 3; do
		truncate -s "${ZL_POWERCUT_FULL_DISK:-64M}" "$work/full-$i.img" ||
			fail "cannot create $work/full-$i.img"
		disks+=(--disk "$work/full-$i.img")
	done
fi
# show TAG: the guest's output of boot TAG.
show() {
	sed 's/^/    | /' "$work/$1.out"
	grep -av '^zl-vm: ' "$work/$1.err" | sed 's/^/    |2 /' # -a: the serial port may carry NULs
}
# dump BOOT: a guest that stopped making progress: asks it for the state
# of every daemon thread (powercut-guest.sh dump_threads, at most 150 s)
# and prints that and the end of each daemon's log.
dump() {
	local d=$work/boot$1 i
	touch "$d/dump-request" 2>/dev/null || return
	for ((i = 0; i < 300; i++)); do
		[[ -e $d/threads.txt ]] && break
		sleep 0.5
	done
	echo "$tname: boot $1 made no progress: the daemons' threads and logs" >&2
	sed 's/^/    threads| /' "$d/threads.txt" >&2 2>/dev/null || echo "    (no thread dump from the guest)" >&2
	logs "$1"
}
# logs BOOT: the end of each daemon's log of that boot.
logs() {
	local i
	for i in "$work/boot$1"/storage-*.log "$work/boot$1"/controller.log; do
		[[ -f $i ]] && tail -60 "$i" | sed "s/^/    ${i##*/}| /" >&2
	done
}
step "seed $seed0, $rounds power cuts, a cut after $ready_after acknowledged ops$([[ $full == on ]] && echo " and ${ZL_POWERCUT_FULL_FAILED:-20} failed NOSPC (full data disks)") + 2..5 s, ${ZL_POWERCUT_REPLICAS:-3} replicas, write path ${ZL_TEST_WRITE_PATH:-default}"

for ((r = 1; r <= rounds; r++)); do
	mkdir -p "$work/r$r" || fail "cannot create $work/r$r"
	echo "$((seed0 + r))" >"$work/r$r/seed"
	echo "$ready_after" >"$work/r$r/ready_after"
	t0=$SECONDS
	bash "$vm" start --name "$name" --share "$build" "${disks[@]}" -t 420 -- \
		bash "$here/powercut-guest.sh" "$build" "$work" "$r" "$((r - 1))" "$r" \
		>"$work/boot$r.out" 2>"$work/boot$r.err" || {
		show "boot$r"
		fail "vm.sh start exited $? (boot $r)"
	}
	ready=$work/r$r/ready
	[[ $trap_on == on ]] && ready=$work/r$r/armed
	bash "$vm" wait "$name" --file "$ready" --timeout 300
	rc=$?
	if ((rc != 0)); then
		((rc == 124)) && dump "$r"
		bash "$vm" kill "$name" >/dev/null 2>&1
		((rc == 124)) || logs "$r"
		show "boot$r"
		((rc == 124)) && fail "boot $r: the load did not reach $ready_after acknowledged ops$([[ $full == on ]] && echo " and ${ZL_POWERCUT_FULL_FAILED:-20} failed NOSPC") in 300 s"
		fail "boot $r: the guest stopped (exit $rc) before the load reached $ready_after acknowledged ops: a check or a step failed (above)"
	fi
	t_ready=$((SECONDS - t0))
	n_ready=$(acked "$work/r$r/log")
	# trap: the guest said a held write just landed; cut at once. Else a
	# random 2.0..4.9 s later: long enough for the load to acknowledge more
	# ops (checked below), so the cut falls on a running load (a pause of
	# 0.0 s, possible before, cut with nothing acknowledged since READY).
	[[ $trap_on == on ]] || sleep "$((2 + RANDOM % 3)).$((RANDOM % 10))"
	n_kill=$(acked "$work/r$r/log")
	bash "$vm" kill "$name" || {
		show "boot$r"
		fail "vm.sh kill exited $? (boot $r): the guest had stopped, no cut under load"
	}
	n_cut=$(acked "$work/r$r/log")
	f_cut=$(nospc "$work/r$r/log")
	show "boot$r"
	[[ $trap_on == on ]] || ((n_cut > n_ready)) ||
		fail "round $r: no op was acknowledged between READY and the cut"
	[[ -s $work/r$r/first ]] &&
		echo "FIGURE: round $r: trap: $(wc -l <"$work/r$r/first") first WRITEs of blocks where round $((r - 1))'s ops in flight read old"
	step "round $r: power cut (SIGKILL of qemu) after $n_cut acknowledged ops"
	echo "FIGURE: round $r: $n_cut acknowledged ops before the power cut ($n_kill when SIGKILL was sent)"
	if [[ $full == on ]]; then
		((f_cut >= ${ZL_POWERCUT_FULL_FAILED:-20})) ||
			fail "round $r: $f_cut ops failed NOSPC before the cut: the disks were not full"
		echo "FIGURE: round $r: $f_cut ops failed NOSPC before the power cut (the data disks full)"
	fi
	echo "FIGURE: boot $r: $t_ready s from vm.sh start to $ready_after acknowledged ops$( ((r > 1)) && echo " (including the check of round $((r - 1)))")"
done

# The final boot checks the last round, and the check once more against a
# wrong base (every byte of the right one inverted), which must fail.
/usr/bin/python3 - "$work/r$rounds/base" "$work/bad-base" "${ZL_POWERCUT_SIZE:-4M}" <<'PY' ||
import os, sys
src, dst, size = sys.argv[1], sys.argv[2], sys.argv[3]
n = int(size[:-1]) << {'K': 10, 'M': 20, 'G': 30}[size[-1]]
data = open(src, 'rb').read() if os.path.exists(src) else bytes(n)
open(dst, 'wb').write(bytes(b ^ 0xff for b in data))
PY
	fail "cannot write $work/bad-base"
b=$((rounds + 1))
t0=$SECONDS
bash "$vm" run --share "$build" "${disks[@]}" -t 300 -- \
	bash "$here/powercut-guest.sh" "$build" "$work" "$b" "$rounds" 0 \
	>"$work/boot$b.out" 2>"$work/boot$b.err"
rc=$?
show "boot$b"
((rc == 0)) || { logs "$b"; fail "boot $b: the check after the last power cut failed (exit $rc)"; }
echo "FIGURE: boot $b: $((SECONDS - t0)) s (check of round $rounds, control, clean stop)"
for ((r = 1; r <= rounds; r++)); do
	n=0
	while read -r line; do
		echo "FIGURE: round $r: after the cut: ${line#powercut_io: scan: }"
		n=$((n + 1))
	done < <(grep -h '^powercut_io: scan:' "$work/boot$((r + 1)).out")
	((n == 3)) || fail "round $r: $n chunk file scans after the cut, not one per daemon (3)"
	line=$(grep -h 'FIGURE: verify:' "$work/boot$((r + 1)).out" | head -1)
	[[ -n $line ]] || fail "no zl volume verify after round $r"
	echo "FIGURE: round $r: ${line#*FIGURE: }"
	line=$(grep -h '^powercut_io: check:' "$work/boot$((r + 1)).out" | head -1)
	[[ -n $line ]] || fail "no check result for round $r"
	echo "FIGURE: round $r: ${line#powercut_io: check: }"
	if [[ $full == on ]]; then
		line=$(grep -h '^powercut_io: check: NOSPC:' "$work/boot$((r + 1)).out" | head -1)
		[[ -n $line ]] || fail "round $r: the check saw no op that failed NOSPC"
		echo "FIGURE: round $r: ${line#powercut_io: check: }"
	fi
done
step "PASS: every acknowledged op of $rounds power cuts$([[ $full == on ]] && echo " on full data disks") read back, no corruption, replicas identical"
