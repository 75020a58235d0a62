"""Which voice speaks a prompt, sentence by sentence, from a cache.

A ``text_to_say`` item is spoken by one engine's voice (:mod:`callhook.speech.tts`).
:class:`Synthesiser` decides which:

* ``tts_voice`` ``"engine:voice"`` (``"piper:joe"``, ``"espeak:fr"``) names both;
* ``tts_voice`` ``"engine"`` takes that engine's voice for the call's language;
* ``tts_voice`` ``"voice"`` takes the first engine that has a voice of that name;
* no ``tts_voice``: the configured default voice, unless the call's language
  (the speech options of the action the prompt belongs to) is one the default
  voice does not speak, when the first engine with a voice for it speaks;
* anything else (a voice of another service, such as Amazon Polly names that
  applications written for Aculab Cloud use): the default voice, and a
  warning in the call's log. A prompt is not refused for its voice: the caller
  hearing the words matters more than the timbre.

Text is split into sentences (SSML rendered first: :mod:`callhook.speech.ssml`, its
pauses silence, its volumes a gain); each sentence is synthesised (on a worker thread, by
the caller of :meth:`Synthesiser.sentence`) and cached under (engine, voice, sentence,
speaking rate), so a prompt is synthesised once and later plays from memory, and a long
prompt starts playing when its first sentence is ready.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from callhook.speech import ssml
from callhook.speech.tts import SpeechEngine, SynthesisError, at_volume, silence

logger = logging.getLogger("callhook.speech")

#: Bytes of 8 kHz audio the sentence cache keeps (64 MiB: about 70 minutes of speech).
CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    """The engine and voice that speak a prompt, and why when it is not what was asked."""

    engine: SpeechEngine
    voice: str
    note: str | None = None

    @property
    def label(self) -> str:
        return f"{self.engine.name}:{self.voice}"


class Synthesiser:
    """Voices of the installed engines, and the sentence cache (see the module docstring)."""

    def __init__(
        self,
        engines: Sequence[SpeechEngine],
        default_voice: str,
        *,
        cache_bytes: int = CACHE_BYTES,
        fallback_voice: str | None = None,
    ) -> None:
        if not engines:
            raise ValueError("no text-to-speech engine")
        self.engines = {engine.name: engine for engine in engines}
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, str, str, float], npt.NDArray[np.int16]] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        default = self._named(default_voice, None)
        if default is None:
            raise ValueError(
                f"default voice {default_voice!r} is not installed ({self._installed()})"
            )
        self.default = default
        #: An embedded voice that speaks when a remote one fails (None: the error stands).
        self.fallback = self._named(fallback_voice, None) if fallback_voice else None

    def fallback_for(self, choice: VoiceChoice) -> VoiceChoice | None:
        """The voice that speaks instead when ``choice``, a remote engine's, fails."""
        if not getattr(choice.engine, "remote", False) or self.fallback is None:
            return None
        return self.fallback if self.fallback.engine is not choice.engine else None

    def voice_names(self) -> list[str]:
        """Every ``engine:voice`` installed."""
        return [f"{e.name}:{v}" for e in self.engines.values() for v in e.voices()]

    def _installed(self) -> str:
        counts = [f"{len(e.voices())} {e.name} voice(s)" for e in self.engines.values()]
        return "installed: " + ", ".join(counts)

    def warm_up(self) -> None:
        """Load the default voice's model (off the event loop)."""
        self.default.engine.warm_up()

    # --- which voice ------------------------------------------------------------------

    def choose(self, tts_voice: str | None, language: str | None) -> VoiceChoice:
        """The voice for a prompt item (see the module docstring for the rules)."""
        if tts_voice is None:
            if language is None or self._speaks(self.default, language):
                return self.default
            for engine in self.engines.values():
                voice = engine.voice_for(language)
                if voice is not None:
                    return VoiceChoice(engine, voice)
            return VoiceChoice(
                self.default.engine,
                self.default.voice,
                f"no voice for language {language!r}: using {self.default.label}",
            )
        named = self._named(tts_voice, language)
        if named is not None:
            return named
        return VoiceChoice(
            self.default.engine,
            self.default.voice,
            f"tts_voice {tts_voice!r} is not installed: using {self.default.label} "
            f"({self._installed()}; `callhook voices` lists them)",
        )

    def _speaks(self, choice: VoiceChoice, language: str) -> bool:
        # The default voice keeps speaking other variants of its language (an en-GB
        # call still hears the natural en-US voice rather than a robotic en-GB one).
        primary = language.split("-")[0]
        voice_for = choice.engine.voice_for
        return choice.voice in (voice_for(language), voice_for(primary), voice_for(f"{primary}-US"))

    def _named(self, name: str, language: str | None) -> VoiceChoice | None:
        wanted = name.strip().lower()
        engine_name, colon, voice = wanted.partition(":")
        if colon:
            engine = self.engines.get(engine_name)
            if engine is not None and voice in engine.voices():
                return VoiceChoice(engine, voice)
            return None
        engine = self.engines.get(wanted)
        if engine is not None:
            voice_for = engine.voice_for(language or "en-US") or next(iter(engine.voices()), None)
            return VoiceChoice(engine, voice_for) if voice_for is not None else None
        for engine in self.engines.values():
            if wanted in engine.voices():
                return VoiceChoice(engine, wanted)
        return None

    # --- audio ------------------------------------------------------------------------

    def cached(
        self, choice: VoiceChoice, sentence: str, rate: float = 1.0
    ) -> npt.NDArray[np.int16] | None:
        """The sentence's audio (at ``rate``) if it was synthesised before (cheap; any
        thread)."""
        key = (choice.engine.name, choice.voice, sentence, rate)
        with self._lock:
            audio = self._cache.get(key)
            if audio is not None:
                self._cache.move_to_end(key)
                self.hits += 1
            return audio

    def sentence(
        self, choice: VoiceChoice, sentence: str, rate: float = 1.0
    ) -> npt.NDArray[np.int16]:
        """The sentence's audio at ``rate`` times the voice's speed, synthesised now unless
        cached. Blocking: call off the loop."""
        audio = self.cached(choice, sentence, rate)
        if audio is not None:
            return audio
        try:
            if rate == 1.0:
                audio = choice.engine.synthesize(sentence, choice.voice)
            else:
                audio = choice.engine.synthesize(sentence, choice.voice, rate)
        except SynthesisError:
            raise
        except Exception as exc:  # an engine bug must not take the call down
            raise SynthesisError(f"{choice.label}: {type(exc).__name__}: {exc}") from exc
        self._keep(choice, sentence, rate, audio)
        return audio

    def _keep(
        self, choice: VoiceChoice, sentence: str, rate: float, audio: npt.NDArray[np.int16]
    ) -> None:
        audio.setflags(write=False)  # shared by every call that plays it
        key = (choice.engine.name, choice.voice, sentence, rate)
        with self._lock:
            self.misses += 1
            if key not in self._cache:
                self._cache[key] = audio
                self._cached_bytes += audio.nbytes
            while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= old.nbytes

    def chunks(
        self, choice: VoiceChoice, sentence: str, rate: float = 1.0
    ) -> Iterator[npt.NDArray[np.int16]]:
        """The sentence's audio in pieces, each as soon as it is made: from the cache (one
        piece), from a voice that streams (its ``stream``: a plug-in's), or the whole
        sentence from :meth:`sentence`. A sentence streamed to its end is cached. Blocking:
        iterate off the loop."""
        audio = self.cached(choice, sentence, rate)
        stream = getattr(choice.engine, "stream", None)
        if audio is not None or not getattr(choice.engine, "streaming", False) or stream is None:
            yield audio if audio is not None else self.sentence(choice, sentence, rate)
            return
        pieces: list[npt.NDArray[np.int16]] = []
        try:
            for piece in stream(sentence, choice.voice, rate):
                piece.setflags(write=False)
                pieces.append(piece)
                yield piece
        except SynthesisError:
            raise
        except Exception as exc:  # an engine bug must not take the call down
            raise SynthesisError(f"{choice.label}: {type(exc).__name__}: {exc}") from exc
        self._keep(choice, sentence, rate, np.concatenate(pieces) if pieces else silence(0))

    def speak(
        self, text: str, tts_voice: str | None = None, language: str | None = None
    ) -> npt.NDArray[np.int16]:
        """The whole text (SSML too; an ``audio`` element says its content) at once,
        blocking: for the terminal phone and benchmarks."""
        choice = self.choose(tts_voice, language)
        audio = []
        for part in ssml.parts(text, language):
            for piece in part.fallback if isinstance(part, ssml.StoreAudio) else (part,):
                try:
                    audio.append(self.part(choice, piece))
                except SynthesisError as exc:
                    fallback = self.fallback_for(choice)
                    if fallback is None:
                        raise
                    logger.warning("%s: said by %s instead", exc, fallback.label)
                    choice = fallback
                    audio.append(self.part(choice, piece))
        return np.concatenate(audio) if audio else np.zeros(0, dtype=np.int16)

    def part(self, choice: VoiceChoice, part: ssml.Spoken | ssml.Pause) -> npt.NDArray[np.int16]:
        """One part of a text's rendering, synthesised now unless cached (blocking)."""
        if isinstance(part, ssml.Pause):
            return silence(part.seconds)
        return at_volume(self.sentence(choice, part.text, part.rate), part.volume_db)
