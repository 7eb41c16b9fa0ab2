"""Attach processes outlive a restart of the node plugin's container (issue
24): in Kubernetes a container restart kills every process in the
container's cgroup, so zipline-node runs with --spawner and `zipline-node
spawner` (another container of the pod, the chart's "attacher") starts the
attach processes in its own cgroup.

Run by csi_e2e.sh (etcd, three zipline-storage daemons, the controller).
The two containers are emulated by two cgroups (cgroup v2's cgroup.kill
where the kernel has it, else every process of a v1 pids cgroup SIGKILLed
until none is left, which is what a container runtime does): the plugin and
a canary `sleep` in one, the spawner in the other.

1. A volume is staged and published (ext4 through the node's default
   frontend); its attach process is the spawner's child, in the spawner's
   cgroup.
2. Under fio with verify=crc32c on the mounted filesystem, the plugin's
   cgroup is killed: the plugin and the canary are gone, the attach process
   and the spawner are not.
3. A new plugin starts (the same state dir): it adopts the attach process,
   NodeGetVolumeStats reports the volume healthy, fio ends without an error
   (every block it wrote reads back with its CRC), the files written before
   still match.
4. NodeUnpublish and NodeUnstage through the new plugin end the attach
   process (the spawner reaps it), and SIGTERM stops the spawner.
Without --spawner step 2 kills the attach process with the plugin
(test_kill9 in csi_e2e_test.py covers the kill -9 of the plugin process
alone, which an attach process outlives either way).

`csi_restart_test.py --frontend ublk|nbd` runs the same with zipline-node
--frontend FRONTEND: test/vm/csi_frontend_guest.py runs it in the test VM
(frontends_vm, parts ublk and nbd), where the kernel has ublk_drv and nbd; the staged
volume must then sit on /dev/ublkbN or /dev/nbdN (its state.json says so).
The VM's init mounts no cgroup hierarchy: the test mounts cgroup2 there.
"""

import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csi_e2e_test as e  # noqa: E402
from csi_e2e_test import MiB, fail, log  # noqa: E402


class Cgroup:
    """A cgroup standing for one container."""

    def __init__(self, name):
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base, self.v2 = "/sys/fs/cgroup", True
        elif os.path.exists("/sys/fs/cgroup/unified/cgroup.procs"):
            base, self.v2 = "/sys/fs/cgroup/unified", True
        elif os.path.exists("/sys/fs/cgroup/pids/cgroup.procs"):
            base, self.v2 = "/sys/fs/cgroup/pids", False
        else:
            fail("no cgroup hierarchy (v2, or v1 pids) to stand for a container")
        self.path = os.path.join(base, "zl-e2e-%s-%d" % (name, os.getpid()))
        os.mkdir(self.path)

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def procs(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]

    def kill(self):
        """What a container runtime does to the container's processes."""
        ck = os.path.join(self.path, "cgroup.kill")
        deadline = time.monotonic() + 10
        while self.procs() and time.monotonic() < deadline:
            if self.v2 and os.path.exists(ck):
                with open(ck, "w") as f:
                    f.write("1")
            else:
                for p in self.procs():
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.05)
        if self.procs():
            fail("processes of cgroup %s outlived its kill: %s" % (self.path, self.procs()))

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rindex(")") + 2] not in "ZX"


def ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        st = f.read()
    return int(st[st.rindex(")") + 2:].split()[1])


def cgroup_of(pid):
    with open("/proc/%d/cgroup" % pid) as f:
        return f.read()


def start_spawner(sock, cg):
    d = os.path.dirname(sock)
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o700)
    logf = open(os.path.join(d, "spawner.log"), "ab")
    p = subprocess.Popen([os.path.join(e.BIN, "zipline-node"), "spawner", "--socket", sock,
                          "--log-level", "info"],
                         stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    logf.close()
    cg.add(p.pid)
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(p.pid))
    e.wait_for_socket(sock, 20)
    return p


FRONTEND = None  # --frontend ublk|nbd: the test VM; None: the node's default
FIO_LAYOUT_S, FIO_END_S = 60, 300  # fio's file layout; fio's end after the restart
# fio's file and its rate: the write phase lasts about MiB * 256 / IOPS s
# (16 s on the host, 10 s in the VM, where TCG writes 100-600 4 KiB blocks
# a second through the frontend), so the kill lands in it.
FIO_MIB, FIO_IOPS = 32, 500


def vm_setup():
    """The test VM: TCG runs the guest 10-50 times slower than the host, so
    the bounds are wider; its init mounts no cgroup hierarchy."""
    global FIO_LAYOUT_S, FIO_END_S, FIO_MIB, FIO_IOPS
    e.START_S = 60
    FIO_LAYOUT_S, FIO_END_S = 300, 600
    FIO_MIB, FIO_IOPS = 4, 100
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        os.makedirs("/sys/fs/cgroup", exist_ok=True)
        subprocess.check_call(["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"])


def main():
    global FRONTEND
    import grpc as g
    if sys.argv[1:2] == ["--frontend"]:
        FRONTEND = sys.argv[2]
        if FRONTEND not in ("ublk", "nbd"):
            fail("--frontend %s: ublk or nbd (the default frontend runs without it)"
                 % FRONTEND)
        vm_setup()
    e.grpc = g
    e.ctrl = e.CsiClient(e.CTRL_EP)
    e.ctrl.wait_ready(30)
    e.pb = e.ctrl.pb
    attacher_cg, plugin_cg = Cgroup("attacher"), Cgroup("plugin")
    sock = os.path.join(e.WORK, "node-spawner", "spawner.sock")
    spawner = canary = fio = None
    node = e.Node(1, ["--spawner", sock] + (["--frontend", FRONTEND] if FRONTEND else []))
    try:
        spawner = start_spawner(sock, attacher_cg)
        node.start()
        plugin_cg.add(node.proc.pid)
        canary = subprocess.Popen(["sleep", "600"])
        plugin_cg.add(canary.pid)

        cap = e.mount_cap("ext4")
        vol = e.create_volume("restart-vol", 256 * MiB, cap).volume_id
        pctx = e.ctrl_publish(vol, node, cap)
        staging, target = e.stage_publish(node, vol, cap, pctx, "restart")
        sums = e.write_files(target, count=3)
        pids = node.attach_pids()
        if len(pids) != 1:
            fail("want one attach process, state dir says %s" % pids)
        apid = pids[0]
        if FRONTEND:
            with open(os.path.join(node.state, vol, "state.json")) as f:
                st = json.load(f)
            if st.get("frontend") != FRONTEND:
                fail("%s was staged with frontend %s, not %s" % (vol, st.get("frontend"), FRONTEND))
        if ppid(apid) != spawner.pid:
            fail("attach process %d is the child of %d, not of the spawner %d"
                 % (apid, ppid(apid), spawner.pid))
        if apid not in attacher_cg.procs():
            fail("attach process %d is not in the spawner's cgroup: %s" % (apid, cgroup_of(apid)))
        log("attach process %d started by the spawner %d, in its cgroup" % (apid, spawner.pid))

        # fio at a bounded rate (FIO_IOPS): the kill lands in its write
        # phase.
        fio, fio_out = e.fio_start(target, "restart", FIO_MIB, FIO_IOPS, 2, FIO_LAYOUT_S)

        plugin_cg.kill()
        node.proc.wait(10)
        canary.wait(10)
        if not alive(apid) or not alive(spawner.pid):
            fail("the plugin's container restart killed the attach process (%s) or the "
                 "spawner (%s)" % (alive(apid), alive(spawner.pid)))
        log("plugin cgroup killed under fio (plugin %d and canary %d gone); attach process %d "
            "and spawner %d alive" % (node.proc.pid, canary.pid, apid, spawner.pid))

        node.start()
        plugin_cg.add(node.proc.pid)
        if node.attach_pids() != [apid]:
            fail("the restarted plugin did not adopt attach process %d: %s"
                 % (apid, node.attach_pids()))
        # Once (e.stats asks twice and compares: fio changes the usage).
        s = node.n.NodeGetVolumeStats(
            e.pb.NodeGetVolumeStatsRequest(volume_id=vol, volume_path=target), timeout=30)
        if s.volume_condition.abnormal:
            fail("volume abnormal after the plugin restart: %s" % s.volume_condition.message)
        e.fio_wait(fio, fio_out, "through the restart", FIO_END_S)
        e.check_files(target, sums)
        log("fio with verify=crc32c went on through the restart without an error; "
            "the restarted plugin adopted attach process %d, volume healthy" % apid)

        e.unpublish_unstage(node, vol, staging, target)
        deadline = time.monotonic() + 20
        while alive(apid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(apid):
            fail("attach process %d still runs after NodeUnstage" % apid)
        e.ctrl_unpublish(vol, node)
        e.delete_volume(vol)
        spawner.send_signal(signal.SIGTERM)
        if spawner.wait(10) != 0:
            fail("the spawner exited %d on SIGTERM" % spawner.returncode)
        if os.path.exists(sock):
            fail("the spawner left its socket %s" % sock)
        log("unstage ended the attach process; the spawner stopped on SIGTERM")
    finally:
        for p in (fio, canary, spawner):
            if p and p.poll() is None:
                p.kill()
                p.wait(10)
        node.stop()
        for cg in (plugin_cg, attacher_cg):
            cg.remove()
    log("PASS" + (" (frontend %s)" % FRONTEND if FRONTEND else ""))


if __name__ == "__main__":
    main()
