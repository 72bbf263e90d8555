"""test_fs_lease.py: one writer per volume, through the lease in PREFIX/.tierfs/.

A second read-write mount of a volume (another cache dir: another node) is
refused while the first holds the lease; a read-only one is not. A clean
unmount frees the volume. After a node dies, taking over is explicit
(--take-over), and a holder that finds its lease taken stops writing.
Run under `eval "$(hack/s3-local.sh env)"`.
"""

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from s3util import BUCKET, body, keys, skip_unless_s3
from tierfs_mount import TIERFS, Mount

skip_unless_s3()


def try_mount(url, tmp_path, name, *extra):
    """`tierfs mount` in the background (not -f); returns the CompletedProcess."""
    (tmp_path / name).mkdir(exist_ok=True)
    return subprocess.run([TIERFS, "mount", url, str(tmp_path / name),
                           "--cache-dir", str(tmp_path / (name + "-cache")),
                           *extra], capture_output=True, text=True, timeout=60)


def test_a_second_writer_is_refused_until_the_first_unmounts(
        volume, s3, tmp_path):
    url, prefix = volume
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"))
    try:
        (Path(a.mountpoint) / "f").write_text("from a\n")
        assert f"{prefix}/.tierfs/lease" in keys(s3, prefix + "/")
        r = try_mount(url, tmp_path, "b")
        assert r.returncode != 0
        assert "mounted read-write elsewhere" in r.stderr
        assert "--take-over" in r.stderr
        assert not os.path.ismount(tmp_path / "b")
        # readers are welcome
        ro = Mount(url, str(tmp_path / "ro"), str(tmp_path / "cro"),
                   "--read-only")
        try:
            with pytest.raises(OSError) as e:
                (Path(ro.mountpoint) / "g").write_text("no\n")
            assert e.value.errno == errno.EROFS
        finally:
            assert ro.unmount() == 0, ro.output()
    finally:
        assert a.unmount() == 0, a.output()
    assert f"{prefix}/.tierfs/lease" not in keys(s3, prefix + "/")
    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"))
    try:
        assert (Path(b.mountpoint) / "f").read_text() == "from a\n"
    finally:
        assert b.unmount() == 0, b.output()


def test_after_a_node_dies_taking_over_is_explicit_and_fences_the_old_one(
        volume, s3, tmp_path):
    url, prefix = volume
    old = Mount(url, str(tmp_path / "old"), str(tmp_path / "cold"),
                "--lease-interval", "500ms", "--upload-delay", "100ms")
    new = None
    try:
        (Path(old.mountpoint) / "f").write_text("old\n")
        time.sleep(1)  # uploaded
        # the old node looks dead (it still runs: the worst case)
        r = try_mount(url, tmp_path, "new")
        assert r.returncode != 0 and "--take-over" in r.stderr
        new = Mount(url, str(tmp_path / "new"), str(tmp_path / "cnew"),
                    "--take-over")
        assert "took the write lease over" in new.output()
        (Path(new.mountpoint) / "f").write_text("new\n")
        fd = os.open(Path(new.mountpoint) / "f", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        # within a renewal or two the old one knows it is fenced
        deadline = time.monotonic() + 15
        while "write lease was taken over" not in old.output():
            assert time.monotonic() < deadline, old.output()
            time.sleep(0.2)
        with pytest.raises(OSError) as e:
            (Path(old.mountpoint) / "late").write_text("late\n")
        assert e.value.errno == errno.EROFS
        time.sleep(1)
        assert body(s3, f"{prefix}/f") == b"new\n"
        assert f"{prefix}/late" not in keys(s3, prefix + "/")
    finally:
        if new:
            assert new.unmount() == 0, new.output()
        old.proc.send_signal(signal.SIGKILL)
        old.unmount()


@pytest.mark.parametrize("fg", [[], ["-f"]], ids=["background", "foreground"])
def test_a_racing_node_whose_lease_lands_last_wins_and_nothing_is_sent(
        volume, s3, tmp_path, fg):
    """A mount PUTs the lease, loads the volume while a racing PUT may
    land, then reads the lease back before it writes anything to S3. Here
    the racing node's PUT lands in that window (held open 3 s by fault
    injection): the mount is refused, names the other node, leaves the
    lease alone, and does not send the file a crash left dirty; in the
    background, where the mount command reports for the worker, and in
    the foreground (-f), where the worker says it itself."""
    url, prefix = volume
    args = (str(tmp_path / "m"), str(tmp_path / "c"), "--upload-delay", "10m")
    m = Mount(url, *args)
    (Path(m.mountpoint) / "pending").write_text("not sent yet\n")
    m.kill_daemon()  # dirty in the cache; the lease is still this node's
    other = "f" * 32
    env = dict(os.environ, TIERFS_DEBUG_LEASE_CONFIRM_PAUSE_MS="3000")
    mount = subprocess.Popen([TIERFS, "mount", url, *args[:1],
                              "--cache-dir", args[1], *args[2:], *fg], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    lease = f"{prefix}/.tierfs/lease"
    deadline = time.monotonic() + 30
    # the killed daemon's lease is this node's too: wait for the new PUT
    while f"pid={mount.pid}\n" not in body(s3, lease).decode():
        assert time.monotonic() < deadline, "the mount never claimed the lease"
        time.sleep(0.05)
    racer = (f"owner={other}\nhost=racing-node\npid=1\n"
             f"renewed={int(time.time())}\n").encode()
    s3.put_object(Bucket=BUCKET, Key=lease, Body=racer)
    try:
        out, err = mount.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # -f: serving, which it must not
        err = "still running after 60 s"
    if os.path.ismount(tmp_path / "m"):  # it should not have mounted
        subprocess.run([TIERFS, "unmount", args[0], "--cache-dir", args[1]],
                       capture_output=True, timeout=120)
        mount.kill()
        mount.wait()
        pytest.fail(f"mounted despite the racing lease: {err}")
    assert mount.returncode != 0
    assert "mounted read-write elsewhere" in err, err
    assert "racing-node" in err, err
    time.sleep(1)
    assert body(s3, lease) == racer
    assert f"{prefix}/pending" not in keys(s3, prefix + "/")


def put_grant(s3, prefix, host):
    """What ControllerPublishVolume writes: the lease granted to host."""
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/.tierfs/lease",
                  Body=f"owner=grant\nhost={host}\nrenewed={int(time.time())}\n"
                  .encode())


def test_a_grant_to_this_node_is_taken_and_one_to_another_is_refused(
        volume, s3, tmp_path):
    url, prefix = volume
    put_grant(s3, prefix, "node-b")
    r = try_mount(url, tmp_path, "a", "--node", "node-a")
    assert r.returncode != 0
    assert "granted to node 'node-b'" in r.stderr
    assert not os.path.ismount(tmp_path / "a")
    m = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"),
              "--node", "node-b")
    try:
        lease = body(s3, f"{prefix}/.tierfs/lease").decode()
        assert "host=node-b\n" in lease
        assert "owner=grant" not in lease  # taken: now a holder's lease
        (Path(m.mountpoint) / "f").write_text("b\n")
    finally:
        assert m.unmount() == 0, m.output()
    assert f"{prefix}/.tierfs/lease" not in keys(s3, prefix + "/")


def test_a_grant_to_another_node_fences_a_running_holder(volume, s3,
                                                          tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"),
              "--node", "node-a", "--lease-interval", "300ms")
    try:
        put_grant(s3, prefix, "node-b")
        deadline = time.monotonic() + 15
        while "write lease was taken over" not in m.output():
            assert time.monotonic() < deadline, m.output()
            time.sleep(0.2)
        assert "granted to node 'node-b'" in m.output()
    finally:
        m.proc.send_signal(signal.SIGKILL)
        m.unmount()


def test_no_lease_mounts_write_side_by_side_and_the_last_writer_wins(
        volume, s3, tmp_path):
    url, prefix = volume
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"), "--no-lease",
              "--upload-delay", "100ms")
    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"), "--no-lease",
              "--upload-delay", "100ms")
    try:
        assert f"{prefix}/.tierfs/lease" not in keys(s3, prefix + "/")
        for m, text in ((a, "from a\n"), (b, "from b\n")):
            p = Path(m.mountpoint) / "shared"
            p.write_text(text)
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        assert body(s3, f"{prefix}/shared") == b"from b\n"
    finally:
        assert a.unmount() == 0, a.output()
        assert b.unmount() == 0, b.output()


def test_no_lease_with_take_over_is_refused(volume, tmp_path):
    url, _ = volume
    r = try_mount(url, tmp_path, "a", "--no-lease", "--take-over")
    assert r.returncode == 2 and "--no-lease" in r.stderr
