"""The per-call media session (callhook.media.session), alone: datagrams in, datagrams out.

No sockets: packets are built here and handed to ``receive`` with a source and a
time; ``tick`` is called every 20 ms of a virtual clock.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest

from callhook.events import (
    DigitReceived,
    PromptFinished,
    RecorderFailed,
    SpeechStarted,
    VoiceActivity,
)
from callhook.media import g711, rtcp, tones, wav
from callhook.media.player import FRAME
from callhook.media.recorder import CallerRecording
from callhook.media.rtp import RtpPacket
from callhook.media.session import (
    MAX_PACKETS_PER_SECOND,
    MediaSession,
)
from callhook.media.sink import SinkFull

SPEECH = Path(__file__).parents[2] / "data" / "speech"
PEER = ("192.0.2.10", 40000)
NAT = ("198.51.100.7", 51000)
ELSEWHERE = ("203.0.113.9", 6666)


def rtp(
    seq: int, ts: int, payload: bytes, pt: int = 0, marker: bool = False, ssrc: int = 7
) -> bytes:
    return struct.pack("!BBHII", 0x80, (0x80 if marker else 0) | pt, seq, ts, ssrc) + payload


def audio_frames(samples: np.ndarray, law: str = "ulaw") -> list[bytes]:
    encoded = g711.encode(law, samples)  # type: ignore[arg-type]
    return [encoded[i : i + FRAME] for i in range(0, len(encoded) - FRAME + 1, FRAME)]


def stream(
    session: MediaSession,
    frames: list[bytes],
    *,
    start: float = 0.0,
    source=PEER,
    seq0: int = 100,
    ts0: int = 1000,
    skip: set[int] | None = None,
) -> None:
    """Send frames 20 ms apart and tick the session after each, like the engine does."""
    for i, payload in enumerate(frames):
        now = start + i * 0.02
        if not skip or i not in skip:
            session.receive(rtp(seq0 + i, ts0 + i * FRAME, payload), source, now)
        session.tick(now)


class Sink:
    def __init__(self, limit: int | None = None, fail: bool = False) -> None:
        self.data = bytearray()
        self.closed = False
        self.limit = limit
        self.fail = fail

    def write(self, data: bytes) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        if self.limit is not None and len(self.data) + len(data) > self.limit:
            raise SinkFull("full")
        self.data += data

    def close(self) -> None:
        self.closed = True


def events(session: MediaSession) -> list[object]:
    out: list[object] = list(session.events)
    session.events.clear()
    return out


# --- symmetric RTP and protection --------------------------------------------------------


def test_first_packet_latches_where_we_send() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.receive(rtp(1, 160, bytes(FRAME)), NAT, 0.0)
    assert session.remote == NAT  # behind NAT: answer where the media comes from
    packet = session.tick(0.02)
    assert packet is not None and RtpPacket.parse(packet).payload_type == 0


def test_packets_from_elsewhere_are_dropped_after_latching() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.receive(rtp(1, 160, bytes(FRAME)), PEER, 0.0)
    for i in range(500):
        session.receive(rtp(i, i * 160, bytes(FRAME)), ELSEWHERE, 0.01)
    assert session.remote == PEER
    assert session.foreign_dropped == 500
    assert session.flood_dropped == 0  # a flood from elsewhere costs the caller nothing


def test_the_sdp_address_takes_the_stream_back_from_a_racer() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.receive(rtp(1, 160, bytes(FRAME)), ELSEWHERE, 0.0)  # an attacker was first
    session.receive(rtp(2, 320, bytes(FRAME)), PEER, 0.02)  # the address the SDP named
    assert session.remote == PEER


def test_a_flood_from_the_peer_is_cut_at_the_limit() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    for i in range(MAX_PACKETS_PER_SECOND + 50):
        session.receive(rtp(i, i * 160, bytes(FRAME)), PEER, 0.5)
    assert session.flood_dropped == 50
    session.receive(rtp(999, 999 * 160, bytes(FRAME)), PEER, 1.6)  # a new second
    assert session.flood_dropped == 50


def test_garbage_and_unknown_payload_types_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    session = MediaSession("PCMU", 0, 101, PEER, label="call x")
    session.receive(rtp(1, 160, bytes(FRAME), pt=96), PEER, 0.0)
    session.receive(b"\x00\x01garbage", PEER, 0.0)
    assert session.malformed == 2
    assert events(session) == []
    # The cause is logged once a call (a stream of them would flood the log).
    assert [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()] == [
        "call x: dropping malformed media (payload type 96 was not negotiated)"
    ]


# --- digits ----------------------------------------------------------------------------------


def test_rfc4733_digit_once_per_press() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    seq = 1
    for k in range(5):
        payload = struct.pack("!BBH", 5, 10, 160 * (k + 1))
        session.receive(rtp(seq, 8000, payload, pt=101, marker=k == 0), PEER, k * 0.02)
        seq += 1
    end = struct.pack("!BBH", 5, 0x80 | 10, 800)
    for _ in range(3):
        session.receive(rtp(seq, 8000, end, pt=101), PEER, 0.1)
    session.tick(0.12)
    assert [e for e in events(session) if isinstance(e, DigitReceived)] == [DigitReceived("5")]


def test_a_press_whose_packets_all_come_late_still_counts_once() -> None:
    """Heavy jitter: audio after a press overtakes all of it, the reorder window skips
    past the press, and then its packets come. The key was pressed: one digit (the
    end-to-end fault test's line, 20 % loss and 50 ms ± 150 ms jitter, lost a digit so)."""
    session = MediaSession("PCMU", 0, 101, PEER)
    now = 0.0
    for seq in range(1, 4):  # audio, in order
        session.receive(rtp(seq, seq * 160, bytes(FRAME)), PEER, now)
    # The press is seq 4..9 (ts 640); the audio after it (10..14) arrives first ...
    for seq in range(10, 15):
        now += 0.02
        session.receive(rtp(seq, seq * 160, bytes(FRAME)), PEER, now)
        session.tick(now)
    assert session.receiver.late == 0 and not session.receiver._held  # skipped past 4..9
    # ... then the press, every packet late (the end packet three times, one sequence
    # number, as tests/e2e/rtpstream.py sends it).
    packets = [(seq, struct.pack("!BBH", 9, 10, 160 * (seq - 3))) for seq in range(4, 9)]
    packets += [(9, struct.pack("!BBH", 9, 0x80 | 10, 960))] * 3
    for seq, payload in reversed(packets):  # the end first: later updates must not repeat it
        now += 0.005
        session.receive(rtp(seq, 640, payload, pt=101, marker=seq == 4), PEER, now)
    session.tick(now)
    assert session.receiver.late == len(packets)  # none played
    assert [e for e in events(session) if isinstance(e, DigitReceived)] == [DigitReceived("9")]


def test_inband_digits_only_without_telephone_event() -> None:
    tone = np.concatenate([tones.dtmf_tone("7", 0.1, level_dbfs=-12.0), np.zeros(1600, np.int16)])
    with_te = MediaSession("PCMU", 0, 101, PEER)
    stream(with_te, audio_frames(tone))
    assert not [e for e in events(with_te) if isinstance(e, DigitReceived)]
    without = MediaSession("PCMU", 0, None, PEER)
    stream(without, audio_frames(tone))
    assert [e for e in events(without) if isinstance(e, DigitReceived)] == [DigitReceived("7")]


# --- playing prompts -------------------------------------------------------------------------


def test_prompt_plays_frame_by_frame_then_finishes() -> None:
    session = MediaSession("PCMA", 8, 101, PEER)
    samples = tones.tone(440.0, 0.1)  # 5 frames
    session.play(3, samples)
    sent = [session.tick(i * 0.02) for i in range(7)]
    payloads = [RtpPacket.parse(p).payload for p in sent if p is not None]
    expected = g711.encode("alaw", samples)
    assert b"".join(payloads[:5]) == expected
    assert payloads[5] == g711.silence("alaw", FRAME)  # then silence, not nothing
    assert events(session) == [PromptFinished(3)]
    stamps = [RtpPacket.parse(p).timestamp for p in sent if p is not None]
    assert [b - a for a, b in itertools.pairwise(stamps)] == [FRAME] * 6


def test_stopped_prompt_never_reports_finishing() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.play(1, tones.tone(440.0, 0.1))
    session.tick(0.0)
    session.stop_prompt(1)
    for i in range(1, 10):
        session.tick(i * 0.02)
    assert events(session) == []


def test_on_hold_nothing_is_sent_but_time_goes_on() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    first = session.tick(0.0)
    session.sending = False
    assert [session.tick(i * 0.02) for i in range(1, 6)] == [None] * 5
    session.sending = True
    after = session.tick(0.12)
    assert first is not None and after is not None
    assert RtpPacket.parse(after).timestamp - RtpPacket.parse(first).timestamp == 6 * FRAME


# --- voice activity and recording --------------------------------------------------------


def speech_like(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(1)
    t = np.arange(round(seconds * 8000)) / 8000
    return (
        (6000 * np.sin(2 * np.pi * 300 * t) * (1 + 0.5 * rng.standard_normal(len(t))))
        .clip(-32000, 32000)
        .astype(np.int16)
    )


def test_voice_activity_edges_on_real_speech() -> None:
    """A call's detector is the gated speech model: a person speaking gives one utterance."""
    session = MediaSession("PCMU", 0, 101, PEER)
    session.start_recognition()  # something listens: the speech model runs
    speech = wav.decode_to_8k((SPEECH / "2_jackson_2.wav").read_bytes())
    samples = np.concatenate([np.zeros(4000, np.int16), speech, np.zeros(16000, np.int16)])
    stream(session, audio_frames(samples))
    edges = [e for e in events(session) if isinstance(e, VoiceActivity)]
    assert edges == [VoiceActivity(True), VoiceActivity(False)]
    assert session.vad.model_frames > 0


def test_the_speech_model_rests_while_nothing_listens() -> None:
    """No recording, no recognition: no voice activity is needed, the model is not run."""
    session = MediaSession("PCMU", 0, 101, PEER)
    speech = wav.decode_to_8k((SPEECH / "2_jackson_2.wav").read_bytes())
    samples = np.concatenate([np.zeros(4000, np.int16), speech, np.zeros(16000, np.int16)])
    stream(session, audio_frames(samples))
    assert session.vad.model_frames == 0
    assert [e for e in events(session) if isinstance(e, VoiceActivity)] == []
    # A recording listens: the same speech now gives its edges.
    session.start_recording(Sink(), None, 0.0)
    stream(session, audio_frames(samples), start=2.0, seq0=500, ts0=80000)
    edges = [e for e in events(session) if isinstance(e, VoiceActivity)]
    assert edges == [VoiceActivity(True), VoiceActivity(False)]
    session.stop_recording(4.0)
    assert session.vad.paused


def test_a_loud_noise_that_is_not_speech_is_not_voice_activity() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.start_recognition()
    samples = np.concatenate(
        [np.zeros(4000, np.int16), speech_like(1.0), np.zeros(16000, np.int16)]
    )
    stream(session, audio_frames(samples))
    assert [e for e in events(session) if isinstance(e, VoiceActivity)] == []


def test_recording_keeps_real_time_across_lost_packets() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, preroll=0.0)
    frames = audio_frames(speech_like(1.0))  # 50 frames
    stream(session, frames, skip={10, 11, 12})  # three lost packets
    session.stop_recording(0.99)
    assert sink.closed
    assert len(sink.data) == 50 * FRAME  # the gap was filled with silence
    assert bytes(sink.data[10 * FRAME : 13 * FRAME]) == g711.silence("ulaw", 3 * FRAME)
    assert bytes(sink.data[:FRAME]) == frames[0]


def test_recording_starts_with_the_preroll() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    frames = audio_frames(speech_like(1.0))
    stream(session, frames[:20])
    sink = Sink()
    session.start_recording(sink, None, preroll=0.1)  # 5 frames back
    stream(session, frames[20:], start=0.4, seq0=120, ts0=1000 + 20 * FRAME)
    session.stop_recording(1.0)
    assert bytes(sink.data) == b"".join(frames[15:])


def test_recording_transcodes_to_the_asked_law() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, "alaw", preroll=0.0)
    samples = speech_like(0.2)
    stream(session, audio_frames(samples))
    session.stop_recording(0.2)
    decoded = g711.decode("alaw", bytes(sink.data)).astype(float)
    reference = g711.decode("ulaw", g711.encode("ulaw", samples)).astype(float)
    assert np.corrcoef(decoded, reference[: len(decoded)])[0, 1] > 0.99


@pytest.mark.parametrize(
    ("sink", "reason"), [(Sink(limit=800), "filesize"), (Sink(fail=True), "error")]
)
def test_recording_failures_become_events(sink: Sink, reason: str) -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.start_recording(sink, None, preroll=0.0)
    stream(session, audio_frames(speech_like(0.2)))
    failures = [e for e in events(session) if isinstance(e, RecorderFailed)]
    assert [f.reason for f in failures] == [reason]


def test_recording_padded_to_now_when_the_caller_goes_quiet() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, preroll=0.0)
    stream(session, audio_frames(speech_like(0.2)))  # 10 frames, then nothing at all
    session.stop_recording(0.18 + 1.0)
    assert len(sink.data) == pytest.approx(60 * FRAME, abs=2 * FRAME)


SILENT = g711.silence("ulaw", FRAME)


def test_a_recording_begun_while_the_caller_sends_nothing_begins_with_that_silence() -> None:
    """Silence suppression: the phone sends nothing while its user is quiet, its RTP
    timestamps running on. A recording that begins then starts with the silence up to
    the caller's next frame, so the file is as long as the time it covers."""
    session = MediaSession("PCMU", 0, 101, PEER)
    frames = audio_frames(speech_like(1.0))
    stream(session, frames[:20])  # 0.00-0.38, then nothing
    sink = Sink()
    session.start_recording(sink, None, 0.3, at=1.4)  # from 1.1 on the media clock
    # The caller speaks again at 2.4: packet 120 of the call's clock.
    stream(session, frames[20:45], start=2.4, seq0=120, ts0=1000 + 120 * FRAME)
    session.stop_recording(2.88)
    # From the frame at 1.12 (the 20 ms grid of the caller's frames) to 2.4: 64 frames.
    assert bytes(sink.data) == SILENT * 64 + b"".join(frames[20:45])


def test_a_recording_begun_while_quiet_then_a_new_source_begins_at_its_start() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    frames = audio_frames(speech_like(1.0))
    stream(session, frames[:20])  # 0.00-0.38, then nothing
    sink = Sink()
    session.start_recording(sink, None, 0.0, at=1.0)
    for i, payload in enumerate(frames[30:40]):  # from 1.5, another source
        now = 1.5 + i * 0.02
        session.receive(rtp(9000 + i, 99_000 + i * FRAME, payload, ssrc=99), PEER, now)
        session.tick(now)
    session.stop_recording(1.68)
    assert session.receiver.ssrc_changes == 1
    # (The first frame came at 1.50: its 20 ms began at 1.48.)
    assert bytes(sink.data) == SILENT * 24 + b"".join(frames[30:40])


def test_a_recording_begun_before_any_audio_begins_with_silence_up_to_the_first() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, 0.0, at=1.0)
    frames = audio_frames(speech_like(0.2))
    stream(session, frames, start=1.5, ts0=123_456)
    session.stop_recording(1.68)
    assert bytes(sink.data) == SILENT * 24 + b"".join(frames)  # (from 1.00 to 1.48)


def test_a_recording_that_gets_no_frame_lasts_from_its_start_not_the_last_audio() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    stream(session, audio_frames(speech_like(0.4)))  # 0.00-0.38, then nothing
    sink = Sink()
    session.start_recording(sink, None, 0.0, at=3.0)
    session.stop_recording(4.0)
    assert bytes(sink.data) == SILENT * 50
    # A record action that heard nothing: started and stopped at once, an empty file.
    empty = Sink()
    session.start_recording(empty, None, 0.0, at=5.0)
    session.stop_recording(5.0)
    assert empty.closed and not empty.data


@pytest.mark.parametrize("offset", [-400_000, 40_000, 0x80000000])
def test_a_new_source_mid_recording_is_recorded_after_the_time_between(offset: int) -> None:
    """The caller's stream changes SSRC (a transfer, a media relay): the new source's
    timestamps start anywhere (RFC 3550 §5.1), behind or ahead of the old ones. Its
    frames are all recorded, after silence for the time no audio came (by arrival:
    the new source's first three frames are given together, once the switch is sure)."""
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, 0.0)
    first = audio_frames(speech_like(1.0))
    stream(session, first)  # 0.00-0.98
    second = audio_frames(speech_like(0.6) // 2)
    for i, payload in enumerate(second):  # 1.50-2.08, another source
        now = 1.5 + i * 0.02
        ts = (1000 + 50 * FRAME + offset + i * FRAME) & 0xFFFFFFFF
        session.receive(rtp(9000 + i, ts, payload, ssrc=99), PEER, now)
        session.tick(now)
    session.stop_recording(2.08)
    assert session.receiver.ssrc_changes == 1
    assert bytes(sink.data) == b"".join(first) + SILENT * 25 + b"".join(second)


#: (slot, arrival) of each of the new source's first frames, which reached the host 20 ms
#: apart from 1.485 (15 ms before the slot an on-time media thread reads them in).
ON_TIME = [(1.50 + i * 0.02, 1.485 + i * 0.02) for i in range(30)]


@pytest.mark.parametrize(
    "old_last, new",
    [
        # A late slot: the thread ran slot 1.52 after the third frame came, and read the
        # second and third in it (the third frame's slot was that of the second).
        (None, [ON_TIME[0], (1.52, ON_TIME[1][1]), (1.52, ON_TIME[2][1]), *ON_TIME[3:]]),
        # A stalled thread: the first ten frames read together in the slot at 1.68.
        (None, [*((1.68, arrival) for _, arrival in ON_TIME[:10]), *ON_TIME[10:]]),
        # The old source's last frame read a slot late (1.00, not 0.98).
        (1.00, ON_TIME),
    ],
    ids=["two-in-a-late-slot", "ten-after-a-stall", "old-last-read-late"],
)
def test_a_new_source_read_in_late_slots_keeps_the_time_between_by_arrival(
    old_last: float | None, new: list[tuple[float, float]]
) -> None:
    """The time between one source's last frame and the next source's first is measured
    by when they reached the host (the media thread's kernel timestamp), not by the slot
    the thread read them in: a thread late for a slot reads the packets of two slots in
    one (or a stalled one, of many), and the file is as if every slot had been on time."""
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, 0.0)
    first = audio_frames(speech_like(1.0))
    for i, payload in enumerate(first):  # 0.00-0.98, each came 15 ms before its slot
        now = i * 0.02
        if i == len(first) - 1 and old_last is not None:
            now = old_last
        session.receive(rtp(100 + i, 1000 + i * FRAME, payload), PEER, now, i * 0.02 - 0.015)
        session.tick(now)
    second = audio_frames(speech_like(0.6) // 2)
    for i, payload in enumerate(second):  # 1.50-2.08 on the wire, another source
        now, arrival = new[i]
        ts = (1000 + 50 * FRAME - 3_000_000 + i * FRAME) & 0xFFFFFFFF
        session.receive(rtp(9000 + i, ts, payload, ssrc=99), PEER, now, arrival)
        session.tick(now)
    session.stop_recording(2.08)
    assert session.receiver.ssrc_changes == 1
    assert bytes(sink.data) == b"".join(first) + SILENT * 25 + b"".join(second)


def test_a_held_frame_of_the_old_source_given_with_the_new_ones_stays_on_its_line() -> None:
    """The old source lost a packet, so its next one was held; the new source's third
    packet gives both at once (the held one first): the held frame is the old source's,
    and the new source's timeline starts at its own first frame."""
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, 0.0)
    old = audio_frames(speech_like(1.0))
    stream(session, old, skip={48})  # 0.00-0.98, packet 48 lost
    new = audio_frames(speech_like(0.6) // 2)
    for i, payload in enumerate(new):  # 1.00-1.58, 5 s ahead on the clock
        now = 1.0 + i * 0.02
        ts = (1000 + 50 * FRAME + 40_000 + i * FRAME) & 0xFFFFFFFF
        session.receive(rtp(9000 + i, ts, payload, ssrc=99), PEER, now)
        session.tick(now)
    session.stop_recording(1.58)
    assert bytes(sink.data) == b"".join(old[:48]) + SILENT + old[49] + b"".join(new)


def test_a_pre_roll_of_30_ms_frames_is_kept_whole() -> None:
    """A peer that sends 30 ms frames (240 samples, off the 20 ms grid): the pre-roll's
    first frame is written, not taken for late and replaced with silence."""
    session = MediaSession("PCMU", 0, 101, PEER)
    encoded = g711.encode("ulaw", speech_like(1.2))
    frames = [encoded[i : i + 240] for i in range(0, 240 * 30, 240)]
    for i, payload in enumerate(frames[:20]):
        session.receive(rtp(100 + i, 1000 + i * 240, payload), PEER, i * 0.03)
        session.tick(i * 0.03)
    sink = Sink()
    session.start_recording(sink, None, 0.1)
    for i, payload in enumerate(frames[20:], start=20):
        session.receive(rtp(100 + i, 1000 + i * 240, payload), PEER, i * 0.03)
        session.tick(i * 0.03)
    session.stop_recording(0.87)
    assert bytes(sink.data) == b"".join(frames[16:])


def test_a_sender_whose_timestamps_go_back_is_still_recorded() -> None:
    """The same source's timestamps jump back 5 s (a broken sender): what follows is new
    audio, in sequence order, not late frames: it is written, not dropped."""
    session = MediaSession("PCMU", 0, 101, PEER)
    sink = Sink()
    session.start_recording(sink, None, 0.0)
    frames = audio_frames(speech_like(1.0))
    for i, payload in enumerate(frames):
        ts = 1000 + i * FRAME - (40_000 if i >= 25 else 0)
        session.receive(rtp(100 + i, ts & 0xFFFFFFFF, payload), PEER, i * 0.02)
        session.tick(i * 0.02)
    session.stop_recording(0.98)
    assert bytes(sink.data) == b"".join(frames)


def test_a_late_frame_is_still_dropped_from_the_recording() -> None:
    """A frame behind the file by less than a second is one already covered."""
    recording = CallerRecording(Sink(), "ulaw", "call")
    frames = audio_frames(speech_like(0.1))
    for i, payload in enumerate(frames):
        assert recording.frame(payload, 1000 + i * FRAME, "ulaw") is None
    recording.frame(frames[0], 1000 + 2 * FRAME, "ulaw")  # behind by two frames
    assert bytes(recording.sink.data) == b"".join(frames)  # type: ignore[attr-defined]


# --- RTCP ----------------------------------------------------------------------------------


def test_rtcp_reports_every_few_seconds_and_reads_the_peers() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    reports = []
    stream(session, audio_frames(speech_like(2.0)))
    for i in range(2000):  # 40 s
        report = session.rtcp_report(i * 0.02, 1_800_000_000 + i * 0.02)
        if report is not None:
            reports.append((i * 0.02, report))
    times = [t for t, _ in reports]
    assert len(times) >= 5
    assert times[0] <= 7.5
    # RFC 3550 §6.3.1: 5 s, randomised by 0.5 to 1.5
    assert all(2.5 - 1e-9 <= b - a <= 7.5 + 0.02 for a, b in itertools.pairwise(times))
    first = rtcp.parse(reports[-1][1])
    assert isinstance(first[0], rtcp.SenderReport)
    assert first[0].reports and first[0].reports[0].ssrc == 7  # a block about the caller
    peer = rtcp.report(
        rtcp.ReceiverReport(7, (rtcp.ReportBlock(session.sender.ssrc, 12, 3, 0, 99, 0, 0),)),
        "peer",
    )
    session.rtcp_received(peer, (PEER[0], PEER[1] + 1), 13.0)
    assert session.reports.peer_report is not None
    assert session.reports.peer_report.fraction_lost == 12
    assert session.rtcp_destination() == (PEER[0], PEER[1] + 1)


def test_the_sender_report_says_what_the_media_thread_sent() -> None:
    """Where the media thread sends, the SR's counts are the wire's (what Python made in
    time and what the thread filled in), and its RTP timestamp is the one of its NTP
    time, from the last packet sent (RFC 3550 §6.4.1)."""
    session = MediaSession("PCMU", 0, 101, PEER)
    stream(session, audio_frames(speech_like(0.2)))
    for i in range(5):
        session.tick(i * 0.02)  # Python's own count: 5 packets
    wall = 1_800_000_000.0
    wire = (7, 7 * 160, 0xFFFFFF00, wall - 0.1)  # the last one 100 ms before the report
    reports = [session.rtcp_report(i * 0.02, wall, wire) for i in range(500)]
    report = next(r for r in reports if r is not None)
    sr = rtcp.parse(report)[0]
    assert isinstance(sr, rtcp.SenderReport)
    assert (sr.packet_count, sr.octet_count) == (7, 1120)
    assert sr.rtp_timestamp == (0xFFFFFF00 + 800) & 0xFFFFFFFF  # 100 ms on, wrapped
    assert sr.ntp_timestamp == rtcp.ntp_timestamp(wall)
    # Nothing on the wire yet: a Receiver Report, whatever Python made.
    quiet = MediaSession("PCMU", 0, 101, PEER)
    for i in range(5):
        quiet.tick(i * 0.02)
    first = [quiet.rtcp_report(i * 0.02, wall, (0, 0, 0, 0.0)) for i in range(500)]
    assert isinstance(rtcp.parse(next(r for r in first if r is not None))[0], rtcp.ReceiverReport)


def test_a_streamed_prompt_waits_for_its_next_sentence_in_silence() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    first = g711.encode("ulaw", tones.tone(440.0, 0.04))  # 2 frames
    second = g711.encode("ulaw", tones.tone(880.0, 0.03))  # 1.5 frames
    session.play_encoded(5, first, more=True)
    sent = [session.tick(i * 0.02) for i in range(4)]  # 2 frames of audio, then 2 waiting
    assert events(session) == []  # not finished: more is coming
    assert session.underruns == 2
    session.append_prompt(5, second)
    session.close_prompt(5)
    sent += [session.tick(i * 0.02) for i in range(4, 8)]
    payloads = [RtpPacket.parse(p).payload for p in sent if p is not None]
    silence = g711.silence("ulaw", FRAME)
    assert payloads[:2] == [first[:FRAME], first[FRAME:]]
    assert payloads[2:4] == [silence, silence]
    assert payloads[4] == second[:FRAME]
    # the half frame at the end is padded with silence, then the prompt is over
    assert payloads[5] == second[FRAME:] + silence[: FRAME - len(second[FRAME:])]
    assert events(session) == [PromptFinished(5)]


def test_audio_for_a_stopped_or_replaced_streamed_prompt_is_ignored() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.play_encoded(1, b"", more=True)
    session.stop_prompt(1)
    session.append_prompt(1, g711.encode("ulaw", tones.tone(440.0, 0.1)))
    session.close_prompt(1)
    session.play_encoded(2, b"", more=True)
    session.append_prompt(1, g711.encode("ulaw", tones.tone(440.0, 0.1)))
    session.close_prompt(2)
    sent = [session.tick(i * 0.02) for i in range(3)]
    payloads = [RtpPacket.parse(p).payload for p in sent if p is not None]
    assert payloads == [g711.silence("ulaw", FRAME)] * 3
    assert events(session) == [PromptFinished(2)]


def test_a_word_said_just_before_listening_starts_is_caught_up() -> None:
    """The model wakes with the last 0.4 s: speech that began during the beep is heard."""
    session = MediaSession("PCMU", 0, 101, PEER)
    speech = wav.decode_to_8k((SPEECH / "5_jackson_5.wav").read_bytes())
    frames = audio_frames(np.concatenate([np.zeros(8000, np.int16), speech]))
    stream(session, frames[: len(frames) - 5])  # all but the last 100 ms: nobody listens
    assert events(session) == []
    session.start_recognition()
    caught = events(session)
    assert VoiceActivity(True) in caught and SpeechStarted() in caught
    n = len(frames) - 5
    rest = frames[n:] + audio_frames(np.zeros(8000, np.int16))
    stream(session, rest, start=n * 0.02, seq0=100 + n, ts0=1000 + n * FRAME)
    assert len(session.utterances) == 1
    session.detect_voice(True)
    session.stop_recognition()
    assert not session.vad.paused  # record still wants voice activity
    session.detect_voice(False)
    assert session.vad.paused


def test_the_preroll_is_measured_in_time_not_in_frames() -> None:
    """A frame lost within the pre-roll does not pull an older one in: the file starts
    0.12 s before the last frame's end, the gap filled with silence (six frames back
    would have reached frame 23)."""
    session = MediaSession("PCMU", 0, 101, PEER)
    frames = audio_frames(speech_like(0.6))
    stream(session, frames, skip={25})
    sink = Sink()
    session.start_recording(sink, None, preroll=0.12)
    session.stop_recording(0.58)
    silence = g711.silence("ulaw", FRAME)
    assert bytes(sink.data) == frames[24] + silence + b"".join(frames[26:])


def test_a_recording_catches_up_from_the_media_time_it_was_decided_at() -> None:
    """Decided at 0.2 s (the frame received then is the 11th) with 0.1 s of pre-roll,
    started once the frames up to 0.38 s were in: the file begins five frames back from
    the 11th, as it would have had it started at once."""
    session = MediaSession("PCMU", 0, 101, PEER)
    frames = audio_frames(speech_like(0.4))
    stream(session, frames[:11])
    at_once = Sink()
    session.start_recording(at_once, None, preroll=0.1)
    session.stop_recording(0.2)
    stream(session, frames[11:], start=0.22, seq0=111, ts0=1000 + 11 * FRAME)
    late = Sink()
    session.start_recording(late, None, preroll=0.1, at=0.2)
    session.stop_recording(0.38)
    assert bytes(late.data) == bytes(at_once.data) + b"".join(frames[11:])
    assert bytes(at_once.data) == b"".join(frames[6:11])


def test_a_sink_that_fills_up_during_the_preroll_ends_the_recording_cleanly() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    stream(session, audio_frames(speech_like(0.4)))
    sink = Sink(limit=800)  # five frames
    session.start_recording(sink, None, preroll=0.3)  # fifteen frames back
    assert len(sink.data) == 800
    assert [type(e).__name__ for e in session.events] == ["RecorderFailed"]
    session.stop_recording(0.4)  # (nothing left to stop)
