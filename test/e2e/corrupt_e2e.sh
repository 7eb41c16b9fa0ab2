#!/usr/bin/env bash
# E2E: one flipped byte in one replica's chunk file. Reads must still return
# the right data (two good copies remain: when the damaged one is the
# primary's, the read is served from a good copy, never failed) and the
# daemon that holds the bad replica must log the corruption with volume,
# chunk and block. Runs with the defaults: manager on, storage healing on.
# Each node's replica is damaged in turn (and repaired after), so the primary
# of the slice is certainly among them.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
fail() { echo "corrupt_e2e: FAIL: $*" >&2; for f in "$CL_DIR"/storage-*/log; do echo "--- $f" >&2; tail -15 "$f" >&2; done; exit 1; }
cl_e2e_begin e2e-corrupt "$1" 3 || fail "cluster did not start"

"$ZL" volume create cvol --size 16M --replicas 3 --chunk-size 4M || fail "create"
head -c 16M /dev/urandom >"$CL_DIR/in"
"$ZL" volume import cvol "$CL_DIR/in" || fail "import"
vid=$("$ZL" volume inspect cvol | grep -o 'vol-[0-9a-f]\{16\}' | head -1)
[ -n "$vid" ] || fail "no volume id in 'zl volume inspect' output"

detected=0
for i in 1 2 3; do
	f="$CL_DIR/storage-$i/data/chunks/$vid/0000000000000000.zlc"
	[ -f "$f" ] || fail "replica of chunk 0 missing on node-$i ($f)"
	# Flip one byte of data block 3 (the data offset comes from the header).
	off=$(cl_chunk_block_off "$f" 3 123) || fail "cannot locate block 3 in $f"
	cl_flip_byte "$f" "$off"
	"$ZL" volume export cvol "$CL_DIR/out" || fail "export with a damaged replica on node-$i"
	cmp "$CL_DIR/in" "$CL_DIR/out" || fail "wrong data read with a damaged replica on node-$i"
	if grep -i "corrupt" "$CL_DIR/storage-$i/log" | grep -q "$vid" ; then
		line=$(grep -i "corrupt" "$CL_DIR/storage-$i/log" | grep "$vid" | tail -1)
		echo "$line" | grep -q "chunk=0" || fail "corruption log line lacks chunk=0: $line"
		echo "$line" | grep -q "block=3" || fail "corruption log line lacks block=3: $line"
		detected=$((detected + 1))
		echo "corrupt_e2e: node-$i logged: $line"
	fi
	# Repair the byte so the next round damages exactly one replica again.
	cl_flip_byte "$f" "$off"
done
[ "$detected" -ge 1 ] || fail "no daemon logged the corruption"
echo "corrupt_e2e: PASS ($detected node(s) detected and logged the damaged block)"
