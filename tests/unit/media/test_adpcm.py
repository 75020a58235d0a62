"""IMA and OKI ADPCM prompt files (callhook.media.adpcm, and wav.decode_to_8k reading them).

``tests/data/adpcm/`` holds files encoded by SoX 14.4.2 (and one OKI file by spandsp
0.0.6, which follows Dialogic's algorithm) with reference decodings: ``<name>.sox.wav``
by SoX, ``<name>.spandsp.wav`` by spandsp; its README says how they were made.

IMA ADPCM matches SoX sample for sample: the IMA recommendation fixes every step of
the integer arithmetic (each term of the difference rounded down, the predictor
clamped to int16), so there is no room for a ±1 LSB difference and none is allowed.
OKI ADPCM works on 12-bit samples, so every output is a multiple of 16 and the
tolerance its scaling could excuse is one 12-bit step (±16); none is needed: with
Dialogic's rounding (the default) it matches spandsp exactly, with SoX's rounding SoX
exactly. The two roundings drift apart (see callhook.media.adpcm), which the tests
measure too.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soxr

from callhook.media import adpcm, wav

DATA = Path(__file__).resolve().parents[2] / "data" / "adpcm"
SPEECH = Path(__file__).resolve().parents[2] / "data" / "speech"

#: Offsets in the fixtures' fmt chunk (it starts at byte 12, its body at 20).
TAG, CHANNELS, RATE, ALIGN, BITS, SAMPLES_PER_BLOCK = 20, 22, 24, 32, 34, 38


def file(name: str) -> bytes:
    return (DATA / name).read_bytes()


def payload(data: bytes) -> bytes:
    info = wav.read_info(data)
    return data[info.data_offset : info.data_offset + info.data_length]


def ref(name: str, decoder: str = "sox") -> npt.NDArray[np.int16]:
    """Fixture ``name`` as ``decoder`` (sox, spandsp) decodes it, shape (frames, channels)."""
    data = file(name.replace(".wav", f".{decoder}.wav"))
    info = wav.read_info(data)
    assert info.encoding == wav.FORMAT_PCM and info.bits_per_sample == 16
    return np.frombuffer(payload(data), "<i2").reshape(-1, info.channels).astype(np.int16)


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def oki_wav(codes: bytes, *, tag: int = 0x0010, rate: int = 8000, cb_size: bool = True) -> bytes:
    """An OKI ADPCM WAV header (see the README): 4 bits, nBlockAlign 1, no fact chunk."""
    fmt = struct.pack("<HHIIHH", tag, 1, rate, rate // 2, 1, 4)
    if cb_size:
        fmt += struct.pack("<HH", 2, 0)  # cbSize 2, wPole 0 (OKIADPCMWAVEFORMAT)
    body = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(codes)) + codes + b"\x00" * (len(codes) & 1)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def snr_db(original: npt.NDArray[np.int16], x: npt.NDArray[np.int16]) -> float:
    o = original.astype(np.float64)
    return float(10 * np.log10(np.sum(o**2) / np.sum((o - x) ** 2)))


def spandsp(name: str) -> npt.NDArray[np.int16]:
    """spandsp's decoding of OKI fixture ``name`` (Dialogic's rounding), mono."""
    return ref(name, "spandsp")[:, 0]


IMA_MONO = ["tone_ima.wav", "speech_ima.wav"]
IMA_ALL = [*IMA_MONO, "stereo_ima.wav"]
OKI = ["tone_oki.wav", "speech_oki.wav", "speech_oki_spandsp.wav"]


# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize("name", IMA_ALL)
def test_ima_matches_sox_sample_for_sample(name: str) -> None:
    data = file(name)
    info = wav.read_info(data)
    assert info.encoding == wav.FORMAT_IMA_ADPCM and info.block_align == 256 * info.channels
    assert info.samples_per_block == 505  # from the fmt extension (cbSize 2)
    out = adpcm.ima_decode(payload(data), info.channels, info.block_align, 505)
    expected = ref(name)  # SoX decodes the padding of the last block too: 505 × blocks
    assert out.dtype == np.int16 and out.shape == expected.shape
    assert (out == expected).all()


@pytest.mark.parametrize("name", OKI)
@pytest.mark.parametrize("rounding", ["dialogic", "sox"])
def test_oki_matches_its_reference_sample_for_sample(
    name: str, rounding: adpcm.OkiRounding
) -> None:
    data = file(name)
    info = wav.read_info(data)
    assert (info.format_tag, info.bits_per_sample, info.block_align) == (0x0010, 4, 1)
    out = adpcm.oki_decode(payload(data), rounding)
    expected = ref(name)[:, 0] if rounding == "sox" else spandsp(name)
    assert out.dtype == np.int16 and out.shape == expected.shape
    assert (out % 16 == 0).all()  # 12-bit samples scaled by << 4
    assert np.abs(out.astype(np.int32) - expected).max() == 0  # within ±16: exactly, in fact


def test_oki_roundings_differ_as_in_dialogics_example() -> None:
    """Step 55, magnitude 7: 55 + 27 + 13 + 6 = 101 by terms, 15 * 55 >> 3 = 103 at once."""
    codes = bytes([0x75, 0x40, 0x70])  # step index 0 → 8 → 12 → 14 → 13 (step 55), then 7
    dialogic, once = adpcm.oki_decode(codes), adpcm.oki_decode(codes, "sox")
    assert (dialogic[:5] // 16).tolist() == [30, 76, 132, 139, 240]
    assert (once[:5] // 16).tolist() == [30, 76, 132, 139, 242]


def test_each_oki_rounding_suits_its_own_encoder() -> None:
    """Decoded with the other rounding, a file drifts: the numbers the module docstring gives."""
    original = speech_original()
    cases: list[tuple[str, adpcm.OkiRounding, adpcm.OkiRounding]] = [
        ("speech_oki.wav", "sox", "dialogic"),  # encoded by SoX
        ("speech_oki_spandsp.wav", "dialogic", "sox"),  # encoded by spandsp
    ]
    for name, encoders, other_rule in cases:
        raw = payload(file(name))
        own, other = adpcm.oki_decode(raw, encoders), adpcm.oki_decode(raw, other_rule)
        assert snr_db(original, own) > 20 and snr_db(original, own) - snr_db(original, other) > 2
        assert 0 < np.abs(own.astype(np.int32) - other).max() <= 36 * 16


@pytest.mark.parametrize("name", IMA_MONO + OKI)
def test_decode_to_8k_gives_the_decoding_up_to_the_fact_count(name: str) -> None:
    data = file(name)
    info = wav.read_info(data)
    assert info.fact_samples is not None
    out = wav.decode_to_8k(data)
    assert out.dtype == np.int16 and out.flags.c_contiguous
    expected = spandsp(name) if "oki" in name else ref(name)[:, 0]  # OKI: Dialogic's rounding
    assert (out == expected[: info.fact_samples]).all()
    assert info.frames == len(out) and info.seconds == len(out) / 8000


def speech_original() -> npt.NDArray[np.int16]:
    """The speech the fixtures encode: two FSDD clips, one after the other."""
    clips = [
        wav.decode_to_8k((SPEECH / n).read_bytes()) for n in ("6_jackson_6.wav", "1_nicolas_11.wav")
    ]
    return np.concatenate(clips)


def test_the_decodings_sound_like_what_was_encoded() -> None:
    """A check on the references themselves: the speech and the tone are there."""
    original = speech_original()
    ima = wav.decode_to_8k(file("speech_ima.wav"))
    oki = wav.decode_to_8k(file("speech_oki_spandsp.wav"))
    assert len(ima) == len(oki) == len(original) == 9054
    assert snr_db(original, ima) > 20 and snr_db(original, oki) > 20
    for name in ("tone_ima.wav", "tone_oki.wav"):
        tone = wav.decode_to_8k(file(name))
        spectrum = np.abs(np.fft.rfft(tone * np.hanning(len(tone))))
        assert np.argmax(spectrum) * 8000 / len(tone) == pytest.approx(440, abs=2)


# ----------------------------------------------------------------------------- IMA blocks


def test_every_block_starts_at_its_header_sample() -> None:
    raw = payload(file("tone_ima.wav"))
    out = adpcm.ima_decode(raw, 1, 256, 505)[:, 0]
    assert len(raw) == 16 * 256 and len(out) == 16 * 505
    for k in range(16):
        assert out[505 * k] == struct.unpack_from("<h", raw, 256 * k)[0]


@pytest.mark.parametrize(
    ("cut", "frames"),
    [
        (3 * 256, 3 * 505),  # whole blocks
        (3 * 256 + 2, 3 * 505),  # half a block header: nothing of that block
        (3 * 256 + 4, 3 * 505 + 1),  # a header alone: its sample
        (3 * 256 + 5, 3 * 505 + 3),  # and one byte: two more
        (3 * 256 + 4 + 100, 3 * 505 + 201),
        (15 * 256 + 255, 15 * 505 + 503),
        (1, 0),
    ],
)
def test_a_partial_last_block_decodes_as_far_as_it_goes(cut: int, frames: int) -> None:
    raw = payload(file("tone_ima.wav"))
    out = adpcm.ima_decode(raw[:cut], 1, 256, 505)
    assert adpcm.ima_frames(cut, 1, 256, 505) == frames
    assert out.shape == (frames, 1)
    assert (out[:, 0] == ref("tone_ima.wav")[:frames, 0]).all()


def test_stereo_channels_are_each_channels_own_blocks() -> None:
    """stereo_ima.wav interleaves tone_ima's blocks (left) and speech_ima's (right)."""
    out = adpcm.ima_decode(payload(file("stereo_ima.wav")), 2, 512, 505)
    assert (out[:, 0] == ref("tone_ima.wav")[:8080, 0]).all()
    assert (out[:, 1] == ref("speech_ima.wav")[:8080, 0]).all()


@pytest.mark.parametrize(
    ("cut", "frames"),
    [
        (512 + 4, 505),  # the left header only: both channels need theirs
        (512 + 8, 506),
        (512 + 8 + 4, 506),  # the left word of eight samples, not yet the right one
        (512 + 8 + 6, 510),  # half the right word
        (512 + 8 + 8, 514),
        (512 + 8 + 3 * 8 + 7, 505 + 1 + 24 + 6),
    ],
)
def test_a_partial_stereo_block_stops_where_either_channel_does(cut: int, frames: int) -> None:
    raw = payload(file("stereo_ima.wav"))
    out = adpcm.ima_decode(raw[:cut], 2, 512, 505)
    assert out.shape == (frames, 2)
    assert (out == ref("stereo_ima.wav")[:frames]).all()


def test_samples_per_block_defaults_to_what_a_block_holds() -> None:
    raw = payload(file("tone_ima.wav"))
    assert adpcm.ima_samples_per_block(1, 256) == 505
    assert adpcm.ima_samples_per_block(2, 512) == 505
    assert adpcm.ima_samples_per_block(1, 256, 200) == 200
    assert (adpcm.ima_decode(raw, 1, 256)[:, 0] == ref("tone_ima.wav")[:, 0]).all()
    # A header without the extension (cbSize 0) reads the same.
    data = file("tone_ima.wav")
    plain = patched(patched(data, SAMPLES_PER_BLOCK, "<H", 0), 36, "<H", 0)
    assert wav.read_info(plain).samples_per_block == 0
    assert (wav.decode_to_8k(plain) == wav.decode_to_8k(data)).all()
    # Fewer declared samples than fit: each block stops there.
    short = adpcm.ima_decode(raw, 1, 256, 200)[:, 0]
    assert len(short) == 16 * 200
    assert (short.reshape(16, 200) == ref("tone_ima.wav")[:, 0].reshape(16, 505)[:, :200]).all()


def test_ima_in_wave_format_extensible() -> None:
    """Tag 0xFFFE with the IMA ADPCM sub-format GUID: samples per block from nBlockAlign."""
    raw = payload(file("tone_ima.wav"))
    guid = struct.pack("<H", 0x0011) + bytes.fromhex("000000001000800000aa00389b71")
    fmt = struct.pack("<HHIIHHHHI", 0xFFFE, 1, 8000, 4055, 256, 4, 22, 505, 4) + guid
    body = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(raw)) + raw
    data = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body
    info = wav.read_info(data)
    assert info.encoding == wav.FORMAT_IMA_ADPCM and info.samples_per_block == 0
    assert (wav.decode_to_8k(data) == ref("tone_ima.wav")[:, 0]).all()  # no fact: all 8080


def test_the_predictor_and_step_index_are_clamped() -> None:
    # Start at the top, step index 200 (taken as 88): +7 nibbles stay at 32767, -7 fall fast.
    block = struct.pack("<hBB", 32767, 200, 0) + bytes([0x77] * 4) + bytes([0xFF] * 4)
    out = adpcm.ima_decode(block, 1, 12)[:, 0]
    assert out.tolist()[:9] == [32767] * 9
    assert out[-1] == -32768
    # OKI: a run of +7 saturates at 2047 << 4, a run of -7 at -2048 << 4.
    assert adpcm.oki_decode(bytes([0x77] * 40))[-1] == 32752
    assert adpcm.oki_decode(bytes([0xFF] * 40))[-1] == -32768


def test_tables() -> None:
    assert len(adpcm.IMA_STEPS) == 89 and adpcm.IMA_STEPS[0] == 7 and adpcm.IMA_STEPS[-1] == 32767
    assert len(adpcm.OKI_STEPS) == 49 and adpcm.OKI_STEPS[0] == 16 and adpcm.OKI_STEPS[-1] == 1552
    assert adpcm.INDEX_ADJUST == (-1, -1, -1, -1, 2, 4, 6, 8)


# ----------------------------------------------------------------------------- OKI in WAV


def test_oki_nibbles_are_high_first_from_silence() -> None:
    # From predictor 0 and step 16: +0 adds 16/8 = 2, then -1 takes 16/8 + 16/4 = 6: -4.
    assert (adpcm.oki_decode(bytes([0x09])) == np.array([2, -4]) * 16).all()


@pytest.mark.parametrize("tag", [0x0010, 0x0017])
@pytest.mark.parametrize("cb_size", [True, False])
def test_oki_wav_headers_as_dialogic_writes_them(tag: int, cb_size: bool) -> None:
    codes = payload(file("speech_oki.wav"))
    out = wav.decode_to_8k(oki_wav(codes, tag=tag, cb_size=cb_size))
    assert (out == spandsp("speech_oki.wav")).all()


# ----------------------------------------------------------------------------- other rates


@pytest.mark.parametrize(("name", "rate"), [("speech_ima.wav", 11025), ("speech_oki.wav", 6000)])
def test_other_rates_are_resampled_to_8k(name: str, rate: int) -> None:
    data = patched(file(name), RATE, "<I", rate)
    decoded = (spandsp(name) if "oki" in name else ref(name)[:, 0])[: wav.read_info(data).frames]
    out = wav.decode_to_8k(data)
    expected = soxr.resample(decoded / 32768.0, rate, 8000, quality="HQ")
    assert len(out) == len(expected) == round(len(decoded) * 8000 / rate)
    assert np.abs(out - np.rint(expected * 32768)).max() <= 1


def test_stereo_ima_is_averaged() -> None:
    both = ref("stereo_ima.wav")[:8000].astype(np.int32)
    out = wav.decode_to_8k(file("stereo_ima.wav"))
    assert len(out) == 8000  # the fact chunk's count
    assert np.abs(out - (both[:, 0] + both[:, 1]) / 2).max() <= 0.5


# ----------------------------------------------------------------------------- bad files


@pytest.mark.parametrize("name", ["speech_ima.wav", "stereo_ima.wav", "speech_oki.wav"])
def test_a_truncated_file_decodes_what_is_there(name: str) -> None:
    data = file(name)
    info = wav.read_info(data)
    decoded = ref(name, "spandsp" if "oki" in name else "sox")
    for cut in range(info.data_offset, len(data), 97):
        out = wav.decode_to_8k(data[:cut])
        frames = wav.read_info(data[:cut]).frames
        assert len(out) == frames <= len(decoded)
        assert (np.abs(out - decoded[:frames].mean(axis=1)) <= 0.5).all()  # stereo: averaged
    assert len(wav.decode_to_8k(data[: info.data_offset])) == 0


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (ALIGN, "<H", 0, r"IMA ADPCM block align 0 is smaller than the block header \(4 bytes"),
        (ALIGN, "<H", 3, "block align 3 is smaller"),
        (SAMPLES_PER_BLOCK, "<H", 1017, "says 1017 samples per block, but blocks of 256 bytes"),
        (BITS, "<H", 3, "IMA ADPCM WAV with 3 bits per sample"),
        (CHANNELS, "<H", 2, "says 505 samples per block, but blocks of 256 bytes hold at most 249"),
        (CHANNELS, "<H", 3, "block align 256 does not hold whole 4-byte words for each of 3"),
        (CHANNELS, "<H", 65, r"256 is smaller than the block header \(260 bytes for 65"),
        (CHANNELS, "<H", 0, "bad fmt chunk: 0 channels"),
    ],
)
def test_a_corrupt_ima_header_says_what_is_wrong(
    offset: int, fmt: str, value: int, message: str
) -> None:
    data = patched(file("tone_ima.wav"), offset, fmt, value)
    with pytest.raises(wav.WavError, match=message):
        wav.decode_to_8k(data)


def test_a_corrupt_header_has_no_duration_and_fails_to_decode() -> None:
    data = patched(file("tone_ima.wav"), ALIGN, "<H", 2)
    assert wav.read_info(data).seconds == 0  # for prompt timers: nothing to play
    with pytest.raises(wav.WavError, match="block align 2"):
        wav.decode_to_8k(data)
    stereo = patched(file("stereo_ima.wav"), ALIGN, "<H", 516)
    with pytest.raises(wav.WavError, match="whole 4-byte words for each of 2 channels"):
        wav.decode_to_8k(stereo)


def test_a_cut_fmt_extension_is_a_short_fmt_chunk() -> None:
    data = file("tone_ima.wav")
    with pytest.raises(wav.WavError, match="fmt chunk too short"):
        wav.read_info(data[:38])  # the fmt chunk stops before wSamplesPerBlock


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (CHANNELS, 2, "OKI ADPCM WAV with 2 channels"),
        (BITS, 3, "OKI ADPCM WAV with 3 bits per sample"),
        (TAG, 0x0002, r"Microsoft ADPCM \(format tag 0x0002\)"),
    ],
)
def test_a_corrupt_oki_header_says_what_is_wrong(offset: int, value: int, message: str) -> None:
    with pytest.raises(wav.WavError, match=message):
        wav.decode_to_8k(patched(file("tone_oki.wav"), offset, "<H", value))


def test_read_info_of_a_header_alone() -> None:
    """What prompt timers do: the first bytes and the file's size."""
    for name, seconds in [("speech_ima.wav", 9054 / 8000), ("tone_oki.wav", 1.0)]:
        data = file(name)
        info = wav.read_info(data[:100], len(data))
        assert info.seconds == seconds


def test_a_header_cut_inside_the_fmt_extension_is_a_wav_error() -> None:
    # fmt says 18 bytes (cbSize follows) but the file ends after 16: a clear WavError,
    # never struct.error (which would end a whole call as an internal error).
    data = b"RIFF" + struct.pack("<I", 28) + b"WAVE" + b"fmt " + struct.pack("<I", 18)
    data += struct.pack("<HHIIHH", 0x11, 1, 8000, 4000, 256, 4)
    with pytest.raises(wav.WavError):
        wav.read_info(data)
    with pytest.raises(wav.WavError):
        wav.decode_to_8k(data)
