"""Test helpers: a small scheduler over real HTTP on loopback, signed calls to an executor,
and waiting on conditions (never sleep-and-hope)."""

import http.client
import http.server
import json
import logging
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from axe_executor import protocol as p  # noqa: E402

# The SDK logs refusals and retries as warnings; tests provoke many on purpose.
logging.getLogger("axe_executor").setLevel(os.environ.get("AXE_TEST_LOG", "CRITICAL"))

TOKEN = "test-executor-token-0123456789"
WAIT = 30.0


def wait_until(cond: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(0.01)


class FakeScheduler:
    """The scheduler side of the protocol, recording what executors send. Behaviour knobs:
    callback_failures (answer the first N result calls 500), heartbeat_404 (answer the next N
    heartbeats 404), register_status, unavailable (answer everything 503 naming primary)."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None) -> None:
        self.lock = threading.Lock()
        self.registers = []  # type: List[Dict[str, Any]]
        self.heartbeats = []  # type: List[Dict[str, Any]]
        self.results = []  # type: List[Dict[str, Any]]
        self.result_calls = 0
        self.deregisters = []  # type: List[Dict[str, Any]]
        self.auth = []  # type: List[str]
        self.callback_failures = 0
        self.heartbeat_404 = 0
        self.register_status = 200
        self.unavailable = False
        self.primary = ""
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, resp = fake._handle(self.path, self.headers.get("Authorization") or "", body)
                data = json.dumps(resp).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

            def server_bind(self) -> None:
                socketserver.TCPServer.server_bind(self)
                self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

        self.server = S(("127.0.0.1", 0), H)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _handle(self, path: str, auth: str, body: bytes) -> Tuple[int, Any]:
        msg = json.loads(body)
        with self.lock:
            self.auth.append(auth)
            if self.unavailable:
                return 503, {"error": "this node is a backup", "primary": self.primary}
            if path == p.PATH_REGISTER:
                self.registers.append(msg)
                if self.register_status != 200:
                    return self.register_status, {"error": "refused by the test"}
                return 200, {"heartbeat_interval_ms": 200, "lost_after_ms": 3000, "version": 2}
            if path == p.PATH_HEARTBEAT:
                self.heartbeats.append(msg)
                if self.heartbeat_404 > 0:
                    self.heartbeat_404 -= 1
                    return 404, {"error": "unknown executor"}
                return 200, {}
            if path == p.PATH_DEREGISTER:
                self.deregisters.append(msg)
                return 200, {"ok": True}
            if path == p.PATH_CALLBACK:
                self.result_calls += 1
                if self.callback_failures > 0:
                    self.callback_failures -= 1
                    return 500, {"error": "failing on purpose"}
                self.results.append(msg)
                return 200, {"ok": True}
            if path == p.PATH_CALLBACK_BATCH:
                self.result_calls += 1
                if self.callback_failures > 0:
                    self.callback_failures -= 1
                    return 500, {"error": "failing on purpose"}
                self.results.extend(msg["results"])
                return 200, {"results": [{"status": 200, "ok": True} for _ in msg["results"]]}
        return 404, {"error": "no endpoint %s" % path}

    def result(self, ticket: str) -> Optional[Dict[str, Any]]:
        with self.lock:
            for r in self.results:
                if r["ticket"] == ticket:
                    return r
        return None

    def wait_result(self, ticket: str, timeout: float = WAIT) -> Dict[str, Any]:
        return wait_until(lambda: self.result(ticket), timeout, "the result of " + ticket)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_body(ticket: str, task: str = "t", handler: str = "echo", attempt: int = 1, deadline: int = 0,
             **extra: Any) -> Dict[str, Any]:
    b = {"ticket": ticket, "task": task, "handler": handler, "attempt": attempt, "deadline": deadline,
         "scheduled_at": p.now_ms()}
    b.update(extra)
    return b


class Caller:
    """Makes the scheduler's calls to one executor: signed (v2) with its token and
    incarnation, or as told."""

    def __init__(self, address: str, incarnation: str, token: str = TOKEN,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self.address = address
        self.incarnation = incarnation
        self.key = p.dispatch_key(token) if token else None
        self.ssl = ssl_context

    def raw(self, method: str, path: str, body: bytes, headers: Dict[str, str]) -> Tuple[int, Any]:
        host, port = self.address.rsplit(":", 1)
        if self.ssl is not None:
            c = http.client.HTTPSConnection(host, int(port), timeout=WAIT, context=self.ssl)
        else:
            c = http.client.HTTPConnection(host, int(port), timeout=WAIT)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        return r.status, (json.loads(data) if data else None)

    def call(self, path: str, obj: Any = None, body: Optional[bytes] = None, epoch: Optional[int] = None,
             incarnation: Optional[str] = None, at: Optional[int] = None, sign: bool = True,
             headers: Optional[Dict[str, str]] = None, method: str = "POST") -> Tuple[int, Any]:
        if body is None:
            body = json.dumps(obj).encode() if obj is not None else b""
        h = {"Content-Type": "application/json"}
        ep = "" if epoch is None else str(epoch)
        if epoch is not None:
            h[p.HEADER_EPOCH] = ep
        inc = self.incarnation if incarnation is None else incarnation
        if sign and self.key is not None:
            h[p.HEADER_INCARNATION] = inc
            h["Authorization"] = p.sign_call(self.key, p.now_ms() if at is None else at, self.address, path, ep,
                                             body, incarnation=inc)
        if headers:
            h.update(headers)
        return self.raw(method, path, body, h)

    def run(self, obj: Dict[str, Any], **kw: Any) -> Tuple[int, Any]:
        return self.call(p.PATH_RUN, obj, **kw)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with the
    openssl command into a temporary directory."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="axe-py-tls-")
        d = self.dir

        def run(*args: str) -> None:
            subprocess.run(["openssl"] + list(args), cwd=d, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=axe test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        with open(os.path.join(d, "san.ext"), "w") as f:
            # What strict X.509 checking (Python 3.13's default) wants of a leaf certificate.
            f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
                    "keyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n"
                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        for name in ("server", "client"):
            run("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name)
            run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", name + ".pem", "-days", "2", "-extfile", "san.ext")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def have_openssl() -> bool:
    return shutil.which("openssl") is not None
