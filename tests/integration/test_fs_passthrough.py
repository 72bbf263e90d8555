"""test_fs_passthrough.py: files the cache holds whole are served by the
kernel itself (FUSE passthrough), and nothing they write is lost.

On a volume without a capacity, tierfs opens such a file in passthrough:
the kernel reads and writes the cache file with no request to the worker.
The worker learns of the writes afterwards (the cache file's size and
times), so these tests check what a user sees of them: stat, the bytes
in S3 after close and fsync, and the same after the worker or the whole
daemon is killed while the file is open. Whether an open is in
passthrough shows by stopping the worker (SIGSTOP): I/O in passthrough
still completes, I/O through the worker waits for it. Run under
`eval "$(hack/s3-local.sh env)"`; needs Linux >= 6.9 and root.
"""

import errno
import mmap
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from faultproxy import FaultProxy
from s3util import body, skip_unless_s3
from tierfs_mount import Mount, wait_for

skip_unless_s3()


ARGS = ("--upload-delay", "100ms", "--durability", "local")
MiB = 1 << 20


def mounted(volume, tmp_path, *extra):
    url, _ = volume
    return Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *ARGS,
                 *extra)


def wait_stopped(pid):
    """Until every thread of pid has stopped: kill() returns before, and
    a thread may still take a request meanwhile."""
    deadline = time.monotonic() + 10
    while True:
        states = []
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that ended
        if all(s in ("T", "t") for s in states):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.01)


def served_by_kernel(m, io, wait=3.0):
    """Runs io() with the worker stopped: True when it completed (the
    kernel served it), False when it waited for the worker."""
    (worker,) = m.workers()
    done = threading.Event()
    err = []

    def run():
        try:
            io()
        except OSError as e:  # pragma: no cover - reported below
            err.append(e)
        done.set()

    os.kill(worker, signal.SIGSTOP)
    try:
        wait_stopped(worker)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        finished = done.wait(wait)
    finally:
        os.kill(worker, signal.SIGCONT)
    t.join(30)
    assert not err, err
    return finished


def wait_for_object(s3, key, want, timeout=30):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        try:
            got = body(s3, key)
        except Exception:  # not there yet
            got = None
        if got == want:
            return
        time.sleep(0.2)
    assert got == want, (key, None if got is None else len(got), len(want))


def test_a_whole_cached_file_is_read_and_written_by_the_kernel(
        volume, s3, tmp_path):
    _, prefix = volume
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "f"
        p.write_bytes(b"a" * MiB)
        fd = os.open(p, os.O_RDWR)
        try:
            assert served_by_kernel(m, lambda: os.pwrite(fd, b"b" * 4096,
                                                         8192))
            assert served_by_kernel(m, lambda: os.pread(fd, 4096, 8192))
            assert os.pread(fd, 4096, 8192) == b"b" * 4096
        finally:
            os.close(fd)
        want = b"a" * 8192 + b"b" * 4096 + b"a" * (MiB - 12288)
        assert p.read_bytes() == want
        wait_for_object(s3, f"{prefix}/f", want)
    finally:
        assert m.unmount() == 0, m.output()


def test_no_passthrough_and_a_capacity_keep_io_in_the_worker(volume,
                                                            tmp_path):
    """--no-passthrough, and a capacity (no write may pass it unseen):
    a direct read waits for the worker."""
    for extra in ((), ("--no-passthrough",), ("--capacity", "64M")):
        m = mounted(volume, tmp_path, *extra)
        try:
            p = Path(m.mountpoint) / "f"
            p.write_bytes(b"a" * 4096)
            buf = mmap.mmap(-1, 4096)
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            try:
                kernel = served_by_kernel(
                    m, lambda: os.preadv(fd, [buf], 0), wait=1.0)
            finally:
                os.close(fd)
            assert kernel == (extra == ()), extra
            assert buf[:] == b"a" * 4096
        finally:
            assert m.unmount() == 0, m.output()


def test_stat_follows_writes_truncates_and_utime_of_an_open_file(
        volume, s3, tmp_path):
    _, prefix = volume
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "f"
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            before = os.stat(p)
            time.sleep(0.05)
            os.pwrite(fd, b"x" * 10000, 0)
            st = os.stat(p)
            assert st.st_size == 10000
            assert st.st_mtime_ns > before.st_mtime_ns
            assert os.fstat(fd).st_size == 10000
            # a listing carries sizes too
            assert [e.stat().st_size for e in os.scandir(m.mountpoint)
                    if e.name == "f"] == [10000]
            os.utime(p, ns=(1_000_000_000, 2_000_000_000))
            assert os.stat(p).st_mtime_ns == 2_000_000_000
            os.ftruncate(fd, 5000)
            assert os.stat(p).st_size == 5000
            os.pwrite(fd, b"y" * 100, 6000)  # past the end: a hole
            assert os.stat(p).st_size == 6100
            os.fsync(fd)
        finally:
            os.close(fd)
        want = b"x" * 5000 + b"\0" * 1000 + b"y" * 100
        assert p.read_bytes() == want
        wait_for_object(s3, f"{prefix}/f", want)
    finally:
        assert m.unmount() == 0, m.output()


def test_writes_while_uploads_run_all_reach_s3(volume, s3, tmp_path):
    """An upload that starts while the file is written must not leave
    later bytes marked as sent."""
    _, prefix = volume
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "log"
        want = bytearray()
        with open(p, "wb", buffering=0) as f:
            for i in range(60):
                chunk = (b"%06d" % i) * 2000
                f.write(chunk)
                want += chunk
                time.sleep(0.03)  # uploads (100 ms after a change) run
        assert p.read_bytes() == bytes(want)
        wait_for_object(s3, f"{prefix}/log", bytes(want))
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/log") == bytes(want)


def test_a_write_under_way_while_its_file_uploads_is_sent_after_it(
        volume, s3, tmp_path):
    """The kernel moves a file's mtime when a write begins, before it
    copies the bytes. An upload that read the file in between saw the new
    mtime and the old bytes; no later look saw a change, so the file was
    called clean and the write never reached S3. The write here copies
    from a mapping of another file whose bytes S3 (through the fault
    proxy) takes 3 s to give: it is under way while the flusher uploads.
    A file open for writing in passthrough is now called clean only by an
    upload no write can overlap (fsync), or once its writers are gone."""
    url, prefix = volume
    old, new = b"o" * 65536, b"n" * 65536
    s3.put_object(Bucket=url.split("/")[2], Key=f"{prefix}/src", Body=new)
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    m = None
    try:
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *ARGS,
                  env={"AWS_ENDPOINT_URL": proxy.url})
        dst = Path(m.mountpoint) / "dst"
        dst.write_bytes(old)  # whole in the cache: opened in passthrough
        wait_for_object(s3, f"{prefix}/dst", old)
        proxy.add_rule("delay:3000", method="GET", path=f"/{prefix}/src")
        # not in the cache: read through the worker, from S3
        with open(Path(m.mountpoint) / "src", "rb") as f:
            src = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        fd = os.open(dst, os.O_WRONLY)
        try:
            puts = len(proxy.requests(method="PUT", path=f"/{prefix}/dst"))
            writer = threading.Thread(target=os.pwrite, args=(fd, src, 0))
            writer.start()
            wait_for(lambda: len(proxy.requests(
                method="PUT", path=f"/{prefix}/dst")) > puts,
                "an upload meanwhile", every=0.01)
            assert writer.is_alive(), "the write ended before the upload"
            writer.join(30)
        finally:
            os.close(fd)
            src.close()
        assert dst.read_bytes() == new
    finally:
        if m:
            assert m.unmount() == 0, m.output()
        proxy.stop()
    assert body(s3, f"{prefix}/dst") == new


def test_mmap_writes_of_a_file_in_passthrough_reach_s3(volume, s3, tmp_path):
    _, prefix = volume
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "m"
        p.write_bytes(b"\0" * 65536)
        with open(p, "r+b") as f:
            mm = mmap.mmap(f.fileno(), 65536)
            mm[100:105] = b"hello"
            mm.flush()
            mm.close()
        want = b"\0" * 100 + b"hello" + b"\0" * (65536 - 105)
        assert p.read_bytes() == want
        wait_for_object(s3, f"{prefix}/m", want)
    finally:
        assert m.unmount() == 0, m.output()


def test_a_killed_worker_leaves_open_files_to_the_next_one(volume, s3,
                                                          tmp_path):
    """The kernel keeps writing an open file while its worker is replaced;
    the next worker knows the open (a new open of the file succeeds in
    the same mode, its cache file stays), and what was written before and
    after reaches S3 once it is closed."""
    _, prefix = volume
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "g"
        a, b, c = os.urandom(MiB), os.urandom(MiB), os.urandom(4096)
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.pwrite(fd, a, 0)
            m.kill_worker()
            os.pwrite(fd, b, MiB)
            assert os.fstat(fd).st_size == 2 * MiB
            with open(p, "rb") as again:  # another open, in passthrough
                assert again.read(MiB) == a
            os.pwrite(fd, c, 100)
            assert served_by_kernel(m, lambda: os.pwrite(fd, c, 100))
            time.sleep(0.5)  # the new worker uploads meanwhile
            m.kill_worker()
        finally:
            os.close(fd)
        want = bytearray(a + b)
        want[100:100 + 4096] = c
        assert p.read_bytes() == bytes(want)
        wait_for_object(s3, f"{prefix}/g", bytes(want))
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/g") == bytes(want)


@pytest.mark.parametrize("synced", [False, True])
def test_a_killed_daemon_loses_no_write_made_in_passthrough(volume, s3,
                                                            tmp_path, synced):
    """The whole daemon dies with a file open and written in passthrough
    past the size the cache's log knows (the file was in S3 already, so
    it has a log): the next mount on the cache dir takes the cache file
    as it is, and uploads it. So too after an fdatasync, which under
    local durability leaves the store's record of the file as it was."""
    _, prefix = volume
    m = mounted(volume, tmp_path)
    p = Path(m.mountpoint) / "h"
    data = os.urandom(3 * MiB + 123)
    p.write_bytes(data[:MiB])
    wait_for_object(s3, f"{prefix}/h", data[:MiB])
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, data[MiB:], MiB)
    if synced:
        os.fdatasync(fd)
    m.kill_daemon()
    try:
        os.close(fd)
    except OSError:
        pass  # the connection is gone
    m = mounted(volume, tmp_path)
    try:
        assert Path(m.mountpoint, "h").read_bytes() == data
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/h") == data


@pytest.mark.parametrize("first", ["read", "write"])
def test_opens_of_one_file_share_its_mode(volume, tmp_path, first):
    """Every open of an inode must be in the mode of those already open,
    or the kernel fails it with EIO."""
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "f"
        p.write_bytes(b"z" * 8192)
        flags = [os.O_RDONLY, os.O_RDWR]
        if first == "write":
            flags.reverse()
        fds = [os.open(p, f) for f in flags]
        try:
            os.pwrite(fds[flags.index(os.O_RDWR)], b"q", 0)
            assert os.pread(fds[flags.index(os.O_RDONLY)], 1, 0) == b"q"
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        assert m.unmount() == 0, m.output()


@pytest.fixture
def small_ext4(tmp_path):
    """A 256 MiB ext4 on a loop device, for a cache dir: passthrough
    needs a cache disk that refuses writes to an open immutable file,
    which tmpfs is not."""
    img, d = tmp_path / "disk.img", tmp_path / "small-ext4"
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    d.mkdir()
    subprocess.run(["mount", "-o", "loop", str(img), str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def fill_until_stopped(m, name="big"):
    """Creates name in m, on a small cache disk, and appends a MiB at a
    time to it in passthrough until a write fails; asserts it failed with
    EPERM (the guard stopped it, the disk is not full). Returns the
    descriptor, still open, the MiB written over and over, and the bytes
    written."""
    fd = os.open(Path(m.mountpoint) / name, os.O_CREAT | os.O_WRONLY, 0o644)
    chunk, written = os.urandom(MiB), 0
    try:
        # the first write asks the worker for "security.capability"
        os.pwrite(fd, chunk, 0)
        assert served_by_kernel(m, lambda: os.pwrite(fd, chunk, 0))
        with pytest.raises(OSError) as e:
            while written < 300 * MiB:
                os.pwrite(fd, chunk, written)
                written += MiB
                time.sleep(0.02)  # about a MiB per guard tick
        assert e.value.errno == errno.EPERM, (e.value, m.output())
    except BaseException:
        os.close(fd)
        raise
    return fd, chunk, written


def test_a_nearly_full_cache_disk_stops_writes_in_passthrough(
        volume, s3, tmp_path, small_ext4):
    """A file open for writing in passthrough fills the cache disk: its
    writes are stopped (EPERM) while the disk still has the room the
    metadata store needs, so the mount goes on; once the file is closed
    and uploaded, its room comes back."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(small_ext4 / "c"), *ARGS)
    try:
        fd, chunk, written = fill_until_stopped(m)
        os.close(fd)
        assert written >= 100 * MiB
        # the metadata store still commits
        (Path(m.mountpoint) / "note").write_text("still here\n")
        os.sync()
        want = chunk * (written // MiB)
        wait_for_object(s3, f"{prefix}/big", want, timeout=120)
        # uploaded and closed: evicted as needed, and writes go on
        deadline = time.monotonic() + 60
        while True:
            try:
                (Path(m.mountpoint) / "after").write_bytes(b"a" * 50 * MiB)
                break
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                assert time.monotonic() < deadline, m.output()
                time.sleep(0.5)
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/note") == b"still here\n"


def test_uploads_that_hang_do_not_keep_writes_from_being_stopped(
        volume, s3, tmp_path, small_ext4):
    """The guard that stops writes in passthrough on a nearly full cache
    disk must not wait behind uploads: with every request for the file
    held up in S3, the writer still gets EPERM, not ENOSPC (a disk full
    to the last block, with no room for the metadata store)."""
    url, prefix = volume
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    try:
        stall = proxy.add_rule("delay:20000", path=f"/{prefix}/big",
                               count=1000)
        m = Mount(url, str(tmp_path / "m"), str(small_ext4 / "c"), *ARGS,
                  env={"AWS_ENDPOINT_URL": proxy.url})
        try:
            fd, chunk, written = fill_until_stopped(m)
            os.close(fd)
            assert stall.fired, "no upload was held up"
            proxy.clear_rules()
            wait_for_object(s3, f"{prefix}/big",
                            chunk * (written // MiB), timeout=180)
        finally:
            assert m.unmount() == 0, m.output()
    finally:
        proxy.stop()


@pytest.mark.parametrize("killed", ["worker", "daemon"])
def test_a_restart_unfreezes_what_a_killed_process_left_frozen(
        volume, s3, tmp_path, small_ext4, killed):
    """Writes in passthrough are stopped by making the cache file
    immutable. A worker or daemon killed while they are stopped leaves it
    so; the next one thaws it, or the file could never be uploaded nor
    changed again. With the kernel's open adopted, the new worker stops
    its writes again while the disk is short of room."""
    url, prefix = volume
    cache = small_ext4 / "c"
    marker = cache / "data" / "frozen"
    m = Mount(url, str(tmp_path / "m"), str(cache), *ARGS)
    try:
        p = Path(m.mountpoint) / "big"
        fd, chunk, written = fill_until_stopped(m)
        try:
            assert marker.exists()
            if killed == "worker":
                m.kill_worker()
                # overwrites take no room: they go on until the guard of
                # the new worker freezes the file again
                deadline = time.monotonic() + 20
                with pytest.raises(OSError) as e:
                    while True:
                        os.pwrite(fd, chunk, 0)
                        assert time.monotonic() < deadline, m.output()
                        time.sleep(0.01)
                assert e.value.errno == errno.EPERM, (e.value, m.output())
            else:
                m.kill_daemon()
        finally:
            try:
                os.close(fd)
            except OSError:
                pass  # the daemon's connection is gone
        if killed == "daemon":
            m = Mount(url, str(tmp_path / "m"), str(cache), *ARGS)
            assert not marker.exists()
        want = chunk * (written // MiB)
        wait_for_object(s3, f"{prefix}/big", want, timeout=120)
        os.truncate(p, MiB)  # the cache file can be changed again
        wait_for_object(s3, f"{prefix}/big", chunk)
    finally:
        assert m.unmount() == 0, m.output()


def test_a_worker_taking_over_keeps_the_mounts_caching_mode(volume,
                                                           tmp_path):
    """A capacity set since the mount would make a new worker pick the
    writeback cache; the kernel keeps the mode of the mount's INIT (no
    writeback cache), and a write must still move the mtime."""
    from tierfs_mount import TIERFS
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "f"
        p.write_bytes(b"a" * 8192)
        r = subprocess.run([TIERFS, "resize", m.mountpoint, "--cache-dir",
                            m.cache_dir, "--capacity", "64M"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        m.kill_worker()
        before = os.stat(p).st_mtime_ns
        time.sleep(0.05)
        fd = os.open(p, os.O_RDWR)  # not in passthrough: a capacity now
        try:
            assert not served_by_kernel(m, lambda: os.pwrite(fd, b"b", 0),
                                        wait=1.0)
        finally:
            os.close(fd)
        assert os.stat(p).st_mtime_ns > before
        assert p.read_bytes() == b"b" + b"a" * 8191
    finally:
        assert m.unmount() == 0, m.output()


def test_an_open_for_writing_that_writes_nothing_keeps_the_mtime(volume,
                                                                tmp_path):
    """Jupyter's "file changed on disk" check: opening a file read-write
    (as SQLite and editors do) and closing it, across a worker restart
    too, must not move its mtime."""
    m = mounted(volume, tmp_path)
    try:
        p = Path(m.mountpoint) / "nb.ipynb"
        p.write_bytes(b"{}" * 5000)
        os.utime(p, ns=(1_000_000_000, 2_000_000_000))
        fd = os.open(p, os.O_RDWR)
        try:
            assert os.pread(fd, 2, 0) == b"{}"
            time.sleep(0.3)  # flusher ticks settle the open file
            assert os.stat(p).st_mtime_ns == 2_000_000_000
            m.kill_worker()
            time.sleep(0.3)
            assert os.stat(p).st_mtime_ns == 2_000_000_000
        finally:
            os.close(fd)
        assert os.stat(p).st_mtime_ns == 2_000_000_000
    finally:
        assert m.unmount() == 0, m.output()


def committed_size(cache_dir, ino, tmp_path):
    """The size the store has committed for ino: what a crash keeps. Read
    from a copy of the store and its WAL (the worker holds the store's
    lock), as a new worker would read them."""
    snap = tmp_path / "snap"
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir()
    for suffix in ("", "-wal"):
        src = Path(cache_dir) / f"meta.db{suffix}"
        if src.exists():
            shutil.copyfile(src, snap / f"meta.db{suffix}")
    db = sqlite3.connect(snap / "meta.db")
    try:
        return db.execute("SELECT size FROM inodes WHERE ino = ?",
                          (ino,)).fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize("kill", ["worker", "daemon"])
@pytest.mark.parametrize("kind", ["new", "logged"])
def test_a_size_settled_lazily_survives_a_kill(volume, s3, tmp_path, kind,
                                               kill):
    """Writes in passthrough reach the store through a settlement (a stat,
    the last close), whose commit of a grown size waits for the lazy timer:
    the cache file records the size already. The timer is held back here,
    so the store on disk has the old size when the worker or the whole
    daemon is killed; the next one takes the size from the cache file, and
    all the bytes reach S3. kind: a file made here (a ".new" cache file),
    or one in S3 already (a cache file with a range log)."""
    url, prefix = volume
    mnt, cache = str(tmp_path / "m"), str(tmp_path / "c")
    p = Path(mnt) / "grown"
    data = os.urandom(2 * MiB + 321)
    first = MiB + 7
    if kind == "logged":
        m = Mount(url, mnt, cache, *ARGS)
        try:
            p.write_bytes(data[:first])
            wait_for_object(s3, f"{prefix}/grown", data[:first])
        finally:
            assert m.unmount() == 0, m.output()
    # no upload meanwhile: it would commit the size
    args = ("--upload-delay", "600s", "--durability", "local")
    m = Mount(url, mnt, cache, *args,
              env={"TIERFS_DEBUG_LAZY_COMMIT_MS": "600000"})
    try:
        # nor the reconciliation that follows a mount from the index
        mounts = 2 if kind == "logged" else 1
        wait_for(lambda: m.output().count("reconciled with") >= mounts,
                 m.output, every=0.02)
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.pwrite(fd, data[:first], 0)
            assert served_by_kernel(m, lambda: os.pwrite(fd, b"", 0))
            # a clean file turning dirty is committed at once, with it
            # the size of then; what grows after waits
            assert os.fstat(fd).st_size == first
            ino = os.fstat(fd).st_ino
            os.pwrite(fd, data[first:], first)
            assert os.fstat(fd).st_size == len(data)
        finally:
            os.close(fd)
        time.sleep(0.3)  # the release is settled (RELEASE is async)
        before = 0 if kind == "new" else first
        assert committed_size(cache, ino, tmp_path) == before
        if kill == "worker":
            m.kill_worker()
        else:
            m.kill_daemon()
            m = Mount(url, mnt, cache, *args)
        assert p.read_bytes() == data
        assert os.stat(p).st_size == len(data)
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/grown") == data
    assert committed_size(cache, ino, tmp_path) == len(data)
