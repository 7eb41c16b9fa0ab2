#!/usr/bin/env python3
"""snap_e2e.sh's oracle: checks exported snapshots against e2e_snap's log.

  snap_check.py LOG LIVE_IMG SNAPS_FILE

LOG: e2e_snap's records ("S gen block t", "A gen t"; CLOCK_REALTIME ns).
LIVE_IMG: an export of the volume after the writer stopped: every block must
hold its last write (checks the checker). SNAPS_FILE: one line per snapshot,
"NAME T0 T1 IMG": `zl snapshot create` started at T0 and returned at T1.

For each snapshot and block (writes of a block are ordered: never two in
flight at once), the block must hold a write W of that block that is not
older than the last write acknowledged before T0 (that one MUST be in the
snapshot) and was submitted before T1 (a write issued after the call
returned must NOT be), or zeros when no write was acknowledged before T0.
Exit 0 when every block of every image is allowed."""
import struct
import sys

BLK = 4096


def fill(block, gen):
    words = []
    for i in range(BLK // 8):
        if i == 0:
            v = block
        elif i == 1:
            v = gen
        else:
            v = ((block << 32) + gen * 65537 + i * 0x9E3779B1) & 0xFFFFFFFFFFFFFFFF
        words.append(v)
    return struct.pack("<%dQ" % (BLK // 8), *words)


def content(img, block):
    """The generation a block of an image holds: 0 for zeros, None when it is
    no write of that block."""
    data = img[block * BLK:(block + 1) * BLK]
    if data == bytes(BLK):
        return 0
    b, g = struct.unpack_from("<QQ", data)
    if b != block or g == 0 or data != fill(block, g):
        return None
    return g


def main():
    log, live_path, snaps_path = sys.argv[1:4]
    sub = {}   # gen -> (block, t)
    ack = {}   # gen -> t
    per_block = {}
    with open(log) as f:
        for line in f:
            p = line.split()
            if p[0] == "S":
                g, b, t = int(p[1]), int(p[2]), int(p[3])
                sub[g] = (b, t)
                per_block.setdefault(b, []).append(g)
            elif p[0] == "A":
                ack[int(p[1])] = int(p[2])
    missing = [g for g in sub if g not in ack]
    if missing:
        print("snap_check: FAIL: writes without an acknowledgement: %d" % len(missing))
        return 1
    with open(live_path, "rb") as f:
        live = f.read()
    blocks = len(live) // BLK
    bad = 0
    for b in range(blocks):
        want = per_block.get(b, [0])[-1]
        if content(live, b) != want:
            bad += 1
            if bad <= 5:
                print("snap_check: live block %d holds %r, want gen %d" % (b, content(live, b), want))
    if bad:
        print("snap_check: FAIL: the live volume differs from the log in %d blocks" % bad)
        return 1
    print("snap_check: live image matches the log: %d writes, %d blocks" % (len(sub), blocks))
    failures = 0
    with open(snaps_path) as f:
        snaps = [l.split() for l in f if l.strip()]
    for name, t0, t1, path in snaps:
        t0, t1 = int(t0), int(t1)
        with open(path, "rb") as f:
            img = f.read()
        if len(img) != len(live):
            print("snap_check: FAIL: %s is %d bytes, the volume %d" % (name, len(img), len(live)))
            failures += 1
            continue
        bad = window = must = 0
        for b in range(blocks):
            gens = per_block.get(b, [])
            lo = -1  # index of the last write acknowledged before t0
            for i, g in enumerate(gens):
                if ack[g] < t0:
                    lo = i
            allowed = set(g for g in gens[max(lo, 0):] if sub[g][1] < t1)
            if lo < 0:
                allowed.add(0)
            else:
                allowed.add(gens[lo])
                must += 1
            if len(allowed) > 1:
                window += 1
            got = content(img, b)
            if got not in allowed:
                bad += 1
                if bad <= 5:
                    print("snap_check: %s block %d holds gen %r; allowed %s (acked before "
                          "the call: %s)" % (name, b, got, sorted(allowed),
                                             gens[lo] if lo >= 0 else "none"))
        print("snap_check: %s: %d blocks, %d with a write acknowledged before the call, "
              "%d with writes in flight at it, %d bad" % (name, blocks, must, window, bad))
        if bad:
            failures += 1
    if failures:
        print("snap_check: FAIL: %d snapshot(s) differ" % failures)
        return 1
    print("snap_check: PASS: %d snapshots" % len(snaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
