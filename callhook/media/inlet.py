"""A call's usual RTP packet taken in C, with no Python code run for it. Sans-IO.

Almost every packet a call receives is the usual one: from the peer the call is
latched to, plain RTP, the call's codec, the next sequence number of the current
source. In Python that packet cost about a seventh of a loaded serve's CPU
(``MediaSession.receive`` and ``RtpReceiver.feed_next``, profiled at 200 calls,
issue 19). The native module ``_inlet.c`` holds the fields that packet reads and
changes in C structs that are the bases of the Python classes:
:class:`~callhook.media.session.MediaSession` derives from :class:`Inlet`,
:class:`~callhook.media.rtp.RtpReceiver` from :class:`ReceiverCore`. Python code
uses them as ordinary attributes, and :func:`take_all` takes the usual packets of
a whole media tick (:mod:`callhook.edge.mediaengine`) in one call. The session's struct
(``_inlet.h``) also holds the fields the tick's other C steps read for every call
(:mod:`callhook.media.outlet`, :mod:`callhook.media.gate`): they read them as struct
fields rather than looking each one up by name, which under load cost about 5 % of
a serve's CPU (perf, 200 calls). A caller's
recording hears the packet too: when the frame is the recording's usual one (the next
on its timeline, in the call's law, into a :class:`~callhook.store.wavfile.WavWriter`
that takes it whole and is not due to write its file), C adds it to the file's
pending audio; any other step of a recording, and a bridge, run Python's
``MediaSession._audio`` for that packet.

The Python classes stay the reference: :func:`take_all` takes a packet only when
every condition of their fast path holds, changes exactly what they would change
(``tests/unit/media/test_inlet.py`` compares the two field by field), and leaves any other
packet, untouched, for :meth:`MediaSession.receive
<callhook.media.session.MediaSession.receive>`. A call's packets keep their order: once
one of them is left to Python, the rest of that tick's are left too, so that none
overtakes it. Where the extension was not built
(no C compiler), the bases here are plain classes and :func:`take_all` takes
nothing: the same behaviour, at Python's cost.
"""

from __future__ import annotations

from collections import deque
from typing import Any, TypeVar

#: A datagram to take: its key, its bytes, its source and, from the media thread, when it
#: reached the host.
Datagram = tuple[Any, bytes, tuple[str, int]] | tuple[Any, bytes, tuple[str, int], float]
Received = list[Datagram]
_D = TypeVar("_D", bound=tuple[Any, ...])

try:
    from callhook.media._inlet import Inlet, Preroll, ReceiverCore, take_all
except ImportError:  # no C compiler where callhook was installed

    class Preroll(deque[tuple[int, bytes]]):  # type: ignore[no-redef]
        """Where the extension is missing: a bounded deque of (timestamp, payload)."""

        def __init__(self, maxlen: int) -> None:
            super().__init__(maxlen=maxlen)

    class Inlet:  # type: ignore[no-redef]
        """Where the extension is missing: a plain base, its fields in ``__dict__``."""

        #: Never: without the extensions there is no media thread to hold the state.
        rx_owned = False
        rx_until = 0.0

        def take(
            self, data: bytes, source: tuple[str, int], now: float, arrival: float = 0.0
        ) -> bool:
            return False

    class ReceiverCore:  # type: ignore[no-redef]
        """Where the extension is missing: a plain base, its fields in ``__dict__``."""

    def take_all(
        received: list[_D], now: float
    ) -> tuple[list[_D], list[tuple[Any, BaseException]]]:
        """Where the extension is missing: nothing is taken, Python receives it all."""
        return received, []


def native() -> bool:
    """Whether the usual packet is taken in C (the extension was built)."""
    return Inlet.__module__ == "callhook.media._inlet"


__all__ = ["Inlet", "Preroll", "ReceiverCore", "native", "take_all"]
