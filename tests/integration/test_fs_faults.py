"""test_fs_faults.py: the mount while S3 is out of reach.

The local Swift is stopped mid-workload and started again. While it is
down, cached reads work, writes are accepted (into the cache), and fsync
under --durability s3 returns EIO once --s3-timeout has passed, keeping the
data. Once Swift is back, everything reaches S3 and nothing is lost. Run
under `eval "$(hack/s3-local.sh env)"`.
"""

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from s3util import body, skip_unless_s3
from tierfs_mount import Mount

skip_unless_s3()

REPO = Path(__file__).resolve().parents[2]


def swift(action):
    subprocess.run([str(REPO / "hack" / "s3-local.sh"), action], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)


def test_s3_out_of_reach_then_back_loses_nothing(volume, s3, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "200ms", "--s3-timeout", "3s",
              "--reconcile-interval", "0", "--snapshot-interval", "0")
    root = Path(m.mountpoint)
    try:
        cached = os.urandom(300_000)
        (root / "cached").write_bytes(cached)
        fd = os.open(root / "cached", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        swift("stop")
        try:
            # reads of what the cache holds, and writes, go on
            assert (root / "cached").read_bytes() == cached
            later = os.urandom(2_000_000)
            (root / "written-while-down").write_bytes(later)
            (root / "dir").mkdir()
            (root / "dir" / "small").write_text("small\n")
            # fsync cannot reach S3: EIO after --s3-timeout, data kept
            fd = os.open(root / "written-while-down", os.O_RDONLY)
            t0 = time.monotonic()
            with pytest.raises(OSError) as e:
                os.fsync(fd)
            os.close(fd)
            assert e.value.errno == errno.EIO
            assert time.monotonic() - t0 < 60
            assert (root / "written-while-down").read_bytes() == later
        finally:
            swift("start")
        # back: the flusher sends everything; fsync now succeeds
        fd = os.open(root, os.O_RDONLY)
        deadline = time.monotonic() + 120
        while True:
            try:
                os.fsync(fd)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(1)
        os.close(fd)
        assert body(s3, f"{prefix}/written-while-down") == later
        assert body(s3, f"{prefix}/dir/small") == b"small\n"
        assert body(s3, f"{prefix}/cached") == cached
    finally:
        assert m.unmount() == 0, m.output()


def test_a_full_cache_disk_gives_enospc_and_the_mount_recovers(
        volume, s3, tmp_path):
    """The cache dir on a 48 MiB tmpfs, and a 100 MiB file written into it:
    the write fails with ENOSPC, the daemon and its metadata store go on,
    and once uploads let clean data be evicted, writes work again."""
    url, prefix = volume
    small = tmp_path / "small-disk"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs",
                    str(small)], check=True)
    m, log = None, ""
    try:
        m = Mount(url, str(tmp_path / "m"), str(small / "c"),
                  "--upload-delay", "200ms")
        root = Path(m.mountpoint)
        (root / "before").write_bytes(b"saved before\n")
        fd = os.open(root / "before", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        with pytest.raises(OSError) as e:
            with open(root / "big", "wb") as f:
                for _ in range(100):
                    f.write(os.urandom(1 << 20))
                os.fsync(f.fileno())
        assert e.value.errno == errno.ENOSPC
        # the store still works: names, attributes, small files
        assert (root / "before").read_bytes() == b"saved before\n"
        deadline = time.monotonic() + 60
        while True:  # room comes back as uploads finish and data is evicted
            try:
                (root / "after").write_text("written after\n")
                fd = os.open(root / "after", os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
                break
            except OSError as err:
                assert err.errno == errno.ENOSPC
                assert time.monotonic() < deadline, m.output()
                time.sleep(0.5)
        os.chmod(root / "before", 0o600)
        (root / "big").unlink()
    finally:
        if m:
            rc = m.unmount()
            log = m.output()  # its file is on the small disk
            assert rc == 0, log
        subprocess.run(["umount", str(small)], check=False)
    assert body(s3, f"{prefix}/before") == b"saved before\n"
    assert body(s3, f"{prefix}/after") == b"written after\n"
    assert "disk is full" not in log
