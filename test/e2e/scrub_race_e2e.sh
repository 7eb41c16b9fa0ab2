#!/usr/bin/env bash
# E2E of a scrub repairing the primary's own copy of a chunk while clients
# write that chunk (storage/storage_scrub.c, the repair of target 0): 3
# daemons, a 3-replica volume of one 4 MiB chunk, a verifying writer
# (e2e_load: random 4-64 KiB writes, a log of what was acknowledged).
# Every daemon is reached through a proxy (test/lib/delay_proxy.py, its
# --advertise address) that can delay what the daemon answers. Each round:
# the writer is stopped (SIGSTOP) so the digest sees a quiet chunk, a byte
# of the primary's copy is flipped, the proxies delay answers by 200 ms,
# `zl volume scrub` starts; once the primary logs that it repairs its own
# copy (from a member: the first 1 MiB piece is read from it at once) the
# writer goes on. The member has served that read before the writer's new
# writes reach it, and its answer is on its way for 200 ms: the writes land
# on the primary meanwhile. A repair piece written here must not overwrite
# a client write of the same range submitted after the piece was read.
# Oracle, independent of the daemons: after the rounds and a final quiet
# scrub, every sector read through the client and every replica's chunk
# file read directly holds what the writer's log allows (e2e_load check),
# and `zl volume verify` finds the copies equal.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
source "$SRC/test/lib/heal.sh"
fail() {
	echo "scrub_race_e2e: FAIL: $*" >&2
	cl_dump_logs 20 "$CL_DIR"/storage-*/log
	exit 1
}
ok() { echo "scrub_race_e2e: ok: $*"; }
ROUNDS=${SCRUB_RACE_ROUNDS:-6}
CHUNK=$((4 << 20))
export CL_STORAGE_FLAGS="--log-level info --scrub-mbps 8"
cl_e2e_begin e2e-scrub-race "$1" 0 --heal on || fail "cluster did not start"
PROXIES=""
for i in 1 2 3; do
	mkdir -p "$CL_DIR/storage-$i"
	# The daemon listens on 127.0.0.2:P and advertises 127.0.0.1 (with its
	# port P), where the proxy listens.
	pp=$(cl_free_port)
	/usr/bin/python3 "$SRC/test/lib/delay_proxy.py" "$pp" "127.0.0.2:$pp" "$CL_DIR/delay" >"$CL_DIR/proxy-$i.log" 2>&1 &
	PROXIES="$PROXIES $!"
	cl_wait_count "$CL_DIR/proxy-$i.log" listening 1 5 || fail "proxy $i did not start"
	CL_LISTEN_HOST=127.0.0.2 cl_start_storage "$i" "$pp" --advertise 127.0.0.1
done
cl_wait_nodes 3 || fail "storage nodes did not register"

"$ZL" volume create sr --size 4M --replicas 3 --chunk-size 4M >/dev/null || fail "create"
vid=$("$ZL" volume inspect sr | awk '$1 == "id" {print $2}')
LOG=$CL_DIR/load.log
timeout 120 "$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume sr --log "$LOG" --qd 8 --fill 64K:64K \
	>"$CL_DIR/fill.out" 2>&1 || fail "fill: $(tail -3 "$CL_DIR/fill.out")"
prim=$(hl_etcd primary "$vid" 0)
[ -n "$prim" ] || fail "no primary of slice 0"
pf="$CL_DIR/storage-${prim#node-}/data/chunks/$vid/0000000000000000.zlc"
[ -f "$pf" ] || fail "no chunk file $pf"

# writer_start SEED: a writer continuing the log (random 4-64 KiB writes
# over the volume) until the stop file appears; returns once it has
# acknowledged writes.
writer_start() {
	local a0
	a0=$(grep -c '^A ' "$LOG" || true)
	rm -f "$CL_DIR/stop"
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume sr --log "$LOG" --qd 8 --seed "$1" \
		--min-len 4K --max-len 64K --seconds 600 --stop-file "$CL_DIR/stop" \
		>>"$CL_DIR/load.out" 2>&1 &
	wpid=$!
	cl_wait_count "$LOG" '^A ' $((a0 + 50)) 20 || fail "the writer acknowledged nothing: $(tail -3 "$CL_DIR/load.out")"
}
# writer_end: it ends its writes in flight (their answers logged) and exits.
writer_end() {
	touch "$CL_DIR/stop"
	kill -CONT "$wpid" 2>/dev/null || true
	wait "$wpid" || fail "the writer failed: $(tail -5 "$CL_DIR/load.out")"
	wpid=""
}
wpid=""
trap '[ -z "$wpid" ] || kill -KILL "$wpid" 2>/dev/null; cl_stop_all; kill $PROXIES 2>/dev/null; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
writer_start 1

plog="$CL_DIR/storage-${prim#node-}/log"
for r in $(seq 1 "$ROUNDS"); do
	kill -STOP "$wpid"
	# Its writes in flight end; the digest then sees a quiet chunk.
	# A block of the first 1 MiB piece: the piece written back under the
	# writes makes the copy whole again (its CRCs right), so a piece that
	# overwrote a newer write leaves a copy that looks good; the next scrub
	# sees equal versions and different digests and takes the primary's.
	blk=$((RANDOM % 256))
	off=$(cl_chunk_block_off "$pf" "$blk" $((RANDOM % 4096))) || fail "cannot locate block $blk"
	cl_flip_byte "$pf" "$off"
	n0=$(grep -c "scrub repairing vol=$vid chunk=0 member=$prim " "$plog" || true)
	echo 200 >"$CL_DIR/delay"
	"$ZL" volume scrub sr >"$CL_DIR/scrub.$r" 2>&1 &
	spid=$!
	for _ in $(seq 1 100); do
		[ "$(grep -c "scrub repairing vol=$vid chunk=0 member=$prim " "$plog" || true)" -gt "$n0" ] && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	# A few writes only, then the writer stops again, so that later writes
	# do not cover what a bad piece overwrote.
	a0=$(grep -c '^A ' "$LOG" || true)
	kill -CONT "$wpid"
	cl_wait_count "$LOG" '^A ' $((a0 + 8)) 20 || fail "the writer acknowledged nothing after round $r's start"
	kill -STOP "$wpid"
	wait "$spid" || true # a repair cut short by a write says so
	rm -f "$CL_DIR/delay"
	last=$(grep -h "scrub re[a-z]* .*vol=$vid chunk=0 member=$prim " "$plog" | tail -1 | sed 's/.*\(scrub re[a-z]*\)/\1/')
	echo "scrub_race_e2e: round $r: block $blk of $prim's copy flipped; $(grep -c '^A ' "$LOG") writes acknowledged; $last"
	case $last in
	"scrub repaired"*) ;;
	*)
		# Cut short: the flipped block may still be bad on the primary,
		# and a write of the (stopped) writer that covers part of it waits
		# (its edge block unreadable) until a scrub repairs it (the primary
		# starts one for that chunk itself when the write is sent again).
		# A quiet scrub does (the writes may have rewritten the whole
		# block meanwhile: then nothing is left to repair).
		"$ZL" volume scrub sr >"$CL_DIR/scrub.$r.quiet" 2>&1 || fail "the quiet scrub of round $r: $(tail -3 "$CL_DIR/scrub.$r.quiet")"
		grep -Eq ' ([0-9]+) bad copies found, \1 repaired' "$CL_DIR/scrub.$r.quiet" ||
			fail "the quiet scrub of round $r left a bad copy: $(tail -1 "$CL_DIR/scrub.$r.quiet")"
		;;
	esac
	# The writer ends its writes in flight (every answer logged) and exits.
	writer_end
	# No writer: every acknowledged write reads back now.
	"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume sr --log "$LOG" >"$CL_DIR/check.$r" 2>&1 ||
		fail "round $r: read back through the client: $(grep -E 'BAD|CHECK' "$CL_DIR/check.$r" | head -5)"
	[ "$r" = "$ROUNDS" ] || writer_start $((r + 1))
done
grep "LOAD:" "$CL_DIR/load.out" | tail -1 || true
repaired=$(grep -c "scrub repaired vol=$vid chunk=0 member=$prim " "$plog" || true)
ok "$ROUNDS rounds under load; $repaired repairs of $prim's own copy completed (under the writes or by the quiet scrub after one cut short)"

# Quiet: a last scrub repairs what a race cut short; then the oracle.
"$ZL" volume scrub sr >"$CL_DIR/scrub.last" 2>&1 || { cat "$CL_DIR/scrub.last" >&2; fail "the final scrub"; }
"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume sr --log "$LOG" >"$CL_DIR/check.out" 2>&1 ||
	fail "read back through the client: $(grep -E 'BAD|CHECK' "$CL_DIR/check.out" | head -5)"
for i in 1 2 3; do
	"$CL_BIN/e2e_load" check --log "$LOG" --chunk-dir "$CL_DIR/storage-$i/data/chunks/$vid" \
		--size 4M --chunk-size 4M >"$CL_DIR/check.$i" 2>&1 ||
		fail "node-$i's copy (read from its file): $(grep -E 'BAD|CHECK' "$CL_DIR/check.$i" | head -5)"
done
"$ZL" volume verify sr >"$CL_DIR/verify" 2>&1 || fail "verify: $(head -5 "$CL_DIR/verify")"
ok "every acknowledged write reads back, through the client and from each replica's file; the copies are equal"
echo "scrub_race_e2e: PASS"
