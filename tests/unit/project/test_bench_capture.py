"""bench.capture: the RTP gaps and the prompts heard whole, read off a capture like the
benchmarks' (tcpdump on loopback, Ethernet frames, the first 80 bytes of each)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bench.capture import digits_astray, late_starts, prompts_whole, rtp_gaps, server_starts

PROMPT = b"".join(bytes([i, 255 - i]) * 80 for i in range(1, 11))  # 10 frames
SILENCE = b"\xff" * 160


def packet(sport: int, dport: int, seq: int, payload: bytes) -> bytes:
    rtp = struct.pack("!BBHII", 0x80, 0, seq, 160 * seq, 0x1234) + payload
    udp = struct.pack("!HHHH", sport, dport, 8 + len(rtp), 0) + rtp
    ip = bytes([0x45]) + b"\x00" * 19 + udp
    return b"\x00" * 12 + b"\x08\x00" + ip


def write(path: Path, streams: dict[int, list[bytes]]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 80, 1)]  # Ethernet, 80 bytes
    for dport, payloads in streams.items():
        for i, payload in enumerate(payloads):
            frame = packet(20000 + 2 * (dport % 100), dport, i, payload)
            kept = frame[:80]
            out.append(struct.pack("<IIII", 100, 20000 * i, len(kept), len(frame)) + kept)
    path.write_bytes(b"".join(out))
    return path


def frames(*which: int) -> list[bytes]:
    return [PROMPT[160 * i : 160 * (i + 1)] if i >= 0 else SILENCE for i in which]


def test_a_prompt_is_whole_only_every_frame_in_order_with_nothing_between(
    tmp_path: Path,
) -> None:
    pcap = write(
        tmp_path / "c.pcap",
        {
            6000: frames(-1, *range(10), -1),  # whole, silence before and after
            6002: frames(*range(5), -1, *range(5, 10)),  # a silent frame in its middle
            6004: frames(*range(2, 10)),  # its start cut
            6006: frames(-1, -1, -1),  # never played
            6008: frames(*range(4), 5, 4, *range(6, 10)),  # two frames swapped
        },
    )
    whole, played, starts = prompts_whole(pcap, PROMPT)
    assert (whole, played) == (1, 4)
    # The first frame's time after the stream's first packet, where it played.
    assert [round(s, 3) for s in starts] == [0.02, 0.0, 0.0]
    # The gaps: 20 ms within each stream, none across them.
    assert set(round(g) for g in rtp_gaps(pcap)) == {20}


def test_a_prompt_whose_frames_cannot_be_told_apart_is_refused(tmp_path: Path) -> None:
    pcap = write(tmp_path / "c.pcap", {6000: frames(0)})
    with pytest.raises(ValueError, match="told apart"):
        prompts_whole(pcap, SILENCE * 3)


def event(sport: int, dport: int, seq: int, timestamp: int) -> bytes:
    rtp = struct.pack("!BBHII", 0x80, 101, seq, timestamp, 0x99) + bytes([1, 10, 0, 160])
    udp = struct.pack("!HHHH", sport, dport, 8 + len(rtp), 0) + rtp
    ip = bytes([0x45]) + b"\x00" * 19 + udp
    return b"\x00" * 12 + b"\x08\x00" + ip


def test_key_presses_sent_off_their_schedule_are_told_from_those_sent_on_it(
    tmp_path: Path,
) -> None:
    # Two callers, each four events 0.5 s apart by their timestamps (4000 at 8 kHz), three
    # packets each 20 ms apart. The first sends on time; the second stalls after its
    # first event and sends the other three at once, 1.2 s after the first.
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 80, 1)]
    for sport, sent in ((6000, [0.0, 0.5, 1.0, 1.5]), (6002, [0.0, 1.2, 1.2, 1.2])):
        for k, at in enumerate(sent):
            for p in range(3):
                when = 100 + at + 0.02 * p
                frame = event(sport, 20000, 3 * k + p, 8000 + 4000 * k)
                out.append(
                    struct.pack("<IIII", int(when), round(when % 1 * 1e6), len(frame), len(frame))
                    + frame
                )
    pcap = tmp_path / "events.pcap"
    pcap.write_bytes(b"".join(out))
    on_time, stalled = digits_astray(pcap)
    assert on_time == pytest.approx(0.0, abs=1e-5)
    # Its last event was due 1.5 s after the first, sent at 1.2 s; its second due at 0.5
    # and sent at 1.2: 0.7 s late against 0.3 s early.
    assert stalled == pytest.approx(1.0, abs=1e-5)


def rtp_frame(sport: int, dport: int, ssrc: int, second: int) -> bytes:
    rtp = struct.pack("!BBHII", 0x80, second, 1, 0, ssrc) + b"\xff" * 4
    udp = struct.pack("!HHHH", sport, dport, 8 + len(rtp), 0) + rtp
    ip = bytes([0x45]) + b"\x00" * 19 + udp
    return b"\x00" * 12 + b"\x08\x00" + ip


def capture(path: Path, packets: list[tuple[float, bytes]]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 80, 1)]
    for when, frame in sorted(packets, key=lambda p: p[0]):
        out.append(
            struct.pack("<IIII", int(when), round(when % 1 * 1e6), len(frame), len(frame)) + frame
        )
    path.write_bytes(b"".join(out))
    return path


def test_a_caller_that_begins_its_stream_seconds_after_the_answer_is_told(
    tmp_path: Path,
) -> None:
    # The server's port 20000 serves two calls, one after the other (SSRCs 1 and 2), and
    # port 20002 one. The callers' first audio packets carry the marker bit (0x80); their
    # events (type 101) are not the start. The first call's caller began 0.05 s after the
    # answer, the second's 4.2 s after it, the third's 0.3 s before the server's first.
    server = capture(
        tmp_path / "server.pcap",
        [
            (100.0, rtp_frame(20000, 6000, 1, 0)),
            (100.02, rtp_frame(20000, 6000, 1, 0)),
            (120.0, rtp_frame(20000, 6000, 2, 0)),
            (130.0, rtp_frame(20002, 6000, 3, 0)),
        ],
    )
    caller = capture(
        tmp_path / "caller.pcap",
        [
            (100.05, rtp_frame(6000, 20000, 9, 0x80)),
            (104.5, rtp_frame(6000, 20000, 9, 0x80 | 101)),
            (124.2, rtp_frame(6000, 20000, 9, 0x80)),
            (129.7, rtp_frame(6000, 20002, 9, 0x80)),
        ],
    )
    began = server_starts(server)
    assert began == {20000: [100.0, 120.0], 20002: [130.0]}
    assert late_starts(caller, began) == [pytest.approx(4.2, abs=1e-5)]
