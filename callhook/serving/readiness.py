"""``GET /healthz`` (the process answers) and ``GET /readyz`` (calls can be taken).

For a load balancer, systemd or an orchestrator's probes; no key, and nothing in the
answers but states. ``/healthz`` is 200 as long as the web server answers.
``/readyz`` is 200 when every check is ``ok``, else 503, with each check's state:

* ``sip``: this process takes calls (``shutting down`` once SIGTERM came: draining);
* ``speech``: the speech models asked to load at start (``[speech] preload``) are in;
* ``database``: a statement on the state database answers within 2 s;
* ``front`` (a worker of ``serve --workers``): Kamailio, in front, answers an OPTIONS
  at the SIP address (the answer kept for 2 s);
* ``workers`` (``serve --workers`` on one machine): each other worker's own readiness,
  asked on their private ports (cluster/siblings.py); one that does not answer is not
  ready. Nodes on several machines each answer for themselves.

``serve`` prints its "serving" banner only once it would answer 200 here.

The routes need no key, so what costs something is shared: requests that come while the
database or the other workers are being asked wait for that answer (a flood of
``/readyz`` is one query and one round of requests to the workers at a time, not one per
request). An answer is not kept once given: a worker killed and started again within a
tenth of a second is seen. ``sip`` and ``speech`` are read at each request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from aiohttp import web

from callhook.cluster.siblings import HEADER, Siblings
from callhook.serving.sipprobe import answers_options
from callhook.sip.transport import Target

#: How long the front's answer to an OPTIONS is taken as it is.
FRONT_SECONDS = 2.0
#: How long a check may take.
CHECK_SECONDS = 2.0
OK = "ok"

T = TypeVar("T")


class Shared(Generic[T]):
    """What ``ask`` answers, asked once for all the callers that come while it is being
    asked; the next caller after the answer asks again."""

    def __init__(self, ask: Callable[[], Awaitable[T]]) -> None:
        self._ask = ask
        self._asking: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._answer())
        return await asyncio.shield(self._asking)  # (one caller gone: not the others)

    async def _answer(self) -> T:
        try:
            return await self._ask()
        finally:
            self._asking = None


class Readiness:
    """The two routes over what this process can tell (see the module docstring)."""

    def __init__(
        self,
        *,
        accepting: Callable[[], bool],
        speech_loading: Callable[[], bool],
        database: Callable[[], Awaitable[object]],
        front: Target | None = None,
        siblings: Siblings | None = None,
    ) -> None:
        self.accepting = accepting
        self.speech_loading = speech_loading
        self.database = database
        self.front = front
        self.siblings = siblings
        self._front_seen: tuple[float, bool] = (float("-inf"), False)
        self._database_state = Shared(self._database)
        self._front_probe = Shared(self._probe_front)
        self._workers = Shared(self._ask_workers)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/healthz", self.healthz, allow_head=True),
            web.get("/readyz", self.readyz, allow_head=True),
        ]

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(self, request: web.Request) -> web.Response:
        checks = await self.checks()
        answer: dict[str, Any] = {"checks": checks}
        ready = all(state == OK for state in checks.values())
        if self.siblings is not None and HEADER not in request.headers:
            # (A sibling's question is about the one asked alone.)
            workers = {str(self.siblings.label): "ready" if ready else "not ready"}
            workers |= await self._workers.get()
            answer["workers"] = workers
            ready = all(state == "ready" for state in workers.values())
        answer["ready"] = ready
        return web.json_response(answer, status=200 if ready else 503)

    async def _ask_workers(self) -> dict[str, str]:
        """The other workers' states, by label."""
        assert self.siblings is not None
        workers: dict[str, str] = {}
        for label, status, body in await self.siblings.ask_all("/readyz"):
            if status is None:
                workers[str(label)] = "not answering"
            elif status == 200:
                workers[str(label)] = "ready"
            else:
                states = body.get("checks", {}) if isinstance(body, dict) else {}
                why = [f"{k}: {v}" for k, v in states.items() if v != OK]
                workers[str(label)] = "not ready: " + ("; ".join(why) or str(status))
        return workers

    async def checks(self) -> dict[str, str]:
        """Each check of this process alone: ``ok``, or why not."""
        checks = {
            "sip": OK if self.accepting() else "shutting down",
            "speech": "loading" if self.speech_loading() else OK,
            "database": await self._database_state.get(),
        }
        if self.front is not None:
            checks["front"] = OK if await self._front_answers() else "no answer to OPTIONS"
        return checks

    async def _database(self) -> str:
        try:
            async with asyncio.timeout(CHECK_SECONDS):
                await self.database()
        except TimeoutError:
            return f"no answer in {CHECK_SECONDS:g} s"
        except Exception as exc:  # the database's own error, whatever its driver
            return f"unreachable: {type(exc).__name__}"
        return OK

    async def _front_answers(self) -> bool:
        when, answered = self._front_seen
        if time.monotonic() - when < FRONT_SECONDS:
            return answered
        return await self._front_probe.get()  # (a flood waits on one probe, one thread)

    async def _probe_front(self) -> bool:
        assert self.front is not None
        answered = await asyncio.to_thread(answers_options, self.front, CHECK_SECONDS)
        self._front_seen = (time.monotonic(), answered)
        return answered
