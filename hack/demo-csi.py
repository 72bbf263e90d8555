#!/usr/bin/python3
"""demo-csi.py: one JupyterHub user's volume, driven through the CSI socket.

Plays the external-provisioner, the attacher and kubelet against a running
`tierfs-csi --mode all` (the socket is argv[1]): CreateVolume (10Gi, RWO),
ControllerPublishVolume, NodeStageVolume, NodePublishVolume into a "pod"
directory, then a notebook-style workload in it (files, SQLite, git, fio),
NodeGetVolumeStats, a snapshot, ControllerExpandVolume + NodeExpandVolume,
NodeUnpublish/NodeUnstage (everything reaches S3), the objects that landed,
a restore of the snapshot into a new volume, and the deletes.
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and are
passed as CSI secrets, as Kubernetes does; they are never printed.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "csi"))

import boto3  # noqa: E402
from csi_client import Plugin  # noqa: E402

GiB = 1 << 30


def step(text):
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(cmd, cwd):
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def main():
    sock, bucket, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    run_id = time.strftime("%Y%m%d-%H%M%S")  # a fresh namespace per run
    p = Plugin(sock)
    pb = p.pb2
    secrets = {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
               "secretAccessKey": os.environ["AWS_SECRET_ACCESS_KEY"]}
    node = p.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10).node_id
    cap = pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))
    params = {"bucket": bucket, "uid": str(os.getuid()),
              "gid": str(os.getgid()),
              "csi.storage.k8s.io/pvc/namespace": f"jhub-{run_id}",
              "csi.storage.k8s.io/pvc/name": "claim-alice"}

    step("CreateVolume: claim-alice, 10Gi, RWO")
    vol = p.CreateVolume(pb.CreateVolumeRequest(
        name=f"pvc-{run_id}-alice", parameters=params, secrets=secrets,
        capacity_range=pb.CapacityRange(required_bytes=10 * GiB),
        volume_capabilities=[cap]), timeout=60).volume
    print(f"volume_id {vol.volume_id}, {vol.capacity_bytes // GiB} GiB")

    staging = work / "staging"
    target = work / "pods" / "jupyter-alice" / "home"
    step(f"ControllerPublishVolume to {node}, NodeStageVolume, "
         "NodePublishVolume")
    pub = p.ControllerPublishVolume(pb.ControllerPublishVolumeRequest(
        volume_id=vol.volume_id, node_id=node, volume_capability=cap,
        secrets=secrets, volume_context=vol.volume_context), timeout=60)
    p.NodeStageVolume(pb.NodeStageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        volume_capability=cap, secrets=secrets,
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=120)
    p.NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging),
        target_path=str(target), volume_capability=cap,
        publish_context=pub.publish_context,
        volume_context=vol.volume_context), timeout=60)
    run(["findmnt", "-T", str(target)], cwd=work)

    step("a notebook user's work in the home directory")
    home = target
    (home / "notebooks").mkdir(exist_ok=True)
    (home / "notebooks" / "analysis.ipynb").write_text(
        '{"cells": [], "nbformat": 4, "nbformat_minor": 5}\n')
    run(["sqlite3", "results.db",
         "PRAGMA journal_mode=WAL; CREATE TABLE r(k INTEGER PRIMARY KEY, v);"
         " WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n "
         "WHERE i < 5000) INSERT INTO r(v) SELECT hex(randomblob(32)) "
         "FROM n; SELECT count(*) FROM r;"], cwd=home)
    run(["git", "init", "-q", "project"], cwd=home)
    (home / "project" / "README.md").write_text("my project\n")
    run(["git", "-C", "project", "add", "README.md"], cwd=home)
    run(["git", "-C", "project", "-c", "user.name=alice", "-c",
         "user.email=alice@example.org", "commit", "-qm", "first"], cwd=home)
    fio = ["fio", "--name=demo", "--directory=.", "--rw=randrw", "--bs=4k",
           "--size=64M", "--runtime=10", "--time_based", "--numjobs=2",
           "--ioengine=psync", "--group_reporting"]
    print("$ " + " ".join(fio), flush=True)
    out = subprocess.run(fio, cwd=home, check=True, capture_output=True,
                         text=True).stdout
    print("\n".join(line for line in out.splitlines()
                    if line.lstrip().startswith(("read:", "write:"))))
    os.sync()

    step("NodeGetVolumeStats")
    st = p.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
        volume_id=vol.volume_id, volume_path=str(target)), timeout=30)
    for u in st.usage:
        unit = pb.VolumeUsage.Unit.Name(u.unit)
        print(f"{unit}: used {u.used} of {u.total}, available {u.available}")
    print("condition:", "abnormal: " + st.volume_condition.message
          if st.volume_condition.abnormal else "normal")

    step("ControllerExpandVolume + NodeExpandVolume to 20Gi, live")
    p.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume_id, secrets=secrets,
        capacity_range=pb.CapacityRange(required_bytes=20 * GiB)),
        timeout=60)
    p.NodeExpandVolume(pb.NodeExpandVolumeRequest(
        volume_id=vol.volume_id, volume_path=str(target),
        capacity_range=pb.CapacityRange(required_bytes=20 * GiB),
        staging_target_path=str(staging), volume_capability=cap),
        timeout=60)
    run(["df", "-h", str(target)], cwd=work)

    step("NodeUnpublishVolume, NodeUnstageVolume (returns once all is in S3)")
    p.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vol.volume_id, target_path=str(target)), timeout=60)
    t0 = time.monotonic()
    p.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging)),
        timeout=600)
    print(f"unstaged in {time.monotonic() - t0:.1f} s")
    p.ControllerUnpublishVolume(pb.ControllerUnpublishVolumeRequest(
        volume_id=vol.volume_id, node_id=node, secrets=secrets), timeout=60)

    step("CreateSnapshot (server-side copy of the prefix)")
    snap = p.CreateSnapshot(pb.CreateSnapshotRequest(
        source_volume_id=vol.volume_id, name=f"snap-{run_id}-alice",
        secrets=secrets), timeout=300).snapshot
    print(f"snapshot_id {snap.snapshot_id}, {snap.size_bytes} bytes, "
          f"ready {snap.ready_to_use}")

    step("what landed in S3")
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    bucket_name, prefix = vol.volume_id.split("#")[0].split("/", 1)
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket_name, Prefix=prefix + "/")
    keys = [(o["Key"], o["Size"]) for pg in pages for o in pg.get("Contents", [])]
    for k, size in keys[:25]:
        print(f"{size:>12}  {k}")
    if len(keys) > 25:
        print(f"... and {len(keys) - 25} more")

    step("restoring the snapshot into a new volume, and checking it")
    restored = p.CreateVolume(pb.CreateVolumeRequest(
        name=f"pvc-{run_id}-alice-restore", parameters=dict(
            params, **{"csi.storage.k8s.io/pvc/name": "claim-alice-restore"}),
        secrets=secrets,
        capacity_range=pb.CapacityRange(required_bytes=10 * GiB),
        volume_capabilities=[cap],
        volume_content_source=pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(
                snapshot_id=snap.snapshot_id))), timeout=300).volume
    staging2 = work / "staging-restore"
    p.NodeStageVolume(pb.NodeStageVolumeRequest(
        volume_id=restored.volume_id, staging_target_path=str(staging2),
        volume_capability=cap, secrets=secrets,
        volume_context=restored.volume_context), timeout=120)
    run(["sqlite3", "results.db", "SELECT count(*) FROM r;"], cwd=staging2)
    run(["git", "-C", "project", "log", "--oneline"], cwd=staging2)
    p.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
        volume_id=restored.volume_id, staging_target_path=str(staging2)),
        timeout=600)

    step("cleaning up: DeleteSnapshot, DeleteVolume")
    p.DeleteSnapshot(pb.DeleteSnapshotRequest(
        snapshot_id=snap.snapshot_id, secrets=secrets), timeout=300)
    for v in (vol, restored):
        p.DeleteVolume(pb.DeleteVolumeRequest(
            volume_id=v.volume_id, secrets=secrets), timeout=300)
    left = s3.list_objects_v2(Bucket=bucket_name, Prefix=prefix + "/")
    print(f"objects left under {prefix}/: {left.get('KeyCount', 0)}")
    p.close()
    shutil.rmtree(work / "pods", ignore_errors=True)


if __name__ == "__main__":
    main()
