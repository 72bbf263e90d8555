"""The gRPC plumbing: concurrency, bad payloads, logging, secrets, shutdown."""

import re
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from csi_client import status_of

OK = grpc.StatusCode.OK
SECRET_VALUE = "Sekr1t-aws-KEY-do-not-log"
SECRET_KEY = "secretAccessKey"
FLAG_SECRET = "password=hunter2-flag"


def test_50_concurrent_calls_all_succeed(start_plugin):
    run = start_plugin("all")
    p = run.plugin
    pb = p.pb2

    def one(i):
        if i % 2:
            return p.Probe(pb.ProbeRequest(), timeout=20).ready.value
        return p.GetPluginInfo(pb.GetPluginInfoRequest(),
                               timeout=20).name == "csi.tierfs.dev"

    with ThreadPoolExecutor(max_workers=50) as ex:
        results = list(ex.map(one, range(50)))
    assert results == [True] * 50
    calls = re.findall(r"/csi\.v1\.Identity/(Probe|GetPluginInfo) .* OK$",
                       run.log(), re.M)
    assert len(calls) == 50


def test_garbage_payload_is_invalid_argument(start_plugin):
    p = start_plugin("all").plugin
    # a field header announcing a length-delimited field 2 GB long
    garbage = b"\x0a\xff\xff\xff\xff\x07"
    for method, typename in (("Probe", "csi.v1.ProbeRequest"),
                             ("NodeGetInfo", "csi.v1.NodeGetInfoRequest")):
        code, details = status_of(p.raw, method, garbage)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, method
        assert typename in details
    # and the plugin still serves
    assert p.Probe(p.pb2.ProbeRequest(), timeout=5).ready.value


def test_unknown_method_is_unimplemented(start_plugin):
    p = start_plugin("all").plugin
    code, details = status_of(p.raw, "/csi.v1.GroupController/"
                              "GroupControllerGetCapabilities", b"")
    assert code == grpc.StatusCode.UNIMPLEMENTED
    assert "GroupController" in details


def test_a_nul_byte_in_any_string_is_invalid_argument_naming_it(
        start_plugin):
    """protobuf-c would cut "a\\0b" to "a"; the server refuses it first,
    in top-level strings and inside maps and sub-messages alike."""
    p = start_plugin("all").plugin
    pb = p.pb2
    code, detail = status_of(p.CreateVolume, pb.CreateVolumeRequest(
        name="claim\x00x"), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail.startswith("name:")
    code, detail = status_of(p.NodeUnstageVolume, pb.NodeUnstageVolumeRequest(
        volume_id="b-ucket/p", staging_target_path="/tmp/x\x00/y"),
        timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail.startswith("staging_target_path:")
    secret = "s3cr3t\x00nul-value"
    code, detail = status_of(p.CreateVolume, pb.CreateVolumeRequest(
        name="claim", secrets={"secretAccessKey": secret}), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "nul-value" not in detail and "s3cr3t" not in detail
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(
        volume_mount_group="10\x000"))
    code, detail = status_of(p.ValidateVolumeCapabilities,
                             pb.ValidateVolumeCapabilitiesRequest(
                                 volume_id="b-ucket/p",
                                 volume_capabilities=[cap]), timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail.startswith("volume_mount_group:")


def test_log_line_has_method_volume_duration_and_status(start_plugin):
    run = start_plugin("all")
    p = run.plugin
    pb = p.pb2
    status_of(p.NodeUnstageVolume,
              pb.NodeUnstageVolumeRequest(volume_id="bkt/users/alice",
                                          staging_target_path="/stage"),
              timeout=5)
    p.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=5)
    log = run.log()
    assert re.search(r'^tierfs-csi: /csi\.v1\.Node/NodeUnstageVolume '
                     r'volume="bkt/users/alice" \d+\.\dms OK',
                     log, re.M), log
    assert re.search(r"^tierfs-csi: /csi\.v1\.Node/NodeGetInfo volume=- "
                     r"\d+\.\dms OK$", log, re.M), log


def test_log_escapes_control_bytes_in_a_volume_id(start_plugin):
    run = start_plugin("all")
    p = run.plugin
    forged = "v1\ntierfs-csi: /csi.v1.Identity/Probe volume=- 0.0ms OK"
    status_of(p.DeleteVolume, p.pb2.DeleteVolumeRequest(volume_id=forged),
              timeout=5)
    log = run.log()
    assert 'volume="v1\\x0atierfs-csi:' in log
    assert "Probe" not in log.split("DeleteVolume", 1)[0]
    assert not re.search(r"^tierfs-csi: /csi\.v1\.Identity/Probe", log, re.M)


def test_secrets_never_reach_the_log_or_the_reply(start_plugin):
    run = start_plugin("all")
    p = run.plugin
    pb = p.pb2
    secrets = {SECRET_KEY: SECRET_VALUE, "accessKeyID": "AKIA-also-secret"}
    cap = pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(mount_flags=[FLAG_SECRET]),
        access_mode=pb.VolumeCapability.AccessMode(mode=1))
    replies = [
        status_of(p.CreateVolume, pb.CreateVolumeRequest(
            name="pvc-1", secrets=secrets, volume_capabilities=[cap]),
            timeout=5),
        status_of(p.NodeStageVolume, pb.NodeStageVolumeRequest(
            volume_id="b/p", staging_target_path="/s", secrets=secrets,
            volume_capability=cap), timeout=5),
        status_of(p.ControllerPublishVolume, pb.ControllerPublishVolumeRequest(
            volume_id="b/p", node_id="n", secrets=secrets), timeout=5),
        status_of(p.DeleteVolume, pb.DeleteVolumeRequest(
            volume_id="b/p", secrets=secrets), timeout=5),
        # an implemented call carrying the secrets as unknown fields
        status_of(p.raw, "Probe", pb.CreateVolumeRequest(
            name="x", secrets=secrets).SerializeToString()),
        # and a request that fails to parse, with the secret inside
        status_of(p.raw, "GetPluginInfo", pb.CreateVolumeRequest(
            secrets=secrets).SerializeToString() + b"\x0a\xff"),
    ]
    assert replies[4][0] == OK
    assert replies[5][0] == grpc.StatusCode.INVALID_ARGUMENT
    rc = run.stop()
    assert rc == 0
    log = run.log()
    assert log.count("tierfs-csi: /csi.v1.") == 6, log
    for needle in (SECRET_VALUE, "AKIA-also-secret", SECRET_KEY,
                   "hunter2", "accessKeyID"):
        assert needle not in log
        for _, details in replies:
            assert needle not in str(details)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_shuts_down_cleanly(start_plugin, sig):
    run = start_plugin("all")
    run.plugin.Probe(run.plugin.pb2.ProbeRequest(), timeout=5)
    rc = run.stop(sig)
    assert rc == 0, run.log()
    assert not run.sock.exists()
    assert "tierfs-csi: stopped" in run.log()


def test_a_stale_socket_is_replaced(start_plugin, tmp_path):
    # the socket an earlier, killed plugin would leave: bound, never unlinked
    path = tmp_path / "sock0" / "csi.sock"
    path.parent.mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    assert path.exists()
    run = start_plugin("all")
    assert run.sock == path
    assert run.plugin.Probe(run.plugin.pb2.ProbeRequest(),
                            timeout=5).ready.value


def test_a_live_plugins_socket_is_not_taken_over(start_plugin, tmp_path):
    from conftest import spawn
    first = start_plugin("all")
    proc, log_path = spawn(tmp_path, "--mode", "all", "--node-id", "n",
                           "--endpoint", f"unix://{first.sock}", name="second")
    rc = proc.wait(timeout=20)
    assert rc != 0
    assert "another process serves it" in log_path.read_text()
    # the first plugin keeps its socket and keeps serving
    assert first.sock.exists()
    assert first.plugin.Probe(first.plugin.pb2.ProbeRequest(),
                              timeout=5).ready.value
