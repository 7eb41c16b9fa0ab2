"""CSI fencing end to end (issue 11): a volume moves from node 1 to node 2
while node 1 is cut off from the CO but its attach process keeps running.

"After ControllerPublish moves a volume to another node, the old node's
attach process gets ZL_ERR_STALE / a fenced error on every write and the new
node's writes all land; the data is the new node's."

Run by csi_e2e.sh (etcd, three zipline-storage daemons with --auth on, the
controller); this script plays the kubelet and the external attacher, starts
two zipline-node services and drives I/O through the real attach processes'
block devices (dd oflag=direct) and mounts. The oracle is independent of the
code under test: the chunk replica files of every storage daemon, read
directly (format v2 header, storage/storage_chunk.h), the volume record read
from etcd's JSON gateway, and the refusals seen by e2e_outsider (hand-made
wire requests). Environment as for csi_e2e_test.py.
"""

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csi_e2e_test as e  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import chunkfile  # noqa: E402
import etcd_gw  # noqa: E402
from csi_e2e_test import MiB, T, fail, log  # noqa: E402

BLOCK = 64 * 1024          # one node-1 write
FENCE_WRITE_MAX_S = 15     # a fenced write must fail fast (the attach io-timeout is 120 s)


# ---- independent views: etcd, replica files, the wire ----

def etcd_get(key):
    return etcd_gw.get(e.ETCD, key)


def volume_record(vol):
    kv = etcd_get("/zipline/volumes/" + vol)
    if not kv:
        fail("no volume record for %s in etcd" % vol)
    return json.loads(base64.b64decode(kv["value"]))


def rows(vol):
    """Per slice: (version, [(node, state)]) from the record in etcd."""
    out = []
    for row in volume_record(vol)["placement"]:
        states = row.get("states") or ["in_sync" if n in row["in_sync"] else "out"
                                       for n in row["nodes"]]
        out.append((row["v"], list(zip(row["nodes"], states))))
    return out


def replica_files(vol):
    """{storage index: {chunk: path}} of every chunk replica file of vol."""
    out = {}
    for i in e.storage_ids():
        d = os.path.join(e.CL_DIR, "storage-%d" % i, "data", "chunks", vol)
        if not os.path.isdir(d):
            continue
        out[i] = {int(n[:-4], 16): os.path.join(d, n) for n in os.listdir(d) if n.endswith(".zlc")}
    return out


def replica_read(path, off, length):
    """length bytes at offset off of a replica's chunk data (zeros where the
    sparse file holds nothing)."""
    try:
        return chunkfile.data(path, off, length)
    except chunkfile.NotAChunk as ex:
        fail(str(ex))


def wait_hello(vol, node_id, pctx, want, secs=20):
    """Waits until every storage daemon answers a HELLO with the attach token
    pctx (minted for node_id) with status want; returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        got = {i: e.hello_status(i, vol, node_id, pctx) for i in e.storage_ids()}
        if all(s == want for s in got.values()):
            return time.monotonic() - t0
        if time.monotonic() - t0 > secs:
            fail("HELLO with %s's token (epoch %s): wanted %s on every daemon after %d s, got %s"
                 % (node_id, pctx["epoch"], want, secs, got))
        time.sleep(0.2)


# ---- the data ----

def pattern(tag, off, length):
    """Every 512-byte sector names its writer (tag) and its offset."""
    out = bytearray()
    for s in range(off, off + length, 512):
        head = ("ZLFENCE|%s|%016x|" % (tag, s)).encode()
        out += head + bytes((s // 512 + k) & 0xff for k in range(512 - len(head)))
    return bytes(out)


def dev_write(dev, off, data, timeout):
    """One O_DIRECT write through a block device (dd); (ok, seconds, stderr)."""
    src = os.path.join(e.WORK, "fence-src-%d.bin" % threading.get_ident())
    with open(src, "wb") as f:
        f.write(data)
    t0 = time.monotonic()
    try:
        p = subprocess.run(["dd", "if=" + src, "of=" + dev, "bs=%d" % len(data), "count=1",
                            "seek=%d" % (off // len(data)), "oflag=direct", "conv=notrunc,fsync",
                            "status=none"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0, "no answer within %d s" % timeout
    return p.returncode == 0, time.monotonic() - t0, p.stderr.strip()


def dev_read(dev, off, length):
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    try:
        import mmap
        buf = mmap.mmap(-1, length)
        os.preadv(fd, [buf], off)
        return bytes(buf)
    finally:
        os.close(fd)


def attach_log(node, vol):
    p = os.path.join(node.state, vol, "attach.log")
    if not os.path.isfile(p):
        return ""
    with open(p, errors="replace") as f:
        return f.read()


def fenced_writes(dev, offsets, tag, what):
    """Writes a block at each offset through dev; each must fail, fast."""
    worst = 0.0
    for off in offsets:
        ok, secs, err = dev_write(dev, off, pattern(tag, off, BLOCK), FENCE_WRITE_MAX_S * 4)
        worst = max(worst, secs)
        if ok is None:
            fail("%s: a write at %d through the fenced device hangs (%s)" % (what, off, err))
        if ok:
            fail("%s: a write at %d through the fenced device succeeded" % (what, off))
        if secs > FENCE_WRITE_MAX_S:
            fail("%s: the fenced write at %d took %.1f s to fail (at most %d s expected: a "
                 "fence is final, retrying cannot help)" % (what, off, secs, FENCE_WRITE_MAX_S))
        if "Input/output error" not in err:
            fail("%s: the fenced write at %d failed without EIO: %s" % (what, off, err))
    log("  %-52s -> %d writes, all EIO (slowest %.2f s)" % (what, len(offsets), worst))
    return worst


def alive(pid):
    """A process that runs (an exited one waiting for its parent, our init
    here, to reap it is not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def unpublish_unstage_here(node, vol, staging, target):
    """NodeUnpublish + NodeUnstage on node while another node has the volume
    staged: nothing of vol may be left mounted or attached under node's
    directories (csi_e2e_test.unpublish_unstage checks every mount)."""
    pb = e.pb
    e.twice(node.n.NodeUnpublishVolume,
            pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=target), "NodeUnpublish")
    e.twice(node.n.NodeUnstageVolume,
            pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=staging),
            "NodeUnstage")
    if os.path.exists(target) or e.mounted(target) or e.mounted(staging):
        fail("NodeUnpublish/NodeUnstage left %s or %s behind" % (target, staging))
    if os.path.exists(os.path.join(node.state, vol)):
        fail("NodeUnstage left state %s" % os.path.join(node.state, vol))
    with open("/proc/self/mountinfo") as f:
        left = [line for line in f if node.dir + "/" in line]
    if left:
        fail("mounts of %s left under %s: %s" % (vol, node.dir, left))
    loops = subprocess.run(["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True,
                           text=True).stdout
    if node.dir + "/" in loops:
        fail("a loop device on %s is left: %s" % (node.dir, loops))


RACE_LO, RACE_HI = 40 * MiB, 48 * MiB  # the racing writer's region


class RaceWriter(threading.Thread):
    """Node 1's writer that does not stop for the move: 64 KiB O_DIRECT
    writes round the race region, each tagged with its sequence number,
    from before ControllerUnpublish until told to stop."""

    def __init__(self, dev):
        super().__init__(daemon=True)
        self.dev = dev
        self.results = []  # (seq, off, ok, t_start, t_end)
        self.halt = threading.Event()

    def run(self):
        seq = 0
        while not self.halt.is_set() and seq < 100000:
            off = RACE_LO + (seq % ((RACE_HI - RACE_LO) // BLOCK)) * BLOCK
            t0 = time.monotonic()
            ok, _, _ = dev_write(self.dev, off, pattern("R%06d" % seq, off, BLOCK), 60)
            self.results.append((seq, off, ok, t0, time.monotonic()))
            seq += 1


def race_oracle(vol, cs, writer, fence_t):
    """Every replica holds the same bytes in the race region; each block is
    zeros or one racing write; no write that started after fence_t (every
    daemon answered the old token STALE) landed, and every one of them
    failed."""
    files = replica_files(vol)
    by_seq = {r[0]: r for r in writer.results}
    late = [r for r in writer.results if r[3] > fence_t]
    if any(r[2] for r in late):
        fail("racing writes that started after the fence succeeded: %s"
             % [r[:3] for r in late if r[2]][:5])
    landed_failed = 0
    for off in range(RACE_LO, RACE_HI, BLOCK):
        chunk, coff = off // cs, off % cs
        copies = {}
        for i, chunks in sorted(files.items()):
            path = chunks.get(chunk)
            copies[i] = replica_read(path, coff, BLOCK) if path else bytes(BLOCK)
        if len(set(copies.values())) != 1:
            tags = {i: c[:24] for i, c in copies.items()}
            fail("replicas differ at %d after the racing writes: %s" % (off, tags))
        data = next(iter(copies.values()))
        if data == bytes(BLOCK):
            continue
        m = re.match(rb"ZLFENCE\|R(\d{6})\|", data)
        if not m or data != pattern("R" + m.group(1).decode(), off, BLOCK):
            fail("block %d holds neither zeros nor one racing write: %r" % (off, data[:40]))
        r = by_seq.get(int(m.group(1)))
        if not r:
            fail("block %d holds racing write %s, which was never issued" % (off, m.group(1)))
        if r[3] > fence_t:
            fail("racing write %d, started after the fence, landed at %d" % (r[0], off))
        if not r[2]:
            landed_failed += 1
    ok = sum(1 for r in writer.results if r[2])
    log("  racing writer: %d writes (%d ok before the fence, %d failed, %d after it); all 3 "
        "replicas agree on the race region; %d failed write(s) landed (allowed: a failed "
        "write's range is undefined)" % (len(writer.results), ok, len(writer.results) - ok,
                                         len(late), landed_failed))


def test_move(n1, n2):
    C = e.grpc.StatusCode
    pb = e.pb
    cap = e.block_cap()
    size = 64 * MiB
    req = pb.CreateVolumeRequest(name="pvc-fence", capacity_range=pb.CapacityRange(
        required_bytes=size), volume_capabilities=[cap], parameters={"replicas": "3"})
    vol = e.twice(e.ctrl.controller.CreateVolume, req, "CreateVolume pvc-fence").volume.volume_id
    rec = volume_record(vol)
    cs = rec["chunk_size"]
    log("block volume %s: 3 replicas, chunk size %d, %d slices" % (vol, cs, len(rec["placement"])))

    # Node 1 attaches and writes A over [0, 16 MiB).
    p1 = e.ctrl_publish(vol, n1, cap)
    st1, dev1 = e.stage_publish(n1, vol, cap, p1, "fence")
    e.assert_auth_on(vol, n1, p1, "block volume on " + n1.node_id)
    pre = 16 * MiB
    for off in range(0, pre, 4 * MiB):
        ok, secs, err = dev_write(dev1, off, pattern("N1PRE", off, 4 * MiB), 120)
        if not ok:
            fail("node 1's write at %d before the move failed: %s" % (off, err))
    log("node 1 (%s, epoch %s) wrote N1PRE over [0, 16 MiB) through %s"
        % (n1.node_id, p1["epoch"], dev1))
    rows_before = rows(vol)
    if any(st != "in_sync" for _, m in rows_before for _, st in m):
        fail("rows before the move: %s" % rows_before)
    attach1 = n1.attach_pids()

    # The partition: the CO loses node 1 (its zipline-node service is gone),
    # node 1's attach process keeps serving its device.
    racer = RaceWriter(dev1)
    racer.start()
    time.sleep(0.5)
    n1.stop()
    for p in attach1:
        if not alive(p):
            fail("node 1's attach process %d died with its zipline-node" % p)
    log("node 1's zipline-node is unreachable; its attach process %s keeps running" % attach1)

    # What the controller requires for a single-writer volume: the old
    # attachment ends first (FAILED_PRECONDITION, naming where it is).
    details = e.expect_code(C.FAILED_PRECONDITION, e.ctrl.controller.ControllerPublishVolume,
                            pb.ControllerPublishVolumeRequest(volume_id=vol, node_id=n2.node_id,
                                                              volume_capability=cap),
                            "ControllerPublish to node 2 while on node 1")
    if n1.node_id not in details:
        fail("FAILED_PRECONDITION does not name the node the volume is on: %s" % details)
    # The external attacher's force detach: ControllerUnpublish of node 1
    # needs nothing from node 1 and succeeds while it is unreachable.
    e.ctrl_unpublish(vol, n1)
    # From now on node 1 is detached: its epoch is fenced everywhere.
    secs = wait_hello(vol, n1.node_id, p1, "ZL_ERR_STALE")
    fence_t = time.monotonic()
    time.sleep(1.0)
    racer.halt.set()
    racer.join(120)
    log("  ControllerUnpublish(node 1) fenced epoch %s on every daemon within %.1f s"
        % (p1["epoch"], secs))
    gap = [0, 5 * MiB, 9 * MiB, 13 * MiB, 20 * MiB]
    fenced_writes(dev1, gap, "N1POST", "node 1 writes after ControllerUnpublish")

    # ControllerPublish to node 2: a higher epoch, node 2 stages and writes B.
    p2 = e.ctrl_publish(vol, n2, cap)
    if int(p2["epoch"]) <= int(p1["epoch"]):
        fail("node 2's epoch %s is not above node 1's %s" % (p2["epoch"], p1["epoch"]))
    wait_hello(vol, n2.node_id, p2, "OK")
    st2, dev2 = e.stage_publish(n2, vol, cap, p2, "fence")
    e.assert_auth_on(vol, n2, p2, "block volume on " + n2.node_id)
    half = 8 * MiB
    interleaved = []
    for off in range(0, half, 2 * MiB):
        ok, secs, err = dev_write(dev2, off, pattern("N2", off, 2 * MiB), 120)
        if not ok:
            fail("node 2's write at %d failed: %s" % (off, err))
        # Node 1 keeps trying, between node 2's writes, where node 2 wrote,
        # where it did not and where nobody wrote.
        interleaved += [off + 64 * 1024, off + half + 128 * 1024, 24 * MiB + off]
        fenced_writes(dev1, interleaved[-3:], "N1POST", "node 1 writes between node 2's")
    log("node 2 (%s, epoch %s) wrote N2 over [0, 8 MiB)" % (n2.node_id, p2["epoch"]))
    after = [o for o in range(0, 32 * MiB, 3 * MiB + BLOCK)]
    fenced_writes(dev1, after, "N1POST", "node 1 writes after node 2's")
    # The old token on a fresh connection: STALE at HELLO on every daemon.
    for i in e.storage_ids():
        r = e.outsider(i, "--vol", vol, "--epoch", p1["epoch"], "--node", n1.node_id,
                     "--token", p1["token"], "hello", "--len", "4096", "write")
        if r.get("hello") != "ZL_ERR_STALE" or r.get("write") not in ("ZL_ERR_AUTH", "CLOSED"):
            fail("storage-%d: node 1's old token on a new connection: %s" % (i, r))
    log("  node 1's token (epoch %s) on a new connection -> HELLO ZL_ERR_STALE, write refused"
        % p1["epoch"])

    # The attach process of node 1 said why: the fence, once, not a retry loop.
    alog = attach_log(n1, vol)
    if not re.search(r"fenced", alog):
        fail("node 1's attach log does not say it is fenced:\n%s" % alog[-3000:])
    if "waited" in alog:
        fail("node 1's attach process waited out its io-timeout on a fence:\n%s" % alog[-3000:])
    for p in attach1:
        if not alive(p):  # it fails I/O, it does not crash
            fail("node 1's attach process %d died while fenced" % p)

    # ---- the oracle ----
    want = {}
    for off in range(0, 32 * MiB, 4096):
        if off < half:
            want[off] = pattern("N2", off, 4096)
        elif off < pre:
            want[off] = pattern("N1PRE", off, 4096)
        else:
            want[off] = bytes(4096)
    files = replica_files(vol)
    if len(files) != 3:
        fail("replicas of %s on %d daemons, expected 3: %s" % (vol, len(files), sorted(files)))
    checked = 0
    for i, chunks in sorted(files.items()):
        for chunk in range(0, 32 * MiB // cs + (1 if 32 * MiB % cs else 0)):
            lo, hi = chunk * cs, min((chunk + 1) * cs, 32 * MiB)
            path = chunks.get(chunk)
            if path is None:
                if lo < pre:
                    fail("storage-%d has no replica of chunk %d" % (i, chunk))
                continue
            data = replica_read(path, 0, hi - lo)
            for off in range(lo, hi, 4096):
                got = data[off - lo:off - lo + 4096]
                if got != want[off]:
                    fail("storage-%d chunk %d offset %d holds %r..., expected %r..."
                         % (i, chunk, off, got[:40], want[off][:40]))
                checked += 1
        for path in chunks.values():
            with open(path, "rb") as f:
                if b"N1POST" in f.read():
                    fail("a fenced node-1 write landed in %s" % path)
    log("  replicas on storage %s: [0,8M)=N2, [8M,16M)=N1PRE, [16M,32M)=zeros (%d blocks); "
        "N1POST in no replica file" % (sorted(files), checked))
    got = dev_read(dev2, 0, 32 * MiB)
    for off in range(0, 32 * MiB, 4096):
        if got[off:off + 4096] != want[off]:
            fail("node 2 reads %r... at %d, expected %r..." % (got[off:off + 40], off,
                                                                 want[off][:40]))
    log("  a read through node 2 sees the same 32 MiB")
    race_oracle(vol, cs, racer, fence_t)
    rows_after = rows(vol)
    if [m for _, m in rows_after] != [m for _, m in rows_before]:
        fail("membership changed by the fenced writes:\nbefore %s\nafter  %s"
             % (rows_before, rows_after))
    if any(st != "in_sync" for _, m in rows_after for _, st in m):
        fail("a member left in_sync: %s" % rows_after)
    log("  every row still has all 3 members in_sync, same members as before the move")

    # Node 1 comes back: the kubelet cleans up there; the attach process
    # ends (its final flush is fenced too) and leaves nothing behind.
    n1.start()
    cond = e.stats(n1, vol, dev1).volume_condition
    if not cond.abnormal or "fenced" not in cond.message:
        fail("node 1's NodeGetVolumeStats does not report the fence: %s" % cond)
    log("node 1 back: NodeGetVolumeStats says: %s" % cond.message)
    t0 = time.monotonic()
    unpublish_unstage_here(n1, vol, st1, dev1)
    log("node 1 back: NodeUnpublish + NodeUnstage of the fenced attachment in %.1f s"
        % (time.monotonic() - t0))
    for p in attach1:
        if alive(p):
            fail("node 1's attach process %d outlived NodeUnstage" % p)
    if dev_read(dev2, 0, half) != b"".join(want[o] for o in range(0, half, 4096)):
        fail("node 2's data changed after node 1's cleanup")
    e.unpublish_unstage(n2, vol, st2, dev2)
    e.ctrl_unpublish(vol, n2)
    e.delete_volume(vol)
    log("fenced move: ok")


FS_WRITER = r"""
import errno, mmap, os, sys
path, tag = sys.argv[1], sys.argv[2]
buf = mmap.mmap(-1, 1 << 20)
for s in range(0, 1 << 20, 512):
    buf[s:s + 16] = ("%-16s" % tag).encode()[:16]
try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
    sys.exit(1)
print("OK")
"""


def fs_write(path, tag, timeout):
    """1 MiB written with O_DIRECT + fsync into a new file of a mounted
    volume, by a process of its own: (result, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", FS_WRITER, path, tag], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0
    return (p.stdout.strip() or p.stderr.strip()[-200:]), time.monotonic() - t0


def fenced_fs_writes(root, names, what):
    worst = 0.0
    seen = set()
    for name in names:
        res, secs = fs_write(os.path.join(root, name), "N1POST", FENCE_WRITE_MAX_S * 4)
        worst = max(worst, secs)
        if res is None:
            fail("%s: writing %s through the fenced mount hangs" % (what, name))
        if res == "OK":
            fail("%s: writing %s through the fenced mount succeeded" % (what, name))
        # EIO, or EROFS once ext4 stopped its journal after an EIO.
        if res not in ("EIO", "EROFS"):
            fail("%s: writing %s through the fenced mount failed with %s" % (what, name, res))
        if secs > FENCE_WRITE_MAX_S:
            fail("%s: the fenced write of %s took %.1f s to fail" % (what, name, secs))
        seen.add(res)
    log("  %-52s -> %d writers, all failed (%s; slowest %.2f s)"
        % (what, len(names), "/".join(sorted(seen)), worst))


def test_move_mount(n1, n2):
    """The same move for a mounted ext4 volume: a process on node 1 keeps
    writing files through its mount."""
    pb = e.pb
    cap = e.mount_cap(fs="ext4")
    req = pb.CreateVolumeRequest(name="pvc-fence-fs", capacity_range=pb.CapacityRange(
        required_bytes=128 * MiB), volume_capabilities=[cap], parameters={"replicas": "3"})
    vol = e.twice(e.ctrl.controller.CreateVolume, req, "CreateVolume pvc-fence-fs").volume.volume_id
    p1 = e.ctrl_publish(vol, n1, cap)
    st1, mnt1 = e.stage_publish(n1, vol, cap, p1, "fence-fs")
    e.assert_auth_on(vol, n1, p1, "ext4 volume on " + n1.node_id)
    sums = e.write_files(os.path.join(mnt1, "pre"), count=4, size=2 * MiB)
    res, _ = fs_write(os.path.join(mnt1, "pre", "direct.bin"), "N1PRE", 120)
    if res != "OK":
        fail("node 1's O_DIRECT write before the move: %s" % res)
    subprocess.run(["sync", "-f", mnt1], check=True, timeout=120)
    log("ext4 volume %s on %s (epoch %s): 5 files written" % (vol, n1.node_id, p1["epoch"]))
    rows_before = rows(vol)
    attach1 = n1.attach_pids()

    n1.stop()
    e.ctrl_unpublish(vol, n1)
    wait_hello(vol, n1.node_id, p1, "ZL_ERR_STALE")
    fenced_fs_writes(mnt1, ["post/a.bin", "pre/b.bin"], "node 1 writers after ControllerUnpublish")
    p2 = e.ctrl_publish(vol, n2, cap)
    wait_hello(vol, n2.node_id, p2, "OK")
    st2, mnt2 = e.stage_publish(n2, vol, cap, p2, "fence-fs")
    e.assert_auth_on(vol, n2, p2, "ext4 volume on " + n2.node_id)
    e.check_files(os.path.join(mnt2, "pre"), sums)
    more = e.write_files(os.path.join(mnt2, "n2"), count=3, size=2 * MiB)
    res, _ = fs_write(os.path.join(mnt2, "n2", "direct.bin"), "N2", 120)
    if res != "OK":
        fail("node 2's O_DIRECT write: %s" % res)
    fenced_fs_writes(mnt1, ["post/c.bin", "n2/x.bin", "pre/d.bin"],
                     "node 1 writers after node 2's writes")
    subprocess.run(["sync", "-f", mnt2], check=True, timeout=120)
    for name in os.listdir(mnt2):
        if name not in ("pre", "n2", "lost+found"):
            fail("node 2 sees %s, which it did not write" % name)
    for f, where in ((os.listdir(os.path.join(mnt2, "pre")), "pre"),
                     (os.listdir(os.path.join(mnt2, "n2")), "n2")):
        extra = [x for x in f if x not in ("dir0", "dir1", "dir2", "direct.bin")]
        if extra:
            fail("node 2 sees %s in %s: node 1's fenced writes" % (extra, where))
    for i, chunks in sorted(replica_files(vol).items()):
        for path in chunks.values():
            with open(path, "rb") as f:
                if b"N1POST" in f.read():
                    fail("a fenced node-1 write landed in %s" % path)
    log("  node 2 sees node 1's 5 files and its own 4, nothing else; N1POST in no replica file")
    if [m for _, m in rows(vol)] != [m for _, m in rows_before]:
        fail("membership changed: before %s after %s" % (rows_before, rows(vol)))
    log("  every row still has all 3 members in_sync")
    n1.start()
    cond = e.stats(n1, vol, mnt1).volume_condition
    if not cond.abnormal or "fenced" not in cond.message:
        fail("node 1's NodeGetVolumeStats does not report the fence: %s" % cond)
    unpublish_unstage_here(n1, vol, st1, mnt1)
    for p in attach1:
        if alive(p):
            fail("node 1's attach process %d outlived NodeUnstage" % p)
    e.check_files(os.path.join(mnt2, "pre"), sums)
    e.check_files(os.path.join(mnt2, "n2"), more)
    e.unpublish_unstage(n2, vol, st2, mnt2)
    e.ctrl_unpublish(vol, n2)
    e.delete_volume(vol)
    log("fenced move of a mounted volume: ok")


def main():
    e.connect_controller()
    n1, n2 = e.Node(1).start(), e.Node(2).start()
    try:
        test_move(n1, n2)
        test_move_mount(n1, n2)
    finally:
        n1.stop()
        n2.stop()
    log("PASS")


if __name__ == "__main__":
    main()
