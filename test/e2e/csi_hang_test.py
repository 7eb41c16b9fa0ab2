"""No volume can hang a node (issue 20): a NodeStage that cannot succeed
fails fast with a clear message while another volume stages on the same
node at the same moment; SIGTERM ends an attach process whose I/O is stuck.

Run by csi_e2e.sh (etcd, three zipline-storage daemons with --auth on, the
controller). This script plays the kubelet and the external attacher, starts
one zipline-node (attach processes bounded by --attach-timeout ATTACH_S), and
a fourth storage daemon of its own under another etcd prefix ("the hang
cluster", --auth off) whose volumes it can make unreachable with SIGSTOP.

Oracles independent of the code under test: a sampler
(test/lib/dstate_sampler.py, its own process) reads /proc every 100 ms and fails when a process of the test stays in state D for more than
1 s without progress (its /proc/PID/io counters and wchan unchanged: stuck,
not merely waiting on a slow disk); the gRPC status codes and the time each call took; dd's own exit status
and error; /sys/block/loop*/loop/backing_file for the loop devices; /proc
for the attach processes left at the end.

`csi_hang_test.py --frontend ublk|nbd` runs the checks that depend on the
frontend (a volume whose storage is stopped or killed, another volume
staged meanwhile, nothing in state D; SIGTERM with I/O stuck) with
zipline-node --frontend FRONTEND: test/vm/csi_frontend_guest.py runs it in
the test VM (frontends_vm, parts ublk and nbd), against the guest's etcd, storage
daemons (--auth off: the token checks stay on the host) and controller,
exported as csi_e2e.sh does (ZL_BIN, CL_DIR: a directory on a disk for the
hang cluster's data, CL_ETCD, CSI_WORK, CTRL_EP, ZL_SOURCE_DIR).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csi_e2e_test as e  # noqa: E402
from csi_e2e_test import MiB, fail, log  # noqa: E402
import frontend_dev  # noqa: E402 - test/lib, on the path csi_e2e_test set

ATTACH_S = 6          # zipline-node --attach-timeout of this test
FAIL_BOUND_S = ATTACH_S + 12   # a doomed NodeStage answers within this
STOP_BOUND_S = 10 + 8          # attach_main.c ATTACH_STOP_MS, plus the detach and slack
HANG_PREFIX = "/zl-hang/"
NODE_PIDS = set()  # the zipline-node processes of the test
FRONTEND = "fuse"  # zipline-node --frontend of the test (--frontend ublk|nbd)
REGISTER_S = 30    # the hang cluster's daemon registers within this (more in the VM)
D_BOUND_S = 1.0    # longest state D without progress (more in the VM)
MAX_GAP_S = 0.75   # the sampler's largest gap between samples (more in the VM)


def write_path_flags():
    """zipline-storage --write-path $ZL_TEST_WRITE_PATH when that is set (as
    cl_write_path_flags in test/lib/cluster.sh), else nothing."""
    wp = os.environ.get("ZL_TEST_WRITE_PATH", "")
    return ["--write-path", wp] if wp else []


# ---- the sampler: no process of ours in state D for more than D_BOUND_S ----

class DSampler:
    """test/lib/dstate_sampler.py in its own process, for one phase."""

    def __init__(self):
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(os.environ["ZL_SOURCE_DIR"], "test", "lib", "dstate_sampler.py"), e.WORK,
             e.BIN], stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            fail("the D-state sampler did not start")

    def finish(self, what):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        r = json.loads(out.strip().splitlines()[-1])
        # The check of the check: a sampler that falls behind could miss a
        # stuck process. With samples at most 0.75 s apart, a process stuck
        # for 1.75 s shows as D over more than 1 s of samples; on an idle
        # 2-core machine the gaps are 0.1-0.2 s (0.5 s with load 17).
        if r["samples"] < 3 or r["max_gap"] > MAX_GAP_S:
            fail("%s: the D-state sampler took %d samples, %.2f s apart at most"
                 % (what, r["samples"], r["max_gap"]))
        if r["worst"] > D_BOUND_S:
            fail("%s: process %s was in state D without progress for %.1f s"
                 % (what, r["worst_what"], r["worst"]))
        log("  D-state sampler: %d samples (gap <= %.2f s), longest D without progress %.2f s"
            % (r["samples"], r["max_gap"], r["worst"]))


# ---- helpers ----

def loops_on(path):
    """Loop devices whose backing file is path (sysfs, not losetup)."""
    out = []
    for d in os.listdir("/sys/block"):
        if not d.startswith("loop"):
            continue
        try:
            with open("/sys/block/%s/loop/backing_file" % d) as f:
                if f.read().strip() == path:
                    out.append("/dev/" + d)
        except OSError:
            pass
    return out


def attach_procs(zombies=False):
    """PIDs of attach processes of this test (any node state); zombies (ended,
    not reaped by their zipline-node) too when asked."""
    return frontend_dev.attach_pids(e.WORK, NODE_PIDS if zombies else ())


def backing(node, vid):
    """(what, gone): the device(s) backing the staged volume vid (the loop
    devices on its FUSE file, or its nbd/ublk device), and a function true
    once they are gone (nbd: disconnected)."""
    with open(os.path.join(node.state, vid, "state.json")) as f:
        st = json.load(f)
    if st["frontend"] != FRONTEND:
        fail("%s was staged with frontend %s, not %s" % (vid, st["frontend"], FRONTEND))
    if FRONTEND != "fuse":
        dev = st["loop_device"]
        if frontend_dev.leftovers(dev) == []:
            fail("%s: no %s device %s after NodeStage" % (vid, FRONTEND, dev))
        return dev, lambda: not frontend_dev.leftovers(dev)
    disk = os.path.join(node.state, vid, "fuse", "disk")
    loop = loops_on(disk)
    if not loop:
        fail("no loop device backs %s after NodeStage" % disk)
    return loop, lambda: not loops_on(disk)


def stage_call(node, vol, cap, pctx, tag):
    """NodeStage; returns (code or None, details, seconds)."""
    staging = node.path("staging", tag)
    os.makedirs(staging, exist_ok=True)
    req = e.pb.NodeStageVolumeRequest(volume_id=vol, staging_target_path=staging,
                                      volume_capability=cap, publish_context=pctx)
    t0 = time.monotonic()
    code, details = e.rpc_error(node.n.NodeStageVolume, req, timeout=e.T)
    return code, details, time.monotonic() - t0, staging


def good_volume_io(node, vol, pctx, tag, out):
    """Stages, publishes, writes and reads back a file; out[tag] = None or
    the failure."""
    try:
        t0 = time.monotonic()
        staging, target = e.stage_publish(node, vol, e.mount_cap(), pctx, tag)
        backing(node, vol)
        sums = e.write_files(target, count=2, size=1 * MiB)
        e.check_files(target, sums)
        e.unpublish_unstage(node, vol, staging, target)
        out[tag] = None
        out[tag + "_s"] = time.monotonic() - t0
    except Exception as ex:  # noqa: BLE001 - reported by the main thread
        out[tag] = "%s: %s" % (type(ex).__name__, ex)


def doomed_with_good(node, what, doomed, want_codes, want_text, bound_s):
    """Runs doomed() (a NodeStage that must fail) while a good volume stages,
    mounts and does I/O on the same node at the same moment, under the
    D-state sampler."""
    cap = e.mount_cap()
    name = "hang-good-" + "".join(ch if ch.isalnum() else "-" for ch in what)
    good = e.create_volume(name, 64 * MiB, cap).volume_id
    pctx = e.ctrl_publish(good, node, cap)
    sampler = DSampler()
    sampler.start()
    out = {}
    t = threading.Thread(target=good_volume_io, args=(node, good, pctx, "good", out))
    t.start()
    code, details, took, staging = doomed()
    t.join(e.T * 3)
    sampler.finish(what)
    if t.is_alive():
        fail("%s: the other volume's stage and I/O did not finish" % what)
    if out.get("good"):
        fail("%s: the other volume failed while this one was staged: %s" % (what, out["good"]))
    if code is None:
        fail("%s: NodeStage succeeded" % what)
    if code not in want_codes:
        fail("%s: NodeStage answered %s (%s), want one of %s" % (what, code, details,
                                                                  [c.name for c in want_codes]))
    if not any(w in details for w in want_text):
        fail("%s: NodeStage's message does not say why (want one of %s): %s"
             % (what, want_text, details))
    if took > bound_s:
        fail("%s: NodeStage took %.1f s, bound %d s" % (what, took, bound_s))
    if os.path.ismount(staging) or os.path.exists(os.path.join(node.state, "x")):
        fail("%s: the failed stage left a mount" % what)
    log("  %-28s -> %s in %.1f s (%s); the other volume staged and did I/O in %.1f s"
        % (what, code.name, took, details[:150], out["good_s"]))
    e.ctrl_unpublish(good, node)
    e.delete_volume(good)


# ---- the hang cluster: one storage daemon under another prefix ----

class HangCluster:
    def __init__(self):
        self.dir = os.path.join(e.CL_DIR, "hang")
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        self.proc = None

    def zl(self, *args):
        p = subprocess.run([os.path.join(e.BIN, "zl"), "--etcd", e.ETCD, "--etcd-prefix",
                            HANG_PREFIX] + list(args), capture_output=True, text=True,
                           timeout=60)
        if p.returncode:
            fail("zl %s: %s %s" % (" ".join(args), p.stdout, p.stderr))
        return p.stdout

    def start(self):
        logf = open(os.path.join(self.dir, "log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(e.BIN, "zipline-storage"), "--data-dir", os.path.join(self.dir, "data"),
             "--listen", "127.0.0.1:0", "--node-id", "hang-1", "--etcd", e.ETCD,
             "--etcd-prefix", HANG_PREFIX, "--auth", "off"] + write_path_flags(),
            stdout=logf, stderr=subprocess.STDOUT)
        logf.close()
        deadline = time.monotonic() + REGISTER_S
        while "hang-1" not in self.zl("node", "ls"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                fail("the hang cluster's storage daemon did not register")
            time.sleep(0.2)

    def volume(self, name):
        self.zl("volume", "create", name, "--size", "64M", "--replicas", "1")
        for line in self.zl("volume", "ls").splitlines():
            w = line.split()
            if name in w:
                vid = [x for x in w if x.startswith("vol-")]
                if vid:
                    return vid[0]
        fail("zl volume ls does not list %s" % name)

    def freeze(self):
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def fake_pctx(epoch="4242"):
    """A publish context for a volume of the hang cluster (auth off there:
    any token passes its HELLO)."""
    return {"epoch": epoch, "token": "ab" * 32, "etcdPrefix": HANG_PREFIX}


# ---- the scenarios ----

def test_sigterm_stuck_io(node, hang):
    """An attach process whose I/O is stuck on storage that stopped
    answering: SIGTERM ends it within the bound, the I/O fails with EIO,
    its loop device is gone."""
    vid = hang.volume("hang-sigterm")
    staging, target = e.stage_publish(node, vid, e.block_cap(), fake_pctx(), "sigterm")
    dev = target
    p = subprocess.run(["dd", "if=/dev/urandom", "of=" + dev, "bs=64k", "count=4",
                        "oflag=direct"], capture_output=True, text=True, timeout=60)
    if p.returncode:
        fail("a write to the healthy hang-cluster volume failed: %s" % p.stderr)
    with open(os.path.join(node.state, vid, "state.json")) as f:
        pid = json.load(f)["pid"]
    held, gone = backing(node, vid)
    hang.freeze()
    dd = subprocess.Popen(["dd", "if=" + dev, "of=/dev/null", "bs=4k", "count=1", "skip=1000",
                           "iflag=direct"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    # Time passes on purpose: the read must still be waiting after 2 s (it
    # is stuck on the frozen daemon, not done).
    time.sleep(2)
    if dd.poll() is not None:
        fail("the read on the frozen daemon's volume did not wait: rc %s %s"
             % (dd.returncode, dd.stderr.read()))
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    while time.monotonic() - t0 < STOP_BOUND_S + 30 and pid in attach_procs():
        time.sleep(0.05)
    took = time.monotonic() - t0
    if pid in attach_procs():
        fail("the attach process %d did not exit %.0f s after SIGTERM" % (pid, took))
    if took > STOP_BOUND_S:
        fail("the attach process took %.1f s to exit after SIGTERM, bound %d s" % (took, STOP_BOUND_S))
    try:
        rc = dd.wait(30)
    except subprocess.TimeoutExpired:
        fail("the stuck read did not end after the attach process exited")
    err = dd.stderr.read()
    if rc == 0 or "Input/output error" not in err:
        fail("the stuck read ended with rc %d, want EIO: %s" % (rc, err))
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not gone():
        fail("%s still backs %s after the attach process exited" % (held, vid))
    log("  SIGTERM with a read stuck on a frozen daemon: exit in %.1f s, dd: %s, %s gone"
        % (took, err.strip().splitlines()[0], held))
    hang.thaw()
    # The kubelet's cleanup: NodeUnpublish + NodeUnstage of the dead
    # attachment (once each: a repeated NodeUnstage of a volume outside the
    # node's own prefix answers NOT_FOUND, the prefix is not in the request).
    node.n.NodeUnpublishVolume(e.pb.NodeUnpublishVolumeRequest(volume_id=vid, target_path=target),
                               timeout=e.T)
    node.n.NodeUnstageVolume(e.pb.NodeUnstageVolumeRequest(volume_id=vid,
                                                           staging_target_path=staging),
                             timeout=e.T)
    if os.path.exists(os.path.join(node.state, vid)) or not gone():
        fail("NodeUnstage left the dead attachment's state or device behind")


def test_storage_stopped(node, hang):
    vid = hang.volume("hang-stopped")
    hang.freeze()
    try:
        doomed_with_good(
            node, "storage daemons stopped",
            lambda: stage_call(node, vid, e.mount_cap(), fake_pctx(), "stopped"),
            [e.grpc.StatusCode.UNAVAILABLE], ["storage node hang-1"], FAIL_BOUND_S)
    finally:
        hang.thaw()


def test_storage_killed(node, hang):
    vid = hang.volume("hang-killed")
    hang.stop()  # kill -9: connections are refused
    doomed_with_good(
        node, "storage daemons killed",
        lambda: stage_call(node, vid, e.mount_cap(), fake_pctx(), "killed"),
        [e.grpc.StatusCode.UNAVAILABLE], ["storage node hang-1"], FAIL_BOUND_S)


def test_no_publish(node):
    cap = e.mount_cap()
    vid = e.create_volume("hang-nopub", 64 * MiB, cap).volume_id
    doomed_with_good(
        node, "no publish context",
        lambda: stage_call(node, vid, cap, {}, "nopub"),
        [e.grpc.StatusCode.FAILED_PRECONDITION], ["ControllerPublish"], 5)
    # The storage side: a HELLO without a token is refused for good (AUTH),
    # not left to retry (BUSY), on every daemon.
    for i in e.storage_ids():
        got = e.outsider(i, "--vol", vid, "--epoch", "0", "--node", node.node_id, "hello").get("hello")
        if got != "ZL_ERR_AUTH":
            fail("storage-%d answered a HELLO without a token with %s, want ZL_ERR_AUTH" % (i, got))
    log("  a HELLO without a token: ZL_ERR_AUTH on every daemon")
    e.delete_volume(vid)


def test_bad_token(node, other):
    cap = e.mount_cap()
    vid = e.create_volume("hang-badtok", 64 * MiB, cap).volume_id
    pctx = e.ctrl_publish(vid, node, cap)
    bad = dict(pctx)
    bad["token"] = ("0" if pctx["token"][0] != "0" else "1") + pctx["token"][1:]
    doomed_with_good(
        node, "wrong token",
        lambda: stage_call(node, vid, cap, bad, "badtok"),
        [e.grpc.StatusCode.UNAUTHENTICATED], ["refused our attach token"], FAIL_BOUND_S)
    # A token of the volume's attachment to another node.
    e.ctrl_unpublish(vid, node)
    octx = e.ctrl_publish(vid, other, cap)
    doomed_with_good(
        node, "another node's token",
        lambda: stage_call(node, vid, cap, octx, "othertok"),
        [e.grpc.StatusCode.UNAUTHENTICATED], ["refused our attach token"], FAIL_BOUND_S)
    e.ctrl_unpublish(vid, other)
    # The old context after the attachment moved away: fenced.
    doomed_with_good(
        node, "unpublished (fenced) token",
        lambda: stage_call(node, vid, cap, pctx, "fenced"),
        [e.grpc.StatusCode.ABORTED], ["fenced", "STALE"], FAIL_BOUND_S)
    e.delete_volume(vid)


def no_attach_left():
    """Every attach process ended, and its zipline-node reaped it (it looks
    every 2 s)."""
    deadline = time.monotonic() + 10
    while attach_procs(zombies=True) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = attach_procs(zombies=True)
    if left:
        desc = []
        for pid in left:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    desc.append(f.read()[:80])
            except OSError:
                desc.append("%d (gone)" % pid)
        fail("attach processes (or zombies) left at the end: %s" % desc)
    log("no attach process left, none unreaped")


def vm_bounds():
    """The bounds in the test VM (--frontend ublk|nbd)."""
    global REGISTER_S, D_BOUND_S, MAX_GAP_S, FAIL_BOUND_S, ATTACH_S
    REGISTER_S = 300  # daemons started from 9p under TCG: 20 s to minutes
    # TCG runs the guest 10-50 times slower than the host: the first reads
    # of a fresh device (the attach process connecting to its replicas)
    # and the writeback under mkfs's fsync were seen to complete nothing
    # for 1.5-2.1 s with 2 vCPUs shared by the daemons, the doomed attach
    # process and the kernel's nbd threads. A stuck process (a device with
    # no server) stays in D for the whole phase, tens of seconds.
    # The sampler's gaps there: 0.1-0.5 s, 0.88 s with another guest
    # running; a process stuck for 7 s still shows as D for more than 5 s.
    D_BOUND_S, MAX_GAP_S = 5.0, 2.0
    # --attach-timeout bounds the healthy volume's attach process too: with
    # the host loaded (load 10, other guests) one took more than 6 s to
    # read its first block. A doomed NodeStage answered in 7-23 s with 6 s
    # (up to 6 s went to the attach process's start from 9p and its etcd
    # reads, before its probe, with another volume staging at the same
    # time): the bound stays below the RPC deadline and I/O timeout
    # (120 s) a hang runs into.
    ATTACH_S = 20
    FAIL_BOUND_S = ATTACH_S + 40
    e.START_S = 60


def main():
    """On the host (csi_e2e.sh): every check with FUSE. With --frontend
    ublk|nbd (the test VM): the checks that depend on the frontend; the
    token checks need --auth on, which the guest's daemons do not run."""
    global FRONTEND
    in_vm = sys.argv[1:2] == ["--frontend"]
    if in_vm:
        FRONTEND = sys.argv[2]
        if FRONTEND not in ("ublk", "nbd"):
            fail("--frontend %s: ublk or nbd (fuse is the default run)" % FRONTEND)
        vm_bounds()
    e.connect_controller()
    n1 = e.Node(1, ["--attach-timeout", str(ATTACH_S), "--frontend", FRONTEND]).start()
    nodes = [n1]
    if not in_vm:
        nodes.append(e.Node(2).start())  # only registers: a ControllerPublish target
    NODE_PIDS.update(n.proc.pid for n in nodes)
    hang = HangCluster()
    try:
        hang.start()
        if not in_vm:
            test_no_publish(n1)
            test_bad_token(n1, nodes[1])
        test_storage_stopped(n1, hang)
        test_sigterm_stuck_io(n1, hang)
        test_storage_killed(n1, hang)
        no_attach_left()
    finally:
        hang.stop()
        for n in nodes:
            n.stop()
    log("PASS (frontend %s)" % FRONTEND)


if __name__ == "__main__":
    main()
