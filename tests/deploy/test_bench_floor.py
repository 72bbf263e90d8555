"""test_bench_floor.py: the empty FUSE server of `make bench` (build/fuse-floor,
tests/bench/fusefloor.c) and the operation that times one request on it
(ops.py lookups): the server mounts, answers every lookup ENOENT, has no
entries and no xattrs, and goes when unmounted; the operation's figures are
counts, and it refuses a directory where its absent names exist.
"""

import errno
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "bench"))

import peers  # noqa: E402

FLOOR = ROOT / "build" / "fuse-floor"
OPS = ROOT / "tests" / "bench" / "ops.py"


@pytest.fixture
def floor(tmp_path):
    """build/fuse-floor mounted on a fresh directory; unmounted after."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.Popen([str(FLOOR), str(mnt)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not peers.mountinfo(str(mnt)):
        assert p.poll() is None, f"fuse-floor exited {p.returncode}: {p.stderr.read()}"
        assert time.monotonic() < deadline, "fuse-floor did not mount in 30 s"
        time.sleep(0.02)
    yield mnt, p
    if peers.mountinfo(str(mnt)):
        subprocess.run(["umount", str(mnt)], check=False)
    try:
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()


def lookups(d, n, timebox=30):
    r = subprocess.run(["/usr/bin/python3", str(OPS), "lookups", str(d), str(n),
                        str(timebox)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_the_floor_is_an_empty_fuse_directory_with_no_xattrs(floor):
    mnt, _ = floor
    assert peers.fs_type(str(mnt)) in peers.FUSE_TYPES
    assert os.listdir(mnt) == []
    with pytest.raises(FileNotFoundError):
        os.stat(mnt / "anything")
    with pytest.raises(OSError) as e:
        os.getxattr(mnt, "user.x")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError):
        (mnt / "new").write_bytes(b"x")  # it makes nothing


def test_the_floor_goes_when_unmounted(floor):
    mnt, p = floor
    subprocess.run(["umount", str(mnt)], check=True)
    assert p.wait(timeout=30) == 0
    assert not peers.mountinfo(str(mnt))


def test_lookups_times_one_absent_name_each(floor, tmp_path):
    mnt, _ = floor
    for d in (mnt, tmp_path):  # the floor, and a plain directory
        rc, out, err = lookups(d, 500)
        assert rc == 0, err
        o = json.loads(out.strip().splitlines()[-1])
        assert o["n"] == 500
        assert o["s"] > 0


def test_lookups_stops_at_its_timebox(floor):
    mnt, _ = floor
    rc, out, err = lookups(mnt, 10_000_000, timebox=0.2)
    assert rc == 0, err
    o = json.loads(out.strip().splitlines()[-1])
    assert 0 < o["n"] < 10_000_000
    assert o["s"] < 30


def test_lookups_refuses_a_name_that_is_there(tmp_path, monkeypatch):
    # a filesystem that finds the names it asks for would not be timing
    # one failed LOOKUP each: os.stat finding every name stands for it
    import ops
    monkeypatch.setattr(ops.os, "stat", lambda p: os.lstat(tmp_path))
    with pytest.raises(RuntimeError, match="exists"):
        ops.op_lookups(str(tmp_path), 10, 5)
