"""csi_frontend_guest.py BIN WORK ETCD FRONTEND DATA [param]: the CSI half of
the parts nbd (FRONTEND nbd, run by test/vm/nbd-guest.sh) and ublk (FRONTEND
ublk, with param, run by test/vm/ublk-guest.sh) of frontends_vm, inside the test VM
(the frontend's module loaded, etcd and three zipline-storage running).

zipline-controller and zipline-node, driven through CSI gRPC; this script
plays the kubelet and the sidecars. Without `param`, zipline-node runs with
`--frontend FRONTEND`. With `param`, the StorageClass carries it
(parameters frontend=FRONTEND, handed on in the volume context) and
zipline-node first runs with `--frontend fuse`, so the stage proves the
parameter goes over the node's flag; its restarts run `--frontend auto`,
which must pick FRONTEND (ublk: the VM's kernel has ublk_drv).
  - Filesystem mode: CreateVolume, ControllerPublish, NodeStage (ext4 on
    /dev/nbdN or /dev/ublkbN, no loop device; state.json names the frontend
    and, for ublk, the device id; the attach process holds locked memory,
    VmLck), NodePublish, a file written; kill -9 of
    the attach process: zipline-node starts a new one that takes the device
    over (--reattach / --recover ID; state.json names it), the mount never
    goes, the files read back and new writes land; zipline-node restarted:
    the attach process is adopted; the attach process killed while
    zipline-node is down: zipline-node's start takes the device over;
    NodeGetVolumeStats reports usage and a normal condition naming the
    frontend; NodeExpandVolume beyond the device: the live device grows
    (nbd: NBD_CMD_RECONFIGURE; ublk: UBLK_U_CMD_UPDATE_SIZE, Linux >=
    6.16, the VM's kernel) and ext4 on it, a 24 MiB file written and every
    file read back; the attach process killed (-9) after the growth: the
    new one takes over the grown device, every file reads back;
    NodeUnpublish, NodeUnstage: the device is
    disconnected (nbd: no /sys/block/nbdN/pid, size 0) or deleted (ublk:
    /dev/ublkbN, /dev/ublkcN and /sys/block/ublkbN gone), no attach process
    of the volume left, the state removed.
  - Block mode: the same stage, a pattern written and read back with
    O_DIRECT through the published device file; grown online, written
    beyond the old end, read back; unstage.
  - No volume hangs the node (issue 20's checks with this frontend,
    test/e2e/csi_hang_test.py --frontend FRONTEND): a volume whose storage
    daemon is stopped (SIGSTOP) or killed fails NodeStage fast while another
    volume stages and does I/O, nothing in state D; SIGTERM of an attach
    process whose read is stuck ends it in time, the read fails with EIO and
    the device goes. The hang cluster's daemon keeps its data in DATA (a
    directory on the guest's disk: not 9p, not tmpfs).
  - The node plugin's container restarted under load (test/e2e/
    csi_restart_test.py --frontend FRONTEND): zipline-node --spawner, the
    plugin's cgroup killed under fio verify=crc32c on the mounted file
    system; the attach process, in the spawner's cgroup, keeps the device;
    the new plugin adopts it and fio ends without an error.
Exit 0 when every check passed. Run with /usr/bin/python3.
"""

import json
import os
import signal
import subprocess
import sys
import time

BIN, WORK, ETCD, FE, DATA = sys.argv[1:6]
VIA_PARAM = sys.argv[6:7] == ["param"]
DEV_PREFIX = {"nbd": "/dev/nbd", "ublk": "/dev/ublkb"}[FE]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from csi_client import CsiClient, wait_for_socket  # noqa: E402
from frontend_dev import attach_pids, leftovers  # noqa: E402

RUN = "/run/zl-%s-csi" % FE
STATE = os.path.join(RUN, "state")
T = 120
procs = []


def log(msg):
    print("csi_frontend_guest(%s): %s" % (FE, msg), flush=True)


def fail(msg):
    print("csi_frontend_guest(%s): FAIL: %s" % (FE, msg), file=sys.stderr, flush=True)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    sys.exit(1)


def wait_for(what, secs, fn):
    end = time.time() + secs
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    fail("%s: not within %d s" % (what, secs))


def start(name, argv):
    logf = open(os.path.join(WORK, name + ".log"), "ab")
    p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def mount_source(path):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return fields[fields.index("-") + 2]
    return None


def state(vol):
    with open(os.path.join(STATE, vol, "state.json")) as f:
        return json.load(f)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


os.makedirs(RUN, exist_ok=True)
start("controller", [os.path.join(BIN, "zipline-controller"), "--endpoint",
                     "unix://%s/ctrl.sock" % RUN, "--etcd", ETCD, "--log-level", "info"])
node = None
node_proc = None


node_starts = 0


def node_start():
    global node, node_proc, node_starts
    if os.path.exists(RUN + "/node.sock"):
        os.unlink(RUN + "/node.sock")
    flag = FE if not VIA_PARAM else "fuse" if node_starts == 0 else "auto"
    node_starts += 1
    logpath = os.path.join(WORK, "node.log")
    logged = os.path.getsize(logpath) if os.path.exists(logpath) else 0
    node_proc = start("node", [
        os.path.join(BIN, "zipline-node"), "--endpoint", "unix://%s/node.sock" % RUN,
        "--node-id", "vm-node", "--etcd", ETCD, "--state-dir", STATE, "--kubelet-dir", RUN,
        "--transport", "tcp", "--frontend", flag, "--io-timeout", "10", "--log-level", "info"])
    wait_for_socket(RUN + "/node.sock", 60)
    node = CsiClient("unix://%s/node.sock" % RUN)
    node.wait_ready(60)
    if flag == "auto":
        with open(logpath) as f:
            f.seek(logged)
            picked = [ln for ln in f if "frontend auto: " in ln]
        if not picked or "frontend auto: %s " % FE not in picked[0]:
            fail("zipline-node --frontend auto did not pick %s: %s" % (FE, picked))
        log("zipline-node --frontend auto picked %s" % FE)


def node_stop():
    node.close()
    node_proc.send_signal(signal.SIGTERM)
    if node_proc.wait(60) != 0:
        fail("zipline-node exited %d on SIGTERM" % node_proc.returncode)
    procs.remove(node_proc)


# zipline-node starts while the controller does (neither needs the other
# to start; each start takes seconds under TCG).
node_start()
wait_for_socket(RUN + "/ctrl.sock", 60)
ctrl = CsiClient("unix://%s/ctrl.sock" % RUN)
ctrl.wait_ready(60)
pb = ctrl.pb


def cap_of(block):
    mode = pb.VolumeCapability.AccessMode(mode=1)
    if block:
        return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(), access_mode=mode)
    return pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
                               access_mode=mode)


def stage(name, block):
    cap = cap_of(block)
    params = {"replicas": "3"}
    if VIA_PARAM:
        params["frontend"] = FE
    v = ctrl.controller.CreateVolume(pb.CreateVolumeRequest(
        name=name, capacity_range=pb.CapacityRange(required_bytes=64 << 20),
        volume_capabilities=[cap], parameters=params), timeout=T).volume
    if VIA_PARAM and v.volume_context["frontend"] != FE:
        fail("CreateVolume's volume_context has frontend %r" % v.volume_context.get("frontend"))
    pctx = dict(ctrl.controller.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=v.volume_id, node_id="vm-node", volume_capability=cap),
        timeout=T).publish_context)
    staging = os.path.join(RUN, "staging", name)
    target = os.path.join(RUN, "pods", name, "dev" if block else "vol")
    os.makedirs(staging, exist_ok=True)
    node.node.NodeStageVolume(pb.NodeStageVolumeRequest(
        volume_id=v.volume_id, staging_target_path=staging, volume_capability=cap,
        publish_context=pctx, volume_context=dict(v.volume_context)), timeout=T)
    st = state(v.volume_id)
    dev = st["loop_device"]
    if st["frontend"] != FE or not dev.startswith(DEV_PREFIX):
        fail("%s staged on %s with frontend %s, not on %sN" % (name, dev, st["frontend"],
                                                               DEV_PREFIX))
    with open("/proc/%d/status" % st["pid"]) as f:
        lck = [int(ln.split()[1]) for ln in f if ln.startswith("VmLck:")]
    if not lck or lck[0] == 0:
        fail("%s: the attach process %d holds no locked memory (mlockall)" % (name, st["pid"]))
    if FE == "ublk" and dev != "/dev/ublkb%d" % st.get("ublk_id", -1):
        fail("%s: state.json names ublk_id %s for %s" % (name, st.get("ublk_id"), dev))
    if not block and mount_source(staging) != dev:
        fail("%s: staging mount source %s, not %s" % (name, mount_source(staging), dev))
    node.node.NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=v.volume_id, staging_target_path=staging, target_path=target,
        volume_capability=cap, publish_context=pctx), timeout=T)
    log("%s (%s) staged on %s, attach pid %d" % (name, "block" if block else "ext4", dev,
                                                  st["pid"]))
    return v.volume_id, staging, target, dev


def unstage(vol, staging, target, dev, pid):
    node.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vol, target_path=target), timeout=T)
    node.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
        volume_id=vol, staging_target_path=staging), timeout=T)
    if mount_source(staging):
        fail("NodeUnstage left %s mounted" % staging)
    if os.path.exists(os.path.join(STATE, vol)):
        fail("NodeUnstage left the state of %s" % vol)
    if alive(pid) or attach_pids(vol):
        fail("attach processes of %s outlived NodeUnstage: %s" % (vol, attach_pids(vol) or pid))
    if leftovers(dev):
        fail("%s is not %s after NodeUnstage: %s"
             % (dev, "disconnected" if FE == "nbd" else "deleted", leftovers(dev)))
    log("unstaged %s: %s %s, attach process gone"
        % (vol, dev, "disconnected" if FE == "nbd" else "deleted"))


def takeover(vol, old, why):
    """Waits until zipline-node recorded a new live attach process."""
    new = wait_for("zipline-node takes the device of %s over (%s)" % (vol, why), 60,
                   lambda: (lambda p: p if p != old and alive(p) else 0)(state(vol)["pid"]))
    log("%s: zipline-node started attach process %d on %s" % (why, new,
                                                            state(vol)["loop_device"]))
    return new


def write_read(target, name, data):
    with open(os.path.join(target, name), "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
    with open(os.path.join(target, name), "rb") as f:
        if f.read() != data:
            fail("file %s differs" % name)


def dev_bytes(dev):
    with open("/sys/block/%s/size" % os.path.basename(dev)) as f:
        return int(f.read()) * 512


def expand_online(vol, path, dev, size):
    """ControllerExpandVolume, then NodeExpandVolume on path while staged
    and in use: the device itself grows (nbd: NBD_CMD_RECONFIGURE; ublk:
    UBLK_U_CMD_UPDATE_SIZE in the attach process)."""
    ctrl.controller.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
        volume_id=vol, capacity_range=pb.CapacityRange(required_bytes=size)), timeout=T)
    r = node.node.NodeExpandVolume(pb.NodeExpandVolumeRequest(
        volume_id=vol, volume_path=path,
        capacity_range=pb.CapacityRange(required_bytes=size)), timeout=T)
    if r.capacity_bytes != size:
        fail("NodeExpandVolume of %s answered %d bytes, not %d" % (vol, r.capacity_bytes, size))
    if dev_bytes(dev) != size:
        fail("%s is %d bytes after NodeExpandVolume to %d" % (dev, dev_bytes(dev), size))
    log("%s grew online to %d MiB (NodeExpandVolume)" % (dev, size >> 20))


def check_stats(vol, path, unit):
    r = node.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
        volume_id=vol, volume_path=path), timeout=T)
    if not any(u.unit == unit and u.total > 0 for u in r.usage):
        fail("NodeGetVolumeStats of %s: no usage in unit %d: %s" % (vol, unit, r))
    if r.volume_condition.abnormal:
        fail("NodeGetVolumeStats of %s: abnormal: %s" % (vol, r.volume_condition.message))
    if "frontend %s" % FE not in r.volume_condition.message or \
            "alive" not in r.volume_condition.message:
        fail("NodeGetVolumeStats of %s: the condition does not name frontend %s and a live "
             "attach process: %s" % (vol, FE, r.volume_condition.message))


# ---- Filesystem mode, and the attach process killed
vol, staging, target, dev = stage("fsvol", False)
data = os.urandom(3 << 20)
with open(os.path.join(target, "a"), "wb") as f:
    f.write(data)
    os.fsync(f.fileno())
old = state(vol)["pid"]
os.kill(old, signal.SIGKILL)
log("attach process %d killed (-9)" % old)
new = takeover(vol, old, "kill -9")
if state(vol)["loop_device"] != dev or mount_source(staging) != dev:
    fail("after the takeover: state names %s, staging mounted from %s, not %s"
         % (state(vol)["loop_device"], mount_source(staging), dev))
with open(os.path.join(target, "b"), "wb") as f:
    f.write(data[::-1])
    os.fsync(f.fileno())
subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
with open(os.path.join(target, "a"), "rb") as f:
    if f.read() != data:
        fail("file a differs after the takeover")
with open(os.path.join(target, "b"), "rb") as f:
    if f.read() != data[::-1]:
        fail("file b differs after the takeover")
log("files read back after the takeover")
# zipline-node restarted: the attach process is adopted, I/O goes on.
node_stop()
write_read(target, "c", data[:1 << 20])
node_start()
if state(vol)["pid"] != new or not alive(new):
    fail("the restarted zipline-node did not adopt attach process %d" % new)
log("zipline-node restarted, attach process %d adopted" % new)
# The attach process killed while zipline-node is down: its start takes over.
node_stop()
os.kill(new, signal.SIGKILL)
log("attach process %d killed (-9) while zipline-node is down" % new)
node_start()
new = takeover(vol, new, "zipline-node start")
if mount_source(staging) != dev:
    fail("staging mounted from %s, not %s, after the takeover at start"
         % (mount_source(staging), dev))
write_read(target, "d", data[1 << 20:])
for name, want in (("a", data), ("b", data[::-1]), ("c", data[:1 << 20])):
    with open(os.path.join(target, name), "rb") as f:
        if f.read() != want:
            fail("file %s differs after the takeover at start" % name)
log("files read back after the takeover at zipline-node's start")
check_stats(vol, target, pb.VolumeUsage.BYTES)
expand_online(vol, target, dev, 96 << 20)
fs = os.statvfs(target)
if fs.f_blocks * fs.f_frsize < 80 << 20:
    fail("ext4 on %s is %d bytes after NodeExpandVolume to 96 MiB"
         % (dev, fs.f_blocks * fs.f_frsize))
if mount_source(staging) != dev:
    fail("the expansion changed the staging mount's source to %s" % mount_source(staging))
# A file written after the growth, then everything read back.
big = os.urandom(1 << 20) * 24
write_read(target, "e", big)
for name, want in (("a", data), ("b", data[::-1]), ("c", data[:1 << 20]), ("e", big)):
    with open(os.path.join(target, name), "rb") as f:
        if f.read() != want:
            fail("file %s differs after the online expansion" % name)
log("ext4 grew online with %s to %d MiB; 24 MiB more written, every file read back"
    % (dev, fs.f_blocks * fs.f_frsize >> 20))
# The attach process killed after the growth: the new one must take over
# the grown device (its size check compares the device with the volume).
os.kill(new, signal.SIGKILL)
log("attach process %d killed (-9) after the growth" % new)
new = takeover(vol, new, "kill -9 after the growth")
if dev_bytes(dev) != 96 << 20 or mount_source(staging) != dev:
    fail("after the takeover of the grown device: %s is %d bytes, staging mounted from %s"
         % (dev, dev_bytes(dev), mount_source(staging)))
subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
for name, want in (("a", data), ("e", big)):
    with open(os.path.join(target, name), "rb") as f:
        if f.read() != want:
            fail("file %s differs after the takeover of the grown device" % name)
log("the grown device taken over; files read back")
unstage(vol, staging, target, dev, new)

# ---- Block mode
vol, staging, target, dev = stage("blkvol", True)
pattern = os.urandom(1 << 20)
fd = os.open(target, os.O_RDWR | os.O_DIRECT)
buf = __import__("mmap").mmap(-1, len(pattern))
buf.write(pattern)
if os.pwritev(fd, [buf], 4 << 20) != len(pattern):
    fail("short O_DIRECT write to %s" % target)
os.fsync(fd)
buf2 = __import__("mmap").mmap(-1, len(pattern))
if os.preadv(fd, [buf2], 4 << 20) != len(pattern) or bytes(buf2) != pattern:
    fail("O_DIRECT read of %s differs" % target)
os.close(fd)
log("block mode: 1 MiB written and read back through %s" % target)
# The published device file shows the new size, the data before it
# stays, the new end takes writes.
expand_online(vol, target, dev, 96 << 20)
fd = os.open(target, os.O_RDWR | os.O_DIRECT)
if os.lseek(fd, 0, os.SEEK_END) != 96 << 20:
    fail("the published device %s is not 96 MiB after the expansion" % target)
if os.pwritev(fd, [buf], 90 << 20) != len(pattern):
    fail("short O_DIRECT write beyond the old end of %s" % target)
os.fsync(fd)
for off in (4 << 20, 90 << 20):
    if os.preadv(fd, [buf2], off) != len(pattern) or bytes(buf2) != pattern:
        fail("O_DIRECT read at %d MiB of %s differs after the expansion" % (off >> 20, target))
os.close(fd)
log("block mode: grown online to 96 MiB, written beyond the old end, read back")
check_stats(vol, target, pb.VolumeUsage.BYTES)
pid = state(vol)["pid"]
unstage(vol, staging, target, dev, pid)

def run_e2e(script, tag, what, echo):
    """test/e2e/SCRIPT --frontend FE with this controller and its own
    zipline-node; its output in WORK/TAG.log (the lines starting with echo
    repeated here), the node's and the attach processes' logs copied there
    too (the node's directory holds its socket, so it is not on the 9p
    share)."""
    env = dict(os.environ, ZL_BIN=BIN, CL_DIR=os.path.join(DATA, tag + "-cl"), CL_ETCD=ETCD,
               CSI_WORK=os.path.join(RUN, tag), CTRL_EP="unix://%s/ctrl.sock" % RUN,
               ZL_SOURCE_DIR=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    out = os.path.join(WORK, tag + ".log")
    with open(out, "ab") as hl:
        rc = subprocess.call([sys.executable, os.path.join(env["ZL_SOURCE_DIR"], "test", "e2e",
                                                           script), "--frontend", FE],
                             env=env, stdout=hl, stderr=subprocess.STDOUT)
    with open(out) as hl:
        for line in hl:
            if line.startswith(echo):
                log(tag + ": " + line[len(echo):].strip())
    for root, _, files in os.walk(env["CSI_WORK"]):
        for f in files:
            if f.endswith(".log"):
                dst = os.path.join(WORK, tag + "-" + os.path.relpath(
                    os.path.join(root, f), env["CSI_WORK"]).replace("/", "-"))
                subprocess.call(["cp", os.path.join(root, f), dst])
    if rc:
        with open(out) as hl:
            sys.stderr.write("".join(hl.readlines()[-30:]))
        fail("%s --frontend %s failed (rc %d; %s.log, %s-*.log in %s)"
             % (script, FE, rc, tag, tag, WORK))
    log("%s (%s --frontend %s)" % (what, script, FE))


# ---- No volume hangs the node: csi_hang_test.py with this frontend, its own
# zipline-node (--attach-timeout), this controller.
node_stop()
run_e2e("csi_hang_test.py", "hang", "no volume hangs the node", "csi_e2e:   ")
# ---- The node plugin's container restarted under a verified write load on
# a mounted file system: the attach process (started by `zipline-node
# spawner` in another cgroup) keeps the device and the mount, the new plugin
# adopts it, fio ends without an error.
run_e2e("csi_restart_test.py", "restart", "attach process outlives the plugin's container",
        "csi_e2e: ")
for p in procs:
    p.send_signal(signal.SIGTERM)
for p in procs:
    p.wait(30)
log("PASS")
