#!/usr/bin/env bash
# Acceptance test MIN_SIZE of issue 10 (docs/REPLICATION.md §2 "min_size"):
# three storage daemons (--heal on), a real zipline-controller with the
# manager on, a 3-replica volume (min_size: the default, 2) full of random
# data (the imported file is the oracle). node-1 and node-2 are killed (-9)
# while a write is issued (`zl --io-timeout 30`): it must not be acknowledged;
# once the manager has left node-3 the only in-sync member (and primary) of
# every slice, a write must NOT be acknowledged on that one copy: with
# `zl --io-timeout 5`, `zl volume import` of a small file fails after about
# 5 s, exit != 0, saying why (min_size / in-sync copies). Reads of the old
# data go on (node-3 is the primary). The unacknowledged write may or may
# not have landed, 4 KiB block by block, but what a read returned must not
# change by itself afterwards. node-1 and node-2 return: every slice 3 of 3
# IN_SYNC within a bound, every chunk identical on the three replicas; then a
# write succeeds and reads back. Between: `zl volume set --min-size 1` on the
# running volume makes a write to node-3 alone acknowledged (and read back).
#
# Usage: minsize_e2e.sh BUILD_DIR [--manager-restart]
#   --manager-restart: the controller is killed (-9) and restarted right after
#   the two daemons die and again after the refused write (both while they
#   are down); the end result must be the same.
# Figures on lines starting with "FIGURE:". KEEP=1 keeps the state dir.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal_b.sh"
hb_test minsize_e2e "${2:-}"
SIZE_MB=16
CHUNK=65536
SMALL=65536 # the refused write: chunk 0 (slice 0), at offset 0
IOT=5
HEAL_BOUND_S=60
cl_require "$T" "$1" zipline-storage zipline-controller zl

export CL_STORAGE_FLAGS="--recovery-mbps 400 --log-level info"
hb_begin e2e-minsize "$1" 3 || fail "cluster did not start"
"$ZL" --io-timeout "$IOT" volume ls >/dev/null 2>"$CL_DIR/iot.err" ||
	fail "zl does not take the global flag --io-timeout (the client's heal mode has not landed):" \
		"$(head -2 "$CL_DIR/iot.err")"
hb_start_manager 600 || fail "the manager (zipline-controller --manager=on) did not start"

"$ZL" volume create mvol --size ${SIZE_MB}M --replicas 3 --chunk-size 64K || fail "create"
vid=$("$ZL" volume inspect mvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"
ms=$(hb_ctl min_size "$vid")
[ "$ms" = 2 ] || [ "$ms" = default ] || fail "volume min_size is $ms, want 2 (the default for 3 replicas)"
head -c ${SIZE_MB}M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import mvol "$CL_DIR/in" || fail "import"
hb_ctl healthy "$vid" 3 >/dev/null || fail "rows not healthy before any failure: $(hb_ctl healthy "$vid" 3)"

restart_manager() {
	echo "$T: killing the manager (-9) and starting it again ($1)"
	cl_manager_outage manager 1 hb_start_manager 600 || fail "the manager did not start again"
}

# Two of the three members of every slice die.
t0=$(hb_now_ms)
cl_stop storage-1 KILL
cl_stop storage-2 KILL
[ "$RESTART" = 0 ] || restart_manager "node-1 and node-2 just died"
# A write right after the kills, before the manager acts, must not be
# acknowledged either: it spans the change of primary, then meets min_size.
head -c $SMALL /dev/urandom >"$CL_DIR/early"
"$ZL" --io-timeout 30 volume import mvol "$CL_DIR/early" >"$CL_DIR/early.log" 2>&1 &
HB_BG=$!
for _ in $(seq 1 225); do
	hb_ctl only "$vid" node-3 >"$CL_DIR/only" && break
	sleep 0.2
done
hb_ctl only "$vid" node-3 >"$CL_DIR/only" ||
	fail "45 s after the kills node-3 is not the only in-sync member of every row: $(cat "$CL_DIR/only")"
echo "FIGURE: node-3 the only in-sync member (primary) of every row $(($(hb_now_ms) - t0)) ms after the kills"
set +e
wait "$HB_BG"
rc=$?
set -e
msg=$(grep -v '^\s*$' "$CL_DIR/early.log" | tail -1)
echo "FIGURE: write issued right after the kills (--io-timeout 30): exit $rc after $(($(hb_now_ms) - t0)) ms: $msg"
[ "$rc" != 0 ] || fail "a write issued right after the kills was acknowledged with at most 1 in-sync copy (min_size 2)"

# A write to one copy must not be acknowledged.
c0="$CL_DIR/storage-3/data/chunks/$vid/0000000000000000.zlc"
[ -f "$c0" ] || fail "no chunk file $c0 on node-3"
hb_chunk_data "$CHUNK" "$c0" "$CL_DIR/c0.before" || fail "reading $c0"
head -c $SMALL /dev/urandom >"$CL_DIR/new"
tw=$(hb_now_ms)
set +e
"$ZL" --io-timeout "$IOT" volume import mvol "$CL_DIR/new" >"$CL_DIR/write.log" 2>&1
rc=$?
set -e
dt=$(($(hb_now_ms) - tw))
msg=$(grep -v '^\s*$' "$CL_DIR/write.log" | tail -1)
echo "FIGURE: write of $SMALL bytes with 1 in-sync copy: exit $rc after $dt ms: $msg"
[ "$rc" != 0 ] || fail "the write was acknowledged with 1 in-sync copy (min_size 2): exit 0 after $dt ms"
[ "$dt" -ge $((IOT * 1000 - 1000)) ] ||
	fail "the write failed after $dt ms, before the ${IOT} s --io-timeout: it did not wait: $msg"
# Bound: io-timeout plus one attempt that was in flight at the deadline
# (the client's request timeout is 10 s).
[ "$dt" -le $((IOT * 1000 + 10000)) ] || fail "the write failed only after $dt ms, not about the --io-timeout of $IOT s: $msg"
grep -Eiq 'min.?size|in.sync (copies|members|replicas)' "$CL_DIR/write.log" ||
	fail "the error does not say why (min_size / in-sync copies): $msg"
hb_chunk_data "$CHUNK" "$c0" "$CL_DIR/c0.after" || fail "reading $c0"
if cmp -s "$CL_DIR/c0.before" "$CL_DIR/c0.after"; then
	echo "FIGURE: node-3 chunk 0 unchanged by the refused write"
else
	echo "FIGURE: node-3 chunk 0 changed by the refused write (4 KiB blocks $(hb_blocks_of "$CL_DIR/c0.after" $SMALL "$CL_DIR/c0.before" "$CL_DIR/new"))"
fi

# The knob on the running volume (zl volume set, issue 26): min_size 1
# lets the one in-sync copy acknowledge; the daemons apply the new record
# from their watch.
"$ZL" volume set mvol --min-size 1 >"$CL_DIR/set.log" 2>&1 || fail "zl volume set --min-size 1: $(cat "$CL_DIR/set.log")"
grep -q 'min_size 2 -> 1' "$CL_DIR/set.log" || fail "zl volume set did not say what changed: $(cat "$CL_DIR/set.log")"
ms=$(hb_ctl min_size "$vid")
[ "$ms" = 1 ] || fail "after zl volume set the record's min_size is $ms, not 1"
if "$ZL" volume set mvol --min-size 4 >"$CL_DIR/set4.log" 2>&1; then
	fail "zl volume set --min-size 4 on 3 replicas was accepted"
fi
head -c $SMALL /dev/urandom >"$CL_DIR/new1"
tw=$(hb_now_ms)
"$ZL" --io-timeout 30 volume import mvol "$CL_DIR/new1" >"$CL_DIR/write1.log" 2>&1 ||
	fail "with min_size 1 a write to the one in-sync copy failed: $(tail -1 "$CL_DIR/write1.log")"
echo "FIGURE: zl volume set --min-size 1: a write with 1 in-sync copy acknowledged after $(($(hb_now_ms) - tw)) ms"

# Reads go on (the range of the writes above: the last acknowledged one).
t_r=$(hb_now_ms)
"$ZL" --io-timeout 30 volume export mvol "$CL_DIR/out1" >"$CL_DIR/export1.log" 2>&1 ||
	fail "reading the volume with node-3 alone failed: $(tail -1 "$CL_DIR/export1.log")"
echo "FIGURE: export of ${SIZE_MB} MiB with node-3 alone took $(($(hb_now_ms) - t_r)) ms"
cmp -s <(tail -c +$((SMALL + 1)) "$CL_DIR/in") <(tail -c +$((SMALL + 1)) "$CL_DIR/out1") ||
	fail "data outside the refused write reads back different from the input (with node-3 alone)"
cmp -s <(head -c $SMALL "$CL_DIR/new1") <(head -c $SMALL "$CL_DIR/out1") ||
	fail "the write acknowledged with min_size 1 does not read back (node-3 alone)"
b1=$(hb_blocks_of "$CL_DIR/out1" $SMALL "$CL_DIR/in" "$CL_DIR/early" "$CL_DIR/new" "$CL_DIR/new1") ||
	fail "the refused writes' range reads back data never written there: $b1"
echo "FIGURE: refused writes' range read with node-3 alone: 4 KiB blocks $b1"
[ "$RESTART" = 0 ] || restart_manager "node-1 and node-2 still down"

# node-1 and node-2 return (same disks).
th=$(hb_now_ms)
cl_start_storage 1
cl_start_storage 2
cl_wait_nodes 3 || fail "node-1 and node-2 did not register again"
ok=0
while [ $(($(hb_now_ms) - th)) -lt $((HEAL_BOUND_S * 1000)) ]; do
	hb_ctl healthy "$vid" 3 >"$CL_DIR/healthy" && { ok=1; break; }
	sleep 0.2
done
read -r chunks copied lines < <(hb_recovery_bytes node-1 node-2)
echo "FIGURE: heal $(($(hb_now_ms) - th)) ms from the restart of node-1 and node-2 to" \
	"$(head -1 "$CL_DIR/healthy") (bound ${HEAL_BOUND_S} s); copied $copied bytes in $chunks chunks ($lines caught-up lines)"
[ "$ok" = 1 ] || fail "not every slice is 3 of 3 IN_SYNC ${HEAL_BOUND_S} s after node-1 and node-2 returned: $(cat "$CL_DIR/healthy")"
hb_files "$CHUNK" "$vid" 1 2 3 >"$CL_DIR/files" || fail "reading chunk files"
res=$(hb_ctl replicas "$vid" "$CL_DIR/files" node-1 node-2 node-3) ||
	fail "after healing the three replicas differ: $res"
echo "FIGURE: after heal: $(head -1 <<<"$res") (data and version, three replicas)"

# What was read must not change by itself (no write came in since).
"$ZL" --io-timeout 30 volume export mvol "$CL_DIR/out2" >"$CL_DIR/export2.log" 2>&1 ||
	fail "reading the volume after healing failed: $(tail -1 "$CL_DIR/export2.log")"
cmp -s <(tail -c +$((SMALL + 1)) "$CL_DIR/in") <(tail -c +$((SMALL + 1)) "$CL_DIR/out2") ||
	fail "after healing, data outside the refused write differs from the input"
cmp -s <(head -c $SMALL "$CL_DIR/out1") <(head -c $SMALL "$CL_DIR/out2") ||
	fail "the refused write's range changed by itself after it was read with node-3 alone" \
		"(then: $b1; now: $(hb_blocks_of "$CL_DIR/out2" $SMALL "$CL_DIR/in" "$CL_DIR/early" "$CL_DIR/new" "$CL_DIR/new1" || true))"
res=$(hb_ctl replicas "$vid" --input "$CL_DIR/out2" "$CL_DIR/files" node-1 node-2 node-3) ||
	fail "the replicas differ from what the client reads: $res"

# A write succeeds again and reads back.
head -c $SMALL /dev/urandom >"$CL_DIR/new2"
cp "$CL_DIR/in" "$CL_DIR/want"
dd if="$CL_DIR/new2" of="$CL_DIR/want" conv=notrunc status=none
tw=$(hb_now_ms)
"$ZL" --io-timeout 30 volume import mvol "$CL_DIR/new2" >"$CL_DIR/write2.log" 2>&1 ||
	fail "a write with 3 of 3 in sync failed: $(tail -1 "$CL_DIR/write2.log")"
echo "FIGURE: write of $SMALL bytes with 3 in-sync copies took $(($(hb_now_ms) - tw)) ms"
"$ZL" --io-timeout 30 volume export mvol "$CL_DIR/out3" >"$CL_DIR/export3.log" 2>&1 ||
	fail "reading the volume after the write failed: $(tail -1 "$CL_DIR/export3.log")"
cmp "$CL_DIR/want" "$CL_DIR/out3" || fail "the acknowledged write does not read back"
hb_files "$CHUNK" "$vid" 1 2 3 >"$CL_DIR/files3" || fail "reading chunk files"
res=$(hb_ctl replicas "$vid" --input "$CL_DIR/want" "$CL_DIR/files3" node-1 node-2 node-3) ||
	fail "after the write the replicas differ from the data written: $res"
echo "FIGURE: after the write: $(head -1 <<<"$res")"
echo "$T: PASS"
