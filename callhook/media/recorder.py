"""What the caller sends, written into a recording's sink: the ``record`` action's file.
Pure (the sink is the only thing it writes to).

The file is the call's timeline, not just the packets that came: a gap in the caller's
RTP timestamps (lost packets, or a phone that stops sending while muted) becomes silence,
up to :data:`MAX_GAP_SAMPLES`, so the file lasts as long as the call did; a late or
repeated frame, already covered, is skipped. Frames are transcoded to the file's law when
it differs from the call's. A sink that refuses a write (full disk, the size limit) ends
the recording with what was written so far kept: :meth:`CallerRecording.frame` and
:meth:`~CallerRecording.finish` then return the
:class:`~callhook.events.RecorderFailed` the session reports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from callhook.events import RecorderFailed
from callhook.media import g711
from callhook.media.g711 import Law
from callhook.media.player import FRAME
from callhook.media.sink import Sink, SinkFull

logger = logging.getLogger("callhook.media")

#: Largest gap in the caller's RTP timestamps filled with silence in a recording (10 s).
MAX_GAP_SAMPLES = 80_000


@dataclass
class CallerRecording:
    """One recording of the caller, into ``sink`` in ``law``; ``label`` names the call in
    log lines.

    The media tick writes the usual frame (the next on the timeline, in the recording's
    law, into a :class:`~callhook.store.wavfile.WavWriter`) in C (``media/_inlet.c``):
    a change to :meth:`frame` is made there too (``tests/unit/media/test_inlet.py``)."""

    sink: Sink
    law: Law
    label: str
    next_ts: int | None = None  # RTP timestamp expected next, for gap filling

    def frame(self, payload: bytes, timestamp: int, law: Law) -> RecorderFailed | None:
        """One frame the caller sent (in the call's ``law``), after silence for any gap."""
        if self.next_ts is not None:
            gap = (timestamp - self.next_ts) & 0xFFFFFFFF
            if 0 < gap <= MAX_GAP_SAMPLES:
                failed = self._write(g711.silence(self.law, FRAME) * (gap // FRAME))
                if failed is not None:
                    return failed
            elif gap > 0x7FFFFFFF:
                return None  # a late or repeated frame: already covered
        self.next_ts = (timestamp + len(payload)) & 0xFFFFFFFF
        if law != self.law:
            payload = g711.encode(self.law, g711.decode(law, payload))
        return self._write(payload)

    def finish(self, quiet: float) -> RecorderFailed | None:
        """End the recording, with silence for the ``quiet`` seconds since the caller's
        last frame (a caller who went quiet still gets a file as long as the call)."""
        if quiet > 0:
            frames = min(int(quiet / 0.02), MAX_GAP_SAMPLES // FRAME)
            failed = self._write(g711.silence(self.law, FRAME) * frames)
            if failed is not None:
                return failed
        self._close()
        return None

    def _write(self, data: bytes) -> RecorderFailed | None:
        if not data:
            return None
        try:
            self.sink.write(data)
        except SinkFull as exc:
            return self._fail("filesize", str(exc))
        except OSError as exc:
            return self._fail("error", f"{type(exc).__name__}: {exc}")
        return None

    def broke(self, exc: Exception) -> RecorderFailed:
        """A write raised what no sink's failure raises (a bug of ours): the recording
        ends as a write error would end it, said once, and the call goes on."""
        return self._fail("error", f"{type(exc).__name__}: {exc}")

    def _fail(self, reason: Literal["error", "filesize"], detail: str) -> RecorderFailed:
        logger.error("%s: recording stopped: %s", self.label, detail)
        self._close()  # what was written so far is kept (a size limit: all of it)
        return RecorderFailed(reason, detail)

    def _close(self) -> None:
        try:
            self.sink.close()
        except OSError as exc:
            logger.error("%s: recording could not be finished: %s", self.label, exc)


def runs(
    frames: list[tuple[int, bytes, float]], recording: CallerRecording | None
) -> list[tuple[int, bytes]]:
    """``frames`` (timestamp, payload, slot time) as :meth:`CallerRecording.frame` takes
    them: each run of frames that follow one another on the caller's RTP clock joined
    into one write, where the recording's sink says how much room it has left and the
    runs, and the silence that may go before each, fit in it. Otherwise (no such sink, a
    frame late or repeated, a size limit within reach) frame by frame, so a recording
    that reaches its size limit keeps every frame before it."""
    single = [(timestamp, payload) for timestamp, payload, _ in frames]
    room_of = getattr(recording.sink, "room", None) if recording is not None else None
    if room_of is None or recording is None or len(frames) < 2:
        return single
    room = room_of()
    joined: list[tuple[int, bytes]] = []
    parts: list[bytes] = []
    start, end = 0, recording.next_ts
    for timestamp, payload in single:
        if end is not None and (timestamp - end) & 0xFFFFFFFF > 0x7FFFFFFF:
            return single  # a frame late or repeated: CallerRecording.frame drops it alone
        if parts and timestamp == end:
            parts.append(payload)
        else:
            if parts:
                joined.append((start, b"".join(parts)))
            start, parts = timestamp, [payload]
        end = (timestamp + len(payload)) & 0xFFFFFFFF
    joined.append((start, b"".join(parts)))
    total = sum(len(payload) for _, payload in joined) + len(joined) * MAX_GAP_SAMPLES
    return single if room is not None and total > room else joined
