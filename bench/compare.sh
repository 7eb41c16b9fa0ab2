#!/usr/bin/env bash
# `make bench`: the whole story in one run. The same fio jobs against
#  - a local file on the same disk (libaio, O_DIRECT; and again with O_DSYNC,
#    the durability every acknowledged Zipline write has, once with one job
#    and once with three at the same time: the durable writes of three
#    replicas sharing this disk),
#  - nbdkit's memory plugin over a unix socket (what the NBD protocol alone
#    costs),
#  - Zipline volumes with 1 and 3 replicas through `zl volume serve --nbd`,
#    plus `zl bench` (the client library directly) for the same jobs,
#  - a 3-replica volume on the path a pod's block volume takes: CreateVolume
#    and ControllerPublish on zipline-controller, NodeStage and NodePublish
#    (block mode) on zipline-node, driven by bench/csi_attach.py without
#    kubelet; fio runs on the published device (the loop device over the
#    attach process's FUSE file).
# Per job and target: IOPS, MiB/s, mean and p99 latency, the ratio to the
# local file (reads: O_DIRECT; writes: O_DIRECT+O_DSYNC; 3 replicas: also to
# local / 3), CPU time (user + system, /proc/PID/stat) per I/O of the client
# (nbdkit, the NBD export process, `zl bench` from its rusage, the attach
# process) and of the storage (the three daemons together), and the
# daemons' disk writes per client write per replica (/proc/PID/io, and the
# durable writes from the daemons' own counters: RWF_DSYNC writes, fdatasyncs,
# journal records). The Zipline targets run once per storage write path
# (WRITE_PATHS, default "direct journal": zipline-storage --write-path). Then
# callgrind instructions per 4 KiB read and write of storage and client
# (bench/auth_instr.sh, one short run each). Prints markdown tables.
#   bench/compare.sh [BUILD_DIR]
#   env: RUNTIME=5 (s per job), WSET=512M, INSTR_SECONDS=4 (callgrind job),
#        INSTR=0 skips callgrind, CSI=0 skips the CSI path (run on the last
#        write path), WRITE_PATHS="direct journal"
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
RUNTIME=${RUNTIME:-5}
WSET=${WSET:-512M}
export CL_BIN=$BUILD/bin
CL_DIR=$(mktemp -d "$BUILD/bench.XXXXXX")
export CL_DIR
source "$SRC/test/lib/cluster.sh"
source "$SRC/bench/lib.sh"
NBDKIT_PID='' CSI_VOL='' CSI_PID=''
CSI_NODE=bench-node
CSI_PY=(/usr/bin/python3 "$SRC/bench/csi_attach.py")
cleanup() {
	[ -n "$NBDKIT_PID" ] && kill "$NBDKIT_PID" 2>/dev/null
	if [ -n "$CSI_VOL" ]; then
		"${CSI_PY[@]}" down "$CL_DIR/csi" "$CSI_VOL" "$CSI_NODE" >/dev/null 2>&1 ||
			{ [ -n "$CSI_PID" ] && kill "$CSI_PID" 2>/dev/null; }
	fi
	cl_stop_all
	rm -rf "$CL_DIR"
}
trap cleanup EXIT
ZL="$CL_BIN/zl"
RES="$CL_DIR/results.tsv"
: >"$RES"
TICK=$(getconf CLK_TCK)
T0=$(date +%s)
# say MSG: progress on stderr, with the time of day.
say() { echo "$(date +%T) bench: $*" >&2; }

# job name|fio args
JOBS=(
	"4k randread QD1|--rw=randread --bs=4k --iodepth=1"
	"4k randread QD32|--rw=randread --bs=4k --iodepth=32"
	"4k randwrite QD1|--rw=randwrite --bs=4k --iodepth=1"
	"4k randwrite QD32|--rw=randwrite --bs=4k --iodepth=32"
	"1M write QD8|--rw=write --bs=1M --iodepth=8"
	"1M read QD8|--rw=read --bs=1M --iodepth=8"
)

# What the current target's CPU and disk figures are taken from: the client
# process (CLI_PID, empty: none), the storage daemons (SRV_PIDS, empty:
# none), the replica count (REPL).
CLI_PID='' SRV_PIDS='' REPL=0

# record LABEL JOB IOPS MIBS MEAN P99 IOS CLI_TICKS|- SRV_TICKS|- SYSCW|- WBYTES|- DURABLE|-
record() {
	/usr/bin/python3 - "$TICK" "$REPL" "$@" >>"$RES" <<'PY'
import sys
tck, repl, label, job, iops, mibs, mean, p99, ios, cli, srv, syscw, wb, dur = sys.argv[1:]
tck, repl, ios = int(tck), int(repl), int(ios)
if ios <= 0:
    sys.exit("bench: %s, %s: no I/O done" % (label, job))
us = lambda t: "-" if t == "-" else "%.1f" % (int(t) / tck / ios * 1e6)
per = lambda v, f: "-" if v == "-" or "write" not in job or not repl else f % (int(v) / ios / repl)
print("\t".join([label, job, iops, mibs, mean, p99, str(repl), us(cli), us(srv),
                 per(syscw, "%.2f"), per(wb, "%.0f"), per(dur, "%.3f")]))
PY
}

# durable JOB: the daemons' durable disk writes so far (their status records'
# durable_ios, summed once the records stopped changing), for write jobs on a
# Zipline target; "-" otherwise.
durable() {
	if [ -z "$SRV_PIDS" ] || [[ $1 != *write* ]]; then echo -; return; fi
	/usr/bin/python3 "$SRC/test/lib/heal_tool.py" etcd "$CL_ETCD" stable-sum 30 durable_ios
}

# sample: "CLI_TICKS SRV_TICKS SYSCW WBYTES" of the current target ("-" for none).
sample() {
	local c=- s=- w="- -"
	[ -n "$CLI_PID" ] && c=$(bench_cpu_ticks "$CLI_PID")
	if [ -n "$SRV_PIDS" ]; then
		# shellcheck disable=SC2086
		s=$(bench_cpu_ticks $SRV_PIDS)
		# shellcheck disable=SC2086
		w=$(bench_io_writes $SRV_PIDS)
	fi
	echo "$c $s $w"
}

# delta "A B C D" "A' B' C' D'": the differences, "-" kept.
delta() {
	local -a a b
	local i out=""
	read -r -a a <<<"$1"
	read -r -a b <<<"$2"
	for i in 0 1 2 3; do
		if [ "${a[i]}" = - ]; then out="$out -"; else out="$out $((b[i] - a[i]))"; fi
	done
	echo "$out"
}

# fio_run TARGET_LABEL ENGINE_ARGS...: prefill, then every job; appends to $RES.
# No ramp time: the CPU and disk figures cover exactly the I/Os fio counts.
fio_run() {
	local label=$1; shift
	say "$label: prefill $WSET"
	fio --name=prefill "$@" --rw=write --bs=1M --iodepth=8 --size="$WSET" --output=/dev/null
	for j in "${JOBS[@]}"; do
		local name=${j%%|*} args=${j#*|} s0 s1 r
		say "$label: $name"
		d0=$(durable "$name")
		s0=$(sample)
		# shellcheck disable=SC2086
		fio --name=job "$@" $args --size="$WSET" --time_based --runtime="$RUNTIME" \
			--output-format=json --output="$CL_DIR/out.json"
		s1=$(sample)
		d1=$(durable "$name")
		r=$(/usr/bin/python3 - "$CL_DIR/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
io = d["read"] if d["read"]["io_bytes"] > 0 else d["write"]
lat = io["clat_ns"] if io["clat_ns"]["N"] else io["lat_ns"]
p99 = lat.get("percentile", {}).get("99.000000", 0) / 1000
print("%.0f %.1f %.0f %.0f %d" % (io["iops"], io["bw_bytes"] / 1048576, io["lat_ns"]["mean"] / 1000,
                                  p99, io["total_ios"]))
PY
)
		# shellcheck disable=SC2046
		# shellcheck disable=SC2086
		record "$label" "$name" $r $(delta "$s0" "$s1") $(ddelta "$d0" "$d1")
	done
}

# ddelta D0 D1: D1 - D0, or "-".
ddelta() { if [ "$1" = - ]; then echo -; else echo $(($2 - $1)); fi; }

# zl_run LABEL VOLUME: the same jobs with `zl bench` (client CPU: its rusage).
zl_run() {
	local label=$1 vol=$2
	for j in "${JOBS[@]}"; do
		local name=${j%%|*} args=${j#*|} rw bs qd s0 s1 out r
		rw=$(sed -n 's/.*--rw=\([a-z]*\).*/\1/p' <<<"$args")
		bs=$(sed -n 's/.*--bs=\([0-9a-zA-Z]*\).*/\1/p' <<<"$args")
		qd=$(sed -n 's/.*--iodepth=\([0-9]*\).*/\1/p' <<<"$args")
		say "$label: $name"
		d0=$(durable "$name")
		s0=$(sample)
		out=$(bench_zl_bench_cpu "$ZL" bench "$vol" --rw "$rw" --bs "$bs" --qd "$qd" \
			--seconds "$RUNTIME" --size "$WSET" --json)
		s1=$(sample)
		d1=$(durable "$name")
		r=$(/usr/bin/python3 - "$out" "$TICK" <<'PY'
import json, sys
lines = sys.argv[1].strip().split("\n")
d, cpu = json.loads(lines[0]), float(lines[1])
if d["errors"]:
    sys.exit("zl bench reported errors: %s" % lines[0])
print("%.0f %.1f %.0f %.0f %d %d" % (d["iops"], d["mib_s"], d["lat_us"]["avg"], d["lat_us"]["p99"],
                                     d["ios"], round(cpu * int(sys.argv[2]))))
PY
)
		read -r -a r <<<"$r"
		read -r -a s0 <<<"$s0"
		read -r -a s1 <<<"$s1"
		record "$label" "$name" "${r[@]:0:5}" "${r[5]}" $((s1[1] - s0[1])) \
			$((s1[2] - s0[2])) $((s1[3] - s0[3])) "$(ddelta "$d0" "$d1")"
	done
}

# 1. Local file, same disk.
fio_run "local file (O_DIRECT)" --ioengine=libaio --direct=1 --filename="$CL_DIR/local.img"
# The same file with O_DSYNC: the durability Zipline gives every acknowledged
# write (each replica writes with RWF_DSYNC), for a fair comparison.
fio_run "local file (O_DIRECT+O_DSYNC)" --ioengine=libaio --direct=1 --sync=dsync --filename="$CL_DIR/local.img"
# Three such writers at once: what this one disk gives three replicas that
# each make every write durable at the same time (the floor of a 3-replica
# write here: IOPS summed, latency the mean of the three).
fio_run "local file x3 (O_DSYNC, 3 jobs at once)" --ioengine=libaio --direct=1 --sync=dsync \
	--numjobs=3 --group_reporting --filename="$CL_DIR/local.img"
rm -f "$CL_DIR/local.img"

# 2. nbdkit memory plugin over a unix socket.
nbdkit --foreground --unix "$CL_DIR/nbdkit.sock" --exit-with-parent memory size=1G &
NBDKIT_PID=$!
for _ in $(seq 1 50); do [ -S "$CL_DIR/nbdkit.sock" ] && break; sleep 0.1; done
CLI_PID=$NBDKIT_PID
fio_run "nbdkit memory (NBD only)" --ioengine=nbd --uri="nbd+unix:///?socket=$CL_DIR/nbdkit.sock"
kill "$NBDKIT_PID"; wait "$NBDKIT_PID" 2>/dev/null || true; NBDKIT_PID='' CLI_PID=''

# 3. Zipline cluster, once per write path (a fresh cluster each).
read -r -a PATHS <<<"${WRITE_PATHS:-direct journal}"
for wp in "${PATHS[@]}"; do
	export CL_STORAGE_FLAGS="--write-path $wp"
	cl_start_etcd
	export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
	for i in 1 2 3; do cl_start_storage "$i"; done
	cl_wait_nodes 3
	SRV_PIDS="$(cl_pid storage-1) $(cl_pid storage-2) $(cl_pid storage-3)"
	for r in 1 3; do
		REPL=$r
		"$ZL" volume create "bench$r" --size 1G --replicas "$r" >/dev/null
		mkdir -p "$CL_DIR/serve-$r"
		"$ZL" volume serve "bench$r" --nbd "unix:$CL_DIR/zl$r.sock" >>"$CL_DIR/serve-$r/log" 2>&1 &
		echo $! >"$CL_DIR/serve-$r/pid"
		CLI_PID=$(cl_pid "serve-$r")
		for _ in $(seq 1 100); do nbdinfo --size "nbd+unix:///?socket=$CL_DIR/zl$r.sock" >/dev/null 2>&1 && break; sleep 0.1; done
		fio_run "zipline ${r}x via NBD ($wp)" --ioengine=nbd --uri="nbd+unix:///?socket=$CL_DIR/zl$r.sock"
		cl_stop "serve-$r"
		CLI_PID=
		zl_run "zipline ${r}x zl bench ($wp)" "bench$r"
	done
	[ "$wp" = "${PATHS[-1]}" ] && break # the CSI path below uses the last one's cluster
	cl_stop_all
	SRV_PIDS=
	rm -rf "$CL_DIR"/storage-* "$CL_DIR"/etcd*
done

# 4. The CSI-mounted path (block mode), 3 replicas.
if [ "${CSI:-1}" != 0 ]; then
	REPL=3
	cl_start_csi "$CSI_NODE"
	read -r CSI_VOL CSI_TARGET CSI_PID < <("${CSI_PY[@]}" up "$CL_DIR/csi" bench-csi 1073741824 3 "$CSI_NODE")
	[ -b "$CSI_TARGET" ] || { say "$CSI_TARGET is not a block device"; exit 1; }
	CLI_PID=$CSI_PID
	fio_run "zipline 3x via CSI (loop on FUSE, $wp)" --ioengine=libaio --direct=1 --filename="$CSI_TARGET"
	"${CSI_PY[@]}" down "$CL_DIR/csi" "$CSI_VOL" "$CSI_NODE"
	CSI_VOL='' CLI_PID=''
fi
cl_stop_all
T1=$(date +%s)

# 5. Callgrind instructions per 4 KiB I/O (deterministic, unlike CPU time).
INS="$CL_DIR/instr.txt"
: >"$INS"
if [ "${INSTR:-1}" != 0 ]; then
	for side in storage client; do
		for rw in randread randwrite; do
			say "callgrind: $side $rw"
			line=$(BUILD=$BUILD INSTR_SECONDS=${INSTR_SECONDS:-4} "$SRC/bench/auth_instr.sh" \
				"$side" "${CL_AUTH:-on}" "$rw" | tail -1)
			echo "$side $rw $line" >>"$INS"
		done
	done
fi
T2=$(date +%s)

echo
echo "Machine: $(nproc) cores, $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg);"
echo "runtime ${RUNTIME}s per job (no ramp), working set $WSET, daemons --auth ${CL_AUTH:-on};"
echo "fio jobs $((T1 - T0)) s, callgrind $((T2 - T1)) s."
/usr/bin/python3 - "$RES" "$INS" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
targets, jobs = [], []
for r in rows:
    if r[0] not in targets:
        targets.append(r[0])
    if r[1] not in jobs:
        jobs.append(r[1])
get = {(r[0], r[1]): r for r in rows}
LD, LS, NK = "local file (O_DIRECT)", "local file (O_DIRECT+O_DSYNC)", "nbdkit memory (NBD only)"
print("""
Ratio: IOPS / the local file's (reads: O_DIRECT; writes: O_DIRECT+O_DSYNC);
for 3 replicas' writes also / (local / 3). "min(l,n)": / min(local, nbdkit).
"+mean/+p99": latency above the local file's, us. CPU: user + system us per
I/O (client: nbdkit, the NBD export, zl bench, or the attach process; storage:
the 3 daemons together; fio's own CPU is not counted). Disk: the daemons'
/proc/PID/io per client write per replica: syscw (write system calls;
io_uring writes are not system calls and do not count) and write_bytes
(bytes sent to the block layer, data and metadata). Durable: the disk writes
a disk must flush for (RWF_DSYNC writes, fdatasyncs, journal records and
superblocks; the daemons' own counters, durable_ios in their status records)
per client write per replica, checkpoints after the job included.""")
for j in jobs:
    ref = get.get((LS if "write" in j else LD, j))
    nk = get.get((NK, j))
    print("\n### %s\n" % j)
    print("| target | IOPS | MiB/s | mean us | p99 us | ratio | min(l,n) | +mean / +p99 us | client CPU us/IO | storage CPU us/IO | disk syscw / write_bytes per write per replica | durable writes per write per replica |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in targets:
        r = get.get((t, j))
        if not r:
            continue
        ratio = mn = dl = "-"
        if ref and float(ref[2]) > 0:
            x = float(r[2]) / float(ref[2])
            ratio = "%.2f" % x
            if r[6] == "3" and "write" in j:
                ratio += " (%.2f of local/3)" % (3 * x)
            dl = "%+.0f / %+.0f" % (float(r[4]) - float(ref[4]), float(r[5]) - float(ref[5]))
        if ref and nk and min(float(ref[2]), float(nk[2])) > 0:
            mn = "%.2f" % (float(r[2]) / min(float(ref[2]), float(nk[2])))
        disk = "-" if r[9] == "-" else "%s / %s B" % (r[9], r[10])
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            t, r[2], r[3], r[4], r[5], ratio, mn, dl, r[7], r[8], disk, r[11]))
ins = [l.split() for l in open(sys.argv[2]) if l.strip()]
if ins:
    print("""
### Callgrind instructions per 4 KiB I/O (bench/auth_instr.sh, QD16)

storage: one daemon, 1-replica volume, instrumented during the job only;
client: `zl bench`'s job loop only (bench_run: start-up, etcd reads, HELLO and teardown excluded).
""")
    print("| side | job | I/Os | instructions | per I/O |")
    print("|---|---|---|---|---|")
    for l in ins:
        kv = dict(x.split("=", 1) for x in l[2:] if "=" in x)
        print("| %s | %s | %s | %s | %s |" % (l[0], l[1], kv.get("ios", "?"), kv.get("Ir", "?"),
                                              kv.get("Ir_per_io", "failed: " + " ".join(l[2:]))))
PY
