#!/usr/bin/env bash
# zl snapshot create|ls|rm and zl volume inspect against a real etcd (run
# under test/lib/with-etcd.sh, which sets ZL_TEST_ETCD), no storage: the
# snapshot transaction and its errors; a live snapwriters/ key makes create
# ask that client and, when nobody answers, time out with what to do, leaving
# no request behind; `zl volume rm` of a volume that holds snapshots is
# refused until they are deleted; a snapshot of a 1 GiB and of a 64 GiB thin
# volume writes the same records (figure printed); group snapshots
# (create-group, rm-group, a client that never holds). Usage: cli_snap_zl.sh
# BUILD_DIR
set -u
BUILD=$(cd "$1" && pwd)
ZL=$BUILD/bin/zl
[ -x "$ZL" ] || { echo "cli_snap_zl: FAIL: $ZL is not built" >&2; exit 1; }
[ -n "${ZL_TEST_ETCD:-}" ] || { echo "cli_snap_zl: FAIL: ZL_TEST_ETCD unset: run via test/lib/with-etcd.sh" >&2; exit 1; }
P=/zl-cli-snap-$$/
top=$(mktemp -d /tmp/zl-cli-snap.XXXXXX)
export ETCDCTL_API=3
ectl() { etcdctl --endpoints="$ZL_TEST_ETCD" "$@"; }
trap 'ectl del --prefix "$P" >/dev/null; rm -rf "$top"' EXIT
failures=0
fail() { echo "cli_snap_zl: FAIL: $*" >&2; failures=$((failures + 1)); }

# run ARGS...: sets rc, out (stdout), err (stderr) of zl ARGS.
run() {
	out=$("$ZL" --etcd "$ZL_TEST_ETCD" --etcd-prefix "$P" "$@" 2>"$top/err"); rc=$?
	err=$(cat "$top/err")
}

# Three node records (no storage behind them: volume create only places).
for i in 0 1 2; do
	ectl put "${P}nodes/n$i" "{\"id\":\"n$i\",\"addr\":\"127.0.0.1\",\"port\":$((7000 + i)),\"rdma_port\":0,\"transports\":\"tcp\",\"domain\":\"\",\"capacity\":1073741824,\"free\":1073741824,\"start_time\":1,\"version\":\"t\"}" >/dev/null
done
run volume create va --size 64M || true
[ "$rc" -eq 0 ] || { echo "cli_snap_zl: FAIL: volume create va: $err" >&2; exit 1; }
run volume create vb --size 64M
[ "$rc" -eq 0 ] || { echo "cli_snap_zl: FAIL: volume create vb: $err" >&2; exit 1; }

run snapshot create va s1
[ "$rc" -eq 0 ] || fail "create s1: exit $rc: $err"
grep -q "created snapshot 's1' (snap-[0-9a-f]\{16\}) of volume 'va' at sequence 1" <<<"$out" || fail "create s1 said: $out"
run snapshot create va s1
[ "$rc" -eq 0 ] || fail "create s1 again: exit $rc: $err"
grep -q "exists: snapshot 's1'.*sequence 1" <<<"$out" || fail "create s1 again said: $out"
run snapshot create va s2
grep -q "at sequence 2" <<<"$out" || fail "create s2 said: $out $err"
run snapshot create vb s1
[ "$rc" -eq 1 ] || fail "s1 of another volume: exit $rc"
grep -q "snapshot name 's1' is taken by a snapshot of volume vol-[0-9a-f]*: pick another name" <<<"$err" || fail "s1 of another volume said: $err"
run snapshot create nope s3
[ "$rc" -eq 1 ] || fail "snapshot of a missing volume: exit $rc"
grep -q "volume 'nope' not found: no snapshot taken" <<<"$err" || fail "missing volume said: $err"
run snapshot create va 'bad/name'
[ "$rc" -eq 2 ] || fail "bad name: exit $rc"
grep -q "bad snapshot name" <<<"$err" || fail "bad name said: $err"

run snapshot ls
[ "$rc" -eq 0 ] || fail "ls: exit $rc: $err"
[ "$(grep -c ' va ' <<<"$out")" -eq 2 ] || fail "ls lists two snapshots of va: $out"
grep -qE '^s2 +snap-[0-9a-f]{16} +va +2 +64(\.0)? ?MiB +ready ' <<<"$out" || fail "ls row of s2: $out"
run snapshot ls vb
[ "$(wc -l <<<"$out")" -eq 1 ] || fail "ls vb lists none: $out"
run snapshot ls nope
grep -q "volume 'nope' not found" <<<"$err" || fail "ls of a missing volume said: $err"
run volume inspect va
grep -q "^snap seq    2" <<<"$out" || fail "inspect: snap seq: $out"
grep -q "^snapshots   2" <<<"$out" || fail "inspect: snapshots: $out"
grep -qE '^  s1 +snap-[0-9a-f]{16} +seq 1 ' <<<"$out" || fail "inspect: row of s1: $out"

# A serving client is registered but never answers: create waits --timeout,
# says what to do, and leaves no request behind.
vid=$(ectl get --print-value-only "${P}names/va")
ectl put "${P}snapwriters/$vid" "ghost-client" >/dev/null
start=$(date +%s)
run snapshot create va s4 --timeout 2
[ "$rc" -eq 1 ] || fail "unanswered create: exit $rc"
grep -q "client ghost-client serving volume 'va' did not take snapshot 's4' within 2 s" <<<"$err" || fail "unanswered create said: $err"
[ $(($(date +%s) - start)) -le 10 ] || fail "unanswered create took too long"
[ -z "$(ectl get --prefix --keys-only "${P}snapreqs/")" ] || fail "request left behind"
run snapshot ls va
grep -q "^s4 " <<<"$out" && fail "s4 taken without the client"
# The client goes away while asked: create takes it itself.
( sleep 1; ectl del "${P}snapwriters/$vid" >/dev/null ) &
run snapshot create va s4 --timeout 20
wait
[ "$rc" -eq 0 ] || fail "create after the client left: exit $rc: $err"
grep -q "created snapshot 's4'.*sequence 3" <<<"$out" || fail "create after the client left said: $out"

run snapshot rm s1
[ "$rc" -eq 0 ] || fail "rm s1: exit $rc: $err"
run snapshot rm s1
[ "$rc" -eq 1 ] || fail "rm s1 again: exit $rc"
grep -q "snapshot 's1' not found" <<<"$err" || fail "rm s1 again said: $err"
run volume inspect va
grep -q "^snapshots   2" <<<"$out" || fail "inspect after rm: $out"
run snapshot export nope "$top/x"
grep -q "snapshot 'nope' not found" <<<"$err" || fail "export of a missing snapshot said: $err"
run volume export vb "$top/x" --snapshot s2
grep -q "snapshot 's2' is not a snapshot of volume 'vb'" <<<"$err" || fail "export of another volume's snapshot said: $err"

# A volume that holds snapshots is not removed (their data are its chunks):
# the refusal says what to do; once they are gone it is.
run volume rm va
[ "$rc" -eq 1 ] || fail "rm of a volume with snapshots: exit $rc"
grep -q "volume 'va' has 2 snapshots, which live in its chunks: delete them first" <<<"$err" || fail "rm of a volume with snapshots said: $err"
run volume inspect va
[ "$rc" -eq 0 ] || fail "va is gone after a refused rm: $err"
run snapshot rm s2
run snapshot rm s4
run volume rm va
[ "$rc" -eq 0 ] || fail "rm of va once its snapshots are gone: exit $rc: $err"

# Taking a snapshot is a metadata operation: the same records for a 1 GiB
# and a 64 GiB thin volume, and no work that grows with the size (issue 25
# prints both).
declare -A ms len vlen norm
for sz in 1G 64G; do
	run volume create "thin$sz" --size "$sz"
	[ "$rc" -eq 0 ] || fail "volume create thin$sz: $err"
	t0=$(date +%s%N)
	run snapshot create "thin$sz" "snap$sz"
	t1=$(date +%s%N)
	[ "$rc" -eq 0 ] || fail "snapshot of thin$sz: exit $rc: $err"
	sid=$(ectl get --print-value-only "${P}snapnames/snap$sz")
	rec=$(ectl get --print-value-only "${P}snapshots/$sid")
	tvid=$(ectl get --print-value-only "${P}names/thin$sz")
	vrec=$(ectl get --print-value-only "${P}volumes/$tvid")
	ms[$sz]=$(((t1 - t0) / 1000000))
	len[$sz]=${#rec}
	vlen[$sz]=${#vrec}
	# The record without what names it and its size.
	norm[$sz]=$(sed -E 's/"(size|created)":[0-9]+//g; s/"(id|vol|name)":"[^"]*"//g' <<<"$rec")
done
echo "FIGURE: cli_snap_zl: snapshot of a 1 GiB thin volume ${ms[1G]} ms, record ${len[1G]} bytes (volume record ${vlen[1G]}); of a 64 GiB one ${ms[64G]} ms, record ${len[64G]} bytes (volume record ${vlen[64G]})"
[ -n "${norm[1G]}" ] && [ "${norm[1G]}" = "${norm[64G]}" ] ||
	fail "the snapshot records differ beyond names and size: '${norm[1G]}' vs '${norm[64G]}'"
# The volume records differ only in the size's digits (1073741824 and
# 68719476736) and the name's (thin1G, thin64G).
[ $((vlen[64G] - vlen[1G])) -eq 2 ] || fail "volume records of ${vlen[1G]} and ${vlen[64G]} bytes"
for sz in 1G 64G; do
	[ "${ms[$sz]}" -lt 5000 ] || fail "snapshot of the $sz volume took ${ms[$sz]} ms"
done

# Group snapshots (docs/SNAPSHOTS.md §5): one transaction over both volumes;
# the same command again finds it; a serving client that never holds fails
# the group with what to do and leaves nothing behind (no request, no
# snapshot, no sequence bump); rm-group removes every member.
run volume create ga --size 64M
[ "$rc" -eq 0 ] || fail "volume create ga: $err"
run volume create gb --size 64M
[ "$rc" -eq 0 ] || fail "volume create gb: $err"
run snapshot create-group g1 ga gb
[ "$rc" -eq 0 ] || fail "create-group g1: exit $rc: $err"
grep -q "^created group snapshot 'g1' of 2 volumes" <<<"$out" || fail "create-group g1 said: $out"
grep -qE '^  g1\.ga +snap-[0-9a-f]{16} +seq 1 ' <<<"$out" || fail "create-group g1 member ga: $out"
grep -qE '^  g1\.gb +snap-[0-9a-f]{16} +seq 1 ' <<<"$out" || fail "create-group g1 member gb: $out"
ectl get --print-value-only "${P}snapgroups/g1" | grep -q '"name":"g1"' || fail "no group record g1"
run snapshot create-group g1 ga gb
grep -q "^exists: group snapshot 'g1'" <<<"$out" || fail "create-group g1 again said: $out $err"
run snapshot create-group g1 ga
[ "$rc" -eq 1 ] || fail "create-group g1 of other volumes: exit $rc"
grep -q "snapshot group 'g1' exists with other volumes" <<<"$err" || fail "g1 of other volumes said: $err"
run snapshot ls
[ "$(grep -cE '^g1\.g[ab] .* g1 ' <<<"$out")" -eq 2 ] || fail "ls does not show group g1: $out"
run snapshot create-group g2 ga ga
[ "$rc" -eq 1 ] || fail "a volume named twice: exit $rc"
grep -q "volume 'ga' is named twice" <<<"$err" || fail "a volume named twice said: $err"
gbid=$(ectl get --print-value-only "${P}names/gb")
ectl put "${P}snapwriters/$gbid" "ghost-gb" >/dev/null
start=$(date +%s)
run snapshot create-group g2 ga gb --timeout 2
[ "$rc" -eq 1 ] || fail "create-group with a client that never holds: exit $rc"
grep -q "client ghost-gb serving volume 'gb' did not hold its writes within 2000 ms; every held client was released" <<<"$err" ||
	fail "create-group with a client that never holds said: $err"
[ $(($(date +%s) - start)) -le 10 ] || fail "the failed group took too long"
[ -z "$(ectl get --prefix --keys-only "${P}snapreqs/")" ] || fail "group request left behind"
[ -z "$(ectl get --prefix --keys-only "${P}snapgroups/g2")" ] || fail "half group g2 left behind"
run volume inspect ga
grep -q "^snap seq    1$" <<<"$out" || fail "the failed group bumped ga: $out"
ectl del "${P}snapwriters/$gbid" >/dev/null
run snapshot rm-group g1
[ "$rc" -eq 0 ] || fail "rm-group g1: exit $rc: $err"
grep -q "deleted group 'g1' and its 2 snapshots" <<<"$out" || fail "rm-group g1 said: $out"
run snapshot rm-group g1
grep -q "group 'g1' not found" <<<"$err" || fail "rm-group g1 again said: $err"
[ -z "$(ectl get --prefix --keys-only "${P}snapgroups/")" ] || fail "group record left after rm-group"
run volume inspect ga
grep -q "^snapshots   0" <<<"$out" || fail "rm-group left a snapshot of ga: $out"

if [ "$failures" -ne 0 ]; then
	echo "cli_snap_zl: $failures failure(s)" >&2
	exit 1
fi
echo "cli_snap_zl: PASS"
