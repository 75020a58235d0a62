"""The caller's audio level, a character per 100 ms, for the call's picture.

The web phone draws a call as a picture (docs/webphone.md): prompts, the
caller's audio level, voice activity, digits and timers on one time axis. The
level comes from here: each 20 ms frame the media session decodes from the
caller is fed in (with whether the voice-activity detector says speech), and
every :data:`FRAMES` frames become one character:

* ``a`` .. ``u``: the bin's RMS level, ``a`` at or below -60 dBFS and one letter
  more for every 3 dB up to ``u`` at 0 dBFS (the scale of
  :func:`callhook.media.vad.level_dbfs`: a full-scale square wave is 0);
* upper case when the detector heard speech in the bin (it only listens while an
  action does: a recording, a recognition stream, a barge-in on voice).

The web phone's calls write these to their log as ``levels`` lines, so a past
call's picture has them too. Pure: no IO, no clock.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from callhook.media.vad import FULL_SCALE

#: Frames (20 ms) in a bin: 100 ms.
FRAMES = 5
#: The level of ``a``, and the step of each next letter, in dB.
FLOOR_DBFS = -60.0
STEP_DB = 3.0
LETTERS = "abcdefghijklmnopqrstu"


def letter(dbfs: float, voice: bool) -> str:
    """The character of a bin at ``dbfs``, upper case if ``voice``."""
    index = round((max(FLOOR_DBFS, min(0.0, dbfs)) - FLOOR_DBFS) / STEP_DB)
    ch = LETTERS[index]
    return ch.upper() if voice else ch


def dbfs_of(ch: str) -> float:
    """The level a character stands for (the inverse of :func:`letter`, to 3 dB)."""
    return FLOOR_DBFS + LETTERS.index(ch.lower()) * STEP_DB


class LevelMeter:
    """Turns a caller's 20 ms frames into level characters (see the module docstring)."""

    def __init__(self) -> None:
        self._power = 0.0
        self._frames = 0
        self._voice = False
        self._bins: list[str] = []

    def feed(self, frame: npt.NDArray[np.int16], voice: bool) -> None:
        """One 20 ms frame of the caller's audio; ``voice``: the detector says speech."""
        if len(frame):
            f = frame.astype(np.float32)
            self._power += float(f @ f) / len(f)
        self._voice = self._voice or voice
        self._frames += 1
        if self._frames == FRAMES:
            mean = self._power / FRAMES
            dbfs = 10.0 * math.log10(mean / (FULL_SCALE * FULL_SCALE)) if mean > 0 else -math.inf
            self._bins.append(letter(dbfs, self._voice))
            self._power, self._frames, self._voice = 0.0, 0, False

    def take(self) -> str:
        """The bins completed since the last call, oldest first."""
        out = "".join(self._bins)
        self._bins.clear()
        return out
