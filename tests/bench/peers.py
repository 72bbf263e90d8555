"""peers.py: the filesystems `make bench` measures, each behind one small interface.

A Target mounts one S3 prefix at a fresh mountpoint (or, for the local disk,
uses a plain directory), says whether it really is mounted, empties its
cache for a cold run, and reports the peak RSS of its daemon. A target that
cannot mount raises TargetFailed: the harness then records "failed" for it
and never measures the bare directory underneath.

Targets: LocalDisk (the physical limit), FuseFloor (an empty FUSE server:
what one request costs here, with no filesystem behind it), Tierfs
(durability s3 or local), Rclone (`mount --vfs-cache-mode full`) and S3fs
(`use_cache`). Nothing here is timed; the workloads time what they do
between mount() and unmount().
"""

import os
import shutil
import signal
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIERFS = os.environ.get("TIERFS_BIN", os.path.join(ROOT, "build", "tierfs"))
FUSE_FLOOR = os.path.join(ROOT, "build", "fuse-floor")
FUSE_TYPES = ("fuse", "fuseblk")  # what `stat -f -c %T` says of any FUSE mount
MOUNT_TIMEOUT = 60


class TargetFailed(Exception):
    """The target could not be mounted or used; the message says why."""


def mountinfo(path):
    """The /proc/self/mountinfo fields of the mount at path, or None."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return fields
    return None


def fs_type(path):
    """What `stat -f` says the filesystem type of path is."""
    out = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip() if out.returncode == 0 else None


def abort_fuse(path):
    """Aborts the FUSE connection of the mount at path (a hung daemon), so
    that processes blocked in it get ENOTCONN, then detaches it."""
    info = mountinfo(path)
    if info:
        minor = info[2].split(":")[1]
        try:
            with open(f"/sys/fs/fuse/connections/{minor}/abort", "w") as f:
                f.write("1")
        except OSError:
            pass
    subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


def vm_hwm_kib(pid):
    """The peak RSS (VmHWM) of pid in KiB, or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return not os.path.exists(f"/proc/{pid}")


class Target:
    """One filesystem under test. Subclasses set name, label and kind."""
    name = "?"
    label = "?"
    fuse = True

    def __init__(self, env, bucket, workdir):
        self.env = env          # the AWS_* environment of the local S3
        self.bucket = bucket
        self.workdir = os.path.join(workdir, self.name)
        self.mountpoint = None  # set while mounted
        self.prefix = None
        self.peak_rss_kib = 0   # over every mount of this target
        os.makedirs(self.workdir, exist_ok=True)

    # -- what subclasses provide ------------------------------------------
    def _mount(self, prefix, mnt, cache):
        raise NotImplementedError

    def _unmount(self, mnt):
        raise NotImplementedError

    def daemon_pids(self):
        return []

    def available(self):
        """None if the target can run here, else why not."""
        return None

    # -- shared --------------------------------------------------------------
    def cache_dir(self, prefix):
        return os.path.join(self.workdir, "cache-" + prefix.replace("/", "_"))

    def mount(self, prefix, cold=True):
        """Mounts s3://bucket/prefix; cold empties this target's cache of it
        first. Returns the mountpoint, checked with stat -f."""
        why = self.available()
        if why:
            raise TargetFailed(why)
        if self.mountpoint:
            self.unmount()
        mnt = os.path.join(self.workdir, "mnt")
        os.makedirs(mnt, exist_ok=True)
        if mountinfo(mnt):
            abort_fuse(mnt)
        cache = self.cache_dir(prefix)
        if cold:
            shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache, exist_ok=True)
        parent_type = fs_type(self.workdir)
        self._mount(prefix, mnt, cache)
        self.check_mounted(mnt, parent_type)
        self.mountpoint, self.prefix = mnt, prefix
        return mnt

    def check_mounted(self, mnt, parent_type):
        t = fs_type(mnt)
        if self.fuse and (t not in FUSE_TYPES or not mountinfo(mnt)):
            raise TargetFailed(f"{self.label}: {mnt} is not a FUSE mount "
                               f"(stat -f says {t!r}, its parent {parent_type!r})")

    def sample_rss(self):
        for pid in self.daemon_pids():
            self.peak_rss_kib = max(self.peak_rss_kib, vm_hwm_kib(pid))

    def unmount(self):
        """Unmounts (a FUSE daemon flushes what it owes S3) and notes the
        daemon's peak RSS first."""
        if not self.mountpoint:
            return
        mnt, self.mountpoint = self.mountpoint, None
        self.sample_rss()
        try:
            self._unmount(mnt)
        finally:
            if mountinfo(mnt):
                abort_fuse(mnt)

    def forget(self, prefix):
        """Drops what this target keeps of prefix on the local disk (its
        cache dir; the local disk's directory), once the harness is done
        with it, so that the runs do not fill the disk."""
        if not self.mountpoint:
            shutil.rmtree(self.cache_dir(prefix), ignore_errors=True)

    def key(self, relpath):
        """The S3 key a file at relpath of the mounted prefix is stored as."""
        return f"{self.prefix}/{relpath}"


class LocalDisk(Target):
    """The local disk itself: a directory on the same filesystem as the
    cache dirs. Cold means the page cache of its files is dropped."""
    name, label, fuse = "local", "local disk", False

    def mount(self, prefix, cold=True):
        d = os.path.join(self.workdir, prefix.replace("/", "_"))
        os.makedirs(d, exist_ok=True)
        if cold:
            drop_page_cache(d)
        self.mountpoint, self.prefix = d, prefix
        return d

    def unmount(self):
        self.mountpoint = None

    def forget(self, prefix):
        shutil.rmtree(os.path.join(self.workdir, prefix.replace("/", "_")),
                      ignore_errors=True)

    def key(self, relpath):
        return None  # not in S3


def drop_page_cache(root):
    """Drops the page cache of every file under root (fadvise DONTNEED after
    an fsync), the local-disk equivalent of an emptied cache."""
    for dirpath, _, files in os.walk(root):
        for n in files:
            try:
                fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class Tierfs(Target):
    """`tierfs mount` with --durability s3 or local."""

    def __init__(self, env, bucket, workdir, durability):
        self.durability = durability
        self.name = f"tierfs-{durability}"
        self.label = f"tierfs {durability}"
        super().__init__(env, bucket, workdir)
        self.cache = None

    def available(self):
        if not os.access(TIERFS, os.X_OK):
            return f"{TIERFS} is not built (make)"
        return None

    def _mount(self, prefix, mnt, cache):
        self.cache = cache
        log = open(os.path.join(self.workdir, "mount.log"), "ab")
        r = subprocess.run([TIERFS, "mount", f"s3://{self.bucket}/{prefix}", mnt,
                            "--cache-dir", cache, "--durability", self.durability],
                           env=self.env, stdout=log, stderr=subprocess.STDOUT,
                           timeout=MOUNT_TIMEOUT)
        log.close()
        if r.returncode != 0:
            raise TargetFailed(f"tierfs mount exited {r.returncode}; see "
                               f"{log.name} and {cache}/tierfs.log")

    def state(self):
        out = {}
        try:
            with open(os.path.join(self.cache, "state")) as f:
                for line in f:
                    k, _, v = line.strip().partition("=")
                    out[k] = v
        except (OSError, TypeError):
            pass
        return out

    def daemon_pids(self):
        s = self.state()
        return [int(s[k]) for k in ("supervisor", "worker") if s.get(k, "").isdigit()]

    def worker_pid(self):
        s = self.state()
        return int(s["worker"]) if s.get("worker", "").isdigit() else None

    def _unmount(self, mnt):
        pids = self.daemon_pids()
        r = subprocess.run([TIERFS, "unmount", mnt, "--cache-dir", self.cache,
                            "--timeout", "5m"], env=self.env, capture_output=True,
                           text=True, timeout=400)
        if r.returncode != 0:
            raise TargetFailed(f"tierfs unmount {mnt} exited {r.returncode}: "
                               f"{r.stderr.strip()[-300:]}")
        for p in pids:
            wait_gone(p, 60)


def _env_without_ca(env):
    e = dict(env)
    # rclone refuses to start with AWS_CA_BUNDLE set; the endpoint is plain http
    for v in ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        e.pop(v, None)
    return e


class _ForegroundDaemon(Target):
    """A peer run in the foreground as our child, so its pid is known."""
    proc = None
    log = None

    def _start(self, argv, env, mnt):
        self.log = open(os.path.join(self.workdir, "mount.log"), "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not mountinfo(mnt):
            if self.proc.poll() is not None:
                self.log.close()
                raise TargetFailed(f"{argv[0]} exited {self.proc.returncode} "
                                   f"before mounting; see {self.log.name}")
            if time.monotonic() > deadline:
                self._stop()
                raise TargetFailed(f"{argv[0]} did not mount in {MOUNT_TIMEOUT} s")
            time.sleep(0.05)

    def daemon_pids(self):
        return [self.proc.pid] if self.proc and self.proc.poll() is None else []

    def _stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()

    def _unmount(self, mnt):
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True, timeout=60)
        try:
            self.proc.wait(timeout=300)  # rclone finishes its uploads first
        except subprocess.TimeoutExpired:
            pass
        self._stop()


class Rclone(_ForegroundDaemon):
    """rclone mount --vfs-cache-mode full, credentials from the environment."""
    name, label = "rclone", "rclone"

    def available(self):
        return None if shutil.which("rclone") else "rclone is not installed"

    def _mount(self, prefix, mnt, cache):
        env = _env_without_ca(self.env)
        env.update(RCLONE_S3_PROVIDER="Other",
                   RCLONE_S3_ENDPOINT=self.env["AWS_ENDPOINT_URL"],
                   RCLONE_S3_REGION=self.env.get("AWS_REGION", "us-east-1"),
                   RCLONE_S3_ACCESS_KEY_ID=self.env["AWS_ACCESS_KEY_ID"],
                   RCLONE_S3_SECRET_ACCESS_KEY=self.env["AWS_SECRET_ACCESS_KEY"])
        self._start(["rclone", "mount", f":s3:{self.bucket}/{prefix}", mnt,
                     "--vfs-cache-mode", "full", "--cache-dir", cache,
                     "--log-level", "NOTICE"], env, mnt)


class FuseFloor(_ForegroundDaemon):
    """build/fuse-floor (tests/bench/fusefloor.c): an empty directory whose
    every lookup is answered ENOENT at once. Not S3: the prefix is unused."""
    name, label = "floor", "empty FUSE"

    def available(self):
        if not os.access(FUSE_FLOOR, os.X_OK):
            return f"{FUSE_FLOOR} is not built (make {os.path.relpath(FUSE_FLOOR, ROOT)})"
        return None

    def _mount(self, prefix, mnt, cache):
        self._start([FUSE_FLOOR, mnt], self.env, mnt)

    def daemon_pids(self):
        return []  # not a filesystem: its memory is no figure


class S3fs(_ForegroundDaemon):
    """s3fs with use_cache, credentials from the environment."""
    name, label = "s3fs", "s3fs"

    def available(self):
        return None if shutil.which("s3fs") else "s3fs is not installed"

    def _mount(self, prefix, mnt, cache):
        env = _env_without_ca(self.env)
        self._start(["s3fs", f"{self.bucket}:/{prefix}", mnt, "-f",
                     "-o", f"url={self.env['AWS_ENDPOINT_URL']}",
                     "-o", "use_path_request_style", "-o", "sigv4",
                     "-o", f"endpoint={self.env.get('AWS_REGION', 'us-east-1')}",
                     "-o", f"use_cache={cache}"], env, mnt)


def all_targets(env, bucket, workdir, names=None):
    """Every target, in the order the table shows them."""
    ts = [LocalDisk(env, bucket, workdir),
          FuseFloor(env, bucket, workdir),
          Tierfs(env, bucket, workdir, "s3"),
          Tierfs(env, bucket, workdir, "local"),
          Rclone(env, bucket, workdir),
          S3fs(env, bucket, workdir)]
    if names:
        ts = [t for t in ts if t.name in names]
    return ts
