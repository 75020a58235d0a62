"""A call's transcription results into the outbox: in order, as one stream; a result the
database refuses is logged in one line with its cause (a bug keeps its traceback)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

import pytest

from callhook.calls.services import Services
from callhook.store.database import Database
from callhook.store.outbox import Outbox
from callhook.telephony.transcribing import OutboxPoster


class RefusingOutbox(Outbox):
    """The real outbox, refusing the adds ``refusals`` names (by the body's ``n``)."""

    def __init__(self, db: Database, refusals: dict[int, Exception]) -> None:
        super().__init__(db)
        self.refusals = refusals

    async def add(self, app: str, url: str, method: str, body: dict[str, Any], *a: Any) -> int:
        if body["n"] in self.refusals:
            raise self.refusals[body["n"]]
        await asyncio.sleep(0.001 * (5 - body["n"]))  # (earlier ones slower: still in order)
        return await super().add(app, url, method, body, *a)


class FakeServices:
    """What the poster uses of the services: the outbox, its database, notify_now."""

    def __init__(self, db: Database, outbox: Outbox) -> None:
        self.db, self.outbox = db, outbox
        self.notified = 0

    def notify_now(self) -> None:
        self.notified += 1


async def test_results_are_queued_as_one_stream_and_a_refusal_is_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    try:
        full = sqlite3.OperationalError("database or disk is full")
        services = FakeServices(db, RefusingOutbox(db, {2: full}))
        poster = OutboxPoster(cast(Services, services), "app")
        for n in range(5):
            poster.post("http://a/results", "POST", {"n": n})
        async with asyncio.timeout(5):
            while services.notified < 4:
                await asyncio.sleep(0.01)
        rows = db.call(
            lambda c: c.execute("SELECT body, stream FROM notifications ORDER BY id").fetchall()
        )
        assert [body for body, _ in rows] == ['{"n":0}', '{"n":1}', '{"n":3}', '{"n":4}']
        assert {stream for _, stream in rows} == {poster.stream}
        (record,) = [r for r in caplog.records if "could not be queued" in r.getMessage()]
        assert record.getMessage().endswith(": database or disk is full")
        assert record.exc_info is None and record.levelno == logging.ERROR
    finally:
        db.close()


async def test_a_bug_in_queueing_keeps_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    try:
        services = FakeServices(db, RefusingOutbox(db, {0: TypeError("a bug")}))
        poster = OutboxPoster(cast(Services, services), "app")
        poster.post("http://a/results", "POST", {"n": 0})
        poster.post("http://a/results", "POST", {"n": 1})
        start = time.monotonic()
        while services.notified < 1 and time.monotonic() - start < 5:
            await asyncio.sleep(0.01)
        (record,) = [r for r in caplog.records if "could not be queued" in r.getMessage()]
        assert record.exc_info is not None
    finally:
        db.close()
