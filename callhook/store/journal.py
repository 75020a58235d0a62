"""The journal of recordings: nothing captured is lost, every notification is sent.

A recording is in the journal (the state database) from its start until it
is announced. Two things must happen before ``recording_available_page`` is
notified (docs/recordings.md), in either order:

* the record action completed: :meth:`RecordingJournal.completed` with the
  result ``next_page`` got (``file_available`` false);
* the file is durably in the store: :meth:`RecordingJournal.durable` (called
  by :class:`~callhook.store.wavfile.WavWriter` after its ``fsync``).

The second of the two queues the notification in the outbox (with
``file_available`` true) and removes the recording from the journal, in one
transaction. At start-up :meth:`RecordingJournal.recover` finishes what a
crash interrupted: a file that was still being written is made valid
(:func:`~callhook.store.wavfile.recover`) and, if its action never
completed, reported with reason ``error`` and what the file holds.

An update the database refuses for a reason that passes (a full disk, an
I/O error, a PostgreSQL server restarting: :meth:`Database.passing`) is not
lost: it is held in memory, in order with the updates after it, and tried
again after :data:`RETRY_FIRST` seconds, doubling up to :data:`RETRY_MAX`,
until the database takes it (issue 14: the notification goes out once space
is back). A process that stops meanwhile loses only the held updates;
start-up recovery then reports the recording with reason ``error`` from what
its file holds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

from callhook.media import wav
from callhook.store import outbox, wavfile
from callhook.store.database import Connection, Database, Membership

logger = logging.getLogger("callhook.store")

#: Seconds before the first retry of journal updates the database refused (a full disk).
RETRY_FIRST = 0.5
#: The longest wait between retries.
RETRY_MAX = 10.0

Update = Callable[[Connection], bool]


def _set(
    conn: Connection,
    app: str,
    filename: str,
    column: Literal["result", "length"],
    value: str | int,
) -> None:
    conn.execute(
        f"UPDATE recordings SET {column} = ? WHERE app = ? AND filename = ?",
        (value, app, filename),
    )


def _forget(conn: Connection, app: str, filename: str) -> None:
    conn.execute("DELETE FROM recordings WHERE app = ? AND filename = ?", (app, filename))


def _log_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None:
        logger.error("the recordings journal could not be updated: %s", exc)


class RecordingJournal:
    """Recordings between their start and their announcement."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.time,
        on_queued: Callable[[], None] | None = None,
        ownership: Membership | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        #: This process's claim in a shared data directory (None: the only process).
        self.ownership = ownership
        #: Called (on the database thread) when a notification was queued.
        self.on_queued = on_queued
        # Updates not yet taken by the database, oldest first (only touched on its thread).
        self._backlog: deque[Update] = deque()
        self._retry_delay = RETRY_FIRST
        self._retry: threading.Timer | None = None

    def _submit(self, fn: Update) -> Future[bool]:
        future = self.db.on_thread(lambda: self._apply(fn))
        future.add_done_callback(_log_failure)
        future.add_done_callback(self._queued)
        return future

    @property
    def held_back(self) -> int:
        """How many updates wait for the database to take them again (a full disk)."""
        return len(self._backlog)

    def _apply(self, fn: Update) -> bool:
        """On the database thread: ``fn`` after the updates still held back, in order."""
        self._backlog.append(fn)
        if len(self._backlog) > 1:
            return False  # behind held-back updates: the retry runs it, in its turn
        return self._drain()

    def _drain(self) -> bool:
        """Run the held-back updates in order until one is refused; True if one queued a
        notification."""
        queued = False
        while self._backlog:
            try:
                queued |= self.db.transaction(self._backlog[0])
            except Exception as exc:
                if self.db.passing(exc):  # a full disk, I/O, locked, no server: wait and retry
                    self._hold(exc)
                    return queued
                # A bug, not the disk: retrying would never help.
                logger.exception("a recordings journal update failed and is dropped")
            self._backlog.popleft()
        if self._retry_delay != RETRY_FIRST:
            logger.warning("the recordings journal is written again; held-back updates done")
            self._retry_delay = RETRY_FIRST
        return queued

    def _hold(self, exc: Exception) -> None:
        if self._retry_delay == RETRY_FIRST:
            logger.error(
                "the recordings journal cannot be written (%s): %d update(s) held in memory,"
                " retried until it can (the recordings' notifications follow then)",
                exc,
                len(self._backlog),
            )
        else:
            logger.debug("the recordings journal still cannot be written: %s", exc)
        if self._retry is None:
            self._retry = threading.Timer(self._retry_delay, self._retry_soon)
            self._retry.daemon = True
            self._retry.start()
        self._retry_delay = min(RETRY_MAX, self._retry_delay * 2)

    def _retry_soon(self) -> None:
        # On the timer's thread: the retry itself runs on the database thread.
        with contextlib.suppress(RuntimeError):  # the database was closed: recovery's turn
            future = self.db.on_thread(self._retry_now)
            future.add_done_callback(_log_failure)
            future.add_done_callback(self._queued)

    def _retry_now(self) -> bool:
        self._retry = None
        return self._drain()

    def _queued(self, future: Future[bool]) -> None:
        if future.exception() is None and future.result() and self.on_queued is not None:
            self.on_queued()

    def started(
        self,
        app: str,
        filename: str,
        *,
        encrypted: bool,
        record_id: str,
        notify: tuple[str, str] | None,
        body: dict[str, Any],
        traceparent: str | None = None,
    ) -> Future[bool]:
        """A recording began; ``notify`` is (URL, method) of its recording_available_page
        (``traceparent``: the call's span it began in, which its notification joins)."""
        url, method = notify if notify is not None else (None, None)
        now = self.clock()
        owner = self.ownership.token if self.ownership is not None else None
        values = (
            app,
            filename,
            now,
            int(encrypted),
            record_id,
            url,
            method,
            json.dumps(body),
            owner,
            traceparent,
        )

        def insert(conn: Connection) -> bool:
            # A new recording of a name already journaled replaces it whole (SQLite and
            # PostgreSQL both know this upsert).
            conn.execute(
                "INSERT INTO recordings (app, filename, started, encrypted, record_id,"
                " notify_url, notify_method, body, owner, traceparent)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (app, filename) DO UPDATE SET started = excluded.started,"
                " encrypted = excluded.encrypted, record_id = excluded.record_id,"
                " notify_url = excluded.notify_url, notify_method = excluded.notify_method,"
                " body = excluded.body, owner = excluded.owner, result = NULL, length = NULL,"
                " traceparent = excluded.traceparent",
                values,
            )
            return False

        return self._submit(insert)

    def completed(self, app: str, filename: str, result: dict[str, Any]) -> Future[bool]:
        """The record action completed with ``result`` (the one next_page got)."""
        data = json.dumps(result)

        def update(conn: Connection) -> bool:
            _set(conn, app, filename, "result", data)
            return self._finish_if_ready(conn, app, filename)

        return self._submit(update)

    def durable(self, app: str, filename: str, length: int) -> Future[bool]:
        """The file is on disk for good, holding ``length`` bytes of audio."""

        def update(conn: Connection) -> bool:
            _set(conn, app, filename, "length", length)
            return self._finish_if_ready(conn, app, filename)

        return self._submit(update)

    def deleted(self, app: str, filename: str) -> Future[bool]:
        """The application deleted the file: nothing is to be announced about it any more.

        Its row goes, and so does a notification queued for it and not delivered yet
        (``recording_available_page`` must never announce a file that is gone).
        """

        if self.db.dialect == "postgresql":
            announced = "body::jsonb #>> '{action_result,result,filename}'"
        else:
            announced = "json_extract(body, '$.action_result.result.filename')"

        def delete(conn: Connection) -> bool:
            _forget(conn, app, filename)
            conn.execute(
                f"DELETE FROM notifications WHERE app = ? AND {announced} = ?", (app, filename)
            )
            return False

        return self._submit(delete)

    def failed(self, app: str, filename: str, why: str) -> Future[bool]:
        """The file could not be created: it will never be available, nothing to announce."""
        logger.error("recording %s/%s was not made: %s", app, filename, why)

        def delete(conn: Connection) -> bool:
            _forget(conn, app, filename)
            return False

        return self._submit(delete)

    def _finish_if_ready(self, conn: Connection, app: str, filename: str) -> bool:
        row = conn.execute(
            "SELECT notify_url, notify_method, body, result, length, traceparent FROM recordings"
            " WHERE app = ? AND filename = ?",
            (app, filename),
        ).fetchone()
        if row is None or row[3] is None or row[4] is None:
            return False
        url, method, body, result, traceparent = row[0], row[1], row[2], row[3], row[5]
        _forget(conn, app, filename)
        if url is None:
            return False
        notice = json.loads(body)
        notice["action_result"] = {
            "action": "record",
            "result": {**json.loads(result), "file_available": True},
        }
        outbox.insert(conn, app, url, method or "POST", notice, self.clock(), traceparent)
        return True

    def recover(self, path_of: Callable[[str, str], Path], at_start: bool = True) -> int:
        """Finish the recordings a crash interrupted (at start-up); returns how many.

        With an :attr:`ownership`, only those of processes that are gone: a
        process sharing the data directory keeps its recordings. Serve also
        calls this every few seconds (``at_start`` false), so that the
        recordings of a process (a worker, a node) that died are finished by the
        others while they run; recordings from before owners existed are left
        to start-up then.
        """
        ownership = self.ownership
        if ownership is None:
            return self._recover(path_of, None, everyone=True)
        owners: set[str | None] = {
            owner
            for (owner,) in self.db.call(
                lambda conn: conn.execute("SELECT DISTINCT owner FROM recordings").fetchall()
            )
        }
        count = 0
        for owner in (owners | ownership.others()) - {ownership.token}:
            if owner is None:  # made before recordings had owners
                if at_start:
                    count += self._recover(path_of, None)
                continue
            with ownership.gone(owner) as gone:
                if gone:  # else that process is alive: its recordings are its own
                    count += self._recover(path_of, owner)
        return count

    def _recover(
        self, path_of: Callable[[str, str], Path], owner: str | None, everyone: bool = False
    ) -> int:
        if everyone:
            which: tuple[str, tuple[str, ...]] = ("", ())
        elif owner is None:
            which = (" WHERE owner IS NULL", ())
        else:
            which = (" WHERE owner = ?", (owner,))
        # Two nodes that find one gone at once: the second skips the rows the first is
        # finishing, rather than wait for them (SQLite: its transactions never overlap).
        locking = " FOR UPDATE SKIP LOCKED" if self.db.dialect == "postgresql" else ""

        def work(conn: Connection) -> tuple[int, bool]:
            rows = conn.execute(
                "SELECT app, filename, encrypted, record_id, result, length, body"
                " FROM recordings" + which[0] + locking,
                which[1],
            ).fetchall()
            queued = False
            for app, filename, encrypted, record_id, result, length, body in rows:
                queued |= self._recover_one(
                    conn,
                    path_of,
                    app,
                    filename,
                    bool(encrypted),
                    record_id,
                    result,
                    length,
                    _channels(body),
                )
            return len(rows), queued

        count, queued = self.db.call(work)
        if queued and self.on_queued is not None:
            self.on_queued()
        return count

    def _recover_one(
        self,
        conn: Connection,
        path_of: Callable[[str, str], Path],
        app: str,
        filename: str,
        encrypted: bool,
        record_id: str,
        result: str | None,
        length: int | None,
        channels: int = 1,
    ) -> bool:
        name = f"{app}/{filename}"
        if length is None:
            try:
                length = wavfile.recover(path_of(app, filename), encrypted)
            except FileNotFoundError:
                logger.error("recording %s was interrupted and its file is missing", name)
                _forget(conn, app, filename)
                return False
            except (OSError, ValueError, wav.WavError) as exc:
                logger.error("recording %s was interrupted and cannot be repaired: %s", name, exc)
                _forget(conn, app, filename)
                return False
            _set(conn, app, filename, "length", length)
        if result is None:
            seconds = round(length / (8000 * channels), 1)
            logger.warning(
                "recording %s was interrupted by a restart of callhook: %.1f s kept,"
                " reported with reason 'error'",
                name,
                seconds,
            )
            recovered = {
                "filename": filename,
                "file_available": False,
                "id": record_id,
                # A recording only writes once sound was heard (the record action's rules).
                "contains_sound": length > 0,
                "seconds_duration": seconds,
                "reason": "error",
            }
            _set(conn, app, filename, "result", json.dumps(recovered))
        else:
            logger.info("recording %s was complete before the restart; made durable now", name)
        return self._finish_if_ready(conn, app, filename)


def _channels(body: str | None) -> int:
    """The channels a recording's file has: 2 for a connect's ``separate`` call recording,
    up to 16 for a conference room's ``separate`` one, each saying so in its journal body
    (reporting.py, telephony/roomrecording.py), else 1."""
    try:
        channels = json.loads(body or "{}").get("channels", 1)
    except (ValueError, AttributeError):
        return 1
    ok = isinstance(channels, int) and not isinstance(channels, bool) and 1 <= channels <= 16
    return channels if ok else 1
