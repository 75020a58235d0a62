"""Faults in the store (issue 14, "faults lose nothing"): the disk refuses, nothing is lost.

The state database is a real SQLite file made to refuse growth as a full disk
does: ``PRAGMA max_page_count`` at its current size makes SQLite answer
``SQLITE_FULL`` ("database or disk is full"), the very error a full disk gives;
raising it again is space coming back. Real recordings on a really full disk
are tested end to end in ``tests/e2e/test_faults.py``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callhook.calls.calllog import CallLog
from callhook.devtools.harness import VirtualClock
from callhook.store import journal as journal_module
from callhook.store.database import Database
from callhook.store.journal import RecordingJournal

BODY = {"application_instance_id": "i1", "token": "t", "log_filename": "logs/i1.log"}
RESULT = {
    "filename": "recordings/r.wav",
    "file_available": False,
    "id": "msg",
    "contains_sound": True,
    "seconds_duration": 1.2,
    "reason": "error",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "state.sqlite3")
    yield database
    database.close()


def disk_full(db: Database) -> None:
    """The database may not grow by a page: SQLite's SQLITE_FULL, as on a full disk."""
    pages = db.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    db.call(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))


def space_back(db: Database) -> None:
    db.call(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))


def notifications(db: Database) -> list[dict[str, Any]]:
    rows = db.call(lambda c: c.execute("SELECT body FROM notifications").fetchall())
    return [json.loads(body) for (body,) in rows]


def test_updates_refused_by_a_full_disk_are_held_and_the_notification_follows(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(journal_module, "RETRY_FIRST", 0.02)
    queued = threading.Event()
    journal = RecordingJournal(db, on_queued=queued.set)
    disk_full(db)
    big = {**BODY, "padding": "x" * 20000}  # a new row needs new pages: refused
    with caplog.at_level(logging.DEBUG, "callhook.store"):
        # None of these raises: each is held, in order, behind the first refused one.
        assert journal.started(
            "app", "recordings/r.wav", encrypted=False, record_id="msg",
            notify=("http://a/n", "POST"), body=big,
        ).result() is False  # fmt: skip
        assert journal.completed("app", "recordings/r.wav", RESULT).result() is False
        assert journal.durable("app", "recordings/r.wav", 9600).result() is False
        assert journal.held_back == 3
        assert "database or disk is full" in caplog.text  # the cause, in the server log
        assert not queued.is_set() and notifications(db) == []
        space_back(db)
        assert queued.wait(10), "the held updates were not retried once space was back"
    assert journal.held_back == 0
    (notice,) = notifications(db)
    assert notice["action_result"]["result"] == {**RESULT, "file_available": True}
    assert "written again" in caplog.text


def test_a_refused_update_does_not_overtake_the_ones_before_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable`` alone would fit (an UPDATE), but runs only after the refused INSERT."""
    monkeypatch.setattr(journal_module, "RETRY_FIRST", 3600.0)  # no retry during the test
    journal = RecordingJournal(db)
    disk_full(db)
    journal.started(
        "app", "recordings/r.wav", encrypted=False, record_id="msg",
        notify=("http://a/n", "POST"), body={**BODY, "padding": "x" * 20000},
    ).result()  # fmt: skip
    journal.durable("app", "recordings/r.wav", 9600).result()
    assert journal.held_back == 2
    assert db.call(lambda c: c.execute("SELECT COUNT(*) FROM recordings").fetchone()[0]) == 0


def test_a_refusal_that_will_not_pass_is_dropped_not_held(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only database (or a bug's "no such column") never gets better: that update is
    logged and dropped, and the ones after it are not held behind it for good."""
    monkeypatch.setattr(journal_module, "RETRY_FIRST", 3600.0)
    journal = RecordingJournal(db)
    db.call(lambda c: c.execute("PRAGMA query_only = ON"))  # SQLITE_READONLY on writes
    journal.started(
        "app", "recordings/r.wav", encrypted=False, record_id="msg",
        notify=("http://a/n", "POST"), body=BODY,
    ).result()  # fmt: skip
    assert journal.held_back == 0
    assert "a recordings journal update failed and is dropped" in caplog.text
    db.on_thread(lambda: db._conn.execute("PRAGMA query_only = OFF")).result()
    journal.started(
        "app", "recordings/s.wav", encrypted=False, record_id="msg",
        notify=("http://a/n", "POST"), body=BODY,
    ).result()  # fmt: skip
    count = db.call(lambda c: c.execute("SELECT COUNT(*) FROM recordings").fetchone()[0])
    assert journal.held_back == 0 and count == 1


def test_a_call_log_on_a_full_disk_never_raises_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """/dev/full refuses every write with ENOSPC: the call goes on, the cause is logged once."""
    log = CallLog("i1", VirtualClock(), Path("/dev/full"))
    with caplog.at_level(logging.ERROR, "callhook.call"):
        for n in range(5):
            log.write("action_start", f"line {n}")
        log.close()
    assert len(log.lines) == 5  # the listeners and the in-memory lines have everything
    refusals = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(refusals) == 1 and "No space left on device" in refusals[0].getMessage()
    assert any("could not be written before the call ended" in r.getMessage()
               for r in caplog.records)  # fmt: skip
