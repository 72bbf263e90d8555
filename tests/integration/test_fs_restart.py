"""test_fs_restart.py: the mount survives its worker process dying.

`tierfs mount` is a supervisor that holds /dev/fuse and a worker that
serves it. Here the worker is killed with SIGKILL while programs work in
the mount; a new worker takes over (saved INIT, FUSE_NOTIFY_RESEND), and
the programs finish with no error and correct data. Run under
`eval "$(hack/s3-local.sh env)"`; needs Linux >= 6.9.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from s3util import BUCKET, body, keys, skip_unless_s3
from tierfs_mount import TIERFS, Mount, wait_for

skip_unless_s3(tools=("fio",))

from conftest import MOUNT_ARGS  # noqa: E402

import pytest  # noqa: E402

# with a capacity, files are served through the worker with the kernel's
# writeback cache; without one, files the cache holds whole are served by
# the kernel itself (FUSE passthrough; test_fs_passthrough.py)
PASSTHROUGH_ARGS = tuple(a for a in MOUNT_ARGS if a not in ("--capacity", "64M"))
BOTH_MODES = pytest.mark.parametrize(
    "args", [MOUNT_ARGS, PASSTHROUGH_ARGS], ids=["writeback", "passthrough"])

# Writes, appends, renames, reads back and checks, in a loop; prints
# "ok N" at the end, or the first error and exits 1.
LOOP = r'''
import os, sys, zlib
root, rounds = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{root}/loop", exist_ok=True)
log = open(f"{root}/loop/journal", "ab")
for i in range(rounds):
    data = (b"%d:" % i) * (200 + i % 50)
    p = f"{root}/loop/f{i % 20}"
    with open(p + ".tmp", "wb") as f:
        f.write(data)
    os.rename(p + ".tmp", p)
    with open(p, "rb") as f:
        got = f.read()
    if got != data:
        print(f"round {i}: read back {len(got)} bytes, wanted {len(data)}")
        sys.exit(1)
    log.write(b"%d %08x\n" % (i, zlib.crc32(data)))
    log.flush()
    if i % 7 == 0:
        os.mkdir(f"{root}/loop/d{i}")
        os.rmdir(f"{root}/loop/d{i}")
log.close()
lines = open(f"{root}/loop/journal", "rb").read().splitlines()
if len(lines) != rounds:
    print(f"journal has {len(lines)} lines, wanted {rounds}")
    sys.exit(1)
print(f"ok {rounds}")
'''


ROUNDS = 4000


@BOTH_MODES
def test_killing_the_worker_under_load_loses_nothing_and_fails_nothing(
        volume, s3, tmp_path, args):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *args)
    root = Path(m.mountpoint)
    loop = fio = None
    try:
        loop = subprocess.Popen([sys.executable, "-c", LOOP, str(root),
                                 str(ROUNDS)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        fio = subprocess.Popen(
            ["fio", "--name=verify", f"--directory={root}", "--rw=randwrite",
             "--bs=4k", "--size=8M", "--numjobs=2", "--ioengine=psync",
             "--verify=crc32c", "--verify_fatal=1",
             # in passthrough fio runs at the cache disk's speed: 40
             # loops took 1.5 s, done before the last kill
             f"--loops={200 if args == PASSTHROUGH_ARGS else 40}",
             "--verify_state_save=0",
             "--output-format=terse"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(3):
            time.sleep(0.7)
            # the kills must land while both still run
            assert loop.poll() is None, loop.communicate()[0]
            assert fio.poll() is None, fio.communicate()[0]
            m.kill_worker()
        out, _ = loop.communicate(timeout=300)
        assert loop.returncode == 0, out
        assert out.strip() == f"ok {ROUNDS}"
        fout, _ = fio.communicate(timeout=300)
        assert fio.returncode == 0, fout
        # the tree is whole after the restarts
        assert sorted(os.listdir(root / "loop")) == \
            sorted(["journal"] + [f"f{i}" for i in range(20)])
    finally:
        # a failure above leaves them running in the mount: stop them, so
        # that the unmount is not refused and the failure is the one shown
        for p in (loop, fio):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        rc = m.unmount()
        assert rc == 0, m.output()
    assert m.output().count("took over the mount") == 3
    # and everything reached S3
    journal = body(s3, f"{prefix}/loop/journal").splitlines()
    assert len(journal) == ROUNDS
    last = ROUNDS - 1
    assert body(s3, f"{prefix}/loop/f{last % 20}") == \
        b"%d:" % last * (200 + last % 50)


def wait_stopped(m):
    """The worker, once it has stopped itself (TIERFS_DEBUG_STOP_AT)."""
    def stopped():
        for pid in m.workers():
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return pid
        return None
    return wait_for(stopped, lambda: "a stopped worker:\n" + m.output())


# What the mount's root holds before each call below, as S3 has it after
# (None: not compared).
BEFORE = {"f0": b"old\n", "f1": b"other\n", "d0/": None}
EXCHANGE = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.renameat2(-100, b'f0', -100, b'f1', 2):\n"
            "    raise OSError(ctypes.get_errno(), 'renameat2')")
# op: (the entry it changes, at which the worker stops before it answers;
# the call in the mount's root; a check there after; S3 after, as BEFORE)
STOPPED_OPS = {
    "create": ("f", "fd = os.open('f', os.O_CREAT | os.O_WRONLY | os.O_TRUNC,"
               " 0o644); os.pwrite(fd, b'new\\n', 8192); os.close(fd)",
               "open('f', 'rb').read() == bytes(8192) + b'new\\n'",
               {**BEFORE, "f": bytes(8192) + b"new\n"}),
    "mkdir": ("d", "os.mkdir('d')", "os.path.isdir('d')",
              {**BEFORE, "d/": None}),
    "symlink": ("l", "os.symlink('f0', 'l')", "os.readlink('l') == 'f0'",
                {**BEFORE, "l": None}),
    "mknod": ("p", "os.mkfifo('p')", "stat.S_ISFIFO(os.lstat('p').st_mode)",
              {**BEFORE, "p": None}),
    "unlink": ("f0", "os.unlink('f0')", "not os.path.exists('f0')",
               {"f1": b"other\n", "d0/": None}),
    "rmdir": ("d0", "os.rmdir('d0')", "not os.path.exists('d0')",
              {"f0": b"old\n", "f1": b"other\n"}),
    "rename": ("f0", "os.rename('f0', 'g')", "open('g').read() == 'old\\n'",
               {"g": b"old\n", "f1": b"other\n", "d0/": None}),
    "link": ("h", "os.link('f0', 'h')",
             "os.stat('h').st_nlink == 2 and open('h').read() == 'old\\n'",
             {**BEFORE, "h": b"old\n"}),
    # made twice, an exchange undoes itself
    "rename-exchange": ("f0", EXCHANGE,
                        "open('f0').read() == 'other\\n' and "
                        "open('f1').read() == 'old\\n'",
                        {"f0": b"other\n", "f1": b"old\n", "d0/": None}),
}


@BOTH_MODES
@pytest.mark.parametrize("op", sorted(STOPPED_OPS))
def test_a_request_the_dead_worker_carried_out_is_answered_by_the_next(
        volume, s3, tmp_path, op, args):
    """The worker is stopped after it made the change and before it
    answered (TIERFS_DEBUG_STOP_AT), then killed: the kernel sends the
    request again, and the next worker, which finds the change made,
    answers it as done. Before, a create sent again made its cache file
    anew, found it held by the open the dead worker had recorded (which
    the next one adopts), and failed with EBUSY; under load, 2 runs in 5
    of the kill test above failed so. And an exchange sent again was made
    again, which put both files back."""
    url, prefix = volume
    target, call, check, after = STOPPED_OPS[op]
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *args,
              env={"TIERFS_DEBUG_STOP_AT":
                   f"{op.split('-')[0]}:{target}"})
    root = Path(m.mountpoint)
    p = None
    try:
        for name, data in BEFORE.items():
            if data is None:
                (root / name).mkdir()
            else:
                (root / name).write_bytes(data)
        p = subprocess.Popen(
            [sys.executable, "-c", f"import os, stat\n{call}\n"
             f"assert {check}"], cwd=root, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        wait_stopped(m)
        assert p.poll() is None  # waits for the answer
        m.kill_worker()
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, out
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        assert m.unmount() == 0, m.output()
    got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
    assert {k for k in got if k and not k.startswith(".tierfs/")} == \
        set(after)
    for name, data in after.items():
        if data is not None:
            assert body(s3, f"{prefix}/{name}") == data, name


def test_an_exchange_whose_note_fails_is_not_made(volume, s3, tmp_path):
    """An exchange commits with its note; when the note cannot be written
    (TIERFS_DEBUG_EXCHANGE_NOTE_FAILS), the program gets EIO and neither
    the store nor S3 has the exchange. Before, the batch committed the
    exchange without its note while the program was told it failed."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
              env={"TIERFS_DEBUG_EXCHANGE_NOTE_FAILS": "1"})
    root = Path(m.mountpoint)
    try:
        for name, data in BEFORE.items():
            if data is not None:
                (root / name).write_bytes(data)
        r = subprocess.run([sys.executable, "-c", EXCHANGE], cwd=root,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "Errno 5" in r.stderr, r.stderr
        assert (root / "f0").read_bytes() == b"old\n"
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/f0") == b"old\n"
    assert body(s3, f"{prefix}/f1") == b"other\n"
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c2"), *MOUNT_ARGS)
    try:  # a new node's view, from S3
        assert (root / "f0").read_bytes() == b"old\n"
    finally:
        assert m.unmount() == 0, m.output()


@BOTH_MODES
def test_a_file_open_across_a_restart_keeps_working(volume, s3, tmp_path,
                                                    args):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *args)
    root = Path(m.mountpoint)
    try:
        fd = os.open(root / "open", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b"before\n")
        os.unlink(root / "gone-but-open") if (root / "gone-but-open").exists() \
            else None
        fd2 = os.open(root / "gone-but-open", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd2, b"still here\n")
        os.fsync(fd2)
        os.unlink(root / "gone-but-open")
        m.kill_worker()
        os.write(fd, b"after\n")
        os.fsync(fd)
        assert os.pread(fd, 100, 0) == b"before\nafter\n"
        os.close(fd)
        # unlinked while open: still readable through the open descriptor
        assert os.pread(fd2, 100, 0) == b"still here\n"
        os.close(fd2)
        assert not (root / "gone-but-open").exists()
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/open") == b"before\nafter\n"


def test_a_rewrites_mtime_outlives_its_worker_and_the_mount(volume, tmp_path):
    """A rewrite inside a file changes its mtime, which the kernel keeps
    (writeback cache) and sends when the file is closed: a worker killed
    in between loses no part of it, and the time is the same after a
    remount and on a new node."""
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    p = Path(m.mountpoint) / "f"
    try:
        p.write_bytes(os.urandom(8192))
        before = p.stat().st_mtime_ns
        time.sleep(0.02)
        fd = os.open(p, os.O_RDWR)
        os.pwrite(fd, b"x" * 4096, 0)
        m.kill_worker()
        os.close(fd)
        after = p.stat().st_mtime_ns
        assert after > before
    finally:
        assert m.unmount() == 0, m.output()
    for cache in ("c", "c2"):  # the same cache dir, then a new node's
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / cache), *MOUNT_ARGS)
        try:
            assert p.stat().st_mtime_ns == after, cache
            assert p.read_bytes()[:4096] == b"x" * 4096
        finally:
            assert m.unmount() == 0, m.output()


def test_a_worker_killed_again_and_again_is_always_replaced(volume, s3,
                                                           tmp_path):
    """SIGKILL comes from outside (the OOM killer, an admin): however many
    land in a minute, the mount keeps serving (the 50-kill crash test,
    seed 11, once saw the supervisor give up after its 11th kill)."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    root = Path(m.mountpoint)
    try:
        for i in range(14):
            (root / "f").write_text(f"round {i}\n")
            m.kill_worker()
        assert (root / "f").read_text() == "round 13\n"
    finally:
        assert m.unmount() == 0, m.output()
    assert "kills within 60 s" in m.output()
    assert body(s3, f"{prefix}/f") == b"round 13\n"


def test_a_worker_that_keeps_crashing_is_given_up_on(volume, tmp_path):
    """A crash (here SIGABRT) may come back with every new worker, on a
    request the kernel resends: after 10 in a minute the supervisor stops
    rather than spin, and the mount goes away."""
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    try:
        for _ in range(10):
            m.kill_worker(signal.SIGABRT)
        (workers,) = [m.workers()]
        os.kill(workers[0], signal.SIGABRT)
        m.proc.wait(timeout=60)
        assert "too many crashes, giving up" in m.output()
    finally:
        m.unmount()
    assert not os.path.ismount(m.mountpoint)


def test_the_daemon_outlives_its_launcher_and_unmount_waits_for_s3(
        volume, s3, tmp_path):
    import hashlib
    url, prefix = volume
    mnt, cache = tmp_path / "m", tmp_path / "c"
    mnt.mkdir()
    # a launcher (the CSI node plugin, later) starts the daemon, then dies
    # with its whole process group
    launcher = subprocess.Popen(
        ["sh", "-c", f'"{TIERFS}" mount {url} {mnt} --cache-dir {cache} '
                     f'--upload-delay 60s && sleep 600'],
        start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.ismount(mnt):
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.05)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    state = dict(line.split("=", 1) for line in
                 (cache / "state").read_text().splitlines())
    assert state["state"] == "serving"
    assert state["mountpoint"] == str(mnt.resolve())
    os.kill(int(state["supervisor"]), 0)  # still running
    data = os.urandom(20 << 20)
    (mnt / "big").write_bytes(data)  # dirty: the upload is 60 s away
    r = subprocess.run([TIERFS, "unmount", str(mnt), "--cache-dir",
                        str(cache)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert not os.path.ismount(mnt)
    # it returned once the data was in S3
    got = body(s3, f"{prefix}/big")
    assert hashlib.md5(got).digest() == hashlib.md5(data).digest()
    assert "result=clean" in (cache / "state").read_text()


def test_a_put_that_lands_after_its_worker_died_cannot_bring_back_a_name(
        volume, s3, tmp_path):
    """A dead worker's request can reach S3 after its successor's: here a
    fault proxy holds the PUT of a directory's marker for 1 s, the
    directory is removed, and the worker is killed while the PUT is held.
    The new worker's deletion of the marker went out at once, the held PUT
    landed after it, and the next reconciliation brought the directory
    back. After an unclean end S3 changes now wait 2 s, so ours come last."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from faultproxy import FaultProxy
    url, prefix = volume
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    m = None
    try:
        proxy.add_rule("delay:1000", method="PUT", regex=r"/d/$")
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
                  "--reconcile-interval", "1s",
                  env={"AWS_ENDPOINT_URL": proxy.url})
        root = Path(m.mountpoint)
        (root / "d").mkdir()
        deadline = time.monotonic() + 10
        while not any(e["method"] == "PUT" and e["path"].endswith("/d/")
                      for e in list(proxy.log)):
            assert time.monotonic() < deadline, "the marker's PUT never came"
            time.sleep(0.02)
        os.rmdir(root / "d")  # its deletion waits behind the held PUT
        m.kill_worker()
        time.sleep(4)  # the held PUT lands; reconciliations every 1 s
        assert os.listdir(root) == []
    finally:
        if m:
            assert m.unmount() == 0, m.output()
        proxy.stop()
    got = {k["Key"] for k in s3.list_objects_v2(
        Bucket=url.split("/")[2], Prefix=prefix + "/").get("Contents", [])}
    assert f"{prefix}/d/" not in got


def test_a_dead_workers_late_put_cannot_replace_newer_data(
        volume, s3, tmp_path):
    """The data side of the same race: version 1 of a file is held in the
    fault proxy for 1 s, version 2 is written, and the worker is killed.
    Without the wait the new worker sent version 2 at once, the dead one's
    version 1 landed after it, and the reconciliation that follows a
    restart took S3's version 1 as another tool's change and replaced the
    cached version 2 with it: a saved file went back in time."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from faultproxy import FaultProxy
    url, prefix = volume
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    m = None
    v1, v2 = b"version 1\n" * 1000, b"version 2\n" * 1000
    try:
        proxy.add_rule("delay:1000", method="PUT", regex=r"/f$")
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
                  "--reconcile-interval", "1s",
                  env={"AWS_ENDPOINT_URL": proxy.url})
        f = Path(m.mountpoint) / "f"
        f.write_bytes(v1)
        deadline = time.monotonic() + 10
        while not any(e["method"] == "PUT" and e["path"].endswith("/f")
                      for e in list(proxy.log)):
            assert time.monotonic() < deadline, "the PUT of f never came"
            time.sleep(0.02)
        f.write_bytes(v2)  # in the cache; its upload waits for the held one
        m.kill_worker()
        time.sleep(4)  # the held PUT lands; reconciliations every 1 s
        assert f.read_bytes() == v2
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    finally:
        if m:
            assert m.unmount() == 0, m.output()
        proxy.stop()
    assert body(s3, f"{prefix}/f") == v2


def mv_cut_short(m, src, dst):
    """`mv src dst` on mount m, whose daemon is held after the rename's
    copies in S3 (TIERFS_DEBUG_RENAME_COPIED_PAUSE_MS) and killed there."""
    mv = subprocess.Popen(["mv", str(src), str(dst)],
                          stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # copied, not committed
    m.kill_daemon()
    mv.wait(timeout=30)


def test_a_rename_cut_short_by_a_crash_leaves_only_the_old_names(
        volume, s3, tmp_path):
    """A rename copies its objects in S3, then commits in the store; the
    daemon is killed in between (held there 3 s by fault injection), so
    the rename never happened. Before, the copies stayed in S3 and the
    next mount's reconciliation took them in: the file and the directory
    showed under both names. Now each copy is queued for deletion until
    the rename commits, and the next mount deletes them."""
    url, prefix = volume
    args = (str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
            "--reconcile-interval", "1s")
    held = {"TIERFS_DEBUG_RENAME_COPIED_PAUSE_MS": "3000"}
    m = Mount(url, *args, env=held)
    root = Path(m.mountpoint)
    (root / "f").write_text("file\n")
    (root / "d").mkdir()
    (root / "d" / "x").write_text("in d\n")
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)  # all of it in S3
    os.close(fd)
    for src, dst in (("f", "g"), ("d", "e")):
        if src != "f":
            m = Mount(url, *args, env=held)
        mv_cut_short(m, root / src, root / dst)
    m = Mount(url, *args)
    try:
        time.sleep(3)  # the deletions are sent; reconciliations every 1 s
        assert sorted(os.listdir(root)) == ["d", "f"]
        assert os.listdir(root / "d") == ["x"]
    finally:
        assert m.unmount() == 0, m.output()
    got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
    assert {k for k in got if k and not k.startswith(".tierfs/")} == \
        {"f", "d/", "d/x"}


def test_a_rename_over_a_file_cut_short_by_a_crash_leaves_the_tiers_agreeing(
        volume, s3, tmp_path):
    """A rename onto an existing file copies the source's object over the
    destination's in S3, then commits in the store. Killed in between, the
    store still has the old destination while S3 has the source's bytes
    under its key. The reconciliation that follows the restart takes in
    S3's version, so the two agree, and a new node shows what this one
    does: the destination has the new bytes and the source stays, as if
    the file had been copied. Neither version is lost half-way."""
    url, prefix = volume
    args = (str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    held = {"TIERFS_DEBUG_RENAME_COPIED_PAUSE_MS": "3000"}
    m = Mount(url, *args, env=held)
    root = Path(m.mountpoint)
    (root / "new").write_text("the new version\n")
    (root / "doc").write_text("the old version\n")
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)  # both in S3
    os.close(fd)
    mv_cut_short(m, root / "new", root / "doc")
    m = Mount(url, *args)
    try:
        time.sleep(3)  # the reconciliation that follows a restart
        here = {n: (root / n).read_text() for n in os.listdir(root)}
    finally:
        assert m.unmount() == 0, m.output()
    there = {k[len(prefix) + 1:]: body(s3, k).decode()
             for k in keys(s3, prefix + "/")
             if k[len(prefix) + 1:]
             and not k[len(prefix) + 1:].startswith(".tierfs/")}
    assert here == there == {"doc": "the new version\n",
                             "new": "the new version\n"}
    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"), *MOUNT_ARGS)
    try:
        assert {n: (Path(b.mountpoint) / n).read_text()
                for n in os.listdir(b.mountpoint)} == here
    finally:
        assert b.unmount() == 0, b.output()


def test_durability_local_fsync_is_durable_on_the_cache_disk_and_uploads_later(
        volume, s3, tmp_path):
    """--durability local: fsync of a file or a directory returns once the
    change is on the cache disk, without waiting for S3 (the upload comes
    later); a kill -9 right after loses nothing, and an unmount sends it
    all. fsync of a directory used to upload every dirty inode at once,
    which made SQLite (a directory fsync per journal) go at S3's pace."""
    url, prefix = volume
    args = (str(tmp_path / "m"), str(tmp_path / "c"), "--durability",
            "local", "--upload-delay", "10m")
    m = Mount(url, *args)
    root = Path(m.mountpoint)
    (root / "d").mkdir()
    for path, data in (("f", b"file\n"), ("d/g", b"in d\n")):
        fd = os.open(root / path, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
    for d in (root / "d", root):
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
    assert not {"f", "d/", "d/g"} & got  # nothing sent yet
    m.kill_daemon()
    m = Mount(url, *args)
    try:
        assert (root / "f").read_bytes() == b"file\n"
        assert (root / "d" / "g").read_bytes() == b"in d\n"
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/f") == b"file\n"
    assert body(s3, f"{prefix}/d/g") == b"in d\n"


def test_cache_files_of_inodes_that_no_longer_exist_are_dropped_at_start(
        volume, tmp_path):
    """A crash between the store's deletion of an inode and the removal of
    its cache files (or between a create's cache file and the store's
    commit) leaves files no inode has. Dirty ones were never evicted nor
    uploaded, and counted as dirty for ever; the next start drops them,
    and keeps what a file of the volume left dirty."""
    url, _ = volume
    args = (str(tmp_path / "m"), str(tmp_path / "c"), "--upload-delay", "10m")
    m = Mount(url, *args)
    root = Path(m.mountpoint)
    (root / "keep").write_bytes(b"kept\n")
    m.kill_daemon()  # "keep" is dirty, in the cache only
    data = tmp_path / "c" / "data"
    (data / "987654.new").write_bytes(b"x" * 8192)
    (data / "987655").write_bytes(b"y" * 100)
    (data / "987655.log").write_text("S 100\nD+ 0 100\n")
    m = Mount(url, *args)
    try:
        assert (root / "keep").read_bytes() == b"kept\n"  # the worker serves
        left = sorted(p.name for p in data.iterdir())
        assert not {"987654.new", "987655", "987655.log"} & set(left), left
        assert "dropped the cache files of 2 inodes" in m.output()
    finally:
        assert m.unmount() == 0, m.output()


def test_bytes_the_cache_holds_past_the_store_are_taken_back_at_start(
        volume, s3, tmp_path):
    """fdatasync leaves a size that only grew to the cache file's own
    record, and does not fsync the store for it: a power loss can then
    roll the store back to a smaller size. A kill -9 between a write's
    bytes and the store's commit leaves a file dirty in the cache and
    clean in the store. Both are simulated by putting back a copy of the
    store taken earlier; the next start takes the sizes and dirty bytes
    back from the cache files, and sends them."""
    url, prefix = volume
    mnt, cache = tmp_path / "m", tmp_path / "c"
    args = (str(mnt), str(cache), "--durability", "local")
    m = Mount(url, *args, "--upload-delay", "200ms")
    (mnt / "clean").write_bytes(b"c" * 100)
    assert m.unmount() == 0, m.output()  # in S3: clean in the store
    m = Mount(url, *args, "--upload-delay", "10m")
    fd = os.open(mnt / "dirty", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"a" * 4096)
    os.fsync(fd)
    os.close(fd)
    m.kill_daemon()
    old = {p.name: p.read_bytes() for p in cache.glob("meta.db*")
           if not p.name.endswith("-shm")}
    m = Mount(url, *args, "--upload-delay", "10m")
    for name, more in (("dirty", b"b" * 8192), ("clean", b"d" * 5000)):
        fd = os.open(mnt / name, os.O_WRONLY | os.O_APPEND)
        os.write(fd, more)
        os.fdatasync(fd)
        os.close(fd)
    m.kill_daemon()
    for p in cache.glob("meta.db*"):
        p.unlink()
    for name, b in old.items():
        (cache / name).write_bytes(b)
    m = Mount(url, *args, "--upload-delay", "200ms")
    try:
        assert (mnt / "dirty").read_bytes() == b"a" * 4096 + b"b" * 8192
        assert (mnt / "clean").read_bytes() == b"c" * 100 + b"d" * 5000
        assert "recovered from the cache files: 2 sizes, 1 files" in \
            m.output(), m.output()
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/dirty") == b"a" * 4096 + b"b" * 8192
    assert body(s3, f"{prefix}/clean") == b"c" * 100 + b"d" * 5000


def test_after_a_power_loss_the_cache_serves_no_byte_it_cannot_vouch_for(
        volume, s3, tmp_path):
    """A power loss can keep a cache file's range log and lose the fetched
    bytes it speaks of: the kernel writes the two back in no set order.
    Simulated by killing the daemon and zeroing the cache files (unwritten
    blocks read as zeros), then mounting as in another boot. The mount
    fetches the file again instead of serving zeros, and a small edit
    after it sends S3 the file with only that edit."""
    url, prefix = volume
    mnt, cache = tmp_path / "m", tmp_path / "c"
    args = (str(mnt), str(cache), "--durability", "local")
    data = os.urandom(300_000)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/f", Body=data)
    m = Mount(url, *args, env={"TIERFS_DEBUG_BOOT_ID": "boot-a"})
    assert (mnt / "f").read_bytes() == data  # now in the cache, clean
    m.kill_daemon()
    lost = [p for p in (cache / "data").iterdir() if p.name.isdigit()]
    assert lost
    for p in lost:
        size = p.stat().st_size
        os.truncate(p, 0)
        os.truncate(p, size)
    m = Mount(url, *args, "--upload-delay", "200ms",
              env={"TIERFS_DEBUG_BOOT_ID": "boot-b"})
    try:
        assert (mnt / "f").read_bytes() == data
        assert "the machine went down since the cache was last open: " \
            "1 cached files dropped" in m.output(), m.output()
        with open(mnt / "f", "r+b") as f:
            f.seek(1000)
            f.write(b"x" * 10)
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/f") == data[:1000] + b"x" * 10 + data[1010:]


def test_an_unlinked_open_file_written_after_its_upload_is_not_queued(
        volume, tmp_path):
    """An unlinked file is never uploaded, so a write to it through a
    descriptor still open leaves its dirty flag clear while its cache file
    holds dirty bytes. A worker that takes over keeps it for the kernel,
    and its start leaves it out of the upload queue (it said it queued
    it before)."""
    url, _ = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    root = Path(m.mountpoint)
    try:
        fd = os.open(root / "f", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b"uploaded\n")
        os.fsync(fd)  # --durability s3: in S3, clean
        os.unlink(root / "f")
        os.pwrite(fd, b"U", 0)
        os.fsync(fd)
        m.kill_worker()
        assert os.pread(fd, 100, 0) == b"Uploaded\n"
        os.close(fd)
        assert "recovered from the cache files" not in m.output(), \
            m.output()
    finally:
        assert m.unmount() == 0, m.output()
