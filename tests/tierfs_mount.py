"""tierfs_mount.py: runs `tierfs mount` for tests and waits for it to be ready or gone."""
import os
import signal
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIERFS = os.environ.get("TIERFS_BIN", os.path.join(ROOT, "build", "tierfs"))


def cached_bytes(cache_dir):
    """Bytes of file content the data cache holds on disk (sparse files
    count what is allocated). Content files are named by inode number; the
    .log files, "boot" and "synced" beside them are bookkeeping."""
    data = os.path.join(cache_dir, "data")
    return sum(e.stat().st_blocks * 512 for e in os.scandir(data)
               if e.is_file() and e.name.isdigit())


def wait_for(pred, what, timeout=30, every=0.2):
    """pred()'s first true value, asked every `every` seconds; fails after
    timeout seconds, saying what was waited for (what: text, or a callable
    that gives it then, such as Mount.output)."""
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(every)
    return got


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Mount:
    """A foreground `tierfs mount -f` child; unmount() flushes and waits."""

    def __init__(self, volume, mountpoint, cache_dir, *extra, env=None):
        self.mountpoint = mountpoint
        self.cache_dir = cache_dir
        os.makedirs(mountpoint, exist_ok=True)
        child = dict(os.environ)
        child.update(env or {})
        self.log = open(os.path.join(os.path.dirname(cache_dir.rstrip("/")),
                                     os.path.basename(cache_dir.rstrip("/")) + ".log"), "ab")
        self.argv = [TIERFS, "mount", volume, mountpoint, "--cache-dir", cache_dir,
                     "-f", *extra]
        self.proc = subprocess.Popen(self.argv, env=child, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not is_mounted(mountpoint):
            if self.proc.poll() is not None:
                self.log.flush()
                raise RuntimeError(f"tierfs exited {self.proc.returncode} before "
                                   f"mounting:\n{self.output()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"tierfs did not mount in 60 s:\n{self.output()}")
            time.sleep(0.05)
        # is_mounted()'s realpath() waits for the worker to answer INIT
        # when the mount is there first, but not when the mount lands
        # between the two: then the worker may still be loading, and has
        # not confirmed the write lease (CI once put another node's grant
        # in that gap). A stat waits for it, or fails once it gave up.
        try:
            os.stat(mountpoint)
        except OSError:
            pass

    def workers(self):
        """The pids of the supervisor's workers (one while it serves)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)],
                             capture_output=True, text=True).stdout.split()
        return [int(p) for p in out]

    def kill_worker(self, sig=signal.SIGKILL):
        """Kills the worker with sig and waits until another one serves:
        one that has said it took over (a worker killed before that,
        while it still opens the store, would never say it)."""
        # the mount is up for the supervisor once the worker has kept the
        # kernel's INIT (CACHE_DIR/init.req); a worker killed before that
        # ends the mount
        wait_for(lambda: os.path.exists(os.path.join(self.cache_dir, "init.req")),
                 lambda: "the kernel's INIT kept:\n" + self.output(),
                 timeout=60, every=0.05)
        workers = self.workers()
        assert len(workers) == 1, f"workers: {workers}"
        said = self.output().count("took over the mount")
        os.kill(workers[0], sig)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = self.workers()
            if now and now != workers and \
                    self.output().count("took over the mount") > said:
                return
            time.sleep(0.05)
        raise AssertionError("no new worker:\n" + self.output())

    def kill_daemon(self):
        """SIGKILLs the supervisor and its workers, waits until they are
        gone, and detaches the dead mount: a crash of the whole daemon."""
        workers = self.workers()
        self.proc.kill()
        for w in workers:
            os.kill(w, 9)
        self.proc.wait()
        for w in workers:
            while os.path.exists(f"/proc/{w}"):
                time.sleep(0.01)
        subprocess.run(["fusermount3", "-u", "-z", self.mountpoint],
                       check=False)

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def unmount(self, timeout=120):
        """Unmounts and waits for the daemon's final flush; returns its
        exit code. The mount of a daemon a test has killed is detached."""
        if is_mounted(self.mountpoint):
            if self.proc.poll() is None:
                subprocess.run(["fusermount3", "-u", self.mountpoint],
                               check=True)
            else:
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint],
                               check=False)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()
        return rc
