"""Retention: what is deleted once it is older than its application keeps it.

Four kinds, each kept for a number of days (0: for ever, the default): call logs
(``logs/*.log``, which hold the callers' key presses and what they said), recordings
(``recordings/*``, the names callhook gives them), call records (:mod:`callhook.store.
callrecords`) and notifications given up on (the outbox's abandoned rows, which hold
the recordings' and transcriptions' results that could not be delivered). A file's age
is its last change (a recording's: its end); a record's, its call's end; an abandoned
notification's, when it was made. Files an application uploaded itself (prompts) are
never touched.

A recording is never deleted while its notification may still be sent: not while it is
in the recordings journal (being made, or not yet announced), nor while a notification
that names it is pending in the outbox.

Each sweep journals what it deleted in the ``deletions`` table (when, application,
kind, name: a file's name, or for rows how many and up to when), in the same transaction
as the rows it deleted, and after each file is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from callhook.config.tables import RetentionSettings
from callhook.store.database import Connection, Database
from callhook.store.files import FileInfo, MediaStore

logger = logging.getLogger("callhook.store")

DAY = 86400.0
#: Names a namespace's files of each kind start with.
LOGS = "logs/"
RECORDINGS = "recordings/"


def cutoff(days: float, now: float) -> float | None:
    """What changed before this is past ``days`` (None: kept for ever)."""
    return now - days * DAY if days > 0 else None


@dataclass
class Swept:
    """What one sweep deleted: by application, how many of each kind."""

    deleted: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, app: str, kind: str, count: int) -> None:
        if count:
            kinds = self.deleted.setdefault(app, {})
            kinds[kind] = kinds.get(kind, 0) + count


class Sweeper:
    """Deletes what is past its retention (see the module docstring); blocking: run it on
    a thread, in one process of those sharing the data directory."""

    def __init__(
        self, store: MediaStore, db: Database, policy: Callable[[str], RetentionSettings]
    ) -> None:
        """``policy(app)``: the retention of application ``app`` (an application no longer
        configured: the defaults)."""
        self.store = store
        self.db = db
        self.policy = policy
        self._dry_run = False

    def sweep(self, now: float, *, dry_run: bool = False) -> Swept:
        """Delete, for every application with files or rows, what ``now`` puts past its
        retention (``dry_run``: only count it)."""
        self._dry_run = dry_run
        swept = Swept()
        for app in self._apps():
            retention = self.policy(app)
            logs = cutoff(retention.call_logs_days, now)
            if logs is not None:
                swept.add(app, "call_logs", self._files(app, LOGS, logs, set(), now))
            recordings = cutoff(retention.recordings_days, now)
            if recordings is not None:
                kept = self._announcing(app)
                swept.add(app, "recordings", self._files(app, RECORDINGS, recordings, kept, now))
            records = cutoff(retention.call_records_days, now)
            if records is not None:
                swept.add(app, "call_records", self._rows(app, "call_records", records, now))
            notices = cutoff(retention.notifications_days, now)
            if notices is not None:
                swept.add(app, "notifications", self._rows(app, "notifications", notices, now))
        for app, kinds in swept.deleted.items():
            told = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in kinds.items())
            verb = "would delete" if dry_run else "deleted"
            logger.info("retention: %s %s of application %s", verb, told, app)
        return swept

    def _apps(self) -> list[str]:
        """The namespaces on disk and the applications with rows."""
        found: set[str] = set()
        if self.store.root.is_dir():
            found |= {
                p.name
                for p in self.store.root.iterdir()
                if p.is_dir() and not p.name.startswith(".")
            }

        def rows(conn: Connection) -> set[str]:
            apps = conn.execute("SELECT DISTINCT app FROM call_records").fetchall()
            apps += conn.execute(
                "SELECT DISTINCT app FROM notifications WHERE abandoned = 1"
            ).fetchall()
            return {app for (app,) in apps}

        return sorted(found | self.db.call(rows))

    def _announcing(self, app: str) -> set[str]:
        """The recordings of ``app`` whose notification may still be sent: in the journal,
        or named by a pending notification."""
        if self.db.dialect == "postgresql":
            named = "body::jsonb #>> '{action_result,result,filename}'"
        else:
            named = "json_extract(body, '$.action_result.result.filename')"

        def read(conn: Connection) -> set[str]:
            rows = conn.execute("SELECT filename FROM recordings WHERE app = ?", (app,)).fetchall()
            rows += conn.execute(
                f"SELECT {named} FROM notifications WHERE app = ? AND abandoned = 0", (app,)
            ).fetchall()
            return {name for (name,) in rows if name}

        return self.db.call(read)

    def _files(self, app: str, prefix: str, cutoff: float, kept: set[str], now: float) -> int:
        old = [
            info.name
            for info in _every(self.store, app, prefix)
            if info.modified < cutoff and info.name not in kept
        ]
        if self._dry_run:
            return len(old)
        gone = []
        for name in old:
            try:
                self.store.delete(app, name)
            except FileNotFoundError:
                continue  # (deleted meanwhile: by the application, or another sweep)
            except OSError as exc:
                logger.error(
                    "retention: %s of application %s cannot be deleted: %s", name, app, exc
                )
                continue
            gone.append(name)
        if gone:
            kind = "call_log" if prefix == LOGS else "recording"
            self.db.call(
                lambda conn: conn.executemany(
                    "INSERT INTO deletions (at, app, kind, name) VALUES (?, ?, ?, ?)",
                    [(now, app, kind, name) for name in gone],
                )
            )
        return len(gone)

    def _rows(self, app: str, table: str, cutoff: float, now: float) -> int:
        if table == "call_records":
            where, kind = "app = ? AND ended < ?", "call_records"
        else:
            where, kind = "app = ? AND abandoned = 1 AND created < ?", "notifications"

        def delete(conn: Connection) -> int:
            (count,) = conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE {where}", (app, cutoff)
            ).fetchone()
            if count and not self._dry_run:
                conn.execute(f"DELETE FROM {table} WHERE {where}", (app, cutoff))
                conn.execute(
                    "INSERT INTO deletions (at, app, kind, name) VALUES (?, ?, ?, ?)",
                    (now, app, kind, f"{count} before {cutoff:.0f}"),
                )
            return int(count)

        return self.db.call(delete)


def _every(store: MediaStore, app: str, prefix: str) -> Iterator[FileInfo]:
    after = ""
    while True:
        page = store.list(app, prefix, after, 1000)
        yield from page.files
        if page.next is None:
            return
        after = page.next
