"""A voice plug-in: words recorded one by one, said in a row.

IVRs have long read numbers, amounts and codes from a voice artist's recordings of single
words. Record each word once, one WAV file per word (16-bit PCM, mono, any sample rate),
a folder per voice::

    /srv/voices/anna/zero.wav, one.wav, ... nine.wav, your.wav, code.wav, is.wav, ...

    [speech.engines.studio]
    protocol = "plugin"
    plugin = "recorded-words"

    [speech.engines.studio.options]
    directory = "/srv/voices"   # a folder per voice
    language = "en-US"          # what the voices speak
    gap_ms = 60                 # silence between words

Then ``"tts_voice": "studio:anna"`` says ``Your code is 4 1 7.`` in Anna's recordings
(digits are read one by one), handed to callhook a word at a time (``stream``). A text
with a word she never recorded cannot be said by this voice: ``SynthesisError``, and
callhook says that sentence with its embedded voice instead (the call's log says so).
"""

from __future__ import annotations

import re
import wave
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from callhook.speech.tts import SAMPLE_RATE, SynthesisError, telephone_audio

DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class RecordedWords:
    """``factory(name, options)`` for ``callhook.voices``: the options table above."""

    def __init__(self, name: str, options: Mapping[str, Any]) -> None:
        unknown = set(options) - {"directory", "language", "gap_ms"}
        if unknown:
            raise ValueError(f"unknown options: {', '.join(sorted(unknown))}")
        if "directory" not in options:
            raise ValueError("options.directory (a folder of voices) is missing")
        self.name = name
        self.directory = Path(options["directory"])
        if not self.directory.is_dir():
            raise ValueError(f"{self.directory} is not a folder")
        self.language = str(options.get("language", "en-US")).lower()
        self.gap = float(options.get("gap_ms", 60)) / 1000
        self._words: dict[tuple[str, str], npt.NDArray[np.float32]] = {}

    def voices(self) -> Sequence[str]:
        """A voice per folder in ``directory``."""
        return sorted(p.name for p in self.directory.iterdir() if p.is_dir())

    def voice_for(self, language: str) -> str | None:
        """The first voice, for the language the voices speak (or its primary subtag)."""
        tag = language.lower()
        if tag == self.language or tag.split("-")[0] == self.language.split("-")[0]:
            return next(iter(self.voices()), None)
        return None

    def warm_up(self) -> None:
        return  # files are read when first said, then kept

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        """``text``'s words in ``voice``'s recordings, ``gap_ms`` apart (``rate`` shortens or
        lengthens the gaps, not the words)."""
        pieces = list(self.stream(text, voice, rate))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)

    def stream(self, text: str, voice: str, rate: float = 1.0) -> Iterator[npt.NDArray[np.int16]]:
        """The same, a word at a time: callhook plays each piece as it comes (a voice that
        streams starts a long sentence sooner). Every word is checked first, so a text
        with a word never recorded is refused before any of it is heard."""
        words = [
            DIGITS[int(w)] if w.isdigit() else w
            for token in re.findall(r"[\w']+", text.lower())
            for w in (list(token) if token.isdigit() else [token])
        ]
        recordings = [self._word(voice, word) for word in words]
        gap = np.zeros(round(self.gap / rate * SAMPLE_RATE), dtype=np.int16)
        for i, recording in enumerate(recordings):
            if i:
                yield gap
            # Each word at the telephone level callhook's own voices have.
            yield telephone_audio(recording, SAMPLE_RATE)

    def _word(self, voice: str, word: str) -> npt.NDArray[np.float32]:
        key = (voice, word)
        if key not in self._words:
            path = self.directory / voice / f"{word}.wav"
            if not path.is_file():
                raise SynthesisError(f"{voice} has no recording of {word!r}")
            with wave.open(str(path), "rb") as wav:
                if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
                    raise SynthesisError(f"{path}: not 16-bit mono")
                rate = wav.getframerate()
                pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
            samples = (pcm / 32768).astype(np.float32)
            if rate != SAMPLE_RATE:
                samples = np.asarray(soxr.resample(samples, rate, SAMPLE_RATE), dtype=np.float32)
            # (Two threads may read the same word at once: both keep the same audio.)
            self._words[key] = samples
        return self._words[key]
