"""A bridged call recorded whole (callhook/media/callrecording.py): both directions, mixed
or in two channels, at the caller's tick, through a real bridge of two media sessions."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt
import pytest

from callhook.events import RecorderFailed
from callhook.media import g711, tones
from callhook.media.bridge import FRAME
from callhook.media.callrecording import CallRecording
from callhook.media.dtmf import ToneDetector
from callhook.media.dtmfsend import event_payload
from callhook.media.session import MediaSession
from callhook.media.sink import SinkFull

CALLER = ("192.0.2.10", 40000)
CALLEE = ("192.0.2.20", 50000)


class Sink:
    def __init__(self, limit: int | None = None) -> None:
        self.data = bytearray()
        self.closed = False
        self.limit = limit

    def write(self, data: bytes) -> None:
        if self.limit is not None and len(self.data) + len(data) > self.limit:
            raise SinkFull("full")
        self.data += data

    def close(self) -> None:
        self.closed = True


def rtp(seq: int, payload: bytes, pt: int) -> bytes:
    return struct.pack("!BBHII", 0x80, pt, seq, seq * 160, 7) + payload


def level_at(samples: npt.NDArray[np.int16], hz: float) -> float:
    """The share of the energy within 20 Hz of ``hz``."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    return float(spectrum[np.abs(freqs - hz) <= 20].sum()) / (float(spectrum.sum()) or 1.0)


def bridged_call(mode: str, sink: Sink, seconds: float = 1.0) -> tuple[MediaSession, int]:
    """A µ-law caller bridged to an A-law callee for ``seconds``, the caller saying 700 Hz
    and the callee 1100 Hz, recorded at the caller's side; returns the caller's session
    and the ticks run."""
    caller = MediaSession("PCMU", 0, 101, CALLER, label="caller")
    callee = MediaSession("PCMA", 8, 101, CALLEE, label="callee")
    caller.join(callee)
    caller.start_call_recording(CallRecording(sink, "ulaw", mode))  # type: ignore[arg-type]
    said = g711.encode("ulaw", tones.tone(700, seconds, -12))
    answered = g711.encode("alaw", tones.tone(1100, seconds, -12))
    ticks = round(seconds / 0.02)
    for n in range(ticks):
        now = n * 0.02
        part = slice(n * FRAME, (n + 1) * FRAME)
        caller.receive(rtp(n + 1, said[part], 0), CALLER, now)
        callee.receive(rtp(n + 1, answered[part], 8), CALLEE, now)
        callee.tick(now)
        caller.tick(now)
    return caller, ticks


def test_mixed_holds_both_directions_in_one_channel() -> None:
    sink = Sink()
    caller, ticks = bridged_call("mixed", sink)
    caller.stop_call_recording()
    assert sink.closed and len(sink.data) == ticks * FRAME
    audio = g711.decode("ulaw", bytes(sink.data))[FRAME * 5 :]  # past the first frames
    assert level_at(audio, 700) > 0.3 and level_at(audio, 1100) > 0.3


def test_separate_puts_the_caller_left_and_the_far_end_right() -> None:
    sink = Sink()
    caller, ticks = bridged_call("separate", sink)
    caller.stop_call_recording()
    assert len(sink.data) == 2 * ticks * FRAME
    left = g711.decode("ulaw", bytes(sink.data[0::2]))[FRAME * 5 :]
    right = g711.decode("ulaw", bytes(sink.data[1::2]))[FRAME * 5 :]
    assert level_at(left, 700) > 0.8 and level_at(left, 1100) < 0.01
    assert level_at(right, 1100) > 0.8 and level_at(right, 700) < 0.01


@pytest.mark.parametrize("events", [True, False], ids=["rfc4733", "in-band"])
def test_relayed_digits_are_not_in_the_recording(events: bool) -> None:
    """The far end presses a key (an RFC 4733 event) while it talks: the caller's side gets
    the digit relayed (as an event, or as a tone without telephone-event) and, meanwhile,
    none of the far end's audio; the recording's far-end channel has neither the tone
    nor the far end's audio of those ticks, just silence."""
    caller = MediaSession("PCMU", 0, 101 if events else None, CALLER, label="caller")
    callee = MediaSession("PCMA", 8, 101, CALLEE, label="callee")
    caller.join(callee)
    sink = Sink()
    caller.start_call_recording(CallRecording(sink, "ulaw", "separate"))
    talk = g711.encode("alaw", tones.tone(1100, 2.0, -12))
    key = [(False, 160), (False, 320), (True, 800)]
    for n in range(60):
        now = n * 0.02
        callee.receive(rtp(n + 1, talk[n * FRAME : (n + 1) * FRAME], 8), CALLEE, now)
        if 20 <= n < 23:  # the key press, in the middle of its talk
            end, duration = key[n - 20]
            event = event_payload("1", end=end, duration=duration)
            callee.receive(rtp(1000 + n, event, 101), CALLEE, now)
        caller.tick(now)
    right = g711.decode("ulaw", bytes(sink.data[1::2]))
    frames = right.reshape(-1, FRAME)
    loud = [int(np.abs(f.astype(np.int32)).max()) > 1000 for f in frames]
    relaying = [n for n, is_loud in enumerate(loud) if not is_loud and n > 5]
    assert relaying, "the caller's side relayed nothing"
    # From the key press on, while the caller's side relays the digit (its 200 ms and
    # the pause after it), one stretch of silence in the far end's channel.
    assert relaying == list(range(20, 20 + len(relaying))) and len(relaying) >= 10
    quiet = np.concatenate([frames[n] for n in relaying])
    assert int(np.abs(quiet.astype(np.int32)).max()) < 100  # no DTMF, no far-end audio
    assert ToneDetector().feed(right) is None


def test_a_full_sink_stops_the_recording_keeping_what_it_holds() -> None:
    sink = Sink(limit=10 * FRAME)
    caller, _ = bridged_call("mixed", sink, seconds=0.4)
    assert len(sink.data) == 10 * FRAME and sink.closed
    failures = [e for e in caller.events if isinstance(e, RecorderFailed)]
    assert failures == [RecorderFailed("filesize", "full")]
    caller.stop_call_recording()  # already over: nothing more happens
