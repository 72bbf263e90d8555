"""test_driver_agreement.py: what the chart tells Kubernetes about tierfs is
what the built tierfs-csi reports and does.

The driver is asked over its socket (GetPluginInfo, GetPluginCapabilities,
ControllerGetCapabilities, NodeGetCapabilities, NodeGetInfo), and fed the
chart's own StorageClass and VolumeSnapshotClass parameters, Secret keys
and container arguments, for the default values and for values-all.yaml.
Nothing here reaches S3: each call is built so that tierfs-csi answers
before it would (the missing or bad field it names proves how far the
request got).
"""

import re
import socket
from pathlib import Path

import grpc
import pytest
import yaml

from conftest import DRIVER_NAME, ROOT, container, flag, no_s3_env
from csi_client import status_of

SECRETS_MISSING = "secrets: 'accessKeyID' is required"
# what external-provisioner adds with --extra-create-metadata
PVC_METADATA = {"csi.storage.k8s.io/pvc/name": "claim-alice",
                "csi.storage.k8s.io/pvc/namespace": "jhub",
                "csi.storage.k8s.io/pv/name":
                    "pvc-5f0c3f4e-7b1a-4c47-9b7e-0c1e0d7f4a11"}
SECRET_PARAM = re.compile(r"^csi\.storage\.k8s\.io/.*secret-(name|namespace)$")


def mount_cap(pb, mode="SINGLE_NODE_WRITER", group=""):
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(volume_mount_group=group),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.Mode.Value(mode)))


def sidecars(chart):
    return {c["name"] for c in chart.pod("Deployment")["containers"]}


# --- identity ----------------------------------------------------------------

def test_driver_name_is_the_one_every_object_uses(driver, chart):
    name = driver.info.name
    assert name == DRIVER_NAME
    assert chart.one("CSIDriver")["metadata"]["name"] == name
    for sc in chart.of("StorageClass"):
        assert sc["provisioner"] == name
    for vsc in chart.of("VolumeSnapshotClass"):
        assert vsc["driver"] == name
    reg = container(chart.pod("DaemonSet"), "node-driver-registrar")
    assert flag(reg["args"], "--kubelet-registration-path").split("/")[-2] \
        == name


def test_chart_app_version_is_the_driver_version(driver):
    meta = yaml.safe_load((ROOT / "charts/tierfs/Chart.yaml").read_text())
    assert meta["appVersion"] == driver.info.vendor_version


# --- capabilities and the CSIDriver / sidecars -------------------------------

def test_controller_deployment_iff_controller_service(driver, chart):
    assert "CONTROLLER_SERVICE" in driver.plugin_services()
    assert len(chart.of("Deployment")) == 1


def test_provisioner_iff_create_delete_volume(driver, chart):
    assert ("CREATE_DELETE_VOLUME" in driver.controller_caps) == \
        ("csi-provisioner" in sidecars(chart))


def test_attach_required_and_attacher_iff_publish_unpublish(driver, chart):
    publish = "PUBLISH_UNPUBLISH_VOLUME" in driver.controller_caps
    assert publish, "tierfs fences writers through ControllerPublish"
    assert chart.one("CSIDriver")["spec"]["attachRequired"] is publish
    assert ("csi-attacher" in sidecars(chart)) is publish


def test_resizer_iff_expand_volume(driver, chart):
    expand = "EXPAND_VOLUME" in driver.controller_caps
    assert ("csi-resizer" in sidecars(chart)) is expand
    if any(sc["allowVolumeExpansion"] for sc in chart.of("StorageClass")):
        assert expand and driver.plugin_expansion() & {"ONLINE", "OFFLINE"}
        # node_expansion_required: kubelet calls NodeExpandVolume
        assert "EXPAND_VOLUME" in driver.node_caps


def test_snapshotter_and_snapshot_class_iff_create_delete_snapshot(driver,
                                                                  chart):
    snap = "CREATE_DELETE_SNAPSHOT" in driver.controller_caps
    assert ("csi-snapshotter" in sidecars(chart)) is snap
    if chart.of("VolumeSnapshotClass"):
        assert snap


def test_fs_group_policy_file_iff_volume_mount_group(driver, chart):
    spec = chart.one("CSIDriver")["spec"]
    assert "VOLUME_MOUNT_GROUP" in driver.node_caps
    assert spec["fsGroupPolicy"] == "File"


def test_node_stage_applies_volume_mount_group(driver):
    # kubelet puts the pod's fsGroup here; the node reads and checks it
    pb = driver.pb2
    code, msg = status_of(driver.plugin.NodeStageVolume,
                          pb.NodeStageVolumeRequest(
                              volume_id="tierfs/jhub/claim-alice",
                              staging_target_path="/tmp/tierfs-deploy-test/st",
                              volume_capability=mount_cap(pb, group="users"),
                              secrets={"accessKeyID": "a",
                                       "secretAccessKey": "b"}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "volume_mount_group" in msg


def test_lifecycle_persistent_only_since_publish_needs_staging(driver, chart):
    spec = chart.one("CSIDriver")["spec"]
    assert spec["volumeLifecycleModes"] == ["Persistent"]
    assert "STAGE_UNSTAGE_VOLUME" in driver.node_caps
    pb = driver.pb2
    # an inline ephemeral volume is published with no staging path: the
    # spec's FAILED_PRECONDITION for STAGE_UNSTAGE_VOLUME without one
    code, msg = status_of(driver.plugin.NodePublishVolume,
                          pb.NodePublishVolumeRequest(
                              volume_id="tierfs/ns/inline",
                              target_path="/tmp/tierfs-deploy-test/t",
                              volume_capability=mount_cap(pb)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "staging_target_path" in msg


def test_pod_info_on_mount_off_since_the_node_reads_none(chart):
    assert chart.one("CSIDriver")["spec"]["podInfoOnMount"] is False
    for src in (ROOT / "csi").glob("*.c"):
        assert "csi.storage.k8s.io/pod" not in src.read_text(), src


def test_no_topology_no_capacity_tracking(driver, chart):
    assert not driver.node_info.HasField("accessible_topology")
    assert driver.node_info.max_volumes_per_node == 0
    prov = container(chart.pod("Deployment"), "csi-provisioner")["args"]
    assert not any("Topology" in a or "strict-topology" in a for a in prov)
    for sc in chart.of("StorageClass"):
        assert "allowedTopologies" not in sc
    spec = chart.one("CSIDriver")["spec"]
    assert spec["storageCapacity"] is ("--enable-capacity" in prov)


# --- sockets -------------------------------------------------------------------

def endpoint_path(args):
    ep = flag(args, "--endpoint")
    assert ep and ep.startswith("unix:///"), ep
    return ep[len("unix://"):]


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_every_sidecar_dials_the_driver_socket(chart, kind):
    pod = chart.pod(kind)
    drv = container(pod, "tierfs-csi")
    sock = endpoint_path(drv["args"])
    vol = {m["mountPath"]: m["name"] for m in drv["volumeMounts"]}
    sock_vol = vol[str(Path(sock).parent)]
    for c in pod["containers"][1:]:
        assert flag(c["args"], "--csi-address") == sock, c["name"]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts.get(sock_vol) == str(Path(sock).parent), \
            f"{c['name']} must mount the socket's volume at the same path"


def test_registrar_tells_kubelet_the_host_path_of_the_socket(chart):
    pod = chart.pod("DaemonSet")
    drv = container(pod, "tierfs-csi")
    reg = container(pod, "node-driver-registrar")
    vols = {v["name"]: v for v in pod["volumes"]}
    kubelet = vols["kubelet-dir"]["hostPath"]["path"]
    sock = endpoint_path(drv["args"])
    sock_vol = [m["name"] for m in drv["volumeMounts"]
                if m["mountPath"] == str(Path(sock).parent)][0]
    host_dir = vols[sock_vol]["hostPath"]["path"]
    assert host_dir == f"{kubelet}/plugins/{DRIVER_NAME}"
    assert flag(reg["args"], "--kubelet-registration-path") == \
        f"{host_dir}/{Path(sock).name}"
    regdir = [m for m in reg["volumeMounts"] if m["mountPath"] ==
              "/registration"][0]
    assert vols[regdir["name"]]["hostPath"]["path"] == \
        f"{kubelet}/plugins_registry"


def test_livenessprobe_waits_longer_than_the_driver_probe(chart):
    h = (ROOT / "csi" / "s3conn.h").read_text()
    probe_ms = int(re.search(r"#define CSI_PROBE_TIMEOUT_MS (\d+)", h)[1])
    for kind in ("Deployment", "DaemonSet"):
        pod = chart.pod(kind)
        lp = container(pod, "liveness-probe")
        t = flag(lp["args"], "--probe-timeout")
        assert t.endswith("s") and int(t[:-1]) * 1000 > probe_ms
        kp = container(pod, "tierfs-csi")["livenessProbe"]
        assert kp["timeoutSeconds"] > int(t[:-1])
        port = [p for p in container(pod, "tierfs-csi")["ports"]
                if p["name"] == kp["httpGet"]["port"]][0]["containerPort"]
        assert flag(lp["args"], "--http-endpoint") == f":{port}"


# --- the driver accepts what the chart gives it ------------------------------

def env_of(c, node_name="node-7"):
    env = no_s3_env()
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName":
            env[e["name"]] = node_name
    return env


def expand(args, env):
    out = []
    for a in args:
        if a.startswith("--endpoint="):
            continue
        out.append(re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], a))
    return out


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_tierfs_csi_starts_with_the_rendered_arguments(chart, kind,
                                                       start_csi):
    c = container(chart.pod(kind), "tierfs-csi")
    env = env_of(c)
    help_text = __import__("subprocess").run(
        [str(ROOT / "build" / "tierfs-csi"), "--help"], capture_output=True,
        text=True).stdout
    for a in c["args"]:
        assert a.split("=")[0] in help_text, f"{a}: not a tierfs-csi flag"
    csi = start_csi(expand(c["args"], env), env=env)
    pb = csi.plugin.pb2
    info = csi.plugin.GetPluginInfo(pb.GetPluginInfoRequest())
    assert info.name == DRIVER_NAME
    if kind == "DaemonSet":
        got = csi.plugin.NodeGetInfo(pb.NodeGetInfoRequest())
        assert got.node_id == "node-7", "--node-id is the Kubernetes node name"


def test_node_probe_does_not_depend_on_s3(chart_all, start_csi):
    # liveness failures restart the node plugin and with it every mount:
    # its Probe must answer ready whatever S3 does
    c = container(chart_all.pod("DaemonSet"), "tierfs-csi")
    assert flag(c["args"], "--s3-endpoint") is None
    assert not any(e["name"].startswith("AWS_ENDPOINT_URL")
                   for e in c.get("env", []))
    env = env_of(c)
    csi = start_csi(expand(c["args"], env), env=env)
    pb = csi.plugin.pb2
    r = csi.plugin.Probe(pb.ProbeRequest(), timeout=10)
    assert r.ready.value is True


def test_storage_class_parameters_are_accepted_by_create_volume(driver,
                                                               chart):
    pb = driver.pb2
    for sc in chart.of("StorageClass"):
        params = {k: v for k, v in sc["parameters"].items()
                  if not SECRET_PARAM.match(k)}
        params.update(PVC_METADATA)
        req = pb.CreateVolumeRequest(
            name=PVC_METADATA["csi.storage.k8s.io/pv/name"],
            volume_capabilities=[mount_cap(pb)], parameters=params,
            capacity_range=pb.CapacityRange(required_bytes=10 << 30))
        code, msg = status_of(driver.plugin.CreateVolume, req)
        # everything up to the credentials passed: parameters, bucket,
        # prefix template, the volume id it renders
        assert (code, msg.split(" (")[0]) == \
            (grpc.StatusCode.INVALID_ARGUMENT, SECRETS_MISSING), \
            f"StorageClass {sc['metadata']['name']}: {msg}"


def test_a_bad_parameter_would_be_refused(driver):
    # the check above can fail: the same call with an unknown key is
    # refused for it
    pb = driver.pb2
    code, msg = status_of(driver.plugin.CreateVolume, pb.CreateVolumeRequest(
        name="pv-x", volume_capabilities=[mount_cap(pb)],
        parameters={"bucket": "tierfs", "cachesize": "1Gi"}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "cachesize" in msg


def test_snapshot_class_parameters_are_accepted_by_create_snapshot(driver,
                                                                  chart):
    pb = driver.pb2
    for vsc in chart.of("VolumeSnapshotClass"):
        params = {k: v for k, v in vsc.get("parameters", {}).items()
                  if not SECRET_PARAM.match(k)}
        code, msg = status_of(driver.plugin.CreateSnapshot,
                              pb.CreateSnapshotRequest(
                                  source_volume_id="tierfs/jhub/claim-alice",
                                  name="snapshot-0b6a", parameters=params))
        assert (code, msg.split(" (")[0]) == \
            (grpc.StatusCode.INVALID_ARGUMENT, SECRETS_MISSING), msg


def secret_keys_reach_node_stage(driver, secrets):
    pb = driver.pb2
    return status_of(driver.plugin.NodeStageVolume, pb.NodeStageVolumeRequest(
        volume_id="tierfs/jhub/claim-alice",
        staging_target_path="/tmp/tierfs-deploy-test/st",
        volume_capability=mount_cap(pb, group="not-a-gid"), secrets=secrets))


def test_chart_secret_keys_are_the_drivers(driver, chart_all):
    s = chart_all.one("Secret")["stringData"]
    secrets = {k: v for k, v in s.items() if "\n" not in v}
    code, msg = secret_keys_reach_node_stage(driver, secrets)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "volume_mount_group" in msg, \
        f"the Secret's keys did not satisfy NodeStageVolume: {msg}"
    # and without them it is the secrets that are refused
    code, msg = secret_keys_reach_node_stage(driver, {"accessKeyId": "x",
                                                      "secretKey": "y"})
    assert "secrets:" in msg


def test_notes_secret_command_uses_the_drivers_keys(driver):
    from conftest import run_render
    notes = run_render(extra=("--notes",)).stdout
    keys = re.findall(r"--from-literal=(\w+)=YOUR_\w+", notes)
    assert sorted(keys) == ["accessKeyID", "secretAccessKey"]
    code, msg = secret_keys_reach_node_stage(driver,
                                             {k: "value" for k in keys})
    assert "volume_mount_group" in msg, msg


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_controller_reads_the_charts_credentials_file(chart_all, start_csi,
                                                      tmp_path):
    # the Secret's file key, written as the Secret volume writes it (0400),
    # is a credentials file tierfs-csi parses; S3 itself is a closed port
    s = chart_all.one("Secret")["stringData"]
    c = container(chart_all.pod("Deployment"), "tierfs-csi")
    path = flag(c["args"], "--credentials-file")
    f = tmp_path / Path(path).name
    f.write_text(s[Path(path).name])
    f.chmod(0o400)
    args = [a for a in expand(c["args"], env_of(c))
            if not a.startswith(("--credentials-file=", "--s3-endpoint="))]
    args += [f"--credentials-file={f}",
             f"--s3-endpoint=http://127.0.0.1:{closed_port()}"]
    csi = start_csi(args, env=no_s3_env())
    pb = csi.plugin.pb2
    code, msg = status_of(csi.plugin.ListVolumes, pb.ListVolumesRequest(),
                          timeout=60)
    assert code != grpc.StatusCode.OK, "S3 is a closed port"
    assert "credentials" not in msg, msg
    # the same file, readable by others, is refused: the check is real
    f.chmod(0o644)
    code, msg = status_of(csi.plugin.ListVolumes, pb.ListVolumesRequest(),
                          timeout=60)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "--credentials-file" in msg
