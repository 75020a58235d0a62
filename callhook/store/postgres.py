"""callhook's state in a PostgreSQL server shared by several nodes (``[database] url``).

Theory of operation. Every node (a ``serve``, a worker of ``serve --workers``,
on this machine or another) opens the same database and the same data
directory on a shared filesystem (the media file store, the installation
secret). What the kernel's ``flock`` did on one machine, the database does
across machines (docs/scaling.md):

* **Who is alive** is the ``nodes`` table: each node's row says until when it
  is alive (:class:`Nodes`); it pushes that time on every few seconds
  (:meth:`Nodes.beat`), on a connection of its own, so that no slow statement
  of the node's other work delays it. Times are the *server's* clock, so
  nodes whose clocks disagree still agree on who is gone. A node whose row
  ran out (it died, its machine stopped, it lost the network) is gone for
  good: the node that finds so deletes the row in the same transaction (a
  late beat of that node then finds no row and says so), and finishes its
  recordings in progress and announces them once (the journal's rows are
  taken ``FOR UPDATE SKIP LOCKED``, so two survivors never both do it). A
  node judges others only once it has itself been beating for a whole
  ``node_timeout``: after an outage of the server every row has run out, and
  the first node back must not take the others for gone.
* **Notifications** are delivered by every node, each one leasing the rows it
  sends (:class:`~callhook.store.outbox.Outbox`): a row lock, not a process
  lock. A node that dies mid-delivery leaves a lease that runs out, or that a
  survivor clears when it finds the node gone.
* **Who registers the trunks** is the ``leaders`` table: one row per role
  (``trunks``) names the node that holds it. A candidate takes the row on its
  beat when the row is free or its holder's ``nodes`` row ran out
  (:meth:`Nodes.stand`), so one node of the installation registers each trunk
  (a provider keeps one binding), and another takes over when it is gone. A
  node gives the role up only when a beat shows that another holds it, or when
  it stops (:meth:`Nodes.resign`): cut off from the server it keeps registering,
  since two bindings for a while are better than none.

Statements run on the database thread of :class:`~callhook.store.database.Database`,
as with SQLite, on one connection that is opened again after it broke (a server
restart): work refused meanwhile is held and retried by its owner (the journal).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg

from callhook.config.values import ConfigError
from callhook.store.database import Connection, Cursor, Database

logger = logging.getLogger("callhook.store")

T = TypeVar("T")

#: The server's clock in Unix seconds: one clock for every node.
NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"

#: Taken while the schema is made: nodes that start together would otherwise race in
#: ``CREATE TABLE IF NOT EXISTS`` (PostgreSQL checks "exists" before it locks).
_SCHEMA_LOCK = 0x63616C6C686F6F6B  # "callhook"

SCHEMA = """
CREATE TABLE IF NOT EXISTS recordings (
    app TEXT NOT NULL,
    filename TEXT NOT NULL,
    started DOUBLE PRECISION NOT NULL,
    encrypted INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    notify_url TEXT,
    notify_method TEXT,
    body TEXT NOT NULL,
    result TEXT,
    length BIGINT,
    owner TEXT,
    traceparent TEXT,
    PRIMARY KEY (app, filename)
);
ALTER TABLE recordings ADD COLUMN IF NOT EXISTS traceparent TEXT;
CREATE TABLE IF NOT EXISTS notifications (
    id BIGSERIAL PRIMARY KEY,
    app TEXT NOT NULL,
    url TEXT NOT NULL,
    method TEXT NOT NULL,
    body TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    due DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    abandoned INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until DOUBLE PRECISION,
    traceparent TEXT,
    stream TEXT
);
ALTER TABLE notifications ADD COLUMN IF NOT EXISTS traceparent TEXT;
ALTER TABLE notifications ADD COLUMN IF NOT EXISTS stream TEXT;
CREATE INDEX IF NOT EXISTS notifications_stream ON notifications (stream, id);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications (abandoned, due);
CREATE INDEX IF NOT EXISTS notifications_app ON notifications (app, abandoned, due);
CREATE TABLE IF NOT EXISTS bindings (
    id BIGSERIAL PRIMARY KEY,
    "user" TEXT NOT NULL,
    contact TEXT NOT NULL,
    call_id TEXT NOT NULL,
    cseq BIGINT NOT NULL,
    expires DOUBLE PRECISION NOT NULL,
    source_transport TEXT NOT NULL,
    source_host TEXT NOT NULL,
    source_port INTEGER NOT NULL,
    target_transport TEXT NOT NULL,
    target_host TEXT NOT NULL,
    target_port INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS bindings_user ON bindings ("user");
CREATE TABLE IF NOT EXISTS nodes (
    token TEXT PRIMARY KEY,
    alive_until DOUBLE PRECISION NOT NULL,
    api TEXT
);
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS api TEXT;
CREATE TABLE IF NOT EXISTS call_records (
    id BIGSERIAL PRIMARY KEY,
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
    started DOUBLE PRECISION NOT NULL,
    answered DOUBLE PRECISION,
    ended DOUBLE PRECISION NOT NULL,
    seconds DOUBLE PRECISION NOT NULL,
    cause TEXT NOT NULL,
    raw_cause TEXT NOT NULL,
    recordings INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    pages_failed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS call_records_started ON call_records (started);
CREATE INDEX IF NOT EXISTS call_records_app ON call_records (app, id);
CREATE TABLE IF NOT EXISTS deletions (
    id BIGSERIAL PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    app TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS leaders (
    role TEXT PRIMARY KEY,
    token TEXT NOT NULL
);
"""

#: A connection between transactions (autocommit, nothing under way).
_IDLE = psycopg.pq.TransactionStatus.IDLE

#: The role of the node that registers the trunks (a row of ``leaders``).
TRUNKS_ROLE = "trunks"


@functools.lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    """SQLite's ``?`` as psycopg's ``%s`` (callhook's SQL has no ``?`` or ``%`` of its own)."""
    return sql.replace("?", "%s")


class _Connection:
    """A psycopg connection seen as a :class:`~callhook.store.database.Connection`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        return self._conn.execute(_placeholders(sql), tuple(parameters))

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor:
        cursor = self._conn.cursor()
        cursor.executemany(_placeholders(sql), [tuple(p) for p in parameters])
        return cursor


class PostgresDatabase(Database):
    """The state database in PostgreSQL, used from its own thread."""

    dialect = "postgresql"

    def __init__(self, url: str, connect_timeout: float = 10.0) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="callhook-db")
        self._conn = self._thread.submit(self._open_server).result()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.url,
            autocommit=True,  # transactions are explicit (:meth:`_transaction`)
            connect_timeout=max(1, round(self.connect_timeout)),
            application_name="callhook",
            # A server or network that vanished without a word is noticed in ~25 s
            # rather than at the kernel's default of two hours.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )

    def _open_server(self) -> psycopg.Connection[Any]:
        conn = self._connect()
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(SCHEMA)
        return conn

    def passing(self, exc: BaseException) -> bool:
        """A lost connection, a server shutting down or out of disk, a deadlock: they pass
        (psycopg's OperationalError); a bug in a statement never does."""
        return isinstance(exc, psycopg.OperationalError)

    def _reconnect(self) -> psycopg.Connection[Any]:
        """A new connection in place of one that broke (failing, OperationalError: the
        caller holds its work, as :meth:`passing` says)."""
        with contextlib.suppress(Exception):
            self._conn.close()
        conn = self._conn = self._connect()
        logger.warning("the state database is connected again")
        return conn

    def _transaction(self, fn: Callable[[Connection], T]) -> T:
        conn: psycopg.Connection[Any] = self._conn
        if conn.closed or conn.broken or conn.info.transaction_status != _IDLE:
            # The server restarted, or the network dropped; or the connection was left
            # mid-command: the server ended it while a statement ran, and the rollback
            # found libpq still waiting for that statement's answer ("another command
            # is already in progress"), which psycopg does not count as broken.
            conn = self._reconnect()
        began = False

        def run(c: Connection) -> T:
            nonlocal began
            began = True
            return fn(c)

        try:
            with conn.transaction():
                return run(_Connection(conn))
        except psycopg.OperationalError:
            if began:
                raise
            # BEGIN failed: the server had ended the connection while it was idle (a
            # restart), whether or not libpq has seen the socket close yet. Nothing ran:
            # once more, on a new connection.
            conn = self._reconnect()
            with conn.transaction():
                return fn(_Connection(conn))

    def close(self) -> None:
        self._thread.submit(self._conn.close).result()
        self._thread.shutdown()


def connect(url: str) -> PostgresDatabase:
    """The database at ``url``, its schema made; a server that cannot be reached or a
    login refused is a :class:`ConfigError` naming it (without its password)."""
    try:
        return PostgresDatabase(url)
    except psycopg.Error as exc:
        parts = urllib.parse.urlsplit(url)
        where = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"[database] url {where}{parts.path}: {cause}") from None


class Nodes:
    """This node among the others sharing a PostgreSQL state database (see the module
    docstring): a :class:`~callhook.store.database.Membership`."""

    def __init__(
        self,
        db: PostgresDatabase,
        timeout: float,
        *,
        owns_db: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: The connection the heartbeat uses (serve gives it one of its own: ``owns_db``,
        #: closed with this).
        self.db = db
        self.owns_db = owns_db
        #: Seconds a node may stay silent before the others take it for gone.
        self.timeout = timeout
        self.token = secrets.token_hex(8)
        self.clock = clock
        #: Where the others ask this node about its live calls (:meth:`advertise`).
        self.api: str | None = None
        db.call(self._insert)
        # Since when every beat went through (None: the last one failed).
        self._steady_since: float | None = clock()
        #: Whether this node stands for the trunks' registration (:meth:`stand`).
        self.candidate = False
        #: Whether it holds it now (decided at each beat).
        self.leading = False

    def _insert(self, conn: Connection) -> None:
        # (Again after being taken for gone: with its address, or it is never asked.)
        conn.execute(
            f"INSERT INTO nodes (token, alive_until, api) VALUES (?, {NOW} + ?, ?)"
            " ON CONFLICT (token) DO UPDATE SET alive_until = excluded.alive_until,"
            " api = excluded.api",
            (self.token, self.timeout, self.api),
        )

    def beat(self) -> None:
        """Push this node's time on (every :attr:`timeout` / 3 seconds, from serve)."""

        def work(conn: Connection) -> bool:
            row = conn.execute(
                f"UPDATE nodes SET alive_until = {NOW} + ? WHERE token = ? RETURNING token",
                (self.timeout, self.token),
            ).fetchone()
            if row is None:
                self._insert(conn)
            return row is not None

        try:
            found = self.db.call(work)
        except Exception:
            self._steady_since = None  # (others are not judged until it is steady again)
            raise
        if self._steady_since is None:
            self._steady_since = self.clock()
        if self.candidate:
            self.leading = self.db.call(self._elect)
        if not found:
            logger.error(
                "this node was silent for more than %.0f s and was taken for gone: its"
                " recordings in progress were finished by another node ([database] node_timeout)",
                self.timeout,
            )

    def stand(self) -> bool:
        """Stand for registering the installation's trunks: from now on each beat takes
        the role if it is free or its holder is gone. Whether this node holds it now."""
        self.candidate = True
        self.leading = self.db.call(self._elect)
        return self.leading

    def resign(self) -> None:
        """Give the role up now (a clean stop begins): the next candidate's beat takes it."""
        self.candidate = self.leading = False
        self.db.call(
            lambda conn: conn.execute("DELETE FROM leaders WHERE token = ?", (self.token,))
        )

    def _elect(self, conn: Connection) -> bool:
        if not self.candidate:
            return False  # resigned since this beat began (the statements share a thread)
        # One statement: two candidates at once find the row locked in turn, and the
        # second sees the first's live row (PostgreSQL's ON CONFLICT ... WHERE).
        conn.execute(
            "INSERT INTO leaders (role, token) VALUES (?, ?) ON CONFLICT (role) DO UPDATE"
            " SET token = excluded.token WHERE leaders.token = excluded.token OR NOT EXISTS"
            " (SELECT 1 FROM nodes WHERE nodes.token = leaders.token"
            f" AND nodes.alive_until >= {NOW})",
            (TRUNKS_ROLE, self.token),
        )
        row = conn.execute("SELECT token FROM leaders WHERE role = ?", (TRUNKS_ROLE,)).fetchone()
        return row is not None and row[0] == self.token

    def advertise(self, api: str) -> None:
        """Where the other nodes ask this one about its live calls (its private API's
        base URL: ``callhook.cluster.siblings``)."""
        self.api = api
        self.db.call(
            lambda conn: conn.execute("UPDATE nodes SET api = ? WHERE token = ?", (api, self.token))
        )

    def peers(self) -> list[tuple[str, str]]:
        """The other nodes alive now: (their private API base URL, their token), in a
        stable order."""
        rows = self.db.call(
            lambda conn: conn.execute(
                "SELECT api, token FROM nodes WHERE token <> ? AND api IS NOT NULL"
                f" AND alive_until >= {NOW} ORDER BY api",
                (self.token,),
            ).fetchall()
        )
        return [(api, token) for api, token in rows]

    def others(self) -> set[str]:
        """The tokens in the ``nodes`` table, alive or not, but this node's."""
        rows = self.db.call(lambda conn: conn.execute("SELECT token FROM nodes").fetchall())
        return {token for (token,) in rows} - {self.token}

    def steady(self) -> bool:
        """Whether this node has been beating for a whole :attr:`timeout` (only then does
        it judge others: see the module docstring)."""
        since = self._steady_since
        return since is not None and self.clock() - since >= self.timeout

    @contextlib.contextmanager
    def gone(self, owner: str) -> Iterator[bool]:
        """True if ``owner`` has no row or its row ran out, decided in one transaction
        that deletes the row and frees the leases it held on notifications (its late
        beat, if it was only slow, then finds no row). False while this node is not
        :meth:`steady`."""

        def judge(conn: Connection) -> bool:
            row = conn.execute(
                f"SELECT alive_until >= {NOW} FROM nodes WHERE token = ? FOR UPDATE", (owner,)
            ).fetchone()
            if row is not None and row[0]:
                return False
            conn.execute("DELETE FROM nodes WHERE token = ?", (owner,))
            conn.execute(
                "UPDATE notifications SET lease_owner = NULL, lease_until = NULL"
                " WHERE lease_owner = ?",
                (owner,),
            )
            return True

        yield self.steady() and self.db.call(judge)

    def deliver_notifications(self) -> bool:
        """Always: every node delivers, each leasing the rows it sends."""
        return True

    def close(self) -> None:
        """A clean stop: this node's row goes, and its leases with it."""

        def leave(conn: Connection) -> None:
            conn.execute("DELETE FROM nodes WHERE token = ?", (self.token,))
            # (The next candidate's beat takes the role at once.)
            conn.execute("DELETE FROM leaders WHERE token = ?", (self.token,))
            conn.execute(
                "UPDATE notifications SET lease_owner = NULL, lease_until = NULL"
                " WHERE lease_owner = ?",
                (self.token,),
            )

        with contextlib.suppress(Exception):  # a server that is gone: the row runs out
            self.db.call(leave)
        if self.owns_db:
            self.db.close()
