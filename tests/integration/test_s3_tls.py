"""test_s3_tls.py: tierfsctl s3 over HTTPS, trusting the system CAs or a given CA bundle.

Each test generates (once per module, in a tmp dir, with the `openssl` CLI) a
throwaway CA, a server certificate for 127.0.0.1 / localhost signed by it,
and a second, unrelated CA. A FaultProxy (tests/faultproxy.py) serves HTTPS
with that certificate and forwards plain HTTP to the local S3
(AWS_ENDPOINT_URL, run under `eval "$(hack/s3-local.sh env)"`), keeping the
Host header, so the client's signature still checks out upstream.

What is checked:
  * with AWS_CA_BUNDLE naming the CA, put/get/ls work and round-trip the bytes
    exactly (boto3 against the real endpoint agrees);
  * with the CA in the system store (a private mount namespace binds a bundle
    over /etc/ssl/certs/ca-certificates.crt for the child only) and no
    AWS_CA_BUNDLE, they work too;
  * with only the system CAs, a bundle of another CA, a certificate for
    another host name, or a missing bundle file, the command fails with exit
    status 1, quickly and without retrying (a certificate failure is not
    transient: at most one TLS connection, no HTTP request), and stderr says
    it was the certificate;
  * payload signing (S3_PAYLOAD_AUTO): a streamed PUT carries
    x-amz-content-sha256: UNSIGNED-PAYLOAD over https and the body's sha256
    over plain http.

The machine sets AWS_CA_BUNDLE, CURL_CA_BUNDLE and SSL_CERT_FILE; every child
environment here sets or removes them explicitly.

Environment: AWS_* (required; the module is skipped without
AWS_ENDPOINT_URL), TIERFS_CTL (default build/tierfsctl of this repository),
TIERFS_TEST_BUCKET (default tierfs-it). Every test works under its own key
prefix and removes what it made.
"""

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
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
MiB = 1 << 20
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Variables through which a TLS library may pick a CA file: every child gets
# them removed, then only what the test means to give.
CA_VARS = ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
           "NIX_SSL_CERT_FILE")
# A rejected certificate must fail at once; a retry loop would run up to the
# client's 60 s deadline (S3_DEFAULT_DEADLINE_MS) with 8 attempts.
FAST_FAIL_S = 10.0
CERT_WORDS = re.compile(r"certificate|\bcert\b|issuer|\bCA\b|subject name|SSL", re.I)


# --- certificates ---------------------------------------------------------------


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


def _make_ca(d, name, cn):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/O=tierfs tests/CN={cn}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return d / f"{name}.pem"


def _make_server_cert(d, name, ca, san):
    (d / f"{name}.ext").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", "/O=tierfs tests/CN=tierfs test server", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
             f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             "-extfile", f"{name}.ext", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


class Certs:
    pass


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.fail("the openssl CLI is needed to make the test certificates")
    d = tmp_path_factory.mktemp("tls")
    c = Certs()
    c.ca = _make_ca(d, "ca", "tierfs throwaway test CA")
    c.other_ca = _make_ca(d, "other-ca", "tierfs unrelated test CA")
    c.cert, c.key = _make_server_cert(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
    # signed by the trusted CA, but for another name only
    c.wrong_cert, c.wrong_key = _make_server_cert(d, "wrong-host", "ca",
                                                  "DNS:wrong-host.invalid")
    c.dir = d
    return c


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
    for attempt in range(10):  # the local S3 may be restarting
        try:
            client.head_bucket(Bucket=BUCKET)
            break
        except ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchBucket", "NotFound"):
                try:
                    client.create_bucket(Bucket=BUCKET)
                except ClientError as e2:
                    if e2.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou",
                                                            "BucketAlreadyExists"):
                        raise
                break
            if attempt == 9:
                raise
        except Exception:  # connection refused while it restarts
            if attempt == 9:
                raise
        time.sleep(1)
    return client


@pytest.fixture
def prefix(request, s3):
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", request.node.name)
    p = f"tls/{RUN_ID}/{name}/"
    yield p
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=p):
            for o in page.get("Contents", []):
                s3.delete_object(Bucket=BUCKET, Key=o["Key"])
        for u in s3.list_multipart_uploads(Bucket=BUCKET, Prefix=p).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])
    except ClientError:
        pass


@pytest.fixture
def tls_proxy(certs):
    p = FaultProxy(UPSTREAM, tls_cert=str(certs.cert), tls_key=str(certs.key))
    p.start()
    assert p.url.startswith("https://127.0.0.1:")
    yield p
    p.stop()


@pytest.fixture
def wrong_host_proxy(certs):
    p = FaultProxy(UPSTREAM, tls_cert=str(certs.wrong_cert), tls_key=str(certs.wrong_key))
    p.start()
    yield p
    p.stop()


@pytest.fixture
def plain_proxy():
    p = FaultProxy(UPSTREAM)
    p.start()
    yield p
    p.stop()


# --- helpers --------------------------------------------------------------------


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def make_file(tmp_path, name, size):
    data = os.urandom(size)
    f = tmp_path / name
    f.write_bytes(data)
    return f, data


def child_env(endpoint, ca_bundle=None, extra=None):
    """The environment of one tierfsctl: CA variables removed, then AWS_CA_BUNDLE
    set to ca_bundle when given."""
    env = dict(os.environ)
    env.pop("AWS_ENDPOINT_URL_S3", None)  # it would take precedence
    env.pop("AWS_SESSION_TOKEN", None)
    for v in CA_VARS:
        env.pop(v, None)
    env["AWS_ENDPOINT_URL"] = endpoint
    if ca_bundle is not None:
        env["AWS_CA_BUNDLE"] = str(ca_bundle)
    env.update(extra or {})
    return env


def ctl(endpoint, *args, ca_bundle=None, prefix_argv=(), timeout=90):
    """Runs `tierfsctl s3 ARGS --endpoint ENDPOINT`; returns (CompletedProcess, seconds).
    stdout is bytes, stderr text."""
    argv = [*prefix_argv, CTL, "s3", *args, "--endpoint", endpoint]
    if SECRET:
        assert SECRET not in " ".join(argv), "a secret would go into argv"
    t0 = time.monotonic()
    r = subprocess.run(argv, env=child_env(endpoint, ca_bundle), capture_output=True,
                       timeout=timeout)
    r.stderr = r.stderr.decode(errors="replace")
    return r, time.monotonic() - t0


def object_bytes(s3, key):
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def object_exists(s3, key):
    try:
        s3.head_object(Bucket=BUCKET, Key=key)
        return True
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise


def settled_tls(proxy, at_least=1, wait_s=3.0):
    """The proxy's TLS log once the handler threads caught up with a client that
    already exited (they record a handshake when it ends, which can be just after)."""
    end = time.monotonic() + wait_s
    while len(proxy.tls_handshakes()) < at_least and time.monotonic() < end:
        time.sleep(0.02)
    time.sleep(0.1)  # room for any later connection to show up too
    return proxy.tls_handshakes()


def describe(proxy, r):
    return (f"exit {r.returncode}\nstderr: {r.stderr[-2000:]}\n"
            f"http requests: {[(e['method'], e['path'], e['status']) for e in proxy.log]}\n"
            f"tls: {[(e['ok'], e['error']) for e in proxy.tls_handshakes()]}")


def assert_rejected_fast(proxy, r, secs, what):
    """The certificate was refused: exit 1, at once, one connection, no HTTP."""
    info = describe(proxy, r)
    assert r.returncode == 1, f"{what}: expected exit 1\n{info}"
    assert CERT_WORDS.search(r.stderr), f"{what}: stderr does not name the certificate\n{info}"
    assert "retrying" not in r.stderr, f"{what}: a certificate failure was retried\n{info}"
    assert len(proxy.log) == 0, f"{what}: an HTTP request got through TLS\n{info}"
    conns = settled_tls(proxy)
    assert len(conns) == 1, (
        f"{what}: {len(conns)} TLS connections: the certificate failure was retried "
        f"(it is not transient)\n{info}")
    assert secs < FAST_FAIL_S, f"{what}: took {secs:.1f} s (a retry loop?)\n{info}"
    if SECRET:
        assert SECRET not in r.stderr and SECRET.encode() not in r.stdout


# --- tests: a trusted CA ------------------------------------------------------


def test_put_get_ls_round_trip_with_ca_bundle(s3, tls_proxy, certs, prefix, tmp_path):
    key = prefix + "obj.bin"
    src, data = make_file(tmp_path, "src.bin", 3 * MiB + 12345)
    r, _ = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}", ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    assert object_bytes(s3, key) == data  # upstream, over plain http

    dst = tmp_path / "dst.bin"
    r, _ = ctl(tls_proxy.url, "get", f"s3://{BUCKET}/{key}", str(dst), ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    assert dst.read_bytes() == data

    r, _ = ctl(tls_proxy.url, "get", f"s3://{BUCKET}/{key}", "-", ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    assert r.stdout == data

    r, _ = ctl(tls_proxy.url, "ls", f"s3://{BUCKET}/{prefix}", ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    listing = r.stdout.decode()
    assert re.search(rf"\b{len(data)}\s+{re.escape(key)}$", listing, re.M), listing

    # everything went over TLS, with the Host the client connected to
    hs = tls_proxy.tls_handshakes()
    assert hs and all(e["ok"] for e in hs), hs
    assert all(e["version"] in ("TLSv1.2", "TLSv1.3") for e in hs), hs
    assert {e["method"] for e in tls_proxy.log} >= {"PUT", "GET"}
    assert all(e["headers"]["host"] == f"127.0.0.1:{tls_proxy.port}" for e in tls_proxy.log)
    assert all(e["status"] and e["status"] < 300 for e in tls_proxy.log), tls_proxy.log


def test_get_to_stdout_bytes_exact_and_localhost_name_verified(s3, tls_proxy, certs,
                                                              prefix, tmp_path):
    key = prefix + "small"
    data = os.urandom(70000) + b"\r\n\x00end"
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    # the DNS:localhost SAN: the name is checked, not only the IP
    endpoint = f"https://localhost:{tls_proxy.port}"
    argv = [CTL, "s3", "get", f"s3://{BUCKET}/{key}", "-", "--endpoint", endpoint]
    r = subprocess.run(argv, env=child_env(endpoint, certs.ca), capture_output=True,
                       timeout=90)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout == data
    assert tls_proxy.log and all(e["headers"]["host"] == f"localhost:{tls_proxy.port}"
                                 for e in tls_proxy.log)


def test_system_ca_store_is_used_without_ca_bundle(s3, tls_proxy, certs, prefix, tmp_path):
    """No AWS_CA_BUNDLE: the client trusts the system store. The CA is put there for
    the child only, by binding a bundle over the system one in a private mount
    namespace (needs root and unshare; skipped otherwise)."""
    bundle = tmp_path / "system-bundle.crt"
    system = Path(SYSTEM_BUNDLE).read_bytes() if Path(SYSTEM_BUNDLE).exists() else b""
    bundle.write_bytes(system + b"\n" + certs.ca.read_bytes())
    if not shutil.which("unshare") or not Path(SYSTEM_BUNDLE).exists():
        pytest.skip(f"needs unshare(1) and {SYSTEM_BUNDLE}")
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            f'mount --bind "$0" {SYSTEM_BUNDLE}', str(bundle)],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount in a private mount namespace: {probe.stderr.strip()}")
    wrap = ("unshare", "-m", "sh", "-c",
            f'mount --bind "$0" {SYSTEM_BUNDLE} && exec "$@"', str(bundle))

    key = prefix + "sys.bin"
    src, data = make_file(tmp_path, "src.bin", 300000)
    r, _ = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}", prefix_argv=wrap)
    assert r.returncode == 0, describe(tls_proxy, r)
    dst = tmp_path / "dst.bin"
    r, _ = ctl(tls_proxy.url, "get", f"s3://{BUCKET}/{key}", str(dst), prefix_argv=wrap)
    assert r.returncode == 0, describe(tls_proxy, r)
    assert dst.read_bytes() == data == object_bytes(s3, key)
    assert tls_proxy.tls_handshakes() and all(e["ok"] for e in tls_proxy.tls_handshakes())


# --- tests: an untrusted certificate is refused, at once ----------------------------


@pytest.mark.parametrize("cmd", ["put", "get", "ls"])
def test_system_cas_refuse_unknown_ca_without_retry(s3, tls_proxy, certs, prefix, tmp_path,
                                                    cmd):
    key = prefix + "obj"
    if cmd == "get":
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"existing")
    src, _ = make_file(tmp_path, "src.bin", 200000)
    args = {"put": ("put", str(src), f"s3://{BUCKET}/{key}"),
            "get": ("get", f"s3://{BUCKET}/{key}", str(tmp_path / "dst.bin")),
            "ls": ("ls", f"s3://{BUCKET}/{prefix}")}[cmd]
    r, secs = ctl(tls_proxy.url, *args, ca_bundle=None)
    assert_rejected_fast(tls_proxy, r, secs, f"{cmd} with the system CAs")
    # the client refused the server, not the other way round
    failed = tls_proxy.tls_handshakes(ok=False)
    assert failed and re.search(r"unknown.ca|certificate", failed[0]["error"], re.I), failed
    if cmd == "put":
        assert not object_exists(s3, key)
    if cmd == "get":
        assert not (tmp_path / "dst.bin").exists() or (tmp_path / "dst.bin").stat().st_size == 0


def test_ca_bundle_of_another_ca_is_refused_without_retry(s3, tls_proxy, certs, prefix,
                                                          tmp_path):
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src.bin", 100000)
    r, secs = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}",
                  ca_bundle=certs.other_ca)
    assert_rejected_fast(tls_proxy, r, secs, "put with another CA's bundle")
    assert not object_exists(s3, key)


def test_certificate_for_another_host_is_refused_without_retry(s3, wrong_host_proxy, certs,
                                                               prefix, tmp_path):
    """Signed by the trusted CA, but for another name: the host name is checked."""
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src.bin", 100000)
    r, secs = ctl(wrong_host_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}",
                  ca_bundle=certs.ca)
    assert r.returncode == 1, describe(wrong_host_proxy, r)
    assert re.search(r"subject|name|certificate|host", r.stderr, re.I), r.stderr
    assert "retrying" not in r.stderr, describe(wrong_host_proxy, r)
    assert len(wrong_host_proxy.log) == 0, describe(wrong_host_proxy, r)
    assert len(settled_tls(wrong_host_proxy)) == 1, describe(wrong_host_proxy, r)
    assert secs < FAST_FAIL_S, f"took {secs:.1f} s\n{describe(wrong_host_proxy, r)}"
    assert not object_exists(s3, key)


def test_missing_ca_bundle_file_fails_without_retry(s3, tls_proxy, prefix, tmp_path):
    key = prefix + "obj"
    src, _ = make_file(tmp_path, "src.bin", 1000)
    r, secs = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}",
                  ca_bundle=tmp_path / "no-such-ca.pem")
    assert r.returncode == 1, describe(tls_proxy, r)
    assert "retrying" not in r.stderr, describe(tls_proxy, r)
    assert len(tls_proxy.log) == 0
    assert len(settled_tls(tls_proxy, at_least=0)) <= 1
    assert secs < FAST_FAIL_S, f"took {secs:.1f} s\n{describe(tls_proxy, r)}"
    assert not object_exists(s3, key)


# --- tests: payload signing follows the scheme ---------------------------------------


def _single_put(proxy, key):
    puts = proxy.requests(method="PUT", path=f"/{BUCKET}/{key}")
    assert len(puts) == 1, [(e["method"], e["path"], e["status"]) for e in proxy.log]
    return puts[0]


def test_streamed_put_over_https_is_unsigned_payload(s3, tls_proxy, certs, prefix, tmp_path):
    key = prefix + "big.bin"
    src, data = make_file(tmp_path, "big.bin", 2 * MiB)
    r, _ = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}", ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    put = _single_put(tls_proxy, key)
    assert put["headers"].get("x-amz-content-sha256") == "UNSIGNED-PAYLOAD", put["headers"]
    assert "x-amz-content-sha256" in put["signed_headers"]
    assert put["body_len"] == len(data) and put["body_sha256"] == sha256(data)
    assert put["status"] == 200
    assert object_bytes(s3, key) == data


def test_streamed_put_over_http_signs_the_payload_sha256(s3, plain_proxy, prefix, tmp_path):
    key = prefix + "big.bin"
    src, data = make_file(tmp_path, "big.bin", 2 * MiB)
    r, _ = ctl(plain_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}")
    assert r.returncode == 0, describe(plain_proxy, r)
    put = _single_put(plain_proxy, key)
    h = put["headers"].get("x-amz-content-sha256", "")
    assert re.fullmatch(r"[0-9a-f]{64}", h), put["headers"]
    assert h == sha256(data) == put["body_sha256"]
    assert "x-amz-content-sha256" in put["signed_headers"]
    assert put["status"] == 200
    assert object_bytes(s3, key) == data


# --- tests: transient vs permanent handshake failures --------------------------------


def test_handshake_reset_by_the_network_is_retried_and_put_succeeds(s3, tls_proxy, certs,
                                                                    prefix, tmp_path):
    """A TLS handshake cut by a RST is transient (CURLE_SSL_CONNECT_ERROR or a
    reset): retried, unlike a refused certificate."""
    key = prefix + "obj.bin"
    src, data = make_file(tmp_path, "src.bin", 150000)
    tls_proxy.add_tls_reset(2)
    r, secs = ctl(tls_proxy.url, "put", str(src), f"s3://{BUCKET}/{key}", ca_bundle=certs.ca)
    assert r.returncode == 0, describe(tls_proxy, r)
    assert r.stderr.count("retrying") == 2, r.stderr
    hs = tls_proxy.tls_handshakes()
    assert [e.get("action") for e in hs[:2]] == ["tls_reset", "tls_reset"], hs
    assert hs[2]["ok"], hs
    assert len(tls_proxy.requests(method="PUT")) == 1
    assert object_bytes(s3, key) == data


class _PlainHttpServer:
    """Answers every connection with a plain-HTTP 400, as an http-only S3 does
    when a client speaks TLS to it; counts the connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            with c:
                try:
                    c.settimeout(2)
                    c.recv(4096)
                    c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                              b"Connection: close\r\n\r\n")
                except OSError:
                    pass

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def test_https_to_a_plain_http_server_fails_without_retry(s3, prefix, certs):
    srv = _PlainHttpServer()
    try:
        endpoint = f"https://127.0.0.1:{srv.port}"
        t0 = time.monotonic()
        r = subprocess.run([CTL, "s3", "ls", f"s3://{BUCKET}/{prefix}", "--endpoint", endpoint],
                           env=child_env(endpoint, certs.ca), capture_output=True, text=True,
                           timeout=90)
        secs = time.monotonic() - t0
    finally:
        srv.close()
    assert r.returncode == 1, r.stderr
    assert "wrong version number" in r.stderr or "SSL" in r.stderr, r.stderr
    assert srv.connections == 1 and "retrying" not in r.stderr, (
        f"{srv.connections} connections in {secs:.1f} s:\n{r.stderr}")
