"""conftest.py: fixtures for the tierfs-csi tests (no S3 needed).

`start_plugin(mode, *flags)` runs the plugin binary (TIERFS_CSI_BIN, default
build/asan/tierfs-csi) on a socket under tmp_path, waits for the socket and
returns a Running with a connected csi_client.Plugin. After the test every
plugin started is stopped with SIGTERM, and the test fails unless it exits
0 and its socket is gone.

With the local S3: `s3`, `bucket` and `secrets` (its credentials as a CSI
secrets map); with mounts: `reap_mounts` detaches, after the test, every
mount under tmp_path and kills the tierfs daemons a node left there.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from bigbytes import pytest_assertrepr_compare  # noqa: E402,F401
from csi_client import Plugin, csi_bin  # noqa: E402

NODE_ID = "node-a"


@pytest.fixture
def s3():
    """A boto3 client of the local S3 (tests that use it skip without
    AWS_ENDPOINT_URL: skip_unless_s3)."""
    import boto3
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


@pytest.fixture
def bucket(s3, request):
    """A fresh bucket named after the test file; emptied and removed after."""
    import uuid
    kind = Path(request.node.fspath).stem.replace("test_csi_", "")[:8]
    name = f"{kind}-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objs:
            s3.delete_objects(Bucket=name, Delete={"Objects": objs})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def secrets():
    """The local S3's credentials as the secrets map tierfs-csi reads."""
    return {"accessKeyID": os.environ["AWS_ACCESS_KEY_ID"],
            "secretAccessKey": os.environ["AWS_SECRET_ACCESS_KEY"]}


@pytest.fixture
def reap_mounts(tmp_path):
    """After the test: `umount -l` of every mount under tmp_path (deepest
    first), then SIGKILL of every tierfs daemon a `state` file there
    names."""
    yield
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    for m in reversed(mounts):
        if m.startswith(f"{tmp_path}/"):
            subprocess.run(["umount", "-l", m], check=False)
    for state in tmp_path.glob("**/state"):
        if not state.is_file():
            continue
        for line in state.read_text(errors="replace").splitlines():
            key, _, val = line.partition("=")
            if key in ("supervisor", "worker") and val.isdigit() \
                    and int(val) > 0:  # 0 would be our own group
                try:  # a pid reused since is none of ours
                    with open(f"/proc/{val}/cmdline", "rb") as f:
                        if b"tierfs" not in f.read():
                            continue
                    os.kill(int(val), signal.SIGKILL)
                except (FileNotFoundError, ProcessLookupError):
                    pass


class Running:
    def __init__(self, proc, sock, log_path, plugin):
        self.proc, self.sock, self.log_path = proc, sock, log_path
        self.plugin = plugin

    def log(self):
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Signals the plugin and returns its exit status."""
        self.plugin.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"tierfs-csi did not stop within {timeout}s "
                                 f"of {sig!r}; log:\n{self.log()}")


def spawn(tmp_path, *args, name="csi"):
    """Starts tierfs-csi with args; returns (Popen, log path)."""
    log_path = tmp_path / f"{name}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([csi_bin(), *args], stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    return proc, log_path


@pytest.fixture
def start_plugin(tmp_path):
    started = []

    def start(mode="all", *extra, node_id=NODE_ID):
        sock = tmp_path / f"sock{len(started)}" / "csi.sock"
        args = ["--mode", mode, "--endpoint", f"unix://{sock}", *extra]
        if node_id is not None:
            args += ["--node-id", node_id]
        proc, log_path = spawn(tmp_path, *args, name=f"csi{len(started)}")
        deadline = time.monotonic() + 20
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("tierfs-csi did not come up; log:\n" +
                                     Path(log_path).read_text())
            time.sleep(0.02)
        r = Running(proc, sock, log_path, Plugin(sock))
        started.append(r)
        return r

    yield start
    for r in started:
        was_running = r.proc.poll() is None
        rc = r.stop()
        if was_running:
            assert rc == 0, f"exit status {rc} after SIGTERM; log:\n{r.log()}"
            assert not r.sock.exists(), "socket left behind after SIGTERM"
