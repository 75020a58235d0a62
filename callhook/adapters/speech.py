"""Speech engines off the event loop: synthesis and recognition on worker threads.

The engines block (a Whisper decode takes a few hundred milliseconds, a piper
sentence as long), so the event loop, which times every call's RTP, never
runs them: :class:`SpeechService` hands them to two small thread pools, one
for synthesis and one for recognition, so a burst of new prompts cannot delay
a caller's answer and the other way round. The engines release the GIL while
they compute (onnxruntime, CTranslate2, pocketsphinx's C code).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech.asr import Recogniser
from callhook.speech.stream import cut_utterances
from callhook.speech.synthesis import Synthesiser, VoiceChoice
from callhook.speech.tts import SpeechEngine

logger = logging.getLogger("callhook.speech")


@dataclass
class SpeechStats:
    """Counters for ``/api/stats``."""

    utterances: int = 0
    recognise_seconds: float = 0.0
    sentences: int = 0
    synthesis_seconds: float = 0.0


class SpeechService:
    """The speech engines of a callhook process and the threads they run on."""

    def __init__(
        self,
        synthesiser: Synthesiser | None,
        recogniser: Recogniser | None,
        *,
        workers: int = 2,
    ) -> None:
        self.synthesiser = synthesiser
        self.recogniser = recogniser
        self.stats = SpeechStats()
        #: The model loads under way (warm_up), for whoever waits for them.
        self.warming: list[Future[None]] = []
        self._tts_pool = ThreadPoolExecutor(workers, thread_name_prefix="tts")
        self._asr_pool = ThreadPoolExecutor(workers, thread_name_prefix="asr")

    def warm_up(self) -> None:
        """Load the models in the background, so the first call does not wait for them."""
        if self.synthesiser is not None:
            self.warming.append(
                self._tts_pool.submit(self._warm, self.synthesiser.warm_up, "text-to-speech")
            )
        if self.recogniser is not None:
            self.warming.append(
                self._asr_pool.submit(self._warm, self.recogniser.warm_up, "speech recognition")
            )

    @staticmethod
    def _warm(load: Callable[[], None], what: str) -> None:
        try:
            load()
        except Exception:
            logger.exception("loading the %s model failed", what)

    async def sentence(self, choice: VoiceChoice, text: str) -> npt.NDArray[np.int16]:
        """One sentence spoken by ``choice`` (8 kHz); raises SynthesisError."""
        assert self.synthesiser is not None
        synthesiser = self.synthesiser
        loop = asyncio.get_running_loop()
        start = loop.time()
        audio = await loop.run_in_executor(self._tts_pool, synthesiser.sentence, choice, text)
        self.stats.sentences += 1
        self.stats.synthesis_seconds += loop.time() - start
        return audio

    async def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        """What the recogniser makes of one utterance (8 kHz)."""
        assert self.recogniser is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        result = await loop.run_in_executor(
            self._asr_pool, self.recogniser.recognise, audio, options
        )
        self.stats.utterances += 1
        self.stats.recognise_seconds += loop.time() - start
        return result

    def snapshot(self) -> dict[str, Any]:
        """Counters for ``/api/stats``: work done, time taken, the sentence cache."""
        stats = self.stats
        out: dict[str, Any] = {
            "recogniser": self.recogniser.name if self.recogniser else None,
            "utterances": stats.utterances,
            "recognise_seconds": round(stats.recognise_seconds, 3),
            "sentences_synthesised": stats.sentences,
            "synthesis_seconds": round(stats.synthesis_seconds, 3),
        }
        if self.synthesiser is not None:
            out["default_voice"] = self.synthesiser.default.label
            out["sentence_cache_hits"] = self.synthesiser.hits
            out["sentence_cache_misses"] = self.synthesiser.misses
        return out

    async def hear(
        self, text: str, options: RecognitionOptions
    ) -> tuple[float, tuple[Alternative, ...]]:
        """``text`` spoken by the default voice and heard by the recogniser as on a call.

        The terminal phone's ``say``: the words are synthesised, put on a quiet
        line, through G.711 and the call's VAD and utterance cutter, and the
        recogniser's answer comes back with the speech's length in seconds.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._asr_pool, self._hear, text, options)

    def _hear(
        self, text: str, options: RecognitionOptions
    ) -> tuple[float, tuple[Alternative, ...]]:
        assert self.synthesiser is not None and self.recogniser is not None
        speech = self.synthesiser.speak(text)
        rng = np.random.default_rng(len(text))
        quiet = np.zeros(4000, dtype=np.int16)
        line = np.concatenate([quiet, speech, quiet, quiet]).astype(np.float64)
        line += rng.normal(0.0, 32768 * 10 ** (-60 / 20), line.size)  # a quiet phone line
        samples = np.clip(line, -32768, 32767).astype(np.int16)
        phrases = [
            self.recogniser.recognise(u, options) for u in cut_utterances(samples, law="ulaw")
        ]
        phrases = [p for p in phrases if p]
        seconds = len(speech) / 8000
        if not phrases:
            return seconds, ()
        if len(phrases) == 1:
            return seconds, phrases[0]
        # Several utterances (pauses between words): one phrase of their best texts.
        joined = " ".join(p[0].text for p in phrases)
        return seconds, (Alternative(joined, min(p[0].confidence for p in phrases)),)

    @property
    def can_hear(self) -> bool:
        """Whether both engines are there for :meth:`hear`."""
        return self.synthesiser is not None and self.recogniser is not None

    def close(self) -> None:
        self._tts_pool.shutdown(wait=False, cancel_futures=True)
        self._asr_pool.shutdown(wait=False, cancel_futures=True)


def build_synthesiser(default_voice: str) -> Synthesiser | None:
    """The installed TTS engines behind one :class:`Synthesiser`, or None if none loads."""
    engines: list[SpeechEngine] = []
    try:
        from callhook.speech.piper import PiperEngine

        engines.append(PiperEngine())
    except Exception as exc:  # the package or its voice is missing
        logger.warning("piper text-to-speech is not available: %s", exc)
    try:
        from callhook.speech.espeak import EspeakEngine

        engines.append(EspeakEngine())
    except Exception as exc:
        logger.warning("espeak-ng text-to-speech is not available: %s", exc)
    if not engines:
        logger.error("no text-to-speech engine: text prompts cannot be spoken")
        return None
    try:
        return Synthesiser(engines, default_voice)
    except ValueError as exc:
        fallback = f"{engines[0].name}:{next(iter(engines[0].voices()))}"
        logger.error("%s; using %s", exc, fallback)
        return Synthesiser(engines, fallback)


def build_recogniser(name: str) -> Recogniser | None:
    """The configured recogniser engine (``whisper``, ``sphinx``; ``none``: digits only)."""
    if name == "none":
        return None
    try:
        if name == "whisper":
            from callhook.speech.whisper import WhisperRecogniser

            return WhisperRecogniser()
        if name == "sphinx":
            from callhook.speech.sphinx import SphinxRecogniser

            return SphinxRecogniser()
    except Exception as exc:
        logger.error("speech recogniser %r is not available: %s: only digits count", name, exc)
        return None
    raise ValueError(f"unknown speech recogniser {name!r} (whisper, sphinx or none)")
