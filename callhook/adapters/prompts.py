"""Turning prompt items into audio for a real call: files from the store, tones, speech.

Files are decoded once (any WAV callhook reads, resampled to 8 kHz) and kept,
encoded in the law a call uses, in a small cache keyed by path, modification
time and law: a prompt played on hundreds of calls is read and encoded once.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import numpy.typing as npt

from callhook.events import PlayFile, PlayTone, PromptItem, SayText
from callhook.media import g711, tones, wav
from callhook.speech.tts import TextToSpeech
from callhook.store.files import MediaStore, OutsideNamespace

CACHE_ENTRIES = 128


class PromptError(Exception):
    """An item that cannot be played, and why (the prompt ends there)."""


class PromptAudio:
    """Audio for prompt items of one application namespace."""

    def __init__(self, store: MediaStore, tts: TextToSpeech) -> None:
        self.store = store
        self.tts = tts
        self._cache: OrderedDict[tuple[Path, int], npt.NDArray[np.int16]] = OrderedDict()
        self._encoded: OrderedDict[tuple[object, ...], bytes] = OrderedDict()

    def encoded(
        self, app: str, items: tuple[PromptItem, ...], law: g711.Law
    ) -> tuple[bytes, str | None]:
        """The audio of ``items`` in ``law`` (G.711 bytes); stops at the first that fails."""
        parts: list[bytes] = []
        for item in items:
            try:
                parts.append(self._encoded_item(app, item, law))
            except PromptError as exc:
                return b"".join(parts), str(exc)
        return b"".join(parts), None

    def _encoded_item(self, app: str, item: PromptItem, law: g711.Law) -> bytes:
        key: tuple[object, ...] | None = None
        if isinstance(item, PlayTone):
            key = ("tone", item.frequency_hz, item.seconds, law)
        elif isinstance(item, PlayFile) and item.cipher is None:
            try:
                path = self.store.path(app, item.name)
                key = ("file", path, path.stat().st_mtime_ns, law)
            except (OutsideNamespace, OSError):
                key = None  # item() says why
        if key is not None:
            cached = self._encoded.get(key)
            if cached is not None:
                self._encoded.move_to_end(key)
                return cached
        audio = g711.encode(law, self.item(app, item))
        if key is not None:
            self._encoded[key] = audio
            if len(self._encoded) > CACHE_ENTRIES:
                self._encoded.popitem(last=False)
        return audio

    def item(self, app: str, item: PromptItem) -> npt.NDArray[np.int16]:
        if isinstance(item, PlayTone):
            return tones.tone(item.frequency_hz, item.seconds)
        if isinstance(item, SayText):
            return self.tts.synthesize(item.text, item.voice)
        assert isinstance(item, PlayFile)
        if item.cipher is not None:
            raise PromptError(f"{item.name}: encrypted files cannot be played yet")
        try:
            path = self.store.path(app, item.name)
            stat = path.stat()
        except OutsideNamespace as exc:
            raise PromptError(str(exc)) from None
        except OSError:
            raise PromptError(f"{item.name}: no such file in the media file store") from None
        key = (path, stat.st_mtime_ns)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        try:
            audio = wav.decode_to_8k(path.read_bytes())
        except (OSError, wav.WavError) as exc:
            raise PromptError(f"{item.name}: {exc}") from None
        self._cache[key] = audio
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return audio
