"""Text-to-speech: the interface every synthesis engine implements.

Engines: :mod:`callhook.speech.piper` (the default: a natural neural voice)
and :mod:`callhook.speech.espeak` (light, many languages). Which engine and
voice speak a prompt (``tts_voice``, the call's language), the sentence by
sentence streaming and the cache are :mod:`callhook.speech.synthesis`'s job;
an engine only turns a piece of text into 8 kHz audio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

#: Sample rate engines deliver (the call's: G.711 is 8 kHz).
SAMPLE_RATE = 8000


class SpeechEngine(Protocol):
    """One TTS engine and the voices it has."""

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

    def synthesize(self, text: str, voice: str) -> npt.NDArray[np.int16]:
        """``text`` (usually one sentence) spoken with ``voice``: 8 kHz mono int16.

        Called on worker threads, possibly several at once. Raises
        :class:`SynthesisError` when the text cannot be spoken.
        """
        ...


class SynthesisError(Exception):
    """An engine failed to speak a text (the prompt ends with this error)."""
