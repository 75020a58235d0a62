"""Bad input, fuzzed: WAV files (prompts to play, recordings a crash left behind).

Property (``bench/fuzz.py --target wav``): a file reads, decodes to 8 kHz int16
samples, or raises WavError; fixing its sizes and ``wavfile.recover`` (plain and
encrypted) raise nothing but WavError.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import TARGETS, check_of, strategy
from callhook.media import wav

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(strategy(TARGETS["wav"], max_size=2000))
def test_fuzz_wav_bytes(data: bytes) -> None:
    check_of("wav")(data)


@FUZZ
@given(
    st.sampled_from([1, 3, 6, 7, 0x10, 0x11, 0x17, 0xFFFE, 2, 0x55]),
    st.integers(0, 9),
    st.sampled_from([0, 1, 4000, 8000, 11025, 48000, 0xFFFFFFFF]),
    st.integers(0, 40),
    st.integers(0, 70),
    st.binary(max_size=300),
)
def test_fuzz_fmt_chunks(
    tag: int, channels: int, rate: int, align: int, bits: int, audio: bytes
) -> None:
    """Every field of a valid header's fmt chunk, any value: the decoders, not the lexer."""
    header = bytearray(wav.g711_header("ulaw", len(audio)))
    struct.pack_into(
        "<HHIIHH", header, 20, tag, channels, rate, rate * align & 0xFFFFFFFF, align, bits
    )
    check_of("wav")(bytes(header) + audio)


def test_a_file_at_1_hz_is_refused_not_blown_up() -> None:
    # Resampled to 8 kHz, 4 kB declared at 1 Hz became 32 million samples (256 MB) in
    # a second and more; a file_to_play of a few MB would take the server's memory.
    header = bytearray(wav.g711_header("ulaw", 4000))
    struct.pack_into("<HHIIHH", header, 20, wav.FORMAT_PCM, 1, 1, 1, 1, 8)
    with pytest.raises(wav.WavError, match="sample rate 1 Hz"):
        wav.decode_to_8k(bytes(header) + bytes(4000))
    assert len(wav.decode_to_8k(wav.g711_file("ulaw", bytes(400), 4000))) == 800
