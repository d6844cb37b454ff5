#!/usr/bin/env python3
"""Runs per second of a no-op echo handler through one executor, and the executor's CPU per
run.

Starts any SDK's echo executor as `axe conformance executor --exec` does (AXE_SCHEDULERS,
AXE_LISTEN, AXE_TOKEN, AXE_APP), plays the scheduler (register, heartbeat, results), sends
--runs signed runs over --conns keep-alive connections (or in /axe/runs batches of --batch),
and measures from the first run sent to the last result received. So the same driver
measures the Go SDK (executor/examples/echo) and the Python SDK in one sitting:

    go build -o /tmp/echo-go ./executor/examples/echo
    sdk/python/bench/throughput.py --exec /tmp/echo-go
    sdk/python/bench/throughput.py --exec sdk/python/examples/echo
"""

import argparse
import http.client
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from axe_executor import protocol as p  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


class Scheduler:
    def __init__(self):
        self.cv = threading.Condition()
        self.reg = None
        self.results = 0
        self.failed = 0
        sched = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                resp = {}
                if self.path == p.PATH_REGISTER:
                    with sched.cv:
                        sched.reg = body
                        sched.cv.notify_all()
                    resp = {"heartbeat_interval_ms": 10000, "lost_after_ms": 30000, "version": 2}
                elif self.path in (p.PATH_CALLBACK, p.PATH_CALLBACK_BATCH):
                    rs = body["results"] if self.path == p.PATH_CALLBACK_BATCH else [body]
                    with sched.cv:
                        sched.results += len(rs)
                        sched.failed += sum(r["status"] != "success" for r in rs)
                        sched.cv.notify_all()
                    resp = {"results": [{"status": 200, "ok": True}] * len(rs)} \
                        if self.path == p.PATH_CALLBACK_BATCH else {"ok": True}
                elif self.path == p.PATH_DEREGISTER:
                    resp = {"ok": True}
                data = json.dumps(resp).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

            def server_bind(self):
                socketserver.TCPServer.server_bind(self)
                self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

        self.server = S(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exec", required=True, help="the echo executor to start")
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--conns", type=int, default=8, help="calls in flight (the scheduler keeps 8)")
    ap.add_argument("--batch", type=int, default=0, help="send /axe/runs batches of this many instead")
    args = ap.parse_args()

    sched = Scheduler()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    listen = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    env = dict(os.environ, AXE_SCHEDULERS=sched.url, AXE_LISTEN=listen, AXE_TOKEN=TOKEN, AXE_APP="bench")
    proc = subprocess.Popen("exec " + args.exec, shell=True, env=env, start_new_session=True)
    try:
        with sched.cv:
            if not sched.cv.wait_for(lambda: sched.reg is not None, 60):
                raise SystemExit("the executor did not register")
        address, inc = sched.reg["address"], sched.reg.get("incarnation", "")
        key = p.dispatch_key(TOKEN)
        host, port = address.rsplit(":", 1)
        stamp = "%x" % int(time.time() * 1000)
        refused = []

        def call(conn, path, body):
            h = {"Content-Type": "application/json",
                 "Authorization": p.sign_call(key, p.now_ms(), address, path, "", body, incarnation=inc or None)}
            if inc:
                h[p.HEADER_INCARNATION] = inc
            conn.request("POST", path, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            return r.status, data

        def worker(idx, items):
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            for group in items:
                runs = [{"ticket": "%s-%d" % (stamp, i), "task": "bench-%d" % i, "handler": "echo",
                         "attempt": 1, "deadline": 0} for i in group]
                busy = 0
                while runs:
                    # A run refused 429 (pool and queue full) is sent again, as the scheduler
                    # would offer it to another executor; every run is measured once done.
                    if args.batch:
                        st, data = call(conn, p.PATH_RUNS, p.dumps({"runs": runs}))
                        codes = [a["code"] for a in json.loads(data)["results"]] if st == 200 else [st] * len(runs)
                    else:
                        st, _ = call(conn, p.PATH_RUN, p.dumps(runs[0]))
                        codes = [st]
                    refused.extend(c for c in codes if c not in (202, 429))
                    runs = [r for r, c in zip(runs, codes) if c == 429]
                    if runs:
                        busy += 1
                        time.sleep(min(0.001 * busy, 0.05))
            conn.close()

        per = args.batch or 1
        groups = [list(range(i, min(i + per, args.runs))) for i in range(0, args.runs, per)]
        shares = [groups[i::args.conns] for i in range(args.conns)]
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        threads = [threading.Thread(target=worker, args=(i, shares[i])) for i in range(args.conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        want = args.runs - len(refused)
        with sched.cv:
            sched.cv.wait_for(lambda: sched.results >= want, 300)
            got = sched.results
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(proc.pid) - cpu0
        print(json.dumps({"exec": args.exec, "runs": args.runs, "conns": args.conns, "batch": args.batch,
                          "refused": len(refused), "results": got, "failed": sched.failed,
                          "seconds": round(elapsed, 3), "runs_per_second": round(got / elapsed),
                          "executor_cpu_ms_per_run": round(1000 * cpu / max(got, 1), 3)}))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
