"""etcd v3 JSON gateway access for the e2e tests' embedded python (keys and
values are base64 on the wire). New tests import this instead of repeating
it: sys.path.insert(0, '<src>/test/lib'); import etcd_gw."""
import base64
import json
import urllib.request


def b64(s):
    return base64.b64encode(s.encode()).decode()


def call(etcd, path, body):
    """POSTs body (a dict) to etcd + path; returns the decoded answer."""
    req = urllib.request.Request(etcd + path, data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def get(etcd, key):
    """The kv of key (value still base64), or None when absent."""
    kvs = call(etcd, '/v3/kv/range', {'key': b64(key)}).get('kvs', [])
    return kvs[0] if kvs else None
