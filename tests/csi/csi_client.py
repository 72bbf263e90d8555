"""csi_client.py: a CSI client for the tests, built from proto/csi.proto at test time.

protoc --python_out compiles proto/csi.proto into a temporary directory
once per session (gen_csi_pb2), and Plugin wraps a grpc channel on the
plugin's unix socket with one thin unary stub per RPC, named as in the
.proto: plugin.Probe(csi_pb2.ProbeRequest()). Plugin.raw() sends bytes
that skip serialization, to feed the server garbage.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "csi.proto"
WKT_INCLUDE = "/usr/include"  # google/protobuf/*.proto (libprotobuf-dev)

# (service, method) of every RPC tierfs-csi registers; messages are <method>Request/Response
RPCS = [
    ("Identity", "GetPluginInfo"),
    ("Identity", "GetPluginCapabilities"),
    ("Identity", "Probe"),
    ("Controller", "CreateVolume"),
    ("Controller", "DeleteVolume"),
    ("Controller", "ControllerPublishVolume"),
    ("Controller", "ControllerUnpublishVolume"),
    ("Controller", "ValidateVolumeCapabilities"),
    ("Controller", "ListVolumes"),
    ("Controller", "GetCapacity"),
    ("Controller", "ControllerGetCapabilities"),
    ("Controller", "CreateSnapshot"),
    ("Controller", "DeleteSnapshot"),
    ("Controller", "ListSnapshots"),
    ("Controller", "ControllerExpandVolume"),
    ("Controller", "ControllerGetVolume"),
    ("Controller", "ControllerModifyVolume"),
    ("Node", "NodeStageVolume"),
    ("Node", "NodeUnstageVolume"),
    ("Node", "NodePublishVolume"),
    ("Node", "NodeUnpublishVolume"),
    ("Node", "NodeGetVolumeStats"),
    ("Node", "NodeExpandVolume"),
    ("Node", "NodeGetCapabilities"),
    ("Node", "NodeGetInfo"),
]

_pb2 = None


def gen_csi_pb2():
    """Compiles proto/csi.proto with protoc and imports it (once)."""
    global _pb2
    if _pb2 is not None:
        return _pb2
    protoc = shutil.which("protoc")
    if not protoc:
        raise RuntimeError("protoc not found: install protobuf-compiler "
                           "(hack/install-deps.sh)")
    out = tempfile.mkdtemp(prefix="tierfs-csi-pb2-")
    subprocess.run([protoc, f"-I{PROTO.parent}", f"-I{WKT_INCLUDE}",
                    f"--python_out={out}", str(PROTO)], check=True)
    sys.path.insert(0, out)
    _pb2 = importlib.import_module("csi_pb2")
    return _pb2


def _svc_of(method):
    for svc, m in RPCS:
        if m == method:
            return svc
    raise KeyError(method)


class Plugin:
    """A client of one tierfs-csi socket; RPC stubs are attributes."""

    def __init__(self, sock_path):
        self.pb2 = gen_csi_pb2()
        self.channel = grpc.insecure_channel(f"unix://{sock_path}")
        grpc.channel_ready_future(self.channel).result(timeout=10)
        for svc, method in RPCS:
            req = getattr(self.pb2, method + "Request")
            resp = getattr(self.pb2, method + "Response")
            stub = self.channel.unary_unary(
                f"/csi.v1.{svc}/{method}",
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString)
            setattr(self, method, stub)

    def raw(self, method, payload, timeout=10):
        """Sends payload bytes as-is to method; returns the reply's bytes."""
        stub = self.channel.unary_unary(
            f"/csi.v1.{_svc_of(method)}/{method}" if "/" not in method
            else method,
            request_serializer=None, response_deserializer=None)
        return stub(payload, timeout=timeout)

    def close(self):
        self.channel.close()


def status_of(call, *args, **kw):
    """Calls call(*args); returns the grpc.StatusCode and details it
    failed with (or OK and the response)."""
    try:
        return grpc.StatusCode.OK, call(*args, **kw)
    except grpc.RpcError as e:
        return e.code(), e.details()


def volume_cap(pb, mode="SINGLE_NODE_WRITER", block=False, group=""):
    """A VolumeCapability: access mode by name, mount (with a
    volume_mount_group) or block."""
    c = pb.VolumeCapability(access_mode=pb.VolumeCapability.AccessMode(
        mode=getattr(pb.VolumeCapability.AccessMode, mode)))
    if block:
        c.block.SetInParent()
    else:
        c.mount.SetInParent()
        c.mount.volume_mount_group = group
    return c


def csi_bin():
    return os.environ.get("TIERFS_CSI_BIN",
                          str(ROOT / "build" / "asan" / "tierfs-csi"))
