"""Text-to-speech: the interface prompts are spoken through.

The embedded engine is chosen by the speech issue (DESIGN.md §3). Until it
lands, :class:`NoSpeech` stands in on real calls: a text prompt plays as
silence for as long as it would take to say, and callhook says so in its log
once, so nobody mistakes the silence for a bug. The terminal phone prints the
text instead.
"""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np
import numpy.typing as npt

from callhook.media.simulated import SECONDS_PER_CHARACTER

logger = logging.getLogger("callhook.speech")


class TextToSpeech(Protocol):
    """Turns text into 8 kHz 16-bit audio."""

    def synthesize(self, text: str, voice: str | None) -> npt.NDArray[np.int16]:
        """The audio of ``text`` spoken with ``voice`` (None: the default voice)."""


class NoSpeech:
    """No engine yet: silence as long as the text would take to say."""

    def __init__(self) -> None:
        self._warned = False

    def synthesize(self, text: str, voice: str | None) -> npt.NDArray[np.int16]:
        if not self._warned:
            self._warned = True
            logger.warning(
                "no text-to-speech engine is installed yet: text prompts play as silence"
            )
        seconds = max(0.3, len(text) * SECONDS_PER_CHARACTER)
        return np.zeros(round(seconds * 8000), dtype=np.int16)
