"""The conformance suite of axe (`axe conformance executor`) against the echo example: every
case must pass, with a token (signed calls) and without."""

import os
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ECHO = os.path.normpath(os.path.join(HERE, "..", "examples", "echo"))
AXE_BIN = os.environ.get("AXE_BIN", "")


@unittest.skipUnless(AXE_BIN, "set AXE_BIN to an axe binary (test.sh builds one)")
class Conformance(unittest.TestCase):
    def suite(self, *extra):
        p = subprocess.run([AXE_BIN, "conformance", "executor", "--exec", ECHO] + list(extra),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        out = p.stdout.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, out)
        self.assertRegex(out, r"\n\d+ passed, 0 failed")
        return out

    def test_signed(self):
        out = self.suite("--token", "conformance-token-0123456789")
        self.assertRegex(out, r"\d+ passed, 0 failed, 0 skipped")

    def test_without_token(self):
        self.suite()


if __name__ == "__main__":
    unittest.main()
