"""Every call's frames of a media tick measured at once (callhook/media/frames.py), and the
media tick that uses it: a call's detectors hear the same whether its frames are decoded
one by one or with every other call's."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callhook.edge.mediaengine import MediaEngine
from callhook.events import DigitReceived
from callhook.media import frames, g711, tones
from callhook.media.dtmfsend import inband
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from tests.native import without


def _payloads(law: g711.Law) -> list[bytes]:
    rng = np.random.default_rng(7)
    noise = rng.integers(-3000, 3000, 160 * 5, dtype=np.int16)
    loud = tones.tone(440.0, 0.02, -6.0)
    chunks = [g711.encode(law, noise[i * 160 : (i + 1) * 160]) for i in range(5)]
    return [*chunks[:2], g711.encode(law, loud), b"", chunks[2][:80], *chunks[3:]]


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_measure_gives_each_frame_its_samples_and_exact_power(law: g711.Law) -> None:
    payloads = _payloads(law)
    samples, powers, verdicts = frames.measure(law, payloads)
    assert verdicts == [None] * len(payloads)  # not asked for
    assert len(samples) == len(powers) == len(payloads)
    for payload, got, power in zip(payloads, samples, powers, strict=True):
        alone = g711.decode(law, payload)
        assert np.array_equal(got, alone)
        exact = sum(int(x) * int(x) for x in alone.tolist())
        assert power == (exact / len(alone) if len(alone) else 0.0)
        assert power == frames.frame_power(alone)  # the detector alone measures the same


def test_measured_frames_are_read_only() -> None:
    samples, _, _ = frames.measure("ulaw", [b"\x00" * 160, b"\x10" * 160])
    with pytest.raises(ValueError):
        samples[0][0] = 1  # rows of one array: a writer would change another call's frame


def test_measure_of_nothing() -> None:
    assert frames.measure("ulaw", []) == ([], [], [])


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_the_tone_prefilter_passes_key_presses_and_turns_noise_away(law: g711.Law) -> None:
    rng = np.random.default_rng(5)
    noise = g711.encode(law, rng.integers(-2000, 2000, 160, dtype=np.int16))
    press = inband("5", law)[:160]  # the first 20 ms of a key press's tone pair
    quiet = g711.silence(law, 160)
    _, _, verdicts = frames.measure(law, [noise, press, quiet, press[:100]], tones=True)
    assert verdicts == [False, True, False, None]  # the short frame is judged alone


def _audio(law: g711.Law) -> list[bytes]:
    """Line noise, a key press in the audio, more noise, in 20 ms frames (one short)."""
    rng = np.random.default_rng(3)
    noise = g711.encode(law, rng.integers(-200, 200, 160 * 30, dtype=np.int16))
    audio = noise[: 160 * 12] + inband("7", law) + noise[160 * 12 :]
    chunks = [audio[i : i + 160] for i in range(0, len(audio), 160)]
    chunks[20] = chunks[20][:120]  # an odd packet is measured in its place
    return chunks


class FaultyDetection(MediaSession):
    def detect(self, samples: object, powers: object, tones: object = None) -> None:
        raise RuntimeError("a bug in detection")


async def test_the_tick_decodes_every_calls_frames_as_one_call_alone_would() -> None:
    engine = MediaEngine("127.0.0.1", 41400, 41500, thread=False)
    peer = ("127.0.0.1", 5004)
    try:
        laws: list[g711.Law] = ["ulaw", "alaw", "ulaw"]
        batched = [
            MediaSession("PCMU" if law == "ulaw" else "PCMA", 0 if law == "ulaw" else 8, None, peer)
            for law in laws
        ]
        alone = [
            MediaSession("PCMU" if s.law == "ulaw" else "PCMA", s.payload_type, None, peer)
            for s in batched
        ]
        broken = FaultyDetection("PCMU", 0, None, peer, label="call broken")
        keys = [engine.attach(s, lambda _: None, lambda: None) for s in [*batched, broken]]
        assert all(s.batched for s in [*batched, broken]) and not alone[0].batched
        audio = {law: _audio(law) for law in ("ulaw", "alaw")}
        now = asyncio.get_running_loop().time()
        for tick, _ in enumerate(audio["ulaw"]):
            at = now + tick * 0.02
            for i, session in enumerate([*batched, broken]):
                law = session.law
                packet = RtpPacket(
                    session.payload_type, False, tick, tick * 160, 99 + i, audio[law][tick]
                ).serialize()
                engine.deliver(keys[i], packet, peer)
                if i < len(alone):
                    alone[i].receive(packet, peer, at)
            engine._work(at, [])
            for a, b in zip(batched, alone, strict=True):
                assert a.undetected == []  # the tick took them
                assert list(a.events) == list(b.events)
                assert a.vad.noise_floor_dbfs == b.vad.noise_floor_dbfs
        for session in batched:
            assert DigitReceived("7") in session.events
        assert engine.faults == len(audio["ulaw"])  # every frame of the broken call, only those
    finally:
        engine.shutdown()


async def test_a_call_whose_detection_raises_in_a_burst_loses_the_rest_of_that_burst() -> None:
    """A bug in one call's detection costs that call the rest of the tick's burst (one
    fault a tick), and the other calls in bursts hear what they would alone."""
    engine = MediaEngine("127.0.0.1", 41700, 41800, thread=False)
    peer = ("127.0.0.1", 5004)
    try:
        broken = FaultyDetection("PCMU", 0, None, peer, label="call broken")
        fine = MediaSession("PCMU", 0, None, peer, label="call fine")
        alone = MediaSession("PCMU", 0, None, peer)
        keys = [engine.attach(s, lambda _: None, lambda: None) for s in (broken, fine)]
        audio = _audio("ulaw")
        audio = audio[: len(audio) // 2 * 2]
        now = asyncio.get_running_loop().time()
        for tick in range(len(audio) // 2):
            for seq in (2 * tick, 2 * tick + 1):
                for i, key in enumerate(keys):
                    packet = RtpPacket(0, False, seq, seq * 160, 99 + i, audio[seq]).serialize()
                    engine.deliver(key, packet, peer)
                    if i:
                        alone.receive(packet, peer, now + tick * 0.02)
            engine._work(now + tick * 0.02, [])
            assert list(fine.events) == list(alone.events)
        assert DigitReceived("7") in fine.events
        assert engine.faults == len(audio) // 2
    finally:
        engine.shutdown()


async def test_a_call_with_a_burst_leaves_the_others_one_frame_to_the_native_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A late tick gives some calls two frames: the calls with one frame are still taken
    in C (media/gate.py), and so are the bursts' usual frames, one round at a time; all
    hear exactly what they would alone. (Digits come as RFC 4733 events: no in-band
    detector listens.)"""
    from callhook.media import gate

    if not gate.native():
        pytest.skip("the extension was not built: nothing is taken in C")
    engine = MediaEngine("127.0.0.1", 41500, 41600, thread=False)
    peer = ("127.0.0.1", 5004)
    try:
        steady = [MediaSession("PCMU", 0, 101, peer, label=f"call {i}") for i in range(2)]
        bursty = MediaSession("PCMU", 0, 101, peer, label="call bursty")
        alone = [MediaSession("PCMU", 0, 101, peer) for _ in range(3)]
        in_python = {id(s): 0 for s in [*steady, bursty]}
        for session in [*steady, bursty]:
            detect = session.detect

            def counting(
                samples: object,
                powers: object,
                tones: object = None,
                *,
                _s: MediaSession = session,
                _d: object = detect,
            ) -> None:
                in_python[id(_s)] += 1
                _d(samples, powers, tones)  # type: ignore[operator]

            monkeypatch.setattr(session, "detect", counting)
        keys = [engine.attach(s, lambda _: None, lambda: None) for s in [*steady, bursty]]
        rng = np.random.default_rng(3)
        quiet = [g711.encode("ulaw", rng.integers(-40, 40, 160, dtype=np.int16)) for _ in range(60)]
        now = asyncio.get_running_loop().time()
        sent = 0
        ticks = 40
        for tick in range(ticks):
            at = now + tick * 0.02
            # The bursty call's packets come two at a time, every other tick.
            plan = [[tick], [tick], [sent, sent + 1] if tick % 2 else []]
            if tick % 2:
                sent += 2
            for i, seqs in enumerate(plan):
                for seq in seqs:
                    packet = RtpPacket(0, False, seq, seq * 160, 99 + i, quiet[seq]).serialize()
                    engine.deliver(keys[i], packet, peer)
                    alone[i].receive(packet, peer, at)
            engine._work(at, [])
            for a, b in zip([*steady, bursty], alone, strict=True):
                assert a.undetected == []
                assert a.vad.noise_floor_dbfs == b.vad.noise_floor_dbfs
                assert list(a.events) == list(b.events)
        # Every other tick had a burst in the group, yet every call's frames (paused
        # detectors, nothing listening) were taken in C, the bursts' too.
        assert sent == ticks
        assert list(in_python.values()) == [0, 0, 0]
    finally:
        engine.shutdown()


async def test_a_listening_call_in_bursts_hears_what_it_would_alone() -> None:
    """A call whose detector listens (a recording's silence detection) gets its frames two
    at a time: they are worked round by round, the usual ones taken in C, the others
    (the model's, an edge) by Python. It hears its speech start and end exactly as a call
    fed frame by frame does."""
    import wave
    from pathlib import Path

    from callhook.events import VoiceActivity
    from callhook.media import gate

    if not gate.native():
        pytest.skip("the extension was not built: nothing is taken in C")
    with wave.open(str(Path(__file__).parents[2] / "data" / "speech" / "5_jackson_5.wav")) as w:
        speech = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)
    rng = np.random.default_rng(5)
    quiet = rng.integers(-30, 30, 8000, dtype=np.int16)
    audio = np.concatenate([quiet, speech, quiet, quiet])
    audio = audio[: len(audio) // 160 * 160].reshape(-1, 160)
    if len(audio) % 2:
        audio = audio[:-1]
    engine = MediaEngine("127.0.0.1", 41600, 41700, thread=False)
    peer = ("127.0.0.1", 5004)
    try:
        bursty = MediaSession("PCMU", 0, 101, peer, label="call bursty")
        alone = MediaSession("PCMU", 0, 101, peer)
        python_frames = 0
        detect = bursty.detect

        def counting(samples: list[object], powers: object, tones: object = None) -> None:
            nonlocal python_frames
            python_frames += len(samples)
            detect(samples, powers, tones)  # type: ignore[arg-type]

        bursty.detect = counting  # type: ignore[method-assign,assignment]
        key = engine.attach(bursty, lambda _: None, lambda: None)
        for session in (bursty, alone):
            session.detect_voice(True)
        now = asyncio.get_running_loop().time()
        for tick in range(len(audio) // 2):
            for seq in (2 * tick, 2 * tick + 1):
                packet = RtpPacket(0, False, seq, seq * 160, 99, g711.encode("ulaw", audio[seq]))
                engine.deliver(key, packet.serialize(), peer)
                alone.receive(packet.serialize(), peer, now + tick * 0.02)
            engine._work(now + tick * 0.02, [])
            assert bursty.undetected == []
            assert list(bursty.events) == list(alone.events), f"tick {tick}"
            assert bursty.vad.noise_floor_dbfs == alone.vad.noise_floor_dbfs
        heard = [e for e in bursty.events if isinstance(e, VoiceActivity)]
        assert heard[:1] == [VoiceActivity(True)] and heard[-1] == VoiceActivity(False)
        assert engine.faults == 0
        # The model's frames and the edges were Python's, most of the rest C's.
        assert 0 < python_frames < len(audio) // 2
        # The model heard every window a call fed frame by frame hears.
        model, reference = bursty.vad.model, alone.vad.model
        assert model.windows == reference.windows > 0
    finally:
        engine.shutdown()


# --- the C path (_frames.c) against the numpy reference ------------------------------------


def test_the_extension_is_built() -> None:
    assert frames.native(), "callhook.media._frames was not built: rerun scripts/setup"


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_every_code_decodes_and_measures_as_the_reference(law: g711.Law) -> None:
    # Every one of the 256 codes in every position, and the loudest frames of both signs:
    # the sum of squares at its largest (exact in both paths).
    every = bytes(range(256))
    payloads = [(every * 2)[i : i + 160] for i in range(0, 256, 16)]
    loud = g711.encode(law, np.full(160, -32768, np.int16))
    payloads += [loud, g711.encode(law, np.full(160, 32767, np.int16))]
    rows, powers = frames.decode_measure_native(law, payloads)
    want_rows, want_powers = frames.decode_measure_python(law, payloads)
    assert rows.dtype == np.int16 and rows.shape == (len(payloads), 160)
    assert np.array_equal(rows, want_rows)
    assert powers == want_powers  # to the bit
    assert powers[-2] == float(int(g711.decode(law, loud)[0]) ** 2)


@given(
    st.lists(st.binary(min_size=160, max_size=160), min_size=1, max_size=40),
    st.sampled_from(["ulaw", "alaw"]),
)
@settings(max_examples=200, deadline=None)
def test_any_frames_decode_and_measure_as_the_reference(
    payloads: list[bytes], law: g711.Law
) -> None:
    rows, powers = frames.decode_measure_native(law, payloads)
    want_rows, want_powers = frames.decode_measure_python(law, payloads)
    assert np.array_equal(rows, want_rows)
    assert powers == want_powers


def test_the_c_path_refuses_what_it_cannot_measure() -> None:
    from callhook.media import _frames  # (here: the module's other tests run without it)

    table = g711.ULAW_DECODE
    frame = b"\x10" * 160
    with pytest.raises(ValueError, match="different lengths"):
        _frames.decode_measure(table, [frame, frame[:80]], np.empty((2, 160), np.int16))
    with pytest.raises(ValueError, match="one int16 row"):
        _frames.decode_measure(table, [frame, frame], np.empty((1, 160), np.int16))
    with pytest.raises(ValueError, match="256 int16"):
        _frames.decode_measure(table[:128], [frame], np.empty((1, 160), np.int16))
    with pytest.raises(ValueError, match="256 int16"):  # 512 bytes, but not int16
        _frames.decode_measure(np.zeros(512, np.uint8), [frame], np.empty((1, 160), np.int16))
    with pytest.raises(ValueError, match="int16 samples"):
        _frames.decode_measure(table, [frame], np.empty((1, 80), np.int32))
    with pytest.raises(ValueError, match="empty payload"):
        _frames.decode_measure(table, [b""], np.empty((1, 0), np.int16))
    with pytest.raises(TypeError, match="not bytes"):
        later: list[Any] = [frame, bytearray(frame)]
        _frames.decode_measure(table, later, np.empty((2, 160), np.int16))
    with pytest.raises(TypeError, match="not bytes"):
        wrong: list[Any] = [bytearray(frame)]  # (packets are bytes; nothing else is read)
        _frames.decode_measure(table, wrong, np.empty((1, 160), np.int16))
    read_only = np.empty((1, 160), np.int16)
    read_only.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        _frames.decode_measure(table, [frame], read_only)
    assert _frames.decode_measure(table, [], np.empty((0, 160), np.int16)) == []


def test_payloads_that_are_not_bytes_are_measured_by_numpy() -> None:
    frame = g711.encode("alaw", np.arange(-800, 800, 10, dtype=np.int16))
    mixed: list[Any] = [frame, bytearray(frame)]  # (a producer's view or buffer, say)
    rows, powers = frames.decode_measure_native("alaw", mixed)
    want_rows, want_powers = frames.decode_measure_python("alaw", [frame, frame])
    assert np.array_equal(rows, want_rows) and powers == want_powers


FALLBACK = """
from callhook.media import frames
assert not frames.native()
m = frames.measure("ulaw", [b"\\x00" * 160, b"\\x80" * 160, b"\\x00" * 80])
assert len(m.samples) == 3 and m.powers[0] == m.powers[1] > 0
print("ok")
"""


def test_without_the_extension_numpy_measures() -> None:
    assert without(["callhook.media._frames"], FALLBACK).strip() == "ok"
