"""conftest.py: fixtures for the tests that mount tierfs over the local S3 (s3, bucket, volume, mount).

Puts tests/ on sys.path, so test modules import tierfs_mount and s3util
directly. Nothing here skips a module: each one that needs S3 or FUSE
calls s3util.skip_unless_s3() itself. A module may shadow any of these
fixtures with its own (test_s3_faults.py and test_s3_tls.py do, for `s3`).
"""

import os
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bigbytes import pytest_assertrepr_compare  # noqa: E402,F401
from s3util import BUCKET, delete_prefix  # noqa: E402
from tierfs_mount import Mount  # noqa: E402

RUN = uuid.uuid4().hex[:8]  # one per pytest session: every prefix starts fs-RUN/


@pytest.fixture(scope="session")
def s3():
    """A boto3 client on AWS_ENDPOINT_URL; the test bucket exists."""
    if not os.environ.get("AWS_ENDPOINT_URL"):
        pytest.skip("AWS_ENDPOINT_URL is not set")
    import boto3
    c = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    try:
        c.create_bucket(Bucket=BUCKET)
    except (c.exceptions.BucketAlreadyOwnedByYou, c.exceptions.BucketAlreadyExists):
        pass
    return c


@pytest.fixture(scope="session")
def bucket():
    """The test bucket's name (TIERFS_TEST_BUCKET, default tierfs-it)."""
    return BUCKET


@pytest.fixture
def volume(request, s3):
    """A fresh prefix; yields (s3://bucket/prefix, prefix); deletes every
    object under it after."""
    prefix = f"fs-{RUN}/{request.node.name[:60]}"
    yield f"s3://{BUCKET}/{prefix}", prefix
    delete_prefix(s3, prefix + "/")


MOUNT_ARGS = ("--upload-delay", "200ms", "--capacity", "64M",
              "--uid", "1000", "--gid", "100")


@pytest.fixture
def mount(volume, tmp_path):
    """The volume mounted on tmp_path/mnt with cache tmp_path/cache and
    MOUNT_ARGS; yields the Mount; after, unmounts and asserts exit status 0."""
    url, _ = volume
    m = Mount(url, str(tmp_path / "mnt"), str(tmp_path / "cache"), *MOUNT_ARGS)
    yield m
    rc = m.unmount()
    assert rc == 0, m.output()
