"""faultproxy.py: a fault-injecting HTTP/1.1 reverse proxy for testing the tierfs S3 client (pure stdlib).

It sits between an S3 client and an upstream S3 endpoint and forwards every
request byte-exactly (method, request target, headers including Host, body),
except when a rule of its fault plan matches the request: then it answers
with an S3 error, resets the TCP connection (before or after the upstream
applied the request), truncates the response, or delays it.

As a module (what the pytest suites do):

    p = FaultProxy("http://127.0.0.1:8780")
    p.start()                       # serves on p.url in background threads
    p.add_rule("503", method="PUT", path="/bucket/key", count=2)
    ...                             # point the client at p.url
    p.log                           # one dict per request received
    p.stop()

From a shell:

    /usr/bin/python3 tests/faultproxy.py --upstream http://127.0.0.1:8780 \
        --port 8781 --rule '503:PUT:/bucket/key:2' --rule 'delay:300:GET::1'

TLS: with tls_cert (a PEM server certificate, chain allowed) and tls_key
(its PEM private key; may be omitted when tls_cert holds the key too), or a
ready ssl.SSLContext as tls_context, the proxy serves HTTPS (p.url is
https://HOST:PORT) and still forwards to the upstream as given (plain http
is fine). Host and every other header are forwarded unchanged. Each
accepted connection adds a dict to p.tls_log: whether its handshake
succeeded and, when it failed, why (e.g. the client's "unknown ca" alert),
so a test can count the connections that a client that refuses the
certificate opened:

    p = FaultProxy("http://127.0.0.1:8780", tls_cert="srv.pem", tls_key="srv.key")
    p.start()                       # p.url == "https://127.0.0.1:PORT"
    p.tls_handshakes(ok=False)      # the failed handshakes
    p.add_tls_reset(2)              # RST the next 2 connections mid-handshake
                                    # (after the ClientHello): a transient failure

    /usr/bin/python3 tests/faultproxy.py --upstream http://127.0.0.1:8780 \
        --tls-cert srv.pem --tls-key srv.key

A rule is ACTION[:ARG]:METHOD:PATH:COUNT, where METHOD and PATH may be
empty (any), PATH is a substring of the request target (path and query as
received) or, prefixed with "re:", a regular expression searched in it, and
COUNT is how many times the rule fires before it stops (default 1).

Actions:
    503          503 ServiceUnavailable, not forwarded
    slowdown     503 SlowDown, not forwarded
    500          500 InternalError, not forwarded
    400 403 404  that status with InvalidRequest/AccessDenied/NoSuchKey,
                 not forwarded (for checking that they are NOT retried)
    reset_before read the whole request, then close with TCP RST; not forwarded
    reset_after  forward, read the upstream response, then RST instead of
                 answering: the request WAS applied (the ambiguous case)
    truncate     forward, answer with the status, the headers and half the
                 body, then RST
    whole        forward a ranged GET, but answer 200 with the whole
                 object, as a server that ignores Range does (its bytes
                 are those of the last 200 GET of the same path that went
                 through the proxy)
    delay:<ms>   sleep, then forward normally

Each request is logged (method, target, selected headers, whether a session
token and an Authorization header were present, the Authorization value,
sha256 and length of the body, the action taken and the status answered).
"""

import argparse
import hashlib
import http.client
import json
import re
import select
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
import urllib.parse
from email.utils import formatdate

ERRORS = {
    "503": (503, "Service Unavailable", "ServiceUnavailable",
            "Please reduce your request rate."),
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError",
            "We encountered an internal error. Please try again."),
    "400": (400, "Bad Request", "InvalidRequest", "Injected bad request."),
    "403": (403, "Forbidden", "AccessDenied", "Access Denied"),
    "404": (404, "Not Found", "NoSuchKey", "The specified key does not exist."),
}
ACTIONS = set(ERRORS) | {"reset_before", "reset_after", "truncate", "delay", "forward",
                         "whole"}

# Request headers copied into each log entry (lower-case names).
LOGGED_HEADERS = (
    "host", "content-length", "content-type", "content-md5", "range", "if-match",
    "x-amz-content-sha256", "x-amz-date", "x-amz-security-token", "x-amz-copy-source",
    "transfer-encoding", "expect", "connection",
)
# Hop-by-hop headers of the upstream response that the proxy manages itself.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}

MAX_LINE = 65536
MAX_HEADERS = 200


class Rule:
    """One entry of the fault plan; fires `count` times, then no more."""

    def __init__(self, action, method=None, path=None, regex=None, count=1,
                 delay_ms=0, code=None, message=None):
        if action.startswith("delay:"):
            action, delay_ms = "delay", int(action.split(":", 1)[1])
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        self.action = action
        self.method = method.upper() if method else None
        self.path = path or None
        self.regex = re.compile(regex) if isinstance(regex, str) else regex
        self.count = count
        self.delay_ms = delay_ms
        self.code = code
        self.message = message
        self.fired = 0

    def matches(self, method, target):
        if self.fired >= self.count:
            return False
        if self.method and self.method != method.upper():
            return False
        if self.path and self.path not in target:
            return False
        if self.regex and not self.regex.search(target):
            return False
        return True

    def __repr__(self):
        return (f"Rule({self.action!r}, method={self.method!r}, path={self.path!r}, "
                f"regex={self.regex.pattern if self.regex else None!r}, "
                f"count={self.count}, fired={self.fired})")


def parse_rule(spec):
    """'503:PUT:/bucket/key:2', 'delay:300:GET::1', 'truncate::re:/b/k$:1' -> Rule."""
    action, _, rest = spec.partition(":")
    delay_ms = 0
    if action == "delay":
        ms, _, rest = rest.partition(":")
        delay_ms = int(ms)
    method, _, rest = rest.partition(":")
    count = 1
    head, sep, tail = rest.rpartition(":")
    if sep and tail.isdigit():
        rest, count = head, int(tail)
    regex = None
    path = rest or None
    if path and path.startswith("re:"):
        regex, path = path[3:], None
    return Rule(action, method=method or None, path=path, regex=regex, count=count,
                delay_ms=delay_ms)


def signed_headers(authorization):
    """The SignedHeaders list of a SigV4 Authorization header value."""
    m = re.search(r"SignedHeaders=([^,\s]+)", authorization or "")
    return m.group(1).split(";") if m else []


class _BadRequest(Exception):
    pass


class _Handler(socketserver.BaseRequestHandler):
    """One client connection: a keep-alive loop of requests."""

    def setup(self):
        self.proxy = self.server.proxy
        self.sock = self.request
        self.sock.settimeout(self.proxy.idle_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = None
        self.alive = True
        self.proxy._track(self.sock, True)
        if self.proxy._tls_context is not None:
            self.alive = self._tls_handshake()
        if self.alive:
            self.rfile = self.sock.makefile("rb")

    def _tls_handshake(self):
        """Wraps the connection in TLS (server side); False when the handshake failed."""
        entry = {"time": time.time(), "peer": "%s:%s" % self.client_address[:2],
                 "ok": False, "error": None, "version": None, "cipher": None,
                 "sni": None}
        raw = self.sock
        try:
            tls = self.proxy._tls_context.wrap_socket(
                raw, server_side=True, do_handshake_on_connect=False)
        except OSError as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            self.proxy._record_tls(entry)
            return False
        # raw is detached now: stop() must shut down the TLS socket instead
        self.proxy._track(raw, False)
        self.sock = tls
        self.proxy._track(tls, True)
        tls.settimeout(self.proxy.tls_handshake_timeout)
        if self.proxy._take_tls_reset():
            # wait for the ClientHello, then RST before answering it
            try:
                select.select([tls], [], [], self.proxy.tls_handshake_timeout)
            except (OSError, ValueError):
                pass
            entry["error"] = "reset by faultproxy (tls reset)"
            entry["action"] = "tls_reset"
            self.proxy._record_tls(entry)
            self._reset()
            return False
        try:
            tls.do_handshake()
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None)
            entry["error"] = (f"{type(e).__name__}: {reason or e}")
            entry["reason"] = reason
            self.proxy._record_tls(entry)
            return False
        tls.settimeout(self.proxy.idle_timeout)
        entry.update(ok=True, version=tls.version(),
                     cipher=(tls.cipher() or (None,))[0],
                     sni=getattr(tls, "server_hostname", None))
        self.proxy._record_tls(entry)
        return True

    def finish(self):
        self.proxy._track(self.sock, False)
        try:
            if self.rfile is not None:
                self.rfile.close()
        except OSError:
            pass
        if self.sock is not self.request:
            # TLS: the server's shutdown_request() only sees the detached
            # plain socket, so the TLS one is closed here
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            try:
                self.sock.close()
            except OSError:
                pass

    def handle(self):
        if not self.alive:
            return
        try:
            while self.alive and self._one_request():
                pass
        except (OSError, _BadRequest):
            pass

    # --- reading the request ---------------------------------------------

    def _readline(self):
        line = self.rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise _BadRequest("line too long")
        return line

    def _read_exact(self, n):
        data = self.rfile.read(n)
        if data is None or len(data) != n:
            raise _BadRequest("short body")
        return data

    def _read_chunked(self):
        parts = []
        while True:
            size = int(self._readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self._read_exact(size))
            self._readline()

    def _one_request(self):
        line = self._readline()
        while line in (b"\r\n", b"\n"):  # tolerated before a request
            line = self._readline()
        if not line:
            return False
        words = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            raise _BadRequest("bad request line")
        method, target, version = words
        headers = []
        while True:
            h = self._readline()
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                raise _BadRequest("eof in headers")
            if len(headers) >= MAX_HEADERS:
                raise _BadRequest("too many headers")
            name, sep, value = h.decode("latin-1").rstrip("\r\n").partition(":")
            if not sep:
                raise _BadRequest("bad header line")
            headers.append((name, value.strip(" \t")))
        hmap = {}
        for name, value in headers:
            hmap.setdefault(name.lower(), value)
        if hmap.get("expect", "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in hmap.get("transfer-encoding", "").lower():
            body = self._read_chunked()
            headers = [(n, v) for n, v in headers if n.lower() != "transfer-encoding"]
            headers.append(("Content-Length", str(len(body))))
        elif "content-length" in hmap:
            body = self._read_exact(int(hmap["content-length"]))
        else:
            body = b""
        conn_hdr = hmap.get("connection", "").lower()
        keep_alive = version == "HTTP/1.1" and "close" not in conn_hdr
        if version == "HTTP/1.0" and "keep-alive" in conn_hdr:
            keep_alive = True
        self._serve(method, target, version, headers, hmap, body, keep_alive)
        return self.alive and keep_alive

    # --- answering -----------------------------------------------------------

    def _serve(self, method, target, version, headers, hmap, body, keep_alive):
        rule = self.proxy._match(method, target)
        action = rule.action if rule else "forward"
        auth = hmap.get("authorization")
        entry = {
            "seq": None,
            "time": time.time(),
            "method": method,
            "path": target,
            "peer": "%s:%s" % self.client_address[:2],
            "version": version,
            "headers": {k: hmap[k] for k in LOGGED_HEADERS if k in hmap},
            "has_security_token": "x-amz-security-token" in hmap,
            "security_token": hmap.get("x-amz-security-token"),
            "has_authorization": auth is not None,
            "authorization": auth,
            "signed_headers": signed_headers(auth),
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "action": action,
            "status": None,
        }
        self.proxy._record(entry)

        if action in ERRORS:
            status, reason, code, message = ERRORS[action]
            if rule.code:
                code = rule.code
            if rule.message:
                message = rule.message
            entry["status"] = status
            self._send_error(method, target, status, reason, code, message, entry,
                             keep_alive)
            return
        if action == "reset_before":
            self._reset()
            return
        if action == "delay":
            time.sleep(rule.delay_ms / 1000.0)

        try:
            status, reason, rheaders, rbody = self._forward(method, target, headers,
                                                            body)
        except (OSError, http.client.HTTPException) as e:
            entry["status"] = 502
            entry["upstream_error"] = repr(e)
            self._send_error(method, target, 502, "Bad Gateway", "BadGateway",
                             f"faultproxy: upstream failed: {e}", entry, keep_alive)
            return
        path = target.split("?", 1)[0]
        if method == "GET" and status == 200:
            with self.proxy._lock:
                self.proxy.whole[path] = rbody
        if action == "whole" and method == "GET" and status == 206:
            with self.proxy._lock:
                full = self.proxy.whole.get(path)
            if full is not None:
                status, reason, rbody = 200, "OK", full
                rheaders = [(n, v) for n, v in rheaders
                            if n.lower() != "content-range"]
        entry["status"] = status
        if action == "reset_after":
            self._reset()
            return
        out = []
        for name, value in rheaders:
            ln = name.lower()
            if ln in HOP_BY_HOP:
                continue
            if ln == "content-length" and self._has_body(method, status):
                continue
            out.append((name, value))
        if self._has_body(method, status):
            out.append(("Content-Length", str(len(rbody))))
        else:
            rbody = b""
        if not keep_alive:
            out.append(("Connection", "close"))
        head = self._head(status, reason, out)
        if action == "truncate":
            self.sock.sendall(head + rbody[: len(rbody) // 2])
            time.sleep(0.2)  # let the client read what it got before the RST
            self._reset()
            return
        self.sock.sendall(head + rbody)
        if not keep_alive:
            self.alive = False

    @staticmethod
    def _has_body(method, status):
        return method != "HEAD" and status not in (204, 304) and status >= 200

    @staticmethod
    def _head(status, reason, headers):
        lines = [f"HTTP/1.1 {status} {reason}\r\n"]
        lines += [f"{n}: {v}\r\n" for n, v in headers]
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    def _forward(self, method, target, headers, body):
        """Sends the request upstream on a fresh connection; returns the whole response."""
        up = self.proxy._upstream
        cls = (http.client.HTTPSConnection if up.scheme == "https"
               else http.client.HTTPConnection)
        conn = cls(up.hostname, up.port or (443 if up.scheme == "https" else 80),
                   timeout=self.proxy.upstream_timeout)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() in ("connection", "keep-alive"):
                    continue
                conn.putheader(name, value)
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            rbody = resp.read()
            return resp.status, resp.reason, resp.getheaders(), rbody
        finally:
            conn.close()

    def _send_error(self, method, target, status, reason, code, message, entry,
                    keep_alive):
        rid = f"faultproxy-{entry['seq']}"
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n'
               f"<Error><Code>{code}</Code><Message>{message}</Message>"
               f"<Resource>{_xml_escape(target)}</Resource>"
               f"<RequestId>{rid}</RequestId></Error>").encode()
        body = b"" if method == "HEAD" else xml
        headers = [("Content-Type", "application/xml"),
                   ("Content-Length", str(len(body))),
                   ("x-amz-request-id", rid),
                   ("Date", formatdate(usegmt=True))]
        if not keep_alive:
            headers.append(("Connection", "close"))
        self.sock.sendall(self._head(status, reason, headers) + body)
        if not keep_alive:
            self.alive = False

    def _reset(self):
        """Closes the connection with a TCP RST (SO_LINGER 0)."""
        self.alive = False
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.proxy._track(self.sock, False)
        # the fd only closes once the makefile() reader is gone too
        if self.rfile is not None:
            self.rfile.close()
        self.sock.close()


def _xml_escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class FaultProxy:
    """A fault-injecting reverse proxy to `upstream`, serving in background threads."""

    def __init__(self, upstream, host="127.0.0.1", port=0, rules=None,
                 on_request=None, idle_timeout=300.0, upstream_timeout=120.0,
                 tls_cert=None, tls_key=None, tls_context=None,
                 tls_handshake_timeout=10.0, on_tls=None):
        self._upstream = urllib.parse.urlsplit(upstream)
        if self._upstream.scheme not in ("http", "https") or not self._upstream.hostname:
            raise ValueError(f"upstream {upstream!r}: expected http(s)://HOST[:PORT]")
        self.upstream = upstream
        self.host = host
        self.port = port
        self.idle_timeout = idle_timeout
        self.upstream_timeout = upstream_timeout
        self.on_request = on_request
        self.rules = list(rules or [])
        self.log = []
        self.whole = {}  # path -> body of its last 200 GET (action "whole")
        self.tls_log = []
        self.on_tls = on_tls
        self.tls_handshake_timeout = tls_handshake_timeout
        if tls_key and not tls_cert:
            raise ValueError("tls_key without tls_cert")
        if tls_context is not None and tls_cert:
            raise ValueError("give tls_context or tls_cert/tls_key, not both")
        if tls_cert:
            tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls_context.load_cert_chain(tls_cert, tls_key)
        self._tls_context = tls_context
        self._tls_resets = 0
        self._lock = threading.Lock()
        self._conns = set()
        self._server = None
        self._thread = None

    # --- lifecycle ---------------------------------------------------------

    def start(self):
        self._server = _Server((self.host, self.port), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"faultproxy:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if not self._server:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def tls(self):
        """True when the proxy serves HTTPS."""
        return self._tls_context is not None

    @property
    def url(self):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    # --- fault plan ----------------------------------------------------------

    def add_rule(self, action, method=None, path=None, regex=None, count=1, **kw):
        """Adds a rule (see the module docstring); returns it (rule.fired counts)."""
        rule = action if isinstance(action, Rule) else Rule(
            action, method=method, path=path, regex=regex, count=count, **kw)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear_rules(self):
        with self._lock:
            self.rules.clear()

    def _match(self, method, target):
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, target):
                    rule.fired += 1
                    return rule
        return None

    # --- request log -----------------------------------------------------------

    def _record(self, entry):
        with self._lock:
            entry["seq"] = len(self.log)
            self.log.append(entry)
        if self.on_request:
            self.on_request(entry)

    def requests(self, method=None, path=None, regex=None):
        """The log entries (a snapshot) matching method / path substring / regex."""
        with self._lock:
            entries = list(self.log)
        return [e for e in entries
                if (not method or e["method"] == method.upper())
                and (not path or path in e["path"])
                and (not regex or re.search(regex, e["path"]))]

    def clear_log(self):
        with self._lock:
            self.log.clear()
            self.tls_log.clear()

    # --- TLS handshake log (HTTPS proxies only) -------------------------------

    def _record_tls(self, entry):
        with self._lock:
            entry["seq"] = len(self.tls_log)
            self.tls_log.append(entry)
        if self.on_tls:
            self.on_tls(entry)

    def add_tls_reset(self, count=1):
        """RSTs the next `count` accepted connections after their ClientHello, before
        any answer (a TLS handshake cut by the network: transient)."""
        if not self.tls:
            raise ValueError("add_tls_reset: the proxy does not serve TLS")
        with self._lock:
            self._tls_resets += count

    def _take_tls_reset(self):
        with self._lock:
            if self._tls_resets > 0:
                self._tls_resets -= 1
                return True
        return False

    def tls_handshakes(self, ok=None):
        """The TLS log entries (a snapshot), one per accepted connection; ok=True/False
        keeps only the handshakes that succeeded / failed."""
        with self._lock:
            entries = list(self.tls_log)
        return [e for e in entries if ok is None or e["ok"] == ok]

    def _track(self, sock, add):
        with self._lock:
            if add:
                self._conns.add(sock)
            else:
                self._conns.discard(sock)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Fault-injecting HTTP/1.1 reverse proxy for S3 clients.",
        epilog="RULE: ACTION[:ARG]:METHOD:PATH:COUNT, e.g. '503:PUT:/bucket/key:2', "
               "'delay:300:GET::1', 'truncate:GET:re:/b/k$:1'. Actions: "
               + ", ".join(sorted(ACTIONS - {"forward", "delay"})) + ", delay:<ms>.")
    ap.add_argument("--upstream", required=True, help="upstream S3 URL, e.g. http://127.0.0.1:8780")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    ap.add_argument("--rule", action="append", default=[], metavar="RULE")
    ap.add_argument("--json", action="store_true", help="log requests as JSON lines")
    ap.add_argument("--show-authorization", action="store_true",
                    help="include the Authorization header in the printed log")
    ap.add_argument("--tls-cert", metavar="PEM",
                    help="serve HTTPS with this server certificate (chain)")
    ap.add_argument("--tls-key", metavar="PEM",
                    help="the private key of --tls-cert (default: in the same file)")
    args = ap.parse_args(argv)
    if args.tls_key and not args.tls_cert:
        ap.error("--tls-key needs --tls-cert")
    try:
        rules = [parse_rule(r) for r in args.rule]
    except ValueError as e:
        ap.error(str(e))

    def show(e):
        if args.json:
            e = dict(e)
            if not args.show_authorization:
                e.pop("authorization", None)
            print(json.dumps(e), flush=True)
        else:
            print(f"{e['seq']:5d} {e['method']:6s} {e['path']} len={e['body_len']} "
                  f"token={'y' if e['has_security_token'] else 'n'} -> {e['action']}",
                  flush=True)

    def show_tls(e):
        if e["ok"]:
            return
        if args.json:
            print(json.dumps(dict(e, tls=True)), flush=True)
        else:
            print(f"  tls {e['peer']}: handshake failed: {e['error']}", flush=True)

    p = FaultProxy(args.upstream, host=args.host, port=args.port, rules=rules,
                   on_request=show, tls_cert=args.tls_cert, tls_key=args.tls_key,
                   on_tls=show_tls)
    p.start()
    print(f"faultproxy: {p.url} -> {args.upstream}; {len(rules)} rule(s)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
