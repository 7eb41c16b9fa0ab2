#!/usr/bin/env bash
# E2E: `zl volume rm` with a storage daemon down, tombstones, attachments.
# - rm while one of 3 daemons is killed succeeds; the live daemons have no
#   chunk file of the volume; the killed one still has its files until it is
#   restarted, then removes them within a bounded time (its tombstone);
#   another volume stays intact everywhere. Meanwhile the manager takes
#   node-3 out of the other volumes' rows; back, it is in sync again.
# - A tombstone only deletes what it names: one naming a volume that still
#   exists is kept and the data stays; one naming a volume without a record
#   removes its replicas on a live daemon (through the watch).
# - rm of an attached volume is refused (exit != 0, data intact); --force
#   removes it and its attachment.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() {
	echo "volume_rm_e2e: FAIL: $*" >&2
	cl_dump_logs 15 "$CL_DIR"/storage-*/log
	exit 1
}
ok() { echo "volume_rm_e2e: ok: $*"; }
cl_e2e_begin volume_rm_e2e "$1" 3 || fail "cluster did not start"
ETCDCTL=(etcdctl --endpoints "$CL_ETCD")
vid_of() { "$ZL" volume inspect "$1" | awk '$1 == "id" { print $2 }'; }
# chunk files of volume id $2 on daemon $1
chunks() { find "$CL_DIR/storage-$1/data/chunks/$2" -name '*.zlc' 2>/dev/null | wc -l; }
# wait_gone NODE VID SECONDS: until daemon NODE has no chunk file of VID.
wait_gone() {
	local t
	for t in $(seq 1 $(($3 * 10))); do
		[ "$(chunks "$1" "$2")" -eq 0 ] && { echo "$t"; return 0; }
		sleep 0.1
	done
	return 1
}

head -c 3M /dev/urandom >"$CL_DIR/data"
for v in doomed keep att; do
	"$ZL" volume create "$v" --size 4M --replicas 3 --chunk-size 1M >/dev/null || fail "create $v"
	"$ZL" volume import "$v" "$CL_DIR/data" >/dev/null || fail "import $v"
done
doomed=$(vid_of doomed) keep=$(vid_of keep) att=$(vid_of att)
for i in 1 2 3; do
	for v in "$doomed" "$keep" "$att"; do
		[ "$(chunks $i "$v")" -gt 0 ] || fail "node-$i holds no chunk of $v after import"
	done
done

# ---- rm with node-3 killed ----
cl_stop storage-3 KILL
out=$("$ZL" volume rm doomed 2>&1) || fail "rm with node-3 down: $out"
grep -q "node-3" <<<"$out" || fail "rm output does not name the down node: $out"
ok "rm with node-3 down: $out"
for i in 1 2; do
	[ "$(chunks $i "$doomed")" -eq 0 ] || fail "node-$i still has $(chunks $i "$doomed") chunk files of doomed"
done
[ "$(chunks 3 "$doomed")" -gt 0 ] || fail "node-3's files vanished while it was down (test is void)"
if "$ZL" volume inspect doomed >/dev/null 2>&1; then fail "doomed still listed after rm"; fi
[ -n "$("${ETCDCTL[@]}" get "/zipline/deletes/node-3/$doomed" --print-value-only)" ] ||
	fail "no tombstone for node-3"
[ -z "$("${ETCDCTL[@]}" get --prefix /zipline/deletes/node-1/ --keys-only)" ] ||
	fail "node-1 has a tombstone left although it removed its replicas"
ok "live nodes have no chunk of doomed, node-3 keeps $(chunks 3 "$doomed") files and a tombstone"

# The manager takes the dead node-3 out of the rows of keep and att once its
# node lease expired (10 s TTL + 2 s grace): it must rejoin them by healing.
for _ in $(seq 1 300); do
	cl_rows "$keep" | grep -q "node-3:out" && break
	sleep 0.1
done
cl_rows "$keep" | grep -q "node-3:out" || fail "the manager did not take the dead node-3 out of keep's rows in 30 s"
ok "the manager took the dead node-3 out of keep's rows"
cl_start_storage 3
t=$(wait_gone 3 "$doomed" 30) || fail "node-3 still has $(chunks 3 "$doomed") chunk files of doomed 30 s after restart"
ok "restarted node-3 removed its replicas of doomed within $((t / 10)).$((t % 10)) s"
for _ in $(seq 1 50); do
	[ -z "$("${ETCDCTL[@]}" get "/zipline/deletes/node-3/$doomed" --keys-only)" ] && break
	sleep 0.1
done
[ -z "$("${ETCDCTL[@]}" get "/zipline/deletes/node-3/$doomed" --keys-only)" ] || fail "node-3 did not clear its tombstone"
cl_wait_nodes 3 || fail "node-3 did not register again"
for i in 1 2 3; do
	[ "$(chunks $i "$keep")" -gt 0 ] || fail "node-$i lost the chunks of keep"
done
"$ZL" volume export keep "$CL_DIR/keep.out" >/dev/null || fail "export keep"
cmp -n 3145728 "$CL_DIR/data" "$CL_DIR/keep.out" || fail "keep's data changed"
# Healing (the default, manager started by cl_e2e_begin): node-3 missed
# nothing of keep and att, but was out of their rows while it was down; it
# comes back in sync by itself, through recovering.
for v in "$keep" "$att"; do
	seen=$(cl_wait_in_sync "$v" node-3 60) || fail "node-3 not back in sync in the rows of $v"
	ok "node-3 back in sync in every row of $v (states seen: $seen)"
	# The way back is out -> recovering -> in_sync (the manager's log; the
	# copy of nothing may be too quick for the poll above to see).
	for tr in "out->recovering" "recovering->in_sync"; do
		grep -q "manager: vol=$v slice=.* member=node-3 $tr" "$CL_DIR/manager/log" ||
			fail "the manager logged no $tr of node-3 in $v"
	done
done
ok "keep intact on every node"

# ---- tombstones delete only what they name ----
"${ETCDCTL[@]}" put "/zipline/deletes/node-1/$keep" '{"vol":"x"}' >/dev/null || fail "put tombstone"
fake=vol-00000000deadbeef
mkdir -p "$CL_DIR/storage-2/data/chunks/$fake"
cp "$(find "$CL_DIR/storage-2/data/chunks/$keep" -name '*.zlc' | head -1)" \
	"$CL_DIR/storage-2/data/chunks/$fake/0000000000000000.zlc"
"${ETCDCTL[@]}" put "/zipline/deletes/node-2/$fake" '{"vol":"x"}' >/dev/null || fail "put tombstone"
t=$(wait_gone 2 "$fake" 10) || fail "live node-2 did not act on a tombstone of a volume without record"
[ -d "$CL_DIR/storage-2/data/chunks/$fake" ] && fail "node-2 left the directory of $fake"
ok "live node-2 removed $fake named by its tombstone within $((t / 10)).$((t % 10)) s (watch)"
grep -q "tombstone of vol=$keep kept" "$CL_DIR/storage-1/log" || fail "node-1 did not log keeping the tombstone of an existing volume"
[ "$(chunks 1 "$keep")" -gt 0 ] || fail "a tombstone of an existing volume removed its data on node-1"
"${ETCDCTL[@]}" del "/zipline/deletes/node-1/$keep" >/dev/null
ok "a tombstone naming an existing volume left its data alone"

# ---- attached volume ----
"${ETCDCTL[@]}" put "/zipline/attachments/$att" \
	'{"node":"k8s-node-1","epoch":7,"readonly":false,"time":1}' >/dev/null || fail "put attachment"
out=$("$ZL" volume rm att 2>&1); rc=$?
[ $rc -ne 0 ] || fail "rm of an attached volume succeeded"
grep -q "attached to node k8s-node-1" <<<"$out" && grep -q -- "--force" <<<"$out" ||
	fail "rm of an attached volume: unclear message: $out"
ok "rm of attached volume refused (exit $rc): $out"
"$ZL" volume inspect att >/dev/null || fail "att gone after a refused rm"
"$ZL" volume export att "$CL_DIR/att.out" >/dev/null || fail "export att"
cmp -n 3145728 "$CL_DIR/data" "$CL_DIR/att.out" || fail "att's data changed after a refused rm"
out=$("$ZL" volume rm att --force 2>&1) || fail "rm --force: $out"
for i in 1 2 3; do
	[ "$(chunks $i "$att")" -eq 0 ] || fail "node-$i still has chunk files of att after rm --force"
done
[ -z "$("${ETCDCTL[@]}" get "/zipline/attachments/$att" --keys-only)" ] || fail "attachment left after rm --force"
if "$ZL" volume inspect att >/dev/null 2>&1; then fail "att still listed after rm --force"; fi
ok "rm --force: $out"
echo "volume_rm_e2e: PASS"
