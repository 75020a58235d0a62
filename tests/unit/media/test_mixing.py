"""The conference mixer's reference: nobody hears itself, sums saturate, quiet lines stay out."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

with contextlib.suppress(ImportError):  # (without it the native tests skip)
    from callhook.media import _mixing

from callhook.media import g711, mixing
from callhook.media.frames import frame_power
from callhook.media.mixing import (
    FRAME,
    HANGOVER,
    OPEN_DBOV,
    RoomMix,
    TalkerGate,
    dbov_of_power,
    encode,
    mix,
    power_of_dbov,
)
from tests.native import without

RATE = 8000
TONES = (400.0, 700.0, 1100.0, 1500.0, 1900.0)


def tone(hz: float, amplitude: float = 4000.0, frame: int = 0) -> np.ndarray:
    t = (np.arange(FRAME) + frame * FRAME) / RATE
    return np.round(amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def peaks(samples: np.ndarray, floor: float = 0.1) -> set[float]:
    """The tones present in ``samples`` (a whole number of frames: 50 Hz bins)."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    freqs = np.fft.rfftfreq(len(samples), 1 / RATE)
    return {float(f) for f, a in zip(freqs, spectrum, strict=True) if a > floor * spectrum.max()}


def test_each_hears_the_others_and_not_itself() -> None:
    frames = np.stack([tone(hz) for hz in TONES])
    heard = mix(frames, [True] * len(TONES))
    for i, hz in enumerate(TONES):
        expected = frames.astype(np.int32).sum(axis=0) - frames[i]
        assert np.array_equal(heard[i], expected)
        assert peaks(heard[i]) == set(TONES) - {hz}


def test_a_participant_out_of_the_mix_hears_everyone_and_is_heard_by_none() -> None:
    frames = np.stack([tone(hz) for hz in TONES[:3]])
    heard = mix(frames, [True, False, True])  # the second muted, or a listener
    assert peaks(heard[0]) == {TONES[2]}
    assert peaks(heard[1]) == {TONES[0], TONES[2]}
    assert peaks(heard[2]) == {TONES[0]}


def test_a_loud_sum_saturates_and_does_not_wrap() -> None:
    loud = np.full(FRAME, 30000, dtype=np.int16)
    frames = np.stack([loud, loud, loud, -loud])
    heard = mix(frames, [True, True, True, True])
    assert (heard[3] == 32767).all()  # 90000, held at the top
    assert (heard[0] == 30000).all()  # 30000 + 30000 - 30000
    low = np.full(FRAME, -32768, dtype=np.int16)
    assert (mix(np.stack([low, low, low]), [True] * 3) == -32768).all()


def test_nobody_mixed_hears_silence() -> None:
    frames = np.stack([tone(400.0), tone(700.0)])
    assert not mix(frames, [False, False]).any()


def test_the_frames_must_match_the_participants() -> None:
    with pytest.raises(ValueError, match="2 participants"):
        mix(np.zeros((3, FRAME), dtype=np.int16), [True, True])


def test_each_row_is_encoded_in_its_participants_law() -> None:
    frames = np.stack([tone(400.0), tone(700.0)])
    heard = mix(frames, [True, True])
    ulaw, alaw = encode(heard, ["ulaw", "alaw"])
    assert ulaw == g711.encode("ulaw", heard[0]) and alaw == g711.encode("alaw", heard[1])
    back = g711.decode("alaw", alaw).astype(np.int32)
    assert np.abs(back - heard[1]).max() < 256  # (G.711's step at this level)


def test_levels_in_dbov() -> None:
    assert dbov_of_power(power_of_dbov(-45.0)) == pytest.approx(-45.0)
    assert dbov_of_power(0.0) == -np.inf
    # A full-scale sine is 3 dB below a full-scale square wave.
    assert dbov_of_power(frame_power(tone(1000.0, 32767.0))) == pytest.approx(-3.0, abs=0.1)


def test_a_quiet_line_stays_out_and_speech_opens_the_gate_with_a_hangover() -> None:
    gate = TalkerGate()
    noise = frame_power(np.random.default_rng(1).normal(0, 30, FRAME).astype(np.int16))
    assert dbov_of_power(noise) < OPEN_DBOV
    assert not any(gate.feed(noise) for _ in range(50))
    speech = frame_power(tone(700.0, 3000.0))
    assert gate.feed(speech)
    after = [gate.feed(noise) for _ in range(HANGOVER + 3)]
    assert after == [True] * HANGOVER + [False] * 3
    assert gate.feed(speech)
    gate.close()
    assert not gate.feed(noise)


def test_the_gates_thresholds_are_options() -> None:
    gate = TalkerGate(open_dbov=-60.0, hangover=0)
    assert gate.feed(power_of_dbov(-59.0))
    assert not gate.feed(power_of_dbov(-61.0))


def run_room(
    laws: list[g711.Law], talkers: set[str], ticks: int = 10, active: bool = True
) -> list[np.ndarray]:
    """Participants p0, p1, ... each saying its tone of TONES for ``ticks`` ticks; what each
    heard, decoded."""
    room = RoomMix()
    feeds = [room.add(f"p{i}", law) for i, law in enumerate(laws)]
    heard: list[list[np.ndarray]] = [[] for _ in laws]
    for t in range(ticks):
        for i, (law, (talk, _)) in enumerate(zip(laws, feeds, strict=True)):
            talk.push(g711.encode(law, tone(TONES[i], frame=t)))
        room.tick(talkers, active)
        for i, (law, (_, hears)) in enumerate(zip(laws, feeds, strict=True)):
            frame = hears.frame()
            if frame is not None:
                heard[i].append(g711.decode(law, frame))
    return [np.concatenate(h) if h else np.zeros(0, dtype=np.int16) for h in heard]


def test_a_room_of_both_laws_each_hears_the_others_tones() -> None:
    laws: list[g711.Law] = ["ulaw", "alaw", "ulaw", "alaw", "ulaw"]
    heard = run_room(laws, {f"p{i}" for i in range(5)})
    for i, samples in enumerate(heard):
        assert len(samples) == 10 * FRAME
        assert peaks(samples, floor=0.2) == set(TONES) - {TONES[i]}


def test_a_muted_talker_or_listener_is_not_heard_but_hears() -> None:
    heard = run_room(["ulaw", "ulaw", "alaw"], {"p0", "p2"})
    assert peaks(heard[0], floor=0.2) == {TONES[2]}
    assert peaks(heard[1], floor=0.2) == {TONES[0], TONES[2]}
    assert peaks(heard[2], floor=0.2) == {TONES[0]}


def test_a_holding_room_gives_nobody_anything_to_hear() -> None:
    assert all(len(h) == 0 for h in run_room(["ulaw", "alaw"], {"p0", "p1"}, active=False))


def test_a_quiet_talker_is_left_out_of_the_mix() -> None:
    room = RoomMix()
    (loud, _), (hiss, _), (_, listener) = (
        room.add("loud", "ulaw"),
        room.add("hiss", "ulaw"),
        room.add("ear", "ulaw"),
    )
    noise = np.random.default_rng(2).normal(0, 20, FRAME).astype(np.int16)
    for t in range(5):
        loud.push(g711.encode("ulaw", tone(700.0, frame=t)))
        hiss.push(g711.encode("ulaw", noise))
        room.tick({"loud", "hiss", "ear"}, True)
    frames = [listener.frame() for _ in range(5)]
    expected = g711.encode("ulaw", tone(700.0, frame=4))
    assert frames[-1] == expected  # the tone alone: the hiss was not added to it


def test_a_participant_joins_once_and_leaves() -> None:
    room = RoomMix()
    room.add("a", "ulaw")
    with pytest.raises(ValueError, match="already"):
        room.add("a", "alaw")
    room.remove("a")
    room.remove("a")  # (twice is nothing)
    assert len(room) == 0


def random_rooms(seed: int) -> tuple[np.ndarray, list[bool], list[int]]:
    """Rooms of 0 to 40 participants, loud enough to saturate now and then."""
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(0, 41, int(rng.integers(1, 8)))]
    bounds = [0]
    for n in sizes:
        bounds.append(bounds[-1] + n)
    frames = rng.integers(-32768, 32768, (bounds[-1], FRAME), dtype=np.int16)
    mixed = [bool(b) for b in rng.integers(0, 2, bounds[-1])]
    return frames, mixed, bounds


@pytest.mark.skipif(not mixing.native(), reason="the _mixing extension was not built")
@pytest.mark.parametrize("seed", range(40))
def test_the_native_mix_of_every_room_is_the_references(seed: int) -> None:
    frames, mixed, bounds = random_rooms(seed)
    python = mixing.mix_rooms_python(frames, mixed, bounds)
    native = mixing.mix_rooms_native(frames, mixed, bounds)
    assert np.array_equal(python, native)
    saturated = (python == 32767) | (python == -32768)
    assert seed > 3 or saturated.any()  # (the first rooms do test the saturation)


@pytest.mark.skipif(not mixing.native(), reason="the _mixing extension was not built")
@pytest.mark.parametrize(
    ("bounds", "says"),
    [([0, 2], "from 0 to the rows"), ([1, 3], "from 0 to the rows"), ([0, 3, 2, 3], "back")],
)
def test_bad_bounds_are_refused_before_anything_is_written(bounds: list[int], says: str) -> None:
    frames = np.ones((3, FRAME), dtype=np.int16)
    out = np.zeros_like(frames)
    with pytest.raises(ValueError, match=says):
        _mixing.mix_rooms(frames, np.ones(3, dtype=np.uint8), np.array(bounds, np.int64), out)
    assert not out.any()


def test_every_room_at_once_is_each_room_alone() -> None:
    def rooms() -> list[RoomMix]:
        made = []
        for size in (3, 1, 2):
            room = RoomMix()
            for i in range(size):
                talk, _ = room.add(f"p{i}", "ulaw" if i % 2 else "alaw")
                talk.push(g711.encode("alaw" if i % 2 == 0 else "ulaw", tone(TONES[i])))
            made.append(room)
        return made

    together, alone = rooms(), rooms()
    talkers = {"p0", "p1", "p2"}
    mixing.mix_all(
        [
            (room, talkers, active)
            for room, active in zip(together, (True, True, False), strict=True)
        ]
    )
    for room, active in zip(alone, (True, True, False), strict=True):
        room.tick(talkers, active)
    for a, b in zip(together, alone, strict=True):
        assert [m.hears.frame() for m in a._members.values()] == [
            m.hears.frame() for m in b._members.values()
        ]


def test_without_the_extension_the_reference_mixes() -> None:
    printed = without(
        ["callhook.media._mixing"],
        "from callhook.media import mixing\n"
        "print(mixing.native(), mixing.mix_rooms is mixing.mix_rooms_python)",
    )
    assert printed.split() == ["False", "True"]
