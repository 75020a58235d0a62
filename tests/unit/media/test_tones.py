"""Tones and test signals (callhook.media.tones)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from callhook.media import tones
from callhook.media.vad import level_dbfs


def spectrum_peaks(x: npt.NDArray[np.int16], count: int) -> list[float]:
    """The ``count`` strongest frequencies (Hz, 1 Hz resolution for 1 s of audio)."""
    spectrum = np.abs(np.fft.rfft(x.astype(np.float64)))
    return sorted(float(i) * 8000 / len(x) for i in np.argsort(spectrum)[-count:])


def test_tone_frequency_level_and_length() -> None:
    x = tones.tone(1000.0, 1.0, -10.0)
    assert x.dtype == np.int16 and len(x) == 8000
    assert level_dbfs(x) == pytest.approx(-10.0, abs=0.02)
    assert spectrum_peaks(x, 1) == [1000.0]
    assert int(np.abs(x).max()) == round(32768 * np.sqrt(2) * 10 ** (-10 / 20))


def test_a_tone_that_would_clip_is_refused() -> None:
    assert np.abs(tones.tone(500.0, 0.1, -3.02)).max() <= 32767
    with pytest.raises(ValueError, match="clip"):
        tones.tone(500.0, 0.1, 0.0)
    with pytest.raises(ValueError, match="clip"):
        tones.dtmf_tone("1", 0.1, -6.0)  # two tones of -6 dBFS peak at 1.0 full scale


def test_negative_durations_are_refused() -> None:
    with pytest.raises(ValueError):
        tones.tone(500.0, -0.1)


def test_ramps_remove_the_click() -> None:
    x = tones.tone(1000.0, 0.1, -10.0, ramp_seconds=0.005)
    assert abs(int(x[0])) < 200 and abs(int(x[-1])) < 200
    assert np.abs(x[40:-40]).max() > 14000


def test_beep() -> None:
    x = tones.beep()
    assert len(x) == 2000  # 250 ms
    assert level_dbfs(x[100:-100]) == pytest.approx(-10.0, abs=0.05)
    assert abs(int(x[0])) < 200


def test_dtmf_keypad() -> None:
    assert tones.dtmf_frequencies("1") == (697.0, 1209.0)
    assert tones.dtmf_frequencies("0") == (941.0, 1336.0)
    assert tones.dtmf_frequencies("#") == (941.0, 1477.0)
    assert tones.dtmf_frequencies("*") == (941.0, 1209.0)
    assert tones.dtmf_frequencies("D") == tones.dtmf_frequencies("d") == (941.0, 1633.0)
    pairs = {tones.dtmf_frequencies(d) for d in "0123456789*#ABCD"}
    assert len(pairs) == 16
    for bad in ("", "E", "12", " "):
        with pytest.raises(ValueError):
            tones.dtmf_frequencies(bad)


def test_dtmf_tone_twist_and_deviation() -> None:
    x = tones.dtmf_tone("5", 1.0, -20.0, twist_db=3.0, deviation=0.01)
    assert spectrum_peaks(x, 2) == [
        pytest.approx(770 * 1.01, abs=1),
        pytest.approx(1336 * 1.01, abs=1),
    ]
    y = tones.dtmf_tone("5", 1.0, -20.0, twist_db=3.0)  # whole cycles in 1 s: exact bins
    spectrum = np.abs(np.fft.rfft(y.astype(np.float64)))
    assert 20 * np.log10(spectrum[1336] / spectrum[770]) == pytest.approx(3.0, abs=0.01)
    assert 20 * np.log10(spectrum[770] / 4000 / 32768) == pytest.approx(-20.0 + 3.01, abs=0.01)


def test_silence_and_noise() -> None:
    assert (tones.silence(0.02) == 0).all() and len(tones.silence(0.02)) == 160
    n = tones.white_noise(2.0, -50.0, seed=3)
    assert level_dbfs(n) == pytest.approx(-50.0, abs=0.1)
    assert (n == tones.white_noise(2.0, -50.0, seed=3)).all()
    assert not (n == tones.white_noise(2.0, -50.0, seed=4)).all()


def test_dbm0() -> None:
    # A full-scale µ-law sine (peak 32636 in 16 bits) is +3.17 dBm0.
    full_scale_sine_dbfs = 20 * np.log10(32636 / np.sqrt(2) / 32768)
    assert tones.dbm0_to_dbfs(3.17) == pytest.approx(full_scale_sine_dbfs, abs=0.05)
    assert tones.dbm0_to_dbfs(-25.0) == pytest.approx(-31.2, abs=0.05)
