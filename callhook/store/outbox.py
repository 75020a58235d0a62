"""The durable outbox of notifications (DESIGN.md §1.1: ``recording_available_page``).

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
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from typing import Any

from callhook.store.database import Database


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


def insert(
    conn: sqlite3.Connection, app: str, url: str, method: str, body: dict[str, Any], now: float
) -> int:
    """Queue a notification (inside the caller's transaction); returns its id."""
    data = json.dumps(body, separators=(",", ":"))
    cursor = conn.execute(
        "INSERT INTO notifications (app, url, method, body, created, due)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (app, url, method, data, now, now),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


class Outbox:
    """The notifications table: what is due, and what became of each attempt."""

    def __init__(
        self, db: Database, policy: RetryPolicy | None = None, seed: int | None = None
    ) -> None:
        self.db = db
        self.policy = policy or RetryPolicy()
        self._rng = random.Random(seed)

    async def add(self, app: str, url: str, method: str, body: dict[str, Any], now: float) -> int:
        return await self.db.run(lambda conn: insert(conn, app, url, method, body, now))

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

        def query(conn: sqlite3.Connection) -> list[Notification]:
            # The application waiting longest first, so that no application is always last.
            apps = conn.execute(
                "SELECT app FROM notifications WHERE abandoned = 0 AND due <= ?"
                " GROUP BY app ORDER BY MIN(due)",
                (now,),
            ).fetchall()
            found: list[Notification] = []
            room_total = total - in_flight
            for (app,) in apps:
                room = min(per_app - busy.get(app, 0), room_total - len(found))
                if room <= 0:
                    continue
                rows = conn.execute(
                    "SELECT id, app, url, method, body, created, attempts FROM notifications"
                    " WHERE app = ? AND abandoned = 0 AND due <= ? ORDER BY due LIMIT ?",
                    (app, now, room + busy.get(app, 0)),
                ).fetchall()
                fresh = [
                    Notification(i, a, u, m, b.encode(), c, n)
                    for i, a, u, m, b, c, n in rows
                    if i not in skip
                ]
                found += fresh[:room]
            return found

        return await self.db.run(query)

    async def next_due(self, skip: set[int]) -> float | None:
        """When the earliest notification not in ``skip`` is due (None: nothing pending)."""
        marks = ",".join("?" * len(skip))

        def query(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(
                f"SELECT MIN(due) FROM notifications WHERE abandoned = 0 AND id NOT IN ({marks})",
                tuple(skip),
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
        await self.db.run(
            lambda conn: conn.execute(
                "UPDATE notifications SET attempts = ?, due = ?, last_error = ?, abandoned = ?"
                " WHERE id = ?",
                (attempts, due, error[:500], abandoned, notification.id),
            )
        )
        return None if abandoned else due

    async def counts(self) -> dict[str, int]:
        """How many notifications are pending and abandoned (for ``/api/stats``)."""

        def query(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT abandoned, COUNT(*) FROM notifications GROUP BY abandoned"
            ).fetchall()
            found = dict(rows)
            return {"pending": found.get(0, 0), "abandoned": found.get(1, 0)}

        return await self.db.run(query)
