"""Prompt files of any common WAV kind to 8 kHz mono int16 (callhook.media.wav.decode_to_8k)."""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt
import pytest

from callhook.media import g711, tones, wav
from callhook.media.vad import level_dbfs

KSDATAFORMAT_TAIL = bytes.fromhex("000000001000800000aa00389b71")  # the GUID after the tag


def make_wav(
    tag: int,
    channels: int,
    rate: int,
    bits: int,
    data: bytes,
    *,
    extensible: bool = False,
    extra_chunk: bool = True,
) -> bytes:
    """A WAV file as other tools write them: fmt (plain or extensible), LIST, fact, data."""
    block = channels * bits // 8
    head = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    if extensible:
        sub = struct.pack("<HI", bits, 0) + struct.pack("<H", tag) + KSDATAFORMAT_TAIL
        head = struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * block, block, bits)
        fmt = head + struct.pack("<H", len(sub)) + sub
    elif tag == wav.FORMAT_PCM:
        fmt = head
    else:
        fmt = head + struct.pack("<H", 0)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if extra_chunk:
        info = b"INFOISFT\x06\x00\x00\x00tests\x00"
        chunks += b"LIST" + struct.pack("<I", len(info)) + info
    if tag != wav.FORMAT_PCM:
        chunks += b"fact" + struct.pack("<II", 4, len(data) // max(block, 1))
    chunks += b"data" + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def sine(
    freq: float, seconds: float, rate: int, level_dbfs: float = -10.0
) -> npt.NDArray[np.float64]:
    """A float sine in [-1, 1) at ``level_dbfs`` RMS (the tones/vad scale)."""
    n = round(seconds * rate)
    amplitude = np.sqrt(2) * 10 ** (level_dbfs / 20)
    x: npt.NDArray[np.float64] = amplitude * np.sin(2 * np.pi * freq * np.arange(n) / rate)
    return x


def pcm16(x: npt.NDArray[np.float64]) -> bytes:
    return np.clip(np.rint(x * 32768), -32768, 32767).astype("<i2").tobytes()


def peak_hz(x: npt.NDArray[np.int16]) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * 8000 / len(x))


SAMPLES = (np.sin(np.arange(800) * 0.05) * 20000).astype(np.int16)
SAMPLES[:4] = [0, 32767, -32768, -1]


# ----------------------------------------------------------------------------- 8 kHz, exact


def test_pcm16_mono_8k_is_returned_exactly() -> None:
    out = wav.decode_to_8k(make_wav(1, 1, 8000, 16, SAMPLES.astype("<i2").tobytes()))
    assert out.dtype == np.int16 and (out == SAMPLES).all()


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_g711_files_decode_exactly(law: g711.Law) -> None:
    codes = g711.encode(law, SAMPLES)
    out = wav.decode_to_8k(wav.g711_file(law, codes))
    assert (out == g711.decode(law, codes)).all()


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_g711_stereo_and_resampled(law: g711.Law) -> None:
    tag = wav.FORMAT_ULAW if law == "ulaw" else wav.FORMAT_ALAW
    x = pcm16(sine(1000, 0.5, 16000))
    codes = g711.encode(law, np.frombuffer(x, "<i2").astype(np.int16))
    stereo = bytes(b for c in codes for b in (c, c))
    out = wav.decode_to_8k(make_wav(tag, 2, 16000, 8, stereo))
    assert len(out) == 4000
    assert level_dbfs(out[400:-400]) == pytest.approx(-10.0, abs=0.2)


def test_pcm8_is_unsigned() -> None:
    data = bytes([128, 255, 0, 192, 64])
    out = wav.decode_to_8k(make_wav(1, 1, 8000, 8, data))
    assert out.tolist() == [0, 127 * 256, -32768, 64 * 256, -64 * 256]


def test_pcm24() -> None:
    wide = SAMPLES.astype(np.int32) * 256 + 100  # the low byte rounds away
    data = b"".join(struct.pack("<i", int(v))[:3] for v in wide)
    out = wav.decode_to_8k(make_wav(1, 1, 8000, 24, data))
    assert (out == SAMPLES).all()


def test_pcm32() -> None:
    data = (SAMPLES.astype(np.int32) * 65536).astype("<i4").tobytes()
    assert (wav.decode_to_8k(make_wav(1, 1, 8000, 32, data)) == SAMPLES).all()


@pytest.mark.parametrize("dtype", ["<f4", "<f8"])
def test_ieee_float(dtype: str) -> None:
    data = (SAMPLES.astype(np.float64) / 32768).astype(dtype).tobytes()
    bits = 32 if dtype == "<f4" else 64
    assert (wav.decode_to_8k(make_wav(3, 1, 8000, bits, data)) == SAMPLES).all()


def test_float_out_of_range_is_clipped_and_nan_is_silence() -> None:
    data = np.array([2.0, -3.0, np.nan, np.inf, 0.5], "<f4").tobytes()
    out = wav.decode_to_8k(make_wav(3, 1, 8000, 32, data))
    assert out.tolist() == [32767, -32768, 0, 32767, 16384]


@pytest.mark.parametrize(("tag", "bits"), [(1, 16), (1, 24), (3, 32), (7, 8)])
def test_wave_format_extensible(tag: int, bits: int) -> None:
    x = SAMPLES.astype(np.float64) / 32768
    if tag == 1 and bits == 16:
        data = SAMPLES.astype("<i2").tobytes()
    elif tag == 1:
        data = b"".join(struct.pack("<i", int(v) * 256)[:3] for v in SAMPLES)
    elif tag == 3:
        data = x.astype("<f4").tobytes()
    else:
        data = g711.ulaw_encode(SAMPLES)
    file = make_wav(tag, 1, 8000, bits, data, extensible=True)
    info = wav.read_info(file)
    assert info.format_tag == wav.FORMAT_EXTENSIBLE and info.encoding == tag
    expected = SAMPLES if tag != 7 else g711.ulaw_decode(data)
    assert (wav.decode_to_8k(file) == expected).all()


# ----------------------------------------------------------------------------- channels


def test_stereo_is_averaged() -> None:
    left = SAMPLES[4:].astype(np.int32)  # not -32768, whose negation does not fit
    for right, expected in [(left, left), (-left, 0 * left), (0 * left, left / 2)]:
        frames = np.stack([left, right], axis=1).astype("<i2").tobytes()
        out = wav.decode_to_8k(make_wav(1, 2, 8000, 16, frames))
        assert np.abs(out - np.rint(expected)).max() <= 1


def test_six_channels_are_averaged_too() -> None:
    frames = np.repeat(SAMPLES[:, None], 6, axis=1).astype("<i2").tobytes()
    assert (wav.decode_to_8k(make_wav(1, 6, 8000, 16, frames)) == SAMPLES).all()


# ----------------------------------------------------------------------------- resampling


@pytest.mark.parametrize("rate", [11025, 16000, 22050, 44100, 48000])
def test_other_rates_are_resampled(rate: int) -> None:
    x = sine(1000, 1.0, rate, -12.0)
    out = wav.decode_to_8k(make_wav(1, 1, rate, 16, pcm16(x)))
    assert abs(len(out) - 8000) <= 1
    assert level_dbfs(out[800:-800]) == pytest.approx(-12.0, abs=0.1)
    assert peak_hz(out) == pytest.approx(1000, abs=2)


@pytest.mark.parametrize("freq", [3000.0, 3400.0])
def test_the_telephone_band_passes(freq: float) -> None:
    out = wav.decode_to_8k(make_wav(1, 1, 44100, 16, pcm16(sine(freq, 1.0, 44100, -12.0))))
    assert level_dbfs(out[800:-800]) == pytest.approx(-12.0, abs=0.5)


@pytest.mark.parametrize(("rate", "freq"), [(44100, 5000.0), (44100, 7000.0), (16000, 4500.0)])
def test_no_aliasing_from_above_4_khz(rate: int, freq: float) -> None:
    # Naive decimation would fold 5 kHz to 3 kHz, 7 kHz to 1 kHz, 4.5 kHz to 3.5 kHz at the
    # same level as the input (-12 dBFS); the filter must remove them.
    out = wav.decode_to_8k(make_wav(1, 1, rate, 16, pcm16(sine(freq, 1.0, rate, -12.0))))
    assert level_dbfs(out[800:-800]) < -12.0 - 50.0


def test_speech_band_survives_a_round_trip_through_48k() -> None:
    original = tones.sines([(300.0, -20.0), (1200.0, -20.0), (3000.0, -20.0)], 1.0)
    up = np.repeat(original.astype(np.float64), 6) / 32768  # crude 48 kHz copy, images above 4k
    out = wav.decode_to_8k(make_wav(1, 1, 48000, 16, pcm16(up)))
    assert abs(len(out) - 8000) <= 1
    assert level_dbfs(out[800:-800]) == pytest.approx(level_dbfs(original), abs=1.5)


# ----------------------------------------------------------------------------- odd files, errors


def test_a_truncated_last_sample_is_dropped() -> None:
    data = SAMPLES[:10].astype("<i2").tobytes() + b"\x01"
    assert (wav.decode_to_8k(make_wav(1, 1, 8000, 16, data)) == SAMPLES[:10]).all()
    stereo = np.repeat(SAMPLES[:10], 2).astype("<i2").tobytes() + b"\x01\x02"
    assert (wav.decode_to_8k(make_wav(1, 2, 44100, 16, stereo)).size) in (1, 2)


@pytest.mark.parametrize("rate", [8000, 44100])
def test_an_empty_file_is_empty(rate: int) -> None:
    out = wav.decode_to_8k(make_wav(1, 1, rate, 16, b""))
    assert out.dtype == np.int16 and out.size == 0


@pytest.mark.parametrize(
    ("tag", "bits", "message"),
    [
        (0x0002, 4, "Microsoft ADPCM"),
        (0x0040, 4, "G.721 ADPCM"),
        (0x0031, 0, "GSM 6.10"),
        (0x0055, 0, "MP3"),
        (0x1234, 16, "unknown encoding"),
        (1, 12, "PCM sample size: 12"),
        (3, 16, "float sample size: 16"),
        (6, 16, "G.711 WAV with 16 bits"),
    ],
)
def test_unsupported_files_say_why(tag: int, bits: int, message: str) -> None:
    with pytest.raises(wav.WavError, match=message):
        wav.decode_to_8k(make_wav(tag, 1, 8000, bits, b"\x00" * 64))


def test_unsupported_extensible_sub_format_says_why() -> None:
    with pytest.raises(wav.WavError, match=r"Microsoft ADPCM \(format tag 0x0002\)"):
        wav.decode_to_8k(make_wav(0x0002, 1, 8000, 4, b"\x00" * 64, extensible=True))


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "not a RIFF/WAVE"), (b"OggS" + b"\x00" * 40, "not a RIFF/WAVE")],
)
def test_not_wav_at_all(data: bytes, message: str) -> None:
    with pytest.raises(wav.WavError, match=message):
        wav.decode_to_8k(data)
