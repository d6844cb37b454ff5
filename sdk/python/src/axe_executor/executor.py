"""The executor: serves /axe/run, /axe/runs, /axe/kill and /axe/beat, runs handlers, and
reports their results to the scheduler until acknowledged (docs/protocol.md).

Guarantees, as the Go SDK's:

* every call from the scheduler is checked against its HMAC signature (protocol version 2:
  bound to this process's incarnation) before anything else of it is read; an unsigned call
  may carry at most 4 KiB before it is answered 401;
* at most one run per ticket while the ticket is remembered (running, then finished for its
  dedup_ttl_ms, in a pluggable TicketStore), and at most one run per task at a time unless
  the run is parallel;
* runs and kills of a deposed scheduler (a stale epoch, per shard) are refused;
* a handler sees its deadline and is cancelled at it, or on /axe/kill;
* a result is re-sent with doubling backoff, across the configured schedulers, until one
  acknowledges it or finally refuses it;
* stop() drains: new runs get 503, the executor deregisters, running handlers finish (or are
  cancelled when the drain times out) and their results are delivered.
"""

import asyncio
import concurrent.futures
import heapq
import http.server
import inspect
import ipaddress
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import socketserver
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import protocol as p
from .client import SchedulerClient, error_text
from .errors import (DEADLINE_EXCEEDED, KILLED, SHUTDOWN, AlreadyStarted, Cancelled,
                     InvalidConfig, InvalidMessage, NoScheduler, RegistrationRejected, Stopped,
                     Unauthorized)
from .store import MemoryTicketStore, Outcome, TicketStore

log = logging.getLogger("axe_executor")

# Defaults of Config.
LISTEN_DEFAULT = "127.0.0.1:0"
HEARTBEAT_INTERVAL_DEFAULT = 10.0
QUEUE_SIZE_DEFAULT = 256
DEDUP_TTL_DEFAULT = 600.0
DEDUP_SIZE_DEFAULT = 10000
RESEND_MIN_DEFAULT = 0.5
RESEND_MAX_DEFAULT = 30.0
REQUEST_TIMEOUT_DEFAULT = 5.0
RESULT_SENDERS_DEFAULT = 4
OUTPUT_LIMIT_DEFAULT = 64 << 10
KILL_GRACE_DEFAULT = 5.0

# Results posted in one call to /api/v1/callback/batch, and the bytes of such a call.
RESULT_BATCH_MAX = 256
RESULT_BATCH_BYTES = 512 << 10


def pool_size_default() -> int:
    """Handlers running at once by default: cores x 2 (R5.4)."""
    return (os.cpu_count() or 1) * 2


@dataclass
class Config:
    """How an Executor runs. Only app and schedulers are required."""
    app: str
    schedulers: List[str]
    # token: the executor token. Presented to the scheduler as a bearer token, and the key
    # of the scheduler's signatures is derived from it. Empty: no signatures are checked
    # (then listen must be a loopback address unless insecure_no_auth).
    token: str = ""
    listen: str = LISTEN_DEFAULT
    # advertise: the host:port registered with the scheduler. Defaults to the listener's.
    advertise: str = ""
    # tls_cert/tls_key: serve /axe/* over HTTPS and register "protocol": "https".
    tls_cert: str = ""
    tls_key: str = ""
    # tls_client_ca: require a client certificate signed by one of these CAs (mTLS).
    tls_client_ca: str = ""
    # scheduler_ca: a PEM bundle to verify https:// schedulers with (default: system store).
    scheduler_ca: str = ""
    insecure_no_auth: bool = False
    heartbeat_interval: float = HEARTBEAT_INTERVAL_DEFAULT
    pool_size: int = 0  # defaults to pool_size_default()
    queue_size: int = QUEUE_SIZE_DEFAULT
    dedup_ttl: float = DEDUP_TTL_DEFAULT  # seconds, for runs without dedup_ttl_ms
    ticket_store: Optional[TicketStore] = None  # defaults to MemoryTicketStore(DEDUP_SIZE_DEFAULT)
    resend_min: float = RESEND_MIN_DEFAULT
    resend_max: float = RESEND_MAX_DEFAULT
    request_timeout: float = REQUEST_TIMEOUT_DEFAULT
    result_senders: int = RESULT_SENDERS_DEFAULT
    output_limit: int = OUTPUT_LIMIT_DEFAULT
    kill_grace: float = KILL_GRACE_DEFAULT  # subprocess handlers: SIGTERM, then SIGKILL after this
    # mp_start_method: how subprocess handlers start ("spawn" is safe beside threads).
    mp_start_method: str = "spawn"

    def with_defaults(self) -> "Config":
        c = Config(**self.__dict__)
        if isinstance(c.schedulers, str):
            c.schedulers = [s.strip() for s in c.schedulers.split(",") if s.strip()]
        if not c.listen:
            c.listen = LISTEN_DEFAULT
        if c.pool_size <= 0:
            c.pool_size = pool_size_default()
        return c

    def validate(self) -> None:
        def bad(f: str, msg: str) -> None:
            raise InvalidConfig("executor: invalid config: %s: %s" % (f, msg))
        if not self.app or len(self.app.encode()) > p.MAX_NAME_BYTES:
            bad("app", "1 to %d bytes required" % p.MAX_NAME_BYTES)
        if not self.schedulers:
            bad("schedulers", "at least one scheduler URL required")
        if self.queue_size < 0:
            bad("queue_size", "must not be negative")
        if not (0 < self.output_limit <= p.MAX_OUTPUT_BYTES):
            bad("output_limit", "must be 1 to %d bytes" % p.MAX_OUTPUT_BYTES)
        if self.heartbeat_interval <= 0 or self.resend_min <= 0 or self.resend_max < self.resend_min:
            bad("heartbeat_interval/resend_min/resend_max", "must be positive, resend_max >= resend_min")
        if self.result_senders < 1:
            bad("result_senders", "must be at least 1")
        if bool(self.tls_cert) != bool(self.tls_key):
            bad("tls_cert", "tls_cert and tls_key go together")
        if self.tls_client_ca and not self.tls_cert:
            bad("tls_client_ca", "needs tls_cert and tls_key")
        host, _ = split_host_port(self.listen)
        if not self.token and not self.insecure_no_auth and not _loopback(host):
            bad("token", "required to listen on %s (not loopback); or set insecure_no_auth" % self.listen)


def split_host_port(s: str) -> Tuple[str, int]:
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1:end + 2] != ":":
            raise InvalidConfig("executor: invalid config: listen: %r is not host:port" % s)
        host, port = s[1:end], s[end + 2:]
    else:
        host, sep, port = s.rpartition(":")
        if not sep or ":" in host:
            raise InvalidConfig("executor: invalid config: listen: %r is not host:port" % s)
    try:
        n = int(port)
    except ValueError:
        raise InvalidConfig("executor: invalid config: listen: %r has no port" % s)
    if not 0 <= n <= 65535:
        raise InvalidConfig("executor: invalid config: listen: port out of range in %r" % s)
    return host, n


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def join_host_port(host: str, port: int) -> str:
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _ms_time(ms: int) -> Optional[datetime]:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms > 0 else None


class RunContext:
    """What a handler gets: the run, and its cancellation.

    ``cancelled`` is a threading.Event set when the run is killed, its deadline passes or the
    executor gives up draining; ``cause`` then says which (errors.KILLED,
    DEADLINE_EXCEEDED, SHUTDOWN). Sync handlers should watch it (``ctx.sleep``,
    ``ctx.check``); an ``async def`` handler is cancelled (CancelledError) instead; a
    subprocess handler is terminated.
    """

    def __init__(self, run: p.RunMessage, cancelled: Optional[threading.Event] = None):
        self.ticket = run.ticket
        self.task = run.task
        self.handler = run.handler
        self.group = run.group
        self.kind = run.kind
        self.attempt = run.attempt
        self.params = run.params
        self.epoch = run.epoch
        self.scheduled_at_ms = run.scheduled_at
        self.deadline_ms = run.deadline
        self.scheduled_at = _ms_time(run.scheduled_at)
        self.deadline = _ms_time(run.deadline)
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.cause = ""

    def remaining(self) -> Optional[float]:
        """Seconds until the deadline (may be negative), None without one."""
        if not self.deadline_ms:
            return None
        return self.deadline_ms / 1000 - time.time()

    def sleep(self, seconds: float) -> bool:
        """Wait seconds, or less when the run is cancelled; True when it slept the whole time."""
        return not self.cancelled.wait(max(0.0, seconds))

    def check(self) -> None:
        """Raise Cancelled when the run is cancelled."""
        if self.cancelled.is_set():
            raise Cancelled("run cancelled: " + (self.cause or KILLED))

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["cancelled"] = None  # a subprocess is terminated, not signalled through an event
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        self.cancelled = threading.Event()


Handler = Callable[[RunContext], Any]


@dataclass
class _HandlerSpec:
    fn: Handler
    is_async: bool
    subprocess: bool


class _Active:
    """A run accepted and not yet finished (queued or running)."""
    __slots__ = ("msg", "spec", "ctx", "ttl_ms", "lock", "cause", "on_cancel", "exit_code")

    def __init__(self, msg: p.RunMessage, spec: _HandlerSpec, ttl_ms: int):
        self.msg = msg
        self.spec = spec
        self.ctx = RunContext(msg)
        self.ttl_ms = ttl_ms
        self.lock = threading.Lock()
        self.cause = ""
        self.on_cancel = None  # type: Optional[Callable[[], None]]
        self.exit_code = None  # type: Optional[int]

    def cancel(self, cause: str) -> None:
        with self.lock:
            if self.cause:
                return
            self.cause = cause
            self.ctx.cause = cause
            cb = self.on_cancel
        self.ctx.cancelled.set()
        if cb is not None:
            cb()

    def set_on_cancel(self, cb: Callable[[], None]) -> None:
        """cb runs at cancel, or now if the run is already cancelled."""
        with self.lock:
            self.on_cancel = cb
            done = bool(self.cause)
        if done:
            cb()


class _Deadlines:
    """One thread that cancels runs at their deadlines (wall clock, as the scheduler's)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap = []  # type: List[Tuple[float, int, _Active]]
        self._seq = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="axe-deadlines", daemon=True)
        self._thread.start()

    def add(self, at: float, a: _Active) -> None:
        with self._cv:
            self._seq += 1
            if self._seq % 4096 == 0:
                # Finished runs stay in the heap until their deadline; drop them now and then
                # so that memory follows the runs in flight, not the deadlines' length.
                self._heap = [e for e in self._heap if not e[2].cause]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (at, self._seq, a))
            if self._heap[0][2] is a:
                self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped:
                    if self._heap and self._heap[0][0] <= time.time():
                        break
                    self._cv.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.time()))
                if self._stopped:
                    return
                _, _, a = heapq.heappop(self._heap)
            a.cancel(DEADLINE_EXCEEDED)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()
        self._thread.join()


def output_text(v: Any) -> str:
    """A handler's return value as output: str as is, None as "", bytes decoded, anything
    else as compact JSON."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _error_text(e: BaseException) -> str:
    s = str(e)
    if isinstance(e, KeyError) and len(e.args) == 1:
        s = repr(e.args[0])
    return s or type(e).__name__


def _is_async(fn: Any) -> bool:
    """Whether calling fn makes a coroutine: an async def, or an object whose __call__ is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _child_main(fn: Handler, ctx: RunContext, conn: Any) -> None:
    """Body of a subprocess handler: call fn and send ("ok", output) or ("err", text)."""
    try:
        if _is_async(fn):
            v = asyncio.run(fn(ctx))
        else:
            v = fn(ctx)
        conn.send(("ok", output_text(v)))
    except BaseException as e:  # noqa: B902 — everything becomes a failed result
        try:
            conn.send(("err", _error_text(e)))
        except Exception:
            pass
    finally:
        conn.close()


class Executor:
    """Serves runs for one app. Register handlers with handle() (or the handler
    decorator), then start(); stop() once. run_forever() does both around SIGTERM."""

    def __init__(self, config: Config):
        cfg = config.with_defaults()
        cfg.validate()
        self.cfg = cfg
        self.incarnation = secrets.token_hex(16)
        self._key = p.dispatch_key(cfg.token) if cfg.token else None
        self._own_auth = "Bearer " + cfg.token if cfg.token else None
        self._own_store = cfg.ticket_store is None
        self._store = cfg.ticket_store if cfg.ticket_store is not None else MemoryTicketStore(DEDUP_SIZE_DEFAULT)
        self._handlers = {}  # type: Dict[str, _HandlerSpec]
        self._lock = threading.Lock()
        self._running = {}  # type: Dict[str, _Active]
        self._tasks = {}  # type: Dict[str, str]
        self._inflight = 0
        self._idle = threading.Condition(self._lock)
        self._accepting = False
        self._epoch = 0
        self._shard_epochs = {}  # type: Dict[int, int]
        self._state = "new"
        self.address = ""
        server_ssl, sched_ssl = self._tls()
        self._server_ssl = server_ssl
        self._sched = SchedulerClient(cfg.schedulers, cfg.token, cfg.request_timeout, sched_ssl)
        self._ctl = SchedulerClient(cfg.schedulers, cfg.token, cfg.request_timeout, sched_ssl)
        # Result delivery: the outbox, and per ticket being delivered whether one more
        # delivery was asked for meanwhile (a repeated dispatch of a finished ticket).
        self._out_cv = threading.Condition()
        self._outbox = []  # type: List[Outcome]
        self._sending = {}  # type: Dict[str, bool]  # guarded by _lock
        self._unsent = 0  # guarded by _out_cv
        self._abandon = threading.Event()
        self._senders = []  # type: List[threading.Thread]
        self._hb_stop = threading.Event()
        self._draining = threading.Event()  # set by stop: never register again
        self._stop_done = threading.Event()
        self._stop_clean = True
        self._hb_thread = None  # type: Optional[threading.Thread]
        self._hb_interval = cfg.heartbeat_interval
        self._registered = False  # registered at least once: deregister at stop
        self._server = None  # type: Optional[_Server]
        self._server_thread = None  # type: Optional[threading.Thread]
        self._pool = None  # type: Optional[concurrent.futures.ThreadPoolExecutor]
        self._loop = None  # type: Optional[asyncio.AbstractEventLoop]
        self._loop_thread = None  # type: Optional[threading.Thread]
        self._deadlines = None  # type: Optional[_Deadlines]
        self._mp = None  # type: Any

    # --- configuration -----------------------------------------------------------------

    def _tls(self) -> Tuple[Optional[ssl.SSLContext], Optional[ssl.SSLContext]]:
        cfg = self.cfg
        server = None
        if cfg.tls_cert:
            server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            server.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                server.load_cert_chain(cfg.tls_cert, cfg.tls_key)
                if cfg.tls_client_ca:
                    server.load_verify_locations(cafile=cfg.tls_client_ca)
                    server.verify_mode = ssl.CERT_REQUIRED
            except (OSError, ssl.SSLError) as e:
                raise InvalidConfig("executor: invalid config: tls_cert/tls_key/tls_client_ca: %s" % e)
        sched = None
        if cfg.scheduler_ca:
            try:
                sched = ssl.create_default_context(cafile=cfg.scheduler_ca)
            except (OSError, ssl.SSLError) as e:
                raise InvalidConfig("executor: invalid config: scheduler_ca: %s" % e)
        return server, sched

    def handle(self, name: str, fn: Handler, subprocess: bool = False) -> None:
        """Register fn as the handler called name. fn(ctx) is a plain function (run on the
        thread pool) or an ``async def`` (run on the executor's event loop). With
        subprocess=True, each run calls fn in a process of its own (multiprocessing, so fn
        must be importable: a module-level function) that is terminated on kill or deadline,
        for handlers that cannot watch ctx.cancelled."""
        if not name or len(name.encode()) > p.MAX_NAME_BYTES:
            raise ValueError("handler name must be 1 to %d bytes, got %r" % (p.MAX_NAME_BYTES, name))
        if not callable(fn):
            raise ValueError("handler %r is not callable" % name)
        with self._lock:
            if self._state != "new":
                raise AlreadyStarted("handle(%r) after start" % name)
            if name in self._handlers:
                raise ValueError("handler %r registered twice" % name)
            self._handlers[name] = _HandlerSpec(fn, _is_async(fn), subprocess)

    def handler(self, name: str, subprocess: bool = False) -> Callable[[Handler], Handler]:
        """Decorator form of handle()."""
        def register(fn: Handler) -> Handler:
            self.handle(name, fn, subprocess=subprocess)
            return fn
        return register

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Listen, register and start heartbeats. A scheduler that cannot be reached is not an
        error (registration is retried every heartbeat); one that refuses the token or the
        registration is (Unauthorized, RegistrationRejected), and undoes the start."""
        with self._lock:
            if self._state == "started":
                raise AlreadyStarted("executor: already started")
            if self._state == "stopped":
                raise Stopped("executor: stopped")
            if not self._handlers:
                raise InvalidConfig("executor: no handlers registered")
            self._state = "started"
        cfg = self.cfg
        host, port = split_host_port(cfg.listen)
        try:
            self._server = _Server((host, port), self)
        except OSError as e:
            with self._lock:
                self._state = "new"  # nothing started: start may be tried again
            raise OSError("cannot listen on %s: %s" % (cfg.listen, e)) from e
        bound = self._server.server_address
        self.address = cfg.advertise or join_host_port(host, bound[1])
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.pool_size,
                                                           thread_name_prefix="axe-handler")
        if any(h.is_async and not h.subprocess for h in self._handlers.values()):
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="axe-asyncio", daemon=True)
            self._loop_thread.start()
        if any(h.subprocess for h in self._handlers.values()):
            self._mp = multiprocessing.get_context(cfg.mp_start_method)
        self._deadlines = _Deadlines()
        for i in range(cfg.result_senders):
            t = threading.Thread(target=self._send_results, name="axe-results-%d" % i, daemon=True)
            t.start()
            self._senders.append(t)
        with self._lock:
            self._accepting = True
        self._server_thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                               name="axe-http", daemon=True)
        self._server_thread.start()
        # Results the scheduler had not acknowledged when a persistent store's last
        # executor stopped go out again.
        for o in self._store.unacked(p.now_ms()):
            self._begin_delivery(o)
        registered = True
        try:
            self._register()
        except (Unauthorized, RegistrationRejected):
            self.stop(timeout=5)
            raise
        except NoScheduler as e:
            registered = False
            log.warning("cannot register yet; retrying every heartbeat: %s", e)
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, args=(registered,),
                                           name="axe-heartbeat", daemon=True)
        self._hb_thread.start()
        log.info("executor started: app=%s address=%s protocol=%s handlers=%s pool=%d queue=%d",
                 cfg.app, self.address, self._scheme(), sorted(self._handlers), cfg.pool_size, cfg.queue_size)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop in this order: answer 503 to new runs (kill and beat keep working);
        deregister; let accepted runs finish; deliver their results; stop heartbeats (they go
        on through the drain, without registering again); shut the HTTP server, the pool and
        the loop down. If timeout (seconds) passes during the
        waits, every handler is cancelled (cause SHUTDOWN; subprocesses are terminated) and
        unsent results are abandoned: the scheduler times those runs out. Returns whether the
        drain completed. Idempotent; harmless without start()."""
        with self._lock:
            if self._state == "stopping":
                first = False
            elif self._state != "started":
                self._state = "stopped"
                return self._stop_clean
            else:
                first = True
                self._state = "stopping"
        if not first:  # another stop is under way: its outcome is this one's
            self._stop_done.wait()
            return self._stop_clean
        with self._lock:
            self._accepting = False
            pending = self._inflight
        began = time.monotonic()
        deadline = began + timeout
        log.info("stop: refusing new runs; %d pending", pending)
        # Heartbeats go on through the drain, so that the scheduler does not declare the
        # executor lost while it finishes runs; but it never registers again from here on.
        self._draining.set()
        self._deregister()
        clean = True
        with self._idle:
            while self._inflight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            if self._inflight > 0:
                clean = False
                active = list(self._running.values())
        if not clean:
            log.warning("stop: gave up waiting for %d runs; cancelling them", len(active))
            for a in active:
                a.cancel(SHUTDOWN)
            with self._idle:
                # Cancelled handlers report at once unless they ignore it; give them a moment.
                end = time.monotonic() + min(5.0, self.cfg.kill_grace + 1)
                while self._inflight > 0 and time.monotonic() < end:
                    self._idle.wait(end - time.monotonic())
        log.info("stop: runs finished or cancelled after %.3fs", time.monotonic() - began)
        with self._out_cv:
            while self._unsent > 0 and clean:
                left = deadline - time.monotonic()
                if left <= 0:
                    clean = False
                    break
                self._out_cv.wait(left)
        if not clean:
            log.warning("stop: abandoning %d unsent results", self._unsent)
        self._abandon.set()
        with self._out_cv:
            self._out_cv.notify_all()
        for t in self._senders:
            t.join()
        log.info("stop: results delivered after %.3fs", time.monotonic() - began)
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._deadlines is not None:
            self._deadlines.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=clean)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(5)
            if not self._loop.is_running():
                self._loop.close()
        self._sched.close()
        self._ctl.close()
        if self._own_store:
            self._store.close()
        with self._lock:
            self._state = "stopped"
        self._stop_clean = clean
        self._stop_done.set()
        log.info("executor stopped after %.3fs", time.monotonic() - began)
        return clean

    def run_forever(self, drain_timeout: float = 30.0) -> bool:
        """start(), then wait for SIGTERM or SIGINT and stop(drain_timeout). Call it from
        the main thread. Returns what stop returned."""
        got = threading.Event()

        def on_signal(signum: int, frame: Any) -> None:
            log.info("received signal %d; stopping", signum)
            got.set()
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not got.wait(1.0):
                pass
            return self.stop(drain_timeout)
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def __enter__(self) -> "Executor":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> int:
        """Runs accepted and not yet finished."""
        with self._lock:
            return self._inflight

    def _scheme(self) -> str:
        return "https" if self._server_ssl is not None else "http"

    # --- scheduler calls ---------------------------------------------------------------

    def _register(self) -> None:
        body = {"app": self.cfg.app, "address": self.address, "protocol": self._scheme(),
                "handlers": sorted(self._handlers), "version": p.VERSION, "incarnation": self.incarnation}
        if self._key is not None:
            body["auth"] = p.AUTH_SIGNED
        status, resp = self._ctl.post(p.PATH_REGISTER, p.dumps(body))
        if status == 200:
            interval = self.cfg.heartbeat_interval
            try:
                ans = json.loads(resp)
            except ValueError:
                ans = None
            ans = ans if isinstance(ans, dict) else {}
            ms = ans.get("heartbeat_interval_ms")
            if isinstance(ms, int) and ms > 0:
                interval = min(interval, ms / 1000)
            if self._key is not None and not (isinstance(ans.get("version"), int) and ans["version"] >= p.VERSION):
                log.warning("the scheduler did not answer protocol version %d: it predates calls signed for an "
                            "incarnation, and this executor refuses the ones it signs; upgrade the scheduler",
                            p.VERSION)
            self._hb_interval = interval
            self._registered = True
            log.info("registered as %s (heartbeat every %.1fs)", self.address, interval)
            return
        msg = "cannot register: scheduler answered %s with %d: %s" % (p.PATH_REGISTER, status, error_text(resp))
        if status in (401, 403):
            raise Unauthorized("executor: scheduler refused the token: " + msg)
        if status == 400:
            raise RegistrationRejected("executor: scheduler rejected the registration: " + msg)
        raise NoScheduler(msg)

    def _heartbeat(self) -> bool:
        """False when the scheduler does not know this executor (register again)."""
        body = p.dumps({"app": self.cfg.app, "address": self.address, "running": self.running,
                        "incarnation": self.incarnation})
        status, resp = self._ctl.post(p.PATH_HEARTBEAT, body)
        if status == 404:
            return False
        if status != 200:
            log.warning("heartbeat: scheduler answered %d: %s", status, error_text(resp))
        return True

    def _heartbeat_loop(self, registered: bool) -> None:
        while not self._hb_stop.wait(self._hb_interval):
            try:
                if registered:
                    if self._heartbeat() or self._draining.is_set():
                        continue
                    log.info("scheduler does not know this executor; registering again")
                if self._draining.is_set():
                    continue
                self._register()
                registered = True
            except Exception as e:  # keep beating whatever one call did
                registered = registered and not isinstance(e, (Unauthorized, RegistrationRejected))
                log.warning("heartbeat/registration failed: %s", e)

    def _deregister(self) -> None:
        if not self._registered:
            return
        body = p.dumps({"app": self.cfg.app, "address": self.address, "incarnation": self.incarnation})
        try:
            status, resp = self._ctl.post(p.PATH_DEREGISTER, body)
        except NoScheduler as e:
            log.warning("stop: cannot deregister: %s", e)
            return
        if status == 200:
            log.info("stop: deregistered")
        else:
            log.warning("stop: deregister answered %d: %s", status, error_text(resp))

    # --- admission ---------------------------------------------------------------------

    def _stale_epoch(self, epoch: int, shard: Optional[int]) -> Optional[Tuple[int, Any]]:
        """Record epoch (of shard, or unsharded) and return the 409 refusing it when it is
        below the highest seen of the same. Callers hold _lock."""
        if epoch == 0:
            return None
        if shard is None:
            if epoch < self._epoch:
                return 409, {"error": "stale epoch %d < %d" % (epoch, self._epoch)}
            self._epoch = max(self._epoch, epoch)
            return None
        highest = self._shard_epochs.get(shard, 0)
        if epoch < highest:
            return 409, {"error": "stale epoch %d < %d of shard %d" % (epoch, highest, shard)}
        if epoch > highest:
            self._shard_epochs[shard] = epoch
        return None

    def epoch(self, shard: Optional[int] = None) -> int:
        """The highest epoch seen (of shard, or of calls without a shard)."""
        with self._lock:
            return self._epoch if shard is None else self._shard_epochs.get(shard, 0)

    def _admit(self, msg: p.RunMessage) -> Tuple[int, Any, Optional[Callable[[], None]]]:
        """What /axe/run answers for msg, and what to do once the answer is decided."""
        now = p.now_ms()
        with self._lock:
            stale = self._stale_epoch(msg.epoch, msg.shard)
            if stale is not None:
                return stale[0], stale[1], None
            if not self._accepting:
                return 503, {"error": "executor is stopping"}, None
            if msg.ticket in self._running:
                return 202, {"accepted": True, "duplicate": True}, None
            o = self._store.get(msg.ticket, now)
            if o is not None:
                after = None
                if msg.ticket in self._sending:
                    self._sending[msg.ticket] = True
                else:
                    after = (lambda o=o: self._begin_delivery(o))
                return 200, {"duplicate": True, "status": o.status, "error": o.error}, after
            spec = self._handlers.get(msg.handler)
            if spec is None:
                return 404, {"error": "unknown handler %s" % json.dumps(msg.handler)}, None
            other = self._tasks.get(msg.task)
            if other is not None and not msg.parallel:
                return 409, {"error": "task %s is already running here with ticket %s" % (
                    json.dumps(msg.task), json.dumps(other))}, None
            if self._inflight >= self.cfg.pool_size + self.cfg.queue_size:
                return 429, {"error": "busy"}, None
            ttl = msg.dedup_ttl_ms or int(self.cfg.dedup_ttl * 1000)
            a = _Active(msg, spec, ttl)
            self._running[msg.ticket] = a
            if not msg.parallel:
                self._tasks[msg.task] = msg.ticket
            self._inflight += 1
        return 202, {"accepted": True}, (lambda: self._dispatch(a))

    def _dispatch(self, a: _Active) -> None:
        if a.msg.deadline:
            self._deadlines.add(a.msg.deadline / 1000, a)
        try:
            if a.spec.is_async and not a.spec.subprocess:
                asyncio.run_coroutine_threadsafe(self._execute_async(a), self._loop)
            else:
                self._pool.submit(self._execute, a)
        except RuntimeError as e:  # the pool or loop is shut: never lose the run
            a.cancel(SHUTDOWN)
            now = p.now_ms()
            self._finish(a, "", "handler not started: %s" % e, now, now)

    def _kill(self, k: p.KillMessage) -> Tuple[int, Any]:
        with self._lock:
            stale = self._stale_epoch(k.epoch, k.shard)
            if stale is not None:
                return stale
            a = self._running.get(k.ticket)
        if a is None:
            return 404, {"error": "ticket %s is not running here" % json.dumps(k.ticket)}
        a.cancel(KILLED)
        log.info("run killed: ticket=%s task=%s", k.ticket, a.msg.task)
        return 200, {"killed": True}

    # --- running handlers --------------------------------------------------------------

    def _execute(self, a: _Active) -> None:
        started = p.now_ms()
        output, err = "", None  # type: str, Optional[str]
        if a.ctx.cancelled.is_set():
            err = "handler not started: " + a.cause
        elif a.spec.subprocess:
            output, err = self._call_subprocess(a)
        else:
            try:
                output = output_text(a.spec.fn(a.ctx))
            except Cancelled as e:
                err = str(e) or a.cause or KILLED
            except BaseException as e:  # noqa: B902 — a handler's failure is a failed run
                if not isinstance(e, Exception):
                    log.error("handler %s raised %s", a.msg.handler, type(e).__name__)
                err = _error_text(e)
        self._finish(a, output, err, started, p.now_ms())

    async def _execute_async(self, a: _Active) -> None:
        started = p.now_ms()
        output, err = "", None  # type: str, Optional[str]
        if a.ctx.cancelled.is_set():
            err = "handler not started: " + a.cause
        else:
            loop = asyncio.get_running_loop()
            task = loop.create_task(a.spec.fn(a.ctx))
            a.set_on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
            try:
                output = output_text(await task)
            except asyncio.CancelledError:
                err = "run cancelled: " + (a.cause or KILLED)
            except Cancelled as e:
                err = str(e) or a.cause or KILLED
            except Exception as e:
                err = _error_text(e)
        ended = p.now_ms()
        # _finish may write to a persistent store: keep it off the loop.
        await asyncio.get_running_loop().run_in_executor(None, self._finish, a, output, err, started, ended)

    def _call_subprocess(self, a: _Active) -> Tuple[str, Optional[str]]:
        parent, child = self._mp.Pipe(duplex=False)
        proc = self._mp.Process(target=_child_main, args=(a.spec.fn, a.ctx, child),
                                name="axe-handler-" + a.msg.ticket[:32], daemon=True)
        try:
            proc.start()
        except Exception as e:
            return "", "cannot start the handler process: %s" % _error_text(e)
        finally:
            child.close()
        got = None
        try:
            while got is None:
                ready = multiprocessing.connection.wait([parent, proc.sentinel], timeout=0.05)
                if parent in ready:
                    try:
                        got = parent.recv()
                    except EOFError:
                        got = ("exit", None)
                elif proc.sentinel in ready:
                    got = ("exit", None)
                elif a.ctx.cancelled.is_set():
                    proc.terminate()
                    proc.join(self.cfg.kill_grace)
                    if proc.is_alive():
                        proc.kill()
                    proc.join()
                    a.exit_code = -1 if proc.exitcode is None or proc.exitcode < 0 else proc.exitcode
                    return "", "handler terminated: " + a.cause
        finally:
            parent.close()
        proc.join()
        code = proc.exitcode
        a.exit_code = -1 if code is None or code < 0 else code
        kind, val = got
        if kind == "ok":
            return val, None
        if kind == "err":
            return "", val
        return "", "handler process exited with code %s without a result" % code

    def _finish(self, a: _Active, output: str, err: Optional[str], started: int, ended: int) -> None:
        msg = a.msg
        result = {
            "ticket": msg.ticket, "task": msg.task, "app": self.cfg.app, "address": self.address,
            "status": p.STATUS_SUCCESS, "error": "", "output": p.tail(output, self.cfg.output_limit),
            "started_at": started, "ended_at": ended, "duration_ms": max(0, ended - started),
        }
        if a.exit_code is not None:
            result["exit_code"] = a.exit_code
        if err is not None:
            result["status"] = p.STATUS_FAILED
            result["error"] = p.clip_error(err) or "handler failed"
        o = Outcome(msg.ticket, result["status"], result["error"], p.dumps(result), ended + a.ttl_ms)
        with self._lock:
            try:
                self._store.put(o, ended)
            except Exception as e:
                log.error("cannot remember ticket %s: %s", msg.ticket, e)
            self._running.pop(msg.ticket, None)
            if self._tasks.get(msg.task) == msg.ticket:
                del self._tasks[msg.task]
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()
        a.cancel("finished")  # frees nothing but makes a later kill a no-op
        log.info("run finished: ticket=%s task=%s attempt=%d status=%s error=%s duration_ms=%d",
                 msg.ticket, msg.task, msg.attempt, result["status"], result["error"][:200], result["duration_ms"])
        self._begin_delivery(o)

    # --- result delivery ---------------------------------------------------------------

    def _begin_delivery(self, o: Outcome) -> None:
        with self._lock:
            if o.ticket in self._sending:
                self._sending[o.ticket] = True
                return
            self._sending[o.ticket] = False
        with self._out_cv:
            self._unsent += 1
            self._outbox.append(o)
            self._out_cv.notify()

    def _end_delivery(self, o: Outcome) -> None:
        again = False
        with self._lock:
            if self._sending.pop(o.ticket, False) and not self._abandon.is_set():
                self._sending[o.ticket] = False
                again = True
        if again:
            with self._out_cv:
                self._outbox.append(o)
                self._out_cv.notify()
            return
        try:
            self._store.acked(o.ticket)
        except Exception as e:
            log.error("cannot mark ticket %s delivered: %s", o.ticket, e)
        with self._out_cv:
            self._unsent -= 1
            self._out_cv.notify_all()

    def _take(self) -> List[Outcome]:
        with self._out_cv:
            while not self._outbox:
                if self._abandon.is_set():
                    return []
                self._out_cv.wait()
            n, size = 0, 0
            while n < len(self._outbox) and n < RESULT_BATCH_MAX:
                size += len(self._outbox[n].body) + 1
                if n > 0 and size > RESULT_BATCH_BYTES:
                    break
                n += 1
            batch, self._outbox = self._outbox[:n], self._outbox[n:]
            if self._outbox:
                self._out_cv.notify()
            return batch

    def _send_results(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            self._deliver(batch)

    def _deliver(self, batch: List[Outcome]) -> None:
        """Send batch until each result is acknowledged (200) or finally refused (404, 409,
        400); anything else is re-sent with doubling backoff."""
        wait = self.cfg.resend_min
        attempt = 1
        while batch:
            if self._abandon.is_set():
                log.warning("abandoned %d unsent results", len(batch))
                with self._out_cv:
                    self._unsent -= len(batch)
                    self._out_cv.notify_all()
                return
            batch = self._post_one(batch[0], attempt, wait) if len(batch) == 1 else \
                self._post_batch(batch, attempt, wait)
            if batch:
                self._abandon.wait(wait)
                wait = min(2 * wait, self.cfg.resend_max)
                attempt += 1

    def _post_one(self, o: Outcome, attempt: int, wait: float) -> List[Outcome]:
        try:
            status, resp = self._sched.post(p.PATH_CALLBACK, o.body)
        except NoScheduler as e:
            log.warning("cannot deliver result (attempt %d, retry in %.1fs): %s", attempt, wait, e)
            return [o]
        return [o] if self._settle(o, status, "" if status == 200 else error_text(resp), attempt, wait) else []

    def _post_batch(self, batch: List[Outcome], attempt: int, wait: float) -> List[Outcome]:
        body = b'{"results":[' + b",".join(o.body for o in batch) + b"]}"
        try:
            status, resp = self._sched.post(p.PATH_CALLBACK_BATCH, body)
        except NoScheduler as e:
            log.warning("cannot deliver %d results (attempt %d): %s", len(batch), attempt, e)
            return batch
        if status != 200:
            log.warning("cannot deliver %d results (attempt %d): scheduler answered %d: %s",
                        len(batch), attempt, status, error_text(resp))
            return batch
        try:
            items = json.loads(resp)["results"]
            if not isinstance(items, list) or len(items) != len(batch):
                raise ValueError("answer has %s items for %d results" % (
                    len(items) if isinstance(items, list) else "no", len(batch)))
            codes = [(int(it["status"]), str(it.get("error", ""))) for it in items]
        except (ValueError, KeyError, TypeError) as e:
            log.warning("cannot read the scheduler's answer to a batch; re-sending it: %s", e)
            return batch
        return [o for o, (c, t) in zip(batch, codes) if self._settle(o, c, t, attempt, wait)]

    def _settle(self, o: Outcome, status: int, err: str, attempt: int, wait: float) -> bool:
        """Act on the answer to one result; True when it must be sent again."""
        if status in (404, 409, 400):
            log.warning("scheduler refused the result of %s (%d: %s); not re-sending", o.ticket, status, err)
        elif status != 200:
            log.warning("cannot deliver result of %s (attempt %d, retry in %.1fs): %d %s",
                        o.ticket, attempt, wait, status, err)
            return True
        self._end_delivery(o)
        return False

    # --- HTTP --------------------------------------------------------------------------

    def _authorize(self, path: str, headers: Any, body: bytes) -> Optional[str]:
        """None when the call is the scheduler's (or no token is set), else the 401 text."""
        if self._key is None:
            return None
        auth = headers.get("Authorization")
        if path == p.PATH_BEAT and auth is not None and self._own_auth is not None and \
                _const_eq(auth, self._own_auth):
            return None
        inc = headers.get(p.HEADER_INCARNATION)
        if not inc:
            return p.BAD_SIGNATURE
        reason = p.verify_call(self._key, auth, self.address, path, headers.get(p.HEADER_EPOCH) or "", body,
                               incarnation=inc)
        if reason is not None:
            return reason
        if not _const_eq(inc, self.incarnation):
            return p.BAD_SIGNATURE + ": signed for another incarnation of this executor"
        return None

    def _body_limit(self, path: str, headers: Any) -> Tuple[int, bool]:
        """The body limit of a request, and whether it is judged plausibly signed."""
        if self._key is not None and not p.plausible(headers.get("Authorization")):
            return p.MAX_SMALL_BODY, False
        if path == p.PATH_RUN:
            return p.MAX_RUN_BODY, True
        if path == p.PATH_RUNS:
            return p.MAX_RUNS_BODY, True
        return p.MAX_SMALL_BODY, True

    def _route(self, method: str, path: str, headers: Any, body: bytes) -> Tuple[int, Any]:
        if path in (p.PATH_RUN, p.PATH_RUNS, p.PATH_KILL):
            if method != "POST":
                return 405, {"error": "use POST"}
            try:
                if path == p.PATH_RUN:
                    return self._serve_run(headers, body)
                if path == p.PATH_RUNS:
                    return self._serve_runs(headers, body)
                k = p.decode_kill(body)
                k.epoch = p.header_epoch(headers.get(p.HEADER_EPOCH), k.epoch)
                return self._kill(k)
            except InvalidMessage as e:
                return 400, {"error": "executor: invalid run: %s" % e if path != p.PATH_KILL else str(e)}
        if path == p.PATH_BEAT:
            if method != "GET":
                return 405, {"error": "use GET"}
            return 200, {"app": self.cfg.app, "running": self.running, "handlers": sorted(self._handlers)}
        return 404, {"error": "no endpoint %s" % path}

    def _serve_run(self, headers: Any, body: bytes) -> Tuple[int, Any]:
        msg = p.decode_run(body)
        for name, want in ((p.HEADER_TICKET, msg.ticket), (p.HEADER_TASK, msg.task),
                           (p.HEADER_ATTEMPT, str(msg.attempt))):
            got = headers.get(name)
            if got and got != want:
                raise InvalidMessage("header %s is %s but the body says %s" % (name, json.dumps(got), json.dumps(want)))
        msg.epoch = p.header_epoch(headers.get(p.HEADER_EPOCH), msg.epoch)
        status, resp, after = self._admit(msg)
        if after is not None:
            after()
        return status, resp

    def _serve_runs(self, headers: Any, body: bytes) -> Tuple[int, Any]:
        runs = p.decode_runs(body)
        p.header_epoch(headers.get(p.HEADER_EPOCH), 0)
        answers = []
        afters = []
        for r in runs:
            if not isinstance(r, InvalidMessage):
                try:
                    r.epoch = p.header_epoch(headers.get(p.HEADER_EPOCH), r.epoch)
                except InvalidMessage as e:
                    r = e
            if isinstance(r, InvalidMessage):
                answers.append({"code": 400, "body": {"error": "executor: invalid run: %s" % r}})
                continue
            status, resp, after = self._admit(r)
            if after is not None:
                afters.append(after)
            answers.append({"code": status, "body": resp})
        for after in afters:
            after()
        return 200, {"results": answers}


def _const_eq(a: str, b: str) -> bool:
    import hmac
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


class _RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "axe-executor-python"
    sys_version = ""
    timeout = 120  # idle keep-alive connections are closed after this

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    def _answer(self, status: int, obj: Any, close: bool = False) -> None:
        data = p.dumps(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 405:
            self.send_header("Allow", "GET" if self.path.startswith(p.PATH_BEAT) else "POST")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _serve(self) -> None:
        ex = self.server.executor  # type: Executor
        path = urllib.parse.urlsplit(self.path).path
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._answer(411, {"error": "a Content-Length is required"}, close=True)
            return
        raw_len = self.headers.get("Content-Length") or "0"
        try:
            length = int(raw_len)
            if length < 0:
                raise ValueError
        except ValueError:
            self._answer(400, {"error": "malformed Content-Length"}, close=True)
            return
        limit, plausible = ex._body_limit(path, self.headers)
        if length > limit:
            if not plausible:
                self._answer(401, {"error": p.BAD_SIGNATURE}, close=True)
            else:
                self._answer(413, {"error": "request body over the limit of %d bytes for %s" % (limit, path)},
                             close=True)
            return
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            self.close_connection = True
            return
        reason = ex._authorize(path, self.headers, body)
        if reason is not None:
            log.warning("refused a call without a valid scheduler signature: path=%s remote=%s: %s",
                        path, self.client_address[0], reason)
            self._answer(401, {"error": reason})
            return
        try:
            status, resp = ex._route(self.command, path, self.headers, body)
        except Exception:
            log.exception("cannot serve %s %s", self.command, path)
            status, resp = 500, {"error": "internal error of the executor"}
        self._answer(status, resp)

    do_POST = _serve
    do_GET = _serve
    do_PUT = _serve
    do_DELETE = _serve
    do_PATCH = _serve


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: Tuple[str, int], executor: Executor):
        self.executor = executor
        host = addr[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(addr, _RequestHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn), which can take
        # seconds on a machine without DNS; the name is never used.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake (and the client certificate check of mTLS) happens here, in the
        # connection's own thread, so one slow client cannot stall the accept loop.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = self.executor._server_ssl
        if ctx is not None:
            request.settimeout(30)
            try:
                wrapped = ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address, e)
                return
            try:
                super().finish_request(wrapped, client_address)
            finally:
                wrapped.close()  # the plain socket was detached into it
            return
        super().finish_request(request, client_address)
