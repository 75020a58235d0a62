"""``connect`` to ``user:NAME`` on a worker that follows worker 0's bindings (serve --workers):
the phones are read from the database first, so one that registered a moment ago is called
too; an attempt given up, or a call ended, while the read runs places nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from callhook.telephony.connecting import Connecting


class Service(Connecting):
    """The placing half alone: what the rest of the SIP service gives it, scripted."""

    def __init__(self, following: bool) -> None:
        self.loop = asyncio.get_running_loop()
        self.calls: dict[str, Any] = {}
        self._far_runs: set[asyncio.Task[None]] = set()
        self._reading_phones: set[tuple[str, int]] = set()
        self.far_legs = {}
        self.following = following
        self.read = asyncio.Event()  # set: the database answers
        self.reads = 0
        self.placed: list[tuple[str, int]] = []
        self.flushed = 0
        self.users = self  # type: ignore[assignment]  # (the registrar's part, scripted too)

    def follows_bindings(self) -> bool:
        return self.following

    async def read_bindings(self, store: Any = None) -> list[Any] | None:
        self.reads += 1
        await self.read.wait()
        return []

    def _place_phones(
        self, primary: Any, attempt: int, destination: str, call_from: str | None
    ) -> None:
        self.placed.append((primary.call_id, attempt))

    def _flush(self) -> None:
        self.flushed += 1


class Primary:
    def __init__(self, call_id: str) -> None:
        self.call_id = call_id


async def settle(service: Service) -> None:
    service.read.set()
    if service._far_runs:
        await asyncio.gather(*service._far_runs)


async def test_a_worker_that_keeps_the_bindings_places_the_phones_at_once() -> None:
    service = Service(following=False)
    call = Primary("c1")
    service.calls["c1"] = call
    service.place_callee(call, 1, "user:alice", None)  # type: ignore[arg-type]
    assert service.placed == [("c1", 1)] and service.reads == 0


async def test_a_following_worker_reads_the_bindings_then_places_the_phones() -> None:
    service = Service(following=True)
    call = Primary("c1")
    service.calls["c1"] = call
    service.place_callee(call, 1, "user:alice", None)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert service.reads == 1 and service.placed == []  # waiting for the database
    await settle(service)
    assert service.placed == [("c1", 1)] and service.flushed == 1


async def test_nothing_is_placed_for_an_attempt_dropped_or_a_call_ended_during_the_read() -> None:
    service = Service(following=True)
    dropped, ended, kept = Primary("c1"), Primary("c2"), Primary("c3")
    service.calls.update({"c1": dropped, "c2": ended, "c3": kept})
    for call in (dropped, ended, kept):
        service.place_callee(call, 1, "user:alice", None)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    service.drop_callee(dropped, 1)  # type: ignore[arg-type]  # the connect gave up
    del service.calls["c2"]  # the caller hung up
    await settle(service)
    assert service.placed == [("c3", 1)]
    assert service._reading_phones == set()


async def test_a_fault_placing_the_phones_fails_that_attempt_and_is_logged(
    caplog: Any,
) -> None:
    from callhook.events import CalleeEnded

    class Leg:
        def __init__(self) -> None:
            self.injected: list[object] = []

        def inject(self, event: object) -> None:
            self.injected.append(event)

    class Broken(Service):
        def _place_phones(self, *args: Any) -> None:
            raise RuntimeError("injected fault")

    service = Broken(following=True)
    call = Primary("c1")
    call.leg = Leg()  # type: ignore[attr-defined]
    service.calls["c1"] = call
    service.place_callee(call, 2, "user:alice", None)  # type: ignore[arg-type]
    await settle(service)
    assert call.leg.injected == [CalleeEnded(2, "failed", "500")]  # type: ignore[attr-defined]
    assert "injected fault" in caplog.text and service.flushed == 1
