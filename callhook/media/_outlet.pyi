"""Type stub of the native bases of :mod:`callhook.media.outlet` (``_outlet.c``)."""

from typing import Any

class SenderCore:
    payload_type: int
    ssrc: int
    sequence: int
    timestamp: int
    packets: int
    octets: int
    _talkspurt: bool

class PlayerCore:
    silence: bytes
    _prompt: Any
    _begun: Any
    _hold: bool
    _event: Any
    echo_ticks: int

def tick_all(
    calls: list[tuple[Any, int]], now: float
) -> tuple[list[tuple[int, bytes, tuple[str, int]]], list[int]]: ...
def due_all(calls: list[tuple[Any, bool]], now: float) -> list[int]: ...
def uncover(calls: list[tuple[Any, int]]) -> None: ...
def cover_all(calls: list[tuple[Any, int]], horizon: int) -> list[tuple[int, int, bool, bytes]]: ...
