"""Delivering notifications to real local HTTP endpoints (the asyncio side of the outbox)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from callhook.devtools.harness import AppServer, Reply
from callhook.edge.notifier import Notifier
from callhook.edge.pages import HttpPages
from callhook.store.database import Database
from callhook.store.outbox import Outbox, RetryPolicy

FAST = RetryPolicy(first_delay=0.05, max_delay=0.2)


@pytest.fixture
async def outbox(tmp_path: Path) -> AsyncIterator[Outbox]:
    db = Database(tmp_path / "state.sqlite3")
    yield Outbox(db, FAST, seed=3)
    db.close()


@contextlib.asynccontextmanager
async def running(
    outbox: Outbox, secret_for: Callable[[str], str], timeout: float, **options: Any
) -> AsyncIterator[Notifier]:
    """A started notifier with its own page client; closed (and the client) at the end."""
    pages = HttpPages(timeout=timeout)
    notifier = Notifier(outbox, pages, secret_for, **options)
    notifier.start()
    try:
        yield notifier
    finally:
        await notifier.close()
        await pages.close()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_retried_until_a_2xx_then_never_again(outbox: Outbox) -> None:
    answers = iter([Reply(status=503), Reply(body="no", status=500), Reply(status=204)])
    async with AppServer() as app:
        app.page("/n", lambda _: next(answers, Reply(status=204)))
        async with running(outbox, lambda _: app.secret, timeout=2.0) as notifier:
            await outbox.add("a", app.url("/n"), "POST", {"is_notification": True}, time.time())
            notifier.wake()
            await until(lambda: notifier.delivered == 1)
            assert notifier.failed_attempts == 2
            assert await outbox.counts() == {"pending": 0, "abandoned": 0}
            notifier.wake()
            await asyncio.sleep(0.3)  # more than the longest retry delay: nothing more is sent
            assert len(app.bodies("/n")) == 3
            received = app.requests[-1]
            assert received.signature_ok(app.secret)


async def test_a_slow_endpoint_does_not_hold_up_another_application(outbox: Outbox) -> None:
    async with AppServer() as slow, AppServer() as fast:
        slow.page("/n", Reply(status=204, delay=30.0))
        fast.page("/n", None)
        async with running(outbox, lambda _: "s", timeout=60.0) as notifier:
            for _ in range(20):
                await outbox.add("slow", slow.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await until(lambda: len(slow.requests) == 4)  # its limit of deliveries at once
            await outbox.add("fast", fast.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await until(lambda: notifier.delivered == 1, timeout=5.0)
            assert len(fast.requests) == 1
            assert len(slow.requests) == 4
            await notifier.close()  # the slow ones stay in the outbox for the next start
            assert (await outbox.counts())["pending"] == 20


class HeldOutbox(Outbox):
    """An outbox whose marking as delivered waits for ``release`` (a slow disk)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marking = asyncio.Event()
        self.release = asyncio.Event()

    async def delivered(self, notification_id: int) -> None:
        self.marking.set()
        await self.release.wait()
        await super().delivered(notification_id)


async def test_closing_while_an_answered_one_is_being_marked_does_not_send_it_again(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    outbox = HeldOutbox(db, FAST, seed=3)
    try:
        async with AppServer() as app:
            app.page("/n", None)
            async with running(outbox, lambda _: "s", timeout=5.0) as notifier:
                await outbox.add("a", app.url("/n"), "POST", {}, time.time())
                notifier.wake()
                await asyncio.wait_for(outbox.marking.wait(), 10)
                closing = asyncio.create_task(notifier.close())
                await asyncio.sleep(0)
                outbox.release.set()
                await closing
                assert notifier.delivered == 1
                # Answered and marked: the next start has nothing to send.
                assert await outbox.counts() == {"pending": 0, "abandoned": 0}
    finally:
        db.close()


async def test_an_unreachable_endpoint_is_retried_not_lost(outbox: Outbox) -> None:
    async with running(outbox, lambda _: "s", timeout=1.0) as notifier:
        # The discard port: the connection is refused.
        await outbox.add("a", "http://127.0.0.1:9/n", "POST", {}, time.time())
        notifier.wake()
        await until(lambda: notifier.failed_attempts >= 2)
        assert (await outbox.counts())["pending"] == 1


async def test_flush_waits_for_what_is_due(outbox: Outbox) -> None:
    """Closing gives due notifications a moment: flush returns once they are answered."""
    async with AppServer() as app:
        app.page("/n", Reply(status=204, delay=0.2))
        async with running(outbox, lambda _: app.secret, timeout=2.0) as notifier:
            for _ in range(3):
                await outbox.add("a", app.url("/n"), "POST", {}, time.time())
            assert notifier.delivered == 0
            assert await notifier.flush(5.0) is True
            assert notifier.delivered == 3


class FlakyOutbox(Outbox):
    """An outbox whose database fails to record the first 2xx (disk full, locked...)."""

    fail_deletes = 1

    async def delivered(self, notification_id: int) -> None:
        if self.fail_deletes:
            self.fail_deletes -= 1
            raise OSError("database is locked")
        await super().delivered(notification_id)


async def test_a_2xx_is_never_sent_again_even_when_the_database_fails(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.sqlite3")
    outbox = FlakyOutbox(db, FAST, seed=1)
    async with AppServer() as app:
        app.page("/n", None)
        async with running(outbox, lambda _: app.secret, timeout=2.0) as notifier:
            await outbox.add("a", app.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await until(lambda: notifier.delivered == 1)
            await until(lambda: outbox.fail_deletes == 0)
            notifier.wake()  # the deletion is retried on the next pass
            async with asyncio.timeout(10):
                while (await outbox.counts())["pending"]:
                    notifier.wake()
                    await asyncio.sleep(0.02)
            assert len(app.requests) == 1
    db.close()


async def test_only_the_process_allowed_to_delivers(outbox: Outbox) -> None:
    allowed = False
    async with AppServer() as app:
        app.page("/n", None)
        async with running(
            outbox, lambda _: "s", may_deliver=lambda: allowed, timeout=2.0
        ) as notifier:
            await outbox.add("a", app.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await asyncio.sleep(0.2)  # it had its chance: another process is delivering
            assert app.requests == []
            allowed = True  # that process stopped: this one takes over
            notifier.wake()
            await until(lambda: notifier.delivered == 1)


async def test_an_application_at_its_limit_does_not_make_the_notifier_spin(
    outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = 0
    real_due = outbox.due

    async def counted(*args: Any) -> Any:
        nonlocal looks
        looks += 1
        return await real_due(*args)

    monkeypatch.setattr(outbox, "due", counted)
    async with AppServer() as slow:
        slow.page("/n", Reply(status=204, delay=30.0))
        async with running(outbox, lambda _: "s", timeout=60.0) as notifier:
            for _ in range(10):
                await outbox.add("slow", slow.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await until(lambda: len(slow.requests) == 4)
            before = looks
            await asyncio.sleep(1.0)
            assert looks - before <= 1  # it waits for a delivery to end, not polling at 20 Hz


@pytest.mark.parametrize("yields", range(6))
async def test_close_ends_even_when_woken_at_the_same_moment(outbox: Outbox, yields: int) -> None:
    """A cancellation arriving as the notifier is woken must not be lost (shutdown hung)."""
    async with running(outbox, lambda _: "s", timeout=1.0) as notifier:
        await asyncio.sleep(0.05)  # idle, waiting to be woken
        notifier._wake.set()
        for _ in range(yields):
            await asyncio.sleep(0)
        await asyncio.wait_for(notifier.close(), 5.0)


async def test_any_2xx_is_success_whatever_its_body(outbox: Outbox) -> None:
    """The answer's body is not part of the application flow (spec 4.3): not even read."""
    async with AppServer() as app:
        app.page("/n", Reply(status=200, body=b"x" * (2 << 20), content_type="text/plain"))
        async with running(outbox, lambda _: app.secret, timeout=2.0) as notifier:
            await outbox.add("a", app.url("/n"), "POST", {}, time.time())
            notifier.wake()
            await until(lambda: notifier.delivered == 1)
            assert notifier.failed_attempts == 0


async def test_a_streams_notifications_arrive_one_at_a_time_in_order(outbox: Outbox) -> None:
    """A call's transcription results: each waits for the one before it to be answered,
    however slowly the first ones are answered; notifications of no stream go meanwhile."""
    in_flight: list[int] = []
    most = 0

    async def answer(n: int) -> None:
        nonlocal most
        in_flight.append(n)
        most = max(most, len(in_flight))
        await asyncio.sleep(0.1 if n % 2 else 0.0)  # (earlier ones slower, one in two)
        in_flight.remove(n)

    async with AppServer() as app:

        async def page(received: Any) -> Reply:
            await answer(received.json["n"])
            return Reply(status=204)

        app.page("/results", page)
        app.page("/other", Reply(status=204, delay=0.2))
        async with running(outbox, lambda _: "s", timeout=5.0) as notifier:
            now = time.time()
            for n in range(8):
                await outbox.add("a", app.url("/results"), "POST", {"n": n}, now, stream="call-1")
            await outbox.add("a", app.url("/other"), "POST", {"n": 99}, now)
            notifier.wake()
            await until(lambda: notifier.delivered == 9)
    assert [b["n"] for b in app.bodies("/results")] == list(range(8))
    assert most == 1
    # The one of no stream went out beside the stream, not held until after its last (it
    # would be the 9th to arrive; the stream takes 0.4 s at least, time enough for it even
    # on a loaded machine, where it once came 5th).
    assert app.requests.index(next(r for r in app.requests if r.path == "/other")) < 8


async def test_a_failing_notification_holds_back_its_stream_only(outbox: Outbox) -> None:
    answers = iter([Reply(status=503), Reply(status=503)])
    async with AppServer() as app:
        app.page("/first", lambda _: next(answers, Reply(status=204)))
        app.page("/next", None)
        app.page("/elsewhere", None)
        async with running(outbox, lambda _: "s", timeout=5.0) as notifier:
            now = time.time()
            await outbox.add("a", app.url("/first"), "POST", {}, now, stream="call-1")
            await outbox.add("a", app.url("/next"), "POST", {}, now, stream="call-1")
            await outbox.add("a", app.url("/elsewhere"), "POST", {}, now, stream="call-2")
            notifier.wake()
            await until(lambda: notifier.delivered == 3)
    paths = [r.path for r in app.requests]
    assert paths.count("/first") == 3 and paths.count("/next") == 1
    assert paths.index("/next") > max(i for i, p in enumerate(paths) if p == "/first")
    assert paths.index("/elsewhere") < paths.index("/next")


async def test_an_abandoned_notification_no_longer_holds_back_its_stream(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    outbox = Outbox(db, RetryPolicy(first_delay=0.05, max_delay=0.05, give_up_after=0.3))
    try:
        async with AppServer() as app:
            app.page("/dead", Reply(status=503))
            app.page("/next", None)
            async with running(outbox, lambda _: "s", timeout=5.0) as notifier:
                now = time.time()
                await outbox.add("a", app.url("/dead"), "POST", {}, now, stream="call-1")
                await outbox.add("a", app.url("/next"), "POST", {}, now, stream="call-1")
                notifier.wake()
                await until(lambda: notifier.delivered == 1)
            assert await outbox.counts() == {"pending": 0, "abandoned": 1}
    finally:
        db.close()
