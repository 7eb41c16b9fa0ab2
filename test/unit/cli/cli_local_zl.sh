#!/usr/bin/env bash
# The real zl against a real etcd (run under test/lib/with-etcd.sh, which sets
# ZL_TEST_ETCD), found only through a local cluster dir ($ZIPLINE_LOCAL_DIR):
# a safe endpoints file is used; a world-writable file or directory is refused
# with a message that names it and says to pass --etcd, and zl contacts no
# etcd at all then; --etcd still works.
# Usage: cli_local_zl.sh BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
ZL=$BUILD/bin/zl
[ -x "$ZL" ] || { echo "cli_local_zl: FAIL: $ZL is not built" >&2; exit 1; }
[ -n "${ZL_TEST_ETCD:-}" ] || { echo "cli_local_zl: FAIL: ZL_TEST_ETCD unset: run via test/lib/with-etcd.sh" >&2; exit 1; }
unset ZIPLINE_ETCD
# Under /tmp on purpose: a sticky world-writable directory above is fine.
top=$(mktemp -d /tmp/zl-cli-local.XXXXXX)
trap 'chmod 700 "$top"; rm -rf "$top"' EXIT
export ZIPLINE_LOCAL_DIR=$top/local
mkdir -m 0755 "$ZIPLINE_LOCAL_DIR"
echo "$ZL_TEST_ETCD" >"$ZIPLINE_LOCAL_DIR/etcd.endpoints"
chmod 0644 "$ZIPLINE_LOCAL_DIR/etcd.endpoints"
failures=0
fail() { echo "cli_local_zl: FAIL: $*" >&2; failures=$((failures + 1)); }

# run ARGS...: sets rc, out (stdout), err (stderr) of zl ARGS.
run() {
	out=$("$ZL" "$@" 2>"$top/err"); rc=$?
	err=$(cat "$top/err")
}

# A safe file: zl status talks to that etcd.
run status
[ "$rc" -eq 0 ] || fail "safe endpoints file: exit $rc: $err"
grep -qE "^etcd +$ZL_TEST_ETCD +OK" <<<"$out" || fail "safe endpoints file: status did not use $ZL_TEST_ETCD: $out"
echo "cli_local_zl: ok: safe file used: $(head -1 <<<"$out")"

# expect_refused WHAT PATH: zl status must fail naming PATH, the problem and --etcd.
expect_refused() {
	local what=$1 path=$2
	run status
	if [ "$rc" -eq 0 ]; then fail "$what: exit 0"; return; fi
	grep -q "etcd " <<<"$out" && fail "$what: zl contacted an etcd: $out"
	for want in "$path" "writable by every user" "--etcd"; do
		grep -qF -- "$want" <<<"$err" || fail "$what: message '$err' lacks '$want'"
	done
	[ "$(wc -l <<<"$err")" -eq 1 ] || fail "$what: more than one line: $err"
	echo "cli_local_zl: ok: $what -> exit $rc: $err"
}

chmod 0666 "$ZIPLINE_LOCAL_DIR/etcd.endpoints"
expect_refused "world-writable file" "$ZIPLINE_LOCAL_DIR/etcd.endpoints"
# --etcd (and $ZIPLINE_ETCD) bypass the file.
run --etcd "$ZL_TEST_ETCD" status
[ "$rc" -eq 0 ] || fail "--etcd with a bad local file: exit $rc: $err"
ZIPLINE_ETCD=$ZL_TEST_ETCD run status
[ "$rc" -eq 0 ] || fail "ZIPLINE_ETCD with a bad local file: exit $rc: $err"
chmod 0644 "$ZIPLINE_LOCAL_DIR/etcd.endpoints"

chmod 0777 "$ZIPLINE_LOCAL_DIR"
expect_refused "world-writable directory" "$ZIPLINE_LOCAL_DIR"
chmod 0755 "$ZIPLINE_LOCAL_DIR"

chmod 0777 "$top"
expect_refused "world-writable parent without sticky bit" "$top"
chmod 0700 "$top"

run status
[ "$rc" -eq 0 ] || fail "safe again: exit $rc: $err"

[ "$failures" -eq 0 ] || { echo "cli_local_zl: $failures failure(s)" >&2; exit 1; }
echo "cli_local_zl: all ok"
