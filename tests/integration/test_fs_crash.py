"""test_fs_crash.py: a randomized workload with SIGKILL at random points, checked against a model.

The test applies writes, appends, truncates, creates, mkdirs, renames (of
files and of directories with their children), hard links, unlinks and
chmods to the mount and to a model of its own. Between operations, at
random, it kills the worker (the supervisor replaces it on the live mount)
or the whole daemon (then it remounts on the same cache dir): 50 kills in
all, while uploads (100 ms after each change) are in flight. After every
restart the mounted tree must equal the model. At the end: everything is
fsynced, the daemon is killed, the cache dir deleted, and a fresh mount
must show the model (names, modes and bytes: which names are hard links of
each other lives in the index snapshot); then a clean unmount must leave exactly the model in
S3, with no multipart upload left behind. Run under
`eval "$(hack/s3-local.sh env)"`.
"""

import os
import random
import shutil
import stat
import time
from pathlib import Path

from s3util import BUCKET, body, keys, skip_unless_s3
from tierfs_mount import Mount, is_mounted

skip_unless_s3()

SEED = int(os.environ.get("TIERFS_CRASH_SEED", "20261129"))
KILLS = int(os.environ.get("TIERFS_CRASH_KILLS", "50"))
ARGS = ("--upload-delay", "100ms", "--uid", "0", "--gid", "0")


class Model:
    """Paths to inodes; inodes hold bytes and a mode. Hard links share one."""

    def __init__(self):
        self.dirs = {""}
        self.names = {}  # path -> inode id
        self.inodes = {}  # id -> [bytearray, mode]
        self.next = 1

    def files(self):
        return sorted(self.names)

    def children(self, d):
        pre = d + "/"
        return [p for p in list(self.names) + list(self.dirs)
                if p.startswith(pre)]


def tree(root):
    """{path: ("d", mode) | ("f", mode, bytes, ino)} of a mounted tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for n in dirnames:
            p = os.path.normpath(os.path.join(rel, n))
            out[p] = ("d", stat.S_IMODE(os.lstat(os.path.join(root, p)).st_mode))
        for n in filenames:
            p = os.path.normpath(os.path.join(rel, n))
            st = os.lstat(os.path.join(root, p))
            out[p] = ("f", stat.S_IMODE(st.st_mode),
                      Path(root, p).read_bytes(), st.st_ino)
    return out


def expect(m, got, links=True):
    want = {d: ("d", 0o755) for d in m.dirs if d}
    for p, ino in m.names.items():
        data, mode = m.inodes[ino]
        want[p] = ("f", mode, bytes(data))
    short = {p: v[:3] for p, v in got.items()}
    assert short == want
    if not links:
        return
    # hard links: the same model inode is one inode in the mount
    by_model = {}
    for p, ino in m.names.items():
        by_model.setdefault(ino, set()).add(got[p][3])
    assert all(len(v) == 1 for v in by_model.values())


def step(rng, m, root, log):
    """One random operation, applied to the mount and the model; logged."""
    files = m.files()
    dirs = sorted(m.dirs)
    op = rng.choice(["write", "write", "append", "truncate", "overwrite",
                     "mkdir", "rename", "renamedir", "link", "unlink",
                     "chmod", "rmdir"])
    before = (set(m.names), set(m.dirs))
    _step(rng, m, root, op, files, dirs)
    gone = (before[0] - set(m.names)) | (before[1] - m.dirs)
    new = (set(m.names) - before[0]) | (m.dirs - before[1])
    log.write(f"{op}: -{sorted(gone)} +{sorted(new)}\n")


def _step(rng, m, root, op, files, dirs):
    if op == "write" or not files:
        d = rng.choice(dirs)
        p = f"{d}/f{rng.randrange(10**6)}".lstrip("/")
        if p in m.names or p in m.dirs:
            return
        size = rng.choice([0, 100, 5000, 70000, 1 << 20])
        data = rng.randbytes(size)
        Path(root, p).write_bytes(data)
        m.inodes[m.next] = [bytearray(data), 0o644]
        m.names[p] = m.next
        m.next += 1
    elif op == "append":
        p = rng.choice(files)
        extra = rng.randbytes(rng.randrange(1, 9000))
        with open(Path(root, p), "ab") as f:
            f.write(extra)
        m.inodes[m.names[p]][0] += extra
    elif op == "truncate":
        p = rng.choice(files)
        data = m.inodes[m.names[p]][0]
        n = rng.randrange(0, len(data) + 5000)
        os.truncate(Path(root, p), n)
        if n < len(data):
            del data[n:]
        else:
            data += bytes(n - len(data))
    elif op == "overwrite":
        p = rng.choice(files)
        data = m.inodes[m.names[p]][0]
        off = rng.randrange(0, len(data) + 1)
        chunk = rng.randbytes(rng.randrange(1, 5000))
        with open(Path(root, p), "r+b") as f:
            f.seek(off)
            f.write(chunk)
        end = off + len(chunk)
        if end > len(data):
            data += bytes(end - len(data))
        data[off:end] = chunk
    elif op == "mkdir":
        p = f"{rng.choice(dirs)}/d{rng.randrange(10**6)}".lstrip("/")
        if p in m.dirs or p in m.names:
            return
        os.mkdir(Path(root, p))
        m.dirs.add(p)
    elif op == "rename":
        src = rng.choice(files)
        dst = f"{rng.choice(dirs)}/r{rng.randrange(10**6)}".lstrip("/")
        if dst in m.dirs or dst in m.names:
            return
        os.rename(Path(root, src), Path(root, dst))
        m.names[dst] = m.names.pop(src)
    elif op == "renamedir":
        cand = [d for d in dirs if d]
        if not cand:
            return
        src = rng.choice(cand)
        parent = rng.choice([d for d in dirs
                             if d != src and not d.startswith(src + "/")])
        dst = f"{parent}/m{rng.randrange(10**6)}".lstrip("/")
        if dst in m.dirs or dst in m.names:
            return
        os.rename(Path(root, src), Path(root, dst))
        moved = m.children(src)
        m.dirs.discard(src)
        m.dirs.add(dst)
        for p in moved:
            q = dst + p[len(src):]
            if p in m.dirs:
                m.dirs.discard(p)
                m.dirs.add(q)
            else:
                m.names[q] = m.names.pop(p)
    elif op == "link":
        src = rng.choice(files)
        dst = f"{rng.choice(dirs)}/h{rng.randrange(10**6)}".lstrip("/")
        if dst in m.dirs or dst in m.names:
            return
        os.link(Path(root, src), Path(root, dst))
        m.names[dst] = m.names[src]
    elif op == "unlink":
        p = rng.choice(files)
        os.unlink(Path(root, p))
        ino = m.names.pop(p)
        if ino not in m.names.values():
            del m.inodes[ino]
    elif op == "chmod":
        p = rng.choice(files)
        mode = rng.choice([0o600, 0o640, 0o644, 0o755])
        os.chmod(Path(root, p), mode)
        m.inodes[m.names[p]][1] = mode
    elif op == "rmdir":
        empty = [d for d in dirs if d and not m.children(d)]
        if empty:
            d = rng.choice(empty)
            os.rmdir(Path(root, d))
            m.dirs.discard(d)


def kill_daemon(mount):
    mount.kill_daemon()
    assert not is_mounted(mount.mountpoint)


def keep_evidence(tmp_path, mount, s3, prefix):
    """The op log, every daemon's log (they append to one file), what S3
    lists and a copy of the metadata store into build/test-logs/, for a
    failure that a rerun may not show."""
    logs = Path(__file__).resolve().parents[2] / "build" / "test-logs"
    logs.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / "ops.log", logs / "crash-ops.log")
    (logs / "crash-daemon.log").write_text(mount.output())
    (logs / "crash-s3-keys.txt").write_text(
        "\n".join(sorted(keys(s3, prefix + "/"))) + "\n")
    for name in ("meta.db", "meta.db-wal"):
        if (tmp_path / "c" / name).exists():
            shutil.copy(tmp_path / "c" / name, logs / f"crash-{name}")


def test_fifty_kills_lose_nothing_acknowledged(volume, s3, tmp_path):
    url, prefix = volume
    rng = random.Random(SEED)
    mnt, cache = str(tmp_path / "m"), str(tmp_path / "c")
    m = Model()
    mount = Mount(url, mnt, cache, *ARGS)
    kills = daemon_kills = 0
    log = open(tmp_path / "ops.log", "w", buffering=1)  # read it on failure
    try:
        while kills < KILLS:
            for _ in range(rng.randrange(3, 25)):
                step(rng, m, mnt, log)
            time.sleep(rng.random() * 0.15)  # uploads in flight
            kills += 1
            if rng.random() < 0.3:
                log.write(f"kill {kills}: the daemon\n")
                kill_daemon(mount)
                daemon_kills += 1
                mount = Mount(url, mnt, cache, *ARGS)
            else:
                log.write(f"kill {kills}: the worker\n")
                mount.kill_worker()
            try:
                expect(m, tree(mnt))
            except AssertionError:
                keep_evidence(tmp_path, mount, s3, prefix)
                raise
        # fsynced means in S3: kill, lose the cache dir, mount afresh
        fd = os.open(mnt, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        kill_daemon(mount)
        shutil.rmtree(cache)
        # a new node: the dead one still holds the lease. Link groups live
        # in the index snapshot (unmount, every 5 min), which the kills
        # never let it write: links made since show as separate files.
        mount = Mount(url, mnt, cache, *ARGS, "--take-over")
        expect(m, tree(mnt), links=False)
    finally:
        rc = mount.unmount()
    assert rc == 0, mount.output()
    assert daemon_kills >= 5
    # S3 holds exactly the model, whole objects, no upload left open
    got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
    got -= {"", ".tierfs/index.db"}
    want = {p for p in m.names} | {d + "/" for d in m.dirs if d}
    assert {k for k in got if not k.endswith("/")} == \
        {k for k in want if not k.endswith("/")}
    assert {k for k in got if k.endswith("/")} <= want
    for p, ino in m.names.items():
        assert body(s3, f"{prefix}/{p}") == bytes(m.inodes[ino][0]), p
    uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix + "/")
    assert not uploads.get("Uploads")
