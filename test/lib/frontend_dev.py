"""What a staged volume leaves in the kernel and in /proc, seen from outside
(sysfs, /dev, /proc): for the CSI tests of the FUSE, nbd and ublk frontends
(test/e2e/csi_hang_test.py, test/vm/csi_frontend_guest.py).

    leftovers("/dev/ublkb0")   # [] once the device is deleted
    attach_pids("vol-0123...") # attach processes whose argv names it
"""

import os


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def leftovers(dev):
    """Traces of an nbd or ublk device that should be gone after its volume
    was unstaged (or its attach process stopped): [] when there are none.
    ublk (/dev/ublkbN): the block node, the char node /dev/ublkcN and
    /sys/block/ublkbN must be gone (DEL_DEV). nbd (/dev/nbdN, which the
    module keeps): disconnected, i.e. no /sys/block/nbdN/pid and size 0."""
    name = os.path.basename(dev)
    left = []
    if name.startswith("ublkb"):
        for p in (dev, "/dev/ublkc" + name[len("ublkb"):], "/sys/block/" + name):
            if os.path.exists(p):
                left.append(p)
    elif name.startswith("nbd"):
        if os.path.exists("/sys/block/%s/pid" % name):
            left.append("/sys/block/%s/pid (%s)" % (name, _read("/sys/block/%s/pid" % name)))
        size = _read("/sys/block/%s/size" % name)
        if size not in (None, "0"):
            left.append("/sys/block/%s/size %s" % (name, size))
    else:
        raise ValueError("not an nbd or ublk device: %s" % dev)
    return left


def attach_pids(needle, zombie_parents=()):
    """PIDs of live `zipline-node attach` processes whose command line holds
    needle (a volume id, a work directory); with zombie_parents, also the
    zombies (their command line is gone) whose parent is one of those PIDs."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            if int(fields[1]) in zombie_parents:
                out.append(int(d))
        elif len(argv) > 1 and argv[1] == b"attach" and needle.encode() in b" ".join(argv):
            out.append(int(d))
    return out
