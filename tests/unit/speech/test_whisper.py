"""Whisper recogniser on the 40 spoken-digit clips of tests/data/speech (real recordings).

Each clip is put on a phone line the way the benchmark does it: 0.5 s of −50 dBFS hiss
either side and a µ-law round trip. The model is loaded once for the module.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.events import RecognitionOptions
from callhook.media import g711, tones
from callhook.speech.whisper import (
    Scored,
    WhisperRecogniser,
    alternatives,
    line_noise,
    normalise,
    spellings,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "speech"
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
HINTS = RecognitionOptions(word_hints=DIGITS)


def on_the_line(path: Path, seed: int) -> npt.NDArray[np.int16]:
    with wave.open(str(path)) as w:
        speech = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    x = np.concatenate(
        [
            tones.white_noise(0.5, -50.0, seed=2 * seed),
            speech,
            tones.white_noise(0.5, -50.0, seed=2 * seed + 1),
        ]
    )
    return g711.ulaw_decode(g711.ulaw_encode(x))


FILES = sorted(DATA.glob("*.wav"))
CLIPS = [(p.stem.split("_")[0], on_the_line(p, i)) for i, p in enumerate(FILES)]


@pytest.fixture(scope="module")
def engine() -> WhisperRecogniser:
    e = WhisperRecogniser()
    e.warm_up()
    return e


def test_forty_clips() -> None:
    assert len(CLIPS) == 40


def test_digits_with_hints(engine: WhisperRecogniser) -> None:
    answers = [engine.recognise(audio, HINTS) for _, audio in CLIPS]
    expected = [DIGITS[int(d)] for d, _ in CLIPS]
    right = sum(bool(a) and a[0].text == e for e, a in zip(expected, answers, strict=True))
    # Measured: 39/40 (a nicolas "six" heard as "two"); a broken engine gets ~4 (chance).
    assert right >= 37, right
    for a in answers:
        assert len(a) == 1
        assert 0.0 <= a[0].confidence <= 1.0
    # Right answers are mostly confident (measured: 36/40 at >= 0.5).
    assert sum(a[0].confidence >= 0.5 for a in answers) >= 32


def test_digits_without_hints(engine: WhisperRecogniser) -> None:
    # Every 4th clip (10 of them, all speakers): free transcription is much weaker than the
    # closed set (27/40 on these clips, 6/10 on this tenth); a broken engine gets 0.
    right = 0
    for d, audio in CLIPS[::4]:
        result = engine.recognise(audio, RecognitionOptions())
        assert len(result) <= 1
        if result:
            assert 0.0 <= result[0].confidence <= 1.0
            assert result[0].text == normalise(result[0].text)
            words = result[0].text.lower().replace(".", " ").split()
            right += DIGITS[int(d)] in words or d in words
    assert right >= 4, right


class _Windows:
    """The real model, noting the encoder window (mel frames) of every ``encode``."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.frames: list[int] = []

    def encode(self, features: object) -> object:
        self.frames.append(int(np.asarray(features).shape[-1]))
        return self.model.encode(features)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)


def test_the_encoder_window_of_each_kind_of_decode(engine: WhisperRecogniser) -> None:
    # Hints are scored on 10 s and free speech decoded on 15 s (Whisper's own 30 s costs
    # 2-3x more for no better transcripts); longer audio than a window takes 30 s.
    d, audio = CLIPS[0]
    long = np.concatenate([audio] * (int(16 * 8000 / len(audio)) + 1))  # over 16 s
    real = engine._model
    windows = _Windows(real)
    engine._model = windows
    try:
        assert engine.recognise(audio, RecognitionOptions())
        assert windows.frames == [1500]
        windows.frames.clear()
        assert engine.recognise(audio, HINTS)[0].text == DIGITS[int(d)]
        assert set(windows.frames) == {1000}  # (and line noise, the hints' prior, once)
        windows.frames.clear()
        engine.recognise(long, RecognitionOptions())
        assert windows.frames == [3000]
    finally:
        engine._model = real


def test_max_alternatives_and_ranking(engine: WhisperRecogniser) -> None:
    d, audio = CLIPS[0]
    result = engine.recognise(audio, RecognitionOptions(word_hints=DIGITS, max_alternatives=3))
    assert len(result) == 3
    assert result[0].text == DIGITS[int(d)]
    assert len({a.text for a in result}) == 3
    confidences = [a.confidence for a in result]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 <= c <= 1.0 for c in confidences)


def test_hint_text_verbatim_and_multi_word(engine: WhisperRecogniser) -> None:
    seven = next(a for d, a in CLIPS if d == "7")
    hints = ("Customer Service", "SEVEN", "billing")
    result = engine.recognise(seven, RecognitionOptions(word_hints=hints, max_alternatives=3))
    assert result[0].text == "SEVEN"
    assert {a.text for a in result} == set(hints)
    # A numeral hint matches the spoken word too.
    result = engine.recognise(seven, RecognitionOptions(word_hints=("3", "7", "8")))
    assert result[0].text == "7"


def test_silence_and_noise(engine: WhisperRecogniser) -> None:
    silence = np.zeros(8000, dtype=np.int16)
    assert engine.recognise(silence, HINTS) == ()
    assert engine.recognise(silence, RecognitionOptions()) == ()
    noise = line_noise(1.5, seed=3)
    for options in (HINTS, RecognitionOptions()):
        result = engine.recognise(noise, options)
        assert result == () or result[0].confidence < 0.5
    loud_noise = tones.white_noise(1.5, -25.0, seed=4)
    result = engine.recognise(loud_noise, HINTS)
    assert result == () or result[0].confidence < 0.5


def test_spellings() -> None:
    assert spellings("seven") == [" Seven.", " 7."]
    assert spellings("7") == [" 7.", " Seven."]
    assert spellings("customer  service") == [" Customer service."]
    assert normalise(" Seven.") == "Seven"
    assert normalise(" Is it 7?") == "Is it 7"


def test_shortlist_matches_full_scoring(engine: WhisperRecogniser) -> None:
    # Only the best 4 hints by first-token log-prob are aligned; on every 4th clip the
    # answer is the one scoring all ten gives, with about the same confidence.
    assert engine.shortlist == 4
    options = RecognitionOptions(word_hints=DIGITS, max_alternatives=10)
    try:
        for _, audio in CLIPS[::4]:
            engine.shortlist = 4
            short = engine.recognise(audio, options)
            engine.shortlist = None
            full = engine.recognise(audio, options)
            assert short[0].text == full[0].text
            assert abs(short[0].confidence - full[0].confidence) < 0.1
            assert {a.text for a in short} == set(DIGITS)
            assert all(0.0 <= a.confidence <= 1.0 for a in short)
    finally:
        engine.shortlist = 4


def test_shortlist_keeps_hints_sharing_a_first_token(engine: WhisperRecogniser) -> None:
    hints = ("customer service", "customer support", "sales", "billing", "operator")
    prior = engine._prior(hints, engine._start("en-US"))
    first = np.full(51864, -20.0)
    first[engine._tokens(" Customer")[0]] = -0.1
    engine.shortlist = 1
    try:
        assert engine._shortlisted(first, hints, prior) == (0, 1)
    finally:
        engine.shortlist = 4


def test_a_quiet_phone_is_recognised(engine: WhisperRecogniser) -> None:
    # Issue 16: theo's clips with the whole line 20 dB down (his loudest syllables near
    # -60 dBFS, hiss at -70). The old -55 dBFS silence guard answered nothing for 6 of these
    # 9; now they are scored like any utterance (measured: 9 of 9 right).
    theo = [(d, p) for (d, _), p in zip(CLIPS, FILES, strict=True) if "_theo_" in p.name][:9]
    right = 0
    for d, path in theo:
        down = np.rint(on_the_line(path, 7) * 0.1).astype(np.int16)
        quiet = g711.ulaw_decode(g711.ulaw_encode(down))
        result = engine.recognise(quiet, HINTS)
        assert result, f"{path.name}: nothing recognised"
        right += result[0].text == DIGITS[int(d)]
    assert right >= 7, right


def test_the_languages_a_model_recognises(engine: WhisperRecogniser) -> None:
    assert WhisperRecogniser(model="tiny.en").languages == {"en"}  # by name, not loaded
    assert engine.languages == {"en"}  # loaded
    assert {"es", "fr", "de"} <= WhisperRecogniser(model="base").languages
    # serve gives the model's directory too: still known by its name before it is loaded
    from callhook.speech.models import model_path

    assert "es" in WhisperRecogniser(model_path("base"), model="base").languages


def test_a_spanish_word_with_spanish_hints_on_the_multilingual_model() -> None:
    from callhook.speech.espeak import EspeakEngine

    base = WhisperRecogniser(model="base")
    base.warm_up()
    assert "yue" not in base.languages and "es" in base.languages  # from its vocabulary
    tts = EspeakEngine()
    voice = tts.voice_for("es-ES")
    assert voice is not None
    hints = ("ventas", "soporte", "facturación", "operador")
    options = RecognitionOptions(language="es-ES", word_hints=hints, max_alternatives=2)
    for i, word in enumerate(("facturación", "soporte")):
        said = tts.synthesize(word, voice)
        audio = np.concatenate([line_noise(0.5, seed=20 + i), said, line_noise(0.5, seed=30 + i)])
        result = base.recognise(g711.ulaw_decode(g711.ulaw_encode(audio)), options)
        assert result[0].text == word, result
        assert len(result) == 2 and result[0].confidence > result[1].confidence


def test_alternatives_are_best_first_whatever_each_hints_shortfall() -> None:
    # "two" scores below "one" but the free decoding is much nearer it: judged per hint,
    # its out-of-set penalty was smaller and it came out more confident than "one".
    scored = Scored(
        ("one", "two", "three"),
        scores=np.array([-1.0, -1.2, -9.0]),
        shortfall=np.array([6.0, 0.0, 6.0]),
    )
    result = alternatives(scored, 3)
    assert [a.text for a in result] == ["one", "two", "three"]
    confidences = [a.confidence for a in result]
    assert confidences == sorted(confidences, reverse=True)
    assert sum(confidences) <= 1.0
    # The penalty is the utterance's: 3 nats past the margin of 3 nats, at 1 nat a step.
    softmax = np.exp([-1.0, -1.2, -9.0]) / np.exp([-1.0, -1.2, -9.0]).sum()
    assert confidences[0] == pytest.approx(softmax[0] * np.exp(-3.0))
    assert confidences[1] == pytest.approx(softmax[1] * np.exp(-3.0))
