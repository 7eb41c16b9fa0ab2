"""Snapshots of a volume attached through CSI (issue 25, docs/SNAPSHOTS.md
§3): the attach process takes them (zl_vol_snap_serve), not the bare
transaction.

Run by csi_e2e.sh (etcd, three zipline-storage daemons, the controller).

1. An ext4 volume is staged and published through the FUSE frontend; files
   are written and fsync'd.
2. Under fio (randwrite, verify=crc32c, rate-limited), `zl snapshot create`
   must say it was taken by the attach process's client (the node id its
   token names), and the attach process must log that it took it.
3. fio ends without an error; `zl snapshot export` gives the image, which
   must be a crash-consistent ext4: once its journal is replayed (what a
   mount does after a crash, e2fsck -E journal_only), e2fsck -fn finds
   nothing to fix, and the files fsync'd before the snapshot are in it with
   their sha256 (read with debugfs, no mount).
4. The volume grows (ControllerExpand, then "resize" on the attach
   process's ctl.sock: it keeps its volume handle, the FUSE file grows):
   the next snapshot is still taken by it.
5. The attach process is killed with SIGKILL: a snapshot asked then waits
   for the dead process's snapwriters/ key to expire and is taken by zl
   itself. The volume is unstaged and staged again: a snapshot requested
   then is taken by the new attach process (its log says so), not by the
   transaction alone.
6. A CSI snapshot restored into a larger volume and a clone of the mounted
   volume are staged beside it: files there, file system grown, writes kept
   apart, the sources kept while the clones depend on them.
7. The controller's background flatten (docs/SNAPSHOTS.md §4): the staged
   clone loses its parent while mounted (copy-ups at its attachment's
   epoch, admitted beside the attach process, which writes on); its image
   is a clean ext4 holding the files. `zl volume flatten` of the staged
   restore (a class with flatten=false, left alone by the controller) at
   epoch 0 is fenced.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import csi_e2e_test as e  # noqa: E402
import etcd_gw  # noqa: E402
from csi_e2e_test import MiB, fail, log  # noqa: E402


def zl(*args, timeout=60):
    p = subprocess.run([os.path.join(e.BIN, "zl"), "--etcd", e.ETCD] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def ctl(node, vol, cmd):
    """One command on the attach process's control socket, its answer."""
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(30)
        c.connect(os.path.join(node.state, vol, "ctl.sock"))
        c.sendall((cmd + "\n").encode())
        got = b""
        while True:
            b = c.recv(4096)
            if not b:
                break
            got += b
    return got.decode().strip()


def attach_log(node, vol):
    with open(os.path.join(node.state, vol, "attach.log"), errors="replace") as f:
        return f.read()


def snapshot(node, vol, name):
    """zl snapshot create; it must be taken by the attach process."""
    rc, out = zl("snapshot", "create", vol, name)
    if rc != 0:
        fail("zl snapshot create %s %s: rc %d: %s" % (vol, name, rc, out))
    want = "taken by client %s" % node.node_id
    if want not in out:
        fail("snapshot %s was not taken by the attach process (want '%s'): %s"
             % (name, want, out))
    lines = [ln for ln in attach_log(node, vol).splitlines()
             if "snapshot taken" in ln and "name=%s " % name in ln + " "]
    if len(lines) != 1:
        fail("the attach process of %s did not log taking snapshot %s once: %s"
             % (vol, name, lines))
    log("snapshot %s: %s" % (name, out.strip()))


def check_image(img, sums):
    """The exported snapshot is an ext4 image taken while it was mounted
    and written: crash-consistent means what a mount after a power cut sees,
    so the journal is replayed first (and nothing else: -E journal_only
    repairs nothing), then a full read-only check must find no error (exit
    0). A torn cut across chunks (a metadata block from after the cut with
    the journal commit from before it) is what this catches."""
    copy = img + ".copy"
    subprocess.run(["cp", "--sparse=always", img, copy], check=True)
    p = subprocess.run(["e2fsck", "-E", "journal_only", "-y", copy], capture_output=True,
                       text=True)
    if p.returncode not in (0, 1):
        fail("journal replay of the snapshot image failed: rc %d\n%s%s"
             % (p.returncode, p.stdout, p.stderr))
    p = subprocess.run(["e2fsck", "-fn", copy], capture_output=True, text=True)
    if p.returncode != 0:
        fail("the snapshot image is not a consistent ext4 after journal replay: "
             "e2fsck -fn rc %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    for rel, want in sums.items():
        p = subprocess.run(["debugfs", "-R", "cat /" + rel, copy], capture_output=True)
        got = hashlib.sha256(p.stdout).hexdigest()
        if p.returncode != 0 or got != want:
            fail("%s in the snapshot image: sha256 %s, wrote %s (debugfs rc %d: %s)"
                 % (rel, got, want, p.returncode, p.stderr.decode(errors="replace")))
    os.unlink(copy)
    log("snapshot image: journal replayed, e2fsck -fn clean, %d files intact" % len(sums))


def clones(node, vol, cap, sums, target):
    """CSI restore and clone (docs/SNAPSHOTS.md §4): a VolumeSnapshot of the
    mounted volume restored into a larger volume, and a clone of the mounted
    volume itself (its internal snapshot taken by the attach process), each
    staged and mounted on the same node: the files are there, the restored
    file system fills its larger volume (grown on stage), and writes to a
    clone do not show in the source or in the other clone."""
    pb, VCS = e.pb, e.pb.VolumeContentSource
    snap = e.twice(e.ctrl.controller.CreateSnapshot,
                   pb.CreateSnapshotRequest(name="csi-snap", source_volume_id=vol),
                   "CreateSnapshot").snapshot
    if not snap.ready_to_use or snap.source_volume_id != vol:
        fail("CreateSnapshot answered %s" % snap)
    size = os.statvfs(target).f_blocks * os.statvfs(target).f_frsize
    restore = e.create_volume("snap-restore", 512 * MiB, cap,
                              VCS(snapshot=VCS.SnapshotSource(snapshot_id=snap.snapshot_id)),
                              params={"flatten": "false"})
    clone = e.create_volume("snap-clone", 384 * MiB, cap,
                            VCS(volume=VCS.VolumeSource(volume_id=vol)))
    if restore.content_source.snapshot.snapshot_id != snap.snapshot_id or \
            clone.content_source.volume.volume_id != vol:
        fail("CreateVolume from a source answered %s / %s" % (restore, clone))
    mounts = []
    for v, tag in ((restore, "restore"), (clone, "clone")):
        pctx = e.ctrl_publish(v.volume_id, node, cap)
        st, tg = e.stage_publish(node, v.volume_id, cap, pctx, tag)
        mounts.append((v.volume_id, st, tg))
        e.check_files(tg, sums)
    rsize = os.statvfs(mounts[0][2]).f_blocks * os.statvfs(mounts[0][2]).f_frsize
    if rsize < size + 96 * MiB:
        fail("the restore of a %d MiB file system into 512 MiB was staged at %d MiB"
             % (size // MiB, rsize // MiB))
    # Each writes its own file; nobody else sees it.
    for vid, _, tg in mounts:
        with open(os.path.join(tg, "only-" + vid), "wb") as f:
            f.write(os.urandom(MiB))
            os.fsync(f.fileno())
    for vid, _, tg in mounts + [(vol, None, target)]:
        seen = sorted(n for n in os.listdir(tg) if n.startswith("only-"))
        want = ["only-" + vid] if vid != vol else []
        if seen != want:
            fail("%s shows %s, want %s" % (vid, seen, want))
    e.check_files(target, sums)
    log("restore of snapshot %s (file system %d -> %d MiB) and clone of the mounted %s: "
        "files intact, writes stay in their own volume" % (snap.snapshot_id, size // MiB,
                                                          rsize // MiB, vol))
    flatten_mounted(mounts, sums, target)
    # The sources stay while the clones depend on them.
    try:
        e.ctrl.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id),
                                         timeout=e.T)
        fail("DeleteSnapshot of a snapshot a clone reads through succeeded")
    except e.grpc.RpcError as err:
        if err.code() != e.grpc.StatusCode.FAILED_PRECONDITION:
            fail("DeleteSnapshot of a snapshot in use: %s" % err)
    for vid, st, tg in mounts:
        e.unpublish_unstage(node, vid, st, tg)
        e.ctrl_unpublish(vid, node)
    # The flattened clone's image, read without its source: clean, files in.
    img = os.path.join(e.WORK, "clone.img")
    rc, out = zl("volume", "export", mounts[1][0], img, timeout=120)
    if rc != 0:
        fail("zl volume export of the flattened clone: rc %d: %s" % (rc, out))
    check_image(img, sums)
    os.unlink(img)
    for vid, _, _ in mounts:
        e.delete_volume(vid)
    e.twice(e.ctrl.controller.DeleteSnapshot,
            pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id), "DeleteSnapshot")


def flatten_mounted(mounts, sums, target):
    """The controller flattens the staged clone (mounts[1]) while it is
    mounted, at its attachment's epoch; an epoch-0 flatten (zl) of the
    staged restore (mounts[0], flatten=false) is fenced. The source,
    mounted at target, is not: the flatten reads it at epoch 0."""
    import json

    def record(vid):
        return json.loads(etcd_gw.unb64(etcd_gw.get(e.ETCD, "/zipline/volumes/" + vid)["value"]))
    rid, cid, ctg = mounts[0][0], mounts[1][0], mounts[1][2]
    rc, out = zl("volume", "flatten", rid)
    if rc == 0 or "stale slice version or attach epoch" not in out:
        fail("zl volume flatten (epoch 0) of the mounted restore %s was not fenced: rc %d: %s"
             % (rid, rc, out))
    def flatten_lines():
        with open(os.path.join(e.CL_DIR, "ctrl", "log"), errors="replace") as f:
            return [ln for ln in f if "vol=" + cid in ln and "flatten: " in ln]
    t0 = time.monotonic()
    # The record first, then the controller's line that follows it.
    while "parent" in record(cid) or not any("flatten: done" in ln for ln in flatten_lines()):
        if time.monotonic() - t0 > 60:
            fail("the controller did not flatten the mounted clone %s in 60 s: %s"
                 % (cid, flatten_lines()))
        time.sleep(0.2)
    dt = time.monotonic() - t0
    lines = flatten_lines()
    # It may have started before the clone was published (attached=no, at
    # the revision without an attachment): the attach process's epoch then
    # fenced it, and the next pass ran it at that epoch. The flatten that
    # finished ran at the attachment's epoch either way.
    starts = [ln for ln in lines if "flatten: start" in ln]
    if not starts or "attached=yes" not in starts[-1] or \
            not any("flatten: done" in ln for ln in lines):
        fail("controller flatten lines of %s: %s" % (cid, lines))
    fenced = [ln for ln in lines if "flatten: stopped" in ln]
    if any("error=ZL_ERR_STALE" not in ln for ln in fenced):
        fail("the controller's flatten of %s stopped for another reason: %s" % (cid, fenced))
    if "parent" not in record(rid):
        fail("the controller flattened the restore of a flatten=false class")
    # Neither the clone's attach process nor the source's (whose snapshot
    # the flatten read) was fenced: both write on, and the files are in.
    for tg in (ctg, target):
        with open(os.path.join(tg, "after-flatten"), "wb") as f:
            f.write(os.urandom(MiB))
            os.fsync(f.fileno())
        e.check_files(tg, sums)
        os.unlink(os.path.join(tg, "after-flatten"))
    log("flatten: the mounted clone %s lost its parent %.1f s later (the controller, at its "
        "attachment's epoch, after %d start(s) fenced by the attachment), the attach process "
        "writes on; zl's epoch-0 flatten of the mounted restore was fenced"
        % (cid, dt, len(fenced)))


def main():
    e.connect_controller()
    node = e.Node(1, ["--frontend", "fuse"])
    fio = None
    try:
        node.start()
        cap = e.mount_cap("ext4")
        vol = e.create_volume("snap-vol", 256 * MiB, cap).volume_id
        pctx = e.ctrl_publish(vol, node, cap)
        staging, target = e.stage_publish(node, vol, cap, pctx, "snap")
        sums = e.write_files(target, count=3)
        apid = node.attach_pids()[0]

        # 16 MiB of random 4k writes at 800/s: about 5 s of writes.
        fio, fio_out = e.fio_start(target, "snap", 16, 800, 1)
        snapshot(node, vol, "under-fio")
        if fio.poll() is not None:
            fail("fio ended before the snapshot was taken: the snapshot was not under load")
        e.fio_wait(fio, fio_out, "across the snapshot")
        img = os.path.join(e.WORK, "snap.img")
        rc, out = zl("snapshot", "export", "under-fio", img, timeout=120)
        if rc != 0:
            fail("zl snapshot export under-fio: rc %d: %s" % (rc, out))
        check_image(img, sums)
        os.unlink(img)

        # The attach process's resize (what NodeExpandVolume asks on
        # ctl.sock before resize2fs, which needs CAP_SYS_RESOURCE on a
        # mounted ext4) keeps its one volume handle, which still takes them.
        r = e.ctrl.controller.ControllerExpandVolume(
            e.pb.ControllerExpandVolumeRequest(
                volume_id=vol, capacity_range=e.pb.CapacityRange(required_bytes=384 * MiB),
                volume_capability=cap), timeout=e.T)
        if r.capacity_bytes != 384 * MiB:
            fail("ControllerExpand answered %d bytes, asked %d" % (r.capacity_bytes, 384 * MiB))
        reply = ctl(node, vol, "resize")
        if reply != "ok size=%d" % (384 * MiB):
            fail("resize on ctl.sock of the attach process: %r" % reply)
        disk = os.path.join(node.state, vol, "fuse", "disk")
        if os.stat(disk).st_size != 384 * MiB:
            fail("%s is %d bytes after the resize, want %d"
                 % (disk, os.stat(disk).st_size, 384 * MiB))
        if node.attach_pids() != [apid]:
            fail("the resize changed the attach process: %s, was %d" % (node.attach_pids(), apid))
        snapshot(node, vol, "after-resize")

        # kill -9 of the attach process; the volume is staged again.
        os.kill(apid, signal.SIGKILL)
        # Asked while the dead process's snapwriters/ key lives on its
        # lease: nobody answers, the key expires (TTL 10 s) and zl takes it
        # with the transaction itself (nothing of the dead process is in
        # flight any more), not "taken by client".
        t0 = time.monotonic()
        rc, out = zl("snapshot", "create", vol, "dead-window")
        took = time.monotonic() - t0
        if rc != 0 or "taken by client" in out or "created snapshot" not in out or took > 15:
            fail("snapshot asked after the kill -9 of the attach process: rc %d after %.1f s: %s"
                 % (rc, took, out))
        log("snapshot asked after the kill -9: taken by zl itself after %.1f s (the dead "
            "process's key expired)" % took)
        e.unpublish_unstage(node, vol, staging, target)
        staging, target = e.stage_publish(node, vol, cap, pctx, "snap")
        npid = node.attach_pids()[0]
        if npid == apid:
            fail("staged again, but the state dir still names attach process %d" % apid)
        snapshot(node, vol, "after-kill")
        e.check_files(target, sums)
        log("after the kill -9 of attach process %d, attach process %d takes the snapshots"
            % (apid, npid))
        clones(node, vol, cap, sums, target)

        e.unpublish_unstage(node, vol, staging, target)
        e.ctrl_unpublish(vol, node)
        for name in ("under-fio", "after-resize", "dead-window", "after-kill"):
            rc, out = zl("snapshot", "rm", name)
            if rc != 0:
                fail("zl snapshot rm %s: rc %d: %s" % (name, rc, out))
        e.delete_volume(vol)
    finally:
        if fio and fio.poll() is None:
            fio.kill()
            fio.wait(10)
        node.stop()
    log("PASS")


if __name__ == "__main__":
    main()
