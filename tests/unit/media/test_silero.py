"""Silero VAD (callhook.media.silero) and the gated voice-activity detector it completes.

Real model, real speech (tests/data/speech, see its README: 40 FSDD clips, theo's very quiet),
fixed-seed noise from bench/vad.py's generators (hiss, pink noise, mains hum with harmonics,
clicks, pops, a mixture), everything through G.711 as a caller's audio arrives.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
import pytest

from bench.vad import KINDS, edges, frames, line, noise_clip
from callhook.media import g711, silero, tones
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


def test_frames_are_cut_into_windows_with_context() -> None:
    pcm = line(tones.white_noise(1.0, -30.0))
    x = pcm.astype(np.float32) * np.float32(1 / 32768)
    stream = SileroStream()
    got = [stream.probability(f) for f in frames(pcm)]
    assert stream.windows == 8000 // WINDOW  # 31 windows of 256 in 50 frames of 160
    # The same by hand, by onnxruntime's run of the model file: each window after the
    # previous window's last 32 samples.
    session = onnxruntime.InferenceSession(str(silero.model_path()))
    state = np.zeros(silero.STATE_SHAPE, np.float32)
    context = np.zeros(CONTEXT, np.float32)
    expected = []
    for k in range(stream.windows):
        window = x[k * WINDOW : (k + 1) * WINDOW]
        out, state = session.run(
            None,
            {
                "input": np.concatenate([context, window])[None, :],
                "state": state,
                "sr": np.array(8000, np.int64),
            },
        )
        context = window[-CONTEXT:]
        expected.append(float(out[0, 0]))
    # A frame's probability is that of the latest complete window (to the sixth decimal:
    # the C network sums in another order, test_sileronet.py).
    ends = [((i + 1) * 160) // WINDOW for i in range(len(got))]
    assert got == pytest.approx([expected[e - 1] if e else 0.0 for e in ends], abs=1e-5)


def test_reset_forgets_the_state() -> None:
    talk = frames(line(load(SPEECH[0])))
    fresh = SileroStream()
    first = [fresh.probability(f) for f in talk]
    assert max(first) > 0.9
    fresh.reset()
    assert fresh.last == 0.0
    assert [fresh.probability(f) for f in talk] == first


def test_every_stream_shares_the_network_and_keeps_its_own_state() -> None:
    lines = [frames(on_a_line(load(path))[0]) for path in SPEECH[:3]]
    together = [SileroStream() for _ in lines]
    assert len({id(s._net) for s in together}) == 1
    # Interleaved, window by window, each gives what it gives alone.
    got = [
        [s.probability(f) for s, f in zip(together, t, strict=True)]
        for t in zip(*lines, strict=False)
    ]
    for i, talk in enumerate(lines):
        alone = SileroStream()
        assert [row[i] for row in got] == [alone.probability(f) for f in talk[: len(got)]]


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


def test_the_model_file_is_looked_for_once_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call's detector makes a stream: the search of ``sys.path`` for the model's
    package (hundreds of microseconds of the event loop) is done once."""
    import importlib.util

    looked: list[str] = []
    find_spec = importlib.util.find_spec

    def counted(name: str, package: str | None = None) -> object:
        looked.append(name)
        return find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", counted)
    getattr(silero.model_path, "cache_clear", lambda: None)()
    for _ in range(3):
        SileroStream()
    assert looked == ["silero_vad"]
