"""The usual frame through the voice-activity gate in C (callhook/media/gate.py, _gate.c)
against Python's ``VoiceActivityDetector.feed``.

Two detectors with the real speech model get the same frames: one through ``feed``
alone (the reference), the other through ``feed_usual`` as the media tick does, with
``feed`` for what C leaves. After every frame the two must be the same, field by
field, with the same edges; each scenario also says that C took frames (and which
it must leave), so a fast path that took nothing cannot pass.
"""

from __future__ import annotations

import wave
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from callhook.media import frames, gate, tones
from callhook.media.session import MediaSession
from callhook.media.silero import SileroStream
from callhook.media.vad import VoiceActivityDetector
from tests.native import without

SPEECH = Path(__file__).parents[2] / "data" / "speech"
Samples = npt.NDArray[np.int16]


def load(name: str) -> Samples:
    with wave.open(str(SPEECH / name)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def noise(seconds: float, dbfs: float, seed: int = 0) -> Samples:
    return tones.white_noise(seconds, dbfs, seed=seed)


def rows(x: Samples) -> list[Samples]:
    x = np.concatenate([x, np.zeros((-len(x)) % 160, np.int16)])
    return list(x.reshape(-1, 160))


def snapshot(d: VoiceActivityDetector) -> dict[str, Any]:
    return {
        "floor": (d._block_min, d._block_count, d._history_floor, list(d._blocks), d._prior),
        "edge": (d._active, d._run),
        "gate": (d._gate, d._gate_quiet, d._closed_for, [f.tolist() for f in d._preroll]),
        "model": (d._says_speech, d.model_gain_db, d._gain_floor, d.model_frames),
        "noise_floor_dbfs": d.noise_floor_dbfs,
    }


def run(
    audio: list[Samples],
    *,
    paused: list[bool] | None = None,
    model: bool = True,
    before: Any = None,
) -> tuple[list[bool], list[bool | None]]:
    """Feed both detectors every frame; which frames C took, and the edges. ``before(i,
    detector)`` is applied to both before frame ``i``."""
    reference = VoiceActivityDetector(SileroStream() if model else None)
    fast = VoiceActivityDetector(SileroStream() if model else None)
    taken: list[bool] = []
    edges: list[bool | None] = []
    for i, frame in enumerate(audio):
        if paused is not None:
            reference.paused = fast.paused = paused[i]
        if before is not None:
            before(i, reference)
            before(i, fast)
        power = frames.frame_power(frame)
        edge = reference.feed(frame, power)
        took = fast.feed_usual(frame, power)
        mine = None if took else fast.feed(frame, power)
        assert mine == edge, f"frame {i}"
        assert snapshot(fast) == snapshot(reference), f"after frame {i}"
        taken.append(took)
        edges.append(edge)
    return taken, edges


def test_the_extension_is_built() -> None:
    assert gate.native(), "callhook.media._gate was not built: rerun scripts/setup"


def test_a_paused_detector_tracks_the_floor_in_c_every_block_too() -> None:
    audio = rows(np.concatenate([noise(1.0, -50), load("3_theo_23.wav"), noise(1.0, -45)]))
    taken, edges = run(audio, paused=[True] * len(audio))
    assert not any(e is not None for e in edges)
    assert all(taken)  # each tenth frame completes a block of the floor: C too


def test_a_quiet_line_and_a_held_utterance_are_c_the_model_python() -> None:
    # (On a line with hiss at -55 dBFS the gate stays open, 1 dB over the floor, and
    # the model decides: Python. A quiet line keeps it closed.)
    speech = load("5_jackson_5.wav")
    hiss = noise(len(speech) / 8000, -80, seed=2)[: len(speech)]
    audio = rows(np.concatenate([noise(1.0, -80), speech + hiss, noise(1.5, -80, seed=1)]))
    taken, edges = run(audio)
    assert True in edges and False in edges  # the word was heard, in Python
    onset, end = edges.index(True), edges.index(False)
    assert not any(taken[onset - 2 : onset + 1])  # the model confirmed the onset: Python
    assert sum(taken[onset + 1 : end]) >= (end - onset) // 2  # the energy held it: C
    assert not taken[end]  # and its end is an edge: Python
    # The quiet line before it: C, blocks of the floor included, but the first block's
    # end, which replaces the prior floor (a gain to judge: Python).
    assert [i for i in range(50) if not taken[i]] == [9]
    held = [i for i in range(onset + 1, end) if (i + 1) % 10 == 0]
    assert held and all(taken[i] for i in held)  # blocks that end in the utterance: C
    assert sum(taken[-50:]) >= 45  # and after it, once the gate closed again


def test_a_paused_detector_that_was_active_ends_activity_in_python() -> None:
    speech = load("8_nicolas_18.wav")
    audio = rows(np.concatenate([noise(0.5, -80), speech, noise(1.0, -80)]))
    paused = [False] * len(audio)
    taken, edges = run(audio[:45], paused=paused[:45])
    assert True in edges
    start = edges.index(True) + 1
    # Paused right after the onset: the hangover runs out in C, the edge itself is Python's.
    paused = [i >= start for i in range(len(audio))]
    taken, edges = run(audio, paused=paused)
    end = edges.index(False)
    assert not taken[end] and any(taken[start:end])


def test_a_gain_still_to_judge_is_python() -> None:
    # The gain is judged when a block of the floor completes (Python's frame), unless an
    # onset is being confirmed then: a floor not judged yet leaves the frame to Python.
    def unjudged(i: int, detector: VoiceActivityDetector) -> None:
        if i == 24:
            detector._gain_floor = -2.0

    taken, _ = run(rows(noise(1.0, -80)), before=unjudged)
    assert taken[23] and not taken[24] and taken[25]


def test_a_block_end_with_no_blocks_is_left_to_python() -> None:
    # (A bug's state: C must not read what is not there; Python's feed() meets it.)
    d = VoiceActivityDetector(SileroStream())
    d.paused = True
    quiet = rows(noise(0.2, -80))
    assert all(d.feed_usual(frame, frames.frame_power(frame)) for frame in quiet[:9])
    del d._blocks
    assert not d.feed_usual(quiet[9], frames.frame_power(quiet[9]))
    assert d._block_count == 9  # nothing changed


def test_the_energy_detector_alone_and_empty_frames_are_python() -> None:
    taken, _ = run(rows(noise(0.5, -50)), model=False)
    assert not any(taken)
    d = VoiceActivityDetector(SileroStream())
    assert not d.feed_usual(np.zeros(0, np.int16), 0.0)
    assert not d.feed_usual(np.zeros(160, np.int16), None)  # type: ignore[arg-type]


def test_feed_all_takes_only_sessions_whose_detector_hears_alone() -> None:
    sessions = [MediaSession("PCMU", 0, 101, ("192.0.2.1", 4000)) for _ in range(7)]
    assert all(s.vad.paused and s.tones is None for s in sessions)  # (telephone-event)
    sessions[1].recognising = True
    # (Anything but None: the session's detect() hands them the frame too.)
    sessions[2].tones = object()  # type: ignore[assignment]
    sessions[4].transcriber = object()  # type: ignore[assignment]
    sessions[5].meter = object()  # type: ignore[assignment]
    sessions[6].classifier = object()  # type: ignore[assignment]
    frame = noise(0.02, -50)
    rest = gate.feed_all(sessions, [frame] * 7, [frames.frame_power(frame)] * 7)
    assert rest == [1, 2, 4, 5, 6]
    assert [s.vad._block_count for s in sessions] == [1, 0, 0, 1, 0, 0, 0]


FALLBACK = """
import numpy as np
from callhook.media import gate
from callhook.media.vad import VoiceActivityDetector
assert not gate.native()
d = VoiceActivityDetector()
frame = np.full(160, 300, np.int16)
assert not d.feed_usual(frame, 90000.0) and gate.feed_all([object()], [frame], [90000.0]) == [0]
assert [d.feed(frame) for _ in range(3)] == [None, None, True]
print("ok")
"""


def test_without_the_extension_python_detects_everything() -> None:
    assert without(["callhook.media._gate"], FALLBACK).strip() == "ok"


def test_gather_takes_out_what_python_takes_out() -> None:
    """gate.gather (C) against gate.gather_python on the same sessions: both laws, no
    frame, one, a burst; paused and listening detectors; in-band digits or not."""
    import random

    def sessions() -> list[MediaSession]:
        rng = random.Random(7)
        made = []
        for i in range(40):
            codec: Literal["PCMU", "PCMA"] = "PCMU" if rng.random() < 0.7 else "PCMA"
            session = MediaSession(codec, 0 if codec == "PCMU" else 8, None if i % 5 else 101, None)
            session.vad.paused = rng.random() < 0.25
            session.undetected = [bytes([i, k]) * 80 for k in range(rng.choice([0, 1, 1, 1, 2, 3]))]
            made.append(session)
        return made

    fast, reference = sessions(), sessions()
    held = [s.undetected for s in fast]
    for law in ("ulaw", "alaw"):
        got, want = gate.gather(fast, law), gate.gather_python(reference, law)
        picked, payloads, counts, tones = got
        assert [fast.index(s) for s in picked] == [reference.index(s) for s in want[0]]
        assert (payloads, counts, tones) == (want[1], want[2], want[3])
        assert len(picked) >= 5 and any(c > 1 for c in counts)  # (it covers them)
    assert all(s.undetected == [] for s in fast + reference)
    # Emptied in place, not replaced: no new list per session each tick.
    assert all(s.undetected is was for s, was in zip(fast, held, strict=True))
    assert gate.gather(fast, "ulaw") == ([], [], [], False)
