"""The Whisper cascade (callhook.speech.cascade) on real models and real recordings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from callhook.edge.speechworkers import build_recogniser
from callhook.events import RecognitionOptions
from callhook.speech.cascade import CascadeRecogniser
from callhook.speech.whisper import Scored, WhisperRecogniser
from tests.unit.speech.test_whisper import CLIPS, DIGITS, HINTS


class Remembering(WhisperRecogniser):
    """tiny.en, keeping its last closed-set decode (what the cascade judged by)."""

    def __init__(self) -> None:
        super().__init__(model="tiny.en")
        self.last: Scored | None = None

    def score(self, audio: Any, options: RecognitionOptions) -> Scored | None:
        self.last = super().score(audio, options)
        return self.last


class Counting(WhisperRecogniser):
    """base, counting what the cascade asks of it."""

    def __init__(self) -> None:
        super().__init__(model="base")
        self.scored = 0
        self.recognised: list[RecognitionOptions] = []

    def score(self, audio: Any, options: RecognitionOptions) -> Scored | None:
        self.scored += 1
        return super().score(audio, options)

    def recognise(self, audio: Any, options: RecognitionOptions) -> Any:
        self.recognised.append(options)
        return super().recognise(audio, options)


@pytest.fixture(scope="module")
def models() -> tuple[Remembering, Counting]:
    fast, large = Remembering(), Counting()
    fast.warm_up()
    large.warm_up()
    return fast, large


def test_the_larger_model_is_asked_only_when_the_fast_one_is_unsure(models) -> None:
    fast, large = models
    cascade = CascadeRecogniser(fast, large)
    large.scored = 0
    right = 0
    for d, audio in CLIPS:
        before = large.scored
        fast.last = None
        result = cascade.recognise(audio, HINTS)
        sure = fast.last  # (the fast model's decode, as the cascade had it)
        assert sure is not None
        assert large.scored - before == (sure.margin < cascade.margin)
        right += result[0].text == DIGITS[int(d)]
    assert cascade.utterances == 40 and cascade.second_passes == large.scored
    assert 0 < cascade.second_passes < 10  # measured: 2 of the 40
    assert right >= 37, right


def test_unsure_answers_take_the_mean_of_both_models_scores(models) -> None:
    fast, large = models
    cascade = CascadeRecogniser(fast, large, margin=float("inf"))  # always both
    d, audio = CLIPS[5]
    options = RecognitionOptions(word_hints=DIGITS, max_alternatives=3)
    a, b = fast.score(audio, options), large.score(audio, options)
    assert a is not None and b is not None
    result = cascade.recognise(audio, options)
    mean = (a.scores + b.scores) / 2
    assert [x.text for x in result] == [DIGITS[i] for i in np.argsort(-mean)[:3]]
    assert result[0].text == DIGITS[int(d)]
    # The confidence is the softmax of the mean (less any out-of-set penalty), not of the
    # sum, which would be surer than either model.
    top = np.exp(mean - mean.max())
    assert result[0].confidence <= top.max() / top.sum() + 1e-9
    summed = np.exp((a.scores + b.scores) - (a.scores + b.scores).max())
    assert result[0].confidence < summed.max() / summed.sum()


def test_english_without_hints_is_the_fast_models_and_another_language_the_larger_ones(
    models,
) -> None:
    fast, large = models
    cascade = CascadeRecogniser(fast, large)
    _, audio = CLIPS[0]
    large.recognised.clear()
    large.scored = 0
    free = cascade.recognise(audio, RecognitionOptions())
    assert free == fast.recognise(audio, RecognitionOptions()) and large.recognised == []
    cascade.recognise(audio, RecognitionOptions(language="es-ES", word_hints=("uno", "dos")))
    cascade.recognise(audio, RecognitionOptions(language="fr-FR"))
    assert [o.language for o in large.recognised] == ["es-ES", "fr-FR"]
    assert cascade.utterances == 0 and large.scored == 0
    assert {"en", "es"} <= cascade.languages


def test_tiny_en_plus_base_is_a_cascade() -> None:
    engine = build_recogniser("whisper", "tiny.en+base")
    assert isinstance(engine, CascadeRecogniser)
    assert (engine.fast.model, engine.large.model, engine.model) == (
        "tiny.en",
        "base",
        "tiny.en+base",
    )
    assert isinstance(engine.restarted(), CascadeRecogniser)
