"""Aculab-style applications, written exactly as the reference writes actions, on real calls.

SIPp calls ``callhook serve``; its SDP names a socket of the test as its media
address (``rtpsink``), so the test hears what a caller would: the prompt, the
retry messages, the DTMF callhook sends. Prompts are tones of distinct
frequencies, so "the prompt was heard, then the timeout message" is a fact
about the audio, not about callhook's own log.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callhook.devtools.harness import AppServer
from callhook.media import g711, tones, wav
from callhook.media.dtmf import Rfc4733Receiver, ToneDetector
from tests.e2e import sipp
from tests.e2e.harness import WORKERS, Server, served
from tests.e2e.rtpsink import Packet, RtpSink, dominant_hz

pytestmark = pytest.mark.skipif(sipp.SIPP is None, reason="SIPp (sip-tester) is not installed")

PROMPT_HZ, MESSAGE_HZ = 440.0, 1000.0


def write_tone(data_dir: Path, name: str, hz: float, seconds: float = 1.0) -> str:
    """A real WAV prompt in the application's namespace of the media file store."""
    path = data_dir / "media" / "default" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav.g711_file("ulaw", g711.encode("ulaw", tones.tone(hz, seconds))))
    return name


def play(name: str) -> dict[str, Any]:
    """A play action in its wire form (docs/reference.md, "Play action")."""
    return {"play": {"play_list": [{"file_to_play": name}]}}


def invite_to(sink: RtpSink, telephone_event: bool = True) -> str:
    return sipp.invite("ivr", "PCMU", telephone_event).replace(
        "m=audio [media_port]", f"m=audio {sink.port}"
    )


async def call_and_listen(
    tmp_path: Path, app: AppServer, *middle: str, telephone_event: bool = True, workers: int = 1
) -> tuple[sipp.SippRun, Server, RtpSink]:
    """SIPp calls ``serve`` running ``app`` (one process, or ``workers`` behind Kamailio);
    the test's socket hears the call's audio."""
    server = (
        served(tmp_path, app, workers) if workers > 1 else Server.for_app(tmp_path / "data", app)
    )
    async with RtpSink() as sink, server:
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


@pytest.mark.parametrize("workers", WORKERS)
async def test_get_number_with_keyed_prompt_and_keyed_timeout_message(
    tmp_path: Path, app: AppServer, workers: int
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
    run, server, sink = await call_and_listen(
        tmp_path, app, sipp.PAUSE.format(ms=4800), *infos, workers=workers
    )
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


# --- digits_to_play: DTMF sent by callhook --------------------------------------------------

DIGITS = "1234#*"


def heard_in(packets: list[Packet]) -> list[float]:
    """The dominant frequencies of the audio in ``packets`` (µ-law), 0.2 s at a time."""
    audio = b"".join(p.payload for p in packets if p.payload_type == 0)
    return dominant_hz(g711.decode("ulaw", audio))


def digits_app(app: AppServer, data: Path) -> None:
    """A tone, the digits, another tone; then hang up (the play list plays in order)."""
    before = write_tone(data, "prompts/before.wav", PROMPT_HZ, 0.4)
    after = write_tone(data, "prompts/after.wav", MESSAGE_HZ, 0.4)
    items = [{"file_to_play": before}, {"digits_to_play": DIGITS}, {"file_to_play": after}]
    app.page("/start", [{"play": {"play_list": items}}, {"hang_up": {}}])
    app.page("/final", None)


@pytest.mark.parametrize("workers", WORKERS)
async def test_digits_to_play_are_rfc4733_events_when_negotiated(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    digits_app(app, tmp_path / "data")
    run, server, sink = await call_and_listen(tmp_path, app, workers=workers)
    assert run.returncode == 0, run.output + run.errors + server.output
    events = sink.events()
    assert len(events) == 7 * len(DIGITS), (events, server.output)
    # One event per digit, in order, each of 7 packets with its start's timestamp (RFC 4733).
    starts = sorted({e.timestamp for e in events})
    assert [b - a for a, b in itertools.pairwise(starts)] == [1600] * (len(DIGITS) - 1)
    for digit, start in zip(DIGITS, starts, strict=True):
        packets = [e for e in events if e.timestamp == start]
        assert {e.digit for e in packets} == {digit}
        assert [e.marker for e in packets] == [True] + [False] * 6
        assert [e.duration for e in packets] == [160, 320, 480, 640, 800, 800, 800]
        assert [e.end for e in packets] == [False] * 4 + [True] * 3
        assert {e.volume for e in packets} == {10}
    # One RTP stream: sequence numbers run on across audio and events, and no audio is
    # sent while an event is in progress (only the silent rest of each gap between).
    ordered = sorted(sink.packets, key=lambda p: (p.sequence - sink.packets[0].sequence) & 0xFFFF)
    seqs = [p.sequence for p in ordered]
    assert all((b - a) & 0xFFFF == 1 for a, b in itertools.pairwise(seqs)), seqs
    kinds = "".join("e" if p.payload_type == 101 else "a" for p in ordered)
    first, last = kinds.index("e"), kinds.rindex("e")
    assert kinds[first : last + 1] == ("eeeeeee" + "aaa") * (len(DIGITS) - 1) + "eeeeeee"
    # The play list in order: the first tone before the digits, the second after them.
    assert set(heard_in(ordered[:first])) - {0.0} == {PROMPT_HZ}
    assert set(heard_in(ordered[last + 1 :])) - {0.0} == {MESSAGE_HZ}
    # callhook's own receiver takes each digit once.
    receiver = Rfc4733Receiver()
    got = [
        receiver.feed(p.payload, p.timestamp, p.arrived) for p in ordered if p.payload_type == 101
    ]
    assert "".join(d for d in got if d is not None) == DIGITS


@pytest.mark.parametrize("workers", WORKERS)
async def test_digits_to_play_are_in_band_tones_without_telephone_event(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    digits_app(app, tmp_path / "data")
    run, server, sink = await call_and_listen(tmp_path, app, telephone_event=False, workers=workers)
    assert run.returncode == 0, run.output + run.errors + server.output
    assert {p.payload_type for p in sink.packets} == {0}  # audio only
    audio = sink.audio()
    detector = ToneDetector()
    heard = [detector.feed(audio[i : i + 160]) for i in range(0, len(audio) - 159, 160)]
    assert "".join(d for d in heard if d is not None) == DIGITS, server.output


@pytest.mark.parametrize("workers", WORKERS)
async def test_a_private_text_is_spoken_but_never_logged(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """text_is_private on a real call: spoken to the caller, absent from every log."""
    secret = "Your code is 4 3 2 1."
    app.page(
        "/start",
        [
            {"play": {"play_list": [{"text_to_say": secret, "text_is_private": True}]}},
            {"hang_up": {}},
        ],
    )
    app.page("/final", None)
    run, server, sink = await call_and_listen(tmp_path, app, workers=workers)
    assert run.returncode == 0, run.output + run.errors + server.output
    heard = sink.audio()
    assert int(np.sum(np.abs(heard.astype(np.int32)) > 1000)) > 800, "nothing was spoken"
    (final,) = app.bodies("/final")
    log = (tmp_path / "data" / "media" / "default" / final["log_filename"]).read_text()
    assert "say <private text>" in log
    for text in (log, server.output):
        assert "4 3 2 1" not in text and "code is" not in text


@pytest.mark.parametrize("workers", WORKERS)
async def test_get_input_with_keyed_prompt_and_keyed_timeout_message(
    tmp_path: Path, app: AppServer, workers: int
) -> None:
    """get_input as the reference writes it: prompt and timeout message heard, digits taken."""
    data = tmp_path / "data"
    prompt = write_tone(data, "prompts/ask.wav", PROMPT_HZ)
    sorry = write_tone(data, "prompts/nothing.wav", MESSAGE_HZ)
    app.page(
        "/start",
        [
            {
                "get_input": {
                    "prompt": play(prompt),
                    "on_input_timeout_messages": [play(sorry), play(sorry)],
                    "digit_input_options": {"digit_count": 2},
                    "milliseconds_initial_timeout": 2000,
                    "next_page": {"url": "/input"},
                }
            }
        ],
    )
    app.page("/input", [{"hang_up": {}}])
    app.page("/final", None)
    infos = [sipp.INFO.format(cseq=2 + i, digit=d) for i, d in enumerate("73")]
    run, server, sink = await call_and_listen(
        tmp_path, app, sipp.PAUSE.format(ms=4800), *infos, workers=workers
    )
    assert run.returncode == 0, run.output + run.errors + server.output
    (body,) = app.bodies("/input")
    assert body["action_result"] == {
        "action": "get_input",
        "result": {"input_type": "digits", "digits_input": "73"},
    }
    heard = dominant_hz(sink.audio())
    (prompt_span,) = spans(heard, PROMPT_HZ)
    (message_span,) = spans(heard, MESSAGE_HZ)
    assert 9 <= message_span[0] - prompt_span[1] <= 11, heard  # the 2 s initial timeout
