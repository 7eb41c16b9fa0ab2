"""CSI end to end: this script plays the kubelet and the external
provisioner/attacher/resizer against zipline-controller and two
zipline-node instances (started here, so that one can be killed with
SIGKILL and restarted). Real mounts, real loop devices; run as root with
/usr/bin/python3 from csi_e2e.sh, which starts etcd, the storage daemons and
the controller and exports:

  ZL_BIN, CL_DIR, CL_ETCD, CSI_WORK, CTRL_EP
"""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from csi_client import CsiClient, rpc_error, wait_for_socket  # noqa: E402

BIN = os.environ["ZL_BIN"]
CL_DIR = os.environ["CL_DIR"]
ETCD = os.environ["CL_ETCD"]
WORK = os.environ["CSI_WORK"]
CTRL_EP = os.environ["CTRL_EP"]
MiB = 1 << 20
T = 120  # RPC timeout (s): mkfs and mounts on 2 cores
START_S = 20  # a zipline-node's socket and first answer (the test VM sets more)

ctrl = None
pb = None
grpc = None


def log(msg):
    print("csi_e2e: " + msg, flush=True)


def fail(msg):
    raise AssertionError(msg)


class Node:
    """One zipline-node process with its own node id and state dir."""

    def __init__(self, idx, extra=()):
        self.idx = idx
        self.extra = list(extra)  # more zipline-node flags
        self.node_id = "csi-node-%d" % idx
        self.dir = os.path.join(WORK, "node%d" % idx)
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.dir, "node.sock")
        self.ep = "unix://" + self.sock
        self.proc = None
        self.client = None
        os.makedirs(self.dir, exist_ok=True)

    def start(self):
        logf = open(os.path.join(self.dir, "node.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "zipline-node"), "--endpoint", self.ep, "--node-id", self.node_id,
             "--etcd", ETCD, "--state-dir", self.state, "--kubelet-dir", WORK,
             "--transport", "tcp", "--log-level", "info", "--io-timeout", "120"] + self.extra,
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        with open(os.path.join(self.dir, "pid"), "w") as f:
            f.write(str(self.proc.pid))
        wait_for_socket(self.sock, START_S)
        if self.client:
            self.client.close()
        self.client = CsiClient(self.ep)
        self.client.wait_ready(START_S)
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.client:
            self.client.close()
            self.client = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    @property
    def n(self):
        return self.client.node

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def attach_pids(self):
        """PIDs of attach processes recorded in the state dir."""
        pids = []
        if not os.path.isdir(self.state):
            return pids
        import json
        for v in os.listdir(self.state):
            f = os.path.join(self.state, v, "state.json")
            if os.path.isfile(f):
                with open(f) as fh:
                    pids.append(json.load(fh)["pid"])
        return pids


# ---- the storage daemons seen from outside (e2e_outsider: hand-made wire
# requests, lib/wire only) ----

OUTSIDER = os.path.join(BIN, "e2e_outsider")


def storage_ids():
    ids = []
    for name in sorted(os.listdir(CL_DIR)):
        if name.startswith("storage-") and os.path.isfile(os.path.join(CL_DIR, name, "port")):
            ids.append(int(name.split("-")[1]))
    return ids


def storage_port(i):
    with open(os.path.join(CL_DIR, "storage-%d" % i, "port")) as f:
        return f.read().strip()


def storage_pid(i):
    with open(os.path.join(CL_DIR, "storage-%d" % i, "pid")) as f:
        return int(f.read().strip())


def outsider(i, *args):
    """e2e_outsider against storage daemon i: {step: status}."""
    p = subprocess.run([OUTSIDER, "127.0.0.1", storage_port(i), "--wait", "5000"] + list(args),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail("e2e_outsider against storage-%d failed (rc %d): %s %s"
             % (i, p.returncode, p.stdout, p.stderr))
    res = {}
    for line in p.stdout.splitlines():
        w = line.split()
        if w:
            res.setdefault(w[0], w[1] if len(w) > 1 else "")
    return res


def hello_status(i, vol, node_id, pctx):
    return outsider(i, "--vol", vol, "--epoch", pctx["epoch"], "--node", node_id,
                    "--token", pctx["token"], "hello").get("hello")


def assert_auth_on(vol, node, pctx, what):
    """The storage daemons this flow uses really check tokens: a request
    without a HELLO, a HELLO with a wrong token, and the right token named
    for another node are refused with ZL_ERR_AUTH by every daemon; the
    attachment's own token is accepted (the positive control)."""
    bad = pctx["token"][:-1] + ("0" if pctx["token"][-1] != "0" else "1")
    ids = storage_ids()
    if len(ids) < 3:
        fail("expected 3 storage daemons, found %s" % ids)
    for i in ids:
        with open("/proc/%d/cmdline" % storage_pid(i), "rb") as f:
            argv = f.read().split(b"\0")
        if b"--auth" in argv and argv[argv.index(b"--auth") + 1] != b"on":
            fail("storage-%d runs with --auth %s" % (i, argv[argv.index(b"--auth") + 1]))
        r = outsider(i, "--vol", vol, "read")
        if r.get("read") != "ZL_ERR_AUTH":
            fail("%s: storage-%d served a read without a HELLO: %s" % (what, i, r))
        r = outsider(i, "--vol", vol, "--epoch", pctx["epoch"], "--node", node.node_id,
                     "--token", bad, "hello", "write")
        if r.get("hello") != "ZL_ERR_AUTH" or r.get("write") not in ("ZL_ERR_AUTH", "CLOSED"):
            fail("%s: storage-%d, HELLO with a wrong token: %s" % (what, i, r))
        r = outsider(i, "--vol", vol, "--epoch", pctx["epoch"], "--node", "csi-node-9",
                     "--token", pctx["token"], "hello")
        if r.get("hello") != "ZL_ERR_AUTH":
            fail("%s: storage-%d, %s's token from another node: %s" % (what, i, node.node_id, r))
        if hello_status(i, vol, node.node_id, pctx) != "OK":
            fail("%s: storage-%d refused the attachment's own token" % (what, i))
    log("  auth on (%s): no HELLO, a wrong token, another node -> ZL_ERR_AUTH on storage %s; "
        "the attach token -> OK" % (what, ids))


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4] == path:
                return True
    return False


def expect_code(code, fn, req, what):
    got, details = rpc_error(fn, req, timeout=T)
    if got != code:
        fail("%s: expected %s, got %s (%s)" % (what, code, got, details))
    if not details:
        fail("%s: %s without a message" % (what, code))
    log("  %-58s -> %s" % (what, code.name))
    return details


def twice(fn, req, what):
    """Calls fn twice; both answers must be equal (idempotency)."""
    a = fn(req, timeout=T)
    b = fn(req, timeout=T)
    if a != b:
        fail("%s: second call answered differently:\n%s\nvs\n%s" % (what, a, b))
    return a


def mount_cap(fs="ext4", mode=1):
    return pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(fs_type=fs),
                               access_mode=pb.VolumeCapability.AccessMode(mode=mode))


def block_cap(mode=1):
    return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(),
                               access_mode=pb.VolumeCapability.AccessMode(mode=mode))


def create_volume(name, size, cap, source=None, params=None):
    req = pb.CreateVolumeRequest(
        name=name, capacity_range=pb.CapacityRange(required_bytes=size),
        volume_capabilities=[cap], parameters=dict({"replicas": "2"}, **(params or {})),
        volume_content_source=source)
    r = twice(ctrl.controller.CreateVolume, req, "CreateVolume " + name)
    v = r.volume
    if v.capacity_bytes < size or not v.volume_id.startswith("vol-"):
        fail("CreateVolume returned %s" % v)
    return v


def ctrl_publish(vol, node, cap):
    req = pb.ControllerPublishVolumeRequest(volume_id=vol, node_id=node.node_id,
                                            volume_capability=cap)
    r = twice(ctrl.controller.ControllerPublishVolume, req, "ControllerPublish")
    for k in ("epoch", "token"):
        if k not in r.publish_context:
            fail("publish_context lacks %s: %s" % (k, dict(r.publish_context)))
    return dict(r.publish_context)


def ctrl_unpublish(vol, node):
    twice(ctrl.controller.ControllerUnpublishVolume,
          pb.ControllerUnpublishVolumeRequest(volume_id=vol, node_id=node.node_id),
          "ControllerUnpublish")


def stage_publish(node, vol, cap, pctx, tag):
    staging = node.path("staging", tag)
    target = node.path("pods", tag, "vol" if cap.HasField("mount") else "dev")
    os.makedirs(staging, exist_ok=True)
    twice(node.n.NodeStageVolume,
          pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=staging,
                                    volume_capability=cap, publish_context=pctx),
          "NodeStage")
    twice(node.n.NodePublishVolume,
          pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging,
                                      target_path=target, volume_capability=cap,
                                      publish_context=pctx),
          "NodePublish")
    if not mounted(target):
        fail("%s is not mounted after NodePublish" % target)
    return staging, target


def unpublish_unstage(node, vol, staging, target):
    twice(node.n.NodeUnpublishVolume,
          pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=target), "NodeUnpublish")
    if os.path.exists(target) or mounted(target):
        fail("NodeUnpublish left %s behind" % target)
    twice(node.n.NodeUnstageVolume,
          pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=staging),
          "NodeUnstage")
    if mounted(staging):
        fail("NodeUnstage left %s mounted" % staging)
    if os.path.exists(os.path.join(node.state, vol)):
        fail("NodeUnstage left state %s" % os.path.join(node.state, vol))
    with open("/proc/self/mountinfo") as f:
        if vol in f.read():
            fail("a mount of %s is left after NodeUnstage" % vol)


def chunk_files(vol):
    n = 0
    for root, _, files in os.walk(CL_DIR):
        if vol in root:
            n += sum(1 for f in files if f.endswith(".zlc"))
    return n


def stats(node, vol, path):
    return twice(node.n.NodeGetVolumeStats,
                 pb.NodeGetVolumeStatsRequest(volume_id=vol, volume_path=path),
                 "NodeGetVolumeStats")


def usage(resp, unit):
    for u in resp.usage:
        if u.unit == unit:
            return u
    fail("no usage with unit %s in %s" % (unit, resp))


def fs_bytes(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def ctrl_expand(vol, size, cap):
    r = twice(ctrl.controller.ControllerExpandVolume,
              pb.ControllerExpandVolumeRequest(volume_id=vol,
                                               capacity_range=pb.CapacityRange(required_bytes=size),
                                               volume_capability=cap),
              "ControllerExpand")
    if r.capacity_bytes < size:
        fail("ControllerExpand gave %d < %d" % (r.capacity_bytes, size))
    return r


def expand(node, vol, path, size, block):
    cap = block_cap() if block else mount_cap()
    r = ctrl_expand(vol, size, cap)
    if r.node_expansion_required == block:
        fail("node_expansion_required=%s for a %s volume" % (r.node_expansion_required,
                                                              "block" if block else "mount"))
    r = twice(node.n.NodeExpandVolume,
              pb.NodeExpandVolumeRequest(volume_id=vol, volume_path=path,
                                         capacity_range=pb.CapacityRange(required_bytes=size),
                                         volume_capability=cap),
              "NodeExpand")
    if r.capacity_bytes < size:
        fail("NodeExpand answered %d < %d" % (r.capacity_bytes, size))


def delete_volume(vol):
    twice(ctrl.controller.DeleteVolume, pb.DeleteVolumeRequest(volume_id=vol), "DeleteVolume")
    left = chunk_files(vol)
    if left:
        fail("%d chunk files of %s left after DeleteVolume" % (left, vol))


def write_files(root, count=8, size=3 * MiB):
    sums = {}
    for i in range(count):
        data = os.urandom(size - i * 4099)
        p = os.path.join(root, "dir%d" % (i % 3), "file%d.bin" % i)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        sums[os.path.relpath(p, root)] = hashlib.sha256(data).hexdigest()
    return sums


def check_files(root, sums):
    for rel, want in sums.items():
        with open(os.path.join(root, rel), "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        if got != want:
            fail("%s changed: sha256 %s, wrote %s" % (rel, got, want))


def fio_start(target, name, size_mib, rate_iops, settle, layout_s=60):
    """fio at a bounded rate on the mounted volume: random 4k writes of
    size_mib MiB, then every block read back against its CRC
    (verify=crc32c). Returns (process, output file) once the file is laid
    out (layout_s at most) and settle more seconds of random writes ran;
    fails if fio ended."""
    out = os.path.join(WORK, "fio-%s.txt" % name)
    p = subprocess.Popen(
        ["fio", "--name=" + name, "--directory=" + target, "--rw=randwrite", "--bs=4k",
         "--size=%dM" % size_mib, "--ioengine=libaio", "--iodepth=8", "--direct=1",
         "--rate_iops=%d" % rate_iops, "--verify=crc32c", "--do_verify=1",
         "--verify_fatal=1", "--output=" + out])
    f = os.path.join(target, name + ".0.0")
    deadline = time.monotonic() + layout_s
    while time.monotonic() < deadline and p.poll() is None and not (
            os.path.exists(f) and os.path.getsize(f) >= size_mib * MiB):
        time.sleep(0.05)
    time.sleep(settle)  # into the random writes
    if p.poll() is not None:
        fail("fio %s was not running after its layout (rc %s)" % (name, p.returncode))
    return p, out


def fio_wait(p, out, what, end_s=300):
    """fio must end within end_s seconds without an error."""
    rc = p.wait(end_s)
    with open(out) as f:
        text = f.read()
    if rc != 0 or "err= 0" not in text:
        fail("fio %s: rc %d\n%s" % (what, rc, text))


def node_negatives(node, vol, pctx):
    """Every error the spec lists for the node RPCs, on a volume that exists
    and one that does not."""
    C = grpc.StatusCode
    cap = mount_cap()
    st = node.path("staging", "neg")
    tgt = node.path("pods", "neg", "vol")
    ghost = "vol-00000000000000ff"
    expect_code(C.INVALID_ARGUMENT, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(staging_target_path=st, volume_capability=cap),
                "NodeStage without volume_id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=vol, volume_capability=cap),
                "NodeStage without staging_target_path")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=st),
                "NodeStage without volume_capability")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=st,
                                          volume_capability=mount_cap(fs="vfat")),
                "NodeStage with fs_type vfat")
    expect_code(C.NOT_FOUND, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=ghost, staging_target_path=st,
                                          volume_capability=cap),
                "NodeStage of an unknown volume")
    # The StorageClass's frontend (volume context) goes over the node's: a
    # kernel without its module refuses it by name (this machine's kernel
    # has neither ublk_drv nor nbd); one with it gets as far as the missing
    # attach token (pctx is empty). Nothing is left staged either way.
    for fe, mod in (("ublk", "ublk_drv"), ("nbd", "nbd")):
        has = os.path.exists("/sys/module/" + mod) or subprocess.run(
            ["modprobe", "-n", "-q", mod]).returncode == 0
        why = expect_code(C.FAILED_PRECONDITION, node.n.NodeStageVolume,
                          pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=st,
                                                    volume_capability=cap,
                                                    publish_context=pctx,
                                                    volume_context={"frontend": fe}),
                          "NodeStage with frontend %s (%s %s)"
                          % (fe, mod, "available" if has else "missing"))
        if has and "no attach token" not in why:
            fail("frontend %s with %s available: %s" % (fe, mod, why))
        if not has and ("lacks the %s module" % mod not in why or "%s frontend" % fe not in why):
            fail("the refusal of frontend %s does not name the %s module: %s" % (fe, mod, why))
        if os.path.exists(os.path.join(node.state, vol)) or mounted(st):
            fail("the refused frontend %s left state or a mount behind" % fe)
    expect_code(C.INVALID_ARGUMENT, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=st,
                                          volume_capability=cap, publish_context=pctx,
                                          volume_context={"frontend": "spdk"}),
                "NodeStage with frontend spdk")
    expect_code(C.INVALID_ARGUMENT, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(staging_target_path=st, target_path=tgt,
                                            volume_capability=cap),
                "NodePublish without volume_id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=st,
                                            volume_capability=cap),
                "NodePublish without target_path")
    expect_code(C.INVALID_ARGUMENT, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=st,
                                            target_path=tgt),
                "NodePublish without volume_capability")
    expect_code(C.FAILED_PRECONDITION, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=st,
                                            target_path=tgt, volume_capability=cap),
                "NodePublish of a volume not staged here")
    expect_code(C.NOT_FOUND, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(volume_id=ghost, staging_target_path=st,
                                            target_path=tgt, volume_capability=cap),
                "NodePublish of an unknown volume")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeUnpublishVolume,
                pb.NodeUnpublishVolumeRequest(target_path=tgt), "NodeUnpublish without volume_id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeUnpublishVolume,
                pb.NodeUnpublishVolumeRequest(volume_id=vol), "NodeUnpublish without target_path")
    expect_code(C.NOT_FOUND, node.n.NodeUnpublishVolume,
                pb.NodeUnpublishVolumeRequest(volume_id=ghost, target_path=tgt),
                "NodeUnpublish of an unknown volume")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeUnstageVolume,
                pb.NodeUnstageVolumeRequest(staging_target_path=st),
                "NodeUnstage without volume_id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeUnstageVolume,
                pb.NodeUnstageVolumeRequest(volume_id=vol), "NodeUnstage without staging path")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeGetVolumeStats,
                pb.NodeGetVolumeStatsRequest(volume_path=tgt), "NodeGetVolumeStats without id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeGetVolumeStats,
                pb.NodeGetVolumeStatsRequest(volume_id=vol), "NodeGetVolumeStats without path")
    expect_code(C.NOT_FOUND, node.n.NodeGetVolumeStats,
                pb.NodeGetVolumeStatsRequest(volume_id=ghost, volume_path=tgt),
                "NodeGetVolumeStats of an unknown volume")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeExpandVolume,
                pb.NodeExpandVolumeRequest(volume_path=tgt), "NodeExpand without volume_id")
    expect_code(C.INVALID_ARGUMENT, node.n.NodeExpandVolume,
                pb.NodeExpandVolumeRequest(volume_id=vol), "NodeExpand without volume_path")
    expect_code(C.NOT_FOUND, node.n.NodeExpandVolume,
                pb.NodeExpandVolumeRequest(volume_id=vol, volume_path=tgt),
                "NodeExpand of a volume not staged here")
    # Unstage/unpublish of an existing volume that is not staged: OK.
    twice(node.n.NodeUnstageVolume,
          pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=st),
          "NodeUnstage when not staged")
    twice(node.n.NodeUnpublishVolume,
          pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=tgt),
          "NodeUnpublish when not published")


def staged_negatives(node, vol, staging, target, cap):
    C = grpc.StatusCode
    expect_code(C.ALREADY_EXISTS, node.n.NodePublishVolume,
                pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging,
                                            target_path=target, volume_capability=cap,
                                            readonly=True),
                "NodePublish on the same target read-only")
    expect_code(C.ALREADY_EXISTS, node.n.NodeStageVolume,
                pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=staging,
                                          volume_capability=mount_cap(fs="xfs")),
                "NodeStage again with another fs_type")
    expect_code(C.NOT_FOUND, node.n.NodeGetVolumeStats,
                pb.NodeGetVolumeStatsRequest(volume_id=vol, volume_path=node.path("nowhere")),
                "NodeGetVolumeStats of an unknown path")
    expect_code(C.FAILED_PRECONDITION, node.n.NodeUnstageVolume,
                pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=staging),
                "NodeUnstage while still published")
    # A staging mount lost behind the plugin's back comes back on NodeStage.
    subprocess.run(["umount", "-l", target], check=True)
    subprocess.run(["umount", staging], check=True)
    twice(node.n.NodeStageVolume,
          pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=staging,
                                    volume_capability=cap),
          "NodeStage after the staging mount was lost")
    if not mounted(staging):
        fail("NodeStage did not restore the lost staging mount %s" % staging)
    twice(node.n.NodePublishVolume,
          pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging,
                                      target_path=target, volume_capability=cap),
          "NodePublish after the target mount was lost")
    if not mounted(target):
        fail("NodePublish did not restore the lost target mount %s" % target)
    # A publish interrupted after its mount (the service crashed before it
    # recorded it): the retry takes the mount over instead of refusing it.
    t2 = node.path("pods", "half", "vol")
    os.makedirs(t2)
    subprocess.run(["mount", "--bind", staging, t2], check=True)
    twice(node.n.NodePublishVolume,
          pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging,
                                      target_path=t2, volume_capability=cap),
          "NodePublish over a leftover mount of the same volume")
    twice(node.n.NodeUnpublishVolume,
          pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=t2),
          "NodeUnpublish of it")
    if mounted(t2) or os.path.exists(t2):
        fail("leftover target %s not cleaned" % t2)
    # Something foreign mounted on a target is refused.
    os.makedirs(t2)
    subprocess.run(["mount", "-t", "tmpfs", "none", t2], check=True)
    try:
        expect_code(C.ALREADY_EXISTS, node.n.NodePublishVolume,
                    pb.NodePublishVolumeRequest(volume_id=vol, staging_target_path=staging,
                                                target_path=t2, volume_capability=cap),
                    "NodePublish onto a foreign mount")
    finally:
        subprocess.run(["umount", t2], check=True)
        os.rmdir(t2)


def concurrent_ops(node, vol, pctx):
    """Parallel operations on one volume: each is OK or ABORTED, never
    anything else, and the end state is consistent."""
    C = grpc.StatusCode
    staging = node.path("staging", "conc")
    cap = mount_cap()
    results = []

    def one():
        try:
            node.n.NodeStageVolume(pb.NodeStageVolumeRequest(
                volume_id=vol, staging_target_path=staging, volume_capability=cap,
                publish_context=pctx), timeout=T)
            results.append(C.OK)
        except grpc.RpcError as e:
            results.append(e.code())

    th = [threading.Thread(target=one) for _ in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if C.OK not in results or any(r not in (C.OK, C.ABORTED) for r in results):
        fail("4 concurrent NodeStage calls answered %s" % results)
    log("  4 concurrent NodeStage                                    -> %s"
        % sorted(r.name for r in results))
    if not mounted(staging):
        fail("concurrent NodeStage left %s unmounted" % staging)
    twice(node.n.NodeUnstageVolume,
          pb.NodeUnstageVolumeRequest(volume_id=vol, staging_target_path=staging),
          "NodeUnstage after concurrent stage")


def plugin_caps(c):
    """GetPluginCapabilities as a set of (kind, type)."""
    r = twice(c.identity.GetPluginCapabilities, pb.GetPluginCapabilitiesRequest(),
              "GetPluginCapabilities")
    out = set()
    for cap in r.capabilities:
        kind = cap.WhichOneof("type")
        out.add((kind, getattr(cap, kind).type))
    return out


def test_identity(nodes):
    S = pb.PluginCapability.Service
    E = pb.PluginCapability.VolumeExpansion
    # The CSI spec: GetPluginCapabilities describes the plugin as a whole,
    # so every endpoint answers alike (csi-sanity decides from the node's
    # answer whether to call ControllerPublish).
    want = {("service", S.CONTROLLER_SERVICE), ("service", S.VOLUME_ACCESSIBILITY_CONSTRAINTS),
            ("volume_expansion", E.ONLINE)}
    for c, name in [(ctrl, "controller")] + [(n.client, n.node_id) for n in nodes]:
        info = twice(c.identity.GetPluginInfo, pb.GetPluginInfoRequest(), "GetPluginInfo")
        if info.name != "zipline.csi.io" or not info.vendor_version:
            fail("%s GetPluginInfo: %s" % (name, info))
        got = plugin_caps(c)
        if got != want:
            fail("%s GetPluginCapabilities: %s, want %s" % (name, sorted(got), sorted(want)))
    for n in nodes:
        r = twice(n.n.NodeGetInfo, pb.NodeGetInfoRequest(), "NodeGetInfo")
        if r.node_id != n.node_id or \
                r.accessible_topology.segments.get("topology.zipline.io/node") != n.node_id:
            fail("NodeGetInfo: %s" % r)
        caps = twice(n.n.NodeGetCapabilities, pb.NodeGetCapabilitiesRequest(),
                     "NodeGetCapabilities")
        have = {c.rpc.type for c in caps.capabilities}
        R = pb.NodeServiceCapability.RPC
        want = {R.STAGE_UNSTAGE_VOLUME, R.GET_VOLUME_STATS, R.EXPAND_VOLUME, R.VOLUME_CONDITION}
        if have != want:
            fail("NodeGetCapabilities: %s" % caps)
    deadline = time.monotonic() + 60
    while True:
        r = ctrl.identity.Probe(pb.ProbeRequest(), timeout=10)
        if r.ready.value:
            break
        if time.monotonic() > deadline:
            fail("controller never became ready")
        time.sleep(0.5)
    log("identity, node info and capabilities: ok")


def test_registration(nodes):
    """ControllerPublishVolume accepts the node ids the zipline-node services
    registered at start (the ids NodeGetInfo reports) and answers NOT_FOUND
    for an id no zipline-node registered."""
    vol = create_volume("pvc-registration", 16 * MiB, mount_cap()).volume_id
    details = expect_code(grpc.StatusCode.NOT_FOUND, ctrl.controller.ControllerPublishVolume,
                          pb.ControllerPublishVolumeRequest(volume_id=vol, node_id="csi-node-9",
                                                            volume_capability=mount_cap()),
                          "ControllerPublish to an unregistered node")
    if "csi-node-9" not in details:
        fail("NOT_FOUND message does not name the node: %s" % details)
    for n in nodes:
        info = n.n.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=T)
        ctrl_publish(vol, n, mount_cap())
        ctrl_unpublish(vol, n)
        log("  ControllerPublish to NodeGetInfo's id %-19s -> OK" % info.node_id)
    ctrl.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol), timeout=T)


def can_resize_ext4_online():
    """resize2fs on a mounted ext4 needs CAP_SYS_RESOURCE (a privileged CSI
    pod has it; some CI sandboxes drop it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 24))
    return False


def test_filesystem(n1, n2, fs, size, grow_to, kill9):
    C = grpc.StatusCode
    cap = mount_cap(fs=fs)
    name = "pvc-e2e-" + fs
    v = create_volume(name, size, cap)
    vol = v.volume_id
    log("%s volume %s (%d bytes)" % (fs, vol, v.capacity_bytes))
    expect_code(C.ALREADY_EXISTS, ctrl.controller.CreateVolume,
                pb.CreateVolumeRequest(name=name,
                                       capacity_range=pb.CapacityRange(required_bytes=2 * size),
                                       volume_capabilities=[cap]),
                "CreateVolume same name, other size")
    if kill9:
        node_negatives(n1, vol, {})

    pctx = ctrl_publish(vol, n1, cap)
    expect_code(C.FAILED_PRECONDITION, ctrl.controller.ControllerPublishVolume,
                pb.ControllerPublishVolumeRequest(volume_id=vol, node_id=n2.node_id,
                                                  volume_capability=cap),
                "ControllerPublish RWO volume to a second node")
    staging, target = stage_publish(n1, vol, cap, pctx, fs)
    # The daemons behind this mount check tokens (tokens on, mount mode).
    assert_auth_on(vol, n1, pctx, "%s mount on %s" % (fs, n1.node_id))
    if kill9:
        staged_negatives(n1, vol, staging, target, cap)
    sums = write_files(target)
    s = stats(n1, vol, target)
    b = usage(s, pb.VolumeUsage.BYTES)
    i = usage(s, pb.VolumeUsage.INODES)
    if b.total < size * 3 // 4 or b.used < 20 * MiB or i.total <= 0 or \
            s.volume_condition.abnormal:
        fail("NodeGetVolumeStats after writing 24 MiB: %s" % s)
    log("wrote %d files through %s on %s; stats ok" % (len(sums), target, n1.node_id))
    fs_small = fs_bytes(target)
    unpublish_unstage(n1, vol, staging, target)
    ctrl_unpublish(vol, n1)

    # Grown while unstaged (as a clone larger than its source is made): the
    # next stage makes the file system fill the volume (ext4 offline, before
    # the mount, so without CAP_SYS_RESOURCE; xfs once mounted).
    cur = size + 64 * MiB
    ctrl_expand(vol, cur, cap)
    if kill9:
        concurrent_ops(n2, vol, ctrl_publish(vol, n2, cap))
    pctx = ctrl_publish(vol, n2, cap)
    staging, target = stage_publish(n2, vol, cap, pctx, fs)
    check_files(target, sums)
    fs_staged = fs_bytes(target)
    if fs_staged < fs_small + 48 * MiB:
        fail("%s of %d MiB on a volume grown to %d MiB while unstaged was staged at %d MiB"
             % (fs, fs_small // MiB, cur // MiB, fs_staged // MiB))
    log("files intact on %s; %s grown on stage %d -> %d MiB"
        % (n2.node_id, fs, fs_small // MiB, fs_staged // MiB))

    if grow_to:
        before = os.statvfs(target)
        expand(n2, vol, target, grow_to, block=False)
        after = os.statvfs(target)
        if after.f_blocks * after.f_frsize < before.f_blocks * before.f_frsize + \
                (grow_to - cur) * 3 // 4:
            fail("filesystem did not grow: %d -> %d bytes"
                 % (before.f_blocks * before.f_frsize, after.f_blocks * after.f_frsize))
        s = stats(n2, vol, target)
        if usage(s, pb.VolumeUsage.BYTES).total < grow_to * 3 // 4:
            fail("NodeGetVolumeStats after expansion: %s" % s)
        check_files(target, sums)
        log("online expansion of %s %d -> %d MiB: filesystem %d -> %d MiB"
            % (fs, cur // MiB, grow_to // MiB, before.f_blocks * before.f_frsize // MiB,
               after.f_blocks * after.f_frsize // MiB))
    else:
        log("no CAP_SYS_RESOURCE here: online resize2fs is not possible, %s expansion "
            "is covered by the xfs run" % fs)

    if kill9:
        test_kill9(n2, vol, staging, target, sums)

    unpublish_unstage(n2, vol, staging, target)
    ctrl_unpublish(vol, n2)
    delete_volume(vol)
    log("%s volume deleted, no chunk left" % fs)


def test_kill9(node, vol, staging, target, sums):
    """SIGKILL the node service under write load: the writes go on; the
    restarted service adopts the attachment."""
    src = os.path.join(WORK, "load.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(64 * MiB))
    dst = os.path.join(target, "load.bin")
    # dd reads the data from a pipe that a feeder thread fills: half before
    # the kill, the rest only after it, so the load is running at the kill
    # however fast the machine is.
    dd = subprocess.Popen(["dd", "of=" + dst, "bs=256k", "iflag=fullblock", "oflag=direct",
                           "conv=fsync", "status=none"],
                          stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    killed = threading.Event()
    half = threading.Event()

    def feed():
        try:
            with open(src, "rb") as f:
                data = f.read()
            dd.stdin.write(data[:len(data) // 2])
            dd.stdin.flush()
            half.set()
            killed.wait(120)
            dd.stdin.write(data[len(data) // 2:])
        finally:
            half.set()
            dd.stdin.close()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    half.wait(120)
    time.sleep(0.2)
    pids = node.attach_pids()
    if dd.poll() is not None or len(pids) != 1:
        killed.set()
        fail("the write load was not running at the kill (dd rc %s, attach pids %s)"
             % (dd.returncode, pids))
    for p in pids:
        with open("/proc/%d/cmdline" % p, "rb") as f:
            argv = f.read().split(b"\0")
        if b"--io-timeout" not in argv or argv[argv.index(b"--io-timeout") + 1] != b"120":
            killed.set()
            fail("attach process %d did not get zipline-node's --io-timeout 120: %s" % (p, argv))
    node.kill9()
    log("zipline-node %s killed with SIGKILL during writes (attach pids %s)"
        % (node.node_id, pids))
    time.sleep(1.0)
    for p in pids:
        os.kill(p, 0)  # raises if the attach process died with the service
    killed.set()
    rc = dd.wait(300)
    feeder.join(60)
    if rc != 0:
        fail("dd into the mount failed after the kill: %s" % dd.stderr.read().decode())
    with open(src, "rb") as a, open(dst, "rb") as b:
        if hashlib.sha256(a.read()).digest() != hashlib.sha256(b.read()).digest():
            fail("data written during the kill differs")
    node.start()
    s = stats(node, vol, target)
    if s.volume_condition.abnormal:
        fail("condition abnormal after adoption: %s" % s.volume_condition)
    if node.attach_pids() != pids:
        fail("restarted node did not adopt attach process %s: %s" % (pids, node.attach_pids()))
    check_files(target, sums)
    os.unlink(dst)
    log("writes went on through the kill; restarted service adopted pid %s" % pids)

    # SIGTERM stops only the CSI service: the mount keeps working.
    node.stop()
    more = write_files(os.path.join(target, "after-sigterm"), count=2)
    sums.update({os.path.join("after-sigterm", k): v for k, v in more.items()})
    node.start()
    if node.attach_pids() != pids:
        fail("attach process changed across a SIGTERM of the service: %s -> %s"
             % (pids, node.attach_pids()))
    check_files(target, sums)
    log("SIGTERM of the service left the volume served")


def test_block(n1, n2):
    cap = block_cap()
    v = create_volume("pvc-e2e-blk", 64 * MiB, cap)
    vol = v.volume_id
    log("block volume %s" % vol)
    pctx = ctrl_publish(vol, n1, cap)
    staging, target = stage_publish(n1, vol, cap, pctx, "blk")
    # The daemons behind this device check tokens (tokens on, block mode).
    assert_auth_on(vol, n1, pctx, "block device on " + n1.node_id)
    data = os.urandom(3 * MiB + 4096)
    off = 5 * MiB + 8192
    fd = os.open(target, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
        os.fsync(fd)
    finally:
        os.close(fd)
    s = stats(n1, vol, target)
    if usage(s, pb.VolumeUsage.BYTES).total != 64 * MiB:
        fail("block NodeGetVolumeStats: %s" % s)
    unpublish_unstage(n1, vol, staging, target)
    ctrl_unpublish(vol, n1)

    pctx = ctrl_publish(vol, n2, cap)
    staging, target = stage_publish(n2, vol, cap, pctx, "blk")
    fd = os.open(target, os.O_RDONLY)
    try:
        got = os.pread(fd, len(data), off)
    finally:
        os.close(fd)
    if got != data:
        fail("raw bytes read back on %s differ" % n2.node_id)
    log("raw bytes written on %s read back on %s" % (n1.node_id, n2.node_id))
    expand(n2, vol, target, 128 * MiB, block=True)
    s = stats(n2, vol, target)
    if usage(s, pb.VolumeUsage.BYTES).total != 128 * MiB:
        fail("block device after expansion: %s" % s)
    fd = os.open(target, os.O_RDONLY)
    try:
        if os.lseek(fd, 0, os.SEEK_END) != 128 * MiB:
            fail("device node does not show 128 MiB after expansion")
    finally:
        os.close(fd)
    # The attach process dies: the condition says so, and unpublish/unstage
    # still clean everything up.
    pids = n2.attach_pids()
    os.kill(pids[0], signal.SIGKILL)
    time.sleep(0.5)
    s = stats(n2, vol, target)
    if not s.volume_condition.abnormal or str(pids[0]) not in s.volume_condition.message:
        fail("condition after the attach process died: %s" % s.volume_condition)
    log("dead attach process reported: %s" % s.volume_condition.message)
    unpublish_unstage(n2, vol, staging, target)
    ctrl_unpublish(vol, n2)
    delete_volume(vol)
    log("block volume: expand, dead attachment cleanup, delete ok")


def test_concurrent_create():
    cap = mount_cap()
    out = []

    def one():
        try:
            r = ctrl.controller.CreateVolume(pb.CreateVolumeRequest(
                name="pvc-e2e-race", capacity_range=pb.CapacityRange(required_bytes=64 * MiB),
                volume_capabilities=[cap]), timeout=T)
            out.append(r.volume.volume_id)
        except grpc.RpcError as e:
            out.append(e.code())
    th = [threading.Thread(target=one) for _ in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    ids = {x for x in out if isinstance(x, str)}
    if len(ids) != 1 or any(not isinstance(x, str) and x != grpc.StatusCode.ABORTED for x in out):
        fail("two concurrent CreateVolume calls with one name answered %s" % out)
    vols = ctrl.controller.ListVolumes(pb.ListVolumesRequest(), timeout=T)
    if sum(1 for e in vols.entries if e.volume.volume_id in ids) != 1:
        fail("ListVolumes after the race: %s" % vols)
    delete_volume(ids.pop())
    log("two concurrent CreateVolume calls -> one volume (%s)" % out)


def connect_controller():
    """Sets ctrl, pb and grpc (the controller started by csi_e2e.sh); the
    other test scripts call it before using this module's helpers."""
    global ctrl, pb, grpc
    import grpc as g
    grpc = g
    ctrl = CsiClient(CTRL_EP)
    ctrl.wait_ready(30)
    pb = ctrl.pb


def main():
    connect_controller()
    n1, n2 = Node(1).start(), Node(2).start()
    try:
        test_identity([n1, n2])
        test_registration([n1, n2])
        test_filesystem(n1, n2, "ext4", 256 * MiB,
                        512 * MiB if can_resize_ext4_online() else 0, kill9=True)
        test_filesystem(n1, n2, "xfs", 320 * MiB, 640 * MiB, kill9=False)
        test_block(n1, n2)
        test_concurrent_create()
    finally:
        n1.stop()
        n2.stop()
    log("PASS")


if __name__ == "__main__":
    main()
