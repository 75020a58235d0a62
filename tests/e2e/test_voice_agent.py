"""The example voice agent (examples/voice_agent.py) on a real call: a SIPp caller calls
serve, whose application connects it to the agent over a WebSocket; the caller says a
number (twenty one), presses a key (4) and says goodbye; the agent answers each (its own
TTS, heard by its own recogniser) and hangs up. The bridged call is recorded, the agent on the right
channel, and what the agent said is transcribed from there."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from callhook.edge.speechworkers import build_recogniser, build_synthesiser
from callhook.events import RecognitionOptions
from callhook.media import g711, wav
from tests.e2e import sipp
from tests.e2e.harness import Server, free_tcp_port, wait_for_request
from tests.e2e.rtpstream import Stream

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

ROOT = Path(__file__).resolve().parents[2]


def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "the voice agent exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError("the voice agent did not start listening")


async def test_the_example_agent_doubles_a_spoken_number_and_a_key_then_hangs_up(
    tmp_path: Path, app: AppServer
) -> None:
    port = free_tcp_port()
    agent = subprocess.Popen(
        [sys.executable, "examples/voice_agent.py", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        await asyncio.to_thread(wait_for_port, port, agent)
        app.page(
            "/start",
            [
                {
                    "connect": {
                        "destinations": [f"ws://127.0.0.1:{port}/agent"],
                        "secondary_call": {
                            "call_recording": True,
                            "call_recording_mode": "separate",
                        },
                        "next_page": {"url": "/connected"},
                    }
                }
            ],
        )
        app.page("/connected", [{"hang_up": {}}])
        app.page("/final", None)
        synthesiser = build_synthesiser("piper:joe")
        assert synthesiser is not None
        goodbye = synthesiser.speak("Goodbye.")
        number = synthesiser.speak("Twenty one.")
        # The greeting takes about 3 s; then a number, a key, goodbye, each well after the
        # agent's answer to the one before (speech over an answer would cut it short:
        # the agent's barge-in), even on a loaded machine.
        stream = Stream(20.0).speech(number, at=4.5).rfc4733("4", at=10.5).speech(goodbye, at=16.0)
        pcap = stream.write_pcap(tmp_path / "caller.pcap")
        config = tmp_path / "callhook.toml"
        config.write_text(f'[egress]\nendpoints = ["127.0.0.1:{port}"]\n')
        async with Server.for_app(tmp_path / "data", app, extra=("--config", str(config))) as s:
            run = await sipp.call(
                s.sip,
                tmp_path,
                sipp.invite("ivr"),
                sipp.ANSWERED,
                sipp.PLAY.format(pcap=pcap),
                sipp.BYE_FROM_SERVER.format(timeout_ms=40000),
            )
            assert run.returncode == 0, run.output + run.errors + s.output
            assert await wait_for_request(app, "/connected"), s.output
    finally:
        agent.terminate()
        said, _ = agent.communicate(timeout=10)
    log = said.decode(errors="replace")
    (tmp_path / "agent.log").write_text(log)
    log = "\n".join(line for line in log.splitlines() if " heard " in line or " said " in line)
    (connected,) = app.bodies("/connected")
    result = connected["action_result"]["result"]
    # The agent hung up after goodbye, with its raw cause.
    assert result["connected"] is True, (result, log)
    assert (result["call_cause"], result["call_raw_cause"]) == ("hung_up", "200"), log
    # What the caller heard from the agent: its right channel of the recording.
    (path,) = (tmp_path / "data" / "media").glob(f"*/{result['call_recording_filename']}")
    data = path.read_bytes()
    info = wav.read_info(data)
    audio = data[info.data_offset : info.data_offset + info.data_length]
    right = g711.decode("ulaw", audio[1::2])
    recogniser = build_recogniser("whisper", "tiny.en")
    assert recogniser is not None
    heard = []
    for start in range(0, len(right), 8000 * 20):  # Whisper's window is 30 s
        piece = right[start : start + 8000 * 20]
        if len(piece) and float(np.abs(piece.astype(np.int32)).max()) > 500:
            found = recogniser.recognise(piece, RecognitionOptions())
            heard.append(found[0].text if found else "")
    text = " ".join(heard).lower()
    assert "double" in text, (text, log)  # the greeting
    assert "42" in text or "forty" in text, (text, log)  # "21 doubled is 42."
    assert "8" in text or "eight" in text, (text, log)  # the key: "4 doubled is 8."
    assert "goodbye" in text or "good bye" in text, (text, log)
