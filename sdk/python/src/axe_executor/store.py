"""Where finished tickets are remembered (de-duplication after a run finished, R5.4).

The executor asks its TicketStore before running a ticket: a ticket the store remembers is
answered 200 {"duplicate": true, ...} and its result is sent again, never run again. Each
entry carries its own expiry (the run's dedup_ttl_ms). MemoryTicketStore is the default;
SqliteTicketStore keeps the tickets in a file, so that a restarted executor still refuses to
run a ticket it already ran, and sends again the results the scheduler had not acknowledged
when it stopped.

A store is called from several threads; implementations must be thread-safe.
"""

import collections
import sqlite3
import threading
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class Outcome:
    """A finished run: its verdict and the callback body that reports it."""
    ticket: str
    status: str
    error: str
    body: bytes  # the JSON result sent to /api/v1/callback
    expires_ms: int  # Unix ms after which the ticket is forgotten
    acked: bool = False  # the scheduler acknowledged (or finally refused) the result


class TicketStore:
    """The interface of a ticket store. get returns the remembered outcome of a ticket that
    has not expired at now_ms; put records one (replacing any); acked marks its result
    delivered; unacked lists the unexpired outcomes whose results were never acknowledged
    (sent again when an executor starts); close releases resources."""

    def get(self, ticket: str, now_ms: int) -> Optional[Outcome]:
        raise NotImplementedError

    def put(self, outcome: Outcome, now_ms: int) -> None:
        raise NotImplementedError

    def acked(self, ticket: str) -> None:
        raise NotImplementedError

    def unacked(self, now_ms: int) -> List[Outcome]:
        return []

    def close(self) -> None:
        pass


class MemoryTicketStore(TicketStore):
    """Remembers up to size tickets in memory, least recently finished forgotten first."""

    def __init__(self, size: int = 10000):
        if size < 1:
            raise ValueError("size: must be at least 1")
        self._size = size
        self._lock = threading.Lock()
        self._entries = collections.OrderedDict()  # type: collections.OrderedDict[str, Outcome]

    def get(self, ticket: str, now_ms: int) -> Optional[Outcome]:
        with self._lock:
            o = self._entries.get(ticket)
            if o is None:
                return None
            if now_ms >= o.expires_ms:
                del self._entries[ticket]
                return None
            return o

    def put(self, outcome: Outcome, now_ms: int) -> None:
        with self._lock:
            # Drop up to two expired entries from the old end, so that with similar TTLs the
            # memory follows the TTLs and not only the size bound.
            for _ in range(2):
                if not self._entries:
                    break
                oldest = next(iter(self._entries.values()))
                if now_ms < oldest.expires_ms:
                    break
                self._entries.popitem(last=False)
            self._entries.pop(outcome.ticket, None)
            self._entries[outcome.ticket] = outcome
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def acked(self, ticket: str) -> None:
        with self._lock:
            o = self._entries.get(ticket)
            if o is not None:
                o.acked = True

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class SqliteTicketStore(TicketStore):
    """Remembers tickets in an SQLite file (sqlite3 from the standard library). Expired
    entries are deleted as new ones are recorded."""

    def __init__(self, path: str):
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS axe_tickets ("
            " ticket TEXT PRIMARY KEY, status TEXT NOT NULL, error TEXT NOT NULL,"
            " body BLOB NOT NULL, expires_ms INTEGER NOT NULL, acked INTEGER NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS axe_tickets_expires ON axe_tickets (expires_ms)")
        self._puts = 0

    def get(self, ticket: str, now_ms: int) -> Optional[Outcome]:
        with self._lock:
            row = self._db.execute(
                "SELECT status, error, body, expires_ms, acked FROM axe_tickets WHERE ticket = ? AND expires_ms > ?",
                (ticket, now_ms)).fetchone()
        if row is None:
            return None
        return Outcome(ticket, row[0], row[1], bytes(row[2]), row[3], bool(row[4]))

    def put(self, outcome: Outcome, now_ms: int) -> None:
        with self._lock:
            self._puts += 1
            if self._puts % 100 == 1:
                self._db.execute("DELETE FROM axe_tickets WHERE expires_ms <= ?", (now_ms,))
            self._db.execute(
                "INSERT OR REPLACE INTO axe_tickets (ticket, status, error, body, expires_ms, acked)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (outcome.ticket, outcome.status, outcome.error, outcome.body, outcome.expires_ms,
                 int(outcome.acked)))

    def acked(self, ticket: str) -> None:
        with self._lock:
            self._db.execute("UPDATE axe_tickets SET acked = 1 WHERE ticket = ?", (ticket,))

    def unacked(self, now_ms: int) -> List[Outcome]:
        with self._lock:
            rows = self._db.execute(
                "SELECT ticket, status, error, body, expires_ms FROM axe_tickets"
                " WHERE acked = 0 AND expires_ms > ? ORDER BY rowid", (now_ms,)).fetchall()
        return [Outcome(r[0], r[1], r[2], bytes(r[3]), r[4], False) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
