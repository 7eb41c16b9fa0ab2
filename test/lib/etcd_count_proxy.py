#!/usr/bin/env python3
"""A TCP relay in front of etcd's JSON gateway that counts the HTTP requests
going through it, by path: the oracle of dos_e2e.sh for "how many etcd round
trips did the daemon make", independent of the daemon's own claims.

  etcd_count_proxy.py UPSTREAM_URL PORT_FILE COUNT_FILE

Listens on a free loopback port (written to PORT_FILE), relays every
connection byte for byte to UPSTREAM (http://host:port), and rewrites
COUNT_FILE (JSON {"/v3/kv/range": n, ..., "total": n}) every 100 ms. A
request is counted when its request line ("POST /v3/... HTTP/1.1") passes
from the client to etcd; keep-alive connections carry many. Runs until
killed."""
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse

# Anywhere in the stream: on a keep-alive connection a request line follows
# the previous request's body directly (no CRLF in between); JSON bodies
# never hold " HTTP/1.1\r\n".
REQ_LINE = re.compile(rb'(GET|POST|PUT|DELETE) (/[^ \r\n]*) HTTP/1\.[01]\r\n')

counts = {}
lock = threading.Lock()


def count(path):
    with lock:
        counts[path] = counts.get(path, 0) + 1
        counts['total'] = counts.get('total', 0) + 1


def pump(src, dst, scan):
    carry = b''
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if scan:
                # A request line split across two reads is still seen
                # once: the unmatched tail is kept for the next read.
                buf = carry + data
                last = 0
                for m in REQ_LINE.finditer(buf):
                    count(m.group(2).decode('latin-1'))
                    last = m.end()
                carry = buf[max(last, len(buf) - 512):]
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client, upstream):
    try:
        up = socket.create_connection(upstream, timeout=10)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, up, True), daemon=True).start()
    threading.Thread(target=pump, args=(up, client, False), daemon=True).start()


def writer(path):
    while True:
        with lock:
            snap = dict(counts)
        snap['written_ms'] = int(time.time() * 1000)  # wall clock: readers wait for a fresh one
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(snap, f)
        os.replace(tmp, path)
        time.sleep(0.1)


def main():
    url = urllib.parse.urlparse(sys.argv[1])
    upstream = (url.hostname, url.port or 2379)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(('127.0.0.1', 0))
    ls.listen(128)
    threading.Thread(target=writer, args=(sys.argv[3],), daemon=True).start()
    with open(sys.argv[2] + '.tmp', 'w') as f:
        f.write('%d\n' % ls.getsockname()[1])
    os.replace(sys.argv[2] + '.tmp', sys.argv[2])
    while True:
        c, _ = ls.accept()
        serve(c, upstream)


if __name__ == '__main__':
    main()
