"""test_s3_faults.py: tierfsctl s3 against a live S3 through a fault-injecting proxy (tests/faultproxy.py).

Each test starts a FaultProxy in front of the local S3 (AWS_ENDPOINT_URL, run
under `eval "$(hack/s3-local.sh env)"`), gives it a fault plan, runs
`tierfsctl s3 ...` against the proxy, and then checks three things: what the
proxy saw (how many attempts, with which bodies and headers), what tierfsctl
said (exit status, stderr), and the final state of S3 as boto3 sees it
talking to the real endpoint directly.

Environment: AWS_* (required; the module is skipped without
AWS_ENDPOINT_URL), TIERFS_CTL (default build/tierfsctl of this repository),
TIERFS_TEST_BUCKET (default tierfs-it). Every test works under its own key
prefix and removes what it made.
"""

import hashlib
import os
import re
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from faultproxy import FaultProxy  # noqa: E402

UPSTREAM = os.environ.get("AWS_ENDPOINT_URL")
if not UPSTREAM:
    pytest.skip("AWS_ENDPOINT_URL is not set: run under "
                '`eval "$(hack/s3-local.sh env)"` with the local S3 started',
                allow_module_level=True)

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

CTL = os.environ.get("TIERFS_CTL", str(REPO / "build" / "tierfsctl"))
BUCKET = os.environ.get("TIERFS_TEST_BUCKET", "tierfs-it")
REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
SECRET = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
RUN_ID = uuid.uuid4().hex[:10]
MAX_ATTEMPTS = 8  # S3_DEFAULT_MAX_ATTEMPTS in s3/s3.h
MiB = 1 << 20


# --- fixtures -----------------------------------------------------------------


@pytest.fixture(scope="module")
def s3():
    if not Path(CTL).is_file():
        pytest.fail(f"{CTL} does not exist: build it with `make -C {REPO} all` "
                    "(or point TIERFS_CTL at a build)")
    if not os.environ.get("AWS_ACCESS_KEY_ID") or not SECRET:
        pytest.fail("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set: "
                    'run under `eval "$(hack/s3-local.sh env)"`')
    client = boto3.client(
        "s3", endpoint_url=UPSTREAM, region_name=REGION,
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=SECRET,
        aws_session_token=None,
        config=Config(s3={"addressing_style": "path"},
                      retries={"max_attempts": 5, "mode": "standard"}))
    try:
        client.head_bucket(Bucket=BUCKET)
    except ClientError:
        try:
            client.create_bucket(Bucket=BUCKET)
        except ClientError as e:
            if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou",
                                                   "BucketAlreadyExists"):
                raise
    return client


@pytest.fixture
def prefix(request, s3):
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", request.node.name)
    if SECRET:  # key names show up in stderr, which must never hold the secret
        name = name.replace(SECRET, "s")
    p = f"faults/{RUN_ID}/{name}/"
    yield p
    # leave nothing behind: objects and in-progress uploads under the prefix
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=p):
            for o in page.get("Contents", []):
                s3.delete_object(Bucket=BUCKET, Key=o["Key"])
        for u in s3.list_multipart_uploads(Bucket=BUCKET, Prefix=p).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])
    except ClientError:
        pass


@pytest.fixture
def proxy():
    p = FaultProxy(UPSTREAM)
    p.start()
    yield p
    p.stop()


# --- helpers --------------------------------------------------------------------


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def obj_path(key):
    """The request path the client sends for KEY (path style, SigV4 URI encoding)."""
    return f"/{BUCKET}/" + urllib.parse.quote(key, safe="/~")


def make_file(tmp_path, name, size):
    data = os.urandom(size)
    f = tmp_path / name
    f.write_bytes(data)
    return f, data


def ctl(proxy, *args, env=None, timeout=120):
    """Runs `tierfsctl s3 ARGS --endpoint PROXY`; returns (CompletedProcess, seconds)."""
    child = dict(os.environ)
    child.pop("AWS_ENDPOINT_URL_S3", None)  # it would take precedence
    child.pop("AWS_SESSION_TOKEN", None)
    child["AWS_ENDPOINT_URL"] = proxy.url
    child.update(env or {})
    argv = [CTL, "s3", *args, "--endpoint", proxy.url]
    for secret in {SECRET, child.get("AWS_SECRET_ACCESS_KEY", "")} - {""}:
        assert secret not in " ".join(argv), "a secret would go into argv"
    t0 = time.monotonic()
    r = subprocess.run(argv, env=child, capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def describe(r, proxy):
    log = "\n".join(f"  {e['seq']} {e['method']} {e['path']} -> {e['action']} "
                    f"({e['status']})" for e in proxy.log)
    return (f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}\n"
            f"proxy log:\n{log}")


def get_object(s3, key):
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


# --- retried faults ----------------------------------------------------------------


def test_put_503_twice_is_retried_with_identical_body_each_attempt(s3, proxy, prefix,
                                                                    tmp_path):
    # a key whose raw path has '//' and '%2B': the proxy must not normalise it
    key = prefix + "dir//obj%2Bplus"
    src, data = make_file(tmp_path, "src", 300 * 1024)
    proxy.add_rule("503", method="PUT", path=obj_path(key), count=2)

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert r.returncode == 0, describe(r, proxy)
    puts = proxy.requests("PUT", path=obj_path(key))
    assert [e["path"] for e in puts] == [obj_path(key)] * 3, describe(r, proxy)
    assert [e["action"] for e in puts] == ["503", "503", "forward"]
    assert {(e["body_len"], e["body_sha256"]) for e in puts} == {(len(data), sha256(data))}
    # signed payload over http: the signed hash is the body's hash
    assert {e["headers"].get("x-amz-content-sha256") for e in puts} == {sha256(data)}
    assert get_object(s3, key) == data


def test_get_slowdown_then_500_is_retried_and_file_equals_source(s3, proxy, prefix,
                                                                 tmp_path):
    key = prefix + "obj"
    data = os.urandom(MiB + 12345)
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    proxy.add_rule("slowdown", method="GET", path=obj_path(key), count=1)
    proxy.add_rule("500", method="GET", path=obj_path(key), count=1)
    dst = tmp_path / "dst"

    r, _ = ctl(proxy, "get", f"s3://{BUCKET}/{key}", str(dst))

    assert r.returncode == 0, describe(r, proxy)
    gets = proxy.requests("GET", path=obj_path(key))
    assert [e["action"] for e in gets] == ["slowdown", "500", "forward"], describe(r, proxy)
    assert sha256(dst.read_bytes()) == sha256(data)


def test_put_reset_before_forwarding_is_retried_and_object_correct(s3, proxy, prefix,
                                                                   tmp_path):
    key = prefix + "obj"
    src, data = make_file(tmp_path, "src", 200 * 1024)
    proxy.add_rule("reset_before", method="PUT", path=obj_path(key), count=1)

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert r.returncode == 0, describe(r, proxy)
    puts = proxy.requests("PUT", path=obj_path(key))
    assert [e["action"] for e in puts] == ["reset_before", "forward"], describe(r, proxy)
    assert len({e["body_sha256"] for e in puts}) == 1
    assert get_object(s3, key) == data


def test_put_reset_after_upstream_applied_is_retried_and_leaves_one_correct_object(
        s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, data = make_file(tmp_path, "src", 200 * 1024)
    proxy.add_rule("reset_after", method="PUT", path=obj_path(key), count=1)

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert r.returncode == 0, describe(r, proxy)
    puts = proxy.requests("PUT", path=obj_path(key))
    assert [e["action"] for e in puts] == ["reset_after", "forward"], describe(r, proxy)
    assert puts[0]["status"] == 200  # the first attempt WAS applied upstream
    assert len({e["body_sha256"] for e in puts}) == 1
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    assert [o["Key"] for o in listing.get("Contents", [])] == [key]
    assert get_object(s3, key) == data


def test_get_truncated_response_is_retried_and_never_leaves_a_short_file(
        s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    data = os.urandom(3 * MiB + 777)
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    proxy.add_rule("truncate", method="GET", path=obj_path(key), count=1)
    dst = tmp_path / "dst"

    r, _ = ctl(proxy, "get", f"s3://{BUCKET}/{key}", str(dst))

    assert r.returncode == 0, describe(r, proxy)
    gets = proxy.requests("GET", path=obj_path(key))
    assert gets[0]["action"] == "truncate"
    assert len(gets) >= 2, describe(r, proxy)
    got = dst.read_bytes()
    assert len(got) == len(data)
    assert sha256(got) == sha256(data)


def test_multipart_put_survives_part_503_and_complete_reset_without_orphans(
        s3, proxy, prefix, tmp_path):
    key = prefix + "big"
    src, data = make_file(tmp_path, "src", 40 * MiB)  # > 16 MiB: 5 parts of 8 MiB
    part3 = proxy.add_rule("503", method="PUT", path="partNumber=3&", count=1)
    complete = proxy.add_rule("reset_after", method="POST", path="uploadId=", count=1)

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}", "--part-size", "8M")

    assert r.returncode == 0, describe(r, proxy)
    assert part3.fired == 1 and complete.fired == 1, describe(r, proxy)
    parts = proxy.requests("PUT", regex=r"[?&]partNumber=\d+&uploadId=")
    numbers = sorted({int(re.search(r"partNumber=(\d+)", e["path"]).group(1))
                      for e in parts})
    assert numbers == [1, 2, 3, 4, 5]
    p3 = [e for e in parts if "partNumber=3&" in e["path"]]
    assert [e["action"] for e in p3] == ["503", "forward"]
    assert p3[0]["body_sha256"] == p3[1]["body_sha256"] == sha256(data[16 * MiB:24 * MiB])
    completes = proxy.requests("POST", path="uploadId=")
    assert completes[0]["action"] == "reset_after" and completes[0]["status"] == 200
    assert len(completes) >= 2, describe(r, proxy)

    head = s3.head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == len(data)
    assert sha256(get_object(s3, key)) == sha256(data)
    uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads", [])
    assert uploads == [], f"orphaned multipart uploads: {uploads}"


def test_delay_300ms_succeeds_without_a_retry(s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, data = make_file(tmp_path, "src", 64 * 1024)
    proxy.add_rule("delay:300", method="PUT", path=obj_path(key), count=1)

    r, secs = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert r.returncode == 0, describe(r, proxy)
    puts = proxy.requests("PUT", path=obj_path(key))
    assert [e["action"] for e in puts] == ["delay"], describe(r, proxy)
    assert secs >= 0.3
    assert get_object(s3, key) == data


def test_sequential_requests_reuse_one_connection(s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, data = make_file(tmp_path, "src", 20 << 20)
    s3.upload_file(str(src), BUCKET, key)
    dst = tmp_path / "dst"

    # one thread, 5 MiB ranges: four GETs in a row from one process
    r, _ = ctl(proxy, "get", f"s3://{BUCKET}/{key}", str(dst),
               "--parallel", "1", "--part-size", "5M")

    assert r.returncode == 0, describe(r, proxy)
    gets = proxy.requests("GET", path=obj_path(key))
    assert len(gets) == 4, describe(r, proxy)
    assert len({e["peer"] for e in gets}) == 1, describe(r, proxy)
    assert dst.read_bytes() == data


# --- faults that must not be retried ----------------------------------------------


@pytest.mark.parametrize("status,method,code", [
    ("403", "PUT", "AccessDenied"),
    ("404", "GET", "NoSuchKey"),
    ("400", "GET", "InvalidRequest"),
])
def test_client_error_is_not_retried_and_reported_without_secret(
        s3, proxy, prefix, tmp_path, status, method, code):
    key = prefix + "obj"
    data = os.urandom(10000)
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)  # the object does exist
    proxy.add_rule(status, method=method, path=obj_path(key), count=100)
    src = tmp_path / "src"
    src.write_bytes(os.urandom(5000))
    if method == "PUT":
        args = ("put", str(src), f"s3://{BUCKET}/{key}")
    else:
        args = ("get", f"s3://{BUCKET}/{key}", str(tmp_path / "dst"))

    r, _ = ctl(proxy, *args)

    assert r.returncode == 1, describe(r, proxy)
    assert len(proxy.log) == 1, describe(r, proxy)
    assert proxy.log[0]["method"] == method and proxy.log[0]["action"] == status
    assert code in r.stderr
    assert f"HTTP {status}" in r.stderr
    assert SECRET not in r.stderr and SECRET not in r.stdout
    assert get_object(s3, key) == data  # a refused PUT changed nothing


def test_persistent_503_gives_up_after_bounded_attempts(s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src", 4096)
    proxy.add_rule("503", method="PUT", path=obj_path(key), count=10_000)

    r, secs = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}", timeout=90)

    assert r.returncode == 1, describe(r, proxy)
    n = len(proxy.requests("PUT", path=obj_path(key)))
    assert 1 < n <= MAX_ATTEMPTS, describe(r, proxy)
    assert secs < 70
    assert "ServiceUnavailable" in r.stderr
    with pytest.raises(ClientError):
        s3.head_object(Bucket=BUCKET, Key=key)


# --- credentials ------------------------------------------------------------------------


def test_session_token_is_sent_and_signed_on_every_request(s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src", 4096)
    # the local S3 may reject or ignore a token; not forwarding keeps it simple
    proxy.add_rule("404", method="HEAD", count=100)

    ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}", env={"AWS_SESSION_TOKEN": "tok123"})
    ctl(proxy, "head", f"s3://{BUCKET}/{key}", env={"AWS_SESSION_TOKEN": "tok123"})
    ctl(proxy, "ls", f"s3://{BUCKET}/{prefix}", env={"AWS_SESSION_TOKEN": "tok123"})

    methods = {e["method"] for e in proxy.log}
    assert {"PUT", "HEAD", "GET"} <= methods, proxy.log
    for e in proxy.log:
        assert e["security_token"] == "tok123", e
        assert "x-amz-security-token" in e["signed_headers"], e["authorization"]
        assert "tok123" not in e["authorization"]

    # and without the variable, no token is sent
    proxy.clear_log()
    ctl(proxy, "head", f"s3://{BUCKET}/{key}")
    assert proxy.log and not any(e["has_security_token"] for e in proxy.log)
    assert not any("x-amz-security-token" in e["signed_headers"] for e in proxy.log)


def test_secret_never_in_verbose_output_or_requests(s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src", 4096)

    # 1. the real secret, with retries logged (-v) before a final refusal
    proxy.add_rule("500", method="PUT", path=obj_path(key), count=2)
    proxy.add_rule("403", method="PUT", path=obj_path(key), count=1)
    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}", "-v")
    assert r.returncode == 1, describe(r, proxy)
    assert "attempt 1 failed" in r.stderr and "AccessDenied" in r.stderr
    assert SECRET not in r.stdout + r.stderr

    # 2. a wrong, distinctive secret: the real S3 refuses the signature
    proxy.clear_rules()
    proxy.clear_log()
    fake = "fAkE-sEcReT-" + uuid.uuid4().hex
    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}", "-v",
               env={"AWS_SECRET_ACCESS_KEY": fake})
    assert r.returncode == 1, describe(r, proxy)
    assert len(proxy.log) == 1 and proxy.log[0]["status"] == 403, describe(r, proxy)
    assert "SignatureDoesNotMatch" in r.stderr or "AccessDenied" in r.stderr, r.stderr
    assert fake not in r.stdout + r.stderr
    for e in proxy.log:
        assert fake not in e["path"] and fake not in (e["authorization"] or "")
        assert not any(fake in v for v in e["headers"].values())


# --- more ranged and multipart ambiguity cases ----------------------------------------


def test_parallel_get_truncated_ranges_are_retried_and_file_equals_source(
        s3, proxy, prefix, tmp_path):
    key = prefix + "obj"
    data = os.urandom(20 * MiB + 5)  # a first 8 MiB GET, then two parallel ranges
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    proxy.add_rule("forward", method="GET", path=obj_path(key), count=1)
    proxy.add_rule("truncate", method="GET", path=obj_path(key), count=2)
    dst = tmp_path / "dst"

    r, _ = ctl(proxy, "get", f"s3://{BUCKET}/{key}", str(dst), "--part-size", "8M")

    assert r.returncode == 0, describe(r, proxy)
    gets = proxy.requests("GET", path=obj_path(key))
    truncated = [e["headers"].get("range") for e in gets if e["action"] == "truncate"]
    assert len(truncated) == 2 and "bytes=0-" not in " ".join(truncated), describe(r, proxy)
    assert len(gets) == 5, describe(r, proxy)
    got = dst.read_bytes()
    assert len(got) == len(data) and sha256(got) == sha256(data)


def nosuchupload(proxy, count=1):
    """Answers CompleteMultipartUpload with NoSuchUpload, as S3s other than Swift
    (MinIO, for one) do when a Complete that already succeeded is sent again."""
    return proxy.add_rule("404", method="POST", path="uploadId=", count=count,
                          code="NoSuchUpload",
                          message="The specified multipart upload does not exist.")


def test_multipart_complete_retried_by_client_then_nosuchupload_is_recognised_as_done(
        s3, proxy, prefix, tmp_path):
    key = prefix + "big"
    src, data = make_file(tmp_path, "src", 17 * MiB)  # 3 parts
    proxy.add_rule("503", method="POST", path="uploadId=", count=1)  # not applied
    proxy.add_rule("reset_after", method="POST", path="uploadId=", count=1)  # applied
    nosuchupload(proxy)  # what the resend of an applied Complete gets

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert r.returncode == 0, describe(r, proxy)
    actions = [e["action"] for e in proxy.requests("POST", path="uploadId=")]
    assert actions == ["503", "reset_after", "404"], describe(r, proxy)
    assert sha256(get_object(s3, key)) == sha256(data)
    assert s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads", []) == []


def test_multipart_complete_reset_then_nosuchupload_on_first_client_attempt_is_done(
        s3, proxy, prefix, tmp_path):
    # The Complete goes out on a connection the parts used before. When that
    # connection is reset after S3 applied the Complete, libcurl itself sends
    # the request again (it does so once for a reused connection that died
    # before any response byte), so the library sees ONE attempt that got
    # NoSuchUpload. The upload did complete: the put must succeed.
    key = prefix + "big"
    src, data = make_file(tmp_path, "src", 17 * MiB)
    proxy.add_rule("reset_after", method="POST", path="uploadId=", count=1)
    nosuchupload(proxy)

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    actions = [e["action"] for e in proxy.requests("POST", path="uploadId=")]
    assert actions == ["reset_after", "404"], describe(r, proxy)
    assert sha256(get_object(s3, key)) == sha256(data)  # S3 has the new object...
    assert r.returncode == 0, ("put reported failure although its upload completed\n"
                               + describe(r, proxy))  # ...so the put succeeded
    assert s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads", []) == []


def test_multipart_complete_nosuchupload_is_not_taken_for_success_over_an_older_object(
        s3, proxy, prefix, tmp_path):
    # The key already holds an older 3-part object. The new 3-part upload's
    # Complete fails retryably (503, not applied); before the retry the upload
    # is aborted by someone else (an orphan-upload cleaner, say), so the retry
    # gets a genuine NoSuchUpload. The new data is NOT in S3: the put must not
    # report success (an N-part ETag on the key is not proof of OUR upload).
    key = prefix + "big"
    old = os.urandom(10 * MiB + 1024)
    u = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = []
    for n, (a, b) in enumerate([(0, 5 * MiB), (5 * MiB, 10 * MiB), (10 * MiB, len(old))], 1):
        etag = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=u, PartNumber=n,
                              Body=old[a:b])["ETag"]
        parts.append({"ETag": etag, "PartNumber": n})
    s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=u,
                                 MultipartUpload={"Parts": parts})
    old_etag = s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    assert old_etag.endswith('-3"')

    src, new = make_file(tmp_path, "src", 17 * MiB)  # also 3 parts
    proxy.add_rule("503", method="POST", path="uploadId=", count=1)
    completes, errors = [], []

    def abort_before_the_retry(e):
        if e["method"] != "POST" or "uploadId=" not in e["path"]:
            return
        completes.append(e)
        if len(completes) == 2:
            upload_id = urllib.parse.unquote(e["path"].split("uploadId=", 1)[1])
            try:
                s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id)
            except ClientError as exc:
                errors.append(exc)

    proxy.on_request = abort_before_the_retry

    r, _ = ctl(proxy, "put", str(src), f"s3://{BUCKET}/{key}")

    assert len(completes) == 2 and not errors, describe(r, proxy)
    assert completes[1]["status"] == 404, describe(r, proxy)  # genuine NoSuchUpload
    got = get_object(s3, key)
    assert sha256(got) == sha256(old)  # the new data never reached S3
    assert r.returncode != 0, (f"put reported success (stdout {r.stdout.strip()}, the "
                               f"older object's ETag {old_etag}) but S3 holds the older "
                               "object\n" + describe(r, proxy))
