"""test_fs_index.py: the index snapshot in PREFIX/.tierfs/ and LIST reconciliation.

A new node (an empty cache dir) starts from the snapshot: the whole tree
with its inode numbers, hard links and xattrs, which a LIST cannot give.
A snapshot older than the objects, and objects that other tools write,
change or delete under a mounted prefix, are reconciled by LIST; local
changes not yet uploaded always win. Run under
`eval "$(hack/s3-local.sh env)"`.
"""

import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from s3util import body, keys, skip_unless_s3
from tierfs_mount import TIERFS, Mount, is_mounted, wait_for

skip_unless_s3()

from conftest import MOUNT_ARGS  # noqa: E402


def snapshot_tree(root):
    """{path: (ino, mode, uid, gid, nlink, size, mtime_ns, xattrs, content)}"""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                what = Path(full).read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(full)
            else:
                what = None
            xattrs = {} if stat.S_ISLNK(st.st_mode) else {
                x: os.getxattr(full, x) for x in os.listxattr(full)}
            out[os.path.relpath(full, root)] = (
                st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_nlink,
                st.st_size, st.st_mtime_ns, xattrs, what)
    return out


def test_a_new_node_loads_the_snapshot_with_inodes_hard_links_and_xattrs(
        volume, s3, tmp_path):
    url, prefix = volume
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"), *MOUNT_ARGS)
    try:
        root = Path(a.mountpoint)
        # created in reverse name order, with gaps: a LIST (name order)
        # would number them differently
        for i in range(9, 0, -1):
            (root / f"f{i}").write_text(f"file {i}\n")
        os.unlink(root / "f5")
        (root / "d" / "e").mkdir(parents=True)
        (root / "d" / "data").write_bytes(os.urandom(100_000))
        os.link(root / "d" / "data", root / "hard")
        os.symlink("d/data", root / "sym")
        os.setxattr(root / "f1", "user.note", b"kept")
        os.chmod(root / "f2", 0o600)
        os.chown(root / "f3", 1234, 567)
        os.utime(root / "f4", ns=(1_500_000_000_123_456_789,) * 2)
        want = snapshot_tree(root)
    finally:
        assert a.unmount() == 0, a.output()
    assert f"{prefix}/.tierfs/index.db" in keys(s3, prefix + "/")

    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"), *MOUNT_ARGS)
    try:
        got = snapshot_tree(b.mountpoint)
        assert os.stat(Path(b.mountpoint) / "hard").st_ino == \
            os.stat(Path(b.mountpoint) / "d" / "data").st_ino
    finally:
        assert b.unmount() == 0, b.output()
    # directory mtimes and everything else, inode numbers included
    assert got == want
    # the hidden directory stays hidden
    assert ".tierfs" not in got


def test_a_snapshot_older_than_s3_is_reconciled_after_the_mount(
        volume, s3, bucket, tmp_path):
    url, prefix = volume
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"), *MOUNT_ARGS)
    try:
        root = Path(a.mountpoint)
        (root / "keep").write_text("keep\n")
        (root / "change").write_text("old content\n")
        (root / "gone").write_text("to be deleted\n")
        (root / "sub").mkdir()
    finally:
        assert a.unmount() == 0, a.output()
    # other tools change the prefix after the snapshot was written
    s3.put_object(Bucket=bucket, Key=f"{prefix}/sub/new.txt", Body=b"new\n")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/change",
                  Body=b"changed elsewhere, longer\n",
                  Metadata={"mode": str(0o100640)})
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/gone")

    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"), *MOUNT_ARGS)
    try:
        root = Path(b.mountpoint)
        wait_for(lambda: (root / "sub" / "new.txt").exists(), "new.txt")
        wait_for(lambda: not (root / "gone").exists(), "gone to go")
        wait_for(lambda: (root / "change").read_bytes() ==
                 b"changed elsewhere, longer\n", "the changed content")
        assert stat.S_IMODE(os.stat(root / "change").st_mode) == 0o640
        assert (root / "keep").read_text() == "keep\n"
        assert sorted(os.listdir(root)) == ["change", "keep", "sub"]
    finally:
        assert b.unmount() == 0, b.output()


def test_a_mounted_volume_picks_up_what_other_tools_change(
        volume, s3, bucket, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
              "--reconcile-interval", "1s")
    try:
        root = Path(m.mountpoint)
        (root / "mine").write_text("mine\n")
        (root / "theirs").write_text("first\n")
        wait_for(lambda: f"{prefix}/theirs" in keys(s3, prefix + "/"),
                 "the upload")
        # the kernel has looked these up and cached the answers
        assert not (root / "new").exists()
        assert (root / "theirs").read_text() == "first\n"

        s3.put_object(Bucket=bucket, Key=f"{prefix}/new", Body=b"hello\n")
        wait_for(lambda: (root / "new").exists(), "a new object to show")
        assert (root / "new").read_text() == "hello\n"

        s3.put_object(Bucket=bucket, Key=f"{prefix}/theirs",
                      Body=b"second version\n")
        wait_for(lambda: (root / "theirs").read_text() == "second version\n",
                 "a changed object to show")

        s3.delete_object(Bucket=bucket, Key=f"{prefix}/new")
        wait_for(lambda: not (root / "new").exists(), "a deleted object to go")
        assert (root / "mine").read_text() == "mine\n"

        # names the kernel never looked up, seen by listings only: the
        # kernel keeps a listing until the directory changes
        (root / "d").mkdir()
        (root / "d" / "a").write_text("a\n")
        wait_for(lambda: f"{prefix}/d/a" in keys(s3, prefix + "/"),
                 "the upload")
        assert os.listdir(root / "d") == ["a"]
        assert os.listdir(root / "d") == ["a"]
        mtime = (root / "d").stat().st_mtime
        s3.put_object(Bucket=bucket, Key=f"{prefix}/d/b", Body=b"b\n")
        wait_for(lambda: sorted(os.listdir(root / "d")) == ["a", "b"],
                 "a new object to be listed")
        assert (root / "d").stat().st_mtime > mtime
        s3.delete_object(Bucket=bucket, Key=f"{prefix}/d/b")
        wait_for(lambda: os.listdir(root / "d") == ["a"],
                 "a deleted object to leave the listing")
    finally:
        assert m.unmount() == 0, m.output()


def test_local_changes_not_yet_uploaded_win_over_the_listing(
        volume, s3, bucket, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "60s", "--reconcile-interval", "1s")
    try:
        root = Path(m.mountpoint)
        (root / "f").write_text("local edit\n")
        # another writer puts the same key while ours waits to upload
        s3.put_object(Bucket=bucket, Key=f"{prefix}/f", Body=b"remote\n")
        # and one that shows up in the meantime
        s3.put_object(Bucket=bucket, Key=f"{prefix}/other", Body=b"x\n")
        wait_for(lambda: (root / "other").exists(), "a reconciliation")
        time.sleep(1.5)  # one more pass
        assert (root / "f").read_text() == "local edit\n"
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/f") == b"local edit\n"


def test_what_tierfs_changes_during_a_reconciliation_is_not_undone(
        volume, s3, tmp_path):
    """A listing taken before our own uploads, deletions and renames must
    not bring back old names or drop new ones. Fault injection makes it
    certain: each pass acts on its LIST 3 s late, and each rename waits
    2 s between renaming in the store and deleting the old keys, so some
    pass finds an old name gone here and still in S3 (HEAD says so)."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
              "--reconcile-interval", "1s",
              env={"TIERFS_DEBUG_RECONCILE_PAUSE_MS": "3000",
                   "TIERFS_DEBUG_RENAME_PAUSE_MS": "2000"})
    try:
        root = Path(m.mountpoint)
        for i in range(3):
            (root / f"dir{i}").mkdir()
            for j in range(10):
                (root / f"dir{i}" / f"f{j}").write_text(f"{i}.{j}\n")
        (root / "doomed").write_text("x\n")
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)  # all of it in S3 and in the next listing
        os.close(fd)
        time.sleep(1)
        for i in range(3):
            os.rename(root / f"dir{i}", root / f"moved{i}")
        os.unlink(root / "doomed")
        (root / "fresh").write_text("new\n")
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        # the passes that overlapped, and a clean one: no old name may
        # come back, not even for a moment
        seen = set()
        deadline = time.monotonic() + 9
        while time.monotonic() < deadline:
            seen.update(os.listdir(root))
            time.sleep(0.05)
        assert seen == {"fresh", "moved0", "moved1", "moved2"}
        assert sorted(os.listdir(root)) == \
            ["fresh", "moved0", "moved1", "moved2"]
        for i in range(3):
            assert sorted(os.listdir(root / f"moved{i}")) == \
                sorted(f"f{j}" for j in range(10))
    finally:
        assert m.unmount() == 0, m.output()
    got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
    got -= {"", ".tierfs/index.db"}  # the volume's own marker, the index
    want = {"fresh"} | {f"moved{i}/" for i in range(3)} | \
        {f"moved{i}/f{j}" for i in range(3) for j in range(10)}
    assert got == want


def test_a_copied_multipart_object_reads_and_is_not_refreshed_every_listing(
        volume, s3, bucket, tmp_path):
    """Swift lists a server-side copy of a multipart object with another
    ETag than HEAD and GET give it ("md5" against "md5-N"). Reading it
    pinned to the listed ETag got 412, so the read failed with EIO; and
    every reconciliation took the listed ETag for a change and dropped the
    cached bytes. Both the first load (LIST + HEAD) and a reconciliation
    over a snapshot (what a restored CSI snapshot is) are covered."""
    from boto3.s3.transfer import TransferConfig
    url, prefix = volume
    data = os.urandom(24 << 20)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    s3.upload_file(str(src), bucket, f"{prefix}/orig.bin",
                   Config=TransferConfig(multipart_threshold=8 << 20,
                                         multipart_chunksize=8 << 20))
    s3.copy_object(Bucket=bucket, Key=f"{prefix}/copy.bin",
                   CopySource={"Bucket": bucket, "Key": f"{prefix}/orig.bin"})
    listed = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(
        Bucket=bucket, Prefix=f"{prefix}/")["Contents"]}
    head = s3.head_object(Bucket=bucket, Key=f"{prefix}/copy.bin")["ETag"]
    if listed[f"{prefix}/copy.bin"] == head:
        pytest.skip("this S3 lists the copy with its HEAD ETag")
    # the first load: LIST + HEAD
    m = Mount(url, str(tmp_path / "m1"), str(tmp_path / "c1"), *MOUNT_ARGS,
              "--capacity", "1G", "--reconcile-interval", "1s")
    try:
        root = Path(m.mountpoint)
        assert (root / "copy.bin").read_bytes() == data
        wait_for(lambda: m.output().count("reconciled with") >= 3,
                 "three reconciliations")
        assert (root / "copy.bin").read_bytes() == data
    finally:
        assert m.unmount() == 0, m.output()
    log = m.output()
    assert " 1 updated" not in log and "read of" not in log, log
    # a new node starts from the snapshot written at unmount
    m = Mount(url, str(tmp_path / "m2"), str(tmp_path / "c2"), *MOUNT_ARGS,
              "--capacity", "1G")
    try:
        assert (Path(m.mountpoint) / "copy.bin").read_bytes() == data
        (Path(m.mountpoint) / "touched").write_text("x\n")
    finally:
        assert m.unmount() == 0, m.output()
    assert "read of" not in m.output(), m.output()


def test_a_name_removed_while_its_upload_is_held_stays_removed(
        volume, s3, tmp_path):
    """An upload reads a name, then cancels any deletion queued for its
    key and writes there. Fault injection holds each upload 2 s between
    the two steps; a hard link and a directory removed in that window must
    stay removed: in S3 once the deletions are sent, and in the mount
    after a reconciliation. Before, the upload cancelled the deletion the
    unlink had just queued, copied the link's object back, and the next
    reconciliation (or a restart) brought the name back; a directory's
    marker came back the same way when the daemon died between the PUT
    and its clean-up."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
              "--reconcile-interval", "1s",
              env={"TIERFS_DEBUG_UPLOAD_PAUSE_MS": "2000"})
    try:
        root = Path(m.mountpoint)
        (root / "a").write_text("linked\n")
        os.link(root / "a", root / "b")
        (root / "d").mkdir()
        # the uploads are under way (200 ms delay), each held for 2 s
        # before its key, then the copy to b held for 2 s more
        time.sleep(0.5)
        os.rmdir(root / "d")
        time.sleep(2.5)  # a is written; the copy to b is held
        os.unlink(root / "b")
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        got = {k[len(prefix) + 1:] for k in keys(s3, prefix + "/")}
        assert {k for k in got if k and not k.startswith(".tierfs/")} == \
            {"a"}
        time.sleep(2.5)  # reconciliations (every 1 s) bring nothing back
        assert sorted(os.listdir(root)) == ["a"]
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/a") == b"linked\n"


def test_the_first_mount_syncs_the_cache_dir_after_its_loaded_marker(
        volume, tmp_path):
    """A power loss that took the cache dir's "loaded" marker but kept what
    fsync made durable since would have the next mount load the volume
    anew and drop those changes. The directory is synced after the marker
    is made, before the mount serves (strace -y names each fd's file). The
    store, downloaded whole from the index snapshot, is synced before the
    marker: a marker beside a torn store would stop every later mount."""
    url, _ = volume
    mnt, trace = tmp_path / "m", tmp_path / "trace"
    m = Mount(url, str(mnt), str(tmp_path / "c"), *MOUNT_ARGS)
    (mnt / "before").write_bytes(b"x")
    assert m.unmount() == 0, m.output()
    # a new cache dir: the first mount there loads the volume and marks it
    cache = tmp_path / "c2"
    tr = subprocess.Popen(
        ["strace", "-f", "-qq", "-y", "-o", str(trace),
         "-e", "trace=openat,fsync,fdatasync", TIERFS, "mount", url, str(mnt),
         "--cache-dir", str(cache), *MOUNT_ARGS],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (is_mounted(str(mnt)) and (cache / "loaded").exists()):
            assert time.monotonic() < deadline, "not mounted in 60 s"
            time.sleep(0.05)
        assert (mnt / "before").read_bytes() == b"x"
    finally:
        r = subprocess.run([TIERFS, "unmount", str(mnt), "--cache-dir",
                            str(cache)], capture_output=True, text=True,
                           timeout=120)
        tr.wait(timeout=120)
    assert r.returncode == 0, r.stderr
    lines = trace.read_text().splitlines()
    made = [i for i, line in enumerate(lines) if "openat(" in line and
            f'"{cache}/loaded"' in line and "O_CREAT" in line]
    assert made, "no openat of the marker in the trace"

    def synced(path):
        # "fsync(5</path>) = 0", or "fsync(5</path> <unfinished ...>"
        # when another thread's call came in between
        return re.compile(rf"\b(fsync|fdatasync)\(\d+<{re.escape(path)}>[) ]")
    store = [i for i, line in enumerate(lines[:made[0]])
             if synced(f"{cache}/meta.db").search(line) or
             synced(f"{cache}/meta.db.fetch").search(line)]
    assert store, "the store is not synced before the marker"
    after = [i for i, line in enumerate(lines[made[0]:])
             if synced(str(cache)).search(line)]
    assert after, "\n".join(lines[made[0]:made[0] + 40])


@pytest.mark.parametrize("damage", ["not-sqlite", "torn-index-page"])
def test_a_damaged_snapshot_is_refused_and_the_listing_loads_the_volume(
        volume, s3, bucket, tmp_path, damage):
    """An index snapshot that is not a sound SQLite file (overwritten by
    another tool, or a page of it damaged) is refused with a message, and
    the new node loads the volume from the listing instead."""
    url, prefix = volume
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"), *MOUNT_ARGS)
    try:
        root = Path(a.mountpoint)
        (root / "d").mkdir()
        for i in range(300):
            (root / "d" / f"f{i:03}").write_text(f"file {i}\n")
        (root / "top").write_bytes(b"top\n")
    finally:
        assert a.unmount() == 0, a.output()
    key = f"{prefix}/.tierfs/index.db"
    snap = bytearray(body(s3, key))
    if damage == "not-sqlite":
        snap = bytearray(b"this is no database " * 200)
    else:
        # a leaf of an index no load reads (dentries by name, their only
        # one; the load reads them by cookie, the table's key): only the
        # snapshot's check finds it; the header still reads as SQLite
        path = tmp_path / "index.db"
        path.write_bytes(snap)
        con = sqlite3.connect(path)
        pageno, = con.execute(
            "SELECT pageno FROM dbstat WHERE name = (SELECT name FROM "
            "pragma_index_list('dentries')) AND pagetype = 'leaf'").fetchone()
        page, = con.execute("PRAGMA page_size").fetchone()
        con.close()
        at = (pageno - 1) * page
        snap[at + 8:at + page] = b"\xff" * (page - 8)
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(snap))

    b = Mount(url, str(tmp_path / "b"), str(tmp_path / "cb"), *MOUNT_ARGS)
    try:
        names = sorted(os.listdir(Path(b.mountpoint) / "d"))
        assert names == [f"f{i:03}" for i in range(300)]
        assert (Path(b.mountpoint) / "d" / "f123").read_text() == "file 123\n"
        assert (Path(b.mountpoint) / "top").read_bytes() == b"top\n"
    finally:
        assert b.unmount() == 0, b.output()
    assert "the index snapshot is unusable" in b.output()


def test_uploads_a_dead_process_left_are_aborted_by_the_next_mount(
        volume, s3, bucket, tmp_path):
    """A multipart upload in progress under the volume's prefix can only be
    one a killed tierfs left (one writer per volume): the next read-write
    mount aborts it before it serves, whether it starts from the index
    snapshot or from a listing. A read-only mount leaves it, and so does
    every mount the upload of a volume whose prefix merely starts the
    same."""
    url, prefix = volume

    def open_uploads(p):
        got = s3.list_multipart_uploads(Bucket=bucket, Prefix=p)
        return {u["Key"] for u in got.get("Uploads", [])}

    other = s3.create_multipart_upload(Bucket=bucket, Key=f"{prefix}x/big")
    try:
        for start in ("listing", "snapshot"):
            s3.create_multipart_upload(Bucket=bucket, Key=f"{prefix}/big")
            assert open_uploads(prefix + "/") == {f"{prefix}/big"}
            ro = Mount(url, str(tmp_path / f"r-{start}"),
                       str(tmp_path / f"cr-{start}"), *MOUNT_ARGS,
                       "--read-only")
            assert ro.unmount() == 0, ro.output()
            assert open_uploads(prefix + "/") == {f"{prefix}/big"}
            m = Mount(url, str(tmp_path / start), str(tmp_path / f"c-{start}"),
                      *MOUNT_ARGS)
            try:
                assert open_uploads(prefix + "/") == set()
                assert "aborted 1 multipart uploads" in m.output()
                # the snapshot the second round starts from
                (Path(m.mountpoint) / start).write_text(start)
            finally:
                assert m.unmount() == 0, m.output()
            assert open_uploads(f"{prefix}x/") == {f"{prefix}x/big"}
    finally:
        s3.abort_multipart_upload(Bucket=bucket, Key=f"{prefix}x/big",
                                  UploadId=other["UploadId"])


def test_an_unmount_stops_a_reconciliation_between_its_listing_requests(
        volume, s3, bucket, tmp_path):
    """A reconciliation lists the whole prefix, 1000 keys a request (100
    requests for 100k files). An unmount while it lists waits for the
    request in flight, not for the rest: here 2,100 objects make three
    pages, a fault proxy holds each LIST for 1.5 s, and the unmount comes
    while the first is held. The second page is never asked for."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from faultproxy import FaultProxy
    url, prefix = volume
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket=bucket,
                                            Key=f"{prefix}/f{i:05}", Body=b""),
                    range(2100)))
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    m = None

    def lists(since):
        return [e for e in list(proxy.log)[since:]
                if e["method"] == "GET" and "list-type=2" in e["path"]]
    try:
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS,
                  "--reconcile-interval", "1s",
                  env={"AWS_ENDPOINT_URL": proxy.url})
        assert len(os.listdir(m.mountpoint)) == 2100
        since = len(proxy.log)
        proxy.add_rule("delay:1500", method="GET", regex="list-type=2",
                       count=100)
        wait_for(lambda: lists(since), "a reconciliation's LIST")
        done, m = m, None
        assert done.unmount() == 0, done.output()
        assert "reconciliation stopped" in done.output()
    finally:
        if m:
            m.unmount()
        proxy.stop()
    got = lists(since)
    assert len(got) == 1, [e["path"] for e in got]
