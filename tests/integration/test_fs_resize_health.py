"""test_fs_resize_health.py: the live quota (`tierfs resize`) and the health
file a running daemon keeps in its cache dir (what the CSI node reads).

Run under `eval "$(hack/s3-local.sh env)"`.
"""

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from s3util import skip_unless_s3
from tierfs_mount import TIERFS, Mount

skip_unless_s3()

MiB = 1 << 20


def resize(m, size):
    return subprocess.run([TIERFS, "resize", m.mountpoint, "--cache-dir",
                           m.cache_dir, "--capacity", size],
                          capture_output=True, text=True, timeout=30)


def total(m):
    st = os.statvfs(m.mountpoint)
    return st.f_blocks * st.f_frsize


def write(path, n):
    with open(path, "wb") as f:
        f.write(b"x" * n)
        f.flush()
        os.fsync(f.fileno())


def health(m):
    """CACHE_DIR/health as a dict (waiting for its first writing)."""
    path = Path(m.cache_dir) / "health"
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, "no health file"
        time.sleep(0.1)
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_resize_lets_a_write_past_the_old_quota_succeed(volume, tmp_path):
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--capacity", "2M")
    try:
        assert total(m) == 2 * MiB
        with pytest.raises(OSError) as e:
            write(Path(m.mountpoint) / "big", 3 * MiB)
        assert e.value.errno == errno.ENOSPC
        r = resize(m, "4M")
        assert r.returncode == 0, r.stderr
        assert total(m) == 4 * MiB  # at once: resize waited for it
        write(Path(m.mountpoint) / "big", 3 * MiB)
        cap = Path(m.cache_dir) / "capacity"
        assert cap.read_text() == f"{4 * MiB}\n"
        assert cap.stat().st_mode & 0o777 == 0o600
    finally:
        assert m.unmount() == 0, m.output()


def test_the_new_quota_outlives_a_worker_crash_and_a_remount(volume,
                                                            tmp_path):
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--capacity", "2M")
    try:
        assert resize(m, "8M").returncode == 0
        (worker,) = m.workers()
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while m.workers() in ([], [worker]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert total(m) == 8 * MiB
    finally:
        assert m.unmount() == 0, m.output()
    # no --capacity: the last one set for this cache dir
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"))
    try:
        assert total(m) == 8 * MiB
    finally:
        assert m.unmount() == 0, m.output()


def test_resize_refuses_a_cache_dir_that_serves_nothing(tmp_path):
    (tmp_path / "m").mkdir()
    r = subprocess.run([TIERFS, "resize", str(tmp_path / "m"), "--cache-dir",
                        str(tmp_path / "c"), "--capacity", "1G"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no daemon state" in r.stderr
    r = subprocess.run([TIERFS, "resize", str(tmp_path / "m"), "--cache-dir",
                        str(tmp_path / "c"), "--capacity", "lots"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--capacity" in r.stderr


def test_health_reports_s3_ok_and_the_dirty_backlog(volume, tmp_path):
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "60s")
    try:
        t0 = int(time.time())
        (Path(m.mountpoint) / "f").write_text("pending\n")
        deadline = time.monotonic() + 15
        while True:
            h = health(m)
            if int(h["updated"]) >= t0 + 2 and int(h["dirty_inodes"]) >= 1:
                break
            assert time.monotonic() < deadline, h
            time.sleep(0.5)
        assert h["s3"] == "ok" and h["s3_error"] == ""
        assert int(h["oldest_dirty_s"]) >= 1
        st = (Path(m.cache_dir) / "health").stat()
        assert st.st_mode & 0o777 == 0o600
    finally:
        assert m.unmount() == 0, m.output()


def test_health_says_s3_error_when_s3_is_unreachable(volume, tmp_path):
    """Mounted through a local TCP relay that is then closed: uploads fail
    and the health file says so, without the credentials."""
    import socket
    import threading
    url, _ = volume
    upstream = os.environ["AWS_ENDPOINT_URL"].split("//", 1)[1]
    host, port = upstream.rsplit(":", 1)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    open_ = {"yes": True}
    conns = []

    def pump(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def relay():
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            if not open_["yes"]:
                c.close()
                continue
            u = socket.create_connection((host, int(port)))
            conns.extend((c, u))
            threading.Thread(target=pump, args=(c, u), daemon=True).start()
            threading.Thread(target=pump, args=(u, c), daemon=True).start()

    threading.Thread(target=relay, daemon=True).start()
    endpoint = f"http://127.0.0.1:{lsock.getsockname()[1]}"
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), "--endpoint",
              endpoint, "--upload-delay", "100ms", "--s3-timeout", "2s")
    try:
        open_["yes"] = False  # new connections are refused from now
        for c in conns:  # and pooled ones are cut
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        (Path(m.mountpoint) / "f").write_text("stuck\n")
        deadline = time.monotonic() + 30
        while health(m)["s3"] != "error":
            assert time.monotonic() < deadline, health(m)
            time.sleep(0.5)
        h = health(m)
        assert h["s3_error"]
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in h["s3_error"]
        open_["yes"] = True
        deadline = time.monotonic() + 60
        while health(m)["s3"] != "ok" or health(m)["dirty_inodes"] != "0":
            assert time.monotonic() < deadline, health(m)
            time.sleep(0.5)
    finally:
        open_["yes"] = True
        rc = m.unmount()
        lsock.close()
        assert rc == 0, m.output()
