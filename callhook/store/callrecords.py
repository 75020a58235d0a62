"""Call records: one row per call (and per far leg of a ``connect``) in the state database.

A record is written once, when its call has ended (its final page requested), and never
changed: what billing, audits and ``GET /api/v1/calls/records`` read. Times are Unix
seconds; ``seconds`` is how long the call was answered (0: never answered). The records
of every worker and node are in one table (the state database they share), numbered in
the order they were written: the API pages through them by that number.

Writing one must never cost a call anything: it goes to the database thread, and a
refusal (a full disk, the server down) is logged once until a record is written again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import astuple, dataclass, fields
from typing import Any

from callhook.store.database import Connection, Database

logger = logging.getLogger("callhook.store")

#: The most records one page of a listing holds.
PAGE_MAX = 1000


@dataclass(frozen=True)
class CallRecord:
    """One call's record (see the module docstring)."""

    app: str
    call_id: str
    instance_id: str
    #: ``call``: a call an application ran on; ``far``: a ``connect``'s far leg.
    leg: str
    #: A far leg's call (the one its ``connect`` ran on); empty for a call.
    parent_call_id: str
    direction: str
    call_from: str
    call_to: str
    trunk: str
    #: The worker of ``serve --workers`` that ran the call (None: one process).
    worker: int | None
    started: float
    answered: float | None
    ended: float
    seconds: float
    cause: str
    raw_cause: str
    recordings: int
    pages: int
    pages_failed: int


COLUMNS = tuple(f.name for f in fields(CallRecord))


@dataclass(frozen=True)
class Filters:
    """Which records a listing gives: started in ``[since, until)``, of ``apps`` (None:
    every application), with ``cause`` (None: any)."""

    apps: tuple[str, ...] | None = None
    since: float | None = None
    until: float | None = None
    cause: str | None = None


@dataclass(frozen=True)
class Page:
    """A page of records, and the cursor of the next one (None: no more)."""

    records: list[tuple[int, CallRecord]]
    next: int | None


class CallRecords:
    """The ``call_records`` table."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._refused = False

    def add(self, record: CallRecord) -> Future[None]:
        """Write ``record`` (on the database thread; the call does not wait for it)."""
        placeholders = ", ".join("?" for _ in COLUMNS)
        sql = f"INSERT INTO call_records ({', '.join(COLUMNS)}) VALUES ({placeholders})"
        values = astuple(record)
        return self.db.on_thread(lambda: self._write(sql, values))

    def _write(self, sql: str, values: Sequence[Any]) -> None:
        """On the database thread: the row, and whether it was (said once each way)."""
        try:
            self.db.transaction(lambda conn: _execute(conn, sql, values))
        except Exception as exc:
            if not self._refused:
                self._refused = True
                logger.error("a call record could not be written (said once until one is): %s", exc)
            raise
        if self._refused:
            self._refused = False
            logger.warning("call records are written again")

    def of_instance(self, app: str, instance_id: str) -> CallRecord | None:
        """The record of application ``app``'s call whose instance is ``instance_id`` (a
        call's, not a far leg's), if there is one (blocking)."""
        sql = (
            f"SELECT {', '.join(COLUMNS)} FROM call_records"
            " WHERE app = ? AND instance_id = ? AND leg = 'call' ORDER BY id DESC LIMIT 1"
        )
        row = self.db.call(lambda conn: conn.execute(sql, (app, instance_id)).fetchone())
        return _row(row) if row is not None else None

    def page(self, filters: Filters, after: int, limit: int) -> Page:
        """Records past number ``after``, oldest first, at most ``limit`` (call from any
        thread but the database's: it waits)."""
        where: list[str] = ["id > ?"]
        values: list[Any] = [after]
        if filters.apps is not None:
            where.append(f"app IN ({', '.join('?' for _ in filters.apps)})")
            values += filters.apps
        if filters.since is not None:
            where.append("started >= ?")
            values.append(filters.since)
        if filters.until is not None:
            where.append("started < ?")
            values.append(filters.until)
        if filters.cause is not None:
            where.append("cause = ?")
            values.append(filters.cause)
        sql = (
            f"SELECT id, {', '.join(COLUMNS)} FROM call_records WHERE {' AND '.join(where)}"
            " ORDER BY id LIMIT ?"
        )

        def read(conn: Connection) -> list[Any]:
            return conn.execute(sql, (*values, limit + 1)).fetchall()

        rows = self.db.call(read)
        records = [(int(row[0]), CallRecord(*row[1:])) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(records, records[-1][0] if more and records else None)


def _row(row: Sequence[Any]) -> CallRecord:
    return CallRecord(*row)


def _execute(conn: Connection, sql: str, values: Sequence[Any]) -> None:
    conn.execute(sql, values)
