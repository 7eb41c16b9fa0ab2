#!/usr/bin/env bash
# E2E: data directories that fill up under a write load (the journal write
# path, the default). Three daemons, each on an ext4 image of its own (loop
# mount, 96 MiB: about 65 MiB free beside the 17 MiB journal, of which the
# daemon keeps the ring's size plus 8 MiB free for the writes the journal
# answered before their chunk-file write: about 40 MiB of room for new
# blocks), a 3-replica volume of 128 MiB (1 MiB chunks, sparse files), and
# a verifying writer (e2e_load: random 4-32 KiB writes, each in the
# journal's record, acknowledged before its chunk-file write) that goes on
# well past the point where the filesystems are full.
#   - Writes past that point fail (ZL_ERR_NOSPC, zipline_storage_writes_
#     refused_full_total > 0 on every daemon, 0 before the load): an
#     acknowledged write is one whose blocks have room. With every data
#     dir near full (within 64 MiB of what it keeps, which these small
#     images are from the start) each row is short of room and its primary
#     refuses new space itself ("writes that need new space refused" in
#     its log, docs/REPLICATION.md §9) before a disk is full ("disk full",
#     op_room: fullfs_one_e2e and the unit tests reach that).
#   - Every acknowledged write reads back (e2e_load check, through the
#     client: the oracle is the writer's log of acknowledged writes), and
#     no daemon logs a chunk-file write that failed after its journal
#     record was durable (its blocks would read as corrupt).
# ZL_TEST_WRITE_PATH=direct (fullfs_direct_e2e) runs the same on the direct
# write path: a write answered after its chunk-file write, which must never
# meet the disk's own ENOSPC either (a short write there leaves blocks no
# CRC describes, unreadable with the acknowledged sectors they share): 8 MiB
# stay free.
# FULLFS_TWO=1 (fullfs_two_e2e) fills node-2's and node-3's (ballasts as
# below, node-1 has room): where both backups of a slice are near full its
# primary node-1 refuses the writes that need new space itself, at once
# (NOSPC); no slice falls below min_size (before: both backups taken out,
# the slice's writes waiting for io_timeout, 16 s); once the ballasts are
# removed the members taken out catch up, node-1 sees room again (its
# PINGs) and new writes succeed; `zl status` names both disks (near) full,
# then none.
# FULLFS_ONE=1 (fullfs_one_e2e) fills one daemon's data dir only (node-3's
# 512 MiB image holds a 370 MiB ballast file in lost+found, leaving about
# what a 96 MiB image has; node-1 and node-2 on 512 MiB without; a 256 MiB
# volume): as a backup node-3 refuses the forwarded writes that need room and its primary has
# the manager take it out of the row; as a primary it refuses the client's
# writes, and the backups must not have applied them either: `zl volume
# verify` finds the members in sync identical, and every acknowledged
# write reads back. The manager has node-3's members recovered, which its
# full disk refuses: `zl status` names the full disk, and each member's
# recovery waits longer after each refusal (at most 6 tries in 20 s, where
# before every member tried again at once, about 14 times). Then node-3's
# ballast is removed (room made in its data dir): the recovery goes on by
# itself, every slice is 3/3 in sync, `zl status` no
# longer names a full disk, and the replicas are identical.
# Needs root, loop devices and mkfs.ext4 (as ddir_e2e does).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
# cluster.sh, heal.sh (fail: the daemons' logs dumped), mt_sum.
source "$SRC/test/lib/metrics.sh" fullfs_e2e
ok() { echo "fullfs_e2e: ok: $*"; }
if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null || [ ! -e /dev/loop-control ]; then
	echo "fullfs_e2e: FAILED: cannot run: needs root, loop devices and mkfs.ext4" >&2
	exit 1
fi
export CL_JOURNAL_SIZE=17M
export CL_STORAGE_FLAGS="--log-level info --metrics 127.0.0.1:0"
cl_e2e_begin e2e-fullfs "$1" 0 || fail "cluster did not start"
MNTS=""
# Stops the daemons before the images are unmounted.
cleanup() {
	cl_stop_all
	for m in $MNTS; do
		mountpoint -q "$m" && { umount "$m" || umount -l "$m"; }
	done
	[ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"
}
trap cleanup EXIT
ONE=${FULLFS_ONE:-0} TWO=${FULLFS_TWO:-0}
# BALLAST: the nodes whose data dir fills (the others have room).
FULL_NODES="1 2 3" VOL_SIZE=128M LOAD_BYTES=160M BALLAST=""
[ "$ONE" = 1 ] && FULL_NODES=3 VOL_SIZE=256M LOAD_BYTES=300M BALLAST=3
# FULLFS_TWO: node-1 refuses too (new space in its rows short of room).
[ "$TWO" = 1 ] && VOL_SIZE=256M LOAD_BYTES=300M BALLAST="2 3"
for i in 1 2 3; do
	d="$CL_DIR/storage-$i/data"
	mkdir -p "$d"
	img_size=512M
	[ -n "$BALLAST" ] || img_size=96M
	truncate -s $img_size "$CL_DIR/img-$i" && mkfs.ext4 -q -F "$CL_DIR/img-$i" ||
		fail "cannot make an ext4 image (mkfs.ext4)"
	mount -o loop "$CL_DIR/img-$i" "$d" || fail "cannot loop-mount $CL_DIR/img-$i"
	MNTS="$MNTS $d"
	if [[ " $BALLAST " == *" $i "* ]]; then
		fallocate -l 370M "$d/lost+found/ballast" || fail "cannot make node-$i's ballast file"
	fi
	cl_start_storage "$i"
done
cl_wait_nodes 3 || fail "storage nodes did not register"
# gauge I NAME: node-I's NAME (its /metrics, parsed by prometheus_client's
# text parser); refused I: its zipline_storage_writes_refused_full_total.
gauge() {
	local port
	port=$(cl_metrics_port "$CL_DIR/storage-$1/log")
	[ -n "$port" ] || fail "node-$1 logged no metrics port"
	mt_sum "$2" -- "http://127.0.0.1:$port/metrics"
}
refused() { gauge "$1" zipline_storage_writes_refused_full_total; }
for i in 1 2 3; do
	[ "$(refused "$i")" = 0 ] || fail "node-$i refused writes before any load"
done
df -k "$CL_DIR"/storage-3/data | tail -1 | awk '{print "fullfs_e2e: node-3 data dir: " $4 " KiB free of " $2}'

"$ZL" volume create full --size $VOL_SIZE --replicas 3 --chunk-size 1M --io-timeout 10 >/dev/null || fail "create"
LOG=$CL_DIR/load.log
# 128 MiB of volume, about 40 MiB of room: random writes fill it well
# before 60 s; the writer goes on, its writes failing, then stops.
set +e
timeout 200 "$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume full --log "$LOG" --qd 8 --seed 11 \
	--min-len 4K --max-len 32K --bytes $LOAD_BYTES --seconds 60 >"$CL_DIR/load.out" 2>&1
rc=$?
set -e
grep "LOAD:" "$CL_DIR/load.out" | tail -1 | sed 's/^/fullfs_e2e: /'
[ "$rc" -le 1 ] || fail "the writer ended with $rc: $(tail -5 "$CL_DIR/load.out")"
acked=$(grep -c '^A ' "$LOG" || true)
failed=$(grep -c '^F ' "$LOG" || true)
[ "$acked" -gt 0 ] || fail "no write acknowledged"
[ "$ONE" = 1 ] || [ "$failed" -gt 0 ] || fail "no write failed: the data dirs never filled ($(df -k "$CL_DIR"/storage-1/data | tail -1))"
grep -h -m1 -E "disk full|writes that need new space refused" "$CL_DIR"/storage-*/log | sed -n "1s/^/fullfs_e2e: /p"
ok "$acked writes acknowledged, $failed failed once the data dirs were full"
for i in $FULL_NODES; do
	n=$(refused "$i")
	echo "fullfs_e2e: node-$i: zipline_storage_writes_refused_full_total $n"
	[ "$n" -gt 0 ] || fail "node-$i's data dir filled but it counts no write refused for room"
done
set +e
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume full --log "$LOG" >"$CL_DIR/check.out" 2>&1
rc=$?
set -e
grep -h "chunk file write failed after its journal record was durable" "$CL_DIR"/storage-*/log >"$CL_DIR/lost" || true
[ "$rc" = 0 ] || fail "acknowledged writes read back wrong: $(grep -E 'BAD|CHECK|failed' "$CL_DIR/check.out" | sed -n 1,5p); $(wc -l <"$CL_DIR/lost") log lines of writes that could not reach their chunk files"
[ ! -s "$CL_DIR/lost" ] || fail "$(wc -l <"$CL_DIR/lost") acknowledged writes could not reach their chunk files: $(sed -n 1,2p "$CL_DIR/lost")"
grep "CHECK:" "$CL_DIR/check.out" | sed 's/^/fullfs_e2e: /'
if [ "$ONE" = 1 ]; then
	# The members in sync hold the same data: a write node-3 refused as
	# primary reached no backup.
	"$ZL" volume verify full >"$CL_DIR/verify.out" 2>&1 ||
		fail "zl volume verify: the in-sync members differ: $(grep -m 3 differs "$CL_DIR/verify.out"; tail -n 1 "$CL_DIR/verify.out")"
	tail -n 1 "$CL_DIR/verify.out" | sed 's/^/fullfs_e2e: /'
	# zl status names the full disk (status records every 2 s).
	for _ in $(seq 1 100); do
		"$ZL" status >"$CL_DIR/status.out" 2>&1
		grep -q "^disk full    node=node-3:" "$CL_DIR/status.out" && break
		sleep 0.1
	done
	sed -n '1p;/^disk full/p' "$CL_DIR/status.out" | sed 's/^/fullfs_e2e: /'
	grep -q "^disk full    node=node-3:" "$CL_DIR/status.out" || fail "zl status does not name node-3's full disk"
	head -1 "$CL_DIR/status.out" | grep -q "1 node's data disk full" ||
		fail "zl status's health line does not count node-3's full disk: $(head -1 "$CL_DIR/status.out")"
	# Recovery to the full node backs off: tries per member over 20 s.
	mark1=$(wc -l <"$CL_DIR/storage-1/log") mark2=$(wc -l <"$CL_DIR/storage-2/log")
	sleep 20 # deliberate: the window the tries are counted in
	tries=$({ tail -n +$((mark1 + 1)) "$CL_DIR/storage-1/log"; tail -n +$((mark2 + 1)) "$CL_DIR/storage-2/log"; } |
		grep -E "recovery (waits for room|pass failed)" | grep -o 'vol=[0-9a-f]* slice=[0-9]* member=node-3' |
		sort | uniq -c | sort -rn)
	most=$(echo "$tries" | awk 'NR == 1 {print $1 + 0}')
	echo "fullfs_e2e: recovery tries to node-3 in 20 s: $(echo "$tries" | awk '{n += $1} END {print n + 0}') over $(echo "$tries" | grep -c member=) members, at most ${most:-0} for one"
	[ "${most:-0}" -le 6 ] || fail "recovery to the full node-3 tried one member ${most} times in 20 s (no back-off)"
	# Room is made in node-3's data dir; its recovery goes on by itself.
	d="$CL_DIR/storage-3/data"
	rm -f "$d/lost+found/ballast"
	df -k "$d" | tail -1 | awk '{print "fullfs_e2e: node-3 ballast removed: " $4 " KiB free of " $2}'
	vid=$("$ZL" volume inspect full | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
	/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" wait "$vid" --all 3 90 >/dev/null ||
		fail "node-3 did not catch up within 90 s of the ballast's removal: $(/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" summary "$vid")"
	for _ in $(seq 1 100); do
		"$ZL" status >"$CL_DIR/status.out" 2>&1
		grep -q "^disk full" "$CL_DIR/status.out" || break
		sleep 0.1
	done
	head -1 "$CL_DIR/status.out" | sed 's/^/fullfs_e2e: after room was made: /'
	! grep -q "^disk full" "$CL_DIR/status.out" || fail "zl status names a full disk after node-3's ballast was removed"
	"$ZL" volume verify full >"$CL_DIR/verify.out" 2>&1 ||
		fail "zl volume verify after node-3's recovery: $(grep -m 3 differs "$CL_DIR/verify.out"; tail -n 1 "$CL_DIR/verify.out")"
	tail -n 1 "$CL_DIR/verify.out" | sed 's/^/fullfs_e2e: after room was made: /'
	"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume full --log "$LOG" >"$CL_DIR/check.out" 2>&1 ||
		fail "acknowledged writes read back wrong after node-3's recovery: $(grep -E 'BAD|CHECK|failed' "$CL_DIR/check.out" | sed -n 1,5p)"
fi
if [ "$TWO" = 1 ]; then
	# No slice fell below min_size (2): where both backups were near
	# full, the primary (node-1) refused the writes that need new space
	# itself, nothing applied anywhere, instead of having both taken out
	# when they refused and every write of the slice wait for io_timeout.
	vid=$("$ZL" volume inspect full | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
	rows=$(/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" rows "$vid")
	short=$(echo "$rows" | awk '{n = 0; for (i = 4; i <= NF; i++) n += $i ~ /:in_sync$/; s += n < 2} END {print s + 0}')
	echo "fullfs_e2e: $(/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" summary "$vid"), $short below min_size"
	[ "$short" = 0 ] || fail "$short slices fell below min_size with node-2 and node-3 full: $(echo "$rows" | head -5)"
	grep -h -m1 "writes that need new space refused NOSPC" "$CL_DIR/storage-1/log" | sed 's/^/fullfs_e2e: node-1: /'
	grep -q "writes that need new space refused NOSPC" "$CL_DIR/storage-1/log" ||
		fail "node-1 never refused a write for its rows' full members"
	# zl status names both disks, full or near full (status records
	# every 2 s).
	for _ in $(seq 1 100); do
		"$ZL" status >"$CL_DIR/status.out" 2>&1
		[ "$(grep -cE '^disk (near )?full +node=node-[23]:' "$CL_DIR/status.out")" = 2 ] && break
		sleep 0.1
	done
	sed -n '1p;/^disk/p' "$CL_DIR/status.out" | sed 's/^/fullfs_e2e: /'
	[ "$(grep -cE '^disk (near )?full +node=node-[23]:' "$CL_DIR/status.out")" = 2 ] ||
		fail "zl status does not name node-2's and node-3's (near) full disks: $(cat "$CL_DIR/status.out")"
	# The metrics say so: node-2's and node-3's disks near full, node-1
	# heard it from both (sampled every second).
	for _ in $(seq 1 30); do
		[ "$(gauge 1 zipline_storage_peers_near_full)" = 2 ] && break
		sleep 0.1
	done
	echo "fullfs_e2e: zipline_storage_disk_near_full node-1..3: $(gauge 1 zipline_storage_disk_near_full) $(gauge 2 zipline_storage_disk_near_full) $(gauge 3 zipline_storage_disk_near_full); node-1's zipline_storage_peers_near_full $(gauge 1 zipline_storage_peers_near_full)"
	[ "$(gauge 1 zipline_storage_disk_near_full)" = 0 ] && [ "$(gauge 2 zipline_storage_disk_near_full)" = 1 ] &&
		[ "$(gauge 3 zipline_storage_disk_near_full)" = 1 ] || fail "zipline_storage_disk_near_full is not 0 1 1"
	[ "$(gauge 1 zipline_storage_peers_near_full)" = 2 ] || fail "node-1's zipline_storage_peers_near_full is not 2"
	# A refused write fails at once (the client's io_timeout is 10 s).
	lat=$(grep "LOAD:" "$CL_DIR/load.out" | tail -1 | grep -o 'lat_max_ms=[0-9]*' | cut -d= -f2)
	[ "${lat:-99999}" -lt 5000 ] || fail "a write waited ${lat} ms (a slice below min_size waits for io_timeout)"
	"$ZL" volume verify full >"$CL_DIR/verify.out" 2>&1 ||
		fail "zl volume verify: the in-sync members differ: $(grep -m 3 differs "$CL_DIR/verify.out"; tail -n 1 "$CL_DIR/verify.out")"
	tail -n 1 "$CL_DIR/verify.out" | sed 's/^/fullfs_e2e: /'
	# Room is made on node-2 and node-3: the members taken out catch up,
	# and node-1 learns (its PINGs) that its rows have room again: new
	# writes succeed, none refused.
	rm -f "$CL_DIR"/storage-[23]/data/lost+found/ballast
	/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" wait "$vid" --all 3 90 >/dev/null ||
		fail "the members did not catch up within 90 s of the ballasts' removal: $(/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" summary "$vid")"
	for _ in $(seq 1 50); do
		grep -q "peer data dir has room again: node=node-3" "$CL_DIR/storage-1/log" &&
			grep -q "peer data dir has room again: node=node-2" "$CL_DIR/storage-1/log" && break
		sleep 0.1
	done
	grep -q "peer data dir has room again: node=node-2" "$CL_DIR/storage-1/log" &&
		grep -q "peer data dir has room again: node=node-3" "$CL_DIR/storage-1/log" ||
		fail "node-1 did not see node-2 and node-3 have room again"
	n0=$(grep -c '^F ' "$LOG" || true)
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume full --log "$LOG" --qd 8 --seed 12 \
		--min-len 4K --max-len 32K --bytes 16M --seconds 30 >"$CL_DIR/load2.out" 2>&1 ||
		fail "writes after room was made: $(tail -3 "$CL_DIR/load2.out")"
	grep "LOAD:" "$CL_DIR/load2.out" | tail -1 | sed 's/^/fullfs_e2e: after room was made: /'
	[ "$(grep -c '^F ' "$LOG" || true)" = "$n0" ] || fail "writes failed after room was made"
	for _ in $(seq 1 100); do
		"$ZL" status >"$CL_DIR/status.out" 2>&1
		grep -q "^disk" "$CL_DIR/status.out" || break
		sleep 0.1
	done
	! grep -q "^disk" "$CL_DIR/status.out" || fail "zl status names a (near) full disk after room was made: $(grep '^disk' "$CL_DIR/status.out")"
	[ "$(gauge 1 zipline_storage_peers_near_full)" = 0 ] && [ "$(gauge 2 zipline_storage_disk_near_full)" = 0 ] ||
		fail "the near-full gauges did not fall back to 0 after room was made"
	"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume full --log "$LOG" >"$CL_DIR/check.out" 2>&1 ||
		fail "acknowledged writes read back wrong after room was made: $(grep -E 'BAD|CHECK|failed' "$CL_DIR/check.out" | sed -n 1,5p)"
	"$ZL" volume verify full >"$CL_DIR/verify.out" 2>&1 ||
		fail "zl volume verify after room was made: $(grep -m 3 differs "$CL_DIR/verify.out"; tail -n 1 "$CL_DIR/verify.out")"
fi
echo "fullfs_e2e: PASS (full data dirs: writes refused, every acknowledged write reads back)"
