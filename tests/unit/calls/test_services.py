"""The composition root's file helpers: prompt lengths for the terminal, silent recordings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from callhook.app import build_services
from callhook.calls.services import Services
from callhook.config.settings import AppConfig, Settings
from callhook.config.tables import SpeechSettings
from callhook.events import PlayFile, StartRecording
from callhook.media import g711, tones, wav
from callhook.ports import CallInfo
from callhook.store import crypto
from tests import leaks

KEY, IV = "1f" * 32, "e0" * 16
leaks.used(KEY)
CIPHER = ("aescbc", KEY, IV)
APP = AppConfig(name="demo", first_page="http://127.0.0.1:9/start", secret="s")


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    built = build_services(
        Settings(data_dir=tmp_path, speech=SpeechSettings(recogniser="none", preload=False))
    )
    yield built
    await built.close()


def test_prompt_timer_reads_plain_and_encrypted_files(services: Services) -> None:
    audio = wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(500.0, 1.25)))
    services.store.path("demo", "a.wav").parent.mkdir(parents=True, exist_ok=True)
    services.store.path("demo", "a.wav").write_bytes(audio)
    key = crypto.Key.from_hex(KEY, IV)
    services.store.path("demo", "b.wav").write_bytes(crypto.encrypt(audio, key))
    timer = services.prompt_timer(APP)
    assert timer.seconds(PlayFile("a.wav")) == pytest.approx(1.25)
    assert timer.seconds(PlayFile("b.wav", CIPHER)) == pytest.approx(1.25)
    with pytest.raises(FileNotFoundError, match="wrong key"):
        timer.seconds(PlayFile("b.wav", ("aescbc", "00" * 32, IV)))
    with pytest.raises(FileNotFoundError, match="not a RIFF/WAVE file"):
        timer.seconds(PlayFile("b.wav"))  # encrypted, played without its cipher


async def test_a_terminal_recording_is_encrypted_and_announced(services: Services) -> None:
    """The terminal phone's (silent) recording follows the action: cipher, journal, outbox."""
    command = StartRecording("recordings/r.wav", "alaw", CIPHER)
    services.journal.started(
        "demo",
        "recordings/r.wav",
        encrypted=True,
        record_id="x",
        notify=("http://127.0.0.1:9/available", "POST"),
        body={"is_notification": True},
    )
    assert services.record_silence(APP, command, 0.5) == pytest.approx(0.5)
    services.journal.completed("demo", "recordings/r.wav", {"filename": "recordings/r.wav"})
    data = services.store.path("demo", "recordings/r.wav").read_bytes()
    for _ in range(200):  # the file is finished on a worker thread
        if await services.outbox.next_due(set()) is not None:
            break
        await asyncio.sleep(0.01)
    plain = crypto.decrypt_wav(services.store.path("demo", "recordings/r.wav").read_bytes(),
                               crypto.Key.from_hex(KEY, IV))  # fmt: skip
    assert data[:4] != b"RIFF"
    assert wav.read_info(plain).format_tag == wav.FORMAT_ALAW
    assert wav.read_info(plain).seconds == pytest.approx(0.5)
    rows = services.db.call(lambda c: c.execute("SELECT body FROM notifications").fetchall())
    assert [json.loads(b)["action_result"]["result"]["file_available"] for (b,) in rows] == [True]


class _LaggingLeg:
    """A leg whose media time is told (as the media engine moves a call's, behind the loop's
    clock when the loop runs behind the wire)."""

    def __init__(self, media: float) -> None:
        self.info = CallInfo("c1")
        self.media = media

    def media_time(self) -> float:
        return self.media

    async def wait_ended(self) -> None:  # (the runner only keeps it)
        await asyncio.Event().wait()


def test_a_call_log_is_stamped_on_the_calls_media_time(services: Services) -> None:
    """The log's ``+`` column is the call's media time, the clock of its events and of the
    timers its ``timers`` lines give: not the server's, which runs ahead of it while the
    loop is behind."""
    leg = _LaggingLeg(media=-500.0)  # (far from the server's monotonic clock)
    runner = services.runner(APP, leg)  # type: ignore[arg-type]
    leg.media = -497.25
    runner.log.write("digit", "1")
    assert runner.log.lines[-1].split()[1:] == ["+2.750", "digit", "1"]
    assert runner.log.since(-497.0) == pytest.approx(3.0)  # a timer line's times agree
    runner.log.close()


async def test_metrics_read_the_outbox_when_scraped(
    services: Services, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3
    import time

    from callhook.monitoring import prometheus

    def values(text: str) -> dict[str, float]:
        return {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if line.startswith("callhook_notification")
        }

    now = time.time()
    await services.outbox.add("demo", "http://127.0.0.1:9/a", "POST", {}, now - 30)
    await services.outbox.add("demo", "http://127.0.0.1:9/b", "POST", {}, now + 60)
    text = prometheus.exposition(await services.outbox_metrics())[0].decode()
    got = values(text)
    assert got['callhook_notifications{state="pending"}'] == 2
    assert got['callhook_notifications{state="abandoned"}'] == 0
    assert 29 <= got["callhook_notification_oldest_due_seconds"] < 40

    # A database that cannot be read: the rest is still told, the cause said once.
    async def locked() -> dict[str, int]:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(services.outbox, "counts", locked)
    assert await services.outbox_metrics() == []
    assert await services.outbox_metrics() == []
    said = [r for r in caplog.records if "the outbox cannot be read" in r.getMessage()]
    assert len(said) == 1


async def test_a_calls_record_is_on_the_wall_clock(services: Services) -> None:
    """The summary's times are on the calls' monotonic clock; the record's, Unix seconds."""
    import time

    from callhook.calls.runner import CallSummary
    from callhook.store.callrecords import Filters

    now, wall = services.clock.now(), time.time()
    summary = CallSummary("inst", "completed", "200", pages=["a", "b"], pages_failed=1)
    summary.started_at, summary.answered_at, summary.ended_at = now - 10, now - 8, now - 1
    summary.recordings = 2
    info = CallInfo("c1", "out", "sip:me@here", "sip:you@there", trunk="provider")
    services.record(APP, info, summary, started=wall - 12)
    for _ in range(100):
        page = await asyncio.to_thread(services.records.page, Filters(), 0, 10)
        if page.records:
            break
        await asyncio.sleep(0.01)
    ((_, record),) = page.records
    assert record.started == pytest.approx(wall - 12, abs=0.05)  # placed before it ran
    assert record.answered == pytest.approx(wall - 8, abs=0.05)
    assert record.ended == pytest.approx(wall - 1, abs=0.05)
    assert record.seconds == pytest.approx(7.0)
    assert (record.app, record.call_id, record.instance_id) == ("demo", "c1", "inst")
    assert (record.direction, record.trunk, record.worker) == ("out", "provider", None)
    assert (record.pages, record.pages_failed, record.recordings) == (2, 1, 2)
    assert (record.cause, record.raw_cause, record.leg) == ("completed", "200", "call")


async def test_a_database_refusing_at_start_up_does_not_stop_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The recordings interrupted by a restart are looked for at start-up; a full disk then
    is one line, and the start goes on (a worker restarted on a full disk died at once,
    again and again); a bug still stops it."""
    import sqlite3

    from callhook.store.journal import RecordingJournal

    def full(self: RecordingJournal, *args: object, **kwargs: object) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(RecordingJournal, "recover", full)
    settings = Settings(data_dir=tmp_path, speech=SpeechSettings(recogniser="none", preload=False))
    built = build_services(settings)
    await built.close()
    (line,) = [r for r in caplog.records if "interrupted by a restart" in r.getMessage()]
    assert line.getMessage() == (
        "could not finish the recordings interrupted by a restart (database or disk is full):"
        " looked for again while callhook runs"
    )
    assert line.exc_info is None

    def bug(self: RecordingJournal, *args: object, **kwargs: object) -> int:
        raise TypeError("a bug")

    monkeypatch.setattr(RecordingJournal, "recover", bug)
    with pytest.raises(TypeError):
        build_services(settings)


async def test_a_periodic_task_that_keeps_failing_says_so_once_per_cause(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    """Looking for a dead process's recordings every 10 s on a full disk: one line, not one
    every round; another cause is said; success again is said once."""
    causes = ["disk full"] * 5 + ["locked"] * 3 + [None] * 3 + ["disk full"]

    def work() -> None:
        cause = causes.pop(0) if causes else None
        if cause is not None:
            raise OSError(cause)

    task = asyncio.get_running_loop().create_task(services._every(0.001, work, "do the work"))
    async with asyncio.timeout(5):
        while causes:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    task.cancel()
    said = [r.getMessage() for r in caplog.records if "the work" in r.getMessage()]
    assert said == [
        "could not do the work: disk full (tried every 0.001 s)",
        "could not do the work: locked (tried every 0.001 s)",
        "could do the work again",
        "could not do the work: disk full (tried every 0.001 s)",
        "could do the work again",
    ]
