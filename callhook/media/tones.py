"""Tones and test signals: sine tones, DTMF pairs, the record beep, line noise. int16 at 8 kHz.

Levels are RMS in dBFS relative to a full-scale *square* wave (32768), so a
sine of ``level_dbfs`` has a peak of ``32768 * sqrt(2) * 10 ** (level_dbfs / 20)``
and a full-scale sine is −3.01 dBFS (AES17 would call that 0 dBFS).
:func:`callhook.media.vad.level_dbfs` measures on the same scale.

Telephone levels are in dBm0: G.711's theoretical maximum load is a sine of
+3.17 dBm0 (µ-law) / +3.14 dBm0 (A-law) at full scale (ITU-T G.711,
Tables 1 and 2), so 0 dBm0 is about −6.2 dBFS here (:data:`DBM0_DBFS`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

SAMPLE_RATE: Final = 8000
FULL_SCALE: Final = 32768.0

#: dBFS (this module's scale) of a 0 dBm0 sine, µ-law: 20*log10(sqrt(2)/2 * 32636/32768) - 3.17.
DBM0_DBFS: Final = -6.2

#: DTMF frequencies (ITU-T Q.23): the low (row) group and the high (column) group.
ROW_HZ: Final = (697.0, 770.0, 852.0, 941.0)
COLUMN_HZ: Final = (1209.0, 1336.0, 1477.0, 1633.0)
#: The keypad (ITU-T Q.23): KEYPAD[row][column].
KEYPAD: Final = ("123A", "456B", "789C", "*0#D")

#: The record beep (a 1 kHz tone of 250 ms).
BEEP_HZ: Final = 1000.0
BEEP_SECONDS: Final = 0.25


def dbm0_to_dbfs(dbm0: float) -> float:
    """The dBFS level (RMS, this module's scale) of a ``dbm0`` signal (µ-law reference)."""
    return dbm0 + DBM0_DBFS


def dtmf_frequencies(digit: str) -> tuple[float, float]:
    """The (low, high) frequencies of a DTMF ``digit`` (one of ``0-9 * # A-D``)."""
    for r, keys in enumerate(KEYPAD):
        c = keys.find(digit.upper()) if len(digit) == 1 else -1
        if c >= 0:
            return ROW_HZ[r], COLUMN_HZ[c]
    raise ValueError(f"not a DTMF digit: {digit!r}")


def _amplitude(level_dbfs: float) -> float:
    return FULL_SCALE * math.sqrt(2.0) * math.pow(10.0, level_dbfs / 20.0)


def _to_int16(x: npt.NDArray[np.float64]) -> npt.NDArray[np.int16]:
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak > 32767.5:
        raise ValueError(f"level too high: the signal would clip (peak {peak:.0f} > 32767)")
    return np.rint(x).astype(np.int16)


def _samples(seconds: float, sample_rate: int) -> int:
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    return round(seconds * sample_rate)


def _ramp(x: npt.NDArray[np.float64], ramp_seconds: float, sample_rate: int) -> None:
    n = min(round(ramp_seconds * sample_rate), len(x) // 2)
    if n > 0:
        w = 0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)
        x[:n] *= w
        x[len(x) - n :] *= w[::-1]


def sines(
    components: list[tuple[float, float]],
    seconds: float,
    *,
    sample_rate: int = SAMPLE_RATE,
    ramp_seconds: float = 0.0,
    phase: float = 0.0,
) -> npt.NDArray[np.int16]:
    """The sum of sines ``[(freq_hz, level_dbfs), ...]``, ``seconds`` long, int16.

    ``ramp_seconds`` shapes both ends with a raised cosine (no click);
    ``phase`` (radians) is the starting phase of every component.
    Raises ValueError if the sum would clip.
    """
    n = _samples(seconds, sample_rate)
    t = np.arange(n, dtype=np.float64) / sample_rate
    x = np.zeros(n, dtype=np.float64)
    for freq, level in components:
        x += _amplitude(level) * np.sin(2.0 * np.pi * freq * t + phase)
    _ramp(x, ramp_seconds, sample_rate)
    return _to_int16(x)


def tone(
    freq_hz: float,
    seconds: float,
    level_dbfs: float = -10.0,
    *,
    sample_rate: int = SAMPLE_RATE,
    ramp_seconds: float = 0.0,
) -> npt.NDArray[np.int16]:
    """A sine of ``freq_hz`` at ``level_dbfs`` (RMS), ``seconds`` long."""
    return sines(
        [(freq_hz, level_dbfs)], seconds, sample_rate=sample_rate, ramp_seconds=ramp_seconds
    )


def dtmf_tone(
    digit: str,
    seconds: float,
    level_dbfs: float = -10.0,
    *,
    twist_db: float = 0.0,
    deviation: float = 0.0,
    sample_rate: int = SAMPLE_RATE,
    ramp_seconds: float = 0.0,
    phase: float = 0.0,
) -> npt.NDArray[np.int16]:
    """The DTMF pair of ``digit`` (ITU-T Q.23), ``seconds`` long.

    ``level_dbfs`` is the level of the low-group tone; the high-group tone is
    ``twist_db`` louder (negative: quieter). ``deviation`` moves both
    frequencies by that fraction (0.015 = +1.5 %), to test Q.24 tolerances.
    """
    low, high = dtmf_frequencies(digit)
    f = 1.0 + deviation
    return sines(
        [(low * f, level_dbfs), (high * f, level_dbfs + twist_db)],
        seconds,
        sample_rate=sample_rate,
        ramp_seconds=ramp_seconds,
        phase=phase,
    )


def beep(level_dbfs: float = -10.0, *, sample_rate: int = SAMPLE_RATE) -> npt.NDArray[np.int16]:
    """The record beep: 1 kHz for 250 ms, with 5 ms ramps so it does not click."""
    return tone(BEEP_HZ, BEEP_SECONDS, level_dbfs, sample_rate=sample_rate, ramp_seconds=0.005)


def silence(seconds: float, *, sample_rate: int = SAMPLE_RATE) -> npt.NDArray[np.int16]:
    """Digital silence, ``seconds`` long."""
    return np.zeros(_samples(seconds, sample_rate), dtype=np.int16)


def white_noise(
    seconds: float,
    level_dbfs: float,
    *,
    seed: int | None = 0,
    sample_rate: int = SAMPLE_RATE,
) -> npt.NDArray[np.int16]:
    """Gaussian white noise of RMS ``level_dbfs`` (line hiss); the same ``seed``, the same noise."""
    rng = np.random.default_rng(seed)
    sigma = FULL_SCALE * math.pow(10.0, level_dbfs / 20.0)
    x = rng.normal(0.0, sigma, _samples(seconds, sample_rate))
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)
