"""Two calls' media joined: what one side says, the other hears. Sans-IO.

Theory of operation
-------------------
A bridge (the ``connect`` action's, issue 15) joins two
:class:`~callhook.media.session.MediaSession` objects that the one media tick
already drives (DESIGN.md §2; :meth:`MediaSession.join
<callhook.media.session.MediaSession.join>`): no task, timer or object per
packet. Each direction is a :class:`Feed`, a byte FIFO of G.711 in the
*listening* side's law:

* the talking session pushes each audio payload it receives into its feed
  (after its reorder window, as it goes to the recording and the detector),
  translated byte by byte when the two sides' laws differ (µ-law ↔ A-law:
  a 256-byte table, made through the linear value each code stands for, and
  ``bytes.translate``);
* the listening session, at its tick, takes one 20 ms frame from its feed
  when its own player has nothing to play (a prompt on that side, such as
  relayed digits, goes first), or silence when the feed has less than a
  frame: a far end that sends 30 ms packets is repacked into 20 ms frames
  as a byte stream;
* a feed holds at most :data:`MAX_BUFFERED` bytes (120 ms): a talker whose
  clock runs fast, or a burst after a stall, costs the oldest audio, never a
  growing delay.

Digits cross as the listening side negotiated them (``MediaSession.relay_digits``):
an RFC 4733 event or a SIP INFO digit received on one side is sent on the
other as an RFC 4733 event when it negotiated telephone-event, else as an
in-band tone; in-band tones heard on one side already travel in its audio, so
they are relayed as events only to a side that negotiated them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from callhook.media import g711

Law = Literal["ulaw", "alaw"]

FRAME = 160  # bytes of G.711 in 20 ms
#: The most a feed holds (120 ms): beyond it the oldest audio goes, so delay cannot grow.
MAX_BUFFERED = 6 * FRAME


def _translation(source: Law, target: Law) -> bytes | None:
    """The byte table turning ``source`` G.711 codes into ``target`` ones (None: the same)."""
    if source == target:
        return None
    codes = np.arange(256, dtype=np.uint8)
    return g711.encode(target, g711.decode_array(source, codes))


_TABLES: dict[tuple[Law, Law], bytes | None] = {
    (a, b): _translation(a, b) for a in ("ulaw", "alaw") for b in ("ulaw", "alaw")
}


class Feed:
    """One direction of a bridge: audio from the talking side, in the listening side's law."""

    __slots__ = ("_buffer", "_table", "dropped")

    def __init__(self, talker: Law, listener: Law) -> None:
        self._table = _TABLES[(talker, listener)]
        self._buffer = bytearray()
        self.dropped = 0  # bytes of audio dropped to keep the delay bounded

    def push(self, payload: bytes) -> None:
        """Audio the talking side received (its law)."""
        self._buffer += payload if self._table is None else payload.translate(self._table)
        over = len(self._buffer) - MAX_BUFFERED
        if over > 0:
            del self._buffer[:over]
            self.dropped += over

    def frame(self) -> bytes | None:
        """The next 20 ms for the listening side, or None when less than that is there."""
        if len(self._buffer) < FRAME:
            return None
        frame = bytes(self._buffer[:FRAME])
        del self._buffer[:FRAME]
        return frame

    def __len__(self) -> int:
        return len(self._buffer)
