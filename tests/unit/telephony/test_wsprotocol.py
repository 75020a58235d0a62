"""What goes over a WebSocket call's socket (callhook/telephony/wsprotocol.py)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from callhook.media import g711
from callhook.media.rtp import RtpSender, pack_header
from callhook.telephony.wsprotocol import (
    V1,
    V2,
    Clear,
    Hangup,
    Other,
    Outgoing,
    chosen,
    close_cause,
    handshake_cause,
    incoming_frame,
    parse,
)


@pytest.mark.parametrize(
    ("answer", "protocol"),
    [(V2, V2), (V1, V1), (None, V1), ("", V1), ("v2.ws.aculab.com", V1), (f" {V2} ", V2)],
)
def test_only_an_explicit_v2_answer_selects_v2(answer: str | None, protocol: str) -> None:
    assert chosen(answer) == protocol


@pytest.mark.parametrize(
    ("raw", "cause"),
    [(404, "unobtainable"), (901, "unobtainable"), (902, "unobtainable"), (503, "busy"),
     (500, "failed"), (903, "failed"), (904, "failed"), (905, "failed"), (900, "failed")],
)  # fmt: skip
def test_handshake_failures_have_a_call_cause(raw: int, cause: str) -> None:
    assert handshake_cause(raw) == cause


def test_a_close_frame_gives_its_code_and_a_lost_connection_1006() -> None:
    assert close_cause(4000) == ("hung_up", "4000")
    assert close_cause(1000) == ("hung_up", "1000")
    assert close_cause(None) == ("failed", "1006")
    assert close_cause(1006) == ("failed", "1006")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type": "call_hangup", "raw_cause": "486"}', Hangup("486")),
        ('{"type": "call_hangup", "raw_cause": 16}', Hangup("16")),
        ('{"type": "call_hangup"}', Hangup("")),
        ('{"type": "call_hangup", "raw_cause": [1]}', Hangup("")),
        ('{"type": "clear"}', Clear()),
        ('{"type": "mark", "name": "x"}', Other("mark")),
    ],
)
def test_server_messages(text: str, message: object) -> None:
    assert parse(text) == message


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"no": "type"}', '{"type": 3}'])
def test_unreadable_server_messages_say_why(text: str) -> None:
    message = parse(text)
    assert isinstance(message, Other) and message.why


def test_audio_packets_become_linear_pcm_frames() -> None:
    samples = (np.sin(np.arange(160) / 5) * 8000).astype(np.int16)
    packet = RtpSender(0).frame(g711.encode("ulaw", samples))
    (frame,) = Outgoing(V2).packet(packet)
    assert isinstance(frame, bytes) and len(frame) == 320
    decoded = np.frombuffer(frame, dtype="<i2")
    assert np.array_equal(decoded, g711.decode("ulaw", g711.encode("ulaw", samples)))


def event_packet(digit: int, end: bool, timestamp: int, duration: int) -> bytes:
    payload = struct.pack("!BBH", digit, 0x80 | 10 if end else 10, duration)
    return pack_header(101, 1, timestamp, 1234, False) + payload


def test_a_relayed_digit_is_one_dtmf_message_in_v2_and_its_audio_is_silence() -> None:
    outgoing = Outgoing(V2)
    sent: list[bytes | str] = []
    for duration in (160, 320, 480):
        sent += outgoing.packet(event_packet(5, False, 1000, duration))
    for _ in range(3):  # the end is sent three times (RFC 4733 §2.5.1.4)
        sent += outgoing.packet(event_packet(5, True, 1000, 800))
    frames = [s for s in sent if isinstance(s, bytes)]
    messages = [json.loads(s) for s in sent if isinstance(s, str)]
    assert len(frames) == 6 and all(f == bytes(320) for f in frames)  # the slots stay filled
    assert messages == [{"type": "dtmf", "digit": "5", "milliseconds_duration": 100}]
    # the next digit (another timestamp) is reported too
    more = outgoing.packet(event_packet(11, True, 2000, 400))
    assert json.loads(str(more[1]))["digit"] == "#"


def test_v1_sends_no_dtmf_messages() -> None:
    sent = Outgoing(V1).packet(event_packet(5, True, 1000, 800))
    assert sent == [bytes(320)]


def test_a_frame_from_the_server_becomes_a_ulaw_payload() -> None:
    samples = (np.arange(160) * 100 - 8000).astype(np.int16)
    payload = incoming_frame(samples.astype("<i2").tobytes())
    assert payload == g711.encode("ulaw", samples)
