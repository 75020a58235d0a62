"""A bridged call recorded whole: both directions into one file. Sans-IO.

Theory of operation
-------------------
Aculab's ``secondary_call.call_recording`` records a connect's bridged call
from the moment the two calls are joined, both directions: ``mixed`` (one
channel, the two sides summed) or ``separate`` (stereo, one side a channel).
callhook records it where the caller's media session is, at the caller's 20 ms
tick (the tick that already sends the caller what the far end says), so the
file is the call as the caller lived it and takes no task or timer of its own:

* what the caller *says* is every audio payload its session receives (after
  its reorder window), queued in a :class:`~callhook.media.bridge.Feed` of the
  caller's own law (the feed's jitter cushion, bound and trimming keep the two
  directions aligned within a frame or two, whatever the caller's packet
  timing);
* what the caller *hears* from the far end is the frame its tick took from the
  bridge for it, or silence when none was taken: the far end sent nothing in
  time, or the caller's side was playing relayed digits (a digit pressed on
  one side reaches the other as an RFC 4733 event, a SIP INFO or a generated
  tone, never as the parties' audio: it is not in the recording);
* each tick writes one 20 ms frame of each to the sink: in ``mixed`` mode the
  two decoded, summed (clipped to 16 bits) and encoded again; in ``separate``
  mode the two frames' bytes interleaved (caller left, far end right), a
  two-channel G.711 WAV;
* with ``eliminate_dtmf`` (Aculab's ``call_recording_eliminate_dtmf``, true by
  default) each direction also goes through a DTMF tone detector (the one
  ``get_number`` uses) and waits :data:`DELAY` ticks: when a key press is
  confirmed, about 40 ms into its tone, its frames still waiting are silenced,
  and so is every frame until the press is over. A party's in-band key presses
  are not in the file; its speech is untouched.

The sink is the same kind as the ``record`` action's (``store/wavfile.py``:
valid at every moment, flushed every 0.2 s, maybe encrypted); a sink that
fails (a full disk, the size limit) stops the recording and keeps what it holds.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Literal

import numpy as np

from callhook.events import RecorderFailed
from callhook.media import g711
from callhook.media.bridge import FRAME, Feed
from callhook.media.dtmf import ToneDetector
from callhook.media.sink import Sink, SinkFull

logger = logging.getLogger("callhook.media")

Law = Literal["ulaw", "alaw"]
Mode = Literal["mixed", "separate"]

#: Frames each direction waits before it is written when DTMF is to be left out (60 ms):
#: a key press is confirmed about 40 ms into its tone, when its first frames are still
#: here to be silenced.
DELAY = 3


class CallRecording:
    """Both directions of one bridged call, written a 20 ms frame per tick."""

    __slots__ = ("_detectors", "_pending", "_silence", "law", "mode", "said", "sink")

    def __init__(
        self, sink: Sink, law: Law, mode: Mode = "mixed", *, eliminate_dtmf: bool = False
    ) -> None:
        self.sink = sink
        self.law = law
        self.mode = mode
        #: What the caller says, waiting for the tick (its own law: nothing to translate).
        self.said = Feed(law, law)
        self._silence = g711.silence(law, FRAME)
        # call_recording_eliminate_dtmf: each direction's in-band key presses are
        # silenced (caller, far end), its frames held DELAY ticks to catch their start.
        self._detectors = (ToneDetector(), ToneDetector()) if eliminate_dtmf else ()
        self._pending: deque[list[bytes]] = deque()

    def hear_caller(self, payload: bytes) -> None:
        """Audio the caller's session received."""
        self.said.push(payload)

    def frame(self, heard: bytes | None) -> bytes:
        """This tick's bytes for the file: the caller's next 20 ms with ``heard``, what
        the far end's side gave the caller this tick (None: silence); DELAY ticks late
        (nothing for the first ones) when DTMF is left out."""
        said = self.said.frame() or self._silence
        other = heard if heard is not None and len(heard) == FRAME else self._silence
        if not self._detectors:
            return self._encode(said, other)
        pending = self._pending
        pending.append([said, other])
        for side, detector in enumerate(self._detectors):
            detector.feed(g711.decode(self.law, pending[-1][side]))
            if detector.key_down:  # the press, from its first frames still held here
                for pair in pending:
                    pair[side] = self._silence
        if len(pending) <= DELAY:
            return b""
        said, other = pending.popleft()
        return self._encode(said, other)

    def _encode(self, said: bytes, other: bytes) -> bytes:
        if self.mode == "separate":
            out = bytearray(2 * FRAME)
            out[0::2] = said
            out[1::2] = other
            return bytes(out)
        mixed = g711.decode(self.law, said).astype(np.int32) + g711.decode(self.law, other)
        return g711.encode(self.law, np.clip(mixed, -32768, 32767).astype(np.int16))

    def write(self, heard: bytes | None) -> RecorderFailed | None:
        """Write this tick's frame (:meth:`frame`); when the sink fails, the recording is
        over (what it holds is kept, the file finished) and the failure is returned."""
        try:
            data = self.frame(heard)
            if data:
                self.sink.write(data)
        except (SinkFull, OSError) as exc:
            self.close("call recording")
            return RecorderFailed("filesize" if isinstance(exc, SinkFull) else "error", str(exc))
        return None

    def close(self, label: str) -> None:
        """Finish the file (with the frames still held back)."""
        held = b"".join(self._encode(said, other) for said, other in self._pending)
        self._pending.clear()
        try:
            if held:
                self.sink.write(held)
        except (SinkFull, OSError) as exc:
            logger.error("%s: the call recording's last frames are lost: %s", label, exc)
        try:
            self.sink.close()
        except OSError as exc:
            logger.error("%s: the call recording could not be finished: %s", label, exc)
