"""G.711 µ-law and A-law, table-driven (ITU-T G.711 §3; Table 1/G.711 A-law, Table 2/G.711 µ-law).

Decoding is one look-up in a 256-entry table of int16 values; encoding is one
look-up in a 65536-entry table indexed by the 16-bit sample read as unsigned.
Both work on whole numpy arrays of any shape, so a tick of many calls can be
transcoded in one call (:func:`encode_array`, :func:`decode_array`).

The tables are built at import time by the classic Sun Microsystems reference
algorithm, which is what CPython's ``audioop`` (``lin2ulaw``, ``ulaw2lin``,
``lin2alaw``, ``alaw2lin``) implements; the tests check every one of the 65536
inputs and 256 codes against ``audioop``. 16-bit samples are taken as
left-justified 14-bit (µ-law) or 13-bit (A-law) uniform PCM, G.711's input;
decoded values are the G.711 reconstruction values scaled back to 16 bits
(µ-law ±32124, A-law ±32256).

G.711 §3.6 leaves the coding of inputs that fall exactly on a decision value
to the equipment, and implementations differ there: the ITU-T G.191 software
tools library (STL) takes the one's complement of negative µ-law inputs before
truncating to 14 bits, while the Sun code (so ``audioop`` and this module)
negates; the two give adjacent codes for 508 of the 65536 16-bit inputs, all
negative. Decoding is the same everywhere.
"""

from __future__ import annotations

from typing import Final, Literal

import numpy as np
import numpy.typing as npt

Law = Literal["ulaw", "alaw"]
#: Both laws, in a fixed order.
LAWS: tuple[Law, ...] = ("ulaw", "alaw")

#: The code of silence (a decoded 0 for µ-law, the smallest positive step, +8, for A-law).
SILENCE_CODE: Final[dict[str, int]] = {"ulaw": 0xFF, "alaw": 0xD5}

_SEG_UEND = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_SEG_AEND = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)
_BIAS = 0x84


def _ulaw_decode_table() -> npt.NDArray[np.int16]:
    """Table 2/G.711: the quantized value (decoder output) of each µ-law code."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _BIAS - t, t - _BIAS).astype(np.int16)


def _alaw_decode_table() -> npt.NDArray[np.int16]:
    """Table 1/G.711: the quantized value (decoder output) of each A-law code."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


def _ulaw_encode_table() -> npt.NDArray[np.uint8]:
    """The µ-law code of every 16-bit sample, indexed by the sample as uint16."""
    x = np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16).astype(np.int32)
    v = x >> 2  # 14-bit
    negative = v < 0
    mask = np.where(negative, 0x7F, 0xFF)
    mag = np.where(negative, -v, v) + (_BIAS >> 2)
    seg = np.searchsorted(_SEG_UEND, mag, side="left").astype(np.int32)
    body = (seg << 4) | ((mag >> np.minimum(seg + 1, 31)) & 0x0F)
    code = np.where(seg >= 8, 0x7F, body) ^ mask
    return code.astype(np.uint8)


def _alaw_encode_table() -> npt.NDArray[np.uint8]:
    """The A-law code of every 16-bit sample, indexed by the sample as uint16."""
    x = np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16).astype(np.int32)
    v = x >> 3  # 13-bit
    negative = v < 0
    mask = np.where(negative, 0x55, 0xD5)
    mag = np.where(negative, -v - 1, v)
    seg = np.searchsorted(_SEG_AEND, mag, side="left").astype(np.int32)
    shift = np.where(seg < 2, 1, np.minimum(seg, 31))
    body = (seg << 4) | ((mag >> shift) & 0x0F)
    code = np.where(seg >= 8, 0x7F, body) ^ mask
    return code.astype(np.uint8)


#: Code -> int16 sample (G.711 reconstruction values).
ULAW_DECODE: Final = _ulaw_decode_table()
ALAW_DECODE: Final = _alaw_decode_table()
#: int16 sample viewed as uint16 -> code.
ULAW_ENCODE: Final = _ulaw_encode_table()
ALAW_ENCODE: Final = _alaw_encode_table()

_DECODE: Final = {"ulaw": ULAW_DECODE, "alaw": ALAW_DECODE}
_ENCODE: Final = {"ulaw": ULAW_ENCODE, "alaw": ALAW_ENCODE}


def _int16(samples: npt.NDArray[np.int16]) -> npt.NDArray[np.uint16]:
    if samples.dtype != np.int16:
        raise TypeError(f"G.711 encodes int16 samples, not {samples.dtype}")
    return samples.view(np.uint16)


def encode_array(law: Law, samples: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """G.711 codes (uint8) of ``samples`` (int16, any shape, e.g. ``(calls, 160)``)."""
    return _ENCODE[law][_int16(samples)]


def decode_array(law: Law, codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.int16]:
    """int16 samples of G.711 ``codes`` (uint8, any shape)."""
    return _DECODE[law][codes]


def encode(law: Law, samples: npt.NDArray[np.int16]) -> bytes:
    """The G.711 payload (one byte a sample) of int16 ``samples``."""
    return _ENCODE[law][_int16(samples)].tobytes()


def decode(law: Law, data: bytes | bytearray | memoryview) -> npt.NDArray[np.int16]:
    """int16 samples of a G.711 payload."""
    return _DECODE[law][np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(samples: npt.NDArray[np.int16]) -> bytes:
    """µ-law payload of int16 ``samples`` (Table 2/G.711)."""
    return ULAW_ENCODE[_int16(samples)].tobytes()


def ulaw_decode(data: bytes | bytearray | memoryview) -> npt.NDArray[np.int16]:
    """int16 samples of a µ-law payload (Table 2/G.711)."""
    return ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(samples: npt.NDArray[np.int16]) -> bytes:
    """A-law payload of int16 ``samples`` (Table 1/G.711)."""
    return ALAW_ENCODE[_int16(samples)].tobytes()


def alaw_decode(data: bytes | bytearray | memoryview) -> npt.NDArray[np.int16]:
    """int16 samples of an A-law payload (Table 1/G.711)."""
    return ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def silence(law: Law, samples: int = 1) -> bytes:
    """``samples`` bytes of silence in ``law`` (0xFF µ-law, 0xD5 A-law): ``silence(law, 160)``
    is a 20 ms frame of it."""
    return bytes([SILENCE_CODE[law]]) * samples
