"""Audio that arrives in bursts, played out at the call's pace. Sans-IO.

Theory of operation
-------------------
A WebSocket far end (a voice agent: a speech-to-speech model, a TTS behind an LLM)
sends its audio as fast as it is made: often seconds of it in one burst, then
nothing while it thinks, sometimes 20 ms at a time with network jitter between
the pieces. The call needs exactly one 20 ms frame every tick. A :class:`Pacer`
sits between the two:

* :meth:`push` appends linear 16-bit samples (bytes, any length: an odd byte waits
  for its pair) to a FIFO;
* :meth:`frame` is called once a tick and returns the next 160 samples, or ``None``
  when there is nothing to play (the call hears silence from its own side);
* after running dry it waits for a *cushion* (:data:`CUSHION` frames) before it
  plays again, so a far end that sends in real time with jitter is heard without a
  gap every time a piece is a little late; a short piece that never reaches the
  cushion (the last word of an answer) is played once nothing more has come for
  the cushion's length of ticks;
* it holds at most :data:`LIMIT` seconds: a far end that sends faster than real
  time for longer loses its oldest audio (counted in ``dropped``), never memory;
* :meth:`clear` drops everything not yet played: the far end's barge-in (the caller
  spoke, so the agent stops its answer).

Time is counted in ticks (calls of :meth:`frame`), never read from a clock, so the
behaviour is exact and testable.
"""

from __future__ import annotations

from typing import Final

#: Samples in one 20 ms frame at 8 kHz.
FRAME_SAMPLES: Final = 160
FRAME_BYTES: Final = FRAME_SAMPLES * 2
#: Frames held before playing resumes after running dry (60 ms of jitter absorbed).
CUSHION: Final = 3
#: Seconds of audio held at most.
LIMIT: Final = 120.0


class Pacer:
    """One far end's audio, paced out a frame a tick (see the module docstring)."""

    def __init__(self, cushion: int = CUSHION, limit_seconds: float = LIMIT) -> None:
        self.cushion = cushion
        self.limit = int(limit_seconds * 8000) * 2
        self._buffer = bytearray()
        self._odd = b""
        self._playing = False
        self._idle = 0  # ticks since the last push
        #: Bytes dropped because more than ``limit_seconds`` was waiting.
        self.dropped = 0
        #: Frames played, and ticks that found the pacer dry while it was playing.
        self.played = 0
        self.underruns = 0

    @property
    def buffered(self) -> int:
        """Samples waiting to be played."""
        return len(self._buffer) // 2

    def push(self, pcm: bytes | bytearray | memoryview) -> None:
        """Append signed 16-bit little-endian samples."""
        data = self._odd + bytes(pcm)
        if len(data) % 2:
            self._odd, data = data[-1:], data[:-1]
        else:
            self._odd = b""
        self._buffer += data
        self._idle = 0
        excess = len(self._buffer) - self.limit
        if excess > 0:
            excess += excess % 2
            del self._buffer[:excess]
            self.dropped += excess

    def clear(self) -> int:
        """Drop everything not yet played; returns the samples dropped."""
        samples = len(self._buffer) // 2
        self._buffer.clear()
        self._odd = b""
        self._playing = False
        return samples

    def frame(self) -> bytes | None:
        """The next 20 ms (320 bytes), or None: called exactly once a tick."""
        self._idle += 1
        have = len(self._buffer)
        if not self._playing:
            if have == 0:
                return None
            if have < self.cushion * FRAME_BYTES and self._idle <= self.cushion:
                return None  # more is probably on its way: wait for the cushion
            self._playing = True
        if have == 0:
            self._playing = False
            self.underruns += 1
            return None
        if have < FRAME_BYTES:
            out = bytes(self._buffer) + bytes(FRAME_BYTES - have)  # the tail, then silence
            self._buffer.clear()
        else:
            out = bytes(self._buffer[:FRAME_BYTES])
            del self._buffer[:FRAME_BYTES]
        self.played += 1
        return out
