"""A conference room's own recording (telephony/roomrecording.py) with real rooms, real
media sessions and a real WAV file: mixed, what a listener outside the room hears;
separate, a channel per participant; stopped, ended with the room, or full. (Through the
REST API on live calls: tests/e2e/test_conferences.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callhook.events import JoinRoom, ParticipantOptions
from callhook.media import g711
from callhook.store.wavfile import WavWriter
from callhook.telephony.conferences import Conferences, LocalParticipant, participant_id
from callhook.telephony.roomrecording import LAW, Mode, RoomRecording
from tests.unit.telephony.test_conferences import Clock, call, tone

QUIET = ParticipantOptions(beep_on_entry=False)


class Files:
    """The recordings made, and how each ended."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.ended: list[tuple[str, float, str]] = []
        self.writers: dict[str, WavWriter] = {}

    def open(
        self, app: str, room: str, mode: Mode, channels: int, notify: Any, **kw: Any
    ) -> RoomRecording:
        name = f"{room}-{len(self.writers)}.wav"
        n = channels if mode == "separate" else 1
        writer = WavWriter(self.tmp_path / name, LAW, channels=n, **kw)
        self.writers[name] = writer

        def ended(recording: RoomRecording, now: float) -> None:
            self.ended.append((recording.filename, now, recording.reason))

        return RoomRecording(room, name, mode, channels, writer, 0.0, ended)

    def samples(self, name: str, channels: int = 1) -> np.ndarray:
        data = (self.tmp_path / name).read_bytes()
        body = data[data.index(b"data") + 8 :]
        return g711.decode(LAW, body).reshape(-1, channels)


def share(samples: np.ndarray, hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    return float(spectrum[np.abs(freqs - hz) <= 20].sum() / (spectrum.sum() or 1.0))


def room(tmp_path: Path) -> tuple[Conferences, Files, Clock, list[Any]]:
    clock = Clock()
    rooms = Conferences(clock)
    files = Files(tmp_path)
    rooms.open_recording = files.open
    calls = [call(n) for n in ("a", "b", "c")]
    for c in calls:
        rooms.join(LocalParticipant(c), JoinRoom("weekly", QUIET))
    return rooms, files, clock, calls


def talk(rooms: Conferences, calls: list[Any], hz: list[float], frames: int) -> None:
    for frame in range(frames):
        for c, f in zip(calls, hz, strict=True):
            session = c.media.session
            session.tells.push(g711.encode(session.law, tone(f, frame)))
        rooms.tick()


def test_a_mixed_recording_holds_every_talker_heard_and_not_the_muted(tmp_path: Path) -> None:
    rooms, files, clock, calls = room(tmp_path)
    recording = rooms.start_recording("app", "weekly", "mixed", 1, None)
    with pytest.raises(ValueError, match="recorded already"):
        rooms.start_recording("app", "weekly", "mixed", 1, None)
    with pytest.raises(KeyError):
        rooms.start_recording("app", "monthly", "mixed", 1, None)
    assert rooms.set_options("app", "weekly", "c", muted=True, talker=None)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 50)
    clock.now = 1.0
    stopped = rooms.stop_recording("app", "weekly")
    assert stopped is recording and recording.seconds == 1.0 and recording.sound
    assert files.ended == [(recording.filename, 1.0, "stopped")]
    pcm = files.samples(recording.filename)[:, 0]
    assert len(pcm) == 8000
    heard = {hz: share(pcm[800:], hz) for hz in (500.0, 900.0, 1300.0)}
    assert heard[500.0] > 0.4 and heard[900.0] > 0.4 and heard[1300.0] < 0.001, heard
    assert rooms.stop_recording("app", "weekly") is None  # (stopped already)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 5)  # (the room goes on, unrecorded)
    assert recording.seconds == 1.0


def test_a_separate_recording_has_a_channel_per_participant_in_order(tmp_path: Path) -> None:
    rooms, files, _, calls = room(tmp_path)
    recording = rooms.start_recording("app", "weekly", "separate", 2, None)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 25)
    assert recording.order == ["a", "b"]  # c came third: two channels
    rooms.stop_recording("app", "weekly")
    pcm = files.samples(recording.filename, 2)
    assert share(pcm[:, 0], 500.0) > 0.9 and share(pcm[:, 1], 900.0) > 0.9


def test_the_recording_ends_with_the_room(tmp_path: Path) -> None:
    rooms, files, clock, calls = room(tmp_path)
    recording = rooms.start_recording("app", "weekly", "mixed", 1, None)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 10)
    clock.now = 5.0
    for c in calls:
        rooms.leave(participant_id(c))
    assert files.ended == [(recording.filename, 5.0, "room_ended")]
    assert rooms.recordings == {}


def test_a_recording_that_reaches_the_size_limit_ends_and_the_room_goes_on(
    tmp_path: Path,
) -> None:
    rooms, files, _, calls = room(tmp_path)
    rooms.open_recording = lambda *a: files.open(*a, max_bytes=8000)  # one second
    recording = rooms.start_recording("app", "weekly", "mixed", 1, None)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 60)
    assert recording.ended and recording.reason == "filesize" and rooms.recordings == {}
    assert files.ended[0][2] == "filesize"


def test_a_recording_whose_disk_fails_ends_and_the_room_goes_on(tmp_path: Path) -> None:
    """A write that fails (a full disk) ends the recording with reason ``error``; the
    media tick goes on for the room's calls."""
    rooms, files, _, calls = room(tmp_path)

    class Failing:
        def write(self, data: bytes) -> None:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    def failing(app: str, name: str, mode: Mode, channels: int, notify: Any) -> RoomRecording:
        def ended(recording: RoomRecording, now: float) -> None:
            files.ended.append((recording.filename, now, recording.reason))

        return RoomRecording(name, "full.wav", mode, channels, Failing(), 0.0, ended)

    rooms.open_recording = failing
    rooms.start_recording("app", "weekly", "mixed", 1, None)
    talk(rooms, calls, [500.0, 900.0, 1300.0], 3)  # (no exception out of the tick)
    assert files.ended == [("full.wav", 0.0, "error")] and rooms.recordings == {}
    assert calls[0].media.session.hears is not None  # still in the room
