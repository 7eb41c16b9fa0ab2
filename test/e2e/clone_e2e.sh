#!/usr/bin/env bash
# Clones end to end (issue 25 step 4, docs/SNAPSHOTS.md §4): etcd, the
# manager and three storage daemons. The oracle is e2e_load's log (every
# sector it writes names its write; `e2e_load check --exact` reads the whole
# volume through lib/client and allows exactly the acknowledged writes): a
# clone's log is a copy of its source's log at the clone's point, continued
# by the clone's own writes, so a check proves the clone reads its source's
# data where it never wrote, its own where it did, and nothing written to
# the source after the point (nor the source anything of the clone's).
#   - volume src written (8 MiB of 16, the rest never written); snapshot s1;
#     clone cs of s1, clone cv of the live volume (internal snapshot), clone
#     ccs of clone cs (a chain): each reads as src at its point;
#   - a client with only the attach token of tk (a clone of cs) reads tk
#     whole (through cs and src), and not src's live chunks;
#   - writes to cs (copy-ups), then to src: src, its snapshot s1 (export
#     compared byte for byte), cs, cv and ccs each keep their own content;
#     cs's snapshot cs1, taken before cs was written, reads as s1 (the
#     parent's data where the clone had not written, never zeros), also
#     after cs is flattened;
#   - eight writes at once to one absent chunk of a fresh clone: one
#     copy-up lands, the others find the chunk held, every write is kept;
#   - deletes refused while dependants exist (snapshot rm s1, volume rm src
#     --force, volume rm cs), naming the dependants;
#   - flatten of cs under a concurrent write load; then s1 is deleted and cs
#     still reads right; a storage daemon killed -9 and restarted while cv
#     is flattened (flatten run again when it stopped) and while ccs is
#     written (its copy-ups): all complete, all read right;
#   - zl volume verify clean on src (with its snapshots), cs, cv and ccs;
#   - everything deleted: no chunk file left on any daemon, no etcd key
#     left but those of a cluster without volumes.
# Usage: clone_e2e.sh BUILD_DIR. KEEP=1 keeps the state dir.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
T=clone_e2e
fail() {
	echo "$T: FAIL: $*" >&2
	cl_dump_logs 25 "$CL_DIR"/storage-*/log "$CL_DIR"/*.out
	[ -z "${wpid:-}" ] || kill "$wpid" 2>/dev/null || true # the writer this test started
	exit 1
}
cl_e2e_begin e2e-clone "$1" 3 || fail "cluster did not start"
t_start=$SECONDS

load() { "$CL_BIN/e2e_load" "$@" --etcd "$CL_ETCD"; }
# check VOL LOG: the whole volume against the log, acknowledged writes only.
check() {
	load check --volume "$1" --log "$2" --exact >"$CL_DIR/check-$1.out" 2>&1 ||
		fail "$1 does not read as $2 says: $(tail -5 "$CL_DIR/check-$1.out")"
}
files0=$(cl_chunk_files)
keys0=$(cl_vol_keys)

"$ZL" volume create src --size 16M --replicas 3 --chunk-size 256K >/dev/null || fail "create src"
load write --volume src --log "$CL_DIR/src.log" --seed 1 --bytes 8M --max-len 256K \
	>"$CL_DIR/load-src.out" 2>&1 || fail "writes to src: $(tail -3 "$CL_DIR/load-src.out")"
"$ZL" snapshot create src s1 >/dev/null || fail "snapshot s1"
cp "$CL_DIR/src.log" "$CL_DIR/s1.log"
"$ZL" snapshot export s1 "$CL_DIR/s1.img" >/dev/null || fail "export s1"

# Clones of the snapshot and of the live volume, and a clone of a clone.
out=$("$ZL" volume clone src cs --from-snapshot s1) || fail "clone cs: $out"
grep -q "^created volume 'cs' vol-[0-9a-f]*: 16.0 MiB, a clone of vol-[0-9a-f]* at snapshot sequence 1\$" <<<"$out" ||
	fail "clone cs said: $out"
out=$("$ZL" volume clone src cv --size 32M) || fail "clone cv: $out"
grep -q "a clone of .* at snapshot sequence 2\$" <<<"$out" || fail "clone cv said: $out"
"$ZL" snapshot ls src | grep -q "clone-vol-" || fail "no internal snapshot of src for cv"
out=$("$ZL" volume clone src cs --from-snapshot s1) || fail "clone cs again: $out"
grep -q "^already have volume 'cs'" <<<"$out" || fail "clone cs again said: $out"
"$ZL" volume clone cs ccs >/dev/null || fail "clone ccs of cs"
cp "$CL_DIR/src.log" "$CL_DIR/cs.log"
cp "$CL_DIR/src.log" "$CL_DIR/cv.log"
cp "$CL_DIR/src.log" "$CL_DIR/ccs.log"
for v in cs cv ccs; do check "$v" "$CL_DIR/$v.log"; done
# A client holding only the attach token of tk, a clone of the clone cs
# (as the CSI attach process of tk), reads tk whole through cs and src
# (storage_auth.c), and none of their live chunks. tk goes after (its
# token's reads raised its epoch fence above our cluster client's).
source "$SRC/test/lib/auth_tool.sh"
PY=/usr/bin/python3
"$ZL" volume clone cs tk >/dev/null || fail "clone tk of cs"
TK=$("$ZL" volume inspect tk | awk '$1 == "id" {print $2}')
SEC=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
etcd_ctl put "/zipline/secrets/$TK" "$SEC" >/dev/null
EP=$(etcd_ctl put "/zipline/attachments/$TK" '{"node":"wn-1","epoch":0,"readonly":true,"time":0}')
TOK=$(token "$SEC" "$TK|wn-1|$EP")
auth_wait_hello "$TK" "$EP" wn-1 "$TOK" 1 2 3 || fail "the daemons did not see tk's attachment"
as_tk() { ZL_E2E_TOKEN=$TOK ZL_E2E_EPOCH=$EP ZL_E2E_VOL=${TK#vol-} ZL_E2E_NODE=wn-1 timeout 60 "$@"; }
as_tk "$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume tk --log "$CL_DIR/src.log" --exact \
	>"$CL_DIR/check-tk-token.out" 2>&1 ||
	fail "tk read with its attach token: $(tail -5 "$CL_DIR/check-tk-token.out")"
as_tk "$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume src --log "$CL_DIR/src.log" --exact \
	>"$CL_DIR/check-src-token.out" 2>&1 && fail "tk's attach token read the live volume src"
etcd_ctl del "/zipline/attachments/$TK"
etcd_ctl del "/zipline/secrets/$TK"
"$ZL" volume rm tk >/dev/null || fail "volume rm tk"
"$ZL" snapshot ls cs | grep -q "clone-$TK" && fail "tk's internal snapshot of cs stayed"
insp=$("$ZL" volume inspect cs) || fail "inspect cs"
grep -q "^parent      src (vol-[0-9a-f]*) at snapshot sequence 1\$" <<<"$insp" || fail "inspect cs: $insp"
grep -q "^dependants  1\$" <<<"$insp" || fail "inspect cs: dependants: $insp"
grep -q "^  ccs " <<<"$insp" || fail "inspect cs does not list ccs: $insp"
insp=$("$ZL" volume inspect src) || fail "inspect src"
grep -q "^dependants  2\$" <<<"$insp" || fail "inspect src: dependants: $insp"
echo "$T: clones of a snapshot, of a volume and of a clone read as their source"

# Writes to a clone (copy-ups) stay there; writes to the source stay there.
# A snapshot of the clone taken before keeps reading the parent's data
# where the clone had not written (not zeros).
"$ZL" snapshot create cs cs1 >/dev/null || fail "snapshot cs1 of the clone"
load write --volume cs --log "$CL_DIR/cs.log" --seed 2 --bytes 4M --max-len 256K \
	>"$CL_DIR/load-cs.out" 2>&1 || fail "writes to cs: $(tail -3 "$CL_DIR/load-cs.out")"
load write --volume src --log "$CL_DIR/src.log" --seed 3 --bytes 4M --max-len 256K \
	>"$CL_DIR/load-src2.out" 2>&1 || fail "writes to src: $(tail -3 "$CL_DIR/load-src2.out")"
for v in src cs cv ccs; do check "$v" "$CL_DIR/$v.log"; done
"$ZL" snapshot export s1 "$CL_DIR/s1b.img" >/dev/null || fail "export s1 again"
cmp -s "$CL_DIR/s1.img" "$CL_DIR/s1b.img" || fail "snapshot s1 changed"
"$ZL" snapshot export cs1 "$CL_DIR/cs1.img" >/dev/null || fail "export cs1"
cmp -s "$CL_DIR/s1.img" "$CL_DIR/cs1.img" || fail "snapshot cs1 of the clone is not s1's data"
echo "$T: writes to a clone and to its source stay apart"

# The copy-up race: eight 4 KiB writes at once, all in chunk 0 of a fresh
# clone of s1 (absent there), each answered ABSENT and each copying the
# parent's chunk up; exactly one copy-up may land (the others find the
# chunk held, EXISTS, and send their write on it), and no acknowledged
# write may be undone by a copy-up that came after it.
"$ZL" volume clone src cr --from-snapshot s1 >/dev/null || fail "clone cr of s1"
cp "$CL_DIR/s1.log" "$CL_DIR/cr.log"
load write --volume cr --log "$CL_DIR/cr.log" --seed 6 --overlap 0:256K --qd 8 \
	--min-len 4K --max-len 4K --bytes 512K >"$CL_DIR/load-cr.out" 2>&1 ||
	fail "racing writes to cr: $(tail -3 "$CL_DIR/load-cr.out")"
cu=$(sed -n 's/^CLONE: copyups=\([0-9]*\) copyup_races=\([0-9]*\)$/\1 \2/p' "$CL_DIR/load-cr.out")
[ "${cu% *}" = 1 ] || fail "chunk 0 of cr copied up ${cu% *} times, not once: $(grep CLONE: "$CL_DIR/load-cr.out")"
[ "${cu#* }" -ge 1 ] || fail "no copy-up of cr raced another (the phase tested nothing): $cu"
check cr "$CL_DIR/cr.log"
"$ZL" volume rm cr >/dev/null || fail "volume rm cr"
echo "$T: ${cu#* } copy-ups of one chunk lost the race to the one that landed; no write undone"

# A source with dependants cannot go.
out=$("$ZL" snapshot rm s1 2>&1) && fail "snapshot rm s1 with a clone of it: $out"
grep -q "snapshot s1 has dependant: cs; flatten them first (zl volume flatten NAME)" <<<"$out" ||
	fail "snapshot rm s1 said: $out"
out=$("$ZL" volume rm src --force 2>&1) && fail "volume rm --force of src with clones: $out"
grep -q "volume src has dependants: .*flatten them first" <<<"$out" || fail "volume rm src said: $out"
out=$("$ZL" volume rm cs 2>&1) && fail "volume rm of cs with a clone: $out"
grep -q "volume cs has dependant: ccs; flatten them first" <<<"$out" || fail "volume rm cs said: $out"
"$ZL" volume inspect src | grep -q "^state       ready\$" || fail "a refused rm left src not ready"
echo "$T: deletes of sources with dependants refused"

# Flatten of cs under a concurrent write load.
rm -f "$CL_DIR/stop"
load write --volume cs --log "$CL_DIR/cs.log" --seed 4 --seconds 60 --stop-file "$CL_DIR/stop" \
	--qd 8 --max-len 64K >"$CL_DIR/load-cs2.out" 2>&1 &
wpid=$!
sleep 1
out=$("$ZL" volume flatten cs) || fail "flatten cs: $out"
grep -q "^flatten cs: 64/64 chunks (100%), [0-9]* copied from the parent\$" <<<"$out" ||
	fail "flatten cs progress: $out"
: >"$CL_DIR/stop"
wait "$wpid" || fail "writes to cs during flatten: $(tail -3 "$CL_DIR/load-cs2.out")"
wpid=
"$ZL" volume inspect cs | grep -q "^parent      none\$" || fail "cs still has a parent"
out=$("$ZL" snapshot rm s1) || fail "snapshot rm s1 after flatten: $out"
check cs "$CL_DIR/cs.log"
check ccs "$CL_DIR/ccs.log"
"$ZL" snapshot export cs1 "$CL_DIR/cs1b.img" >/dev/null || fail "export cs1 after flatten"
cmp -s "$CL_DIR/s1.img" "$CL_DIR/cs1b.img" || fail "snapshot cs1 changed with the flatten"
echo "$T: flatten under load; the snapshot it read went, the clone and its snapshot read the same"

# kill -9 of a daemon while cv is flattened: completes, or is run again.
"$ZL" volume flatten cv >"$CL_DIR/flatten-cv.out" 2>&1 &
fpid=$!
sleep 0.3
cl_stop storage-2 KILL
sleep 1
cl_start_storage 2
cl_wait_nodes 3
if ! wait "$fpid"; then
	echo "$T: flatten of cv stopped with the kill: $(tail -1 "$CL_DIR/flatten-cv.out"); again"
	"$ZL" volume flatten cv >"$CL_DIR/flatten-cv.out" 2>&1 || fail "flatten cv: $(cat "$CL_DIR/flatten-cv.out")"
fi
"$ZL" volume inspect cv | grep -q "^parent      none\$" || fail "cv still has a parent"
check cv "$CL_DIR/cv.log"
# kill -9 while ccs (a clone of the flattened cs) copies chunks up.
load write --volume ccs --log "$CL_DIR/ccs.log" --seed 5 --bytes 6M --max-len 256K --qd 8 \
	>"$CL_DIR/load-ccs.out" 2>&1 &
wpid=$!
sleep 0.5
cl_stop storage-3 KILL
sleep 1
cl_start_storage 3
cl_wait_nodes 3
wait "$wpid" || fail "writes to ccs across a kill: $(tail -3 "$CL_DIR/load-ccs.out")"
wpid=
check ccs "$CL_DIR/ccs.log"
echo "$T: a daemon killed -9 during flatten and during copy-ups: all complete"

# Every replica equal, live and snapshots (the daemons healed first).
for v in src cs cv ccs; do
	ok=
	for _ in $(seq 1 100); do
		if vout=$("$ZL" volume verify "$v" 2>&1) && grep -q ", 0 differences\$" <<<"$vout"; then
			ok=1
			break
		fi
		sleep 0.3
	done
	[ -n "$ok" ] || fail "verify $v: $vout"
done
echo "$T: zl volume verify clean on src, cs, cv and ccs"

# Delete everything: nothing leaks.
"$ZL" snapshot rm cs1 >/dev/null || fail "snapshot rm cs1"
for v in ccs cs cv src; do
	out=$("$ZL" volume rm "$v" 2>&1) || fail "volume rm $v: $out"
done
cl_wait_leak_free "$files0" "$keys0" 20 ||
	fail "left: $(cl_chunk_files) chunk files (had $files0), $(cl_vol_keys) etcd keys (had $keys0)"
echo "$T: nothing left ($files0 chunk files, $keys0 volume keys), $((SECONDS - t_start)) s"
echo "$T: PASS"
