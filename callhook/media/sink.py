"""Where a recording's audio goes: what the media session asks of a recording file."""

from __future__ import annotations

from typing import Protocol


class Sink(Protocol):
    """Where a recording's audio goes (a WAV file in the media file store:
    ``store.wavfile.WavWriter``)."""

    def write(self, data: bytes) -> None:
        """Append G.711 bytes; raises OSError when the disk fails, or SinkFull."""

    def close(self) -> None:
        """Finish the file."""


class SinkFull(Exception):
    """The recording reached its size limit."""
