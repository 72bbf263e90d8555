"""s3_boto3.py: the boto3 peer for `make bench`: parallel 1 GiB PUT/GET and small-PUT latency.

Prints the same lines as `tierfsctl s3 bench` (put:, get:, small-put:) so the
two can be compared line by line. Uses the AWS_* variables from
hack/s3-local.sh env.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import boto3
from boto3.s3.transfer import TransferConfig


def parse_size(s):
    units = {"K": 10, "M": 20, "G": 30}
    if s[-1].upper() in units:
        return int(s[:-1]) << units[s[-1].upper()]
    return int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url", help="s3://BUCKET/KEY")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    bucket, key = args.url[5:].split("/", 1)
    size = parse_size(args.size)
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    cfg = TransferConfig(max_concurrency=args.threads,
                         multipart_threshold=16 << 20,
                         multipart_chunksize=8 << 20)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = os.path.join(tmp, "src")
        with open(src, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
        mib = size / (1 << 20)
        print(f"object: {mib:.0f} MiB, {args.threads} threads, 8 MiB parts")
        t0 = time.monotonic()
        s3.upload_file(src, bucket, key, Config=cfg)
        print(f"put: {mib / (time.monotonic() - t0):.1f} MiB/s", flush=True)
        t0 = time.monotonic()
        s3.download_file(bucket, key, os.path.join(tmp, "dst"), Config=cfg)
        print(f"get: {mib / (time.monotonic() - t0):.1f} MiB/s", flush=True)
        small = os.urandom(4096)
        lat = []
        for _ in range(50):
            t0 = time.monotonic()
            s3.put_object(Bucket=bucket, Key=key + ".small", Body=small)
            lat.append((time.monotonic() - t0) * 1000)
        lat.sort()
        print(f"small-put: {statistics.median(lat):.1f} ms "
              f"(median of 50 x 4096 B; p90 {lat[45]:.1f} ms)")
        s3.delete_object(Bucket=bucket, Key=key)
        s3.delete_object(Bucket=bucket, Key=key + ".small")
    return 0


if __name__ == "__main__":
    sys.exit(main())
