"""test_fs_faults.py: the mount while S3 is out of reach, or its cache disk full.

The local Swift is stopped for two minutes mid-workload and started again.
While it is down, cached reads work, writes are accepted into the cache
until its disk is full (then ENOSPC), and fsync under --durability s3
returns EIO once --s3-timeout has passed, keeping the data. Once Swift is
back, everything reaches S3 and nothing is lost. Run
under `eval "$(hack/s3-local.sh env)"`.
"""

import errno
import mmap
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


# How long Swift stays down; the issue asks for two minutes.
OUTAGE_S = float(os.environ.get("TIERFS_OUTAGE_S", "120"))


@pytest.fixture
def small_disk(tmp_path):
    """small_disk("48m"): a tmpfs of that size for a cache dir, unmounted
    after the test (after the test's own unmount of tierfs)."""
    made = []

    def make(size):
        d = tmp_path / f"small-disk-{len(made)}"
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                        "tmpfs", str(d)], check=True)
        made.append(d)
        return d

    yield make
    for d in made:
        subprocess.run(["umount", "-l", str(d)], check=False)


def read_direct(path):
    """path's bytes read with O_DIRECT: what tierfs serves, never the
    kernel's page cache (which may or may not still hold them)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        size = os.fstat(fd).st_size
        buf = mmap.mmap(-1, max(4096, (size + 4095) // 4096 * 4096))
        got = 0
        while got < size:
            n = os.preadv(fd, [memoryview(buf)[got:]], got)
            if n == 0:
                break
            got += n
        return bytes(buf[:got])
    finally:
        os.close(fd)


def fill_until_full(path, start=0):
    """Writes random MiBs into path with O_DIRECT from start on until
    the cache disk refuses one with ENOSPC; returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT)
    chunk = mmap.mmap(-1, 1 << 20)
    try:
        while True:
            chunk[:] = os.urandom(1 << 20)
            os.pwrite(fd, chunk, start + written)
            written += 1 << 20
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return written


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_s3_out_of_reach_for_two_minutes_then_back_loses_nothing(
        volume, s3, tmp_path, small_disk):
    """Swift stopped for OUTAGE_S seconds under a workload, with the cache
    dir on a 64 MiB tmpfs: cached reads go on, writes are accepted until
    the cache disk is full and then get ENOSPC (nothing else), fsync gives
    EIO after --s3-timeout, and once Swift is back every acknowledged
    write reaches S3 and the disk frees up again."""
    url, prefix = volume
    small = small_disk("64m")
    m = None
    try:
        m = Mount(url, str(tmp_path / "m"), str(small / "c"),
                  "--upload-delay", "200ms", "--s3-timeout", "5s",
                  "--reconcile-interval", "0", "--snapshot-interval", "0")
        root = Path(m.mountpoint)
        cached = os.urandom(300_000)
        (root / "cached").write_bytes(cached)
        fsync_path(root / "cached")
        (root / "dir").mkdir()
        swift("stop")
        acked = {}
        try:
            t0 = time.monotonic()
            # fsync cannot reach S3: EIO once --s3-timeout has passed
            (root / "dir" / "small").write_text("small\n")
            acked["dir/small"] = b"small\n"
            with pytest.raises(OSError) as e:
                fsync_path(root / "dir" / "small")
            assert e.value.errno == errno.EIO
            assert time.monotonic() - t0 < 60
            full_at, n = None, 0
            while time.monotonic() - t0 < OUTAGE_S:
                # from the cache dir: clean data stays while S3 is away
                assert read_direct(root / "cached") == cached
                if full_at is None:
                    name, data = f"w{n:03d}", os.urandom(1 << 20)
                    try:
                        (root / name).write_bytes(data)
                        acked[name] = data
                        n += 1
                        continue
                    except OSError as err:
                        # only a full cache disk stops the writes
                        assert err.errno == errno.ENOSPC, err
                        full_at = n
                # full: still ENOSPC (or room again), never another error
                try:
                    (root / "probe").write_bytes(b"p")
                except OSError as err:
                    assert err.errno == errno.ENOSPC, err
                time.sleep(1)
            assert full_at is not None and full_at >= 10, \
                f"the cache disk took only {n} MiB of writes"
            for name, data in acked.items():  # still readable, from cache
                assert (root / name).read_bytes() == data, name
        finally:
            swift("start")
        # back: the flusher sends everything; fsync now succeeds
        deadline = time.monotonic() + 180
        while True:
            try:
                fsync_path(root)
                break
            except OSError:
                assert time.monotonic() < deadline, m.output()
                time.sleep(1)
        for name, data in acked.items():
            fsync_path(root / name)
            assert body(s3, f"{prefix}/{name}") == data, name
        assert body(s3, f"{prefix}/cached") == cached
        # uploaded data is clean and can be evicted: writes work again
        deadline = time.monotonic() + 60
        while True:
            try:
                (root / "after").write_bytes(b"after\n")
                fsync_path(root / "after")
                break
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                assert time.monotonic() < deadline, m.output()
                time.sleep(0.5)
        assert body(s3, f"{prefix}/after") == b"after\n"
    finally:
        if m:
            rc = m.unmount()
            log = m.output()
            assert rc == 0, log


@pytest.mark.parametrize("mode", [(), ("--no-passthrough",)],
                         ids=["default", "no-passthrough"])
def test_a_full_cache_disk_gives_enospc_and_the_mount_recovers(
        volume, s3, tmp_path, small_disk, mode):
    """The cache dir on a 48 MiB tmpfs, and a 100 MiB file written into it:
    the write fails with ENOSPC, the daemon and its metadata store go on,
    and once uploads let clean data be evicted, writes work again. Also
    with no passthrough, as on a kernel or cache disk that has none: every
    write then goes through the daemon."""
    url, prefix = volume
    small = small_disk("48m")
    m, log = None, ""
    try:
        m = Mount(url, str(tmp_path / "m"), str(small / "c"),
                  "--upload-delay", "200ms", *mode)
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
                fsync_path(root / "after")  # closes it even on ENOSPC
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
    assert body(s3, f"{prefix}/before") == b"saved before\n"
    assert body(s3, f"{prefix}/after") == b"written after\n"
    assert "disk is full" not in log


def test_a_full_cache_disk_still_reads_what_it_has_no_room_for(
        volume, s3, bucket, tmp_path, small_disk):
    """A file in S3 read through a mount whose cache disk (a 48 MiB tmpfs)
    a dirty file has filled: no room is left to fetch its bytes into, so
    each read puts them together in memory. Buffered and direct reads, of
    one page and of many, all return the object's bytes."""
    url, prefix = volume
    data = os.urandom((6 << 20) + 1234)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/cold", Body=data)
    disk = small_disk("48m")
    m = None
    try:
        m = Mount(url, str(tmp_path / "m"), str(disk / "c"),
                  "--upload-delay", "10m")
        root = Path(m.mountpoint)
        assert fill_until_full(root / "fill") >= 16 << 20
        with open(root / "cold", "rb") as f:  # the first read: one page
            assert f.read(4096) == data[:4096]
            assert f.read() == data[4096:]
        assert read_direct(root / "cold") == data
        with open(root / "cold", "rb") as f:
            f.seek(5 << 20)
            assert f.read(1 << 20) == data[5 << 20:6 << 20]
    finally:
        if m:
            rc = m.unmount()
            assert rc == 0, m.output()


def test_a_full_cache_disk_still_uploads_a_file_with_a_hole(
        volume, s3, bucket, tmp_path, small_disk):
    """A file already in S3 grows past a hole until the cache disk (a
    48 MiB tmpfs) is full. Its upload must fetch the hole's bytes first;
    with no room for them the upload failed with ENOSPC forever, so the
    dirty data could never be evicted and the disk never freed. Uploads
    may now use part of the disk's reserve."""
    url, prefix = volume
    small = small_disk("48m")
    m, log = None, ""
    try:
        m = Mount(url, str(tmp_path / "m"), str(small / "c"),
                  "--upload-delay", "10m")
        path = Path(m.mountpoint) / "holey"
        with open(path, "wb") as f:  # in S3: its first MiB
            f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        # from 2 MiB on, until the disk is full: [1, 2) MiB a hole
        written = fill_until_full(path, 2 << 20)
        assert written >= 8 << 20
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # ENOSPC for good before the fix
        finally:
            os.close(fd)
        size = (2 << 20) + written
        got = s3.head_object(Bucket=bucket,
                             Key=f"{prefix}/holey")["ContentLength"]
        assert got == size
        data = path.read_bytes()
        assert data[1 << 20:2 << 20] == bytes(1 << 20)
    finally:
        if m:
            rc = m.unmount()
            log = m.output()
            assert rc == 0, log


def test_a_full_cache_disk_uploads_files_whose_bytes_it_cannot_fetch(
        volume, s3, tmp_path, small_disk):
    """Two files in S3 (24 MiB, sent in two parts, and 8 MiB, in one PUT),
    a new cache dir on a 48 MiB tmpfs, 4 KiB rewritten in each, then the
    disk filled by another dirty file. Uploading each edit needs most of
    its file's other bytes, which the cache lacks and has no room for
    (more than the reserve uploads may use): before, fsync failed with
    ENOSPC for good and the disk could never free itself. Now those bytes
    are put together in memory."""
    url, prefix = volume
    big, small_file = os.urandom(24 << 20), os.urandom(8 << 20)
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c0"))
    try:
        (Path(m.mountpoint) / "big").write_bytes(big)
        (Path(m.mountpoint) / "small").write_bytes(small_file)
    finally:
        assert m.unmount() == 0, m.output()
    disk = small_disk("48m")
    m, log = None, ""
    try:
        m = Mount(url, str(tmp_path / "m"), str(disk / "c"),
                  "--upload-delay", "10m")
        root = Path(m.mountpoint)
        want = {"big": bytearray(big), "small": bytearray(small_file)}
        buf = mmap.mmap(-1, 4096)
        for name, data in want.items():
            buf[:] = os.urandom(4096)
            fd = os.open(root / name, os.O_WRONLY | os.O_DIRECT)
            try:
                os.pwrite(fd, buf, 4096)
            finally:
                os.close(fd)
            data[4096:8192] = buf[:]
        assert fill_until_full(root / "fill") >= 16 << 20
        for name in want:
            fsync_path(root / name)  # EIO for good before the fix
            assert body(s3, f"{prefix}/{name}") == bytes(want[name]), name
        fsync_path(root / "fill")
        assert (root / "big").read_bytes() == bytes(want["big"])
    finally:
        if m:
            rc = m.unmount()
            log = m.output()
            assert rc == 0, log
    assert "put together in memory" in log


def test_a_server_that_ignores_range_cannot_overwrite_cached_writes(
        volume, s3, tmp_path):
    """A ranged GET answered 200 with the whole object (a server or a proxy
    that ignores Range) is refused: written at the range's offset, it would
    run over what the cache holds past the range, here a write not yet
    uploaded. The read fails with EIO; the write reaches S3 intact."""
    import boto3
    from faultproxy import FaultProxy
    url, prefix = volume
    mib = 1 << 20
    data = bytearray(os.urandom(3 * mib))
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"))
    try:
        (Path(a.mountpoint) / "f").write_bytes(data)
    finally:
        assert a.unmount() == 0, a.output()

    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    try:
        # the proxy learns the whole object's bytes
        via = boto3.client("s3", endpoint_url=proxy.url)
        bucket = url.split("/")[2]
        via.get_object(Bucket=bucket, Key=f"{prefix}/f")["Body"].read()
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "cm"),
                  "--durability", "local", "--upload-delay", "600s",
                  env={"AWS_ENDPOINT_URL": proxy.url})
        try:
            p = Path(m.mountpoint) / "f"
            edit = os.urandom(4096)
            fd = os.open(p, os.O_WRONLY)
            os.pwrite(fd, edit, 2 * mib)
            os.fsync(fd)  # in the cache file, dirty
            os.close(fd)
            data[2 * mib:2 * mib + 4096] = edit
            proxy.add_rule("whole", method="GET", path=f"/{prefix}/f", count=100)
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 4096)
            try:
                with pytest.raises(OSError) as e:
                    os.preadv(fd, [buf], 1 * mib)
                assert e.value.errno == errno.EIO
            finally:
                os.close(fd)
                proxy.clear_rules()
        finally:
            assert m.unmount() == 0, m.output()
        assert any(e["action"] == "whole" for e in list(proxy.log))
    finally:
        proxy.stop()
    got = body(s3, f"{prefix}/f")
    assert got[2 * mib:2 * mib + 4096] == edit
    assert got == bytes(data)
