"""The agent over TCP and TLS (RFC 3261 §18), sans-IO: Via, Contact, where responses go,
no retransmissions on a stream, and a request too big for UDP moved to TCP (§18.1.1)."""

from __future__ import annotations

import pytest

from callhook.sip.agent import Agent, CallTerminated, IncomingCall
from callhook.sip.grammar import parse_uri
from callhook.sip.message import Request, Response, parse, parse_name_addr
from callhook.sip.transaction import T1, client
from callhook.sip.transport import Local, Target, reliable, target_of

T0 = 100.0
HOST = "192.0.2.1"
OFFER = (
    b"v=0\r\no=a 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n"
    b"m=audio 40000 RTP/AVP 0\r\n"
)


def invite(transport: str, via_port: int = 5070, scheme: str = "sip") -> bytes:
    head = (
        f"INVITE {scheme}:ivr@{HOST} SIP/2.0\r\n"
        f"Via: SIP/2.0/{transport.upper()} 192.0.2.10:{via_port};branch=z9hG4bK-1\r\n"
        "From: <sip:alice@192.0.2.10>;tag=a1\r\n"
        f"To: <sip:ivr@{HOST}>\r\n"
        "Call-ID: c1@192.0.2.10\r\n"
        "CSeq: 1 INVITE\r\n"
        f"Contact: <sip:alice@192.0.2.10:{via_port}>\r\n"
        "Content-Type: application/sdp\r\n"
        f"Content-Length: {len(OFFER)}\r\n\r\n"
    )
    return head.encode() + OFFER


def agent() -> Agent:
    return Agent(HOST, 5060, ports={"tcp": 5060, "tls": 5061})


def test_a_tcp_invite_is_answered_on_its_connection_with_a_tcp_contact() -> None:
    a = agent()
    source = Target("192.0.2.10", 40123, "tcp")  # the connection's far end, not the Via's port
    a.receive(invite("tcp"), source, T0)
    (event,) = a.take_events()
    assert isinstance(event, IncomingCall) and event.source == source
    a.answer(event.call_id, b"v=0\r\n", T0 + 0.1)
    sent = a.take_datagrams()
    assert [target for _, target in sent] == [source, source]  # 100 Trying, 200 OK
    ok = parse(sent[-1][0])
    assert isinstance(ok, Response) and ok.status == 200
    contact = parse_name_addr(ok.headers.get("Contact") or "").uri
    assert (contact.host, contact.port, contact.params.get("transport")) == (HOST, 5060, "tcp")


@pytest.mark.parametrize(
    ("scheme", "contact"),
    [
        # §12.1.1: a SIPS Contact only in a SIPS dialog; a peer that called sip: may not
        # route sips: (baresip 1.0 cannot), so it gets sip: with transport=tls.
        ("sip", f"sip:ivr@{HOST}:5061;transport=tls"),
        ("sips", f"sips:ivr@{HOST}:5061"),
    ],
)
def test_a_tls_invite_gets_a_tls_contact_of_its_own_scheme(scheme: str, contact: str) -> None:
    a = agent()
    a.receive(invite("tls", scheme=scheme), Target("192.0.2.10", 40124, "tls"), T0)
    (event,) = a.take_events()
    a.answer(event.call_id, b"v=0\r\n", T0 + 0.1)
    ok = parse(a.take_datagrams()[-1][0])
    assert ok.headers.get_all("Contact") == [f"<{contact}>"]


def test_our_2xx_over_tcp_is_still_repeated_until_the_ack() -> None:
    """§13.3.1.4: the UAS core repeats its 2xx whatever the transport."""
    a = agent()
    source = Target("192.0.2.10", 40123, "tcp")
    a.receive(invite("tcp"), source, T0)
    (event,) = a.take_events()
    a.answer(event.call_id, b"v=0\r\n", T0)
    first = a.take_datagrams()[-1]
    a.handle_timer(T0 + T1)
    assert a.take_datagrams() == [first]


def test_the_bye_of_a_tcp_call_goes_over_tcp_with_a_tcp_via() -> None:
    a = agent()
    call_id = confirmed_tcp_call(a, Target("192.0.2.10", 40123, "tcp"))
    a.hang_up(call_id, T0 + 1)
    ((data, target),) = a.take_datagrams()
    bye = parse(data)
    assert isinstance(bye, Request) and bye.method == "BYE"
    # On the connection the call came on (the Contact is on the same host).
    assert target == Target("192.0.2.10", 40123, "tcp")
    assert bye.top_via.transport == "TCP"
    # No retransmission of the BYE over a stream (§17.1.2.2); Timer F still bounds it.
    a.handle_timer(T0 + 1 + 10 * T1)
    assert a.take_datagrams() == []


def test_a_request_over_1300_bytes_goes_over_tcp() -> None:
    """§18.1.1: too big for UDP with no known path MTU: TCP, and the Via says so."""
    a = agent()
    big = b"v=0\r\n" + b"a=x-padding:" + b"p" * 1400 + b"\r\n"
    a.invite("sip:bob@192.0.2.20:5070", big, T0)
    ((data, target),) = a.take_datagrams()
    assert target == Target("192.0.2.20", 5070, "tcp")
    request = parse(data)
    assert isinstance(request, Request) and request.top_via.transport == "TCP"


def test_a_small_request_stays_on_udp_and_without_a_tcp_listener_so_does_a_big_one() -> None:
    a = agent()
    a.invite("sip:bob@192.0.2.20:5070", b"v=0\r\n", T0)
    ((_, target),) = a.take_datagrams()
    assert target.transport == "udp"
    udp_only = Agent(HOST, 5060)
    udp_only.invite("sip:bob@192.0.2.20:5070", b"v=0\r\n" + b"p" * 2000, T0)
    ((_, target),) = udp_only.take_datagrams()
    assert target.transport == "udp"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("sip:bob@example.com", Target("example.com", 5060, "udp")),
        ("sip:bob@example.com;transport=TCP", Target("example.com", 5060, "tcp")),
        ("sips:bob@example.com", Target("example.com", 5061, "tls")),
        ("sip:bob@[2001:db8::1]:5070;transport=tls", Target("2001:db8::1", 5070, "tls")),
    ],
)
def test_where_a_uri_is_reached(uri: str, expected: Target) -> None:
    assert target_of(parse_uri(uri)) == expected


def test_an_unknown_transport_is_refused() -> None:
    with pytest.raises(ValueError, match="sctp"):
        target_of(parse_uri("sip:bob@example.com;transport=sctp"))


def test_local_via_and_contact_per_transport() -> None:
    local = Local("203.0.113.7", {"udp": 5060, "tcp": 5062, "tls": 5061})
    assert (
        local.via("tcp", branch_id="z9hG4bKx")
        == "SIP/2.0/TCP 203.0.113.7:5062;branch=z9hG4bKx;rport"
    )
    assert local.contact("ivr", "udp") == "<sip:ivr@203.0.113.7:5060>"
    assert local.contact("ivr", "tcp") == "<sip:ivr@203.0.113.7:5062;transport=tcp>"
    assert local.contact("ivr", "tls") == "<sip:ivr@203.0.113.7:5061;transport=tls>"
    assert local.contact("ivr", "tls", sips=True) == "<sips:ivr@203.0.113.7:5061>"
    assert Local("h", {"udp": 5080}).port("tcp") == 5080


def test_client_transactions_do_not_retransmit_on_a_stream() -> None:
    request = parse(invite("tcp"))
    assert isinstance(request, Request)
    tx, out = client(request, Target("192.0.2.20", 5060, "tcp"), T0)
    assert len(out) == 1 and reliable(tx.address.transport)
    assert set(tx.timers) == {"B"}  # no Timer A
    assert tx.on_timer(T0 + 10) == []


def test_an_outbound_call_whose_connection_fails_ends_at_once_as_a_503() -> None:
    a = agent()
    call_id = a.invite("sip:bob@192.0.2.20:5070;transport=tcp", b"v=0\r\n", T0)
    ((_, target),) = a.take_datagrams()
    assert target == Target("192.0.2.20", 5070, "tcp")
    a.transport_failed(target, T0 + 0.2)
    (ended,) = a.take_events()
    assert isinstance(ended, CallTerminated)
    assert (ended.call_id, ended.cause, ended.raw_cause) == (call_id, "failed", "503")
    assert a.calls == {}


def confirmed_tcp_call(a: Agent, source: Target) -> str:
    a.receive(invite("tcp"), source, T0)
    (event,) = a.take_events()
    a.answer(event.call_id, b"v=0\r\n", T0)
    ok = parse(a.take_datagrams()[-1][0])
    assert isinstance(ok, Response)
    ack = (
        f"ACK sip:ivr@{HOST} SIP/2.0\r\nVia: SIP/2.0/TCP 192.0.2.10:5070;branch=z9hG4bK-2\r\n"
        f"From: <sip:alice@192.0.2.10>;tag=a1\r\nTo: <sip:ivr@{HOST}>;tag={ok.to_tag}\r\n"
        "Call-ID: c1@192.0.2.10\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
    )
    a.receive(ack.encode(), source, T0 + 0.1)
    return event.call_id


def test_once_the_calls_connection_closed_the_bye_goes_to_its_contact() -> None:
    a = agent()
    source = Target("192.0.2.10", 40123, "tcp")
    call_id = confirmed_tcp_call(a, source)
    a.flow_closed(Target("192.0.2.10", 40999, "tcp"), T0 + 0.5)  # another connection
    a.flow_closed(source, T0 + 0.6)
    a.hang_up(call_id, T0 + 1)
    ((_, target),) = a.take_datagrams()
    # The Contact named no transport: the dialog goes on over the one it was made on.
    assert target == Target("192.0.2.10", 5070, "tcp")


def test_a_connection_from_another_host_is_never_used_for_the_call() -> None:
    """A Contact on another host than the connection (a NAT's other side, a proxy without
    Record-Route): its own address, over a connection to it."""
    a = agent()
    source = Target("198.51.100.7", 40123, "tcp")  # the Via and Contact say 192.0.2.10
    call_id = confirmed_tcp_call(a, source)
    a.hang_up(call_id, T0 + 1)
    ((_, target),) = a.take_datagrams()
    assert target == Target("192.0.2.10", 5070, "tcp")


def test_a_trunks_big_invite_keeps_its_configured_udp() -> None:
    a = agent()
    big = b"v=0\r\n" + b"a=x-padding:" + b"p" * 1400 + b"\r\n"
    a.invite("sip:bob@192.0.2.20:5070", big, T0, fixed_transport=True)
    ((_, target),) = a.take_datagrams()
    assert target.transport == "udp"


def test_an_invite_that_grows_past_1300_bytes_with_credentials_moves_and_its_cancel_follows() -> (
    None
):
    from callhook.sip.agent import Credentials
    from callhook.sip.message import serialize
    from callhook.sip.responses import make_response

    a = agent()
    sdp = b"v=0\r\n" + b"a=x-padding:" + b"p" * 800 + b"\r\n"  # under 1300 without auth
    call_id = a.invite(
        "sip:bob@192.0.2.20:5070", sdp, T0, credentials=Credentials("u" * 40, "secret")
    )
    ((data, target),) = a.take_datagrams()
    first = parse(data)
    assert isinstance(first, Request) and target.transport == "udp"
    challenge = make_response(first, 407, server="proxy", to_tag="p1")
    challenge.headers.add(
        "Proxy-Authenticate",
        'Digest realm="'
        + "r" * 60
        + '", nonce="'
        + "n" * 80
        + '", qop="auth", opaque="'
        + "o" * 60
        + '", algorithm=SHA-256',
    )
    a.receive(serialize(challenge), target, T0 + 0.1)
    out = a.take_datagrams()
    (again, moved_to) = out[-1]
    assert len(again) > 1300 and moved_to == Target("192.0.2.20", 5070, "tcp")
    a.receive(
        serialize(make_response(parse(again), 180, server="callee", to_tag="c1")),  # type: ignore[arg-type]
        moved_to,
        T0 + 0.2,
    )
    a.hang_up(call_id, T0 + 0.3)
    cancels = [(parse(d), t) for d, t in a.take_datagrams()]
    ((cancel, cancel_to),) = [(m, t) for m, t in cancels if isinstance(m, Request)]
    assert cancel.method == "CANCEL" and cancel_to == moved_to
    assert cancel.top_via.transport == "TCP"


def test_a_failed_connection_spares_transactions_that_were_answered() -> None:
    a = agent()
    call_id = a.invite("sip:bob@192.0.2.20:5070;transport=tcp", b"v=0\r\n", T0)
    ((data, target),) = a.take_datagrams()
    from callhook.sip.message import serialize
    from callhook.sip.responses import make_response

    invite = parse(data)
    assert isinstance(invite, Request)
    a.receive(serialize(make_response(invite, 180, server="b", to_tag="b1")), target, T0 + 0.1)
    a.take_events()
    a.transport_failed(target, T0 + 0.2)  # it rings: the callee has the INVITE
    assert a.take_events() == [] and call_id in a.calls


def test_too_large_answers_a_request_head_with_413_and_nothing_else() -> None:
    a = agent()
    head = (
        invite("tcp").split(b"\r\n\r\n")[0].replace(b"Content-Length: 85", b"Content-Length: 99999")
        + b"\r\n\r\n"
    )
    answer = a.too_large(head)
    assert answer is not None
    response = parse(answer)
    assert isinstance(response, Response) and response.status == 413
    assert response.cseq == (1, "INVITE")
    ok = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/TCP h;branch=z9hG4bKx\r\nContent-Length: 9999\r\n\r\n"
    assert a.too_large(ok) is None
    assert a.too_large(b"garbage\r\n\r\n") is None
    assert b"\r\nServer:" in answer
    # To a source outside [security] allow that is answered (unknown = "reject"), as its
    # 403: nothing says what answers.
    anonymous = a.too_large(head, anonymous=True)
    assert anonymous is not None and anonymous.startswith(b"SIP/2.0 413 ")
    assert b"\r\nServer:" not in anonymous
