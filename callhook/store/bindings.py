"""The registered phones of callhook's users, kept in the state database so they survive a restart.

The registrar (``callhook/sip/registrar.py``) holds the bindings in memory on
the agent's clock; the SIP service stores them here with their expiry as wall
clock time (Unix seconds), since the agent's clock means nothing to another
process. Each change replaces the user's rows at once (one transaction, on the
database thread); loading drops the rows that expired meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from callhook.store.database import Connection, Database

logger = logging.getLogger("callhook.store")


@dataclass(frozen=True)
class StoredBinding:
    """One registered phone as stored: ``expires`` is wall clock time (Unix seconds); the
    source is where its REGISTER came from, the target where requests for it go."""

    user: str
    contact: str
    call_id: str
    cseq: int
    expires: float
    source: tuple[str, str, int]  # (transport, host, port)
    target: tuple[str, str, int]


_COLUMNS = (  # "user" quoted: a word of PostgreSQL's own
    '"user", contact, call_id, cseq, expires, source_transport, source_host, source_port, '
    "target_transport, target_host, target_port"
)


class Bindings:
    """The ``bindings`` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def replace(self, user: str, bindings: list[StoredBinding]) -> Future[None]:
        """Make ``bindings`` all that is stored for ``user`` (queued on the database thread)."""
        rows = [
            (b.user, b.contact, b.call_id, b.cseq, b.expires, *b.source, *b.target)
            for b in bindings
        ]

        def write(conn: Connection) -> None:
            conn.execute('DELETE FROM bindings WHERE "user" = ?', (user,))
            conn.executemany(
                f"INSERT INTO bindings ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

        future = self.db.submit(write)
        future.add_done_callback(_log_failure)
        return future

    def load(self, wall_now: float) -> list[StoredBinding]:
        """Every binding that has not expired at ``wall_now``; expired ones are deleted."""
        return _bindings(self.db.call(self._reader(wall_now)))

    async def fetch(self, wall_now: float) -> list[StoredBinding]:
        """:meth:`load`, awaited (on the database thread, after the writes queued before)."""
        return _bindings(await self.db.run(self._reader(wall_now)))

    def _reader(self, wall_now: float) -> Callable[[Connection], list[tuple[object, ...]]]:
        # In the order they were stored (PostgreSQL's table numbers its rows itself).
        order = "id" if self.db.dialect == "postgresql" else "rowid"

        def read(conn: Connection) -> list[tuple[object, ...]]:
            conn.execute("DELETE FROM bindings WHERE expires <= ?", (wall_now,))
            return list(conn.execute(f"SELECT {_COLUMNS} FROM bindings ORDER BY {order}"))

        return read


def _bindings(rows: list[tuple[object, ...]]) -> list[StoredBinding]:
    """The rows of the ``bindings`` table as :class:`StoredBinding`."""
    out = []
    for row in rows:
        user, contact, call_id, cseq, expires, st, sh, sp, tt, th, tp = row
        out.append(
            StoredBinding(
                str(user),
                str(contact),
                str(call_id),
                int(str(cseq)),
                float(str(expires)),
                (str(st), str(sh), int(str(sp))),
                (str(tt), str(th), int(str(tp))),
            )
        )
    return out


def _log_failure(future: Future[None]) -> None:
    exc = future.exception()
    if exc is not None:
        # Only the copy on disk is behind: the registrar goes on with the bindings in
        # memory, and the phone's next re-REGISTER writes them again.
        logger.error("the registered phones could not be stored: %s", exc)
