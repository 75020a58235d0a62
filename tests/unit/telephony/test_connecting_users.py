"""``connect`` to ``user:NAME`` on a worker that follows worker 0's bindings (serve --workers):
the phones are read from the database first, so one that registered a moment ago is called
too; an attempt given up, or a call ended, while the read runs places nothing."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

from callhook.events import CalleeEnded
from callhook.telephony.connecting import Connector


class Registrar:
    """The registrar's part the placing asks: whether the user exists (here: never, so a
    placing shows as the attempt ending 404), or a fault."""

    def __init__(self) -> None:
        self.fault: Exception | None = None

    def knows(self, name: str) -> bool:
        if self.fault is not None:
            raise self.fault
        return False


class Users:
    """The registrar of ``[users]``, scripted: whether this worker follows the stored
    bindings, and a database read that answers when the test says so."""

    def __init__(self, following: bool) -> None:
        self.following = following
        self.read = asyncio.Event()  # set: the database answers
        self.reads = 0
        self.registrar = Registrar()

    def follows_bindings(self) -> bool:
        return self.following

    async def read_bindings(self) -> None:
        self.reads += 1
        await self.read.wait()


class Leg:
    def __init__(self) -> None:
        self.injected: list[object] = []

    def inject(self, event: object) -> None:
        self.injected.append(event)


class Primary:
    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.leg = Leg()

    def placed(self, attempt: int = 1) -> bool:
        """Whether the phones were looked for (the scripted registrar knows no user)."""
        return CalleeEnded(attempt, "unobtainable", "404") in self.leg.injected


class Harness:
    """A Connector with what the rest of the SIP service gives it, scripted."""

    def __init__(self, following: bool) -> None:
        self.users = Users(following)
        self.calls: dict[str, Any] = {}
        self.flushed = 0
        none = cast(Any, None)  # (placing to a user uses none of these)
        self.connector = Connector(
            services=none,
            loop=asyncio.get_running_loop(),
            agent=lambda: None,
            media=lambda: None,
            address="127.0.0.1",
            trunks=none,
            guard=none,
            users=cast(Any, self.users),
            outbound=none,
            outbound_calls=none,
            admission=none,
            client_tls=ssl.create_default_context(),
            prompts=none,
            calls=self.calls,
            far_legs={},
            webclients=lambda: None,
            flush=self.flush,
            attach_far_legs=lambda call: None,
            detach_far_legs=lambda call: None,
        )

    def flush(self) -> None:
        self.flushed += 1

    def place(self, call: Primary, attempt: int = 1) -> None:
        self.calls.setdefault(call.call_id, call)
        self.connector.place_callee(cast(Any, call), attempt, "user:alice", None)

    async def settle(self) -> None:
        self.users.read.set()
        for _ in range(5):
            await asyncio.sleep(0)


async def test_a_worker_that_keeps_the_bindings_places_the_phones_at_once() -> None:
    harness = Harness(following=False)
    call = Primary("c1")
    harness.place(call)
    assert call.placed() and harness.users.reads == 0


async def test_a_following_worker_reads_the_bindings_then_places_the_phones() -> None:
    harness = Harness(following=True)
    call = Primary("c1")
    harness.place(call)
    await asyncio.sleep(0)
    assert harness.users.reads == 1 and not call.placed()  # waiting for the database
    await harness.settle()
    assert call.placed() and harness.flushed == 1


async def test_nothing_is_placed_for_an_attempt_dropped_or_a_call_ended_during_the_read() -> None:
    harness = Harness(following=True)
    dropped, ended, kept = Primary("c1"), Primary("c2"), Primary("c3")
    for call in (dropped, ended, kept):
        harness.place(call)
    await asyncio.sleep(0)
    harness.connector.drop_callee(cast(Any, dropped), 1)  # the connect gave up
    del harness.calls["c2"]  # the caller hung up
    await harness.settle()
    assert [c.placed() for c in (dropped, ended, kept)] == [False, False, True]
    assert harness.connector._reading_phones == set()


async def test_a_fault_placing_the_phones_fails_that_attempt_and_is_logged(
    caplog: Any,
) -> None:
    harness = Harness(following=True)
    harness.users.registrar.fault = RuntimeError("injected fault")
    call = Primary("c1")
    harness.place(call, attempt=2)
    await harness.settle()
    assert call.leg.injected == [CalleeEnded(2, "failed", "500")]
    assert "injected fault" in caplog.text and harness.flushed == 1
