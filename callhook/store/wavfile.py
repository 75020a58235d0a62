"""Writing a recording: a G.711 WAV file that is valid at every moment.

The header is written first with the sizes of an empty file and rewritten
with the real sizes every second of audio and at the end, so that a crash
or a power cut leaves a playable file holding what was captured up to a
second before (DESIGN.md §1.5: a recording that was captured is never lost).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from callhook.media import wav
from callhook.media.session import SinkFull

HEADER_REFRESH_BYTES = 8000  # one second of G.711


class WavWriter:
    """A recording sink (``media.session.Sink``) writing a G.711 WAV file."""

    def __init__(self, path: Path, law: str, max_bytes: int | None = None) -> None:
        self.path = path
        self.law = law
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO | None = path.open("wb")
        self._header_length = len(wav.g711_header(law, 0))
        self._file.write(wav.g711_header(law, 0))
        self.length = 0
        self._since_header = 0

    def write(self, data: bytes) -> None:
        if self._file is None:
            return
        if self.max_bytes is not None and self.length + len(data) > self.max_bytes:
            raise SinkFull(f"recording reached its size limit of {self.max_bytes} bytes")
        self._file.write(data)
        self.length += len(data)
        self._since_header += len(data)
        if self._since_header >= HEADER_REFRESH_BYTES:
            self._rewrite_header()

    def _rewrite_header(self) -> None:
        assert self._file is not None
        self._since_header = 0
        position = self._file.tell()
        self._file.seek(0)
        self._file.write(wav.g711_header(self.law, self.length))
        self._file.seek(position)
        self._file.flush()

    def close(self) -> None:
        if self._file is None:
            return
        if self.length & 1:
            self._file.write(b"\x00")  # RIFF chunks are word-aligned
        self._rewrite_header()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None

    @property
    def seconds(self) -> float:
        return self.length / 8000
