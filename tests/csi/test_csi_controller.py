"""The Controller service against the local S3: volumes, publish fencing, snapshots.

Needs AWS_ENDPOINT_URL & co. (`eval "$(hack/s3-local.sh env)"`); skipped
otherwise. Every test works in its own fresh bucket (ctl-<random>), removed
afterwards, and checks what landed in S3 with boto3.
"""

import os
import re
import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3util import skip_unless_s3  # noqa: E402

skip_unless_s3(fuse=False)


from csi_client import status_of  # noqa: E402

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
GiB = 1 << 30
SECRET = "Sekr1t-ctl-value-never-logged"


def secrets():
    return {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
            "secretAccessKey": os.environ["AWS_SECRET_ACCESS_KEY"]}


@pytest.fixture
def ctl(start_plugin, bucket):
    """A controller that lists `bucket`."""
    return start_plugin("controller", "--list-bucket", bucket, node_id=None)


def keys(s3, bucket, prefix=""):
    out = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                             Prefix=prefix):
        out.update(o["Key"] for o in page.get("Contents", []))
    return out


def body(s3, bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()


def kv(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def id_of(bucket, prefix):
    """A pattern for the id of the volume at bucket/prefix, whatever its
    generation."""
    return re.compile(re.escape(f"{bucket}/{prefix}") + r"#[0-9a-f]{8}")


def cap(pb, mode=1, block=False):
    c = pb.VolumeCapability(access_mode=pb.VolumeCapability.AccessMode(mode=mode))
    if block:
        c.block.SetInParent()
    else:
        c.mount.SetInParent()
    return c


def create_req(pb, bucket, name="pvc-1", params=None, size=10 * GiB, **kw):
    p = {"bucket": bucket}
    p.update(params or {})
    kw.setdefault("capacity_range", pb.CapacityRange(required_bytes=size))
    return pb.CreateVolumeRequest(
        name=name, parameters=p, secrets=kw.pop("secrets", secrets()),
        volume_capabilities=kw.pop("caps", [cap(pb)]), **kw)


def create(p, bucket, **kw):
    return p.CreateVolume(create_req(p.pb2, bucket, **kw), timeout=30).volume


# --- CreateVolume -----------------------------------------------------------

def test_create_writes_the_marker_and_answers_the_node_context(ctl, s3, bucket):
    p = ctl.plugin
    params = {"csi.storage.k8s.io/pvc/namespace": "jhub",
              "csi.storage.k8s.io/pvc/name": "claim-alice",
              "csi.storage.k8s.io/pv/name": "pvc-123",
              "durability": "local", "cacheSize": "20Gi", "uid": "1000",
              "gid": "100", "mode": "0770", "onDelete": "delete"}
    vol = create(p, bucket, params=params)
    assert id_of(bucket, "jhub/claim-alice").fullmatch(vol.volume_id)
    assert vol.capacity_bytes == 10 * GiB
    ctx = dict(vol.volume_context)
    assert ctx == {"durability": "local", "cacheSize": "20Gi", "uid": "1000",
                   "gid": "100", "mode": "0770", "capacity": str(10 * GiB)}
    m = kv(body(s3, bucket, "jhub/claim-alice/.tierfs/volume"))
    assert m["capacity"] == str(10 * GiB)
    assert m["name"] == "pvc-1" and m["onDelete"] == "delete"
    assert vol.volume_id.endswith("#" + m["generation"])
    assert m["cacheSize"] == "20Gi" and m["mode"] == "0770"
    assert abs(int(m["created"]) - time.time()) < 60


def test_prefix_template_and_default_capacity(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    req = create_req(pb, bucket, name="pvc-9",
                     params={"prefix": "homes/{pv_name}",
                             "csi.storage.k8s.io/pv/name": "pvc-9"})
    req.ClearField("capacity_range")
    vol = p.CreateVolume(req, timeout=30).volume
    assert id_of(bucket, "homes/pvc-9").fullmatch(vol.volume_id)
    assert vol.capacity_bytes == GiB
    # no pvc params, no template: the name is the prefix
    vol = create(p, bucket, name="pvc-plain")
    assert id_of(bucket, "pvc-plain").fullmatch(vol.volume_id)
    assert "pvc-plain/.tierfs/volume" in keys(s3, bucket)


def test_create_is_idempotent_and_conflicts_are_already_exists(ctl, bucket):
    p = ctl.plugin
    a = create(p, bucket, params={"cacheSize": "5Gi"})
    b = create(p, bucket, params={"cacheSize": "5Gi"})
    assert a == b
    for kw in ({"params": {"cacheSize": "6Gi"}},
               {"params": {"cacheSize": "5Gi"}, "size": 20 * GiB}):
        code, details = status_of(p.CreateVolume,
                                  create_req(p.pb2, bucket, **kw), timeout=30)
        assert code == grpc.StatusCode.ALREADY_EXISTS, kw
        assert a.volume_id in details
    # another name rendering to the same prefix
    code, _ = status_of(p.CreateVolume, create_req(
        p.pb2, bucket, name="pvc-2", params={"prefix": "pvc-1",
                                             "cacheSize": "5Gi"}), timeout=30)
    assert code == grpc.StatusCode.ALREADY_EXISTS


def test_long_names_are_shortened_the_same_way_every_time(ctl, s3, bucket):
    p = ctl.plugin
    params = {"csi.storage.k8s.io/pvc/namespace": "n" * 60,
              "csi.storage.k8s.io/pvc/name": "claim-" + "x" * 150}
    a = create(p, bucket, params=params)
    b = create(p, bucket, params=params)
    assert a.volume_id == b.volume_id
    assert len(a.volume_id) <= 128
    assert re.search(r"-[0-9a-f]{12}#[0-9a-f]{8}$", a.volume_id)
    prefix = a.volume_id.split("/", 1)[1].split("#")[0]
    assert f"{prefix}/.tierfs/volume" in keys(s3, bucket)


def bad_create_cases(pb, bucket):
    def req(**kw):
        return create_req(pb, bucket, **kw)
    r_noname = req(name="")
    r_nocaps = req(caps=[])
    r_noaccess = req()
    r_noaccess.volume_capabilities[0].ClearField("access_mode")
    return [
        ("name", r_noname, INVALID, "name"),
        ("caps", r_nocaps, INVALID, "volume_capabilities"),
        ("block", req(caps=[cap(pb, block=True)]), INVALID, "block"),
        ("mnsw", req(caps=[cap(pb, mode=4)]), INVALID,
         "MULTI_NODE_SINGLE_WRITER"),
        ("access_mode", r_noaccess, INVALID, "access_mode"),
        ("bucket", pb.CreateVolumeRequest(
            name="x", volume_capabilities=[cap(pb)], secrets=secrets()),
         INVALID, "parameters.bucket"),
        ("bucket-name", req(params={"bucket": "Bad_Bucket"}), INVALID,
         "parameters.bucket"),
        ("unknown", req(params={"colour": "red", "speed": "fast"}), INVALID,
         ("'colour'", "'speed'")),
        ("durability", req(params={"durability": "tape"}), INVALID,
         "parameters.durability"),
        ("cacheSize", req(params={"cacheSize": "lots"}), INVALID,
         "parameters.cacheSize"),
        ("uid", req(params={"uid": "-1"}), INVALID, "parameters.uid"),
        ("gid", req(params={"gid": "abc"}), INVALID, "parameters.gid"),
        ("mode", req(params={"mode": "0999"}), INVALID, "parameters.mode"),
        ("onDelete", req(params={"onDelete": "archive"}), INVALID,
         "parameters.onDelete"),
        ("endpoint", req(params={"endpoint": "ftp://x"}), INVALID,
         "parameters.endpoint"),
        ("region", req(params={"region": "US EAST"}), INVALID,
         "parameters.region"),
        ("placeholder", req(params={"prefix": "{user}"}), INVALID,
         "parameters.prefix"),
        ("placeholder-unset", req(params={"prefix": "{pvc_name}"}), INVALID,
         "csi.storage.k8s.io/pvc/name"),
        ("traversal", req(params={"prefix": "a/../b"}), INVALID,
         "parameters.prefix"),
        ("private", req(params={"prefix": "a/.tierfs"}), INVALID,
         "parameters.prefix"),
        ("long-name", req(name="n" * 129), INVALID, "name"),
        ("range", req(capacity_range=pb.CapacityRange(
            required_bytes=2 * GiB, limit_bytes=GiB)),
         grpc.StatusCode.OUT_OF_RANGE, "limit_bytes"),
        ("no-access-key", req(secrets={"secretAccessKey": SECRET}), INVALID,
         "accessKeyID"),
        ("no-secret-key", req(secrets={"accessKeyID": "AKIA"}), INVALID,
         "secretAccessKey"),
        ("clone", req(volume_content_source=pb.VolumeContentSource(
            volume=pb.VolumeContentSource.VolumeSource(volume_id="a/b"))),
         INVALID, "volume_content_source"),
        ("no-bucket", req(params={"bucket": "ctl-no-such-bucket-here"}),
         grpc.StatusCode.FAILED_PRECONDITION, "no such bucket"),
        ("no-snapshot", req(volume_content_source=pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(
                snapshot_id=f"{bucket}/.tierfs-snapshots/nope"))),
         grpc.StatusCode.NOT_FOUND, "snapshot"),
    ]


def test_bad_create_requests_get_the_spec_code_naming_the_field(ctl, s3,
                                                                 bucket):
    p = ctl.plugin
    cases = bad_create_cases(p.pb2, bucket)
    for label, req, want, needle in cases:
        code, details = status_of(p.CreateVolume, req, timeout=30)
        needles = needle if isinstance(needle, tuple) else (needle,)
        assert (code, all(n in str(details) for n in needles)) == \
            (want, True), (label, code, details)
    assert not any(k.endswith(".tierfs/volume") for k in keys(s3, bucket))


def test_unreachable_endpoint_is_unavailable(ctl, bucket):
    p = ctl.plugin
    code, details = status_of(p.CreateVolume, create_req(
        p.pb2, bucket, params={"endpoint": "http://127.0.0.1:9"}), timeout=60)
    assert code == grpc.StatusCode.UNAVAILABLE, details


def test_a_storage_class_endpoint_reaches_calls_without_context_via_secret(
        start_plugin, s3, bucket):
    """The plugin's default endpoint is wrong here; the StorageClass names
    the right one. CreateVolume has it in its parameters; DeleteVolume
    (no volume_context) finds it in the secret's `endpoint` key."""
    p = start_plugin("controller", "--s3-endpoint", "http://127.0.0.1:9",
                     node_id=None).plugin
    pb = p.pb2
    real = os.environ["AWS_ENDPOINT_URL"]
    vol = create(p, bucket, params={"endpoint": real})
    assert any(k.endswith(".tierfs/volume") for k in keys(s3, bucket))
    code, _ = status_of(p.DeleteVolume, pb.DeleteVolumeRequest(
        volume_id=vol.volume_id, secrets=secrets()), timeout=60)
    assert code == grpc.StatusCode.UNAVAILABLE  # the default: wrong
    p.DeleteVolume(pb.DeleteVolumeRequest(
        volume_id=vol.volume_id, secrets=dict(secrets(), endpoint=real)),
        timeout=60)
    assert not any(k.startswith(vol.volume_id.split("/", 1)[1].split("#")[0] + "/")
                   for k in keys(s3, bucket))


def test_wrong_secret_is_permission_denied_and_never_echoed(ctl, bucket):
    p = ctl.plugin
    bad = {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
           "secretAccessKey": SECRET}
    code, details = status_of(p.CreateVolume, create_req(
        p.pb2, bucket, secrets=bad), timeout=30)
    assert code == grpc.StatusCode.PERMISSION_DENIED, details
    assert SECRET not in details
    ctl.stop()
    assert SECRET not in ctl.log()


# --- DeleteVolume -------------------------------------------------------------

def test_delete_removes_every_object_and_is_idempotent(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    vol = create(p, bucket, name="pvc-del")
    for k in ("pvc-del/a.txt", "pvc-del/dir/b.txt", "pvc-del-other/keep"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    for _ in range(2):
        p.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id,
                                              secrets=secrets()), timeout=30)
        assert keys(s3, bucket) == {"pvc-del-other/keep"}


def test_a_late_delete_of_a_deleted_volume_spares_one_made_again(ctl, s3,
                                                                  bucket):
    """A PVC deleted and made again under the same name renders the same
    prefix. DeleteVolume retried for the old volume (its first call timed
    out at the provisioner, say) must not delete the new one's data."""
    p = ctl.plugin
    pb = p.pb2
    claim = {"csi.storage.k8s.io/pvc/namespace": "jhub",
             "csi.storage.k8s.io/pvc/name": "claim-bob"}
    old = create(p, bucket, name="pvc-old", params=claim)
    p.DeleteVolume(pb.DeleteVolumeRequest(volume_id=old.volume_id,
                                          secrets=secrets()), timeout=30)
    new = create(p, bucket, name="pvc-new", params=claim)
    assert new.volume_id != old.volume_id
    s3.put_object(Bucket=bucket, Key="jhub/claim-bob/thesis.tex", Body=b"x")
    p.DeleteVolume(pb.DeleteVolumeRequest(volume_id=old.volume_id,
                                          secrets=secrets()), timeout=30)
    assert keys(s3, bucket) == {"jhub/claim-bob/thesis.tex",
                                "jhub/claim-bob/.tierfs/volume"}
    # the old id names no volume now, in every call that reads one
    for call, req in (
            (p.ValidateVolumeCapabilities,
             pb.ValidateVolumeCapabilitiesRequest(
                 volume_id=old.volume_id, secrets=secrets(),
                 volume_capabilities=[cap(pb)])),
            (p.ControllerExpandVolume, pb.ControllerExpandVolumeRequest(
                volume_id=old.volume_id, secrets=secrets(),
                capacity_range=pb.CapacityRange(required_bytes=20 * GiB))),
            (p.ControllerPublishVolume, pb.ControllerPublishVolumeRequest(
                volume_id=old.volume_id, node_id="node-a", secrets=secrets(),
                volume_capability=cap(pb))),
            (p.CreateSnapshot, pb.CreateSnapshotRequest(
                source_volume_id=old.volume_id, name="snap-old",
                secrets=secrets()))):
        code, details = status_of(call, req, timeout=30)
        assert code == grpc.StatusCode.NOT_FOUND, (call, details)
    # a late unpublish of the old volume leaves the new one's grant
    p.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=new.volume_id, node_id="node-a", secrets=secrets(),
        volume_capability=cap(pb)), timeout=30)
    p.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(
        volume_id=old.volume_id, node_id="node-a", secrets=secrets()),
        timeout=30)
    assert "jhub/claim-bob/.tierfs/lease" in keys(s3, bucket)
    # and the listing names the new volume by its own id
    listed = [e.volume.volume_id for e in p.ListVolumes(
        pb.ListVolumesRequest(), timeout=30).entries]
    assert listed == [new.volume_id]


def test_delete_with_retain_keeps_the_data(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    vol = create(p, bucket, name="pvc-keep", params={"onDelete": "retain"})
    s3.put_object(Bucket=bucket, Key="pvc-keep/notebook.ipynb", Body=b"{}")
    p.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id,
                                          secrets=secrets()), timeout=30)
    assert keys(s3, bucket) == {"pvc-keep/notebook.ipynb",
                                "pvc-keep/.tierfs/volume.released"}
    code, _ = status_of(p.ValidateVolumeCapabilities,
                        pb.ValidateVolumeCapabilitiesRequest(
                            volume_id=vol.volume_id, secrets=secrets(),
                            volume_capabilities=[cap(pb)]), timeout=30)
    assert code == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("vid,want", [
    ("", INVALID), ("bkt/a/../b", INVALID), ("x" * 129, INVALID),
    ("bkt/.tierfs/x", INVALID), ("bkt/x#1234", INVALID),
    ("bkt/x#../../y", INVALID), ("fake-vol-id-123", OK),
    ("ctl-never-made/pvc", OK)])
def test_delete_ids(ctl, vid, want):
    p = ctl.plugin
    code, details = status_of(p.DeleteVolume, p.pb2.DeleteVolumeRequest(
        volume_id=vid, secrets=secrets()), timeout=30)
    assert code == want, details
    if want == INVALID:
        assert "volume_id" in details


# --- ValidateVolumeCapabilities, GetCapacity, capabilities ---------------------

def test_validate_confirms_only_what_tierfs_serves(ctl, bucket):
    p = ctl.plugin
    pb = p.pb2
    vol = create(p, bucket)

    def validate(*caps, vid=vol.volume_id):
        return status_of(p.ValidateVolumeCapabilities,
                         pb.ValidateVolumeCapabilitiesRequest(
                             volume_id=vid, volume_capabilities=list(caps),
                             secrets=secrets()), timeout=30)
    for mode in (1, 2, 3, 5, 6, 7):
        code, r = validate(cap(pb, mode))
        assert code == OK and r.HasField("confirmed"), mode
        assert r.confirmed.volume_capabilities[0].access_mode.mode == mode
    for c in (cap(pb, 4), cap(pb, block=True)):
        code, r = validate(c)
        assert code == OK and not r.HasField("confirmed") and r.message
    assert validate()[0] == INVALID
    assert validate(cap(pb), vid=f"{bucket}/nope")[0] == grpc.StatusCode.NOT_FOUND
    assert validate(cap(pb), vid="fake-vol-id")[0] == grpc.StatusCode.NOT_FOUND


def test_capabilities_and_capacity(start_plugin):
    p = start_plugin("controller", "--capacity-available", "10Ti",
                     node_id=None).plugin
    pb = p.pb2
    caps = {pb.ControllerServiceCapability.RPC.Type.Name(c.rpc.type)
            for c in p.ControllerGetCapabilities(
                pb.ControllerGetCapabilitiesRequest(), timeout=5).capabilities}
    assert {"CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME", "LIST_VOLUMES",
            "GET_CAPACITY", "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS",
            "EXPAND_VOLUME"} <= caps
    r = p.GetCapacity(pb.GetCapacityRequest(), timeout=5)
    assert r.available_capacity == 10 << 40
    r = p.GetCapacity(pb.GetCapacityRequest(
        volume_capabilities=[cap(pb, block=True)]), timeout=5)
    assert r.available_capacity == 0
    code, details = status_of(p.GetCapacity, pb.GetCapacityRequest(
        parameters={"bogus": "1"}), timeout=5)
    assert code == INVALID and "bogus" in details


# --- ListVolumes ---------------------------------------------------------------

def test_list_volumes_pages_through_every_volume(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    made = {create(p, bucket, name=f"pvc-{i}").volume_id for i in range(5)}
    # a snapshot's copy of a marker is not a volume
    s3.put_object(Bucket=bucket, Key=".tierfs-snapshots/s/.tierfs/volume",
                  Body=b"capacity=1\n")
    seen, token, pages = [], "", 0
    while True:
        r = p.ListVolumes(pb.ListVolumesRequest(max_entries=2,
                                                starting_token=token), timeout=30)
        pages += 1
        assert len(r.entries) <= 2
        seen += [e.volume.volume_id for e in r.entries]
        assert all(e.volume.capacity_bytes == 10 * GiB for e in r.entries)
        token = r.next_token
        if not token:
            break
    assert pages == 3 and sorted(seen) == sorted(made)
    r = p.ListVolumes(pb.ListVolumesRequest(), timeout=30)
    assert {e.volume.volume_id for e in r.entries} == made and not r.next_token
    for bad in ("zzz", "99"):
        code, _ = status_of(p.ListVolumes, pb.ListVolumesRequest(
            starting_token=bad), timeout=30)
        assert code == grpc.StatusCode.ABORTED, bad


def test_list_volumes_without_list_buckets_is_empty(start_plugin):
    p = start_plugin("controller", node_id=None).plugin
    r = p.ListVolumes(p.pb2.ListVolumesRequest(), timeout=10)
    assert len(r.entries) == 0 and not r.next_token


# --- ControllerExpandVolume ----------------------------------------------------

def test_expand_updates_the_marker_and_never_shrinks(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    vol = create(p, bucket, name="pvc-x")

    def expand(req=0, lim=0, vid=vol.volume_id):
        return status_of(p.ControllerExpandVolume,
                         pb.ControllerExpandVolumeRequest(
                             volume_id=vid, secrets=secrets(),
                             capacity_range=pb.CapacityRange(
                                 required_bytes=req, limit_bytes=lim)),
                         timeout=30)
    code, r = expand(20 * GiB)
    assert code == OK and r.capacity_bytes == 20 * GiB
    assert r.node_expansion_required
    assert kv(body(s3, bucket, "pvc-x/.tierfs/volume"))["capacity"] == \
        str(20 * GiB)
    code, r = expand(5 * GiB)
    assert code == OK and r.capacity_bytes == 20 * GiB
    assert expand(0, 0)[0] == INVALID
    assert expand(0, 5 * GiB)[0] == grpc.StatusCode.OUT_OF_RANGE
    assert expand(GiB, vid=f"{bucket}/gone")[0] == grpc.StatusCode.NOT_FOUND
    # the repeated CreateVolume still matches (capacity only grew), and
    # the volume_context stays what CreateVolume first answered (the
    # spec: a volume's context never changes)
    again = create(p, bucket, name="pvc-x")
    assert again.capacity_bytes == 20 * GiB
    assert again.volume_context == vol.volume_context
    (listed,) = [e.volume for e in p.ListVolumes(
        pb.ListVolumesRequest(), timeout=30).entries
        if e.volume.volume_id == vol.volume_id]
    assert listed.volume_context == vol.volume_context


# --- ControllerPublishVolume / Unpublish --------------------------------------

def test_publish_grants_the_lease_and_fences_another_node(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    vol = create(p, bucket, name="pvc-pub")
    lease = "pvc-pub/.tierfs/lease"

    def publish(node, mode=1, readonly=False, vid=vol.volume_id):
        return status_of(p.ControllerPublishVolume,
                         pb.ControllerPublishVolumeRequest(
                             volume_id=vid, node_id=node, readonly=readonly,
                             volume_capability=cap(pb, mode),
                             secrets=secrets()), timeout=30)

    def unpublish(node):
        return status_of(p.ControllerUnpublishVolume,
                         pb.ControllerUnpublishVolumeRequest(
                             volume_id=vol.volume_id, node_id=node,
                             secrets=secrets()), timeout=30)
    t0 = int(time.time())
    code, r = publish("node-a")
    assert code == OK
    assert dict(r.publish_context) == {"tierfs.dev/published-to": "node-a"}
    text = body(s3, bucket, lease)
    assert re.fullmatch(r"owner=grant\nhost=node-a\nrenewed=\d+\n", text)
    assert int(kv(text)["renewed"]) >= t0
    assert publish("node-a")[0] == OK  # idempotent
    code, details = publish("node-b")
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "node-a" in details
    assert publish("node-b", readonly=True)[0] == OK  # no lease change
    assert publish("node-b", mode=3)[0] == OK
    assert "host=node-a" in body(s3, bucket, lease)
    assert unpublish("node-b")[0] == OK  # not its lease: kept
    assert lease in keys(s3, bucket)
    assert unpublish("node-a")[0] == OK
    assert lease not in keys(s3, bucket)
    assert unpublish("node-a")[0] == OK  # idempotent
    assert publish("node-b")[0] == OK
    assert "host=node-b" in body(s3, bucket, lease)
    # a lease not renewed for 90 s belongs to a dead node: taken over
    s3.put_object(Bucket=bucket, Key=lease,
                  Body=f"owner=ab12\nhost=node-b\nrenewed={t0 - 600}\n")
    assert publish("node-c")[0] == OK
    assert "host=node-c" in body(s3, bucket, lease)
    # bad input
    assert publish("")[0] == INVALID
    assert publish("evil\nhost=x")[0] == INVALID
    assert publish("node-a", mode=4)[0] == INVALID
    assert publish("node-a", vid=f"{bucket}/gone")[0] == grpc.StatusCode.NOT_FOUND
    assert publish("node-a", vid="fake-vol-id")[0] == grpc.StatusCode.NOT_FOUND
    code, _ = status_of(p.ControllerPublishVolume,
                        pb.ControllerPublishVolumeRequest(
                            volume_id=vol.volume_id, node_id="n",
                            secrets=secrets()), timeout=30)
    assert code == INVALID


# --- snapshots -------------------------------------------------------------------

def test_snapshot_copy_list_restore_delete(ctl, s3, bucket):
    p = ctl.plugin
    pb = p.pb2
    src = create(p, bucket, name="pvc-src", params={"uid": "1000"})
    s3.put_object(Bucket=bucket, Key="pvc-src/work/a.py", Body=b"print(1)\n",
                  Metadata={"mode": "33188", "uid": "1000"})
    s3.put_object(Bucket=bucket, Key="pvc-src/b.txt", Body=b"hello")
    s3.put_object(Bucket=bucket, Key="pvc-src/.tierfs/lease",
                  Body=b"owner=grant\nhost=n\nrenewed=1\n")

    def snap(name, source=src.volume_id, **kw):
        return status_of(p.CreateSnapshot, pb.CreateSnapshotRequest(
            source_volume_id=source, name=name, secrets=secrets(), **kw),
            timeout=60)
    code, r = snap("snapshot-1")
    assert code == OK, r
    s = r.snapshot
    assert s.snapshot_id == f"{bucket}/.tierfs-snapshots/snapshot-1"
    assert s.source_volume_id == src.volume_id and s.ready_to_use
    assert s.size_bytes >= len(b"print(1)\nhello")
    assert s.creation_time.seconds > 0
    d = ".tierfs-snapshots/snapshot-1/"
    assert {d + "work/a.py", d + "b.txt", d + ".tierfs/snapshot"} <= \
        keys(s3, bucket, d)
    assert d + ".tierfs/lease" not in keys(s3, bucket, d)
    code, again = snap("snapshot-1")
    assert code == OK and again.snapshot.snapshot_id == s.snapshot_id
    other = create(p, bucket, name="pvc-other")
    assert snap("snapshot-1", other.volume_id)[0] == \
        grpc.StatusCode.ALREADY_EXISTS
    assert snap("s2", f"{bucket}/gone")[0] == grpc.StatusCode.NOT_FOUND
    assert snap("")[0] == INVALID
    assert snap("s3", "")[0] == INVALID
    code, details = snap("s4", parameters={"fast": "yes"})
    assert code == INVALID and "fast" in details
    # a name that is not a safe key is shortened, deterministically
    code, weird = snap("Weird name/with slashes " + "z" * 100)
    assert code == OK and len(weird.snapshot.snapshot_id) <= 128
    assert re.search(r"-[0-9a-f]{12}$", weird.snapshot.snapshot_id)

    # ListSnapshots: all, by id, by source, paginated
    r = p.ListSnapshots(pb.ListSnapshotsRequest(), timeout=30)
    assert {e.snapshot.snapshot_id for e in r.entries} == \
        {s.snapshot_id, weird.snapshot.snapshot_id}
    r = p.ListSnapshots(pb.ListSnapshotsRequest(snapshot_id=s.snapshot_id),
                        timeout=30)
    assert [e.snapshot.snapshot_id for e in r.entries] == [s.snapshot_id]
    r = p.ListSnapshots(pb.ListSnapshotsRequest(
        source_volume_id=other.volume_id), timeout=30)
    assert len(r.entries) == 0
    r = p.ListSnapshots(pb.ListSnapshotsRequest(snapshot_id="no-such"),
                        timeout=30)
    assert len(r.entries) == 0
    r = p.ListSnapshots(pb.ListSnapshotsRequest(max_entries=1), timeout=30)
    assert len(r.entries) == 1 and r.next_token == "1"
    code, _ = status_of(p.ListSnapshots, pb.ListSnapshotsRequest(
        starting_token="x"), timeout=30)
    assert code == grpc.StatusCode.ABORTED

    # restore into a new volume
    new = create(p, bucket, name="pvc-restored", volume_content_source=
                 pb.VolumeContentSource(snapshot=pb.VolumeContentSource.
                                        SnapshotSource(snapshot_id=s.snapshot_id)))
    assert new.content_source.snapshot.snapshot_id == s.snapshot_id
    assert body(s3, bucket, "pvc-restored/work/a.py") == "print(1)\n"
    assert s3.head_object(Bucket=bucket, Key="pvc-restored/work/a.py")[
        "Metadata"]["uid"] == "1000"
    m = kv(body(s3, bucket, "pvc-restored/.tierfs/volume"))
    assert m["name"] == "pvc-restored" and m["source"] == s.snapshot_id
    assert "pvc-restored/.tierfs/snapshot" not in keys(s3, bucket)

    # DeleteSnapshot, idempotent
    for _ in range(2):
        p.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=s.snapshot_id,
                                                  secrets=secrets()), timeout=30)
        assert not keys(s3, bucket, d)
    code, _ = status_of(p.DeleteSnapshot, pb.DeleteSnapshotRequest(
        snapshot_id=f"{bucket}/.tierfs-snapshots/../x", secrets=secrets()),
        timeout=30)
    assert code == INVALID


# --- secrets ----------------------------------------------------------------------

def test_secret_values_never_reach_the_log_or_an_error(ctl, bucket):
    p = ctl.plugin
    pb = p.pb2
    sec = {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
           "secretAccessKey": os.environ["AWS_SECRET_ACCESS_KEY"],
           "sessionToken": SECRET}
    details = []
    for req in (create_req(pb, bucket, secrets=sec),
                create_req(pb, bucket, secrets={"accessKeyID": SECRET}),
                create_req(pb, bucket, params={"bogus": "1"}, secrets=sec)):
        details.append(str(status_of(p.CreateVolume, req, timeout=30)[1]))
    details.append(str(status_of(p.DeleteVolume, pb.DeleteVolumeRequest(
        volume_id=f"{bucket}/pvc-1", secrets=sec), timeout=30)[1]))
    ctl.stop()
    log = ctl.log()
    for text in details + [log]:
        assert SECRET not in text
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text
