"""Text-to-speech: the interface every synthesis engine implements.

Engines: :mod:`callhook.speech.piper` (the default: a natural neural voice)
and :mod:`callhook.speech.espeak` (light, many languages). Which engine and
voice speak a prompt (``tts_voice``, the call's language), the sentence by
sentence streaming and the cache are :mod:`callhook.speech.synthesis`'s job;
an engine only turns a piece of text into 8 kHz audio, through
:func:`telephone_audio`, so every voice plays at the same level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import soxr

#: Sample rate engines deliver (the call's: G.711 is 8 kHz).
SAMPLE_RATE = 8000

#: Target active speech level and peak ceiling of every prompt (dBFS).
TARGET_LEVEL_DBFS = -19.0
PEAK_CEILING_DBFS = -1.0
#: Frames quieter than this below the loudest frame are pauses, not speech (dB).
_ACTIVE_RANGE_DB = 30.0
_FRAME = SAMPLE_RATE // 50  # 20 ms


def telephone_audio(samples: npt.NDArray[np.floating[Any]], rate: int) -> npt.NDArray[np.int16]:
    """Float audio in [-1, 1] at ``rate`` → 8 kHz int16 at the telephone level above."""
    audio = np.asarray(samples, dtype=np.float32)
    if rate != SAMPLE_RATE:
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    if peak < 1e-6:  # nothing audible: do not amplify noise
        return np.zeros(audio.size, dtype=np.int16)
    usable = audio[: audio.size // _FRAME * _FRAME]
    if usable.size == 0:  # shorter than a frame: the whole thing is the frame
        usable = audio
    frame_power = np.mean(usable.reshape(-1, min(_FRAME, usable.size)) ** 2, axis=1)
    active = frame_power[frame_power >= frame_power.max() * 10 ** (-_ACTIVE_RANGE_DB / 10)]
    level = float(np.sqrt(np.mean(active)))
    gain = min(10 ** (TARGET_LEVEL_DBFS / 20) / level, 10 ** (PEAK_CEILING_DBFS / 20) / peak)
    return np.round(audio * (gain * 32767)).astype(np.int16)


def at_volume(audio: npt.NDArray[np.int16], db: float) -> npt.NDArray[np.int16]:
    """``audio`` made ``db`` louder (SSML's ``prosody volume``), never past the peak ceiling
    (a louder voice is a compressed one there, not a clipped one); ``-inf`` is silence."""
    if db == 0.0 or not audio.size:
        return audio
    if math.isinf(db) and db < 0:
        return np.zeros(audio.size, dtype=np.int16)
    peak = float(np.max(np.abs(audio.astype(np.int32))))
    gain = 10 ** (db / 20)
    if peak > 0:
        gain = min(gain, 10 ** (PEAK_CEILING_DBFS / 20) * 32767 / peak) if db > 0 else gain
    return np.round(audio.astype(np.float32) * gain).astype(np.int16)


def silence(seconds: float) -> npt.NDArray[np.int16]:
    """``seconds`` of silence at :data:`SAMPLE_RATE` (SSML's ``break``)."""
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.int16)


class SpeechEngine(Protocol):
    """One TTS engine and the voices it has.

    An engine that makes a sentence's audio in pieces may also have ``streaming = True``
    and ``stream(text, voice, rate)``, an iterator of ``int16`` pieces: the synthesiser then
    plays each as it comes (:meth:`callhook.speech.synthesis.Synthesiser.chunks`)."""

    #: Short engine name, as used in ``tts_voice`` (``piper``, ``espeak``).
    name: str

    def voices(self) -> Sequence[str]:
        """The voice names this engine can speak with (lower case)."""
        ...

    def voice_for(self, language: str) -> str | None:
        """This engine's voice for a BCP 47 language tag (``en-US``), or None if it has none."""
        ...

    def warm_up(self) -> None:
        """Load models now (called once off the event loop at start-up)."""

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> npt.NDArray[np.int16]:
        """``text`` (usually one sentence) spoken with ``voice`` at ``rate`` times its usual
        speed (SSML's ``prosody rate``): 8 kHz mono int16.

        Called on worker threads, possibly several at once. Raises
        :class:`SynthesisError` when the text cannot be spoken.
        """
        ...


class SynthesisError(Exception):
    """An engine failed to speak a text (the prompt ends with this error)."""
