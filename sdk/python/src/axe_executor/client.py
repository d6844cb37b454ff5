"""The client of the scheduler endpoints, with failover across several scheduler addresses
(docs/protocol.md, Failover).

A call starts with the scheduler that answered last. A connection error or a 503 moves on to
the next address, or first to the primary a backup's 503 names when that is one of the
configured addresses; any other status is that scheduler's answer. Each address is tried at
most once per call. Connections are kept alive and reused.
"""

import http.client
import json
import logging
import ssl
import threading
import urllib.parse
from typing import List, Optional, Tuple

from .errors import InvalidConfig, NoScheduler

log = logging.getLogger("axe_executor")


class _Base:
    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query or u.fragment \
                or u.username or u.password:
            raise InvalidConfig("schedulers: %r must be http(s)://host:port with no path" % url)
        self.url = url.rstrip("/")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)

    def key(self) -> Tuple[str, int, bool]:
        return (self.host.lower(), self.port, self.tls)


class SchedulerClient:
    """Posts JSON to whichever configured scheduler answers."""

    def __init__(self, schedulers: List[str], token: str, timeout: float,
                 ssl_context: Optional[ssl.SSLContext] = None, max_idle: int = 16):
        if not schedulers:
            raise InvalidConfig("schedulers: at least one scheduler URL required")
        self._bases = [_Base(s) for s in schedulers]
        self._auth = "Bearer " + token if token else ""
        self._timeout = timeout
        self._ssl = ssl_context
        if any(b.tls for b in self._bases) and self._ssl is None:
            self._ssl = ssl.create_default_context()
        self._lock = threading.Lock()
        self._idle = [[] for _ in self._bases]  # type: List[List[http.client.HTTPConnection]]
        self._max_idle = max_idle
        self._current = 0
        self._closed = False

    def post(self, path: str, body: bytes) -> Tuple[int, bytes]:
        """The status and body of the first scheduler that answered anything but 503; raises
        NoScheduler when every address failed."""
        start = self._current
        idx = start
        tried = [False] * len(self._bases)
        last_err = ""
        while True:
            tried[idx] = True
            nxt = -1
            try:
                status, resp = self._post_to(idx, path, body)
            except (OSError, http.client.HTTPException) as e:
                last_err = "cannot reach scheduler %s: %s" % (self._bases[idx].url, e)
            else:
                if status != 503:
                    if idx != start:
                        with self._lock:
                            if self._current == start:
                                self._current = idx
                                log.info("following scheduler %s", self._bases[idx].url)
                    return status, resp
                last_err = "scheduler %s answered %s with 503: %s" % (self._bases[idx].url, path, error_text(resp))
                nxt = self._index_of(_primary_of(resp))
            if nxt < 0 or tried[nxt]:
                nxt = -1
                for i in range(1, len(self._bases)):
                    j = (idx + i) % len(self._bases)
                    if not tried[j]:
                        nxt = j
                        break
            if nxt < 0:
                raise NoScheduler("executor: no scheduler reachable: " + last_err)
            idx = nxt

    def _index_of(self, url: str) -> int:
        if not url:
            return -1
        try:
            k = _Base(url).key()
        except InvalidConfig:
            return -1
        for i, b in enumerate(self._bases):
            if b.key() == k:
                return i
        return -1

    def _conn(self, idx: int) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle[idx]:
                return self._idle[idx].pop()
        b = self._bases[idx]
        if b.tls:
            return http.client.HTTPSConnection(b.host, b.port, timeout=self._timeout, context=self._ssl)
        return http.client.HTTPConnection(b.host, b.port, timeout=self._timeout)

    def _post_to(self, idx: int, path: str, body: bytes) -> Tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if self._auth:
            headers["Authorization"] = self._auth
        for first in (True, False):
            conn = self._conn(idx)
            fresh = conn.sock is None
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                # A kept-alive connection the scheduler closed meanwhile: try once on a new one.
                if first and not fresh:
                    continue
                raise
            if resp.will_close:
                conn.close()
            else:
                with self._lock:
                    if not self._closed and len(self._idle[idx]) < self._max_idle:
                        self._idle[idx].append(conn)
                        conn = None
                if conn is not None:
                    conn.close()
            return resp.status, data
        raise OSError("unreachable")

    def close(self) -> None:
        """Drop idle connections."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, [[] for _ in self._bases]
        for conns in idle:
            for c in conns:
                c.close()


def _primary_of(body: bytes) -> str:
    try:
        v = json.loads(body)
    except ValueError:
        return ""
    p = v.get("primary") if isinstance(v, dict) else None
    return p if isinstance(p, str) else ""


def error_text(body: bytes) -> str:
    """The "error" of an error body, or the start of the body."""
    try:
        v = json.loads(body)
        if isinstance(v, dict) and isinstance(v.get("error"), str) and v["error"]:
            return v["error"]
    except ValueError:
        pass
    return body[:200].decode("utf-8", "replace")
