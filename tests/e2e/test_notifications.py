"""Recordings that are never lost, through real calls: encryption, notifications, kill -9.

SIPp calls ``callhook serve`` with real speech; the application is a real
local HTTP server. The encrypted file is decrypted with the real ``openssl``
binary; ``serve`` is killed with SIGKILL and started again on the same data
directory, and the notifications it owed must still arrive.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from callhook.devtools.harness import AppServer, Received, Reply
from callhook.media import wav
from tests import leaks
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

DATA = Path(__file__).parent.parent / "data"
KEY = "8a" * 8 + "4c" * 8 + "91" * 8 + "e3" * 8
IV = "0123456789abcdef" * 2
CIPHER = {"type": "aescbc", "key": KEY, "initialisation_vector": IV}
leaks.used(KEY, "ff" * 32)  # the right key and the wrong one the tests try: never logged


def clip(name: str = "*jackson_0.wav") -> np.ndarray:
    (path,) = sorted((DATA / "speech").glob(name))[:1]
    return wav.decode_to_8k(path.read_bytes())


def similarity(recorded: np.ndarray, sent: np.ndarray) -> float:
    """How well ``sent`` matches the best-aligned stretch of ``recorded`` (1.0: the same)."""
    got, ref = recorded.astype(np.float64), sent.astype(np.float64)
    at = int(np.argmax(np.correlate(got, ref, mode="valid")))
    window = got[at : at + len(ref)]
    return float(np.dot(window, ref) / (np.linalg.norm(window) * np.linalg.norm(ref) + 1e-9))


def talking(seconds: float) -> Stream:
    """A caller who talks for ``seconds`` (real recordings of spoken digits, back to back)."""
    stream = Stream(seconds + 0.5)
    at = 0.3
    for path in sorted((DATA / "speech").glob("*jackson*.wav")) * 4:
        samples = wav.decode_to_8k(path.read_bytes())
        if at + len(samples) / 8000 > seconds:
            break
        stream.speech(samples, at=at)
        at += len(samples) / 8000 + 0.15
    return stream


def record(**props: Any) -> dict[str, Any]:
    return {
        "record": {
            "next_page": {"url": "/recorded"},
            "recording_available_page": {"url": "/available"},
            "milliseconds_max_silence": 1000,
            **props,
        }
    }


def parts(tmp_path: Path, stream: Stream, codec: str = "PCMU", wait_ms: int = 30000) -> list[str]:
    pcap = stream.write_pcap(tmp_path / f"caller-{codec}.pcap")
    return [
        sipp.invite("ivr", codec, True),
        sipp.ANSWERED,
        sipp.PLAY.format(pcap=pcap),
        sipp.BYE_FROM_SERVER.format(timeout_ms=wait_ms),
    ]


def call_log(data_dir: Path) -> str:
    return "".join(p.read_text() for p in (data_dir / "media" / "default" / "logs").glob("*.log"))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
async def test_encrypted_recording_openssl_decrypts_it_and_play_needs_the_right_key(
    tmp_path: Path, app: AppServer
) -> None:
    speech = clip()
    wrong = {**CIPHER, "key": "ff" * 32}

    def recorded(request: Received) -> list[dict[str, Any]]:
        name = request.json["action_result"]["result"]["filename"]
        return [
            {"play": {"play_list": [{"file_to_play": name, "decryption_cipher": CIPHER}]}},
            {"play": {"play_list": [{"file_to_play": name, "decryption_cipher": wrong}]}},
            {"hang_up": {}},
        ]

    app.page("/start", [record(encryption_cipher=CIPHER)])
    app.page("/recorded", recorded)
    app.page("/available", None)
    app.page("/final", None)
    stream = Stream(6.0, law="alaw", payload_type=8).speech(speech, at=0.8)
    data_dir = tmp_path / "data"
    async with Server.for_app(data_dir, app) as server:
        run = await sipp.call(server.sip, tmp_path, *parts(tmp_path, stream, "PCMA"))
        assert await wait_for_request(app, "/available"), server.output
    assert run.returncode == 0, run.output + run.errors + server.output

    (next_page,) = app.bodies("/recorded")
    result = next_page["action_result"]["result"]
    assert result["file_available"] is False
    path = data_dir / "media" / "default" / result["filename"]
    encrypted = path.read_bytes()
    assert encrypted[:4] != b"RIFF"  # the plaintext never touched the disk
    plain = subprocess.run(
        ["openssl", "enc", "-d", "-aes-256-cbc", "-K", KEY, "-iv", IV],
        input=encrypted,
        capture_output=True,
        check=True,
    ).stdout
    info = wav.read_info(plain)
    assert info.format_tag == wav.FORMAT_ALAW  # the call's codec
    assert info.data_length == len(plain) - info.data_offset  # real sizes, not "unknown"
    assert info.seconds == pytest.approx(result["seconds_duration"], abs=0.06)
    assert similarity(wav.decode_to_8k(plain), speech) > 0.95

    log = call_log(data_dir)
    assert log.count(f"file {result['filename']}") == 2  # both plays started
    assert "cannot be decrypted with its decryption_cipher" in log
    assert log.count("could not be played") == 1  # the right key played cleanly
    assert KEY not in log and KEY not in server.output  # keys are never logged

    (notice,) = [r for r in app.requests if r.path == "/available"]
    paths = [r.path for r in app.requests]
    assert paths.index("/recorded") < paths.index("/available")  # next_page first
    assert notice.signature_ok(app.secret)
    body = notice.json
    assert body["is_notification"] is True
    assert "this_call" not in body
    assert body["action_result"] == {
        "action": "record",
        "result": {**result, "file_available": True},
    }


async def test_a_notification_pending_at_kill_9_arrives_after_the_restart(
    tmp_path: Path, app: AppServer
) -> None:
    answers: list[int] = []

    def available(_: Received) -> Reply:
        answers.append(204)
        return Reply(status=204)

    app.page("/start", [record()])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/available", lambda r: Reply(status=503))
    app.page("/final", None)
    stream = Stream(5.0).speech(clip(), at=0.5)
    data_dir = tmp_path / "data"
    server = Server.for_app(data_dir, app)
    async with server:
        run = await sipp.call(server.sip, tmp_path, *parts(tmp_path, stream))
        assert run.returncode == 0, run.output + run.errors + server.output
        assert await wait_for_request(app, "/available"), server.output  # answered 503
        assert server.proc is not None
        server.proc.kill()  # SIGKILL: no clean shutdown of anything
        await server.proc.wait()
    assert "failed (attempt 1)" in server.output
    (recorded,) = app.bodies("/recorded")
    filename = recorded["action_result"]["result"]["filename"]

    app.page("/available", available)
    first = len(app.bodies("/available"))
    async with Server.for_app(data_dir, app) as again:
        for _ in range(200):
            if 204 in answers:
                break
            await asyncio.sleep(0.05)
        assert 204 in answers, again.output
        secret = (data_dir / "secret").read_text().strip()
        # The 2xx is counted once the outbox has forgotten the notification: a moment
        # after the application answered (longer on a loaded machine).
        for _ in range(100):
            async with (
                aiohttp.ClientSession() as client,
                client.get(
                    f"http://127.0.0.1:{again.http_port}/api/stats",
                    headers={"Authorization": f"Bearer {secret}"},
                ) as response,
            ):
                stats = await response.json()
            if stats["notifications"]["delivered"]:
                break
            await asyncio.sleep(0.05)
        assert stats["notifications"]["delivered"] == 1, stats
    notices = app.bodies("/available")[first:]
    assert len(notices) == 1  # delivered once, not again after its 2xx
    assert notices[0]["action_result"]["result"]["filename"] == filename
    assert notices[0]["action_result"]["result"]["file_available"] is True


async def test_a_recording_cut_by_kill_9_is_recovered_and_announced(
    tmp_path: Path, app: AppServer
) -> None:
    app.page("/start", [record(seconds_max_duration=60, milliseconds_max_silence=5000, id="m1")])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/available", None)
    app.page("/final", None)
    data_dir = tmp_path / "data"
    folder = data_dir / "media" / "default" / "recordings"
    server = Server.for_app(data_dir, app)
    async with server:
        caller = asyncio.create_task(
            sipp.call(server.sip, tmp_path, *parts(tmp_path, talking(5.0), wait_ms=4000))
        )
        # Wait until the file holds 1.5 s of audio, then kill -9 in mid-recording.
        for _ in range(400):
            files = list(folder.glob("*.wav")) if folder.exists() else []
            if files and files[0].stat().st_size > 58 + 12000:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"no recording in progress:\n{server.output}")
        assert server.proc is not None
        server.proc.kill()
        await server.proc.wait()
    assert not app.bodies("/recorded") and not app.bodies("/available")
    (path,) = files

    async with Server.for_app(data_dir, app) as again:
        assert await wait_for_request(app, "/available"), again.output
    assert "interrupted by a restart" in again.output
    (notice,) = app.bodies("/available")
    result = notice["action_result"]["result"]
    assert result["filename"] == str(path.relative_to(data_dir / "media" / "default"))
    assert result["reason"] == "error"
    assert result["id"] == "m1"
    assert result["file_available"] is True
    assert result["contains_sound"] is True
    data = path.read_bytes()
    info = wav.read_info(data)
    assert info.data_length == len(data) - info.data_offset  # header fixed
    assert info.seconds == pytest.approx(result["seconds_duration"], abs=0.06)
    assert info.seconds >= 1.5
    await caller  # SIPp gives up on its own (no BYE will come from the dead server)


@pytest.mark.parametrize("workers", [WORKERS[1]])
async def test_a_workers_notification_rings_the_worker_that_delivers(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """Workers behind Kamailio share the SQLite outbox, and one of them delivers. Two
    calls, one on each worker (round robin), record: both notifications arrive, and the
    delivering worker was rung by the other (``doorbell_rings`` in ``/api/stats``), so the
    other's did not wait for its next look at the outbox."""
    app.page("/start", [record()])
    app.page("/recorded", [{"hang_up": {}}])
    app.page("/available", None)
    app.page("/final", None)
    stream = Stream(3.0).speech(clip(), at=0.3)
    async with served(tmp_path, app, workers) as server:
        for _ in range(2):
            run = await sipp.call(server.sip, tmp_path, *parts(tmp_path, stream))
            assert run.returncode == 0, run.output + run.errors + server.output
        for _ in range(300):
            if len(app.bodies("/available")) == 2:
                break
            await asyncio.sleep(0.1)
        status, stats = await server.api("GET", "/api/stats")
    assert len(app.bodies("/available")) == 2, server.output
    assert status == 200, stats
    assert [sum(w["calls_ended"].values()) for w in stats["workers"]] == [1, 1], stats
    rings = sorted(w["notifications"].get("doorbell_rings", 0) for w in stats["workers"])
    assert rings[0] == 0 and rings[1] >= 1, stats
