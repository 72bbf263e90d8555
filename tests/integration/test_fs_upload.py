"""test_fs_upload.py: how file contents reach S3: a small edit to a big file re-sends only the parts it touched; a burst of new files uploads once it has passed.

Run under `eval "$(hack/s3-local.sh env)"`.
"""

import hashlib
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from faultproxy import FaultProxy
from s3util import body, keys, skip_unless_s3
from tierfs_mount import Mount, cached_bytes, wait_for

skip_unless_s3()

from conftest import MOUNT_ARGS  # noqa: E402

MIB = 1 << 20


def test_a_small_edit_to_a_big_file_sends_one_part_and_copies_the_rest(
        volume, s3, tmp_path):
    url, prefix = volume
    data = bytearray(os.urandom(40 * MIB))  # parts of 16, 16 and 8 MiB
    a = Mount(url, str(tmp_path / "a"), str(tmp_path / "ca"), *MOUNT_ARGS)
    try:
        (Path(a.mountpoint) / "big").write_bytes(data)
    finally:
        assert a.unmount() == 0, a.output()

    # a new node: nothing of the file is cached
    cache = tmp_path / "cb"
    b = Mount(url, str(tmp_path / "b"), str(cache), *MOUNT_ARGS)
    try:
        edit = os.urandom(4096)
        fd = os.open(Path(b.mountpoint) / "big", os.O_WRONLY)
        try:
            os.pwrite(fd, edit, 20 * MIB + 123)
            os.fsync(fd)  # in S3 when this returns
        finally:
            os.close(fd)
        data[20 * MIB + 123:20 * MIB + 123 + 4096] = edit
        got = body(s3, f"{prefix}/big")
        assert hashlib.md5(got).hexdigest() == hashlib.md5(data).hexdigest()
        # only the edited part was fetched to be sent
        assert cached_bytes(cache) <= 16 * MIB + MIB
        assert "sent 1 of 3 parts, copied 2 in S3" in b.output()
    finally:
        assert b.unmount() == 0, b.output()


def test_a_big_file_that_grew_and_shrank_keeps_its_bytes(volume, s3, tmp_path):
    url, prefix = volume
    data = bytearray(os.urandom(36 * MIB))
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    try:
        p = Path(m.mountpoint) / "big"
        p.write_bytes(data)
        fd = os.open(p, os.O_RDWR)
        try:
            os.fsync(fd)
            # cut into the second part, then grow past the old end: the
            # regrown bytes are zeros, never the old ones
            os.truncate(fd, 20 * MIB)
            os.truncate(fd, 40 * MIB)
            os.pwrite(fd, b"tail", 40 * MIB - 4)
            os.fsync(fd)
        finally:
            os.close(fd)
        want = bytes(data[:20 * MIB]) + bytes(20 * MIB - 4) + b"tail"
        got = body(s3, f"{prefix}/big")
        assert len(got) == len(want)
        assert hashlib.md5(got).hexdigest() == hashlib.md5(want).hexdigest()
        assert "sent 2 of 3 parts, copied 1 in S3" in m.output()
    finally:
        assert m.unmount() == 0, m.output()


def test_files_of_many_parts_sent_at_once_arrive_whole(volume, s3, tmp_path):
    """Two files of six and five 16 MiB parts, each part different, sent
    at once: more parts than the 64 MiB of body copies the client holds,
    so copies are reused from part to part and from file to file."""
    url, prefix = volume
    parts = {"a": [os.urandom(16 * MIB) for _ in range(6)],
             "b": [os.urandom(16 * MIB) for _ in range(4)] + [os.urandom(MIB)]}
    args = list(MOUNT_ARGS)
    args[args.index("--capacity") + 1] = "256M"
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *args)
    try:
        fds = {}
        for name, chunks in parts.items():
            fds[name] = os.open(Path(m.mountpoint) / name,
                                os.O_WRONLY | os.O_CREAT, 0o644)
            for c in chunks:
                os.write(fds[name], c)
        # both uploads in flight together
        syncs = [threading.Thread(target=os.fsync, args=(fd,))
                 for fd in fds.values()]
        for t in syncs:
            t.start()
        for t in syncs:
            t.join()
        for fd in fds.values():
            os.close(fd)
        for name, chunks in parts.items():
            got = body(s3, f"{prefix}/{name}")
            assert len(got) == sum(map(len, chunks))
            assert hashlib.md5(got).hexdigest() == \
                hashlib.md5(b"".join(chunks)).hexdigest(), name
    finally:
        assert m.unmount() == 0, m.output()


def renameat2(old, new, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(old), at_fdcwd,
                      os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), old)


RENAME_EXCHANGE = 2


def test_rename_exchange_swaps_two_files_here_and_in_s3(volume, s3, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    try:
        root = Path(m.mountpoint)
        (root / "d").mkdir()
        (root / "a").write_bytes(b"A" * 100_000)
        (root / "d" / "b").write_text("bee\n")
        os.chmod(root / "d" / "b", 0o600)
        ia, ib = os.stat(root / "a").st_ino, os.stat(root / "d" / "b").st_ino
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)  # both in S3 first
        os.close(fd)
        renameat2(root / "a", root / "d" / "b", RENAME_EXCHANGE)
        assert (root / "a").read_text() == "bee\n"
        assert (root / "d" / "b").read_bytes() == b"A" * 100_000
        assert os.stat(root / "a").st_ino == ib
        assert stat_mode(root / "a") == 0o600
        # a directory cannot take part (yet): EINVAL, nothing changes
        try:
            renameat2(root / "a", root / "d", RENAME_EXCHANGE)
            raise AssertionError("exchanging with a directory succeeded")
        except OSError as e:
            assert e.errno == 22
        assert os.stat(root / "d" / "b").st_ino == ia
    finally:
        assert m.unmount() == 0, m.output()
    assert body(s3, f"{prefix}/a") == b"bee\n"
    assert body(s3, f"{prefix}/d/b") == b"A" * 100_000
    # a new node sees the swap
    n = Mount(url, str(tmp_path / "n"), str(tmp_path / "c2"), *MOUNT_ARGS)
    try:
        assert (Path(n.mountpoint) / "a").read_text() == "bee\n"
        assert stat_mode(Path(n.mountpoint) / "a") == 0o600
    finally:
        assert n.unmount() == 0, n.output()


def stat_mode(p):
    return os.stat(p).st_mode & 0o7777


def test_a_name_replaced_during_its_upload_ends_with_the_new_content(
        volume, s3, tmp_path):
    """Uploads run in parallel: the new file's upload to a key must wait for
    the old file's, whose clean-up deletes that key when it finds its name
    gone. Otherwise S3 ends with nothing, or the old bytes. The old file's
    upload starts after 100 ms; its name is replaced at varying times."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "100ms")
    rounds = 10
    try:
        root = Path(m.mountpoint)
        old = os.urandom(12 * MIB)
        for r in range(rounds):
            p = root / f"f{r}"
            p.write_bytes(old)
            time.sleep(0.1 + 0.02 * r)  # into the old file's upload
            os.unlink(p)
            p.write_bytes(b"new %d\n" % r)
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        time.sleep(1)
    finally:
        assert m.unmount() == 0, m.output()
    for r in range(rounds):
        assert body(s3, f"{prefix}/f{r}") == b"new %d\n" % r


# O_DIRECT, so that each write reaches the daemon at once rather than
# staying in the page cache until the next fsync
WRITER = r'''
import mmap, os, random, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    buf[:] = os.urandom(4096)
    os.pwrite(fd, buf, random.randrange(2048) * 4096)
    n += 1
os.close(fd)
print(n)
'''


def test_fsync_while_another_process_keeps_writing_succeeds(
        volume, s3, tmp_path):
    """The upload hashed the file, then sent it; a write in between made S3
    answer BadDigest, so fsync failed with EIO (and the health file said S3
    was failing) for as long as the writer went on. The body is now read
    once and that copy is hashed and sent."""
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"), *MOUNT_ARGS)
    root = Path(m.mountpoint)
    try:
        path = root / "busy.bin"
        path.write_bytes(os.urandom(8 << 20))
        w = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "4"],
                             stdout=subprocess.PIPE, text=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            for _ in range(6):
                time.sleep(0.4)
                os.fsync(fd)  # EIO before the fix
        finally:
            os.close(fd)
        out, _ = w.communicate(timeout=60)
        assert w.returncode == 0 and int(out) > 100
        health = (tmp_path / "c" / "health").read_text()
        assert "s3=ok" in health, health
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        assert body(s3, f"{prefix}/busy.bin") == path.read_bytes()
    finally:
        assert m.unmount() == 0, m.output()


def test_a_write_while_its_file_uploads_is_never_called_clean(
        volume, s3, tmp_path):
    """A write to a file already queued for upload costs no metadata
    write. An upload takes the file off the queue and then waits its turn
    (here: held before its claim); a write meanwhile queued the file again.
    The upload read the change counter after that write, and the writes
    during its PUT, finding the file queued, left the counter alone: the
    upload called the file clean, and neither the flusher nor fsync ever
    sent those writes (test_fsync_while_another_process_keeps_writing_
    succeeds found it, now and then, under load)."""
    url, prefix = volume
    key = f"{prefix}/f"
    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL"])
    proxy.start()
    m = None
    try:
        # the first upload: held 3 s before its claim, its PUT 2 s
        proxy.add_rule("delay:2000", method="PUT", path=f"/{key}", count=1)
        m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
                  *MOUNT_ARGS,
                  env={"AWS_ENDPOINT_URL": proxy.url,
                       "TIERFS_DEBUG_SYNC_PAUSE_MS": "3000"})
        path = Path(m.mountpoint) / "f"
        path.write_bytes(b"a" * 65536)  # queued; the flusher takes it
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)  # each write is sent
        buf = mmap.mmap(-1, 4096)
        try:
            time.sleep(1.0)  # the flusher has it, held before its claim
            buf[:] = b"b" * 4096
            os.pwrite(fd, buf, 0)  # queues it again
            put = wait_for(lambda: proxy.requests(method="PUT",
                                                  path=f"/{key}"),
                           m.output, every=0.01)
            buf[:] = b"c" * 4096
            os.pwrite(fd, buf, 8192)  # while the PUT is held
            wait_for(lambda: put[0]["status"] is not None, m.output,
                     every=0.01)
            time.sleep(0.5)  # the upload is over: the file was called clean
            os.fsync(fd)  # --durability s3: sends the "c"s
        finally:
            os.close(fd)
        want = path.read_bytes()
        assert want[8192:12288] == b"c" * 4096
        assert body(s3, key) == want
    finally:
        if m:
            assert m.unmount() == 0, m.output()
        proxy.stop()


def create_for(d, seconds, rate=150):
    """Creates 1-byte files d/f00000... at about rate a second (well over a
    burst's 64 per upload delay, and few enough to upload soon after) for
    the given seconds; returns when each was made (monotonic)."""
    made = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        (d / f"f{len(made):05}").write_bytes(b"x")
        made.append(time.monotonic())
        time.sleep(max(0.0, t0 + len(made) / rate - time.monotonic()))
    return made


def files_sent(s3, prefix):
    """The keys of create_for()'s files in S3."""
    return {k for k in keys(s3, prefix + "/") if k.startswith(prefix + "/f")}


def test_a_burst_of_new_files_uploads_once_it_has_passed(volume, s3, tmp_path):
    # tar x, pip install: while new files keep coming at 64 or more per
    # upload delay, their uploads wait (up to 5 delays) for the burst to
    # pass, so they do not take the machine from it
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "2s")
    try:
        made = create_for(Path(m.mountpoint), 4.0)
        sent = files_sent(s3, prefix)
        # a burst at all: well over 64 new files per 2 s, all along
        gaps = [b - a for a, b in zip(made, made[1:])]
        assert len(made) >= 300 and max(gaps) < 1.0, (len(made), max(gaps))
        # without the rule the first files, 4 s old, would be in S3 by now
        assert sent == set(), sorted(sent)[:5]
        deadline = time.monotonic() + 60
        while len(sent) < len(made) and time.monotonic() < deadline:
            time.sleep(0.2)
            sent = files_sent(s3, prefix)
        assert len(sent) == len(made)
    finally:
        assert m.unmount() == 0, m.output()


def test_a_burst_that_goes_on_holds_uploads_back_for_5_delays_at_most(
        volume, s3, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--upload-delay", "1s")
    try:
        d = Path(m.mountpoint)
        made = create_for(d, 10.0)
        sent = files_sent(s3, prefix)
        gaps = [b - a for a, b in zip(made, made[1:])]
        assert len(made) >= 700 and max(gaps) < 0.5, (len(made), max(gaps))
        # the files made in the first second are 9 s old, past 5 delays:
        # they are going, the burst notwithstanding (without the bound,
        # none would be sent before it ends)
        first = {f"{prefix}/f{i:05}" for i, t in enumerate(made)
                 if t - made[0] < 1.0}
        assert first & sent, (len(first), len(sent))
    finally:
        assert m.unmount() == 0, m.output()


def present(s3, key):
    return key in keys(s3, key)


def append_for(path, seconds, chunk=MIB, every=0.1):
    """Appends chunk-sized pieces of random bytes to path every `every`
    seconds for the given seconds, each fsynced so that the daemon sees it
    at once (the kernel would otherwise hold it in its page cache);
    returns every byte written."""
    data = bytearray()
    t0 = time.monotonic()
    with open(path, "ab", buffering=0) as f:
        while time.monotonic() - t0 < seconds:
            piece = os.urandom(chunk)
            f.write(piece)
            os.fsync(f.fileno())
            data += piece
            time.sleep(max(0.0, t0 + len(data) / chunk * every - time.monotonic()))
    return bytes(data)


def test_a_big_file_being_written_uploads_once_its_writes_stop(
        volume, s3, tmp_path):
    # a dataset being written: each upload while it grows would send a
    # version the next writes replace, and copy in S3 every part sent
    # before; it waits for the writes to stop instead
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--durability", "local", "--upload-delay", "2s")
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if present(s3, f"{prefix}/data.bin"):
                seen.append(time.monotonic())
            time.sleep(0.1)

    try:
        path = Path(m.mountpoint) / "data.bin"
        first = os.urandom(17 * MIB)  # past the 16 MiB of a single PUT
        path.write_bytes(first)
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            rest = append_for(path, 6.0)
            ended = time.monotonic()
            # uploaded 2 s after the first write without the rule
            assert not seen, f"in S3 {ended - seen[0]:.1f} s before the writes stopped"
            deadline = ended + 30
            while not seen and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            watcher.join()
        assert seen, "not in S3 30 s after the writes stopped"
        assert body(s3, f"{prefix}/data.bin") == first + rest
        assert "copied" not in m.output()  # one upload: no part copied
    finally:
        assert m.unmount() == 0, m.output()


def test_a_big_file_written_without_end_waits_15_delays_at_most(
        volume, s3, tmp_path):
    url, prefix = volume
    m = Mount(url, str(tmp_path / "m"), str(tmp_path / "c"),
              "--durability", "local", "--upload-delay", "200ms")
    try:
        path = Path(m.mountpoint) / "log.bin"
        path.write_bytes(os.urandom(17 * MIB))
        t0 = time.monotonic()
        writer = threading.Thread(target=append_for,
                                  args=(path, 8.0, 64 << 10, 0.05))
        writer.start()
        try:
            # 15 delays (3 s) after its first change it goes, writes or not
            while not present(s3, f"{prefix}/log.bin") and time.monotonic() - t0 < 7:
                time.sleep(0.1)
            still = writer.is_alive()
            took = time.monotonic() - t0
        finally:
            writer.join()
        assert still and took < 7, (still, took)
    finally:
        assert m.unmount() == 0, m.output()
