"""RFC 4733 telephone-events and SIP INFO DTMF bodies (callhook.media.dtmf).

The RTP streams are SIPp's own: the ``dtmf_2833_*.pcap`` files SIPp ships in
``/usr/share/sip-tester/`` (Debian package ``sip-tester``, which the test command installs).
They are read from there rather than copied: they are GPL-2.0-or-later, callhook is Apache-2.0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from callhook.media.dtmf import Rfc4733Receiver, parse_dtmf_relay

SIPP = Path("/usr/share/sip-tester")

NAMES = {"pound": "#", "star": "*"} | {str(d): str(d) for d in range(10)}


@dataclass(frozen=True)
class Rtp:
    time: float
    sequence: int
    timestamp: int
    payload_type: int
    payload: bytes


def read_pcap(path: Path) -> list[Rtp]:
    """The RTP packets of a classic pcap file: Ethernet (or raw IP), IPv4, UDP, RTP."""
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError("not a pcap file")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack_from(endian + "I", data, 20)[0]
    packets, pos = [], 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from(endian + "IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if link == 1:  # Ethernet, maybe 802.1Q tagged
            ethertype, off = struct.unpack_from("!H", frame, 12)[0], 14
            while ethertype == 0x8100:
                ethertype, off = struct.unpack_from("!H", frame, off + 2)[0], off + 4
            if ethertype != 0x0800:
                continue
            ip = frame[off:]
        elif link in (101, 228):  # raw IPv4
            ip = frame
        else:
            raise ValueError(f"link type {link}")
        if ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        udp = ip[(ip[0] & 0x0F) * 4 :]
        rtp = udp[8:]
        if len(rtp) < 12 or rtp[0] >> 6 != 2:
            continue
        header = 12 + 4 * (rtp[0] & 0x0F)
        if rtp[0] & 0x10:
            header += 4 + 4 * struct.unpack_from("!H", rtp, header + 2)[0]
        end = len(rtp) - (rtp[-1] if rtp[0] & 0x20 else 0)
        seq, ts = struct.unpack_from("!HI", rtp, 2)
        time = sec + frac / (1e9 if nano else 1e6)
        packets.append(Rtp(time, seq, ts, rtp[1] & 0x7F, bytes(rtp[header:end])))
    return packets


def sipp_stream(name: str) -> list[Rtp]:
    path = SIPP / f"dtmf_2833_{name}.pcap"
    if not path.exists():
        pytest.skip("SIPp's pcaps (Debian sip-tester) are not installed")
    packets = read_pcap(SIPP / f"dtmf_2833_{name}.pcap")
    assert packets and all(p.payload_type == 101 for p in packets)
    return packets


def feed(rx: Rfc4733Receiver, packets: list[Rtp], start: float = 0.0) -> list[str]:
    """Feed packets at their capture times (relative to the first, plus ``start``)."""
    t0 = packets[0].time if packets else 0.0
    digits = []
    for p in packets:
        digit = rx.feed(p.payload, p.timestamp, start + p.time - t0)
        if digit is not None:
            digits.append(digit)
    return digits


def event(code: int, duration: int, end: bool = False, volume: int = 10) -> bytes:
    return struct.pack("!BBH", code, (0x80 if end else 0) | volume, duration)


def press(code: int, ts: int, t: float, updates: int = 6, step: int = 160) -> list[Rtp]:
    """A press as most phones send it: updates every 20 ms, then 3 end packets."""
    out = [Rtp(t + 0.02 * i, i, ts, 101, event(code, i * step)) for i in range(updates)]
    last = updates * step
    t_end = t + 0.02 * updates
    out += [Rtp(t_end + 0.02 * k, updates + k, ts, 101, event(code, last, True)) for k in range(3)]
    return out


# ----------------------------------------------------------------------------- SIPp's pcaps


def test_the_sipp_pcaps_look_as_expected() -> None:
    # Start with the marker at duration 0, updates, then one end packet written three times
    # with the same sequence number: the shape the receiver must cope with.
    packets = sipp_stream("5")
    assert len(packets) == 10
    assert len({p.timestamp for p in packets}) == 1
    ends = [p for p in packets if p.payload[1] & 0x80]
    assert len(ends) == 3 and len({p.sequence for p in ends}) == 1
    assert packets[0].payload == event(5, 0)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_sipp_pcap_gives_exactly_one_digit(name: str) -> None:
    assert feed(Rfc4733Receiver(), sipp_stream(name)) == [NAMES[name]]


def test_the_digit_is_reported_at_the_first_packet() -> None:
    rx = Rfc4733Receiver()
    first, *rest = sipp_stream("star")
    assert rx.feed(first.payload, first.timestamp, 0.0) == "*"
    assert [rx.feed(p.payload, p.timestamp, 0.1) for p in rest] == [None] * len(rest)


def test_all_sipp_pcaps_one_after_another_on_one_receiver() -> None:
    rx = Rfc4733Receiver()
    order = ["1", "2", "3", "star", "0", "pound", "4", "5", "6", "7", "8", "9"]
    digits = []
    for i, name in enumerate(order):
        digits += feed(rx, sipp_stream(name), start=i * 0.5)
    assert "".join(digits) == "123*0#456789"


def test_the_same_pcap_played_twice_is_two_presses() -> None:
    # Stock SIPp replays a pcap unchanged: same timestamp, same sequence numbers.
    rx = Rfc4733Receiver()
    packets = sipp_stream("7")
    assert feed(rx, packets, start=0.0) + feed(rx, packets, start=1.0) == ["7", "7"]


def test_the_same_pcap_played_back_to_back_is_two_presses() -> None:
    rx = Rfc4733Receiver()
    packets = sipp_stream("7")
    length = packets[-1].time - packets[0].time
    assert feed(rx, packets, start=0.0) + feed(rx, packets, start=length + 0.02) == ["7", "7"]


def test_every_packet_delivered_twice_is_still_one_press() -> None:
    doubled = [p for p in sipp_stream("3") for _ in range(2)]
    assert feed(Rfc4733Receiver(), doubled) == ["3"]


# ----------------------------------------------------------------------------- loss, order


def test_a_press_whose_end_packets_are_all_lost_counts_once() -> None:
    rx = Rfc4733Receiver()
    packets = [p for p in sipp_stream("9") if not p.payload[1] & 0x80]
    assert feed(rx, packets) == ["9"]
    # And the next press (new timestamp) is still reported.
    assert feed(rx, press(9, ts=99_000, t=1.0), start=1.0) == ["9"]


def test_a_press_whose_first_packets_are_lost_counts_once() -> None:
    packets = sipp_stream("4")[5:]  # only the last two updates and the end packets
    assert feed(Rfc4733Receiver(), packets) == ["4"]


def test_only_end_packets_count_once() -> None:
    packets = [p for p in sipp_stream("4") if p.payload[1] & 0x80]
    assert feed(Rfc4733Receiver(), packets) == ["4"]


def test_a_late_update_after_the_end_packets_is_not_a_new_press() -> None:
    packets = press(2, ts=16_000, t=0.0)
    late = packets[4]  # duration 640 of a press that ended at 960
    reordered = [p for p in packets if p is not late] + [replace(late, time=packets[-1].time)]
    assert feed(Rfc4733Receiver(), reordered) == ["2"]


def test_a_late_packet_counts_only_for_a_press_not_yet_heard() -> None:
    """feed_late: packets the RTP reorder window had already skipped. Alone they are the
    press (it happened); after any packet of the press, even a short update, nothing."""
    rx = Rfc4733Receiver()
    assert rx.feed_late(event(7, 320), 8000, 0.0) == "7"
    assert rx.feed(event(7, 960), 8000, 0.02) is None
    assert rx.feed_late(event(7, 160), 8000, 0.04) is None
    rx = Rfc4733Receiver()
    assert rx.feed(event(3, 960, True), 16_000, 0.0) == "3"
    # In order, this would be a replay of the ended press (a new one); late, it is not.
    assert rx.feed_late(event(3, 160), 16_000, 0.02) is None
    assert rx.feed(event(3, 160), 16_000, 0.04) == "3"
    assert rx.feed_late(event(16, 160), 24_000, 0.06) is None  # flash: no digit


def test_two_presses_of_the_same_key_are_two_digits() -> None:
    rx = Rfc4733Receiver()
    stream = press(1, ts=8000, t=0.0) + press(1, ts=8000 + 1600, t=0.2)
    assert feed(rx, stream) == ["1", "1"]


def test_presses_interleaved_by_reordering_keep_their_identity() -> None:
    a, b = press(1, ts=8000, t=0.0), press(2, ts=9600, t=0.2)
    stream = a[:-1] + b[:2] + a[-1:] + b[2:]  # a's last end packet arrives after b began
    assert feed(Rfc4733Receiver(), stream) == ["1", "2"]


def test_timestamps_wrap_around() -> None:
    rx = Rfc4733Receiver()
    stream = press(6, ts=0xFFFFFF00, t=0.0) + press(6, ts=0x00000100, t=0.3)
    assert feed(rx, stream) == ["6", "6"]
    assert rx.feed(event(6, 960, True), 0x1_0000_0100, 0.5) is None  # the same, unmasked


def test_a_long_press_in_segments_is_one_digit() -> None:
    # RFC 4733 §2.5.1.3: a segment ends at duration 0xFFFF without the E bit; the next one
    # has the timestamp of the first plus 0xFFFF.
    rx = Rfc4733Receiver()
    ts = 50_000
    out = [rx.feed(event(8, d), ts, d / 8000) for d in range(0, 0xFFFF, 4000)]
    out.append(rx.feed(event(8, 0xFFFF), ts, 8.19))
    ts2 = ts + 0xFFFF
    out += [rx.feed(event(8, d), ts2, 8.2 + d / 8000) for d in range(0, 20000, 4000)]
    out += [rx.feed(event(8, 20000, True), ts2, 10.8) for _ in range(3)]
    assert [d for d in out if d is not None] == ["8"]


def test_a_timestamp_reused_after_a_long_silence_is_a_new_press() -> None:
    rx = Rfc4733Receiver()
    assert feed(rx, press(5, ts=1234, t=0.0)) == ["5"]
    late = 1.0 + Rfc4733Receiver.FORGET_SECONDS
    assert rx.feed(event(5, 800, True), 1234, late) == "5"


def test_memory_stays_bounded() -> None:
    rx = Rfc4733Receiver()
    digits = []
    for i in range(200):
        digits += feed(rx, press(i % 10, ts=i * 4000, t=0.0), start=i * 0.5)
    assert len(digits) == 200
    assert len(rx._presses) <= Rfc4733Receiver.MAX_PRESSES


def test_reset_forgets_presses() -> None:
    rx = Rfc4733Receiver()
    assert rx.feed(event(3, 0), 100, 0.0) == "3"
    rx.reset()
    assert rx.feed(event(3, 160), 100, 0.02) == "3"


# ----------------------------------------------------------------------------- what is a digit


def test_all_sixteen_events_are_digits() -> None:
    rx = Rfc4733Receiver()
    got = [rx.feed(event(code, 0), 1000 + code * 800, code * 0.1) for code in range(16)]
    assert "".join(d or "?" for d in got) == "0123456789*#ABCD"


@pytest.mark.parametrize("code", [16, 17, 32, 255])
def test_other_events_are_ignored(code: int) -> None:
    rx = Rfc4733Receiver()
    assert feed(rx, press(code, ts=5000, t=0.0)) == []
    assert rx.feed(event(1, 0), 5000 + 1600, 0.3) == "1"


@pytest.mark.parametrize("payload", [b"", b"\x05", b"\x05\x8a\x00"])
def test_short_payloads_are_ignored(payload: bytes) -> None:
    assert Rfc4733Receiver().feed(payload, 0, 0.0) is None


def test_only_the_first_event_block_is_read() -> None:
    assert Rfc4733Receiver().feed(event(2, 0) + event(3, 0), 7, 0.0) == "2"


# ----------------------------------------------------------------------------- SIP INFO


@pytest.mark.parametrize(
    ("content_type", "body", "digit"),
    [
        ("application/dtmf-relay", b"Signal=5\r\nDuration=160\r\n", "5"),
        ("application/dtmf-relay", b"Signal=5\r\nDuration=160", "5"),
        ("Application/DTMF-Relay; charset=utf-8", b"signal= #\nduration=250\n", "#"),
        ("application/dtmf-relay", b"Duration=100\r\nSignal=*\r\n", "*"),
        ("application/dtmf-relay", b"Signal=d\r\nDuration=160\r\n", "D"),
        ("application/dtmf-relay", b"Signal=10\r\nDuration=160\r\n", "*"),
        ("application/dtmf-relay", b"Signal=11\r\nDuration=160\r\n", "#"),
        ("application/dtmf-relay", b"Signal=16\r\nDuration=160\r\n", None),
        ("application/dtmf-relay", b"Signal=\r\nDuration=160\r\n", None),
        ("application/dtmf-relay", b"Signal=55\r\n", None),
        ("application/dtmf-relay", b"Duration=160\r\n", None),
        ("application/dtmf-relay", b"", None),
        ("application/dtmf", b"5", "5"),
        ("application/dtmf", b" 9\r\n", "9"),
        ("application/dtmf", b"#", "#"),
        ("application/dtmf", b"11", "#"),
        ("application/dtmf", b"16", None),
        ("application/dtmf", b"x", None),
        ("application/sdp", b"Signal=5\r\n", None),
        ("text/plain", b"5", None),
        ("application/dtmf-relay", b"Signal=\xff\r\n", None),
    ],
)
def test_parse_dtmf_relay(content_type: str, body: bytes, digit: str | None) -> None:
    assert parse_dtmf_relay(content_type, body) == digit
