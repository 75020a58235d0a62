"""PageExchange.fetch: a page's answer raced against the call's end, in the runner's task.

The answer must reach the runner in the turn of the event loop that brought it (a loaded
loop's turn is as long as its backlog: each one more delays the caller), the call's end
must abandon the request at once, and a cancellation of the runner from elsewhere (the
server shutting down) must stay a cancellation.
"""

from __future__ import annotations

import asyncio

import pytest

from callhook.calls.calllog import CallLog
from callhook.calls.pageexchange import PageExchange
from callhook.devtools.harness import VirtualClock
from callhook.events import CallEnded


class Pages:
    """Answers every request with ``answer``, after ``gate`` is set if there is one."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.gate = gate
        self.cancelled = 0

    async def fetch(
        self, url: str, method: str, body: bytes, secret: str, *, answer: bool = True
    ) -> bytes:
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return b'{"actions": []}'


class Call:
    def __init__(self) -> None:
        self.ended: asyncio.Future[CallEnded] = asyncio.get_running_loop().create_future()

    async def wait_ended(self) -> CallEnded:
        return await asyncio.shield(self.ended)


def exchange(pages: Pages, call: Call) -> tuple[PageExchange, list[float]]:
    seconds: list[float] = []
    log = CallLog("i1", VirtualClock())
    return PageExchange(pages, "s", log, call.wait_ended, requested=[], seconds=seconds), seconds


def requesting(pages: Pages, call: Call) -> tuple[asyncio.Future[bytes | CallEnded], list[float]]:
    """A request for the next page on ``call`` through ``pages``, started (not yet run)."""
    pages_exchange, seconds = exchange(pages, call)
    request = asyncio.ensure_future(pages_exchange.fetch("http://app/next", "POST", {}, "next"))
    return request, seconds


async def test_an_answer_at_hand_takes_no_turn_of_the_loop() -> None:
    turns: list[int] = []
    asyncio.get_running_loop().call_soon(turns.append, 1)
    pages_exchange, seconds = exchange(Pages(), Call())
    answer = await pages_exchange.fetch("http://app/start", "POST", {}, "first page")
    assert answer == b'{"actions": []}'
    assert turns == []  # (a task of its own for the request, and asyncio.wait, took two)
    assert len(seconds) == 1


async def test_an_answer_comes_back_in_the_turn_it_arrives() -> None:
    gate = asyncio.Event()
    request, _ = requesting(Pages(gate), Call())
    for _ in range(3):
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    # The answer's turn: the gate opens, then the request's task runs; nothing scheduled
    # after that may run before the exchange has returned.
    loop.call_soon(gate.set)
    later: list[bool] = []
    loop.call_soon(lambda: loop.call_soon(lambda: later.append(request.done())))
    await request
    assert later == [True]


async def test_the_calls_end_abandons_the_request() -> None:
    gate = asyncio.Event()
    pages = Pages(gate)
    call = Call()
    request, seconds = requesting(pages, call)
    await asyncio.sleep(0)
    call.ended.set_result(CallEnded("hung_up", "BYE"))
    result = await asyncio.wait_for(request, 1)
    assert result == CallEnded("hung_up", "BYE")
    assert pages.cancelled == 1
    assert seconds == []  # an abandoned request is not timed
    assert asyncio.current_task() is not None
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_the_runner_cancelled_from_elsewhere_stays_cancelled() -> None:
    gate = asyncio.Event()
    pages = Pages(gate)
    request, _ = requesting(pages, Call())
    await asyncio.sleep(0)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert pages.cancelled == 1


async def test_an_end_and_a_cancel_from_elsewhere_together_stay_a_cancel() -> None:
    gate = asyncio.Event()
    call = Call()
    request, _ = requesting(Pages(gate), call)
    await asyncio.sleep(0)
    request.cancel()
    call.ended.set_result(CallEnded("hung_up", "BYE"))
    with pytest.raises(asyncio.CancelledError):
        await request


async def test_an_end_as_the_answer_comes_leaves_the_answer() -> None:
    gate = asyncio.Event()
    call = Call()
    request, seconds = requesting(Pages(gate), call)
    for _ in range(3):
        await asyncio.sleep(0)
    # The answer wakes the request first; the end's cancel comes after it returned.
    gate.set()
    call.ended.set_result(CallEnded("hung_up", "BYE"))
    assert await request == b'{"actions": []}'
    assert len(seconds) == 1


async def test_the_end_failing_is_raised() -> None:
    gate = asyncio.Event()
    call = Call()
    request, _ = requesting(Pages(gate), call)
    await asyncio.sleep(0)
    call.ended.set_exception(RuntimeError("an unanswered call has already ended"))
    with pytest.raises(RuntimeError, match="already ended"):
        await request


async def test_a_request_that_keeps_its_answer_from_the_cancel_leaves_no_cancel_behind() -> None:
    class Keeping(Pages):
        async def fetch(
            self, url: str, method: str, body: bytes, secret: str, *, answer: bool = True
        ) -> bytes:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return b'{"actions": []}'  # (a Pages that swallows the cancel)
            raise AssertionError("unreachable")

    call = Call()
    pages_exchange, seconds = exchange(Keeping(), call)

    async def runner() -> tuple[object, int]:
        answer = await pages_exchange.fetch("http://app/next", "POST", {}, "next")
        await asyncio.sleep(0)  # a cancel left behind would land here
        task = asyncio.current_task()
        assert task is not None
        return answer, task.cancelling()

    request = asyncio.ensure_future(runner())
    await asyncio.sleep(0)
    call.ended.set_result(CallEnded("hung_up", "BYE"))
    assert await request == (b'{"actions": []}', 0)
    assert len(seconds) == 1
