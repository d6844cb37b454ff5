import asyncio
import json
import os
import socket
import ssl
import tempfile
import threading
import time
import unittest

from helpers import (TOKEN, Caller, Certs, FakeScheduler, free_port, have_openssl, run_body,
                     wait_until)
from axe_executor import (Cancelled, Config, Executor, InvalidConfig, RegistrationRejected,
                          SqliteTicketStore, Unauthorized)
from axe_executor import protocol as p


def echo(ctx):
    params = ctx.params if isinstance(ctx.params, dict) else {}
    if params.get("sleep_ms"):
        if not ctx.sleep(params["sleep_ms"] / 1000):
            raise Cancelled("run cancelled: " + ctx.cause)
    if "fail" in params:
        raise RuntimeError(params["fail"])
    return ctx.params if ctx.params is not None else {}


def stubborn(ctx):
    """Ignores its cancellation: only a subprocess handler can be ended."""
    time.sleep((ctx.params or {}).get("sleep_ms", 0) / 1000)
    return {"slept": True, "pid": os.getpid()}


class Base(unittest.TestCase):
    token = TOKEN

    def setUp(self):
        self.sched = FakeScheduler()
        self.addCleanup(self.sched.close)

    def start(self, handlers=None, **cfg):
        cfg.setdefault("resend_min", 0.05)
        cfg.setdefault("resend_max", 0.2)
        cfg.setdefault("heartbeat_interval", 0.2)
        cfg.setdefault("schedulers", [self.sched.url])
        ex = Executor(Config(app="py", token=self.token, **cfg))
        for name, fn in (handlers or {"echo": echo}).items():
            if isinstance(fn, tuple):
                ex.handle(name, fn[0], subprocess=fn[1])
            else:
                ex.handle(name, fn)
        ex.start()
        self.addCleanup(ex.stop, 10)
        self.ex = ex
        self.caller = Caller(ex.address, ex.incarnation, token=self.token)
        return ex


class Registration(Base):
    def test_register_heartbeat_reregister(self):
        ex = self.start()
        reg = self.sched.registers[0]
        self.assertEqual(reg["version"], 2)
        self.assertEqual(reg["incarnation"], ex.incarnation)
        self.assertRegex(reg["incarnation"], r"^[A-Za-z0-9_-]{16,64}$")
        self.assertEqual(reg["auth"], "signed")
        self.assertEqual(reg["handlers"], ["echo"])
        self.assertEqual(reg["address"], ex.address)
        self.assertEqual(reg["protocol"], "http")
        self.assertEqual(self.sched.auth[0], "Bearer " + TOKEN)
        wait_until(lambda: self.sched.heartbeats, what="a heartbeat")
        self.assertEqual(self.sched.heartbeats[0]["incarnation"], ex.incarnation)
        self.sched.heartbeat_404 = 1
        wait_until(lambda: len(self.sched.registers) >= 2, what="registration after a 404 heartbeat")
        self.assertEqual(self.sched.registers[1]["incarnation"], ex.incarnation)

    def test_refusals_are_final_at_start(self):
        for status, err in ((401, Unauthorized), (403, Unauthorized), (400, RegistrationRejected)):
            with self.subTest(status):
                self.sched.register_status = status
                ex = Executor(Config(app="py", token=TOKEN, schedulers=[self.sched.url]))
                ex.handle("echo", echo)
                with self.assertRaises(err):
                    ex.start()

    def test_unreachable_scheduler_is_retried(self):
        dead = "http://127.0.0.1:%d" % free_port()
        self.sched.unavailable = True
        ex = self.start(schedulers=[dead, self.sched.url])
        self.assertEqual(self.sched.registers, [])
        self.sched.unavailable = False
        wait_until(lambda: self.sched.registers, what="registration once a scheduler answers")
        self.assertEqual(self.sched.registers[0]["incarnation"], ex.incarnation)

    def test_failover_follows_the_primary_a_backup_names(self):
        backup = FakeScheduler()
        self.addCleanup(backup.close)
        backup.unavailable = True
        backup.primary = self.sched.url
        dead = "http://127.0.0.1:%d" % free_port()
        self.start(schedulers=[backup.url, dead])  # the primary is not configured: not called
        self.assertEqual(self.sched.registers, [])
        self.ex.stop(5)
        self.start(schedulers=[backup.url, dead, self.sched.url])
        self.assertEqual(len(self.sched.registers), 1)
        self.assertEqual(len(backup.registers), 0)
        self.assertGreaterEqual(len(backup.auth), 2)

    def test_config_checks(self):
        with self.assertRaises(InvalidConfig):
            Config(app="", schedulers=["http://x:1"]).with_defaults().validate()
        with self.assertRaises(InvalidConfig):
            Config(app="a", schedulers=["http://x:1"], listen="0.0.0.0:0").validate()
        Config(app="a", schedulers=["http://x:1"], listen="0.0.0.0:0", insecure_no_auth=True).validate()
        with self.assertRaises(InvalidConfig):
            Executor(Config(app="a", schedulers=["ftp://x:1"]))


class Signatures(Base):
    def test_signed_run_succeeds(self):
        self.start()
        st, body = self.caller.run(run_body("s1", params={"a": [1, "é"]}))
        self.assertEqual((st, body), (202, {"accepted": True}))
        r = self.sched.wait_result("s1")
        self.assertEqual((r["status"], r["error"], r["output"]), ("success", "", '{"a":[1,"é"]}'))
        self.assertEqual((r["task"], r["app"], r["address"]), ("t", "py", self.ex.address))
        self.assertLessEqual(r["started_at"], r["ended_at"])

    def test_bad_signatures_refused_before_anything(self):
        self.start()
        other = Caller(self.ex.address, "another-incarnation-0123456789ab")
        cases = {
            "unsigned": lambda: self.caller.run(run_body("x"), sign=False),
            "wrong token": lambda: Caller(self.ex.address, self.ex.incarnation, token="other-token-xxxxxxxxx").run(run_body("x")),
            "another incarnation": lambda: other.run(run_body("x")),
            "no incarnation header": lambda: self.caller.run(run_body("x"), headers={p.HEADER_INCARNATION: ""}),
            "skewed clock": lambda: self.caller.run(run_body("x"), at=p.now_ms() - p.SIGNATURE_SKEW_MS - 60000),
            "malformed body unsigned": lambda: self.caller.call(p.PATH_RUN, body=b"{", sign=False),
            "unknown path unsigned": lambda: self.caller.call("/nope", body=b"", sign=False),
            "kill unsigned": lambda: self.caller.call(p.PATH_KILL, {"ticket": "x"}, sign=False),
            "beat unsigned": lambda: self.caller.call(p.PATH_BEAT, method="GET", sign=False),
        }
        for name, call in cases.items():
            with self.subTest(name):
                st, body = call()
                self.assertEqual(st, 401)
                self.assertTrue(body["error"].startswith("missing or invalid scheduler signature"), body)
        st, body = other.run(run_body("x"))
        self.assertIn("another incarnation", body["error"])
        self.assertEqual(self.ex.running, 0)
        st, _ = self.caller.call(p.PATH_BEAT, method="GET", sign=False, headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 200)

    def test_unsigned_large_body_refused_unread(self):
        self.start()
        host, port = self.ex.address.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=30)
        try:
            # Headers only: the executor must answer without waiting for the 1 MiB body.
            s.sendall(b"POST /axe/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000000\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 401"), data[:100])

    def test_signed_body_over_limit_is_413(self):
        self.start()
        st, body = self.caller.call(p.PATH_KILL, body=b'{"ticket":"' + b"x" * 5000 + b'"}')
        self.assertEqual(st, 413)
        self.assertIn("limit", body["error"])


class NoToken(Base):
    token = ""

    def test_without_token_nothing_is_checked(self):
        self.start()
        self.assertNotIn("auth", self.sched.registers[0])
        st, _ = self.caller.run(run_body("n1"))
        self.assertEqual(st, 202)
        self.assertEqual(self.sched.wait_result("n1")["status"], "success")


class Admission(Base):
    def test_decoding_over_http(self):
        self.start()
        st, body = self.caller.run(dict(run_body("u1"), some_new_field={"x": 1}, group="g", kind="cron"))
        self.assertEqual(st, 202, body)
        self.sched.wait_result("u1")
        for raw, want in ((b'{"ticket":"r1","ticket":"r2","task":"t","attempt":1,"deadline":0,"handler":"echo"}', "repeated key"),
                          (b'{"task":"t","attempt":1,"deadline":0,"handler":"echo"}', "ticket: required"),
                          (b'not json', "malformed"),
                          (b'{"ticket":"r3","task":"t","attempt":1,"deadline":0,"handler":"echo"}x', "malformed")):
            with self.subTest(want):
                st, body = self.caller.call(p.PATH_RUN, body=raw)
                self.assertEqual(st, 400)
                self.assertIn(want, body["error"])
        st, body = self.caller.run(run_body("h1"), headers={p.HEADER_TICKET: "other"})
        self.assertEqual(st, 400)
        self.assertIn(p.HEADER_TICKET, body["error"])
        st, body = self.caller.run(run_body("h2", handler="nope"))
        self.assertEqual((st, body), (404, {"error": 'unknown handler "nope"'}))
        st, _ = self.caller.call(p.PATH_RUN, method="GET")
        self.assertEqual(st, 405)

    def test_dedup_while_running_and_after(self):
        self.start()
        st, _ = self.caller.run(run_body("d1", params={"sleep_ms": 300}))
        self.assertEqual(st, 202)
        st, body = self.caller.run(run_body("d1", params={"sleep_ms": 300}))
        self.assertEqual((st, body), (202, {"accepted": True, "duplicate": True}))
        self.sched.wait_result("d1")
        st, body = self.caller.run(run_body("d1", params={"sleep_ms": 300}))
        self.assertEqual((st, body), (200, {"duplicate": True, "status": "success", "error": ""}))
        wait_until(lambda: sum(r["ticket"] == "d1" for r in self.sched.results) >= 2,
                   what="the result re-sent for a repeated finished ticket")
        st, body = self.caller.run(run_body("d2", params={"fail": "boom"}))
        self.assertEqual(self.sched.wait_result("d2")["error"], "boom")
        st, body = self.caller.run(run_body("d2"))
        self.assertEqual((st, body), (200, {"duplicate": True, "status": "failed", "error": "boom"}))

    def test_dedup_ttl_expires(self):
        self.start()
        self.caller.run(run_body("e1", dedup_ttl_ms=1))
        self.sched.wait_result("e1")
        wait_until(lambda: self.caller.run(run_body("e1", dedup_ttl_ms=1))[0] == 202, what="the ticket to be forgotten")

    def test_reentry_guard_and_parallel(self):
        self.start()
        self.assertEqual(self.caller.run(run_body("a1", task="job", params={"sleep_ms": 400}))[0], 202)
        st, body = self.caller.run(run_body("a2", task="job"))
        self.assertEqual(st, 409)
        self.assertEqual(body["error"], 'task "job" is already running here with ticket "a1"')
        st, body = self.caller.run(run_body("a3", task="job", parallel=True))
        self.assertEqual(st, 202)
        self.sched.wait_result("a1")
        self.sched.wait_result("a3")
        self.assertEqual(self.caller.run(run_body("a4", task="job"))[0], 202)

    def test_busy(self):
        self.start(pool_size=1, queue_size=1)
        self.assertEqual(self.caller.run(run_body("b1", task="t1", params={"sleep_ms": 5000}))[0], 202)
        self.assertEqual(self.caller.run(run_body("b2", task="t2", params={"sleep_ms": 10}))[0], 202)
        st, body = self.caller.run(run_body("b3", task="t3"))
        self.assertEqual((st, body), (429, {"error": "busy"}))
        # A queued run killed before it starts is reported as not started.
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "b2"})[0], 200)
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "b1"})[0], 200)
        self.assertEqual(self.sched.wait_result("b2")["error"], "handler not started: executor: run killed")

    def test_epochs_per_shard(self):
        self.start()
        c = self.caller
        self.assertEqual(c.run(run_body("p1", task="t1", epoch=5))[0], 202)
        self.assertEqual(c.run(run_body("p2", task="t2", epoch=4)), (409, {"error": "stale epoch 4 < 5"}))
        self.assertEqual(c.run(run_body("p3", task="t3"), epoch=4), (409, {"error": "stale epoch 4 < 5"}))
        self.assertEqual(c.run(run_body("p4", task="t4", epoch=0))[0], 202)
        # Shards are judged on their own, apart from the unsharded epoch.
        self.assertEqual(c.run(run_body("p5", task="t5", epoch=2, shard=7))[0], 202)
        self.assertEqual(c.run(run_body("p6", task="t6", epoch=9, shard=40))[0], 202)
        self.assertEqual(c.run(run_body("p7", task="t7", epoch=8, shard=40)),
                         (409, {"error": "stale epoch 8 < 9 of shard 40"}))
        self.assertEqual(c.run(run_body("p8", task="t8", epoch=3, shard=7))[0], 202)
        self.assertEqual(self.ex.epoch(), 5)
        self.assertEqual(self.ex.epoch(7), 3)
        self.assertEqual(c.run(run_body("p9", task="t9", epoch=5), epoch=6)[0], 400)
        self.assertEqual(c.call(p.PATH_KILL, {"ticket": "p1", "epoch": 4}), (409, {"error": "stale epoch 4 < 5"}))
        self.assertEqual(c.call(p.PATH_KILL, {"ticket": "p1", "shard": 256})[0], 400)

    def test_batch(self):
        self.start()
        body = {"runs": [run_body("m1", task="x"), run_body("m2", task="x"), {"ticket": "m3"},
                         dict(run_body("m4", task="y", epoch=3, shard=1), future=True),
                         run_body("m5", task="z", epoch=2, shard=1)]}
        st, ans = self.caller.call(p.PATH_RUNS, body)
        self.assertEqual(st, 200)
        codes = [r["code"] for r in ans["results"]]
        self.assertEqual(codes, [202, 409, 400, 202, 409])
        self.assertIn("task: required", ans["results"][2]["body"]["error"])
        self.assertEqual(ans["results"][4]["body"], {"error": "stale epoch 2 < 3 of shard 1"})
        self.sched.wait_result("m1")
        self.sched.wait_result("m4")
        st, ans = self.caller.call(p.PATH_RUNS, {"runs": []})
        self.assertEqual(st, 400)
        st, ans = self.caller.call(p.PATH_RUNS, {"runs": [run_body("k%d" % i) for i in range(1001)]})
        self.assertEqual(st, 400)
        self.assertIn("at most 1000", ans["error"])

    def test_output_and_error_limits(self):
        def big(ctx):
            if ctx.params == "fail":
                raise RuntimeError("e" * (100 << 10))
            return "x" * 100 + "y" * (2 << 20)
        self.start(handlers={"big": big}, output_limit=1 << 20)
        self.caller.run(run_body("o1", handler="big"))
        self.caller.run(run_body("o2", task="t2", handler="big", params="fail"))
        out = self.sched.wait_result("o1")["output"]
        self.assertEqual(len(out.encode()), 1 << 20)
        self.assertEqual(set(out), {"y"})
        self.assertEqual(len(self.sched.wait_result("o2")["error"]), 64 << 10)


class Cancellation(Base):
    def test_kill_and_deadline_sync(self):
        self.start()
        self.assertEqual(self.caller.run(run_body("k1", task="a", params={"sleep_ms": 60000}))[0], 202)
        wait_until(lambda: self.ex.running == 1, what="the run to start")
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "k1", "extra": 1}), (200, {"killed": True}))
        r = self.sched.wait_result("k1")
        self.assertEqual(r["status"], "failed")
        self.assertIn("executor: run killed", r["error"])
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "k1"})[0], 404)
        self.caller.run(run_body("k2", task="b", deadline=p.now_ms() + 300, params={"sleep_ms": 60000}))
        r = self.sched.wait_result("k2")
        self.assertEqual(r["status"], "failed")
        self.assertIn("context deadline exceeded", r["error"])

    def test_async_handlers(self):
        async def slow(ctx):
            await asyncio.sleep((ctx.params or {}).get("sleep_ms", 0) / 1000)
            return {"ticket": ctx.ticket, "attempt": ctx.attempt}
        self.start(handlers={"slow": slow})
        self.caller.run(run_body("as1", handler="slow", attempt=3))
        self.assertEqual(self.sched.wait_result("as1")["output"], '{"ticket":"as1","attempt":3}')
        self.caller.run(run_body("as2", task="k", handler="slow", params={"sleep_ms": 60000}))
        wait_until(lambda: self.ex.running == 1, what="the async run to start")
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "as2"})[0], 200)
        self.assertIn("executor: run killed", self.sched.wait_result("as2")["error"])
        self.caller.run(run_body("as3", task="d", handler="slow", deadline=p.now_ms() + 200, params={"sleep_ms": 60000}))
        self.assertIn("context deadline exceeded", self.sched.wait_result("as3")["error"])

    def test_subprocess_ends_a_handler_that_does_not_cooperate(self):
        self.start(handlers={"stubborn": (stubborn, True)}, kill_grace=1)
        self.caller.run(run_body("sp1", handler="stubborn", params={"sleep_ms": 10}))
        r = self.sched.wait_result("sp1")
        self.assertEqual(r["status"], "success", r)
        self.assertNotEqual(json.loads(r["output"])["pid"], os.getpid())
        self.assertEqual(r["exit_code"], 0)
        self.caller.run(run_body("sp2", task="k", handler="stubborn", params={"sleep_ms": 600000}))
        wait_until(lambda: self.ex.running == 1, what="the subprocess run to start")
        time.sleep(0.2)  # let the process start (not a check: kill works either way)
        self.assertEqual(self.caller.call(p.PATH_KILL, {"ticket": "sp2"})[0], 200)
        r = self.sched.wait_result("sp2")
        self.assertEqual(r["error"], "handler terminated: executor: run killed")
        self.caller.run(run_body("sp3", task="d", handler="stubborn", deadline=p.now_ms() + 500,
                                 params={"sleep_ms": 600000}))
        r = self.sched.wait_result("sp3")
        self.assertEqual(r["error"], "handler terminated: context deadline exceeded")


class Delivery(Base):
    def test_results_resent_until_acknowledged(self):
        self.sched.callback_failures = 3
        self.start()
        self.caller.run(run_body("r1"))
        r = self.sched.wait_result("r1")
        self.assertEqual(r["status"], "success")
        self.assertGreaterEqual(self.sched.result_calls, 4)

    def test_results_fail_over_to_another_scheduler(self):
        other = FakeScheduler()
        self.addCleanup(other.close)
        self.start(schedulers=[self.sched.url, other.url])
        self.sched.unavailable = True
        self.caller.run(run_body("f1"))
        self.assertEqual(other.wait_result("f1")["status"], "success")

    def test_burst_goes_in_batches(self):
        self.sched.callback_failures = 1
        self.start(result_senders=1)
        for i in range(40):
            self.assertEqual(self.caller.run(run_body("bt%d" % i, task="t%d" % i))[0], 202)
        for i in range(40):
            self.sched.wait_result("bt%d" % i)
        self.assertLess(self.sched.result_calls, 41)

    def test_persistent_store_across_restart(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        path = os.path.join(d.name, "tickets.db")
        store = SqliteTicketStore(path)
        self.addCleanup(store.close)
        ex = self.start(ticket_store=store)
        self.caller.run(run_body("ps1"))
        self.sched.wait_result("ps1")
        ex.stop(10)
        # A new process, a new incarnation, the same file: the ticket is not run again.
        store2 = SqliteTicketStore(path)
        self.addCleanup(store2.close)
        ex2 = self.start(ticket_store=store2)
        self.assertNotEqual(ex2.incarnation, ex.incarnation)
        st, body = self.caller.run(run_body("ps1"))
        self.assertEqual((st, body["duplicate"]), (200, True))


class Lifecycle(Base):
    def test_drain_then_deregister(self):
        self.start()
        self.caller.run(run_body("g1", params={"sleep_ms": 5000}))
        wait_until(lambda: self.ex.running == 1, what="the run to start")
        stopped = threading.Event()
        result = []
        threading.Thread(target=lambda: (result.append(self.ex.stop(30)), stopped.set())).start()
        wait_until(lambda: self.sched.deregisters, what="deregister")
        self.assertEqual(self.sched.deregisters[0], {"app": "py", "address": self.ex.address,
                                                     "incarnation": self.ex.incarnation})
        st, body = self.caller.run(run_body("g2", task="other"))
        self.assertEqual((st, body), (503, {"error": "executor is stopping"}))
        # Heartbeats go on while draining; a 404 then does not register the executor again.
        with self.sched.lock:
            self.sched.heartbeat_404 = 100
            beats = len(self.sched.heartbeats)
        wait_until(lambda: len(self.sched.heartbeats) > beats, what="a heartbeat while draining")
        self.assertEqual(len(self.sched.registers), 1)
        self.assertTrue(stopped.wait(30))
        self.assertEqual(result, [True])
        self.assertEqual(self.sched.result("g1")["status"], "success")
        # Nothing of the executor outlives stop: its pool, senders, heartbeat and timers.
        left = [t.name for t in threading.enumerate() if t.name.startswith("axe-")]
        self.assertEqual(left, [])

    def test_drain_timeout_cancels(self):
        self.start()
        self.caller.run(run_body("g3", params={"sleep_ms": 60000}))
        wait_until(lambda: self.ex.running == 1, what="the run to start")
        second = []
        t = threading.Thread(target=lambda: second.append(self.ex.stop(30)))
        self.assertFalse(self.ex.stop(0.3))
        t.start()
        t.join(30)
        self.assertEqual(second, [False], "a later stop answers what the first one did")
        self.assertEqual(self.ex.running, 0)

    def test_context_manager(self):
        ex = Executor(Config(app="py", token=TOKEN, schedulers=[self.sched.url]))
        ex.handle("echo", echo)
        with ex:
            self.assertEqual(Caller(ex.address, ex.incarnation).run(run_body("cm1"))[0], 202)
        self.assertEqual(self.sched.result("cm1")["status"], "success")
        self.assertEqual(len(self.sched.deregisters), 1)

    def test_stop_twice_and_without_start(self):
        ex = Executor(Config(app="py", schedulers=[self.sched.url]))
        self.assertTrue(ex.stop(1))
        self.assertTrue(ex.stop(1))


@unittest.skipUnless(have_openssl(), "needs the openssl command to make certificates")
class TLS(Base):
    def setUp(self):
        super().setUp()
        self.certs = Certs()
        self.addCleanup(self.certs.close)

    def client_ctx(self, cert=True):
        ctx = ssl.create_default_context(cafile=self.certs.path("ca.pem"))
        if cert:
            ctx.load_cert_chain(self.certs.path("client.pem"), self.certs.path("client.key"))
        return ctx

    def test_tls_and_mtls(self):
        c = self.certs
        self.start(tls_cert=c.path("server.pem"), tls_key=c.path("server.key"), tls_client_ca=c.path("ca.pem"))
        self.assertEqual(self.sched.registers[0]["protocol"], "https")
        good = Caller(self.ex.address, self.ex.incarnation, ssl_context=self.client_ctx())
        self.assertEqual(good.run(run_body("tl1"))[0], 202)
        self.assertEqual(self.sched.wait_result("tl1")["status"], "success")
        nocert = Caller(self.ex.address, self.ex.incarnation, ssl_context=self.client_ctx(cert=False))
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            nocert.run(run_body("tl2"))
        plain = Caller(self.ex.address, self.ex.incarnation)
        with self.assertRaises((ConnectionError, OSError, Exception)):
            plain.run(run_body("tl3"))
        self.assertIsNone(self.sched.result("tl2"))

    def test_https_scheduler_with_private_ca(self):
        c = self.certs
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(c.path("server.pem"), c.path("server.key"))
        secure = FakeScheduler(tls)
        self.addCleanup(secure.close)
        self.assertTrue(secure.url.startswith("https://"))
        # Without the CA the scheduler's certificate is not trusted: nothing registers.
        untrusting = Executor(Config(app="py", token=TOKEN, schedulers=[secure.url], heartbeat_interval=0.2))
        untrusting.handle("echo", echo)
        untrusting.start()
        self.addCleanup(untrusting.stop, 5)
        self.assertEqual(secure.registers, [])
        self.start(schedulers=[secure.url], scheduler_ca=c.path("ca.pem"))
        self.assertEqual(len(secure.registers), 1)
        self.assertEqual(self.caller.run(run_body("hs1"))[0], 202)
        self.assertEqual(secure.wait_result("hs1")["status"], "success")


if __name__ == "__main__":
    unittest.main()
