"""Retention (store/retention.py) on a real store and a real database (SQLite and
PostgreSQL), on a virtual clock: a sweep at ``now`` deletes exactly what is past its
application's days, never a recording whose notification may still be sent, never a file
the application uploaded, and journals what it deleted."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callhook.config.tables import RetentionSettings
from callhook.store import outbox
from callhook.store.callrecords import CallRecords, Filters
from callhook.store.database import Database
from callhook.store.files import MediaStore
from callhook.store.journal import RecordingJournal
from callhook.store.postgres import PostgresDatabase
from callhook.store.retention import DAY, Sweeper
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from tests.unit.store.test_callrecords import record

NOW = 2_000_000_000.0  # the virtual clock's now (2033)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        database = Database(tmp_path / "state.sqlite3")
    else:
        database = PostgresDatabase(request.getfixturevalue("postgres_url"))
        tables = ("call_records", "notifications", "recordings", "deletions")
        database.call(lambda c: [c.execute(f"DELETE FROM {t}") for t in tables])
    yield database
    database.close()


def put(store: MediaStore, app: str, name: str, days_old: float) -> None:
    path = store.path(app, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"RIFF....")
    when = NOW - days_old * DAY
    os.utime(path, (when, when))


def names(store: MediaStore, app: str) -> set[str]:
    return {f.name for f in store.list(app, "", "", 1000).files}


def test_a_sweep_deletes_exactly_what_is_past_its_days(db: Database, tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    policies = {
        "sales": RetentionSettings(
            call_logs_days=30, recordings_days=7, call_records_days=365, notifications_days=14
        ),
        "support": RetentionSettings(call_logs_days=5),  # the rest kept for ever
    }
    sweeper = Sweeper(store, db, lambda app: policies.get(app, RetentionSettings()))
    put(store, "sales", "logs/old.log", 31)
    put(store, "sales", "logs/new.log", 29)
    put(store, "sales", "logs/edge.log", 30)  # exactly 30 days: not past them yet
    put(store, "sales", "recordings/old.wav", 8)
    put(store, "sales", "recordings/new.wav", 6)
    put(store, "sales", "recordings/making.wav", 8)  # still in the recordings journal
    put(store, "sales", "recordings/announcing.wav", 8)  # its notification is pending
    put(store, "sales", "recordings/given-up.wav", 8)  # its notification was abandoned
    put(store, "sales", "prompts/welcome.wav", 4000)  # uploaded: never touched
    put(store, "support", "logs/a.log", 6)
    put(store, "support", "recordings/a.wav", 4000)
    put(store, "other", "logs/a.log", 4000)  # an application with no policy: for ever
    journal = RecordingJournal(db, clock=lambda: NOW - 8 * DAY)
    journal.started(
        "sales", "recordings/making.wav", encrypted=False, record_id="r",
        notify=None, body={},
    ).result()  # fmt: skip

    def notification(filename: str, abandoned: int, days_old: float) -> None:
        body = {"action_result": {"result": {"filename": filename}}}

        def add(conn: Any) -> None:
            id_ = outbox.insert(conn, "sales", "http://a/n", "POST", body, NOW - days_old * DAY)
            conn.execute("UPDATE notifications SET abandoned = ? WHERE id = ?", (abandoned, id_))

        db.call(add)

    notification("recordings/announcing.wav", 0, 8)
    notification("recordings/given-up.wav", 1, 8)  # given up 8 days ago: kept 14
    notification("recordings/older.wav", 1, 15)  # given up 15 days ago: deleted
    records = CallRecords(db)
    for n, days_old in enumerate((400, 366, 364)):
        one = record(n)
        ended = NOW - days_old * DAY
        records.add(type(one)(**{**one.__dict__, "started": ended - 60, "ended": ended})).result()

    swept = sweeper.sweep(NOW)

    assert swept.deleted == {
        "sales": {"call_logs": 1, "recordings": 2, "call_records": 2, "notifications": 1},
        "support": {"call_logs": 1},
    }
    assert names(store, "sales") == {
        "logs/new.log",
        "logs/edge.log",
        "recordings/new.wav",
        "recordings/making.wav",
        "recordings/announcing.wav",
        "prompts/welcome.wav",
    }
    assert names(store, "support") == {"recordings/a.wav"}
    assert names(store, "other") == {"logs/a.log"}
    left = records.page(Filters(), 0, 10).records
    assert [r.call_id for _, r in left] == ["call-2"]
    kept = db.call(lambda c: c.execute("SELECT body FROM notifications").fetchall())
    assert sorted(json.loads(b)["action_result"]["result"]["filename"] for (b,) in kept) == [
        "recordings/announcing.wav",
        "recordings/given-up.wav",
    ]
    # What was deleted, journaled: each file by name, rows by how many.
    rows = db.call(
        lambda c: c.execute("SELECT at, app, kind, name FROM deletions ORDER BY id").fetchall()
    )
    assert sorted((app, kind, name) for _, app, kind, name in rows) == sorted(
        [
            ("sales", "call_log", "logs/old.log"),
            ("sales", "recording", "recordings/old.wav"),
            ("sales", "recording", "recordings/given-up.wav"),
            ("sales", "call_records", f"2 before {NOW - 365 * DAY:.0f}"),
            ("sales", "notifications", f"1 before {NOW - 14 * DAY:.0f}"),
            ("support", "call_log", "logs/a.log"),
        ]
    )
    assert {at for at, *_ in rows} == {NOW}
    # A second sweep at the same time finds nothing more; a day later, the log at the edge.
    assert sweeper.sweep(NOW).deleted == {}
    assert sweeper.sweep(NOW + DAY).deleted == {"sales": {"call_logs": 1}}
