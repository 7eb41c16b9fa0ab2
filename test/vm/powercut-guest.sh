#!/bin/bash
# The guest half of test/vm/powercut-storage.sh (runs inside the test VM,
# once per boot): etcd and three zipline-storage daemons (node-1..3, ports
# 7101..7103, data dirs MNT/storage-1..3) with their data on the virtio
# disk, then the check of the previous round and/or the load of this round.
#
# Usage (in the guest): powercut-guest.sh BUILD WORK BOOT CHECK WRITE
#   BUILD  build tree (bin/zipline-storage, bin/zl, bin/powercut_io)
#   WORK   the test's directory (host-shared): WORK/rN/{seed,ready_after}
#          from the host; WORK/rN/log (acknowledged ops), WORK/rN/ready,
#          WORK/rN/base (the volume at the start of round N, written by the
#          check of round N-1), WORK/bootB/ (etcd, daemon and manager logs)
#   BOOT   number of this boot (1 = mkfs, etcd and the 3-replica volume are
#          new)
#   CHECK  round to check (0: none), before anything is written: the chunk
#          files of every daemon (powercut_io scan), every acknowledged op
#          (powercut_io check), every slice 3 of 3 in sync again, and
#          `zl volume verify` (identical replicas)
#   WRITE  round to load (0: none: stop cleanly after the check); the load
#          runs until the host cuts the power
# Environment: ZL_POWERCUT_HEAL (zipline-storage --heal, default on),
# ZL_TEST_WRITE_PATH (zipline-storage --write-path direct|journal; unset: no
# flag, the daemons' default as their --help states it. journal: the chunk
# files are consistent only once a daemon replayed its journal, so after a
# cut the daemons start once, replay, stop with SIGTERM, and only then are
# their chunk files scanned; direct: scanned before any daemon starts),
# ZL_POWERCUT_FS (ext4 or xfs, default ext4), ZL_POWERCUT_SIZE (4M),
# ZL_POWERCUT_REPLICAS (the volume's replicas, 3),
# ZL_POWERCUT_CHUNK (chunk size, 64K), ZL_POWERCUT_HEAL_WAIT (seconds for
# every slice to be 3 of 3 in sync after the check, 120),
# ZL_POWERCUT_MANAGER (zipline-controller --manager=on in the guest, default
# on: the manager dies with every power cut and starts again at the next boot),
# ZL_POWERCUT_TRAP=on (the file system on a dm-delay device over the disk;
# once the load is ready, writes are held ZL_POWERCUT_TRAP_MS (2000) in the
# guest and WORK/rN/armed appears, for an immediate cut, as soon as an
# O_DIRECT scan of the chunk files sees a held metadata write landed; the
# load of round N>1 starts with WRITEs of the blocks that matched prev_crc
# after the previous cut, see powercut_io.c "The trap"),
# ZL_POWERCUT_FULL=on (a full disk: each daemon's data dir on a small
# virtio disk of its own, the 2nd..4th of ZL_VM_DISKS, ext4 without
# reserved blocks, --journal-size ZL_POWERCUT_FULL_JOURNAL (17M) on the
# journal path; boot 1 fills each with a file until ZL_POWERCUT_FULL_ROOM
# (2M) is left beyond what the daemon keeps free (the ring and 8 MiB on
# the journal path, 8 MiB on the direct one; ZL_POWERCUT_FULL_KEEP instead
# when set), so the load soon fails NOSPC; READY waits for ZL_POWERCUT_FULL_FAILED (20) such failures, see
# powercut_io.c "A full disk").
# Exit status: 0 all checks passed; 1 a check or a step failed.
set -u
build=${1:?usage: powercut-guest.sh BUILD WORK BOOT CHECK WRITE}
work=${2:?} boot=${3:?} check=${4:?} write=${5:?}
bin=$build/bin
heal_tool=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd -P)/heal_tool.py
# shellcheck source=guest-etcd.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-etcd.sh" || exit 1
nodes=3
replicas=${ZL_POWERCUT_REPLICAS:-3}
mnt=/mnt/zl-powercut
etcd_url=http://127.0.0.1:2379
vol=pcvol
fs=${ZL_POWERCUT_FS:-ext4}
trap_on=${ZL_POWERCUT_TRAP:-off}
trap_ms=${ZL_POWERCUT_TRAP_MS:-2000}
full=${ZL_POWERCUT_FULL:-off}
full_journal=${ZL_POWERCUT_FULL_JOURNAL:-17M}
logs=$work/boot$boot
storage_pids=() etcd_pid=''
wp_flags=()
[[ -n ${ZL_TEST_WRITE_PATH:-} ]] && wp_flags=(--write-path "$ZL_TEST_WRITE_PATH")
# The write path the daemons run: ZL_TEST_WRITE_PATH, else their default
# (as --help states it; none: a daemon without the flag, direct).
write_path=${ZL_TEST_WRITE_PATH:-$("$bin/zipline-storage" --help 2>&1 |
	sed -n 's/.*(default \(journal\|direct\)).*/\1/p' | head -1)}
write_path=${write_path:-direct}
full_flags=()
[[ $full == on && $write_path == journal ]] && full_flags=(--journal-size "$full_journal")
# avail_all: the free bytes of each small disk (full).
avail_all() {
	local i
	for ((i = 1; i <= nodes; i++)); do
		echo -n "full-$i $(($(df -B1 --output=avail "$mnt/full-$i" | tail -1) >> 10)) KiB free; "
	done
}

say() {
	local up
	read -r up _ </proc/uptime
	echo "powercut-guest: [boot $boot, ${up%.*} s] $*"
}
fail() {
	echo "powercut-guest: FAIL (boot $boot): $*" >&2
	# A suspended dm device would hang the guest's power-off (sync).
	[[ $trap_on == on ]] && dmsetup resume --noudevsync zlpc 2>/dev/null
	local i
	for ((i = 1; i <= nodes; i++)); do
		[[ -f $logs/storage-$i.log ]] && tail -8 "$logs/storage-$i.log" | sed "s/^/    storage-$i: /" >&2
	done
	exit 1
}
# corruption_lines: daemon log lines that report corruption (none allowed).
corruption_lines() { grep -i 'corrupt' "$logs"/storage-*.log; }
# ddir I: node-I's data dir (full: on its own small disk, mounted at
# $mnt/full-I, beside the filler file).
ddir() {
	if [[ $full == on ]]; then echo "$mnt/full-$1/data"; else echo "$mnt/storage-$1"; fi
}

[[ ${ZL_VM:-} == 1 ]] || fail "not inside the test VM (ZL_VM is not 1)"
dev=${ZL_VM_DISKS%% *}
[[ -b $dev ]] || fail "no virtio disk (ZL_VM_DISKS='${ZL_VM_DISKS:-}')"
[[ -f $heal_tool ]] || fail "$heal_tool is missing"
full_devs=()
if [[ $full == on ]]; then
	[[ $trap_on == on ]] && fail "ZL_POWERCUT_FULL=on and ZL_POWERCUT_TRAP=on do not go together"
	read -r -a full_devs <<<"${ZL_VM_DISKS#* }"
	((${#full_devs[@]} == nodes)) || fail "ZL_POWERCUT_FULL=on: want $nodes small disks after the first, ZL_VM_DISKS='${ZL_VM_DISKS:-}'"
	for d in "${full_devs[@]}"; do [[ -b $d ]] || fail "$d is not a block device"; done
fi
for t in etcd etcdctl curl /usr/bin/python3 "mkfs.$fs" "$bin/zipline-storage" "$bin/zl" "$bin/powercut_io"; do
	command -v "$t" >/dev/null || fail "$t is missing (install it / build the tree)"
done
mkdir -p "$logs" "$mnt" || fail "cannot create $logs or $mnt"
ip link set lo up || fail "cannot bring up lo"

# ---- the disk (trap: through dm-delay, no delay until armed)
if [[ $trap_on == on ]]; then
	modprobe dm_delay || fail "modprobe dm_delay failed"
	export DM_DISABLE_UDEV=1 # no udev in the guest: dmsetup makes /dev/mapper nodes
	sectors=$(blockdev --getsz "$dev") || fail "blockdev --getsz $dev failed"
	raw=$dev
	dm_table() { echo "0 $sectors delay $raw 0 0 $raw 0 $1"; }
	dmsetup create --noudevsync zlpc --table "$(dm_table 0)" || fail "dmsetup create failed"
	dev=/dev/mapper/zlpc
	[[ -b $dev ]] || dmsetup mknodes zlpc
	[[ -b $dev ]] || fail "$dev did not appear"
fi
# arm: from now on writes to the disk wait trap_ms in the guest (also
# /tmp/zl-arm.sh, for powercut_io --before: armed once the volume is open,
# as etcd stalls on the slow disk).
arm_sh=/tmp/zl-arm.sh
if [[ $trap_on == on ]]; then
	cat >"$arm_sh" <<-EOF || fail "cannot write $arm_sh"
		export DM_DISABLE_UDEV=1
		dmsetup suspend --noudevsync zlpc &&
			dmsetup reload --noudevsync zlpc --table "$(dm_table "$trap_ms")" &&
			dmsetup resume --noudevsync zlpc && echo "powercut-guest: trap armed: writes wait $trap_ms ms"
	EOF
fi
arm() { bash "$arm_sh" || fail "cannot switch dm-delay to $trap_ms ms"; }
if ((boot == 1)); then
	force=-f
	[[ $fs == ext4 ]] && force=-F
	"mkfs.$fs" -q "$force" "$dev" || fail "mkfs.$fs $dev failed"
fi
mount -t "$fs" "$dev" "$mnt" || fail "mount $dev ($fs) failed (after the power cut: journal replay)"
say "$dev ($fs) mounted on $mnt"
# ---- full: each daemon's data dir on a small disk of its own
for ((i = 1; i <= ${#full_devs[@]}; i++)); do
	d=${full_devs[i - 1]}
	if ((boot == 1)); then
		mkfs.ext4 -q -F -m 0 "$d" || fail "mkfs.ext4 $d failed"
	fi
	mkdir -p "$mnt/full-$i" && mount -t ext4 "$d" "$mnt/full-$i" ||
		fail "mount $d on $mnt/full-$i failed (after the power cut: journal replay)"
done
((${#full_devs[@]})) && say "small disks ${full_devs[*]} mounted on $mnt/full-1..$nodes: $(avail_all)"
# ---- etcd, with its data on the disk
vm_guest_etcd_start "$mnt/etcd" "$logs/etcd.log" "$etcd_url"
say "etcd up"

# ---- three storage daemons, each with its data dir on the disk
# storage_start: node-I on port 7100+I (TCP only: no RDMA probe, which
# costs seconds in the guest), data dir $mnt/storage-I, log
# $logs/storage-I.log (appended: every start of this boot); returns once
# each has registered in etcd (after a cut: after its unclean-start scan and
# journal replay, both done before the daemon registers).
storage_start() {
	local i since
	storage_pids=()
	since=$(date +%s)
	for ((i = 1; i <= nodes; i++)); do
		mkdir -p "$(ddir "$i")" || fail "cannot create $(ddir "$i")"
		"$bin/zipline-storage" --data-dir "$(ddir "$i")" --listen "127.0.0.1:$((7100 + i))" \
			--node-id "node-$i" --label "zone=z$i" --etcd "$etcd_url" --transport tcp \
			--heal "${ZL_POWERCUT_HEAL:-on}" "${wp_flags[@]}" "${full_flags[@]}" --log-level info \
			>>"$logs/storage-$i.log" 2>&1 &
		storage_pids[i]=$!
	done
	for ((i = 1; i <= nodes; i++)); do
		vm_guest_wait_node "$etcd_url" "node-$i" "${storage_pids[i]}" "$since" 300 \
			"$logs/storage-$i.log"
	done
	say "zipline-storage node-1..$nodes up (pids ${storage_pids[*]}, write path $write_path)"
}
# storage_stop: SIGTERM to every daemon; each must exit 0.
storage_stop() {
	local i rc
	for ((i = 1; i <= nodes; i++)); do kill -TERM "${storage_pids[i]}"; done
	for ((i = 1; i <= nodes; i++)); do
		wait "${storage_pids[i]}"
		rc=$?
		((rc == 0)) || fail "zipline-storage node-$i exited $rc on SIGTERM"
	done
	storage_pids=()
}
# scan_all [--taint FILE]: every chunk file of every daemon, read without
# the daemons: each block matches its crc or prev_crc, or is zeros with a
# zero entry (one "powercut_io: scan:" line per daemon). --taint: the
# blocks matching prev_crc on any daemon (at most 8 runs).
scan_all() {
	local i rc=0 taint=${2:-}
	for ((i = 1; i <= nodes; i++)); do
		"$bin/powercut_io" scan --data-dir "$(ddir "$i")" ${taint:+--taint "$taint.$i"} |
			sed "s/^powercut_io: scan: /powercut_io: scan: node-$i: /"
		((PIPESTATUS[0] == 0)) || rc=1
	done
	if [[ -n $taint ]]; then
		sort -n -u "$taint".[1-9] | head -8 >"$taint" || rc=1
		rm -f "$taint".[1-9]
	fi
	return $rc
}

# After a cut: every block of every chunk file matches its crc or
# prev_crc (read by powercut_io, not by the daemons). Direct path: before
# any daemon starts. Journal path: the files are consistent only after the
# replay, so the daemons start once (replay), stop cleanly, then the scan.
if ((check > 0)); then
	mkdir -p "$work/r$((check + 1))" || fail "cannot create $work/r$((check + 1))"
	if [[ $write_path == journal ]]; then
		storage_start
		storage_stop
		say "journal replayed by every daemon, clean stop, scanning the chunk files"
	fi
	taint=()
	[[ $trap_on == on ]] && taint=(--taint "$work/r$((check + 1))/first")
	scan_all "${taint[@]}" || fail "a chunk file block matches neither its crc nor its prev_crc"
fi
storage_start
# full, boot 1: the daemons made their journals; a filler file takes all
# but ROOM beyond what each daemon keeps free (its ring, if any, and 8 MiB).
if [[ $full == on ]] && ((boot == 1)); then
	size_bytes() { numfmt --from=iec "$1"; }
	keep=$(size_bytes 8M)
	[[ $write_path == journal ]] && keep=$((keep + $(size_bytes "$full_journal")))
	# ZL_POWERCUT_FULL_KEEP: another figure (0: the disk itself fills; to
	# show what a daemon without op_room loses)
	[[ -n ${ZL_POWERCUT_FULL_KEEP:-} ]] && keep=$(size_bytes "$ZL_POWERCUT_FULL_KEEP")
	room=$(size_bytes "${ZL_POWERCUT_FULL_ROOM:-2M}")
	for ((i = 1; i <= nodes; i++)); do
		avail=$(df -B1 --output=avail "$mnt/full-$i" | tail -1)
		fill=$(((avail - keep - room) / 4096 * 4096))
		((fill > 0)) || fail "full-$i: $avail bytes free, less than the $keep kept and the $room of room"
		fallocate -l "$fill" "$mnt/full-$i/filler" || fail "fallocate of $mnt/full-$i/filler failed"
	done
	sync
	say "FIGURE: full: filler files written, each daemon keeps $((keep >> 20)) MiB: $(avail_all)"
fi
# The host's request for a state dump (it gave up waiting for this boot):
# every thread of every daemon, its state, wait channel and kernel stack,
# and its user stack where gdb is installed, to WORK/bootB/threads.txt.
dump_threads() {
	local p
	for p in "${storage_pids[@]}"; do
		echo "== zipline-storage pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
		vm_guest_threads "$p"
	done
}
(
	for ((i = 0; i < 3600; i++)); do
		[[ -e $logs/dump-request ]] && { dump_threads >"$logs/threads.tmp" 2>&1; mv "$logs/threads.tmp" "$logs/threads.txt"; break; }
		sleep 0.5
	done
) >/dev/null 2>&1 &
dump_pid=$!
# It must not outlive this script: the guest ends when the command's
# output is closed.
trap 'kill "$dump_pid" 2>/dev/null' EXIT
export ZIPLINE_ETCD=$etcd_url
if [[ ${ZL_POWERCUT_MANAGER:-on} == on ]]; then
	"$bin/zipline-controller" --endpoint unix:///run/zl-powercut-csi.sock --etcd "$etcd_url" \
		--manager=on --log-level info >>"$logs/controller.log" 2>&1 &
	say "zipline-controller --manager=on started (pid $!)"
fi
export ZL_LOG_LEVEL=warn # powercut_io: only what went wrong

if ((boot == 1)); then
	"$bin/zl" volume create "$vol" --size "${ZL_POWERCUT_SIZE:-4M}" --replicas "$replicas" \
		--chunk-size "${ZL_POWERCUT_CHUNK:-64K}" || fail "zl volume create failed"
fi

# ---- the check of the previous round
if ((check > 0)); then
	r=$work/r$check
	base=() more=()
	[[ -f $r/base ]] && base=(--base "$r/base")
	[[ -s $r/first ]] && more+=(--first "$r/first" --min-acked 0)
	say "checking round $check"
	"$bin/powercut_io" check --etcd "$etcd_url" --volume "$vol" --seed "$(cat "$r/seed")" \
		--log "$r/log" "${base[@]}" "${more[@]}" --out "$work/r$((check + 1))/base" ||
		fail "round $check: acknowledged ops did not read back (see above)"
	if [[ -f $work/bad-base ]]; then
		# The oracle is not vacuous: the same check against a wrong base
		# (every byte inverted) must fail.
		"$bin/powercut_io" check --etcd "$etcd_url" --volume "$vol" \
			--seed "$(cat "$r/seed")" --log "$r/log" --base "$work/bad-base" "${more[@]}" \
			--out /tmp/bad-out >/tmp/bad.out 2>&1
		rc=$?
		sed 's/^/    control: /' /tmp/bad.out | grep -v WRONG
		if ((rc != 1)) || ! grep -q 'check:.* [1-9][0-9]* wrong' /tmp/bad.out; then
			fail "the check passed against a wrong base (exit $rc): it proves nothing"
		fi
		say "control ok: the check fails against a wrong base"
	fi
	# Healed: every slice 3 of 3 in sync again (the check's reads made
	# every primary peer), then every replica identical.
	vid=$("$bin/zl" volume inspect "$vol" | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
	[[ -n $vid ]] || fail "zl volume inspect $vol names no volume id"
	ms=$(/usr/bin/python3 "$heal_tool" etcd "$etcd_url" wait "$vid" --all "$replicas" \
		"${ZL_POWERCUT_HEAL_WAIT:-120}") ||
		fail "round $check: not every slice $replicas of $replicas in sync within ${ZL_POWERCUT_HEAL_WAIT:-120} s of the check"
	say "every slice $replicas of $replicas in sync ($ms ms after the check)"
	"$bin/zl" volume verify "$vol" >/tmp/verify.out 2>&1
	rc=$?
	sed 's/^/    verify: /' /tmp/verify.out | head -20
	((rc == 0)) || fail "round $check: zl volume verify exited $rc: the replicas differ"
	say "FIGURE: verify: $(tail -1 /tmp/verify.out)"
	corruption_lines && fail "zipline-storage logged corruption (above)"
	say "FIGURE: torn metadata slots found at open: $(cat "$logs"/storage-*.log | grep -c 'is torn')"
	[[ $full == on ]] && say "FIGURE: full: after the check: $(avail_all)"
fi

# ---- the load of this round, until the power cut
if ((write > 0)); then
	r=$work/r$write
	mkdir -p "$r" || fail "cannot create $r"
	say "load of round $write"
	load=("$bin/powercut_io" write --etcd "$etcd_url" --volume "$vol" --seed "$(cat "$r/seed")"
		--log "$r/log" --ready "$r/ready")
	[[ $full == on ]] && load+=(--nospc "${ZL_POWERCUT_FULL_FAILED:-20}")
	if [[ $trap_on != on ]]; then
		"${load[@]}" --ready-after "$(cat "$r/ready_after")"
		fail "the load ended by itself (exit $?) before the power cut"
	fi
	if [[ -s $r/first ]]; then
		say "trap: the first WRITEs: $(tr '\n' ' ' <"$r/first")"
		"${load[@]}" --first "$r/first" --ready-after 0 --before "bash $arm_sh" &
	else
		"${load[@]}" --ready-after "$(cat "$r/ready_after")" &
	fi
	load_pid=$!
	while [[ ! -e $r/ready ]] && kill -0 "$load_pid" 2>/dev/null; do sleep 0.05; done
	[[ -e $r/ready ]] || { wait "$load_pid"; fail "the load ended (exit $?) before it was ready"; }
	[[ -s $r/first ]] || arm
	# Spring the trap: the host cuts the power as soon as a held metadata
	# write landed (the O_DIRECT scan finds a block matching prev_crc, or
	# matching neither, more or less often), while the data write that
	# follows it is still held.
	scan() { scan_all 2>/dev/null | grep '^powercut_io: scan:' | tr '\n' ' '; }
	# the counts matching prev_crc and matching neither, of every daemon
	odd() { grep -o '[0-9]* match [pn][a-z_]*' <<<"$1" | tr '\n' ' '; }
	before=$(scan)
	for ((i = 0; i < 600; i++)); do
		now=$(scan)
		[[ $(odd "$now") != "$(odd "$before")" ]] && break
		sleep 0.05
	done
	touch "$r/armed" || fail "cannot create $r/armed"
	say "trap sprung after $i polls: before: ${before#powercut_io: scan: }; now: ${now#powercut_io: scan: }"
	wait "$load_pid"
	fail "the load ended by itself (exit $?) before the power cut"
fi

# ---- no more load: stop cleanly, the logs must stay clean
storage_stop
kill -TERM "$etcd_pid"
wait "$etcd_pid"
corruption_lines && fail "zipline-storage logged corruption (above)"
for ((i = 1; i <= ${#full_devs[@]}; i++)); do
	umount "$mnt/full-$i" || fail "umount $mnt/full-$i failed"
done
umount "$mnt" || fail "umount $mnt failed"
say "clean stop"
exit 0
