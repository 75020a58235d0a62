"""The caller's level as the call's picture gets it (callhook/media/meter.py)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from callhook.media.meter import FRAMES, LevelMeter, dbfs_of, letter


def tone(dbfs: float) -> npt.NDArray[np.int16]:
    """A 20 ms 1 kHz sine whose RMS is ``dbfs`` (full-scale square wave = 0 dBFS)."""
    amplitude = 32768 * 10 ** (dbfs / 20) * np.sqrt(2)
    t = np.arange(160) / 8000
    samples: npt.NDArray[np.int16] = np.round(amplitude * np.sin(2 * np.pi * 1000 * t)).astype(
        np.int16
    )
    return samples


def test_a_bin_is_five_frames_and_says_its_level_to_three_db() -> None:
    meter = LevelMeter()
    for dbfs in (-30.0, -12.0):
        for _ in range(FRAMES):
            meter.feed(tone(dbfs), voice=False)
    meter.feed(tone(-12.0), voice=False)  # a sixth frame: no bin yet
    chars = meter.take()
    assert len(chars) == 2
    assert abs(dbfs_of(chars[0]) - -30.0) <= 1.5 and abs(dbfs_of(chars[1]) - -12.0) <= 1.5
    assert meter.take() == ""  # taken once


def test_silence_is_the_floor_and_voice_is_upper_case() -> None:
    meter = LevelMeter()
    for _ in range(FRAMES):
        meter.feed(np.zeros(160, np.int16), voice=False)
    for i in range(FRAMES):
        meter.feed(tone(-20.0), voice=i == 3)  # voice in any frame marks the bin
    bins = meter.take()
    quiet, loud = bins[0], bins[1]
    assert len(bins) == 2
    assert quiet == "a"
    assert loud.isupper() and loud == letter(-20.0, True)


def test_letters_clip_at_both_ends() -> None:
    assert letter(-200.0, False) == "a" and letter(5.0, False) == "u"
    assert dbfs_of("A") == -60.0 and dbfs_of("u") == 0.0
