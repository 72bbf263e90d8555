"""test_jupyterhub.py: the JupyterHub recipe (deploy/jupyterhub/) agrees
with the tierfs chart rendered with its tierfs-values.yaml, and with
tierfs-csi: z2jh's storage settings name a rendered StorageClass whose
owner is the notebook user; the read-only shared-data volume is the very
volume its writer PVC gets, in a form the driver accepts for a ROX publish;
the snapshot and restore files use the rendered VolumeSnapshotClass.
"""

import re

import grpc
import pytest
import yaml

from conftest import DRIVER_NAME, ROOT
from csi_client import status_of

JH = ROOT / "deploy" / "jupyterhub"


def load(name):
    return [d for d in yaml.safe_load_all((JH / name).read_text()) if d]


@pytest.fixture(scope="module")
def chart_jh(render):
    return render(JH / "tierfs-values.yaml")


@pytest.fixture(scope="module")
def z2jh():
    (v,) = load("z2jh-values.yaml")
    return v


def quantity_bytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", q)
    assert m, q
    return int(m[1]) << {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40,
                         None: 0}[m[2]]


def test_z2jh_home_is_a_dynamic_tierfs_volume(z2jh, chart_jh):
    su = z2jh["singleuser"]
    st = su["storage"]
    assert st["type"] == "dynamic"
    assert st["homeMountPath"] == "/home/jovyan"
    assert quantity_bytes(st["capacity"]) == 10 << 30
    assert st["dynamic"]["storageAccessModes"] == ["ReadWriteOnce"]
    assert st["dynamic"]["pvcNameTemplate"].startswith("claim-{username}")
    sc = chart_jh.one("StorageClass", st["dynamic"]["storageClass"])
    assert sc["provisioner"] == DRIVER_NAME
    # the volume's owner is the notebook user, and its group the fsGroup
    assert su["uid"] == 1000 and su["fsGid"] == 100
    assert sc["parameters"]["uid"] == str(su["uid"])
    assert sc["parameters"]["gid"] == str(su["fsGid"])
    assert sc["allowVolumeExpansion"] is True
    assert z2jh["hub"]["config"]["KubeSpawner"]["delete_pvc"] is True
    assert sc["parameters"]["onDelete"] == "delete"
    assert sc["reclaimPolicy"] == "Delete"


def test_shared_data_is_mounted_read_only_from_its_rox_claim(z2jh):
    st = z2jh["singleuser"]["storage"]
    (vol,) = st["extraVolumes"]
    (mnt,) = st["extraVolumeMounts"]
    assert vol["name"] == mnt["name"]
    assert mnt["readOnly"] is True and vol["persistentVolumeClaim"][
        "readOnly"] is True
    assert not mnt["mountPath"].startswith(st["homeMountPath"])
    claims = {d["metadata"]["name"]: d for d in load("shared-data.yaml")
              if d["kind"] == "PersistentVolumeClaim"}
    ro = claims[vol["persistentVolumeClaim"]["claimName"]]
    assert ro["spec"]["accessModes"] == ["ReadOnlyMany"]


def render_prefix(template, pvc_ns, pvc_name):
    return template.replace("{pvc_namespace}", pvc_ns).replace(
        "{pvc_name}", pvc_name)


def test_rox_volume_is_the_writers_volume(chart_jh):
    docs = load("shared-data.yaml")
    pvcs = {d["metadata"]["name"]: d for d in docs
            if d["kind"] == "PersistentVolumeClaim"}
    (pv,) = [d for d in docs if d["kind"] == "PersistentVolume"]
    writer = pvcs["shared-data"]
    ro = pvcs["shared-data-ro"]
    sc = chart_jh.one("StorageClass", writer["spec"]["storageClassName"])
    assert sc["reclaimPolicy"] == "Retain"
    assert sc["parameters"]["onDelete"] == "retain"
    ns = pv["spec"]["claimRef"]["namespace"]
    handle = sc["parameters"]["bucket"] + "/" + render_prefix(
        sc["parameters"]["prefix"], ns, "shared-data")
    csi = pv["spec"]["csi"]
    assert csi["driver"] == DRIVER_NAME
    assert csi["volumeHandle"] == handle
    assert csi["readOnly"] is True
    assert pv["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # the claim binds this PV and no other
    assert ro["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"]["name"] == ro["metadata"]["name"]
    assert ro["spec"]["storageClassName"] == "" == \
        pv["spec"]["storageClassName"]
    assert quantity_bytes(ro["spec"]["resources"]["requests"]["storage"]) \
        <= quantity_bytes(pv["spec"]["capacity"]["storage"])
    # the secrets are the chart's, where the chart's classes say
    secret = sc["parameters"]["csi.storage.k8s.io/node-stage-secret-name"]
    secret_ns = sc["parameters"][
        "csi.storage.k8s.io/node-stage-secret-namespace"]
    for ref in ("controllerPublishSecretRef", "nodeStageSecretRef"):
        assert csi[ref] == {"name": secret, "namespace": secret_ns}
    for k in ("endpoint", "region"):
        assert csi.get("volumeAttributes", {}).get(k) == \
            sc["parameters"].get(k)


def test_driver_takes_the_rox_handle_for_a_read_only_publish(driver):
    (pv,) = [d for d in load("shared-data.yaml")
             if d["kind"] == "PersistentVolume"]
    pb = driver.pb2
    cap = pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))
    code, msg = status_of(driver.plugin.ControllerPublishVolume,
                          pb.ControllerPublishVolumeRequest(
                              volume_id=pv["spec"]["csi"]["volumeHandle"],
                              node_id=driver.node_info.node_id,
                              volume_capability=cap,
                              readonly=True,
                              volume_context=pv["spec"]["csi"].get(
                                  "volumeAttributes", {})))
    # id, node and capability passed; the credentials come next
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert msg.startswith("secrets: 'accessKeyID' is required"), msg
    assert "PUBLISH_READONLY" in driver.controller_caps


def test_snapshot_and_restore_use_the_charts_classes(chart_jh, z2jh):
    (snap,) = load("snapshot-user.yaml")
    (pvc,) = load("restore-user.yaml")
    vsc = chart_jh.one("VolumeSnapshotClass")
    assert snap["apiVersion"] == "snapshot.storage.k8s.io/v1"
    assert snap["spec"]["volumeSnapshotClassName"] == \
        vsc["metadata"]["name"]
    user_claim = snap["spec"]["source"]["persistentVolumeClaimName"]
    template = z2jh["singleuser"]["storage"]["dynamic"]["pvcNameTemplate"]
    assert user_claim == template.format(username="alice", servername="")
    assert pvc["metadata"]["name"] == user_claim, \
        "the restored claim is the one kubespawner looks for"
    ds = pvc["spec"]["dataSource"]
    assert ds == {"apiGroup": "snapshot.storage.k8s.io",
                  "kind": "VolumeSnapshot", "name": snap["metadata"]["name"]}
    st = z2jh["singleuser"]["storage"]
    assert pvc["spec"]["storageClassName"] == st["dynamic"]["storageClass"]
    assert pvc["spec"]["accessModes"] == st["dynamic"]["storageAccessModes"]
    assert quantity_bytes(pvc["spec"]["resources"]["requests"]["storage"]) \
        >= quantity_bytes(st["capacity"])


def test_walkthrough_names_the_files_and_objects_it_uses():
    text = (JH / "README.md").read_text()
    for f in re.findall(r"deploy/jupyterhub/([\w.-]+\.yaml)", text):
        assert (JH / f).exists(), f
    for heading in ("Install tierfs", "Install JupyterHub", "first user",
                    "Snapshot one user", "Restore that user",
                    "Delete a user's data"):
        assert heading in text
    assert "kubectl wait --for=delete pv/" in text, \
        "a restore must wait for the old volume's DeleteVolume"
