"""End to end: the real axe (AXE_BIN, built by test.sh) on its embedded SQLite store, the echo
example as a real process, a task with an executor callback, and the recorded run."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from helpers import free_port, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
ECHO = os.path.join(HERE, "..", "examples", "echo")
AXE_BIN = os.environ.get("AXE_BIN", "")
OPS = "ops-token-0123456789abcdef"
EXEC = "exec-token-0123456789abcdef"


@unittest.skipUnless(AXE_BIN, "set AXE_BIN to an axe binary (test.sh builds one)")
class EndToEnd(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="axe-py-e2e-")
        self.addCleanup(self.dir.cleanup)
        d = self.dir.name
        with open(os.path.join(d, "tokens.json"), "w") as f:
            json.dump([{"name": "ops", "scope": "write", "token": OPS},
                       {"name": "py", "scope": "executor", "token": EXEC, "apps": ["pyecho"]}], f)
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.axe_log = open(os.path.join(d, "axe.log"), "w+")
        self.addCleanup(self.axe_log.close)
        self.axe = subprocess.Popen([AXE_BIN, "serve", "--addr", "127.0.0.1:%d" % self.port,
                                     "--db", "sqlite:" + os.path.join(d, "axe.db"),
                                     "--token-file", os.path.join(d, "tokens.json")],
                                    stdout=self.axe_log, stderr=subprocess.STDOUT)
        self.addCleanup(self.end, self.axe)
        wait_until(self.ready, what="axe serve to be ready")

    def end(self, proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def ready(self):
        if self.axe.poll() is not None:
            self.axe_log.seek(0)
            raise AssertionError("axe serve exited: " + self.axe_log.read()[-2000:])
        try:
            with urllib.request.urlopen(self.base + "/readyz", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, method, path, body=None):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + OPS, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def test_echo_through_real_axe(self):
        listen = "127.0.0.1:%d" % free_port()
        env = dict(os.environ, AXE_SCHEDULERS=self.base, AXE_LISTEN=listen, AXE_TOKEN=EXEC, AXE_APP="pyecho",
                   AXE_LOG_LEVEL="INFO")
        elog = open(os.path.join(self.dir.name, "echo.log"), "w+")
        self.addCleanup(elog.close)
        echo = subprocess.Popen([ECHO], env=env, stdout=elog, stderr=subprocess.STDOUT)
        self.addCleanup(self.end, echo)

        def registered():
            if echo.poll() is not None:
                elog.seek(0)
                raise AssertionError("the echo executor exited %d: %s" % (echo.returncode, elog.read()[-2000:]))
            st, body = self.api("GET", "/api/v1/executors")
            self.assertEqual(st, 200, body)
            return listen in json.dumps(body)
        wait_until(registered, what="the echo executor to register")
        st, body = self.api("POST", "/api/v1/tasks", {
            "name": "py-echo", "trigger": "manual", "timeout_sec": 30,
            "callback": {"type": "executor", "app": "pyecho", "handler": "echo"},
            "params": {"hello": "py", "n": 1}})
        self.assertIn(st, (200, 201), body)

        def finished(ticket):
            def check():
                st, run = self.api("GET", "/api/v1/runs/" + ticket)
                return run if st == 200 and run.get("result") not in (None, "", "running") else None
            return check
        st, body = self.api("POST", "/api/v1/tasks/py-echo/run", {})
        self.assertIn(st, (200, 201, 202), body)
        run = wait_until(finished(body["ticket"]), what="the run to finish")
        self.assertEqual(run["result"], "success", run)
        self.assertEqual(json.loads(run["output"]), {"hello": "py", "n": 1})

        st, body = self.api("POST", "/api/v1/tasks/py-echo/run", {"params": {"fail": "told to fail"}})
        self.assertIn(st, (200, 201, 202), body)
        run = wait_until(finished(body["ticket"]), what="the failing run to finish")
        self.assertEqual(run["result"], "failed", run)
        self.assertIn("told to fail", run["error"])

        # A kill from axe reaches the handler (a signed /axe/kill) and ends the run early.
        st, body = self.api("POST", "/api/v1/tasks", {
            "name": "py-sleep", "trigger": "delay", "delay_ms": 100, "timeout_sec": 300,
            "callback": {"type": "executor", "app": "pyecho", "handler": "echo"},
            "params": {"sleep_ms": 120000}})
        self.assertIn(st, (200, 201), body)
        def executor_running():
            # The executor's own view (GET /axe/beat with its token): the run reached it.
            req = urllib.request.Request("http://%s/axe/beat" % listen, headers={"Authorization": "Bearer " + EXEC})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())["running"] == 1
        wait_until(executor_running, what="the long run to reach the executor")
        st, body = self.api("POST", "/api/v1/tasks/py-sleep/kill")
        self.assertEqual(st, 200, body)
        st, runs = self.api("GET", "/api/v1/tasks/py-sleep/runs")
        self.assertEqual(st, 200, runs)
        ticket = (runs.get("runs") or runs.get("items"))[0]["ticket"]
        run = wait_until(finished(ticket), what="the killed run to end")
        self.assertEqual(run["result"], "killed", run)
        self.assertNotEqual(run.get("error", ""), "")

        def saw_kill():
            elog.seek(0)
            return "run killed: ticket=" + ticket in elog.read()
        try:
            wait_until(saw_kill, what="the executor to log the kill")
        except AssertionError:
            elog.seek(0)
            self.axe_log.seek(0)
            raise AssertionError("echo log:\n%s\naxe log:\n%s" % (elog.read()[-3000:], self.axe_log.read()[-3000:]))

        echo.send_signal(signal.SIGTERM)
        self.assertEqual(echo.wait(60), 0)
        elog.seek(0)
        self.assertIn("deregistered", elog.read())


if __name__ == "__main__":
    unittest.main()
