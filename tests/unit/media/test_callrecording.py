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


@pytest.mark.parametrize("side", ["caller", "far end"])
@pytest.mark.parametrize("eliminate", [True, False])
def test_in_band_key_presses_are_silenced_in_the_file_when_asked(
    side: str, eliminate: bool
) -> None:
    """call_recording_eliminate_dtmf (Aculab's default: true): a key press one side sends
    as a tone in its own audio, in the middle of its talk, is silence in the file, from
    its first frame; the talk around it is kept. Without it, the tone is there."""
    sink = Sink()
    recording = CallRecording(sink, "ulaw", "separate", eliminate_dtmf=eliminate)
    talk = tones.tone(700, 1.0, -12)
    key = tones.dtmf_tone("5", 0.1, -10)
    sent = talk.copy()
    sent[8000 // 2 : 8000 // 2 + len(key)] = key  # at 0.5 s, 100 ms of the key
    audio = g711.encode("ulaw", sent)
    quiet = g711.silence("ulaw", FRAME)
    for n in range(50):
        part = audio[n * FRAME : (n + 1) * FRAME]
        if side == "caller":
            recording.hear_caller(part)
            data = recording.frame(quiet)
        else:
            recording.hear_caller(quiet)
            data = recording.frame(part)
        sink.write(data)
    recording.close("test")
    assert len(sink.data) == 2 * 50 * FRAME  # every frame, the held ones written at close
    channel = g711.decode("ulaw", bytes(sink.data[0::2] if side == "caller" else sink.data[1::2]))
    assert (ToneDetector().feed(channel) is None) is eliminate
    frames_out = channel.reshape(-1, FRAME)
    silent = [n for n, f in enumerate(frames_out) if int(np.abs(f.astype(np.int32)).max()) < 100]
    if eliminate:
        # The press (frames 25 to 29) and the 40 ms its end takes to be sure of, no more.
        assert set(range(25, 30)) <= set(silent) and len(silent) <= 9
        assert level_at(channel[: 24 * FRAME], 700) > 0.9  # the talk before it is kept
    else:
        assert silent == []


def test_speech_is_not_taken_for_key_presses() -> None:
    """Every spoken-digit recording of the test set, through a recording that leaves
    DTMF out: nothing of it is silenced."""
    from pathlib import Path

    from callhook.media import wav

    clips = sorted((Path(__file__).parents[2] / "data" / "speech").glob("*.wav"))
    assert len(clips) >= 20
    for clip in clips:
        speech = wav.decode_to_8k(clip.read_bytes())
        speech = speech[: len(speech) - len(speech) % FRAME]
        audio = g711.encode("ulaw", speech)
        sink = Sink()
        recording = CallRecording(sink, "ulaw", "separate", eliminate_dtmf=True)
        for n in range(len(audio) // FRAME):
            recording.hear_caller(audio[n * FRAME : (n + 1) * FRAME])
            sink.write(recording.frame(audio[n * FRAME : (n + 1) * FRAME]))
        recording.close("test")
        assert bytes(sink.data[0::2]) == audio and bytes(sink.data[1::2]) == audio, clip.name
