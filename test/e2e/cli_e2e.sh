#!/usr/bin/env bash
# E2E: zl's error handling. Bad flags, unknown volumes, bad sizes and an
# unreachable etcd each give one clear message and a non-zero exit; zl volume
# resize grows a volume whose data reads back.
set -uo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export CL_BIN=$BUILD/bin
export CL_DIR=$(mktemp -d "$BUILD/e2e-cli.XXXXXX")
source "$SRC/test/lib/cluster.sh"
trap 'cl_stop_all; rm -rf "$CL_DIR"' EXIT
ZL="$CL_BIN/zl"
failures=0
# expect_fail "what" PATTERN CMD...: CMD must exit non-zero and print PATTERN on stderr.
expect_fail() {
	local what=$1 pat=$2; shift 2
	local out rc
	out=$("$@" 2>&1 >/dev/null); rc=$?
	if [ $rc -eq 0 ]; then echo "cli_e2e: FAIL: $what: exit 0" >&2; failures=$((failures+1)); return; fi
	if ! grep -qiE "$pat" <<<"$out"; then
		echo "cli_e2e: FAIL: $what: message '$out' lacks /$pat/" >&2; failures=$((failures+1)); return
	fi
	echo "cli_e2e: ok: $what -> exit $rc: $out"
}

"$ZL" --version | grep -q "0.1" || { echo "cli_e2e: FAIL: --version"; failures=$((failures+1)); }
"$CL_BIN/zipline-storage" --version | grep -q "zipline-storage" || { echo "cli_e2e: FAIL: storage --version"; failures=$((failures+1)); }

# etcd unreachable
expect_fail "etcd down" "etcd" "$ZL" --etcd http://127.0.0.1:1 volume ls
cl_start_etcd
export ZIPLINE_ETCD=$CL_ETCD CL_ETCD
for i in 1 2; do cl_start_storage "$i"; done
cl_wait_nodes 2 || { echo "cli_e2e: storage did not register"; exit 1; }

expect_fail "no command" "usage|command" "$ZL"
expect_fail "unknown command" "unknown|usage" "$ZL" frobnicate
expect_fail "unknown flag" "unknown|unrecognized|invalid|usage" "$ZL" volume ls --bogus
expect_fail "bad size" "size" "$ZL" volume create v1 --size abc
expect_fail "zero size" "size" "$ZL" volume create v1 --size 0
expect_fail "missing size" "size" "$ZL" volume create v1
expect_fail "bad replicas" "replica" "$ZL" volume create v1 --size 1G --replicas 7
expect_fail "too many replicas for 2 nodes" "node" "$ZL" volume create v1 --size 1G --replicas 3
expect_fail "bad chunk size" "chunk" "$ZL" volume create v1 --size 1G --replicas 1 --chunk-size 3M
expect_fail "bad volume name" "name" "$ZL" volume create 'bad/name' --size 1G --replicas 1
expect_fail "inspect unknown" "not found" "$ZL" volume inspect nosuch
expect_fail "rm unknown" "not found" "$ZL" volume rm nosuch
expect_fail "rm unknown with --force" "not found" "$ZL" volume rm nosuch --force
expect_fail "rm without name" "missing volume name" "$ZL" volume rm
expect_fail "rm bad flag" "unknown|unrecognized|invalid|usage" "$ZL" volume rm nosuch --forse
expect_fail "export unknown" "not found" "$ZL" volume export nosuch /dev/null
expect_fail "bench unknown" "not found" "$ZL" bench nosuch --rw randread --seconds 1
"$ZL" volume create small --size 1M --replicas 2 >/dev/null || { echo "cli_e2e: FAIL: create small"; failures=$((failures+1)); }
head -c 2M /dev/zero >"$CL_DIR/big"
expect_fail "import too large" "larger|too large|exceeds" "$ZL" volume import small "$CL_DIR/big"
expect_fail "import missing file" "No such file|cannot open" "$ZL" volume import small "$CL_DIR/nosuch"
# zl volume resize (the record edit of ControllerExpandVolume, lib/meta):
# data written before and after a growth reads back (cmp against the input
# files, not through zl's own view), smaller sizes are refused, two resizes
# at once lose neither data nor a size.
ectl() { etcdctl --endpoints "$CL_ETCD" "$@"; }
vol_bytes() { "$ZL" volume inspect "$1" | sed -n 's/^size .*(\([0-9]*\) bytes)$/\1/p'; }
check_bytes() { # WHAT VOLUME BYTES
	local got; got=$(vol_bytes "$2")
	if [ "$got" = "$3" ]; then echo "cli_e2e: ok: $1: $got bytes"
	else echo "cli_e2e: FAIL: $1: volume $2 is '$got' bytes, want $3" >&2; failures=$((failures+1)); fi
}
check_export() { # WHAT VOLUME EXPECTED-FILE
	rm -f "$CL_DIR/out"
	if "$ZL" volume export "$2" "$CL_DIR/out" >/dev/null && cmp "$3" "$CL_DIR/out"; then
		echo "cli_e2e: ok: $1: export matches"
	else echo "cli_e2e: FAIL: $1: export differs from $3" >&2; failures=$((failures+1)); fi
}
MiB=1048576
"$ZL" volume create grow --size 8M --replicas 2 >/dev/null || { echo "cli_e2e: FAIL: create grow" >&2; failures=$((failures+1)); }
head -c 8M /dev/urandom >"$CL_DIR/d8"
"$ZL" volume import grow "$CL_DIR/d8" >/dev/null || { echo "cli_e2e: FAIL: import 8M" >&2; failures=$((failures+1)); }
check_export "8M before resize" grow "$CL_DIR/d8"
out=$("$ZL" volume resize grow 24M) || { echo "cli_e2e: FAIL: resize to 24M: $out" >&2; failures=$((failures+1)); }
grep -q "size 8.0 MiB -> 24.0 MiB" <<<"$out" || { echo "cli_e2e: FAIL: resize output '$out' lacks old and new size" >&2; failures=$((failures+1)); }
check_bytes "resize to 24M" grow $((24 * MiB))
head -c 24M /dev/urandom >"$CL_DIR/d24"
"$ZL" volume import grow "$CL_DIR/d24" >/dev/null || { echo "cli_e2e: FAIL: import 24M into the grown volume" >&2; failures=$((failures+1)); }
check_export "24M after resize" grow "$CL_DIR/d24"
out=$("$ZL" volume resize grow 24M) && grep -q "already" <<<"$out" || { echo "cli_e2e: FAIL: resize to the same size: '$out'" >&2; failures=$((failures+1)); }
expect_fail "resize shrink" "is 24.0 MiB .*shrinking is not supported: give a size >= 24.0 MiB" "$ZL" volume resize grow 8M
expect_fail "resize too large" "largest volume" "$ZL" volume resize grow 2P
expect_fail "resize bad size" "bad size" "$ZL" volume resize grow 0
expect_fail "resize without size" "missing size" "$ZL" volume resize grow
expect_fail "resize unknown" "volume 'nosuch' not found" "$ZL" volume resize nosuch 1G
"$ZL" snapshot create small snap1 >/dev/null || { echo "cli_e2e: FAIL: snapshot create" >&2; failures=$((failures+1)); }
expect_fail "resize a snapshot" "'snap1' is a snapshot of volume vol-.*clone" "$ZL" volume resize snap1 1G
check_bytes "refusals change nothing" grow $((24 * MiB))
gid=$("$ZL" volume inspect grow | sed -n 's/^id  *//p')
rec=$(ectl get "/zipline/volumes/$gid" --print-value-only)
ectl put "/zipline/volumes/$gid" "${rec/\"state\":\"ready\"/\"state\":\"deleting\"}" >/dev/null
expect_fail "resize a deleting volume" "it is deleting, not ready" "$ZL" volume resize grow 32M
"$ZL" volume resize grow 24M >/dev/null || { echo "cli_e2e: FAIL: resize of a deleting volume to its size" >&2; failures=$((failures+1)); }
ectl put "/zipline/volumes/$gid" "$rec" >/dev/null
ectl put "/zipline/attachments/$gid" '{"node":"node-k8s-7"}' >/dev/null
out=$("$ZL" volume resize grow 28M)
grep -q "attached to node node-k8s-7: its device keeps 24.0 MiB" <<<"$out" || { echo "cli_e2e: FAIL: resize of an attached volume: '$out'" >&2; failures=$((failures+1)); }
ectl del "/zipline/attachments/$gid" >/dev/null
# Two at once: both land (the larger wins) or one is refused clearly.
"$ZL" volume resize grow 32M >"$CL_DIR/r32" 2>&1 & p32=$!
"$ZL" volume resize grow 40M >"$CL_DIR/r40" 2>&1 & p40=$!
wait $p32; rc32=$?; wait $p40; rc40=$?
final=$(vol_bytes grow)
for r in 32:$rc32 40:$rc40; do
	[ "${r#*:}" -eq 0 ] && continue
	grep -qE "shrinking is not supported|kept changing" "$CL_DIR/r${r%:*}" ||
		{ echo "cli_e2e: FAIL: concurrent resize to ${r%:*}M: exit ${r#*:}: $(cat "$CL_DIR/r${r%:*}")" >&2; failures=$((failures+1)); }
done
if { [ $rc32 -eq 0 ] && [ $rc40 -eq 0 ] && [ "$final" = $((40 * MiB)) ]; } ||
	{ [ $rc32 -ne 0 ] && [ $rc40 -eq 0 ] && [ "$final" = $((40 * MiB)) ]; } ||
	{ [ $rc32 -eq 0 ] && [ $rc40 -ne 0 ] && [ "$final" = $((32 * MiB)) ]; }; then
	echo "cli_e2e: ok: concurrent resizes: exits 32M=$rc32 40M=$rc40, final $final bytes"
else
	echo "cli_e2e: FAIL: concurrent resizes: exits 32M=$rc32 40M=$rc40, final '$final' bytes" >&2; failures=$((failures+1))
fi
cp "$CL_DIR/d24" "$CL_DIR/want" && truncate -s "${final:-0}" "$CL_DIR/want"
check_export "after concurrent resizes (zeros past the data)" grow "$CL_DIR/want"
expect_fail "bench bad rw" "rw" "$ZL" bench small --rw sideways
expect_fail "bench bad bs" "bs|size" "$ZL" bench small --bs 0
expect_fail "serve bad spec" "nbd" "$ZL" volume serve small --nbd bogus
expect_fail "storage without data dir" "data-dir" "$CL_BIN/zipline-storage" --etcd "$CL_ETCD"
expect_fail "storage missing data dir" "data" "$CL_BIN/zipline-storage" --data-dir "$CL_DIR/nonexistent/x" --etcd "$CL_ETCD"
expect_fail "storage bad flag" "unknown|unrecognized|invalid|usage" "$CL_BIN/zipline-storage" --bogus
expect_fail "storage bad --heal" "heal.*on or off" "$CL_BIN/zipline-storage" --data-dir "$CL_DIR" --heal maybe
expect_fail "controller bad --manager" "manager.*on or off" "$CL_BIN/zipline-controller" \
	--endpoint "unix://$CL_DIR/c.sock" --etcd "$CL_ETCD" --manager=maybe
# Healing is the default; --heal off / --manager=off are the way back to 0.1.
"$CL_BIN/zipline-storage" --help | grep -A1 -- "--heal on|off" | grep -q "default on" ||
	{ echo "cli_e2e: FAIL: zipline-storage --help does not say --heal defaults to on"; failures=$((failures+1)); }
"$CL_BIN/zipline-storage" --help | grep -A1 -- "--auth on|off" | grep -q "default on" ||
	{ echo "cli_e2e: FAIL: zipline-storage --help does not say --auth defaults to on"; failures=$((failures+1)); }
"$CL_BIN/zipline-controller" --help | grep -A2 -- "--manager=on|off" | grep -q "default on" ||
	{ echo "cli_e2e: FAIL: zipline-controller --help does not say --manager defaults to on"; failures=$((failures+1)); }
"$ZL" status >/dev/null || { echo "cli_e2e: FAIL: zl status"; failures=$((failures+1)); }
# The health line (docs/REPLICATION.md §9): OK, not OK while node-2 is gone
# (no manager here: its rows keep naming it), OK again once it is back.
health() { "$ZL" status 2>/dev/null | sed -n 1p; }
expect_health() { # WHAT REGEX
	local h
	for _ in $(seq 1 50); do h=$(health); grep -qE "$2" <<<"$h" && break; sleep 0.2; done
	if grep -qE "$2" <<<"$h"; then echo "cli_e2e: ok: $1: $h"
	else echo "cli_e2e: FAIL: $1: health line '$h' lacks /$2/" >&2; failures=$((failures+1)); fi
}
expect_health "healthy cluster" '^HEALTH_OK$'
out=$("$ZL" volume inspect small)
grep -q ' active  .*node-[12]\*:in_sync' <<<"$out" || { echo "cli_e2e: FAIL: inspect shows no active slice: $out" >&2; failures=$((failures+1)); }
cl_stop storage-2
expect_health "node-2 stopped" '^HEALTH_(WARN|ERR) [0-9]+ slices? '
grep -q 'node-2[*]*:in_sync(down)' <<<"$("$ZL" volume inspect small)" || { echo "cli_e2e: FAIL: inspect does not mark node-2 down" >&2; failures=$((failures+1)); }
cl_start_storage 2
cl_wait_nodes 2 || { echo "cli_e2e: FAIL: node-2 did not come back" >&2; failures=$((failures+1)); }
expect_health "node-2 back" '^HEALTH_OK$'
[ $failures -eq 0 ] || { echo "cli_e2e: $failures failure(s)"; exit 1; }
echo "cli_e2e: PASS"
