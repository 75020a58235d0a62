"""Type stub of the native path of :mod:`callhook.media.mixing` (``_mixing.c``)."""

from typing import Any

def mix_rooms(frames: Any, mixed: Any, bounds: Any, out: Any, /) -> None: ...
