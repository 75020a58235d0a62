"""callhook's own state (docs/scaling.md): recordings in progress, notifications due, the
registered phones of its users, the call records.

By default it is SQLite (:class:`Database`); ``[database] url`` puts it in a
PostgreSQL server shared by several nodes instead
(:class:`callhook.store.postgres.PostgresDatabase`). The code that reads and
writes it is the same for both: each runs functions of a :class:`Connection`
whose SQL uses ``?`` placeholders, and asks :attr:`Database.dialect` where the two
differ.

SQLite is one file in the data directory (``state.sqlite3``), in WAL mode with
``synchronous=FULL``: a transaction that has returned survives a crash or a
power cut. Every statement runs on one dedicated thread, so the event loop
never waits for the disk and the connection is never shared between threads;
:meth:`Database.submit` runs a function in a transaction there.

Several processes may share a data directory (``serve``, and ``callhook
call`` in another terminal). :class:`Ownership` keeps them apart with
``flock`` locks that the kernel releases when a process dies: each process
holds ``locks/<its token>.lock`` for its life and marks the recordings it
makes with its token, so start-up recovery touches only the recordings of
processes that are gone; and one process at a time holds ``notifier.lock``
and delivers notifications, so none is sent by two processes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

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
    owner TEXT,
    traceparent TEXT,
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
    abandoned INTEGER NOT NULL DEFAULT 0,
    traceparent TEXT,
    stream TEXT
);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications (abandoned, due);
CREATE INDEX IF NOT EXISTS notifications_app ON notifications (app, abandoned, due);
CREATE TABLE IF NOT EXISTS bindings (
    user TEXT NOT NULL,
    contact TEXT NOT NULL,
    call_id TEXT NOT NULL,
    cseq INTEGER NOT NULL,
    expires REAL NOT NULL,
    source_transport TEXT NOT NULL,
    source_host TEXT NOT NULL,
    source_port INTEGER NOT NULL,
    target_transport TEXT NOT NULL,
    target_host TEXT NOT NULL,
    target_port INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS bindings_user ON bindings (user);
CREATE TABLE IF NOT EXISTS call_records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app TEXT NOT NULL,
    call_id TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    leg TEXT NOT NULL,
    parent_call_id TEXT NOT NULL,
    direction TEXT NOT NULL,
    call_from TEXT NOT NULL,
    call_to TEXT NOT NULL,
    trunk TEXT NOT NULL,
    worker INTEGER,
    started REAL NOT NULL,
    answered REAL,
    ended REAL NOT NULL,
    seconds REAL NOT NULL,
    cause TEXT NOT NULL,
    raw_cause TEXT NOT NULL,
    recordings INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    pages_failed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS call_records_started ON call_records (started);
CREATE INDEX IF NOT EXISTS call_records_app ON call_records (app, id);
CREATE TABLE IF NOT EXISTS deletions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    app TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL
);
"""


#: Columns added since the first state files: (table, column), each TEXT.
_ADDED = (
    ("recordings", "owner"),
    ("recordings", "traceparent"),  # the call's trace, for its notification's span
    ("notifications", "traceparent"),
    ("notifications", "stream"),  # delivered one at a time, in order (store/outbox.py)
)

#: Indexes on added columns: made once the columns are there.
_ADDED_INDEXES = "CREATE INDEX IF NOT EXISTS notifications_stream ON notifications (stream, id);"


class Cursor(Protocol):
    """What a statement gives back: its rows (tuples)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the state's functions are given: SQL with ``?`` placeholders, both dialects."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...


#: SQLite's primary result codes of refusals that pass (a full disk gets space, a lock is
#: released); anything else (a bug: "no such column", a read-only file) never would.
_PASSING = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
)


class Database:
    """The state database in SQLite (``<data_dir>/state.sqlite3``), used from its own thread."""

    #: Where the SQL of the two databases differs, code asks this.
    dialect: Literal["sqlite", "postgresql"] = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="callhook-db")
        try:
            self._conn: Any = self._thread.submit(self._open).result()
        except sqlite3.Error as exc:  # (a full disk at start: serve says so in one line)
            self._thread.shutdown()
            raise OSError(f"the state database {path} cannot be opened: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        # Processes that start together on one data directory (serve --workers) take
        # turns here: switching to WAL and creating the schema want the whole file, and
        # SQLite answers "database is locked" at once rather than wait for that.
        lock = os.open(
            self.path.with_name(self.path.name + ".open-lock"),
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
            # A state file from before these columns: added (their rows have none).
            for table, column in _ADDED:
                columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
            conn.executescript(_ADDED_INDEXES)
        finally:
            os.close(lock)  # (and its lock with it)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def passing(self, exc: BaseException) -> bool:
        """Whether a refusal may pass, so the work is worth holding and trying again (a full
        disk gets space, a lock is released, a server comes back); a bug never passes."""
        if not isinstance(exc, sqlite3.OperationalError):
            return False
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:  # no code: judged by the message SQLite gives a full disk
            return "full" in str(exc) or "disk I/O" in str(exc)
        return code & 0xFF in _PASSING  # extended codes (SQLITE_IOERR_WRITE...) by their primary

    def _transaction(self, fn: Callable[[Connection], T]) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # also after a failed COMMIT, or every later BEGIN fails
                conn.execute("ROLLBACK")
            raise
        return value

    def submit(self, fn: Callable[[Connection], T]) -> Future[T]:
        """Run ``fn(connection)`` in a transaction on the database thread."""
        return self._thread.submit(self._transaction, fn)

    def transaction(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a transaction now: only on the database thread (see :meth:`on_thread`)."""
        return self._transaction(fn)

    def on_thread(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn()`` on the database thread, outside any transaction (it may open several)."""
        return self._thread.submit(fn)

    def call(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a transaction and wait for it (start-up, tests, other threads)."""
        return self.submit(fn).result()

    async def run(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a transaction without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(fn))

    def close(self) -> None:
        self._thread.submit(self._conn.close).result()
        self._thread.shutdown()


class Membership(Protocol):
    """This process among the others sharing its state: whose recordings are whose, and
    who delivers notifications. :class:`Ownership` (lock files, the data directory of one
    machine) and :class:`callhook.store.postgres.Nodes` (a PostgreSQL table, any machine)."""

    #: Marks the recordings this process makes.
    token: str

    def others(self) -> set[str]:
        """The tokens of the other processes known (alive or gone)."""
        ...

    def gone(self, owner: str) -> contextlib.AbstractContextManager[bool]:
        """Whether ``owner``'s process is gone for good, held so while the ``with`` body
        takes over its things; then it is forgotten."""
        ...

    def deliver_notifications(self) -> bool:
        """Whether this process delivers notifications now."""
        ...

    def beat(self) -> None:
        """Say this process is alive (called every few seconds)."""
        ...

    def close(self) -> None: ...


class Ownership:
    """This process's claim in a data directory shared with others (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / "locks"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(8)
        # Locked before it has its name, so no other process ever sees it unlocked
        # (and takes this process for a dead one).
        temp = self.directory / f".{self.token}.tmp"
        self._own = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._own, fcntl.LOCK_EX)
        temp.rename(self._path(self.token))
        self._notifier: int | None = None

    def _path(self, token: str) -> Path:
        return self.directory / f"{token}.lock"

    def claim(self, token: str) -> int | None:
        """Lock ``token``'s file: an fd if its process is gone (or never was), else None."""
        fd = os.open(self._path(token), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def release(self, token: str, fd: int) -> None:
        """Done with a gone process's things: its lock file goes."""
        with contextlib.suppress(FileNotFoundError):
            self._path(token).unlink()
        os.close(fd)

    def others(self) -> set[str]:
        """The tokens of the other processes that have (or had) a lock file here."""
        return {p.stem for p in self.directory.glob("*.lock")} - {self.token}

    @contextlib.contextmanager
    def gone(self, owner: str) -> Iterator[bool]:
        """True, holding its lock, if ``owner``'s process is gone; its lock file goes after."""
        fd = self.claim(owner)
        if fd is None:
            yield False
            return
        try:
            yield True
        finally:
            self.release(owner, fd)

    def beat(self) -> None:
        """Nothing to say: the kernel holds this process's lock for as long as it lives."""

    def deliver_notifications(self) -> bool:
        """Whether this process delivers notifications (it holds ``notifier.lock``)."""
        if self._notifier is None:
            fd = os.open(
                self.directory.parent / "notifier.lock",
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                0o600,
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            self._notifier = fd
        return True

    def close(self) -> None:
        if self._notifier is not None:
            os.close(self._notifier)
            self._notifier = None
        self.release(self.token, self._own)
