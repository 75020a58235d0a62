"""RTCP SR/RR/SDES/BYE building and parsing (callhook.media.rtcp)."""

from __future__ import annotations

import struct

import pytest

from callhook.media import rtcp
from callhook.media.rtcp import (
    Bye,
    ReceiverReport,
    ReportBlock,
    RtcpError,
    SdesChunk,
    SenderReport,
    SourceDescription,
    UnknownPacket,
)
from callhook.media.rtp import RtpPacket, RtpReceiver

BLOCK = ReportBlock(
    ssrc=0x0A0B0C0D,
    fraction_lost=25,
    cumulative_lost=10,
    highest_sequence=65536 + 99,
    jitter=42,
    lsr=0x7E801234,
    dlsr=32768,
)


def test_sender_report_compound_round_trip() -> None:
    sr = SenderReport(
        ssrc=0x11223344,
        ntp_timestamp=rtcp.ntp_timestamp(1_700_000_000.25),
        rtp_timestamp=123456,
        packet_count=500,
        octet_count=80000,
        reports=(BLOCK,),
    )
    data = rtcp.report(sr, "callhook@10.0.0.1")
    assert len(data) % 4 == 0
    assert len(data) == 4 + 24 + 24 + (4 + 4 + 2 + 17 + 1)  # SR with one block, SDES padded
    parsed = rtcp.parse(data)
    assert parsed == [sr, SourceDescription.cname(0x11223344, "callhook@10.0.0.1")]
    sdes = parsed[1]
    assert isinstance(sdes, SourceDescription) and sdes.chunks[0].cname == "callhook@10.0.0.1"


def test_receiver_report_from_receiver_stats_round_trip() -> None:
    rx = RtpReceiver()
    for seq in range(100):
        if seq % 10 != 5:  # 10 % loss
            rx.feed(RtpPacket(0, False, seq, seq * 160, 0xFEEDFACE, b"\xff" * 160), seq * 0.02)
    block = rx.report_block(2.0)
    assert block is not None
    rr = ReceiverReport(ssrc=0x01020304, reports=(block,))
    data = rtcp.report(rr, "me@host", bye=Bye((0x01020304,), "call ended"))
    first, sdes, bye = rtcp.parse(data)
    assert first == rr
    assert sdes == SourceDescription.cname(0x01020304, "me@host")
    assert isinstance(first, ReceiverReport)
    (got,) = first.reports
    assert (got.ssrc, got.fraction_lost, got.cumulative_lost, got.highest_sequence) == (
        0xFEEDFACE,
        (10 << 8) // 100,  # 10 of the 100 expected (0..99) were lost
        10,
        99,
    )
    assert bye == Bye((0x01020304,), "call ended")


def test_parse_a_compound_packet_built_by_hand() -> None:
    """RR (1 block) + SDES (CNAME, NAME) + BYE with reason, laid out per RFC 3550 §6.4.2-6.6."""
    rr = bytes([0x81, 201]) + struct.pack("!H", 7)  # V=2, RC=1, length 7 words
    rr += struct.pack("!I", 0x5EED0001)
    rr += struct.pack("!I", 0xABCDEF01)  # SSRC_1
    rr += bytes([64]) + (-3 & 0xFFFFFF).to_bytes(3, "big")  # fraction 64/256, lost -3
    rr += struct.pack("!IIII", 0x0002_0010, 180, 0xAABBCCDD, 0x00018000)
    sdes_items = struct.pack("!I", 0x5EED0001)
    sdes_items += bytes([1, 13]) + b"alice@example"  # CNAME
    sdes_items += bytes([2, 5]) + b"Alice"  # NAME
    sdes_items += b"\x00"  # END
    sdes_items += b"\x00" * (-len(sdes_items) % 4)
    sdes = bytes([0x81, 202]) + struct.pack("!H", len(sdes_items) // 4) + sdes_items
    reason = b"teardown"
    bye_body = struct.pack("!I", 0x5EED0001) + bytes([len(reason)]) + reason
    bye_body += b"\x00" * (-len(bye_body) % 4)
    bye = bytes([0x81, 203]) + struct.pack("!H", len(bye_body) // 4) + bye_body
    packets = rtcp.parse(rr + sdes + bye)
    assert packets == [
        ReceiverReport(
            0x5EED0001,
            (ReportBlock(0xABCDEF01, 64, -3, 0x0002_0010, 180, 0xAABBCCDD, 0x00018000),),
        ),
        SourceDescription((SdesChunk(0x5EED0001, ((1, b"alice@example"), (2, b"Alice"))),)),
        Bye((0x5EED0001,), "teardown"),
    ]
    # and building them again gives the same bytes
    assert rtcp.compound(packets) == rr + sdes + bye


def test_unknown_packet_types_are_kept_and_parsing_goes_on() -> None:
    app = bytes([0x80 | 3, 204]) + struct.pack("!H", 2) + struct.pack("!I", 9) + b"NAME"
    nack = bytes([0x81, 205]) + struct.pack("!H", 3) + struct.pack("!III", 1, 2, 0x00050000)
    rr = ReceiverReport(7).to_bytes()
    packets = rtcp.parse(rr + app + nack + Bye((7,)).to_bytes())
    assert packets[0] == ReceiverReport(7)
    assert packets[1] == UnknownPacket(204, 3, struct.pack("!I", 9) + b"NAME")
    assert packets[2] == UnknownPacket(205, 1, struct.pack("!III", 1, 2, 0x00050000))
    assert packets[3] == Bye((7,))
    assert isinstance(packets[1], UnknownPacket)
    assert packets[1].to_bytes() == app


def test_report_block_signed_loss_and_clamping() -> None:
    neg = ReportBlock(1, 0, -5, 10, 0)
    assert ReportBlock.parse(neg.to_bytes()) == neg
    huge = ReportBlock(1, 0, 1 << 30, 10, 0)
    assert ReportBlock.parse(huge.to_bytes()).cumulative_lost == (1 << 23) - 1
    low = ReportBlock(1, 0, -(1 << 30), 10, 0)
    assert ReportBlock.parse(low.to_bytes()).cumulative_lost == -(1 << 23)


def test_sr_with_profile_extension_after_the_blocks_is_accepted() -> None:
    sr = SenderReport(1, 2, 3, 4, 5, (BLOCK,))
    raw = bytearray(sr.to_bytes())
    raw += b"\x01\x02\x03\x04"  # profile-specific extension (§6.4.1)
    raw[2:4] = struct.pack("!H", len(raw) // 4 - 1)
    assert rtcp.parse(bytes(raw)) == [sr]


def test_padding_on_the_last_packet() -> None:
    body = ReceiverReport(3, (BLOCK,)).to_bytes()
    padded = bytearray(body + b"\x00\x00\x00\x04")
    padded[0] |= 0x20
    padded[2:4] = struct.pack("!H", len(padded) // 4 - 1)
    assert rtcp.parse(bytes(padded)) == [ReceiverReport(3, (BLOCK,))]


def test_bye_without_reason_and_with_several_sources() -> None:
    for bye in (Bye(()), Bye((1, 2, 3)), Bye((4,), ""), Bye((5,), "x" * 300)):
        data = bye.to_bytes()
        assert len(data) % 4 == 0
        (back,) = rtcp.parse(ReceiverReport(1).to_bytes() + data)[1:]
        expected_reason = None if bye.reason is None else bye.reason[:255]
        assert back == Bye(bye.sources, expected_reason)


def test_sdes_chunk_ending_exactly_on_a_word_boundary_has_a_full_null_word() -> None:
    sdes = SourceDescription.cname(1, "ab")  # 4 (ssrc) + 2 + 2 = 8: END needs 4 more nulls
    data = sdes.to_bytes()
    assert data[4:] == struct.pack("!I", 1) + b"\x01\x02ab" + b"\x00" * 4
    assert rtcp.parse(ReceiverReport(1).to_bytes() + data)[1] == sdes


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x81\xc9\x00",  # shorter than a header
        bytes([0x40, 201, 0, 1]) + bytes(4),  # version 1
        bytes([0x80, 201, 0, 5]) + bytes(4),  # length beyond the data
        ReceiverReport(1).to_bytes() + b"\x80\xc9",  # trailing bytes
        bytes([0x81, 201, 0, 1]) + bytes(4),  # RR claiming a block it lacks
        bytes([0x80, 200, 0, 1]) + bytes(4),  # SR without sender info
        bytes([0x81, 202, 0, 2]) + struct.pack("!I", 1) + b"\x01\x09abc",  # item truncated
        bytes([0x81, 202, 0, 2]) + struct.pack("!I", 1) + b"\x01\x02ab",  # no END
        bytes([0x82, 203, 0, 1]) + bytes(4),  # BYE with 2 sources, room for 1
        bytes([0x81, 203, 0, 2]) + struct.pack("!I", 1) + b"\x09abc",  # reason truncated
        bytes([0xA0, 201, 0, 1]) + b"\x00\x00\x00\x00",  # padding count 0
        bytes([0xA0, 201, 0, 1]) + b"\x00\x00\x00\x09",  # padding beyond the packet
    ],
)
def test_malformed_packets_raise(data: bytes) -> None:
    with pytest.raises(RtcpError):
        rtcp.parse(data)


def test_padding_on_a_packet_that_is_not_last_is_rejected() -> None:
    first = bytearray(ReceiverReport(1).to_bytes())
    first[0] |= 0x20
    with pytest.raises(RtcpError):
        rtcp.parse(bytes(first) + ReceiverReport(2).to_bytes())


def test_compound_rules() -> None:
    with pytest.raises(RtcpError):
        rtcp.compound([SourceDescription.cname(1, "x")])  # must start with SR/RR
    with pytest.raises(RtcpError):
        rtcp.compound([])
    with pytest.raises(RtcpError):
        rtcp.compound([ReceiverReport(1), Bye((1,)), SourceDescription.cname(1, "x")])
    with pytest.raises(RtcpError):
        ReceiverReport(1, (BLOCK,) * 32).to_bytes()  # 5-bit count
    with pytest.raises(RtcpError):
        SourceDescription((SdesChunk(1, ((1, b"x" * 256),)),)).to_bytes()


def test_ntp_timestamp_and_middle_bits() -> None:
    assert rtcp.ntp_timestamp(0.0) == rtcp.NTP_UNIX_OFFSET << 32
    assert rtcp.ntp_timestamp(1.5) == ((rtcp.NTP_UNIX_OFFSET + 1) << 32) | 0x80000000
    assert rtcp.ntp_middle(0x1122334455667788) == 0x33445566
