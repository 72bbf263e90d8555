"""test_fs_s3fs_interop.py: tierfs and s3fs (Debian's) read each other's trees on the same prefix.

Proves the layout of DESIGN §4 in both directions: what tierfs writes,
s3fs shows with the same contents, modes, owners, mtimes, symlinks and
empty directories; what s3fs writes, tierfs shows the same way. Skipped
without AWS_ENDPOINT_URL, /dev/fuse or s3fs.
"""

import os
import stat
import subprocess
import time
from pathlib import Path

from s3util import BUCKET, skip_unless_s3
from tierfs_mount import Mount, is_mounted

skip_unless_s3(fuse=True, tools=("s3fs",))


class S3fs:
    def __init__(self, prefix, mountpoint):
        self.mountpoint = mountpoint
        os.makedirs(mountpoint, exist_ok=True)
        env = dict(os.environ)
        for v in ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # plain http here
            env.pop(v, None)
        subprocess.run(["s3fs", f"{BUCKET}:/{prefix}", mountpoint,
                        "-o", f"url={os.environ['AWS_ENDPOINT_URL']}",
                        "-o", "use_path_request_style", "-o", "sigv4",
                        "-o", f"endpoint={os.environ.get('AWS_REGION', 'us-east-1')}",
                        "-o", "stat_cache_expire=1"],
                       env=env, check=True, timeout=60)
        deadline = time.monotonic() + 30
        while not is_mounted(mountpoint):
            assert time.monotonic() < deadline, "s3fs did not mount"
            time.sleep(0.1)

    def unmount(self):
        subprocess.run(["fusermount3", "-u", self.mountpoint],
                       check=True)
        deadline = time.monotonic() + 30
        while is_mounted(self.mountpoint) and time.monotonic() < deadline:
            time.sleep(0.1)


def tree(root):
    """{relative path: (type and mode, uid, gid, size, mtime s, content or target)}

    Leaves out PREFIX/.tierfs/, tierfs's volume-private data (DESIGN §4):
    s3fs shows it, tierfs hides it, and it is not part of the user's tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".tierfs" in dirnames:
            dirnames.remove(".tierfs")
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                what = os.readlink(full)
            elif stat.S_ISREG(st.st_mode):
                what = Path(full).read_bytes()
            else:
                what = None
            out[os.path.relpath(full, root)] = (
                st.st_mode, st.st_uid, st.st_gid,
                st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                int(st.st_mtime), what)
    return out


def populate(root):
    root = Path(root)
    (root / "docs").mkdir()
    (root / "empty").mkdir()
    (root / "docs" / "a.txt").write_text("alpha\n")
    (root / "docs" / "b.bin").write_bytes(os.urandom(70_000))
    os.chmod(root / "docs" / "a.txt", 0o640)
    os.chown(root / "docs" / "a.txt", 1000, 100)
    os.chmod(root / "docs", 0o750)
    os.symlink("docs/a.txt", root / "link")
    os.utime(root / "docs" / "b.bin", (1_600_000_000, 1_650_000_000))


def test_s3fs_sees_what_tierfs_wrote(volume, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "t"), str(tmp_path / "cache"))
    try:
        populate(m.mountpoint)
        want = tree(m.mountpoint)
    finally:
        assert m.unmount() == 0, m.output()
    s = S3fs(prefix, str(tmp_path / "s"))
    try:
        got = tree(s.mountpoint)
    finally:
        s.unmount()
    assert got == want


def test_tierfs_sees_what_s3fs_wrote(volume, tmp_path):
    url, prefix = volume
    s = S3fs(prefix, str(tmp_path / "s"))
    try:
        populate(s.mountpoint)
        want = tree(s.mountpoint)
    finally:
        s.unmount()
    m = Mount(url, str(tmp_path / "t"), str(tmp_path / "cache"))
    try:
        got = tree(m.mountpoint)
    finally:
        assert m.unmount() == 0, m.output()
    assert got == want
