"""Type stub of the native base of :mod:`callhook.media.gate` (``_gate.c``)."""

from collections import deque
from typing import Any

class GateCore:
    model: Any
    _preroll: deque[Any]
    _run: int
    _gate_quiet: int
    _closed_for: int
    _block_count: int
    hangover_frames: int
    _block_frames: int
    _closed_long: int
    _block_min: float
    _history_floor: float
    _margin: float
    _min_power: float
    _start_power: float
    _gain_floor: float
    _hold: float
    _release: float
    model_holds: bool
    paused: bool
    _active: bool
    _gate: bool
    _prior: bool
    _says_speech: bool
    def feed_usual(self, frame: Any, power: float) -> bool: ...

def feed_all(sessions: list[Any], frames: list[Any], powers: list[float]) -> list[int]: ...
def gather(sessions: list[Any], law: str, /) -> tuple[list[Any], list[bytes], list[int], bool]: ...
