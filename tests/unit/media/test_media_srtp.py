"""A media session with SRTP keys (RFC 3711): what it sends is encrypted, what it receives is
authenticated before anything else — a forged packet neither plays nor moves the latch."""

from __future__ import annotations

import struct

import numpy as np

from callhook.media import g711, tones
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.media.srtp import SrtpContext, new_key

PEER = ("192.0.2.10", 40000)
FORGER = ("192.0.2.66", 40000)


def keyed() -> tuple[MediaSession, SrtpContext]:
    """A session keyed as callhook would be, and the peer's context (the mirror keys)."""
    ours, theirs = new_key(), new_key()
    session = MediaSession("PCMU", 0, 101, PEER)
    session.srtp = SrtpContext(ours, theirs)
    return session, SrtpContext(theirs, ours)


def rtp(seq: int, payload: bytes, ssrc: int = 7) -> bytes:
    return struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + payload


def test_what_the_session_sends_is_srtp_the_peer_can_decrypt() -> None:
    session, peer = keyed()
    tone = g711.encode("ulaw", tones.tone(440.0, 0.1))
    session.play_encoded(1, tone)
    sent = [session.tick(i * 0.02) for i in range(3)]
    assert all(datagram is not None for datagram in sent)
    for datagram in sent:
        assert datagram is not None
        header = RtpPacket.parse(datagram)  # the header stays in the clear (RFC 3711 §3.1)
        assert len(header.payload) == 160 + 10  # 80-bit authentication tag
        assert header.payload[:160] not in tone  # the payload does not
        plain = peer.unprotect(datagram)
        assert plain is not None and RtpPacket.parse(plain).payload in tone


def test_a_forged_packet_is_dropped_before_the_latch() -> None:
    session, peer = keyed()
    session.offered = ("192.0.2.99", 1)  # the SDP named another address: latching is open
    session.remote = session.offered
    forged = rtp(1, b"\xff" * 160)
    session.receive(forged, FORGER, 0.0)
    assert session.remote == ("192.0.2.99", 1) and not session.latched
    genuine = peer.protect(rtp(2, g711.encode("ulaw", np.zeros(160, dtype=np.int16))))
    session.receive(genuine, PEER, 0.02)
    assert session.remote == PEER and session.latched
    assert session.srtp is not None and session.srtp.dropped == 1


def test_digits_over_srtp_arrive() -> None:
    session, peer = keyed()
    for i, end in enumerate((False, False, True)):
        event = struct.pack("!BBH", 5, 0x80 if end else 0, 160 * (i + 1))
        packet = struct.pack("!BBHII", 0x80, 101 | (0x80 if i == 0 else 0), 10 + i, 8000, 7)
        session.receive(peer.protect(packet + event), PEER, i * 0.02)
    assert [getattr(e, "digit", None) for e in session.events] == ["5"]


def test_rtcp_reports_are_srtcp() -> None:
    session, peer = keyed()
    session.play_encoded(1, g711.encode("ulaw", tones.tone(440.0, 20.0)))
    reports = []
    for i in range(600):
        now = i * 0.02
        session.tick(now)
        report = session.rtcp_report(now, 1.8e9 + now)
        if report is not None:
            reports.append(report)
    assert reports
    assert all(peer.unprotect_rtcp(r) is not None for r in reports)
