"""Bad input, fuzzed: SDP offers and answers, SDES crypto lines (issue 14, item 5).

Property (``bench/fuzz.py --target sdp``): an offer parses or raises SdpError;
the answer under each SRTP mode is made or refused with SdpError, and reads back
to the same codec and keys; each ``a=crypto`` line parses or raises SrtpError and
round-trips.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import TARGETS, check_of, strategy
from callhook.media.srtp import Crypto, SrtpError

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

sdp = check_of("sdp")

_LINE = st.sampled_from(
    [
        "m=audio 4000 RTP/AVP 0 8 101",
        "m=audio 4000 RTP/SAVP 0",
        "m=audio 0 RTP/AVP 0",
        "m=video 5000 RTP/AVP 31",
        "c=IN IP4 192.0.2.9",
        "c=IN IP6 ::",
        "c=IN IP4 0.0.0.0",
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:8 PCMA/8000",
        "a=rtpmap:101 telephone-event/8000",
        "a=rtpmap:96 PCMU/8000",
        "a=fmtp:101 0-15",
        "a=sendonly",
        "a=inactive",
        "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd",
        "a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd|2^20",
        "a=crypto:1 F8_128_HMAC_SHA1_80 inline:x",
        "a=ptime:30",
    ]
)


@FUZZ
@given(strategy(TARGETS["sdp"], max_size=1500))
def test_fuzz_sdp_bytes(data: bytes) -> None:
    sdp(data)


@FUZZ
@given(st.lists(_LINE, max_size=12))
def test_fuzz_sdp_assembled_from_valid_lines(lines: list[str]) -> None:
    """Valid lines in any order and number: the offer/answer logic, not the lexer."""
    head = "v=0\r\no=- 1 1 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\n"
    sdp((head + "".join(f"{line}\r\n" for line in lines)).encode())


@FUZZ
@given(
    st.integers(0, 10**10),
    st.sampled_from(["AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32", "NULL", ""]),
    st.text(max_size=50),
    st.lists(st.sampled_from(["|2^20", "|1:4", "|2^48", "|2^49", " WSH=128", " WSH=1", " FEC"])),
)
def test_fuzz_crypto_lines(tag: int, suite: str, key: str, tail: list[str]) -> None:
    value = f"{tag} {suite} inline:{key}{''.join(tail)}"
    try:
        crypto = Crypto.parse(value)
    except SrtpError as exc:
        assert str(exc)
        return
    assert Crypto.parse(crypto.format()) == crypto
