"""The load benchmarks' RTP gaps: measured per stream (ports and SSRC), so a later call's
stream between the same ports (a port given back and taken again) adds no gap."""

from __future__ import annotations

import struct
from pathlib import Path

from bench.capture import rtp_gaps


def packet(sport: int, dport: int, ssrc: int) -> bytes:
    """A Linux cooked-capture (SLL) frame of one RTP packet, cut at 64 bytes as the
    benchmarks' tcpdump cuts them."""
    sll = b"\x00\x00" + b"\x03\x04" + b"\x00\x06" + b"\x00" * 8 + b"\x08\x00"
    ip = bytes([0x45]) + b"\x00" * 19
    udp = struct.pack("!HHHH", sport, dport, 8 + 172, 0)
    rtp = struct.pack("!BBHII", 0x80, 0, 1, 160, ssrc)
    return (sll + ip + udp + rtp + b"\xff" * 160)[:64]


def capture(path: Path, packets: list[tuple[float, bytes]]) -> None:
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 64, 113)  # LINKTYPE_LINUX_SLL
    records = b""
    for when, frame in packets:
        seconds = int(when)
        micros = round((when - seconds) * 1e6)
        records += struct.pack("<IIII", seconds, micros, len(frame), 172 + 16 + 28) + frame
    path.write_bytes(header + records)


def test_a_later_call_between_the_same_ports_is_a_stream_of_its_own(tmp_path: Path) -> None:
    pcap = tmp_path / "rtp.pcap"
    first = [(100.0 + i * 0.02, packet(20000, 6000, 1)) for i in range(3)]
    later = [(130.0 + i * 0.02, packet(20000, 6000, 2)) for i in range(2)]  # same ports
    rtcp = [(100.01, packet(20001, 6001, 1))]  # RTCP's odd port: not the audio
    capture(pcap, first + rtcp + later)
    assert [round(g) for g in rtp_gaps(pcap)] == [20, 20, 20]
