"""DTMF out (play media ``digits_to_play``): RFC 4733 events and in-band tones, tick by tick.

The media session alone, on a virtual clock (``tick`` every 20 ms); what it
sends is parsed field by field. The in-band path is checked with callhook's
own receivers: the tone detector, and a second session that hears the first.
Then the same digits through the prompt builder, the scripted call's timer
and a whole play action on a scripted call.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from callhook.devtools.harness import AppServer, Caller, run_call
from callhook.events import (
    DigitReceived,
    PlayDigits,
    PlayTone,
    PlayUrl,
    PromptFinished,
    StartPrompt,
)
from callhook.media import dtmfsend, g711, tones
from callhook.media.dtmf import ToneDetector
from callhook.media.dtmfsend import Digits, EventTone
from callhook.media.player import FRAME, PromptError, Segment
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.media.simulated import PromptTimer
from callhook.ports import CallInfo
from callhook.store.files import MediaStore
from callhook.telephony.leg import SipLeg
from callhook.telephony.prompts import PromptAudio

PEER = ("192.0.2.10", 40000)
TE = 101


@dataclass(frozen=True)
class Sent:
    """One tick's outcome: the packet sent (None: nothing) and the events it raised."""

    at: float
    packet: RtpPacket | None
    finished: bool


@dataclass(frozen=True)
class Ev:
    """An RFC 4733 payload (§2.3), read back."""

    digit: str
    end: bool
    volume: int
    duration: int


def event(packet: RtpPacket) -> Ev:
    code, flags, duration = struct.unpack("!BBH", packet.payload)
    return Ev("0123456789*#ABCD"[code], bool(flags & 0x80), flags & 0x3F, duration)


def session(te: int | None = TE, codec: str = "PCMU") -> MediaSession:
    pt = 0 if codec == "PCMU" else 8
    s = MediaSession(codec, pt, te, PEER)  # type: ignore[arg-type]
    s.sender.sequence, s.sender.timestamp = 65530, 0xFFFFFE00  # both wrap during the tests
    return s


def run(s: MediaSession, ticks: int, start: float = 0.0) -> list[Sent]:
    out = []
    for i in range(ticks):
        data = s.tick(start + i * 0.02)
        finished = any(isinstance(e, PromptFinished) for e in s.events)
        s.events.clear()
        out.append(Sent(start + i * 0.02, RtpPacket.parse(data) if data else None, finished))
    return out


def packets(sent: list[Sent]) -> list[RtpPacket]:
    return [x.packet for x in sent if x.packet is not None]


def tone_frames(hz: float, frames: int, law: g711.Law = "ulaw") -> bytes:
    return g711.encode(law, tones.tone(hz, frames * 0.02))


def contiguous(ps: list[RtpPacket]) -> bool:
    seqs = [p.sequence_number for p in ps]
    return all((b - a) & 0xFFFF == 1 for a, b in itertools.pairwise(seqs))


# --- RFC 4733 events -------------------------------------------------------------------------


def test_each_digit_is_one_event_of_exact_packets_between_audio() -> None:
    s = session()
    before, after = tone_frames(440.0, 2), tone_frames(880.0, 2)
    ts0 = s.sender.timestamp
    s.play_segments(7, [before, Digits("1#"), after])
    sent = run(s, 26)
    ps = packets(sent)
    assert len(ps) == 26 and contiguous(ps)  # one packet a tick; the sequence runs on
    kinds = "".join("e" if p.payload_type == TE else "a" for p in ps)
    assert kinds == "aa" + "eeeeeee" + "aaa" + "eeeeeee" + "aaa" + "aa" + "aa"
    # Audio: the prompt's frames, the silent rest of each digit's gap, on the media clock.
    audio = [p for p in ps if p.payload_type == 0]
    assert [p.payload for p in audio[:2]] == [before[:FRAME], before[FRAME:]]
    assert {p.payload for p in audio[2:5] + audio[5:8]} == {g711.silence("ulaw", FRAME)}
    assert [p.payload for p in audio[8:10]] == [after[:FRAME], after[FRAME:]]
    assert [p.marker for p in audio] == [True] + [False] * 11  # the stream's first packet only
    for p, tick in zip(ps, range(26), strict=True):
        if p.payload_type == 0:
            assert p.timestamp == (ts0 + tick * FRAME) & 0xFFFFFFFF
    # Events: one per digit, starting on the tick after the audio, 200 ms apart.
    for start, digit in ((2, "1"), (12, "#")):
        packets_of = ps[start : start + 7]
        stamps = {p.timestamp for p in packets_of}
        assert stamps == {(ts0 + start * FRAME) & 0xFFFFFFFF}  # the event's start, on every one
        assert [p.marker for p in packets_of] == [True] + [False] * 6
        fields = [event(p) for p in packets_of]
        assert {f.digit for f in fields} == {digit}
        assert {f.volume for f in fields} == {10}  # -10 dBm0
        assert [f.duration for f in fields] == [160, 320, 480, 640, 800, 800, 800]
        assert [f.end for f in fields] == [False] * 4 + [True] * 3
    # The prompt finishes with its last frame, well after the last end packet; then silence.
    assert [i for i, x in enumerate(sent) if x.finished] == [23]
    assert [p.payload for p in audio[10:]] == [g711.silence("ulaw", FRAME)] * 2


def test_digits_alone_take_200_ms_each_and_finish_after_the_last_end_packet() -> None:
    s = session()
    s.play_segments(1, [Digits("123")])
    sent = run(s, 32)
    ps = packets(sent)
    starts = [i for i, p in enumerate(ps) if p.marker]
    assert starts == [0, 10, 20]  # the next digit 200 ms after the previous one began
    last_end = max(i for i, p in enumerate(ps) if p.payload_type == TE)
    assert last_end == 26
    assert [i for i, x in enumerate(sent) if x.finished] == [29]  # 3 x 200 ms
    assert [p.payload_type for p in ps[30:]] == [0, 0]  # silence after the prompt
    assert contiguous(ps)
    # The stream began with an event (its marker): the audio after it has none.
    assert not any(p.marker for p in ps if p.payload_type == 0)


def test_callhooks_own_rfc4733_receiver_hears_each_digit_once() -> None:
    sender, receiver = session(), MediaSession("PCMU", 0, TE, ("192.0.2.1", 5000))
    sender.play_segments(1, [Digits("0123456789*#ABCD")])
    for x in run(sender, 16 * 10):
        assert x.packet is not None
        receiver.receive(x.packet.serialize(), PEER, x.at)
        receiver.tick(x.at)
    digits = [e.digit for e in receiver.events if isinstance(e, DigitReceived)]
    assert "".join(digits) == "0123456789*#ABCD"


def test_stopping_mid_event_ends_it_with_three_end_packets_then_silence() -> None:
    s = session()
    s.play_segments(4, [Digits("58")])
    first = run(s, 2)  # the event's first two packets: duration 160, 320
    s.stop_prompt(4)  # barge-in
    rest = run(s, 6, start=0.04)
    ps = packets(first + rest)
    assert contiguous(ps)
    fields = [event(p) for p in ps[:5]]
    assert [f.duration for f in fields] == [160, 320, 320, 320, 320]
    assert [f.end for f in fields] == [False, False, True, True, True]
    assert {f.digit for f in fields} == {"5"}  # the next digit is never started
    assert {p.timestamp for p in ps[:5]} == {ps[0].timestamp}
    assert [p.payload_type for p in ps[5:]] == [0, 0, 0]
    assert {p.payload for p in ps[5:]} == {g711.silence("ulaw", FRAME)}
    assert ps[5].timestamp == (ps[0].timestamp + 5 * FRAME) & 0xFFFFFFFF
    assert not ps[5].marker
    assert not any(x.finished for x in first + rest)  # a stopped prompt never finishes


def test_stopping_during_the_end_packets_sends_three_in_all() -> None:
    s = session()
    s.play_segments(4, [Digits("5")])
    first = run(s, 6)  # four updates, the end packet, its first retransmission
    s.stop_prompt(4)
    ps = packets(first + run(s, 3, start=0.12))
    assert [event(p).end for p in ps[:7]] == [False] * 4 + [True] * 3
    assert [p.payload_type for p in ps[7:]] == [0, 0]


def test_a_new_prompt_waits_for_the_end_of_the_event_it_replaces() -> None:
    s = session()
    s.play_segments(1, [Digits("9")])
    run(s, 3)
    tone = tone_frames(600.0, 2)
    s.play_segments(2, [tone])
    sent = run(s, 6, start=0.06)
    ps = packets(sent)
    assert [(p.payload_type, event(p).end) for p in ps[:3]] == [(TE, True)] * 3
    assert {event(p).duration for p in ps[:3]} == {480}
    assert [p.payload for p in ps[3:5]] == [tone[:FRAME], tone[FRAME:]]
    assert [i for i, x in enumerate(sent) if x.finished] == [4]


def test_on_hold_an_event_is_not_sent_but_its_time_passes() -> None:
    s = session()
    s.play_segments(1, [Digits("1"), tone_frames(440.0, 1)])
    s.sending = False
    held = run(s, 10)
    assert all(x.packet is None for x in held)
    s.sending = True
    (after,) = packets(run(s, 1, start=0.2))
    assert after.payload_type == 0 and after.marker  # a talkspurt after the hold


def test_a_streamed_prompt_keeps_digits_in_their_place() -> None:
    s = session()
    one, two = tone_frames(440.0, 1), tone_frames(880.0, 1)
    s.play_segments(3, [], more=True)
    s.append_prompt(3, one)
    s.append_prompt(3, Digits("4"))
    s.append_prompt(3, two)
    s.close_prompt(3)
    sent = run(s, 13)
    ps = packets(sent)
    assert ps[0].payload == one
    assert [p.payload_type for p in ps[1:8]] == [TE] * 7
    assert ps[11].payload == two
    assert [i for i, x in enumerate(sent) if x.finished] == [11]


def test_a_part_frame_before_digits_is_padded_with_silence() -> None:
    s = session()
    half = tone_frames(440.0, 1)[:80]
    s.play_segments(1, [half, Digits("2")])
    ps = packets(run(s, 2))
    assert ps[0].payload == half + g711.silence("ulaw", 80)
    assert ps[1].payload_type == TE and ps[1].marker


def test_event_tone_alone() -> None:
    tone = EventTone("#", 1234)
    out = [tone.next_packet() for _ in range(7)]
    assert tone.done
    assert [m for _, m in out] == [True] + [False] * 6
    assert out[0][0] == bytes([11, 10, 0, 160])
    assert out[-1][0] == bytes([11, 0x80 | 10, 800 >> 8, 800 & 0xFF])
    unsent = EventTone("1", 0)
    unsent.stop()
    assert unsent.done  # nothing was sent: nothing to end
    with pytest.raises(ValueError, match="not DTMF digits"):
        Digits("12x")


# --- in-band tones ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_without_telephone_event_digits_are_tones_the_detector_hears_once(codec: str) -> None:
    law: g711.Law = "ulaw" if codec == "PCMU" else "alaw"
    s = session(None, codec)
    before = g711.encode(law, tones.tone(440.0, 0.3))
    s.play_segments(1, [before, Digits("0123456789*#ABCD"), before])
    sent = run(s, 15 + 160 + 15 + 5)
    ps = packets(sent)
    assert {p.payload_type for p in ps} == {s.payload_type}  # audio only, no events
    assert contiguous(ps)
    assert [i for i, x in enumerate(sent) if x.finished] == [15 + 160 + 15 - 1]
    detector = ToneDetector()
    heard = [detector.feed(g711.decode(law, p.payload)) for p in ps]
    assert "".join(d for d in heard if d is not None) == "0123456789*#ABCD"


def test_in_band_tones_are_100_ms_at_telephone_levels() -> None:
    samples = g711.decode("ulaw", dtmfsend.inband("5", "ulaw")).astype(np.float64)
    assert len(samples) == 1600
    on, off = samples[:800], samples[800:]
    assert not off.any()  # 100 ms of silence after the tone
    low, high = tones.dtmf_frequencies("5")
    t = np.arange(800) / 8000

    def level_dbm0(hz: float) -> float:  # one tone's RMS level, from its DFT
        amplitude = 2 * abs(np.sum(on * np.exp(-2j * np.pi * hz * t))) / 800
        dbfs = 20 * np.log10(amplitude / np.sqrt(2) / 32768)
        return float(dbfs - tones.DBM0_DBFS)

    assert level_dbm0(low) == pytest.approx(-10.0, abs=0.5)
    assert level_dbm0(high) == pytest.approx(-8.0, abs=0.5)


def test_callhooks_own_in_band_receiver_hears_each_digit_once() -> None:
    sender, receiver = session(None), MediaSession("PCMU", 0, None, ("192.0.2.1", 5000))
    sender.play_segments(1, [Digits("1155#")])
    for x in run(sender, 5 * 10 + 5):
        assert x.packet is not None
        receiver.receive(x.packet.serialize(), PEER, x.at)
        receiver.tick(x.at)
    digits = [e.digit for e in receiver.events if isinstance(e, DigitReceived)]
    assert "".join(digits) == "1155#"  # the same key twice is two presses


def test_the_echo_of_in_band_digits_is_not_taken_for_the_callers_digits() -> None:
    """A far end that echoes (no echo canceller) must not make the play barge in on itself."""
    s = session(None)
    s.play_segments(1, [Digits("12")])
    sent: list[bytes] = []
    caller = g711.encode("ulaw", tones.dtmf_tone("7", 0.1, -12.0))
    for i in range(60):
        data = s.tick(i * 0.02)
        assert data is not None
        sent.append(RtpPacket.parse(data).payload)
        # What comes back: our own audio 80 ms later, then (from 0.8 s) the caller's key.
        if i < 40:
            payload = sent[i - 4] if i >= 4 else g711.silence("ulaw", FRAME)
        else:
            chunk = caller[(i - 40) * FRAME : (i - 39) * FRAME]
            payload = chunk + g711.silence("ulaw", FRAME - len(chunk))
        header = struct.pack("!BBHII", 0x80, 0, 100 + i, 1000 + i * FRAME, 7)
        s.receive(header + payload, PEER, i * 0.02 + 0.01)
    digits = [e.digit for e in s.events if isinstance(e, DigitReceived)]
    assert digits == ["7"]
    assert s.echo_digits == 2


# --- the prompt builder, the scripted call ------------------------------------------------


def test_prompt_segments_keep_digits_for_the_session(tmp_path: Path) -> None:
    prompts = PromptAudio(MediaStore(tmp_path), None)
    items = (PlayTone(1000.0, 0.02), PlayDigits("12"), PlayTone(500.0, 0.02))
    segments: list[Segment]
    segments, done, error = prompts.ready("app", items, "ulaw")
    assert (done, error) == (3, None)
    assert [type(x) for x in segments] == [bytes, Digits, bytes]
    assert segments[1] == Digits("12")
    with pytest.raises(PromptError, match=r"fetched with remote_audio\(\)"):
        prompts.segment("app", PlayUrl("https://example.com/a.wav"), "ulaw")
    # A remote file is fetched while the prompt plays: ready() stops before it.
    segments, done, error = prompts.ready(
        "app", (PlayDigits("3"), PlayUrl("https://example.com/a.wav")), "ulaw"
    )
    assert (segments, done, error) == ([Digits("3")], 1, None)


async def test_a_sip_leg_hands_digits_to_the_session_in_order(tmp_path: Path) -> None:
    store = MediaStore(tmp_path)
    s = session()

    async def nothing() -> None:
        return None

    leg = SipLeg(
        CallInfo("c1"), "app", s, PromptAudio(store, None), store, answer=nothing, hang_up=str
    )
    leg.send([StartPrompt(1, (PlayTone(440.0, 0.04), PlayDigits("7"), PlayTone(880.0, 0.02)))])
    sent = run(s, 13)
    assert [p.payload_type for p in packets(sent)] == [0, 0] + [TE] * 7 + [0] * 4
    assert [i for i, x in enumerate(sent) if x.finished] == [12]
    # A remote file where nothing can fetch one: the prompt ends there, with the reason.
    leg.send([StartPrompt(2, (PlayDigits("8"), PlayUrl("https://example.com/a.wav")))])
    while leg._streaming:
        await asyncio.sleep(0)
    for i in range(10):  # the digit's 200 ms
        s.tick(1.0 + i * 0.02)
    (finished,) = leg.take_pending()
    assert isinstance(finished, PromptFinished) and finished.prompt_id == 2
    assert finished.error is not None and "remote files cannot be played here" in finished.error


def test_the_simulated_timer_gives_digits_their_real_time() -> None:
    timer = PromptTimer(files={"https://example.com/a.wav": 2.5})
    assert timer.seconds(PlayDigits("1234#*")) == pytest.approx(6 * 0.2)
    assert timer.seconds(PlayUrl("https://example.com/a.wav")) == 2.5
    assert timer.seconds(PlayUrl("https://example.com/b.wav")) == timer.default_file_seconds


async def test_a_play_of_digits_takes_their_time_on_a_scripted_call(app: AppServer) -> None:
    timer = PromptTimer(texts={"after": 1.0})
    app.page(
        "/start",
        [
            {"play": {"play_list": [{"digits_to_play": "1234"}]}},
            {"play": {"play_list": [{"text_to_say": "after"}]}},
        ],
    )
    r = await run_call(app, Caller(), timer=timer)
    (t0, first), (t1, _) = r.leg.commands(StartPrompt)
    assert first.items == (PlayDigits("1234"),)
    assert (t0, t1) == pytest.approx((0.0, 0.8))
    assert r.summary.cause == "completed"
