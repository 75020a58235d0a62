"""SRTP with SDES keys (callhook.media.srtp): a=crypto values, protect/unprotect, no key leaks."""

from __future__ import annotations

import base64

import pytest

from callhook.media import srtp
from callhook.media.rtp import pack_header
from callhook.media.srtp import SUITES, Crypto, SrtpContext, SrtpError

# libsrtp's known-answer test (test/srtp_driver.c, srtp_validate()): master key and salt,
# one RTP and one RTCP packet of SSRC 0xcafebabe, and what AES_CM_128_HMAC_SHA1_80 makes of them.
KAT_KEY = bytes.fromhex("e1f97a0d3e018be0d64fa32c06de41390ec675ad498afeebb6960b3aabe6")
KAT_RTP = bytes.fromhex("800f1234decafbadcafebabe") + b"\xab" * 16
KAT_SRTP = bytes.fromhex(
    "800f1234decafbadcafebabe4e55dc4ce79978d88ca4d215949d2402b78d6acc99ea179b8dbb"
)
KAT_RTCP = bytes.fromhex("81c8000bcafebabe") + b"\xab" * 16
KAT_SRTCP = bytes.fromhex(
    "81c8000bcafebabe7128035be487b9bdbef89041f977a5a880000001993e08cd54d6c1230798"
)

# RFC 4568 §4 and §5.1's key (40 base64 characters: 30 bytes of key and salt).
RFC_KEY = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR"
PAYLOAD = b"\xff" * 160  # 20 ms of PCMU silence


def rtp(seq: int, ssrc: int = 0x1234, payload: bytes = PAYLOAD) -> bytes:
    return pack_header(0, seq, seq * 160, ssrc, False) + payload


def pair(suite: srtp.Suite) -> tuple[SrtpContext, SrtpContext]:
    """Two ends of a call: each protects with its own key, unprotects with the other's."""
    a, b = srtp.new_key(suite), srtp.new_key(suite)
    return SrtpContext(a, b), SrtpContext(b, a)


# --------------------------------------------------------------------------- packets


def test_known_answer_of_libsrtp() -> None:
    key = Crypto(1, "AES_CM_128_HMAC_SHA1_80", KAT_KEY)
    ctx = SrtpContext(key, key)
    assert ctx.protect(KAT_RTP) == KAT_SRTP
    assert ctx.protect_rtcp(KAT_RTCP) == KAT_SRTCP
    assert ctx.unprotect(KAT_SRTP) == KAT_RTP
    assert ctx.unprotect_rtcp(KAT_SRTCP) == KAT_RTCP


@pytest.mark.parametrize("suite", SUITES)
def test_round_trip(suite: srtp.Suite) -> None:
    alice, bob = pair(suite)
    for seq in range(5):
        packet = rtp(seq)
        protected = alice.protect(packet)
        assert len(protected) == len(packet) + srtp.TAG_LENGTH[suite]
        assert protected[:12] == packet[:12]  # the header stays in clear (RFC 3711 §3.1)
        assert protected[12:172] != PAYLOAD
        assert bob.unprotect(protected) == packet
        # and the other way
        assert alice.unprotect(bob.protect(rtp(seq, ssrc=99))) == rtp(seq, ssrc=99)
    assert (alice.protected, bob.unprotected, bob.dropped) == (5, 5, 0)


@pytest.mark.parametrize("suite", SUITES)
def test_rtcp_round_trip(suite: srtp.Suite) -> None:
    alice, bob = pair(suite)
    report = bytes.fromhex("80c8000600001234") + bytes(20)
    protected = alice.protect_rtcp(report)
    assert len(protected) == len(report) + 4 + 10  # E+index, and an 80-bit tag for both suites
    assert bob.unprotect_rtcp(protected) == report
    assert bob.unprotect_rtcp(protected) is None  # replayed
    assert bob.replays == 1


@pytest.mark.parametrize("suite", SUITES)
def test_tampered_packet_is_dropped(suite: srtp.Suite) -> None:
    alice, bob = pair(suite)
    protected = bytearray(alice.protect(rtp(1)))
    protected[40] ^= 0x01
    assert bob.unprotect(bytes(protected)) is None
    header = bytearray(alice.protect(rtp(2)))
    header[1] = 8  # the payload type is authenticated too (RFC 3711 §4.2)
    assert bob.unprotect(bytes(header)) is None
    assert (bob.auth_failures, bob.dropped, bob.unprotected) == (2, 2, 0)
    # the genuine packets still pass afterwards
    assert bob.unprotect(alice.protect(rtp(3))) == rtp(3)


def test_wrong_key_is_an_auth_failure() -> None:
    alice, _ = pair("AES_CM_128_HMAC_SHA1_80")
    eve = SrtpContext(srtp.new_key(), srtp.new_key())
    assert eve.unprotect(alice.protect(rtp(1))) is None
    assert eve.auth_failures == 1


@pytest.mark.parametrize("suite", SUITES)
def test_replay_is_dropped(suite: srtp.Suite) -> None:
    alice, bob = pair(suite)
    first = alice.protect(rtp(10))
    assert bob.unprotect(first) == rtp(10)
    assert bob.unprotect(first) is None
    assert bob.replays == 1
    # reordering within the window is not a replay
    later, earlier = alice.protect(rtp(12)), alice.protect(rtp(11))
    assert bob.unprotect(earlier) == rtp(11)
    assert bob.unprotect(later) == rtp(12)
    # far behind the window (RFC 3711 §3.3.2: 128 packets)
    old = alice.protect(rtp(13))
    for seq in range(14, 300):
        bob.unprotect(alice.protect(rtp(seq)))
    assert bob.unprotect(old) is None
    assert bob.replays == 2


@pytest.mark.parametrize(
    "junk", [b"", b"\x80", bytes(11), b"\x80\x00" + bytes(10), b"not rtp at all" * 5, bytes(1600)]
)
def test_junk_never_raises(junk: bytes) -> None:
    _, bob = pair("AES_CM_128_HMAC_SHA1_80")
    assert bob.unprotect(junk) is None
    assert bob.unprotect_rtcp(junk) is None
    assert bob.dropped == 2


def test_other_buffer_types_are_accepted() -> None:
    alice, bob = pair("AES_CM_128_HMAC_SHA1_32")
    protected = alice.protect(memoryview(rtp(1)))  # type: ignore[arg-type]
    assert bob.unprotect(bytearray(protected)) == rtp(1)  # type: ignore[arg-type]
    assert bob.unprotect(None) is None  # type: ignore[arg-type]


def test_sequence_wrap_and_new_ssrc() -> None:
    alice, bob = pair("AES_CM_128_HMAC_SHA1_80")
    for seq in (65533, 65534, 65535, 0, 1, 2):  # the rollover counter moves on (RFC 3711 §3.3.1)
        assert bob.unprotect(alice.protect(rtp(seq))) == rtp(seq)
    for seq in (500, 501):  # the peer restarted its stream (RFC 3550 §8.2)
        assert bob.unprotect(alice.protect(rtp(seq, ssrc=0xABCDEF))) == rtp(seq, ssrc=0xABCDEF)


def test_protect_refuses_bugs() -> None:
    alice, _ = pair("AES_CM_128_HMAC_SHA1_80")
    with pytest.raises(SrtpError, match="cannot protect"):
        alice.protect(b"\x80")
    alice.protect(rtp(7))
    with pytest.raises(SrtpError, match="cannot protect"):  # the same index again: keystream reuse
        alice.protect(rtp(7))


def test_update_keeps_unchanged_sides() -> None:
    a, b = srtp.new_key(), srtp.new_key()
    alice, bob = SrtpContext(a, b), SrtpContext(b, a)
    for seq in (65534, 65535, 0):
        bob.unprotect(alice.protect(rtp(seq)))
    # a re-offer: alice keeps her key under a new tag; bob's replaced key is new
    b2 = srtp.new_key("AES_CM_128_HMAC_SHA1_32", tag=3)
    alice.update(a.with_tag(3), b2)
    bob.update(b2, a.with_tag(3))
    assert alice.local.tag == 3 and alice.remote == b2
    # the rollover counter survived on both sides of the kept key
    assert bob.unprotect(alice.protect(rtp(1))) == rtp(1)
    assert alice.unprotect(bob.protect(rtp(5, ssrc=9))) == rtp(5, ssrc=9)
    assert alice.unprotect(SrtpContext(b, a).protect(rtp(6, ssrc=9))) is None  # the old key


# --------------------------------------------------------------------------- a=crypto


def test_parse_and_format() -> None:
    value = f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20"
    crypto = Crypto.parse(value)
    assert crypto.tag == 1
    assert crypto.suite == "AES_CM_128_HMAC_SHA1_80"
    assert crypto.key == base64.b64decode(RFC_KEY)
    assert crypto.lifetime == 1 << 20
    assert crypto.inline == RFC_KEY
    assert crypto.format() == value
    assert Crypto.parse(crypto.format()) == crypto


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            f"2 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}",
            f"2 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}",
        ),
        (f"7  aes_cm_128_hmac_sha1_32\tINLINE:{RFC_KEY}|1000", None),  # lenient on case, spaces
        (f"3 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^31 WSH=256", None),
        (f"999999999 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^48", None),
    ],
)
def test_accepted_forms(value: str, expected: str | None) -> None:
    crypto = Crypto.parse(value)
    if expected is not None:
        assert crypto.format() == expected
    assert Crypto.parse(crypto.format()) == crypto


def test_decimal_lifetime_and_wsh() -> None:
    crypto = Crypto.parse(f"7 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}|1000 WSH=256")
    assert (crypto.tag, crypto.suite, crypto.lifetime, crypto.wsh) == (
        7,
        "AES_CM_128_HMAC_SHA1_32",
        1000,
        256,
    )
    assert crypto.format().endswith("|1000 WSH=256")
    ctx = SrtpContext(srtp.new_key("AES_CM_128_HMAC_SHA1_32"), crypto)  # WSH sizes the window
    assert ctx.remote.wsh == 256


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        # RFC 4568 §4's example: an MKI (and a lifetime)
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:32", "MKI"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|1:4", "MKI"),
        # RFC 4568 §5.1's offer: two keys told apart by MKI, a suite we do not speak, FEC_ORDER
        (
            "2 F8_128_HMAC_SHA1_80 inline:MTIzNDU2Nzg5QUJDREUwMTIzNDU2Nzg5QUJjZGVm|2^20|1:4;"
            "inline:QUJjZGVmMTIzNDU2Nzg5QUJDREUwMTIzNDU2Nzg5|2^20|2:4 FEC_ORDER=FEC_SRTP",
            "unsupported crypto suite 'F8_128_HMAC_SHA1_80'",
        ),
        (
            f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY};inline:{RFC_KEY}",
            "several master keys",
        ),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} FEC_ORDER=FEC_SRTP", "FEC_ORDER"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} KDR=10", "session parameter 'KDR=10'"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} UNENCRYPTED_SRTP", "UNENCRYPTED_SRTP"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} WSH=32", "at least 64"),
        (f"1 AES_256_CM_HMAC_SHA1_80 inline:{RFC_KEY}", "unsupported crypto suite"),
        (f"1 AEAD_AES_128_GCM inline:{RFC_KEY}", "unsupported crypto suite"),
        (f"1 AES_CM_128_HMAC_SHA1_80 uri:{RFC_KEY}", "key method"),
        (f"1 AES_CM_128_HMAC_SHA1_80 {RFC_KEY}", "key-params is not"),
        (f"1 AES_CM_128_HMAC_SHA1_80 {RFC_KEY}:x", "key-params is not"),
        ("1 AES_CM_128_HMAC_SHA1_80 inline:not*base64*at*all*not*base64*at*all*", "base64"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY[:-1]}", "base64"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY[:32]}", "got 24"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}AAAA", "got 33"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^49", "1 to 2^48"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^99999999999999", "1 to 2^48"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|0", "1 to 2^48"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^x", "lifetime"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|2^20", "lifetime"),
        (f"x AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}", "tag"),
        (f"1234567890 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}", "tag"),
        (f"inline:{RFC_KEY} AES_CM_128_HMAC_SHA1_80 1", "tag is not 1 to 9 digits: <47 char"),
        (f"1 {RFC_KEY} inline:{RFC_KEY}", "unsupported crypto suite <40 characters, not shown>"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} {RFC_KEY}", "parameter <40 characters"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} {RFC_KEY[:20]}", "parameter <20 characters"),
        ("1 AES_CM_128_HMAC_SHA1_80", "needs <tag>"),
        ("", "needs <tag>"),
    ],
)
def test_refused(value: str, reason: str) -> None:
    with pytest.raises(SrtpError, match=reason.replace("^", r"\^").replace("(", r"\(")) as info:
        Crypto.parse(value)
    assert RFC_KEY[:16] not in str(info.value)  # no key material in what gets logged


def test_construction_is_checked() -> None:
    with pytest.raises(SrtpError, match="30 bytes"):
        Crypto(1, "AES_CM_128_HMAC_SHA1_80", bytes(16))
    with pytest.raises(SrtpError, match="suite"):
        Crypto(1, "NULL_HMAC_SHA1_80", bytes(30))  # type: ignore[arg-type]
    with pytest.raises(SrtpError, match="tag"):
        Crypto(10**9, "AES_CM_128_HMAC_SHA1_80", bytes(30))


def test_new_keys_are_fresh() -> None:
    keys = {srtp.new_key().key for _ in range(50)}
    assert len(keys) == 50
    assert all(len(k) == 30 for k in keys)
    offered = srtp.offer_keys()
    assert [(c.tag, c.suite) for c in offered] == [
        (1, "AES_CM_128_HMAC_SHA1_80"),
        (2, "AES_CM_128_HMAC_SHA1_32"),
    ]


def test_keys_never_in_repr_or_str() -> None:
    crypto = Crypto.parse(f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20")
    ctx = SrtpContext(crypto, srtp.new_key())
    for text in (repr(crypto), str(crypto), f"{crypto}", f"{crypto!r}", repr([crypto]), repr(ctx)):
        assert RFC_KEY not in text
        assert crypto.key.hex() not in text
        assert repr(crypto.key)[2:20] not in text
    assert repr(crypto) == (
        "Crypto(tag=1, suite='AES_CM_128_HMAC_SHA1_80', key=<hidden>, lifetime=1048576)"
    )
    assert "<hidden>" in repr(ctx.local) and "<hidden>" in repr(ctx.remote)


def test_redact() -> None:
    body = (
        f"m=audio 4000 RTP/SAVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20\r\n"
        f"a=crypto:2 AES_CM_128_HMAC_SHA1_32 INLINE:{RFC_KEY};inline:{RFC_KEY} WSH=64\r\n"
    )
    redacted = srtp.redact(body)
    assert RFC_KEY not in redacted
    assert "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:<hidden>\r\n" in redacted
    assert "INLINE:<hidden>;inline:<hidden> WSH=64" in redacted
