"""Turning prompt items into a real call's prompt: files from the store, tones, speech, digits.

Files are decoded once (any WAV callhook reads, resampled to 8 kHz) and kept,
encoded in the law a call uses, in a small cache keyed by path, modification
time and law: a prompt played on hundreds of calls is read and encoded once.
Speech comes from the synthesiser's sentence cache when every sentence of the
text is there; otherwise the leg synthesises it on a worker thread while the
prompt plays (:meth:`PromptAudio.ready` says how far a prompt can go now).
A file that is not cached yet is read and decoded on a worker thread (a
large one, or ADPCM, would stall every call's audio); encrypted files are
decrypted there too, and never cached.

A prompt is a sequence of segments for the media session
(:data:`~callhook.media.session.Segment`): audio in the call's law, or the
digits of a ``digits_to_play`` item, which the session sends as RFC 4733
events or in-band tones, whichever the call negotiated. A remote file
(``PlayUrl``, ``file_to_play`` given as a web page request) is fetched by
:class:`~callhook.edge.remotemedia.RemoteMedia` while the prompt plays
(:meth:`PromptAudio.remote_audio`); a fetch that fails ends the prompt with
its cause, like a missing file.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from callhook.events import PlayDigits, PlayFile, PlayTone, PlayUrl, PromptItem, SayText
from callhook.media import g711, tones, wav
from callhook.media.dtmfsend import Digits
from callhook.media.player import PromptError, Segment
from callhook.speech import ssml
from callhook.speech.synthesis import Synthesiser, VoiceChoice
from callhook.speech.tts import SynthesisError, at_volume, silence
from callhook.store import crypto
from callhook.store.files import MediaStore, OutsideNamespace

CACHE_ENTRIES = 128

#: The prompt items that are audio (the others are digits and remote files).
AudioItem = SayText | PlayFile | PlayTone


#: Synthesises a sentence on a worker thread (``choice``, ``text``, ``rate``), its audio
#: piece by piece as it is made: :meth:`callhook.edge.speechworkers.SpeechService.pieces`.
Synthesise = Callable[[VoiceChoice, str, float], AsyncIterator[npt.NDArray[np.int16]]]


class RemoteAudio(Protocol):
    """Where remote files come from (:class:`~callhook.edge.remotemedia.RemoteMedia`)."""

    async def audio(self, url: str) -> npt.NDArray[np.int16]:
        """The file at ``url`` as 8 kHz samples; raises PromptError."""


class PromptAudio:
    """Audio for prompt items of one application namespace."""

    def __init__(
        self,
        store: MediaStore,
        synthesiser: Synthesiser | None,
        *,
        remote: RemoteAudio | None = None,
        voices: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.synthesiser = synthesiser
        self.remote = remote
        #: Applications' own default voices (``[apps.NAME] voice``).
        self.voices = dict(voices or {})
        self._cache: OrderedDict[tuple[Path, int], npt.NDArray[np.int16]] = OrderedDict()
        self._encoded: OrderedDict[tuple[object, ...], bytes] = OrderedDict()
        # Worker threads fill the caches while the event loop reads them.
        self._lock = threading.Lock()

    def ready(
        self, app: str, items: tuple[PromptItem, ...], law: g711.Law
    ) -> tuple[list[Segment], int, str | None]:
        """The segments of the leading ``items`` that can play now, audio in ``law``.

        Returns the segments (empty audio left out), how many items they cover
        (text whose sentences are not all synthesised yet stops there), and the
        error of the first item that cannot be played at all (the prompt ends
        there).
        """
        parts: list[Segment] = []
        for done, item in enumerate(items):
            try:
                if isinstance(item, SayText):
                    speech = self._cached_speech(app, item)
                    if speech is None:
                        return parts, done, None  # to be synthesised
                    segment: Segment = g711.encode(law, speech)
                elif isinstance(item, PlayFile):
                    cached = self._cached_file(app, item, law)
                    if cached is None:
                        # Read, decoded (ADPCM is a Python loop) or decrypted on a worker
                        # thread: never on the event loop every call's audio runs on.
                        return parts, done, None
                    segment = cached
                elif isinstance(item, PlayUrl):
                    return parts, done, None  # fetched while the prompt plays
                else:
                    segment = self.segment(app, item, law)
            except PromptError as exc:
                return parts, done, str(exc)
            if segment:
                parts.append(segment)
        return parts, len(items), None

    def segment(self, app: str, item: PromptItem, law: g711.Law) -> Segment:
        """One item's part of the prompt: its audio in ``law``, or its digits; raises PromptError.

        Text only from the sentence cache, as for :meth:`encoded_item`.
        """
        if isinstance(item, PlayDigits):
            try:
                return Digits(item.digits)
            except ValueError as exc:  # the schema lets none through; a bug must not crash
                raise PromptError(str(exc)) from None
        if isinstance(item, PlayUrl):
            raise PromptError(f"{item.url}: a remote file is fetched with remote_audio()")
        return self.encoded_item(app, item, law)

    async def remote_audio(self, item: PlayUrl, law: g711.Law) -> bytes:
        """A remote file's audio in ``law``, fetched (or from its cache); raises PromptError."""
        if self.remote is None:
            raise PromptError(f"{item.url}: remote files cannot be played here")
        return g711.encode(law, await self.remote.audio(item.url))

    def _cached_file(self, app: str, item: PlayFile, law: g711.Law) -> bytes | None:
        """A store file's audio in ``law`` if it is cached and unchanged on disk, else None."""
        if item.cipher is not None:
            return None  # never cached
        try:
            path = self.store.path(app, item.name)
            key = ("file", path, path.stat().st_mtime_ns, law)
        except (OutsideNamespace, OSError):
            return None  # encoded_item() says why, on the worker thread
        return _lookup(self._encoded, key, self._lock)

    def encoded_item(self, app: str, item: AudioItem, law: g711.Law) -> bytes:
        """One item's audio in ``law`` (text only from the sentence cache); raises PromptError."""
        key: tuple[object, ...] | None = None
        if isinstance(item, PlayTone):
            key = ("tone", item.frequency_hz, item.and_hz, item.seconds, law)
        elif isinstance(item, PlayFile) and item.cipher is None:
            try:
                path = self.store.path(app, item.name)
                key = ("file", path, path.stat().st_mtime_ns, law)
            except (OutsideNamespace, OSError):
                key = None  # item() says why
        if key is not None:
            cached = _lookup(self._encoded, key, self._lock)
            if cached is not None:
                return cached
        audio = g711.encode(law, self.item(app, item))
        if key is not None:
            _store(self._encoded, key, audio, self._lock)
        return audio

    def item(self, app: str, item: AudioItem) -> npt.NDArray[np.int16]:
        if isinstance(item, PlayTone):
            return _tone(item)
        if isinstance(item, SayText):
            speech = self._cached_speech(app, item)
            if speech is None:
                raise PromptError("speech not synthesised yet")  # ready() prevents this
            return speech
        assert isinstance(item, PlayFile)
        if item.cipher is not None:
            return self._decrypted(app, item, item.cipher)
        try:
            path = self.store.path(app, item.name)
            stat = path.stat()
        except OutsideNamespace as exc:
            raise PromptError(str(exc)) from None
        except OSError:
            raise PromptError(f"{item.name}: no such file in the media file store") from None
        key = (path, stat.st_mtime_ns)
        cached_audio = _lookup(self._cache, key, self._lock)
        if cached_audio is not None:
            return cached_audio
        try:
            audio = wav.decode_to_8k(path.read_bytes())
        except (OSError, wav.WavError) as exc:
            raise PromptError(f"{item.name}: {exc}") from None
        _store(self._cache, key, audio, self._lock)
        return audio

    def _decrypted(
        self, app: str, item: PlayFile, cipher: tuple[str, str, str]
    ) -> npt.NDArray[np.int16]:
        """An encrypted file's audio (never cached: the plaintext lives only while it plays)."""
        try:
            data = self.store.path(app, item.name).read_bytes()
        except OutsideNamespace as exc:
            raise PromptError(str(exc)) from None
        except OSError:
            raise PromptError(f"{item.name}: no such file in the media file store") from None
        try:
            plain = crypto.decrypt_wav(data, crypto.Key.from_cipher(cipher))
            return wav.decode_to_8k(plain)
        except crypto.DecryptionError as exc:
            raise PromptError(
                f"{item.name}: cannot be decrypted with its decryption_cipher: {exc}"
            ) from None
        except (ValueError, wav.WavError) as exc:
            raise PromptError(f"{item.name}: {exc}") from None

    def choose(self, app: str, item: SayText) -> VoiceChoice:
        """The voice that says ``item``: its ``tts_voice``, else its application's voice,
        else the default (the synthesiser's rules, :mod:`callhook.speech.synthesis`)."""
        if self.synthesiser is None:
            raise PromptError("no text-to-speech engine is installed")
        return self.synthesiser.choose(item.voice or self.voices.get(app), item.language)

    def _cached_speech(self, app: str, item: SayText) -> npt.NDArray[np.int16] | None:
        """The text's audio if every sentence is in the synthesiser's cache (and it names
        no file of the store: :meth:`speech` reads those), else None."""
        synthesiser = self.synthesiser
        if synthesiser is None:
            raise PromptError("no text-to-speech engine is installed")
        choice = self.choose(app, item)
        audio = []
        for part in _parts(item):
            if isinstance(part, ssml.StoreAudio):
                return None
            if isinstance(part, ssml.Pause):
                audio.append(silence(part.seconds))
                continue
            spoken = synthesiser.cached(choice, part.text, part.rate)
            if spoken is None:
                return None
            audio.append(at_volume(spoken, part.volume_db))
        return np.concatenate(audio) if audio else np.zeros(0, dtype=np.int16)

    async def speech(
        self,
        app: str,
        item: SayText,
        law: g711.Law,
        synthesise: Synthesise,
        note: Callable[[str], None],
    ) -> AsyncIterator[bytes]:
        """The text's audio in ``law``, a sentence, a pause or a file at a time, each as soon
        as it is ready: sentences from the cache or ``synthesise`` (on a worker thread),
        SSML's ``audio`` files read on a worker thread. A file the store does not have
        is its element's content instead, and ``note`` says so (for the call's log).
        Raises PromptError or SynthesisError."""
        synthesiser = self.synthesiser
        if synthesiser is None:
            raise PromptError("no text-to-speech engine is installed")
        choice = self.choose(app, item)
        for part in _parts(item):
            pieces: tuple[ssml.Spoken | ssml.Pause, ...]
            if isinstance(part, ssml.StoreAudio):
                try:
                    yield await asyncio.to_thread(self.encoded_item, app, PlayFile(part.name), law)
                    continue
                except PromptError as exc:
                    note(f"SSML <audio>: {exc}: its content is said instead")
                    pieces = part.fallback
            else:
                pieces = (part,)
            for piece in pieces:
                if isinstance(piece, ssml.Pause):
                    yield g711.encode(law, silence(piece.seconds))
                    continue
                heard = False
                try:
                    async for audio in self._sentence(choice, piece, synthesise):
                        heard = True
                        yield g711.encode(law, at_volume(audio, piece.volume_db))
                    continue
                except SynthesisError as exc:
                    fallback = synthesiser.fallback_for(choice)
                    if fallback is None:
                        raise
                    # A remote voice that failed: the rest of the text in the embedded
                    # one (docs/speech.md, "Remote engines"); a sentence a streaming
                    # voice had begun is not said again.
                    rest = "the rest " if heard else ""
                    note(f"{exc}: {rest}said by {fallback.label} instead")
                    choice = fallback
                if not heard:
                    async for audio in self._sentence(choice, piece, synthesise):
                        yield g711.encode(law, at_volume(audio, piece.volume_db))

    async def _sentence(
        self, choice: VoiceChoice, piece: ssml.Spoken, synthesise: Synthesise
    ) -> AsyncIterator[npt.NDArray[np.int16]]:
        """One sentence's audio: from the cache, else as ``synthesise`` makes it."""
        assert self.synthesiser is not None
        audio = self.synthesiser.cached(choice, piece.text, piece.rate)
        if audio is not None:
            yield audio
            return
        async for audio in synthesise(choice, piece.text, piece.rate):
            yield audio


def _parts(item: SayText) -> tuple[ssml.Part, ...]:
    """What a text says (:func:`callhook.speech.ssml.parts`); SSML that is not valid (it is
    checked when the action list arrives) ends the prompt with its cause."""
    try:
        return ssml.parts(item.text, item.language)
    except ssml.SsmlError as exc:
        raise PromptError(str(exc)) from None


K = TypeVar("K")
V = TypeVar("V")


def _lookup(cache: OrderedDict[K, V], key: K, lock: threading.Lock) -> V | None:
    """A cached value (now the most recently used), or None."""
    with lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _store(cache: OrderedDict[K, V], key: K, value: V, lock: threading.Lock) -> None:
    """Cache ``value``, forgetting the least recently used entry past ``CACHE_ENTRIES``."""
    with lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > CACHE_ENTRIES:
            cache.popitem(last=False)


def _tone(item: PlayTone) -> npt.NDArray[np.int16]:
    """A tone item's audio: one sine, two summed (ringback), or silence (0 Hz)."""
    if item.frequency_hz <= 0:
        return np.zeros(int(item.seconds * tones.SAMPLE_RATE), dtype=np.int16)
    if item.and_hz is None:
        return tones.tone(item.frequency_hz, item.seconds)
    # Two tones each 3 dB below one, so that the pair is as loud as a single tone.
    return tones.sines([(item.frequency_hz, -13.0), (item.and_hz, -13.0)], item.seconds)
