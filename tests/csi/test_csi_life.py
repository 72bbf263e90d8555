"""The whole life of a JupyterHub user's volume, through the CSI socket only.

This file plays external-provisioner, the attacher, the snapshotter and
kubelet on two "nodes" (two node plugins, each with its own --cache-root
and --node-id) beside one controller, in the order they call:

create (10Gi, RWO) -> controller publish -> stage -> publish into a pod
directory -> git, SQLite, pip and files -> unpublish -> unstage ->
controller unpublish -> the same on the second node, where every byte is
there -> expand (live) -> snapshot -> restore into a new volume -> delete.

Then 20 volumes staged and used at once on one node. Needs the local S3
(`eval "$(hack/s3-local.sh env)"`) and /dev/fuse; skipped otherwise.
"""

import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3util import skip_unless_s3  # noqa: E402

skip_unless_s3(fuse=True)

GiB = 1 << 30
WHEELS = "/usr/share/python-wheels"


@pytest.fixture
def cluster(start_plugin, tmp_path, bucket):
    """A controller and two nodes; afterwards every daemon they left under
    tmp_path is killed and its mounts detached."""
    ctl = start_plugin("controller", "--list-bucket", bucket,
                       node_id=None).plugin
    nodes = {}
    for name in ("node-a", "node-b"):
        root = tmp_path / name / "cache"
        nodes[name] = start_plugin("node", "--cache-root", str(root),
                                   node_id=name).plugin
    yield ctl, nodes
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    for m in reversed(mounts):
        if m.startswith(str(tmp_path)):
            subprocess.run(["umount", "-l", m], check=False)
    for state in tmp_path.glob("node-*/cache/*/state"):
        for line in state.read_text().splitlines():
            key, _, val = line.partition("=")
            if key in ("supervisor", "worker") and val.isdigit() \
                    and int(val) > 0:
                try:
                    os.kill(int(val), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def secrets():
    return {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
            "secretAccessKey": os.environ["AWS_SECRET_ACCESS_KEY"]}


def rwo(pb):
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


def attach(ctl, node, name, vol, where):
    """Controller publish, stage and publish, as the attacher and kubelet
    do; returns the pod's view of the volume."""
    pb = ctl.pb2
    cap = rwo(pb)
    pub = ctl.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=vol.volume_id, node_id=name, volume_capability=cap,
        secrets=secrets(), volume_context=vol.volume_context), timeout=60)
    staging, target = where / "staging", where / "pod" / "home"
    node.NodeStageVolume(pb.NodeStageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        volume_capability=cap, secrets=secrets(),
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=120)
    node.NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        target_path=str(target), volume_capability=cap,
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=60)
    return target


def detach(ctl, node, name, vol, where):
    pb = ctl.pb2
    node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vol.volume_id, target_path=str(where / "pod" / "home")),
        timeout=60)
    node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(where / "staging")),
        timeout=600)
    ctl.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(
        volume_id=vol.volume_id, node_id=name, secrets=secrets()),
        timeout=60)


def run(cmd, cwd):
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)


def user_work(home):
    """What a notebook user does: a git repo, a SQLite database in WAL
    mode, a venv with an offline pip install, plain files."""
    run(["git", "init", "-q", "project"], home)
    (home / "project" / "analysis.py").write_text("print('hello')\n")
    run(["git", "-C", "project", "add", "-A"], home)
    run(["git", "-C", "project", "-c", "user.name=alice", "-c",
         "user.email=alice@example.org", "commit", "-qm", "first"], home)
    db = sqlite3.connect(home / "results.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE r(k INTEGER PRIMARY KEY, v BLOB)")
    db.executemany("INSERT INTO r(v) VALUES (?)",
                   [(os.urandom(200),) for _ in range(3000)])
    db.commit()
    db.close()
    run(["/usr/bin/python3", "-m", "venv", "env"], home)
    run([str(home / "env" / "bin" / "pip"), "install", "-q", "--no-index",
         "--find-links", WHEELS, "wheel"], home)
    (home / "data.bin").write_bytes(os.urandom(3 << 20))


def fingerprint(home):
    """What must survive a move: file hashes, the database and the repo."""
    out = {}
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.is_symlink() and \
                "results.db-" not in p.name:
            out[str(p.relative_to(home))] = hashlib.sha256(
                p.read_bytes()).hexdigest()
    db = sqlite3.connect(home / "results.db")
    out["rows"] = db.execute("SELECT count(*) FROM r").fetchone()[0]
    db.close()
    run(["git", "-C", "project", "fsck", "--strict"], home)
    out["wheel"] = subprocess.run(
        [str(home / "env" / "bin" / "python"), "-c",
         "import wheel; print(wheel.__version__)"],
        check=True, capture_output=True, text=True).stdout
    return out


def test_the_whole_life_of_a_users_volume(cluster, s3, bucket, tmp_path):
    ctl, nodes = cluster
    bkt = bucket
    pb = ctl.pb2
    params = {"bucket": bkt, "uid": str(os.getuid()), "gid": str(os.getgid()),
              "csi.storage.k8s.io/pvc/namespace": "jhub",
              "csi.storage.k8s.io/pvc/name": "claim-alice"}
    # 1. a 10Gi RWO volume
    vol = ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-1111", parameters=params, secrets=secrets(),
        capacity_range=pb.CapacityRange(required_bytes=10 * GiB),
        volume_capabilities=[rwo(pb)]), timeout=60).volume
    assert vol.capacity_bytes == 10 * GiB
    assert re.fullmatch(rf"{bkt}/jhub/claim-alice#[0-9a-f]{{8}}",
                        vol.volume_id)
    # 2-3. on node-a: publish, stage, publish; the user works
    a = tmp_path / "node-a"
    home = attach(ctl, nodes["node-a"], "node-a", vol, a)
    st = os.statvfs(home)
    assert st.f_blocks * st.f_frsize == 10 * GiB
    user_work(home)
    before = fingerprint(home)
    # 4. unpublish and unstage: everything is in S3 once unstage returns
    detach(ctl, nodes["node-a"], "node-a", vol, a)
    listed = {o["Key"] for page in s3.get_paginator(
        "list_objects_v2").paginate(Bucket=bkt, Prefix="jhub/claim-alice/")
        for o in page.get("Contents", [])}
    assert "jhub/claim-alice/results.db" in listed
    assert "jhub/claim-alice/project/.git/HEAD" in listed
    # 5. the pod moves to node-b: all data intact
    b = tmp_path / "node-b"
    home = attach(ctl, nodes["node-b"], "node-b", vol, b)
    assert fingerprint(home) == before
    # 6. expand, live, while mounted on node-b
    r = ctl.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume_id, secrets=secrets(),
        capacity_range=pb.CapacityRange(required_bytes=20 * GiB)),
        timeout=60)
    assert r.capacity_bytes == 20 * GiB and r.node_expansion_required
    nodes["node-b"].NodeExpandVolume(pb.NodeExpandVolumeRequest(
        volume_id=vol.volume_id, volume_path=str(home),
        staging_target_path=str(b / "staging"), volume_capability=rwo(pb),
        capacity_range=pb.CapacityRange(required_bytes=20 * GiB)),
        timeout=60)
    st = os.statvfs(home)
    assert st.f_blocks * st.f_frsize == 20 * GiB
    (home / "after-expand.txt").write_text("more room\n")
    detach(ctl, nodes["node-b"], "node-b", vol, b)
    # 7. snapshot, and restore it into a new volume
    snap = ctl.CreateSnapshot(pb.CreateSnapshotRequest(
        source_volume_id=vol.volume_id, name="snap-alice",
        secrets=secrets()), timeout=300).snapshot
    assert snap.ready_to_use and snap.source_volume_id == vol.volume_id
    restored = ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-2222", parameters=dict(
            params, **{"csi.storage.k8s.io/pvc/name": "claim-restored"}),
        secrets=secrets(),
        capacity_range=pb.CapacityRange(required_bytes=10 * GiB),
        volume_capabilities=[rwo(pb)],
        volume_content_source=pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(
                snapshot_id=snap.snapshot_id))), timeout=300).volume
    assert restored.content_source.snapshot.snapshot_id == snap.snapshot_id
    r_home = attach(ctl, nodes["node-a"], "node-a", restored,
                    tmp_path / "restore")
    got = fingerprint(r_home)
    assert (r_home / "after-expand.txt").read_text() == "more room\n"
    del got["after-expand.txt"]
    assert got == before
    detach(ctl, nodes["node-a"], "node-a", restored, tmp_path / "restore")
    # 8. delete: nothing is left under either prefix
    ctl.DeleteSnapshot(pb.DeleteSnapshotRequest(
        snapshot_id=snap.snapshot_id, secrets=secrets()), timeout=300)
    for v in (vol, restored):
        ctl.DeleteVolume(pb.DeleteVolumeRequest(
            volume_id=v.volume_id, secrets=secrets()), timeout=300)
    left = s3.list_objects_v2(Bucket=bkt)
    assert left.get("KeyCount", 0) == 0, [o["Key"] for o in left["Contents"]]


def test_twenty_volumes_staged_and_used_at_once(cluster, s3, bucket,
                                                tmp_path):
    ctl, nodes = cluster
    bkt = bucket
    pb = ctl.pb2
    node = nodes["node-a"]
    vols = [ctl.CreateVolume(pb.CreateVolumeRequest(
        name=f"pvc-many-{i:02d}", parameters={
            "bucket": bkt, "prefix": f"many/user-{i:02d}"},
        secrets=secrets(),
        capacity_range=pb.CapacityRange(required_bytes=GiB),
        volume_capabilities=[rwo(pb)]), timeout=60).volume
        for i in range(20)]
    homes = [attach(ctl, node, "node-a", v, tmp_path / f"v{i:02d}")
             for i, v in enumerate(vols)]
    assert len({os.stat(h).st_dev for h in homes}) == 20

    def work(i):
        data = (b"user %d\n" % i) * (1000 + i)
        (homes[i] / "notes.txt").write_bytes(data)
        db = sqlite3.connect(homes[i] / "db.sqlite")
        db.execute("CREATE TABLE t(x)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,)] * 100)
        db.commit()
        db.close()
        return data

    with ThreadPoolExecutor(max_workers=20) as ex:
        datas = list(ex.map(work, range(20)))
    for i, h in enumerate(homes):  # no volume sees another's files
        assert (h / "notes.txt").read_bytes() == datas[i]
        assert sorted(p.name for p in h.iterdir()) == ["db.sqlite",
                                                      "notes.txt"]
    for i, v in enumerate(vols):
        detach(ctl, node, "node-a", v, tmp_path / f"v{i:02d}")
    for i in range(20):
        got = s3.get_object(Bucket=bkt, Key=f"many/user-{i:02d}/notes.txt")
        assert got["Body"].read() == datas[i]


def test_a_snapshot_of_a_mounted_volume_holds_writes_not_yet_uploaded(
        cluster, s3, bucket, tmp_path):
    """CreateSnapshot asks the node that holds the volume's lease to send
    its pending writes, and copies once it has. The daemon here uploads
    only after 10 minutes but renews its lease every second."""
    from tierfs_mount import Mount
    ctl, _ = cluster
    pb = ctl.pb2
    vol = ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-flush", parameters={"bucket": bucket, "prefix": "flush/u"},
        secrets=secrets(), volume_capabilities=[rwo(pb)]),
        timeout=60).volume
    bucket_prefix = vol.volume_id.split("#")[0]  # less its generation
    m = Mount(f"s3://{bucket_prefix}", str(tmp_path / "m"),
              str(tmp_path / "c"), "--upload-delay", "10m",
              "--lease-interval", "1s", "--node", "node-a")
    try:
        (Path(m.mountpoint) / "notes.txt").write_text("not uploaded yet\n")
        time.sleep(1)
        assert "Contents" not in s3.list_objects_v2(
            Bucket=bucket, Prefix="flush/u/notes.txt")
        snap = ctl.CreateSnapshot(pb.CreateSnapshotRequest(
            source_volume_id=vol.volume_id, name="snap-flush",
            secrets=secrets()), timeout=120).snapshot
        key = snap.snapshot_id.split("/", 1)[1] + "/notes.txt"
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert got == b"not uploaded yet\n"
    finally:
        assert m.unmount() == 0, m.output()
    assert "flushed for a snapshot" in m.output()
