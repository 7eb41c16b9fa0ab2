#!/usr/bin/env python3
"""Watches processes for state D (uninterruptible sleep) until SIGTERM:
prints "ready" once it samples, and at the end one JSON line: samples, the largest gap between samples, and the
longest time a watched process stayed in D without progress.

  dstate_sampler.py NEEDLE...    (reads /proc every 100 ms)

Watched: processes whose command line contains one of the NEEDLEs, and their
children. "Without progress": its /proc/PID/io counters and wchan did not
change between samples, and no block device it uses completed an I/O (a
process moving data on a slow disk is waiting, not stuck; so is one whose
fsync waits for the writeback of its pages to a device that completes
them). The devices it uses: the block device files it has open, and the
devices under the mounts its open files lie on (paths and mountinfo only:
nothing is stat'ed on a file system that may hang). Runs as its own process at a high priority (nice -15 as root), so
neither the test's own threads nor a loaded machine make it miss a stuck
process: the gap it reports is the check of that.
"""
import json
import os
import signal
import stat
import sys
import time


def devices(pid):
    """maj:min of the block devices pid has open, or holds files on."""
    mounts = []
    with open("/proc/%d/mountinfo" % pid) as f:
        for line in f:
            w = line.split()
            mounts.append((w[4].rstrip("/") + "/", w[2]))
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            path = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            if not path.startswith("/"):
                continue  # a socket, a pipe, an anonymous inode
            if path.startswith("/dev/"):  # devtmpfs: a stat cannot hang
                st = os.stat(path)
                if stat.S_ISBLK(st.st_mode):
                    out.add("%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)))
                continue
            best = max((m for m in mounts if path.startswith(m[0])), key=lambda m: len(m[0]),
                       default=None)
            if best:
                out.add(best[1])
        except OSError:
            continue
    return out


def completions(majmin):
    """I/Os and sectors completed by a block device (reads, writes,
    discards, flushes): not in flight, not time, which grow while stuck."""
    try:
        with open("/sys/dev/block/%s/stat" % majmin) as f:
            w = f.read().split()
        return majmin + ":" + ",".join(w[i] for i in (0, 2, 4, 6, 11, 13, 15) if i < len(w))
    except OSError:
        return ""


def progress(pid):
    try:
        with open("/proc/%d/io" % pid) as f:
            io = f.read()
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read()
        devs = sorted(completions(d) for d in devices(pid))
        return io + wchan + " ".join(devs)
    except OSError:
        return None


def where(pid):
    """The kernel functions a process waits in: its stack (root), else its
    wchan; for the report of the worst one."""
    for path in ("/proc/%d/stack" % pid, "/proc/%d/wchan" % pid):
        try:
            with open(path) as f:
                frames = [ln.split()[-1].split("+")[0] for ln in f.read().splitlines() if ln]
            if frames:
                return " < ".join(frames[:8])
        except (OSError, IndexError):
            pass
    return "?"


def main():
    needles = sys.argv[1:]
    try:
        os.nice(-15)
    except OSError:
        pass
    cmds, since = {}, {}
    worst, worst_what, samples, max_gap = 0.0, None, 0, 0.0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("ready", flush=True)  # the caller starts its phase after this line
    last = time.monotonic()
    while not stop:
        now = time.monotonic()
        max_gap = max(max_gap, now - last)
        last = now
        samples += 1
        procs, ppid = {}, {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
                rest = st[st.rindex(")") + 2:].split()
                key = (int(d), rest[19])  # pid, start time: a cmdline is read once
                if key not in cmds:
                    with open("/proc/%s/cmdline" % d, "rb") as f:
                        cmds[key] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError):
                continue
            procs[int(d)] = (cmds[key], rest[0])
            ppid[int(d)] = int(rest[1])
        mine = {p for p, (cmd, _) in procs.items() if any(n in cmd for n in needles)}
        mine |= {p for p in procs if ppid.get(p) in mine}
        seen = set()
        for pid in mine:
            cmd, state = procs[pid]
            if state != "D" or pid == os.getpid():
                continue
            seen.add(pid)
            io = progress(pid)
            t0, io0 = since.get(pid, (now, None))
            if io != io0:
                t0 = now
            since[pid] = (t0, io)
            if now - t0 > worst:
                worst, worst_what = now - t0, "%d %s (waits in %s)" % (pid, cmd[:120],
                                                                     where(pid))
        for pid in list(since):
            if pid not in seen:
                del since[pid]
        time.sleep(max(0.0, 0.1 - (time.monotonic() - now)))
    print(json.dumps({"samples": samples, "max_gap": max_gap, "worst": worst,
                      "worst_what": worst_what}), flush=True)


if __name__ == "__main__":
    main()
