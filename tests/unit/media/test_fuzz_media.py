"""Bad input, fuzzed: RTP, RTCP, SRTP, RFC 4733 events, SIP INFO DTMF and the RTP
receive path of a call (issue 14, item 5).

The media tick runs every call's receive path; an exception there stops the tick,
so one peer's packet would silence every call. Properties (the checks of
``bench/fuzz.py``, targets rtp, rtcp, srtp, dtmf, media): a datagram parses or
raises RtpError / RtcpError and parsed packets round-trip; unprotecting anything
gives a packet or None; digits are digits or None; ``MediaSession.receive`` and
``rtcp_received`` never raise.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import TARGETS, check_of, chunks, packed, strategy
from callhook.events import DigitReceived
from callhook.media.dtmf import ToneDetector, parse_dtmf_relay
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.media.tones import dtmf_tone

PEER = ("192.0.2.10", 4000)
FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(strategy(TARGETS["rtp"], max_size=400))
def test_fuzz_rtp(data: bytes) -> None:
    check_of("rtp")(data)


@FUZZ
@given(
    st.builds(
        RtpPacket,
        st.integers(0, 127),
        st.booleans(),
        st.integers(0, 0xFFFF),
        st.integers(0, 0xFFFFFFFF),
        st.integers(0, 0xFFFFFFFF),
        st.binary(max_size=40),
        st.lists(st.integers(0, 0xFFFFFFFF), max_size=15).map(tuple),
        st.none() | st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=5).map(lambda b: b * 4)),
    )
)
def test_rtp_round_trip(packet: RtpPacket) -> None:
    assert RtpPacket.parse(packet.serialize()) == packet


@FUZZ
@given(strategy(TARGETS["rtcp"], max_size=400))
def test_fuzz_rtcp(data: bytes) -> None:
    check_of("rtcp")(data)


@settings(FUZZ, max_examples=150)
@given(strategy(TARGETS["srtp"], max_size=600))
def test_fuzz_srtp_unprotect(data: bytes) -> None:
    check_of("srtp")(data)


@FUZZ
@given(strategy(TARGETS["dtmf"], max_size=200))
def test_fuzz_dtmf(data: bytes) -> None:
    check_of("dtmf")(data)


@settings(FUZZ, max_examples=100)
@given(strategy(TARGETS["media"], max_size=1200))
def test_fuzz_media_session_receive(data: bytes) -> None:
    check_of("media")(data)


@settings(FUZZ, max_examples=100)
@given(st.lists(st.binary(max_size=255), max_size=12))
def test_fuzz_media_session_with_valid_headers(payloads: list[bytes]) -> None:
    """Well-formed RTP of our payload types with payloads of any size and content:
    past the parser, into the jitter buffer, G.711 decode and the detectors."""
    packets = [
        RtpPacket(pt, False, i, 160 * i, 7, payload).serialize()[:255]
        for i, payload in enumerate(payloads)
        for pt in (0, 8, 101)
    ]
    check_of("media")(packed(packets))


def test_chunks_inverts_packed() -> None:
    packets = [b"", b"a", bytes(range(255))]
    assert list(chunks(packed(packets))) == packets


def test_an_audio_packet_that_is_not_20_ms_does_not_stop_the_media() -> None:
    # Without telephone-event the audio goes to the in-band DTMF detector, which took
    # exactly 160 samples: a 14-byte payload raised ValueError out of receive (and out
    # of the media tick, for every call). Found by bench/fuzz.py --target media.
    session = MediaSession("PCMA", 8, None, PEER)
    session.receive(RtpPacket(8, False, 1, 160, 5, b"\xd5" * 14).serialize(), PEER, 1.0)
    session.receive(RtpPacket(8, False, 2, 174, 5, b"\xd5" * 160).serialize(), PEER, 1.02)


def test_a_digit_in_30_ms_packets_is_heard() -> None:
    """The tone detector takes any number of samples: a key pressed by a peer that
    sends 30 ms packets (240 samples) is recognised, once."""
    tone = np.concatenate([dtmf_tone("7", 0.1), np.zeros(800, np.int16)])  # 100 ms, a pause
    detector = ToneDetector()
    digits = [detector.feed(tone[i : i + 240]) for i in range(0, len(tone), 240)]
    assert [d for d in digits if d is not None] == ["7"]


def test_the_tone_detector_gives_the_same_digits_whatever_the_packet_size() -> None:
    gap = np.zeros(400, np.int16)  # 50 ms between presses
    tone = np.concatenate([part for d in "159#" for part in (dtmf_tone(d, 0.06), gap)])
    for size in (80, 160, 240, 97):
        detector = ToneDetector()
        found = [detector.feed(tone[i : i + size]) for i in range(0, len(tone), size)]
        assert "".join(d for d in found if d is not None) == "159#", size


def test_a_digit_event_still_reaches_the_session() -> None:
    session = MediaSession("PCMU", 0, 101, PEER)
    event = RtpPacket(101, True, 1, 160, 5, bytes([5, 10, 0, 160])).serialize()
    session.receive(event, PEER, 1.0)
    assert DigitReceived("5") in session.events


def test_a_superscript_digit_in_an_info_body_is_not_a_digit() -> None:
    # "²".isdigit() is true but int("²") raises ValueError. Found by --target dtmf.
    assert parse_dtmf_relay("application/dtmf", "\u00b2".encode("latin-1")) is None
    assert parse_dtmf_relay("application/dtmf-relay", b"Signal=\xb3\r\n") is None
    assert parse_dtmf_relay("application/dtmf", b"9" * 5000) is None
    assert parse_dtmf_relay("application/dtmf-relay", b"Signal=11\r\n") == "#"


def test_an_audio_packet_with_no_payload_does_not_stop_the_media() -> None:
    # The voice detector divided by the frame's length: ZeroDivisionError out of
    # receive. Found by test_fuzz_media_session_with_valid_headers.
    session = MediaSession("PCMU", 0, 101, PEER)
    session.receive(RtpPacket(0, False, 1, 160, 5, b"").serialize(), PEER, 1.0)
    assert session.malformed == 0  # a valid packet, with nothing in it
