#!/usr/bin/env bash
# Instructions per 4 KiB I/O with --auth off and on, counted by callgrind
# (deterministic, unlike CPU time on a shared 2-core machine): one daemon,
# a 1-replica volume, `zl bench` QD16 for INSTR_SECONDS (default 8) s.
#   bench/auth_instr.sh storage|client off|on [randwrite|randread]
# INSTR_STORAGE_FLAGS: more flags of the measured daemon (storage side), e.g.
# "--metrics 127.0.0.1:0" for what metrics cost: /metrics is then scraped
# during the job every INSTR_SCRAPE_S seconds (default 15, a common
# Prometheus interval; the first at the start), so rendering counts too.
# INSTR_COLLECT=FUNCTION: count only inside FUNCTION (callgrind
# --toggle-collect), e.g. zl_loop_run_once: the I/O loop's work alone,
# without the other threads (heartbeat, HTTP) whose cost is per second,
# not per I/O.
# INSTR_KEEP=DIR: copy the callgrind output files there (for
# callgrind_annotate: the cost per function).
# storage: the daemon runs under callgrind, instrumented only during the job;
# client: `zl bench` runs under callgrind, counted inside its job loop only
# (bench_run: from the first I/O to the last completion; start-up, etcd
# reads, HELLO and teardown are not per-I/O work).
set -uo pipefail
side=${1:?storage|client}; mode=${2:?off|on}; RW=${3:-randwrite}
SRC=$(cd "$(dirname "$0")/.." && pwd); BUILD=${BUILD:-$SRC/build}
SECS=${INSTR_SECONDS:-8}
export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d /tmp/zl-auth-instr.XXXXXX)
source "$SRC/test/lib/cluster.sh"
cl_start_etcd >/dev/null 2>&1 || exit 1
export ZIPLINE_ETCD=$CL_ETCD
keep() { [ -z "${INSTR_KEEP:-}" ] || { mkdir -p "$INSTR_KEEP" && cp "$CL_DIR"/cg*.out* "$INSTR_KEEP"/; }; }
if [ "$side" = storage ]; then
SP=
trap '[ -n "$SP" ] && kill "$SP" 2>/dev/null; keep; cl_stop_all; rm -rf "$CL_DIR"' EXIT
mkdir -p $CL_DIR/s1/data
port=$(cl_free_port)
valgrind --tool=callgrind --callgrind-out-file=$CL_DIR/cg.out.%p --instr-atstart=no \
  ${INSTR_COLLECT:+--toggle-collect=$INSTR_COLLECT} \
  $CL_BIN/zipline-storage --data-dir $CL_DIR/s1/data --listen 127.0.0.1:$port --node-id node-1 \
  --label zone=z1 --etcd $CL_ETCD --auth $mode ${INSTR_STORAGE_FLAGS:-} > $CL_DIR/s1/log 2>&1 &
SP=$!
cl_wait_nodes 1 || { tail $CL_DIR/s1/log; exit 1; }
$CL_BIN/zl volume create b --size 256M --replicas 1 >/dev/null || exit 1
$CL_BIN/zl bench b --rw write --bs 1M --qd 4 --seconds 3 --size 32M --json >/dev/null
mport=$(cl_metrics_port $CL_DIR/s1/log)
callgrind_control -i on $SP >/dev/null
scraper=
if [ -n "$mport" ]; then
	every=${INSTR_SCRAPE_S:-15}
	(for _ in $(seq 1 $(((SECS + every - 1) / every))); do
		curl -s -o /dev/null -m 5 "http://127.0.0.1:$mport/metrics"
		sleep "$every"
	done) &
	scraper=$!
fi
out=$($CL_BIN/zl bench b --rw $RW --bs 4k --qd 16 --seconds "$SECS" --size 32M --json)
[ -z "$scraper" ] || kill "$scraper" 2>/dev/null
callgrind_control -i off $SP >/dev/null
callgrind_control -d $SP >/dev/null
sleep 2
ios=$(sed -n 's/.*"ios":\([0-9]*\).*/\1/p' <<<"$out")
ir=$(grep -h '^totals:' $CL_DIR/cg.out.* | awk '{s+=$2} END{print s}')
echo "rw=$RW auth=$mode${INSTR_STORAGE_FLAGS:+ flags=\"$INSTR_STORAGE_FLAGS\"}${INSTR_COLLECT:+ collect=$INSTR_COLLECT} ios=$ios Ir=$ir Ir_per_io=$((ir / ios))"
else
trap 'keep; cl_stop_all; rm -rf "$CL_DIR"' EXIT
CL_AUTH=$mode cl_start_storage 1
cl_wait_nodes 1 || exit 1
$CL_BIN/zl volume create b --size 256M --replicas 1 >/dev/null || exit 1
$CL_BIN/zl bench b --rw write --bs 1M --qd 4 --seconds 3 --size 32M --json >/dev/null
out=$(valgrind --tool=callgrind --callgrind-out-file=$CL_DIR/cgc.out --toggle-collect=bench_run $CL_BIN/zl bench b --rw $RW --bs 4k --qd 16 --seconds "$SECS" --size 32M --json 2>/dev/null)
ios=$(sed -n 's/.*"ios":\([0-9]*\).*/\1/p' <<<"$out")
ir=$(grep -h '^summary:\|^totals:' $CL_DIR/cgc.out | head -1 | awk '{print $2}')
echo "client rw=$RW auth=$mode ios=$ios Ir=$ir Ir_per_io=$((ir / ios))"
fi
