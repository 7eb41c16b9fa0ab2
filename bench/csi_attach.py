#!/usr/bin/python3
"""The path a pod's block volume takes, driven without kubelet: CreateVolume
and ControllerPublishVolume on zipline-controller, NodeStageVolume and
NodePublishVolume (block mode) on zipline-node, both on unix sockets.
zipline-node starts the volume's attach process (FUSE file + loop device)
and bind-mounts the loop device on the target path.

    csi_attach.py up CSI_DIR NAME SIZE REPLICAS NODE_ID
        prints "VOLUME_ID TARGET ATTACH_PID"
    csi_attach.py down CSI_DIR VOLUME_ID NODE_ID

CSI_DIR holds controller.sock and node.sock (test/lib/cluster.sh's
cl_start_csi) and node-state/. Run with /usr/bin/python3 (Debian's grpcio).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "test", "lib"))
from csi_client import CsiClient  # noqa: E402

T = 120


def paths(csi_dir, vol):
    return os.path.join(csi_dir, "bench-staging", vol), os.path.join(csi_dir, "bench-pods", vol)


def up(csi_dir, name, size, replicas, node_id):
    ctrl = CsiClient("unix://" + os.path.join(csi_dir, "controller.sock"))
    node = CsiClient("unix://" + os.path.join(csi_dir, "node.sock"))
    ctrl.wait_ready(20)
    node.wait_ready(20)
    pb = ctrl.pb
    cap = pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(),
                              access_mode=pb.VolumeCapability.AccessMode(mode=1))
    v = ctrl.controller.CreateVolume(
        pb.CreateVolumeRequest(name=name, capacity_range=pb.CapacityRange(required_bytes=size),
                               volume_capabilities=[cap], parameters={"replicas": str(replicas)}),
        timeout=T).volume
    pctx = dict(ctrl.controller.ControllerPublishVolume(
        pb.ControllerPublishVolumeRequest(volume_id=v.volume_id, node_id=node_id,
                                          volume_capability=cap), timeout=T).publish_context)
    staging, target = paths(csi_dir, v.volume_id)
    os.makedirs(staging, exist_ok=True)
    node.node.NodeStageVolume(
        pb.NodeStageVolumeRequest(volume_id=v.volume_id, staging_target_path=staging,
                                  volume_capability=cap, publish_context=pctx), timeout=T)
    node.node.NodePublishVolume(
        pb.NodePublishVolumeRequest(volume_id=v.volume_id, staging_target_path=staging,
                                    target_path=target, volume_capability=cap,
                                    publish_context=pctx), timeout=T)
    with open(os.path.join(csi_dir, "node-state", v.volume_id, "state.json")) as f:
        pid = json.load(f)["pid"]
    print(v.volume_id, target, pid)


def down(csi_dir, vol, node_id):
    ctrl = CsiClient("unix://" + os.path.join(csi_dir, "controller.sock"))
    node = CsiClient("unix://" + os.path.join(csi_dir, "node.sock"))
    pb = ctrl.pb
    staging, target = paths(csi_dir, vol)
    node.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vol, target_path=target),
                                  timeout=T)
    node.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id=vol,
                                                            staging_target_path=staging), timeout=T)
    ctrl.controller.ControllerUnpublishVolume(
        pb.ControllerUnpublishVolumeRequest(volume_id=vol, node_id=node_id), timeout=T)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "up":
        up(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) == 5 and sys.argv[1] == "down":
        down(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
