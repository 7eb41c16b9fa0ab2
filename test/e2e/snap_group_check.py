#!/usr/bin/env python3
"""snap_group_e2e.sh's oracle: group snapshots against e2e_snap's ordered pairs.

  snap_group_check.py LOG LIVE_A LIVE_B GROUPS_FILE

LOG: e2e_snap --volume2's records: "P gen a b" (pair gen: block a of volume A
written with fill(a, gen), then, only after that write was acknowledged,
block b of volume B with fill(b, gen)) and "B gen" (the second write
submitted). LIVE_A, LIVE_B: exports after the writer stopped: every block
holds the last write of the log (checks the checker). GROUPS_FILE: one line
per group snapshot, "GROUP IMG_A IMG_B".

The invariant (docs/SNAPSHOTS.md §5): a group snapshot whose B image holds
pair gen's write to block b must hold pair gen's write to block a, or a
later write of block a (writes of one block never overlap, so a later one
was issued after gen's was acknowledged). Every block of both images must
be zeros or a write of that block the log knows. Exit 0 when all hold."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snap_check import BLK, content  # noqa: E402 (the same block pattern)


def main():
    log, live_a, live_b, groups_path = sys.argv[1:5]
    pairs = {}  # gen -> (a, b)
    second = set()
    with open(log) as f:
        for line in f:
            p = line.split()
            if p[0] == "P":
                pairs[int(p[1])] = (int(p[2]), int(p[3]))
            elif p[0] == "B":
                second.add(int(p[1]))
    last_a, last_b = {}, {}
    for g in sorted(pairs):
        a, b = pairs[g]
        last_a[a] = g
        if g in second:
            last_b[b] = g
    with open(live_a, "rb") as f:
        img_la = f.read()
    with open(live_b, "rb") as f:
        img_lb = f.read()
    blocks = len(img_la) // BLK
    bad = 0
    for blk in range(blocks):
        if content(img_la, blk) != last_a.get(blk, 0):
            bad += 1
        if content(img_lb, blk) != last_b.get(blk, 0):
            bad += 1
    if bad or len(img_lb) != len(img_la):
        print("snap_group_check: FAIL: the live volumes differ from the log in %d blocks" % bad)
        return 1
    print("snap_group_check: live images match the log: %d pairs, %d blocks each"
          % (len(pairs), blocks))
    failures = 0
    with open(groups_path) as f:
        groups = [line.split() for line in f if line.strip()]
    for name, path_a, path_b in groups:
        with open(path_a, "rb") as f:
            img_a = f.read()
        with open(path_b, "rb") as f:
            img_b = f.read()
        bad = checked = 0
        for blk in range(blocks):
            ga = content(img_a, blk)
            if ga is None or (ga and pairs.get(ga, (None,))[0] != blk):
                bad += 1
                print("snap_group_check: %s: A block %d holds no write of the log" % (name, blk))
            gb = content(img_b, blk)
            if gb is None or (gb and (gb not in second or pairs[gb][1] != blk)):
                bad += 1
                print("snap_group_check: %s: B block %d holds no write of the log" % (name, blk))
                continue
            if not gb:
                continue
            a = pairs[gb][0]
            have = content(img_a, a)
            checked += 1
            if have is None or have < gb:
                bad += 1
                if bad <= 5:
                    print("snap_group_check: %s: B block %d holds pair %d but A block %d holds "
                          "%r: B's write without A's" % (name, blk, gb, a, have))
        print("snap_group_check: %s: %d B blocks hold a pair's write, %d bad"
              % (name, checked, bad))
        if checked == 0:
            print("snap_group_check: FAIL: %s holds no pair at all: nothing was checked" % name)
            failures += 1
        if bad:
            failures += 1
    if failures:
        print("snap_group_check: FAIL: %d group snapshot(s) break the order" % failures)
        return 1
    print("snap_group_check: PASS: %d group snapshots" % len(groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
