"""Aculab-style applications, written exactly as the reference writes actions, on real calls.

SIPp calls ``callhook serve``; its SDP names a socket of the test as its media
address (``rtpsink``), so the test hears what a caller would: the prompt, the
retry messages, the DTMF callhook sends. Prompts are tones of distinct
frequencies, so "the prompt was heard, then the timeout message" is a fact
about the audio, not about callhook's own log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callhook.media import g711, tones, wav
from callhook.testing import AppServer
from tests.e2e import sipp
from tests.e2e.harness import Server
from tests.e2e.rtpsink import RtpSink, dominant_hz

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PROMPT_HZ, MESSAGE_HZ = 440.0, 1000.0


def write_tone(data_dir: Path, name: str, hz: float, seconds: float = 1.0) -> str:
    """A real WAV prompt in the application's namespace of the media file store."""
    path = data_dir / "media" / "default" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(hz, seconds))))
    return name


def play(name: str) -> dict[str, Any]:
    """A play action in its wire form (reference §4.1)."""
    return {"play": {"play_list": [{"file_to_play": name}]}}


def invite_to(sink: RtpSink, telephone_event: bool = True) -> str:
    return sipp.invite("ivr", "PCMU", telephone_event).replace(
        "m=audio [media_port]", f"m=audio {sink.port}"
    )


async def call_and_listen(
    tmp_path: Path, app: AppServer, *middle: str, telephone_event: bool = True
) -> tuple[sipp.SippRun, Server, RtpSink]:
    """SIPp calls ``serve`` running ``app``; the test's socket hears the call's audio."""
    async with RtpSink() as sink, Server.for_app(tmp_path / "data", app) as server:
        parts = [invite_to(sink, telephone_event), sipp.ANSWERED, *middle]
        parts.append(sipp.BYE_FROM_SERVER.format(timeout_ms=30000))
        run = await sipp.call(server.sip, tmp_path, *parts)
    return run, server, sink


def spans(hz: list[float], wanted: float) -> list[tuple[int, int]]:
    """Runs of consecutive windows whose dominant frequency is ``wanted`` (±15 Hz)."""
    out: list[tuple[int, int]] = []
    for i, f in enumerate(hz):
        if abs(f - wanted) <= 15:
            if out and out[-1][1] == i:
                out[-1] = (out[-1][0], i + 1)
            else:
                out.append((i, i + 1))
    return out


async def test_get_number_with_keyed_prompt_and_keyed_timeout_message(
    tmp_path: Path, app: AppServer
) -> None:
    """The reference's own form: prompt heard, timeout message heard, next_page with the number."""
    data = tmp_path / "data"
    prompt = write_tone(data, "prompts/enter.wav", PROMPT_HZ)
    sorry = write_tone(data, "prompts/sorry.wav", MESSAGE_HZ)
    app.page(
        "/start",
        [
            {
                "get_number": {
                    "prompt": play(prompt),
                    "on_digit_timeout_messages": [play(sorry), play(sorry)],
                    "digit_count": 2,
                    "milliseconds_initial_timeout": 2000,
                    "next_page": {"url": "/number"},
                }
            }
        ],
    )
    app.page("/number", [{"hang_up": {}}])
    app.page("/final", None)
    # Prompt 0-1 s, 2 s of waiting, the message 3-4 s; the digits come in the next wait.
    infos = [sipp.INFO.format(cseq=2 + i, digit=d) for i, d in enumerate("42")]
    run, server, sink = await call_and_listen(tmp_path, app, sipp.PAUSE.format(ms=4800), *infos)
    assert run.returncode == 0, run.output + run.errors + server.output
    (number,) = app.bodies("/number")
    assert number["action_result"] == {"action": "get_number", "result": {"entered_number": "42"}}
    heard = dominant_hz(sink.audio())
    (prompt_span,) = spans(heard, PROMPT_HZ)
    message_spans = spans(heard, MESSAGE_HZ)
    assert len(message_spans) == 1, (heard, server.output)  # one timeout, one message
    (message_span,) = message_spans
    # Each is a whole second (5 windows of 0.2 s, give or take an edge), in that order,
    # with the initial timeout's two seconds of silence between them.
    assert 4 <= prompt_span[1] - prompt_span[0] <= 6, heard
    assert 4 <= message_span[1] - message_span[0] <= 6, heard
    gap = message_span[0] - prompt_span[1]
    assert 9 <= gap <= 11, heard
