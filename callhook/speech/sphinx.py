"""pocketsphinx: a light recogniser (CMU Sphinx, the en-US model pocketsphinx ships).

Method
------
* Audio: the 8 kHz utterance is upsampled to 16 kHz with soxr, because the bundled
  acoustic model's ``feat.params`` fixes its filter bank for 16 kHz (a hacked 8 kHz copy of
  it recognises nothing useful); the band above 4 kHz stays empty.
* With word hints: a JSGF grammar ``hint | hint | ...`` over the hints' words (phrases may
  have several words; numerals are spelt, ``"7"`` is ``seven``; ``zero`` may also be said
  ``oh``). Competing with the hints is a *garbage loop* of the model's two filler models,
  ``+SPN+`` (speech-like noise) and ``+NSN+`` (noise), so line noise and some speech outside
  the hints find a path other than the nearest hint. pocketsphinx 5 has no
  grapheme-to-phoneme converter, so a hint with a word that is not in the model's
  dictionary cannot be recognised: it is left out of the grammar with a warning (naming the
  words), and a hint set with none left is decoded as if it had no hints.
* Without hints: the bundled general English trigram language model.
* Result: distinct texts of ``decoder.nbest()`` (its first 100 entries, which repeat texts
  with different silences), best first, garbage dropped: ``()`` when no hint is left.
* Threads: a ``Decoder`` is not thread-safe, so each worker thread has its own (the model
  files are memory-mapped), holding up to :data:`MAX_SEARCHES` grammars (least recently
  used one dropped); the grammar texts are built once per hint set and shared.

Confidence: a logistic function of the log score margin between the best text of the N-best
list and its strongest rival (another hint or the garbage loop); hints that are not the best
are scored by their margin to the best, so they come out low. Calibrated on 250 FSDD clips:
the lattice posterior ``hyp().prob`` separated right from wrong answers with an AUC of only
0.66 (it splits its mass over paths that differ only in silences: ~0.16 for clearly right
answers), the margin with 0.86; on the 40 test clips right answers have a median confidence
of 1.0 and 5 of 6 noise-only inputs get < 0.15. Out-of-set speech is the weak spot: with the
true digit removed from the hints, ~60 % still score ≥ 0.5 (the filler models +SPN+/+NSN+
are a poor garbage model; a loop of all 39 phones rejected too much and cost 200–2500 ms
per utterance). The JSGF weight of the garbage branch made no measurable difference.

Measured (``python -m bench.asr --engine sphinx``, 2-core machine under other load;
FSDD spoken digits padded with 1 s of −50 dBFS line noise, µ-law, cut by the call's
voice-activity detector): with hints zero..nine jackson 82.6 %, nicolas 65.6 %, theo
85.8 % (all 78.0 %); without hints 22–30 %. Piper-spoken IVR answers: 30/30 with hints,
6/30 without (the free model adds short words — "the", "to" — on the noise around the
speech). ``recognise()`` p50 19 ms, p95 36 ms, real-time factor 0.02; 127 MB RSS after
warm-up; ~48 utterances/s with 2 threads.

Tried and not kept (FSDD, 500–750 clips): level normalisation (peak or RMS: −1 to −1.5
points), padding with quiet noise (theo +10, nicolas −9), wider beams (−14), ``lw`` 10
(−3), ``silprob`` 0.05–0.1 (±1, slower), ``varnorm`` (±0), ``cmn live`` (±0);
``remove_noise`` is already on in the model's feat.params. ``wip`` 1e-3 helps the free
model (13/30 phrases instead of 9, digits 27 % instead of 23 %) but not the grammars, and
it is a per-decoder option: left at its default.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import soxr

from callhook.events import Alternative, RecognitionOptions
from callhook.speech import languages as _languages
from callhook.speech.asr import SAMPLE_RATE

logger = logging.getLogger(__name__)

#: What the bundled acoustic model is trained on.
MODEL_RATE: Final = 16000
#: Prior weight of the garbage loop against 1 for the hints (see the module docstring).
GARBAGE_WEIGHT: Final = 1e-6
#: Grammars kept per decoder (one decoder per worker thread).
MAX_SEARCHES: Final = 32
#: N-best entries read for distinct alternatives (many differ only in silences).
NBEST_READ: Final = 100
#: Shorter audio is not speech (and pocketsphinx needs a few frames): nothing recognised.
MIN_SAMPLES: Final = SAMPLE_RATE // 10
#: Confidence is a logistic function of the log score margin over the strongest rival
#: (see :func:`confidence`): 0.5 at MARGIN_MID, calibrated on FSDD digits (module docstring).
MARGIN_MID: Final = 150.0
MARGIN_SCALE: Final = 80.0
#: The margin taken when the N-best list holds no rival at all (a sure result).
NO_RIVAL_MARGIN: Final = 1000.0

#: The acoustic model's context-independent phones (its ``mdef``), less silence and fillers.
PHONES: Final = ["+SPN+", "+NSN+"]
_GARBAGE_PREFIX: Final = "gbg_"

_NUMERALS: Final = dict(
    zip("0123456789", "zero one two three four five six seven eight nine".split(), strict=True)
)
_TOKEN: Final = re.compile(r"[a-z0-9']+")


def phrase_words(phrase: str) -> tuple[str, ...]:
    """A hint or hypothesis as dictionary words: lower case, numerals spelt, ``oh`` is zero.

    ``"Speak to an Agent!"`` → ``("speak", "to", "an", "agent")``; ``"1 2 3"`` and ``"123"``
    → ``("one", "two", "three")`` (a caller says digits one by one).
    """
    words: list[str] = []
    for token in _TOKEN.findall(phrase.lower()):
        if token.isdigit():
            words.extend(_NUMERALS[c] for c in token)
        else:
            words.append("zero" if token == "oh" else token)
    return tuple(words)


def _jsgf_word(word: str) -> str:
    # zero may be said "oh"; the hypothesis maps it back (phrase_words).
    if word == "zero":
        return "(zero | oh)"
    return f'"{word}"' if "'" in word else word


@dataclass(frozen=True)
class Grammar:
    """A hint set as a JSGF grammar and the way back from hypothesis words to hint text."""

    name: str
    jsgf: str
    hints: dict[tuple[str, ...], str]


def build_grammar(
    hints: tuple[str, ...], known: Any, garbage_weight: float = GARBAGE_WEIGHT
) -> Grammar | None:
    """The grammar of ``hints``; ``known(word)`` says whether the dictionary has a word.

    None when no hint is left (all empty or with unknown words).
    """
    usable: dict[tuple[str, ...], str] = {}
    unknown: set[str] = set()
    for hint in hints:
        words = phrase_words(hint)
        missing = [w for w in words if not known(w)]
        if missing:
            unknown.update(missing)
        elif words and words not in usable:
            usable[words] = hint.strip()
    if unknown:
        logger.warning(
            "sphinx: no pronunciation for %s: hints with these words cannot be recognised",
            ", ".join(sorted(unknown)),
        )
    if not usable:
        return None
    alternatives = " | ".join(" ".join(_jsgf_word(w) for w in words) for words in usable)
    garbage = " | ".join(_GARBAGE_PREFIX + p.strip("+").lower() for p in PHONES)
    jsgf = (
        "#JSGF V1.0;\ngrammar hints;\n"
        f"public <utterance> = /1/ ({alternatives}) | /{garbage_weight:g}/ <garbage>;\n"
        f"<garbage> = ({garbage})+;\n"
    )
    name = f"g{abs(hash(jsgf)):x}"
    return Grammar(name, jsgf, usable)


class _ThreadDecoder:
    """One thread's decoder and the grammar searches it has loaded."""

    def __init__(self, config: dict[str, Any]) -> None:
        from pocketsphinx import Decoder

        self.decoder = Decoder(loglevel="ERROR", **config)
        for i, phone in enumerate(PHONES):
            # update only on the last word: rebuilding the search per word is slow
            self.decoder.add_word(
                _GARBAGE_PREFIX + phone.strip("+").lower(), phone, i == len(PHONES) - 1
            )
        self.default_search: str = self.decoder.current_search()
        self.searches: OrderedDict[str, None] = OrderedDict()

    def activate(self, grammar: Grammar | None) -> None:
        if grammar is None:
            self.decoder.activate_search(self.default_search)
            return
        if grammar.name in self.searches:
            self.searches.move_to_end(grammar.name)
        else:
            self.decoder.add_jsgf_string(grammar.name, grammar.jsgf)
            self.searches[grammar.name] = None
            if len(self.searches) > MAX_SEARCHES:
                old, _ = self.searches.popitem(last=False)
                self.decoder.remove_search(old)
        self.decoder.activate_search(grammar.name)


class SphinxRecogniser:
    """The :class:`~callhook.speech.asr.Recogniser` on pocketsphinx (see the module docstring)."""

    name = "sphinx"
    #: pocketsphinx's bundled model is US English.
    languages = _languages.ENGLISH

    def __init__(self, *, garbage_weight: float = GARBAGE_WEIGHT, **config: Any) -> None:
        """``config``: pocketsphinx options (``beam=1e-60``...) for experiments."""
        self.garbage_weight = garbage_weight
        self._config = config
        self._local = threading.local()
        self._lock = threading.Lock()
        self._grammars: OrderedDict[tuple[str, ...], Grammar | None] = OrderedDict()

    def restarted(self) -> SphinxRecogniser:
        """A fresh instance with the same settings (after a fault: callhook.speech.supervisor)."""
        return SphinxRecogniser(garbage_weight=self.garbage_weight, **self._config)

    def warm_up(self) -> None:
        self._thread_decoder()

    def _thread_decoder(self) -> _ThreadDecoder:
        td: _ThreadDecoder | None = getattr(self._local, "decoder", None)
        if td is None:
            td = _ThreadDecoder(self._config)
            self._local.decoder = td
        return td

    def grammar(self, hints: tuple[str, ...]) -> Grammar | None:
        """The (cached) grammar of a hint set."""
        with self._lock:
            if hints in self._grammars:
                self._grammars.move_to_end(hints)
                return self._grammars[hints]
        decoder = self._thread_decoder().decoder
        grammar = build_grammar(
            hints, lambda w: decoder.lookup_word(w) is not None, self.garbage_weight
        )
        with self._lock:
            self._grammars[hints] = grammar
            while len(self._grammars) > 256:
                self._grammars.popitem(last=False)
        return grammar

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        if audio.size < MIN_SAMPLES or options.max_alternatives < 1:
            return ()
        grammar = self.grammar(options.word_hints) if options.word_hints else None
        td = self._thread_decoder()
        td.activate(grammar)
        pcm = soxr.resample(audio.astype(np.float32), SAMPLE_RATE, MODEL_RATE)
        pcm16 = np.clip(np.rint(pcm), -32768, 32767).astype(np.int16)
        decoder = td.decoder
        decoder.start_utt()
        decoder.process_raw(pcm16.tobytes(), full_utt=True)
        decoder.end_utt()
        scored = _distinct(decoder, grammar)
        hints = [(text, score) for text, score in scored if text is not None]
        if not hints:
            return ()
        best_text, best_score = scored[0]
        runner_up = scored[1][1] if len(scored) > 1 else best_score - NO_RIVAL_MARGIN
        out = []
        for text, score in hints[: options.max_alternatives]:
            # the best hint against its strongest rival; any other against the best
            rival = runner_up if text == best_text else best_score
            out.append(Alternative(text, confidence(score - rival)))
        return tuple(out)


def confidence(margin: float) -> float:
    """A 0..1 confidence from a hypothesis's log score margin over its strongest rival."""
    return round(1.0 / (1.0 + math.exp(-(margin - MARGIN_MID) / MARGIN_SCALE)), 4)


def _text(hypstr: str, grammar: Grammar | None) -> str | None:
    """The text a hypothesis stands for: the hint's own spelling, or None for garbage."""
    if _GARBAGE_PREFIX in hypstr:
        return None
    if grammar is None:
        return hypstr
    return grammar.hints.get(phrase_words(hypstr))


def _distinct(decoder: Any, grammar: Grammar | None) -> list[tuple[str | None, float]]:
    """Distinct texts of the N-best list (None: garbage) with log scores, best first.

    Scores are in the decoder's log units (base 1.0001, scaled by pocketsphinx); only their
    differences are used. The N-best list repeats a text with different silences; the first
    (best) entry of each text is its score.
    """
    logmath = decoder.get_logmath()
    seen: dict[str | None, float] = {}
    # nbest() is None when the search made no lattice; hyp() is then the only answer
    nbest = decoder.nbest()
    for i, hyp in enumerate(nbest if nbest is not None else [decoder.hyp()]):
        if i >= NBEST_READ:
            break
        if hyp is None or not hyp.hypstr:
            continue
        text = _text(hyp.hypstr, grammar)
        if text not in seen:
            seen[text] = float(logmath.log(hyp.score)) if hyp.score > 0 else -1e9
    return sorted(seen.items(), key=lambda item: -item[1])
