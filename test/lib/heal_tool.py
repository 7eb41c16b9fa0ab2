#!/usr/bin/env python3
"""The e2e tests' view of etcd and of chunk replica files, independent of the
code under test (no lib/meta, no storage daemon). Called through
test/lib/heal.sh (hl_etcd, hl_files, hl_divergent); exits non-zero with the
reason on stderr when it cannot do its job.

  heal_tool.py etcd URL CMD ARGS...   the etcd JSON gateway at URL:
    rows VOL               "slice v term node:state..." per row (a 0.1 row:
                           in-sync members in_sync, the others out; term 1)
    incs VOL               "slice node:state:incarnation8..." per row ("-":
                           no incarnation)
    members VOL            "slice primary node..." per row (primary: first
                           in-sync member, "-" when none)
    primary VOL SLICE      node id of the slice's primary
    insync VOL N           exit 0 when every row has N members, all in_sync
    wait VOL NODE SECS     polls every 0.1 s until NODE is in_sync in every
                           row that lists it (one at least); prints the
                           states NODE went through ("recovering in_sync")
    wait VOL --all N SECS  polls until `insync VOL N` holds; prints the
                           milliseconds it waited
                           (both: exit 1 and the rows not there yet on
                           stderr after SECS)
    summary VOL            "rows=R all_in_sync_rows=K member_states=..."
    journal-clean SECS     waits until every daemon on the journal write path
                           checkpointed all it holds, for 2.5 s running;
                           prints the milliseconds waited (exit 1 after SECS)
    status FIELD...        "node FIELD=value..." of every status record
    stable-sum SECS FIELD...  once the status records stopped changing for
                           2.5 s: the sum of each FIELD over them
    reports VOL [ERROR]    "slice reporter peer error slice_ver revision" (only
                           ERROR; revision: etcd's mod_revision of the report,
                           new at every put of it, even of the same content)
    set VOL NODE STATE...  the manager by hand: every row holding NODE,
                           NODE -> STATE (CAS on the record; v + 1, the term
                           + 1 when the primary changes; refuses to leave a
                           row without an in-sync member); several states
                           are one update each, back to back (out
                           recovering: a node back before a daemon looked)
    order VOL SLICE NODE...  the row's members in that order (same rules)
    replace VOL OLD NEW STATE  NEW in OLD's place in every row holding
                           OLD, in STATE, under the incarnation of NEW's node
                           record (a replacement or a move; same rules)
    lose VOL SLICE         every member of row SLICE -> out (v + 1): a row
                           with no in-sync member, what losing every copy
                           leaves (the one change `set` refuses)
    snaps VOL SEQ [SNAP...]  the record's snapshot sequence and the snapshots
                           that exist (snap_seq, snaps; CAS), as taking or
                           deleting a snapshot leaves them (docs/SNAPSHOTS.md)
    grow VOL BYTES         the record's size (CAS), as ControllerExpandVolume
                           leaves it
    node ID                the incarnation of node ID's record ("-": none)
    get KEY | put KEY VALUE | del KEY   raw keys
    tomb NODE VOL          puts the tombstone <prefix>deletes/NODE/VOL
  heal_tool.py files CHUNK [--missing-ok] [--node-label P] [--chunk-index] DIR...
                           per chunk file (*.zlc) of each replica dir
                           .../storage-I/...: "I name data-sha256 version"
                           (data: CHUNK bytes at the header's data offset,
                           zeros past the end; version: the highest of the
                           metadata slots; storage/storage_chunk.h)
                           (--missing-ok: absent dirs and files removed meanwhile are skipped;
                           --node-label P: print P<n> for storage-<n>; --chunk-index: the chunk
                           number in decimal instead of the file name)
                           First waits (up to 60 s) until the journal of each
                           DIR's daemon, while that daemon runs, holds no record
                           past its checkpoint (read from the journal file:
                           docs/JOURNAL.md), so the versions are current
  heal_tool.py blockoff FILE BLOCK [BYTE]
                           file offset of byte BYTE of data block BLOCK
  heal_tool.py data CHUNK FILE OUT
                           the data area of one chunk file (CHUNK bytes,
                           zeros past the end) into OUT
  heal_tool.py divergent FILE BLOCK BYTE
                           inverts one byte of a data block and rewrites the
                           block's crc (and the page CRC) in the current
                           metadata slot: a copy that verifies but holds
                           other data at the same version
"""
import base64
import glob
import hashlib
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chunkfile  # noqa: E402
import proc_state  # noqa: E402
import etcd_gw  # noqa: E402
from etcd_gw import b64  # noqa: E402

PREFIX = '/zipline/'


def die(msg):
    sys.exit('heal_tool: ' + msg)


# ---- etcd ----

class Etcd:
    """etcd_gw (the tests' one gateway client) bound to one URL."""
    def __init__(self, url):
        self.url = url

    def call(self, path, body):
        return etcd_gw.call(self.url, path, body)

    def get_kv(self, key):
        return etcd_gw.get(self.url, key)

    def get(self, key):
        kv = self.get_kv(key)
        return json.loads(base64.b64decode(kv['value'])) if kv else None

    def prefix(self, pre):
        return etcd_gw.prefix(self.url, pre)

    def volume(self, vol):
        kv = self.get_kv(PREFIX + 'volumes/' + vol)
        if not kv:
            die('no volume record %svolumes/%s' % (PREFIX, vol))
        return kv, json.loads(base64.b64decode(kv['value']))


def states(row):
    st = row.get('states')
    if not st:  # a 0.1 row: in-sync members in_sync, the others out
        st = ['in_sync' if n in row['in_sync'] else 'out' for n in row['nodes']]
    return st


def in_sync(row):
    return [n for n, s in zip(row['nodes'], states(row)) if s == 'in_sync']


def row_set(row, node, state):
    """NODE -> STATE in row: True when it changed."""
    if node not in row['nodes']:
        return False
    i = row['nodes'].index(node)
    st = states(row)
    if st[i] == state:
        return False
    st[i] = state
    row['states'] = st
    return True


def row_order(row, nodes):
    perm = [row['nodes'].index(n) for n in nodes]
    for f in ('nodes', 'states', 'incarnations'):
        if f in row:
            row[f] = [row[f][i] for i in perm]
    return True


def row_replace(row, old, new, state, inc):
    if old not in row['nodes'] or new in row['nodes']:
        return False
    i = row['nodes'].index(old)
    st = states(row)
    st[i] = state
    row['states'] = st
    row['nodes'][i] = new
    if 'incarnations' in row:
        row['incarnations'][i] = inc
    return True


def record_cas(e, vol, kv, rec):
    """Puts rec as vol's record if it is still at kv's revision: True when
    it was."""
    key = PREFIX + 'volumes/' + vol
    txn = {'compare': [{'key': b64(key), 'target': 'MOD', 'result': 'EQUAL',
                        'mod_revision': kv['mod_revision']}],
           'success': [{'request_put': {'key': b64(key),
                                        'value': b64(json.dumps(rec, separators=(',', ':')))}}]}
    return bool(e.call('/v3/kv/txn', txn).get('succeeded'))


def record_edit(e, vol, edit, what):
    """CAS loop: edit(rec) changes vol's record in place, put back if the
    record did not change meanwhile (50 tries)."""
    for _ in range(50):
        kv, rec = e.volume(vol)
        edit(rec)
        if record_cas(e, vol, kv, rec):
            return
    die('%s of %s lost the race 50 times' % (what, vol))


def rows_update(e, vol, change, allow_none=False):
    """CAS loop: change(rec) edits rows in place and returns the changed
    rows; each gets v + 1, in_sync recomputed, term + 1 on a new primary.
    A row left without an in-sync member is refused unless allow_none."""
    for _ in range(50):
        kv, rec = e.volume(vol)
        old = [in_sync(r)[:1] for r in rec['placement']]
        changed = change(rec)
        if not changed:
            return
        for i in changed:
            row = rec['placement'][i]
            row['in_sync'] = in_sync(row)
            if not row['in_sync'] and not allow_none:
                die('refusing to leave row %d without an in-sync member' % i)
            row['v'] += 1
            if row['in_sync'][:1] != old[i]:
                row['term'] = row.get('term', 1) + 1
        if record_cas(e, vol, kv, rec):
            return
    die('row update of %s lost the race 50 times' % vol)


def all_in_sync(rows, n):
    return all(len(states(r)) == n and all(x == 'in_sync' for x in states(r)) for r in rows)


def wait_in_sync(e, args):
    """wait VOL NODE SECS | wait VOL --all N SECS (see the head)."""
    vol, secs = args[0], float(args[-1])
    node, n = (None, int(args[2])) if args[1] == '--all' else (args[1], 0)
    t0 = time.monotonic()
    seen = []
    while True:
        rows = e.volume(vol)[1]['placement']
        if node is None:
            if all_in_sync(rows, n):
                print(int((time.monotonic() - t0) * 1000))
                return
        else:
            mine = [st[r['nodes'].index(node)] for r in rows for st in [states(r)] if node in r['nodes']]
            for st in mine:
                if st not in seen:
                    seen.append(st)
            if mine and all(st == 'in_sync' for st in mine):
                print(' '.join(seen))
                return
        if time.monotonic() - t0 >= secs:
            break
        time.sleep(0.1)
    if node is None:
        sys.stderr.write('heal_tool: not every slice of %s is %d of %d in sync after %g s\n' % (vol, n, n, secs))
    else:
        sys.stderr.write('heal_tool: %s not in sync in every row of %s after %g s (states seen: %s)\n'
                         % (node, vol, secs, ' '.join(seen) or 'none'))
    bad = 0
    for i, row in enumerate(rows):
        if any(x != 'in_sync' for x in states(row)) or (node is None and len(row['nodes']) != n):
            bad += 1
            if bad <= 10:
                sys.stderr.write('  row %d v%d term %s %s\n' % (i, row['v'], row.get('term', 1), ' '.join(
                    '%s:%s' % x for x in zip(row['nodes'], states(row)))))
    sys.exit(1)


def statuses(e):
    """The storage daemons' status records (<prefix>status/<node>)."""
    return [json.loads(base64.b64decode(kv['value'])) for kv in e.prefix(PREFIX + 'status/')]


def node_ids(e):
    """The ids of the registered storage nodes (<prefix>nodes/<id>)."""
    return [base64.b64decode(kv['key']).decode().rsplit('/', 1)[1]
            for kv in e.prefix(PREFIX + 'nodes/')]


def journal_clean(e, secs):
    """Waits until every daemon on the journal write path has checkpointed
    everything (journal_used 0, no dirty chunk) and that has held for 2.5 s
    (longer than the 2 s status sample, so a record left over from before
    the last writes cannot pass); returns the milliseconds waited, None after
    secs (the daemons still dirty on stderr). A daemon on the direct path
    (journal_size 0) counts as clean."""
    t0 = time.monotonic()
    clean_since = None
    while True:
        recs = statuses(e)
        have = set(r['node'] for r in recs)
        # A registered node without a status record yet: its write path is
        # not known, wait for it.
        missing = [n for n in node_ids(e) if n not in have]
        if not missing and not any(r.get('journal_size', 0) for r in recs):
            return int((time.monotonic() - t0) * 1000)  # every one on the direct path
        dirty = [r for r in recs if r.get('journal_size', 0) and
                 (r.get('journal_used', 0) or r.get('journal_dirty_chunks', 0))]
        dirty += [{'node': n, 'journal_used': '?', 'journal_dirty_chunks': '? (no status record)'}
                  for n in missing]
        now = time.monotonic()
        if dirty:
            clean_since = None
        elif clean_since is None:
            clean_since = now
        elif now - clean_since >= 2.5:
            return int((now - t0) * 1000)
        if now - t0 >= secs:
            for r in dirty:
                sys.stderr.write('heal_tool: %s: journal_used=%s journal_dirty_chunks=%s after %g s\n'
                                 % (r['node'], r.get('journal_used'), r.get('journal_dirty_chunks'), secs))
            return None
        time.sleep(0.25)


def stable_sum(e, secs, fields):
    """stable-sum SECS FIELD...: waits until the status records did not
    change for 2.5 s (the daemons sample every 2 s and publish changes), then
    prints the sum of each FIELD over them (0 where absent)."""
    t0 = time.monotonic()
    last, since = None, time.monotonic()
    while True:
        recs = sorted((json.dumps(r, sort_keys=True) for r in statuses(e)))
        now = time.monotonic()
        if recs != last:
            last, since = recs, now
        elif now - since >= 2.5:
            break
        if now - t0 >= secs:
            die('status records still changing after %g s' % secs)
        time.sleep(0.25)
    recs = [json.loads(r) for r in last]
    print(' '.join(str(sum(int(r.get(f, 0)) for r in recs)) for f in fields))


def etcd_cmd(url, cmd, args):
    e = Etcd(url)
    if cmd == 'reports':
        want = args[1] if len(args) > 1 else None
        for kv in e.prefix(PREFIX + 'reports/%s/' % args[0]):
            k = base64.b64decode(kv['key']).decode().split('/')
            r = json.loads(base64.b64decode(kv['value']))
            if want is None or r['error'] == want:
                print(k[-3], k[-2], r['peer'], r['error'], r['slice_ver'],
                      kv.get('mod_revision', 0))
    elif cmd == 'set':
        if len(args) < 3:
            die('set VOL NODE STATE...: no state given')
        vol, node = args[:2]
        for state in args[2:]:
            rows_update(e, vol, lambda rec: [i for i, r in enumerate(rec['placement'])
                                             if row_set(r, node, state)])
    elif cmd == 'replace':
        vol, old, new, state = args
        rec = e.get(PREFIX + 'nodes/' + new)
        if not rec:
            die('no node record of %s' % new)
        rows_update(e, vol, lambda v: [i for i, r in enumerate(v['placement'])
                                       if row_replace(r, old, new, state,
                                                      rec.get('incarnation', ''))])
    elif cmd == 'order':
        vol, s, nodes = args[0], int(args[1]), args[2:]
        rows_update(e, vol, lambda rec: [s] if row_order(rec['placement'][s], nodes) else [])
    elif cmd == 'lose':
        vol, s = args[0], int(args[1])
        rows_update(e, vol, lambda rec: [s] if [row_set(rec['placement'][s], n, 'out')
                                                for n in list(rec['placement'][s]['nodes'])]
                    else [], allow_none=True)
    elif cmd == 'snaps':
        record_edit(e, args[0], lambda r: r.update(snap_seq=int(args[1]),
                                                   snaps=[int(x) for x in args[2:]]),
                    'snapshot update')
    elif cmd == 'grow':
        record_edit(e, args[0], lambda r: r.update(size=int(args[1])), 'size update')
    elif cmd == 'node':
        rec = e.get(PREFIX + 'nodes/' + args[0])
        print((rec.get('incarnation') or '-') if rec else '-')
    elif cmd == 'get':
        kv = e.get_kv(args[0])
        print(base64.b64decode(kv['value']).decode() if kv else '')
    elif cmd == 'put':
        e.call('/v3/kv/put', {'key': b64(args[0]), 'value': b64(args[1])})
    elif cmd == 'del':
        e.call('/v3/kv/deleterange', {'key': b64(args[0])})
    elif cmd == 'tomb':
        e.call('/v3/kv/put', {'key': b64(PREFIX + 'deletes/%s/%s' % (args[0], args[1])),
                              'value': b64('{}')})
    elif cmd == 'wait':
        wait_in_sync(e, args)
    elif cmd == 'stable-sum':
        stable_sum(e, float(args[0]), args[1:])
    elif cmd == 'journal-clean':
        ms = journal_clean(e, float(args[0]))
        if ms is None:
            sys.exit(1)
        print(ms)
    elif cmd == 'status':
        for r in statuses(e):
            print(r['node'], ' '.join('%s=%s' % (k, r.get(k, 0)) for k in args))
    elif cmd in ('rows', 'incs', 'members', 'primary', 'insync', 'summary'):
        rows = e.volume(args[0])[1]['placement']
        if cmd == 'rows':
            for i, row in enumerate(rows):
                print(i, row['v'], row.get('term', 1),
                      ' '.join('%s:%s' % ns for ns in zip(row['nodes'], states(row))))
        elif cmd == 'incs':
            for i, row in enumerate(rows):
                incs = row.get('incarnations', [''] * len(row['nodes']))
                print(i, ' '.join('%s:%s:%s' % (n, s, (c or '-')[:8])
                                  for n, s, c in zip(row['nodes'], states(row), incs)))
        elif cmd == 'members':
            for i, row in enumerate(rows):
                print(i, (in_sync(row) or ['-'])[0], ' '.join(row['nodes']))
        elif cmd == 'primary':
            ins = in_sync(rows[int(args[1])])
            if not ins:
                die('slice %s has no in-sync member' % args[1])
            print(ins[0])
        else:
            want = int(args[1]) if cmd == 'insync' else len(rows[0]['nodes'])
            good, hist = 0, {}
            for row in rows:
                st = states(row)
                good += all_in_sync([row], want)
                for s in st:
                    hist[s] = hist.get(s, 0) + 1
            if cmd == 'insync':
                sys.exit(0 if good == len(rows) else 1)
            print('rows=%d all_in_sync_rows=%d member_states=%s' % (
                len(rows), good, ','.join('%s:%d' % kv for kv in sorted(hist.items()))))
    else:
        die('unknown etcd command %r' % cmd)


# ---- chunk replica files ----

JOURNAL_BLOCK = 4096


def journal_pending(path):
    """Whether the journal file at path holds a record past its checkpoint,
    read from the file as docs/JOURNAL.md lays it out (not through the code
    under test): the valid superblock slot (magic, CRC32C, the higher
    superblock sequence) names the checkpoint's sequence and offset; the
    journal is checkpointed up to its end when no record of this journal
    (magic, nonce, id) with that sequence starts there (a PAD there: the
    next sequence at the ring's start). A writer acknowledges a write once
    its record is durable and checkpoints 200 ms after the last operation
    ended, so after acknowledged writes this turns false within a moment."""
    with open(path, 'rb') as f:
        best = None
        for slot in (0, 1):
            f.seek(slot * JOURNAL_BLOCK)
            sb = f.read(JOURNAL_BLOCK)
            if (len(sb) == JOURNAL_BLOCK and sb[:8] == b'ZLJRNLSB' and
                    struct.unpack_from('<I', sb, 4092)[0] == chunkfile.crc32c(sb[:4092])):
                if best is None or struct.unpack_from('<Q', sb, 48)[0] > struct.unpack_from('<Q', best, 48)[0]:
                    best = sb
        if best is None:
            return False  # not formatted yet: nothing written through it
        ring_off = struct.unpack_from('<Q', best, 24)[0]
        jid = struct.unpack_from('<I', best, 32)[0]
        nonce, seq, off = struct.unpack_from('<QQQ', best, 40)[0], *struct.unpack_from('<QQ', best, 56)
        for _ in range(2):
            f.seek(off)
            h = f.read(48)
            if (len(h) < 48 or h[:4] != b'ZLJR' or struct.unpack_from('<Q', h, 8)[0] != seq or
                    struct.unpack_from('<Q', h, 16)[0] != nonce or struct.unpack_from('<I', h, 36)[0] != jid):
                return False
            if struct.unpack_from('<H', h, 4)[0] != 2:
                return True  # a BATCH not checkpointed yet
            seq, off = seq + 1, ring_off  # a PAD: the next record starts the ring
        return True


def storage_running(root):
    """Whether the zipline-storage recorded in root/pid (test/lib/cluster.sh)
    runs: alive, not stopped (SIGSTOP), and that program (not a reused PID)."""
    try:
        pid = int(open(os.path.join(root, 'pid')).read().split()[0])
        cmd = open('/proc/%d/cmdline' % pid, 'rb').read()
    except (OSError, ValueError, IndexError):
        return False
    return proc_state.state(pid) not in (None, 'T', 't', 'Z', 'X') and b'zipline-storage' in cmd


def journals_checkpointed(dirs, secs):
    """Waits until the journal of every running daemon owning one of the
    chunk dirs (.../storage-N/data/chunks/VOL) holds nothing past its
    checkpoint; False (the journals not there yet on stderr) after secs."""
    roots = sorted(set(d.split('/data/chunks/')[0] for d in dirs if '/data/chunks/' in d))
    t0 = time.monotonic()
    while True:
        pending = [j for r in roots if storage_running(r)
                   for j in sorted(glob.glob(os.path.join(r, 'data', 'journal-*')))
                   if journal_pending(j)]
        if not pending:
            return True
        if time.monotonic() - t0 >= secs:
            sys.stderr.write('heal_tool: files: records past the checkpoint after %g s in %s\n'
                             % (secs, ' '.join(pending)))
            return False
        time.sleep(0.05)


def files(cs, dirs, missing_ok, label='', index=False):
    # The versions come from the chunk files' metadata pages, which daemons
    # on the journal write path write at checkpoints: first wait until each
    # running daemon's journal is checkpointed up to its end (immediate on
    # the direct path: no journal file). A daemon killed or stopped keeps
    # what its files hold (its journal replays at its next start).
    journals_checkpointed(dirs, 60)
    for d in dirs:
        if not os.path.isdir(d):
            if missing_ok:
                continue
            die('%s: no chunk directory (the replica holds nothing of the volume)' % d)
        node = label + d.split('/storage-')[1].split('/')[0]
        for name in sorted(os.listdir(d)):
            if not name.endswith('.zlc'):
                continue
            try:
                f = open(os.path.join(d, name), 'rb')
            except FileNotFoundError:
                if missing_ok:
                    continue  # an old copy the daemon removed meanwhile
                raise
            with f:
                try:
                    ver = chunkfile.version(f, os.path.join(d, name))
                    data = chunkfile.read_data(f, os.path.join(d, name), 0, cs)
                except chunkfile.NotAChunk as ex:
                    die(str(ex))
            print(node, int(name[:-4], 16) if index else name, hashlib.sha256(data).hexdigest(), '%x' % ver)


def main(argv):
    if len(argv) >= 3 and argv[0] == 'etcd':
        etcd_cmd(argv[1], argv[2], argv[3:])
    elif len(argv) >= 2 and argv[0] == 'files':
        rest, opts = argv[2:], {'--missing-ok': False, '--chunk-index': False}
        label = ''
        while rest and rest[0].startswith('--'):
            if rest[0] == '--node-label' and len(rest) > 1:
                label, rest = rest[1], rest[2:]
            elif rest[0] in opts:
                opts[rest[0]], rest = True, rest[1:]
            else:
                die('files: unknown option %r' % rest[0])
        files(int(argv[1]), rest, opts['--missing-ok'], label, opts['--chunk-index'])
    elif len(argv) == 4 and argv[0] == 'divergent':
        try:
            chunkfile.divergent(argv[1], int(argv[2]), int(argv[3]))
        except chunkfile.NotAChunk as ex:
            die(str(ex))
    elif len(argv) in (3, 4) and argv[0] == 'blockoff':
        try:
            print(chunkfile.block_offset(argv[1], int(argv[2]), int(argv[3]) if len(argv) > 3 else 0))
        except chunkfile.NotAChunk as ex:
            die(str(ex))
    elif len(argv) == 4 and argv[0] == 'data':
        try:
            out = chunkfile.data(argv[2], 0, int(argv[1]))
        except chunkfile.NotAChunk as ex:
            die(str(ex))
        with open(argv[3], 'wb') as f:
            f.write(out)
    else:
        die('usage: heal_tool.py etcd URL CMD ARGS... | files CHUNK [--missing-ok] DIR... | '
            'divergent FILE BLOCK BYTE | blockoff FILE BLOCK [BYTE] | data CHUNK FILE OUT '
            '(see the head of %s)' % __file__)


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader had what it wanted (`... | grep -q`): not a failure of
        # ours, or a pipeline under pipefail would report its match as none.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
