"""The recording's frames the media thread took (MediaSession._recorded): written a run of
consecutive frames at a time where the sink says how much room it has, and the file the
same, byte for byte, as when every frame is written on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from callhook.events import RecorderFailed
from callhook.media import g711
from callhook.media.player import FRAME
from callhook.media.session import MediaSession
from callhook.media.sink import SinkFull
from callhook.store.wavfile import WavWriter

PEER = ("192.0.2.10", 40000)


class Sink:
    """A recording's sink; ``room``: says how much more it takes (None: says nothing)."""

    def __init__(self, limit: int | None = None, room: bool = True) -> None:
        self.data = bytearray()
        self.writes = 0
        self.limit = limit
        if room:
            self.room = self._room

    def _room(self) -> int | None:
        return None if self.limit is None else self.limit - len(self.data)

    def write(self, data: bytes) -> None:
        if self.limit is not None and len(self.data) + len(data) > self.limit:
            raise SinkFull("full")
        self.writes += 1
        self.data += data

    def close(self) -> None:
        pass


def frames_at(timestamps: list[int]) -> list[tuple[int, bytes, float]]:
    """A frame at each RTP timestamp, each its own bytes (so a misplaced one shows)."""
    return [(ts, bytes([(ts // FRAME) % 200 + 20]) * FRAME, 0.0) for ts in timestamps]


def recorded(
    frames: list[tuple[int, bytes, float]], sink: Sink, law: str | None = None
) -> list[object]:
    session = MediaSession("PCMU", 0, 101, PEER)
    session.start_recording(sink, law, 0.0)  # type: ignore[arg-type]
    session._recorded(frames[:3])  # (what the recording expects next is then known)
    session._recorded(frames[3:])
    return list(session.events)


STEP = FRAME
CASES = {
    "consecutive": [i * STEP for i in range(30)],
    "a gap": [i * STEP for i in range(10)] + [i * STEP for i in range(13, 30)],
    "a repeat": [i * STEP for i in range(10)] + [9 * STEP] + [i * STEP for i in range(10, 20)],
    "one behind": [i * STEP for i in range(10)] + [i * STEP for i in range(8, 20)],
    "the clock wraps": [(2**32 - 5 * STEP + i * STEP) & 0xFFFFFFFF for i in range(20)],
    "a new line": [i * STEP for i in range(10)] + [500_000 + i * STEP for i in range(10)],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("law", [None, "alaw"])
def test_the_file_is_the_one_written_frame_by_frame(case: str, law: str | None) -> None:
    frames = frames_at(CASES[case])
    joined, alone = Sink(), Sink(room=False)
    assert recorded(frames, joined, law) == recorded(frames, alone, law) == []
    assert bytes(joined.data) == bytes(alone.data)
    assert alone.writes >= len(frames) - 3
    if case == "consecutive":
        assert joined.writes == 2  # a write for each of the two batches
    if case == "a gap":
        silence = g711.silence("alaw" if law else "ulaw", 3 * FRAME)
        assert bytes(joined.data[10 * FRAME : 13 * FRAME]) == silence


@pytest.mark.parametrize("limit_frames", [5, 12, 29])
def test_a_recording_reaching_its_size_limit_keeps_every_frame_before_it(
    limit_frames: int,
) -> None:
    frames = frames_at([i * STEP for i in range(30)])
    joined, alone = Sink(limit_frames * FRAME), Sink(limit_frames * FRAME, room=False)
    failed_joined, failed_alone = recorded(frames, joined), recorded(frames, alone)
    assert bytes(joined.data) == bytes(alone.data)
    assert len(joined.data) == limit_frames * FRAME
    assert failed_joined == failed_alone == [RecorderFailed("filesize", "full")]


def test_a_wav_writer_says_how_much_room_it_has(tmp_path: Path) -> None:
    unlimited = WavWriter(tmp_path / "a.wav", "ulaw")
    assert unlimited.room() is None
    writer = WavWriter(tmp_path / "b.wav", "ulaw", max_bytes=1000)
    writer.write(b"\xff" * 300)
    assert writer.room() == 700
    writer.write(b"\xff" * 700)
    assert writer.room() == 0
    with pytest.raises(SinkFull):
        writer.write(b"\xff")
    writer.close()
    unlimited.close()
