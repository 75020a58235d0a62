"""WAV files: the RIFF header of G.711 and PCM files, read and written. Pure (bytes in, bytes out).

Recordings are 8 kHz mono WAV with format tag 6 (A-law) or 7 (µ-law)
(docs/recordings.md). G.711 WAVs carry a ``fact`` chunk (the sample count), as
the WAVE format for non-PCM data requires.

:func:`decode_to_8k` turns a prompt file of any common kind (PCM 8/16/24/32-bit,
IEEE float, A-law, µ-law, IMA ADPCM, OKI ADPCM; mono or multichannel; any
rate, plain or WAVE_FORMAT_EXTENSIBLE) into the 8 kHz mono int16 samples a
call plays. The two ADPCMs are the ones Aculab plays besides G.711 and PCM:
IMA ADPCM (format tag 0x0011, blocks with a header per channel, the block
size and samples per block in ``fmt``) and OKI ADPCM, as Dialogic's VOX in a
WAV file (tag 0x0010, or Dialogic's 0x0017; mono, 4 bits, ``nBlockAlign``
1); :mod:`callhook.media.adpcm` decodes them (OKI with Dialogic's rounding).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import soxr

from callhook.media import adpcm, g711

FORMAT_PCM = 1
FORMAT_FLOAT = 3
FORMAT_ALAW = 6
FORMAT_ULAW = 7
FORMAT_OKI_ADPCM = 0x0010
FORMAT_IMA_ADPCM = 0x0011
FORMAT_DIALOGIC_OKI_ADPCM = 0x0017
FORMAT_EXTENSIBLE = 0xFFFE

#: The ADPCM encodings callhook decodes, with their names for error messages.
ADPCM_FORMATS: Final = {
    FORMAT_OKI_ADPCM: "OKI ADPCM",
    FORMAT_IMA_ADPCM: "IMA ADPCM",
    FORMAT_DIALOGIC_OKI_ADPCM: "Dialogic OKI ADPCM",
}

#: Names of encodings callhook does not decode, for error messages.
_UNSUPPORTED: Final = {
    0x0002: "Microsoft ADPCM",
    0x0031: "GSM 6.10",
    0x0040: "G.721 ADPCM",
    0x0050: "MPEG audio",
    0x0055: "MP3",
    0x0064: "G.726 ADPCM",
}

#: The encoding of silence in each G.711 law.
SILENCE = {"alaw": 0xD5, "ulaw": 0xFF}
#: The sample rates :func:`decode_to_8k` reads (telephony's 4 kHz to studio 384 kHz).
MIN_RATE = 4000
MAX_RATE = 384_000


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
    #: For WAVE_FORMAT_EXTENSIBLE: the format tag in the first two bytes of the SubFormat GUID.
    sub_format: int | None = None
    #: nBlockAlign: the bytes of one frame (PCM, G.711) or one block (IMA ADPCM).
    block_align: int = 0
    #: IMA ADPCM's wSamplesPerBlock (the fmt extension after cbSize 2); 0 when absent.
    samples_per_block: int = 0
    #: The sample count of the ``fact`` chunk, if the file has one before its data.
    fact_samples: int | None = None

    @property
    def encoding(self) -> int:
        """The format tag that says how samples are coded (the sub-format if extensible)."""
        if self.format_tag == FORMAT_EXTENSIBLE and self.sub_format is not None:
            return self.sub_format
        return self.format_tag

    @property
    def frame_bytes(self) -> int:
        return self.channels * max(1, self.bits_per_sample // 8)

    @property
    def frames(self) -> int:
        """How many samples per channel the data holds (ADPCM: decodes to, up to ``fact``).

        0 for an IMA ADPCM header whose blocks cannot be decoded (:func:`decode_to_8k` says why).
        """
        if self.encoding == FORMAT_IMA_ADPCM:
            try:
                n = adpcm.ima_frames(
                    self.data_length, self.channels, self.block_align, self.samples_per_block
                )
            except adpcm.AdpcmError:
                return 0
        elif self.encoding in ADPCM_FORMATS:
            n = 2 * self.data_length // self.channels
        else:
            return self.data_length // self.frame_bytes
        return _cut_to_fact(n, self.fact_samples)

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate


def g711_header(law: str, samples: int, sample_rate: int = 8000, channels: int = 1) -> bytes:
    """A complete header (RIFF, fmt with cbSize, fact, data) for ``samples`` G.711 bytes.

    ``channels``: 2 for a stereo file (the channels' bytes interleaved, one byte each per
    sample frame); ``fact`` counts sample frames, ``data`` bytes.
    """
    tag = FORMAT_ALAW if law == "alaw" else FORMAT_ULAW
    rate = sample_rate * channels
    fmt = struct.pack("<HHIIHHH", tag, channels, sample_rate, rate, channels, 8, 0)
    fact = struct.pack("<I", samples // channels)
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
    try:
        return _read_info(data, file_size)
    except struct.error as exc:  # a header cut short anywhere: never anything but WavError
        raise WavError(f"truncated header: {exc}") from None


def _read_info(data: bytes, file_size: int | None) -> WavInfo:
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError("not a RIFF/WAVE file")
    pos = 12
    fmt: tuple[int, int, int, int, int] | None = None
    sub_format: int | None = None
    samples_per_block = 0
    fact: int | None = None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise WavError("fmt chunk too short")
            tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", data, body)
            fmt = (tag, channels, rate, bits, align)
            has_extension = size >= 18 and body + 18 <= len(data)
            extension = struct.unpack_from("<H", data, body + 16)[0] if has_extension else 0
            if tag == FORMAT_EXTENSIBLE and size >= 40 and body + 26 <= len(data):
                sub_format = struct.unpack_from("<H", data, body + 24)[0]
            elif tag == FORMAT_IMA_ADPCM and extension >= 2 and size >= 20:
                if body + 20 > len(data):
                    raise WavError("fmt chunk too short")
                samples_per_block = struct.unpack_from("<H", data, body + 18)[0]
        elif chunk == b"fact" and size >= 4 and body + 4 <= len(data):
            fact = struct.unpack_from("<I", data, body)[0]
        elif chunk == b"data":
            if fmt is None:
                raise WavError("data chunk before fmt chunk")
            tag, channels, rate, bits, align = fmt
            if channels < 1 or rate < 1:
                raise WavError(f"bad fmt chunk: {channels} channels at {rate} Hz")
            available = (file_size if file_size is not None else len(data)) - body
            length = max(0, min(size, available))
            return WavInfo(
                tag, channels, rate, bits, body, length, sub_format, align, samples_per_block, fact
            )
        pos = body + size + (size & 1)
    raise WavError("no data chunk")


#: The sizes a recording declares while its length is not known yet (as streaming
#: WAV writers do); readers take the data to the end of the file.
UNKNOWN_SIZE = 0xFFFFFFFF


def fix_sizes(data: bytes, *, force: bool = False) -> bytes:
    """``data`` with its RIFF, ``data`` and (G.711) ``fact`` sizes set from its real length.

    A file whose ``data`` chunk declares more than the file holds (an unknown
    length, or a recording cut short by a crash) is fixed; with ``force`` the
    data is taken to run to the end of the file even when the header declares
    less (a crash after the last header update) — all but the one byte after
    an odd declared length, which is the RIFF pad byte of a complete file. The
    data chunk must be the last one, as in every file callhook writes.
    """
    info = read_info(data)
    declared = struct.unpack_from("<I", data, info.data_offset - 4)[0]
    available = len(data) - info.data_offset
    if declared <= available and not force:
        return data
    if declared & 1 and available == declared + 1:
        return data  # complete: the last byte is the pad
    out = bytearray(data)
    struct.pack_into("<I", out, info.data_offset - 4, available)
    struct.pack_into("<I", out, 4, len(data) - 8)
    if info.encoding in (FORMAT_ALAW, FORMAT_ULAW):
        pos = 12
        while pos + 12 <= info.data_offset:
            size = struct.unpack_from("<I", data, pos + 4)[0]
            if data[pos : pos + 4] == b"fact" and size >= 4:
                struct.pack_into("<I", out, pos + 8, available // max(1, info.channels))
            pos += 8 + size + (size & 1)
    return bytes(out)


def _cut_to_fact(frames: int, fact: int | None) -> int:
    """``frames`` cut to a ``fact`` chunk's count (an ADPCM file's last block is padded)."""
    return min(frames, fact) if fact else frames


def _adpcm(info: WavInfo, raw: bytes) -> npt.NDArray[np.int16]:
    """The samples of IMA or OKI ADPCM ``raw``, shape (frames, channels)."""
    name, bits = ADPCM_FORMATS[info.encoding], info.bits_per_sample
    if bits != 4:
        raise WavError(f"{name} WAV with {bits} bits per sample (callhook reads 4-bit {name})")
    if info.encoding == FORMAT_IMA_ADPCM:
        try:
            x = adpcm.ima_decode(raw, info.channels, info.block_align, info.samples_per_block)
        except adpcm.AdpcmError as exc:
            raise WavError(str(exc)) from None
    else:
        if info.channels != 1:
            raise WavError(f"{name} WAV with {info.channels} channels (must be mono)")
        x = adpcm.oki_decode(raw)[:, None]
    return x[: _cut_to_fact(len(x), info.fact_samples)]


def _samples(info: WavInfo, raw: bytes) -> npt.NDArray[np.float64]:
    """The samples of ``raw`` as float in [-1, 1), shape (frames, channels)."""
    encoding, bits = info.encoding, info.bits_per_sample
    if encoding in ADPCM_FORMATS:
        return _adpcm(info, raw).astype(np.float64) / 32768.0
    if encoding == FORMAT_PCM:
        if bits not in (8, 16, 24, 32):
            raise WavError(f"unsupported PCM sample size: {bits} bits (8, 16, 24 or 32)")
    elif encoding == FORMAT_FLOAT:
        if bits not in (32, 64):
            raise WavError(f"unsupported IEEE float sample size: {bits} bits (32 or 64)")
    elif encoding in (FORMAT_ALAW, FORMAT_ULAW):
        if bits != 8:
            raise WavError(f"G.711 WAV with {bits} bits per sample (must be 8)")
    else:
        name = _UNSUPPORTED.get(encoding, "unknown encoding")
        raise WavError(
            f"unsupported WAV encoding: {name} (format tag 0x{encoding:04X}); "
            "use PCM, IEEE float, A-law, µ-law, IMA ADPCM or OKI ADPCM"
        )
    width = bits // 8
    frames = len(raw) // (width * info.channels)
    raw = raw[: frames * width * info.channels]
    x: npt.NDArray[np.float64]
    if encoding == FORMAT_PCM and bits == 8:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    elif encoding == FORMAT_PCM and bits == 16:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768.0
    elif encoding == FORMAT_PCM and bits == 24:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8  # sign in bit 31
        x = (v >> 8).astype(np.float64) / 8388608.0
    elif encoding == FORMAT_PCM:
        x = np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0
    elif encoding == FORMAT_FLOAT:
        x = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float64)
        x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    else:
        law: g711.Law = "alaw" if encoding == FORMAT_ALAW else "ulaw"
        x = g711.decode(law, raw).astype(np.float64) / 32768.0
    return x.reshape(frames, info.channels)


def decode_to_8k(data: bytes) -> npt.NDArray[np.int16]:
    """The samples of WAV file ``data`` as 8 kHz mono int16.

    Reads PCM (8-bit unsigned, 16/24/32-bit signed), IEEE float (32/64-bit),
    A-law (tag 6), µ-law (tag 7), 4-bit IMA ADPCM (tag 0x0011) and 4-bit OKI
    ADPCM (0x0010, 0x0017), plain or WAVE_FORMAT_EXTENSIBLE; channels are
    averaged; other rates are resampled with libsoxr's high-quality filter
    (band-limited, so nothing above 4 kHz folds back into the call). 8 kHz
    mono 16-bit PCM and G.711 come back bit-exact, 8 kHz mono ADPCM exactly
    as it decodes (up to the ``fact`` chunk's count, when there is one; a
    file cut short decodes as far as it goes). Raises :class:`WavError`
    saying why for anything else (Microsoft ADPCM, MP3, GSM...).
    """
    info = read_info(data)
    if not MIN_RATE <= info.sample_rate <= MAX_RATE:
        # Resampling multiplies the length by 8000 / rate: a few kB declared at 1 Hz
        # would become gigabytes of samples (a hostile file_to_play).
        raise WavError(
            f"sample rate {info.sample_rate} Hz (callhook reads {MIN_RATE} to {MAX_RATE})"
        )
    raw = data[info.data_offset : info.data_offset + info.data_length]
    if info.channels == 1 and info.sample_rate == 8000 and info.encoding in ADPCM_FORMATS:
        return np.ascontiguousarray(_adpcm(info, raw)[:, 0])
    if info.channels == 1 and info.sample_rate == 8000 and info.bits_per_sample in (8, 16):
        if info.encoding == FORMAT_PCM and info.bits_per_sample == 16:
            return np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2").astype(np.int16)
        if info.encoding == FORMAT_ALAW and info.bits_per_sample == 8:
            return g711.alaw_decode(raw)
        if info.encoding == FORMAT_ULAW and info.bits_per_sample == 8:
            return g711.ulaw_decode(raw)
    x = _samples(info, raw)
    mono = x[:, 0] if info.channels == 1 else x.mean(axis=1)
    if info.sample_rate != 8000 and len(mono):
        mono = np.asarray(soxr.resample(mono, info.sample_rate, 8000, quality="HQ"), np.float64)
    return np.clip(np.rint(mono * 32768.0), -32768, 32767).astype(np.int16)
