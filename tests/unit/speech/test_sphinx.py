"""pocketsphinx recogniser (callhook.speech.sphinx) on the 40 spoken digits of tests/data/speech.

Each clip is padded with -50 dBFS line noise, passed through µ-law and cut by the call's
own path (cut_utterances), as on a call. Measured when written: 33/40 right with the ten
digit hints (FSDD full set: ~76 %); a recogniser that guessed would get ~4, one that always
answered the same word 4, so the threshold (27) fails a broken engine with margin.
"""

from __future__ import annotations

import threading
import wave
from pathlib import Path

import numpy as np
import pytest

from callhook.events import RecognitionOptions
from callhook.media import tones
from callhook.media.utterances import cut_utterances
from callhook.speech.sphinx import SphinxRecogniser, build_grammar, phrase_words

pytest.importorskip("pocketsphinx")

DATA = Path(__file__).resolve().parents[2] / "data" / "speech"
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def load(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def on_the_line(x: np.ndarray, seed: int) -> np.ndarray:
    padded = np.concatenate(
        [
            tones.white_noise(1.0, -50.0, seed=2 * seed),
            x,
            tones.white_noise(1.0, -50.0, seed=2 * seed + 1),
        ]
    )
    cut = cut_utterances(padded, law="ulaw")
    assert cut, "the call's detector found no speech"
    return max(cut, key=len)


@pytest.fixture(scope="module")
def engine() -> SphinxRecogniser:
    r = SphinxRecogniser()
    r.warm_up()
    return r


@pytest.fixture(scope="module")
def clips() -> list[tuple[str, np.ndarray]]:
    files = sorted(DATA.glob("*.wav"))
    assert len(files) == 40
    return [(DIGITS[int(f.name[0])], on_the_line(load(f), i)) for i, f in enumerate(files)]


def test_digits_with_hints(engine, clips) -> None:
    options = RecognitionOptions(word_hints=DIGITS, max_alternatives=3)
    right = 0
    for word, audio in clips:
        result = engine.recognise(audio, options)
        assert 1 <= len(result) <= 3
        assert len({a.text for a in result}) == len(result)  # distinct texts
        assert all(a.text in DIGITS for a in result)
        assert all(0.0 <= a.confidence <= 1.0 for a in result)
        assert [a.confidence for a in result] == sorted(
            (a.confidence for a in result), reverse=True
        )
        right += result[0].text == word
    assert right >= 27


def test_max_alternatives_is_respected(engine, clips) -> None:
    for n in (1, 2):
        for _, audio in clips[:8]:
            assert (
                len(
                    engine.recognise(
                        audio, RecognitionOptions(word_hints=DIGITS, max_alternatives=n)
                    )
                )
                <= n
            )


def test_right_answers_are_confident_and_noise_is_not(engine, clips) -> None:
    options = RecognitionOptions(word_hints=DIGITS)
    right = [
        r[0].confidence for w, a in clips if (r := engine.recognise(a, options)) and r[0].text == w
    ]
    assert np.median(right) >= 0.6
    # Noise alone, at speech-like levels so that the detector would pass it on.
    low = 0
    for k, dbfs in enumerate((-30.0, -35.0, -40.0, -30.0, -35.0, -40.0)):
        result = engine.recognise(tones.white_noise(1.2, dbfs, seed=50 + k), options)
        low += not result or result[0].confidence < 0.5
    assert low >= 5


def test_out_of_set_words_get_lower_confidence(engine, clips) -> None:
    in_set, out_of_set = [], []
    for word, audio in clips:
        inside = engine.recognise(audio, RecognitionOptions(word_hints=DIGITS))
        if inside and inside[0].text == word:
            in_set.append(inside[0].confidence)
            others = tuple(d for d in DIGITS if d != word)
            outside = engine.recognise(audio, RecognitionOptions(word_hints=others))
            out_of_set.append(outside[0].confidence if outside else 0.0)
    assert np.median(out_of_set) < np.median(in_set)


def test_multi_word_hints_and_numerals(engine) -> None:
    # Three spoken digits joined into one utterance; the hint spells them with numerals.
    parts = [load(DATA / f) for f in ("1_jackson_1.wav", "2_jackson_2.wav", "3_jackson_3.wav")]
    audio = on_the_line(np.concatenate(parts), 0)
    hints = ("1 2 3", "three two one", "one two", "sales", "speak to an agent")
    result = engine.recognise(audio, RecognitionOptions(word_hints=hints, max_alternatives=2))
    assert result and result[0].text == "1 2 3"  # the hint's own spelling comes back


def test_hint_normalisation_and_unknown_words(caplog) -> None:
    assert phrase_words("Speak to an Agent!") == ("speak", "to", "an", "agent")
    assert phrase_words("Oh 12") == ("zero", "one", "two")
    known = {"yes", "no", "zero", "one"}.__contains__
    grammar = build_grammar(("Yes", "no", "zorbleflux", "1 0"), known)
    assert grammar is not None
    assert set(grammar.hints.values()) == {"Yes", "no", "1 0"}
    assert "(zero | oh)" in grammar.jsgf  # "oh" is accepted for zero
    assert "zorbleflux" in caplog.text
    assert build_grammar(("zorbleflux",), known) is None


def test_no_hints_uses_the_language_model(engine, clips) -> None:
    result = engine.recognise(clips[0][1], RecognitionOptions())
    assert all(0.0 <= a.confidence <= 1.0 for a in result)
    assert engine.recognise(np.zeros(400, dtype=np.int16), RecognitionOptions()) == ()


def test_threads_get_their_own_decoders(engine, clips) -> None:
    options = RecognitionOptions(word_hints=DIGITS)
    expected = [engine.recognise(a, options) for _, a in clips[:6]]
    got: dict[int, list[object]] = {}

    def work(k: int) -> None:
        got[k] = [engine.recognise(a, options) for _, a in clips[:6]]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(v == expected for v in got.values())
