"""SDP offer/answer with SRTP and SDES keys (callhook.sip.sdp with RFC 3711 / RFC 4568)."""

from __future__ import annotations

import base64

import pytest

from callhook.media import srtp
from callhook.media.rtp import pack_header
from callhook.media.srtp import Crypto, SrtpContext
from callhook.sip import offeranswer, sdp
from callhook.sip.offeranswer import NoCommonCodec, SrtpMismatch
from callhook.sip.sdp import SdpError

KEY1 = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR"  # RFC 4568 §4
KEY2 = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz"  # RFC 4568 §5.1's answer


def crlf(*lines: str) -> str:
    return "\r\n".join(lines) + "\r\n"


def offer_text(proto: str = "RTP/SAVP", *crypto: str, extra: tuple[str, ...] = ()) -> str:
    return crlf(
        "v=0",
        "o=peer 1 1 IN IP4 192.0.2.10",
        "s=-",
        "c=IN IP4 192.0.2.10",
        "t=0 0",
        f"m=audio 6000 {proto} 0 8 101",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-16",
        *(f"a=crypto:{c}" for c in crypto),
        "a=sendrecv",
        *extra,
    )


C80 = f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY1}|2^31"
C32 = f"2 AES_CM_128_HMAC_SHA1_32 inline:{KEY2}|2^31"


def do_answer(text: str, **kw: object) -> tuple[str, offeranswer.Negotiated]:
    return offeranswer.answer(sdp.parse(text), "192.0.2.1", 7000, 42, 1, **kw)  # type: ignore[arg-type]


def crypto_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("a=crypto:")]


def m_line(text: str, n: int = 0) -> str:
    return [line for line in text.splitlines() if line.startswith("m=")][n]


# --------------------------------------------------------------------------- parsing


def test_parse_keeps_profile_and_crypto_without_showing_keys() -> None:
    session = sdp.parse(offer_text("RTP/SAVP", C80, C32, "3 AES_CM_128_HMAC_SHA1_80 inline:x|1:4"))
    media = session.media[0]
    assert media.proto == "RTP/SAVP" and media.savp
    assert [(c.tag, c.suite) for c in media.crypto] == [
        (1, "AES_CM_128_HMAC_SHA1_80"),
        (2, "AES_CM_128_HMAC_SHA1_32"),
    ]
    assert media.crypto[0].key == base64.b64decode(KEY1)
    assert media.crypto[0].lifetime == 1 << 31
    assert media.crypto_refused == ["tag 3: an MKI is not supported"]
    assert ("crypto", "1 AES_CM_128_HMAC_SHA1_80 inline:<hidden>") in media.attributes
    for text in (repr(session), str(session), repr(media)):
        assert KEY1 not in text and KEY2 not in text
    assert not sdp.parse(offer_text("RTP/AVP")).media[0].savp
    assert sdp.parse(offer_text("rtp/savpf")).media[0].savp


def test_parse_never_fails_on_crypto_lines() -> None:
    session = sdp.parse(offer_text("RTP/SAVP", "junk", "1 AES_CM_128_HMAC_SHA1_80 inline:%%%", C80))
    media = session.media[0]
    assert [c.tag for c in media.crypto] == [1]
    assert len(media.crypto_refused) == 2
    text = offer_text(
        "RTP/SAVP", C80, f"1 AES_CM_128_HMAC_SHA1_32 inline:{KEY2}", extra=("a=crypto",)
    )
    media = sdp.parse(text).media[0]
    assert [(c.tag, c.suite) for c in media.crypto] == [(1, "AES_CM_128_HMAC_SHA1_80")]
    assert media.crypto_refused == [
        "tag 1: repeated; the first one is used",
        "a=crypto without a value",
    ]


# --------------------------------------------------------------------------- inbound


@pytest.mark.parametrize("mode", ["offer", "require"])
def test_savp_offer_is_answered_with_our_key(mode: offeranswer.SrtpMode) -> None:
    text, neg = do_answer(offer_text("RTP/SAVP", C80, C32), srtp=mode)
    assert m_line(text) == "m=audio 7000 RTP/SAVP 0 101"
    lines = crypto_lines(text)
    assert len(lines) == 1  # exactly one (RFC 4568 §7.1.2)
    ours = Crypto.parse(lines[0].removeprefix("a=crypto:"))
    assert (ours.tag, ours.suite) == (1, "AES_CM_128_HMAC_SHA1_80")  # the first, its tag
    assert ours.key != base64.b64decode(KEY1)  # our own, fresh key
    assert ours.lifetime is None
    assert neg.srtp
    assert neg.local_crypto == ours
    assert neg.remote_crypto == sdp.parse(offer_text("RTP/SAVP", C80)).media[0].crypto[0]
    assert KEY1 not in repr(neg) and ours.inline not in repr(neg)
    # a second answer draws another key
    again, _ = do_answer(offer_text("RTP/SAVP", C80, C32), srtp=mode)
    assert crypto_lines(again) != lines


def test_first_usable_crypto_line_is_taken() -> None:
    offer = offer_text(
        "RTP/SAVP",
        f"5 AES_256_CM_HMAC_SHA1_80 inline:{KEY1}{KEY2}",
        f"6 AES_CM_128_HMAC_SHA1_80 inline:{KEY1}|2^31|1:1",  # Polycom/AudioCodes style MKI
        f"7 AES_CM_128_HMAC_SHA1_32 inline:{KEY2}",
    )
    text, neg = do_answer(offer, srtp="offer")
    assert neg.remote_crypto is not None and neg.local_crypto is not None
    assert (neg.remote_crypto.tag, neg.remote_crypto.suite) == (7, "AES_CM_128_HMAC_SHA1_32")
    assert crypto_lines(text) == [f"a=crypto:{neg.local_crypto.format()}"]
    assert crypto_lines(text)[0].startswith("a=crypto:7 AES_CM_128_HMAC_SHA1_32 inline:")


def test_savp_offer_refused_when_srtp_is_off() -> None:
    with pytest.raises(SrtpMismatch, match="SRTP, which is off") as info:
        do_answer(offer_text("RTP/SAVP", C80))
    assert isinstance(info.value, NoCommonCodec) and isinstance(info.value, SdpError)  # 488
    with pytest.raises(SrtpMismatch):
        do_answer(offer_text("RTP/SAVP", C80), srtp="off")


def test_savp_offer_without_usable_crypto_is_refused() -> None:
    offer = offer_text("RTP/SAVP", f"1 AES_256_CM_HMAC_SHA1_80 inline:{KEY1}{KEY2}")
    with pytest.raises(SrtpMismatch, match="unsupported crypto suite 'AES_256_CM_HMAC_SHA1_80'"):
        do_answer(offer, srtp="offer")
    with pytest.raises(SrtpMismatch, match="no a=crypto"):
        do_answer(offer_text("RTP/SAVP"), srtp="require")
    with pytest.raises(SrtpMismatch) as info:
        do_answer(
            offer_text("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY1}|1:4"), srtp="offer"
        )
    assert KEY1 not in str(info.value)


def test_plain_offer_refused_when_srtp_is_required() -> None:
    with pytest.raises(SrtpMismatch, match="plain RTP and SRTP is required"):
        do_answer(offer_text("RTP/AVP"), srtp="require")


def test_codec_problems_stay_no_common_codec() -> None:
    no_codec = offer_text("RTP/SAVP", C80).replace("0 8 101", "9 101")
    with pytest.raises(NoCommonCodec) as info:
        do_answer(no_codec, srtp="require")
    assert not isinstance(info.value, SrtpMismatch)


@pytest.mark.parametrize("mode", ["off", "offer"])
def test_plain_offer_gets_plain_answer(mode: offeranswer.SrtpMode) -> None:
    text, neg = do_answer(offer_text("RTP/AVP"), srtp=mode)
    assert m_line(text) == "m=audio 7000 RTP/AVP 0 101"
    assert crypto_lines(text) == []
    assert not neg.srtp and neg.local_crypto is None and neg.remote_crypto is None


def test_best_effort_crypto_in_avp() -> None:
    """a=crypto in an RTP/AVP offer: SRTP unless srtp is off, which ignores it as before."""
    text, neg = do_answer(offer_text("RTP/AVP", C32), srtp="offer")
    assert m_line(text) == "m=audio 7000 RTP/AVP 0 101"
    assert len(crypto_lines(text)) == 1 and neg.srtp
    text, neg = do_answer(offer_text("RTP/AVP", C32), srtp="require")
    assert neg.srtp
    text, neg = do_answer(offer_text("RTP/AVP", C32))
    assert crypto_lines(text) == [] and not neg.srtp
    assert text == do_answer(offer_text("RTP/AVP"))[0]


def two_streams(first: str, second: str) -> str:
    """The same audio offered twice, as some devices do instead of RFC 5939."""
    return crlf(
        "v=0",
        "o=peer 1 1 IN IP4 192.0.2.10",
        "s=-",
        "c=IN IP4 192.0.2.10",
        "t=0 0",
        f"m=audio 6000 {first} 0",
        *([f"a=crypto:{C80}"] if first == "RTP/SAVP" else []),
        f"m=audio 6002 {second} 0",
        *([f"a=crypto:{C80}"] if second == "RTP/SAVP" else []),
    )


def test_two_streams() -> None:
    text, neg = do_answer(two_streams("RTP/SAVP", "RTP/AVP"))
    assert neg.media_index == 1 and not neg.srtp
    assert m_line(text, 0) == "m=audio 0 RTP/SAVP 0"
    text, neg = do_answer(two_streams("RTP/SAVP", "RTP/AVP"), srtp="offer")
    assert neg.media_index == 0 and neg.srtp and neg.remote_address == ("192.0.2.10", 6000)
    assert m_line(text, 1) == "m=audio 0 RTP/AVP 0"
    _, neg = do_answer(two_streams("RTP/AVP", "RTP/SAVP"), srtp="require")
    assert neg.media_index == 1 and neg.srtp


def test_reoffer_keeps_our_key() -> None:
    _, first = do_answer(offer_text("RTP/SAVP", C80, C32), srtp="offer")
    # a re-offer with other tags and a new key of theirs (RFC 4568 §7.1.4)
    c80 = f"4 AES_CM_128_HMAC_SHA1_80 inline:{KEY2}"
    text, again = do_answer(
        offer_text("RTP/SAVP", c80), srtp="offer", local_crypto=first.local_crypto
    )
    assert again.local_crypto is not None and first.local_crypto is not None
    assert again.local_crypto.key == first.local_crypto.key and again.local_crypto.tag == 4
    assert crypto_lines(text) == [f"a=crypto:{again.local_crypto.format()}"]
    # another suite: our key cannot be kept
    _, other = do_answer(offer_text("RTP/SAVP", C32), srtp="offer", local_crypto=first.local_crypto)
    assert other.local_crypto is not None
    assert other.local_crypto.suite == "AES_CM_128_HMAC_SHA1_32"
    assert other.local_crypto.key != first.local_crypto.key


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="srtp must be"):
        do_answer(offer_text("RTP/AVP"), srtp="yes")


# --------------------------------------------------------------------------- outbound


def test_offer_modes() -> None:
    keys = srtp.offer_keys()
    plain = offeranswer.offer("192.0.2.1", 7000, 1, 1)
    assert plain == offeranswer.offer("192.0.2.1", 7000, 1, 1, srtp="off")
    assert crypto_lines(plain) == [] and "RTP/AVP" in m_line(plain)
    required = offeranswer.offer("192.0.2.1", 7000, 1, 1, srtp="require", crypto=keys)
    assert m_line(required) == "m=audio 7000 RTP/SAVP 0 8 101"
    assert crypto_lines(required) == [f"a=crypto:{k.format()}" for k in keys]
    assert crypto_lines(required)[0].startswith("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:")
    assert crypto_lines(required)[1].startswith("a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:")
    best_effort = offeranswer.offer("192.0.2.1", 7000, 1, 1, srtp="offer", crypto=keys)
    assert m_line(best_effort) == "m=audio 7000 RTP/AVP 0 8 101"
    assert crypto_lines(best_effort) == crypto_lines(required)
    # what we offer parses back to the same keys
    assert sdp.parse(required).media[0].crypto == list(keys)


def test_offer_argument_errors() -> None:
    with pytest.raises(ValueError, match="needs the keys"):
        offeranswer.offer("192.0.2.1", 7000, 1, 1, srtp="require")
    with pytest.raises(ValueError, match="srtp is 'off'"):
        offeranswer.offer("192.0.2.1", 7000, 1, 1, crypto=srtp.offer_keys())
    with pytest.raises(ValueError, match="unique"):
        offeranswer.offer(
            "192.0.2.1", 7000, 1, 1, srtp="offer", crypto=(srtp.new_key(), srtp.new_key())
        )


def packets_flow(neg_a: offeranswer.Negotiated, neg_b: offeranswer.Negotiated) -> None:
    """Each side's contexts, built from its Negotiated, understand the other's packets."""
    assert neg_a.local_crypto and neg_a.remote_crypto and neg_b.local_crypto and neg_b.remote_crypto
    a = SrtpContext(neg_a.local_crypto, neg_a.remote_crypto)
    b = SrtpContext(neg_b.local_crypto, neg_b.remote_crypto)
    packet = pack_header(0, 1, 160, 0x1234, False) + b"\xff" * 160
    assert b.unprotect(a.protect(packet)) == packet
    assert a.unprotect(b.protect(packet)) == packet


@pytest.mark.parametrize(("ours", "theirs"), [("require", "offer"), ("offer", "require")])
def test_call_between_two_callhooks(
    ours: offeranswer.SrtpMode, theirs: offeranswer.SrtpMode
) -> None:
    keys = srtp.offer_keys()
    offer = offeranswer.offer("192.0.2.1", 7000, 1, 1, srtp=ours, crypto=keys)
    answer, callee = offeranswer.answer(sdp.parse(offer), "192.0.2.2", 8000, 2, 1, srtp=theirs)
    caller = offeranswer.negotiate_answer(
        ("PCMU", "PCMA"), sdp.parse(answer), srtp=ours, offered_crypto=keys
    )
    assert caller.srtp and callee.srtp
    assert caller.local_crypto == keys[0]  # tag 1, the 80-bit suite, chosen by the callee
    assert caller.remote_crypto == callee.local_crypto
    assert callee.remote_crypto == keys[0]
    assert caller.remote_address == ("192.0.2.2", 8000)
    packets_flow(caller, callee)


def answer_text(proto: str, *crypto: str) -> str:
    return crlf(
        "v=0",
        "o=callee 1 1 IN IP4 192.0.2.20",
        "s=-",
        "c=IN IP4 192.0.2.20",
        "t=0 0",
        f"m=audio 9000 {proto} 0 101",
        "a=rtpmap:101 telephone-event/8000",
        *(f"a=crypto:{c}" for c in crypto),
    )


def negotiate(
    mode: offeranswer.SrtpMode, text: str, keys: tuple[Crypto, ...]
) -> offeranswer.Negotiated:
    return offeranswer.negotiate_answer(
        ("PCMU", "PCMA"), sdp.parse(text), srtp=mode, offered_crypto=keys
    )


def test_answer_crypto_picks_our_key_by_tag() -> None:
    keys = srtp.offer_keys()
    neg = negotiate("require", answer_text("RTP/SAVP", C32), keys)
    assert neg.local_crypto == keys[1] and neg.remote_crypto is not None
    assert neg.remote_crypto.key == base64.b64decode(KEY2)
    neg = negotiate("offer", answer_text("RTP/AVP", C80), keys)  # best effort accepted
    assert neg.local_crypto == keys[0] and neg.srtp


def test_answer_without_crypto() -> None:
    keys = srtp.offer_keys()
    with pytest.raises(SrtpMismatch, match="no a=crypto; SRTP was required"):
        negotiate("require", answer_text("RTP/SAVP"), keys)
    with pytest.raises(SrtpMismatch, match="no a=crypto"):
        negotiate("require", answer_text("RTP/AVP"), keys)
    with pytest.raises(SrtpMismatch):  # SAVP chosen but no key: unusable even in best effort
        negotiate("offer", answer_text("RTP/SAVP"), keys)
    neg = negotiate("offer", answer_text("RTP/AVP"), keys)  # best effort: plain RTP
    assert not neg.srtp and neg.local_crypto is None


def test_answer_crypto_must_match_the_offer() -> None:
    keys = srtp.offer_keys()
    with pytest.raises(SrtpMismatch, match="tag 9 is not one we offered"):
        negotiate(
            "require", answer_text("RTP/SAVP", f"9 AES_CM_128_HMAC_SHA1_80 inline:{KEY1}"), keys
        )
    with pytest.raises(SrtpMismatch, match="we offered AES_CM_128_HMAC_SHA1_80"):
        negotiate(
            "require", answer_text("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_32 inline:{KEY1}"), keys
        )
    with pytest.raises(SrtpMismatch, match="unusable: tag 1: an MKI") as info:
        negotiate(
            "offer", answer_text("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY1}|1:4"), keys
        )
    assert KEY1 not in str(info.value)


def test_negotiate_answer_defaults_unchanged() -> None:
    neg = offeranswer.negotiate_answer(("PCMU",), sdp.parse(answer_text("RTP/AVP", C80)))
    assert not neg.srtp  # crypto in an answer we did not ask for is ignored
    with pytest.raises(NoCommonCodec, match="rejected the audio stream"):
        offeranswer.negotiate_answer(("PCMU",), sdp.parse(answer_text("RTP/SAVP", C80)))
    with pytest.raises(NoCommonCodec, match="rejected"):
        negotiate("require", answer_text("RTP/SAVP", C80).replace("9000", "0"), srtp.offer_keys())


def test_a_mangled_crypto_line_quoted_in_an_error_shows_no_key() -> None:
    key = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz"
    with pytest.raises(sdp.SdpError) as info:
        sdp.parse(f"v=0\nA=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{key}")
    assert "crypto" in str(info.value) and key[:8] not in str(info.value)
