#!/usr/bin/env bash
# `make bench-vm`: the frontends of the attach process side by side (issue
# 24), in the test VM (test/vm/vm.sh; the host kernel has no ublk or nbd).
# One guest with ublk_drv and nbd: etcd and one zipline-storage (ext4 on a
# virtio disk, TCP), one 1-replica volume filled once, then the same two fio
# jobs through
#   - /dev/ublkbN  (zipline-node attach --frontend ublk: user copy where the
#     kernel has it, a thread per queue of the guest's two; "ublk-tag" in
#     FRONTENDS: --ublk-copy tag; "ublk-mt": --ublk-threads 2, the same
#     threads given explicitly; "ublk-1t": --ublk-threads 1, every queue on
#     the attach loop),
#   - /dev/nbdN    (zipline-node attach --frontend nbd),
#   - the FUSE path (zipline-node attach --frontend fuse, a loop device with
#     direct I/O over its file, as NodeStage makes it),
# next to `zl bench` (the client library alone) with the same job:
#   rr4k: 4 KiB random reads, QD 32;   seq1m: 1 MiB sequential reads, QD 8;
#   and for ublk: rr4k2j: rr4k from two fio jobs of QD 16, one per CPU (so
#   through two queues), against zl bench's rr4k.
# Per row: IOPS, MiB/s, mean latency, the ratio to zl bench, and the CPU
# time per I/O of the client (the attach process: utime + stime from
# /proc/PID/stat before and after the job; zl bench: its rusage). The kernel's
# own share (nbd's receive threads, ublk's io_uring work, loop) is not in it.
# Numbers from TCG (no KVM here) are slow in absolute terms: only the ratios
# between rows of one run mean something. Prints a markdown table.
#   bench/vm_frontends.sh [BUILD_DIR]      env: RUNTIME=15 (s per job),
#   FRONTENDS="ublk nbd fuse" (any of them, and ublk-tag, ublk-mt, ublk-1t)
# Not a test: nothing is asserted beyond the jobs running without errors.
set -uo pipefail

if [[ ${1:-} == --guest ]]; then
	# ---- inside the guest: BUILD WORK
	build=$2 work=$3
	bin=$build/bin
	src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	runtime=${RUNTIME:-15}
	tick=$(getconf CLK_TCK)
	etcd_url=http://127.0.0.1:2379
	data=/mnt/zl-bench-data
	res=$work/results.tsv
	apid=''
	say() { echo "$(date +%T) vm_frontends: $*" >&2; }
	fail() {
		say "FAIL: $*"
		exit 1
	}
	# shellcheck source=../test/vm/guest-etcd.sh
	. "$src/test/vm/guest-etcd.sh" || exit 1
	# shellcheck source=lib.sh
	. "$src/bench/lib.sh" || exit 1
	trap '[[ -n $apid ]] && kill -9 $apid 2>/dev/null; kill -9 ${spid:-} ${etcd_pid:-} 2>/dev/null' EXIT
	disk=${ZL_VM_DISKS%% *}
	ip link set lo up
	mkdir -p "$data" && mkfs.ext4 -q -F "$disk" && mount "$disk" "$data" || fail "no ext4 on $disk"
	vm_guest_etcd_start "$data/etcd" "$work/etcd.log" "$etcd_url"
	since=$(date +%s)
	mkdir -p "$data/storage-1"
	"$bin/zipline-storage" --data-dir "$data/storage-1" --listen 127.0.0.1:7101 --node-id node-1 \
		--etcd "$etcd_url" --transport tcp --auth off --log-level warn >>"$work/storage.log" 2>&1 &
	spid=$!
	vm_guest_wait_node "$etcd_url" node-1 "$spid" "$since" 300 "$work/storage.log"
	export ZIPLINE_ETCD=$etcd_url
	"$bin/zl" volume create benchvol --size 256M --replicas 1 >/dev/null || fail "zl volume create"
	vid=$("$bin/zl" volume inspect benchvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
	# Written once, so every read finds data on the daemon's disk.
	"$bin/zl" bench benchvol --rw write --bs 1m --qd 8 --size 256M --count 256 --json \
		>"$work/fill.json" || fail "filling the volume failed"
	: >"$res"

	# attach FRONTEND: starts an attach process (apid); dev: its device.
	attach() {
		local dir=/run/zl-bench-$1 line i fe=(--frontend "$1")
		[[ $1 == ublk-tag ]] && fe=(--frontend ublk --ublk-copy tag)
		[[ $1 == ublk-mt ]] && fe=(--frontend ublk --ublk-threads 2)
		[[ $1 == ublk-1t ]] && fe=(--frontend ublk --ublk-threads 1)
		mkdir -p "$dir"
		"$bin/zipline-node" attach --volume-id "$vid" --dir "$dir" --etcd "$etcd_url" \
			--transport tcp "${fe[@]}" --ready-fd 3 --log-level warn \
			3>"$work/$1.ready" >>"$work/attach-$1.log" 2>&1 &
		apid=$!
		for ((i = 0; i < 1200; i++)); do
			line=$(head -1 "$work/$1.ready" 2>/dev/null)
			[[ -n $line ]] && break
			sleep 0.1
		done
		[[ $line == READY* ]] || fail "attach --frontend $1: '${line:-nothing}'"
		if [[ $1 == fuse ]]; then
			dev=$(losetup --direct-io=on -f --show "$dir/fuse/disk") ||
				fail "losetup on $dir/fuse/disk"
		else
			dev=$(sed -n 's/.* dev=\(\/dev\/[a-z0-9]*\).*/\1/p' <<<"$line")
		fi
		[[ -b $dev ]] || fail "attach --frontend $1: no device in '$line'"
	}
	detach() {
		kill -TERM "$apid"
		wait "$apid" || fail "the attach process exited $? on SIGTERM"
		apid=''
	}
	# fio_job LABEL DEV JOB PID: one fio job on DEV, the attach process PID's CPU around it.
	fio_job() {
		local label=$1 dev=$2 job=$3 pid=$4 args c0 c1
		case $job in
		rr4k) args=(--rw=randread --bs=4k --iodepth=32) ;;
		seq1m) args=(--rw=read --bs=1m --iodepth=8) ;;
		# The same 32 in flight from two jobs, one per CPU: both queues.
		rr4k2j) args=(--rw=randread --bs=4k --iodepth=16 --numjobs=2 --group_reporting=1
			--cpus_allowed=0,1 --cpus_allowed_policy=split) ;;
		esac
		c0=$(bench_cpu_ticks "$pid")
		fio --name="$job" --filename="$dev" --ioengine=libaio --direct=1 --size=256M \
			--time_based --runtime="$runtime" --output-format=json "${args[@]}" \
			>"$work/fio-$label-$job.json" || fail "fio $job on $dev ($label)"
		c1=$(bench_cpu_ticks "$pid")
		/usr/bin/python3 - "$work/fio-$label-$job.json" "$label" "$job" $((c1 - c0)) "$tick" \
			>>"$res" <<'PY' || fail "fio $job on $dev ($label): errors"
import json, sys
path, label, job, ticks, tck = sys.argv[1:]
r = json.load(open(path))["jobs"][0]
if r["error"] or r["read"]["total_ios"] == 0:
    sys.exit(1)
io = r["read"]
print("\t".join([label, job, "%.0f" % io["iops"], "%.1f" % (io["bw_bytes"] / 1048576),
                 "%.0f" % (io["lat_ns"]["mean"] / 1000), str(io["total_ios"]),
                 "%.4f" % (int(ticks) / int(tck))]))
PY
		say "$label $job: $(tail -1 "$res" | cut -f3,4)"
	}
	zl_job() {
		local job=$1 args out
		case $job in
		rr4k) args=(--rw randread --bs 4k --qd 32) ;;
		seq1m) args=(--rw read --bs 1m --qd 8) ;;
		esac
		out=$(bench_zl_bench_cpu "$bin/zl" bench benchvol "${args[@]}" --seconds "$runtime" \
			--size 256M --json) || fail "zl bench $job"
		/usr/bin/python3 - "$out" "$job" >>"$res" <<'PY' || fail "zl bench $job: errors"
import json, sys
lines = sys.argv[1].strip().split("\n")
d, cpu = json.loads(lines[0]), float(lines[1])
if d["errors"]:
    sys.exit(1)
print("\t".join(["zl bench", sys.argv[2], "%.0f" % d["iops"], "%.1f" % d["mib_s"],
                 "%.0f" % d["lat_us"]["avg"], str(d["ios"]), "%.4f" % cpu]))
PY
		say "zl bench $job: $(tail -1 "$res" | cut -f3,4)"
	}

	for job in rr4k seq1m; do zl_job "$job"; done
	for fe in ${FRONTENDS:-ublk nbd fuse}; do
		attach "$fe"
		for job in rr4k seq1m; do fio_job "$fe" "$dev" "$job" "$apid"; done
		[[ $fe == ublk* ]] && fio_job "$fe" "$dev" rr4k2j "$apid"
		[[ $fe == fuse ]] && losetup -d "$dev"
		detach
	done
	cp "$res" "$work/results.done"
	exit 0
fi

# ---- on the host
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd -P)
for t in zipline-storage zl zipline-node; do
	[[ -x $build/bin/$t ]] || {
		echo "vm_frontends: $build/bin/$t is not built" >&2
		exit 1
	}
done
work=$(mktemp -d "$build/vm-frontends.XXXXXX")
truncate -s 1G "$work/disk.img"
bash "$src/test/vm/vm.sh" run -M ublk_drv,nbd,loop --share "$build" --disk "$work/disk.img" -m 2G \
	-t 1200 -- bash "$src/bench/vm_frontends.sh" --guest "$build" "$work"
rc=$?
if ((rc != 0)) || [[ ! -f $work/results.done ]]; then
	echo "vm_frontends: the guest failed (exit $rc); logs in $work" >&2
	exit 1
fi
/usr/bin/python3 - "$work/results.done" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
base = {r[1]: float(r[2]) for r in rows if r[0] == "zl bench"}
names = {"rr4k": "4 KiB randread QD32", "seq1m": "1 MiB read QD8",
         "rr4k2j": "4 KiB randread QD32, 2 jobs (1 per CPU)"}
base["rr4k2j"] = base["rr4k"]
print("| path | job | IOPS | MiB/s | mean µs | of zl bench | CPU µs per I/O (client) |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r[1], r[0] != "zl bench")):
    label, job, iops, mibs, mean, ios, cpu = r
    print("| %s | %s | %s | %s | %s | %.0f %% | %.1f |" % (
        label, names[job], iops, mibs, mean, 100 * float(iops) / base[job],
        1e6 * float(cpu) / max(1, int(ios))))
PY
rm -rf "$work"
