"""Silero VAD (callhook.media.silero) and the gated voice-activity detector it completes.

Real model, real speech (tests/data/speech, see its README: 40 FSDD clips, theo's very quiet),
fixed-seed noise from bench/vad.py's generators (hiss, pink noise, mains hum with harmonics,
clicks, pops, a mixture), everything through G.711 as a caller's audio arrives.
"""

from __future__ import annotations

import itertools
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench.vad import KINDS, edges, frames, line, noise_clip
from callhook.media import g711, silero, tones
from callhook.media import vad as vad_module
from callhook.media.modelthread import MODEL_THREAD
from callhook.media.silero import CONTEXT, WINDOW, SileroStream
from callhook.media.vad import VoiceActivityDetector

SPEECH = sorted((Path(__file__).parents[2] / "data" / "speech").glob("*.wav"))
Samples = npt.NDArray[np.int16]


def load(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def cat(*parts: Samples) -> Samples:
    return np.concatenate(parts)


def gated() -> VoiceActivityDetector:
    return VoiceActivityDetector(SileroStream())


# ----------------------------------------------------------------------------- the model


def test_one_session_per_process() -> None:
    assert silero.session() is silero.session()
    assert silero.model_path().name == "silero_vad.onnx"
    names = {i.name for i in silero.session().get_inputs()}
    assert names == {"input", "state", "sr"}


def test_frames_are_cut_into_windows_with_context() -> None:
    pcm = line(tones.white_noise(1.0, -30.0))
    x = pcm.astype(np.float32) * np.float32(1 / 32768)
    stream = SileroStream()
    got = [stream.probability(f) for f in frames(pcm)]
    assert stream.windows == 8000 // WINDOW  # 31 windows of 256 in 50 frames of 160
    # The same by hand: each window after the previous window's last 32 samples.
    state = np.zeros(silero.STATE_SHAPE, np.float32)
    context = np.zeros(CONTEXT, np.float32)
    expected = []
    for k in range(stream.windows):
        window = x[k * WINDOW : (k + 1) * WINDOW]
        out, state = silero.session().run(
            None,
            {
                "input": np.concatenate([context, window])[None, :],
                "state": state,
                "sr": np.array(8000, np.int64),
            },
        )
        context = window[-CONTEXT:]
        expected.append(float(out[0, 0]))
    # A frame's probability is that of the latest complete window.
    ends = [((i + 1) * 160) // WINDOW for i in range(len(got))]
    assert got == pytest.approx([expected[e - 1] if e else 0.0 for e in ends], abs=1e-6)


def test_reset_forgets_the_state() -> None:
    talk = frames(line(load(SPEECH[0])))
    fresh = SileroStream()
    first = [fresh.probability(f) for f in talk]
    assert max(first) > 0.9
    fresh.reset()
    assert fresh.last == 0.0
    assert [fresh.probability(f) for f in talk] == first


class Counting:
    """The process's inference session, counting its runs and the windows they held."""

    def __init__(self) -> None:
        self.runs = 0
        self.windows = 0

    def run(self, outputs: None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.runs += 1
        self.windows += len(feeds["input"])
        return silero.session().run(outputs, feeds)  # type: ignore[no-any-return]


def test_windows_run_ahead_together_give_each_stream_its_own_results() -> None:
    lines = [frames(on_a_line(load(path))[0]) for path in SPEECH[:5]]
    batched = Counting()
    alone = Counting()
    together = [SileroStream(batched) for _ in lines]
    apart = [SileroStream(alone) for _ in lines]
    for t in range(min(len(f) for f in lines)):
        silero.run_ahead(
            [
                (stream, window)
                for stream, f in zip(together, lines, strict=True)
                if (window := stream.upcoming(f[t])) is not None
            ]
        )
        for i, f in enumerate(lines):
            # The same probability and the same state, to the bit, as a stream on its own.
            assert together[i].probability(f[t]) == apart[i].probability(f[t])
            assert np.array_equal(together[i]._state, apart[i]._state)
    assert all(s.windows_ahead == s.windows > 0 for s in together)
    assert alone.runs == alone.windows == sum(s.windows for s in apart)
    # One run a tick for every stream's window: five times fewer runs.
    assert batched.windows == alone.windows and batched.runs * 5 == alone.runs


def test_a_window_run_ahead_is_taken_only_for_the_audio_and_state_it_was_run_from() -> None:
    talk = frames(on_a_line(load(SPEECH[0]))[0])  # hiss throughout: no two frames alike
    reference = SileroStream()
    expected = [reference.probability(f) for f in talk]
    stream = SileroStream()
    for t in range(len(talk) - 1):
        # A window run ahead for other audio (the next frame): never taken.
        window = stream.upcoming(talk[t + 1])
        if window is not None:
            silero.run_ahead([(stream, window)])
        assert stream.probability(talk[t]) == expected[t]
    assert stream.windows_ahead == 0 and stream.windows == reference.windows - 1
    # Run ahead, then reset (the gate stayed closed too long): the state it was run from
    # is gone, so it is not taken; the stream starts afresh.
    ahead, plain = SileroStream(), SileroStream()
    for t, f in enumerate(talk):
        if t % 7 == 6 and (window := ahead.upcoming(f)) is not None:
            silero.run_ahead([(ahead, window)])
            ahead.reset()
            plain.reset()
        assert ahead.probability(f) == plain.probability(f)
    assert ahead.windows_ahead == 0 and ahead.windows == plain.windows > 0


class Waits:
    """How many times a caller waited on the model's thread (``MODEL_THREAD.run``)."""

    n = 0


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    counted = Waits()
    run = MODEL_THREAD.run

    def counting(inference: object, feeds: dict[str, object]) -> object:
        counted.n += 1
        return run(inference, feeds)  # type: ignore[arg-type]

    monkeypatch.setattr(MODEL_THREAD, "run", counting)
    return counted


def test_frames_given_at_once_give_what_they_give_one_by_one_for_one_wait(waits: Waits) -> None:
    """``probabilities`` (a gate opening's skipped frames) gives each frame the very
    number ``probability`` gives, leaves the stream as it would, and runs the windows
    they complete in one job on the model's thread (the first one taken from a batch
    run ahead, when that was run for it)."""
    talk = frames(on_a_line(load(SPEECH[1]))[0])
    reference = SileroStream()
    expected = [reference.probability(f) for f in talk]
    waits.n = 0  # (the reference's runs)
    stream = SileroStream()
    got: list[float] = []
    pieces = list(itertools.pairwise([0, 1, 9, 10, 40, 41, len(talk)]))
    for a, b in pieces:
        got += stream.probabilities(talk[a:b])
    assert got == expected
    assert stream.windows == reference.windows and stream.last == reference.last
    assert np.array_equal(stream._state, reference._state)
    assert np.array_equal(stream._input, reference._input)
    assert stream._filled == reference._filled
    # One wait for each piece that completed a window (160-sample frames, 256-sample
    # windows), whatever its number of windows.
    completing = [(a, b) for a, b in pieces if b * 160 // WINDOW > a * 160 // WINDOW]
    assert waits.n == len(completing) < len(pieces)
    # The first window run ahead in a batch is taken, the rest run on the model's thread.
    ahead, plain = SileroStream(), SileroStream()
    head = [plain.probability(f) for f in talk[:3]]
    assert ahead.probabilities(talk[:3]) == head
    window = ahead.upcoming(talk[3])
    assert window is not None
    silero.run_ahead([(ahead, window)])
    rest = [plain.probability(f) for f in talk[3:20]]
    waits.n = 0
    assert ahead.probabilities(talk[3:20]) == rest
    assert ahead.windows_ahead == 1 and ahead.windows == plain.windows and waits.n == 1
    assert np.array_equal(ahead._state, plain._state)


def test_frames_given_at_once_whose_run_fails_leave_the_stream_as_it_was() -> None:
    talk = frames(on_a_line(load(SPEECH[2]))[0])
    reference = SileroStream()
    expected = [reference.probability(f) for f in talk[:20]]

    class FailsOnce:
        failed = False

        def run(self, outputs: None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            if not self.failed:
                self.failed = True
                raise RuntimeError("a bug in the model's run")
            return silero.session().run(outputs, feeds)  # type: ignore[no-any-return]

    stream = SileroStream(FailsOnce())
    assert stream.probabilities(talk[:1]) == expected[:1]  # (no window yet: no run)
    with pytest.raises(RuntimeError):
        stream.probabilities(talk[1:8])
    assert stream.windows == 0
    assert stream.probabilities(talk[1:8]) + stream.probabilities(talk[8:20]) == expected[1:]
    assert np.array_equal(stream._state, reference._state)


class OneByOne:
    """A stream without ``probabilities``: the detector feeds it frame by frame."""

    def __init__(self) -> None:
        self.stream = SileroStream()

    def probability(self, frame: npt.NDArray[np.float32]) -> float:
        return self.stream.probability(frame)

    def reset(self) -> None:
        self.stream.reset()


def test_a_gate_opening_hears_the_audio_it_skipped_in_one_wait(waits: Waits) -> None:
    """Where its gate opens the detector goes over the frames it skipped, and then the
    opening frame: in one wait on the model's thread, with the verdicts of a model fed
    frame by frame."""
    speech = load(SPEECH[0])
    silence = np.zeros(8000, np.int16)  # digital silence: the gate shuts at once
    # Two openings after a long closure (the model reset, the pre-roll heard), one after a
    # short one (the model goes on over the frames it skipped).
    talk = frames(cat(silence, speech, silence, speech, silence[:3200], speech, silence))
    reference = VoiceActivityDetector(OneByOne())  # type: ignore[arg-type]
    expected = [(t, e) for t, f in enumerate(talk) if (e := reference.feed(f)) is not None]
    detector = gated()
    waits.n = 0  # (the reference's runs)
    got = []
    opening_waits = []
    for t, f in enumerate(talk):
        was_open, before = detector._gate, waits.n
        if (edge := detector.feed(f)) is not None:
            got.append((t, edge))
        if detector._gate and not was_open:
            opening_waits.append(waits.n - before)
    assert got == expected and len(expected) >= 4
    assert detector.model_frames == reference.model_frames
    assert detector.model.windows == reference.model.stream.windows
    # Every opening had frames to hear first, and each cost one wait.
    assert len(opening_waits) >= 3 and set(opening_waits) == {1}


def test_detectors_running_ahead_hear_what_they_hear_alone() -> None:
    # The media tick's way (edge/mediaengine.py): before each tick's frames are fed, every
    # listening detector's upcoming window runs in one batch.
    lines = [frames(on_a_line(load(path))[0]) for path in SPEECH[:6]]
    together = [gated() for _ in lines]
    apart = [gated() for _ in lines]
    got: list[list[tuple[int, bool]]] = [[] for _ in lines]
    expected: list[list[tuple[int, bool]]] = [[] for _ in lines]
    ran = 0
    for t in range(min(len(f) for f in lines)):
        ran += vad_module.run_ahead([(d, f[t]) for d, f in zip(together, lines, strict=True)])
        for i, f in enumerate(lines):
            if (edge := together[i].feed(f[t])) is not None:
                got[i].append((t, edge))
            if (edge := apart[i].feed(f[t])) is not None:
                expected[i].append((t, edge))
    assert got == expected and all(e for e in expected)
    assert [d.model_frames for d in together] == [d.model_frames for d in apart]
    models = [d.model for d in together]
    taken = sum(m.windows_ahead for m in models if isinstance(m, SileroStream))
    # Most of the model's windows came from the batches; a guess that missed cost only
    # its computation (the opening of the gate replays 160 ms the guess does not cover).
    assert ran >= taken > sum(m.windows for m in models if isinstance(m, SileroStream)) / 2


# ----------------------------------------------------------------------------- gated detector


@pytest.mark.parametrize("kind", KINDS)
def test_noise_hum_clicks_and_pops_at_minus_45_dbfs_never_fire(kind: str) -> None:
    for seed in range(3):
        vad = gated()
        assert edges(line(noise_clip(kind, -45.0, 2000 + seed)), vad) == []


def test_silence_and_hiss_under_the_minimum_cost_no_model_run() -> None:
    vad = gated()
    assert edges(cat(tones.silence(1.0), line(tones.white_noise(4.0, -90.0))), vad) == []
    assert vad.model_frames == 0


def on_a_line(speech: Samples, down_db: float = 0.0) -> tuple[Samples, float, float]:
    """``speech`` after 1 s of -50 dBFS hiss, 1 s of it after, hiss throughout, µ-law; and the
    (start, end) of the speech: its first frame within 25 dB of its loudest, its last sample.
    ``down_db``: the whole line (speech and hiss) that much quieter.

    Hiss throughout, not only around the clip (as test_vad.py does for the energy detector):
    a line's noise does not stop while the caller speaks. With digital silence under the clip
    the floor drops to the clip's own (-70 dBFS), the hiss after it is loud for the gate, and
    Silero takes 100-200 ms to call it noise: the release comes that much later.
    """
    pad = np.zeros(8000, np.int16)
    hiss = tones.white_noise(2.0 + len(speech) / 8000, -50.0, seed=1).astype(np.float64)
    gain = 10 ** (-down_db / 20)
    x = np.clip(np.rint((cat(pad, speech, pad) + hiss) * gain), -32768, 32767).astype(np.int16)
    levels = [10 * np.log10(np.mean(f.astype(np.float64) ** 2) + 1e-9) for f in frames(speech)]
    start = 1.0 + 0.02 * next(i for i, v in enumerate(levels) if v > max(levels) - 25)
    return g711.decode("ulaw", g711.encode("ulaw", x)), start, 1.0 + len(speech) / 8000


#: Onset: at most this long after the speech starts (the start above includes soft lead-ins
#: 25 dB down; with the 3-frame onset it is 80 ms after it on most of the 40 clips).
ONSET_S = 0.2


@pytest.mark.parametrize("path", SPEECH, ids=lambda p: p.stem)
def test_speech_fires_on_every_clip(path: Path) -> None:
    x, start, end = on_a_line(load(path))
    got = edges(x, gated())
    starts = [t for t, e in got if e]
    stops = [t for t, e in got if not e]
    assert starts, "speech not detected"
    # Not in the hiss before the speech (a soft lead-in under the 25 dB mark may count).
    assert start - 0.06 < starts[0] <= start + ONSET_S
    assert all(t <= end + 0.02 for t in starts)
    # One utterance, released by the 300 ms hangover after it (never a cut mid-digit).
    assert len(starts) == len(stops) == 1 and stops[0] <= end + 0.3 + 0.04


@pytest.mark.parametrize("path", SPEECH, ids=lambda p: p.stem)
def test_a_quiet_phone_is_heard(path: Path) -> None:
    # Issue 16: the whole line 20 dB down (theo's loudest syllables near -60 dBFS, the hiss
    # at -70). The gate's old -55 dBFS minimum and Silero at that level missed 9 of the 40.
    x, start, end = on_a_line(load(path), down_db=20.0)
    starts = [t for t, e in edges(x, gated()) if e]
    assert starts, "speech not detected"
    assert start - 0.06 < starts[0] <= start + ONSET_S
    assert all(t <= end + 0.02 for t in starts)  # nothing in the hiss after it


def test_a_quiet_line_is_still_not_speech() -> None:
    # The model's gain brings a -70 dBFS line to -50 dBFS for it: hiss, hum and clicks at
    # -70 dBFS must not fire any more than at -45 (bench/vad.py: 0 of 100 at -75 and -65).
    for kind in KINDS:
        vad = gated()
        assert edges(line(noise_clip(kind, -70.0, 3000)), vad) == [], kind
        assert vad.model_gain_db > 15.0, kind


def test_onset_is_quick_for_barge_in() -> None:
    late = []
    for path in SPEECH:
        x, start, _ = on_a_line(load(path))
        late.append(next(t for t, e in edges(x, gated()) if e) - start)
    assert np.median(late) <= 0.08 + 1e-9  # 3 frames of confirmed speech after the start
