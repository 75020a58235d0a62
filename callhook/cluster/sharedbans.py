"""Failed authentications and the bans they earn, shared by the workers of ``serve
--workers`` and by nodes sharing PostgreSQL.

Each process has a guard of its own (``sip/guard.py``), and the kernel spreads the REST
API's connections over the workers (SO_REUSEPORT); a phone's INVITEs go to whichever
worker challenged them. Counted apart, a guesser would get five tries on each worker,
and a source banned by one would still be served by the others. So a process that
counts a failure tells the others on their private port, and they count it too
(``ban=False``: a failure seen elsewhere never bans here). The process whose own failure
reaches the limit bans the source, logs it, and tells the others, which impose the same
ban without logging it: one ban for the installation, one log line, and ``/api/bans``
lists it on each process it holds on. Two failures on two processes at the same instant
may let one more guess through before the ban, never fewer. ``DELETE
/api/bans/{address}`` lifts it everywhere (``siblings.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from urllib.parse import urlencode

from aiohttp import web

from callhook.cluster.siblings import FAILURE_PATH, Siblings
from callhook.sip.guard import Guard

logger = logging.getLogger("callhook.security")


class SharedBans:
    """This process's failed authentications told to its siblings, and theirs counted here."""

    def __init__(self, siblings: Siblings, guard: Guard, now: Callable[[], float]) -> None:
        self.siblings = siblings
        self.guard = guard
        #: The guard's clock (the event loop's).
        self.now = now
        self._telling: set[asyncio.Task[None]] = set()

    def counted(self, address: str, what: str, banned: str | None) -> asyncio.Task[None]:
        """A failure from ``address`` was counted here (``banned``: the reason of the ban
        it earned): the siblings count it too, and impose the ban. Done once they all
        answered: the REST API answers the guesser only then, so that a guess that comes
        next, to another worker, is counted there with this one."""
        query = {"address": address, "what": what}
        if banned is not None:
            query["banned"] = banned
        task = asyncio.get_running_loop().create_task(
            self.siblings.tell(f"{FAILURE_PATH}?{urlencode(query)}")
        )
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)
        return task

    def close(self) -> None:
        """Shutdown: what is still being told is not waited for."""
        for task in self._telling:
            task.cancel()

    def routes(self) -> list[web.RouteDef]:
        return [web.get(FAILURE_PATH, self.failure_elsewhere, allow_head=False)]

    async def failure_elsewhere(self, request: web.Request) -> web.Response:
        """A sibling counted a failure (and perhaps banned its source): the same here."""
        self.siblings.require_sibling(request)
        address, what = request.query.get("address"), request.query.get("what")
        if not address or not what:
            raise web.HTTPBadRequest()
        now = self.now()
        self.guard.auth_failed(address, now, what, ban=False)
        reason = request.query.get("banned")
        if reason:
            self.guard.impose(address, now, reason)
        return web.json_response({"counted": True})
