"""A call's transcription results into the outbox: in order, as one stream; a result the
database refuses (a full disk) is held with the ones after it and tried again until it is
taken, in one log line with its cause (a bug keeps its traceback), and meanwhile a new
interim result, or a final one past the most held, is dropped and counted; the waits
between tries run on a virtual clock."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from callhook.calls.services import Services
from callhook.store.database import Database
from callhook.store.outbox import Outbox
from callhook.telephony import transcribing
from callhook.telephony.transcribing import OutboxPoster


class RefusingOutbox(Outbox):
    """The real outbox, refusing the adds ``refusals`` names (by the body's ``n``): each
    try of that result raises the next of its exceptions, then it is taken."""

    def __init__(self, db: Database, refusals: dict[int, list[Exception]]) -> None:
        super().__init__(db)
        self.refusals = refusals

    async def add(self, app: str, url: str, method: str, body: dict[str, Any], *a: Any) -> int:
        if self.refusals.get(body["n"]):
            raise self.refusals[body["n"]].pop(0)
        await asyncio.sleep(0.001 * (5 - body["n"]))  # (earlier ones slower: still in order)
        return await super().add(app, url, method, body, *a)


class VirtualSleep:
    """The waits between tries, recorded and not waited (a virtual clock); from the
    ``stop_after``-th on, one never ends (time stops there: what a test does next happens
    during that wait, however fast the loop turns meanwhile)."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.waits: list[float] = []
        self.stop_after = stop_after

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.stop_after is not None and len(self.waits) >= self.stop_after:
            await asyncio.Event().wait()
        await asyncio.sleep(0)


class FakeServices:
    """What the poster uses of the services: the outbox, its database, notify_now."""

    def __init__(self, db: Database, outbox: Outbox) -> None:
        self.db, self.outbox = db, outbox
        self.notified = 0

    def notify_now(self) -> None:
        self.notified += 1


async def until(condition: Any) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


async def test_results_are_queued_as_one_stream_and_a_refused_one_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    try:
        full = sqlite3.OperationalError("database or disk is full")
        services = FakeServices(db, RefusingOutbox(db, {2: [full] * 7}))
        sleep = VirtualSleep()
        poster = OutboxPoster(cast(Services, services), "app", sleep=sleep)
        for n in range(5):
            poster.post("http://a/results", "POST", {"n": n})
        await until(lambda: services.notified == 5)
        rows = db.call(
            lambda c: c.execute("SELECT body, stream FROM notifications ORDER BY id").fetchall()
        )
        # Every result, in the order made: the ones after the refused one waited for it.
        assert [body for body, _ in rows] == [f'{{"n":{n}}}' for n in range(5)]
        assert {stream for _, stream in rows} == {poster.stream}
        assert sleep.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
        (refused,) = [r for r in caplog.records if "cannot be queued" in r.getMessage()]
        assert refused.getMessage() == (
            "transcription results for app cannot be queued (database or disk is full):"
            " 3 held in memory, in order, tried again until they can"
        )
        assert refused.exc_info is None and refused.levelno == logging.ERROR
        (back,) = [r for r in caplog.records if "queued again" in r.getMessage()]
        assert back.levelno == logging.WARNING
        # A second refusal later is told again, its waits from the first again.
        services.outbox.refusals[5] = [full]  # type: ignore[attr-defined]
        poster.post("http://a/results", "POST", {"n": 5})
        await until(lambda: services.notified == 6)
        assert sleep.waits[7:] == [0.5]
        assert len([r for r in caplog.records if "cannot be queued" in r.getMessage()]) == 2
    finally:
        db.close()


async def test_a_bug_in_queueing_keeps_its_traceback_and_the_next_result_goes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    try:
        services = FakeServices(db, RefusingOutbox(db, {0: [TypeError("a bug")]}))
        sleep = VirtualSleep()
        poster = OutboxPoster(cast(Services, services), "app", sleep=sleep)
        poster.post("http://a/results", "POST", {"n": 0})
        poster.post("http://a/results", "POST", {"n": 1})
        await until(lambda: services.notified == 1)
        (record,) = [r for r in caplog.records if "could not be queued" in r.getMessage()]
        assert record.exc_info is not None
        assert sleep.waits == []  # (not tried again: it would never be taken)
        bodies = db.call(lambda c: c.execute("SELECT body FROM notifications").fetchall())
        assert bodies == [('{"n":1}',)]
    finally:
        db.close()


async def test_results_still_refused_when_callhook_stops_are_counted_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    try:
        full = sqlite3.OperationalError("database or disk is full")
        services = FakeServices(db, RefusingOutbox(db, {0: [full] * 1000}))
        # (Stopped during the third wait: with time running, the loop could have spent
        # all the refusals before the test looked.)
        sleep = VirtualSleep(stop_after=3)
        poster = OutboxPoster(cast(Services, services), "app", sleep=sleep)
        poster.post("http://a/results", "POST", {"n": 0})
        poster.post("http://a/results", "POST", {"n": 1})
        await until(lambda: len(sleep.waits) >= 3)
        assert poster._adding is not None
        poster._adding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poster._adding
        (record,) = [r for r in caplog.records if "when callhook stopped" in r.getMessage()]
        assert record.getMessage() == (
            "2 transcription result(s) for app not queued when callhook stopped"
            " (the database refused them)"
        )
        assert services.notified == 0
    finally:
        db.close()


async def test_while_refused_interim_results_and_final_ones_past_the_most_held_are_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcribing, "HELD_MAX", 3)
    db = Database(tmp_path / "state.sqlite3")
    try:
        full = sqlite3.OperationalError("database or disk is full")
        outbox = RefusingOutbox(db, {0: [full] * 10**6})  # refused until the test says
        services = FakeServices(db, outbox)
        poster = OutboxPoster(cast(Services, services), "app", sleep=VirtualSleep())
        post = poster.post
        post("http://a/results", "POST", {"n": 0})
        await until(lambda: poster._refused)
        post("http://a/results", "POST", {"n": 1}, interim=True)  # stale: dropped
        post("http://a/results", "POST", {"n": 2})
        post("http://a/results", "POST", {"n": 3})  # the third held
        post("http://a/results", "POST", {"n": 4})  # past the most held: dropped
        post("http://a/results", "POST", {"n": 5}, interim=True)
        post("http://a/results", "POST", {"n": 6})
        post("http://a/results", "POST", {"n": 7}, completed=True)  # always held
        outbox.refusals[0] = []  # space comes back
        await until(lambda: services.notified == 4)
        bodies = db.call(
            lambda c: c.execute("SELECT body FROM notifications ORDER BY id").fetchall()
        )
        assert [b for (b,) in bodies] == [f'{{"n":{n}}}' for n in (0, 2, 3, 7)]
        messages = [r.getMessage() for r in caplog.records]
        (most,) = [m for m in messages if "the most kept" in m]
        assert most == (
            "transcription results for app: 3 held in memory, the most kept; later final"
            " results are dropped until the database takes them"
        )
        (back,) = [m for m in messages if "queued again" in m]
        assert back == (
            "transcription results for app are queued again; 2 interim result(s) dropped"
            " meanwhile and 2 final result(s) dropped meanwhile"
        )
        # Taken again: a result is held as before, the counts from zero.
        post("http://a/results", "POST", {"n": 8}, interim=True)
        await until(lambda: services.notified == 5)
    finally:
        db.close()
