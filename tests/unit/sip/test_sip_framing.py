"""SIP over a stream (TCP, TLS): messages framed by Content-Length, pings, limits.

RFC 3261 §18.3 (Content-Length frames a message on a stream and is mandatory
there), RFC 5626 §4.4.1 (a double CRLF is a keep-alive ping), §7.5 (CRLFs
between messages are ignored). Whatever way the bytes are split into reads, the
same messages come out: checked for every split point and with hypothesis.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callhook.sip.framing import FramingError, Ping, StreamFramer
from callhook.sip.message import parse

OPTIONS = (
    b"OPTIONS sip:ivr@127.0.0.1 SIP/2.0\r\n"
    b"Via: SIP/2.0/TCP 127.0.0.1:5070;branch=z9hG4bK1\r\n"
    b"From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:ivr@127.0.0.1>\r\n"
    b"Call-ID: c1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
)
BODY = b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n"
INVITE = (
    b"INVITE sip:ivr@127.0.0.1 SIP/2.0\r\n"
    b"Via: SIP/2.0/TCP 127.0.0.1:5070;branch=z9hG4bK2\r\n"
    b"From: <sip:a@127.0.0.1>;tag=2\r\nTo: <sip:ivr@127.0.0.1>\r\n"
    b"Call-ID: c2\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n"
    b"Content-Type: application/sdp\r\nl: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)
# Content-Length not the last header line, as most senders write it.
NOTIFY = (
    b"NOTIFY sip:ivr@127.0.0.1 SIP/2.0\r\nContent-Length: 4\r\n"
    b"Via: SIP/2.0/TCP 127.0.0.1:5070;branch=z9hG4bK3\r\nCall-ID: c3\r\n\r\nbody"
)
STREAM = OPTIONS + b"\r\n\r\n" + INVITE + b"\r\n" + NOTIFY + OPTIONS


def framed(chunks: list[bytes], framer: StreamFramer | None = None) -> list[bytes | Ping]:
    framer = framer or StreamFramer()
    out: list[bytes | Ping] = []
    for chunk in chunks:
        out += framer.feed(chunk)
    return out


EXPECTED = [OPTIONS, Ping(), INVITE, NOTIFY, OPTIONS]


def test_messages_pings_and_stray_crlfs_in_one_read() -> None:
    assert framed([STREAM]) == EXPECTED
    assert parse(INVITE).body == BODY  # compact "l:" counted the body exactly


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_every_split_into_two_reads_gives_the_same(cut: int) -> None:
    assert framed([STREAM[:cut], STREAM[cut:]]) == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM)), max_size=20))
def test_any_split_gives_the_same(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert framed([c for c in chunks if c]) == EXPECTED


def test_a_byte_at_a_time() -> None:
    assert framed([bytes([b]) for b in STREAM]) == EXPECTED


def test_an_incomplete_message_waits() -> None:
    framer = StreamFramer()
    assert framer.feed(INVITE[:-5]) == []
    assert framer.pending == len(INVITE) - 5
    assert framer.feed(INVITE[-5:]) == [INVITE]
    assert framer.pending == 0


@pytest.mark.parametrize(
    ("data", "why", "status"),
    [
        (OPTIONS.replace(b"Content-Length: 0\r\n", b""), "without Content-Length", 400),
        (OPTIONS.replace(b"Content-Length: 0", b"Content-Length: x"), "unusable", 400),
        (OPTIONS.replace(b"Content-Length: 0", b"Content-Length: -1"), "unusable", 400),
        (
            OPTIONS.replace(b"Content-Length: 0\r\n", b"Content-Length: 0\r\nl: 5\r\n"),
            "unusable",
            400,
        ),
        (OPTIONS.replace(b"Content-Length: 0", b"Content-Length: 99999999"), "octets", 413),
        (b"INVITE sip:x SIP/2.0\r\nX: " + b"a" * 20000, "header longer", 413),
    ],
)
def test_what_cannot_be_framed_closes_the_stream(data: bytes, why: str, status: int) -> None:
    framer = StreamFramer()
    with pytest.raises(FramingError, match=why) as info:
        framer.feed(data)
    assert info.value.status == status
    with pytest.raises(FramingError):  # and stays so: the connection must be closed
        framer.feed(OPTIONS)
    assert framer.pending == 0  # nothing of it is kept


def test_the_limits_are_settable() -> None:
    framer = StreamFramer(max_message=len(OPTIONS) - 1)
    with pytest.raises(FramingError, match="more than"):
        framer.feed(OPTIONS)


def test_a_message_over_the_limit_fails_with_its_header_for_a_413() -> None:
    framer = StreamFramer(max_message=1000)
    head = b"INVITE sip:a@b SIP/2.0\r\nContent-Length: 5000\r\n\r\n"
    with pytest.raises(FramingError) as info:
        framer.feed(head + b"x" * 10)
    assert info.value.status == 413 and info.value.head == head
