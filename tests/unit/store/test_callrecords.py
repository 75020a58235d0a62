"""The call records table (store/callrecords.py) in SQLite and in a real PostgreSQL: rows
written, listed oldest first through pages, filtered by application, time and cause; a
full disk costs the record, said once in the log, never the call."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callhook.store.callrecords import CallRecord, CallRecords, Filters
from callhook.store.database import Database
from callhook.store.postgres import PostgresDatabase
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        database = Database(tmp_path / "state.sqlite3")
    else:
        database = PostgresDatabase(request.getfixturevalue("postgres_url"))
        database.call(lambda c: c.execute("DELETE FROM call_records"))
    yield database
    database.close()


def record(n: int, app: str = "sales", cause: str = "completed") -> CallRecord:
    answered = None if cause == "no_answer" else 1000.0 + n + 0.5
    return CallRecord(
        app=app,
        call_id=f"call-{n}",
        instance_id=f"i{n}",
        leg="call",
        parent_call_id="",
        direction="in",
        call_from="sip:alice@example.com",
        call_to="sip:sales@callhook",
        trunk="",
        worker=None,
        started=1000.0 + n,
        answered=answered,
        ended=1000.0 + n + 3.0,
        seconds=2.5 if answered is not None else 0.0,
        cause=cause,
        raw_cause="200" if cause == "completed" else "487",
        recordings=n % 2,
        pages=3,
        pages_failed=0,
    )


def test_records_are_paged_oldest_first_and_filtered(db: Database) -> None:
    records = CallRecords(db)
    written = [
        record(0),
        record(1, cause="no_answer"),
        record(2, app="support"),
        record(3),
        record(4),
        record(5, app="support", cause="busy"),
    ]
    for one in written:
        records.add(one).result()

    def every(filters: Filters, limit: int) -> list[list[CallRecord]]:
        pages, after = [], 0
        while True:
            page = records.page(filters, after, limit)
            pages.append([r for _, r in page.records])
            if page.next is None:
                return pages
            after = page.next

    assert every(Filters(), 4) == [written[:4], written[4:]]
    assert every(Filters(), 3) == [written[:3], written[3:]]  # (no empty page at the end)
    assert every(Filters(apps=("sales",)), 2) == [
        [written[0], written[1]],
        [written[3], written[4]],
    ]
    assert every(Filters(apps=("support", "nobody")), 10) == [[written[2], written[5]]]
    # started in [since, until)
    assert every(Filters(since=1001.0, until=1004.0), 10) == [written[1:4]]
    assert every(Filters(cause="no_answer"), 10) == [[written[1]]]
    assert every(Filters(apps=("support",), cause="completed"), 10) == [written[2:3]]
    assert every(Filters(apps=("nobody",)), 10) == [[]]


def test_a_record_the_disk_refuses_is_said_once_and_the_next_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(tmp_path / "state.sqlite3")
    records = CallRecords(db)
    try:
        pages = db.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        db.call(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))  # a full disk
        big = [record(n) for n in range(200)]  # (the table must grow)
        with caplog.at_level(logging.WARNING, "callhook.store"):
            futures = [records.add(one) for one in big]
            failed = [f.exception() for f in futures if f.exception() is not None]
            assert len(failed) > 150 and all("full" in str(exc) for exc in failed)
            refused = [r for r in caplog.records if "could not be written" in r.getMessage()]
            assert len(refused) == 1, caplog.text
            db.call(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))
            records.add(record(1000)).result()
            assert "call records are written again" in caplog.text
        page = records.page(Filters(), 0, 1000)
        kept = len(big) - len(failed)
        assert [r.call_id for _, r in page.records][kept:] == ["call-1000"]
    finally:
        db.close()
