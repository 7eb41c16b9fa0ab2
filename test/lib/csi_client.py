"""CSI client helpers for Zipline's tests: an independent gRPC client (Debian's
python3-grpcio) talking to our C servers.

Python stubs are generated at run time from proto/csi.proto with
`python3 -m grpc_tools.protoc` into a cache directory keyed by the proto's
hash; nothing generated is committed. Run with /usr/bin/python3: the python3
found first on PATH may not see Debian's python3-grpcio.

    from csi_client import CsiClient
    c = CsiClient("unix:///tmp/x/csi.sock")
    c.wait_ready(5)
    print(c.identity.Probe(c.pb.ProbeRequest(), timeout=5))
"""

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

_LOADED = None


def source_dir():
    """The repository root: $ZL_SOURCE_DIR, else two levels above this file."""
    env = os.environ.get("ZL_SOURCE_DIR")
    if env:
        return env
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _default_cache_dir():
    if os.environ.get("ZL_CSI_STUB_DIR"):
        return os.environ["ZL_CSI_STUB_DIR"]
    if os.environ.get("ZL_BUILD_DIR"):
        return os.path.join(os.environ["ZL_BUILD_DIR"], "csi-py-stubs")
    return os.path.join(tempfile.gettempdir(), "zl-csi-py-stubs-%d" % os.getuid())


def _proto_includes():
    incs = []
    try:
        import grpc_tools

        wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        if os.path.isdir(wkt):
            incs.append(wkt)
    except ImportError:
        pass
    if os.path.isfile("/usr/include/google/protobuf/descriptor.proto"):
        incs.append("/usr/include")
    return incs


def generate_stubs(cache_dir=None):
    """Generates csi_pb2.py and csi_pb2_grpc.py for proto/csi.proto into
    <cache_dir>/<hash>/ unless they are there already, and returns that
    directory. Safe against concurrent callers (generate, then rename)."""
    proto = os.path.join(source_dir(), "proto", "csi.proto")
    with open(proto, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    cache_dir = cache_dir or _default_cache_dir()
    out = os.path.join(cache_dir, digest)
    if os.path.isfile(os.path.join(out, "csi_pb2_grpc.py")):
        return out
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="gen-", dir=cache_dir)
    try:
        cmd = [sys.executable, "-m", "grpc_tools.protoc",
               "-I" + os.path.dirname(proto)]
        cmd += ["-I" + i for i in _proto_includes()]
        cmd += ["--python_out=" + tmp, "--grpc_python_out=" + tmp, proto]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("grpc_tools.protoc failed on %s (is python3-grpc-tools "
                               "installed? run with /usr/bin/python3): %s"
                               % (proto, res.stderr.strip()))
        try:
            os.rename(tmp, out)
        except OSError:
            if not os.path.isfile(os.path.join(out, "csi_pb2_grpc.py")):
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_csi(cache_dir=None):
    """Returns the generated modules (csi_pb2, csi_pb2_grpc)."""
    global _LOADED
    if _LOADED is None:
        out = generate_stubs(cache_dir)
        if out not in sys.path:
            sys.path.insert(0, out)
        _LOADED = (importlib.import_module("csi_pb2"),
                   importlib.import_module("csi_pb2_grpc"))
    return _LOADED


def wait_for_socket(path, timeout=10.0):
    """Waits until a UNIX socket file appears at path; raises TimeoutError."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            return
        time.sleep(0.05)
    raise TimeoutError("no socket at %s after %.1fs" % (path, timeout))


class CsiClient:
    """A gRPC channel to a CSI endpoint with the three CSI service stubs.

    pb / pb_grpc are the generated modules; identity, controller and node
    the stubs. raw_call() sends arbitrary bytes to any method."""

    def __init__(self, endpoint, cache_dir=None):
        import grpc

        self.grpc = grpc
        self.pb, self.pb_grpc = load_csi(cache_dir)
        self.endpoint = endpoint
        self.channel = grpc.insecure_channel(endpoint)
        self.identity = self.pb_grpc.IdentityStub(self.channel)
        self.controller = self.pb_grpc.ControllerStub(self.channel)
        self.node = self.pb_grpc.NodeStub(self.channel)

    def wait_ready(self, timeout=10.0):
        """Blocks until the channel connects; raises grpc.FutureTimeoutError."""
        self.grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def raw_call(self, method, payload, timeout=10.0):
        """Calls method ("/csi.v1.Identity/Probe") with payload bytes sent
        as they are; returns the response bytes or raises grpc.RpcError."""
        fn = self.channel.unary_unary(method)
        return fn(payload, timeout=timeout)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def rpc_error(fn, *args, **kwargs):
    """Runs a call expected to fail; returns (code, details) of the
    grpc.RpcError, or raises AssertionError if the call succeeded."""
    import grpc

    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise AssertionError("call %r succeeded, an error was expected" % (fn,))
