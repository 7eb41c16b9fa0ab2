"""The node plugin's metrics and probes (issue 26): zipline-node --metrics.

Run by csi_e2e.sh (etcd, three zipline-storage daemons, the controller);
this script plays the kubelet, starts one zipline-node with
--metrics 127.0.0.1:0 and scrapes it with prometheus_client's text parser
(an oracle independent of the daemon's code):
  1. /healthz and /readyz answer 200 once the node registered; the CSI
     calls are counted by method and code;
  2. a block volume staged and published: zipline_node_volumes{fuse} is 1,
     the volume's attach process is attached and not fenced; 4 MiB written
     with O_DIRECT through the published device and read back: the
     volume's write and read bytes rose by 4 MiB at least, with no I/O
     error, and none throttled; its read, write and flush latency
     histograms counted exactly the reads and writes its client counted
     (and a flush at least); a volume limited to 100 write IOPS counts
     its 64 writes of 4 KiB at once as throttled, and exports that limit
     (zipline_node_volume_qos_limit, every other limit 0); a
     ControllerModifyVolume (writeIops 300, readBps 8M) shows in those
     gauges within 10 s, the attach process unchanged; a byte of a block
     flipped in its primary's copy: a read of it comes back right and
     counts exactly one failover and a retry at least; the primary of
     chunk 0 killed (-9) under writes to it and started again: retries
     rose, the writes went on, no I/O error;
  3. kill -9 of the attach process: the volume counts as unattached;
  4. unpublished and unstaged: no volume is counted any more.
"""

import mmap
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csi_e2e_test as e  # noqa: E402
from csi_e2e_test import MiB, fail, log  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from metrics_tool import value  # noqa: E402
from metrics_tool import scrape as scrape_url  # noqa: E402


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(base):
    return scrape_url(base + "/metrics")


def wait_value(base, want, name, **labels):
    """Polls until the value equals want (10 s); returns the last one."""
    v = None
    for _ in range(100):
        v = value(scrape(base), name, **labels)
        if v == want:
            break
        time.sleep(0.1)
    return v


def lat_counts(sm, vol):
    """The volume's latency histogram counts and its client's I/O counters."""
    c = {k: value(sm, "zipline_node_volume_%s_duration_seconds_count" % k, volume=vol)
         for k in ("read", "write", "flush")}
    c["reads"] = value(sm, "zipline_node_volume_reads_total", volume=vol)
    c["writes"] = value(sm, "zipline_node_volume_writes_total", volume=vol)
    return c


HEAL_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "heal_tool.py")


def heal_tool(*args):
    """test/lib/heal_tool.py ARGS (the etcd row oracle, chunk file layout):
    its output."""
    p = subprocess.run(["/usr/bin/python3", HEAL_TOOL] + list(args), capture_output=True)
    if p.returncode:
        fail("heal_tool.py %s: %s" % (" ".join(args), p.stderr.decode().strip()))
    return p.stdout.decode().strip()


def client_counts(base, vol):
    sm = scrape(base)
    return {k: value(sm, "zipline_node_volume_%s_total" % k, volume=vol)
            for k in ("retries", "failovers", "io_errors", "writes")}


def failover(base, target, vol, data):
    """A byte of block 3 of chunk 0 flipped in its primary's copy: an
    O_DIRECT read of that block comes back right (read around the bad copy,
    READ + ZL_WF_ANY from another in-sync member); the client counts exactly
    one failover, at least one retry (the read sent again), no I/O error."""
    heal_tool("etcd", e.ETCD, "journal-clean", "30")  # the chunk file holds the data
    prim = heal_tool("etcd", e.ETCD, "primary", vol, "0")
    f = os.path.join(e.CL_DIR, "storage-" + prim.split("-")[1], "data", "chunks", vol,
                     "%016x.zlc" % 0)
    off = int(heal_tool("blockoff", f, "3", "123"))
    fd = os.open(f, os.O_RDWR)
    try:
        b = os.pread(fd, 1, off)
        os.pwrite(fd, bytes([b[0] ^ 0xff]), off)
        os.fsync(fd)
    finally:
        os.close(fd)
    c0 = client_counts(base, vol)
    back = subprocess.run(["dd", "if=" + target, "bs=4k", "skip=3", "count=1", "iflag=direct",
                           "status=none"], check=True, capture_output=True).stdout
    c = client_counts(base, vol)
    d = {k: c[k] - c0[k] for k in c}
    log("node metrics: a 4 KiB read of a block whose copy on its primary %s is bad: "
        "failovers +%d, retries +%d, I/O errors +%d" % (prim, d["failovers"], d["retries"],
                                                          d["io_errors"]))
    if back != data[3 * 4096:4 * 4096]:
        fail("the block read around the primary's bad copy differs from the one written")
    if d["failovers"] != 1 or d["retries"] < 1 or d["io_errors"] != 0:
        fail("one read around a bad primary copy: failovers +%d (want 1), retries +%d "
             "(want >= 1), I/O errors +%d (want 0)" % (d["failovers"], d["retries"],
                                                       d["io_errors"]))
    return prim


def storage_kill(base, target, vol, prim):
    """kill -9 of storage daemon PRIM (the primary of chunk 0) under a
    running write load on chunk 0 (4 KiB O_DIRECT writes of its first
    64 KiB, over and over), started again at once from the same command
    line: the client sent writes again (retries rose), the load went on
    after the restart, no I/O error, the blocks read back as written."""
    i = int(prim.split("-")[1])
    pid = e.storage_pid(i)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    buf = mmap.mmap(-1, 4096)
    buf.write(os.urandom(4096))
    stop, errs = threading.Event(), []

    def load():
        fd = os.open(target, os.O_WRONLY | os.O_DIRECT)
        try:
            k = 0
            while not stop.is_set():
                os.pwrite(fd, buf, (k % 16) * 4096)
                k += 1
        except OSError as ex:
            errs.append(ex)
        finally:
            os.close(fd)

    c0 = client_counts(base, vol)
    th = threading.Thread(target=load)
    th.start()
    try:
        for _ in range(100):
            if client_counts(base, vol)["writes"] - c0["writes"] >= 50 or errs:
                break
            time.sleep(0.1)
        os.kill(pid, 9)
        t0 = time.monotonic()
        while os.path.exists("/proc/%d" % pid) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        log_path = os.path.join(e.CL_DIR, "storage-%d" % i, "log")
        with open(log_path, "ab") as lf:
            p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT)
        with open(os.path.join(e.CL_DIR, "storage-%d" % i, "pid"), "w") as f:
            f.write("%d\n" % p.pid)
        # Written again after the restart: the load goes on.
        c1 = client_counts(base, vol)
        c = c1
        for _ in range(600):
            c = client_counts(base, vol)
            if (c["retries"] > c0["retries"] and c["writes"] - c1["writes"] >= 50) or errs:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        th.join(60)
    d = {k: c[k] - c0[k] for k in c}
    log("node metrics: %s killed and restarted under 4 KiB writes to chunk 0: retries +%d, "
        "writes +%d, I/O errors +%d, back in %.1f s" % (prim, d["retries"], d["writes"],
                                                         d["io_errors"], time.monotonic() - t0))
    if errs:
        fail("the write load failed when %s was killed: %s" % (prim, errs[0]))
    if d["retries"] < 1 or d["io_errors"] != 0:
        fail("storage %s killed under a write load: retries +%d (want >= 1), I/O errors +%d "
             "(want 0)" % (prim, d["retries"], d["io_errors"]))
    back = subprocess.run(["dd", "if=" + target, "bs=64k", "count=1", "iflag=direct",
                           "status=none"], check=True, capture_output=True).stdout
    if back != bytes(buf) * 16:
        fail("chunk 0's first 64 KiB read back differ from the blocks written")


def metrics_base(node):
    for _ in range(100):
        with open(node.path("node.log")) as f:
            m = re.findall(r"metrics on http\S* port=(\d+)", f.read())
        if m:
            return "http://127.0.0.1:%s" % m[-1]
        time.sleep(0.1)
    fail("zipline-node logged no metrics port")


def main():
    e.connect_controller()
    n = e.Node(1, extra=["--metrics", "127.0.0.1:0"]).start()
    try:
        base = metrics_base(n)
        # 1. probes; calls counted
        code, body = 0, ""
        for _ in range(100):
            code, body = get(base + "/readyz")
            if code == 200:
                break
            time.sleep(0.1)
        if code != 200:
            fail("/readyz is %d after the node registered: %s" % (code, body))
        if get(base + "/healthz")[0] != 200:
            fail("/healthz is not 200")
        cap = e.block_cap()
        v = e.create_volume("nmvol", 64 * MiB, cap)
        vol = v.volume_id
        s0 = value(scrape(base), "zipline_csi_calls_total",
                   method="/csi.v1.Node/NodeStageVolume", code="OK")
        pctx = e.ctrl_publish(vol, n, cap)
        staging, target = e.stage_publish(n, vol, cap, pctx, "nm")
        got = value(scrape(base), "zipline_csi_calls_total",
                    method="/csi.v1.Node/NodeStageVolume", code="OK") - s0
        if got != 2:  # stage_publish calls each RPC twice (idempotency)
            fail("NodeStageVolume OK counted %s times, not 2" % got)
        # 2. a staged volume and its client's counters
        sm = scrape(base)
        if value(sm, "zipline_node_volumes", frontend="fuse") != 1:
            fail("zipline_node_volumes{frontend=fuse} is not 1 with one volume staged")
        if value(sm, "zipline_node_volume_attached", volume=vol) != 1:
            fail("the volume's attach process is not counted attached")
        if value(sm, "zipline_node_volume_fenced", volume=vol) != 0:
            fail("the volume counts as fenced")
        w0 = value(sm, "zipline_node_volume_write_bytes_total", volume=vol)
        r0 = value(sm, "zipline_node_volume_read_bytes_total", volume=vol)
        lat0 = lat_counts(sm, vol)
        data = os.urandom(4 * MiB)
        src = n.path("nm.data")
        with open(src, "wb") as f:
            f.write(data)
        subprocess.run(["dd", "if=" + src, "of=" + target, "bs=1M", "oflag=direct",
                        "conv=fsync", "status=none"], check=True)
        back = subprocess.run(["dd", "if=" + target, "bs=1M", "count=4", "iflag=direct",
                               "status=none"], check=True, capture_output=True).stdout
        if back != data:
            fail("the 4 MiB read back through %s differ from those written" % target)
        sm = scrape(base)
        dw = value(sm, "zipline_node_volume_write_bytes_total", volume=vol) - w0
        dr = value(sm, "zipline_node_volume_read_bytes_total", volume=vol) - r0
        log("node metrics: 4 MiB written and read back: write bytes +%d, read bytes +%d, "
            "writes %d, reads %d" % (dw, dr,
                                     value(sm, "zipline_node_volume_writes_total", volume=vol),
                                     value(sm, "zipline_node_volume_reads_total", volume=vol)))
        if dw < 4 * MiB or dr < 4 * MiB:
            fail("the volume's byte counters rose by %d written / %d read, less than 4 MiB"
                 % (dw, dr))
        if value(sm, "zipline_node_volume_io_errors_total", volume=vol) != 0:
            fail("I/O errors counted on a healthy volume")
        # The latency histograms count every I/O the client did, exactly:
        # reads and writes as its own counters, at least one flush (fsync).
        lat = lat_counts(sm, vol)
        d = {k: lat[k] - lat0[k] for k in lat}
        log("node metrics: latency histograms: +%d reads, +%d writes, +%d flushes (counters: "
            "+%d reads, +%d writes)" % (d["read"], d["write"], d["flush"], d["reads"],
                                       d["writes"]))
        if d["read"] != d["reads"] or d["write"] != d["writes"]:
            fail("the latency histograms counted %d reads / %d writes, the client %d / %d"
                 % (d["read"], d["write"], d["reads"], d["writes"]))
        if d["reads"] <= 0 or d["writes"] <= 0 or d["flush"] < 1:
            fail("4 MiB written with fsync and read back: %r" % d)
        for k in ("read", "write", "flush"):
            name = "zipline_node_volume_%s_duration_seconds" % k
            inf = value([x for x in sm if x.labels.get("le") == "+Inf"], name + "_bucket",
                        volume=vol)
            if inf != lat[k]:
                fail("%s: bucket +Inf holds %d, the count is %d" % (name, inf, lat[k]))
            if value(sm, name + "_sum", volume=vol) <= 0:
                fail("%s_sum is not above 0 after %d I/Os" % (name, lat[k]))
        # 2b. a read around a bad copy (failovers), a daemon killed under
        # writes (retries)
        prim = failover(base, target, vol, data)
        storage_kill(base, target, vol, prim)
        if not any(s.name == "zipline_node_volume_throttled_total" and
                   s.labels.get("volume") == vol for s in sm):
            fail("no zipline_node_volume_throttled_total for the volume")
        if value(sm, "zipline_node_volume_throttled_total", volume=vol) != 0:
            fail("I/Os counted throttled on a volume without limits")
        # A volume limited to 100 write IOPS: its small writes wait, and
        # the node counts them.
        lim = e.ctrl.controller.CreateVolume(e.pb.CreateVolumeRequest(
            name="nmlim", capacity_range=e.pb.CapacityRange(required_bytes=16 * MiB),
            volume_capabilities=[cap], parameters={"replicas": "2", "writeIops": "100"}),
            timeout=60).volume.volume_id
        lctx = e.ctrl_publish(lim, n, cap)
        lst, ltg = e.stage_publish(n, lim, cap, lctx, "nmlim")
        subprocess.run(["dd", "if=/dev/zero", "of=" + ltg, "bs=4k", "count=64", "oflag=direct",
                        "status=none"], check=True)
        sm = scrape(base)
        thr = value(sm, "zipline_node_volume_throttled_total", volume=lim)
        log("node metrics: 64 writes of 4 KiB to a 100-IOPS volume: %d throttled" % thr)
        if thr <= 0:
            fail("64 writes at once to a volume limited to 100 write IOPS: none counted throttled")
        # The limits its client enforces, one gauge each; a ModifyVolume
        # reaches the running attach process (the same PID) without a
        # restart.
        qos = {s.labels["limit"]: s.value for s in sm
               if s.name == "zipline_node_volume_qos_limit" and s.labels.get("volume") == lim}
        want = {k: 0 for k in ("read_iops", "write_iops", "read_bps", "write_bps",
                               "read_iops_burst", "write_iops_burst", "read_bps_burst",
                               "write_bps_burst")}
        want["write_iops"] = 100
        if qos != want:
            fail("zipline_node_volume_qos_limit of a writeIops=100 volume: %r, not %r" % (qos, want))
        apid = [p for p in n.attach_pids()]
        e.ctrl.controller.ControllerModifyVolume(e.pb.ControllerModifyVolumeRequest(
            volume_id=lim, mutable_parameters={"writeIops": "300", "readBps": "8M"}), timeout=60)
        w = wait_value(base, 300, "zipline_node_volume_qos_limit", volume=lim, limit="write_iops")
        r = value(scrape(base), "zipline_node_volume_qos_limit", volume=lim, limit="read_bps")
        log("node metrics: ModifyVolume writeIops=300 readBps=8M: the gauges say %d, %d" % (w, r))
        if w != 300 or r != 8 * MiB:
            fail("after ModifyVolume writeIops=300 readBps=8M the attached volume's limits are "
                 "write_iops %r, read_bps %r" % (w, r))
        if n.attach_pids() != apid:
            fail("the attach processes changed across ModifyVolume: %s -> %s" % (apid, n.attach_pids()))
        e.unpublish_unstage(n, lim, lst, ltg)
        e.ctrl_unpublish(lim, n)
        e.delete_volume(lim)
        # 3. the attach process killed
        pids = n.attach_pids()
        if len(pids) != 1:
            fail("want one attach process, state dir says %s" % pids)
        os.kill(pids[0], 9)
        if wait_value(base, 1, "zipline_node_volumes_unattached") != 1:
            fail("a killed attach process is not counted unattached")
        if value(scrape(base), "zipline_node_volume_attached", volume=vol) != 0:
            fail("the volume still counts as attached after kill -9 of its attach process")
        # 4. gone once unstaged
        e.unpublish_unstage(n, vol, staging, target)
        if wait_value(base, 0, "zipline_node_volumes", frontend="fuse") != 0:
            fail("zipline_node_volumes{frontend=fuse} is not 0 after NodeUnstage")
        e.ctrl_unpublish(vol, n)
        e.delete_volume(vol)
    finally:
        n.stop()
    log("PASS")


if __name__ == "__main__":
    main()
