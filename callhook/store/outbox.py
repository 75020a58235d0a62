"""The durable outbox of notifications (docs/behaviour.md: ``recording_available_page``).

A notification is a row in the state database from the moment it is due
until an application answers it with a 2xx; then the row is deleted. So it
is delivered at least once, even across a restart of callhook, and never
again after a successful answer (a crash between the answer and the delete
is the only way to send it twice).

A failed attempt (no connection, timeout, non-2xx) is retried after an
exponentially growing delay with jitter (:meth:`RetryPolicy.delay`), for
:attr:`RetryPolicy.give_up_after` seconds (24 hours by default); after that
the row is kept, marked abandoned, with its last error, and a log line says
so. Times are wall-clock Unix seconds: they must mean the same after a restart.

Notifications of one *stream* (a call's transcription results) are delivered one at a
time, in the order they were queued: one is not due while an earlier one of its stream is
pending or being sent (a failing one holds the rest back until it is answered, or
abandoned). The others go out side by side, up to the notifier's limits.

Nodes sharing a PostgreSQL database all deliver (callhook/store/postgres.py):
each takes the rows it sends with a lease (``lease_owner``, ``lease_until``),
longer than an attempt can last, given back when the attempt ends. A row
another node holds is not due for this one, so no notification is sent by two
nodes at once. Lease times are the nodes' own clocks, which must agree to
within seconds (NTP). With SQLite one process delivers (``notifier.lock``),
and rows are not leased.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from callhook.store.database import Connection, Database

#: The shortest time a node holds the notifications it sends (serve makes it longer than an
#: attempt can last: :func:`lease_for`), short enough that those of a node that hung
#: mid-attempt go out again soon.
LEASE_SECONDS = 120.0


def lease_for(page_timeout: float) -> float:
    """The lease of a notification whose request may take ``page_timeout`` seconds: an
    attempt may be two requests (a connection retried), with room to mark it delivered."""
    return max(LEASE_SECONDS, 4 * page_timeout + 60)


@dataclass(frozen=True)
class RetryPolicy:
    """When to try a failed notification again, and when to give up."""

    first_delay: float = 2.0
    max_delay: float = 600.0
    give_up_after: float = 24 * 3600.0

    def delay(self, attempts: int, rng: random.Random) -> float:
        """Seconds before the next try after ``attempts`` failed ones.

        The delay doubles from :attr:`first_delay` up to :attr:`max_delay`; a
        random factor between 0.5 and 1.5 spreads the retries of many
        notifications that failed together (an endpoint that was down).
        """
        base = min(self.max_delay, self.first_delay * 2.0 ** max(0, attempts - 1))
        return base * rng.uniform(0.5, 1.5)


@dataclass(frozen=True)
class Notification:
    """One notification to deliver."""

    id: int
    app: str
    url: str
    method: str
    body: bytes
    created: float
    attempts: int
    #: The W3C traceparent of the call it is about (its delivery's span joins that trace).
    traceparent: str | None = None


def insert(
    conn: Connection,
    app: str,
    url: str,
    method: str,
    body: dict[str, Any],
    now: float,
    traceparent: str | None = None,
    stream: str | None = None,
) -> int:
    """Queue a notification (inside the caller's transaction); returns its id
    (``traceparent``: the call's span it belongs to, for its delivery's; ``stream``: those
    of one stream go one at a time, in order)."""
    data = json.dumps(body, separators=(",", ":"))
    sql = (
        "INSERT INTO notifications (app, url, method, body, created, due, traceparent, stream)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    values = (app, url, method, data, now, now, traceparent, stream)
    if isinstance(conn, sqlite3.Connection):  # (RETURNING needs SQLite 3.35: not everywhere)
        rowid = conn.execute(sql, values).lastrowid
        assert rowid is not None
        return rowid
    return int(conn.execute(sql + " RETURNING id", values).fetchone()[0])


#: The condition of a row no earlier row of its stream holds back (a row of no stream: any).
_FIRST_OF_STREAM = (
    " AND (stream IS NULL OR NOT EXISTS (SELECT 1 FROM notifications AS earlier"
    " WHERE earlier.stream = notifications.stream AND earlier.id < notifications.id"
    " AND earlier.abandoned = 0))"
)


class Outbox:
    """The notifications table: what is due, and what became of each attempt."""

    def __init__(
        self,
        db: Database,
        policy: RetryPolicy | None = None,
        seed: int | None = None,
        lease_owner: str | None = None,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.db = db
        self.policy = policy or RetryPolicy()
        self._rng = random.Random(seed)
        #: This node's token when nodes share the outbox (rows are leased), else None.
        self.lease_owner = lease_owner
        self.lease_seconds = lease_seconds

    def _free(self, now: float) -> tuple[str, tuple[Any, ...]]:
        """The condition (and its values) of a row no other node holds at ``now``."""
        if self.lease_owner is None:
            return "", ()
        return (
            " AND (lease_until IS NULL OR lease_until < ? OR lease_owner = ?)",
            (now, self.lease_owner),
        )

    async def add(
        self,
        app: str,
        url: str,
        method: str,
        body: dict[str, Any],
        now: float,
        traceparent: str | None = None,
        stream: str | None = None,
    ) -> int:
        return await self.db.run(
            lambda conn: insert(conn, app, url, method, body, now, traceparent, stream)
        )

    async def due(
        self, now: float, busy: dict[str, int], per_app: int, total: int, skip: set[int]
    ) -> list[Notification]:
        """The notifications to send now, oldest first, application by application.

        ``busy`` is how many of each application's notifications are being
        sent (their ids are ``skip``): an application gets at most ``per_app``
        at once, so the backlog of one whose endpoint is slow or dead never
        holds up another's.
        """
        in_flight = sum(busy.values())
        free, values = self._free(now)

        def query(conn: Connection) -> list[Notification]:
            # The application waiting longest first, so that no application is always last.
            apps = conn.execute(
                f"SELECT app FROM notifications WHERE abandoned = 0 AND due <= ?{free}"
                " GROUP BY app ORDER BY MIN(due)",
                (now, *values),
            ).fetchall()
            found: list[Notification] = []
            room_total = total - in_flight
            for (app,) in apps:
                room = min(per_app - busy.get(app, 0), room_total - len(found))
                if room <= 0:
                    continue
                rows = conn.execute(
                    "SELECT id, app, url, method, body, created, attempts, traceparent"
                    " FROM notifications"
                    f" WHERE app = ? AND abandoned = 0 AND due <= ?{free}{_FIRST_OF_STREAM}"
                    " ORDER BY due LIMIT ?",
                    (app, now, *values, room + busy.get(app, 0)),
                ).fetchall()
                fresh = [
                    Notification(i, a, u, m, b.encode(), c, n, t)
                    for i, a, u, m, b, c, n, t in rows
                    if i not in skip
                ]
                found += [n for n in fresh[:room] if self._lease(conn, n.id, now)]
            return found

        return await self.db.run(query)

    def _lease(self, conn: Connection, notification_id: int, now: float) -> bool:
        """Hold the row for this node; False if another node took it meanwhile (PostgreSQL
        checks the condition again on the row it waited for: READ COMMITTED)."""
        if self.lease_owner is None:
            return True
        free, values = self._free(now)
        row = conn.execute(
            "UPDATE notifications SET lease_owner = ?, lease_until = ?"
            f" WHERE id = ?{free} RETURNING id",
            (self.lease_owner, now + self.lease_seconds, notification_id, *values),
        ).fetchone()
        return row is not None

    async def next_due(self, skip: set[int], now: float | None = None) -> float | None:
        """When the earliest notification not in ``skip`` (nor held by another node at
        ``now``, nor back in its stream) is due (None: nothing pending)."""
        marks = ",".join("?" * len(skip))
        unless = f" AND id NOT IN ({marks})" if skip else ""  # PostgreSQL refuses "IN ()"
        free, values = self._free(now if now is not None else time.time())

        def query(conn: Connection) -> float | None:
            row = conn.execute(
                "SELECT MIN(due) FROM notifications"
                f" WHERE abandoned = 0{unless}{free}{_FIRST_OF_STREAM}",
                (*skip, *values),
            ).fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self.db.run(query)

    async def delivered(self, notification_id: int) -> None:
        """The application answered 2xx: never send it again."""
        await self.db.run(
            lambda conn: conn.execute("DELETE FROM notifications WHERE id = ?", (notification_id,))
        )

    async def failed(self, notification: Notification, error: str, now: float) -> float | None:
        """An attempt failed: schedule the next one; returns its time, or None when given up."""
        attempts = notification.attempts + 1
        if now - notification.created >= self.policy.give_up_after:
            due, abandoned = now, 1
        else:
            due, abandoned = now + self.policy.delay(attempts, self._rng), 0
        # The lease is given back with the attempt: the retry may go from any node.
        await self.db.run(
            lambda conn: conn.execute(
                "UPDATE notifications SET attempts = ?, due = ?, last_error = ?, abandoned = ?"
                + (", lease_owner = NULL, lease_until = NULL" if self.lease_owner else "")
                + " WHERE id = ?",
                (attempts, due, error[:500], abandoned, notification.id),
            )
        )
        return None if abandoned else due

    async def counts(self) -> dict[str, int]:
        """How many notifications are pending and abandoned (for ``/api/stats``)."""

        def query(conn: Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT abandoned, COUNT(*) FROM notifications GROUP BY abandoned"
            ).fetchall()
            found = dict(rows)
            return {"pending": found.get(0, 0), "abandoned": found.get(1, 0)}

        return await self.db.run(query)
