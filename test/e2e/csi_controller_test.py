"""zipline-controller end to end, run by csi_controller_e2e.sh (which starts
etcd, three storage daemons and the controller ctrl-a). An independent CSI
client (python3-grpcio) checks every spec error code of the controller
RPCs, idempotency, concurrency, paging, chunk removal on DeleteVolume,
publish fencing, expansion and leader election.

Environment: CL_DIR, CL_BIN, CL_ETCD, ZL_SOURCE_DIR."""

import base64
import concurrent.futures
import glob
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

SRC = os.environ["ZL_SOURCE_DIR"]
sys.path.insert(0, os.path.join(SRC, "test", "lib"))
from csi_client import CsiClient, wait_for_socket  # noqa: E402

CL_DIR = os.environ["CL_DIR"]
CL_BIN = os.environ["CL_BIN"]
ETCD = os.environ["CL_ETCD"]
PREFIX = "/zipline/"
MiB = 1 << 20
TOPO = "topology.zipline.io/node"

CHECKS = 0


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
    body = {"key": base64.b64encode(key.encode()).decode()}
    if prefix:
        end = key[:-1] + chr(ord(key[-1]) + 1)
        body["range_end"] = base64.b64encode(end.encode()).decode()
    req = urllib.request.Request(ETCD + "/v3/kv/range", data=json.dumps(body).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        out = json.load(r)
    kvs = []
    for kv in out.get("kvs", []):
        kvs.append({"key": base64.b64decode(kv["key"]).decode(),
                    "value": base64.b64decode(kv.get("value", "")).decode(),
                    "create_revision": int(kv.get("create_revision", 0)),
                    "mod_revision": int(kv.get("mod_revision", 0))})
    return kvs


def etcd_get(key):
    kvs = etcd_range(key)
    return kvs[0] if kvs else None


# --------------------------------------------------------------- helpers

class Ctl:
    def __init__(self, name):
        self.name = name
        wait_for_socket(sock_of(name), 15)
        self.c = CsiClient("unix://" + sock_of(name))
        self.c.wait_ready(10)
        self.pb = self.c.pb
        self.grpc = self.c.grpc
        self.ctl = self.c.controller
        self.idn = self.c.identity


def expect_code(fn, req, code, *words):
    """Calls fn(req); it must fail with code and a message naming words."""
    import grpc

    try:
        fn(req, timeout=30)
    except grpc.RpcError as e:
        check(e.code() == code, "%s: want %s, got %s (%s)" % (
            fn._method.decode() if hasattr(fn, "_method") else fn, code, e.code(), e.details()))
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


def wait_leader(t, timeout):
    """Polls ListVolumes until t answers as the leader."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            t.ctl.ListVolumes(t.pb.ListVolumesRequest(), timeout=5)
            return time.monotonic()
        except t.grpc.RpcError as e:
            last = e
            if e.code() != t.grpc.StatusCode.UNAVAILABLE:
                raise
        time.sleep(0.2)
    raise AssertionError("%s did not become leader in %ss: %s" % (t.name, timeout,
                                                                   last and last.details()))


def start_ctrl(name, *extra):
    d = os.path.join(CL_DIR, name)
    os.makedirs(d, exist_ok=True)
    logf = open(os.path.join(d, "log"), "ab")
    p = subprocess.Popen([os.path.join(CL_BIN, "zipline-controller"),
                          "--endpoint", "unix://" + sock_of(name), "--etcd", ETCD,
                          "--leader-id", name, "--log-level", "info"] + list(extra),
                         stdout=logf, stderr=logf)
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(p.pid))
    return p


def stop_ctrl(name, p):
    """SIGTERM: graceful shutdown with status 0 and the socket removed."""
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=20)
    check(rc == 0, "%s exited with %s on SIGTERM" % (name, rc))
    check(not os.path.exists(sock_of(name)), "%s left its socket behind" % name)
    os.unlink(os.path.join(CL_DIR, name, "pid"))


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
            R.VOLUME_CONDITION}
    check(got == want, "controller capabilities %s" % sorted(got))
    import grpc
    expect_code(t.ctl.CreateSnapshot, pb.CreateSnapshotRequest(source_volume_id="x", name="s"),
                grpc.StatusCode.UNIMPLEMENTED)
    expect_code(t.ctl.ControllerModifyVolume,
                pb.ControllerModifyVolumeRequest(volume_id="vol-0000000000000001"),
                grpc.StatusCode.UNIMPLEMENTED)
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
    expect_code(E, mk(name="e1", volume_capabilities=good,
                      volume_content_source=pb.VolumeContentSource(
                          snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id="s1"))),
                C.INVALID_ARGUMENT, "volume_content_source")
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
        parameters={"replicas": "3", "chunkSize": "1M", "transport": "tcp",
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
    check(rec["size"] == 64 * MiB and rec["replicas"] == 3, "record %s" % rec)
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
    r4 = t.ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-limit", capacity_range=pb.CapacityRange(limit_bytes=5 * MiB + 100),
        volume_capabilities=[cap(pb, "SINGLE_NODE_READER_ONLY", block=True)]), timeout=30)
    check(r4.volume.capacity_bytes == 5 * MiB, "limit-only size %d" % r4.volume.capacity_bytes)
    log("CreateVolume: ok (%s)" % v.volume_id)
    return v.volume_id


def test_create_race(t):
    pb, C = t.pb, t.grpc.StatusCode
    for round_ in range(3):
        name = "pvc-race-%d" % round_
        req = pb.CreateVolumeRequest(name=name, capacity_range=pb.CapacityRange(
            required_bytes=8 * MiB), volume_capabilities=[cap(pb)])

        def one(_):
            try:
                return ("ok", t.ctl.CreateVolume(req, timeout=60).volume.volume_id)
            except t.grpc.RpcError as e:
                return (e.code(), e.details())

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            res = list(ex.map(one, range(4)))
        ids = {x[1] for x in res if x[0] == "ok"}
        for x in res:
            check(x[0] in ("ok", C.ABORTED), "concurrent CreateVolume: %s" % (x,))
        check(len(ids) == 1, "concurrent CreateVolume of one name gave ids %s (%s)" % (ids, res))
        again = t.ctl.CreateVolume(req, timeout=60).volume.volume_id
        check({again} == ids, "retry after the race gave %s, race gave %s" % (again, ids))
        vols = [json.loads(kv["value"]) for kv in etcd_range(PREFIX + "volumes/", prefix=True)]
        check(sum(1 for x in vols if x["name"] == name) == 1,
              "%s exists %d times" % (name, sum(1 for x in vols if x["name"] == name)))
    log("concurrent CreateVolume: ok")


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


def test_capacity(t):
    pb, C = t.pb, t.grpc.StatusCode
    G = t.ctl.GetCapacity
    c3 = G(pb.GetCapacityRequest(volume_capabilities=[cap(pb)]), timeout=30).available_capacity
    c1 = G(pb.GetCapacityRequest(parameters={"replicas": "1"},
                                 accessible_topology=topo(pb, "node-a")),
           timeout=30).available_capacity
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
    expect_code(X, mk(volume_id="vol-00000000000000ff", capacity_range=cr(
        required_bytes=128 * MiB)), C.NOT_FOUND, "vol-00000000000000ff")
    expect_code(X, mk(volume_id=vid, capacity_range=cr(required_bytes=MiB)), C.OUT_OF_RANGE,
                "shrink")
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


def test_no_nodes():
    """A controller on a prefix with no storage node: RESOURCE_EXHAUSTED."""
    p = start_ctrl("ctrl-c", "--etcd-prefix", "/zipline-empty/", "--no-leader-election")
    t = Ctl("ctrl-c")
    C = t.grpc.StatusCode
    expect_code(t.ctl.CreateVolume, t.pb.CreateVolumeRequest(
        name="pvc-x", volume_capabilities=[cap(t.pb)]), C.RESOURCE_EXHAUSTED, "storage nodes")
    check(t.ctl.GetCapacity(t.pb.GetCapacityRequest(), timeout=30).available_capacity == 0,
          "capacity without storage nodes")
    stop_ctrl("ctrl-c", p)
    log("no storage nodes -> RESOURCE_EXHAUSTED: ok")


def test_leader(a):
    p = start_ctrl("ctrl-b")
    b = Ctl("ctrl-b")
    C = b.grpc.StatusCode
    check(b.idn.Probe(b.pb.ProbeRequest(), timeout=10).ready.value, "follower Probe not ready")
    check(b.idn.GetPluginInfo(b.pb.GetPluginInfoRequest(), timeout=10).name == "zipline.csi.io",
          "follower GetPluginInfo")
    b.ctl.ControllerGetCapabilities(b.pb.ControllerGetCapabilitiesRequest(), timeout=10)
    time.sleep(2)
    req = b.pb.CreateVolumeRequest(name="pvc-leader", volume_capabilities=[cap(b.pb)],
                                   capacity_range=b.pb.CapacityRange(required_bytes=MiB))
    expect_code(b.ctl.CreateVolume, req, C.UNAVAILABLE, "not the leader", "ctrl-a")
    expect_code(b.ctl.ListVolumes, b.pb.ListVolumesRequest(), C.UNAVAILABLE, "ctrl-a")
    a.ctl.ListVolumes(a.pb.ListVolumesRequest(), timeout=10)  # a still leads
    with open(os.path.join(CL_DIR, "ctrl-a", "pid")) as f:
        apid = int(f.read())
    os.kill(apid, signal.SIGKILL)
    t0 = time.monotonic()
    t1 = wait_leader(b, 25)
    log("ctrl-b took over %.1fs after ctrl-a was killed" % (t1 - t0))
    v = b.ctl.CreateVolume(req, timeout=30).volume
    check(v.volume_id.startswith("vol-"), "new leader CreateVolume")
    check(etcd_get(PREFIX + "leader/controller")["value"] == "ctrl-b", "leader key")
    stop_ctrl("ctrl-b", p)
    check(etcd_get(PREFIX + "leader/controller") is None,
          "leader key left after graceful shutdown")
    log("leader election: ok")


def main():
    a = Ctl("ctrl-a")
    wait_leader(a, 15)
    test_identity(a)
    test_create_errors(a)
    vid = test_create(a)
    test_create_race(a)
    test_validate(a, vid)
    test_list(a)
    test_capacity(a)
    test_publish(a, vid)
    test_expand_getvolume(a, vid)
    test_delete(a, vid)
    test_no_nodes()
    test_leader(a)
    log("PASS (%d checks)" % CHECKS)


if __name__ == "__main__":
    main()
