"""Voice activity (callhook.media.vad): real speech, line noise, silence, tones, clicks.

Speech is tests/data/speech (see its README), padded with -50 dBFS Gaussian line noise and
passed through G.711, as a caller's audio arrives.
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.media import g711, tones
from callhook.media.vad import SILENCE_DBFS, Frame, VoiceActivityDetector, level_dbfs

SPEECH = sorted((Path(__file__).parents[2] / "data" / "speech").glob("*.wav"))
FRAME_S = 0.02
Samples = npt.NDArray[np.int16]


def load(path: Path) -> Samples:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def edges(x: Samples, vad: VoiceActivityDetector | None = None) -> list[tuple[float, bool]]:
    """(time at the end of the frame, edge) for every edge the detector reports."""
    vad = vad or VoiceActivityDetector()
    x = np.concatenate([x, np.zeros((-len(x)) % 160, np.int16)])
    out = []
    for i, frame in enumerate(x.reshape(-1, 160)):
        edge = vad.feed(frame)
        if edge is not None:
            out.append((round((i + 1) * FRAME_S, 2), edge))
    return out


def noise(seconds: float, dbfs: float = -50.0, seed: int = 0) -> Samples:
    return tones.white_noise(seconds, dbfs, seed=seed)


def cat(*parts: Samples) -> Samples:
    return np.concatenate(parts)


# ----------------------------------------------------------------------------- level


def test_level_dbfs() -> None:
    square = np.array([32767, -32768] * 80, np.int16)
    assert level_dbfs(square) == pytest.approx(0.0, abs=0.01)
    assert level_dbfs(tones.tone(1000, 0.02, -10.0)) == pytest.approx(-10.0, abs=0.05)
    assert level_dbfs(tones.tone(440, 1.0, -37.5)) == pytest.approx(-37.5, abs=0.05)
    assert level_dbfs(noise(1.0, -55.0)) == pytest.approx(-55.0, abs=0.1)
    assert level_dbfs(np.zeros(160, np.int16)) == SILENCE_DBFS
    assert level_dbfs(np.zeros(0, np.int16)) == SILENCE_DBFS
    assert level_dbfs(np.ones(160, np.int16)) == pytest.approx(20 * math.log10(1 / 32768))


# ----------------------------------------------------------------------------- no activity


def test_digital_silence_is_not_activity() -> None:
    assert edges(tones.silence(10.0)) == []


@pytest.mark.parametrize("dbfs", [-50.0, -55.0, -60.0])
@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_line_noise_and_comfort_noise_are_not_activity(dbfs: float, law: g711.Law) -> None:
    for seed in range(3):
        x = g711.decode(law, g711.encode(law, noise(10.0, dbfs, seed)))
        assert edges(x) == []


@pytest.mark.parametrize("ms", [20, 40])
def test_a_click_is_not_activity(ms: int) -> None:
    click = noise(ms / 1000, -10.0, seed=5)
    x = cat(noise(1.0, -55.0), click, noise(1.0, -55.0, seed=1))
    assert edges(x) == []


# ----------------------------------------------------------------------------- activity


def test_a_tone_is_activity_with_onset_and_hangover() -> None:
    x = cat(noise(1.0, -55.0), tones.tone(1000, 0.5, -20.0), noise(2.0, -55.0, seed=1))
    # Onset after 3 loud frames (60 ms), release after 15 quiet ones (300 ms).
    assert edges(x) == [(1.06, True), (1.8, False)]


def test_sound_of_60_ms_is_activity() -> None:
    x = cat(noise(1.0, -55.0), noise(0.06, -20.0, seed=2), noise(1.0, -55.0, seed=1))
    assert edges(x) == [(1.06, True), (1.36, False)]


def test_pauses_shorter_than_the_hangover_do_not_end_activity() -> None:
    burst = tones.tone(300, 0.4, -20.0)
    short = cat(noise(1.0, -55.0), burst, noise(0.2, -55.0, seed=1), burst, noise(1, -55.0, seed=2))
    assert [e for _, e in edges(short)] == [True, False]
    long = cat(noise(1.0, -55.0), burst, noise(0.5, -55.0, seed=1), burst, noise(1, -55.0, seed=2))
    assert [e for _, e in edges(long)] == [True, False, True, False]


def test_speech_then_silence_ends_within_the_hangover() -> None:
    # What "stop recording after 3 s of silence" relies on: the edge to False comes 300 ms
    # after the caller stops, so the action can time the silence from there.
    speech = load(SPEECH[0])
    x = cat(noise(1.0), speech, noise(3.5, seed=1))
    got = edges(g711.decode("ulaw", g711.encode("ulaw", x)))
    end = 1.0 + len(speech) / 8000
    assert got[0][1] is True and got[-1][1] is False
    assert end < got[-1][0] <= end + 0.3 + 0.04


def test_a_steady_sound_becomes_background() -> None:
    # A dial tone, a reorder tone, a hum: sound at first, then the noise floor.
    x = cat(noise(1.0, -55.0), tones.tone(425, 5.0, -20.0), noise(1.0, -55.0, seed=1))
    got = edges(x)
    assert [e for _, e in got] == [True, False]
    assert got[0][0] == 1.06 and 2.0 < got[1][0] < 4.0


def test_the_noise_floor_follows_louder_noise() -> None:
    vad = VoiceActivityDetector()
    got = edges(cat(noise(2.0, -60.0), noise(6.0, -38.0, seed=1)), vad)
    # The jump is sound for a moment, then the new floor; it is not stuck at "active".
    assert [e for _, e in got] == [True, False]
    assert got[1][0] < 2.0 + 2.5
    assert vad.noise_floor_dbfs == pytest.approx(-38.0, abs=1.5)
    # Speech well above that floor is still heard.
    loud = tones.tone(500, 0.5, -20.0)
    assert [e for _, e in edges(cat(noise(1.0, -38.0, seed=2), loud), vad)] == [True]


def test_quieter_noise_lowers_the_floor_at_once() -> None:
    vad = VoiceActivityDetector()
    edges(noise(3.0, -40.0), vad)
    edges(noise(0.1, -58.0, seed=1), vad)
    assert vad.noise_floor_dbfs == pytest.approx(-58.0, abs=1.5)


def test_feed_reports_edges_only() -> None:
    vad = VoiceActivityDetector()
    x = cat(noise(0.5, -55.0), tones.tone(700, 1.0, -15.0), noise(1.0, -55.0, seed=1))
    results = [vad.feed(f) for f in x.reshape(-1, 160)]
    assert [r for r in results if r is not None] == [True, False]
    assert not vad.active


def test_there_are_forty_speech_recordings() -> None:
    assert len(SPEECH) == 40


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
@pytest.mark.parametrize("path", SPEECH, ids=lambda p: p.stem)
def test_speech_padded_with_line_noise(path: Path, law: g711.Law) -> None:
    speech = load(path)
    pad = 1.0
    x = cat(noise(pad, seed=1), speech, noise(pad, seed=2))
    got = edges(g711.decode(law, g711.encode(law, x)))
    start, end = pad, pad + len(speech) / 8000
    starts = [t for t, e in got if e]
    stops = [t for t, e in got if not e]
    assert starts, "speech not detected"
    # Nothing in the padding: activity starts inside the speech (after the 60 ms onset)...
    assert all(start + 0.06 <= t <= end + 0.02 for t in starts)
    # ...and ends with the hangover after it, never later.
    assert len(stops) == len(starts)
    assert all(t <= end + 0.3 + 0.04 for t in stops)


# ----------------------------------------------------------------------------- gated (a model)
# The model's stage with a scripted model (the protocol), so the gate's rules are pinned
# without Silero; the real model is in test_silero.py.


class Scripted:
    """A SpeechModel whose probability is ``p`` (a constant, or a function of the call count)."""

    def __init__(self, p: float | list[float] = 1.0) -> None:
        self.p = p
        self.calls = 0
        self.resets: list[int] = []  # the call count at each reset

    def probability(self, frame: Frame) -> float:
        self.calls += 1
        if isinstance(self.p, list):
            return self.p[min(self.calls - 1, len(self.p) - 1)]
        return self.p

    def reset(self) -> None:
        self.resets.append(self.calls)


def test_gated_defaults_and_energy_only_defaults() -> None:
    plain = VoiceActivityDetector()
    assert (plain.onset_frames, plain.margin_db, plain.min_level_dbfs) == (3, 8.0, -47.0)
    gated = VoiceActivityDetector(Scripted())
    assert (gated.onset_frames, gated.margin_db, gated.min_level_dbfs) == (3, 3.0, -75.0)
    assert gated.hangover_frames == plain.hangover_frames == 15


def test_the_model_is_not_called_while_the_gate_is_closed() -> None:
    model = Scripted()
    vad = VoiceActivityDetector(model)
    # Digital silence and hiss under the gate's -75 dBFS minimum: the energy only.
    assert edges(cat(tones.silence(2.0), noise(4.0, -80.0)), vad) == []
    assert model.calls == 0 and not vad.gate_open


def test_a_loud_sound_the_model_rejects_is_not_activity() -> None:
    model = Scripted(0.1)
    x = cat(noise(1.0, -85.0), tones.tone(1000, 1.0, -20.0), noise(1.0, -85.0, seed=1))
    assert edges(x, VoiceActivityDetector(model)) == []
    # The gate opened for the tone: the model was asked (8 frames of pre-roll + the tone + the
    # 15 frames of the gate's hangover), and nothing after the gate closed.
    assert model.calls == 8 + 50 + 15


def test_gated_onset_and_hangover() -> None:
    x = cat(noise(1.0, -85.0), tones.tone(1000, 0.5, -20.0), noise(2.0, -85.0, seed=1))
    # Onset after 3 speech frames (60 ms), release 15 frames (300 ms) after the sound.
    assert edges(x, VoiceActivityDetector(Scripted(0.9))) == [(1.06, True), (1.8, False)]


def test_quiet_speech_opens_the_lower_gate() -> None:
    # -50 dBFS over -85 dBFS hiss: under the energy-only minimum (-47), over the gate's (-75).
    x = cat(noise(1.0, -85.0), tones.tone(300, 0.5, -50.0), noise(1.0, -85.0, seed=1))
    assert edges(x) == []
    assert [e for _, e in edges(x, VoiceActivityDetector(Scripted(0.9)))] == [True, False]


def test_model_hysteresis() -> None:
    # 8 pre-roll calls, then per frame: on at >= 0.5, held down to 0.35, off below it.
    ps = [0.0] * 8 + [0.6] * 3 + [0.4] * 20 + [0.3] * 40
    x = cat(noise(1.0, -85.0), tones.tone(1000, 2.0, -20.0))
    got = edges(x, VoiceActivityDetector(Scripted(ps), model_holds=True))
    # On at the 3rd tone frame; 0.4 holds it; 0.3 from the 24th frame, off 15 frames later.
    assert got == [(1.06, True), (round(1.0 + (23 + 15) * 0.02, 2), False)]


def test_the_model_is_reset_after_a_long_closure_and_fed_what_it_missed_after_a_short_one() -> None:
    model = Scripted(0.0)
    vad = VoiceActivityDetector(model)
    burst = tones.tone(800, 0.1, -20.0)  # 5 frames
    hangover = noise(0.3, -85.0, seed=1)  # 15 quiet frames: the gate closes on the last
    edges(cat(noise(1.0, -85.0), burst, hangover), vad)
    # The first opening resets (the stream starts) and feeds the 8 pre-roll frames.
    assert model.resets == [0] and model.calls == 8 + 5 + 15 and not vad.gate_open
    calls = model.calls
    # Closed 5 frames (fewer than the 8 of the pre-roll), then reopened: the 5 missed frames
    # are fed, no reset (the model's audio stays contiguous).
    edges(cat(noise(0.1, -85.0, seed=2), burst, hangover), vad)
    assert model.resets == [0] and model.calls == calls + 5 + 5 + 15
    # Closed 2 s: reset, and only the 8 most recent frames are fed before the burst.
    edges(cat(noise(2.0, -85.0, seed=4), burst), vad)
    assert len(model.resets) == 2 and model.calls - model.resets[1] == 8 + 5


def test_by_default_the_model_confirms_the_onset_and_the_energy_holds_the_utterance() -> None:
    model = Scripted(0.9)
    x = cat(noise(1.0, -85.0), tones.tone(1000, 1.0, -20.0), noise(1.0, -85.0, seed=1))
    got = edges(x, VoiceActivityDetector(model))
    assert got == [(1.06, True), (2.3, False)]  # held for the whole 1 s sound
    # Run on the 8 pre-roll frames and the 3 onset frames, not on the 62 frames in between
    # nor on the frame that closes the gate (it ends the utterance: a verdict no one would
    # use); reset when the utterance ended (the model skipped its audio), ready for the
    # next one.
    assert model.calls == 8 + 3
    assert model.resets == [0, 11]


class Levels(Scripted):
    """A Scripted model that also keeps the level (dBFS) of every frame it is fed."""

    def __init__(self, p: float | list[float] = 1.0) -> None:
        super().__init__(p)
        self.levels: list[float] = []

    def probability(self, frame: Frame) -> float:
        self.levels.append(level_dbfs(frame))
        return super().probability(frame)


def test_hiss_at_the_start_of_a_call_is_not_loud_before_the_floor_is_measured() -> None:
    # The gated minimum is -75 dBFS only once the floor is known: the prior floor puts the
    # threshold there, and a call that starts on -60 dBFS hiss would count it as loud.
    assert edges(noise(1.0, -60.0), VoiceActivityDetector(Scripted(0.9))) == []


def test_the_model_hears_a_quiet_line_at_a_nominal_level() -> None:
    model = Levels(0.0)
    vad = VoiceActivityDetector(model)
    edges(noise(1.0, -80.0), vad)
    # The floor (the quietest frame, ~-81.5 dBFS) raised to -50, at most by 30 dB.
    assert vad.model_gain_db == 30.0
    edges(tones.tone(300, 0.2, -60.0), vad)
    assert model.levels[-5:] == pytest.approx([-30.0] * 5, abs=0.1)


def test_a_line_at_an_ordinary_level_gets_no_gain() -> None:
    model = Levels(0.0)
    vad = VoiceActivityDetector(model)
    edges(cat(noise(1.0, -45.0), tones.tone(300, 0.2, -20.0)), vad)
    assert vad.model_gain_db == 0.0
    assert model.levels[-5:] == pytest.approx([-20.0] * 5, abs=0.1)


def test_the_gain_follows_the_floor_between_utterances_and_restarts_the_model() -> None:
    model = Scripted(0.0)
    vad = VoiceActivityDetector(model)
    edges(noise(2.0, -56.0), vad)  # -57.5 floor: 7.5 dB of gain; the gate open on the hiss
    assert vad.gate_open and vad.model_gain_db == pytest.approx(7.5, abs=0.5)
    resets = len(model.resets)
    # The line drops 10 dB: the gain follows the floor of the last whole block (200 ms: one
    # quiet frame, the silence before a word, does not move it), while the gate is still
    # open for its hangover, so the model restarts: it must not hear a level jump.
    edges(noise(0.02, -66.0, seed=3), vad)
    assert vad.model_gain_db == pytest.approx(7.5, abs=0.5) and len(model.resets) == resets
    edges(noise(0.2, -66.0, seed=3), vad)
    gain = vad.model_gain_db
    assert vad.gate_open and 15.0 < gain < 19.0
    assert len(model.resets) == resets + 1
    # Small changes (under 3 dB) leave the gain alone.
    floor = vad.noise_floor_dbfs
    edges(noise(2.0, -67.5, seed=4), vad)
    assert floor - 3.0 < vad.noise_floor_dbfs < floor - 0.5
    assert vad.model_gain_db == gain


def test_the_gain_does_not_change_during_an_utterance() -> None:
    model = Levels(0.9)
    vad = VoiceActivityDetector(model)
    edges(noise(1.0, -70.0), vad)
    before = vad.model_gain_db
    assert 20.0 < before < 23.0
    got = edges(cat(tones.tone(300, 0.5, -40.0), noise(0.1, -90.0, seed=5)), vad)
    assert got == [(0.06, True)] and vad.active
    # The floor fell 20 dB under the utterance: the gain waits for it to end...
    assert vad.noise_floor_dbfs < -89.0 and vad.model_gain_db == before
    edges(noise(0.3, -90.0, seed=6), vad)
    assert not vad.active and vad.model_gain_db == 30.0  # ...then follows it


def test_the_gain_waits_while_an_onset_is_being_confirmed() -> None:
    # A floor block that ends while the model has heard 1-2 frames of a word must not
    # restart it (bench/asr.py lost one of jackson's "six" that way).
    model = Scripted(0.9)
    vad = VoiceActivityDetector(model, onset_frames=3)
    before = cat(noise(0.9, -56.0), noise(0.06, -75.0, seed=2))  # frames 0-47: the floor falls
    got = edges(cat(before, tones.tone(1000, 0.5, -20.0)), vad)  # the word from frame 48
    resets = list(model.resets)
    # Frame 49 ends a block whose minimum is ~18 dB under the last: the gain would jump.
    assert got[0] == (1.02, True)  # at the end of the 3rd frame of the word: 48, 49, 50
    assert len(resets) == 1  # the first opening only
