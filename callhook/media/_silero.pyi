"""Type stub of the speech model's network in C (``_silero.c``; :mod:`.sileronet`)."""

from typing import Any

class Network:
    def __init__(self, *arrays: Any) -> None: ...
    def window(self, input: Any, state: Any, /) -> float: ...
