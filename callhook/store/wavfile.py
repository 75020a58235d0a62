"""Writing a recording: a G.711 WAV file that is valid at every moment.

The header is written first with the sizes of an empty file and rewritten
with the real sizes every second of audio and at the end, so that a crash
leaves a playable file holding what was captured up to a second before
(DESIGN.md §1.5: a recording that was captured is never lost).

Closing a recording forces it to disk (``fsync``) so it survives a power
cut too. That can take milliseconds, so it is done on a worker thread: the
event loop, which plays every call's audio, never waits for the disk.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from callhook.media import wav
from callhook.media.session import SinkFull

HEADER_REFRESH_BYTES = 8000  # one second of G.711

#: Finishes closed recordings (fsync, close) off the event loop.
_finisher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="callhook-wav")


def _sync_and_close(file: BinaryIO) -> None:
    try:
        file.flush()
        os.fsync(file.fileno())
    finally:
        file.close()


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
        file, self._file = self._file, None
        _finisher.submit(_sync_and_close, file)

    @property
    def seconds(self) -> float:
        return self.length / 8000
