"""A conference room's own recording: the room as one file, journaled and announced.

Started and stopped through the REST API (``/api/v1/conferences/{name}/recording``,
webservices/conferences.py) on the process that holds the room; it also stops when the
room ends. Each media tick, after the mix, the room's frames go into the file:

* ``mixed``: one channel, what a listener outside the room would hear: the sum of the
  talkers the mix takes (the muted, listeners and quiet talkers left out, as for the
  participants), saturated; silence while the room holds (nobody hears anybody then);
* ``separate``: one channel per participant, in the order they came (up to the
  recording's channels: later ones are not in the file), each what that participant
  said when it was heard by the room.

The file is G.711 µ-law in the application's store (``recordings/...``, named as a
``record`` action's), written by :class:`~callhook.store.wavfile.WavWriter` and kept in
the recordings journal from its start, so a crash loses nothing and its
``recording_available_page`` is notified once the file is durable, as a ``record``
action's is (docs/recordings.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from callhook.config.tables import RecordingsSettings
from callhook.media import g711
from callhook.media.bridge import FRAME
from callhook.media.sink import SinkFull
from callhook.store.diskspace import check_room
from callhook.store.files import MediaStore
from callhook.store.journal import RecordingJournal
from callhook.store.wavfile import WavWriter

logger = logging.getLogger("callhook.conference")

Mode = Literal["mixed", "separate"]
#: The most channels of a ``separate`` room recording.
MAX_CHANNELS = 16
#: The law of a room's recording.
LAW: g711.Law = "ulaw"


class Sink(Protocol):
    """Where a room recording's bytes go (``WavWriter``)."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class RoomRecording:
    """One room's recording, a tick at a time (see the module docstring)."""

    def __init__(
        self,
        room: str,
        filename: str,
        mode: Mode,
        channels: int,
        sink: Sink,
        started_at: float,
        on_end: Callable[[RoomRecording, float], None],
    ) -> None:
        """``channels``: a ``separate`` recording's (1 for ``mixed``); ``on_end``: told,
        with the time, when it ends (the journal's completion)."""
        self.room = room
        self.filename = filename
        self.mode = mode
        self.channels = channels if mode == "separate" else 1
        self.sink = sink
        self.started_at = started_at
        self.on_end = on_end
        #: Who is in which channel (``separate``), in the order they came.
        self.order: list[str] = []
        self.frames = 0
        self.sound = False
        self.ended = False
        #: Why it ended: ``stopped`` (asked), ``room_ended``, ``filesize`` ([recordings]
        #: max_mb reached), ``error`` (the file could not be written: a full disk).
        self.reason = "stopped"
        self._left_out: set[str] = set()

    @property
    def seconds(self) -> float:
        return self.frames * FRAME / 8000

    def tick(
        self, rows: npt.NDArray[np.int16], mixed: list[bool], pids: list[str], active: bool
    ) -> None:
        """One tick of the room: each participant's frame (``rows``, in ``pids``' order)
        and whether the mix took it; ``active``: the room has started."""
        if self.ended:
            return
        if self.mode == "mixed":
            frame = np.zeros(FRAME, dtype=np.int32)
            if active:
                for row, taken in zip(rows, mixed, strict=True):
                    if taken:
                        frame += row
            out = np.clip(frame, -32768, 32767).astype(np.int16)
        else:
            for pid in pids:
                if pid not in self.order and pid not in self._left_out:
                    if len(self.order) < self.channels:
                        self.order.append(pid)
                    else:
                        self._left_out.add(pid)
                        logger.warning(
                            "conference %r: recording %s has %d channels: %s is not in it",
                            self.room,
                            self.filename,
                            self.channels,
                            pid,
                        )
            at = {pid: i for i, pid in enumerate(pids)}
            block = np.zeros((FRAME, self.channels), dtype=np.int16)
            if active:
                for channel, pid in enumerate(self.order):
                    i = at.get(pid)
                    if i is not None and mixed[i]:
                        block[:, channel] = rows[i]
            out = block.reshape(-1)  # (interleaved: a sample of each channel in turn)
        if not self.sound and np.abs(out).max(initial=0) > 64:
            self.sound = True
        try:
            self.sink.write(g711.encode(LAW, out))
        except SinkFull as exc:
            logger.warning("conference %r: recording %s stopped: %s", self.room, self.filename, exc)
            self.end(self.started_at + self.seconds, "filesize")
            return
        except OSError as exc:  # (a full disk: the file keeps what it holds, the room goes on)
            logger.error("conference %r: recording %s failed: %s", self.room, self.filename, exc)
            self.end(self.started_at + self.seconds, "error")
            return
        self.frames += 1

    def end(self, now: float, reason: str = "stopped") -> None:
        """Stopped, or the room ended: the file is finished (and announced once durable)."""
        if self.ended:
            return
        self.ended = True
        self.reason = reason
        self.sink.close()
        self.on_end(self, now)


class RoomRecorder:
    """Makes a room's recording (``Conferences.open_recording``): its file in the
    application's store, in the recordings journal from its start (recovered after a
    crash), announced at its ``recording_available_page`` once durable."""

    def __init__(
        self,
        store: MediaStore,
        journal: RecordingJournal,
        now: Callable[[], float],
        recordings: Callable[[], RecordingsSettings],
    ) -> None:
        self.store = store
        self.journal = journal
        self.now = now
        #: ``[recordings]``'s limits, asked at each recording's start (a reload may
        #: change them).
        self.recordings = recordings

    def __call__(
        self, app: str, room: str, mode: Mode, channels: int, notify: tuple[str, str] | None
    ) -> RoomRecording:
        store, journal = self.store, self.journal
        filename = store.new_recording_name()
        channels = channels if mode == "separate" else 1
        body = {"is_notification": True, "conference_name": room, "channels": channels}
        journal.started(app, filename, encrypted=False, record_id="", notify=notify, body=body)
        limits = self.recordings()
        try:
            check_room(store.path(app, filename), limits.min_free_bytes)
            writer = WavWriter(
                store.path(app, filename),
                LAW,
                limits.max_bytes,
                on_durable=lambda w: journal.durable(app, filename, w.length),
                channels=channels,
            )
        except (OSError, ValueError) as exc:
            journal.failed(app, filename, f"cannot create {filename}: {exc}")
            raise OSError(f"cannot create {filename}: {exc}") from None

        def ended(recording: RoomRecording, now: float) -> None:
            result = {
                "filename": filename,
                "conference_name": room,
                "mode": mode,
                "channels": recording.order if mode == "separate" else [],
                "reason": recording.reason,
                "contains_sound": recording.sound,
                "seconds_duration": round(recording.seconds, 1),
            }
            journal.completed(app, filename, result)

        return RoomRecording(room, filename, mode, channels, writer, self.now(), ended)
