"""The usual RTP packet taken in C (callhook/media/inlet.py, _inlet.c) against Python's path.

Two sessions get the same datagrams at the same times: one through
``MediaSession.receive`` alone (the reference), the other through
``inlet.take_all`` as the media tick does, with what it leaves going to
``receive``. After every datagram the two must be the same, field by field
(receive state, jitter to the bit, the pre-roll, the frames awaiting detection,
events, counters). Each scenario also says which datagrams C must take and
which it must leave: a fast path that took nothing would pass the comparison.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from callhook.media import inlet, srtp
from callhook.media.bridge import Feed
from callhook.media.session import MAX_PACKETS_PER_SECOND, MediaSession
from callhook.media.srtp import SrtpContext
from callhook.store import wavfile
from callhook.store.wavfile import WavWriter
from tests.native import without

PEER = ("192.0.2.10", 40000)
ELSEWHERE = ("203.0.113.9", 6666)


def rtp(seq: int, ts: int, payload: bytes, pt: int = 0, ssrc: int = 7, first: int = 0x80) -> bytes:
    return struct.pack("!BBHII", first, pt, seq & 0xFFFF, ts & 0xFFFFFFFF, ssrc) + payload


def frame(i: int) -> bytes:
    return bytes((i * 7 + k) & 0xFF for k in range(160))


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        pass


def new_session(*, events: bool = True) -> MediaSession:
    session = MediaSession("PCMU", 0, 101 if events else None, PEER, label="t")
    session.batched = True  # as the media tick makes it
    session.expect_rtp(0.0)
    return session


def snapshot(session: MediaSession) -> dict[str, Any]:
    r = session.receiver
    return {
        "remote": session.remote,
        "latched": session.latched,
        "bucket": (session._bucket_start, session._bucket_count),
        "rtp_since": session._rtp_since,
        "last_audio": session._last_audio,
        "last_heard": session._last_heard,
        "preroll": list(session._preroll),
        "undetected": list(session.undetected),
        "events": list(session.events),
        "dropped": (session.flood_dropped, session.foreign_dropped, session.malformed),
        "receiver": (
            r.ssrc,
            r.received,
            r._max_seq,
            r._cycles,
            r._next,
            r._last_ts,
            r._history,
            r._jitter,
            r._last_arrival,
            dict(r._held),
            list(r._candidates),
            r.duplicates,
            r.late,
            r.foreign,
            r.ssrc_changes,
            r.expected,
        ),
    }


def run(
    datagrams: list[tuple[bytes, tuple[str, int], float]],
    setup: Any = None,
    arrivals: list[float] | None = None,
) -> tuple[list[bool], MediaSession, MediaSession]:
    """Feed both sessions; which datagrams C took. ``setup`` is applied to both.
    ``arrivals``: when each reached the host, as the media thread says (read at ``now``)."""
    reference, fast = new_session(), new_session()
    if setup is not None:
        setup(reference)
        setup(fast)
    taken: list[bool] = []
    key = (object(), fast)
    for i, (data, source, now) in enumerate(datagrams):
        came = None if arrivals is None else arrivals[i]
        reference.receive(data, source, now, came)
        item: inlet.Datagram = (key, data, source) if came is None else (key, data, source, came)
        rest, faults = inlet.take_all([item], now)
        assert faults == []
        for left in rest:
            fast.receive(left[1], left[2], now, came)
        taken.append(not rest)
        assert snapshot(fast) == snapshot(reference), f"after datagram {len(taken) - 1}"
    return taken, reference, fast


def in_order(n: int, *, seq0: int = 100, ts0: int = 1000, start: float = 0.0) -> list[Any]:
    return [(rtp(seq0 + i, ts0 + 160 * i, frame(i)), PEER, start + 0.02 * i) for i in range(n)]


def test_the_extension_is_built() -> None:
    # scripts/setup installs a C compiler; without the extension every packet runs in
    # Python (the same behaviour, more CPU per call). The tests below then fail too:
    # they say which packets C must take.
    assert inlet.native(), "callhook.media._inlet was not built: rerun scripts/setup"


FALLBACK = """
from callhook.media import gate, inlet, outlet
from callhook.media.session import MediaSession
from tests.unit.media.test_inlet import PEER, frame, rtp
# The tick's other native steps read the session's layout from _inlet: they stand down.
assert not inlet.native() and not outlet.native() and not gate.native()
session = MediaSession("PCMU", 0, 101, PEER)
session.batched = True
for i in range(5):
    data = rtp(100 + i, 160 * i, frame(i))
    rest, faults = inlet.take_all([((None, session), data, PEER)], 0.02 * i)
    assert len(rest) == 1 and faults == [] and not session.take(data, PEER, 0.02 * i)
    session.receive(data, PEER, 0.02 * i)
assert session.receiver.received == 5 and len(session.undetected) == 5
print("ok")
"""


def test_without_the_extension_python_receives_everything() -> None:
    assert without(["callhook.media._inlet"], FALLBACK).strip() == "ok"


def test_an_in_order_stream_is_taken_after_the_first_packet() -> None:
    taken, _, fast = run(in_order(30))
    assert taken == [False] + [True] * 29  # the first one starts the source: Python's
    assert len(fast.undetected) == 30 and len(fast._preroll) == 30


def test_jitter_is_the_same_to_the_bit_on_uneven_arrivals() -> None:
    times = [0.0, 0.021, 0.0395, 0.0612, 0.0799, 0.1003, 0.1251, 0.1399, 0.16, 0.1807]
    datagrams = [(rtp(10 + i, 5 + 160 * i, frame(i)), PEER, t) for i, t in enumerate(times)]
    taken, _, fast = run(datagrams)
    assert taken[1:] == [True] * 9
    assert fast.receiver._jitter > 0


def test_the_sequence_number_wraps_in_c() -> None:
    taken, _, fast = run(in_order(12, seq0=65530, ts0=0xFFFFFF00))
    assert all(taken[1:])
    assert fast.receiver._cycles == 65536 and fast.receiver._max_seq == 5


def test_a_gap_a_reordered_packet_and_a_duplicate_go_to_python() -> None:
    order = [0, 1, 2, 4, 3, 5, 5, 6, 7]  # 4 before 3: held; 5 twice
    datagrams = [(rtp(100 + i, 160 * i, frame(i)), PEER, 0.02 * k) for k, i in enumerate(order)]
    taken, _, _ = run(datagrams)
    assert taken == [False, True, True, False, False, True, False, True, True]


def test_a_lost_packet_skipped_after_the_hold() -> None:
    order = [0, 1, 3, 4, 5, 6, 7, 8]  # 2 never comes: the window gives up on it
    datagrams = [(rtp(100 + i, 160 * i, frame(i)), PEER, 0.02 * k) for k, i in enumerate(order)]
    taken, _, _ = run(datagrams)
    assert taken[:2] == [False, True] and not taken[2]
    assert taken[-1]  # once nothing is held, C takes the stream again


def test_a_new_source_is_python_until_it_is_the_current_one() -> None:
    first = in_order(5)
    other = [(rtp(9000 + i, 50 * i, frame(i), ssrc=99), PEER, 0.1 + 0.02 * i) for i in range(6)]
    taken, _, fast = run(first + other)
    assert taken[5:8] == [False, False, False]  # the switch (3 in sequence) is Python's
    assert taken[-1]
    assert fast.receiver.ssrc == 99 and fast.receiver.ssrc_changes == 1


def test_a_candidate_source_is_forgotten_by_the_current_one_in_c() -> None:
    datagrams = [*in_order(3), (rtp(1, 1, frame(1), ssrc=55), PEER, 0.05)]
    datagrams += [(rtp(103, 1000 + 480, frame(3)), PEER, 0.06)]
    taken, _, fast = run(datagrams)
    assert taken == [False, True, True, False, True]
    assert fast.receiver._candidates == []


def test_the_flood_limit_is_python_past_the_limit() -> None:
    n = MAX_PACKETS_PER_SECOND + 20
    datagrams = [(rtp(100 + i, 160 * i, frame(i)), PEER, 0.001 * i) for i in range(n)]
    taken, _, fast = run(datagrams)
    assert all(taken[1:MAX_PACKETS_PER_SECOND]) and not any(taken[MAX_PACKETS_PER_SECOND:])
    assert fast.flood_dropped == 20
    # A new second: C again, from the next packet the receiver has not seen.
    later = MAX_PACKETS_PER_SECOND
    more, _, _ = run([*datagrams, (rtp(100 + later, 160 * later, frame(0)), PEER, 1.5)])
    assert more[-1]


def test_the_flood_limit_counts_by_arrival_so_a_backlog_read_late_is_no_flood() -> None:
    # Four seconds of a call's packets left in the kernel while Python was behind, read
    # at once: they came at 50 a second.
    n = 200
    datagrams = [(rtp(100 + i, 160 * i, frame(i)), PEER, 4.0) for i in range(n)]
    taken, reference, fast = run(datagrams, arrivals=[0.02 * i for i in range(n)])
    assert all(taken[1:]) and fast.flood_dropped == reference.flood_dropped == 0
    # Without the arrival times, the same burst was a flood.
    taken, _, fast = run(datagrams)
    assert fast.flood_dropped == n - MAX_PACKETS_PER_SECOND
    # A flood that came as fast as it was read is still one.
    taken, _, fast = run(datagrams, arrivals=[3.0 + 0.001 * i for i in range(n)])
    assert not any(taken[MAX_PACKETS_PER_SECOND:])
    assert fast.flood_dropped == n - MAX_PACKETS_PER_SECOND


def test_other_sources_payload_types_and_headers_go_to_python() -> None:
    datagrams = in_order(3)
    datagrams += [
        (rtp(103, 1480, frame(3)), ELSEWHERE, 0.06),  # not the peer
        (rtp(103, 1480, b"\x01\x00\x00\xa0", pt=101), PEER, 0.07),  # telephone-event
        (rtp(103, 1480, frame(3), pt=8), PEER, 0.08),  # not negotiated
        (rtp(103, 1480, frame(3), first=0x90), PEER, 0.09),  # an extension bit
        (rtp(103, 1480, b""), PEER, 0.10),  # a bare header
        (b"\x80\x00", PEER, 0.11),  # not RTP
        (rtp(104, 1640, frame(4)), PEER, 0.12),  # the next one: C again
    ]
    taken, _, fast = run(datagrams)
    assert taken[3:] == [False, False, False, False, False, False, True]
    assert fast.foreign_dropped == 1 and fast.malformed >= 2


def test_with_srtp_or_before_the_tick_batches_nothing_is_taken() -> None:
    key = srtp.new_key()

    def protect(session: MediaSession) -> None:
        session.srtp = SrtpContext(key, key)

    taken, _, _ = run(in_order(5), protect)
    assert not any(taken)

    def unbatched(session: MediaSession) -> None:
        session.batched = False

    taken, _, fast = run(in_order(5), unbatched)
    assert not any(taken) and fast.undetected == []


def test_no_rtp_timeout_clock_is_left_alone() -> None:
    def never(session: MediaSession) -> None:
        session._rtp_since = None

    taken, _, fast = run(in_order(5), never)
    assert all(taken[1:]) and fast._rtp_since is None


def test_a_bridge_and_a_recording_hear_what_c_takes() -> None:
    def bridge_and_record(session: MediaSession) -> None:
        session.tells = Feed("ulaw", "ulaw")
        session.start_recording(Sink(), None, 0.0)

    taken, reference, fast = run(in_order(10), bridge_and_record)
    assert all(taken[1:])
    assert reference._recording is not None and fast._recording is not None
    assert fast._recording.sink.data == reference._recording.sink.data  # type: ignore[attr-defined]
    assert reference.tells is not None and fast.tells is not None
    assert [fast.tells.frame() for _ in range(5)] == [reference.tells.frame() for _ in range(5)]


def test_a_packet_whose_taking_raises_is_a_fault_and_the_others_go_on() -> None:
    class Broken:
        def push(self, payload: bytes) -> None:
            raise RuntimeError("a bug in the bridge")

    good, bad = new_session(), new_session()
    for session in (good, bad):
        session.receive(rtp(100, 0, frame(0)), PEER, 0.0)  # the source starts (Python)
    bad.tells = Broken()  # type: ignore[assignment]
    keys = [("good", good), ("bad", bad), ("rtcp", None)]
    received = [(k, rtp(101, 160, frame(1)), PEER) for k in keys]
    rest, faults = inlet.take_all(received, 0.02)
    assert [item[0] for item in rest] == [keys[2]]  # RTCP's: not an inlet
    assert len(faults) == 1 and faults[0][0] == keys[1]
    assert isinstance(faults[0][1], RuntimeError) and faults[0][1].__traceback__ is not None
    assert len(good.undetected) == 2


def test_a_calls_packets_keep_their_order_in_one_tick() -> None:
    # Up to six packets of a call come in one tick: once one is left to Python, the ones
    # after it are too, so Python sees them in the order they came (a packet taken in C
    # must not overtake one that Python has yet to see).
    reference, fast = new_session(), new_session()
    key = (object(), fast)
    start = [rtp(100 + i, 160 * i, frame(i)) for i in range(3)]
    ticks = [
        start,
        # another source's packet, then the current source's next: it forgets the other
        [rtp(7000, 5, frame(1), ssrc=99), rtp(103, 480, frame(3))],
        # a duplicate (a jitter sample of its own), then the next two
        [rtp(103, 480, frame(3)), rtp(104, 640, frame(4)), rtp(105, 800, frame(5))],
        # all in order: C takes them all
        [rtp(106, 960, frame(6)), rtp(107, 1120, frame(7))],
    ]
    taken = []
    for t, datagrams in enumerate(ticks):
        now = 0.02 * t + 0.0013 * t * t
        for data in datagrams:
            reference.receive(data, PEER, now)
        rest, faults = inlet.take_all([(key, d, PEER) for d in datagrams], now)
        assert faults == []
        for _, data, source in rest:
            fast.receive(data, source, now)
        taken.append(len(datagrams) - len(rest))
        assert snapshot(fast) == snapshot(reference), f"after tick {t}"
    assert taken == [0, 0, 0, 2]
    assert fast.receiver._candidates == []


def test_take_is_take_all_for_one_packet() -> None:
    session = new_session()
    session.receive(rtp(100, 0, frame(0)), PEER, 0.0)
    assert session.take(rtp(101, 160, frame(1)), PEER, 0.02) is True
    assert session.take(rtp(101, 160, frame(1)), PEER, 0.04) is False  # a duplicate
    assert session.receiver.received == 2


# --- a recording of the caller: its usual frame written in C too ------------------------


def recorded(session: MediaSession) -> tuple[Any, ...]:
    recording = session._recording
    if recording is None:
        return (None,)
    writer = recording.sink
    assert isinstance(writer, WavWriter)
    return (
        recording.next_ts,
        writer.length,
        list(writer._pending),
        writer._pending_bytes,
        writer._broken,
    )


def record_both(
    tmp_path: Path,
    datagrams: list[tuple[bytes, tuple[str, int], float]],
    law: str | None = None,
    writer_class: type[WavWriter] = WavWriter,
    **limits: Any,
) -> tuple[int, bytes, bytes]:
    """Both sessions record into WAV files; how many frames reached Python's ``_audio``,
    and the two files once finished."""
    reference, fast = new_session(), new_session()
    for session, name in ((reference, "reference.wav"), (fast, "fast.wav")):
        writer = writer_class(tmp_path / name, law or "ulaw", **limits)
        session.start_recording(writer, law, 0.0)  # type: ignore[arg-type]
    in_python = 0
    audio = fast._audio

    def counting(
        payload: bytes,
        timestamp: int,
        now: float,
        ssrc: int | None = None,
        heard: float | None = None,
    ) -> None:
        nonlocal in_python
        in_python += 1
        audio(payload, timestamp, now, ssrc, heard)

    fast._audio = counting  # type: ignore[method-assign]
    key = (object(), fast)
    for i, (data, source, now) in enumerate(datagrams):
        reference.receive(data, source, now)
        rest, faults = inlet.take_all([(key, data, source)], now)
        assert faults == []
        for _, left, address in rest:
            fast.receive(left, address, now)
        assert snapshot(fast) == snapshot(reference), f"after datagram {i}"
        assert recorded(fast) == recorded(reference), f"after datagram {i}"
    reference.stop_recording(0.0)
    fast.stop_recording(0.0)
    return (
        in_python,
        (tmp_path / "reference.wav").read_bytes(),
        (tmp_path / "fast.wav").read_bytes(),
    )


def test_a_recordings_usual_frames_are_written_in_c(tmp_path: Path) -> None:
    in_python, reference, fast = record_both(tmp_path, in_order(60))
    assert fast == reference and len(reference) > 60 * 160
    # Python's _audio: the first frame (the recording's timeline starts there) and each
    # frame that makes the file due to be written (every FLUSH_BYTES: 10 frames).
    assert in_python == 1 + 60 // (wavfile.FLUSH_BYTES // 160)


def test_frames_waiting_for_their_slot_are_written_before_one_c_would_take(
    tmp_path: Path,
) -> None:
    """The media thread's frames of a recording that wait for Python's slot
    (``MediaSession._ahead``) are the file's next: C leaves the next frame's writing to
    Python's ``_audio``, which writes them first, even where that frame's timestamp (a
    peer that repeats one) would continue the file's timeline."""
    session = new_session()
    writer = WavWriter(tmp_path / "r.wav", "ulaw")
    session.start_recording(writer, None, 0.0)
    session.receive(rtp(100, 1000, frame(0)), PEER, 0.0)  # (the timeline's first: Python)
    assert session.take(rtp(101, 1160, frame(1)), PEER, 0.02) is True  # usual: C writes it
    waiting = bytes([0x55]) * 160
    session._ahead.append((1320, waiting, 0.04))
    assert session.take(rtp(102, 1320, frame(2)), PEER, 0.06) is True  # (through _audio)
    assert session._ahead == []
    assert writer._pending == [frame(0), frame(1), waiting]  # (the repeated one: covered)
    session.stop_recording(0.1)


def test_a_gap_another_law_and_the_recordings_limits_go_to_python(tmp_path: Path) -> None:
    gap = in_order(10) + in_order(10, seq0=110, ts0=1000 + 160 * 13, start=0.2)
    in_python, reference, fast = record_both(tmp_path / "gap", gap)
    assert fast == reference and 2 <= in_python <= 4  # the gap's silence: Python
    in_python, reference, fast = record_both(tmp_path / "alaw", in_order(20), law="alaw")
    assert fast == reference and in_python == 20  # transcoded: every frame
    # The recording's own maximum (audio past it dropped), the process's size limit.
    in_python, reference, fast = record_both(tmp_path / "limit", in_order(20), limit_bytes=800)
    assert fast == reference and in_python == 1 + 15  # from the frame that reaches it on
    in_python, reference, fast = record_both(tmp_path / "max", in_order(20), max_bytes=1200)
    # The frame that would pass it ends the recording (reason filesize) in Python; the
    # frames after it are no longer recorded.
    assert fast == reference and in_python == 2


def test_a_writer_of_another_class_is_written_by_python(tmp_path: Path) -> None:
    class Writer(WavWriter):
        """A subclass may write otherwise: C follows WavWriter exactly, nothing else."""

    in_python, reference, fast = record_both(tmp_path, in_order(20), writer_class=Writer)
    assert fast == reference and in_python == 20


def test_a_source_equal_to_the_peer_is_taken_until_the_peer_moves() -> None:
    """The receiving side hands the same address object while a source stays: C
    remembers that it equalled the peer, and forgets it when the peer changes."""
    reference, fast = new_session(), new_session()
    source = (PEER[0], PEER[1] + 0)  # equal to the peer, not the same object
    key = (object(), fast)

    def feed(data: bytes, address: tuple[str, int], now: float) -> bool:
        reference.receive(data, address, now)
        rest, faults = inlet.take_all([(key, data, address)], now)
        assert faults == []
        for _, left, at in rest:
            fast.receive(left, at, now)
        assert snapshot(fast) == snapshot(reference)
        return not rest

    assert source == PEER and source is not fast.remote
    packets = [(data, source, now) for data, _, now in in_order(6)]
    assert [feed(*p) for p in packets[:3]] == [False, True, True]
    # The peer is elsewhere now, still latched: the same source object is a stranger
    # (Python drops its packets as foreign; a cache keyed on the source alone would not).
    for session in (reference, fast):
        session.remote = session.offered = ELSEWHERE
    assert [feed(*p) for p in packets[3:]] == [False, False, False]
    assert fast.foreign_dropped == 3 and fast.remote == ELSEWHERE


def test_the_preroll_is_a_bounded_deque_of_frames() -> None:
    """inlet.Preroll (C) against collections.deque(maxlen), step by step: appends past
    the bound, clears, iteration while appending."""
    import random
    from collections import deque

    rng = random.Random(4)
    ring, reference = inlet.Preroll(5), deque[tuple[int, bytes]](maxlen=5)
    assert ring.maxlen == 5
    for step in range(400):
        if rng.random() < 0.05:
            ring.clear()
            reference.clear()
        else:
            item = (rng.randrange(2**32), bytes([step & 0xFF]) * rng.randrange(1, 4))
            ring.append(item)
            reference.append(item)
        assert len(ring) == len(reference) and list(ring) == list(reference), step
    snapshot = iter(ring)
    ring.append((1, b"x"))
    assert list(snapshot) == list(reference)  # what it held when iteration began


def test_the_preroll_refuses_what_is_not_a_frame() -> None:
    ring = inlet.Preroll(2)
    for bad in [(1, "text"), ("1", b"x"), (1, b"x", 2), [1, b"x"]]:
        with pytest.raises(TypeError):
            ring.append(bad)  # type: ignore[arg-type]
    assert len(ring) == 0
    with pytest.raises(ValueError):
        inlet.Preroll(0)
    ring.append((5, bytearray(b"ab")))  # type: ignore[arg-type]  # bytes-like: kept as bytes
    [(timestamp, payload)] = list(ring)
    assert timestamp == 5 and payload == b"ab" and type(payload) is bytes
