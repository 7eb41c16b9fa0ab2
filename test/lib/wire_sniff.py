#!/usr/bin/env python3
"""What the e2e tests see on the wire, independently of Zipline's code.

  wire_sniff.py capture OUT READY PORT...
      Captures every IPv4 TCP segment on the loopback interface (AF_PACKET,
      needs root) from or to one of PORTs and appends its payload to OUT,
      until SIGTERM. Touches READY once the socket is bound.
  wire_sniff.py count PATTERN CAPTURE
      Cuts PATTERN into 32-byte pieces and prints
      "pieces=N found=K captured=BYTES": K is how many of them occur in
      CAPTURE (plaintext on the wire shows most; TLS shows none).
"""
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PIECE = 32


SO_TIMESTAMPNS = 35  # = SCM_TIMESTAMPNS (linux/socket.h)


def stamp(anc):
    """The kernel's receive time (seconds) of a frame, from its ancillary data."""
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack_from("@qq", data)
            return sec + nsec / 1e9
    return 0.0


def capture(out_path, ready_path, ports):
    ports = {int(p) for p in ports}
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # A large buffer: the test's traffic comes in bursts faster than this
    # loop, and a dropped frame would be a byte the check never saw.
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 256 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 20)
    s.bind(("lo", 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(time.time()))
    open(ready_path, "w").close()
    with open(out_path, "ab") as out:
        # After SIGTERM the frames already queued on the socket are still
        # read (a loaded machine lets this loop fall behind the traffic), up
        # to the first one the kernel stamped after the signal (other
        # loopback traffic of the machine never lets the queue run dry),
        # then the capture ends.
        draining = False
        while True:
            if stop and not draining:
                draining = True
                s.setblocking(False)
            try:
                frame, anc, _, _ = s.recvmsg(262144, socket.CMSG_SPACE(16))
            except socket.timeout:
                continue
            except InterruptedError:
                continue
            except BlockingIOError:
                break
            if draining and stamp(anc) > stop[0]:
                break
            # Loopback frames carry a 14-byte Ethernet header (all zero MACs).
            if len(frame) < 14 + 20 or struct.unpack_from("!H", frame, 12)[0] != 0x0800:
                continue
            ip = frame[14:]
            ihl = (ip[0] & 0x0F) * 4
            if ip[9] != 6 or len(ip) < ihl + 20:
                continue
            total = struct.unpack_from("!H", ip, 2)[0]
            tcp = ip[ihl:total]
            sport, dport = struct.unpack_from("!HH", tcp, 0)
            if sport not in ports and dport not in ports:
                continue
            doff = (tcp[12] >> 4) * 4
            payload = tcp[doff:]
            if payload:
                out.write(payload)


def count(pattern_path, capture_path):
    pat = open(pattern_path, "rb").read()
    cap = open(capture_path, "rb").read()
    pieces = [pat[i:i + PIECE] for i in range(0, len(pat) - PIECE + 1, PIECE)]
    found = sum(1 for p in pieces if p in cap)
    print("pieces=%d found=%d captured=%d" % (len(pieces), found, len(cap)))


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "capture":
        capture(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "count":
        count(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
