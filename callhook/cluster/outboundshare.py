"""Each application's outbound calls, reported between the workers of ``serve
--workers`` and the nodes sharing PostgreSQL, so that ``[outbound] max_calls_per_app`` is
the installation's limit, not each process's.

A process tells the others its whole count (``{"sales": 3}``) on their private port
each time it changes, and again every :data:`REFRESH` seconds while it has any; each
adds the last report of every other process to its own when it admits a call
(:class:`~callhook.dialplan.outbound.OutboundCalls`). A report stops counting after
:data:`~callhook.dialplan.outbound.REPORT_HOLDS` seconds, so the calls of a process that died
stop counting with it. ``POST /api/calls`` and the REST API answer only once the others
have heard of the call they admitted, so a request that comes next, to another process,
counts it; calls admitted at the same instant on two processes may pass the limit by one
each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from urllib.parse import urlencode

from aiohttp import web

from callhook.cluster.siblings import OUTBOUND_PATH, Siblings
from callhook.dialplan.outbound import REPORT_HOLDS, OutboundCalls

logger = logging.getLogger("callhook.workers")

#: Seconds between the reports of a process that has outbound calls.
REFRESH = REPORT_HOLDS / 3


class OutboundShare:
    """This process's outbound calls told to its siblings; theirs heard here."""

    def __init__(self, siblings: Siblings, calls: OutboundCalls) -> None:
        self.siblings = siblings
        self.calls = calls
        calls.on_change = self._tell
        self._telling: asyncio.Task[None] | None = None
        self._number = 0  # each report's, in order (they may arrive out of it)
        self._run = secrets.token_hex(4)  # this process's run: a restart numbers anew
        self._tasks: set[asyncio.Task[None]] = set()
        self._refreshing: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Report again every :data:`REFRESH` seconds while there is anything to report."""
        self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def told(self) -> None:
        """Done once the others heard of this process's last change."""
        if self._telling is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._telling)

    def close(self) -> None:
        """Shutdown: no more reports (the calls' ends meanwhile are not told: the others
        stop counting this process's reports when they run out)."""
        self.calls.on_change = None
        if self._refreshing is not None:
            self._refreshing.cancel()
        for task in self._tasks:
            task.cancel()

    def routes(self) -> list[web.RouteDef]:
        return [web.get(OUTBOUND_PATH, self.heard, allow_head=False)]

    async def heard(self, request: web.Request) -> web.Response:
        """A sibling's report: its outbound calls, by application."""
        self.siblings.require_sibling(request)
        try:
            counts = json.loads(request.query["counts"])
            process = request.query["from"]
            number = int(request.query["n"])
            run = request.query["run"]
        except (KeyError, ValueError):
            raise web.HTTPBadRequest() from None
        if not isinstance(counts, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v > 0 for k, v in counts.items()
        ):
            raise web.HTTPBadRequest()
        self.calls.heard(process, counts, run, number)
        return web.json_response({"heard": True})

    def _tell(self, counts: dict[str, int]) -> None:
        self._number += 1
        query = urlencode(
            {
                "from": str(self.siblings.label),
                "run": self._run,
                "n": self._number,
                "counts": json.dumps(counts),
            }
        )
        task = asyncio.get_running_loop().create_task(
            self.siblings.tell(f"{OUTBOUND_PATH}?{query}")
        )
        self._telling = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(REFRESH)
            if self.calls.own:
                self._tell(dict(self.calls.own))
