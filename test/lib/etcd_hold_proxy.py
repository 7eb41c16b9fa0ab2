#!/usr/bin/env python3
"""A TCP proxy in front of etcd's JSON gateway that can hold watch streams
(fence_race_e2e.sh): one daemon's etcd watches lag by as long as the test
wants, everything else passes at once.

  etcd_hold_proxy.py LISTEN_PORT UPSTREAM_PORT HOLD_FILE [all]

Listens on 127.0.0.1:LISTEN_PORT, connects each client to
127.0.0.1:UPSTREAM_PORT. A connection whose first request is a /v3/watch is a
watch stream: while HOLD_FILE exists, what etcd sends on it is buffered (in
order), and sent on once HOLD_FILE is removed. With "all", the answers to
every other request are held the same way (etcd accepts the requests but its
answers wait: noblock_e2e.sh). While HOLD_FILE.cut exists, every watch stream
is cut: what it held is dropped and both of its connections are closed, as
a network partition would (the client reconnects from the last revision it
saw: watch_compact_e2e.sh compacts etcd first). Requests always pass. Prints
"held N bytes" / "released N bytes" lines on stdout, and per watch stream
"watch stream opened|holding|released|cut|closed" (holding: HOLD_FILE seen, what
etcd sends from now on is held), and with "all" "held a response" when the
answer to a request is held.
"""
import os
import select
import socket
import sys
import threading

SAY = threading.Lock()


def say(line):
    """One whole line on stdout (pumps of several streams print at once:
    the tests count lines)."""
    with SAY:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()


def pump(cli, up, hold_file, hold_all):
    watch = None
    armed = False
    held = bytearray()
    socks = [cli, up]
    try:
        while True:
            r, _, _ = select.select(socks, [], [], 0.02)
            holding = os.path.exists(hold_file)
            if watch and os.path.exists(hold_file + '.cut'):
                say('watch stream cut (%d held bytes dropped)' % len(held))
                held.clear()
                return
            if watch and holding != armed:
                armed = holding
                # Every watch stream says when it holds (tests wait for it).
                say('watch stream %s' % ('holding' if armed else 'released'))
            if held and not holding:
                cli.sendall(held)
                say('released %d bytes' % len(held))
                held.clear()
            for s in r:
                data = s.recv(65536)
                if not data:
                    if held and not os.path.exists(hold_file + '.cut'):
                        cli.sendall(held)
                    return
                if s is cli:
                    if watch is None:
                        watch = b'/v3/watch' in data
                        if watch:
                            say('watch stream opened')
                    up.sendall(data)
                elif (watch or hold_all) and holding:
                    if not held:
                        say('held a %s' % ('watch message' if watch else 'response'))
                    held += data
                else:
                    cli.sendall(data)
    except OSError:
        pass
    finally:
        if watch:
            say('watch stream closed')
        cli.close()
        up.close()


def main():
    port, upstream, hold_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    hold_all = len(sys.argv) > 4 and sys.argv[4] == 'all'
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(('127.0.0.1', port))
    ls.listen(64)
    say('listening on %d for %d' % (port, upstream))
    while True:
        cli, _ = ls.accept()
        try:
            up = socket.create_connection(('127.0.0.1', upstream), timeout=5)
            up.settimeout(None)
        except OSError as e:
            say('upstream connect failed: %s' % e)
            cli.close()
            continue
        threading.Thread(target=pump, args=(cli, up, hold_file, hold_all), daemon=True).start()


if __name__ == '__main__':
    main()
