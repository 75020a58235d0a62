"""Speech engines other packages install: plug-ins (docs/speech.md, "Plug-in engines").

A package declares a factory under the entry point group ``callhook.recognisers``, or
``callhook.voices``, or both, by one name. ``[speech.engines.NAME] protocol = "plugin"``
names it; callhook calls ``factory(NAME, options)`` (``options``: the table
``[speech.engines.NAME.options]``, as a dict) once at start-up and again after the engine
failed, and uses what it returns as it uses its own engines: a
:class:`~callhook.speech.asr.Recogniser` (one utterance in, alternatives out; with a
``stream`` method too, the utterance in pieces as the caller says it) or a
:class:`~callhook.speech.tts.SpeechEngine` (one sentence in, 8 kHz audio out; with a
``stream`` method too, the sentence's audio in pieces as it is made, played as they come).

What comes back is checked here, so a plug-in's bug costs a caller no more than a remote
server's failure would:

* a recogniser that raises is a crashed engine (nothing recognised, the cause in the
  call's log, the engine made again after a back-off); one that answers what is not
  alternatives is a failed one, likewise;
* a voice that raises :class:`~callhook.speech.tts.SynthesisError` could not say that
  sentence (the embedded voice says it, the plug-in stays in use); any other exception,
  or what is not 8 kHz int16 audio, opens its circuit breaker like a remote voice that is
  down (:class:`~callhook.speech.remote.Guard`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any

import numpy as np
import numpy.typing as npt

from callhook.events import Alternative, RecognitionOptions
from callhook.speech import languages
from callhook.speech.asr import Recogniser, RecognitionStream
from callhook.speech.remote import Guard, Refused, RemoteSpeechError
from callhook.speech.tts import SpeechEngine, SynthesisError

logger = logging.getLogger("callhook.speech")

#: The entry point groups (the same names as :mod:`callhook.config.speechengines`').
RECOGNISERS = "callhook.recognisers"
VOICES = "callhook.voices"


class PluginError(Exception):
    """A plug-in that cannot be loaded or made (its package, or its factory, failed)."""


def _make(group: str, plugin: str, name: str, options: Mapping[str, Any]) -> Any:
    """``factory(name, options)`` of the entry point ``plugin`` in ``group``."""
    found = metadata.entry_points(group=group, name=plugin)
    if not found:
        raise PluginError(f"no installed package has {plugin!r} in {group}")
    (entry, *_) = found
    try:
        factory = entry.load()
    except Exception as exc:  # its package is broken or lacks a dependency
        raise PluginError(
            f"{entry.value}: cannot be imported: {type(exc).__name__}: {exc}"
        ) from None
    try:
        return factory(name, dict(options))
    except Exception as exc:  # its options are wrong, or its service unreachable
        raise PluginError(f"{entry.value}({name!r}) failed: {type(exc).__name__}: {exc}") from None


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """A voice plug-in's exceptions as a remote engine's: SynthesisError a refusal (that
    text: the voice stays in use), anything else a failure."""
    try:
        yield
    except SynthesisError as exc:
        raise Refused(str(exc)) from None
    except RemoteSpeechError:
        raise
    except Exception as exc:
        raise RemoteSpeechError(f"{type(exc).__name__}: {exc}") from None


def _started(plugin: str, warm_up: Any) -> None:
    """A plug-in's ``warm_up``; its failure one line in the log, as a server's that is down."""
    try:
        warm_up()
    except RemoteSpeechError:
        raise
    except Exception as exc:
        raise RemoteSpeechError(
            f"the {plugin} plug-in did not start: {type(exc).__name__}: {exc}"
        ) from None


class PluginRecogniser:
    """A plug-in's recogniser, its answers checked (see the module docstring)."""

    def __init__(
        self,
        name: str,
        plugin: str,
        options: Mapping[str, Any],
        spoken: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.plugin = plugin
        self.options = options
        self._spoken = tuple(spoken)
        self.engine: Recogniser = _make(RECOGNISERS, plugin, name, options)
        own = getattr(self.engine, "languages", None) or frozenset({"en"})
        tags = self._spoken or tuple(own)
        self._languages = frozenset(languages.code(tag) for tag in tags)

    @property
    def languages(self) -> frozenset[str]:
        return self._languages

    def restarted(self) -> PluginRecogniser:
        """The plug-in made again after a fault (the speech service's supervisor asks)."""
        try:
            return PluginRecogniser(self.name, self.plugin, self.options, self._spoken)
        except PluginError as exc:
            raise RemoteSpeechError(str(exc)) from None

    def warm_up(self) -> None:
        warm_up = getattr(self.engine, "warm_up", None)
        if warm_up is not None:
            _started(self.plugin, warm_up)

    @property
    def timeout(self) -> float:
        """The plug-in's own ``timeout`` (seconds it waits for a server), or 0: none."""
        value = getattr(self.engine, "timeout", 0.0)
        return float(value) if isinstance(value, int | float) else 0.0

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        return _checked(self.plugin, self.engine.recognise(audio, options), options)

    @property
    def streaming(self) -> bool:
        """Whether the plug-in takes an utterance as it is spoken (it has ``stream``)."""
        return callable(getattr(self.engine, "stream", None))

    def stream(self, options: RecognitionOptions) -> PluginStream:
        """The plug-in's ``stream(options)``: its answer checked as :meth:`recognise`'s."""
        return PluginStream(self.plugin, self.engine.stream(options), options)  # type: ignore[attr-defined]


class PluginStream:
    """A plug-in's :class:`~callhook.speech.asr.RecognitionStream`, its answer checked."""

    def __init__(self, plugin: str, stream: RecognitionStream, options: RecognitionOptions):
        for method in ("feed", "finish"):
            if not callable(getattr(stream, method, None)):
                raise RemoteSpeechError(
                    f"the {plugin} plug-in's stream() answered {type(stream).__name__},"
                    f" which has no {method}()"
                )
        self.plugin = plugin
        self.stream = stream
        self.options = options

    def feed(self, audio: npt.NDArray[np.int16]) -> None:
        self.stream.feed(audio)

    def finish(self) -> tuple[Alternative, ...]:
        return _checked(self.plugin, self.stream.finish(), self.options)

    def cancel(self) -> None:
        cancel = getattr(self.stream, "cancel", None)
        if callable(cancel):
            cancel()


def _checked(plugin: str, answer: Any, options: RecognitionOptions) -> tuple[Alternative, ...]:
    """A recogniser plug-in's answer as callhook's: Alternatives, stripped, confidences
    within 0 to 1, at most ``max_alternatives``; anything else a failed engine."""
    if not isinstance(answer, Sequence) or not all(
        isinstance(a, Alternative)
        and isinstance(a.text, str)
        and isinstance(a.confidence, int | float)
        and math.isfinite(a.confidence)
        for a in answer
    ):
        raise RemoteSpeechError(
            f"the {plugin} plug-in answered {type(answer).__name__}, not Alternatives"
        )
    kept = [
        Alternative(a.text.strip(), min(max(float(a.confidence), 0.0), 1.0))
        for a in answer
        if a.text.strip()
    ]
    return tuple(kept[: max(options.max_alternatives, 1)])


class PluginVoice:
    """A plug-in's voices, behind a circuit breaker like a remote server's (see the module
    docstring)."""

    remote = True

    def __init__(self, name: str, plugin: str, options: Mapping[str, Any]) -> None:
        self.name = name
        self.plugin = plugin
        self.engine: SpeechEngine = _make(VOICES, plugin, name, options)
        self.guard = Guard(name)
        self._said_voice_for = False
        # lower-case name → the plug-in's spelling (tts_voice is matched in lower case)
        try:
            self._voices = {str(v).lower(): str(v) for v in self.engine.voices()}
        except Exception as exc:
            raise PluginError(f"{plugin}: voices() failed: {type(exc).__name__}: {exc}") from None

    def voices(self) -> Sequence[str]:
        return sorted(self._voices)

    def voice_for(self, language: str) -> str | None:
        try:
            voice = self.engine.voice_for(language)
        except Exception as exc:  # (asked on the event loop: a bug is no voice, said once)
            if not self._said_voice_for:
                self._said_voice_for = True
                logger.error(
                    "the %s plug-in's voice_for failed: %s: %s",
                    self.plugin,
                    type(exc).__name__,
                    exc,
                )
            return None
        return str(voice).lower() if voice is not None else None

    def warm_up(self) -> None:
        warm_up = getattr(self.engine, "warm_up", None)
        if warm_up is not None:
            _started(self.plugin, warm_up)

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        return self.guard.call(lambda: self._synthesize(text, voice, rate))

    @property
    def streaming(self) -> bool:
        """Whether the plug-in hands a sentence's audio over in pieces as it makes them
        (it has ``stream(text, voice, rate)``)."""
        return callable(getattr(self.engine, "stream", None))

    def stream(self, text: str, voice: str, rate: float = 1.0) -> Iterator[npt.NDArray[np.int16]]:
        """The plug-in's ``stream``: each piece checked as :meth:`synthesize`'s audio is."""
        return self.guard.stream(self._pieces(text, voice, rate))

    def _pieces(self, text: str, voice: str, rate: float) -> Iterator[npt.NDArray[np.int16]]:
        spelling = self._voices.get(voice, voice)
        with _failures():
            pieces = iter(self.engine.stream(text, spelling, rate))  # type: ignore[attr-defined]
        while True:
            with _failures():
                piece = next(pieces, None)
            if piece is None:
                return
            yield self._checked(piece)

    def _synthesize(self, text: str, voice: str, rate: float) -> npt.NDArray[np.int16]:
        with _failures():
            audio = self.engine.synthesize(text, self._voices.get(voice, voice), rate)
        return self._checked(audio)

    def _checked(self, audio: Any) -> npt.NDArray[np.int16]:
        if not isinstance(audio, np.ndarray) or audio.dtype != np.int16 or audio.ndim != 1:
            what = (
                f"an array of {audio.dtype}, shape {audio.shape}"
                if isinstance(audio, np.ndarray)
                else type(audio).__name__
            )
            raise RemoteSpeechError(f"the {self.plugin} plug-in answered {what}, not int16 audio")
        return audio

    def snapshot(self) -> dict[str, Any]:
        """Its breaker, for ``/api/stats``."""
        return self.guard.snapshot()
