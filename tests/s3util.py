"""s3util.py: what the FUSE-over-S3 pytest files share: their skip rule, the test bucket, object helpers.

Plain functions, no fixtures (those are in integration/conftest.py). Every
helper takes the boto3 client and works in BUCKET. Nothing here imports
boto3, so a module can call skip_unless_s3() before it does.
"""

import os
import shutil

import pytest

BUCKET = os.environ.get("TIERFS_TEST_BUCKET", "tierfs-it")


def skip_unless_s3(fuse=True, tools=()):
    """Skips the calling test module unless AWS_ENDPOINT_URL is set and, when
    asked, /dev/fuse exists and every program in tools is on PATH. Call it at
    module level, before importing boto3."""
    if not os.environ.get("AWS_ENDPOINT_URL"):
        pytest.skip("AWS_ENDPOINT_URL is not set: run under "
                    '`eval "$(hack/s3-local.sh env)"`', allow_module_level=True)
    if fuse and not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse", allow_module_level=True)
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} on PATH", allow_module_level=True)


def head(s3, key):
    """HEAD of BUCKET/key (raises ClientError when it is absent)."""
    return s3.head_object(Bucket=BUCKET, Key=key)


def body(s3, key):
    """The whole body of BUCKET/key as bytes."""
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def keys(s3, prefix):
    """Every key in BUCKET that starts with prefix, as a set."""
    out = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=prefix):
        out.update(o["Key"] for o in page.get("Contents", []))
    return out


def delete_prefix(s3, prefix):
    """Deletes every object in BUCKET whose key starts with prefix."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=prefix):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objs:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": objs})
