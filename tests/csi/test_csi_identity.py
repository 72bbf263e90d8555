"""Identity, and which services each --mode serves."""

import grpc
import pytest

from conftest import NODE_ID
from csi_client import RPCS, status_of

OK = grpc.StatusCode.OK
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED

# capability -> the RPCs it promises (CSI v1.9)
CONTROLLER_CAP_RPCS = {
    "CREATE_DELETE_VOLUME": ["CreateVolume", "DeleteVolume"],
    "PUBLISH_UNPUBLISH_VOLUME": ["ControllerPublishVolume",
                                 "ControllerUnpublishVolume"],
    "LIST_VOLUMES": ["ListVolumes"],
    "GET_CAPACITY": ["GetCapacity"],
    "CREATE_DELETE_SNAPSHOT": ["CreateSnapshot", "DeleteSnapshot"],
    "LIST_SNAPSHOTS": ["ListSnapshots"],
    "EXPAND_VOLUME": ["ControllerExpandVolume"],
    "GET_VOLUME": ["ControllerGetVolume"],
    "MODIFY_VOLUME": ["ControllerModifyVolume"],
    "PUBLISH_READONLY": ["ControllerPublishVolume"],
    "SINGLE_NODE_MULTI_WRITER": ["CreateVolume"],
}
NODE_CAP_RPCS = {
    "STAGE_UNSTAGE_VOLUME": ["NodeStageVolume", "NodeUnstageVolume"],
    "GET_VOLUME_STATS": ["NodeGetVolumeStats"],
    "EXPAND_VOLUME": ["NodeExpandVolume"],
    "VOLUME_CONDITION": ["NodeGetVolumeStats"],
    "VOLUME_MOUNT_GROUP": ["NodePublishVolume"],
}


def test_plugin_info_names_the_driver_and_its_version(start_plugin):
    p = start_plugin("all").plugin
    r = p.GetPluginInfo(p.pb2.GetPluginInfoRequest(), timeout=5)
    assert r.name == "csi.tierfs.dev"
    assert r.vendor_version  # REQUIRED by the spec
    assert r.vendor_version[0].isdigit()


def test_probe_reports_ready(start_plugin):
    p = start_plugin("node").plugin
    r = p.Probe(p.pb2.ProbeRequest(), timeout=5)
    assert r.HasField("ready") and r.ready.value is True


def test_probe_fails_naming_an_s3_endpoint_that_does_not_answer(
        start_plugin):
    import socket
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    p = start_plugin("controller", "--s3-endpoint", url, node_id=None).plugin
    code, detail = status_of(p.Probe, p.pb2.ProbeRequest(), timeout=10)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert url in detail and "unreachable" in detail


def test_probe_is_ready_when_the_s3_endpoint_answers(start_plugin):
    import http.server
    import threading
    srv = http.server.HTTPServer(("127.0.0.1", 0),
                                 http.server.BaseHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:  # any HTTP answer will do (here a 501): S3 is there
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        p = start_plugin("node", "--s3-endpoint", url).plugin
        r = p.Probe(p.pb2.ProbeRequest(), timeout=10)
        assert r.ready.value is True
    finally:
        srv.shutdown()


@pytest.mark.parametrize("mode", ["all", "controller", "node"])
def test_plugin_capabilities_are_the_same_in_every_mode(start_plugin, mode):
    """The spec: every instance of a plugin reports the capabilities of
    the plugin as deployed, whatever part of it this process serves."""
    p = start_plugin(mode).plugin
    pb = p.pb2
    caps = p.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest(),
                                   timeout=5).capabilities
    services = {c.service.type for c in caps if c.HasField("service")}
    expansion = {c.volume_expansion.type for c in caps
                 if c.HasField("volume_expansion")}
    svc = pb.PluginCapability.Service
    assert services == {svc.CONTROLLER_SERVICE}
    assert expansion == {pb.PluginCapability.VolumeExpansion.ONLINE}


def test_controller_mode_answers_node_calls_unimplemented(start_plugin):
    p = start_plugin("controller", node_id=None).plugin
    pb = p.pb2
    code, _ = status_of(p.ControllerGetCapabilities,
                        pb.ControllerGetCapabilitiesRequest(), timeout=5)
    assert code == OK
    for method in ("NodeGetInfo", "NodeGetCapabilities", "NodeStageVolume"):
        req = getattr(pb, method + "Request")()
        code, details = status_of(getattr(p, method), req, timeout=5)
        assert code == UNIMPLEMENTED, method
        assert "--mode" in details


def test_node_mode_answers_controller_calls_unimplemented(start_plugin):
    p = start_plugin("node").plugin
    pb = p.pb2
    info = p.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=5)
    assert info.node_id == NODE_ID
    for method in ("ControllerGetCapabilities", "CreateVolume"):
        req = getattr(pb, method + "Request")()
        code, _ = status_of(getattr(p, method), req, timeout=5)
        assert code == UNIMPLEMENTED, method


def test_an_rpc_not_yet_written_answers_unimplemented(start_plugin):
    p = start_plugin("all").plugin
    pb = p.pb2
    # tierfs does not offer MODIFY_VOLUME (alpha in CSI v1.9)
    req = pb.ControllerModifyVolumeRequest(volume_id="bkt/p")
    code, details = status_of(p.ControllerModifyVolume, req, timeout=5)
    assert code == UNIMPLEMENTED
    assert "ControllerModifyVolume" in details


def test_every_csi_rpc_gets_an_answer(start_plugin):
    """All 25 RPCs are registered: each answers (none hangs) with OK or a
    CSI error code, never the transport's own failure."""
    p = start_plugin("all").plugin
    pb = p.pb2
    for _, method in RPCS:
        req = getattr(pb, method + "Request")()
        code, _ = status_of(getattr(p, method), req, timeout=5)
        assert code not in (grpc.StatusCode.DEADLINE_EXCEEDED,
                            grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.UNKNOWN), method


def test_advertised_capabilities_are_all_implemented(start_plugin):
    """A capability is listed only when the RPCs behind it answer; listing
    one whose RPC says UNIMPLEMENTED would break kubelet and csi-sanity."""
    p = start_plugin("all").plugin
    pb = p.pb2
    ccaps = p.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest(),
                                        timeout=5).capabilities
    ncaps = p.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest(),
                                  timeout=5).capabilities
    pairs = []
    for c in ccaps:
        name = pb.ControllerServiceCapability.RPC.Type.Name(c.rpc.type)
        pairs += [(name, m) for m in CONTROLLER_CAP_RPCS[name]]
    for c in ncaps:
        name = pb.NodeServiceCapability.RPC.Type.Name(c.rpc.type)
        pairs += [(name, m) for m in NODE_CAP_RPCS[name]]
    for cap, method in pairs:
        req = getattr(pb, method + "Request")()
        code, _ = status_of(getattr(p, method), req, timeout=10)
        assert code != UNIMPLEMENTED, f"{cap} advertised, {method} missing"
