"""A worker's agent behind the proxy of ``serve --workers`` (sip/front.py), on a virtual clock:
the source the proxy names is believed from the proxy only; calls and registrations leave
through the proxy, naming where they go; in-dialog requests go to it whatever the route set
names; a trunk registers the proxy's public address, and no NAT moves it."""

from __future__ import annotations

from callhook.sip.agent import Agent, Credentials, IncomingCall
from callhook.sip.front import DESTINATION, SOURCE, Front, destination_uri
from callhook.sip.message import Request, Response, parse, serialize
from callhook.sip.registration import RegistrationSpec
from callhook.sip.registrations import KEEPALIVE
from callhook.sip.responses import make_response
from callhook.sip.transport import Target
from tests.unit.sip.test_sip_agent import OFFER, events_of, one_request, reply, sent, sip_request
from tests.unit.sip.test_sip_registrations import sent_requests

T0 = 100.0
PROXY = Target("10.0.0.1", 5060)  # Kamailio, as the worker reaches it
PUBLIC = "203.0.113.7"  # Kamailio's address for the outside world (behind NAT)
FRONT = Front(PROXY, frozenset({"10.0.0.1"}), public_host=PUBLIC, public_ports={"udp": 5060})
TRUNK = Target("192.0.2.50", 5080, "tcp")  # a provider's proxy, resolved
CALLER = "sip:198.51.100.9:40000;transport=udp"


def answered_through_proxy(agent: Agent, invite: Request, contact: str) -> tuple[Request, Target]:
    """The far end's 200 to ``invite``, its route set the proxy's public address: the ACK
    the worker sends, and where to."""
    ok = reply(invite, 200, record_route=[f"<sip:{PUBLIC}:5060;lr>"], contact=contact, body=OFFER)
    agent.receive(ok, PROXY, T0 + 0.5)
    return one_request(agent)


def worker() -> Agent:
    agent = Agent(PUBLIC, 5101)
    agent.use_front(FRONT)
    return agent


def test_the_source_is_believed_from_the_proxy_only() -> None:
    named = sip_request("INVITE", body=OFFER, headers=[(SOURCE, CALLER)])
    request = parse(named)
    assert isinstance(request, Request)
    assert FRONT.origin(request, PROXY) == Target("198.51.100.9", 40000, "udp")
    # From anywhere else the header is the sender's word: ignored.
    assert FRONT.origin(request, Target("198.51.100.66", 5060)) == ("198.51.100.66", 5060, "udp")
    for bad in ("not a uri", "tel:+1555", "sip:"):
        spoiled = parse(sip_request("INVITE", body=OFFER, headers=[(SOURCE, bad)]))
        assert isinstance(spoiled, Request)
        assert FRONT.origin(spoiled, PROXY) == PROXY
    assert destination_uri(Target("::1", 5070, "tcp")) == "sip:[::1]:5070;transport=tcp"


def test_an_incoming_call_through_the_proxy_comes_from_the_source_it_names() -> None:
    agent = worker()
    # The proxy's Via names its public address: the answer goes where the request came
    # from (§18.2.2: "received"), which is where the worker reaches the proxy.
    via = f"SIP/2.0/UDP {PUBLIC}:5060;branch=z9hG4bK-proxy-1"
    agent.receive(sip_request("INVITE", body=OFFER, via=via, headers=[(SOURCE, CALLER)]), PROXY, T0)
    (trying, to), *_ = sent(agent)
    assert isinstance(trying, Response) and trying.status == 100 and to == PROXY
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall)
    assert event.source == Target("198.51.100.9", 40000, "udp")
    # Not a worker: the same header means nothing.
    plain = Agent(PUBLIC, 5060)
    plain.receive(sip_request("INVITE", body=OFFER, headers=[(SOURCE, CALLER)]), PROXY, T0)
    (event,) = plain.take_events()
    assert isinstance(event, IncomingCall) and event.source == PROXY


def test_a_call_out_leaves_through_the_proxy_naming_its_next_hop() -> None:
    agent = worker()
    call_id = agent.invite(
        "sip:+15551234@carrier.example",
        OFFER,
        T0,
        address=TRUNK,
        credentials=Credentials("me", "secret"),
    )
    invite, to = one_request(agent)
    assert to == PROXY
    assert invite.headers.get(DESTINATION) == "sip:192.0.2.50:5080;transport=tcp"
    assert invite.top_via.transport == "UDP"  # the hop to the proxy
    assert invite.uri == "sip:+15551234@carrier.example"
    # Challenged: the answer goes the same way, still naming the next hop.
    challenge = 'Digest realm="carrier.example", nonce="n1", algorithm=MD5'
    agent.receive(reply(invite, 407, headers=[("Proxy-Authenticate", challenge)]), PROXY, T0 + 0.1)
    again = [r for r, t in sent_requests(agent) if r.method == "INVITE" and t == PROXY]
    (second,) = again
    assert second.headers.get(DESTINATION) == invite.headers.get(DESTINATION)
    assert "Proxy-Authorization" in second.headers
    # Answered with the proxy in the route set by its public address: the ACK and the BYE
    # go to the proxy where the worker reaches it, with the route set as it is.
    ack, ack_to = answered_through_proxy(agent, second, "<sip:+15551234@192.0.2.77:5060>")
    assert ack.method == "ACK" and ack_to == PROXY
    assert ack.headers.get_all("Route") == [f"<sip:{PUBLIC}:5060;lr>"]
    assert DESTINATION not in ack.headers  # in a dialog the route set says where
    agent.take_events()
    agent.hang_up(call_id, T0 + 2.0)
    bye, bye_to = one_request(agent)
    assert bye.method == "BYE" and bye_to == PROXY and bye.uri == "sip:+15551234@192.0.2.77:5060"


def test_a_trunk_registers_the_proxys_public_address_and_no_nat_moves_it() -> None:
    agent = worker()
    spec = RegistrationSpec("provider", "sip.example:5060", "me", "secret", expires=300)
    agent.register(spec, T0, Target("192.0.2.50", 5060))
    ((register, to),) = sent_requests(agent)
    assert to == PROXY and register.top_via.transport == "UDP"
    assert register.headers.get("Contact") == f"<sip:me@{PUBLIC}:5060>"
    assert register.headers.get(DESTINATION) == "sip:192.0.2.50:5060"
    # The registrar saw the proxy's Via; ours comes back marked with where the proxy saw
    # us: not a NAT to follow (the Contact is the proxy's, on purpose).
    response = make_response(register, 200, server="registrar", to_tag="r1")
    response.headers.remove("Via")
    response.headers.add("Via", register.headers.get_all("Via")[0] + ";received=10.0.0.1")
    response.headers.add("Contact", f"<sip:me@{PUBLIC}:5060>;expires=300")
    agent.receive(serialize(response), PROXY, T0 + 0.1)
    registration = agent.registrations.by_name["provider"]
    assert registration.state == "registered" and registration.reason == ""
    assert registration.contact_host == PUBLIC
    # Nothing until the refresh: no re-REGISTER for a "NAT", no keep-alives (the
    # proxy's flow to the registrar is its own business).
    agent.handle_timer(T0 + 0.1 + KEEPALIVE + 1)
    assert agent.take_datagrams() == []


def test_a_source_the_guard_banned_is_refused_though_the_proxy_is_not() -> None:
    agent = worker()
    banned = {"198.51.100.9"}
    agent.origin_banned = lambda host, now: host in banned
    via = f"SIP/2.0/UDP {PUBLIC}:5060;branch=z9hG4bK-proxy-2"
    agent.receive(sip_request("INVITE", body=OFFER, via=via, headers=[(SOURCE, CALLER)]), PROXY, T0)
    # Answered, not dropped: a worker silent to the proxy would be taken for dead.
    ((refused, to),) = sent(agent)
    assert isinstance(refused, Response) and refused.status == 403 and to == PROXY
    assert agent.take_events() == []
    # Another caller through the same proxy is not.
    other = "sip:198.51.100.10:5060"
    agent.receive(
        sip_request("INVITE", call_id="c2", body=OFFER, via=via + "x", headers=[(SOURCE, other)]),
        PROXY,
        T0,
    )
    (event,) = agent.take_events()
    assert isinstance(event, IncomingCall) and event.source.host == "198.51.100.10"


def test_a_call_to_a_phone_names_its_flow_in_every_request_of_the_dialog() -> None:
    """A registered phone behind a NAT is reached only where its REGISTER came from: through
    the proxy, every request of the call names that address (the proxy's route set would
    lead to the phone's private Contact)."""
    agent = worker()
    flow = Target("198.51.100.9", 40000)
    call_id = agent.invite("sip:alice@192.168.1.20:5060", OFFER, T0, address=flow, pinned=True)
    invite, to = one_request(agent)
    assert to == PROXY and invite.headers.get(DESTINATION) == "sip:198.51.100.9:40000"
    ack, ack_to = answered_through_proxy(agent, invite, "<sip:alice@192.168.1.20:5060>")
    assert ack_to == PROXY and ack.headers.get(DESTINATION) == "sip:198.51.100.9:40000"
    agent.take_events()
    agent.hang_up(call_id, T0 + 1.0)
    bye, bye_to = one_request(agent)
    assert bye_to == PROXY and bye.headers.get(DESTINATION) == "sip:198.51.100.9:40000"
    # A phone registered over TLS: its flow is the connection it opened to the proxy, where
    # its TLS ends; the call goes through the proxy too (not past it, as to a TLS trunk).
    tls_flow = Target("198.51.100.9", 40001, "tls")
    agent.invite("sip:alice@192.168.1.20;transport=tls", OFFER, T0, address=tls_flow, pinned=True)
    invite, to = one_request(agent)
    assert to == PROXY
    assert invite.headers.get(DESTINATION) == "sip:198.51.100.9:40001;transport=tls"


TLS_TRUNK = Target("sip.carrier.example", 5061, "tls")  # checked by name (callhook/config/tls.py)


def test_a_trunk_over_tls_is_reached_past_the_proxy_on_the_workers_own_connection() -> None:
    # Kamailio's TLS client does not check that a certificate names the host it called:
    # the worker keeps its own connection to such a trunk, for everything.
    assert FRONT.carries("udp") and FRONT.carries("tcp") and not FRONT.carries("tls")
    agent = worker()
    spec = RegistrationSpec("carrier", "sip.carrier.example:5061", "me", "pw", transport="tls")
    agent.register(spec, T0, TLS_TRUNK)
    ((register, to),) = sent_requests(agent)
    assert to == TLS_TRUNK and DESTINATION not in register.headers
    assert register.top_via.transport == "TLS"
    # No TLS listener at the proxy: the worker's own address, on the connection.
    assert register.headers.get("Contact") == f"<sips:me@{PUBLIC}:5101>"
    # A call out: straight there, and so are its ACK and BYE.
    call_id = agent.invite("sips:+15551234@sip.carrier.example", OFFER, T0, address=TLS_TRUNK)
    invite, to = one_request(agent)
    assert to == TLS_TRUNK and DESTINATION not in invite.headers
    # (The carrier's proxy stays in the dialog: Record-Route by its name.)
    route = ["<sip:sip.carrier.example:5061;transport=tls;lr>"]
    ok = reply(invite, 200, record_route=route, contact="<sips:+15551234@192.0.2.77>", body=OFFER)
    agent.receive(ok, TLS_TRUNK, T0 + 0.5)
    ack, ack_to = one_request(agent)
    assert ack.method == "ACK" and ack_to == TLS_TRUNK
    agent.take_events()
    agent.hang_up(call_id, T0 + 2.0)
    bye, bye_to = one_request(agent)
    assert bye.method == "BYE" and bye_to == TLS_TRUNK
    # The trunk's call on that connection: answered there, hung up there.
    via = "SIP/2.0/TLS 192.0.2.50:5061;branch=z9hG4bK-carrier-1"
    contact = "<sip:sip.carrier.example:5061;transport=tls>"
    invite_in = sip_request("INVITE", call_id="in-1", body=OFFER, via=via, contact=contact)
    agent.receive(invite_in, TLS_TRUNK, T0 + 3)
    (trying, to), *_ = sent(agent)
    assert isinstance(trying, Response) and to == TLS_TRUNK
    (event,) = events_of(agent, IncomingCall)
    assert isinstance(event, IncomingCall) and event.source == TLS_TRUNK
    agent.answer(event.call_id, OFFER, T0 + 3.1)
    (answered, to), *_ = sent(agent)
    assert isinstance(answered, Response) and answered.status == 200 and to == TLS_TRUNK
    ack_via = via.replace("carrier-1", "carrier-2")
    ack_in = sip_request("ACK", call_id="in-1", via=ack_via, to_tag=answered.to_tag)
    agent.receive(ack_in, TLS_TRUNK, T0 + 3.2)
    agent.hang_up(event.call_id, T0 + 4)
    bye, bye_to = one_request(agent)
    assert bye.method == "BYE" and bye_to == TLS_TRUNK


def test_a_tls_trunk_names_the_workers_own_address_even_if_the_proxy_listens_for_tls() -> None:
    # Through the proxy's TLS listener, the calls' requests would leave the proxy on a
    # TLS connection of its own, unchecked: the provider is to use the worker's.
    agent = Agent(PUBLIC, 5101)
    agent.use_front(Front(PROXY, frozenset({"10.0.0.1"}), PUBLIC, {"udp": 5060, "tls": 5061}))
    spec = RegistrationSpec("carrier", "sip.carrier.example:5061", "me", "pw", transport="tls")
    agent.register(spec, T0, TLS_TRUNK)
    ((register, to),) = sent_requests(agent)
    assert to == TLS_TRUNK
    assert register.headers.get("Contact") == f"<sips:me@{PUBLIC}:5101>"
