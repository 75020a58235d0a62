"""Is this 40 ms of a call's audio a tone, and at what frequency? Sans-IO.

The callee classifier (:mod:`callhook.media.classify`) hears beeps and fax tones
with it. Each 20 ms frame is looked at together with the one before (a 40 ms
Hann window, zero-padded to 1024 points: 7.8 Hz bins; the window's main lobe is
±50 Hz, so a 40 ms window separates tones 100 Hz apart, which 20 ms would not).
The energy of the strongest peak (±:data:`PEAK_BINS` bins, the main lobe) over
all the energy between :data:`LOW_HZ` and :data:`HIGH_HZ` is the window's
*tonality*: near 1 for a tone on a quiet line, lower for speech, whose energy is
spread over harmonics and formants, and for noise; that of the two strongest
peaks is its *chord* figure (a two-tone beep). Speech does have windows as
tonal as a beep's (a low voice's vowel, one strong harmonic): what tells a beep
is that it stays so, at one frequency, for longer than a voice holds a harmonic
still (:mod:`callhook.media.classify` measures it on real speech).
Below :data:`LOW_HZ` is left out, so mains hum neither makes a tone nor hides one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

SAMPLE_RATE: Final = 8000
#: Samples in one analysis window (two 20 ms frames) and the FFT's length.
WINDOW: Final = 320
FFT: Final = 1024
BIN_HZ: Final = SAMPLE_RATE / FFT
#: The band a tone is looked for in, and measured against (Hz).
LOW_HZ: Final = 200.0
HIGH_HZ: Final = 3400.0
#: Bins either side of a peak that belong to it: the Hann window's main lobe (±50 Hz).
PEAK_BINS: Final = 7
#: A second peak counts (a chord, or two tones of a sequence in one window) when it
#: holds at least this share of the first's energy.
SECOND_PEAK: Final = 0.1

_LOW_BIN: Final = int(LOW_HZ / BIN_HZ)
_HIGH_BIN: Final = int(HIGH_HZ / BIN_HZ) + 1
_HANN: Final = np.hanning(WINDOW)
FULL_SCALE: Final = 32768.0


@dataclass(frozen=True, slots=True)
class Spectrum:
    """What one window held: its level, its tonality and its strongest frequencies."""

    level_dbfs: float
    tonality: float  # the strongest peak's share of the band's energy
    hz: float  # the strongest peak
    chord: float  # the two strongest peaks' share (the first's alone with no second peak)
    second_hz: float | None  # a second peak that counts (a chord), or None


def level_dbfs(samples: npt.NDArray[np.int16] | npt.NDArray[np.float64]) -> float:
    """RMS level of ``samples`` relative to full scale (-120 for digital silence)."""
    if not len(samples):
        return -120.0
    x = samples.astype(np.float64)
    power = float(x @ x) / len(x)
    if power <= 1e-3:
        return -120.0
    return 10.0 * float(np.log10(power / (FULL_SCALE * FULL_SCALE)))


def analyse(window: npt.NDArray[np.int16]) -> Spectrum:
    """The :class:`Spectrum` of a :data:`WINDOW`-sample window."""
    x = window.astype(np.float64)
    level = level_dbfs(x)
    if level <= -100.0:
        return Spectrum(level, 0.0, 0.0, 0.0, None)
    power = np.abs(np.fft.rfft(x * _HANN, FFT)) ** 2
    band = power[_LOW_BIN:_HIGH_BIN]
    total = float(band.sum())
    if total <= 0.0:
        return Spectrum(level, 0.0, 0.0, 0.0, None)
    first = int(np.argmax(band))
    lo, hi = max(0, first - PEAK_BINS), first + PEAK_BINS + 1
    first_energy = float(band[lo:hi].sum())
    rest = band.copy()
    rest[lo:hi] = 0.0
    second = int(np.argmax(rest))
    lo2, hi2 = max(0, second - PEAK_BINS), second + PEAK_BINS + 1
    second_energy = float(rest[lo2:hi2].sum())
    energy = first_energy
    second_hz: float | None = None
    if second_energy >= SECOND_PEAK * first_energy:
        energy += second_energy
        second_hz = _peak_hz(band, second)
    return Spectrum(level, first_energy / total, _peak_hz(band, first), energy / total, second_hz)


def _peak_hz(band: npt.NDArray[np.float64], index: int) -> float:
    """The frequency of the peak at ``index`` of ``band``, between bins (parabolic fit
    on the log powers)."""
    offset = 0.0
    if 0 < index < len(band) - 1:
        a, b, c = (float(np.log(max(v, 1e-12))) for v in band[index - 1 : index + 2])
        denominator = a - 2 * b + c
        if denominator < 0:
            offset = 0.5 * (a - c) / denominator
    return (index + _LOW_BIN + offset) * BIN_HZ
