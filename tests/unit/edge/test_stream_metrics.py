"""A call's media counts reach ``/metrics`` when its media ends (edge/streammetrics.py):
packets received, lost and dropped by cause, key presses by how they came, through the
real media engine and session."""

from __future__ import annotations

import asyncio
import struct

from prometheus_client import REGISTRY

from callhook.edge.mediaengine import MediaEngine
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def counts() -> dict[str, float]:
    dropped = "callhook_packets_dropped_total"
    digits = "callhook_dtmf_digits_received_total"
    return {
        "received": value("callhook_rtp_packets_received_total"),
        "lost": value("callhook_rtp_packets_lost_total"),
        "duplicate": value(dropped, protocol="rtp", cause="duplicate"),
        "malformed": value(dropped, protocol="rtp", cause="malformed"),
        "rfc4733": value(digits, transport="rfc4733"),
        "sip_info": value(digits, transport="sip_info"),
    }


def audio(seq: int) -> bytes:
    return RtpPacket(0, False, seq, seq * 160, 1234, b"\xff" * 160).serialize()


def event(seq: int, ts: int, end: bool) -> bytes:
    payload = struct.pack("!BBH", 5, (0x80 if end else 0) | 10, 800 if end else 160)
    return RtpPacket(101, not end, seq, ts, 1234, payload).serialize()


async def test_the_counts_are_added_once_when_the_calls_media_ends() -> None:
    engine = MediaEngine("127.0.0.1", 41400, 41500, thread=False)
    try:
        peer = ("127.0.0.1", 5004)
        session = MediaSession("PCMU", 0, 101, peer, label="call counted")
        key = engine.attach(session, lambda data: None, lambda: None)
        before = counts()
        packets = [audio(seq) for seq in (0, 1, 2, 4)]  # 3 never comes
        packets += [audio(4)]  # a repeat
        packets += [event(5, 800, False), event(6, 800, True), event(6, 800, True)]  # key 5
        packets += [RtpPacket(96, False, 7, 1120, 1234, b"x").serialize()]  # not negotiated
        now = asyncio.get_running_loop().time()
        for index, packet in enumerate(packets):
            engine.deliver(key, packet, peer)
            engine._work(now + index * 0.02, [])
        session.inject_digit("9")  # a SIP INFO
        assert counts() == before  # nothing while the call goes on
        engine.close(key)
        after = {name: after - before[name] for name, after in counts().items()}
        assert after == {
            "received": 8,  # (the repeats among them, dropped from playout)
            "lost": 1,
            "duplicate": 2,
            "malformed": 1,
            "rfc4733": 1,
            "sip_info": 1,
        }
        engine.close(key)  # (closed twice: counted once)
        assert counts() == {name: before[name] + after[name] for name in before}
    finally:
        engine.shutdown()
