"""Two calls' media joined: what one side says, the other hears. Sans-IO.

Theory of operation
-------------------
A bridge (the ``connect`` action's, issue 15) joins two
:class:`~callhook.media.session.MediaSession` objects that the one media tick
already drives (docs/architecture.md; :meth:`MediaSession.join
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
* a feed holds at most :data:`MAX_BUFFERED` bytes (500 ms): a burst after a
  stall on the talker's path (a radio link, a starved sender: it sends what it
  held all at once) is kept and heard whole, then trimmed back as below; a
  talker whose clock runs fast, or a longer burst, costs the oldest audio, never
  a growing delay;
* what a feed holds beyond its jitter cushion comes back down: nothing takes
  from a feed while the listening side plays something of its own (relayed
  digits: 200 ms each), and a tick that finds it short sends silence and
  leaves the next packet waiting, so its backlog only grows, up to the bound,
  where every burst of jitter would then cost audio. When for a whole
  :data:`WINDOW` (1 s) of takes the feed never held less than the frame taken
  plus :data:`SPARE` plus more, that more is its excess: a frame of it goes
  each time a quiet frame (:data:`QUIET`) comes in, or is next, unheard; in
  speech without a pause for :data:`PATIENCE` (3 s), a frame of speech goes, then one
  every :data:`STRIDE` (200 ms) while the speech goes on. A backlog shrinks down
  to the cushion the jitter it sees needs (the least it held in a window),
  and no further.

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
#: The most a feed holds (500 ms): beyond it the oldest audio goes, so delay cannot grow.
#: More than the usual jitter buffer keeps (Asterisk's ``jbmaxsize`` is 200 ms): a burst
#: within it is heard whole, its delay trimmed back at the talker's next pauses.
MAX_BUFFERED = 25 * FRAME
#: Audio a feed keeps waiting beyond the frame it gives, as a cushion for jitter (20 ms).
SPARE = FRAME
#: Takes (20 ms each) over which a feed watches the least it held, before trimming a frame.
WINDOW = 50
#: A frame whose samples are all within this (about -42 dBFS) is quiet: trimmed unheard.
QUIET = 256
#: Takes (3 s) a feed waits for a quiet frame before it trims one of speech: people pause
#: between phrases well within that (the load kit's speech does), so speech is rarely cut.
PATIENCE = 3 * WINDOW
#: Takes (200 ms) between frames of speech trimmed once PATIENCE ran out: a backlog of
#: the bound goes within 8 s of unbroken speech, a 20 ms cut at a time.
STRIDE = 10


def _translation(source: Law, target: Law) -> bytes | None:
    """The byte table turning ``source`` G.711 codes into ``target`` ones (None: the same)."""
    if source == target:
        return None
    codes = np.arange(256, dtype=np.uint8)
    return g711.encode(target, g711.decode_array(source, codes))


_TABLES: dict[tuple[Law, Law], bytes | None] = {
    (a, b): _translation(a, b) for a in ("ulaw", "alaw") for b in ("ulaw", "alaw")
}


def _quiet_codes(law: Law) -> bytes:
    """The codes of ``law`` that stand for a sample within :data:`QUIET`."""
    codes = np.arange(256, dtype=np.uint8)
    linear = np.abs(g711.decode_array(law, codes).astype(np.int32))
    return bytes(codes[linear <= QUIET].tolist())


QUIET_CODES: dict[Law, bytes] = {law: _quiet_codes(law) for law in ("ulaw", "alaw")}


class Feed:
    """One direction of a bridge: audio from the talking side, in the listening side's law."""

    __slots__ = (
        "_buffer",
        "_excess",
        "_least",
        "_quiet",
        "_table",
        "_takes",
        "_waited",
        "dropped",
        "trimmed",
    )

    def __init__(self, talker: Law, listener: Law) -> None:
        self._table = _TABLES[(talker, listener)]
        self._quiet = QUIET_CODES[listener]
        self._buffer = bytearray()
        self.dropped = 0  # bytes of audio dropped to keep the delay bounded
        self.trimmed = 0  # of which: dropped because the feed stayed above its cushion
        self._takes = 0  # takes in this window
        self._least = MAX_BUFFERED  # the least the feed held at a take in this window
        self._excess = 0  # frames to trim, the last window found
        self._waited = 0  # takes since one was trimmed, waiting for a quiet frame

    def push(self, payload: bytes) -> None:
        """Audio the talking side received (its law)."""
        data = payload if self._table is None else payload.translate(self._table)
        if (
            self._excess
            and len(data) == FRAME
            and len(self._buffer) >= FRAME + SPARE
            and not data.translate(None, self._quiet)
        ):
            # A quiet frame while the feed holds more than its cushion: left out, unheard.
            # (At the head, at a take, it might never be: the short pauses between words
            # come and go while the feed holds two frames or less.)
            self._trim()
            return
        self._buffer += data
        over = len(self._buffer) - MAX_BUFFERED
        if over > 0:
            del self._buffer[:over]
            self.dropped += over

    def frame(self) -> bytes | None:
        """The next 20 ms for the listening side, or None when less than that is there."""
        held = len(self._buffer)
        if held < self._least:
            self._least = held
        self._takes += 1
        if self._takes >= WINDOW:  # more than it needed all along: the excess goes
            self._excess = max(0, (self._least - FRAME - SPARE) // FRAME)
            self._takes, self._least = 0, MAX_BUFFERED
        while self._excess and held >= 2 * FRAME:
            quiet = not self._buffer[:FRAME].translate(None, self._quiet)
            if not quiet and self._waited < PATIENCE:
                self._waited += 1  # speech: wait for a pause, PATIENCE at most
                break
            del self._buffer[:FRAME]
            self._trim()
            if not quiet:
                self._waited = PATIENCE - STRIDE  # still speech: the next one sooner
            held -= FRAME
        if held < FRAME:
            return None
        frame = bytes(self._buffer[:FRAME])
        del self._buffer[:FRAME]
        return frame

    def _trim(self) -> None:
        """A frame of the excess went (from the buffer, or before it got there)."""
        self.dropped += FRAME
        self.trimmed += FRAME
        self._excess -= 1
        self._waited = 0

    def __len__(self) -> int:
        return len(self._buffer)
