"""SDP parsing and RFC 3264 offer/answer (callhook.sip.sdp)."""

from __future__ import annotations

import pytest

from callhook.sip import offeranswer, sdp
from callhook.sip.offeranswer import NoCommonCodec
from callhook.sip.sdp import SdpError


def crlf(*lines: str) -> str:
    return "\r\n".join(lines) + "\r\n"


# SIPp's scenario data/peers/sipp-uac-audio-dtmf.xml, with its keywords filled in.
SIPP_OFFER = crlf(
    "v=0",
    "o=uac 1 1 IN IP4 127.0.0.1",
    "s=-",
    "c=IN IP4 127.0.0.1",
    "t=0 0",
    "m=audio 6000 RTP/AVP 8 101",
    "a=rtpmap:8 PCMA/8000",
    "a=rtpmap:101 telephone-event/8000",
    "a=fmtp:101 0-16",
    "a=ptime:20",
)


def baresip_offer(formats: str, *extra: str) -> str:
    """A baresip-like offer: several codecs, rtpmap for each, rtcp attributes, LF only."""
    return "\n".join(
        [
            "v=0",
            "o=- 1764931561 3394231412 IN IP4 127.0.0.1",
            "s=-",
            "c=IN IP4 127.0.0.1",
            "t=0 0",
            "a=tool:baresip 1.0.0",
            f"m=audio 10002 RTP/AVP {formats}",
            "b=AS:117",
            "a=rtpmap:96 opus/48000/2",
            "a=fmtp:96 stereo=1;sprop-stereo=1",
            "a=rtpmap:9 G722/8000",
            "a=rtpmap:0 PCMU/8000",
            "a=rtpmap:8 PCMA/8000",
            "a=rtpmap:101 telephone-event/8000",
            "a=fmtp:101 0-15",
            "a=rtcp-rsize",
            "a=sendrecv",
            "a=label:1",
            *extra,
        ]
    )


def do_answer(text: str, port: int = 7000) -> tuple[str, offeranswer.Negotiated]:
    return offeranswer.answer(sdp.parse(text), "127.0.0.1", port, 42, 1)


# ----------------------------------------------------------------------------- parse


def test_parse_sipp_offer() -> None:
    s = sdp.parse(SIPP_OFFER)
    assert s.origin == sdp.Origin("uac", "1", "1", "IN", "IP4", "127.0.0.1")
    assert s.connection == sdp.Connection("IN", "IP4", "127.0.0.1")
    assert s.timing == "0 0"
    (m,) = s.media
    assert (m.media, m.port, m.proto, m.formats) == ("audio", 6000, "RTP/AVP", ["8", "101"])
    assert m.rtpmap[8] == sdp.RtpMap(8, "PCMA", 8000)
    assert m.rtpmap[101] == sdp.RtpMap(101, "telephone-event", 8000)
    assert m.fmtp == {"101": "0-16"}
    assert m.ptime == 20
    assert m.connection is None
    assert s.connection_for(m) == s.connection
    assert s.direction_for(m) == "sendrecv"


def test_parse_lf_only_trailing_whitespace_and_blank_lines() -> None:
    text = "v=0  \n o=a 5 6 IN IP4 10.0.0.1\t\n\ns=x \nc=IN IP4 10.0.0.2 \nt=0 0\n"
    text += "m=audio 4000 RTP/AVP 0   \na=ptime:30 \n\n"
    s = sdp.parse(text)
    assert s.origin.session_id == "5"
    assert s.connection is not None and s.connection.address == "10.0.0.2"
    assert s.media[0].formats == ["0"]
    assert s.media[0].ptime == 30


def test_unknown_attributes_and_line_types_are_kept_or_ignored() -> None:
    s = sdp.parse(baresip_offer("8 0 101", "a=X-custom:some value", "a=rtcp:10003", "y=whatever"))
    m = s.media[0]
    assert ("tool", "baresip 1.0.0") in s.attributes
    assert ("X-custom", "some value") in m.attributes
    assert ("rtcp-rsize", None) in m.attributes
    assert m.attribute("rtcp") == "10003"
    assert m.attribute("rtcp-rsize") == ""
    assert m.attribute("nothing") is None
    assert m.bandwidth == ["AS:117"]
    assert m.direction == "sendrecv"
    assert m.rtpmap[96] == sdp.RtpMap(96, "opus", 48000, 2)


def test_parse_connection_with_ttl_and_media_level_override() -> None:
    text = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.0.0.1",
        "s=-",
        "c=IN IP4 224.2.1.1/127",
        "t=0 0",
        "m=audio 4000 RTP/AVP 0",
        "c=IN IP4 10.0.0.9",
        "m=audio 4002 RTP/AVP 0",
    )
    s = sdp.parse(text)
    assert s.connection is not None and s.connection.address == "224.2.1.1"
    assert s.connection_for(s.media[0]).address == "10.0.0.9"  # type: ignore[union-attr]
    assert s.connection_for(s.media[1]).address == "224.2.1.1"  # type: ignore[union-attr]


def test_malformed_rtpmap_and_ptime_are_ignored() -> None:
    text = SIPP_OFFER + "a=rtpmap:xx nonsense\r\na=rtpmap:9\r\na=ptime:soon\r\n"
    m = sdp.parse(text).media[0]
    assert set(m.rtpmap) == {8, 101}
    assert m.ptime == 20


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world",
        "this is not\r\nan SDP body\r\n",
        "<html><body>oops</body></html>",
        "o=- 1 1 IN IP4 1.2.3.4\r\nv=0\r\n",  # v= not first
        "v=1\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\n",
        "v=0\r\ns=-\r\nc=IN IP4 1.2.3.4\r\nt=0 0\r\n",  # no o=
        "v=0\r\no=- 1 IN IP4 1.2.3.4\r\n",  # o= with 5 fields
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4\r\n",
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=ATM NSAP 47.0091\r\n",
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio x RTP/AVP 0\r\n",
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio 70000 RTP/AVP 0\r\n",
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP\r\n",
        # an active stream with no c= at either level (RFC 4566 §5.7)
        "v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n",
    ],
)
def test_garbage_raises_sdp_error(text: str) -> None:
    with pytest.raises(SdpError) as caught:
        sdp.parse(text)
    assert caught.value.reason


def test_rejected_stream_needs_no_connection() -> None:
    text = crlf("v=0", "o=- 1 1 IN IP4 1.2.3.4", "s=-", "t=0 0", "m=video 0 RTP/AVP 31")
    assert sdp.parse(text).media[0].port == 0


# ----------------------------------------------------------------------------- answer


def test_answer_sipp_offer() -> None:
    text, neg = do_answer(SIPP_OFFER)
    assert neg == offeranswer.Negotiated(
        remote_address=("127.0.0.1", 6000),
        codec="PCMA",
        payload_type=8,
        telephone_event_pt=101,
        telephone_event_fmtp="0-16",
        ptime=20,
        remote_ptime=20,
        direction="sendrecv",
        on_hold=False,
        media_index=0,
    )
    assert neg.sends and neg.receives
    assert text == crlf(
        "v=0",
        "o=- 42 1 IN IP4 127.0.0.1",
        "s=callhook",
        "c=IN IP4 127.0.0.1",
        "t=0 0",
        "m=audio 7000 RTP/AVP 8 101",
        "a=rtpmap:8 PCMA/8000",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-16",
        "a=ptime:20",
        "a=sendrecv",
    )


@pytest.mark.parametrize(
    ("formats", "codec", "pt"),
    [
        ("8 0 101", "PCMA", 8),  # PCMA first: PCMA
        ("0 8 101", "PCMU", 0),
        ("96 9 0 8 101", "PCMU", 0),  # opus, G722, PCMU: PCMU
        ("101 96 9 8 0", "PCMA", 8),  # telephone-event listed first is not a codec
    ],
)
def test_answer_takes_the_offerers_first_supported_codec(formats: str, codec: str, pt: int) -> None:
    text, neg = do_answer(baresip_offer(formats))
    assert (neg.codec, neg.payload_type) == (codec, pt)
    assert neg.telephone_event_pt == 101
    assert neg.telephone_event_fmtp == "0-15"  # the offerer's events, kept
    assert neg.remote_address == ("127.0.0.1", 10002)
    answer_media = sdp.parse(text).media[0]
    assert answer_media.formats == [str(pt), "101"]  # exactly the codec and telephone-event
    assert answer_media.fmtp == {"101": "0-15"}


def test_answer_dynamic_payload_type_for_pcmu() -> None:
    offer = crlf(
        "v=0",
        "o=- 7 7 IN IP4 192.0.2.10",
        "s=-",
        "c=IN IP4 192.0.2.10",
        "t=0 0",
        "m=audio 49170 RTP/AVP 18 98 100",
        "a=rtpmap:18 G729/8000",
        "a=rtpmap:98 pcmu/8000",  # case-insensitive encoding name
        "a=rtpmap:100 telephone-event/8000",
    )
    text, neg = do_answer(offer)
    assert (neg.codec, neg.payload_type, neg.telephone_event_pt) == ("PCMU", 98, 100)
    assert neg.telephone_event_fmtp is None
    assert "m=audio 7000 RTP/AVP 98 100\r\n" in text
    assert "a=rtpmap:98 PCMU/8000\r\n" in text
    assert "a=fmtp:" not in text  # none offered: none answered (RFC 4733 default 0-15)


def test_answer_pcmu_rtpmap_with_wrong_rate_is_not_pcmu() -> None:
    offer = SIPP_OFFER.replace("RTP/AVP 8 101", "RTP/AVP 97 8 101") + "a=rtpmap:97 PCMU/16000\r\n"
    _, neg = do_answer(offer)
    assert neg.codec == "PCMA"


def test_answer_without_telephone_event() -> None:
    offer = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.1.1.1",
        "s=-",
        "c=IN IP4 10.1.1.1",
        "t=0 0",
        "m=audio 5004 RTP/AVP 0",
    )
    text, neg = do_answer(offer)
    assert neg.telephone_event_pt is None and neg.telephone_event_fmtp is None
    assert neg.remote_ptime is None and neg.ptime == 20
    m = sdp.parse(text).media[0]
    assert m.formats == ["0"]
    assert set(m.rtpmap) == {0}


def test_answer_picks_telephone_event_at_8000_among_rates() -> None:
    offer = baresip_offer("0 102 101", "a=rtpmap:102 telephone-event/48000")
    _, neg = do_answer(offer)
    assert neg.telephone_event_pt == 101


def test_answer_video_and_audio_rejects_video_with_port_zero() -> None:
    offer = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.0.0.1",
        "s=-",
        "c=IN IP4 10.0.0.1",
        "t=0 0",
        "m=video 51372 RTP/AVP 96 97",
        "a=rtpmap:96 H264/90000",
        "a=rtpmap:97 VP8/90000",
        "m=audio 49170 RTP/AVP 0 101",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-16",
        "m=application 9 UDP/BFCP *",
    )
    text, neg = do_answer(offer)
    assert neg.media_index == 1 and neg.remote_address == ("10.0.0.1", 49170)
    answered = sdp.parse(text).media
    assert len(answered) == 3  # RFC 3264 §6: as many m= lines as the offer, in order
    assert (answered[0].media, answered[0].port, answered[0].formats) == ("video", 0, ["96", "97"])
    assert (answered[1].media, answered[1].port) == ("audio", 7000)
    assert (answered[2].media, answered[2].port, answered[2].proto) == (
        "application",
        0,
        "UDP/BFCP",
    )


def test_answer_skips_an_audio_stream_without_our_codecs() -> None:
    offer = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.0.0.1",
        "s=-",
        "c=IN IP4 10.0.0.1",
        "t=0 0",
        "m=audio 4000 RTP/SAVP 0",  # SRTP: not ours
        "m=audio 4002 RTP/AVP 18",  # G.729 only
        "m=audio 4004 RTP/AVP 8",
    )
    text, neg = do_answer(offer)
    assert neg.media_index == 2 and neg.remote_address == ("10.0.0.1", 4004)
    assert [m.port for m in sdp.parse(text).media] == [0, 0, 7000]


@pytest.mark.parametrize(
    ("attribute", "ours", "on_hold"),
    [
        ("a=sendonly", "recvonly", True),
        ("a=inactive", "inactive", True),
        ("a=recvonly", "sendonly", False),
        ("a=sendrecv", "sendrecv", False),
    ],
)
def test_hold_reoffer_directions(attribute: str, ours: str, on_hold: bool) -> None:
    text, neg = do_answer(SIPP_OFFER.replace("o=uac 1 1", "o=uac 1 2") + attribute + "\r\n")
    assert neg.direction == ours
    assert neg.on_hold is on_hold
    assert f"a={ours}\r\n" in text
    assert sdp.parse(text).media[0].direction == ours


def test_hold_by_zero_connection_address() -> None:
    text, neg = do_answer(SIPP_OFFER.replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0"))
    assert neg.on_hold
    assert neg.remote_address == ("0.0.0.0", 6000)
    assert neg.direction == "sendrecv"
    assert not neg.sends  # nowhere to send to
    assert neg.receives
    assert "a=sendrecv\r\n" in text  # RFC 3264 §8.4: the direction still mirrors the offer


def test_session_level_direction_and_media_override() -> None:
    base = crlf("v=0", "o=- 1 2 IN IP4 10.0.0.1", "s=-", "c=IN IP4 10.0.0.1", "t=0 0", "a=sendonly")
    _, neg = do_answer(base + crlf("m=audio 4000 RTP/AVP 0"))
    assert (neg.direction, neg.on_hold) == ("recvonly", True)
    _, neg = do_answer(base + crlf("m=audio 4000 RTP/AVP 0", "a=sendrecv"))
    assert (neg.direction, neg.on_hold) == ("sendrecv", False)


def test_ipv6_offer_and_answer() -> None:
    offer = crlf(
        "v=0",
        "o=- 1 1 IN IP6 2001:db8::10",
        "s=-",
        "c=IN IP6 2001:db8::10",
        "t=0 0",
        "m=audio 30000 RTP/AVP 0",
    )
    text, neg = offeranswer.answer(sdp.parse(offer), "2001:db8::1", 7000, 5, 6)
    assert neg.remote_address == ("2001:db8::10", 30000)
    parsed = sdp.parse(text)
    assert parsed.connection == sdp.Connection("IN", "IP6", "2001:db8::1")
    assert parsed.origin.addrtype == "IP6"


def test_connection_only_at_session_level_and_only_at_media_level() -> None:
    session_only = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.0.0.1",
        "s=-",
        "c=IN IP4 10.0.0.7",
        "t=0 0",
        "m=audio 4000 RTP/AVP 0",
    )
    assert do_answer(session_only)[1].remote_address == ("10.0.0.7", 4000)
    media_only = crlf(
        "v=0",
        "o=- 1 1 IN IP4 10.0.0.1",
        "s=-",
        "t=0 0",
        "m=audio 4000 RTP/AVP 0",
        "c=IN IP4 10.0.0.8",
    )
    assert do_answer(media_only)[1].remote_address == ("10.0.0.8", 4000)


def test_answer_copies_the_offers_timing() -> None:
    text, _ = do_answer(SIPP_OFFER.replace("t=0 0", "t=3034423619 3042462419"))
    assert "t=3034423619 3042462419\r\n" in text


@pytest.mark.parametrize(
    "media",
    [
        "m=audio 4000 RTP/AVP 18 9 96\r\na=rtpmap:96 opus/48000/2\r\n",  # G.729, G.722, opus
        "m=audio 0 RTP/AVP 0 8\r\n",  # the only audio stream is disabled
        "m=audio 4000 RTP/SAVP 0 8\r\n",  # SRTP only
        "m=video 4000 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n",  # no audio at all
        "m=audio 4000 RTP/AVP 101\r\na=rtpmap:101 telephone-event/8000\r\n",
    ],
)
def test_no_common_codec(media: str) -> None:
    offer = crlf("v=0", "o=- 1 1 IN IP4 10.0.0.1", "s=-", "c=IN IP4 10.0.0.1", "t=0 0") + media
    with pytest.raises(NoCommonCodec):
        do_answer(offer)
    assert issubclass(NoCommonCodec, SdpError)


def test_answer_round_trip_through_parse() -> None:
    offer = sdp.parse(baresip_offer("96 0 8 101"))
    text, neg = offeranswer.answer(offer, "192.0.2.5", 16384, 123456789, 3)
    parsed = sdp.parse(text)
    assert parsed.origin == sdp.Origin("-", "123456789", "3", "IN", "IP4", "192.0.2.5")
    assert parsed.connection == sdp.Connection("IN", "IP4", "192.0.2.5")
    (m,) = parsed.media
    assert (m.media, m.port, m.proto, m.formats) == ("audio", 16384, "RTP/AVP", ["0", "101"])
    assert m.rtpmap == {
        0: sdp.RtpMap(0, "PCMU", 8000),
        101: sdp.RtpMap(101, "telephone-event", 8000),
    }
    assert (m.fmtp, m.ptime, m.direction) == ({"101": "0-15"}, 20, "sendrecv")
    # The offerer reading our answer reaches the same codec, pointed at us.
    theirs = offeranswer.negotiate_answer(("PCMU", "PCMA", "opus"), parsed)
    assert (theirs.codec, theirs.payload_type) == (neg.codec, neg.payload_type)
    assert theirs.telephone_event_pt == neg.telephone_event_pt
    assert theirs.remote_address == ("192.0.2.5", 16384)


def test_answer_rejects_a_local_address_that_is_not_an_ip() -> None:
    with pytest.raises(ValueError):
        offeranswer.answer(sdp.parse(SIPP_OFFER), "not-an-ip", 7000, 1, 1)


# ----------------------------------------------------------------------------- outbound


def test_offer_text_and_parse() -> None:
    text = offeranswer.offer("10.0.0.5", 20000, 99, 1)
    assert text == crlf(
        "v=0",
        "o=- 99 1 IN IP4 10.0.0.5",
        "s=callhook",
        "c=IN IP4 10.0.0.5",
        "t=0 0",
        "m=audio 20000 RTP/AVP 0 8 101",
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:8 PCMA/8000",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-16",
        "a=ptime:20",
        "a=sendrecv",
    )
    # And an answerer (ourselves) takes PCMU, our first choice.
    _, neg = offeranswer.answer(sdp.parse(text), "10.0.0.6", 30000, 1, 1)
    assert (neg.codec, neg.telephone_event_pt, neg.telephone_event_fmtp) == ("PCMU", 101, "0-16")


def test_offer_codec_choice_and_hold() -> None:
    text = offeranswer.offer("10.0.0.5", 20000, 99, 2, codecs=("pcma",), direction="sendonly")
    m = sdp.parse(text).media[0]
    assert m.formats == ["8", "101"]
    assert m.direction == "sendonly"
    with pytest.raises(ValueError):
        offeranswer.offer("10.0.0.5", 20000, 99, 2, codecs=("G729",))
    with pytest.raises(ValueError):
        offeranswer.offer("10.0.0.5", 20000, 99, 2, codecs=())


def callee_answer(media: str, *extra: str) -> sdp.SessionDescription:
    return sdp.parse(
        crlf(
            "v=0",
            "o=callee 5 5 IN IP4 10.9.9.9",
            "s=-",
            "c=IN IP4 10.9.9.9",
            "t=0 0",
            media,
            *extra,
        )
    )


def test_negotiate_answer_reads_the_callees_choice() -> None:
    answer = callee_answer(
        "m=audio 40000 RTP/AVP 8 101",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-15",
        "a=ptime:30",
    )
    neg = offeranswer.negotiate_answer(("PCMU", "PCMA"), answer)
    assert neg == offeranswer.Negotiated(
        remote_address=("10.9.9.9", 40000),
        codec="PCMA",
        payload_type=8,
        telephone_event_pt=101,
        telephone_event_fmtp="0-15",
        ptime=20,
        remote_ptime=30,
        direction="sendrecv",
        on_hold=False,
        media_index=0,
    )


def test_negotiate_answer_only_uses_codecs_we_offered() -> None:
    answer = callee_answer("m=audio 40000 RTP/AVP 0 8")
    assert offeranswer.negotiate_answer(("PCMA",), answer).codec == "PCMA"
    with pytest.raises(NoCommonCodec):
        offeranswer.negotiate_answer(("PCMA",), callee_answer("m=audio 40000 RTP/AVP 0"))


def test_negotiate_answer_rejected_or_missing_audio() -> None:
    with pytest.raises(NoCommonCodec):
        offeranswer.negotiate_answer(("PCMU",), callee_answer("m=audio 0 RTP/AVP 0"))
    with pytest.raises(NoCommonCodec):
        offeranswer.negotiate_answer(("PCMU",), callee_answer("m=video 0 RTP/AVP 96"))


def test_negotiate_answer_to_our_hold_offer() -> None:
    # We offered sendonly (holding them); they answer recvonly: we only send.
    neg = offeranswer.negotiate_answer(
        ("PCMU",), callee_answer("m=audio 40000 RTP/AVP 0", "a=recvonly")
    )
    assert (neg.direction, neg.on_hold, neg.sends, neg.receives) == (
        "sendonly",
        False,
        True,
        False,
    )
