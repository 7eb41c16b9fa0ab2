#!/usr/bin/env bash
# The storage daemons' metrics and probes (issue 26 items 1-2;
# storage/storage_metrics.c, lib/metrics): 3 daemons --heal on with
# --metrics 127.0.0.1:0, a real manager, a 3-replica volume. Every scrape is
# a real HTTP GET parsed by prometheus_client's text parser
# (test/lib/metrics_tool.py), not by Zipline's code.
#  1. /healthz and /readyz answer 200 on every daemon; /metrics parses and
#     carries the families named below; an unknown path answers 404.
#  2. A known load moves the counters by exactly that much: `zl bench
#     --count 10000` 4 KiB random writes (ios=10000 in its own report), then
#     5000 4 KiB reads; summed over the daemons, the write requests answered
#     without error rose by 10000 and their bytes by 10000 x 4 KiB, the
#     forwarded writes by 20000 (two backups each) and their bytes, the reads
#     by 5000 and 5000 x 4 KiB, the volume's own counters likewise (its
#     summed read time rose), and the write and read latency histograms'
#     counts with the requests.
#     TCP connections opened rose by zl bench's 3 at least, 6 at least are
#     open (forwards), none counted as RDMA or TLS; the forward latency
#     histogram counted the 20000 forwards. The journal (the daemons run
#     --write-path journal whatever ZL_TEST_WRITE_PATH says) answered all
#     30000 writes early (once their record was durable) and checkpointed;
#     the chunk store's io_uring took at least the 30000 chunk writes and
#     the journal's some records; at rest every ring is empty and its
#     SQE and completion counters agree with its in-flight gauge. Under a
#     running write load the journal's used bytes and both rings' SQEs in
#     flight and the journal's dirty chunks peak above 0; once it ends the
#     journal empties (checkpoint) and no chunk is dirty. 768 writes of
#     60 KiB at QD384 (45 MiB, 22.5 MiB in flight) into the smallest journals
#     (17 MiB, --journal-size 17M): writes waited for journal space.
#     Errors by code: 5 reads with a wrong slice version answered
#     ZL_ERR_STALE and one of an unknown volume ZL_ERR_NOT_FOUND are
#     counted exactly so on that daemon. `zl volume import` (which ends in a
#     flush): flush requests counted, and as many in the flush latency
#     histogram. Disk capacity is the data dir's filesystem size (statvfs)
#     and its free bytes within 1 % of it. `zl volume scrub` with one
#     backup's copy of chunk 0 damaged (a byte flipped in its file): a scrub
#     job per slice counted, chunks checked and bytes read rose, exactly one
#     bad copy found and one repaired.
#     `zl top` under a write load lists every node with figures and the
#     volume with its writes per second above 0.
#  3. A daemon whose data dir is removed under it turns /readyz to 503 (the
#     body says why) within 5 s and its disk_failed gauge to 1, while
#     /healthz stays 200 (alive) and the other daemons stay ready.
#  4. The controller that runs the manager (--metrics too): ready, leader 1,
#     one ready volume whose slices were all active before step 3 and are
#     all degraded after it (node-3's members moved out: the member changes
#     to "out" rose by as many); CSI calls counted by method and code (3
#     Probes OK, 1 CreateVolume INVALID_ARGUMENT); etcd call latency
#     counted by the controller and the storage daemons.
#  5. etcd stopped (SIGSTOP): the controller's /readyz turns 503 within
#     15 s and says why (its etcd gauge 0, 1 before and after), /healthz
#     stays 200, etcd errors are counted by the
#     controller and by the storage daemons, and the manager a failed pass;
#     SIGCONT: ready again, and the leader again (zipline_controller_leader
#     1; it may have stepped down during the stop).
#  6. node-3 restarted on an empty data dir: the manager makes its members
#     recovering, then in sync (its member changes to each rose by the
#     rows), every row is active again, the manager passed on (its last
#     pass at most 5 s old), and the
#     primaries' recovery counters rose: a whole chunk per chunk of mvol
#     that exists, its bytes a chunk size each. Sampled during the copy
#     (slowed to 80 Mbit/s): the manager counted slices recovering, the
#     primaries running recovery jobs with bytes left and done; none of
#     them once every row is active.
#     A 2-replica volume made while node-3's disk failed (members 4 on
#     node-1, 4 on node-2) is rebalanced: the manager's rebalance moves rose
#     by exactly 2, node-3 holds 2 in-sync members, every row is active.
#  7. A 1-replica volume whose row 0 has its only member taken out by hand
#     (in etcd): zipline_slices{state=down} is 1; deleted, 0 again.
#  8. A fourth node started; node-3 stopped (SIGSTOP) under a write load:
#     node-1 and node-2 count request timeouts (their forwards to node-3);
#     then node-3 stopped for good (the manager runs --down-out-interval
#     3): the manager's replacements rise by exactly the rows that listed
#     node-3, none lists it any more, node-4 is in every row of the
#     3-replica volume.
# Usage: metrics_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/metrics.sh" metrics_e2e
# --write-path journal last: it wins over ZL_TEST_WRITE_PATH's (the
# journal's figures are checked).
# --recovery-mbps 80 (after hl_begin's unlimited rate: it wins): step 6's
# copy of 64 MiB to node-3 from two primaries lasts about 3.4 s, long
# enough for the manager's passes (a second) and the daemons' samples to
# see it running.
# --journal-size 17M (the smallest): step 2's load of small writes larger
# than it fills it. --down-out-interval 3 (after hl_start_manager's 3600 s:
# it wins): step 8's stopped node is replaced within seconds; nothing is
# replaced before, three nodes holding every row of every volume.
HL_MANAGER_FLAGS="--metrics 127.0.0.1:0 --down-out-interval 3" HL_STORAGE_FLAGS="--metrics 127.0.0.1:0 --write-path journal --journal-size 17M --recovery-mbps 80" hl_begin e2e-metrics "$1" || fail "cluster or manager did not start"
"$ZL" volume create mvol --size 64M --replicas 3 --chunk-size 1M || fail "volume create"
vid=$(hl_vol_id mvol)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect mvol'"

# port_of I: the metrics port storage-I logged.
port_of() { cl_metrics_port "$CL_DIR/storage-$1/log"; }
URLS=()
for i in 1 2 3; do
	p=$(port_of "$i")
	[ -n "$p" ] || fail "storage-$i logged no metrics port"
	URLS+=("http://127.0.0.1:$p/metrics")
done
# http_code URL: the status code of a GET.
http_code() { curl -s -o /dev/null -w '%{http_code}' -m 5 "$1"; }
# wait_code URL WANT TENTHS: polls URL every 0.1 s until it answers WANT, at
# most TENTHS times; prints the last code.
wait_code() {
	local code=""
	for _ in $(seq 1 "$3"); do
		code=$(http_code "$1")
		[ "$code" = "$2" ] && break
		sleep 0.1
	done
	echo "$code"
}
msum() { mt_sum "$@" -- "${URLS[@]}"; }

# 1. probes and families
for u in "${URLS[@]}"; do
	b=${u%/metrics}
	[ "$(http_code "$b/healthz")" = 200 ] || fail "$b/healthz is not 200"
	# Ready once registered (the volume create above needed all three).
	[ "$(http_code "$b/readyz")" = 200 ] || fail "$b/readyz is not 200 with the node registered: $(curl -s -m 5 "$b/readyz")"
	[ "$(http_code "$b/nothing")" = 404 ] || check_fail "$b/nothing is not 404"
done
# families: names the daemons expose (the volume's once it served I/O)
families() {
	local names n
	names=$(/usr/bin/python3 "$MT" names "${URLS[0]}") || fail "cannot scrape ${URLS[0]}"
	for n in "$@"; do
		grep -qx "$n" <<<"$names" || check_fail "/metrics has no $n"
	done
}
families zipline_storage_requests_total zipline_storage_request_bytes_total \
	zipline_storage_request_duration_seconds_bucket zipline_storage_request_duration_seconds_count \
	zipline_journal_used_bytes zipline_journal_size_bytes zipline_recovery_bytes_left \
	zipline_storage_peering_slices zipline_storage_disk_capacity_bytes \
	zipline_storage_disk_failed zipline_storage_info

# settle_by SUM NAME LABELS... WANT: polls SUM (msum: the storage daemons,
# which sample once a second; csum: the controller, a pass a second) until
# it equals WANT, up to 20 s; prints the last sum.
settle_by() {
	local sum=$1 want=${*: -1} v=""
	shift
	for _ in $(seq 1 100); do
		v=$("$sum" "${@:1:$#-1}")
		[ "$v" = "$want" ] && break
		sleep 0.2
	done
	echo "$v"
}
settle() { settle_by msum "$@"; }
# stable NAME LABELS...: msum NAME LABELS once two reads 1.2 s apart (a
# sample of the daemons each) agree, up to 12 s.
stable() {
	local v r
	v=$(msum "$@")
	for _ in $(seq 1 10); do
		sleep 1.2
		r=$(msum "$@")
		[ "$r" = "$v" ] && break
		v=$r
	done
	echo "$v"
}
# rise NAME LABELS... BASE: polls msum NAME LABELS until it is above BASE,
# up to 20 s; prints the last sum.
rise() {
	local base=${*: -1} v=""
	for _ in $(seq 1 100); do
		v=$(msum "${@:1:$#-1}")
		[ "$v" -gt "$base" ] && break
		sleep 0.2
	done
	echo "$v"
}
ok_writes() { echo $(($(msum zipline_storage_requests_total op=write) - $(msum zipline_storage_errors_total op=write))); }

# 2. a known load
w0=$(ok_writes)
wb0=$(msum zipline_storage_request_bytes_total op=write)
r0=$(msum zipline_storage_request_bytes_total op=repl_write)
rn0=$(msum zipline_storage_requests_total op=repl_write)
vw0=$(msum zipline_volume_ops_total volume="$vid" dir=write)
vwb0=$(msum zipline_volume_bytes_total volume="$vid" dir=write)
hc0=$(msum zipline_storage_request_duration_seconds_count op=write)
co0=$(msum zipline_transport_connections_opened_total kind=tcp)
fw0=$(msum zipline_storage_forward_duration_seconds_count)
ea0=$(msum zipline_storage_early_acks_total)
ck0=$(msum zipline_journal_checkpoints_total)
us0=$(msum zipline_uring_sqes_total ring=chunks)
uj0=$(msum zipline_uring_sqes_total ring=journal)
out=$("$ZL" bench mvol --rw randwrite --bs 4k --qd 16 --count 10000 --seconds 300 --json) ||
	fail "zl bench --count 10000 failed: $out"
grep -q '"ios":10000,' <<<"$out" || fail "zl bench did not do exactly 10000 writes: $out"
wb=$(settle zipline_storage_request_bytes_total op=write $((wb0 + 10000 * 4096)))
echo "FIGURE: metrics: 10000 x 4 KiB writes: write bytes +$((wb - wb0)), writes without error +$(($(ok_writes) - w0))"
[ $((wb - wb0)) = $((10000 * 4096)) ] || check_fail "write bytes rose by $((wb - wb0)), not 10000 x 4 KiB"
[ $(($(ok_writes) - w0)) = 10000 ] || check_fail "writes answered without error rose by $(($(ok_writes) - w0)), not 10000"
rb=$(settle zipline_storage_request_bytes_total op=repl_write $((r0 + 20000 * 4096)))
[ $((rb - r0)) = $((20000 * 4096)) ] || check_fail "forwarded write bytes rose by $((rb - r0)), not 20000 x 4 KiB (2 backups)"
rn=$(msum zipline_storage_requests_total op=repl_write)
[ $((rn - rn0)) -ge 20000 ] || check_fail "forwarded writes rose by $((rn - rn0)), fewer than 20000"
vw=$(settle zipline_volume_ops_total volume="$vid" dir=write $((vw0 + 10000)))
[ $((vw - vw0)) = 10000 ] || check_fail "the volume's write counter rose by $((vw - vw0)), not 10000"
vwb=$(msum zipline_volume_bytes_total volume="$vid" dir=write)
[ $((vwb - vwb0)) = $((10000 * 4096)) ] || check_fail "the volume's write bytes rose by $((vwb - vwb0)), not 10000 x 4 KiB"
fw=$(msum zipline_storage_forward_duration_seconds_count)
[ $((fw - fw0)) -ge 20000 ] || check_fail "the forward latency histogram counted $((fw - fw0)), fewer than 20000"
co=$(msum zipline_transport_connections_opened_total kind=tcp)
[ $((co - co0)) -ge 3 ] || check_fail "TCP connections opened rose by $((co - co0)), fewer than zl bench's 3"
[ "$(msum zipline_transport_connections kind=tcp)" -ge 6 ] ||
	check_fail "fewer than 6 TCP connections open (every primary forwards to 2 backups)"
[ "$(msum zipline_transport_connections_opened_total kind=rdma)" = 0 ] &&
	[ "$(msum zipline_transport_connections_opened_total kind=tls)" = 0 ] ||
	check_fail "RDMA or TLS connections counted on a plain TCP cluster"
hc=$(msum zipline_storage_request_duration_seconds_count op=write)
[ $((hc - hc0)) -ge 10000 ] || check_fail "the write latency histogram counted $((hc - hc0)), fewer than 10000"

# The journal and the io_urings under those 10000 writes (30000 with the
# forwards).
ea=$(settle zipline_storage_early_acks_total $((ea0 + 30000)))
ck=$(rise zipline_journal_checkpoints_total "$ck0")
us=$(msum zipline_uring_sqes_total ring=chunks)
uj=$(msum zipline_uring_sqes_total ring=journal)
echo "FIGURE: metrics: 30000 writes in journal mode: early acks +$((ea - ea0)), checkpoints +$((ck - ck0)), io_uring SQEs chunks +$((us - us0)) journal +$((uj - uj0))"
[ $((ea - ea0)) = 30000 ] || check_fail "writes answered early (journal) rose by $((ea - ea0)), not 30000"
[ "$(msum zipline_journal_size_bytes)" -gt 0 ] || check_fail "zipline_journal_size_bytes is 0 with --write-path journal"
[ "$ck" -gt "$ck0" ] || check_fail "no journal checkpoint counted after 30000 writes"
[ $((us - us0)) -ge 30000 ] || check_fail "the chunk store's io_uring took $((us - us0)) SQEs, fewer than the 30000 chunk writes"
[ $((uj - uj0)) -gt 0 ] || check_fail "the journal's io_uring took no SQE under 30000 journaled writes"
[ "$(settle zipline_uring_inflight 0)" = 0 ] || check_fail "io_uring SQEs still in flight 20 s after the load"
[ "$(msum zipline_uring_queued)" = 0 ] || check_fail "io_uring SQEs left queued (not submitted) at rest"
SRC="$SRC" /usr/bin/python3 - "${URLS[@]}" <<'PY' || check_fail "an io_uring's counters disagree with its in-flight gauge"
import os, sys
sys.path.insert(0, os.path.join(os.environ["SRC"], "test/lib"))
from metrics_tool import scrape, value
bad = 0
for url in sys.argv[1:]:
    s = scrape(url)
    for ring in ("chunks", "journal"):
        sq, cq, fl = (value(s, n, ring=ring) for n in ("zipline_uring_sqes_total", "zipline_uring_completions_total", "zipline_uring_inflight"))
        if value(s, "zipline_uring_entries", ring=ring) <= 0 or sq - cq != fl:
            print("%s ring=%s: entries %d, sqes %d - completions %d != inflight %d" % (url, ring, value(s, "zipline_uring_entries", ring=ring), sq, cq, fl), file=sys.stderr)
            bad = 1
sys.exit(bad)
PY
rd0=$(msum zipline_storage_request_bytes_total op=read)
vr0=$(msum zipline_volume_ops_total volume="$vid" dir=read)
rh0=$(msum zipline_storage_request_duration_seconds_count op=read)
vs0=$(msum zipline_volume_op_seconds_total volume="$vid" dir=read)
out=$("$ZL" bench mvol --rw randread --bs 4k --qd 16 --count 5000 --seconds 300 --json) ||
	fail "zl bench --count 5000 reads failed: $out"
grep -q '"ios":5000,' <<<"$out" || fail "zl bench did not do exactly 5000 reads: $out"
rd=$(settle zipline_storage_request_bytes_total op=read $((rd0 + 5000 * 4096)))
[ $((rd - rd0)) = $((5000 * 4096)) ] || check_fail "read bytes rose by $((rd - rd0)), not 5000 x 4 KiB"
vr=$(settle zipline_volume_ops_total volume="$vid" dir=read $((vr0 + 5000)))
[ $((vr - vr0)) = 5000 ] || check_fail "the volume's read counter rose by $((vr - vr0)), not 5000"
[ $(($(msum zipline_storage_request_duration_seconds_count op=read) - rh0)) -ge 5000 ] ||
	check_fail "the read latency histogram counted fewer than the 5000 reads"
/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' \
	"$vs0" "$(msum zipline_volume_op_seconds_total volume="$vid" dir=read)" ||
	check_fail "zipline_volume_op_seconds_total{dir=read} did not rise under 5000 reads"
echo "FIGURE: metrics: 5000 x 4 KiB reads: read bytes +$((rd - rd0)), volume reads +$((vr - vr0))"

# Queue use under a running load: peaks above 0, empty once it ended. The
# gauges are what the daemons' 1 s samples caught in flight at that moment:
# the load runs for 5 s (not a count of writes a fast disk ends in one
# sample or two), so that several samples fall inside it.
ck0=$(msum zipline_journal_checkpoints_total)
"$ZL" bench mvol --rw randwrite --bs 4k --qd 16 --seconds 5 >/dev/null 2>"$CL_DIR/peak-bench.err" &
bpid=$!
HL_PIDS="$HL_PIDS $bpid"
pk=$(/usr/bin/python3 "$MT" peak "$bpid" zipline_journal_used_bytes zipline_uring_inflight,ring=journal \
	zipline_uring_inflight,ring=chunks zipline_journal_dirty_chunks -- "${URLS[@]}") || fail "scraping during the load failed"
wait "$bpid" || fail "the load failed: $(tail -3 "$CL_DIR/peak-bench.err")"
mapfile -t PK <<<"$pk"
pk_used=${PK[0]} pk_jin=${PK[1]} pk_cin=${PK[2]} pk_dirty=${PK[3]}
echo "FIGURE: metrics: under 5 s of 4 KiB writes at QD16: peak journal used $pk_used bytes, dirty chunks $pk_dirty, io_uring SQEs in flight journal $pk_jin chunks $pk_cin"
[ "$pk_dirty" -gt 0 ] || check_fail "zipline_journal_dirty_chunks never rose above 0 under a write load"
[ "$pk_used" -gt 0 ] || check_fail "zipline_journal_used_bytes never rose above 0 under a write load"
[ "$pk_jin" -gt 0 ] || check_fail "zipline_uring_inflight{ring=journal} never rose above 0 under a write load"
[ "$pk_cin" -gt 0 ] || check_fail "zipline_uring_inflight{ring=chunks} never rose above 0 under a write load"
[ "$(settle zipline_journal_used_bytes 0)" = 0 ] || check_fail "the journal did not empty (checkpoint) within 20 s of the load's end"
[ "$(settle zipline_journal_dirty_chunks 0)" = 0 ] || check_fail "chunks still counted dirty 20 s after the load's end (checkpointed)"
[ "$(msum zipline_journal_checkpoints_total)" -gt "$ck0" ] || check_fail "no checkpoint counted for the load"

# A full journal: 768 writes of 60 KiB (below the 64 KiB from which only
# their CRCs are journaled, their data going to the chunk files) at QD384,
# 45 MiB through every daemon's 17 MiB journal with 22.5 MiB of it in
# flight, more than a record holds (8 MiB): writes wait for journal space.
jw0=$(msum zipline_journal_waits_total)
out=$("$ZL" bench mvol --rw write --bs 60k --qd 384 --count 768 --seconds 300 --json) ||
	fail "zl bench of 768 60 KiB writes failed: $out"
grep -q '"ios":768,' <<<"$out" || fail "zl bench did not do exactly 768 writes: $out"
jw=$(rise zipline_journal_waits_total "$jw0")
echo "FIGURE: metrics: 768 x 60 KiB writes at QD384 into 17 MiB journals: journal waits +$((jw - jw0)) ($(grep -o '"seconds":[0-9.]*' <<<"$out"))"
[ "$jw" -gt "$jw0" ] || check_fail "zipline_journal_waits_total did not rise under 45 MiB of small writes, 22.5 MiB in flight, into 17 MiB journals"

# Errors by code: requests storage-1 must refuse, each counted by its code.
port1=$(cat "$CL_DIR/storage-1/port")
U1=("${URLS[0]}")
e1sum() { mt_sum zipline_storage_errors_total "$@" -- "${U1[@]}"; }
es0=$(e1sum op=read code=ZL_ERR_STALE)
en0=$(e1sum op=read code=ZL_ERR_NOT_FOUND)
for _ in 1 2 3 4 5; do
	got=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$port1" read "$vid" 0 0 4096 999 2>&1) || fail "e2e_chunk: $got"
	grep -q 'status=ZL_ERR_STALE' <<<"$got" || fail "a read at slice version 999 was not refused as stale: $got"
done
got=$("$CL_BIN/e2e_chunk" 127.0.0.1 "$port1" read vol-00000000000000ff 0 0 4096 1 2>&1) || fail "e2e_chunk: $got"
grep -q 'status=ZL_ERR_NOT_FOUND' <<<"$got" || fail "a read of an unknown volume was not refused as not found: $got"
es=$(settle_by e1sum op=read code=ZL_ERR_STALE $((es0 + 5)))
en=$(settle_by e1sum op=read code=ZL_ERR_NOT_FOUND $((en0 + 1)))
echo "FIGURE: metrics: storage-1 errors: read ZL_ERR_STALE +$((es - es0)), read ZL_ERR_NOT_FOUND +$((en - en0))"
[ $((es - es0)) = 5 ] || check_fail "errors{op=read,code=ZL_ERR_STALE} rose by $((es - es0)), not 5"
[ $((en - en0)) = 1 ] || check_fail "errors{op=read,code=ZL_ERR_NOT_FOUND} rose by $((en - en0)), not 1"

# Flush: zl volume import ends in one.
fl0=$(msum zipline_storage_requests_total op=flush)
fh0=$(msum zipline_storage_request_duration_seconds_count op=flush)
head -c 3M /dev/urandom >"$CL_DIR/import.bin"
"$ZL" volume import mvol "$CL_DIR/import.bin" >"$CL_DIR/import.out" 2>&1 || fail "zl volume import: $(tail -3 "$CL_DIR/import.out")"
rise zipline_storage_requests_total op=flush "$fl0" >/dev/null
fl=$(stable zipline_storage_requests_total op=flush)
fh=$(msum zipline_storage_request_duration_seconds_count op=flush)
echo "FIGURE: metrics: zl volume import: flush requests +$((fl - fl0)), flush latency histogram +$((fh - fh0))"
[ "$fl" -gt "$fl0" ] || check_fail "no flush request counted for zl volume import"
[ $((fh - fh0)) = $((fl - fl0)) ] || check_fail "the flush latency histogram counted $((fh - fh0)), not the $((fl - fl0)) flushes"

# Disk capacity and use: the data dir's filesystem as statvfs sees it.
for i in 1 2 3; do
	SRC="$SRC" /usr/bin/python3 - "${URLS[$((i - 1))]}" "$CL_DIR/storage-$i/data" <<'PY' || check_fail "storage-$i's disk figures are not its data dir's"
import os, sys
sys.path.insert(0, os.path.join(os.environ["SRC"], "test/lib"))
from metrics_tool import scrape, value
s = scrape(sys.argv[1])
st = os.statvfs(sys.argv[2])
cap, free = value(s, "zipline_storage_disk_capacity_bytes"), value(s, "zipline_storage_disk_free_bytes")
want_cap, want_free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
print("FIGURE: metrics: %s: capacity %d (statvfs %d), free %d (statvfs %d)" % (sys.argv[2], cap, want_cap, free, want_free))
sys.exit(0 if cap == want_cap and abs(free - want_free) <= cap / 100 else 1)
PY
done

families zipline_volume_ops_total zipline_volume_bytes_total zipline_volume_op_seconds_total

# zl top during a write load: the nodes (found through their records'
# metrics_port) and the volume, with its writes per second.
"$ZL" bench mvol --rw randwrite --bs 4k --qd 8 --seconds 8 >/dev/null 2>"$CL_DIR/top-bench.err" &
bpid=$!
HL_PIDS="$HL_PIDS $bpid"
top=$("$ZL" top --interval 2 --count 2 2>&1) || fail "zl top failed: $top"
wait "$bpid" || check_fail "the load under zl top failed: $(cat "$CL_DIR/top-bench.err")"
echo "$top" | tail -n +$(($(echo "$top" | grep -n '^zl top' | tail -1 | cut -d: -f1))) | sed 's/^/    top| /'
last=$(echo "$top" | tail -n +$(($(echo "$top" | grep -n '^zl top' | tail -1 | cut -d: -f1))))
for i in 1 2 3; do
	grep -qE "^node-$i +[0-9]+ +[0-9]+ " <<<"$last" || check_fail "zl top has no figures for node-$i"
done
w=$(awk -v v="$vid" '$1 == v && $2 == "mvol" { print $4 }' <<<"$last")
[ -n "$w" ] && [ "$w" -gt 0 ] 2>/dev/null ||
	check_fail "zl top does not show mvol ($vid) with writes per second above 0: '$w'"

# The controller's (the manager's) endpoint.
cport=$(cl_metrics_port "$CL_DIR/manager/log")
[ -n "$cport" ] || fail "the manager's controller logged no metrics port"
CURL="http://127.0.0.1:$cport"
csum() { mt_sum "$@" -- "$CURL/metrics"; }
csettle() { settle_by csum "$@"; }
[ "$(http_code "$CURL/healthz")" = 200 ] || fail "the controller's /healthz is not 200"
[ "$(http_code "$CURL/readyz")" = 200 ] || fail "the controller's /readyz is not 200: $(curl -s -m 5 "$CURL/readyz")"
[ "$(csum zipline_controller_leader)" = 1 ] || check_fail "zipline_controller_leader is not 1 on the only replica"
[ "$(csettle zipline_volumes 1)" = 1 ] || check_fail "zipline_volumes is not 1"
nsl=$(hl_etcd rows "$vid" | wc -l)
[ "$nsl" -gt 0 ] || fail "mvol has no rows"
act=$(csettle zipline_slices state=active "$nsl")
[ "$act" = "$nsl" ] || check_fail "zipline_slices{state=active} is $act, not the $nsl rows of mvol (all in sync)"
out0=$(csum zipline_manager_member_changes_total to=out)
p0=$(csum zipline_csi_calls_total method=/csi.v1.Identity/Probe code=OK)
i0=$(csum zipline_csi_calls_total method=/csi.v1.Controller/CreateVolume code=INVALID_ARGUMENT)
ZL_SOURCE_DIR="$SRC" /usr/bin/python3 - "unix://$CL_DIR/manager/csi.sock" <<'PY' || fail "the CSI calls to the controller failed"
import sys
sys.path.insert(0, __import__("os").environ["ZL_SOURCE_DIR"] + "/test/lib")
import grpc
from csi_client import CsiClient
c = CsiClient(sys.argv[1])
for _ in range(3):
    c.identity.Probe(c.pb.ProbeRequest(), timeout=10)
try:
    c.controller.CreateVolume(c.pb.CreateVolumeRequest(name=""), timeout=10)
    sys.exit("CreateVolume with no name succeeded")
except grpc.RpcError as e:
    if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
        sys.exit("CreateVolume with no name: %s, not INVALID_ARGUMENT" % e.code())
PY
[ $(($(csum zipline_csi_calls_total method=/csi.v1.Identity/Probe code=OK) - p0)) = 3 ] ||
	check_fail "the controller's Probe OK counter did not rise by 3"
[ $(($(csum zipline_csi_calls_total method=/csi.v1.Controller/CreateVolume code=INVALID_ARGUMENT) - i0)) = 1 ] ||
	check_fail "the controller's CreateVolume INVALID_ARGUMENT counter did not rise by 1"
[ "$(csum zipline_csi_call_duration_seconds_count method=/csi.v1.Identity/Probe)" -ge 3 ] ||
	check_fail "the controller's Probe latency histogram counted fewer than 3"
[ "$(csum zipline_etcd_request_duration_seconds_count call=/v3/kv/range)" -gt 0 ] ||
	check_fail "the controller counted no etcd range call"
[ "$(msum zipline_etcd_request_duration_seconds_count call=/v3/lease/keepalive)" -gt 0 ] ||
	check_fail "the storage daemons counted no etcd keepalive"

# A scrub of mvol: its jobs (a slice each) and what they read are counted;
# one copy damaged beforehand (a byte of block 3 of chunk 0, which the
# import wrote, flipped in a backup's chunk file once the journals hold
# nothing more) is found and repaired, exactly one.
sj0=$(msum zipline_scrub_jobs_total)
sb0=$(msum zipline_scrub_bytes_read_total)
sk0=$(msum zipline_scrub_chunks_checked_total)
sbad0=$(msum zipline_scrub_bad_found_total)
srep0=$(msum zipline_scrub_repaired_total)
cl_wait_journal_clean 30 >/dev/null || fail "the journals did not checkpoint everything within 30 s"
read -r _ sprim snodes < <(hl_etcd members "$vid" | awk '$1 == 0')
sbk=""
for n in $snodes; do [ "$n" != "$sprim" ] && { sbk=$n; break; }; done
[ -n "$sbk" ] || fail "slice 0 of mvol has no backup: $(hl_etcd members "$vid" | head -1)"
sf="$CL_DIR/storage-${sbk#node-}/data/chunks/$vid/0000000000000000.zlc"
off=$(cl_chunk_block_off "$sf" 3 123) || fail "cannot locate block 3 in $sf"
cl_flip_byte "$sf" "$off"
"$ZL" volume scrub mvol >"$CL_DIR/scrub.out" 2>&1 || fail "zl volume scrub mvol: $(tail -3 "$CL_DIR/scrub.out")"
sj=$(settle zipline_scrub_jobs_total $((sj0 + nsl)))
echo "FIGURE: metrics: scrub of mvol: jobs +$((sj - sj0)), chunks checked +$(($(msum zipline_scrub_chunks_checked_total) - sk0)), bytes read +$(($(msum zipline_scrub_bytes_read_total) - sb0))"
[ $((sj - sj0)) = "$nsl" ] || check_fail "scrub jobs rose by $((sj - sj0)), not the $nsl slices of mvol"
[ "$(msum zipline_scrub_chunks_checked_total)" -gt "$sk0" ] || check_fail "scrub checked no chunk"
[ "$(msum zipline_scrub_bytes_read_total)" -gt "$sb0" ] || check_fail "scrub read no byte"
sbad=$(msum zipline_scrub_bad_found_total)
srep=$(msum zipline_scrub_repaired_total)
echo "FIGURE: metrics: scrub with chunk 0's copy on $sbk damaged: bad found +$((sbad - sbad0)), repaired +$((srep - srep0))"
[ $((sbad - sbad0)) = 1 ] || check_fail "scrub found $((sbad - sbad0)) bad copies, not the 1 damaged"
[ $((srep - srep0)) = 1 ] || check_fail "scrub repaired $((srep - srep0)) copies, not the 1 damaged"

# 3. a failed data dir: not ready, still alive
b3=${URLS[2]%/metrics}
t0=$(hl_now_ms)
rm -rf "$CL_DIR/storage-3/data"
code=$(wait_code "$b3/readyz" 503 50)
[ "$code" = 503 ] || fail "storage-3's /readyz answered $code, not 503, 5 s after its data dir was removed"
body=$(curl -s -m 5 "$b3/readyz")
echo "FIGURE: metrics: data dir removed -> /readyz 503 after $(($(hl_now_ms) - t0)) ms: $body"
grep -q 'data directory failed' <<<"$body" || check_fail "/readyz does not say why: $body"
[ "$(http_code "$b3/healthz")" = 200 ] || check_fail "storage-3's /healthz is not 200 (it is alive)"
[ "$(/usr/bin/python3 "$MT" sum zipline_storage_disk_failed -- "${URLS[2]}")" = 1 ] ||
	check_fail "storage-3's zipline_storage_disk_failed is not 1"
for u in "${URLS[0]}" "${URLS[1]}"; do
	[ "$(http_code "${u%/metrics}/readyz")" = 200 ] || check_fail "${u%/metrics}/readyz is not 200"
done

# 4. the manager saw it: every row degraded (node-3's member out)
deg=$(csettle zipline_slices state=degraded "$nsl")
echo "FIGURE: metrics: controller after node-3's disk failed: slices degraded=$deg active=$(csum zipline_slices state=active) of $nsl, member changes to out +$(($(csum zipline_manager_member_changes_total to=out) - out0))"
[ "$deg" = "$nsl" ] || check_fail "zipline_slices{state=degraded} is $deg, not $nsl, after node-3's disk failed"
[ "$(csum zipline_slices state=active)" = 0 ] || check_fail "slices still counted active after node-3's disk failed"
[ $(($(csum zipline_manager_member_changes_total to=out) - out0)) -ge "$nsl" ] ||
	check_fail "the manager's member changes to out rose by fewer than $nsl"

# A 2-replica volume made while node-3's disk is failed: its members all on
# node-1 and node-2 (nothing is placed on a failed disk), for the
# rebalance of step 6; 4 MiB written into it.
"$ZL" volume create rvol --size 4M --replicas 2 --chunk-size 1M >/dev/null || fail "volume create rvol"
rvid=$(hl_vol_id rvol)
[ -n "$rvid" ] || fail "no volume id in 'zl volume inspect rvol'"
rrows=$(hl_etcd rows "$rvid" | wc -l)
[ "$rrows" = 4 ] || fail "rvol has $rrows rows, not 4"
# rvol is never written: its primaries learn of the moved members from the
# volumes/ watch alone (no chunk on disk, no request), which once left them
# recovering for good.
! hl_etcd rows "$rvid" | grep -q 'node-3:' || fail "rvol placed a member on node-3, whose disk failed: $(hl_etcd rows "$rvid")"
# Every row active: mvol's after step 6, rvol's all along.
nall=$((nsl + rrows))

# 5. etcd stopped: the controller is not ready (alive all the same)
epid=$(cat "$CL_DIR/etcd/pid")
e0=$(csum zipline_etcd_errors_total)
se0=$(msum zipline_etcd_errors_total)
pe0=$(csum zipline_manager_pass_errors_total)
eok0=$(csum zipline_controller_etcd_ok)
t0=$(hl_now_ms)
kill -STOP "$epid" || fail "cannot stop etcd"
code=$(wait_code "$CURL/readyz" 503 150)
body=$(curl -s -m 5 "$CURL/readyz")
eok=$(csum zipline_controller_etcd_ok)
hz=$(http_code "$CURL/healthz")
# A call to the stopped etcd fails after its 5 s timeout: the controller's,
# the manager pass's (it fails), and the storage daemons' (the heartbeat:
# a keepalive every few seconds, the lease lasts 10 s: etcd continues
# before it could expire).
e1=$e0 se1=$se0 pe1=$pe0
while [ $(($(hl_now_ms) - t0)) -lt 15000 ]; do
	e1=$(csum zipline_etcd_errors_total)
	pe1=$(csum zipline_manager_pass_errors_total)
	se1=$(msum zipline_etcd_errors_total)
	[ "$e1" -gt "$e0" ] && [ "$pe1" -gt "$pe0" ] && [ "$se1" -gt "$se0" ] && break
	sleep 0.1
done
kill -CONT "$epid"
echo "FIGURE: metrics: etcd stopped: controller etcd errors +$((e1 - e0)), manager pass errors +$((pe1 - pe0)), storage daemons' etcd errors +$((se1 - se0))"
[ "$se1" -gt "$se0" ] || check_fail "the storage daemons counted no etcd error in 15 s of etcd stopped"
[ "$pe1" -gt "$pe0" ] || check_fail "the manager counted no failed pass in 15 s of etcd stopped"
[ "$code" = 503 ] || check_fail "the controller's /readyz answered $code, not 503, 15 s into an etcd stop"
grep -q 'etcd not reached' <<<"$body" || check_fail "the controller's /readyz does not say why: $body"
[ "$hz" = 200 ] || check_fail "the controller's /healthz answered $hz while etcd was stopped (it is alive)"
[ "$e1" -gt "$e0" ] || check_fail "the controller counted no etcd error in 15 s of etcd stopped"
code=$(wait_code "$CURL/readyz" 200 150)
[ "$code" = 200 ] || check_fail "the controller's /readyz did not turn 200 within 15 s of etcd's SIGCONT"
eok1=$(csum zipline_controller_etcd_ok)
echo "FIGURE: metrics: zipline_controller_etcd_ok: $eok0 before etcd stopped, $eok while /readyz said 503, $eok1 once ready again"
[ "$eok0" = 1 ] && [ "$eok" = 0 ] && [ "$eok1" = 1 ] ||
	check_fail "zipline_controller_etcd_ok went $eok0, $eok, $eok1 around the etcd stop, not 1, 0, 1"
# It leads again (it may have stepped down while etcd did not answer): the
# manager must run for step 6.
[ "$(csettle zipline_controller_leader 1)" = 1 ] ||
	check_fail "the only controller did not lead again within 20 s of etcd's SIGCONT"

# 6. node-3 back on an empty data dir: recovering, then in sync; the
# primaries' recovery counters show the copy.
rcv0=$(csum zipline_manager_member_changes_total to=recovering)
ins0=$(csum zipline_manager_member_changes_total to=in_sync)
ps0=$(csum zipline_manager_passes_total)
rb0=$(msum zipline_recovery_bytes_total)
rc0=$(msum zipline_recovery_chunks_total)
# Sampled while node-3 recovers (until it is active again): the slices the
# manager's passes count recovering, the running recovery jobs of the
# primaries (node-1 and node-2: node-3 is out of every row).
sleep 600 &
spid=$!
HL_PIDS="$HL_PIDS $spid"
/usr/bin/python3 "$MT" peak "$spid" zipline_slices,state=recovering -- "$CURL/metrics" >"$CL_DIR/peak-ctrl" &
cpk=$!
/usr/bin/python3 "$MT" peak "$spid" zipline_recovery_jobs zipline_recovery_bytes_left zipline_recovery_bytes_done -- "${URLS[0]}" "${URLS[1]}" >"$CL_DIR/peak-rec" &
rpk=$!
HL_PIDS="$HL_PIDS $cpk $rpk"
p3old=$(port_of 3)
cl_stop storage-3 KILL
rm -rf "$CL_DIR/storage-3/data"
cl_start_storage 3
p3=$p3old
for _ in $(seq 1 100); do
	p3=$(port_of 3)
	[ "$p3" != "$p3old" ] && break
	sleep 0.1
done
[ "$p3" != "$p3old" ] || fail "storage-3 logged no new metrics port within 10 s of its restart"
URLS[2]="http://127.0.0.1:$p3/metrics"
t0=$(hl_now_ms)
act=""
for _ in $(seq 1 600); do
	act=$(csum zipline_slices state=active)
	[ "$act" = "$nall" ] && break
	sleep 0.2
done
kill "$spid"
wait "$cpk" || check_fail "scraping the controller while node-3 recovered failed"
wait "$rpk" || check_fail "scraping node-1 and node-2 while node-3 recovered failed"
pk_rcv=$(cat "$CL_DIR/peak-ctrl")
mapfile -t PK <"$CL_DIR/peak-rec"
echo "FIGURE: metrics: while node-3 recovered: peak slices recovering $pk_rcv of $nsl, peak recovery jobs ${PK[0]:-}, peak bytes left ${PK[1]:-}, peak bytes done ${PK[2]:-}"
[ "${pk_rcv:-0}" -gt 0 ] || check_fail "zipline_slices{state=recovering} never rose above 0 while node-3 recovered"
[ "${PK[0]:-0}" -gt 0 ] || check_fail "zipline_recovery_jobs never rose above 0 on the primaries while node-3 recovered"
[ "${PK[1]:-0}" -gt 0 ] || check_fail "zipline_recovery_bytes_left never rose above 0 on the primaries while node-3 recovered"
[ "${PK[2]:-0}" -gt 0 ] || check_fail "zipline_recovery_bytes_done never rose above 0 on the primaries while node-3 recovered"
[ "$(csum zipline_slices state=recovering)" = 0 ] || check_fail "slices still counted recovering once all were active"
[ "$(settle zipline_recovery_jobs 0)" = 0 ] || check_fail "recovery jobs still counted 20 s after every row was active"
# A job that caught up counts until the primary's next look at its row
# (a second) drops it.
[ "$(settle zipline_recovery_bytes_left 0)" = 0 ] || check_fail "recovery bytes left above 0 20 s after the last job ended"
[ "$(settle zipline_recovery_bytes_done 0)" = 0 ] || check_fail "recovery bytes done above 0 20 s after the last job ended"
rcv=$(csum zipline_manager_member_changes_total to=recovering)
ins=$(csum zipline_manager_member_changes_total to=in_sync)
rc=$(stable zipline_recovery_chunks_total)
rb=$(msum zipline_recovery_bytes_total)
echo "FIGURE: metrics: node-3 back on an empty disk: all $nsl rows active after $(($(hl_now_ms) - t0)) ms; member changes to recovering +$((rcv - rcv0)), to in_sync +$((ins - ins0)); recovery copied $((rc - rc0)) chunks, $((rb - rb0)) bytes"
[ "$act" = "$nall" ] || check_fail "zipline_slices{state=active} is $act, not $nall (mvol's and rvol's rows), 120 s after node-3 came back"
[ $((rcv - rcv0)) -ge "$nsl" ] || check_fail "member changes to recovering rose by $((rcv - rcv0)), fewer than the $nsl rows"
[ $((ins - ins0)) -ge "$nsl" ] || check_fail "member changes to in_sync rose by $((ins - ins0)), fewer than the $nsl rows"
[ "$(csum zipline_manager_passes_total)" -gt "$ps0" ] || check_fail "zipline_manager_passes_total did not rise while node-3 recovered"
/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 5 else 1)' "$(csum zipline_manager_last_pass_age_seconds)" ||
	check_fail "zipline_manager_last_pass_age_seconds is above 5 s on a running manager (a pass a second)"
[ $((rc - rc0)) -gt 0 ] || check_fail "zipline_recovery_chunks_total did not rise while node-3 recovered"
[ $((rb - rb0)) = $(((rc - rc0) * 1048576)) ] ||
	check_fail "zipline_recovery_bytes_total rose by $((rb - rb0)), not a 1 MiB chunk for each of the $((rc - rc0)) chunks copied"

# Rebalance: rvol's 8 members are 4 on node-1, 4 on node-2, none on
# node-3; balanced (at most one apart) after exactly 2 moves to node-3.
# `zl volume rebalance` waits until the manager deleted the request
# (balanced, no row moving).
rm0=$(csum zipline_manager_rebalance_moves_total)
"$ZL" volume rebalance rvol --timeout 120 >"$CL_DIR/rebal.out" 2>&1 || fail "zl volume rebalance rvol: $(tail -3 "$CL_DIR/rebal.out")"
rm1=$(csum zipline_manager_rebalance_moves_total)
echo "FIGURE: metrics: rebalance of rvol (4+4+0 members): moves +$((rm1 - rm0)); rows: $(hl_etcd rows "$rvid" | tr '\n' ';')"
[ $((rm1 - rm0)) = 2 ] || check_fail "zipline_manager_rebalance_moves_total rose by $((rm1 - rm0)), not the 2 moves from 4+4+0 to 3+3+2"
[ "$(hl_etcd rows "$rvid" | grep -o 'node-3:in_sync' | wc -l)" = 2 ] || check_fail "node-3 does not hold 2 in-sync members of rvol after the rebalance: $(hl_etcd rows "$rvid")"
[ "$(csettle zipline_slices state=active "$nall")" = "$nall" ] || check_fail "not every row active after the rebalance"

# 7. A slice down: a 1-replica volume whose row 0 loses its only copy
# (written by hand into its etcd record, as the manager never takes the
# last in-sync member out) is counted down, exactly one; deleted, none.
[ "$(csum zipline_slices state=down)" = 0 ] || check_fail "slices counted down before any was"
"$ZL" volume create dvol --size 4M --replicas 1 --chunk-size 1M >/dev/null || fail "volume create dvol"
dvid=$(hl_vol_id dvol)
[ -n "$dvid" ] || fail "no volume id in 'zl volume inspect dvol'"
hl_etcd lose "$dvid" 0 || fail "cannot take row 0 of dvol's only member out"
dn=$(csettle zipline_slices state=down 1)
echo "FIGURE: metrics: dvol's row 0 without its copy: slices down $dn, active $(csum zipline_slices state=active)"
[ "$dn" = 1 ] || check_fail "zipline_slices{state=down} is $dn, not 1, with one row left without an in-sync member"
"$ZL" volume delete dvol >"$CL_DIR/dvol-delete.out" 2>&1 || fail "zl volume delete dvol: $(tail -3 "$CL_DIR/dvol-delete.out")"
[ "$(csettle zipline_slices state=down 0)" = 0 ] || check_fail "zipline_slices{state=down} did not return to 0 once dvol was deleted"
[ "$(csum zipline_slices state=active)" = "$nall" ] || check_fail "mvol's and rvol's $nall rows are not all active once dvol was deleted"

# 8. Down-out: a fourth node joins; node-3 stops answering (SIGSTOP)
# under a write load. The forwards in flight to it fail by their deadline
# (4 s): the primaries count request timeouts. Then node-3 stops for good
# (SIGCONT and a clean stop: its lease revoked, its record gone at once);
# after --down-out-interval (3 s) each of its members is replaced on a
# live node outside its row (node-4 in every row of mvol): the manager's
# replacements rise by exactly the rows that listed node-3.
cl_start_storage 4
p4=""
for _ in $(seq 1 100); do
	p4=$(port_of 4)
	[ -n "$p4" ] && break
	sleep 0.1
done
[ -n "$p4" ] || fail "storage-4 logged no metrics port within 10 s"
# Ready: registered (its record in etcd), its disk writable.
[ "$(wait_code "http://127.0.0.1:$p4/readyz" 200 150)" = 200 ] || fail "storage-4 not ready within 15 s"
rows3=$( (hl_etcd rows "$vid"; hl_etcd rows "$rvid") | grep -c 'node-3:')
rp0=$(csum zipline_manager_replacements_total)
# node-1's and node-2's sums (node-3 stops answering).
m12() { mt_sum "$@" -- "${URLS[0]}" "${URLS[1]}"; }
to0=$(m12 zipline_transport_request_timeouts_total)
vw0=$(msum zipline_volume_ops_total volume="$vid" dir=write)
"$ZL" bench mvol --rw randwrite --bs 4k --qd 16 --seconds 120 >/dev/null 2>"$CL_DIR/down-bench.err" &
bpid=$!
HL_PIDS="$HL_PIDS $bpid"
rise zipline_volume_ops_total volume="$vid" dir=write "$vw0" >/dev/null
t0=$(hl_now_ms)
kill -STOP "$(cl_pid storage-3)" || fail "cannot stop storage-3"
to=$to0
for _ in $(seq 1 100); do
	to=$(m12 zipline_transport_request_timeouts_total)
	[ "$to" -gt "$to0" ] && break
	sleep 0.2
done
tto=$(($(hl_now_ms) - t0))
kill -CONT "$(cl_pid storage-3)"
cl_stop storage-3
rp=$rp0
for _ in $(seq 1 200); do
	rp=$(csum zipline_manager_replacements_total)
	[ "$rp" -ge $((rp0 + rows3)) ] && break
	sleep 0.2
done
left3=$( (hl_etcd rows "$vid"; hl_etcd rows "$rvid") | grep -c 'node-3:')
on4=$( (hl_etcd rows "$vid"; hl_etcd rows "$rvid") | grep -c 'node-4:')
echo "FIGURE: metrics: node-3 stopped (SIGSTOP) under writes with node-4 up: request timeouts on node-1 and node-2 +$((to - to0)) after $tto ms; then stopped: replacements +$((rp - rp0)) of the $rows3 rows holding node-3 after $(($(hl_now_ms) - t0)) ms; rows holding node-3 now $left3, node-4 $on4"
[ "$to" -gt "$to0" ] || check_fail "zipline_transport_request_timeouts_total did not rise on node-1 and node-2 within 20 s of node-3 stopped (SIGSTOP) under their forwards (deadline 4 s)"
[ $((rp - rp0)) = "$rows3" ] || check_fail "zipline_manager_replacements_total rose by $((rp - rp0)), not the $rows3 rows that held node-3, 40 s after it stopped (down-out 3 s)"
[ "$left3" = 0 ] || check_fail "$left3 rows still list node-3 after its members were replaced"
[ "$on4" -ge "$nsl" ] || check_fail "node-4 is in $on4 rows, fewer than mvol's $nsl (3 replicas on 3 live nodes)"
sleep 1.2 # deliberate: a pass and a sample more, nothing else is replaced
[ "$(csum zipline_manager_replacements_total)" = "$rp" ] || check_fail "zipline_manager_replacements_total moved on after the $rows3 replacements"
kill "$bpid" 2>/dev/null
hl_end
