#!/usr/bin/env bash
# Same fio jobs against: a local file on the same disk (libaio, O_DIRECT, and
# again with O_DSYNC, the durability every Zipline write has),
# nbdkit's memory plugin over a unix socket (what the NBD protocol alone
# costs), and Zipline volumes with 1 and 3 replicas through `zl volume serve
# --nbd`; plus `zl bench` (the client library directly) for the same jobs.
# Prints one markdown table.
#   bench/compare.sh [BUILD_DIR]     env: RUNTIME=10 (s per job), WSET=512M
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
RUNTIME=${RUNTIME:-10}
WSET=${WSET:-512M}
export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d "$BUILD/bench.XXXXXX")
source "$SRC/test/lib/cluster.sh"
NBDKIT_PID=
cleanup() { [ -n "$NBDKIT_PID" ] && kill "$NBDKIT_PID" 2>/dev/null; cl_stop_all; rm -rf "$CL_DIR"; }
trap cleanup EXIT
ZL="$CL_BIN/zl"
RES="$CL_DIR/results.tsv"
: >"$RES"

# job name|fio args
JOBS=(
	"4k randread QD32|--rw=randread --bs=4k --iodepth=32"
	"4k randwrite QD32|--rw=randwrite --bs=4k --iodepth=32"
	"4k randread QD1|--rw=randread --bs=4k --iodepth=1"
	"1M read QD8|--rw=read --bs=1M --iodepth=8"
	"1M write QD8|--rw=write --bs=1M --iodepth=8"
)

# fio_run TARGET_LABEL ENGINE_ARGS...: prefill, then every job; appends to $RES.
fio_run() {
	local label=$1; shift
	echo "bench: $label: prefill $WSET" >&2
	fio --name=prefill "$@" --rw=write --bs=1M --iodepth=8 --size="$WSET" --output=/dev/null
	for j in "${JOBS[@]}"; do
		local name=${j%%|*} args=${j#*|}
		echo "bench: $label: $name" >&2
		# shellcheck disable=SC2086
		fio --name=job "$@" $args --size="$WSET" --time_based --runtime="$RUNTIME" \
			--ramp_time=1 --output-format=json --output="$CL_DIR/out.json"
		/usr/bin/python3 - "$CL_DIR/out.json" "$label" "$name" >>"$RES" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
io = d["read"] if d["read"]["io_bytes"] > 0 else d["write"]
lat = io["clat_ns"] if io["clat_ns"]["N"] else io["lat_ns"]
pct = lat.get("percentile", {})
p99 = pct.get("99.000000", 0) / 1000
print("\t".join([sys.argv[2], sys.argv[3], "%.0f" % io["iops"], "%.1f" % (io["bw_bytes"] / 1048576),
                 "%.0f" % (io["lat_ns"]["mean"] / 1000), "%.0f" % p99]))
PY
	done
}

# zl_run LABEL VOLUME: the same jobs with `zl bench`.
zl_run() {
	local label=$1 vol=$2
	for j in "${JOBS[@]}"; do
		local name=${j%%|*} args=${j#*|} rw bs qd
		rw=$(sed -n 's/.*--rw=\([a-z]*\).*/\1/p' <<<"$args")
		bs=$(sed -n 's/.*--bs=\([0-9a-zA-Z]*\).*/\1/p' <<<"$args")
		qd=$(sed -n 's/.*--iodepth=\([0-9]*\).*/\1/p' <<<"$args")
		echo "bench: $label: $name" >&2
		"$ZL" bench "$vol" --rw "$rw" --bs "$bs" --qd "$qd" --seconds "$RUNTIME" --size "$WSET" --json >"$CL_DIR/zl.json"
		/usr/bin/python3 - "$CL_DIR/zl.json" "$label" "$name" >>"$RES" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("\t".join([sys.argv[2], sys.argv[3], "%.0f" % d["iops"], "%.1f" % d["mib_s"],
                 "%.0f" % d["lat_us"]["avg"], "%.0f" % d["lat_us"]["p99"]]))
PY
	done
}

# 1. Local file, same disk.
fio_run "local file (libaio, O_DIRECT)" --ioengine=libaio --direct=1 --filename="$CL_DIR/local.img"
# The same file with O_DSYNC: the durability Zipline gives every acknowledged
# write (each replica writes with RWF_DSYNC), for a fair comparison.
fio_run "local file (libaio, O_DIRECT+O_DSYNC)" --ioengine=libaio --direct=1 --sync=dsync --filename="$CL_DIR/local.img"
rm -f "$CL_DIR/local.img"

# 2. nbdkit memory plugin over a unix socket.
nbdkit --foreground --unix "$CL_DIR/nbdkit.sock" --exit-with-parent memory size=1G &
NBDKIT_PID=$!
for _ in $(seq 1 50); do [ -S "$CL_DIR/nbdkit.sock" ] && break; sleep 0.1; done
fio_run "nbdkit memory (NBD only)" --ioengine=nbd --uri="nbd+unix:///?socket=$CL_DIR/nbdkit.sock"
kill "$NBDKIT_PID"; wait "$NBDKIT_PID" 2>/dev/null || true; NBDKIT_PID=

# 3. Zipline cluster.
cl_start_etcd
export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
for i in 1 2 3; do cl_start_storage "$i"; done
cl_wait_nodes 3
for r in 1 3; do
	"$ZL" volume create "bench$r" --size 1G --replicas "$r" >/dev/null
	mkdir -p "$CL_DIR/serve-$r"
	"$ZL" volume serve "bench$r" --nbd "unix:$CL_DIR/zl$r.sock" >>"$CL_DIR/serve-$r/log" 2>&1 &
	echo $! >"$CL_DIR/serve-$r/pid"
	for _ in $(seq 1 100); do nbdinfo --size "nbd+unix:///?socket=$CL_DIR/zl$r.sock" >/dev/null 2>&1 && break; sleep 0.1; done
	fio_run "zipline ${r}x via NBD" --ioengine=nbd --uri="nbd+unix:///?socket=$CL_DIR/zl$r.sock"
	cl_stop "serve-$r"
	zl_run "zipline ${r}x zl bench" "bench$r"
done

echo
echo "Machine: $(nproc) cores, $(uname -r); runtime ${RUNTIME}s per job, working set $WSET"
echo
/usr/bin/python3 - "$RES" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
targets = []
for r in rows:
    if r[0] not in targets:
        targets.append(r[0])
get = {(r[0], r[1]): r[2:] for r in rows}
print("| target | 4k randread QD32 IOPS | 4k randwrite QD32 IOPS | 4k randread QD1 mean / p99 us | 1M read QD8 MiB/s | 1M write QD8 MiB/s |")
print("|---|---|---|---|---|---|")
for t in targets:
    def g(job, i):
        v = get.get((t, job))
        return v[i] if v else "-"
    qd1 = get.get((t, "4k randread QD1"))
    print("| %s | %s | %s | %s | %s | %s |" % (t, g("4k randread QD32", 0), g("4k randwrite QD32", 0),
          ("%s / %s" % (qd1[2], qd1[3])) if qd1 else "-", g("1M read QD8", 1), g("1M write QD8", 1)))
PY
