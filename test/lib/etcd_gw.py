"""etcd v3 JSON gateway access for every e2e test's python (keys and values
are base64 on the wire): the one client of test/. Tests import it instead of
repeating it: sys.path.insert(0, '<src>/test/lib'); import etcd_gw (stdlib
only: it runs under any python3, also /usr/bin/python3 with grpc)."""
import base64
import json
import urllib.request


def b64(s):
    """base64 text of s (str or bytes)."""
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def unb64(s):
    """The text that base64 s holds."""
    return base64.b64decode(s).decode()


def call(etcd, path, body):
    """POSTs body (a dict) to etcd + path; returns the decoded answer."""
    req = urllib.request.Request(etcd + path, data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def get(etcd, key, rev=0):
    """The kv of key (value still base64), or None when absent; at revision
    rev when given."""
    body = {'key': b64(key)}
    if rev:
        body['revision'] = rev
    kvs = call(etcd, '/v3/kv/range', body).get('kvs', [])
    return kvs[0] if kvs else None


def prefix_end(pre):
    """The range_end that makes a range of every key starting with pre."""
    return pre[:-1] + chr(ord(pre[-1]) + 1)


def prefix(etcd, pre):
    """The kvs of every key starting with pre (values still base64)."""
    return call(etcd, '/v3/kv/range', {'key': b64(pre), 'range_end': b64(prefix_end(pre))}).get('kvs', [])


def put(etcd, key, value, lease=0):
    """Puts key = value (str), on lease when given; returns the answer."""
    body = {'key': b64(key), 'value': b64(value)}
    if lease:
        body['lease'] = str(lease)
    return call(etcd, '/v3/kv/put', body)


def delete(etcd, key):
    return call(etcd, '/v3/kv/deleterange', {'key': b64(key)})


def lease_grant(etcd, ttl):
    """A new lease of ttl seconds: its id (a decimal string)."""
    return call(etcd, '/v3/lease/grant', {'TTL': ttl})['ID']


def lease_revoke(etcd, lease):
    call(etcd, '/v3/lease/revoke', {'ID': str(lease)})
