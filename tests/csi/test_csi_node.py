"""test_csi_node.py: the Node service, played as kubelet plays it, over the
local S3 and real FUSE mounts.

stage -> publish -> use -> stats -> unpublish -> unstage, a second node,
idempotency, bad input with the spec's codes, secrets kept out of argv and
logs, a plugin killed mid-life, live expansion, VolumeCondition after the
daemon dies, and VOLUME_MOUNT_GROUP. The plugin runs without S3
credentials in its environment: the daemons can only reach S3 through the
node-stage secrets. Run under `eval "$(hack/s3-local.sh env)"`.
"""

import errno
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s3util import skip_unless_s3  # noqa: E402

skip_unless_s3()

import boto3  # noqa: E402

from csi_client import csi_bin, status_of, volume_cap  # noqa: E402

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXISTS = grpc.StatusCode.ALREADY_EXISTS
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION

BUCKET = "node-csi"
RUN = uuid.uuid4().hex[:8]
MiB = 1 << 20
TIERFS = str(Path(csi_bin()).parent / "tierfs")
AK = os.environ.get("AWS_ACCESS_KEY_ID", "")
SK = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
# Swift ignores a session token it did not issue: a distinctive secret to
# look for in every log, argv and environment
CANARY = "tierfs-canary-" + uuid.uuid4().hex
SECRETS = {"accessKeyID": AK, "secretAccessKey": SK, "sessionToken": CANARY}


@pytest.fixture(scope="module")
def s3():
    c = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    try:
        c.create_bucket(Bucket=BUCKET)
    except (c.exceptions.BucketAlreadyOwnedByYou,
            c.exceptions.BucketAlreadyExists):
        pass
    return c


def keys(s3, prefix):
    out = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=prefix):
        out.update(o["Key"] for o in page.get("Contents", []))
    return out


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Node:
    """One tierfs-csi --mode node, its cache root and its pod dirs."""

    def __init__(self, start_plugin, tmp_path, name):
        self.root = tmp_path / name
        self.cache_root = self.root / "cache"
        self.running = start_plugin("node", "--cache-root",
                                    str(self.cache_root), node_id=name)
        self.p = self.running.plugin
        self.pb = self.p.pb2
        self.name = name
        self.start_plugin = start_plugin

    def restart(self):
        """kill -9 of the plugin, then a new one on the same cache root."""
        self.running.proc.kill()
        self.running.proc.wait()
        self.running = self.start_plugin("node", "--cache-root",
                                         str(self.cache_root),
                                         node_id=self.name)
        self.p = self.running.plugin

    def staging(self, vol):
        return str(self.root / "staging" / vol.replace("/", "_"))

    def target(self, vol, pod="pod"):
        return str(self.root / pod / "mount")

    def cap(self, mode="SINGLE_NODE_WRITER", block=False, group=""):
        return volume_cap(self.pb, mode, block, group)

    def stage(self, vol, cap=None, secrets=None, context=None, staging=None):
        req = self.pb.NodeStageVolumeRequest(
            volume_id=vol,
            staging_target_path=self.staging(vol) if staging is None
            else staging,
            volume_capability=cap or self.cap(),
            secrets=SECRETS if secrets is None else secrets,
            volume_context=context or {"capacity": str(64 * MiB)})
        return status_of(self.p.NodeStageVolume, req, timeout=120)

    def unstage(self, vol, staging=None):
        req = self.pb.NodeUnstageVolumeRequest(
            volume_id=vol, staging_target_path=self.staging(vol)
            if staging is None else staging)
        return status_of(self.p.NodeUnstageVolume, req, timeout=180)

    def publish(self, vol, target, cap=None, readonly=False, staging=None):
        req = self.pb.NodePublishVolumeRequest(
            volume_id=vol, staging_target_path=self.staging(vol)
            if staging is None else staging, target_path=target, volume_capability=cap or self.cap(),
            readonly=readonly)
        return status_of(self.p.NodePublishVolume, req, timeout=30)

    def unpublish(self, vol, target):
        req = self.pb.NodeUnpublishVolumeRequest(volume_id=vol,
                                                 target_path=target)
        return status_of(self.p.NodeUnpublishVolume, req, timeout=30)

    def stats(self, vol, path):
        req = self.pb.NodeGetVolumeStatsRequest(volume_id=vol,
                                                volume_path=path)
        return status_of(self.p.NodeGetVolumeStats, req, timeout=30)

    def expand(self, vol, path, nbytes):
        req = self.pb.NodeExpandVolumeRequest(
            volume_id=vol, volume_path=path,
            capacity_range=self.pb.CapacityRange(required_bytes=nbytes))
        return status_of(self.p.NodeExpandVolume, req, timeout=30)

    def cache_dir(self, vol):
        (d,) = [d for d in self.cache_root.iterdir()
                if (d / "csi-stage").exists() and
                f"volume_id={vol}\n" in (d / "csi-stage").read_text()]
        return d

    def daemon_pids(self, vol):
        st = dict(line.split("=", 1) for line in
                  (self.cache_dir(vol) / "state").read_text().splitlines())
        return int(st["supervisor"]), int(st["worker"])


def ok(result):
    code, detail = result
    assert code == OK, detail
    return detail


@pytest.fixture
def node(start_plugin, tmp_path, monkeypatch):
    """A node plugin with no S3 credentials in its environment. After the
    test, every daemon still running under tmp_path is unmounted."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    nodes = []

    def make(name="node-a"):
        n = Node(start_plugin, tmp_path, name)
        nodes.append(n)
        return n

    yield make
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    for m in reversed(mounts):
        if m.startswith(str(tmp_path)):
            subprocess.run(["umount", "-l", m], check=False)
    for n in nodes:
        if not n.cache_root.exists():
            continue
        for d in n.cache_root.iterdir():
            st = d / "state"
            if st.exists():
                for line in st.read_text().splitlines():
                    if line.startswith(("supervisor=", "worker=")):
                        pid = int(line.split("=")[1])
                        if pid <= 0:  # stopped: 0 would be our group
                            continue
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass


def vol_id(name):
    return f"{BUCKET}/{RUN}/{name}"


def prefix_of(vol):
    return vol.split("/", 1)[1]


def fsync_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


# ---- the life of a volume ------------------------------------------------


def test_stage_publish_use_unpublish_unstage_puts_everything_in_s3(
        node, s3, tmp_path):
    n = node()
    vol = vol_id("life")
    ok(n.stage(vol))
    staging = n.staging(vol)
    assert is_mounted(staging)
    creds = n.cache_dir(vol) / "credentials"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    target = n.target(vol)
    ok(n.publish(vol, target))
    assert is_mounted(target)
    (Path(target) / "notebook.ipynb").write_text('{"cells": []}\n')
    os.mkdir(Path(target) / "dir")
    (Path(target) / "dir" / "data.csv").write_text("a,b\n1,2\n")
    # a read-only publish of the same staged volume refuses writes
    ro_target = n.target(vol, pod="ro-pod")
    ok(n.publish(vol, ro_target, readonly=True))
    assert (Path(ro_target) / "notebook.ipynb").read_text() == \
        '{"cells": []}\n'
    with pytest.raises(OSError) as e:
        (Path(ro_target) / "nope").write_text("x")
    assert e.value.errno == errno.EROFS

    r = ok(n.stats(vol, target))
    by_unit = {u.unit: u for u in r.usage}
    b = by_unit[n.pb.VolumeUsage.BYTES]
    assert b.total == 64 * MiB  # the quota from the volume context
    assert 0 < b.used < b.total and b.available == b.total - b.used
    ino = by_unit[n.pb.VolumeUsage.INODES]
    assert ino.used >= 3 and ino.total > ino.used
    assert not r.volume_condition.abnormal, r.volume_condition.message
    assert ok(n.stats(vol, staging)).usage  # the staging path works too

    ok(n.unpublish(vol, ro_target))
    ok(n.unpublish(vol, target))
    assert not os.path.exists(target) and not os.path.exists(ro_target)
    ok(n.unstage(vol))
    assert not is_mounted(staging)
    assert not creds.exists()
    p = prefix_of(vol)
    got = keys(s3, p + "/")
    assert {f"{p}/notebook.ipynb", f"{p}/dir/data.csv"} <= got
    assert s3.get_object(Bucket=BUCKET, Key=f"{p}/dir/data.csv")[
        "Body"].read() == b"a,b\n1,2\n"
    assert f"{p}/.tierfs/lease" not in got  # released at unstage


def test_a_second_node_stages_the_volume_and_sees_the_data(node, s3):
    a, b = node("node-a"), node("node-b")
    vol = vol_id("move")
    ok(a.stage(vol))
    ok(a.publish(vol, a.target(vol)))
    fsync_file(Path(a.target(vol)) / "f", b"from a\n")
    ok(a.unpublish(vol, a.target(vol)))
    ok(a.unstage(vol))
    ok(b.stage(vol))
    ok(b.publish(vol, b.target(vol)))
    assert (Path(b.target(vol)) / "f").read_bytes() == b"from a\n"
    lease = s3.get_object(Bucket=BUCKET, Key=f"{prefix_of(vol)}/.tierfs/lease")
    assert b"host=node-b\n" in lease["Body"].read()
    ok(b.unpublish(vol, b.target(vol)))
    ok(b.unstage(vol))


def test_a_grant_to_another_node_refuses_stage_with_failed_precondition(
        node, s3):
    a = node("node-a")
    vol = vol_id("granted")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix_of(vol)}/.tierfs/lease",
                  Body=f"owner=grant\nhost=node-z\nrenewed={int(time.time())}\n"
                  .encode())
    code, detail = a.stage(vol)
    assert code == PRECONDITION and "granted to node 'node-z'" in detail
    assert not is_mounted(a.staging(vol))
    # granted here: taken
    s3.put_object(Bucket=BUCKET, Key=f"{prefix_of(vol)}/.tierfs/lease",
                  Body=f"owner=grant\nhost=node-a\nrenewed={int(time.time())}\n"
                  .encode())
    ok(a.stage(vol))
    ok(a.unstage(vol))


def test_the_quota_comes_from_the_volume_marker_before_the_context(node, s3):
    n = node()
    vol = vol_id("marker")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix_of(vol)}/.tierfs/volume",
                  Body=f"format=1\ncapacity={32 * MiB}\n".encode())
    ok(n.stage(vol, context={"capacity": str(16 * MiB)}))
    st = os.statvfs(n.staging(vol))
    assert st.f_blocks * st.f_frsize == 32 * MiB
    ok(n.unstage(vol))


def test_staging_a_volume_deleted_and_made_again_is_not_found(node, s3):
    """An id names one generation of the volume at its prefix (csi/volume.h):
    once the prefix holds a volume made since, the old id stages nothing,
    and writes no credentials on the node."""
    n = node()
    vol = vol_id("regen")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix_of(vol)}/.tierfs/volume",
                  Body=b"format=1\ngeneration=0000beef\ncapacity=1024\n")
    code, detail = n.stage(vol + "#0000dead")
    assert code == grpc.StatusCode.NOT_FOUND, detail
    assert "volume_id" in detail
    assert not n.cache_root.exists() or not any(n.cache_root.rglob("*"))
    ok(n.stage(vol + "#0000beef"))
    ok(n.unstage(vol + "#0000beef"))
    # an id with no generation, as a static PV's, names what is there
    ok(n.stage(vol))
    ok(n.unstage(vol))


# ---- idempotency ---------------------------------------------------------


def test_every_call_repeated_is_ok_and_conflicts_say_already_exists(node):
    n = node()
    vol, other = vol_id("idem"), vol_id("idem-other")
    ok(n.stage(vol))
    ok(n.stage(vol))  # same volume, same path, same capability
    code, detail = n.stage(vol, cap=n.cap("SINGLE_NODE_READER_ONLY"))
    assert code == EXISTS, detail
    # another volume at that staging path
    code, detail = n.stage(other, staging=n.staging(vol))
    assert code == EXISTS and "staging_target_path" in detail
    target = n.target(vol)
    ok(n.publish(vol, target))
    ok(n.publish(vol, target))
    code, detail = n.publish(vol, target, readonly=True)
    assert code == EXISTS, detail
    ok(n.stage(other))
    code, detail = n.publish(other, target)
    assert code == EXISTS and "target_path" in detail
    ok(n.unpublish(vol, target))
    ok(n.unpublish(vol, target))
    ok(n.unstage(vol))
    ok(n.unstage(vol))
    ok(n.unstage(other))
    # never staged at all
    ok(n.unstage(vol_id("never")))
    ok(n.unpublish(vol_id("never"), n.target("x", pod="never")))


def test_publish_before_stage_is_failed_precondition(node):
    n = node()
    vol = vol_id("unstaged")
    code, detail = n.publish(vol, n.target(vol))
    assert code == PRECONDITION, detail
    code, detail = n.stats(vol, n.staging(vol))
    assert code == NOT_FOUND, detail
    code, detail = n.expand(vol, n.staging(vol), 128 * MiB)
    assert code == NOT_FOUND, detail


# ---- bad input -----------------------------------------------------------

# (an id with no "/" at all is one tierfs never made: NOT_FOUND or OK,
# see test_csi_sanity.py)
BAD_IDS = [("", "volume_id"), ("node-csi/", "volume_id"),
           ("node-csi/a/../b", "volume_id"), ("x" * 200, "volume_id"),
           ("node-csi/a\x00b", "volume_id")]
BAD_PATHS = ["", "relative/path", "/tmp/a/../b", "/tmp/a\nb"]


@pytest.mark.parametrize("vid,field", BAD_IDS)
def test_bad_volume_ids_are_invalid_argument_in_every_rpc(node, vid, field):
    n = node()
    t = "/tmp/tierfs-node-never"
    for code, detail in (
            n.stage(vid, staging=t), n.unstage(vid, staging=t),
            n.publish(vid, t, staging=t), n.unpublish(vid, t),
            n.stats(vid, t), n.expand(vid, t, MiB)):
        assert code == INVALID, detail
        assert field in detail


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_paths_are_invalid_argument_naming_the_field(node, path):
    n = node()
    vol = vol_id("paths")
    good = n.staging(vol)
    # a relative volume_path is where no volume is (test_csi_sanity.py)
    at = NOT_FOUND if path and path[0] != "/" else INVALID
    cases = [
        (n.stage(vol, staging=path), "staging_target_path", INVALID),
        (n.unstage(vol, staging=path), "staging_target_path", INVALID),
        (n.publish(vol, path, staging=good), "target_path", INVALID),
        (n.unpublish(vol, path), "target_path", INVALID),
        (n.stats(vol, path), "volume_path", at),
        (n.expand(vol, path, MiB), "volume_path", at),
    ]
    for (code, detail), field, want in cases:
        assert code == want, (field, detail)
        assert field in detail, detail


def test_capabilities_tierfs_cannot_serve_fail_and_bad_ones_are_invalid(
        node):
    """What tierfs volumes lack is the spec's 'Exceeds capabilities'
    (FAILED_PRECONDITION); a capability missing or malformed is
    INVALID_ARGUMENT."""
    n = node()
    vol = vol_id("caps")
    for cap, word in ((n.cap(block=True), "block"),
                      (n.cap("MULTI_NODE_SINGLE_WRITER"),
                       "MULTI_NODE_SINGLE_WRITER")):
        code, detail = n.stage(vol, cap=cap)
        assert code == PRECONDITION and word in detail, detail
        code, detail = n.publish(vol, n.target(vol), cap=cap)
        assert code == PRECONDITION and word in detail, detail
    req = n.pb.NodeStageVolumeRequest(volume_id=vol,
                                      staging_target_path=n.staging(vol),
                                      secrets=SECRETS)
    code, detail = status_of(n.p.NodeStageVolume, req, timeout=10)
    assert code == INVALID and "volume_capability" in detail
    code, detail = n.stage(vol, context={"uid": "-1"})
    assert code == INVALID and "volume_context.uid" in detail
    code, detail = n.stage(vol, cap=n.cap(group="staff"))
    assert code == INVALID and "volume_mount_group" in detail


def test_missing_secrets_are_named_and_values_never_echoed(node):
    n = node()
    vol = vol_id("secrets")
    code, detail = n.stage(vol, secrets={"secretAccessKey": CANARY})
    assert code == INVALID and "accessKeyID" in detail
    assert CANARY not in detail
    code, detail = n.stage(vol, secrets={"accessKeyID": CANARY})
    assert code == INVALID and "secretAccessKey" in detail
    assert CANARY not in detail
    code, detail = n.stage(vol, secrets={"accessKeyID": AK,
                                         "secretAccessKey": CANARY + "\n"})
    assert code == INVALID and CANARY not in detail
    assert CANARY not in n.running.log()


def test_secrets_never_reach_argv_environ_or_logs(node):
    n = node()
    vol = vol_id("canary")
    ok(n.stage(vol))
    sup, worker = n.daemon_pids(vol)
    for pid in (sup, worker):
        for what in ("cmdline", "environ"):
            data = Path(f"/proc/{pid}/{what}").read_bytes()
            assert CANARY.encode() not in data, what
            assert SK.encode() not in data.split(b"\0"), what
            assert f"secretAccessKey={SK}".encode() not in data
    d = n.cache_dir(vol)
    creds = d / "credentials"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert CANARY in creds.read_text()  # it is where it should be
    for f in d.iterdir():
        if f.is_file() and f.name != "credentials":
            assert CANARY.encode() not in f.read_bytes(), f.name
    ok(n.unstage(vol))
    assert CANARY not in n.running.log()


# ---- the plugin and the daemon dying ---------------------------------------


def test_a_killed_plugin_leaves_mounts_serving_and_a_new_one_unstages(node,
                                                                      s3):
    n = node()
    vol = vol_id("plugin-kill")
    ok(n.stage(vol))
    target = n.target(vol)
    ok(n.publish(vol, target))
    (Path(target) / "before").write_text("1\n")
    n.restart()  # kill -9, then a new plugin
    (Path(target) / "after").write_text("2\n")
    assert (Path(target) / "before").read_text() == "1\n"
    r = ok(n.stats(vol, target))
    assert not r.volume_condition.abnormal
    ok(n.publish(vol, target))  # the new plugin knows it is published
    ok(n.unpublish(vol, target))
    ok(n.unstage(vol))
    p = prefix_of(vol)
    assert {f"{p}/before", f"{p}/after"} <= keys(s3, p + "/")


def test_volume_condition_is_abnormal_once_the_daemon_is_gone(node, s3):
    n = node()
    vol = vol_id("dead")
    ok(n.stage(vol))
    target = n.target(vol)
    ok(n.publish(vol, target))
    r = ok(n.stats(vol, target))
    assert not r.volume_condition.abnormal
    (Path(target) / "unsaved").write_text("still in the cache\n")
    sup, worker = n.daemon_pids(vol)
    os.kill(sup, signal.SIGKILL)
    os.kill(worker, signal.SIGKILL)
    for pid in (sup, worker):
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(0.02)
    subprocess.run(["umount", "-l", n.staging(vol)], check=True)
    for path in (target, n.staging(vol)):
        r = ok(n.stats(vol, path))
        assert r.volume_condition.abnormal
        assert "not running" in r.volume_condition.message
    ok(n.unpublish(vol, target))
    # unstage runs the daemon once more so that nothing stays behind
    ok(n.unstage(vol))
    p = prefix_of(vol)
    assert f"{p}/unsaved" in keys(s3, p + "/")


def test_stats_of_a_path_that_is_not_the_volume_is_not_found(node, tmp_path):
    n = node()
    vol = vol_id("stats-nf")
    ok(n.stage(vol))
    code, detail = n.stats(vol, str(tmp_path))
    assert code == NOT_FOUND and "volume_path" in detail
    code, detail = n.stats(vol_id("stats-other"), n.staging(vol))
    assert code == NOT_FOUND
    ok(n.unstage(vol))


# ---- expansion and the mount group -----------------------------------------


def test_expand_applies_the_new_quota_live(node):
    n = node()
    vol = vol_id("expand")
    ok(n.stage(vol, context={"capacity": str(2 * MiB)}))
    target = n.target(vol)
    ok(n.publish(vol, target))
    with pytest.raises(OSError) as e:
        fsync_file(Path(target) / "big", b"x" * (3 * MiB))
    assert e.value.errno == errno.ENOSPC
    r = ok(n.expand(vol, target, 8 * MiB))
    assert r.capacity_bytes == 8 * MiB
    fsync_file(Path(target) / "big", b"x" * (3 * MiB))
    b = [u for u in ok(n.stats(vol, target)).usage
         if u.unit == n.pb.VolumeUsage.BYTES][0]
    assert b.total == 8 * MiB
    ok(n.expand(vol, target, 8 * MiB))  # again: the same
    req = n.pb.NodeExpandVolumeRequest(
        volume_id=vol, volume_path=target,
        capacity_range=n.pb.CapacityRange(required_bytes=9 * MiB,
                                          limit_bytes=8 * MiB))
    code, _ = status_of(n.p.NodeExpandVolume, req, timeout=10)
    assert code == grpc.StatusCode.OUT_OF_RANGE
    ok(n.unpublish(vol, target))
    ok(n.unstage(vol))


def test_volume_mount_group_owns_the_root_and_unowned_objects(node, s3):
    n = node()
    vol = vol_id("group")
    p = prefix_of(vol)
    s3.put_object(Bucket=BUCKET, Key=f"{p}/from-another-tool.txt",
                  Body=b"no owner headers\n")
    ok(n.stage(vol, cap=n.cap(group="4242"),
                context={"mode": "2770", "uid": "1000"}))
    target = n.target(vol)
    ok(n.publish(vol, target, cap=n.cap(group="4242")))
    root = os.stat(target)
    assert root.st_gid == 4242 and root.st_uid == 1000
    assert stat.S_IMODE(root.st_mode) == 0o2770
    assert os.stat(Path(target) / "from-another-tool.txt").st_gid == 4242
    # the same stage with another group is a different staging
    code, _ = n.stage(vol, cap=n.cap(group="4343"),
                      context={"mode": "2770", "uid": "1000"})
    assert code == EXISTS
    ok(n.unpublish(vol, target))
    ok(n.unstage(vol))


def test_node_capabilities_are_all_advertised(node):
    n = node()
    caps = {c.rpc.type for c in n.p.NodeGetCapabilities(
        n.pb.NodeGetCapabilitiesRequest(), timeout=5).capabilities}
    t = n.pb.NodeServiceCapability.RPC
    assert caps == {t.STAGE_UNSTAGE_VOLUME, t.GET_VOLUME_STATS,
                    t.EXPAND_VOLUME, t.VOLUME_CONDITION,
                    t.VOLUME_MOUNT_GROUP}
