"""zipline-controller end to end, run by csi_controller_e2e.sh (which starts
etcd, three storage daemons and two zipline-node services registering the
node ids node-a and node-b). This script starts TWO controller replicas,
ctrl-a (the elected leader) and ctrl-b, and sends every controller call to
one of them chosen at random (seeded; the seed is printed, ZL_TEST_SEED
replays the routing). A call may fail only with a retriable code (ABORTED,
UNAVAILABLE), which is retried as a CSI sidecar would; anything else is a
failure. An independent CSI client (python3-grpcio) checks every spec error
code of the controller RPCs, idempotency across replicas, concurrent calls
on both replicas at once (one volume per name, one attachment per volume),
the operation locks shared through etcd, paging, chunk removal on
DeleteVolume, publish fencing, NOT_FOUND for unregistered nodes, expansion,
snapshots (create, list with filters and pages, delete, DeleteVolume refused
under them),
and that the leader election only picks the replica that runs the garbage
collection, never the one that may serve a call.

Environment: CL_DIR, CL_BIN, CL_ETCD, ZL_SOURCE_DIR; ZL_TEST_SEED (optional)."""

import base64
import concurrent.futures
import glob
import hashlib
import hmac
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

SRC = os.environ["ZL_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SRC, "test", "lib"))
from csi_client import CsiClient, wait_for_socket  # noqa: E402
import etcd_gw  # noqa: E402

CL_DIR = os.environ["CL_DIR"]
CL_BIN = os.environ["CL_BIN"]
ETCD = os.environ["CL_ETCD"]
PREFIX = "/zipline/"
MiB = 1 << 20
TOPO = "topology.zipline.io/node"
GC_INTERVAL = 1  # --gc-interval of the replicas (seconds)

CHECKS = 0
SEED = int(os.environ.get("ZL_TEST_SEED") or int.from_bytes(os.urandom(4), "big"))
RNG = random.Random(SEED)
RNG_LOCK = threading.Lock()
STATS = {"calls": {}, "retries": {}}
STATS_LOCK = threading.Lock()


def log(msg):
    print("csi_controller_test: " + msg, flush=True)


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        raise AssertionError(what)


def sock_of(name):
    return os.path.join(CL_DIR, name, "controller.sock")


# ------------------------------------------------------------------ etcd

def etcd_range(key, prefix=False):
    if prefix:
        got = etcd_gw.prefix(ETCD, key)
    else:
        kv = etcd_gw.get(ETCD, key)
        got = [kv] if kv else []
    kvs = []
    for kv in got:
        kvs.append({"key": base64.b64decode(kv["key"]).decode(),
                    "value": base64.b64decode(kv.get("value", "")).decode(),
                    "create_revision": int(kv.get("create_revision", 0)),
                    "mod_revision": int(kv.get("mod_revision", 0)),
                    "lease": int(kv.get("lease", 0))})
    return kvs


def etcd_get(key):
    kvs = etcd_range(key)
    return kvs[0] if kvs else None


def etcd_put(key, value, lease=0):
    etcd_gw.put(ETCD, key, value, lease)


def etcd_lease(ttl):
    return int(etcd_gw.lease_grant(ETCD, ttl))


def etcd_revoke(lease):
    etcd_gw.lease_revoke(ETCD, lease)


def wait_until(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError("%s: not after %ss" % (what, timeout))


# --------------------------------------------------------------- helpers

RETRIABLE = ("ABORTED", "UNAVAILABLE")


class Method:
    """One CSI method, sent to a replica picked at random (seeded) among
    the live ones of its Router. Retriable failures (ABORTED, UNAVAILABLE)
    are retried with a growing delay, as the CSI sidecars do, unless the
    caller expects exactly that code; any other failure is raised."""

    def __init__(self, router, service, name):
        self.router, self.service, self.name = router, service, name

    def __call__(self, req, timeout=30, _expect=None, _retry=True):
        import grpc

        delay, end = 0.05, time.monotonic() + 90
        while True:
            t = self.router.pick()
            with STATS_LOCK:
                STATS["calls"][t.name] = STATS["calls"].get(t.name, 0) + 1
            try:
                return getattr(getattr(t, self.service), self.name)(req, timeout=timeout)
            except grpc.RpcError as e:
                if (not _retry or e.code().name not in RETRIABLE or e.code() == _expect or
                        time.monotonic() > end):
                    raise
                with STATS_LOCK:
                    key = "%s %s" % (self.name, e.code().name)
                    STATS["retries"][key] = STATS["retries"].get(key, 0) + 1
                time.sleep(delay)
                delay = min(delay * 2, 1.0)


class Router:
    """Calls on a set of replicas: router.ctl.CreateVolume(req) goes to a
    random live replica of the set."""

    def __init__(self, replicas):
        self.replicas = replicas
        r0 = replicas[0]
        self.pb, self.grpc, self.name = r0.pb, r0.grpc, "+".join(r.name for r in replicas)
        self.ctl = _Service(self, "controller")
        self.idn = _Service(self, "identity")

    def pick(self):
        live = [r for r in self.replicas if r.alive]
        check(live, "no live replica among %s" % self.name)
        with RNG_LOCK:
            return live[RNG.randrange(len(live))] if len(live) > 1 else live[0]

    def on(self, name):
        return Router([r for r in self.replicas if r.name == name])


class _Service:
    def __init__(self, router, service):
        self.router, self.service = router, service

    def __getattr__(self, name):
        return Method(self.router, self.service, name)


class Ctl:
    """One zipline-controller replica (its gRPC stubs)."""

    def __init__(self, name, proc=None):
        self.name = name
        self.proc = proc
        self.alive = True
        wait_for_socket(sock_of(name), 15)
        self.c = CsiClient("unix://" + sock_of(name))
        self.c.wait_ready(10)
        self.pb = self.c.pb
        self.grpc = self.c.grpc
        self.controller = self.c.controller
        self.identity = self.c.identity


def expect_code(fn, req, code, *words):
    """Calls fn(req) (a Method); it must fail with code and a message naming
    words. Retriable codes other than code are retried first."""
    import grpc

    try:
        fn(req, timeout=30, _expect=code)
    except grpc.RpcError as e:
        check(e.code() == code, "%s: want %s, got %s (%s)" % (
            fn.name, code, e.code(), e.details()))
        for w in words:
            check(w in (e.details() or ""),
                  "error message %r does not name %r" % (e.details(), w))
        return e
    raise AssertionError("call succeeded but %s was expected (%s)" % (code, words))


def twice(fn, req):
    """Calls fn twice; both answers must be identical (idempotency)."""
    a = fn(req, timeout=60)
    b = fn(req, timeout=60)
    check(a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True),
          "second call gave another answer:\n%s\nvs\n%s" % (a, b))
    return a


def cap(pb, mode="SINGLE_NODE_WRITER", block=False, fs="ext4"):
    am = pb.VolumeCapability.AccessMode(mode=getattr(pb.VolumeCapability.AccessMode, mode))
    if block:
        return pb.VolumeCapability(access_mode=am, block=pb.VolumeCapability.BlockVolume())
    return pb.VolumeCapability(access_mode=am,
                               mount=pb.VolumeCapability.MountVolume(fs_type=fs))


def topo(pb, node):
    return pb.Topology(segments={TOPO: node})


def start_ctrl(name, *extra):
    d = os.path.join(CL_DIR, name)
    os.makedirs(d, exist_ok=True)
    logf = open(os.path.join(d, "log"), "ab")
    p = subprocess.Popen([os.path.join(CL_BIN, "zipline-controller"),
                          "--endpoint", "unix://" + sock_of(name), "--etcd", ETCD,
                          "--leader-id", name, "--log-level", "info",
                          "--gc-interval", str(GC_INTERVAL),
                          "--flatten-rate", str(FLAT_RATE)] + list(extra),
                         stdout=logf, stderr=logf)
    logf.close()
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(p.pid))
    return Ctl(name, p)


def stop_ctrl(t):
    """SIGTERM: graceful shutdown with status 0 and the socket removed."""
    t.alive = False
    t.c.close()
    t.proc.send_signal(signal.SIGTERM)
    rc = t.proc.wait(timeout=20)
    check(rc == 0, "%s exited with %s on SIGTERM" % (t.name, rc))
    check(not os.path.exists(sock_of(t.name)), "%s left its socket behind" % t.name)
    os.unlink(os.path.join(CL_DIR, t.name, "pid"))


def ctrl_log(name):
    with open(os.path.join(CL_DIR, name, "log"), errors="replace") as f:
        return f.read()


def leader():
    kv = etcd_get(PREFIX + "leader/controller")
    return kv["value"] if kv else None


def chunk_files():
    return glob.glob(os.path.join(CL_DIR, "storage-*", "data", "**", "*.zlc"), recursive=True)


# ------------------------------------------------------------------ tests

def test_identity(t):
    pb = t.pb
    info = twice(t.idn.GetPluginInfo, pb.GetPluginInfoRequest())
    check(info.name == "zipline.csi.io", "plugin name %r" % info.name)
    check(info.vendor_version == "0.1.0", "vendor_version %r" % info.vendor_version)
    caps = twice(t.idn.GetPluginCapabilities, pb.GetPluginCapabilitiesRequest())
    svc = {c.service.type for c in caps.capabilities if c.HasField("service")}
    exp = {c.volume_expansion.type for c in caps.capabilities if c.HasField("volume_expansion")}
    check(svc == {pb.PluginCapability.Service.CONTROLLER_SERVICE,
                  pb.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS},
          "plugin capabilities %s" % caps)
    check(exp == {pb.PluginCapability.VolumeExpansion.ONLINE}, "expansion %s" % caps)
    probe = twice(t.idn.Probe, pb.ProbeRequest())
    check(probe.HasField("ready") and probe.ready.value, "Probe not ready: %s" % probe)
    cc = twice(t.ctl.ControllerGetCapabilities, pb.ControllerGetCapabilitiesRequest())
    R = pb.ControllerServiceCapability.RPC
    got = {c.rpc.type for c in cc.capabilities}
    want = {R.CREATE_DELETE_VOLUME, R.PUBLISH_UNPUBLISH_VOLUME, R.LIST_VOLUMES, R.GET_CAPACITY,
            R.EXPAND_VOLUME, R.LIST_VOLUMES_PUBLISHED_NODES, R.GET_VOLUME, R.PUBLISH_READONLY,
            R.VOLUME_CONDITION, R.MODIFY_VOLUME, R.CREATE_DELETE_SNAPSHOT, R.LIST_SNAPSHOTS,
            R.CLONE_VOLUME}
    check(got == want, "controller capabilities %s" % sorted(got))
    log("identity + capabilities: ok")


def test_create_errors(t):
    pb, C = t.pb, t.grpc.StatusCode
    good = [cap(pb)]
    cr = pb.CapacityRange
    mk = pb.CreateVolumeRequest
    E = t.ctl.CreateVolume
    expect_code(E, mk(volume_capabilities=good), C.INVALID_ARGUMENT, "name")
    expect_code(E, mk(name="bad/name", volume_capabilities=good), C.INVALID_ARGUMENT, "name")
    expect_code(E, mk(name="e1"), C.INVALID_ARGUMENT, "volume_capabilities")
    expect_code(E, mk(name="e1", volume_capabilities=[pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume())]), C.INVALID_ARGUMENT, "access_mode")
    expect_code(E, mk(name="e1", volume_capabilities=[pb.VolumeCapability(
        access_mode=pb.VolumeCapability.AccessMode(mode=1))]), C.INVALID_ARGUMENT,
        "access_type")
    expect_code(E, mk(name="e1", volume_capabilities=[cap(pb, "MULTI_NODE_MULTI_WRITER")]),
                C.INVALID_ARGUMENT, "volume_capabilities[0]", "MULTI_NODE_MULTI_WRITER")
    expect_code(E, mk(name="e1", volume_capabilities=[cap(pb, "UNKNOWN")]),
                C.INVALID_ARGUMENT, "mode")
    expect_code(E, mk(name="e1", volume_capabilities=[cap(pb, fs="btrfs")]),
                C.INVALID_ARGUMENT, "fs_type")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"foo": "1"}),
                C.INVALID_ARGUMENT, "foo")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"replicas": "7"}),
                C.INVALID_ARGUMENT, "replicas")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"replicas": "x"}),
                C.INVALID_ARGUMENT, "replicas")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"chunkSize": "3M"}),
                C.INVALID_ARGUMENT, "chunkSize")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"transport": "ib"}),
                C.INVALID_ARGUMENT, "transport")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"minSize": "4"}),
                C.INVALID_ARGUMENT, "minSize")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"frontend": "spdk"}),
                C.INVALID_ARGUMENT, "parameters[frontend]")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"minSize": "x"}),
                C.INVALID_ARGUMENT, "minSize")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"writeIops": "fast"}),
                C.INVALID_ARGUMENT, "writeIops", "I/Os per second")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"bps": "1Q"}),
                C.INVALID_ARGUMENT, "bps", "bytes per second")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"ioTimeout": "-5"}),
                C.INVALID_ARGUMENT, "ioTimeout", "seconds")
    expect_code(E, mk(name="e1", volume_capabilities=good, parameters={"readIOPS": "5"}),
                C.INVALID_ARGUMENT, "readIOPS", "readIops")
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      parameters={"replicas": "2", "minSize": "3"}),
                C.INVALID_ARGUMENT, "minSize")
    VCS = pb.VolumeContentSource
    for sid in ("s1", "snap-00000000000000ff"):
        expect_code(E, mk(name="e1", volume_capabilities=good,
                          volume_content_source=VCS(snapshot=VCS.SnapshotSource(snapshot_id=sid))),
                    C.NOT_FOUND, "snapshot", sid)
    for vid in ("v1", "vol-00000000000000ff"):
        expect_code(E, mk(name="e1", volume_capabilities=good,
                          volume_content_source=VCS(volume=VCS.VolumeSource(volume_id=vid))),
                    C.NOT_FOUND, "volume", vid)
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      volume_content_source=VCS(snapshot=VCS.SnapshotSource())),
                C.INVALID_ARGUMENT, "snapshot_id")
    expect_code(E, mk(name="e1", volume_capabilities=good, volume_content_source=VCS()),
                C.INVALID_ARGUMENT, "volume_content_source")
    check(etcd_get(PREFIX + "names/e1") is None, "a refused clone left names/e1")
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      capacity_range=cr(required_bytes=2 * MiB, limit_bytes=MiB)),
                C.OUT_OF_RANGE, "limit_bytes")
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      capacity_range=cr(required_bytes=1 << 60)), C.OUT_OF_RANGE,
                "required_bytes")
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      capacity_range=cr(limit_bytes=100)), C.OUT_OF_RANGE, "limit_bytes")
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      capacity_range=cr(required_bytes=-5)), C.INVALID_ARGUMENT,
                "required_bytes")
    check(etcd_get(PREFIX + "names/e1") is None, "a refused CreateVolume left a name record")
    log("CreateVolume errors: ok")


def test_create(t):
    pb, C = t.pb, t.grpc.StatusCode
    req = pb.CreateVolumeRequest(
        name="pvc-main", capacity_range=pb.CapacityRange(required_bytes=64 * MiB),
        volume_capabilities=[cap(pb)],
        parameters={"replicas": "3", "chunkSize": "1M", "transport": "tcp", "minSize": "3",
                    "csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/fstype": "ext4"},
        accessibility_requirements=pb.TopologyRequirement(
            requisite=[topo(pb, "node-a"), topo(pb, "node-b")],
            preferred=[topo(pb, "node-b")]))
    r = twice(t.ctl.CreateVolume, req)
    v = r.volume
    check(v.volume_id.startswith("vol-") and len(v.volume_id) == 20, "volume_id %r" % v.volume_id)
    check(v.capacity_bytes == 64 * MiB, "capacity %d" % v.capacity_bytes)
    check(dict(v.volume_context) == {"replicas": "3", "chunkSize": str(MiB), "transport": "tcp"},
          "volume_context %s" % dict(v.volume_context))
    check([dict(x.segments) for x in v.accessible_topology] ==
          [{TOPO: "node-b"}, {TOPO: "node-a"}], "accessible_topology %s" % v.accessible_topology)
    rec = json.loads(etcd_get(PREFIX + "volumes/" + v.volume_id)["value"])
    check(rec["size"] == 64 * MiB and rec["replicas"] == 3 and rec["min_size"] == 3,
          "record %s" % rec)
    sec = etcd_get(PREFIX + "secrets/" + v.volume_id)
    check(sec and len(sec["value"]) == 64 and int(sec["value"], 16) >= 0, "secret %s" % sec)
    # Same name, other size / transport: ALREADY_EXISTS.
    bad = pb.CreateVolumeRequest()
    bad.CopyFrom(req)
    bad.capacity_range.required_bytes = 128 * MiB
    expect_code(t.ctl.CreateVolume, bad, C.ALREADY_EXISTS, "pvc-main")
    bad.CopyFrom(req)
    bad.parameters["transport"] = "rdma"
    expect_code(t.ctl.CreateVolume, bad, C.ALREADY_EXISTS, "transport")
    check(etcd_get(PREFIX + "secrets/" + v.volume_id)["value"] == sec["value"],
          "a repeated CreateVolume changed the secret")
    # Rounding to 4 KiB, the 1 GiB default, block and read-only-many modes.
    r2 = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-round", capacity_range=pb.CapacityRange(required_bytes=10000),
        volume_capabilities=[cap(pb, block=True)]), timeout=30)
    check(r2.volume.capacity_bytes == 12288, "10000 bytes rounded to %d" % r2.volume.capacity_bytes)
    check(len(r2.volume.accessible_topology) == 0, "topology without requirement")
    r3 = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-default", volume_capabilities=[cap(pb, "MULTI_NODE_READER_ONLY")]), timeout=30)
    check(r3.volume.capacity_bytes == 1 << 30, "default size %d" % r3.volume.capacity_bytes)
    check(r3.volume.volume_context["replicas"] == "3" and
          r3.volume.volume_context["transport"] == "auto", "defaults %s" % r3.volume)
    # The StorageClass's frontend reaches the node in the volume context.
    rf = twice(t.ctl.CreateVolume, pb.CreateVolumeRequest(
        name="pvc-ublk", capacity_range=pb.CapacityRange(required_bytes=MiB),
        volume_capabilities=[cap(pb)], parameters={"frontend": "ublk"}))
    check(rf.volume.volume_context["frontend"] == "ublk", "frontend %s" % rf.volume)
    rec = json.loads(etcd_get(PREFIX + "volumes/" + rf.volume.volume_id)["value"])
    check(rec["params"].get("frontend") == "ublk", "record params %s" % rec["params"])
    # Same name with another frontend, or none: ALREADY_EXISTS.
    for other in ({"frontend": "nbd"}, {}):
        expect_code(t.ctl.CreateVolume, pb.CreateVolumeRequest(
            name="pvc-ublk", capacity_range=pb.CapacityRange(required_bytes=MiB),
            volume_capabilities=[cap(pb)], parameters=other), C.ALREADY_EXISTS, "frontend")
    r4 = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-limit", capacity_range=pb.CapacityRange(limit_bytes=5 * MiB + 100),
        volume_capabilities=[cap(pb, "SINGLE_NODE_READER_ONLY", block=True)]), timeout=30)
    check(r4.volume.capacity_bytes == 5 * MiB, "limit-only size %d" % r4.volume.capacity_bytes)
    log("CreateVolume: ok (%s)" % v.volume_id)
    return v.volume_id


def at_once(calls):
    """Runs the (method, request) pairs at the same moment (a barrier), each
    once, without retry; returns ("ok", response) or (code name, details)."""
    barrier = threading.Barrier(len(calls))

    def one(mr):
        m, req = mr
        barrier.wait(10)
        try:
            return ("ok", m(req, timeout=60, _retry=False))
        except m.router.grpc.RpcError as e:
            return (e.code().name, e.details())

    with concurrent.futures.ThreadPoolExecutor(len(calls)) as ex:
        return list(ex.map(one, calls))


def test_create_race(t):
    """CreateVolume of one name sent to both replicas at once: one volume."""
    pb = t.pb
    a, b = t.on("ctrl-a"), t.on("ctrl-b")
    aborted = 0
    for round_ in range(4):
        name = "pvc-race-%d" % round_
        req = pb.CreateVolumeRequest(name=name, capacity_range=pb.CapacityRange(
            required_bytes=8 * MiB), volume_capabilities=[cap(pb)])
        res = at_once([(a.ctl.CreateVolume, req), (b.ctl.CreateVolume, req),
                       (a.ctl.CreateVolume, req), (b.ctl.CreateVolume, req)])
        ids = {x[1].volume.volume_id for x in res if x[0] == "ok"}
        for x in res:
            check(x[0] in ("ok",) + RETRIABLE, "concurrent CreateVolume: %s" % (x,))
        aborted += sum(1 for x in res if x[0] != "ok")
        # The refused ones retry as the provisioner would, on either replica.
        for x in res:
            if x[0] != "ok":
                ids.add(t.ctl.CreateVolume(req).volume.volume_id)
        check(len(ids) == 1, "concurrent CreateVolume of one name gave ids %s (%s)" % (ids, res))
        vols = [json.loads(kv["value"]) for kv in etcd_range(PREFIX + "volumes/", prefix=True)]
        check(sum(1 for x in vols if x["name"] == name) == 1,
              "%s exists %d times" % (name, sum(1 for x in vols if x["name"] == name)))
        check(etcd_get(PREFIX + "names/" + name)["value"] in ids, "name record of %s" % name)
    log("concurrent CreateVolume on both replicas: ok (%d refused with a retriable code, "
        "then retried)" % aborted)


def test_validate(t, vid):
    pb, C = t.pb, t.grpc.StatusCode
    V = t.ctl.ValidateVolumeCapabilities
    mk = pb.ValidateVolumeCapabilitiesRequest
    expect_code(V, mk(volume_capabilities=[cap(pb)]), C.INVALID_ARGUMENT, "volume_id")
    expect_code(V, mk(volume_id=vid), C.INVALID_ARGUMENT, "volume_capabilities")
    expect_code(V, mk(volume_id=vid, volume_capabilities=[pb.VolumeCapability(
        block=pb.VolumeCapability.BlockVolume())]), C.INVALID_ARGUMENT, "access_mode")
    expect_code(V, mk(volume_id="vol-00000000000000ff", volume_capabilities=[cap(pb)]),
                C.NOT_FOUND, "vol-00000000000000ff")
    expect_code(V, mk(volume_id="pvc-nope", volume_capabilities=[cap(pb)]), C.NOT_FOUND)
    ok = twice(V, mk(volume_id=vid, volume_capabilities=[cap(pb), cap(pb, block=True)],
                     volume_context={"replicas": "3", "transport": "tcp"}))
    check(ok.HasField("confirmed") and len(ok.confirmed.volume_capabilities) == 2,
          "not confirmed: %s" % ok)
    check(dict(ok.confirmed.volume_context) == {"replicas": "3", "transport": "tcp"},
          "confirmed context %s" % ok.confirmed)
    no = twice(V, mk(volume_id=vid, volume_capabilities=[cap(pb, "MULTI_NODE_MULTI_WRITER")]))
    check(not no.HasField("confirmed") and "MULTI_NODE_MULTI_WRITER" in no.message,
          "unsupported mode confirmed: %s" % no)
    no = V(mk(volume_id=vid, volume_capabilities=[cap(pb)], volume_context={"replicas": "1"}),
           timeout=30)
    check(not no.HasField("confirmed") and "replicas" in no.message, "context mismatch: %s" % no)
    no = V(mk(volume_id=vid, volume_capabilities=[cap(pb)], parameters={"bogus": "1"}),
           timeout=30)
    check(not no.HasField("confirmed") and no.message, "bad parameters confirmed: %s" % no)
    log("ValidateVolumeCapabilities: ok")


def test_list(t):
    pb, C = t.pb, t.grpc.StatusCode
    L = t.ctl.ListVolumes
    for i in range(5):
        t.ctl.CreateVolume(pb.CreateVolumeRequest(
            name="pvc-list-%d" % i, capacity_range=pb.CapacityRange(required_bytes=MiB),
            volume_capabilities=[cap(pb)], parameters={"replicas": "1"}), timeout=30)
    full = twice(L, pb.ListVolumesRequest())
    all_ids = [e.volume.volume_id for e in full.entries]
    check(len(all_ids) == len(set(all_ids)) and len(all_ids) >= 9, "full list %s" % all_ids)
    check(full.next_token == "", "unpaged list has next_token %r" % full.next_token)
    got, token, pages = [], "", 0
    while True:
        page = twice(L, pb.ListVolumesRequest(max_entries=2, starting_token=token))
        check(len(page.entries) <= 2, "page of %d entries" % len(page.entries))
        got += [e.volume.volume_id for e in page.entries]
        pages += 1
        token = page.next_token
        if not token:
            break
        check(pages < 50, "paging does not end")
    check(sorted(got) == sorted(all_ids), "paged %s vs full %s" % (got, all_ids))
    check(pages >= 5, "only %d pages of 2 for %d volumes" % (pages, len(all_ids)))
    for e in full.entries:
        check(e.volume.capacity_bytes > 0 and e.status.HasField("volume_condition") and
              not e.status.volume_condition.abnormal, "entry %s" % e)
    expect_code(L, pb.ListVolumesRequest(starting_token="garbage"), C.ABORTED, "starting_token")
    expect_code(L, pb.ListVolumesRequest(max_entries=-1), C.INVALID_ARGUMENT, "max_entries")
    log("ListVolumes: ok (%d volumes, %d pages)" % (len(all_ids), pages))


def nodes_free():
    """The storage nodes' free bytes, from their records (statvfs of each
    data dir, refreshed every 10 s: clone chunk files already lower it)."""
    return sorted((json.loads(kv["value"])["id"], json.loads(kv["value"])["free"])
                  for kv in etcd_range(PREFIX + "nodes/", prefix=True))


def test_capacity(t):
    """available_capacity is the nodes' free space over the replicas:
    snapshot space (clone chunk files, docs/SNAPSHOTS.md section 6) counts
    once, through free, never added back nor taken off again."""
    pb, C = t.pb, t.grpc.StatusCode
    G = t.ctl.GetCapacity
    for _ in range(10):  # a node refreshing its free between the reads: again
        before = nodes_free()
        c3 = G(pb.GetCapacityRequest(volume_capabilities=[cap(pb)]),
               timeout=30).available_capacity
        c1 = G(pb.GetCapacityRequest(parameters={"replicas": "1"},
                                     accessible_topology=topo(pb, "node-a")),
               timeout=30).available_capacity
        if nodes_free() == before:
            break
    total = sum(f for _, f in before)
    check(len(before) == 3 and c3 == total // 3 // 4096 * 4096 and
          c1 == total // 4096 * 4096,
          "capacity replicas=3 %d, replicas=1 %d; nodes' free %s" % (c3, c1, before))
    check(c3 > 0 and c1 > 2 * c3, "capacity replicas=3 %d, replicas=1 %d" % (c3, c1))
    expect_code(G, pb.GetCapacityRequest(parameters={"nope": "1"}), C.INVALID_ARGUMENT, "nope")
    expect_code(G, pb.GetCapacityRequest(volume_capabilities=[cap(pb, "MULTI_NODE_MULTI_WRITER")]),
                C.INVALID_ARGUMENT, "volume_capabilities")
    log("GetCapacity: ok (replicas=3: %d, replicas=1: %d)" % (c3, c1))


def test_publish(t, vid):
    pb, C = t.pb, t.grpc.StatusCode
    P, U = t.ctl.ControllerPublishVolume, t.ctl.ControllerUnpublishVolume
    mk = pb.ControllerPublishVolumeRequest
    expect_code(P, mk(node_id="node-a", volume_capability=cap(pb)), C.INVALID_ARGUMENT,
                "volume_id")
    expect_code(P, mk(volume_id=vid, volume_capability=cap(pb)), C.INVALID_ARGUMENT, "node_id")
    expect_code(P, mk(volume_id=vid, node_id="node-a"), C.INVALID_ARGUMENT, "volume_capability")
    expect_code(P, mk(volume_id=vid, node_id="node-a",
                      volume_capability=cap(pb, "MULTI_NODE_MULTI_WRITER")),
                C.INVALID_ARGUMENT, "volume_capability")
    expect_code(P, mk(volume_id="vol-00000000000000ff", node_id="node-a",
                      volume_capability=cap(pb)), C.NOT_FOUND, "vol-00000000000000ff")
    expect_code(P, mk(volume_id=vid, node_id="bad|node", volume_capability=cap(pb)),
                C.NOT_FOUND, "node_id")
    expect_code(P, mk(volume_id=vid, node_id="node-zz", volume_capability=cap(pb)),
                C.NOT_FOUND, "node-zz", "zipline-node")
    check(etcd_get(PREFIX + "attachments/" + vid) is None, "refused publish left a record")

    a = twice(P, mk(volume_id=vid, node_id="node-a", volume_capability=cap(pb)))
    ctx = dict(a.publish_context)
    check(set(ctx) == {"epoch", "token", "etcdPrefix"}, "publish_context %s" % ctx)
    check(ctx["etcdPrefix"] == PREFIX, "etcdPrefix %r" % ctx["etcdPrefix"])
    rec = etcd_get(PREFIX + "attachments/" + vid)
    body = json.loads(rec["value"])
    check(body["node"] == "node-a" and body["readonly"] is False and body["time"] > 0,
          "attachment %s" % body)
    check(body["epoch"] == rec["create_revision"] == int(ctx["epoch"]),
          "epoch %s, record create_revision %d, publish_context %s" % (
              body["epoch"], rec["create_revision"], ctx["epoch"]))
    secret = bytes.fromhex(etcd_get(PREFIX + "secrets/" + vid)["value"])
    want = hmac.new(secret, ("%s|node-a|%s" % (vid, ctx["epoch"])).encode(),
                    hashlib.sha256).hexdigest()
    check(ctx["token"] == want, "token %s, expected %s" % (ctx["token"], want))

    expect_code(P, mk(volume_id=vid, node_id="node-a", volume_capability=cap(pb), readonly=True),
                C.ALREADY_EXISTS, "readonly")
    expect_code(P, mk(volume_id=vid, node_id="node-b", volume_capability=cap(pb)),
                C.FAILED_PRECONDITION, "node-a")
    expect_code(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=vid),
                C.FAILED_PRECONDITION, "node-a")
    g = twice(t.ctl.ControllerGetVolume, pb.ControllerGetVolumeRequest(volume_id=vid))
    check(list(g.status.published_node_ids) == ["node-a"], "published nodes %s" % g.status)
    lst = t.ctl.ListVolumes(pb.ListVolumesRequest(), timeout=30)
    pub = [list(e.status.published_node_ids) for e in lst.entries if e.volume.volume_id == vid]
    check(pub == [["node-a"]], "ListVolumes published nodes %s" % pub)

    um = pb.ControllerUnpublishVolumeRequest
    expect_code(U, um(node_id="node-a"), C.INVALID_ARGUMENT, "volume_id")
    twice(U, um(volume_id=vid, node_id="node-b"))  # not attached there: OK, no change
    check(etcd_get(PREFIX + "attachments/" + vid) is not None,
          "unpublish from another node removed the attachment")
    twice(U, um(volume_id=vid, node_id="node-a"))
    check(etcd_get(PREFIX + "attachments/" + vid) is None, "attachment left after unpublish")
    twice(U, um(volume_id="vol-00000000000000ff", node_id="node-a"))
    twice(U, um(volume_id="whatever", node_id="node-a"))

    b = twice(P, mk(volume_id=vid, node_id="node-b", volume_capability=cap(pb), readonly=True))
    check(int(b.publish_context["epoch"]) > int(ctx["epoch"]),
          "new attachment epoch %s is not above the old %s" % (b.publish_context["epoch"],
                                                               ctx["epoch"]))
    check(b.publish_context["token"] != ctx["token"], "token did not change with the node")
    twice(U, um(volume_id=vid))  # empty node_id: from every node
    check(etcd_get(PREFIX + "attachments/" + vid) is None, "unpublish from all nodes")
    log("Publish/Unpublish: ok")


def test_expand_getvolume(t, vid):
    pb, C = t.pb, t.grpc.StatusCode
    X = t.ctl.ControllerExpandVolume
    mk = pb.ControllerExpandVolumeRequest
    cr = pb.CapacityRange
    expect_code(X, mk(capacity_range=cr(required_bytes=128 * MiB)), C.INVALID_ARGUMENT,
                "volume_id")
    expect_code(X, mk(volume_id=vid), C.INVALID_ARGUMENT, "capacity_range")
    # A volume named like the id asked for is another volume: NOT_FOUND, and
    # nothing of it changes (lib/meta's ZL_VMOD_BY_ID; test_modify too).
    decoy = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="vol-00000000000000ff", capacity_range=cr(required_bytes=MiB),
        volume_capabilities=[cap(pb)]), timeout=30).volume.volume_id
    check(decoy != "vol-00000000000000ff", "decoy id %s" % decoy)
    expect_code(X, mk(volume_id="vol-00000000000000ff", capacity_range=cr(
        required_bytes=128 * MiB)), C.NOT_FOUND, "vol-00000000000000ff")
    drec = json.loads(etcd_get(PREFIX + "volumes/" + decoy)["value"])
    check(drec["size"] == MiB, "an expand of another id grew volume %s: %s" % (decoy, drec))
    # Already larger than asked (CSI: OK with its size), unless above the
    # limit; the record does not change.
    size0 = json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])["size"]
    r = twice(X, mk(volume_id=vid, capacity_range=cr(required_bytes=MiB)))
    check(r.capacity_bytes == size0, "expand below the size: %s (size %d)" % (r, size0))
    expect_code(X, mk(volume_id=vid, capacity_range=cr(required_bytes=MiB, limit_bytes=MiB)),
                C.OUT_OF_RANGE, "shrink")
    check(json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])["size"] == size0,
          "an expand below the size changed the record")
    expect_code(X, mk(volume_id=vid, capacity_range=cr(required_bytes=256 * MiB,
                                                       limit_bytes=200 * MiB)),
                C.OUT_OF_RANGE, "limit_bytes")
    r = twice(X, mk(volume_id=vid, capacity_range=cr(required_bytes=128 * MiB),
                    volume_capability=cap(pb)))
    check(r.capacity_bytes == 128 * MiB and r.node_expansion_required,
          "expand mount: %s" % r)
    rec = json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])
    check(rec["size"] == 128 * MiB, "record size after expand %d" % rec["size"])
    r = twice(X, mk(volume_id=vid, capacity_range=cr(required_bytes=160 * MiB),
                    volume_capability=cap(pb, block=True)))
    check(r.capacity_bytes == 160 * MiB and not r.node_expansion_required,
          "expand block: %s" % r)
    G = t.ctl.ControllerGetVolume
    expect_code(G, pb.ControllerGetVolumeRequest(), C.INVALID_ARGUMENT, "volume_id")
    expect_code(G, pb.ControllerGetVolumeRequest(volume_id="vol-00000000000000ff"),
                C.NOT_FOUND)
    g = twice(G, pb.ControllerGetVolumeRequest(volume_id=vid))
    check(g.volume.capacity_bytes == 160 * MiB and not g.status.published_node_ids and
          not g.status.volume_condition.abnormal, "GetVolume %s" % g)
    log("ControllerExpandVolume + ControllerGetVolume: ok")


def test_modify(t, vid):
    """ControllerModifyVolume (issue 26): the limits, ioTimeout and minSize of
    an existing volume change in its record; anything else is refused and
    changes nothing."""
    pb, C = t.pb, t.grpc.StatusCode
    M = t.ctl.ControllerModifyVolume
    mk = pb.ControllerModifyVolumeRequest

    def rec():
        return json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])

    before = rec()
    check("qos" not in before and "io_timeout" not in before, "record before %s" % before)
    expect_code(M, mk(mutable_parameters={"writeIops": "2000"}), C.INVALID_ARGUMENT,
                "volume_id")
    expect_code(M, mk(volume_id=vid), C.INVALID_ARGUMENT, "mutable_parameters", "writeIops")
    expect_code(M, mk(volume_id="vol-00000000000000ff", mutable_parameters={"iops": "10"}),
                C.NOT_FOUND, "vol-00000000000000ff")
    # The volume named vol-00000000000000ff (test_expand_getvolume) kept its record.
    decoy = etcd_get(PREFIX + "names/vol-00000000000000ff")["value"]
    drec = json.loads(etcd_get(PREFIX + "volumes/" + decoy)["value"])
    check("qos" not in drec, "a modify of another id changed volume %s: %s" % (decoy, drec))
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=decoy), timeout=60)
    expect_code(M, mk(volume_id="pvc-main", mutable_parameters={"iops": "10"}),
                C.NOT_FOUND, "pvc-main")
    for k, v in (("replicas", "2"), ("chunkSize", "1M"), ("transport", "tcp"),
                 ("noSuchKnob", "1"), ("csi.storage.k8s.io/pvc/name", "x")):
        expect_code(M, mk(volume_id=vid, mutable_parameters={"writeIops": "5", k: v}),
                    C.INVALID_ARGUMENT, k, "cannot be changed", "readIops")
    for k, v in (("writeIops", "-1"), ("writeIops", "2K"), ("readBps", "lots"),
                 ("ioTimeout", "604801"), ("minSize", "0"), ("iopsBurst", "")):
        expect_code(M, mk(volume_id=vid, mutable_parameters={k: v}), C.INVALID_ARGUMENT,
                    "parameters[%s]" % k)
    expect_code(M, mk(volume_id=vid, mutable_parameters={"minSize": "3", "replicas": "3"}),
                C.INVALID_ARGUMENT, "replicas")
    check(rec() == before, "a refused ModifyVolume changed the record: %s" % rec())
    # min_size above the volume's replicas (pvc-main has 3: a 1-replica
    # volume shows the check against the record, not the parameter range).
    one = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-modify-one", capacity_range=pb.CapacityRange(required_bytes=4 * MiB),
        volume_capabilities=[cap(pb)], parameters={"replicas": "1", "readIops": "7"}),
        timeout=60).volume.volume_id
    orec = json.loads(etcd_get(PREFIX + "volumes/" + one)["value"])
    check(orec.get("qos") == {"read_iops": 7}, "CreateVolume readIops: record %s" % orec)
    expect_code(M, mk(volume_id=one, mutable_parameters={"minSize": "2"}), C.INVALID_ARGUMENT,
                "minSize", "1 replicas")
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=one), timeout=60)

    r = twice(M, mk(volume_id=vid, mutable_parameters={
        "writeIops": "2000", "readBps": "100M", "iopsBurst": "64", "ioTimeout": "30",
        "minSize": "2"}))
    check(r == pb.ControllerModifyVolumeResponse(), "response %s" % r)
    after = rec()
    check(after.get("qos") == {"write_iops": 2000, "read_bps": 100 * MiB,
                               "read_iops_burst": 64, "write_iops_burst": 64} and
          after.get("io_timeout") == 30 and after["min_size"] == 2,
          "record after ModifyVolume %s" % after)
    shape = ("id", "name", "size", "chunk_size", "replicas", "slices", "state", "created",
             "params")
    check({k: after.get(k) for k in shape} == {k: before.get(k) for k in shape},
          "ModifyVolume changed more than its knobs:\n%s\nvs\n%s" % (after, before))
    # Back to unlimited: 0 removes the limit from the record.
    twice(M, mk(volume_id=vid, mutable_parameters={"iops": "0", "readBps": "0",
                                                   "iopsBurst": "0", "ioTimeout": "0"}))
    back = rec()
    check("qos" not in back and "io_timeout" not in back and back["min_size"] == 2,
          "record after unlimiting %s" % back)
    check("ControllerModifyVolume id=%s" % vid in ctrl_log("ctrl-a") + ctrl_log("ctrl-b"),
          "no ControllerModifyVolume line in the controller's log")
    log("ControllerModifyVolume: ok")


def test_snapshots(t, vid):
    """CreateSnapshot, ListSnapshots, DeleteSnapshot (docs/SNAPSHOTS.md step
    5): the spec's codes, idempotency across replicas, the records in etcd,
    paging and filters, and DeleteVolume refused while snapshots exist."""
    pb, C = t.pb, t.grpc.StatusCode
    CS, DS, LS = t.ctl.CreateSnapshot, t.ctl.DeleteSnapshot, t.ctl.ListSnapshots
    expect_code(CS, pb.CreateSnapshotRequest(source_volume_id=vid), C.INVALID_ARGUMENT, "name")
    expect_code(CS, pb.CreateSnapshotRequest(name="s"), C.INVALID_ARGUMENT, "source_volume_id")
    expect_code(CS, pb.CreateSnapshotRequest(name="s", source_volume_id=vid,
                                             parameters={"speed": "fast"}),
                C.INVALID_ARGUMENT, "parameters[speed]")
    expect_code(CS, pb.CreateSnapshotRequest(name="bad/name", source_volume_id=vid),
                C.INVALID_ARGUMENT, "name")
    for src in ("vol-00000000000000ff", "not-a-zipline-id"):
        expect_code(CS, pb.CreateSnapshotRequest(name="s", source_volume_id=src),
                    C.NOT_FOUND, src)
    other = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-snap-other", capacity_range=pb.CapacityRange(required_bytes=MiB),
        volume_capabilities=[cap(pb)]), timeout=30).volume.volume_id
    size = json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])["size"]
    now = time.time()
    snaps = []
    for name in ("vs-1", "vs-2", "vs-3"):
        r = twice(CS, pb.CreateSnapshotRequest(
            name=name, source_volume_id=vid,
            parameters={"csi.storage.k8s.io/volumesnapshot/name": name}))
        s = r.snapshot
        check(s.snapshot_id.startswith("snap-") and s.source_volume_id == vid and
              s.size_bytes == size and s.ready_to_use and
              abs(s.creation_time.seconds - now) < 120, "CreateSnapshot %s answered %s" % (name, s))
        snaps.append(s.snapshot_id)
    so = twice(CS, pb.CreateSnapshotRequest(name="vs-o", source_volume_id=other)).snapshot
    expect_code(CS, pb.CreateSnapshotRequest(name="vs-1", source_volume_id=other),
                C.ALREADY_EXISTS, "vs-1")
    rec = json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])
    check(rec.get("snap_seq") == 3 and rec.get("snaps") == [1, 2, 3],
          "volume record after three snapshots: snap_seq %s snaps %s" % (
              rec.get("snap_seq"), rec.get("snaps")))
    for i, sid in enumerate(snaps):
        body = json.loads(etcd_get(PREFIX + "snapshots/" + sid)["value"])
        check(body["vol"] == vid and body["seq"] == i + 1 and body["name"] == "vs-%d" % (i + 1),
              "record of %s: %s" % (sid, body))
        check(etcd_get(PREFIX + "snapnames/vs-%d" % (i + 1))["value"] == sid,
              "snapnames/vs-%d does not name %s" % (i + 1, sid))

    def ids(req):
        return [e.snapshot.snapshot_id for e in LS(req, timeout=30).entries]
    check(ids(pb.ListSnapshotsRequest(source_volume_id=vid)) == snaps,
          "ListSnapshots of %s: %s, not %s" % (vid, ids(pb.ListSnapshotsRequest(
              source_volume_id=vid)), snaps))
    every = ids(pb.ListSnapshotsRequest())
    check(set(snaps + [so.snapshot_id]) <= set(every), "ListSnapshots misses some: %s" % every)
    check(ids(pb.ListSnapshotsRequest(snapshot_id=snaps[1])) == [snaps[1]], "by snapshot_id")
    check(ids(pb.ListSnapshotsRequest(snapshot_id=snaps[1], source_volume_id=other)) == [],
          "by snapshot_id of another source")
    for bad in ("snap-00000000000000ff", "not-a-snapshot"):
        check(ids(pb.ListSnapshotsRequest(snapshot_id=bad)) == [], "unknown snapshot_id " + bad)
    check(ids(pb.ListSnapshotsRequest(source_volume_id="vol-00000000000000ff")) == [],
          "snapshots of an unknown volume")
    paged, tok = [], ""
    for _ in range(len(every) + 1):
        r = LS(pb.ListSnapshotsRequest(max_entries=2, starting_token=tok), timeout=30)
        check(len(r.entries) <= 2, "page of %d entries for max_entries=2" % len(r.entries))
        paged += [e.snapshot.snapshot_id for e in r.entries]
        tok = r.next_token
        if not tok:
            break
    check(paged == every, "pages %s differ from the listing %s" % (paged, every))
    expect_code(LS, pb.ListSnapshotsRequest(starting_token="zz"), C.ABORTED, "starting_token")
    expect_code(LS, pb.ListSnapshotsRequest(max_entries=-1), C.INVALID_ARGUMENT, "max_entries")

    # The snapshots' data are the volume's chunks: no DeleteVolume under them.
    expect_code(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=vid),
                C.FAILED_PRECONDITION, "3 snapshots", "DeleteSnapshot")
    check(etcd_get(PREFIX + "volumes/" + vid) is not None, "volume gone after a refused delete")
    expect_code(DS, pb.DeleteSnapshotRequest(), C.INVALID_ARGUMENT, "snapshot_id")
    for sid in snaps + [so.snapshot_id, "snap-00000000000000ff", "not-a-snapshot"]:
        twice(DS, pb.DeleteSnapshotRequest(snapshot_id=sid))
    check(ids(pb.ListSnapshotsRequest(source_volume_id=vid)) == [], "snapshots left after delete")
    check(not etcd_range(PREFIX + "snapshots/", True) and
          not etcd_range(PREFIX + "snapnames/", True), "snapshot records left after delete")
    rec = json.loads(etcd_get(PREFIX + "volumes/" + vid)["value"])
    check(rec.get("snap_seq") == 3 and not rec.get("snaps"),
          "volume record after the deletes: %s %s" % (rec.get("snap_seq"), rec.get("snaps")))
    twice(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=other))
    log("snapshots: ok (create idempotent, ALREADY_EXISTS, NOT_FOUND, list filters and "
        "pages, DeleteVolume refused while they exist, delete idempotent)")


def test_clones(t, vid):
    """CreateVolume with a snapshot or a volume as its content source
    (docs/SNAPSHOTS.md §4): the clone's record names its parent, the
    dependant keys hold the sources, the response echoes the source; size
    at least the source's; idempotent; ALREADY_EXISTS for the name with
    another source; the sources cannot be deleted while clones depend on
    them (FAILED_PRECONDITION naming the clone)."""
    pb, C = t.pb, t.grpc.StatusCode
    CV, VCS = t.ctl.CreateVolume, pb.VolumeContentSource
    src = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-clone-src", capacity_range=pb.CapacityRange(required_bytes=4 * MiB),
        volume_capabilities=[cap(pb)]), timeout=30).volume.volume_id
    snap = twice(t.ctl.CreateSnapshot, pb.CreateSnapshotRequest(
        name="vs-clone", source_volume_id=src)).snapshot.snapshot_id
    from_snap = VCS(snapshot=VCS.SnapshotSource(snapshot_id=snap))
    from_vol = VCS(volume=VCS.VolumeSource(volume_id=src))

    def mk(name, source, size=0, limit=0):
        # flatten=false: the leader's background flatten leaves these alone
        # (test_flatten has its own), so the sources stay pinned here.
        return pb.CreateVolumeRequest(
            name=name, volume_capabilities=[cap(pb)], volume_content_source=source,
            parameters={"flatten": "false"},
            capacity_range=pb.CapacityRange(required_bytes=size, limit_bytes=limit)
            if size or limit else None)
    # The source's size when none is asked; larger when asked.
    a = twice(CV, mk("pvc-clone-a", from_snap)).volume
    check(a.capacity_bytes == 4 * MiB and a.content_source.snapshot.snapshot_id == snap,
          "clone of a snapshot: %s" % a)
    b = twice(CV, mk("pvc-clone-b", from_vol, size=8 * MiB)).volume
    check(b.capacity_bytes == 8 * MiB and b.content_source.volume.volume_id == src,
          "clone of a volume: %s" % b)
    ra = json.loads(etcd_get(PREFIX + "volumes/" + a.volume_id)["value"])
    rb = json.loads(etcd_get(PREFIX + "volumes/" + b.volume_id)["value"])
    check(ra.get("parent", {}).get("vol") == src and ra["parent"].get("seq") == 1 and
          rb.get("parent", {}).get("vol") == src and rb["parent"].get("seq") == 2,
          "clone parents: %s %s" % (ra.get("parent"), rb.get("parent")))
    deps = sorted(kv["key"] for kv in etcd_range(PREFIX + "dependants/" + src + "/", True))
    check(deps == sorted(["%sdependants/%s/1/%s" % (PREFIX, src, a.volume_id),
                          "%sdependants/%s/2/%s" % (PREFIX, src, b.volume_id)]),
          "dependant keys %s" % deps)
    # Refusals: smaller than the source, a limit below it, the name taken by
    # another source or by a plain volume request; nothing is created.
    expect_code(CV, mk("pvc-clone-c", from_snap, size=2 * MiB), C.OUT_OF_RANGE, "source")
    expect_code(CV, mk("pvc-clone-c", from_vol, limit=2 * MiB), C.OUT_OF_RANGE, "limit_bytes")
    check(etcd_get(PREFIX + "names/pvc-clone-c") is None, "a refused clone left its name")
    expect_code(CV, mk("pvc-clone-a", from_vol), C.ALREADY_EXISTS, "pvc-clone-a")
    expect_code(CV, pb.CreateVolumeRequest(name="pvc-clone-a", volume_capabilities=[cap(pb)],
                                           capacity_range=pb.CapacityRange(
                                               required_bytes=4 * MiB)),
                C.ALREADY_EXISTS, "clone")
    check(ra.get("params", {}).get("flatten") == "false", "params %s" % ra.get("params"))
    expect_code(CV, pb.CreateVolumeRequest(name="pvc-clone-c", volume_capabilities=[cap(pb)],
                                           parameters={"flatten": "no"}),
                C.INVALID_ARGUMENT, "flatten")
    # The sources stay while clones read through them (the leader's passes,
    # every GC_INTERVAL, leave clones of a flatten=false class alone).
    expect_code(t.ctl.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot_id=snap),
                C.FAILED_PRECONDITION, "pvc-clone-a", "flatten")
    expect_code(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=src),
                C.FAILED_PRECONDITION, "flatten")
    check(etcd_get(PREFIX + "snapshots/" + snap) is not None, "refused delete removed the snapshot")
    check("flatten: start" not in ctrl_log("ctrl-a") + ctrl_log("ctrl-b"),
          "a clone of a flatten=false class was flattened")
    # The clones go first, then the sources can.
    for v in (a.volume_id, b.volume_id):
        twice(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=v))
    check(not etcd_range(PREFIX + "dependants/", True), "dependant keys left: %s"
          % etcd_range(PREFIX + "dependants/", True))
    twice(t.ctl.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot_id=snap))
    twice(t.ctl.DeleteVolume, pb.DeleteVolumeRequest(volume_id=src))
    check(not etcd_range(PREFIX + "snapshots/", True),
          "snapshots left (the volume clone's internal one?): %s"
          % etcd_range(PREFIX + "snapshots/", True))
    log("clones: ok (from a snapshot and a volume, sizes, parents and dependants, "
        "OUT_OF_RANGE, ALREADY_EXISTS, sources kept while clones depend on them)")


FLAT_RATE = 4  # --flatten-rate of the replicas (MiB/s)


def test_flatten_start(t):
    """The leader's background flatten (docs/SNAPSHOTS.md §4): a CSI restore
    of a snapshot that holds an oracle (32 MiB of random data, 8 chunks of
    4 MiB) is flattened at FLAT_RATE MiB/s by the leader, ctrl-a. Returns
    once ctrl-a logged progress; test_leader then kills it -9 mid-way and
    test_flatten_finish checks that the next leader finishes it."""
    pb = t.pb
    src = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-flat-src", capacity_range=pb.CapacityRange(required_bytes=32 * MiB),
        volume_capabilities=[cap(pb)]), timeout=30).volume.volume_id
    oracle = os.path.join(CL_DIR, "flat-oracle.bin")
    with open(oracle, "wb") as f:
        f.write(os.urandom(32 * MiB))
    subprocess.run([os.path.join(CL_BIN, "zl"), "--etcd", ETCD, "volume", "import", src,
                    oracle], check=True, stdout=subprocess.DEVNULL)
    snap = t.ctl.CreateSnapshot(pb.CreateSnapshotRequest(
        name="vs-flat", source_volume_id=src), timeout=30).snapshot.snapshot_id
    VCS = pb.VolumeContentSource
    clone = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-flat", volume_capabilities=[cap(pb)],
        volume_content_source=VCS(snapshot=VCS.SnapshotSource(snapshot_id=snap))),
        timeout=30).volume.volume_id
    t0 = time.monotonic()
    wait_until(lambda: ("flatten: progress vol=" + clone) in ctrl_log("ctrl-a"), 20,
               "ctrl-a logging progress of its flatten of " + clone)
    log("flatten: ctrl-a flattening %s at %d MiB/s, progress after %.1fs"
        % (clone, FLAT_RATE, time.monotonic() - t0))
    return {"src": src, "snap": snap, "clone": clone, "oracle": oracle}


def test_flatten_killed(f):
    """Right after the kill -9 of ctrl-a: the clone still reads through its
    source (ctrl-a did not finish), and some chunks are its own already."""
    rec = json.loads(etcd_get(PREFIX + "volumes/" + f["clone"])["value"])
    check(rec.get("parent", {}).get("vol") == f["src"],
          "the clone lost its parent before the flatten finished: %s" % rec.get("parent"))
    check(("flatten: done vol=" + f["clone"]) not in ctrl_log("ctrl-a"),
          "ctrl-a finished the flatten before it was killed (raise the size)")


def test_flatten_finish(t, f):
    """The new leader ctrl-b runs the flatten again from scratch and copies
    only what ctrl-a had not; then DeleteSnapshot (FAILED_PRECONDITION
    before) succeeds, the source goes, and the clone reads the oracle."""
    pb = t.pb
    t0 = time.monotonic()
    wait_until(lambda: "parent" not in json.loads(
        etcd_get(PREFIX + "volumes/" + f["clone"])["value"]), 30,
        "ctrl-b flattening " + f["clone"])
    dt = time.monotonic() - t0
    done = [ln for ln in ctrl_log("ctrl-b").splitlines()
            if ("flatten: done vol=" + f["clone"]) in ln]
    check(len(done) == 1, "ctrl-b's flatten lines: %s" % done)
    copied = int(done[0].split(" copied=")[1].split()[0])
    check(0 < copied < 8, "ctrl-b copied %d of 8 chunks (ctrl-a had copied some): %s"
          % (copied, done[0]))
    check(not etcd_range(PREFIX + "dependants/" + f["src"] + "/", True), "dependant key left")
    t.ctl.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=f["snap"]), timeout=30)
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=f["src"]), timeout=60)
    check(etcd_get(PREFIX + "volumes/" + f["src"]) is None, "source volume left")
    out = os.path.join(CL_DIR, "flat-out.bin")
    subprocess.run([os.path.join(CL_BIN, "zl"), "--etcd", ETCD, "volume", "export",
                    f["clone"], out], check=True, stdout=subprocess.DEVNULL)
    with open(out, "rb") as a, open(f["oracle"], "rb") as b:
        check(a.read() == b.read(), "the flattened clone does not read the oracle")
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=f["clone"]), timeout=60)
    # ctrl-b's figures: this one flatten, ended, every chunk probed.
    port = ctrl_log("ctrl-b").split("metrics on http://")[1].split(" port=")[1].split()[0]
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5) as r:
        m = dict(ln.split(" ", 1) for ln in r.read().decode().splitlines()
                 if ln.startswith("zipline_controller_flatten_"))
    want = {"done_total": "1", "failed_total": "0", "active": "0", "chunks_done": "8",
            "chunks_total": "8", "copied_bytes_total": str(copied * 4 * MiB)}
    for k, v in want.items():
        check(m.get("zipline_controller_flatten_" + k) == v,
              "ctrl-b's zipline_controller_flatten_%s: %s, want %s" % (k, m, v))
    log("flatten: killed -9 mid-way on ctrl-a, finished by ctrl-b %.1fs after it led "
        "(%d chunks left to copy); DeleteSnapshot ok, the clone reads the oracle without "
        "its source" % (dt, copied))


def test_delete(t, vid):
    pb, C = t.pb, t.grpc.StatusCode
    D = t.ctl.DeleteVolume
    data = os.path.join(CL_DIR, "data.bin")
    with open(data, "wb") as f:
        f.write(os.urandom(6 * MiB))
    subprocess.run([os.path.join(CL_BIN, "zl"), "--etcd", ETCD, "volume", "import", "pvc-main",
                    data], check=True, stdout=subprocess.DEVNULL)
    before = chunk_files()
    check(len(before) >= 6 * 3, "only %d chunk files after importing 6 MiB x3" % len(before))
    expect_code(D, pb.DeleteVolumeRequest(), C.INVALID_ARGUMENT, "volume_id")
    twice(D, pb.DeleteVolumeRequest(volume_id=vid))
    left = chunk_files()  # only pvc-main was ever written
    check(not left, "%d chunk files left after DeleteVolume: %s" % (len(left), left[:5]))
    check(etcd_get(PREFIX + "volumes/" + vid) is None, "volume record left")
    check(etcd_get(PREFIX + "names/pvc-main") is None, "name record left")
    check(etcd_get(PREFIX + "secrets/" + vid) is None, "secret left")
    twice(D, pb.DeleteVolumeRequest(volume_id="vol-00000000000000ff"))
    twice(D, pb.DeleteVolumeRequest(volume_id="not-a-zipline-id"))
    expect_code(t.ctl.ControllerGetVolume, pb.ControllerGetVolumeRequest(volume_id=vid),
                C.NOT_FOUND)
    # The name is free again: a new volume of that name gets a new id.
    r = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-main", capacity_range=pb.CapacityRange(required_bytes=MiB),
        volume_capabilities=[cap(pb)]), timeout=30)
    check(r.volume.volume_id != vid, "re-created volume reused id %s" % vid)
    log("DeleteVolume: ok (%d chunk files removed)" % len(before))


def test_nodes():
    """zipline-node registered node-a and node-b (csinodes/<id>, no lease);
    node-b was started before etcd and registered once etcd answered."""
    for n in ("node-a", "node-b"):
        wait_until(lambda: etcd_get(PREFIX + "csinodes/" + n) is not None, 15,
                   "zipline-node registering %s" % n)
        kv = etcd_get(PREFIX + "csinodes/" + n)
        body = json.loads(kv["value"])
        check(body["node"] == n and body["version"] and body["time"] > 0 and kv["lease"] == 0,
              "registration of %s: %s" % (n, kv))
    with open(os.path.join(CL_DIR, "znode-b", "log"), errors="replace") as f:
        text = f.read()
    check(text.index("cannot register node=node-b") < text.index("registered node=node-b"),
          "node-b (started before etcd) did not register through its retry")
    log("zipline-node registrations: ok (node-b after etcd came up)")


def test_publish_race(t):
    """Publish one volume to node-a on one replica and to node-b on the other
    at once: exactly one attachment; the other node gets FAILED_PRECONDITION
    (after retrying ABORTED, as the attacher would)."""
    pb, C = t.pb, t.grpc.StatusCode
    vid = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-pubrace", capacity_range=pb.CapacityRange(required_bytes=MiB),
        volume_capabilities=[cap(pb)])).volume.volume_id
    mk = pb.ControllerPublishVolumeRequest
    for round_ in range(5):
        first, second = ("ctrl-a", "ctrl-b") if round_ % 2 == 0 else ("ctrl-b", "ctrl-a")
        reqs = {n: mk(volume_id=vid, node_id=n, volume_capability=cap(pb))
                for n in ("node-a", "node-b")}
        res = at_once([(t.on(first).ctl.ControllerPublishVolume, reqs["node-a"]),
                       (t.on(second).ctl.ControllerPublishVolume, reqs["node-b"])])
        final = {}
        for node, x in zip(("node-a", "node-b"), res):
            check(x[0] in ("ok", "FAILED_PRECONDITION") + RETRIABLE,
                  "concurrent publish to %s: %s" % (node, x))
            if x[0] in RETRIABLE:
                try:
                    x = ("ok", t.ctl.ControllerPublishVolume(reqs[node]))
                except t.grpc.RpcError as e:
                    x = (e.code().name, e.details())
            final[node] = x
        won = [n for n in final if final[n][0] == "ok"]
        check(len(won) == 1, "round %d: publish winners %s (%s)" % (round_, won, final))
        lost = "node-b" if won[0] == "node-a" else "node-a"
        check(final[lost][0] == "FAILED_PRECONDITION" and won[0] in final[lost][1],
              "loser %s: %s" % (lost, final[lost]))
        rec = json.loads(etcd_get(PREFIX + "attachments/" + vid)["value"])
        check(rec["node"] == won[0], "attachment %s, winner %s" % (rec, won[0]))
        expect_code(t.ctl.ControllerPublishVolume, reqs[lost], C.FAILED_PRECONDITION, won[0])
        t.ctl.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(
            volume_id=vid, node_id=won[0]))
        check(etcd_get(PREFIX + "attachments/" + vid) is None, "unpublish left the record")
    log("concurrent ControllerPublishVolume on both replicas: ok")
    return vid


def test_delete_publish_race(t, vid):
    """DeleteVolume on one replica and ControllerPublishVolume on the other
    at once: either the publish wins (the delete answers FAILED_PRECONDITION)
    or the delete does (the publish answers NOT_FOUND); never an attachment
    of a deleted volume."""
    pb = t.pb
    outcomes = []
    for round_ in range(3):
        if round_:
            vid = t.ctl.CreateVolume(pb.CreateVolumeRequest(
                name="pvc-delrace-%d" % round_, capacity_range=pb.CapacityRange(
                    required_bytes=MiB), volume_capabilities=[cap(pb)])).volume.volume_id
        d_on, p_on = ("ctrl-a", "ctrl-b") if round_ % 2 == 0 else ("ctrl-b", "ctrl-a")
        dreq = pb.DeleteVolumeRequest(volume_id=vid)
        preq = pb.ControllerPublishVolumeRequest(volume_id=vid, node_id="node-a",
                                                 volume_capability=cap(pb))
        res = at_once([(t.on(d_on).ctl.DeleteVolume, dreq),
                       (t.on(p_on).ctl.ControllerPublishVolume, preq)])
        for i, (m, req) in enumerate(((t.ctl.DeleteVolume, dreq),
                                      (t.ctl.ControllerPublishVolume, preq))):
            if res[i][0] in RETRIABLE:
                try:
                    res[i] = ("ok", m(req))
                except t.grpc.RpcError as e:
                    res[i] = (e.code().name, e.details())
        d, p = res[0][0], res[1][0]
        vol, att = etcd_get(PREFIX + "volumes/" + vid), etcd_get(PREFIX + "attachments/" + vid)
        if p == "ok":
            check(d == "FAILED_PRECONDITION" and vol and att,
                  "publish won but delete %s, volume %s, attachment %s" % (res[0], vol, att))
            t.ctl.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(volume_id=vid))
            t.ctl.DeleteVolume(dreq)
        else:
            check(d == "ok" and p == "NOT_FOUND", "delete/publish race: %s" % res)
        check(etcd_get(PREFIX + "volumes/" + vid) is None and
              etcd_get(PREFIX + "attachments/" + vid) is None and
              etcd_get(PREFIX + "secrets/" + vid) is None, "volume %s left records" % vid)
        outcomes.append("publish" if p == "ok" else "delete")
    log("concurrent DeleteVolume/ControllerPublishVolume on both replicas: ok (won: %s)"
        % ",".join(outcomes))


def test_oplock(t):
    """The operation locks are shared through etcd: a lock held elsewhere
    (here a key on a lease of this test, as a third replica would hold it)
    makes both replicas answer ABORTED naming the holder; once that lease
    is gone both serve the call."""
    pb, C = t.pb, t.grpc.StatusCode
    lease = etcd_lease(30)
    etcd_put(PREFIX + "locks/name/pvc-locked", "ctrl-zz", lease)
    req = pb.CreateVolumeRequest(name="pvc-locked", volume_capabilities=[cap(pb)],
                                 capacity_range=pb.CapacityRange(required_bytes=MiB))
    for name in ("ctrl-a", "ctrl-b"):
        expect_code(t.on(name).ctl.CreateVolume, req, C.ABORTED, "pvc-locked", "ctrl-zz")
    check(etcd_get(PREFIX + "names/pvc-locked") is None, "CreateVolume ran under a held lock")
    etcd_revoke(lease)
    v = t.ctl.CreateVolume(req).volume
    check(etcd_get(PREFIX + "names/pvc-locked")["value"] == v.volume_id, "after the lock")
    left = etcd_range(PREFIX + "locks/", prefix=True)
    check(not left, "operation locks left after the calls: %s" % left)
    log("operation locks shared through etcd: ok")


def wait_gc(name, what):
    """Plants the secret of a volume that does not exist; the leader's
    garbage collection must remove it, and the log of `name` say so."""
    vid = "vol-%016x" % RNG.getrandbits(64)
    etcd_put(PREFIX + "secrets/" + vid, "ab" * 32)
    t0 = time.monotonic()
    t1 = wait_until(lambda: etcd_get(PREFIX + "secrets/" + vid) is None, 15 * GC_INTERVAL + 10,
                    "garbage collection of the orphaned secret of %s (%s)" % (vid, what))
    # The log line follows the etcd delete: give it a moment.
    wait_until(lambda: ("volume=" + vid) in ctrl_log(name), 5,
               "%s logging that it collected %s" % (name, vid))
    return vid, t1 - t0


def test_gc(t):
    """Garbage collection runs on the leader only and spares live volumes."""
    lead = leader()
    other = "ctrl-b" if lead == "ctrl-a" else "ctrl-a"
    keep = [kv["key"] for kv in etcd_range(PREFIX + "secrets/", prefix=True)]
    vid, dt = wait_gc(lead, "leader " + lead)
    check(("volume=" + vid) not in ctrl_log(other), "follower %s collected garbage" % other)
    now = [kv["key"] for kv in etcd_range(PREFIX + "secrets/", prefix=True)]
    check(sorted(now) == sorted(keep), "gc touched live secrets: %s vs %s" % (now, keep))
    for kv in etcd_range(PREFIX + "secrets/", prefix=True):
        check(etcd_get(PREFIX + "volumes/" + kv["key"].rsplit("/", 1)[1]) is not None,
              "secret without volume left: %s" % kv["key"])
    log("garbage collection on the leader %s only: ok (%.1fs)" % (lead, dt))


def test_no_nodes():
    """A controller on a prefix with no storage node: RESOURCE_EXHAUSTED."""
    c = start_ctrl("ctrl-c", "--etcd-prefix", "/zipline-empty/", "--no-leader-election")
    t = Router([c])
    C = t.grpc.StatusCode
    expect_code(t.ctl.CreateVolume, t.pb.CreateVolumeRequest(
        name="pvc-x", volume_capabilities=[cap(t.pb)]), C.RESOURCE_EXHAUSTED, "storage nodes")
    check(t.ctl.GetCapacity(t.pb.GetCapacityRequest()).available_capacity == 0,
          "capacity without storage nodes")
    stop_ctrl(c)
    log("no storage nodes -> RESOURCE_EXHAUSTED: ok")


def test_leader(t, a, b, flat):
    """The follower serves calls, before and during the failover; the
    election moves only the garbage collection (and the flatten of flat,
    test_flatten_start, in progress on ctrl-a when it is killed)."""
    pb = t.pb
    check(leader() == "ctrl-a", "leader key %s, want ctrl-a" % leader())
    req = pb.CreateVolumeRequest(name="pvc-follower", volume_capabilities=[cap(pb)],
                                 capacity_range=pb.CapacityRange(required_bytes=MiB))
    v = t.on("ctrl-b").ctl.CreateVolume(req, _retry=False).volume
    check(v.volume_id.startswith("vol-"), "follower CreateVolume")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    a.alive = False
    os.unlink(os.path.join(CL_DIR, "ctrl-a", "pid"))
    test_flatten_killed(flat)
    t0 = time.monotonic()
    # No gap: ctrl-b answers at once, while ctrl-a's lease is still alive.
    req2 = pb.CreateVolumeRequest(name="pvc-failover", volume_capabilities=[cap(pb)],
                                  capacity_range=pb.CapacityRange(required_bytes=MiB))
    v2 = t.ctl.CreateVolume(req2, _retry=False).volume
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=v.volume_id), _retry=False)
    dt_call = time.monotonic() - t0
    check(leader() == "ctrl-a", "the leader key moved before ctrl-a's lease expired")
    t1 = wait_until(lambda: leader() == "ctrl-b", 25, "ctrl-b taking over the leader key")
    log("calls served by ctrl-b %.1fs after ctrl-a was killed; it took the leader key after "
        "%.1fs" % (dt_call, t1 - t0))
    wait_gc("ctrl-b", "new leader ctrl-b")
    test_flatten_finish(t, flat)
    t.ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=v2.volume_id))
    stop_ctrl(b)
    check(leader() is None, "leader key left after graceful shutdown")
    left = etcd_range(PREFIX + "locks/", prefix=True)
    check(not left, "operation locks left: %s" % left)
    log("leader election (jobs only, never a gate): ok")


def main():
    log("seed=%d (ZL_TEST_SEED=%d replays the routing)" % (SEED, SEED))
    a = start_ctrl("ctrl-a")
    wait_until(lambda: leader() == "ctrl-a", 15, "ctrl-a becoming leader")
    b = start_ctrl("ctrl-b", "--metrics", "127.0.0.1:0")
    t = Router([a, b])
    test_nodes()
    test_identity(t)
    test_create_errors(t)
    vid = test_create(t)
    test_create_race(t)
    test_oplock(t)
    test_validate(t, vid)
    test_list(t)
    test_capacity(t)
    test_publish(t, vid)
    test_delete_publish_race(t, test_publish_race(t))
    test_expand_getvolume(t, vid)
    test_modify(t, vid)
    test_snapshots(t, vid)
    test_clones(t, vid)
    test_delete(t, vid)
    test_gc(t)
    test_no_nodes()
    calls = dict(STATS["calls"])
    flat = test_flatten_start(t)
    test_leader(t, a, b, flat)
    check(calls.get("ctrl-a", 0) >= 50 and calls.get("ctrl-b", 0) >= 50,
          "calls per replica %s: both must serve" % calls)
    log("calls per replica before the failover %s; retried %s" % (
        calls, STATS["retries"] or "none"))
    log("PASS (%d checks, seed=%d)" % (CHECKS, SEED))


if __name__ == "__main__":
    main()
