#!/usr/bin/python3
"""bench-restart.py: what a crash costs (issue 4's two figures).

1. The stall per worker restart: a program stats and rewrites a small file
   in a tight loop while the worker is killed (SIGKILL) KILLS times; the
   stall of a restart is the longest gap between two finished operations
   around it, against the loop's usual gap in the same run.
2. Recovery after a crash with 1 GiB dirty: 1 GiB written with a 10-minute
   upload delay (so none of it is in S3), the whole daemon killed with
   SIGKILL, then `tierfs mount` again on the same cache dir: the time until
   it serves, and until `tierfs unmount` says everything is in S3.

Needs the local S3 (`eval "$(hack/s3-local.sh env)"`) and a bucket
(argv[1], created if missing). Prints one line per figure. `make bench`
(tests/bench/harness.py) imports it and puts the figures in its table.
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import boto3  # noqa: E402
from tierfs_mount import TIERFS, Mount, is_mounted  # noqa: E402

KILLS = 5


def stall_per_restart(bucket, work):
    m = Mount(f"s3://{bucket}/bench-restart-{os.getpid()}/stall",
              str(work / "m1"), str(work / "c1"), "--upload-delay", "2s")
    root = Path(m.mountpoint)
    done, stop = [], threading.Event()

    def loop():
        p = root / "ticker"
        while not stop.is_set():
            p.write_bytes(b"%f\n" % time.monotonic())
            os.stat(p)
            done.append(time.monotonic())

    t = threading.Thread(target=loop)
    t.start()
    kills = []
    try:
        time.sleep(1)
        for _ in range(KILLS):
            workers = m.workers()
            kills.append(time.monotonic())
            os.kill(workers[0], signal.SIGKILL)
            while m.workers() in ([], workers):
                time.sleep(0.005)
            time.sleep(1.5)
    finally:
        stop.set()
        t.join()
        m.unmount()
    gaps = [b - a for a, b in zip(done, done[1:])]
    usual = statistics.median(gaps)
    stalls = []
    for k in kills:
        around = [b - a for a, b in zip(done, done[1:]) if b >= k and a <= k + 1]
        stalls.append(max(around))
    print(f"stall per worker restart: median {statistics.median(stalls) * 1000:.0f} ms, "
          f"max {max(stalls) * 1000:.0f} ms over {KILLS} kills "
          f"(the loop's usual gap: {usual * 1000:.2f} ms)", flush=True)
    return {"median_ms": statistics.median(stalls) * 1000,
            "max_ms": max(stalls) * 1000, "usual_gap_ms": usual * 1000}


def recovery_with_1gib_dirty(bucket, work):
    url = f"s3://{bucket}/bench-restart-{os.getpid()}/dirty"
    mnt, cache = work / "m2", work / "c2"
    m = Mount(url, str(mnt), str(cache), "--upload-delay", "10m",
              "--capacity", "4G")
    chunk = os.urandom(16 << 20)
    with open(mnt / "big.bin", "wb") as f:  # no fsync: it stays dirty
        for _ in range(64):
            f.write(chunk)
    os.sync()  # the page cache to the daemon; S3 still has none of it
    m.kill_daemon()
    m.log.close()
    t0 = time.monotonic()
    subprocess.run([TIERFS, "mount", url, str(mnt), "--cache-dir", str(cache),
                    "--upload-delay", "10m", "--capacity", "4G"], check=True)
    serving = time.monotonic() - t0
    assert is_mounted(str(mnt))
    assert os.path.getsize(mnt / "big.bin") == 1 << 30
    subprocess.run([TIERFS, "unmount", str(mnt), "--cache-dir", str(cache)],
                   check=True)
    in_s3 = time.monotonic() - t0
    key = url.split("/", 3)[3] + "/big.bin"
    size = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]) \
        .head_object(Bucket=bucket, Key=key)["ContentLength"]
    assert size == 1 << 30, size
    print(f"recovery after kill -9 with 1 GiB dirty: serving again in "
          f"{serving:.2f} s, all 1 GiB in S3 after {in_s3:.1f} s", flush=True)
    return {"serving_s": serving, "in_s3_s": in_s3}


def main():
    bucket = sys.argv[1] if len(sys.argv) > 1 else "tierfs-bench"
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    try:
        s3.create_bucket(Bucket=bucket)
    except (s3.exceptions.BucketAlreadyOwnedByYou,
            s3.exceptions.BucketAlreadyExists):
        pass
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        work = Path(d)
        stall_per_restart(bucket, work)
        recovery_with_1gib_dirty(bucket, work)
    prefix = f"bench-restart-{os.getpid()}/"
    for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objs:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": objs})


if __name__ == "__main__":
    main()
