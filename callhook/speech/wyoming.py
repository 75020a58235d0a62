"""Remote speech engines over the Wyoming protocol (Home Assistant's: one JSON header line
per event, then its data and its audio), such as ``wyoming-faster-whisper`` and
``wyoming-piper`` on a speech server.

:class:`WyomingRecogniser` sends an utterance as ``transcribe``, ``audio-start``,
``audio-chunk``... ``audio-stop`` (8 kHz, 16-bit, mono: servers convert) and reads the
``transcript``, the chunks as the caller speaks (it streams: callhook feeds it while the
utterance goes on); :class:`WyomingVoice` sends ``synthesize`` and reads the audio back.
Each request (an utterance, a sentence) is a connection of its own, made on the worker
thread that asked (the engines' interfaces are blocking, like the embedded ones), with
``timeout`` on every socket operation.

What the protocol does not carry (docs/speech.md, "Remote engines"): confidences and
alternatives (a transcript gets a fixed confidence), word hints (the transcript is matched
against them here), a speaking rate, SSML (callhook renders it first, as for its own
voices).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, read_event, write_event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from callhook.events import Alternative, RecognitionOptions
from callhook.speech import languages
from callhook.speech.breaker import Breaker
from callhook.speech.remote import Guard, Refused, RemoteSpeechError, matched
from callhook.speech.tts import telephone_audio

logger = logging.getLogger("callhook.speech")

#: Samples per ``audio-chunk`` sent (128 ms at 8 kHz).
CHUNK = 1024


class _Connection:
    """One request's connection: ``tcp://host:port`` or ``unix:///path``."""

    def __init__(self, uri: str, timeout: float) -> None:
        parts = urlsplit(uri)
        try:
            if parts.scheme == "tcp" and parts.hostname and parts.port:
                self.sock = socket.create_connection((parts.hostname, parts.port), timeout)
            elif parts.scheme == "unix":
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(parts.path)
            else:
                raise RemoteSpeechError(f"{uri}: not a tcp://host:port or unix:// URI")
        except OSError as exc:
            raise RemoteSpeechError(f"{uri}: cannot connect: {exc}") from None
        self.uri = uri
        self.file: Any = self.sock.makefile("rwb")

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *_: object) -> None:
        self.file.close()
        self.sock.close()

    def send(self, *events: Event) -> None:
        try:
            for event in events:
                write_event(event, self.file)
            self.file.flush()
        except OSError as exc:
            raise RemoteSpeechError(f"{self.uri}: {exc}") from None

    def receive(self) -> Event:
        try:
            event = read_event(self.file)
        except OSError as exc:
            raise RemoteSpeechError(f"{self.uri}: {type(exc).__name__}: {exc}") from None
        if event is None:  # (the library's answer to both)
            raise RemoteSpeechError(
                f"{self.uri}: the server closed the connection or sent what is not an event"
            )
        if Error.is_type(event.type):
            raise Refused(f"{self.uri}: the server says: {Error.from_event(event).text}")
        return event


def describe(uri: str, timeout: float) -> Info:
    """What the server at ``uri`` serves (its ``info``)."""
    with _Connection(uri, timeout) as connection:
        connection.send(Describe().event())
        while True:
            event = connection.receive()
            if Info.is_type(event.type):
                return Info.from_event(event)


class WyomingRecogniser:
    """A Wyoming speech-to-text server as a :class:`~callhook.speech.asr.Recogniser`."""

    def __init__(
        self,
        name: str,
        uri: str,
        *,
        timeout: float = 5.0,
        spoken: Iterable[str] = ("en",),
    ) -> None:
        self.name = name
        self.uri = uri
        self.timeout = timeout
        self._languages = frozenset(languages.code(tag) for tag in spoken)

    @property
    def languages(self) -> frozenset[str]:
        return self._languages

    def restarted(self) -> WyomingRecogniser:
        """A fresh client after a fault (the speech service's supervisor asks)."""
        return WyomingRecogniser(self.name, self.uri, timeout=self.timeout, spoken=self._languages)

    def warm_up(self) -> None:
        """Whether the server is there and recognises speech (a fault otherwise)."""
        info = describe(self.uri, self.timeout)
        if not info.asr:
            raise RemoteSpeechError(f"{self.uri} serves no speech recognition")

    #: It takes an utterance as it is spoken (:meth:`stream`): the protocol streams.
    streaming = True

    def recognise(
        self, audio: npt.NDArray[np.int16], options: RecognitionOptions
    ) -> tuple[Alternative, ...]:
        stream = self.stream(options)
        stream.feed(audio)
        return stream.finish()

    def stream(self, options: RecognitionOptions) -> WyomingStream:
        """One utterance, sent to the server as it is spoken (a connection of its own)."""
        return WyomingStream(self.uri, self.timeout, options)


class WyomingStream:
    """One utterance on its connection: ``transcribe`` and ``audio-start`` at once, an
    ``audio-chunk`` per :data:`CHUNK` samples as they come, ``audio-stop`` at the end and
    the ``transcript`` read (a :class:`~callhook.speech.asr.RecognitionStream`)."""

    def __init__(self, uri: str, timeout: float, options: RecognitionOptions) -> None:
        self.options = options
        transcribe = Transcribe(
            language=languages.code(options.language),
            # (Carried where the protocol has a place; servers may not use them.)
            transcript_terms=list(options.word_hints) or None,
        )
        self.connection = _Connection(uri, timeout)
        try:
            self.connection.send(transcribe.event(), AudioStart(8000, 2, 1).event())
        except RemoteSpeechError:
            self.cancel()
            raise

    def feed(self, audio: npt.NDArray[np.int16]) -> None:
        pcm = np.asarray(audio, dtype="<i2").tobytes()
        step = CHUNK * 2
        self._send(
            *(AudioChunk(8000, 2, 1, pcm[i : i + step]).event() for i in range(0, len(pcm), step))
        )

    def finish(self) -> tuple[Alternative, ...]:
        with self.connection as connection:
            connection.send(AudioStop().event())
            while True:
                event = connection.receive()
                if Transcript.is_type(event.type):
                    text = Transcript.from_event(event).text.strip()
                    break
        if not text:
            return ()
        return (matched(text, self.options.word_hints),)

    def cancel(self) -> None:
        """Nobody wants the transcript: the connection is closed (the server drops it)."""
        self.connection.__exit__()

    def _send(self, *events: Event) -> None:
        try:
            self.connection.send(*events)
        except RemoteSpeechError:
            self.cancel()
            raise


class WyomingVoice:
    """A Wyoming text-to-speech server as a :class:`~callhook.speech.tts.SpeechEngine`.

    Its voices are the server's installed ones, asked once when it is made (``voices``
    from the config instead, when given: a server that is down at start-up still has its
    voices known). While the server fails, a circuit breaker refuses at once for a
    growing back-off; the synthesiser then speaks with the embedded default voice."""

    remote = True

    def __init__(
        self,
        name: str,
        uri: str,
        *,
        timeout: float = 5.0,
        voices: Sequence[str] = (),
        breaker: Breaker | None = None,
    ) -> None:
        self.name = name
        self.uri = uri
        self.timeout = timeout
        self.guard = Guard(name, breaker)
        self.breaker = self.guard.breaker
        # lower-case name → (the server's spelling, its languages)
        self._voices: dict[str, tuple[str, tuple[str, ...]]] = {
            v.lower(): (v, _language_of(v)) for v in voices
        }
        if not voices:
            try:
                self._voices = _installed_voices(describe(uri, timeout))
            except RemoteSpeechError as exc:
                logger.error("%s: its voices are unknown: %s", name, exc)

    def voices(self) -> Sequence[str]:
        return sorted(self._voices)

    def voice_for(self, language: str) -> str | None:
        tag = language.replace("_", "-").lower()
        primary = tag.split("-")[0]
        ranked = sorted(
            (0 if lang == tag else 1, name)
            for name, (_, langs) in self._voices.items()
            for lang in langs
            if lang.split("-")[0] == primary
        )
        return ranked[0][1] if ranked else None

    def warm_up(self) -> None:
        return  # nothing to load here; the server loads its own

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        """``text`` from the server (``rate`` is not carried: the protocol has none)."""
        return self.guard.call(lambda: self._synthesize(text, voice))

    def _synthesize(self, text: str, voice: str) -> npt.NDArray[np.int16]:
        spelling = self._voices.get(voice, (voice, ()))[0]
        request = Synthesize(text=text, voice=SynthesizeVoice(name=spelling))
        chunks: list[bytes] = []
        rate = width = channels = 0
        with _Connection(self.uri, self.timeout) as connection:
            connection.send(request.event())
            while True:
                event = connection.receive()
                if AudioStart.is_type(event.type):
                    start = AudioStart.from_event(event)
                    rate, width, channels = start.rate, start.width, start.channels
                elif AudioChunk.is_type(event.type):
                    chunk = AudioChunk.from_event(event)
                    rate, width, channels = chunk.rate, chunk.width, chunk.channels
                    chunks.append(chunk.audio)
                elif AudioStop.is_type(event.type):
                    break
        if width != 2 or not 1 <= channels <= 8 or not 4000 <= rate <= 192000:
            if not chunks:
                return np.zeros(0, dtype=np.int16)
            raise RemoteSpeechError(
                f"{self.uri}: audio of {width} bytes a sample, {channels} channels, {rate} Hz"
            )
        samples = np.frombuffer(b"".join(chunks), dtype="<i2").astype(np.float32) / 32768
        if channels > 1:
            samples = samples[: len(samples) // channels * channels].reshape(-1, channels)[:, 0]
        return telephone_audio(samples, rate)

    def snapshot(self) -> dict[str, Any]:
        """Its breaker, for ``/api/stats``."""
        return self.guard.snapshot()


def _installed_voices(info: Info) -> dict[str, tuple[str, tuple[str, ...]]]:
    voices: dict[str, tuple[str, tuple[str, ...]]] = {}
    for program in info.tts:
        for voice in program.voices:
            if voice.installed:
                langs = tuple(lang.replace("_", "-").lower() for lang in voice.languages)
                voices[voice.name.lower()] = (voice.name, langs)
    return voices


def _language_of(voice: str) -> tuple[str, ...]:
    """A configured voice's language, from a name such as piper's ``en_US-amy-medium``."""
    found = re.match(r"^([a-z]{2,3})[_-]([A-Za-z]{2})(?![A-Za-z])", voice)
    return (f"{found[1]}-{found[2]}".lower(),) if found else ()
