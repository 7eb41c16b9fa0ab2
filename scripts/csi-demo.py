"""make run's CSI demo: provisions and mounts a volume through the local
zipline-controller and zipline-node exactly as Kubernetes would
(CreateVolume -> ControllerPublish -> NodeStage -> NodePublish), writes a
file into it; with --teardown undoes it (NodeUnpublish -> NodeUnstage ->
ControllerUnpublish). Idempotent both ways.

  /usr/bin/python3 scripts/csi-demo.py CSI_DIR NODE_ID [--teardown]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "lib"))
from csi_client import CsiClient  # noqa: E402

NAME = "csi-demo"
SIZE = 1 << 30


def main():
    csi_dir, node_id = sys.argv[1], sys.argv[2]
    teardown = "--teardown" in sys.argv[3:]
    ctrl = CsiClient("unix://" + os.path.join(csi_dir, "controller.sock"))
    node = CsiClient("unix://" + os.path.join(csi_dir, "node.sock"))
    ctrl.wait_ready(20)
    node.wait_ready(20)
    pb = ctrl.pb
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
                              access_mode=pb.VolumeCapability.AccessMode(mode=1))
    staging = os.path.join(csi_dir, "staging", NAME)
    target = os.path.join(csi_dir, "mnt", NAME)
    vol = ctrl.controller.CreateVolume(
        pb.CreateVolumeRequest(name=NAME, capacity_range=pb.CapacityRange(required_bytes=SIZE),
                               volume_capabilities=[cap], parameters={"replicas": "3"}),
        timeout=120).volume
    if teardown:
        node.node.NodeUnpublishVolume(
            pb.NodeUnpublishVolumeRequest(volume_id=vol.volume_id, target_path=target), timeout=120)
        node.node.NodeUnstageVolume(
            pb.NodeUnstageVolumeRequest(volume_id=vol.volume_id, staging_target_path=staging),
            timeout=120)
        ctrl.controller.ControllerUnpublishVolume(
            pb.ControllerUnpublishVolumeRequest(volume_id=vol.volume_id, node_id=node_id),
            timeout=120)
        print("csi-demo: %s (%s) unmounted and detached" % (NAME, vol.volume_id))
        return
    pctx = ctrl.controller.ControllerPublishVolume(
        pb.ControllerPublishVolumeRequest(volume_id=vol.volume_id, node_id=node_id,
                                          volume_capability=cap), timeout=120).publish_context
    os.makedirs(staging, exist_ok=True)
    node.node.NodeStageVolume(
        pb.NodeStageVolumeRequest(volume_id=vol.volume_id, staging_target_path=staging,
                                  volume_capability=cap, publish_context=pctx), timeout=300)
    node.node.NodePublishVolume(
        pb.NodePublishVolumeRequest(volume_id=vol.volume_id, staging_target_path=staging,
                                    target_path=target, volume_capability=cap,
                                    publish_context=pctx), timeout=120)
    with open(os.path.join(target, "hello.txt"), "w") as f:
        f.write("written through CSI onto Zipline volume %s\n" % vol.volume_id)
        f.flush()
        os.fsync(f.fileno())
    print("csi-demo: volume %s (%s) provisioned by zipline-controller, mounted by "
          "zipline-node at %s" % (NAME, vol.volume_id, target))


if __name__ == "__main__":
    main()
