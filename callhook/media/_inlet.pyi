"""Type stub of the native bases of :mod:`callhook.media.inlet` (``_inlet.c``)."""

from collections.abc import Iterator
from typing import Any, TypeVar

class Preroll:
    def __init__(self, maxlen: int) -> None: ...
    @property
    def maxlen(self) -> int: ...
    def append(self, item: tuple[int, bytes], /) -> None: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[int, bytes]]: ...

class ReceiverCore:
    ssrc: int | None
    _held: dict[int, Any]
    _candidates: list[Any]
    received: int
    _max_seq: int
    _cycles: int
    _next: int
    _last_ts: int
    _history: int
    clock_rate: int
    _jitter: float
    _last_arrival: float

class Inlet:
    remote: tuple[str, int] | None
    srtp: Any
    receiver: Any
    _rtp_since: float | None
    tells: Any
    _call_recording: Any
    _recording: Any
    _preroll: Preroll
    undetected: list[bytes]
    payload_type: int
    _bucket_count: int
    _flood_limit: int
    _bucket_start: float
    _last_audio: float
    _last_heard: float
    latched: bool
    batched: bool
    law: Any
    hears: Any
    transcriber: Any
    tones: Any
    meter: Any
    classifier: Any
    vad: Any
    sender: Any
    player: Any
    reports: Any
    events: Any
    utterances: Any
    _silent_after: float
    rtp_timeout: float
    sending: bool
    recognising: bool
    expects_rtp: bool
    timed_out: bool
    @property
    def rx_owned(self) -> bool: ...
    @property
    def rx_until(self) -> float: ...
    def take(
        self, data: bytes, source: tuple[str, int], now: float, arrival: float = ...
    ) -> bool: ...

# ((key, data, source[, arrival])): the rest are given back as they came.
_D = TypeVar("_D", bound=tuple[Any, ...])

def take_all(
    received: list[_D], now: float
) -> tuple[list[_D], list[tuple[Any, BaseException]]]: ...
