#!/usr/bin/env bash
# E2E: zl's error handling. Bad flags, unknown volumes, bad sizes and an
# unreachable etcd each give one clear message and a non-zero exit.
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
