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
4. The attach process is killed with SIGKILL, the volume unstaged and
   staged again: a snapshot requested then is taken by the new attach
   process (its log says so), not by the transaction alone.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csi_e2e_test as e  # noqa: E402
from csi_e2e_test import MiB, fail, log  # noqa: E402


def zl(*args, timeout=60):
    p = subprocess.run([os.path.join(e.BIN, "zl"), "--etcd", e.ETCD] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


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

        # 16 MiB of random 4k writes at 800/s: about 5 s of writes, then
        # every block is read back against its CRC.
        fio_out = os.path.join(e.WORK, "fio-snap.txt")
        fio = subprocess.Popen(
            ["fio", "--name=snap", "--directory=" + target, "--rw=randwrite", "--bs=4k",
             "--size=16M", "--ioengine=libaio", "--iodepth=8", "--direct=1",
             "--rate_iops=800", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
             "--output=" + fio_out])
        fio_file = os.path.join(target, "snap.0.0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and fio.poll() is None and not (
                os.path.exists(fio_file) and os.path.getsize(fio_file) >= 16 * MiB):
            time.sleep(0.05)
        time.sleep(1)  # into the random writes
        if fio.poll() is not None:
            fail("fio was not running at the snapshot (rc %s)" % fio.returncode)
        snapshot(node, vol, "under-fio")
        if fio.poll() is not None:
            fail("fio ended before the snapshot was taken: the snapshot was not under load")
        rc = fio.wait(120)
        with open(fio_out) as f:
            out = f.read()
        if rc != 0 or "err= 0" not in out:
            fail("fio across the snapshot: rc %d\n%s" % (rc, out))
        img = os.path.join(e.WORK, "snap.img")
        rc, out = zl("snapshot", "export", "under-fio", img, timeout=120)
        if rc != 0:
            fail("zl snapshot export under-fio: rc %d: %s" % (rc, out))
        check_image(img, sums)
        os.unlink(img)

        # kill -9 of the attach process; the volume is staged again.
        os.kill(apid, signal.SIGKILL)
        e.unpublish_unstage(node, vol, staging, target)
        staging, target = e.stage_publish(node, vol, cap, pctx, "snap")
        npid = node.attach_pids()[0]
        if npid == apid:
            fail("staged again, but the state dir still names attach process %d" % apid)
        snapshot(node, vol, "after-kill")
        e.check_files(target, sums)
        log("after the kill -9 of attach process %d, attach process %d takes the snapshots"
            % (apid, npid))

        e.unpublish_unstage(node, vol, staging, target)
        e.ctrl_unpublish(vol, node)
        for name in ("under-fio", "after-kill"):
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
