"""test_s3_local.py: hack/s3-local.sh, the local S3 every other suite runs on.

A restart of it is part of the fault tests (test_fs_faults.py stops Swift
for two minutes under a mounted tierfs), so `start` must hand back a
server that works for every bucket and object request, not one that only
answers ListBuckets, even while clients were knocking during the start.
"""

import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from s3util import BUCKET, skip_unless_s3

skip_unless_s3(fuse=False)

import botocore.config  # noqa: E402
import botocore.exceptions  # noqa: E402
import boto3  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DIR = Path(os.environ.get("TIERFS_S3_DIR", "/var/tmp/tierfs-s3"))


def one_attempt_client(**cfg):
    """A client that sends each request once: no retry hides a 503, and
    none sleeps between knocks."""
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        config=botocore.config.Config(retries={
                            "mode": "standard", "total_max_attempts": 1},
                            **cfg))


def proxy_log_size():
    return (DIR / "log" / "proxy.log").stat().st_size


def proxy_log_since(offset):
    with open(DIR / "log" / "proxy.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def s3_local(action):
    return subprocess.run([str(REPO / "hack" / "s3-local.sh"), action],
                          capture_output=True, text=True, timeout=300)


def test_a_restart_under_client_load_serves_buckets_once_start_returns(s3):
    """Clients retrying through the outage reach the proxy the moment it
    listens. Were the container server not yet listening then, Swift's
    proxy would count the refusals and shut its only container node out
    for a minute (503 for every bucket request) after start said ready."""
    key = f"s3-local/{uuid.uuid4().hex}/probe"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"probe")
    assert s3_local("stop").returncode == 0
    stop = threading.Event()
    knocks = [0]

    def knock():
        # signed HEADs of the bucket, one attempt each, as fast as the
        # proxy takes them: each one it takes while the container server
        # is down is an error against that server
        c = one_attempt_client(connect_timeout=1, read_timeout=5)
        while not stop.is_set():
            try:
                c.head_bucket(Bucket=BUCKET)
            except botocore.exceptions.EndpointConnectionError:
                stop.wait(0.005)
                continue
            except botocore.exceptions.ClientError:
                pass
            knocks[0] += 1

    threads = [threading.Thread(target=knock) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        started = s3_local("start")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert started.returncode == 0, started.stdout + started.stderr
    assert knocks[0] > 0, "no request reached the proxy during the start"
    # the proxy (whose log start rotated) never met a storage server
    # that was not yet listening
    log = proxy_log_since(0)
    assert "Connection refused" not in log, log[-3000:]
    # one attempt each: a 503 here is the proxy's error limit, not a retry
    once = one_attempt_client()
    once.head_bucket(Bucket=BUCKET)
    listed = once.list_objects_v2(Bucket=BUCKET, Prefix=key.rsplit("/", 1)[0])
    assert [o["Key"] for o in listed["Contents"]] == [key]
    assert once.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"probe"
    once.delete_object(Bucket=BUCKET, Key=key)


def test_a_container_server_blip_is_not_a_minute_of_503s(s3):
    """The container server goes away while clients keep asking (more
    errors than Swift's default limit of 10 a minute per proxy worker),
    then comes back: bucket requests work again within seconds, not once
    the proxy's minute-long shut-out of its only container node ends."""
    key = f"s3-local/{uuid.uuid4().hex}/blip"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"blip")
    pid = int((DIR / "run" / "container.pid").read_text())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert any(a.endswith(b"container-server.conf") for a in argv), argv
    os.killpg(pid, signal.SIGTERM)
    port = os.environ.get("TIERFS_S3_CONT_PORT", "6201")
    health = f"http://127.0.0.1:{port}/healthcheck"
    while True:  # until the port is closed
        try:
            urllib.request.urlopen(health, timeout=2).read()
            time.sleep(0.1)
        except OSError:
            break
    offset = proxy_log_size()
    failed = 0
    for _ in range(5):  # fresh connections spread over the workers
        c = one_attempt_client()
        for _ in range(15):
            with pytest.raises(botocore.exceptions.ClientError):
                c.head_bucket(Bucket=BUCKET)
            failed += 1
    assert "Connection refused" in proxy_log_since(offset)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME")}
    with open(DIR / "log" / "container.log", "ab") as log:
        back = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log,
                                start_new_session=True)
    (DIR / "run" / "container.pid").write_text(f"{back.pid}\n")
    deadline = time.monotonic() + 60
    while True:  # until the container server answers again
        try:
            urllib.request.urlopen(health, timeout=2).read()
            break
        except OSError:
            assert time.monotonic() < deadline, "container server not back"
            time.sleep(0.1)
    # Swift's default would answer 503 for 60 s after the last error; the
    # local S3 forgets errors after a quiet second. 20 s tells them apart
    # on any machine.
    deadline = time.monotonic() + 20
    last = None
    while time.monotonic() < deadline:
        try:
            c = one_attempt_client()
            c.head_bucket(Bucket=BUCKET)
            assert c.get_object(Bucket=BUCKET, Key=key)[
                "Body"].read() == b"blip"
            c.delete_object(Bucket=BUCKET, Key=key)
            return
        except botocore.exceptions.ClientError as e:
            last = e
            time.sleep(0.5)
    pytest.fail(f"after {failed} failed requests, bucket requests still "
                f"fail with the container server back: {last}")


@pytest.fixture(autouse=True)
def _swift_running():
    """Whatever the test did, the next module finds Swift up."""
    yield
    assert s3_local("start").returncode == 0
