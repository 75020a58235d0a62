"""A call to a WebSocket server in Aculab's protocol: what goes over the socket. Pure.

A ``connect`` destination ``wss://...`` (or ``ws://...``) is a call to a WebSocket
server: a voice agent. callhook is the client. What Aculab documents, and this
module follows exactly (its WebSocket guide):

* the handshake offers the sub-protocols ``v2.ws.cloud.aculab.com`` and
  ``v1.ws.cloud.aculab.com``; only a server that answers with exactly the v2 name
  gets v2, any other answer (or none) is v1 (:func:`chosen`);
* text frames are JSON objects with a ``type``; binary frames are raw audio;
* v2 sends the caller's digits as DTMF event messages and silences the audio that
  carried them; v1 leaves digits in the audio and sends no DTMF messages;
* a handshake answered with an HTTP status other than 101 gives that status as the
  call's raw cause; failures before any status are 900-905 (:data:`UNCLASSIFIED`
  ... :data:`BAD_HANDSHAKE`);
* the server's call hangup message ends the call with the message's ``raw_cause``;
  a Close frame ends it with the frame's status code.

Where Aculab's public pages are silent (the message names and fields, the audio
format) this module is callhook's decision, written down in docs/behaviour.md
("connect to a WebSocket"):

* audio both ways: signed 16-bit little-endian linear PCM, 8000 Hz, mono; callhook
  sends a frame every 20 ms (320 bytes); the server may send any amount at any
  time (it is paced out in real time, :mod:`callhook.media.pacer`);
* callhook sends ``start`` first (the call and the audio format), ``dtmf`` for a
  digit (v2), and ``call_hangup`` with its ``call_cause`` when its side ends the
  call (then a Close frame, 1000);
* the server may send ``call_hangup`` (``raw_cause``: a string or a number) and
  ``clear`` (drop the audio it sent that is not yet played: its barge-in); any other
  type is ignored and logged once.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from callhook.media import g711
from callhook.media.dtmf import EVENT_DIGITS

V1: Final = "v1.ws.cloud.aculab.com"
V2: Final = "v2.ws.cloud.aculab.com"
#: The sub-protocols offered, most wanted first.
OFFERED: Final = (V2, V1)

#: Raw causes of a call that never reached a WebSocket status (Aculab's table).
UNCLASSIFIED: Final = 900
BAD_URL: Final = 901
NO_NAME: Final = 902
NO_CONNECTION: Final = 903
BAD_TLS: Final = 904
BAD_HANDSHAKE: Final = 905

#: The close code of a connection that ended without a Close frame (RFC 6455 §7.1.5).
ABNORMAL_CLOSURE: Final = 1006

#: The audio format, as announced in ``start``.
AUDIO: Final = {
    "encoding": "linear16",
    "sample_rate": 8000,
    "channels": 1,
    "byte_order": "little_endian",
    "milliseconds_frame": 20,
}

#: Payload types of the far leg's media session (RFC 3551 §6; a dynamic type for events).
PCMU: Final = 0
TELEPHONE_EVENT: Final = 101
_SILENCE: Final = bytes(320)


def chosen(header: str | None) -> str:
    """The sub-protocol in force for the server's ``Sec-WebSocket-Protocol`` answer."""
    return V2 if header is not None and header.strip() == V2 else V1


def handshake_cause(raw: int) -> str:
    """The ``call_cause`` of a WebSocket call that failed before it was connected.

    callhook's: a URL that cannot be used, a name that does not resolve and a server
    that says the path does not exist are ``unobtainable``; a server that says it is
    overloaded is ``busy``; everything else is ``failed``.
    """
    if raw in (BAD_URL, NO_NAME, 404, 410):
        return "unobtainable"
    if raw in (429, 503):
        return "busy"
    return "failed"


def close_cause(code: int | None) -> tuple[str, str]:
    """``(call_cause, raw_cause)`` of a connection the server closed: its Close frame's
    code, or ``failed`` / 1006 when it went without one."""
    if code is None or code == ABNORMAL_CLOSURE:
        return "failed", str(ABNORMAL_CLOSURE)
    return "hung_up", str(code)


def start_message(protocol: str, call: dict[str, Any]) -> str:
    """The first message: the sub-protocol in force, the call, the audio format."""
    return json.dumps({"type": "start", "protocol": protocol, "call": call, "audio": AUDIO})


def dtmf_message(digit: str, milliseconds: int) -> str:
    """A caller's digit (v2 only)."""
    return json.dumps({"type": "dtmf", "digit": digit, "milliseconds_duration": milliseconds})


def hangup_message(call_cause: str) -> str:
    """callhook's side ends the call (its ``call_cause``: ``completed`` when the caller or
    the application hung up, ``no_answer``, ...)."""
    return json.dumps({"type": "call_hangup", "call_cause": call_cause})


@dataclass(frozen=True)
class Hangup:
    """The server ends the call."""

    raw_cause: str


@dataclass(frozen=True)
class Clear:
    """The server drops the audio it sent that is not yet played."""


@dataclass(frozen=True)
class Other:
    """A message callhook does not act on (its type), or one it cannot read (why)."""

    type: str
    why: str = ""


ServerMessage = Hangup | Clear | Other


def parse(text: str) -> ServerMessage:
    """A text frame from the server."""
    try:
        message = json.loads(text)
    except ValueError as exc:
        return Other("", f"not JSON: {exc}")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return Other("", "not a JSON object with a string type")
    kind = message["type"]
    if kind == "call_hangup":
        raw = message.get("raw_cause", "")
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            return Hangup("")
        return Hangup(str(raw))
    if kind == "clear":
        return Clear()
    return Other(kind)


class Outgoing:
    """The far leg's RTP packets (what its media session sends each tick) as what goes
    to the server: one 20 ms binary frame of linear PCM per packet, and for v2 a
    ``dtmf`` message when a relayed digit ends (its audio is silence)."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self._reported: set[int] = set()  # events' timestamps (their end is sent 3 times)

    def packet(self, data: bytes) -> list[bytes | str]:
        """What to send for one RTP packet (RFC 3550 §5.1 header, no CSRC or extension
        from our own sender)."""
        if len(data) < 12:
            return []
        payload_type = data[1] & 0x7F
        header = 12 + 4 * (data[0] & 0x0F)
        payload = data[header:]
        if payload_type == PCMU:
            samples = g711.decode("ulaw", payload)
            return [samples.astype("<i2").tobytes()]
        if payload_type == TELEPHONE_EVENT and len(payload) >= 4:
            out: list[bytes | str] = [_SILENCE]
            event, flags, duration = struct.unpack("!BBH", payload[:4])
            timestamp = struct.unpack("!I", data[4:8])[0]
            end = bool(flags & 0x80)
            if end and timestamp not in self._reported and event < len(EVENT_DIGITS):
                self._reported.add(timestamp)
                if len(self._reported) > 64:
                    self._reported = {timestamp}
                if self.protocol == V2:
                    out.append(dtmf_message(EVENT_DIGITS[event], duration // 8))
            return out
        return [_SILENCE]  # comfort noise or anything else: the slot stays filled


def incoming_frame(pcm: bytes) -> bytes:
    """A 20 ms frame of the server's linear PCM as a µ-law payload."""
    return g711.encode("ulaw", np.frombuffer(pcm, dtype="<i2").astype(np.int16))
