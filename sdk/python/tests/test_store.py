import os
import tempfile
import unittest

import helpers  # noqa: F401
from axe_executor import MemoryTicketStore, Outcome, SqliteTicketStore


def outcome(ticket, expires, status="success"):
    return Outcome(ticket, status, "", b'{"ticket":"%s"}' % ticket.encode(), expires)


class StoreContract:
    """What every TicketStore must do."""

    def make(self):
        raise NotImplementedError

    def test_get_put_expiry(self):
        s = self.make()
        self.assertIsNone(s.get("a", 0))
        s.put(outcome("a", 1000, "failed"), 0)
        got = s.get("a", 999)
        self.assertEqual((got.ticket, got.status, got.body), ("a", "failed", b'{"ticket":"a"}'))
        self.assertIsNone(s.get("a", 1000), "expired at its own expiry")
        s.put(outcome("b", 5000), 0)
        self.assertIsNotNone(s.get("b", 4999))

    def test_acked_and_unacked(self):
        s = self.make()
        s.put(outcome("a", 1000), 0)
        s.put(outcome("b", 1000), 0)
        s.put(outcome("c", 10), 0)
        s.acked("a")
        self.assertEqual([o.ticket for o in s.unacked(100)], ["b"] if self.persistent else [])
        self.assertTrue(s.get("a", 1).acked)


class MemoryStoreTest(StoreContract, unittest.TestCase):
    persistent = False

    def make(self):
        return MemoryTicketStore(100)

    def test_size_bound(self):
        s = MemoryTicketStore(2)
        for t in "abc":
            s.put(outcome(t, 1000), 0)
        self.assertIsNone(s.get("a", 1))
        self.assertIsNotNone(s.get("c", 1))
        self.assertEqual(len(s), 2)


class SqliteStoreTest(StoreContract, unittest.TestCase):
    persistent = True

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "tickets.db")

    def tearDown(self):
        self.dir.cleanup()

    def make(self):
        s = SqliteTicketStore(self.path)
        self.addCleanup(s.close)
        return s

    def test_survives_reopen(self):
        s = SqliteTicketStore(self.path)
        s.put(outcome("a", 1000), 0)
        s.put(outcome("b", 1000), 0)
        s.acked("a")
        s.close()
        s2 = self.make()
        self.assertEqual(s2.get("a", 1).ticket, "a")
        self.assertEqual([o.ticket for o in s2.unacked(1)], ["b"])


if __name__ == "__main__":
    unittest.main()
