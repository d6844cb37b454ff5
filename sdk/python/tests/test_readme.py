"""The README's example runs as written (with this test's scheduler, token and port)."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

from helpers import TOKEN, Caller, FakeScheduler, free_port, run_body, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")


class ReadmeExample(unittest.TestCase):
    def test_example_runs(self):
        with open(README, encoding="utf-8") as f:
            code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        handler = code[code.index("@ex.handler"):code.index("ex.run_forever")].strip().splitlines()
        self.assertLess(len(handler), 20, "the handler of the README's example")
        sched = FakeScheduler()
        self.addCleanup(sched.close)
        listen = "127.0.0.1:%d" % free_port()
        for old, new in (("http://127.0.0.1:7070", sched.url), ("...an executor token of axe...", TOKEN),
                         ("127.0.0.1:9100", listen)):
            self.assertIn(old, code)
            code = code.replace(old, new)
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        path = os.path.join(d.name, "report.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src"))
        proc = subprocess.Popen([sys.executable, path], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        reg = wait_until(lambda: sched.registers and sched.registers[0], what="the example to register")
        caller = Caller(listen, reg["incarnation"])
        st, _ = caller.run(run_body("rd1", handler="report", params={"region": "us"}))
        self.assertEqual(st, 202)
        r = sched.wait_result("rd1")
        self.assertEqual((r["status"], r["output"]), ("success", '{"region":"us","rows":42}'))
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
        self.assertEqual(proc.returncode, 0, out)
        self.assertEqual(len(sched.deregisters), 1)


if __name__ == "__main__":
    unittest.main()
