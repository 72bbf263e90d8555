"""csi-sanity's rules no other tests/csi file checks, on tierfs-csi --mode all.

csi-sanity (kubernetes-csi/csi-test, pkg/sanity) cannot be installed here,
so this file plays its checks for the RPCs tierfs implements, the way it
runs them: one plugin serving Identity, Controller and Node on one socket,
node id from NodeGetInfo, ids it never made shaped like its own
("fake-vol-id-...", "reallyfakesnapshotid", "fake-node-id-..."), the
secrets in every call that takes them. Each test is one rule, checked
against the CSI spec: the exact status code, and where a field is at
fault, that the message names it. The rules csi-sanity checks that other
files already test are listed in csi/README.md.

Needs the local S3 (`eval "$(hack/s3-local.sh env)"`); the tests that mount
need /dev/fuse too.
"""

import os
import sys
import uuid
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3util import skip_unless_s3  # noqa: E402

skip_unless_s3(fuse=False)

from csi_client import status_of, volume_cap  # noqa: E402

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
GiB = 1 << 30
NODE = "node-a"

needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"),
                                reason="no /dev/fuse")


def fake(kind):
    """An id tierfs never made, as csi-sanity's default generator makes."""
    return f"fake-{kind}-id-{uuid.uuid4().hex[:10]}"


def max_name(stem):
    """A unique name exactly 128 bytes long (the spec's string limit)."""
    return (f"{stem}-{uuid.uuid4().hex}" + "x" * 128)[:128]


@pytest.fixture
def plugin(start_plugin, bucket, tmp_path, reap_mounts):
    """tierfs-csi --mode all listing `bucket`, as csi-sanity runs it."""
    return start_plugin("all", "--list-bucket", bucket, "--cache-root",
                        str(tmp_path / "cache"), node_id=NODE).plugin


def cap(pb, mode="SINGLE_NODE_WRITER", block=False):
    return volume_cap(pb, mode, block)


def create(p, bucket, secrets, name, size=GiB, **kw):
    pb = p.pb2
    return p.CreateVolume(pb.CreateVolumeRequest(
        name=name, parameters={"bucket": bucket}, secrets=secrets,
        capacity_range=pb.CapacityRange(required_bytes=size),
        volume_capabilities=[cap(pb)], **kw), timeout=60).volume


def snapshot(p, secrets, source, name):
    return p.CreateSnapshot(p.pb2.CreateSnapshotRequest(
        source_volume_id=source, name=name, secrets=secrets),
        timeout=120).snapshot


def list_snapshots(p, secrets, **kw):
    return p.ListSnapshots(p.pb2.ListSnapshotsRequest(secrets=secrets, **kw),
                           timeout=60)


def failed(result, code, *fields):
    """Asserts result is (code, message) and the message names fields."""
    got, detail = result
    assert got == code, (got, detail)
    for f in fields:
        assert f in detail, (f, detail)


def node_publish(p, bucket, secrets, tmp_path, name):
    """What csi-sanity's node tests do first: a volume, controller
    published to NodeGetInfo's node, staged and published at
    <tmp>/mnt/target. Returns (volume, staging, target)."""
    pb = p.pb2
    vol = create(p, bucket, secrets, name)
    node = p.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10).node_id
    pub = p.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=vol.volume_id, node_id=node, volume_capability=cap(pb),
        secrets=secrets, volume_context=vol.volume_context), timeout=60)
    staging, target = tmp_path / "staging", tmp_path / "mnt" / "target"
    staging.mkdir()  # csi-sanity makes both directories it names
    target.parent.mkdir()
    p.NodeStageVolume(pb.NodeStageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        volume_capability=cap(pb), secrets=secrets,
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=120)
    p.NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        target_path=str(target), volume_capability=cap(pb),
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=60)
    return vol, staging, target


def node_unpublish(p, secrets, vol, staging, target):
    """csi-sanity's cleanup of node_publish(), every step OK."""
    pb = p.pb2
    p.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vol.volume_id, target_path=str(target)), timeout=60)
    assert not target.exists()
    p.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging)),
        timeout=300)
    p.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(
        volume_id=vol.volume_id, node_id=NODE, secrets=secrets), timeout=60)
    p.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id,
                                          secrets=secrets), timeout=60)


# ---- Controller: missing fields win over everything else -------------------


def test_validate_without_a_volume_id_is_invalid_argument(plugin, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.ValidateVolumeCapabilities,
                     pb.ValidateVolumeCapabilitiesRequest(
                         volume_capabilities=[cap(pb)], secrets=secrets),
                     timeout=30), INVALID, "volume_id")


def test_controller_publish_without_a_volume_id_is_invalid_argument(
        plugin, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.ControllerPublishVolume,
                     pb.ControllerPublishVolumeRequest(
                         node_id=NODE, volume_capability=cap(pb),
                         secrets=secrets), timeout=30), INVALID, "volume_id")


def test_controller_publish_of_an_unknown_volume_names_the_missing_field(
        plugin, secrets):
    """csi-sanity sends a volume id it made up with no node_id, then with
    no volume_capability: the missing field is the error, not the id."""
    pb = plugin.pb2
    failed(status_of(plugin.ControllerPublishVolume,
                     pb.ControllerPublishVolumeRequest(
                         volume_id=fake("vol"), secrets=secrets),
                     timeout=30), INVALID, "node_id")
    failed(status_of(plugin.ControllerPublishVolume,
                     pb.ControllerPublishVolumeRequest(
                         volume_id=fake("vol"), node_id=fake("node"),
                         secrets=secrets), timeout=30),
           INVALID, "volume_capability")


def test_controller_unpublish_without_a_volume_id_is_invalid_argument(
        plugin, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.ControllerUnpublishVolume,
                     pb.ControllerUnpublishVolumeRequest(
                         node_id=NODE, secrets=secrets), timeout=30),
           INVALID, "volume_id")


def test_controller_expand_without_an_id_or_a_range_is_invalid_argument(
        plugin, bucket, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.ControllerExpandVolume,
                     pb.ControllerExpandVolumeRequest(
                         capacity_range=pb.CapacityRange(
                             required_bytes=2 * GiB), secrets=secrets),
                     timeout=30), INVALID, "volume_id")
    vol = create(plugin, bucket, secrets, "sanity-expand-norange")
    failed(status_of(plugin.ControllerExpandVolume,
                     pb.ControllerExpandVolumeRequest(
                         volume_id=vol.volume_id, secrets=secrets),
                     timeout=30), INVALID, "capacity_range")


def test_create_snapshot_without_a_name_is_invalid_argument(plugin, secrets):
    """Even when the source is an id tierfs never made ("testId")."""
    pb = plugin.pb2
    failed(status_of(plugin.CreateSnapshot, pb.CreateSnapshotRequest(
        source_volume_id="testId", secrets=secrets), timeout=30),
        INVALID, "name")


def test_delete_snapshot_without_an_id_is_invalid_argument(plugin, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.DeleteSnapshot, pb.DeleteSnapshotRequest(
        secrets=secrets), timeout=30), INVALID, "snapshot_id")


@pytest.mark.parametrize("method", ["ListVolumes", "ListSnapshots"])
def test_a_negative_max_entries_is_invalid_argument(plugin, method):
    pb = plugin.pb2
    req = getattr(pb, method + "Request")(max_entries=-1)
    failed(status_of(getattr(plugin, method), req, timeout=30),
           INVALID, "max_entries")


def test_controller_publish_read_only_after_read_write_is_already_exists(
        plugin, bucket, secrets):
    """Published read-write to a node, the same volume published there
    again read-only is incompatible (tierfs advertises PUBLISH_READONLY)."""
    pb = plugin.pb2
    vol = create(plugin, bucket, secrets, "sanity-published-incompatible")

    def publish(readonly):
        return status_of(plugin.ControllerPublishVolume,
                         pb.ControllerPublishVolumeRequest(
                             volume_id=vol.volume_id, node_id=NODE,
                             volume_capability=cap(pb), readonly=readonly,
                             secrets=secrets,
                             volume_context=vol.volume_context), timeout=30)
    assert publish(False)[0] == OK
    failed(publish(True), grpc.StatusCode.ALREADY_EXISTS, "readonly",
           vol.volume_id)
    assert publish(False)[0] == OK  # the compatible one still is
    code, detail = status_of(plugin.ControllerUnpublishVolume,
                             pb.ControllerUnpublishVolumeRequest(
                                 volume_id=vol.volume_id, node_id=NODE,
                                 secrets=secrets), timeout=30)
    assert code == OK, detail
    assert publish(True)[0] == OK  # nothing read-write there any more


def test_controller_unpublish_without_a_node_id_unpublishes_everywhere(
        plugin, bucket, secrets, s3):
    """The spec: an unset node_id means every node the volume is
    published to. Read-write publishes hold a write grant in S3."""
    pb = plugin.pb2
    vol = create(plugin, bucket, secrets, "sanity-unpublish-all")
    lease = vol.volume_id.split("#")[0].split("/", 1)[1] + "/.tierfs/lease"
    plugin.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=vol.volume_id, node_id=NODE, volume_capability=cap(pb),
        secrets=secrets), timeout=30)
    assert "Contents" in s3.list_objects_v2(Bucket=bucket, Prefix=lease)
    code, detail = status_of(plugin.ControllerUnpublishVolume,
                             pb.ControllerUnpublishVolumeRequest(
                                 volume_id=vol.volume_id, secrets=secrets),
                             timeout=30)
    assert code == OK, detail
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=lease)


# ---- Controller: ids tierfs never made -------------------------------------


def test_controller_publish_to_a_node_that_does_not_exist_is_not_found(
        plugin, bucket, secrets):
    """--mode all serves one node, the one NodeGetInfo names: any other
    node_id is a node that does not exist."""
    pb = plugin.pb2
    vol = create(plugin, bucket, secrets, "sanity-controller-wrong-node")
    info = plugin.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10)
    assert info.node_id == NODE and info.max_volumes_per_node >= 0
    node = fake("node")
    failed(status_of(plugin.ControllerPublishVolume,
                     pb.ControllerPublishVolumeRequest(
                         volume_id=vol.volume_id, node_id=node,
                         volume_capability=cap(pb), secrets=secrets,
                         volume_context=vol.volume_context), timeout=30),
           NOT_FOUND, "node_id", node)
    code, detail = status_of(plugin.ControllerPublishVolume,
                             pb.ControllerPublishVolumeRequest(
                                 volume_id=vol.volume_id,
                                 node_id=info.node_id,
                                 volume_capability=cap(pb), secrets=secrets,
                                 volume_context=vol.volume_context),
                             timeout=30)
    assert code == OK, detail


def test_create_from_a_snapshot_tierfs_never_made_is_not_found(
        plugin, bucket, secrets):
    pb = plugin.pb2
    failed(status_of(plugin.CreateVolume, pb.CreateVolumeRequest(
        name="sanity-from-nothing", parameters={"bucket": bucket},
        secrets=secrets, volume_capabilities=[cap(pb)],
        volume_content_source=pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(
                snapshot_id="non-existing-snapshot-id"))), timeout=30),
        NOT_FOUND, "non-existing-snapshot-id")


def test_delete_snapshot_of_an_id_tierfs_never_made_is_ok(plugin, secrets):
    pb = plugin.pb2
    code, detail = status_of(plugin.DeleteSnapshot, pb.DeleteSnapshotRequest(
        snapshot_id="reallyfakesnapshotid", secrets=secrets), timeout=30)
    assert code == OK, detail


def test_list_snapshots_of_a_source_tierfs_never_made_is_empty(
        plugin, secrets):
    r = list_snapshots(plugin, secrets, source_volume_id=fake("vol"))
    assert len(r.entries) == 0 and not r.next_token


# ---- Controller: names at the length limit ---------------------------------


def test_a_128_byte_volume_name_is_created_and_created_again(
        plugin, bucket, secrets):
    name = max_name("sanity-controller-create-maxlen")
    a = create(plugin, bucket, secrets, name)
    b = create(plugin, bucket, secrets, name)
    assert a.volume_id and a.volume_id == b.volume_id
    assert a.capacity_bytes >= GiB


def test_a_128_byte_snapshot_name_is_cut_and_cut_again(
        plugin, bucket, secrets):
    vol = create(plugin, bucket, secrets, "sanity-snap-maxlen")
    name = max_name("CreateSnapshot-snapshot-maxlen")
    a = snapshot(plugin, secrets, vol.volume_id, name)
    b = snapshot(plugin, secrets, vol.volume_id, name)
    assert a.snapshot_id and a.snapshot_id == b.snapshot_id
    assert a.source_volume_id == vol.volume_id
    assert a.creation_time.seconds > 0 and a.ready_to_use


# ---- Controller: lists follow creates and deletes --------------------------


def test_list_volumes_shows_a_new_volume_and_drops_it_once_deleted(
        plugin, bucket, secrets):
    pb = plugin.pb2

    def listed():
        r = plugin.ListVolumes(pb.ListVolumesRequest(), timeout=60)
        for e in r.entries:
            assert e.volume.volume_id
        return [e.volume.volume_id for e in r.entries]
    before = listed()
    vol = create(plugin, bucket, secrets, "sanity")
    assert sorted(listed()) == sorted(before + [vol.volume_id])
    plugin.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id,
                                               secrets=secrets), timeout=60)
    assert sorted(listed()) == sorted(before)


def test_list_snapshots_shows_a_new_snapshot_and_drops_it_once_deleted(
        plugin, bucket, secrets):
    before = len(list_snapshots(plugin, secrets).entries)
    vol = create(plugin, bucket, secrets, "listSnapshots-volume-3")
    snap = snapshot(plugin, secrets, vol.volume_id, "listSnapshots-snap-3")
    r = list_snapshots(plugin, secrets)
    assert len(r.entries) == before + 1
    for e in r.entries:  # what csi-sanity asks of every entry
        s = e.snapshot
        assert s.snapshot_id and s.source_volume_id
        assert s.creation_time.seconds > 0
    plugin.DeleteSnapshot(plugin.pb2.DeleteSnapshotRequest(
        snapshot_id=snap.snapshot_id, secrets=secrets), timeout=60)
    assert len(list_snapshots(plugin, secrets).entries) == before


def test_list_snapshots_by_source_returns_only_that_volumes_snapshot(
        plugin, bucket, secrets):
    vols = [create(plugin, bucket, secrets, f"listSnapshots-volume-v-{i}")
            for i in range(3)]
    snaps = [snapshot(plugin, secrets, v.volume_id, f"listSnapshots-v-{i}")
             for i, v in enumerate(vols)]
    r = list_snapshots(plugin, secrets, source_volume_id=vols[1].volume_id)
    assert [e.snapshot.snapshot_id for e in r.entries] == \
        [snaps[1].snapshot_id]
    assert r.entries[0].snapshot.source_volume_id == vols[1].volume_id


def test_list_snapshots_pages_then_gives_the_rest_at_once(
        plugin, bucket, secrets):
    vol = create(plugin, bucket, secrets, "sanity-pages")
    made = {snapshot(plugin, secrets, vol.volume_id, f"page-{i}").snapshot_id
            for i in range(3)}
    first = list_snapshots(plugin, secrets, max_entries=2)
    assert len(first.entries) == 2 and first.next_token
    rest = list_snapshots(plugin, secrets, starting_token=first.next_token)
    assert len(rest.entries) == 1 and not rest.next_token
    assert {e.snapshot.snapshot_id for e in
            list(first.entries) + list(rest.entries)} == made


def test_a_snapshot_outlives_its_deleted_source_volume(
        plugin, bucket, secrets):
    """The spec: a plugin whose snapshots are independent of their volume
    keeps them listed and usable as a source once the volume is gone."""
    pb = plugin.pb2
    vol = create(plugin, bucket, secrets, "sanity-doomed")
    snap = snapshot(plugin, secrets, vol.volume_id, "sanity-survivor")
    plugin.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id,
                                               secrets=secrets), timeout=60)
    r = list_snapshots(plugin, secrets, snapshot_id=snap.snapshot_id)
    assert [e.snapshot.source_volume_id for e in r.entries] == \
        [vol.volume_id]
    new = create(plugin, bucket, secrets, "sanity-restored",
                 volume_content_source=pb.VolumeContentSource(
                     snapshot=pb.VolumeContentSource.SnapshotSource(
                         snapshot_id=snap.snapshot_id)))
    assert new.content_source.snapshot.snapshot_id == snap.snapshot_id


# ---- Node: ids tierfs never made --------------------------------------------


def test_node_stats_and_expand_of_a_volume_tierfs_never_made_are_not_found(
        plugin, tmp_path):
    pb = plugin.pb2
    vid, path = fake("vol"), str(tmp_path / "some" / "path")
    failed(status_of(plugin.NodeGetVolumeStats, pb.NodeGetVolumeStatsRequest(
        volume_id=vid, volume_path=path), timeout=30),
        NOT_FOUND, "volume_id", vid)
    failed(status_of(plugin.NodeExpandVolume, pb.NodeExpandVolumeRequest(
        volume_id=vid, volume_path=path,
        capacity_range=pb.CapacityRange(required_bytes=2 * GiB)),
        timeout=30), NOT_FOUND, "volume_id", vid)


def test_node_stage_and_publish_of_a_volume_tierfs_never_made_are_not_found(
        plugin, secrets, tmp_path):
    pb = plugin.pb2
    vid = fake("vol")
    staging, target = tmp_path / "staging", tmp_path / "mnt" / "target"
    failed(status_of(plugin.NodeStageVolume, pb.NodeStageVolumeRequest(
        volume_id=vid, staging_target_path=str(staging),
        volume_capability=cap(pb), secrets=secrets), timeout=30),
        NOT_FOUND, "volume_id", vid)
    failed(status_of(plugin.NodePublishVolume, pb.NodePublishVolumeRequest(
        volume_id=vid, staging_target_path=str(staging),
        target_path=str(target), volume_capability=cap(pb)), timeout=30),
        NOT_FOUND, "volume_id", vid)
    assert not staging.exists() and not target.exists()


def test_node_unstage_and_unpublish_of_a_volume_tierfs_never_made_are_ok(
        plugin, tmp_path):
    """Never staged nor published here: the spec's 'not staged to the
    staging_target_path' and csi-sanity's cleanup both want OK."""
    pb = plugin.pb2
    vid = fake("vol")
    code, detail = status_of(plugin.NodeUnpublishVolume,
                             pb.NodeUnpublishVolumeRequest(
                                 volume_id=vid,
                                 target_path=str(tmp_path / "mnt/target")),
                             timeout=30)
    assert code == OK, detail
    code, detail = status_of(plugin.NodeUnstageVolume,
                             pb.NodeUnstageVolumeRequest(
                                 volume_id=vid,
                                 staging_target_path=str(tmp_path / "stg")),
                             timeout=30)
    assert code == OK, detail


# ---- Node: a relative volume_path is not where any volume is --------------


@needs_fuse
def test_node_stats_of_a_relative_path_is_not_found(plugin, bucket, secrets,
                                                    tmp_path):
    """csi-sanity asks for the stats of a published volume at
    "some/path": the volume does not exist there (the spec's NOT_FOUND
    for NodeGetVolumeStats), even if the path is no absolute path."""
    pb = plugin.pb2
    vol, staging, target = node_publish(plugin, bucket, secrets, tmp_path,
                                        "sanity-node-get-volume-stats")
    failed(status_of(plugin.NodeGetVolumeStats, pb.NodeGetVolumeStatsRequest(
        volume_id=vol.volume_id, volume_path="some/path"), timeout=30),
        NOT_FOUND, "volume_path")
    r = plugin.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
        volume_id=vol.volume_id, volume_path=str(target)), timeout=30)
    assert r.usage
    node_unpublish(plugin, secrets, vol, staging, target)


def test_node_stats_and_expand_of_an_unknown_volume_at_a_relative_path(
        plugin):
    """csi-sanity's exact 'volume is not found' requests."""
    pb = plugin.pb2
    vid = fake("vol")
    failed(status_of(plugin.NodeGetVolumeStats, pb.NodeGetVolumeStatsRequest(
        volume_id=vid, volume_path="some/path"), timeout=30), NOT_FOUND)
    failed(status_of(plugin.NodeExpandVolume, pb.NodeExpandVolumeRequest(
        volume_id=vid, volume_path="some/path"), timeout=30), NOT_FOUND)


# ---- Node: NodePublishVolume's own error rows ------------------------------


def test_node_publish_without_a_staging_path_is_failed_precondition(
        plugin, bucket, tmp_path):
    """tierfs has STAGE_UNSTAGE_VOLUME: the spec's 'Staging target path
    not set' row is FAILED_PRECONDITION, not a malformed request."""
    pb = plugin.pb2
    code, detail = status_of(plugin.NodePublishVolume,
                             pb.NodePublishVolumeRequest(
                                 volume_id=f"{bucket}/sanity-unstaged",
                                 target_path=str(tmp_path / "mnt/target"),
                                 volume_capability=cap(pb)), timeout=30)
    assert code == grpc.StatusCode.FAILED_PRECONDITION, detail
    assert detail.startswith("staging_target_path"), detail


def test_node_publish_of_an_unknown_volume_names_the_missing_field(
        plugin, tmp_path):
    """csi-sanity's 'no target path' and 'no volume capability' requests
    carry a made-up id and no staging path: the field is the error."""
    pb = plugin.pb2
    code, detail = status_of(plugin.NodePublishVolume,
                             pb.NodePublishVolumeRequest(
                                 volume_id=fake("vol")), timeout=30)
    assert code == INVALID and detail.startswith("target_path"), detail
    code, detail = status_of(plugin.NodePublishVolume,
                             pb.NodePublishVolumeRequest(
                                 volume_id=fake("vol"),
                                 target_path=str(tmp_path / "mnt/target")),
                             timeout=30)
    assert code == INVALID and detail.startswith("volume_capability"), detail


def test_node_stage_and_publish_of_capabilities_tierfs_lacks_fail_precondition(
        plugin, bucket, secrets, tmp_path):
    """The spec's 'Exceeds capabilities' row: FAILED_PRECONDITION for
    NodeStageVolume and NodePublishVolume, INVALID_ARGUMENT for
    NodeExpandVolume. tierfs volumes are filesystems with at most one
    writing node: no block, no MULTI_NODE_SINGLE_WRITER, no ext4."""
    pb = plugin.pb2
    vid = f"{bucket}/sanity-caps"
    staging, target = tmp_path / "staging", tmp_path / "mnt" / "target"
    ext4 = cap(pb)
    ext4.mount.fs_type = "ext4"
    for c in (cap(pb, block=True), cap(pb, "MULTI_NODE_SINGLE_WRITER"),
              ext4):
        failed(status_of(plugin.NodeStageVolume, pb.NodeStageVolumeRequest(
            volume_id=vid, staging_target_path=str(staging),
            volume_capability=c, secrets=secrets), timeout=30),
            grpc.StatusCode.FAILED_PRECONDITION, "volume_capability")
        failed(status_of(plugin.NodePublishVolume,
                         pb.NodePublishVolumeRequest(
                             volume_id=vid, staging_target_path=str(staging),
                             target_path=str(target), volume_capability=c),
                         timeout=30),
               grpc.StatusCode.FAILED_PRECONDITION, "volume_capability")
        failed(status_of(plugin.NodeExpandVolume, pb.NodeExpandVolumeRequest(
            volume_id=vid, volume_path=str(target), volume_capability=c),
            timeout=30), INVALID, "volume_capability")
    assert not staging.exists() and not target.exists()
