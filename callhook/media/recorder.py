"""What the caller sends, written into a recording's sink: the ``record`` action's file.
Pure (the sink is the only thing it writes to).

The file is the call's timeline, not just the packets that came: a gap in the caller's
RTP timestamps (lost packets, or a phone that stops sending while quiet or muted: silence
suppression, through which RFC 3551 §4.1's timestamps run on) becomes silence, up to
:data:`MAX_GAP_SAMPLES`, so the file lasts as long as the call did; so does the time
between the recording's start and the caller's first frame after it, and between a
source's last frame and the next source's first (RFC 3550 §5.1: each source's
timestamps start at random, so that gap is measured by the frames' arrival). A late or
repeated frame, already covered, is skipped; one further behind than
:data:`MAX_LATE_SAMPLES` is a sender whose clock went back, and starts a new timeline.
Frames are transcoded to the file's law when it differs from the call's. A sink that
refuses a write (full disk, the size limit) ends the recording with what was written so
far kept: :meth:`CallerRecording.frame` and :meth:`~CallerRecording.finish` then return
the :class:`~callhook.events.RecorderFailed` the session reports.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
#: How far behind the file's timeline a frame may be and still be taken for one late or
#: repeated (1 s). The receiver gives frames in sequence order, so a frame further behind
#: is new audio from a sender whose timestamps went back: it is written, not dropped.
MAX_LATE_SAMPLES = 8_000
_SECONDS = FRAME / 8000


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
    #: The media time the file's timeline begins at (None: at its first frame). Until a
    #: frame places the file on the caller's RTP clock (:meth:`anchor`), silence from
    #: then to that frame's arrival goes before it; a file that gets no frame is that
    #: long (:meth:`finish`).
    since: float | None = None

    def anchor(self, timestamp: int, when: float) -> None:
        """The frame at ``timestamp`` came at media time ``when`` (so its 20 ms end then):
        where the file has no place on the caller's RTP clock yet, it begins :attr:`since`,
        so the frame comes after silence for the time between (up to
        :data:`MAX_GAP_SAMPLES`)."""
        if self.next_ts is None and self.since is not None:
            lead = round((when - _SECONDS - self.since) / _SECONDS)
            lead = min(lead, MAX_GAP_SAMPLES // FRAME)
            if lead > 0:
                self.next_ts = (timestamp - lead * FRAME) & 0xFFFFFFFF

    def restart(self, since: float | None) -> None:
        """Another source (a new SSRC, whose timestamps have nothing to do with the
        last one's): the timeline goes on from media time ``since``, when the old source's
        last frame came (or the file's beginning, where that is later)."""
        self.next_ts = None
        if since is not None and (self.since is None or since > self.since):
            self.since = since

    def frame(self, payload: bytes, timestamp: int, law: Law) -> RecorderFailed | None:
        """One frame the caller sent (in the call's ``law``), after silence for any gap."""
        if self.next_ts is not None:
            gap = (timestamp - self.next_ts) & 0xFFFFFFFF
            if 0 < gap <= MAX_GAP_SAMPLES:
                failed = self._write(g711.silence(self.law, FRAME) * (gap // FRAME))
                if failed is not None:
                    return failed
            elif gap > 0x7FFFFFFF and (self.next_ts - timestamp) & 0xFFFFFFFF <= MAX_LATE_SAMPLES:
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


def opening(frames: Sequence[tuple[int, bytes]], span: int) -> tuple[int, list[tuple[int, bytes]]]:
    """Where a recording that begins ``span`` samples before the start of the last of
    ``frames`` (timestamp, payload: the caller's last audio, oldest first) begins on the
    caller's RTP clock, and the frames it begins with: those that start after that point,
    back to the first frame of another timestamp line. The point is on the last frame's
    20 ms grid, so where the frames run on without a gap the first of them is at it; where
    the caller sent nothing for a while (silence suppression), the file's first frame comes
    after silence from that point (:meth:`CallerRecording.frame`). ``span`` may be negative:
    a recording that begins after the caller's last frame."""
    last = frames[-1][0]
    first = len(frames)
    while first > 0 and (last - frames[first - 1][0]) & 0xFFFFFFFF < span:
        first -= 1
    # The first frame on the grid at which ``last - timestamp < span`` holds.
    start = (last - ((span + FRAME - 1) // FRAME - 1) * FRAME) & 0xFFFFFFFF
    if first < len(frames) and (frames[first][0] - start) & 0xFFFFFFFF > 0x7FFFFFFF:
        start = frames[first][0]  # (frames longer than 20 ms: not on that grid)
    return start, list(frames[first:])


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
