"""Voice activity: is the caller making sound? Frame energy against an adaptive noise floor.

Used by ``record`` (stop after N seconds of silence) and ``get_input``
(barge-in, end of speech): they consume edges, ``VoiceActivity(active)``,
so :meth:`VoiceActivityDetector.feed` returns True or False only when the
state changes.

The method (a classic one; see ITU-T G.729 Annex B and G.723.1 Annex A for
fuller detectors of the same family):

* frame energy (mean square of the samples);
* noise floor: the minimum frame energy over the last ~1.6 s (minimum
  statistics, R. Martin 2001), so it follows line noise down at once and up
  within 1.6 s, while speech, which always has quieter frames between
  syllables, does not pull it up;
* a frame is loud when it is :attr:`margin_db` above the floor *and* above
  an absolute minimum (−47 dBFS by default), so comfort noise and line hiss
  at −50..−60 dBFS never count, whatever the floor;
* onset after 3 loud frames in a row (60 ms: clicks do not count), release
  after 15 quiet frames in a row (300 ms hangover, so pauses between words
  do not end an utterance); while active the loud threshold is 3 dB lower
  (hysteresis).

A steady sound (a dial or reorder tone, a hum) counts as activity for about
the floor's window, then becomes the floor: it is background, not a caller.

Levels are dBFS as in :mod:`callhook.media.tones`: RMS relative to 32768
(a full-scale sine is −3 dBFS).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

import numpy as np
import numpy.typing as npt

FULL_SCALE: Final = 32768.0
#: What :func:`level_dbfs` returns for digital silence.
SILENCE_DBFS: Final = -120.0


def _power(dbfs: float) -> float:
    """Mean square of a signal at ``dbfs``."""
    return FULL_SCALE * FULL_SCALE * math.pow(10.0, dbfs / 10.0)


def level_dbfs(frame: npt.NDArray[np.int16]) -> float:
    """RMS level of ``frame`` in dBFS (a full-scale square wave is 0), at least -120."""
    if frame.size == 0:
        return SILENCE_DBFS
    f = frame.astype(np.float64).ravel()
    mean_square = float(f @ f) / f.size
    if mean_square <= _power(SILENCE_DBFS):
        return SILENCE_DBFS
    return 10.0 * math.log10(mean_square / (FULL_SCALE * FULL_SCALE))


class VoiceActivityDetector:
    """Edges of voice activity in a stream of frames (sans-IO; one per call).

    ``feed(frame)`` returns True when activity starts, False when it ends,
    None otherwise. Frames are int16 arrays (160 samples for 20 ms at 8 kHz;
    the frame counts below assume 20 ms frames).
    """

    #: Frames per block of the noise-floor minimum, and blocks remembered (10 x 8 = 1.6 s).
    BLOCK_FRAMES: Final = 10
    BLOCKS: Final = 8

    def __init__(
        self,
        *,
        onset_frames: int = 3,
        hangover_frames: int = 15,
        margin_db: float = 8.0,
        min_level_dbfs: float = -47.0,
        hysteresis_db: float = 3.0,
    ) -> None:
        self.onset_frames = onset_frames
        self.hangover_frames = hangover_frames
        self.margin_db = margin_db
        self.min_level_dbfs = min_level_dbfs
        self._margin = math.pow(10.0, margin_db / 10.0)
        self._hold = math.pow(10.0, -hysteresis_db / 10.0)
        self._min_power = _power(min_level_dbfs)
        # Until real blocks replace it, the floor is one that puts the threshold at the minimum.
        prior = self._min_power / self._margin
        self._blocks: deque[float] = deque([prior], maxlen=self.BLOCKS)
        self._history_floor = prior
        self._block_min = math.inf
        self._block_count = 0
        self._active = False
        self._run = 0

    @property
    def active(self) -> bool:
        return self._active

    @property
    def noise_floor_dbfs(self) -> float:
        """The current noise floor estimate (minimum frame level over the floor's window)."""
        floor = min(self._history_floor, self._block_min)
        if floor <= _power(SILENCE_DBFS):
            return SILENCE_DBFS
        return 10.0 * math.log10(floor / (FULL_SCALE * FULL_SCALE))

    def feed(self, frame: npt.NDArray[np.int16]) -> bool | None:
        """True: activity started; False: it ended (after the hangover); None: no change."""
        f = frame.astype(np.float32)
        power = float(f @ f) / len(f)
        # Noise floor: running minimum over BLOCKS blocks of BLOCK_FRAMES frames.
        if power < self._block_min:
            self._block_min = power
        self._block_count += 1
        floor = min(self._history_floor, self._block_min)
        if self._block_count >= self.BLOCK_FRAMES:
            self._blocks.append(self._block_min)
            self._history_floor = min(self._blocks)
            self._block_min = math.inf
            self._block_count = 0
        threshold = max(self._min_power, floor * self._margin)
        if self._active:
            if power > max(self._min_power, threshold * self._hold):
                self._run = 0
                return None
            self._run += 1
            if self._run >= self.hangover_frames:
                self._active = False
                self._run = 0
                return False
            return None
        if power > threshold:
            self._run += 1
            if self._run >= self.onset_frames:
                self._active = True
                self._run = 0
                return True
        else:
            self._run = 0
        return None
