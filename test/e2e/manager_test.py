#!/usr/bin/python3
"""Driver of manager_e2e.sh: rules M1-M7 of the membership manager
(lib/manager, run by zipline-controller) against a real etcd and real
zipline-controller processes. Storage nodes are their records only (put on
leases of the test's own, as zipline-storage registers them); the oracle is
etcd: every assertion reads the rows (or their history) from etcd.

Environment: CL_ETCD (etcd URL), CL_DIR (state dir; controllers write
CL_DIR/ctrl-X/{pid,log}), ZL_BUILD_DIR."""
import json
import os
import secrets
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import etcd_gw  # noqa: E402
from etcd_gw import b64  # noqa: E402

ETCD = os.environ["CL_ETCD"]
DIR = os.environ["CL_DIR"]
BIN = os.path.join(os.environ["ZL_BUILD_DIR"], "bin")
PREFIX = "/zipline/"
GRACE = 2
DOWN_OUT = 3
CTRL = {}  # name -> Popen
FIGURES = []


def fail(msg):
    print("manager_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def etcd(path, body):
    return etcd_gw.call(ETCD, path, body)


def lease_grant(ttl=600):
    return etcd_gw.lease_grant(ETCD, ttl)


def lease_revoke(lease):
    etcd_gw.lease_revoke(ETCD, lease)


def put(key, value, lease=0):
    return int(etcd_gw.put(ETCD, key, value, lease)["header"]["revision"])


def get(key, rev=0):
    kv = etcd_gw.get(ETCD, key, rev)
    if not kv:
        return None, 0
    return etcd_gw.unb64(kv["value"]), int(kv["mod_revision"])


def keys(prefix):
    return [etcd_gw.unb64(kv["key"]) for kv in etcd_gw.prefix(ETCD, prefix)]


# ---- fake storage nodes: records on leases ----
CLUSTER = secrets.token_hex(16)
NODES = {}  # id -> {"lease", "inc", "domain", "free"}


def node_up(i, inc=None, domain=None, free=1 << 40):
    nid = "node-%d" % i
    old = NODES.get(nid)
    inc = inc or (old["inc"] if old else secrets.token_hex(16))
    domain = domain or (old["domain"] if old else "zone=z%d" % i)
    lease = old["lease"] if old and old["lease"] else lease_grant()
    rec = {"id": nid, "addr": "127.0.0.1", "port": 7000 + i, "rdma_port": 0,
           "transports": "tcp", "domain": domain, "capacity": 2 << 40, "free": free,
           "start_time": int(time.time()), "version": "0.2.0", "cluster_id": CLUSTER,
           "incarnation": inc}
    put(PREFIX + "nodes/" + nid, json.dumps(rec), lease)
    NODES[nid] = {"lease": lease, "inc": inc, "domain": domain, "free": free}


def node_down(i):
    n = NODES["node-%d" % i]
    lease_revoke(n["lease"])
    n["lease"] = 0
    return time.monotonic()


# ---- volume rows ----
def volume(vid):
    val, rev = get(PREFIX + "volumes/" + vid)
    if val is None:
        fail("volume %s vanished" % vid)
    return json.loads(val), rev


def rows(vid, rev=0):
    if rev:
        val, _ = get(PREFIX + "volumes/" + vid, rev)
        return json.loads(val)["placement"]
    return volume(vid)[0]["placement"]


def state(row, nid):
    return row["states"][row["nodes"].index(nid)] if nid in row["nodes"] else None


def primary(row):
    for n, s in zip(row["nodes"], row["states"]):
        if s == "in_sync":
            return n
    return None


def check_row(row, where):
    if len(set(row["nodes"])) != len(row["nodes"]):
        fail("%s: row lists a node twice: %s" % (where, row))
    if "in_sync" not in row["states"]:
        fail("%s: row has no in-sync member: %s" % (where, row))
    insync = [n for n, s in zip(row["nodes"], row["states"]) if s == "in_sync"]
    if sorted(insync) != sorted(row["in_sync"]):
        fail("%s: in_sync[] and states[] disagree: %s" % (where, row))


def wait_for(what, pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.05)
    fail("%s: not within %.1f s" % (what, timeout))


# ---- reports ----
REP_LEASE = [0]


def report(vid, sl, reporter, peer, error, ver, at=None):
    if not REP_LEASE[0]:
        REP_LEASE[0] = lease_grant()
    key = "%sreports/%s/%d/%s/%s" % (PREFIX, vid, sl, reporter, peer)
    put(key, json.dumps({"peer": peer, "error": error, "slice_ver": ver,
                         "time": int(time.time()) if at is None else at}), REP_LEASE[0])
    return key


# ---- controllers ----
def ctrl_start(name, *flags):
    d = os.path.join(DIR, name)
    os.makedirs(d, exist_ok=True)
    log = open(os.path.join(d, "log"), "ab")
    p = subprocess.Popen([os.path.join(BIN, "zipline-controller"), "--endpoint",
                          "unix://%s/csi.sock" % d, "--etcd", ETCD, "--leader-id", name,
                          "--log-level", "info", "--manager-grace", str(GRACE), *flags],
                         stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(p.pid))
    CTRL[name] = p
    return p


def ctrl_stop(name, sig=signal.SIGTERM):
    p = CTRL.pop(name)
    p.send_signal(sig)
    p.wait(timeout=20)
    os.unlink(os.path.join(DIR, name, "pid"))


def leader():
    return get(PREFIX + "leader/controller")[0]


def wait_leader(name, timeout):
    return wait_for("leader is %s" % name, lambda: leader() == name, timeout)


def main():
    for i in (1, 2, 3):
        node_up(i)
    out = subprocess.run([os.path.join(BIN, "zl"), "--etcd", ETCD, "volume", "create",
                          "vol-mgr", "--size", "16M", "--replicas", "3"],
                         capture_output=True, text=True)
    if out.returncode:
        fail("zl volume create: " + out.stdout + out.stderr)
    vid = (get(PREFIX + "names/vol-mgr")[0] or "").strip('"')
    if not vid.startswith("vol-"):
        fail("names/vol-mgr does not name a volume: %r" % vid)
    rs = rows(vid)
    if len(rs) < 3:
        fail("want >= 3 slices, got %d" % len(rs))
    for r in rs:
        check_row(r, "created")
        if r["states"] != ["in_sync"] * 3:
            fail("a new row is not all in sync: %s" % r)
    if not any(primary(r) == "node-1" for r in rs):
        fail("node-1 is the primary of no row; the test needs one: %s" % rs)

    # ---- --manager=off: nothing changes ----
    ctrl_start("ctrl-off", "--manager=off", "--down-out-interval", str(DOWN_OUT))
    wait_leader("ctrl-off", 10)
    _, rev0 = volume(vid)
    node_down(1)
    rk = report(vid, 0, primary(rs[0]), [n for n in rs[0]["nodes"] if n != primary(rs[0])][0],
                "ZL_ERR_TIMEOUT", rs[0]["v"])
    time.sleep(GRACE + DOWN_OUT + 1)
    if volume(vid)[1] != rev0:
        fail("--manager=off: the volume record changed")
    if get(rk)[0] is None:
        fail("--manager=off: a report was deleted")
    etcd("/v3/kv/deleterange", {"key": b64(rk)})
    node_up(1)
    ctrl_stop("ctrl-off")
    print("manager_test: --manager=off changed nothing in %d s" % (GRACE + DOWN_OUT + 1))

    # Two managers: ctrl-a leads, ctrl-b follows.
    ctrl_start("ctrl-a", "--manager=on", "--down-out-interval", str(DOWN_OUT))
    wait_leader("ctrl-a", 10)
    ctrl_start("ctrl-b", "--manager=on", "--down-out-interval", str(DOWN_OUT))
    time.sleep(1.5)
    if volume(vid)[1] != rev0:
        fail("a manager changed a healthy volume: %s" % rows(vid))

    # ---- M1: node-1's lease goes -> its members OUT, new primaries ----
    before = rows(vid)
    t0 = node_down(1)
    dt = wait_for("M1: every member of node-1 out",
                  lambda: all(state(r, "node-1") == "out" for r in rows(vid)), GRACE + 2)
    FIGURES.append("lease loss -> OUT: %.2f s (grace %d s)" % (dt, GRACE))
    after = rows(vid)
    for b, a in zip(before, after):
        check_row(a, "M1")
        if primary(b) == "node-1":
            if primary(a) in (None, "node-1") or a["term"] <= b["term"]:
                fail("M1: row %s -> %s: no new primary with a higher term" % (b, a))
        elif a["term"] != b["term"]:
            fail("M1: the term changed without a primary change: %s -> %s" % (b, a))
        if a["v"] <= b["v"]:
            fail("M1: version did not grow: %s -> %s" % (b, a))

    # ---- the last in-sync member is never OUT ----
    node_down(2)
    wait_for("M1: node-2 out", lambda: all(state(r, "node-2") == "out" for r in rows(vid)),
             GRACE + 2)
    node_down(3)
    time.sleep(GRACE + 2)
    for r in rows(vid):
        check_row(r, "last in-sync")
        if state(r, "node-3") != "in_sync":
            fail("the last in-sync member was set out: %s" % r)

    # ---- M2: same incarnation back -> RECOVERING ----
    for i in (1, 2, 3):
        node_up(i)
    wait_for("M2: node-1 and node-2 recovering",
             lambda: all(state(r, "node-1") == "recovering" and
                         state(r, "node-2") == "recovering" for r in rows(vid)), 3)
    for r in rows(vid):
        check_row(r, "M2")
        if state(r, "node-3") != "in_sync":
            fail("M2: node-3 is no longer in sync: %s" % r)
        for n, inc in zip(r["nodes"], r["incarnations"]):
            if inc != NODES[n]["inc"]:
                fail("M2: incarnation of %s changed: %s" % (n, r))

    # ---- CAUGHT_UP vs failure of the same member at the same version ----
    # (thrash_e2e: node-3 went IN_SYNC on a CAUGHT_UP though a failure about
    # it at that version came later.) node-1 is recovering in row 0.
    r0 = rows(vid)[0]
    p0 = primary(r0)
    now = int(time.time())
    kf = report(vid, 0, "node-2", "node-1", "ZL_ERR_CONN", r0["v"], at=now)
    kc = report(vid, 0, p0, "node-1", "CAUGHT_UP", r0["v"], at=now - 5)
    time.sleep(GRACE + 1)
    if state(rows(vid)[0], "node-1") != "recovering":
        fail("race: CAUGHT_UP applied though a later failure report exists: %s" % rows(vid)[0])
    if get(kc)[0] is None:
        fail("race: the CAUGHT_UP not applied should stay (for the failure to go first)")
    etcd("/v3/kv/deleterange", {"key": b64(kf)})
    wait_for("race: CAUGHT_UP applied once the failure report is gone",
             lambda: state(rows(vid)[0], "node-1") == "in_sync", 3)
    # an older failure (report time) loses: the CAUGHT_UP applies
    r1 = rows(vid)[1]
    kf = report(vid, 1, "node-2", "node-1", "ZL_ERR_CONN", r1["v"], at=now - 5)
    report(vid, 1, primary(r1), "node-1", "CAUGHT_UP", r1["v"], at=now)
    wait_for("race: a CAUGHT_UP newer than the failure applies",
             lambda: state(rows(vid)[1], "node-1") == "in_sync", 3)
    wait_for("race: the older failure report dropped as stale", lambda: get(kf)[0] is None, 3)
    # a member whose node record is gone never becomes IN_SYNC
    r2 = rows(vid)[2]
    node_down(1)
    report(vid, 2, primary(r2), "node-1", "CAUGHT_UP", r2["v"])
    time.sleep(0.5 * GRACE)
    if state(rows(vid)[2], "node-1") == "in_sync":
        fail("race: a member without a node record was set IN_SYNC: %s" % rows(vid)[2])
    wait_for("race: M1 sets node-1 out", lambda: all(state(r, "node-1") == "out"
                                                     for r in rows(vid)), GRACE + 3)
    if state(rows(vid)[2], "node-1") == "in_sync":
        fail("race: a member without a node record was set IN_SYNC: %s" % rows(vid)[2])
    node_up(1)
    wait_for("race: node-1 recovering again",
             lambda: all(state(r, "node-1") == "recovering" for r in rows(vid)), 3)
    print("manager_test: CAUGHT_UP vs failure: the later report wins; no IN_SYNC without a "
          "node record")

    # ---- M4: CAUGHT_UP ----
    rs = rows(vid)
    # from a non-primary, and from the primary with a stale slice_ver: ignored, deleted
    k1 = report(vid, 0, "node-2", "node-1", "CAUGHT_UP", rs[0]["v"])
    k2 = report(vid, 1, "node-3", "node-1", "CAUGHT_UP", rs[1]["v"] - 1)
    wait_for("M4: bad CAUGHT_UP reports deleted",
             lambda: get(k1)[0] is None and get(k2)[0] is None, 3)
    if rows(vid) != rs:
        fail("M4: a bad CAUGHT_UP report changed a row: %s -> %s" % (rs, rows(vid)))
    # from the primary at the current version: IN_SYNC, report deleted
    # (one member at a time: a report names the row version it saw, and
    # every change moves the row on)
    for peer in ("node-1", "node-2"):
        ks = [report(vid, sl, "node-3", peer, "CAUGHT_UP", r["v"])
              for sl, r in enumerate(rows(vid))]
        wait_for("M4: %s in sync" % peer,
                 lambda: all(state(r, peer) == "in_sync" for r in rows(vid)), 3)
        wait_for("M4: acted-on reports deleted", lambda: all(get(k)[0] is None for k in ks), 3)
    for r in rows(vid):
        if r["states"] != ["in_sync"] * 3 or primary(r) != "node-3":
            fail("M4: want all in sync, node-3 still primary: %s" % r)
    for b, a in zip(rs, rows(vid)):
        if a["term"] != b["term"]:
            fail("M4: term changed though the primary did not: %s -> %s" % (b, a))

    # ---- M5: the primary reports a backup -> OUT, then RECOVERING ----
    r0 = rows(vid)[0]
    p0 = primary(r0)
    bk = [n for n in r0["nodes"] if n != p0][0]
    k = report(vid, 0, p0, bk, "ZL_ERR_TIMEOUT", r0["v"])
    # M2 holds a member M5 set out while its node record lives on unchanged
    # (a killed node's lease still runs): 10 s, MGR_M2_HOLD_MS.
    wait_for("M5: backup out", lambda: state(rows(vid)[0], bk) == "out", 3)
    time.sleep(3)
    if state(rows(vid)[0], bk) != "out":
        fail("M5: the backup came back before the M2 hold: %s" % rows(vid)[0])
    dt = wait_for("M5: backup recovering after the M2 hold",
                  lambda: state(rows(vid)[0], bk) == "recovering" and
                  rows(vid)[0]["v"] == r0["v"] + 2, 10)
    FIGURES.append("M5 -> M2 on an unchanged node record: %.1f s after the out + 3 s" % dt)
    _, rev = volume(vid)
    mid = rows(vid, rev - 1)[0]
    if mid["v"] != r0["v"] + 1 or state(mid, bk) != "out":
        fail("M5: the row before RECOVERING is not %s OUT at v%d: %s" % (bk, r0["v"] + 1, mid))
    if get(k)[0] is not None:
        fail("M5: the acted-on report is still there")
    if primary(rows(vid)[0]) != p0:
        fail("M5: the primary changed")
    ks = [report(vid, 0, p0, bk, "CAUGHT_UP", rows(vid)[0]["v"])]
    wait_for("M5: backup in sync again", lambda: state(rows(vid)[0], bk) == "in_sync", 3)

    # ---- M6: a client's report about a live primary changes nothing ----
    rs, rev = volume(vid)
    rs = rs["placement"]
    k = report(vid, 1, "client-x", primary(rs[1]), "ZL_ERR_TIMEOUT", rs[1]["v"])
    time.sleep(GRACE + 1.5)
    if volume(vid)[1] != rev:
        fail("M6: a client's report about a live primary changed the volume")

    # ---- M3: node-2 comes back with another incarnation ----
    before = rows(vid)
    new_inc = secrets.token_hex(16)
    node_up(2, inc=new_inc)
    wait_for("M3: node-2 recovering with the new incarnation",
             lambda: all(state(r, "node-2") == "recovering" and
                         r["incarnations"][r["nodes"].index("node-2")] == new_inc
                         for r in rows(vid)), 3)
    for b, a in zip(before, rows(vid)):
        check_row(a, "M3")
        if primary(b) == "node-2" and a["term"] <= b["term"]:
            fail("M3: node-2 was primary but the term did not grow: %s -> %s" % (b, a))
    for sl, r in enumerate(rows(vid)):
        report(vid, sl, primary(r), "node-2", "CAUGHT_UP", r["v"])
    wait_for("M3: node-2 in sync after CAUGHT_UP",
             lambda: all(r["states"] == ["in_sync"] * 3 for r in rows(vid)), 3)

    # ---- M7: node-1 gone for good -> replaced by node-4 ----
    # node-5 has more free space but shares node-2's failure domain: with
    # 4 domains among live nodes (>= 3 replicas) it must not be chosen.
    node_up(4)
    node_up(5, domain=NODES["node-2"]["domain"], free=1 << 50)
    t0 = node_down(1)
    dt = wait_for("M7: node-1 replaced by node-4",
                  lambda: all("node-1" not in r["nodes"] for r in rows(vid)),
                  GRACE + DOWN_OUT + 3)
    FIGURES.append("lease loss -> replaced (M7): %.2f s (down-out %d s)" % (dt, DOWN_OUT))
    for r in rows(vid):
        check_row(r, "M7")
        if state(r, "node-4") != "recovering":
            fail("M7: node-4 is not the recovering replacement: %s" % r)
        if r["incarnations"][r["nodes"].index("node-4")] != NODES["node-4"]["inc"]:
            fail("M7: node-4's incarnation not recorded: %s" % r)
        doms = [NODES[n]["domain"] for n in r["nodes"]]
        if len(set(doms)) != 3:
            fail("M7: failure domains not distinct: %s" % r)
    node_down(5)

    # ---- kill -9 of the leading manager with decisions pending ----
    if leader() != "ctrl-a":
        fail("ctrl-a should still lead, leader is %s" % leader())
    node_down(4)
    time.sleep(0.3)
    t0 = time.monotonic()
    ctrl_stop("ctrl-a", signal.SIGKILL)
    if any(state(r, "node-4") == "out" for r in rows(vid)):
        fail("kill -9: the decision was not pending any more; the test is void")
    dt = wait_for("kill -9: ctrl-b sets node-4 out",
                  lambda: all(state(r, "node-4") == "out" for r in rows(vid)), 20)
    FIGURES.append("kill -9 of the manager -> the other one finished M1: %.2f s" % dt)
    if leader() != "ctrl-b":
        fail("ctrl-b does not lead after the kill: %s" % leader())
    for r in rows(vid):
        check_row(r, "failover")

    # ---- a manager that lost its lease writes nothing ----
    ctrl_start("ctrl-a", "--manager=on", "--down-out-interval", "600")
    time.sleep(1.5)
    CTRL["ctrl-b"].send_signal(signal.SIGSTOP)
    wait_leader("ctrl-a", 15)
    CTRL["ctrl-a"].send_signal(signal.SIGSTOP)
    _, rev = volume(vid)
    node_up(4)  # pending: M2 for node-4
    CTRL["ctrl-b"].send_signal(signal.SIGCONT)
    time.sleep(GRACE + 2)
    if volume(vid)[1] != rev:
        fail("a manager that lost its lease wrote: %s" % rows(vid))
    if leader() != "ctrl-a":
        fail("ctrl-b took the leader key back while ctrl-a still held it")
    CTRL["ctrl-a"].send_signal(signal.SIGCONT)
    wait_for("M2 by the rightful leader after SIGCONT",
             lambda: all(state(r, "node-4") == "recovering" for r in rows(vid)), 10)
    for r in rows(vid):
        check_row(r, "end")

    for name in list(CTRL):
        ctrl_stop(name)
    for f in FIGURES:
        print("manager_test: figure: " + f)
    print("manager_test: PASS")


if __name__ == "__main__":
    try:
        main()
    finally:
        for name, p in list(CTRL.items()):
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(timeout=10)
            except Exception:
                pass
