"""test_fs_mount_cli.py: `tierfs mount` refuses bad arguments by name and mounts nothing."""

import os
import stat
import subprocess

import pytest

from s3util import BUCKET, skip_unless_s3
from tierfs_mount import TIERFS, is_mounted

skip_unless_s3(fuse=False)  # most tests mount nothing: they must refuse first


def run(*args, env=None):
    child = dict(os.environ)
    child.update(env or {})
    return subprocess.run([TIERFS, "mount", *args], env=child,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("extra,named", [
    (["--capacity", "10Q"], "--capacity"),
    (["--cache-size", "-1"], "--cache-size"),
    (["--uid", "abc"], "--uid"),
    (["--file-mode", "0999"], "--file-mode"),
    (["--durability", "maybe"], "--durability"),
    (["--upload-delay", "2 weeks"], "--upload-delay"),
    (["--endpoint", "ftp://x"], "endpoint"),
])
def test_bad_argument_is_named_and_nothing_is_mounted(tmp_path, extra, named):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run(f"s3://{BUCKET}/cli", str(mnt), "--cache-dir", str(tmp_path / "c"),
            *extra)
    assert r.returncode == 2, r.stderr
    assert named in r.stderr
    assert not is_mounted(str(mnt))
    assert not (tmp_path / "c").exists()  # nothing created before validation


def test_bad_volume_and_mountpoint_are_named(tmp_path):
    r = run("s3://AB/x", str(tmp_path), "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 2 and "volume" in r.stderr
    r = run(f"s3://{BUCKET}/a/../b", str(tmp_path), "--cache-dir",
            str(tmp_path / "c"))
    assert r.returncode == 2 and "prefix" in r.stderr
    r = run(f"s3://{BUCKET}/x", str(tmp_path / "missing"), "--cache-dir",
            str(tmp_path / "c"))
    assert r.returncode == 2 and "MOUNTPOINT" in r.stderr
    r = run(f"s3://{BUCKET}/x", str(tmp_path))
    assert r.returncode == 2 and "--cache-dir" in r.stderr


def test_credentials_come_from_a_0600_file_never_argv(tmp_path):
    creds = tmp_path / "creds"
    creds.write_text(f"accessKeyID={os.environ['AWS_ACCESS_KEY_ID']}\n"
                     f"secretAccessKey={os.environ['AWS_SECRET_ACCESS_KEY']}\n")
    os.chmod(creds, 0o644)
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run(f"s3://{BUCKET}/cli", str(mnt), "--cache-dir", str(tmp_path / "c"),
            "--credentials-file", str(creds), env=env)
    assert r.returncode == 2 and "chmod 600" in r.stderr
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in r.stderr
    os.chmod(creds, 0o600)
    r = run(f"s3://{BUCKET}/cli", str(mnt), "--cache-dir", str(tmp_path / "c"),
            "--credentials-file", str(creds), env=env)
    try:
        assert r.returncode == 0, r.stderr
        assert is_mounted(str(mnt))  # mounted when the command returned
        log = (tmp_path / "c" / "tierfs.log").read_text()
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in log
        assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)


@pytest.mark.parametrize("extra", [[], ["--read-only"], ["--no-lease"]])
def test_a_missing_bucket_is_named_and_nothing_is_mounted(tmp_path, extra):
    """A read-write mount learns of it from the lease's requests (it sends
    no HEAD first); every kind says it the same way."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run("s3://tierfs-no-such-bucket/cli", str(mnt), "--cache-dir",
            str(tmp_path / "c"), *extra)
    assert r.returncode == 1
    assert "bucket 'tierfs-no-such-bucket'" in r.stderr, r.stderr
    assert "404" in r.stderr or "NoSuchBucket" in r.stderr, r.stderr
    assert not is_mounted(str(mnt))


@pytest.mark.parametrize("extra", [[], ["--read-only"]])
def test_wrong_secret_fails_before_mounting_with_or_without_a_lease(
        tmp_path, extra):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run(f"s3://{BUCKET}/cli", str(mnt), "--cache-dir", str(tmp_path / "c"),
            *extra, env={"AWS_SECRET_ACCESS_KEY": "wrong-secret-value"})
    assert r.returncode == 1
    assert "SignatureDoesNotMatch" in r.stderr or "Forbidden" in r.stderr, r.stderr
    assert "wrong-secret-value" not in r.stderr
    assert not is_mounted(str(mnt))


def test_a_cache_dir_serves_one_daemon_at_a_time(tmp_path, volume):
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    url, _ = volume
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    cache = str(tmp_path / "c")
    r = run(url, str(a), "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    try:
        r2 = run(url, str(b), "--cache-dir", cache, "--read-only")
        assert r2.returncode != 0
        assert "is in use by another tierfs" in r2.stderr
        assert not is_mounted(str(b))
    finally:
        u = subprocess.run([TIERFS, "unmount", str(a), "--cache-dir", cache],
                           capture_output=True, text=True, timeout=120)
        assert u.returncode == 0, u.stderr
    # free again once the first daemon is gone
    r3 = run(url, str(b), "--cache-dir", cache)
    assert r3.returncode == 0, r3.stderr
    u = subprocess.run([TIERFS, "unmount", str(b), "--cache-dir", cache],
                       capture_output=True, text=True, timeout=120)
    assert u.returncode == 0, u.stderr
