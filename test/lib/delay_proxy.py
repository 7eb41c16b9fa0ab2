#!/usr/bin/env python3
"""A TCP proxy that delays what a server answers (scrub_race_e2e.sh): a
storage daemon advertises the proxy's port, so its peers and clients reach
it through it.

  delay_proxy.py LISTEN_PORT UPSTREAM_HOST:UPSTREAM_PORT DELAY_FILE

Listens on 127.0.0.1:LISTEN_PORT, connects each client to
UPSTREAM_HOST:UPSTREAM_PORT (a daemon listening on 127.0.0.2 and
advertising 127.0.0.1, so that its advertised port is the proxy's). What the client sends passes at once. While
DELAY_FILE exists, what the server sends is held for the number of
milliseconds the file holds (order kept, per connection), as a slow
network path from that server would; without the file it passes at once.
Prints "listening ..." once bound, and "delayed N bytes by MS ms" per held
piece.
"""
import queue
import socket
import sys
import threading
import time

SAY = threading.Lock()


def say(line):
    with SAY:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()


def delay_ms(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or '0')
    except (OSError, ValueError):
        return 0


def upward(cli, up):
    """Client -> server, at once."""
    try:
        while True:
            data = cli.recv(65536)
            if not data:
                break
            up.sendall(data)
    except OSError:
        pass
    try:
        up.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def downward(cli, up, delay_file):
    """Server -> client: a reader stamps each piece with its arrival time and
    the delay of that moment, a sender sends it no sooner than arrival plus
    delay (and never before an earlier piece)."""
    q = queue.Queue()

    def reader():
        try:
            while True:
                data = up.recv(65536)
                if not data:
                    break
                q.put((time.monotonic(), delay_ms(delay_file), data))
        except OSError:
            pass
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    try:
        while True:
            item = q.get()
            if item is None:
                break
            t, ms, data = item
            if ms > 0:
                wait = t + ms / 1000.0 - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                say('delayed %d bytes by %d ms' % (len(data), ms))
            cli.sendall(data)
    except OSError:
        pass
    finally:
        cli.close()
        up.close()


def main():
    port, delay_file = int(sys.argv[1]), sys.argv[3]
    uhost, uport = sys.argv[2].rsplit(':', 1)
    upstream = (uhost, int(uport))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(('127.0.0.1', port))
    ls.listen(64)
    say('listening on %d for %s:%d' % (port, upstream[0], upstream[1]))
    while True:
        cli, _ = ls.accept()
        try:
            up = socket.create_connection(upstream, timeout=5)
            up.settimeout(None)
        except OSError as e:
            say('upstream connect failed: %s' % e)
            cli.close()
            continue
        for s in (cli, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=upward, args=(cli, up), daemon=True).start()
        threading.Thread(target=downward, args=(cli, up, delay_file), daemon=True).start()


if __name__ == '__main__':
    main()
