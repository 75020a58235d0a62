"""The caller hangs up while callhook waits for a slow page.

The scripted leg freezes media time during page fetches, so this uses a leg
whose far end hangs up on a real-time signal instead: the runner must stop
waiting for the page at once (not after the page's 30 s), request the final
page with ``hung_up``, and say in the log that it abandoned the page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from callhook.actions.machine import ActionContext
from callhook.calls.calllog import CallLog
from callhook.calls.runner import CallRunner
from callhook.config.settings import AppConfig
from callhook.devtools.harness import AppServer, Reply, VirtualClock
from callhook.edge.pages import HttpPages
from callhook.events import CallEnded, MediaCommand, MediaEvent
from callhook.ports import CallInfo


class HangsUpOnSignal:
    """A leg with no media events whose caller hangs up when ``hangup`` is set."""

    def __init__(self) -> None:
        self.info = CallInfo("c1")
        self.hangup = asyncio.Event()
        self.answered = False

    def send(self, commands: Sequence[MediaCommand]) -> None:
        pass

    def now(self) -> float:
        return 0.0

    def media_time(self) -> float:
        return 0.0

    async def next_event(self, deadline: float | None) -> tuple[MediaEvent | None, float]:
        await self.hangup.wait()
        return CallEnded("hung_up", "BYE"), 0.0

    def take_pending(self) -> list[MediaEvent]:
        return []

    async def answer(self) -> None:
        self.answered = True

    async def hang_up(self) -> str:
        raise AssertionError("callhook must not hang up a call the caller already ended")

    def recorded_seconds(self, filename: str) -> float | None:
        return None

    async def wait_ended(self) -> CallEnded:
        await self.hangup.wait()
        return CallEnded("hung_up", "BYE")


async def test_hangup_while_a_page_is_fetched_abandons_it(app: AppServer) -> None:
    slow_page_started = asyncio.Event()
    release = asyncio.Event()  # the page answers only when the test is over

    async def slow(received: object) -> Reply:
        slow_page_started.set()
        await release.wait()
        return Reply({"actions": [{"hang_up": {}}]})

    app.page("/start", slow)
    app.page("/final", None)
    config = AppConfig("t", app.url("/start"), app.secret, final_page=app.url("/final"))
    leg = HangsUpOnSignal()
    clock = VirtualClock()
    pages = HttpPages(timeout=60)
    log = CallLog("i1", clock)
    runner = CallRunner(config, leg, pages, clock, log, log_filename="l", ctx=ActionContext())
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(slow_page_started.wait(), 5)
    leg.hangup.set()
    summary = await asyncio.wait_for(task, 5)  # the page has not answered
    assert not release.is_set()
    release.set()
    await pages.close()

    assert summary.cause == "hung_up"
    assert summary.raw_cause == "BYE"
    kinds = [line.split()[2] for line in log.lines]
    # The hang-up, then the page it left unanswered (the log's order of events).
    assert kinds.index("caller_hung_up") < kinds.index("page_abandoned"), log.lines
    (final,) = app.bodies("/final")
    assert final["this_call"]["call_cause"] == "hung_up"
    assert final["this_call"]["call_state"] == "idle"
