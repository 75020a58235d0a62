"""Retention and the disk-space floor through ``callhook serve`` (one process, and two
workers behind Kamailio): call logs, recordings and call records past their days are
deleted by serve's own sweep, the rest kept, what was deleted journaled; ``callhook sweep``
does the same at once (``--dry-run`` only tells); a recording is refused, with its cause in
the log, when its disk has less free than ``[recordings] min_free_mb``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from callhook.devtools.harness import AppServer
from callhook.media import wav
from callhook.store.callrecords import CallRecords, Filters
from callhook.store.database import Database
from callhook.store.retention import DAY
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, served, wait_for_request
from tests.unit.store.test_callrecords import record

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

RETENTION = """
[retention]
call_logs_days = 30
recordings_days = 7
call_records_days = 365
"""


def age(path: Path, days: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(b"RIFF....")
    when = time.time() - days * DAY
    os.utime(path, (when, when))


def old_state(data_dir: Path) -> None:
    """What an earlier run left: files and a call record, some past their days."""
    media = data_dir / "media" / "default"
    age(media / "logs" / "old.log", 31)
    age(media / "logs" / "recent.log", 29)
    age(media / "recordings" / "old.wav", 8)
    age(media / "recordings" / "recent.wav", 6)
    age(media / "prompts" / "welcome.wav", 400)  # uploaded: never a retention's
    db = Database(data_dir / "state.sqlite3")
    records = CallRecords(db)
    for n, days in ((1, 366), (2, 364)):
        one = record(n, app="default")
        ended = time.time() - days * DAY
        records.add(type(one)(**{**one.__dict__, "started": ended - 5, "ended": ended})).result()
    db.close()


def left(data_dir: Path) -> tuple[set[str], list[str]]:
    """The default application's files, and its call records' call ids."""
    media = data_dir / "media" / "default"
    files = {str(p.relative_to(media)) for p in media.rglob("*") if p.is_file()}
    db = Database(data_dir / "state.sqlite3")
    try:
        ids = [r.call_id for _, r in CallRecords(db).page(Filters(), 0, 100).records]
    finally:
        db.close()
    return files, ids


@pytest.mark.parametrize("workers", WORKERS)
async def test_serve_deletes_what_is_past_its_retention(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    old_state(tmp_path / "data")
    app.page("/start", [{"sleep": {"seconds": 0.3}}, {"hang_up": {}}])
    app.page("/final", None)
    async with served(tmp_path, app, workers, RETENTION) as server:
        run = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("ivr"),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/final", timeout=20)
        # serve sweeps 10 s after it starts (then hourly).
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            files, ids = left(server.data_dir)
            if "logs/old.log" not in files and "call-1" not in ids:
                break
            await asyncio.sleep(0.5)
    files, ids = left(tmp_path / "data")
    new_logs = {f for f in files if f.startswith("logs/") and f != "logs/recent.log"}
    assert len(new_logs) == 1, files  # this run's call's log
    assert files - new_logs == {"logs/recent.log", "recordings/recent.wav", "prompts/welcome.wav"}
    assert "call-1" not in ids and "call-2" in ids and len(ids) == 2, ids  # and this call's
    assert "retention: deleted 1 call logs, 1 recordings, 1 call records" in server.output
    db = Database(tmp_path / "data" / "state.sqlite3")
    try:
        rows = db.call(lambda c: c.execute("SELECT kind, name FROM deletions").fetchall())
    finally:
        db.close()
    assert sorted(kind for kind, _ in rows) == ["call_log", "call_records", "recording"]
    assert server.output.count("retention:") == 1, server.output  # one process swept


async def test_callhook_sweep_tells_then_deletes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    old_state(data_dir)
    config = tmp_path / "callhook.toml"
    config.write_text(RETENTION)
    command = [sys.executable, "-m", "callhook", "sweep", "--config", str(config)]
    command += ["--data-dir", str(data_dir)]
    told = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert told.returncode == 0, told.stderr
    assert told.stdout.splitlines() == [
        "default: would delete 1 call logs",
        "default: would delete 1 call records",
        "default: would delete 1 recordings",
    ]
    assert len(left(data_dir)[0]) == 5  # nothing deleted
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "default: deleted 1 call logs"
    files, ids = left(data_dir)
    assert files == {"logs/recent.log", "recordings/recent.wav", "prompts/welcome.wav"}
    assert ids == ["call-2"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.stdout.strip() == "nothing is past its retention"


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_recording_is_refused_below_the_free_space_floor(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    app.page(
        "/start",
        [{"record": {"next_page": {"url": "/recorded"}, "milliseconds_max_silence": 1000}}],
    )
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/final", None)
    floor = "[recordings]\nmin_free_mb = 1000000000\n"  # (a petabyte: never free here)
    async with served(tmp_path, app, workers, floor) as server:
        run = await sipp.call(
            server.sip,
            tmp_path,
            sipp.invite("rec"),
            sipp.ANSWERED,
            sipp.BYE_FROM_SERVER.format(timeout_ms=20000),
        )
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/recorded", timeout=20)
        # Nor does an upload take that room: 507, before any of it is written.
        secret = (tmp_path / "data" / "secret").read_text().strip()
        prompt = wav.g711_file("ulaw", bytes(800))
        async with (
            aiohttp.ClientSession() as http,
            http.put(
                f"http://127.0.0.1:{server.http_port}/api/v1/media/prompts/hello.wav",
                data=prompt,
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "audio/wav"},
            ) as put,
        ):
            assert put.status == 507, await put.text()
            assert (await put.json())["error"]["code"] == "storage_full"
    (body,) = app.bodies("/recorded")
    result = body["action_result"]["result"]
    assert result["reason"] == "error" and result["file_available"] is False, server.output
    assert result["seconds_duration"] == 0 and result["contains_sound"] is False
    assert not (tmp_path / "data" / "media" / "default" / result["filename"]).exists()
    # One line each, naming the cause.
    lines = [line for line in server.output.splitlines() if "min_free_mb" in line]
    assert len(lines) == 2, server.output
    assert "recording of application default is refused" in lines[0]
    assert "a media file write refused" in lines[1]
    assert "Traceback" not in server.output
