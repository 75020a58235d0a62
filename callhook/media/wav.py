"""WAV files: the RIFF header of G.711 and PCM files, read and written. Pure (bytes in, bytes out).

Recordings are 8 kHz mono WAV with format tag 6 (A-law) or 7 (µ-law)
(DESIGN.md §1.5). G.711 WAVs carry a ``fact`` chunk (the sample count), as
the WAVE format for non-PCM data requires.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FORMAT_PCM = 1
FORMAT_ALAW = 6
FORMAT_ULAW = 7

#: The encoding of silence in each G.711 law.
SILENCE = {"alaw": 0xD5, "ulaw": 0xFF}


class WavError(ValueError):
    """Not a WAV file callhook can read, and why."""


@dataclass(frozen=True)
class WavInfo:
    """What the header says, and where the samples are."""

    format_tag: int
    channels: int
    sample_rate: int
    bits_per_sample: int
    data_offset: int
    data_length: int

    @property
    def frame_bytes(self) -> int:
        return self.channels * max(1, self.bits_per_sample // 8)

    @property
    def seconds(self) -> float:
        return self.data_length / self.frame_bytes / self.sample_rate


def g711_header(law: str, samples: int, sample_rate: int = 8000) -> bytes:
    """A complete header (RIFF, fmt with cbSize, fact, data) for ``samples`` G.711 bytes."""
    tag = FORMAT_ALAW if law == "alaw" else FORMAT_ULAW
    fmt = struct.pack("<HHIIHHH", tag, 1, sample_rate, sample_rate, 1, 8, 0)
    fact = struct.pack("<I", samples)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"fact"
        + struct.pack("<I", len(fact))
        + fact
        + b"data"
        + struct.pack("<I", samples)
    )
    return b"RIFF" + struct.pack("<I", len(body) + samples + (samples & 1)) + body


def g711_file(law: str, samples: bytes, sample_rate: int = 8000) -> bytes:
    """A whole G.711 WAV file holding ``samples``."""
    pad = b"\x00" if len(samples) & 1 else b""
    return g711_header(law, len(samples), sample_rate) + samples + pad


def read_info(data: bytes, file_size: int | None = None) -> WavInfo:
    """Parse the header of a WAV file from its first bytes ``data``.

    ``data`` must reach at least the start of the data chunk. The data length
    is the one the header declares, cut to what the file holds: ``file_size``
    when given (a header read on its own), else ``len(data)`` (a whole file).
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError("not a RIFF/WAVE file")
    pos = 12
    fmt: tuple[int, int, int, int] | None = None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise WavError("fmt chunk too short")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            fmt = (tag, channels, rate, bits)
        elif chunk == b"data":
            if fmt is None:
                raise WavError("data chunk before fmt chunk")
            tag, channels, rate, bits = fmt
            if channels < 1 or rate < 1:
                raise WavError(f"bad fmt chunk: {channels} channels at {rate} Hz")
            available = (file_size if file_size is not None else len(data)) - body
            length = max(0, min(size, available))
            return WavInfo(tag, channels, rate, bits, body, length)
        pos = body + size + (size & 1)
    raise WavError("no data chunk")
