"""RTP packets, send state and receive state (callhook.media.rtp)."""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callhook.media.rtp import RtpError, RtpPacket, RtpReceiver, RtpSender, pack_header

SSRC = 0x11223344
FRAME = 0.02


def pkt(seq: int, ts: int | None = None, ssrc: int = SSRC, pt: int = 0) -> RtpPacket:
    ts = (seq * 160) & 0xFFFFFFFF if ts is None else ts
    return RtpPacket(pt, False, seq & 0xFFFF, ts, ssrc, bytes([seq & 0xFF]) * 160)


def seqs(packets: Sequence[RtpPacket]) -> list[int]:
    return [p.sequence_number for p in packets]


def feed_all(rx: RtpReceiver, order: list[int], start: float = 0.0) -> list[list[int]]:
    """Feed packets with these sequence numbers, one per 20 ms; the playout of each feed."""
    return [seqs(rx.feed(pkt(s), start + i * FRAME)) for i, s in enumerate(order)]


# ----------------------------------------------------------------------------- packets


def test_parse_and_serialize_plain_packet() -> None:
    data = bytes.fromhex("80 08 1234 000003e8 deadbeef") + b"\xd5" * 160
    p = RtpPacket.parse(data)
    assert (p.payload_type, p.marker, p.sequence_number, p.timestamp, p.ssrc) == (
        8,
        False,
        0x1234,
        1000,
        0xDEADBEEF,
    )
    assert p.payload == b"\xd5" * 160
    assert p.csrc == () and p.extension is None
    assert p.serialize() == data


def test_parse_rfc4733_telephone_event_packet() -> None:
    # RFC 4733 §2.3: event 1 ("1"), E=0, volume 10, duration 160; first packet: marker set.
    header = bytes([0x80, 0x80 | 101]) + struct.pack("!HII", 7, 48000, 0xCAFEF00D)
    data = header + bytes([1, 10]) + struct.pack("!H", 160)
    p = RtpPacket.parse(data)
    assert p.payload_type == 101
    assert p.marker is True
    assert (p.sequence_number, p.timestamp, p.ssrc) == (7, 48000, 0xCAFEF00D)
    event, flags, duration = struct.unpack("!BBH", p.payload)
    assert (event, flags >> 7, flags & 0x3F, duration) == (1, 0, 10, 160)
    # End packet: E bit set.
    end = RtpPacket.parse(bytes([0x80, 101]) + data[2:13] + bytes([0x80 | 10, 0x03, 0x20]))
    assert end.marker is False and end.payload[1] & 0x80


def test_parse_csrc_extension_and_padding() -> None:
    first = 0x80 | 0x20 | 0x10 | 2  # V=2, P, X, CC=2
    data = bytes([first, 0]) + struct.pack("!HII", 1, 2, 3)
    data += struct.pack("!II", 0xAAAA0001, 0xAAAA0002)  # CSRC list
    data += struct.pack("!HH", 0xBEDE, 1) + b"\x10\x22\x00\x00"  # one-word extension
    data += b"payload!" + b"\x00\x00\x03"  # 3 bytes of padding, count last
    p = RtpPacket.parse(data)
    assert p.csrc == (0xAAAA0001, 0xAAAA0002)
    assert p.extension == (0xBEDE, b"\x10\x22\x00\x00")
    assert p.payload == b"payload!"
    # Serialize writes the same header fields back (without the padding).
    again = RtpPacket.parse(p.serialize())
    assert again == p


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "shorter"),
        (bytes.fromhex("8000 0001 00000001 000000"), "shorter"),  # 11 bytes
        (bytes.fromhex("4000 0001 00000001 00000001"), "version 1"),
        (bytes.fromhex("0000 0001 00000001 00000001"), "version 0"),
        (bytes.fromhex("c000 0001 00000001 00000001"), "version 3"),
        (bytes.fromhex("8300 0001 00000001 00000001 00000001"), "CSRC"),
        (bytes.fromhex("9000 0001 00000001 00000001 bede"), "extension"),
        (bytes.fromhex("9000 0001 00000001 00000001 bede0002 00000000"), "extension"),
        (bytes.fromhex("a000 0001 00000001 00000001 aabb00"), "padding"),  # count 0
        (bytes.fromhex("a000 0001 00000001 00000001 aabb09"), "padding"),  # > remaining
    ],
)
def test_parse_rejects_bad_packets(data: bytes, why: str) -> None:
    with pytest.raises(RtpError):
        RtpPacket.parse(data)


def test_pack_header() -> None:
    assert pack_header(0, 1, 2, 3, False) == bytes.fromhex("80 00 0001 00000002 00000003")
    assert pack_header(101, 0xFFFF, 0xFFFFFFFF, 0xDEADBEEF, True) == bytes.fromhex(
        "80 e5 ffff ffffffff deadbeef"
    )
    assert pack_header(8, 0x10000, 1 << 32, 1, False)[2:8] == bytes(6)  # wrapped
    p = RtpPacket.parse(pack_header(101, 9, 10, 11, True) + b"\x01\x0a\x00\xa0")
    assert (p.payload_type, p.marker, p.sequence_number, p.timestamp, p.ssrc) == (
        101,
        True,
        9,
        10,
        11,
    )


# ----------------------------------------------------------------------------- sender


def test_sender_frames_timestamps_marker_and_counters() -> None:
    tx = RtpSender(0, ssrc=5, sequence=0xFFFE, timestamp=0xFFFFFF00)
    packets = [RtpPacket.parse(tx.frame(b"\xff" * 160)) for _ in range(3)]
    assert seqs(packets) == [0xFFFE, 0xFFFF, 0]
    assert [p.timestamp for p in packets] == [0xFFFFFF00, 0xFFFFFFA0, 0x40]
    assert [p.marker for p in packets] == [True, False, False]  # first packet of the stream
    assert {p.ssrc for p in packets} == {5}
    assert (tx.packets, tx.octets) == (3, 480)


def test_sender_talkspurts_and_events() -> None:
    tx = RtpSender(8, ssrc=1, sequence=100, timestamp=1000)
    tx.frame(b"a" * 160)
    tx.advance(320)  # two frames of silence, not sent
    spurt = RtpPacket.parse(tx.frame(b"b" * 160))
    assert (spurt.marker, spurt.timestamp, spurt.sequence_number) == (True, 1480, 101)
    # An RFC 4733 event: same timestamp on every packet, sequence advancing.
    start = tx.timestamp
    first = RtpPacket.parse(tx.packet(b"\x05\x0a\x00\xa0", 101, start, True))
    tx.advance(160, silence=False)
    update = RtpPacket.parse(tx.packet(b"\x05\x0a\x01\x40", 101, start, False))
    tx.advance(160, silence=False)
    audio = RtpPacket.parse(tx.frame(b"c" * 160))
    assert (first.payload_type, first.marker, first.timestamp) == (101, True, 1640)
    assert (update.marker, update.timestamp, update.sequence_number) == (False, 1640, 103)
    assert (audio.marker, audio.timestamp, audio.sequence_number) == (False, 1960, 104)
    assert (tx.packets, tx.octets) == (5, 160 * 3 + 8)
    sr = tx.sender_report(ntp_timestamp=1 << 32)
    assert (sr.ssrc, sr.rtp_timestamp, sr.packet_count, sr.octet_count) == (1, 2120, 5, 488)


def test_sender_random_start() -> None:
    a = RtpSender(0, rng=random.Random(1))
    b = RtpSender(0, rng=random.Random(1))
    c = RtpSender(0, rng=random.Random(2))
    assert (a.ssrc, a.sequence, a.timestamp) == (b.ssrc, b.sequence, b.timestamp)
    assert (a.ssrc, a.sequence, a.timestamp) != (c.ssrc, c.sequence, c.timestamp)
    d, e = RtpSender(0), RtpSender(0)  # system randomness
    assert (d.ssrc, d.timestamp) != (e.ssrc, e.timestamp)


# ----------------------------------------------------------------------------- receiver order


def test_in_order_packets_play_at_once() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [10, 11, 12]) == [[10], [11], [12]]
    assert (rx.ssrc, rx.received, rx.expected, rx.cumulative_lost) == (SSRC, 3, 3, 0)


def test_wrap_around_65535_to_0() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [65533, 65534, 65535, 0, 1, 2]) == [
        [65533],
        [65534],
        [65535],
        [0],
        [1],
        [2],
    ]
    assert rx.extended_highest_sequence == 65536 + 2
    assert (rx.expected, rx.received, rx.cumulative_lost) == (6, 6, 0)


def test_reorder_across_the_wrap() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [65534, 0, 65535, 1]) == [[65534], [], [65535, 0], [1]]
    assert rx.extended_highest_sequence == 65536 + 1
    assert rx.cumulative_lost == 0


def test_reorder_within_window_is_delivered_in_order() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [1, 2, 4, 3, 5]) == [[1], [2], [], [3, 4], [5]]
    # the missing packet may come after 3 later ones (reorder_window=3)
    rx = RtpReceiver()
    assert feed_all(rx, [1, 3, 4, 5, 2, 6]) == [[1], [], [], [], [2, 3, 4, 5], [6]]
    assert rx.late == 0 and rx.cumulative_lost == 0


def test_gap_beyond_window_is_skipped_and_the_straggler_dropped_as_late() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [1, 3, 4, 5, 6, 2, 7]) == [[1], [], [], [], [3, 4, 5, 6], [], [7]]
    assert rx.late == 1 and rx.duplicates == 0
    # statistics (A.3) count the late packet as received: nothing lost
    assert rx.cumulative_lost == 0


def test_real_loss_is_skipped_after_the_window() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [1, 2, 4, 5, 6, 7, 8]) == [[1], [2], [], [], [], [4, 5, 6, 7], [8]]
    assert rx.cumulative_lost == 1
    # a large forward jump (20 lost) plays at once: nothing worth waiting for
    assert seqs(rx.feed(pkt(30), 1.0)) == [30]
    assert rx.cumulative_lost == 22


def test_held_packets_are_released_after_max_hold() -> None:
    rx = RtpReceiver(max_hold=0.06)
    assert seqs(rx.feed(pkt(1), 0.00)) == [1]
    assert seqs(rx.feed(pkt(3), 0.04)) == []
    assert seqs(rx.poll(0.09)) == []  # held 50 ms
    assert seqs(rx.poll(0.10)) == [3]  # held 60 ms: give up on 2
    assert seqs(rx.poll(0.2)) == []
    # the next packet after a timed-out hold also releases what is overdue
    assert seqs(rx.feed(pkt(5), 0.20)) == []
    assert seqs(rx.feed(pkt(6), 0.30)) == [5, 6]


def test_flush_releases_everything_held_in_order() -> None:
    rx = RtpReceiver()
    feed_all(rx, [1, 4, 3])
    assert seqs(rx.flush()) == [3, 4]
    assert rx.flush() == []


def test_duplicates_and_late_packets_are_dropped() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [1, 2, 2, 1, 4, 4, 3, 3]) == [[1], [2], [], [], [], [], [3, 4], []]
    assert rx.duplicates == 4  # 2, 1 (already played), 4 (held), 3 (already played)
    assert rx.late == 0
    # RFC 3550 §6.4.1: duplicates count as received, so "lost" goes negative
    assert (rx.expected, rx.received, rx.cumulative_lost) == (4, 8, -4)


def test_a_packet_from_before_the_first_is_late() -> None:
    rx = RtpReceiver()
    assert feed_all(rx, [100, 99, 101]) == [[100], [], [101]]
    assert rx.late == 1


# ----------------------------------------------------------------------------- receiver source


def test_ssrc_change_after_three_sequential_packets() -> None:
    rx = RtpReceiver()
    old = [seqs(rx.feed(pkt(s, ssrc=1), i * FRAME)) for i, s in enumerate([500, 501, 502])]
    assert old == [[500], [501], [502]]
    # The peer restarts its stream: new SSRC, new sequence numbers.
    new = [seqs(rx.feed(pkt(s, ssrc=2), 0.1 + i * FRAME)) for i, s in enumerate([7000, 7001, 7002])]
    assert new == [[], [], [7000, 7001, 7002]]
    assert rx.ssrc == 2 and rx.ssrc_changes == 1
    assert (rx.expected, rx.received, rx.cumulative_lost) == (3, 3, 0)  # statistics restart
    assert seqs(rx.feed(pkt(7003, ssrc=2), 0.2)) == [7003]
    assert rx.foreign == 0  # the three candidates played
    assert rx.feed(pkt(503, ssrc=1), 0.21) == []  # the old source is now the stranger
    assert rx.foreign == 1


def test_stray_packets_of_another_ssrc_do_not_take_over() -> None:
    rx = RtpReceiver()
    played: list[int] = []
    for i, s in enumerate(range(10, 20)):
        played += seqs(rx.feed(pkt(s, ssrc=1), i * FRAME))
        # another source interleaved (e.g. a forked early-media stream), never 3 in a row
        played += seqs(rx.feed(pkt(900 + i, ssrc=2), i * FRAME + 0.001))
    assert played == list(range(10, 20))
    assert rx.ssrc == 1 and rx.ssrc_changes == 0
    assert rx.foreign == 10
    # packets of a candidate that are not in sequence do not add up either
    for s in (1, 5, 9):
        rx.feed(pkt(s, ssrc=3), 1.0)
    assert rx.ssrc == 1


def test_ssrc_change_plays_what_the_old_source_left_held() -> None:
    rx = RtpReceiver()
    feed_all(rx, [1, 3])
    out = [seqs(rx.feed(pkt(s, ssrc=2), 1.0)) for s in (50, 51, 52)]
    assert out == [[], [], [3, 50, 51, 52]]


def test_sequence_restart_within_the_same_ssrc_resynchronises() -> None:
    rx = RtpReceiver()
    feed_all(rx, [100, 101])
    assert seqs(rx.feed(pkt(40000), 0.1)) == []  # one wild packet: dropped (A.1)
    assert seqs(rx.feed(pkt(40001), 0.12)) == [40000, 40001]  # confirmed: a restart
    assert seqs(rx.feed(pkt(40002), 0.14)) == [40002]
    assert (rx.expected, rx.received) == (2, 2)  # A.1 counts from the restart
    # a single wild packet that is not confirmed is just dropped
    assert rx.feed(pkt(9000), 0.16) == []
    assert seqs(rx.feed(pkt(40003), 0.18)) == [40003]


# ----------------------------------------------------------------------------- receiver statistics


def reference_jitter(arrivals: list[float], timestamps: list[int], rate: int) -> float:
    """RFC 3550 §6.4.1 / A.8 written out directly: J += (|D(i-1,i)| - J) / 16."""
    jitter = 0.0
    for i in range(1, len(arrivals)):
        d = (arrivals[i] * rate - timestamps[i]) - (arrivals[i - 1] * rate - timestamps[i - 1])
        jitter += (abs(d) - jitter) / 16
    return jitter


def test_jitter_matches_a8_on_a_synthetic_arrival_pattern() -> None:
    gen = random.Random(7)
    timestamps = [1000 + 160 * i for i in range(300)]
    # network delay 30 ms +- up to 15 ms, in order (so no reordering changes the arrival order)
    arrivals = [5.0 + i * FRAME + 0.030 + gen.uniform(-0.009, 0.009) for i in range(300)]
    rx = RtpReceiver()
    for i, (at, ts) in enumerate(zip(arrivals, timestamps, strict=True)):
        rx.feed(pkt(i, ts=ts), at)
    expected = reference_jitter(arrivals, timestamps, 8000)
    assert rx.jitter == pytest.approx(expected, rel=1e-9)
    assert 10 < expected < 100  # samples: a few ms of jitter, as generated
    block = rx.report_block(20.0)
    assert block is not None and block.jitter == int(expected)


def test_jitter_of_a_perfectly_paced_stream_is_zero_and_wrap_safe() -> None:
    rx = RtpReceiver()
    for i in range(50):
        rx.feed(pkt(i, ts=(0xFFFFF000 + 160 * i) & 0xFFFFFFFF), 100.0 + i * FRAME)
    assert rx.jitter == pytest.approx(0.0, abs=1e-6)


def test_jitter_ignores_repeated_timestamps_of_telephone_events() -> None:
    rx = RtpReceiver()
    for i in range(10):  # an RFC 4733 event: same timestamp, one packet per 20 ms
        rx.feed(pkt(i, ts=8000, pt=101), i * FRAME)
    assert rx.jitter == 0.0


def test_loss_fraction_per_interval_and_cumulative() -> None:
    rx = RtpReceiver()
    lost = {10, 20, 30, 40, 50, 60, 70, 80, 90, 95}
    for i in range(100):
        if i not in lost:
            rx.feed(pkt(i), i * FRAME)
    block = rx.report_block(2.0)
    assert block is not None
    assert (block.ssrc, block.cumulative_lost, block.highest_sequence) == (SSRC, 10, 99)
    assert block.fraction_lost == (10 << 8) // 100  # 25/256, about 10 %
    for i in range(100, 200):  # a clean interval
        rx.feed(pkt(i), i * FRAME)
    block = rx.report_block(4.0)
    assert block is not None
    assert (block.fraction_lost, block.cumulative_lost, block.highest_sequence) == (0, 10, 199)


def test_report_block_before_any_packet_and_lsr_dlsr() -> None:
    rx = RtpReceiver()
    assert rx.report_block(0.0) is None
    rx.feed(pkt(1), 0.0)
    ntp = (0x83AA7E80 << 32) | 0x12345678
    rx.on_sender_report(0xBAD, ntp, 1.0)  # not our source: ignored
    block = rx.report_block(1.0)
    assert block is not None and (block.lsr, block.dlsr) == (0, 0)
    rx.on_sender_report(SSRC, ntp, 1.0)
    block = rx.report_block(1.5)
    assert block is not None
    assert block.lsr == 0x7E801234
    assert block.dlsr == 32768  # 0.5 s in 1/65536 s


def _stream_steps() -> st.SearchStrategy[list[tuple[int, int, int, float]]]:
    """Packets of a messy stream: (sequence, timestamp, ssrc, arrival step) — in order,
    reordered, repeated, lost, across the 65535 wrap, sequence jumps, a second source."""
    step = st.tuples(
        st.sampled_from([1, 1, 1, 1, 2, -1, 0, 5, -3, 4000, -4000]),
        st.sampled_from([160, 160, 0, 320]),
        st.sampled_from([7, 7, 7, 7, 9]),
        st.sampled_from([0.02, 0.0, 0.05, 0.2]),
    )
    return st.lists(step, min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(steps=_stream_steps(), start=st.integers(0, 0xFFFF))
def test_feed_next_counts_every_packet_as_feed_does(
    steps: list[tuple[int, int, int, float]], start: int
) -> None:
    """The receive path's fast path (no packet object for the usual packet) leaves the
    receiver exactly as feed() would, packet by packet, whatever the stream does."""
    plain, fast = RtpReceiver(), RtpReceiver()
    seq, ts, now = start, 1000, 10.0
    for dseq, dts, ssrc, dt in steps:
        seq, ts, now = (seq + dseq) & 0xFFFF, (ts + dts) & 0xFFFFFFFF, now + dt
        packet = RtpPacket(0, False, seq, ts, ssrc, b"\xff" * 160)
        expected = plain.feed(packet, now)
        got = [packet] if fast.feed_next(seq, ts, ssrc, now) else fast.feed(packet, now)
        assert [p.sequence_number for p in got] == [p.sequence_number for p in expected]
        assert state(fast) == state(plain)  # counters, jitter, held packets, all of it


#: The fields that live in the C base (callhook/media/inlet.py), which vars() does not see.
_CORE = (
    "ssrc _held _candidates received _max_seq _cycles _next _last_ts _history clock_rate "
    "_jitter _last_arrival"
).split()


def state(receiver: RtpReceiver) -> dict[str, object]:
    return {**vars(receiver), **{name: getattr(receiver, name) for name in _CORE}}
