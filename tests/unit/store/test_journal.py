"""The recordings journal and the notification outbox, on a real SQLite file and on a real
PostgreSQL server (every test that takes ``db`` runs on both: one code, two dialects)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from callhook.media import g711, tones, wav
from callhook.store.database import Database, Ownership
from callhook.store.journal import RecordingJournal
from callhook.store.outbox import Outbox, RetryPolicy
from callhook.store.postgres import PostgresDatabase
from tests.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)

BODY = {"application_instance_id": "i1", "token": "t", "log_filename": "logs/i1.log"}
RESULT = {
    "filename": "recordings/r.wav",
    "file_available": False,
    "id": "msg",
    "contains_sound": True,
    "seconds_duration": 1.2,
    "reason": "silence",
}


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        database = Database(tmp_path / "state.sqlite3")
    else:
        database = PostgresDatabase(request.getfixturevalue("postgres_url"))
    yield database
    database.close()


def notifications(db: Database) -> list[tuple[Any, ...]]:
    return db.call(
        lambda c: c.execute("SELECT app, url, method, body FROM notifications").fetchall()
    )


def recordings(db: Database) -> list[tuple[Any, ...]]:
    return db.call(lambda c: c.execute("SELECT app, filename FROM recordings").fetchall())


def start(
    journal: RecordingJournal, notify: tuple[str, str] | None = ("http://a/n", "POST")
) -> None:
    journal.started(
        "app", "recordings/r.wav", encrypted=False, record_id="msg", notify=notify, body=BODY
    ).result()


@pytest.mark.parametrize("durable_first", [False, True])
def test_the_notification_is_queued_once_completed_and_durable(
    db: Database, durable_first: bool
) -> None:
    queued: list[int] = []
    journal = RecordingJournal(db, on_queued=lambda: queued.append(1))
    start(journal)
    steps = [
        lambda: journal.completed("app", "recordings/r.wav", RESULT).result(),
        lambda: journal.durable("app", "recordings/r.wav", 9600).result(),
    ]
    if durable_first:
        steps.reverse()
    steps[0]()
    assert notifications(db) == [] and queued == []  # half-way: nothing announced yet
    steps[1]()
    ((app, url, method, body),) = notifications(db)
    assert (app, url, method) == ("app", "http://a/n", "POST")
    notice = json.loads(body)
    assert notice["application_instance_id"] == "i1"
    assert notice["action_result"] == {
        "action": "record",
        "result": {**RESULT, "file_available": True},
    }
    assert queued == [1]
    assert recordings(db) == []  # announced: out of the journal


@pytest.mark.parametrize("when", ["before_durable", "after_queued"])
def test_a_deleted_recording_is_never_announced(db: Database, when: str) -> None:
    journal = RecordingJournal(db)
    start(journal)
    journal.started(
        "app",
        "recordings/other.wav",
        encrypted=False,
        record_id="",
        notify=("http://a/n", "POST"),
        body=BODY,
    ).result()
    journal.completed("app", "recordings/r.wav", RESULT).result()
    journal.completed("app", "recordings/other.wav", {**RESULT, "filename": "recordings/other.wav"})
    journal.durable("app", "recordings/other.wav", 100).result()
    if when == "after_queued":
        journal.durable("app", "recordings/r.wav", 9600).result()
        assert len(notifications(db)) == 2
    journal.deleted("app", "recordings/r.wav").result()
    journal.durable("app", "recordings/r.wav", 9600).result()  # a finisher that comes late
    # Only the other recording is still to be announced.
    ((_, _, _, body),) = notifications(db)
    assert json.loads(body)["action_result"]["result"]["filename"] == "recordings/other.wav"
    assert recordings(db) == []


def test_without_a_recording_available_page_nothing_is_queued(db: Database) -> None:
    journal = RecordingJournal(db)
    start(journal, notify=None)
    journal.completed("app", "recordings/r.wav", RESULT).result()
    journal.durable("app", "recordings/r.wav", 100).result()
    assert notifications(db) == [] and recordings(db) == []


def _plain_recording(root: Path, seconds: float) -> Path:
    path = root / "app" / "recordings" / "r.wav"
    path.parent.mkdir(parents=True)
    sound = g711.encode("ulaw", tones.tone(300.0, seconds))
    # A crash after the first header: the header says 0 bytes, the file holds them all.
    path.write_bytes(wav.g711_header("ulaw", 0) + sound)
    return path


def test_recovery_reports_an_interrupted_recording_with_reason_error(
    db: Database, tmp_path: Path
) -> None:
    journal = RecordingJournal(db)
    start(journal)
    path = _plain_recording(tmp_path / "media", 2.0)
    after_restart = RecordingJournal(db)
    assert after_restart.recover(lambda app, name: tmp_path / "media" / app / name) == 1
    assert wav.read_info(path.read_bytes()).seconds == pytest.approx(2.0)
    ((_, _, _, body),) = notifications(db)
    result = json.loads(body)["action_result"]["result"]
    assert result == {
        "filename": "recordings/r.wav",
        "file_available": True,
        "id": "msg",
        "contains_sound": True,
        "seconds_duration": 2.0,
        "reason": "error",
    }
    assert recordings(db) == []


def test_recovery_of_a_stereo_call_recording_counts_its_seconds_per_channel(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A connect's separate-mode call recording (two channels) cut by a crash: 2 s of it
    are 2 s, not 4 (its journal body says it has two channels)."""
    RecordingJournal(db).started(
        "app",
        "recordings/r.wav",
        encrypted=False,
        record_id="",
        notify=None,
        body={"channels": 2},
    ).result()
    path = tmp_path / "media" / "app" / "recordings" / "r.wav"
    path.parent.mkdir(parents=True)
    sound = g711.encode("ulaw", tones.tone(300.0, 4.0))  # 2 s of two interleaved channels
    path.write_bytes(wav.g711_header("ulaw", 0, channels=2) + sound)
    assert RecordingJournal(db).recover(lambda app, name: tmp_path / "media" / app / name) == 1
    assert "2.0 s kept" in caplog.text, caplog.text
    assert wav.read_info(path.read_bytes()).channels == 2
    assert recordings(db) == [] and notifications(db) == []  # nothing announces it


def test_recovery_keeps_the_result_of_a_completed_recording(db: Database, tmp_path: Path) -> None:
    journal = RecordingJournal(db)
    start(journal)
    journal.completed("app", "recordings/r.wav", RESULT).result()  # then the crash, before fsync
    _plain_recording(tmp_path / "media", 1.2)
    RecordingJournal(db).recover(lambda app, name: tmp_path / "media" / app / name)
    ((_, _, _, body),) = notifications(db)
    assert json.loads(body)["action_result"]["result"]["reason"] == "silence"


def test_recovery_of_a_missing_file_announces_nothing(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start(RecordingJournal(db))
    RecordingJournal(db).recover(lambda app, name: tmp_path / "nowhere" / name)
    assert notifications(db) == [] and recordings(db) == []
    assert "its file is missing" in caplog.text


# --- the outbox --------------------------------------------------------------------------


def test_retry_delays_double_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(first_delay=2.0, max_delay=60.0)
    rng = random.Random(7)
    for attempts, base in [(1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0), (6, 60.0), (30, 60.0)]:
        delays = [policy.delay(attempts, rng) for _ in range(200)]
        assert min(delays) >= base * 0.5 and max(delays) <= base * 1.5
        assert max(delays) - min(delays) > base * 0.5  # really spread


async def test_due_serves_every_application_despite_one_backlog(db: Database) -> None:
    outbox = Outbox(db)
    for _ in range(50):
        await outbox.add("slow", "http://slow/n", "POST", {}, 100.0)
    await outbox.add("fast", "http://fast/n", "POST", {}, 101.0)
    first = await outbox.due(200.0, {}, per_app=4, total=64, skip=set())
    assert [n.app for n in first].count("slow") == 4
    assert [n.app for n in first].count("fast") == 1
    # All five in flight (slow at its limit): nothing more is handed out.
    busy = {"slow": 4}
    again = await outbox.due(200.0, busy, per_app=4, total=64, skip={n.id for n in first})
    assert again == []
    assert await outbox.due(50.0, {}, per_app=4, total=64, skip=set()) == []  # not due yet


async def test_failed_attempts_are_rescheduled_then_abandoned(db: Database) -> None:
    outbox = Outbox(db, RetryPolicy(first_delay=10.0, give_up_after=3600.0), seed=1)
    await outbox.add("a", "http://a/n", "POST", {"x": 1}, 0.0)
    (n,) = await outbox.due(0.0, {}, 4, 64, set())
    retry = await outbox.failed(n, "HTTP 503", 1.0)
    assert retry is not None and 6.0 <= retry <= 16.0
    assert await outbox.due(retry - 0.01, {}, 4, 64, set()) == []
    (n,) = await outbox.due(retry, {}, 4, 64, set())
    assert n.attempts == 1
    assert await outbox.failed(n, "HTTP 503", 3600.0) is None
    assert await outbox.counts() == {"pending": 0, "abandoned": 1}
    assert await outbox.next_due(set()) is None


async def test_delivered_is_never_sent_again(db: Database) -> None:
    outbox = Outbox(db)
    await outbox.add("a", "http://a/n", "POST", {}, 0.0)
    (n,) = await outbox.due(0.0, {}, 4, 64, set())
    await outbox.delivered(n.id)
    assert await outbox.due(1e12, {}, 4, 64, set()) == []
    assert await outbox.counts() == {"pending": 0, "abandoned": 0}


# --- several processes on one data directory ---------------------------------------------


def test_ownership_locks_follow_the_processes(tmp_path: Path) -> None:
    serve, call = Ownership(tmp_path), Ownership(tmp_path)
    assert serve.token in call.others() and call.token in serve.others()
    assert call.claim(serve.token) is None  # alive
    assert serve.deliver_notifications() is True
    assert call.deliver_notifications() is False  # one process delivers at a time
    serve.close()  # a clean exit: its lock file goes, the delivering passes on
    assert serve.token not in call.others()
    assert call.deliver_notifications() is True
    call.close()


def test_recovery_leaves_a_live_process_recordings_alone(db: Database, tmp_path: Path) -> None:
    """``callhook call`` starting beside a running ``serve`` must not take its recordings."""
    serve = Ownership(tmp_path)
    start(RecordingJournal(db, ownership=serve))
    path = _plain_recording(tmp_path / "media", 1.0)
    before = path.read_bytes()
    call = Ownership(tmp_path)
    assert (
        RecordingJournal(db, ownership=call).recover(lambda a, n: tmp_path / "media" / a / n) == 0
    )
    assert recordings(db) == [("app", "recordings/r.wav")]
    assert path.read_bytes() == before  # not touched while it is being written
    os.close(serve._own)  # serve is killed: the kernel drops its lock, the file stays
    restarted = Ownership(tmp_path)
    journal = RecordingJournal(db, ownership=restarted)
    assert journal.recover(lambda a, n: tmp_path / "media" / a / n) == 1
    assert recordings(db) == []
    assert len(notifications(db)) == 1
    assert serve.token not in restarted.others()  # the dead process's lock file is cleared
    call.close()
    restarted.close()
