"""Two Whisper models in a cascade: the fast one decides, the larger one helps when it is unsure.

``[speech] model = "tiny.en+base"``. With word hints, every utterance is scored by the
fast model (tiny.en, the closed-set scoring of :mod:`callhook.speech.whisper`); when its
best hint is less than :data:`MARGIN` nats ahead of the second (it is unsure), the larger
model (base) scores the same hints on the same audio and the answer is the hint with the
best mean of both models' scores (with the fast model's out-of-set evidence). The two
models err differently: on nicolas's clipped "six", tiny.en hears "three", base "eight".
The mean ranks the hints as the sum does; the sum counted the evidence twice in the
confidence (a sharper softmax): on 48 synthesised words outside the digits, the largest
confidence was 0.66 summed and 0.36 averaged (``bench.asr``'s scores, every word scored
by both models).

Measured on the 1500 FSDD digit clips, each model's scores recorded once and the rules
compared on them (every hint aligned; the margin from tiny.en's scores):

=========================  =======  =======  =====  ============
rule                       jackson  nicolas  theo   second pass
=========================  =======  =======  =====  ============
tiny.en alone              99.4     90.4     99.2   -
base alone                 99.0     84.8     99.8   -
always both, summed        99.6     91.6     100.0  100 %
margin < 1 nat: summed     99.6     92.0     99.8   5.5 %
margin < 2 nats: summed    99.6     91.8     100.0  10.3 %
margin < 1 nat: base's     99.6     90.0     99.8   5.5 %
=========================  =======  =======  =====  ============

(base alone is worse than tiny.en on these English digits, so the second pass adds its
opinion rather than replacing the first.) Without hints, in English, the fast model alone
answers: base's free transcription of the same clips is worse than tiny.en's (77.8 / 36.4 /
69.4 % against 87.6 / 37.0 / 80.8, ``bench.asr``). In another language the larger model
alone answers (tiny.en is English only).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech import languages
from callhook.speech.whisper import Scored, WhisperRecogniser, alternatives

#: The fast model's margin (best hint's score over the second's, nats) under which the
#: larger model is asked too.
MARGIN: Final = 1.0


class CascadeRecogniser:
    """``fast`` first, ``large`` when it is unsure (see the module docstring).

    Implements :class:`callhook.speech.asr.Recogniser`; thread-safe as its models are.
    """

    name = "whisper"

    def __init__(
        self, fast: WhisperRecogniser, large: WhisperRecogniser, margin: float = MARGIN
    ) -> None:
        self.fast = fast
        self.large = large
        self.margin = margin
        self.model = f"{fast.model}+{large.model}"
        #: Utterances scored, and how many of them the larger model scored too.
        self.utterances = 0
        self.second_passes = 0

    @property
    def languages(self) -> frozenset[str]:
        return self.fast.languages | self.large.languages

    def warm_up(self) -> None:
        self.fast.warm_up()
        self.large.warm_up()

    def restarted(self) -> CascadeRecogniser:
        """Fresh models with the same settings (after a fault: callhook.speech.supervisor)."""
        return CascadeRecogniser(self.fast.restarted(), self.large.restarted(), self.margin)

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """The best hypotheses for one utterance (see :class:`~callhook.speech.asr.Recogniser`)."""
        if languages.code(options.language) not in self.fast.languages:
            return self.large.recognise(audio, options)  # tiny.en is English only
        if not options.word_hints:
            return self.fast.recognise(audio, options)
        first = self.fast.score(audio, options)
        if first is None:
            return ()
        self.utterances += 1
        if first.margin >= self.margin:
            return alternatives(first, options.max_alternatives)
        self.second_passes += 1
        second = self.large.score(audio, options)
        if second is None:
            return alternatives(first, options.max_alternatives)
        both = Scored(first.hints, (first.scores + second.scores) / 2, first.shortfall)
        return alternatives(both, options.max_alternatives)
