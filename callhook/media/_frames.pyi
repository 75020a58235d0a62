"""Type stub of the native path of :mod:`callhook.media.frames` (``_frames.c``)."""

from typing import Any

def decode_measure(table: Any, payloads: list[bytes], out: Any, /) -> list[float]: ...
