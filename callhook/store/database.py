"""callhook's own state in SQLite (DESIGN.md §3): recordings in progress, notifications due.

One file in the data directory (``state.sqlite3``), in WAL mode with
``synchronous=FULL``: a transaction that has returned survives a crash or a
power cut. Every statement runs on one dedicated thread, so the event loop
never waits for the disk and the connection is never shared between threads;
:meth:`Database.submit` runs a function in a transaction there.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger("callhook.store")

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS recordings (
    app TEXT NOT NULL,
    filename TEXT NOT NULL,
    started REAL NOT NULL,
    encrypted INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    notify_url TEXT,
    notify_method TEXT,
    body TEXT NOT NULL,
    result TEXT,
    length INTEGER,
    PRIMARY KEY (app, filename)
);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app TEXT NOT NULL,
    url TEXT NOT NULL,
    method TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL,
    due REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    abandoned INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications (abandoned, due);
CREATE INDEX IF NOT EXISTS notifications_app ON notifications (app, abandoned, due);
"""


class Database:
    """The state database, used from its own thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="callhook-db")
        self._conn = self._thread.submit(self._open).result()

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(SCHEMA)
        return conn

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return value

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Run ``fn(connection)`` in a transaction on the database thread."""
        return self._thread.submit(self._transaction, fn)

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a transaction and wait for it (start-up, tests, other threads)."""
        return self.submit(fn).result()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a transaction without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(fn))

    def close(self) -> None:
        self._thread.submit(self._conn.close).result()
        self._thread.shutdown()
