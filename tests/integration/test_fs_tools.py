"""test_fs_tools.py: POSIX features tools rely on, on a real tierfs mount: locks, mmap, venv+pip, a full volume, O_APPEND, fallocate, name limits.

Each test works on a fresh volume (fixtures in conftest.py) and checks what
a program would see: errno values, file contents, statfs, and, where the
test says so, the object in S3 through boto3 after an unmount. Lock
conflicts are probed from a second process (a short Python child). Run
under `eval "$(hack/s3-local.sh env)"`; skipped without AWS_ENDPOINT_URL
or /dev/fuse. The venv test needs python3-venv and python3-wheel-whl
(hack/install-deps.sh).
"""

import errno
import fcntl
import glob
import mmap
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from s3util import body, head, keys, skip_unless_s3
from tierfs_mount import Mount

skip_unless_s3(fuse=True)

PAGE = mmap.PAGESIZE
KiB = 1 << 10
MiB = 1 << 20

# --- helpers ------------------------------------------------------------------------

CHILD = """\
import errno, fcntl, os, struct, sys
FLOCK = "hhqqi4x"
fd = os.open(sys.argv[1], os.O_RDWR)
try:
{body}
except OSError as e:
    print(errno.errorcode[e.errno])
else:
    print("ok")
"""


def in_child(path, code):
    """Runs code in a new Python process with `fd` open O_RDWR on path;
    returns its output lines: what code printed, then "ok" or the errno
    name (e.g. "EAGAIN") of the OSError it raised."""
    script = CHILD.format(body=textwrap.indent(textwrap.dedent(code), "    "))
    r = subprocess.run([sys.executable, "-c", script, str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


# struct flock on Linux x86_64/aarch64: short l_type, short l_whence,
# off_t l_start, off_t l_len, pid_t l_pid (32 bytes with padding)
FLOCK = "hhqqi4x"


def flock_arg(kind, start, length):
    return struct.pack(FLOCK, kind, os.SEEK_SET, start, length, 0)


def getlk(fd, cmd, kind, start, length):
    """F_GETLK / F_OFD_GETLK: (l_type, l_start, l_len, l_pid) of the first
    lock that would block kind over [start, start+length)."""
    t, _, s, n, pid = struct.unpack(FLOCK, fcntl.fcntl(
        fd, cmd, flock_arg(kind, start, length)))
    return t, s, n, pid


def write_file(path, data):
    """Writes data, fsyncs and closes; raises what write, fsync or close raise."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# --- a. flock(2) ---------------------------------------------------------------------


def test_flock_exclusive_blocks_another_process_until_unlocked(mount):
    p = Path(mount.mountpoint) / "lockfile"
    p.write_bytes(b"x")
    with open(p, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)") == \
            [errno.errorcode[errno.EWOULDBLOCK]]
        assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)") == \
            [errno.errorcode[errno.EWOULDBLOCK]]
        fcntl.flock(f, fcntl.LOCK_UN)
        assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)") == ["ok"]


def test_flock_shared_is_shared_by_two_processes_and_excludes_a_writer(mount):
    p = Path(mount.mountpoint) / "lockfile"
    p.write_bytes(b"x")
    with open(p, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)") == ["ok"]
        assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)") == \
            [errno.errorcode[errno.EWOULDBLOCK]]
    # closing the file released the lock
    assert in_child(p, "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)") == ["ok"]


# --- b. fcntl byte-range locks -------------------------------------------------------

CONFLICT = {errno.errorcode[errno.EAGAIN], errno.errorcode[errno.EACCES]}


def test_posix_record_locks_conflict_by_range_and_name_the_holder(mount):
    p = Path(mount.mountpoint) / "records"
    p.write_bytes(b"\0" * 4096)
    fd = os.open(p, os.O_RDWR)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLK, flock_arg(fcntl.F_WRLCK, 0, 100))
        # an overlapping range is refused at once
        out = in_child(p, """
            fcntl.fcntl(fd, fcntl.F_SETLK,
                        struct.pack(FLOCK, fcntl.F_WRLCK, 0, 50, 100, 0))""")
        assert len(out) == 1 and out[0] in CONFLICT, out
        # F_GETLK names this process as the holder, with its range
        out = in_child(p, """
            t, _, s, n, pid = struct.unpack(FLOCK, fcntl.fcntl(
                fd, fcntl.F_GETLK, struct.pack(FLOCK, fcntl.F_WRLCK, 0, 50, 10, 0)))
            print(t, s, n, pid)""")
        assert out == [str(fcntl.F_WRLCK), "0", "100", str(os.getpid()), "ok"]
        # a range that does not overlap is free, and F_GETLK says so
        out = in_child(p, """
            t = struct.unpack(FLOCK, fcntl.fcntl(
                fd, fcntl.F_GETLK, struct.pack(FLOCK, fcntl.F_WRLCK, 0, 200, 100, 0)))[0]
            print(t)
            fcntl.fcntl(fd, fcntl.F_SETLK,
                        struct.pack(FLOCK, fcntl.F_WRLCK, 0, 200, 100, 0))""")
        assert out == [str(fcntl.F_UNLCK), "ok"]
        # unlocked, the overlapping range is granted
        fcntl.fcntl(fd, fcntl.F_SETLK, flock_arg(fcntl.F_UNLCK, 0, 100))
        out = in_child(p, """
            fcntl.fcntl(fd, fcntl.F_SETLK,
                        struct.pack(FLOCK, fcntl.F_WRLCK, 0, 50, 100, 0))""")
        assert out == ["ok"]
        # read locks are shared, and exclude a write lock
        fcntl.fcntl(fd, fcntl.F_SETLK, flock_arg(fcntl.F_RDLCK, 0, 100))
        out = in_child(p, """
            fcntl.fcntl(fd, fcntl.F_SETLK,
                        struct.pack(FLOCK, fcntl.F_RDLCK, 0, 0, 100, 0))""")
        assert out == ["ok"]
        out = in_child(p, """
            fcntl.fcntl(fd, fcntl.F_SETLK,
                        struct.pack(FLOCK, fcntl.F_WRLCK, 0, 0, 100, 0))""")
        assert len(out) == 1 and out[0] in CONFLICT, out
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(fcntl, "F_OFD_SETLK"),
                    reason="this Python has no fcntl.F_OFD_SETLK")
def test_ofd_locks_belong_to_the_open_file_description(mount):
    p = Path(mount.mountpoint) / "ofd"
    p.write_bytes(b"\0" * 4096)
    fd1 = os.open(p, os.O_RDWR)
    fd2 = os.open(p, os.O_RDWR)  # same process, another open file description
    try:
        fcntl.fcntl(fd1, fcntl.F_OFD_SETLK, flock_arg(fcntl.F_WRLCK, 0, 10))
        with pytest.raises(OSError) as e:
            fcntl.fcntl(fd2, fcntl.F_OFD_SETLK, flock_arg(fcntl.F_WRLCK, 5, 10))
        assert e.value.errno in (errno.EAGAIN, errno.EACCES)
        # the holder is a description, not a process: l_pid is -1
        assert getlk(fd2, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, 5, 10) == \
            (fcntl.F_WRLCK, 0, 10, -1)
        # another process is refused too, past the range it is free
        out = in_child(p, """
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK,
                        struct.pack(FLOCK, fcntl.F_WRLCK, 0, 0, 1, 0))""")
        assert len(out) == 1 and out[0] in CONFLICT, out
        fcntl.fcntl(fd2, fcntl.F_OFD_SETLK, flock_arg(fcntl.F_WRLCK, 10, 10))
        # closing fd1 drops its lock
        os.close(fd1)
        fd1 = -1
        fcntl.fcntl(fd2, fcntl.F_OFD_SETLK, flock_arg(fcntl.F_WRLCK, 0, 10))
    finally:
        if fd1 >= 0:
            os.close(fd1)
        os.close(fd2)


# --- c. mmap ---------------------------------------------------------------------------


def test_shared_writable_mmap_reaches_the_file_and_s3(mount, s3, volume):
    _, prefix = volume
    p = Path(mount.mountpoint) / "mapped.bin"
    size = 3 * PAGE + 123
    patches = [(0, b"head"), (PAGE - 3, b"straddles"), (PAGE + 100, b"second page"),
               (2 * PAGE + 7, os.urandom(500)), (size - 5, b"tail!")]
    want = bytearray(size)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        for off, data in patches:
            mm[off:off + len(data)] = data
            want[off:off + len(data)] = data
        mm.flush()  # msync(MS_SYNC)
        mm.close()
    finally:
        os.close(fd)
    assert os.stat(p).st_size == size
    with open(p, "rb") as f:
        assert f.read() == want
    assert mount.unmount() == 0, mount.output()
    assert body(s3, f"{prefix}/mapped.bin") == want


def test_mmap_reads_what_write_wrote_here_and_on_a_new_node(mount, volume, tmp_path):
    url, _ = volume
    data = os.urandom(2 * PAGE + 1000)
    fd = os.open(Path(mount.mountpoint) / "written.bin", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for off in range(0, len(data), 1000):  # many small write(2)s
            os.write(fd, data[off:off + 1000])
    finally:
        os.close(fd)

    def mapped(path):
        with open(path, "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return bytes(mm[PAGE - 10:PAGE + 10]), bytes(mm[:])

    piece, whole = mapped(Path(mount.mountpoint) / "written.bin")
    assert piece == data[PAGE - 10:PAGE + 10]
    assert whole == data
    assert mount.unmount() == 0, mount.output()
    # a fresh cache: page faults are served from S3 through the daemon
    m = Mount(url, str(tmp_path / "mnt2"), str(tmp_path / "cache2"))
    try:
        piece, whole = mapped(Path(m.mountpoint) / "written.bin")
        assert piece == data[PAGE - 10:PAGE + 10]
        assert whole == data
    finally:
        assert m.unmount() == 0, m.output()


# --- d. a venv and pip -------------------------------------------------------------------

WHEELS = "/usr/share/python-wheels"  # Debian: python3-pip-whl, -setuptools-whl, -wheel-whl


def test_venv_on_the_mount_installs_a_local_package_offline_and_imports_it(mount, tmp_path):
    root = Path(mount.mountpoint)
    assert glob.glob(f"{WHEELS}/setuptools-*.whl") and glob.glob(f"{WHEELS}/wheel-*.whl"), \
        "needs python3-venv and python3-wheel-whl: run hack/install-deps.sh"
    src = root / "src" / "hello"
    (src / "hello_tierfs").mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61", "wheel"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "hello-tierfs"
        version = "1.2.3"

        [project.scripts]
        hello-tierfs = "hello_tierfs:main"
        """))
    (src / "hello_tierfs" / "__init__.py").write_text(textwrap.dedent("""\
        def greet():
            return "hello from tierfs"

        def main():
            print(greet())
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               HOME=str(tmp_path))  # nothing of the user's pip config
    venv = root / "venv"

    def run(*argv):
        r = subprocess.run([str(a) for a in argv], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"{argv}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    # ensurepip installs pip and setuptools from WHEELS: offline already
    run("/usr/bin/python3", "-m", "venv", venv)
    run(venv / "bin" / "pip", "install", "--no-index", "--find-links", WHEELS, src)
    out = run(venv / "bin" / "python", "-c",
              "import hello_tierfs, importlib.metadata as md; "
              "print(hello_tierfs.__file__); print(hello_tierfs.greet()); "
              "print(md.version('hello-tierfs'))").splitlines()
    assert out[0].startswith(str(venv / "lib")), out  # imported from the venv
    assert out[1:] == ["hello from tierfs", "1.2.3"]
    assert run(venv / "bin" / "hello-tierfs") == "hello from tierfs\n"  # console script
    assert "hello-tierfs" in run(venv / "bin" / "pip", "list", "--format=freeze")
    # the system python does not see it: the install went into the venv only
    r = subprocess.run(["/usr/bin/python3", "-c", "import hello_tierfs"], env=env,
                       capture_output=True, cwd=str(tmp_path))
    assert r.returncode != 0


# --- e. a full volume ----------------------------------------------------------------------

FILE = 256 * KiB


def fill(root, stem):
    """Writes FILE-byte files stem0, stem1, ... until one fails with ENOSPC;
    removes that one; returns {name: bytes} of the ones that were written."""
    written = {}
    for i in range(1000):
        name, data = f"{stem}{i}", os.urandom(FILE)
        try:
            write_file(root / name, data)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            os.unlink(root / name)
            return written
        written[name] = data
    raise AssertionError(f"no ENOSPC after {len(written)} files")


def wait_free(root, want, timeout=10):
    """Waits for statfs to show want free bytes (space comes back once the
    kernel forgets the unlinked inode); returns what it shows last."""
    deadline = time.monotonic() + timeout
    while free_bytes(root) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return free_bytes(root)


def check_full_volume(m, files, full_free, victim):
    """On mount m of a full volume holding files: they are all there, statfs
    shows full_free bytes free (less than a file), another file does not
    fit; removing victim frees its size and a new file then fits.
    Updates files."""
    root = Path(m.mountpoint)
    assert sorted(os.listdir(root)) == sorted(files)
    for name, data in files.items():
        assert (root / name).read_bytes() == data, name
    assert free_bytes(root) == full_free < FILE
    with pytest.raises(OSError) as e:
        write_file(root / "extra", os.urandom(FILE))
    assert e.value.errno == errno.ENOSPC
    os.unlink(root / "extra")
    os.unlink(root / victim)
    del files[victim]
    assert wait_free(root, full_free + FILE) == full_free + FILE
    data = os.urandom(FILE)
    write_file(root / f"new-{victim}", data)
    files[f"new-{victim}"] = data
    assert (root / f"new-{victim}").read_bytes() == data
    assert free_bytes(root) == full_free  # full again


def test_full_volume_remounts_full_and_deleting_frees_space(volume, tmp_path):
    url, _ = volume
    args = ("--capacity", "4M", "--upload-delay", "200ms")
    cache = str(tmp_path / "cache")
    m = Mount(url, str(tmp_path / "mnt"), cache, *args)
    try:
        files = fill(Path(m.mountpoint), "f")
        full_free = free_bytes(m.mountpoint)
        assert full_free < FILE and len(files) >= (4 * MiB - FILE) // FILE
    finally:
        assert m.unmount() == 0, m.output()
    # the same cache dir, as after a restart on the same node
    m = Mount(url, str(tmp_path / "mnt"), cache, *args)
    try:
        check_full_volume(m, files, full_free, "f0")
    finally:
        assert m.unmount() == 0, m.output()
    # an empty cache dir, as on a new node
    m = Mount(url, str(tmp_path / "mnt"), str(tmp_path / "cache2"), *args)
    try:
        check_full_volume(m, files, full_free, "f1")
    finally:
        assert m.unmount() == 0, m.output()


def test_writers_at_once_never_pass_the_capacity(volume, tmp_path):
    """16 files written and fsynced at once into a 4 MiB volume: the quota
    check and the growth it allows are one step, so no more than 4 MiB is
    ever stored. When they were two, writes that arrived together all
    passed the check (a 3 MiB write into a 2 MiB volume succeeded in CI)."""
    url, _ = volume
    m = Mount(url, str(tmp_path / "mnt"), str(tmp_path / "cache"),
              "--capacity", "4M", "--upload-delay", "200ms")
    root = Path(m.mountpoint)
    n = 16
    try:
        for rnd in range(10):
            barrier = threading.Barrier(n)
            saved = {}

            def writer(i):
                data = os.urandom(MiB)
                barrier.wait()
                try:
                    write_file(root / f"w{rnd}-{i}", data)
                    saved[f"w{rnd}-{i}"] = data
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    os.unlink(root / f"w{rnd}-{i}")  # what it holds is undefined

            with ThreadPoolExecutor(n) as pool:
                list(pool.map(writer, range(n)))
            assert 1 <= len(saved) <= 4, (rnd, sorted(saved))
            assert sorted(os.listdir(root)) == sorted(saved)
            assert wait_free(root, (4 - len(saved)) * MiB) == (4 - len(saved)) * MiB
            for name, data in saved.items():
                assert (root / name).read_bytes() == data, name
            for name in os.listdir(root):
                os.unlink(root / name)
            assert wait_free(root, 4 * MiB) == 4 * MiB
    finally:
        assert m.unmount() == 0, m.output()


# --- f. O_APPEND, fallocate, name limits ----------------------------------------------------


def test_o_append_from_two_descriptors_always_writes_at_the_end(mount):
    p = Path(mount.mountpoint) / "log"
    fds = [os.open(p, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644),
           os.open(p, os.O_WRONLY | os.O_APPEND)]
    want = b""
    try:
        for i in range(40):
            fd = fds[i % 2]
            os.lseek(fd, 0, os.SEEK_SET)  # O_APPEND ignores the offset
            line = f"{'AB'[i % 2]}{i:03d}\n".encode()
            assert os.write(fd, line) == len(line)
            want += line
            assert os.fstat(fds[(i + 1) % 2]).st_size == len(want)
    finally:
        for fd in fds:
            os.close(fd)
    assert p.read_bytes() == want


def test_o_append_from_two_processes_loses_no_record(mount):
    p = Path(mount.mountpoint) / "shared.log"
    p.write_bytes(b"")
    code = ("import os, sys\n"
            "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
            "for i in range(300):\n"
            "    os.write(fd, f'{sys.argv[2]}{i:04d}'.encode().ljust(63) + b'\\n')\n"
            "os.close(fd)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p), tag])
             for tag in ("A", "B")]
    assert [q.wait(timeout=120) for q in procs] == [0, 0]
    lines = p.read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == 600
    for tag in (b"A", b"B"):
        mine = [ln.rstrip() for ln in lines if ln.startswith(tag)]
        assert mine == [tag + f"{i:04d}".encode() for i in range(300)]


def test_fallocate_extends_with_zeros_never_shrinks_and_respects_capacity(
        mount, s3, volume):
    _, prefix = volume
    p = Path(mount.mountpoint) / "prealloc"
    p.write_bytes(b"abc")
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, MiB)
        assert os.fstat(fd).st_size == MiB
        os.posix_fallocate(fd, 100, 200)  # inside the file: size unchanged
        assert os.fstat(fd).st_size == MiB
        os.posix_fallocate(fd, MiB + 4096, 4096)  # past the end, with a gap
        assert os.fstat(fd).st_size == MiB + 8192
        with pytest.raises(OSError) as e:  # the mount has --capacity 64M
            os.posix_fallocate(fd, 0, 128 * MiB)
        assert e.value.errno == errno.ENOSPC
        assert os.fstat(fd).st_size == MiB + 8192
        os.fsync(fd)
    finally:
        os.close(fd)
    assert p.read_bytes() == b"abc" + b"\0" * (MiB + 8192 - 3)
    assert head(s3, f"{prefix}/prealloc")["ContentLength"] == MiB + 8192


def test_names_longer_than_255_bytes_are_refused_everywhere(mount, s3, volume):
    _, prefix = volume
    root = Path(mount.mountpoint)
    (root / "src").write_text("s")
    (root / "dir").mkdir()
    for n in (256, 1000):
        long = "n" * n
        for what, call in [
                ("create", lambda: os.open(root / long, os.O_CREAT | os.O_WRONLY)),
                ("mkdir", lambda: os.mkdir(root / long)),
                ("mkdir in a subdir", lambda: os.mkdir(root / "dir" / long)),
                ("rename", lambda: os.rename(root / "src", root / long)),
                ("rename a dir", lambda: os.rename(root / "dir", root / long)),
                ("symlink", lambda: os.symlink("src", root / long)),
                ("link", lambda: os.link(root / "src", root / long)),
                ("mknod", lambda: os.mkfifo(root / long))]:
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.ENAMETOOLONG, (what, n, e.value)
    assert sorted(os.listdir(root)) == ["dir", "src"]  # nothing half-made
    assert (root / "src").read_text() == "s"
    # 255 bytes is the limit, and fits
    ok = "o" * 255
    os.rename(root / "src", root / ok)
    os.mkdir(root / "dir" / ("d" * 255))
    assert sorted(os.listdir(root)) == sorted(["dir", ok])
    assert os.listdir(root / "dir") == ["d" * 255]
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(root / ok, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    assert f"{prefix}/{ok}" in keys(s3, prefix + "/")
