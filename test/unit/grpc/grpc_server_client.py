#!/usr/bin/python3
"""Client half of grpc_server_test: Debian's python3-grpcio against the test
server that grpc_server_test.c runs on lib/grpc. The endpoint comes from
ZL_TEST_CSI_ENDPOINT. The expected answers are those of the handlers in
grpc_server_test.c."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import csi_client  # noqa: E402
from csi_client import CsiClient, rpc_error  # noqa: E402

import grpc  # noqa: E402

ENDPOINT = os.environ.get("ZL_TEST_CSI_ENDPOINT", "")
# A length-delimited field 1 announcing 5 bytes and carrying 2: no protobuf
# decoder can accept it.
MALFORMED = b"\x0a\x05ab"


class GrpcServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ENDPOINT:
            raise RuntimeError("ZL_TEST_CSI_ENDPOINT not set: run this through grpc_server_test, "
                               "which starts the server and sets it")
        cls.c = CsiClient(ENDPOINT)
        cls.c.wait_ready(10)
        cls.pb = cls.c.pb

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_get_plugin_info(self):
        r = self.c.identity.GetPluginInfo(self.pb.GetPluginInfoRequest(), timeout=5)
        self.assertEqual(r.name, "test.zipline.csi.io")
        self.assertEqual(r.vendor_version, "0.1.0-test")
        self.assertEqual(dict(r.manifest), {"component": "grpc-test"})

    def test_get_plugin_capabilities(self):
        r = self.c.identity.GetPluginCapabilities(
            self.pb.GetPluginCapabilitiesRequest(), timeout=5)
        self.assertEqual(len(r.capabilities), 2)
        self.assertEqual(r.capabilities[0].WhichOneof("type"), "service")
        self.assertEqual(r.capabilities[0].service.type,
                         self.pb.PluginCapability.Service.CONTROLLER_SERVICE)
        self.assertEqual(r.capabilities[1].WhichOneof("type"), "volume_expansion")
        self.assertEqual(r.capabilities[1].volume_expansion.type,
                         self.pb.PluginCapability.VolumeExpansion.ONLINE)

    def test_probe(self):
        r = self.c.identity.Probe(self.pb.ProbeRequest(), timeout=5)
        self.assertTrue(r.HasField("ready"))
        self.assertTrue(r.ready.value)

    def test_unknown_method_unimplemented(self):
        # A real CSI method the test server does not register...
        code, details = rpc_error(self.c.node.NodeGetInfo, self.pb.NodeGetInfoRequest(),
                                  timeout=5)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("/csi.v1.Node/NodeGetInfo", details)
        # ...and a method of no service at all.
        code, details = rpc_error(self.c.raw_call, "/no.such.Service/Nothing", b"", timeout=5)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("/no.such.Service/Nothing", details)

    def test_handler_error_code_and_message(self):
        # zl_grpc_fail_err(ZL_ERR_EXISTS): mapped code, context + zl_strerror text.
        req = self.pb.CreateVolumeRequest(name="exists")
        code, details = rpc_error(self.c.controller.CreateVolume, req, timeout=5)
        self.assertEqual(code, grpc.StatusCode.ALREADY_EXISTS)
        self.assertEqual(details,
                         "volume exists with another size: already exists with different parameters")
        # A bare negative project error returned by the handler.
        req = self.pb.CreateVolumeRequest(name="bare-error")
        code, details = rpc_error(self.c.controller.CreateVolume, req, timeout=5)
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("no in-sync replica reachable", details)
        # zl_grpc_fail with an explicit code.
        req = self.pb.CreateVolumeRequest(name="")
        code, details = rpc_error(self.c.controller.CreateVolume, req, timeout=5)
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(details, "CreateVolume: name is required")

    def test_worker_method_ok(self):
        req = self.pb.CreateVolumeRequest(name="pvc-1")
        req.capacity_range.required_bytes = 1 << 30
        r = self.c.controller.CreateVolume(req, timeout=5)
        self.assertEqual(r.volume.volume_id, "vol-pvc-1")
        self.assertEqual(r.volume.capacity_bytes, 1 << 30)
        self.assertEqual(r.volume.accessible_topology[0].segments["topology.zipline.io/node"],
                         "n1")

    def test_slow_call_does_not_block_others(self):
        result = {}

        def slow():
            t0 = time.monotonic()
            try:
                r = self.c.controller.CreateVolume(self.pb.CreateVolumeRequest(name="slow"),
                                                   timeout=10)
                result["resp"] = r
            except grpc.RpcError as e:  # reported by the assertions below
                result["err"] = e
            result["took"] = time.monotonic() - t0

        th = threading.Thread(target=slow)
        th.start()
        time.sleep(0.3)  # let the slow call reach its handler
        t0 = time.monotonic()
        for _ in range(5):
            self.assertTrue(self.c.identity.Probe(self.pb.ProbeRequest(), timeout=5).ready.value)
        probe_took = time.monotonic() - t0
        # A worker method is not held up either (other workers are free).
        t0 = time.monotonic()
        self.c.controller.ControllerGetCapabilities(
            self.pb.ControllerGetCapabilitiesRequest(), timeout=5)
        worker_took = time.monotonic() - t0
        still_running = th.is_alive()
        th.join(15)
        self.assertTrue(still_running, "the slow call ended before the probes were done")
        self.assertLess(probe_took, 1.0)
        self.assertLess(worker_took, 1.0)
        self.assertNotIn("err", result)
        self.assertGreaterEqual(result["took"], 2.0)
        # The handler saw the client's 10 s deadline (the grpc-timeout header
        # rounds it up to a coarser unit, hence the slack above 10 s).
        left = int(result["resp"].volume.volume_context["deadline_left_ms"])
        self.assertGreater(left, 7000)
        self.assertLessEqual(left, 11000)

    def test_no_deadline_is_reported_as_none(self):
        r = self.c.controller.CreateVolume(self.pb.CreateVolumeRequest(name="pvc-nodeadline"))
        self.assertEqual(r.volume.volume_context["deadline_left_ms"], "none")

    def test_client_deadline_exceeded(self):
        code, _ = rpc_error(self.c.controller.CreateVolume,
                            self.pb.CreateVolumeRequest(name="slow"), timeout=0.5)
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_malformed_request_invalid_argument(self):
        for method in ("/csi.v1.Identity/Probe", "/csi.v1.Controller/CreateVolume"):
            code, details = rpc_error(self.c.raw_call, method, MALFORMED, timeout=5)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, method)
            self.assertIn("malformed protobuf", details)

    def test_stub_cache_reused(self):
        out1 = csi_client.generate_stubs()
        out2 = csi_client.generate_stubs()
        self.assertEqual(out1, out2)
        self.assertTrue(os.path.isfile(os.path.join(out1, "csi_pb2.py")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
