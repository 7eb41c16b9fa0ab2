# Sourced (after test/lib/cluster.sh) by backfill_e2e.sh and minsize_e2e.sh:
# a real zipline-controller running the membership manager, and read-only
# views of the slice rows (etcd JSON gateway) and of the chunk replica files
# (storage/storage_chunk.h) that the tests use as their oracles.
#
# Needs CL_DIR, CL_BIN, CL_ETCD (cl_e2e_begin sets them).

HB_PY=/usr/bin/python3
HB_TOOL=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/heal_tool.py

# hb_begin NAME BUILD_DIR NODES: cl_e2e_begin with --heal on and without the
# manager cl_e2e_begin may start (CL_MANAGER=0): the tests start their own
# (hb_start_manager), with their timings, and kill and restart it. The exit
# trap stops it too.
hb_begin() {
	CL_MANAGER=0 cl_e2e_begin "$1" "$2" "$3" --heal on || return 1
	trap 'cl_stop manager KILL; cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
}

# hb_test NAME [--manager-restart]: the frame of these tests: T=NAME, or
# with --manager-restart RESTART=1 and T=NAME with _e2e replaced by
# _mgr_restart_e2e (the ctest name); fail MSG: kills the background
# pid in $HB_BG (if any), prints the first rows of $vid and the logs, exit 1.
hb_test() {
	T=$1
	RESTART=0
	if [ "${2:-}" = --manager-restart ]; then
		RESTART=1
		T=${1%_e2e}_mgr_restart_e2e
	fi
	fail() {
		echo "$T: FAIL: $*" >&2
		[ -n "${HB_BG:-}" ] && kill "$HB_BG" 2>/dev/null
		[ -n "${vid:-}" ] && hb_ctl rows "$vid" 2>/dev/null | head -8 | sed 's/^/  row /' >&2
		hb_logs
		exit 1
	}
}

# hb_start_manager DOWN_OUT_S: cl_start_manager (test/lib/cluster.sh) named
# "manager" (log, pid in $CL_DIR/manager), grace 2 s, down-out DOWN_OUT_S;
# waits until it is the leader (CL_MANAGER_WAIT=leader).
# shellcheck disable=SC2034 # read by the tests
HB_MGR_LOG=
hb_start_manager() {
	# shellcheck disable=SC2034 # read by the tests
	HB_MGR_LOG=$CL_DIR/manager/log
	CL_MANAGER_WAIT=leader CL_MANAGER_GRACE=2 cl_start_manager manager --down-out-interval "$1"
}

# hb_ctl CMD VOL [ARGS...]: views of the volume record /zipline/volumes/VOL.
#   rows VOL                  "slice v term node:state ..." per row
#   healthy VOL N [DEAD...]   rows with N distinct members, all in sync, none
#                             of DEAD, each in its own failure domain (live
#                             node records): prints "healthy=K total=T" and
#                             the first bad rows; exit 0 iff K == T
#   only VOL NODE             rows whose only in-sync member (and primary) is
#                             NODE: prints "only=K total=T"; exit 0 iff K == T
#   count VOL NODE            number of rows that list NODE
#   primary VOL NODE          number of rows whose primary (first in-sync
#                             member) is NODE
#   min_size VOL              the record's min_size (0 or absent: "default")
#   replicas VOL [--input F] FILES ALIVE...  FILES is hb_files output; every
#                             chunk of the volume must be on every member of
#                             its row that is in ALIVE, with the same data
#                             sha256 and version (and with --input, the data
#                             of F at that chunk's offset): prints
#                             "identical=K chunks=C copies=X" and the first
#                             differences; exit 0 iff all identical
hb_ctl() {
	"$HB_PY" - "$(dirname "$HB_TOOL")" "$CL_ETCD" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import etcd_gw
etcd, cmd, vol = sys.argv[2], sys.argv[3], sys.argv[4]
args = sys.argv[5:]
kv = etcd_gw.get(etcd, '/zipline/volumes/' + vol)
if not kv:
    sys.exit('hb_ctl: no volume record /zipline/volumes/%s' % vol)
rec = json.loads(etcd_gw.unb64(kv['value']))
rows = rec['placement']
def states(row):
    return row.get('states') or ['in_sync' if n in row['in_sync'] else 'out' for n in row['nodes']]
if cmd == 'rows':
    for i, row in enumerate(rows):
        print(i, row['v'], row.get('term', 1),
              ' '.join('%s:%s' % (n, s) for n, s in zip(row['nodes'], states(row))))
elif cmd == 'healthy':
    want, dead = int(args[0]), set(args[1:])
    nodes = {}
    for kv in etcd_gw.prefix(etcd, '/zipline/nodes/'):
        n = json.loads(etcd_gw.unb64(kv['value']))
        nodes[n['id']] = n.get('domain', '')
    ok, bad = 0, []
    for i, row in enumerate(rows):
        ns, st = row['nodes'], states(row)
        why = None
        if len(ns) != want or len(set(ns)) != len(ns):
            why = 'members %s' % ns
        elif dead & set(ns):
            why = 'lists dead node(s) %s' % sorted(dead & set(ns))
        elif any(s != 'in_sync' for s in st) or sorted(row['in_sync']) != sorted(ns):
            why = 'not all in sync'
        elif any(n not in nodes for n in ns):
            why = 'member without a node record'
        elif len(set(nodes[n] for n in ns)) != len(ns):
            why = 'two members in one failure domain %s' % [nodes[n] for n in ns]
        if why:
            bad.append('slice %d v%d term %s: %s (%s)' % (i, row['v'], row.get('term', 1), why,
                       ' '.join('%s:%s' % x for x in zip(ns, st))))
        else:
            ok += 1
    print('healthy=%d total=%d' % (ok, len(rows)))
    for b in bad[:3]:
        print('  ' + b)
    sys.exit(0 if ok == len(rows) else 1)
elif cmd == 'only':
    node = args[0]
    k = sum(1 for row in rows if row['in_sync'] == [node])
    print('only=%d total=%d' % (k, len(rows)))
    sys.exit(0 if k == len(rows) else 1)
elif cmd == 'count':
    print(sum(1 for row in rows if args[0] in row['nodes']))
elif cmd == 'primary':
    print(sum(1 for row in rows if row['in_sync'][:1] == [args[0]]))
elif cmd == 'min_size':
    print(rec.get('min_size') or 'default')
elif cmd == 'replicas':
    want = None
    if args[0] == '--input':
        import hashlib
        data = open(args[1], 'rb').read()
        cs = rec['chunk_size']
        want = lambda c: hashlib.sha256(data[c * cs:(c + 1) * cs].ljust(cs, b'\0')).hexdigest()
        args = args[2:]
    files, alive = args[0], set(args[1:])
    have = {}
    for line in open(files):
        node, name, sha, ver = line.split()
        have.setdefault(int(name.split('.')[0], 16), {})[node] = (sha, ver)
    n_chunks = (rec['size'] + rec['chunk_size'] - 1) // rec['chunk_size']
    ok, copies, bad = 0, 0, []
    for c in range(n_chunks):
        row = rows[c % len(rows)]
        holders = [n for n in row['nodes'] if n in alive]
        got = have.get(c, {})
        miss = [n for n in holders if n not in got]
        vals = set(got[n] for n in holders if n in got)
        copies += len(holders) - len(miss)
        shas = set(v[0] for v in vals)
        if miss or len(vals) != 1 or (want and shas != {want(c)}):
            bad.append('chunk %d (slice %d): missing on %s;%s %s' % (
                c, c % len(rows), miss or '-',
                ' differs from the input;' if want and vals and shas != {want(c)} else '',
                ' '.join('%s=%s/%s' % (n, got[n][0][:12], got[n][1]) for n in holders if n in got)))
        else:
            ok += 1
    print('identical=%d chunks=%d copies=%d' % (ok, n_chunks, copies))
    for b in bad[:5]:
        print('  ' + b)
    sys.exit(0 if ok == n_chunks else 1)
else:
    sys.exit('hb_ctl: unknown command ' + cmd)
PY
}

# hb_files CHUNK_SIZE VOL I...: per chunk file of VOL on storage-I: "node-I
# name data-sha256 version" (version: highest of the metadata slots).
hb_files() {
	local cs=$1 vol=$2 i dirs=()
	shift 2
	for i in "$@"; do
		dirs+=("$CL_DIR/storage-$i/data/chunks/$vol")
	done
	"$HB_PY" "$HB_TOOL" files "$cs" --missing-ok --node-label node- "${dirs[@]}"
}

# hb_chunk_data CHUNK_SIZE FILE OUT: the data area of one chunk replica file.
hb_chunk_data() { "$HB_PY" "$HB_TOOL" data "$@"; }

# hb_blocks_of GOT LEN FILE...: every 4 KiB block of the first LEN bytes of
# GOT equals the same block of one of the FILEs (the old data, or the data
# of writes that were not acknowledged: each may have landed, block by block,
# or not). Prints "NAME=count ..." (NAME: the file's base name).
hb_blocks_of() {
	"$HB_PY" - "$@" <<'PY'
import os, sys
n = int(sys.argv[2])
got = open(sys.argv[1], 'rb').read(n)
cands = [(os.path.basename(p), open(p, 'rb').read(n)) for p in sys.argv[3:]]
count = dict((name, 0) for name, _ in cands)
for b in range(0, len(got), 4096):
    for name, data in cands:
        if got[b:b + 4096] == data[b:b + 4096]:
            count[name] += 1
            break
    else:
        print(' '.join('%s=%d' % (k, count[k]) for k, _ in cands))
        sys.exit('block at byte %d is none of %s' % (b, ', '.join(k for k, _ in cands)))
print(' '.join('%s=%d' % (k, count[k]) for k, _ in cands))
PY
}

# hb_recovery_bytes MEMBER...: sums of "recovery caught up" lines of every
# storage log for those members: "chunks bytes lines".
hb_recovery_bytes() {
	local re
	re=$(printf 'member=%s |' "$@")
	re=${re%|}
	cat "$CL_DIR"/storage-*/log | grep 'recovery caught up' | grep -E "$re" |
		sed -n 's/.*chunks_copied=\([0-9]*\) bytes_copied=\([0-9]*\).*/\1 \2/p' |
		awk '{c += $1; b += $2; n++} END {print c + 0, b + 0, n + 0}'
}

# hb_logs: the tail of every daemon and controller log (for a failure).
hb_logs() { cl_dump_logs 25 "$CL_DIR"/storage-*/log "$CL_DIR"/manager/log; }

hb_now_ms() { echo $(($(date +%s%N) / 1000000)); }
