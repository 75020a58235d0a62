"""G.711 µ-law and A-law (callhook.media.g711), bit-exact against the stdlib's audioop."""

from __future__ import annotations

import warnings
from types import ModuleType

import numpy as np
import pytest

from callhook.media import g711

ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


@pytest.fixture(scope="module")
def audioop() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module: ModuleType = pytest.importorskip("audioop")  # deprecated in 3.11, gone in 3.13
    return module


def test_ulaw_encode_matches_audioop_for_every_sample(audioop: ModuleType) -> None:
    assert g711.ulaw_encode(ALL_SAMPLES) == audioop.lin2ulaw(ALL_SAMPLES.tobytes(), 2)


def test_alaw_encode_matches_audioop_for_every_sample(audioop: ModuleType) -> None:
    assert g711.alaw_encode(ALL_SAMPLES) == audioop.lin2alaw(ALL_SAMPLES.tobytes(), 2)


def test_ulaw_decode_matches_audioop_for_every_code(audioop: ModuleType) -> None:
    assert g711.ulaw_decode(ALL_CODES).tobytes() == audioop.ulaw2lin(ALL_CODES, 2)


def test_alaw_decode_matches_audioop_for_every_code(audioop: ModuleType) -> None:
    assert g711.alaw_decode(ALL_CODES).tobytes() == audioop.alaw2lin(ALL_CODES, 2)


def test_known_values_from_the_tables() -> None:
    # Table 2/G.711: 0xFF and 0x7F are +0 and -0; 0x80 / 0x00 the largest magnitudes (8031 x 4).
    assert g711.ulaw_decode(b"\xff\x7f\x80\x00").tolist() == [0, 0, 32124, -32124]
    # Table 1/G.711: codes are sent with even bits inverted; 0xD5 / 0x55 are +1 / -1 step (8).
    assert g711.alaw_decode(b"\xd5\x55\xaa\x2a").tolist() == [8, -8, 32256, -32256]
    assert g711.ulaw_encode(np.array([0, 32767, -32768], np.int16)) == b"\xff\x80\x00"
    assert g711.alaw_encode(np.array([0, 32767, -32768], np.int16)) == b"\xd5\xaa\x2a"


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_decoding_then_encoding_gives_the_code_back(law: g711.Law) -> None:
    codes = np.arange(256, dtype=np.uint8)
    samples = g711.decode_array(law, codes)
    again = g711.encode_array(law, samples)
    if law == "ulaw":
        # -0 (0x7F) decodes to 0, which encodes as +0 (0xFF); every other code is its own.
        assert (again == codes).sum() == 255 and again[0x7F] == 0xFF
    else:
        assert (again == codes).all()


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_encoding_is_monotonic_and_error_is_bounded(law: g711.Law) -> None:
    decoded = g711.decode(law, g711.encode(law, ALL_SAMPLES)).astype(np.int64)
    assert (np.diff(decoded) >= 0).all()
    x = ALL_SAMPLES.astype(np.int64)
    # The error never exceeds half the widest step (1024 / 2 for µ-law top segment, 1024 for A).
    assert np.abs(decoded - x).max() <= 1024
    # Near zero the steps are small: 8 (µ-law: 2 steps of 4) and 16 (A-law).
    small = np.abs(x) < 32
    assert np.abs(decoded - x)[small].max() <= 16


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_arrays_of_any_shape_and_bytes_agree(law: g711.Law) -> None:
    rng = np.random.default_rng(7)
    frames = rng.integers(-32768, 32768, size=(5, 160)).astype(np.int16)
    codes = g711.encode_array(law, frames)
    assert codes.shape == (5, 160) and codes.dtype == np.uint8
    assert codes.tobytes() == g711.encode(law, frames.ravel())
    decoded = g711.decode_array(law, codes)
    assert decoded.shape == (5, 160) and decoded.dtype == np.int16
    assert (decoded.ravel() == g711.decode(law, codes.tobytes())).all()


def test_generic_and_law_specific_functions_agree() -> None:
    x = np.array([-1000, -1, 0, 1, 1000], np.int16)
    assert g711.encode("ulaw", x) == g711.ulaw_encode(x)
    assert g711.encode("alaw", x) == g711.alaw_encode(x)
    data = bytes(range(0, 256, 17))
    assert (g711.decode("ulaw", data) == g711.ulaw_decode(data)).all()
    assert (g711.decode("alaw", bytearray(data)) == g711.alaw_decode(memoryview(data))).all()


def test_silence() -> None:
    assert g711.silence("ulaw") == b"\xff"
    assert g711.silence("alaw", 160) == b"\xd5" * 160
    assert g711.ulaw_decode(g711.silence("ulaw", 3)).tolist() == [0, 0, 0]
    assert g711.alaw_decode(g711.silence("alaw")).tolist() == [8]  # A-law has no zero code


def test_encode_refuses_other_dtypes() -> None:
    with pytest.raises(TypeError, match="int16"):
        g711.ulaw_encode(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="int16"):
        g711.encode_array("alaw", np.zeros(4, np.float64))
